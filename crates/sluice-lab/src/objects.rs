//! The `objects` preset: sluice's native object protocol, each case
//! against its peer in the same run (interleaved rounds, the order of
//! the rows turning each round, medians and the median of the per-round
//! ratios):
//!
//! - `ddt`: 1 MiB read as 256 segments of 4 KiB separated by 2-byte
//!   holes, strided and as a scatter/gather list (the same ascending
//!   segments, the client's DDT pinned), against a contiguous
//!   1 MiB read of the same object and one request per segment
//!   (pipelined, as an NBD client must);
//! - `nbd`: contiguous 1 MiB object reads and writes against the same on
//!   an NBD export of the same server, a file in the same directory;
//! - `attr`: a 4 KiB write carrying an attribute against the plain write,
//!   latency at queue depth 1;
//! - `create`: create plus three attributes, one request each, 32 in
//!   flight;
//! - `query`: one indexed range over a 100,000-object collection
//!   selecting 1% of it;
//! - `ceph`: with a Ceph cluster given (its ceph.conf), the same
//!   operations through librados (python3-rados, a script embedded in
//!   the bench) against sluice, with the CPU of both servers per
//!   operation.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_bench::cpu;
use sluice_bench::hist::LatencyHistogram;
use sluice_bench::machine::{load1, steal_now, steal_since, Machine};
use sluice_bench::stats::{median, ratio, Spread};
use sluice_bench::target::SERVER_THREAD_PREFIX;
use sluice_client::obj::{ObjClient, ObjResponse, Segment};
use sluice_model::text::{compact, Table};

use crate::epilogue::Epilogue;
use crate::objserver::ObjServer;
use crate::setup::PresetOptions;

mod ceph;
mod groups;

pub use ceph::find_osd;
use ceph::{ceph_rows, sluice_ceph_rows};
use groups::{attr_group, create_group, ddt_group, nbd_group, populate_query, query_group, Ctx};

const KIB4: usize = 4096;
const MIB: usize = 1 << 20;
/// Segments of the `ddt` case: 256 × 4 KiB = 1 MiB.
const DDT_SEGMENTS: u64 = 256;
/// The hole between two segments of the `ddt` case.
const DDT_HOLE: u64 = 2;

