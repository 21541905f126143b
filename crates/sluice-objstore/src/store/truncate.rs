//! Setting an object's length: [`ObjectStore::truncate`].

use std::sync::Arc;

use crate::error::ObjStoreError;
use crate::ObjectRef;

use super::journal::RowsNeed;
use super::rows::{prepare_length_update, put_change, ChangeRow, DataRows};
use super::shard::{Body, Shard};
use super::times::write_times;
use super::types::ObjectInfo;
use super::{lock, now, ObjectStore};

impl ObjectStore {
    /// Sets `object`'s length to `length`; returns its state before.
    /// Bytes past a shorter length are gone (extended again, the object
    /// reads zeros there) and a longer one reads as zeros up to it; no
    /// byte is written. One change: the length commits first and the
    /// file is cut after it, so a crash between the two leaves bytes
    /// past the committed length, which opening the object drops before
    /// anything can read or extend over them. An object file's journal
    /// rows are retired in the same commit (after syncing the file where
    /// they hold the only durable copy), so a replay never puts back
    /// bytes the cut removed. `durable`: on disk before it returns.
    pub fn truncate(
        &self,
        object: ObjectRef,
        length: u64,
        durable: bool,
    ) -> Result<ObjectInfo, ObjStoreError> {
        let shard = self.shard(object);
        let _guard = shard.write();
        let result = self.truncate_locked(shard, object, length, durable);
        if result.is_err() {
            // Whatever failed, the next use loads the state afresh (and
            // drops a tail past the committed length).
            shard.forget(object);
        }
        result
    }

    fn truncate_locked(
        &self,
        shard: &Shard,
        object: ObjectRef,
        length: u64,
        durable: bool,
    ) -> Result<ObjectInfo, ObjStoreError> {
        let mut cached = self.cached(shard, object)?;
        let before = cached.info;
        let rows = match &cached.body {
            Body::Inline(bytes) => {
                let kept = bytes
                    .len()
                    .min(usize::try_from(length).unwrap_or(usize::MAX));
                if kept == bytes.len() {
                    DataRows::None
                } else {
                    let bytes = Arc::new(bytes[..kept].to_vec());
                    cached.body = Body::Inline(Arc::clone(&bytes));
                    if bytes.is_empty() {
                        // No bytes left: no inline row (an object without
                        // one and without a file is empty).
                        DataRows::Uninline
                    } else {
                        DataRows::Inline(bytes)
                    }
                }
            }
            Body::File(file) => self.file_rows_before_cut(object, file)?,
        };
        let at = now();
        cached.info = ObjectInfo {
            length,
            data_modified: at,
            ..before
        };
        let row = ChangeRow {
            object,
            length,
            at,
            attrs: Vec::new(),
            rows,
        };
        let times = self.take_times();
        let kept = times.clone();
        let done = self
            .db
            .commit(durable, move |tx| {
                write_times(tx, &times)?;
                put_change(tx, &mut prepare_length_update(tx)?, &row)
            })
            .inspect_err(|_| self.restore_times(kept))?;
        let cut = match &cached.body {
            Body::File(file) if length < before.length => file
                .metadata()
                .and_then(|m| {
                    if m.len() > length {
                        file.set_len(length)
                    } else {
                        Ok(())
                    }
                })
                .map_err(self.io_err(object, "truncate")),
            _ => Ok(()),
        };
        self.settle_change(shard, object, cached, done, 0, RowsNeed::Sync);
        cut.map(|()| before)
    }

    /// The rows a cut of an object file commits: the retirement of its
    /// journal rows, synced into the file first where they hold the
    /// only durable copy of its bytes.
    fn file_rows_before_cut(
        &self,
        object: ObjectRef,
        file: &std::fs::File,
    ) -> Result<DataRows, ObjStoreError> {
        let journaled = lock(&self.journaled).get(&object).copied();
        let Some(j) = journaled else {
            return Ok(DataRows::None);
        };
        match j.need {
            RowsNeed::Replay => Err(ObjStoreError::NotApplied { object }),
            RowsNeed::Nothing => Ok(DataRows::Retire(j.seq)),
            RowsNeed::Sync => {
                file.sync_data().map_err(self.io_err(object, "fsync"))?;
                self.sync_new_files(object.partition)?;
                Ok(DataRows::Retire(j.seq))
            }
        }
    }
}
