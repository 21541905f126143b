//! A thread-safe client: any number of threads or async tasks issue
//! requests on one connection at once. It is NBD over the client's one
//! multiplexer core (`net/mux`): requests are written by whichever caller
//! finds the socket idle, together with everything queued meanwhile (one
//! write per burst); a reader thread parses replies, puts read data
//! where its caller asked, and completes each request, in whatever order
//! the server answers.
//!
//! # Reconnecting
//!
//! With [`Reconnect`](crate::Reconnect) on, every request keeps its
//! encoded bytes until its reply arrives, and every acknowledged
//! modification stays in the core's replay log until a FLUSH covers it.
//! When the connection is lost the reader stops new sends, connects
//! again (with backoff, until the window runs out), checks the export is
//! the same, replays the log one request at a time (so overlapping
//! writes land in their order), then sends again every request that had
//! no reply (NBD's writes, trims and zeroing land the same twice) and
//! lets callers send again. Callers see nothing of a reconnect that
//! succeeds; when the window runs out every waiting request fails with
//! [`ClientError::ReconnectFailed`].

use std::io;
use std::sync::Arc;
use std::time::Duration;

use sluice_nbd_proto::{
    ClientRequest, CookieTable, Extent, Op, ReplyDecoder, ReplyEvent, RequestEncoder, Sent,
    ServerError, Step,
};
use tokio::sync::oneshot;

use super::connection::{refused, request_error, Request};
use super::handshake::{open, ConnectOptions, ExportDetails};
use crate::net::mux::{Group, Logged, Mux, MuxOptions, MuxProtocol, Next, Tickets};
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;
use crate::Durability;
use crate::{ClientError, NbdUri};

/// The name of each [`Client`]'s reader thread.
const READER_THREAD: &str = "sluice-client-rx";

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
// completion (see `Client::read_at` and `batch`): the multiplexer hands the
// outcome to the caller only after the last write (`finish`), and a
// request whose caller times out has its `Dest` set to `None` (`abandon`)
// before the caller is woken. The buffer is `&mut [u8]`, so no one else
// touches it meanwhile.
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

/// What a waiting NBD request keeps: what was sent, where read data
/// goes, and block status extents as they come.
pub(crate) struct Ticket {
    sent: Sent,
    dest: Dest,
    extents: Option<Vec<Extent>>,
}

/// NBD as the multiplexer drives it: one export's session, and how to
/// get the same one back.
pub(crate) struct NbdSession {
    details: ExportDetails,
    uri: NbdUri,
    options: ConnectOptions,
    encoder: RequestEncoder,
}

/// Reply parsing of one connection: the decoder in the negotiated style
/// and the requests it knows of.
pub(crate) struct Parser {
    decoder: ReplyDecoder,
    table: CookieTable,
}

impl NbdSession {
    fn target(&self) -> &str {
        &self.details.target
    }

    /// The server must offer the same export as before: the requests kept
    /// for re-sending are encoded for it.
    fn check_same(&self, now: &ExportDetails) -> Result<(), ClientError> {
        let was = &self.details;
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
            target: self.target().to_owned(),
            export: was.name.clone(),
            what,
        })
    }
}

impl MuxProtocol for NbdSession {
    type Ticket = Ticket;
    type Raw = ();
    type Refusal = ServerError;
    type Reply = Reply;
    type Error = ClientError;
    type Parser = Parser;
    type SendState = ();
    type Record = Sent;

    fn parser(&self) -> Parser {
        let t = self.details.transmission();
        Parser {
            decoder: ReplyDecoder::new(t.reply_style, t.base_allocation_id),
            table: CookieTable::with_capacity(256),
        }
    }

    fn registered(&self, parser: &mut Parser, _id: u64, ticket: &Ticket) {
        parser.table.insert(ticket.sent);
    }

    fn next(
        &self,
        parser: &mut Parser,
        inbuf: &mut RecvBuf,
        tickets: &mut dyn Tickets<Ticket>,
    ) -> Result<Next<Self>, ClientError> {
        let step = parser
            .decoder
            .decode(inbuf.data(), &mut parser.table)
            .map_err(|source| ClientError::Reply {
                target: self.target().to_owned(),
                source,
            })?;
        let d = match step {
            Step::NeedMore(n) => return Ok(Next::Need(n)),
            Step::Decoded(d) => d,
        };
        match d.event {
            ReplyEvent::Data { cookie, rel, data } => {
                if let Some(t) = tickets.get(cookie) {
                    t.dest.put(rel, data.len(), Some(data));
                }
            }
            ReplyEvent::Hole { cookie, rel, len } => {
                if let Some(t) = tickets.get(cookie) {
                    t.dest.put(rel, len as usize, None);
                }
            }
            ReplyEvent::Extents { cookie, extents } => {
                if let Some(t) = tickets.get(cookie) {
                    t.extents = Some(extents);
                }
            }
            ReplyEvent::Nothing => {}
        }
        let used = d.used;
        let finished = d.finished;
        inbuf.consume(used);
        Ok(match finished {
            Some(f) => Next::Done {
                id: f.sent.cookie,
                result: f.result,
            },
            None => Next::More,
        })
    }