/// A Ceph cluster to compare with.
#[derive(Debug, Clone)]
pub struct CephPeer {
    /// Its ceph.conf.
    pub conf: PathBuf,
    /// The pool to use (it must exist).
    pub pool: String,
    /// The OSD's process id (default: the one `ceph-osd` whose command
    /// line names `conf`).
    pub osd_pid: Option<u32>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ObjectsOptions {
    /// Rounds, duration, output folder, quick sizes.
    pub preset: PresetOptions,
    /// Folder for the object store and the NBD export's file (default:
    /// a temporary folder in the system temp dir).
    pub dir: Option<PathBuf>,
    /// Objects in the `query` collection (default 100,000; quick 5,000).
    pub query_objects: Option<u64>,
    /// Groups to run (default: all, `ceph` only with a cluster).
    pub groups: Option<Vec<String>>,
    /// A Ceph cluster for the `ceph` group.
    pub ceph: Option<CephPeer>,
}

/// Every group, in run order.
pub const GROUPS: [&str; 6] = ["ddt", "nbd", "attr", "create", "query", "ceph"];

/// One measured row of one round.
#[derive(Debug, Clone, Serialize)]
pub struct ObjSample {
    /// Round (0-based).
    pub round: u32,
    /// Group (`ddt`, `nbd`, ...).
    pub group: String,
    /// Row within it.
    pub row: String,
    /// Operations (requests the row counts as one: a 1 MiB read made of
    /// 256 requests is one).
    pub ops: u64,
    /// Payload bytes.
    pub bytes: u64,
    /// Wall time.
    pub wall_s: f64,
    /// Operations per second.
    pub ops_s: f64,
    /// Payload MiB per second.
    pub mib_s: f64,
    /// Mean latency of an operation (µs).
    pub mean_us: f64,
    /// Median latency (µs).
    pub p50_us: f64,
    /// 99th percentile latency (µs).
    pub p99_us: f64,
    /// Server CPU per operation (µs), when known.
    pub server_cpu_us_per_op: Option<f64>,
    /// Client CPU per operation (µs), when known.
    pub client_cpu_us_per_op: Option<f64>,
    /// 1-minute load average at the end.
    pub load1: f64,
    /// Share of CPU time stolen by the hypervisor during the run (%).
    pub steal_pct: f64,
}

/// Median of the rounds of one row, and its ratio to the group's peer.
#[derive(Debug, Clone, Serialize)]
pub struct ObjSummary {
    /// Group.
    pub group: String,
    /// Row.
    pub row: String,
    /// Operations per second.
    pub ops_s: Spread,
    /// MiB per second.
    pub mib_s: f64,
    /// Mean latency (µs), median of rounds.
    pub mean_us: f64,
    /// p50 latency (µs), median of rounds.
    pub p50_us: f64,
    /// Server CPU per operation, median of rounds.
    pub server_cpu_us_per_op: Option<f64>,
    /// Median over rounds of this row's throughput divided by its peer's
    /// in the same round.
    pub ratio: Option<f64>,
    /// The row `ratio` is taken against.
    pub peer: String,
    /// Highest 1-minute load average seen in its rounds.
    pub load1_max: f64,
    /// Highest steal share (%).
    pub steal_pct_max: f64,
}

/// What the preset writes to objects.json.
#[derive(Debug, Serialize)]
pub struct ObjectsReport {
    /// The command that produced it.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Load average when it ended.
    pub loadavg_end: String,
    /// Rounds.
    pub rounds: u32,
    /// Seconds per timed row.
    pub duration_s: f64,
    /// Notes.
    pub notes: Vec<String>,
    /// Medians.
    pub summaries: Vec<ObjSummary>,
    /// Every row of every round.
    pub samples: Vec<ObjSample>,
    /// Rows that failed.
    pub failures: Vec<String>,
}

// ---------------------------------------------------------------- pure parts

/// The `ddt` case's segments: `count` segments of `length` bytes, each
/// followed by a hole of `hole` bytes, from offset 0.
pub fn holed_segments(count: u64, length: u64, hole: u64) -> Vec<Segment> {
    (0..count)
        .map(|i| Segment {
            offset: i * (length + hole),
            length,
        })
        .collect()
}

/// `count` distinct `block`-aligned extents of `block` bytes within
/// `span` bytes, in random order (seeded).
pub fn scattered_extents(count: usize, block: u64, span: u64, seed: u64) -> Vec<Segment> {
    let blocks = span / block;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut all: Vec<u64> = (0..blocks).collect();
    rng.shuffle(&mut all);
    all.truncate(count.min(blocks as usize));
    all.into_iter()
        .map(|b| Segment {
            offset: b * block,
            length: block,
        })
        .collect()
}

/// Rows per group (the first is the peer the others are divided by) and
/// whether higher is better.
fn peer_of(group: &str) -> (&'static str, bool) {
    match group {
        "ddt" => ("contiguous", true),
        "nbd" => ("nbd-read", true),
        "attr" => ("write-4k", false),
        "create" => ("create+3attrs", true),
        "query" => ("query-1pct", false),
        _ => ("", true),
    }
}

/// The peer row of `row` in `group` (for `nbd`, reads against reads and
/// writes against writes; for `ceph`, each sluice row against its Ceph
/// row).
pub fn peer_row(group: &str, row: &str) -> String {
    match group {
        "nbd" => {
            if row.ends_with("write") {
                "nbd-write".into()
            } else {
                "nbd-read".into()
            }
        }
        "ceph" => match row.strip_prefix("sluice-") {
            Some(rest) => format!(
                "ceph-{}",
                rest.trim_end_matches("-nofua").trim_end_matches("-fua")
            ),
            None => row.to_owned(),
        },
        g => peer_of(g).0.to_owned(),
    }
}

/// Medians per (group, row) and the median of per-round ratios to each
/// row's peer; throughput for most groups, inverse latency where lower
/// latency is the goal (`attr`, `query`: the ratio is then latency over
/// the peer's latency).
pub fn summarise(samples: &[ObjSample]) -> Vec<ObjSummary> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for s in samples {
        let k = (s.group.clone(), s.row.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter_map(|(group, row)| {
            let mine: Vec<&ObjSample> = samples
                .iter()
                .filter(|s| s.group == group && s.row == row)
                .collect();
            let ops: Vec<f64> = mine.iter().map(|s| s.ops_s).collect();
            let (_, higher_better) = peer_of(&group);
            let peer = peer_row(&group, &row);
            let per_round: Vec<f64> = mine
                .iter()
                .filter_map(|s| {
                    let p = samples
                        .iter()
                        .find(|p| p.group == group && p.row == peer && p.round == s.round)?;
                    if higher_better {
                        ratio(s.ops_s, p.ops_s)
                    } else {
                        ratio(s.mean_us, p.mean_us)
                    }
                })
                .collect();
            let srv: Vec<f64> = mine.iter().filter_map(|s| s.server_cpu_us_per_op).collect();
            let m = |f: &dyn Fn(&ObjSample) -> f64| {
                median(&mine.iter().map(|s| f(s)).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            Some(ObjSummary {
                ops_s: Spread::of(&ops)?,
                mib_s: m(&|s| s.mib_s),
                mean_us: m(&|s| s.mean_us),
                p50_us: m(&|s| s.p50_us),
                server_cpu_us_per_op: median(&srv),
                ratio: if peer == row {
                    None
                } else {
                    median(&per_round)
                },
                load1_max: mine.iter().map(|s| s.load1).fold(0.0, f64::max),
                steal_pct_max: mine.iter().map(|s| s.steal_pct).fold(0.0, f64::max),
                peer,
                group,
                row,
            })
        })
        .collect()
}

// ---------------------------------------------------------------- measuring

/// Times a row: wall clock, server threads' CPU, this thread's CPU,
/// steal.
struct Meter {
    t0: Instant,
    server0: Duration,
    client0: Duration,
    steal0: (u64, u64),
    lat: LatencyHistogram,
    ops: u64,
    bytes: u64,
}

impl Meter {
    fn start() -> Self {
        Self {
            server0: cpu::own_threads_cpu(SERVER_THREAD_PREFIX),
            client0: cpu::thread_cpu(),
            steal0: steal_now(),
            lat: LatencyHistogram::new(),
            ops: 0,
            bytes: 0,
            t0: Instant::now(),
        }
    }

    /// Counts `ops` operations of `bytes` in all that took `each` apiece.
    fn record(&mut self, ops: u64, bytes: u64, each: Duration) {
        for _ in 0..ops {
            self.lat.record_ns(each.as_nanos() as u64);
        }
        self.ops += ops;
        self.bytes += bytes;
    }

    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    fn finish(self, round: u32, group: &str, row: &str, server_cpu: bool) -> ObjSample {
        let wall = self.t0.elapsed().as_secs_f64();
        let server = cpu::own_threads_cpu(SERVER_THREAD_PREFIX).saturating_sub(self.server0);
        let client = cpu::thread_cpu().saturating_sub(self.client0);
        let per_op = |d: Duration| (self.ops > 0).then(|| d.as_secs_f64() * 1e6 / self.ops as f64);
        let lat = self.lat.summary();
        ObjSample {
            round,
            group: group.into(),
            row: row.into(),
            ops: self.ops,
            bytes: self.bytes,
            wall_s: wall,
            ops_s: self.ops as f64 / wall.max(1e-9),
            mib_s: self.bytes as f64 / wall.max(1e-9) / MIB as f64,
            mean_us: lat.mean_us,
            p50_us: lat.p50_us,
            p99_us: lat.p99_us,
            server_cpu_us_per_op: if server_cpu { per_op(server) } else { None },
            client_cpu_us_per_op: per_op(client),
            load1: load1(),
            steal_pct: steal_since(self.steal0),
        }
    }
}

fn check_all(results: Vec<Result<ObjResponse, sluice_client::obj::ObjError>>) -> Result<()> {
    for r in results {
        r.context("a pipelined request failed")?;
    }
    Ok(())
}

/// [`check_all`] for reads: each read's buffer goes back to the client
/// for a later read to be received into, as a streaming reader does (the
/// NBD rows' client reads into buffers it reuses too).
fn check_reads(
    c: &mut ObjClient,
    results: Vec<Result<ObjResponse, sluice_client::obj::ObjError>>,
) -> Result<()> {
    for r in results {
        if let ObjResponse::Read(r) = r.context("a pipelined read failed")? {
            c.recycle(r.data);
        }
    }
    Ok(())
}

/// Runs `one` (which records what it did in the meter) until `duration`
/// has passed.
fn timed(duration: Duration, mut one: impl FnMut(&mut Meter) -> Result<()>) -> Result<Meter> {
    let mut m = Meter::start();
    while m.elapsed() < duration {
        one(&mut m)?;
    }
    Ok(m)
}

// ---------------------------------------------------------------- the preset

fn wants(opts: &ObjectsOptions, group: &str) -> bool {
    opts.groups
        .as_ref()
        .is_none_or(|g| g.iter().any(|x| x == group))
}

/// Runs the preset: every group once per round, groups in turn, rows
/// in turn within each group.
pub fn objects(opts: &ObjectsOptions) -> Result<ObjectsReport> {
    if let Some(groups) = &opts.groups {
        if let Some(bad) = groups.iter().find(|g| !GROUPS.contains(&g.as_str())) {
            bail!("unknown group {bad:?}; groups are {}", GROUPS.join(", "));
        }
    }
    let p = &opts.preset;
    let machine = Machine::probe();
    let duration = p
        .duration
        .unwrap_or(Duration::from_secs_f64(if p.quick { 0.3 } else { 1.5 }));
    let (dir, _temp) = crate::setup::work_dir(opts.dir.as_deref(), "objects")?;
    let export_size = p
        .image_size
        .unwrap_or(if p.quick { 64 << 20 } else { 256 << 20 })
        .max(MIB as u64)
        & !(MIB as u64 - 1);
    let server = ObjServer::start(&dir, export_size)?;
    let mut notes = vec![format!(
        "embedded sluice server: object store {}/objects and NBD export {}/export.img ({} MiB), same file system",
        dir.display(),
        dir.display(),
        export_size >> 20
    )];
    let ctx = Ctx {
        server: &server,
        duration,
        span: export_size,
    };
    let query_count = opts
        .query_objects
        .unwrap_or(if p.quick { 5_000 } else { 100_000 });
    if wants(opts, "query") {
        let took = populate_query(&server, query_count)?;
        let line = format!(
            "query collection: {query_count} objects populated in {:.2} s ({:.0}/s, batches of 2048, 64 in flight)",
            took.as_secs_f64(),
            query_count as f64 / took.as_secs_f64().max(1e-9)
        );
        eprintln!("{line}");
        notes.push(line);
    }
    let ceph = if wants(opts, "ceph") {
        opts.ceph.as_ref()
    } else {
        None
    };
    if wants(opts, "ceph") && ceph.is_none() && opts.groups.is_some() {
        bail!("the ceph group needs --ceph-conf (or CEPH_CONF)");
    }
    if let Some(c) = ceph {
        let osd = c.osd_pid.or_else(|| find_osd(&c.conf));
        notes.push(format!(
            "ceph: {} pool {} (osd pid {})",
            c.conf.display(),
            c.pool,
            osd.map_or_else(|| "unknown: no OSD CPU".into(), |p| p.to_string())
        ));
    }
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let mut failures = Vec::new();
    for round in 0..p.rounds {
        for group in GROUPS {
            if !wants(opts, group) || (group == "ceph" && ceph.is_none()) {
                continue;
            }
            let before = samples.len();
            let r = match group {
                "ddt" => ddt_group(&ctx, round, &mut samples),
                "nbd" => nbd_group(&ctx, round, &mut samples),
                "attr" => attr_group(&ctx, round, &mut samples),
                "create" => create_group(&ctx, round, &mut samples),
                "query" => query_group(&ctx, round, query_count, &mut samples),
                _ => ceph.map_or(Ok(()), |c| {
                    // Ceph and sluice in turn, the other first each round.
                    let secs = duration.as_secs_f64();
                    if round % 2 == 0 {
                        ceph_rows(c, secs, round, &mut samples)?;
                        sluice_ceph_rows(&ctx, round, &mut samples)
                    } else {
                        sluice_ceph_rows(&ctx, round, &mut samples)?;
                        ceph_rows(c, secs, round, &mut samples)
                    }
                }),
            };
            for s in &samples[before..] {
                eprintln!(
                    "round {round} {:<7} {:<30} {:>10.0} ops/s {:>9} MiB/s  mean {:>8} us  srv {} us/op  load {:.2} steal {:.1}%",
                    s.group,
                    s.row,
                    s.ops_s,
                    compact(s.mib_s),
                    compact(s.mean_us),
                    s.server_cpu_us_per_op.map_or_else(|| "-".into(), compact),
                    s.load1,
                    s.steal_pct
                );
            }
            if let Err(e) = r {
                eprintln!("round {round} {group}: {e:#}");
                failures.push(format!("round {round} {group}: {e:#}"));
            }
        }
    }
    drop(server);
    let summaries = summarise(&samples);
    let report = ObjectsReport {
        command: crate::setup::command_line(),
        machine,
        loadavg_end: Machine::probe().loadavg,
        rounds: p.rounds,
        duration_s: duration.as_secs_f64(),
        notes,
        summaries,
        samples,
        failures,
    };
    let title = format!(
        "objects ({} round(s), {:.1} s per row, wall {:.0} s)",
        report.rounds,
        report.duration_s,
        t0.elapsed().as_secs_f64()
    );
    Epilogue::new("objects", title, &report.machine, &report.notes)
        .failures(&report.failures)
        .table("", summary_table(&report.summaries))
        .finish(p, &report)?;
    Ok(report)
}

/// The summary as a table: one line per row, its peer and the ratio.
pub fn summary_table(summaries: &[ObjSummary]) -> Table {
    let mut t = Table::new([
        "group",
        "row",
        "ops/s",
        "min-max",
        "MiB/s",
        "mean us",
        "p50 us",
        "srv us/op",
        "x peer",
        "peer",
        "load",
        "steal%",
    ]);
    for s in summaries {
        t.row([
            s.group.clone(),
            s.row.clone(),
            compact(s.ops_s.median),
            format!("{}-{}", compact(s.ops_s.min), compact(s.ops_s.max)),
            compact(s.mib_s),
            compact(s.mean_us),
            compact(s.p50_us),
            s.server_cpu_us_per_op.map_or_else(|| "-".into(), compact),
            s.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
            if s.peer == s.row {
                "-".into()
            } else {
                s.peer.clone()
            },
            format!("{:.2}", s.load1_max),
            format!("{:.1}", s.steal_pct_max),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::groups::rotate;
    use super::*;
    use sluice_client::obj::plan::{choose, coalesce, Layout};

    #[test]
    fn holed_segments_are_strided() {
        let segs = holed_segments(256, 4096, 2);
        assert_eq!(segs.len(), 256);
        assert_eq!(segs[1].offset, 4098);
        assert_eq!(segs.iter().map(|s| s.length).sum::<u64>(), 1 << 20);
        assert!(matches!(
            choose(&coalesce(&segs).expect("ends below 2^64")),
            Layout::Strided {
                stride: 4098,
                count: 256,
                ..
            }
        ));
        // No hole: one contiguous range.
        assert!(matches!(
            choose(&coalesce(&holed_segments(4, 10, 0)).expect("ends below 2^64")),
            Layout::Contiguous(Segment {
                offset: 0,
                length: 40
            })
        ));
    }

    #[test]
    fn scattered_extents_are_distinct_aligned_and_inside() {
        let e = scattered_extents(256, 4096, 16 << 20, 7);
        assert_eq!(e.len(), 256);
        let mut offs: Vec<u64> = e.iter().map(|s| s.offset).collect();
        assert!(offs.iter().all(|o| o % 4096 == 0 && o + 4096 <= 16 << 20));
        offs.sort_unstable();
        offs.dedup();
        assert_eq!(offs.len(), 256);
        assert_eq!(e, scattered_extents(256, 4096, 16 << 20, 7));
        assert_ne!(e, scattered_extents(256, 4096, 16 << 20, 8));
        // Fewer blocks than asked for: every block once.
        assert_eq!(scattered_extents(10, 4096, 4 * 4096, 1).len(), 4);
    }

    fn sample(round: u32, group: &str, row: &str, ops_s: f64, mean_us: f64) -> ObjSample {
        ObjSample {
            round,
            group: group.into(),
            row: row.into(),
            ops: 1,
            bytes: 0,
            wall_s: 1.0,
            ops_s,
            mib_s: 0.0,
            mean_us,
            p50_us: mean_us,
            p99_us: mean_us,
            server_cpu_us_per_op: None,
            client_cpu_us_per_op: None,
            load1: round as f64,
            steal_pct: 0.0,
        }
    }

    #[test]
    fn ratios_are_per_round_medians_against_the_right_peer() {
        let s = vec![
            sample(0, "ddt", "contiguous", 100.0, 10.0),
            sample(0, "ddt", "sgl", 90.0, 11.0),
            sample(1, "ddt", "contiguous", 50.0, 20.0),
            sample(1, "ddt", "sgl", 40.0, 25.0),
            sample(2, "ddt", "contiguous", 200.0, 5.0),
            sample(2, "ddt", "sgl", 200.0, 5.0),
            sample(0, "attr", "write-4k", 1000.0, 40.0),
            sample(0, "attr", "write-4k+attr", 800.0, 50.0),
            sample(0, "nbd", "nbd-write", 10.0, 1.0),
            sample(0, "nbd", "obj-write", 9.0, 1.0),
            sample(0, "nbd", "nbd-read", 20.0, 1.0),
        ];
        let sum = summarise(&s);
        let get = |g: &str, r: &str| sum.iter().find(|x| x.group == g && x.row == r).unwrap();
        // Per-round ratios 0.9, 0.8, 1.0: median 0.9 (the ratio of the
        // medians would be 90/100 too, but not in general).
        assert!((get("ddt", "sgl").ratio.unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(get("ddt", "contiguous").ratio, None);
        assert_eq!(get("ddt", "sgl").load1_max, 2.0);
        // Latency groups: latency over the peer's.
        assert!((get("attr", "write-4k+attr").ratio.unwrap() - 1.25).abs() < 1e-12);
        // Writes against writes.
        assert!((get("nbd", "obj-write").ratio.unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(peer_row("ceph", "sluice-write-4k-fua"), "ceph-write-4k");
        assert_eq!(
            peer_row("ceph", "sluice-create+3attrs-nofua"),
            "ceph-create+3attrs"
        );
        assert_eq!(peer_row("ceph", "sluice-read-1m"), "ceph-read-1m");
        assert_eq!(peer_row("nbd", "obj-read"), "nbd-read");
    }

    #[test]
    fn rotation_starts_one_later_each_round() {
        assert_eq!(rotate(&["a", "b", "c"], 0), ["a", "b", "c"]);
        assert_eq!(rotate(&["a", "b", "c"], 1), ["b", "c", "a"]);
        assert_eq!(rotate(&["a", "b", "c"], 4), ["b", "c", "a"]);
    }
}
