//! What runs: the build (`sluice_build_info`) and the process's own
//! series (CPU time, start time, memory, descriptors) from /proc.

use std::fmt::Write as _;
use std::sync::OnceLock;

use super::{escape, family_header};

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

/// Renders the process's CPU time, the build, and the process's start,
/// memory and descriptors; series /proc does not give are left out.
pub(super) fn render(out: &mut String) {
    if let Some(cpu) = process_cpu_seconds() {
        family_header(
            out,
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time of the server process.",
        );
        let _ = writeln!(out, "process_cpu_seconds_total {cpu}");
    }
    let build = build_info();
    family_header(
        out,
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
            family_header(out, name, kind, help);
            let _ = writeln!(out, "{name} {v}");
        }
    }
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
    use crate::metrics::ServerMetrics;

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
}
