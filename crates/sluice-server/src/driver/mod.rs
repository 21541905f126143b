//! The protocol-neutral connection driver: everything a connection does
//! that is not one protocol's business.
//!
//! Threading model (see docs/design/0001-threading-model.md): each
//! connection has its own OS thread with a blocking socket. The thread
//! receives as many requests as one `read` returns ([`receive`]: polling,
//! coalescing with `SO_RCVLOWAT`, idle/stall/stop deadlines), executes
//! those the device can serve without blocking right there, and sends all
//! their replies with one write ([`dispatch`]: placement from the
//! device's [`BlockingClass`], in-flight limits, sequence numbers, reply
//! batching). Requests that would block go to the shared I/O pool, whose
//! worker sends the reply itself through the connection's
//! [`ReplySink`](sink::ReplySink).
//!
//! A protocol plugs in as a [`Protocol`] (framing and validation on the
//! connection thread) and an [`Execute`] (running one request anywhere);
//! docs/design/0002-connection-driver.md explains the split. The driver
//! is generic over both, so each protocol gets its own monomorphised
//! loop: no dynamic dispatch, allocation or lock per request beyond what
//! the work itself needs. Before that, its handshake plugs in as a
//! [`SessionHandshake`]: [`handshake`] holds the one loop that runs
//! either protocol's sans-IO machine over the socket, STARTTLS included.

pub(crate) mod coalesce;
mod dispatch;
mod handshake;
pub(crate) mod payload_pipe;
pub(crate) mod pool;
mod receive;
pub(crate) mod sink;
pub(crate) mod spin;
#[cfg(test)]
mod tests;

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_storage::BlockingClass;
use tracing::{error, info};

pub(crate) use dispatch::{Dispatch, Placement, PoolJob};
pub(crate) use handshake::{
    handshake_outcome, run_handshake, Handled, HandshakeFailure, HandshakeStep, SessionHandshake,
};
pub(crate) use receive::PayloadIo;

use crate::buffer::{RecvBuf, ReplyBuf};
use crate::config::{Limits, PipelineMode, ReceiveTuning, Timeouts};
use crate::metrics::ServerMetrics;
use crate::stop::StopSignal;
use crate::stream::Stream;
use pool::IoPool;
use receive::{Received, Receiver};
use sink::ReplySink;

/// Receive buffer once requests with payloads arrive (idle and read-only
/// connections keep the small buffer their handshake used); grows to the
/// largest message received.
const RECV_BUF: usize = 256 * 1024;
/// Buffers are shrunk back to this after serving a huge request.
const IDLE_BUF: usize = 1 << 20;
/// Replies queued on the connection thread are sent once they exceed this,
/// so the client can work on big reads while later ones are read, and a
/// reply never waits for more than a few others: 64 KiB takes 0.65 ms to
/// cross an 800 Mbit/s link, while one more system call per 64 KiB costs
/// about a microsecond. (At 256 KiB, eight 32 KiB list reads that
/// arrived together left only once the last was read, which put the
/// server's time for all eight before the link's first byte.)
const BATCH_LIMIT: usize = 64 * 1024;

/// What a connection needs from the server, whatever protocol it speaks.
/// The configuration groups are passed whole.
#[derive(Debug)]
pub(crate) struct DriverEnv {
    pub(crate) pool: Arc<IoPool>,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// Set when the server is stopping.
    pub(crate) stop: Arc<StopSignal>,
    /// CPUs available; polling stops when connections outnumber them.
    pub(crate) cpus: usize,
    pub(crate) pipeline: PipelineMode,
    pub(crate) timeouts: Timeouts,
    pub(crate) receive: ReceiveTuning,
    pub(crate) limits: Limits,
}

/// The protocol a listener speaks: serves each connection accepted on it
/// (handshake, then usually [`serve`]). Called once per connection.
pub(crate) trait ConnectionHandler: Send + Sync + 'static {
    /// The protocol's name in metrics ("nbd", "obj").
    fn protocol(&self) -> &'static str;
    fn serve(&self, stream: Stream, env: &DriverEnv);
}

