//! What a failed RAID 1 mirror missed, so that when it comes back it is
//! resynced by copying only that, not the whole volume.
//!
//! When a mirror is marked failed, the array starts a write-intent
//! bitmap for it (in memory): one bit per rebuild run of stripes (1 MiB
//! of the member, at most 64 stripes), set by every write, trim and
//! zeroing to the array while the member is away; a write that failed
//! on the member itself is redone on the others as a new attempt, which
//! sets its bits too. The bitmap lives as long as the array's re-add
//! window ([`RaidDevice::set_readd_window`]).
//!
//! If the same member (its superblock's member uuid is the one recorded
//! for that place) is put back within the window
//! ([`RaidDevice::replace_member`], by an operator's `raid replace` with
//! its URI, or by the volume layer reconnecting it), it becomes the
//! member being rebuilt as a replacement would, but the rebuild moves
//! its cursor past every run whose bit is clear without reading or
//! writing it: the member holds those already. Writes past the cursor
//! while it resyncs keep setting bits (under the stripe locks, which
//! the rebuild holds when it decides to skip a run), so a run written
//! then is copied. Past the window, or for a member that failed while
//! being rebuilt, there is no bitmap and putting it back is a full
//! rebuild. The bitmap is not on disk: a restart of the array during
//! a resync resumes it as a full rebuild from the recorded cursor.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use crate::array::{read_superblocks, NamedMember};
use crate::device::{RaidDevice, RaidError};

/// How long a failed mirror's bitmap is kept when the volume spec does
/// not say (`readd=`).
pub const DEFAULT_READD_WINDOW: Duration = Duration::from_secs(600);

/// The runs of stripes a member missed while it was away.
#[derive(Debug)]
pub(crate) struct Missed {
    /// When the member failed (the array's clock).
    pub(crate) since: Instant,
    /// One bit per run of `run` stripes.
    bits: Vec<u64>,
    run: u64,
}

impl Missed {
    fn new(since: Instant, stripes: u64, run: u64) -> Self {
        let runs = stripes.div_ceil(run);
        Self {
            since,
            bits: vec![0; runs.div_ceil(64) as usize],
            run,
        }
    }

    /// Marks the runs holding `stripes`.
    fn mark(&mut self, stripes: Range<u64>) {
        if stripes.is_empty() {
            return;
        }
        for r in stripes.start / self.run..=(stripes.end - 1) / self.run {
            if let Some(word) = self.bits.get_mut((r / 64) as usize) {
                *word |= 1 << (r % 64);
            }
        }
    }

    /// Whether any run holding `stripes` was marked.
    pub(crate) fn any(&self, stripes: Range<u64>) -> bool {
        if stripes.is_empty() {
            return false;
        }
        (stripes.start / self.run..=(stripes.end - 1) / self.run).any(|r| {
            self.bits
                .get((r / 64) as usize)
                .is_none_or(|w| w & (1 << (r % 64)) != 0)
        })
    }

    /// Runs marked.
    pub(crate) fn marked(&self) -> u64 {
        self.bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }
}

