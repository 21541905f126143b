//! [`RaidDevice`]: the array's state (members, counters, stripe locks,
//! rebuild and scrub progress) and the checks every request makes. Its
//! jobs live in their own modules: `assemble` (starting from
//! superblocks), `step` (issuing member requests and failing members),
//! `read`, `write`, `zero` (trim and write-zeroes), `block` (the
//! `BlockDevice` entry points), `rebuild`, `scrub` and `status`.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use arc_swap::ArcSwap;

use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, IoOp};
use thiserror::Error;

use crate::array::MemberError;
use crate::bitmap::Missed;
use crate::clock::{Clock, SystemClock};
use crate::fan_out::{FanOut, ScopedFanOut};
use crate::journal::{Journal, JournalError};
use crate::layout::{Geometry, GeometryError, RaidLevel};
use crate::metrics::MemberCounters;
use crate::superblock::{ArrayState, Superblock};

/// Stripe locks: a stripe's lock is `stripe % STRIPE_LOCKS`. A request
/// holds at most one at a time, so they cannot deadlock.
pub(crate) const STRIPE_LOCKS: usize = 256;

/// Why an array cannot be assembled or changed.
#[derive(Debug, Error)]
pub enum RaidError {
    /// The geometry is invalid.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The member list does not match the geometry.
    #[error("the geometry has {expected} members but {got} were given")]
    MemberCount { expected: usize, got: usize },
    /// More members are missing than the level survives.
    #[error("{level:?} array with {missing} of {members} members missing cannot run (it survives {tolerance})")]
    TooManyMissing {
        level: RaidLevel,
        missing: usize,
        members: usize,
        tolerance: usize,
    },
    /// No such member.
    #[error("member {index} does not exist (the array has {members})")]
    NoSuchMember { index: usize, members: usize },
    /// Marking the member failed would lose data.
    #[error("member {index} cannot be failed: the array would lose data (it survives {tolerance} failed members)")]
    WouldLoseData { index: usize, tolerance: usize },
    /// A member given is not the array's, or not in its place, or not
    /// current.
    #[error(transparent)]
    Member(#[from] MemberError),
    /// Replacing, rebuilding or scrubbing needs what this array lacks.
    #[error("{0}")]
    Refused(String),
    /// The write-intent journal cannot be opened or is not this array's.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The stripes a crash may have left with parity that does not
    /// match could not be resynced, so the array does not start.
    #[error("cannot resync stripe {stripe} after an unclean shutdown: member {index} ({name}) failed; the array is not started, since a member rebuilt from that stripe's parity could read wrong data: bring the member back and start the array again")]
    Resync {
        stripe: u64,
        index: usize,
        name: String,
        #[source]
        source: DeviceError,
    },
    /// A member is missing and stripes may have parity that does not
    /// match their data.
    #[error("member {index} ({name}) is missing and {why}: chunks of the missing member rebuilt from those stripes' parity could read wrong, so the array is not started degraded; bring the member back, or start it anyway with start-dirty-degraded in its spec (as md's start_dirty_degraded)")]
    DirtyDegraded {
        index: usize,
        name: String,
        why: String,
    },
    /// A scrub stopped because a member failed or the array could not
    /// be read.
    #[error("scrub stopped at stripe {stripe}")]
    ScrubStopped {
        stripe: u64,
        #[source]
        source: DeviceError,
    },
}

/// The error inside a [`DeviceError::Io`] when the array has lost more
/// members than it survives.
#[derive(Debug, Error)]
#[error("{failed} of {members} members have failed ({list}), more than {level:?} survives")]
pub struct ArrayFailed {
    level: RaidLevel,
    failed: usize,
    members: usize,
    list: String,
}

/// Per-member state and counters, for status displays and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberStatus {
    /// A device was given for this member.
    pub present: bool,
    /// Missing, or marked failed (by an I/O error or
    /// [`RaidDevice::fail_member`]); never read or written again.
    pub failed: bool,
    /// Member reads issued.
    pub reads: u64,
    /// Member writes, trims and zeroings issued.
    pub writes: u64,
    /// Member flushes issued.
    pub flushes: u64,
    /// Member requests that returned an error.
    pub errors: u64,
    /// Bytes read from the member.
    pub read_bytes: u64,
    /// Bytes written to the member (writes only; not zeroing or trims).
    pub written_bytes: u64,
}

