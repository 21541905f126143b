//! `sluice model`: the analytical models of `sluice-model` on the command
//! line, as tables, JSON (`--json`) and SVG/PNG charts (`--plot FILE`).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use sluice_model::noncontig::{
    by_segment_size, figure8_sizes, Direction, NoncontigParams, SizePoint, FIGURE8_FILE_BYTES,
};
use sluice_model::plot::{self, Chart, LineStyle, Series};
use sluice_model::prometheus::{scrape_comment, ServerCounters};
use sluice_model::raid::{raid_curve, sweep, RaidCurve, RaidOp, RaidParams, Sweep, SweepKind};
use sluice_model::validation::{client_cpu_per_request, BenchRun, ValidationPoint};
use sluice_model::{
    approximate_mva_multiclass, exact_mva_curve, exact_mva_multiclass, mva_report, ApproxOptions,
    Approximation, Calibration, ClosedNetwork, CustomerClass, ModelError, MulticlassNetwork,
    MulticlassSolution, MulticlassStation, ServerCalibration, ServerLayout, ServerModelOptions,
    Station, StationKind,
};

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
    /// The networked RAID 5 model (seeds/002): R(N) bounds and exact MVA,
    /// parameter sweeps (the paper's figures 3-8).
    Raid(RaidArgs),
    /// The non-contiguous transfer model (seeds/001 section 4.1, figure 8):
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
    /// Approximate MVA instead of exact.
    #[arg(long)]
    approx: bool,
    /// Approximation used with --approx.
    #[arg(long, value_enum, default_value_t = Method::Schweitzer)]
    method: Method,
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
    /// Approximate MVA instead of exact.
    #[arg(long)]
    approx: bool,
    /// Approximation used with --approx.
    #[arg(long, value_enum, default_value_t = Method::Schweitzer)]
    method: Method,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Preset {
    /// The paper's section 4 setting (3 storage servers, 100 Mb/s, writes).
    Paper,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SweepArg {
    /// Figure 4: network bandwidth, Mb/s.
    Bandwidth,
    /// Figure 5: central cache hit rate.
    CacheHit,
    /// Figure 6: central CPU speed (x the paper's PIII 650).
    Cpu,
    /// Figure 7: storage-server CPU speed.
    StorageCpu,
    /// Figure 8: disk transfer rate, MB/s.
    Disk,
    /// Figure 3: concurrent jobs (values are populations).
    Concurrency,
}

impl From<SweepArg> for SweepKind {
    fn from(s: SweepArg) -> Self {
        match s {
            SweepArg::Bandwidth => Self::Bandwidth,
            SweepArg::CacheHit => Self::CacheHit,
            SweepArg::Cpu => Self::Cpu,
            SweepArg::StorageCpu => Self::StorageCpu,
            SweepArg::Disk => Self::Disk,
            SweepArg::Concurrency => Self::Concurrency,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OpArg {
    Read,
    Write,
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
    #[arg(long, value_enum)]
    sweep: Option<SweepArg>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AggregateArg {
    /// Median of X and of R (robust to a disturbed run).
    Median,
    /// Mean of X and of R.
    Mean,
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
#[allow(dead_code)] // used by src/main.rs once wired
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
    run_to(args, &mut out)?;
    out.flush().context("cannot write to stdout")
}

fn run_to(args: ModelArgs, out: &mut dyn Write) -> Result<()> {
    match args.command {
        ModelCommand::Mva(a) => mva(a, out),
        ModelCommand::Multiclass(a) => multiclass(a, out),
        ModelCommand::Raid(a) => raid(a, out),
        ModelCommand::Noncontig(a) => noncontig(a, out),
        ModelCommand::Calibrate(a) => calibrate(a, out),
        ModelCommand::Validate(a) => validate_cmd(a, out),
    }
}

fn json(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).context("cannot write JSON")?;
    writeln!(out).context("cannot write to stdout")
}

/// `v` with about seven significant digits, without an exponent for the
/// magnitudes these models produce.
fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let mag = v.abs().log10().floor() as i32;
    if !(-4..=12).contains(&mag) {
        return format!("{v:.6e}");
    }
    let decimals = (6 - mag).clamp(0, 10) as usize;
    format!("{v:.decimals$}")
}

/// Right-aligned text table.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect();
        parts.join("  ").trim_end().to_owned()
    };
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    let mut s = line(headers.to_vec());
    s.push('\n');
    s.push_str(&rule.join("  "));
    s.push('\n');
    for r in rows {
        s.push_str(&line(r.iter().map(String::as_str).collect()));
        s.push('\n');
    }
    s
}

fn write_plot(path: &Path, chart: &Chart) -> Result<()> {
    write_panels(path, std::slice::from_ref(chart), plot::DEFAULT_SIZE)
}

/// Writes charts side by side as SVG or PNG, by the file's extension.
fn write_panels(path: &Path, charts: &[Chart], size: (u32, u32)) -> Result<()> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let bytes = match ext.as_deref() {
        Some("svg") => plot::render_svg_panels(charts, size)?.into_bytes(),
        Some("png") => plot::render_png_panels(charts, size)?,
        _ => {
            return Err(ModelUsageError(format!(
                "--plot {}: the file name must end in .svg or .png",
                path.display()
            ))
            .into())
        }
    };
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

fn mva(a: MvaArgs, out: &mut dyn Write) -> Result<()> {
    let net = ClosedNetwork::from_demands(&a.demands, &a.delay_demands, a.think)?;
    let approx = a.approx.then(|| a.method.into());
    let report = mva_report(&net, a.customers, approx)?;
    if let Some(path) = &a.plot {
        write_plot(path, &mva_chart(&net, a.customers)?)?;
    }
    if a.json {
        return json(out, &report);
    }
    let rows: Vec<Vec<String>> = (0..report.stations.len())
        .map(|i| {
            vec![
                report.stations[i].clone(),
                num(net.stations()[i].demand),
                num(report.utilizations[i]),
                num(report.queue_lengths[i]),
                num(report.residence_times[i]),
            ]
        })
        .collect();
    let b = &report.bounds;
    let text = format!(
        "{method} MVA, N = {n}, Z = {z} s\n\
         throughput X = {x} jobs/s, response time R = {r} s\n\n{stations}\n{bounds}",
        method = report.method,
        n = report.customers,
        z = report.think_time,
        x = num(report.throughput),
        r = num(report.response_time),
        stations = table(
            &["station", "demand s", "utilization", "queue", "residence s"],
            &rows
        ),
        bounds = table(
            &["bounds", "X lower", "X upper", "R lower", "R upper"],
            &[
                bound_row("asymptotic", &b.asymptotic),
                bound_row("balanced job", &b.balanced_job),
            ]
        ),
    );
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")
}

fn bound_row(name: &str, b: &sluice_model::PerfBounds) -> Vec<String> {
    vec![
        name.to_owned(),
        num(b.throughput[0]),
        num(b.throughput[1]),
        num(b.response_time[0]),
        num(b.response_time[1]),
    ]
}

fn mva_chart(net: &ClosedNetwork, n: u32) -> Result<Chart> {
    let curve = exact_mva_curve(net, n)?;
    let mut lo = Vec::new();
    let mut hi = Vec::new();
    for k in 1..=n {
        let b = sluice_model::bounds(net, k)?;
        lo.push((f64::from(k), b.balanced_job.response_time[0]));
        hi.push((f64::from(k), b.balanced_job.response_time[1]));
    }
    Ok(Chart {
        title: "response time vs customers".into(),
        x_label: "customers N".into(),
        y_label: "response time R(N), s".into(),
        x_log: false,
        y_log: false,
        legend: plot::Legend::UpperLeft,
        series: vec![
            Series {
                label: "exact MVA".into(),
                points: curve
                    .iter()
                    .map(|s| (f64::from(s.customers), s.response_time))
                    .collect(),
                style: LineStyle::Solid,
                color: 0,
            },
            Series {
                label: "balanced job bound, lower".into(),
                points: lo,
                style: LineStyle::Dashed,
                color: 1,
            },
            Series {
                label: "balanced job bound, upper".into(),
                points: hi,
                style: LineStyle::Dashed,
                color: 2,
            },
        ],
    })
}

fn parse_class(spec: &str) -> Result<CustomerClass> {
    let bad = |why: &str| {
        ModelUsageError(format!(
            "--class '{spec}': {why} (expected NAME:N:Z:D1,D2,...)"
        ))
    };
    let parts: Vec<&str> = spec.splitn(4, ':').collect();
    let [name, n, z, d] = parts[..] else {
        return Err(bad("needs four ':'-separated fields").into());
    };
    let population = n
        .trim()
        .parse()
        .map_err(|_| bad("population must be a whole number"))?;
    let think = z
        .trim()
        .parse()
        .map_err(|_| bad("think time must be a number"))?;
    let demands = d
        .split(',')
        .map(|v| v.trim().parse::<f64>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| bad("demands must be numbers"))?;
    Ok(CustomerClass::new(name, population, think, demands))
}

fn multiclass(a: MulticlassArgs, out: &mut dyn Write) -> Result<()> {
    let classes = a
        .classes
        .iter()
        .map(|s| parse_class(s))
        .collect::<Result<Vec<_>>>()?;
    let k = classes.first().map_or(0, |c| c.demands.len());
    for &i in &a.delay_stations {
        if i == 0 || i > k {
            return Err(ModelUsageError(format!(
                "--delay-stations {i}: stations are numbered 1..={k}"
            ))
            .into());
        }
    }
    let stations = (1..=k)
        .map(|i| {
            if a.delay_stations.contains(&i) {
                MulticlassStation::delay(format!("s{i}"))
            } else {
                MulticlassStation::queueing(format!("s{i}"))
            }
        })
        .collect();
    let net = MulticlassNetwork::new(stations, classes)?;
    let sol: MulticlassSolution = if a.approx {
        approximate_mva_multiclass(&net, a.method.into(), ApproxOptions::default())?
    } else {
        exact_mva_multiclass(&net)?
    };
    if a.json {
        return json(out, &sol);
    }
    let rows: Vec<Vec<String>> = sol
        .classes
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.population.to_string(),
                num(c.throughput),
                num(c.response_time),
            ]
        })
        .collect();
    let srows: Vec<Vec<String>> = sol
        .stations
        .iter()
        .map(|s| vec![s.name.clone(), num(s.utilization), num(s.queue_length)])
        .collect();
    let text = format!(
        "{}\n{}",
        table(&["class", "N", "X jobs/s", "R s"], &rows),
        table(&["station", "utilization", "queue"], &srows)
    );
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")
}

