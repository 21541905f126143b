//! The SQLite backend: one database (`meta.sqlite`) in a directory, in WAL
//! mode, every commit synced to disk.
//!
//! Writes go to one writer thread, which commits whatever has queued up
//! meanwhile as one SQLite transaction, each operation inside its own
//! savepoint: an operation that fails (a name that exists, a stale
//! revision) is rolled back alone, the others commit, and no reply is sent
//! before the commit that holds it is on disk. So each operation is atomic
//! and durable when it returns, while 32 concurrent writers share one
//! fsync instead of queueing for 32 (SQLite serialises writers anyway).
//! Reads run on a pool of read connections, beside the writer (WAL).
//! Checkpoints (copying the WAL into the database, with its own fsync)
//! run on a third thread every 100 ms instead of inside commits, where
//! SQLite runs them by default: measured with 32 creating threads, that
//! took a third off each commit's time.
//!
//! Tables: `entries(name, revision, record)` (the record as in
//! [`crate::record`]), `pieces(server, name)` (which entries have a piece
//! on a server, for `remove_server`), `servers(seq, uri)` and
//! `counters(name, value)` (the store-wide revision and the placement
//! counter).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};
use std::thread::JoinHandle;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{params, Connection, OptionalExtension};

use crate::record::Record;
use crate::{
    check_name, check_page, prefix_end, Entry, EntryState, Layout, MetaError, MetaStore, Page,
    Redundancy, Update,
};

/// The database file's name inside the directory.
const FILE_NAME: &str = "meta.sqlite";
/// Most operations one commit carries.
const MAX_BATCH: usize = 256;
/// How long a connection waits for SQLite's own locks (another process
/// holding the database) before failing.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The first ?3 entries whose names lie in [?1, ?2), in name order: the
/// first page under a prefix.
const LIST_FROM: &str = "SELECT name, revision, record FROM entries
                         WHERE name >= ?1 AND name < ?2 ORDER BY name LIMIT ?3";
