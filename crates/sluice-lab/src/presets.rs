//! The papers' experiments as named presets, and the side-by-side
//! comparison they build on. Each writes JSON (every run plus the
//! medians), prints tables, and draws a plot.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::matrix::{self, Driver, Matrix, MatrixRuns, Summary, TargetEntry, TargetKind};
use sluice_bench::peers::{self, ServerHost};
use sluice_bench::report;
use sluice_bench::stats::ratio;
use sluice_bench::target::{Backing, EmbeddedConfig};
use sluice_bench::workload::{Limit, Pattern, Rw, Workload};
use sluice_client::obj::MergePolicy;
use sluice_model::plot::{Axes, Figure, XAxis};
use sluice_model::text::{compact, scaled, Table};
use sluice_server::PipelineMode;
use sluice_types::format_size;

use crate::epilogue::Epilogue;
use crate::link::LinkMeasurement;
use crate::merge;
use crate::objserver::ObjServer;
use crate::setup::{command_line, open_link, Image, PresetOptions};

/// What a preset or comparison writes to JSON.
#[derive(Debug, Serialize)]
pub struct PresetReport {
    /// Preset name.
    pub preset: String,
    /// The command that produced it.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Load average when it ended.
    pub loadavg_end: String,
    /// Quick sizes.
    pub quick: bool,
    /// Rounds.
    pub rounds: u32,
    /// Seconds per timed run.
    pub duration_s: f64,
    /// Image size.
    pub image_bytes: u64,
    /// Notes (skipped targets, caveats).
    pub notes: Vec<String>,
    /// The link the servers were behind (`--link-rate`), as measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkMeasurement>,
    /// Medians over rounds.
    pub summaries: Vec<Summary>,
    /// Every run.
    #[serde(flatten)]
    pub runs: MatrixRuns,
}

/// Peers (and local) as targets; messages for those skipped.
fn peer_targets(opts: &PresetOptions, with_local: bool) -> (Vec<TargetEntry>, Vec<String>) {
    // Other sluice builds come as LABEL=PATH (an old and a new binary
    // interleaved in one run).
    let servers = ["sluice", "nbdkit", "qemu-nbd"];
    let names = peers::requested_servers(opts.targets.as_deref(), &servers, &servers);
    let (found, skipped) = peers::available_peers(&names, opts.sluice_bin.as_deref());
    for s in &skipped {
        eprintln!("{s}");
    }
    let mut targets: Vec<TargetEntry> = found
        .into_iter()
        .map(|p| TargetEntry {
            label: p.label.clone(),
            kind: TargetKind::Peer(p),
        })
        .collect();
    if with_local && opts.wants("local") {
        targets.push(TargetEntry {
            label: "local".into(),
            kind: TargetKind::Local,
        });
    }
    (targets, skipped)
}

/// What a preset runs, and what it knew before it ran.
struct Plan<'a> {
    /// The preset's name: its files are NAME.json and NAME.csv.
    name: &'a str,
    targets: &'a [TargetEntry],
    drivers: Vec<&'static str>,
    cases: Vec<Workload>,
    image: &'a Image,
    machine: Machine,
    duration: Duration,
    image_bytes: u64,
    notes: Vec<String>,
    /// The target ratios are taken against.
    baseline: &'a str,
}

