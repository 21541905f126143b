//! Reusable byte buffers for the connection hot path. Each keeps its
//! memory initialised once and reused, so receiving a payload or reading
//! device data into a reply never allocates or zero-fills per request.

use std::io::{self, Read};

/// Receive buffer: bytes `[start, end)` are received and not yet consumed.
#[derive(Debug)]
pub(crate) struct RecvBuf {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

impl RecvBuf {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            bytes: vec![0; capacity],
            start: 0,
            end: 0,
        }
    }

    /// Received, unconsumed bytes.
    pub(crate) fn data(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Makes room for a message of `total` bytes starting at the current
    /// position, moving unconsumed bytes to the front if needed.
    pub(crate) fn reserve_message(&mut self, total: usize) {
        if self.bytes.len() - self.start >= total {
            return;
        }
        self.compact();
        if self.bytes.len() < total {
            self.bytes.resize(total, 0);
        }
    }

    /// Moves unconsumed bytes to the front.
    pub(crate) fn compact(&mut self) {
        if self.start > 0 {
            self.bytes.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// One `read` into the free tail. Returns 0 at end of stream.
    pub(crate) fn fill_from(&mut self, r: &mut impl Read) -> io::Result<usize> {
        if self.end == self.bytes.len() {
            self.compact();
            if self.end == self.bytes.len() {
                let grown = self.bytes.len() * 2;
                self.bytes.resize(grown, 0);
            }
        }
        loop {
            match r.read(&mut self.bytes[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Shrinks back after a huge message, so idle connections stay small.
    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        if self.bytes.len() > capacity && self.end - self.start <= capacity {
            self.compact();
            self.bytes.truncate(capacity);
            self.bytes.shrink_to_fit();
        }
    }
}

/// Reply buffer: `[0, used)` is queued output.
#[derive(Debug, Default)]
pub(crate) struct ReplyBuf {
    bytes: Vec<u8>,
    used: usize,
    /// Where protocol encoders (which append to a `Vec`) write headers.
    scratch: Vec<u8>,
}

impl ReplyBuf {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            bytes: vec![0; capacity],
            used: 0,
            scratch: Vec::with_capacity(64),
        }
    }

    /// Appends what `encode` writes (protocol headers).
    pub(crate) fn encode(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        encode(&mut scratch);
        self.extend_from_slice(&scratch);
        self.scratch = scratch;
    }

    /// The queued bytes as an owned vector (used when a reply must wait).
    pub(crate) fn into_vec(mut self) -> Vec<u8> {
        self.bytes.truncate(self.used);
        self.bytes
    }

    pub(crate) fn len(&self) -> usize {
        self.used
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.used == 0
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.used]
    }

    pub(crate) fn clear(&mut self) {
        self.used = 0;
    }

    pub(crate) fn truncate(&mut self, len: usize) {
        self.used = self.used.min(len);
    }

    pub(crate) fn extend_from_slice(&mut self, data: &[u8]) {
        self.tail_mut(data.len()).copy_from_slice(data);
    }

    /// Appends `n` bytes and returns them for the caller to fill.
    pub(crate) fn tail_mut(&mut self, n: usize) -> &mut [u8] {
        let end = self.used + n;
        if self.bytes.len() < end {
            let grown = end.max(self.bytes.len() * 2);
            self.bytes.resize(grown, 0);
        }
        let start = self.used;
        self.used = end;
        &mut self.bytes[start..end]
    }

    pub(crate) fn shrink_to(&mut self, capacity: usize) {
        if self.bytes.len() > capacity && self.used <= capacity {
            self.bytes.truncate(capacity);
            self.bytes.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_buf_compacts_and_grows() {
        let mut b = RecvBuf::new(8);
        let mut src: &[u8] = b"abcdefghijkl";
        assert_eq!(b.fill_from(&mut src).unwrap(), 8);
        b.consume(6);
        assert_eq!(b.data(), b"gh");
        b.reserve_message(10);
        assert_eq!(b.data(), b"gh");
        assert_eq!(b.fill_from(&mut src).unwrap(), 4);
        assert_eq!(b.data(), b"ghijkl");
        b.consume(6);
        assert!(b.data().is_empty());
    }

    #[test]
    fn reply_buf_tail() {
        let mut r = ReplyBuf::with_capacity(2);
        r.extend_from_slice(b"ab");
        r.tail_mut(3).copy_from_slice(b"cde");
        assert_eq!(r.as_slice(), b"abcde");
        r.truncate(1);
        assert_eq!(r.as_slice(), b"a");
        r.clear();
        assert!(r.is_empty());
    }
}
