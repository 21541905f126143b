//! Service demands from measurements: the utilization law D = U / X.
//!
//! Over a measurement interval T a station was busy B seconds while the
//! system completed C jobs, so U = B/T, X = C/T and D = U/X = B/C. The
//! counters come from a running sluice's metrics (busy time per stage,
//! completed requests); this module only does the arithmetic, so it can be
//! tested without a server.
//!
//! [`Calibration`] takes busy times and completions as given (a TOML file
//! of counters); [`server_calibration`] takes two snapshots of a sluice
//! server's metrics ([`ServerCounters`]) and builds the single-server model
//! from their difference (see [`ServerLayout`] for the stations).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::network::{ClosedNetwork, Station};
use crate::prometheus::ServerCounters;

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

/// Which stations the server's counters become.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerLayout {
    /// One queueing station, `server-cpu`, busy for the process CPU time
    /// (`process_cpu_seconds_total`). Right when one connection thread
    /// does everything (receive, execute, send) for the connection, as
    /// for a memory or page-cache export: the stages cannot overlap, so
    /// they are one server.
    #[default]
    Cpu,
    /// Three stations: `device` (the execute stages, inline and on the
    /// I/O pool), `send` (the send stage) and `server-cpu` (process CPU
    /// outside the inline execute and send stages, never below 0). For
    /// exports whose device work goes to the I/O pool, where device time
    /// is spent on other threads (and partly waiting for the device).
    Stages,
}

impl ServerLayout {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Stages => "stages",
        }
    }
}

/// A client station added to the server's stations: the load generator's
/// own work per request, which is part of the closed loop.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientStation {
    /// Seconds per request (for example the client CPU per operation
    /// `sluice bench` reports).
    pub demand: f64,
    /// Model it as a delay centre (no queueing) instead of a queue.
    pub delay: bool,
}

/// How to turn two snapshots into a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerModelOptions {
    /// Which stations.
    pub layout: ServerLayout,
    /// Length of the interval, seconds; when `None`, the snapshots' scrape
    /// times are used if both have one. Demands D = B/C do not need it;
    /// utilizations and throughput do.
    pub interval_seconds: Option<f64>,
    /// Servers of the `server-cpu` station (threads that can work at once
    /// on the measured load; 1 for one connection).
    pub cpu_servers: u32,
    /// Servers of the `device` station ([`ServerLayout::Stages`]).
    pub device_servers: u32,
    /// A client station, if the client is to be modelled.
    pub client: Option<ClientStation>,
    /// Think time Z of the network, seconds.
    pub think_time: f64,
}

impl Default for ServerModelOptions {
    fn default() -> Self {
        Self {
            layout: ServerLayout::Cpu,
            interval_seconds: None,
            cpu_servers: 1,
            device_servers: 1,
            client: None,
            think_time: 0.0,
        }
    }
}

/// Server costs per completed request over the interval, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PerRequest {
    /// Process CPU (user + system), if the server reports it.
    pub cpu: Option<f64>,
    /// Busy time of the `execute_inline` stage.
    pub execute_inline: f64,
    /// Busy time of the `execute_pool` stage.
    pub execute_pool: f64,
    /// Busy time of the `send` stage.
    pub send: f64,
    /// Mean server time from decoding a request to sending its reply
    /// (the request-duration histogram's sum over its count).
    pub server_time: Option<f64>,
    /// Payload bytes.
    pub bytes: f64,
}

/// One station of the calibrated model and where its demand came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DerivedStation {
    /// Station name.
    pub name: String,
    /// The counters (or option) its busy time comes from.
    pub source: String,
    /// Busy seconds in the interval (`None` for a demand given directly).
    pub busy_seconds: Option<f64>,
    /// Servers (load-dependent when above 1).
    pub servers: u32,
    /// A delay centre.
    pub delay: bool,
    /// Service demand D = B / C, seconds per request.
    pub demand: f64,
    /// Utilization U = B / (T servers), when the interval is known.
    pub utilization: Option<f64>,
}

/// The single-server model calibrated from two metric snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerCalibration {
    /// Station layout used.
    pub layout: ServerLayout,
    /// Interval length, seconds, when known.
    pub interval_seconds: Option<f64>,
    /// Requests completed in the interval (every command of the selected
    /// exports).
    pub completions: u64,
    /// Of which, by command (commands with none left out).
    pub requests: BTreeMap<String, u64>,
    /// X = C / T, requests per second, when the interval is known.
    pub throughput: Option<f64>,
    /// Measured costs per request.
    pub per_request: PerRequest,
    /// The stations, in network order.
    pub stations: Vec<DerivedStation>,
    /// The closed network these stations make, ready for MVA.
    pub network: ClosedNetwork,
    /// Caveats about the measurement.
    pub notes: Vec<String>,
}

