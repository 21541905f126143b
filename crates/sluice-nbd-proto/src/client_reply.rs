//! The client's receiving half: the table of requests in flight (by
//! cookie) and a decoder that parses replies (simple, structured and
//! extended), checks every chunk against the request it answers, and
//! hands out read data as slices of the caller's receive buffer.
//!
//! Anything a correct server cannot send is an error, never quietly
//! empty data: a cookie with no request, a data chunk for anything but a
//! READ, data outside the requested range, a READ that ends without all
//! its bytes, block status for a context that was not selected.

use std::collections::HashMap;

use thiserror::Error;

use crate::client::{parse_block_status, parse_error_chunk, ReplyDecodeError, ReplyHeader};
use crate::client_request::{Op, Sent};
use crate::consts::*;
use crate::errno::NbdErrno;
use crate::reply::{Extent, ReplyStyle};

/// Largest reply chunk accepted: the spec's largest payload (32 MiB) with
/// room for headers. A server that sends more is broken or hostile.
pub const MAX_REPLY_CHUNK: u64 = (32 << 20) + 4096;

/// An error the server reported for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The errno.
    pub errno: NbdErrno,
    /// Its message (empty for simple replies).
    pub message: String,
    /// The offset an `ERROR_OFFSET` chunk names.
    pub offset: Option<u64>,
}

/// A reply that breaks the protocol; the connection cannot go on.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyError {
    #[error(transparent)]
    Decode(#[from] ReplyDecodeError),
    #[error("reply for cookie {0}, which no request in flight has")]
    UnknownCookie(u64),
    #[error("reply chunk of type {kind} for the {op} with cookie {cookie}, which cannot have one")]
    UnexpectedChunk { cookie: u64, op: Op, kind: u16 },
    #[error("read chunk for {len} bytes at offset {at} lies outside the read of {length} bytes at {offset} (cookie {cookie})")]
    OutsideRead {
        cookie: u64,
        at: u64,
        len: u64,
        offset: u64,
        length: u64,
    },
    #[error("the read with cookie {cookie} ended with {covered} of its {length} bytes")]
    MissingData {
        cookie: u64,
        covered: u64,
        length: u64,
    },
    #[error("the block status request with cookie {0} ended without extents")]
    MissingExtents(u64),
    #[error(
        "block status for context {found}, but only {selected:?} was selected (cookie {cookie})"
    )]
    WrongContext {
        cookie: u64,
        found: u32,
        selected: Option<u32>,
    },
    #[error("reply chunk of {0} bytes is larger than this client accepts")]
    ChunkTooLarge(u64),
}

/// A request waiting for its reply, as the decoder tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InFlight {
    /// What was sent.
    sent: Sent,
    /// Read bytes the server has accounted for so far.
    covered: u64,
    /// Extents have arrived.
    has_extents: bool,
    /// The first error the server reported.
    error: Option<ServerError>,
}

impl InFlight {
    fn new(sent: Sent) -> Self {
        Self {
            sent,
            covered: 0,
            has_extents: false,
            error: None,
        }
    }
}

/// Requests in flight, by cookie.
#[derive(Debug, Default, Clone)]
pub struct CookieTable {
    map: HashMap<u64, InFlight>,
}

impl CookieTable {
    /// An empty table with room for `capacity` requests.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            map: HashMap::with_capacity(capacity),
        }
    }

    /// Records a sent request.
    pub fn insert(&mut self, sent: Sent) {
        self.map.insert(sent.cookie, InFlight::new(sent));
    }

    /// Forgets a request (e.g. one its caller gave up on); its reply will
    /// then be an [`ReplyError::UnknownCookie`].
    pub fn remove(&mut self, cookie: u64) -> Option<Sent> {
        self.map.remove(&cookie).map(|f| f.sent)
    }

    /// Requests in flight.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The request with `cookie`, if in flight.
    pub fn get(&self, cookie: u64) -> Option<&Sent> {
        self.map.get(&cookie).map(|f| &f.sent)
    }

    /// Every request in flight, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Sent> {
        self.map.values().map(|f| &f.sent)
    }

    /// Whether `cookie` is in flight.
    pub fn contains(&self, cookie: u64) -> bool {
        self.map.contains_key(&cookie)
    }

    /// Forgets what partial replies delivered (the connection broke and
    /// every request in flight will be sent again).
    pub fn restart_all(&mut self) {
        for f in self.map.values_mut() {
            *f = InFlight::new(f.sent);
        }
    }
}

