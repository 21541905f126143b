//! The replay log: requests that changed what the server holds (NBD's
//! writes, trims and zeroing; the object protocol's writes, punches,
//! attribute sets and truncates), acknowledged by the server but not yet
//! covered by a successful FLUSH. A server with a write-back cache that
//! dies loses exactly these, so after a reconnect the client sends them
//! again, in the order they were acknowledged, before anything else.

use std::collections::VecDeque;

/// Acknowledged, unflushed modifications as encoded requests, each with
/// what its protocol needs to read the reply to it again (`R`).
#[derive(Debug)]
pub(crate) struct ReplayLog<R> {
    /// (sequence number, request, its bytes), oldest first.
    entries: VecDeque<(u64, R, Vec<u8>)>,
    bytes: usize,
    last_seq: u64,
    limit: usize,
}

impl<R> ReplayLog<R> {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            last_seq: 0,
            limit,
        }
    }

    /// Records an acknowledged modification; returns its sequence number.
    pub(crate) fn push(&mut self, sent: R, request: Vec<u8>) -> u64 {
        self.last_seq += 1;
        self.bytes += request.len();
        self.entries.push_back((self.last_seq, sent, request));
        self.last_seq
    }

    /// A FLUSH sent when `covers` was the last sequence number succeeded:
    /// everything up to it is durable and leaves the log.
    pub(crate) fn flushed(&mut self, covers: u64) {
        while let Some((seq, _, r)) = self.entries.front() {
            if *seq > covers {
                break;
            }
            self.bytes -= r.len();
            self.entries.pop_front();
        }
    }

    /// Whether the log holds more than its limit (time for a FLUSH).
    pub(crate) fn over_limit(&self) -> bool {
        self.bytes > self.limit
    }

    /// The requests to replay, oldest first.
    pub(crate) fn requests(&self) -> impl Iterator<Item = (&R, &[u8])> {
        self.entries.iter().map(|(_, s, r)| (s, r.as_slice()))
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_nbd_proto::{Op, Sent};

    fn w(cookie: u64) -> Sent {
        Sent {
            cookie,
            op: Op::Write,
            offset: 0,
            length: 4,
        }
    }

    #[test]
    fn a_flush_drops_exactly_what_it_covers() {
        let mut log = ReplayLog::new(10);
        let a = log.push(w(1), vec![1; 4]);
        let b = log.push(w(2), vec![2; 4]);
        assert!(!log.over_limit());
        let c = log.push(w(3), vec![3; 4]);
        assert!(log.over_limit());
        assert_eq!((a, b, c), (1, 2, 3));
        // A flush sent after b's acknowledgement and before c's.
        log.flushed(b);
        assert_eq!(
            log.requests().collect::<Vec<_>>(),
            vec![(&w(3), &[3u8; 4][..])]
        );
        assert_eq!((log.len(), log.bytes()), (1, 4));
        log.flushed(0);
        assert_eq!(log.len(), 1);
        log.flushed(c);
        assert_eq!((log.len(), log.bytes()), (0, 0));
    }
}
