//! Read-ahead: a detector of sequential streams across requests and
//! clients that grows each stream's window while its prefetches are read
//! and shrinks it when they are evicted unread, and the threads that
//! prefetch (for read-ahead and NBD_CMD_CACHE) with one device read per
//! run of absent blocks.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use super::block::{Block, BLOCK};
use super::{spawn_error, Inner};
use crate::DeviceError;

/// Streams the read-ahead detector follows at once.
const MAX_STREAMS: usize = 16;
/// Largest device read issued for prefetching.
const MAX_PREFETCH_IO: u64 = 1 << 20;

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
pub(super) struct ReadAhead {
    streams: Vec<Stream>,
    clock: u64,
    /// Wasted prefetch seen when the windows were last adjusted.
    seen_waste: u64,
}

impl Inner {
    /// Read-ahead: records a read and returns a range to prefetch.
    pub(super) fn observe_read(&self, offset: u64, len: u64) -> Option<(u64, u64)> {
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

    pub(super) fn schedule_prefetch(&self, from: u64, to: u64) {
        let tx = self.prefetch_tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = tx.as_ref() {
            let _ = tx.send((from, to));
        }
    }
}

/// Starts the threads that prefetch the ranges sent to
/// `inner.prefetch_tx`.
pub(super) fn start_prefetchers(
    inner: &Arc<Inner>,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<(), DeviceError> {
    let (tx, rx) = std::sync::mpsc::channel::<(u64, u64)>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 0..inner.config.prefetch_threads.max(1) {
        let weak: Weak<Inner> = Arc::downgrade(inner);
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
                .map_err(spawn_error)?,
        );
    }
    *inner.prefetch_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::cache::tests::Counting;
    use crate::cache::{CacheConfig, CacheDevice};
    use crate::BlockDevice;

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
}
