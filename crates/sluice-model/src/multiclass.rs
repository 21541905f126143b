//! Closed multiclass networks: exact MVA over the population lattice and
//! Schweitzer/Bard approximate MVA (Lazowska et al. 1984, ch. 7).
//!
//! ```text
//! R_ck(n) = D_ck (1 + Q_k(n - e_c))    queueing station
//! R_ck(n) = D_ck                       delay station
//! X_c(n)  = n_c / (Z_c + sum_k R_ck(n))
//! Q_k(n)  = sum_c X_c(n) R_ck(n)
//! ```

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::mva::{ApproxOptions, Approximation};
use crate::network::check_think_time;

/// Most `(lattice points) x (stations)` values the exact solver stores.
pub const MAX_LATTICE_WORK: u128 = 20_000_000;

/// A station of a multiclass network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MulticlassStation {
    /// Name used in reports.
    pub name: String,
    /// True for a delay (infinite-server) station.
    #[serde(default)]
    pub delay: bool,
}

impl MulticlassStation {
    /// A load-independent queueing station.
    pub fn queueing(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            delay: false,
        }
    }
    /// A delay station.
    pub fn delay(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            delay: true,
        }
    }
}

/// One class of customers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomerClass {
    /// Name used in reports.
    pub name: String,
    /// Number of customers of this class.
    pub population: u32,
    /// Think time Z_c, seconds.
    #[serde(default)]
    pub think_time: f64,
    /// Service demand D_ck at each station, in station order, seconds.
    pub demands: Vec<f64>,
}

impl CustomerClass {
    /// A class with the given population, think time and demands.
    pub fn new(
        name: impl Into<String>,
        population: u32,
        think_time: f64,
        demands: Vec<f64>,
    ) -> Self {
        Self {
            name: name.into(),
            population,
            think_time,
            demands,
        }
    }
}

/// A checked multiclass network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "MulticlassSpec", into = "MulticlassSpec")]
pub struct MulticlassNetwork {
    stations: Vec<MulticlassStation>,
    classes: Vec<CustomerClass>,
}

/// Serialized form of a [`MulticlassNetwork`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MulticlassSpec {
    /// Stations.
    pub stations: Vec<MulticlassStation>,
    /// Classes.
    pub classes: Vec<CustomerClass>,
}

impl TryFrom<MulticlassSpec> for MulticlassNetwork {
    type Error = ModelError;
    fn try_from(s: MulticlassSpec) -> Result<Self> {
        Self::new(s.stations, s.classes)
    }
}

impl From<MulticlassNetwork> for MulticlassSpec {
    fn from(n: MulticlassNetwork) -> Self {
        Self {
            stations: n.stations,
            classes: n.classes,
        }
    }
}

impl MulticlassNetwork {
    /// Checks shapes and values: every class has one finite, non-negative
    /// demand per station, a valid think time, and some time per cycle if it
    /// has customers; the network has at least one customer.
    pub fn new(stations: Vec<MulticlassStation>, classes: Vec<CustomerClass>) -> Result<Self> {
        if stations.is_empty() {
            return Err(ModelError::NoStations);
        }
        if classes.is_empty() {
            return Err(ModelError::NoClasses);
        }
        for (i, s) in stations.iter().enumerate() {
            if stations[..i].iter().any(|t| t.name == s.name) {
                return Err(ModelError::DuplicateStation {
                    station: s.name.clone(),
                });
            }
        }
        for c in &classes {
            if c.demands.len() != stations.len() {
                return Err(ModelError::ClassShape {
                    class: c.name.clone(),
                    got: c.demands.len(),
                    expected: stations.len(),
                });
            }
            for (s, &d) in stations.iter().zip(&c.demands) {
                if !d.is_finite() || d < 0.0 {
                    return Err(ModelError::BadDemand {
                        station: format!("{} (class {})", s.name, c.name),
                        value: d,
                    });
                }
            }
            check_think_time(c.think_time)?;
            if c.population > 0 && c.think_time + c.demands.iter().sum::<f64>() <= 0.0 {
                return Err(ModelError::ZeroCycleTime);
            }
        }
        if classes.iter().all(|c| c.population == 0) {
            return Err(ModelError::ZeroCustomers);
        }
        Ok(Self { stations, classes })
    }

    /// Stations in order.
    pub fn stations(&self) -> &[MulticlassStation] {
        &self.stations
    }

    /// Classes in order.
    pub fn classes(&self) -> &[CustomerClass] {
        &self.classes
    }
}

/// Results for one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    /// Class name.
    pub name: String,
    /// Population N_c.
    pub population: u32,
    /// Throughput X_c, jobs per second.
    pub throughput: f64,
    /// Response time R_c (think time excluded), seconds.
    pub response_time: f64,
    /// Residence time R_ck at each station, seconds.
    pub residence_times: Vec<f64>,
    /// Queue length of this class at each station.
    pub queue_lengths: Vec<f64>,
}

/// Per-station totals over all classes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MulticlassStationResult {
    /// Station name.
    pub name: String,
    /// Total mean queue length.
    pub queue_length: f64,
    /// Total utilization sum_c X_c D_ck.
    pub utilization: f64,
}

/// The solved multiclass network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MulticlassSolution {
    /// Per class.
    pub classes: Vec<ClassResult>,
    /// Per station.
    pub stations: Vec<MulticlassStationResult>,
}