/// One message's place at the start of the receive buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame<H> {
    /// What the protocol decoded of its header.
    pub(crate) head: H,
    /// Bytes of header; the payload follows.
    pub(crate) header_len: usize,
    /// Bytes of the whole message, header and payload.
    pub(crate) len: usize,
}

/// What [`Protocol::decode`] found at the start of the receive buffer.
#[derive(Debug)]
pub(crate) enum Decoded<H> {
    /// A whole message.
    Complete(Frame<H>),
    /// A header whose payload has not all arrived.
    Partial(Frame<H>),
    /// Not even a header: at least this many bytes in all are needed.
    NeedHeader(usize),
}

/// A message that breaks the protocol (the connection is closed).
#[derive(Debug)]
pub(crate) struct ProtocolViolation(pub(crate) String);

/// What became of a complete message (see [`Protocol::start`]).
pub(crate) enum Start<R> {
    /// A request to run.
    Run(R),
    /// Answered already (e.g. rejected) through [`Dispatch::answer`].
    Answered,
    /// The client asked to close the connection.
    Close,
}

/// What a payload still arriving became (see [`Protocol::receive_rest`]).
pub(crate) enum Taken {
    /// Received, executed and answered; its bytes are consumed.
    Done,
    /// Not taken: the driver goes on receiving it into the buffer.
    No,
    /// The client closed the connection mid-payload.
    Eof,
}

/// How a request may wait for its device, which with the device's
/// [`BlockingClass`] decides where it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Served from memory or the page cache (writes, trims): never waits
    /// on a device that only blocks on cache misses.
    Buffered,
    /// Reads: wait only when the page cache misses.
    Read,
    /// Waits for stable storage (FUA).
    Durable,
    /// Makes earlier writes durable (flush): waits only when something
    /// is left to sync, so it is first tried without waiting.
    Flush,
}

/// How [`Execute::execute`] ended.
pub(crate) enum Outcome {
    /// The reply (success or error) is in the output buffer.
    Done { failed: bool },
    /// With `nowait`: the request would block; nothing was appended.
    WouldBlock,
}

/// One protocol's side of a connection after its handshake: framing and
/// validation, on the connection thread. See
/// docs/design/0002-connection-driver.md.
pub(crate) trait Protocol {
    /// A decoded header (owning no buffer bytes).
    type Head;
    /// A validated request, ready to run on any thread.
    type Request: Send + 'static;
    /// Runs requests; shared with the I/O pool.
    type Executor: Execute<Request = Self::Request>;

    /// For logs: the protocol's name.
    const NAME: &'static str;

    /// The next message at the start of `data`, without consuming it.
    fn decode(&mut self, data: &[u8]) -> Result<Decoded<Self::Head>, ProtocolViolation>;

    /// Validates a complete message; `payload` is its bytes after the
    /// header, borrowed from the receive buffer. A message answered at
    /// once (a rejected request) is answered through `d`; one that
    /// carries several requests (a batch frame) runs them through
    /// [`Dispatch::run`] and says `Answered`.
    fn start(
        &mut self,
        head: &Self::Head,
        payload: &[u8],
        received: Instant,
        d: &mut Dispatch,
    ) -> Start<Self::Request>;

    /// What runs this session's requests.
    fn executor(&self) -> &Arc<Self::Executor>;

    /// Hook for a message whose payload is still arriving: may take the
    /// rest of it straight from the socket (NBD splices large writes into
    /// the file). The default leaves it to the receive buffer.
    fn receive_rest(
        &mut self,
        frame: &Frame<Self::Head>,
        io: &mut PayloadIo<'_>,
        d: &mut Dispatch,
    ) -> Result<Taken, DriverError> {
        let _ = (frame, io, d);
        Ok(Taken::No)
    }

    /// Hook to answer a request some other way than by running it where
    /// `placement` says (NBD: reads sent from a file mapping, reads
    /// answered piece by piece). Returns whether it answered. The default
    /// never does.
    fn dispatch(
        &mut self,
        request: &Self::Request,
        seq: sink::Seq,
        placement: Placement,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        let _ = (request, seq, placement, received, d);
        false
    }
}