/// `after - before` for a counter; an error when it went backwards (the
/// server restarted between the snapshots).
fn delta(what: &str, before: f64, after: f64) -> Result<f64> {
    if !before.is_finite() || !after.is_finite() {
        return Err(ModelError::Calibration(format!(
            "{what} is not a finite number ({before} then {after})"
        )));
    }
    // Float counters are printed with enough digits to round-trip;
    // allow for nothing but that.
    if after < before - before.abs() * 1e-12 {
        return Err(ModelError::Calibration(format!(
            "{what} went down from {before} to {after}: the server restarted between the snapshots, or they are in the wrong order"
        )));
    }
    Ok((after - before).max(0.0))
}

/// Process CPU advances in clock ticks of this many seconds (Linux
/// USER_HZ = 100).
const CPU_TICK: f64 = 0.01;

/// Builds the single-server model from the counters of two snapshots,
/// `before` and `after` the measured load, with the utilization law per
/// station: D = B / C (busy seconds over completed requests).
pub fn server_calibration(
    before: &ServerCounters,
    after: &ServerCounters,
    opts: &ServerModelOptions,
) -> Result<ServerCalibration> {
    let mut notes = Vec::new();
    let interval = interval_between(before, after, opts.interval_seconds, &mut notes)?;
    let requests = request_deltas(before, after)?;
    let completions: u64 = requests.values().sum();
    if completions == 0 {
        return Err(ModelError::Calibration(
            "no requests completed between the snapshots: demands D = U/X are undefined; take them around a load (sluice bench)"
                .into(),
        ));
    }
    let c = completions as f64;
    let bytes = delta(
        "sluice_request_bytes_total",
        before.total_bytes() as f64,
        after.total_bytes() as f64,
    )?;
    let cpu = match (before.process_cpu_seconds, after.process_cpu_seconds) {
        (Some(b), Some(a)) => Some(delta("process_cpu_seconds_total", b, a)?),
        _ => None,
    };
    let stage = |name: &str| {
        delta(
            &format!("sluice_stage_busy_seconds_total{{stage=\"{name}\"}}"),
            before.stage(name),
            after.stage(name),
        )
    };
    let exec_inline = stage("execute_inline")?;
    let exec_pool = stage("execute_pool")?;
    let send = stage("send")?;
    let server_time = {
        let n = after
            .request_seconds_count
            .saturating_sub(before.request_seconds_count);
        let sum = delta(
            "sluice_request_duration_seconds_sum",
            before.request_seconds_sum,
            after.request_seconds_sum,
        )?;
        (n > 0).then(|| sum / n as f64)
    };
    if let Some(b) = cpu {
        if b < 100.0 * CPU_TICK {
            notes.push(format!(
                "process CPU advances in {} s ticks and only {b} s were used: its demand is uncertain by about {:.0} %; measure longer",
                CPU_TICK,
                100.0 * CPU_TICK / b.max(CPU_TICK)
            ));
        }
    }

    let busy = Busy {
        cpu,
        exec_inline,
        exec_pool,
        send,
    };
    let raw = busy_stations(opts, &busy, &mut notes)?;
    let stations = derived_stations(raw, interval, c, opts.client)?;
    let network = ClosedNetwork::new(
        stations
            .iter()
            .map(|s| {
                if s.delay {
                    Station::delay(s.name.clone(), s.demand)
                } else if s.servers > 1 {
                    Station::multi_server(s.name.clone(), s.demand, s.servers)
                } else {
                    Station::queueing(s.name.clone(), s.demand)
                }
            })
            .collect(),
        opts.think_time,
    )?;
    Ok(ServerCalibration {
        layout: opts.layout,
        interval_seconds: interval,
        completions,
        requests,
        throughput: interval.map(|t| c / t),
        per_request: PerRequest {
            cpu: cpu.map(|b| b / c),
            execute_inline: exec_inline / c,
            execute_pool: exec_pool / c,
            send: send / c,
            server_time,
            bytes: bytes / c,
        },
        stations,
        network,
        notes,
    })
}

/// The time between the snapshots: given, or from their scrape times.
fn interval_between(
    before: &ServerCounters,
    after: &ServerCounters,
    given: Option<f64>,
    notes: &mut Vec<String>,
) -> Result<Option<f64>> {
    let interval = match given {
        Some(t) => Some(t),
        None => match (before.scraped_at, after.scraped_at) {
            (Some(a), Some(b)) => Some(b - a),
            _ => None,
        },
    };
    if let Some(t) = interval {
        if !t.is_finite() || t <= 0.0 {
            return Err(ModelError::Calibration(format!(
                "interval must be a finite number of seconds > 0 (got {t}); is 'after' later than 'before'?"
            )));
        }
    } else {
        notes.push(
            "interval unknown (no scrape times and no --interval): demands only, no utilizations or throughput"
                .into(),
        );
    }
    Ok(interval)
}

