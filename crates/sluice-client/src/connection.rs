//! A pipelined connection driven from one thread: queue any number of
//! requests, send them with one write, then receive and complete every
//! reply that one read brought in. This is the hot loop the bench and
//! other single-threaded initiators use.

use std::collections::HashMap;
use std::io::{Read, Write};

use sluice_nbd_proto::client::{parse_block_status, parse_error_chunk, ReplyHeader};
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{Extent, HeaderStyle, NbdErrno, ReplyStyle, RequestHeader};

use crate::handshake::{handshake, ConnectOptions, ExportDetails, Socket};
use crate::{ClientError, NbdUri, Op};

/// Largest reply chunk accepted (32 MiB of data plus headroom).
const MAX_CHUNK: u64 = (32 << 20) + 4096;

/// One request to queue.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Request<'a> {
    /// Read `length` bytes.
    Read { offset: u64, length: u32 },
    /// Write `data`; durable on completion if `fua`.
    Write {
        offset: u64,
        data: &'a [u8],
        fua: bool,
    },
    /// Make completed writes durable.
    Flush,
    /// Discard a range.
    Trim { offset: u64, length: u64, fua: bool },
    /// Prefetch a range.
    Cache { offset: u64, length: u64 },
    /// Zero a range; `no_hole` keeps it allocated; `fast` fails unless quick.
    WriteZeroes {
        offset: u64,
        length: u64,
        no_hole: bool,
        fast: bool,
        fua: bool,
    },
    /// Allocation of a range (`base:allocation`); `req_one`: one extent.
    BlockStatus {
        offset: u64,
        length: u64,
        req_one: bool,
    },
}

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

/// What the reply decoder needs to know about a request in flight.
#[derive(Debug)]
pub(crate) struct Pending {
    op: Op,
    offset: u64,
    length: u64,
    /// Read data assembled from several chunks.
    assembly: Option<Vec<u8>>,
    error: Option<(NbdErrno, String)>,
    extents: Option<Vec<Extent>>,
}

/// Turns [`Request`]s into wire bytes; the sending half of a connection.
#[derive(Debug)]
pub(crate) struct RequestEncoder {
    pub(crate) details: ExportDetails,
    pub(crate) out: Vec<u8>,
    next_cookie: u64,
}

impl RequestEncoder {
    pub(crate) fn new(details: ExportDetails) -> Self {
        Self {
            details,
            out: Vec::with_capacity(64 * 1024),
            next_cookie: 1,
        }
    }

    fn unsupported(&self, op: Op) -> ClientError {
        ClientError::Unsupported {
            target: self.details.target.clone(),
            export: self.details.name.clone(),
            op,
        }
    }

