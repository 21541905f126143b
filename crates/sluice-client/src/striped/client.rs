//! [`StripedClient`]: one named object spread over several object
//! servers, its layout kept by a metadata service ([`MetaStore`]).
//!
//! A request is split by stripe ([`StripePlan`]); each server then gets
//! one request carrying all of its pieces (a scatter/gather list when
//! they are not contiguous in its object), and the servers are driven in
//! parallel, one thread each. The size and attributes of the whole go to
//! the metadata service once per operation, after the data.
//!
//! # The order of steps, and what a crash leaves
//!
//! Each piece is an ordinary object made in the collection
//! [`PIECE_COLLECTION`] and marked, in the request that makes it, with
//! the attributes [`PIECE_OF_ATTR`] (the striped object's name) and
//! [`PIECE_INDEX_ATTR`] (its place in the layout), so that
//! [`fsck`](StripedClient::fsck) can tell pieces from other objects.
//!
//! Create ([`CreateStep`]):
//! 1. the pieces, as the object's [`Shape`](super::Shape) places them
//!    (`create.rs`), the first server chosen round-robin
//!    ([`MetaStore::next_placement`]);
//! 2. the entry, in state [`EntryState::Creating`] (the layout names the
//!    pieces' object ids, so they come first); a name already taken
//!    fails here, and the pieces are removed again;
//! 3. the entry's state set to [`EntryState::Ready`].
//!
//! Remove ([`RemoveStep`]):
//! 1. the entry's state set to [`EntryState::Removing`];
//! 2. the pieces removed;
//! 3. the entry deleted.
//!
//! A crash after create's step 1 leaves pieces no entry names (orphans);
//! after step 2 an entry in `Creating` whose pieces all exist. A crash
//! during remove leaves an entry in `Removing` whose pieces may be partly
//! gone. `fsck` removes orphans, makes `Creating` entries whose pieces
//! all exist `Ready` (and undoes the others), and finishes removals.
//!
//! # Sizes and reads past the end
//!
//! A read returns every byte asked for: bytes at or past the object's
//! size (as the metadata holds it) read as zeros and are not asked of
//! any server, and [`StripedRead::real_bytes`] counts the others, as
//! `real_bytes` does for one object. A write that ends past the size
//! grows it after the data is written; a write that fails leaves the
//! size as it was, so a failed write past the end is never read back.
//! A handle keeps the size it last saw and asks the metadata service
//! again only when a read reaches past it.
//!
//! # Failures
//!
//! A server that is down or fails a request fails a write with
//! [`StripedError::Piece`], naming the piece and the server; the other
//! servers' parts of the write still complete. A read fails the same way
//! on a plain object; a replicated one reads the column from its next
//! copy (`replicas.rs`), an erasure-coded one rebuilds it from the other
//! pieces (`erasure.rs`). Connecting and each reply are bounded by the
//! [`ObjOptions`] timeouts.

use std::collections::BTreeMap;
use std::sync::Arc;

use rusty_erasure::Coder;

use sluice_meta::{Entry, EntryState, Layout, MetaError, MetaStore, Piece, Redundancy, Update};
use thiserror::Error;

use super::plan::{Pattern, PlanError, StripePlan};
use super::pool::{Endpoint, Pool};
use crate::net::uri::ObjUri;
use crate::obj::DataOptions;
use crate::obj::ObjOptions;
use crate::obj::{FlushScope, ObjClient, ObjError, DEFAULT_PARTITION};
use crate::Durability;

/// The collection every piece of a striped object is made in.
pub const PIECE_COLLECTION: &str = "sluice-striped";
/// The attribute naming the striped object a piece belongs to (text).
pub const PIECE_OF_ATTR: &str = "striped.of";
/// The attribute giving a piece's place in its layout (integer).
pub const PIECE_INDEX_ATTR: &str = "striped.piece";
/// The attribute naming the deployment a piece belongs to (text: its
/// metadata service's [`MetaStore::deployment`]); fsck removes only
/// pieces of its own deployment.
pub const PIECE_DEPLOYMENT_ATTR: &str = "striped.deployment";
/// The attribute marking a piece made by a put (integer 1): an entry in
/// `Creating` whose pieces carry it is an interrupted put, not an empty
/// object.
pub const PIECE_PUT_ATTR: &str = "striped.put";

