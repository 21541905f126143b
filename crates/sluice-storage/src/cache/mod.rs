//! A buffer cache in front of any device, shared by every connection of an
//! export: SuperNBD's asynchronous (write-back) writes, adaptive
//! read-ahead across requests and clients, and single-flight loading so
//! that concurrent reads of one block cause one device read.
//!
//! The cache holds 64 KiB blocks with a valid and a dirty bit per 512-byte
//! sector, so sector-aligned writes never read the device first. Dirty
//! data is written back by a background thread once it passes the high
//! watermark, down to the low one, and by `flush`, which also syncs the
//! device: FLUSH and FUA keep their meaning through the cache.
//!
//! Locking: a shard lock guards the index (block number → block); each
//! block has its own mutex, never held across device I/O. A block being
//! loaded or written back carries a flag others wait on, so device I/O of
//! different blocks runs in parallel and one block is never loaded twice
//! or written back out of order.
//!
//! FLUSH costs what its dirty data costs: a sorted set of the blocks that
//! hold dirty sectors or are being written back is kept beside the index,
//! changed only with the block's mutex held (lock order: block, then the
//! set), so FLUSH and FUA find their blocks without looking at clean
//! ones. Write-back goes in ascending block order, copying the dirty
//! sectors of consecutive blocks into one buffer so adjacent dirty data
//! goes down as one write of up to 1 MiB. A few runs of blocks (the fsync
//! after a few 4 KiB writes) are written by the asking thread alone; more
//! are shared with long-lived write-back workers started with the cache,
//! so a device that serves parallel writes drains them at its full rate
//! and no thread is ever started per FLUSH. A batch keeps its blocks
//! claimed until its writes are done and only waits on blocks above the
//! ones it holds, so two batches never wait on each other.
//! docs/BENCHMARKS.md has the measurements that chose this.
//!
//! Here: the public types and the device's I/O paths. A block and its
//! sector masks are in `block`, the index, eviction and loads in `index`,
//! write-back and its threads in `writeback`, read-ahead and its threads
//! in `readahead`, the counters in `metrics`.

mod block;
mod index;
mod metrics;
mod readahead;
mod writeback;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;

use block::{full_sector_mask, pieces, sector_mask, BLOCK, SECTOR};
use index::{Shard, SHARDS};
use metrics::Stats;
use readahead::ReadAhead;
use writeback::WriteBackJob;

use crate::{
    check_range, BlockDevice, BlockingClass, Capability, DeviceError, DeviceMetric, Extent, IoOp,
    ZeroMode,
};

/// How writes are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// Writes are acknowledged once cached and written back later;
    /// FLUSH/FUA write back and sync before they complete.
    #[default]
    WriteBack,
    /// Writes go to the device before they complete; reads are cached.
    WriteThrough,
}

/// Cache sizing and policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Write policy.
    pub mode: CacheMode,
    /// Bytes of cached data (rounded down to whole 64 KiB blocks).
    pub capacity: u64,
    /// Dirty bytes above which background write-back starts and writers
    /// are throttled.
    pub high_watermark: u64,
    /// Dirty bytes background write-back brings the cache down to.
    pub low_watermark: u64,
    /// Largest read-ahead window; 0 disables read-ahead.
    pub readahead_max: u64,
    /// Threads that prefetch for read-ahead and NBD_CMD_CACHE.
    pub prefetch_threads: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            mode: CacheMode::WriteBack,
            capacity: 256 << 20,
            high_watermark: 64 << 20,
            low_watermark: 16 << 20,
            readahead_max: 4 << 20,
            prefetch_threads: 2,
        }
    }
}

