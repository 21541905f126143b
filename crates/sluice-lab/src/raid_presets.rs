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
//!   [`Calibration`]): the head's CPU, the members' CPUs and each
//!   direction of the members' links (the bytes its `tbf` shaper sent
//!   over the rate it charges); the members work on each job side by
//!   side, so those stations take the largest member's demand. A job's
//!   link transfers and CPU work overlap, so exact MVA is drawn both
//!   ways (each overlapping branch on its own with the job as slow as
//!   the slowest, and every station in series), and the balanced job
//!   bounds take their lower edge from the slowest branch and their
//!   upper edge from the stations in series. They are drawn beside the
//!   measurement, with the paper's equations (2)-(10) ([`raid_curve`])
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
use sluice_model::plot::{Axes, Chart, Figure, Legend, LineStyle, Series, XAxis};
use sluice_model::prometheus::{parse as parse_metrics, ServerCounters};
use sluice_model::raid::{raid_curve, RaidOp, RaidParams};
use sluice_model::text::{compact, scaled, Table};
use sluice_model::{
    exact_mva_points, fork_join_bounds, fork_join_mva_points, CalibratedDemand, Calibration,
    ClosedNetwork, StationObservation,
};

use crate::epilogue::Epilogue;
use crate::link::{Link, LinkMeasurement, LinkRate, ShaperStats};
use crate::setup::PresetOptions;

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

fn print_report(opts: &PresetOptions, report: &RaidReport, wall: Duration) -> Result<()> {
    let title = format!(
        "raid ({:.1} s per run, wall {:.0} s)",
        report.duration_s,
        wall.as_secs_f64()
    );
    let mut t = Table::new([
        "case",
        "configuration",
        "MiB/s",
        "IOPS",
        "mean us",
        "ratio",
        "against",
        "member I/Os per write",
    ]);
    for r in &report.rows {
        t.row([
            r.case.clone(),
            r.config.clone(),
            compact(r.mib_s),
            scaled(r.iops),
            compact(r.mean_us),
            r.ratio.map_or_else(|| "-".into(), |x| format!("{x:.2}")),
            r.ratio_to.clone(),
            r.member_ios_per_write
                .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
        ]);
    }
    let mut epilogue = Epilogue::new("raid", title, &report.machine, &report.notes)
        .links(Some("member"), &report.links)
        .table("", t);
    for r in &report.rows {
        if let Some(model) = r.model_iops {
            let line = format!(
                "{}: {} IOPS measured, {} IOPS predicted by the calibrated model (exact MVA, {} in flight): {:+.0} %\n",
                r.case,
                scaled(r.iops),
                scaled(model),
                SMALL_WRITES_IN_FLIGHT,
                (r.iops - model) / model * 100.0
            );
            epilogue = epilogue.text(line);
        }
    }
    if let Some(j) = &report.jobs {
        epilogue = epilogue.table(
            format!(
                "RAID 5 over 3, {} KiB random writes: R(N) measured vs calibrated model (ms)",
                JOB_BYTES >> 10
            ),
            jobs_table(j),
        );
        let mut d = Table::new(["station", "demand ms", "utilization"]);
        for s in j.demands.iter().chain(&j.member_demands) {
            d.row([
                s.name.clone(),
                format!("{:.3}", s.demand * 1e3),
                format!("{:.2}", s.utilization),
            ]);
        }
        let caption = format!(
            "calibrated demands ({} jobs in {:.1} s; R below N/X by up to {:.1} %: the runs' ramp-up; \
             inside the bounds allowing {:.2} % below the lower edge: a run's resolution, a bucket and a job over its length)",
            j.completions,
            j.interval_s,
            j.little_gap * 100.0,
            j.bound_slack * 100.0
        );
        epilogue = epilogue.table(caption, d);
    }
    let charts = charts(report);
    if !charts.is_empty() {
        epilogue = epilogue.figure(Figure {
            title: format!(
                "Networked RAID, members behind {} links",
                report
                    .links
                    .first()
                    .and_then(|l| l.rate_bits)
                    .map_or_else(|| "unshaped".into(), |r| LinkRate(r).to_string())
            ),
            columns: 2,
            charts,
        });
    }
    epilogue.finish(opts, report)
}