/// Why a striped operation failed. Each names the striped object and,
/// for data, the piece and the server.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StripedError {
    #[error("metadata service: cannot {action} {name:?}")]
    Meta {
        action: &'static str,
        name: String,
        #[source]
        source: MetaError,
    },
    #[error("{op} of piece {piece} of striped object {name:?} failed on {server}")]
    Piece {
        op: &'static str,
        name: String,
        piece: usize,
        server: String,
        #[source]
        source: Box<ObjError>,
    },
    /// Every copy of a replicated column failed (or its servers are
    /// down): the servers are named, the last failure is the cause.
    #[error("{op} of column {column} of striped object {name:?} failed on every copy ({servers})")]
    NoCopy {
        op: &'static str,
        name: String,
        column: usize,
        servers: String,
        #[source]
        source: Box<ObjError>,
    },
    /// An erasure-coded read lost more pieces than its code rebuilds.
    #[error("read of striped object {name:?} ({redundancy}) failed on more pieces than it can rebuild ({servers})")]
    TooManyLost {
        name: String,
        redundancy: Redundancy,
        servers: String,
        #[source]
        source: Box<ObjError>,
    },
    /// A request to a server not about one object's piece (fsck's
    /// listings and removals of orphans).
    #[error("{op} on {server} failed")]
    Server {
        op: &'static str,
        server: String,
        #[source]
        source: Box<ObjError>,
    },
    #[error("striped object {name:?} is {state:?}, not ready for use")]
    NotReady { name: String, state: EntryState },
    /// The name no longer holds the version this handle (or put) works
    /// on: a put replaced it, or it was removed, first. Nothing of this
    /// operation's metadata was applied.
    #[error("striped object {name:?} was replaced or removed by another client meanwhile")]
    Replaced { name: String },
    #[error("striped object {name:?} wants {wanted} object server(s); the deployment has {have}")]
    TooFewServers {
        name: String,
        wanted: usize,
        have: usize,
    },
    #[error("bad request on striped object {name:?}")]
    Plan {
        name: String,
        #[source]
        source: PlanError,
    },
    #[error("{what} of striped object {name:?}: {why}")]
    Invalid {
        name: String,
        what: &'static str,
        why: String,
    },
}

/// Where a create stops (all of it: [`CreateStep::Ready`]). Stopping
/// earlier leaves what a crash after that step leaves, for testing
/// [`fsck`](StripedClient::fsck).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CreateStep {
    /// The pieces exist, no entry names them.
    Pieces,
    /// The entry exists in state `Creating`.
    Entry,
    /// The entry is `Ready`: the create is complete.
    Ready,
}

/// Where a remove stops (all of it: [`RemoveStep::Deleted`]), as
/// [`CreateStep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RemoveStep {
    /// The entry is in state `Removing`.
    Removing,
    /// The pieces are gone.
    Pieces,
    /// The entry is gone: the remove is complete.
    Deleted,
}

/// An open striped object: its entry as this client last saw it.
#[derive(Debug, Clone)]
pub struct StripedObject {
    entry: Entry,
    /// For a put replacing an existing object: the live entry, as it was
    /// when the put recorded its new version as pending. `entry` is then
    /// the new version, known only to this handle until
    /// [`StripedClient::complete_put`] switches the name to it.
    pub(crate) replacing: Option<Entry>,
}

impl StripedObject {
    pub(crate) fn new(entry: Entry) -> Self {
        Self {
            entry,
            replacing: None,
        }
    }

    /// The entry as last seen (size, attributes, layout, revision).
    pub fn entry(&self) -> &Entry {
        &self.entry
    }

    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// The size as last seen.
    pub fn size(&self) -> u64 {
        self.entry.size
    }

    pub fn layout(&self) -> &Layout {
        &self.entry.layout
    }