/// The first ?3 entries whose names lie in (?1, ?2), in name order: a
/// page after a continuation key.
const LIST_AFTER: &str = "SELECT name, revision, record FROM entries
                          WHERE name > ?1 AND name < ?2 ORDER BY name LIMIT ?3";

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS counters (
        name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
    INSERT OR IGNORE INTO counters VALUES ('revision', 0), ('placement', 0);
    CREATE TABLE IF NOT EXISTS servers (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, uri TEXT NOT NULL UNIQUE);
    CREATE TABLE IF NOT EXISTS entries (
        name TEXT PRIMARY KEY, revision INTEGER NOT NULL,
        record BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS pieces (
        server TEXT NOT NULL, name TEXT NOT NULL,
        PRIMARY KEY (server, name)) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS deployment (id TEXT NOT NULL);
    CREATE TABLE IF NOT EXISTS settings (
        name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
";

/// The metadata service on SQLite. See the module documentation.
pub struct SqliteMetaStore {
    /// The database file, for error messages.
    path: PathBuf,
    jobs: Option<mpsc::Sender<Job>>,
    writer: Option<JoinHandle<()>>,
    /// Dropped to stop the checkpointer.
    stop_checkpoints: Option<mpsc::Sender<()>>,
    checkpointer: Option<JoinHandle<()>>,
    readers: Mutex<Vec<Connection>>,
    /// Drawn when the database was made.
    deployment: String,
}

impl std::fmt::Debug for SqliteMetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteMetaStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// One write, as the writer thread receives it.
enum Op {
    AddServer(String),
    /// Sets the default redundancy (stored as its text).
    SetRedundancy(Redundancy),
    RemoveServer(String),
    NextPlacement,
    Create {
        name: String,
        layout: Layout,
        attrs: BTreeMap<String, Vec<u8>>,
    },
    Update {
        name: String,
        expected: Option<u64>,
        update: Update,
    },
    Delete {
        name: String,
        expected: Option<u64>,
    },
}

/// What a write returns.
enum Outcome {
    Done,
    Number(u64),
    Entry(Entry),
}

struct Job {
    op: Op,
    reply: mpsc::SyncSender<Result<Outcome, MetaError>>,
}

impl SqliteMetaStore {
    /// Opens (creating if needed) the store in directory `dir`.
    pub fn open(dir: &Path) -> Result<Self, MetaError> {
        let path = dir.join(FILE_NAME);
        std::fs::create_dir_all(dir).map_err(|e| backend(&path, "create its directory", e))?;
        let conn = open_connection(&path)?;
        // The checkpointer thread checkpoints; the writer's commits never.
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;")
            .and_then(|()| conn.execute_batch(SCHEMA))
            .map_err(|e| backend(&path, "create its tables", e))?;
        let deployment = conn
            .execute(
                "INSERT INTO deployment SELECT ?1 WHERE NOT EXISTS (SELECT 1 FROM deployment)",
                [crate::new_deployment_id()],
            )
            .and_then(|_| conn.query_row("SELECT id FROM deployment", [], |r| r.get(0)))
            .map_err(|e| backend(&path, "read the deployment's identity", e))?;
        let (jobs, queue) = mpsc::channel();
        let writer_path = path.clone();
        let writer = std::thread::Builder::new()
            .name("meta-sqlite-writer".to_owned())
            .spawn(move || run_writer(&conn, &writer_path, &queue))
            .map_err(|e| backend(&path, "start its writer thread", e))?;
        let checkpoints = open_connection(&path)?;
        let (stop_checkpoints, stop) = mpsc::channel();
        let checkpointer_path = path.clone();
        let checkpointer = std::thread::Builder::new()
            .name("meta-sqlite-checkpoint".to_owned())
            .spawn(move || run_checkpointer(&checkpoints, &checkpointer_path, &stop))
            .map_err(|e| backend(&path, "start its checkpoint thread", e))?;
        Ok(Self {
            path,
            jobs: Some(jobs),
            writer: Some(writer),
            stop_checkpoints: Some(stop_checkpoints),
            checkpointer: Some(checkpointer),
            readers: Mutex::new(Vec::new()),
            deployment,
        })
    }

    /// Runs one write on the writer thread and waits until it is committed.
    fn write(&self, op: Op) -> Result<Outcome, MetaError> {
        let stopped = || MetaError::Backend {
            backend: describe(&self.path),
            action: "write".to_owned(),
            source: "its writer thread stopped".into(),
        };
        let (reply, result) = mpsc::sync_channel(1);
        let jobs = self.jobs.as_ref().ok_or_else(stopped)?;
        jobs.send(Job { op, reply }).map_err(|_| stopped())?;
        result.recv().map_err(|_| stopped())?
    }

    /// Runs `f` on a read connection from the pool (opening one if none is
    /// free) and returns the connection to the pool.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, MetaError>) -> Result<T, MetaError> {
        let pooled = self.readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => open_connection(&self.path)?,
        };
        let r = f(&conn);
        self.readers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(conn);
        r
    }
}

impl Drop for SqliteMetaStore {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has committed what was
        // queued.
        self.jobs = None;
        if let Some(w) = self.writer.take() {
            if w.join().is_err() {
                tracing::error!(path = %self.path.display(), "metadata writer thread panicked");
            }
        }
        // Then a last checkpoint of what the writer committed.
        self.stop_checkpoints = None;
        if let Some(c) = self.checkpointer.take() {
            if c.join().is_err() {
                tracing::error!(path = %self.path.display(), "metadata checkpoint thread panicked");
            }
        }
    }
}

impl MetaStore for SqliteMetaStore {
    fn add_server(&self, uri: &str) -> Result<(), MetaError> {
        self.write(Op::AddServer(uri.to_owned())).map(|_| ())
    }

    fn remove_server(&self, uri: &str) -> Result<(), MetaError> {
        self.write(Op::RemoveServer(uri.to_owned())).map(|_| ())
    }

