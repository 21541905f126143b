//! One client connection: the handshake, then the transmission loop.
//!
//! Threading model (see docs/design/0001-threading-model.md): each
//! connection has its own OS thread with a blocking socket. The thread
//! receives as many requests as one `read` returns, executes those the
//! device can serve without blocking (memory, page-cache hits, buffered
//! writes) right there, and sends all their replies with one write.
//! Requests that would block (page-cache misses, O_DIRECT, FUA, flush)
//! go to the shared I/O pool, whose worker sends the reply itself, so
//! device I/O runs in parallel and replies leave in completion order.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use sluice_nbd_proto::consts::{REPLY_FLAG_DONE, REPLY_TYPE_NONE, STATE_HOLE, STATE_ZERO};
use sluice_nbd_proto::{
    encode_block_status, encode_chunk_header, encode_error, encode_error_offset, encode_ok,
    encode_read_data_header, read_data_header_len, Command, Extent, HandshakeConfig,
    HandshakeStatus, NbdErrno, Negotiated, ReplyStyle, RequestHeader, ServerHandshake, TlsPolicy,
    TransmissionParams,
};
use sluice_storage::{BlockingClass, DeviceError, IoOp, ZeroMode};
use tracing::{debug, error, info, trace, warn};

use crate::buffer::{RecvBuf, ReplyBuf};
use crate::coalesce::CoalescePolicy;
use crate::config::PipelineMode;
use crate::export::{Export, ExportRegistry};
use crate::metrics::{CommandKind, ServerMetrics, Stage};
use crate::payload_pipe::PayloadPipe;
use crate::pool::{InFlight, InFlightGuard, IoPool};
use crate::sink::{ReplySink, Seq};
use crate::spin::SpinPolicy;
use crate::stop::{wait_readable, Readiness, StopSignal};
use crate::stream::Stream;
use crate::tls::{
    AccessPolicy, PeerIdentity, SessionCatalog, TlsAcceptor, TlsHandshakeError, TlsStream,
};

/// Receive buffer once requests with payloads arrive (idle and read-only
/// connections keep the 4 KiB handshake buffer); grows to the largest
/// message received.
const RECV_BUF: usize = 256 * 1024;
/// Buffers are shrunk back to this after serving a huge request.
const IDLE_BUF: usize = 1 << 20;
/// Replies queued on the connection thread are sent once they exceed this,
/// so the client can work on big reads while later ones are read.
const BATCH_LIMIT: usize = 256 * 1024;
/// Most handed-off requests in flight per connection.
const MAX_INFLIGHT_REQUESTS: usize = 256;
/// Most extents in one block status reply.
const MAX_EXTENTS: usize = 1024;
/// Reads longer than this are answered piece by piece (pipelined reads).
const READ_PIECE: u32 = 256 * 1024;
/// Writes at least this long have their payload spliced into the file
/// when they can be (`--spliced-writes`).
const SPLICED_WRITE_MIN: u64 = 128 * 1024;

/// Reads at least this long are sent from the file's mapping when they
/// can be (`--mapped-reads`); shorter ones are cheaper batched.
const MAPPED_READ_MIN: u32 = 128 * 1024;

/// What a connection needs from the server.
#[derive(Debug)]
pub(crate) struct ConnectionContext {
    pub(crate) registry: Arc<ExportRegistry>,
    pub(crate) pool: Arc<IoPool>,
    pub(crate) pipeline: PipelineMode,
    pub(crate) handshake_timeout: std::time::Duration,
    pub(crate) max_inflight_bytes: u64,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// Poll window before blocking on a receive (zero: never poll).
    pub(crate) spin: std::time::Duration,
    /// Most requests to let pile up before waking (1: no coalescing).
    pub(crate) coalesce_max: u32,
    /// Longest wait for a batch of requests to fill.
    pub(crate) coalesce_wait: std::time::Duration,
    /// CPUs available; polling stops when connections outnumber them.
    pub(crate) cpus: usize,
    /// Set when the server is stopping.
    pub(crate) stop: Arc<StopSignal>,
    /// Answer large reads piece by piece as parts become ready.
    pub(crate) pipelined_reads: bool,
    /// Send large page-cache reads from the file's shared mapping.
    pub(crate) mapped_reads: bool,
    /// Splice large write payloads from the socket into the file.
    pub(crate) spliced_writes: bool,
    /// The handshake's TLS mode (off unless credentials are loaded).
    pub(crate) tls_policy: TlsPolicy,
    /// TLS credentials, when TLS is on.
    pub(crate) tls: Option<Arc<TlsAcceptor>>,
    /// Which client identities may use which exports.
    pub(crate) access: Arc<AccessPolicy>,
    /// A send that makes no progress for this long closes the connection.
    pub(crate) send_timeout: Option<std::time::Duration>,
    /// A connection with nothing in flight and nothing received for this
    /// long is closed.
    pub(crate) idle_timeout: Option<std::time::Duration>,
}

/// The NBD error a device error becomes on the wire. The one place this
/// mapping lives.
pub(crate) fn nbd_errno(e: &DeviceError) -> NbdErrno {
    match e {
        DeviceError::ReadOnly { .. } => NbdErrno::Perm,
        DeviceError::OutOfRange { .. } => NbdErrno::Inval,
        DeviceError::Unsupported { .. } => NbdErrno::NotSup,
        e if e.is_no_space() => NbdErrno::NoSpc,
        _ => NbdErrno::Io,
    }
}