    /// Appends a request to `out`; returns its cookie and what the reply
    /// decoder must be told.
    pub(crate) fn encode(&mut self, request: Request<'_>) -> Result<(u64, Pending), ClientError> {
        let d = &self.details;
        let fua_flag = |fua: bool| if fua && d.can_fua() { CMD_FLAG_FUA } else { 0 };
        let (op, kind, flags, offset, length, payload): (Op, u16, u16, u64, u64, &[u8]) =
            match request {
                Request::Read { offset, length } => {
                    (Op::Read, CMD_READ, 0, offset, u64::from(length), &[])
                }
                Request::Write { offset, data, fua } => {
                    let flags = fua_flag(fua)
                        | if d.header_style == HeaderStyle::Extended {
                            CMD_FLAG_PAYLOAD_LEN
                        } else {
                            0
                        };
                    (Op::Write, CMD_WRITE, flags, offset, data.len() as u64, data)
                }
                Request::Flush => {
                    if !d.can_flush() {
                        return Err(self.unsupported(Op::Flush));
                    }
                    (Op::Flush, CMD_FLUSH, 0, 0, 0, &[])
                }
                Request::Trim {
                    offset,
                    length,
                    fua,
                } => {
                    if !d.can_trim() {
                        return Err(self.unsupported(Op::Trim));
                    }
                    (Op::Trim, CMD_TRIM, fua_flag(fua), offset, length, &[])
                }
                Request::Cache { offset, length } => {
                    if !d.can_cache() {
                        return Err(self.unsupported(Op::Cache));
                    }
                    (Op::Cache, CMD_CACHE, 0, offset, length, &[])
                }
                Request::WriteZeroes {
                    offset,
                    length,
                    no_hole,
                    fast,
                    fua,
                } => {
                    if !d.can_zero() || (fast && d.flags & FLAG_SEND_FAST_ZERO == 0) {
                        return Err(self.unsupported(Op::WriteZeroes));
                    }
                    let flags = fua_flag(fua)
                        | if no_hole { CMD_FLAG_NO_HOLE } else { 0 }
                        | if fast { CMD_FLAG_FAST_ZERO } else { 0 };
                    (
                        Op::WriteZeroes,
                        CMD_WRITE_ZEROES,
                        flags,
                        offset,
                        length,
                        &[],
                    )
                }
                Request::BlockStatus {
                    offset,
                    length,
                    req_one,
                } => {
                    if d.base_allocation_id.is_none() {
                        return Err(self.unsupported(Op::BlockStatus));
                    }
                    let flags = if req_one { CMD_FLAG_REQ_ONE } else { 0 };
                    (
                        Op::BlockStatus,
                        CMD_BLOCK_STATUS,
                        flags,
                        offset,
                        length,
                        &[],
                    )
                }
            };
        if d.header_style == HeaderStyle::Compact && length > u64::from(u32::MAX) {
            return Err(self.unsupported(op));
        }
        let cookie = self.next_cookie;
        self.next_cookie = self.next_cookie.wrapping_add(1).max(1);
        RequestHeader {
            flags,
            kind,
            cookie,
            offset,
            length,
        }
        .encode(d.header_style, &mut self.out);
        self.out.extend_from_slice(payload);
        Ok((
            cookie,
            Pending {
                op,
                offset,
                length,
                assembly: None,
                error: None,
                extents: None,
            },
        ))
    }

    /// Appends `NBD_CMD_DISC`.
    pub(crate) fn encode_disconnect(&mut self) {
        RequestHeader {
            flags: 0,
            kind: CMD_DISC,
            cookie: 0,
            offset: 0,
            length: 0,
        }
        .encode(self.details.header_style, &mut self.out);
    }
}

/// Parses replies and matches them to requests; the receiving half.
#[derive(Debug)]
pub(crate) struct ReplyDecoder {
    target: String,
    style: ReplyStyle,
    inbuf: Vec<u8>,
    start: usize,
    end: usize,
    pending: HashMap<u64, Pending>,
}

impl ReplyDecoder {
    pub(crate) fn new(details: &ExportDetails) -> Self {
        Self {
            target: details.target.clone(),
            style: details.reply_style,
            inbuf: vec![0; 256 * 1024],
            start: 0,
            end: 0,
            pending: HashMap::new(),
        }
    }

