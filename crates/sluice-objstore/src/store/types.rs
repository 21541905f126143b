//! The store's public types: its options, attribute values, and what
//! requests carry and return.

use std::fs::File;
use std::{fmt, io};

use crate::error::ObjStoreError;
use crate::segments::Segment;
use crate::{ObjectId, ObjectRef};

#[cfg(doc)]
use super::ObjectStore;

/// Size limits of user attributes.
pub mod limits {
    /// Longest attribute key, in bytes of UTF-8 (at least one).
    pub const KEY: usize = 128;
    /// Longest text value, in bytes of UTF-8.
    pub const TEXT: usize = 1024;
    /// Longest bytes value.
    pub const BYTES: usize = 65536;
    /// Objects end before this offset (2^62), so offsets plus lengths
    /// always fit in 64 bits and in SQLite's signed integers.
    pub const OBJECT_END: u64 = 1 << 62;
    /// Most objects one create makes.
    pub const CREATE_COUNT: u32 = 65536;
    /// Most bytes one read returns (its segments' total).
    pub const READ_BYTES: u64 = 1 << 30;
}

/// How the store lays out small objects and durable small writes (see
/// `docs/design/0005-object-layout.md` for the measurements behind the
/// defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Objects no longer than this keep their bytes in the database
    /// (no file; a create with data is one transaction); an object that
    /// grows past it moves to a file for good.
    pub inline_max: u64,
    /// Durable writes to object files of at most this many bytes (and
    /// durable punches) are journaled in the database's synced commit
    /// instead of syncing the file; the file is synced and the journal
    /// retired by the next flush, or once [`Self::journal_retire`] bytes
    /// are outstanding.
    pub journal_max: u64,
    /// Journaled bytes outstanding that make the store sync the
    /// journaled files and retire their rows.
    pub journal_retire: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            inline_max: 16 << 10,
            journal_max: 64 << 10,
            journal_retire: 16 << 20,
        }
    }
}

/// A typed user attribute value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrValue {
    Integer(i64),
    Text(String),
    Bytes(Vec<u8>),
}

/// The attributes the store keeps for every object. Times are
/// nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectInfo {
    pub length: u64,
    pub created: i64,
    pub data_modified: i64,
    pub attrs_modified: i64,
}

/// What rides on a data command: attribute sets applied atomically with
/// it, and whether it is durable when it returns (FUA).
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub attrs: Vec<(String, AttrValue)>,
    pub durable: bool,
}

/// One create of [`ObjectStore::create_many`]: `count` empty objects
/// or, with `segments` and `data` (the segments' bytes in list order),
/// one object holding them; each with `opts.attrs`, in `collection` if
/// given.
#[derive(Debug, Clone, Copy)]
pub struct NewObjects<'a> {
    pub collection: Option<&'a str>,
    pub count: u32,
    pub segments: &'a [Segment],
    pub data: &'a [u8],
    pub opts: &'a WriteOptions,
}

/// The bytes of a read, in segment-list order, with how many of them lie
/// inside the object (the rest, past its end, are zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    pub data: Vec<u8>,
    pub real: u64,
    pub info: ObjectInfo,
    /// The attributes asked for with the read, in the order asked;
    /// absent ones are left out.
    pub attrs: Vec<(String, AttrValue)>,
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    pub object: ObjectId,
    pub info: ObjectInfo,
    /// All user attributes, when the listing asked for them.
    pub attrs: Option<Vec<(String, AttrValue)>>,
}

/// A page of a listing; `next` is the cursor for the next page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub entries: Vec<ListEntry>,
    pub next: Option<ObjectId>,
}

/// Members whose attribute `key` lies in `[min, max]` (a missing bound
/// is open; both missing: members that have the attribute). A term
/// matches values of its bounds' type only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryTerm {
    pub key: String,
    pub min: Option<AttrValue>,
    pub max: Option<AttrValue>,
}

/// What a read found besides its bytes (see [`ObjectStore::read_into`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadFound {
    /// Bytes of the read that lie inside the object (the rest are
    /// zeros past its end).
    pub real: u64,
    pub info: ObjectInfo,
    /// The attributes asked for with the read, in the order asked;
    /// absent ones are left out.
    pub attrs: Vec<(String, AttrValue)>,
}

/// Bytes a write takes from somewhere other than the process's memory
/// (the server's pipe holding a payload spliced from the socket), for
/// [`ObjectStore::write_from`]. The store takes the bytes once: it calls
/// one of the two methods, once, under the object's lock, or neither
/// when the write fails before its data step (the caller then disposes
/// of what the source holds).
pub trait WriteSource {
    /// How many bytes it holds.
    fn bytes(&self) -> u64;

    /// Writes them all to `file`, in order, from `offset`.
    fn write_to(&self, file: &File, offset: u64) -> io::Result<()>;

    /// Appends them all to `out`, in order (a change the store keeps in
    /// memory: an object inline in the database, a journaled durable
    /// write).
    fn read_into(&self, out: &mut Vec<u8>) -> io::Result<()>;
}

impl fmt::Debug for dyn WriteSource + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WriteSource({} bytes)", self.bytes())
    }
}

/// A change to an object's data: what [`ObjectStore::write`],
/// [`ObjectStore::write_from`], [`ObjectStore::append`] and
/// [`ObjectStore::punch`] do, as one change of an
/// [`ObjectStore::change_batch`] names it.
#[derive(Debug, Clone, Copy)]
pub enum Edit<'a> {
    /// The segments' bytes, in list order (a later segment wins where
    /// they overlap).
    Write(&'a [Segment], &'a [u8]),
    /// The source's bytes, from the offset on (one contiguous range).
    WriteFrom(u64, &'a dyn WriteSource),
    /// The bytes at the logical end, known only under the object's lock.
    Append(&'a [u8]),
    /// The segments' ranges deallocated (they read as zeros).
    Punch(&'a [Segment]),
}

/// One change of an [`ObjectStore::change_batch`].
#[derive(Debug, Clone, Copy)]
pub struct BatchChange<'a> {
    pub object: ObjectRef,
    pub edit: Edit<'a>,
    pub opts: &'a WriteOptions,
}

/// What a data change did: the object's state after it and before it
/// (an append was written at `before.length`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Changed {
    pub info: ObjectInfo,
    pub before: ObjectInfo,
}

/// What an [`ObjectStore::change_batch`] did.
#[derive(Debug)]
pub struct BatchOutcome {
    /// Each change's outcome, in the order the changes were given.
    pub results: Vec<Result<Changed, ObjStoreError>>,
    /// Metadata transactions the call made: one for all its plain
    /// changes, plus one for each that had to commit alone (see
    /// [`ObjectStore::change_batch`]).
    pub commits: usize,
}
