//! Server metrics: per-export request counters and latency histograms,
//! the object protocol's per command and per DDT series, connection
//! gauges (also per protocol) and busy time per pipeline stage, rendered
//! in the Prometheus text exposition format.
//!
//! Written by hand rather than with `prometheus-client`: its histogram
//! takes a lock per observation, which on the per-request path would
//! serialise connection threads; here every update is one relaxed atomic
//! add per field, and rendering reads the atomics at scrape time.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// What was built: `sluice_build_info`'s labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: String,
    pub commit: String,
    pub profile: String,
}

static BUILD_INFO: OnceLock<BuildInfo> = OnceLock::new();

/// Sets the labels of `sluice_build_info` (the binary knows its commit
/// and profile); once per process, later calls are ignored. Without it
/// the commit and profile read "unknown".
pub fn set_build_info(info: BuildInfo) {
    let _ = BUILD_INFO.set(info);
}

fn build_info() -> BuildInfo {
    BUILD_INFO.get().cloned().unwrap_or_else(|| BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: "unknown".to_owned(),
        profile: "unknown".to_owned(),
    })
}

/// Commands with their own series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    Read,
    Write,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
    /// Requests refused before execution (bad flags, range, ...).
    Invalid,
}

impl CommandKind {
    const ALL: [Self; 8] = [
        Self::Read,
        Self::Write,
        Self::Flush,
        Self::Trim,
        Self::Cache,
        Self::WriteZeroes,
        Self::BlockStatus,
        Self::Invalid,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Trim => "trim",
            Self::Cache => "cache",
            Self::WriteZeroes => "write_zeroes",
            Self::BlockStatus => "block_status",
            Self::Invalid => "invalid",
        }
    }
}

/// Pipeline stages whose busy time is accumulated (the stages of a
/// pipelined request, and the model's service centers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Device work done on connection threads.
    ExecuteInline,
    /// Device work done on the I/O pool.
    ExecutePool,
    /// Writing replies to sockets.
    Send,
}

impl Stage {
    const ALL: [Self; 3] = [Self::ExecuteInline, Self::ExecutePool, Self::Send];
    fn label(self) -> &'static str {
        match self {
            Self::ExecuteInline => "execute_inline",
            Self::ExecutePool => "execute_pool",
            Self::Send => "send",
        }
    }
}

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

    fn render(&self, out: &mut String, name: &str, labels: &str) {
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

/// One counter of a command's metrics.
type CounterOf = fn(&CommandMetrics) -> &AtomicU64;

#[derive(Debug, Default)]
struct CommandMetrics {
    ops: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    latency: Histogram,
}

/// Metrics of one export.
#[derive(Debug)]
pub struct ExportMetrics {
    commands: [CommandMetrics; 8],
}

impl Default for ExportMetrics {
    fn default() -> Self {
        Self {
            commands: std::array::from_fn(|_| CommandMetrics::default()),
        }
    }
}

impl ExportMetrics {
    /// Records a finished request: its kind, payload bytes, whether it
    /// failed, and its time from decode to reply.
    pub fn record(&self, kind: CommandKind, bytes: u64, failed: bool, latency: Duration) {
        let Some(i) = CommandKind::ALL.iter().position(|k| *k == kind) else {
            return;
        };
        let c = &self.commands[i];
        c.ops.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        if failed {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
        c.latency.observe(latency);
    }

    /// Requests of `kind` completed so far.
    pub fn ops(&self, kind: CommandKind) -> u64 {
        CommandKind::ALL
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |i| self.commands[i].ops.load(Ordering::Relaxed))
    }
}

/// Commands of the native object protocol with their own series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjCommand {
    Create,
    Remove,
    List,
    Read,
    Write,
    Append,
    CreateAndWrite,
    Punch,
    Flush,
    GetAttrs,
    SetAttrs,
    Query,
    ExtentRead,
    ExtentWrite,
    /// Calls of the metadata service.
    Meta,
    Truncate,
    /// Requests refused before execution (unknown opcode, bad flags,
    /// DDT, lengths, attributes; batch frames that cannot be split).
    Invalid,
}