    pub(crate) fn register(&mut self, cookie: u64, pending: Pending) {
        self.pending.insert(cookie, pending);
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    fn violation(&self, reason: String) -> ClientError {
        ClientError::Violation {
            target: self.target.clone(),
            reason,
        }
    }

    /// One read from `socket` into the buffer.
    pub(crate) fn fill(&mut self, socket: &mut impl Read) -> Result<(), ClientError> {
        if self.end == self.inbuf.len() {
            if self.start > 0 {
                self.inbuf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let grown = self.inbuf.len() * 2;
                self.inbuf.resize(grown, 0);
            }
        }
        let n = loop {
            match socket.read(&mut self.inbuf[self.end..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(ClientError::Io {
                        target: self.target.clone(),
                        source,
                    })
                }
            }
        };
        if n == 0 {
            return Err(ClientError::Closed {
                target: self.target.clone(),
            });
        }
        self.end += n;
        Ok(())
    }

    /// Makes sure `need` bytes from `start` fit in the buffer.
    fn reserve(&mut self, need: usize) {
        if self.inbuf.len() - self.start < need {
            self.inbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.inbuf.len() < need {
                self.inbuf.resize(need, 0);
            }
        }
    }

    fn finish<'a>(p: Pending, cookie: u64, target: &str, data: Option<&'a [u8]>) -> Completion<'a> {
        let result = match p.error {
            Some((errno, message)) => Err(ClientError::Request {
                target: target.to_owned(),
                op: p.op,
                offset: p.offset,
                length: p.length,
                errno,
                message,
            }),
            None => Ok(match (p.op, p.extents) {
                (Op::BlockStatus, Some(e)) => Outcome::Extents(e),
                (Op::Read, _) => Outcome::Data(data.unwrap_or(&[])),
                _ => Outcome::Done,
            }),
        };
        Completion {
            cookie,
            op: p.op,
            offset: p.offset,
            length: p.length,
            result,
        }
    }

    /// Completes every reply fully in the buffer; returns how many.
    pub(crate) fn process(
        &mut self,
        on_complete: &mut impl FnMut(Completion<'_>),
    ) -> Result<usize, ClientError> {
        let mut done = 0;
        loop {
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
            let avail = &self.inbuf[self.start..self.end];
            let (header, hlen) = match ReplyHeader::decode(avail, self.style) {
                Ok(Some(h)) => h,
                Ok(None) => {
                    self.reserve(64);
                    return Ok(done);
                }
                Err(source) => {
                    return Err(ClientError::Protocol {
                        target: self.target.clone(),
                        source,
                    })
                }
            };
            match header {
                ReplyHeader::Simple { cookie, error } => {
                    let Some(p) = self.pending.get(&cookie) else {
                        return Err(self.violation(format!("reply for unknown cookie {cookie}")));
                    };
                    let data_len = if p.op == Op::Read && error == 0 {
                        p.length as usize
                    } else {
                        0
                    };
                    if avail.len() < hlen + data_len {
                        self.reserve(hlen + data_len);
                        return Ok(done);
                    }
                    let Some(mut p) = self.pending.remove(&cookie) else {
                        continue;
                    };
                    if error != 0 {
                        p.error = Some((NbdErrno::from_code(error), String::new()));
                    }
                    let data_start = self.start + hlen;
                    self.start += hlen + data_len;
                    let data = &self.inbuf[data_start..data_start + data_len];
                    on_complete(Self::finish(p, cookie, &self.target, Some(data)));
                    done += 1;
                }
                ReplyHeader::Chunk {
                    flags,
                    kind,
                    cookie,
                    length,
                    ..
                } => {
                    if length > MAX_CHUNK {
                        return Err(self.violation(format!("reply chunk of {length} bytes")));
                    }
                    let total = hlen + length as usize;
                    if avail.len() < total {
                        self.reserve(total);
                        return Ok(done);
                    }
                    let payload_start = self.start + hlen;
                    self.start += total;
                    let payload = &self.inbuf[payload_start..payload_start + length as usize];
                    let target = &self.target;
                    let Some(p) = self.pending.get_mut(&cookie) else {
                        return Err(ClientError::Violation {
                            target: target.clone(),
                            reason: format!("reply chunk for unknown cookie {cookie}"),
                        });
                    };
                    let last = flags & REPLY_FLAG_DONE != 0;
                    let mut whole_read: Option<(usize, usize)> = None;
                    match kind {
                        REPLY_TYPE_NONE => {}
                        REPLY_TYPE_OFFSET_DATA | REPLY_TYPE_OFFSET_HOLE => {
                            let bad = || ClientError::Violation {
                                target: target.clone(),
                                reason: format!("malformed read chunk for cookie {cookie}"),
                            };
                            if p.op != Op::Read || payload.len() < 8 {
                                return Err(bad());
                            }
                            let at =
                                u64::from_be_bytes(payload[..8].try_into().map_err(|_| bad())?);
                            let (len, data) = if kind == REPLY_TYPE_OFFSET_DATA {
                                (payload.len() as u64 - 8, Some(&payload[8..]))
                            } else {
                                let l = payload.get(8..12).ok_or_else(bad)?;
                                (
                                    u64::from(u32::from_be_bytes(l.try_into().map_err(|_| bad())?)),
                                    None,
                                )
                            };
                            let rel = at.checked_sub(p.offset).ok_or_else(bad)?;
                            if rel.checked_add(len).is_none_or(|e| e > p.length) {
                                return Err(bad());
                            }
                            let whole = rel == 0 && len == p.length && p.assembly.is_none();
                            if whole && last && data.is_some() {
                                whole_read =
                                    Some((payload_start + 8, payload_start + length as usize));
                            } else {
                                let buf =
                                    p.assembly.get_or_insert_with(|| vec![0; p.length as usize]);
                                let dst = &mut buf[rel as usize..(rel + len) as usize];
                                match data {
                                    Some(d) => dst.copy_from_slice(d),
                                    None => dst.fill(0),
                                }
                            }
                        }
                        REPLY_TYPE_BLOCK_STATUS | REPLY_TYPE_BLOCK_STATUS_EXT => {
                            let (_, extents) =
                                parse_block_status(kind, payload).map_err(|source| {
                                    ClientError::Protocol {
                                        target: target.clone(),
                                        source,
                                    }
                                })?;
                            p.extents = Some(extents);
                        }
                        k if k & 0x8000 != 0 => {
                            let (errno, message, _) =
                                parse_error_chunk(k, payload).map_err(|source| {
                                    ClientError::Protocol {
                                        target: target.clone(),
                                        source,
                                    }
                                })?;
                            p.error.get_or_insert((errno, message));
                        }
                        other => {
                            return Err(ClientError::Violation {
                                target: target.clone(),
                                reason: format!("unknown reply chunk type {other}"),
                            })
                        }
                    }
                    if last {
                        let Some(mut p) = self.pending.remove(&cookie) else {
                            continue;
                        };
                        let assembly = p.assembly.take();
                        let data: Option<&[u8]> = match (whole_read, &assembly) {
                            (Some((a, b)), _) => Some(&self.inbuf[a..b]),
                            (None, Some(v)) => Some(v.as_slice()),
                            (None, None) => None,
                        };
                        if p.op == Op::Read && p.error.is_none() && data.is_none() && p.length > 0 {
                            return Err(ClientError::Violation {
                                target: self.target.clone(),
                                reason: format!(
                                    "read reply for cookie {cookie} ended without data"
                                ),
                            });
                        }
                        on_complete(Self::finish(p, cookie, &self.target, data));
                        done += 1;
                    }
                }
            }
        }
    }
}

