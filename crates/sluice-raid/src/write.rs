//! The write path: RAID 0 writes, and RAID 5 writes a stripe at a time
//! (runs of whole stripes with parity from the new data; partial
//! stripes by read-modify-write or reconstruct-write, degraded or not),
//! under the stripe locks and the write-intent journal.

use std::io;

use sluice_storage::{DeviceError, IoOp};

use crate::device::{Outcome, RaidDevice};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::{Piece, RaidLevel};
use crate::parity::xor_into;

/// Most whole stripes written in one fan-out step (bounds the parity
/// buffers a request holds and the stripe locks it takes at once).
const FULL_STRIPE_RUN: usize = 64;

impl RaidDevice {
    pub(crate) fn write_raid0(
        &self,
        buf: &[u8],
        offset: u64,
        fua: bool,
    ) -> Result<(), DeviceError> {
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

    /// RAID 5 and 6 writes, a stripe at a time (runs of whole stripes
    /// together).
    pub(crate) fn write_parity(
        &self,
        buf: &[u8],
        offset: u64,
        fua: bool,
    ) -> Result<(), DeviceError> {
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
                let raid6 = self.geometry.level() == RaidLevel::Raid6;
                self.retrying(IoOp::Write, offset, buf.len() as u64, || {
                    if raid6 {
                        self.write_stripe6(stripe, buf, fua)
                    } else {
                        self.write_stripe(stripe, buf, fua)
                    }
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
            // Locks are taken in lock order by every request that holds
            // several, and the others hold one: no deadlock.
            let _locks = self.lock_stripes(run.iter().map(|s| s[0].stripe));
            for s in &run {
                self.note_write(s[0].stripe);
            }
            self.retrying(IoOp::Write, offset, buf.len() as u64, || {
                self.write_full_stripes(&run, buf, fua)
            })?;
        }
        Ok(())
    }

    /// Writes whole stripes: parity (RAID 6: P and Q) from the new data,
    /// no reads; a missing member's chunk is left to the parity (or a
    /// missing parity member's to nobody).
    pub(crate) fn write_full_stripes(
        &self,
        run: &[&[Piece]],
        src: &[u8],
        fua: bool,
    ) -> Result<Outcome, DeviceError> {
        let unit = self.geometry.unit();
        let data = |p: &Piece| &src[p.range_offset as usize..(p.range_offset + p.len) as usize];
        let parities: Vec<Vec<(usize, Vec<u8>)>> = run
            .iter()
            .map(|stripe| {
                let chunks: Vec<&[u8]> = stripe.iter().map(&data).collect();
                self.parity_of(stripe[0].stripe, &chunks)
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
            for (member, parity) in parity {
                if self.usable(*member, stripe[0].stripe) {
                    step.push(MemberIo::new(
                        *member,
                        MemberOp::Write {
                            buf: parity,
                            offset: stripe[0].stripe * unit,
                            fua,
                        },
                    ));
                }
            }
        }
        self.run(&mut step)
    }

    /// Writes the pieces of one stripe (all in `stripe`), keeping its
    /// parity right, by whichever method costs fewest member I/Os.
    pub(crate) fn write_stripe(
        &self,
        pieces: &[Piece],
        src: &[u8],
        fua: bool,
    ) -> Result<Outcome, DeviceError> {
        let w = StripeWrite::new(self, pieces, src);
        let write_pieces = |fua| -> Vec<MemberIo<'_>> {
            pieces
                .iter()
                .filter(|p| self.usable(p.member, w.stripe))
                .map(|p| {
                    MemberIo::new(
                        p.member,
                        MemberOp::Write {
                            buf: w.data(p),
                            offset: p.member_offset,
                            fua,
                        },
                    )
                })
                .collect()
        };
        if !self.usable(w.parity, w.stripe) {
            return self.run(&mut write_pieces(fua));
        }
        let data_members = self.geometry.data_members();
        let unit = self.geometry.unit();
        let missing = (0..data_members)
            .find(|&k| !self.usable(self.geometry.data_member(w.stripe, k), w.stripe));
        let full_stripe = pieces.len() == data_members
            && w.lo == 0
            && w.hi == unit
            && pieces.iter().all(|p| p.len == unit);
        let rmw_cost = 2 * (pieces.len() + 1);
        let rcw_reads: usize = (0..data_members)
            .flat_map(|k| w.uncovered(k))
            .filter(|(a, b)| a < b)
            .count();
        let rcw_cost = rcw_reads + pieces.len() + 1;
        let use_rmw = !full_stripe
            && match missing {
                // The missing chunk is not written: its old data stays
                // in the parity, which RMW updates without reading it.
                Some(k) => w.touched(k).is_none(),
                None => rmw_cost <= rcw_cost,
            };
        let parity_buf = if use_rmw {
            self.rmw_parity(&w)?
        } else {
            self.rcw_parity(&w, missing)?
        };
        let Some(parity_buf) = parity_buf else {
            return Ok(Outcome::Retry);
        };
        let mut step = write_pieces(fua);
        step.push(MemberIo::new(
            w.parity,
            MemberOp::Write {
                buf: &parity_buf,
                offset: w.stripe * unit + w.lo,
                fua,
            },
        ));
        self.run(&mut step)
    }

    /// Read-modify-write: the new parity of `[lo, hi)` from the old data
    /// of the pieces and the old parity; `None` if a member failed (redo
    /// the stripe).
    fn rmw_parity(&self, w: &StripeWrite<'_>) -> Result<Option<Vec<u8>>, DeviceError> {
        let mut parity_buf = vec![0u8; w.width()];
        let mut old: Vec<Vec<u8>> = w.pieces.iter().map(|p| vec![0; p.len as usize]).collect();
        let mut step: Vec<MemberIo<'_>> = w
            .pieces
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
            w.parity,
            MemberOp::Read {
                buf: &mut parity_buf,
                offset: w.stripe * self.geometry.unit() + w.lo,
            },
        ));
        if let Outcome::Retry = self.run(&mut step)? {
            return Ok(None);
        }
        drop(step);
        for (p, old) in w.pieces.iter().zip(&old) {
            let at = (p.in_chunk - w.lo) as usize..(p.in_chunk - w.lo + p.len) as usize;
            xor_into(&mut parity_buf[at.clone()], old);
            xor_into(&mut parity_buf[at], w.data(p));
        }
        Ok(Some(parity_buf))
    }

