//! `sluice bench raid`: the networked RAID paper's setting on one host.
//! Every member is a `sluice serve` process with a memory export in a
//! network namespace of its own, behind a veth link shaped with `tc tbf`
//! (100 Mbit/s by default, `--link-rate`); the central server (the head,
//! exporting the array) and the bench's client run in the root namespace
//! on loopback, so the members' links, not the two CPUs, are the
//! bottleneck.
//!
//! Experiments (`--cases`, default all):
//!
//! - `jobs`: RAID 5 over three members, 16 KiB unit; response time R(N)
//!   and throughput X(N) of N = 1..32 concurrent jobs (one job: a random
//!   128 KiB write, four full stripes; N workers at queue depth 1). The
//!   head's and members' metrics are scraped around the sweep and give
//!   each station's demand by the utilization law (`sluice-model`'s
//!   [`Calibration`](sluice_model::calibration::Calibration)): the head's CPU, the members' CPUs and each
//!   direction of the members' links (the bytes its `tbf` shaper sent
//!   over the rate it charges); the members work on each job side by
//!   side, so those stations take the largest member's demand. A job's
//!   link transfers and CPU work overlap, so exact MVA is drawn both
//!   ways (each overlapping branch on its own with the job as slow as
//!   the slowest, and every station in series), and the balanced job
//!   bounds take their lower edge from the slowest branch and their
//!   upper edge from the stations in series. They are drawn beside the
//!   measurement, with the paper's equations (2)-(10) ([`raid_curve`](sluice_model::raid::raid_curve))
//!   evaluated with the calibrated per-unit CPU times and the link's
//!   measured rate.
//! - `raid0`: 1 MiB sequential reads (queue depth 4) over RAID 0 of 1..4
//!   members, against one member.
//! - `full-stripe`: 1 MiB sequential writes (32 full stripes) over RAID 5,
//!   against one member served straight to the client over its link.
//! - `small-writes`: 4 KiB random writes over RAID 5, with the member
//!   requests per write counted from the head's metrics, and the
//!   throughput the jobs sweep's calibrated network (calibrated again
//!   over this run) predicts at its requests in flight.
//! - `degraded`: 1 MiB sequential reads over RAID 5, healthy, then with
//!   one member's link cut by an nftables rule (the head marks it failed
//!   after its request timeout and reconstructs from parity).
//! - `rebuild`: an idle RAID 5 with one member cut off; `sluice raid
//!   replace` rebuilds onto a fresh member behind a fourth link, with the
//!   head's rebuild rate limit off; the rebuild's rate against the link's.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::peers::{self, PeerKind, PeerServer};
use sluice_bench::runner::{self, Endpoint, RunOptions, RunResult, ServerCpu};
use sluice_bench::workload::{Limit, Pattern, Rw, Size, Workload};
use sluice_client::{NbdUri, Target as NbdTarget};
use sluice_model::prometheus::{parse as parse_metrics, ServerCounters};
use sluice_model::raid::RaidParams;
use sluice_model::text::{compact, scaled};
use sluice_model::CalibratedDemand;

use crate::link::{Link, LinkMeasurement, LinkRate, ShaperStats};
use crate::setup::PresetOptions;

mod cases;
mod jobs;
mod report;

use cases::{degraded, full_stripe, raid0, rebuild, small_writes};
use jobs::jobs_sweep;
use report::print_report;

/// The paper's stripe unit.
const UNIT: u64 = 16 << 10;
/// A job of the `jobs` sweep: four full stripes of RAID 5 over three.
const JOB_BYTES: u32 = 128 << 10;
/// Where each member listens inside its own namespace.
const MEMBER_PORT: u16 = 10809;
const MEMBER_METRICS_PORT: u16 = 9109;
/// The default link when `--link-rate` is not given: the paper's Ethernet.
const DEFAULT_RATE: LinkRate = LinkRate(100_000_000);
/// Member patience: a cut member is failed after this (and the reconnect
/// window), long enough that a loaded 100 Mbit/s link never trips it.
const MEMBER_OPTIONS: &str = "timeout=5s,reconnect=1s";

