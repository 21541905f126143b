//! `sluice bench noncontig`: the object-storage paper's non-contiguous
//! I/O experiments (its figures 9 and 10) on sluice, each curve beside
//! the paper's model T = S/BW + N ([`sluice_model::noncontig`]) evaluated
//! with the link's measured bandwidth and round trip.
//!
//! - **contiguous**: one transfer of each size in one request, sent
//!   contiguous, as a scatter/gather list of one segment and as a strided
//!   request of one segment (the client's DDT pinned with
//!   [`ObjOptions::ddt`](sluice_client::obj::ObjOptions::ddt)): all three should be equal.
//! - **view**: an MPI-vector-like file view, blocks of x bytes each
//!   followed by a 2-byte hole, a fixed payload in all (1 MiB by default,
//!   `--total`), for x from 8 B to 64 KiB: iterative (one request per
//!   block) sent one at a time as the paper's baseline does (a round trip
//!   per block: `iterative-qd1`) and 64 in flight as an NBD client
//!   pipelines (`iterative`), one SGL and one
//!   strided request (cut where the server's published limits require,
//!   the pieces pipelined), writes then reads, on an object and on a
//!   `mem` and a `file` NBD export of the same server (the native
//!   protocol's extent commands).
//!
//! The server is embedded, its sockets bound in a network namespace
//! behind a veth link ([`crate::link`]): unshaped, shaped with tc tbf to
//! 800 Mbit/s as in the paper (`--link-rate`), and a long link of the
//! same rate with a delay added each way (`--link-delay`, 250 µs by
//! default: a round trip of about half a millisecond, the
//! high-latency case the paper's introduction speaks of, where one
//! request per block costs most), played by a relay
//! ([`crate::relay`]). Where namespaces are
//! unavailable the run says so and measures on loopback, without a model
//! (nothing measured the link). DDTs take turns within each point, the
//! first one moving each round; each timed value is the median transfer
//! time of its repetitions, then the median over rounds. Every read is
//! compared with the bytes written, and each point ends with one
//! contiguous read of the whole span checking every block and that every
//! hole is still zero.

use sluice_client::Durability;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::steal_now;
use sluice_bench::machine::Machine;
use sluice_bench::workload::Size;
use sluice_client::obj::{DataOptions, ObjClient, Segment};
use sluice_model::noncontig::{Ddt, Direction, NoncontigParams};

use crate::link::{LinkMeasurement, LinkRate};
use crate::setup::PresetOptions;

mod bed;
mod points;
mod report;

use bed::{client_index, requests, slices, timed, transfer, Bed, Op, Place};
pub use points::{check_targets, finish_points};
use points::{Key, Points};
use report::print_report;

/// The hole after each block of the view.
pub const HOLE: u64 = 2;
/// The shaped link's rate when `--link-rate` is not given: the paper's.
pub const PAPER_RATE: LinkRate = LinkRate(800_000_000);
/// The delayed link's delay each way when `--link-delay` is not given.
pub const DEFAULT_DELAY: Duration = Duration::from_micros(250);
/// One request at a time costs a round trip per block whatever the
/// count, so [`ITERATIVE_QD1`] is timed on at most this many blocks of
/// the view (its rate is the same; a view of 8-byte blocks would
/// otherwise take 32,768 round trips per transfer).
pub const QD1_MAX_BLOCKS: usize = 2048;
/// Requests the client keeps in flight (iterative blocks, split pieces).
pub const IN_FLIGHT: usize = 64;
/// The view's iterative transfer sent one request at a time (the
/// paper's baseline), beside `iterative`, pipelined [`IN_FLIGHT`] deep.
pub const ITERATIVE_QD1: &str = "iterative-qd1";
/// SGL and strided at least this many times iterative on the shaped
/// link, for blocks of [`TARGET_BLOCKS`] bytes.
pub const TARGET_SPEEDUP: f64 = 10.0;
/// ... and within this of the model.
pub const TARGET_MODEL_ERROR: f64 = 0.15;
/// The block sizes the targets hold for.
pub const TARGET_BLOCKS: std::ops::RangeInclusive<u64> = 8..=4096;
/// sluice's DDT bytes (docs/protocol.md): an SGL is a 4-byte count and
/// 16 bytes per segment; a strided DDT is stride, length and count.
const SGL_FIXED_BYTES: f64 = 4.0;
const SGL_ENTRY_BYTES: f64 = 16.0;
const STRIDED_BYTES: f64 = 20.0;
/// The export names.
const MEM_EXPORT: &str = "mem";
const FILE_EXPORT: &str = "file";

