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
    fn delay_only_network_is_exact() {
        let net = ClosedNetwork::from_demands(&[], &[2.0], 3.0).unwrap();
        let b = bounds(&net, 5).unwrap();
        assert_eq!(b.asymptotic.throughput, [1.0, 1.0]);
        assert_eq!(b.balanced_job.response_time, [2.0, 2.0]);
        assert_eq!(saturation_point(&net).unwrap(), None);
    }
}