/// One experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum RaidCase {
    /// R(N) and X(N) for N = 1..32 with MVA and the bounds.
    Jobs,
    /// RAID 0 1 MiB sequential reads vs members 1..4.
    Raid0,
    /// RAID 5 full-stripe writes vs one member.
    FullStripe,
    /// RAID 5 4 KiB random writes, member requests per write.
    SmallWrites,
    /// RAID 5 1 MiB reads, healthy vs one member cut off.
    Degraded,
    /// Rebuild rate of an idle RAID 5 vs one link's rate.
    Rebuild,
}

impl RaidCase {
    const ALL: [Self; 6] = [
        Self::Jobs,
        Self::Raid0,
        Self::FullStripe,
        Self::SmallWrites,
        Self::Degraded,
        Self::Rebuild,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Jobs => "jobs",
            Self::Raid0 => "raid0",
            Self::FullStripe => "full-stripe",
            Self::SmallWrites => "small-writes",
            Self::Degraded => "degraded",
            Self::Rebuild => "rebuild",
        }
    }
}

/// Options of `sluice bench raid` beyond the presets' common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct RaidArgs {
    /// Experiments, comma-separated: jobs, raid0, full-stripe,
    /// small-writes, degraded, rebuild (default: all).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub cases: Option<Vec<RaidCase>>,
    /// Largest number of concurrent jobs of the `jobs` sweep.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_jobs: u32,
    /// Bytes of each member's memory export (default 256M; 64M with
    /// --quick). A rebuild writes all of one member.
    #[arg(long)]
    pub member_size: Option<Size>,
}

/// One measured line of a table.
#[derive(Debug, Clone, Serialize)]
pub struct RaidRow {
    /// Experiment.
    pub case: String,
    /// What was measured ("raid5 over 3", "one member", ...).
    pub config: String,
    /// Members of the array (0 for a member served directly).
    pub members: u32,
    /// MiB/s (for rebuild: bytes rebuilt per second).
    pub mib_s: f64,
    /// Operations per second.
    pub iops: f64,
    /// Mean response time, microseconds.
    pub mean_us: f64,
    /// Against the experiment's reference (one member, healthy, the link).
    pub ratio: Option<f64>,
    /// What the ratio is against.
    pub ratio_to: String,
    /// Member requests per client write (`small-writes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member_ios_per_write: Option<f64>,
    /// Throughput the calibrated model predicts for this run
    /// (`small-writes`: exact MVA of the head and members at the run's
    /// requests in flight), operations per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_iops: Option<f64>,
    /// The run, when the bench's client made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunResult>,
}

/// One population of the `jobs` sweep, measured and modelled.
#[derive(Debug, Clone, Serialize)]
pub struct JobsPoint {
    /// Concurrent jobs N.
    pub jobs: u32,
    /// Measured throughput, jobs per second.
    pub x: f64,
    /// Measured mean response time, seconds: the mean over the run's
    /// requests, the first N (issued at once into an idle array, the
    /// ramp-up) included.
    pub r: f64,
    /// N / X, seconds: the steady-state mean response time by Little's
    /// law (N jobs always in flight, no think time; X is unbiased by the
    /// ramp-up, R is not). What the model and bounds are compared with.
    pub little_r: f64,
    /// Exact MVA of the calibrated network: X(N), R(N).
    pub mva_x: f64,
    /// See `mva_x`.
    pub mva_r: f64,
    /// (R_mva - N/X) / (N/X).
    pub mva_error: f64,
    /// The fork-join estimate (`fork_join_mva_points`): each of the job's
    /// overlapping branches (links, CPUs) by exact MVA, R the largest.
    pub fork_join_r: f64,
    /// (R_fork_join - N/X) / (N/X).
    pub fork_join_error: f64,
    /// Balanced job bounds on R(N), [lower, upper], seconds: the lower
    /// edge of the slowest of the job's overlapping branches (links, CPUs),
    /// the upper edge of every station in series (`fork_join_bounds`).
    pub bjb_r: [f64; 2],
    /// Whether the measured steady-state R(N) (N/X) lies inside them.
    pub inside_bounds: bool,
    /// The paper's equations with calibrated inputs: R(N), seconds.
    pub paper_r: Option<f64>,
}

