//! Making partitions, collections and objects (ids handed out from a
//! reserved block, many creates in one group commit), and removing
//! objects.

use std::io;
use std::sync::Arc;

use rusqlite::{params, Connection};

use crate::error::{DbContext, ObjStoreError};
use crate::segments::Segment;
use crate::{data, db, inline, ObjectId, ObjectRef, PartitionId};

use super::change::written_end;
use super::checks::{check_attrs, check_payload};
use super::files::fsync_dir;
use super::rows::{check_collection, check_partition, put_attrs, put_rows, DataRows};
use super::types::{limits, AttrValue, NewObjects, WriteOptions};
use super::{lock, now, ObjectStore};

#[cfg(doc)]
use super::types::StoreOptions;

/// Object ids reserved in the database at a time: ids are handed out
/// from memory, and the reservation (one synced commit per block) keeps
/// them from being reused after any crash.
const ID_BLOCK: u64 = 4096;

/// Ids handed out from memory: `next..reserved` are reserved in the
/// database and unused.
#[derive(Debug)]
pub(super) struct Ids {
    pub(super) next: u64,
    pub(super) reserved: u64,
}

/// One create of a [`ObjectStore::create_many`] group, as its commit
/// makes it.
struct Insert {
    /// Its place in the group.
    index: usize,
    first: i64,
    count: u32,
    collection: Option<String>,
    length: u64,
    attrs: Vec<(String, AttrValue)>,
    rows: DataRows,
}

impl Insert {
    fn apply(
        &self,
        tx: &Connection,
        partition: PartitionId,
        at: i64,
    ) -> Result<Vec<ObjectId>, ObjStoreError> {
        let ids = insert_objects(
            tx,
            partition,
            self.collection.as_deref(),
            self.first,
            self.count,
            self.length,
            &self.attrs,
            at,
        )?;
        let object = ObjectRef {
            partition,
            object: ObjectId(self.first as u64),
        };
        put_rows(tx, object, &self.rows)?;
        Ok(ids)
    }
}

/// Inserts objects `first..first + count` with `length` and `attrs`.
#[allow(clippy::too_many_arguments)] // one call site per create form
fn insert_objects(
    tx: &Connection,
    partition: PartitionId,
    collection: Option<&str>,
    first: i64,
    count: u32,
    length: u64,
    attrs: &[(String, AttrValue)],
    at: i64,
) -> Result<Vec<ObjectId>, ObjStoreError> {
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO objects (partition, id, length, created, data_modified, attrs_modified)
             VALUES (?1, ?2, ?3, ?4, ?4, ?4)",
        )
        .db("prepare create")?;
    let mut member = tx
        .prepare_cached("INSERT INTO members (partition, collection, object) VALUES (?1, ?2, ?3)")
        .db("prepare collection member")?;
    let mut ids = Vec::with_capacity(count as usize);
    for id in first..first + i64::from(count) {
        insert
            .execute(params![partition.0 as i64, id, length as i64, at])
            .db("create object")?;
        if let Some(name) = collection {
            member
                .execute(params![partition.0 as i64, name, id])
                .db("add collection member")?;
        }
        let object = ObjectRef {
            partition,
            object: ObjectId(id as u64),
        };
        // `attrs_modified` is `at` already.
        put_attrs(tx, object, attrs)?;
        ids.push(object.object);
    }
    Ok(ids)
}

