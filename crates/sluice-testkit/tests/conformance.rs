//! The conformance suite over every device stack the server can build,
//! and the proof that it catches broken devices: one that drops FUA and
//! one that serves stale data after zeroing and trim.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sluice_storage::{
    BlockDevice, CacheConfig, CacheDevice, CacheMode, DeviceError, FaultInjectionDevice,
    FileDevice, FileOptions, MemDevice, PowerLossConfig, PowerLossDevice, ZeroMode,
};
use sluice_testkit::conformance::{self, Access, Outcome, Subject};
use sluice_testkit::crash::KillSwitchDevice;

const SIZE: u64 = 4 << 20;

fn mem(access: Access) -> Arc<dyn BlockDevice> {
    Arc::new(MemDevice::new(SIZE, access == Access::ReadOnly))
}

/// A sparse image file in `dir`, opened with `access` (a read-only one
/// is created first).
fn file_in(dir: &Path, access: Access, direct: bool) -> Arc<dyn BlockDevice> {
    let path = dir.join("image");
    let open = |read_only| {
        FileDevice::open(
            &path,
            &FileOptions {
                read_only,
                direct,
                size: Some(SIZE),
            },
        )
    };
    if access == Access::ReadOnly {
        drop(open(false).expect("create the image"));
    }
    match open(access == Access::ReadOnly) {
        Ok(f) => Arc::new(f),
        Err(e) if direct => panic!(
            "cannot open {} with O_DIRECT ({e}): the file+direct stack needs a filesystem \
             that supports it under CARGO_TARGET_TMPDIR",
            path.display()
        ),
        Err(e) => panic!("cannot open {}: {e}", path.display()),
    }
}

fn file(access: Access) -> Subject {
    let dir = tempfile::tempdir().expect("temporary directory");
    Subject::new(file_in(dir.path(), access, false)).keeping(dir)
}

/// O_DIRECT needs a real filesystem; tmpfs (often /tmp) refuses it, so
/// the image lives under the target directory.
fn file_direct(access: Access) -> Subject {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory");
    Subject::new(file_in(dir.path(), access, true)).keeping(dir)
}

/// A small cache, so the suite's 1 MiB working sets evict and write back.
fn cached(inner: Arc<dyn BlockDevice>, mode: CacheMode) -> Arc<dyn BlockDevice> {
    Arc::new(
        CacheDevice::new(
            inner,
            CacheConfig {
                mode,
                capacity: 1 << 20,
                high_watermark: 256 << 10,
                low_watermark: 64 << 10,
                readahead_max: 1 << 20,
                prefetch_threads: 2,
            },
        )
        .expect("start the cache"),
    )
}

fn cache_over_file(access: Access, mode: CacheMode) -> Subject {
    let dir = tempfile::tempdir().expect("temporary directory");
    Subject::new(cached(file_in(dir.path(), access, false), mode)).keeping(dir)
}

/// A simulated disk with a volatile cache that writes down early and
/// tears writes often, so the checks see it misbehave as much as a disk
/// may.
fn power_loss_disk(inner: Arc<dyn BlockDevice>) -> Arc<PowerLossDevice> {
    Arc::new(PowerLossDevice::new(
        inner,
        PowerLossConfig {
            seed: 7,
            early_write_percent: 40,
            torn_percent: 30,
            max_cached_bytes: 1 << 20,
        },
    ))
}

fn power_loss(access: Access) -> Subject {
    let disk = power_loss_disk(mem(access));
    let crash = Arc::clone(&disk);
    Subject::new(disk).with_crash(move || {
        crash.power_loss();
        crash
    })
}

/// What `power-loss` and `--cache writeback` build: the cache over the
/// simulated disk. A crash kills the process (the cache can no longer
/// reach the disk), then cuts the power.
fn cache_writeback_over_power_loss(access: Access) -> Subject {
    let disk = power_loss_disk(mem(access));
    let process = Arc::new(KillSwitchDevice::new(
        Arc::clone(&disk) as Arc<dyn BlockDevice>
    ));
    let cache = cached(
        Arc::clone(&process) as Arc<dyn BlockDevice>,
        CacheMode::WriteBack,
    );
    Subject::new(cache).with_crash(move || {
        process.kill();
        disk.power_loss();
        disk
    })
}

