//! The [`ObjectStore`]: the typed API the server calls.
//!
//! Concurrency. Changes to the database go through the group
//! committer (`meta::Committer`): changes arriving while a group commits
//! are committed together in the next one, one transaction and at most
//! one WAL fsync for all of them, so concurrent creates and attribute
//! sets do not queue for a commit each; [`ObjectStore::create_many`]
//! puts several creates into one change (one savepoint each, so each is
//! still whole or absent on its own), for a caller that has them at
//! once and need not wait in the queue once per create. Metadata reads
//! use a second connection (WAL lets it read while a group commits).
//! Neither connection is held across data I/O. Each object's mandatory
//! attributes and open data file are cached in its stripe (see
//! `Stripe`), so a read or write of a known object asks SQLite nothing
//! and opens nothing.
//!
//! Atomicity. Each object maps to one of 64 striped reader-writer locks.
//! A command that changes data takes its stripe for writing, writes the
//! data, then commits the new length, the modified times and the
//! attribute sets riding on it in one transaction, then releases the
//! stripe. Reads (with or without attributes) take the stripe for
//! reading around reading the metadata and the data, so no reader sees
//! a command's data without the attributes set with it. A batch of
//! changes (`ObjectStore::change_batch`) takes the stripes of all its
//! objects, each once and in index order (so batches never wait on each
//! other in a cycle), writes every change's data, commits all their
//! metadata in one transaction (each change in a savepoint, so one that
//! fails is rolled back alone), then releases them. Lock order:
//! stripes (in index order), then a stripe's cache, the journal state (then the dirty set), the
//! id block, the committer (queue, then connection) or the read
//! connection; never the reverse (the id block is held across its
//! reservation's commit), and no change run by the committer takes a
//! stripe. The data-modified times waiting in memory are a leaf: taken
//! under any of these, with nothing taken under them.
//!
//! Crash safety. Data is written before the transaction that makes it
//! visible (a new logical length), so after the process is killed an
//! unflushed append is whole or absent (the bytes of one whose length
//! never committed are cut off when the object is next loaded, so no
//! later extension exposes them); attribute sets are whole or
//! absent after any crash (one transaction). After a power loss an
//! unflushed append to an object file may come back with its length and
//! attributes but zeros for its data, since only an fsync orders data
//! before metadata on disk. An unflushed overwrite inside the old length
//! that sets no attribute may leave new bytes under the old times after
//! a power loss, as on any block device. A change to an object file that
//! sets or removes attributes is one change across a kill of the
//! process, and when durable across a power loss too: its bytes are
//! journaled in the commit that sets the attributes and written to the
//! file only after it (`Deferred`), so a crash leaves either old bytes
//! and old attributes or the commit, whose journal rows the next open
//! replays into the file. (Not durable, a power loss may keep the
//! file's new bytes and lose the unsynced commit, as it may lose any
//! unflushed change.)
//! Such an overwrite (not durable, setting no attribute) commits
//! nothing at all: its data-modified time waits in memory for the next
//! commit of a data change, a flush or the store's close
//! (`ObjectStore::defer_commit`), so after the process is killed
//! too its bytes may sit under the older time.
//! Inline objects have neither gap: their bytes commit with their length.
//! FLUSH fsyncs the dirty object files, then the partition folder if a
//! file was created in it, then commits with a synced WAL (see the
//! metadata module), so everything acknowledged before it survives kill
//! -9 and power loss. A durable command on an inline object is its
//! synced commit; on an object file it either syncs the file first (a
//! large write, or a file with unjournaled writes not yet synced) or
//! journals its bytes in the synced commit (see `change_file`): the rows
//! are replayed in order on open, retired by the flush or sync that
//! covers them, and deleted with the object, and while an object has
//! rows every change to it is journaled too, so a replay never writes
//! back bytes a later change replaced. The rows of a change that sets
//! attributes and is not durable are needed only until its bytes are
//! in the file: the object's next change deletes them before it writes
//! the file (`RowsNeed::Nothing`), so neither it nor the changes after
//! it are journaled for them, and they never cost a sync.

mod checks;
mod create;
mod files;
mod flush;
mod journal;
mod read;
mod rows;
mod stripe;
mod times;
mod types;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::types::Value;
use rusqlite::{params, Connection};

use crate::error::{MetaContext, ObjStoreError};
use crate::meta::Committer;
use crate::segments::Segment;
use crate::{data, inline, meta, ObjectId, ObjectRef, PartitionId};

use self::checks::{check_attrs, check_change, check_segments};
use self::create::Ids;
use self::files::{punch_plan, punch_runs};
use self::journal::{Journaled, RowsNeed};
use self::rows::{
    check_collection, check_partition, prepare_length_update, put_attrs, put_change, read_attrs,
    retire_rows, ChangeRow, DataRows, JournalRow, RowsDone,
};
use self::stripe::{stripe_index, Body, Cached, Stripe, STRIPES};
use self::times::write_times;

pub use self::types::{
    limits, AttrValue, BatchChange, BatchOutcome, Changed, Edit, ListEntry, ListPage, NewObjects,
    ObjectInfo, QueryTerm, ReadFound, ReadResult, StoreOptions, WriteOptions, WriteSource,
};

const DB_FILE: &str = "attributes.sqlite";