/// Deletes every row of `object`: its own, its attributes, collection
/// memberships, inline bytes and journal rows (in the caller's
/// transaction: a replay never writes a removed object's bytes back).
pub(super) fn delete_rows(tx: &Connection, object: ObjectRef) -> Result<(), ObjStoreError> {
    let (p, o) = (object.partition.0 as i64, object.object.0 as i64);
    let n = tx
        .execute(
            "DELETE FROM objects WHERE partition = ?1 AND id = ?2",
            params![p, o],
        )
        .db("remove object")?;
    if n == 0 {
        return Err(ObjStoreError::UnknownObject { object });
    }
    tx.execute(
        "DELETE FROM attrs WHERE partition = ?1 AND object = ?2",
        params![p, o],
    )
    .db("remove attributes")?;
    tx.execute(
        "DELETE FROM members WHERE partition = ?1 AND object = ?2",
        params![p, o],
    )
    .db("remove collection memberships")?;
    tx.execute("DELETE FROM inline_data WHERE object = ?1", params![o])
        .db("remove inline data")?;
    tx.execute(
        "DELETE FROM journal WHERE partition = ?1 AND object = ?2",
        params![p, o],
    )
    .db("remove journal rows")?;
    Ok(())
}

/// Gives the failure of a group's commit to each create of it (at
/// `indices`); the cause is shared, not copied.
fn fail_each(
    results: &mut [Result<Vec<ObjectId>, ObjStoreError>],
    indices: &[usize],
    e: ObjStoreError,
) {
    let source = match e {
        ObjStoreError::Commit { source } => source,
        ObjStoreError::Metadata { source, .. } if indices.len() > 1 => Arc::new(source),
        ObjStoreError::ChangePanicked => {
            for &i in indices {
                results[i] = Err(ObjStoreError::ChangePanicked);
            }
            return;
        }
        // A lone create's own failure (a group's creates fail inside
        // it, each on its own).
        other => {
            if let Some(&i) = indices.first() {
                results[i] = Err(other);
            }
            return;
        }
    };
    for &i in indices {
        results[i] = Err(ObjStoreError::Commit {
            source: Arc::clone(&source),
        });
    }
}

/// The one result of a group of one create.
fn one(
    mut results: Vec<Result<Vec<ObjectId>, ObjStoreError>>,
) -> Result<Vec<ObjectId>, ObjStoreError> {
    results.pop().unwrap_or(Ok(Vec::new()))
}

impl ObjectStore {
    /// Takes `count` fresh object ids; returns the first.
    fn allocate_ids(&self, count: u64) -> Result<u64, ObjStoreError> {
        let mut ids = lock(&self.ids);
        if ids.reserved - ids.next < count {
            let reserved = ids.next + count.max(ID_BLOCK);
            // Synced: an id handed out must never come back after a
            // crash (a file of the object it named may be left).
            self.db.commit(true, move |tx| {
                tx.execute("UPDATE store SET next_object = ?1", [reserved as i64])
                    .db("reserve object ids")?;
                Ok(())
            })?;
            ids.reserved = reserved;
        }
        let first = ids.next;
        ids.next += count;
        Ok(first)
    }

    /// Checks that `partition` (and `collection` in it) exist, from
    /// memory once seen.
    fn check_exists(
        &self,
        partition: PartitionId,
        collection: Option<&str>,
    ) -> Result<(), ObjStoreError> {
        {
            let known = self.known.read().unwrap_or_else(|e| e.into_inner());
            if let Some(names) = known.get(&partition) {
                if collection.is_none_or(|c| names.contains(c)) {
                    return Ok(());
                }
            }
        }
        {
            let conn = self.reader();
            match collection {
                Some(name) => check_collection(&conn, partition, name)?,
                None => check_partition(&conn, partition)?,
            }
        }
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        let names = known.entry(partition).or_default();
        if let Some(c) = collection {
            names.insert(c.to_owned());
        }
        Ok(())
    }

    /// Makes a new partition (its id chosen by the caller); durable when
    /// it returns.
    pub fn create_partition(&self, partition: PartitionId) -> Result<(), ObjStoreError> {
        let dir = self.partition_dir(partition);
        std::fs::create_dir_all(&dir).map_err(|source| ObjStoreError::StoreIo {
            op: "create",
            path: dir.clone(),
            source,
        })?;
        fsync_dir(&self.root)?;
        self.db.commit(true, move |tx| {
            let n = tx
                .execute(
                    "INSERT OR IGNORE INTO partitions (id) VALUES (?1)",
                    [partition.0 as i64],
                )
                .db("create partition")?;
            if n == 0 {
                return Err(ObjStoreError::PartitionExists { partition });
            }
            Ok(())
        })?;
        self.known
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(partition)
            .or_default();
        Ok(())
    }

