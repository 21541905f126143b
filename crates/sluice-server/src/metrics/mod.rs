//! Server metrics: per-export request counters and latency histograms,
//! the object protocol's per command and per DDT series, connection
//! gauges (also per protocol) and busy time per pipeline stage, rendered
//! in the Prometheus text exposition format.
//!
//! Written by hand rather than with `prometheus-client`: its histogram
//! takes a lock per observation, which on the per-request path would
//! serialise connection threads; here every update is one relaxed atomic
//! add per field, and rendering reads the atomics at scrape time.
//!
//! This module holds the server-wide series ([`ServerMetrics`], which
//! renders everything); `histogram.rs` the latency histogram,
//! `export.rs` the NBD series per export, `object.rs` the object
//! protocol's, `process.rs` the build and process series, and
//! `reported.rs` what the object store and the devices count themselves.

mod export;
mod histogram;
mod object;
mod process;
mod reported;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use export::{CommandKind, ExportMetrics};
pub use histogram::Histogram;
pub use object::ObjectMetrics;
pub use process::{set_build_info, BuildInfo};
pub use reported::{render_device_metrics, render_store_metrics};

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

/// Renders series of its own into the scrape (a component the server
/// runs beside it, such as the S3 endpoint, which counts for itself).
pub type MetricsSource = Arc<dyn Fn(&mut String) + Send + Sync>;

/// The [`MetricsSource`]s added to a server's metrics.
#[derive(Default)]
struct Sources(Mutex<Vec<MetricsSource>>);

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map_or(0, |v| v.len());
        write!(f, "Sources({n})")
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
    sources: Sources,
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

    /// Adds series that `source` renders to every scrape, after the
    /// server's own.
    pub fn add_source(&self, source: MetricsSource) {
        if let Ok(mut sources) = self.sources.0.lock() {
            sources.push(source);
        }
    }

    /// Renders everything in the Prometheus text format.
    pub fn render<'a>(
        &self,
        exports: impl Iterator<Item = (&'a str, &'a ExportMetrics)>,
    ) -> String {
        let mut out = String::with_capacity(16 * 1024);
        self.render_server_series(&mut out);
        self.render_stage_busy(&mut out);
        self.render_protocol_connections(&mut out);
        self.objects.render(&mut out);
        process::render(&mut out);
        export::render(&mut out, exports);
        let sources = self.sources.0.lock().map(|v| v.clone()).unwrap_or_default();
        for source in sources {
            source(&mut out);
        }
        out
    }

    /// The server-wide counters and gauges: connections, handshakes, pool
    /// handoffs, the fast paths, coalescing, requests in flight, panics
    /// and the log's losses.
    fn render_server_series(&self, out: &mut String) {
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
            family_header(out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }

    /// Busy time per pipeline stage.
    fn render_stage_busy(&self, out: &mut String) {
        family_header(
            out,
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
    }

    /// Connections accepted and open now, by protocol.
    fn render_protocol_connections(&self, out: &mut String) {
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
            family_header(out, name, kind, help);
            for (p, (total, active)) in PROTOCOLS.iter().zip(&self.protocol_connections) {
                let v = if kind == "counter" {
                    total.load(Ordering::Relaxed) as i64
                } else {
                    active.load(Ordering::Relaxed)
                };
                let _ = writeln!(out, "{name}{{protocol=\"{p}\"}} {v}");
            }
        }
    }
}

/// Writes a family's `# HELP` and `# TYPE` lines.
fn family_header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