sluice_testkit::conformance_tests! {
    mem => |access| Subject::new(mem(access)),
    file => file,
    file_direct => file_direct,
    cache_writethrough_mem => |access| Subject::new(cached(mem(access), CacheMode::WriteThrough)),
    cache_writeback_mem => |access| Subject::new(cached(mem(access), CacheMode::WriteBack)),
    cache_writethrough_file => |access| cache_over_file(access, CacheMode::WriteThrough),
    cache_writeback_file => |access| cache_over_file(access, CacheMode::WriteBack),
    fault_without_rules => |access| Subject::new(Arc::new(FaultInjectionDevice::new(
        mem(access),
        "conformance",
        Vec::new(),
    ))),
    power_loss => power_loss,
    cache_writeback_over_power_loss => cache_writeback_over_power_loss,
}

/// A broken layer: FUA writes go down as plain writes.
#[derive(Debug)]
struct DropsFua {
    inner: Arc<dyn BlockDevice>,
}

impl sluice_storage::DeviceLayer for DropsFua {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> Result<(), DeviceError> {
        self.inner.write_at(buf, offset, false)
    }
}

#[test]
fn the_suite_catches_a_layer_that_drops_fua() {
    let factory = |access| {
        let disk = power_loss_disk(mem(access));
        let crash = Arc::clone(&disk);
        Subject::new(Arc::new(DropsFua {
            inner: Arc::clone(&disk) as Arc<dyn BlockDevice>,
        }))
        .with_crash(move || {
            crash.power_loss();
            crash
        })
    };
    let failure = conformance::flush_and_fua_survive_a_crash(&factory)
        .expect_err("FUA writes that were never durable must be found lost");
    assert!(failure.0.contains("lost"), "{failure}");
    // The rest of the suite cannot see it: the bug is only in durability.
    assert_eq!(
        conformance::round_trips_at_every_alignment(&factory),
        Ok(Outcome::Passed)
    );
}

const STALE_BLOCK: u64 = 4096;

/// A broken read cache: it keeps copies of the blocks it read and updates
/// them on writes, but forgets to drop them on trim and write zeroes.
#[derive(Debug)]
struct StaleReadCache {
    inner: Arc<dyn BlockDevice>,
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
}

impl sluice_storage::DeviceLayer for StaleReadCache {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        // Ranges are checked by the device beneath.
        self.inner.read_at(buf, offset)?;
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        let end = offset + buf.len() as u64;
        for idx in offset / STALE_BLOCK..end.div_ceil(STALE_BLOCK) {
            let start = idx * STALE_BLOCK;
            let block = match blocks.entry(idx) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let mut data = vec![0u8; STALE_BLOCK as usize];
                    self.inner.read_at(&mut data, start)?;
                    e.insert(data)
                }
            };
            let (lo, hi) = (start.max(offset), (start + STALE_BLOCK).min(end));
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&block[(lo - start) as usize..(hi - start) as usize]);
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.inner.write_at(buf, offset, fua)?;
        let mut blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
        let end = offset + buf.len() as u64;
        for idx in offset / STALE_BLOCK..end.div_ceil(STALE_BLOCK) {
            if let Some(block) = blocks.get_mut(&idx) {
                let start = idx * STALE_BLOCK;
                let (lo, hi) = (start.max(offset), (start + STALE_BLOCK).min(end));
                block[(lo - start) as usize..(hi - start) as usize]
                    .copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]);
            }
        }
        Ok(())
    }
    // The bug: trim and write_zeroes are forwarded (the defaults) without
    // dropping the cached copies of the range.
}

fn stale_read_cache(access: Access) -> Subject {
    Subject::new(Arc::new(StaleReadCache {
        inner: mem(access),
        blocks: Mutex::new(HashMap::new()),
    }))
}

