//! The `sluice bench` command line: one workload (the default), `compare`,
//! and the presets (`sluice bench preset NAME` or `sluice bench NAME`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use serde::Serialize;
use sluice_client::NbdUri;
use sluice_model::text::scaled;
use sluice_server::PipelineMode;

use crate::machine::Machine;
use crate::matrix::Driver;
use crate::presets;
use crate::report::{self, Format};
use crate::runner::{self, Endpoint, RunOptions, RunResult, ServerCpu};
use crate::setup::{self, PresetOptions};
use crate::target::{Backing, EmbeddedConfig, EmbeddedServer};
use crate::workload::{parse_duration, Handshake, Limit, Pattern, Rw, Size, Workload};

/// A mistake in the `sluice bench` command line found after parsing (a
/// bad URI, an option out of range, writes not allowed): the binary
/// exits with status 2 for it (see [`is_usage_error`]).
#[derive(Debug)]
pub struct BenchUsageError(String);

impl std::fmt::Display for BenchUsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchUsageError {}

/// True when `e` comes from a bad `sluice bench` command line.
pub fn is_usage_error(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<BenchUsageError>().is_some())
}

/// `sluice bench`: measure an NBD server or local I/O.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCli {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Run one workload, or the short standard set when no workload
    /// option is given (what `sluice bench` alone does).
    Run(RunArgs),
    /// sluice, nbdkit, qemu-nbd and local I/O on one image, driven by
    /// sluice's client and by fio, interleaved rounds, ratios to a baseline.
    Compare(CompareArgs),
    /// Run a named preset: pipelining, scaling, san, filesystem, pgbench, objects, raid, striped,
    /// merge, s3asim, noncontig.
    Preset {
        #[command(subcommand)]
        preset: PresetCommand,
    },
    #[command(flatten)]
    Named(PresetCommand),
}

