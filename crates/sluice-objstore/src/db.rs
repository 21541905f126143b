//! The attribute database: schema, connection settings, the one commit
//! that can be made durable, and the group committer every change goes
//! through.
//!
//! WAL mode with `synchronous = NORMAL`: every commit is atomic (a
//! transaction is whole or absent after any crash), and survives the
//! process being killed (the WAL is written before `COMMIT` returns),
//! but NORMAL does not fsync the WAL at each commit, so a power loss may
//! drop the newest commits, always whole ones. A durable commit (FLUSH,
//! or a command with [`crate::WriteOptions::durable`]) switches to
//! `synchronous = FULL` for its one transaction: SQLite then fsyncs the
//! WAL at that commit, which makes it and every earlier commit durable
//! (the WAL is one file, written in order). Data files are fsynced
//! before that commit, so durable metadata never points at data that
//! was not.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use rusqlite::Connection;

use crate::error::{DbContext, ObjStoreError};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS store (next_object INTEGER NOT NULL, flushes INTEGER NOT NULL);
INSERT INTO store SELECT 65536, 0 WHERE NOT EXISTS (SELECT 1 FROM store);
CREATE TABLE IF NOT EXISTS partitions (id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS objects (
    partition INTEGER NOT NULL,
    id INTEGER NOT NULL,
    length INTEGER NOT NULL,
    created INTEGER NOT NULL,
    data_modified INTEGER NOT NULL,
    attrs_modified INTEGER NOT NULL,
    PRIMARY KEY (partition, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS collections (
    partition INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (partition, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS members (
    partition INTEGER NOT NULL,
    collection TEXT NOT NULL,
    object INTEGER NOT NULL,
    PRIMARY KEY (partition, collection, object)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS members_by_object ON members (partition, object);
CREATE TABLE IF NOT EXISTS attrs (
    partition INTEGER NOT NULL,
    object INTEGER NOT NULL,
    key TEXT NOT NULL,
    -- BLOB: no type affinity, so a value keeps the type it was stored
    -- with ('ANY' outside a STRICT table means NUMERIC affinity, which
    -- turned the text '42' into the integer 42).
    value BLOB NOT NULL,
    PRIMARY KEY (partition, object, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attrs_by_value ON attrs (partition, key, value, object);
-- Small objects' bytes from offset 0 (object ids are unique in the
-- store, so the id alone is the key); an object with a row here has no
-- data file (a file left beside it by an interrupted move is ignored).
CREATE TABLE IF NOT EXISTS inline_data (object INTEGER PRIMARY KEY, data BLOB NOT NULL);
-- Small writes (data) and punches (data NULL) to object files that are
-- not synced yet, in the order they were made; replayed into the files
-- on open, retired once the file is synced.
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    partition INTEGER NOT NULL,
    object INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    len INTEGER NOT NULL,
    data BLOB
);
CREATE INDEX IF NOT EXISTS journal_by_object ON journal (partition, object, seq);
-- Replaces of an object's data by another object's file that committed
-- (the target's new length, the source's rows gone) before the source's
-- file was renamed over the target's: a row whose source file is still
-- there at open is renamed then; one whose source file is gone is done.
CREATE TABLE IF NOT EXISTS replaces (
    seq INTEGER PRIMARY KEY,
    partition INTEGER NOT NULL,
    source INTEGER NOT NULL,
    target INTEGER NOT NULL
);
";

pub(crate) fn open(path: &Path) -> Result<Connection, ObjStoreError> {
    let conn = Connection::open(path).db("open")?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .db("set WAL mode")?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .db("set synchronous")?;
    conn.execute_batch(SCHEMA).db("create schema")?;
    // Every statement the store runs stays prepared (the default 16
    // would evict some under a mixed load, and parsing one costs more
    // than most changes).
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// A change to the database, queued for the next group commit.
pub(crate) type Change<T> = Box<dyn FnOnce(&Connection) -> Result<T, ObjStoreError> + Send>;

/// Commits concurrent changes together: one SQLite transaction and (when
/// any of them must be durable) one WAL fsync for every change queued
/// while the previous group committed.
///
/// There is no committer thread: the first caller to find no group in
/// progress commits what is queued (its own change among it) and wakes
/// the others, whose changes are then committed (or failed) and whose
/// results are waiting for them; a caller arriving meanwhile queues its
/// change and waits, and leads the next group if no one else has. So a
/// lone change costs what a transaction of its own did, and N changes
/// arriving together cost one commit. Each change runs in its own
/// savepoint when the group has several, so a failing change is rolled
/// back alone and the others commit; a failed commit fails them all.
/// Durability is not weakened: a change returns only once the
/// transaction holding it committed, durably if it asked to be.
#[derive(Debug)]
pub(crate) struct Committer {
    conn: Mutex<Connection>,
    queue: Mutex<Queue>,
    settled: Condvar,
    /// Transactions committed (each a group), for tests and metrics.
    commits: AtomicU64,
}

#[derive(Default)]
struct Queue {
    changes: Vec<Box<dyn Queued>>,
    committing: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("changes", &self.changes.len())
            .field("committing", &self.committing)
            .finish()
    }
}

/// A queued change with the slot its caller waits on.
trait Queued: Send {
    fn durable(&self) -> bool;
    /// Runs the change; `Err` when it failed (its outcome is kept).
    fn run(&mut self, conn: &Connection) -> Result<(), ()>;
    /// Publishes the outcome: the change's own, or the group's failure.
    fn settle(self: Box<Self>, group: Result<(), &Arc<rusqlite::Error>>);
}

type Slot<T> = Arc<Mutex<Option<Result<T, ObjStoreError>>>>;

struct Pending<T> {
    change: Option<Change<T>>,
    durable: bool,
    outcome: Option<Result<T, ObjStoreError>>,
    slot: Slot<T>,
}

impl<T: Send> Queued for Pending<T> {
    fn durable(&self) -> bool {
        self.durable
    }

    fn run(&mut self, conn: &Connection) -> Result<(), ()> {
        let Some(change) = self.change.take() else {
            return Ok(());
        };
        // A change that panics must not take its group down with it: the
        // other callers of the group wait for their outcomes, and the
        // queue's leader must hand over. Its savepoint (or, alone, its
        // transaction) is rolled back like any failed change's.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| change(conn)))
            .unwrap_or(Err(ObjStoreError::ChangePanicked));
        let failed = outcome.is_err();
        self.outcome = Some(outcome);
        if failed {
            Err(())
        } else {
            Ok(())
        }
    }

    fn settle(self: Box<Self>, group: Result<(), &Arc<rusqlite::Error>>) {
        let outcome = match (group, self.outcome) {
            (_, Some(Err(e))) => Err(e),
            (Ok(()), Some(Ok(v))) => Ok(v),
            (Err(source), _) => Err(ObjStoreError::Commit {
                source: Arc::clone(source),
            }),
            (Ok(()), None) => unreachable!("every change of a committed group ran"),
        };
        *lock(&self.slot) = Some(outcome);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in a change leaves no half-done transaction behind
    // (rusqlite rolls back on drop).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Committer {
    pub(crate) fn new(conn: Connection) -> Self {
        Self {
            conn: Mutex::new(conn),
            queue: Mutex::new(Queue::default()),
            settled: Condvar::new(),
            commits: AtomicU64::new(0),
        }
    }

    /// Transactions committed so far: one per group, however many
    /// changes it held.
    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// The connection, for work outside a group (opening, queries while
    /// nothing commits).
    pub(crate) fn conn(&self) -> MutexGuard<'_, Connection> {
        lock(&self.conn)
    }

    /// Runs `change` in the next group commit and returns its outcome
    /// once that group committed (with `durable`, once its WAL is
    /// synced).
    pub(crate) fn commit<T: Send + 'static>(
        &self,
        durable: bool,
        change: impl FnOnce(&Connection) -> Result<T, ObjStoreError> + Send + 'static,
    ) -> Result<T, ObjStoreError> {
        let slot: Slot<T> = Arc::new(Mutex::new(None));
        let mut queue = lock(&self.queue);
        queue.changes.push(Box::new(Pending {
            change: Some(Box::new(change)),
            durable,
            outcome: None,
            slot: Arc::clone(&slot),
        }));
        loop {
            if let Some(outcome) = lock(&slot).take() {
                return outcome;
            }
            if !queue.committing {
                queue.committing = true;
                let group = std::mem::take(&mut queue.changes);
                drop(queue);
                self.commit_group(group);
                queue = lock(&self.queue);
                queue.committing = false;
                self.settled.notify_all();
                continue;
            }
            queue = self.settled.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn commit_group(&self, mut group: Vec<Box<dyn Queued>>) {
        let durable = group.iter().any(|c| c.durable());
        let mut conn = self.conn();
        let result = transact(&mut conn, durable, |tx| {
            if let [one] = group.as_mut_slice() {
                // Alone: its failure rolls the transaction back.
                return one.run(tx).map_err(|()| None);
            }
            for change in &mut group {
                // A failed change keeps its own outcome (see `run`).
                let _ = in_savepoint(tx, |tx| change.run(tx))?;
            }
            Ok(())
        });
        if result.is_ok() {
            self.commits.fetch_add(1, Ordering::Relaxed);
        }
        drop(conn);
        match result {
            // The one change failed (and was rolled back): its own error.
            Err(None) => group.into_iter().for_each(|c| c.settle(Ok(()))),
            Ok(()) => group.into_iter().for_each(|c| c.settle(Ok(()))),
            Err(Some(e)) => {
                let e = Arc::new(e);
                group.into_iter().for_each(|c| c.settle(Err(&e)));
            }
        }
    }
}

/// Runs `body` inside a transaction in a savepoint of its own: when it
/// fails, what it did is rolled back and the rest of the transaction
/// stands. Its outcome is returned; `Err` only when SQLite could not
/// open, roll back or release the savepoint. The statements are
/// prepared once per connection: parsing them per change cost more than
/// the changes' own rows.
pub(crate) fn in_savepoint<T, E>(
    tx: &Connection,
    body: impl FnOnce(&Connection) -> Result<T, E>,
) -> Result<Result<T, E>, rusqlite::Error> {
    tx.prepare_cached("SAVEPOINT change")?.execute([])?;
    let outcome = body(tx);
    if outcome.is_err() {
        tx.prepare_cached("ROLLBACK TO change")?.execute([])?;
    }
    tx.prepare_cached("RELEASE change")?.execute([])?;
    Ok(outcome)
}

/// Runs `body` in one write transaction; with `durable`, the commit
/// fsyncs the WAL (see the module doc). `Err(None)`: the body failed
/// and the transaction was rolled back. BEGIN and COMMIT are prepared
/// once per connection (rusqlite's `Transaction` parses them for every
/// group, a tenth of a small create's instructions); a guard rolls the
/// transaction back on any early return or unwind.
fn transact(
    conn: &mut Connection,
    durable: bool,
    body: impl FnOnce(&Connection) -> Result<(), Option<rusqlite::Error>>,
) -> Result<(), Option<rusqlite::Error>> {
    /// Rolls back unless committed.
    struct Open<'c> {
        conn: &'c Connection,
        committed: bool,
    }
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            if !self.committed && !self.conn.is_autocommit() {
                // Nothing to report to: the caller gets the error that
                // brought it here; a failed rollback leaves SQLite to
                // roll back when the next statement starts.
                let _ = self.conn.execute_batch("ROLLBACK");
            }
        }
    }
    if durable {
        conn.pragma_update(None, "synchronous", "FULL")?;
    }
    let result = (|| {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        let mut open = Open {
            conn,
            committed: false,
        };
        body(open.conn)?;
        if durable {
            // A durable commit must write a frame so that SQLite syncs.
            open.conn
                .prepare_cached("UPDATE store SET flushes = flushes + 1")?
                .execute([])?;
        }
        open.conn.prepare_cached("COMMIT")?.execute([])?;
        open.committed = true;
        Ok(())
    })();
    if durable {
        conn.pragma_update(None, "synchronous", "NORMAL")?;
    }
    result
}

#[cfg(test)]
mod committer_tests {
    use super::*;

    #[test]
    fn a_change_that_panics_fails_alone_and_the_committer_carries_on() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch("CREATE TABLE t (v INTEGER)")
            .expect("schema");
        let committer = Arc::new(Committer::new(conn));
        let insert = |v: i64| {
            move |c: &Connection| {
                c.execute("INSERT INTO t VALUES (?1)", [v])
                    .map(|_| ())
                    .map_err(|e| ObjStoreError::Metadata {
                        what: "insert",
                        source: e,
                    })
            }
        };
        // Alone, then among concurrent changes.
        let r = committer.commit(false, |_: &Connection| -> Result<(), ObjStoreError> {
            panic!("a bug in a change")
        });
        assert!(matches!(r, Err(ObjStoreError::ChangePanicked)), "{r:?}");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let committer = Arc::clone(&committer);
                std::thread::spawn(move || {
                    if i == 3 {
                        committer.commit(false, |_: &Connection| -> Result<(), ObjStoreError> {
                            panic!("another bug")
                        })
                    } else {
                        committer.commit(false, insert(i))
                    }
                })
            })
            .collect();
        let results: Vec<_> = threads
            .into_iter()
            .map(|t| t.join().expect("no caller panics"))
            .collect();
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r.is_ok(), i != 3, "change {i}: {r:?}");
        }
        committer
            .commit(false, insert(100))
            .expect("the store still commits");
        let rows: i64 = committer
            .conn()
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .expect("count");
        assert_eq!(rows, 8);
    }
}
