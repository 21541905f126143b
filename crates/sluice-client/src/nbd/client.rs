//! A thread-safe client: any number of threads or async tasks issue
//! requests on one connection at once. Requests are written by whichever
//! caller finds the socket idle, together with everything queued
//! meanwhile (one write per burst); a reader thread parses replies, puts
//! read data where its caller asked, and completes each request, in
//! whatever order the server answers.
//!
//! # Reconnecting
//!
//! With [`Reconnect`] on, every request keeps its encoded bytes until its
//! reply arrives, and every acknowledged modification stays in a
//! [`ReplayLog`] until a FLUSH covers it. When the connection is lost the
//! reader thread stops new sends, connects again (with backoff, until
//! the window runs out), checks the export is the same, replays the log
//! one request at a time (so overlapping writes land in their order),
//! then re-sends every request that had no reply and lets callers send
//! again. Callers see nothing of a reconnect that succeeds; when the
//! window runs out every waiting request fails with
//! [`ClientError::ReconnectFailed`].
//!
//! Lock order: `writer`, then `socket`. The reader takes `writer` only to
//! register requests in bulk, to reconnect, and to fail everything.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use sluice_nbd_proto::{
    ClientRequest, CookieTable, Extent, Finished, Op, ReplyDecoder, ReplyEvent, RequestEncoder,
    Sent, Step,
};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use super::connection::{refused, request_error, Request};
use super::handshake::{open, ConnectOptions, ExportDetails};
use crate::net::mux::replay::ReplayLog;
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;
use crate::{ClientError, NbdUri};

/// The result of a request on a [`Client`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Success without data (or a read into the caller's buffer).
    Done,
    /// Read data.
    Data(Vec<u8>),
    /// Block status extents.
    Extents(Vec<Extent>),
}

type Waiter = oneshot::Sender<Result<Reply, ClientError>>;

/// Where a read's data goes.
pub(crate) enum Dest {
    None,
    Owned(Vec<u8>),
    /// The buffer of a caller blocked in [`Client::read_at`].
    Borrowed {
        ptr: *mut u8,
        len: usize,
    },
}

// SAFETY: a `Borrowed` pointer is written only by the reader thread, and
// only while the caller that lent it is blocked waiting for this entry's
// completion (see `Client::read_at`); the buffer is `&mut [u8]`, so no
// one else touches it meanwhile.
unsafe impl Send for Dest {}

impl Dest {
    /// Copies `data` (or zeroes) to `rel`; the decoder has checked the
    /// range lies inside the request, whose length is the buffer's.
    fn put(&mut self, rel: u64, len: usize, data: Option<&[u8]>) {
        let rel = rel as usize;
        let dst: &mut [u8] = match self {
            Self::None => return,
            Self::Owned(v) => match v.get_mut(rel..rel + len) {
                Some(d) => d,
                None => return,
            },
            Self::Borrowed { ptr, len: total } => {
                if rel + len > *total {
                    return;
                }
                // SAFETY: in bounds (checked above) of a buffer its owner
                // lent us and is blocked on (see `unsafe impl Send`).
                unsafe { std::slice::from_raw_parts_mut(ptr.add(rel), len) }
            }
        };
        match data {
            Some(d) => dst.copy_from_slice(d),
            None => dst.fill(0),
        }
    }
}

/// Who learns of a completion.
enum Notify {
    Caller(Waiter),
    /// A FLUSH the client sent itself to empty the replay log.
    Internal,
    /// The caller timed out; the reply is read and dropped.
    Abandoned,
}

struct Entry {
    sent: Sent,
    /// The encoded request, kept to re-send and replay (reconnect on).
    bytes: Option<Vec<u8>>,
    dest: Dest,
    extents: Option<Vec<Extent>>,
    notify: Notify,
    deadline: Option<Instant>,
    /// For a FLUSH: the last replay-log sequence number it covers.
    covers: u64,
}

/// Whether requests can be sent: connected, getting a connection back,
/// or given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connected {
    Up,
    Reconnecting,
    Failed,
}

