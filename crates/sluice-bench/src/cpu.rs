//! CPU time: the calling thread's, a process's (from /proc/PID/stat), and
//! the embedded server's threads (named `sluice-*`, from
//! /proc/self/task/*).

use std::time::Duration;

/// CPU time the calling thread has used.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call; CLOCK_THREAD_CPUTIME_ID is always available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// utime + stime from the text of a /proc/…/stat file.
fn parse_stat_cpu(stat: &str, ticks: u64) -> Option<Duration> {
    // The command name may hold spaces and parentheses; fields resume
    // after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // rest starts at field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let t = utime + stime;
    Some(Duration::from_nanos(
        t.saturating_mul(1_000_000_000) / ticks,
    ))
}

/// CPU time (user + system, all threads, live or exited) of process `pid`;
/// `None` if it cannot be read.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_cpu(&stat, clock_ticks())
}

/// CPU time of this process's live threads whose name starts with
/// `prefix`; nanosecond precision from schedstat where the kernel has it.
pub fn own_threads_cpu(prefix: &str) -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let ticks = clock_ticks();
    let mut total = Duration::ZERO;
    for entry in dir.flatten() {
        let path = entry.path();
        let Ok(comm) = std::fs::read_to_string(path.join("comm")) else {
            continue;
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        let from_schedstat = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_ascii_whitespace().next()?.parse::<u64>().ok())
            .map(Duration::from_nanos);
        let cpu = from_schedstat.or_else(|| {
            std::fs::read_to_string(path.join("stat"))
                .ok()
                .and_then(|s| parse_stat_cpu(&s, ticks))
        });
        total += cpu.unwrap_or_default();
    }
    total
}

/// Total CPU of waited-for children (user + system), for external
/// drivers such as fio.
pub fn children_cpu() -> Duration {
    // SAFETY: zeroed rusage is a valid value for getrusage to overwrite.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid and writable for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::new(
            t.tv_sec.max(0) as u64,
            (t.tv_usec.clamp(0, 999_999) as u32) * 1000,
        )
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_survives_odd_names() {
        let stat = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(parse_stat_cpu(stat, 100), Some(Duration::from_secs(3)));
        assert_eq!(parse_stat_cpu("garbage", 100), None);
    }

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert!(process_cpu(me).is_some());
        let _ = thread_cpu();
    }
}
