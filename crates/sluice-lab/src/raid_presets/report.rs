//! What the RAID presets print and draw: the tables of their rows, the
//! jobs model and the charts.

use std::time::Duration;

use anyhow::Result;
use sluice_model::plot::{Axes, Chart, Figure, Legend, LineStyle, Series, XAxis};
use sluice_model::text::{compact, scaled, Table};

use super::cases::SMALL_WRITES_IN_FLIGHT;
use super::{JobsModel, JobsPoint, RaidReport, RaidRow, JOB_BYTES};
use crate::epilogue::Epilogue;
use crate::link::LinkRate;
use crate::setup::PresetOptions;

pub(super) fn print_report(
    opts: &PresetOptions,
    report: &RaidReport,
    wall: Duration,
) -> Result<()> {
    let title = format!(
        "raid ({:.1} s per run, wall {:.0} s)",
        report.duration_s,
        wall.as_secs_f64()
    );
    let mut t = Table::new([
        "case",
        "configuration",
        "MiB/s",
        "IOPS",
        "mean us",
        "ratio",
        "against",
        "member I/Os per write",
    ]);
    for r in &report.rows {
        t.row([
            r.case.clone(),
            r.config.clone(),
            compact(r.mib_s),
            scaled(r.iops),
            compact(r.mean_us),
            r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.2}")),
            r.ratio_to.clone(),
            r.member_ios_per_write
                .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
        ]);
    }
    let mut epilogue = Epilogue::new("raid", title, &report.machine, &report.notes)
        .links(Some("member"), &report.links)
        .table("", t);
    for r in &report.rows {
        if let Some(model) = r.model_iops {
            let line = format!(
                "{}: {} IOPS measured, {} IOPS predicted by the calibrated model (exact MVA, {} in flight): {:+.0} %\n",
                r.case,
                scaled(r.iops),
                scaled(model),
                SMALL_WRITES_IN_FLIGHT,
                (r.iops - model) / model * 100.0
            );
            epilogue = epilogue.text(line);
        }
    }
    if let Some(j) = &report.jobs {
        epilogue = epilogue.table(
            format!(
                "RAID 5 over 3, {} KiB random writes: R(N) measured vs calibrated model (ms)",
                JOB_BYTES >> 10
            ),
            jobs_table(j),
        );
        let mut d = Table::new(["station", "demand ms", "utilization"]);
        for s in j.demands.iter().chain(&j.member_demands) {
            d.row([
                s.name.clone(),
                format!("{:.3}", s.demand * 1e3),
                format!("{:.2}", s.utilization),
            ]);
        }
        let caption = format!(
            "calibrated demands ({} jobs in {:.1} s; R below N/X by up to {:.1} %: the runs' ramp-up; \
             inside the bounds allowing {:.2} % below the lower edge: a run's resolution, a bucket and a job over its length)",
            j.completions,
            j.interval_s,
            j.little_gap * 100.0,
            j.bound_slack * 100.0
        );
        epilogue = epilogue.table(caption, d);
    }
    let charts = charts(report);
    if !charts.is_empty() {
        epilogue = epilogue.figure(Figure {
            title: format!(
                "Networked RAID, members behind {} links",
                report
                    .links
                    .first()
                    .and_then(|l| l.rate_bits)
                    .map_or_else(|| "unshaped".into(), |r| LinkRate(r).to_string())
            ),
            columns: 2,
            charts,
        });
    }
    epilogue.finish(opts, report)
}

fn jobs_table(j: &JobsModel) -> Table {
    let mut t = Table::new([
        "N",
        "X jobs/s",
        "R ms",
        "N/X ms",
        "MVA R ms",
        "error",
        "fork-join R ms",
        "error",
        "BJB R ms",
        "inside",
        "paper eqs R ms",
    ]);
    for p in &j.points {
        t.row([
            p.jobs.to_string(),
            compact(p.x),
            compact(p.r * 1e3),
            compact(p.little_r * 1e3),
            compact(p.mva_r * 1e3),
            format!("{:+.0} %", p.mva_error * 100.0),
            compact(p.fork_join_r * 1e3),
            format!("{:+.0} %", p.fork_join_error * 100.0),
            format!(
                "{}-{}",
                compact(p.bjb_r[0] * 1e3),
                compact(p.bjb_r[1] * 1e3)
            ),
            if p.inside_bounds { "yes" } else { "no" }.into(),
            p.paper_r.map_or_else(|| "-".into(), |r| compact(r * 1e3)),
        ]);
    }
    t
}