struct WriterState {
    encoder: RequestEncoder,
    out: Vec<u8>,
    registrations: mpsc::Sender<Entry>,
    /// A caller is writing; others just queue.
    sending: bool,
    connected: Connected,
    /// Bumped by each reconnect; a batch taken under an older one is not
    /// written (the reconnect re-sent its requests).
    generation: u64,
    /// The replay log is full: the next sender adds a FLUSH.
    flush_wanted: bool,
}

struct Socket {
    stream: Stream,
    generation: u64,
}

struct Shared {
    details: ExportDetails,
    uri: NbdUri,
    options: ConnectOptions,
    writer: Mutex<WriterState>,
    socket: Mutex<Socket>,
    /// Sequence number of the last modification the reader put in the
    /// replay log; a FLUSH covers what was logged before it was sent.
    logged: AtomicU64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Ends the reader thread.
        lock(&self.socket).stream.shutdown();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A cloneable handle to one NBD connection, usable from many threads and
/// async tasks at once.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("details", &self.shared.details)
            .finish()
    }
}

fn closed(target: &str) -> ClientError {
    ClientError::Closed {
        target: target.to_owned(),
    }
}

impl Client {
    /// Connects to `uri`.
    pub fn connect(uri: &NbdUri, options: &ConnectOptions) -> Result<Self, ClientError> {
        let (stream, details) = open(uri, options)?;
        let target = details.target.clone();
        let io = |source| ClientError::Io {
            target: target.clone(),
            source,
        };
        let reader = stream.try_clone().map_err(io)?;
        if let Some(t) = options.request_timeout {
            reader.set_read_timeout(Some(tick(t))).map_err(io)?;
        }
        let (tx, rx) = mpsc::channel::<Entry>();
        let shared = Arc::new(Shared {
            writer: Mutex::new(WriterState {
                encoder: RequestEncoder::new(details.transmission()),
                out: Vec::with_capacity(64 * 1024),
                registrations: tx,
                sending: false,
                connected: Connected::Up,
                generation: 0,
                flush_wanted: false,
            }),
            socket: Mutex::new(Socket {
                stream,
                generation: 0,
            }),
            details,
            uri: uri.clone(),
            options: options.clone(),
            logged: AtomicU64::new(0),
        });
        let mut r = Reader::new(&shared, reader, rx);
        std::thread::Builder::new()
            .name("sluice-client-rx".into())
            .spawn(move || r.run())
            .map_err(io)?;
        Ok(Self { shared })
    }

    /// Opens `n` connections to one export (multi-conn). Fails if `n > 1`
    /// and the server does not allow multi-conn for the export.
    pub fn connect_many(
        uri: &NbdUri,
        options: &ConnectOptions,
        n: usize,
    ) -> Result<Vec<Self>, ClientError> {
        let first = Self::connect(uri, options)?;
        if n > 1 && !first.details().can_multi_conn() {
            return Err(ClientError::Violation {
                target: first.details().target.clone(),
                reason: format!(
                    "export {:?} does not allow multiple connections",
                    uri.export
                ),
            });
        }
        let mut all = vec![first];
        for _ in 1..n {
            all.push(Self::connect(uri, options)?);
        }
        Ok(all)
    }

    /// What the handshake settled.
    pub fn details(&self) -> &ExportDetails {
        &self.shared.details
    }

