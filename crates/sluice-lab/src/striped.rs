//! `sluice bench striped`: aggregate throughput of one striped object
//! against the number of object servers it spreads over.
//!
//! Each object server is a `sluice serve --objects` process in a network
//! namespace of its own, behind a veth link shaped with `tc tbf` (100
//! Mbit/s by default, `--link-rate`); the metadata service is a
//! [`MemoryMetaStore`] inside the bench, so only the servers' links carry
//! data. For each N (1..4 by default) one object striped over all N
//! servers with a 64 KiB stripe unit is written, then read, with 1 MiB
//! sequential requests by a few threads (each its own [`StripedClient`]
//! and its own contiguous share of the object). The result is MB/s
//! (10^6 bytes) of each pass, its ratio to one server, and the limit: N
//! times the link rate measured in the pass's direction (writes go up to
//! the servers, reads come down). Every read checks the offset written
//! into each request's first bytes, so a wrong layout cannot pass as
//! speed.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use sluice_bench::machine::Machine;
use sluice_bench::peers::{self, PeerKind, PeerServer};
use sluice_bench::stats::median;
use sluice_bench::workload::Size;
use sluice_client::obj::ObjOptions;
use sluice_client::striped::{Pattern, Shape, StripedClient, StripedWrite};
use sluice_meta::{MemoryMetaStore, MetaStore};
use sluice_model::plot::{Axes, Figure, XAxis};
use sluice_model::text::{compact, Table};

use crate::epilogue::Epilogue;
use crate::link::{Link, LinkMeasurement, LinkRate};
use crate::setup::PresetOptions;

/// Bytes of each stripe unit.
pub const STRIPE_UNIT: u64 = 64 << 10;
/// Bytes of each request.
pub const REQUEST: u64 = 1 << 20;
/// The default link when `--link-rate` is not given.
const DEFAULT_RATE: LinkRate = LinkRate(100_000_000);
/// Where each server listens inside its own namespace: NBD (a tiny
/// export nobody uses, so the server does not serve a default file) and
/// the object protocol.
const NBD_PORT: u16 = 10809;
const OBJECT_PORT: u16 = 10810;
/// Longest wait for any one reply: a loaded 100 Mbit/s link moves 1 MiB
/// in well under a second, so this only ends a hang.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Options of `sluice bench striped` beyond the presets' common ones.
#[derive(Debug, Clone, clap::Args)]
pub struct StripedArgs {
    /// Server counts to measure, comma-separated, each 1-4 (default
    /// 1,2,3,4).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=4))]
    pub servers: Option<Vec<u32>>,
    /// Threads issuing the 1 MiB requests, each over its own share of
    /// the object.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// Bytes of the striped object, whole MiB, at least 1 MiB per thread
    /// (default 128M; 32M with --quick).
    #[arg(long)]
    pub object_size: Option<Size>,
}

/// One pass (all writes or all reads) at one server count.
#[derive(Debug, Clone, Serialize)]
pub struct StripedRow {
    /// Object servers the object is striped over.
    pub servers: u32,
    /// "write" or "read".
    pub op: String,
    /// Median over the rounds, MB/s (10^6 bytes per second).
    pub mb_s: f64,
    /// Each round's MB/s.
    pub rounds_mb_s: Vec<f64>,
    /// Against one server, the same op (`None` when N = 1 was not run).
    pub ratio_to_one: Option<f64>,
    /// N times the measured rate of one link in this op's direction, MB/s.
    pub limit_mb_s: f64,
    /// `mb_s / limit_mb_s`.
    pub of_limit: f64,
}

/// What `sluice bench striped` writes to `striped.json`.
#[derive(Debug, Serialize)]
pub struct StripedReport {
    /// "striped".
    pub preset: String,
    /// The command line.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// Load average at the end.
    pub loadavg_end: String,
    /// Quick sizes.
    pub quick: bool,
    /// Bytes of the striped object.
    pub object_bytes: u64,
    /// Bytes per stripe unit.
    pub stripe_unit: u64,
    /// Bytes per request.
    pub request_bytes: u64,
    /// Client threads.
    pub threads: u32,
    /// Rounds each pass's median is taken over.
    pub rounds: u32,
    /// Every link, as measured when it was made (server i behind link i).
    pub links: Vec<LinkMeasurement>,
    /// Caveats and server counts that failed.
    pub notes: Vec<String>,
    /// Measured rows, by server count, writes before reads.
    pub rows: Vec<StripedRow>,
}

/// Object servers (`sluice serve --objects` processes), each in a
/// network namespace of its own behind its own link, made as they are
/// first needed and stopped on drop (fields drop in order: the servers
/// before the namespaces they run in, and both before their folder).
/// The striped and s3asim presets share it.
pub(crate) struct Bed {
    servers: Vec<PeerServer>,
    links: Vec<Link>,
    measured: Vec<LinkMeasurement>,
    bin: PathBuf,
    rate: LinkRate,
    dir: tempfile::TempDir,
}