/// The `jobs` sweep and its model.
#[derive(Debug, Clone, Serialize)]
pub struct JobsModel {
    /// Jobs completed between the scrapes around the sweep.
    pub completions: u64,
    /// Seconds between the scrapes.
    pub interval_s: f64,
    /// The largest (N/X - R) / (N/X) of the sweep: how far the measured
    /// R and X disagree by Little's law (N = X R with no think time).
    /// Each run starts with N jobs issued at once into an idle array,
    /// and those first N see about half the steady response time, so
    /// the mean R of a short run is low by about N^2 / (2 X ops); the
    /// model is therefore compared with N/X.
    pub little_gap: f64,
    /// How far below the bounds' lower edge a point may lie and still be
    /// inside: the resolution of a run's throughput, (one shaper bucket's
    /// time at the link's rate + one job's time at the bottleneck) over
    /// the run's length. At saturation the measurement is the edge.
    pub bound_slack: f64,
    /// Demands by the utilization law of the stations the model solves:
    /// `head-cpu`, `members-cpu`, `members-link-up` and
    /// `members-link-down` (the members work on each job side by side,
    /// so each is the largest member's).
    pub demands: Vec<CalibratedDemand>,
    /// The same per member (`mN-cpu`, `mN-link-up`, `mN-link-down`).
    pub member_demands: Vec<CalibratedDemand>,
    /// The paper's parameters with the calibrated CPU times and the
    /// measured link rate (`None` when they could not be derived).
    pub paper_params: Option<RaidParams>,
    /// Per population.
    pub points: Vec<JobsPoint>,
}

/// What `sluice bench raid` writes to `raid.json`.
#[derive(Debug, Serialize)]
pub struct RaidReport {
    /// "raid".
    pub preset: String,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Load average at the end.
    pub loadavg_end: String,
    /// Quick sizes.
    pub quick: bool,
    /// Seconds per timed run.
    pub duration_s: f64,
    /// Bytes of each member's memory export.
    pub member_bytes: u64,
    /// Every link, as measured when it was made (member i behind link i).
    pub links: Vec<LinkMeasurement>,
    /// Caveats and experiments that failed.
    pub notes: Vec<String>,
    /// Measured rows.
    pub rows: Vec<RaidRow>,
    /// The `jobs` sweep with its model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobs: Option<JobsModel>,
}

/// The links and the binary every experiment shares.
struct Bed<'a> {
    opts: &'a PresetOptions,
    bin: PathBuf,
    links: Vec<Link>,
    measured: Vec<LinkMeasurement>,
    rate: LinkRate,
    member_bytes: u64,
    duration: Duration,
    /// Bytes of the volume the workloads use.
    region: u64,
    dir: tempfile::TempDir,
}

/// A member server inside its link's namespace.
struct Member {
    server: PeerServer,
    metrics: SocketAddr,
    /// The index of the link it is behind.
    link: usize,
}

impl Member {
    fn uri_string(&self) -> String {
        format!("nbd://{}/m", self.server.address())
    }

    fn uri(&self) -> NbdUri {
        NbdUri::new(NbdTarget::Tcp(self.server.address()), "m")
    }
}

/// The central server exporting the array as `vol`.
struct Head {
    server: PeerServer,
    metrics: SocketAddr,
    admin: PathBuf,
}

