//! NBD requests per export and command: counters and latency
//! histograms, and their families in the text format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::histogram::Histogram;
use super::{escape, family_header};

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

/// Renders the requests, bytes and errors of every export by command, and
/// their latency histograms.
pub(super) fn render<'a>(
    out: &mut String,
    exports: impl Iterator<Item = (&'a str, &'a ExportMetrics)>,
) {
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
        family_header(out, series, "counter", help);
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
    family_header(
        out,
        "sluice_request_duration_seconds",
        "histogram",
        "Time from decoding a request to sending its reply.",
    );
    for (name, m) in &exports {
        for (k, c) in CommandKind::ALL.iter().zip(&m.commands) {
            let labels = format!("export=\"{}\",command=\"{}\"", escape(name), k.label());
            c.latency
                .render(out, "sluice_request_duration_seconds", &labels);
        }
    }
}