fn finish(net: &MulticlassNetwork, x: &[f64], r: &[Vec<f64>]) -> MulticlassSolution {
    let classes: Vec<ClassResult> = net
        .classes
        .iter()
        .enumerate()
        .map(|(c, cl)| ClassResult {
            name: cl.name.clone(),
            population: cl.population,
            throughput: x[c],
            response_time: r[c].iter().sum(),
            residence_times: r[c].clone(),
            queue_lengths: r[c].iter().map(|rk| x[c] * rk).collect(),
        })
        .collect();
    let stations = net
        .stations
        .iter()
        .enumerate()
        .map(|(i, s)| MulticlassStationResult {
            name: s.name.clone(),
            queue_length: classes.iter().map(|c| c.queue_lengths[i]).sum(),
            utilization: (0..net.classes.len())
                .map(|c| x[c] * net.classes[c].demands[i])
                .sum(),
        })
        .collect();
    MulticlassSolution { classes, stations }
}

/// Exact multiclass MVA. Cost and memory grow with the product of
/// (population + 1) over classes; past [`MAX_LATTICE_WORK`] it refuses.
pub fn exact_mva_multiclass(net: &MulticlassNetwork) -> Result<MulticlassSolution> {
    let k = net.stations.len();
    let c_count = net.classes.len();
    let mut strides = Vec::with_capacity(c_count);
    let mut points: u128 = 1;
    for cl in &net.classes {
        strides.push(points as usize);
        points *= u128::from(cl.population) + 1;
    }
    let work = points * k as u128;
    if work > MAX_LATTICE_WORK {
        return Err(ModelError::TooLarge {
            what: "population lattice for exact multiclass MVA (points x stations)".into(),
            size: work,
            limit: MAX_LATTICE_WORK,
            hint: "use the approximate solver".into(),
        });
    }
    let points = points as usize;
    let mut q = vec![0.0; points * k];
    let mut x = vec![0.0; c_count];
    let mut r = vec![vec![0.0; k]; c_count];
    let mut n = vec![0u32; c_count];
    for idx in 1..points {
        for (c, cl) in net.classes.iter().enumerate() {
            n[c] = ((idx / strides[c]) % (cl.population as usize + 1)) as u32;
        }
        for (c, cl) in net.classes.iter().enumerate() {
            if n[c] == 0 {
                x[c] = 0.0;
                r[c].iter_mut().for_each(|v| *v = 0.0);
                continue;
            }
            let prev = (idx - strides[c]) * k;
            for (i, st) in net.stations.iter().enumerate() {
                r[c][i] = if st.delay {
                    cl.demands[i]
                } else {
                    cl.demands[i] * (1.0 + q[prev + i])
                };
            }
            x[c] = f64::from(n[c]) / (cl.think_time + r[c].iter().sum::<f64>());
        }
        let base = idx * k;
        for i in 0..k {
            q[base + i] = (0..c_count).map(|c| x[c] * r[c][i]).sum();
        }
    }
    Ok(finish(net, &x, &r))
}

/// Approximate multiclass MVA: Schweitzer's Q_k(n - e_c) ~ Q_k - Q_ck/N_c,
/// or Bard's Q_k(n - e_c) ~ Q_k.
pub fn approximate_mva_multiclass(
    net: &MulticlassNetwork,
    method: Approximation,
    opts: ApproxOptions,
) -> Result<MulticlassSolution> {
    let k = net.stations.len();
    let c_count = net.classes.len();
    let queueing = net.stations.iter().filter(|s| !s.delay).count().max(1) as f64;
    let mut qc: Vec<Vec<f64>> = net
        .classes
        .iter()
        .map(|cl| {
            net.stations
                .iter()
                .map(|s| {
                    if s.delay {
                        0.0
                    } else {
                        f64::from(cl.population) / queueing
                    }
                })
                .collect()
        })
        .collect();
    let mut x = vec![0.0; c_count];
    let mut r = vec![vec![0.0; k]; c_count];
    let mut iterations = 0;
    loop {
        iterations += 1;
        let total: Vec<f64> = (0..k).map(|i| qc.iter().map(|v| v[i]).sum()).collect();
        for (c, cl) in net.classes.iter().enumerate() {
            if cl.population == 0 {
                continue;
            }
            let nc = f64::from(cl.population);
            for (i, st) in net.stations.iter().enumerate() {
                let seen = match method {
                    Approximation::Schweitzer => total[i] - qc[c][i] / nc,
                    Approximation::Bard => total[i],
                };
                r[c][i] = if st.delay {
                    cl.demands[i]
                } else {
                    cl.demands[i] * (1.0 + seen)
                };
            }
            x[c] = nc / (cl.think_time + r[c].iter().sum::<f64>());
        }
        let mut change: f64 = 0.0;
        for c in 0..c_count {
            for i in 0..k {
                let next = x[c] * r[c][i];
                change = change.max((next - qc[c][i]).abs());
                qc[c][i] = next;
            }
        }
        if change <= opts.tolerance {
            return Ok(finish(net, &x, &r));
        }
        if iterations >= opts.max_iterations || !change.is_finite() {
            return Err(ModelError::NotConverged {
                method: format!("{} approximate multiclass MVA", method.name()),
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
    fn empty_class_contributes_nothing() {
        let st = vec![
            MulticlassStation::queueing("a"),
            MulticlassStation::delay("b"),
        ];
        let net = MulticlassNetwork::new(
            st,
            vec![
                CustomerClass::new("busy", 3, 1.0, vec![1.0, 2.0]),
                CustomerClass::new("idle", 0, 0.0, vec![5.0, 5.0]),
            ],
        )
        .unwrap();
        for s in [
            exact_mva_multiclass(&net).unwrap(),
            approximate_mva_multiclass(&net, Approximation::Bard, ApproxOptions::default())
                .unwrap(),
        ] {
            assert_eq!(s.classes[1].throughput, 0.0);
            assert!(s.classes[0].throughput > 0.0);
            // The delay station's residence is its demand.
            assert_eq!(s.classes[0].residence_times[1], 2.0);
        }
    }
}
