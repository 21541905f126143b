//! `sluice bench s3asim`: an S3aSim-like parallel sequence search (the
//! object-storage paper's figure 11) on sluice's object servers.
//!
//! The search is simulated; its I/O is real. A database of
//! [`SEQUENCES`] sequences is cut into fragments; each query is searched
//! against each fragment. A master hands the (query, fragment) pairs to
//! the workers (14 by default, as in the paper) over a queue; a worker
//! "computes" (sleeps a configurable time per fragment) and then writes
//! the pair's results into one shared result object. A pair yields a
//! number of results drawn uniformly from a range, each result (an
//! alignment) as long as the matched database sequence, drawn uniformly
//! from half to one and a half times the mean sequence length; the
//! database grows by its sequences growing, so the number of queries and
//! results stays fixed and the results get bigger (the paper: "the same
//! number of writes, only larger in size"). Each query's results are
//! laid out one after another in score order (S3aSim's merge step, done
//! here by the generator, since the scores are drawn up front), so the
//! results of one pair land at non-contiguous offsets, between other
//! workers' results. The master writes each query's index (offset,
//! length and score of every result, in score order) at the start of the
//! object once the last of its fragments is reported done.
//!
//! A worker writes a pair's results either one write request per result
//! (naive: what a protocol without vectored I/O must do) or all of them
//! in one scatter/gather write (non-contiguous). Time to completion is
//! measured from the first hand-out to the last index write, against the
//! database size.
//!
//! Setups ([`Setup`]): one object server and an ordinary object; four
//! object servers and a [`StripedClient`](sluice_client::striped::StripedClient) object whose layout lives in a
//! SQLite metadata store ([`SqliteMetaStore`]); and the paper's
//! four-server baseline, the same striping with the layout held by the
//! processes themselves ([`MemoryMetaStore`]), so no metadata service is
//! consulted on the data path (PVFS clients keep a file's layout once
//! they have it, and its I/O servers hold no size to update). Each setup
//! runs over loopback against in-process servers and, where network
//! namespaces are available, against `sluice serve` processes each
//! behind its own link shaped with `tc tbf` (`--link-rate`, 800 Mbit/s
//! by default: the paper's model's network).
//!
//! After every run the whole result object is read back and compared
//! with what the workload says it must hold (every result's bytes are a
//! function of their offset, so a result written at the wrong place, or
//! not at all, is found), so a fast but wrong run cannot pass.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::machine::{load1, steal_now, steal_since};
use sluice_bench::peers;
use sluice_bench::stats::{ratio, Spread};
use sluice_bench::workload::{parse_duration, Size};
use sluice_client::ObjUri;
use sluice_meta::{MemoryMetaStore, MetaStore, SqliteMetaStore};
use sluice_model::plot::{Axes, Figure, XAxis};
use sluice_model::text::Table;

use crate::epilogue::Epilogue;
use crate::link::{LinkMeasurement, LinkRate};
use crate::setup::PresetOptions;
use crate::striped::Bed;

mod run;
mod servers;
mod workload;

use run::{run_once, RunSpec};
use servers::{Servers, Target};
pub use workload::{IndexEntry, Pair, Search, SearchParams};

/// Sequences in the database, whatever its size: a bigger database has
/// longer sequences, so its results are longer.
pub const SEQUENCES: u64 = 16_384;
/// Bytes of one index entry: offset (u64), length (u32), score (u32),
/// little-endian.
pub const INDEX_ENTRY: u64 = 16;
/// Smallest database: results of at least 16 bytes, so a result that was
/// never written cannot read back as its expected bytes by chance.
pub const MIN_DB_SIZE: u64 = SEQUENCES * 32;
/// Stripe unit of the striped and baseline objects (PVFS's default strip
/// size).
pub const STRIPE_UNIT: u64 = 64 << 10;
/// Servers the striped and baseline objects spread over (the paper's
/// four object-based storage devices).
pub const FOUR: usize = 4;
/// What the speed-up of non-contiguous over naive should reach at the
/// smallest database size.
pub const TARGET_SPEEDUP: f64 = 3.0;
/// Longest wait for one reply: only ends a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes per read when verifying.
const VERIFY_CHUNK: u64 = 1 << 20;
/// The default link (`--link-rate`): the paper's 800 Mbit/s.
const DEFAULT_RATE: LinkRate = LinkRate(800_000_000);

