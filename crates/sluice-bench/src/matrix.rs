//! Runs a matrix of cases against several targets and drivers,
//! interleaved over rounds, and summarises it: medians, spread (min–max)
//! and ratios to a baseline target.
//!
//! Each round visits every target in turn (starting one later each
//! round), and runs every driver and case against it; so a drift of the
//! machine's speed (another build starting on a shared core) hits every
//! target alike instead of one.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use sluice_model::text::{compact, scaled, Table};

use crate::peers::{self, FioTarget, PeerKind, PeerServer, PeerSpec, ServerHost, QEMU_NBD_SHARED};
use crate::runner::{self, Endpoint, RunOptions, RunResult, ServerCpu};
use crate::stats::{median, ratio, Spread};
use crate::target::{EmbeddedConfig, EmbeddedServer};
use crate::workload::Workload;

/// Which client drives the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    /// sluice's own client (the bench's hot loop).
    Own,
    /// fio's nbd engine (libnbd), or psync for local I/O.
    Fio,
    /// Both, one after the other.
    Both,
}

impl Driver {
    /// The concrete drivers ("own", "fio").
    pub fn expand(self) -> Vec<&'static str> {
        match self {
            Self::Own => vec!["own"],
            Self::Fio => vec!["fio"],
            Self::Both => vec!["own", "fio"],
        }
    }
}

/// One thing measured.
#[derive(Debug, Clone)]
pub enum TargetKind {
    /// Positional I/O on the image itself.
    Local,
    /// A server process on the image.
    Peer(PeerSpec),
    /// An in-process sluice server (its export configured in the config).
    Embedded(EmbeddedConfig),
}

/// A labelled target.
#[derive(Debug, Clone)]
pub struct TargetEntry {
    /// Label in results.
    pub label: String,
    /// What it is.
    pub kind: TargetKind,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// Targets, in order.
    pub targets: Vec<TargetEntry>,
    /// Drivers ("own", "fio").
    pub drivers: Vec<&'static str>,
    /// Cases.
    pub cases: Vec<Workload>,
    /// Rounds.
    pub rounds: u32,
    /// The image every target serves (and local I/O uses).
    pub image: PathBuf,
    /// Show progress bars.
    pub progress: bool,
}

/// One run of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Round (0-based).
    pub round: u32,
    /// What was measured.
    #[serde(flatten)]
    pub result: RunResult,
}

/// A run that failed (recorded, and the matrix goes on).
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// Round.
    pub round: u32,
    /// Target.
    pub target: String,
    /// Driver.
    pub driver: String,
    /// Case ("" when the target did not start).
    pub case: String,
    /// The error.
    pub error: String,
}

/// Every run of a matrix.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MatrixRuns {
    /// Successful runs.
    pub runs: Vec<Measured>,
    /// Failed runs.
    pub failures: Vec<Failure>,
    /// Wall time of the whole matrix.
    pub wall_s: f64,
}

enum Started {
    Local,
    Peer(PeerServer),
    Embedded(EmbeddedServer),
}

/// Starts a target; a server process behind `link` when one is given
/// (local I/O has no network and is measured as it is).
fn start(
    entry: &TargetEntry,
    image: &std::path::Path,
    link: Option<&dyn ServerHost>,
) -> Result<Started> {
    Ok(match &entry.kind {
        TargetKind::Local => Started::Local,
        TargetKind::Peer(spec) => Started::Peer(PeerServer::start_behind(spec, image, link)?),
        TargetKind::Embedded(_) if link.is_some() => anyhow::bail!(
            "the embedded server runs inside the bench's process and cannot sit behind a link; use a server process (sluice, nbdkit, qemu-nbd)"
        ),
        TargetKind::Embedded(cfg) => Started::Embedded(EmbeddedServer::start(cfg)?),
    })
}

fn run_one(
    started: &Started,
    label: &str,
    driver: &str,
    case: &Workload,
    image: &std::path::Path,
    progress: bool,
) -> Result<RunResult> {
    let endpoint = match started {
        Started::Local => Endpoint::Local {
            path: image.to_path_buf(),
        },
        Started::Peer(p) => Endpoint::Nbd {
            uri: p.uri(),
            server_cpu: p.pid().map_or(ServerCpu::Unknown, ServerCpu::Pid),
        },
        Started::Embedded(e) => Endpoint::Nbd {
            uri: e.uri().clone(),
            server_cpu: ServerCpu::OwnThreads,
        },
    };
    if let Started::Peer(p) = started {
        if p.kind() == PeerKind::QemuNbd && case.workers > QEMU_NBD_SHARED {
            anyhow::bail!(
                "qemu-nbd -e {QEMU_NBD_SHARED} serves at most {QEMU_NBD_SHARED} connections; \
                 {} workers need one each",
                case.workers
            );
        }
    }
    if driver == "fio" {
        let size = endpoint.size()?;
        let region = case.region(size).map_err(anyhow::Error::msg)?;
        let (target, pid) = match started {
            Started::Local => (FioTarget::Local(image.to_path_buf()), None),
            Started::Peer(p) => (FioTarget::Nbd(p.uri_string()), p.pid()),
            Started::Embedded(e) => (FioTarget::Nbd(e.uri().to_string()), None),
        };
        let mut r = peers::run_fio(&target, case, region, pid, label)?;
        if let Started::Embedded(_) = started {
            // fio is another process; the embedded server's threads are ours.
            r.server_cpu_s = None;
        }
        return Ok(r);
    }
    runner::run_workload(
        &endpoint,
        case,
        &RunOptions {
            progress,
            prefill: false,
            target_label: label.to_owned(),
        },
    )
}

