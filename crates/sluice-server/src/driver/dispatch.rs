//! Dispatch: where each request runs (placement), in-flight limits, the
//! hand-off to the I/O pool, sequence numbers and the batch of replies
//! built on the connection thread.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use sluice_storage::BlockingClass;
use tracing::debug;

use super::pool::{InFlight, InFlightGuard, IoPool, SendTracker};
use super::sink::{ReplySink, Seq};
use super::{Access, DriverEnv, Execute, Outcome, IDLE_BUF};
use crate::buffer::ReplyBuf;
use crate::config::PipelineMode;
use crate::metrics::{ServerMetrics, Stage};

/// Most handed-off requests in flight per connection.
const MAX_INFLIGHT_REQUESTS: usize = 256;

/// Where a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// On the connection thread, blocking if it must.
    Inline,
    /// On the connection thread if it would not block, else handed off.
    TryInline,
    /// On the I/O pool.
    HandOff,
}

/// The dispatching half of a connection, lent to the protocol's hooks.
pub(crate) struct Dispatch {
    sink: Arc<ReplySink>,
    pool: Arc<IoPool>,
    inflight: Arc<InFlight>,
    metrics: Arc<ServerMetrics>,
    pipeline: PipelineMode,
    max_inflight_bytes: u64,
    /// Replies produced on this thread and not yet sent.
    batch: ReplyBuf,
    /// (sequence number, end offset in `batch`) of each queued reply.
    ends: Vec<(Seq, usize)>,
    next_seq: Seq,
    /// A reply could not be sent: stop handling requests.
    broken: bool,
}

impl Dispatch {
    pub(super) fn new(env: &DriverEnv, sink: Arc<ReplySink>) -> Self {
        Self {
            sink,
            pool: Arc::clone(&env.pool),
            inflight: Arc::new(InFlight::default()),
            metrics: Arc::clone(&env.metrics),
            pipeline: env.pipeline,
            max_inflight_bytes: env.limits.max_inflight_bytes_per_connection,
            batch: ReplyBuf::with_capacity(64 * 1024),
            ends: Vec::with_capacity(64),
            next_seq: 0,
            broken: false,
        }
    }

    /// The connection's pipelining mode.
    #[inline]
    pub(crate) fn pipeline(&self) -> PipelineMode {
        self.pipeline
    }

    /// Replies may be sent from memory Rust does not own (no TLS).
    #[inline]
    pub(crate) fn is_plain(&self) -> bool {
        self.sink.is_plain()
    }

    /// Whether a write's payload may be spliced from the socket and
    /// answered on the connection thread: a plain socket (the bytes on
    /// the wire are the payload's) and replies in completion order.
    #[inline]
    pub(crate) fn splices_payloads(&self) -> bool {
        self.pipeline == PipelineMode::Flexible && self.is_plain()
    }

    /// Where a request of `access` to a device of `class` runs.
    #[inline]
    pub(crate) fn placement(&self, class: BlockingClass, access: Access) -> Placement {
        if self.pipeline == PipelineMode::Off {
            return Placement::Inline;
        }
        match (class, access) {
            (BlockingClass::Never, _) => Placement::Inline,
            // A flush with nothing to sync answers at once (no hand-off,
            // no wake-up); one that must wait is handed off.
            (_, Access::Flush) => Placement::TryInline,
            (BlockingClass::Always, _) => Placement::HandOff,
            (BlockingClass::PageCache, Access::Read) => Placement::TryInline,
            (BlockingClass::PageCache, Access::Durable) => Placement::HandOff,
            (BlockingClass::PageCache, Access::Buffered) => Placement::Inline,
        }
    }