    /// Issues a request; the returned receiver completes with its reply.
    pub(crate) fn submit(
        &self,
        request: Request<'_>,
        dest: Dest,
    ) -> Result<oneshot::Receiver<Result<Reply, ClientError>>, ClientError> {
        let s = &*self.shared;
        let target = &s.details.target;
        let keep = s.options.reconnect.enabled();
        let (tx, rx) = oneshot::channel();
        let deadline = s.options.request_timeout.map(|t| Instant::now() + t);
        let mut w = lock(&s.writer);
        if w.connected == Connected::Failed {
            return Err(closed(target));
        }
        let start = w.out.len();
        let mut out = std::mem::take(&mut w.out);
        let encoded = w.encoder.encode(request, &mut out);
        w.out = out;
        let sent = encoded.map_err(|e| refused(&s.details, None, e))?;
        let entry = Entry {
            sent,
            bytes: keep.then(|| w.out[start..].to_vec()),
            dest,
            extents: None,
            notify: Notify::Caller(tx),
            deadline,
            covers: s.logged.load(Ordering::Acquire),
        };
        // Registered before the bytes can reach the server, so the reader
        // always knows a cookie before its reply arrives.
        if w.registrations.send(entry).is_err() {
            w.connected = Connected::Failed;
            return Err(closed(target));
        }
        if w.flush_wanted {
            w.flush_wanted = false;
            self.queue_internal_flush(&mut w);
        }
        if w.sending || w.connected != Connected::Up {
            // Another caller sends it, or the reconnect re-sends it.
            return Ok(rx);
        }
        w.sending = true;
        loop {
            let mut batch = std::mem::take(&mut w.out);
            let generation = w.generation;
            drop(w);
            let result = {
                let mut sock = lock(&s.socket);
                if sock.generation == generation {
                    sock.stream.write_all(&batch)
                } else {
                    Ok(())
                }
            };
            w = lock(&s.writer);
            if let Err(source) = result {
                w.sending = false;
                lock(&s.socket).stream.shutdown();
                if keep && w.connected != Connected::Failed {
                    // The reader notices, reconnects and re-sends.
                    debug!(%target, error = &source as &dyn std::error::Error, "send failed; the reader reconnects");
                    return Ok(rx);
                }
                w.connected = Connected::Failed;
                return Err(ClientError::Io {
                    target: target.clone(),
                    source,
                });
            }
            if w.out.is_empty() || w.connected != Connected::Up {
                batch.clear();
                if w.out.is_empty() {
                    w.out = batch;
                }
                w.sending = false;
                return Ok(rx);
            }
        }
    }

    /// Encodes and registers a FLUSH of the client's own.
    fn queue_internal_flush(&self, w: &mut WriterState) {
        let s = &*self.shared;
        let start = w.out.len();
        let mut out = std::mem::take(&mut w.out);
        let encoded = w.encoder.encode(ClientRequest::Flush, &mut out);
        w.out = out;
        let Ok(sent) = encoded else {
            return;
        };
        let entry = Entry {
            sent,
            bytes: Some(w.out[start..].to_vec()),
            dest: Dest::None,
            extents: None,
            notify: Notify::Internal,
            deadline: None,
            covers: s.logged.load(Ordering::Acquire),
        };
        let _ = w.registrations.send(entry);
    }

    pub(crate) fn wait_blocking(
        &self,
        rx: oneshot::Receiver<Result<Reply, ClientError>>,
    ) -> Result<Reply, ClientError> {
        rx.blocking_recv()
            .map_err(|_| closed(&self.shared.details.target))?
    }

    /// Runs a request to completion asynchronously.
    pub async fn call(&self, request: Request<'_>) -> Result<Reply, ClientError> {
        let dest = match request {
            ClientRequest::Read { length, .. } => Dest::Owned(vec![0; length as usize]),
            _ => Dest::None,
        };
        let rx = self.submit(request, dest)?;
        rx.await.map_err(|_| closed(&self.shared.details.target))?
    }

    /// Runs a request to completion, blocking the calling thread. Must not
    /// be called from inside an async runtime.
    pub fn call_blocking(&self, request: Request<'_>) -> Result<Reply, ClientError> {
        let dest = match request {
            ClientRequest::Read { length, .. } => Dest::Owned(vec![0; length as usize]),
            _ => Dest::None,
        };
        let rx = self.submit(request, dest)?;
        self.wait_blocking(rx)
    }

