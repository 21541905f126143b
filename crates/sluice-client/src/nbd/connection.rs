//! A pipelined connection driven from one thread: queue any number of
//! requests, send them with one write, then receive and complete every
//! reply that one read brought in. This is the hot loop the bench and
//! other single-threaded initiators use, so nothing here allocates per
//! request once warmed up: the output and receive buffers are reused,
//! read data is lent straight out of the receive buffer, and reads that
//! arrive in several chunks are assembled in recycled buffers.
//!
//! A `Connection` does not reconnect (that needs copies of every request
//! in flight, which [`Client`](crate::Client) keeps); a lost connection or
//! a request timeout is an error and the connection is then unusable.

use std::collections::HashMap;
use std::io;

use sluice_nbd_proto::{
    ClientRequest, CookieTable, Extent, Finished, ReplyDecoder, ReplyEvent, RequestEncoder, Sent,
    ServerError, Step,
};

use super::handshake::{open, ConnectOptions, ExportDetails};
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;
use crate::{ClientError, NbdUri, Op};

/// One request to queue (the protocol crate's request type).
pub type Request<'a> = ClientRequest<'a>;

/// What a successful request produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// The request succeeded (writes, flush, trim, zeroing, cache).
    Done,
    /// Read data; valid until the callback returns.
    Data(&'a [u8]),
    /// Block status extents.
    Extents(Vec<Extent>),
}

/// A finished request, passed to the callback of [`Connection::receive`].
#[derive(Debug)]
pub struct Completion<'a> {
    /// Cookie returned when the request was queued.
    pub cookie: u64,
    /// The operation.
    pub op: Op,
    /// Its offset.
    pub offset: u64,
    /// Its length.
    pub length: u64,
    /// Outcome or the server's error.
    pub result: Result<Outcome<'a>, ClientError>,
}

/// The server's error for `sent`, as a [`ClientError`].
pub(crate) fn request_error(target: &str, sent: &Sent, e: ServerError) -> ClientError {
    ClientError::Request {
        target: target.to_owned(),
        op: sent.op,
        offset: sent.offset,
        length: sent.length,
        errno: e.errno,
        message: e.message,
    }
}

pub(crate) fn refused(
    details: &ExportDetails,
    op_hint: Option<Op>,
    e: sluice_nbd_proto::RequestError,
) -> ClientError {
    let op = match e {
        sluice_nbd_proto::RequestError::Unsupported(op)
        | sluice_nbd_proto::RequestError::ReadOnly(op)
        | sluice_nbd_proto::RequestError::TooLong { op, .. } => op,
        _ => op_hint.unwrap_or(Op::Read),
    };
    ClientError::Refused {
        target: details.target.clone(),
        export: details.name.clone(),
        op,
        source: e,
    }
}

/// Per-request state the decoder does not keep: read data arriving in
/// several chunks and block status extents.
#[derive(Debug, Default)]
struct Partial {
    assembly: HashMap<u64, Vec<u8>>,
    extents: HashMap<u64, Vec<Extent>>,
    /// Assembly buffers to reuse.
    spare: Vec<Vec<u8>>,
}

/// A negotiated NBD connection with many requests in flight.
#[derive(Debug)]
pub struct Connection {
    stream: Stream,
    details: ExportDetails,
    encoder: RequestEncoder,
    decoder: ReplyDecoder,
    table: CookieTable,
    out: Vec<u8>,
    inbuf: RecvBuf,
    partial: Partial,
    options: ConnectOptions,
}

impl Connection {
    /// Connects to `uri` and negotiates with `options`.
    pub fn connect(uri: &NbdUri, options: &ConnectOptions) -> Result<Self, ClientError> {
        let (stream, details) = open(uri, options)?;
        let t = details.transmission();
        Ok(Self {
            stream,
            encoder: RequestEncoder::new(t),
            decoder: ReplyDecoder::new(t.reply_style, t.base_allocation_id),
            table: CookieTable::with_capacity(256),
            out: Vec::with_capacity(64 * 1024),
            inbuf: RecvBuf::new(),
            partial: Partial::default(),
            details,
            options: options.clone(),
        })
    }

    /// What the handshake settled.
    pub fn details(&self) -> &ExportDetails {
        &self.details
    }

