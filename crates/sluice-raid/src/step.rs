//! Member steps: issuing one fan-out step of member requests, counting
//! it, and sorting its results; a member fault marks the member failed
//! (recorded in the survivors' superblocks) and the step is redone
//! degraded.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use sluice_storage::{DeviceError, IoOp};

use crate::array::write_superblock;
use crate::device::{Outcome, RaidDevice, NO_MEMBER};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::RaidLevel;
use crate::superblock::{MemberRole, Superblock};

impl RaidDevice {
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
    /// rebuilt from an incomplete stripe. RAID 6, which survives the
    /// two, keeps rebuilding it after a first failure.
    pub(crate) fn mark_failed(&self, index: usize) -> bool {
        let rebuilding = self.rebuild.member.load(Ordering::SeqCst);
        // RAID 6 can lose another member and still rebuild the one it
        // rebuilds (that one and the failed one are then the two it
        // survives): the rebuild goes on.
        let rebuilding = if self.geometry.level() == RaidLevel::Raid6
            && rebuilding != index
            && self.failed_count() + 2 <= self.geometry.tolerance()
        {
            NO_MEMBER
        } else {
            rebuilding
        };
        if rebuilding != NO_MEMBER && rebuilding != index {
            self.counters[rebuilding]
                .failed
                .store(true, Ordering::SeqCst);
        }
        if self.counters[index].failed.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.start_missed(index, rebuilding == index);
        if rebuilding != NO_MEMBER && rebuilding != index {
            self.start_missed(rebuilding, true);
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

    /// Issues one step and sorts its results: a member fault marks the
    /// member failed (RAID 5) and asks for a retry; any other error (a
    /// bad request, or any error on RAID 0) is the request's. A remote
    /// member of a redundant array whose server refuses connections
    /// fails its requests at once rather than after its reconnect window
    /// (sluice-volume connects it so), so a write that reached the other
    /// members completes degraded without waiting for that window.
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
        let now = self.clock.now();
        for io in step.iter_mut() {
            if !matches!(io.result, Err(DeviceError::Io { .. })) {
                self.answered_at(io.member, now);
            }
            let Err(e) = std::mem::replace(&mut io.result, Ok(())) else {
                continue;
            };
            self.counters[io.member]
                .errors
                .fetch_add(1, Ordering::Relaxed);
            let member_fault = matches!(e, DeviceError::Io { .. });
            if member_fault && self.geometry.tolerance() > 0 {
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
    pub(crate) fn retrying(
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
}