/// Runs one protocol's requests against its device and encodes their
/// replies; called on the connection thread or an I/O worker.
pub(crate) trait Execute: Send + Sync + 'static {
    type Request: Send + 'static;

    /// Whether the device can block (read once per request).
    fn blocking(&self) -> BlockingClass;

    /// How the request may wait for the device.
    fn access(&self, request: &Self::Request) -> Access;

    /// Bytes the request holds while in flight (payload or reply data),
    /// for the connection's in-flight limit.
    fn in_flight_bytes(&self, request: &Self::Request) -> u64;

    /// Runs the request and appends its complete reply to `out`. With
    /// `nowait`, a request that would block appends nothing and returns
    /// [`Outcome::WouldBlock`].
    fn execute(
        &self,
        request: &Self::Request,
        payload: &[u8],
        nowait: bool,
        out: &mut ReplyBuf,
    ) -> Outcome;

    /// Records a finished request (metrics); `latency` runs from receipt
    /// to reply.
    fn completed(&self, request: &Self::Request, failed: bool, latency: Duration);
}

/// Why a connection ended early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DriverError {
    #[error("socket error")]
    Io(#[from] io::Error),
    #[error("protocol violation, disconnecting: {0}")]
    Protocol(String),
    #[error("client sent part of a request and then nothing for {0:?}; disconnecting")]
    Stalled(Duration),
}

/// How a connection ended normally.
enum End {
    /// The protocol's close request.
    Closed,
    Eof,
    Shutdown,
    /// Nothing in flight and nothing received for the idle timeout.
    Idle(Duration),
}

/// Serves a connection whose handshake is done until the client leaves,
/// the server stops, or the protocol breaks; `buf` holds what arrived
/// after the handshake. Never panics on client input.
pub(crate) fn serve<P: Protocol>(
    mut stream: Stream,
    mut buf: RecvBuf,
    protocol: P,
    env: &DriverEnv,
) {
    let started = Instant::now();
    if let Err(e) = stream.set_send_timeout(env.timeouts.send()) {
        error!(error = %e, "cannot set the send timeout on the client socket");
        return;
    }
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => {
            error!(error = %e, "cannot clone the client socket");
            return;
        }
    };
    let sink = Arc::new(ReplySink::new(
        writer,
        env.pipeline == PipelineMode::Fixed,
        env.timeouts.send(),
    ));
    let mut connection = Connection {
        protocol,
        receiver: Receiver::new(env),
        dispatch: Dispatch::new(env, sink),
        requests: 0,
        bytes: 0,
        data_bytes: 0,
    };
    if connection.receiver.coalesces() {
        // Coalescing waits are tens of microseconds; the default 50 us
        // timer slack would double them.
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1_000));
    }
    let end = connection.run(&mut stream, &mut buf);
    connection.dispatch.wait_idle();
    stream.close();
    // The one line operators look for when a client goes away.
    let (requests, bytes) = (connection.requests, connection.bytes);
    let duration = started.elapsed();
    let data_bytes = connection.data_bytes;
    let reason = match &end {
        Ok(End::Closed) => "the client asked to close".to_owned(),
        Ok(End::Eof) => "the client closed the connection".to_owned(),
        Ok(End::Shutdown) => "the server is stopping".to_owned(),
        Ok(End::Idle(d)) => {
            format!("nothing in flight and nothing received for the idle timeout ({d:?})")
        }
        Err(_) => "error".to_owned(),
    };
    match &end {
        Err(e) => info!(
            protocol = P::NAME, requests, bytes_received = bytes, data_bytes, ?duration, %reason,
            error = e as &dyn std::error::Error,
            "connection closed"
        ),
        Ok(_) => info!(
            protocol = P::NAME, requests, bytes_received = bytes, data_bytes, ?duration, %reason,
            "connection closed"
        ),
    }
}

/// One connection in transmission: the receiving half, the dispatching
/// half and the protocol between them.
struct Connection<P> {
    protocol: P,
    receiver: Receiver,
    dispatch: Dispatch,
    /// Requests received, for the log line at the end.
    requests: u64,
    /// Bytes received in requests (headers and payloads).
    bytes: u64,
    /// Bytes the requests read or wrote (their data, either way).
    data_bytes: u64,
}

