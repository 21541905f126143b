//! The rows the store commits and reads, as SQL on a connection it is
//! given (the committer's transaction or the read connection): a data
//! change's row ([`ChangeRow`]) and the rows its data needs
//! ([`DataRows`]: inline bytes, journal rows, their retirement), the
//! mandatory and user attributes, and the lookups of partitions,
//! collections and inline bytes.

use std::sync::Arc;

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{params, CachedStatement, Connection, OptionalExtension};

use crate::error::{DbContext, ObjStoreError};
use crate::{ObjectRef, PartitionId};

use super::types::{AttrValue, ObjectInfo};

#[cfg(doc)]
use super::journal::RowsNeed;

impl AttrValue {
    pub(super) fn to_sql(&self) -> Value {
        match self {
            Self::Integer(v) => Value::Integer(*v),
            Self::Text(v) => Value::Text(v.clone()),
            Self::Bytes(v) => Value::Blob(v.clone()),
        }
    }

    /// The value as SQLite takes it, borrowed (no copy of text or bytes).
    fn as_sql(&self) -> ValueRef<'_> {
        match self {
            Self::Integer(v) => ValueRef::Integer(*v),
            Self::Text(v) => ValueRef::Text(v.as_bytes()),
            Self::Bytes(v) => ValueRef::Blob(v),
        }
    }

    fn from_sql(v: ValueRef<'_>) -> Option<Self> {
        match v {
            ValueRef::Integer(v) => Some(Self::Integer(v)),
            ValueRef::Text(v) => Some(Self::Text(String::from_utf8_lossy(v).into_owned())),
            ValueRef::Blob(v) => Some(Self::Bytes(v.to_vec())),
            ValueRef::Null | ValueRef::Real(_) => None,
        }
    }

    pub(super) fn sql_type(&self) -> &'static str {
        match self {
            Self::Integer(_) => "integer",
            Self::Text(_) => "text",
            Self::Bytes(_) => "blob",
        }
    }
}

/// What a data change commits besides the length, times and attribute
/// sets.
pub(super) enum DataRows {
    None,
    /// The object's new inline bytes.
    Inline(Arc<Vec<u8>>),
    /// The object moved to its file (synced): its inline row goes.
    Uninline,
    /// Journal rows, in order, after retiring the object's rows up to
    /// `retire` (rows a non-durable change already wrote into the file:
    /// see [`RowsNeed::Nothing`]).
    Journal {
        bytes: Arc<Vec<u8>>,
        rows: Vec<JournalRow>,
        retire: Option<i64>,
    },
    /// The object's file was synced: its journal rows up to this
    /// sequence number are retired.
    Retire(i64),
}

/// One journal row: `(offset, len, Some(range of the change's bytes))`
/// for a write, `None` for a punch.
pub(super) type JournalRow = (u64, u64, Option<(usize, usize)>);

/// The metadata a data change commits: the new length and times, the
/// attribute sets riding on it and the rows its data needs.
pub(super) struct ChangeRow {
    pub(super) object: ObjectRef,
    pub(super) length: u64,
    pub(super) at: i64,
    pub(super) attrs: Vec<(String, AttrValue)>,
    pub(super) rows: DataRows,
}

/// What committing a change's [`DataRows`] did to the journal.
pub(super) enum RowsDone {
    Other,
    /// Rows added: the newest one's sequence number, and whether the
    /// object's earlier rows were retired in the same commit.
    Journaled {
        seq: i64,
        replaced: bool,
    },
    Retired,
}

pub(super) fn read_info(conn: &Connection, object: ObjectRef) -> Result<ObjectInfo, ObjStoreError> {
    conn.prepare_cached(
        "SELECT length, created, data_modified, attrs_modified FROM objects
         WHERE partition = ?1 AND id = ?2",
    )
    .db("prepare object lookup")?
    .query_row(
        params![object.partition.0 as i64, object.object.0 as i64],
        |r| {
            Ok(ObjectInfo {
                length: r.get::<_, i64>(0)? as u64,
                created: r.get(1)?,
                data_modified: r.get(2)?,
                attrs_modified: r.get(3)?,
            })
        },
    )
    .optional()
    .db("look up object")?
    .ok_or(ObjStoreError::UnknownObject { object })
}

