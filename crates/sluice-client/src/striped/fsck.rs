//! [`StripedClient::fsck`]: finds what crashes between the metadata and
//! data steps of creates and removes left half done (see the order in
//! [`striped`](super::striped)), and finishes or undoes it; reports puts
//! that did not finish; removes pieces no entry names, of its own
//! deployment only (object servers may be shared by several).

use crate::Durability;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_meta::{Entry, EntryState, Layout, MetaError, PendingChange, Piece, Update};

use super::client::{
    endpoint, first_failure, meta_error, partition_of, RemoveStep, StripedClient, StripedError,
    PIECE_COLLECTION, PIECE_DEPLOYMENT_ATTR, PIECE_OF_ATTR, PIECE_PUT_ATTR,
};
use super::pool::Endpoint;
use crate::obj::Value;

/// The server's attribute holding when an object was made (nanoseconds
/// since the Unix epoch).
const CREATED_ATTR: &str = "sluice.created";

/// How fsck treats what may still be in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsckOptions {
    /// A piece no entry names is removed only once it is this old: a
    /// create makes its pieces before its entry, so a younger one may
    /// belong to a create still running. Zero when nothing else runs.
    pub grace: Duration,
}

impl Default for FsckOptions {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(600),
        }
    }
}

/// A piece that no entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub piece: Piece,
    /// The striped object it was made for.
    pub of: String,
}

/// What fsck found and did.
#[derive(Debug, Default)]
pub struct FsckReport {
    /// Entries left in `Creating` with every piece there, now `Ready`.
    pub finished: Vec<String>,
    /// Entries left in `Creating` with pieces missing, removed.
    pub undone: Vec<String>,
    /// Entries left in `Removing`, whose removal is now complete.
    pub removed: Vec<String>,
    /// Pieces no entry named, removed.
    pub orphans: Vec<Orphan>,
    /// Objects whose put did not finish (entries left `Writing`): not
    /// complete, so not readable; remove them and put them again.
    pub incomplete: Vec<String>,
    /// Objects a put began to replace and did not finish (its pending
    /// version older than the grace period): the old content stays, the
    /// new version is forgotten and its pieces removed.
    pub abandoned: Vec<String>,
    /// Pieces no entry names that carry no deployment mark (made before
    /// pieces were marked): kept, since they may be another
    /// deployment's.
    pub unmarked: Vec<Orphan>,
    /// What could not be checked or repaired (a server down, say); run
    /// fsck again once it is back.
    pub failures: Vec<StripedError>,
}

impl FsckReport {
    /// Whether fsck found everything consistent (nothing to repair and
    /// nothing it could not check).
    pub fn is_clean(&self) -> bool {
        self.finished.is_empty()
            && self.undone.is_empty()
            && self.removed.is_empty()
            && self.orphans.is_empty()
            && self.incomplete.is_empty()
            && self.abandoned.is_empty()
            && self.failures.is_empty()
    }
}

/// The time a piece was made, from its [`CREATED_ATTR`], as time since
/// the Unix epoch.
fn created_at(value: Option<&Value>) -> Option<Duration> {
    value
        .and_then(Value::as_integer)
        .and_then(|ns| u64::try_from(ns).ok())
        .map(Duration::from_nanos)
}

fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

fn list_error(e: MetaError) -> StripedError {
    meta_error("list entries for", "", e)
}

/// What a check of one `Creating` entry's pieces found.
enum Pieces {
    /// Every piece is there; `put`: they were made by a put.
    AllThere {
        put: bool,
    },
    Missing,
}

impl StripedClient {
    /// Finishes creates and removes a crash interrupted, and removes
    /// pieces no entry names. The metadata service must answer; object
    /// servers that do not are reported in [`FsckReport::failures`].
    pub fn fsck(&mut self, options: &FsckOptions) -> Result<FsckReport, StripedError> {
        self.fsck_with_progress(options, |_, _| {})
    }

