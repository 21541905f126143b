//! The metadata service of striped objects, served over the object
//! protocol (`META` requests): each request is one call of the
//! [`MetaStore`] the server was given, its answer (or the store's own
//! error, kind and fields kept) the reply's body. This file holds the
//! one mapping between the protocol crate's wire types and
//! `sluice-meta`'s on the server side.
//!
//! A server given no metadata service answers `META` with `INVALID`
//! naming how to start one. A LIST is one page of the store's
//! ([`MetaStore::list`]), so a request never reads more than the entries
//! the client asked for; the reply holds at most [`PAGE_BYTES`] of them,
//! and the next page resumes after the last name it returned.

use std::path::Path;
use std::sync::Arc;

use sluice_meta::{
    Entry, EntryState, Layout, MetaError, MetaStore, PendingChange, Piece, Redundancy, Update,
};
use sluice_obj_proto::{
    ErrorCode, MetaEntry, MetaFailure, MetaLayout, MetaPending, MetaPiece, MetaRedundancy,
    MetaReply, MetaRequest, MetaState,
};
use sluice_types::error_chain;

use crate::ServerError;

/// Most bytes of encoded entries one list page carries (far below the
/// reply limits, so a page of entries with many pieces still fits).
const PAGE_BYTES: usize = 4 << 20;

/// The metadata service a server runs (shared by its connections).
#[derive(Clone)]
pub(crate) struct MetaService(pub(crate) Arc<dyn MetaStore>);

impl std::fmt::Debug for MetaService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetaService")
    }
}

/// Opens the metadata service kept in `dir` (`[objects] meta`,
/// `sluice serve --meta DIR`).
pub(crate) fn open_meta(dir: &Path) -> Result<Arc<dyn MetaStore>, ServerError> {
    match sluice_meta::SqliteMetaStore::open(dir) {
        Ok(store) => Ok(Arc::new(store)),
        Err(source) => Err(ServerError::OpenMeta {
            dir: dir.to_path_buf(),
            source,
        }),
    }
}

/// Runs one `META` request (`params` as validated) against `store` and
/// returns the reply body, or the status and message of a refusal.
pub(super) fn run(
    service: Option<&MetaService>,
    params: &[u8],
) -> Result<Vec<u8>, (ErrorCode, String)> {
    let Some(MetaService(store)) = service else {
        return Err((
            ErrorCode::Invalid,
            "this server runs no metadata service (start it with 'sluice serve --meta DIR')".into(),
        ));
    };
    let request = MetaRequest::decode(params).map_err(|e| (ErrorCode::Invalid, e.to_string()))?;
    let reply = match call(&**store, request) {
        Ok(reply) => reply,
        Err(e) => MetaReply::Failed(failure(&e)),
    };
    let mut body = Vec::new();
    reply.encode(&mut body);
    Ok(body)
}

fn call(store: &dyn MetaStore, request: MetaRequest) -> Result<MetaReply, MetaError> {
    Ok(match request {
        MetaRequest::AddServer { uri } => {
            store.add_server(&uri)?;
            MetaReply::Done
        }
        MetaRequest::RemoveServer { uri } => {
            store.remove_server(&uri)?;
            MetaReply::Done
        }
        MetaRequest::Servers => MetaReply::Servers(store.servers()?),
        MetaRequest::NextPlacement => MetaReply::Placement(store.next_placement()?),
        MetaRequest::Deployment => MetaReply::Deployment(store.deployment()?),
        MetaRequest::DefaultRedundancy => {
            MetaReply::Redundancy(redundancy_to_wire(store.default_redundancy()?))
        }
        MetaRequest::SetDefaultRedundancy { redundancy } => {
            store.set_default_redundancy(redundancy_from_wire(redundancy))?;
            MetaReply::Done
        }
        MetaRequest::Create {
            name,
            layout,
            attrs,
        } => MetaReply::Entry(to_wire(store.create(&name, &from_wire(layout), &attrs)?)),
        MetaRequest::Lookup { name } => MetaReply::Entry(to_wire(store.lookup(&name)?)),
        MetaRequest::List { prefix, after, max } => page(store, &prefix, &after, max)?,
        MetaRequest::Update {
            name,
            expected_revision,
            update,
        } => {
            let update = Update {
                layout: update.layout.map(from_wire),
                pending: match update.pending {
                    MetaPending::Keep => PendingChange::Keep,
                    MetaPending::Set(l) => PendingChange::Set(from_wire(l)),
                    MetaPending::Clear => PendingChange::Clear,
                },
                state: update.state.map(state_from_wire),
                size_at_least: update.size_at_least,
                size: update.size,
                set_attrs: update.set_attrs,
                remove_attrs: update.remove_attrs,
            };
            MetaReply::Entry(to_wire(store.update(&name, expected_revision, &update)?))
        }
        MetaRequest::Delete {
            name,
            expected_revision,
        } => {
            store.delete(&name, expected_revision)?;
            MetaReply::Done
        }
    })
}

