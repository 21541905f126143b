//! Model against measurement: a `sluice bench` sweep over concurrency
//! (a closed loop: N requests always outstanding, no think time) compared
//! with the exact MVA prediction and the bounds of a calibrated network.
//!
//! [`BenchDocument`] reads the JSON `sluice bench` writes (a single run's
//! report, a preset's or comparison's report, or a list of them);
//! [`measured_points`] turns its runs into (N, X, R) points, N being the
//! total outstanding requests (queue depth x workers); [`validate`] solves
//! the network at every N and reports relative errors.

use serde::{Deserialize, Serialize};

use crate::bounds::bounds;
use crate::error::{ModelError, Result};
use crate::mva::exact_mva_points;
use crate::network::{ClosedNetwork, Station};
use crate::report::BoundsReport;

/// The workload fields of a bench run that matter here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchWorkload {
    /// Requests each worker keeps in flight.
    pub queue_depth: u32,
    /// Workers (default 1).
    #[serde(default = "one")]
    pub workers: u32,
    /// Block size, bytes (informational).
    #[serde(default)]
    pub block_size: Option<u64>,
}

fn one() -> u32 {
    1
}

/// Mean latency of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BenchLatency {
    /// Mean, microseconds.
    pub mean_us: f64,
}

/// One run of `sluice bench`, as it writes it in JSON (other fields are
/// ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchRun {
    /// Case name.
    #[serde(default)]
    pub case: String,
    /// Target label (`uri`, `embedded`, `sluice`, `nbdkit`, ...).
    #[serde(default)]
    pub target: String,
    /// The workload (absent for runs driven by fio).
    #[serde(default)]
    pub workload: Option<BenchWorkload>,
    /// Operations completed.
    pub ops: u64,
    /// Operations per second.
    pub iops: f64,
    /// Latency of all operations.
    pub latency: BenchLatency,
    /// CPU seconds the client used.
    #[serde(default)]
    pub client_cpu_s: Option<f64>,
    /// CPU seconds the server used, when known.
    #[serde(default)]
    pub server_cpu_s: Option<f64>,
}

impl BenchRun {
    /// Total outstanding requests: queue depth x workers.
    pub fn customers(&self) -> Option<u32> {
        self.workload
            .as_ref()
            .map(|w| w.queue_depth.saturating_mul(w.workers.max(1)))
    }
}

/// A run inside a preset or comparison report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRun {
    /// The run.
    pub result: BenchRun,
}

/// Any JSON document `sluice bench` writes, or a list of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum BenchDocument {
    /// `sluice bench ... --json FILE`: `{"results": [run, ...]}`.
    Single {
        /// The runs.
        results: Vec<BenchRun>,
    },
    /// A preset or `compare` report: `{"runs": [{"result": run}, ...]}`.
    Matrix {
        /// The runs.
        runs: Vec<MatrixRun>,
    },
    /// One run object.
    Run(BenchRun),
    /// Several documents (for example one per queue depth).
    List(Vec<Self>),
}

impl BenchDocument {
    /// Every run in the document, in order.
    pub fn into_runs(self) -> Vec<BenchRun> {
        match self {
            Self::Single { results } => results,
            Self::Matrix { runs } => runs.into_iter().map(|r| r.result).collect(),
            Self::Run(r) => vec![r],
            Self::List(docs) => docs.into_iter().flat_map(Self::into_runs).collect(),
        }
    }
}

/// Measured throughput and response time at one concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredPoint {
    /// Customers N: requests outstanding.
    pub customers: u32,
    /// X, requests per second (mean over the runs at this N).
    pub throughput: f64,
    /// R, seconds (mean latency, mean over the runs at this N).
    pub response_time: f64,
    /// Runs averaged.
    pub runs: u32,
    /// Client CPU seconds per request at this N, when reported.
    pub client_cpu_per_request: Option<f64>,
    /// Server CPU seconds per request at this N, when reported.
    pub server_cpu_per_request: Option<f64>,
}

