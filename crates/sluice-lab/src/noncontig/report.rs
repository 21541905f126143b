//! What the non-contiguous I/O experiment prints and draws: its tables,
//! its figure and the report around them.

use std::time::Duration;

use anyhow::Result;
use sluice_bench::stats::ratio;
use sluice_model::plot::{Chart, Figure, Legend, LineStyle, Series, XAxis};
use sluice_model::text::{compact, Table};

use super::{LinkKind, NcPoint, NoncontigReport, Op, TargetCheck, Volume, HOLE, ITERATIVE_QD1};
use crate::epilogue::Epilogue;
use crate::link::LinkMeasurement;
use crate::setup::PresetOptions;

fn pct(e: Option<f64>) -> String {
    e.map_or_else(|| "-".into(), |e| format!("{:+.0}%", e * 100.0))
}

fn times(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.1}x"))
}

fn mb(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), compact)
}

/// The contiguous part: one row per link, op and size.
fn contiguous_table(points: &[NcPoint]) -> Table {
    let mut t = Table::new([
        "link",
        "op",
        "size",
        "contiguous MB/s",
        "sgl MB/s",
        "strided MB/s",
        "sgl/contig",
        "strided/contig",
        "model MB/s",
        "err contig",
        "err sgl",
        "err strided",
    ]);
    for p in points
        .iter()
        .filter(|p| p.part == "contiguous" && p.ddt == "contiguous")
    {
        let find = |ddt: &str| sibling(points, p, ddt);
        let (s, d) = (find("sgl"), find("strided"));
        t.row([
            p.link.name().into(),
            p.op.clone(),
            sluice_types::format_size(p.block_bytes),
            compact(p.mb_s),
            mb(s.map(|q| q.mb_s)),
            mb(d.map(|q| q.mb_s)),
            times(s.and_then(|q| ratio(q.mb_s, p.mb_s))),
            times(d.and_then(|q| ratio(q.mb_s, p.mb_s))),
            mb(p.model_mb_s),
            pct(p.model_error),
            pct(s.and_then(|q| q.model_error)),
            pct(d.and_then(|q| q.model_error)),
        ]);
    }
    t
}

/// The point measured like `p` (same part, link, volume, op and block
/// size) but with `ddt`.
pub(super) fn sibling<'a>(points: &'a [NcPoint], p: &NcPoint, ddt: &str) -> Option<&'a NcPoint> {
    points.iter().find(|q| {
        q.part == p.part
            && q.link == p.link
            && q.volume == p.volume
            && q.op == p.op
            && q.block_bytes == p.block_bytes
            && q.ddt == ddt
    })
}

/// The view: one row per link, volume, op and block size.
fn view_table(points: &[NcPoint], checks: &[TargetCheck]) -> Table {
    let mut t = Table::new([
        "link",
        "volume",
        "op",
        "x",
        "n",
        "iter qd1 MB/s",
        "iter pipelined MB/s",
        "sgl MB/s",
        "strided MB/s",
        "sgl/strided ÷ qd1",
        "÷ pipelined",
        "model qd1/sgl/strided MB/s",
        "err qd1/sgl/strided",
        "targets (10x qd1, 15%)",
    ]);
    for p in points
        .iter()
        .filter(|p| p.part == "view" && p.ddt == "iterative")
    {
        let find = |ddt: &str| sibling(points, p, ddt);
        let (q, s, d) = (find(ITERATIVE_QD1), find("sgl"), find("strided"));
        let over = |a: Option<&NcPoint>, b: Option<&NcPoint>| {
            times(a.zip(b).and_then(|(a, b)| ratio(a.mb_s, b.mb_s)))
        };
        let check = checks.iter().find(|c| {
            c.link == p.link
                && c.volume == p.volume
                && c.op == p.op
                && c.block_bytes == p.block_bytes
        });
        t.row([
            p.link.name().into(),
            p.volume.name().into(),
            p.op.clone(),
            sluice_types::format_size(p.block_bytes),
            p.segments.to_string(),
            mb(q.map(|q| q.mb_s)),
            compact(p.mb_s),
            mb(s.map(|q| q.mb_s)),
            mb(d.map(|q| q.mb_s)),
            format!("{} / {}", over(s, q), over(d, q)),
            format!("{} / {}", over(s, Some(p)), over(d, Some(p))),
            format!(
                "{} / {} / {}",
                mb(q.and_then(|q| q.model_mb_s)),
                mb(s.and_then(|q| q.model_mb_s)),
                mb(d.and_then(|q| q.model_mb_s))
            ),
            format!(
                "{} / {} / {}",
                pct(q.and_then(|q| q.model_error)),
                pct(s.and_then(|q| q.model_error)),
                pct(d.and_then(|q| q.model_error))
            ),
            match check {
                Some(c) if c.met => "met".into(),
                Some(c) => format!("missed: {}", c.why),
                None => "-".into(),
            },
        ]);
    }
    t
}