/// Runs the plan's matrix; [`epilogue`] then reports it.
fn run_plan(opts: &PresetOptions, plan: Plan<'_>) -> Result<PresetReport> {
    let m = Matrix {
        targets: plan.targets.to_vec(),
        drivers: plan.drivers,
        cases: plan.cases,
        rounds: opts.rounds,
        image: plan.image.path().to_path_buf(),
        progress: opts.progress,
    };
    let link = opts.link_rate.map(open_link).transpose()?;
    let mut notes = plan.notes;
    if link.is_some()
        && m.targets
            .iter()
            .any(|t| matches!(t.kind, TargetKind::Local))
    {
        notes.push("local I/O has no network: it is not behind the link".into());
    }
    let runs = matrix::run_behind(&m, link.as_ref().map(|l| &l.0 as &dyn ServerHost));
    let name = plan.name;
    let summaries = matrix::summarise(&runs.runs, plan.baseline);
    let report = PresetReport {
        preset: name.to_owned(),
        command: command_line(),
        machine: plan.machine,
        loadavg_end: Machine::probe().loadavg,
        quick: opts.quick,
        rounds: opts.rounds,
        duration_s: plan.duration.as_secs_f64(),
        image_bytes: plan.image_bytes,
        notes,
        link: link.map(|l| l.1),
        summaries,
        runs,
    };
    Ok(report)
}

/// A matrix preset's epilogue: its JSON and every run as CSV, the title
/// with rounds and timing, the link, and the failed runs; the preset adds
/// its tables and plot.
fn epilogue(report: &PresetReport) -> Epilogue<'_> {
    let title = format!(
        "{} ({} round(s), {:.1} s per run, wall {:.0} s)",
        report.preset, report.rounds, report.duration_s, report.runs.wall_s
    );
    let results: Vec<_> = report.runs.runs.iter().map(|m| m.result.clone()).collect();
    let mut e = Epilogue::new(&report.preset, title, &report.machine, &report.notes)
        .links(None, report.link.as_slice())
        .csv(report::results_csv(&results));
    let failures = &report.runs.failures;
    if !failures.is_empty() {
        e = e.line(format!("{} run(s) failed:", failures.len()));
        for f in failures {
            e = e.line(format!(
                "  round {} {} {} {}: {}",
                f.round, f.target, f.driver, f.case, f.error
            ));
        }
    }
    e
}

fn labels(targets: &[TargetEntry]) -> Vec<String> {
    targets.iter().map(|t| t.label.clone()).collect()
}

// ---------------------------------------------------------------- compare

