//! The measured groups of the objects preset (`ddt`, `nbd`, `attr`,
//! `create`, `query`): each times its operations for a round and adds
//! its samples.

use sluice_client::Durability;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sluice_bench::machine::{load1, steal_now, steal_since};
use sluice_bench::runner::{self, Endpoint, RunOptions, ServerCpu};
use sluice_bench::workload::{Limit, Pattern, Rw, Workload};
use sluice_client::obj::{
    AttrChange, DataOptions, DdtKind, ObjClient, ObjRequest, ObjResponse, Segment, Value,
};

use super::{
    check_all, check_reads, holed_segments, timed, Meter, ObjSample, DDT_HOLE, DDT_SEGMENTS, KIB4,
    MIB,
};
use crate::objserver::ObjServer;

pub(super) struct Ctx<'a> {
    pub(super) server: &'a ObjServer,
    pub(super) duration: Duration,
    /// Bytes of the NBD export, and of the object compared with it.
    pub(super) span: u64,
}

pub(super) fn ddt_group(ctx: &Ctx<'_>, round: u32, out: &mut Vec<ObjSample>) -> Result<()> {
    let mut c = ctx.server.client(64)?;
    let segs = holed_segments(DDT_SEGMENTS, KIB4 as u64, DDT_HOLE);
    let span = segs.last().map_or(0, |s| s.offset + s.length);
    let data = vec![0xa5u8; span as usize];
    let obj = c.create_and_write(
        "",
        &[Segment {
            offset: 0,
            length: span,
        }],
        &data,
        &DataOptions::default(),
    )?;
    // The same segments as a scatter/gather list (the client would send
    // their regular pattern as a strided request).
    let mut as_sgl = ctx.server.client_sending(64, Some(DdtKind::Sgl))?;
    let contiguous = [Segment {
        offset: 0,
        length: MIB as u64,
    }];
    let singles: Vec<[Segment; 1]> = segs.iter().map(|s| [*s]).collect();
    let rows = rotate(&["contiguous", "strided", "sgl", "iterative"], round);
    for row in rows {
        let m = timed(ctx.duration, |m| {
            let t = Instant::now();
            // A single read's buffer goes back to its client for the next
            // one, as a streaming reader does (see `check_reads`).
            let one = |c: &mut ObjClient, segments: &[Segment]| -> Result<usize> {
                let data = c.read(obj, segments)?.data;
                let n = data.len();
                c.recycle(data);
                Ok(n)
            };
            let bytes = match row {
                "contiguous" => one(&mut c, &contiguous)?,
                "strided" => one(&mut c, &segs)?,
                "sgl" => one(&mut as_sgl, &segs)?,
                _ => {
                    let reqs: Vec<ObjRequest<'_>> = singles
                        .iter()
                        .map(|s| ObjRequest::Read {
                            object: obj,
                            segments: s,
                            get: &[],
                        })
                        .collect();
                    let mut n = 0;
                    for r in c.pipeline(&reqs) {
                        if let ObjResponse::Read(r) = r? {
                            n += r.data.len();
                        }
                    }
                    n
                }
            };
            if bytes != MIB {
                bail!("{row}: read {bytes} bytes, not 1 MiB");
            }
            m.record(1, bytes as u64, t.elapsed());
            Ok(())
        })?;
        out.push(m.finish(round, "ddt", row, true));
    }
    c.remove(obj, Durability::Buffered)?;
    Ok(())
}

/// `rows` starting `round` places later.
pub(super) fn rotate<'a>(rows: &[&'a str], round: u32) -> Vec<&'a str> {
    let n = rows.len();
    (0..n).map(|k| rows[(k + round as usize) % n]).collect()
}

const NBD_QD: usize = 8;