/// Where the server sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// 127.0.0.1, no namespace (nothing measured: no model).
    Loopback,
    /// A veth link without a rate limit.
    Unshaped,
    /// A veth link shaped with tc tbf (800 Mbit/s unless --link-rate).
    Shaped,
    /// A veth link crossed through a relay that plays a wire of the same
    /// rate with a delay each way (250 µs unless --link-delay).
    Delayed,
}

impl LinkKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Loopback => "loopback",
            Self::Unshaped => "unshaped",
            Self::Shaped => "shaped",
            Self::Delayed => "delayed",
        }
    }

    /// Rate-limited: where the paper's claims are judged.
    pub fn is_rate_limited(self) -> bool {
        matches!(self, Self::Shaped | Self::Delayed)
    }
}

/// What the view is read and written on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Volume {
    /// An object of the server's store.
    Object,
    /// The `mem` NBD export, through extent commands.
    Mem,
    /// The `file` NBD export, through extent commands.
    File,
}

impl Volume {
    pub fn name(self) -> &'static str {
        match self {
            Self::Object => "object",
            Self::Mem => "mem",
            Self::File => "file",
        }
    }
}

/// Options of `sluice bench noncontig` beyond the presets' common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct NoncontigArgs {
    /// Payload bytes of each view transfer, whatever its block size
    /// (default 1M; 256K with --quick).
    #[arg(long)]
    pub total: Option<Size>,
    /// Block sizes x of the view, comma-separated (default: powers of two
    /// from 8 to 64K; with --quick 8,64,512,4K,64K).
    #[arg(long, value_delimiter = ',')]
    pub blocks: Option<Vec<Size>>,
    /// Transfer sizes of the contiguous part, comma-separated (default
    /// 4K,16K,64K,256K,1M,4M; with --quick 4K,64K,1M).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<Size>>,
    /// Links to run over, comma-separated: loopback, unshaped, shaped,
    /// delayed (default unshaped,shaped,delayed, or loopback where
    /// network namespaces are unavailable).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub links: Option<Vec<LinkKind>>,
    /// Delay added each way on the delayed link (default 250us).
    #[arg(long, value_parser = sluice_bench::workload::parse_duration)]
    pub link_delay: Option<Duration>,
    /// Volumes of the view, comma-separated: object, mem, file (default
    /// all three).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub volumes: Option<Vec<Volume>>,
}

/// The sizes one run uses, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub total: u64,
    pub blocks: Vec<u64>,
    pub sizes: Vec<u64>,
    pub volumes: Vec<Volume>,
}

/// Largest view payload and contiguous transfer (the exports and the
/// client's buffers are sized from them).
const MAX_BYTES: u64 = 64 << 20;

impl NoncontigArgs {
    /// The sizes to run, defaults filled in; a usage error for sizes that
    /// cannot run.
    pub fn plan(&self, quick: bool) -> Result<Plan, String> {
        let total = self
            .total
            .map_or(if quick { 256 << 10 } else { 1 << 20 }, |s| s.0);
        if !(1..=MAX_BYTES).contains(&total) {
            return Err(format!(
                "--total {total}: must be between 1 byte and 64 MiB"
            ));
        }
        let blocks = match &self.blocks {
            Some(b) => b.iter().map(|s| s.0).collect(),
            None if quick => vec![8, 64, 512, 4 << 10, 64 << 10],
            None => (3..=16).map(|p| 1u64 << p).collect(),
        };
        if let Some(b) = blocks.iter().find(|&&b| b == 0 || b > total) {
            return Err(format!(
                "--blocks {b}: a block must be between 1 byte and --total ({total})"
            ));
        }
        let sizes = match &self.sizes {
            Some(s) => s.iter().map(|s| s.0).collect(),
            None if quick => vec![4 << 10, 64 << 10, 1 << 20],
            None => vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20],
        };
        if let Some(s) = sizes.iter().find(|&&s| !(1..=MAX_BYTES).contains(&s)) {
            return Err(format!("--sizes {s}: must be between 1 byte and 64 MiB"));
        }
        let volumes = self
            .volumes
            .clone()
            .unwrap_or_else(|| vec![Volume::Object, Volume::Mem, Volume::File]);
        Ok(Plan {
            total,
            blocks,
            sizes,
            volumes,
        })
    }
}

// ---------------------------------------------------------------- the view