fn jobs_table(j: &JobsModel) -> Table {
    let mut t = Table::new([
        "N",
        "X jobs/s",
        "R ms",
        "N/X ms",
        "MVA R ms",
        "error",
        "fork-join R ms",
        "error",
        "BJB R ms",
        "inside",
        "paper eqs R ms",
    ]);
    for p in &j.points {
        t.row([
            p.jobs.to_string(),
            compact(p.x),
            compact(p.r * 1e3),
            compact(p.little_r * 1e3),
            compact(p.mva_r * 1e3),
            format!("{:+.0} %", p.mva_error * 100.0),
            compact(p.fork_join_r * 1e3),
            format!("{:+.0} %", p.fork_join_error * 100.0),
            format!(
                "{}-{}",
                compact(p.bjb_r[0] * 1e3),
                compact(p.bjb_r[1] * 1e3)
            ),
            if p.inside_bounds { "yes" } else { "no" }.into(),
            p.paper_r.map_or_else(|| "-".into(), |r| compact(r * 1e3)),
        ]);
    }
    t
}

fn series(label: &str, points: Vec<(f64, f64)>, style: LineStyle, color: usize) -> Series {
    Series {
        label: label.into(),
        points,
        style,
        color,
    }
}

fn charts(report: &RaidReport) -> Vec<Chart> {
    let mut out = Vec::new();
    if let Some(j) = &report.jobs {
        let pts = |f: &dyn Fn(&JobsPoint) -> f64| -> Vec<(f64, f64)> {
            j.points.iter().map(|p| (f64::from(p.jobs), f(p))).collect()
        };
        let mut r = vec![
            series(
                "measured, N/X (steady state)",
                pts(&|p| p.little_r * 1e3),
                LineStyle::Markers,
                0,
            ),
            series(
                "exact MVA, stations in series",
                pts(&|p| p.mva_r * 1e3),
                LineStyle::Solid,
                1,
            ),
            series(
                "fork-join MVA (links beside CPUs)",
                pts(&|p| p.fork_join_r * 1e3),
                LineStyle::Solid,
                3,
            ),
            series(
                "balanced job bound, lower (slowest branch)",
                pts(&|p| p.bjb_r[0] * 1e3),
                LineStyle::Dashed,
                2,
            ),
            series(
                "balanced job bound, upper (in series)",
                pts(&|p| p.bjb_r[1] * 1e3),
                LineStyle::Dashed,
                2,
            ),
        ];
        if j.points.iter().all(|p| p.paper_r.is_some()) {
            r.push(series(
                "paper eqs (2)-(10)",
                pts(&|p| p.paper_r.unwrap_or(0.0) * 1e3),
                LineStyle::Dotted,
                3,
            ));
        }
        out.push(Chart {
            title: format!("RAID 5, {} KiB writes: R(N)", JOB_BYTES >> 10),
            x_label: "concurrent jobs N".into(),
            y_label: "R(N) ms".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            series: r,
            legend: Legend::UpperLeft,
        });
        out.push(Chart {
            title: "X(N)".into(),
            x_label: "concurrent jobs N".into(),
            y_label: "X(N) jobs/s".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            series: vec![
                series("measured", pts(&|p| p.x), LineStyle::Markers, 0),
                series(
                    "exact MVA, stations in series",
                    pts(&|p| p.mva_x),
                    LineStyle::Solid,
                    1,
                ),
            ],
            legend: Legend::LowerRight,
        });
    }
    let r0: Vec<&RaidRow> = report.rows.iter().filter(|r| r.case == "raid0").collect();
    if !r0.is_empty() {
        let axes = Axes {
            x_label: "members".into(),
            y_label: "MiB/s".into(),
            x_axis: XAxis::Linear,
        };
        let one = r0.iter().find(|r| r.members == 1).map(|r| r.mib_s);
        let mut lines = vec![(
            "RAID 0, 1 MiB sequential reads".to_owned(),
            r0.iter().map(|r| (f64::from(r.members), r.mib_s)).collect(),
        )];
        if let Some(one) = one {
            lines.push((
                "members x one member".into(),
                r0.iter()
                    .map(|r| (f64::from(r.members), one * f64::from(r.members)))
                    .collect(),
            ));
        }
        out.push(axes.chart("RAID 0 read throughput vs members", lines));
    }
    // The results the issue sets a ratio target for, beside the target.
    let targets = [
        ("full-stripe", "raid5 over 3", 1.8),
        ("degraded", "raid5, member 1 cut off", 0.5),
        ("rebuild", "", 0.8),
    ];
    let mut measured = Vec::new();
    let mut wanted = Vec::new();
    for (k, (case, config, target)) in targets.iter().enumerate() {
        let found = report
            .rows
            .iter()
            .find(|r| r.case == *case && (config.is_empty() || r.config == *config));
        if let Some(ratio) = found.and_then(|r| r.ratio) {
            measured.push((k as f64 + 1.0, ratio));
            wanted.push((k as f64 + 1.0, *target));
        }
    }
    if !measured.is_empty() {
        out.push(Chart {
            title: "ratio to the reference, and its target".into(),
            x_label: "1 full-stripe, 2 degraded, 3 rebuild".into(),
            y_label: "ratio".into(),
            x_axis: XAxis::Linear,
            y_log: false,
            series: vec![
                series("measured", measured, LineStyle::Markers, 0),
                series("target", wanted, LineStyle::Markers, 1),
            ],
            legend: Legend::UpperLeft,
        });
    }
    out
}