/// One page of the entries under `prefix` after `after` (empty: from
/// the start): one page of the store's, cut short (with `more` set) if
/// its entries pass [`PAGE_BYTES`].
fn page(
    store: &dyn MetaStore,
    prefix: &str,
    after: &str,
    max: u32,
) -> Result<MetaReply, MetaError> {
    let after = Some(after).filter(|a| !a.is_empty());
    let page = store.list(prefix, after, max as usize)?;
    let mut entries = Vec::with_capacity(page.entries.len());
    let mut encoded = Vec::new();
    let mut more = page.next.is_some();
    for e in page.entries {
        let e = to_wire(e);
        e.encode(&mut encoded);
        // At least one entry per page, so every page advances.
        if !entries.is_empty() && encoded.len() > PAGE_BYTES {
            more = true;
            break;
        }
        entries.push(e);
    }
    Ok(MetaReply::Page { entries, more })
}

fn failure(e: &MetaError) -> MetaFailure {
    match e {
        MetaError::NotFound { name } => MetaFailure::NotFound { name: name.clone() },
        MetaError::Exists { name } => MetaFailure::Exists { name: name.clone() },
        MetaError::Conflict {
            name,
            expected,
            found,
        } => MetaFailure::Conflict {
            name: name.clone(),
            expected: *expected,
            found: *found,
        },
        MetaError::ServerInUse {
            server,
            objects,
            example,
        } => MetaFailure::ServerInUse {
            server: server.clone(),
            objects: *objects,
            example: example.clone(),
        },
        MetaError::Invalid { what, why } => MetaFailure::Invalid {
            what: what.clone(),
            why: why.clone(),
        },
        other => {
            tracing::warn!(error = %error_chain(other), "metadata service call failed");
            MetaFailure::Backend {
                message: error_chain(other),
            }
        }
    }
}

fn state_from_wire(s: MetaState) -> EntryState {
    match s {
        MetaState::Creating => EntryState::Creating,
        MetaState::Writing => EntryState::Writing,
        MetaState::Ready => EntryState::Ready,
        MetaState::Removing => EntryState::Removing,
    }
}

fn state_to_wire(s: EntryState) -> MetaState {
    match s {
        EntryState::Creating => MetaState::Creating,
        EntryState::Writing => MetaState::Writing,
        EntryState::Ready => MetaState::Ready,
        EntryState::Removing => MetaState::Removing,
    }
}

fn from_wire(l: MetaLayout) -> Layout {
    Layout {
        stripe_unit: l.stripe_unit,
        redundancy: redundancy_from_wire(l.redundancy),
        pieces: l
            .pieces
            .into_iter()
            .map(|p| Piece {
                server: p.server,
                partition: p.partition,
                object: p.object,
            })
            .collect(),
    }
}

fn layout_to_wire(l: Layout) -> MetaLayout {
    MetaLayout {
        stripe_unit: l.stripe_unit,
        pieces: l
            .pieces
            .into_iter()
            .map(|p| MetaPiece {
                server: p.server,
                partition: p.partition,
                object: p.object,
            })
            .collect(),
        redundancy: redundancy_to_wire(l.redundancy),
    }
}

fn to_wire(e: Entry) -> MetaEntry {
    MetaEntry {
        name: e.name,
        layout: layout_to_wire(e.layout),
        state: state_to_wire(e.state),
        size: e.size,
        attrs: e.attrs,
        pending: e.pending.map(layout_to_wire),
        revision: e.revision,
    }
}

fn redundancy_to_wire(r: Redundancy) -> MetaRedundancy {
    match r {
        Redundancy::Replicas(copies) => MetaRedundancy::Replicas(copies),
        Redundancy::Erasure { data, parity } => MetaRedundancy::Erasure { data, parity },
    }
}

fn redundancy_from_wire(r: MetaRedundancy) -> Redundancy {
    match r {
        MetaRedundancy::Replicas(copies) => Redundancy::Replicas(copies),
        MetaRedundancy::Erasure { data, parity } => Redundancy::Erasure { data, parity },
    }
}
