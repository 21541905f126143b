//! Receiving: polls for a bounded window when the spin policy allows,
//! lets requests pile up in the socket when coalescing pays, then waits
//! for the socket or the server's stop signal, under the idle, stall and
//! stop deadlines.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::RecvFlags;
use tracing::debug;

use super::coalesce::CoalescePolicy;
use super::pool::InFlight;
use super::spin::SpinPolicy;
use super::{DriverEnv, DriverError};
use crate::buffer::RecvBuf;
use crate::metrics::ServerMetrics;
use crate::stop::{wait_readable, Readiness, StopSignal};
use crate::stream::Stream;

/// How long a connection waits, once the server is stopping, for the rest
/// of a request whose first bytes already arrived.
const STOP_PARTIAL_GRACE: Duration = Duration::from_secs(5);

/// The most bytes the receive after a payload taken from the socket
/// (a spliced write) reads into the buffer: a writer that sent one
/// large write has likely sent another behind it, whose payload is
/// cheaper spliced than received into the buffer and written from there.
/// A header and a page of payload; small requests behind it lose one
/// batched receive at most.
const AFTER_TAKEN_READ: usize = 4096;

/// What a receive brought.
pub(super) enum Received {
    Data,
    Eof,
    Stop,
    Idle(Duration),
}

/// The receiving half of a connection.
pub(super) struct Receiver {
    stop: Arc<StopSignal>,
    spin: SpinPolicy,
    coalesce: CoalescePolicy,
    /// The socket's receive low-water mark as last set.
    low_water: usize,
    cpus: usize,
    metrics: Arc<ServerMetrics>,
    /// Close when idle (nothing in flight, nothing received) this long.
    idle_timeout: Option<Duration>,
    /// Close when a partly received request gets no more bytes this long.
    stall_timeout: Option<Duration>,
    /// The next receive reads at most [`AFTER_TAKEN_READ`] bytes (see
    /// [`Self::payload_taken`]).
    short_read: bool,
}

impl Receiver {
    pub(super) fn new(env: &DriverEnv) -> Self {
        Self {
            stop: Arc::clone(&env.stop),
            spin: SpinPolicy::new(env.receive.spin()),
            coalesce: CoalescePolicy::new(env.receive.coalesce_max, env.receive.coalesce_wait()),
            low_water: 1,
            cpus: env.cpus,
            metrics: Arc::clone(&env.metrics),
            idle_timeout: env.timeouts.idle(),
            stall_timeout: env.timeouts.stall(),
            short_read: false,
        }
    }

    /// A message's payload was taken from the socket by the protocol (a
    /// spliced write): the next receive reads little past the next
    /// header, so that a large payload behind it is left in the socket
    /// for the protocol to take as well.
    pub(super) fn payload_taken(&mut self) {
        self.short_read = true;
    }