// ---------------------------------------------------------------- jobs

/// The measured rows, and the model calibrated from them (or why not).
fn jobs_sweep(bed: &mut Bed<'_>, max_jobs: u32) -> Result<(Vec<RaidRow>, Result<JobsModel>)> {
    let ns: Vec<u32> = if bed.opts.quick {
        [1, 2, 4, 8, 16, 32].to_vec()
    } else {
        [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 28, 32].to_vec()
    }
    .into_iter()
    .filter(|&n| n <= max_jobs)
    .collect();
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    let head_before = snapshot(array.head.metrics, "vol")?;
    let members_before = bed.member_snapshots(&array)?;
    let mut rows = Vec::new();
    for &n in &ns {
        let mut w = bed.workload(Pattern::Rand, Rw::Write, JOB_BYTES, 1, n);
        w.name = format!("randwrite-128k-{n}jobs");
        let r = bed.run(&ep, &w, "raid5 over 3")?;
        rows.push(row(RaidCase::Jobs, &format!("{n} jobs"), 3, r));
    }
    let head_after = snapshot(array.head.metrics, "vol")?;
    let members_after = bed.member_snapshots(&array)?;
    let model = jobs_model(
        bed,
        &ns,
        &rows,
        (&head_before, &head_after),
        (&members_before, &members_after),
    );
    Ok((rows, model))
}

