//! The object store: objects with attributes in partitions and
//! collections (the OSD model), read and written with scatter/gather
//! segment lists.
//!
//! - **Ids.** A partition is a 64-bit id chosen by its creator; objects
//!   get 64-bit ids from the store (never reused). A collection is a
//!   named set of objects in one partition.
//! - **Data.** Objects up to [`StoreOptions::inline_max`] (16 KiB) keep
//!   their bytes in the attribute database, so creating one with data is
//!   one transaction; larger ones are one file per object under the
//!   store's folder, written lazily (see
//!   `docs/design/0005-object-layout.md` for the measurements that chose
//!   both). Segments of one request are sorted, merged where they touch,
//!   and issued as `preadv`/`pwritev`, one call per merged run.
//! - **Durable small writes.** A durable write of up to
//!   [`StoreOptions::journal_max`] bytes to an object file is journaled
//!   in the database's synced group commit instead of syncing the file;
//!   a flush syncs the file and retires the rows, and opening the store
//!   replays rows a crash left.
//! - **Attributes.** The mandatory ones ([`ObjectInfo`]: logical length,
//!   created, data modified, attributes modified) and typed user ones
//!   ([`AttrValue`], limits in [`limits`]) live in SQLite (WAL). A data
//!   command's attribute sets commit in the same transaction as its new
//!   length, after its data is written; see [`ObjectStore`] for the
//!   ordering that makes them atomic to readers and after a crash.

mod data;
mod db;
mod error;
mod inline;
mod page_cache;
mod segments;
mod store;

use std::fmt;

pub use error::ObjStoreError;
pub use segments::{ascends, buffer_offsets, plan, Plan, Run, Segment};
#[doc(hidden)]
pub use store::ReplaceStop;
pub use store::{
    limits, AttrValue, BatchChange, BatchOutcome, Changed, Edit, ListEntry, ListPage, NewObjects,
    ObjectInfo, ObjectStore, QueryTerm, ReadFound, ReadResult, StoreOptions, WriteOptions,
    WriteSource,
};

/// A partition's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub u64);

/// An object's id, unique in its store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId(pub u64);

/// An object named by its partition and id, as errors print it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub partition: PartitionId,
    pub object: ObjectId,
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "object {} in partition {}", self.object, self.partition)
    }
}