    fn servers(&self) -> Result<Vec<String>, MetaError> {
        self.read(|conn| {
            conn.prepare_cached("SELECT uri FROM servers ORDER BY seq")
                .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
                .map_err(|e| backend(&self.path, "list the servers", e))
        })
    }

    fn deployment(&self) -> Result<String, MetaError> {
        Ok(self.deployment.clone())
    }

    fn default_redundancy(&self) -> Result<Redundancy, MetaError> {
        let text: Option<String> = self.read(|conn| {
            conn.prepare_cached("SELECT value FROM settings WHERE name = 'redundancy'")
                .and_then(|mut s| s.query_row([], |r| r.get(0)).optional())
                .map_err(|e| backend(&self.path, "read the default redundancy", e))
        })?;
        text.map_or(Ok(Redundancy::default()), |t| t.parse())
    }

    fn set_default_redundancy(&self, redundancy: Redundancy) -> Result<(), MetaError> {
        redundancy.check()?;
        self.write(Op::SetRedundancy(redundancy)).map(drop)
    }

    fn next_placement(&self) -> Result<u64, MetaError> {
        match self.write(Op::NextPlacement)? {
            Outcome::Number(n) => Ok(n),
            _ => unreachable!("the writer answers NextPlacement with a number"),
        }
    }

