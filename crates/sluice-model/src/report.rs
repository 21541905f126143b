//! What `sluice model` prints: the JSON objects tools read (`--json`)
//! and the text tables people read, one pair per subcommand.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bounds::{bounds, PerfBounds};
use crate::calibration::{CalibratedDemand, ServerCalibration};
use crate::error::Result;
use crate::multiclass::MulticlassSolution;
use crate::mva::{approximate_mva, exact_mva, ApproxOptions, Approximation, Solution};
use crate::network::{ClosedNetwork, StationKind};
use crate::noncontig::{NoncontigParams, SizePoint};
use crate::raid::{RaidCurve, Sweep};
use crate::text::{precise as num, Table};
use crate::validation::{MeasuredPoint, Validation, ValidationPoint};

/// The two kinds of bounds, each with `throughput` and `response_time` as
/// `[lower, upper]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BoundsReport {
    /// Asymptotic bounds.
    pub asymptotic: PerfBounds,
    /// Balanced job bounds (variant with think time).
    pub balanced_job: PerfBounds,
}

/// The solution of a single-class network as one flat object. Per-station
/// arrays follow the network's station order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MvaReport {
    /// `exact`, `schweitzer` or `bard`.
    pub method: String,
    /// Customers N.
    pub customers: u32,
    /// Think time Z, seconds.
    pub think_time: f64,
    /// Throughput X(N), jobs per second.
    pub throughput: f64,
    /// Response time R(N), seconds (think time excluded).
    pub response_time: f64,
    /// Station names.
    pub stations: Vec<String>,
    /// Mean queue length per station.
    pub queue_lengths: Vec<f64>,
    /// Utilization per station.
    pub utilizations: Vec<f64>,
    /// Residence time per station, seconds.
    pub residence_times: Vec<f64>,
    /// Bounds at the same N.
    pub bounds: BoundsReport,
}

/// Solves `net` with `customers` customers (exactly, or with `approx`) and
/// adds the bounds.
pub fn mva_report(
    net: &ClosedNetwork,
    customers: u32,
    approx: Option<Approximation>,
) -> Result<MvaReport> {
    let (method, sol) = match approx {
        None => ("exact", exact_mva(net, customers)?),
        Some(a) => (
            a.name(),
            approximate_mva(net, customers, a, ApproxOptions::default())?,
        ),
    };
    let b = bounds(net, customers)?;
    Ok(MvaReport {
        method: method.to_owned(),
        customers,
        think_time: net.think_time(),
        throughput: sol.throughput,
        response_time: sol.response_time,
        stations: sol.stations.iter().map(|s| s.name.clone()).collect(),
        queue_lengths: sol.queue_lengths(),
        utilizations: sol.utilizations(),
        residence_times: sol.residence_times(),
        bounds: BoundsReport {
            asymptotic: b.asymptotic,
            balanced_job: b.balanced_job,
        },
    })
}

/// The `sluice model noncontig --json` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoncontigReport<'a> {
    /// The model's parameters.
    pub params: NoncontigParams,
    /// Bytes transferred in all.
    pub file_bytes: u64,
    /// One point per segment size.
    pub points: &'a [SizePoint],
}

/// The `sluice model calibrate --json` object (from server metrics): the
/// calibration and, when asked, its network solved at one N.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerCalibrationReport<'a> {
    /// Demands, stations and the network.
    #[serde(flatten)]
    pub calibration: &'a ServerCalibration,
    /// Exact MVA at the asked N.
    pub mva: Option<Solution>,
}

/// The `sluice model calibrate --file --json` object (from a counters
/// file).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CountersReport {
    /// Measured throughput, jobs per second.
    pub throughput: f64,
    /// Per-station utilization and demand.
    pub demands: Vec<CalibratedDemand>,
    /// The network built from the demands.
    pub network: ClosedNetwork,
    /// Exact MVA at the asked N.
    pub mva: Option<Solution>,
}

/// The `sluice model validate --json` object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidationReport<'a> {
    /// Predictions, errors and the networks used.
    #[serde(flatten)]
    pub validation: &'a Validation,
    /// The measurements compared.
    pub measured: &'a [MeasuredPoint],
}

