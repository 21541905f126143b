//! [`RemoteMetaStore`]: the metadata service of a sluice server, reached
//! over the native object protocol (`--meta sluice://HOST:PORT`), as a
//! [`MetaStore`] like any local backend.
//!
//! Each call is one `META` request on one [`SharedObjClient`]
//! connection (made on first use), so calls from many threads are in
//! flight together and the server settles races between them exactly as
//! the backend behind it does. The service's own refusals keep their
//! kind ([`MetaError::Exists`], [`MetaError::NotFound`],
//! [`MetaError::Conflict`], [`MetaError::ServerInUse`],
//! [`MetaError::Invalid`]); a failed connection or request is
//! [`MetaError::Backend`] naming the server, and a connection that
//! failed is replaced by a new one on the next call. Nothing is retried:
//! a call whose reply was lost may or may not have happened.
//!
//! Names longer than any entry's are settled here, as every backend
//! settles them, since the protocol does not carry them: a create is
//! refused as [`MetaError::Invalid`], other calls find nothing.
//!
//! `sluice-client` holds the one client-side mapping between the
//! protocol crate's wire types and `sluice-meta`'s.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use sluice_meta::{
    check_name, check_page, Entry, EntryState, Layout, MetaError, MetaStore, Page, PendingChange,
    Piece, Redundancy, Update,
};
use sluice_obj_proto::meta::{MAX_META_NAME_LEN, MAX_META_PAGE};
use sluice_obj_proto::{
    MetaEntry, MetaFailure, MetaLayout, MetaPending, MetaPiece, MetaRedundancy, MetaReply,
    MetaRequest, MetaState, MetaUpdate,
};

use super::client::ObjOptions;
use super::shared::SharedObjClient;
use super::ObjError;
use crate::net::uri::ObjUri;

// Every name an entry can have fits the protocol, so a name that does
// not fit names no entry.
const _: () = assert!(MAX_META_NAME_LEN >= sluice_meta::MAX_NAME_LEN);
// Every page a store may be asked for fits one LIST request.
const _: () = assert!(MAX_META_PAGE as usize >= sluice_meta::MAX_PAGE);

/// Refuses a name the protocol cannot carry: no entry has one, so it is
/// not found.
fn carried(name: &str) -> Result<(), MetaError> {
    if name.len() > MAX_META_NAME_LEN {
        return Err(MetaError::NotFound { name: name.into() });
    }
    Ok(())
}

/// The metadata service of the sluice server at one URI.
pub struct RemoteMetaStore {
    uri: ObjUri,
    /// The URI as given, for errors.
    name: String,
    options: ObjOptions,
    /// The connection calls share, once made.
    connection: Mutex<Option<Arc<SharedObjClient>>>,
}

impl std::fmt::Debug for RemoteMetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteMetaStore")
            .field("server", &self.name)
            .finish_non_exhaustive()
    }
}

impl RemoteMetaStore {
    /// The service at `uri`; connects on first use, with `options`.
    pub fn new(uri: ObjUri, options: ObjOptions) -> Self {
        Self {
            name: uri.to_string(),
            uri,
            options,
            connection: Mutex::new(None),
        }
    }

    /// Connects now, so a server that is down or runs no metadata
    /// service is reported before any other work (one `SERVERS` call).
    pub fn connect(uri: ObjUri, options: ObjOptions) -> Result<Self, MetaError> {
        let store = Self::new(uri, options);
        store.servers()?;
        Ok(store)
    }