/// Calibrates the closed network from the scrapes around the sweep and
/// solves it (and the paper's equations) at every N.
fn jobs_model(
    bed: &Bed<'_>,
    ns: &[u32],
    rows: &[RaidRow],
    (head_before, head_after): (&Snapshot, &Snapshot),
    (members_before, members_after): (&[Snapshot], &[Snapshot]),
) -> Result<JobsModel> {
    let jobs = head_after
        .counters
        .total_requests()
        .saturating_sub(head_before.counters.total_requests());
    let interval = head_after.at.duration_since(head_before.at).as_secs_f64();
    let ForkJoin {
        head_cpu,
        member_cpu,
        member_demands,
        network: cal,
    } = fork_join_calibration(
        jobs,
        (head_before, head_after),
        (members_before, members_after),
    )?;
    let demands = cal.demands().context("calibrating the RAID 5 model")?;
    // Little's law on each point: N = X R (the workers issue the next
    // request as soon as a reply is in: no think time).
    let mut cycles = Vec::new();
    for (k, &n) in ns.iter().enumerate() {
        let measured = rows[k].run.as_ref().ok_or_else(|| anyhow!("no run"))?;
        cycles.push((f64::from(n) / measured.iops, measured.latency.mean_us / 1e6));
    }
    let little_gap = cycles
        .iter()
        .map(|&(cycle, r)| (cycle - r) / cycle)
        .fold(0.0, f64::max);
    // At saturation N/X is N D_max, the bounds' lower edge itself, so a
    // measurement sits on the edge and its resolution decides the side.
    // A run's X counts whole jobs over T: the bottleneck finishes T/D_max
    // of them, give or take one, and every run starts on full buckets
    // (after the idle spell between runs a shaper passes its bucket at
    // once, which the demand, bytes over rate, charges as time). So X can
    // beat 1/D_max by (bucket time + D_max) / T; the lower edges are
    // judged with that slack.
    let run_s = bed.duration.as_secs_f64();
    let bucket_s = members_after
        .iter()
        .filter_map(|m| m.shaped)
        .map(|s| s.burst_bytes / s.rate_bytes_s)
        .fold(0.0, f64::max);
    let d_max = demands.iter().map(|d| d.demand).fold(0.0, f64::max);
    let bound_slack = (bucket_s + d_max) / run_s;
    let net = cal.network(0.0)?;
    let branches = overlapping_branches(&net)?;
    let solved = exact_mva_points(&net, ns)?;
    let overlapped = fork_join_mva_points(&branches, ns)?;
    let rate = bed
        .measured
        .iter()
        .take(3)
        .map(|m| m.up_mbit_s)
        .fold(f64::INFINITY, f64::min);
    let paper_params = paper_params(head_cpu, &member_cpu, jobs, rate);
    let paper = paper_params.as_ref().and_then(|p| raid_curve(p, ns).ok());
    let mut points = Vec::new();
    for (k, &n) in ns.iter().enumerate() {
        let measured = rows[k].run.as_ref().ok_or_else(|| anyhow!("no run"))?;
        let r = measured.latency.mean_us / 1e6;
        let b = fork_join_bounds(&branches, n)?;
        let s = &solved[k];
        let bjb = b.balanced_job.response_time;
        points.push(JobsPoint {
            jobs: n,
            x: measured.iops,
            r,
            little_r: cycles[k].0,
            mva_x: s.throughput,
            mva_r: s.response_time,
            mva_error: (s.response_time - cycles[k].0) / cycles[k].0,
            fork_join_r: overlapped[k].response_time,
            fork_join_error: (overlapped[k].response_time - cycles[k].0) / cycles[k].0,
            bjb_r: bjb,
            inside_bounds: cycles[k].0 >= bjb[0] * (1.0 - bound_slack) && cycles[k].0 <= bjb[1],
            paper_r: paper.as_ref().map(|c| c.points[k].response_time),
        });
    }
    Ok(JobsModel {
        completions: jobs,
        interval_s: interval,
        little_gap,
        bound_slack,
        demands,
        member_demands,
        paper_params,
        points,
    })
}

/// The calibrated network's stations as the branches a job of the sweep
/// (a full-stripe write) runs side by side: the data going up the
/// members' links, the acknowledgements and replies coming down them at
/// the same time, and the CPU work of the head and the members. The
/// head's sends return once the data is in the sockets' buffers and the
/// members take it in as it arrives, so the CPUs work while the links
/// drain; a job alone takes about its link time, not the sum of every
/// demand a product-form network charges it (docs/BENCHMARKS.md,
/// "Networked RAID", measures this at two link rates).
fn overlapping_branches(net: &ClosedNetwork) -> Result<Vec<ClosedNetwork>> {
    let (links, cpus): (Vec<_>, Vec<_>) = net
        .stations()
        .iter()
        .cloned()
        .partition(|s| s.name.starts_with("members-link"));
    let z = net.think_time();
    let mut branches = links
        .into_iter()
        .filter(|s| s.demand > 0.0)
        .map(|s| ClosedNetwork::new(vec![s], z))
        .collect::<Result<Vec<_>, _>>()?;
    branches.push(ClosedNetwork::new(cpus, z)?);
    Ok(branches)
}