    fn create(
        &self,
        name: &str,
        layout: &Layout,
        attrs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Entry, MetaError> {
        check_name(name)?;
        layout.check()?;
        let op = Op::Create {
            name: name.to_owned(),
            layout: layout.clone(),
            attrs: attrs.clone(),
        };
        match self.write(op)? {
            Outcome::Entry(e) => Ok(e),
            _ => unreachable!("the writer answers Create with an entry"),
        }
    }

    fn lookup(&self, name: &str) -> Result<Entry, MetaError> {
        self.read(|conn| current(conn, &self.path, name))?
            .ok_or_else(|| MetaError::NotFound {
                name: name.to_owned(),
            })
    }

    fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Page, MetaError> {
        check_page(prefix, after, limit)?;
        // Names compare as bytes (SQLite's BINARY collation), so the names
        // starting with `prefix` are exactly those in [prefix, end): an
        // index range scan. No UTF-8 name holds a 0xFF byte, so for the
        // empty prefix 0xFF bounds them all.
        let end = prefix_end(prefix).unwrap_or_else(|| vec![0xFF]);
        // `after` starts with `prefix`, so it is the later start.
        let (sql, start) = match after {
            Some(after) => (LIST_AFTER, after),
            None => (LIST_FROM, prefix),
        };
        // One row past the page says whether names follow.
        let probe = i64::try_from(limit + 1).unwrap_or(i64::MAX);
        self.read(|conn| {
            let mut rows: Vec<(String, i64, Vec<u8>)> = conn
                .prepare_cached(sql)
                .and_then(|mut s| {
                    s.query_map(
                        params![start, ToSqlOutput::Borrowed(ValueRef::Text(&end)), probe],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )?
                    .collect()
                })
                .map_err(|e| backend(&self.path, format!("list names under {prefix:?}"), e))?;
            let more = rows.len() > limit;
            rows.truncate(limit);
            let entries = rows
                .into_iter()
                .map(|(name, rev, bytes)| Record::decode(&name, rev as u64, &bytes).map(|(e, _)| e))
                .collect::<Result<Vec<Entry>, MetaError>>()?;
            let next = entries.last().filter(|_| more).map(|e| e.name.clone());
            Ok(Page { entries, next })
        })
    }

    fn update(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        update: &Update,
    ) -> Result<Entry, MetaError> {
        update.check()?;
        let op = Op::Update {
            name: name.to_owned(),
            expected: expected_revision,
            update: update.clone(),
        };
        match self.write(op)? {
            Outcome::Entry(e) => Ok(e),
            _ => unreachable!("the writer answers Update with an entry"),
        }
    }

    fn delete(&self, name: &str, expected_revision: Option<u64>) -> Result<(), MetaError> {
        let op = Op::Delete {
            name: name.to_owned(),
            expected: expected_revision,
        };
        self.write(op).map(|_| ())
    }
}

fn describe(path: &Path) -> String {
    format!("sqlite at {}", path.display())
}

fn backend(
    path: &Path,
    action: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> MetaError {
    MetaError::Backend {
        backend: describe(path),
        action: action.into(),
        source: Box::new(source),
    }
}

fn open_connection(path: &Path) -> Result<Connection, MetaError> {
    let conn = Connection::open(path).map_err(|e| backend(path, "open", e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .and_then(|()| conn.execute_batch("PRAGMA synchronous = FULL;"))
        .map_err(|e| backend(path, "set up a connection", e))?;
    Ok(conn)
}

/// How often the checkpointer copies committed WAL frames into the
/// database.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// The checkpoint thread: a passive checkpoint (never waits for the
/// writer or the readers) every [`CHECKPOINT_EVERY`], and one more when
/// told to stop.
fn run_checkpointer(conn: &Connection, path: &Path, stop: &mpsc::Receiver<()>) {
    loop {
        let stopping = !matches!(
            stop.recv_timeout(CHECKPOINT_EVERY),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(path = %path.display(), error = %e, "metadata checkpoint failed");
        }
        if stopping {
            return;
        }
    }
}

/// The writer thread: takes what is queued, runs it as one transaction
/// with a savepoint per operation, commits, then replies.
fn run_writer(conn: &Connection, path: &Path, queue: &mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut results = Vec::with_capacity(MAX_BATCH);
    while let Ok(first) = queue.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let committed = conn
            .execute_batch("BEGIN IMMEDIATE")
            .and_then(|()| {
                for job in &batch {
                    results.push(run_in_savepoint(conn, path, &job.op)?);
                }
                conn.execute_batch("COMMIT")
            })
            .map_err(|e| {
                if !conn.is_autocommit() {
                    if let Err(e) = conn.execute_batch("ROLLBACK") {
                        tracing::warn!(path = %path.display(), error = %e, "metadata rollback failed");
                    }
                }
                e.to_string()
            });
        let mut results = results.drain(..);
        for job in batch.drain(..) {
            let result = match (&committed, results.next()) {
                (Ok(()), Some(r)) => r,
                (Err(e), _) => Err(MetaError::Backend {
                    backend: describe(path),
                    action: "commit".to_owned(),
                    source: e.clone().into(),
                }),
                (Ok(()), None) => unreachable!("a committed batch has a result per job"),
            };
            // A caller that gave up waiting is not an error here.
            let _ = job.reply.send(result);
        }
    }
}

/// Runs one operation inside a savepoint: its own failure rolls back only
/// its changes. Err only for a failure of the savepoint itself, which ends
/// the whole transaction.
fn run_in_savepoint(
    conn: &Connection,
    path: &Path,
    op: &Op,
) -> rusqlite::Result<Result<Outcome, MetaError>> {
    conn.execute_batch("SAVEPOINT op")?;
    let r = apply(conn, path, op);
    if r.is_err() {
        conn.execute_batch("ROLLBACK TO op")?;
    }
    conn.execute_batch("RELEASE op")?;
    Ok(r)
}

/// One write, inside the writer's transaction.
fn apply(conn: &Connection, path: &Path, op: &Op) -> Result<Outcome, MetaError> {
    let fail = |action: String| move |e| backend(path, action, e);
    match op {
        Op::AddServer(uri) => {
            conn.prepare_cached("INSERT OR IGNORE INTO servers (uri) VALUES (?1)")
                .and_then(|mut s| s.execute([uri]))
                .map_err(fail(format!("add server {uri}")))?;
            Ok(Outcome::Done)
        }
        Op::RemoveServer(uri) => {
            let (objects, example): (i64, Option<String>) = conn
                .prepare_cached("SELECT count(*), min(name) FROM pieces WHERE server = ?1")
                .and_then(|mut s| s.query_row([uri], |r| Ok((r.get(0)?, r.get(1)?))))
                .map_err(fail(format!("find the pieces on server {uri}")))?;
            if let Some(example) = example {
                return Err(MetaError::ServerInUse {
                    server: uri.clone(),
                    objects: objects as u64,
                    example,
                });
            }
            conn.prepare_cached("DELETE FROM servers WHERE uri = ?1")
                .and_then(|mut s| s.execute([uri]))
                .map_err(fail(format!("remove server {uri}")))?;
            Ok(Outcome::Done)
        }
        Op::SetRedundancy(r) => {
            conn.prepare_cached(
                "INSERT INTO settings VALUES ('redundancy', ?1)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            )
            .and_then(|mut s| s.execute([r.to_string()]))
            .map_err(fail("set the default redundancy".to_owned()))?;
            Ok(Outcome::Done)
        }
        Op::NextPlacement => {
            let n: i64 = conn
                .prepare_cached(
                    "UPDATE counters SET value = value + 1 WHERE name = 'placement'
                     RETURNING value - 1",
                )
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(fail("count placements".to_owned()))?;
            Ok(Outcome::Number(n as u64))
        }
        Op::Create {
            name,
            layout,
            attrs,
        } => {
            if current(conn, path, name)?.is_some() {
                return Err(MetaError::Exists { name: name.clone() });
            }
            let entry = Entry {
                name: name.clone(),
                layout: layout.clone(),
                state: EntryState::Creating,
                size: 0,
                attrs: attrs.clone(),
                pending: None,
                revision: next_revision(conn, path)?,
            };
            conn.prepare_cached("INSERT INTO entries (name, revision, record) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| {
                    s.execute(params![
                        name,
                        entry.revision as i64,
                        Record::from_entry(&entry, 0).encode()
                    ])
                })
                .map_err(fail(format!("create {name:?}")))?;
            record_servers(conn, path, None, Some(&entry))?;
            Ok(Outcome::Entry(entry))
        }
        Op::Update {
            name,
            expected,
            update,
        } => {
            let before = existing(conn, path, name, *expected)?;
            let mut entry = before.clone();
            update.apply(&mut entry);
            entry.revision = next_revision(conn, path)?;
            conn.prepare_cached("UPDATE entries SET revision = ?2, record = ?3 WHERE name = ?1")
                .and_then(|mut s| {
                    s.execute(params![
                        name,
                        entry.revision as i64,
                        Record::from_entry(&entry, 0).encode()
                    ])
                })
                .map_err(fail(format!("update {name:?}")))?;
            record_servers(conn, path, Some(&before), Some(&entry))?;
            Ok(Outcome::Entry(entry))
        }
        Op::Delete { name, expected } => {
            let entry = existing(conn, path, name, *expected)?;
            conn.prepare_cached("DELETE FROM entries WHERE name = ?1")
                .and_then(|mut s| s.execute([name]))
                .map_err(fail(format!("delete {name:?}")))?;
            record_servers(conn, path, Some(&entry), None)?;
            Ok(Outcome::Done)
        }
    }
}

/// The servers an entry has pieces on, in its current or pending layout.
fn servers_of(entry: Option<&Entry>) -> BTreeSet<&str> {
    entry
        .into_iter()
        .flat_map(|e| {
            e.layout
                .pieces
                .iter()
                .chain(e.pending.iter().flat_map(|l| &l.pieces))
        })
        .map(|p| p.server.as_str())
        .collect()
}

/// Keeps the `pieces` table (which servers each name uses, for
/// `remove_server`) in step with an entry that changed from `before` to
/// `after` (`None`: not there).
fn record_servers(
    conn: &Connection,
    path: &Path,
    before: Option<&Entry>,
    after: Option<&Entry>,
) -> Result<(), MetaError> {
    let Some(name) = after.or(before).map(|e| e.name.as_str()) else {
        return Ok(());
    };
    let fail = |e| backend(path, format!("record the pieces of {name:?}"), e);
    let (old, new) = (servers_of(before), servers_of(after));
    for server in old.difference(&new) {
        conn.prepare_cached("DELETE FROM pieces WHERE server = ?1 AND name = ?2")
            .and_then(|mut s| s.execute([server, &name]))
            .map_err(fail)?;
    }
    for server in new.difference(&old) {
        conn.prepare_cached("INSERT OR IGNORE INTO pieces (server, name) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute([server, &name]))
            .map_err(fail)?;
    }
    Ok(())
}

/// The entry of `name` as the writer sees it.
fn current(conn: &Connection, path: &Path, name: &str) -> Result<Option<Entry>, MetaError> {
    let row = conn
        .prepare_cached("SELECT revision, record FROM entries WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([name], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .optional()
        })
        .map_err(|e| backend(path, format!("look up {name:?}"), e))?;
    row.map(|(rev, bytes)| Record::decode(name, rev as u64, &bytes).map(|(e, _)| e))
        .transpose()
}

/// The entry of `name`, which must exist and, if `expected` is given, be
/// at that revision.
fn existing(
    conn: &Connection,
    path: &Path,
    name: &str,
    expected: Option<u64>,
) -> Result<Entry, MetaError> {
    let entry = current(conn, path, name)?.ok_or_else(|| MetaError::NotFound {
        name: name.to_owned(),
    })?;
    match expected {
        Some(expected) if expected != entry.revision => Err(MetaError::Conflict {
            name: name.to_owned(),
            expected,
            found: entry.revision,
        }),
        _ => Ok(entry),
    }
}

fn next_revision(conn: &Connection, path: &Path) -> Result<u64, MetaError> {
    conn.prepare_cached(
        "UPDATE counters SET value = value + 1 WHERE name = 'revision' RETURNING value",
    )
    .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
    .map(|v| v as u64)
    .map_err(|e| backend(path, "advance the revision", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_reach_the_database_file_while_open() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = SqliteMetaStore::open(dir.path()).expect("open");
        let file = dir.path().join(FILE_NAME);
        let size = || std::fs::metadata(&file).expect("database file").len();
        let before = size();
        let layout = Layout {
            stripe_unit: 1 << 16,
            redundancy: Default::default(),
            pieces: vec![crate::Piece {
                server: "sluice://s:1".to_owned(),
                partition: 1,
                object: 1,
            }],
        };
        for i in 0..300 {
            store
                .create(&format!("n/{i:04}"), &layout, &BTreeMap::new())
                .expect("create");
        }
        // Writes land in the WAL; only a checkpoint copies them into the
        // database file, and commits never run one.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while size() <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint in 10 s: the database file is still {before} bytes"
            );
            std::thread::sleep(CHECKPOINT_EVERY);
        }
    }

    #[test]
    fn listing_a_page_is_an_index_range_scan() {
        let dir = tempfile::tempdir().expect("temporary directory");
        drop(SqliteMetaStore::open(dir.path()).expect("open"));
        let conn = open_connection(&dir.path().join(FILE_NAME)).expect("connect");
        let end = prefix_end("a/").expect("non-empty");
        for (sql, start) in [(LIST_FROM, "a/"), (LIST_AFTER, "a/b")] {
            let plan: Vec<String> = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                .and_then(|mut s| {
                    s.query_map(
                        params![start, ToSqlOutput::Borrowed(ValueRef::Text(&end)), 11],
                        |r| r.get::<_, String>(3),
                    )?
                    .collect()
                })
                .expect("query plan");
            // One range of the primary key, already in order: no sort,
            // so the limit stops the scan after the page.
            assert_eq!(
                plan,
                ["SEARCH entries USING PRIMARY KEY (name>? AND name<?)"],
                "not a range scan of the primary key: {sql}"
            );
        }
    }
}