#[test]
fn the_suite_catches_stale_data_after_write_zeroes_and_trim() {
    let zero = conformance::write_zeroes_read_back_as_zeroes(&stale_read_cache)
        .expect_err("cached data must be seen to survive a zeroing");
    assert!(zero.0.contains("after zeroing"), "{zero}");
    let trim = conformance::trim_leaves_old_data_or_zeroes(&stale_read_cache)
        .expect_err("cached data over a range reported as zero must be found");
    assert!(trim.0.contains("says zero"), "{trim}");
    conformance::operation_sequences_match_a_model(&stale_read_cache)
        .expect_err("a random sequence finds it too");
    // Writes and reads alone are right: the bug is only in invalidation.
    assert_eq!(
        conformance::round_trips_at_every_alignment(&stale_read_cache),
        Ok(Outcome::Passed)
    );
}

#[test]
fn the_broken_cache_is_fine_once_it_drops_what_it_zeroes() {
    // The same layer with the invalidation written passes the checks that
    // failed above, so they fail for the bug and not for the layer's shape.
    #[derive(Debug)]
    struct Invalidating(StaleReadCache);
    impl Invalidating {
        fn forget(&self, offset: u64, length: u64) {
            let mut blocks = self.0.blocks.lock().unwrap_or_else(|p| p.into_inner());
            let end = offset.saturating_add(length);
            blocks.retain(|idx, _| {
                let start = idx * STALE_BLOCK;
                start + STALE_BLOCK <= offset || start >= end
            });
        }
    }
    impl sluice_storage::DeviceLayer for Invalidating {
        fn inner(&self) -> &dyn BlockDevice {
            &self.0
        }
        fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
            self.0.inner.trim(offset, length, fua)?;
            self.forget(offset, length);
            Ok(())
        }
        fn write_zeroes(
            &self,
            offset: u64,
            length: u64,
            mode: ZeroMode,
        ) -> Result<(), DeviceError> {
            self.0.inner.write_zeroes(offset, length, mode)?;
            self.forget(offset, length);
            Ok(())
        }
    }
    let factory = |access| {
        Subject::new(Arc::new(Invalidating(StaleReadCache {
            inner: mem(access),
            blocks: Mutex::new(HashMap::new()),
        })))
    };
    for check in [
        conformance::write_zeroes_read_back_as_zeroes,
        conformance::trim_leaves_old_data_or_zeroes,
        conformance::operation_sequences_match_a_model,
    ] {
        assert_eq!(check(&factory), Ok(Outcome::Passed));
    }
}

/// A device without fast zeroing: it refuses fast zeroes when `honest`,
/// and zeroes anyway (slowly, as far as a client knows) when not.
#[derive(Debug)]
struct NoFastZero {
    inner: Arc<dyn BlockDevice>,
    honest: bool,
}

impl sluice_storage::DeviceLayer for NoFastZero {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn capability(&self) -> sluice_storage::Capability {
        sluice_storage::Capability {
            fast_zero: false,
            ..self.inner.capability()
        }
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        if mode.fast && self.honest {
            return Err(DeviceError::Unsupported {
                device: "no-fast-zero test device".into(),
                op: sluice_storage::IoOp::WriteZeroes,
                reason: "no fast zeroing",
            });
        }
        self.inner.write_zeroes(offset, length, mode)
    }
}

#[test]
fn fast_zero_is_held_to_the_capability() {
    let device = |honest| {
        move |access| {
            Subject::new(Arc::new(NoFastZero {
                inner: mem(access),
                honest,
            }))
        }
    };
    assert_eq!(
        conformance::fast_zero_is_refused_or_zeroes(&device(true)),
        Ok(Outcome::Passed)
    );
    let failure = conformance::fast_zero_is_refused_or_zeroes(&device(false))
        .expect_err("a fast zero the device does not offer must be refused");
    assert!(failure.0.contains("without fast zeroing"), "{failure}");
}
