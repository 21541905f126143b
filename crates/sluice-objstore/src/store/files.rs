//! Object files: their paths, opening and creating them, syncing them
//! and the folders that gained them, cutting stale tails, punching.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use crate::error::ObjStoreError;
use crate::segments::{plan, Segment};
use crate::{data, ObjectRef, PartitionId};

use super::{lock, ObjectStore};

pub(super) fn fsync_dir(path: &Path) -> Result<(), ObjStoreError> {
    let io_err = |source| ObjStoreError::StoreIo {
        op: "fsync",
        path: path.to_owned(),
        source,
    };
    File::open(path).and_then(|d| d.sync_all()).map_err(io_err)
}

/// Cuts an object's file back to its logical `length` when it holds
/// bytes past it: the data of a write whose length commit never happened
/// (the process was killed or the power lost between the two, or the
/// commit failed). Past the length they read as zeros, but a later write
/// further out would extend the length over them and expose them, so
/// they go before the object's state is cached. The caller holds the
/// object's shard, so no change is between its data and its commit.
pub(super) fn drop_stale_tail(file: &File, length: u64) -> io::Result<()> {
    if file.metadata()?.len() > length {
        file.set_len(length)?;
    }
    Ok(())
}

/// Punches the segments' merged runs, clipped to the logical `length`
/// (past it the object reads as zeros already); returns what it
/// punched.
pub(super) fn punch_runs(
    file: &File,
    length: u64,
    segments: &[Segment],
) -> io::Result<Vec<(u64, u64)>> {
    let punched = punch_plan(length, segments);
    for &(offset, len) in &punched {
        data::punch(file, offset, len)?;
    }
    Ok(punched)
}

/// The runs a punch of `segments` changes in a file of `length` bytes:
/// merged, and cut at its end.
pub(super) fn punch_plan(length: u64, segments: &[Segment]) -> Vec<(u64, u64)> {
    plan(segments, 0)
        .iter()
        .map(|(run, _)| (run.offset, run.len.min(length.saturating_sub(run.offset))))
        .filter(|&(_, len)| len > 0)
        .collect()
}

impl ObjectStore {
    pub(super) fn partition_dir(&self, partition: PartitionId) -> PathBuf {
        self.root.join(format!("p{:016x}", partition.0))
    }

    pub(super) fn data_path(&self, object: ObjectRef) -> PathBuf {
        self.partition_dir(object.partition)
            .join(format!("{:016x}", object.object.0))
    }

    /// The error of `op` failing on `object`'s file. The path is built
    /// only when it fails: formatting it for every write cost a tenth of
    /// a small write's instructions (callgrind).
    pub(super) fn io_err(
        &self,
        object: ObjectRef,
        op: &'static str,
    ) -> impl Fn(io::Error) -> ObjStoreError + '_ {
        move |source| ObjStoreError::Io {
            object,
            op,
            path: self.data_path(object),
            source,
        }
    }

    /// Opens an object's data file for writing, creating it (and noting
    /// that its folder needs an fsync) on first write; with `empty`,
    /// truncated (a file an interrupted move or create left behind
    /// holds nothing the object names).
    pub(super) fn open_for_write(
        &self,
        object: ObjectRef,
        empty: bool,
    ) -> Result<File, ObjStoreError> {
        let path = self.data_path(object);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .truncate(empty)
            .open(&path)
        {
            Ok(f) => Ok(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(self.io_err(object, "create"))?;
                self.new_files
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(object.partition);
                Ok(f)
            }
            Err(e) => Err(self.io_err(object, "open")(e)),
        }
    }

    /// Syncs the partition folder if it gained files since last time.
    pub(super) fn sync_new_files(&self, partition: PartitionId) -> Result<(), ObjStoreError> {
        let pending = self
            .new_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&partition);
        if pending {
            if let Err(e) = fsync_dir(&self.partition_dir(partition)) {
                self.new_files
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(partition);
                return Err(e);
            }
        }
        Ok(())
    }

    /// After writing an object's file: with `sync`, syncs its data (and
    /// the partition folder if the file is new), else notes the object
    /// for the next flush.
    pub(super) fn settle_file(
        &self,
        object: ObjectRef,
        file: &File,
        sync: bool,
    ) -> Result<(), ObjStoreError> {
        if sync {
            file.sync_data().map_err(self.io_err(object, "fsync"))?;
            self.sync_new_files(object.partition)
        } else {
            lock(&self.dirty).insert(object);
            Ok(())
        }
    }
}