    /// Whether this is a put's new version of an object that exists,
    /// which the put has not switched the name to yet.
    pub fn replaces(&self) -> bool {
        self.replacing.is_some()
    }

    pub(crate) fn set_entry(&mut self, entry: Entry) {
        self.entry = entry;
    }
}

/// What a striped read returned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StripedRead {
    /// Every byte asked for, in request order (zeros past the size).
    pub data: Vec<u8>,
    /// How many of them lie below the object's size.
    pub real_bytes: u64,
}

/// What rides on a striped write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StripedWrite {
    /// `Durable`: each server makes its part durable before replying.
    pub durability: Durability,
    /// Attributes of the whole object to set once the data is written.
    pub set_attrs: BTreeMap<String, Vec<u8>>,
    /// Attributes to remove, likewise.
    pub remove_attrs: Vec<String>,
}

/// Striped objects over the object servers a metadata service names.
/// Owned by one thread; it drives the servers of each operation on
/// threads of its own.
pub struct StripedClient {
    pub(crate) meta: Arc<dyn MetaStore>,
    pub(crate) pool: Pool,
    /// The deployment's identity, once asked for.
    deployment: Option<String>,
    /// Turns with each read, to spread reads over a column's copies.
    turn: usize,
    /// Erasure coders by data and parity units, made on first use.
    pub(crate) coders: BTreeMap<(u8, u8), Arc<Coder>>,
}

impl std::fmt::Debug for StripedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StripedClient")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// The connection a piece's requests go over.
pub(crate) fn endpoint(piece: &Piece) -> Endpoint {
    Endpoint {
        server: piece.server.clone(),
        partition: piece.partition,
    }
}

/// The partition a server URI selects (the default when it names none);
/// `None` if the URI does not parse, which connecting then reports.
pub(crate) fn partition_of(server: &str) -> Option<u64> {
    server
        .parse::<ObjUri>()
        .ok()
        .map(|u| u.partition.unwrap_or(DEFAULT_PARTITION))
}

pub(crate) fn meta_error(action: &'static str, name: &str, source: MetaError) -> StripedError {
    StripedError::Meta {
        action,
        name: name.to_owned(),
        source,
    }
}

