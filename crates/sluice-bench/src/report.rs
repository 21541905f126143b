//! Results as a text table, CSV and JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

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

/// A plain text table: a header row, then rows; columns after the first
/// are right-aligned.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Renders with two spaces between columns.
    pub fn render(&self) -> String {
        let cols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0; cols];
        for r in self.rows.iter().chain([&self.header]) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in [&self.header].into_iter().chain(self.rows.iter()) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map_or("", String::as_str);
                if i == 0 {
                    let _ = write!(line, "{c:<w$}");
                } else {
                    let _ = write!(line, "  {c:>w$}");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Renders as a Markdown table.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        out.push_str(&line(&self.header));
        let sep: Vec<String> = self
            .header
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---".into() } else { "---:".into() })
            .collect();
        out.push_str(&line(&sep));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    /// Renders as CSV (cells with commas or quotes are quoted).
    pub fn csv(&self) -> String {
        let mut out = String::new();
        for r in [&self.header].into_iter().chain(self.rows.iter()) {
            let cells: Vec<String> = r.iter().map(|c| csv_cell(c)).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }
}

fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_owned()
    }
}

/// A number with a sensible count of digits for a table.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// IOPS as "123k", "1.23M".
pub fn iops(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
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
            iops(r.iops),
            num(r.mib_s),
            num(r.latency.p50_us),
            num(r.latency.p90_us),
            num(r.latency.p99_us),
            num(r.latency.p999_us),
            num(r.latency.max_us),
            num(r.client_us_per_op()),
            r.server_us_per_op().map_or_else(|| "-".into(), num),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_escape() {
        let mut t = Table::new(["case", "IOPS"]);
        t.row(["a,b", "12"]);
        t.row(["long-name", "1234"]);
        let text = t.render();
        assert_eq!(text.lines().next().unwrap(), "case       IOPS");
        assert!(text.contains("long-name  1234"));
        assert_eq!(t.csv().lines().nth(1).unwrap(), "\"a,b\",12");
        assert!(t
            .markdown()
            .starts_with("| case | IOPS |\n| --- | ---: |\n"));
        assert_eq!(iops(123_456.0), "123.5k");
        assert_eq!(num(4.256), "4.26");
    }
}
