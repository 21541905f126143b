//! A cached block: its data with a valid and a dirty bit per sector, the
//! flags that make loads single-flight and write-backs ordered, and the
//! arithmetic of sector masks and of a range's pieces per block.

use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Cache block size.
pub(super) const BLOCK: u64 = 64 * 1024;
/// Sector: the unit of valid/dirty tracking (128 per block, one bit each
/// in a `u128`).
pub(super) const SECTOR: u64 = 512;

#[derive(Debug)]
pub(super) struct BlockState {
    pub(super) data: Box<[u8]>,
    pub(super) valid: u128,
    pub(super) dirty: u128,
    /// A device read for this block is under way.
    pub(super) loading: bool,
    /// A write-back of this block is under way.
    pub(super) writing: bool,
    /// Loaded by read-ahead and not read since.
    pub(super) prefetched: bool,
    /// Evicted or invalidated: holders must look the block up again.
    pub(super) removed: bool,
}

#[derive(Debug)]
pub(super) struct Block {
    pub(super) state: Mutex<BlockState>,
    pub(super) changed: Condvar,
    pub(super) referenced: AtomicBool,
}

impl Block {
    pub(super) fn lock(&self) -> MutexGuard<'_, BlockState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    pub(super) fn wait<'a>(&self, g: MutexGuard<'a, BlockState>) -> MutexGuard<'a, BlockState> {
        self.changed.wait(g).unwrap_or_else(|p| p.into_inner())
    }
}

pub(super) fn sector_mask(from: u64, to: u64) -> u128 {
    // Sectors [from/512, ceil(to/512)) within one block.
    let first = from / SECTOR;
    let last = to.div_ceil(SECTOR);
    let n = last - first;
    let ones = if n >= 128 {
        u128::MAX
    } else {
        (1u128 << n) - 1
    };
    ones << first
}

pub(super) fn full_sector_mask(from: u64, to: u64) -> u128 {
    // Sectors entirely inside [from, to).
    let first = from.div_ceil(SECTOR);
    let last = to / SECTOR;
    if last <= first {
        0
    } else {
        sector_mask(first * SECTOR, last * SECTOR)
    }
}

/// The runs of consecutive set bits of `mask` as (first sector, count).
pub(super) fn runs(mut mask: u128) -> impl Iterator<Item = (usize, usize)> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let s = mask.trailing_zeros() as usize;
        let n = (mask >> s).trailing_ones() as usize;
        mask = if s + n >= 128 {
            0
        } else {
            mask & !(((1u128 << n) - 1) << s)
        };
        Some((s, n))
    })
}

/// Calls `f(block, from, to, buf_range)` for each block piece of a range.
pub(super) fn pieces(
    offset: u64,
    len: u64,
    mut f: impl FnMut(u64, u64, u64, std::ops::Range<usize>),
) {
    let mut done = 0;
    while done < len {
        let pos = offset + done;
        let idx = pos / BLOCK;
        let from = pos % BLOCK;
        let n = (BLOCK - from).min(len - done);
        f(idx, from, from + n, done as usize..(done + n) as usize);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_bits() {
        assert_eq!(runs(0).collect::<Vec<_>>(), vec![]);
        assert_eq!(runs(u128::MAX).collect::<Vec<_>>(), vec![(0, 128)]);
        assert_eq!(runs(0b1101_1000).collect::<Vec<_>>(), vec![(3, 2), (6, 2)]);
        assert_eq!(runs(1 << 127).collect::<Vec<_>>(), vec![(127, 1)]);
    }

    #[test]
    fn masks() {
        assert_eq!(sector_mask(0, 512), 1);
        assert_eq!(sector_mask(0, 513), 3);
        assert_eq!(sector_mask(511, 513), 3);
        assert_eq!(sector_mask(0, BLOCK), u128::MAX);
        assert_eq!(full_sector_mask(1, 1024), 2);
        assert_eq!(full_sector_mask(1, 1000), 0);
        assert_eq!(full_sector_mask(0, BLOCK), u128::MAX);
    }
}