/// `sluice bench compare`: sluice, nbdkit, qemu-nbd and local I/O on one
/// image, own client and fio, interleaved rounds, ratios to `baseline`.
pub fn compare(
    opts: &PresetOptions,
    cases: Option<&[String]>,
    baseline: &str,
) -> Result<PresetReport> {
    let machine = Machine::probe();
    let duration = opts.duration(1.0, 3.0);
    let mut all = sluice_bench::workload::standard_cases(duration);
    if let Some(names) = cases {
        for n in names {
            if !all.iter().any(|w| &w.label() == n) {
                bail!(
                    "unknown case {n:?}; cases are {}",
                    all.iter()
                        .map(Workload::label)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        all.retain(|w| names.contains(&w.label()));
    }
    let size = opts.size(256 << 20, 1 << 30);
    let image = Image::prepare(opts.image.as_deref(), None, "compare", size)?;
    let (targets, notes) = peer_targets(opts, true);
    if targets.is_empty() {
        bail!("no target can run here");
    }
    let mut notes = notes;
    if opts.driver != Driver::Own && peers::which("fio").is_none() {
        notes.push("fio is not installed: fio-driven runs fail (apt-get install fio)".into());
    }
    let report = run_plan(
        opts,
        Plan {
            name: "compare",
            targets: &targets,
            drivers: opts.driver.expand(),
            cases: all,
            image: &image,
            machine,
            duration,
            image_bytes: size,
            notes,
            baseline,
        },
    )?;
    epilogue(&report)
        .table(
            format!("median IOPS (ratio to {baseline})"),
            matrix::pivot_table(&report.summaries, &labels(&targets), false),
        )
        .table(
            "details (median over rounds; min-max of IOPS)",
            matrix::summary_table(&report.summaries, baseline),
        )
        .markdown_file(None)
        .finish(opts, &report)?;
    Ok(report)
}

// ---------------------------------------------------------------- pipelining

const PIPE_MODES: [(&str, PipelineMode); 3] = [
    ("off", PipelineMode::Off),
    ("fixed", PipelineMode::Fixed),
    ("flexible", PipelineMode::Flexible),
];
const PIPE_QDS: [u32; 5] = [1, 2, 4, 8, 16];
const PIPE_BS: [u32; 6] = [512, 2048, 8192, 32768, 65536, 131072];

/// "Pipelining Network Storage I/O": sequential read-only and write-only, outstanding I/O 1–16 ×
/// 512 B–128 KiB, server pipelining off vs fixed vs flexible.
pub fn pipelining(opts: &PresetOptions, direct: bool) -> Result<PresetReport> {
    let machine = Machine::probe();
    let duration = opts.duration(0.3, 1.0);
    let size = opts.size(256 << 20, 1 << 30);
    // O_DIRECT needs a real filesystem (not tmpfs): then use the temp dir.
    let tmp = std::env::temp_dir();
    let image = Image::prepare(
        opts.image.as_deref(),
        direct.then_some(tmp.as_path()),
        "pipelining",
        size,
    )?;
    let targets: Vec<TargetEntry> = PIPE_MODES
        .iter()
        .filter(|(l, _)| opts.wants(l))
        .map(|(label, mode)| TargetEntry {
            label: (*label).to_owned(),
            kind: TargetKind::Embedded(EmbeddedConfig {
                backing: Backing::File(image.path().to_path_buf()),
                size,
                pipeline: *mode,
                direct,
                spin_us: None,
                io_threads: None,
            }),
        })
        .collect();
    let mut cases = Vec::new();
    for rw in [Rw::Read, Rw::Write] {
        for bs in PIPE_BS {
            if direct && bs < 4096 {
                continue;
            }
            for qd in PIPE_QDS {
                let mut w = Workload::new(Pattern::Seq, rw, bs, qd);
                w.limit = Limit::Time(duration);
                cases.push(w);
            }
        }
    }
    let mut notes = vec![format!(
        "embedded sluice server on {} ({}), same process as the client",
        image.path().display(),
        if direct { "O_DIRECT" } else { "page cache" }
    )];
    if direct {
        notes.push("O_DIRECT: 512 B and 2 KiB left out (below the 4 KiB minimum block)".into());
    }
    let name = if direct {
        "pipelining-direct"
    } else {
        "pipelining"
    };
    let report = run_plan(
        opts,
        Plan {
            name,
            targets: &targets,
            drivers: vec!["own"],
            cases,
            image: &image,
            machine,
            duration,
            image_bytes: size,
            notes,
            baseline: "off",
        },
    )?;
    let get = |rw: &str, bs: u32, qd: u32, mode: &str| {
        let case = format!("seq{rw}-{}-qd{qd}", format_size(u64::from(bs)));
        report
            .summaries
            .iter()
            .find(|s| s.case == case && s.target == mode)
    };
    let mut t = Table::new([
        "op",
        "size",
        "QD",
        "off MiB/s",
        "fixed MiB/s",
        "flex MiB/s",
        "off us",
        "fixed us",
        "flex us",
        "flex/off",
    ]);
    for rw in ["read", "write"] {
        for bs in PIPE_BS {
            for qd in PIPE_QDS {
                let cell = |m: &str, f: &dyn Fn(&Summary) -> f64| {
                    get(rw, bs, qd, m).map_or_else(|| "-".into(), |s| compact(f(s)))
                };
                let ratio = get(rw, bs, qd, "flexible")
                    .and_then(|s| s.ratio)
                    .map_or_else(|| "-".into(), |r| format!("{r:.2}"));
                t.row([
                    rw.to_owned(),
                    format_size(u64::from(bs)),
                    qd.to_string(),
                    cell("off", &|s| s.mib_s.median),
                    cell("fixed", &|s| s.mib_s.median),
                    cell("flexible", &|s| s.mib_s.median),
                    cell("off", &|s| s.mean_us),
                    cell("fixed", &|s| s.mean_us),
                    cell("flexible", &|s| s.mean_us),
                    ratio,
                ]);
            }
        }
    }
    let axes = Axes {
        x_label: "outstanding I/O".into(),
        y_label: "MiB/s".into(),
        x_axis: XAxis::Log2,
    };
    let mut charts = Vec::new();
    for rw in ["read", "write"] {
        for bs in PIPE_BS {
            let lines = labels(&targets)
                .into_iter()
                .map(|mode| {
                    let points = PIPE_QDS
                        .iter()
                        .filter_map(|&qd| {
                            get(rw, bs, qd, &mode).map(|s| (f64::from(qd), s.mib_s.median))
                        })
                        .collect();
                    (mode, points)
                })
                .collect();
            charts.push(axes.chart(format!("{rw} {}", format_size(u64::from(bs))), lines));
        }
    }
    epilogue(&report)
        .table("throughput (median MiB/s) and mean response time (us)", t)
        .figure(Figure {
            title: format!(
                "Pipelining ({}): sequential throughput vs outstanding I/O",
                if direct { "O_DIRECT" } else { "page cache" }
            ),
            columns: 3,
            charts,
        })
        .finish(opts, &report)?;
    Ok(report)
}

// ---------------------------------------------------------------- scaling

const SCALING_CLIENTS: [u32; 5] = [1, 2, 4, 8, 16];

/// The SuperNBD paper: 1–16 clients each streaming their own region with 1 MiB
/// records (one outstanding each), read and write; aggregate throughput,
/// sluice vs nbdkit vs qemu-nbd (and local I/O).
pub fn scaling(opts: &PresetOptions, qd: u32) -> Result<PresetReport> {
    let machine = Machine::probe();
    let duration = opts.duration(0.5, 2.0);
    let size = opts.size(512 << 20, 2 << 30);
    let image = Image::prepare(opts.image.as_deref(), None, "scaling", size)?;
    let (targets, notes) = peer_targets(opts, true);
    if targets.is_empty() {
        bail!("no target can run here");
    }
    let mut cases = Vec::new();
    for rw in [Rw::Read, Rw::Write] {
        for clients in SCALING_CLIENTS {
            let mut w = Workload::new(Pattern::Seq, rw, 1 << 20, qd.max(1));
            w.workers = clients;
            w.limit = Limit::Time(duration);
            w.name = format!(
                "{}-1m-{clients}clients",
                if rw == Rw::Read { "read" } else { "write" }
            );
            cases.push(w);
        }
    }
    let report = run_plan(
        opts,
        Plan {
            name: "scaling",
            targets: &targets,
            drivers: opts.driver.expand(),
            cases,
            image: &image,
            machine,
            duration,
            image_bytes: size,
            notes,
            baseline: "nbdkit",
        },
    )?;
    let pivot = matrix::pivot_table(&report.summaries, &labels(&targets), true);
    let axes = Axes {
        x_label: "clients".into(),
        y_label: "MiB/s".into(),
        x_axis: XAxis::Log2,
    };
    let mut charts = Vec::new();
    for driver in opts.driver.expand() {
        for rw in ["read", "write"] {
            let lines = labels(&targets)
                .into_iter()
                .map(|t| {
                    let points = SCALING_CLIENTS
                        .iter()
                        .filter_map(|&c| {
                            let case = format!("{rw}-1m-{c}clients");
                            report
                                .summaries
                                .iter()
                                .find(|s| s.case == case && s.target == t && s.driver == driver)
                                .map(|s| (f64::from(c), s.mib_s.median))
                        })
                        .collect();
                    (t, points)
                })
                .collect();
            charts.push(axes.chart(format!("{rw}, 1 MiB records ({driver} client)"), lines));
        }
    }
    epilogue(&report)
        .table("aggregate MiB/s, median (ratio to nbdkit)", pivot)
        .figure(Figure {
            title: "Scaling: aggregate throughput vs clients".into(),
            columns: 2,
            charts,
        })
        .finish(opts, &report)?;
    Ok(report)
}

// ---------------------------------------------------------------- san

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