#[derive(Debug, Subcommand)]
enum PresetCommand {
    /// The pipelining paper's sweep: sequential read/write, outstanding I/O 1-16 x 512 B-128 KiB,
    /// server pipelining off vs fixed vs flexible (embedded server).
    Pipelining {
        #[command(flatten)]
        common: PresetArgs,
        /// Open the image with O_DIRECT (sizes below the device's
        /// logical block size, usually 4 KiB, are then left out).
        #[arg(long)]
        direct: bool,
    },
    /// The SuperNBD paper's scaling run: 1-16 clients streaming 1 MiB records, read and write;
    /// sluice vs nbdkit vs qemu-nbd vs local.
    Scaling {
        #[command(flatten)]
        common: PresetArgs,
        /// Requests each client keeps in flight.
        #[arg(long, default_value_t = 1)]
        qd: u32,
    },
    /// The SAN paper's experiments: 4 KiB QD1 latency, the 16-worker fio-style matrix, and 4 KiB
    /// random writes vs 1-64 workers, as fractions of local I/O.
    San {
        #[command(flatten)]
        common: PresetArgs,
    },
    /// ext4 on a loop device over nbdfuse: fio file workloads, sluice vs nbdkit.
    Filesystem {
        #[command(flatten)]
        common: PresetArgs,
    },
    /// The SAN paper's real-workload test: PostgreSQL with its data directory on ext4 over the
    /// export (nbdfuse + loop), pgbench TPC-B-like at 1-16 clients, synchronous_commit off and on;
    /// sluice vs nbdkit vs local I/O on the same image. Needs root and PostgreSQL.
    Pgbench {
        #[command(flatten)]
        common: PresetArgs,
        /// pgbench's scale factor (default 20; 5 with --quick).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        scale: Option<u32>,
        /// Client counts, comma-separated (default: 1,4,16).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=200))]
        clients: Option<Vec<u32>>,
        /// synchronous_commit settings, comma-separated (default: off,on).
        #[arg(long, value_delimiter = ',', value_enum)]
        commit: Option<Vec<crate::pgbench::Commit>>,
    },
    /// The native object protocol, each case against its peer: SGL and strided vs contiguous
    /// reads, objects vs the NBD export, attributes riding on writes, creates with attributes,
    /// indexed queries, and (with --ceph-conf) Ceph RADOS through librados.
    Objects {
        #[command(flatten)]
        common: PresetArgs,
        /// Folder for the object store and the NBD export's file (default: a
        /// temporary folder in the system temp dir, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Groups to run, comma-separated: ddt, nbd, attr, create, query, ceph
        /// (default: all; ceph only with a cluster).
        #[arg(long, value_delimiter = ',')]
        groups: Option<Vec<String>>,
        /// Objects in the query collection (default 100000; 5000 with --quick).
        #[arg(long)]
        query_objects: Option<u64>,
        /// A Ceph cluster's ceph.conf (default: $CEPH_CONF, if set): adds
        /// the ceph group (python3-rados drives it).
        #[arg(long)]
        ceph_conf: Option<PathBuf>,
        /// The Ceph pool to use, which must exist (default: $CEPH_POOL, else
        /// bench).
        #[arg(long)]
        ceph_pool: Option<String>,
        /// The ceph-osd process for OSD CPU (default: the ceph-osd whose
        /// command line names the ceph.conf).
        #[arg(long)]
        ceph_osd_pid: Option<u32>,
    },
    /// The networked RAID paper on this host: members in network namespaces behind rate-limited
    /// links (100 Mbit/s unless --link-rate); R(N) against MVA and bounds, RAID 0 and 5
    /// throughput, degraded reads, rebuild.
    Raid {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        raid: crate::raid_presets::RaidArgs,
    },
    /// One striped object over 1-4 object servers, each behind its own rate-limited link (100
    /// Mbit/s unless --link-rate): 1 MiB sequential writes and reads against N x one link.
    Striped {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        striped: crate::striped::StripedArgs,
    },
    /// An S3aSim-like sequence search (14 workers writing small results into one shared object):
    /// time vs database size, one write per result vs one SGL write per batch, on one object
    /// server and on four (striped, and the metadata-less baseline), over loopback and behind
    /// rate-limited links (800 Mbit/s unless --link-rate).
    S3asim {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        s3asim: crate::s3asim::S3aSimArgs,
    },
    /// Temporal merge in the object client: 4 KiB random object writes from 1-64 threads over one
    /// connection, merge off vs always vs adaptive, and latency at queue depth 1.
    Merge {
        #[command(flatten)]
        common: PresetArgs,
        /// Folder for the object store (default: a temporary folder).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Thread counts, comma-separated (default: 1,2,4,8,16,32,64).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(usize))]
        workers: Option<Vec<usize>>,
    },
    /// The object paper's non-contiguous I/O: one-segment transfers by size with each DDT, and
    /// blocks with 2-byte holes (8 B-64 KiB) iterative vs SGL vs strided on an object and on mem
    /// and file exports, over an unshaped and an 800 Mbit/s link (--link-rate), beside the model
    /// T = S/BW + N.
    Noncontig {
        #[command(flatten)]
        common: PresetArgs,
        #[command(flatten)]
        noncontig: crate::noncontig::NoncontigArgs,
    },
}

#[derive(Debug, Args)]
struct PresetArgs {
    /// Smaller images and shorter runs (every preset under 10 minutes).
    #[arg(long)]
    quick: bool,
    /// Interleaved rounds (medians are taken over them).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Length of each timed run (e.g. 500ms, 2s).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Folder for JSON and CSV results.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Folder for plots (default: the --out folder).
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// Image to serve (created and filled if missing; default: a
    /// temporary file in /dev/shm, removed afterwards).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Image size when creating it.
    #[arg(long)]
    image_size: Option<Size>,
    /// The sluice binary to run `serve` with (default: this program, or a
    /// `sluice` beside it).
    #[arg(long)]
    sluice_bin: Option<PathBuf>,
    /// Targets to include, comma-separated (sluice, nbdkit, qemu-nbd,
    /// local, and LABEL=PATH for another sluice binary, e.g. an older
    /// build, or a script that runs one with other options; for
    /// pipelining: off, fixed, flexible).
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Which client drives the load: own, fio or both.
    #[arg(long, value_enum)]
    driver: Option<Driver>,
    /// Never show progress bars.
    #[arg(long)]
    no_progress: bool,
    /// Put each server process in a network namespace behind a veth link
    /// shaped to this rate with tc tbf (e.g. 100M, 800mbit); the link's
    /// measured RTT and bandwidth go with the results. Needs root.
    #[arg(long, value_parser = |s: &str| s.parse::<crate::link::LinkRate>())]
    link_rate: Option<crate::link::LinkRate>,
}

