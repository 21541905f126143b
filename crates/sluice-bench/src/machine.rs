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

/// CPU times from the `cpu` line of /proc/stat: (steal, total) in ticks.
pub fn parse_proc_stat_steal(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already counted in user.
    let steal = *v.get(7)?;
    let total = v.iter().take(8).sum();
    Some((steal, total))
}

/// The machine's (steal, total) CPU ticks so far, from /proc/stat.
pub fn steal_now() -> (u64, u64) {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| parse_proc_stat_steal(&s))
        .unwrap_or((0, 0))
}

/// Percent of CPU time stolen since `before` (a [`steal_now`] reading).
pub fn steal_since(before: (u64, u64)) -> f64 {
    let (s1, t1) = steal_now();
    if t1 > before.1 {
        s1.saturating_sub(before.0) as f64 * 100.0 / (t1 - before.1) as f64
    } else {
        0.0
    }
}

/// The 1-minute load average.
pub fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_comes_from_the_cpu_line() {
        let stat = "cpu  100 5 50 800 10 1 2 30 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_proc_stat_steal(stat), Some((30, 998)));
        assert_eq!(parse_proc_stat_steal("cpu0 1 2\n"), None);
        assert_eq!(parse_proc_stat_steal("cpu  1 2 x\n"), None);
    }
}
