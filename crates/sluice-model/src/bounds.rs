//! Asymptotic and balanced job bounds on throughput and response time.
//!
//! Both come from Lazowska et al., *Quantitative System Performance* (1984),
//! ch. 5. With D the total demand of the queueing stations, D_max the
//! largest, D_avg = D/K over the K queueing stations and Z the think time:
//!
//! Asymptotic bounds (section 5.2):
//! ```text
//! N / (N D + Z)  <=  X(N)  <=  min(1/D_max, N / (D + Z))
//! max(D, N D_max - Z)  <=  R(N)  <=  N D
//! ```
//!
//! Balanced job bounds (section 5.4; Zahorjan, Sevcik, Eager and Galler
//! 1982), the variant *with think time*, which reduces to the paper's
//! equation (1) when Z = 0:
//! ```text
//! X(N) >= N / (D + Z + (N-1) D_max / (1 + Z/(N D)))
//! X(N) <= min(1/D_max, N / (D + Z + (N-1) D_avg / (1 + Z/D)))
//! R(N) >= max(N D_max - Z, D + (N-1) D_avg / (1 + Z/D))
//! R(N) <= D + (N-1) D_max / (1 + Z/(N D))
//! ```
//!
//! [`fork_join_bounds`] widens them for jobs whose stations work side by
//! side (a RAID request's link transfers and CPU work): the lower edge of
//! the slowest branch, the upper edge of every station in series.
//!
//! Delay stations inside the network are folded into the think time for
//! the throughput bounds (a product-form network's throughput depends on
//! delay centres only through their total demand), and response-time
//! bounds follow from Little's law, R = N/X - Z, so they include the delay
//! stations' residence.

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::network::{ClosedNetwork, StationKind};

/// Lower and upper bounds on throughput and response time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerfBounds {
    /// Throughput [lower, upper], jobs per second.
    pub throughput: [f64; 2],
    /// Response time [lower, upper], seconds.
    pub response_time: [f64; 2],
}

/// Both kinds of bounds at one population.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// Number of customers N.
    pub customers: u32,
    /// Asymptotic bounds.
    pub asymptotic: PerfBounds,
    /// Balanced job bounds (variant with think time).
    pub balanced_job: PerfBounds,
}

/// The demand figures both bounds are built from.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Summary {
    /// Sum of queueing demands.
    total: f64,
    /// Largest queueing demand.
    max: f64,
    /// Number of queueing stations.
    count: usize,
    /// Think time plus delay-station demands.
    z: f64,
}

fn summarize(net: &ClosedNetwork) -> Result<Summary> {
    let mut s = Summary {
        total: 0.0,
        max: 0.0,
        count: 0,
        z: net.think_time(),
    };
    for st in net.stations() {
        match st.kind {
            StationKind::Queueing => {
                s.total += st.demand;
                s.max = s.max.max(st.demand);
                s.count += 1;
            }
            StationKind::Delay => s.z += st.demand,
            _ => {
                return Err(ModelError::Unsupported {
                    what: format!(
                        "bounds for load-dependent station '{}' (bounds assume load-independent stations)",
                        st.name
                    ),
                })
            }
        }
    }
    Ok(s)
}

/// Asymptotic and balanced job bounds with `customers` customers.
/// Load-dependent stations are not supported.
pub fn bounds(net: &ClosedNetwork, customers: u32) -> Result<Bounds> {
    if customers == 0 {
        return Err(ModelError::ZeroCustomers);
    }
    let s = summarize(net)?;
    let n = f64::from(customers);
    let z_outer = net.think_time();
    let to_r = |x: f64| n / x - z_outer;

    let (asym_x, bjb_x) = if s.total <= 0.0 {
        // Only delay: every job cycles in z, exactly.
        let x = n / s.z;
        ([x, x], [x, x])
    } else {
        let cap = 1.0 / s.max;
        let asym = [n / (n * s.total + s.z), cap.min(n / (s.total + s.z))];
        let avg = s.total / s.count as f64;
        let lower = n / (s.total + s.z + (n - 1.0) * s.max / (1.0 + s.z / (n * s.total)));
        let upper = cap.min(n / (s.total + s.z + (n - 1.0) * avg / (1.0 + s.z / s.total)));
        (asym, [lower, upper])
    };
    let r_of = |x: [f64; 2]| [to_r(x[1]), to_r(x[0])];
    Ok(Bounds {
        customers,
        asymptotic: PerfBounds {
            throughput: asym_x,
            response_time: r_of(asym_x),
        },
        balanced_job: PerfBounds {
            throughput: bjb_x,
            response_time: r_of(bjb_x),
        },
    })
}