fn series(label: &str, points: Vec<(f64, f64)>, style: LineStyle, color: usize) -> Series {
    Series {
        label: label.into(),
        points,
        style,
        color,
    }
}

fn charts(report: &RaidReport) -> Vec<Chart> {
    let mut out = Vec::new();
    if let Some(j) = &report.jobs {
        let pts = |f: &dyn Fn(&JobsPoint) -> f64| -> Vec<(f64, f64)> {
            j.points.iter().map(|p| (f64::from(p.jobs), f(p))).collect()
        };
        let mut r = vec![
            series(
                "measured, N/X (steady state)",
                pts(&|p| p.little_r * 1e3),
                LineStyle::Markers,
                0,
            ),
            series(
                "exact MVA, stations in series",
                pts(&|p| p.mva_r * 1e3),
                LineStyle::Solid,
                1,
            ),
            series(
                "fork-join MVA (links beside CPUs)",
                pts(&|p| p.fork_join_r * 1e3),
                LineStyle::Solid,
                3,
            ),
            series(
                "balanced job bound, lower (slowest branch)",
                pts(&|p| p.bjb_r[0] * 1e3),
                LineStyle::Dashed,
                2,
            ),
            series(
                "balanced job bound, upper (in series)",
                pts(&|p| p.bjb_r[1] * 1e3),
                LineStyle::Dashed,
                2,
            ),
        ];
        if j.points.iter().all(|p| p.paper_r.is_some()) {
            r.push(series(
                "paper eqs (2)-(10)",
                pts(&|p| p.paper_r.unwrap_or(0.0) * 1e3),
                LineStyle::Dotted,
                3,
            ));
        }
        out.push(Chart {
            title: format!("RAID 5, {} KiB writes: R(N)", JOB_BYTES >> 10),
            x_label: "concurrent jobs N".into(),
            y_label: "R(N) ms".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            series: r,
            legend: Legend::UpperLeft,
        });
        out.push(Chart {
            title: "X(N)".into(),
            x_label: "concurrent jobs N".into(),
            y_label: "X(N) jobs/s".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            series: vec![
                series("measured", pts(&|p| p.x), LineStyle::Markers, 0),
                series(
                    "exact MVA, stations in series",
                    pts(&|p| p.mva_x),
                    LineStyle::Solid,
                    1,
                ),
            ],
            legend: Legend::LowerRight,
        });
    }
    let r0: Vec<&RaidRow> = report.rows.iter().filter(|r| r.case == "raid0").collect();
    if !r0.is_empty() {
        let axes = Axes {
            x_label: "members".into(),
            y_label: "MiB/s".into(),
            x_axis: XAxis::Linear,
        };
        let one = r0.iter().find(|r| r.members == 1).map(|r| r.mib_s);
        let mut lines = vec![(
            "RAID 0, 1 MiB sequential reads".to_owned(),
            r0.iter().map(|r| (f64::from(r.members), r.mib_s)).collect(),
        )];
        if let Some(one) = one {
            lines.push((
                "members x one member".into(),
                r0.iter()
                    .map(|r| (f64::from(r.members), one * f64::from(r.members)))
                    .collect(),
            ));
        }
        out.push(axes.chart("RAID 0 read throughput vs members", lines));
    }
    // The results the issue sets a ratio target for, beside the target.
    let targets = [
        ("full-stripe", "raid5 over 3", 1.8),
        ("degraded", "raid5, member 1 cut off", 0.5),
        ("rebuild", "", 0.8),
    ];
    let mut measured = Vec::new();
    let mut wanted = Vec::new();
    for (k, (case, config, target)) in targets.iter().enumerate() {
        let found = report
            .rows
            .iter()
            .find(|r| r.case == *case && (config.is_empty() || r.config == *config));
        if let Some(ratio) = found.and_then(|r| r.ratio) {
            measured.push((k as f64 + 1.0, ratio));
            wanted.push((k as f64 + 1.0, *target));
        }
    }
    if !measured.is_empty() {
        out.push(Chart {
            title: "ratio to the reference, and its target".into(),
            x_label: "1 full-stripe, 2 degraded, 3 rebuild".into(),
            y_label: "ratio".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            series: vec![
                series("measured", measured, LineStyle::Markers, 0),
                series("target", wanted, LineStyle::Markers, 1),
            ],
            legend: Legend::UpperLeft,
        });
    }
    out
}
