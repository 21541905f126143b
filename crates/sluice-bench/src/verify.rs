//! Data verification. Every write of a block lays down the same bytes, a
//! function of the block's absolute offset and the run's seed, so a read
//! can be checked whatever order concurrent writes landed in, and a block
//! returned from the wrong offset, torn, or zeroed is caught.

use sluice_types::splitmix64;

/// Fills `buf` with the pattern for the bytes starting at `offset`.
pub fn fill(buf: &mut [u8], offset: u64, seed: u64) {
    // Word-aligned on absolute offsets, so a block's bytes are the same
    // whichever request covers them.
    for (i, b) in buf.iter_mut().enumerate() {
        let at = offset + i as u64;
        let word = splitmix64(seed ^ (at & !7));
        *b = word.to_le_bytes()[(at & 7) as usize];
    }
}

/// The first byte of `data` (read at `offset`) that differs from the
/// pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Absolute offset of the bad byte.
    pub offset: u64,
    /// What the pattern says.
    pub expected: u8,
    /// What was read.
    pub found: u8,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "data mismatch at byte {}: expected {:#04x}, read {:#04x}",
            self.offset, self.expected, self.found
        )
    }
}

/// Checks `data`, read at `offset`, against the pattern.
pub fn check(data: &[u8], offset: u64, seed: u64) -> Result<(), Mismatch> {
    let mut word_at = u64::MAX;
    let mut word = [0u8; 8];
    for (i, &found) in data.iter().enumerate() {
        let at = offset + i as u64;
        if at & !7 != word_at {
            word_at = at & !7;
            word = splitmix64(seed ^ word_at).to_le_bytes();
        }
        let expected = word[(at & 7) as usize];
        if found != expected {
            return Err(Mismatch {
                offset: at,
                expected,
                found,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_block_checks_at_its_own_offset() {
        let mut buf = vec![0; 4096];
        fill(&mut buf, 8192, 7);
        assert_eq!(check(&buf, 8192, 7), Ok(()));
        // Sub-ranges at unaligned offsets agree with the whole.
        assert_eq!(check(&buf[3..1000], 8195, 7), Ok(()));
        let mut part = vec![0; 997];
        fill(&mut part, 8195, 7);
        assert_eq!(part, buf[3..1000]);
    }

    #[test]
    fn corruption_is_detected() {
        let mut buf = vec![0; 4096];
        fill(&mut buf, 4096, 1);
        // One flipped bit.
        let mut bad = buf.clone();
        bad[1234] ^= 0x10;
        let m = check(&bad, 4096, 1).unwrap_err();
        assert_eq!(m.offset, 4096 + 1234);
        assert_eq!(m.found, buf[1234] ^ 0x10);
        // The right data from the wrong offset.
        assert!(check(&buf, 0, 1).is_err());
        // A zeroed (lost) block.
        assert!(check(&[0u8; 4096], 4096, 1).is_err());
        // Another run's data.
        assert!(check(&buf, 4096, 2).is_err());
        assert!(m.to_string().contains("5330"));
    }
}