/// The view's blocks for a payload of `total` bytes in blocks of `block`
/// bytes, each followed by a [`HOLE`]: `total / block` whole blocks and,
/// when `block` does not divide `total`, a shorter last one, so the
/// payload is always `total`.
pub fn view_segments(total: u64, block: u64) -> Vec<Segment> {
    let mut out = Vec::with_capacity(total.div_ceil(block.max(1)) as usize);
    let (mut offset, mut left) = (0u64, total);
    while left > 0 && block > 0 {
        let length = block.min(left);
        out.push(Segment { offset, length });
        offset += length + HOLE;
        left -= length;
    }
    out
}

/// Bytes from the first block's start to the last one's end.
pub fn span(segments: &[Segment]) -> u64 {
    segments.last().map_or(0, |s| s.offset + s.length)
}

/// Checks a contiguous read of the view's span: each block holds its
/// bytes of `data` (in list order) and each hole is zero. The first
/// difference, if any.
pub fn check_layout(segments: &[Segment], data: &[u8], whole: &[u8]) -> Result<(), String> {
    let mut at = 0usize;
    let mut end = 0u64;
    for (i, s) in segments.iter().enumerate() {
        let hole = whole
            .get(end as usize..s.offset as usize)
            .ok_or_else(|| format!("the span read is {} bytes, too short", whole.len()))?;
        if let Some(k) = hole.iter().position(|&b| b != 0) {
            return Err(format!(
                "byte {} (in the hole before block {i}) is {:#04x}, not zero",
                end as usize + k,
                hole[k]
            ));
        }
        let len = s.length as usize;
        let got = whole
            .get(s.offset as usize..s.offset as usize + len)
            .ok_or_else(|| format!("the span read is {} bytes, too short", whole.len()))?;
        if got != &data[at..at + len] {
            return Err(format!(
                "block {i} at offset {} does not hold the bytes written to it",
                s.offset
            ));
        }
        at += len;
        end = s.offset + s.length;
    }
    Ok(())
}

// ---------------------------------------------------------------- the model

/// The model's parameters for a transfer over a link measured as `m`:
/// its RTT, its payload rate in the transfer's direction (writes go up
/// to the server, reads come down), and sluice's DDT sizes.
pub fn model_params(
    m: &LinkMeasurement,
    direction: Direction,
    max_segments: Option<u64>,
) -> NoncontigParams {
    let mbit = match direction {
        Direction::Write => m.up_mbit_s,
        Direction::Read => m.down_mbit_s,
    };
    NoncontigParams {
        rtt: m.rtt_us * 1e-6,
        bandwidth: mbit * 1e6 / 8.0,
        direction,
        sgl_fixed_bytes: SGL_FIXED_BYTES,
        sgl_entry_bytes: SGL_ENTRY_BYTES,
        strided_bytes: STRIDED_BYTES,
        // A veth pair (or a relay's two threads) carries each direction
        // on its own; a long list is cut into requests of the server's
        // published most segments, which then overlap.
        full_duplex: true,
        max_segments,
    }
}

/// How far a measured time is from the model's, as a throughput error:
/// `model_time / measured_time - 1` (negative: slower than the model).
/// `None` when either time is not a positive number.
pub fn model_error(measured_s: f64, model_s: f64) -> Option<f64> {
    (measured_s > 0.0 && model_s > 0.0 && measured_s.is_finite() && model_s.is_finite())
        .then(|| model_s / measured_s - 1.0)
}

// ---------------------------------------------------------------- report

/// One measured curve point: a DDT, an op and a size on one volume over
/// one link, its rounds and the model's prediction.
#[derive(Debug, Clone, Serialize)]
pub struct NcPoint {
    /// "contiguous" (one segment) or "view" (blocks and holes).
    pub part: String,
    pub link: LinkKind,
    pub volume: Volume,
    /// "write" or "read".
    pub op: String,
    /// "iterative" (pipelined), "iterative-qd1" (one request at a time),
    /// "sgl" or "strided" ("contiguous" for the one-request row of the
    /// contiguous part).
    pub ddt: String,
    /// Block size x (the transfer size in the contiguous part).
    pub block_bytes: u64,
    /// Segments n.
    pub segments: u64,
    /// Payload bytes of one transfer.
    pub payload_bytes: u64,
    /// Median transfer time of each round, seconds.
    pub rounds_s: Vec<f64>,
    /// Repetitions timed in each round.
    pub reps: Vec<u32>,
    /// Median over rounds, seconds.
    pub time_s: f64,
    /// Payload MB/s (10^6 bytes) at that time.
    pub mb_s: f64,
    /// T = S/BW + N with the link's measured BW and RTT (none on
    /// loopback), seconds, and its throughput.
    pub model_time_s: Option<f64>,
    pub model_mb_s: Option<f64>,
    /// `model_time / measured_time - 1`: negative where slower than the
    /// model.
    pub model_error: Option<f64>,
    /// Reads compared with the bytes written, and contiguous reads of the
    /// span checking blocks and holes.
    pub verified_reads: u64,
    pub layout_checks: u64,
    /// Highest 1-minute load average and steal share (%) seen.
    pub load1_max: f64,
    pub steal_pct_max: f64,
}

