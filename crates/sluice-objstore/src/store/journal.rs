//! The journal of durable small writes and of changes that set
//! attributes on object files: which objects have rows outstanding and
//! what their rows need ([`Journaled`], [`RowsNeed`]), the replay at
//! open, and retirement once the journal holds too many bytes.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::sync::atomic::Ordering;

use crate::error::{DbContext, ObjStoreError};
use crate::segments::Segment;
use crate::{data, ObjectId, ObjectRef, PartitionId};

use super::{lock, ObjectStore};

#[cfg(doc)]
use super::change::Deferred;
#[cfg(doc)]
use super::types::StoreOptions;

/// An object with journal rows outstanding: the newest row's sequence
/// number, the bytes its rows hold, and what retiring them needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Journaled {
    pub(super) seq: i64,
    pub(super) bytes: u64,
    pub(super) need: RowsNeed,
}

/// What an object's journal rows need before they may be deleted,
/// from least to most (an object's rows need the most any of them
/// does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum RowsNeed {
    /// Nothing: every row is a change that was not durable and whose
    /// bytes are in the file now (a [`Deferred`] change, applied). Only
    /// a kill between its commit and its file write needed the row; a
    /// power loss may lose such a change anyway. The next change to the
    /// object deletes them in a commit of its own, or in its own commit,
    /// before it writes the file, so it pays no sync and is journaled
    /// only if it would be without them.
    Nothing,
    /// The file synced: some rows hold the only durable copy of bytes
    /// that are in the file but not synced there.
    Sync,
    /// The next open's replay: some row's bytes could not be written
    /// into the file after its commit. Every later change to the object
    /// is journaled, and no flush retires the rows.
    Replay,
}

impl ObjectStore {
    /// Applies the journal's rows to the object files in order, syncs
    /// the files, then deletes the rows in a synced commit. A crash
    /// meanwhile replays again: applying a row twice leaves what
    /// applying it once does.
    pub(super) fn replay_journal(&self) -> Result<(), ObjStoreError> {
        type Row = (i64, i64, i64, i64, Option<Vec<u8>>);
        let rows: Vec<Row> = {
            let conn = self.reader();
            let mut stmt = conn
                .prepare("SELECT partition, object, offset, len, data FROM journal ORDER BY seq")
                .db("prepare journal replay")?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .db("read journal")?
                .collect::<Result<Vec<Row>, _>>()
                .db("read journal")?;
            rows
        };
        if rows.is_empty() {
            return Ok(());
        }
        let mut files: HashMap<ObjectRef, File> = HashMap::new();
        for (p, o, offset, len, bytes) in &rows {
            let object = ObjectRef {
                partition: PartitionId(*p as u64),
                object: ObjectId(*o as u64),
            };
            let file = match files.entry(object) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(self.open_for_write(object, false)?)
                }
            };
            let (offset, len) = (*offset as u64, *len as u64);
            match bytes {
                Some(b) => data::write_segments(file, &[Segment::new(offset, len)], b),
                None => data::punch(file, offset, len),
            }
            .map_err(self.io_err(object, "replay journal into"))?;
        }
        for (&object, file) in &files {
            file.sync_data().map_err(self.io_err(object, "fsync"))?;
        }
        let partitions: HashSet<PartitionId> = files.keys().map(|o| o.partition).collect();
        for p in partitions {
            self.sync_new_files(p)?;
        }
        tracing::info!(
            rows = rows.len(),
            objects = files.len(),
            "replayed the object store's journal"
        );
        self.db.commit(true, |tx| {
            tx.execute("DELETE FROM journal", [])
                .db("retire replayed journal")?;
            Ok(())
        })
    }

    /// Whether `object` has journal rows outstanding.
    pub(super) fn has_journal(&self, object: ObjectRef) -> bool {
        self.journaled_objects.load(Ordering::Relaxed) != 0
            && lock(&self.journaled).contains_key(&object)
    }

    /// Retires the journal once it holds more than
    /// [`StoreOptions::journal_retire`] bytes. Called after a change,
    /// outside its shard: retiring syncs other objects' files. The
    /// change is done and durable as asked whatever happens here; a
    /// failed retirement leaves the rows to the next one.
    pub(super) fn retire_if_due(&self) {
        if self.journal_bytes.load(Ordering::Relaxed) > self.options.journal_retire {
            if let Err(e) = self.retire_journal() {
                tracing::warn!(error = %e, "syncing journaled object files failed; the journal keeps its rows");
            }
        }
    }

    /// Syncs every journaled object's file and retires its rows (run
    /// once the journal holds [`StoreOptions::journal_retire`] bytes).
    fn retire_journal(&self) -> Result<(), ObjStoreError> {
        let picked: Vec<ObjectRef> = {
            let journaled = lock(&self.journaled);
            let mut dirty = lock(&self.dirty);
            let picked: Vec<ObjectRef> = journaled.keys().copied().collect();
            for o in &picked {
                dirty.remove(o);
            }
            picked
        };
        self.sync_objects(&picked, None)
    }

    /// Drops an object's journal state (its rows were retired or
    /// removed with it).
    pub(super) fn forget_journaled(&self, object: ObjectRef) {
        if self.journaled_objects.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut journaled = lock(&self.journaled);
        if let Some(j) = journaled.remove(&object) {
            self.journaled_objects
                .store(journaled.len(), Ordering::Relaxed);
            self.journal_sub(j.bytes);
        }
    }

    pub(super) fn journal_sub(&self, bytes: u64) {
        let _ = self
            .journal_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
    }
}