/// Measured (solid) and model (dashed) lines per DDT, MB/s against x.
fn chart(points: &[NcPoint], title: String, keep: impl Fn(&NcPoint) -> bool) -> Chart {
    let mut series = Vec::new();
    for (color, ddt) in ["iterative", "sgl", "strided", ITERATIVE_QD1]
        .into_iter()
        .enumerate()
    {
        // The contiguous part's one-request row is drawn as iterative's.
        let mine: Vec<&NcPoint> = points
            .iter()
            .filter(|p| keep(p) && (p.ddt == ddt || (ddt == "iterative" && p.ddt == "contiguous")))
            .collect();
        let label = mine.first().map_or(ddt, |p| p.ddt.as_str()).to_owned();
        series.push(Series {
            points: mine
                .iter()
                .map(|p| (p.block_bytes as f64, p.mb_s))
                .collect(),
            label: label.clone(),
            style: LineStyle::Solid,
            color,
        });
        let model: Vec<(f64, f64)> = mine
            .iter()
            .filter_map(|p| Some((p.block_bytes as f64, p.model_mb_s?)))
            .collect();
        if !model.is_empty() {
            series.push(Series {
                label: format!("{label} (model)"),
                points: model,
                style: LineStyle::Dashed,
                color,
            });
        }
    }
    Chart {
        title,
        x_label: "block size x, bytes".into(),
        y_label: "MB/s".into(),
        x_axis: XAxis::Log2,
        y_log: true,
        series,
        legend: Legend::LowerRight,
    }
}

fn figure(report: &NoncontigReport) -> Figure {
    let mut kinds: Vec<LinkKind> = report.points.iter().map(|p| p.link).collect();
    kinds.dedup();
    let mut volumes: Vec<Volume> = report.points.iter().map(|p| p.volume).collect();
    volumes.sort_by_key(|v| *v as u8);
    volumes.dedup();
    let mut charts = Vec::new();
    for &k in &kinds {
        for op in [Op::Write, Op::Read] {
            for &v in &volumes {
                charts.push(chart(
                    &report.points,
                    format!("{} view, {} ({} link)", v.name(), op.name(), k.name()),
                    |p| p.part == "view" && p.link == k && p.volume == v && p.op == op.name(),
                ));
            }
            charts.push(chart(
                &report.points,
                format!("contiguous, {} ({} link)", op.name(), k.name()),
                |p| p.part == "contiguous" && p.link == k && p.op == op.name(),
            ));
        }
    }
    Figure {
        title: format!(
            "Non-contiguous I/O: {} in blocks with {HOLE}-byte holes, measured (solid) and T = S/BW + N (dashed)",
            sluice_types::format_size(report.total_bytes)
        ),
        columns: volumes.len() + 1,
        charts,
    }
}

pub(super) fn print_report(
    opts: &PresetOptions,
    report: &NoncontigReport,
    wall: Duration,
) -> Result<()> {
    let title = format!(
        "noncontig ({} per view transfer, median of {} round(s), wall {:.0} s)",
        sluice_types::format_size(report.total_bytes),
        report.rounds,
        wall.as_secs_f64()
    );
    let measured: Vec<LinkMeasurement> = report.links.iter().map(|(_, m)| *m).collect();
    let steal = report
        .points
        .iter()
        .map(|p| p.steal_pct_max)
        .fold(0.0, f64::max);
    let load = report
        .points
        .iter()
        .map(|p| p.load1_max)
        .fold(0.0, f64::max);
    let mut epilogue = Epilogue::new("noncontig", title, &report.machine, &report.notes)
        .links(None, &measured)
        .line(format!(
            "load: highest 1-minute average {load:.2}, highest steal {steal:.1}%"
        ))
        .failures(&report.failures)
        .table(
            "contiguous access, one segment (all DDTs should be equal):",
            contiguous_table(&report.points),
        )
        .table(
            format!("the view (blocks of x bytes, {HOLE}-byte holes):"),
            view_table(&report.points, &report.checks),
        );
    let missed = report.checks.iter().filter(|c| !c.met).count();
    if !report.checks.is_empty() {
        epilogue = epilogue.after(format!(
            "targets on the rate-limited links (x from 8 B to 4 KiB): {} of {} points met",
            report.checks.len() - missed,
            report.checks.len()
        ));
    }
    epilogue.figure(figure(report)).finish(opts, report)
}
