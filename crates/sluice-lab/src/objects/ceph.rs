//! The `ceph` group of the objects preset: the same object operations
//! on a Ceph cluster through librados (a python3 script) and on sluice
//! beside it, for the comparison rows.

use sluice_client::Durability;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use sluice_bench::machine::{load1, steal_now, steal_since};
use sluice_client::obj::{DataOptions, ObjRequest, Segment};

use super::groups::{create_row, remove_all, rotate};
use super::{
    check_all, check_reads, scattered_extents, timed, CephPeer, Ctx, ObjSample, KIB4, MIB,
};

/// The librados side of the `ceph` group (python3-rados and ctypes).
const CEPH_SCRIPT: &str = include_str!("../objects_ceph.py");

#[derive(Debug, Deserialize)]
struct CephRow {
    row: String,
    ops: u64,
    bytes: u64,
    wall_s: f64,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
    osd_cpu_s: Option<f64>,
    client_cpu_s: f64,
}

/// The `ceph-osd` process whose command line names `conf`.
pub fn find_osd(conf: &Path) -> Option<u32> {
    let want = conf.to_string_lossy().into_owned();
    let mut found = None;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim() != "ceph-osd" {
            continue;
        }
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(&want) {
            found = Some(pid);
        }
    }
    found
}

pub(super) fn ceph_rows(
    ceph: &CephPeer,
    secs: f64,
    round: u32,
    out: &mut Vec<ObjSample>,
) -> Result<()> {
    let osd = ceph.osd_pid.or_else(|| find_osd(&ceph.conf));
    let steal0 = steal_now();
    // Debian's python3-rados lives in the system Python.
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let child = Command::new(python)
        .arg("-c")
        .arg(CEPH_SCRIPT)
        .arg(&ceph.conf)
        .arg(&ceph.pool)
        .arg(osd.map_or_else(|| "0".into(), |p| p.to_string()))
        .arg(format!("{secs}"))
        .arg(round.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run python3 (the ceph group needs python3-rados)")?;
    if !child.status.success() {
        bail!("the librados driver failed ({})", child.status);
    }
    let steal = steal_since(steal0);
    let text = String::from_utf8_lossy(&child.stdout);
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let r: CephRow = serde_json::from_str(line)
            .with_context(|| format!("cannot read the librados driver's line {line:?}"))?;
        let per_op = |s: f64| (r.ops > 0).then(|| s * 1e6 / r.ops as f64);
        out.push(ObjSample {
            round,
            group: "ceph".into(),
            row: format!("ceph-{}", r.row),
            ops: r.ops,
            bytes: r.bytes,
            wall_s: r.wall_s,
            ops_s: r.ops as f64 / r.wall_s.max(1e-9),
            mib_s: r.bytes as f64 / r.wall_s.max(1e-9) / MIB as f64,
            mean_us: r.mean_us,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            server_cpu_us_per_op: r.osd_cpu_s.and_then(per_op),
            client_cpu_us_per_op: per_op(r.client_cpu_s),
            load1: load1(),
            steal_pct: steal,
        });
    }
    Ok(())
}

const CEPH_QD: usize = 16;