// ---------------------------------------------------------------- options

/// Where the result object lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Setup {
    /// One object server, one ordinary object.
    One,
    /// Four object servers, a striped object whose layout is in SQLite.
    Striped,
    /// Four object servers, the same striping, the layout in every
    /// process's memory: no metadata service (the paper's baseline).
    Baseline,
}

impl Setup {
    pub fn name(self) -> &'static str {
        match self {
            Self::One => "one",
            Self::Striped => "striped",
            Self::Baseline => "baseline",
        }
    }

    fn servers(self) -> usize {
        match self {
            Self::One => 1,
            Self::Striped | Self::Baseline => FOUR,
        }
    }
}

/// How a worker writes a pair's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One write request per result.
    Naive,
    /// One scatter/gather write per pair.
    Noncontig,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Noncontig => "noncontig",
        }
    }
}

/// Which networks to run over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Net {
    /// In-process servers over loopback.
    Loopback,
    /// `sluice serve` processes, each behind a link shaped to
    /// `--link-rate` (needs root and network namespaces).
    Shaped,
}

impl Net {
    pub fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Shaped => "shaped",
        }
    }
}

/// Options of `sluice bench s3asim` beyond the presets' common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct S3aSimArgs {
    /// Database sizes, comma-separated, each at least 512K (default
    /// 1M,2M,4M,8M,16M,32M; 1M,4M,16M with --quick).
    #[arg(long, value_delimiter = ',')]
    pub db_sizes: Option<Vec<Size>>,
    /// Multiplies the number of queries (16; 4 with --quick).
    #[arg(long, default_value_t = 1.0, value_parser = parse_scale)]
    pub scale: f64,
    /// Simulated compute time per (query, fragment) pair.
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub compute: Duration,
    /// Worker processes (threads here), besides the master.
    #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub workers: u32,
    /// Setups, comma-separated: one, striped, baseline (default: all).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub setups: Option<Vec<Setup>>,
    /// Networks, comma-separated: loopback, shaped (default: both;
    /// shaped is skipped with a message where links cannot be made).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub nets: Option<Vec<Net>>,
    /// Seed of the workload.
    #[arg(long, default_value_t = 0x53_3a_51_4d)]
    pub seed: u64,
}

fn parse_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 && x <= 1000.0 => Ok(x),
        _ => Err(format!(
            "{s:?}: a scale is a number above 0 and at most 1000"
        )),
    }
}

// ---------------------------------------------------------------- report

/// One run: one mode at one point in one round.
#[derive(Debug, Clone, Serialize)]
pub struct S3aSimSample {
    pub round: u32,
    pub setup: String,
    pub net: String,
    pub db_size: u64,
    pub mode: String,
    /// Seconds from the first hand-out to the last index write.
    pub time_s: f64,
    /// Write requests the workers and the master made.
    pub requests: u64,
    /// Bytes compared after the run (the whole object).
    pub verified_bytes: u64,
    pub load1: f64,
}

/// Naive against non-contiguous at one database size.
#[derive(Debug, Clone, Serialize)]
pub struct S3aSimRow {
    pub setup: String,
    pub net: String,
    pub db_size: u64,
    pub mean_result: u64,
    pub results: u64,
    pub object_bytes: u64,
    pub naive_s: Option<Spread>,
    pub noncontig_s: Option<Spread>,
    /// naive / non-contiguous time.
    pub speedup: Option<f64>,
    /// The compute alone, spread over the workers: no run is faster.
    pub compute_floor_s: f64,
    /// At the smallest size only: whether the speed-up reached the target.
    pub target_met: Option<bool>,
    /// Why the target was missed, as far as the figures say.
    pub why: Option<String>,
}