pub(super) fn nbd_group(ctx: &Ctx<'_>, round: u32, out: &mut Vec<ObjSample>) -> Result<()> {
    let span = ctx.span;
    let mut c = ctx.server.client(NBD_QD)?;
    let data = vec![0x5au8; MIB];
    let obj = c.create("", 1, Durability::Buffered)?[0];
    // Fill the object first so that reads read data, as on the export.
    let offsets: Vec<[Segment; 1]> = (0..span / MIB as u64)
        .map(|i| {
            [Segment {
                offset: i * MIB as u64,
                length: MIB as u64,
            }]
        })
        .collect();
    let opts = DataOptions::default();
    let fill: Vec<ObjRequest<'_>> = offsets
        .iter()
        .map(|s| ObjRequest::Write {
            object: obj,
            segments: s,
            data: &data,
            options: &opts,
        })
        .collect();
    check_all(c.pipeline(&fill))?;
    let rows = rotate(&["obj-read", "nbd-read", "obj-write", "nbd-write"], round);
    for row in rows {
        if let Some(rw) = row.strip_prefix("nbd-") {
            let mut w = Workload::new(
                Pattern::Seq,
                if rw == "read" { Rw::Read } else { Rw::Write },
                MIB as u32,
                NBD_QD as u32,
            );
            w.limit = Limit::Time(ctx.duration);
            let steal0 = steal_now();
            let r = runner::run_workload(
                &Endpoint::Nbd {
                    uri: ctx.server.nbd_uri.clone(),
                    server_cpu: ServerCpu::OwnThreads,
                },
                &w,
                &RunOptions {
                    progress: false,
                    // Real data under the reads, as in the object.
                    prefill: round == 0 && rw == "read",
                    target_label: "nbd".into(),
                },
            )?;
            out.push(ObjSample {
                round,
                group: "nbd".into(),
                row: row.into(),
                ops: r.ops,
                bytes: r.bytes,
                wall_s: r.elapsed_s,
                ops_s: r.iops,
                mib_s: r.mib_s,
                mean_us: r.latency.mean_us,
                p50_us: r.latency.p50_us,
                p99_us: r.latency.p99_us,
                server_cpu_us_per_op: r.server_us_per_op(),
                client_cpu_us_per_op: Some(r.client_us_per_op()),
                load1: load1(),
                steal_pct: steal_since(steal0),
            });
            continue;
        }
        let write = row == "obj-write";
        // Batches of requests, NBD_QD in flight, walking the object.
        let chunk = 4 * NBD_QD;
        let mut at = 0usize;
        let m = timed(ctx.duration, |m| {
            let t = Instant::now();
            let segs: Vec<&[Segment; 1]> = (0..chunk)
                .map(|k| &offsets[(at + k) % offsets.len()])
                .collect();
            at = (at + chunk) % offsets.len();
            let reqs: Vec<ObjRequest<'_>> = segs
                .iter()
                .map(|s| {
                    if write {
                        ObjRequest::Write {
                            object: obj,
                            segments: *s,
                            data: &data,
                            options: &opts,
                        }
                    } else {
                        ObjRequest::Read {
                            object: obj,
                            segments: *s,
                            get: &[],
                        }
                    }
                })
                .collect();
            let results = c.pipeline(&reqs);
            if write {
                check_all(results)?;
            } else {
                check_reads(&mut c, results)?;
            }
            // Latency per request is not seen through a pipeline: record
            // the mean (elapsed × depth / count).
            let each = t.elapsed() * NBD_QD as u32 / chunk as u32;
            m.record(chunk as u64, (chunk * MIB) as u64, each);
            Ok(())
        })?;
        out.push(m.finish(round, "nbd", row, true));
    }
    c.remove(obj, Durability::Buffered)?;
    Ok(())
}

pub(super) fn attr_group(ctx: &Ctx<'_>, round: u32, out: &mut Vec<ObjSample>) -> Result<()> {
    let mut c = ctx.server.client(1)?;
    let data = vec![0x3cu8; KIB4];
    let obj = c.create_and_write(
        "",
        &[Segment {
            offset: 0,
            length: MIB as u64,
        }],
        &vec![0u8; MIB],
        &DataOptions::default(),
    )?;
    let mut rng = fastrand::Rng::with_seed(u64::from(round));
    let mut n: i64 = 0;
    for row in rotate(&["write-4k", "write-4k+attr"], round) {
        let m = timed(ctx.duration, |m| {
            let seg = [Segment {
                offset: rng.u64(0..256) * KIB4 as u64,
                length: KIB4 as u64,
            }];
            n += 1;
            let opts = if row == "write-4k" {
                DataOptions::default()
            } else {
                DataOptions {
                    durability: Durability::Buffered,
                    attrs: vec![AttrChange::set("version", n)],
                }
            };
            let t = Instant::now();
            c.write(obj, &seg, &data, &opts)?;
            m.record(1, KIB4 as u64, t.elapsed());
            Ok(())
        })?;
        out.push(m.finish(round, "attr", row, true));
    }
    c.remove(obj, Durability::Buffered)?;
    Ok(())
}

fn three_attrs(i: i64) -> Vec<AttrChange> {
    vec![
        AttrChange::set("owner", "bench"),
        AttrChange::set("serial", i),
        AttrChange::set("tag", vec![0xabu8; 32]),
    ]
}

