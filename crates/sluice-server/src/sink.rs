//! The sending half of a connection, shared by the connection thread and
//! the I/O workers that finish its handed-off requests.

use std::collections::BTreeMap;
use std::io::{self, IoSlice};
use std::sync::Mutex;

use crate::stream::Stream;

/// Sequence number of a request that gets a reply, in arrival order.
pub(crate) type Seq = u64;

#[derive(Debug)]
enum Order {
    /// Replies leave as soon as they are ready.
    Completion,
    /// Replies leave in request order; early ones wait in `held`.
    Request {
        next: Seq,
        held: BTreeMap<Seq, Vec<u8>>,
    },
}

#[derive(Debug)]
struct Inner {
    stream: Stream,
    order: Order,
    broken: bool,
}

/// Serialises replies onto one socket, in completion or request order.
#[derive(Debug)]
pub(crate) struct ReplySink {
    inner: Mutex<Inner>,
}

enum Part {
    Batch(usize, usize),
    Held(usize),
}

impl ReplySink {
    pub(crate) fn new(stream: Stream, in_request_order: bool) -> Self {
        let order = if in_request_order {
            Order::Request {
                next: 0,
                held: BTreeMap::new(),
            }
        } else {
            Order::Completion
        };
        Self {
            inner: Mutex::new(Inner {
                stream,
                order,
                broken: false,
            }),
        }
    }

    /// Sends replies built on the connection thread. `ends[i]` is the
    /// sequence number and end offset in `batch` of the i-th reply; the
    /// replies are contiguous from offset 0.
    pub(crate) fn send_batch(&self, batch: &[u8], ends: &[(Seq, usize)]) -> io::Result<()> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let inner = &mut *inner;
        let result = match &mut inner.order {
            Order::Completion => inner.stream.write_all_vectored(&mut [IoSlice::new(batch)]),
            Order::Request { next, held } => {
                let mut parts = Vec::with_capacity(ends.len());
                let mut released = Vec::new();
                let mut start = 0;
                for &(seq, end) in ends {
                    if seq == *next {
                        parts.push(Part::Batch(start, end));
                        *next += 1;
                        while let Some(v) = held.remove(next) {
                            parts.push(Part::Held(released.len()));
                            released.push(v);
                            *next += 1;
                        }
                    } else {
                        held.insert(seq, batch[start..end].to_vec());
                    }
                    start = end;
                }
                let mut slices: Vec<IoSlice<'_>> = parts
                    .iter()
                    .map(|p| match *p {
                        Part::Batch(s, e) => IoSlice::new(&batch[s..e]),
                        Part::Held(i) => IoSlice::new(&released[i]),
                    })
                    .collect();
                inner.stream.write_all_vectored(&mut slices)
            }
        };
        if result.is_err() {
            inner.broken = true;
        }
        result
    }

    /// Sends one reply finished by an I/O worker.
    pub(crate) fn send_owned(&self, seq: Seq, reply: Vec<u8>) -> io::Result<()> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let inner = &mut *inner;
        let result = match &mut inner.order {
            Order::Completion => inner.stream.write_all_vectored(&mut [IoSlice::new(&reply)]),
            Order::Request { next, held } => {
                if seq != *next {
                    held.insert(seq, reply);
                    return Ok(());
                }
                let mut ready = vec![reply];
                *next += 1;
                while let Some(v) = held.remove(next) {
                    ready.push(v);
                    *next += 1;
                }
                let mut slices: Vec<IoSlice<'_>> = ready.iter().map(|v| IoSlice::new(v)).collect();
                inner.stream.write_all_vectored(&mut slices)
            }
        };
        if result.is_err() {
            inner.broken = true;
        }
        result
    }
}