    /// Reads `buf.len()` bytes at `offset` straight into `buf`, blocking
    /// the calling thread (not from inside an async runtime).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), ClientError> {
        let length = u32::try_from(buf.len()).map_err(|_| ClientError::Refused {
            target: self.shared.details.target.clone(),
            export: self.shared.details.name.clone(),
            op: Op::Read,
            source: sluice_nbd_proto::RequestError::TooLong {
                op: Op::Read,
                length: buf.len() as u64,
            },
        })?;
        let dest = Dest::Borrowed {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        };
        let rx = self.submit(ClientRequest::Read { offset, length }, dest)?;
        // The reader writes into `buf` until it completes this request
        // (success, error, timeout) or drops it; either wakes this wait,
        // and nothing returns from here before that, so `buf` outlives
        // every write.
        match self.wait_blocking(rx)? {
            Reply::Done => Ok(()),
            other => Err(self.unexpected(Op::Read, &other)),
        }
    }

    fn unexpected(&self, op: Op, reply: &Reply) -> ClientError {
        ClientError::Violation {
            target: self.shared.details.target.clone(),
            reason: format!("unexpected reply to a {op}: {reply:?}"),
        }
    }

    /// Reads `length` bytes at `offset` into a new buffer.
    pub async fn read(&self, offset: u64, length: u32) -> Result<Vec<u8>, ClientError> {
        self.read_into(offset, vec![0; length as usize]).await
    }

    /// Reads `buf.len()` bytes at `offset` into `buf` and returns it (no
    /// allocation when the caller reuses its buffers).
    pub async fn read_into(&self, offset: u64, buf: Vec<u8>) -> Result<Vec<u8>, ClientError> {
        let length = buf.len() as u32;
        let rx = self.submit(ClientRequest::Read { offset, length }, Dest::Owned(buf))?;
        match rx
            .await
            .map_err(|_| closed(&self.shared.details.target))??
        {
            Reply::Data(d) => Ok(d),
            other => Err(self.unexpected(Op::Read, &other)),
        }
    }

    /// Writes `data` at `offset`.
    pub async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        self.call(ClientRequest::Write { offset, data, fua })
            .await
            .map(drop)
    }

    /// Flushes.
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.call(ClientRequest::Flush).await.map(drop)
    }

    /// Trims.
    pub async fn trim(&self, offset: u64, length: u64) -> Result<(), ClientError> {
        self.call(ClientRequest::Trim {
            offset,
            length,
            fua: false,
        })
        .await
        .map(drop)
    }

    /// Zeroes a range.
    pub async fn write_zeroes(
        &self,
        offset: u64,
        length: u64,
        no_hole: bool,
    ) -> Result<(), ClientError> {
        self.call(ClientRequest::WriteZeroes {
            offset,
            length,
            no_hole,
            fast: false,
            fua: false,
        })
        .await
        .map(drop)
    }

    /// Allocation extents of a range.
    pub async fn block_status(&self, offset: u64, length: u64) -> Result<Vec<Extent>, ClientError> {
        let reply = self
            .call(ClientRequest::BlockStatus {
                offset,
                length,
                req_one: false,
            })
            .await?;
        match reply {
            Reply::Extents(e) => Ok(e),
            other => Err(self.unexpected(Op::BlockStatus, &other)),
        }
    }
}

