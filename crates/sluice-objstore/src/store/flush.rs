//! Flushes: the dirty object files and the folders that gained files
//! are synced, then a synced commit retires the journal rows the syncs
//! covered and writes the data-modified times waiting in memory.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;

use rusqlite::params;

use crate::error::{DbContext, ObjStoreError};
use crate::{ObjectId, ObjectRef, PartitionId};

use super::journal::{Journaled, RowsNeed};
use super::rows::{check_collection, check_partition, put_rows, read_info, DataRows};
use super::times::write_times;
use super::{lock, ObjectStore};

impl ObjectStore {
    /// Makes every acknowledged change to `object` durable.
    pub fn flush_object(&self, object: ObjectRef) -> Result<(), ObjStoreError> {
        read_info(&self.reader(), object)?;
        self.flush_where(object.partition, |o| o == object)
    }

    /// Makes every acknowledged change to the members of a collection
    /// durable.
    pub fn flush_collection(
        &self,
        partition: PartitionId,
        name: &str,
    ) -> Result<(), ObjStoreError> {
        let members: HashSet<ObjectId> = {
            let conn = self.reader();
            check_collection(&conn, partition, name)?;
            let mut stmt = conn
                .prepare_cached(
                    "SELECT object FROM members WHERE partition = ?1 AND collection = ?2",
                )
                .db("prepare collection members")?;
            let ids = stmt
                .query_map(params![partition.0 as i64, name], |r| r.get::<_, i64>(0))
                .db("list collection members")?
                .collect::<Result<Vec<_>, _>>()
                .db("list collection members")?;
            ids.into_iter().map(|id| ObjectId(id as u64)).collect()
        };
        self.flush_where(partition, |o| members.contains(&o.object))
    }

    /// Makes every acknowledged change in a partition durable.
    pub fn flush_partition(&self, partition: PartitionId) -> Result<(), ObjStoreError> {
        check_partition(&self.reader(), partition)?;
        self.flush_where(partition, |o| o.partition == partition)
    }

    fn flush_where(
        &self,
        partition: PartitionId,
        pick: impl Fn(ObjectRef) -> bool,
    ) -> Result<(), ObjStoreError> {
        let picked: Vec<ObjectRef> = {
            let mut dirty = lock(&self.dirty);
            let picked: Vec<ObjectRef> = dirty.iter().copied().filter(|&o| pick(o)).collect();
            for o in &picked {
                dirty.remove(o);
            }
            picked
        };
        self.sync_objects(&picked, Some(partition))
    }

    /// Syncs the files of `picked` (taken out of the dirty set by the
    /// caller) and the folders that gained files, then commits with a
    /// synced WAL, retiring the journal rows the syncs covered: those
    /// committed before the syncs began (a row commits after its bytes
    /// were written to the file).
    pub(super) fn sync_objects(
        &self,
        picked: &[ObjectRef],
        partition: Option<PartitionId>,
    ) -> Result<(), ObjStoreError> {
        let covered: Vec<(ObjectRef, Journaled)> = {
            let journaled = lock(&self.journaled);
            picked
                .iter()
                .filter_map(|o| journaled.get(o).map(|j| (*o, *j)))
                // Rows whose bytes never reached the file wait for the
                // next open's replay.
                .filter(|(_, j)| j.need != RowsNeed::Replay)
                .collect()
        };
        for (k, &object) in picked.iter().enumerate() {
            let synced = match File::open(self.data_path(object)) {
                Ok(f) => f.sync_data().map_err(self.io_err(object, "fsync")),
                // Removed since it was written: nothing to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(self.io_err(object, "open")(e)),
            };
            if let Err(e) = synced {
                // Still dirty: a later flush tries again.
                lock(&self.dirty).extend(picked[k..].iter().copied());
                return Err(e);
            }
        }
        let partitions: HashSet<PartitionId> = picked
            .iter()
            .map(|o| o.partition)
            .chain(partition)
            .collect();
        for p in partitions {
            self.sync_new_files(p)?;
        }
        // A synced commit makes every earlier one durable (see the
        // metadata module); shared with whatever else commits now.
        // The times waiting in memory go with it, so a flush leaves none
        // that a crash could lose.
        let retire: Vec<(ObjectRef, i64)> = covered.iter().map(|(o, j)| (*o, j.seq)).collect();
        let times = self.take_times();
        let kept = times.clone();
        self.db
            .commit(true, move |tx| {
                write_times(tx, &times)?;
                for (object, seq) in retire {
                    put_rows(tx, object, &DataRows::Retire(seq))?;
                }
                Ok(())
            })
            .inspect_err(|_| self.restore_times(kept))?;
        let mut journaled = lock(&self.journaled);
        for (object, j) in covered {
            let Some(now) = journaled.get_mut(&object) else {
                // Retired meanwhile by a change that synced the file.
                continue;
            };
            if now.seq == j.seq {
                let gone = now.bytes;
                journaled.remove(&object);
                self.journaled_objects
                    .store(journaled.len(), Ordering::Relaxed);
                self.journal_sub(gone);
            } else {
                // Newer rows remain; the covered ones are gone.
                let gone = j.bytes.min(now.bytes);
                now.bytes -= gone;
                self.journal_sub(gone);
            }
        }
        Ok(())
    }
}
