//! The charts of the model's results: MVA curves between their bounds,
//! the RAID response-time figures, non-contiguous I/O throughput and
//! the model-against-measurement validation panels. They only build
//! [`Chart`]s; the rest of the module draws them.

use super::{Chart, Legend, LineStyle, Series, XAxis};
use crate::error::Result;
use crate::mva::{exact_mva_curve, Solution};
use crate::network::ClosedNetwork;
use crate::noncontig::{Ddt, SizePoint};
use crate::raid::{RaidCurve, Sweep, SweepKind};
use crate::text::{rate_scale, time_scale};
use crate::validation::Validation;

/// Two panels for N = 1..=`n`: the exact MVA throughput X(N) between its
/// balanced job bounds and under the asymptotic bound min(N/(D+Z), 1/Dmax),
/// and the exact MVA response time R(N) between its balanced job bounds.
pub fn mva_charts(net: &ClosedNetwork, n: u32) -> Result<Vec<Chart>> {
    let curve = exact_mva_curve(net, n)?;
    let mut x_lo = Vec::new();
    let mut x_hi = Vec::new();
    let mut x_asym = Vec::new();
    let mut r_lo = Vec::new();
    let mut r_hi = Vec::new();
    for k in 1..=n {
        let b = crate::bounds::bounds(net, k)?;
        let k = f64::from(k);
        x_lo.push((k, b.balanced_job.throughput[0]));
        x_hi.push((k, b.balanced_job.throughput[1]));
        x_asym.push((k, b.asymptotic.throughput[1]));
        r_lo.push((k, b.balanced_job.response_time[0]));
        r_hi.push((k, b.balanced_job.response_time[1]));
    }
    let exact = |label: &str, value: fn(&Solution) -> f64| Series {
        label: label.into(),
        points: curve
            .iter()
            .map(|s| (f64::from(s.customers), value(s)))
            .collect(),
        style: LineStyle::Solid,
        color: 0,
    };
    let bound = |label: &str, points: Vec<(f64, f64)>, color: usize| Series {
        label: label.into(),
        points,
        style: LineStyle::Dashed,
        color,
    };
    Ok(vec![
        Chart {
            title: "throughput vs customers".into(),
            x_label: "customers N".into(),
            y_label: "throughput X(N), requests/s".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            legend: Legend::LowerRight,
            series: vec![
                exact("exact MVA", |s| s.throughput),
                bound("balanced job bound, lower", x_lo, 1),
                bound("balanced job bound, upper", x_hi, 2),
                bound("asymptotic bound", x_asym, 3),
            ],
        },
        Chart {
            title: "response time vs customers".into(),
            x_label: "customers N".into(),
            y_label: "response time R(N), s".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            legend: Legend::UpperLeft,
            series: vec![
                exact("exact MVA", |s| s.response_time),
                bound("balanced job bound, lower", r_lo, 1),
                bound("balanced job bound, upper", r_hi, 2),
            ],
        },
    ])
}

/// The figure-3 style chart: exact MVA R(N) with balanced job and
/// asymptotic bounds.
pub fn raid_chart(curve: &RaidCurve, title: &str) -> Chart {
    let pts = |f: &dyn Fn(&crate::raid::RaidPoint) -> f64| -> Vec<(f64, f64)> {
        curve
            .points
            .iter()
            .map(|p| (f64::from(p.customers), f(p)))
            .collect()
    };
    Chart {
        title: title.to_owned(),
        x_label: "concurrent jobs N".into(),
        y_label: "response time R(N), s".into(),
        x_axis: XAxis::Linear,
        y_log: false,
        series: vec![
            Series {
                label: "exact MVA".into(),
                points: pts(&|p| p.response_time),
                style: LineStyle::Solid,
                color: 0,
            },
            Series {
                label: "balanced job bound, lower (paper eq. 1)".into(),
                points: pts(&|p| p.bounds.balanced_job.response_time[0]),
                style: LineStyle::Dashed,
                color: 1,
            },
            Series {
                label: "balanced job bound, upper".into(),
                points: pts(&|p| p.bounds.balanced_job.response_time[1]),
                style: LineStyle::Dashed,
                color: 2,
            },
            Series {
                label: "asymptotic bound, lower".into(),
                points: pts(&|p| p.bounds.asymptotic.response_time[0]),
                style: LineStyle::Dotted,
                color: 3,
            },
        ],
        legend: Legend::UpperLeft,
    }
}

