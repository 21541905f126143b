//! Write-back: dirty sectors claimed from their blocks, copied into
//! batches of adjacent data and written to the device in ascending block
//! order, by the asking thread alone or shared with long-lived workers;
//! the background thread that keeps dirty data between the watermarks,
//! and the throttling of writers above the high one.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::block::{runs, Block, BLOCK, SECTOR};
use super::{spawn_error, Inner};
use crate::DeviceError;

/// Largest device write issued by write-back: dirty sectors of adjacent
/// blocks that touch are written together up to this size.
const MAX_WRITEBACK_IO: usize = 1 << 20;
/// Threads that write back a large amount of dirty data at once (the
/// asking thread and long-lived workers), so a device that serves
/// concurrent writes (SSDs, virtio, remote members) drains it at its
/// full rate.
const WRITEBACK_PARALLELISM: usize = 8;
/// Up to this many runs of consecutive dirty blocks are written back by
/// the asking thread alone: handing a few small writes to other threads
/// costs more than the writes (the common fsync after a few 4 KiB
/// writes).
const INLINE_WRITEBACK_RUNS: usize = 4;

/// A block claimed by write-back: its dirty sectors (`mask`) were copied
/// into a [`WriteBatch`] and cleared, and it is marked as being written.
#[derive(Debug)]
struct Claim {
    idx: u64,
    block: Arc<Block>,
    mask: u128,
}

/// Dirty data copied out of claimed blocks: device writes of `buf`
/// ranges, each as large as adjacency allows.
#[derive(Debug, Default)]
struct WriteBatch {
    buf: Vec<u8>,
    writes: Vec<(u64, std::ops::Range<usize>)>,
    claims: Vec<Claim>,
}

/// How far a write-back goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// Every block given (FLUSH, FUA, close).
    AllWritten,
    /// Until dirty data is down to the low watermark (background).
    LowWatermark,
}

/// Write-back shared by the asking thread and the workers: runs of
/// consecutive blocks (`runs`, ranges of `blocks`) taken one at a time.
#[derive(Debug)]
pub(super) struct WriteBackJob {
    blocks: Vec<(u64, Arc<Block>)>,
    runs: Vec<std::ops::Range<usize>>,
    until: Until,
    /// The next run to take.
    next: AtomicUsize,
    /// Runs finished, and the first error; the asking thread waits on
    /// `finished` until every run it did not take itself is done.
    progress: Mutex<(usize, Option<DeviceError>)>,
    finished: Condvar,
}

impl Inner {
    /// Writes the dirty sectors of one block to the device (not synced).
    pub(super) fn write_back(&self, idx: u64, block: &Arc<Block>) -> Result<(), DeviceError> {
        let mut batch = WriteBatch::default();
        self.claim(idx, block, &mut batch);
        self.write_batch(&mut batch)
    }

    /// Claims `block` for write-back: waits for a write-back under way,
    /// then moves its dirty sectors into `batch` (merged with the batch's
    /// last write where they touch) and marks it as being written. A
    /// block with nothing dirty is left alone.
    fn claim(&self, idx: u64, block: &Arc<Block>, batch: &mut WriteBatch) {
        let mut st = block.lock();
        while st.writing {
            st = block.wait(st);
        }
        if st.dirty == 0 || st.removed {
            return;
        }
        let mask = st.dirty;
        st.dirty = 0;
        st.writing = true;
        let len = self.block_len(idx) as usize;
        for (s, run) in runs(mask) {
            let from = s * SECTOR as usize;
            let to = ((s + run) * SECTOR as usize).min(len);
            if from >= to {
                continue;
            }
            let offset = idx * BLOCK + from as u64;
            let start = batch.buf.len();
            batch.buf.extend_from_slice(&st.data[from..to]);
            match batch.writes.last_mut() {
                Some((at, range)) if *at + range.len() as u64 == offset => {
                    range.end = batch.buf.len();
                }
                _ => batch.writes.push((offset, start..batch.buf.len())),
            }
        }
        drop(st);
        self.stats.dirty_blocks.fetch_sub(1, Ordering::Relaxed);
        self.stats
            .dirty_bytes
            .fetch_sub(u64::from(mask.count_ones()) * SECTOR, Ordering::Relaxed);
        batch.claims.push(Claim {
            idx,
            block: Arc::clone(block),
            mask,
        });
    }

