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

mod block;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use block::{full_sector_mask, pieces, runs, sector_mask, Block, BlockState, BLOCK, SECTOR};

use crate::{
    check_range, BlockDevice, BlockingClass, Capability, DeviceError, DeviceMetric, Extent, IoOp,
    MetricKind, ZeroMode,
};

const SHARDS: usize = 64;
/// Streams the read-ahead detector follows at once.
const MAX_STREAMS: usize = 16;
/// Largest device read issued for prefetching.
const MAX_PREFETCH_IO: u64 = 1 << 20;
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

#[derive(Debug, Default)]
struct Stats {
    read_hits: AtomicU64,
    read_misses: AtomicU64,
    device_reads: AtomicU64,
    device_read_bytes: AtomicU64,
    writeback_bytes: AtomicU64,
    /// Blocks write-back looked at (FLUSH, FUA, background, close): with
    /// the dirty set, only blocks that were dirty or being written.
    writeback_visited_blocks: AtomicU64,
    dirty_bytes: AtomicU64,
    /// Blocks holding any dirty sector (each pins 64 KiB of memory).
    dirty_blocks: AtomicU64,
    evictions: AtomicU64,
    readahead_issued_bytes: AtomicU64,
    readahead_hit_bytes: AtomicU64,
    readahead_wasted_bytes: AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct Stream {
    /// Where the next sequential request is expected.
    next: u64,
    /// Current prefetch window.
    window: u64,
    /// Everything below this was already scheduled for prefetch.
    prefetched_to: u64,
    last_use: u64,
}

#[derive(Debug, Default)]
struct ReadAhead {
    streams: Vec<Stream>,
    clock: u64,
    /// Wasted prefetch seen when the windows were last adjusted.
    seen_waste: u64,
}

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
struct WriteBackJob {
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

/// One slice of the block index.
type Shard = RwLock<HashMap<u64, Arc<Block>>>;

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

impl Inner {
    fn shard(&self, idx: u64) -> &Shard {
        &self.shards[(idx % SHARDS as u64) as usize]
    }

    fn block_len(&self, idx: u64) -> u64 {
        (self.size - idx * BLOCK).min(BLOCK)
    }

    /// Sectors that exist in this block (the last block may be short).
    fn existing(&self, idx: u64) -> u128 {
        sector_mask(0, self.block_len(idx))
    }

    fn lookup(&self, idx: u64) -> Option<Arc<Block>> {
        let shard = self.shard(idx).read().unwrap_or_else(|p| p.into_inner());
        shard.get(&idx).cloned()
    }

    fn get_or_insert(&self, idx: u64) -> Arc<Block> {
        if let Some(b) = self.lookup(idx) {
            b.referenced.store(true, Ordering::Relaxed);
            return b;
        }
        let block = {
            let mut shard = self.shard(idx).write().unwrap_or_else(|p| p.into_inner());
            if let Some(b) = shard.get(&idx) {
                return Arc::clone(b);
            }
            let b = Arc::new(Block {
                state: Mutex::new(BlockState {
                    data: vec![0u8; BLOCK as usize].into_boxed_slice(),
                    valid: 0,
                    dirty: 0,
                    loading: false,
                    writing: false,
                    prefetched: false,
                    removed: false,
                }),
                changed: Condvar::new(),
                referenced: AtomicBool::new(true),
            });
            shard.insert(idx, Arc::clone(&b));
            b
        };
        self.order
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(idx);
        let count = self.blocks.fetch_add(1, Ordering::Relaxed) + 1;
        let capacity = self.config.capacity / BLOCK;
        if count > capacity {
            self.evict_some(idx);
            if self.blocks.load(Ordering::Relaxed) > capacity {
                // Everything evictable is dirty: write some back here so
                // memory stays bounded, then evict again.
                self.write_back_oldest(idx, 8);
                self.evict_some(idx);
            }
        }
        block
    }