/// The bytes a data change writes: in memory, or in a [`WriteSource`]
/// the file is written from directly.
#[derive(Clone, Copy)]
enum Bytes<'a> {
    Slice(&'a [u8]),
    Source(&'a dyn WriteSource),
}

impl Bytes<'_> {
    fn len(&self) -> u64 {
        match self {
            Self::Slice(d) => d.len() as u64,
            Self::Source(s) => s.bytes(),
        }
    }

    /// The bytes in memory: borrowed, or read from the source.
    fn in_memory(&self) -> io::Result<Cow<'_, [u8]>> {
        match *self {
            Self::Slice(d) => Ok(Cow::Borrowed(d)),
            Self::Source(s) => {
                let mut out = Vec::with_capacity(s.bytes() as usize);
                s.read_into(&mut out)?;
                Ok(Cow::Owned(out))
            }
        }
    }

    /// Writes them over `segments` of `file` (a source's bytes are one
    /// segment).
    fn write_to(&self, file: &File, segments: &[Segment]) -> io::Result<()> {
        match (*self, segments) {
            (Self::Slice(d), _) => data::write_segments(file, segments, d),
            (Self::Source(s), [one]) => s.write_to(file, one.offset),
            (Self::Source(_), _) => Err(io::Error::other(
                "a write source fills one segment (a store bug)",
            )),
        }
    }
}

/// A data change made under its object's stripe whose metadata is not
/// committed yet: the row to commit, and the state before and after.
struct Staged {
    row: ChangeRow,
    before: ObjectInfo,
    after: Cached,
    /// Journal bytes the row adds.
    journal_bytes: u64,
    /// What the file gets once the row is committed (a change that sets
    /// attributes: see [`Deferred`]).
    deferred: Option<Deferred>,
}

/// The file half of a change to an object file that also sets or
/// removes attributes. Its bytes go to the journal in the change's
/// commit and reach the file only after it: a crash before the commit
/// leaves old bytes and old attributes, one after it new attributes and
/// journal rows that opening the store replays into the file. Written
/// before the commit, a crash between the two would leave the new bytes
/// beside the old attributes.
struct Deferred {
    file: Arc<File>,
    bytes: Arc<Vec<u8>>,
    rows: Vec<JournalRow>,
    durable: bool,
}

/// Objects with attributes in one folder: data files and the attribute
/// database. `Send + Sync`.
#[derive(Debug)]
pub struct ObjectStore {
    root: PathBuf,
    options: StoreOptions,
    /// Every change to the database goes through it.
    meta: Committer,
    /// Metadata reads (see [`ObjectStore::reader`]).
    reader: Mutex<Connection>,
    stripes: Vec<Stripe>,
    /// Objects written since their last fsync.
    dirty: Mutex<HashSet<ObjectRef>>,
    /// Partitions whose folder gained a file since its last fsync.
    new_files: Mutex<HashSet<PartitionId>>,
    /// Objects with journal rows not yet retired. While an object has
    /// some, each of its file changes is journaled too (or retires them
    /// first: syncing the file, unless they need nothing more), so
    /// replay in order never puts back bytes a later change replaced.
    journaled: Mutex<HashMap<ObjectRef, Journaled>>,
    /// The bytes `journaled` rows hold, all objects together.
    journal_bytes: AtomicU64,
    /// How many objects `journaled` holds, kept beside it so that a
    /// write to a store with none takes no lock to learn so (a write
    /// to an object that has rows follows, under the object's stripe,
    /// the write that added them and so sees a count above zero).
    journaled_objects: AtomicUsize,
    ids: Mutex<Ids>,
    /// Partitions and collections known to exist (neither is ever
    /// removed), so creates check them without a query.
    known: RwLock<HashMap<PartitionId, HashSet<String>>>,
    /// Data-modified times of rewrites that committed nothing else, not
    /// in the database yet (see [`ObjectStore::defer_commit`]).
    unwritten_times: Mutex<HashMap<ObjectRef, i64>>,
    /// Changes that committed nothing, their time left in memory.
    deferred_commits: AtomicU64,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The error a change of a batch gets when the batch's commit failed
/// with `e` (given whole to the first change).
fn shared_failure(e: &ObjStoreError, object: ObjectRef) -> ObjStoreError {
    match e {
        ObjStoreError::Commit { source } => ObjStoreError::Commit {
            source: Arc::clone(source),
        },
        ObjStoreError::ChangePanicked => ObjStoreError::ChangePanicked,
        _ => ObjStoreError::RolledBackWith { object },
    }
}

/// The offset just past the furthest non-empty segment (0 for none).
fn written_end(segments: &[Segment]) -> u64 {
    segments
        .iter()
        .filter(|s| s.len > 0)
        .map(Segment::end)
        .max()
        .unwrap_or(0)
}

impl Drop for ObjectStore {
    /// Writes the data-modified times still waiting in memory (a clean
    /// close loses none); a failure is logged, as there is no one left
    /// to tell.
    fn drop(&mut self) {
        let times = self.take_times();
        if times.is_empty() {
            return;
        }
        let count = times.len();
        if let Err(e) = self.meta.commit(false, move |tx| write_times(tx, &times)) {
            tracing::warn!(root = %self.root.display(), objects = count, error = %e, "writing data-modified times at close failed; those objects keep their older times");
        }
    }
}

impl ObjectStore {
    /// Opens the store in `root` with the default [`StoreOptions`],
    /// creating the folder and database if missing.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, ObjStoreError> {
        Self::open_with(root, StoreOptions::default())
    }