fn raid_params(a: &RaidArgs) -> Result<RaidParams> {
    let mut p = match a.preset {
        Preset::Paper => RaidParams::paper(),
    };
    if let Some(path) = &a.params {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        // Fields absent from the file keep the paper's values.
        p = toml::from_str(&text).map_err(|e| {
            ModelUsageError(format!(
                "parameter file {}: {}",
                path.display(),
                e.message()
            ))
        })?;
    }
    if let Some(op) = a.op {
        p.op = match op {
            OpArg::Read => RaidOp::Read,
            OpArg::Write => RaidOp::Write,
        };
    }
    if let Some(z) = a.think {
        p.think_time = z;
    }
    p.validate()?;
    Ok(p)
}

fn raid(a: RaidArgs, out: &mut dyn Write) -> Result<()> {
    let params = raid_params(&a)?;
    let customers = if a.customers.is_empty() {
        if a.max_customers == 0 {
            return Err(ModelError::ZeroCustomers.into());
        }
        if a.max_customers > sluice_model::mva::MAX_CURVE_POINTS {
            return Err(ModelUsageError(format!(
                "--max-customers {}: at most {} rows; list the populations you want with --customers",
                a.max_customers,
                sluice_model::mva::MAX_CURVE_POINTS
            ))
            .into());
        }
        (1..=a.max_customers).collect()
    } else {
        a.customers.clone()
    };
    if let Some(kind) = a.sweep {
        let kind = SweepKind::from(kind);
        let values = if a.values.is_empty() {
            if kind == SweepKind::Concurrency {
                customers.iter().map(|&n| f64::from(n)).collect()
            } else {
                kind.default_values()
            }
        } else {
            a.values.clone()
        };
        let s = sweep(&params, kind, &values, &customers)?;
        if let Some(path) = &a.plot {
            write_plot(path, &plot::sweep_chart(&s))?;
        }
        return if a.json {
            json(out, &s)
        } else {
            out.write_all(sweep_text(&s).as_bytes())
                .context("cannot write to stdout")
        };
    }
    if !a.values.is_empty() {
        return Err(ModelUsageError("--values needs --sweep".into()).into());
    }
    let curve = raid_curve(&params, &customers)?;
    if let Some(path) = &a.plot {
        write_plot(
            path,
            &plot::raid_chart(&curve, "Networked RAID 5 (paper setting): R(N)"),
        )?;
    }
    if a.json {
        return json(out, &curve);
    }
    out.write_all(raid_text(&curve).as_bytes())
        .context("cannot write to stdout")
}