/// The paper's claims at one view point of a rate-limited link.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub link: LinkKind,
    pub volume: Volume,
    pub op: String,
    pub block_bytes: u64,
    /// Over the paper's iterative: one request at a time.
    pub sgl_over_iterative: Option<f64>,
    pub strided_over_iterative: Option<f64>,
    /// What the model gives SGL over iterative with this link's figures.
    pub model_sgl_over_iterative: Option<f64>,
    /// Over iterative pipelined [`IN_FLIGHT`] deep.
    pub sgl_over_pipelined: Option<f64>,
    pub strided_over_pipelined: Option<f64>,
    pub sgl_model_error: Option<f64>,
    pub strided_model_error: Option<f64>,
    /// Both at least 10x iterative and within 15% of the model.
    pub met: bool,
    /// What missed and why ("" when met).
    pub why: String,
}

/// What `sluice bench noncontig` writes to `noncontig.json`.
#[derive(Debug, Serialize)]
pub struct NoncontigReport {
    /// "noncontig".
    pub preset: String,
    pub command: String,
    pub machine: Machine,
    pub loadavg_end: String,
    pub quick: bool,
    pub rounds: u32,
    /// Least time each value is timed for, per round.
    pub min_time_s: f64,
    /// Payload of each view transfer.
    pub total_bytes: u64,
    pub hole_bytes: u64,
    pub in_flight: usize,
    /// Most segments the server takes in one request (longer lists are
    /// cut into requests sent back to back; the model counts their
    /// overlap).
    pub max_segments: Option<u32>,
    /// Each link as measured when it was made.
    pub links: Vec<(LinkKind, LinkMeasurement)>,
    pub notes: Vec<String>,
    pub points: Vec<NcPoint>,
    pub checks: Vec<TargetCheck>,
    pub failures: Vec<String>,
}

// ---------------------------------------------------------------- running

/// The DDTs in the order of `round` (the first moves each round).
fn rotated(round: u32) -> [Ddt; 3] {
    let k = round as usize % 3;
    std::array::from_fn(|i| Ddt::ALL[(i + k) % 3])
}

/// A payload that differs per DDT, round and size, so a read cannot pass
/// with another transfer's bytes.
fn payload(bytes: u64, seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..bytes).map(|_| rng.u8(..)).collect()
}

/// Writes then reads `segments` with each DDT at `place`, checking every
/// read; then checks the span's layout with one contiguous read.
#[allow(clippy::too_many_arguments)] // one point's coordinates
fn point(
    bed: &mut Bed,
    part: &'static str,
    volume: Volume,
    place: Place,
    segments: &[Segment],
    round: u32,
    min: Duration,
    points: &mut Points,
) -> Result<()> {
    let total: u64 = segments.iter().map(|s| s.length).sum();
    let block = segments.first().map_or(0, |s| s.length);
    let singles: Vec<[Segment; 1]> = segments.iter().map(|s| [*s]).collect();
    let options = DataOptions::default();
    let mut out = Vec::with_capacity(total as usize);
    let mut last = Vec::new();
    for ddt in rotated(round) {
        let data = payload(
            total,
            block ^ (u64::from(round) << 32) ^ ((client_index(ddt) as u64) << 48),
        );
        let pieces = slices(segments, &data);
        // One segment: the contiguous part's baseline is one contiguous
        // request, named so.
        let name = match (part, ddt) {
            ("contiguous", Ddt::Iterative) => "contiguous",
            _ => ddt.name(),
        };
        let iterative = ddt == Ddt::Iterative;
        // The view's iterative transfer also runs one request at a time:
        // the paper's baseline, a round trip per block, which the model's
        // n x RTT describes; pipelined is what an NBD client sends.
        let variants: &[(&str, bool)] = if iterative && part == "view" {
            &[(name, false), (ITERATIVE_QD1, true)]
        } else {
            &[(name, false)]
        };
        let c = &mut bed.clients[client_index(ddt)];
        for (&(name, one_at_a_time), op) in variants
            .iter()
            .flat_map(|v| [(v, Op::Write), (v, Op::Read)])
        {
            let k = if one_at_a_time {
                segments.len().min(QD1_MAX_BLOCKS)
            } else {
                segments.len()
            };
            let bytes: u64 = segments[..k].iter().map(|s| s.length).sum();
            let data = &data[..bytes as usize];
            let reqs = requests(
                place,
                op,
                iterative,
                &segments[..k],
                &singles[..k],
                &pieces[..k],
                data,
                &options,
            );
            let steal0 = steal_now();
            let mut reads = 0u64;
            let (t, reps) = timed(min, || {
                transfer(c, &reqs, one_at_a_time, &mut out)?;
                if op == Op::Read {
                    if out != data {
                        bail!(
                            "{} {name} read of {k} blocks of {block} bytes on {} did not return the bytes written",
                            bed.kind.name(),
                            volume.name()
                        );
                    }
                    reads += 1;
                }
                Ok(())
            })
            .with_context(|| {
                format!(
                    "{} {name} {} of {k} blocks of {block} bytes on {}",
                    bed.kind.name(),
                    op.name(),
                    volume.name()
                )
            })?;
            let key = Key {
                part,
                link: bed.kind,
                volume,
                op,
                ddt: name,
                block,
            };
            points.add(&key, k as u64, bytes, t, reps, reads, 0, steal0);
        }
        last = data;
    }
    // Every block holds the last DDT's bytes and every hole is zero.
    let whole = [Segment {
        offset: 0,
        length: span(segments),
    }];
    let reqs = requests(place, Op::Read, false, &whole, &[], &[], &[], &options);
    transfer(&mut bed.clients[0], &reqs, false, &mut out)?;
    check_layout(segments, &last, &out).map_err(|e| {
        anyhow::anyhow!(
            "{} {} after {part} writes: {e}",
            bed.kind.name(),
            volume.name()
        )
    })?;
    if let Some(p) = points.0.iter_mut().rev().find(|p| {
        p.part == part && p.link == bed.kind && p.volume == volume && p.block_bytes == block
    }) {
        p.layout_checks += 1;
    }
    Ok(())
}