impl RaidDevice {
    /// How long a failed RAID 1 mirror's missed writes are tracked, so
    /// that putting the same member back resyncs only them (see the
    /// `bitmap` module); zero (the default) tracks nothing.
    pub fn set_readd_window(&self, window: Duration) {
        self.readd_window.store(
            u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    fn readd_window(&self) -> Duration {
        Duration::from_nanos(self.readd_window.load(Ordering::SeqCst))
    }

    pub(crate) fn missed(&self, member: usize) -> MutexGuard<'_, Option<Missed>> {
        self.missed[member]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Starts tracking what `member`, just marked failed, misses (RAID 1
    /// with a re-add window; not for a member failed mid-rebuild, whose
    /// data past the cursor was never current).
    pub(crate) fn start_missed(&self, member: usize, was_rebuilding: bool) {
        let mut missed = self.missed(member);
        *missed = None;
        if !self.geometry.mirrored() || self.readd_window().is_zero() || was_rebuilding {
            return;
        }
        *missed = Some(Missed::new(
            self.clock.now(),
            self.stripes(),
            self.run_stripes(),
        ));
        self.any_missed.store(true, Ordering::SeqCst);
    }

    /// Marks `stripes` (their locks held) as missed by every member
    /// that has a bitmap: the failed ones, and one resyncing from its
    /// bitmap.
    pub(crate) fn mark_missed(&self, stripes: Range<u64>) {
        if !self.any_missed.load(Ordering::SeqCst) {
            return;
        }
        for m in 0..self.missed.len() {
            if let Some(missed) = self.missed(m).as_mut() {
                missed.mark(stripes.clone());
            }
        }
    }

    /// Whether `member` failed within the re-add window and its bitmap
    /// is kept (dropping a bitmap whose window has passed).
    pub(crate) fn readdable(&self, member: usize) -> bool {
        let mut missed = self.missed(member);
        let Some(m) = missed.as_ref() else {
            return false;
        };
        if self.clock.now().saturating_duration_since(m.since) <= self.readd_window() {
            return true;
        }
        tracing::warn!(array = %self.label, member,
            "member away longer than the re-add window: putting it back is a full rebuild");
        *missed = None;
        false
    }

    /// Whether `member`, put back in its place as `device`, is the same
    /// member (its superblock's array and member uuids are the ones
    /// recorded for the place) and failed within the re-add window: it
    /// is then resynced from its bitmap.
    pub(crate) fn same_member_back(&self, member: usize, device: &NamedMember) -> bool {
        if !self.readdable(member) {
            return false;
        }
        let Some(superblocks) = &self.superblocks else {
            return false;
        };
        let recorded = {
            let s = superblocks.lock().unwrap_or_else(|p| p.into_inner());
            (s[member].array_uuid, s[member].member_uuid)
        };
        match read_superblocks(std::slice::from_ref(device)).map(|mut v| v.pop()) {
            Ok(Some(Ok(found))) => (found.array_uuid, found.member_uuid) == recorded,
            _ => false,
        }
    }

    /// Moves the cursor of a resync from a bitmap (`target` has one)
    /// past every run it did not miss, under each run's stripe locks
    /// (writers mark the bitmap under them).
    pub(crate) fn skip_unmissed(&self, target: usize) {
        let stripes = self.stripes();
        loop {
            let first = self.rebuild.cursor.load(Ordering::SeqCst);
            if first >= stripes {
                return;
            }
            let run = first..stripes.min(first + self.run_stripes());
            let _locks = self.lock_stripes(run.clone());
            let skip = self
                .missed(target)
                .as_ref()
                .is_some_and(|m| !m.any(run.clone()));
            if !skip || self.rebuild.member.load(Ordering::SeqCst) != target {
                return;
            }
            self.rebuild.cursor.store(run.end, Ordering::SeqCst);
            self.rebuild.window_end.fetch_max(run.end, Ordering::SeqCst);
        }
    }

    /// Whether a rebuild of `target` may have to copy `stripes`: no
    /// bitmap (a full rebuild), or one with a bit set for them. A hint
    /// taken without locks.
    pub(crate) fn may_have_missed(&self, target: usize, stripes: Range<u64>) -> bool {
        self.missed(target).as_ref().is_none_or(|m| m.any(stripes))
    }

    /// Puts `member` back in place `index` if it is the member that
    /// failed there within the re-add window, resyncing only what it
    /// missed (see [`Self::replace_member`]); refused otherwise, so that
    /// whatever now answers at a member's address is never overwritten
    /// unasked.
    pub fn readd_member(&self, index: usize, member: NamedMember) -> Result<(), RaidError> {
        if index >= self.counters.len() || self.alive(index) {
            return Err(RaidError::Refused(format!(
                "member {index} has not failed: nothing to put back"
            )));
        }
        if !self.same_member_back(index, &member) {
            return Err(RaidError::Refused(format!(
                "{} is not the member {index} that failed within the re-add window",
                member.name
            )));
        }
        self.replace_member(index, member)
    }

    /// Members that failed within the re-add window: putting one back
    /// resyncs only what it missed.
    pub fn readd_candidates(&self) -> Vec<usize> {
        (0..self.missed.len())
            .filter(|&m| !self.alive(m) && self.readdable(m))
            .collect()
    }
}
