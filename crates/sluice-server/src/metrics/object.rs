//! The native object protocol's series: requests per command and data
//! distribution type, batch frames with their members, and the work the
//! server did together (grouped members, creates and commits).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_obj_proto::Opcode;

use super::histogram::Histogram;

/// The series of requests with `opcode`; the last row holds requests
/// refused before they ran (unknown opcode, bad flags, DDT, lengths,
/// attributes; batch frames that cannot be split), labelled `invalid`.
fn row(opcode: Option<Opcode>) -> usize {
    opcode
        .and_then(|op| Opcode::ALL.iter().position(|o| *o == op))
        .unwrap_or(Opcode::ALL.len())
}

fn row_label(row: usize) -> &'static str {
    Opcode::ALL.get(row).map_or("invalid", |op| op.name())
}

/// The data distribution types, in label order.
const DDT_LABELS: [&str; 3] = ["contiguous", "sgl", "strided"];

fn ddt_index(ddt: sluice_obj_proto::DdtKind) -> usize {
    match ddt {
        sluice_obj_proto::DdtKind::Contiguous => 0,
        sluice_obj_proto::DdtKind::Sgl => 1,
        sluice_obj_proto::DdtKind::Strided => 2,
    }
}

/// One counter of an object protocol series.
type SeriesCounter = fn(&ObjSeries) -> &AtomicU64;

#[derive(Debug, Default)]
struct ObjSeries {
    requests: AtomicU64,
    segments: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    latency: Histogram,
}

/// Upper bounds of the members-per-batch buckets (powers of two).
const BATCH_BUCKETS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Batch frames split and how many members each carried.
#[derive(Debug, Default)]
struct BatchSeries {
    frames: AtomicU64,
    /// Frames with at most `BATCH_BUCKETS[i]` members (not cumulative).
    buckets: [AtomicU64; 11],
    overflow: AtomicU64,
    members: AtomicU64,
    /// Pool jobs that ran several small members of one frame, and the
    /// members they ran.
    groups: AtomicU64,
    grouped: AtomicU64,
    /// Metadata commits made for such jobs' data changes, and the
    /// changes.
    commits: AtomicU64,
    committed: AtomicU64,
}

/// Metrics of the native object protocol, per command and per data
/// distribution type: requests, segments, bytes, errors and latency;
/// and batch frames with their members.
#[derive(Debug)]
pub struct ObjectMetrics {
    series: [[ObjSeries; 3]; Opcode::ALL.len() + 1],
    batches: BatchSeries,
    /// Pool jobs that made several creates of one receive with one store
    /// call, and the creates they made.
    create_groups: AtomicU64,
    grouped_creates: AtomicU64,
    /// Scatter/gather and strided reads answered with their span.
    span_reads: AtomicU64,
}

impl Default for ObjectMetrics {
    fn default() -> Self {
        Self {
            series: std::array::from_fn(|_| std::array::from_fn(|_| ObjSeries::default())),
            batches: BatchSeries::default(),
            create_groups: AtomicU64::new(0),
            grouped_creates: AtomicU64::new(0),
            span_reads: AtomicU64::new(0),
        }
    }
}

impl ObjectMetrics {
    fn at(&self, opcode: Option<Opcode>, ddt: sluice_obj_proto::DdtKind) -> &ObjSeries {
        &self.series[row(opcode)][ddt_index(ddt)]
    }

