//! Mean value analysis of closed single-class networks: exact (with
//! load-dependent stations) and approximate (Schweitzer, Bard).
//!
//! Exact MVA (Reiser and Lavenberg 1980; Lazowska et al., *Quantitative
//! System Performance*, 1984, ch. 6) climbs from one customer to N:
//!
//! ```text
//! R_k(n) = D_k (1 + Q_k(n-1))          queueing station
//! R_k(n) = D_k                         delay station
//! R_k(n) = sum_j j D_k/a_k(j) p_k(j-1 | n-1)   load-dependent (ch. 8)
//! X(n)   = n / (Z + sum_k R_k(n))
//! Q_k(n) = X(n) R_k(n)
//! ```

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::network::{ClosedNetwork, StationKind};

/// Most customers the exact solver accepts for load-independent networks
/// (its cost is O(N K)).
pub const MAX_CUSTOMERS: u32 = 10_000_000;

/// Most `N * N * (load-dependent stations)` steps the exact solver does.
pub const MAX_LOAD_DEPENDENT_WORK: u128 = 2_000_000_000;

/// What one station does in a solved network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StationResult {
    /// Station name.
    pub name: String,
    /// Mean number of customers at the station (waiting or in service).
    pub queue_length: f64,
    /// Utilization: X D for a load-independent queue (at most 1), the mean
    /// number of busy servers X D for a delay station (may exceed 1), and
    /// the probability that the station is not empty for a load-dependent
    /// one.
    pub utilization: f64,
    /// Residence time per job (all visits), seconds.
    pub residence_time: f64,
}

/// The performance of a closed single-class network with N customers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    /// Number of customers N.
    pub customers: u32,
    /// Think time Z used, seconds.
    pub think_time: f64,
    /// System throughput X(N), jobs per second.
    pub throughput: f64,
    /// Response time R(N) = sum of residence times (think time excluded),
    /// seconds. Little's law: N = X (R + Z).
    pub response_time: f64,
    /// Per station, in network order.
    pub stations: Vec<StationResult>,
}

impl Solution {
    /// Queue lengths in station order.
    pub fn queue_lengths(&self) -> Vec<f64> {
        self.stations.iter().map(|s| s.queue_length).collect()
    }
    /// Utilizations in station order.
    pub fn utilizations(&self) -> Vec<f64> {
        self.stations.iter().map(|s| s.utilization).collect()
    }
    /// Residence times in station order.
    pub fn residence_times(&self) -> Vec<f64> {
        self.stations.iter().map(|s| s.residence_time).collect()
    }
}

fn check_size(net: &ClosedNetwork, customers: u32) -> Result<()> {
    if customers == 0 {
        return Err(ModelError::ZeroCustomers);
    }
    if customers > MAX_CUSTOMERS {
        return Err(ModelError::TooLarge {
            what: "customer count for exact MVA".into(),
            size: customers.into(),
            limit: MAX_CUSTOMERS.into(),
            hint: "use the approximate solver (--approx)".into(),
        });
    }
    let ld = net
        .stations()
        .iter()
        .filter(|s| matches!(s.kind, StationKind::LoadDependent { .. }))
        .count() as u128;
    let work = u128::from(customers) * u128::from(customers) * ld;
    if work > MAX_LOAD_DEPENDENT_WORK {
        return Err(ModelError::TooLarge {
            what: "exact MVA with load-dependent stations (N*N*stations)".into(),
            size: work,
            limit: MAX_LOAD_DEPENDENT_WORK,
            hint: "use fewer customers or model the stations as load-independent".into(),
        });
    }
    Ok(())
}

