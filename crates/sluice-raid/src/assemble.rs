//! Assembling an array from members that carry superblocks: checking
//! them, starting degraded when a member is missing, and resyncing the
//! stripes a write-intent journal holds after an unclean shutdown.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::array::{
    check_present_members, read_superblocks, MemberError, NamedMember, PartialAssembly,
};
use crate::device::{MemberSet, RaidDevice, RaidError, NO_MEMBER};
use crate::fan_out::FanOut;
use crate::journal::{Journal, JournalPlace};
use crate::layout::Geometry;
use crate::superblock::{ArrayState, MemberRole, Superblock};
use uuid::Uuid;

impl RaidDevice {
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
        let (assembly, newest) = check_assembly(geometry, &names, &members, &missing)?;
        let (data_offset, data_size) = newest
            .as_ref()
            .map(|s| (s.data_offset, s.data_size))
            .unwrap_or_default();
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
                tolerance: geometry.tolerance(),
            });
        };
        array.label = format!("{} (array {})", array.label, newest.array_uuid);
        array.resume_rebuild(&newest, &missing);
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
        array.open_journal(
            journal,
            array_uuid,
            assembly.state,
            missing.first().copied(),
            start_dirty_degraded,
        )?;
        if let (Some(&index), ArrayState::Dirty, None, 1..) = (
            missing.first(),
            assembly.state,
            &array.journal,
            geometry.level().parities(),
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
            && geometry.level().parities() > 0
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

    /// Resumes the rebuild of a member the newest superblock records as
    /// being rebuilt (unless it is missing).
    fn resume_rebuild(&mut self, newest: &Superblock, missing: &[usize]) {
        // A member recorded as being rebuilt holds data only below the
        // stripes its superblocks record rebuilt (flushed to it before
        // they were recorded): its rebuild resumes there, and it is
        // never read past them until rebuilt.
        if let Some((index, rebuilt)) = newest
            .roles
            .iter()
            .position(|r| *r == MemberRole::Rebuilding)
            .filter(|i| !missing.contains(i))
            .map(|i| (i, newest.rebuilt.min(self.stripes())))
        {
            tracing::warn!(array = %self.label, member = index, stripes = rebuilt,
                "member was being rebuilt when the array was last open; the rebuild resumes");
            self.rebuild.cursor.store(rebuilt, Ordering::SeqCst);
            self.rebuild.window_end.store(rebuilt, Ordering::SeqCst);
            *self
                .rebuild
                .recorded
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()) = (rebuilt, self.clock.now());
            self.rebuild.member.store(index, Ordering::SeqCst);
        }
    }

    /// Opens the write-intent journal of a writable RAID 5 array:
    /// resyncs the stripes it holds when every member is present, or
    /// refuses a dirty degraded start (unless `start_dirty_degraded`).
    fn open_journal(
        &mut self,
        journal: &JournalPlace,
        array_uuid: Uuid,
        state: ArrayState,
        missing: Option<usize>,
        start_dirty_degraded: bool,
    ) -> Result<(), RaidError> {
        if self.geometry.level().parities() > 0 && !self.capability.read_only {
            if let Some(opened) = journal.open(array_uuid)? {
                let (journal, stripes) = (opened.journal, opened.stripes);
                if opened.created && state == ArrayState::Dirty {
                    tracing::warn!(array = %self.label, journal = %journal.name,
                        "array was not shut down cleanly and its journal is new: stripes being written then may have parity that does not match (`sluice raid scrub --repair` fixes them)");
                }
                let unknown = opened.created && state == ArrayState::Dirty;
                if let Some(index) = missing {
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
                                name: self.members.load().names[index].clone(),
                                why,
                            });
                        }
                        tracing::error!(array = %self.label, member = index, name = %self.members.load().names[index],
                            "starting dirty and degraded as asked: {why}; the missing member's chunks of those stripes may read wrong");
                    }
                } else {
                    if !stripes.is_empty() {
                        tracing::warn!(array = %self.label, journal = %journal.name, stripes = stripes.len(),
                            "resyncing the stripes being written when the array was last open");
                    }
                    self.resync(&stripes, &journal)?;
                }
                journal.clear()?;
                self.journal = Some(journal);
            }
        }
        Ok(())
    }

    /// Recomputes the parity of `stripes` from their data (every member
    /// present and alive, at assembly), then flushes every member.
    pub(crate) fn resync(&self, stripes: &[u64], journal: &Journal) -> Result<(), RaidError> {
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
        let mut chunks = vec![vec![0u8; unit as usize]; self.geometry.data_members()];
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
            for (k, chunk) in chunks.iter_mut().enumerate() {
                let m = self.geometry.data_member(stripe, k);
                device(m)
                    .read_at(chunk, at)
                    .map_err(|e| fail(stripe, m, e))?;
            }
            let data: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            // RAID 5: P; RAID 6: P and Q.
            for (p, parity) in self.parity_of(stripe, &data) {
                device(p)
                    .write_at(&parity, at, false)
                    .map_err(|e| fail(stripe, p, e))?;
            }
            journal.counters.resynced.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(&last) = stripes.last() {
            for index in 0..set.devices.len() {
                device(index).flush().map_err(|e| fail(last, index, e))?;
            }
        }
        Ok(())
    }
}

/// The checks before an array is built from `members` (`Err(name)`:
/// missing, at `missing`): not too many missing, superblocks of one
/// array each in its place and current, no missing member alongside one
/// being rebuilt, every member large enough. Returns the superblocks and
/// the newest of them.
fn check_assembly(
    geometry: Geometry,
    names: &[String],
    members: &[Result<NamedMember, String>],
    missing: &[usize],
) -> Result<(PartialAssembly, Option<Superblock>), RaidError> {
    if !geometry.survives(|m| missing.contains(&m)) {
        return Err(RaidError::TooManyMissing {
            level: geometry.level(),
            missing: missing.len(),
            members: members.len(),
            tolerance: geometry.tolerance(),
        });
    }
    let present: Vec<NamedMember> = members.iter().flatten().cloned().collect();
    let mut read = read_superblocks(&present)?.into_iter();
    let found = members
        .iter()
        .map(|m| m.as_ref().ok().and_then(|_| read.next()))
        .collect();
    let assembly = check_present_members(geometry, names, found)?;
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
    Ok((assembly, newest))
}
