//! The lock shards objects hash to, and the state of known objects
//! each keeps (see [`Shard`]).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::ObjStoreError;
use crate::ObjectRef;

use super::files::drop_stale_tail;
use super::rows::read_inline;
use super::types::ObjectInfo;
use super::ObjectStore;

pub(super) const SHARDS: usize = 64;

/// Objects whose state (and open file) each shard keeps: 512 open data
/// files at most, well under the usual descriptor limit of 1024.
const CACHED_PER_SHARD: usize = 8;

/// Where an object's bytes are.
#[derive(Debug, Clone)]
pub(super) enum Body {
    /// In the database (`inline_data`), from offset 0; past the vector's
    /// end the object reads as zeros (empty: never written).
    Inline(Arc<Vec<u8>>),
    /// In its data file, open.
    File(Arc<File>),
}

/// An object's state kept between requests: its mandatory attributes
/// (the logical length among them) and its bytes (inline, or its open
/// data file).
#[derive(Debug, Clone)]
pub(super) struct Cached {
    pub(super) info: ObjectInfo,
    pub(super) body: Body,
}

/// One of the [`SHARDS`] that objects hash to: the reader-writer lock a
/// request on the object takes, and the cached state of the shard's
/// objects. The cache is exact because it changes only under the
/// shard's lock: a change to an object holds it for writing and
/// updates (or forgets) the entry before releasing it, and a reader
/// holds it for reading, so the state it loads on a miss cannot be
/// changing meanwhile. Bounded by [`CACHED_PER_SHARD`] (open files
/// count against the process's descriptor limit); removing an object
/// closes its file first.
#[derive(Debug, Default)]
pub(super) struct Shard {
    lock: RwLock<()>,
    cache: Mutex<HashMap<ObjectRef, Cached>>,
}

impl Shard {
    pub(super) fn read(&self) -> RwLockReadGuard<'_, ()> {
        self.lock.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock for reading if no change holds it.
    pub(super) fn try_read(&self) -> Option<RwLockReadGuard<'_, ()>> {
        match self.lock.try_read() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    pub(super) fn write(&self) -> RwLockWriteGuard<'_, ()> {
        self.lock.write().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn cache(&self) -> MutexGuard<'_, HashMap<ObjectRef, Cached>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Caches `state` for `object`, evicting another object when full.
    pub(super) fn keep(&self, object: ObjectRef, state: Cached) {
        let mut cache = self.cache();
        if cache.len() >= CACHED_PER_SHARD && !cache.contains_key(&object) {
            // Any other entry: its object is not in use under this lock,
            // and the next use reloads it.
            if let Some(&victim) = cache.keys().next() {
                cache.remove(&victim);
            }
        }
        cache.insert(object, state);
    }

    pub(super) fn forget(&self, object: ObjectRef) {
        self.cache().remove(&object);
    }
}

/// The shard `object` maps to.
pub(super) fn shard_index(object: ObjectRef) -> usize {
    let h = object
        .object
        .0
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(object.partition.0);
    (h >> 58) as usize % SHARDS
}

impl ObjectStore {
    pub(super) fn shard(&self, object: ObjectRef) -> &Shard {
        &self.shards[shard_index(object)]
    }

    /// The object's cached state, loaded on a miss. The caller holds the
    /// object's shard (for reading or writing), so no change to the
    /// object runs meanwhile and what is loaded stays exact.
    pub(super) fn cached(&self, shard: &Shard, object: ObjectRef) -> Result<Cached, ObjStoreError> {
        if let Some(c) = shard.cache().get(&object) {
            return Ok(c.clone());
        }
        self.check_not_replacing(object)?;
        let (info, bytes) = {
            let conn = self.reader();
            (
                self.current_info(&conn, object)?,
                read_inline(&conn, object)?,
            )
        };
        let body = match bytes {
            Some(b) => Body::Inline(Arc::new(b)),
            None => match OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.data_path(object))
            {
                Ok(f) => {
                    drop_stale_tail(&f, info.length).map_err(self.io_err(object, "truncate"))?;
                    Body::File(Arc::new(f))
                }
                // Never written: inline, empty.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Body::Inline(Arc::default()),
                Err(e) => return Err(self.io_err(object, "open")(e)),
            },
        };
        let c = Cached { info, body };
        shard.keep(object, c.clone());
        Ok(c)
    }
}