impl Head {
    fn endpoint(&self) -> Endpoint {
        Endpoint::Nbd {
            uri: NbdUri::new(NbdTarget::Tcp(self.server.address()), "vol"),
            server_cpu: self.server.pid().map_or(ServerCpu::Unknown, ServerCpu::Pid),
        }
    }
}

/// An array: its members and head (stopped on drop, head first).
struct Array {
    head: Head,
    members: Vec<Member>,
}

impl<'a> Bed<'a> {
    fn link(&mut self, i: usize) -> Result<&Link> {
        while self.links.len() <= i {
            let link = Link::create(Some(self.rate)).context(
                "the RAID presets need root, network namespaces, veth and tc tbf (iproute2)",
            )?;
            let m = link.measure()?;
            eprintln!(
                "member link {}: {} ({})",
                self.links.len(),
                m.line(),
                link.namespace().name()
            );
            self.links.push(link);
            self.measured.push(m);
        }
        Ok(&self.links[i])
    }

    fn member(&mut self, i: usize) -> Result<Member> {
        let bin = self.bin.display().to_string();
        let size = self.member_bytes;
        let link = self.link(i)?;
        let ip = IpAddr::V4(link.server_addr());
        let listen = SocketAddr::new(ip, MEMBER_PORT);
        let metrics = SocketAddr::new(ip, MEMBER_METRICS_PORT);
        let argv: Vec<String> = [
            bin.as_str(),
            "serve",
            "--listen",
            &listen.to_string(),
            "--export",
            &format!("m=mem:{size}"),
            "--metrics",
            &metrics.to_string(),
            "--spin-us",
            "0",
        ]
        .map(str::to_owned)
        .to_vec();
        let server = PeerServer::launch(
            &format!("member {i}"),
            PeerKind::Sluice,
            &argv,
            (ip, MEMBER_PORT),
            Some(link),
        )?;
        Ok(Member {
            server,
            metrics,
            link: i,
        })
    }

    /// Every member's counters, and what its link's shapers have sent.
    fn member_snapshots(&self, array: &Array) -> Result<Vec<Snapshot>> {
        array
            .members
            .iter()
            .map(|m| {
                let link = self
                    .links
                    .get(m.link)
                    .ok_or_else(|| anyhow!("member behind link {} has no link", m.link))?;
                Ok(Snapshot {
                    shaped: Some(link.shaper_stats()?),
                    ..snapshot(m.metrics, "m")?
                })
            })
            .collect()
    }

    /// `level` over members on links `links`, created and served.
    fn array(&mut self, level: &str, links: &[usize]) -> Result<Array> {
        let members = links
            .iter()
            .map(|&i| self.member(i))
            .collect::<Result<Vec<_>>>()?;
        let uris: Vec<String> = members.iter().map(Member::uri_string).collect();
        // The write-intent journal in the preset's own folder, not in
        // the default folder under the caller's working directory.
        let journal = self
            .dir
            .path()
            .join(format!("journal-{level}-{}", links.len()));
        let spec = format!(
            "{level}:unit={}K,members={},{MEMBER_OPTIONS},journal={}",
            UNIT >> 10,
            uris.join(","),
            journal.display()
        );
        self.sluice(&["raid", "create", &spec])?;
        let port = peers::free_port()?;
        let metrics_port = peers::free_port()?;
        let admin = self
            .dir
            .path()
            .join(format!("admin-{level}-{}.sock", links.len()));
        let lo = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        let argv: Vec<String> = [
            self.bin.display().to_string(),
            "serve".into(),
            "--listen".into(),
            SocketAddr::new(lo, port).to_string(),
            "--export".into(),
            format!("vol={spec}"),
            "--metrics".into(),
            SocketAddr::new(lo, metrics_port).to_string(),
            "--spin-us".into(),
            "0".into(),
            "--admin".into(),
            format!("unix:{}", admin.display()),
            "--rebuild-rate".into(),
            "0".into(),
        ]
        .to_vec();
        let server = PeerServer::launch("head", PeerKind::Sluice, &argv, (lo, port), None)?;
        Ok(Array {
            head: Head {
                server,
                metrics: SocketAddr::new(lo, metrics_port),
                admin,
            },
            members,
        })
    }