impl Bed {
    /// No servers yet; each will run `bin` behind a link at `rate`, its
    /// store in a temporary folder named after `preset`.
    pub(crate) fn new(bin: PathBuf, rate: LinkRate, preset: &str) -> Result<Self> {
        Ok(Self {
            bin,
            rate,
            links: Vec::new(),
            measured: Vec::new(),
            servers: Vec::new(),
            dir: crate::setup::scratch_dir(preset)?,
        })
    }

    /// The rate of every link.
    pub(crate) fn rate(&self) -> LinkRate {
        self.rate
    }

    /// What each link measured when it was made (server i behind link i).
    pub(crate) fn measured(&self) -> &[LinkMeasurement] {
        &self.measured
    }

    /// The URIs of servers `0..n`, starting those not yet running.
    pub(crate) fn uris(&mut self, n: usize) -> Result<Vec<String>> {
        while self.servers.len() < n {
            let i = self.servers.len();
            let link = Link::create(Some(self.rate)).context(
                "object servers behind links need root, network namespaces, veth and tc tbf (iproute2)",
            )?;
            let m = link.measure()?;
            eprintln!(
                "server link {i}: {} ({})",
                m.line(),
                link.namespace().name()
            );
            let ip = IpAddr::V4(link.server_addr());
            let store = self.dir.path().join(format!("objects-{i}"));
            let argv: Vec<String> = [
                self.bin.display().to_string(),
                "serve".into(),
                "--listen".into(),
                SocketAddr::new(ip, NBD_PORT).to_string(),
                "--export".into(),
                "unused=mem:1M".into(),
                "--objects".into(),
                store.display().to_string(),
                "--object-listen".into(),
                SocketAddr::new(ip, OBJECT_PORT).to_string(),
            ]
            .to_vec();
            let server = PeerServer::launch(
                &format!("object server {i}"),
                PeerKind::Sluice,
                &argv,
                (ip, OBJECT_PORT),
                Some(&link),
            )?;
            self.links.push(link);
            self.measured.push(m);
            self.servers.push(server);
        }
        Ok(self.links[..n]
            .iter()
            .map(|l| format!("sluice://{}:{OBJECT_PORT}", l.server_addr()))
            .collect())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Write => "write",
            Self::Read => "read",
        }
    }
}

/// The requests (by index) thread `t` of `threads` issues, in order.
fn share(requests: u64, threads: u32, t: u32) -> std::ops::Range<u64> {
    let (r, n, t) = (u128::from(requests), u128::from(threads), u128::from(t));
    // Both ends are at most `requests`, so the casts are lossless.
    (r * t / n) as u64..(r * (t + 1) / n) as u64
}

/// One thread's pass: 1 MiB requests over its share, each write carrying
/// its offset in its first bytes and each read checked for it.
fn thread_pass(
    meta: Arc<dyn MetaStore>,
    name: &str,
    op: Op,
    requests: std::ops::Range<u64>,
    start: &Barrier,
) -> Result<()> {
    let options = ObjOptions {
        request_timeout: Some(REQUEST_TIMEOUT),
        ..ObjOptions::default()
    };
    let mut client = StripedClient::new(meta, options);
    let opened = client.open(name);
    // Every thread reaches the barrier, so a failed open cannot leave the
    // others waiting.
    start.wait();
    let mut object = opened.with_context(|| format!("cannot open {name}"))?;
    let mut buf: Vec<u8> = (0..REQUEST).map(|_| fastrand::u8(..)).collect();
    let plain = StripedWrite::default();
    for k in requests {
        let offset = k * REQUEST;
        let pattern = Pattern::Contiguous {
            offset,
            length: REQUEST,
        };
        match op {
            Op::Write => {
                buf[..8].copy_from_slice(&offset.to_le_bytes());
                client
                    .write(&mut object, &pattern, &buf, &plain)
                    .with_context(|| format!("write of 1 MiB at {offset} to {name}"))?;
            }
            Op::Read => {
                let r = client
                    .read(&mut object, &pattern)
                    .with_context(|| format!("read of 1 MiB at {offset} from {name}"))?;
                if r.real_bytes != REQUEST || r.data.get(..8) != Some(&offset.to_le_bytes()[..]) {
                    bail!("read of 1 MiB at {offset} from {name} did not return what was written there");
                }
            }
        }
    }
    Ok(())
}

