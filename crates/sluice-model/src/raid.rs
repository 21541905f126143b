//! The networked RAID 5 model of Cui, Liu, Wang and Liu, "Study on I/O
//! response time bounds of networked storage systems" (2006).
//!
//! A central storage server runs software RAID 5 over virtual disks that
//! live on remote storage servers (reached over ENBD, for sluice over NBD).
//! Its closed queueing network has a CPU, a NIC and the network link on the
//! central side, and a CPU, a NIC and a disk at each storage server. The
//! service demands come from the paper's equations (2)-(10); see
//! [`RaidParams::demands`] for the mapping, symbol by symbol.
//!
//! Units are SI base units throughout: bytes, seconds, bytes per second.

use serde::{Deserialize, Serialize};

use crate::bounds::{bounds, Bounds};
use crate::error::{check, ModelError, Result};
use crate::mva::exact_mva_points;
use crate::network::{ClosedNetwork, Station};

/// Read or write jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RaidOp {
    /// RAID 5 read: S_mR5 = S_m (eq. 5).
    Read,
    /// RAID 5 write: data plus parity, S_mR5 = S_m STP/(STP-1) (eq. 4).
    #[default]
    Write,
}

/// Parameters of the networked RAID model. The [`Default`] is the paper's
/// own setting ([`RaidParams::paper`]); a TOML or JSON file may override any
/// subset of fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaidParams {
    /// Read or write jobs (the paper's figures are all writes).
    pub op: RaidOp,
    /// S_m: bytes processed by one job.
    pub job_bytes: f64,
    /// STU_m: stripe unit, bytes.
    pub stripe_unit: f64,
    /// STP_m: stripe units per stripe (stripe width, parity included).
    pub stripe_width: u32,
    /// Number of storage servers, each a CPU, a NIC and a disk station.
    /// The paper has one per stripe unit (`stripe_width`).
    pub storage_servers: u32,
    /// P_m: cache hit probability at the central server.
    pub central_cache_hit: f64,
    /// P_sn: read cache hit probability at the storage servers.
    pub storage_cache_hit: f64,
    /// T_mpro: central CPU time per stripe unit (copy, read/write), seconds.
    pub central_unit_time: f64,
    /// T_mp: central CPU time per IP packet (ENBD client plus TCP/IP), seconds.
    pub central_packet_time: f64,
    /// T_snpro: storage-server CPU time per stripe unit, seconds.
    pub storage_unit_time: f64,
    /// T_snp: storage-server CPU time per IP packet, seconds.
    pub storage_packet_time: f64,
    /// MSS: largest TCP segment, bytes.
    pub mss: f64,
    /// Frames_e: Ethernet frame size, bytes.
    pub frame_bytes: f64,
    /// TRate_e: Ethernet transmission rate, bytes per second.
    pub ethernet_rate: f64,
    /// Seek: average disk seek time, seconds.
    pub disk_seek: f64,
    /// Iatency (sic): average rotational latency, seconds.
    pub disk_latency: f64,
    /// TRate_d: maximal sustained disk transfer rate, bytes per second.
    pub disk_rate: f64,
    /// Z: think time between a job's completion and its next start,
    /// seconds (0 in the paper: jobs are issued back to back).
    pub think_time: f64,
}

impl Default for RaidParams {
    fn default() -> Self {
        Self::paper()
    }
}

const KIB: f64 = 1024.0;
const MIB: f64 = 1024.0 * 1024.0;

impl RaidParams {
    /// The paper's section 4 setting: 4 PCs (one central, three storage
    /// servers), PIII 650, 100 Mb/s Ethernet, IBM DDYS-T36950 disks, RAID 5
    /// over a stripe of three 16 KB units, 200 MB per job, writes, no cache
    /// hits. Sizes in KB/MB are read as binary (KiB/MiB), rates in Mb/s and
    /// MB/s as decimal.
    pub fn paper() -> Self {
        Self {
            op: RaidOp::Write,
            job_bytes: 200.0 * MIB,
            stripe_unit: 16.0 * KIB,
            stripe_width: 3,
            storage_servers: 3,
            central_cache_hit: 0.0,
            storage_cache_hit: 0.0,
            central_unit_time: 0.027e-3,
            central_packet_time: 0.045e-3,
            storage_unit_time: 0.033e-3,
            storage_packet_time: 0.028e-3,
            mss: 1460.0,
            frame_bytes: 1518.0,
            ethernet_rate: 100e6 / 8.0,
            disk_seek: 4.9e-3,
            disk_latency: 2.99e-3,
            disk_rate: 35e6,
            think_time: 0.0,
        }
    }