/// The sluice rows of the `ceph` group: what the librados driver does,
/// through the native protocol.
pub(super) fn sluice_ceph_rows(ctx: &Ctx<'_>, round: u32, out: &mut Vec<ObjSample>) -> Result<()> {
    let mut c = ctx.server.client(CEPH_QD)?;
    let small = vec![0x77u8; KIB4];
    let big = vec![0x88u8; MIB];
    // 4 KiB writes go to 1024 objects, 1 MiB ones to 16.
    let targets = c.create("", 1024, Durability::Buffered)?;
    let bigs = c.create("", 16, Durability::Buffered)?;
    let seg4 = [Segment {
        offset: 0,
        length: KIB4 as u64,
    }];
    let seg1m = [Segment {
        offset: 0,
        length: MIB as u64,
    }];
    let no = DataOptions::default();
    let fua = DataOptions::durable();
    let fill: Vec<ObjRequest<'_>> = bigs
        .iter()
        .map(|&o| ObjRequest::Write {
            object: o,
            segments: &seg1m,
            data: &big,
            options: &no,
        })
        .collect();
    check_all(c.pipeline(&fill))?;
    let scatter_obj = c.create_and_write(
        "",
        &[Segment {
            offset: 0,
            length: 16 * MIB as u64,
        }],
        &vec![0x99u8; 16 * MIB],
        &no,
    )?;
    let scattered = scattered_extents(256, KIB4 as u64, 16 * MIB as u64, u64::from(round));
    let singles: Vec<[Segment; 1]> = scattered.iter().map(|s| [*s]).collect();
    let mut created = Vec::new();
    let rows = rotate(
        &[
            "write-4k-fua",
            "write-4k-nofua",
            "create+3attrs-fua",
            "create+3attrs-nofua",
            "read-1m",
            "write-1m-fua",
            "scatter-256x4k-1req",
            "scatter-256x4k-256req",
        ],
        round,
    );
    for row in rows {
        let m = match row {
            "write-4k-fua" | "write-4k-nofua" | "write-1m-fua" => {
                let (objs, seg, data, depth) = if row == "write-1m-fua" {
                    (&bigs, &seg1m, &big, 8)
                } else {
                    (&targets, &seg4, &small, CEPH_QD)
                };
                let opts = if row.ends_with("nofua") { &no } else { &fua };
                let chunk = depth * 8;
                let mut at = 0usize;
                timed(ctx.duration, |m| {
                    let reqs: Vec<ObjRequest<'_>> = (0..chunk)
                        .map(|k| ObjRequest::Write {
                            object: objs[(at + k) % objs.len()],
                            segments: seg,
                            data,
                            options: opts,
                        })
                        .collect();
                    at += chunk;
                    let t = Instant::now();
                    check_all(c.pipeline(&reqs))?;
                    let each = t.elapsed() * depth as u32 / chunk as u32;
                    m.record(chunk as u64, (chunk * data.len()) as u64, each);
                    Ok(())
                })?
            }
            "create+3attrs-fua" | "create+3attrs-nofua" => create_row(
                &mut c,
                ctx.duration,
                &small,
                row.ends_with("-fua"),
                CEPH_QD,
                &mut created,
            )?,
            "read-1m" => {
                let chunk = 8 * 8;
                let mut at = 0usize;
                timed(ctx.duration, |m| {
                    let reqs: Vec<ObjRequest<'_>> = (0..chunk)
                        .map(|k| ObjRequest::Read {
                            object: bigs[(at + k) % bigs.len()],
                            segments: &seg1m,
                            get: &[],
                        })
                        .collect();
                    at += chunk;
                    let t = Instant::now();
                    let results = c.pipeline(&reqs);
                    check_reads(&mut c, results)?;
                    let each = t.elapsed() * 8 / chunk as u32;
                    m.record(chunk as u64, (chunk * MIB) as u64, each);
                    Ok(())
                })?
            }
            "scatter-256x4k-1req" => timed(ctx.duration, |m| {
                let t = Instant::now();
                let r = c.read(scatter_obj, &scattered)?;
                m.record(1, r.data.len() as u64, t.elapsed());
                Ok(())
            })?,
            _ => timed(ctx.duration, |m| {
                let reqs: Vec<ObjRequest<'_>> = singles
                    .iter()
                    .map(|s| ObjRequest::Read {
                        object: scatter_obj,
                        segments: s,
                        get: &[],
                    })
                    .collect();
                let t = Instant::now();
                check_all(c.pipeline(&reqs))?;
                m.record(1, 256 * KIB4 as u64, t.elapsed());
                Ok(())
            })?,
        };
        out.push(m.finish(round, "ceph", &format!("sluice-{row}"), true));
    }
    created.extend(targets);
    created.extend(bigs);
    created.push(scatter_obj);
    remove_all(&mut c, &created)
}