impl PresetArgs {
    fn options(&self, default_driver: Driver) -> PresetOptions {
        PresetOptions {
            quick: self.quick,
            rounds: self.rounds,
            duration: self.duration,
            out_dir: self.out.clone(),
            plot_dir: self.plot_dir.clone().unwrap_or_else(|| self.out.clone()),
            image: self.image.clone(),
            image_size: self.image_size.map(|s| s.0),
            sluice_bin: self.sluice_bin.clone(),
            targets: self.targets.clone(),
            driver: self.driver.unwrap_or(default_driver),
            progress: !self.no_progress,
            link_rate: self.link_rate,
        }
    }

    /// Refuses --link-rate for a preset whose servers cannot sit behind
    /// a link (in-process, or reached through a local mount).
    fn no_link(&self, preset: &str) -> Result<()> {
        match self.link_rate {
            Some(_) => Err(BenchUsageError(format!(
                "--link-rate: the {preset} preset does not put its servers behind a link (compare, scaling, san, raid, striped, s3asim and noncontig do)"
            ))
            .into()),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Args)]
struct CompareArgs {
    #[command(flatten)]
    common: PresetArgs,
    /// Cases to run, comma-separated (default: all of randread-4k-qd1,
    /// randread-4k-qd16, randwrite-4k-qd16, randread-4k-qd16-w2,
    /// seqread-1m-qd8, seqwrite-1m-qd8).
    #[arg(long, value_delimiter = ',')]
    cases: Option<Vec<String>>,
    /// Target the ratios are relative to.
    #[arg(long, default_value = "nbdkit")]
    baseline: String,
}

/// Options of a single run.
#[derive(Debug, Args, Clone)]
struct RunArgs {
    /// Target any NBD server: nbd://HOST[:PORT]/EXPORT or
    /// nbd+unix:///EXPORT?socket=PATH. Default: an embedded server.
    #[arg(long, conflicts_with = "local")]
    uri: Option<String>,
    /// Local I/O baseline: pread/pwrite on this file or device.
    #[arg(long)]
    local: Option<PathBuf>,
    /// Let write workloads, --prefill and --verify write to the --uri or
    /// --local target: THE TARGET'S DATA IS OVERWRITTEN. Without it, only
    /// read cases run there (the embedded server's export is the bench's
    /// own and always written).
    #[arg(long)]
    allow_overwrite: bool,
    /// Embedded server's export: mem, tempfile, tempfile:DIR or file:PATH.
    #[arg(long, default_value = "mem", value_parser = |s: &str| s.parse::<Backing>())]
    backing: Backing,
    /// Embedded export size.
    #[arg(long, default_value = "512M")]
    size: Size,
    /// Embedded server pipelining: off, fixed or flexible.
    #[arg(long)]
    pipeline: Option<PipelineMode>,
    /// Open the embedded server's file with O_DIRECT.
    #[arg(long)]
    direct: bool,
    /// The --uri server's pid, for server CPU per operation.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Access pattern.
    #[arg(long, value_enum)]
    pattern: Option<Pattern>,
    /// Reads, writes or both.
    #[arg(long, value_enum)]
    rw: Option<Rw>,
    /// Percent of reads for --rw mixed.
    #[arg(long, default_value_t = 70, value_parser = clap::value_parser!(u8).range(0..=100))]
    read_pct: u8,
    /// Block size (512, 4K, 1M, ...).
    #[arg(long)]
    bs: Option<Size>,
    /// Requests each worker keeps in flight.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    qd: Option<u32>,
    /// Worker threads.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    workers: Option<u32>,
    /// Workers share one connection (default: one each).
    #[arg(long)]
    shared: bool,
    /// How long each workload runs (default 2s).
    #[arg(long, value_parser = parse_duration, conflicts_with_all = ["bytes", "ops"])]
    duration: Option<Duration>,
    /// Stop after this many bytes (all workers together).
    #[arg(long, conflicts_with = "ops")]
    bytes: Option<Size>,
    /// Stop after this many operations (all workers together).
    #[arg(long)]
    ops: Option<u64>,
    /// Use only this many bytes of the export.
    #[arg(long)]
    region: Option<Size>,
    /// Start of the region.
    #[arg(long, default_value = "0")]
    offset: Size,
    /// Write a verifiable pattern and check every read.
    #[arg(long)]
    verify: bool,
    /// Fill the region before measuring (always done for the embedded
    /// server and when verifying).
    #[arg(long)]
    prefill: bool,
    /// Seed for offsets, mix and data.
    #[arg(long)]
    seed: Option<u64>,
    /// Handshake to negotiate: extended (headers, when offered),
    /// structured (replies, as libnbd/fio) or simple.
    #[arg(long, value_enum, default_value = "extended")]
    handshake: Handshake,
    /// What to print.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also write the results as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Never show a progress bar.
    #[arg(long)]
    no_progress: bool,
}

impl RunArgs {
    fn custom(&self) -> bool {
        self.pattern.is_some()
            || self.rw.is_some()
            || self.bs.is_some()
            || self.qd.is_some()
            || self.workers.is_some()
            || self.shared
    }