/// RAID 0 or RAID 5 over member block devices. See the crate
/// documentation for the layout and the rules.
#[derive(Debug)]
pub struct RaidDevice {
    pub(crate) geometry: Geometry,
    /// The member devices and their names; swapped whole when a member
    /// is replaced (a lock-free load on every request).
    pub(crate) members: ArcSwap<MemberSet>,
    pub(crate) counters: Vec<MemberCounters>,
    pub(crate) fan_out: Arc<dyn FanOut>,
    pub(crate) size: u64,
    pub(crate) capability: Capability,
    stripe_locks: Box<[Mutex<()>]>,
    pub(crate) label: String,
    /// Where the array's data starts on each member (past its
    /// superblock; 0 for an array without superblocks).
    pub(crate) data_offset: u64,
    /// Each member's superblock as last written, for arrays assembled
    /// from superblocks; updated (event counter bumped) on every change
    /// of a member's state.
    pub(crate) superblocks: Option<Mutex<Vec<Superblock>>>,
    /// The member being rebuilt and how far (see `rebuild.rs`).
    pub(crate) rebuild: RebuildState,
    /// The running or last scrub's progress.
    pub(crate) scrub: ScrubState,
    /// The write-intent journal (RAID 5 arrays assembled with one).
    pub(crate) journal: Option<Journal>,
    /// The time the rebuild and scrub read: when progress was last
    /// recorded, and the waits of the rate limit.
    pub(crate) clock: Arc<dyn Clock>,
    /// The instant members' last answers count from (see `health.rs`).
    pub(crate) epoch: Instant,
    /// The probe thread is running (see `health.rs`).
    pub(crate) probing: AtomicBool,
    /// What each failed RAID 1 mirror missed (see `bitmap.rs`).
    pub(crate) missed: Vec<Mutex<Option<Missed>>>,
    /// Some member has had a bitmap (writes mark them only then).
    pub(crate) any_missed: AtomicBool,
    /// How long a failed mirror's bitmap is kept, nanoseconds (0: none).
    pub(crate) readd_window: AtomicU64,
}

/// The members of an array as one value, replaced whole.
#[derive(Debug)]
pub(crate) struct MemberSet {
    /// Each member's device (`None`: missing), by index.
    pub(crate) devices: Vec<Option<Arc<dyn BlockDevice>>>,
    /// What each member is called in logs (its URI when assembled from
    /// named members).
    pub(crate) names: Vec<String>,
}

/// Which member is being rebuilt and how far: stripes below `cursor`
/// hold current data on it, the others do not (they are written
/// degraded and read from parity). `cursor` only moves while the
/// rebuild holds the stripe locks of the stripes it passes.
#[derive(Debug)]
pub(crate) struct RebuildState {
    /// The member being rebuilt, or [`NO_MEMBER`].
    pub(crate) member: AtomicUsize,
    /// Stripes rebuilt so far.
    pub(crate) cursor: AtomicU64,
    /// Bytes per second the rebuild may write (0: no limit).
    pub(crate) rate: AtomicU64,
    /// Members replaced since the array was opened.
    pub(crate) replaced: AtomicU64,
    /// A rebuild thread is running.
    pub(crate) running: AtomicBool,
    /// End of the stripes the rebuild has read ahead of the cursor:
    /// writes to stripes in `[cursor, window_end)` are counted in
    /// `generations`, so the rebuild knows a read-ahead went stale.
    pub(crate) window_end: AtomicU64,
    /// Writes past the cursor into the read-ahead window, per stripe
    /// lock (bumped while holding that lock).
    pub(crate) generations: Box<[AtomicU64]>,
    /// The run read and reconstructed ahead of the cursor, not yet
    /// written to the member being rebuilt.
    pub(crate) ahead: Mutex<Option<ReadAhead>>,
    /// The cursor as last recorded in the superblocks, and when.
    pub(crate) recorded: Mutex<(u64, Instant)>,
}

/// A run of stripes the rebuild read from the other members (under
/// their locks) and reconstructed, waiting to be written.
#[derive(Debug)]
pub(crate) struct ReadAhead {
    /// First stripe of the run.
    pub(crate) first: u64,
    /// One past its last stripe.
    pub(crate) end: u64,
    /// The rebuilt member's chunks of the run.
    pub(crate) rebuilt: Vec<u8>,
    /// The run's write generation when it was read (see
    /// `RebuildState::generations`).
    pub(crate) generation: u64,
}

