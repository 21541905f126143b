//! The test bed of the non-contiguous I/O experiment: one object server
//! over one link with a client per DDT, and the timed transfers of a
//! view's segments through it.

use sluice_client::Durability;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sluice_bench::stats::median;
use sluice_client::obj::{
    DataOptions, DdtKind, MergePolicy, ObjClient, ObjOptions, ObjRequest, ObjResponse, Segment,
};
use sluice_client::{ObjUri, Target};
use sluice_model::noncontig::Ddt;
use sluice_server::{ExportConfig, ListenAddr, ObjectConfig, ServerConfig};
use sluice_volume::{BaseSpec, VolumeSpec};

use super::{LinkKind, FILE_EXPORT, IN_FLIGHT, MEM_EXPORT};
use crate::link::{Link, LinkMeasurement, LinkRate};
use crate::objserver::ObjServer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Write,
    Read,
}

impl Op {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Write => "write",
            Self::Read => "read",
        }
    }
}

/// Where a transfer goes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Place {
    Object(u64),
    Export(u64),
}

/// One server over one link, with a client per DDT (the client picks the
/// layout for iterative and contiguous; SGL and strided are pinned).
pub(super) struct Bed {
    pub(super) kind: LinkKind,
    pub(super) measured: Option<LinkMeasurement>,
    /// Most segments the server takes in one request.
    pub(super) max_segments: u32,
    pub(super) clients: [ObjClient; 3],
    pub(super) mem: u64,
    pub(super) file: u64,
    // Dropped in this order: clients (above), the server, then its link.
    pub(super) _server: ObjServer,
    pub(super) _link: Option<Link>,
}

pub(super) fn client_index(ddt: Ddt) -> usize {
    match ddt {
        Ddt::Iterative => 0,
        Ddt::Sgl => 1,
        Ddt::Strided => 2,
    }
}

impl Bed {
    pub(super) fn start(
        kind: LinkKind,
        rate: LinkRate,
        delay: Duration,
        dir: &Path,
        export_bytes: u64,
    ) -> Result<Self> {
        let (link, measured) = match kind {
            LinkKind::Loopback => (None, None),
            LinkKind::Unshaped | LinkKind::Shaped | LinkKind::Delayed => {
                let link = match kind {
                    LinkKind::Delayed => Link::create_long(Some(rate), delay),
                    _ => Link::create(kind.is_rate_limited().then_some(rate)),
                }
                .context("the noncontig preset's links need root, network namespaces, veth and tc tbf (iproute2)")?;
                let m = link.measure()?;
                eprintln!(
                    "{} link: {} ({})",
                    kind.name(),
                    m.line(),
                    link.namespace().name()
                );
                (Some(link), Some(m))
            }
        };
        let ip = link.as_ref().map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |l| {
            IpAddr::V4(l.server_addr())
        });
        let any = ListenAddr::Tcp(SocketAddr::new(ip, 0));
        let here = dir.join(kind.name());
        std::fs::create_dir_all(&here)
            .with_context(|| format!("cannot create {}", here.display()))?;
        let objects = ObjectConfig::new(here.join("objects"), vec![any.clone()]);
        let max_segments = objects
            .published_limits()
            .context("the object listener's limits")?
            .max_segments;
        let config = ServerConfig {
            listen: vec![any],
            export: vec![
                ExportConfig {
                    name: MEM_EXPORT.into(),
                    spec: VolumeSpec::new(BaseSpec::Memory {
                        size: export_bytes,
                        overcommit: false,
                    }),
                    description: "noncontig mem".into(),
                },
                ExportConfig {
                    name: FILE_EXPORT.into(),
                    spec: VolumeSpec::new(BaseSpec::File {
                        path: here.join("export.img"),
                        size: Some(export_bytes),
                        direct: false,
                    }),
                    description: "noncontig file".into(),
                },
            ],
            objects: Some(objects),
            ..ServerConfig::default()
        };
        let server = ObjServer::bind(config, link.as_ref().map(Link::namespace))
            .with_context(|| format!("cannot start the object server in {}", here.display()))?;
        // Across the link (through its relay on the delayed one).
        let uri = match (&link, &server.obj_uri.target) {
            (Some(link), Target::Tcp(addr)) => {
                let addr: SocketAddr = addr
                    .parse()
                    .with_context(|| format!("the server's address {addr}"))?;
                ObjUri::new(Target::Tcp(link.route(addr)?.to_string()))
            }
            _ => server.obj_uri.clone(),
        };
        let connect = |ddt: Option<DdtKind>| {
            let options = ObjOptions {
                max_in_flight: IN_FLIGHT,
                exports: vec![MEM_EXPORT.into(), FILE_EXPORT.into()],
                // One request per block, not batch frames: the
                // iterative baseline is what an NBD client sends.
                merge: MergePolicy::Off,
                ddt,
                ..ObjOptions::default()
            };
            ObjClient::connect(&uri, &options).with_context(|| format!("cannot connect to {uri}"))
        };
        let clients = [
            connect(None)?,
            connect(Some(DdtKind::Sgl))?,
            connect(Some(DdtKind::Strided))?,
        ];
        let handle = |name: &str| {
            clients[0]
                .exports()
                .iter()
                .find(|e| e.name == name)
                .map(|e| e.handle)
                .with_context(|| format!("the server did not attach export {name}"))
        };
        let (mem, file) = (handle(MEM_EXPORT)?, handle(FILE_EXPORT)?);
        Ok(Self {
            kind,
            measured,
            max_segments,
            clients,
            mem,
            file,
            _server: server,
            _link: link,
        })
    }
}