/// Serves one connection until the client leaves, the server stops, or the
/// protocol breaks. Never panics on client input.
pub(crate) fn serve_connection(mut stream: Stream, ctx: &ConnectionContext) {
    let mut buf = RecvBuf::new(4096);
    let negotiated = match handshake(&mut stream, &mut buf, ctx) {
        Ok(Some(n)) => n,
        Ok(None) => {
            debug!("client left during the handshake");
            stream.close();
            return;
        }
        Err(e) => {
            ctx.metrics
                .handshakes_failed
                .fetch_add(1, Ordering::Relaxed);
            info!(error = %e, "handshake failed; closing connection");
            return;
        }
    };
    let Some(export) = ctx.registry.get(&negotiated.export.name).cloned() else {
        warn!(export = %negotiated.export.name, "export vanished after the handshake");
        return;
    };
    tracing::Span::current().record("export", export.name.as_str());
    info!(
        export = %export.name,
        reply_style = ?negotiated.params.reply_style,
        "transmission phase started"
    );
    if let Err(e) = stream.set_send_timeout(ctx.send_timeout) {
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
    let mut t = Transmission {
        pipelined_reads: ctx.pipelined_reads,
        mapped_reads: ctx.mapped_reads,
        mapped_header: Vec::with_capacity(64),
        spliced_writes: ctx.spliced_writes,
        payload_pipe: None,
        stop: Arc::clone(&ctx.stop),
        spin: SpinPolicy::new(ctx.spin),
        coalesce: CoalescePolicy::new(ctx.coalesce_max, ctx.coalesce_wait),
        low_water: 1,
        cpus: ctx.cpus,
        server_metrics: Arc::clone(&ctx.metrics),
        sink: Arc::new(ReplySink::new(
            writer,
            ctx.pipeline == PipelineMode::Fixed,
            ctx.send_timeout,
        )),
        broken: false,
        idle_timeout: ctx.idle_timeout,
        // A request whose first bytes arrived is not idle: with no idle
        // timeout it gets the send timeout (a peer that stops halfway
        // through a transfer, in either direction).
        stall_timeout: ctx.idle_timeout.or(ctx.send_timeout),
        params: negotiated.params,
        context_id: negotiated.base_allocation_id,
        export,
        pool: Arc::clone(&ctx.pool),
        inflight: Arc::new(InFlight::default()),
        pipeline: ctx.pipeline,
        max_inflight_bytes: ctx.max_inflight_bytes,
        batch: ReplyBuf::with_capacity(64 * 1024),
        ends: Vec::with_capacity(64),
        next_seq: 0,
    };
    if t.coalesce.enabled() {
        // Coalescing waits are tens of microseconds; the default 50 us
        // timer slack would double them.
        let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1_000));
    }
    match t.run(&mut stream, &mut buf) {
        Ok(End::Disconnect) => debug!("client disconnected (NBD_CMD_DISC)"),
        Ok(End::Idle(d)) => info!(
            idle_timeout = ?d,
            "connection idle (nothing in flight, nothing received) for the idle timeout; closing it"
        ),
        Ok(End::Eof) => debug!("client closed the connection"),
        Ok(End::Shutdown) => debug!("server stopping: connection closed after its requests"),
        Err(e) => info!(error = %e, "connection ended"),
    }
    t.inflight.wait_idle();
    stream.close();
}