    /// Runs `sluice ARGS`, which must succeed within 5 minutes.
    fn sluice(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.bin)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {} {}", self.bin.display(), args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "`sluice {}` failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn run(&self, endpoint: &Endpoint, w: &Workload, label: &str) -> Result<RunResult> {
        let r = runner::run_workload(
            endpoint,
            w,
            &RunOptions {
                progress: self.opts.progress,
                prefill: false,
                target_label: label.to_owned(),
            },
        )
        .with_context(|| format!("{} against {label}", w.label()))?;
        eprintln!(
            "{label:<18} {:<22} {:>8} MiB/s {:>9} IOPS  mean {:>8} us",
            r.case,
            compact(r.mib_s),
            scaled(r.iops),
            compact(r.latency.mean_us)
        );
        Ok(r)
    }

    fn workload(&self, pattern: Pattern, rw: Rw, bs: u32, qd: u32, workers: u32) -> Workload {
        let mut w = Workload::new(pattern, rw, bs, qd);
        w.workers = workers;
        w.limit = Limit::Time(self.duration);
        w.region_len = self.region;
        w
    }

    /// Writes the workloads' region once, so reads move real data.
    fn prefill(&self, endpoint: &Endpoint) -> Result<()> {
        runner::prefill(endpoint, (0, self.region), 0, false).context("cannot fill the volume")
    }
}