    /// Makes a new, empty collection in `partition`.
    pub fn create_collection(
        &self,
        partition: PartitionId,
        name: &str,
    ) -> Result<(), ObjStoreError> {
        let name = name.to_owned();
        self.db.commit(false, move |tx| {
            check_partition(tx, partition)?;
            let n = tx
                .execute(
                    "INSERT OR IGNORE INTO collections (partition, name) VALUES (?1, ?2)",
                    params![partition.0 as i64, name],
                )
                .db("create collection")?;
            if n == 0 {
                return Err(ObjStoreError::CollectionExists { partition, name });
            }
            Ok(())
        })
    }

    /// Creates `count` empty objects in `partition` (members of
    /// `collection` if given), each with `opts.attrs`, in one
    /// transaction (shared with concurrent changes: see
    /// `db::Committer`); returns their ids in increasing order.
    pub fn create(
        &self,
        partition: PartitionId,
        collection: Option<&str>,
        count: u32,
        opts: &WriteOptions,
    ) -> Result<Vec<ObjectId>, ObjStoreError> {
        let new = NewObjects {
            collection,
            count,
            segments: &[],
            data: &[],
            opts,
        };
        one(self.create_many(partition, std::slice::from_ref(&new)))
    }

    /// Makes every create of `creates` (each as [`Self::create`] or, with
    /// data, [`Self::create_and_write`] makes it) in one metadata change:
    /// one group commit, durable if any of them asks to be, instead of
    /// one each. Each create is whole or absent on its own (its own
    /// savepoint), and one that fails (bad attributes, unknown
    /// collection, its file's I/O) fails alone: the others are made.
    /// Returns each create's ids (increasing) or error, in order.
    pub fn create_many(
        &self,
        partition: PartitionId,
        creates: &[NewObjects<'_>],
    ) -> Vec<Result<Vec<ObjectId>, ObjStoreError>> {
        let mut results: Vec<Result<Vec<ObjectId>, ObjStoreError>> = creates
            .iter()
            .map(|c| self.check_new(partition, c).map(|()| Vec::new()))
            .collect();
        let total: u64 = creates
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_ok())
            .map(|(c, _)| u64::from(c.count))
            .sum();
        if total == 0 {
            // Nothing to make (every create failed or asked for none):
            // the empty successes stay empty.
            return results;
        }
        let mut first = match self.allocate_ids(total) {
            Ok(first) => first,
            Err(e) => {
                let indices: Vec<usize> =
                    (0..results.len()).filter(|&i| results[i].is_ok()).collect();
                fail_each(&mut results, &indices, e);
                return results;
            }
        };
        let at = now();
        let mut inserts = Vec::with_capacity(creates.len());
        for (i, c) in creates.iter().enumerate() {
            if results[i].is_err() {
                continue;
            }
            let object = ObjectRef {
                partition,
                object: ObjectId(first),
            };
            first += u64::from(c.count);
            match self.new_rows(object, c) {
                Ok((length, rows)) => inserts.push(Insert {
                    index: i,
                    first: object.object.0 as i64,
                    count: c.count,
                    collection: c.collection.map(str::to_owned),
                    length,
                    attrs: c.opts.attrs.clone(),
                    rows,
                }),
                Err(e) => results[i] = Err(e),
            }
        }
        if inserts.is_empty() {
            return results;
        }
        let durable = creates.iter().any(|c| c.opts.durable);
        let indices: Vec<usize> = inserts.iter().map(|i| i.index).collect();
        let made = self.db.commit(durable, move |tx| {
            if let [insert] = inserts.as_slice() {
                // Alone, its failure is the change's: the transaction (or
                // the committer's savepoint for it) rolls it back.
                return insert.apply(tx, partition, at).map(|ids| vec![Ok(ids)]);
            }
            let mut made = Vec::with_capacity(inserts.len());
            for insert in &inserts {
                let result = db::in_savepoint(tx, |tx| insert.apply(tx, partition, at))
                    .db("savepoint of a create")?;
                made.push(result);
            }
            Ok(made)
        });
        match made {
            Ok(made) => {
                for (i, result) in indices.into_iter().zip(made) {
                    results[i] = result;
                }
            }
            Err(e) => fail_each(&mut results, &indices, e),
        }
        results
    }