fn bound_row(name: &str, b: &PerfBounds) -> Vec<String> {
    vec![
        name.to_owned(),
        num(b.throughput[0]),
        num(b.throughput[1]),
        num(b.response_time[0]),
        num(b.response_time[1]),
    ]
}

/// The `sluice model mva` table of `report`, solved on `net`.
pub fn mva_text(report: &MvaReport, net: &ClosedNetwork) -> String {
    let rows = (0..report.stations.len()).map(|i| {
        vec![
            report.stations[i].clone(),
            num(net.stations()[i].demand),
            num(report.utilizations[i]),
            num(report.queue_lengths[i]),
            num(report.residence_times[i]),
        ]
    });
    let b = &report.bounds;
    format!(
        "{method} MVA, N = {n}, Z = {z} s\n\
         throughput X = {x} jobs/s, response time R = {r} s\n\n{stations}\n{bounds}",
        method = report.method,
        n = report.customers,
        z = report.think_time,
        x = num(report.throughput),
        r = num(report.response_time),
        stations =
            Table::underlined(["station", "demand s", "utilization", "queue", "residence s"])
                .with_rows(rows)
                .render(),
        bounds = Table::underlined(["bounds", "X lower", "X upper", "R lower", "R upper"])
            .with_rows([
                bound_row("asymptotic", &b.asymptotic),
                bound_row("balanced job", &b.balanced_job),
            ])
            .render(),
    )
}

/// The `sluice model multiclass` tables: classes, then stations.
pub fn multiclass_text(sol: &MulticlassSolution) -> String {
    let classes = sol.classes.iter().map(|c| {
        vec![
            c.name.clone(),
            c.population.to_string(),
            num(c.throughput),
            num(c.response_time),
        ]
    });
    let stations = sol
        .stations
        .iter()
        .map(|s| vec![s.name.clone(), num(s.utilization), num(s.queue_length)]);
    format!(
        "{}\n{}",
        Table::underlined(["class", "N", "X jobs/s", "R s"])
            .with_rows(classes)
            .render(),
        Table::underlined(["station", "utilization", "queue"])
            .with_rows(stations)
            .render()
    )
}

/// The `sluice model raid` report: parameters, demands, then R(N) with
/// its bounds.
pub fn raid_text(c: &RaidCurve) -> String {
    let p = &c.params;
    let d = &c.demands;
    let mut s = format!(
        "networked RAID 5, {:?}: job {} B, stripe unit {} B x {} (storage servers {}), \
         Ethernet {} Mb/s, cache hit {} / {}, Z = {} s\n\
         S_mR5 = {} B, IP_num = {}\n\n",
        p.op,
        p.job_bytes,
        p.stripe_unit,
        p.stripe_width,
        p.storage_servers,
        p.ethernet_rate * 8.0 / 1e6,
        p.central_cache_hit,
        p.storage_cache_hit,
        p.think_time,
        d.bytes_central,
        d.ip_packets,
    );
    // The central server's stations and the network are one each; every
    // storage server has its own CPU, NIC and disk, so those rows stand
    // for one station per member, each with the demand shown.
    let members = p.storage_servers.to_string();
    let demands = d.named().into_iter().map(|(name, sym, v)| {
        let per_member = matches!(name, "storage-cpu" | "storage-nic" | "disk");
        vec![
            name.to_owned(),
            sym.to_owned(),
            if per_member {
                members.clone()
            } else {
                "1".into()
            },
            num(v),
        ]
    });
    s.push_str(
        &Table::underlined(["station", "symbol (eq.)", "stations", "demand s (each)"])
            .with_rows(demands)
            .render(),
    );
    s.push_str(
        "D_Cm, D_Nm: the central server's CPU and NIC; D_Net: the network; \
         D_Csn, D_Nsn, D_d: one storage server's CPU, NIC and disk (counted once \
         per storage server in the network the model solves); \
         (n): the paper's equation.\n\
         BJB: balanced job bounds; asym: asymptotic bounds; \
         MVA: exact mean value analysis; R: response time per job; X: throughput.\n\n",
    );
    let rows = c.points.iter().map(|p| {
        let b = &p.bounds;
        vec![
            p.customers.to_string(),
            num(b.balanced_job.response_time[0]),
            num(p.response_time),
            num(b.balanced_job.response_time[1]),
            num(b.asymptotic.response_time[0]),
            num(b.asymptotic.response_time[1]),
            num(p.throughput),
        ]
    });
    let header = [
        "N",
        "BJB R lower s",
        "MVA R s",
        "BJB R upper s",
        "asym R lower s",
        "asym R upper s",
        "MVA X jobs/s",
    ];
    s.push_str(&Table::underlined(header).with_rows(rows).render());
    s
}