/// The RAID 5 head and members as a closed network, calibrated from
/// metrics scraped around a run of `completions` client requests.
struct ForkJoin {
    /// The head's CPU seconds over the run.
    head_cpu: f64,
    /// Each member's CPU seconds over the run.
    member_cpu: Vec<f64>,
    /// Per-member demands (`mI-cpu`, `mI-link-up`, `mI-link-down`), for
    /// the report.
    member_demands: Vec<CalibratedDemand>,
    /// Stations `head-cpu`, `members-cpu`, `members-link-up` and
    /// `members-link-down`.
    network: Calibration,
}

fn fork_join_calibration(
    completions: u64,
    (head_before, head_after): (&Snapshot, &Snapshot),
    (members_before, members_after): (&[Snapshot], &[Snapshot]),
) -> Result<ForkJoin> {
    let interval = head_after.at.duration_since(head_before.at).as_secs_f64();
    let jobs = completions;
    let station = |name: String, busy_seconds: f64| StationObservation {
        name,
        busy_seconds,
        servers: 1,
        delay: false,
    };
    let head_cpu = cpu_delta(head_before, head_after)?;
    let mut each = vec![station("head-cpu".into(), head_cpu)];
    let mut member_cpu = Vec::new();
    let (mut up_busy, mut down_busy) = (Vec::new(), Vec::new());
    for (i, (a, b)) in members_before.iter().zip(members_after).enumerate() {
        let cpu = cpu_delta(a, b)?;
        member_cpu.push(cpu);
        each.push(station(format!("m{i}-cpu"), cpu));
        // A link direction is busy for the bytes its shaper sent over
        // the rate it charges them at (tbf's own counters, headers and
        // all): writes go up to the member, reads come down from it. The
        // two directions of a veth pair carry data at once, so each is a
        // station of its own (a small write reads from one member while
        // it writes to the others).
        let (Some(sa), Some(sb)) = (a.shaped, b.shaped) else {
            bail!("member {i}'s snapshots have no link counters");
        };
        let up = sb.up.saturating_sub(sa.up) as f64 / sb.rate_bytes_s;
        let down = sb.down.saturating_sub(sa.down) as f64 / sb.rate_bytes_s;
        up_busy.push(up);
        down_busy.push(down);
        each.push(station(format!("m{i}-link-up"), up));
        each.push(station(format!("m{i}-link-down"), down));
    }
    let per_member = Calibration {
        interval_seconds: interval,
        completions: jobs,
        stations: each,
    };
    let mut member_demands = per_member
        .demands()
        .context("calibrating the RAID 5 model")?;
    member_demands.retain(|d| d.name != "head-cpu");
    // Each job's member I/O goes to every member at once and the job
    // waits for all of them (a fork-join), which a product-form network
    // cannot express: a network of a station per member would add up
    // work that happens side by side. The members' CPUs are one station
    // and their links another, each with the largest member's demand.
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let cal = Calibration {
        interval_seconds: interval,
        completions: jobs,
        stations: vec![
            station("head-cpu".into(), head_cpu),
            station("members-cpu".into(), max(&member_cpu)),
            station("members-link-up".into(), max(&up_busy)),
            station("members-link-down".into(), max(&down_busy)),
        ],
    };
    Ok(ForkJoin {
        head_cpu,
        member_cpu,
        member_demands,
        network: cal,
    })
}