/// How several runs at the same N become one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// Arithmetic mean of X and of R.
    #[default]
    Mean,
    /// Median of X and of R (each on its own; the mean of the middle two
    /// for an even count): robust to a run disturbed by other work on the
    /// machine.
    Median,
}

fn aggregate(mut v: Vec<f64>, how: Aggregate) -> f64 {
    let k = v.len().max(1);
    match how {
        Aggregate::Mean => v.iter().sum::<f64>() / k as f64,
        Aggregate::Median => {
            v.sort_by(f64::total_cmp);
            if k % 2 == 1 {
                v[k / 2]
            } else {
                (v[k / 2 - 1] + v[k / 2]) / 2.0
            }
        }
    }
}

/// Groups runs by N (queue depth x workers) and combines X and R over the
/// runs at each N (rounds of a preset, repeated sweeps). Sorted by N.
pub fn measured_points(runs: &[BenchRun], how: Aggregate) -> Result<Vec<MeasuredPoint>> {
    if runs.is_empty() {
        return Err(ModelError::Validation(
            "the bench file has no runs: write one with sluice bench ... --json FILE".into(),
        ));
    }
    let mut by_n: Vec<(u32, Vec<&BenchRun>)> = Vec::new();
    for r in runs {
        let n = r.customers().ok_or_else(|| {
            ModelError::Validation(format!(
                "run '{}' has no workload (queue depth): only runs of sluice's own client can be compared",
                r.case
            ))
        })?;
        if n == 0 {
            return Err(ModelError::Validation(format!(
                "run '{}' has queue depth 0",
                r.case
            )));
        }
        let ok = |v: f64| v.is_finite() && v > 0.0;
        if r.ops == 0 || !ok(r.iops) || !ok(r.latency.mean_us) {
            return Err(ModelError::Validation(format!(
                "run '{}' (N = {n}) completed no operations or has no throughput or latency",
                r.case
            )));
        }
        match by_n.iter_mut().find(|(k, _)| *k == n) {
            Some((_, v)) => v.push(r),
            None => by_n.push((n, vec![r])),
        }
    }
    by_n.sort_by_key(|(n, _)| *n);
    Ok(by_n
        .into_iter()
        .map(|(n, rs)| {
            let ops: u64 = rs.iter().map(|r| r.ops).sum();
            let per_op = |f: fn(&BenchRun) -> Option<f64>| -> Option<f64> {
                let total: Option<f64> = rs.iter().map(|r| f(r)).sum();
                total.map(|t| t / ops as f64)
            };
            MeasuredPoint {
                customers: n,
                throughput: aggregate(rs.iter().map(|r| r.iops).collect(), how),
                response_time: aggregate(rs.iter().map(|r| r.latency.mean_us).collect(), how)
                    * 1e-6,
                runs: rs.len() as u32,
                client_cpu_per_request: per_op(|r| r.client_cpu_s),
                server_cpu_per_request: per_op(|r| r.server_cpu_s),
            }
        })
        .collect())
}

/// Client CPU seconds per request over all runs (total CPU over total
/// operations), when every run reports it.
pub fn client_cpu_per_request(runs: &[BenchRun]) -> Option<f64> {
    let ops: u64 = runs.iter().map(|r| r.ops).sum();
    let cpu: Option<f64> = runs.iter().map(|r| r.client_cpu_s).sum();
    (ops > 0).then_some(())?;
    cpu.map(|c| c / ops as f64)
}

/// How the load generator's own work enters the model it is validated
/// against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientPlacement {
    /// A queueing station named `client` (one client thread serves its
    /// requests in turn).
    Queueing,
    /// A delay station named `client` (no queueing at the client).
    Delay,
    /// Client and server share one CPU: the client's demand is added to
    /// the station named `server-cpu`.
    Shared,
}

