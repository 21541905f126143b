//! The receive buffer both protocols' clients parse replies from.

use std::io;

use super::transport::Stream;

/// A receive buffer: bytes `start..end` of `buf` are received and not yet
/// decoded.
#[derive(Debug)]
pub(crate) struct RecvBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RecvBuf {
    pub(crate) fn new() -> Self {
        Self {
            buf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
        }
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Makes room for `need` bytes from `start`.
    pub(crate) fn reserve(&mut self, need: usize) {
        if self.buf.len() - self.start < need || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() < need {
                self.buf.resize(need, 0);
            }
        }
    }

    /// One read from `stream`; `Ok(false)` at the end of the stream.
    pub(crate) fn fill(&mut self, stream: &mut Stream) -> io::Result<bool> {
        self.fill_at_most(stream, usize::MAX)
    }

    /// [`fill`](Self::fill), reading at most `max` bytes (at least 1).
    pub(crate) fn fill_at_most(&mut self, stream: &mut Stream, max: usize) -> io::Result<bool> {
        if self.end == self.buf.len() {
            self.reserve(self.end - self.start + 4096);
        }
        let end = self.buf.len().min(self.end.saturating_add(max.max(1)));
        loop {
            match stream.read(&mut self.buf[self.end..end]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}