    /// The checks a create passes before it is given ids.
    fn check_new(&self, partition: PartitionId, c: &NewObjects<'_>) -> Result<(), ObjStoreError> {
        check_attrs(&c.opts.attrs)?;
        if c.count > limits::CREATE_COUNT {
            return Err(ObjStoreError::CreateCount {
                partition,
                count: c.count,
                limit: limits::CREATE_COUNT,
            });
        }
        let probe = ObjectRef {
            partition,
            object: ObjectId(0),
        };
        check_payload(probe, c.segments, c.data)?;
        if c.count != 1 && !c.data.is_empty() {
            return Err(ObjStoreError::CreateCount {
                partition,
                count: c.count,
                limit: 1,
            });
        }
        self.check_exists(partition, c.collection)
    }

    /// A create's length and bytes: inline rows for the commit, or its
    /// file written (and with `durable` synced) before it.
    fn new_rows(
        &self,
        object: ObjectRef,
        c: &NewObjects<'_>,
    ) -> Result<(u64, DataRows), ObjStoreError> {
        let length = written_end(c.segments);
        if length == 0 {
            return Ok((0, DataRows::None));
        }
        if length <= self.options.inline_max {
            let mut bytes = Vec::with_capacity(length as usize);
            inline::write_segments(&mut bytes, c.segments, c.data);
            return Ok((length, DataRows::Inline(Arc::new(bytes))));
        }
        let file = self.open_for_write(object, true)?;
        data::write_segments(&file, c.segments, c.data).map_err(self.io_err(object, "write"))?;
        self.settle_file(object, &file, c.opts.durable)?;
        Ok((length, DataRows::None))
    }

    /// Creates one object holding `data` (the segments' bytes in list
    /// order) with `opts.attrs`, whole or not at all: the object, its
    /// length, its bytes and its attributes appear in one transaction.
    /// An object that ends inside [`StoreOptions::inline_max`] keeps its
    /// bytes in that transaction; a larger one's file is written first
    /// (synced first with `durable`). A crash before the transaction
    /// leaves at most a file no object names; ids are never reused, and
    /// a file found under a new id is emptied first.
    pub fn create_and_write(
        &self,
        partition: PartitionId,
        collection: Option<&str>,
        segments: &[Segment],
        data: &[u8],
        opts: &WriteOptions,
    ) -> Result<ObjectId, ObjStoreError> {
        let new = NewObjects {
            collection,
            count: 1,
            segments,
            data,
            opts,
        };
        let ids = one(self.create_many(partition, std::slice::from_ref(&new)))?;
        ids.first().copied().ok_or(ObjStoreError::CreateCount {
            partition,
            count: 0,
            limit: 1,
        })
    }

    /// Removes an object, its attributes and its data.
    pub fn remove(&self, object: ObjectRef) -> Result<(), ObjStoreError> {
        let shard = self.shard(object);
        let _guard = shard.write();
        // Its file is still to be renamed into place: removing it now
        // would leave that rename a file no object names.
        self.check_not_replacing(object)?;
        // Closed before the file goes: no cached descriptor outlives it.
        shard.forget(object);
        self.db.commit(false, move |tx| delete_rows(tx, object))?;
        // Only once its rows are gone: until then its later changes
        // must still be journaled.
        self.forget_journaled(object);
        self.dirty
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&object);
        // Ids are never reused, so a file left by a crash here is only
        // space, never another object's data.
        match std::fs::remove_file(self.data_path(object)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io_err(object, "remove")(e)),
        }
    }
}