    /// Checks every parameter's domain.
    pub fn validate(&self) -> Result<()> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let nonneg = |v: f64| v.is_finite() && v >= 0.0;
        let prob = |v: f64| (0.0..=1.0).contains(&v);
        check(
            pos(self.job_bytes),
            "job_bytes",
            self.job_bytes,
            "must be > 0 bytes",
        )?;
        check(
            pos(self.stripe_unit),
            "stripe_unit",
            self.stripe_unit,
            "must be > 0 bytes",
        )?;
        check(
            self.stripe_width >= 2,
            "stripe_width",
            f64::from(self.stripe_width),
            "RAID 5 needs at least 2 units per stripe (data plus parity)",
        )?;
        check(
            self.storage_servers >= 1,
            "storage_servers",
            f64::from(self.storage_servers),
            "must be at least 1",
        )?;
        check(
            prob(self.central_cache_hit),
            "central_cache_hit",
            self.central_cache_hit,
            "a probability must lie in [0, 1]",
        )?;
        check(
            prob(self.storage_cache_hit),
            "storage_cache_hit",
            self.storage_cache_hit,
            "a probability must lie in [0, 1]",
        )?;
        for (name, v) in [
            ("central_unit_time", self.central_unit_time),
            ("central_packet_time", self.central_packet_time),
            ("storage_unit_time", self.storage_unit_time),
            ("storage_packet_time", self.storage_packet_time),
            ("disk_seek", self.disk_seek),
            ("disk_latency", self.disk_latency),
            ("think_time", self.think_time),
        ] {
            check(
                nonneg(v),
                name,
                v,
                "must be a finite number of seconds >= 0",
            )?;
        }
        check(pos(self.mss), "mss", self.mss, "must be > 0 bytes")?;
        check(
            pos(self.frame_bytes),
            "frame_bytes",
            self.frame_bytes,
            "must be > 0 bytes",
        )?;
        check(
            pos(self.ethernet_rate),
            "ethernet_rate",
            self.ethernet_rate,
            "must be > 0 bytes per second",
        )?;
        check(
            pos(self.disk_rate),
            "disk_rate",
            self.disk_rate,
            "must be > 0 bytes per second",
        )?;
        Ok(())
    }

    /// Service demands from equations (2)-(10), implemented as printed:
    ///
    /// ```text
    /// (4)/(5) S_mR   = S_m STP/(STP-1) (write) | S_m (read)        bytes_central
    /// (3)     IP_num = ceil(S_mR / MSS)                              ip_packets
    ///         S_sn = S_mR/STP, IP_snum = IP_num/STP
    /// (2)  D_Cm  = T_mpro S_m/STU + (1-P_m) T_mp IP_num              central_cpu
    /// (6)  D_Csn = (1-P_m)/STP (T_snpro S_sn/STU + T_snp IP_snum)    storage_cpu
    /// (7)  D_Nm  = (1-P_m) IP_num Frames_e / TRate_e                 central_nic
    /// (8)  D_Nsn = (1-P_m)/STP IP_snum Frames_e / TRate_e            storage_nic
    /// (9)  D_Net = (1-P_m) S_mR / TRate_e                            network
    /// (10) D_d   = (1-P_m)/STP (1-P_sn) (Seek + Iatency + STU/TRate_d) S_sn/STU   disk
    /// ```
    pub fn demands(&self) -> Result<RaidDemands> {
        self.validate()?;
        let stp = f64::from(self.stripe_width);
        let miss = 1.0 - self.central_cache_hit;
        let bytes_central = match self.op {
            RaidOp::Write => self.job_bytes * stp / (stp - 1.0),
            RaidOp::Read => self.job_bytes,
        };
        let ip_packets = (bytes_central / self.mss).ceil();
        let bytes_per_storage = bytes_central / stp;
        let storage_ip_packets = ip_packets / stp;
        let central_cpu = self.central_unit_time * self.job_bytes / self.stripe_unit
            + miss * self.central_packet_time * ip_packets;
        let storage_cpu = miss / stp
            * (self.storage_unit_time * bytes_per_storage / self.stripe_unit
                + self.storage_packet_time * storage_ip_packets);
        let central_nic = miss * ip_packets * self.frame_bytes / self.ethernet_rate;
        let storage_nic = miss / stp * storage_ip_packets * self.frame_bytes / self.ethernet_rate;
        let network = miss * bytes_central / self.ethernet_rate;
        let disk = miss / stp
            * (1.0 - self.storage_cache_hit)
            * (self.disk_seek + self.disk_latency + self.stripe_unit / self.disk_rate)
            * bytes_per_storage
            / self.stripe_unit;
        Ok(RaidDemands {
            central_cpu,
            central_nic,
            network,
            storage_cpu,
            storage_nic,
            disk,
            storage_servers: self.storage_servers,
            think_time: self.think_time,
            bytes_central,
            bytes_per_storage,
            ip_packets,
            storage_ip_packets,
        })
    }
}

