//! The block index: block numbers to blocks in sharded maps, insertion
//! with second-chance eviction of clean, idle blocks (writing back the
//! oldest dirty ones when nothing else can go), and single-flight loads
//! of a block's missing sectors.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use super::block::{runs, sector_mask, Block, BlockState, BLOCK, SECTOR};
use super::Inner;
use crate::DeviceError;

/// Shards of the block index.
pub(super) const SHARDS: usize = 64;
/// One slice of the block index.
pub(super) type Shard = RwLock<HashMap<u64, Arc<Block>>>;

impl Inner {
    fn shard(&self, idx: u64) -> &Shard {
        &self.shards[(idx % SHARDS as u64) as usize]
    }

    pub(super) fn block_len(&self, idx: u64) -> u64 {
        (self.size - idx * BLOCK).min(BLOCK)
    }

    /// Sectors that exist in this block (the last block may be short).
    pub(super) fn existing(&self, idx: u64) -> u128 {
        sector_mask(0, self.block_len(idx))
    }

    pub(super) fn lookup(&self, idx: u64) -> Option<Arc<Block>> {
        let shard = self.shard(idx).read().unwrap_or_else(|p| p.into_inner());
        shard.get(&idx).cloned()
    }

    pub(super) fn get_or_insert(&self, idx: u64) -> Arc<Block> {
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
    pub(super) fn load<'a>(
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
    pub(super) fn merge(st: &mut BlockState, data: &[u8], all: u128) {
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

    pub(super) fn capacity_blocks(&self) -> u64 {
        (self.config.capacity / BLOCK).max(1)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::cache::block::BLOCK;
    use crate::cache::tests::{assert_dirty_set_consistent, no_readahead, Counting};
    use crate::cache::{CacheConfig, CacheDevice, CacheMode};
    use crate::BlockDevice;

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
}
