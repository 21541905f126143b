//! The papers' experiments as named presets, and the side-by-side
//! comparison they build on. Each writes JSON (every run plus the
//! medians), prints tables, and draws a plot.

use std::time::Duration;

use anyhow::{bail, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::matrix::{self, Driver, Matrix, MatrixRuns, Summary, TargetEntry, TargetKind};
use sluice_bench::peers::{self, ServerHost};
use sluice_bench::report;
use sluice_bench::target::{Backing, EmbeddedConfig};
use sluice_bench::workload::{Limit, Pattern, Rw, Workload};
use sluice_model::plot::{Axes, Figure, XAxis};
use sluice_model::text::{compact, Table};
use sluice_server::PipelineMode;
use sluice_types::format_size;

use crate::epilogue::Epilogue;
use crate::link::LinkMeasurement;
use crate::setup::{command_line, open_link, Image, PresetOptions};

mod san;

pub use san::{san, SanMergeReport, SanMergeRow};

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
