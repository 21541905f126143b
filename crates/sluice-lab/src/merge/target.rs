//! What the `merge` preset's threads write to, and through what. By
//! default each thread writes its own object through one
//! [`SharedObjClient`], whose merging packs writes into batch frames.
//! With `--export` they write the server's block export instead, each
//! its own 4 MiB of it: through one [`ExportDevice`] (the block path
//! over the native protocol, whose merging fuses writes into one
//! scatter/gather extent command, the SAN paper's jumbo command), and,
//! as the baseline, through one NBD [`RemoteDevice`], which never
//! merges (NBD cannot carry such a command).

use anyhow::{Context, Result};
use sluice_client::obj::{
    DataOptions, ExportDevice, MergePolicy, MergeStats, ObjOptions, Segment, SharedObjClient,
};
use sluice_client::{ConnectOptions, ExportUri, RemoteDevice};
use sluice_storage::BlockDevice;

use super::{BLOCK, POLICIES, SPAN_BLOCKS};
use crate::objserver::ObjServer;

/// Where the preset's writes go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MergeTarget {
    /// Each thread's own object.
    #[default]
    Objects,
    /// The server's block export (`bench`), each thread its own span.
    Export,
}

/// One row of the preset: a merge policy, or the NBD baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    Merge(MergePolicy),
    /// The block export over NBD (export runs only).
    Nbd,
}

impl Row {
    /// The row's name in samples and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Merge(p) => p.name(),
            Self::Nbd => "nbd",
        }
    }
}

/// The rows `target` runs, in the order of the first round.
pub fn rows(target: MergeTarget) -> Vec<Row> {
    let mut rows: Vec<Row> = POLICIES.iter().map(|&p| Row::Merge(p)).collect();
    if target == MergeTarget::Export {
        rows.push(Row::Nbd);
    }
    rows
}

/// The bytes of export the threads of an export run write: a span of
/// `SPAN_BLOCKS` blocks each.
pub fn export_size(threads: usize) -> u64 {
    threads.max(1) as u64 * SPAN_BLOCKS * BLOCK as u64
}

/// One run's connection, shared by its threads.
pub(crate) enum Writer<'a> {
    Objects {
        client: SharedObjClient,
        objects: &'a [u64],
    },
    Export(ExportDevice),
    Nbd(RemoteDevice),
}

impl<'a> Writer<'a> {
    /// A connection to `server` for `row`: to the objects, or to the
    /// export when `objects` is `None`.
    pub(crate) fn connect(
        server: &ObjServer,
        row: Row,
        objects: Option<&'a [u64]>,
    ) -> Result<Self> {
        Ok(match (row, objects) {
            (Row::Merge(policy), Some(objects)) => {
                let options = ObjOptions {
                    merge: policy,
                    ..ObjOptions::default()
                };
                let client = SharedObjClient::connect(&server.obj_uri, &options)
                    .with_context(|| format!("cannot connect to {}", server.obj_uri))?;
                Self::Objects { client, objects }
            }
            (Row::Merge(policy), None) => {
                let uri = ExportUri {
                    server: server.obj_uri.clone().with_merge(policy),
                    export: server.nbd_uri.export.clone(),
                };
                Self::Export(
                    ExportDevice::connect(&uri, &ObjOptions::default())
                        .with_context(|| format!("cannot open {uri}"))?,
                )
            }
            (Row::Nbd, _) => Self::Nbd(
                RemoteDevice::connect(&server.nbd_uri, &ConnectOptions::default())
                    .with_context(|| format!("cannot open {}", server.nbd_uri))?,
            ),
        })
    }

    /// Thread `thread`'s write of `data` (one block) at block `block` of
    /// its object or span.
    pub(crate) fn write(&self, thread: usize, block: u64, data: &[u8]) -> Result<()> {
        let at = block * BLOCK as u64;
        let span = thread as u64 * SPAN_BLOCKS * BLOCK as u64;
        match self {
            Self::Objects { client, objects } => {
                let seg = [Segment {
                    offset: at,
                    length: data.len() as u64,
                }];
                client.write(objects[thread], &seg, data, &DataOptions::default())?;
            }
            Self::Export(device) => device.write_at(data, span + at, false)?,
            Self::Nbd(device) => device.write_at(data, span + at, false)?,
        }
        Ok(())
    }

    /// What the connection's merging did (nothing over NBD).
    pub(crate) fn stats(&self) -> MergeStats {
        match self {
            Self::Objects { client, .. } => client.merge_stats(),
            Self::Export(device) => device.client().merge_stats(),
            Self::Nbd(_) => MergeStats::default(),
        }
    }
}
