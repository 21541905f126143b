//! The sending half of a connection, shared by the connection thread and
//! the I/O workers that finish its handed-off requests.
//!
//! One thread at a time holds the *sender* role and writes to the socket;
//! the lock that orders replies is never held across a `write`. A worker
//! that finishes while another thread is sending queues its reply here and
//! goes back to the pool, so a client that stops reading ties up at most
//! one pool worker (the sender), and only until the send timeout. Queued
//! replies keep their in-flight guard until they are on the wire, so the
//! connection's in-flight limit also bounds the bytes waiting here.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSlice};
use std::net::Shutdown;
use std::os::fd::BorrowedFd;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::driver::pool::InFlightGuard;
use crate::stream::Stream;

/// Sequence number of a request that gets a reply, in arrival order.
pub(crate) type Seq = u64;

/// A reply that waits for the socket or for earlier replies. Its guard
/// releases the request's in-flight slot once the reply is sent (or
/// dropped because the connection broke).
#[derive(Debug)]
struct Queued {
    bytes: Vec<u8>,
    _guard: Option<InFlightGuard>,
}

#[derive(Debug)]
enum Order {
    /// Replies leave as soon as they are ready.
    Completion,
    /// Replies leave in request order; early ones wait in `held`.
    Request {
        next: Seq,
        held: BTreeMap<Seq, Queued>,
    },
}

#[derive(Debug)]
struct State {
    order: Order,
    /// Replies ready to go, in order, while another thread sends.
    queue: VecDeque<Queued>,
    /// A thread holds the sender role (and will drain `queue`).
    sending: bool,
    /// Threads waiting in `send_batch` for the sender role.
    waiters: usize,
    broken: bool,
}

/// Serialises replies onto one socket, in completion or request order.
#[derive(Debug)]
pub(crate) struct ReplySink {
    state: Mutex<State>,
    /// Signalled when the sender role is released (only if `waiters`).
    released: Condvar,
    /// Locked only by the holder of the sender role, so never contended.
    stream: Mutex<Stream>,
    /// The socket's send timeout (for the log line when it expires).
    send_timeout: Option<Duration>,
    /// No TLS: replies may be sent from mapped file pages.
    plain: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

enum Part {
    Batch(usize, usize),
    Held(usize),
}

impl ReplySink {
    /// `stream` should already carry `send_timeout` as its socket send
    /// timeout (`Stream::set_send_timeout`).
    pub(crate) fn new(
        stream: Stream,
        in_request_order: bool,
        send_timeout: Option<Duration>,
    ) -> Self {
        let order = if in_request_order {
            Order::Request {
                next: 0,
                held: BTreeMap::new(),
            }
        } else {
            Order::Completion
        };
        Self {
            state: Mutex::new(State {
                order,
                queue: VecDeque::new(),
                sending: false,
                waiters: 0,
                broken: false,
            }),
            released: Condvar::new(),
            plain: stream.is_plain(),
            stream: Mutex::new(stream),
            send_timeout,
        }
    }

    /// Whether [`send_mapped`](Self::send_mapped) can be used (no TLS).
    pub(crate) fn is_plain(&self) -> bool {
        self.plain
    }

    /// Waits until no other thread sends, then takes the socket for a
    /// reply sent outside the batch (completion order only); `finish`
    /// gives it back.
    fn claim_send(&self) -> io::Result<()> {
        let mut st = lock(&self.state);
        while st.sending && !st.broken {
            st.waiters += 1;
            st = self.released.wait(st).unwrap_or_else(|p| p.into_inner());
            st.waiters -= 1;
        }
        if st.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        debug_assert!(matches!(st.order, Order::Completion));
        st.sending = true;
        Ok(())
    }

