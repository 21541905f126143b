//! The latency histogram: fixed power-of-two buckets, each updated with
//! one relaxed atomic add.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in microseconds (powers of two
/// from 1 µs to about 8.4 s).
const BUCKETS_US: [u64; 24] = {
    let mut b = [0u64; 24];
    let mut i = 0;
    while i < 24 {
        b[i] = 1 << i;
        i += 1;
    }
    b
};

/// A fixed-bucket latency histogram updated with atomics.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; 24],
    /// Observations above the last bucket.
    overflow: AtomicU64,
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        let us = ns.div_ceil(1000).max(1);
        // Bucket i holds values <= 2^i µs.
        let i = (64 - (us - 1).leading_zeros()) as usize;
        match self.buckets.get(i) {
            Some(b) => b.fetch_add(1, Ordering::Relaxed),
            None => self.overflow.fetch_add(1, Ordering::Relaxed),
        };
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes the bucket, sum and count lines of family `name`, each
    /// series with `labels`.
    pub(super) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (b, le) in self.buckets.iter().zip(BUCKETS_US) {
            cumulative += b.load(Ordering::Relaxed);
            let le = le as f64 / 1e6;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        cumulative += self.overflow.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(
            out,
            "{name}_count{{{labels}}} {}",
            self.count.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_bounded() {
        let h = Histogram::default();
        h.observe(Duration::from_nanos(500)); // <= 1 µs
        h.observe(Duration::from_micros(3)); // <= 4 µs
        h.observe(Duration::from_micros(4)); // <= 4 µs
        h.observe(Duration::from_secs(100)); // overflow
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(
            out.contains("x_bucket{a=\"b\",le=\"0.000001\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.000002\"} 1\n"));
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.000004\"} 3\n"));
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 4\n"));
        assert!(out.contains("x_count{a=\"b\"} 4\n"));
    }
}
