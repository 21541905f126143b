//! `sluice bench s3`: S3 endpoints side by side (sluice's, radosgw, any
//! other), and sluice's native protocol on the same object sizes.
//!
//! Each case is PUT or GET of one object size by N client threads (each
//! its own connection, one request at a time), or a LIST of every key
//! under a prefix of `--list-keys` objects, 1000 a page. Cases run for
//! `--duration` each (every client finishes the request it has started),
//! interleaved over targets, and the whole set is repeated `--rounds`
//! times; the tables give medians with min–max over the rounds.
//!
//! Per case: operations per second, MB/s (10^6 bytes), latency
//! percentiles, this process's CPU per operation (the client's cost, so
//! its limit is known) and, when the target names its server processes,
//! their CPU (utime + stime from /proc/PID/stat, read before and after)
//! per operation, with the machine's CPU steal over the case.

mod target;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use sluice_bench::cpu::process_cpu;
use sluice_bench::hist::{LatencyHistogram, LatencySummary};
use sluice_bench::machine::{load1, steal_now, steal_since, Machine};
use sluice_bench::stats::{median, Spread};
use sluice_bench::workload::Size;
use sluice_model::text::{compact, Table};

use target::{Client, Target};
pub use target::{Kind, TargetSpec};

use crate::epilogue::Epilogue;
use crate::setup::{command_line, PresetOptions};

/// Most objects a GET case reads from (chosen at random per request).
const GET_OBJECTS: u64 = 16;
/// Bytes of distinct keys a PUT case writes before it overwrites them,
/// and most bytes of the objects a GET case reads.
const SPAN: u64 = 256 << 20;
/// PUT cases of objects this large remove what they wrote once measured
/// (so a peer on a small disk does not fill up).
const CLEAN_FROM: u64 = 1 << 20;

/// What a case does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// PUT whole objects.
    Put,
    /// GET whole objects.
    Get,
    /// LIST every key under a prefix.
    List,
}

/// `sluice bench s3`'s own options.
#[derive(Debug, Args)]
pub struct S3Args {
    /// An S3 endpoint: LABEL,URL,KEY_FILE[,PID[+PID...]]; the key file's
    /// first line that is not a comment is `ACCESS_KEY_ID SECRET`; the
    /// PIDs are the server processes whose CPU is counted. Repeatable.
    #[arg(long = "s3", value_name = "TARGET", value_parser = TargetSpec::parse_s3)]
    pub s3: Vec<TargetSpec>,
    /// sluice's native protocol, striped objects through a metadata
    /// service: LABEL,sluice://HOST:PORT[,PID[+PID...]]. Puts and gets
    /// only. Repeatable.
    #[arg(long, value_name = "TARGET", value_parser = TargetSpec::parse_native)]
    pub native: Vec<TargetSpec>,
    /// Object sizes, comma-separated (default 4K,64K,1M,64M).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<Size>>,
    /// Concurrent clients, comma-separated (default 1,16,64).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: Option<Vec<u32>>,
    /// Operations, comma-separated (default put,get,list).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub ops: Option<Vec<Op>>,
    /// Keys the LIST case lists.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub list_keys: u32,
    /// The bucket (created if missing; native objects go under
    /// `BUCKET.native/`).
    #[arg(long, default_value = "sluice-bench")]
    pub bucket: String,
    /// The target the ratios are against (default: the second S3 one).
    #[arg(long)]
    pub baseline: Option<String>,
}

/// One case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Case {
    /// What it does.
    pub op: Op,
    /// Object size in bytes (0 for LIST).
    pub size: u64,
    /// Client threads.
    pub clients: u32,
}

impl Case {
    /// `put-4K-c16`, `list-10000`.
    pub fn name(&self, list_keys: u32) -> String {
        match self.op {
            Op::List => format!("list-{list_keys}"),
            Op::Put | Op::Get => format!(
                "{}-{}-c{}",
                if self.op == Op::Put { "put" } else { "get" },
                Size(self.size),
                self.clients
            ),
        }
    }
}