/// Shared state; the prefetch and write-back threads hold weak references.
#[derive(Debug)]
struct Inner {
    device: Arc<dyn BlockDevice>,
    config: CacheConfig,
    size: u64,
    /// The device refuses writes: they are passed down to be refused.
    read_only: bool,
    shards: Box<[Shard]>,
    /// Blocks in insertion order, for second-chance eviction.
    order: Mutex<VecDeque<u64>>,
    /// Blocks with dirty sectors or a write-back under way: exactly those
    /// whose state has `dirty != 0 || writing`, changed only under the
    /// block's mutex (taken after it, never before).
    dirty: Mutex<BTreeSet<u64>>,
    blocks: AtomicU64,
    stats: Stats,
    readahead: Mutex<ReadAhead>,
    prefetch_tx: Mutex<Option<std::sync::mpsc::Sender<(u64, u64)>>>,
    /// Hands large write-backs to the long-lived write-back workers.
    writeback_tx: Mutex<Option<std::sync::mpsc::Sender<Arc<WriteBackJob>>>>,
    /// Wakes the write-back thread; writers wait on it when throttled.
    writeback: (Mutex<bool>, Condvar),
    /// Set by `Drop` so the background threads exit.
    closing: AtomicBool,
    label: String,
}

/// A caching wrapper around a device. See the module docs.
#[derive(Debug)]
pub struct CacheDevice {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl CacheDevice {
    /// Wraps `device` with a cache.
    pub fn new(device: Arc<dyn BlockDevice>, config: CacheConfig) -> Result<Self, DeviceError> {
        let size = device.size();
        let label = format!("cache over {device:?}").chars().take(120).collect();
        let mut config = config;
        config.capacity = config.capacity.max(BLOCK * 16);
        config.high_watermark = config.high_watermark.min(config.capacity / 2).max(BLOCK);
        config.low_watermark = config.low_watermark.min(config.high_watermark / 2);
        let read_only = device.capability().read_only;
        let inner = Arc::new(Inner {
            device,
            config,
            size,
            read_only,
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            order: Mutex::new(VecDeque::new()),
            dirty: Mutex::new(BTreeSet::new()),
            blocks: AtomicU64::new(0),
            stats: Stats::default(),
            readahead: Mutex::new(ReadAhead::default()),
            prefetch_tx: Mutex::new(None),
            writeback_tx: Mutex::new(None),
            writeback: (Mutex::new(false), Condvar::new()),
            closing: AtomicBool::new(false),
            label,
        });
        let mut threads = Vec::new();
        readahead::start_prefetchers(&inner, &mut threads)?;
        if config.mode == CacheMode::WriteBack {
            writeback::start_threads(&inner, &mut threads)?;
        }
        Ok(Self { inner, threads })
    }

    /// Dirty bytes not yet written back.
    pub fn dirty_bytes(&self) -> u64 {
        self.inner.stats.dirty_bytes.load(Ordering::Relaxed)
    }

    /// Device reads issued so far (loads and prefetches).
    pub fn device_reads(&self) -> u64 {
        self.inner.stats.device_reads.load(Ordering::Relaxed)
    }

    /// Bytes read from the device so far.
    pub fn device_read_bytes(&self) -> u64 {
        self.inner.stats.device_read_bytes.load(Ordering::Relaxed)
    }