/// Requests completed between the snapshots, per command (commands with
/// none left out).
fn request_deltas(
    before: &ServerCounters,
    after: &ServerCounters,
) -> Result<BTreeMap<String, u64>> {
    let mut requests = BTreeMap::new();
    let mut commands: Vec<&String> = after.requests.keys().collect();
    commands.extend(
        before
            .requests
            .keys()
            .filter(|k| !after.requests.contains_key(*k)),
    );
    for cmd in commands {
        let b = before.requests.get(cmd).copied().unwrap_or(0);
        let a = after.requests.get(cmd).copied().unwrap_or(0);
        if a < b {
            return Err(ModelError::Calibration(format!(
                "requests of command '{cmd}' went down from {b} to {a}: the server restarted between the snapshots, or they are in the wrong order"
            )));
        }
        if a > b {
            requests.insert(cmd.clone(), a - b);
        }
    }
    Ok(requests)
}

/// Busy seconds between the snapshots.
struct Busy {
    /// Process CPU, when the metrics have it.
    cpu: Option<f64>,
    exec_inline: f64,
    exec_pool: f64,
    send: f64,
}

/// (name, source, busy seconds, servers) of each station of the layout.
type RawStation = (&'static str, &'static str, f64, u32);

/// The stations the layout makes of the busy times.
fn busy_stations(
    opts: &ServerModelOptions,
    busy: &Busy,
    notes: &mut Vec<String>,
) -> Result<Vec<RawStation>> {
    let Busy {
        cpu,
        exec_inline,
        exec_pool,
        send,
    } = *busy;
    let mut raw: Vec<RawStation> = Vec::new();
    match opts.layout {
        ServerLayout::Cpu => {
            let b = cpu.ok_or_else(|| {
                ModelError::Calibration(
                    "the metrics have no process_cpu_seconds_total (not Linux?): use the stages layout"
                        .into(),
                )
            })?;
            raw.push((
                "server-cpu",
                "process_cpu_seconds_total",
                b,
                opts.cpu_servers,
            ));
        }
        ServerLayout::Stages => {
            if let Some(b) = cpu {
                let rest = b - exec_inline - send;
                if rest < 0.0 {
                    notes.push(format!(
                        "the inline execute and send stages were busy {:.6} s, more than the {b} s of process CPU (they include time blocked or preempted): server-cpu set to 0",
                        exec_inline + send
                    ));
                }
                raw.push((
                    "server-cpu",
                    "process_cpu_seconds_total - execute_inline - send",
                    rest.max(0.0),
                    opts.cpu_servers,
                ));
            } else {
                notes.push("no process_cpu_seconds_total: no server-cpu station".into());
            }
            raw.push((
                "device",
                "execute_inline + execute_pool",
                exec_inline + exec_pool,
                opts.device_servers,
            ));
            raw.push(("send", "send", send, 1));
            let before_len = raw.len();
            raw.retain(|r| r.2 > 0.0);
            if raw.len() < before_len {
                notes.push("stations with no busy time left out".into());
            }
        }
    }
    Ok(raw)
}

/// Stations with demands D = busy / completions (and utilizations when the
/// interval is known), plus the client's.
fn derived_stations(
    raw: Vec<RawStation>,
    interval: Option<f64>,
    c: f64,
    client: Option<ClientStation>,
) -> Result<Vec<DerivedStation>> {
    let mut stations = Vec::with_capacity(raw.len() + 1);
    for (name, source, busy, servers) in raw {
        if servers == 0 {
            return Err(ModelError::Calibration(format!(
                "station '{name}': servers must be at least 1"
            )));
        }
        let utilization = interval.map(|t| busy / (t * f64::from(servers)));
        if let Some(u) = utilization {
            if u > 1.01 {
                return Err(ModelError::Calibration(format!(
                    "station '{name}': busy {busy} s in {} s with {servers} server(s) is a utilization of {u:.3} > 1: give it more servers (several connections or I/O threads) or check the interval",
                    interval.unwrap_or_default()
                )));
            }
        }
        stations.push(DerivedStation {
            name: name.to_owned(),
            source: source.to_owned(),
            busy_seconds: Some(busy),
            servers,
            delay: false,
            demand: busy / c,
            utilization,
        });
    }
    if let Some(client) = client {
        if !client.demand.is_finite() || client.demand < 0.0 {
            return Err(ModelError::Calibration(format!(
                "client demand must be a finite number of seconds >= 0 (got {})",
                client.demand
            )));
        }
        stations.push(DerivedStation {
            name: "client".into(),
            source: "given (client CPU per request)".into(),
            busy_seconds: None,
            servers: 1,
            delay: client.delay,
            demand: client.demand,
            utilization: interval.map(|t| client.demand * c / t),
        });
    }
    Ok(stations)
}