/// The paper's parameters with what was measured: T_mpro from the head's
/// CPU per stripe unit, T_snpro from the members' (per-packet times 0,
/// so the measured CPU is all in the per-unit term), TRate_e the links'
/// measured rate, no disk (memory exports).
fn paper_params(
    head_cpu: f64,
    member_cpu: &[f64],
    jobs: u64,
    rate_mbit_s: f64,
) -> Option<RaidParams> {
    if jobs == 0 || member_cpu.is_empty() {
        return None;
    }
    let c = jobs as f64;
    let units = f64::from(JOB_BYTES) / UNIT as f64;
    let head_cpu = head_cpu / c;
    let stp = 3.0;
    // D_Csn = T_snpro S_sn / (STP STU) with S_sn = S_mR / STP.
    let s_sn = f64::from(JOB_BYTES) * stp / (stp - 1.0) / stp;
    let member = member_cpu.iter().sum::<f64>() / member_cpu.len() as f64 / c;
    let p = RaidParams {
        op: RaidOp::Write,
        job_bytes: f64::from(JOB_BYTES),
        stripe_unit: UNIT as f64,
        stripe_width: 3,
        storage_servers: 3,
        central_cache_hit: 0.0,
        storage_cache_hit: 0.0,
        central_unit_time: head_cpu / units,
        central_packet_time: 0.0,
        storage_unit_time: member * stp * UNIT as f64 / s_sn,
        storage_packet_time: 0.0,
        mss: 1448.0,
        frame_bytes: 1514.0,
        ethernet_rate: rate_mbit_s * 1e6 / 8.0,
        disk_seek: 0.0,
        disk_latency: 0.0,
        disk_rate: 1e12,
        think_time: 0.0,
    };
    p.validate().ok().map(|()| p)
}

// ---------------------------------------------------------------- throughput

fn raid0(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let mut rows: Vec<RaidRow> = Vec::new();
    for k in 1..=4usize {
        let links: Vec<usize> = (0..k).collect();
        let array = bed.array("raid0", &links)?;
        let ep = array.head.endpoint();
        bed.prefill(&ep)?;
        let w = bed.workload(Pattern::Seq, Rw::Read, 1 << 20, 4, 1);
        let r = bed.run(&ep, &w, &format!("raid0 over {k}"))?;
        rows.push(row(
            RaidCase::Raid0,
            &format!("raid0 over {k}"),
            k as u32,
            r,
        ));
    }
    let one = rows[0].mib_s;
    for r in &mut rows {
        set_ratio(r, one, "raid0 over 1");
    }
    Ok(rows)
}

fn full_stripe(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let w = bed.workload(Pattern::Seq, Rw::Write, 1 << 20, 4, 1);
    let single = {
        let m = bed.member(0)?;
        let ep = Endpoint::Nbd {
            uri: m.uri(),
            server_cpu: ServerCpu::Unknown,
        };
        bed.run(&ep, &w, "one member")?
    };
    let array = bed.array("raid5", &[0, 1, 2])?;
    let r = bed.run(&array.head.endpoint(), &w, "raid5 over 3")?;
    let mut one = row(RaidCase::FullStripe, "one member, direct", 0, single);
    let mut five = row(RaidCase::FullStripe, "raid5 over 3", 3, r);
    let reference = one.mib_s;
    set_ratio(&mut one, reference, "one member");
    set_ratio(&mut five, reference, "one member");
    Ok(vec![one, five])
}

/// Client requests in flight in the `small-writes` case (one worker).
const SMALL_WRITES_IN_FLIGHT: u32 = 16;

fn small_writes(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    bed.prefill(&ep)?;
    let ios = |text: &str| -> Result<f64> {
        Ok(metric_sum(
            text,
            "sluice_raid_member_requests_total",
            &[("export", "vol"), ("op", "read")],
        )? + metric_sum(
            text,
            "sluice_raid_member_requests_total",
            &[("export", "vol"), ("op", "write")],
        )?)
    };
    let before = ios(&scrape(array.head.metrics)?)?;
    let (head_before, members_before) = (
        snapshot(array.head.metrics, "vol")?,
        bed.member_snapshots(&array)?,
    );
    let w = bed.workload(Pattern::Rand, Rw::Write, 4096, SMALL_WRITES_IN_FLIGHT, 1);
    let r = bed.run(&ep, &w, "raid5 over 3")?;
    let (head_after, members_after) = (
        snapshot(array.head.metrics, "vol")?,
        bed.member_snapshots(&array)?,
    );
    let after = ios(&scrape(array.head.metrics)?)?;
    let writes = r.writes as f64;
    let mut out = row(RaidCase::SmallWrites, "raid5 over 3, 4 KiB", 3, r);
    out.member_ios_per_write = (writes > 0.0).then(|| (after - before) / writes);
    // The same calibration as the jobs sweep, over this run: the closed
    // network at the run's requests in flight predicts its throughput.
    let completions = head_after
        .counters
        .total_requests()
        .saturating_sub(head_before.counters.total_requests());
    let model = fork_join_calibration(
        completions,
        (&head_before, &head_after),
        (&members_before, &members_after),
    )
    .and_then(|f| Ok(f.network.network(0.0)?))
    .and_then(|net| Ok(exact_mva_points(&net, &[SMALL_WRITES_IN_FLIGHT])?));
    match model {
        Ok(points) => out.model_iops = points.first().map(|p| p.throughput),
        Err(e) => eprintln!("warning: small-writes: no model prediction: {e:#}"),
    }
    Ok(vec![out])
}

