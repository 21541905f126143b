//! Results as a text table, CSV and JSON (tables and number formats are
//! `sluice_model::text`'s, shared with `sluice model`).

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_model::text::{compact, scaled, Table};

use crate::runner::RunResult;

/// Output format for stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns.
    #[default]
    Table,
    /// One JSON document.
    Json,
    /// Comma-separated values with a header line.
    Csv,
}

/// The table of single runs.
pub fn results_table(results: &[RunResult]) -> Table {
    let mut t = Table::new([
        "case",
        "target",
        "ops",
        "IOPS",
        "MiB/s",
        "p50 us",
        "p90 us",
        "p99 us",
        "p99.9 us",
        "max us",
        "cli us/op",
        "srv us/op",
    ]);
    for r in results {
        t.row([
            r.case.clone(),
            r.target.clone(),
            r.ops.to_string(),
            scaled(r.iops),
            compact(r.mib_s),
            compact(r.latency.p50_us),
            compact(r.latency.p90_us),
            compact(r.latency.p99_us),
            compact(r.latency.p999_us),
            compact(r.latency.max_us),
            compact(r.client_us_per_op()),
            r.server_us_per_op().map_or_else(|| "-".into(), compact),
        ]);
    }
    t
}

/// CSV of single runs, every field.
pub fn results_csv(results: &[RunResult]) -> String {
    let mut t = Table::new([
        "case",
        "target",
        "driver",
        "ops",
        "reads",
        "writes",
        "bytes",
        "elapsed_s",
        "iops",
        "mib_s",
        "mean_us",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "client_cpu_s",
        "server_cpu_s",
        "verified_reads",
    ]);
    for r in results {
        t.row([
            r.case.clone(),
            r.target.clone(),
            r.driver.clone(),
            r.ops.to_string(),
            r.reads.to_string(),
            r.writes.to_string(),
            r.bytes.to_string(),
            format!("{:.4}", r.elapsed_s),
            format!("{:.1}", r.iops),
            format!("{:.2}", r.mib_s),
            format!("{:.2}", r.latency.mean_us),
            format!("{:.2}", r.latency.p50_us),
            format!("{:.2}", r.latency.p90_us),
            format!("{:.2}", r.latency.p99_us),
            format!("{:.2}", r.latency.p999_us),
            format!("{:.2}", r.latency.max_us),
            format!("{:.4}", r.client_cpu_s),
            r.server_cpu_s
                .map_or_else(String::new, |s| format!("{s:.4}")),
            r.verified_reads.to_string(),
        ]);
    }
    t.csv()
}

/// Writes `value` as pretty JSON to `path`, creating parent folders.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(value).context("cannot encode results as JSON")?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Writes `text` to `path`, creating parent folders.
pub fn write_text(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}