    /// Sends one read reply whose data the kernel copies straight from a
    /// shared file mapping (`data`, see `sluice_storage::MappedBytes`),
    /// after its `header`. For completion order only; the caller keeps
    /// the mapping alive for the call.
    pub(crate) fn send_mapped(&self, header: &[u8], data: libc::iovec) -> io::Result<()> {
        self.claim_send()?;
        let mut iov = [
            libc::iovec {
                iov_base: header.as_ptr().cast_mut().cast(),
                iov_len: header.len(),
            },
            data,
        ];
        let result = lock(&self.stream).write_all_raw_until(&mut iov, self.deadline());
        self.finish(result)
    }

    /// Sends one read reply whose data is several ranges of shared file
    /// mappings (`data`, in reply order), after its `header`: as
    /// [`send_mapped`](Self::send_mapped), one `writev` per 1,024 pieces.
    pub(crate) fn send_mapped_pieces(&self, header: &[u8], data: &[libc::iovec]) -> io::Result<()> {
        self.claim_send()?;
        let mut iov = Vec::with_capacity(data.len() + 1);
        iov.push(libc::iovec {
            iov_base: header.as_ptr().cast_mut().cast(),
            iov_len: header.len(),
        });
        iov.extend_from_slice(data);
        let result = lock(&self.stream).write_all_raw_until(&mut iov, self.deadline());
        self.finish(result)
    }

    /// Sends one read reply whose data the kernel takes straight from
    /// `file`'s page cache (`sendfile`: no copy in this process, and on
    /// a socket that takes pages none in the kernel either): `header`,
    /// then `len` bytes of `file` from `offset`, and zeros for any of
    /// them past the file's end (which read as zeros). For completion
    /// order and plain sockets only.
    pub(crate) fn send_file(
        &self,
        header: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        self.claim_send()?;
        let result = lock(&self.stream).send_file_until(header, file, offset, len, self.deadline());
        self.finish(result)
    }