#[derive(Debug, thiserror::Error)]
enum HandshakeFailure {
    #[error("socket error during the handshake: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Protocol(#[from] sluice_nbd_proto::HandshakeError),
    #[error("client did not finish the handshake within {0:?}")]
    TimedOut(std::time::Duration),
    #[error(transparent)]
    Tls(#[from] TlsHandshakeError),
    #[error("internal error: STARTTLS accepted without TLS credentials")]
    NoTlsCredentials,
}

fn handshake(
    stream: &mut Stream,
    buf: &mut RecvBuf,
    ctx: &ConnectionContext,
) -> Result<Option<Negotiated>, HandshakeFailure> {
    let deadline = Instant::now() + ctx.handshake_timeout;
    let mut hs = ServerHandshake::new(HandshakeConfig {
        tls: ctx.tls_policy,
        ..HandshakeConfig::default()
    });
    let mut peer: Option<PeerIdentity> = None;
    loop {
        let out = hs.poll_output();
        if !out.is_empty() {
            stream.write_all(&out)?;
        }
        let catalog = SessionCatalog {
            registry: &ctx.registry,
            policy: &ctx.access,
            tls: hs.tls_active(),
            peer: peer.as_ref(),
        };
        let (used, status) = hs.handle_input(buf.data(), &catalog)?;
        buf.consume(used);
        match status {
            HandshakeStatus::NeedInput => {}
            HandshakeStatus::Aborted => {
                stream.write_all(&hs.poll_output())?;
                return Ok(None);
            }
            HandshakeStatus::Done(n) => {
                stream.write_all(&hs.poll_output())?;
                return Ok(Some(*n));
            }
            HandshakeStatus::StartTls => {
                // The ACK goes out in plaintext; whatever the client sent
                // after STARTTLS is the start of its TLS handshake.
                stream.write_all(&hs.poll_output())?;
                let acceptor = ctx
                    .tls
                    .as_deref()
                    .ok_or(HandshakeFailure::NoTlsCredentials)?;
                let accepted = TlsStream::accept(
                    stream.try_clone()?,
                    acceptor,
                    buf.data(),
                    &ctx.stop,
                    deadline,
                );
                let (tls, identity) = match accepted {
                    Ok(a) => a,
                    // Like a plaintext client still negotiating at shutdown.
                    Err(TlsHandshakeError::Stopped) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                buf.consume(buf.data().len());
                *stream = Stream::Tls(Box::new(tls));
                match &identity {
                    Some(id) => {
                        info!(client = %id.subject, "TLS started; client certificate verified")
                    }
                    None => info!("TLS started"),
                }
                peer = identity;
                continue;
            }
        }
        if used == 0 || buf.data().is_empty() {
            let out = hs.poll_output();
            if !out.is_empty() {
                stream.write_all(&out)?;
            }
            if stream.has_buffered_input() {
                if stream.try_fill(buf)? == Some(0) {
                    return Ok(None);
                }
                continue;
            }
            // A client still negotiating when the server stops is simply
            // closed: it has no requests in flight.
            let left = deadline.saturating_duration_since(Instant::now());
            match wait_readable(stream.fd(), Some(&ctx.stop), Some(left))? {
                Readiness::Readable => {
                    if stream.try_fill(buf)? == Some(0) {
                        return Ok(None);
                    }
                }
                Readiness::Stop => return Ok(None),
                Readiness::TimedOut => {
                    return Err(HandshakeFailure::TimedOut(ctx.handshake_timeout))
                }
            }
        }
    }
}

enum End {
    Disconnect,
    Eof,
    Shutdown,
    /// Nothing in flight and nothing received for the idle timeout.
    Idle(std::time::Duration),
}

/// What a receive brought.
enum Received {
    Data,
    Eof,
    Stop,
    Idle(std::time::Duration),
}

/// How long a connection waits, once the server is stopping, for the rest
/// of a request whose first bytes already arrived.
const STOP_PARTIAL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
enum TransmissionError {
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("protocol violation, disconnecting: {0}")]
    Protocol(String),
    #[error("client sent part of a request and then nothing for {0:?}; disconnecting")]
    Stalled(std::time::Duration),
}

struct Transmission {
    pipelined_reads: bool,
    mapped_reads: bool,
    /// Header of a read sent from a mapping (reused).
    mapped_header: Vec<u8>,
    /// Large write payloads may be spliced (until making the pipe fails).
    spliced_writes: bool,
    /// Made at the first spliced write.
    payload_pipe: Option<PayloadPipe>,
    stop: Arc<StopSignal>,
    spin: SpinPolicy,
    coalesce: CoalescePolicy,
    /// The socket's receive low-water mark as last set.
    low_water: usize,
    cpus: usize,
    sink: Arc<ReplySink>,
    server_metrics: Arc<ServerMetrics>,
    params: TransmissionParams,
    context_id: Option<u32>,
    export: Arc<Export>,
    pool: Arc<IoPool>,
    inflight: Arc<InFlight>,
    pipeline: PipelineMode,
    max_inflight_bytes: u64,
    /// A reply could not be sent: stop handling requests.
    broken: bool,
    /// Close when idle (nothing in flight, nothing received) this long.
    idle_timeout: Option<std::time::Duration>,
    /// Close when a partly received request gets no more bytes this long.
    stall_timeout: Option<std::time::Duration>,
    /// Replies produced on this thread and not yet sent.
    batch: ReplyBuf,
    /// (sequence number, end offset in `batch`) of each queued reply.
    ends: Vec<(Seq, usize)>,
    next_seq: Seq,
}

/// What became of a write offered to the splicing path.
enum Spliced {
    /// Written (or failed) and answered.
    Done,
    /// Not for splicing; the copying path goes on receiving it.
    NotTaken,
    /// The client closed the connection mid-payload; nothing was written.
    Eof,
}

/// Where a request runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// On the connection thread, blocking if it must.
    Inline,
    /// On the connection thread if it would not block, else handed off.
    TryInline,
    /// On the I/O pool.
    HandOff,
}

impl Transmission {
    fn run(&mut self, stream: &mut Stream, buf: &mut RecvBuf) -> Result<End, TransmissionError> {
        let style = self.params.header_style;
        let header_len = style.header_len();
        // The largest payload we accept; anything larger is a DoS attempt
        // or a broken client and gets a hard disconnect.
        let max_payload = u64::from(self.params.max_payload);
        loop {
            loop {
                let header = match RequestHeader::decode(buf.data(), style) {
                    Ok(Some(h)) => h,
                    Ok(None) => {
                        buf.reserve_message(header_len);
                        break;
                    }
                    Err(e) => return Err(TransmissionError::Protocol(e.to_string())),
                };
                let payload_len = header.payload_len(style);
                if payload_len > max_payload {
                    return Err(TransmissionError::Protocol(format!(
                        "request payload of {payload_len} bytes exceeds the maximum {max_payload}"
                    )));
                }
                let total = header_len + payload_len as usize;
                let have = buf.data().len();
                if have < total && payload_len >= SPLICED_WRITE_MIN {
                    match self.spliced_write(&header, header_len, stream, buf)? {
                        Spliced::Done => continue,
                        Spliced::Eof => return Ok(End::Eof),
                        Spliced::NotTaken => {}
                    }
                }
                if have < total {
                    // Room grows with what arrives (at most double it), so
                    // a client that announces a large write and stalls
                    // costs what it sent, not what it announced.
                    buf.reserve_message(RECV_BUF.max(total.min(have.saturating_mul(2))));
                    break;
                }
                let payload = &buf.data()[header_len..total];
                let disconnect = self.handle(&header, payload);
                self.coalesce.request(total);
                buf.consume(total);
                if self.broken {
                    return Err(io::Error::from(io::ErrorKind::BrokenPipe).into());
                }
                if disconnect {
                    self.flush_batch()?;
                    return Ok(End::Disconnect);
                }
                if self.pipeline == PipelineMode::Off || self.batch.len() >= BATCH_LIMIT {
                    self.flush_batch()?;
                }
            }
            self.flush_batch()?;
            buf.relax(IDLE_BUF);
            self.inflight
                .wait_below(MAX_INFLIGHT_REQUESTS, self.max_inflight_bytes);
            match self.receive(stream, buf)? {
                Received::Data => {}
                Received::Eof => return Ok(End::Eof),
                Received::Stop => return Ok(End::Shutdown),
                Received::Idle(d) => return Ok(End::Idle(d)),
            }
        }
    }