/// Creates objects with three attributes (and `data` over its first
/// bytes, if any) `in_flight` at a time for the row's duration.
pub(super) fn create_row(
    c: &mut ObjClient,
    duration: Duration,
    data: &[u8],
    fua: bool,
    in_flight: usize,
    created: &mut Vec<u64>,
) -> Result<Meter> {
    let chunk = in_flight * 8;
    let seg = [Segment {
        offset: 0,
        length: data.len() as u64,
    }];
    let segs: &[Segment] = if data.is_empty() { &[] } else { &seg };
    let mut serial = 0i64;
    timed(duration, |m| {
        let opts: Vec<DataOptions> = (0..chunk)
            .map(|_| {
                serial += 1;
                DataOptions {
                    durability: Durability::from_fua(fua),
                    attrs: three_attrs(serial),
                }
            })
            .collect();
        let reqs: Vec<ObjRequest<'_>> = opts
            .iter()
            .map(|o| ObjRequest::CreateAndWrite {
                collection: "",
                segments: segs,
                data,
                options: o,
            })
            .collect();
        let t = Instant::now();
        for r in c.pipeline(&reqs) {
            if let ObjResponse::Object(id) = r.context("create with three attributes")? {
                created.push(id);
            }
        }
        let each = t.elapsed() * in_flight as u32 / chunk as u32;
        m.record(chunk as u64, (chunk * data.len()) as u64, each);
        Ok(())
    })
}

pub(super) fn create_group(ctx: &Ctx<'_>, round: u32, out: &mut Vec<ObjSample>) -> Result<()> {
    let mut c = ctx.server.client(32)?;
    let mut created = Vec::new();
    let data = vec![0x11u8; KIB4];
    for row in rotate(&["create+3attrs", "create+3attrs+4k"], round) {
        let d: &[u8] = if row == "create+3attrs" { &[] } else { &data };
        let m = create_row(&mut c, ctx.duration, d, false, 32, &mut created)?;
        out.push(m.finish(round, "create", row, true));
    }
    remove_all(&mut c, &created)
}

pub(super) fn remove_all(c: &mut ObjClient, ids: &[u64]) -> Result<()> {
    for chunk in ids.chunks(4096) {
        for r in c.remove_many(chunk, Durability::Buffered) {
            r.context("cannot remove a bench object")?;
        }
    }
    Ok(())
}

const QUERY_KEY: &str = "n";
const QUERY_COLLECTION: &str = "bench-query";

/// Fills the query collection with `count` objects whose attribute `n`
/// runs 0..count (done once, before the rounds).
pub(super) fn populate_query(server: &ObjServer, count: u64) -> Result<Duration> {
    let mut c = server.client(64)?;
    let t = Instant::now();
    let mut next = 0u64;
    while next < count {
        let end = (next + 2048).min(count);
        let opts: Vec<DataOptions> = (next..end)
            .map(|i| DataOptions {
                durability: Durability::Buffered,
                attrs: vec![AttrChange::set(QUERY_KEY, i as i64)],
            })
            .collect();
        let reqs: Vec<ObjRequest<'_>> = opts
            .iter()
            .map(|o| ObjRequest::CreateAndWrite {
                collection: QUERY_COLLECTION,
                segments: &[],
                data: &[],
                options: o,
            })
            .collect();
        check_all(c.batch(&reqs))?;
        next = end;
    }
    c.flush(sluice_client::obj::FlushScope::Partition)?;
    Ok(t.elapsed())
}

pub(super) fn query_group(
    ctx: &Ctx<'_>,
    round: u32,
    count: u64,
    out: &mut Vec<ObjSample>,
) -> Result<()> {
    let mut c = ctx.server.client(1)?;
    let width = (count / 100).max(1);
    let mut rng = fastrand::Rng::with_seed(1000 + u64::from(round));
    let m = timed(ctx.duration, |m| {
        let lo = rng.u64(0..count - width + 1) as i64;
        let range = sluice_client::obj::Range {
            key: QUERY_KEY.into(),
            min: Value::Integer(lo),
            max: Value::Integer(lo + width as i64 - 1),
        };
        let t = Instant::now();
        let found = c.query(QUERY_COLLECTION, std::slice::from_ref(&range))?;
        let took = t.elapsed();
        if found.len() as u64 != width {
            bail!(
                "query {}..={} found {} objects, not {width}",
                lo,
                lo + width as i64 - 1,
                found.len()
            );
        }
        m.record(1, 0, took);
        Ok(())
    })?;
    out.push(m.finish(round, "query", "query-1pct", true));
    Ok(())
}