/// `base` with the client's `demand` placed as `placement` says (nothing
/// added without a demand) and think time `think` (default: `base`'s).
pub fn with_client(
    base: &ClosedNetwork,
    placement: ClientPlacement,
    demand: Option<f64>,
    think: Option<f64>,
) -> Result<ClosedNetwork> {
    let think = think.unwrap_or_else(|| base.think_time());
    let mut stations: Vec<Station> = base.stations().to_vec();
    let Some(d) = demand else {
        return ClosedNetwork::new(stations, think);
    };
    if placement == ClientPlacement::Shared {
        let cpu = stations
            .iter_mut()
            .find(|s| s.name == "server-cpu")
            .ok_or_else(|| {
                ModelError::Validation(
                    "a shared client adds its demand to the station named server-cpu, and the model has none"
                        .into(),
                )
            })?;
        cpu.demand += d;
        cpu.name = "server-cpu+client".into();
        return ClosedNetwork::new(stations, think);
    }
    if stations.iter().any(|s| s.name == "client") {
        return Err(ModelError::Validation(
            "the model already has a station named 'client': leave the client out (--client none)"
                .into(),
        ));
    }
    stations.push(if placement == ClientPlacement::Delay {
        Station::delay("client", d)
    } else {
        Station::queueing("client", d)
    });
    ClosedNetwork::new(stations, think)
}

/// Model and measurement at one N.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationPoint {
    /// Customers N.
    pub customers: u32,
    /// Measured X, requests per second.
    pub measured_throughput: f64,
    /// Measured R, seconds.
    pub measured_response_time: f64,
    /// Exact MVA X(N).
    pub predicted_throughput: f64,
    /// Exact MVA R(N).
    pub predicted_response_time: f64,
    /// (predicted - measured) / measured for X.
    pub throughput_error: f64,
    /// (predicted - measured) / measured for R.
    pub response_time_error: f64,
    /// Asymptotic and balanced job bounds at N (absent when the network
    /// has load-dependent stations).
    pub bounds: Option<BoundsReport>,
}

/// Mean and largest absolute relative error over the points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorSummary {
    /// Mean of |(predicted - measured) / measured|.
    pub mean_abs: f64,
    /// Largest |(predicted - measured) / measured|.
    pub max_abs: f64,
    /// The N where the largest error is.
    pub max_at: u32,
    /// Mean of the signed errors (positive: the model predicts too much).
    pub mean_signed: f64,
}

impl ErrorSummary {
    /// Summarizes `(n, relative error)` pairs (at least one).
    pub fn of(errors: &[(u32, f64)]) -> Self {
        let k = errors.len().max(1) as f64;
        let (max_at, max_abs) = errors
            .iter()
            .map(|&(n, e)| (n, e.abs()))
            .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a });
        Self {
            mean_abs: errors.iter().map(|(_, e)| e.abs()).sum::<f64>() / k,
            max_abs: max_abs.max(0.0),
            max_at,
            mean_signed: errors.iter().map(|(_, e)| e).sum::<f64>() / k,
        }
    }
}

/// The comparison of a network with a measured sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// The networks compared: one for every N, or one per point (in the
    /// order of `points`) when each N has its own calibration.
    pub networks: Vec<ClosedNetwork>,
    /// One entry per measured N, sorted by N.
    pub points: Vec<ValidationPoint>,
    /// Errors of X.
    pub throughput_error: ErrorSummary,
    /// Errors of R.
    pub response_time_error: ErrorSummary,
}

/// Relative error of `predicted` against `measured` (> 0).
pub fn relative_error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

/// Solves `net` exactly at every measured N and compares.
pub fn validate(net: &ClosedNetwork, measured: &[MeasuredPoint]) -> Result<Validation> {
    if measured.is_empty() {
        return Err(ModelError::Validation("no measured points".into()));
    }
    let ns: Vec<u32> = measured.iter().map(|p| p.customers).collect();
    let solutions = exact_mva_points(net, &ns)?;
    let points = measured
        .iter()
        .zip(&solutions)
        .map(|(m, s)| point(net, m, s.throughput, s.response_time))
        .collect::<Result<Vec<_>>>()?;
    Ok(summarize(vec![net.clone()], points))
}