    fn finish(&self, mut t: Ticket, result: Result<(), ServerError>) -> Result<Reply, ClientError> {
        match result {
            Err(e) => Err(request_error(self.target(), &t.sent, e)),
            Ok(()) => Ok(
                match (t.sent.op, std::mem::replace(&mut t.dest, Dest::None)) {
                    (Op::Read, Dest::Owned(v)) => Reply::Data(v),
                    (Op::BlockStatus, _) => Reply::Extents(t.extents.take().unwrap_or_default()),
                    _ => Reply::Done,
                },
            ),
        }
    }

    /// NBD has no group frames: never called.
    fn group_failed(&self, _t: &Ticket, _result: &Result<(), ServerError>) -> ClientError {
        self.violation("a reply to a group frame, which NBD does not send".into())
    }

    fn logged(&self, t: &Ticket) -> Logged {
        match t.sent.op {
            op if op.modifies() => Logged::Change,
            Op::Flush => Logged::Flush,
            _ => Logged::Nothing,
        }
    }

    fn record(&self, t: &Ticket) -> Sent {
        t.sent
    }

    fn replay_ticket(&self, sent: &Sent) -> Ticket {
        Ticket {
            sent: *sent,
            dest: Dest::None,
            extents: None,
        }
    }

    fn can_flush(&self) -> bool {
        self.details.can_flush()
    }

    fn internal_flush(&self, id: u64) -> Option<(Vec<u8>, Ticket)> {
        let mut frame = Vec::new();
        let sent = self
            .encoder
            .encode_as(id, ClientRequest::Flush, &mut frame)
            .ok()?;
        Some((frame, self.replay_ticket(&sent)))
    }

    /// Reads, writes, trims, zeroing, flushes and block status all land
    /// the same when sent twice.
    fn resendable(&self, _t: &Ticket) -> bool {
        true
    }

    fn hold(&self, _send: &mut (), _in_flight: usize, _queued: usize) -> bool {
        false
    }

    fn groups(
        &self,
        _send: &mut (),
        _in_flight: usize,
        _frames: &mut dyn Iterator<Item = &[u8]>,
    ) -> Option<Vec<Group>> {
        None
    }

    // NBD has no group frames and no fused commands: `groups` forms none.
    fn group_header(&self, _id: u64, _body: usize, _out: &mut Vec<u8>) {}

    fn fuse(&self, _id: u64, _members: &[&[u8]], _out: &mut Vec<u8>) {}

    fn split(&self, _reply: (), members: &[&Ticket]) -> Result<Vec<()>, ClientError> {
        Err(self.violation(format!("{} NBD requests were fused", members.len())))
    }

    fn sent(&self, _send: &mut (), _requests: usize, _grouped: usize) {}

    fn completed(&self, _send: &mut (), _outstanding: usize) {}

    fn reopen(&self, timeout: Duration) -> Result<Stream, ClientError> {
        let mut options = self.options.clone();
        options.connect_timeout = timeout;
        let (stream, details) = open(&self.uri, &options)?;
        self.check_same(&details)?;
        Ok(stream)
    }

    fn is_final(&self, e: &ClientError) -> bool {
        matches!(
            e,
            ClientError::ExportChanged { .. } | ClientError::Request { .. }
        )
    }

    fn goodbye(&self, _id: u64, out: &mut Vec<u8>) {
        self.encoder.encode_disconnect(out);
    }

    fn closed(&self) -> ClientError {
        closed(self.target())
    }

    fn violation(&self, reason: String) -> ClientError {
        ClientError::Violation {
            target: self.target().to_owned(),
            reason,
        }
    }

    fn io_error(&self, source: io::Error) -> ClientError {
        ClientError::Io {
            target: self.target().to_owned(),
            source,
        }
    }

    fn timed_out(&self, t: &Ticket, after: Duration) -> ClientError {
        ClientError::Timeout {
            target: self.target().to_owned(),
            op: t.sent.op,
            offset: t.sent.offset,
            length: t.sent.length,
            after,
        }
    }

    /// The caller's buffer is no longer written: it may return.
    fn abandon(&self, t: &mut Ticket) {
        t.dest = Dest::None;
    }

    fn reconnect_failed(&self, window: Duration, last: ClientError) -> ClientError {
        ClientError::ReconnectFailed {
            target: self.target().to_owned(),
            window,
            last: Box::new(last),
        }
    }

    fn refused(&self, e: &ClientError) -> Option<ClientError> {
        let ClientError::Connect { source, .. } = e else {
            return None;
        };
        (source.kind() == io::ErrorKind::ConnectionRefused).then(|| ClientError::Refusing {
            target: self.target().to_owned(),
            last: Box::new(copy_error(e)),
        })
    }

