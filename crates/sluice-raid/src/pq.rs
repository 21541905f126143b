//! RAID 6 arithmetic: the P (XOR) and Q (Reed-Solomon syndrome) parity
//! of a stripe, and the recovery of up to two lost chunks of one.
//!
//! Q is md's and ISA-L's syndrome over GF(2^8) with the polynomial
//! 0x11d and generator 2: `Q = sum over k of 2^k * D_k`, `D_k` the
//! stripe's data chunk `k`. The field arithmetic is the `rusty_erasure`
//! crate's (SIMD kernels chosen at run time: SSSE3, AVX2, GFNI, NEON,
//! with a scalar fallback); this module only says which chunks are
//! combined how.
//!
//! Recovery, with `P'` and `Q'` the parities of the data left (lost
//! chunks taken as zero):
//!
//! - data `x` lost, P present: `D_x = P + P'`;
//! - data `x` lost, only Q present: `D_x = (Q + Q') / 2^x`;
//! - data `x < y` lost: with `A = P + P'`, `B = Q + Q'`,
//!   `D_x = (2^y A + B) / (2^x + 2^y)`, `D_y = A + D_x`;
//! - P or Q lost: recomputed from the data.

use rusty_erasure::{gf, isal, raid, tables};
use thiserror::Error;

use crate::layout::Geometry;

/// Why a stripe's chunks cannot be recovered.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PqError {
    /// More chunks are missing than RAID 6 survives (or the geometry
    /// is not RAID 6).
    #[error("stripe {stripe} has {missing} chunks missing, more than the two P and Q survive")]
    TooManyMissing { stripe: u64, missing: usize },
}

/// `P` and `Q` of `data` (two or more equal-length chunks, in data
/// order) into `p` and `q`.
pub fn pq_into(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    // The lengths always agree here (chunks of one stripe range), and
    // RAID 6 has at least two data chunks.
    if raid::pq_gen(data, p, q).is_err() {
        unreachable_lengths();
    }
}

#[cold]
fn unreachable_lengths() {
    debug_assert!(false, "P+Q chunks of different lengths");
}

/// `dst ^= c * src` over GF(2^8).
fn mul_add(c: u8, src: &[u8], dst: &mut [u8]) {
    let mut tbl = [0u8; tables::TABLE_BYTES];
    tables::mul_table32(c, &mut tbl);
    if isal::gf_vect_mad(src.len(), 1, 0, &tbl, src, dst).is_err() {
        unreachable_lengths();
    }
}

/// `2^n` in GF(2^8).
fn pow2(n: usize) -> u8 {
    (0..n % 255).fold(1u8, |acc, _| gf::mul(acc, 2))
}