impl ObjCommand {
    const ALL: [Self; 17] = [
        Self::Create,
        Self::Remove,
        Self::List,
        Self::Read,
        Self::Write,
        Self::Append,
        Self::CreateAndWrite,
        Self::Punch,
        Self::Flush,
        Self::GetAttrs,
        Self::SetAttrs,
        Self::Query,
        Self::ExtentRead,
        Self::ExtentWrite,
        Self::Meta,
        Self::Truncate,
        Self::Invalid,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Remove => "remove",
            Self::List => "list",
            Self::Read => "read",
            Self::Write => "write",
            Self::Append => "append",
            Self::CreateAndWrite => "create_and_write",
            Self::Punch => "punch",
            Self::Flush => "flush",
            Self::GetAttrs => "get_attrs",
            Self::SetAttrs => "set_attrs",
            Self::Query => "query",
            Self::ExtentRead => "extent_read",
            Self::ExtentWrite => "extent_write",
            Self::Meta => "meta",
            Self::Truncate => "truncate",
            Self::Invalid => "invalid",
        }
    }
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
    series: [[ObjSeries; 3]; ObjCommand::ALL.len()],
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
    fn at(&self, command: ObjCommand, ddt: sluice_obj_proto::DdtKind) -> Option<&ObjSeries> {
        let i = ObjCommand::ALL.iter().position(|c| *c == command)?;
        Some(&self.series[i][ddt_index(ddt)])
    }

    /// Records a finished request: its command and DDT, how many
    /// segments it named, the data bytes it moved, whether it failed and
    /// its time from receipt to reply.
    pub fn record(
        &self,
        command: ObjCommand,
        ddt: sluice_obj_proto::DdtKind,
        segments: u64,
        bytes: u64,
        failed: bool,
        latency: Duration,
    ) {
        let Some(s) = self.at(command, ddt) else {
            return;
        };
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

    /// Requests of `command` with `ddt` completed so far.
    pub fn requests(&self, command: ObjCommand, ddt: sluice_obj_proto::DdtKind) -> u64 {
        self.at(command, ddt)
            .map_or(0, |s| s.requests.load(Ordering::Relaxed))
    }

    /// Series that saw no request are left out, so a server without
    /// object traffic does not print 45 empty histograms.
    fn render(&self, out: &mut String) {
        let used: Vec<(ObjCommand, &str, &ObjSeries)> = ObjCommand::ALL
            .iter()
            .zip(&self.series)
            .flat_map(|(c, row)| DDT_LABELS.iter().zip(row).map(move |(d, s)| (*c, *d, s)))
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
                    "{name}{{command=\"{}\",ddt=\"{d}\"}} {}",
                    c.label(),
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
            let labels = format!("command=\"{}\",ddt=\"{d}\"", c.label());
            s.latency.render(out, name, &labels);
        }
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

/// Protocols whose connections are counted apart.
const PROTOCOLS: [&str; 2] = ["nbd", "obj"];

/// Server-wide metrics.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    /// The native object protocol's requests.
    pub objects: ObjectMetrics,
    /// Connections accepted and open now, per protocol (`PROTOCOLS`).
    protocol_connections: [(AtomicU64, AtomicI64); 2],
    pub(crate) connections_total: AtomicU64,
    pub(crate) connections_active: AtomicI64,
    pub(crate) handshakes_failed: AtomicU64,
    pub(crate) handoffs: AtomicU64,
    pub(crate) mapped_reads: AtomicU64,
    pub(crate) kept_mapping_reads: AtomicU64,
    pub(crate) spliced_writes: AtomicU64,
    pub(crate) obj_spliced_writes: AtomicU64,
    pub(crate) coalesced_waits: AtomicU64,
    pub(crate) coalesce_timeouts: AtomicU64,
    pub(crate) inflight: AtomicI64,
    /// Connection threads and I/O jobs that panicked (each closed its
    /// connection).
    pub(crate) panics: AtomicU64,
    stage_busy_ns: [AtomicU64; 3],
}

