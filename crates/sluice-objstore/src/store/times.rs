//! Data-modified times waiting in memory: a rewrite that commits
//! nothing else leaves its time here (see [`ObjectStore::defer_commit`])
//! until the next commit of a data change, a flush or the store's close
//! writes it.

use std::sync::atomic::Ordering;

use rusqlite::{params, Connection};

use crate::error::{DbContext, ObjStoreError};
use crate::ObjectRef;

use super::change::Staged;
use super::rows::{read_info, DataRows};
use super::types::{ObjectInfo, WriteOptions};
use super::{lock, ObjectStore};

/// The most objects whose data-modified time may wait in memory; a
/// rewrite of another object then commits (and writes them all).
const UNWRITTEN_TIMES_MAX: usize = 4096;

/// Writes data-modified times kept in memory. Never backwards: a time
/// taken out of memory before another commit wrote a newer one for the
/// same object leaves the newer one.
pub(super) fn write_times(
    tx: &Connection,
    times: &[(ObjectRef, i64)],
) -> Result<(), ObjStoreError> {
    if times.is_empty() {
        return Ok(());
    }
    let mut stmt = tx
        .prepare_cached(
            "UPDATE objects SET data_modified = max(data_modified, ?3)
             WHERE partition = ?1 AND id = ?2",
        )
        .db("prepare data-modified time")?;
    for &(object, at) in times {
        stmt.execute(params![
            object.partition.0 as i64,
            object.object.0 as i64,
            at
        ])
        .db("write data-modified time")?;
    }
    Ok(())
}

impl ObjectStore {
    /// The object's mandatory attributes from the database, with its
    /// data-modified time if a newer one waits in memory.
    pub(super) fn current_info(
        &self,
        conn: &Connection,
        object: ObjectRef,
    ) -> Result<ObjectInfo, ObjStoreError> {
        let mut info = read_info(conn, object)?;
        if let Some(&at) = lock(&self.unwritten_times).get(&object) {
            info.data_modified = info.data_modified.max(at);
        }
        Ok(info)
    }

    /// Skips a staged change's commit where it may, and says whether it
    /// did (the caller then caches the state after it). A rewrite inside an
    /// object file's length, with no attribute set, no journal row and
    /// no durability asked, changes nothing in the database but the
    /// object's data-modified time: that time waits in memory instead
    /// (the object's cached state carries it, and reads of the database
    /// see it laid over), to be written with the next commit of a data
    /// change, by a flush, or when the store closes, as a file system
    /// mounted with `lazytime` does with file times. So rewriting a
    /// known object costs no transaction (about a quarter of a
    /// 256 KiB write of 8-byte blocks' server time went to it). What a
    /// crash can lose is only that time, and only until the next flush,
    /// which must cover the bytes it dates anyway. At most
    /// [`UNWRITTEN_TIMES_MAX`] objects' times wait; past that a rewrite
    /// commits as any change does, writing them all.
    pub(super) fn defer_commit(&self, staged: &Staged, opts: &WriteOptions) -> bool {
        let row = &staged.row;
        if opts.durable
            || !row.attrs.is_empty()
            || !matches!(row.rows, DataRows::None)
            || row.length != staged.before.length
        {
            return false;
        }
        let mut times = lock(&self.unwritten_times);
        if times.len() >= UNWRITTEN_TIMES_MAX && !times.contains_key(&row.object) {
            return false;
        }
        let at = times.entry(row.object).or_insert(row.at);
        *at = (*at).max(row.at);
        self.deferred_commits.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Takes the data-modified times waiting in memory, to be written by
    /// a commit about to be made (given back with [`Self::restore_times`]
    /// if it fails).
    pub(super) fn take_times(&self) -> Vec<(ObjectRef, i64)> {
        let mut times = lock(&self.unwritten_times);
        if times.is_empty() {
            return Vec::new();
        }
        times.drain().collect()
    }

    /// Puts back times taken for a commit that failed.
    pub(super) fn restore_times(&self, taken: Vec<(ObjectRef, i64)>) {
        if taken.is_empty() {
            return;
        }
        let mut times = lock(&self.unwritten_times);
        for (object, at) in taken {
            let kept = times.entry(object).or_insert(at);
            *kept = (*kept).max(at);
        }
    }
}