    /// Records a finished request: its opcode (`None` for a request
    /// refused before it ran) and DDT, how many segments it named, the
    /// data bytes it moved, whether it failed and its time from receipt
    /// to reply.
    pub fn record(
        &self,
        opcode: Option<Opcode>,
        ddt: sluice_obj_proto::DdtKind,
        segments: u64,
        bytes: u64,
        failed: bool,
        latency: Duration,
    ) {
        let s = self.at(opcode, ddt);
        s.requests.fetch_add(1, Ordering::Relaxed);
        s.segments.fetch_add(segments, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        if failed {
            s.errors.fetch_add(1, Ordering::Relaxed);
        }
        s.latency.observe(latency);
    }

    /// Records a batch frame split into `members` requests (each is
    /// also recorded as a request when it completes).
    pub fn record_batch(&self, members: u64) {
        let b = &self.batches;
        b.frames.fetch_add(1, Ordering::Relaxed);
        b.members.fetch_add(members, Ordering::Relaxed);
        match BATCH_BUCKETS.iter().position(|le| members <= *le) {
            Some(i) => b.buckets[i].fetch_add(1, Ordering::Relaxed),
            None => b.overflow.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Records `members` small members of one batch frame run together
    /// in one pool job.
    pub fn record_batch_group(&self, members: u64) {
        let b = &self.batches;
        b.groups.fetch_add(1, Ordering::Relaxed);
        b.grouped.fetch_add(members, Ordering::Relaxed);
    }

    /// Records `members` creates made with one store call (those of one
    /// receive, or of one batch frame's shared job).
    pub fn record_create_group(&self, members: u64) {
        self.create_groups.fetch_add(1, Ordering::Relaxed);
        self.grouped_creates.fetch_add(members, Ordering::Relaxed);
    }

    /// Records a scatter/gather or strided read answered with its span.
    pub fn record_span_read(&self) {
        self.span_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the data changes (`changes`) of one shared job applied by
    /// one store call, and the metadata commits (`commits`) it made.
    pub fn record_batch_commits(&self, changes: u64, commits: u64) {
        let b = &self.batches;
        b.commits.fetch_add(commits, Ordering::Relaxed);
        b.committed.fetch_add(changes, Ordering::Relaxed);
    }

    /// Batch frames split so far.
    pub fn batches(&self) -> u64 {
        self.batches.frames.load(Ordering::Relaxed)
    }

    /// Requests of `opcode` (`None`: refused) with `ddt` completed so far.
    pub fn requests(&self, opcode: Option<Opcode>, ddt: sluice_obj_proto::DdtKind) -> u64 {
        self.at(opcode, ddt).requests.load(Ordering::Relaxed)
    }

    /// Renders every family of the object protocol.
    pub(super) fn render(&self, out: &mut String) {
        self.render_requests(out);
        self.render_batches(out);
        self.render_grouped_work(out);
    }

    /// Requests, segments, bytes, errors and latency by command and DDT.
    /// Series that saw no request are left out, so a server without
    /// object traffic does not print 45 empty histograms.
    fn render_requests(&self, out: &mut String) {
        let used: Vec<(&str, &str, &ObjSeries)> = self
            .series
            .iter()
            .enumerate()
            .flat_map(|(i, row)| {
                DDT_LABELS
                    .iter()
                    .zip(row)
                    .map(move |(d, s)| (row_label(i), *d, s))
            })
            .filter(|(_, _, s)| s.requests.load(Ordering::Relaxed) > 0)
            .collect();
        let counters: [(&str, &str, SeriesCounter); 4] = [
            (
                "sluice_obj_requests_total",
                "Object protocol requests completed, by command and data distribution type.",
                |s| &s.requests,
            ),
            (
                "sluice_obj_segments_total",
                "Segments named by object protocol requests (1 for contiguous).",
                |s| &s.segments,
            ),
            (
                "sluice_obj_bytes_total",
                "Data bytes moved by object protocol requests.",
                |s| &s.bytes,
            ),
            (
                "sluice_obj_errors_total",
                "Object protocol requests answered with an error.",
                |s| &s.errors,
            ),
        ];
        for (name, help, counter) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (c, d, s) in &used {
                let _ = writeln!(
                    out,
                    "{name}{{command=\"{c}\",ddt=\"{d}\"}} {}",
                    counter(s).load(Ordering::Relaxed)
                );
            }
        }
        let name = "sluice_obj_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from receiving an object protocol request to sending its reply.\n# TYPE {name} histogram"
        );
        for (c, d, s) in &used {
            let labels = format!("command=\"{c}\",ddt=\"{d}\"");
            s.latency.render(out, name, &labels);
        }
    }

    /// Batch frames split, and their members as a histogram.
    fn render_batches(&self, out: &mut String) {
        let b = &self.batches;
        let name = "sluice_obj_batches_total";
        let _ = writeln!(
            out,
            "# HELP {name} Batch frames split into their member requests.\n# TYPE {name} counter\n{name} {}",
            b.frames.load(Ordering::Relaxed)
        );
        let name = "sluice_obj_batch_members";
        let _ = writeln!(
            out,
            "# HELP {name} Member requests per batch frame.\n# TYPE {name} histogram"
        );
        let mut cumulative = 0;
        for (n, le) in b.buckets.iter().zip(BATCH_BUCKETS) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
        }
        cumulative += b.overflow.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}", b.members.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_count {cumulative}");
    }

    /// Work the server did together: members of a batch frame run in one
    /// pool job, creates made with one store call, their metadata
    /// commits, and reads answered with their span.
    fn render_grouped_work(&self, out: &mut String) {
        let b = &self.batches;
        let counters = [
            (
                "sluice_obj_batch_groups_total",
                "Pool jobs that each ran several small members of one batch frame.",
                b.groups.load(Ordering::Relaxed),
            ),
            (
                "sluice_obj_batch_grouped_members_total",
                "Batch members run in such shared pool jobs.",
                b.grouped.load(Ordering::Relaxed),
            ),
            (
                "sluice_obj_create_groups_total",
                "Store calls that each made several creates with one metadata commit (creates received together, or the creates of a batch frame's shared job).",
                self.create_groups.load(Ordering::Relaxed),
            ),
            (
                "sluice_obj_grouped_creates_total",
                "Creates made in those calls.",
                self.grouped_creates.load(Ordering::Relaxed),
            ),
            (
                "sluice_obj_batch_commits_total",
                "Metadata commits made for the data changes of shared pool jobs (one per job, plus one for each durable or journaled change).",
                b.commits.load(Ordering::Relaxed),
            ),
            (
                "sluice_obj_batch_committed_changes_total",
                "Data changes (WRITE, APPEND, PUNCH) of shared pool jobs applied by those commits' store calls.",
                b.committed.load(Ordering::Relaxed),
            ),
            (
                "sluice_obj_span_reads_total",
                "Scatter/gather and strided READs answered with the span of their segments (holes included) from the file, for a client that takes one.",
                self.span_reads.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::metrics::ServerMetrics;

    #[test]
    fn batches_are_counted_with_their_members() {
        let s = ServerMetrics::default();
        let text = s.render(std::iter::empty());
        assert!(text.contains("\nsluice_obj_batches_total 0\n"), "{text}");
        assert!(text.contains("\nsluice_obj_batch_members_count 0\n"));
        s.objects.record_batch(2);
        s.objects.record_batch(3);
        s.objects.record_batch(4000);
        assert_eq!(s.objects.batches(), 3);
        let text = s.render(std::iter::empty());
        assert!(text.contains("\nsluice_obj_batches_total 3\n"), "{text}");
        assert!(text.contains("\nsluice_obj_batch_members_bucket{le=\"1\"} 0\n"));
        assert!(text.contains("\nsluice_obj_batch_members_bucket{le=\"2\"} 1\n"));
        assert!(text.contains("\nsluice_obj_batch_members_bucket{le=\"4\"} 2\n"));
        assert!(text.contains("\nsluice_obj_batch_members_bucket{le=\"1024\"} 2\n"));
        assert!(text.contains("\nsluice_obj_batch_members_bucket{le=\"+Inf\"} 3\n"));
        assert!(
            text.contains("\nsluice_obj_batch_groups_total 0\n"),
            "{text}"
        );
        s.objects.record_batch_group(5);
        let text = s.render(std::iter::empty());
        assert!(
            text.contains("\nsluice_obj_batch_groups_total 1\n"),
            "{text}"
        );
        assert!(text.contains("\nsluice_obj_batch_grouped_members_total 5\n"));
        assert!(text.contains("\nsluice_obj_batch_commits_total 0\n"));
        s.objects.record_batch_commits(5, 1);
        let text = s.render(std::iter::empty());
        assert!(text.contains("\nsluice_obj_batch_commits_total 1\n"));
        assert!(text.contains("\nsluice_obj_batch_committed_changes_total 5\n"));
        assert!(text.contains("\nsluice_obj_batch_members_sum 4005\n"));
        assert!(text.contains("\nsluice_obj_batch_members_count 3\n"));
    }

    #[test]
    fn renders_object_series_by_command_and_ddt() {
        use sluice_obj_proto::DdtKind;
        let s = ServerMetrics::default();
        let text = s.render(std::iter::empty());
        assert!(!text.contains("sluice_obj_requests_total{"), "{text}");
        s.objects.record(
            Some(Opcode::Read),
            DdtKind::Sgl,
            256,
            1 << 20,
            false,
            Duration::from_micros(300),
        );
        s.objects.record(
            Some(Opcode::Write),
            DdtKind::Strided,
            4,
            64,
            true,
            Duration::from_micros(3),
        );
        s.connection_opened("obj");
        let text = s.render(std::iter::empty());
        assert!(text.contains("sluice_obj_requests_total{command=\"read\",ddt=\"sgl\"} 1"));
        assert!(text.contains("sluice_obj_segments_total{command=\"read\",ddt=\"sgl\"} 256"));
        assert!(text.contains("sluice_obj_bytes_total{command=\"read\",ddt=\"sgl\"} 1048576"));
        assert!(text.contains("sluice_obj_errors_total{command=\"write\",ddt=\"strided\"} 1"));
        assert!(text
            .contains("sluice_obj_request_duration_seconds_count{command=\"read\",ddt=\"sgl\"} 1"));
        assert!(!text.contains("command=\"read\",ddt=\"contiguous\""));
        assert!(text.contains("sluice_protocol_connections_total{protocol=\"obj\"} 1"));
        assert!(text.contains("sluice_protocol_connections_active{protocol=\"nbd\"} 0"));
        s.objects
            .record(None, DdtKind::Contiguous, 0, 0, true, Duration::ZERO);
        let text = s.render(std::iter::empty());
        assert!(text.contains("sluice_obj_errors_total{command=\"invalid\",ddt=\"contiguous\"} 1"));
        assert_eq!(s.objects.requests(Some(Opcode::Read), DdtKind::Sgl), 1);
    }
}