/// Bounds for a job that forks into `branches` that run side by side and
/// joins when the last one is done: a RAID request's transfers on the
/// members' links while the head's and the members' CPUs work on what
/// has already arrived. A product-form network visits its stations one
/// after another, so its lower bound at N = 1 is the sum of every demand,
/// which such a job beats.
///
/// The response-time lower bound is the largest of the branches' own
/// lower bounds, each branch taken as a network of its own with the N
/// jobs (a job is never done before its slowest branch). The upper bound
/// is the one of all the stations in series, [`bounds`] of the network
/// the branches make together: overlap only ever shortens a job. With
/// one branch these are exactly [`bounds`]. Throughput bounds follow from
/// Little's law, X = N / (R + Z). Every branch must have the same think
/// time (the job's).
pub fn fork_join_bounds(branches: &[ClosedNetwork], customers: u32) -> Result<Bounds> {
    let z = ClosedNetwork::fork_join_think_time(branches)?;
    let serial = ClosedNetwork::new(
        branches
            .iter()
            .flat_map(|b| b.stations().iter().cloned())
            .collect(),
        z,
    )?;
    let whole = bounds(&serial, customers)?;
    let mut lower = [0.0_f64; 2];
    for branch in branches {
        let b = bounds(branch, customers)?;
        lower[0] = lower[0].max(b.asymptotic.response_time[0]);
        lower[1] = lower[1].max(b.balanced_job.response_time[0]);
    }
    let n = f64::from(customers);
    let perf = |r_lower: f64, r_upper: f64| PerfBounds {
        throughput: [n / (r_upper + z), n / (r_lower + z)],
        response_time: [r_lower, r_upper],
    };
    Ok(Bounds {
        customers,
        asymptotic: perf(lower[0], whole.asymptotic.response_time[1]),
        balanced_job: perf(lower[1], whole.balanced_job.response_time[1]),
    })
}

/// The population N* = (D + Z)/D_max where the two asymptotes meet: below
/// it the network is latency-bound, above it the bottleneck saturates.
/// `None` when there is no queueing demand.
pub fn saturation_point(net: &ClosedNetwork) -> Result<Option<f64>> {
    let s = summarize(net)?;
    Ok((s.max > 0.0).then(|| (s.total + s.z) / s.max))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::Station;

    #[test]
    fn zero_think_time_is_the_papers_equation_1() {
        let net = ClosedNetwork::from_demands(&[1.0, 2.0, 3.0], &[], 0.0).unwrap();
        let b = bounds(&net, 4).unwrap();
        // max(N Dmax, D + (N-1) Davg) = max(12, 6 + 3*2) = 12.
        assert_eq!(b.balanced_job.response_time[0], 12.0);
        // D + (N-1) Dmax = 6 + 9 = 15.
        assert_eq!(b.balanced_job.response_time[1], 15.0);
        assert_eq!(b.asymptotic.response_time, [12.0, 24.0]);
        assert_eq!(saturation_point(&net).unwrap(), Some(2.0));
    }

    #[test]
    fn one_branch_fork_join_is_the_plain_bounds() {
        let net = ClosedNetwork::from_demands(&[1.0, 2.0, 3.0], &[0.5], 0.25).unwrap();
        for n in [1, 2, 5, 40] {
            let plain = bounds(&net, n).unwrap();
            let fj = fork_join_bounds(std::slice::from_ref(&net), n).unwrap();
            for (a, b) in [
                (plain.balanced_job, fj.balanced_job),
                (plain.asymptotic, fj.asymptotic),
            ] {
                for k in 0..2 {
                    assert!((a.response_time[k] - b.response_time[k]).abs() < 1e-12);
                    assert!((a.throughput[k] - b.throughput[k]).abs() < 1e-9);
                }
            }
        }
    }

    #[test]
    fn fork_join_lower_bound_is_the_slowest_branch() {
        let links = ClosedNetwork::new(vec![Station::queueing("link", 5.0)], 0.0).unwrap();
        let cpus = ClosedNetwork::new(
            vec![
                Station::queueing("head", 0.6),
                Station::queueing("member", 0.2),
            ],
            0.0,
        )
        .unwrap();
        let b = fork_join_bounds(&[links.clone(), cpus.clone()], 1).unwrap();
        // Alone, a job takes at least its slowest branch and at most
        // every station in turn.
        assert_eq!(b.balanced_job.response_time[0], 5.0);
        assert!((b.balanced_job.response_time[1] - 5.8).abs() < 1e-12);
        // Saturated, the bottleneck bounds it as in any network.
        let b = fork_join_bounds(&[links, cpus], 10).unwrap();
        assert_eq!(b.balanced_job.response_time[0], 50.0);
        assert!((b.balanced_job.throughput[1] - 0.2).abs() < 1e-12);
    }

    #[test]
    fn fork_join_branches_must_share_the_think_time() {
        let a = ClosedNetwork::from_demands(&[1.0], &[], 0.0).unwrap();
        let b = ClosedNetwork::from_demands(&[1.0], &[], 1.0).unwrap();
        assert!(fork_join_bounds(&[a, b], 2).is_err());
        assert!(fork_join_bounds(&[], 2).is_err());
    }

    #[test]
    fn delay_only_network_is_exact() {
        let net = ClosedNetwork::from_demands(&[], &[2.0], 3.0).unwrap();
        let b = bounds(&net, 5).unwrap();
        assert_eq!(b.asymptotic.throughput, [1.0, 1.0]);
        assert_eq!(b.balanced_job.response_time, [2.0, 2.0]);
        assert_eq!(saturation_point(&net).unwrap(), None);
    }
}