    /// The server-wide metrics.
    pub(crate) fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }

    /// Bytes of handed-off requests a connection may have in flight.
    pub(crate) fn max_inflight_bytes(&self) -> u64 {
        self.max_inflight_bytes
    }

    /// The next request's sequence number (arrival order).
    #[inline]
    pub(crate) fn take_seq(&mut self) -> Seq {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Answers a request at once: takes its sequence number and queues
    /// the reply `encode` appends.
    pub(crate) fn answer(&mut self, encode: impl FnOnce(&mut ReplyBuf)) {
        let seq = self.take_seq();
        encode(&mut self.batch);
        self.ends.push((seq, self.batch.len()));
    }

    /// The queued replies, to append to. Mark each reply's end with
    /// [`end_reply`](Self::end_reply).
    #[inline]
    pub(crate) fn batch(&mut self) -> &mut ReplyBuf {
        &mut self.batch
    }

    /// Marks the end of `seq`'s reply (or of one part of it) in the batch.
    #[inline]
    pub(crate) fn end_reply(&mut self, seq: Seq) {
        self.ends.push((seq, self.batch.len()));
    }

    /// Bytes of replies queued on this thread.
    #[inline]
    pub(super) fn queued(&self) -> usize {
        self.batch.len()
    }

    pub(super) fn is_broken(&self) -> bool {
        self.broken
    }

    pub(super) fn in_flight(&self) -> &InFlight {
        &self.inflight
    }

    /// Waits while the connection is at its in-flight limit.
    pub(super) fn wait_for_room(&self) {
        self.inflight
            .wait_below(MAX_INFLIGHT_REQUESTS, self.max_inflight_bytes);
    }

    /// Waits until every handed-off request has been answered.
    pub(super) fn wait_idle(&self) {
        self.inflight.wait_idle();
    }

    /// Sends the queued replies.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.sink.send_batch(self.batch.as_slice(), &self.ends);
        self.metrics.add_busy(Stage::Send, started.elapsed());
        self.batch.clear();
        self.ends.clear();
        self.batch.relax(IDLE_BUF);
        result
    }

    /// Sends one reply whose data the kernel copies from memory Rust does
    /// not own (see [`ReplySink::send_mapped`]), after the queued ones.
    /// Completion order only.
    pub(crate) fn send_mapped(&mut self, header: &[u8], data: libc::iovec) -> io::Result<()> {
        // A send error resurfaces below (the sink is broken) and on the
        // next batch.
        let _ = self.flush();
        let started = Instant::now();
        let result = self.sink.send_mapped(header, data);
        self.metrics.add_busy(Stage::Send, started.elapsed());
        result
    }

    /// Sends one reply whose data is several ranges of shared file
    /// mappings (see [`ReplySink::send_mapped_pieces`]), after the queued
    /// ones. Completion order only.
    pub(crate) fn send_mapped_pieces(
        &mut self,
        header: &[u8],
        data: &[libc::iovec],
    ) -> io::Result<()> {
        // A send error resurfaces below (the sink is broken) and on the
        // next batch.
        let _ = self.flush();
        let started = Instant::now();
        let result = self.sink.send_mapped_pieces(header, data);
        self.metrics.add_busy(Stage::Send, started.elapsed());
        result
    }

    /// Sends one reply whose data the kernel takes from a file (see
    /// [`ReplySink::send_file`]), after the queued ones. Completion
    /// order only.
    pub(crate) fn send_file(
        &mut self,
        header: &[u8],
        file: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        // A send error resurfaces below (the sink is broken) and on the
        // next batch.
        let _ = self.flush();
        let started = Instant::now();
        let result = self.sink.send_file(header, file, offset, len);
        self.metrics.add_busy(Stage::Send, started.elapsed());
        result
    }

    /// Runs a request where `placement` says: on this thread, its reply
    /// queued in the batch, or on the pool.
    #[inline]
    pub(crate) fn run<E: Execute>(
        &mut self,
        executor: &Arc<E>,
        seq: Seq,
        request: E::Request,
        payload: &[u8],
        placement: Placement,
        received: Instant,
    ) {
        if placement != Placement::HandOff {
            let start = self.batch.len();
            let nowait = placement == Placement::TryInline;
            match executor.execute(&request, payload, nowait, &mut self.batch) {
                Outcome::Done { failed } => {
                    self.ends.push((seq, self.batch.len()));
                    let done = Instant::now();
                    self.metrics.add_busy(Stage::ExecuteInline, done - received);
                    executor.completed(&request, failed, done - received);
                    return;
                }
                Outcome::WouldBlock => self.batch.truncate(start),
            }
        }
        self.hand_off(executor, seq, request, payload, received);
    }

    /// Runs a request on the I/O pool; the worker sends its reply.
    fn hand_off<E: Execute>(
        &mut self,
        executor: &Arc<E>,
        seq: Seq,
        request: E::Request,
        payload: &[u8],
        received: Instant,
    ) {
        let bytes = executor.in_flight_bytes(&request);
        let payload = payload.to_vec();
        let executor = Arc::clone(executor);
        self.metrics.inflight.fetch_add(1, Ordering::Relaxed);
        self.spawn(bytes, move |mut job| {
            let started = Instant::now();
            let mut out = ReplyBuf::with_capacity(0);
            let failed = match executor.execute(&request, &payload, false, &mut out) {
                Outcome::Done { failed } => failed,
                Outcome::WouldBlock => true,
            };
            let executed = Instant::now();
            job.metrics.add_busy(Stage::ExecutePool, executed - started);
            // The in-flight slot goes with the reply: it is freed when the
            // reply is on the wire, not when it is queued.
            if let Err(e) = job.send(seq, out.into_vec()) {
                debug!(error = %e, "reply not sent: connection gone");
            }
            let sent = Instant::now();
            job.metrics.add_busy(Stage::Send, sent - executed);
            executor.completed(&request, failed, sent - received);
            job.metrics.inflight.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Runs `job` on the I/O pool as a request holding `bytes` in flight
    /// (first waiting while the connection is at its limit). The job
    /// sends what it produces through its [`PoolJob`].
    pub(crate) fn spawn(&mut self, bytes: u64, job: impl FnOnce(PoolJob) + Send + 'static) {
        self.admit(bytes);
        let context = PoolJob {
            guard: Some(InFlightGuard {
                inflight: Arc::clone(&self.inflight),
                bytes,
            }),
            sink: Arc::clone(&self.sink),
            metrics: Arc::clone(&self.metrics),
            sends: self.pool.send_tracker(),
        };
        let span = tracing::Span::current();
        self.metrics.handoffs.fetch_add(1, Ordering::Relaxed);
        self.pool.submit(move || {
            let _enter = span.enter();
            // A panicking job closed its connection and was counted (the
            // PoolJob's drop); the worker lives on for other connections.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(context))).is_err() {
                tracing::error!("a request on the I/O pool panicked (a bug); connection closed");
            }
        });
    }

    /// Counts a request of `bytes` as in flight, first waiting (with this
    /// thread's replies sent, since in request order a worker's reply may
    /// wait for them) while the connection is at its in-flight limit. Every
    /// request of one receive passes here, so a client that pipelines far
    /// past the limit is held to it.
    fn admit(&mut self, bytes: u64) {
        if self
            .inflight
            .try_add(bytes, MAX_INFLIGHT_REQUESTS, self.max_inflight_bytes)
        {
            return;
        }
        // A send error resurfaces on the next batch.
        let _ = self.flush();
        self.inflight
            .wait_below(MAX_INFLIGHT_REQUESTS, self.max_inflight_bytes);
        self.inflight.add(bytes);
        // Waiting ends early when the client stopped reading and the send
        // timed out: stop executing what it sent.
        self.broken = self.sink.is_broken();
    }
}

/// What a job on the I/O pool has of its connection.
pub(crate) struct PoolJob {
    /// The request's in-flight slot, until its first reply is sent.
    guard: Option<InFlightGuard>,
    sink: Arc<ReplySink>,
    pub(crate) metrics: Arc<ServerMetrics>,
    sends: SendTracker,
}

impl Drop for PoolJob {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The job's replies may never come: end the connection rather
            // than leave its client waiting.
            self.metrics.panics.fetch_add(1, Ordering::Relaxed);
            self.sink.close();
        }
    }
}

impl PoolJob {
    /// Sends (or queues) one reply, or part of one, for request `seq`. The
    /// first send carries the in-flight slot, released once it is on the
    /// wire. A client that does not read may hold this send until the
    /// send timeout: the pool starts a spare meanwhile.
    pub(crate) fn send(&mut self, seq: Seq, reply: Vec<u8>) -> io::Result<()> {
        let _sending = self.sends.sending();
        self.sink.send_owned(seq, reply, self.guard.take())
    }

    /// Sends (or queues) replies that are not the job's last: the
    /// in-flight slot stays with the job for the replies still to come.
    pub(crate) fn send_early(&mut self, seq: Seq, reply: Vec<u8>) -> io::Result<()> {
        let _sending = self.sends.sending();
        self.sink.send_owned(seq, reply, None)
    }
}