/// Service demands of one job, seconds, with the intermediate quantities.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RaidDemands {
    /// D_Cm, eq. (2).
    pub central_cpu: f64,
    /// D_Nm, eq. (7).
    pub central_nic: f64,
    /// D_Net, eq. (9).
    pub network: f64,
    /// D_Csn, eq. (6), at each storage server.
    pub storage_cpu: f64,
    /// D_Nsn, eq. (8), at each storage server.
    pub storage_nic: f64,
    /// D_d, eq. (10), at each storage server.
    pub disk: f64,
    /// Storage servers (each contributes the three stations above).
    pub storage_servers: u32,
    /// Think time Z, seconds.
    pub think_time: f64,
    /// S_mR5, eqs. (4)/(5), bytes.
    pub bytes_central: f64,
    /// S_sn = S_mR5/STP, bytes.
    pub bytes_per_storage: f64,
    /// IP_num, eq. (3).
    pub ip_packets: f64,
    /// IP_snum = IP_num/STP.
    pub storage_ip_packets: f64,
}

impl RaidDemands {
    /// The closed network: `central-cpu`, `central-nic`, `network`, then
    /// `sN-cpu`, `sN-nic`, `sN-disk` for each storage server N = 1, 2, ...
    pub fn network(&self) -> Result<ClosedNetwork> {
        let mut stations = vec![
            Station::queueing("central-cpu", self.central_cpu),
            Station::queueing("central-nic", self.central_nic),
            Station::queueing("network", self.network),
        ];
        for s in 1..=self.storage_servers {
            stations.push(Station::queueing(format!("s{s}-cpu"), self.storage_cpu));
            stations.push(Station::queueing(format!("s{s}-nic"), self.storage_nic));
            stations.push(Station::queueing(format!("s{s}-disk"), self.disk));
        }
        ClosedNetwork::new(stations, self.think_time)
    }

    /// Named demands of the six station types, for tables.
    pub fn named(&self) -> [(&'static str, &'static str, f64); 6] {
        [
            ("central-cpu", "D_Cm (2)", self.central_cpu),
            ("central-nic", "D_Nm (7)", self.central_nic),
            ("network", "D_Net (9)", self.network),
            ("storage-cpu", "D_Csn (6)", self.storage_cpu),
            ("storage-nic", "D_Nsn (8)", self.storage_nic),
            ("disk", "D_d (10)", self.disk),
        ]
    }
}

/// Exact MVA and bounds at one population.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RaidPoint {
    /// Concurrent jobs N.
    pub customers: u32,
    /// Exact MVA throughput, jobs per second.
    pub throughput: f64,
    /// Exact MVA response time R(N), seconds.
    pub response_time: f64,
    /// Asymptotic and balanced job bounds.
    pub bounds: Bounds,
}

/// R(N) for a list of populations, with the demands behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RaidCurve {
    /// The parameters used.
    pub params: RaidParams,
    /// The demands they give.
    pub demands: RaidDemands,
    /// One point per population, in the order asked.
    pub points: Vec<RaidPoint>,
}

/// Default populations: N = 1..=10 concurrent jobs.
pub fn default_customers() -> Vec<u32> {
    (1..=10).collect()
}

