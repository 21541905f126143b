//! Trim and write-zeroes: RAID 0 passes them to the members' ranges;
//! RAID 5 zeroes whole stripes on every member (parity included) and
//! writes zeroes like data over partial stripes.

use std::sync::atomic::Ordering;

use sluice_storage::{DeviceError, IoOp, ZeroMode};

use crate::device::{RaidDevice, NO_MEMBER, STRIPE_LOCKS};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::RaidLevel;

impl RaidDevice {
    /// Splits `[offset, offset+length)` into a head before the first
    /// whole stripe, whole stripes `[first, end)` and a tail.
    pub(crate) fn whole_stripes(
        &self,
        offset: u64,
        length: u64,
    ) -> ((u64, u64), (u64, u64), (u64, u64)) {
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
    pub(crate) fn on_whole_stripes(
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
    pub(crate) fn on_whole_stripes_rebuilding(
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
    pub(crate) fn on_pieces(
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

    pub(crate) fn trim_range(
        &self,
        offset: u64,
        length: u64,
        fua: bool,
    ) -> Result<(), DeviceError> {
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
            // Zeroed (allowing members to deallocate) on every mirror, so
            // they all read the same after.
            RaidLevel::Raid1 | RaidLevel::Raid10 { .. } => {
                let mode = ZeroMode {
                    may_trim: true,
                    fast: false,
                    fua,
                };
                self.on_mirrors(IoOp::Trim, offset, length, |_, offset, length| {
                    MemberOp::WriteZeroes {
                        offset,
                        length,
                        mode,
                    }
                })
            }
            RaidLevel::Raid5 | RaidLevel::Raid6 => {
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

    pub(crate) fn zero_range(
        &self,
        offset: u64,
        length: u64,
        mode: ZeroMode,
    ) -> Result<(), DeviceError> {
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
            RaidLevel::Raid1 | RaidLevel::Raid10 { .. } => {
                self.on_mirrors(IoOp::WriteZeroes, offset, length, |_, offset, length| {
                    MemberOp::WriteZeroes {
                        offset,
                        length,
                        mode,
                    }
                })
            }
            RaidLevel::Raid5 | RaidLevel::Raid6 => {
                if mode.fast {
                    return Err(DeviceError::Unsupported {
                        device: self.label.clone(),
                        op: IoOp::WriteZeroes,
                        reason: "RAID 5 and 6 zero partial stripes by writing them",
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
                        self.write_parity(&zeroes[..n as usize], at + done, mode.fua)?;
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
}