/// The body of `GET /metrics` at `addr`.
fn scrape(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("cannot connect to the metrics at {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .context("metrics socket")?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .with_context(|| format!("cannot ask {addr} for metrics"))?;
    let mut text = String::new();
    s.read_to_string(&mut text)
        .with_context(|| format!("cannot read the metrics of {addr}"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("the metrics reply of {addr} has no end of headers"))?;
    if !head.lines().next().is_some_and(|l| l.contains(" 200")) {
        bail!(
            "GET /metrics at {addr}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_owned())
}

/// Sum of the samples named `name` whose labels include every `labels`.
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
    let e = parse_metrics(text).context("cannot parse the metrics")?;
    Ok(e.samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
        .sum())
}

/// Counters of one server at one instant.
struct Snapshot {
    at: Instant,
    counters: ServerCounters,
    /// For a member: what its link's shapers have sent so far.
    shaped: Option<ShaperStats>,
}

fn snapshot(addr: SocketAddr, export: &str) -> Result<Snapshot> {
    let text = scrape(addr)?;
    Ok(Snapshot {
        at: Instant::now(),
        counters: ServerCounters::from_text(&text, Some(export))
            .with_context(|| format!("the metrics of {addr}"))?,
        shaped: None,
    })
}

fn cpu_delta(a: &Snapshot, b: &Snapshot) -> Result<f64> {
    match (
        a.counters.process_cpu_seconds,
        b.counters.process_cpu_seconds,
    ) {
        (Some(x), Some(y)) => Ok((y - x).max(0.0)),
        _ => bail!("the server's metrics have no process_cpu_seconds_total (not Linux?)"),
    }
}

fn row(case: RaidCase, config: &str, members: u32, r: RunResult) -> RaidRow {
    RaidRow {
        case: case.name().into(),
        config: config.into(),
        members,
        mib_s: r.mib_s,
        iops: r.iops,
        mean_us: r.latency.mean_us,
        ratio: None,
        ratio_to: String::new(),
        member_ios_per_write: None,
        model_iops: None,
        run: Some(r),
    }
}

fn set_ratio(r: &mut RaidRow, reference: f64, to: &str) {
    r.ratio = (reference > 0.0).then(|| r.mib_s / reference);
    r.ratio_to = to.into();
}

/// `sluice bench raid`.
pub fn raid(opts: &PresetOptions, args: &RaidArgs) -> Result<RaidReport> {
    let bin = peers::resolve_sluice_bin(opts.sluice_bin.as_deref())?;
    if let Some(why) = crate::link::unavailable() {
        bail!("{why}");
    }
    let machine = Machine::probe();
    let member_bytes = args
        .member_size
        .map_or(if opts.quick { 64 << 20 } else { 256 << 20 }, |s| s.0);
    if member_bytes < 16 << 20 {
        bail!("--member-size: at least 16M (the workloads use half a member)");
    }
    let mut bed = Bed {
        opts,
        bin,
        links: Vec::new(),
        measured: Vec::new(),
        rate: opts.link_rate.unwrap_or(DEFAULT_RATE),
        member_bytes,
        duration: opts
            .duration
            .unwrap_or(Duration::from_secs(if opts.quick { 1 } else { 3 })),
        // Half a member fits every volume, RAID 0 over one included.
        region: (if opts.quick { 24 << 20 } else { 96 << 20 }).min(member_bytes / 2),
        dir: crate::setup::scratch_dir("raid")?,
    };
    let cases = args.cases.clone().unwrap_or_else(|| RaidCase::ALL.to_vec());
    let mut rows = Vec::new();
    let mut notes = vec![format!(
        "members: sluice serve with a {} memory export each, behind its own {} link; head and client on loopback",
        sluice_types::format_size(member_bytes),
        bed.rate
    )];
    let mut jobs = None;
    let t0 = Instant::now();
    for case in cases {
        eprintln!("# raid {}", case.name());
        let done = match case {
            RaidCase::Jobs => jobs_sweep(&mut bed, args.max_jobs).map(|(r, m)| {
                match m {
                    Ok(m) => jobs = Some(m),
                    Err(e) => notes.push(format!("jobs: no model: {e:#}")),
                }
                r
            }),
            RaidCase::Raid0 => raid0(&mut bed),
            RaidCase::FullStripe => full_stripe(&mut bed),
            RaidCase::SmallWrites => small_writes(&mut bed),
            RaidCase::Degraded => degraded(&mut bed),
            RaidCase::Rebuild => rebuild(&mut bed),
        };
        match done {
            Ok(r) => rows.extend(r),
            Err(e) => {
                eprintln!("raid {}: {e:#}", case.name());
                notes.push(format!("{} failed: {e:#}", case.name()));
            }
        }
    }
    let report = RaidReport {
        preset: "raid".into(),
        command: crate::setup::command_line(),
        machine,
        loadavg_end: Machine::probe().loadavg,
        quick: opts.quick,
        duration_s: bed.duration.as_secs_f64(),
        member_bytes,
        links: bed.measured.clone(),
        notes,
        rows,
        jobs,
    };
    print_report(opts, &report, t0.elapsed())?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::jobs::paper_params;
    use super::*;

    #[test]
    fn the_papers_equations_give_back_the_calibrated_cpu_demands() {
        // 1000 jobs; the head busy 2 s, the members 0.3, 0.3 and 0.6 s.
        let p = paper_params(2.0, &[0.3, 0.3, 0.6], 1000, 95.0).unwrap();
        let d = p.demands().unwrap();
        assert!((d.central_cpu - 2e-3).abs() < 1e-12, "{d:?}");
        // The members' mean, 0.4 ms per job, at each storage server.
        assert!((d.storage_cpu - 4e-4).abs() < 1e-12, "{d:?}");
        // 192 KiB of data and parity per 128 KiB job over 95 Mbit/s.
        let wire = f64::from(JOB_BYTES) * 1.5 / (95e6 / 8.0);
        assert!((d.network - wire).abs() < 1e-12, "{d:?}");
        // Memory exports: no seek, no rotation, no transfer to speak of.
        assert!(d.disk < 1e-7, "{d:?}");
        assert!(paper_params(2.0, &[0.3], 0, 95.0).is_none());
        assert!(paper_params(2.0, &[], 10, 95.0).is_none());
    }
}
