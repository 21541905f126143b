use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use thiserror::Error;

use crate::{ObjectRef, PartitionId};

/// A failed object-store operation, naming the partition, object,
/// collection or attribute it failed on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ObjStoreError {
    #[error("unknown partition {partition}")]
    UnknownPartition { partition: PartitionId },
    #[error("partition {partition} already exists")]
    PartitionExists { partition: PartitionId },
    #[error("unknown {object}")]
    UnknownObject { object: ObjectRef },
    #[error("unknown collection {name:?} in partition {partition}")]
    UnknownCollection {
        partition: PartitionId,
        name: String,
    },
    #[error("collection {name:?} already exists in partition {partition}")]
    CollectionExists {
        partition: PartitionId,
        name: String,
    },
    /// A key or value longer than its documented limit.
    #[error("attribute {key:?}: {what} is {len} bytes, over the limit of {limit}")]
    AttributeTooLarge {
        key: String,
        what: &'static str,
        len: usize,
        limit: usize,
    },
    /// A key that is empty or names a value the store keeps itself.
    #[error("attribute key {key:?} refused: {reason}")]
    BadAttributeKey { key: String, reason: &'static str },
    /// A segment whose end overflows or lies past the largest object.
    #[error("{object}: {len} bytes at offset {offset} is out of range (objects end at {limit})")]
    OutOfRange {
        object: ObjectRef,
        offset: u64,
        len: u64,
        limit: u64,
    },
    /// A read whose segments add up to more than one read returns.
    #[error("{object}: a read of {len} bytes is over the limit of {limit}")]
    ReadTooLarge {
        object: ObjectRef,
        len: u64,
        limit: u64,
    },
    /// A create of more objects than one create makes.
    #[error("create of {count} objects in partition {partition} is over the limit of {limit}")]
    CreateCount {
        partition: PartitionId,
        count: u32,
        limit: u32,
    },
    /// A data buffer whose length is not the segments' total.
    #[error("{object}: segments cover {expected} bytes but {got} were given")]
    PayloadLength {
        object: ObjectRef,
        expected: u64,
        got: u64,
    },
    /// A change the object's file cannot take while a committed change
    /// is missing from it (writing it after its commit failed): the
    /// journal holds it until the store is opened again and replays it.
    #[error("{object}: a committed change is not in its file yet (writing it failed); reopen the store to replay it")]
    NotApplied { object: ObjectRef },
    /// A replace of an object's data by itself.
    #[error("{object}: cannot replace an object's data with its own")]
    ReplaceSelf { object: ObjectRef },
    /// A replace whose source and target lie in different partitions
    /// (their files are in different folders).
    #[error("{target}: cannot take the data of {source_object}, which is in another partition")]
    ReplaceAcrossPartitions {
        target: ObjectRef,
        source_object: ObjectRef,
    },
    /// An object whose data a committed replace switched to another
    /// object's file, but renaming that file into place failed: it
    /// cannot be used until the store is opened again and finishes the
    /// rename.
    #[error("{object}: a replace of its data committed but its file is not in place yet (renaming it failed); reopen the store to finish it")]
    ReplaceUnfinished { object: ObjectRef },
    /// The operating system failed on an object's data file.
    #[error("{op} of {object} ({path}) failed")]
    Io {
        object: ObjectRef,
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The operating system failed on a store-wide file or folder.
    #[error("{op} of {path} failed")]
    StoreIo {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// SQLite failed while keeping attributes.
    #[error("attribute database: {what} failed")]
    Metadata {
        what: &'static str,
        source: rusqlite::Error,
    },
    /// The group commit that held this change failed (every change in
    /// the group gets the one cause).
    #[error("attribute database: commit failed")]
    Commit { source: Arc<rusqlite::Error> },
    /// A change of a batch rolled back with another that failed: a later
    /// change to the same object (computed on top of the failed one), or
    /// any change of a batch whose commit failed on another's error.
    #[error("{object}: not changed, rolled back with another change of its batch that failed")]
    RolledBackWith { object: ObjectRef },
    /// A change panicked while its group committed (a bug). It was rolled
    /// back alone; the rest of its group and the store carry on.
    #[error("attribute database: a change failed unexpectedly and was rolled back")]
    ChangePanicked,
}

pub(crate) trait DbContext<T> {
    fn db(self, what: &'static str) -> Result<T, ObjStoreError>;
}

impl<T> DbContext<T> for Result<T, rusqlite::Error> {
    fn db(self, what: &'static str) -> Result<T, ObjStoreError> {
        self.map_err(|source| ObjStoreError::Metadata { what, source })
    }
}