/// The first failure of a fan-out over `pieces` (results in the same
/// order), as the error of the operation; the others are logged, since
/// only one can be returned.
pub(crate) fn first_failure<T>(
    op: &'static str,
    name: &str,
    pieces: &[(usize, &Piece)],
    results: Vec<Result<T, ObjError>>,
) -> Result<Vec<T>, StripedError> {
    let mut out = Vec::with_capacity(results.len());
    let mut failed = None;
    for ((index, piece), r) in pieces.iter().zip(results) {
        match r {
            Ok(v) => out.push(v),
            Err(source) if failed.is_none() => {
                failed = Some(StripedError::Piece {
                    op,
                    name: name.to_owned(),
                    piece: *index,
                    server: piece.server.clone(),
                    source: Box::new(source),
                })
            }
            Err(e) => tracing::warn!(
                object = name,
                piece = index,
                server = %piece.server,
                error = %e,
                "{op} of a piece failed as well"
            ),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

impl StripedClient {
    /// A client of the deployment `meta` describes; `options` apply to
    /// every object server connection (made on first use, then kept).
    pub fn new(meta: Arc<dyn MetaStore>, options: ObjOptions) -> Self {
        Self {
            meta,
            pool: Pool::new(options),
            deployment: None,
            turn: 0,
            coders: BTreeMap::new(),
        }
    }

    /// The next turn of the copy rotation.
    pub(crate) fn next_turn(&mut self) -> usize {
        self.turn = self.turn.wrapping_add(1);
        self.turn
    }

    /// The deployment's identity (asked of the metadata service once).
    pub(crate) fn deployment(&mut self) -> Result<&str, StripedError> {
        if self.deployment.is_none() {
            let id = self
                .meta
                .deployment()
                .map_err(|e| meta_error("read the deployment of", "", e))?;
            self.deployment = Some(id);
        }
        Ok(self.deployment.as_deref().unwrap_or_default())
    }

    /// The metadata service.
    pub fn meta(&self) -> &Arc<dyn MetaStore> {
        &self.meta
    }

    /// Removes every piece of `layout` (one already gone is not an error).
    pub(crate) fn remove_pieces(
        &mut self,
        name: &str,
        layout: &Layout,
    ) -> Result<(), StripedError> {
        let pieces: Vec<(usize, &Piece)> = layout.pieces.iter().enumerate().collect();
        self.on_pieces("remove", name, &pieces, |c, object| {
            match c.remove(object, Durability::Durable) {
                Err(e) if e.is_not_found() => Ok(()),
                other => other,
            }
        })
        .map(drop)
    }

    /// Runs `work` on each of `pieces` (by its object id), the servers in
    /// parallel; each piece's result in order, or the first failure as
    /// the error of `op` on `name`.
    pub(crate) fn on_pieces<T: Send>(
        &mut self,
        op: &'static str,
        name: &str,
        pieces: &[(usize, &Piece)],
        work: impl Fn(&mut ObjClient, u64) -> Result<T, ObjError> + Sync,
    ) -> Result<Vec<T>, StripedError> {
        let jobs: Vec<(Endpoint, u64)> = pieces
            .iter()
            .map(|(_, p)| (endpoint(p), p.object))
            .collect();
        let results = self.pool.fan_out(&jobs, |c, &object| work(c, object));
        first_failure(op, name, pieces, results)
    }

    /// The entry of `name`.
    pub fn stat(&self, name: &str) -> Result<Entry, StripedError> {
        self.meta
            .lookup(name)
            .map_err(|e| meta_error("look up", name, e))
    }

    /// Opens `name`, which must be ready.
    pub fn open(&mut self, name: &str) -> Result<StripedObject, StripedError> {
        let entry = self.stat(name)?;
        ready(&entry)?;
        Ok(StripedObject::new(entry))
    }

    /// Reads the bytes `pattern` names; see the module documentation for
    /// bytes past the size.
    pub fn read(
        &mut self,
        object: &mut StripedObject,
        pattern: &Pattern<'_>,
    ) -> Result<StripedRead, StripedError> {
        let name = object.name().to_owned();
        let plan_err = |source| StripedError::Plan {
            name: name.clone(),
            source,
        };
        pattern.total().map_err(plan_err)?;
        if pattern.end() > object.size() && object.replacing.is_none() {
            // Others may have written further since this handle looked;
            // a put may also have replaced the version it reads.
            let now = self.stat(&name)?;
            if now.layout != object.entry.layout {
                return Err(StripedError::Replaced { name });
            }
            object.entry = now;
        }
        ready(&object.entry)?;
        let plan = StripePlan::new(object.layout(), pattern, object.size()).map_err(plan_err)?;
        let layout = &object.entry.layout;
        let parts = match layout.redundancy {
            Redundancy::Replicas(_) => self.read_columns(&name, layout, &plan)?,
            Redundancy::Erasure { .. } => self.read_erasure(&name, layout, &plan)?,
        };
        let mut data = Vec::new();
        usize::try_from(plan.total)
            .ok()
            .and_then(|n| data.try_reserve_exact(n).ok())
            .ok_or_else(|| StripedError::Invalid {
                name: name.clone(),
                what: "read",
                why: format!("no memory for {} bytes", plan.total),
            })?;
        data.resize(plan.total as usize, 0);
        for (p, part) in plan.columns.iter().zip(&parts) {
            p.scatter(part, &mut data);
        }
        Ok(StripedRead {
            data,
            real_bytes: plan.moved,
        })
    }

    /// Writes `data` over the bytes `pattern` names (in pattern order; a
    /// later byte wins where the pattern names one twice), then grows the
    /// size and changes the attributes in one metadata update.
    pub fn write(
        &mut self,
        object: &mut StripedObject,
        pattern: &Pattern<'_>,
        data: &[u8],
        options: &StripedWrite,
    ) -> Result<(), StripedError> {
        let name = object.name().to_owned();
        writable(&object.entry)?;
        let plan = StripePlan::new(object.layout(), pattern, u64::MAX).map_err(|source| {
            StripedError::Plan {
                name: name.clone(),
                source,
            }
        })?;
        if plan.total != data.len() as u64 {
            return Err(StripedError::Invalid {
                name,
                what: "write",
                why: format!(
                    "{} data bytes for a pattern of {} bytes",
                    data.len(),
                    plan.total
                ),
            });
        }
        let layout = &object.entry.layout;
        if let Redundancy::Erasure { .. } = layout.redundancy {
            if object.entry.state != EntryState::Writing {
                return Err(StripedError::Invalid {
                    name,
                    what: "write",
                    why: format!(
                        "an erasure-coded object ({}) is written whole by a put, not in place",
                        layout.redundancy
                    ),
                });
            }
            self.write_erasure(&name, layout, &plan, data, options.durability)?;
            return self.grow(object, pattern, options);
        }
        // Every copy of each column the write touches.
        let pieces: Vec<(usize, &Piece)> = plan
            .columns
            .iter()
            .flat_map(|p| layout.column_pieces(p.column))
            .map(|i| (i, &layout.pieces[i]))
            .collect();
        let copies = pieces.len() / plan.columns.len().max(1);
        let jobs: Vec<(Endpoint, (u64, &_))> = pieces
            .iter()
            .enumerate()
            .map(|(k, (_, piece))| (endpoint(piece), (piece.object, &plan.columns[k / copies])))
            .collect();
        let plain = DataOptions {
            durability: options.durability,
            attrs: Vec::new(),
        };
        let results = self.pool.fan_out(&jobs, |c, &(id, p)| {
            c.write(id, &p.segments, &p.gather(data), &plain)
        });
        first_failure("write", &name, &pieces, results)?;
        self.grow(object, pattern, options)
    }

    /// After a write's data: grows the size to the pattern's end and
    /// changes the attributes, in one update.
    fn grow(
        &mut self,
        object: &mut StripedObject,
        pattern: &Pattern<'_>,
        options: &StripedWrite,
    ) -> Result<(), StripedError> {
        let end = pattern.end();
        let update = Update {
            size_at_least: (end > object.size()).then_some(end),
            set_attrs: options.set_attrs.clone(),
            remove_attrs: options.remove_attrs.clone(),
            ..Update::default()
        };
        self.update_entry(object, &update)
    }

    /// Applies `update` to the object's entry: in the handle alone for a
    /// put's new version (its entry is stored when the put completes);
    /// else in the metadata service, provided the name still holds the
    /// version this handle wrote (a put that replaced it meanwhile fails
    /// the update with [`StripedError::Replaced`] rather than take on
    /// sizes or attributes meant for the old one). Concurrent updates of
    /// one version compose: a conflict is retried.
    fn update_entry(
        &mut self,
        object: &mut StripedObject,
        update: &Update,
    ) -> Result<(), StripedError> {
        if *update == Update::default() {
            return Ok(());
        }
        if object.replacing.is_some() {
            update.apply(&mut object.entry);
            return Ok(());
        }
        let name = object.name().to_owned();
        let mut revision = object.entry.revision;
        for _ in 0..64 {
            match self.meta.update(&name, Some(revision), update) {
                Ok(entry) => {
                    object.entry = entry;
                    return Ok(());
                }
                Err(MetaError::Conflict { .. }) => {
                    let now = self.stat(&name)?;
                    if now.layout != object.entry.layout {
                        return Err(StripedError::Replaced { name });
                    }
                    revision = now.revision;
                }
                Err(MetaError::NotFound { .. }) => return Err(StripedError::Replaced { name }),
                Err(e) => return Err(meta_error("update", &name, e)),
            }
        }
        Err(StripedError::Invalid {
            name,
            what: "update",
            why: "the entry kept changing while it was being updated".into(),
        })
    }

    /// Sets and removes attributes of the whole object, in one metadata
    /// update.
    pub fn set_attrs(
        &mut self,
        object: &mut StripedObject,
        set: BTreeMap<String, Vec<u8>>,
        remove: Vec<String>,
    ) -> Result<(), StripedError> {
        let update = Update {
            set_attrs: set,
            remove_attrs: remove,
            ..Update::default()
        };
        self.update_entry(object, &update)
    }

    /// Makes every piece durable, the servers in parallel.
    pub fn flush(&mut self, object: &StripedObject) -> Result<(), StripedError> {
        let pieces: Vec<(usize, &Piece)> = object.layout().pieces.iter().enumerate().collect();
        self.on_pieces("flush", object.name(), &pieces, |c, id| {
            c.flush(FlushScope::Object(id))
        })
        .map(drop)
    }

    /// Removes `name`: its pieces, then its entry.
    pub fn remove(&mut self, name: &str) -> Result<(), StripedError> {
        self.remove_until(name, RemoveStep::Deleted)
    }

    /// [`remove`](Self::remove) up to `last` (see [`RemoveStep`]).
    pub fn remove_until(&mut self, name: &str, last: RemoveStep) -> Result<(), StripedError> {
        let removing = Update {
            state: Some(EntryState::Removing),
            ..Update::default()
        };
        // Another writer may change the entry between the lookup and the
        // update; the revision check makes sure the layout whose pieces
        // go is the one marked. Writers only grow sizes, so few retries
        // are ever needed.
        let mut tries = 0;
        let entry = loop {
            let entry = self.stat(name)?;
            if entry.state == EntryState::Removing {
                break entry;
            }
            match self.meta.update(name, Some(entry.revision), &removing) {
                Ok(e) => break e,
                Err(MetaError::Conflict { .. }) if tries < 16 => tries += 1,
                Err(e) => return Err(meta_error("mark for removal", name, e)),
            }
        };
        if last == RemoveStep::Removing {
            return Ok(());
        }
        self.finish_removal(&entry, last)
    }

    /// Removes the pieces of an entry in `Removing`, then (unless `last`
    /// says to stop before) the entry.
    pub(crate) fn finish_removal(
        &mut self,
        entry: &Entry,
        last: RemoveStep,
    ) -> Result<(), StripedError> {
        self.remove_pieces(&entry.name, &entry.layout)?;
        if let Some(pending) = &entry.pending {
            // A put's new version, never switched to: its put fails.
            self.remove_pieces(&entry.name, pending)?;
        }
        if last == RemoveStep::Pieces {
            return Ok(());
        }
        // Delete the entry whose pieces went, not one made again under the
        // same name meanwhile: compare the revision, and on a conflict
        // look again (a writer holding an old handle may have grown the
        // size of the entry being removed).
        let name = entry.name.as_str();
        let mut revision = entry.revision;
        for _ in 0..16 {
            match self.meta.delete(name, Some(revision)) {
                // Another remover finished first.
                Ok(()) | Err(MetaError::NotFound { .. }) => return Ok(()),
                Err(MetaError::Conflict { .. }) => match self.meta.lookup(name) {
                    Ok(now) if now.state == EntryState::Removing && now.layout == entry.layout => {
                        revision = now.revision
                    }
                    Ok(_) | Err(MetaError::NotFound { .. }) => return Ok(()),
                    Err(e) => return Err(meta_error("look up", name, e)),
                },
                Err(e) => return Err(meta_error("delete", name, e)),
            }
        }
        Err(StripedError::Invalid {
            name: name.into(),
            what: "removal",
            why: "the entry kept changing while it was being deleted".into(),
        })
    }
}

/// A handle may write to an entry that is ready, or that its own put
/// is filling (only that put's handle has one: [`StripedClient::open`]
/// refuses it).
fn writable(entry: &Entry) -> Result<(), StripedError> {
    if entry.state == EntryState::Writing {
        return Ok(());
    }
    ready(entry)
}

fn ready(entry: &Entry) -> Result<(), StripedError> {
    if entry.state == EntryState::Ready {
        Ok(())
    } else {
        Err(StripedError::NotReady {
            name: entry.name.clone(),
            state: entry.state,
        })
    }
}