/// What `sluice bench s3asim` writes to `s3asim.json`.
#[derive(Debug, Serialize)]
pub struct S3aSimReport {
    pub preset: String,
    pub command: String,
    pub machine: Machine,
    pub loadavg_end: String,
    /// Percent of CPU time stolen by the hypervisor over the whole run.
    pub steal_pct: f64,
    pub quick: bool,
    pub rounds: u32,
    pub queries: u32,
    pub fragments: u32,
    pub results_min: u32,
    pub results_max: u32,
    pub workers: u32,
    pub compute_us: f64,
    pub seed: u64,
    pub stripe_unit: u64,
    /// Each shaped server's link as measured when it was made.
    pub links: Vec<LinkMeasurement>,
    pub notes: Vec<String>,
    pub rows: Vec<S3aSimRow>,
    pub samples: Vec<S3aSimSample>,
    pub failures: Vec<String>,
}

// ---------------------------------------------------------------- preset

/// The points and sizes a run uses.
#[derive(Debug, Clone)]
pub struct Plan {
    pub db_sizes: Vec<u64>,
    pub queries: u32,
    pub fragments: u32,
    pub results_min: u32,
    pub results_max: u32,
}

impl Plan {
    /// Sizes from the arguments and `--quick`.
    pub fn new(quick: bool, args: &S3aSimArgs) -> Result<Self> {
        let mut db_sizes: Vec<u64> = match &args.db_sizes {
            Some(v) => v.iter().map(|s| s.0).collect(),
            None if quick => vec![1 << 20, 4 << 20, 16 << 20],
            None => (0..6).map(|i| (1u64 << 20) << i).collect(),
        };
        db_sizes.sort_unstable();
        db_sizes.dedup();
        if let Some(&small) = db_sizes.first().filter(|&&s| s < MIN_DB_SIZE) {
            bail!(
                "--db-sizes {}: each at least {}",
                sluice_types::format_size(small),
                sluice_types::format_size(MIN_DB_SIZE)
            );
        }
        let base = if quick { 4.0 } else { 16.0 };
        Ok(Self {
            db_sizes,
            queries: ((base * args.scale).round() as u32).max(1),
            // Two pairs per worker per query, as S3aSim hands out more
            // fragments than there are workers.
            fragments: 2 * args.workers,
            results_min: 10,
            results_max: 50,
        })
    }

    fn params(&self, db_size: u64, seed: u64) -> SearchParams {
        SearchParams {
            queries: self.queries,
            fragments: self.fragments,
            results_min: self.results_min,
            results_max: self.results_max,
            db_size,
            seed,
        }
    }
}