/// One measured case on one target in one round.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Round (from 0).
    pub round: u32,
    /// The case.
    pub case: Case,
    /// Its name.
    pub name: String,
    /// The target's label.
    pub target: String,
    /// Operations done.
    pub ops: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall time, first request to last answer.
    pub secs: f64,
    /// Operations per second.
    pub ops_s: f64,
    /// 10^6 bytes per second.
    pub mb_s: f64,
    /// Latency of one operation.
    pub latency: LatencySummary,
    /// This process's CPU per operation, microseconds.
    pub client_us_per_op: f64,
    /// The server processes' CPU per operation, microseconds.
    pub server_us_per_op: Option<f64>,
    /// Each server process's CPU seconds over the case.
    pub server_cpu_s: Vec<(u32, f64)>,
    /// Percent of the machine's CPU time stolen over the case.
    pub steal_pct: f64,
    /// 1-minute load average before the case.
    pub load1: f64,
}

/// Medians over rounds of one case on one target.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Case name.
    pub name: String,
    /// Target label.
    pub target: String,
    /// Operations per second.
    pub ops_s: Spread,
    /// MB/s.
    pub mb_s: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Client CPU per operation, us.
    pub client_us_per_op: f64,
    /// Server CPU per operation, us.
    pub server_us_per_op: Option<f64>,
    /// Operations per second against the baseline's.
    pub ops_ratio: Option<f64>,
    /// Server CPU per operation against the baseline's.
    pub cpu_ratio: Option<f64>,
}

/// What `sluice bench s3` writes as JSON.
#[derive(Debug, Serialize)]
pub struct S3Report {
    /// The machine.
    pub machine: Machine,
    /// The command line.
    pub command: String,
    /// Seconds per case.
    pub duration_s: f64,
    /// Every sample.
    pub samples: Vec<Sample>,
    /// Medians.
    pub rows: Vec<Row>,
    /// Cases that failed.
    pub failures: Vec<String>,
}

/// The cases `args` asks for, in run order.
pub fn cases(args: &S3Args) -> Vec<Case> {
    let sizes: Vec<u64> = args.sizes.as_ref().map_or_else(
        || vec![4 << 10, 64 << 10, 1 << 20, 64 << 20],
        |s| s.iter().map(|s| s.0).collect(),
    );
    let clients = args.clients.clone().unwrap_or_else(|| vec![1, 16, 64]);
    let ops = args
        .ops
        .clone()
        .unwrap_or_else(|| vec![Op::Put, Op::Get, Op::List]);
    let mut out = Vec::new();
    for &size in &sizes {
        for op in [Op::Put, Op::Get] {
            if !ops.contains(&op) {
                continue;
            }
            for &c in &clients {
                out.push(Case {
                    op,
                    size,
                    clients: c,
                });
            }
        }
    }
    if ops.contains(&Op::List) {
        out.push(Case {
            op: Op::List,
            size: 0,
            clients: 1,
        });
    }
    out
}

/// Runs `sluice bench s3`.
pub fn s3(opts: &PresetOptions, args: &S3Args) -> Result<S3Report> {
    let specs: Vec<TargetSpec> = args.s3.iter().chain(&args.native).cloned().collect();
    if specs.is_empty() {
        bail!("give at least one target (--s3 or --native)");
    }
    let duration = opts.duration(1.0, 3.0);
    let cases = cases(args);
    let machine = Machine::probe();
    let mut targets = Vec::new();
    for spec in &specs {
        let t = Target::open(spec, &args.bucket)?;
        prepare(&t, spec, &cases, args.list_keys)?;
        targets.push(t);
    }
    let payloads = payloads(&cases);
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    for round in 0..opts.rounds {
        for case in &cases {
            // Interleaved: each round starts with the next target.
            for k in 0..specs.len() {
                let i = (k + round as usize) % specs.len();
                let (spec, target) = (&specs[i], &targets[i]);
                if case.op == Op::List && !spec.lists() {
                    continue;
                }
                let name = case.name(args.list_keys);
                let data = payloads.get(&case.size).map_or(&[][..], Vec::as_slice);
                match measure(target, spec, case, round, duration, data, args.list_keys) {
                    Ok(s) => {
                        eprintln!(
                            "round {round} {name} {}: {:.0} ops/s, {:.1} MB/s, p50 {:.2} ms, client {:.0} us/op, server {} us/op, steal {:.1}%",
                            spec.label,
                            s.ops_s,
                            s.mb_s,
                            s.latency.p50_us / 1000.0,
                            s.client_us_per_op,
                            s.server_us_per_op.map_or("-".into(), |v| format!("{v:.0}")),
                            s.steal_pct
                        );
                        samples.push(s);
                        if let Err(e) = clean(target, case) {
                            eprintln!("{}: cannot remove what {name} wrote: {e:#}", spec.label);
                        }
                    }
                    Err(e) => {
                        eprintln!("round {round} {name} {}: failed: {e:#}", spec.label);
                        failures.push(format!("round {round} {name} {}: {e:#}", spec.label));
                    }
                }
            }
        }
    }
    let baseline = args
        .baseline
        .clone()
        .or_else(|| args.s3.get(1).or(args.s3.first()).map(|s| s.label.clone()));
    let rows = summarise(
        &samples,
        &cases,
        &specs,
        baseline.as_deref(),
        args.list_keys,
    );
    let report = S3Report {
        machine,
        command: command_line(),
        duration_s: duration.as_secs_f64(),
        samples,
        rows,
        failures,
    };
    finish(opts, &report, baseline.as_deref())?;
    Ok(report)
}

