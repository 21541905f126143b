//! Closed, single-class queueing networks: stations and think time.
//!
//! A network is built once through [`ClosedNetwork::new`], which checks every
//! demand; solvers then take it as given ("parse, don't validate").

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// How a station serves its customers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StationKind {
    /// A single-server FCFS (or PS) queue with load-independent rate: a
    /// customer's residence time grows with the queue it finds.
    Queueing,
    /// An infinite-server (delay) centre: residence time is always the
    /// demand, whatever the load.
    Delay,
    /// A queue whose service rate depends on how many customers are in it:
    /// with `j` customers present, work is done `rates[j-1]` times as fast as
    /// with one (the last rate holds for all larger `j`). A `c`-server
    /// station has rates `1, 2, ..., c`.
    LoadDependent {
        /// Relative rates for 1, 2, ... customers present.
        rates: Vec<f64>,
    },
}

/// One service centre with its total service demand per job (visits times
/// service time, seconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Station {
    /// Name used in reports.
    pub name: String,
    /// Service demand D_k, seconds per job.
    pub demand: f64,
    /// How the station serves.
    #[serde(flatten)]
    pub kind: StationKind,
}

impl Station {
    /// A load-independent queueing station.
    pub fn queueing(name: impl Into<String>, demand: f64) -> Self {
        Self {
            name: name.into(),
            demand,
            kind: StationKind::Queueing,
        }
    }

    /// A delay (infinite-server) station.
    pub fn delay(name: impl Into<String>, demand: f64) -> Self {
        Self {
            name: name.into(),
            demand,
            kind: StationKind::Delay,
        }
    }

    /// A load-dependent station with the given relative rates.
    pub fn load_dependent(name: impl Into<String>, demand: f64, rates: Vec<f64>) -> Self {
        Self {
            name: name.into(),
            demand,
            kind: StationKind::LoadDependent { rates },
        }
    }

    /// A station with `servers` identical servers (rates 1, 2, ..., servers).
    pub fn multi_server(name: impl Into<String>, demand: f64, servers: u32) -> Self {
        let rates = (1..=servers.max(1)).map(f64::from).collect();
        Self::load_dependent(name, demand, rates)
    }

    /// True for a delay station.
    pub fn is_delay(&self) -> bool {
        matches!(self.kind, StationKind::Delay)
    }

    /// Relative service rate with `j >= 1` customers present (1 for a
    /// load-independent queue).
    pub(crate) fn rate(&self, j: usize) -> f64 {
        match &self.kind {
            StationKind::LoadDependent { rates } => {
                let i = j.saturating_sub(1).min(rates.len().saturating_sub(1));
                rates.get(i).copied().unwrap_or(1.0)
            }
            _ => 1.0,
        }
    }