/// One chart for a sweep: per value, exact R(N) (solid) and the balanced
/// job lower bound (dashed, same colour).
pub fn sweep_chart(sweep: &Sweep) -> Chart {
    if sweep.kind == SweepKind::Concurrency {
        if let Some(s) = sweep.series.first() {
            return raid_chart(&s.curve, "Figure 3: write response time vs concurrent jobs");
        }
    }
    let mut series = Vec::new();
    for (i, s) in sweep.series.iter().enumerate() {
        let v = s
            .value
            .map(|v| format!("{} {v}", sweep.kind.short()))
            .unwrap_or_default();
        let pts = |f: &dyn Fn(&crate::raid::RaidPoint) -> f64| -> Vec<(f64, f64)> {
            s.curve
                .points
                .iter()
                .map(|p| (f64::from(p.customers), f(p)))
                .collect()
        };
        series.push(Series {
            label: format!("{v}: exact MVA"),
            points: pts(&|p| p.response_time),
            style: LineStyle::Solid,
            color: i,
        });
        series.push(Series {
            label: format!("{v}: BJB lower"),
            points: pts(&|p| p.bounds.balanced_job.response_time[0]),
            style: LineStyle::Dashed,
            color: i,
        });
    }
    Chart {
        title: format!(
            "Figure {}: write response time vs concurrent jobs, by {}",
            sweep.figure, sweep.label
        ),
        x_label: "concurrent jobs N".into(),
        y_label: "response time R(N), s".into(),
        x_axis: XAxis::Linear,
        y_log: false,
        series,
        legend: Legend::UpperLeft,
    }
}

/// The title of [`noncontig_chart`] for a transfer of `file_bytes`.
pub fn noncontig_title(read: bool, file_bytes: u64, rtt_us: f64, bandwidth_mbps: f64) -> String {
    let size = if file_bytes & ((1 << 20) - 1) == 0 {
        format!("{} MiB", file_bytes >> 20)
    } else {
        format!("{file_bytes} bytes")
    };
    format!(
        "{} model: {size}, RTT {rtt_us} us, {bandwidth_mbps} Mb/s",
        if read { "Read" } else { "Write" },
    )
}

/// Figure 8 of "Non-Contiguous I/O Support for Object-Based Storage": throughput against segment size for the three
/// descriptions (log-log).
pub fn noncontig_chart(points: &[SizePoint], title: &str) -> Chart {
    let series = Ddt::ALL
        .iter()
        .enumerate()
        .map(|(i, d)| Series {
            label: d.name().into(),
            points: points
                .iter()
                .map(|p| (p.segment_bytes as f64, p.transfers[i].throughput / 1e6))
                .collect(),
            style: LineStyle::Solid,
            color: i,
        })
        .collect();
    Chart {
        title: title.to_owned(),
        x_label: "segment size, bytes".into(),
        y_label: "throughput, MB/s".into(),
        x_axis: XAxis::Log10,
        y_log: true,
        series,
        legend: Legend::LowerRight,
    }
}

/// Size for [`validation_charts`] drawn side by side.
pub const VALIDATION_SIZE: (u32, u32) = (1400, 600);