/// One random payload per PUT size, shared by every client thread.
fn payloads(cases: &[Case]) -> BTreeMap<u64, Vec<u8>> {
    let mut rng = fastrand::Rng::with_seed(0x53);
    let mut out = BTreeMap::new();
    for c in cases.iter().filter(|c| c.op == Op::Put) {
        out.entry(c.size).or_insert_with(|| {
            let mut v = vec![0u8; c.size as usize];
            rng.fill(&mut v);
            v
        });
    }
    out
}

/// Writes the objects the GET cases read and the LIST case lists.
fn prepare(target: &Target, spec: &TargetSpec, cases: &[Case], list_keys: u32) -> Result<()> {
    let mut rng = fastrand::Rng::with_seed(0x47);
    let mut sizes: Vec<u64> = cases
        .iter()
        .filter(|c| c.op == Op::Get)
        .map(|c| c.size)
        .collect();
    sizes.dedup();
    for size in sizes {
        let mut data = vec![0u8; size as usize];
        rng.fill(&mut data);
        let keys: Vec<String> = (0..get_objects(size))
            .map(|j| format!("get/{}/{j}", Size(size)))
            .collect();
        in_parallel(target, &keys, 8, |c, k| c.put(k, &data))
            .with_context(|| format!("{}: write the GET objects of {}", spec.label, Size(size)))?;
    }
    if cases.iter().any(|c| c.op == Op::List) && spec.lists() {
        let have = target.client().list("list/")?;
        if have != u64::from(list_keys) {
            eprintln!("{}: writing {list_keys} keys to list", spec.label);
            let keys: Vec<String> = (0..list_keys).map(|i| format!("list/{i:07}")).collect();
            in_parallel(target, &keys, 16, |c, k| c.put(k, b"x"))
                .with_context(|| format!("{}: write the keys to list", spec.label))?;
        }
    }
    Ok(())
}

/// Objects a GET case of `size` reads from.
fn get_objects(size: u64) -> u64 {
    (SPAN / size.max(1)).clamp(1, GET_OBJECTS)
}

/// Keys each client thread of a PUT case cycles through.
fn put_span(case: &Case) -> u64 {
    (SPAN / case.size.max(1) / u64::from(case.clients)).max(1)
}

fn put_key(case: &Case, t: u32, j: u64) -> String {
    format!("put/{}/c{}/t{t}/{j}", Size(case.size), case.clients)
}

/// Removes what a PUT case of large objects wrote (not timed).
fn clean(target: &Target, case: &Case) -> Result<()> {
    if case.op != Op::Put || case.size < CLEAN_FROM {
        return Ok(());
    }
    let keys: Vec<String> = (0..case.clients)
        .flat_map(|t| (0..put_span(case)).map(move |j| put_key(case, t, j)))
        .collect();
    in_parallel(target, &keys, 8, |c, k| c.delete(k))
}

