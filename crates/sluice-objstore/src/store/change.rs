//! One data change (write, write from a source, append, punch): staged
//! under its object's shard (inline, moved to its file, or in its file,
//! journaled or not), committed, then settled into the journal state and
//! the shard's cache.

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::ObjStoreError;
use crate::segments::Segment;
use crate::{data, inline, ObjectRef};

use super::checks::{check_change, check_segments};
use super::files::{punch_plan, punch_runs};
use super::journal::{Journaled, RowsNeed};
use super::rows::{
    prepare_length_update, put_change, retire_rows, ChangeRow, DataRows, JournalRow, RowsDone,
};
use super::shard::{Body, Cached, Shard};
use super::times::write_times;
use super::types::{BatchChange, Edit, ObjectInfo, WriteOptions, WriteSource};
use super::{lock, now, ObjectStore};

#[cfg(doc)]
use super::types::StoreOptions;

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

/// A data change made under its object's shard whose metadata is not
/// committed yet: the row to commit, and the state before and after.
pub(super) struct Staged {
    pub(super) row: ChangeRow,
    pub(super) before: ObjectInfo,
    pub(super) after: Cached,
    /// Journal bytes the row adds.
    pub(super) journal_bytes: u64,
    /// What the file gets once the row is committed (a change that sets
    /// attributes: see [`Deferred`]).
    pub(super) deferred: Option<Deferred>,
}

/// The file half of a change to an object file that also sets or
/// removes attributes. Its bytes go to the journal in the change's
/// commit and reach the file only after it: a crash before the commit
/// leaves old bytes and old attributes, one after it new attributes and
/// journal rows that opening the store replays into the file. Written
/// before the commit, a crash between the two would leave the new bytes
/// beside the old attributes.
pub(super) struct Deferred {
    file: Arc<File>,
    bytes: Arc<Vec<u8>>,
    rows: Vec<JournalRow>,
    durable: bool,
}

/// The offset just past the furthest non-empty segment (0 for none).
pub(super) fn written_end(segments: &[Segment]) -> u64 {
    segments
        .iter()
        .filter(|s| s.len > 0)
        .map(Segment::end)
        .max()
        .unwrap_or(0)
}

impl ObjectStore {
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
        self.shard(object)
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

    /// One change to an object's data under its shard: the bytes change
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
        let shard = self.shard(object);
        let result = {
            let _guard = shard.write();
            let result = self.change_locked(shard, object, opts, edit);
            if result.is_err() {
                // Whatever failed, the next use loads the state afresh.
                shard.forget(object);
            }
            result
        };
        if result.is_ok() {
            self.retire_if_due();
        }
        result
    }

    pub(super) fn change_locked(
        &self,
        shard: &Shard,
        object: ObjectRef,
        opts: &WriteOptions,
        edit: Edit<'_>,
    ) -> Result<(ObjectInfo, ObjectInfo), ObjStoreError> {
        let staged = self.stage(shard, object, None, opts, edit)?;
        if self.defer_commit(&staged, opts) {
            let info = staged.after.info;
            shard.keep(object, staged.after);
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
            .db
            .commit(opts.durable, move |tx| {
                write_times(tx, &times)?;
                put_change(tx, &mut prepare_length_update(tx)?, &row)
            })
            .inspect_err(|_| self.restore_times(kept))?;
        let info = after.info;
        let (applied, need) = self.apply_deferred(object, deferred.as_ref());
        self.settle_change(shard, object, after, done, journal_bytes, need);
        applied.map(|()| (info, before))
    }

    /// Writes a committed change's [`Deferred`] bytes into its file, if
    /// it has any, and says what the change's journal rows need now. On
    /// failure the change stays committed, its rows in the journal (the
    /// next open replays them), and the error says so.
    pub(super) fn apply_deferred(
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

    /// The data half of a change under its object's shard: the bytes
    /// change (inline, moved to the file, or in the file) and the
    /// metadata to commit is returned with the state after it. `start`:
    /// the object's state after a change staged before this one and not
    /// committed yet (else its committed state, from the shard's cache).
    pub(super) fn stage(
        &self,
        shard: &Shard,
        object: ObjectRef,
        start: Option<&Cached>,
        opts: &WriteOptions,
        edit: Edit<'_>,
    ) -> Result<Staged, ObjStoreError> {
        let mut cached = match start {
            Some(c) => c.clone(),
            None => self.cached(shard, object)?,
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
    pub(super) fn settle_change(
        &self,
        shard: &Shard,
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
        shard.keep(object, after);
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
                self.db
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
}