    /// Requests queued or sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.table.len()
    }

    /// Queues a request (sent by [`send`](Self::send)); returns its cookie.
    pub fn queue(&mut self, request: Request<'_>) -> Result<u64, ClientError> {
        let sent = self
            .encoder
            .encode(request, &mut self.out)
            .map_err(|e| refused(&self.details, None, e))?;
        self.table.insert(sent);
        Ok(sent.cookie)
    }

    fn io(&self, source: io::Error) -> ClientError {
        ClientError::Io {
            target: self.details.target.clone(),
            source,
        }
    }

    /// Sends every queued request with one write.
    pub fn send(&mut self) -> Result<(), ClientError> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.out);
        self.out.clear();
        r.map_err(|e| {
            // Part of a frame may have gone: nothing else can follow it.
            self.stream.shutdown();
            self.io(e)
        })
    }

    /// Sends what is queued, waits for at least one reply (if any request
    /// is in flight), then completes every reply already received, calling
    /// `on_complete` for each. Returns how many completed.
    pub fn receive(
        &mut self,
        mut on_complete: impl FnMut(Completion<'_>),
    ) -> Result<usize, ClientError> {
        self.send()?;
        loop {
            let done = self.process(&mut on_complete)?;
            if done > 0 || self.table.is_empty() {
                return Ok(done);
            }
            match self.inbuf.fill(&mut self.stream) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(ClientError::Closed {
                        target: self.details.target.clone(),
                    })
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(self.timeout());
                }
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    /// The request timeout ran out with nothing received: names the
    /// oldest request still waiting.
    fn timeout(&self) -> ClientError {
        let after = self.options.request_timeout.unwrap_or_default();
        let oldest = self.table.iter().min_by_key(|s| s.cookie).copied();
        match oldest {
            Some(s) => ClientError::Timeout {
                target: self.details.target.clone(),
                op: s.op,
                offset: s.offset,
                length: s.length,
                after,
            },
            None => ClientError::Closed {
                target: self.details.target.clone(),
            },
        }
    }

    /// Completes every reply fully in the receive buffer.
    fn process(
        &mut self,
        on_complete: &mut impl FnMut(Completion<'_>),
    ) -> Result<usize, ClientError> {
        let mut done = 0;
        loop {
            let step = self
                .decoder
                .decode(self.inbuf.data(), &mut self.table)
                .map_err(|source| ClientError::Reply {
                    target: self.details.target.clone(),
                    source,
                })?;
            let d = match step {
                Step::NeedMore(n) => {
                    self.inbuf.reserve(n);
                    return Ok(done);
                }
                Step::Decoded(d) => d,
            };
            // A read answered whole in one piece is lent out in place.
            let mut whole: Option<(usize, usize)> = None;
            match d.event {
                ReplyEvent::Data { cookie, rel, data } => {
                    let single = d
                        .finished
                        .as_ref()
                        .is_some_and(|f| rel == 0 && data.len() as u64 == f.sent.length)
                        && !self.partial.assembly.contains_key(&cookie);
                    if single {
                        let at = data.as_ptr() as usize - self.inbuf.data().as_ptr() as usize;
                        whole = Some((at, at + data.len()));
                    } else {
                        let length = read_length(&self.table, cookie, &d.finished);
                        let buf = assembly(&mut self.partial, cookie, length);
                        buf[rel as usize..rel as usize + data.len()].copy_from_slice(data);
                    }
                }
                ReplyEvent::Hole { cookie, rel, len } => {
                    let length = read_length(&self.table, cookie, &d.finished);
                    let buf = assembly(&mut self.partial, cookie, length);
                    buf[rel as usize..(rel + len) as usize].fill(0);
                }
                ReplyEvent::Extents { cookie, extents } => {
                    self.partial.extents.insert(cookie, extents);
                }
                ReplyEvent::Nothing => {}
            }
            let used = d.used;
            let Some(f) = d.finished else {
                self.inbuf.consume(used);
                continue;
            };
            let cookie = f.sent.cookie;
            let assembled = self.partial.assembly.remove(&cookie);
            let extents = self.partial.extents.remove(&cookie);
            let result = match f.result {
                Err(e) => Err(request_error(&self.details.target, &f.sent, e)),
                Ok(()) => Ok(match f.sent.op {
                    Op::Read => match (&whole, &assembled) {
                        (Some((a, b)), _) => Outcome::Data(&self.inbuf.data()[*a..*b]),
                        (None, Some(v)) => Outcome::Data(v),
                        (None, None) => Outcome::Data(&[]),
                    },
                    Op::BlockStatus => Outcome::Extents(extents.unwrap_or_default()),
                    _ => Outcome::Done,
                }),
            };
            on_complete(Completion {
                cookie,
                op: f.sent.op,
                offset: f.sent.offset,
                length: f.sent.length,
                result,
            });
            if let Some(v) = assembled {
                self.partial.spare.push(v);
            }
            self.inbuf.consume(used);
            done += 1;
        }
    }

    /// Sends `NBD_CMD_DISC` and closes.
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        self.encoder.encode_disconnect(&mut self.out);
        let r = self.send();
        self.stream.shutdown();
        r
    }
}

/// Length of the read with `cookie` (still in the table, or just
/// finished).
fn read_length(table: &CookieTable, cookie: u64, finished: &Option<Finished>) -> usize {
    finished
        .as_ref()
        .map(|f| f.sent.length)
        .or_else(|| table.get(cookie).map(|s| s.length))
        .unwrap_or(0) as usize
}

/// The assembly buffer of read `cookie` (of `length` bytes), taken from
/// the spare ones when it starts.
fn assembly(p: &mut Partial, cookie: u64, length: usize) -> &mut Vec<u8> {
    let spare = &mut p.spare;
    p.assembly.entry(cookie).or_insert_with(|| {
        let mut v = spare.pop().unwrap_or_default();
        v.clear();
        v.resize(length, 0);
        v
    })
}