    /// Sends replies built on the connection thread. `ends[i]` is the
    /// sequence number and end offset in `batch` of the i-th reply; the
    /// replies are contiguous from offset 0. Waits while another thread
    /// sends (the connection thread may block; pool workers never wait
    /// here).
    pub(crate) fn send_batch(&self, batch: &[u8], ends: &[(Seq, usize)]) -> io::Result<()> {
        let mut st = lock(&self.state);
        while st.sending && !st.broken {
            st.waiters += 1;
            st = self.released.wait(st).unwrap_or_else(|p| p.into_inner());
            st.waiters -= 1;
        }
        if st.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let state = &mut *st;
        match &mut state.order {
            Order::Completion => {
                state.sending = true;
                drop(st);
                let result =
                    lock(&self.stream).write_all_until(&mut [IoSlice::new(batch)], self.deadline());
                self.finish(result)
            }
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
                        held.insert(
                            seq,
                            Queued {
                                bytes: batch[start..end].to_vec(),
                                _guard: None,
                            },
                        );
                    }
                    start = end;
                }
                if parts.is_empty() {
                    return Ok(());
                }
                state.sending = true;
                drop(st);
                let mut slices: Vec<IoSlice<'_>> = parts
                    .iter()
                    .map(|p| match *p {
                        Part::Batch(s, e) => IoSlice::new(&batch[s..e]),
                        Part::Held(i) => IoSlice::new(&released[i].bytes),
                    })
                    .collect();
                let result = lock(&self.stream).write_all_until(&mut slices, self.deadline());
                drop(released);
                self.finish(result)
            }
        }
    }

    /// Sends one reply finished by an I/O worker, or queues it if another
    /// thread is sending (or, in request order, if earlier replies are
    /// missing). `guard` is released once the reply is on the wire.
    pub(crate) fn send_owned(
        &self,
        seq: Seq,
        reply: Vec<u8>,
        guard: Option<InFlightGuard>,
    ) -> io::Result<()> {
        let item = Queued {
            bytes: reply,
            _guard: guard,
        };
        let mut st = lock(&self.state);
        if st.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let state = &mut *st;
        match &mut state.order {
            Order::Completion => {
                if state.sending {
                    state.queue.push_back(item);
                    return Ok(());
                }
                state.sending = true;
                drop(st);
                let result = lock(&self.stream)
                    .write_all_until(&mut [IoSlice::new(&item.bytes)], self.deadline());
                drop(item);
                self.finish(result)
            }
            Order::Request { next, held } => {
                if seq != *next {
                    held.insert(seq, item);
                    return Ok(());
                }
                *next += 1;
                if state.sending {
                    state.queue.push_back(item);
                    while let Some(v) = held.remove(next) {
                        state.queue.push_back(v);
                        *next += 1;
                    }
                    return Ok(());
                }
                let mut ready = vec![item];
                while let Some(v) = held.remove(next) {
                    ready.push(v);
                    *next += 1;
                }
                state.sending = true;
                drop(st);
                let mut slices: Vec<IoSlice<'_>> =
                    ready.iter().map(|v| IoSlice::new(&v.bytes)).collect();
                let result = lock(&self.stream).write_all_until(&mut slices, self.deadline());
                drop(ready);
                self.finish(result)
            }
        }
    }

    /// When a send starting now must be done.
    fn deadline(&self) -> Option<Instant> {
        self.send_timeout.map(|d| Instant::now() + d)
    }

    /// Whether a send failed (the connection is being closed).
    pub(crate) fn is_broken(&self) -> bool {
        lock(&self.state).broken
    }

    /// Called by the sender after its own write: sends what others queued
    /// meanwhile, then gives up the sender role. On a send error the sink
    /// breaks: queued and held replies are dropped (releasing their
    /// in-flight slots) and the socket is shut down, so the connection
    /// thread wakes up and ends the connection.
    fn finish(&self, mut result: io::Result<()>) -> io::Result<()> {
        loop {
            let mut st = lock(&self.state);
            if let Err(e) = &result {
                st.sending = false;
                let dropped = self.break_locked(&mut st);
                drop(st);
                self.broke(e);
                drop(dropped);
                return result;
            }
            if st.queue.is_empty() {
                st.sending = false;
                if st.waiters > 0 {
                    self.released.notify_all();
                }
                return Ok(());
            }
            let batch: Vec<Queued> = st.queue.drain(..).collect();
            drop(st);
            let mut slices: Vec<IoSlice<'_>> =
                batch.iter().map(|v| IoSlice::new(&v.bytes)).collect();
            result = lock(&self.stream).write_all_until(&mut slices, self.deadline());
            drop(slices);
            drop(batch);
        }
    }

    /// Ends the connection now: replies still queued or held are
    /// dropped and the socket is shut down, so the client and the
    /// connection thread both see its end.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.state);
        let dropped = self.break_locked(&mut st);
        drop(st);
        drop(dropped);
        // Waits for a send in progress (bounded by the send timeout).
        let _ = lock(&self.stream).shutdown(Shutdown::Both);
    }

    /// Marks the sink broken and wakes its waiters; returns the queued
    /// and held replies, for the caller to drop (releasing their
    /// in-flight slots) once the state's lock is released.
    fn break_locked(&self, st: &mut State) -> (VecDeque<Queued>, BTreeMap<Seq, Queued>) {
        st.broken = true;
        let queued = std::mem::take(&mut st.queue);
        let held = match &mut st.order {
            Order::Request { held, .. } => std::mem::take(held),
            Order::Completion => BTreeMap::new(),
        };
        if st.waiters > 0 {
            self.released.notify_all();
        }
        (queued, held)
    }

    fn broke(&self, e: &io::Error) {
        let stream = lock(&self.stream);
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            warn!(
                timeout = ?self.send_timeout,
                "client has not read its replies within the send timeout; closing the connection"
            );
        } else {
            debug!(error = %e, "sending a reply failed; closing the connection");
        }
        // Wakes the connection thread (its receive sees the end) and any
        // other thread still using the socket.
        let _ = stream.shutdown(Shutdown::Both);
    }
}