/// `sluice bench s3asim`.
pub fn s3asim(opts: &PresetOptions, args: &S3aSimArgs) -> Result<S3aSimReport> {
    let plan = Plan::new(opts.quick, args)?;
    let setups = args
        .setups
        .clone()
        .unwrap_or_else(|| vec![Setup::One, Setup::Striped, Setup::Baseline]);
    let nets = args
        .nets
        .clone()
        .unwrap_or_else(|| vec![Net::Loopback, Net::Shaped]);
    let machine = Machine::probe();
    let steal0 = steal_now();
    let t0 = Instant::now();
    let searches: Vec<Search> = plan
        .db_sizes
        .iter()
        .map(|&d| Search::generate(plan.params(d, args.seed)))
        .collect::<Result<_>>()?;
    let mut notes = vec![format!(
        "{} queries x {} fragments, {}-{} results per pair, {} workers + master, {} compute per pair; naive: one write per result, noncontig: one SGL write per pair; striped and baseline: {} KiB stripe unit over {FOUR} servers",
        plan.queries,
        plan.fragments,
        plan.results_min,
        plan.results_max,
        args.workers,
        format!("{:?}", args.compute),
        STRIPE_UNIT >> 10
    )];
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    let mut links = Vec::new();
    let mut serial = 0u64;
    for net in nets {
        let Some(mut servers) = start_servers(opts, net, &mut notes)? else {
            continue;
        };
        for &setup in &setups {
            eprintln!("# {} over {}", setup.name(), net.name());
            let target = match make_target(&mut servers, setup) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("{} over {}: {e:#}", setup.name(), net.name());
                    failures.push(format!("{} over {}: {e:#}", setup.name(), net.name()));
                    continue;
                }
            };
            let (target, _meta_dir) = target;
            for search in &searches {
                for round in 0..opts.rounds {
                    // Modes take turns, the first one moving each round.
                    let modes = if round % 2 == 0 {
                        [Mode::Naive, Mode::Noncontig]
                    } else {
                        [Mode::Noncontig, Mode::Naive]
                    };
                    for mode in modes {
                        serial += 1;
                        let spec = RunSpec {
                            target: &target,
                            search,
                            mode,
                            workers: args.workers,
                            compute: args.compute,
                        };
                        let label = format!(
                            "round {round} {} {} db {} {}",
                            setup.name(),
                            net.name(),
                            sluice_types::format_size(search.params.db_size),
                            mode.name()
                        );
                        match run_once(&spec, serial) {
                            Ok((time_s, requests, verified)) => {
                                eprintln!(
                                    "{label}: {time_s:.3} s, {requests} writes, verified {}",
                                    sluice_types::format_size(verified)
                                );
                                samples.push(S3aSimSample {
                                    round,
                                    setup: setup.name().into(),
                                    net: net.name().into(),
                                    db_size: search.params.db_size,
                                    mode: mode.name().into(),
                                    time_s,
                                    requests,
                                    verified_bytes: verified,
                                    load1: load1(),
                                });
                            }
                            Err(e) => {
                                eprintln!("{label}: {e:#}");
                                failures.push(format!("{label}: {e:#}"));
                            }
                        }
                    }
                }
            }
        }
        if let Servers::Shaped(bed) = &servers {
            links = bed.measured().to_vec();
            if let Some(l) = links.first() {
                notes.push(format!(
                    "shaped: sluice serve processes, each in its own network namespace behind a {} link ({})",
                    bed.rate(),
                    l.line()
                ));
            }
        }
        if let Servers::Loopback { .. } = &servers {
            notes.push("loopback: in-process object servers on 127.0.0.1".into());
        }
    }
    let compute_floor = |search: &Search| {
        let per_worker = search.pairs.len().div_ceil(args.workers as usize) as f64;
        per_worker * args.compute.as_secs_f64()
    };
    let rows = summarise(&samples, &searches, compute_floor);
    let report = S3aSimReport {
        preset: "s3asim".into(),
        command: crate::setup::command_line(),
        machine,
        loadavg_end: Machine::probe().loadavg,
        steal_pct: steal_since(steal0),
        quick: opts.quick,
        rounds: opts.rounds,
        queries: plan.queries,
        fragments: plan.fragments,
        results_min: plan.results_min,
        results_max: plan.results_max,
        workers: args.workers,
        compute_us: args.compute.as_secs_f64() * 1e6,
        seed: args.seed,
        stripe_unit: STRIPE_UNIT,
        links,
        notes,
        rows,
        samples,
        failures,
    };
    print_report(opts, &report, t0.elapsed())?;
    Ok(report)
}

/// The object servers of `net`, or none when `net` cannot run here
/// (the reason goes to stderr and `notes`).
fn start_servers(
    opts: &PresetOptions,
    net: Net,
    notes: &mut Vec<String>,
) -> Result<Option<Servers>> {
    let servers = match net {
        Net::Loopback => Servers::Loopback {
            servers: Vec::new(),
            dir: crate::setup::scratch_dir("s3asim")?,
        },
        Net::Shaped => {
            let bin = match peers::resolve_sluice_bin(opts.sluice_bin.as_deref()) {
                Ok(b) => b,
                Err(e) => {
                    let why = format!("shaped runs skipped: {e:#}");
                    eprintln!("{why}");
                    notes.push(why);
                    return Ok(None);
                }
            };
            if let Some(why) = crate::link::unavailable() {
                let why = format!("shaped runs skipped: {why}");
                eprintln!("{why}");
                notes.push(why);
                return Ok(None);
            }
            Servers::Shaped(Bed::new(
                bin,
                opts.link_rate.unwrap_or(DEFAULT_RATE),
                "s3asim",
            )?)
        }
    };
    Ok(Some(servers))
}

