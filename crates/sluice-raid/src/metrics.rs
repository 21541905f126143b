//! Per-member counters and request-time histograms, and their
//! [`DeviceMetric`]s (labelled with the member's index and name).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sluice_storage::{DeviceMetric, HistogramSeries, MetricKind};

/// Upper bounds (seconds) of the request-time buckets: loopback round
/// trips are tens of microseconds, a member that stops answering takes
/// its client's timeout (seconds).
const BOUNDS: [f64; 16] = [
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 0.5,
    1.0, 2.5, 10.0,
];

/// Request times of one member: fixed buckets, lock-free.
#[derive(Debug, Default)]
pub(crate) struct LatencyHistogram {
    /// Requests per bucket (not cumulative); the last is past every bound.
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl LatencyHistogram {
    pub(crate) fn record(&self, t: Duration) {
        let secs = t.as_secs_f64();
        let at = BOUNDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BOUNDS.len());
        self.buckets[at].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            t.as_nanos().min(u128::from(u64::MAX)) as u64,
            Ordering::Relaxed,
        );
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counters of one member.
#[derive(Debug, Default)]
pub(crate) struct MemberCounters {
    pub(crate) failed: AtomicBool,
    pub(crate) reads: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) written_bytes: AtomicU64,
    pub(crate) latency: LatencyHistogram,
    /// Probes sent to the member while it was idle (see `health.rs`).
    pub(crate) probes: AtomicU64,
    /// When the member last answered well: one more than the
    /// nanoseconds after the array's epoch, 0 for never (see `health.rs`).
    pub(crate) last_answer: AtomicU64,
}

const REQUEST_TIME: &str = "raid_member_request_duration_seconds";
const REQUEST_TIME_HELP: &str = "Time a member request took as the array saw it: from issuing the fan-out step that held it to the step's end (requests awaited together end with the slowest)";

/// The metrics of one member, labelled `member` (index) and `name`.
/// `last_answer` is when the member last answered well, in seconds
/// since the Unix epoch (none if it never did).
pub(crate) fn member_metrics(
    index: usize,
    name: &str,
    c: &MemberCounters,
    last_answer: Option<f64>,
) -> Vec<DeviceMetric> {
    let labels = |extra: Option<(&'static str, String)>| -> Vec<(&'static str, String)> {
        [("member", index.to_string()), ("name", name.to_owned())]
            .into_iter()
            .chain(extra)
            .collect()
    };
    let get = |v: &AtomicU64| v.load(Ordering::Relaxed) as f64;
    let counter = |name, help, value, extra| DeviceMetric {
        name,
        help,
        kind: MetricKind::Counter,
        value,
        labels: labels(extra),
    };
    let op = |op: &str| Some(("op", op.to_owned()));
    let mut out = vec![
        counter(
            "raid_member_requests_total",
            "Member requests issued by the RAID layer",
            get(&c.reads),
            op("read"),
        ),
        counter(
            "raid_member_requests_total",
            "Member requests issued by the RAID layer",
            get(&c.writes),
            op("write"),
        ),
        counter(
            "raid_member_requests_total",
            "Member requests issued by the RAID layer",
            get(&c.flushes),
            op("flush"),
        ),
        counter(
            "raid_member_bytes_total",
            "Bytes the RAID layer read from or wrote to a member",
            get(&c.read_bytes),
            op("read"),
        ),
        counter(
            "raid_member_bytes_total",
            "Bytes the RAID layer read from or wrote to a member",
            get(&c.written_bytes),
            op("write"),
        ),
        counter(
            "raid_member_probes_total",
            "Probes sent to the member while it was idle, to notice it dying without I/O",
            get(&c.probes),
            None,
        ),
        counter(
            "raid_member_errors_total",
            "Member requests that failed",
            get(&c.errors),
            None,
        ),
        DeviceMetric {
            name: "raid_member_failed",
            help: "1 if the member is missing or marked failed",
            kind: MetricKind::Gauge,
            value: if c.failed.load(Ordering::SeqCst) {
                1.0
            } else {
                0.0
            },
            labels: labels(None),
        },
    ];
    if let Some(at) = last_answer {
        out.push(DeviceMetric {
            name: "raid_member_last_answer_timestamp_seconds",
            help: "When the member last answered a request or probe well (Unix time)",
            kind: MetricKind::Gauge,
            value: at,
            labels: labels(None),
        });
    }
    let h = &c.latency;
    let mut cumulative = 0;
    for (i, bucket) in h.buckets.iter().enumerate() {
        cumulative += bucket.load(Ordering::Relaxed);
        let le = BOUNDS
            .get(i)
            .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
        out.push(DeviceMetric {
            name: REQUEST_TIME,
            help: REQUEST_TIME_HELP,
            kind: MetricKind::Histogram(HistogramSeries::Bucket),
            value: cumulative as f64,
            labels: labels(Some(("le", le))),
        });
    }
    for (series, value) in [
        (HistogramSeries::Sum, get(&h.sum_nanos) / 1e9),
        (HistogramSeries::Count, get(&h.count)),
    ] {
        out.push(DeviceMetric {
            name: REQUEST_TIME,
            help: REQUEST_TIME_HELP,
            kind: MetricKind::Histogram(series),
            value,
            labels: labels(None),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_at_the_count() {
        let c = MemberCounters::default();
        for us in [10, 60, 60, 2_000, 20_000_000] {
            c.latency.record(Duration::from_micros(us));
        }
        let m = member_metrics(2, "nbd://h/e", &c, None);
        let buckets: Vec<(String, f64)> = m
            .iter()
            .filter(|m| m.kind == MetricKind::Histogram(HistogramSeries::Bucket))
            .map(|m| (m.labels[2].1.clone(), m.value))
            .collect();
        assert_eq!(buckets[0], ("0.00005".to_owned(), 1.0));
        assert_eq!(buckets[1], ("0.0001".to_owned(), 3.0));
        assert_eq!(buckets[5], ("0.0025".to_owned(), 4.0));
        assert_eq!(buckets.last(), Some(&("+Inf".to_owned(), 5.0)));
        assert_eq!(buckets[buckets.len() - 2].1, 4.0);
        let count = m
            .iter()
            .find(|m| m.kind == MetricKind::Histogram(HistogramSeries::Count))
            .expect("count");
        assert_eq!(count.value, 5.0);
        let sum = m
            .iter()
            .find(|m| m.kind == MetricKind::Histogram(HistogramSeries::Sum))
            .expect("sum");
        assert!((sum.value - 20.002_13).abs() < 1e-9, "{}", sum.value);
        assert_eq!(
            m[0].labels,
            [
                ("member", "2".to_owned()),
                ("name", "nbd://h/e".to_owned()),
                ("op", "read".to_owned())
            ]
        );
    }
}