/// What one reply or chunk carried.
#[derive(Debug, PartialEq, Eq)]
pub enum ReplyEvent<'a> {
    /// Read data: `data` belongs `rel` bytes into the request's range.
    Data {
        cookie: u64,
        rel: u64,
        data: &'a [u8],
    },
    /// `len` bytes at `rel` into the request's range read as zeroes.
    Hole { cookie: u64, rel: u64, len: u64 },
    /// Extents of a block status request.
    Extents { cookie: u64, extents: Vec<Extent> },
    /// Bookkeeping only (an error chunk, a `NONE` chunk, a simple reply).
    Nothing,
}

/// A request whose reply is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// What was sent.
    pub sent: Sent,
    /// Success, or the server's error.
    pub result: Result<(), ServerError>,
}

/// One decoded message.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Bytes of the buffer it used.
    pub used: usize,
    /// What it carried.
    pub event: ReplyEvent<'a>,
    /// Set when this was the request's last reply.
    pub finished: Option<Finished>,
}

/// The result of one [`ReplyDecoder::decode`].
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// The buffer must hold at least this many bytes before the next
    /// message can be decoded.
    NeedMore(usize),
    /// A message.
    Decoded(Decoded<'a>),
}

/// Parses replies in the negotiated style against a [`CookieTable`].
#[derive(Debug, Clone, Copy)]
pub struct ReplyDecoder {
    style: ReplyStyle,
    base_allocation_id: Option<u32>,
}

impl ReplyDecoder {
    /// A decoder for replies in `style`; block status is accepted only for
    /// `base_allocation_id`.
    pub fn new(style: ReplyStyle, base_allocation_id: Option<u32>) -> Self {
        Self {
            style,
            base_allocation_id,
        }
    }

