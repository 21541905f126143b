//! The [`ObjectStore`]: the typed API the server calls.
//!
//! Concurrency. Changes to the database go through the group
//! committer (`db::Committer`): changes arriving while a group commits
//! are committed together in the next one, one transaction and at most
//! one WAL fsync for all of them, so concurrent creates and attribute
//! sets do not queue for a commit each; [`ObjectStore::create_many`]
//! puts several creates into one change (one savepoint each, so each is
//! still whole or absent on its own), for a caller that has them at
//! once and need not wait in the queue once per create. Metadata reads
//! use a second connection (WAL lets it read while a group commits).
//! Neither connection is held across data I/O. Each object's mandatory
//! attributes and open data file are cached in its shard (see
//! `Shard`), so a read or write of a known object asks SQLite nothing
//! and opens nothing.
//!
//! Atomicity. Each object maps to one of 64 sharded reader-writer locks.
//! A command that changes data takes its shard for writing, writes the
//! data, then commits the new length, the modified times and the
//! attribute sets riding on it in one transaction, then releases the
//! shard. Reads (with or without attributes) take the shard for
//! reading around reading the metadata and the data, so no reader sees
//! a command's data without the attributes set with it. A batch of
//! changes (`ObjectStore::change_batch`) takes the shards of all its
//! objects, each once and in index order (so batches never wait on each
//! other in a cycle), writes every change's data, commits all their
//! metadata in one transaction (each change in a savepoint, so one that
//! fails is rolled back alone), then releases them. Lock order:
//! shards (in index order), then a shard's cache, the journal state (then the dirty set), the
//! id block, the committer (queue, then connection) or the read
//! connection; never the reverse (the id block is held across its
//! reservation's commit), and no change run by the committer takes a
//! shard. The data-modified times waiting in memory are a leaf: taken
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
//!
//! Modules. `types` holds the public types; `shard` the lock shards
//! and the object states they cache; `rows` the SQL of the rows a
//! change commits and of the lookups; `times` the data-modified times
//! waiting in memory; `checks` what a request is checked for before it
//! takes a lock; `files` object files: paths, opening, syncing,
//! punching; `journal` the journal's state, replay and retirement;
//! `flush` flushes; `create` partitions, collections, ids, creates and
//! removal; `replace` one object's data replaced by another's, and the
//! replaces a crash interrupted finished at open; `read` the read paths; `change` one data change, staged,
//! committed and settled; `batch` several changes under one commit;
//! `attrs` user attributes; `query` listings and queries.

mod attrs;
mod batch;
mod change;
mod checks;
mod create;
mod files;
mod flush;
mod journal;
mod query;
mod read;
mod replace;
mod rows;
mod shard;
mod times;
mod truncate;
mod types;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

use crate::db::Committer;
use crate::error::{DbContext, ObjStoreError};
use crate::{db, ObjectRef, PartitionId};

use self::create::Ids;
use self::journal::Journaled;
use self::shard::{Shard, SHARDS};
use self::times::write_times;

#[doc(hidden)]
pub use self::replace::ReplaceStop;
pub use self::types::{
    limits, AttrValue, BatchChange, BatchOutcome, Changed, Edit, ListEntry, ListPage, NewObjects,
    ObjectInfo, QueryTerm, ReadFound, ReadResult, StoreOptions, WriteOptions, WriteSource,
};

const DB_FILE: &str = "attributes.sqlite";

/// Objects with attributes in one folder: data files and the attribute
/// database. `Send + Sync`.
#[derive(Debug)]
pub struct ObjectStore {
    root: PathBuf,
    options: StoreOptions,
    /// Every change to the database goes through it.
    db: Committer,
    /// Metadata reads (see [`ObjectStore::reader`]).
    reader: Mutex<Connection>,
    shards: Vec<Shard>,
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
    /// to an object that has rows follows, under the object's shard,
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
    /// Targets of replaces that committed but whose rename failed: they
    /// are refused until the next open makes it.
    unfinished: Mutex<HashSet<ObjectRef>>,
    /// How many `unfinished` holds, so a load of a store with none
    /// takes no lock to learn so.
    unfinished_replaces: AtomicUsize,
}

/// The latest change time handed out in this process (see [`now`]).
static LAST_TIME: AtomicI64 = AtomicI64::new(0);

/// A change's time, in nanoseconds since the epoch: the clock's, but
/// always later than every time handed out before in this process, so
/// two changes never share a time and times never go backwards, however
/// coarse the clock or if it steps back.
fn now() -> i64 {
    let clock = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let next = |last: i64| clock.max(last.saturating_add(1));
    let last = LAST_TIME
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(next(last))
        })
        .unwrap_or_else(|last| last);
    next(last)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        if let Err(e) = self.db.commit(false, move |tx| write_times(tx, &times)) {
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
    /// missing, finishes the replaces a crash interrupted
    /// ([`ObjectStore::replace_data`]), and replays the journal of
    /// durable small writes into the object files a crash left unsynced.
    pub fn open_with(root: impl AsRef<Path>, options: StoreOptions) -> Result<Self, ObjStoreError> {
        let root = root.as_ref().to_owned();
        std::fs::create_dir_all(&root).map_err(|source| ObjStoreError::StoreIo {
            op: "create",
            path: root.clone(),
            source,
        })?;
        let path = root.join(DB_FILE);
        let writer = db::open(&path)?;
        let reader = db::open(&path)?;
        let next: i64 = writer
            .query_row("SELECT next_object FROM store", [], |r| r.get(0))
            .db("read next object id")?;
        let store = Self {
            root,
            options,
            db: Committer::new(writer),
            reader: Mutex::new(reader),
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
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
            unfinished: Mutex::new(HashSet::new()),
            unfinished_replaces: AtomicUsize::new(0),
        };
        store.finish_replaces()?;
        store.replay_journal()?;
        Ok(store)
    }

    /// The connection metadata reads use (changes go through
    /// `db::Committer::commit`). WAL lets it read while a group commits;
    /// a read that must see a change made under an object's shard takes
    /// that shard, so the change's commit has returned by then.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves no half-done
        // statement behind (rusqlite resets statements on drop).
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Metadata transactions committed since the store was opened (a
    /// group commit is one, however many changes it held).
    pub fn commits(&self) -> u64 {
        self.db.commits()
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
}

#[cfg(test)]
mod tests {
    use super::now;

    #[test]
    fn change_times_only_grow() {
        // Many threads at once: no two times equal, each thread's in order.
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..20_000).map(|_| now()).collect::<Vec<_>>()))
            .collect();
        let mut all = Vec::new();
        for t in threads {
            let times = t.join().expect("a timing thread");
            assert!(
                times.windows(2).all(|w| w[0] < w[1]),
                "a time went back or repeated"
            );
            all.extend(times);
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "two changes shared a time");
    }
}
