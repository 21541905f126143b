//! `sluice model`: the analytical models of `sluice-model` on the command
//! line, as tables, JSON (`--json`) and SVG/PNG charts (`--plot FILE`).
//!
//! This module holds the arguments; [`run`](mod@run) what each subcommand
//! does (read files, call the model, write what it renders) and
//! [`scrape`] the metrics scrapes of `calibrate --metrics`. What computes
//! and what renders lives in the `sluice-model` crate.

mod run;
mod scrape;
#[cfg(test)]
mod tests;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand, ValueEnum};
use sluice_model::noncontig::FIGURE8_FILE_BYTES;
use sluice_model::raid::SweepKind;
use sluice_model::{Approximation, ClientPlacement, ModelError, ServerLayout};

/// Analytical models: queueing networks, networked RAID, non-contiguous I/O.
#[derive(Debug, Args)]
pub(crate) struct ModelArgs {
    #[command(subcommand)]
    command: ModelCommand,
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// Solve a closed single-class queueing network: exact or approximate
    /// MVA, with asymptotic and balanced job bounds.
    Mva(MvaArgs),
    /// Solve a closed multiclass network (exact or approximate MVA).
    Multiclass(MulticlassArgs),
    /// The networked RAID 5 model (from 'Study on I/O response time bounds of networked storage systems'): R(N) bounds and exact MVA,
    /// parameter sweeps (the paper's figures 3-8).
    Raid(RaidArgs),
    /// The non-contiguous transfer model (section 4.1 and figure 8 of 'Non-Contiguous I/O Support for Object-Based Storage'):
    /// iterative vs SGL vs strided.
    Noncontig(NoncontigArgs),
    /// Service demands D = U/X: from a running sluice's metrics (two
    /// scrapes, or two saved snapshots), or from a TOML file of counters.
    Calibrate(CalibrateArgs),
    /// Compare a `sluice bench` concurrency sweep with the exact MVA
    /// prediction and the bounds of a calibrated model; report the errors.
    Validate(ValidateArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Method {
    Schweitzer,
    Bard,
}

impl From<Method> for Approximation {
    fn from(m: Method) -> Self {
        match m {
            Method::Schweitzer => Self::Schweitzer,
            Method::Bard => Self::Bard,
        }
    }
}

/// Exact or approximate MVA.
#[derive(Debug, Args)]
struct SolverArgs {
    /// Approximate MVA instead of exact.
    #[arg(long)]
    approx: bool,
    /// Approximation used with --approx.
    #[arg(long, value_enum, default_value_t = Method::Schweitzer)]
    method: Method,
}

impl SolverArgs {
    /// The approximation asked for (None: exact MVA).
    fn approximation(&self) -> Option<Approximation> {
        self.approx.then(|| self.method.into())
    }
}

#[derive(Debug, Args)]
struct MvaArgs {
    /// Service demands of the queueing stations, seconds (D1,D2,...).
    #[arg(
        long,
        value_delimiter = ',',
        required = true,
        allow_negative_numbers = true
    )]
    demands: Vec<f64>,
    /// Demands of delay (infinite-server) stations, seconds; reported after
    /// the queueing stations.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    delay_demands: Vec<f64>,
    /// Think time Z, seconds.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    think: f64,
    /// Number of customers N.
    #[arg(long)]
    customers: u32,
    #[command(flatten)]
    solver: SolverArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Chart X(N) and R(N) against N = 1..customers with bounds (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct MulticlassArgs {
    /// A class as NAME:POPULATION:THINK:D1,D2,... (repeatable; one demand
    /// per station).
    #[arg(long = "class", required = true, value_name = "NAME:N:Z:DEMANDS")]
    classes: Vec<String>,
    /// 1-based indexes of stations that are delay centres.
    #[arg(long, value_delimiter = ',')]
    delay_stations: Vec<usize>,
    #[command(flatten)]
    solver: SolverArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// The paper's section 4 setting (3 storage servers, 100 Mb/s, writes).
    Paper,
}

/// `--sweep`: the names of [`SweepKind`], each with its figure.
fn sweep_kind() -> impl TypedValueParser<Value = SweepKind> {
    let values = SweepKind::ALL.map(|k| {
        PossibleValue::new(k.name()).help(format!("Figure {}: {}", k.figure(), k.label()))
    });
    PossibleValuesParser::new(values)
        .map(|name| SweepKind::parse(&name).expect("clap accepts only the names listed"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OpArg {
    Read,
    Write,
}

impl From<OpArg> for sluice_model::raid::RaidOp {
    fn from(op: OpArg) -> Self {
        match op {
            OpArg::Read => Self::Read,
            OpArg::Write => Self::Write,
        }
    }
}

#[derive(Debug, Args)]
struct RaidArgs {
    /// Starting parameters.
    #[arg(long, value_enum, default_value_t = Preset::Paper)]
    preset: Preset,
    /// TOML file overriding any parameter (field names as in --json output).
    #[arg(long, value_name = "FILE")]
    params: Option<PathBuf>,
    /// Read or write jobs.
    #[arg(long, value_enum)]
    op: Option<OpArg>,
    /// Think time Z between jobs, seconds.
    #[arg(long)]
    think: Option<f64>,
    /// Concurrent jobs to report (list); default 1..=--max-customers.
    #[arg(long, value_delimiter = ',')]
    customers: Vec<u32>,
    /// Largest concurrency when --customers is not given.
    #[arg(long, default_value_t = 10)]
    max_customers: u32,
    /// Vary one parameter (one curve per value).
    #[arg(long, value_parser = sweep_kind())]
    sweep: Option<SweepKind>,
    /// Values for --sweep (default: the sweep's own list).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    values: Vec<f64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Write a chart (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct NoncontigArgs {
    /// Bytes written (or read) in all; segments = file size / segment size.
    #[arg(long, default_value_t = FIGURE8_FILE_BYTES)]
    file_size: u64,
    /// Segment sizes in bytes (default powers of two, 1 B to 1 MiB).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// Round-trip time, microseconds.
    #[arg(long, default_value_t = 30.0)]
    rtt_us: f64,
    /// Network bandwidth, Mb/s.
    #[arg(long, default_value_t = 800.0)]
    bandwidth_mbps: f64,
    /// Model a read (adds RTT/2 for the request message).
    #[arg(long)]
    read: bool,
    /// The link carries both directions at the bandwidth at once: a read's
    /// list goes up while its data comes down (the paper: one stream).
    #[arg(long)]
    full_duplex: bool,
    /// Segments one request carries at most: longer lists are sent as
    /// several requests, whose lists and data overlap on a full-duplex
    /// link (default: no limit, full overlap).
    #[arg(long)]
    max_segments: Option<u64>,
    /// SGL overhead independent of the segment count, bytes (16 in section
    /// 4.1; the figure 6 header has 8).
    #[arg(long, default_value_t = 16.0)]
    sgl_fixed_bytes: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write a chart (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LayoutArg {
    /// One station, server-cpu: the server's process CPU per request.
    Cpu,
    /// server-cpu (CPU outside the stages), device (execute stages), send.
    Stages,
}

impl From<LayoutArg> for ServerLayout {
    fn from(l: LayoutArg) -> Self {
        match l {
            LayoutArg::Cpu => Self::Cpu,
            LayoutArg::Stages => Self::Stages,
        }
    }
}

#[derive(Debug, Args)]
struct CalibrateArgs {
    /// Metrics of a running sluice (sluice serve --metrics ADDR), e.g.
    /// http://127.0.0.1:9109/metrics: scraped twice, --interval apart or
    /// around the COMMAND given after `--`.
    #[arg(long, value_name = "URL", conflicts_with_all = ["file", "before", "after"])]
    metrics: Option<String>,
    /// With --metrics: time between the two scrapes (5s, 500ms, 1m). With
    /// --before/--after: the time between the snapshots, when the files do
    /// not record it.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    interval: Option<f64>,
    /// A saved snapshot of the metrics taken before the load.
    #[arg(long, value_name = "FILE", requires = "after", conflicts_with = "file")]
    before: Option<PathBuf>,
    /// A saved snapshot taken after the load.
    #[arg(
        long,
        value_name = "FILE",
        requires = "before",
        conflicts_with = "file"
    )]
    after: Option<PathBuf>,
    /// With --metrics: also save the first scrape here (with its time).
    #[arg(long, value_name = "FILE", requires = "metrics")]
    save_before: Option<PathBuf>,
    /// With --metrics: also save the second scrape here.
    #[arg(long, value_name = "FILE", requires = "metrics")]
    save_after: Option<PathBuf>,
    /// Count only the requests of this export (default: every export).
    #[arg(long, value_name = "NAME")]
    export: Option<String>,
    /// Which stations the server's counters become.
    #[arg(long, value_enum, default_value_t = LayoutArg::Cpu)]
    layout: LayoutArg,
    /// Servers of the server-cpu station (threads working at once: 1 for
    /// one connection).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    cpu_servers: u32,
    /// Servers of the device station (--layout stages).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    device_servers: u32,
    /// Add a client station with this demand, seconds per request (e.g.
    /// the client CPU per operation sluice bench reports).
    #[arg(long, value_name = "SECONDS")]
    client_demand: Option<f64>,
    /// Model the client as a delay centre instead of a queue.
    #[arg(long, requires = "client_demand")]
    client_delay: bool,
    /// TOML file of counters instead of metrics: interval_seconds,
    /// completions and [[stations]] with name, busy_seconds (and optional
    /// servers, delay).
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// Think time Z for the network built from the demands, seconds.
    #[arg(long, default_value_t = 0.0)]
    think: f64,
    /// Also solve the calibrated network with this many customers.
    #[arg(long)]
    customers: Option<u32>,
    /// Print JSON instead of a table (the input of validate --calibration).
    #[arg(long)]
    json: bool,
    /// With --metrics: a command to run between the two scrapes (its
    /// output goes to stderr), e.g. `-- sluice bench --uri ... --qd 8`.
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ClientArg {
    /// A queueing station (one client thread serves its requests in turn).
    Queueing,
    /// A delay station (no queueing at the client).
    Delay,
    /// Client and server share one CPU (both pinned to one core): the
    /// client's demand is added to the server-cpu station.
    Shared,
    /// No client station.
    None,
}

impl ClientArg {
    /// Where the client's demand goes (None: no client in the model).
    fn placement(self) -> Option<ClientPlacement> {
        match self {
            Self::Queueing => Some(ClientPlacement::Queueing),
            Self::Delay => Some(ClientPlacement::Delay),
            Self::Shared => Some(ClientPlacement::Shared),
            Self::None => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AggregateArg {
    /// Median of X and of R (robust to a disturbed run).
    Median,
    /// Mean of X and of R.
    Mean,
}

impl From<AggregateArg> for sluice_model::Aggregate {
    fn from(a: AggregateArg) -> Self {
        match a {
            AggregateArg::Median => Self::Median,
            AggregateArg::Mean => Self::Mean,
        }
    }
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// JSON written by sluice bench (--json FILE, or a preset's report);
    /// several files (one per queue depth, say) after one --bench or each
    /// after its own. Runs at the same N are averaged.
    #[arg(long = "bench", value_name = "FILE", required = true, num_args = 1..)]
    bench: Vec<PathBuf>,
    /// Keep only runs of this target label (uri, embedded, sluice, ...).
    #[arg(long, value_name = "LABEL")]
    target: Option<String>,
    /// The model: JSON from sluice model calibrate --json. Several files
    /// (one per N, each made with --customers N around the run at N)
    /// predict each N with the demands measured at that N.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["demands", "delay_demands"])]
    calibration: Vec<PathBuf>,
    /// The model by hand: queueing-station demands, seconds (D1,D2,...).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    demands: Vec<f64>,
    /// Delay-station demands, seconds.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    delay_demands: Vec<f64>,
    /// How the load generator's own work enters the model: a client
    /// station (or, with shared, extra demand at server-cpu) whose demand
    /// is --client-demand or else the client CPU per request the bench
    /// file reports (over all its runs; per N with one calibration per N).
    #[arg(long, value_enum, default_value_t = ClientArg::Queueing)]
    client: ClientArg,
    /// Demand of the client station, seconds per request.
    #[arg(long, value_name = "SECONDS")]
    client_demand: Option<f64>,
    /// Think time Z, seconds (default: the calibration's, or 0).
    #[arg(long)]
    think: Option<f64>,
    /// How runs at the same N (repeated sweeps, rounds) are combined.
    #[arg(long, value_enum, default_value_t = AggregateArg::Median)]
    aggregate: AggregateArg,
    /// Chart R(N) and X(N), measured vs MVA and bounds (.svg or .png).
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// Title of the chart.
    #[arg(long, default_value = "sluice, one server")]
    title: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Parses a duration flag as seconds.
fn parse_duration(s: &str) -> Result<f64, String> {
    sluice_types::parse_duration(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| e.to_string())
}

/// An error in what the user asked for, as opposed to a failure while
/// doing it: the binary maps it to exit status 2 (see [`is_usage_error`]).
#[derive(Debug)]
pub(crate) struct ModelUsageError(String);

impl std::fmt::Display for ModelUsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ModelUsageError {}

/// True when `e` comes from bad input to `sluice model` (exit status 2).
pub(crate) fn is_usage_error(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<ModelUsageError>().is_some()
            || matches!(
                c.downcast_ref::<ModelError>(),
                Some(m) if !matches!(m, ModelError::Plot(_) | ModelError::NotConverged { .. })
            )
    })
}

/// Runs `sluice model ...`, printing to stdout.
pub(crate) fn run(args: ModelArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run_to(args, &mut out).and_then(|()| out.flush().context("cannot write to stdout")) {
        // Whoever read the output stopped (`| head`): nothing went wrong.
        Err(e) if crate::pipe::chain_has_closed_pipe(&e) => Ok(()),
        result => result,
    }
}

fn run_to(args: ModelArgs, out: &mut dyn Write) -> Result<()> {
    match args.command {
        ModelCommand::Mva(a) => run::mva(&a, out),
        ModelCommand::Multiclass(a) => run::multiclass(&a, out),
        ModelCommand::Raid(a) => run::raid(&a, out),
        ModelCommand::Noncontig(a) => run::noncontig(&a, out),
        ModelCommand::Calibrate(a) => run::calibrate(&a, out),
        ModelCommand::Validate(a) => run::validate(&a, out),
    }
}