/// Cuts member `i`'s link and reads until the head has marked it failed.
fn fail_member(bed: &Bed<'_>, array: &Array, i: usize) -> Result<()> {
    bed.links[i].cut()?;
    let ep = array.head.endpoint();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let failed = metric_sum(
            &scrape(array.head.metrics)?,
            "sluice_raid_members_failed",
            &[("export", "vol")],
        )?;
        if failed >= 1.0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the head did not mark member {i} failed within 60 s of cutting its link");
        }
        // Reads that touch the member make the head notice.
        let mut w = bed.workload(Pattern::Seq, Rw::Read, 1 << 20, 1, 1);
        w.limit = Limit::Ops(4);
        let _ = runner::run_workload(&ep, &w, &RunOptions::default());
    }
}

fn degraded(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    bed.prefill(&ep)?;
    let w = bed.workload(Pattern::Seq, Rw::Read, 1 << 20, 4, 1);
    let healthy = bed.run(&ep, &w, "raid5 healthy")?;
    fail_member(bed, &array, 1)?;
    let r = bed.run(&ep, &w, "raid5 degraded")?;
    bed.links[1].restore()?;
    let mut h = row(RaidCase::Degraded, "raid5 over 3, healthy", 3, healthy);
    let mut d = row(RaidCase::Degraded, "raid5, member 1 cut off", 3, r);
    let reference = h.mib_s;
    set_ratio(&mut h, reference, "healthy");
    set_ratio(&mut d, reference, "healthy");
    Ok(vec![h, d])
}

fn rebuild(bed: &mut Bed<'_>) -> Result<Vec<RaidRow>> {
    let array = bed.array("raid5", &[0, 1, 2])?;
    let ep = array.head.endpoint();
    let volume = ep.size()?;
    fail_member(bed, &array, 1)?;
    let fresh = bed.member(3)?;
    let admin = format!("unix:{}", array.head.admin.display());
    let started = Instant::now();
    bed.sluice(&[
        "raid",
        "replace",
        "--admin",
        &admin,
        "--wait",
        "vol",
        "1",
        &fresh.uri_string(),
    ])?;
    let took = started.elapsed().as_secs_f64();
    bed.links[1].restore()?;
    // RAID 5 over three: each member holds half the volume's bytes.
    let bytes = volume as f64 / 2.0;
    let mib_s = bytes / took / f64::from(1 << 20);
    let link = bed.measured[3].up_mbit_s * 1e6 / 8.0 / f64::from(1 << 20);
    let mut r = RaidRow {
        case: RaidCase::Rebuild.name().into(),
        config: format!(
            "idle raid5, {} onto a fresh member in {took:.1} s",
            sluice_types::format_size(bytes as u64)
        ),
        members: 3,
        mib_s,
        iops: 0.0,
        mean_us: 0.0,
        ratio: None,
        ratio_to: String::new(),
        member_ios_per_write: None,
        model_iops: None,
        run: None,
    };
    set_ratio(&mut r, link, "the new member's link");
    drop(fresh);
    Ok(vec![r])
}

#[cfg(test)]
mod tests {
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
