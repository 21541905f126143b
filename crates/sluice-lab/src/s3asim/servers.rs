//! The object servers an s3asim run writes to, started as first needed,
//! and the writers that put a run's results through them (naive or
//! non-contiguous).

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use sluice_client::obj::{DataOptions, MergePolicy, ObjClient, ObjOptions, Segment};
use sluice_client::striped::{Pattern, StripedClient, StripedObject, StripedWrite};
use sluice_client::ObjUri;
use sluice_meta::MetaStore;

use super::REQUEST_TIMEOUT;
use crate::objserver::ObjServer;
use crate::striped::Bed;

/// The object servers of one network, started as first needed.
pub(super) enum Servers {
    Loopback {
        servers: Vec<ObjServer>,
        dir: tempfile::TempDir,
    },
    Shaped(Bed),
}

impl Servers {
    pub(super) fn uris(&mut self, n: usize) -> Result<Vec<String>> {
        match self {
            Self::Loopback { servers, dir } => {
                while servers.len() < n {
                    let d = dir.path().join(format!("server-{}", servers.len()));
                    std::fs::create_dir_all(&d)
                        .with_context(|| format!("cannot create {}", d.display()))?;
                    servers.push(ObjServer::start(&d, 1 << 20)?);
                }
                Ok(servers[..n].iter().map(|s| s.obj_uri.to_string()).collect())
            }
            Self::Shaped(bed) => bed.uris(n),
        }
    }
}

/// Where the runs of one setup write: a server, or a metadata store that
/// names the servers.
pub(super) enum Target {
    One(ObjUri),
    Striped(Arc<dyn MetaStore>),
}

/// The result object of one run.
#[derive(Debug, Clone)]
pub(super) enum ObjectRef {
    One(u64),
    Striped(String),
}

pub(super) fn options() -> ObjOptions {
    ObjOptions {
        request_timeout: Some(REQUEST_TIMEOUT),
        // Each write is what the mode says it is: no temporal merge
        // behind it (one thread per connection rarely queues anyway).
        merge: MergePolicy::Off,
        ..ObjOptions::default()
    }
}

/// One process's handle on the result object.
pub(super) enum Writer {
    One {
        client: Box<ObjClient>,
        id: u64,
    },
    Striped {
        client: Box<StripedClient>,
        object: Box<StripedObject>,
    },
}

impl Writer {
    pub(super) fn open(target: &Target, object: &ObjectRef) -> Result<Self> {
        match (target, object) {
            (Target::One(uri), ObjectRef::One(id)) => Ok(Self::One {
                client: Box::new(
                    ObjClient::connect(uri, &options())
                        .with_context(|| format!("cannot connect to {uri}"))?,
                ),
                id: *id,
            }),
            (Target::Striped(meta), ObjectRef::Striped(name)) => {
                let mut client = StripedClient::new(Arc::clone(meta), options());
                let object = client
                    .open(name)
                    .with_context(|| format!("cannot open {name}"))?;
                Ok(Self::Striped {
                    client: Box::new(client),
                    object: Box::new(object),
                })
            }
            _ => bail!("a result object of another setup"),
        }
    }

    /// Writes `data` over `segments` in one request.
    pub(super) fn write(&mut self, segments: &[Segment], data: &[u8]) -> Result<()> {
        match self {
            Self::One { client, id } => client
                .write(*id, segments, data, &DataOptions::default())
                .with_context(|| format!("write of {} segment(s) to object {id}", segments.len())),
            Self::Striped { client, object } => client
                .write(
                    object,
                    &Pattern::Segments(segments),
                    data,
                    &StripedWrite::default(),
                )
                .with_context(|| {
                    format!(
                        "write of {} segment(s) to {}",
                        segments.len(),
                        object.name()
                    )
                }),
        }
    }

    pub(super) fn read(&mut self, offset: u64, length: u64) -> Result<Vec<u8>> {
        let segment = Segment { offset, length };
        match self {
            Self::One { client, id } => Ok(client
                .read(*id, &[segment])
                .with_context(|| format!("read of {length} bytes at {offset} of object {id}"))?
                .data),
            Self::Striped { client, object } => Ok(client
                .read(object, &Pattern::Contiguous { offset, length })
                .with_context(|| {
                    format!("read of {length} bytes at {offset} of {}", object.name())
                })?
                .data),
        }
    }
}
