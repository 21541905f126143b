//! Replacing an object's data with another object's:
//! [`ObjectStore::replace_data`], and finishing at open the replaces a
//! crash interrupted. The crash points and why each is safe are in
//! `docs/design/0010-all-or-nothing-puts.md` ("Plain objects").

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rusqlite::{params, Connection};

use crate::error::{DbContext, ObjStoreError};
use crate::{ObjectId, ObjectRef, PartitionId};

use super::create::delete_rows;
use super::files::fsync_dir;
use super::journal::RowsNeed;
use super::rows::{prepare_length_update, put_change, ChangeRow, DataRows};
use super::shard::{shard_index, Body, Cached};
use super::times::write_times;
use super::types::ObjectInfo;
use super::{lock, now, ObjectStore};

/// Where [`ObjectStore::replace_data_until`] stops, as a crash there
/// would: each step is on disk, nothing after it is. For crash tests.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaceStop {
    /// A file source's bytes synced; nothing committed.
    Synced,
    /// The metadata committed (with, for a file source, the row that
    /// says its file is still to be renamed).
    Committed,
    /// A file source's file renamed over the target's, its folder not
    /// synced.
    Renamed,
    /// The folder synced; the rename's row not deleted yet.
    FolderSynced,
}

/// Deletes the target's journal rows (its old bytes are going) and
/// every row of the source, and commits the target's new length.
fn switch_rows(
    tx: &Connection,
    target: ObjectRef,
    source: ObjectRef,
    row: &ChangeRow,
) -> Result<(), ObjStoreError> {
    // The source first: an unknown source fails before anything changes.
    delete_rows(tx, source)?;
    let (p, t) = (target.partition.0 as i64, target.object.0 as i64);
    tx.execute(
        "DELETE FROM journal WHERE partition = ?1 AND object = ?2",
        params![p, t],
    )
    .db("remove the target's journal rows")?;
    // The rows of a data change on the target: the new length and data
    // time, and the inline bytes (or the inline row removed).
    put_change(tx, &mut prepare_length_update(tx)?, row).map(drop)
}

impl ObjectStore {
    /// Replaces `target`'s bytes and logical length with `source`'s and
    /// removes `source`, as one change: after any crash `target` holds
    /// its old bytes or `source`'s, whole, and `source` is either still
    /// there or gone (never both objects on one file). `target` keeps
    /// its id, creation time, attributes and collections; its
    /// data-modified time is now. Both must be in one partition and
    /// differ. `durable`: on disk before it returns. It is whenever
    /// either object has a file: a source's file is synced first and
    /// the switch committed synced, as the rename or removal of a file
    /// that follows must never outlive the commit.
    pub fn replace_data(
        &self,
        target: ObjectRef,
        source: ObjectRef,
        durable: bool,
    ) -> Result<ObjectInfo, ObjStoreError> {
        self.replace_data_until(target, source, durable, None)
    }

    /// [`ObjectStore::replace_data`], stopped after `stop` as a crash
    /// there would leave it (the store must not be used after such a
    /// stop, only dropped and opened again). For crash tests.
    #[doc(hidden)]
    pub fn replace_data_until(
        &self,
        target: ObjectRef,
        source: ObjectRef,
        durable: bool,
        stop: Option<ReplaceStop>,
    ) -> Result<ObjectInfo, ObjStoreError> {
        if target == source {
            return Err(ObjStoreError::ReplaceSelf { object: target });
        }
        if target.partition != source.partition {
            return Err(ObjStoreError::ReplaceAcrossPartitions {
                target,
                source_object: source,
            });
        }
        let (ti, si) = (shard_index(target), shard_index(source));
        let first = self.shard(if ti <= si { target } else { source });
        let _first = first.write();
        let _second =
            (ti != si).then(|| self.shard(if ti <= si { source } else { target }).write());
        // (Loading either refuses an object still waiting for a rename.)
        let t = self.cached(self.shard(target), target)?;
        let s = self.cached(self.shard(source), source)?;
        let result = match &s.body {
            Body::Inline(bytes) => {
                self.replace_from_inline(target, source, &t, s.info.length, bytes, durable, stop)
            }
            Body::File(file) => {
                self.replace_from_file(target, source, &t, s.info.length, file, stop)
            }
        };
        // Whatever happened, both are loaded afresh on their next use.
        self.shard(target).forget(target);
        self.shard(source).forget(source);
        result
    }

