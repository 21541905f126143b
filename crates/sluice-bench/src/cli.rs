//! The load generator's part of the `sluice bench` command line: the
//! options of one run (`sluice bench [OPTIONS]`, `sluice bench run`),
//! running it, and the usage error the binary exits with status 2 for.
//! `compare` and the experiments are sluice-lab's, whose `BenchCli`
//! flattens [`RunArgs`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use serde::Serialize;
use sluice_client::NbdUri;
use sluice_model::text::scaled;
use sluice_server::PipelineMode;

use crate::machine::Machine;
use crate::report::{self, Format};
use crate::runner::{self, Endpoint, RunOptions, RunResult, ServerCpu};
use crate::target::{Backing, EmbeddedConfig, EmbeddedServer};
use crate::workload::{parse_duration, Handshake, Limit, Pattern, Rw, Size, Workload};

/// A mistake in the `sluice bench` command line found after parsing (a
/// bad URI, an option out of range, writes not allowed): the binary
/// exits with status 2 for it (see [`is_usage_error`]).
#[derive(Debug)]
pub struct BenchUsageError(pub String);

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

/// Options of a single run: `sluice bench [OPTIONS]` and `sluice bench
/// run [OPTIONS]` (the whole command line, with `compare` and the
/// experiments, is sluice-lab's `BenchCli`).
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
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
    /// Whether a workload option was given (else the standard set runs).
    pub fn custom(&self) -> bool {
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

    /// The workloads these options ask for.
    pub fn workloads(&self) -> Result<Vec<Workload>> {
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

/// Runs one workload, or the standard set, as `args` say.
pub fn run_single(args: RunArgs) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let mut v = vec!["bench"];
        v.extend_from_slice(args);
        Top::try_parse_from(v).map(|t| t.run)
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
        run_single(c).unwrap();
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
            let e = run_single(parse(&args).unwrap()).unwrap_err();
            assert!(
                format!("{e}").contains("--allow-overwrite"),
                "{extra:?}: {e}"
            );
        }
        assert!(untouched(&image), "a refused run wrote to the target");
        // With the flag, the write cases run and overwrite.
        let mut args = base.to_vec();
        args.extend_from_slice(&["--allow-overwrite", "--rw", "write"]);
        run_single(parse(&args).unwrap()).unwrap();
        server.stop().unwrap();
        assert!(!untouched(&image), "--allow-overwrite did not write");
    }

    #[test]
    fn a_local_target_keeps_its_data_without_allow_overwrite() {
        let image = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(image.path(), vec![0x77u8; 4 << 20]).unwrap();
        let path = image.path().to_str().unwrap();
        let c = parse(&["--local", path, "--duration", "50ms", "--no-progress"]).unwrap();
        run_single(c).unwrap();
        assert!(untouched(&image));
        let c = parse(&["--local", path, "--rw", "write", "--ops", "10"]).unwrap();
        assert!(run_single(c).is_err());
        assert!(untouched(&image));
    }
}