pub(super) fn read_attrs(
    conn: &Connection,
    object: ObjectRef,
    keys: &[&str],
) -> Result<Vec<(String, AttrValue)>, ObjStoreError> {
    let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
    let mut out = Vec::new();
    if keys.is_empty() {
        let mut stmt = conn
            .prepare_cached(
                "SELECT key, value FROM attrs WHERE partition = ?1 AND object = ?2 ORDER BY key",
            )
            .db("prepare attribute listing")?;
        let mut rows = stmt.query(params![p, o]).db("list attributes")?;
        while let Some(row) = rows.next().db("list attributes")? {
            let key: String = row.get(0).db("read attribute key")?;
            if let Some(v) = AttrValue::from_sql(row.get_ref(1).db("read attribute")?) {
                out.push((key, v));
            }
        }
    } else {
        let mut stmt = conn
            .prepare_cached(
                "SELECT value FROM attrs WHERE partition = ?1 AND object = ?2 AND key = ?3",
            )
            .db("prepare attribute lookup")?;
        for key in keys {
            let mut rows = stmt.query(params![p, o, key]).db("get attribute")?;
            if let Some(row) = rows.next().db("get attribute")? {
                if let Some(v) = AttrValue::from_sql(row.get_ref(0).db("read attribute")?) {
                    out.push(((*key).to_owned(), v));
                }
            }
        }
    }
    Ok(out)
}

/// `INSERT OR REPLACE` of 1 to 4 attribute rows of one object (`?1`
/// partition, `?2` object, then key and value of each row): rows go
/// four to a statement, so a create with three attributes runs one
/// statement for them, not three (its cursors on the table and the
/// value index opened once).
const ATTRS_INSERT: [&str; 4] = [
    "INSERT OR REPLACE INTO attrs (partition, object, key, value) VALUES (?1, ?2, ?3, ?4)",
    "INSERT OR REPLACE INTO attrs (partition, object, key, value) VALUES (?1, ?2, ?3, ?4),
     (?1, ?2, ?5, ?6)",
    "INSERT OR REPLACE INTO attrs (partition, object, key, value) VALUES (?1, ?2, ?3, ?4),
     (?1, ?2, ?5, ?6), (?1, ?2, ?7, ?8)",
    "INSERT OR REPLACE INTO attrs (partition, object, key, value) VALUES (?1, ?2, ?3, ?4),
     (?1, ?2, ?5, ?6), (?1, ?2, ?7, ?8), (?1, ?2, ?9, ?10)",
];

/// Stores user attribute rows; the caller updates `attrs_modified`
/// (in the statement it runs anyway, where it has one). Rows of one
/// statement apply in order, so a key given twice keeps its last value,
/// as one statement per row did.
pub(super) fn put_attrs(
    tx: &Connection,
    object: ObjectRef,
    attrs: &[(String, AttrValue)],
) -> Result<(), ObjStoreError> {
    let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
    for rows in attrs.chunks(ATTRS_INSERT.len()) {
        let mut stmt = tx
            .prepare_cached(ATTRS_INSERT[rows.len() - 1])
            .db("prepare attribute set")?;
        stmt.raw_bind_parameter(1, p).db("set attribute")?;
        stmt.raw_bind_parameter(2, o).db("set attribute")?;
        for (i, (key, value)) in rows.iter().enumerate() {
            stmt.raw_bind_parameter(3 + 2 * i, key.as_str())
                .db("set attribute")?;
            stmt.raw_bind_parameter(4 + 2 * i, ToSqlOutput::Borrowed(value.as_sql()))
                .db("set attribute")?;
        }
        stmt.raw_execute().db("set attribute")?;
    }
    Ok(())
}

pub(super) fn check_partition(
    conn: &Connection,
    partition: PartitionId,
) -> Result<(), ObjStoreError> {
    let found: Option<i64> = conn
        .prepare_cached("SELECT id FROM partitions WHERE id = ?1")
        .db("prepare partition lookup")?
        .query_row([partition.0 as i64], |r| r.get(0))
        .optional()
        .db("look up partition")?;
    found
        .map(|_| ())
        .ok_or(ObjStoreError::UnknownPartition { partition })
}

pub(super) fn check_collection(
    conn: &Connection,
    partition: PartitionId,
    name: &str,
) -> Result<(), ObjStoreError> {
    check_partition(conn, partition)?;
    let found: Option<String> = conn
        .prepare_cached("SELECT name FROM collections WHERE partition = ?1 AND name = ?2")
        .db("prepare collection lookup")?
        .query_row(params![partition.0 as i64, name], |r| r.get(0))
        .optional()
        .db("look up collection")?;
    found.map(|_| ()).ok_or(ObjStoreError::UnknownCollection {
        partition,
        name: name.to_owned(),
    })
}

