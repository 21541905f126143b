//! Several data changes under one metadata commit
//! ([`ObjectStore::change_batch`]).

use std::sync::Arc;

use crate::error::ObjStoreError;
use crate::{db, ObjectRef};

use super::change::Staged;
use super::checks::check_change;
use super::rows::{prepare_length_update, put_change};
use super::shard::shard_index;
use super::times::write_times;
use super::types::{BatchChange, BatchOutcome, Changed};
use super::ObjectStore;

/// The error a change of a batch gets when the batch's commit failed
/// with `e` (given whole to the first change).
fn shared_failure(e: &ObjStoreError, object: ObjectRef) -> ObjStoreError {
    match e {
        ObjStoreError::Commit { source } => ObjStoreError::Commit {
            source: Arc::clone(source),
        },
        ObjStoreError::ChangePanicked => ObjStoreError::ChangePanicked,
        _ => ObjStoreError::RolledBackWith { object },
    }
}

impl ObjectStore {
    /// Applies several data changes, to one object or several, with one
    /// metadata commit for all of them: a batch of N small writes costs
    /// one transaction where N calls of [`Self::write`] cost N (each
    /// waiting for its own group commit when they run one after another).
    ///
    /// Every guarantee of a single call holds for each change:
    ///
    /// - *Atomic to readers.* The shards of all the changes' objects are
    ///   taken for writing (once each, in index order, so two batches,
    ///   or a batch and a single change, never wait on each other in a
    ///   cycle) and held until the commit returned, so no reader sees a
    ///   change's data without its length and attributes.
    /// - *Alone when it fails.* A change that fails its checks (bad
    ///   range, payload length, attribute), its data step (unknown
    ///   object, I/O error) or its rows fails alone with its own error,
    ///   and the others still apply; each commits in a savepoint of its
    ///   own. Only a change to the same object after one that failed in
    ///   the commit is rolled back with it
    ///   ([`ObjStoreError::RolledBackWith`]), since it was computed on
    ///   top of it. A failed commit fails every change that waited for
    ///   it.
    /// - *Durable and journal rules.* A durable change, or one to an
    ///   object with journal rows outstanding, commits on its own as
    ///   [`Self::write`] would (after the changes before it commit), so
    ///   the journal's ordering and the synced commit are exactly a
    ///   single call's; only plain (not durable) changes share the one
    ///   commit. Such a change adds journal rows only when it sets
    ///   attributes on an object file: its bytes are written to the file
    ///   after the commit (as a single call's), before any later change
    ///   to that object.
    ///
    /// Changes apply in the order given, so two changes to one object
    /// land as the same two calls in that order would.
    pub fn change_batch(&self, changes: &[BatchChange<'_>]) -> BatchOutcome {
        let mut results: Vec<Option<Result<Changed, ObjStoreError>>> = changes
            .iter()
            .map(|c| check_change(c).err().map(Err))
            .collect();
        let mut shards: Vec<usize> = changes
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(c, _)| shard_index(c.object))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        let guards: Vec<_> = shards.iter().map(|&i| self.shards[i].write()).collect();
        let mut staged: Vec<(usize, Staged)> = Vec::with_capacity(changes.len());
        let mut commits = 0;
        for (i, c) in changes.iter().enumerate() {
            if results[i].is_some() {
                continue;
            }
            let shard = self.shard(c.object);
            // A change staged to write its file after the commit (see
            // `Deferred`) commits before a later change to its object
            // that would write the file before it (one setting no
            // attribute); that one then follows the journal rule.
            if c.opts.attrs.is_empty()
                && staged
                    .iter()
                    .any(|(_, s)| s.row.object == c.object && s.deferred.is_some())
            {
                commits += self.commit_staged(&mut staged, &mut results);
            }
            if c.opts.durable || self.has_journal(c.object) {
                commits += self.commit_staged(&mut staged, &mut results);
                let r = self.change_locked(shard, c.object, c.opts, c.edit);
                match &r {
                    Ok(_) => commits += 1,
                    Err(_) => shard.forget(c.object),
                }
                results[i] = Some(r.map(|(info, before)| Changed { info, before }));
                continue;
            }
            // A change to an object changed earlier in the batch starts
            // from that change's state: not from the shard's cache, which
            // holds committed states only (and may have evicted it).
            let start = staged
                .iter()
                .rev()
                .find(|(_, s)| s.row.object == c.object)
                .map(|(_, s)| &s.after);
            match self.stage(shard, c.object, start, c.opts, c.edit) {
                // Only a change on committed state may skip the commit:
                // one on top of a staged change waits for it.
                Ok(s) if start.is_none() && self.defer_commit(&s, c.opts) => {
                    let info = s.after.info;
                    shard.keep(c.object, s.after);
                    results[i] = Some(Ok(Changed {
                        info,
                        before: s.before,
                    }));
                }
                Ok(s) => staged.push((i, s)),
                Err(e) => {
                    // Changes to this object staged before commit first,
                    // so what reloads its state sees theirs.
                    if start.is_some() {
                        commits += self.commit_staged(&mut staged, &mut results);
                    }
                    shard.forget(c.object);
                    results[i] = Some(Err(e));
                }
            }
        }
        commits += self.commit_staged(&mut staged, &mut results);
        drop(guards);
        self.retire_if_due();
        let results = results
            .into_iter()
            .zip(changes)
            .map(|(r, c)| r.unwrap_or(Err(ObjStoreError::RolledBackWith { object: c.object })))
            .collect();
        BatchOutcome { results, commits }
    }