/// A scrub's progress, visible while it runs and after.
#[derive(Debug, Default)]
pub(crate) struct ScrubState {
    pub(crate) running: AtomicBool,
    pub(crate) repair: AtomicBool,
    pub(crate) done: AtomicU64,
    pub(crate) total: AtomicU64,
    pub(crate) mismatches: AtomicU64,
    pub(crate) repaired: AtomicU64,
    /// A scrub has run since the array was opened.
    pub(crate) ran: AtomicBool,
}

/// `RebuildState::member` when no member is being rebuilt.
pub(crate) const NO_MEMBER: usize = usize::MAX;

/// Default rebuild (and scrub) rate: 200 MiB/s, md's `speed_limit_max`.
pub const DEFAULT_REBUILD_RATE: u64 = 200 << 20;

/// What a step's results asked for.
pub(crate) enum Outcome {
    /// Every request succeeded.
    Done,
    /// A member failed during the step (now marked failed): redo the
    /// step degraded.
    Retry,
}

impl RaidDevice {
    /// Assembles an array from `members` (`None` for a missing one) with
    /// the default fan-out ([`ScopedFanOut`]).
    pub fn new(
        geometry: Geometry,
        members: Vec<Option<Arc<dyn BlockDevice>>>,
    ) -> Result<Self, RaidError> {
        Self::with_fan_out(geometry, members, Arc::new(ScopedFanOut))
    }

    /// Assembles an array whose member requests go through `fan_out`.
    pub fn with_fan_out(
        geometry: Geometry,
        members: Vec<Option<Arc<dyn BlockDevice>>>,
        fan_out: Arc<dyn FanOut>,
    ) -> Result<Self, RaidError> {
        if members.len() != geometry.members() {
            return Err(RaidError::MemberCount {
                expected: geometry.members(),
                got: members.len(),
            });
        }
        let tolerance = geometry.tolerance();
        let missing = members.iter().filter(|m| m.is_none()).count();
        if !geometry.survives(|m| members[m].is_none()) {
            return Err(RaidError::TooManyMissing {
                level: geometry.level(),
                missing,
                members: members.len(),
                tolerance,
            });
        }
        let present = || members.iter().flatten();
        let smallest = present().map(|m| m.size()).min().unwrap_or(0);
        let caps: Vec<Capability> = present().map(|m| m.capability()).collect();
        let all = |f: fn(&Capability) -> bool| caps.iter().all(f);
        // RAID 5 and 6: parity.
        let raid5 = geometry.level().parities() > 0;
        let raid1 = geometry.mirrored();
        let read_only = caps.iter().any(|c| c.read_only);
        let capability = Capability {
            read_only,
            flush: all(|c| c.flush),
            fua: all(|c| c.fua),
            // RAID 5 trims whole stripes by zeroing them on every member,
            // RAID 1 its range (so the mirrors read the same after).
            trim: !read_only
                && if raid5 || raid1 {
                    all(|c| c.write_zeroes)
                } else {
                    all(|c| c.trim)
                },
            write_zeroes: !read_only && all(|c| c.write_zeroes),
            // RAID 5 zeroes partial stripes by writing (parity).
            fast_zero: !read_only && !raid5 && all(|c| c.fast_zero),
            cache: all(|c| c.cache),
            extents: all(|c| c.extents),
            multi_conn: all(|c| c.multi_conn),
            rotational: caps.iter().any(|c| c.rotational),
            min_block: caps.iter().map(|c| c.min_block).max().unwrap_or(1),
            blocking: caps
                .iter()
                .map(|c| c.blocking)
                .max_by_key(|b| match b {
                    BlockingClass::Never => 0,
                    BlockingClass::PageCache => 1,
                    BlockingClass::Always => 2,
                })
                .unwrap_or(BlockingClass::Never),
        };
        let members_len = members.len();
        let counters: Vec<MemberCounters> = members
            .iter()
            .map(|m| MemberCounters {
                failed: AtomicBool::new(m.is_none()),
                // A member given counts as having answered at the start.
                last_answer: AtomicU64::new(u64::from(m.is_some())),
                ..MemberCounters::default()
            })
            .collect();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Ok(Self {
            members: ArcSwap::from_pointee(MemberSet {
                devices: members,
                names: (0..members_len).map(|i| format!("member {i}")).collect(),
            }),
            rebuild: RebuildState {
                member: AtomicUsize::new(NO_MEMBER),
                cursor: AtomicU64::new(0),
                rate: AtomicU64::new(DEFAULT_REBUILD_RATE),
                replaced: AtomicU64::new(0),
                running: AtomicBool::new(false),
                window_end: AtomicU64::new(0),
                generations: (0..STRIPE_LOCKS).map(|_| AtomicU64::new(0)).collect(),
                ahead: Mutex::new(None),
                recorded: Mutex::new((0, clock.now())),
            },
            scrub: ScrubState::default(),
            size: geometry.volume_size(smallest),
            label: format!(
                "{:?} array of {} members",
                geometry.level(),
                geometry.members()
            )
            .to_lowercase(),
            geometry,
            counters,
            fan_out,
            capability,
            stripe_locks: (0..STRIPE_LOCKS).map(|_| Mutex::new(())).collect(),
            data_offset: 0,
            superblocks: None,
            journal: None,
            epoch: clock.now(),
            probing: AtomicBool::new(false),
            missed: (0..members_len).map(|_| Mutex::new(None)).collect(),
            any_missed: AtomicBool::new(false),
            readd_window: AtomicU64::new(0),
            clock,
        })
    }