/// Runs the matrix, printing one line per run to stderr.
pub fn run(m: &Matrix) -> MatrixRuns {
    run_behind(m, None)
}

/// Runs the matrix with every server process on `link` (a host behind a
/// link, one target at a time, so they share it), printing one line per
/// run to stderr.
pub fn run_behind(m: &Matrix, link: Option<&dyn ServerHost>) -> MatrixRuns {
    let t0 = Instant::now();
    let mut out = MatrixRuns::default();
    let n = m.targets.len();
    for round in 0..m.rounds {
        for k in 0..n {
            let entry = &m.targets[(k + round as usize) % n];
            let started = match start(entry, &m.image, link) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("round {round}: {}: {e:#}", entry.label);
                    out.failures.push(Failure {
                        round,
                        target: entry.label.clone(),
                        driver: String::new(),
                        case: String::new(),
                        error: format!("{e:#}"),
                    });
                    continue;
                }
            };
            for driver in &m.drivers {
                for case in &m.cases {
                    match run_one(&started, &entry.label, driver, case, &m.image, m.progress) {
                        Ok(r) => {
                            eprintln!(
                                "round {round} {:<10} {:<4} {:<24} {:>9} IOPS {:>8} MiB/s  p50 {:>7} us  srv {} us/op",
                                entry.label,
                                driver,
                                r.case,
                                scaled(r.iops),
                                compact(r.mib_s),
                                compact(r.latency.p50_us),
                                r.server_us_per_op().map_or_else(|| "-".into(), compact),
                            );
                            out.runs.push(Measured { round, result: r });
                        }
                        Err(e) => {
                            eprintln!(
                                "round {round} {} {driver} {}: {e:#}",
                                entry.label,
                                case.label()
                            );
                            out.failures.push(Failure {
                                round,
                                target: entry.label.clone(),
                                driver: (*driver).to_owned(),
                                case: case.label(),
                                error: format!("{e:#}"),
                            });
                        }
                    }
                }
            }
            match started {
                Started::Peer(mut p) => p.stop(),
                Started::Embedded(e) => {
                    if let Err(err) = e.stop() {
                        eprintln!("{}: {err:#}", entry.label);
                    }
                }
                Started::Local => {}
            }
        }
    }
    out.wall_s = t0.elapsed().as_secs_f64();
    out
}

/// Medians over rounds of one (case, driver, target).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Case.
    pub case: String,
    /// Driver.
    pub driver: String,
    /// Target.
    pub target: String,
    /// IOPS over rounds.
    pub iops: Spread,
    /// MiB/s over rounds.
    pub mib_s: Spread,
    /// Median of the rounds' mean latency (µs).
    pub mean_us: f64,
    /// Median of the rounds' p50 (µs).
    pub p50_us: f64,
    /// Median of the rounds' p99 (µs).
    pub p99_us: f64,
    /// Median client CPU µs per op.
    pub client_us_per_op: f64,
    /// Median server CPU µs per op, when known.
    pub server_us_per_op: Option<f64>,
    /// Median IOPS ÷ the baseline's median IOPS (same case and driver).
    pub ratio: Option<f64>,
}