    fn read_cached(&self, buf: &mut [u8], offset: u64, nowait: bool) -> Result<bool, DeviceError> {
        let inner = &self.inner;
        check_range(
            &inner.label,
            IoOp::Read,
            inner.size,
            offset,
            buf.len() as u64,
        )?;
        if !nowait {
            if let Some((from, to)) = inner.observe_read(offset, buf.len() as u64) {
                inner.schedule_prefetch(from, to);
            }
        }
        let mut result = Ok(true);
        pieces(offset, buf.len() as u64, |idx, from, to, range| {
            if !matches!(result, Ok(true)) {
                return;
            }
            let mask = sector_mask(from, to);
            loop {
                let block = if nowait {
                    match inner.lookup(idx) {
                        Some(b) => b,
                        None => {
                            result = Ok(false);
                            return;
                        }
                    }
                } else {
                    inner.get_or_insert(idx)
                };
                let mut st = block.lock();
                if st.removed {
                    continue;
                }
                if st.valid & mask != mask {
                    if nowait {
                        result = Ok(false);
                        return;
                    }
                    inner.stats.read_misses.fetch_add(1, Ordering::Relaxed);
                    st = match inner.load(idx, &block, st) {
                        Ok(st) => st,
                        Err(e) => {
                            result = Err(e);
                            return;
                        }
                    };
                    if st.removed {
                        continue;
                    }
                } else {
                    inner.stats.read_hits.fetch_add(1, Ordering::Relaxed);
                }
                if st.prefetched {
                    st.prefetched = false;
                    inner
                        .stats
                        .readahead_hit_bytes
                        .fetch_add(inner.block_len(idx), Ordering::Relaxed);
                }
                buf[range.clone()].copy_from_slice(&st.data[from as usize..to as usize]);
                return;
            }
        });
        if nowait && matches!(result, Ok(true)) {
            // Served from cache without waiting: still feed the detector.
            if let Some((from, to)) = inner.observe_read(offset, buf.len() as u64) {
                inner.schedule_prefetch(from, to);
            }
        }
        result
    }

    /// Stops cached copies of a range from shadowing the device around a
    /// device operation that changes the range (write-through write, trim,
    /// write zeroes). Before the operation (`after == false`) dirty data in
    /// the range is written back (keeping the other bytes of partial
    /// sectors) and the range's sectors are dropped, so no older write-back
    /// can land on top of the operation. After it (`after == true`) the
    /// clean sectors are dropped again: a load that raced with the
    /// operation may have cached the old contents. Dirty sectors are newer
    /// writes and stay.
    fn invalidate(&self, offset: u64, length: u64, after: bool) -> Result<(), DeviceError> {
        let inner = &self.inner;
        let mut result = Ok(());
        pieces(offset, length, |idx, from, to, _| {
            if result.is_err() {
                return;
            }
            let Some(block) = inner.lookup(idx) else {
                return;
            };
            let mask = sector_mask(from, to);
            if after {
                let mut st = block.lock();
                while st.loading {
                    st = block.wait(st);
                }
                let clean = mask & !st.dirty;
                st.valid &= !clean;
                return;
            }
            let has_dirty = block.lock().dirty & mask != 0;
            if has_dirty {
                if let Err(e) = inner.write_back(idx, &block) {
                    result = Err(e);
                    return;
                }
            }
            let mut st = block.lock();
            while st.writing || st.loading {
                st = block.wait(st);
            }
            let dropped = st.dirty & mask;
            if dropped != 0 && st.dirty & !mask == 0 {
                inner.stats.dirty_blocks.fetch_sub(1, Ordering::Relaxed);
                inner.dirty_set().remove(&idx);
            }
            st.dirty &= !mask;
            st.valid &= !mask;
            inner
                .stats
                .dirty_bytes
                .fetch_sub(u64::from(dropped.count_ones()) * SECTOR, Ordering::Relaxed);
        });
        result
    }
}

/// Why a thread of the cache could not be started.
fn spawn_error(e: std::io::Error) -> DeviceError {
    DeviceError::Io {
        device: "cache".into(),
        op: IoOp::Cache,
        offset: 0,
        len: 0,
        source: e,
    }
}

impl Drop for CacheDevice {
    fn drop(&mut self) {
        if let Err(e) = self
            .inner
            .write_back_all(None)
            .and_then(|()| self.inner.device.flush())
        {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "flushing the cache on close failed"
            );
        }
        self.inner
            .prefetch_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.inner
            .writeback_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.inner.closing.store(true, Ordering::SeqCst);
        {
            let (lock, cv) = &self.inner.writeback;
            let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
            cv.notify_all();
        }
        let threads = std::mem::take(&mut self.threads);
        for t in threads {
            // The write-back thread was woken above and sees `closing`;
            // prefetchers and write-back workers exit when their channels
            // close.
            let _ = t.join();
        }
    }
}