    /// Reconstruct-write: the new parity of `[lo, hi)` from the new
    /// contents of every data chunk there, read where the write does not
    /// cover them. A `missing` data chunk is rebuilt from the old parity
    /// first. `None` if a member failed (redo the stripe).
    fn rcw_parity(
        &self,
        w: &StripeWrite<'_>,
        missing: Option<usize>,
    ) -> Result<Option<Vec<u8>>, DeviceError> {
        let (stripe, lo, width) = (w.stripe, w.lo, w.width());
        let base = stripe * self.geometry.unit() + lo;
        let mut columns: Vec<Vec<u8>> = vec![vec![0u8; width]; self.geometry.data_members()];
        let mut old_parity = vec![0u8; if missing.is_some() { width } else { 0 }];
        let mut step = Vec::new();
        for (k, column) in columns.iter_mut().enumerate() {
            let member = self.geometry.data_member(stripe, k);
            if Some(k) == missing {
                continue;
            }
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
            let [(a0, a1), (b0, b1)] = w.uncovered(k);
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
                w.parity,
                MemberOp::Read {
                    buf: &mut old_parity,
                    offset: base,
                },
            ));
        }
        if let Outcome::Retry = self.run(&mut step)? {
            return Ok(None);
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
        for p in w.pieces {
            let at = (p.in_chunk - lo) as usize;
            columns[p.data_index][at..at + p.len as usize].copy_from_slice(w.data(p));
        }
        let mut parity_buf = vec![0u8; width];
        for column in &columns {
            xor_into(&mut parity_buf, column);
        }
        Ok(Some(parity_buf))
    }
}

/// A write to part of one RAID 5 stripe: its pieces, the bytes they
/// take, and the columns `[lo, hi)` of the stripe's chunks they touch.
struct StripeWrite<'a> {
    pieces: &'a [Piece],
    src: &'a [u8],
    stripe: u64,
    /// The stripe's parity member.
    parity: usize,
    lo: u64,
    hi: u64,
}

impl<'a> StripeWrite<'a> {
    fn new(array: &RaidDevice, pieces: &'a [Piece], src: &'a [u8]) -> Self {
        let stripe = pieces[0].stripe;
        Self {
            pieces,
            src,
            stripe,
            parity: array
                .geometry
                .parity_member(stripe)
                .expect("RAID 5 has parity"),
            lo: pieces.iter().map(|p| p.in_chunk).min().unwrap_or(0),
            hi: pieces.iter().map(|p| p.in_chunk + p.len).max().unwrap_or(0),
        }
    }

    fn width(&self) -> usize {
        (self.hi - self.lo) as usize
    }

    /// The new bytes of piece `p`.
    fn data(&self, p: &Piece) -> &'a [u8] {
        &self.src[p.range_offset as usize..(p.range_offset + p.len) as usize]
    }

    /// The piece written to data chunk `k`, if any.
    fn touched(&self, k: usize) -> Option<&'a Piece> {
        self.pieces.iter().find(|p| p.data_index == k)
    }

    /// Bytes of chunk `k` in `[lo, hi)` the write does not cover: before
    /// and after its piece.
    fn uncovered(&self, k: usize) -> [(u64, u64); 2] {
        let (lo, hi) = (self.lo, self.hi);
        match self.touched(k) {
            None => [(lo, hi), (hi, hi)],
            Some(p) => [(lo, p.in_chunk), (p.in_chunk + p.len, hi)],
        }
    }
}
