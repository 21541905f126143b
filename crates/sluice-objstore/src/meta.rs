//! The attribute database: schema, connection settings and the one
//! commit that can be made durable.
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

use rusqlite::Connection;

use crate::error::{MetaContext, ObjStoreError};

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
";

pub(crate) fn open(path: &Path) -> Result<Connection, ObjStoreError> {
    let conn = Connection::open(path).meta("open")?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .meta("set WAL mode")?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .meta("set synchronous")?;
    conn.execute_batch(SCHEMA).meta("create schema")?;
    Ok(conn)
}

/// Runs `body` in one write transaction; with `durable`, the commit
/// fsyncs the WAL (see the module doc).
pub(crate) fn transact<T>(
    conn: &mut Connection,
    durable: bool,
    body: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T, ObjStoreError>,
) -> Result<T, ObjStoreError> {
    if durable {
        conn.pragma_update(None, "synchronous", "FULL")
            .meta("set synchronous")?;
    }
    let result = (|| {
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .meta("begin")?;
        let value = body(&tx)?;
        if durable {
            // A durable commit must write a frame so that SQLite syncs.
            tx.execute("UPDATE store SET flushes = flushes + 1", [])
                .meta("count flush")?;
        }
        tx.commit().meta("commit")?;
        Ok(value)
    })();
    if durable {
        conn.pragma_update(None, "synchronous", "NORMAL")
            .meta("set synchronous")?;
    }
    result
}
