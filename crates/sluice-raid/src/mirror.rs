//! RAID 1 and 10: every member of a mirror set holds the same chunks
//! (RAID 1's one set is every member, holding the whole volume; RAID
//! 10's sets are `copies` neighbouring members, the chunks striped over
//! them). Writes (and trims and zeroing) go to every member of the set
//! in use, under the stripe locks of the chunks they touch, so
//! overlapping writes land in the same order on every mirror; reads go
//! to one member per chunk, the stripe number modulo the copies into
//! the set first, so a large or random read is spread over the mirrors,
//! and another mirror of the set when that one is gone.
//! A member being rebuilt holds current data only below the rebuild
//! cursor and is written only there, like a RAID 5 member (see
//! `rebuild.rs`), and rebuilt by copying from one active mirror.

use std::sync::atomic::Ordering;

use sluice_storage::{DeviceError, IoOp};

use crate::device::{RaidDevice, NO_MEMBER, STRIPE_LOCKS};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::Piece;

/// A stretch of a request on one mirror set: the same member offsets
/// on every member of `set`.
struct Run {
    set: std::ops::Range<usize>,
    member_offset: u64,
    range_offset: u64,
    len: u64,
}

impl RaidDevice {
    /// The member a RAID 1 or 10 read of `piece` goes to: its own (the
    /// balanced choice) if it holds the chunk, else the next member of
    /// its mirror set that does; `None` if none does.
    pub(crate) fn mirror_source(&self, piece: &Piece) -> Option<usize> {
        let set = self.geometry.mirror_set(piece.member);
        let n = set.len();
        (0..n)
            .map(|i| set.start + (piece.member - set.start + i) % n)
            .find(|&m| self.usable(m, piece.stripe))
    }

    /// The member a read of `piece` goes to, if one holds it: on RAID 1
    /// and 10 one of its mirror set, otherwise its own.
    pub(crate) fn read_source(&self, piece: &Piece) -> Option<usize> {
        if self.geometry.mirrored() {
            self.mirror_source(piece)
        } else {
            Some(piece.member).filter(|&m| self.usable(m, piece.stripe))
        }
    }

    /// `[offset, offset+len)` cut into runs, one per chunk, merged
    /// while the next goes on where the last ended on the same set (so
    /// RAID 1, one set, gets one run).
    fn mirror_runs(&self, offset: u64, len: u64) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for p in self.geometry.pieces(offset, len) {
            let set = self.geometry.mirror_set(p.member);
            match runs.last_mut() {
                Some(r)
                    if r.set == set
                        && r.member_offset + r.len == p.member_offset
                        && r.range_offset + r.len == p.range_offset =>
                {
                    r.len += p.len
                }
                _ => runs.push(Run {
                    set,
                    member_offset: p.member_offset,
                    range_offset: p.range_offset,
                    len: p.len,
                }),
            }
        }
        runs
    }

    /// Writes `buf` at `offset` to every mirror.
    pub(crate) fn write_raid1(
        &self,
        buf: &[u8],
        offset: u64,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.on_mirrors(IoOp::Write, offset, buf.len() as u64, |from, at, len| {
            let from = from as usize;
            MemberOp::Write {
                buf: &buf[from..from + len as usize],
                offset: at,
                fua,
            }
        })
    }

    /// Runs `op(offset in the range, member offset, length)` over
    /// `[offset, offset+len)` on every mirror in use of each chunk's
    /// set, under the stripe locks of the range; a member being rebuilt
    /// gets only the part below the rebuild cursor (the rebuild copies
    /// the rest later). A member that fails is marked failed and the
    /// others are written again (idempotent).
    pub(crate) fn on_mirrors<'a>(
        &self,
        io_op: IoOp,
        offset: u64,
        len: u64,
        op: impl Fn(u64, u64, u64) -> MemberOp<'a>,
    ) -> Result<(), DeviceError> {
        if len == 0 {
            return Ok(());
        }
        let unit = self.geometry.unit();
        let row = self.geometry.stripe_bytes();
        let stripes = offset / row..(offset + len).div_ceil(row);
        let runs = self.mirror_runs(offset, len);
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
            for r in &runs {
                for m in r.set.clone().filter(|&m| self.alive(m)) {
                    let end = if m == rebuilding && rebuilding != NO_MEMBER {
                        (r.member_offset + r.len).min(cursor)
                    } else {
                        r.member_offset + r.len
                    };
                    if end > r.member_offset {
                        let len = end - r.member_offset;
                        step.push(MemberIo::new(m, op(r.range_offset, r.member_offset, len)));
                    }
                }
            }
            self.run(&mut step)
        })
    }
}