/// Runs the exact recursion from 1 to `max` customers, calling `each` with
/// the solution at every population.
fn exact_recursion(
    net: &ClosedNetwork,
    max: u32,
    mut each: impl FnMut(u32, f64, &[f64], &[f64], &[f64]),
) -> Result<()> {
    check_size(net, max)?;
    let stations = net.stations();
    let k = stations.len();
    let z = net.think_time();
    let mut q = vec![0.0; k];
    let mut r = vec![0.0; k];
    let mut u = vec![0.0; k];
    // p[i][j]: probability of j customers at load-dependent station i with
    // one customer fewer in the network; empty for other stations.
    let mut p: Vec<Vec<f64>> = stations
        .iter()
        .map(|s| match s.kind {
            StationKind::LoadDependent { .. } => vec![1.0],
            _ => Vec::new(),
        })
        .collect();
    for n in 1..=max {
        for (i, s) in stations.iter().enumerate() {
            r[i] = match s.kind {
                StationKind::Queueing => s.demand * (1.0 + q[i]),
                StationKind::Delay => s.demand,
                StationKind::LoadDependent { .. } => p[i]
                    .iter()
                    .enumerate()
                    .map(|(jm1, &pj)| (jm1 + 1) as f64 * s.demand / s.rate(jm1 + 1) * pj)
                    .sum(),
            };
        }
        let cycle = z + r.iter().sum::<f64>();
        let x = f64::from(n) / cycle;
        for (i, s) in stations.iter().enumerate() {
            q[i] = x * r[i];
            u[i] = match s.kind {
                StationKind::Queueing | StationKind::Delay => x * s.demand,
                StationKind::LoadDependent { .. } => {
                    let prev = &p[i];
                    let mut next = Vec::with_capacity(prev.len() + 1);
                    next.push(0.0);
                    for (jm1, &pj) in prev.iter().enumerate() {
                        next.push(x * s.demand / s.rate(jm1 + 1) * pj);
                    }
                    let busy: f64 = next[1..].iter().sum();
                    // The complement loses precision when the station is
                    // nearly always busy, and rounding can take the busy
                    // share past 1. The marginals must still sum to 1:
                    // left above it, the excess grows with every
                    // population the recursion adds (a station whose
                    // servers outnumber the customers drifted by 8e-6 of
                    // its throughput at 29 customers).
                    next[0] = (1.0 - busy).max(0.0);
                    if busy > 1.0 {
                        for pj in &mut next[1..] {
                            *pj /= busy;
                        }
                    }
                    p[i] = next;
                    busy.min(1.0)
                }
            };
        }
        each(n, x, &r, &q, &u);
    }
    Ok(())
}

fn solution(net: &ClosedNetwork, n: u32, x: f64, r: &[f64], q: &[f64], u: &[f64]) -> Solution {
    Solution {
        customers: n,
        think_time: net.think_time(),
        throughput: x,
        response_time: r.iter().sum(),
        stations: net
            .stations()
            .iter()
            .enumerate()
            .map(|(i, s)| StationResult {
                name: s.name.clone(),
                queue_length: q[i],
                utilization: u[i],
                residence_time: r[i],
            })
            .collect(),
    }
}

/// Exact MVA with `customers` customers.
pub fn exact_mva(net: &ClosedNetwork, customers: u32) -> Result<Solution> {
    let mut last = None;
    exact_recursion(net, customers, |n, x, r, q, u| {
        if n == customers {
            last = Some(solution(net, n, x, r, q, u));
        }
    })?;
    last.ok_or(ModelError::ZeroCustomers)
}

/// Most populations [`exact_mva_curve`] returns at once.
pub const MAX_CURVE_POINTS: u32 = 100_000;

/// Exact MVA for every population 1..=`max_customers` (one pass), at most
/// [`MAX_CURVE_POINTS`] of them.
pub fn exact_mva_curve(net: &ClosedNetwork, max_customers: u32) -> Result<Vec<Solution>> {
    if max_customers > MAX_CURVE_POINTS {
        return Err(ModelError::TooLarge {
            what: "number of populations in an MVA curve".into(),
            size: max_customers.into(),
            limit: MAX_CURVE_POINTS.into(),
            hint: "ask for fewer customers, or for a list of populations".into(),
        });
    }
    let mut out = Vec::with_capacity(max_customers as usize);
    exact_recursion(net, max_customers, |n, x, r, q, u| {
        out.push(solution(net, n, x, r, q, u));
    })?;
    Ok(out)
}

