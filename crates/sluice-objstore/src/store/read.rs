//! The read paths: under the object's shard (`read`, `read_into`),
//! only when it would not wait (`read_into_nowait`), and the lending of
//! a resident object file (`lend_resident`).

use std::fs::File;
use std::sync::Arc;

use crate::error::ObjStoreError;
use crate::segments::Segment;
use crate::{data, inline, ObjectRef};

use super::checks::{check_read_len, check_segments};
use super::rows::read_attrs;
use super::shard::{Body, Cached};
use super::types::{AttrValue, ReadFound, ReadResult};
use super::ObjectStore;

impl ObjectStore {
    /// Reads `segments` in list order; bytes past the object's end read
    /// as zeros (`real` counts the others). `attr_keys` are read with
    /// the data, consistently with it.
    pub fn read(
        &self,
        object: ObjectRef,
        segments: &[Segment],
        attr_keys: &[&str],
    ) -> Result<ReadResult, ObjStoreError> {
        let total = check_segments(object, segments)?;
        check_read_len(object, total)?;
        let mut data = vec![0u8; total as usize];
        let found = self.read_into(object, segments, attr_keys, |_| &mut data[..])?;
        Ok(ReadResult {
            data,
            real: found.real,
            info: found.info,
            attrs: found.attrs,
        })
    }

    /// Reads `segments` in list order into the buffer `place` returns,
    /// which is called once the metadata is known (so a caller can put
    /// a reply header, which carries `real` and the attributes, before
    /// the bytes) and must return exactly the segments' total length.
    /// Every byte of that buffer is written (zeros past the object's
    /// end and in holes), each once; what it held before does not
    /// matter. `attr_keys` are read with the data, consistently with it.
    pub fn read_into<'b>(
        &self,
        object: ObjectRef,
        segments: &[Segment],
        attr_keys: &[&str],
        place: impl FnOnce(&ReadFound) -> &'b mut [u8],
    ) -> Result<ReadFound, ObjStoreError> {
        let total = check_segments(object, segments)?;
        check_read_len(object, total)?;
        let shard = self.shard(object);
        let _guard = shard.read();
        let cached = self.cached(shard, object)?;
        let attrs = if attr_keys.is_empty() {
            Vec::new()
        } else {
            read_attrs(&self.reader(), object, attr_keys)?
        };
        self.read_cached(object, segments, total, &cached, attrs, place)
    }

    /// [`read_into`](Self::read_into) without attributes, when it would
    /// not wait: the object's state is cached, no change to the object
    /// holds its shard (tried, not waited for), and the span of the
    /// segments inside the object's length is all in the page cache.
    /// `Ok(None)`, with `place` not called, otherwise. As atomic as
    /// `read_into`: the shard is held across the read.
    pub fn read_into_nowait<'b>(
        &self,
        object: ObjectRef,
        segments: &[Segment],
        place: impl FnOnce(&ReadFound) -> &'b mut [u8],
    ) -> Result<Option<ReadFound>, ObjStoreError> {
        let total = check_segments(object, segments)?;
        check_read_len(object, total)?;
        let shard = self.shard(object);
        let Some(_guard) = shard.try_read() else {
            return Ok(None);
        };
        let Some(cached) = shard.cache().get(&object).cloned() else {
            return Ok(None);
        };
        let start = segments.iter().map(|s| s.offset).min().unwrap_or(0);
        let end = segments
            .iter()
            .map(|s| s.offset.saturating_add(s.len))
            .max()
            .unwrap_or(0)
            .min(cached.info.length);
        if let Body::File(file) = &cached.body {
            if start < end && !crate::page_cache::resident(file, start, end - start) {
                return Ok(None);
            }
        }
        self.read_cached(object, segments, total, &cached, Vec::new(), place)
            .map(Some)
    }

    /// The part of a read after its object's state (and attributes) are
    /// known, under its shard.
    fn read_cached<'b>(
        &self,
        object: ObjectRef,
        segments: &[Segment],
        total: u64,
        cached: &Cached,
        attrs: Vec<(String, AttrValue)>,
        place: impl FnOnce(&ReadFound) -> &'b mut [u8],
    ) -> Result<ReadFound, ObjStoreError> {
        let length = cached.info.length;
        let clamp =
            |s: &Segment| Segment::new(s.offset, s.len.min(length.saturating_sub(s.offset)));
        let found = ReadFound {
            real: segments.iter().map(|s| clamp(s).len).sum(),
            info: cached.info,
            attrs,
        };
        let out = place(&found);
        if out.len() as u64 != total {
            return Err(ObjStoreError::PayloadLength {
                object,
                expected: total,
                got: out.len() as u64,
            });
        }
        let read = match (&cached.body, segments) {
            (Body::File(file), [s]) => data::read_segments(Some(file), &[clamp(s)], segments, out),
            (Body::File(file), _) => {
                let clamped: Vec<Segment> = segments.iter().map(clamp).collect();
                data::read_segments(Some(file), &clamped, segments, out)
            }
            (Body::Inline(bytes), [s]) => {
                inline::read_segments(bytes, &[clamp(s)], segments, out);
                Ok(())
            }
            (Body::Inline(bytes), _) => {
                let clamped: Vec<Segment> = segments.iter().map(clamp).collect();
                inline::read_segments(bytes, &clamped, segments, out);
                Ok(())
            }
        };
        read.map_err(self.io_err(object, "read"))?;
        Ok(found)
    }

    /// The object's open data file, lent so that a caller can send
    /// `[offset, offset + len)` of it without copying it here (the
    /// server's `sendfile`), when that range reads as the file's bytes
    /// and reading it now cannot wait: the object's state is cached (no
    /// SQLite, no open), no change to the object holds its shard (the
    /// shard is tried, never waited for), the range lies inside the
    /// object's logical length, and every page of it is in the page
    /// cache. `None` otherwise; [`read_into`](Self::read_into) then
    /// reads it.
    ///
    /// The length is checked under the shard, but the caller reads the
    /// bytes after it is released, so unlike `read_into` a change to the
    /// range made meanwhile may show through, byte by byte old or new (a
    /// write's, or a punch's zeros); a removal leaves the lent file's
    /// bytes as they were. What was inside the length stays inside it
    /// (only a removal shortens an object), so no byte past the end is
    /// ever lent.
    pub fn lend_resident(&self, object: ObjectRef, offset: u64, len: u64) -> Option<Arc<File>> {
        let shard = self.shard(object);
        let _guard = shard.try_read()?;
        let (length, file) = {
            let cache = shard.cache();
            let c = cache.get(&object)?;
            // Inline objects have no file to lend.
            let Body::File(file) = &c.body else {
                return None;
            };
            (c.info.length, Arc::clone(file))
        };
        let end = offset.checked_add(len)?;
        (end <= length && crate::page_cache::resident(&file, offset, len)).then_some(file)
    }
}