/// The `sluice model raid --sweep` table: one block of rows per value.
pub fn sweep_text(s: &Sweep) -> String {
    let mut rows = Vec::new();
    for series in &s.series {
        for p in &series.curve.points {
            rows.push(vec![
                series.value.map_or_else(|| "-".into(), |v| v.to_string()),
                p.customers.to_string(),
                num(p.bounds.balanced_job.response_time[0]),
                num(p.response_time),
                num(p.bounds.balanced_job.response_time[1]),
                num(p.throughput),
            ]);
        }
    }
    let header = [
        s.kind.name(),
        "N",
        "BJB R lower s",
        "MVA R s",
        "BJB R upper s",
        "MVA X jobs/s",
    ];
    format!(
        "figure {}: sweep of {}\n{}",
        s.figure,
        s.label,
        Table::underlined(header).with_rows(rows).render()
    )
}

/// The `sluice model noncontig` table: throughput and time per segment
/// size for the three descriptions.
pub fn noncontig_text(points: &[SizePoint]) -> String {
    let rows = points.iter().map(|p| {
        let mut r = vec![p.segment_bytes.to_string(), p.segments.to_string()];
        r.extend(p.transfers.iter().map(|t| num(t.throughput / 1e6)));
        r.extend(p.transfers.iter().map(|t| num(t.time)));
        r
    });
    Table::underlined([
        "segment B",
        "segments",
        "iterative MB/s",
        "sgl MB/s",
        "strided MB/s",
        "iterative s",
        "sgl s",
        "strided s",
    ])
    .with_rows(rows)
    .render()
}

/// The line that reports a network solved at one N; `unit` names what X
/// counts (`requests/s`, `jobs/s`).
pub fn prediction_text(sol: &Solution, unit: &str) -> String {
    format!(
        "\npredicted with N = {}: X = {} {unit}, R = {} s\n",
        sol.customers,
        num(sol.throughput),
        num(sol.response_time)
    )
}