    /// One non-blocking receive into `buf` (see
    /// [`Stream::try_fill`]), short after a payload was taken.
    fn fill(&mut self, stream: &mut Stream, buf: &mut RecvBuf) -> io::Result<Option<usize>> {
        if !self.short_read || !stream.is_plain() {
            return stream.try_fill(buf);
        }
        let fd = stream.fd();
        let got = buf.fill_with(|room| {
            let cap = room.len().min(AFTER_TAKEN_READ);
            loop {
                match rustix::net::recv(fd, &mut room[..cap], RecvFlags::DONTWAIT) {
                    Ok((n, _)) => return Ok(n),
                    Err(Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        });
        match got {
            Ok(n) => {
                self.short_read = false;
                Ok(Some(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether this connection may coalesce requests.
    pub(super) fn coalesces(&self) -> bool {
        self.coalesce.enabled()
    }

    /// Counts a request of `bytes` for the coalescing policy.
    #[inline]
    pub(super) fn request_done(&mut self, bytes: usize) {
        self.coalesce.request(bytes);
    }

    /// Receives more requests. A request whose bytes are partly here is
    /// finished even when the server is stopping (for up to
    /// [`STOP_PARTIAL_GRACE`]).
    pub(super) fn receive(
        &mut self,
        stream: &mut Stream,
        buf: &mut RecvBuf,
        inflight: &InFlight,
    ) -> Result<Received, DriverError> {
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
        let coalescing = self.coalesce.low_water().is_some() && stream.is_plain();
        if coalescing && buf.data().is_empty() && !self.stop.is_set() {
            if let Some(received) = self.receive_batch(stream, buf)? {
                return Ok(received);
            }
        } else if self.low_water > 1 {
            self.set_low_water(stream, 1)?;
        }
        if !coalescing {
            if let Some(received) = self.spin(stream, buf)? {
                return Ok(received);
            }
        }
        self.wait(stream, buf, inflight)
    }

    /// Polls the socket for the spin window, if the policy allows.
    fn spin(
        &mut self,
        stream: &mut Stream,
        buf: &mut RecvBuf,
    ) -> Result<Option<Received>, DriverError> {
        let active = self
            .metrics
            .connections_active
            .load(Ordering::Relaxed)
            .max(0) as usize;
        if !self.spin.should_spin(active, self.cpus) || self.stop.is_set() {
            return Ok(None);
        }
        let deadline = Instant::now() + self.spin.window();
        loop {
            match self.fill(stream, buf)? {
                Some(0) => return Ok(Some(Received::Eof)),
                Some(_) => {
                    self.spin.hit();
                    return Ok(Some(Received::Data));
                }
                None => {}
            }
            if Instant::now() >= deadline {
                self.spin.miss();
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }

    /// Sleeps until bytes arrive, the server stops or a deadline passes.
    fn wait(
        &mut self,
        stream: &mut Stream,
        buf: &mut RecvBuf,
        inflight: &InFlight,
    ) -> Result<Received, DriverError> {
        let started = Instant::now();
        // Nothing was received since the last batch was handled (just
        // before this call), so both limits count from here.
        let mut idle_deadline = self.idle_timeout.map(|d| started + d);
        let stall_deadline = self.stall_timeout.map(|d| started + d);
        loop {
            if stream.has_buffered_input() {
                // TLS: decrypted or undecrypted bytes that poll cannot see.
                match self.fill(stream, buf)? {
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
                Readiness::Readable => match self.fill(stream, buf)? {
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
                    return Err(DriverError::Stalled(self.stall_timeout.unwrap_or_default()))
                }
                Readiness::TimedOut => {
                    let idle = self.idle_timeout.unwrap_or_default();
                    if inflight.is_idle() {
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
    ) -> Result<Option<Received>, DriverError> {
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
        self.metrics.coalesced_waits.fetch_add(1, Ordering::Relaxed);
        if timed_out {
            self.metrics
                .coalesce_timeouts
                .fetch_add(1, Ordering::Relaxed);
        }
        match self.fill(stream, buf)? {
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
}

/// What a [`Protocol::receive_rest`](super::Protocol::receive_rest) hook
/// may do with the connection's receiving side: read the socket itself
/// for the rest of a message.
pub(crate) struct PayloadIo<'a> {
    stream: &'a mut Stream,
    buf: &'a mut RecvBuf,
    receiver: &'a mut Receiver,
}

impl<'a> PayloadIo<'a> {
    pub(super) fn new(
        stream: &'a mut Stream,
        buf: &'a mut RecvBuf,
        receiver: &'a mut Receiver,
    ) -> Self {
        Self {
            stream,
            buf,
            receiver,
        }
    }

    /// The connection's stream.
    pub(crate) fn stream(&self) -> &Stream {
        self.stream
    }

    /// The receive buffer, which holds the message's first bytes.
    pub(crate) fn buf(&mut self) -> &mut RecvBuf {
        self.buf
    }

    /// Makes the socket report any byte as readable (undoes coalescing's
    /// low-water mark: what is left of a message may be shorter).
    pub(crate) fn wake_for_any_byte(&mut self) -> io::Result<()> {
        if self.receiver.low_water > 1 {
            self.receiver.set_low_water(self.stream, 1)?;
        }
        Ok(())
    }

    /// Receives more bytes into the buffer (at least one), waiting up to
    /// the stall timeout for them; `false` at end of stream.
    pub(crate) fn receive_more(&mut self) -> Result<bool, DriverError> {
        loop {
            match self.stream.try_fill(self.buf)? {
                Some(0) => return Ok(false),
                Some(_) => return Ok(true),
                None => {}
            }
            if self.stream.has_buffered_input() {
                continue;
            }
            self.wake_for_any_byte()?;
            let timeout = self.stall_timeout();
            if wait_readable(self.stream.fd(), None, timeout)? == Readiness::TimedOut {
                return Err(DriverError::Stalled(timeout.unwrap_or_default()));
            }
        }
    }

    /// How long the rest of a partly received message may take to arrive
    /// (`None`: no limit).
    pub(crate) fn stall_timeout(&self) -> Option<Duration> {
        if self.receiver.stop.is_set() {
            Some(STOP_PARTIAL_GRACE)
        } else {
            self.receiver.stall_timeout
        }
    }
}
