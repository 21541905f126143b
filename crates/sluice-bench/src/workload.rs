//! What a run does: access pattern, read/write mix, block size, queue
//! depth, workers, and when to stop; and the generator of each worker's
//! operations.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sluice_types::{format_size, splitmix64};

/// Sequential or random offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Each worker streams through its own slice of the region and wraps.
    Seq,
    /// Uniformly random block-aligned offsets over the whole region.
    Rand,
}

/// Reads, writes, or a mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Reads only.
    Read,
    /// Writes only.
    Write,
    /// Reads and writes, `read_pct` percent reads.
    Mixed,
}

/// One operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// A read.
    Read,
    /// A write.
    Write,
}

/// Which NBD handshake the bench's client negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Handshake {
    /// Extended headers when the server offers them, else structured replies.
    #[default]
    Extended,
    /// Structured replies, no extended headers (what libnbd 1.14 and fio use).
    Structured,
    /// Simple replies only.
    Simple,
}

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// After this long.
    Time(#[serde(serialize_with = "ser_secs")] Duration),
    /// After this many bytes moved, over all workers.
    Bytes(u64),
    /// After this many operations, over all workers.
    Ops(u64),
}

fn ser_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A complete workload description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// Short name for tables; empty: generated ("randread-4k-qd16").
    pub name: String,
    /// Offsets.
    pub pattern: Pattern,
    /// Reads/writes.
    pub rw: Rw,
    /// Percent of reads when `rw` is mixed.
    pub read_pct: u8,
    /// Bytes per request.
    pub block_size: u32,
    /// Requests each worker keeps in flight.
    pub queue_depth: u32,
    /// Worker threads.
    pub workers: u32,
    /// Workers share one connection instead of one each.
    pub shared_connection: bool,
    /// When to stop.
    pub limit: Limit,
    /// Start of the region used (bytes into the export).
    pub region_offset: u64,
    /// Length of the region (0: to the end of the export).
    pub region_len: u64,
    /// Check every read against the pattern writes lay down.
    pub verify: bool,
    /// Seed for offsets, the mix and the data pattern.
    pub seed: u64,
    /// Handshake of the bench's own connections.
    pub handshake: Handshake,
}

impl Workload {
    /// A workload with the usual defaults (one worker, 2 s, whole export).
    pub fn new(pattern: Pattern, rw: Rw, block_size: u32, queue_depth: u32) -> Self {
        Self {
            name: String::new(),
            pattern,
            rw,
            read_pct: 70,
            block_size,
            queue_depth,
            workers: 1,
            shared_connection: false,
            limit: Limit::Time(Duration::from_secs(2)),
            region_offset: 0,
            region_len: 0,
            verify: false,
            seed: 0x5eed_b10c,
            handshake: Handshake::Extended,
        }
    }

    /// `name`, or the generated one when empty.
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            self.default_name()
        } else {
            self.name.clone()
        }
    }

    /// "randread-4k-qd16", "seqmixed70-1m-qd8-w4".
    pub fn default_name(&self) -> String {
        let p = match self.pattern {
            Pattern::Seq => "seq",
            Pattern::Rand => "rand",
        };
        let rw = match self.rw {
            Rw::Read => "read".to_owned(),
            Rw::Write => "write".to_owned(),
            Rw::Mixed => format!("mixed{}", self.read_pct),
        };
        let mut s = format!(
            "{p}{rw}-{}-qd{}",
            format_size(u64::from(self.block_size)),
            self.queue_depth
        );
        if self.workers > 1 {
            s.push_str(&format!("-w{}", self.workers));
        }
        s
    }

    /// Percent of operations that are reads.
    pub fn read_percent(&self) -> u8 {
        match self.rw {
            Rw::Read => 100,
            Rw::Write => 0,
            Rw::Mixed => self.read_pct.min(100),
        }
    }

    /// Whether any operation reads.
    pub fn reads(&self) -> bool {
        self.read_percent() > 0
    }

    /// Whether any operation writes.
    pub fn writes(&self) -> bool {
        self.read_percent() < 100
    }

    /// Checks the workload against an export of `export_size` bytes and
    /// returns the region `(offset, len)` it will use.
    pub fn region(&self, export_size: u64) -> Result<(u64, u64), String> {
        let bs = u64::from(self.block_size);
        if bs == 0 {
            return Err("block size must be at least 1 byte".into());
        }
        if self.queue_depth == 0 || self.workers == 0 {
            return Err("queue depth and workers must be at least 1".into());
        }
        if self.region_offset >= export_size {
            return Err(format!(
                "region offset {} is beyond the export's {} bytes",
                self.region_offset, export_size
            ));
        }
        let avail = export_size - self.region_offset;
        let len = if self.region_len == 0 {
            avail
        } else if self.region_len > avail {
            return Err(format!(
                "region of {} bytes at {} does not fit the export's {} bytes",
                self.region_len, self.region_offset, export_size
            ));
        } else {
            self.region_len
        };
        let len = len - len % bs;
        if len == 0 {
            return Err(format!(
                "block size {bs} is larger than the {avail}-byte region"
            ));
        }
        Ok((self.region_offset, len))
    }
}