    fn validate(&self) -> Result<()> {
        if !self.demand.is_finite() || self.demand < 0.0 {
            return Err(ModelError::BadDemand {
                station: self.name.clone(),
                value: self.demand,
            });
        }
        if let StationKind::LoadDependent { rates } = &self.kind {
            if rates.is_empty() {
                return Err(ModelError::NoRates {
                    station: self.name.clone(),
                });
            }
            for (i, &r) in rates.iter().enumerate() {
                if !r.is_finite() || r <= 0.0 {
                    return Err(ModelError::BadRate {
                        station: self.name.clone(),
                        customers: i + 1,
                        value: r,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Checks a think time.
pub(crate) fn check_think_time(z: f64) -> Result<()> {
    if z.is_finite() && z >= 0.0 {
        Ok(())
    } else {
        Err(ModelError::BadThinkTime { value: z })
    }
}

/// A closed single-class network: stations plus a think time Z spent
/// outside them (terminals, or the client between requests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "NetworkSpec", into = "NetworkSpec")]
pub struct ClosedNetwork {
    stations: Vec<Station>,
    think_time: f64,
}

/// The serialized form of a [`ClosedNetwork`], checked on the way in.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// The stations.
    pub stations: Vec<Station>,
    /// Think time Z, seconds (default 0).
    #[serde(default)]
    pub think_time: f64,
}

impl TryFrom<NetworkSpec> for ClosedNetwork {
    type Error = ModelError;
    fn try_from(spec: NetworkSpec) -> Result<Self> {
        Self::new(spec.stations, spec.think_time)
    }
}

impl From<ClosedNetwork> for NetworkSpec {
    fn from(n: ClosedNetwork) -> Self {
        Self {
            stations: n.stations,
            think_time: n.think_time,
        }
    }
}

impl ClosedNetwork {
    /// Builds a network, checking that every demand and rate is finite and
    /// non-negative, that names are unique and that a job takes some time.
    pub fn new(stations: Vec<Station>, think_time: f64) -> Result<Self> {
        if stations.is_empty() {
            return Err(ModelError::NoStations);
        }
        check_think_time(think_time)?;
        for (i, s) in stations.iter().enumerate() {
            s.validate()?;
            if stations[..i].iter().any(|t| t.name == s.name) {
                return Err(ModelError::DuplicateStation {
                    station: s.name.clone(),
                });
            }
        }
        let total: f64 = stations.iter().map(|s| s.demand).sum::<f64>() + think_time;
        if total <= 0.0 {
            return Err(ModelError::ZeroCycleTime);
        }
        Ok(Self {
            stations,
            think_time,
        })
    }

    /// Queueing stations named `q1, q2, ...` with the given demands, then
    /// delay stations `d1, d2, ...`, then think time `z`: the shape the
    /// `sluice model mva` command builds.
    pub fn from_demands(queueing: &[f64], delay: &[f64], think_time: f64) -> Result<Self> {
        let stations = queueing
            .iter()
            .enumerate()
            .map(|(i, &d)| Station::queueing(format!("q{}", i + 1), d))
            .chain(
                delay
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| Station::delay(format!("d{}", i + 1), d)),
            )
            .collect();
        Self::new(stations, think_time)
    }

    /// The stations, in the order given.
    pub fn stations(&self) -> &[Station] {
        &self.stations
    }

    /// Think time Z, seconds.
    pub fn think_time(&self) -> f64 {
        self.think_time
    }

    /// The think time every branch of a fork-join job shares (the
    /// job's): an error when there is no branch or two differ.
    pub(crate) fn fork_join_think_time(branches: &[Self]) -> Result<f64> {
        let first = branches.first().ok_or(ModelError::NoStations)?;
        let z = first.think_time();
        if let Some(other) = branches.iter().find(|b| b.think_time() != z) {
            return Err(ModelError::Unsupported {
                what: format!(
                    "fork-join branches with different think times ({z} s and {} s)",
                    other.think_time()
                ),
            });
        }
        Ok(z)
    }

    /// A copy with another think time.
    pub fn with_think_time(&self, think_time: f64) -> Result<Self> {
        Self::new(self.stations.clone(), think_time)
    }

    /// Sum of all station demands (queueing and delay), seconds: the
    /// response time of a job alone in the network.
    pub fn total_demand(&self) -> f64 {
        self.stations.iter().map(|s| s.demand).sum()
    }

    /// True when some station is load-dependent.
    pub fn has_load_dependent(&self) -> bool {
        self.stations
            .iter()
            .any(|s| matches!(s.kind, StationKind::LoadDependent { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_extend_with_the_last_value() {
        let s = Station::multi_server("m", 1.0, 3);
        assert_eq!(
            [s.rate(1), s.rate(2), s.rate(3), s.rate(10)],
            [1.0, 2.0, 3.0, 3.0]
        );
        assert_eq!(Station::queueing("q", 1.0).rate(5), 1.0);
    }

    #[test]
    fn from_demands_orders_queueing_then_delay() {
        let n = ClosedNetwork::from_demands(&[1.0, 2.0], &[3.0], 4.0).unwrap();
        let names: Vec<&str> = n.stations().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["q1", "q2", "d1"]);
        assert_eq!(n.total_demand(), 6.0);
        assert!(n.stations()[2].is_delay());
        assert_eq!(
            n.with_think_time(-1.0),
            Err(ModelError::BadThinkTime { value: -1.0 })
        );
    }
}