    /// This array with its rebuild and scrub reading time from `clock`
    /// instead of the system's (a [`ManualClock`](crate::ManualClock) in
    /// tests); the time progress was last recorded, and the members' last
    /// answers, restart at its now.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.epoch = clock.now();
        for c in &mut self.counters {
            let answered = c.last_answer.get_mut();
            *answered = u64::from(*answered != 0);
        }
        let recorded = self
            .rebuild
            .recorded
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        recorded.1 = clock.now();
        self.clock = clock;
        self
    }

    /// The array's geometry.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Marks member `index` failed: it is never read or written again and
    /// its data is reconstructed from the others. Refused when that
    /// would lose data (RAID 0, or a RAID 5 member failed already).
    pub fn fail_member(&self, index: usize) -> Result<(), RaidError> {
        let counters = self.counters.get(index).ok_or(RaidError::NoSuchMember {
            index,
            members: self.counters.len(),
        })?;
        if counters.failed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let tolerance = self.geometry.tolerance();
        if !self.geometry.survives(|m| m == index || !self.alive(m)) {
            return Err(RaidError::WouldLoseData { index, tolerance });
        }
        tracing::warn!(array = %self.label, member = index, name = %self.members.load().names[index],
            "member marked failed by request");
        self.mark_failed(index);
        Ok(())
    }

    /// State and counters of every member, by index.
    pub fn member_status(&self) -> Vec<MemberStatus> {
        self.members
            .load()
            .devices
            .iter()
            .zip(&self.counters)
            .map(|(m, c)| MemberStatus {
                present: m.is_some(),
                failed: c.failed.load(Ordering::SeqCst),
                reads: c.reads.load(Ordering::Relaxed),
                writes: c.writes.load(Ordering::Relaxed),
                flushes: c.flushes.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                read_bytes: c.read_bytes.load(Ordering::Relaxed),
                written_bytes: c.written_bytes.load(Ordering::Relaxed),
            })
            .collect()
    }

    pub(crate) fn failed_count(&self) -> usize {
        self.counters
            .iter()
            .filter(|c| c.failed.load(Ordering::SeqCst))
            .count()
    }

    /// Whether the array has lost data: more members failed than the
    /// level survives (on RAID 10, every member of one mirror set).
    pub(crate) fn lost(&self) -> bool {
        !self.geometry.survives(|m| !self.alive(m))
    }

    pub(crate) fn alive(&self, member: usize) -> bool {
        !self.counters[member].failed.load(Ordering::SeqCst)
    }

    /// Whether `member` holds current data of `stripe`: alive, and not
    /// being rebuilt or rebuilt past it. Writers ask while holding the
    /// stripe's lock, so the answer cannot change under them.
    pub(crate) fn usable(&self, member: usize, stripe: u64) -> bool {
        self.alive(member)
            && (self.rebuild.member.load(Ordering::SeqCst) != member
                || stripe < self.rebuild.cursor.load(Ordering::SeqCst))
    }

    /// Records a write to `stripe` (its lock held) that a read-ahead of
    /// the rebuild may not have seen: one past the cursor and inside
    /// the read-ahead window. One atomic load when no rebuild runs.
    pub(crate) fn note_write(&self, stripe: u64) {
        if self.rebuild.member.load(Ordering::SeqCst) == NO_MEMBER {
            return;
        }
        if stripe >= self.rebuild.cursor.load(Ordering::SeqCst)
            && stripe < self.rebuild.window_end.load(Ordering::SeqCst)
        {
            self.rebuild.generations[(stripe % STRIPE_LOCKS as u64) as usize]
                .fetch_add(1, Ordering::SeqCst);
        }
    }

    /// [`Self::note_write`] for each of `stripes` (their locks held).
    pub(crate) fn note_writes(&self, stripes: std::ops::Range<u64>) {
        if self.rebuild.member.load(Ordering::SeqCst) == NO_MEMBER {
            return;
        }
        let from = stripes
            .start
            .max(self.rebuild.cursor.load(Ordering::SeqCst));
        let to = stripes
            .end
            .min(self.rebuild.window_end.load(Ordering::SeqCst));
        for s in from..to {
            self.note_write(s);
        }
    }

    /// The write generation of `stripes` (see `note_write`): it changes
    /// when any of them is written past the cursor.
    pub(crate) fn generation(&self, stripes: std::ops::Range<u64>) -> u64 {
        stripes
            .map(|s| {
                self.rebuild.generations[(s % STRIPE_LOCKS as u64) as usize].load(Ordering::SeqCst)
            })
            .fold(0, u64::wrapping_add)
    }

    /// Takes the locks of `stripes`, in lock order (the order every
    /// request holding several takes them, so none deadlocks).
    pub(crate) fn lock_stripes(
        &self,
        stripes: impl Iterator<Item = u64>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut shards: Vec<usize> = stripes
            .map(|s| (s % STRIPE_LOCKS as u64) as usize)
            .collect();
        shards.sort_unstable();
        shards.dedup();
        shards
            .iter()
            .map(|&i| {
                self.stripe_locks[i]
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
            })
            .collect()
    }

    pub(crate) fn lock_stripe(&self, stripe: u64) -> MutexGuard<'_, ()> {
        self.stripe_locks[(stripe % STRIPE_LOCKS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The error every request gets once more members have failed than
    /// the level survives.
    pub(crate) fn array_failed(&self, op: IoOp, offset: u64, len: u64) -> DeviceError {
        let failed: Vec<String> = self
            .counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.failed.load(Ordering::SeqCst))
            .map(|(i, _)| format!("member {i}"))
            .collect();
        DeviceError::Io {
            device: self.label.clone(),
            op,
            offset,
            len,
            source: io::Error::other(ArrayFailed {
                level: self.geometry.level(),
                failed: failed.len(),
                members: self.counters.len(),
                list: failed.join(", "),
            }),
        }
    }

    /// Fails unless the array still has all the members it needs.
    pub(crate) fn check_survives(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
    ) -> Result<(), DeviceError> {
        if self.lost() {
            return Err(self.array_failed(op, offset, len));
        }
        Ok(())
    }

    pub(crate) fn check_range(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        sluice_storage::check_range(&self.label, op, self.size, offset, len)
    }

    pub(crate) fn check_writable(&self, op: IoOp) -> Result<(), DeviceError> {
        if self.capability.read_only {
            return Err(DeviceError::ReadOnly {
                device: self.label.clone(),
                op,
            });
        }
        Ok(())
    }
}