/// A negotiated NBD connection with many requests in flight.
#[derive(Debug)]
pub struct Connection {
    socket: Socket,
    encoder: RequestEncoder,
    decoder: ReplyDecoder,
}

impl Connection {
    /// Connects to `uri` and negotiates with `options`.
    pub fn connect(uri: &NbdUri, options: &ConnectOptions) -> Result<Self, ClientError> {
        let (socket, details) = handshake(uri, options)?;
        let decoder = ReplyDecoder::new(&details);
        Ok(Self {
            socket,
            encoder: RequestEncoder::new(details),
            decoder,
        })
    }

    /// What the handshake settled.
    pub fn details(&self) -> &ExportDetails {
        &self.encoder.details
    }

    /// Requests queued or sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.decoder.in_flight()
    }

    /// Queues a request (sent by [`send`](Self::send)); returns its cookie.
    pub fn queue(&mut self, request: Request<'_>) -> Result<u64, ClientError> {
        let (cookie, pending) = self.encoder.encode(request)?;
        self.decoder.register(cookie, pending);
        Ok(cookie)
    }

    /// Sends every queued request with one write.
    pub fn send(&mut self) -> Result<(), ClientError> {
        if self.encoder.out.is_empty() {
            return Ok(());
        }
        let r = self.socket.write_all(&self.encoder.out);
        self.encoder.out.clear();
        r.map_err(|source| ClientError::Io {
            target: self.encoder.details.target.clone(),
            source,
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
            let done = self.decoder.process(&mut on_complete)?;
            if done > 0 || self.decoder.in_flight() == 0 {
                return Ok(done);
            }
            self.decoder.fill(&mut self.socket)?;
        }
    }

    /// Sends `NBD_CMD_DISC` and closes.
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        self.encoder.encode_disconnect();
        let r = self.send();
        self.socket.shutdown();
        r
    }

    pub(crate) fn into_parts(self) -> (Socket, RequestEncoder, ReplyDecoder) {
        (self.socket, self.encoder, self.decoder)
    }
}
