//! RAID 6 on the array: a stripe's data columns read and, when members
//! are missing, recovered from P and Q (`pq.rs` has the arithmetic);
//! partial-stripe writes, degraded reads, the rebuild's reconstruction,
//! scrub and resync of P and Q built on it.
//!
//! A partial-stripe write reads the data columns it does not cover (all
//! the columns left, and P and Q, when a data member is missing),
//! recovers what is missing, puts the new data over them, and writes
//! the new data with P and Q computed from the whole columns
//! (reconstruct-write): no read-modify-write of Q, so one code path
//! serves healthy, one-down and two-down stripes alike.

use sluice_storage::{DeviceError, IoOp};

use crate::device::{Outcome, RaidDevice};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::Piece;
use crate::pq::{pq_into, recover};

impl RaidDevice {
    /// The data columns `[lo, lo + width)` of `stripe`'s chunks, in data
    /// order, read from the members that hold them current and the
    /// missing ones recovered from P and Q. Columns marked `covered`
    /// (about to be overwritten whole) are not read unless needed for a
    /// recovery, and come back zeroed. `None` if a member failed during
    /// the reads (redo the stripe). The caller holds the stripe's lock.
    pub(crate) fn stripe_columns(
        &self,
        op: IoOp,
        stripe: u64,
        lo: u64,
        width: usize,
        covered: &[bool],
    ) -> Result<Option<Vec<Vec<u8>>>, DeviceError> {
        let g = &self.geometry;
        let degraded =
            (0..g.data_members()).any(|k| !self.usable(g.data_member(stripe, k), stripe));
        let mut chunks: Vec<Option<Vec<u8>>> = (0..g.members())
            .map(|m| {
                let wanted = self.usable(m, stripe)
                    && match g.data_index(stripe, m) {
                        Some(k) => degraded || !covered.get(k).copied().unwrap_or(false),
                        None => degraded,
                    };
                wanted.then(|| vec![0u8; width])
            })
            .collect();
        let offset = stripe * g.unit() + lo;
        let mut step: Vec<MemberIo<'_>> = chunks
            .iter_mut()
            .enumerate()
            .filter_map(|(m, c)| {
                c.as_mut()
                    .map(|buf| MemberIo::new(m, MemberOp::Read { buf, offset }))
            })
            .collect();
        if let Outcome::Retry = self.run(&mut step)? {
            return Ok(None);
        }
        drop(step);
        if degraded && recover(g, stripe, &mut chunks).is_err() {
            return Err(self.array_failed(op, offset, width as u64));
        }
        Ok(Some(
            (0..g.data_members())
                .map(|k| {
                    chunks[g.data_member(stripe, k)]
                        .take()
                        .unwrap_or_else(|| vec![0u8; width])
                })
                .collect(),
        ))
    }

    /// A RAID 6 piece of a member that does not hold it current, from
    /// the rest of its stripe (under the stripe's lock).
    pub(crate) fn reconstruct6(
        &self,
        piece: &Piece,
        out: &mut [u8],
    ) -> Result<Outcome, DeviceError> {
        let _stripe = self.lock_stripe(piece.stripe);
        let Some(columns) =
            self.stripe_columns(IoOp::Read, piece.stripe, piece.in_chunk, out.len(), &[])?
        else {
            return Ok(Outcome::Retry);
        };
        out.copy_from_slice(&columns[piece.data_index]);
        Ok(Outcome::Done)
    }