    /// Receives more requests: polls for a bounded window when the spin
    /// policy allows, then waits for the socket or the server's stop
    /// signal. A request whose bytes are partly here is finished even when
    /// the server is stopping (for up to [`STOP_PARTIAL_GRACE`]).
    fn receive(
        &mut self,
        stream: &mut Stream,
        buf: &mut RecvBuf,
    ) -> Result<Received, TransmissionError> {
        let batch = self.coalesce.batch();
        self.coalesce.tick(Instant::now());
        if batch != self.coalesce.batch() {
            debug!(
                from = batch,
                to = self.coalesce.batch(),
                rates = ?self.coalesce.rates(),
                "coalescing batch size changed"
            );
        }
        let coalescing = self.coalesce.low_water().is_some() && self.sink.is_plain();
        if coalescing && buf.data().is_empty() && !self.stop.is_set() {
            if let Some(received) = self.receive_batch(stream, buf)? {
                return Ok(received);
            }
        } else if self.low_water > 1 {
            self.set_low_water(stream, 1)?;
        }
        let active = self
            .server_metrics
            .connections_active
            .load(Ordering::Relaxed)
            .max(0) as usize;
        if !coalescing && self.spin.should_spin(active, self.cpus) && !self.stop.is_set() {
            let deadline = Instant::now() + self.spin.window();
            loop {
                match stream.try_fill(buf)? {
                    Some(0) => return Ok(Received::Eof),
                    Some(_) => {
                        self.spin.hit();
                        return Ok(Received::Data);
                    }
                    None => {}
                }
                if Instant::now() >= deadline {
                    self.spin.miss();
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let started = Instant::now();
        // Nothing was received since the last batch was handled (just
        // before this call), so both limits count from here.
        let mut idle_deadline = self.idle_timeout.map(|d| started + d);
        let stall_deadline = self.stall_timeout.map(|d| started + d);
        loop {
            if stream.has_buffered_input() {
                // TLS: decrypted or undecrypted bytes that poll cannot see.
                match stream.try_fill(buf)? {
                    Some(0) => return Ok(Received::Eof),
                    Some(_) => return Ok(Received::Data),
                    None => {}
                }
            }
            let partial = !buf.data().is_empty();
            let left = |deadline: Option<Instant>| {
                deadline.map(|d| d.saturating_duration_since(Instant::now()))
            };
            let (stop, timeout) = match (partial, self.stop.is_set()) {
                (false, _) => (Some(self.stop.as_ref()), left(idle_deadline)),
                (true, false) => (None, left(stall_deadline)),
                (true, true) => (None, Some(STOP_PARTIAL_GRACE)),
            };
            match wait_readable(stream.fd(), stop, timeout)? {
                Readiness::Readable => match stream.try_fill(buf)? {
                    Some(0) => return Ok(Received::Eof),
                    Some(_) => {
                        self.spin.blocked_for(started.elapsed());
                        return Ok(Received::Data);
                    }
                    None => {}
                },
                Readiness::Stop => return Ok(Received::Stop),
                Readiness::TimedOut if partial && self.stop.is_set() => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "client did not finish its request while the server was stopping",
                    )
                    .into())
                }
                Readiness::TimedOut if partial => {
                    return Err(TransmissionError::Stalled(
                        self.stall_timeout.unwrap_or_default(),
                    ))
                }
                Readiness::TimedOut => {
                    let idle = self.idle_timeout.unwrap_or_default();
                    if self.inflight.is_idle() {
                        return Ok(Received::Idle(idle));
                    }
                    // Requests still running or replies still queued: not
                    // idle; look again one timeout later.
                    idle_deadline = Some(Instant::now() + idle);
                }
            }
        }
    }

    /// Waits, for at most the coalescing wait, until the socket holds a
    /// batch of requests' bytes, then receives what has arrived. `None`
    /// when nothing arrived (the low-water mark is back at one byte and
    /// the caller waits as usual).
    fn receive_batch(
        &mut self,
        stream: &mut Stream,
        buf: &mut RecvBuf,
    ) -> Result<Option<Received>, TransmissionError> {
        let Some(low_water) = self.coalesce.low_water() else {
            return Ok(None);
        };
        if low_water != self.low_water {
            self.set_low_water(stream, low_water)?;
        }
        let readiness = wait_readable(
            stream.fd(),
            Some(self.stop.as_ref()),
            Some(self.coalesce.wait()),
        )?;
        if readiness == Readiness::Stop {
            return Ok(Some(Received::Stop));
        }
        let timed_out = readiness == Readiness::TimedOut;
        self.server_metrics
            .coalesced_waits
            .fetch_add(1, Ordering::Relaxed);
        if timed_out {
            self.server_metrics
                .coalesce_timeouts
                .fetch_add(1, Ordering::Relaxed);
        }
        match stream.try_fill(buf)? {
            Some(0) => Ok(Some(Received::Eof)),
            Some(_) => {
                self.coalesce.waited(timed_out);
                Ok(Some(Received::Data))
            }
            None => {
                self.coalesce.waited(true);
                self.set_low_water(stream, 1)?;
                Ok(None)
            }
        }
    }

    fn set_low_water(&mut self, stream: &Stream, bytes: usize) -> io::Result<()> {
        stream.set_receive_low_water(bytes)?;
        self.low_water = bytes;
        Ok(())
    }

    fn flush_batch(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let started = Instant::now();
        let result = self.sink.send_batch(self.batch.as_slice(), &self.ends);
        self.server_metrics.add_busy(Stage::Send, started.elapsed());
        self.batch.clear();
        self.ends.clear();
        self.batch.relax(IDLE_BUF);
        result
    }