    /// Opens the store in `root`, creating the folder and database if
    /// missing, and replays the journal of durable small writes into
    /// the object files a crash left unsynced.
    pub fn open_with(root: impl AsRef<Path>, options: StoreOptions) -> Result<Self, ObjStoreError> {
        let root = root.as_ref().to_owned();
        std::fs::create_dir_all(&root).map_err(|source| ObjStoreError::StoreIo {
            op: "create",
            path: root.clone(),
            source,
        })?;
        let path = root.join(DB_FILE);
        let writer = meta::open(&path)?;
        let reader = meta::open(&path)?;
        let next: i64 = writer
            .query_row("SELECT next_object FROM store", [], |r| r.get(0))
            .meta("read next object id")?;
        let store = Self {
            root,
            options,
            meta: Committer::new(writer),
            reader: Mutex::new(reader),
            stripes: (0..STRIPES).map(|_| Stripe::default()).collect(),
            dirty: Mutex::new(HashSet::new()),
            new_files: Mutex::new(HashSet::new()),
            journaled: Mutex::new(HashMap::new()),
            journal_bytes: AtomicU64::new(0),
            journaled_objects: AtomicUsize::new(0),
            ids: Mutex::new(Ids {
                next: next as u64,
                reserved: next as u64,
            }),
            known: RwLock::new(HashMap::new()),
            unwritten_times: Mutex::new(HashMap::new()),
            deferred_commits: AtomicU64::new(0),
        };
        store.replay_journal()?;
        Ok(store)
    }

