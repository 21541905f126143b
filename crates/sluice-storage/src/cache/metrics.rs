//! The cache's counters and gauges, and the metrics they are reported as.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Inner;
use crate::{DeviceMetric, MetricKind};

/// What the cache counts, reported by [`Inner::append_metrics`].
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) read_hits: AtomicU64,
    pub(super) read_misses: AtomicU64,
    pub(super) device_reads: AtomicU64,
    pub(super) device_read_bytes: AtomicU64,
    pub(super) writeback_bytes: AtomicU64,
    /// Blocks write-back looked at (FLUSH, FUA, background, close): with
    /// the dirty set, only blocks that were dirty or being written.
    pub(super) writeback_visited_blocks: AtomicU64,
    pub(super) dirty_bytes: AtomicU64,
    /// Blocks holding any dirty sector (each pins 64 KiB of memory).
    pub(super) dirty_blocks: AtomicU64,
    pub(super) evictions: AtomicU64,
    pub(super) readahead_issued_bytes: AtomicU64,
    pub(super) readahead_hit_bytes: AtomicU64,
    pub(super) readahead_wasted_bytes: AtomicU64,
}

impl Inner {
    /// Appends the cache's own counters and gauges to `m`, the metrics of
    /// the device beneath.
    pub(super) fn append_metrics(&self, m: &mut Vec<DeviceMetric>) {
        let s = &self.stats;
        let c = |name, help, v: &AtomicU64| DeviceMetric {
            name,
            help,
            kind: MetricKind::Counter,
            value: v.load(Ordering::Relaxed) as f64,
            labels: Vec::new(),
        };
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
            value: self.blocks.load(Ordering::Relaxed) as f64,
            labels: Vec::new(),
        });
    }
}