fn raid_text(c: &RaidCurve) -> String {
    let p = &c.params;
    let d = &c.demands;
    let mut s = format!(
        "networked RAID 5, {:?}: job {} B, stripe unit {} B x {} (storage servers {}), \
         Ethernet {} Mb/s, cache hit {} / {}, Z = {} s\n\
         S_mR5 = {} B, IP_num = {}\n\n",
        p.op,
        p.job_bytes,
        p.stripe_unit,
        p.stripe_width,
        p.storage_servers,
        p.ethernet_rate * 8.0 / 1e6,
        p.central_cache_hit,
        p.storage_cache_hit,
        p.think_time,
        d.bytes_central,
        d.ip_packets,
    );
    let drows: Vec<Vec<String>> = d
        .named()
        .iter()
        .map(|(name, sym, v)| vec![(*name).to_owned(), (*sym).to_owned(), num(*v)])
        .collect();
    s.push_str(&table(&["station", "symbol (eq.)", "demand s"], &drows));
    s.push('\n');
    let rows: Vec<Vec<String>> = c
        .points
        .iter()
        .map(|p| {
            let b = &p.bounds;
            vec![
                p.customers.to_string(),
                num(b.balanced_job.response_time[0]),
                num(p.response_time),
                num(b.balanced_job.response_time[1]),
                num(b.asymptotic.response_time[0]),
                num(b.asymptotic.response_time[1]),
                num(p.throughput),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "N",
            "BJB R lower s",
            "MVA R s",
            "BJB R upper s",
            "asym R lower s",
            "asym R upper s",
            "MVA X jobs/s",
        ],
        &rows,
    ));
    s
}

fn sweep_text(s: &Sweep) -> String {
    let mut rows = Vec::new();
    for series in &s.series {
        for p in &series.curve.points {
            rows.push(vec![
                series.value.map_or_else(|| "-".into(), |v| v.to_string()),
                p.customers.to_string(),
                num(p.bounds.balanced_job.response_time[0]),
                num(p.response_time),
                num(p.bounds.balanced_job.response_time[1]),
                num(p.throughput),
            ]);
        }
    }
    format!(
        "figure {}: sweep of {}\n{}",
        s.figure,
        s.label,
        table(
            &[
                s.kind.name(),
                "N",
                "BJB R lower s",
                "MVA R s",
                "BJB R upper s",
                "MVA X jobs/s"
            ],
            &rows
        )
    )
}

fn noncontig(a: NoncontigArgs, out: &mut dyn Write) -> Result<()> {
    let params = NoncontigParams {
        rtt: a.rtt_us * 1e-6,
        bandwidth: a.bandwidth_mbps * 1e6 / 8.0,
        direction: if a.read {
            Direction::Read
        } else {
            Direction::Write
        },
        sgl_fixed_bytes: a.sgl_fixed_bytes,
        ..NoncontigParams::paper()
    };
    let sizes = if a.sizes.is_empty() {
        figure8_sizes()
            .into_iter()
            .filter(|&s| s <= a.file_size)
            .collect()
    } else {
        a.sizes.clone()
    };
    let points = by_segment_size(&params, a.file_size, &sizes)?;
    if let Some(path) = &a.plot {
        let size = if a.file_size & ((1 << 20) - 1) == 0 {
            format!("{} MiB", a.file_size >> 20)
        } else {
            format!("{} bytes", a.file_size)
        };
        let title = format!(
            "{} model: {size}, RTT {} us, {} Mb/s",
            if a.read { "Read" } else { "Write" },
            a.rtt_us,
            a.bandwidth_mbps
        );
        write_plot(path, &plot::noncontig_chart(&points, &title))?;
    }
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            params: NoncontigParams,
            file_bytes: u64,
            points: &'a [SizePoint],
        }
        return json(
            out,
            &Out {
                params,
                file_bytes: a.file_size,
                points: &points,
            },
        );
    }
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|p| {
            let mut r = vec![p.segment_bytes.to_string(), p.segments.to_string()];
            r.extend(p.transfers.iter().map(|t| num(t.throughput / 1e6)));
            r.extend(p.transfers.iter().map(|t| num(t.time)));
            r
        })
        .collect();
    let text = table(
        &[
            "segment B",
            "segments",
            "iterative MB/s",
            "sgl MB/s",
            "strided MB/s",
            "iterative s",
            "sgl s",
            "strided s",
        ],
        &rows,
    );
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")
}

fn calibrate(a: CalibrateArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(file) = &a.file {
        return calibrate_file(&a, file, out);
    }
    let (before, after) = if let Some(url) = &a.metrics {
        snapshots_from_server(&a, url)?
    } else if let (Some(b), Some(f)) = (&a.before, &a.after) {
        if !a.command.is_empty() {
            return Err(ModelUsageError(
                "a command after `--` needs --metrics URL (it runs between two scrapes)".into(),
            )
            .into());
        }
        (read_snapshot(b)?, read_snapshot(f)?)
    } else {
        return Err(ModelUsageError(
            "say where the counters come from: --metrics URL [--interval 5s | -- COMMAND], --before FILE --after FILE, or --file COUNTERS.toml"
                .into(),
        )
        .into());
    };
    let parse = |text: &str, what: &str| {
        ServerCounters::from_text(text, a.export.as_deref())
            .with_context(|| format!("the {what} snapshot"))
    };
    let before = parse(&before, "'before'")?;
    let after = parse(&after, "'after'")?;
    let opts = ServerModelOptions {
        layout: a.layout.into(),
        // With --metrics the scrape times give the interval.
        interval_seconds: if a.metrics.is_some() {
            None
        } else {
            a.interval
        },
        cpu_servers: a.cpu_servers,
        device_servers: a.device_servers,
        client: a.client_demand.map(|demand| sluice_model::ClientStation {
            demand,
            delay: a.client_delay,
        }),
        think_time: a.think,
    };
    let cal = sluice_model::server_calibration(&before, &after, &opts)?;
    let solved = match a.customers {
        Some(n) => Some(sluice_model::exact_mva(&cal.network, n)?),
        None => None,
    };
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            calibration: &'a ServerCalibration,
            mva: Option<sluice_model::Solution>,
        }
        return json(
            out,
            &Out {
                calibration: &cal,
                mva: solved,
            },
        );
    }
    let mut s = calibration_text(&cal);
    if let Some(r) = solved {
        s.push_str(&format!(
            "\npredicted with N = {}: X = {} requests/s, R = {} s\n",
            r.customers,
            num(r.throughput),
            num(r.response_time)
        ));
    }
    out.write_all(s.as_bytes())
        .context("cannot write to stdout")
}