    /// Issues the writes of `batch`, then releases its blocks: clean ones
    /// leave the dirty set; after an error every claimed sector is dirty
    /// again (it may be only here). Leaves `batch` empty for reuse.
    fn write_batch(&self, batch: &mut WriteBatch) -> Result<(), DeviceError> {
        if batch.claims.is_empty() {
            return Ok(());
        }
        let mut result = Ok(());
        for (offset, range) in &batch.writes {
            result = self
                .device
                .write_at(&batch.buf[range.clone()], *offset, false);
            if result.is_err() {
                break;
            }
        }
        for Claim { idx, block, mask } in batch.claims.drain(..) {
            let mut st = block.lock();
            st.writing = false;
            if result.is_err() {
                if st.dirty == 0 {
                    self.stats.dirty_blocks.fetch_add(1, Ordering::Relaxed);
                }
                let again = mask & !st.dirty;
                st.dirty |= mask;
                self.stats
                    .dirty_bytes
                    .fetch_add(u64::from(again.count_ones()) * SECTOR, Ordering::Relaxed);
            } else {
                self.stats
                    .writeback_bytes
                    .fetch_add(u64::from(mask.count_ones()) * SECTOR, Ordering::Relaxed);
                if st.dirty == 0 {
                    self.dirty_set().remove(&idx);
                }
            }
            block.changed.notify_all();
        }
        batch.buf.clear();
        batch.writes.clear();
        self.wake_writers();
        result
    }

    pub(super) fn dirty_set(&self) -> MutexGuard<'_, BTreeSet<u64>> {
        self.dirty.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The blocks that are dirty or being written back (with block
    /// numbers in `range` if given), in ascending order.
    fn dirty_blocks(&self, range: Option<(u64, u64)>) -> Vec<(u64, Arc<Block>)> {
        let indices: Vec<u64> = {
            let set = self.dirty_set();
            match range {
                Some((first, last)) => set.range(first..=last).copied().collect(),
                None => set.iter().copied().collect(),
            }
        };
        self.stats
            .writeback_visited_blocks
            .fetch_add(indices.len() as u64, Ordering::Relaxed);
        indices
            .into_iter()
            .filter_map(|idx| self.lookup(idx).map(|b| (idx, b)))
            .collect()
    }

    /// Writes back every dirty block (in `range` of block numbers if given).
    pub(super) fn write_back_all(&self, range: Option<(u64, u64)>) -> Result<(), DeviceError> {
        self.write_back_many(self.dirty_blocks(range), Until::AllWritten)
    }

    fn reached(&self, until: Until) -> bool {
        match until {
            Until::AllWritten => false,
            Until::LowWatermark => {
                self.stats.dirty_bytes.load(Ordering::Relaxed) <= self.config.low_watermark
                    && self.stats.dirty_blocks.load(Ordering::Relaxed) <= self.capacity_blocks() / 4
            }
        }
    }

    /// Writes back `blocks` (ascending block numbers): on this thread when
    /// they form a few runs of consecutive blocks, else shared with the
    /// write-back workers, one run (at most [`MAX_WRITEBACK_IO`]) at a
    /// time. Returns the first error; blocks that failed stay dirty.
    fn write_back_many(
        &self,
        blocks: Vec<(u64, Arc<Block>)>,
        until: Until,
    ) -> Result<(), DeviceError> {
        let per_run = (MAX_WRITEBACK_IO as u64 / BLOCK) as usize;
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, (idx, _)) in blocks.iter().enumerate() {
            match runs.last_mut() {
                Some(run) if blocks[i - 1].0 + 1 == *idx && run.len() < per_run => run.end = i + 1,
                _ => runs.push(i..i + 1),
            }
        }
        if runs.len() <= INLINE_WRITEBACK_RUNS {
            return self.write_back_run(&blocks, until);
        }
        let helpers = (WRITEBACK_PARALLELISM - 1).min(runs.len() - 1);
        let job = Arc::new(WriteBackJob {
            blocks,
            runs,
            until,
            next: AtomicUsize::new(0),
            progress: Mutex::new((0, None)),
            finished: Condvar::new(),
        });
        {
            let tx = self.writeback_tx.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(tx) = tx.as_ref() {
                for _ in 0..helpers {
                    let _ = tx.send(Arc::clone(&job));
                }
            }
        }
        self.take_runs(&job);
        let mut progress = job.progress.lock().unwrap_or_else(|p| p.into_inner());
        while progress.0 < job.runs.len() {
            progress = job
                .finished
                .wait(progress)
                .unwrap_or_else(|p| p.into_inner());
        }
        progress.1.take().map_or(Ok(()), Err)
    }