/// Runs `f` on every key, `threads` at a time.
fn in_parallel(
    target: &Target,
    keys: &[String],
    threads: usize,
    f: impl Fn(&mut Client<'_>, &str) -> Result<()> + Sync,
) -> Result<()> {
    let chunk = keys.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = keys
            .chunks(chunk)
            .map(|part| {
                let f = &f;
                s.spawn(move || {
                    let mut c = target.client();
                    part.iter().try_for_each(|k| f(&mut c, k))
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| bail!("a writer panicked")))
    })
}

fn server_cpu(pids: &[u32]) -> Result<Vec<Duration>> {
    pids.iter()
        .map(|&p| process_cpu(p).with_context(|| format!("cannot read /proc/{p}/stat")))
        .collect()
}

/// Runs one case on one target.
fn measure(
    target: &Target,
    spec: &TargetSpec,
    case: &Case,
    round: u32,
    duration: Duration,
    data: &[u8],
    list_keys: u32,
) -> Result<Sample> {
    let me = std::process::id();
    let load = load1();
    let steal0 = steal_now();
    let srv0 = server_cpu(&spec.pids)?;
    let cli0 = process_cpu(me).unwrap_or_default();
    let start = Instant::now();
    let deadline = start + duration;
    let stop = AtomicBool::new(false);
    let results: Vec<Result<(LatencyHistogram, u64, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..case.clients)
            .map(|t| {
                let stop = &stop;
                s.spawn(move || {
                    let r = worker(target, case, t, deadline, data, list_keys, stop);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("a client thread panicked"))
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let cli = process_cpu(me).unwrap_or_default().saturating_sub(cli0);
    let srv1 = server_cpu(&spec.pids)?;
    let steal_pct = steal_since(steal0);
    let mut hist = LatencyHistogram::new();
    let (mut ops, mut bytes) = (0u64, 0u64);
    for r in results {
        let (h, o, b) = r?;
        hist.merge(&h);
        ops += o;
        bytes += b;
    }
    let server_cpu_s: Vec<(u32, f64)> = spec
        .pids
        .iter()
        .zip(srv1.iter().zip(&srv0))
        .map(|(&p, (a, b))| (p, a.saturating_sub(*b).as_secs_f64()))
        .collect();
    let srv_total: f64 = server_cpu_s.iter().map(|(_, s)| s).sum();
    let per_op = |s: f64| s * 1e6 / ops.max(1) as f64;
    Ok(Sample {
        round,
        case: *case,
        name: case.name(list_keys),
        target: spec.label.clone(),
        ops,
        bytes,
        secs,
        ops_s: ops as f64 / secs,
        mb_s: bytes as f64 / secs / 1e6,
        latency: hist.summary(),
        client_us_per_op: per_op(cli.as_secs_f64()),
        server_us_per_op: (!spec.pids.is_empty()).then(|| per_op(srv_total)),
        server_cpu_s,
        steal_pct,
        load1: load,
    })
}

/// One client thread: requests one after another until the deadline
/// (at least one); (latencies, operations, bytes).
fn worker(
    target: &Target,
    case: &Case,
    t: u32,
    deadline: Instant,
    data: &[u8],
    list_keys: u32,
    stop: &AtomicBool,
) -> Result<(LatencyHistogram, u64, u64)> {
    let mut client = target.client();
    let mut hist = LatencyHistogram::new();
    let mut rng = fastrand::Rng::with_seed(u64::from(t) ^ 0x5eed);
    let mut scratch = vec![0u8; 1 << 20];
    let span = put_span(case);
    let size = Size(case.size);
    let (mut ops, mut bytes) = (0u64, 0u64);
    while ops == 0 || Instant::now() < deadline {
        if stop.load(Ordering::Relaxed) {
            bail!("another client failed");
        }
        let t0 = Instant::now();
        match case.op {
            Op::Put => {
                let key = put_key(case, t, ops % span);
                client.put(&key, data)?;
                bytes += data.len() as u64;
            }
            Op::Get => {
                let key = format!("get/{size}/{}", rng.u64(..get_objects(case.size)));
                let got = client.get(&key, &mut scratch)?;
                if got != case.size {
                    bail!("GET {key}: {got} bytes, want {}", case.size);
                }
                bytes += got;
            }
            Op::List => {
                let n = client.list("list/")?;
                if n != u64::from(list_keys) {
                    bail!("LIST list/: {n} keys, want {list_keys}");
                }
            }
        }
        hist.record_ns(u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX));
        ops += 1;
    }
    Ok((hist, ops, bytes))
}

/// Medians over rounds, per case and target, with ratios to `baseline`.
fn summarise(
    samples: &[Sample],
    cases: &[Case],
    specs: &[TargetSpec],
    baseline: Option<&str>,
    list_keys: u32,
) -> Vec<Row> {
    let mut rows = Vec::new();
    for case in cases {
        let name = case.name(list_keys);
        let of = |label: &str| -> Vec<&Sample> {
            samples
                .iter()
                .filter(|s| s.case == *case && s.target == label)
                .collect()
        };
        let med = |v: &[&Sample], f: &dyn Fn(&Sample) -> Option<f64>| {
            median(&v.iter().filter_map(|s| f(s)).collect::<Vec<_>>())
        };
        let base = baseline.map(of).unwrap_or_default();
        let base_ops = med(&base, &|s| Some(s.ops_s));
        let base_cpu = med(&base, &|s| s.server_us_per_op);
        for spec in specs {
            let v = of(&spec.label);
            let Some(ops_s) = Spread::of(&v.iter().map(|s| s.ops_s).collect::<Vec<_>>()) else {
                continue;
            };
            let cpu = med(&v, &|s| s.server_us_per_op);
            rows.push(Row {
                name: name.clone(),
                target: spec.label.clone(),
                mb_s: med(&v, &|s| Some(s.mb_s)).unwrap_or(0.0),
                p50_ms: med(&v, &|s| Some(s.latency.p50_us / 1000.0)).unwrap_or(0.0),
                p99_ms: med(&v, &|s| Some(s.latency.p99_us / 1000.0)).unwrap_or(0.0),
                client_us_per_op: med(&v, &|s| Some(s.client_us_per_op)).unwrap_or(0.0),
                server_us_per_op: cpu,
                ops_ratio: base_ops.filter(|b| *b > 0.0).map(|b| ops_s.median / b),
                cpu_ratio: cpu
                    .zip(base_cpu)
                    .filter(|(_, b)| *b > 0.0)
                    .map(|(c, b)| c / b),
                ops_s,
            });
        }
    }
    rows
}

fn finish(opts: &PresetOptions, report: &S3Report, baseline: Option<&str>) -> Result<()> {
    let base = baseline.unwrap_or("-");
    let mut t = Table::new([
        "case".to_owned(),
        "target".into(),
        "ops/s".into(),
        "min-max".into(),
        "MB/s".into(),
        "p50 ms".into(),
        "p99 ms".into(),
        "cli us/op".into(),
        "srv us/op".into(),
        format!("ops/s x {base}"),
        format!("srv cpu/op x {base}"),
    ]);
    let opt = |v: Option<f64>| v.map_or_else(|| "-".into(), compact);
    for r in &report.rows {
        t.row([
            r.name.clone(),
            r.target.clone(),
            compact(r.ops_s.median),
            format!("{}-{}", compact(r.ops_s.min), compact(r.ops_s.max)),
            compact(r.mb_s),
            compact(r.p50_ms),
            compact(r.p99_ms),
            compact(r.client_us_per_op),
            opt(r.server_us_per_op),
            opt(r.ops_ratio),
            opt(r.cpu_ratio),
        ]);
    }
    let steals: Vec<f64> = report.samples.iter().map(|s| s.steal_pct).collect();
    let loads: Vec<f64> = report.samples.iter().map(|s| s.load1).collect();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let notes = [format!(
        "{} s per case, {} rounds interleaved; medians over rounds",
        report.duration_s, opts.rounds
    )];
    Epilogue::new("s3", "S3 endpoints: PUT, GET and LIST", &report.machine, &notes)
        .line(format!(
            "steal over the cases: median {:.1}%, max {:.1}%; load before them: median {:.2}, max {:.2}",
            median(&steals).unwrap_or(0.0),
            max(&steals),
            median(&loads).unwrap_or(0.0),
            max(&loads)
        ))
        .failures(&report.failures)
        .table("", t)
        .finish(opts, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sizes: Option<Vec<Size>>, clients: Option<Vec<u32>>, ops: Option<Vec<Op>>) -> S3Args {
        S3Args {
            s3: Vec::new(),
            native: Vec::new(),
            sizes,
            clients,
            ops,
            list_keys: 10_000,
            bucket: "b".into(),
            baseline: None,
        }
    }

    #[test]
    fn the_default_cases_are_the_issues() {
        let c = cases(&args(None, None, None));
        // 4 sizes x put/get x 3 client counts, and one LIST.
        assert_eq!(c.len(), 25);
        assert_eq!(c[0].name(10_000), "put-4k-c1");
        assert_eq!(c[23].name(10_000), "get-64m-c64");
        assert_eq!(c[24].name(10_000), "list-10000");
        let c = cases(&args(
            Some(vec![Size(1 << 20)]),
            Some(vec![8]),
            Some(vec![Op::Get]),
        ));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name(1), "get-1m-c8");
    }

    #[test]
    fn target_specs_parse_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        std::fs::write(&keys, "# a comment\n\nAKID  the secret \n").unwrap();
        let spec = format!("rgw,http://127.0.0.1:7480,{},12+34", keys.display());
        let t = TargetSpec::parse_s3(&spec).unwrap();
        assert_eq!(t.label, "rgw");
        assert_eq!(t.pids, vec![12, 34]);
        let Kind::S3 { key, secret, .. } = &t.kind else {
            panic!("not S3");
        };
        assert_eq!((key.as_str(), secret.as_str()), ("AKID", "the secret"));
        assert!(t.lists());
        let n = TargetSpec::parse_native("native,sluice://127.0.0.1:10810,7").unwrap();
        assert_eq!(n.pids, vec![7]);
        assert!(!n.lists());
        for bad in [
            "rgw".to_owned(),
            format!("rgw,not a url,{}", keys.display()),
            "rgw,http://h:1,/no/such/file".to_owned(),
            format!("rgw,http://h:1,{},x", keys.display()),
            format!("rgw,http://h:1,{},1,2", keys.display()),
        ] {
            assert!(TargetSpec::parse_s3(&bad).is_err(), "{bad} was accepted");
        }
        std::fs::write(&keys, "# only a comment\n").unwrap();
        assert!(TargetSpec::parse_s3(&format!("a,http://h:1,{}", keys.display())).is_err());
        assert!(TargetSpec::parse_native("n").is_err());
    }

    #[test]
    fn ratios_are_medians_against_the_baseline() {
        let spec = |l: &str| TargetSpec::parse_native(&format!("{l},sluice://h:1,1")).unwrap();
        let specs = [spec("a"), spec("b")];
        let case = Case {
            op: Op::Put,
            size: 4096,
            clients: 1,
        };
        let sample = |target: &str, ops_s: f64, cpu: f64| Sample {
            round: 0,
            case,
            name: case.name(0),
            target: target.into(),
            ops: 100,
            bytes: 0,
            secs: 1.0,
            ops_s,
            mb_s: 0.0,
            latency: LatencySummary::default(),
            client_us_per_op: 1.0,
            server_us_per_op: Some(cpu),
            server_cpu_s: Vec::new(),
            steal_pct: 0.0,
            load1: 0.0,
        };
        let samples = [
            sample("a", 1000.0, 10.0),
            sample("a", 3000.0, 30.0),
            sample("a", 2000.0, 20.0),
            sample("b", 400.0, 100.0),
        ];
        let rows = summarise(&samples, &[case], &specs, Some("b"), 0);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].ops_s.median, 2000.0);
        assert_eq!((rows[0].ops_s.min, rows[0].ops_s.max), (1000.0, 3000.0));
        assert_eq!(rows[0].ops_ratio, Some(5.0));
        assert_eq!(rows[0].cpu_ratio, Some(0.2));
        assert_eq!(rows[1].ops_ratio, Some(1.0));
    }
}