/// Zeroes `bytes` of an export (so holes start zero).
fn zero_export(c: &mut ObjClient, export: u64, bytes: u64) -> Result<()> {
    let zeros = vec![0u8; bytes as usize];
    c.extent_write(
        export,
        &[Segment {
            offset: 0,
            length: bytes,
        }],
        &zeros,
        Durability::Buffered,
    )
    .context("cannot zero the export")
}

/// One round over one bed: the contiguous part on an object, then the
/// view on each volume.
fn round(
    bed: &mut Bed,
    plan: &Plan,
    round: u32,
    min: Duration,
    points: &mut Points,
    failures: &mut Vec<String>,
) {
    let mut note = |what: String, e: anyhow::Error| {
        eprintln!("{what}: {e:#}");
        failures.push(format!("round {round} {what}: {e:#}"));
    };
    for &size in &plan.sizes {
        let segs = [Segment {
            offset: 0,
            length: size,
        }];
        let what = format!("{} contiguous {size}", bed.kind.name());
        let r = (|| -> Result<()> {
            let object = bed.clients[0].create("noncontig", 1, Durability::Buffered)?[0];
            point(
                bed,
                "contiguous",
                Volume::Object,
                Place::Object(object),
                &segs,
                round,
                min,
                points,
            )?;
            bed.clients[0].remove(object, Durability::Buffered)?;
            Ok(())
        })();
        if let Err(e) = r {
            note(what, e);
        }
    }
    for &volume in &plan.volumes {
        for &block in &plan.blocks {
            let segs = view_segments(plan.total, block);
            let what = format!("{} view {} {block}", bed.kind.name(), volume.name());
            let r = (|| -> Result<()> {
                let (place, object) = match volume {
                    Volume::Object => {
                        let id = bed.clients[0].create("noncontig", 1, Durability::Buffered)?[0];
                        (Place::Object(id), Some(id))
                    }
                    Volume::Mem | Volume::File => {
                        let export = if volume == Volume::Mem {
                            bed.mem
                        } else {
                            bed.file
                        };
                        zero_export(&mut bed.clients[0], export, span(&segs))?;
                        (Place::Export(export), None)
                    }
                };
                point(bed, "view", volume, place, &segs, round, min, points)?;
                if let Some(id) = object {
                    bed.clients[0].remove(id, Durability::Buffered)?;
                }
                Ok(())
            })();
            if let Err(e) = r {
                note(what, e);
            }
        }
    }
}