/// How often the reader wakes to check deadlines.
fn tick(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// The reader thread's state.
struct Reader {
    shared: Weak<Shared>,
    target: String,
    stream: Stream,
    registrations: mpsc::Receiver<Entry>,
    inbuf: RecvBuf,
    decoder: ReplyDecoder,
    table: CookieTable,
    entries: HashMap<u64, Entry>,
    log: ReplayLog<Sent>,
    /// Log modifications (reconnect on and the export has a cache to flush).
    logging: bool,
    /// An internal FLUSH was asked for and has not completed.
    flush_asked: bool,
}

/// Why the reader stopped reading the current connection.
enum Stop {
    /// The connection is gone; reconnecting may help.
    Lost(ClientError),
    /// Nothing will help (protocol violation, client dropped).
    Fatal(ClientError),
}

impl Reader {
    fn new(shared: &Arc<Shared>, stream: Stream, registrations: mpsc::Receiver<Entry>) -> Self {
        let t = shared.details.transmission();
        let reconnect = shared.options.reconnect;
        Self {
            shared: Arc::downgrade(shared),
            target: shared.details.target.clone(),
            stream,
            registrations,
            inbuf: RecvBuf::new(),
            decoder: ReplyDecoder::new(t.reply_style, t.base_allocation_id),
            table: CookieTable::with_capacity(256),
            entries: HashMap::new(),
            log: ReplayLog::new(reconnect.replay_log_bytes),
            logging: reconnect.enabled() && shared.details.can_flush(),
            flush_asked: false,
        }
    }

    fn run(&mut self) {
        let error = loop {
            let stop = match self.serve() {
                Ok(()) => continue,
                Err(stop) => stop,
            };
            let Some(shared) = self.shared.upgrade() else {
                break closed(&self.target);
            };
            match stop {
                Stop::Lost(e) if shared.options.reconnect.enabled() => {
                    warn!(target = %self.target, error = &e as &dyn std::error::Error, "connection lost; reconnecting");
                    match self.reconnect(&shared, e) {
                        Ok(()) => continue,
                        Err(e) => break e,
                    }
                }
                Stop::Lost(e) | Stop::Fatal(e) => break e,
            }
        };
        debug!(target = %self.target, %error, "client reader stopped");
        self.fail_all(&error);
    }

    /// Reads and completes replies until the connection stops.
    fn serve(&mut self) -> Result<(), Stop> {
        loop {
            match self.inbuf.fill(&mut self.stream) {
                Ok(true) => {}
                Ok(false) => return Err(Stop::Lost(closed(&self.target))),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(source) => {
                    return Err(Stop::Lost(ClientError::Io {
                        target: self.target.clone(),
                        source,
                    }))
                }
            }
            if self.shared.strong_count() == 0 {
                return Err(Stop::Fatal(closed(&self.target)));
            }
            self.register();
            self.process().map_err(Stop::Fatal)?;
            self.expire();
        }
    }

    fn register(&mut self) {
        while let Ok(entry) = self.registrations.try_recv() {
            self.table.insert(entry.sent);
            self.entries.insert(entry.sent.cookie, entry);
        }
    }

    /// Completes every reply fully received.
    fn process(&mut self) -> Result<(), ClientError> {
        loop {
            let step = self
                .decoder
                .decode(self.inbuf.data(), &mut self.table)
                .map_err(|source| ClientError::Reply {
                    target: self.target.clone(),
                    source,
                })?;
            let d = match step {
                Step::NeedMore(n) => {
                    self.inbuf.reserve(n);
                    return Ok(());
                }
                Step::Decoded(d) => d,
            };
            match d.event {
                ReplyEvent::Data { cookie, rel, data } => {
                    if let Some(e) = self.entries.get_mut(&cookie) {
                        e.dest.put(rel, data.len(), Some(data));
                    }
                }
                ReplyEvent::Hole { cookie, rel, len } => {
                    if let Some(e) = self.entries.get_mut(&cookie) {
                        e.dest.put(rel, len as usize, None);
                    }
                }
                ReplyEvent::Extents { cookie, extents } => {
                    if let Some(e) = self.entries.get_mut(&cookie) {
                        e.extents = Some(extents);
                    }
                }
                ReplyEvent::Nothing => {}
            }
            let used = d.used;
            if let Some(f) = d.finished {
                self.finish(f);
            }
            self.inbuf.consume(used);
        }
    }

    fn finish(&mut self, f: Finished) {
        let Some(mut e) = self.entries.remove(&f.sent.cookie) else {
            return;
        };
        if f.result.is_ok() && self.logging {
            if f.sent.op.modifies() {
                if let Some(bytes) = e.bytes.take() {
                    let seq = self.log.push(f.sent, bytes);
                    if let Some(s) = self.shared.upgrade() {
                        s.logged.store(seq, Ordering::Release);
                    }
                }
            } else if f.sent.op == Op::Flush {
                self.log.flushed(e.covers);
            }
        }
        if matches!(e.notify, Notify::Internal) {
            self.flush_asked = false;
        }
        if self.logging && self.log.over_limit() && !self.flush_asked {
            if let Some(s) = self.shared.upgrade() {
                lock(&s.writer).flush_wanted = true;
                self.flush_asked = true;
            }
        }
        let Notify::Caller(waiter) = std::mem::replace(&mut e.notify, Notify::Abandoned) else {
            return;
        };
        let reply = match f.result {
            Err(err) => Err(request_error(&self.target, &f.sent, err)),
            Ok(()) => Ok(
                match (f.sent.op, std::mem::replace(&mut e.dest, Dest::None)) {
                    (Op::Read, Dest::Owned(v)) => Reply::Data(v),
                    (Op::BlockStatus, _) => Reply::Extents(e.extents.take().unwrap_or_default()),
                    _ => Reply::Done,
                },
            ),
        };
        let _ = waiter.send(reply);
    }

    /// Fails requests whose deadline passed; their replies are dropped
    /// when they come.
    fn expire(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let Some(after) = shared.options.request_timeout else {
            return;
        };
        let now = Instant::now();
        for e in self.entries.values_mut() {
            if e.deadline.is_some_and(|d| d <= now) && matches!(e.notify, Notify::Caller(_)) {
                e.dest = Dest::None;
                if let Notify::Caller(w) = std::mem::replace(&mut e.notify, Notify::Abandoned) {
                    let _ = w.send(Err(ClientError::Timeout {
                        target: self.target.clone(),
                        op: e.sent.op,
                        offset: e.sent.offset,
                        length: e.sent.length,
                        after,
                    }));
                }
            }
        }
    }

    /// Gets a connection back within the window, replays the log and
    /// re-sends what had no reply.
    fn reconnect(&mut self, shared: &Arc<Shared>, lost: ClientError) -> Result<(), ClientError> {
        {
            let mut w = lock(&shared.writer);
            if w.connected == Connected::Up {
                w.connected = Connected::Reconnecting;
            }
        }
        self.stream.shutdown();
        let window = shared.options.reconnect.window;
        let began = Instant::now();
        let deadline = began + window;
        let mut backoff = Duration::from_millis(20);
        let mut last = lost;
        let mut attempts = 0u32;
        loop {
            self.register();
            self.expire();
            if Arc::strong_count(shared) == 1 {
                // Every handle to the client is gone: nobody to serve.
                return Err(closed(&self.target));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::ReconnectFailed {
                    target: self.target.clone(),
                    window,
                    last: Box::new(last),
                });
            }
            attempts += 1;
            let mut options = shared.options.clone();
            options.connect_timeout = options.connect_timeout.min(deadline - now);
            let attempt = open(&shared.uri, &options).and_then(|(stream, details)| {
                self.check_same(shared, &details)?;
                self.replay(stream)
            });
            match attempt {
                Ok(stream) => match self.resume(shared, stream) {
                    Ok(()) => {
                        info!(
                            target = %self.target,
                            attempts,
                            replayed = self.log.len(),
                            after_ms = began.elapsed().as_millis() as u64,
                            "reconnected"
                        );
                        return Ok(());
                    }
                    Err(e) => last = e,
                },
                Err(e @ ClientError::ExportChanged { .. }) => return Err(e),
                Err(e @ ClientError::Request { .. }) => return Err(e),
                Err(e) => last = e,
            }
            debug!(target = %self.target, error = &last as &dyn std::error::Error, "reconnect attempt failed");
            std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// The server must offer the same export as before: the requests kept
    /// for re-sending are encoded for it.
    fn check_same(&self, shared: &Shared, now: &ExportDetails) -> Result<(), ClientError> {
        let was = &shared.details;
        let what = if now.size != was.size {
            format!("size {} is now {}", was.size, now.size)
        } else if now.transmission() != was.transmission() {
            format!(
                "transmission flags/styles {:?} are now {:?}",
                was.transmission(),
                now.transmission()
            )
        } else {
            return Ok(());
        };
        Err(ClientError::ExportChanged {
            target: self.target.clone(),
            export: was.name.clone(),
            what,
        })
    }

    /// Sends every logged modification again, one at a time.
    fn replay(&self, mut stream: Stream) -> Result<Stream, ClientError> {
        let io = |source| ClientError::Io {
            target: self.target.clone(),
            source,
        };
        let mut inbuf = RecvBuf::new();
        for (sent, bytes) in self.log.requests() {
            let mut table = CookieTable::with_capacity(1);
            table.insert(*sent);
            stream.write_all(bytes).map_err(io)?;
            loop {
                let step = self
                    .decoder
                    .decode(inbuf.data(), &mut table)
                    .map_err(|source| ClientError::Reply {
                        target: self.target.clone(),
                        source,
                    })?;
                match step {
                    Step::NeedMore(n) => {
                        inbuf.reserve(n);
                        if !inbuf.fill(&mut stream).map_err(io)? {
                            return Err(closed(&self.target));
                        }
                    }
                    Step::Decoded(d) => {
                        let used = d.used;
                        let finished = d.finished;
                        inbuf.consume(used);
                        if let Some(f) = finished {
                            if let Err(e) = f.result {
                                return Err(request_error(&self.target, &f.sent, e));
                            }
                            break;
                        }
                    }
                }
            }
        }
        Ok(stream)
    }

    /// Puts the new connection in place and re-sends every request still
    /// waiting, with senders held off.
    fn resume(&mut self, shared: &Shared, stream: Stream) -> Result<(), ClientError> {
        let target = self.target.clone();
        let io = |source| ClientError::Io {
            target: target.clone(),
            source,
        };
        let reader = stream.try_clone().map_err(io)?;
        if let Some(t) = shared.options.request_timeout {
            reader.set_read_timeout(Some(tick(t))).map_err(io)?;
        }
        let mut w = lock(&shared.writer);
        self.register();
        // Requests whose callers gave up are not sent again.
        let abandoned: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.notify, Notify::Abandoned))
            .map(|(c, _)| *c)
            .collect();
        for c in abandoned {
            self.entries.remove(&c);
            self.table.remove(c);
        }
        self.table.restart_all();
        let mut cookies: Vec<u64> = self.entries.keys().copied().collect();
        cookies.sort_unstable();
        w.out.clear();
        w.generation += 1;
        let mut sock = lock(&shared.socket);
        sock.stream = stream;
        sock.generation = w.generation;
        for c in &cookies {
            let Some(e) = self.entries.get_mut(c) else {
                continue;
            };
            e.extents = None;
            if let Some(bytes) = &e.bytes {
                sock.stream.write_all(bytes).map_err(io)?;
            }
        }
        drop(sock);
        w.connected = Connected::Up;
        drop(w);
        self.stream = reader;
        self.inbuf.clear();
        Ok(())
    }

    /// Fails every request waiting or registered, and new ones from now.
    fn fail_all(&mut self, error: &ClientError) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared.writer).connected = Connected::Failed;
        }
        self.register();
        for (_, e) in self.entries.drain() {
            if let Notify::Caller(w) = e.notify {
                let _ = w.send(Err(copy_error(error)));
            }
        }
    }
}