pub(super) fn read_inline(
    conn: &Connection,
    object: ObjectRef,
) -> Result<Option<Vec<u8>>, ObjStoreError> {
    conn.prepare_cached("SELECT data FROM inline_data WHERE object = ?1")
        .db("prepare inline data lookup")?
        .query_row([object.object.0 as i64], |r| r.get(0))
        .optional()
        .db("look up inline data")
}

/// The statement that sets a data change's length and both times.
const UPDATE_LENGTH: &str = "UPDATE objects SET length = ?3, data_modified = ?4,
     attrs_modified = CASE WHEN ?5 THEN ?4 ELSE attrs_modified END
     WHERE partition = ?1 AND id = ?2";

/// [`UPDATE_LENGTH`], prepared (once per connection; a batch takes it
/// once for all its changes: fetching it from rusqlite's cache and
/// handing it back cost a fifth of a change's rows).
pub(super) fn prepare_length_update(tx: &Connection) -> Result<CachedStatement<'_>, ObjStoreError> {
    tx.prepare_cached(UPDATE_LENGTH).db("prepare length update")
}

/// Commits a data change's row: the length and both times in one
/// statement (`update`, from [`prepare_length_update`]), the attribute
/// sets, and its data rows.
pub(super) fn put_change(
    tx: &Connection,
    update: &mut CachedStatement<'_>,
    row: &ChangeRow,
) -> Result<RowsDone, ObjStoreError> {
    let object = row.object;
    update
        .execute(params![
            object.partition.0 as i64,
            object.object.0 as i64,
            row.length as i64,
            row.at,
            !row.attrs.is_empty()
        ])
        .db("update length")?;
    put_attrs(tx, object, &row.attrs)?;
    put_rows(tx, object, &row.rows)
}

/// Deletes `object`'s journal rows up to `seq`.
pub(super) fn retire_rows(
    tx: &Connection,
    object: ObjectRef,
    seq: i64,
) -> Result<(), ObjStoreError> {
    let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
    tx.prepare_cached("DELETE FROM journal WHERE partition = ?1 AND object = ?2 AND seq <= ?3")
        .db("prepare journal retirement")?
        .execute(params![p, o, seq])
        .db("retire journal rows")?;
    Ok(())
}

/// Commits a change's inline bytes, inline row removal, journal rows or
/// journal retirement.
pub(super) fn put_rows(
    tx: &Connection,
    object: ObjectRef,
    rows: &DataRows,
) -> Result<RowsDone, ObjStoreError> {
    let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
    match rows {
        DataRows::None => Ok(RowsDone::Other),
        DataRows::Inline(bytes) if bytes.is_empty() => Ok(RowsDone::Other),
        DataRows::Inline(bytes) => {
            // An upsert updates the row in place (REPLACE would delete
            // and insert it).
            tx.prepare_cached(
                "INSERT INTO inline_data (object, data) VALUES (?1, ?2)
                 ON CONFLICT (object) DO UPDATE SET data = excluded.data",
            )
            .db("prepare inline data")?
            .execute(params![o, bytes.as_slice()])
            .db("store inline data")?;
            Ok(RowsDone::Other)
        }
        DataRows::Uninline => {
            tx.prepare_cached("DELETE FROM inline_data WHERE object = ?1")
                .db("prepare inline data removal")?
                .execute([o])
                .db("remove inline data")?;
            Ok(RowsDone::Other)
        }
        DataRows::Journal {
            bytes,
            rows,
            retire,
        } => {
            if let Some(seq) = *retire {
                retire_rows(tx, object, seq)?;
            }
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO journal (partition, object, offset, len, data)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .db("prepare journal row")?;
            for &(offset, len, range) in rows {
                let data = range.map(|(a, b)| &bytes[a..b]);
                stmt.execute(params![p, o, offset as i64, len as i64, data])
                    .db("journal a write")?;
            }
            Ok(match (rows.is_empty(), retire) {
                (true, None) => RowsDone::Other,
                (true, Some(_)) => RowsDone::Retired,
                (false, _) => RowsDone::Journaled {
                    seq: tx.last_insert_rowid(),
                    replaced: retire.is_some(),
                },
            })
        }
        DataRows::Retire(seq) => {
            retire_rows(tx, object, *seq)?;
            Ok(RowsDone::Retired)
        }
    }
}