/// The links to run over: the ones asked for, or by default unshaped and
/// shaped; veth links are left out, with a note, where they cannot be
/// made (loopback instead when none is left and none was asked for).
fn choose_links(asked: Option<&[LinkKind]>, notes: &mut Vec<String>) -> Result<Vec<LinkKind>> {
    let wanted = asked.map_or_else(
        || vec![LinkKind::Unshaped, LinkKind::Shaped, LinkKind::Delayed],
        <[LinkKind]>::to_vec,
    );
    if wanted.iter().all(|k| *k == LinkKind::Loopback) {
        return Ok(wanted);
    }
    let Some(why) = crate::link::unavailable() else {
        return Ok(wanted);
    };
    let kept: Vec<LinkKind> = wanted
        .into_iter()
        .filter(|k| *k == LinkKind::Loopback)
        .collect();
    let msg = format!("unshaped, shaped and delayed links skipped: {why}");
    eprintln!("{msg}");
    notes.push(msg);
    match (kept.is_empty(), asked.is_some()) {
        (false, _) => Ok(kept),
        (true, false) => {
            notes.push("measured on loopback instead, without a model (no link to measure)".into());
            Ok(vec![LinkKind::Loopback])
        }
        (true, true) => bail!("sluice bench noncontig skipped: {why}"),
    }
}

/// `sluice bench noncontig`: writes `noncontig.json`,
/// `noncontig-table.md` and the plot `bench-noncontig`.
pub fn noncontig(opts: &PresetOptions, args: &NoncontigArgs) -> Result<NoncontigReport> {
    let plan = args.plan(opts.quick).map_err(anyhow::Error::msg)?;
    let min = opts
        .duration
        .unwrap_or(Duration::from_millis(if opts.quick { 15 } else { 100 }));
    let rate = opts.link_rate.unwrap_or(PAPER_RATE);
    let delay = args.link_delay.unwrap_or(DEFAULT_DELAY);
    let mut notes = vec![format!(
        "embedded sluice server (objects, a mem and a file export); the view: blocks each followed by a {HOLE}-byte hole, {} payload per transfer; iterative sent one request at a time ({ITERATIVE_QD1}, the paper's, timed on at most {QD1_MAX_BLOCKS} blocks) and {IN_FLIGHT} in flight; model T = S/BW + N with the link's measured RTT and rate in the transfer's direction, SGL {SGL_FIXED_BYTES} + {SGL_ENTRY_BYTES} n bytes, strided {STRIDED_BYTES} bytes",
        sluice_types::format_size(plan.total)
    )];
    let kinds = choose_links(args.links.as_deref(), &mut notes)?;
    let dir = crate::setup::scratch_dir("noncontig")?;
    let biggest_view = plan
        .blocks
        .iter()
        .map(|&b| span(&view_segments(plan.total, b)))
        .max()
        .unwrap_or(0);
    let export_bytes = biggest_view.max(1 << 20).next_multiple_of(1 << 20);
    let t0 = Instant::now();
    let mut points = Points(Vec::new());
    let mut failures = Vec::new();
    let mut links = Vec::new();
    let mut max_segments = None;
    for kind in kinds {
        eprintln!("# {} link", kind.name());
        let mut bed = match Bed::start(kind, rate, delay, dir.path(), export_bytes) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("{} link: {e:#}", kind.name());
                failures.push(format!("{} link: {e:#}", kind.name()));
                continue;
            }
        };
        if let Some(m) = bed.measured {
            links.push((kind, m));
        }
        max_segments = Some(bed.max_segments);
        for r in 0..opts.rounds {
            round(&mut bed, &plan, r, min, &mut points, &mut failures);
        }
    }
    let mut points = points.0;
    finish_points(&mut points, &links, max_segments.map(u64::from));
    let checks = check_targets(&points);
    let report = NoncontigReport {
        preset: "noncontig".into(),
        command: crate::setup::command_line(),
        machine: Machine::probe(),
        loadavg_end: Machine::probe().loadavg,
        quick: opts.quick,
        rounds: opts.rounds,
        min_time_s: min.as_secs_f64(),
        total_bytes: plan.total,
        hole_bytes: HOLE,
        in_flight: IN_FLIGHT,
        max_segments,
        links,
        notes,
        points,
        checks,
        failures,
    };
    print_report(opts, &report, t0.elapsed())?;
    Ok(report)
}