/// The same error for another waiter (`ClientError` holds `io::Error`s,
/// which do not clone).
fn copy_error(e: &ClientError) -> ClientError {
    match e {
        ClientError::ReconnectFailed {
            target,
            window,
            last,
        } => ClientError::ReconnectFailed {
            target: target.clone(),
            window: *window,
            last: Box::new(copy_error(last)),
        },
        ClientError::Closed { target } => ClientError::Closed {
            target: target.clone(),
        },
        ClientError::Io { target, source } => ClientError::Io {
            target: target.clone(),
            source: std::io::Error::new(source.kind(), source.to_string()),
        },
        ClientError::Reply { target, source } => ClientError::Reply {
            target: target.clone(),
            source: source.clone(),
        },
        ClientError::ExportChanged {
            target,
            export,
            what,
        } => ClientError::ExportChanged {
            target: target.clone(),
            export: export.clone(),
            what: what.clone(),
        },
        ClientError::Request {
            target,
            op,
            offset,
            length,
            errno,
            message,
        } => ClientError::Request {
            target: target.clone(),
            op: *op,
            offset: *offset,
            length: *length,
            errno: *errno,
            message: message.clone(),
        },
        // Every other error already names its server in its message.
        other => ClientError::Violation {
            target: "the server".into(),
            reason: other.to_string(),
        },
    }
}