    fn placement(&self, cmd: &Command) -> Placement {
        if self.pipeline == PipelineMode::Off {
            return Placement::Inline;
        }
        let class = self.export.capability.blocking;
        match (class, cmd) {
            (BlockingClass::Never, _) => Placement::Inline,
            (BlockingClass::Always, _) => Placement::HandOff,
            (BlockingClass::PageCache, Command::Read { .. }) => Placement::TryInline,
            (BlockingClass::PageCache, Command::Flush) => Placement::HandOff,
            (BlockingClass::PageCache, Command::Write { fua: true, .. }) => Placement::HandOff,
            (BlockingClass::PageCache, Command::Trim { fua: true, .. }) => Placement::HandOff,
            (BlockingClass::PageCache, Command::WriteZeroes { fua: true, .. }) => {
                Placement::HandOff
            }
            (BlockingClass::PageCache, _) => Placement::Inline,
        }
    }

    /// Handles one request; returns true on NBD_CMD_DISC.
    fn handle(&mut self, h: &RequestHeader, payload: &[u8]) -> bool {
        let received = Instant::now();
        let cmd = match self.params.validate(h) {
            Ok(Command::Disconnect) => return true,
            Ok(cmd) => cmd,
            Err(rejected) => {
                debug!(cookie = h.cookie, kind = h.kind, error = %rejected, "request rejected");
                let seq = self.take_seq();
                let style = self.params.reply_style;
                self.batch.encode(|out| {
                    encode_error(
                        out,
                        style,
                        h.cookie,
                        h.offset,
                        rejected.errno,
                        rejected.reason,
                    )
                });
                self.ends.push((seq, self.batch.len()));
                self.export
                    .metrics
                    .record(CommandKind::Invalid, 0, true, received.elapsed());
                return false;
            }
        };
        trace!(target: "sluice::data", cookie = h.cookie, ?cmd, "request");
        let seq = self.take_seq();
        let request = Request {
            cookie: h.cookie,
            offset: h.offset,
            cmd,
            received,
        };
        let placement = self.placement(&cmd);
        if let Command::Read { offset, length, .. } = cmd {
            if self.mapped_reads
                && length >= MAPPED_READ_MIN
                && self.pipeline == PipelineMode::Flexible
                && self.sink.is_plain()
                && self.mapped_read(&request, offset, length)
            {
                return false;
            }
        }
        if let Command::Read {
            offset,
            length,
            df: false,
        } = cmd
        {
            if placement != Placement::Inline
                && self.pipelined_reads
                && length > READ_PIECE
                && self.pipeline == PipelineMode::Flexible
                && self.params.reply_style.chunked()
            {
                self.pipelined_read(seq, request, offset, length);
                return false;
            }
        }
        if placement != Placement::HandOff {
            let start = self.batch.len();
            let nowait = placement == Placement::TryInline;
            match request.execute(
                &self.export,
                &self.params,
                self.context_id,
                payload,
                nowait,
                &mut self.batch,
            ) {
                Outcome::Done { failed } => {
                    self.ends.push((seq, self.batch.len()));
                    let done = Instant::now();
                    self.server_metrics
                        .add_busy(Stage::ExecuteInline, done - received);
                    let (kind, bytes) = metric_kind(&cmd);
                    self.export
                        .metrics
                        .record(kind, bytes, failed, done - received);
                    return false;
                }
                Outcome::WouldBlock => self.batch.truncate(start),
            }
        }
        self.hand_off(seq, request, payload);
        false
    }

    /// Handles a write whose payload is still arriving by splicing the
    /// rest of it from the socket into a pipe and from the pipe into the
    /// file, when the export is a buffered file on a plain socket and the
    /// payload fits the pipe. The whole payload is in the pipe before any
    /// byte is written, so a client that vanishes changes nothing.
    fn spliced_write(
        &mut self,
        h: &RequestHeader,
        header_len: usize,
        stream: &Stream,
        buf: &mut RecvBuf,
    ) -> Result<Spliced, TransmissionError> {
        if !self.spliced_writes
            || self.pipeline != PipelineMode::Flexible
            || !self.sink.is_plain()
            || !self
                .export
                .device
                .zero_copy()
                .is_some_and(|z| z.splices_writes())
        {
            return Ok(Spliced::NotTaken);
        }
        let Ok(Command::Write {
            offset,
            length,
            fua: false,
        }) = self.params.validate(h)
        else {
            return Ok(Spliced::NotTaken);
        };
        if self.payload_pipe.is_none() {
            match PayloadPipe::new() {
                Ok(p) => self.payload_pipe = Some(p),
                Err(e) => {
                    debug!(error = %e, "cannot make a payload pipe; writes are copied");
                    self.spliced_writes = false;
                    return Ok(Spliced::NotTaken);
                }
            }
        }
        let Some(mut pipe) = self.payload_pipe.take() else {
            return Ok(Spliced::NotTaken);
        };
        let result = self.splice_through(&mut pipe, h, offset, length, header_len, stream, buf);
        self.payload_pipe = Some(pipe);
        result
    }