    /// The connection metadata reads use (changes go through
    /// `meta::Committer::commit`). WAL lets it read while a group commits;
    /// a read that must see a change made under an object's stripe takes
    /// that stripe, so the change's commit has returned by then.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves no half-done
        // statement behind (rusqlite resets statements on drop).
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists the objects of a partition (or of one collection in it) in
    /// id order, after the cursor `after`, at most `limit` of them.
    pub fn list(
        &self,
        partition: PartitionId,
        collection: Option<&str>,
        after: Option<ObjectId>,
        limit: usize,
        with_attrs: bool,
    ) -> Result<ListPage, ObjStoreError> {
        let conn = self.reader();
        match collection {
            Some(name) => check_collection(&conn, partition, name)?,
            None => check_partition(&conn, partition)?,
        }
        let after = after.map_or(-1, |o| o.0 as i64);
        let fetch = limit.saturating_add(1).min(i64::MAX as usize) as i64;
        let mut ids: Vec<i64> = Vec::new();
        {
            let mut stmt = match collection {
                Some(_) => conn.prepare_cached(
                    "SELECT object FROM members WHERE partition = ?1 AND collection = ?2
                     AND object > ?3 ORDER BY object LIMIT ?4",
                ),
                None => conn.prepare_cached(
                    "SELECT id FROM objects WHERE partition = ?1 AND ?2 IS NULL
                     AND id > ?3 ORDER BY id LIMIT ?4",
                ),
            }
            .meta("prepare listing")?;
            let mut rows = stmt
                .query(params![partition.0 as i64, collection, after, fetch])
                .meta("list objects")?;
            while let Some(row) = rows.next().meta("list objects")? {
                ids.push(row.get(0).meta("read object id")?);
            }
        }
        let next = if ids.len() > limit {
            ids.truncate(limit);
            ids.last().map(|&id| ObjectId(id as u64))
        } else {
            None
        };
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            let object = ObjectRef {
                partition,
                object: ObjectId(id as u64),
            };
            entries.push(ListEntry {
                object: object.object,
                info: self.current_info(&conn, object)?,
                attrs: if with_attrs {
                    Some(read_attrs(&conn, object, &[])?)
                } else {
                    None
                },
            });
        }
        Ok(ListPage { entries, next })
    }

    /// Writes `data` (the segments' bytes in list order; a later segment
    /// wins where they overlap) and applies `opts.attrs` with it.
    pub fn write(
        &self,
        object: ObjectRef,
        segments: &[Segment],
        data: &[u8],
        opts: &WriteOptions,
    ) -> Result<ObjectInfo, ObjStoreError> {
        self.change_data(object, opts, Edit::Write(segments, data))
            .map(|(info, _)| info)
    }

    /// Writes the bytes of `source` from `offset` on and applies
    /// `opts.attrs` with them: [`Self::write`] of one segment whose bytes
    /// the store takes from the source (into the object's file directly
    /// when the object has one and the change is not journaled) rather
    /// than from memory. Everything else (the lock, the checks, the
    /// order of data and commit, durability) is that of a write.
    pub fn write_from(
        &self,
        object: ObjectRef,
        offset: u64,
        source: &dyn WriteSource,
        opts: &WriteOptions,
    ) -> Result<ObjectInfo, ObjStoreError> {
        self.change_data(object, opts, Edit::WriteFrom(offset, source))
            .map(|(info, _)| info)
    }

    /// Whether the object's state is cached and its bytes are in a file
    /// (not inline), so that [`Self::write_from`] would write the file
    /// from its source directly. A hint, asked without waiting for the
    /// object's lock: `false` when it is not known.
    pub fn has_cached_file(&self, object: ObjectRef) -> bool {
        self.stripe(object)
            .cache()
            .get(&object)
            .is_some_and(|c| matches!(c.body, Body::File(_)))
    }

    /// Appends `data` at the object's logical end; returns the offset it
    /// was written at.
    pub fn append(
        &self,
        object: ObjectRef,
        data: &[u8],
        opts: &WriteOptions,
    ) -> Result<u64, ObjStoreError> {
        let (_, before) = self.change_data(object, opts, Edit::Append(data))?;
        Ok(before.length)
    }

    /// Deallocates the segments' ranges: they read as zeros after. The
    /// logical length does not change. All ranges and `opts.attrs` apply
    /// in one change: no reader sees some ranges punched and not others.
    pub fn punch(
        &self,
        object: ObjectRef,
        segments: &[Segment],
        opts: &WriteOptions,
    ) -> Result<ObjectInfo, ObjStoreError> {
        self.change_data(object, opts, Edit::Punch(segments))
            .map(|(info, _)| info)
    }

    /// One change to an object's data under its stripe: the bytes change
    /// (inline, moved to the file, or in the file), then the new length,
    /// times, `opts.attrs` and the rows the change needs commit
    /// together, and the cached state follows. Returns the state after
    /// and before.
    fn change_data(
        &self,
        object: ObjectRef,
        opts: &WriteOptions,
        edit: Edit<'_>,
    ) -> Result<(ObjectInfo, ObjectInfo), ObjStoreError> {
        check_change(&BatchChange { object, edit, opts })?;
        let stripe = self.stripe(object);
        let result = {
            let _guard = stripe.write();
            let result = self.change_locked(stripe, object, opts, edit);
            if result.is_err() {
                // Whatever failed, the next use loads the state afresh.
                stripe.forget(object);
            }
            result
        };
        if result.is_ok() {
            self.retire_if_due();
        }
        result
    }

    fn change_locked(
        &self,
        stripe: &Stripe,
        object: ObjectRef,
        opts: &WriteOptions,
        edit: Edit<'_>,
    ) -> Result<(ObjectInfo, ObjectInfo), ObjStoreError> {
        let staged = self.stage(stripe, object, None, opts, edit)?;
        if self.defer_commit(&staged, opts) {
            let info = staged.after.info;
            stripe.keep(object, staged.after);
            return Ok((info, staged.before));
        }
        let Staged {
            row,
            before,
            after,
            journal_bytes,
            deferred,
        } = staged;
        let times = self.take_times();
        let kept = times.clone();
        let done = self
            .meta
            .commit(opts.durable, move |tx| {
                write_times(tx, &times)?;
                put_change(tx, &mut prepare_length_update(tx)?, &row)
            })
            .inspect_err(|_| self.restore_times(kept))?;
        let info = after.info;
        let (applied, need) = self.apply_deferred(object, deferred.as_ref());
        self.settle_change(stripe, object, after, done, journal_bytes, need);
        applied.map(|()| (info, before))
    }

    /// Writes a committed change's [`Deferred`] bytes into its file, if
    /// it has any, and says what the change's journal rows need now. On
    /// failure the change stays committed, its rows in the journal (the
    /// next open replays them), and the error says so.
    fn apply_deferred(
        &self,
        object: ObjectRef,
        deferred: Option<&Deferred>,
    ) -> (Result<(), ObjStoreError>, RowsNeed) {
        let Some(d) = deferred else {
            return (Ok(()), RowsNeed::Sync);
        };
        match self.write_deferred(object, d) {
            Ok(()) if d.durable => (Ok(()), RowsNeed::Sync),
            Ok(()) => (Ok(()), RowsNeed::Nothing),
            Err(e) => (Err(e), RowsNeed::Replay),
        }
    }

    fn write_deferred(&self, object: ObjectRef, d: &Deferred) -> Result<(), ObjStoreError> {
        for &(offset, len, range) in &d.rows {
            match range {
                Some((a, b)) => {
                    data::write_segments(&d.file, &[Segment::new(offset, len)], &d.bytes[a..b])
                }
                None => data::punch(&d.file, offset, len),
            }
            .map_err(self.io_err(object, "write committed journal rows into"))?;
        }
        Ok(())
    }

    /// The data half of a change under its object's stripe: the bytes
    /// change (inline, moved to the file, or in the file) and the
    /// metadata to commit is returned with the state after it. `start`:
    /// the object's state after a change staged before this one and not
    /// committed yet (else its committed state, from the stripe's cache).
    fn stage(
        &self,
        stripe: &Stripe,
        object: ObjectRef,
        start: Option<&Cached>,
        opts: &WriteOptions,
        edit: Edit<'_>,
    ) -> Result<Staged, ObjStoreError> {
        let mut cached = match start {
            Some(c) => c.clone(),
            None => self.cached(stripe, object)?,
        };
        let before = cached.info;
        let single;
        let (segments, data) = match edit {
            Edit::Write(s, d) => (s, Some(Bytes::Slice(d))),
            Edit::WriteFrom(offset, source) => {
                single = [Segment::new(offset, source.bytes())];
                (&single[..], Some(Bytes::Source(source)))
            }
            Edit::Append(d) => {
                single = [Segment::new(before.length, d.len() as u64)];
                check_segments(object, &single)?;
                (&single[..], Some(Bytes::Slice(d)))
            }
            Edit::Punch(s) => (s, None),
        };
        let end = if data.is_some() {
            written_end(segments)
        } else {
            0
        };
        let length = before.length.max(end);
        let rows = match &cached.body {
            Body::Inline(bytes) if length <= self.options.inline_max => {
                let mut bytes = Vec::clone(bytes);
                match data {
                    Some(d) => {
                        let d = d.in_memory().map_err(self.io_err(object, "receive"))?;
                        inline::write_segments(&mut bytes, segments, &d);
                    }
                    None => inline::punch_segments(&mut bytes, segments),
                }
                let bytes = Arc::new(bytes);
                cached.body = Body::Inline(Arc::clone(&bytes));
                DataRows::Inline(bytes)
            }
            Body::Inline(bytes) => {
                let file = self.move_to_file(object, bytes, &before, segments, data, opts)?;
                cached.body = Body::File(Arc::new(file));
                DataRows::Uninline
            }
            Body::File(file) => self.change_file(object, file, &before, segments, data, opts)?,
        };
        let deferred = match (&rows, &cached.body) {
            (DataRows::Journal { bytes, rows, .. }, Body::File(file)) if !opts.attrs.is_empty() => {
                Some(Deferred {
                    file: Arc::clone(file),
                    bytes: Arc::clone(bytes),
                    rows: rows.clone(),
                    durable: opts.durable,
                })
            }
            _ => None,
        };
        let journal_bytes = match &rows {
            DataRows::Journal { bytes, .. } => bytes.len() as u64,
            _ => 0,
        };
        let at = now();
        let attrs = opts.attrs.clone();
        cached.info = ObjectInfo {
            length,
            data_modified: at,
            attrs_modified: if attrs.is_empty() {
                before.attrs_modified
            } else {
                at
            },
            ..before
        };
        Ok(Staged {
            row: ChangeRow {
                object,
                length,
                at,
                attrs,
                rows,
            },
            before,
            after: cached,
            journal_bytes,
            deferred,
        })
    }

    /// After a change's row committed: the journal state follows what
    /// the row did (its new rows needing `need`), and the object's
    /// cached state becomes `after`.
    fn settle_change(
        &self,
        stripe: &Stripe,
        object: ObjectRef,
        after: Cached,
        done: RowsDone,
        journal_bytes: u64,
        need: RowsNeed,
    ) {
        match done {
            RowsDone::Journaled { seq, replaced } => {
                let mut journaled = lock(&self.journaled);
                if replaced {
                    if let Some(gone) = journaled.remove(&object) {
                        self.journal_sub(gone.bytes);
                    }
                }
                let j = journaled.entry(object).or_insert(Journaled {
                    seq,
                    bytes: 0,
                    need,
                });
                j.seq = seq;
                j.bytes += journal_bytes;
                j.need = j.need.max(need);
                self.journaled_objects
                    .store(journaled.len(), Ordering::Relaxed);
                self.journal_bytes
                    .fetch_add(journal_bytes, Ordering::Relaxed);
            }
            RowsDone::Retired => self.forget_journaled(object),
            RowsDone::Other => {}
        }
        stripe.keep(object, after);
    }

    /// Metadata transactions committed since the store was opened (a
    /// group commit is one, however many changes it held).
    pub fn commits(&self) -> u64 {
        self.meta.commits()
    }

    /// Data changes since the store was opened that committed nothing:
    /// plain rewrites inside an object file's length, whose
    /// data-modified time waits in memory for the next data commit, a
    /// flush or the store's close.
    pub fn deferred_commits(&self) -> u64 {
        self.deferred_commits.load(Ordering::Relaxed)
    }

    /// Objects whose data-modified time is in memory only, now.
    pub fn unwritten_times(&self) -> usize {
        lock(&self.unwritten_times).len()
    }

    /// Applies several data changes, to one object or several, with one
    /// metadata commit for all of them: a batch of N small writes costs
    /// one transaction where N calls of [`Self::write`] cost N (each
    /// waiting for its own group commit when they run one after another).
    ///
    /// Every guarantee of a single call holds for each change:
    ///
    /// - *Atomic to readers.* The stripes of all the changes' objects are
    ///   taken for writing (once each, in index order, so two batches,
    ///   or a batch and a single change, never wait on each other in a
    ///   cycle) and held until the commit returned, so no reader sees a
    ///   change's data without its length and attributes.
    /// - *Alone when it fails.* A change that fails its checks (bad
    ///   range, payload length, attribute), its data step (unknown
    ///   object, I/O error) or its rows fails alone with its own error,
    ///   and the others still apply; each commits in a savepoint of its
    ///   own. Only a change to the same object after one that failed in
    ///   the commit is rolled back with it
    ///   ([`ObjStoreError::RolledBackWith`]), since it was computed on
    ///   top of it. A failed commit fails every change that waited for
    ///   it.
    /// - *Durable and journal rules.* A durable change, or one to an
    ///   object with journal rows outstanding, commits on its own as
    ///   [`Self::write`] would (after the changes before it commit), so
    ///   the journal's ordering and the synced commit are exactly a
    ///   single call's; only plain (not durable) changes share the one
    ///   commit. Such a change adds journal rows only when it sets
    ///   attributes on an object file: its bytes are written to the file
    ///   after the commit (as a single call's), before any later change
    ///   to that object.
    ///
    /// Changes apply in the order given, so two changes to one object
    /// land as the same two calls in that order would.
    pub fn change_batch(&self, changes: &[BatchChange<'_>]) -> BatchOutcome {
        let mut results: Vec<Option<Result<Changed, ObjStoreError>>> = changes
            .iter()
            .map(|c| check_change(c).err().map(Err))
            .collect();
        let mut stripes: Vec<usize> = changes
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(c, _)| stripe_index(c.object))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let guards: Vec<_> = stripes.iter().map(|&i| self.stripes[i].write()).collect();
        let mut staged: Vec<(usize, Staged)> = Vec::with_capacity(changes.len());
        let mut commits = 0;
        for (i, c) in changes.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            let stripe = self.stripe(c.object);
            // A change staged to write its file after the commit (see
            // `Deferred`) commits before a later change to its object
            // that would write the file before it (one setting no
            // attribute); that one then follows the journal rule.
            if c.opts.attrs.is_empty()
                && staged
                    .iter()
                    .any(|(_, s)| s.row.object == c.object && s.deferred.is_some())
            {
                commits += self.commit_staged(&mut staged, &mut results);
            }
            if c.opts.durable || self.has_journal(c.object) {
                commits += self.commit_staged(&mut staged, &mut results);
                let r = self.change_locked(stripe, c.object, c.opts, c.edit);
                match &r {
                    Ok(_) => commits += 1,
                    Err(_) => stripe.forget(c.object),
                }
                results[i] = Some(r.map(|(info, before)| Changed { info, before }));
                continue;
            }
            // A change to an object changed earlier in the batch starts
            // from that change's state: not from the stripe's cache, which
            // holds committed states only (and may have evicted it).
            let start = staged
                .iter()
                .rev()
                .find(|(_, s)| s.row.object == c.object)
                .map(|(_, s)| &s.after);
            match self.stage(stripe, c.object, start, c.opts, c.edit) {
                // Only a change on committed state may skip the commit:
                // one on top of a staged change waits for it.
                Ok(s) if start.is_none() && self.defer_commit(&s, c.opts) => {
                    let info = s.after.info;
                    stripe.keep(c.object, s.after);
                    results[i] = Some(Ok(Changed {
                        info,
                        before: s.before,
                    }));
                }
                Ok(s) => staged.push((i, s)),
                Err(e) => {
                    // Changes to this object staged before commit first,
                    // so what reloads its state sees theirs.
                    if start.is_some() {
                        commits += self.commit_staged(&mut staged, &mut results);
                    }
                    stripe.forget(c.object);
                    results[i] = Some(Err(e));
                }
            }
        }
        commits += self.commit_staged(&mut staged, &mut results);
        drop(guards);
        self.retire_if_due();
        let results = results
            .into_iter()
            .zip(changes)
            .map(|(r, c)| r.unwrap_or(Err(ObjStoreError::RolledBackWith { object: c.object })))
            .collect();
        BatchOutcome { results, commits }
    }

    /// Commits the rows of `staged` changes in one transaction (each in
    /// a savepoint), settles each, and records their outcomes; returns
    /// the transactions made (0 with nothing staged, else 1). The
    /// caller holds the changes' stripes.
    fn commit_staged(
        &self,
        staged: &mut Vec<(usize, Staged)>,
        results: &mut [Option<Result<Changed, ObjStoreError>>],
    ) -> usize {
        if staged.is_empty() {
            return 0;
        }
        let mut rows = Vec::with_capacity(staged.len());
        let mut rest = Vec::with_capacity(staged.len());
        for (i, s) in staged.drain(..) {
            rows.push(s.row);
            rest.push((i, s.before, s.after, s.journal_bytes, s.deferred));
        }
        let objects: Vec<ObjectRef> = rows.iter().map(|r| r.object).collect();
        let times = self.take_times();
        let kept = times.clone();
        let committed = self.meta.commit(false, move |tx| {
            let sql = |e| ObjStoreError::Commit {
                source: Arc::new(e),
            };
            write_times(tx, &times)?;
            // All in one savepoint first: three statements for the batch
            // instead of three per change (a savepoint cost a sixth of a
            // change's rows). Should any change fail, that is rolled back
            // and each change runs in a savepoint of its own, so only
            // the failing one (and later changes to its object) are lost.
            let mut update = prepare_length_update(tx)?;
            let all = meta::in_savepoint(tx, |tx| {
                rows.iter()
                    .map(|row| put_change(tx, &mut update, row))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql)?;
            if let Ok(done) = all {
                return Ok(done.into_iter().map(Ok).collect());
            }
            let mut failed: Vec<ObjectRef> = Vec::new();
            let mut done = Vec::with_capacity(rows.len());
            for row in &rows {
                if failed.contains(&row.object) {
                    done.push(Err(ObjStoreError::RolledBackWith { object: row.object }));
                    continue;
                }
                let r =
                    meta::in_savepoint(tx, |tx| put_change(tx, &mut update, row)).map_err(sql)?;
                if r.is_err() {
                    failed.push(row.object);
                }
                done.push(r);
            }
            Ok(done)
        });
        match committed {
            Ok(done) => {
                for ((object, (i, before, after, journal_bytes, deferred)), r) in
                    objects.into_iter().zip(rest).zip(done)
                {
                    let stripe = self.stripe(object);
                    results[i] = Some(match r {
                        Ok(rows_done) => {
                            let info = after.info;
                            let (applied, need) = self.apply_deferred(object, deferred.as_ref());
                            self.settle_change(
                                stripe,
                                object,
                                after,
                                rows_done,
                                journal_bytes,
                                need,
                            );
                            applied.map(|()| Changed { info, before })
                        }
                        Err(e) => {
                            stripe.forget(object);
                            Err(e)
                        }
                    });
                }
            }
            Err(e) => {
                self.restore_times(kept);
                let members: Vec<(ObjectRef, usize)> = objects
                    .into_iter()
                    .zip(rest)
                    .map(|(o, (i, ..))| (o, i))
                    .collect();
                // Whatever failed, the next use loads the state afresh.
                for &(object, i) in members.iter().skip(1) {
                    self.stripe(object).forget(object);
                    results[i] = Some(Err(shared_failure(&e, object)));
                }
                // The first change gets the cause itself.
                if let Some(&(object, i)) = members.first() {
                    self.stripe(object).forget(object);
                    results[i] = Some(Err(e));
                }
            }
        }
        1
    }

    /// Moves an inline object that grows past the inline limit to its
    /// file: its bytes, then the change, written to a fresh file. The
    /// file is synced before the commit that drops the inline row (its
    /// bytes may have been flushed inline), except when there were none.
    fn move_to_file(
        &self,
        object: ObjectRef,
        bytes: &[u8],
        before: &ObjectInfo,
        segments: &[Segment],
        data: Option<Bytes<'_>>,
        opts: &WriteOptions,
    ) -> Result<File, ObjStoreError> {
        let file = self.open_for_write(object, true)?;
        let write = || -> io::Result<()> {
            data::write_segments(&file, &[Segment::new(0, bytes.len() as u64)], bytes)?;
            match data {
                Some(d) => d.write_to(&file, segments),
                None => punch_runs(&file, before.length, segments).map(|_| ()),
            }
        };
        write().map_err(self.io_err(object, "write"))?;
        self.settle_file(object, &file, opts.durable || !bytes.is_empty())?;
        Ok(file)
    }

    /// Changes an object's file. A durable change of at most
    /// [`StoreOptions::journal_max`] bytes to a synced file (or any such
    /// change while the object has journal rows) is journaled: the file
    /// is written but not synced, the rows commit with the change. Other
    /// durable changes (and large ones on a journaled object) sync the
    /// file, which retires the object's rows; the rest only mark the
    /// object dirty.
    fn change_file(
        &self,
        object: ObjectRef,
        file: &File,
        before: &ObjectInfo,
        segments: &[Segment],
        data: Option<Bytes<'_>>,
        opts: &WriteOptions,
    ) -> Result<DataRows, ObjStoreError> {
        let mut journaled = if self.journaled_objects.load(Ordering::Relaxed) == 0 {
            None
        } else {
            lock(&self.journaled).get(&object).copied()
        };
        // A change that sets attributes is journaled whatever its size,
        // and reaches the file only after its commit (see `Deferred`).
        let deferred = !opts.attrs.is_empty();
        // Rows that need nothing more (see `RowsNeed::Nothing`) go
        // before this change writes the file: with its rows when it has
        // some, else in a commit of their own now.
        let mut retire = None;
        if let Some(j) = journaled.filter(|j| j.need == RowsNeed::Nothing) {
            journaled = None;
            if deferred {
                retire = Some(j.seq);
            } else {
                self.meta
                    .commit(false, move |tx| retire_rows(tx, object, j.seq))?;
                self.forget_journaled(object);
            }
        }
        let replay = journaled.is_some_and(|j| j.need == RowsNeed::Replay);
        let unsynced = opts.durable && journaled.is_none() && lock(&self.dirty).contains(&object);
        let total = data.map_or(0, |d| d.len());
        if deferred && unsynced {
            // Durable, it covers the object's earlier writes as well.
            file.sync_data().map_err(self.io_err(object, "fsync"))?;
            self.sync_new_files(object.partition)?;
        }
        // An object with unjournaled writes not yet synced takes the
        // sync instead: a durable change then covers the object's earlier
        // writes too, as a synced file does, and from then on every
        // write is journaled until the file is synced again.
        let journal = deferred
            || replay
            || (total <= self.options.journal_max
                && (journaled.is_some() || (opts.durable && !unsynced)));
        let rows = match data {
            Some(d) => {
                // Journal rows need the bytes in memory: a source's are
                // read out first and written from there.
                let kept = if journal {
                    let bytes = d.in_memory().map_err(self.io_err(object, "receive"))?;
                    Some(bytes.into_owned())
                } else {
                    None
                };
                match &kept {
                    Some(_) if deferred => Ok(()),
                    Some(bytes) => data::write_segments(file, segments, bytes),
                    None => d.write_to(file, segments),
                }
                .map_err(self.io_err(object, "write"))?;
                if let Some(bytes) = kept {
                    let mut at = 0usize;
                    let rows = segments
                        .iter()
                        .filter(|s| s.len > 0)
                        .map(|s| {
                            let range = (at, at + s.len as usize);
                            at = range.1;
                            (s.offset, s.len, Some(range))
                        })
                        .collect();
                    DataRows::Journal {
                        bytes: Arc::new(bytes),
                        rows,
                        retire,
                    }
                } else {
                    DataRows::None
                }
            }
            None if deferred => DataRows::Journal {
                // The runs `punch_runs` would punch, punched after the
                // commit.
                bytes: Arc::new(Vec::new()),
                rows: punch_plan(before.length, segments)
                    .into_iter()
                    .map(|(o, l)| (o, l, None))
                    .collect(),
                retire,
            },
            None => {
                let punched = punch_runs(file, before.length, segments)
                    .map_err(self.io_err(object, "punch"))?;
                if journal {
                    DataRows::Journal {
                        bytes: Arc::new(Vec::new()),
                        rows: punched.into_iter().map(|(o, l)| (o, l, None)).collect(),
                        retire,
                    }
                } else {
                    DataRows::None
                }
            }
        };
        if journal {
            lock(&self.dirty).insert(object);
            return Ok(rows);
        }
        self.settle_file(object, file, opts.durable || journaled.is_some())?;
        Ok(journaled.map_or(DataRows::None, |j| DataRows::Retire(j.seq)))
    }

    /// The mandatory attributes and the user attributes `keys` (all of
    /// them when `keys` is empty).
    pub fn get_attrs(
        &self,
        object: ObjectRef,
        keys: &[&str],
    ) -> Result<(ObjectInfo, Vec<(String, AttrValue)>), ObjStoreError> {
        let conn = self.reader();
        let info = self.current_info(&conn, object)?;
        Ok((info, read_attrs(&conn, object, keys)?))
    }

    /// Sets user attributes, all or none; durable on return with
    /// `durable`.
    pub fn set_attrs(
        &self,
        object: ObjectRef,
        attrs: &[(String, AttrValue)],
        durable: bool,
    ) -> Result<(), ObjStoreError> {
        self.update_attrs(object, attrs, &[], durable)
    }

    /// Sets `attrs` and removes the keys `remove` (absent ones are no
    /// error) in one transaction: all or none; durable on return with
    /// `durable`.
    pub fn update_attrs(
        &self,
        object: ObjectRef,
        attrs: &[(String, AttrValue)],
        remove: &[&str],
        durable: bool,
    ) -> Result<(), ObjStoreError> {
        check_attrs(attrs)?;
        let stripe = self.stripe(object);
        let _guard = stripe.write();
        let mut cached = self.cached(stripe, object)?;
        let at = now();
        let sets = attrs.to_vec();
        let removes: Vec<String> = remove.iter().map(|k| (*k).to_owned()).collect();
        let result = self.meta.commit(durable, move |tx| {
            put_attrs(tx, object, &sets)?;
            let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
            if !removes.is_empty() {
                let mut stmt = tx
                    .prepare_cached(
                        "DELETE FROM attrs WHERE partition = ?1 AND object = ?2 AND key = ?3",
                    )
                    .meta("prepare attribute removal")?;
                for key in &removes {
                    stmt.execute(params![p, o, key]).meta("remove attribute")?;
                }
            }
            if !sets.is_empty() || !removes.is_empty() {
                tx.prepare_cached(
                    "UPDATE objects SET attrs_modified = ?3 WHERE partition = ?1 AND id = ?2",
                )
                .meta("prepare attribute time")?
                .execute(params![p, o, at])
                .meta("update attribute time")?;
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                if !attrs.is_empty() || !remove.is_empty() {
                    cached.info.attrs_modified = at;
                }
                stripe.keep(object, cached);
                Ok(())
            }
            Err(e) => {
                stripe.forget(object);
                Err(e)
            }
        }
    }

    /// The members of `collection` whose attributes satisfy every term
    /// (all members when `terms` is empty), in id order. The first
    /// term's range is read from the attribute index.
    pub fn query(
        &self,
        partition: PartitionId,
        collection: &str,
        terms: &[QueryTerm],
    ) -> Result<Vec<ObjectId>, ObjStoreError> {
        let conn = self.reader();
        check_collection(&conn, partition, collection)?;
        let mut values: Vec<Value> = vec![
            Value::Integer(partition.0 as i64),
            Value::Text(collection.to_owned()),
        ];
        let mut sql;
        let term_sql = |alias: &str, term: &QueryTerm, values: &mut Vec<Value>| {
            values.push(Value::Text(term.key.clone()));
            let mut s = format!("{alias}.key = ?{}", values.len());
            let kind = term.min.as_ref().or(term.max.as_ref());
            if let Some(kind) = kind {
                s += &format!(" AND typeof({alias}.value) = '{}'", kind.sql_type());
            }
            if let Some(min) = &term.min {
                values.push(min.to_sql());
                s += &format!(" AND {alias}.value >= ?{}", values.len());
            }
            if let Some(max) = &term.max {
                values.push(max.to_sql());
                s += &format!(" AND {alias}.value <= ?{}", values.len());
            }
            s
        };
        match terms.split_first() {
            None => {
                sql = "SELECT m.object FROM members m WHERE m.partition = ?1 AND m.collection = ?2"
                    .to_owned();
            }
            Some((first, rest)) => {
                let first_sql = term_sql("a", first, &mut values);
                sql = format!(
                    "SELECT a.object FROM attrs a INDEXED BY attrs_by_value
                     JOIN members m ON m.partition = a.partition AND m.collection = ?2 AND m.object = a.object
                     WHERE a.partition = ?1 AND {first_sql}"
                );
                for term in rest {
                    let t = term_sql("b", term, &mut values);
                    sql += &format!(
                        " AND EXISTS (SELECT 1 FROM attrs b WHERE b.partition = a.partition AND b.object = a.object AND {t})"
                    );
                }
            }
        }
        sql += " ORDER BY 1";
        let mut stmt = conn.prepare_cached(&sql).meta("prepare query")?;
        let ids = stmt
            .query_map(rusqlite::params_from_iter(values), |r| r.get::<_, i64>(0))
            .meta("query")?
            .collect::<Result<Vec<_>, _>>()
            .meta("query")?;
        Ok(ids.into_iter().map(|id| ObjectId(id as u64)).collect())
    }
}
