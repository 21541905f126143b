//! `sluice model`: the analytical models of `sluice-model` on the command
//! line, as tables, JSON (`--json`) and SVG/PNG charts (`--plot FILE`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use sluice_model::noncontig::{
    by_segment_size, figure8_sizes, Direction, NoncontigParams, SizePoint, FIGURE8_FILE_BYTES,
};
use sluice_model::plot::{self, Chart, LineStyle, Series};
use sluice_model::raid::{raid_curve, sweep, RaidCurve, RaidOp, RaidParams, Sweep, SweepKind};
use sluice_model::{
    approximate_mva_multiclass, exact_mva_curve, exact_mva_multiclass, mva_report, ApproxOptions,
    Approximation, Calibration, ClosedNetwork, CustomerClass, ModelError, MulticlassNetwork,
    MulticlassSolution, MulticlassStation,
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
    /// Service demands from measured busy times and completions (D = U/X).
    Calibrate(CalibrateArgs),
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

#[derive(Debug, Args)]
struct CalibrateArgs {
    /// TOML file: interval_seconds, completions and [[stations]] with name,
    /// busy_seconds (and optional servers, delay).
    #[arg(long, value_name = "FILE")]
    file: PathBuf,
    /// Think time Z for the network built from the demands, seconds.
    #[arg(long, default_value_t = 0.0)]
    think: f64,
    /// Also solve the calibrated network with this many customers.
    #[arg(long)]
    customers: Option<u32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
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
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let bytes = match ext.as_deref() {
        Some("svg") => plot::render_svg(chart, plot::DEFAULT_SIZE)?.into_bytes(),
        Some("png") => plot::render_png(chart, plot::DEFAULT_SIZE)?,
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
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("cannot read {}", a.file.display()))?;
    let cal: Calibration = toml::from_str(&text).map_err(|e| {
        ModelUsageError(format!(
            "calibration file {}: {}",
            a.file.display(),
            e.message()
        ))
    })?;
    let demands = cal.demands()?;
    let report = match a.customers {
        // Exact MVA without bounds: multi-server stations are load-dependent.
        Some(n) => Some(sluice_model::exact_mva(&cal.network(a.think)?, n)?),
        None => None,
    };
    if a.json {
        #[derive(Serialize)]
        struct Out {
            throughput: f64,
            demands: Vec<sluice_model::CalibratedDemand>,
            mva: Option<sluice_model::Solution>,
        }
        return json(
            out,
            &Out {
                throughput: cal.throughput()?,
                demands,
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