/// One worker's stream of operations.
#[derive(Debug, Clone)]
pub struct OpGen {
    pattern: Pattern,
    read_pct: u8,
    bs: u64,
    /// This worker's slice (sequential) or the whole region (random).
    start: u64,
    blocks: u64,
    next_block: u64,
    rng: fastrand::Rng,
}

impl OpGen {
    /// The generator for worker `index` of `workload`, over the region
    /// `(offset, len)` returned by [`Workload::region`]. Sequential
    /// workers split the region into equal block-aligned slices (the whole
    /// region if it has fewer blocks than workers); random workers share it.
    pub fn new(workload: &Workload, region: (u64, u64), index: u32) -> Self {
        let bs = u64::from(workload.block_size.max(1));
        let total_blocks = (region.1 / bs).max(1);
        let workers = u64::from(workload.workers.max(1));
        let (start, blocks) = match workload.pattern {
            Pattern::Seq if total_blocks >= workers => {
                let per = total_blocks / workers;
                (region.0 + u64::from(index) * per * bs, per)
            }
            _ => (region.0, total_blocks),
        };
        Self {
            pattern: workload.pattern,
            read_pct: workload.read_percent(),
            bs,
            start,
            blocks,
            next_block: 0,
            rng: fastrand::Rng::with_seed(splitmix64(
                workload.seed ^ u64::from(index).wrapping_mul(0x1000_0001),
            )),
        }
    }

    /// The next operation: what and where.
    pub fn next_op(&mut self) -> (OpKind, u64) {
        let kind = match self.read_pct {
            100 => OpKind::Read,
            0 => OpKind::Write,
            pct => {
                if self.rng.u8(..100) < pct {
                    OpKind::Read
                } else {
                    OpKind::Write
                }
            }
        };
        let block = match self.pattern {
            Pattern::Seq => {
                let b = self.next_block;
                self.next_block = if b + 1 >= self.blocks { 0 } else { b + 1 };
                b
            }
            Pattern::Rand => self.rng.u64(..self.blocks),
        };
        (kind, self.start + block * self.bs)
    }
}

/// Parses a size for a command-line flag (clap wants a `String` error).
pub fn parse_size(s: &str) -> Result<u64, String> {
    sluice_types::parse_size(s).map_err(|e| e.to_string())
}

/// Parses a duration for a command-line flag.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    sluice_types::parse_duration(s).map_err(|e| e.to_string())
}

/// A size given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s).map(Self)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