/// Exact MVA at each population in `customers` (any order, repeats
/// allowed), from one pass up to the largest.
pub fn exact_mva_points(net: &ClosedNetwork, customers: &[u32]) -> Result<Vec<Solution>> {
    let max = customers
        .iter()
        .copied()
        .max()
        .ok_or(ModelError::ZeroCustomers)?;
    if customers.contains(&0) {
        return Err(ModelError::ZeroCustomers);
    }
    let mut found: Vec<Option<Solution>> = vec![None; customers.len()];
    exact_recursion(net, max, |n, x, r, q, u| {
        let mut sol = None;
        for (slot, _) in found.iter_mut().zip(customers).filter(|(_, &c)| c == n) {
            *slot = Some(
                sol.get_or_insert_with(|| solution(net, n, x, r, q, u))
                    .clone(),
            );
        }
    })?;
    found
        .into_iter()
        .map(|s| s.ok_or(ModelError::ZeroCustomers))
        .collect()
}

/// One population of a fork-join estimate ([`fork_join_mva_points`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkJoinSolution {
    /// Number of jobs N.
    pub customers: u32,
    /// Jobs per second, N / (R + Z).
    pub throughput: f64,
    /// The job's response time: the largest of its branches', seconds.
    pub response_time: f64,
    /// Each branch solved on its own with the N jobs, in the order given.
    pub branches: Vec<Solution>,
}

/// Exact MVA of jobs that fork into `branches` run side by side and join
/// when the last is done (a RAID request's transfers on the members'
/// links beside the CPU work on what has arrived). Each branch is solved
/// on its own with the N jobs and a job's response time is the largest of
/// the branches'. It is exact when one branch dominates; when branches
/// are close it leans low (the mean of a maximum is at least the maximum
/// of the means), and it is never above the exact MVA of every station in
/// series (a product-form network with more stations is no faster). Every
/// branch must have the job's think time.
pub fn fork_join_mva_points(
    branches: &[ClosedNetwork],
    customers: &[u32],
) -> Result<Vec<ForkJoinSolution>> {
    let z = ClosedNetwork::fork_join_think_time(branches)?;
    let solved = branches
        .iter()
        .map(|b| exact_mva_points(b, customers))
        .collect::<Result<Vec<_>>>()?;
    Ok(customers
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let each: Vec<Solution> = solved.iter().map(|b| b[k].clone()).collect();
            let r = each.iter().map(|s| s.response_time).fold(0.0, f64::max);
            ForkJoinSolution {
                customers: n,
                throughput: f64::from(n) / (r + z),
                response_time: r,
                branches: each,
            }
        })
        .collect())
}

/// Which approximation of the queue seen on arrival, Q_k(N-1), to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approximation {
    /// Schweitzer (1979): Q_k(N-1) ~ (N-1)/N Q_k(N). Usually within a few
    /// percent of exact; exact for N = 1.
    #[default]
    Schweitzer,
    /// Bard (1979): Q_k(N-1) ~ Q_k(N). Simpler and pessimistic.
    Bard,
}

impl Approximation {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Schweitzer => "schweitzer",
            Self::Bard => "bard",
        }
    }
}

/// Stopping rule for the approximate solvers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ApproxOptions {
    /// Stop when no queue length moves by more than this (customers).
    pub tolerance: f64,
    /// Give up after this many iterations.
    pub max_iterations: u32,
}

impl Default for ApproxOptions {
    fn default() -> Self {
        Self {
            tolerance: 1e-10,
            max_iterations: 1_000_000,
        }
    }
}

