//! The `pgbench` preset: the SAN paper's real-workload test on sluice.
//! PostgreSQL (Debian's packages) keeps its data directory on ext4 over
//! the export (the `filesystem` preset's mount stack, `fsbench::Ext4Stack`:
//! nbdfuse and a loop device), and `pgbench` runs its TPC-B-like script
//! at several client counts, with `synchronous_commit` off and on (on:
//! every commit waits for its WAL fsync, so every commit is an NBD
//! FLUSH). sluice and nbdkit serve the same image file, and local I/O is
//! ext4 on a loop device straight on that file (no NBD). Targets take
//! turns within each round, the first moving one place each round;
//! medians over rounds.
//!
//! PostgreSQL refuses to run as root, so the cluster runs as the
//! `postgres` user the Debian package creates. Each target gets a fresh
//! filesystem, `initdb`, `pgbench -i` and its tables read into the caches
//! (pg_prewarm); the cluster is stopped and everything unmounted on the
//! way out, also on failure.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::machine::{load1, steal_now, steal_since};
use sluice_bench::peers::{self, PeerSpec};
use sluice_bench::stats::{median, ratio, Spread};
use sluice_model::plot::{Axes, Figure, XAxis};
use sluice_model::text::{compact, Table};

use crate::epilogue::Epilogue;
use crate::fsbench::{missing_stack_prerequisite, Ext4Stack};
use crate::setup::{Image, PresetOptions};

mod cluster;

use cluster::Cluster;

/// Where Debian installs PostgreSQL's programs: `ROOT/VERSION/bin`.
pub const POSTGRES_ROOT: &str = "/usr/lib/postgresql";
/// The programs the preset runs.
const TOOLS: [&str; 4] = ["pg_ctl", "initdb", "pgbench", "psql"];
/// Client counts (default).
pub const CLIENTS: [u32; 3] = [1, 4, 16];
/// The user the cluster runs as.
const PG_USER: &str = "postgres";

/// `synchronous_commit` for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Commit {
    /// A commit returns before its WAL is flushed.
    Off,
    /// A commit waits for its WAL fsync (an NBD FLUSH).
    On,
}

impl Commit {
    /// The setting's value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::On => "on",
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct PgbenchOptions {
    /// Rounds, duration, output folders, quick sizes, targets.
    pub preset: PresetOptions,
    /// pgbench's scale factor (default 20; 5 with --quick).
    pub scale: Option<u32>,
    /// Client counts (default [`CLIENTS`]).
    pub clients: Option<Vec<u32>>,
    /// `synchronous_commit` settings (default off and on).
    pub commits: Option<Vec<Commit>>,
}

// ---------------------------------------------------------------- pure parts

/// What one `pgbench` run printed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PgbenchOutput {
    /// Transactions per second (without the initial connection time).
    pub tps: f64,
    /// Transactions completed.
    pub transactions: u64,
    /// Transactions that failed (0 when the version does not say).
    pub failed: u64,
    /// Mean latency of a transaction (ms).
    pub latency_avg_ms: f64,
    /// Its standard deviation (ms), when printed (with `-P`).
    pub latency_stddev_ms: Option<f64>,
}

/// Reads the summary `pgbench` prints on standard output.
pub fn parse_pgbench_output(text: &str) -> Result<PgbenchOutput> {
    let value = |key: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .map(str::trim)
    };
    let number = |s: &str, what: &str| -> Result<f64> {
        let first = s.split_ascii_whitespace().next().unwrap_or("");
        first
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| anyhow!("pgbench printed {what} {s:?}, not a number"))
    };
    // Version 14 and later print one tps line ("without initial
    // connection time"); older ones two, the second "excluding
    // connections establishing".
    let tps_lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tps = "))
        .collect();
    let tps_line = tps_lines
        .iter()
        .find(|l| l.contains("without initial") || l.contains("excluding"))
        .or(tps_lines.first())
        .ok_or_else(|| anyhow!("pgbench printed no \"tps = \" line"))?;
    let transactions = value("number of transactions actually processed:")
        .ok_or_else(|| anyhow!("pgbench printed no transaction count"))?;
    // "12345" or "12345/20000" (with -t).
    let transactions = transactions
        .split(['/', ' '])
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| anyhow!("pgbench printed a transaction count {transactions:?}"))?;
    let failed = match value("number of failed transactions:") {
        Some(s) => s
            .split_ascii_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| anyhow!("pgbench printed a failure count {s:?}"))?,
        None => 0,
    };
    let ms = |s: &str, what: &str| -> Result<f64> {
        let s = s.strip_prefix("= ").unwrap_or(s);
        number(s, what)
    };
    let latency_avg_ms = value("latency average")
        .ok_or_else(|| anyhow!("pgbench printed no average latency"))
        .and_then(|s| ms(s, "an average latency"))?;
    let latency_stddev_ms = value("latency stddev")
        .map(|s| ms(s, "a latency deviation"))
        .transpose()?;
    Ok(PgbenchOutput {
        tps: number(tps_line, "tps")?,
        transactions,
        failed,
        latency_avg_ms,
        latency_stddev_ms,
    })
}