    /// Writes back runs of `job` until none is left (or the job's goal is
    /// reached, or one failed); called by the asking thread and workers.
    fn take_runs(&self, job: &WriteBackJob) {
        loop {
            let i = job.next.fetch_add(1, Ordering::Relaxed);
            let Some(run) = job.runs.get(i) else { return };
            let failed = job
                .progress
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .1
                .is_some();
            let result = if failed {
                Ok(())
            } else {
                self.write_back_run(&job.blocks[run.clone()], job.until)
            };
            let mut progress = job.progress.lock().unwrap_or_else(|p| p.into_inner());
            progress.0 += 1;
            if let Err(e) = result {
                progress.1.get_or_insert(e);
            }
            job.finished.notify_all();
        }
    }

    /// Writes back `blocks` (ascending block numbers) on this thread,
    /// batching consecutive blocks into writes of up to
    /// [`MAX_WRITEBACK_IO`], and stops between batches once `until` is
    /// reached. Returns the first error; the blocks of a failed batch stay
    /// dirty.
    fn write_back_run(
        &self,
        blocks: &[(u64, Arc<Block>)],
        until: Until,
    ) -> Result<(), DeviceError> {
        let mut batch = WriteBatch::default();
        for (i, (idx, block)) in blocks.iter().enumerate() {
            if batch.claims.is_empty() && self.reached(until) {
                break;
            }
            self.claim(*idx, block, &mut batch);
            let next_adjacent = blocks.get(i + 1).is_some_and(|(next, _)| *next == idx + 1);
            if !next_adjacent || batch.buf.len() + BLOCK as usize > MAX_WRITEBACK_IO {
                self.write_batch(&mut batch)?;
            }
        }
        self.write_batch(&mut batch)
    }

    /// Whether writers must wait for write-back: too many dirty bytes, or
    /// too many blocks pinned by dirty data for eviction to find room.
    fn must_throttle(&self) -> bool {
        self.stats.dirty_bytes.load(Ordering::Relaxed) > self.config.high_watermark
            || self.stats.dirty_blocks.load(Ordering::Relaxed) > self.capacity_blocks() * 3 / 4
    }

    fn wake_writers(&self) {
        self.writeback.1.notify_all();
    }

    /// Throttles a writer while dirty data is above the high watermark.
    pub(super) fn throttle(&self) {
        if !self.must_throttle() {
            return;
        }
        let (lock, cv) = &self.writeback;
        let mut kick = lock.lock().unwrap_or_else(|p| p.into_inner());
        *kick = true;
        cv.notify_all();
        while self.must_throttle() {
            let (g, _) = cv
                .wait_timeout(kick, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner());
            kick = g;
            *kick = true;
            cv.notify_all();
        }
    }
}