    fn limit(&self) -> Limit {
        if let Some(b) = self.bytes {
            Limit::Bytes(b.0)
        } else if let Some(n) = self.ops {
            Limit::Ops(n)
        } else {
            Limit::Time(self.duration.unwrap_or(Duration::from_secs(2)))
        }
    }

    /// Whether the target is someone else's volume: a `--uri` server or a
    /// `--local` file, whose data writes would destroy.
    fn external(&self) -> bool {
        self.uri.is_some() || self.local.is_some()
    }

    /// Applies `--allow-overwrite`: against an external target without it,
    /// an explicit request to write is refused and the standard set keeps
    /// its read cases only. Returns a note to print when cases were left
    /// out.
    fn guard_writes(&self, workloads: &mut Vec<Workload>) -> Result<Option<String>> {
        if !self.external() || self.allow_overwrite {
            return Ok(None);
        }
        let target = if self.uri.is_some() {
            "--uri"
        } else {
            "--local"
        };
        let asked = if self.prefill {
            Some("--prefill")
        } else if self.verify {
            Some("--verify")
        } else if self.custom() && workloads.iter().any(Workload::writes) {
            Some("a write workload")
        } else {
            None
        };
        if let Some(what) = asked {
            return Err(BenchUsageError(format!(
                "{what} would overwrite the data of the {target} target; \
                 add --allow-overwrite if that is what you want"
            ))
            .into());
        }
        let before = workloads.len();
        workloads.retain(|w| !w.writes());
        Ok((workloads.len() < before).then(|| {
            format!(
                "note: {target} target: running read cases only; write cases \
                 would overwrite its data (--allow-overwrite runs them)"
            )
        }))
    }

