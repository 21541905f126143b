//! [`RaidDevice`]: the array as a `BlockDevice`.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use arc_swap::ArcSwap;

use sluice_storage::{
    BlockDevice, BlockingClass, Capability, DeviceError, DeviceMetric, Extent, IoOp, MetricKind,
    ZeroMode,
};
use thiserror::Error;

use crate::array::{
    check_present_members, read_superblocks, write_superblock, MemberError, NamedMember,
};
use crate::clock::{Clock, SystemClock};
use crate::fan_out::{FanOut, MemberIo, MemberOp, ScopedFanOut};
use crate::journal::{Journal, JournalError, JournalPlace};
use crate::layout::{Geometry, GeometryError, Piece, RaidLevel};
use crate::metrics::{member_metrics, MemberCounters};
use crate::parity::xor_into;
use crate::superblock::{ArrayState, MemberRole, Superblock};

/// Stripe locks: a stripe's lock is `stripe % STRIPE_LOCKS`. A request
/// holds at most one at a time, so they cannot deadlock.
pub(crate) const STRIPE_LOCKS: usize = 256;

/// Most whole stripes written in one fan-out step (bounds the parity
/// buffers a request holds and the stripe locks it takes at once).
const FULL_STRIPE_RUN: usize = 64;

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
    fan_out: Arc<dyn FanOut>,
    pub(crate) size: u64,
    capability: Capability,
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
        let tolerance = tolerance(geometry.level());
        let missing = members.iter().filter(|m| m.is_none()).count();
        if missing > tolerance || missing == members.len() {
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
        let raid5 = geometry.level() == RaidLevel::Raid5;
        let read_only = caps.iter().any(|c| c.read_only);
        let capability = Capability {
            read_only,
            flush: all(|c| c.flush),
            fua: all(|c| c.fua),
            // RAID 5 trims whole stripes by zeroing them on every member.
            trim: !read_only
                && if raid5 {
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
            clock,
        })
    }

    /// This array with its rebuild and scrub reading time from `clock`
    /// instead of the system's (a [`ManualClock`](crate::ManualClock) in
    /// tests); the time progress was last recorded restarts at its now.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        let recorded = self
            .rebuild
            .recorded
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        recorded.1 = clock.now();
        self.clock = clock;
        self
    }

    /// Assembles the array whose superblocks `members` hold, in the order
    /// given, after checking they are one array's members of `geometry`,
    /// each in its place and current (see [`check_members`](crate::check_members)); its data
    /// starts past the superblocks. A writable array is marked dirty
    /// (event counter bumped) until it is dropped.
    pub fn assemble(
        geometry: Geometry,
        members: Vec<NamedMember>,
        fan_out: Arc<dyn FanOut>,
    ) -> Result<Self, RaidError> {
        Self::assemble_with_journal(geometry, members, fan_out, &JournalPlace::Off)
    }

    /// [`Self::assemble`] with a write-intent journal at `journal`
    /// (RAID 5; RAID 0 has no parity and needs none). Every stripe the
    /// journal holds has its parity recomputed from its data before this
    /// returns; a member failing then refuses the array
    /// ([`RaidError::Resync`]). A journal of another array is refused.
    /// See the `journal` module.
    pub fn assemble_with_journal(
        geometry: Geometry,
        members: Vec<NamedMember>,
        fan_out: Arc<dyn FanOut>,
        journal: &JournalPlace,
    ) -> Result<Self, RaidError> {
        let members = members.into_iter().map(Ok).collect();
        Self::assemble_with_missing(geometry, members, fan_out, journal, false)
    }

    /// [`Self::assemble_with_journal`] with members that could not be
    /// reached (`Err(name)`). A RAID 5 array starts degraded without one
    /// missing member (recorded failed in the others' superblocks, so it
    /// must be replaced to come back) when the others' superblocks agree,
    /// no other member is being rebuilt, and it was shut down cleanly or
    /// its journal holds no stripe. An array whose stripes may have parity
    /// that does not match their data is refused
    /// ([`RaidError::DirtyDegraded`], as md refuses a dirty degraded
    /// start), unless `start_dirty_degraded`: the missing member's
    /// chunks of those stripes may then read wrong.
    pub fn assemble_with_missing(
        geometry: Geometry,
        members: Vec<Result<NamedMember, String>>,
        fan_out: Arc<dyn FanOut>,
        journal: &JournalPlace,
        start_dirty_degraded: bool,
    ) -> Result<Self, RaidError> {
        let names: Vec<String> = members
            .iter()
            .map(|m| match m {
                Ok(m) => m.name.clone(),
                Err(name) => name.clone(),
            })
            .collect();
        let missing: Vec<usize> = (0..members.len())
            .filter(|&i| members[i].is_err())
            .collect();
        if missing.len() > tolerance(geometry.level()) || missing.len() == members.len() {
            return Err(RaidError::TooManyMissing {
                level: geometry.level(),
                missing: missing.len(),
                members: members.len(),
                tolerance: tolerance(geometry.level()),
            });
        }
        let present: Vec<NamedMember> = members.iter().flatten().cloned().collect();
        let mut read = read_superblocks(&present)?.into_iter();
        let found = members
            .iter()
            .map(|m| m.as_ref().ok().and_then(|_| read.next()))
            .collect();
        let assembly = check_present_members(geometry, &names, found)?;
        let newest = assembly.newest().cloned();
        let (data_offset, data_size) = newest
            .as_ref()
            .map(|s| (s.data_offset, s.data_size))
            .unwrap_or_default();
        if let (Some(&index), Some(newest)) = (missing.first(), &newest) {
            if let Some(r) = (0..newest.roles.len())
                .find(|&r| r != index && newest.roles[r] == MemberRole::Rebuilding)
            {
                return Err(RaidError::Refused(format!(
                    "member {index} ({}) is missing and member {r} ({}) is being rebuilt: the array cannot run without both",
                    names[index], names[r]
                )));
            }
        }
        for (index, m) in members.iter().enumerate() {
            let Ok(m) = m else { continue };
            let size = m.device.size();
            if size < data_offset + data_size {
                return Err(MemberError::TooSmall {
                    index,
                    name: m.name.clone(),
                    size,
                    needed: data_offset + data_size,
                }
                .into());
            }
        }
        let devices = members
            .into_iter()
            .map(|m| m.ok().map(|m| m.device))
            .collect();
        let mut array = Self::with_fan_out(geometry, devices, fan_out)?;
        array.size = geometry.volume_size(data_size);
        array.members = ArcSwap::from_pointee(MemberSet {
            devices: array.members.load().devices.clone(),
            names: names.clone(),
        });
        array.data_offset = data_offset;
        let Some(newest) = newest else {
            return Err(RaidError::TooManyMissing {
                level: geometry.level(),
                missing: missing.len(),
                members: names.len(),
                tolerance: tolerance(geometry.level()),
            });
        };
        array.label = format!("{} (array {})", array.label, newest.array_uuid);
        // A member recorded as being rebuilt holds data only below the
        // stripes its superblocks record rebuilt (flushed to it before
        // they were recorded): its rebuild resumes there, and it is
        // never read past them until rebuilt.
        if let Some((index, rebuilt)) = newest
            .roles
            .iter()
            .position(|r| *r == MemberRole::Rebuilding)
            .filter(|i| !missing.contains(i))
            .map(|i| (i, newest.rebuilt.min(array.stripes())))
        {
            tracing::warn!(array = %array.label, member = index, stripes = rebuilt,
                "member was being rebuilt when the array was last open; the rebuild resumes");
            array.rebuild.cursor.store(rebuilt, Ordering::SeqCst);
            array.rebuild.window_end.store(rebuilt, Ordering::SeqCst);
            *array
                .rebuild
                .recorded
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()) = (rebuilt, array.clock.now());
            array.rebuild.member.store(index, Ordering::SeqCst);
        }
        let array_uuid = newest.array_uuid;
        // A missing member's superblock is kept as the others record
        // it, and never written.
        let superblocks = assembly
            .superblocks
            .into_iter()
            .enumerate()
            .map(|(index, s)| {
                s.unwrap_or_else(|| Superblock {
                    index,
                    ..newest.clone()
                })
            })
            .collect();
        array.superblocks = Some(Mutex::new(superblocks));
        if geometry.level() == RaidLevel::Raid5 && !array.capability.read_only {
            if let Some(opened) = journal.open(array_uuid)? {
                let (journal, stripes) = (opened.journal, opened.stripes);
                if opened.created && assembly.state == ArrayState::Dirty {
                    tracing::warn!(array = %array.label, journal = %journal.name,
                        "array was not shut down cleanly and its journal is new: stripes being written then may have parity that does not match (`sluice raid scrub --repair` fixes them)");
                }
                let unknown = opened.created && assembly.state == ArrayState::Dirty;
                if let Some(&index) = missing.first() {
                    if !stripes.is_empty() || unknown {
                        let why = if unknown {
                            format!(
                                "the array was not shut down cleanly and its journal {} is new",
                                journal.name
                            )
                        } else {
                            format!("the journal {} holds {} stripes being written when the array was last open", journal.name, stripes.len())
                        };
                        if !start_dirty_degraded {
                            return Err(RaidError::DirtyDegraded {
                                index,
                                name: names[index].clone(),
                                why,
                            });
                        }
                        tracing::error!(array = %array.label, member = index, name = %names[index],
                            "starting dirty and degraded as asked: {why}; the missing member's chunks of those stripes may read wrong");
                    }
                } else {
                    if !stripes.is_empty() {
                        tracing::warn!(array = %array.label, journal = %journal.name, stripes = stripes.len(),
                            "resyncing the stripes being written when the array was last open");
                    }
                    array.resync(&stripes, &journal)?;
                }
                journal.clear()?;
                array.journal = Some(journal);
            }
        }
        if let (Some(&index), ArrayState::Dirty, None, RaidLevel::Raid5) = (
            missing.first(),
            assembly.state,
            &array.journal,
            geometry.level(),
        ) {
            let why = "the array was not shut down cleanly and has no journal".to_owned();
            if !start_dirty_degraded && !array.capability.read_only {
                return Err(RaidError::DirtyDegraded {
                    index,
                    name: names[index].clone(),
                    why,
                });
            }
        }
        if assembly.state == ArrayState::Dirty
            && geometry.level() == RaidLevel::Raid5
            && array.journal.is_none()
        {
            tracing::warn!(array = %array.label,
                "array was not shut down cleanly and has no journal: stripes being written then may have parity that does not match (`sluice raid scrub --repair` fixes them)");
        }
        if !array.capability.read_only {
            // The names given now are the ones a restart is checked
            // against (a member's URI may have changed).
            let names = array.members.load().names.clone();
            if let Some(&index) = missing.first() {
                tracing::warn!(array = %array.label, member = index, name = %names[index],
                    "member missing at start: running degraded; it must be replaced to come back");
            }
            array.update_superblocks(|s| {
                s.state = ArrayState::Dirty;
                s.names.clone_from(&names);
                for &index in &missing {
                    s.roles[index] = MemberRole::Failed;
                }
            });
        }
        Ok(array)
    }

    /// Recomputes the parity of `stripes` from their data (every member
    /// present and alive, at assembly), then flushes every member.
    fn resync(&self, stripes: &[u64], journal: &Journal) -> Result<(), RaidError> {
        let set = self.members.load();
        let unit = self.geometry.unit();
        let fail = |stripe, index: usize, source| RaidError::Resync {
            stripe,
            index,
            name: set.names[index].clone(),
            source,
        };
        let device = |index: usize| {
            set.devices[index]
                .as_deref()
                .expect("an assembled array has every member")
        };
        let mut parity = vec![0u8; unit as usize];
        let mut chunk = vec![0u8; unit as usize];
        let rebuilding = self.rebuild.member.load(Ordering::SeqCst);
        let cursor = self.rebuild.cursor.load(Ordering::SeqCst);
        for &stripe in stripes.iter().filter(|&&s| s < self.stripes()) {
            if rebuilding != NO_MEMBER && stripe >= cursor {
                // The member being rebuilt holds nothing current here:
                // the rebuild recomputes its chunk (parity, or data from
                // the parity: a write cut off by the crash in such a
                // stripe is lost, as on any degraded array).
                tracing::warn!(array = %self.label, stripe, member = rebuilding,
                    "stripe being written at the crash is past the rebuild: left to the rebuild");
                continue;
            }
            let at = self.data_offset + stripe * unit;
            parity.fill(0);
            for k in 0..self.geometry.data_members() {
                let m = self.geometry.data_member(stripe, k);
                device(m)
                    .read_at(&mut chunk, at)
                    .map_err(|e| fail(stripe, m, e))?;
                xor_into(&mut parity, &chunk);
            }
            let p = self
                .geometry
                .parity_member(stripe)
                .expect("RAID 5 has parity");
            device(p)
                .write_at(&parity, at, false)
                .map_err(|e| fail(stripe, p, e))?;
            journal.counters.resynced.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(&last) = stripes.last() {
            for index in 0..set.devices.len() {
                device(index).flush().map_err(|e| fail(last, index, e))?;
            }
        }
        Ok(())
    }

    /// Applies `change` to the superblock of every member still in use,
    /// bumps its event counter and writes it (FUA). A member that
    /// cannot take its superblock is left to fail on its next request.
    pub(crate) fn update_superblocks(&self, change: impl Fn(&mut Superblock)) {
        let Some(superblocks) = &self.superblocks else {
            return;
        };
        if self.capability.read_only {
            return;
        }
        let mut superblocks = superblocks.lock().unwrap_or_else(|p| p.into_inner());
        let set = self.members.load();
        for (index, s) in superblocks.iter_mut().enumerate() {
            change(s);
            s.events += 1;
            let Some(device) = set.devices[index].as_deref().filter(|_| self.alive(index)) else {
                continue;
            };
            if let Err(e) = write_superblock(device, s) {
                tracing::warn!(array = %self.label, member = %set.names[index], error = %e,
                    "cannot update the member's superblock");
            }
        }
    }

    /// Marks `index` failed and records it on the surviving members. A
    /// member being rebuilt holds data only below the cursor, so when
    /// another member fails the rebuilding one fails first: the array
    /// then has lost too many members and answers errors, never data
    /// rebuilt from an incomplete stripe.
    pub(crate) fn mark_failed(&self, index: usize) -> bool {
        let rebuilding = self.rebuild.member.load(Ordering::SeqCst);
        if rebuilding != NO_MEMBER && rebuilding != index {
            self.counters[rebuilding]
                .failed
                .store(true, Ordering::SeqCst);
        }
        if self.counters[index].failed.swap(true, Ordering::SeqCst) {
            return false;
        }
        if rebuilding != NO_MEMBER {
            self.rebuild.member.store(NO_MEMBER, Ordering::SeqCst);
        }
        let also = (rebuilding != NO_MEMBER && rebuilding != index).then_some(rebuilding);
        self.update_superblocks(|s| {
            s.roles[index] = MemberRole::Failed;
            if let Some(r) = also {
                s.roles[r] = MemberRole::Failed;
            }
            if rebuilding != NO_MEMBER {
                s.rebuilt = 0;
            }
        });
        true
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
        let tolerance = tolerance(self.geometry.level());
        if self.failed_count() + 1 > tolerance {
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

    fn lock_stripe(&self, stripe: u64) -> MutexGuard<'_, ()> {
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
    fn check_survives(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.failed_count() > tolerance(self.geometry.level()) {
            return Err(self.array_failed(op, offset, len));
        }
        Ok(())
    }

    fn check_range(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        sluice_storage::check_range(&self.label, op, self.size, offset, len)
    }

    fn check_writable(&self, op: IoOp) -> Result<(), DeviceError> {
        if self.capability.read_only {
            return Err(DeviceError::ReadOnly {
                device: self.label.clone(),
                op,
            });
        }
        Ok(())
    }

    /// Issues one step and sorts its results: a member fault marks the
    /// member failed (RAID 5) and asks for a retry; any other error (a
    /// bad request, or any error on RAID 0) is the request's.
    pub(crate) fn run(&self, step: &mut [MemberIo<'_>]) -> Result<Outcome, DeviceError> {
        if step.is_empty() {
            return Ok(Outcome::Done);
        }
        for io in step.iter_mut() {
            io.shift(self.data_offset);
            let c = &self.counters[io.member];
            match &io.op {
                MemberOp::Read { buf, .. } => {
                    c.read_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
                    &c.reads
                }
                MemberOp::Write { buf, .. } => {
                    c.written_bytes
                        .fetch_add(buf.len() as u64, Ordering::Relaxed);
                    &c.writes
                }
                MemberOp::Flush => &c.flushes,
                MemberOp::Trim { .. } | MemberOp::WriteZeroes { .. } => &c.writes,
            }
            .fetch_add(1, Ordering::Relaxed);
        }
        let started = Instant::now();
        let set = self.members.load();
        self.fan_out.submit(&set.devices, step);
        let took = started.elapsed();
        for io in step.iter() {
            self.counters[io.member].latency.record(took);
        }
        let mut outcome = Outcome::Done;
        let mut request_error = None;
        for io in step.iter_mut() {
            let Err(e) = std::mem::replace(&mut io.result, Ok(())) else {
                continue;
            };
            self.counters[io.member]
                .errors
                .fetch_add(1, Ordering::Relaxed);
            let member_fault = matches!(e, DeviceError::Io { .. });
            if member_fault && self.geometry.level() == RaidLevel::Raid5 {
                // A request to a member replaced while it was in flight
                // failed on the old device: redo the step with the new.
                let now = self.members.load();
                let replaced = match (&set.devices[io.member], &now.devices[io.member]) {
                    (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
                    (a, b) => a.is_some() != b.is_some(),
                };
                if replaced {
                    outcome = Outcome::Retry;
                    continue;
                }
                if self.mark_failed(io.member) {
                    tracing::warn!(array = %self.label, member = io.member,
                        name = %set.names[io.member], error = &e as &dyn std::error::Error,
                        "member failed; continuing degraded");
                }
                outcome = Outcome::Retry;
            } else if request_error.is_none() {
                request_error = Some(e);
            }
        }
        match request_error {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }

    /// Runs `attempt` until it completes without a member failing,
    /// failing once the array has lost too many members.
    fn retrying(
        &self,
        op: IoOp,
        offset: u64,
        len: u64,
        mut attempt: impl FnMut() -> Result<Outcome, DeviceError>,
    ) -> Result<(), DeviceError> {
        // Each retry follows a newly failed member, so at most
        // tolerance + 1 attempts can succeed.
        loop {
            self.check_survives(op, offset, len)?;
            if let Outcome::Done = attempt()? {
                return Ok(());
            }
        }
    }

    fn read_attempt(&self, buf: &mut [u8], offset: u64) -> Result<Outcome, DeviceError> {
        let mut step = Vec::new();
        let mut degraded = Vec::new();
        let mut rest = buf;
        for piece in self.geometry.pieces(offset, rest.len() as u64) {
            let (out, tail) = rest.split_at_mut(piece.len as usize);
            rest = tail;
            if self.usable(piece.member, piece.stripe) {
                step.push(MemberIo::new(
                    piece.member,
                    MemberOp::Read {
                        buf: out,
                        offset: piece.member_offset,
                    },
                ));
            } else {
                degraded.push((piece, out));
            }
        }
        if let Outcome::Retry = self.run(&mut step)? {
            return Ok(Outcome::Retry);
        }
        for (piece, out) in degraded {
            if let Outcome::Retry = self.reconstruct(&piece, out)? {
                return Ok(Outcome::Retry);
            }
        }
        Ok(Outcome::Done)
    }

    /// Rebuilds a piece of a missing member from the rest of its stripe.
    fn reconstruct(&self, piece: &Piece, out: &mut [u8]) -> Result<Outcome, DeviceError> {
        if self.geometry.level() == RaidLevel::Raid0 || self.failed_count() > 1 {
            return Err(self.array_failed(IoOp::Read, piece.member_offset, piece.len));
        }
        let _stripe = self.lock_stripe(piece.stripe);
        let members = self.counters.len();
        let mut others: Vec<Vec<u8>> = vec![vec![0; out.len()]; members - 1];
        let mut step: Vec<MemberIo<'_>> = (0..members)
            .filter(|&m| m != piece.member)
            .zip(others.iter_mut())
            .map(|(m, b)| {
                MemberIo::new(
                    m,
                    MemberOp::Read {
                        buf: b,
                        offset: piece.member_offset,
                    },
                )
            })
            .collect();
        if let Outcome::Retry = self.run(&mut step)? {
            return Ok(Outcome::Retry);
        }
        drop(step);
        out.fill(0);
        for b in &others {
            xor_into(out, b);
        }
        Ok(Outcome::Done)
    }

    fn write_raid0(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check_survives(IoOp::Write, offset, buf.len() as u64)?;
        let mut step: Vec<MemberIo<'_>> = self
            .geometry
            .pieces(offset, buf.len() as u64)
            .map(|p| {
                MemberIo::new(
                    p.member,
                    MemberOp::Write {
                        buf: &buf[p.range_offset as usize..(p.range_offset + p.len) as usize],
                        offset: p.member_offset,
                        fua,
                    },
                )
            })
            .collect();
        self.run(&mut step).map(|_| ())
    }

    fn write_raid5(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        let pieces: Vec<Piece> = self.geometry.pieces(offset, buf.len() as u64).collect();
        let data_members = self.geometry.data_members();
        let unit = self.geometry.unit();
        let is_full =
            |stripe: &[Piece]| stripe.len() == data_members && stripe.iter().all(|p| p.len == unit);
        let mut stripes = pieces.chunk_by(|a, b| a.stripe == b.stripe).peekable();
        while let Some(stripe) = stripes.next() {
            if !is_full(stripe) {
                let _lock = self.lock_stripe(stripe[0].stripe);
                self.note_write(stripe[0].stripe);
                // Durably in the journal before any member write of it.
                let _intent = match &self.journal {
                    Some(journal) => {
                        Some(
                            journal
                                .begin(stripe[0].stripe)
                                .map_err(|e| DeviceError::Io {
                                    device: self.label.clone(),
                                    op: IoOp::Write,
                                    offset,
                                    len: buf.len() as u64,
                                    source: io::Error::other(e),
                                })?,
                        )
                    }
                    None => None,
                };
                self.retrying(IoOp::Write, offset, buf.len() as u64, || {
                    self.write_stripe(stripe, buf, fua)
                })?;
                continue;
            }
            // A run of whole stripes goes out as one step, so a large
            // write costs one round of member requests, not one per
            // stripe.
            let mut run = vec![stripe];
            while run.len() < FULL_STRIPE_RUN {
                match stripes.next_if(|s| is_full(s)) {
                    Some(s) => run.push(s),
                    None => break,
                }
            }
            let mut shards: Vec<usize> = run
                .iter()
                .map(|s| (s[0].stripe % STRIPE_LOCKS as u64) as usize)
                .collect();
            // Locks are taken in shard order by every request that
            // holds several, and the others hold one: no deadlock.
            shards.sort_unstable();
            shards.dedup();
            let _locks: Vec<MutexGuard<'_, ()>> = shards
                .iter()
                .map(|&i| {
                    self.stripe_locks[i]
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                })
                .collect();
            for s in &run {
                self.note_write(s[0].stripe);
            }
            self.retrying(IoOp::Write, offset, buf.len() as u64, || {
                self.write_full_stripes(&run, buf, fua)
            })?;
        }
        Ok(())
    }

    /// Writes whole stripes: parity from the new data, no reads; a
    /// missing member's chunk is left to the parity (or a missing
    /// parity member's to nobody).
    fn write_full_stripes(
        &self,
        run: &[&[Piece]],
        src: &[u8],
        fua: bool,
    ) -> Result<Outcome, DeviceError> {
        let unit = self.geometry.unit();
        let data = |p: &Piece| &src[p.range_offset as usize..(p.range_offset + p.len) as usize];
        let parities: Vec<Vec<u8>> = run
            .iter()
            .map(|stripe| {
                let mut parity = vec![0u8; unit as usize];
                for p in stripe.iter() {
                    xor_into(&mut parity, data(p));
                }
                parity
            })
            .collect();
        let mut step = Vec::with_capacity(run.len() * self.counters.len());
        for (stripe, parity) in run.iter().zip(&parities) {
            for p in stripe.iter().filter(|p| self.usable(p.member, p.stripe)) {
                step.push(MemberIo::new(
                    p.member,
                    MemberOp::Write {
                        buf: data(p),
                        offset: p.member_offset,
                        fua,
                    },
                ));
            }
            let member = self
                .geometry
                .parity_member(stripe[0].stripe)
                .expect("RAID 5 has parity");
            if self.usable(member, stripe[0].stripe) {
                step.push(MemberIo::new(
                    member,
                    MemberOp::Write {
                        buf: parity,
                        offset: stripe[0].stripe * unit,
                        fua,
                    },
                ));
            }
        }
        self.run(&mut step)
    }

    /// Writes the pieces of one stripe (all in `stripe`), keeping its
    /// parity right, by whichever method costs fewest member I/Os.
    fn write_stripe(
        &self,
        pieces: &[Piece],
        src: &[u8],
        fua: bool,
    ) -> Result<Outcome, DeviceError> {
        let stripe = pieces[0].stripe;
        let unit = self.geometry.unit();
        let data = |p: &Piece| &src[p.range_offset as usize..(p.range_offset + p.len) as usize];
        let parity = self
            .geometry
            .parity_member(stripe)
            .expect("RAID 5 has parity");
        let lo = pieces.iter().map(|p| p.in_chunk).min().unwrap_or(0);
        let hi = pieces.iter().map(|p| p.in_chunk + p.len).max().unwrap_or(0);
        let width = (hi - lo) as usize;
        let data_members = self.geometry.data_members();
        let write_pieces = |fua| -> Vec<MemberIo<'_>> {
            pieces
                .iter()
                .filter(|p| self.usable(p.member, stripe))
                .map(|p| {
                    MemberIo::new(
                        p.member,
                        MemberOp::Write {
                            buf: data(p),
                            offset: p.member_offset,
                            fua,
                        },
                    )
                })
                .collect()
        };
        if !self.usable(parity, stripe) {
            return self.run(&mut write_pieces(fua));
        }
        let missing =
            (0..data_members).find(|&k| !self.usable(self.geometry.data_member(stripe, k), stripe));
        let touched = |k: usize| pieces.iter().find(|p| p.data_index == k);
        // Bytes of chunk k in [lo, hi) the write does not cover: before
        // and after its piece.
        let uncovered = |k: usize| -> [(u64, u64); 2] {
            match touched(k) {
                None => [(lo, hi), (hi, hi)],
                Some(p) => [(lo, p.in_chunk), (p.in_chunk + p.len, hi)],
            }
        };
        let full_stripe = pieces.len() == data_members
            && lo == 0
            && hi == unit
            && pieces.iter().all(|p| p.len == unit);
        let rmw_cost = 2 * (pieces.len() + 1);
        let rcw_reads: usize = (0..data_members)
            .flat_map(uncovered)
            .filter(|(a, b)| a < b)
            .count();
        let rcw_cost = rcw_reads + pieces.len() + 1;
        let use_rmw = !full_stripe
            && match missing {
                // The missing chunk is not written: its old data stays
                // in the parity, which RMW updates without reading it.
                Some(k) => touched(k).is_none(),
                None => rmw_cost <= rcw_cost,
            };
        let mut parity_buf = vec![0u8; width];
        if use_rmw {
            let mut old: Vec<Vec<u8>> = pieces.iter().map(|p| vec![0; p.len as usize]).collect();
            let mut step: Vec<MemberIo<'_>> = pieces
                .iter()
                .zip(old.iter_mut())
                .map(|(p, b)| {
                    MemberIo::new(
                        p.member,
                        MemberOp::Read {
                            buf: b,
                            offset: p.member_offset,
                        },
                    )
                })
                .collect();
            step.push(MemberIo::new(
                parity,
                MemberOp::Read {
                    buf: &mut parity_buf,
                    offset: stripe * unit + lo,
                },
            ));
            if let Outcome::Retry = self.run(&mut step)? {
                return Ok(Outcome::Retry);
            }
            drop(step);
            for (p, old) in pieces.iter().zip(&old) {
                let at = (p.in_chunk - lo) as usize..(p.in_chunk - lo + p.len) as usize;
                xor_into(&mut parity_buf[at.clone()], old);
                xor_into(&mut parity_buf[at], data(p));
            }
        } else {
            // Reconstruct-write: the new contents of every data chunk in
            // [lo, hi), read where the write does not cover them. A
            // missing data chunk is rebuilt from the old parity first.
            let mut columns: Vec<Vec<u8>> = vec![vec![0u8; width]; data_members];
            let mut old_parity = vec![0u8; if missing.is_some() { width } else { 0 }];
            let mut step = Vec::new();
            for (k, column) in columns.iter_mut().enumerate() {
                let member = self.geometry.data_member(stripe, k);
                if Some(k) == missing {
                    continue;
                }
                let base = stripe * unit + lo;
                if missing.is_some() {
                    // Degraded: the whole old column, to rebuild the
                    // missing chunk; new data goes over it after.
                    step.push(MemberIo::new(
                        member,
                        MemberOp::Read {
                            buf: column,
                            offset: base,
                        },
                    ));
                    continue;
                }
                let [(a0, a1), (b0, b1)] = uncovered(k);
                let (first, rest) = column.split_at_mut((a1 - lo) as usize);
                let (_, second) = rest.split_at_mut((b0 - a1) as usize);
                for (buf, from, to) in [(first, a0, a1), (second, b0, b1)] {
                    if from < to {
                        step.push(MemberIo::new(
                            member,
                            MemberOp::Read {
                                buf,
                                offset: base + (from - lo),
                            },
                        ));
                    }
                }
            }
            if missing.is_some() {
                step.push(MemberIo::new(
                    parity,
                    MemberOp::Read {
                        buf: &mut old_parity,
                        offset: stripe * unit + lo,
                    },
                ));
            }
            if let Outcome::Retry = self.run(&mut step)? {
                return Ok(Outcome::Retry);
            }
            drop(step);
            if let Some(k) = missing {
                let mut rebuilt = old_parity;
                for (j, column) in columns.iter().enumerate() {
                    if j != k {
                        xor_into(&mut rebuilt, column);
                    }
                }
                columns[k] = rebuilt;
            }
            for p in pieces {
                let at = (p.in_chunk - lo) as usize;
                columns[p.data_index][at..at + p.len as usize].copy_from_slice(data(p));
            }
            for column in &columns {
                xor_into(&mut parity_buf, column);
            }
        }
        let mut step = write_pieces(fua);
        step.push(MemberIo::new(
            parity,
            MemberOp::Write {
                buf: &parity_buf,
                offset: stripe * unit + lo,
                fua,
            },
        ));
        self.run(&mut step)
    }

    /// Splits `[offset, offset+length)` into a head before the first
    /// whole stripe, whole stripes `[first, end)` and a tail.
    fn whole_stripes(&self, offset: u64, length: u64) -> ((u64, u64), (u64, u64), (u64, u64)) {
        let sb = self.geometry.stripe_bytes();
        let end = offset + length;
        let first = offset.div_ceil(sb);
        let last = end / sb;
        if first >= last {
            return ((offset, length), (0, 0), (end, 0));
        }
        (
            (offset, first * sb - offset),
            (first, last),
            (last * sb, end - last * sb),
        )
    }

    /// Runs `op` on every present member over the member range of
    /// whole stripes `[first, end)`.
    fn on_whole_stripes(
        &self,
        (first, end): (u64, u64),
        op: impl Fn(u64, u64) -> MemberOp<'static>,
        io_op: IoOp,
    ) -> Result<(), DeviceError> {
        if first >= end {
            return Ok(());
        }
        // This path takes no stripe lock, so a member replaced while it
        // runs may have been left out of it, for stripes the rebuild then
        // passes: zeroing is idempotent, so it is done again.
        loop {
            let replaced = self.rebuild.replaced.load(Ordering::SeqCst);
            if self.rebuild.member.load(Ordering::SeqCst) != NO_MEMBER {
                return self.on_whole_stripes_rebuilding((first, end), &op, io_op);
            }
            let unit = self.geometry.unit();
            self.retrying(io_op, first * unit, (end - first) * unit, || {
                let mut step: Vec<MemberIo<'_>> = (0..self.counters.len())
                    .filter(|&m| self.alive(m))
                    .map(|m| MemberIo::new(m, op(first * unit, (end - first) * unit)))
                    .collect();
                self.run(&mut step)
            })?;
            if replaced == self.rebuild.replaced.load(Ordering::SeqCst) {
                return Ok(());
            }
        }
    }

    /// [`Self::on_whole_stripes`] while a member is being rebuilt.
    fn on_whole_stripes_rebuilding(
        &self,
        (first, end): (u64, u64),
        op: &impl Fn(u64, u64) -> MemberOp<'static>,
        io_op: IoOp,
    ) -> Result<(), DeviceError> {
        let unit = self.geometry.unit();
        // A member is being rebuilt: its part of each stripe is written
        // only below the rebuild cursor, which is held still by taking
        // every stripe lock (in lock order) for a bounded run.
        let run = STRIPE_LOCKS as u64;
        let mut at = first;
        while at < end {
            let to = end.min(at + run);
            let _locks = self.lock_stripes(0..STRIPE_LOCKS as u64);
            let cursor = self.rebuild.cursor.load(Ordering::SeqCst);
            for s in at.max(cursor)..to.min(self.rebuild.window_end.load(Ordering::SeqCst)) {
                self.note_write(s);
            }
            self.retrying(io_op, at * unit, (to - at) * unit, || {
                let mut step = Vec::new();
                for m in (0..self.counters.len()).filter(|&m| self.alive(m)) {
                    let (from, until) = if m == self.rebuild.member.load(Ordering::SeqCst) {
                        (at, to.min(cursor))
                    } else {
                        (at, to)
                    };
                    if from < until {
                        step.push(MemberIo::new(m, op(from * unit, (until - from) * unit)));
                    }
                }
                self.run(&mut step)
            })?;
            at = to;
        }
        Ok(())
    }

    /// Runs `op` on the member range of each piece of `[offset, offset+len)` (RAID 0).
    fn on_pieces(
        &self,
        offset: u64,
        length: u64,
        op: impl Fn(u64, u64) -> MemberOp<'static>,
    ) -> Result<(), DeviceError> {
        let mut step: Vec<MemberIo<'_>> = self
            .geometry
            .pieces(offset, length)
            .map(|p| MemberIo::new(p.member, op(p.member_offset, p.len)))
            .collect();
        self.run(&mut step).map(|_| ())
    }
}

/// Members a level can lose.
fn tolerance(level: RaidLevel) -> usize {
    match level {
        RaidLevel::Raid0 => 0,
        RaidLevel::Raid5 => 1,
    }
}

/// Appends `e` to `out`, merging it into the last extent if they agree.
fn push_extent(out: &mut Vec<Extent>, e: Extent) {
    match out.last_mut() {
        Some(last) if last.hole == e.hole && last.zero == e.zero => last.length += e.length,
        _ => out.push(e),
    }
}

impl Drop for RaidDevice {
    /// Marks a writable array with superblocks clean, once every member
    /// still in use has flushed; an array that lost too many members
    /// stays dirty.
    fn drop(&mut self) {
        if self.superblocks.is_none()
            || self.capability.read_only
            || self.failed_count() > tolerance(self.geometry.level())
        {
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

impl BlockDevice for RaidDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn capability(&self) -> Capability {
        self.capability
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        self.check_range(IoOp::Read, offset, len)?;
        self.retrying(IoOp::Read, offset, len, || self.read_attempt(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Write)?;
        self.check_range(IoOp::Write, offset, buf.len() as u64)?;
        match self.geometry.level() {
            RaidLevel::Raid0 => self.write_raid0(buf, offset, fua),
            RaidLevel::Raid5 => self.write_raid5(buf, offset, fua),
        }
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Flush)?;
        self.retrying(IoOp::Flush, 0, 0, || {
            let mut step: Vec<MemberIo<'_>> = (0..self.counters.len())
                .filter(|&m| self.alive(m))
                .map(|m| MemberIo::new(m, MemberOp::Flush))
                .collect();
            // A member whose flush failed is marked failed: what it holds
            // is no longer used, so the others' flushes are enough
            // (checked below: unless that was one failure too many).
            self.run(&mut step).map(|_| Outcome::Done)
        })?;
        self.check_survives(IoOp::Flush, 0, 0)
    }

    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Trim)?;
        self.check_range(IoOp::Trim, offset, length)?;
        if length == 0 {
            return Ok(());
        }
        match self.geometry.level() {
            RaidLevel::Raid0 => {
                self.check_survives(IoOp::Trim, offset, length)?;
                self.on_pieces(offset, length, |offset, length| MemberOp::Trim {
                    offset,
                    length,
                    fua,
                })
            }
            RaidLevel::Raid5 => {
                // Whole stripes are zeroed (allowing members to
                // deallocate) on every member, parity included, so
                // parity stays the XOR of the data; partial stripes are
                // left as they are (trim is a hint).
                let (_, stripes, _) = self.whole_stripes(offset, length);
                let mode = ZeroMode {
                    may_trim: true,
                    fast: false,
                    fua,
                };
                self.on_whole_stripes(
                    stripes,
                    |offset, length| MemberOp::WriteZeroes {
                        offset,
                        length,
                        mode,
                    },
                    IoOp::Trim,
                )
            }
        }
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check_writable(IoOp::WriteZeroes)?;
        self.check_range(IoOp::WriteZeroes, offset, length)?;
        if length == 0 {
            return Ok(());
        }
        match self.geometry.level() {
            RaidLevel::Raid0 => {
                self.check_survives(IoOp::WriteZeroes, offset, length)?;
                self.on_pieces(offset, length, |offset, length| MemberOp::WriteZeroes {
                    offset,
                    length,
                    mode,
                })
            }
            RaidLevel::Raid5 => {
                if mode.fast {
                    return Err(DeviceError::Unsupported {
                        device: self.label.clone(),
                        op: IoOp::WriteZeroes,
                        reason: "RAID 5 zeroes partial stripes by writing them",
                    });
                }
                let (head, stripes, tail) = self.whole_stripes(offset, length);
                for (at, len) in [head, tail] {
                    // Zeroes written like data, a chunk at a time, so
                    // parity follows.
                    let zeroes = vec![0u8; len.min(self.geometry.stripe_bytes()) as usize];
                    let mut done = 0;
                    while done < len {
                        let n = (len - done).min(zeroes.len() as u64);
                        self.write_raid5(&zeroes[..n as usize], at + done, mode.fua)?;
                        done += n;
                    }
                }
                self.on_whole_stripes(
                    stripes,
                    |offset, length| MemberOp::WriteZeroes {
                        offset,
                        length,
                        mode,
                    },
                    IoOp::WriteZeroes,
                )
            }
        }
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.check_range(IoOp::Extents, offset, length)?;
        let max_extents = max_extents.max(1);
        let mut out = Vec::new();
        let set = self.members.load();
        for piece in self.geometry.pieces(offset, length) {
            if out.len() > max_extents {
                break;
            }
            let member = match &set.devices[piece.member] {
                Some(m) if self.usable(piece.member, piece.stripe) => m,
                _ => {
                    self.check_survives(IoOp::Extents, offset, length)?;
                    // Rebuilt from parity on read: data, not known zero.
                    push_extent(
                        &mut out,
                        Extent {
                            length: piece.len,
                            hole: false,
                            zero: false,
                        },
                    );
                    continue;
                }
            };
            // The member may stop at `max_extents` of its own; ask again
            // from there until the piece is covered or we have enough.
            let mut covered = 0;
            while covered < piece.len && out.len() <= max_extents {
                let answer = match member.extents(
                    self.data_offset + piece.member_offset + covered,
                    piece.len - covered,
                    max_extents,
                ) {
                    Ok(answer) => answer,
                    // A member that fails here fails like on any other
                    // request; the rest of its piece is data from parity.
                    Err(e @ DeviceError::Io { .. })
                        if self.geometry.level() == RaidLevel::Raid5 =>
                    {
                        self.counters[piece.member]
                            .errors
                            .fetch_add(1, Ordering::Relaxed);
                        if self.mark_failed(piece.member) {
                            tracing::warn!(array = %self.label, member = piece.member,
                                name = %set.names[piece.member], error = &e as &dyn std::error::Error,
                                "member failed; continuing degraded");
                        }
                        self.check_survives(IoOp::Extents, offset, length)?;
                        vec![Extent {
                            length: piece.len - covered,
                            hole: false,
                            zero: false,
                        }]
                    }
                    Err(e) => return Err(e),
                };
                let before = covered;
                for e in answer {
                    let e = Extent {
                        length: e.length.min(piece.len - covered),
                        ..e
                    };
                    covered += e.length;
                    push_extent(&mut out, e);
                    if covered >= piece.len {
                        break;
                    }
                }
                if covered == before {
                    return Err(DeviceError::Io {
                        device: self.label.clone(),
                        op: IoOp::Extents,
                        offset: piece.member_offset + covered,
                        len: piece.len - covered,
                        source: io::Error::other(format!(
                            "member {} reported no extents",
                            piece.member
                        )),
                    });
                }
            }
        }
        out.truncate(max_extents);
        Ok(out)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.check_range(IoOp::Cache, offset, length)?;
        let set = self.members.load();
        for p in self.geometry.pieces(offset, length) {
            if let Some(m) = set.devices[p.member]
                .as_ref()
                .filter(|_| self.usable(p.member, p.stripe))
            {
                // A hint: errors are not the request's.
                let _ = m.cache(self.data_offset + p.member_offset, p.len);
            }
        }
        Ok(())
    }

    fn metrics(&self) -> Vec<DeviceMetric> {
        let mut out = vec![DeviceMetric {
            name: "raid_members_failed",
            help: "Members missing or marked failed",
            kind: MetricKind::Gauge,
            value: self.failed_count() as f64,
            labels: Vec::new(),
        }];
        let set = self.members.load();
        for (index, c) in self.counters.iter().enumerate() {
            out.extend(member_metrics(index, &set.names[index], c));
        }
        out.extend(self.progress_metrics());
        if let Some(journal) = &self.journal {
            out.extend(journal.metrics());
        }
        out
    }
}