    /// Writes back up to `n` of the oldest dirty blocks (not `keep`).
    fn write_back_oldest(&self, keep: u64, n: usize) {
        let candidates: Vec<u64> = {
            let order = self.order.lock().unwrap_or_else(|p| p.into_inner());
            order
                .iter()
                .copied()
                .filter(|&i| i != keep)
                .take(n * 4)
                .collect()
        };
        let mut written = 0;
        for idx in candidates {
            if written >= n {
                break;
            }
            let Some(block) = self.lookup(idx) else {
                continue;
            };
            if block.lock().dirty == 0 {
                continue;
            }
            if let Err(e) = self.write_back(idx, &block) {
                tracing::error!(
                    error = &e as &dyn std::error::Error,
                    "write-back to make room failed; data stays dirty"
                );
                return;
            }
            written += 1;
        }
    }

    /// Second-chance eviction of clean, idle blocks until within capacity.
    fn evict_some(&self, keep: u64) {
        let capacity = (self.config.capacity / BLOCK).max(1);
        let mut order = self.order.lock().unwrap_or_else(|p| p.into_inner());
        let mut budget = order.len() * 2;
        while self.blocks.load(Ordering::Relaxed) > capacity && budget > 0 {
            budget -= 1;
            let Some(idx) = order.pop_front() else { break };
            if idx == keep {
                order.push_back(idx);
                continue;
            }
            let mut shard = self.shard(idx).write().unwrap_or_else(|p| p.into_inner());
            let Some(block) = shard.get(&idx).cloned() else {
                continue;
            };
            if block.referenced.swap(false, Ordering::Relaxed) {
                drop(shard);
                order.push_back(idx);
                continue;
            }
            let Ok(mut st) = block.state.try_lock() else {
                drop(shard);
                order.push_back(idx);
                continue;
            };
            if st.dirty != 0 || st.loading || st.writing {
                drop(st);
                drop(shard);
                order.push_back(idx);
                continue;
            }
            if st.prefetched {
                self.stats
                    .readahead_wasted_bytes
                    .fetch_add(self.block_len(idx), Ordering::Relaxed);
            }
            st.removed = true;
            shard.remove(&idx);
            self.blocks.fetch_sub(1, Ordering::Relaxed);
            self.stats.evictions.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Loads the missing sectors of `block` (single flight). Returns with
    /// the block locked and fully valid, or an error.
    fn load<'a>(
        &self,
        idx: u64,
        block: &'a Block,
        mut st: MutexGuard<'a, BlockState>,
    ) -> Result<MutexGuard<'a, BlockState>, DeviceError> {
        let all = self.existing(idx);
        loop {
            if st.valid & all == all {
                return Ok(st);
            }
            if !st.loading {
                break;
            }
            st = block.wait(st);
        }
        st.loading = true;
        drop(st);
        let len = self.block_len(idx) as usize;
        let mut tmp = vec![0u8; len];
        let result = self.device.read_at(&mut tmp, idx * BLOCK);
        self.stats.device_reads.fetch_add(1, Ordering::Relaxed);
        self.stats
            .device_read_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        let mut st = block.lock();
        st.loading = false;
        block.changed.notify_all();
        result?;
        Self::merge(&mut st, &tmp, all);
        Ok(st)
    }

    /// Copies device data into the sectors that are not valid yet (dirty
    /// or freshly written sectors are newer than the device).
    fn merge(st: &mut BlockState, data: &[u8], all: u128) {
        let missing = all & !st.valid;
        for (s, run) in runs(missing) {
            let from = s * SECTOR as usize;
            let to = ((s + run) * SECTOR as usize).min(data.len());
            if from < to {
                st.data[from..to].copy_from_slice(&data[from..to]);
            }
        }
        st.valid |= missing;
    }