/// Starts the write-back workers that share large write-backs with the
/// asking thread, and the background write-back thread.
pub(super) fn start_threads(
    inner: &Arc<Inner>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<(), DeviceError> {
    let (tx, rx) = std::sync::mpsc::channel::<Arc<WriteBackJob>>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 1..WRITEBACK_PARALLELISM {
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let rx = Arc::clone(&rx);
        threads.push(
            std::thread::Builder::new()
                .name(format!("sluice-writeback-{i}"))
                .spawn(move || loop {
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok(job) = job else { return };
                    let Some(inner) = weak.upgrade() else { return };
                    inner.take_runs(&job);
                })
                .map_err(spawn_error)?,
        );
    }
    *inner.writeback_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    let weak = Arc::downgrade(inner);
    threads.push(
        std::thread::Builder::new()
            .name("sluice-writeback".into())
            .spawn(move || writeback_loop(&weak))
            .map_err(spawn_error)?,
    );
    Ok(())
}

fn writeback_loop(weak: &Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        {
            let (lock, cv) = &inner.writeback;
            let kick = lock.lock().unwrap_or_else(|p| p.into_inner());
            // Checked under the lock `Drop` notifies under, so the wake-up
            // that follows `closing` is never missed.
            if inner.closing.load(Ordering::SeqCst) {
                return;
            }
            let (mut kick, _) = cv
                .wait_timeout(kick, Duration::from_millis(200))
                .unwrap_or_else(|p| p.into_inner());
            *kick = false;
        }
        if inner.closing.load(Ordering::SeqCst) {
            return;
        }
        let low = inner.config.low_watermark;
        let cap = inner.capacity_blocks();
        let dirty_bytes = inner.stats.dirty_bytes.load(Ordering::Relaxed);
        let dirty_blocks = inner.stats.dirty_blocks.load(Ordering::Relaxed);
        if dirty_bytes <= inner.config.high_watermark.min(low * 2) && dirty_blocks <= cap / 2 {
            continue;
        }
        if let Err(e) = inner.write_back_many(inner.dirty_blocks(None), Until::LowWatermark) {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "background write-back failed; data stays dirty"
            );
        }
        inner.wake_writers();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::{assert_dirty_set_consistent, no_readahead, Counting};
    use crate::cache::{CacheDevice, CacheMode};
    use crate::{BlockDevice, ZeroMode};

    fn visited(cache: &CacheDevice) -> u64 {
        cache
            .inner
            .stats
            .writeback_visited_blocks
            .load(Ordering::SeqCst)
    }

    #[test]
    fn write_back_defers_device_writes_until_flush() {
        let dev = Arc::new(Counting::new(4 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        cache.write_at(&[5u8; 8192], 4096, false).unwrap();
        assert_eq!(
            dev.writes.load(Ordering::SeqCst),
            0,
            "acknowledged from cache"
        );
        assert_eq!(
            dev.reads.load(Ordering::SeqCst),
            0,
            "aligned writes never read"
        );
        assert_eq!(cache.dirty_bytes(), 8192);
        let mut back = vec![0u8; 8192];
        cache.read_at(&mut back, 4096).unwrap();
        assert_eq!(back, vec![5u8; 8192]);
        cache.flush().unwrap();
        assert_eq!(cache.dirty_bytes(), 0);
        assert!(dev.writes.load(Ordering::SeqCst) >= 1);
        assert_eq!(dev.flushes.load(Ordering::SeqCst), 1);
        let mut direct = vec![0u8; 8192];
        dev.inner.read_at(&mut direct, 4096).unwrap();
        assert_eq!(direct, vec![5u8; 8192], "flushed data is on the device");
    }

    #[test]
    fn fua_write_is_on_the_device_when_it_returns() {
        let dev = Arc::new(Counting::new(1 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        cache.write_at(b"durable", 100, true).unwrap();
        let mut direct = [0u8; 7];
        dev.inner.read_at(&mut direct, 100).unwrap();
        assert_eq!(&direct, b"durable");
        assert!(dev.flushes.load(Ordering::SeqCst) >= 1);
    }

    #[test]
    fn flush_and_fua_visit_only_dirty_blocks() {
        let dev = Arc::new(Counting::new(64 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        // 1000 clean cached blocks a scan would have to look at.
        let mut b = vec![0u8; 4096];
        for i in 0..1000u64 {
            cache.read_at(&mut b, i * BLOCK).unwrap();
        }
        assert_eq!(cache.inner.blocks.load(Ordering::SeqCst), 1000);
        for i in [3u64, 500, 999] {
            cache
                .write_at(&[7u8; 4096], i * BLOCK + 8192, false)
                .unwrap();
        }
        let before = visited(&cache);
        cache.flush().unwrap();
        assert_eq!(visited(&cache) - before, 3, "the flush visits 3 blocks");
        assert_eq!(dev.writes.load(Ordering::SeqCst), 3);
        let before = visited(&cache);
        cache.flush().unwrap();
        assert_eq!(visited(&cache), before, "nothing dirty, nothing visited");
        cache.write_at(&[8u8; 4096], 10 * BLOCK, false).unwrap();
        cache.write_at(&[9u8; 4096], 20 * BLOCK, false).unwrap();
        let before = visited(&cache);
        cache.write_at(&[1u8; 512], 20 * BLOCK, true).unwrap();
        assert_eq!(visited(&cache) - before, 1, "FUA visits its own block");
        assert_eq!(cache.dirty_bytes(), 4096, "block 10 is still dirty");
        assert_dirty_set_consistent(&cache);
        let mut direct = [0u8; 4096];
        dev.inner.read_at(&mut direct, 500 * BLOCK + 8192).unwrap();
        assert_eq!(direct, [7u8; 4096]);
    }

    #[test]
    fn flush_writes_back_on_the_calling_thread() {
        // No thread is started per FLUSH: every device write of a flush
        // after a few small writes comes from the thread that asked.
        let dev = Arc::new(Counting::new(64 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        for round in 0..100u64 {
            for i in 0..INLINE_WRITEBACK_RUNS as u64 {
                let idx = (round * 8 + i) * 2 % 1000;
                cache
                    .write_at(&[round as u8; 4096], idx * BLOCK, false)
                    .unwrap();
            }
            cache.flush().unwrap();
        }
        assert_eq!(
            dev.writes.load(Ordering::SeqCst),
            100 * INLINE_WRITEBACK_RUNS
        );
        let writers: Vec<_> = dev.writers.lock().unwrap().keys().copied().collect();
        assert_eq!(
            writers,
            vec![std::thread::current().id()],
            "device writes from threads other than the flushing one"
        );
    }

    #[test]
    fn large_flushes_share_the_long_lived_write_back_threads() {
        // Scattered dirty data is written back by the flushing thread and
        // the cache's own write-back workers, never by threads started
        // for the flush.
        let dev = Arc::new(Counting::new(64 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        for round in 0..50u64 {
            for i in 0..64u64 {
                cache
                    .write_at(&[round as u8; 4096], (i * 3 + round % 3) * BLOCK, false)
                    .unwrap();
            }
            cache.flush().unwrap();
            assert_eq!(cache.dirty_bytes(), 0);
        }
        assert_eq!(dev.writes.load(Ordering::SeqCst), 50 * 64);
        let me = std::thread::current().id();
        let writers = dev.writers.lock().unwrap().clone();
        for (id, name) in &writers {
            assert!(
                *id == me || name.as_deref().is_some_and(|n| n.starts_with("sluice-writeback")),
                "a write from thread {id:?} ({name:?}), neither the flushing one nor a write-back worker"
            );
        }
        assert!(writers.len() <= WRITEBACK_PARALLELISM, "{writers:?}");
        let mut direct = [0u8; 4096];
        dev.inner
            .read_at(&mut direct, (63 * 3 + 1) * BLOCK)
            .unwrap();
        assert_eq!(direct, [49u8; 4096]);
    }

    #[test]
    fn write_back_joins_adjacent_dirty_data() {
        let dev = Arc::new(Counting::new(64 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        // 2 MiB written as 4 KiB pieces in reverse order: two 1 MiB writes.
        for i in (0..512u64).rev() {
            cache
                .write_at(&[i as u8; 4096], (1 << 20) + i * 4096, false)
                .unwrap();
        }
        cache.flush().unwrap();
        assert_eq!(dev.writes.load(Ordering::SeqCst), 2);
        let mut direct = vec![0u8; 2 << 20];
        dev.inner.read_at(&mut direct, 1 << 20).unwrap();
        for (i, piece) in direct.chunks(4096).enumerate() {
            assert!(piece.iter().all(|&b| b == i as u8), "piece {i}");
        }
        // Data that does not touch goes down separately, even within a
        // block; a run that crosses a block boundary goes down as one.
        cache.write_at(b"a", 0, false).unwrap();
        cache.write_at(b"b", 4096, false).unwrap();
        cache.write_at(&[3u8; 1024], BLOCK - 512, false).unwrap();
        cache.flush().unwrap();
        assert_eq!(dev.writes.load(Ordering::SeqCst), 2 + 3);
    }

    #[test]
    fn failed_write_back_keeps_blocks_dirty_and_indexed() {
        let dev = Arc::new(Counting::new(8 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        for i in [1u64, 2, 40] {
            cache.write_at(&[i as u8; 4096], i * BLOCK, false).unwrap();
        }
        dev.fail_writes.store(true, Ordering::SeqCst);
        assert!(cache.flush().is_err(), "the write-back error is reported");
        assert!(
            cache.write_at(&[9u8; 512], 40 * BLOCK, true).is_err(),
            "and through FUA"
        );
        assert_eq!(dev.flushes.load(Ordering::SeqCst), 0, "no sync after it");
        assert_eq!(cache.dirty_bytes(), 3 * 4096);
        assert_eq!(cache.inner.stats.dirty_blocks.load(Ordering::SeqCst), 3);
        assert_eq!(
            cache.inner.dirty_set().iter().copied().collect::<Vec<_>>(),
            vec![1, 2, 40]
        );
        assert_dirty_set_consistent(&cache);
        dev.fail_writes.store(false, Ordering::SeqCst);
        cache.flush().unwrap();
        assert_eq!(cache.dirty_bytes(), 0);
        assert!(cache.inner.dirty_set().is_empty());
        let mut direct = [0u8; 4096];
        dev.inner.read_at(&mut direct, 40 * BLOCK).unwrap();
        assert_eq!(&direct[..512], &[9u8; 512]);
        assert_eq!(&direct[512..], &[40u8; 3584]);

        // The same when the write-back workers share the flush.
        for i in 0..32u64 {
            cache
                .write_at(&[i as u8; 4096], i * 2 * BLOCK, false)
                .unwrap();
        }
        dev.fail_writes.store(true, Ordering::SeqCst);
        assert!(cache.flush().is_err());
        assert_eq!(cache.dirty_bytes(), 32 * 4096);
        assert_eq!(cache.inner.dirty_set().len(), 32);
        assert_dirty_set_consistent(&cache);
        dev.fail_writes.store(false, Ordering::SeqCst);
        cache.flush().unwrap();
        assert!(cache.inner.dirty_set().is_empty());
        dev.inner.read_at(&mut direct, 62 * BLOCK).unwrap();
        assert_eq!(direct, [31u8; 4096]);
    }

    #[test]
    fn trim_and_zeroing_keep_the_dirty_set_exact() {
        let dev = Arc::new(Counting::new(8 << 20));
        let cache = CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap();
        for i in 0..8u64 {
            cache.write_at(&[1u8; 8192], i * BLOCK, false).unwrap();
        }
        cache.trim(0, 2 * BLOCK, false).unwrap();
        let zero = ZeroMode {
            may_trim: false,
            fast: false,
            fua: false,
        };
        cache.write_zeroes(4 * BLOCK, BLOCK, zero).unwrap();
        // Partly covered: block 6 is written back whole before the
        // zeroing, so it leaves the set too.
        cache.write_zeroes(6 * BLOCK, 4096, zero).unwrap();
        assert_dirty_set_consistent(&cache);
        assert_eq!(
            cache.inner.dirty_set().iter().copied().collect::<Vec<_>>(),
            vec![2, 3, 5, 7]
        );
        let before = visited(&cache);
        cache.flush().unwrap();
        assert_eq!(visited(&cache) - before, 4);
        assert!(cache.inner.dirty_set().is_empty());
    }
}