/// Fills in every missing chunk (`None`) of `stripe` in `chunks`, one
/// per member, all of one length: lost data from P and Q, lost P or Q
/// from the data. At most two may be missing.
pub fn recover(
    geometry: &Geometry,
    stripe: u64,
    chunks: &mut [Option<Vec<u8>>],
) -> Result<(), PqError> {
    let missing = chunks.iter().filter(|c| c.is_none()).count();
    if missing == 0 {
        return Ok(());
    }
    if missing > 2 {
        return Err(PqError::TooManyMissing { stripe, missing });
    }
    let len = chunks.iter().flatten().map(Vec::len).next().unwrap_or(0);
    let d = geometry.data_members();
    let data_member = |k| geometry.data_member(stripe, k);
    let (Some(pm), Some(qm)) = (geometry.parity_member(stripe), geometry.q_member(stripe)) else {
        return Err(PqError::TooManyMissing { stripe, missing });
    };
    let lost: Vec<usize> = (0..d)
        .filter(|&k| chunks[data_member(k)].is_none())
        .collect();
    if !lost.is_empty() {
        // The parities of the data left, lost chunks as zero.
        let zero = vec![0u8; len];
        let (mut p2, mut q2) = (vec![0u8; len], vec![0u8; len]);
        {
            let data: Vec<&[u8]> = (0..d)
                .map(|k| chunks[data_member(k)].as_deref().unwrap_or(&zero))
                .collect();
            pq_into(&data, &mut p2, &mut q2);
        }
        match (lost.as_slice(), &chunks[pm], &chunks[qm]) {
            (&[x], Some(p), _) => {
                crate::parity::xor_into(&mut p2, p);
                chunks[data_member(x)] = Some(p2);
            }
            (&[x], None, Some(q)) => {
                crate::parity::xor_into(&mut q2, q);
                let mut dx = vec![0u8; len];
                mul_add(gf::inv(pow2(x)), &q2, &mut dx);
                chunks[data_member(x)] = Some(dx);
            }
            (&[x, y], Some(p), Some(q)) => {
                crate::parity::xor_into(&mut p2, p);
                crate::parity::xor_into(&mut q2, q);
                let denom = gf::inv(pow2(x) ^ pow2(y));
                let mut dx = vec![0u8; len];
                mul_add(gf::mul(pow2(y), denom), &p2, &mut dx);
                mul_add(denom, &q2, &mut dx);
                crate::parity::xor_into(&mut p2, &dx);
                chunks[data_member(x)] = Some(dx);
                chunks[data_member(y)] = Some(p2);
            }
            _ => return Err(PqError::TooManyMissing { stripe, missing }),
        }
    }
    if chunks[pm].is_none() || chunks[qm].is_none() {
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        {
            let data: Vec<&[u8]> = (0..d)
                .map(|k| chunks[data_member(k)].as_deref().unwrap_or(&[]))
                .collect();
            pq_into(&data, &mut p, &mut q);
        }
        chunks[pm].get_or_insert(p);
        chunks[qm].get_or_insert(q);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::RaidLevel;

    /// The syndrome written out byte by byte, as md's generic C code
    /// computes it (Horner's rule from the last data chunk).
    fn reference_q(data: &[Vec<u8>]) -> Vec<u8> {
        let times2 = |b: u8| (b << 1) ^ if b & 0x80 != 0 { 0x1d } else { 0 };
        (0..data[0].len())
            .map(|i| data.iter().rev().fold(0u8, |q, d| times2(q) ^ d[i]))
            .collect()
    }

    fn stripe_of(geometry: &Geometry, stripe: u64, len: usize, seed: u32) -> Vec<Vec<u8>> {
        let d = geometry.data_members();
        let data: Vec<Vec<u8>> = (0..d)
            .map(|k| {
                (0..len)
                    .map(|i| (i as u32 * 131 + k as u32 * 7 + seed).wrapping_mul(2654435761) as u8)
                    .collect()
            })
            .collect();
        let mut chunks = vec![Vec::new(); geometry.members()];
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        pq_into(&refs, &mut p, &mut q);
        assert_eq!(q, reference_q(&data), "Q is md's syndrome");
        for (k, chunk) in data.into_iter().enumerate() {
            chunks[geometry.data_member(stripe, k)] = chunk;
        }
        chunks[geometry.parity_member(stripe).expect("P")] = p;
        chunks[geometry.q_member(stripe).expect("Q")] = q;
        chunks
    }

    #[test]
    fn any_one_or_two_lost_chunks_come_back() {
        for members in [4, 5, 7] {
            let g = Geometry::new(RaidLevel::Raid6, members, 512).expect("geometry");
            for stripe in 0..members as u64 {
                // 100 bytes: the kernels' whole blocks and a byte tail.
                let whole = stripe_of(&g, stripe, 100, stripe as u32);
                for a in 0..members {
                    for b in a..members {
                        let mut chunks: Vec<Option<Vec<u8>>> =
                            whole.iter().cloned().map(Some).collect();
                        chunks[a] = None;
                        chunks[b] = None;
                        recover(&g, stripe, &mut chunks).expect("recoverable");
                        let got: Vec<Vec<u8>> = chunks.into_iter().flatten().collect();
                        assert_eq!(
                            got, whole,
                            "{members} members, stripe {stripe}, lost {a} {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn three_lost_chunks_are_refused() {
        let g = Geometry::new(RaidLevel::Raid6, 5, 512).expect("geometry");
        let mut chunks: Vec<Option<Vec<u8>>> =
            stripe_of(&g, 0, 16, 1).into_iter().map(Some).collect();
        chunks[0] = None;
        chunks[1] = None;
        chunks[2] = None;
        assert_eq!(
            recover(&g, 0, &mut chunks),
            Err(PqError::TooManyMissing {
                stripe: 0,
                missing: 3
            })
        );
    }
}