/// Exact MVA and bounds of the model at each population in `customers`.
pub fn raid_curve(params: &RaidParams, customers: &[u32]) -> Result<RaidCurve> {
    let demands = params.demands()?;
    let net = demands.network()?;
    let solved = exact_mva_points(&net, customers)?;
    let points = customers
        .iter()
        .zip(&solved)
        .map(|(&n, s)| {
            Ok(RaidPoint {
                customers: n,
                throughput: s.throughput,
                response_time: s.response_time,
                bounds: bounds(&net, n)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RaidCurve {
        params: params.clone(),
        demands,
        points,
    })
}

/// What a sweep varies (the paper's figures 3-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum SweepKind {
    /// Figure 4: Ethernet rate TRate_e, in Mb/s.
    Bandwidth,
    /// Figure 5: central cache hit rate P_m.
    CacheHit,
    /// Figure 6: central CPU speed, relative to the paper's PIII 650
    /// (T_mpro and T_mp divided by it).
    Cpu,
    /// Figure 7: storage-server CPU speed, relative (T_snpro, T_snp).
    StorageCpu,
    /// Figure 8: disk transfer rate TRate_d, in MB/s.
    Disk,
    /// Figure 3: concurrent jobs N only (the values are populations).
    Concurrency,
}

impl SweepKind {
    /// Every kind, in figure order.
    pub const ALL: [Self; 6] = [
        Self::Concurrency,
        Self::Bandwidth,
        Self::CacheHit,
        Self::Cpu,
        Self::StorageCpu,
        Self::Disk,
    ];

    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bandwidth => "bandwidth",
            Self::CacheHit => "cache-hit",
            Self::Cpu => "cpu",
            Self::StorageCpu => "storage-cpu",
            Self::Disk => "disk",
            Self::Concurrency => "concurrency",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The paper's figure number.
    pub fn figure(self) -> u32 {
        match self {
            Self::Concurrency => 3,
            Self::Bandwidth => 4,
            Self::CacheHit => 5,
            Self::Cpu => 6,
            Self::StorageCpu => 7,
            Self::Disk => 8,
        }
    }

    /// What the value means, with its unit.
    pub fn label(self) -> &'static str {
        match self {
            Self::Bandwidth => "network bandwidth (Mb/s)",
            Self::CacheHit => "central cache hit rate",
            Self::Cpu => "central CPU speed (x PIII 650)",
            Self::StorageCpu => "storage-server CPU speed (x PIII 650)",
            Self::Disk => "disk transfer rate (MB/s)",
            Self::Concurrency => "concurrent jobs",
        }
    }

    /// Short legend prefix for one value.
    pub fn short(self) -> &'static str {
        match self {
            Self::Bandwidth => "Mb/s",
            Self::CacheHit => "P_m",
            Self::Cpu => "CPU x",
            Self::StorageCpu => "storage CPU x",
            Self::Disk => "disk MB/s",
            Self::Concurrency => "N",
        }
    }

    /// Values swept by default.
    pub fn default_values(self) -> Vec<f64> {
        match self {
            Self::Bandwidth => vec![10.0, 50.0, 100.0, 500.0, 1000.0],
            Self::CacheHit => vec![0.0, 0.2, 0.4, 0.6, 0.8],
            Self::Cpu | Self::StorageCpu => vec![0.5, 1.0, 2.0, 4.0],
            Self::Disk => vec![10.0, 20.0, 35.0, 70.0, 140.0],
            Self::Concurrency => (1..=10).map(f64::from).collect(),
        }
    }

    /// `base` with this sweep's parameter set to `value`. For
    /// [`SweepKind::Concurrency`] the parameters do not change.
    pub fn apply(self, base: &RaidParams, value: f64) -> Result<RaidParams> {
        let mut p = base.clone();
        let positive =
            |name: &str| check(value.is_finite() && value > 0.0, name, value, "must be > 0");
        match self {
            Self::Bandwidth => {
                positive("bandwidth")?;
                p.ethernet_rate = value * 1e6 / 8.0;
            }
            Self::CacheHit => p.central_cache_hit = value,
            Self::Cpu => {
                positive("cpu")?;
                p.central_unit_time = base.central_unit_time / value;
                p.central_packet_time = base.central_packet_time / value;
            }
            Self::StorageCpu => {
                positive("storage-cpu")?;
                p.storage_unit_time = base.storage_unit_time / value;
                p.storage_packet_time = base.storage_packet_time / value;
            }
            Self::Disk => {
                positive("disk")?;
                p.disk_rate = value * 1e6;
            }
            Self::Concurrency => {}
        }
        p.validate()?;
        Ok(p)
    }
}

/// One value of a swept parameter and the curve it gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSeries {
    /// Value of the swept parameter (in the sweep's unit); `None` for a
    /// concurrency sweep.
    pub value: Option<f64>,
    /// Demands and R(N) at that value.
    pub curve: RaidCurve,
}

/// A parameter sweep: one curve per value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// What was varied.
    pub kind: SweepKind,
    /// The paper's figure this corresponds to.
    pub figure: u32,
    /// What the value means.
    pub label: String,
    /// One series per value.
    pub series: Vec<SweepSeries>,
}

/// Sweeps `kind` over `values` at the populations `customers`. For
/// [`SweepKind::Concurrency`] the values are the populations and
/// `customers` is ignored; the result has a single series.
pub fn sweep(
    base: &RaidParams,
    kind: SweepKind,
    values: &[f64],
    customers: &[u32],
) -> Result<Sweep> {
    if values.is_empty() {
        return Err(ModelError::InvalidParameter {
            name: kind.name().into(),
            value: f64::NAN,
            reason: "a sweep needs at least one value".into(),
        });
    }
    let series = if kind == SweepKind::Concurrency {
        let ns = values
            .iter()
            .map(|&v| {
                check(
                    v.fract() == 0.0 && (1.0..=f64::from(u32::MAX)).contains(&v),
                    "concurrency",
                    v,
                    "populations must be whole numbers >= 1",
                )?;
                Ok(v as u32)
            })
            .collect::<Result<Vec<u32>>>()?;
        vec![SweepSeries {
            value: None,
            curve: raid_curve(base, &ns)?,
        }]
    } else {
        values
            .iter()
            .map(|&v| {
                Ok(SweepSeries {
                    value: Some(v),
                    curve: raid_curve(&kind.apply(base, v)?, customers)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    Ok(Sweep {
        kind,
        figure: kind.figure(),
        label: kind.label().into(),
        series,
    })
}
