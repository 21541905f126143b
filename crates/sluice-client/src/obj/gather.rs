//! A request's data region as the caller holds it: one buffer, or a list
//! of buffers gathered in order (a write from iovecs), cut into the
//! pieces a split request sends without copying a byte; and the scatter
//! of a read's bytes into a caller's list of buffers.

use std::io::{IoSlice, IoSliceMut};

/// Data bytes in order, borrowed from the caller.
#[derive(Debug, Clone)]
pub(crate) enum Payload<'a> {
    /// One buffer (or none: empty).
    One(&'a [u8]),
    /// Several buffers, none empty, their bytes one after another.
    Many(Vec<&'a [u8]>),
}

impl Default for Payload<'_> {
    fn default() -> Self {
        Self::One(&[])
    }
}

impl<'a> From<&'a [u8]> for Payload<'a> {
    fn from(data: &'a [u8]) -> Self {
        Self::One(data)
    }
}

impl<'a> Payload<'a> {
    /// The bytes of `bufs` in order (empty buffers dropped).
    pub(crate) fn gather(bufs: &'a [IoSlice<'a>]) -> Self {
        let mut slices: Vec<&'a [u8]> = bufs
            .iter()
            .map(|b| &**b)
            .filter(|b| !b.is_empty())
            .collect();
        match slices.len() {
            0 => Self::One(&[]),
            1 => Self::One(slices.remove(0)),
            _ => Self::Many(slices),
        }
    }

    /// Bytes in all.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::One(b) => b.len(),
            Self::Many(v) => v.iter().map(|b| b.len()).sum(),
        }
    }

    /// The buffers in order.
    pub(crate) fn slices(&self) -> &[&'a [u8]] {
        match self {
            Self::One(b) => std::slice::from_ref(b),
            Self::Many(v) => v,
        }
    }

    /// Bytes `at..at + len`, borrowed from the buffers they lie in; `None`
    /// past the end.
    pub(crate) fn cut(&self, at: usize, len: usize) -> Option<Self> {
        match self {
            Self::One(b) => b.get(at..at.checked_add(len)?).map(Self::One),
            Self::Many(v) => {
                let end = at.checked_add(len)?;
                let mut out = Vec::new();
                let mut start = 0usize;
                for b in v {
                    let (from, to) = (start.max(at), (start + b.len()).min(end));
                    if from < to {
                        out.push(&b[from - start..to - start]);
                    }
                    start += b.len();
                    if start >= end {
                        break;
                    }
                }
                if start < end {
                    return None;
                }
                Some(match out.len() {
                    0 => Self::One(&[]),
                    1 => Self::One(out[0]),
                    _ => Self::Many(out),
                })
            }
        }
    }

    /// Appends every byte to `out`.
    pub(crate) fn extend_into(&self, out: &mut Vec<u8>) {
        for b in self.slices() {
            out.extend_from_slice(b);
        }
    }
}

/// Bytes in all of `bufs` (`None` past `u64`).
pub(crate) fn total_mut(bufs: &[IoSliceMut<'_>]) -> Option<u64> {
    bufs.iter()
        .try_fold(0u64, |t, b| t.checked_add(b.len() as u64))
}

/// Copies `data` into `bufs` in order; their lengths are equal (checked
/// before the read was sent).
pub(crate) fn scatter(data: &[u8], bufs: &mut [IoSliceMut<'_>]) {
    let mut rest = data;
    for b in bufs.iter_mut() {
        let n = b.len().min(rest.len());
        b[..n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_take_the_bytes_of_every_buffer_they_span() {
        let (a, b, c) = (b"abc".as_slice(), b"".as_slice(), b"defgh".as_slice());
        let bufs = [IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)];
        let p = Payload::gather(&bufs);
        assert_eq!(p.len(), 8);
        assert_eq!(p.slices().len(), 2, "the empty buffer is dropped");
        let flat = |p: &Payload<'_>| {
            let mut v = Vec::new();
            p.extend_into(&mut v);
            v
        };
        for at in 0..=8 {
            for len in 0..=8 - at {
                let cut = p.cut(at, len).unwrap();
                assert_eq!(flat(&cut), b"abcdefgh"[at..at + len], "{at}+{len}");
            }
        }
        assert!(p.cut(7, 2).is_none());
        assert!(p.cut(usize::MAX, 2).is_none());
        assert!(matches!(p.cut(3, 5), Some(Payload::One(b"defgh"))));
    }

    #[test]
    fn scatter_fills_buffers_in_order() {
        let (mut x, mut y) = ([0u8; 3], [0u8; 2]);
        let mut bufs = [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)];
        assert_eq!(total_mut(&bufs), Some(5));
        scatter(b"hello", &mut bufs);
        assert_eq!((&x, &y), (b"hel", b"lo"));
    }
}
