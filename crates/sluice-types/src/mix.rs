//! One pure hash of a 64-bit number, for everything that derives bytes
//! or choices from an index and must get the same ones back later: the
//! bench's verify patterns and per-worker seeds, the crash tests' sector
//! patterns. A stream of random numbers is a job for a seeded generator
//! (`fastrand::Rng::with_seed`), not for this.

/// SplitMix64's step: adds the golden-ratio increment to `x` and
/// scrambles the sum (a bijection on `u64`, so distinct inputs give
/// distinct outputs). `splitmix64(seed + k * 0x9e37_79b9_7f4a_7c15)` for
/// k = 0, 1, ... is the SplitMix64 sequence.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // SplitMix64 seeded with 0 (Vigna's splitmix64.c): the first
        // outputs are the hash of 0, then of one increment, ...
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(0x9e37_79b9_7f4a_7c15), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(
            splitmix64(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(2)),
            0x06c4_5d18_8009_454f
        );
    }
}