/// Approximate MVA (fixed point on the arrival-instant queue lengths).
/// Load-dependent stations are not supported.
pub fn approximate_mva(
    net: &ClosedNetwork,
    customers: u32,
    method: Approximation,
    opts: ApproxOptions,
) -> Result<Solution> {
    if customers == 0 {
        return Err(ModelError::ZeroCustomers);
    }
    if net.has_load_dependent() {
        return Err(ModelError::Unsupported {
            what: "approximate MVA with load-dependent stations (use exact MVA)".into(),
        });
    }
    let stations = net.stations();
    let k = stations.len();
    let n = f64::from(customers);
    let queueing = stations.iter().filter(|s| !s.is_delay()).count().max(1);
    let factor = match method {
        Approximation::Schweitzer => (n - 1.0) / n,
        Approximation::Bard => 1.0,
    };
    let mut q: Vec<f64> = stations
        .iter()
        .map(|s| {
            if s.is_delay() {
                0.0
            } else {
                n / queueing as f64
            }
        })
        .collect();
    let mut r = vec![0.0; k];
    let mut iterations = 0;
    loop {
        iterations += 1;
        for (i, s) in stations.iter().enumerate() {
            r[i] = if s.is_delay() {
                s.demand
            } else {
                s.demand * (1.0 + factor * q[i])
            };
        }
        let x = n / (net.think_time() + r.iter().sum::<f64>());
        let mut change: f64 = 0.0;
        for i in 0..k {
            let next = x * r[i];
            change = change.max((next - q[i]).abs());
            q[i] = next;
        }
        if change <= opts.tolerance {
            let u: Vec<f64> = stations.iter().map(|s| x * s.demand).collect();
            return Ok(solution(net, customers, x, &r, &q, &u));
        }
        if iterations >= opts.max_iterations || !change.is_finite() {
            return Err(ModelError::NotConverged {
                method: format!("{} approximate MVA", method.name()),
                iterations,
                last_change: change,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_queue_without_think_time_holds_everyone() {
        // One queueing station, Z = 0: all N customers queue there.
        let net = ClosedNetwork::from_demands(&[0.5], &[], 0.0).unwrap();
        let s = exact_mva(&net, 7).unwrap();
        assert!((s.throughput - 2.0).abs() < 1e-12);
        assert!((s.stations[0].queue_length - 7.0).abs() < 1e-12);
        assert!((s.stations[0].utilization - 1.0).abs() < 1e-12);
    }

    #[test]
    fn curve_matches_point_solutions() {
        let net = ClosedNetwork::from_demands(&[0.3, 0.7], &[0.2], 1.0).unwrap();
        let c = exact_mva_curve(&net, 6).unwrap();
        assert_eq!(c.len(), 6);
        assert_eq!(c[3], exact_mva(&net, 4).unwrap());
    }

    #[test]
    fn points_in_any_order_and_limits() {
        let net = ClosedNetwork::from_demands(&[0.3, 0.7], &[0.2], 1.0).unwrap();
        let p = exact_mva_points(&net, &[5, 2, 5]).unwrap();
        assert_eq!(p[0], exact_mva(&net, 5).unwrap());
        assert_eq!(p[1], exact_mva(&net, 2).unwrap());
        assert_eq!(p[2], p[0]);
        assert_eq!(exact_mva_points(&net, &[]), Err(ModelError::ZeroCustomers));
        assert_eq!(
            exact_mva_points(&net, &[3, 0]),
            Err(ModelError::ZeroCustomers)
        );
        assert!(matches!(
            exact_mva_curve(&net, MAX_CURVE_POINTS + 1),
            Err(ModelError::TooLarge { .. })
        ));
    }

    #[test]
    fn approximations_are_exact_for_one_customer() {
        let net = ClosedNetwork::from_demands(&[0.3, 0.7], &[0.2], 1.0).unwrap();
        let e = exact_mva(&net, 1).unwrap();
        let a =
            approximate_mva(&net, 1, Approximation::Schweitzer, ApproxOptions::default()).unwrap();
        assert!((a.throughput - e.throughput).abs() < 1e-12);
    }
}