impl crate::DeviceLayer for CacheDevice {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.device.as_ref()
    }

    fn size(&self) -> u64 {
        self.inner.size
    }

    fn capability(&self) -> Capability {
        let inner_cap = self.inner.device.capability();
        Capability {
            // Every connection shares this one cache: flush on any covers all.
            multi_conn: inner_cap.multi_conn,
            cache: true,
            min_block: 1,
            blocking: if inner_cap.blocking == BlockingClass::Never {
                BlockingClass::Never
            } else {
                BlockingClass::PageCache
            },
            ..inner_cap
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.read_cached(buf, offset, false).map(drop)
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        self.read_cached(buf, offset, true)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        let inner = &self.inner;
        check_range(
            &inner.label,
            IoOp::Write,
            inner.size,
            offset,
            buf.len() as u64,
        )?;
        if inner.config.mode == CacheMode::WriteThrough || inner.read_only {
            // A read-only device refuses the write itself, before anything
            // is cached.
            inner.device.write_at(buf, offset, fua)?;
            // Cached copies are now stale: drop them (nothing is dirty in
            // write-through mode, so this never writes back).
            return self.invalidate(offset, buf.len() as u64, true);
        }
        let mut result = Ok(());
        pieces(offset, buf.len() as u64, |idx, from, to, range| {
            if result.is_err() {
                return;
            }
            let mask = sector_mask(from, to);
            let partial = mask & !full_sector_mask(from, to);
            loop {
                let block = inner.get_or_insert(idx);
                let mut st = block.lock();
                if st.removed {
                    continue;
                }
                if partial & !st.valid != 0 {
                    // A partly written sector needs the rest of its bytes.
                    st = match inner.load(idx, &block, st) {
                        Ok(st) => st,
                        Err(e) => {
                            result = Err(e);
                            return;
                        }
                    };
                    if st.removed {
                        continue;
                    }
                }
                st.data[from as usize..to as usize].copy_from_slice(&buf[range.clone()]);
                st.valid |= mask;
                let newly = mask & !st.dirty;
                if st.dirty == 0 {
                    inner.stats.dirty_blocks.fetch_add(1, Ordering::Relaxed);
                    if !st.writing {
                        // A block being written back is in the set already.
                        inner.dirty_set().insert(idx);
                    }
                }
                st.dirty |= mask;
                inner
                    .stats
                    .dirty_bytes
                    .fetch_add(u64::from(newly.count_ones()) * SECTOR, Ordering::Relaxed);
                return;
            }
        });
        result?;
        if fua {
            let first = offset / BLOCK;
            let last = (offset + buf.len().max(1) as u64 - 1) / BLOCK;
            inner.write_back_all(Some((first, last)))?;
            inner.device.flush()?;
        } else {
            inner.throttle();
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.write_back_all(None)?;
        self.inner.device.flush()
    }

    fn flush_nowait(&self) -> Result<bool, DeviceError> {
        // Blocks being written back stay in the dirty set until their
        // device writes are done, so an empty set means there is nothing
        // of this cache's left to write.
        if !self.inner.dirty_set().is_empty() {
            return Ok(false);
        }
        self.inner.device.flush_nowait()
    }

    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        check_range(
            &self.inner.label,
            IoOp::Trim,
            self.inner.size,
            offset,
            length,
        )?;
        self.invalidate(offset, length, false)?;
        self.inner.device.trim(offset, length, fua)?;
        self.invalidate(offset, length, true)
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        check_range(
            &self.inner.label,
            IoOp::WriteZeroes,
            self.inner.size,
            offset,
            length,
        )?;
        self.invalidate(offset, length, false)?;
        self.inner.device.write_zeroes(offset, length, mode)?;
        self.invalidate(offset, length, true)
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        check_range(
            &self.inner.label,
            IoOp::Extents,
            self.inner.size,
            offset,
            length,
        )?;
        if length > 0 {
            // Dirty data over a hole must be on the device to be reported.
            let last = (offset + length - 1) / BLOCK;
            self.inner.write_back_all(Some((offset / BLOCK, last)))?;
        }
        self.inner.device.extents(offset, length, max_extents)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        check_range(
            &self.inner.label,
            IoOp::Cache,
            self.inner.size,
            offset,
            length,
        )?;
        let to = offset + length.min(self.inner.config.capacity / 2);
        self.inner.schedule_prefetch(offset, to);
        Ok(())
    }

    fn metrics(&self) -> Vec<DeviceMetric> {
        let mut m = self.inner.device.metrics();
        self.inner.append_metrics(&mut m);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// Counts device calls and can fail or stall them.
    #[derive(Debug)]
    pub(super) struct Counting {
        pub(super) inner: MemDevice,
        pub(super) reads: AtomicUsize,
        pub(super) writes: AtomicUsize,
        pub(super) flushes: AtomicUsize,
        pub(super) read_delay: Duration,
        pub(super) fail_writes: AtomicBool,
        /// Threads that issued writes, with their names.
        pub(super) writers: Mutex<HashMap<std::thread::ThreadId, Option<String>>>,
    }

    impl Counting {
        pub(super) fn new(size: u64) -> Self {
            Self {
                inner: MemDevice::new(size, false),
                reads: AtomicUsize::new(0),
                writes: AtomicUsize::new(0),
                flushes: AtomicUsize::new(0),
                read_delay: Duration::ZERO,
                fail_writes: AtomicBool::new(false),
                writers: Mutex::new(HashMap::new()),
            }
        }
    }

    /// The dirty set holds exactly the blocks that are dirty or being
    /// written back, and only blocks the index holds.
    pub(super) fn assert_dirty_set_consistent(cache: &CacheDevice) {
        let inner = &cache.inner;
        let set = inner.dirty_set().clone();
        let mut expected = BTreeSet::new();
        for shard in inner.shards.iter() {
            for (&idx, block) in shard.read().unwrap().iter() {
                let st = block.lock();
                if st.dirty != 0 || st.writing {
                    expected.insert(idx);
                }
            }
        }
        assert_eq!(set, expected, "dirty set against the blocks' state");
    }

    impl crate::DeviceLayer for Counting {
        fn inner(&self) -> &dyn BlockDevice {
            &self.inner
        }
        fn capability(&self) -> Capability {
            Capability {
                blocking: BlockingClass::Always,
                ..self.inner.capability()
            }
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.read_delay);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            let me = std::thread::current();
            self.writers
                .lock()
                .unwrap()
                .insert(me.id(), me.name().map(str::to_owned));
            if self.fail_writes.load(Ordering::SeqCst) {
                return Err(DeviceError::Io {
                    device: "counting".into(),
                    op: IoOp::Write,
                    offset,
                    len: buf.len() as u64,
                    source: std::io::Error::from_raw_os_error(libc::EIO),
                });
            }
            self.inner.write_at(buf, offset, fua)
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    pub(super) fn no_readahead(mode: CacheMode) -> CacheConfig {
        CacheConfig {
            mode,
            readahead_max: 0,
            ..CacheConfig::default()
        }
    }

    #[test]
    fn unaligned_write_merges_with_device_data() {
        let dev = Arc::new(Counting::new(1 << 20));
        dev.inner.write_at(&[9u8; 1024], 0, false).unwrap();
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        cache.write_at(b"xy", 10, false).unwrap();
        let mut back = [0u8; 14];
        cache.read_at(&mut back, 0).unwrap();
        assert_eq!(&back, &[9, 9, 9, 9, 9, 9, 9, 9, 9, 9, b'x', b'y', 9, 9]);
        cache.flush().unwrap();
        let mut direct = [0u8; 1024];
        dev.inner.read_at(&mut direct, 0).unwrap();
        assert_eq!(&direct[8..14], &[9, 9, b'x', b'y', 9, 9]);
        assert!(direct[14..].iter().all(|&b| b == 9));
    }

    #[test]
    fn loads_racing_a_zeroing_do_not_leave_stale_data() {
        // Device reads are slow, so prefetches and reads of the range are
        // in flight while write_zeroes runs; afterwards every byte must
        // read as zero.
        let mut counting = Counting::new(8 << 20);
        counting.read_delay = Duration::from_millis(2);
        counting
            .inner
            .write_at(&vec![0xfe; 8 << 20], 0, false)
            .unwrap();
        let dev = Arc::new(counting);
        for mode in [CacheMode::WriteThrough, CacheMode::WriteBack] {
            let cache = Arc::new(
                CacheDevice::new(
                    dev.clone(),
                    CacheConfig {
                        mode,
                        ..CacheConfig::default()
                    },
                )
                .unwrap(),
            );
            dev.inner.write_at(&vec![0xfe; 8 << 20], 0, false).unwrap();
            let reader = {
                let c = Arc::clone(&cache);
                std::thread::spawn(move || {
                    let mut b = vec![0u8; 64 * 1024];
                    for i in 0..128u64 {
                        c.read_at(&mut b, i * 64 * 1024).unwrap();
                    }
                })
            };
            std::thread::sleep(Duration::from_millis(20));
            cache
                .write_zeroes(
                    0,
                    8 << 20,
                    ZeroMode {
                        may_trim: true,
                        fast: false,
                        fua: false,
                    },
                )
                .unwrap();
            reader.join().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let mut b = vec![1u8; 8 << 20];
            cache.read_at(&mut b, 0).unwrap();
            let first = b.iter().position(|&x| x != 0);
            assert_eq!(first, None, "{mode:?}: stale byte after zeroing");
        }
    }

    #[test]
    fn a_flush_with_nothing_dirty_writes_nothing_and_syncs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // Creates the file; each mode then opens it afresh (one open at
        // a time: the device locks its file).
        drop(
            crate::FileDevice::open(
                &dir.path().join("img"),
                &crate::FileOptions {
                    size: Some(4 << 20),
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        for mode in [CacheMode::WriteBack, CacheMode::WriteThrough] {
            let cache = CacheDevice::new(Arc::new(file_clone(&dir)), no_readahead(mode)).unwrap();
            let count = |name: &str| {
                cache
                    .metrics()
                    .iter()
                    .find(|m| m.name == name)
                    .map(|m| m.value)
                    .unwrap_or_else(|| panic!("no {name}"))
            };
            cache.write_at(&[1; 4096], 0, false).unwrap();
            assert!(!cache.flush_nowait().unwrap(), "{mode:?}: data to sync");
            cache.flush().unwrap();
            assert_eq!(count("file_syncs_total"), 1.0, "{mode:?}");
            let written = count("cache_writeback_bytes_total");
            for _ in 0..3 {
                assert!(cache.flush_nowait().unwrap(), "{mode:?}: clean");
                cache.flush().unwrap();
            }
            assert_eq!(count("file_syncs_total"), 1.0, "{mode:?}: no sync");
            assert_eq!(count("cache_writeback_bytes_total"), written);
        }
    }

    /// Another device over the file `dir` holds, with counters of its own.
    fn file_clone(dir: &tempfile::TempDir) -> crate::FileDevice {
        crate::FileDevice::open(&dir.path().join("img"), &crate::FileOptions::default()).unwrap()
    }

    #[test]
    fn write_through_writes_immediately_and_stays_coherent() {
        let dev = Arc::new(Counting::new(1 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteThrough)).unwrap();
        let mut b = [0u8; 512];
        cache.read_at(&mut b, 0).unwrap();
        cache.write_at(&[3u8; 512], 0, false).unwrap();
        assert_eq!(dev.writes.load(Ordering::SeqCst), 1);
        assert_eq!(cache.dirty_bytes(), 0);
        cache.read_at(&mut b, 0).unwrap();
        assert_eq!(b, [3u8; 512]);
    }
}