/// The standard comparison cases: sequential and random reads and writes
/// at the block sizes and queue depths the peer comparison uses.
pub fn standard_cases(duration: Duration) -> Vec<Workload> {
    let mk = |p, rw, bs: u32, qd, workers| {
        let mut w = Workload::new(p, rw, bs, qd);
        w.workers = workers;
        w.limit = Limit::Time(duration);
        w
    };
    vec![
        mk(Pattern::Rand, Rw::Read, 4096, 1, 1),
        mk(Pattern::Rand, Rw::Read, 4096, 16, 1),
        mk(Pattern::Rand, Rw::Write, 4096, 16, 1),
        mk(Pattern::Rand, Rw::Read, 4096, 16, 2),
        mk(Pattern::Seq, Rw::Read, 1 << 20, 8, 1),
        mk(Pattern::Seq, Rw::Write, 1 << 20, 8, 1),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wl(pattern: Pattern, rw: Rw, bs: u32, workers: u32) -> Workload {
        let mut w = Workload::new(pattern, rw, bs, 4);
        w.workers = workers;
        w
    }

    #[test]
    fn random_offsets_stay_in_range_and_aligned() {
        for bs in [512u32, 4096, 65536, 1 << 20] {
            let w = wl(Pattern::Rand, Rw::Read, bs, 3);
            // An unaligned region start and a length that is not a
            // multiple of the block size.
            let region = w.region(64 << 20).unwrap();
            let mut w2 = w.clone();
            w2.region_offset = 3 * 4096;
            w2.region_len = (32 << 20) + 1000;
            let region2 = w2.region(64 << 20).unwrap();
            for (work, (off, len)) in [(&w, region), (&w2, region2)] {
                assert_eq!(len % u64::from(bs), 0);
                for i in 0..3 {
                    let mut g = OpGen::new(work, (off, len), i);
                    for _ in 0..20_000 {
                        let (_, o) = g.next_op();
                        assert!(o >= off && o + u64::from(bs) <= off + len, "{o} outside");
                        assert_eq!((o - off) % u64::from(bs), 0, "{o} unaligned");
                    }
                }
            }
        }
    }

    #[test]
    fn random_offsets_cover_the_region() {
        let w = wl(Pattern::Rand, Rw::Read, 4096, 1);
        let region = (0, 64 * 4096);
        let mut g = OpGen::new(&w, region, 0);
        let mut seen = [false; 64];
        for _ in 0..5000 {
            seen[(g.next_op().1 / 4096) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn sequential_streams_its_slice_and_wraps() {
        let w = wl(Pattern::Seq, Rw::Write, 4096, 4);
        let region = w.region(1 << 20).unwrap(); // 256 blocks, 64 per worker
        for i in 0..4u32 {
            let mut g = OpGen::new(&w, region, i);
            let base = u64::from(i) * 64 * 4096;
            for round in 0..3 {
                for b in 0..64u64 {
                    let (kind, off) = g.next_op();
                    assert_eq!(kind, OpKind::Write);
                    assert_eq!(off, base + b * 4096, "worker {i} round {round} block {b}");
                }
            }
        }
    }

    #[test]
    fn sequential_with_more_workers_than_blocks_shares_the_region() {
        let w = wl(Pattern::Seq, Rw::Read, 4096, 8);
        let region = (4096, 3 * 4096);
        let mut g = OpGen::new(&w, region, 7);
        let offs: Vec<u64> = (0..4).map(|_| g.next_op().1).collect();
        assert_eq!(offs, [4096, 8192, 12288, 4096]);
    }

    #[test]
    fn mixed_ratio_holds() {
        for pct in [0u8, 10, 50, 70, 95, 100] {
            let mut w = wl(Pattern::Rand, Rw::Mixed, 4096, 1);
            w.read_pct = pct;
            let mut g = OpGen::new(&w, (0, 1 << 30), 0);
            let n = 100_000;
            let reads = (0..n).filter(|_| g.next_op().0 == OpKind::Read).count();
            let frac = reads as f64 / n as f64;
            assert!(
                (frac - f64::from(pct) / 100.0).abs() < 0.01,
                "{pct}% asked, {frac} seen"
            );
        }
        assert_eq!(wl(Pattern::Rand, Rw::Read, 512, 1).read_percent(), 100);
        assert_eq!(wl(Pattern::Rand, Rw::Write, 512, 1).read_percent(), 0);
    }

    #[test]
    fn regions_are_checked() {
        let w = wl(Pattern::Seq, Rw::Read, 1 << 20, 1);
        assert!(w.region(4096).is_err(), "block larger than export");
        let mut w2 = w.clone();
        w2.region_offset = 8 << 20;
        assert!(w2.region(4 << 20).is_err(), "offset beyond export");
        let mut w3 = w.clone();
        w3.block_size = 0;
        assert!(w3.region(4 << 20).is_err());
        assert_eq!(w.region((4 << 20) + 5).unwrap(), (0, 4 << 20));
    }

    #[test]
    fn workload_names() {
        let mut w = Workload::new(Pattern::Rand, Rw::Mixed, 4096, 16);
        w.read_pct = 70;
        w.workers = 4;
        assert_eq!(w.default_name(), "randmixed70-4k-qd16-w4");
    }
}