    /// Whether `object` waits for a rename a committed replace could not
    /// make (it may not be used until the store is opened again).
    pub(super) fn check_not_replacing(&self, object: ObjectRef) -> Result<(), ObjStoreError> {
        if self.unfinished_replaces.load(Ordering::Relaxed) != 0
            && lock(&self.unfinished).contains(&object)
        {
            return Err(ObjStoreError::ReplaceUnfinished { object });
        }
        Ok(())
    }

    /// An inline source: its bytes become the target's inline row in one
    /// commit, then the target's old file (ignored from that commit on,
    /// as an object with an inline row has no file) is removed.
    #[allow(clippy::too_many_arguments)] // the two objects' states, as loaded
    fn replace_from_inline(
        &self,
        target: ObjectRef,
        source: ObjectRef,
        t: &Cached,
        length: u64,
        bytes: &Arc<Vec<u8>>,
        durable: bool,
        stop: Option<ReplaceStop>,
    ) -> Result<ObjectInfo, ObjStoreError> {
        let at = now();
        let row = ChangeRow {
            object: target,
            length,
            at,
            attrs: Vec::new(),
            rows: if bytes.is_empty() {
                // No inline row: an object without one or a file is
                // empty, and a file left behind is cut to the length
                // (0) when it is loaded.
                DataRows::Uninline
            } else {
                DataRows::Inline(Arc::clone(bytes))
            },
        };
        // Synced where the target had a file: the file's removal below
        // must never outlive the commit that stops it being read.
        let synced = durable || matches!(t.body, Body::File(_));
        self.commit_switch(target, source, row, synced, false)?;
        let info = ObjectInfo {
            length,
            data_modified: at,
            ..t.info
        };
        if stop == Some(ReplaceStop::Committed) {
            return Ok(info);
        }
        for gone in [target, source] {
            match std::fs::remove_file(self.data_path(gone)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                // Only space: the inline row (or length 0) hides it.
                Err(e) => {
                    tracing::warn!(object = %gone, error = %e, "removing an object's replaced file failed; it is ignored")
                }
            }
        }
        Ok(info)
    }