/// Like [`validate`], but point `i` is predicted with `nets[i]` (demands
/// calibrated at that point's own load).
pub fn validate_each(nets: &[ClosedNetwork], measured: &[MeasuredPoint]) -> Result<Validation> {
    if measured.is_empty() {
        return Err(ModelError::Validation("no measured points".into()));
    }
    if nets.len() != measured.len() {
        return Err(ModelError::Validation(format!(
            "{} model(s) for {} measured point(s): give one per N",
            nets.len(),
            measured.len()
        )));
    }
    let points = nets
        .iter()
        .zip(measured)
        .map(|(net, m)| {
            let s = crate::mva::exact_mva(net, m.customers)?;
            point(net, m, s.throughput, s.response_time)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(summarize(nets.to_vec(), points))
}

fn point(net: &ClosedNetwork, m: &MeasuredPoint, x: f64, r: f64) -> Result<ValidationPoint> {
    let b = if net.has_load_dependent() {
        None
    } else {
        let b = bounds(net, m.customers)?;
        Some(BoundsReport {
            asymptotic: b.asymptotic,
            balanced_job: b.balanced_job,
        })
    };
    Ok(ValidationPoint {
        customers: m.customers,
        measured_throughput: m.throughput,
        measured_response_time: m.response_time,
        predicted_throughput: x,
        predicted_response_time: r,
        throughput_error: relative_error(x, m.throughput),
        response_time_error: relative_error(r, m.response_time),
        bounds: b,
    })
}

fn summarize(networks: Vec<ClosedNetwork>, points: Vec<ValidationPoint>) -> Validation {
    let xe: Vec<(u32, f64)> = points
        .iter()
        .map(|p| (p.customers, p.throughput_error))
        .collect();
    let re: Vec<(u32, f64)> = points
        .iter()
        .map(|p| (p.customers, p.response_time_error))
        .collect();
    Validation {
        networks,
        points,
        throughput_error: ErrorSummary::of(&xe),
        response_time_error: ErrorSummary::of(&re),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(qd: u32, iops: f64, mean_us: f64) -> BenchRun {
        BenchRun {
            case: format!("qd{qd}"),
            target: "uri".into(),
            workload: Some(BenchWorkload {
                queue_depth: qd,
                workers: 1,
                block_size: Some(4096),
            }),
            ops: 1000,
            iops,
            latency: BenchLatency { mean_us },
            client_cpu_s: Some(0.001),
            server_cpu_s: None,
        }
    }

    #[test]
    fn rounds_are_averaged_and_sorted() {
        let runs = [
            run(4, 300.0, 20.0),
            run(1, 100.0, 10.0),
            run(4, 100.0, 40.0),
            run(4, 110.0, 30.0),
        ];
        let p = measured_points(&runs[..3], Aggregate::Mean).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].customers, p[1].customers), (1, 4));
        assert_eq!(p[1].throughput, 200.0);
        assert!((p[1].response_time - 30e-6).abs() < 1e-18);
        assert_eq!(p[1].runs, 2);
        assert_eq!(p[1].client_cpu_per_request, Some(1e-6));
        assert_eq!(p[1].server_cpu_per_request, None);
        let m = measured_points(&runs, Aggregate::Median).unwrap();
        assert_eq!(m[1].throughput, 110.0);
        assert!((m[1].response_time - 30e-6).abs() < 1e-18);
        assert_eq!(m[1].runs, 3);
    }

    #[test]
    fn error_summary_picks_the_largest() {
        let s = ErrorSummary::of(&[(1, 0.1), (2, -0.3), (4, 0.2)]);
        assert!((s.mean_abs - 0.2).abs() < 1e-15);
        assert_eq!((s.max_abs, s.max_at), (0.3, 2));
        assert!(s.mean_signed.abs() < 1e-15);
    }
}