    /// [`spliced_write`](Self::spliced_write) once the pipe exists.
    #[allow(clippy::too_many_arguments)]
    fn splice_through(
        &mut self,
        pipe: &mut PayloadPipe,
        h: &RequestHeader,
        offset: u64,
        length: u32,
        header_len: usize,
        stream: &Stream,
        buf: &mut RecvBuf,
    ) -> Result<Spliced, TransmissionError> {
        let received = Instant::now();
        let prefix_len = buf.data().len() - header_len;
        let rest = length as usize - prefix_len;
        if rest > pipe.capacity() {
            return Ok(Spliced::NotTaken);
        }
        let stall = self.stall_timeout;
        while pipe.held() < rest {
            match pipe.fill_from(stream.fd(), rest - pipe.held())? {
                Some(0) => {
                    pipe.drain()?;
                    return Ok(Spliced::Eof);
                }
                Some(_) => continue,
                None => {}
            }
            if self.low_water > 1 {
                // What is left may be shorter than the coalescing batch
                // the socket is set to wake for: wake for any byte.
                self.set_low_water(stream, 1)?;
            }
            if wait_readable(stream.fd(), None, Some(std::time::Duration::ZERO))?
                == Readiness::Readable
            {
                // Bytes are waiting but the pipe took none: it is full
                // (partly filled pages), or the socket failed between the
                // two looks. The copying path takes over.
                pipe.unload_into(buf)?;
                return Ok(Spliced::NotTaken);
            }
            let timeout = if self.stop.is_set() {
                Some(STOP_PARTIAL_GRACE)
            } else {
                stall
            };
            if wait_readable(stream.fd(), None, timeout)? == Readiness::TimedOut {
                pipe.drain()?;
                return Err(TransmissionError::Stalled(timeout.unwrap_or_default()));
            }
        }
        let seq = self.take_seq();
        let export = Arc::clone(&self.export);
        let device = export.device.as_ref();
        let prefix = &buf.data()[header_len..];
        let mut result = if prefix.is_empty() {
            Ok(())
        } else {
            device.write_at(prefix, offset, false)
        };
        if result.is_ok() {
            result = match device.zero_copy() {
                Some(z) => z.write_from_pipe(pipe.read_end(), offset + prefix_len as u64, rest),
                None => Err(DeviceError::Unsupported {
                    device: format!("export {:?}", export.name),
                    op: IoOp::Write,
                    reason: "writes from a pipe",
                }),
            };
        }
        match result {
            Ok(()) => pipe.consumed(rest),
            Err(_) => pipe.drain()?,
        }
        buf.consume(header_len + prefix_len);
        let failed = encode_result(
            &mut self.batch,
            self.params.reply_style,
            h.cookie,
            h.offset,
            result,
        );
        self.ends.push((seq, self.batch.len()));
        self.coalesce.request(header_len + length as usize);
        self.server_metrics
            .spliced_writes
            .fetch_add(1, Ordering::Relaxed);
        let done = Instant::now();
        self.server_metrics
            .add_busy(Stage::ExecuteInline, done - received);
        self.export.metrics.record(
            CommandKind::Write,
            u64::from(length),
            failed,
            done - received,
        );
        Ok(Spliced::Done)
    }

    /// Answers a read with one data chunk whose bytes the kernel copies
    /// straight from the file's shared mapping, if the device has one and
    /// every page is in the page cache (so the send cannot wait for the
    /// disk). Returns false, having sent nothing, otherwise.
    fn mapped_read(&mut self, request: &Request, offset: u64, length: u32) -> bool {
        let export = Arc::clone(&self.export);
        let Some(map) = export.device.zero_copy().and_then(|z| z.mapped()) else {
            return false;
        };
        let len = length as usize;
        let Some(data) = map.iovec(offset, len).filter(|_| map.resident(offset, len)) else {
            return false;
        };
        // Replies already built go first; a send error resurfaces below
        // (the sink is broken) and on the next batch.
        let _ = self.flush_batch();
        let style = self.params.reply_style;
        self.mapped_header.clear();
        encode_read_data_header(
            &mut self.mapped_header,
            style,
            request.cookie,
            request.offset,
            offset,
            length,
            true,
        );
        let started = Instant::now();
        // `map` (borrowed from `export`) stays mapped across the send.
        let failed = self.sink.send_mapped(&self.mapped_header, data).is_err();
        self.server_metrics.add_busy(Stage::Send, started.elapsed());
        self.server_metrics
            .mapped_reads
            .fetch_add(1, Ordering::Relaxed);
        let elapsed = request.received.elapsed();
        self.export
            .metrics
            .record(CommandKind::Read, u64::from(length), failed, elapsed);
        true
    }