    /// A source in a file: synced, then the switch committed synced with
    /// a row naming the rename, then the rename, the folder synced, and
    /// the row deleted (see the module's design note for each crash
    /// point).
    fn replace_from_file(
        &self,
        target: ObjectRef,
        source: ObjectRef,
        t: &Cached,
        length: u64,
        file: &std::fs::File,
        stop: Option<ReplaceStop>,
    ) -> Result<ObjectInfo, ObjStoreError> {
        if lock(&self.journaled)
            .get(&source)
            .is_some_and(|j| j.need == RowsNeed::Replay)
        {
            return Err(ObjStoreError::NotApplied { object: source });
        }
        // Every byte of the source in its file, durably: its journal
        // rows go with it in the commit.
        file.sync_data().map_err(self.io_err(source, "fsync"))?;
        self.sync_new_files(source.partition)?;
        if stop == Some(ReplaceStop::Synced) {
            return Ok(t.info);
        }
        let at = now();
        let row = ChangeRow {
            object: target,
            length,
            at,
            attrs: Vec::new(),
            rows: DataRows::Uninline,
        };
        let seq = self.commit_switch(target, source, row, true, true)?;
        let info = ObjectInfo {
            length,
            data_modified: at,
            ..t.info
        };
        if stop == Some(ReplaceStop::Committed) {
            return Ok(info);
        }
        let renamed = std::fs::rename(self.data_path(source), self.data_path(target))
            .map_err(self.io_err(target, "rename the replacing file over"));
        if stop == Some(ReplaceStop::Renamed) {
            return renamed.map(|()| info);
        }
        if let Err(e) = renamed.and_then(|()| fsync_dir(&self.partition_dir(target.partition))) {
            // Committed: the target's file must not be used until the
            // rename is made (the next open makes it).
            lock(&self.unfinished).insert(target);
            self.unfinished_replaces.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        if stop == Some(ReplaceStop::FolderSynced) {
            return Ok(info);
        }
        // Not synced: if this is lost, the next open finds the source's
        // file gone and deletes the row then.
        let done = self.db.commit(false, move |tx| {
            tx.execute("DELETE FROM replaces WHERE seq = ?1", [seq])
                .db("delete a finished replace")?;
            Ok(())
        });
        if let Err(e) = done {
            tracing::warn!(object = %target, error = %e, "deleting a finished replace's row failed; the next open deletes it");
        }
        Ok(info)
    }

    /// Commits the switch: the target's new length and bytes, the
    /// source's rows gone, and with `renames` the row naming the rename
    /// still to make (its sequence number is returned). The journal,
    /// cache and dirty state of both follow.
    fn commit_switch(
        &self,
        target: ObjectRef,
        source: ObjectRef,
        row: ChangeRow,
        durable: bool,
        renames: bool,
    ) -> Result<i64, ObjStoreError> {
        let times = self.take_times();
        let kept = times.clone();
        let seq = self
            .db
            .commit(durable, move |tx| {
                write_times(tx, &times)?;
                switch_rows(tx, target, source, &row)?;
                if !renames {
                    return Ok(0);
                }
                tx.execute(
                    "INSERT INTO replaces (partition, source, target) VALUES (?1, ?2, ?3)",
                    params![
                        target.partition.0 as i64,
                        source.object.0 as i64,
                        target.object.0 as i64
                    ],
                )
                .db("record the rename of a replace")?;
                Ok(tx.last_insert_rowid())
            })
            .inspect_err(|_| self.restore_times(kept))?;
        // Both objects' journal rows are gone, and neither file is one
        // a flush needs to sync (the source's was synced, the target's
        // old one is replaced).
        for o in [target, source] {
            self.forget_journaled(o);
            lock(&self.dirty).remove(&o);
        }
        Ok(seq)
    }

    /// Finishes the replaces a crash left between their commit and the
    /// rename of the source's file (run at open, before anything else
    /// touches the files): a source file still there is renamed over
    /// the target's, one already gone was renamed before the crash; the
    /// folders are synced, then the rows deleted in a synced commit.
    pub(super) fn finish_replaces(&self) -> Result<(), ObjStoreError> {
        type Row = (i64, i64, i64);
        let rows: Vec<Row> = {
            let conn = self.reader();
            let mut stmt = conn
                .prepare("SELECT partition, source, target FROM replaces ORDER BY seq")
                .db("prepare the replaces' lookup")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .db("read the replaces")?
                .collect::<Result<Vec<Row>, _>>()
                .db("read the replaces")?;
            rows
        };
        if rows.is_empty() {
            return Ok(());
        }
        let mut partitions = Vec::new();
        let mut renamed = 0usize;
        for &(p, s, t) in &rows {
            let partition = PartitionId(p as u64);
            let object = |id: i64| ObjectRef {
                partition,
                object: ObjectId(id as u64),
            };
            let (source, target) = (object(s), object(t));
            match std::fs::rename(self.data_path(source), self.data_path(target)) {
                Ok(()) => renamed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(self.io_err(target, "rename the replacing file over")(e)),
            }
            if !partitions.contains(&partition) {
                partitions.push(partition);
            }
        }
        // Even where nothing was renamed now: a rename made before the
        // crash must be on disk before its row goes.
        for p in partitions {
            fsync_dir(&self.partition_dir(p))?;
        }
        tracing::info!(
            replaces = rows.len(),
            renamed,
            "finished the object store's interrupted replaces"
        );
        self.db.commit(true, |tx| {
            tx.execute("DELETE FROM replaces", [])
                .db("delete finished replaces")?;
            Ok(())
        })
    }
}