/// The target of `setup` over `servers`, and the folder of its SQLite
/// metadata store (kept until the setup's runs are done).
fn make_target(servers: &mut Servers, setup: Setup) -> Result<(Target, Option<tempfile::TempDir>)> {
    let uris = servers.uris(setup.servers())?;
    match setup {
        Setup::One => {
            let uri: ObjUri = uris[0]
                .parse()
                .with_context(|| format!("object server URI {}", uris[0]))?;
            Ok((Target::One(uri), None))
        }
        Setup::Striped | Setup::Baseline => {
            let (meta, dir): (Arc<dyn MetaStore>, _) = if setup == Setup::Striped {
                let dir = crate::setup::scratch_dir("s3asim-meta")?;
                let store = SqliteMetaStore::open(dir.path())
                    .context("cannot open the SQLite metadata store")?;
                (Arc::new(store), Some(dir))
            } else {
                (Arc::new(MemoryMetaStore::new()), None)
            };
            for u in &uris {
                meta.add_server(u)
                    .with_context(|| format!("cannot add {u} to the metadata store"))?;
            }
            Ok((Target::Striped(meta), dir))
        }
    }
}

/// Rows by setup, network and size: medians over rounds, the speed-up,
/// and the target at the smallest size.
pub fn summarise(
    samples: &[S3aSimSample],
    searches: &[Search],
    compute_floor: impl Fn(&Search) -> f64,
) -> Vec<S3aSimRow> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for s in samples {
        let k = (s.setup.clone(), s.net.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let smallest = searches.iter().map(|s| s.params.db_size).min();
    let mut rows = Vec::new();
    for (setup, net) in keys {
        for search in searches {
            let db = search.params.db_size;
            let times = |mode: Mode| {
                let v: Vec<f64> = samples
                    .iter()
                    .filter(|s| {
                        s.setup == setup && s.net == net && s.db_size == db && s.mode == mode.name()
                    })
                    .map(|s| s.time_s)
                    .collect();
                Spread::of(&v)
            };
            let (naive, noncontig) = (times(Mode::Naive), times(Mode::Noncontig));
            if naive.is_none() && noncontig.is_none() {
                continue;
            }
            let speedup = naive
                .zip(noncontig)
                .and_then(|(a, b)| ratio(a.median, b.median));
            let floor = compute_floor(search);
            let target_met = (Some(db) == smallest)
                .then(|| speedup.map(|x| x >= TARGET_SPEEDUP))
                .flatten();
            let why = (target_met == Some(false))
                .then(|| miss_reason(naive, noncontig, floor))
                .flatten();
            rows.push(S3aSimRow {
                setup: setup.clone(),
                net: net.clone(),
                db_size: db,
                mean_result: search.params.mean_result(),
                results: search.results(),
                object_bytes: search.size,
                naive_s: naive,
                noncontig_s: noncontig,
                speedup,
                compute_floor_s: floor,
                target_met,
                why,
            });
        }
    }
    rows
}

/// Why naive is less than [`TARGET_SPEEDUP`] times slower, from the
/// figures: the compute floor caps the speed-up at naive / floor.
fn miss_reason(naive: Option<Spread>, noncontig: Option<Spread>, floor: f64) -> Option<String> {
    let (naive, noncontig) = (naive?.median, noncontig?.median);
    let cap = ratio(naive, floor);
    Some(match cap {
        Some(cap) if cap < TARGET_SPEEDUP => format!(
            "compute-bound: even at the compute floor ({floor:.3} s) noncontig could be only {cap:.1}x faster"
        ),
        _ if noncontig < 1.5 * floor => format!(
            "noncontig is at the compute floor ({floor:.3} s); naive's small writes cost little more here"
        ),
        _ => format!(
            "noncontig spends {:.3} s above the compute floor: its writes are not cheap enough here",
            noncontig - floor
        ),
    })
}

fn print_report(opts: &PresetOptions, report: &S3aSimReport, wall: Duration) -> Result<()> {
    let title = format!(
        "s3asim ({} queries x {} fragments, {} workers, median of {} round(s), wall {:.0} s)",
        report.queries,
        report.fragments,
        report.workers,
        report.rounds,
        wall.as_secs_f64()
    );
    Epilogue::new("s3asim", title, &report.machine, &report.notes)
        .links(Some("server"), &report.links)
        .line(format!(
            "load at the end {}, steal {:.1}% over the run",
            report.loadavg_end, report.steal_pct
        ))
        .failures(&report.failures)
        .table("", table(&report.rows))
        .figure(figure(&report.rows))
        .finish(opts, report)
}

/// One line per setup, network and size.
pub fn table(rows: &[S3aSimRow]) -> Table {
    let mut t = Table::new([
        "setup",
        "net",
        "DB size",
        "mean result",
        "results",
        "naive s",
        "noncontig s",
        "naive/noncontig",
        "compute floor s",
        "3x target",
    ]);
    let secs = |s: Option<Spread>| s.map_or_else(|| "-".into(), |s| format!("{:.3}", s.median));
    for r in rows {
        let target = match (r.target_met, &r.why) {
            (Some(true), _) => "met".to_owned(),
            (Some(false), Some(why)) => format!("missed: {why}"),
            (Some(false), None) => "missed".to_owned(),
            (None, _) => String::new(),
        };
        t.row([
            r.setup.clone(),
            r.net.clone(),
            sluice_types::format_size(r.db_size),
            format!("{} B", r.mean_result),
            r.results.to_string(),
            secs(r.naive_s),
            secs(r.noncontig_s),
            r.speedup.map_or_else(|| "-".into(), |x| format!("{x:.2}")),
            format!("{:.3}", r.compute_floor_s),
            target,
        ]);
    }
    t
}

/// Time against database size, naive and non-contiguous, a chart per
/// setup and network.
fn figure(rows: &[S3aSimRow]) -> Figure {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.setup.clone(), r.net.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let axes = Axes {
        x_label: "database size (MiB)".into(),
        y_label: "time to completion (s)".into(),
        x_axis: XAxis::Log2,
    };
    let charts = keys
        .iter()
        .map(|(setup, net)| {
            let mine: Vec<&S3aSimRow> = rows
                .iter()
                .filter(|r| &r.setup == setup && &r.net == net)
                .collect();
            let line = |f: fn(&S3aSimRow) -> Option<Spread>| -> Vec<(f64, f64)> {
                mine.iter()
                    .filter_map(|r| Some((r.db_size as f64 / (1 << 20) as f64, f(r)?.median)))
                    .collect()
            };
            axes.chart(
                format!("{setup}, {net}"),
                vec![
                    ("naive".into(), line(|r| r.naive_s)),
                    ("non-contiguous".into(), line(|r| r.noncontig_s)),
                ],
            )
        })
        .collect();
    Figure {
        title: "S3aSim-like sequence search: time to completion".into(),
        columns: keys.len().clamp(1, 3),
        charts,
    }
}

#[cfg(test)]
mod tests {
    use super::run::{create_object, search_and_verify, verify};
    use super::servers::Writer;
    use super::*;
    use crate::objserver::ObjServer;
    use clap::Parser;
    use sluice_client::obj::Segment;

    fn params(db_size: u64, seed: u64) -> SearchParams {
        SearchParams {
            queries: 3,
            fragments: 5,
            results_min: 0,
            results_max: 20,
            db_size,
            seed,
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_search() {
        let a = Search::generate(params(1 << 20, 7)).unwrap();
        let b = Search::generate(params(1 << 20, 7)).unwrap();
        assert_eq!(a, b);
        let c = Search::generate(params(1 << 20, 8)).unwrap();
        assert_ne!(a.pairs, c.pairs);
        assert_eq!(
            a.expected(0, a.size as usize),
            b.expected(0, b.size as usize)
        );
    }

    #[test]
    fn results_and_index_tile_the_object_without_overlap() {
        for seed in 0..20 {
            let s = Search::generate(params(2 << 20, seed)).unwrap();
            assert_eq!(s.pairs.len(), 15);
            let mut all: Vec<Segment> = s.pairs.iter().flat_map(|p| p.results.clone()).collect();
            assert_eq!(all.len() as u64, s.results());
            all.sort_by_key(|x| x.offset);
            let mut at = s.index_bytes.len() as u64;
            assert_eq!(at, s.results() * INDEX_ENTRY);
            for seg in &all {
                assert_eq!(seg.offset, at, "seed {seed}: a gap or an overlap");
                assert!(seg.length > 0);
                at += seg.length;
            }
            assert_eq!(at, s.size);
            // Each pair's results are in offset order and, with more than
            // one fragment, rarely one run: non-contiguous.
            for p in &s.pairs {
                assert!(p.results.windows(2).all(|w| w[0].offset < w[1].offset));
            }
        }
    }

    #[test]
    fn each_query_index_is_sorted_by_score_and_names_its_results() {
        let s = Search::generate(params(1 << 20, 3)).unwrap();
        for (q, entries) in s.index.iter().enumerate() {
            assert!(entries.windows(2).all(|w| w[0].score >= w[1].score));
            assert!(entries.windows(2).all(|w| w[0].offset < w[1].offset));
            // The index names exactly the results of the query's pairs.
            let mut of_pairs: Vec<(u64, u64)> = s
                .pairs
                .iter()
                .filter(|p| p.query as usize == q)
                .flat_map(|p| p.results.iter().map(|r| (r.offset, r.length)))
                .collect();
            of_pairs.sort_unstable();
            let named: Vec<(u64, u64)> = entries
                .iter()
                .map(|e| (e.offset, u64::from(e.length)))
                .collect();
            assert_eq!(named, of_pairs);
            // The encoded bytes decode to the entries.
            let bytes = s.query_index(q);
            for (e, raw) in entries.iter().zip(bytes.chunks_exact(16)) {
                let offset = u64::from_le_bytes(raw[..8].try_into().unwrap());
                let length = u32::from_le_bytes(raw[8..12].try_into().unwrap());
                let score = u32::from_le_bytes(raw[12..].try_into().unwrap());
                assert_eq!(
                    IndexEntry {
                        offset,
                        length,
                        score
                    },
                    *e
                );
            }
        }
    }

    #[test]
    fn results_grow_with_the_database_and_their_count_does_not() {
        let small = Search::generate(params(1 << 20, 5)).unwrap();
        let big = Search::generate(params(8 << 20, 5)).unwrap();
        assert_eq!(small.results(), big.results());
        let mean = |s: &Search| s.result_bytes() as f64 / s.results() as f64;
        let r = mean(&big) / mean(&small);
        assert!((7.0..9.0).contains(&r), "{r}");
        for e in small.index.iter().flatten() {
            assert!((32..=96).contains(&e.length), "{e:?}");
        }
    }

    #[test]
    fn gathered_writes_carry_the_expected_bytes() {
        let s = Search::generate(params(1 << 20, 9)).unwrap();
        let p = s.pairs.iter().find(|p| p.results.len() > 1).unwrap();
        let data = s.gather(&p.results);
        let mut at = 0;
        for r in &p.results {
            let n = r.length as usize;
            assert_eq!(data[at..at + n], s.expected(r.offset, n)[..]);
            at += n;
        }
        let q = 1;
        let off = s.index_offset(q);
        assert_eq!(
            s.expected(off, s.query_index(q).len()),
            s.query_index(q).to_vec()
        );
    }

    #[test]
    fn bad_searches_are_refused() {
        for bad in [
            SearchParams {
                queries: 0,
                ..params(1 << 20, 1)
            },
            SearchParams {
                results_min: 5,
                results_max: 4,
                ..params(1 << 20, 1)
            },
            params(MIN_DB_SIZE - 1, 1),
        ] {
            assert!(Search::generate(bad).is_err(), "{bad:?}");
        }
    }

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        args: S3aSimArgs,
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_refused() {
        let a = Top::try_parse_from(["x"]).unwrap().args;
        assert_eq!(
            (a.workers, a.scale, a.compute),
            (14, 1.0, Duration::from_millis(1))
        );
        let plan = Plan::new(true, &a).unwrap();
        assert_eq!((plan.queries, plan.fragments), (4, 28));
        assert_eq!(plan.db_sizes, [1 << 20, 4 << 20, 16 << 20]);
        let a = Top::try_parse_from([
            "x",
            "--db-sizes",
            "2M,1M",
            "--scale",
            "0.5",
            "--setups",
            "one,baseline",
            "--nets",
            "loopback",
        ])
        .unwrap()
        .args;
        let plan = Plan::new(false, &a).unwrap();
        assert_eq!(plan.db_sizes, [1 << 20, 2 << 20]);
        assert_eq!(plan.queries, 8);
        assert_eq!(a.setups, Some(vec![Setup::One, Setup::Baseline]));
        for bad in [
            &["--scale", "0"][..],
            &["--scale", "lots"],
            &["--workers", "0"],
            &["--setups", "raid"],
            &["--nets", "wifi"],
            &["--compute", "soon"],
        ] {
            let mut v = vec!["x"];
            v.extend_from_slice(bad);
            assert!(Top::try_parse_from(v).is_err(), "{bad:?}");
        }
        let small = Top::try_parse_from(["x", "--db-sizes", "64K"])
            .unwrap()
            .args;
        assert!(Plan::new(false, &small).is_err());
    }

    fn sample(setup: &str, db: u64, mode: Mode, time_s: f64) -> S3aSimSample {
        S3aSimSample {
            round: 0,
            setup: setup.into(),
            net: "loopback".into(),
            db_size: db,
            mode: mode.name().into(),
            time_s,
            requests: 1,
            verified_bytes: 1,
            load1: 0.0,
        }
    }

    #[test]
    fn rows_judge_the_target_at_the_smallest_size_only() {
        let searches: Vec<Search> = [1 << 20, 2 << 20]
            .iter()
            .map(|&d| Search::generate(params(d, 1)).unwrap())
            .collect();
        let samples = vec![
            sample("one", 1 << 20, Mode::Naive, 3.0),
            sample("one", 1 << 20, Mode::Noncontig, 1.0),
            sample("one", 2 << 20, Mode::Naive, 2.0),
            sample("one", 2 << 20, Mode::Noncontig, 1.0),
            sample("striped", 1 << 20, Mode::Naive, 2.0),
            sample("striped", 1 << 20, Mode::Noncontig, 1.0),
        ];
        let rows = summarise(&samples, &searches, |_| 0.9);
        let got: Vec<(&str, u64, Option<f64>, Option<bool>)> = rows
            .iter()
            .map(|r| (r.setup.as_str(), r.db_size, r.speedup, r.target_met))
            .collect();
        assert_eq!(
            got,
            [
                ("one", 1 << 20, Some(3.0), Some(true)),
                ("one", 2 << 20, Some(2.0), None),
                ("striped", 1 << 20, Some(2.0), Some(false)),
            ]
        );
        // 2.0 s of naive over a 0.9 s floor: at most 2.2x, compute-bound.
        assert!(rows[2].why.as_deref().unwrap().contains("compute-bound"));
    }

    /// A search run for real, then one result byte changed behind its
    /// back: the check that passed before now names that byte.
    #[test]
    fn verification_finds_a_result_written_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let server = ObjServer::start(dir.path(), 1 << 20).unwrap();
        let target = Target::One(server.obj_uri.clone());
        let search = Search::generate(SearchParams {
            queries: 2,
            fragments: 4,
            results_min: 1,
            results_max: 8,
            db_size: 1 << 20,
            seed: 4,
        })
        .unwrap();
        let spec = RunSpec {
            target: &target,
            search: &search,
            mode: Mode::Noncontig,
            workers: 2,
            compute: Duration::ZERO,
        };
        let object = create_object(&target, 1).unwrap();
        let (_, requests) = search_and_verify(&spec, &object).unwrap();
        assert_eq!(requests, 8 + 2);
        let mut w = Writer::open(&target, &object).unwrap();
        verify(&mut w, &search).unwrap();
        let victim = search.pairs[3].results[0];
        let wrong = [!search.expected(victim.offset, 1)[0]];
        let one = Segment {
            offset: victim.offset,
            length: 1,
        };
        w.write(&[one], &wrong).unwrap();
        let e = verify(&mut w, &search).unwrap_err();
        assert!(
            format!("{e:#}").contains(&format!("byte {}", victim.offset)),
            "{e:#}"
        );
    }
}
