//! Report shapes that tools read: the `sluice model mva --json` object.

use serde::{Deserialize, Serialize};

use crate::bounds::{bounds, PerfBounds};
use crate::error::Result;
use crate::mva::{approximate_mva, exact_mva, ApproxOptions, Approximation};
use crate::network::ClosedNetwork;

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