impl Drop for RaidDevice {
    /// Marks a writable array with superblocks clean, once every member
    /// still in use has flushed; an array that lost too many members
    /// stays dirty.
    fn drop(&mut self) {
        if self.superblocks.is_none() || self.capability.read_only || self.lost() {
            return;
        }
        let set = self.members.load();
        for (index, m) in set.devices.iter().enumerate() {
            if let Some(m) = m.as_deref().filter(|_| self.alive(index)) {
                if let Err(e) = m.flush() {
                    tracing::warn!(array = %self.label, member = %set.names[index], error = %e,
                        "cannot flush the member on closing; the array stays dirty");
                    return;
                }
            }
        }
        // Every write is on the members: no stripe needs resyncing.
        if let Some(Err(e)) = self.journal.as_ref().map(Journal::clear) {
            tracing::warn!(array = %self.label, error = &e as &dyn std::error::Error,
                "cannot clear the journal on closing; its stripes are resynced at the next start");
        }
        // Flushed above: the rebuild's progress is durable, and the
        // next open resumes it.
        let rebuilt = if self.rebuild.member.load(Ordering::SeqCst) == NO_MEMBER {
            0
        } else {
            self.rebuild.cursor.load(Ordering::SeqCst)
        };
        self.update_superblocks(|s| {
            s.state = ArrayState::Clean;
            s.rebuilt = rebuilt;
        });
    }
}