    fn slot(&self) -> MutexGuard<'_, Option<Arc<SharedObjClient>>> {
        // One optional handle; a panic elsewhere cannot leave it half
        // changed.
        self.connection.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared connection, made now if there is none. Connecting
    /// holds the slot, so concurrent first calls make one connection.
    fn connection(&self) -> Result<Arc<SharedObjClient>, ObjError> {
        let mut slot = self.slot();
        if let Some(c) = &*slot {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(SharedObjClient::connect(&self.uri, &self.options)?);
        *slot = Some(Arc::clone(&c));
        Ok(c)
    }

    fn backend(&self, action: &str, source: ObjError) -> MetaError {
        MetaError::Backend {
            backend: self.name.clone(),
            action: action.to_owned(),
            source: Box::new(source),
        }
    }

    /// Runs one call; a refusal of the service becomes its error kind.
    fn call(&self, action: &str, request: &MetaRequest) -> Result<MetaReply, MetaError> {
        let client = self.connection().map_err(|e| self.backend(action, e))?;
        let reply = client.meta(request).map_err(|e| {
            if !e.connection_survives() {
                // The next call connects again (unless another call
                // already did).
                let mut slot = self.slot();
                if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                    *slot = None;
                }
            }
            self.backend(action, e)
        })?;
        match reply {
            MetaReply::Failed(f) => Err(from_failure(f, &self.name)),
            other => Ok(other),
        }
    }

    fn unexpected(&self, action: &str, reply: &MetaReply) -> MetaError {
        self.backend(
            action,
            ObjError::Violation {
                server: self.name.clone(),
                reason: format!("answered a metadata call with {reply:?}"),
            },
        )
    }

    fn entry(&self, action: &str, request: &MetaRequest) -> Result<Entry, MetaError> {
        match self.call(action, request)? {
            MetaReply::Entry(e) => Ok(entry_from_wire(e)),
            other => Err(self.unexpected(action, &other)),
        }
    }

    fn done(&self, action: &str, request: &MetaRequest) -> Result<(), MetaError> {
        match self.call(action, request)? {
            MetaReply::Done => Ok(()),
            other => Err(self.unexpected(action, &other)),
        }
    }
}

impl MetaStore for RemoteMetaStore {
    fn add_server(&self, uri: &str) -> Result<(), MetaError> {
        self.done(
            "add an object server",
            &MetaRequest::AddServer { uri: uri.into() },
        )
    }

    fn remove_server(&self, uri: &str) -> Result<(), MetaError> {
        self.done(
            "remove an object server",
            &MetaRequest::RemoveServer { uri: uri.into() },
        )
    }

    fn servers(&self) -> Result<Vec<String>, MetaError> {
        let action = "list the object servers";
        match self.call(action, &MetaRequest::Servers)? {
            MetaReply::Servers(list) => Ok(list),
            other => Err(self.unexpected(action, &other)),
        }
    }

    fn deployment(&self) -> Result<String, MetaError> {
        let action = "read the deployment's identity";
        match self.call(action, &MetaRequest::Deployment)? {
            MetaReply::Deployment(id) => Ok(id),
            other => Err(self.unexpected(action, &other)),
        }
    }

    fn default_redundancy(&self) -> Result<Redundancy, MetaError> {
        let action = "read the default redundancy";
        match self.call(action, &MetaRequest::DefaultRedundancy)? {
            MetaReply::Redundancy(r) => Ok(redundancy_from_wire(r)),
            other => Err(self.unexpected(action, &other)),
        }
    }

    fn set_default_redundancy(&self, redundancy: Redundancy) -> Result<(), MetaError> {
        let action = "set the default redundancy";
        let request = MetaRequest::SetDefaultRedundancy {
            redundancy: redundancy_to_wire(redundancy),
        };
        match self.call(action, &request)? {
            MetaReply::Done => Ok(()),
            other => Err(self.unexpected(action, &other)),
        }
    }

    fn next_placement(&self) -> Result<u64, MetaError> {
        let action = "choose a placement";
        match self.call(action, &MetaRequest::NextPlacement)? {
            MetaReply::Placement(n) => Ok(n),
            other => Err(self.unexpected(action, &other)),
        }
    }

