//! What each `sluice model` subcommand does: read its inputs (flags,
//! files, metrics scrapes), call the model, and write what the model
//! crate renders (a table or JSON to `out`, a chart to `--plot FILE`).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use sluice_model::noncontig::{by_segment_size, figure8_sizes, Direction, NoncontigParams};
use sluice_model::plot::{self, Chart};
use sluice_model::prometheus::ServerCounters;
use sluice_model::raid::{raid_curve, sweep, RaidParams, SweepKind};
use sluice_model::report::{self, prediction_text};
use sluice_model::validation::{client_cpu_per_request, BenchRun};
use sluice_model::{
    approximate_mva_multiclass, exact_mva, exact_mva_multiclass, mva_report, with_client,
    ApproxOptions, Calibration, ClosedNetwork, CountersReport, CustomerClass, ModelError,
    MulticlassNetwork, MulticlassStation, NoncontigReport, ServerCalibrationReport,
    ServerModelOptions, ValidationReport,
};

use super::{
    scrape, CalibrateArgs, ModelUsageError, MulticlassArgs, MvaArgs, NoncontigArgs, Preset,
    RaidArgs, ValidateArgs,
};

fn usage(message: String) -> anyhow::Error {
    ModelUsageError(message).into()
}

fn json(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).context("cannot write JSON")?;
    writeln!(out).context("cannot write to stdout")
}

fn print(out: &mut dyn Write, s: &str) -> Result<()> {
    out.write_all(s.as_bytes())
        .context("cannot write to stdout")
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
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
            return Err(usage(format!(
                "--plot {}: the file name must end in .svg or .png",
                path.display()
            )))
        }
    };
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

pub(super) fn mva(a: &MvaArgs, out: &mut dyn Write) -> Result<()> {
    let net = ClosedNetwork::from_demands(&a.demands, &a.delay_demands, a.think)?;
    let solved = mva_report(&net, a.customers, a.solver.approximation())?;
    if let Some(path) = &a.plot {
        write_panels(
            path,
            &plot::mva_charts(&net, a.customers)?,
            plot::VALIDATION_SIZE,
        )?;
    }
    if a.json {
        return json(out, &solved);
    }
    print(out, &report::mva_text(&solved, &net))
}