/// Summarises runs by (case, driver, target), in first-seen order, with
/// ratios to `baseline`.
pub fn summarise(runs: &[Measured], baseline: &str) -> Vec<Summary> {
    let mut keys: Vec<(String, String, String)> = Vec::new();
    for m in runs {
        let k = (
            m.result.case.clone(),
            m.result.driver.clone(),
            m.result.target.clone(),
        );
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let pick = |k: &(String, String, String)| -> Vec<&RunResult> {
        runs.iter()
            .map(|m| &m.result)
            .filter(|r| r.case == k.0 && r.driver == k.1 && r.target == k.2)
            .collect()
    };
    let col = |rs: &[&RunResult], f: &dyn Fn(&RunResult) -> f64| -> Vec<f64> {
        rs.iter().map(|r| f(r)).collect()
    };
    let mut out: Vec<Summary> = keys
        .iter()
        .filter_map(|k| {
            let rs = pick(k);
            let srv: Vec<f64> = rs.iter().filter_map(|r| r.server_us_per_op()).collect();
            Some(Summary {
                case: k.0.clone(),
                driver: k.1.clone(),
                target: k.2.clone(),
                iops: Spread::of(&col(&rs, &|r| r.iops))?,
                mib_s: Spread::of(&col(&rs, &|r| r.mib_s))?,
                mean_us: median(&col(&rs, &|r| r.latency.mean_us))?,
                p50_us: median(&col(&rs, &|r| r.latency.p50_us))?,
                p99_us: median(&col(&rs, &|r| r.latency.p99_us))?,
                client_us_per_op: median(&col(&rs, &|r| r.client_us_per_op()))?,
                server_us_per_op: median(&srv),
                ratio: None,
            })
        })
        .collect();
    let bases: Vec<(String, String, f64)> = out
        .iter()
        .filter(|s| s.target == baseline)
        .map(|s| (s.case.clone(), s.driver.clone(), s.iops.median))
        .collect();
    for s in &mut out {
        s.ratio = bases
            .iter()
            .find(|b| b.0 == s.case && b.1 == s.driver)
            .and_then(|b| ratio(s.iops.median, b.2));
    }
    out
}

/// The long table: one row per (case, driver, target).
pub fn summary_table(summaries: &[Summary], baseline: &str) -> Table {
    let mut t = Table::new([
        "case".to_owned(),
        "driver".into(),
        "target".into(),
        "IOPS".into(),
        "min-max".into(),
        "MiB/s".into(),
        "p50 us".into(),
        "p99 us".into(),
        "cli us/op".into(),
        "srv us/op".into(),
        format!("x{baseline}"),
    ]);
    for s in summaries {
        t.row([
            s.case.clone(),
            s.driver.clone(),
            s.target.clone(),
            scaled(s.iops.median),
            format!("{}-{}", scaled(s.iops.min), scaled(s.iops.max)),
            compact(s.mib_s.median),
            compact(s.p50_us),
            compact(s.p99_us),
            compact(s.client_us_per_op),
            s.server_us_per_op.map_or_else(|| "-".into(), compact),
            s.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
        ]);
    }
    t
}

/// The pivot: one row per (case, driver), one column per target, cells
/// "median IOPS (ratio)".
pub fn pivot_table(summaries: &[Summary], targets: &[String], use_mib: bool) -> Table {
    let mut header = vec!["case".to_owned(), "driver".to_owned()];
    header.extend(targets.iter().cloned());
    let mut t = Table::new(header);
    let mut rows: Vec<(String, String)> = Vec::new();
    for s in summaries {
        let k = (s.case.clone(), s.driver.clone());
        if !rows.contains(&k) {
            rows.push(k);
        }
    }
    for (case, driver) in rows {
        let mut cells = vec![case.clone(), driver.clone()];
        for target in targets {
            let cell = summaries
                .iter()
                .find(|s| s.case == case && s.driver == driver && &s.target == target)
                .map_or_else(
                    || "-".to_owned(),
                    |s| {
                        let v = if use_mib {
                            format!("{} MiB/s", compact(s.mib_s.median))
                        } else {
                            scaled(s.iops.median)
                        };
                        match s.ratio {
                            Some(r) => format!("{v} ({r:.2}x)"),
                            None => v,
                        }
                    },
                );
            cells.push(cell);
        }
        t.row(cells);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::LatencySummary;

    fn res(case: &str, driver: &str, target: &str, iops: f64) -> Measured {
        Measured {
            round: 0,
            result: RunResult {
                target: target.into(),
                driver: driver.into(),
                case: case.into(),
                workload: None,
                ops: 1000,
                reads: 1000,
                writes: 0,
                bytes: 4096 * 1000,
                elapsed_s: 1.0,
                iops,
                mib_s: iops / 256.0,
                latency: LatencySummary::default(),
                read_latency: LatencySummary::default(),
                write_latency: LatencySummary::default(),
                client_cpu_s: 0.01,
                server_cpu_s: Some(0.02),
                verified_reads: 0,
            },
        }
    }

    #[test]
    fn medians_spread_and_ratios_per_case_and_driver() {
        let runs = vec![
            res("a", "own", "nbdkit", 100.0),
            res("a", "own", "nbdkit", 120.0),
            res("a", "own", "nbdkit", 110.0),
            res("a", "own", "sluice", 200.0),
            res("a", "own", "sluice", 260.0),
            res("a", "own", "sluice", 220.0),
            res("a", "fio", "sluice", 50.0),
            res("a", "fio", "nbdkit", 100.0),
            res("b", "own", "sluice", 10.0),
        ];
        let s = summarise(&runs, "nbdkit");
        let get = |c: &str, d: &str, t: &str| {
            s.iter()
                .find(|x| x.case == c && x.driver == d && x.target == t)
                .unwrap()
        };
        let sl = get("a", "own", "sluice");
        assert_eq!(
            (sl.iops.median, sl.iops.min, sl.iops.max),
            (220.0, 200.0, 260.0)
        );
        assert_eq!(sl.ratio, Some(2.0));
        assert_eq!(get("a", "own", "nbdkit").ratio, Some(1.0));
        assert_eq!(get("a", "fio", "sluice").ratio, Some(0.5));
        assert_eq!(get("b", "own", "sluice").ratio, None, "no baseline for b");
        assert_eq!(sl.server_us_per_op, Some(20.0));
        let p = pivot_table(&s, &["sluice".into(), "nbdkit".into()], false).render();
        assert!(p.contains("220 (2.00x)"), "{p}");
    }
}