/// PostgreSQL's programs, found under `root` (`VERSION/bin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTools {
    /// The folder holding pg_ctl, initdb, pgbench and psql.
    pub bin: PathBuf,
    /// Its version folder's name ("15").
    pub version: String,
}

impl PgTools {
    /// The newest version under `root` that has every program the preset
    /// runs; the error is the one line to print.
    pub fn find(root: &Path) -> Result<Self> {
        let missing = || {
            anyhow!(
                "PostgreSQL is not installed: no {} under {}/*/bin (apt-get install postgresql)",
                TOOLS.join(", "),
                root.display()
            )
        };
        let entries = std::fs::read_dir(root).map_err(|_| missing())?;
        let mut best: Option<(Vec<u64>, Self)> = None;
        for e in entries.flatten() {
            let version = e.file_name().to_string_lossy().into_owned();
            let bin = e.path().join("bin");
            if !TOOLS.iter().all(|t| is_executable(&bin.join(t))) {
                continue;
            }
            // "15", "9.6": compare numerically, part by part.
            let key: Vec<u64> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            if best.as_ref().is_none_or(|(k, _)| key > *k) {
                best = Some((key, Self { bin, version }));
            }
        }
        best.map(|(_, t)| t).ok_or_else(missing)
    }

    fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A user's ids, as the system's user database has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct UserIds {
    uid: u32,
    gid: u32,
}

fn lookup_user(name: &str) -> Result<UserIds> {
    let c_name = std::ffi::CString::new(name).context("a user name with a NUL byte")?;
    // SAFETY: an all-zero passwd is a valid value for getpwnam_r to
    // overwrite (pointers null, numbers zero).
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call: `c_name` is a
    // NUL-terminated string, `pwd` and `found` are writable, and `buf` is
    // writable for the length passed; getpwnam_r is the reentrant form
    // and keeps no pointer into them after returning. Only the numeric
    // fields are read afterwards, and only when `found` is non-null.
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        bail!(
            "there is no user {name:?} to run PostgreSQL as (the postgresql package creates it: apt-get install postgresql)"
        );
    }
    Ok(UserIds {
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// Why this machine cannot run the preset, if it cannot (one line).
fn missing_prerequisite() -> Result<(PgTools, UserIds)> {
    let tools = PgTools::find(Path::new(POSTGRES_ROOT))?;
    if let Some(why) = missing_stack_prerequisite() {
        bail!("{why}");
    }
    Ok((tools, lookup_user(PG_USER)?))
}

// ---------------------------------------------------------------- results

/// One pgbench run: one target, commit mode and client count in a round.
#[derive(Debug, Clone, Serialize)]
pub struct PgSample {
    pub round: u32,
    pub target: String,
    pub commit: Commit,
    pub clients: u32,
    /// pgbench threads (`-j`).
    pub threads: u32,
    #[serde(flatten)]
    pub output: PgbenchOutput,
    /// Server CPU per transaction (µs); none for local I/O.
    pub server_cpu_us_per_txn: Option<f64>,
    /// 1-minute load average at the end.
    pub load1: f64,
    /// Share of CPU time stolen by the hypervisor during the run (%).
    pub steal_pct: f64,
}

/// The rounds of one target, commit mode and client count.
#[derive(Debug, Clone, Serialize)]
pub struct PgSummary {
    pub target: String,
    pub commit: Commit,
    pub clients: u32,
    pub tps: Spread,
    /// Median of the rounds' mean latency (ms).
    pub latency_avg_ms: f64,
    /// Median server CPU per transaction (µs).
    pub server_cpu_us_per_txn: Option<f64>,
    /// Median tps ÷ nbdkit's.
    pub x_nbdkit: Option<f64>,
    /// Median tps ÷ local I/O's (the fraction of local).
    pub x_local: Option<f64>,
    /// Median server CPU per transaction ÷ nbdkit's.
    pub cpu_x_nbdkit: Option<f64>,
}

/// What the preset writes to pgbench.json.
#[derive(Debug, Serialize)]
pub struct PgbenchReport {
    pub command: String,
    pub machine: Machine,
    pub loadavg_end: String,
    /// Steal over the whole preset (%).
    pub steal_pct: f64,
    pub quick: bool,
    pub rounds: u32,
    /// Seconds per pgbench run.
    pub duration_s: u32,
    pub scale: u32,
    pub image_bytes: u64,
    /// PostgreSQL's version folder.
    pub postgres: String,
    pub notes: Vec<String>,
    pub summaries: Vec<PgSummary>,
    pub samples: Vec<PgSample>,
    pub failures: Vec<String>,
    pub wall_s: f64,
}

/// Medians over rounds, in first-seen order, with ratios to nbdkit and
/// to local I/O at the same commit mode and client count.
pub fn summarise(samples: &[PgSample]) -> Vec<PgSummary> {
    let mut keys: Vec<(String, Commit, u32)> = Vec::new();
    for s in samples {
        let k = (s.target.clone(), s.commit, s.clients);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut out: Vec<PgSummary> = keys
        .into_iter()
        .filter_map(|(target, commit, clients)| {
            let mine: Vec<&PgSample> = samples
                .iter()
                .filter(|s| s.target == target && s.commit == commit && s.clients == clients)
                .collect();
            let tps: Vec<f64> = mine.iter().map(|s| s.output.tps).collect();
            let lat: Vec<f64> = mine.iter().map(|s| s.output.latency_avg_ms).collect();
            let cpu: Vec<f64> = mine
                .iter()
                .filter_map(|s| s.server_cpu_us_per_txn)
                .collect();
            Some(PgSummary {
                tps: Spread::of(&tps)?,
                latency_avg_ms: median(&lat)?,
                server_cpu_us_per_txn: median(&cpu),
                x_nbdkit: None,
                x_local: None,
                cpu_x_nbdkit: None,
                target,
                commit,
                clients,
            })
        })
        .collect();
    let find = |out: &[PgSummary], target: &str, commit: Commit, clients: u32| {
        out.iter()
            .find(|s| s.target == target && s.commit == commit && s.clients == clients)
            .map(|s| (s.tps.median, s.server_cpu_us_per_txn))
    };
    for i in 0..out.len() {
        let (commit, clients, tps, cpu) = (
            out[i].commit,
            out[i].clients,
            out[i].tps.median,
            out[i].server_cpu_us_per_txn,
        );
        let nbdkit = find(&out, "nbdkit", commit, clients);
        let local = find(&out, "local", commit, clients);
        out[i].x_nbdkit = nbdkit.and_then(|(t, _)| ratio(tps, t));
        out[i].x_local = local.and_then(|(t, _)| ratio(tps, t));
        out[i].cpu_x_nbdkit = match (cpu, nbdkit.and_then(|(_, c)| c)) {
            (Some(a), Some(b)) => ratio(a, b),
            _ => None,
        };
    }
    out
}

fn table(summaries: &[PgSummary]) -> Table {
    let mut t = Table::new([
        "commit",
        "clients",
        "target",
        "tps",
        "min-max",
        "lat avg ms",
        "srv us/txn",
        "x nbdkit",
        "x local",
        "srv cpu x nbdkit",
    ]);
    let r = |v: Option<f64>| v.map_or_else(|| "-".into(), |r| format!("{r:.2}"));
    let mut rows: Vec<&PgSummary> = summaries.iter().collect();
    rows.sort_by_key(|s| (s.commit == Commit::On, s.clients));
    for s in rows {
        t.row([
            s.commit.name().to_owned(),
            s.clients.to_string(),
            s.target.clone(),
            compact(s.tps.median),
            format!("{}-{}", compact(s.tps.min), compact(s.tps.max)),
            compact(s.latency_avg_ms),
            s.server_cpu_us_per_txn.map_or_else(|| "-".into(), compact),
            r(s.x_nbdkit),
            r(s.x_local),
            r(s.cpu_x_nbdkit),
        ]);
    }
    t
}

fn figure(summaries: &[PgSummary], targets: &[String], commits: &[Commit]) -> Figure {
    let axes = |y: &str| Axes {
        x_label: "clients".into(),
        y_label: y.into(),
        x_axis: XAxis::Log2,
    };
    let lines = |commit: Commit, y: fn(&PgSummary) -> Option<f64>| {
        targets
            .iter()
            .map(|t| {
                let points = summaries
                    .iter()
                    .filter(|s| &s.target == t && s.commit == commit)
                    .filter_map(|s| y(s).map(|v| (f64::from(s.clients), v)))
                    .collect();
                (t.clone(), points)
            })
            .collect()
    };
    let mut charts = Vec::new();
    for &c in commits {
        charts.push(axes("transactions/s").chart(
            format!("tps, synchronous_commit={}", c.name()),
            lines(c, |s| Some(s.tps.median)),
        ));
    }
    for &c in commits {
        charts.push(axes("server CPU us per transaction").chart(
            format!("server CPU, synchronous_commit={}", c.name()),
            lines(c, |s| s.server_cpu_us_per_txn),
        ));
    }
    Figure {
        title: "pgbench (TPC-B-like) on ext4 over NBD (nbdfuse + loop) and on local I/O".into(),
        columns: commits.len().max(1),
        charts,
    }
}

// ---------------------------------------------------------------- the preset

/// What every target runs.
struct Setup<'a> {
    tools: &'a PgTools,
    user: UserIds,
    image: &'a Path,
    scale: u32,
    secs: u32,
    clients: &'a [u32],
    commits: &'a [Commit],
}

/// Samples and failures gathered over the rounds.
#[derive(Default)]
struct Gathered {
    samples: Vec<PgSample>,
    failures: Vec<String>,
}

/// One target in one round: a fresh filesystem and cluster, then every
/// commit mode and client count.
fn run_target(
    setup: &Setup<'_>,
    spec: Option<&PeerSpec>,
    label: &str,
    round: u32,
    out: &mut Gathered,
) -> Result<()> {
    let Setup {
        tools,
        user,
        image,
        scale,
        secs,
        clients,
        commits,
    } = *setup;
    let stack = Ext4Stack::build(spec, image)?;
    // The postgres user must reach the mount point through the work
    // folder (created 0700).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(stack.workdir(), std::fs::Permissions::from_mode(0o755))
            .context("cannot open the work folder to the postgres user")?;
    }
    let most = clients.iter().copied().max().unwrap_or(1);
    let t0 = Instant::now();
    let cluster = Cluster::create(tools, user, &stack.mnt(), most + 10)?;
    cluster.populate(scale)?;
    eprintln!(
        "round {round} {label}: initdb, start and pgbench -i -s {scale} took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    for &commit in commits {
        for &c in clients {
            let threads = c.min(nproc).max(1);
            let steal0 = steal_now();
            let cpu0 = stack.server_pid().and_then(sluice_bench::cpu::process_cpu);
            let r = cluster.run(c, threads, secs, commit);
            let cpu1 = stack.server_pid().and_then(sluice_bench::cpu::process_cpu);
            match r {
                Ok(output) => {
                    let server_cpu_us_per_txn = match (cpu0, cpu1) {
                        (Some(a), Some(b)) if output.transactions > 0 => Some(
                            b.saturating_sub(a).as_secs_f64() * 1e6 / output.transactions as f64,
                        ),
                        _ => None,
                    };
                    let s = PgSample {
                        round,
                        target: label.to_owned(),
                        commit,
                        clients: c,
                        threads,
                        output,
                        server_cpu_us_per_txn,
                        load1: load1(),
                        steal_pct: steal_since(steal0),
                    };
                    eprintln!(
                        "round {round} {label:<8} sync={:<3} {c:>2} clients {:>8} tps  lat {:>7} ms  srv {} us/txn  load {:.2}  steal {:.1}%",
                        commit.name(),
                        compact(s.output.tps),
                        compact(s.output.latency_avg_ms),
                        s.server_cpu_us_per_txn.map_or_else(|| "-".into(), compact),
                        s.load1,
                        s.steal_pct
                    );
                    out.samples.push(s);
                }
                Err(e) => {
                    let msg = format!(
                        "round {round} {label} sync={} {c} clients: {e:#}",
                        commit.name()
                    );
                    eprintln!("{msg}");
                    out.failures.push(msg);
                }
            }
        }
    }
    drop(cluster);
    drop(stack);
    Ok(())
}

/// Runs the preset and writes `pgbench.json`, `pgbench-table.md` and the
/// plot `bench-pgbench`.
pub fn pgbench(opts: &PgbenchOptions) -> Result<PgbenchReport> {
    let p = &opts.preset;
    let (tools, user) = missing_prerequisite()?;
    let machine = Machine::probe();
    let steal0 = steal_now();
    let secs = p
        .duration
        .map_or(if p.quick { 3 } else { 6 }, |d| d.as_secs().max(1) as u32);
    let scale = opts.scale.unwrap_or(if p.quick { 5 } else { 20 });
    // pgbench -i writes about 16 MB per scale unit; room for it, the WAL
    // and the indexes.
    let size = p.image_size.unwrap_or(
        ((u64::from(scale) * 16) << 20)
            .saturating_mul(4)
            .max(1 << 30),
    );
    let clients = opts.clients.clone().unwrap_or_else(|| CLIENTS.to_vec());
    if clients.is_empty() || clients.contains(&0) {
        bail!("--clients: client counts start at 1");
    }
    let commits = opts
        .commits
        .clone()
        .unwrap_or_else(|| vec![Commit::Off, Commit::On]);
    let wants = |t: &str| p.targets.as_ref().is_none_or(|v| v.iter().any(|x| x == t));
    let mut notes = Vec::new();
    let names = peers::requested_servers(
        p.targets.as_deref(),
        &["sluice", "nbdkit"],
        &["sluice", "nbdkit"],
    );
    let (found, skipped) = peers::available_peers(&names, p.sluice_bin.as_deref());
    for s in skipped {
        eprintln!("{s}");
        notes.push(s);
    }
    let mut targets: Vec<(String, Option<PeerSpec>)> = found
        .into_iter()
        .map(|s| (s.label.clone(), Some(s)))
        .collect();
    if wants("local") {
        targets.push(("local".into(), None));
    }
    if targets.is_empty() {
        bail!("no target can run here (targets are sluice, nbdkit, local and LABEL=PATH)");
    }
    let image = Image::prepare(p.image.as_deref(), None, "pgbench", size)?;
    notes.push(format!(
        "PostgreSQL {} as user {PG_USER}; data directory on ext4 (mkfs each target and round) on a loop device over nbdfuse over the server, or over the image file itself for local; a {} MiB image at {}; pgbench TPC-B-like, scale {scale}, {secs} s per run, -j min(clients, CPUs); tables prewarmed after pgbench -i; VACUUM and CHECKPOINT before each run",
        tools.version,
        size >> 20,
        image.path().display()
    ));
    let setup = Setup {
        tools: &tools,
        user,
        image: image.path(),
        scale,
        secs,
        clients: &clients,
        commits: &commits,
    };
    let t0 = Instant::now();
    let mut out = Gathered::default();
    let n = targets.len();
    for round in 0..p.rounds {
        for k in 0..n {
            let (label, spec) = &targets[(k + round as usize) % n];
            if let Err(e) = run_target(&setup, spec.as_ref(), label, round, &mut out) {
                let msg = format!("round {round} {label}: {e:#}");
                eprintln!("{msg}");
                out.failures.push(msg);
            }
        }
    }
    let Gathered { samples, failures } = out;
    let summaries = summarise(&samples);
    let report = PgbenchReport {
        command: crate::setup::command_line(),
        machine,
        loadavg_end: Machine::probe().loadavg,
        steal_pct: steal_since(steal0),
        quick: p.quick,
        rounds: p.rounds,
        duration_s: secs,
        scale,
        image_bytes: size,
        postgres: tools.version.clone(),
        notes,
        summaries,
        samples,
        failures,
        wall_s: t0.elapsed().as_secs_f64(),
    };
    let labels: Vec<String> = targets.iter().map(|(l, _)| l.clone()).collect();
    let title = format!(
        "pgbench ({} round(s), {secs} s per run, scale {scale}, wall {:.0} s)",
        report.rounds, report.wall_s
    );
    Epilogue::new("pgbench", title, &report.machine, &report.notes)
        .line(format!(
            "load average at the end: {}; steal over the run: {:.1}%",
            report.loadavg_end, report.steal_pct
        ))
        .failures(&report.failures)
        .table(
            "median of rounds; x nbdkit and x local: tps ratios; srv: the server process's CPU",
            table(&report.summaries),
        )
        .figure(figure(&report.summaries, &labels, &commits))
        .finish(p, &report)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// What pgbench 15.18 printed on this machine (-P 2, -T 2).
    const PG15: &str = "pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: <builtin: TPC-B (sort of)>
scaling factor: 2
query mode: simple
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 1627
number of failed transactions: 0 (0.000%)
latency average = 4.831 ms
latency stddev = 10.365 ms
initial connection time = 29.252 ms
tps = 820.880951 (without initial connection time)
";

    /// The form of versions before 14: two tps lines, no failure count.
    const PG12: &str = "transaction type: <builtin: TPC-B (sort of)>
scaling factor: 1
query mode: simple
number of clients: 1
number of threads: 1
number of transactions per client: 100
number of transactions actually processed: 100/100
latency average = 1.500 ms
tps = 650.000000 (including connections establishing)
tps = 666.666667 (excluding connections establishing)
";

    #[test]
    fn pgbench_summaries_parse() {
        let r = parse_pgbench_output(PG15).unwrap();
        assert_eq!(
            r,
            PgbenchOutput {
                tps: 820.880951,
                transactions: 1627,
                failed: 0,
                latency_avg_ms: 4.831,
                latency_stddev_ms: Some(10.365),
            }
        );
        let r = parse_pgbench_output(PG12).unwrap();
        assert_eq!((r.tps, r.transactions, r.failed), (666.666667, 100, 0));
        assert_eq!(r.latency_stddev_ms, None);
        let failing = PG15.replace(
            "failed transactions: 0 (0.000%)",
            "failed transactions: 7 (0.430%)",
        );
        assert_eq!(parse_pgbench_output(&failing).unwrap().failed, 7);
    }

    #[test]
    fn broken_pgbench_output_is_an_error_not_a_number() {
        for (text, what) in [
            (String::new(), "tps"),
            (PG15.replace("tps = 820.880951", "tps = lots"), "tps"),
            (
                PG15.replace("processed: 1627", "processed: many"),
                "transaction count",
            ),
            (
                PG15.replace("latency average = 4.831 ms\n", ""),
                "average latency",
            ),
            (PG15.replace("= 10.365 ms", "= NaN ms"), "deviation"),
        ] {
            let e = parse_pgbench_output(&text).unwrap_err();
            assert!(format!("{e}").contains(what), "{what}: {e}");
        }
    }

    fn fake_install(root: &Path, version: &str, tools: &[&str]) {
        use std::os::unix::fs::PermissionsExt;
        let bin = root.join(version).join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        for t in tools {
            let p = bin.join(t);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }

    #[test]
    fn the_newest_complete_postgres_is_chosen() {
        let root = tempfile::tempdir().unwrap();
        let e = PgTools::find(root.path()).unwrap_err().to_string();
        assert!(e.contains("apt-get install postgresql"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
        assert!(PgTools::find(&root.path().join("absent"))
            .unwrap_err()
            .to_string()
            .contains("apt-get install postgresql"));
        fake_install(root.path(), "9.6", &TOOLS);
        fake_install(root.path(), "13", &TOOLS);
        // Newer, but without pgbench (the contrib split of old Debian).
        fake_install(root.path(), "16", &["pg_ctl", "initdb", "psql"]);
        let t = PgTools::find(root.path()).unwrap();
        assert_eq!(t.version, "13");
        assert_eq!(t.bin, root.path().join("13/bin"));
    }

    fn sample(round: u32, target: &str, commit: Commit, clients: u32, tps: f64) -> PgSample {
        PgSample {
            round,
            target: target.into(),
            commit,
            clients,
            threads: 1,
            output: PgbenchOutput {
                tps,
                transactions: (tps * 10.0) as u64,
                failed: 0,
                latency_avg_ms: 1000.0 * f64::from(clients) / tps,
                latency_stddev_ms: None,
            },
            server_cpu_us_per_txn: (target != "local").then_some(tps / 10.0),
            load1: 0.0,
            steal_pct: 0.0,
        }
    }

    #[test]
    fn ratios_are_to_nbdkit_and_local_at_the_same_point() {
        let mut v = Vec::new();
        for round in 0..3 {
            let r = f64::from(round);
            v.push(sample(round, "sluice", Commit::On, 4, 300.0 + r));
            v.push(sample(round, "nbdkit", Commit::On, 4, 200.0 + r));
            v.push(sample(round, "local", Commit::On, 4, 600.0 + r));
            v.push(sample(round, "sluice", Commit::Off, 4, 1000.0 + r));
        }
        let s = summarise(&v);
        assert_eq!(s.len(), 4);
        let sl = &s[0];
        assert_eq!((sl.target.as_str(), sl.commit), ("sluice", Commit::On));
        assert_eq!(
            (sl.tps.median, sl.tps.min, sl.tps.max),
            (301.0, 300.0, 302.0)
        );
        assert!((sl.x_nbdkit.unwrap() - 301.0 / 201.0).abs() < 1e-12);
        assert!((sl.x_local.unwrap() - 301.0 / 601.0).abs() < 1e-12);
        assert!((sl.cpu_x_nbdkit.unwrap() - 30.1 / 20.1).abs() < 1e-9);
        assert_eq!(s[2].server_cpu_us_per_txn, None, "local has no server");
        // Commit off has neither nbdkit nor local: no ratio at all.
        assert_eq!((s[3].x_nbdkit, s[3].x_local), (None, None));
        let text = table(&s).render();
        assert!(text.contains("1.50"), "{text}");
    }

    /// Processes whose command line names a work folder of the mount
    /// stack and PostgreSQL: a cluster left running.
    fn clusters_left() -> Vec<String> {
        let mut left = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains("sluice-bench-fs-") && cmd.contains("postgres") {
                left.push(cmd);
            }
        }
        left
    }

    /// The whole preset on local I/O, one short run: PostgreSQL on ext4 on
    /// a loop device, as the postgres user, and nothing left behind.
    #[test]
    fn a_local_run_measures_and_cleans_up() {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if let Err(why) = missing_prerequisite().map(drop).and_then(|()| {
            root.then_some(())
                .ok_or_else(|| anyhow!("loop devices and mounts need root"))
        }) {
            let why = format!("the pgbench preset cannot run here: {why:#}");
            assert!(!sluice_testkit::programs::required(), "{why}");
            eprintln!("skipped: {why}");
            return;
        }
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let image = dir.path().join("pg.img");
        let opts = PgbenchOptions {
            preset: PresetOptions {
                quick: true,
                rounds: 1,
                duration: Some(Duration::from_secs(1)),
                out_dir: dir.path().join("out"),
                plot_dir: dir.path().join("out"),
                image: Some(image.clone()),
                image_size: Some(256 << 20),
                sluice_bin: None,
                targets: Some(vec!["local".into()]),
                driver: sluice_bench::matrix::Driver::Own,
                progress: false,
                link_rate: None,
            },
            scale: Some(1),
            clients: Some(vec![2]),
            commits: Some(vec![Commit::On]),
        };
        let report = pgbench(&opts).unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures);
        assert_eq!(report.samples.len(), 1);
        let s = &report.samples[0];
        assert_eq!(
            (s.target.as_str(), s.clients, s.commit),
            ("local", 2, Commit::On)
        );
        assert!(s.output.tps > 0.0 && s.output.transactions > 0, "{s:?}");
        assert_eq!(s.server_cpu_us_per_txn, None, "local I/O has no server");
        assert!(dir.path().join("out/pgbench.json").is_file());
        assert!(dir.path().join("out/pgbench-table.md").is_file());
        // Nothing left: no loop device on the image, no cluster running.
        let attached =
            crate::fsbench::run("losetup", &["-j", &image.display().to_string()]).unwrap();
        assert!(attached.is_empty(), "loop device left: {attached}");
        assert!(clusters_left().is_empty(), "{:?}", clusters_left());
    }
}