fn parse_class(spec: &str) -> Result<CustomerClass> {
    let bad = |why: &str| {
        usage(format!(
            "--class '{spec}': {why} (expected NAME:N:Z:D1,D2,...)"
        ))
    };
    let parts: Vec<&str> = spec.splitn(4, ':').collect();
    let [name, n, z, d] = parts[..] else {
        return Err(bad("needs four ':'-separated fields"));
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

pub(super) fn multiclass(a: &MulticlassArgs, out: &mut dyn Write) -> Result<()> {
    let classes = a
        .classes
        .iter()
        .map(|s| parse_class(s))
        .collect::<Result<Vec<_>>>()?;
    let k = classes.first().map_or(0, |c| c.demands.len());
    if let Some(i) = a.delay_stations.iter().find(|&&i| i == 0 || i > k) {
        return Err(usage(format!(
            "--delay-stations {i}: stations are numbered 1..={k}"
        )));
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
    let sol = match a.solver.approximation() {
        Some(method) => approximate_mva_multiclass(&net, method, ApproxOptions::default())?,
        None => exact_mva_multiclass(&net)?,
    };
    if a.json {
        return json(out, &sol);
    }
    print(out, &report::multiclass_text(&sol))
}

fn raid_params(a: &RaidArgs) -> Result<RaidParams> {
    let mut p = match a.preset {
        Preset::Paper => RaidParams::paper(),
    };
    if let Some(path) = &a.params {
        // Fields absent from the file keep the paper's values.
        p = toml::from_str(&read(path)?).map_err(|e| {
            usage(format!(
                "parameter file {}: {}",
                path.display(),
                e.message()
            ))
        })?;
    }
    if let Some(op) = a.op {
        p.op = op.into();
    }
    if let Some(z) = a.think {
        p.think_time = z;
    }
    p.validate()?;
    Ok(p)
}

fn raid_customers(a: &RaidArgs) -> Result<Vec<u32>> {
    if !a.customers.is_empty() {
        return Ok(a.customers.clone());
    }
    if a.max_customers == 0 {
        return Err(ModelError::ZeroCustomers.into());
    }
    let most = sluice_model::mva::MAX_CURVE_POINTS;
    if a.max_customers > most {
        return Err(usage(format!(
            "--max-customers {}: at most {most} rows; list the populations you want with --customers",
            a.max_customers,
        )));
    }
    Ok((1..=a.max_customers).collect())
}

pub(super) fn raid(a: &RaidArgs, out: &mut dyn Write) -> Result<()> {
    let params = raid_params(a)?;
    let customers = raid_customers(a)?;
    if let Some(kind) = a.sweep {
        let values = match (a.values.is_empty(), kind) {
            (false, _) => a.values.clone(),
            (true, SweepKind::Concurrency) => customers.iter().map(|&n| f64::from(n)).collect(),
            (true, _) => kind.default_values(),
        };
        let s = sweep(&params, kind, &values, &customers)?;
        if let Some(path) = &a.plot {
            write_plot(path, &plot::sweep_chart(&s))?;
        }
        return if a.json {
            json(out, &s)
        } else {
            print(out, &report::sweep_text(&s))
        };
    }
    if !a.values.is_empty() {
        return Err(usage("--values needs --sweep".into()));
    }
    let curve = raid_curve(&params, &customers)?;
    if let Some(path) = &a.plot {
        let title = "Networked RAID 5 (paper setting): R(N)";
        write_plot(path, &plot::raid_chart(&curve, title))?;
    }
    if a.json {
        return json(out, &curve);
    }
    print(out, &report::raid_text(&curve))
}

pub(super) fn noncontig(a: &NoncontigArgs, out: &mut dyn Write) -> Result<()> {
    let params = NoncontigParams {
        rtt: a.rtt_us * 1e-6,
        bandwidth: a.bandwidth_mbps * 1e6 / 8.0,
        direction: if a.read {
            Direction::Read
        } else {
            Direction::Write
        },
        sgl_fixed_bytes: a.sgl_fixed_bytes,
        full_duplex: a.full_duplex,
        max_segments: a.max_segments,
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
        let title = plot::noncontig_title(a.read, a.file_size, a.rtt_us, a.bandwidth_mbps);
        write_plot(path, &plot::noncontig_chart(&points, &title))?;
    }
    if a.json {
        let shape = NoncontigReport {
            params,
            file_bytes: a.file_size,
            points: &points,
        };
        return json(out, &shape);
    }
    print(out, &report::noncontig_text(&points))
}

/// The two metric snapshots `calibrate` compares, from the server or from
/// files.
fn snapshots(a: &CalibrateArgs) -> Result<(String, String)> {
    if let Some(url) = &a.metrics {
        return scrape::snapshots(a, url);
    }
    let (Some(before), Some(after)) = (&a.before, &a.after) else {
        return Err(usage(
            "say where the counters come from: --metrics URL [--interval 5s | -- COMMAND], --before FILE --after FILE, or --file COUNTERS.toml"
                .into(),
        ));
    };
    if !a.command.is_empty() {
        return Err(usage(
            "a command after `--` needs --metrics URL (it runs between two scrapes)".into(),
        ));
    }
    Ok((read(before)?, read(after)?))
}

pub(super) fn calibrate(a: &CalibrateArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(file) = &a.file {
        return calibrate_counters(a, file, out);
    }
    let (before, after) = snapshots(a)?;
    let parse = |text: &str, what: &str| {
        ServerCounters::from_text(text, a.export.as_deref())
            .with_context(|| format!("the {what} snapshot"))
    };
    let before = parse(&before, "'before'")?;
    let after = parse(&after, "'after'")?;
    let opts = ServerModelOptions {
        layout: a.layout.into(),
        // With --metrics the scrape times give the interval.
        interval_seconds: a.interval.filter(|_| a.metrics.is_none()),
        cpu_servers: a.cpu_servers,
        device_servers: a.device_servers,
        client: a.client_demand.map(|demand| sluice_model::ClientStation {
            demand,
            delay: a.client_delay,
        }),
        think_time: a.think,
    };
    let cal = sluice_model::server_calibration(&before, &after, &opts)?;
    let solved = a
        .customers
        .map(|n| exact_mva(&cal.network, n))
        .transpose()?;
    if a.json {
        let shape = ServerCalibrationReport {
            calibration: &cal,
            mva: solved,
        };
        return json(out, &shape);
    }
    let mut s = report::calibration_text(&cal);
    if let Some(r) = solved {
        s.push_str(&prediction_text(&r, "requests/s"));
    }
    print(out, &s)
}

/// `calibrate --file`: demands from a TOML file of counters.
fn calibrate_counters(a: &CalibrateArgs, file: &Path, out: &mut dyn Write) -> Result<()> {
    let cal: Calibration = toml::from_str(&read(file)?).map_err(|e| {
        usage(format!(
            "calibration file {}: {}",
            file.display(),
            e.message()
        ))
    })?;
    let network = cal.network(a.think)?;
    let counters = CountersReport {
        throughput: cal.throughput()?,
        demands: cal.demands()?,
        // Exact MVA without bounds: multi-server stations are load-dependent.
        mva: a.customers.map(|n| exact_mva(&network, n)).transpose()?,
        network,
    };
    if a.json {
        return json(out, &counters);
    }
    let mut s = report::counters_text(counters.throughput, &counters.demands);
    if let Some(r) = &counters.mva {
        s.push_str(&prediction_text(r, "jobs/s"));
    }
    print(out, &s)
}

/// Reads bench runs from files, keeping those of `target` when given.
fn read_bench_runs(paths: &[PathBuf], target: Option<&str>) -> Result<Vec<BenchRun>> {
    let mut runs = Vec::new();
    for p in paths {
        let doc: sluice_model::BenchDocument = serde_json::from_str(&read(p)?).map_err(|e| {
            usage(format!(
                "{}: not a sluice bench JSON report ({e}); write one with sluice bench ... --json FILE",
                p.display()
            ))
        })?;
        runs.extend(doc.into_runs());
    }
    if let Some(t) = target {
        let mut labels: Vec<String> = runs.iter().map(|r| r.target.clone()).collect();
        runs.retain(|r| r.target == t);
        if runs.is_empty() {
            labels.sort();
            labels.dedup();
            return Err(usage(format!(
                "--target {t}: no such runs (targets in the files: {})",
                labels.join(", ")
            )));
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
    let f: CalFile = serde_json::from_str(&read(path)?).map_err(|e| {
        usage(format!(
            "{}: not the JSON of sluice model calibrate --json ({e})",
            path.display()
        ))
    })?;
    Ok((f.network, f.mva.map(|m| m.customers)))
}

/// The client demand: --client-demand, or the bench's client CPU per
/// request (over `runs`); None with --client none.
fn client_demand(a: &ValidateArgs, runs: &[BenchRun]) -> Result<Option<f64>> {
    if a.client.placement().is_none() {
        if a.client_demand.is_some() {
            return Err(usage(
                "--client-demand needs --client queueing or delay".into(),
            ));
        }
        return Ok(None);
    }
    match a.client_demand {
        Some(d) => Ok(Some(d)),
        None => client_cpu_per_request(runs).map(Some).ok_or_else(|| {
            usage(
                "the bench runs do not report client CPU (client_cpu_s): give --client-demand SECONDS or --client none"
                    .into(),
            )
        }),
    }
}

/// `base` with the client's demand, as --client places it.
fn client_network(
    a: &ValidateArgs,
    base: &ClosedNetwork,
    demand: Option<f64>,
) -> Result<ClosedNetwork> {
    let placement = a
        .client
        .placement()
        .unwrap_or(sluice_model::ClientPlacement::Queueing);
    let demand = demand.filter(|_| a.client.placement().is_some());
    Ok(with_client(base, placement, demand, a.think)?)
}

/// One calibration per N: each N with its own demands, and the client
/// CPU measured at that N.
fn validate_per_n(
    a: &ValidateArgs,
    runs: &[BenchRun],
    measured: &[sluice_model::MeasuredPoint],
) -> Result<sluice_model::Validation> {
    let mut by_n: Vec<(u32, ClosedNetwork)> = Vec::new();
    for path in &a.calibration {
        let (net, n) = read_calibration(path)?;
        let n = n.ok_or_else(|| {
            usage(format!(
                "{}: with several --calibration files each must say its N: make it with calibrate --customers N",
                path.display()
            ))
        })?;
        if by_n.iter().any(|(k, _)| *k == n) {
            return Err(usage(format!("two calibration files for N = {n}")));
        }
        by_n.push((n, net));
    }
    let mut nets = Vec::new();
    for m in measured {
        let Some((_, base)) = by_n.iter().find(|(k, _)| *k == m.customers) else {
            return Err(usage(format!(
                "no calibration file for N = {} (measured in the bench files)",
                m.customers
            )));
        };
        let client = match (a.client.placement(), a.client_demand) {
            (None, _) => client_demand(a, runs)?,
            (_, Some(d)) => Some(d),
            (_, None) => Some(m.client_cpu_per_request.ok_or_else(|| {
                usage(format!(
                    "the bench runs at N = {} do not report client CPU: give --client-demand or --client none",
                    m.customers
                ))
            })?),
        };
        nets.push(client_network(a, base, client)?);
    }
    Ok(sluice_model::validate_each(&nets, measured)?)
}

pub(super) fn validate(a: &ValidateArgs, out: &mut dyn Write) -> Result<()> {
    let runs = read_bench_runs(&a.bench, a.target.as_deref())?;
    let measured = sluice_model::measured_points(&runs, a.aggregate.into())?;
    let v = if a.calibration.len() > 1 {
        validate_per_n(a, &runs, &measured)?
    } else {
        let base = if let Some(path) = a.calibration.first() {
            read_calibration(path)?.0
        } else if !a.demands.is_empty() || !a.delay_demands.is_empty() {
            ClosedNetwork::from_demands(&a.demands, &a.delay_demands, 0.0)?
        } else {
            return Err(usage(
                "give the model: --calibration FILE.json (from sluice model calibrate --json) or --demands D1,D2,...".into(),
            ));
        };
        let client = client_demand(a, &runs)?;
        sluice_model::validate(&client_network(a, &base, client)?, &measured)?
    };
    if let Some(path) = &a.plot {
        let charts = plot::validation_charts(&v, &a.title);
        write_panels(path, &charts, plot::VALIDATION_SIZE)?;
    }
    if a.json {
        let shape = ValidationReport {
            validation: &v,
            measured: &measured,
        };
        return json(out, &shape);
    }
    print(out, &report::validation_text(&v))
}
