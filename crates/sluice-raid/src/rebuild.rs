//! Operating a running array: replacing a member and rebuilding it
//! online, scrubbing parity, and the status an operator sees.
//!
//! # Rebuild
//!
//! [`RaidDevice::replace_member`] puts a new device in a failed
//! member's place, with a superblock of its own (a new member uuid, the
//! array's uuid, role *rebuilding*; the event counter bumped on every
//! member). [`RaidDevice::start_rebuild`] then reconstructs it in the
//! background, a run of stripes at a time, while the array serves
//! requests.
//!
//! The rebuild keeps a cursor: stripes below it hold current data on
//! the new member, stripes at or past it do not. The cursor moves only
//! while the rebuild holds the stripe locks of every stripe it passes,
//! and every writer decides whether the new member takes its part of a
//! stripe while holding that stripe's lock ([`RaidDevice::usable`]), so:
//!
//! - a write to a stripe below the cursor goes to the new member like
//!   to any other;
//! - a write to a stripe at or past the cursor is written degraded (the
//!   new member's chunk left to parity, exactly as while it was failed),
//!   and the rebuild reaches the stripe later and reconstructs it from
//!   the data and parity that write left;
//! - a write cannot fall between the rebuild's reads of a stripe and
//!   its write of the reconstructed chunk, since both hold the lock.
//!
//! Reads of the new member's chunks below the cursor go to it; at or
//! past the cursor they are rebuilt from the others, under the stripe
//! lock. When the cursor reaches the end the member becomes active and
//! the superblocks record it (event counter bumped).
//!
//! The rebuild is pipelined: while the run at the cursor is written to
//! the new member, the next run is read from the others (under its
//! stripe locks) and reconstructed, so both links are busy at once and
//! memory stays at one run per member. The written run's locks are no
//! longer held from its read to its write, so the last point above is
//! kept another way: a writer that writes a stripe past the cursor but
//! inside the read-ahead counts it in a write generation (under that
//! stripe's lock), and the rebuild takes the run's locks, compares its
//! generation with the one it read under, and reads and writes the run
//! again (under the locks) if it changed, before the cursor passes it.
//!
//! Progress is recorded: at most every [`RECORD_EVERY`] the new member
//! is flushed and the cursor written to every superblock (`rebuilt`),
//! and closing the array records it too. An array opened with a member
//! marked rebuilding resumes from the recorded cursor and never reads
//! that member past it until rebuilt there.
//!
//! The rate limit ([`RaidDevice::set_rebuild_rate`]) makes each step
//! wait out the rest of the time its bytes may take. That wait and the
//! recording interval read the array's [`Clock`]
//! ([`RaidDevice::with_clock`]), so tests drive them without sleeping.
//!
//! If another member fails during the rebuild, the new member is
//! marked failed first: stripes past the cursor can no longer be
//! reconstructed, and the array answers errors rather than wrong data.
//!
//! # Scrub
//!
//! [`RaidDevice::scrub`] reads every stripe from every member (a run at
//! a time, under the stripes' locks, so no write is half-way through
//! one), compares each stripe's parity with the XOR of its data and
//! counts the stripes that differ; with `repair` it rewrites their
//! parity from the data. It needs every member active.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::array::{MemberError, NamedMember};
use crate::clock::Clock;
use crate::device::{MemberSet, Outcome, RaidDevice, RaidError, ReadAhead, NO_MEMBER};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::RaidLevel;
use crate::parity::xor_into;
use crate::superblock::MemberRole;

/// Bytes of each member one rebuild or scrub step covers (at most
/// [`MAX_RUN`] stripes).
const RUN_BYTES: u64 = 1 << 20;
/// Most stripes one rebuild or scrub step covers.
const MAX_RUN: u64 = 64;
/// How often a rebuild records its progress in the superblocks (a
/// flush of the new member and a superblock write on every member).
const RECORD_EVERY: Duration = Duration::from_secs(1);

