//! What machine the numbers came from.

use serde::Serialize;

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs available to this process.
    pub nproc: usize,
    /// CPU model from /proc/cpuinfo.
    pub cpu_model: String,
    /// MemTotal from /proc/meminfo, in GiB.
    pub memory_gib: f64,
    /// Kernel release.
    pub kernel: String,
    /// 1-, 5- and 15-minute load averages when the run started.
    pub loadavg: String,
}

impl Machine {
    /// Reads /proc.
    pub fn probe() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let memory_gib = read("/proc/meminfo")
            .lines()
            .find_map(|l| {
                let rest = l.strip_prefix("MemTotal:")?;
                rest.split_whitespace().next()?.parse::<f64>().ok()
            })
            .map_or(0.0, |kib| kib / (1024.0 * 1024.0));
        Self {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_gib,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            loadavg: read("/proc/loadavg")
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }

    /// One line for a report.
    pub fn line(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB, Linux {}, load {}",
            self.nproc, self.cpu_model, self.memory_gib, self.kernel, self.loadavg
        )
    }
}