/// One pass of all threads over the whole object; MB/s.
fn pass(meta: &Arc<dyn MetaStore>, name: &str, op: Op, threads: u32, bytes: u64) -> Result<f64> {
    let requests = bytes / REQUEST;
    let start = Barrier::new(threads as usize + 1);
    let (began, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let meta = Arc::clone(meta);
                let start = &start;
                s.spawn(move || thread_pass(meta, name, op, share(requests, threads, t), start))
            })
            .collect();
        start.wait();
        let began = Instant::now();
        let results: Vec<Result<()>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a {} thread panicked", op.name())))
            })
            .collect();
        (began, results)
    });
    let took = began.elapsed().as_secs_f64();
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(bytes as f64 / took / 1e6)
}

/// Writes then reads one object striped over `n` servers, `rounds`
/// times; the write and read rows (ratios not yet set).
fn point(bed: &mut Bed, n: u32, threads: u32, bytes: u64, rounds: u32) -> Result<Vec<StripedRow>> {
    let uris = bed.uris(n as usize)?;
    let store = MemoryMetaStore::new();
    for u in &uris {
        store.add_server(u)?;
    }
    let meta: Arc<dyn MetaStore> = Arc::new(store);
    let name = format!("bench/striped-over-{n}");
    let mut client = StripedClient::new(Arc::clone(&meta), ObjOptions::default());
    client
        .create(&name, &Shape::striped(STRIPE_UNIT, n as usize))
        .with_context(|| format!("cannot create {name}"))?;
    let mut runs = [(Op::Write, Vec::new()), (Op::Read, Vec::new())];
    for _ in 0..rounds {
        for (op, v) in &mut runs {
            let mb_s = pass(&meta, &name, *op, threads, bytes)?;
            eprintln!("{n} server(s) {:<5} {:>8} MB/s", op.name(), compact(mb_s));
            v.push(mb_s);
        }
    }
    // The servers keep the pieces in files: free them for the next point.
    if let Err(e) = client.remove(&name) {
        eprintln!("cannot remove {name}: {e:#}");
    }
    let links = &bed.measured()[..n as usize];
    Ok(runs
        .into_iter()
        .map(|(op, v)| {
            let mbit: f64 = links
                .iter()
                .map(|m| match op {
                    Op::Write => m.up_mbit_s,
                    Op::Read => m.down_mbit_s,
                })
                .sum();
            let mb_s = median(&v).unwrap_or(0.0);
            let limit = mbit / 8.0;
            StripedRow {
                servers: n,
                op: op.name().into(),
                mb_s,
                rounds_mb_s: v,
                ratio_to_one: None,
                limit_mb_s: limit,
                of_limit: if limit > 0.0 { mb_s / limit } else { 0.0 },
            }
        })
        .collect())
}

/// Sets each row's ratio to the one-server row of the same op.
fn set_ratios(rows: &mut [StripedRow]) {
    let one: Vec<(String, f64)> = rows
        .iter()
        .filter(|r| r.servers == 1)
        .map(|r| (r.op.clone(), r.mb_s))
        .collect();
    for r in rows {
        r.ratio_to_one = one
            .iter()
            .find(|(op, _)| *op == r.op)
            .and_then(|&(_, base)| sluice_bench::stats::ratio(r.mb_s, base));
    }
}

/// `sluice bench striped`.
pub fn striped(opts: &PresetOptions, args: &StripedArgs) -> Result<StripedReport> {
    let bytes = args
        .object_size
        .map_or(if opts.quick { 32 << 20 } else { 128 << 20 }, |s| s.0);
    if !bytes.is_multiple_of(REQUEST) || bytes / REQUEST < u64::from(args.threads) {
        bail!(
            "--object-size {bytes}: must be whole MiB, at least 1 MiB per thread ({} threads)",
            args.threads
        );
    }
    let bin = peers::resolve_sluice_bin(opts.sluice_bin.as_deref())?;
    if let Some(why) = crate::link::unavailable() {
        bail!("sluice bench striped skipped: {why}");
    }
    let mut counts = args.servers.clone().unwrap_or_else(|| vec![1, 2, 3, 4]);
    counts.sort_unstable();
    counts.dedup();
    let mut bed = Bed::new(bin, opts.link_rate.unwrap_or(DEFAULT_RATE), "striped")?;
    let mut notes = vec![format!(
        "object servers: sluice serve --objects, each behind its own {} link; metadata in the bench's memory; {} threads",
        bed.rate(), args.threads
    )];
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for &n in &counts {
        eprintln!("# striped over {n}");
        match point(&mut bed, n, args.threads, bytes, opts.rounds) {
            Ok(r) => rows.extend(r),
            Err(e) => {
                eprintln!("striped over {n}: {e:#}");
                notes.push(format!("{n} server(s) failed: {e:#}"));
            }
        }
    }
    set_ratios(&mut rows);
    let report = StripedReport {
        preset: "striped".into(),
        command: crate::setup::command_line(),
        machine: Machine::probe(),
        loadavg_end: Machine::probe().loadavg,
        quick: opts.quick,
        object_bytes: bytes,
        stripe_unit: STRIPE_UNIT,
        request_bytes: REQUEST,
        threads: args.threads,
        rounds: opts.rounds,
        links: bed.measured().to_vec(),
        notes,
        rows,
    };
    drop(bed);
    print_report(opts, &report, t0.elapsed())?;
    Ok(report)
}