/// Sleeps on `clock` what is left of the time `bytes` may take at
/// `rate` bytes per second when the work on them began at `started`.
pub(crate) fn pace(clock: &dyn Clock, bytes: u64, rate: u64, started: Instant) {
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(bytes as f64 / rate as f64);
    let took = clock.now().saturating_duration_since(started);
    if let Some(rest) = due.checked_sub(took) {
        clock.sleep(rest);
    }
}

impl RaidDevice {
    /// Stripes in the array (each member holds one unit of each).
    pub(crate) fn stripes(&self) -> u64 {
        self.size / self.geometry.stripe_bytes()
    }

    /// Stripes one rebuild or scrub step covers.
    pub(crate) fn run_stripes(&self) -> u64 {
        (RUN_BYTES / self.geometry.unit()).clamp(1, MAX_RUN)
    }

    /// Sets the rebuild and scrub rate limit, bytes per second written
    /// (rebuild) or read per member (scrub); 0 for none.
    pub fn set_rebuild_rate(&self, bytes_per_second: u64) {
        self.rebuild.rate.store(bytes_per_second, Ordering::SeqCst);
    }

    /// Puts `member` in place `index` and marks it rebuilding (see the
    /// module documentation); the rebuild itself runs once
    /// [`Self::start_rebuild`] is called. The member at `index` must be
    /// failed, or failing it must leave the array running (it is then
    /// failed first). Refused on RAID 0, on arrays without superblocks,
    /// while another rebuild or a scrub runs, and for a member smaller
    /// than the array's data on it.
    pub fn replace_member(&self, index: usize, member: NamedMember) -> Result<(), RaidError> {
        if self.geometry.tolerance() == 0 {
            return Err(RaidError::Refused(
                "a RAID 0 array has no redundancy to rebuild a member from".into(),
            ));
        }
        let Some(superblocks) = &self.superblocks else {
            return Err(RaidError::Refused(
                "the array has no superblocks to record a new member in".into(),
            ));
        };
        if index >= self.counters.len() {
            return Err(RaidError::NoSuchMember {
                index,
                members: self.counters.len(),
            });
        }
        let rebuilding = self.rebuild.member.load(Ordering::SeqCst);
        if rebuilding != NO_MEMBER {
            return Err(RaidError::Refused(format!(
                "member {rebuilding} is being rebuilt; replace another member once it is done"
            )));
        }
        if self.scrub.running.load(Ordering::SeqCst) {
            return Err(RaidError::Refused(
                "a scrub is running; replace the member once it is done".into(),
            ));
        }
        if self.alive(index) {
            self.fail_member(index)?;
        }
        if self.lost() {
            return Err(self_failed(self));
        }
        let (data_offset, data_size) = {
            let s = superblocks.lock().unwrap_or_else(|p| p.into_inner());
            (s[index].data_offset, s[index].data_size)
        };
        let size = member.device.size();
        if size < data_offset + data_size {
            return Err(MemberError::TooSmall {
                index,
                name: member.name,
                size,
                needed: data_offset + data_size,
            }
            .into());
        }
        let readd = self.same_member_back(index, &member);
        if !readd {
            *self.missed(index) = None;
            let mut s = superblocks.lock().unwrap_or_else(|p| p.into_inner());
            s[index].member_uuid = Uuid::new_v4();
        }
        // Rebuilding from stripe 0 before the member is alive again, so
        // no writer ever sees it usable for a stripe not rebuilt.
        self.rebuild.cursor.store(0, Ordering::SeqCst);
        self.rebuild.window_end.store(0, Ordering::SeqCst);
        *self.rebuild.ahead.lock().unwrap_or_else(|p| p.into_inner()) = None;
        *self
            .rebuild
            .recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = (0, self.clock.now());
        self.rebuild.member.store(index, Ordering::SeqCst);
        self.rebuild.replaced.fetch_add(1, Ordering::SeqCst);
        let old = self.members.load();
        let mut devices = old.devices.clone();
        let mut names = old.names.clone();
        devices[index] = Some(member.device);
        names[index] = member.name;
        if readd {
            let runs = self.missed(index).as_ref().map_or(0, |m| m.marked());
            tracing::info!(array = %self.label, member = index, name = %names[index], runs,
                "member back within the re-add window; resyncing only the runs it missed");
        } else {
            tracing::info!(array = %self.label, member = index, name = %names[index],
                "member replaced; rebuilding it");
        }
        self.members.store(Arc::new(MemberSet { devices, names }));
        self.counters[index].failed.store(false, Ordering::SeqCst);
        let name = self.members.load().names[index].clone();
        self.update_superblocks(|s| {
            s.roles[index] = MemberRole::Rebuilding;
            s.rebuilt = 0;
            s.names.resize(s.roles.len(), String::new());
            s.names[index].clone_from(&name);
        });
        Ok(())
    }