    /// Never called: every NBD request may be sent again.
    fn lost_in_flight(&self, _t: &Ticket) -> ClientError {
        self.closed()
    }

    fn copy_error(&self, e: &ClientError) -> ClientError {
        copy_error(e)
    }
}

/// A cloneable handle to one NBD connection, usable from many threads and
/// async tasks at once.
#[derive(Clone)]
pub struct Client {
    mux: Arc<Mux<NbdSession>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("details", self.details())
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
        let mux_options = MuxOptions {
            // NBD servers read requests as they come: no window.
            max_in_flight: usize::MAX,
            window_bytes: u64::MAX,
            request_timeout: options.request_timeout,
            reconnect: options.reconnect,
            connect_timeout: options.connect_timeout,
        };
        let session = NbdSession {
            encoder: RequestEncoder::new(details.transmission()),
            details,
            uri: uri.clone(),
            options: options.clone(),
        };
        let mux = Mux::start(session, stream, (), mux_options, READER_THREAD)?;
        Ok(Self { mux: Arc::new(mux) })
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
        &self.mux.proto().details
    }

    /// Issues a request; the returned receiver completes with its reply.
    pub(crate) fn submit(
        &self,
        request: Request<'_>,
        dest: Dest,
    ) -> Result<oneshot::Receiver<Result<Reply, ClientError>>, ClientError> {
        let session = self.mux.proto();
        let id = self.mux.fresh_id();
        let mut frame = Vec::new();
        let sent = session
            .encoder
            .encode_as(id, request, &mut frame)
            .map_err(|e| refused(&session.details, None, e))?;
        let ticket = Ticket {
            sent,
            dest,
            extents: None,
        };
        self.mux.submit(id, frame, ticket, 0)
    }

    pub(crate) fn wait_blocking(
        &self,
        rx: oneshot::Receiver<Result<Reply, ClientError>>,
    ) -> Result<Reply, ClientError> {
        self.mux.wait(rx)
    }

    /// Runs a request to completion asynchronously.
    pub async fn call(&self, request: Request<'_>) -> Result<Reply, ClientError> {
        let dest = match request {
            ClientRequest::Read { length, .. } => Dest::Owned(vec![0; length as usize]),
            _ => Dest::None,
        };
        let rx = self.submit(request, dest)?;
        rx.await.map_err(|_| closed(&self.details().target))?
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
            target: self.details().target.clone(),
            export: self.details().name.clone(),
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
            target: self.details().target.clone(),
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
        match rx.await.map_err(|_| closed(&self.details().target))?? {
            Reply::Data(d) => Ok(d),
            other => Err(self.unexpected(Op::Read, &other)),
        }
    }

    /// Writes `data` at `offset`.
    pub async fn write(
        &self,
        offset: u64,
        data: &[u8],
        durability: Durability,
    ) -> Result<(), ClientError> {
        let fua = durability.is_durable();
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
            source: copy_io(source),
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
        // Each kind stays itself: a refused connection copied as "the
        // server broke the protocol: cannot connect" misnamed the cause.
        ClientError::Connect { target, source } => ClientError::Connect {
            target: target.clone(),
            source: copy_io(source),
        },
        ClientError::ConnectTimeout { target, after } => ClientError::ConnectTimeout {
            target: target.clone(),
            after: *after,
        },
        ClientError::BadUri { uri, reason } => ClientError::BadUri {
            uri: uri.clone(),
            reason: reason.clone(),
        },
        ClientError::Tls { target, reason } => ClientError::Tls {
            target: target.clone(),
            reason: reason.clone(),
        },
        ClientError::Handshake { target, source } => ClientError::Handshake {
            target: target.clone(),
            source: source.clone(),
        },
        ClientError::Protocol { target, source } => ClientError::Protocol {
            target: target.clone(),
            source: source.clone(),
        },
        ClientError::Violation { target, reason } => ClientError::Violation {
            target: target.clone(),
            reason: reason.clone(),
        },
        ClientError::Timeout {
            target,
            op,
            offset,
            length,
            after,
        } => ClientError::Timeout {
            target: target.clone(),
            op: *op,
            offset: *offset,
            length: *length,
            after: *after,
        },
        ClientError::Refused {
            target,
            export,
            op,
            source,
        } => ClientError::Refused {
            target: target.clone(),
            export: export.clone(),
            op: *op,
            source: *source,
        },
        ClientError::Refusing { target, last } => ClientError::Refusing {
            target: target.clone(),
            last: Box::new(copy_error(last)),
        },
        ClientError::WrongProtocol { target, hint } => ClientError::WrongProtocol {
            target: target.clone(),
            hint,
        },
    }
}

/// An `io::Error` of the same kind, OS error and message.
fn copy_io(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}
