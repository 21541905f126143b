//! The `san` preset, after the SAN paper (RDMA target): 4 KiB latency at
//! QD 1, a fio-style matrix with 16 workers and 4 KiB random writes
//! against workers, all as a fraction of local I/O; and the temporal
//! merge rows of the object client beside them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::matrix::{self, Summary};
use sluice_bench::report;
use sluice_bench::stats::ratio;
use sluice_bench::workload::{Limit, Pattern, Rw, Workload};
use sluice_client::obj::MergePolicy;
use sluice_model::plot::{Axes, Chart, Figure, XAxis};
use sluice_model::text::{compact, scaled, Table};

use super::{epilogue, labels, peer_targets, run_plan, Plan, PresetReport};
use crate::merge;
use crate::objserver::ObjServer;
use crate::setup::{Image, PresetOptions};

const SAN_WORKERS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The SAN paper (RDMA target): 4 KiB latency at QD 1 over 10,000 ops; the fio-style matrix
/// with 16 workers; 4 KiB random-write throughput vs workers 1–64; all as
/// a fraction of local I/O on the same image.
pub fn san(opts: &PresetOptions) -> Result<PresetReport> {
    let machine = Machine::probe();
    let duration = opts.duration(0.5, 2.0);
    let size = opts.size(512 << 20, 2 << 30);
    let image = Image::prepare(opts.image.as_deref(), None, "san", size)?;
    let (targets, mut notes) = peer_targets(opts, true);
    if targets.is_empty() {
        bail!("no target can run here");
    }
    notes.push(
        "temporal merge rows: the native protocol's object client (merging lives there), embedded object server with its store on /dev/shm, one shared connection, a thread per object; policies take turns at each worker count".into(),
    );
    if opts.link_rate.is_some() {
        notes.push(
            "the temporal merge rows run against an in-process object server: not behind the link"
                .into(),
        );
    }
    let cases = san_cases(duration);
    let report = run_plan(
        opts,
        Plan {
            name: "san",
            targets: &targets,
            drivers: opts.driver.expand(),
            cases,
            image: &image,
            machine,
            duration,
            image_bytes: size,
            notes,
            baseline: "local",
        },
    )?;
    let names = labels(&targets);
    let lat = latency_table(&report);
    let fio_style: Vec<Summary> = report
        .summaries
        .iter()
        .filter(|s| s.case.ends_with("-qd1-w16"))
        .cloned()
        .collect();
    let sweep: Vec<Summary> = report
        .summaries
        .iter()
        .filter(|s| s.case.ends_with("workers"))
        .cloned()
        .collect();
    let t2 = matrix::pivot_table(&fio_style, &names, true);
    let t3 = matrix::pivot_table(&sweep, &names, false);
    // A failure to start the merge rows' server still lets the matrix's
    // results be written; the preset fails afterwards.
    let mut merge_error = None;
    let merge = if opts.wants("sluice") {
        san_merge(opts, duration, &sweep).unwrap_or_else(|e| {
            let report = SanMergeReport {
                rows: Vec::new(),
                checks: Vec::new(),
                samples: Vec::new(),
                failures: vec![format!("temporal merge rows: {e:#}")],
            };
            merge_error = Some(e);
            report
        })
    } else {
        SanMergeReport {
            rows: Vec::new(),
            checks: Vec::new(),
            samples: Vec::new(),
            failures: vec!["temporal merge rows not run: sluice is not among --targets".into()],
        }
    };
    let t4 = san_merge_table(&merge);
    let charts = san_charts(opts, &names, &sweep, &merge);
    epilogue(&report)
        .table("4 KiB latency at QD 1, 10,000 ops (median of rounds)", lat)
        .table("16 workers, QD 1 each: median MiB/s (fraction of local)", t2)
        .table(
            "4 KiB random writes vs workers: median IOPS (fraction of local)",
            t3,
        )
        .table(
            "4 KiB random writes through the object client, temporal merge off / always / adaptive: writes/s (fraction of local)",
            t4,
        )
        .markdown_file(Some("san-tables.md".into()))
        .figure(Figure {
            title: "SAN: random-write throughput vs workers".into(),
            columns: 2,
            charts,
        })
        .finish(opts, &report)?;
    match merge_error {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// The san preset's workloads: 4 KiB latency at QD 1 (10,000 ops), the
/// fio-style matrix with 16 workers and the 4 KiB random-write sweep
/// over [`SAN_WORKERS`].
fn san_cases(duration: Duration) -> Vec<Workload> {
    let mut cases = Vec::new();
    for rw in [Rw::Read, Rw::Write] {
        let mut w = Workload::new(Pattern::Rand, rw, 4096, 1);
        w.limit = Limit::Ops(10_000);
        w.name = format!(
            "lat-{}-4k-qd1",
            if rw == Rw::Read { "read" } else { "write" }
        );
        cases.push(w);
    }
    for p in [Pattern::Seq, Pattern::Rand] {
        for rw in [Rw::Read, Rw::Write] {
            for bs in [4096u32, 1 << 20] {
                let mut w = Workload::new(p, rw, bs, 1);
                w.workers = 16;
                w.limit = Limit::Time(duration);
                cases.push(w);
            }
        }
    }
    for workers in SAN_WORKERS {
        let mut w = Workload::new(Pattern::Rand, Rw::Write, 4096, 1);
        w.workers = workers;
        w.limit = Limit::Time(duration);
        w.name = format!("randwrite-4k-{workers}workers");
        cases.push(w);
    }
    cases
}

/// The 4 KiB latency rows at QD 1 of a san run.
fn latency_table(report: &PresetReport) -> Table {
    let mut lat = Table::new([
        "case", "driver", "target", "p50 us", "p99 us", "mean us", "IOPS", "x local",
    ]);
    for s in report
        .summaries
        .iter()
        .filter(|s| s.case.starts_with("lat-"))
    {
        lat.row([
            s.case.clone(),
            s.driver.clone(),
            s.target.clone(),
            compact(s.p50_us),
            compact(s.p99_us),
            compact(s.mean_us),
            scaled(s.iops.median),
            s.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
        ]);
    }
    lat
}

/// The san preset's charts: the random-write sweep in kIOPS and as a
/// fraction of local I/O for each client driver, then the temporal
/// merge rows the same two ways.
fn san_charts(
    opts: &PresetOptions,
    names: &[String],
    sweep: &[Summary],
    merge: &SanMergeReport,
) -> Vec<Chart> {
    let axes = Axes {
        x_label: "workers".into(),
        y_label: "kIOPS (left), fraction of local (right)".into(),
        x_axis: XAxis::Log2,
    };
    let mut charts = Vec::new();
    for driver in opts.driver.expand() {
        let sweep_points = |t: &str, f: &dyn Fn(&Summary) -> Option<f64>| -> Vec<(f64, f64)> {
            SAN_WORKERS
                .iter()
                .filter_map(|&w| {
                    let case = format!("randwrite-4k-{w}workers");
                    sweep
                        .iter()
                        .find(|s| s.case == case && s.target == t && s.driver == driver)
                        .and_then(f)
                        .map(|y| (f64::from(w), y))
                })
                .collect()
        };
        let kiops = names
            .iter()
            .map(|t| {
                (
                    t.clone(),
                    sweep_points(t, &|s| Some(s.iops.median / 1000.0)),
                )
            })
            .collect();
        charts.push(axes.chart(
            format!("4 KiB random writes, QD 1 per worker ({driver} client)"),
            kiops,
        ));
        let fractions = names
            .iter()
            .filter(|t| t.as_str() != "local")
            .map(|t| (t.clone(), sweep_points(t, &|s| s.ratio)))
            .collect();
        charts.push(axes.chart(
            format!("the same as a fraction of local I/O ({driver} client)"),
            fractions,
        ));
    }
    let policy_points = |policy: MergePolicy, f: &dyn Fn(&SanMergeRow) -> Option<f64>| {
        merge
            .rows
            .iter()
            .filter(|r| r.policy == policy.name())
            .filter_map(|r| f(r).map(|y| (r.workers as f64, y)))
            .collect::<Vec<_>>()
    };
    charts.push(
        axes.chart(
            "object client, temporal merge (kIOPS)",
            merge::POLICIES
                .iter()
                .map(|&p| {
                    (
                        format!("merge {p}"),
                        policy_points(p, &|r| Some(r.ops_s / 1000.0)),
                    )
                })
                .collect(),
        ),
    );
    charts.push(
        axes.chart(
            "object client, temporal merge, as a fraction of local I/O",
            merge::POLICIES
                .iter()
                .map(|&p| (format!("merge {p}"), policy_points(p, &|r| r.x_local)))
                .collect(),
        ),
    );
    charts
}

/// One point of the san preset's temporal-merge rows: a policy at a
/// worker count, medians over rounds.
#[derive(Debug, Clone, Serialize)]
pub struct SanMergeRow {
    pub policy: String,
    pub workers: usize,
    /// Writes per second, median of rounds.
    pub ops_s: f64,
    pub mean_us: f64,
    /// Share of writes sent inside batch frames.
    pub merged_share: f64,
    pub server_cpu_us_per_op: f64,
    /// The local I/O IOPS of the same workers (own client).
    pub local_iops: Option<f64>,
    /// ops_s ÷ local_iops.
    pub x_local: Option<f64>,
}

/// What `san-merge.json` holds.
#[derive(Debug, Serialize)]
pub struct SanMergeReport {
    pub rows: Vec<SanMergeRow>,
    /// Adaptive against the better fixed policy at each worker count.
    pub checks: Vec<merge::AdaptiveCheck>,
    pub samples: Vec<merge::MergeSample>,
    pub failures: Vec<String>,
}

/// The SAN paper's temporal-merge rows (its figure 5 and the merge bars
/// of figure 6) on sluice: 4 KiB random writes at each worker count over
/// the native protocol's object client (where merging lives), merge off /
/// always / adaptive taking turns, each also as a fraction of the local
/// I/O measured at the same worker count (`sweep`). Writes
/// `san-merge.json`.
fn san_merge(
    opts: &PresetOptions,
    duration: Duration,
    sweep: &[Summary],
) -> Result<SanMergeReport> {
    let shm = PathBuf::from("/dev/shm");
    let mut dir = tempfile::Builder::new();
    dir.prefix("sluice-bench-san-");
    let dir = if shm.is_dir() {
        dir.tempdir_in(&shm)
    } else {
        dir.tempdir()
    }
    .context("cannot create a folder for the object store")?;
    let server = ObjServer::start(dir.path(), 1 << 20)?;
    let most = SAN_WORKERS.iter().copied().max().unwrap_or(1) as usize;
    let objects = merge::prepare_objects(&server, most)?;
    let warmup = (duration / 4).min(Duration::from_millis(500));
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    for round in 0..opts.rounds {
        for w in SAN_WORKERS {
            let n = w as usize;
            for k in 0..merge::POLICIES.len() {
                let policy = merge::POLICIES[(k + round as usize) % merge::POLICIES.len()];
                match merge::run_one(&server, policy, &objects[..n], warmup, duration) {
                    Ok(mut s) => {
                        s.round = round;
                        eprintln!(
                            "round {round} object client {n:>2} workers merge {:<8} {:>9} writes/s  merged {:>3.0}%  srv {} us/op",
                            s.policy,
                            scaled(s.ops_s),
                            s.merged as f64 * 100.0 / s.ops.max(1) as f64,
                            compact(s.server_cpu_us_per_op)
                        );
                        samples.push(s);
                    }
                    Err(e) => {
                        let msg = format!(
                            "round {round} object client {n} workers merge {policy}: {e:#}"
                        );
                        eprintln!("{msg}");
                        failures.push(msg);
                    }
                }
            }
        }
    }
    drop(server);
    let summaries = merge::summarise(&samples);
    let local = |w: usize| {
        let case = format!("randwrite-4k-{w}workers");
        let mine = |driver: Option<&str>| {
            sweep.iter().find(|s| {
                s.case == case && s.target == "local" && driver.is_none_or(|d| s.driver == d)
            })
        };
        mine(Some("own"))
            .or_else(|| mine(None))
            .map(|s| s.iops.median)
    };
    let rows = summaries
        .iter()
        .map(|s| {
            let local_iops = local(s.workers);
            SanMergeRow {
                policy: s.policy.clone(),
                workers: s.workers,
                ops_s: s.ops_s.median,
                mean_us: s.mean_us,
                merged_share: s.merged_share,
                server_cpu_us_per_op: s.server_cpu_us_per_op,
                local_iops,
                x_local: local_iops.and_then(|l| ratio(s.ops_s.median, l)),
            }
        })
        .collect();
    let report = SanMergeReport {
        rows,
        checks: merge::check_adaptive(&summaries, &samples),
        samples,
        failures,
    };
    report::write_json(&opts.out_dir.join("san-merge.json"), &report)?;
    Ok(report)
}

/// The merge rows: one line per worker count, each policy's writes/s with
/// its fraction of local I/O.
fn san_merge_table(report: &SanMergeReport) -> Table {
    let mut t = Table::new([
        "workers",
        "local IOPS",
        "merge off",
        "merge always",
        "merge adaptive",
        "always/off per round [95% CI]",
        "adaptive/best per round [95% CI]",
        "in batches (always/adaptive)",
    ]);
    let find = |w: usize, p: MergePolicy| {
        report
            .rows
            .iter()
            .find(|r| r.workers == w && r.policy == p.name())
    };
    let cell = |r: Option<&SanMergeRow>| {
        r.map_or_else(
            || "-".into(),
            |r| match r.x_local {
                Some(x) => format!("{} ({x:.2}x)", scaled(r.ops_s)),
                None => scaled(r.ops_s),
            },
        )
    };
    for c in &report.checks {
        let w = c.workers;
        let share = |p| {
            find(w, p).map_or_else(|| "-".into(), |r| format!("{:.0}%", r.merged_share * 100.0))
        };
        t.row([
            w.to_string(),
            find(w, MergePolicy::Off)
                .and_then(|r| r.local_iops)
                .map_or_else(|| "-".into(), scaled),
            cell(find(w, MergePolicy::Off)),
            cell(find(w, MergePolicy::Always)),
            cell(find(w, MergePolicy::Adaptive)),
            merge::interval_cell(c.always_over_off.as_ref()),
            format!(
                "{} ({})",
                merge::interval_cell(c.adaptive_over_best.as_ref()),
                c.best
            ),
            format!(
                "{} / {}",
                share(MergePolicy::Always),
                share(MergePolicy::Adaptive)
            ),
        ]);
    }
    t
}