    /// Decodes the message at the front of `buf` without consuming it,
    /// updating `table` (a finished request leaves it).
    pub fn decode<'a>(
        &self,
        buf: &'a [u8],
        table: &mut CookieTable,
    ) -> Result<Step<'a>, ReplyError> {
        let Some((header, hlen)) = ReplyHeader::decode(buf, self.style)? else {
            return Ok(Step::NeedMore(
                match self.style {
                    ReplyStyle::Extended => EXTENDED_REPLY_HEADER_LEN,
                    _ => SIMPLE_REPLY_HEADER_LEN,
                }
                .max(buf.len() + 1),
            ));
        };
        match header {
            ReplyHeader::Simple { cookie, error } => {
                let f = table
                    .map
                    .get(&cookie)
                    .ok_or(ReplyError::UnknownCookie(cookie))?;
                let data_len = if f.sent.op == Op::Read && error == 0 {
                    f.sent.length as usize
                } else {
                    0
                };
                let Some(data) = buf.get(hlen..hlen + data_len) else {
                    return Ok(Step::NeedMore(hlen + data_len));
                };
                if f.sent.op == Op::BlockStatus && error == 0 {
                    return Err(ReplyError::MissingExtents(cookie));
                }
                let sent = f.sent;
                table.map.remove(&cookie);
                let result = if error == 0 {
                    Ok(())
                } else {
                    Err(ServerError {
                        errno: NbdErrno::from_code(error),
                        message: String::new(),
                        offset: None,
                    })
                };
                let event = if data_len > 0 {
                    ReplyEvent::Data {
                        cookie,
                        rel: 0,
                        data,
                    }
                } else {
                    ReplyEvent::Nothing
                };
                Ok(Step::Decoded(Decoded {
                    used: hlen + data_len,
                    event,
                    finished: Some(Finished { sent, result }),
                }))
            }
            ReplyHeader::Chunk {
                flags,
                kind,
                cookie,
                length,
                ..
            } => {
                if length > MAX_REPLY_CHUNK {
                    return Err(ReplyError::ChunkTooLarge(length));
                }
                let total = hlen + length as usize;
                let Some(payload) = buf.get(hlen..total) else {
                    return Ok(Step::NeedMore(total));
                };
                let f = table
                    .map
                    .get_mut(&cookie)
                    .ok_or(ReplyError::UnknownCookie(cookie))?;
                let event = self.chunk(f, kind, payload)?;
                let finished = if flags & REPLY_FLAG_DONE != 0 {
                    let f = table
                        .map
                        .remove(&cookie)
                        .ok_or(ReplyError::UnknownCookie(cookie))?;
                    Some(Self::finish(f)?)
                } else {
                    None
                };
                Ok(Step::Decoded(Decoded {
                    used: total,
                    event,
                    finished,
                }))
            }
        }
    }

    fn chunk<'a>(
        &self,
        f: &mut InFlight,
        kind: u16,
        payload: &'a [u8],
    ) -> Result<ReplyEvent<'a>, ReplyError> {
        let cookie = f.sent.cookie;
        let unexpected = || ReplyError::UnexpectedChunk {
            cookie,
            op: f.sent.op,
            kind,
        };
        match kind {
            REPLY_TYPE_NONE if payload.is_empty() => Ok(ReplyEvent::Nothing),
            REPLY_TYPE_OFFSET_DATA | REPLY_TYPE_OFFSET_HOLE => {
                if f.sent.op != Op::Read {
                    return Err(unexpected());
                }
                let bad = || ReplyDecodeError::BadPayload {
                    what: "read chunk",
                    len: payload.len(),
                };
                let at = payload
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_be_bytes)
                    .ok_or_else(bad)?;
                let (len, data) = if kind == REPLY_TYPE_OFFSET_DATA {
                    (payload.len() as u64 - 8, Some(&payload[8..]))
                } else {
                    if payload.len() != 12 {
                        return Err(bad().into());
                    }
                    let l = u32::from_be_bytes([payload[8], payload[9], payload[10], payload[11]]);
                    (u64::from(l), None)
                };
                let outside = || ReplyError::OutsideRead {
                    cookie,
                    at,
                    len,
                    offset: f.sent.offset,
                    length: f.sent.length,
                };
                let rel = at.checked_sub(f.sent.offset).ok_or_else(outside)?;
                if rel.checked_add(len).is_none_or(|end| end > f.sent.length) {
                    return Err(outside());
                }
                f.covered += len;
                Ok(match data {
                    Some(data) => ReplyEvent::Data { cookie, rel, data },
                    None => ReplyEvent::Hole { cookie, rel, len },
                })
            }
            REPLY_TYPE_BLOCK_STATUS | REPLY_TYPE_BLOCK_STATUS_EXT => {
                let compact_ok =
                    kind == REPLY_TYPE_BLOCK_STATUS && self.style == ReplyStyle::Structured;
                let ext_ok =
                    kind == REPLY_TYPE_BLOCK_STATUS_EXT && self.style == ReplyStyle::Extended;
                if f.sent.op != Op::BlockStatus || !(compact_ok || ext_ok) {
                    return Err(unexpected());
                }
                let (id, extents) = parse_block_status(kind, payload)?;
                if Some(id) != self.base_allocation_id {
                    return Err(ReplyError::WrongContext {
                        cookie,
                        found: id,
                        selected: self.base_allocation_id,
                    });
                }
                f.has_extents = true;
                Ok(ReplyEvent::Extents { cookie, extents })
            }
            REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
                let (errno, message, offset) = parse_error_chunk(kind, payload)?;
                f.error.get_or_insert(ServerError {
                    errno,
                    message,
                    offset,
                });
                Ok(ReplyEvent::Nothing)
            }
            _ => Err(unexpected()),
        }
    }

    fn finish(f: InFlight) -> Result<Finished, ReplyError> {
        let cookie = f.sent.cookie;
        if let Some(e) = f.error {
            return Ok(Finished {
                sent: f.sent,
                result: Err(e),
            });
        }
        match f.sent.op {
            Op::Read if f.covered != f.sent.length => Err(ReplyError::MissingData {
                cookie,
                covered: f.covered,
                length: f.sent.length,
            }),
            Op::BlockStatus if !f.has_extents => Err(ReplyError::MissingExtents(cookie)),
            _ => Ok(Finished {
                sent: f.sent,
                result: Ok(()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{encode_block_status, encode_chunk_header, encode_error, encode_ok};

    fn sent(cookie: u64, op: Op, offset: u64, length: u64) -> Sent {
        Sent {
            cookie,
            op,
            offset,
            length,
        }
    }

    fn decoded<'a>(step: Step<'a>) -> Decoded<'a> {
        match step {
            Step::Decoded(d) => d,
            Step::NeedMore(n) => panic!("needs {n} bytes"),
        }
    }

    #[test]
    fn simple_read_reply_carries_the_data() {
        let d = ReplyDecoder::new(ReplyStyle::Simple, None);
        let mut t = CookieTable::default();
        t.insert(sent(9, Op::Read, 100, 3));
        #[rustfmt::skip]
        let bytes = [
            0x67, 0x44, 0x66, 0x98, // simple magic
            0, 0, 0, 0, // error
            0, 0, 0, 0, 0, 0, 0, 9, // cookie
            b'x', b'y', b'z',
        ];
        assert_eq!(d.decode(&bytes[..17], &mut t), Ok(Step::NeedMore(19)));
        let got = decoded(d.decode(&bytes, &mut t).unwrap());
        assert_eq!(got.used, 19);
        assert_eq!(
            got.event,
            ReplyEvent::Data {
                cookie: 9,
                rel: 0,
                data: b"xyz"
            }
        );
        assert_eq!(got.finished.unwrap().result, Ok(()));
        assert!(t.is_empty());
        // The same reply again is for a cookie no longer in flight.
        assert_eq!(d.decode(&bytes, &mut t), Err(ReplyError::UnknownCookie(9)));
    }

    #[test]
    fn structured_read_in_pieces_with_a_hole() {
        let d = ReplyDecoder::new(ReplyStyle::Structured, None);
        let mut t = CookieTable::default();
        t.insert(sent(4, Op::Read, 4096, 8));
        #[rustfmt::skip]
        let data_chunk = [
            0x66, 0x8e, 0x33, 0xef, // structured magic
            0, 0, 0, 1, // no flags, OFFSET_DATA
            0, 0, 0, 0, 0, 0, 0, 4,
            0, 0, 0, 11, // length
            0, 0, 0, 0, 0, 0, 0x10, 0x04, // offset 4100
            1, 2, 3,
        ];
        #[rustfmt::skip]
        let hole_chunk = [
            0x66, 0x8e, 0x33, 0xef,
            0, 1, 0, 2, // DONE, OFFSET_HOLE
            0, 0, 0, 0, 0, 0, 0, 4,
            0, 0, 0, 12,
            0, 0, 0, 0, 0, 0, 0x10, 0x00, // offset 4096
            0, 0, 0, 4, // 4 bytes
        ];
        let a = decoded(d.decode(&data_chunk, &mut t).unwrap());
        assert_eq!(
            a.event,
            ReplyEvent::Data {
                cookie: 4,
                rel: 4,
                data: &[1, 2, 3]
            }
        );
        assert!(a.finished.is_none());
        // 7 of 8 bytes accounted for: the read is incomplete.
        let mut short = t.clone();
        assert_eq!(
            d.decode(&hole_chunk, &mut short),
            Err(ReplyError::MissingData {
                cookie: 4,
                covered: 7,
                length: 8
            })
        );
        t.insert(sent(4, Op::Read, 4096, 7));
        let a = decoded(d.decode(&data_chunk, &mut t).unwrap());
        assert!(a.finished.is_none());
        let b = decoded(d.decode(&hole_chunk, &mut t).unwrap());
        assert_eq!(
            b.event,
            ReplyEvent::Hole {
                cookie: 4,
                rel: 0,
                len: 4
            }
        );
        assert_eq!(b.finished.unwrap().result, Ok(()));
    }

    #[test]
    fn data_for_a_write_or_outside_the_read_is_an_error() {
        let d = ReplyDecoder::new(ReplyStyle::Structured, None);
        let mut t = CookieTable::default();
        t.insert(sent(1, Op::Write, 0, 4));
        t.insert(sent(2, Op::Read, 0, 4));
        let mut b = Vec::new();
        encode_chunk_header(&mut b, ReplyStyle::Structured, 1, 1, 1, 0, 12);
        b.extend_from_slice(&[0; 12]);
        assert_eq!(
            d.decode(&b, &mut t),
            Err(ReplyError::UnexpectedChunk {
                cookie: 1,
                op: Op::Write,
                kind: 1
            })
        );
        b.clear();
        encode_chunk_header(&mut b, ReplyStyle::Structured, 1, 1, 2, 0, 13);
        b.extend_from_slice(&2u64.to_be_bytes());
        b.extend_from_slice(&[0; 5]);
        assert!(matches!(
            d.decode(&b, &mut t),
            Err(ReplyError::OutsideRead { cookie: 2, .. })
        ));
        // Unknown chunk types are never taken as success.
        b.clear();
        encode_chunk_header(&mut b, ReplyStyle::Structured, 1, 77, 1, 0, 0);
        assert!(matches!(
            d.decode(&b, &mut t),
            Err(ReplyError::UnexpectedChunk { kind: 77, .. })
        ));
    }

    #[test]
    fn errors_and_block_status_in_each_style() {
        for style in [ReplyStyle::Structured, ReplyStyle::Extended] {
            let d = ReplyDecoder::new(style, Some(1));
            let mut t = CookieTable::default();
            t.insert(sent(7, Op::Write, 0, 512));
            t.insert(sent(8, Op::BlockStatus, 0, 8192));
            let mut b = Vec::new();
            encode_error(&mut b, style, 7, 0, NbdErrno::NoSpc, "full");
            let got = decoded(d.decode(&b, &mut t).unwrap());
            assert_eq!(got.used, b.len());
            assert_eq!(
                got.finished.unwrap().result,
                Err(ServerError {
                    errno: NbdErrno::NoSpc,
                    message: "full".into(),
                    offset: None
                })
            );
            b.clear();
            let ext = [Extent {
                length: 8192,
                flags: STATE_HOLE | STATE_ZERO,
            }];
            encode_block_status(&mut b, style, 8, 0, 2, &ext);
            let mut wrong = t.clone();
            assert!(matches!(
                d.decode(&b, &mut wrong),
                Err(ReplyError::WrongContext { found: 2, .. })
            ));
            b.clear();
            encode_block_status(&mut b, style, 8, 0, 1, &ext);
            let got = decoded(d.decode(&b, &mut t).unwrap());
            assert_eq!(
                got.event,
                ReplyEvent::Extents {
                    cookie: 8,
                    extents: ext.to_vec()
                }
            );
            assert!(got.finished.is_some());
        }
    }

    #[test]
    fn block_status_done_without_extents_is_an_error() {
        let d = ReplyDecoder::new(ReplyStyle::Structured, Some(1));
        let mut t = CookieTable::default();
        t.insert(sent(3, Op::BlockStatus, 0, 512));
        let mut b = Vec::new();
        encode_ok(&mut b, ReplyStyle::Structured, 3, 0);
        assert_eq!(d.decode(&b, &mut t), Err(ReplyError::MissingExtents(3)));
    }

    #[test]
    fn restart_forgets_partial_progress() {
        let d = ReplyDecoder::new(ReplyStyle::Structured, None);
        let mut t = CookieTable::default();
        t.insert(sent(5, Op::Read, 0, 2));
        let mut b = Vec::new();
        encode_chunk_header(&mut b, ReplyStyle::Structured, 0, 1, 5, 0, 9);
        b.extend_from_slice(&0u64.to_be_bytes());
        b.push(1);
        decoded(d.decode(&b, &mut t).unwrap());
        t.restart_all();
        let mut done = Vec::new();
        encode_chunk_header(&mut done, ReplyStyle::Structured, 1, 1, 5, 0, 9);
        done.extend_from_slice(&1u64.to_be_bytes());
        done.push(2);
        assert!(matches!(
            d.decode(&done, &mut t),
            Err(ReplyError::MissingData { covered: 1, .. })
        ));
    }
}