fn print_report(opts: &PresetOptions, report: &StripedReport, wall: Duration) -> Result<()> {
    let title = format!(
        "striped ({} object, {} KiB stripe unit, 1 MiB requests, {} threads, median of {} round(s), wall {:.0} s)",
        sluice_types::format_size(report.object_bytes),
        report.stripe_unit >> 10,
        report.threads,
        report.rounds,
        wall.as_secs_f64()
    );
    let mut t = Table::new([
        "servers",
        "op",
        "MB/s",
        "x one server",
        "limit MB/s",
        "of limit",
    ]);
    for r in &report.rows {
        t.row([
            r.servers.to_string(),
            r.op.clone(),
            compact(r.mb_s),
            r.ratio_to_one
                .map_or_else(|| "-".into(), |x| format!("{x:.2}")),
            compact(r.limit_mb_s),
            format!("{:.0} %", r.of_limit * 100.0),
        ]);
    }
    let axes = Axes {
        x_label: "object servers".into(),
        y_label: "MB/s".into(),
        x_axis: XAxis::Linear,
    };
    let charts = [Op::Write, Op::Read]
        .into_iter()
        .map(|op| {
            let rows: Vec<&StripedRow> = report.rows.iter().filter(|r| r.op == op.name()).collect();
            let line = |f: fn(&StripedRow) -> f64| -> Vec<(f64, f64)> {
                rows.iter().map(|r| (f64::from(r.servers), f(r))).collect()
            };
            axes.chart(
                format!("1 MiB sequential {}s", op.name()),
                vec![
                    ("measured".into(), line(|r| r.mb_s)),
                    ("N x one link (measured)".into(), line(|r| r.limit_mb_s)),
                ],
            )
        })
        .collect();
    Epilogue::new("striped", title, &report.machine, &report.notes)
        .links(Some("server"), &report.links)
        .table("", t)
        .figure(Figure {
            title: format!(
                "One striped object over N object servers, each behind a {} link",
                report
                    .links
                    .first()
                    .and_then(|l| l.rate_bits)
                    .map_or_else(|| "unshaped".into(), |r| LinkRate(r).to_string())
            ),
            columns: 2,
            charts,
        })
        .finish(opts, report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(flatten)]
        args: StripedArgs,
    }

    #[test]
    fn shares_cover_every_request_once_in_order() {
        for (requests, threads) in [(32, 4), (7, 3), (5, 5), (1000, 7)] {
            let mut next = 0;
            for t in 0..threads {
                let r = share(requests, threads, t);
                assert_eq!(r.start, next, "{requests}/{threads} thread {t}");
                assert!(!r.is_empty(), "{requests}/{threads} thread {t}");
                next = r.end;
            }
            assert_eq!(next, requests);
        }
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_refused() {
        let a = Top::try_parse_from(["x"]).unwrap().args;
        assert_eq!((a.servers, a.threads, a.object_size), (None, 4, None));
        let a = Top::try_parse_from(["x", "--servers", "1,4", "--object-size", "8M"])
            .unwrap()
            .args;
        assert_eq!(a.servers, Some(vec![1, 4]));
        assert_eq!(a.object_size.map(|s| s.0), Some(8 << 20));
        for bad in [
            &["--servers", "0"][..],
            &["--servers", "5"],
            &["--threads", "0"],
            &["--object-size", "lots"],
        ] {
            let mut v = vec!["x"];
            v.extend_from_slice(bad);
            assert!(Top::try_parse_from(v).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ratios_are_to_one_server_of_the_same_op() {
        let row = |servers, op: &str, mb_s| StripedRow {
            servers,
            op: op.into(),
            mb_s,
            rounds_mb_s: vec![mb_s],
            ratio_to_one: None,
            limit_mb_s: 12.0 * f64::from(servers),
            of_limit: 0.0,
        };
        let mut rows = vec![
            row(1, "write", 10.0),
            row(1, "read", 12.0),
            row(4, "write", 35.0),
            row(4, "read", 42.0),
        ];
        set_ratios(&mut rows);
        let got: Vec<Option<f64>> = rows.iter().map(|r| r.ratio_to_one).collect();
        assert_eq!(got, [Some(1.0), Some(1.0), Some(3.5), Some(3.5)]);
        let mut without_one = vec![row(2, "read", 20.0)];
        set_ratios(&mut without_one);
        assert_eq!(without_one[0].ratio_to_one, None);
    }
}