    /// Starts the background rebuild of the member marked rebuilding, if
    /// there is one and no rebuild thread runs; returns whether it
    /// started. The thread holds the array only while it works on a run
    /// of stripes, so dropping the array stops it (the superblocks keep
    /// the member marked rebuilding and the cursor: the next open
    /// resumes).
    pub fn start_rebuild(self: &Arc<Self>) -> bool {
        if self.rebuild.member.load(Ordering::SeqCst) == NO_MEMBER
            || self.rebuild.running.swap(true, Ordering::SeqCst)
        {
            return false;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("raid-rebuild".into())
            .spawn(move || loop {
                let Some(array) = weak.upgrade() else {
                    return;
                };
                let clock = Arc::clone(&array.clock);
                let started = clock.now();
                let failed = array.failed_count();
                let step = array.rebuild_step();
                let rate = array.rebuild.rate.load(Ordering::SeqCst);
                match step {
                    Some(bytes) => {
                        drop(array);
                        pace(&*clock, bytes, rate, started);
                    }
                    // RAID 6 keeps rebuilding when another member fails
                    // during a step (see `mark_failed`): the step is
                    // done again without it.
                    None if array.failed_count() > failed
                        && array.rebuild.member.load(Ordering::SeqCst) != NO_MEMBER => {}
                    None => {
                        array.rebuild.running.store(false, Ordering::SeqCst);
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!(array = %self.label, error = %e, "cannot start the rebuild thread");
            self.rebuild.running.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Rebuilds the next run of stripes; returns the bytes written, or
    /// `None` once the rebuild has ended (done, or stopped by a failure).
    /// The rebuild thread calls this in a loop; tests drive it directly.
    ///
    /// Pipelined: one fan-out step writes the run at the cursor to the
    /// new member while it reads the next run from the others (under
    /// the next run's stripe locks), so the new member's link and the
    /// others' are busy at once. The next run, reconstructed, waits for
    /// the following call (memory: one run per member). Since the write
    /// of a run read earlier no longer holds its stripe locks from read
    /// to write, the run's write generation (writes past the cursor
    /// into the read-ahead, counted under the stripe locks) is checked
    /// under its locks before the cursor passes it; a run written in
    /// between is read and written again there.
    pub fn rebuild_step(&self) -> Option<u64> {
        let mut ahead = self.rebuild.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let stepped = self.pipelined_step(&mut ahead);
        if stepped.is_none() {
            *ahead = None;
        }
        stepped
    }

    fn pipelined_step(&self, ahead: &mut Option<ReadAhead>) -> Option<u64> {
        let target = self.rebuild.member.load(Ordering::SeqCst);
        if target == NO_MEMBER {
            return None;
        }
        let stripes = self.stripes();
        self.skip_unmissed(target);
        let first = self.rebuild.cursor.load(Ordering::SeqCst);
        if first >= stripes {
            self.finish_rebuild(target);
            return None;
        }
        let current = match ahead.take() {
            Some(a) if a.first == first => a,
            _ => {
                let range = first..stripes.min(first + self.run_stripes());
                self.rebuild
                    .window_end
                    .fetch_max(range.end, Ordering::SeqCst);
                let _locks = self.lock_stripes(range.clone());
                self.read_locked(target, range, None)?
            }
        };
        let mut next_end = stripes.min(current.end + self.run_stripes());
        if !self.may_have_missed(target, current.end..next_end) {
            // A resync that will skip it: not worth reading ahead.
            next_end = current.end;
        }
        let next = self.read_ahead(target, current.end..next_end, &current)?;
        // The run is on the new member; it is current there unless a
        // write past the cursor reached it since it was read.
        let range = current.first..current.end;
        let locks = self.lock_stripes(range.clone());
        if self.rebuild.member.load(Ordering::SeqCst) != target || !self.alive(target) {
            return None;
        }
        if self.generation(range.clone()) != current.generation {
            let again = self.read_locked(target, range.clone(), None)?;
            if !self.rebuild_ran(&mut [self.rebuilt_write(target, &again)], target) {
                return None;
            }
        }
        self.rebuild.cursor.store(range.end, Ordering::SeqCst);
        drop(locks);
        *ahead = next;
        self.record_progress(target);
        Some(current.rebuilt.len() as u64)
    }

    /// Reads `range` from every member but `target` under its stripe
    /// locks and reconstructs `target`'s chunks of it, writing `write`
    /// (an earlier read-ahead) to `target` in the same fan-out step.
    /// Returns the read-ahead (`None` for an empty range), or `None` if
    /// the rebuild must stop.
    fn read_ahead(
        &self,
        target: usize,
        range: Range<u64>,
        write: &ReadAhead,
    ) -> Option<Option<ReadAhead>> {
        if range.is_empty() {
            let written = self.rebuild_ran(&mut [self.rebuilt_write(target, write)], target);
            return written.then_some(None);
        }
        self.rebuild
            .window_end
            .fetch_max(range.end, Ordering::SeqCst);
        let _locks = self.lock_stripes(range.clone());
        self.read_locked(target, range, Some(write)).map(Some)
    }

    /// The write of a reconstructed run to `target`.
    fn rebuilt_write<'a>(&self, target: usize, run: &'a ReadAhead) -> MemberIo<'a> {
        MemberIo::new(
            target,
            MemberOp::Write {
                buf: &run.rebuilt,
                offset: run.first * self.geometry.unit(),
                fua: false,
            },
        )
    }

    /// Reads `range` (its stripe locks held by the caller) from every
    /// member but `target`, with `write` to `target` in the same step,
    /// and reconstructs `target`'s chunks.
    fn read_locked(
        &self,
        target: usize,
        range: Range<u64>,
        write: Option<&ReadAhead>,
    ) -> Option<ReadAhead> {
        let unit = self.geometry.unit();
        let len = ((range.end - range.start) * unit) as usize;
        let others = self.rebuild_sources(target)?;
        let mut bufs = vec![vec![0u8; len]; others.len()];
        let mut step: Vec<MemberIo<'_>> = others
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&m, buf)| {
                MemberIo::new(
                    m,
                    MemberOp::Read {
                        buf,
                        offset: range.start * unit,
                    },
                )
            })
            .collect();
        step.extend(write.map(|w| self.rebuilt_write(target, w)));
        if !self.rebuild_ran(&mut step, target) {
            return None;
        }
        drop(step);
        let rebuilt = if self.geometry.level() == RaidLevel::Raid6 {
            self.rebuilt_pq(target, range.start, &others, &bufs)?
        } else {
            let mut bufs = bufs.into_iter();
            let mut rebuilt = bufs.next()?;
            for b in bufs {
                xor_into(&mut rebuilt, &b);
            }
            rebuilt
        };
        Some(ReadAhead {
            first: range.start,
            end: range.end,
            generation: self.generation(range),
            rebuilt,
        })
    }

    /// The members a rebuild of `target` reads: every other one, all
    /// alive (`None`, logged, if one has failed); on RAID 1 and 10, one
    /// alive mirror of its set.
    fn rebuild_sources(&self, target: usize) -> Option<Vec<usize>> {
        if self.rebuild.member.load(Ordering::SeqCst) != target || !self.alive(target) {
            return None;
        }
        if self.geometry.mirrored() {
            // A copy of one active mirror.
            let source = self
                .geometry
                .mirror_set(target)
                .find(|&m| m != target && self.alive(m));
            if source.is_none() {
                tracing::error!(array = %self.label, member = target,
                    "rebuild stopped: no other mirror is left");
            }
            return source.map(|m| vec![m]);
        }
        if self.geometry.level() == RaidLevel::Raid6 {
            // P and Q rebuild the target with one other member gone.
            let others: Vec<usize> = (0..self.counters.len())
                .filter(|&m| m != target && self.alive(m))
                .collect();
            if others.len() + self.geometry.tolerance() < self.counters.len() {
                tracing::error!(array = %self.label, member = target,
                    "rebuild stopped: two other members have failed");
                return None;
            }
            return Some(others);
        }
        let others: Vec<usize> = (0..self.counters.len()).filter(|&m| m != target).collect();
        if others.iter().any(|&m| !self.alive(m)) {
            tracing::error!(array = %self.label, member = target,
                "rebuild stopped: another member has failed");
            return None;
        }
        Some(others)
    }

    /// Runs a rebuild step; false (logged) if the rebuild must stop.
    fn rebuild_ran(&self, step: &mut [MemberIo<'_>], target: usize) -> bool {
        match self.run(step) {
            Ok(Outcome::Done) => true,
            Ok(Outcome::Retry) => {
                tracing::error!(array = %self.label, member = target,
                    "rebuild stopped: a member failed during it");
                false
            }
            Err(e) => {
                tracing::error!(array = %self.label, member = target,
                    error = &e as &dyn std::error::Error, "rebuild stopped");
                false
            }
        }
    }

    /// Records the cursor in the superblocks (after flushing the member
    /// being rebuilt, so what they say is rebuilt is durable on it) if
    /// [`RECORD_EVERY`] has passed since it was last recorded. A
    /// restart resumes the rebuild there (closing the array records
    /// the cursor too).
    fn record_progress(&self, target: usize) {
        if self.superblocks.is_none() {
            return;
        }
        let mut recorded = self
            .rebuild
            .recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let cursor = self.rebuild.cursor.load(Ordering::SeqCst);
        let since = self.clock.now().saturating_duration_since(recorded.1);
        if cursor == recorded.0 || since < RECORD_EVERY {
            return;
        }
        let Some(device) = self.members.load().devices[target].clone() else {
            return;
        };
        if let Err(e) = device.flush() {
            tracing::warn!(array = %self.label, member = target, error = %e,
                "cannot flush the member being rebuilt; its progress is not recorded");
            return;
        }
        if self.rebuild.member.load(Ordering::SeqCst) != target {
            return;
        }
        self.update_superblocks(|s| s.rebuilt = cursor);
        *recorded = (cursor, self.clock.now());
    }

    /// Makes the rebuilt member active and records it.
    fn finish_rebuild(&self, target: usize) {
        // The cursor is at the end: the member is usable for every
        // stripe either way.
        if self
            .rebuild
            .member
            .compare_exchange(target, NO_MEMBER, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return;
        }
        // Everything rebuilt is durable before the superblocks say so.
        if let Some(device) = &self.members.load().devices[target] {
            if let Err(e) = device.flush() {
                tracing::warn!(array = %self.label, member = target, error = %e,
                    "cannot flush the rebuilt member");
            }
        }
        *self.missed(target) = None;
        self.update_superblocks(|s| {
            s.roles[target] = MemberRole::Active;
            s.rebuilt = 0;
        });
        tracing::info!(array = %self.label, member = target, "rebuild finished; member active");
    }
}

fn self_failed(array: &RaidDevice) -> RaidError {
    RaidError::Refused(format!(
        "{} members have failed: the array cannot rebuild a member",
        array.failed_count()
    ))
}