    /// Writes the pieces of one RAID 6 stripe (all in one stripe, its
    /// lock held and the stripe in the journal) with its P and Q.
    pub(crate) fn write_stripe6(
        &self,
        pieces: &[Piece],
        src: &[u8],
        fua: bool,
    ) -> Result<Outcome, DeviceError> {
        let g = &self.geometry;
        let stripe = pieces[0].stripe;
        let lo = pieces.iter().map(|p| p.in_chunk).min().unwrap_or(0);
        let hi = pieces.iter().map(|p| p.in_chunk + p.len).max().unwrap_or(0);
        let width = (hi - lo) as usize;
        let mut covered = vec![false; g.data_members()];
        for p in pieces {
            covered[p.data_index] = p.in_chunk == lo && p.len == hi - lo;
        }
        let data = |p: &Piece| &src[p.range_offset as usize..(p.range_offset + p.len) as usize];
        let Some(mut columns) = self.stripe_columns(IoOp::Write, stripe, lo, width, &covered)?
        else {
            return Ok(Outcome::Retry);
        };
        for p in pieces {
            let at = (p.in_chunk - lo) as usize;
            columns[p.data_index][at..at + p.len as usize].copy_from_slice(data(p));
        }
        let (mut pb, mut qb) = (vec![0u8; width], vec![0u8; width]);
        let refs: Vec<&[u8]> = columns.iter().map(Vec::as_slice).collect();
        pq_into(&refs, &mut pb, &mut qb);
        let mut step: Vec<MemberIo<'_>> = pieces
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
            .collect();
        for (member, buf) in [(g.parity_member(stripe), &pb), (g.q_member(stripe), &qb)] {
            if let Some(m) = member.filter(|&m| self.usable(m, stripe)) {
                step.push(MemberIo::new(
                    m,
                    MemberOp::Write {
                        buf,
                        offset: stripe * g.unit() + lo,
                        fua,
                    },
                ));
            }
        }
        self.run(&mut step)
    }

    /// RAID 6: `target`'s chunks of the stripes `first..` from the runs
    /// read from `sources` (`bufs[i]` from `sources[i]`, each a whole
    /// number of chunks from `first`): every member not a source is
    /// missing, at most two with `target`.
    pub(crate) fn rebuilt_pq(
        &self,
        target: usize,
        first: u64,
        sources: &[usize],
        bufs: &[Vec<u8>],
    ) -> Option<Vec<u8>> {
        let unit = self.geometry.unit() as usize;
        let len = bufs.first().map_or(0, Vec::len);
        let mut rebuilt = vec![0u8; len];
        for (i, out) in rebuilt.chunks_mut(unit).enumerate() {
            let at = i * unit..(i + 1) * unit;
            let mut chunks: Vec<Option<Vec<u8>>> = vec![None; self.geometry.members()];
            for (&m, b) in sources.iter().zip(bufs) {
                chunks[m] = Some(b[at.clone()].to_vec());
            }
            if let Err(e) = recover(&self.geometry, first + i as u64, &mut chunks) {
                tracing::error!(array = %self.label, member = target,
                    error = &e as &dyn std::error::Error, "rebuild stopped");
                return None;
            }
            out.copy_from_slice(chunks[target].as_deref().unwrap_or(&[]));
        }
        Some(rebuilt)
    }

    /// RAID 6: what stripe `s` (its chunks at `at` in each member's
    /// buffer) needs rewritten: P and Q from the data, where they
    /// differ. Logged.
    pub(crate) fn pq_fixes(
        &self,
        s: u64,
        bufs: &[Vec<u8>],
        at: std::ops::Range<usize>,
    ) -> Vec<(usize, Vec<u8>)> {
        let g = &self.geometry;
        let data: Vec<&[u8]> = (0..g.data_members())
            .map(|k| &bufs[g.data_member(s, k)][at.clone()])
            .collect();
        let (mut p, mut q) = (vec![0u8; at.len()], vec![0u8; at.len()]);
        pq_into(&data, &mut p, &mut q);
        let mut fixes = Vec::new();
        for (member, right, name) in [(g.parity_member(s), p, "P"), (g.q_member(s), q, "Q")] {
            let Some(m) = member else { continue };
            if bufs[m][at.clone()] != right[..] {
                tracing::warn!(array = %self.label, stripe = s, member = m, parity = name,
                    "scrub: parity does not match the data");
                fixes.push((m, right));
            }
        }
        fixes
    }

    /// The parity chunks of `stripe` (RAID 5: P; RAID 6: P and Q) from
    /// its data chunks, by member.
    pub(crate) fn parity_of(&self, stripe: u64, data: &[&[u8]]) -> Vec<(usize, Vec<u8>)> {
        let g = &self.geometry;
        let len = data.first().map_or(0, |d| d.len());
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        match g.q_member(stripe) {
            Some(qm) => {
                pq_into(data, &mut p, &mut q);
                g.parity_member(stripe)
                    .map(|pm| vec![(pm, p), (qm, q)])
                    .unwrap_or_default()
            }
            None => {
                for d in data {
                    crate::parity::xor_into(&mut p, d);
                }
                g.parity_member(stripe)
                    .map(|pm| vec![(pm, p)])
                    .unwrap_or_default()
            }
        }
    }
}