/// The `sluice model calibrate` report of a server calibration.
pub fn calibration_text(cal: &ServerCalibration) -> String {
    let us = |v: f64| format!("{} us", num(v * 1e6));
    let reqs: Vec<String> = cal
        .requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let mut s = format!(
        "{} requests ({}){}\n",
        cal.completions,
        reqs.join(", "),
        match (cal.interval_seconds, cal.throughput) {
            (Some(t), Some(x)) => format!(" in {} s: X = {} requests/s", num(t), num(x)),
            _ => String::new(),
        }
    );
    let p = &cal.per_request;
    let _ = writeln!(
        s,
        "per request: process CPU {}, execute inline {}, execute pool {}, send {}, server time {}, {} bytes\n",
        p.cpu.map_or_else(|| "-".into(), us),
        us(p.execute_inline),
        us(p.execute_pool),
        us(p.send),
        p.server_time.map_or_else(|| "-".into(), us),
        num(p.bytes),
    );
    let rows = cal.stations.iter().map(|st| {
        vec![
            st.name.clone(),
            if st.delay { "delay" } else { "queueing" }.to_owned(),
            st.servers.to_string(),
            st.busy_seconds.map_or_else(|| "-".into(), num),
            st.utilization.map_or_else(|| "-".into(), num),
            num(st.demand),
            st.source.clone(),
        ]
    });
    let _ = writeln!(s, "layout {}", cal.layout.name());
    let header = [
        "station",
        "kind",
        "servers",
        "busy s",
        "utilization",
        "demand s",
        "from",
    ];
    s.push_str(&Table::underlined(header).with_rows(rows).render());
    if let Some(cmd) = mva_command(&cal.network) {
        let _ = write!(s, "\nas an mva command: {cmd}\n");
    }
    for n in &cal.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

/// The `sluice model calibrate --file` report: measured throughput and
/// the demands.
pub fn counters_text(throughput: f64, demands: &[CalibratedDemand]) -> String {
    let rows = demands
        .iter()
        .map(|d| vec![d.name.clone(), num(d.utilization), num(d.demand)]);
    format!(
        "measured throughput X = {} jobs/s\n{}",
        num(throughput),
        Table::underlined(["station", "utilization", "demand s"])
            .with_rows(rows)
            .render()
    )
}

/// The `sluice model mva` command line for a network of single-server
/// queueing and delay stations (None with load-dependent stations).
pub fn mva_command(net: &ClosedNetwork) -> Option<String> {
    let mut q = Vec::new();
    let mut d = Vec::new();
    for st in net.stations() {
        match st.kind {
            StationKind::Queueing => q.push(format!("{:.6e}", st.demand)),
            StationKind::Delay => d.push(format!("{:.6e}", st.demand)),
            _ => return None,
        }
    }
    if q.is_empty() {
        return None;
    }
    let mut cmd = format!("sluice model mva --demands {}", q.join(","));
    if !d.is_empty() {
        let _ = write!(cmd, " --delay-demands {}", d.join(","));
    }
    if net.think_time() > 0.0 {
        let _ = write!(cmd, " --think {}", net.think_time());
    }
    cmd.push_str(" --customers N");
    Some(cmd)
}

/// One line describing a network's stations and think time.
fn describe(net: &ClosedNetwork) -> String {
    let stations: Vec<String> = net
        .stations()
        .iter()
        .map(|s| {
            let kind = match &s.kind {
                StationKind::Queueing => "queueing".to_owned(),
                StationKind::Delay => "delay".to_owned(),
                StationKind::LoadDependent { rates } => format!("{} servers", rates.len()),
            };
            format!("{} ({kind}, D = {} us)", s.name, num(s.demand * 1e6))
        })
        .collect();
    format!("{}; Z = {} s", stations.join(", "), net.think_time())
}

/// The `sluice model validate` report: the model(s), measured against
/// predicted per N, and the error summary.
pub fn validation_text(v: &Validation) -> String {
    let us = |s: f64| num(s * 1e6);
    let pct = |e: f64| format!("{:+.1}", e * 100.0);
    let mut s = if let [net] = &v.networks[..] {
        format!("model: {}\n\n", describe(net))
    } else {
        let mut s = "models, one per N:\n".to_owned();
        for (p, net) in v.points.iter().zip(&v.networks) {
            let _ = writeln!(s, "  N = {}: {}", p.customers, describe(net));
        }
        s.push('\n');
        s
    };
    let bjb = |p: &ValidationPoint, i: usize| {
        p.bounds
            .map_or_else(|| "-".into(), |b| us(b.balanced_job.response_time[i]))
    };
    let rows = v.points.iter().map(|p| {
        vec![
            p.customers.to_string(),
            num(p.measured_throughput),
            num(p.predicted_throughput),
            pct(p.throughput_error),
            us(p.measured_response_time),
            us(p.predicted_response_time),
            pct(p.response_time_error),
            bjb(p, 0),
            bjb(p, 1),
        ]
    });
    let header = [
        "N",
        "X measured/s",
        "X MVA/s",
        "X err %",
        "R measured us",
        "R MVA us",
        "R err %",
        "R BJB lower us",
        "R BJB upper us",
    ];
    s.push_str(&Table::underlined(header).with_rows(rows).render());
    for (what, e) in [
        ("throughput", &v.throughput_error),
        ("response time", &v.response_time_error),
    ] {
        let _ = writeln!(
            s,
            "{what} error: mean |e| {:.1} %, max |e| {:.1} % at N = {}, mean signed {:+.1} %",
            e.mean_abs * 100.0,
            e.max_abs * 100.0,
            e.max_at,
            e.mean_signed * 100.0
        );
    }
    s
}
