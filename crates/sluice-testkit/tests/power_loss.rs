//! The power-loss simulation against the write-back cache, in process:
//! crash cycles checked against the durability model, and the proof that
//! the simulation catches a deleted fsync that a plain process kill
//! cannot (the page cache — here the simulated disk cache — keeps it).

use std::sync::Arc;

use sluice_storage::{
    BlockDevice, CacheConfig, CacheDevice, CacheMode, MemDevice, PowerLossConfig, PowerLossDevice,
};
use sluice_testkit::crash::{DurabilityModel, KillSwitchDevice, SkipFlushDevice, SECTOR};

const SIZE: u64 = 1 << 20;

#[derive(Debug, Default)]
struct Totals {
    cycles: u64,
    writes: u64,
    flushes: u64,
    violations: u64,
    lost_durable_bytes: u64,
    newer_than_floor: u64,
}

/// Runs `cycles` of random writes, FUA writes and flushes through a
/// write-back cache, then kills the "process" (the cache can no longer
/// reach the device) and, with `power_loss`, cuts the power of the
/// simulated disk; checks the disk against the model after each.
fn crash_cycles(cycles: u64, skip_flush: bool, power_loss: bool, seed: u64) -> Totals {
    let mem: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(SIZE, false));
    let disk = Arc::new(PowerLossDevice::new(
        mem,
        PowerLossConfig {
            seed,
            ..PowerLossConfig::default()
        },
    ));
    let mut model = DurabilityModel::new(SIZE / SECTOR as u64);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut t = Totals::default();
    let mut buf = vec![0u8; 64 * SECTOR];
    for _ in 0..cycles {
        let process = Arc::new(KillSwitchDevice::new(
            Arc::clone(&disk) as Arc<dyn BlockDevice>
        ));
        let below_cache: Arc<dyn BlockDevice> = if skip_flush {
            Arc::new(SkipFlushDevice::new(
                Arc::clone(&process) as Arc<dyn BlockDevice>
            ))
        } else {
            Arc::clone(&process) as Arc<dyn BlockDevice>
        };
        let cache = CacheDevice::new(
            below_cache,
            CacheConfig {
                mode: CacheMode::WriteBack,
                capacity: 512 << 10,
                high_watermark: 128 << 10,
                low_watermark: 32 << 10,
                readahead_max: 0,
                prefetch_threads: 1,
            },
        )
        .expect("cache");
        for _ in 0..rng.u32(20..200) {
            if rng.u32(0..10) == 0 {
                let f = model.begin_flush();
                cache.flush().expect("flush");
                model.flush_acked(f);
                t.flushes += 1;
                continue;
            }
            let count = rng.u64(1..=64);
            let sector = rng.u64(0..model.len() - count);
            let fua = rng.u32(0..10) == 0;
            let data = &mut buf[..count as usize * SECTOR];
            let w = model.begin_write(sector, count, data);
            cache
                .write_at(data, sector * SECTOR as u64, fua)
                .expect("write");
            model.write_acked(w, fua);
            t.writes += 1;
        }
        process.kill();
        drop(cache);
        if power_loss {
            disk.power_loss();
        }
        let mut image = vec![0u8; SIZE as usize];
        disk.read_at(&mut image, 0).expect("read the disk back");
        let report = model.check_after_crash(&image);
        for v in report.violations.iter().take(3) {
            eprintln!("{v}");
        }
        t.cycles += 1;
        t.violations += report.violations.len() as u64;
        t.lost_durable_bytes += report.lost_durable_bytes();
        t.newer_than_floor += report.newer_than_floor;
    }
    t
}

#[test]
fn write_back_cache_loses_nothing_flushed_across_power_losses() {
    let t = crash_cycles(60, false, true, 1);
    eprintln!("{t:?}");
    assert_eq!(t.violations, 0, "{t:?}");
    assert!(t.flushes > 100 && t.writes > 1000, "{t:?}");
    assert!(
        t.newer_than_floor > 0,
        "unflushed writes that survived are counted: {t:?}"
    );
}

#[test]
fn power_loss_simulation_catches_a_deleted_fsync() {
    let t = crash_cycles(60, true, true, 2);
    eprintln!("{t:?}");
    assert!(
        t.lost_durable_bytes > 0,
        "a flush that never reached the disk must lose flushed data: {t:?}"
    );
}

#[test]
fn a_process_kill_alone_cannot_see_a_deleted_fsync() {
    // The reason the power-loss layer exists: with only the process
    // killed, the disk (like the kernel's page cache after SIGKILL) still
    // has everything the cache handed it, synced or not.
    let t = crash_cycles(60, true, false, 3);
    eprintln!("{t:?}");
    assert_eq!(t.violations, 0, "{t:?}");
}