    /// Commits the rows of `staged` changes in one transaction (each in
    /// a savepoint), settles each, and records their outcomes; returns
    /// the transactions made (0 with nothing staged, else 1). The
    /// caller holds the changes' shards.
    fn commit_staged(
        &self,
        staged: &mut Vec<(usize, Staged)>,
        results: &mut [Option<Result<Changed, ObjStoreError>>],
    ) -> usize {
        if staged.is_empty() {
            return 0;
        }
        let mut rows = Vec::with_capacity(staged.len());
        let mut rest = Vec::with_capacity(staged.len());
        for (i, s) in staged.drain(..) {
            rows.push(s.row);
            rest.push((i, s.before, s.after, s.journal_bytes, s.deferred));
        }
        let objects: Vec<ObjectRef> = rows.iter().map(|r| r.object).collect();
        let times = self.take_times();
        let kept = times.clone();
        let committed = self.db.commit(false, move |tx| {
            let sql = |e| ObjStoreError::Commit {
                source: Arc::new(e),
            };
            write_times(tx, &times)?;
            // All in one savepoint first: three statements for the batch
            // instead of three per change (a savepoint cost a sixth of a
            // change's rows). Should any change fail, that is rolled back
            // and each change runs in a savepoint of its own, so only
            // the failing one (and later changes to its object) are lost.
            let mut update = prepare_length_update(tx)?;
            let all = db::in_savepoint(tx, |tx| {
                rows.iter()
                    .map(|row| put_change(tx, &mut update, row))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(sql)?;
            if let Ok(done) = all {
                return Ok(done.into_iter().map(Ok).collect());
            }
            let mut failed: Vec<ObjectRef> = Vec::new();
            let mut done = Vec::with_capacity(rows.len());
            for row in &rows {
                if failed.contains(&row.object) {
                    done.push(Err(ObjStoreError::RolledBackWith { object: row.object }));
                    continue;
                }
                let r = db::in_savepoint(tx, |tx| put_change(tx, &mut update, row)).map_err(sql)?;
                if r.is_err() {
                    failed.push(row.object);
                }
                done.push(r);
            }
            Ok(done)
        });
        match committed {
            Ok(done) => {
                for ((object, (i, before, after, journal_bytes, deferred)), r) in
                    objects.into_iter().zip(rest).zip(done)
                {
                    let shard = self.shard(object);
                    results[i] = Some(match r {
                        Ok(rows_done) => {
                            let info = after.info;
                            let (applied, need) = self.apply_deferred(object, deferred.as_ref());
                            self.settle_change(
                                shard,
                                object,
                                after,
                                rows_done,
                                journal_bytes,
                                need,
                            );
                            applied.map(|()| Changed { info, before })
                        }
                        Err(e) => {
                            shard.forget(object);
                            Err(e)
                        }
                    });
                }
            }
            Err(e) => {
                self.restore_times(kept);
                let members: Vec<(ObjectRef, usize)> = objects
                    .into_iter()
                    .zip(rest)
                    .map(|(o, (i, ..))| (o, i))
                    .collect();
                // Whatever failed, the next use loads the state afresh.
                for &(object, i) in members.iter().skip(1) {
                    self.shard(object).forget(object);
                    results[i] = Some(Err(shared_failure(&e, object)));
                }
                // The first change gets the cause itself.
                if let Some(&(object, i)) = members.first() {
                    self.shard(object).forget(object);
                    results[i] = Some(Err(e));
                }
            }
        }
        1
    }
}
