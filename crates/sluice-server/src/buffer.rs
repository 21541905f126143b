//! Reusable byte buffers for the connection hot path. Each keeps its
//! memory initialised once and reused, so receiving a payload or reading
//! device data into a reply never allocates or zero-fills per request.

use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::Errno;
use rustix::net::RecvFlags;

/// Batches in a row that must fit in the idle size before a buffer that
/// grew for big requests is given back, so a bulk stream keeps its buffer
/// and an idle connection does not keep megabytes.
const SHRINK_AFTER_SMALL_BATCHES: u32 = 256;

/// Decides when a grown buffer may shrink back.
#[derive(Debug, Default)]
struct ShrinkPolicy {
    /// Most bytes used since the last `relax`.
    peak: usize,
    /// Consecutive `relax` calls whose peak fit in the idle size.
    small_streak: u32,
}

impl ShrinkPolicy {
    fn note(&mut self, used: usize) {
        self.peak = self.peak.max(used);
    }

    /// Returns true when the buffer should shrink to `idle` bytes.
    fn relax(&mut self, len: usize, idle: usize) -> bool {
        if self.peak > idle {
            self.small_streak = 0;
        } else {
            self.small_streak = self.small_streak.saturating_add(1);
        }
        self.peak = 0;
        len > idle && self.small_streak >= SHRINK_AFTER_SMALL_BATCHES
    }
}

/// Receive buffer: bytes `[start, end)` are received and not yet consumed.
#[derive(Debug)]
pub(crate) struct RecvBuf {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
    shrink: ShrinkPolicy,
}

impl RecvBuf {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            bytes: vec![0; capacity],
            start: 0,
            end: 0,
            shrink: ShrinkPolicy::default(),
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
        self.shrink.note(total);
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

    /// One non-blocking receive into the free tail: `Ok(None)` if nothing
    /// is waiting, `Ok(Some(0))` at end of stream.
    pub(crate) fn try_fill_from(&mut self, fd: BorrowedFd<'_>) -> io::Result<Option<usize>> {
        if self.end == self.bytes.len() {
            self.compact();
            if self.end == self.bytes.len() {
                let grown = self.bytes.len() * 2;
                self.bytes.resize(grown, 0);
            }
        }
        match rustix::net::recv(fd, &mut self.bytes[self.end..], RecvFlags::DONTWAIT) {
            Ok((n, _)) => {
                self.end += n;
                Ok(Some(n))
            }
            Err(Errno::AGAIN | Errno::INTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Appends what `fill` writes into the free tail (made non-empty
    /// first, as [`try_fill_from`](Self::try_fill_from) does); `fill`
    /// returns how many bytes it wrote. Used for TLS plaintext.
    pub(crate) fn fill_with(
        &mut self,
        fill: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if self.end == self.bytes.len() {
            self.compact();
            if self.end == self.bytes.len() {
                let grown = self.bytes.len() * 2;
                self.bytes.resize(grown, 0);
            }
        }
        let n = fill(&mut self.bytes[self.end..])?;
        self.end += n.min(self.bytes.len() - self.end);
        Ok(n)
    }

    /// Called once per batch: gives memory back once big messages have
    /// stopped coming for a while.
    pub(crate) fn relax(&mut self, idle: usize) {
        if self.shrink.relax(self.bytes.len(), idle) && self.end - self.start <= idle {
            self.compact();
            self.bytes.truncate(idle);
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
    shrink: ShrinkPolicy,
}

impl ReplyBuf {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            bytes: vec![0; capacity],
            used: 0,
            scratch: Vec::with_capacity(64),
            shrink: ShrinkPolicy::default(),
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
        self.shrink.note(self.used);
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

    /// Called once per batch, after `clear`; see [`RecvBuf::relax`].
    pub(crate) fn relax(&mut self, idle: usize) {
        if self.shrink.relax(self.bytes.len(), idle) && self.used <= idle {
            self.bytes.truncate(idle);
            self.bytes.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recv_buf_compacts_and_grows() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut b = RecvBuf::new(8);
        assert_eq!(
            b.try_fill_from(rx.as_fd()).unwrap(),
            None,
            "nothing sent yet"
        );
        tx.write_all(b"abcdefghijkl").unwrap();
        assert_eq!(b.try_fill_from(rx.as_fd()).unwrap(), Some(8));
        b.consume(6);
        assert_eq!(b.data(), b"gh");
        b.reserve_message(10);
        assert_eq!(b.data(), b"gh");
        assert_eq!(b.try_fill_from(rx.as_fd()).unwrap(), Some(4));
        assert_eq!(b.data(), b"ghijkl");
        b.consume(6);
        assert!(b.data().is_empty());
        drop(tx);
        assert_eq!(
            b.try_fill_from(rx.as_fd()).unwrap(),
            Some(0),
            "end of stream"
        );
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

    #[test]
    fn buffers_shrink_only_after_a_run_of_small_batches() {
        let mut r = ReplyBuf::with_capacity(16);
        r.tail_mut(1000);
        r.clear();
        r.relax(16);
        assert_eq!(r.bytes.len(), 1000, "a big batch just happened");
        for _ in 0..SHRINK_AFTER_SMALL_BATCHES - 1 {
            r.tail_mut(8);
            r.clear();
            r.relax(16);
        }
        assert_eq!(r.bytes.len(), 1000);
        r.clear();
        r.relax(16);
        assert_eq!(r.bytes.len(), 16);
        let mut b = RecvBuf::new(16);
        b.reserve_message(64);
        assert_eq!(b.bytes.len(), 64);
        b.relax(16); // the batch that needed 64 bytes
        for _ in 0..SHRINK_AFTER_SMALL_BATCHES {
            b.relax(16);
        }
        assert_eq!(b.bytes.len(), 16);
    }
}