    /// [`fsck`](Self::fsck), calling `progress(done, total)` as it goes:
    /// once with `done` 0 when it has counted the `total` entries, then
    /// after each entry it checked, the last time with `done == total`
    /// (the orphaned pieces are looked for after that). Entries are read
    /// a page at a time, counted in one pass and checked in another, so
    /// memory does not grow with their number; should names come or go
    /// between the passes, `total` follows what was checked.
    pub fn fsck_with_progress(
        &mut self,
        options: &FsckOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<FsckReport, StripedError> {
        let mut report = FsckReport::default();
        let meta = Arc::clone(&self.meta);
        let mut total = 0u64;
        for entry in sluice_meta::entries(&*meta, "") {
            entry.map_err(list_error)?;
            total += 1;
        }
        progress(0, total);
        let mut checked = 0u64;
        for entry in sluice_meta::entries(&*meta, "") {
            let entry = entry.map_err(list_error)?;
            if let Some(pending) = &entry.pending {
                if let Err(e) = self.settle_pending(&entry, pending, options, &mut report) {
                    report.failures.push(e);
                }
            }
            let done = match entry.state {
                EntryState::Ready => Ok(()),
                EntryState::Writing => {
                    report.incomplete.push(entry.name.clone());
                    Ok(())
                }
                EntryState::Creating => self.settle_creating(&entry, &mut report),
                EntryState::Removing => self
                    .finish_removal(&entry, RemoveStep::Deleted)
                    .map(|()| report.removed.push(entry.name.clone())),
            };
            if let Err(e) = done {
                report.failures.push(e);
            }
            checked += 1;
            total = total.max(checked);
            progress(checked, total);
        }
        if checked < total {
            progress(checked, checked);
        }
        self.remove_orphans(options, &mut report)?;
        Ok(report)
    }

    /// A `Creating` entry: ready if every piece is there and marked as
    /// its own (`Writing`, an incomplete put, if a put made them), else
    /// removed.
    fn settle_creating(
        &mut self,
        entry: &Entry,
        report: &mut FsckReport,
    ) -> Result<(), StripedError> {
        let name = entry.name.as_str();
        match self.check_pieces(entry)? {
            Pieces::AllThere { put } => {
                let state = if put {
                    EntryState::Writing
                } else {
                    EntryState::Ready
                };
                let ready = Update {
                    state: Some(state),
                    ..Update::default()
                };
                match self.meta.update(name, Some(entry.revision), &ready) {
                    Ok(_) if put => report.incomplete.push(name.to_owned()),
                    Ok(_) => report.finished.push(name.to_owned()),
                    // Its creator (or another fsck) moved it on.
                    Err(MetaError::Conflict { .. } | MetaError::NotFound { .. }) => {}
                    Err(e) => return Err(meta_error("make ready", name, e)),
                }
            }
            Pieces::Missing => {
                let removing = Update {
                    state: Some(EntryState::Removing),
                    ..Update::default()
                };
                match self.meta.update(name, Some(entry.revision), &removing) {
                    Ok(now) => {
                        self.finish_removal(&now, RemoveStep::Deleted)?;
                        report.undone.push(name.to_owned());
                    }
                    Err(MetaError::Conflict { .. } | MetaError::NotFound { .. }) => {}
                    Err(e) => return Err(meta_error("mark for removal", name, e)),
                }
            }
        }
        Ok(())
    }

    /// A put's pending version: forgotten once each of its pieces is
    /// gone or older than the grace period (its put presumably died; one
    /// still running then fails its switch, as the entry changed), and
    /// its pieces left to the orphan pass; kept while any is younger.
    fn settle_pending(
        &mut self,
        entry: &Entry,
        pending: &Layout,
        options: &FsckOptions,
        report: &mut FsckReport,
    ) -> Result<(), StripedError> {
        let pieces: Vec<(usize, &Piece)> = pending.pieces.iter().enumerate().collect();
        let jobs: Vec<(Endpoint, u64)> = pieces
            .iter()
            .map(|(_, p)| (endpoint(p), p.object))
            .collect();
        let results = self.pool.fan_out(&jobs, |c, &object| {
            match c.get_attrs(object, &[CREATED_ATTR]) {
                Ok(a) => Ok(created_at(a.get(CREATED_ATTR))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            }
        });
        let created = first_failure("check", &entry.name, &pieces, results)?;
        let now = since_epoch();
        if created
            .iter()
            .flatten()
            .any(|c| now.saturating_sub(*c) < options.grace)
        {
            return Ok(());
        }
        let forget = Update {
            pending: PendingChange::Clear,
            ..Update::default()
        };
        match self.meta.update(&entry.name, Some(entry.revision), &forget) {
            Ok(_) => report.abandoned.push(entry.name.clone()),
            // Its put (or another client) moved it on.
            Err(MetaError::Conflict { .. } | MetaError::NotFound { .. }) => {}
            Err(e) => return Err(meta_error("forget the new version of", &entry.name, e)),
        }
        Ok(())
    }

    fn check_pieces(&mut self, entry: &Entry) -> Result<Pieces, StripedError> {
        let pieces: Vec<(usize, &Piece)> = entry.layout.pieces.iter().enumerate().collect();
        let jobs: Vec<(Endpoint, u64)> = pieces
            .iter()
            .map(|(_, p)| (endpoint(p), p.object))
            .collect();
        let results = self.pool.fan_out(&jobs, |c, &object| {
            match c.get_attrs(object, &[PIECE_OF_ATTR, PIECE_PUT_ATTR]) {
                Ok(a) => {
                    let ours =
                        matches!(a.get(PIECE_OF_ATTR), Some(Value::Text(of)) if *of == entry.name);
                    Ok(ours.then(|| a.get(PIECE_PUT_ATTR).is_some()))
                }
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e),
            }
        });
        let found = first_failure("check", &entry.name, &pieces, results)?;
        Ok(if found.iter().all(Option::is_some) {
            Pieces::AllThere {
                put: found.contains(&Some(true)),
            }
        } else {
            Pieces::Missing
        })
    }

    /// Removes pieces in [`PIECE_COLLECTION`] on every known server that
    /// no entry names and that are older than the grace period.
    fn remove_orphans(
        &mut self,
        options: &FsckOptions,
        report: &mut FsckReport,
    ) -> Result<(), StripedError> {
        // Entries as they are now, after the repairs above, a page at a
        // time: only the pieces they name are kept (each server's URI
        // once).
        let meta = Arc::clone(&self.meta);
        let mut server_ids: HashMap<String, usize> = HashMap::new();
        let mut named: HashSet<(usize, u64, u64)> = HashSet::new();
        let mut endpoints: BTreeSet<(String, u64)> = BTreeSet::new();
        for entry in sluice_meta::entries(&*meta, "") {
            let entry = entry.map_err(list_error)?;
            for p in entry
                .layout
                .pieces
                .into_iter()
                .chain(entry.pending.into_iter().flat_map(|l| l.pieces))
            {
                let next_id = server_ids.len();
                let id = *server_ids.entry(p.server.clone()).or_insert(next_id);
                named.insert((id, p.partition, p.object));
                endpoints.insert((p.server, p.partition));
            }
        }
        let deployment = self.deployment()?.to_owned();
        let servers = self
            .meta
            .servers()
            .map_err(|e| meta_error("list servers for", "", e))?;
        endpoints.extend(
            servers
                .iter()
                .filter_map(|s| partition_of(s).map(|p| (s.clone(), p))),
        );
        let jobs: Vec<(Endpoint, ())> = endpoints
            .iter()
            .map(|(server, partition)| {
                let e = Endpoint {
                    server: server.clone(),
                    partition: *partition,
                };
                (e, ())
            })
            .collect();
        let listed = self.pool.fan_out(&jobs, |c, ()| {
            let attrs = [PIECE_OF_ATTR, CREATED_ATTR, PIECE_DEPLOYMENT_ATTR];
            match c.list(PIECE_COLLECTION, Some(&attrs)) {
                Err(e) if e.is_not_found() => Ok(Vec::new()),
                other => other,
            }
        });
        let now = since_epoch();
        let mut orphans: Vec<Orphan> = Vec::new();
        for ((endpoint, ()), r) in jobs.iter().zip(listed) {
            let members = match r {
                Ok(m) => m,
                Err(source) => {
                    report.failures.push(StripedError::Server {
                        op: "listing pieces",
                        server: endpoint.server.clone(),
                        source: Box::new(source),
                    });
                    continue;
                }
            };
            for m in members {
                let Some(Value::Text(of)) = m.attrs.get(PIECE_OF_ATTR) else {
                    continue; // not marked: not ours to remove
                };
                let named_here = server_ids
                    .get(&endpoint.server)
                    .is_some_and(|&id| named.contains(&(id, endpoint.partition, m.object)));
                if named_here {
                    continue;
                }
                let orphan = || Orphan {
                    piece: Piece {
                        server: endpoint.server.clone(),
                        partition: endpoint.partition,
                        object: m.object,
                    },
                    of: of.clone(),
                };
                match m.attrs.get(PIECE_DEPLOYMENT_ATTR) {
                    Some(Value::Text(d)) if *d == deployment => {}
                    // Another deployment's: its own fsck's business.
                    Some(_) => continue,
                    None => {
                        report.unmarked.push(orphan());
                        continue;
                    }
                }
                let created = created_at(m.attrs.get(CREATED_ATTR));
                let old_enough = created.is_none_or(|c| now.saturating_sub(c) >= options.grace);
                if old_enough {
                    orphans.push(orphan());
                }
            }
        }
        let jobs: Vec<(Endpoint, u64)> = orphans
            .iter()
            .map(|o| (endpoint(&o.piece), o.piece.object))
            .collect();
        let removed = self.pool.fan_out(&jobs, |c, &object| {
            match c.remove(object, Durability::Durable) {
                Err(e) if e.is_not_found() => Ok(()),
                other => other,
            }
        });
        for (o, r) in orphans.into_iter().zip(removed) {
            match r {
                Ok(()) => report.orphans.push(o),
                Err(source) => report.failures.push(StripedError::Server {
                    op: "removing an orphaned piece",
                    server: o.piece.server,
                    source: Box::new(source),
                }),
            }
        }
        Ok(())
    }
}