impl<P: Protocol> Connection<P> {
    fn run(&mut self, stream: &mut Stream, buf: &mut RecvBuf) -> Result<End, DriverError> {
        loop {
            if let Some(end) = self.handle_received(stream, buf)? {
                return Ok(end);
            }
            self.dispatch.flush()?;
            buf.relax(IDLE_BUF);
            self.dispatch.wait_for_room();
            match self
                .receiver
                .receive(stream, buf, self.dispatch.in_flight())?
            {
                Received::Data => {}
                Received::Eof => return Ok(End::Eof),
                Received::Stop => return Ok(End::Shutdown),
                Received::Idle(d) => return Ok(End::Idle(d)),
            }
        }
    }

    /// Handles every complete message in `buf`; `Some` when the
    /// connection is to end.
    fn handle_received(
        &mut self,
        stream: &mut Stream,
        buf: &mut RecvBuf,
    ) -> Result<Option<End>, DriverError> {
        loop {
            let frame = match self.protocol.decode(buf.data()) {
                Ok(Decoded::Complete(frame)) => frame,
                Ok(Decoded::Partial(frame)) => {
                    let have = buf.data().len();
                    let mut io = PayloadIo::new(stream, buf, &mut self.receiver);
                    match self
                        .protocol
                        .receive_rest(&frame, &mut io, &mut self.dispatch)?
                    {
                        Taken::Done => {
                            self.receiver.payload_taken();
                            self.requests += 1;
                            self.bytes += frame.len as u64;
                            self.data_bytes += (frame.len - frame.header_len) as u64;
                            self.receiver.request_done(frame.len);
                            continue;
                        }
                        Taken::Eof => return Ok(Some(End::Eof)),
                        Taken::No => {}
                    }
                    // Room grows with what arrives (at most double it), so
                    // a client that announces a large message and stalls
                    // costs what it sent, not what it announced.
                    buf.reserve_message(RECV_BUF.max(frame.len.min(have.saturating_mul(2))));
                    return Ok(None);
                }
                Ok(Decoded::NeedHeader(n)) => {
                    buf.reserve_message(n);
                    return Ok(None);
                }
                Err(ProtocolViolation(e)) => {
                    // What was answered before the violation still goes
                    // out (best effort: the connection is closing anyway).
                    let _ = self.dispatch.flush();
                    return Err(DriverError::Protocol(e));
                }
            };
            let payload = &buf.data()[frame.header_len..frame.len];
            let close = self.handle(&frame.head, payload);
            self.requests += 1;
            self.bytes += frame.len as u64;
            self.receiver.request_done(frame.len);
            buf.consume(frame.len);
            if self.dispatch.is_broken() {
                return Err(io::Error::from(io::ErrorKind::BrokenPipe).into());
            }
            if close {
                self.dispatch.flush()?;
                return Ok(Some(End::Closed));
            }
            if self.dispatch.pipeline() == PipelineMode::Off
                || self.dispatch.queued() >= BATCH_LIMIT
            {
                self.dispatch.flush()?;
            }
        }
    }

    /// Handles one complete message; returns true when the client asked
    /// to close the connection.
    #[inline]
    fn handle(&mut self, head: &P::Head, payload: &[u8]) -> bool {
        let received = Instant::now();
        let request = match self
            .protocol
            .start(head, payload, received, &mut self.dispatch)
        {
            Start::Run(request) => request,
            Start::Answered => return false,
            Start::Close => return true,
        };
        let seq = self.dispatch.take_seq();
        let executor = self.protocol.executor();
        self.data_bytes += executor.in_flight_bytes(&request);
        let placement = self
            .dispatch
            .placement(executor.blocking(), executor.access(&request));
        if self
            .protocol
            .dispatch(&request, seq, placement, received, &mut self.dispatch)
        {
            return false;
        }
        let executor = self.protocol.executor();
        self.dispatch
            .run(executor, seq, request, payload, placement, received);
        false
    }
}
