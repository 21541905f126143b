//! RAID 1: every member holds the whole volume. Writes (and trims and
//! zeroing) go to every member in use, under the stripe locks of the
//! chunks they touch, so overlapping writes land in the same order on
//! every mirror; reads go to one member per chunk, the chunk's stripe
//! number modulo the member count first, so a large or random read is
//! spread over the mirrors, and another mirror when that one is gone.
//! A member being rebuilt holds current data only below the rebuild
//! cursor and is written only there, like a RAID 5 member (see
//! `rebuild.rs`), and rebuilt by copying from one active mirror.

use std::sync::atomic::Ordering;

use sluice_storage::{DeviceError, IoOp};

use crate::device::{RaidDevice, NO_MEMBER, STRIPE_LOCKS};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::Piece;

impl RaidDevice {
    /// The member a RAID 1 read of `piece` goes to: its own (the
    /// balanced choice) if it holds the chunk, else the next member
    /// that does; `None` if none does.
    pub(crate) fn mirror_source(&self, piece: &Piece) -> Option<usize> {
        let n = self.counters.len();
        (0..n)
            .map(|i| (piece.member + i) % n)
            .find(|&m| self.usable(m, piece.stripe))
    }

    /// Writes `buf` at `offset` to every mirror.
    pub(crate) fn write_raid1(
        &self,
        buf: &[u8],
        offset: u64,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.on_mirrors(IoOp::Write, offset, buf.len() as u64, |at, len| {
            let from = (at - offset) as usize;
            MemberOp::Write {
                buf: &buf[from..from + len as usize],
                offset: at,
                fua,
            }
        })
    }

    /// Runs `op(member offset, length)` over `[offset, offset+len)` on
    /// every mirror in use, under the stripe locks of the range; a
    /// member being rebuilt gets only the part below the rebuild cursor
    /// (the rebuild copies the rest later). A member that fails is
    /// marked failed and the others are written again (idempotent).
    pub(crate) fn on_mirrors<'a>(
        &self,
        io_op: IoOp,
        offset: u64,
        len: u64,
        op: impl Fn(u64, u64) -> MemberOp<'a>,
    ) -> Result<(), DeviceError> {
        if len == 0 {
            return Ok(());
        }
        let unit = self.geometry.unit();
        let stripes = offset / unit..(offset + len).div_ceil(unit);
        // A range over as many stripes as there are locks takes them all
        // (in lock order, like any request holding several).
        let _locks = if stripes.end - stripes.start >= STRIPE_LOCKS as u64 {
            self.lock_stripes(0..STRIPE_LOCKS as u64)
        } else {
            self.lock_stripes(stripes.clone())
        };
        self.note_writes(stripes.clone());
        self.retrying(io_op, offset, len, || {
            // Every attempt: a member that failed on the last one has a
            // bitmap now.
            self.mark_missed(stripes.clone());
            let rebuilding = self.rebuild.member.load(Ordering::SeqCst);
            let cursor = self.rebuild.cursor.load(Ordering::SeqCst) * unit;
            let mut step: Vec<MemberIo<'_>> = Vec::with_capacity(self.counters.len());
            for m in (0..self.counters.len()).filter(|&m| self.alive(m)) {
                let end = if m == rebuilding && rebuilding != NO_MEMBER {
                    (offset + len).min(cursor)
                } else {
                    offset + len
                };
                if end > offset {
                    step.push(MemberIo::new(m, op(offset, end - offset)));
                }
            }
            self.run(&mut step)
        })
    }
}