    /// Writes the dirty sectors of one block to the device (not synced).
    fn write_back(&self, idx: u64, block: &Arc<Block>) -> Result<(), DeviceError> {
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

    fn dirty_set(&self) -> MutexGuard<'_, BTreeSet<u64>> {
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
    fn write_back_all(&self, range: Option<(u64, u64)>) -> Result<(), DeviceError> {
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

    fn capacity_blocks(&self) -> u64 {
        (self.config.capacity / BLOCK).max(1)
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
    fn throttle(&self) {
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

    /// Read-ahead: records a read and returns a range to prefetch.
    fn observe_read(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
        let max = self.config.readahead_max;
        if max == 0 {
            return None;
        }
        let min = (128 * 1024).min(max);
        let end = offset + len;
        let mut ra = self.readahead.lock().unwrap_or_else(|p| p.into_inner());
        ra.clock += 1;
        let clock = ra.clock;
        // Shrink windows when prefetched data was evicted unread.
        let waste = self.stats.readahead_wasted_bytes.load(Ordering::Relaxed);
        let shrink = waste > ra.seen_waste;
        ra.seen_waste = waste;
        let hit = ra.streams.iter_mut().find(|s| {
            let tolerance = s.window.max(len);
            offset + tolerance >= s.next && offset <= s.next + tolerance
        });
        match hit {
            Some(s) => {
                s.next = end;
                s.last_use = clock;
                s.window = if shrink {
                    (s.window / 2).max(min)
                } else {
                    (s.window * 2).min(max)
                };
                let from = s.prefetched_to.max(end);
                let to = (end + s.window).min(self.size);
                if to <= from {
                    return None;
                }
                s.prefetched_to = to;
                Some((from, to))
            }
            None => {
                let stream = Stream {
                    next: end,
                    window: min,
                    prefetched_to: end,
                    last_use: clock,
                };
                if ra.streams.len() < MAX_STREAMS {
                    ra.streams.push(stream);
                } else if let Some(old) = ra.streams.iter_mut().min_by_key(|s| s.last_use) {
                    *old = stream;
                }
                None
            }
        }
    }

    /// Loads the blocks of `[from, to)` that are absent, marking them as
    /// prefetched; consecutive absent blocks are read with one device read.
    fn prefetch(&self, from: u64, to: u64) {
        let first = from / BLOCK;
        let last = to.div_ceil(BLOCK);
        let mut idx = first;
        while idx < last {
            // Claim a run of blocks that are absent or empty and idle.
            let mut run: Vec<Arc<Block>> = Vec::new();
            while idx < last && (run.len() as u64) * BLOCK < MAX_PREFETCH_IO {
                let b = self.get_or_insert(idx);
                let mut st = b.lock();
                if st.removed || st.loading || st.valid != 0 {
                    drop(st);
                    if run.is_empty() {
                        idx += 1;
                        continue;
                    }
                    break;
                }
                st.loading = true;
                drop(st);
                run.push(b);
                idx += 1;
            }
            if run.is_empty() {
                continue;
            }
            let start = idx - run.len() as u64;
            let len = ((idx * BLOCK).min(self.size) - start * BLOCK) as usize;
            let mut tmp = vec![0u8; len];
            let result = self.device.read_at(&mut tmp, start * BLOCK);
            self.stats.device_reads.fetch_add(1, Ordering::Relaxed);
            self.stats
                .device_read_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            self.stats
                .readahead_issued_bytes
                .fetch_add(len as u64, Ordering::Relaxed);
            for (i, b) in run.iter().enumerate() {
                let bidx = start + i as u64;
                let mut st = b.lock();
                st.loading = false;
                if result.is_ok() {
                    let off = i * BLOCK as usize;
                    let end = (off + BLOCK as usize).min(len);
                    Self::merge(&mut st, &tmp[off..end], self.existing(bidx));
                    st.prefetched = true;
                }
                b.changed.notify_all();
            }
            if result.is_err() {
                return;
            }
        }
    }

    fn schedule_prefetch(&self, from: u64, to: u64) {
        let tx = self.prefetch_tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = tx.as_ref() {
            let _ = tx.send((from, to));
        }
    }
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
        let spawn_err = |e: std::io::Error| DeviceError::Io {
            device: "cache".into(),
            op: IoOp::Cache,
            offset: 0,
            len: 0,
            source: e,
        };
        let (tx, rx) = std::sync::mpsc::channel::<(u64, u64)>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..config.prefetch_threads.max(1) {
            let weak: Weak<Inner> = Arc::downgrade(&inner);
            let rx = Arc::clone(&rx);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("sluice-prefetch-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        let Ok((from, to)) = job else { return };
                        let Some(inner) = weak.upgrade() else { return };
                        inner.prefetch(from, to);
                    })
                    .map_err(spawn_err)?,
            );
        }
        *inner.prefetch_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        if config.mode == CacheMode::WriteBack {
            let (tx, rx) = std::sync::mpsc::channel::<Arc<WriteBackJob>>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 1..WRITEBACK_PARALLELISM {
                let weak: Weak<Inner> = Arc::downgrade(&inner);
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
                        .map_err(spawn_err)?,
                );
            }
            *inner.writeback_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
            let weak = Arc::downgrade(&inner);
            threads.push(
                std::thread::Builder::new()
                    .name("sluice-writeback".into())
                    .spawn(move || writeback_loop(&weak))
                    .map_err(spawn_err)?,
            );
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
        let s = &self.inner.stats;
        let c = |name, help, v: &AtomicU64| DeviceMetric {
            name,
            help,
            kind: MetricKind::Counter,
            value: v.load(Ordering::Relaxed) as f64,
            labels: Vec::new(),
        };
        let mut m = self.inner.device.metrics();
        m.extend([
            c(
                "cache_read_hits_total",
                "Block reads served from the cache.",
                &s.read_hits,
            ),
            c(
                "cache_read_misses_total",
                "Block reads that loaded from the device.",
                &s.read_misses,
            ),
            c(
                "cache_device_reads_total",
                "Reads issued to the device by the cache.",
                &s.device_reads,
            ),
            c(
                "cache_device_read_bytes_total",
                "Bytes the cache read from the device.",
                &s.device_read_bytes,
            ),
            c(
                "cache_writeback_bytes_total",
                "Dirty bytes written back to the device.",
                &s.writeback_bytes,
            ),
            c(
                "cache_writeback_visited_blocks_total",
                "Blocks write-back looked at (dirty or being written).",
                &s.writeback_visited_blocks,
            ),
            c("cache_evictions_total", "Blocks evicted.", &s.evictions),
            c(
                "readahead_issued_bytes_total",
                "Bytes prefetched by read-ahead and CACHE.",
                &s.readahead_issued_bytes,
            ),
            c(
                "readahead_hit_bytes_total",
                "Prefetched bytes later read.",
                &s.readahead_hit_bytes,
            ),
            c(
                "readahead_wasted_bytes_total",
                "Prefetched bytes evicted unread.",
                &s.readahead_wasted_bytes,
            ),
        ]);
        m.push(DeviceMetric {
            name: "cache_dirty_bytes",
            help: "Dirty bytes not yet written back.",
            kind: MetricKind::Gauge,
            value: s.dirty_bytes.load(Ordering::Relaxed) as f64,
            labels: Vec::new(),
        });
        m.push(DeviceMetric {
            name: "cache_blocks",
            help: "64 KiB blocks held by the cache.",
            kind: MetricKind::Gauge,
            value: self.inner.blocks.load(Ordering::Relaxed) as f64,
            labels: Vec::new(),
        });
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;
    use std::sync::atomic::AtomicUsize;

    /// Counts device calls and can fail or stall them.
    #[derive(Debug)]
    struct Counting {
        inner: MemDevice,
        reads: AtomicUsize,
        writes: AtomicUsize,
        flushes: AtomicUsize,
        read_delay: Duration,
        fail_writes: AtomicBool,
        /// Threads that issued writes, with their names.
        writers: Mutex<HashMap<std::thread::ThreadId, Option<String>>>,
    }

    impl Counting {
        fn new(size: u64) -> Self {
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
    fn assert_dirty_set_consistent(cache: &CacheDevice) {
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

    fn no_readahead(mode: CacheMode) -> CacheConfig {
        CacheConfig {
            mode,
            readahead_max: 0,
            ..CacheConfig::default()
        }
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
    fn concurrent_reads_of_one_block_cause_one_device_read() {
        let mut counting = Counting::new(1 << 20);
        counting.read_delay = Duration::from_millis(50);
        let dev = Arc::new(counting);
        let cache =
            Arc::new(CacheDevice::new(dev.clone(), no_readahead(CacheMode::WriteBack)).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let c = Arc::clone(&cache);
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    c.read_at(&mut b, 8192).unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(dev.reads.load(Ordering::SeqCst), 1);
        let mut b = [0u8; 4096];
        assert!(cache.read_at_nowait(&mut b, 8192).unwrap(), "now a hit");
        assert!(
            !cache.read_at_nowait(&mut b, 512 * 1024).unwrap(),
            "a miss would block"
        );
    }

    #[test]
    fn sequential_reads_trigger_read_ahead_and_hits() {
        // Timing-free: a sequential stream must schedule prefetches, and
        // once they have completed (waited for, not slept on) the next
        // reads of the stream are served from prefetched blocks.
        let dev = Arc::new(Counting::new(64 << 20));
        let cache = CacheDevice::new(dev.clone(), CacheConfig::default()).unwrap();
        let stats = &cache.inner.stats;
        let mut b = vec![0u8; 64 * 1024];
        for i in 0..8u64 {
            cache.read_at(&mut b, i * 64 * 1024).unwrap();
        }
        let issued = || stats.readahead_issued_bytes.load(Ordering::SeqCst);
        assert!(cache.inner.readahead.lock().unwrap().streams.len() == 1);
        // Wait (bounded) until the prefetchers have loaded what was asked.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut last = u64::MAX;
        while std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            let now = issued();
            if now > 0 && now == last {
                break;
            }
            last = now;
        }
        assert!(issued() > 0, "a sequential stream schedules read-ahead");
        let misses_before = stats.read_misses.load(Ordering::SeqCst);
        cache.read_at(&mut b, 8 * 64 * 1024).unwrap();
        assert!(
            stats.readahead_hit_bytes.load(Ordering::SeqCst) > 0,
            "prefetched block was read"
        );
        assert_eq!(
            stats.read_misses.load(Ordering::SeqCst),
            misses_before,
            "served without loading from the device"
        );
    }

    #[test]
    fn random_reads_do_not_prefetch() {
        let dev = Arc::new(Counting::new(64 << 20));
        let cache = CacheDevice::new(dev.clone(), CacheConfig::default()).unwrap();
        let mut b = vec![0u8; 4096];
        for i in 0..50u64 {
            cache.read_at(&mut b, (i * 7919 % 900) * 65536).unwrap();
        }
        assert_eq!(
            cache
                .inner
                .stats
                .readahead_issued_bytes
                .load(Ordering::SeqCst),
            0
        );
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
    fn eviction_keeps_capacity_and_dirty_data() {
        let dev = Arc::new(Counting::new(64 << 20));
        let cfg = CacheConfig {
            capacity: 16 * BLOCK,
            high_watermark: 8 * BLOCK,
            low_watermark: 2 * BLOCK,
            ..no_readahead(CacheMode::WriteBack)
        };
        let cache = CacheDevice::new(dev.clone(), cfg).unwrap();
        for i in 0..200u64 {
            cache.write_at(&[i as u8; 4096], i * BLOCK, false).unwrap();
        }
        assert!(cache.inner.blocks.load(Ordering::SeqCst) <= 16 + 1);
        for i in 0..200u64 {
            let mut b = [0u8; 4096];
            cache.read_at(&mut b, i * BLOCK).unwrap();
            assert_eq!(b, [i as u8; 4096], "block {i}");
        }
        assert_dirty_set_consistent(&cache);
        cache.flush().unwrap();
        assert_dirty_set_consistent(&cache);
        assert!(cache.inner.dirty_set().is_empty());
    }

    fn visited(cache: &CacheDevice) -> u64 {
        cache
            .inner
            .stats
            .writeback_visited_blocks
            .load(Ordering::SeqCst)
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
    fn a_flush_with_nothing_dirty_writes_nothing_and_syncs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = crate::FileDevice::open(
            &dir.path().join("img"),
            &crate::FileOptions {
                size: Some(4 << 20),
                ..Default::default()
            },
        )
        .unwrap();
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
        drop(file);
    }

    /// Another device over the file `dir` holds, with counters of its own.
    fn file_clone(dir: &tempfile::TempDir) -> crate::FileDevice {
        crate::FileDevice::open(&dir.path().join("img"), &crate::FileOptions::default()).unwrap()
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