    /// Answers a large read piece by piece (SuperNBD's pipelined reads):
    /// pieces already in memory go out at once as data chunks, the others
    /// are read on the I/O pool in parallel and each is sent as soon as it
    /// is read; whichever piece finishes last also sends the final chunk.
    fn pipelined_read(&mut self, seq: Seq, request: Request, offset: u64, length: u32) {
        let style = self.params.reply_style;
        let (cookie, req_offset) = (request.cookie, request.offset);
        let mut missing = Vec::new();
        let mut sent_inline = false;
        // Only page-cache devices can say cheaply whether a read would wait.
        let try_inline = self.export.capability.blocking == BlockingClass::PageCache;
        let end = offset + u64::from(length);
        let mut pos = offset;
        while pos < end {
            let piece_end = ((pos / u64::from(READ_PIECE) + 1) * u64::from(READ_PIECE)).min(end);
            let len = (piece_end - pos) as u32;
            let start = self.batch.len();
            self.batch
                .encode(|o| encode_read_data_header(o, style, cookie, req_offset, pos, len, false));
            let data = self.batch.tail_mut(len as usize);
            if try_inline && matches!(self.export.device.read_at_nowait(data, pos), Ok(true)) {
                self.ends.push((seq, self.batch.len()));
                sent_inline = true;
            } else {
                self.batch.truncate(start);
                missing.push((pos, len));
            }
            pos = piece_end;
        }
        if missing.is_empty() {
            self.batch.encode(|o| {
                encode_chunk_header(
                    o,
                    style,
                    REPLY_FLAG_DONE,
                    REPLY_TYPE_NONE,
                    cookie,
                    req_offset,
                    0,
                )
            });
            self.ends.push((seq, self.batch.len()));
            let elapsed = request.received.elapsed();
            self.server_metrics.add_busy(Stage::ExecuteInline, elapsed);
            self.export
                .metrics
                .record(CommandKind::Read, u64::from(length), false, elapsed);
            return;
        }
        if sent_inline {
            // The final chunk may come from a worker: what is queued here
            // must be on the wire first. A send error resurfaces on the
            // next batch.
            let _ = self.flush_batch();
        }
        let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(missing.len()));
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for (pos, len) in missing {
            self.admit(u64::from(len));
            let guard = InFlightGuard {
                inflight: Arc::clone(&self.inflight),
                bytes: u64::from(len),
            };
            let export = Arc::clone(&self.export);
            let sink = Arc::clone(&self.sink);
            let metrics = Arc::clone(&self.server_metrics);
            let (remaining, failed) = (Arc::clone(&remaining), Arc::clone(&failed));
            let span = tracing::Span::current();
            let sends = self.pool.send_tracker();
            metrics.handoffs.fetch_add(1, Ordering::Relaxed);
            self.pool.submit(move || {
                let _enter = span.enter();
                let started = Instant::now();
                let mut out = ReplyBuf::with_capacity(0);
                out.encode(|o| {
                    encode_read_data_header(o, style, cookie, req_offset, pos, len, false)
                });
                if let Err(e) = export.device.read_at(out.tail_mut(len as usize), pos) {
                    failed.store(true, Ordering::Relaxed);
                    let errno = nbd_errno(&e);
                    error!(error = %e, "device read failed");
                    let message = format!("{errno}: {}", short_reason(&e));
                    out.clear();
                    out.encode(|o| {
                        encode_error_offset(
                            o, style, cookie, req_offset, errno, &message, pos, false,
                        )
                    });
                }
                metrics.add_busy(Stage::ExecutePool, started.elapsed());
                // A client that does not read may hold this send until the
                // send timeout: the pool starts a spare meanwhile.
                let _sending = sends.sending();
                let _ = sink.send_owned(seq, out.into_vec(), Some(guard));
                // Decrement only after sending, so the final chunk follows
                // every other piece on the wire.
                if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    let mut last = Vec::with_capacity(32);
                    encode_chunk_header(
                        &mut last,
                        style,
                        REPLY_FLAG_DONE,
                        REPLY_TYPE_NONE,
                        cookie,
                        req_offset,
                        0,
                    );
                    let _ = sink.send_owned(seq, last, None);
                    let elapsed = request.received.elapsed();
                    export.metrics.record(
                        CommandKind::Read,
                        u64::from(length),
                        failed.load(Ordering::Relaxed),
                        elapsed,
                    );
                }
            });
        }
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
        let _ = self.flush_batch();
        self.inflight
            .wait_below(MAX_INFLIGHT_REQUESTS, self.max_inflight_bytes);
        self.inflight.add(bytes);
        // Waiting ends early when the client stopped reading and the send
        // timed out: stop executing what it sent.
        self.broken = self.sink.is_broken();
    }

    fn take_seq(&mut self) -> Seq {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    fn hand_off(&mut self, seq: Seq, request: Request, payload: &[u8]) {
        let bytes = match request.cmd {
            Command::Read { length, .. } | Command::Write { length, .. } => u64::from(length),
            _ => 0,
        };
        self.admit(bytes);
        let guard = InFlightGuard {
            inflight: Arc::clone(&self.inflight),
            bytes,
        };
        let payload = payload.to_vec();
        let export = Arc::clone(&self.export);
        let sink = Arc::clone(&self.sink);
        let params = self.params;
        let context_id = self.context_id;
        let span = tracing::Span::current();
        let metrics = Arc::clone(&self.server_metrics);
        let sends = self.pool.send_tracker();
        metrics.handoffs.fetch_add(1, Ordering::Relaxed);
        metrics.inflight.fetch_add(1, Ordering::Relaxed);
        self.pool.submit(move || {
            let _enter = span.enter();
            let started = Instant::now();
            let mut out = ReplyBuf::with_capacity(0);
            let failed =
                match request.execute(&export, &params, context_id, &payload, false, &mut out) {
                    Outcome::Done { failed } => failed,
                    Outcome::WouldBlock => true,
                };
            let executed = Instant::now();
            metrics.add_busy(Stage::ExecutePool, executed - started);
            // The guard goes with the reply: the in-flight slot is freed
            // when the reply is on the wire, not when it is queued. A
            // client that does not read may hold this send until the send
            // timeout: the pool starts a spare meanwhile.
            let sending = sends.sending();
            if let Err(e) = sink.send_owned(seq, out.into_vec(), Some(guard)) {
                debug!(error = %e, "reply not sent: connection gone");
            }
            drop(sending);
            let sent = Instant::now();
            metrics.add_busy(Stage::Send, sent - executed);
            let (kind, bytes) = metric_kind(&request.cmd);
            export
                .metrics
                .record(kind, bytes, failed, sent - request.received);
            metrics.inflight.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// A validated request, ready to run anywhere.
#[derive(Debug, Clone, Copy)]
struct Request {
    cookie: u64,
    offset: u64,
    cmd: Command,
    /// When the request was decoded (for the latency histogram).
    received: Instant,
}

enum Outcome {
    /// The reply (success or error) is in the output buffer.
    Done {
        failed: bool,
    },
    WouldBlock,
}

/// The metrics series and byte count of a command.
fn metric_kind(cmd: &Command) -> (CommandKind, u64) {
    match *cmd {
        Command::Read { length, .. } => (CommandKind::Read, u64::from(length)),
        Command::Write { length, .. } => (CommandKind::Write, u64::from(length)),
        Command::Flush | Command::Disconnect => (CommandKind::Flush, 0),
        Command::Trim { length, .. } => (CommandKind::Trim, length),
        Command::Cache { length, .. } => (CommandKind::Cache, length),
        Command::WriteZeroes { length, .. } => (CommandKind::WriteZeroes, length),
        Command::BlockStatus { .. } => (CommandKind::BlockStatus, 0),
    }
}

impl Request {
    /// Runs the command against the device and appends its complete reply
    /// to `out`. With `nowait`, a read that would block appends nothing
    /// and returns [`Outcome::WouldBlock`].
    fn execute(
        &self,
        export: &Export,
        params: &TransmissionParams,
        context_id: Option<u32>,
        payload: &[u8],
        nowait: bool,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let style = params.reply_style;
        let device = export.device.as_ref();
        let (cookie, req_offset) = (self.cookie, self.offset);
        let result = match self.cmd {
            Command::Read { offset, length, .. } => {
                if length == 0 {
                    out.encode(|o| match style {
                        ReplyStyle::Simple => encode_ok(o, style, cookie, req_offset),
                        _ => encode_chunk_header(
                            o,
                            style,
                            REPLY_FLAG_DONE,
                            REPLY_TYPE_NONE,
                            cookie,
                            req_offset,
                            0,
                        ),
                    });
                    return Outcome::Done { failed: false };
                }
                let start = out.len();
                out.encode(|o| {
                    encode_read_data_header(o, style, cookie, req_offset, offset, length, true)
                });
                debug_assert_eq!(out.len() - start, read_data_header_len(style));
                let data = out.tail_mut(length as usize);
                let read = if nowait {
                    device.read_at_nowait(data, offset)
                } else {
                    device.read_at(data, offset).map(|()| true)
                };
                match read {
                    Ok(true) => return Outcome::Done { failed: false },
                    Ok(false) => {
                        out.truncate(start);
                        return Outcome::WouldBlock;
                    }
                    Err(e) => {
                        out.truncate(start);
                        Err(e)
                    }
                }
            }
            Command::Write { offset, fua, .. } => device.write_at(payload, offset, fua),
            Command::Flush => device.flush(),
            Command::Trim {
                offset,
                length,
                fua,
            } => device.trim(offset, length, fua),
            Command::Cache { offset, length } => device.cache(offset, length),
            Command::WriteZeroes {
                offset,
                length,
                fua,
                may_trim,
                fast,
            } => device.write_zeroes(
                offset,
                length,
                ZeroMode {
                    may_trim,
                    fast,
                    fua,
                },
            ),
            Command::BlockStatus {
                offset,
                length,
                req_one,
            } => self.block_status(export, params, context_id, offset, length, req_one, out),
            Command::Disconnect => Ok(()),
        };
        let failed = match result {
            // Block status encoded its own reply.
            Ok(()) if matches!(self.cmd, Command::BlockStatus { .. }) => false,
            result => encode_result(out, style, cookie, req_offset, result),
        };
        Outcome::Done { failed }
    }

    #[allow(clippy::too_many_arguments)]
    fn block_status(
        &self,
        export: &Export,
        params: &TransmissionParams,
        context_id: Option<u32>,
        offset: u64,
        length: u64,
        req_one: bool,
        out: &mut ReplyBuf,
    ) -> Result<(), DeviceError> {
        let max = if req_one { 1 } else { MAX_EXTENTS };
        let extents: Vec<Extent> = if export.capability.extents {
            export
                .device
                .extents(offset, length, max)?
                .into_iter()
                .map(|e| Extent {
                    length: e.length,
                    flags: if e.hole { STATE_HOLE } else { 0 }
                        | if e.zero { STATE_ZERO } else { 0 },
                })
                .collect()
        } else {
            vec![Extent { length, flags: 0 }]
        };
        // validate() admits BLOCK_STATUS only with a selected context.
        let id = context_id.unwrap_or(sluice_nbd_proto::BASE_ALLOCATION_ID);
        let (cookie, req_offset, style) = (self.cookie, self.offset, params.reply_style);
        out.encode(|o| encode_block_status(o, style, cookie, req_offset, id, &extents));
        Ok(())
    }
}

/// A client-safe reason: the kind of failure without server paths.
/// Encodes the reply to a request with no data to return: success, or the
/// error (logged). Returns whether it failed.
fn encode_result(
    out: &mut ReplyBuf,
    style: ReplyStyle,
    cookie: u64,
    req_offset: u64,
    result: Result<(), DeviceError>,
) -> bool {
    match result {
        Ok(()) => {
            out.encode(|o| encode_ok(o, style, cookie, req_offset));
            false
        }
        Err(e) => {
            let errno = nbd_errno(&e);
            if errno == NbdErrno::Io {
                error!(error = %e, "device I/O failed");
            } else {
                debug!(error = %e, %errno, "request failed");
            }
            let message = format!("{errno}: {}", short_reason(&e));
            out.encode(|o| encode_error(o, style, cookie, req_offset, errno, &message));
            true
        }
    }
}

fn short_reason(e: &DeviceError) -> String {
    match e {
        DeviceError::Io { op, source, .. } => format!("{op} failed: {}", source.kind()),
        DeviceError::ReadOnly { op, .. } => format!("{op} refused: export is read-only"),
        DeviceError::OutOfRange { op, .. } => format!("{op} outside the export"),
        DeviceError::Unsupported { op, reason, .. } => format!("{op} not supported: {reason}"),
        other => other.to_string(),
    }
}
