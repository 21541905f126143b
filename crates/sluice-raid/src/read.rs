//! The read path: reads split per chunk, chunks of a missing member
//! rebuilt from the rest of their stripe, extents and cache hints.

use std::io;
use std::sync::atomic::Ordering;

use sluice_storage::{DeviceError, Extent, IoOp};

use crate::device::{Outcome, RaidDevice};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::{Piece, RaidLevel};
use crate::parity::xor_into;

impl RaidDevice {
    pub(crate) fn read_attempt(&self, buf: &mut [u8], offset: u64) -> Result<Outcome, DeviceError> {
        let mut step = Vec::new();
        let mut degraded = Vec::new();
        let mut rest = buf;
        for piece in self.geometry.pieces(offset, rest.len() as u64) {
            let (out, tail) = rest.split_at_mut(piece.len as usize);
            rest = tail;
            if let Some(member) = self.read_source(&piece) {
                step.push(MemberIo::new(
                    member,
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

    /// Rebuilds a piece of a missing member from the rest of its stripe
    /// (by parity: a level without parity has nothing to rebuild it
    /// from once no member holds it).
    pub(crate) fn reconstruct(
        &self,
        piece: &Piece,
        out: &mut [u8],
    ) -> Result<Outcome, DeviceError> {
        if self.geometry.parity_member(piece.stripe).is_none() || self.lost() {
            return Err(self.array_failed(IoOp::Read, piece.member_offset, piece.len));
        }
        if self.geometry.level() == RaidLevel::Raid6 {
            return self.reconstruct6(piece, out);
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

    pub(crate) fn member_extents(
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
            let source = self.read_source(&piece);
            let Some(member) = source.and_then(|s| set.devices[s].as_ref()) else {
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
                    Err(e @ DeviceError::Io { .. }) if self.geometry.tolerance() > 0 => {
                        let failed = source.unwrap_or(piece.member);
                        self.counters[failed].errors.fetch_add(1, Ordering::Relaxed);
                        if self.mark_failed(failed) {
                            tracing::warn!(array = %self.label, member = failed,
                                name = %set.names[failed], error = &e as &dyn std::error::Error,
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
                            source.unwrap_or(piece.member)
                        )),
                    });
                }
            }
        }
        out.truncate(max_extents);
        Ok(out)
    }

    pub(crate) fn cache_range(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.check_range(IoOp::Cache, offset, length)?;
        let set = self.members.load();
        for p in self.geometry.pieces(offset, length) {
            if let Some(m) = self.read_source(&p).and_then(|s| set.devices[s].as_ref()) {
                // A hint: errors are not the request's.
                let _ = m.cache(self.data_offset + p.member_offset, p.len);
            }
        }
        Ok(())
    }
}

/// Appends `e` to `out`, merging it into the last extent if they agree.
fn push_extent(out: &mut Vec<Extent>, e: Extent) {
    match out.last_mut() {
        Some(last) if last.hole == e.hole && last.zero == e.zero => last.length += e.length,
        _ => out.push(e),
    }
}
