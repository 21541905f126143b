//! Fixed-bound latency histograms: one per worker (no sharing on the hot
//! path), merged when the run ends.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Lowest latency tracked: 100 ns.
const LOW_NS: u64 = 100;
/// Highest latency tracked: 100 s. Longer samples are clamped to it.
const HIGH_NS: u64 = 100_000_000_000;
/// Three significant digits; with the 100 ns floor, buckets are within
/// 0.7 % of the value at every magnitude.
const SIGFIG: u8 = 3;

/// Latencies in nanoseconds, between fixed bounds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            inner: Histogram::new_with_bounds(LOW_NS, HIGH_NS, SIGFIG)
                .expect("constant bounds are valid"),
        }
    }

    /// Records one latency, clamped into the tracked range.
    pub fn record_ns(&mut self, ns: u64) {
        self.inner.saturating_record(ns.clamp(LOW_NS, HIGH_NS));
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &Self) {
        // Same bounds on both sides, so this cannot fail.
        let _ = self.inner.add(&other.inner);
    }

    /// How many samples.
    pub fn count(&self) -> u64 {
        self.inner.len()
    }

    /// The value at `quantile` (0.0..=1.0), in nanoseconds; 0 when empty.
    pub fn quantile_ns(&self, quantile: f64) -> u64 {
        if self.inner.is_empty() {
            return 0;
        }
        self.inner.value_at_quantile(quantile.clamp(0.0, 1.0))
    }

    /// The usual summary.
    pub fn summary(&self) -> LatencySummary {
        if self.inner.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            count: self.count(),
            mean_us: self.inner.mean() / 1000.0,
            p50_us: us(self.quantile_ns(0.5)),
            p90_us: us(self.quantile_ns(0.9)),
            p99_us: us(self.quantile_ns(0.99)),
            p999_us: us(self.quantile_ns(0.999)),
            max_us: us(self.inner.max()),
        }
    }
}

/// Percentiles of a latency distribution, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest sample.
    pub max_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 0.01 + 0.001
    }

    #[test]
    fn percentiles_of_a_uniform_ramp() {
        let mut h = LatencyHistogram::new();
        for us in 1..=10_000u64 {
            h.record_ns(us * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 10_000);
        assert!(close(s.p50_us, 5000.0), "{s:?}");
        assert!(close(s.p90_us, 9000.0), "{s:?}");
        assert!(close(s.p99_us, 9900.0), "{s:?}");
        assert!(close(s.p999_us, 9990.0), "{s:?}");
        assert!(close(s.max_us, 10_000.0), "{s:?}");
        assert!(close(s.mean_us, 5000.5), "{s:?}");
    }

    #[test]
    fn tail_is_seen_and_merge_adds_samples() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for _ in 0..999 {
            a.record_ns(10_000);
        }
        b.record_ns(5_000_000);
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 1000);
        assert!(close(s.p50_us, 10.0) && close(s.p99_us, 10.0), "{s:?}");
        assert!(close(s.max_us, 5000.0), "{s:?}");
    }

    #[test]
    fn out_of_range_samples_are_clamped_not_lost() {
        let mut h = LatencyHistogram::new();
        h.record_ns(0);
        h.record_ns(u64::MAX);
        assert_eq!(h.count(), 2);
        assert!(h.summary().max_us >= 99_000_000.0);
        assert_eq!(LatencyHistogram::new().summary(), LatencySummary::default());
    }
}