impl ServerMetrics {
    /// Counts a connection of `protocol` ("nbd" or "obj") as opened.
    pub(crate) fn connection_opened(&self, protocol: &str) {
        if let Some(i) = PROTOCOLS.iter().position(|p| *p == protocol) {
            let (total, active) = &self.protocol_connections[i];
            total.fetch_add(1, Ordering::Relaxed);
            active.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a connection of `protocol` as closed.
    pub(crate) fn connection_closed(&self, protocol: &str) {
        if let Some(i) = PROTOCOLS.iter().position(|p| *p == protocol) {
            self.protocol_connections[i]
                .1
                .fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Adds busy time to a stage.
    pub fn add_busy(&self, stage: Stage, d: Duration) {
        if let Some(i) = Stage::ALL.iter().position(|s| *s == stage) {
            let ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
            self.stage_busy_ns[i].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Renders everything in the Prometheus text format.
    pub fn render<'a>(
        &self,
        exports: impl Iterator<Item = (&'a str, &'a ExportMetrics)>,
    ) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let g = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let scalars: [(&str, &str, &str, f64); 14] = [
            (
                "sluice_connections_total",
                "counter",
                "Connections accepted.",
                load(&self.connections_total),
            ),
            (
                "sluice_connections_active",
                "gauge",
                "Connections open now.",
                self.connections_active.load(Ordering::Relaxed) as f64,
            ),
            (
                "sluice_handshakes_failed_total",
                "counter",
                "Handshakes that ended in an error.",
                load(&self.handshakes_failed),
            ),
            (
                "sluice_handoffs_total",
                "counter",
                "Jobs handed to the I/O pool (a request, or the small members of a batch frame run together).",
                load(&self.handoffs),
            ),
            (
                "sluice_mapped_reads_total",
                "counter",
                "Reads sent straight from a shared mapping of the file.",
                load(&self.mapped_reads),
            ),
            (
                "sluice_kept_mapping_reads_total",
                "counter",
                "Scatter/gather and strided object reads sent from the mapping the connection kept from its previous one.",
                load(&self.kept_mapping_reads),
            ),
            (
                "sluice_spliced_writes_total",
                "counter",
                "Write payloads spliced from the socket into the file.",
                load(&self.spliced_writes),
            ),
            (
                "sluice_obj_spliced_writes_total",
                "counter",
                "Object WRITE payloads spliced from the socket into the object's file.",
                load(&self.obj_spliced_writes),
            ),
            (
                "sluice_coalesced_waits_total",
                "counter",
                "Waits for a batch of requests to pile up in a socket (request coalescing).",
                load(&self.coalesced_waits),
            ),
            (
                "sluice_coalesce_timeouts_total",
                "counter",
                "Coalescing waits that ended before the batch filled.",
                load(&self.coalesce_timeouts),
            ),
            (
                "sluice_inflight_requests",
                "gauge",
                "Requests on the I/O pool now.",
                self.inflight.load(Ordering::Relaxed) as f64,
            ),
            (
                "sluice_panics_total",
                "counter",
                "Connection threads and I/O jobs that panicked; each closed its connection.",
                load(&self.panics),
            ),
            (
                "sluice_log_write_errors_total",
                "counter",
                "Log lines that could not be written (the log's reader went away); dropped.",
                crate::log::write_errors() as f64,
            ),
            (
                "sluice_log_lines_dropped_total",
                "counter",
                "Log lines dropped because the log's reader fell behind.",
                crate::log::dropped_lines() as f64,
            ),
        ];
        for (name, kind, help, value) in scalars {
            g(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        g(
            &mut out,
            "sluice_stage_busy_seconds_total",
            "counter",
            "Time spent working in each stage of the request pipeline.",
        );
        for (stage, ns) in Stage::ALL.iter().zip(&self.stage_busy_ns) {
            let s = ns.load(Ordering::Relaxed) as f64 / 1e9;
            let _ = writeln!(
                out,
                "sluice_stage_busy_seconds_total{{stage=\"{}\"}} {s}",
                stage.label()
            );
        }
        for (name, help) in [
            (
                "sluice_protocol_connections_total",
                "Connections accepted, by protocol.",
            ),
            (
                "sluice_protocol_connections_active",
                "Connections open now, by protocol.",
            ),
        ] {
            let kind = if name.ends_with("total") {
                "counter"
            } else {
                "gauge"
            };
            g(&mut out, name, kind, help);
            for (p, (total, active)) in PROTOCOLS.iter().zip(&self.protocol_connections) {
                let v = if kind == "counter" {
                    total.load(Ordering::Relaxed) as i64
                } else {
                    active.load(Ordering::Relaxed)
                };
                let _ = writeln!(out, "{name}{{protocol=\"{p}\"}} {v}");
            }
        }
        self.objects.render(&mut out);
        if let Some(cpu) = process_cpu_seconds() {
            g(
                &mut out,
                "process_cpu_seconds_total",
                "counter",
                "User and system CPU time of the server process.",
            );
            let _ = writeln!(out, "process_cpu_seconds_total {cpu}");
        }
        let build = build_info();
        g(
            &mut out,
            "sluice_build_info",
            "gauge",
            "Always 1; the labels say which build runs.",
        );
        let _ = writeln!(
            out,
            "sluice_build_info{{version=\"{}\",commit=\"{}\",profile=\"{}\"}} 1",
            escape(&build.version),
            escape(&build.commit),
            escape(&build.profile)
        );
        for (name, kind, help, value) in [
            (
                "process_start_time_seconds",
                "gauge",
                "When the server process started, in seconds since the Unix epoch.",
                process_start_time_seconds(),
            ),
            (
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory of the server process.",
                process_resident_memory_bytes(),
            ),
            (
                "process_open_fds",
                "gauge",
                "File descriptors the server process has open.",
                process_open_fds(),
            ),
            (
                "process_max_fds",
                "gauge",
                "The most file descriptors the server process may open.",
                process_max_fds(),
            ),
        ] {
            if let Some(v) = value {
                g(&mut out, name, kind, help);
                let _ = writeln!(out, "{name} {v}");
            }
        }
        let exports: Vec<_> = exports.collect();
        let counters: [(&str, &str, CounterOf); 3] = [
            (
                "sluice_requests_total",
                "Requests completed, by export and command.",
                |c| &c.ops,
            ),
            (
                "sluice_request_bytes_total",
                "Payload bytes moved or affected, by export and command.",
                |c| &c.bytes,
            ),
            (
                "sluice_request_errors_total",
                "Requests answered with an error.",
                |c| &c.errors,
            ),
        ];
        for (series, help, counter) in counters {
            g(&mut out, series, "counter", help);
            for (name, m) in &exports {
                for (k, c) in CommandKind::ALL.iter().zip(&m.commands) {
                    let _ = writeln!(
                        out,
                        "{series}{{export=\"{}\",command=\"{}\"}} {}",
                        escape(name),
                        k.label(),
                        counter(c).load(Ordering::Relaxed)
                    );
                }
            }
        }
        g(
            &mut out,
            "sluice_request_duration_seconds",
            "histogram",
            "Time from decoding a request to sending its reply.",
        );
        for (name, m) in &exports {
            for (k, c) in CommandKind::ALL.iter().zip(&m.commands) {
                let labels = format!("export=\"{}\",command=\"{}\"", escape(name), k.label());
                c.latency
                    .render(&mut out, "sluice_request_duration_seconds", &labels);
            }
        }
        out
    }
}

/// Renders the object store's own counters: its metadata transactions,
/// and the rewrites that made none.
pub fn render_store_metrics(store: &sluice_objstore::ObjectStore) -> String {
    let mut out = String::new();
    let series: [(&str, &str, &str, u64); 3] = [
        (
            "sluice_obj_store_commits_total",
            "counter",
            "Metadata transactions the object store committed (a group commit is one, however many changes it held).",
            store.commits(),
        ),
        (
            "sluice_obj_store_deferred_commits_total",
            "counter",
            "Plain rewrites inside an object file's length that committed nothing, their data-modified time kept in memory.",
            store.deferred_commits(),
        ),
        (
            "sluice_obj_store_unwritten_times",
            "gauge",
            "Objects whose data-modified time is in memory only (written by the next data commit, a flush or a clean stop).",
            store.unwritten_times() as u64,
        ),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    out
}

/// Renders what devices report about themselves (cache counters and
/// gauges, RAID members' counters and histograms), one series per export
/// and label set, prefixed `sluice_`.
pub fn render_device_metrics<'a>(
    exports: impl Iterator<Item = (&'a str, Vec<sluice_storage::DeviceMetric>)>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut by_name: Vec<(&'static str, String)> = Vec::new();
    for (export, metrics) in exports {
        for m in metrics {
            let (kind, suffix) = match m.kind {
                sluice_storage::MetricKind::Counter => ("counter", ""),
                sluice_storage::MetricKind::Gauge => ("gauge", ""),
                sluice_storage::MetricKind::Histogram(series) => ("histogram", series.suffix()),
            };
            let at = match by_name.iter().position(|(n, _)| *n == m.name) {
                Some(at) => at,
                None => {
                    by_name.push((
                        m.name,
                        format!(
                            "# HELP sluice_{0} {1}\n# TYPE sluice_{0} {kind}\n",
                            m.name, m.help
                        ),
                    ));
                    by_name.len() - 1
                }
            };
            let text = &mut by_name[at].1;
            let _ = write!(
                text,
                "sluice_{}{suffix}{{export=\"{}\"",
                m.name,
                escape(export)
            );
            for (key, value) in &m.labels {
                let _ = write!(text, ",{key}=\"{}\"", escape(value));
            }
            let _ = writeln!(text, "}} {}", m.value);
        }
    }
    for (_, text) in by_name {
        out.push_str(&text);
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// utime + stime of this process from /proc/self/stat.
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    Some((utime + stime) / ticks)
}

/// The process's start: its start time in clock ticks after boot
/// (/proc/self/stat, field 22) plus the boot time (/proc/stat `btime`).
fn process_start_time_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    // Field 22 of the line is the 20th after the command name.
    let ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let boot: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(boot + ticks / rustix::param::clock_ticks_per_second() as f64)
}

/// Resident pages (/proc/self/statm, second field) in bytes.
fn process_resident_memory_bytes() -> Option<f64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: f64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as f64)
}

/// Entries of /proc/self/fd (less the one reading it).
fn process_open_fds() -> Option<f64> {
    let n = std::fs::read_dir("/proc/self/fd").ok()?.count();
    Some(n.saturating_sub(1) as f64)
}

/// The soft limit on open descriptors (/proc/self/limits).
fn process_max_fds() -> Option<f64> {
    std::fs::read_to_string("/proc/self/limits")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_series_read_this_process() {
        let text = ServerMetrics::default().render(std::iter::empty());
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in\n{text}"));
            line[name.len() + 1..].parse().expect("a number")
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "{start} vs {now}"
        );
        assert!(value("process_resident_memory_bytes") > 1e6);
        let fds = value("process_open_fds");
        assert!(fds >= 3.0, "stdin, stdout, stderr at least: {fds}");
        assert!(value("process_max_fds") >= fds);
        assert!(
            text.contains(&format!(
                "sluice_build_info{{version=\"{}\",",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
    }

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

    #[test]
    fn renders_exports_and_stages() {
        let s = ServerMetrics::default();
        let e = ExportMetrics::default();
        e.record(CommandKind::Read, 4096, false, Duration::from_micros(10));
        e.record(CommandKind::Write, 512, true, Duration::from_micros(10));
        s.add_busy(Stage::Send, Duration::from_millis(1500));
        let text = s.render([("d\"x", &e)].into_iter());
        assert!(text.contains("sluice_requests_total{export=\"d\\\"x\",command=\"read\"} 1"));
        assert!(
            text.contains("sluice_request_bytes_total{export=\"d\\\"x\",command=\"read\"} 4096")
        );
        assert!(text.contains("sluice_request_errors_total{export=\"d\\\"x\",command=\"write\"} 1"));
        assert!(text.contains("sluice_stage_busy_seconds_total{stage=\"send\"} 1.5"));
        assert!(text.contains("process_cpu_seconds_total"));
        assert_eq!(e.ops(CommandKind::Read), 1);
    }

    #[test]
    fn renders_object_series_by_command_and_ddt() {
        use sluice_obj_proto::DdtKind;
        let s = ServerMetrics::default();
        let text = s.render(std::iter::empty());
        assert!(!text.contains("sluice_obj_requests_total{"), "{text}");
        s.objects.record(
            ObjCommand::Read,
            DdtKind::Sgl,
            256,
            1 << 20,
            false,
            Duration::from_micros(300),
        );
        s.objects.record(
            ObjCommand::Write,
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
        assert_eq!(s.objects.requests(ObjCommand::Read, DdtKind::Sgl), 1);
    }

    #[test]
    fn device_metrics_carry_their_labels_and_histogram_series() {
        use sluice_storage::{DeviceMetric, HistogramSeries, MetricKind};
        let member = |kind, value, extra: Option<(&'static str, &str)>| DeviceMetric {
            name: "raid_member_request_duration_seconds",
            help: "Member request time.",
            kind,
            value,
            labels: [("member", "0".to_owned())]
                .into_iter()
                .chain(extra.map(|(k, v)| (k, v.to_owned())))
                .collect(),
        };
        let metrics = vec![
            member(
                MetricKind::Histogram(HistogramSeries::Bucket),
                2.0,
                Some(("le", "0.001")),
            ),
            member(
                MetricKind::Histogram(HistogramSeries::Bucket),
                3.0,
                Some(("le", "+Inf")),
            ),
            member(MetricKind::Histogram(HistogramSeries::Sum), 0.5, None),
            member(MetricKind::Histogram(HistogramSeries::Count), 3.0, None),
        ];
        let text = render_device_metrics([("v\"1", metrics)].into_iter());
        assert_eq!(
            text,
            "# HELP sluice_raid_member_request_duration_seconds Member request time.\n\
             # TYPE sluice_raid_member_request_duration_seconds histogram\n\
             sluice_raid_member_request_duration_seconds_bucket{export=\"v\\\"1\",member=\"0\",le=\"0.001\"} 2\n\
             sluice_raid_member_request_duration_seconds_bucket{export=\"v\\\"1\",member=\"0\",le=\"+Inf\"} 3\n\
             sluice_raid_member_request_duration_seconds_sum{export=\"v\\\"1\",member=\"0\"} 0.5\n\
             sluice_raid_member_request_duration_seconds_count{export=\"v\\\"1\",member=\"0\"} 3\n"
        );
    }
}