// ---------------------------------------------------------------- output

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use sluice_model::noncontig::transfer_time;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        args: NoncontigArgs,
    }

    fn parse(args: &[&str]) -> Result<NoncontigArgs, clap::Error> {
        let mut v = vec!["x"];
        v.extend_from_slice(args);
        Top::try_parse_from(v).map(|t| t.args)
    }

    #[test]
    fn view_blocks_are_separated_by_holes_and_carry_the_total() {
        let s = view_segments(32, 8);
        let offsets: Vec<u64> = s.iter().map(|s| s.offset).collect();
        assert_eq!(offsets, [0, 10, 20, 30]);
        assert!(s.iter().all(|s| s.length == 8));
        assert_eq!(span(&s), 38);
        // A block that does not divide the total: a shorter last block.
        let s = view_segments(20, 8);
        let lengths: Vec<u64> = s.iter().map(|s| s.length).collect();
        assert_eq!(lengths, [8, 8, 4]);
        assert_eq!(s[2].offset, 20);
        // One block: the whole total, no hole before it.
        assert_eq!(
            view_segments(4096, 4096),
            [Segment {
                offset: 0,
                length: 4096
            }]
        );
        assert!(view_segments(0, 8).is_empty());
        for (total, block) in [(1 << 20, 8), (1 << 20, 4096), (1000, 7)] {
            let s = view_segments(total, block);
            assert_eq!(s.iter().map(|s| s.length).sum::<u64>(), total);
            assert!(s
                .windows(2)
                .all(|w| w[1].offset == w[0].offset + w[0].length + HOLE));
        }
    }

    #[test]
    fn layout_checks_find_wrong_blocks_and_dirty_holes() {
        let segs = view_segments(12, 4);
        let data: Vec<u8> = (1..=12).collect();
        let mut whole = vec![0u8; span(&segs) as usize];
        for (s, d) in segs.iter().zip(data.chunks(4)) {
            whole[s.offset as usize..][..4].copy_from_slice(d);
        }
        assert_eq!(check_layout(&segs, &data, &whole), Ok(()));
        let mut dirty = whole.clone();
        dirty[5] = 9;
        let e = check_layout(&segs, &data, &dirty).unwrap_err();
        assert!(e.contains("hole before block 1"), "{e}");
        let mut wrong = whole.clone();
        wrong[13] ^= 1;
        let e = check_layout(&segs, &data, &wrong).unwrap_err();
        assert!(e.contains("block 2"), "{e}");
        assert!(check_layout(&segs, &data, &whole[..10]).is_err());
    }

    fn measured() -> LinkMeasurement {
        LinkMeasurement {
            rate_bits: Some(800_000_000),
            delay_us: None,
            rtt_us: 100.0,
            down_mbit_s: 760.0,
            up_mbit_s: 780.0,
        }
    }

    #[test]
    fn the_model_uses_the_links_rate_in_the_transfers_direction() {
        let m = measured();
        let w = model_params(&m, Direction::Write, None);
        assert_eq!(w.bandwidth, 780e6 / 8.0);
        assert!((w.rtt - 100e-6).abs() < 1e-12);
        let r = model_params(&m, Direction::Read, None);
        assert_eq!(r.bandwidth, 760e6 / 8.0);
        assert_eq!(r.direction, Direction::Read);
        assert_eq!(w.sgl_entry_bytes, 16.0);
    }

    #[test]
    fn model_error_is_the_throughput_shortfall() {
        assert_eq!(model_error(2.0, 1.0), Some(-0.5));
        assert_eq!(model_error(1.0, 1.5), Some(0.5));
        assert_eq!(model_error(1.0, 1.0), Some(0.0));
        assert_eq!(model_error(0.0, 1.0), None);
        assert_eq!(model_error(1.0, f64::NAN), None);
    }

    fn nc(ddt: &str, block: u64, segments: u64, time_s: f64) -> NcPoint {
        NcPoint {
            part: "view".into(),
            link: LinkKind::Shaped,
            volume: Volume::Object,
            op: "write".into(),
            ddt: ddt.into(),
            block_bytes: block,
            segments,
            payload_bytes: block * segments,
            rounds_s: vec![time_s * 1.1, time_s, time_s * 0.9],
            reps: vec![1, 1, 1],
            time_s: 0.0,
            mb_s: 0.0,
            model_time_s: None,
            model_mb_s: None,
            model_error: None,
            verified_reads: 0,
            layout_checks: 0,
            load1_max: 0.0,
            steal_pct_max: 0.0,
        }
    }

    #[test]
    fn points_get_the_models_prediction_and_the_targets_are_judged() {
        let links = [(LinkKind::Shaped, measured())];
        let params = model_params(&measured(), Direction::Write, None);
        let t = |d| transfer_time(&params, d, 1024, 8).unwrap().time;
        let mut points = vec![
            // Iterative one at a time far slower, pipelined 5x faster
            // than that; SGL on the model, strided 30% slow.
            nc(ITERATIVE_QD1, 8, 1024, t(Ddt::Sgl) * 20.0),
            nc("sgl", 8, 1024, t(Ddt::Sgl)),
            nc("strided", 8, 1024, t(Ddt::Strided) / 0.7),
            nc("iterative", 8, 1024, t(Ddt::Sgl) * 4.0),
            // Another block size: iterative only 2x slower.
            nc(ITERATIVE_QD1, 4096, 2, 2e-3),
            nc("sgl", 4096, 2, 1e-3),
            nc("strided", 4096, 2, 1e-3),
        ];
        finish_points(&mut points, &links, Some(4096));
        assert!((points[1].time_s - t(Ddt::Sgl)).abs() < 1e-12);
        assert!(points[1].model_error.unwrap().abs() < 1e-9);
        assert!((points[2].model_error.unwrap() + 0.3).abs() < 1e-9);
        assert_eq!(points[0].model_time_s, Some(t(Ddt::Iterative)));
        assert_eq!(points[3].model_time_s, None, "no model for pipelining");
        let mb = points[1].payload_bytes as f64 / points[1].time_s / 1e6;
        assert!((points[1].mb_s - mb).abs() < 1e-9);
        let checks = check_targets(&points);
        assert_eq!(checks.len(), 2);
        let c8 = &checks[0];
        assert_eq!(c8.block_bytes, 8);
        assert!(c8.sgl_over_iterative.unwrap() >= 19.9);
        assert!((c8.sgl_over_pipelined.unwrap() - 4.0).abs() < 1e-9);
        assert!(c8.model_sgl_over_iterative.unwrap() > 10.0);
        assert!(!c8.met);
        assert!(c8.why.contains("strided 30% below model"), "{}", c8.why);
        assert!(!c8.why.contains("sgl"), "{}", c8.why);
        let c4k = &checks[1];
        assert!(c4k.sgl_over_pipelined.is_none());
        // 4 KiB blocks: the model itself gives SGL little over iterative
        // (the link's round trip is short), and the check says so.
        let m = c4k.model_sgl_over_iterative.unwrap();
        assert!(m < 10.0, "{m}");
        assert!(
            c4k.why
                .contains(&format!("sgl 2.0x (the model gives SGL only {m:.1}x")),
            "{}",
            c4k.why
        );
        // Without a measured link there is no model and no target.
        let mut loopback = vec![nc("sgl", 8, 1024, 1e-3)];
        loopback[0].link = LinkKind::Loopback;
        finish_points(&mut loopback, &links, Some(4096));
        assert_eq!(loopback[0].model_time_s, None);
        assert!(check_targets(&loopback).is_empty());
    }

    #[test]
    fn arguments_parse_and_bad_sizes_are_refused() {
        let a = parse(&[]).unwrap();
        let p = a.plan(true).unwrap();
        assert_eq!(p.total, 256 << 10);
        assert_eq!(p.blocks, [8, 64, 512, 4096, 65536]);
        assert_eq!(p.volumes, [Volume::Object, Volume::Mem, Volume::File]);
        let p = a.plan(false).unwrap();
        assert_eq!(p.total, 1 << 20);
        assert_eq!(p.blocks.first(), Some(&8));
        assert_eq!(p.blocks.last(), Some(&(64 << 10)));
        assert_eq!(p.blocks.len(), 14);
        let a = parse(&[
            "--total",
            "64K",
            "--blocks",
            "8,1K",
            "--sizes",
            "4K",
            "--links",
            "loopback,shaped",
            "--volumes",
            "mem",
        ])
        .unwrap();
        assert_eq!(a.links, Some(vec![LinkKind::Loopback, LinkKind::Shaped]));
        let p = a.plan(false).unwrap();
        assert_eq!(
            (p.total, p.blocks, p.sizes),
            (64 << 10, vec![8, 1024], vec![4096])
        );
        assert_eq!(p.volumes, [Volume::Mem]);
        for bad in [
            &["--links", "wifi"][..],
            &["--volumes", "tape"],
            &["--total", "lots"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        for (bad, flag) in [
            (&["--total", "0"][..], "--total"),
            (&["--total", "1G"], "--total"),
            (&["--blocks", "0"], "--blocks"),
            (&["--total", "4K", "--blocks", "8K"], "--blocks"),
            (&["--sizes", "0"], "--sizes"),
        ] {
            let e = parse(bad).unwrap().plan(true).unwrap_err();
            assert!(e.starts_with(flag), "{bad:?}: {e}");
        }
    }

    #[test]
    fn each_round_starts_with_the_next_ddt() {
        assert_eq!(rotated(0), Ddt::ALL);
        assert_eq!(rotated(1), [Ddt::Sgl, Ddt::Strided, Ddt::Iterative]);
        assert_eq!(rotated(3), Ddt::ALL);
    }
}
