//! Parity arithmetic: XOR of equal-length buffers.

/// `dst ^= src`, word-wise: 16 bytes at a time as `u128`, which the
/// compiler turns into SIMD loads and XORs, then the tail byte-wise.
///
/// # Panics
/// If the lengths differ (a bug in the caller, never input).
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "parity buffers must be the same length"
    );
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (d, s) in (&mut d).zip(&mut s) {
        let x = u128::from_ne_bytes(d.try_into().expect("16-byte chunk"))
            ^ u128::from_ne_bytes(s.try_into().expect("16-byte chunk"));
        d.copy_from_slice(&x.to_ne_bytes());
    }
    for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *d ^= s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xor_matches_bytewise_at_every_length_and_alignment() {
        let a: Vec<u8> = (0..100u32).map(|i| (i * 37 + 11) as u8).collect();
        let b: Vec<u8> = (0..100u32).map(|i| (i * 91 + 5) as u8).collect();
        for start in 0..17 {
            for end in start..100 {
                let mut d = a[start..end].to_vec();
                xor_into(&mut d, &b[start..end]);
                let want: Vec<u8> = a[start..end]
                    .iter()
                    .zip(&b[start..end])
                    .map(|(x, y)| x ^ y)
                    .collect();
                assert_eq!(d, want);
            }
        }
    }
}