    fn workloads(&self) -> Result<Vec<Workload>> {
        let mut list = if self.custom() {
            let bs = self.bs.map_or(4096, |s| s.0);
            let bs = u32::try_from(bs)
                .ok()
                .filter(|b| *b > 0 && *b <= 32 << 20)
                .ok_or_else(|| {
                    BenchUsageError(format!("--bs {bs}: must be between 1 byte and 32 MiB"))
                })?;
            let mut w = Workload::new(
                self.pattern.unwrap_or(Pattern::Rand),
                self.rw.unwrap_or(Rw::Read),
                bs,
                self.qd.unwrap_or(16),
            );
            w.workers = self.workers.unwrap_or(1);
            w.shared_connection = self.shared;
            vec![w]
        } else {
            crate::workload::standard_cases(Duration::from_secs(2))
        };
        for w in &mut list {
            w.read_pct = self.read_pct;
            w.limit = self.limit();
            w.region_offset = self.offset.0;
            w.region_len = self.region.map_or(0, |r| r.0);
            w.verify = self.verify;
            w.handshake = self.handshake;
            if let Some(s) = self.seed {
                w.seed = s;
            }
        }
        Ok(list)
    }
}

#[derive(Debug, Serialize)]
struct SingleReport {
    machine: Machine,
    target: String,
    results: Vec<RunResult>,
}

fn run_single(args: RunArgs) -> Result<()> {
    let mut workloads = args.workloads()?;
    let note = args.guard_writes(&mut workloads)?;
    let mut _server = None;
    let (endpoint, description, embedded) = if let Some(uri) = &args.uri {
        let parsed: NbdUri = uri
            .parse()
            .map_err(|e| BenchUsageError(format!("--uri {uri}: {e}")))?;
        (
            Endpoint::Nbd {
                uri: parsed,
                server_cpu: args.server_pid.map_or(ServerCpu::Unknown, ServerCpu::Pid),
            },
            uri.clone(),
            false,
        )
    } else if let Some(path) = &args.local {
        (
            Endpoint::Local { path: path.clone() },
            format!("local {}", path.display()),
            false,
        )
    } else {
        let server = EmbeddedServer::start(&EmbeddedConfig {
            backing: args.backing.clone(),
            size: args.size.0,
            pipeline: args.pipeline.unwrap_or_default(),
            direct: args.direct,
            spin_us: None,
            io_threads: None,
        })?;
        let ep = Endpoint::Nbd {
            uri: server.uri().clone(),
            server_cpu: ServerCpu::OwnThreads,
        };
        let d = server.description().to_owned();
        _server = Some(server);
        (ep, d, true)
    };
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let label = if embedded {
        "embedded".to_owned()
    } else if args.local.is_some() {
        "local".into()
    } else {
        "uri".into()
    };
    // An embedded export starts empty: fill it once so reads move data.
    let reads = workloads.iter().any(Workload::reads);
    if (args.prefill || (embedded && reads)) && !args.verify {
        let size = endpoint.size()?;
        let region = workloads[0]
            .region(size)
            .map_err(|e| anyhow!("workload {}: {e}", workloads[0].label()))?;
        runner::prefill(&endpoint, region, 0, false)?;
    }
    let show = !args.no_progress;
    let mut results = Vec::new();
    for w in &workloads {
        let r = runner::run_workload(
            &endpoint,
            w,
            &RunOptions {
                progress: show,
                prefill: false,
                target_label: label.clone(),
            },
        )
        .with_context(|| format!("{} against {description}", w.label()))?;
        if args.format == Format::Table && show && workloads.len() > 1 {
            eprintln!("{}: {} IOPS", r.case, scaled(r.iops));
        }
        results.push(r);
    }
    let single = SingleReport {
        machine: Machine::probe(),
        target: description.clone(),
        results,
    };
    match args.format {
        Format::Table => {
            println!("target: {description}");
            println!("machine: {}", single.machine.line());
            print!("{}", report::results_table(&single.results).render());
            if args.verify {
                let v: u64 = single.results.iter().map(|r| r.verified_reads).sum();
                println!("verified {v} reads: all matched");
            }
        }
        Format::Json => {
            let text = serde_json::to_string_pretty(&single).context("cannot encode JSON")?;
            println!("{text}");
        }
        Format::Csv => print!("{}", report::results_csv(&single.results)),
    }
    if let Some(p) = &args.json {
        report::write_json(p, &single)?;
    }
    if let Some(p) = &args.csv {
        report::write_text(p, &report::results_csv(&single.results))?;
    }
    Ok(())
}

fn run_preset(p: PresetCommand) -> Result<()> {
    match p {
        PresetCommand::Pipelining { common, direct } => {
            common.no_link("pipelining")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            presets::pipelining(&o, direct).map(drop)
        }
        PresetCommand::Scaling { common, qd } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            presets::scaling(&o, qd).map(drop)
        }
        PresetCommand::San { common } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            presets::san(&o).map(drop)
        }
        PresetCommand::Filesystem { common } => {
            common.no_link("filesystem")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            crate::fsbench::filesystem(&o).map(drop)
        }
        PresetCommand::Pgbench {
            common,
            scale,
            clients,
            commit,
        } => {
            common.no_link("pgbench")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::pgbench::pgbench(&crate::pgbench::PgbenchOptions {
                preset: o,
                scale,
                clients,
                commits: commit,
            })?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Objects {
            common,
            dir,
            groups,
            query_objects,
            ceph_conf,
            ceph_pool,
            ceph_osd_pid,
        } => {
            common.no_link("objects")?;
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::objects::objects(&crate::objects::ObjectsOptions {
                preset: o,
                dir,
                query_objects,
                groups,
                ceph: ceph_conf
                    .or_else(|| std::env::var_os("CEPH_CONF").map(PathBuf::from))
                    .map(|conf| crate::objects::CephPeer {
                        conf,
                        pool: ceph_pool
                            .or_else(|| std::env::var("CEPH_POOL").ok())
                            .unwrap_or_else(|| "bench".into()),
                        osd_pid: ceph_osd_pid,
                    }),
            })?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Raid { common, raid } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::raid_presets::raid(&o, &raid)?;
            if report.rows.is_empty() {
                bail!("every experiment failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Striped { common, striped } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::striped::striped(&o, &striped)?;
            if report.rows.is_empty() {
                bail!("every server count failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::S3asim { common, s3asim } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::s3asim::s3asim(&o, &s3asim)?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Merge {
            common,
            dir,
            workers,
        } => {
            let o = common.options(Driver::Own);
            setup::check_out_dir(&o.out_dir)?;
            if workers.as_ref().is_some_and(|w| w.contains(&0)) {
                return Err(BenchUsageError("--workers: thread counts start at 1".into()).into());
            }
            let report = crate::merge::merge(&crate::merge::MergeOptions {
                preset: o,
                dir,
                workers,
            })?;
            if report.samples.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        PresetCommand::Noncontig { common, noncontig } => {
            let o = common.options(Driver::Own);
            noncontig.plan(o.quick).map_err(BenchUsageError)?;
            setup::check_out_dir(&o.out_dir)?;
            let report = crate::noncontig::noncontig(&o, &noncontig)?;
            if report.points.is_empty() {
                bail!("every point failed; see the messages above");
            }
            Ok(())
        }
    }
}

/// Runs `sluice bench` with parsed arguments.
pub fn run(cli: BenchCli) -> Result<()> {
    match cli.command {
        None => run_single(cli.run),
        Some(BenchCommand::Run(a)) => run_single(a),
        Some(BenchCommand::Compare(a)) => {
            let o = a.common.options(Driver::Both);
            setup::check_out_dir(&o.out_dir)?;
            let report = presets::compare(&o, a.cases.as_deref(), &a.baseline)?;
            if report.runs.runs.is_empty() {
                bail!("every run failed; see the messages above");
            }
            Ok(())
        }
        Some(BenchCommand::Preset { preset }) | Some(BenchCommand::Named(preset)) => {
            run_preset(preset)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        bench: BenchCli,
    }

    fn parse(args: &[&str]) -> Result<BenchCli, clap::Error> {
        let mut v = vec!["bench"];
        v.extend_from_slice(args);
        Top::try_parse_from(v).map(|t| t.bench)
    }

    #[test]
    fn command_lines_parse() {
        let c = parse(&[]).unwrap();
        assert!(c.command.is_none() && !c.run.custom());
        let c = parse(&[
            "--rw",
            "mixed",
            "--read-pct",
            "30",
            "--bs",
            "64K",
            "--qd",
            "4",
        ])
        .unwrap();
        let w = c.run.workloads().unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(
            (w[0].read_pct, w[0].block_size, w[0].queue_depth),
            (30, 65536, 4)
        );
        assert!(matches!(
            parse(&["san", "--quick"]).unwrap().command,
            Some(BenchCommand::Named(PresetCommand::San { .. }))
        ));
        assert!(matches!(
            parse(&["preset", "pipelining", "--direct"])
                .unwrap()
                .command,
            Some(BenchCommand::Preset {
                preset: PresetCommand::Pipelining { direct: true, .. }
            })
        ));
        assert!(matches!(
            parse(&["compare", "--driver", "fio", "--rounds", "3"])
                .unwrap()
                .command,
            Some(BenchCommand::Compare(_))
        ));
    }

    #[test]
    fn bad_input_is_refused() {
        assert!(parse(&["--read-pct", "101"]).is_err());
        assert!(parse(&["--qd", "0"]).is_err());
        assert!(parse(&["--duration", "2s", "--ops", "5"]).is_err());
        assert!(parse(&["--uri", "nbd://x/", "--local", "/tmp/x"]).is_err());
        assert!(parse(&["--bs", "4Q"]).is_err());
        assert!(parse(&["--backing", "disk"]).is_err());
        assert!(parse(&["compare", "--rounds", "0"]).is_err());
        let c = parse(&["--bs", "64M"]).unwrap();
        assert!(c.run.workloads().is_err());
    }

    #[test]
    fn link_rates_go_to_server_presets_only() {
        let c = parse(&[
            "raid",
            "--quick",
            "--link-rate",
            "800M",
            "--cases",
            "jobs,raid0",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Raid { common, raid })) = c.command else {
            panic!("not the raid preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(800_000_000))
        );
        assert_eq!(
            raid.cases,
            Some(vec![
                crate::raid_presets::RaidCase::Jobs,
                crate::raid_presets::RaidCase::Raid0
            ])
        );
        assert!(parse(&["san", "--link-rate", "fast"]).is_err());
        assert!(parse(&["raid", "--cases", "tape"]).is_err());
        let c = parse(&[
            "striped",
            "--quick",
            "--link-rate",
            "1G",
            "--servers",
            "1,4",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Striped { common, striped })) = c.command
        else {
            panic!("not the striped preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(1_000_000_000))
        );
        assert_eq!(striped.servers, Some(vec![1, 4]));
        assert!(parse(&["striped", "--servers", "5"]).is_err());
        let c = parse(&[
            "s3asim",
            "--quick",
            "--link-rate",
            "100M",
            "--setups",
            "one",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::S3asim { common, s3asim })) = c.command else {
            panic!("not the s3asim preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(100_000_000))
        );
        assert_eq!(s3asim.setups, Some(vec![crate::s3asim::Setup::One]));
        assert!(parse(&["s3asim", "--setups", "two"]).is_err());
        let c = parse(&[
            "noncontig",
            "--quick",
            "--link-rate",
            "800M",
            "--total",
            "64K",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Noncontig { common, noncontig })) = c.command
        else {
            panic!("not the noncontig preset");
        };
        assert_eq!(
            common.options(Driver::Own).link_rate,
            Some(crate::link::LinkRate(800_000_000))
        );
        assert_eq!(noncontig.total.map(|s| s.0), Some(64 << 10));
        // Sizes that cannot run are a usage error before anything runs.
        let c = parse(&["noncontig", "--total", "4K", "--blocks", "8K"]).unwrap();
        let Some(BenchCommand::Named(p)) = c.command else {
            panic!("noncontig did not parse as a preset");
        };
        let e = run_preset(p).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        // Presets whose servers cannot sit behind a link refuse the
        // option before running anything.
        for preset in ["pipelining", "filesystem", "objects", "pgbench"] {
            let c = parse(&[preset, "--link-rate", "100M"]).unwrap();
            let Some(BenchCommand::Named(p)) = c.command else {
                panic!("{preset} did not parse as a preset");
            };
            let e = run_preset(p).unwrap_err();
            assert!(is_usage_error(&e), "{preset}: {e:#}");
            assert!(format!("{e}").contains("--link-rate"), "{preset}: {e}");
        }
    }

    #[test]
    fn pgbench_options_parse() {
        let c = parse(&[
            "pgbench",
            "--quick",
            "--scale",
            "3",
            "--clients",
            "1,8",
            "--commit",
            "on",
            "--targets",
            "sluice,local",
        ])
        .unwrap();
        let Some(BenchCommand::Named(PresetCommand::Pgbench {
            common,
            scale,
            clients,
            commit,
        })) = c.command
        else {
            panic!("not the pgbench preset");
        };
        let o = common.options(Driver::Own);
        assert!(o.quick);
        assert_eq!(o.targets, Some(vec!["sluice".into(), "local".into()]));
        assert_eq!(scale, Some(3));
        assert_eq!(clients, Some(vec![1, 8]));
        assert_eq!(commit, Some(vec![crate::pgbench::Commit::On]));
        for bad in [
            &["pgbench", "--clients", "0"][..],
            &["pgbench", "--clients", "4,x"],
            &["pgbench", "--clients", "201"],
            &["pgbench", "--scale", "0"],
            &["pgbench", "--commit", "local"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    /// A 4 MiB image filled with 0x77 and an embedded server serving it.
    fn filled_image() -> (tempfile::NamedTempFile, EmbeddedServer) {
        let image = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(image.path(), vec![0x77u8; 4 << 20]).unwrap();
        let server = EmbeddedServer::start(&EmbeddedConfig {
            backing: Backing::File(image.path().to_path_buf()),
            size: 4 << 20,
            ..EmbeddedConfig::default()
        })
        .unwrap();
        (image, server)
    }

    fn untouched(image: &tempfile::NamedTempFile) -> bool {
        std::fs::read(image.path())
            .unwrap()
            .iter()
            .all(|b| *b == 0x77)
    }

    #[test]
    fn a_uri_target_keeps_its_data_without_allow_overwrite() {
        let (image, server) = filled_image();
        let uri = server.uri().to_string();
        let base = ["--uri", &uri, "--duration", "50ms", "--no-progress"];
        // The standard set runs, its write cases left out.
        let c = parse(&base).unwrap();
        run_single(c.run).unwrap();
        assert!(untouched(&image), "the default cases wrote to the target");
        // Explicit writes are refused before anything is sent.
        for extra in [
            &["--rw", "write"][..],
            &["--rw", "mixed"],
            &["--prefill", "--rw", "read"],
            &["--verify", "--rw", "read"],
        ] {
            let mut args = base.to_vec();
            args.extend_from_slice(extra);
            let e = run_single(parse(&args).unwrap().run).unwrap_err();
            assert!(
                format!("{e}").contains("--allow-overwrite"),
                "{extra:?}: {e}"
            );
        }
        assert!(untouched(&image), "a refused run wrote to the target");
        // With the flag, the write cases run and overwrite.
        let mut args = base.to_vec();
        args.extend_from_slice(&["--allow-overwrite", "--rw", "write"]);
        run_single(parse(&args).unwrap().run).unwrap();
        server.stop().unwrap();
        assert!(!untouched(&image), "--allow-overwrite did not write");
    }

    #[test]
    fn a_local_target_keeps_its_data_without_allow_overwrite() {
        let image = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(image.path(), vec![0x77u8; 4 << 20]).unwrap();
        let path = image.path().to_str().unwrap();
        let c = parse(&["--local", path, "--duration", "50ms", "--no-progress"]).unwrap();
        run_single(c.run).unwrap();
        assert!(untouched(&image));
        let c = parse(&["--local", path, "--rw", "write", "--ops", "10"]).unwrap();
        assert!(run_single(c.run).is_err());
        assert!(untouched(&image));
    }
}
