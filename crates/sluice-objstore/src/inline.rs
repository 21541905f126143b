//! Small objects' bytes kept in the attribute database instead of a
//! file (see `docs/design/0005-object-layout.md`): the same segment
//! reads, writes and punches as `data` does on files, on the byte
//! vector a row holds. The vector holds the object's bytes from offset
//! 0 up to the furthest byte ever written; the object's logical length
//! may be longer (what lies past the vector reads as zeros).

use crate::segments::Segment;

/// Reads `clamped` (the segments clamped to the object's length) out of
/// `bytes` into `out`, each at its place in list order (`lens`, the
/// unclamped segments, decide the places), and zeroes every byte of
/// `out` that no stored byte fills.
pub(crate) fn read_segments(bytes: &[u8], clamped: &[Segment], lens: &[Segment], out: &mut [u8]) {
    let mut at = 0usize;
    for (s, l) in clamped.iter().zip(lens) {
        let chunk = &mut out[at..at + l.len as usize];
        let stored = (bytes.len() as u64).saturating_sub(s.offset).min(s.len) as usize;
        if stored > 0 {
            let from = s.offset as usize;
            chunk[..stored].copy_from_slice(&bytes[from..from + stored]);
        }
        chunk[stored..].fill(0);
        at += l.len as usize;
    }
}

/// Writes `data` (the segments' bytes in list order) over `bytes`,
/// growing it with zeros where a segment ends past it; a later segment
/// wins where segments overlap. The caller checked that every segment
/// ends inside the inline limit.
pub(crate) fn write_segments(bytes: &mut Vec<u8>, segments: &[Segment], data: &[u8]) {
    let mut at = 0usize;
    for s in segments {
        let len = s.len as usize;
        if len == 0 {
            continue;
        }
        let (from, to) = (s.offset as usize, s.end() as usize);
        if bytes.len() < to {
            bytes.resize(to, 0);
        }
        bytes[from..to].copy_from_slice(&data[at..at + len]);
        at += len;
    }
}

/// Zeroes the segments' ranges in `bytes` (past its end they read as
/// zeros already).
pub(crate) fn punch_segments(bytes: &mut [u8], segments: &[Segment]) {
    for s in segments {
        let end = s.end().min(bytes.len() as u64);
        if s.offset < end {
            bytes[s.offset as usize..end as usize].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_grow_the_bytes_and_later_segments_win() {
        let mut b = Vec::new();
        write_segments(
            &mut b,
            &[Segment::new(2, 3), Segment::new(0, 0), Segment::new(3, 3)],
            b"abcxyz",
        );
        assert_eq!(b, [0, 0, b'a', b'x', b'y', b'z']);
        punch_segments(&mut b, &[Segment::new(3, 10)]);
        assert_eq!(b, [0, 0, b'a', 0, 0, 0]);
        let mut out = [9u8; 7];
        // Clamped to a length of 5: one byte past it, one past the bytes.
        read_segments(
            &b,
            &[Segment::new(2, 2), Segment::new(4, 1)],
            &[Segment::new(2, 2), Segment::new(4, 5)],
            &mut out,
        );
        assert_eq!(out, [b'a', 0, 0, 0, 0, 0, 0]);
    }
}