fn calibration_text(cal: &ServerCalibration) -> String {
    let us = |v: f64| format!("{} us", num(v * 1e6));
    let reqs: Vec<String> = cal
        .requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let mut s = format!(
        "{} requests ({}){}\n",
        cal.completions,
        reqs.join(", "),
        match (cal.interval_seconds, cal.throughput) {
            (Some(t), Some(x)) => format!(" in {} s: X = {} requests/s", num(t), num(x)),
            _ => String::new(),
        }
    );
    let p = &cal.per_request;
    s.push_str(&format!(
        "per request: process CPU {}, execute inline {}, execute pool {}, send {}, server time {}, {} bytes\n\n",
        p.cpu.map_or_else(|| "-".into(), us),
        us(p.execute_inline),
        us(p.execute_pool),
        us(p.send),
        p.server_time.map_or_else(|| "-".into(), us),
        num(p.bytes),
    ));
    let rows: Vec<Vec<String>> = cal
        .stations
        .iter()
        .map(|st| {
            vec![
                st.name.clone(),
                if st.delay { "delay" } else { "queueing" }.to_owned(),
                st.servers.to_string(),
                st.busy_seconds.map_or_else(|| "-".into(), num),
                st.utilization.map_or_else(|| "-".into(), num),
                num(st.demand),
                st.source.clone(),
            ]
        })
        .collect();
    s.push_str(&format!("layout {}\n", cal.layout.name()));
    s.push_str(&table(
        &[
            "station",
            "kind",
            "servers",
            "busy s",
            "utilization",
            "demand s",
            "from",
        ],
        &rows,
    ));
    if let Some(cmd) = mva_command(&cal.network) {
        s.push_str(&format!("\nas an mva command: {cmd}\n"));
    }
    for n in &cal.notes {
        s.push_str(&format!("note: {n}\n"));
    }
    s
}

/// The `sluice model mva` command line for a network of single-server
/// queueing and delay stations (None with load-dependent stations).
fn mva_command(net: &ClosedNetwork) -> Option<String> {
    let mut q = Vec::new();
    let mut d = Vec::new();
    for st in net.stations() {
        match st.kind {
            StationKind::Queueing => q.push(format!("{:.6e}", st.demand)),
            StationKind::Delay => d.push(format!("{:.6e}", st.demand)),
            _ => return None,
        }
    }
    let mut cmd = format!("sluice model mva --demands {}", q.join(","));
    if q.is_empty() {
        return None;
    }
    if !d.is_empty() {
        cmd.push_str(&format!(" --delay-demands {}", d.join(",")));
    }
    if net.think_time() > 0.0 {
        cmd.push_str(&format!(" --think {}", net.think_time()));
    }
    cmd.push_str(" --customers N");
    Some(cmd)
}

fn read_snapshot(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Scrapes twice, around `--interval` or the command; returns both texts,
/// each starting with its scrape-time comment.
fn snapshots_from_server(a: &CalibrateArgs, url: &str) -> Result<(String, String)> {
    match (a.interval, a.command.is_empty()) {
        (Some(_), false) => {
            return Err(ModelUsageError(
                "give either --interval or a command after `--`, not both".into(),
            )
            .into())
        }
        (None, true) => {
            return Err(ModelUsageError(
                "--metrics needs --interval DURATION (e.g. 5s) or a command to run after `--`"
                    .into(),
            )
            .into())
        }
        _ => {}
    }
    let before = scrape_timed(url)?;
    if let Some(p) = &a.save_before {
        std::fs::write(p, &before).with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(t) = a.interval {
        eprintln!("sluice model calibrate: scraped {url}; scraping again in {t} s");
        std::thread::sleep(Duration::from_secs_f64(t));
    } else {
        run_between(&a.command)?;
    }
    let after = scrape_timed(url)?;
    if let Some(p) = &a.save_after {
        std::fs::write(p, &after).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok((before, after))
}

/// Runs the command between the scrapes, its stdout sent to our stderr so
/// that our stdout (a table or JSON) stays clean.
fn run_between(command: &[String]) -> Result<()> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| ModelUsageError("empty command after `--`".into()))?;
    let stdout = {
        use std::os::fd::AsFd;
        std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .context("cannot duplicate stderr")?
    };
    let status = std::process::Command::new(prog)
        .args(args)
        .stdout(std::process::Stdio::from(stdout))
        .status()
        .with_context(|| format!("cannot run {prog}"))?;
    if !status.success() {
        anyhow::bail!("{prog} failed ({status}); the scrapes around it are not used");
    }
    Ok(())
}

fn scrape_timed(url: &str) -> Result<String> {
    let body = scrape(url)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Ok(format!("{}{body}", scrape_comment(now)))
}

/// Most bytes a metrics response may have.
const MAX_SCRAPE_BYTES: u64 = 64 << 20;

/// `GET` over HTTP/1.0 with std's TcpStream: enough for sluice's metrics
/// endpoint (and any Prometheus exporter on plain HTTP).
fn scrape(url: &str) -> Result<String> {
    let usage = |why: &str| ModelUsageError(format!("--metrics {url}: {why}"));
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        usage("only http:// URLs are supported (e.g. http://127.0.0.1:9109/metrics)")
    })?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    if hostport.is_empty() {
        return Err(usage("no host").into());
    }
    let addr_text = if hostport.contains(':') && !hostport.ends_with(']') {
        hostport.to_owned()
    } else {
        format!("{hostport}:80")
    };
    let addrs: Vec<_> = addr_text
        .to_socket_addrs()
        .map_err(|e| usage(&format!("cannot resolve {hostport}: {e}")))?
        .collect();
    let timeout = Duration::from_secs(10);
    let mut last = None;
    let mut stream = None;
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = stream.ok_or_else(|| {
        anyhow::anyhow!(
            "cannot connect to {hostport}: {}; is sluice serve running with --metrics {hostport}?",
            last.map_or_else(|| "no address".into(), |e| e.to_string())
        )
    })?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {hostport}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )
    .with_context(|| format!("cannot send the request to {hostport}"))?;
    let mut raw = Vec::new();
    stream
        .take(MAX_SCRAPE_BYTES)
        .read_to_end(&mut raw)
        .with_context(|| format!("cannot read the response from {url}"))?;
    parse_http_response(&raw).with_context(|| format!("GET {url}"))
}