/// The bytes of `data` for `segment i` of a list whose segments are laid
/// end to end in `data`.
pub(super) fn slices<'d>(segments: &[Segment], data: &'d [u8]) -> Vec<&'d [u8]> {
    let mut at = 0usize;
    segments
        .iter()
        .map(|s| {
            let d = &data[at..at + s.length as usize];
            at += s.length as usize;
            d
        })
        .collect()
}

/// One transfer's requests: one per segment (iterative) or one for the
/// whole list (the client splits it if it must).
#[allow(clippy::too_many_arguments)] // a transfer's parts, borrowed
pub(super) fn requests<'a>(
    place: Place,
    op: Op,
    iterative: bool,
    segments: &'a [Segment],
    singles: &'a [[Segment; 1]],
    pieces: &[&'a [u8]],
    data: &'a [u8],
    options: &'a DataOptions,
) -> Vec<ObjRequest<'a>> {
    let one = |segments: &'a [Segment], data: &'a [u8]| match (place, op) {
        (Place::Object(object), Op::Write) => ObjRequest::Write {
            object,
            segments,
            data,
            options,
        },
        (Place::Object(object), Op::Read) => ObjRequest::Read {
            object,
            segments,
            get: &[],
        },
        (Place::Export(export), Op::Write) => ObjRequest::ExtentWrite {
            export,
            segments,
            data,
            durability: Durability::Buffered,
        },
        (Place::Export(export), Op::Read) => ObjRequest::ExtentRead { export, segments },
    };
    if iterative {
        singles
            .iter()
            .zip(pieces)
            .map(|(s, d)| one(s.as_slice(), d))
            .collect()
    } else {
        vec![one(segments, data)]
    }
}

/// Runs one transfer, its requests pipelined or, `one_at_a_time`, each
/// sent when the last one's reply is in; for a read, the bytes in list
/// order go to `out`.
pub(super) fn transfer(
    c: &mut ObjClient,
    reqs: &[ObjRequest<'_>],
    one_at_a_time: bool,
    out: &mut Vec<u8>,
) -> Result<()> {
    out.clear();
    let replies = if reqs.len() == 1 || one_at_a_time {
        reqs.iter().map(|r| c.run(r)).collect()
    } else {
        c.pipeline(reqs)
    };
    for r in replies {
        if let ObjResponse::Read(r) = r.context("a request of the transfer failed")? {
            out.extend_from_slice(&r.data);
        }
    }
    Ok(())
}

/// Times `one` until `min` has passed (at least once); the median time
/// and the repetitions.
pub(super) fn timed(min: Duration, mut one: impl FnMut() -> Result<()>) -> Result<(f64, u32)> {
    let t0 = Instant::now();
    let mut times = Vec::new();
    while times.is_empty() || t0.elapsed() < min {
        let t = Instant::now();
        one()?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok((median(&times).unwrap_or(0.0), times.len() as u32))
}
