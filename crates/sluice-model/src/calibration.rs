//! Service demands from measurements: the utilization law D = U / X.
//!
//! Over a measurement interval T a station was busy B seconds while the
//! system completed C jobs, so U = B/T, X = C/T and D = U/X = B/C. The
//! counters come from a running sluice's metrics (busy time per stage,
//! completed requests); this module only does the arithmetic, so it can be
//! tested without a server.

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::network::{ClosedNetwork, Station};

/// What was measured at one station over the interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StationObservation {
    /// Station name (a pipeline stage, a device, a link).
    pub name: String,
    /// Seconds the station was busy, summed over its servers.
    pub busy_seconds: f64,
    /// Number of identical servers (threads, spindles); busy time may reach
    /// `servers x interval`. Default 1.
    #[serde(default = "one")]
    pub servers: u32,
    /// True to model the station as a delay centre (pure latency, no
    /// queueing), for example a network round trip.
    #[serde(default)]
    pub delay: bool,
}

fn one() -> u32 {
    1
}

/// Counters over one measurement interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Length of the interval, seconds.
    pub interval_seconds: f64,
    /// Jobs (requests) completed in the interval.
    pub completions: u64,
    /// Per-station busy time.
    pub stations: Vec<StationObservation>,
}

/// A demand derived from measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibratedDemand {
    /// Station name.
    pub name: String,
    /// Utilization U = B / (T servers), per server.
    pub utilization: f64,
    /// Service demand D = B / C, seconds per job.
    pub demand: f64,
}

impl Calibration {
    /// Measured throughput X = C / T, jobs per second.
    pub fn throughput(&self) -> Result<f64> {
        self.check_totals()?;
        Ok(self.completions as f64 / self.interval_seconds)
    }

    fn check_totals(&self) -> Result<()> {
        if !self.interval_seconds.is_finite() || self.interval_seconds <= 0.0 {
            return Err(ModelError::Calibration(format!(
                "interval must be a finite number of seconds > 0 (got {})",
                self.interval_seconds
            )));
        }
        if self.completions == 0 {
            return Err(ModelError::Calibration(
                "no completions in the interval: demands D = U/X are undefined; measure under load"
                    .into(),
            ));
        }
        if self.stations.is_empty() {
            return Err(ModelError::NoStations);
        }
        Ok(())
    }

    /// Demands by the utilization law, in station order.
    pub fn demands(&self) -> Result<Vec<CalibratedDemand>> {
        let x = self.throughput()?;
        self.stations
            .iter()
            .map(|s| {
                if s.servers == 0 {
                    return Err(ModelError::Calibration(format!(
                        "station '{}': servers must be at least 1",
                        s.name
                    )));
                }
                let capacity = self.interval_seconds * f64::from(s.servers);
                if !s.busy_seconds.is_finite() || s.busy_seconds < 0.0 {
                    return Err(ModelError::Calibration(format!(
                        "station '{}': busy time must be a finite number of seconds >= 0 (got {})",
                        s.name, s.busy_seconds
                    )));
                }
                // Counters sampled at slightly different instants can
                // overshoot a little; more than 1% is a unit or wiring bug.
                if !s.delay && s.busy_seconds > capacity * 1.01 {
                    return Err(ModelError::Calibration(format!(
                        "station '{}': busy {} s in an interval of {} s with {} server(s): utilization above 1 (check units and server count)",
                        s.name, s.busy_seconds, self.interval_seconds, s.servers
                    )));
                }
                let utilization = s.busy_seconds / capacity;
                Ok(CalibratedDemand {
                    name: s.name.clone(),
                    utilization,
                    demand: utilization * f64::from(s.servers) / x,
                })
            })
            .collect()
    }

    /// The closed network these demands describe, with think time `z`:
    /// multi-server observations become load-dependent stations.
    pub fn network(&self, think_time: f64) -> Result<ClosedNetwork> {
        let demands = self.demands()?;
        let stations = self
            .stations
            .iter()
            .zip(demands)
            .map(|(s, d)| {
                if s.delay {
                    Station::delay(d.name, d.demand)
                } else if s.servers > 1 {
                    Station::multi_server(d.name, d.demand, s.servers)
                } else {
                    Station::queueing(d.name, d.demand)
                }
            })
            .collect();
        ClosedNetwork::new(stations, think_time)
    }
}