/// The body of an HTTP/1.x response, which must be `200`; chunked
/// transfer encoding is decoded.
fn parse_http_response(raw: &[u8]) -> Result<String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("not an HTTP response (no end of headers)"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") {
        anyhow::bail!("not an HTTP response: '{status}'");
    }
    if code != "200" {
        anyhow::bail!("the server answered '{status}'");
    }
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    String::from_utf8(body).context("the metrics are not UTF-8 text")
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| anyhow::anyhow!("truncated chunked body"))?;
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| anyhow::anyhow!("bad chunk size '{size_text}'"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            anyhow::bail!("truncated chunked body");
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

fn calibrate_file(a: &CalibrateArgs, file: &Path, out: &mut dyn Write) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let cal: Calibration = toml::from_str(&text).map_err(|e| {
        ModelUsageError(format!(
            "calibration file {}: {}",
            file.display(),
            e.message()
        ))
    })?;
    let demands = cal.demands()?;
    let network = cal.network(a.think)?;
    let report = match a.customers {
        // Exact MVA without bounds: multi-server stations are load-dependent.
        Some(n) => Some(sluice_model::exact_mva(&network, n)?),
        None => None,
    };
    if a.json {
        #[derive(Serialize)]
        struct Out {
            throughput: f64,
            demands: Vec<sluice_model::CalibratedDemand>,
            network: ClosedNetwork,
            mva: Option<sluice_model::Solution>,
        }
        return json(
            out,
            &Out {
                throughput: cal.throughput()?,
                demands,
                network,
                mva: report,
            },
        );
    }
    let rows: Vec<Vec<String>> = demands
        .iter()
        .map(|d| vec![d.name.clone(), num(d.utilization), num(d.demand)])
        .collect();
    let mut s = format!(
        "measured throughput X = {} jobs/s\n{}",
        num(cal.throughput()?),
        table(&["station", "utilization", "demand s"], &rows)
    );
    if let Some(r) = report {
        s.push_str(&format!(
            "\npredicted with N = {}: X = {} jobs/s, R = {} s\n",
            r.customers,
            num(r.throughput),
            num(r.response_time)
        ));
    }
    out.write_all(s.as_bytes())
        .context("cannot write to stdout")
}

/// Reads bench runs from files, keeping those of `target` when given.
fn read_bench_runs(paths: &[PathBuf], target: Option<&str>) -> Result<Vec<BenchRun>> {
    let mut runs = Vec::new();
    for p in paths {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        let doc: sluice_model::BenchDocument = serde_json::from_str(&text).map_err(|e| {
            ModelUsageError(format!(
                "{}: not a sluice bench JSON report ({e}); write one with sluice bench ... --json FILE",
                p.display()
            ))
        })?;
        runs.extend(doc.into_runs());
    }
    if let Some(t) = target {
        let labels: Vec<String> = runs.iter().map(|r| r.target.clone()).collect();
        runs.retain(|r| r.target == t);
        if runs.is_empty() {
            let mut labels = labels;
            labels.sort();
            labels.dedup();
            return Err(ModelUsageError(format!(
                "--target {t}: no such runs (targets in the files: {})",
                labels.join(", ")
            ))
            .into());
        }
    }
    Ok(runs)
}

/// A calibration file: the network, and the N it was measured at (its
/// `mva.customers`, from calibrate --customers N).
fn read_calibration(path: &Path) -> Result<(ClosedNetwork, Option<u32>)> {
    #[derive(serde::Deserialize)]
    struct Solved {
        customers: u32,
    }
    #[derive(serde::Deserialize)]
    struct CalFile {
        network: ClosedNetwork,
        #[serde(default)]
        mva: Option<Solved>,
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let f: CalFile = serde_json::from_str(&text).map_err(|e| {
        ModelUsageError(format!(
            "{}: not the JSON of sluice model calibrate --json ({e})",
            path.display()
        ))
    })?;
    Ok((f.network, f.mva.map(|m| m.customers)))
}

/// `base` plus the client station (demand `client`, when given) and think
/// time.
fn with_client(
    a: &ValidateArgs,
    base: &ClosedNetwork,
    client: Option<f64>,
) -> Result<ClosedNetwork> {
    let think = a.think.unwrap_or_else(|| base.think_time());
    let mut stations: Vec<Station> = base.stations().to_vec();
    if let (Some(d), ClientArg::Shared) = (client, a.client) {
        let cpu = stations
            .iter_mut()
            .find(|s| s.name == "server-cpu")
            .ok_or_else(|| {
                ModelUsageError(
                    "--client shared adds the client's demand to the station named server-cpu, and the model has none"
                        .into(),
                )
            })?;
        cpu.demand += d;
        cpu.name = "server-cpu+client".into();
        return Ok(ClosedNetwork::new(stations, think)?);
    }
    if let Some(d) = client {
        if stations.iter().any(|s| s.name == "client") {
            return Err(ModelUsageError(
                "the model already has a station named 'client': add --client none".into(),
            )
            .into());
        }
        stations.push(if a.client == ClientArg::Delay {
            Station::delay("client", d)
        } else {
            Station::queueing("client", d)
        });
    }
    Ok(ClosedNetwork::new(stations, think)?)
}

/// The client demand: --client-demand, or the bench's client CPU per
/// request (over `runs`); None with --client none.
fn client_demand(a: &ValidateArgs, runs: &[BenchRun]) -> Result<Option<f64>> {
    if a.client == ClientArg::None {
        if a.client_demand.is_some() {
            return Err(
                ModelUsageError("--client-demand needs --client queueing or delay".into()).into(),
            );
        }
        return Ok(None);
    }
    match a.client_demand {
        Some(d) => Ok(Some(d)),
        None => client_cpu_per_request(runs).map(Some).ok_or_else(|| {
            ModelUsageError(
                "the bench runs do not report client CPU (client_cpu_s): give --client-demand SECONDS or --client none"
                    .into(),
            )
            .into()
        }),
    }
}

fn validate_cmd(a: ValidateArgs, out: &mut dyn Write) -> Result<()> {
    let runs = read_bench_runs(&a.bench, a.target.as_deref())?;
    let how = match a.aggregate {
        AggregateArg::Median => sluice_model::Aggregate::Median,
        AggregateArg::Mean => sluice_model::Aggregate::Mean,
    };
    let measured = sluice_model::measured_points(&runs, how)?;
    let v = if a.calibration.len() > 1 {
        // One calibration per N: each N with its own demands, and the
        // client CPU measured at that N.
        let mut by_n = Vec::new();
        for path in &a.calibration {
            let (net, n) = read_calibration(path)?;
            let n = n.ok_or_else(|| {
                ModelUsageError(format!(
                    "{}: with several --calibration files each must say its N: make it with calibrate --customers N",
                    path.display()
                ))
            })?;
            if by_n.iter().any(|(k, _)| *k == n) {
                return Err(ModelUsageError(format!("two calibration files for N = {n}")).into());
            }
            by_n.push((n, net));
        }
        let mut nets = Vec::new();
        let mut kept = Vec::new();
        for m in &measured {
            let Some((_, base)) = by_n.iter().find(|(k, _)| *k == m.customers) else {
                return Err(ModelUsageError(format!(
                    "no calibration file for N = {} (measured in the bench files)",
                    m.customers
                ))
                .into());
            };
            let client = match (a.client, a.client_demand) {
                (ClientArg::None, _) => client_demand(&a, &runs)?,
                (_, Some(d)) => Some(d),
                (_, None) => Some(m.client_cpu_per_request.ok_or_else(|| {
                    ModelUsageError(format!(
                        "the bench runs at N = {} do not report client CPU: give --client-demand or --client none",
                        m.customers
                    ))
                })?),
            };
            nets.push(with_client(&a, base, client)?);
            kept.push(*m);
        }
        sluice_model::validate_each(&nets, &kept)?
    } else {
        let base = if let Some(path) = a.calibration.first() {
            read_calibration(path)?.0
        } else if !a.demands.is_empty() || !a.delay_demands.is_empty() {
            ClosedNetwork::from_demands(&a.demands, &a.delay_demands, 0.0)?
        } else {
            return Err(ModelUsageError(
                "give the model: --calibration FILE.json (from sluice model calibrate --json) or --demands D1,D2,...".into(),
            )
            .into());
        };
        let client = client_demand(&a, &runs)?;
        sluice_model::validate(&with_client(&a, &base, client)?, &measured)?
    };
    if let Some(path) = &a.plot {
        let charts = plot::validation_charts(&v, &a.title);
        write_panels(path, &charts, plot::VALIDATION_SIZE)?;
    }
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            validation: &'a sluice_model::Validation,
            measured: &'a [sluice_model::MeasuredPoint],
        }
        return json(
            out,
            &Out {
                validation: &v,
                measured: &measured,
            },
        );
    }
    out.write_all(validation_text(&v).as_bytes())
        .context("cannot write to stdout")
}