    fn create(
        &self,
        name: &str,
        layout: &Layout,
        attrs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Entry, MetaError> {
        check_name(name)?;
        self.entry(
            "create an entry",
            &MetaRequest::Create {
                name: name.into(),
                layout: layout_to_wire(layout),
                attrs: attrs.clone(),
            },
        )
    }

    fn lookup(&self, name: &str) -> Result<Entry, MetaError> {
        carried(name)?;
        self.entry(
            "look up an entry",
            &MetaRequest::Lookup { name: name.into() },
        )
    }

    fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Page, MetaError> {
        let action = "list entries";
        // Refused here as every backend refuses it, so the service's
        // answer is the same error as a local backend's.
        check_page(prefix, after, limit)?;
        if carried(prefix).is_err() {
            return Ok(Page::default());
        }
        let request = MetaRequest::List {
            prefix: prefix.into(),
            after: after.unwrap_or_default().into(),
            max: u32::try_from(limit).unwrap_or(u32::MAX),
        };
        let (entries, more) = match self.call(action, &request)? {
            MetaReply::Page { entries, more } => (entries, more),
            other => return Err(self.unexpected(action, &other)),
        };
        // Names under the prefix, ascending from past the key, at most
        // `limit`, and something when more follow: else a broken server
        // could loop a caller that pages on.
        let mut last = after;
        let sound = entries.len() <= limit
            && !(more && entries.is_empty())
            && entries.iter().all(|e| {
                let ok = e.name.starts_with(prefix) && last.is_none_or(|l| e.name.as_str() > l);
                last = Some(e.name.as_str());
                ok
            });
        if !sound {
            return Err(self.unexpected(action, &MetaReply::Page { entries, more }));
        }
        let entries: Vec<Entry> = entries.into_iter().map(entry_from_wire).collect();
        let next = entries.last().filter(|_| more).map(|e| e.name.clone());
        Ok(Page { entries, next })
    }

    fn update(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        update: &Update,
    ) -> Result<Entry, MetaError> {
        carried(name)?;
        self.entry(
            "update an entry",
            &MetaRequest::Update {
                name: name.into(),
                expected_revision,
                update: MetaUpdate {
                    layout: update.layout.as_ref().map(layout_to_wire),
                    pending: match &update.pending {
                        PendingChange::Keep => MetaPending::Keep,
                        PendingChange::Set(l) => MetaPending::Set(layout_to_wire(l)),
                        PendingChange::Clear => MetaPending::Clear,
                    },
                    state: update.state.map(state_to_wire),
                    size_at_least: update.size_at_least,
                    size: update.size,
                    set_attrs: update.set_attrs.clone(),
                    remove_attrs: update.remove_attrs.clone(),
                },
            },
        )
    }

    fn delete(&self, name: &str, expected_revision: Option<u64>) -> Result<(), MetaError> {
        carried(name)?;
        self.done(
            "delete an entry",
            &MetaRequest::Delete {
                name: name.into(),
                expected_revision,
            },
        )
    }
}

/// A failure of the service as the error the backend behind it raised.
fn from_failure(f: MetaFailure, server: &str) -> MetaError {
    match f {
        MetaFailure::NotFound { name } => MetaError::NotFound { name },
        MetaFailure::Exists { name } => MetaError::Exists { name },
        MetaFailure::Conflict {
            name,
            expected,
            found,
        } => MetaError::Conflict {
            name,
            expected,
            found,
        },
        MetaFailure::ServerInUse {
            server,
            objects,
            example,
        } => MetaError::ServerInUse {
            server,
            objects,
            example,
        },
        MetaFailure::Invalid { what, why } => MetaError::Invalid { what, why },
        MetaFailure::Backend { message } => MetaError::Backend {
            backend: server.to_owned(),
            action: "run a metadata call".into(),
            source: message.into(),
        },
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

fn layout_to_wire(l: &Layout) -> MetaLayout {
    MetaLayout {
        stripe_unit: l.stripe_unit,
        pieces: l
            .pieces
            .iter()
            .map(|p| MetaPiece {
                server: p.server.clone(),
                partition: p.partition,
                object: p.object,
            })
            .collect(),
        redundancy: redundancy_to_wire(l.redundancy),
    }
}

fn layout_from_wire(l: MetaLayout) -> Layout {
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

fn entry_from_wire(e: MetaEntry) -> Entry {
    Entry {
        name: e.name,
        layout: layout_from_wire(e.layout),
        state: match e.state {
            MetaState::Creating => EntryState::Creating,
            MetaState::Writing => EntryState::Writing,
            MetaState::Ready => EntryState::Ready,
            MetaState::Removing => EntryState::Removing,
        },
        size: e.size,
        attrs: e.attrs,
        pending: e.pending.map(layout_from_wire),
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