/// Measured response time and throughput against the exact MVA prediction
/// and the bounds, by concurrency N: two charts, R(N) and X(N), to draw
/// side by side ([`render_svg_panels`](super::render_svg_panels)). Bounds are left out when the
/// network has load-dependent stations.
pub fn validation_charts(v: &Validation, title: &str) -> [Chart; 2] {
    let n = |p: &crate::validation::ValidationPoint| f64::from(p.customers);
    let r_max = v
        .points
        .iter()
        .map(|p| p.measured_response_time.max(p.predicted_response_time))
        .fold(0.0, f64::max);
    let x_max = v
        .points
        .iter()
        .map(|p| p.measured_throughput.max(p.predicted_throughput))
        .fold(0.0, f64::max);
    let (rd, ru) = time_scale(r_max);
    let (xd, prefix) = rate_scale(x_max);
    let xu = if prefix.is_empty() {
        "requests/s".to_owned()
    } else {
        format!("{prefix} requests/s")
    };
    let line = |label: &str,
                f: &dyn Fn(&crate::validation::ValidationPoint) -> Option<f64>,
                style,
                color| Series {
        label: label.to_owned(),
        points: v
            .points
            .iter()
            .filter_map(|p| f(p).map(|y| (n(p), y)))
            .collect(),
        style,
        color,
    };
    let rs = |f: fn(&crate::validation::ValidationPoint) -> Option<f64>| {
        move |p: &crate::validation::ValidationPoint| f(p).map(|y| y / rd)
    };
    let xs = |f: fn(&crate::validation::ValidationPoint) -> Option<f64>| {
        move |p: &crate::validation::ValidationPoint| f(p).map(|y| y / xd)
    };
    let mut r_series = vec![
        line(
            "measured (sluice bench)",
            &rs(|p| Some(p.measured_response_time)),
            LineStyle::Markers,
            1,
        ),
        line(
            "exact MVA",
            &rs(|p| Some(p.predicted_response_time)),
            LineStyle::Solid,
            0,
        ),
    ];
    let mut x_series = vec![
        line(
            "measured (sluice bench)",
            &xs(|p| Some(p.measured_throughput)),
            LineStyle::Markers,
            1,
        ),
        line(
            "exact MVA",
            &xs(|p| Some(p.predicted_throughput)),
            LineStyle::Solid,
            0,
        ),
    ];
    if v.points.iter().all(|p| p.bounds.is_some()) {
        r_series.extend([
            line(
                "balanced job bound, lower",
                &rs(|p| p.bounds.map(|b| b.balanced_job.response_time[0])),
                LineStyle::Dashed,
                2,
            ),
            line(
                "balanced job bound, upper",
                &rs(|p| p.bounds.map(|b| b.balanced_job.response_time[1])),
                LineStyle::Dashed,
                3,
            ),
            line(
                "asymptotic bound, lower",
                &rs(|p| p.bounds.map(|b| b.asymptotic.response_time[0])),
                LineStyle::Dotted,
                4,
            ),
        ]);
        x_series.extend([
            line(
                "balanced job bound, upper",
                &xs(|p| p.bounds.map(|b| b.balanced_job.throughput[1])),
                LineStyle::Dashed,
                2,
            ),
            line(
                "balanced job bound, lower",
                &xs(|p| p.bounds.map(|b| b.balanced_job.throughput[0])),
                LineStyle::Dashed,
                3,
            ),
            line(
                "asymptotic bound, upper",
                &xs(|p| p.bounds.map(|b| b.asymptotic.throughput[1])),
                LineStyle::Dotted,
                4,
            ),
        ]);
    }
    [
        Chart {
            title: format!("{title}: response time"),
            x_label: "outstanding requests N".into(),
            y_label: format!("response time R(N), {ru}"),
            x_axis: XAxis::Linear,
            y_log: false,
            series: r_series,
            legend: Legend::UpperLeft,
        },
        Chart {
            title: format!("{title}: throughput"),
            x_label: "outstanding requests N".into(),
            y_label: format!("throughput X(N), {xu}"),
            x_axis: XAxis::Linear,
            y_log: false,
            series: x_series,
            legend: Legend::LowerRight,
        },
    ]
}