fn validation_text(v: &sluice_model::Validation) -> String {
    let us = |s: f64| num(s * 1e6);
    let pct = |e: f64| format!("{:+.1}", e * 100.0);
    let describe = |net: &ClosedNetwork| {
        let stations: Vec<String> = net
            .stations()
            .iter()
            .map(|s| {
                let kind = match &s.kind {
                    StationKind::Queueing => "queueing".to_owned(),
                    StationKind::Delay => "delay".to_owned(),
                    StationKind::LoadDependent { rates } => format!("{} servers", rates.len()),
                    _ => "other".to_owned(),
                };
                format!("{} ({kind}, D = {} us)", s.name, us(s.demand))
            })
            .collect();
        format!("{}; Z = {} s", stations.join(", "), net.think_time())
    };
    let mut s = if let [net] = &v.networks[..] {
        format!(
            "model: {}

",
            describe(net)
        )
    } else {
        let mut s = "models, one per N:
"
        .to_owned();
        for (p, net) in v.points.iter().zip(&v.networks) {
            s.push_str(&format!("  N = {}: {}\n", p.customers, describe(net)));
        }
        s.push('\n');
        s
    };
    let bjb = |p: &ValidationPoint, i: usize| {
        p.bounds
            .map_or_else(|| "-".into(), |b| us(b.balanced_job.response_time[i]))
    };
    let rows: Vec<Vec<String>> = v
        .points
        .iter()
        .map(|p| {
            vec![
                p.customers.to_string(),
                num(p.measured_throughput),
                num(p.predicted_throughput),
                pct(p.throughput_error),
                us(p.measured_response_time),
                us(p.predicted_response_time),
                pct(p.response_time_error),
                bjb(p, 0),
                bjb(p, 1),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "N",
            "X measured/s",
            "X MVA/s",
            "X err %",
            "R measured us",
            "R MVA us",
            "R err %",
            "R BJB lower us",
            "R BJB upper us",
        ],
        &rows,
    ));
    for (what, e) in [
        ("throughput", &v.throughput_error),
        ("response time", &v.response_time_error),
    ] {
        s.push_str(&format!(
            "{what} error: mean |e| {:.1} %, max |e| {:.1} % at N = {}, mean signed {:+.1} %\n",
            e.mean_abs * 100.0,
            e.max_abs * 100.0,
            e.max_at,
            e.mean_signed * 100.0
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        model: ModelArgs,
    }

    fn run_args(args: &[&str]) -> Result<String> {
        let cli = Cli::try_parse_from(std::iter::once("model").chain(args.iter().copied()))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut out = Vec::new();
        run_to(cli.model, &mut out)?;
        Ok(String::from_utf8(out)?)
    }

    #[test]
    fn mva_json_shape() {
        let out = run_args(&[
            "mva",
            "--demands",
            "0.605,2.1,1.35",
            "--delay-demands",
            "0.5",
            "--think",
            "15",
            "--customers",
            "3",
            "--json",
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(v["throughput"].as_f64().unwrap() > 0.0);
        assert!(v["response_time"].as_f64().unwrap() > 0.0);
        for k in ["queue_lengths", "utilizations", "residence_times"] {
            assert_eq!(v[k].as_array().unwrap().len(), 4, "{k}");
        }
        for b in ["asymptotic", "balanced_job"] {
            for q in ["throughput", "response_time"] {
                assert_eq!(v["bounds"][b][q].as_array().unwrap().len(), 2);
            }
        }
    }

    #[test]
    fn mva_lazowska_table() {
        let out = run_args(&[
            "mva",
            "--demands",
            "0.605,2.1,1.35",
            "--think",
            "15",
            "--customers",
            "3",
        ])
        .unwrap();
        assert!(out.contains("0.1515165"), "{out}");
    }

    #[test]
    fn bad_input_is_a_usage_error() {
        let e = run_args(&["mva", "--demands", "1,-2", "--customers", "3"]).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        assert!(format!("{e:#}").contains("-2"));
        let e = run_args(&["mva", "--demands", "1", "--customers", "0"]).unwrap_err();
        assert!(is_usage_error(&e) && format!("{e}").contains("customers"));
        let e = run_args(&["raid", "--plot", "x.gif"]).unwrap_err();
        assert!(is_usage_error(&e));
        let e = run_args(&["multiclass", "--class", "a:1:0"]).unwrap_err();
        assert!(is_usage_error(&e));
    }

    #[test]
    fn raid_paper_sweeps_and_noncontig_run() {
        let t = run_args(&["raid", "--preset", "paper"]).unwrap();
        assert!(t.contains("D_Cm (2)") && t.contains("BJB R lower"), "{t}");
        let j = run_args(&["raid", "--preset", "paper", "--json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["points"].as_array().unwrap().len(), 10);
        for s in [
            "bandwidth",
            "cache-hit",
            "cpu",
            "storage-cpu",
            "disk",
            "concurrency",
        ] {
            run_args(&["raid", "--sweep", s, "--customers", "1,5"]).unwrap();
        }
        let n = run_args(&["noncontig", "--sizes", "1024,65536"]).unwrap();
        assert!(n.contains("strided MB/s"), "{n}");
        let m = run_args(&["multiclass", "--class", "A:1:0:1,3", "--class", "B:1:0:2,4"]).unwrap();
        assert!(m.contains("0.1578947"), "{m}");
    }

    #[test]
    fn calibrate_from_toml() {
        let dir = std::env::temp_dir().join(format!("sluice-model-cal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(
            &file,
            "interval_seconds = 10.0\ncompletions = 2000\n\
             [[stations]]\nname = \"device\"\nbusy_seconds = 6.5\n\
             [[stations]]\nname = \"pool\"\nbusy_seconds = 9.0\nservers = 4\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let out = run_args(&["calibrate", "--file", f, "--customers", "8", "--json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["throughput"], serde_json::json!(200.0));
        assert!((v["demands"][0]["demand"].as_f64().unwrap() - 0.00325).abs() < 1e-15);
        assert!(v["mva"]["throughput"].as_f64().unwrap() > 200.0);
        std::fs::write(&file, "completions = 0\n").unwrap();
        let e = run_args(&["calibrate", "--file", f]).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/sluice-model/tests/data")
            .join(name)
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-model-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Requests and CPU between the two captured snapshots.
    const FIXTURE_REQUESTS: f64 = 3734.0;
    const FIXTURE_CPU: f64 = 0.15;

    #[test]
    fn calibrate_from_saved_snapshots() {
        let (b, a) = (
            fixture("metrics-before.prom"),
            fixture("metrics-after.prom"),
        );
        let (b, a) = (b.to_str().unwrap(), a.to_str().unwrap());
        let out = run_args(&["calibrate", "--before", b, "--after", a, "--json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["completions"], serde_json::json!(3734));
        let d = v["stations"][0]["demand"].as_f64().unwrap();
        assert!((d - FIXTURE_CPU / FIXTURE_REQUESTS).abs() < 1e-15, "{d}");
        assert_eq!(v["network"]["stations"][0]["name"], "server-cpu");
        assert_eq!(v["network"]["stations"][0]["kind"], "queueing");
        let t = run_args(&[
            "calibrate",
            "--before",
            b,
            "--after",
            a,
            "--layout",
            "stages",
            "--client-demand",
            "1e-6",
            "--customers",
            "4",
        ])
        .unwrap();
        for want in ["device", "send", "client", "as an mva command", "N = 4"] {
            assert!(t.contains(want), "{want}: {t}");
        }
        // Swapped snapshots, a missing source, a command without --metrics.
        let e = run_args(&["calibrate", "--before", a, "--after", b]).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        let e = run_args(&["calibrate"]).unwrap_err();
        assert!(
            is_usage_error(&e) && format!("{e}").contains("--metrics"),
            "{e:#}"
        );
        let e = run_args(&["calibrate", "--before", b, "--after", a, "--", "true"]).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        assert!(run_args(&["calibrate", "--before", b]).is_err());
    }

    /// Serves each body once, in order, to `GET /metrics` over HTTP/1.0;
    /// the second and later ones chunked.
    fn fake_metrics_server(bodies: Vec<String>) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let mut requests = Vec::new();
            for (i, body) in bodies.into_iter().enumerate() {
                let (mut s, _) = listener.accept().unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    req.extend_from_slice(&buf[..n]);
                }
                requests.push(String::from_utf8_lossy(&req).into_owned());
                let response = if i == 0 {
                    format!(
                        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    let (x, y) = body.split_at(body.len() / 2);
                    format!(
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{x}\r\n{:x};ext=1\r\n{y}\r\n0\r\n\r\n",
                        x.len(),
                        y.len()
                    )
                };
                s.write_all(response.as_bytes()).unwrap();
            }
            requests
        });
        (url, handle)
    }

    fn untimed(path: &Path) -> String {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("# sluice-scrape"))
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn calibrate_scrapes_a_metrics_endpoint() {
        let dir = temp_dir("scrape");
        let (sb, sa) = (dir.join("b.prom"), dir.join("a.prom"));
        let (url, server) = fake_metrics_server(vec![
            untimed(&fixture("metrics-before.prom")),
            untimed(&fixture("metrics-after.prom")),
        ]);
        let started = std::time::Instant::now();
        let out = run_args(&[
            "calibrate",
            "--metrics",
            &url,
            "--interval",
            "100ms",
            // The captured CPU is far more than 100 ms can hold on one
            // server; the test is about the scrape.
            "--cpu-servers",
            "64",
            "--save-before",
            sb.to_str().unwrap(),
            "--save-after",
            sa.to_str().unwrap(),
            "--json",
        ])
        .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(100));
        let requests = server.join().unwrap();
        assert!(
            requests
                .iter()
                .all(|r| r.starts_with("GET /metrics HTTP/1.0\r\n")),
            "{requests:?}"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["completions"], serde_json::json!(3734));
        let t = v["interval_seconds"].as_f64().unwrap();
        assert!((0.1..10.0).contains(&t), "{t}");
        let d = v["stations"][0]["demand"].as_f64().unwrap();
        assert!((d - FIXTURE_CPU / FIXTURE_REQUESTS).abs() < 1e-15, "{d}");
        // The saved snapshots carry their scrape time and calibrate alone.
        let saved = std::fs::read_to_string(&sb).unwrap();
        assert!(
            saved.starts_with("# sluice-scrape unix_time="),
            "{}",
            &saved[..60]
        );
        let again = run_args(&[
            "calibrate",
            "--before",
            sb.to_str().unwrap(),
            "--after",
            sa.to_str().unwrap(),
            "--cpu-servers",
            "64",
            "--json",
        ])
        .unwrap();
        let w: serde_json::Value = serde_json::from_str(&again).unwrap();
        assert_eq!(w["interval_seconds"], v["interval_seconds"]);

        // Around a command instead of a fixed interval.
        let (url, server) = fake_metrics_server(vec![
            untimed(&fixture("metrics-before.prom")),
            untimed(&fixture("metrics-after.prom")),
        ]);
        let out = run_args(&[
            "calibrate",
            "--metrics",
            &url,
            "--cpu-servers",
            "4096",
            "--json",
            "--",
            "sleep",
            "0.05",
        ])
        .unwrap();
        server.join().unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(v["interval_seconds"].as_f64().unwrap() >= 0.05);

        // Usage: neither or both of --interval and a command; no server.
        let e = run_args(&["calibrate", "--metrics", &url]).unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        let e = run_args(&[
            "calibrate",
            "--metrics",
            &url,
            "--interval",
            "1s",
            "--",
            "true",
        ])
        .unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        let e = run_args(&[
            "calibrate",
            "--metrics",
            "https://x/metrics",
            "--interval",
            "1s",
        ])
        .unwrap_err();
        assert!(
            is_usage_error(&e) && format!("{e}").contains("http://"),
            "{e:#}"
        );
        let e = run_args(&["calibrate", "--metrics", &url, "--interval", "1ms"]).unwrap_err();
        assert!(
            !is_usage_error(&e) && format!("{e:#}").contains("cannot connect"),
            "{e:#}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn http_responses_and_durations() {
        let ok = parse_http_response(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nx 1\n").unwrap();
        assert_eq!(ok, "x 1\n");
        let chunked = parse_http_response(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n2\r\nx \r\n2\r\n1\n\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(chunked, "x 1\n");
        let e = parse_http_response(b"HTTP/1.0 404 Not Found\r\n\r\nnot found").unwrap_err();
        assert!(format!("{e}").contains("404"), "{e}");
        assert!(parse_http_response(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_http_response(b"HTTP/1.0 200 OK\r\n").is_err());
        assert!(parse_http_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"
        )
        .is_err());
        assert_eq!(parse_duration("5s"), Ok(5.0));
        assert_eq!(parse_duration("250ms"), Ok(0.25));
        assert_eq!(parse_duration("2m"), Ok(120.0));
        assert_eq!(parse_duration("1.5"), Ok(1.5));
        assert!(parse_duration("0s").is_err() && parse_duration("soon").is_err());
    }

    /// A bench report with one run per (queue depth, IOPS, mean µs); 1000
    /// operations and 1 ms of client CPU each.
    fn bench_file(dir: &Path, name: &str, runs: &[(u32, f64, f64)]) -> PathBuf {
        let results: Vec<String> = runs
            .iter()
            .map(|(qd, iops, us)| {
                format!(
                    r#"{{"case": "randread-4k-qd{qd}", "target": "uri", "driver": "own",
                        "workload": {{"queue_depth": {qd}, "workers": 1, "block_size": 4096}},
                        "ops": 1000, "iops": {iops}, "latency": {{"mean_us": {us}}},
                        "client_cpu_s": 0.001, "server_cpu_s": null}}"#
                )
            })
            .collect();
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                r#"{{"target": "nbd://x/disk", "results": [{}]}}"#,
                results.join(",")
            ),
        )
        .unwrap();
        path
    }

    #[test]
    fn validate_reports_errors_and_plots() {
        let dir = temp_dir("validate");
        // Server 2 µs + client 1 µs (from the files' client CPU): exact MVA
        // gives X(1) = 333 333/s, R(1) = 3 µs; X(2) = 3/7 per µs, R(2) =
        // 14/3 µs. The "measurements" are 25 % off on R at N = 1 only.
        let f1 = bench_file(&dir, "qd1.json", &[(1, 250_000.0, 4.0)]);
        let f2 = bench_file(&dir, "qd2.json", &[(2, 3e6 / 7.0, 14.0 / 3.0)]);
        let svg = dir.join("v.svg");
        let (f1, f2) = (f1.to_str().unwrap(), f2.to_str().unwrap());
        let out = run_args(&[
            "validate",
            "--bench",
            f1,
            f2,
            "--demands",
            "2e-6",
            "--json",
            "--plot",
            svg.to_str().unwrap(),
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let x = &v["throughput_error"];
        assert!(
            (x["mean_abs"].as_f64().unwrap() - 1.0 / 6.0).abs() < 1e-9,
            "{x}"
        );
        assert_eq!(x["max_at"], serde_json::json!(1));
        let r = &v["response_time_error"];
        assert!((r["max_abs"].as_f64().unwrap() - 0.25).abs() < 1e-9, "{r}");
        assert_eq!(v["networks"][0]["stations"][1]["name"], "client");
        assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
        let t = run_args(&[
            "validate",
            "--bench",
            f1,
            "--bench",
            f2,
            "--demands",
            "2e-6",
        ])
        .unwrap();
        assert!(
            t.contains("throughput error: mean |e| 16.7 %, max |e| 33.3 % at N = 1"),
            "{t}"
        );
        assert!(t.contains("response time error: mean |e| 12.5 %"), "{t}");

        // The model from a calibration file (and no client station).
        let (b, a) = (
            fixture("metrics-before.prom"),
            fixture("metrics-after.prom"),
        );
        let cal = run_args(&[
            "calibrate",
            "--before",
            b.to_str().unwrap(),
            "--after",
            a.to_str().unwrap(),
            "--json",
        ])
        .unwrap();
        let calf = dir.join("cal.json");
        std::fs::write(&calf, cal).unwrap();
        let calf = calf.to_str().unwrap();
        let out = run_args(&[
            "validate",
            "--bench",
            f1,
            f2,
            "--calibration",
            calf,
            "--client",
            "none",
            "--json",
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let r1 = v["points"][0]["predicted_response_time"].as_f64().unwrap();
        assert!((r1 - FIXTURE_CPU / FIXTURE_REQUESTS).abs() < 1e-15);
        // Client and server on one core: one station with both demands.
        let out = run_args(&[
            "validate",
            "--bench",
            f1,
            "--calibration",
            calf,
            "--client",
            "shared",
            "--json",
        ])
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let st = &v["networks"][0]["stations"];
        assert_eq!(st.as_array().unwrap().len(), 1);
        assert_eq!(st[0]["name"], "server-cpu+client");
        let d = st[0]["demand"].as_f64().unwrap();
        assert!(
            (d - (FIXTURE_CPU / FIXTURE_REQUESTS + 1e-6)).abs() < 1e-15,
            "{d}"
        );
        let e = run_args(&[
            "validate",
            "--bench",
            f1,
            "--demands",
            "1e-6",
            "--client",
            "shared",
        ])
        .unwrap_err();
        assert!(is_usage_error(&e), "{e:#}");
        // Several calibrations must each say their N.
        let e = run_args(&["validate", "--bench", f1, "--calibration", calf, calf]).unwrap_err();
        assert!(
            is_usage_error(&e) && format!("{e}").contains("--customers"),
            "{e:#}"
        );

        // Usage errors.
        for args in [
            vec!["validate", "--bench", f1],
            vec![
                "validate",
                "--bench",
                f1,
                "--demands",
                "1e-6",
                "--client",
                "none",
                "--client-demand",
                "1e-6",
            ],
            vec![
                "validate",
                "--bench",
                f1,
                "--demands",
                "1e-6",
                "--target",
                "nbdkit",
            ],
            vec!["validate", "--bench", calf, "--demands", "1e-6"],
            vec!["validate", "--bench", f1, "--calibration", f1],
        ] {
            let e = run_args(&args).unwrap_err();
            assert!(is_usage_error(&e), "{args:?}: {e:#}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn plots_are_written() {
        let dir = std::env::temp_dir().join(format!("sluice-model-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("r.svg");
        let png = dir.join("n.png");
        run_args(&["raid", "--plot", svg.to_str().unwrap()]).unwrap();
        run_args(&["noncontig", "--plot", png.to_str().unwrap()]).unwrap();
        assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
        assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
