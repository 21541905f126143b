//! Replies: the 32-byte header, error codes, and the bodies of CREATE,
//! LIST and QUERY. Replies go out in completion order; the request id
//! ties each to its request.

use thiserror::Error;

use crate::attr::{AttrError, AttrOps};
use crate::consts::*;
use crate::wire::{be16, be32, be64, Reader};

/// Status of a reply: 0 is success, anything else names the failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A malformed request (the message says which field).
    Invalid,
    UnknownOpcode,
    BadFlags,
    /// The DDT broke an invariant (count, stride, overflow, total).
    BadDdt,
    /// The data region is not as long as the DDT says.
    LengthMismatch,
    NoSuchObject,
    NoSuchPartition,
    NoSuchCollection,
    AttrTooLarge,
    /// A feature used without negotiating it.
    NotNegotiated,
    /// The batch frame as a whole could not be split into members.
    BadBatch,
    /// Extents past the end of an export.
    OutOfRange,
    ReadOnly,
    Permission,
    NoSpace,
    Io,
    /// A code this crate does not know (from a newer peer).
    Other(u16),
}

impl ErrorCode {
    /// The wire value (never 0).
    pub const fn wire(self) -> u16 {
        match self {
            Self::Invalid => 1,
            Self::UnknownOpcode => 2,
            Self::BadFlags => 3,
            Self::BadDdt => 4,
            Self::LengthMismatch => 5,
            Self::NoSuchObject => 6,
            Self::NoSuchPartition => 7,
            Self::NoSuchCollection => 8,
            Self::AttrTooLarge => 9,
            Self::NotNegotiated => 10,
            Self::BadBatch => 11,
            Self::OutOfRange => 12,
            Self::ReadOnly => 13,
            Self::Permission => 14,
            Self::NoSpace => 15,
            Self::Io => 16,
            Self::Other(v) => v,
        }
    }

    /// The code of a non-zero wire value.
    pub const fn from_wire(v: u16) -> Self {
        match v {
            1 => Self::Invalid,
            2 => Self::UnknownOpcode,
            3 => Self::BadFlags,
            4 => Self::BadDdt,
            5 => Self::LengthMismatch,
            6 => Self::NoSuchObject,
            7 => Self::NoSuchPartition,
            8 => Self::NoSuchCollection,
            9 => Self::AttrTooLarge,
            10 => Self::NotNegotiated,
            11 => Self::BadBatch,
            12 => Self::OutOfRange,
            13 => Self::ReadOnly,
            14 => Self::Permission,
            15 => Self::NoSpace,
            16 => Self::Io,
            v => Self::Other(v),
        }
    }
}

/// A reply header. On success `status` is `None`; on error the body is
/// the UTF-8 message and there are no attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplyHeader {
    pub id: u64,
    pub status: Option<ErrorCode>,
    /// READ and EXTENT_READ: how many of the body's bytes lie below the
    /// object's logical length (or inside the export), summed over the
    /// segments in list order; the rest read as zeros. 0 otherwise.
    pub real_bytes: u64,
    /// Attribute-list bytes after the header.
    pub attr_len: u32,
    /// Body bytes after the attribute list.
    pub body_len: u32,
    /// The body is the span of the request's segments, holes included
    /// ([`Ddt::span`](crate::Ddt::span)), not their bytes in list order:
    /// only in answer to a read that asked for it (`FLAG_SPAN_OK`).
    pub span: bool,
}

/// A reply that cannot be framed: the connection is out of sync.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyDecodeError {
    #[error("bad reply magic {0:#010x} (expected {REPLY_MAGIC:#010x})")]
    BadMagic(u32),
    #[error("reply {0} has reserved bits set")]
    Reserved(u64),
    #[error("error reply {0} is marked as a span")]
    SpanOnError(u64),
    #[error("error reply {id} carries {attr_len} attribute bytes")]
    AttrsOnError { id: u64, attr_len: u32 },
    #[error("error reply {id} has a {len}-byte message, longer than {MAX_MESSAGE_LEN}")]
    MessageTooLong { id: u64, len: u32 },
    #[error("reply body is malformed: {0}")]
    Body(&'static str),
    #[error(transparent)]
    Attr(#[from] AttrError),
}

impl ReplyHeader {
    /// A success header.
    pub const fn ok(id: u64, real_bytes: u64, attr_len: u32, body_len: u32) -> Self {
        Self {
            id,
            status: None,
            real_bytes,
            attr_len,
            body_len,
            span: false,
        }
    }

    /// This header, marked as a span reply.
    pub const fn spanned(self) -> Self {
        Self { span: true, ..self }
    }

    /// Appends an error reply: header and message (cut at a character
    /// boundary to [`MAX_MESSAGE_LEN`] bytes).
    pub fn encode_error(id: u64, code: ErrorCode, message: &str, out: &mut Vec<u8>) {
        let mut end = message.len().min(MAX_MESSAGE_LEN);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let msg = &message.as_bytes()[..end];
        Self {
            id,
            status: Some(code),
            real_bytes: 0,
            attr_len: 0,
            body_len: msg.len() as u32,
            span: false,
        }
        .encode(out);
        out.extend_from_slice(msg);
    }

    /// Appends the header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.status.map_or(0, ErrorCode::wire).to_be_bytes());
        let flags = if self.span { REPLY_FLAG_SPAN } else { 0 };
        out.extend_from_slice(&flags.to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&self.real_bytes.to_be_bytes());
        out.extend_from_slice(&self.attr_len.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
    }

    /// Decodes a header from the front of `buf` without consuming it;
    /// `Ok(None)`: fewer than [`REPLY_HEADER_LEN`] bytes.
    pub fn decode(buf: &[u8]) -> Result<Option<Self>, ReplyDecodeError> {
        let Some(b) = buf.get(..REPLY_HEADER_LEN) else {
            return Ok(None);
        };
        let magic = be32(b, 0);
        if magic != REPLY_MAGIC {
            return Err(ReplyDecodeError::BadMagic(magic));
        }
        let id = be64(b, 8);
        let flags = be16(b, 6);
        if flags & !REPLY_FLAG_SPAN != 0 {
            return Err(ReplyDecodeError::Reserved(id));
        }
        let status = match be16(b, 4) {
            0 => None,
            v => Some(ErrorCode::from_wire(v)),
        };
        let h = Self {
            id,
            status,
            real_bytes: be64(b, 16),
            attr_len: be32(b, 24),
            body_len: be32(b, 28),
            span: flags & REPLY_FLAG_SPAN != 0,
        };
        if h.status.is_some() {
            if h.span {
                return Err(ReplyDecodeError::SpanOnError(id));
            }
            if h.attr_len != 0 {
                return Err(ReplyDecodeError::AttrsOnError {
                    id,
                    attr_len: h.attr_len,
                });
            }
            if h.body_len as usize > MAX_MESSAGE_LEN {
                return Err(ReplyDecodeError::MessageTooLong {
                    id,
                    len: h.body_len,
                });
            }
        }
        Ok(Some(h))
    }

    /// Bytes after the header.
    pub fn payload_len(&self) -> u64 {
        u64::from(self.attr_len) + u64::from(self.body_len)
    }
}

/// Appends a CREATE reply body: `count u32`, then the ids.
pub fn encode_id_list(ids: &[u64], out: &mut Vec<u8>) {
    out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
    for id in ids {
        out.extend_from_slice(&id.to_be_bytes());
    }
}

/// Decodes a CREATE reply body.
pub fn decode_id_list(body: &[u8]) -> Result<Vec<u64>, ReplyDecodeError> {
    let mut r = Reader::new(body);
    let count = r
        .u32()
        .ok_or(ReplyDecodeError::Body("id list lacks its count"))?;
    if body.len() as u64 != 4 + 8 * u64::from(count) {
        return Err(ReplyDecodeError::Body(
            "id list length differs from its count",
        ));
    }
    Ok((0..count).filter_map(|_| r.u64()).collect())
}

/// One entry of a LIST or QUERY page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageEntry<'a> {
    pub object: u64,
    /// The entry's attributes (LIST with attributes), else empty.
    pub attrs: AttrOps<'a>,
}

/// A LIST or QUERY reply body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<'a> {
    /// Cursor for the next page; 0 when this page is the last.
    pub next: u64,
    pub entries: Vec<PageEntry<'a>>,
}

/// Appends a page: `next u64`, `count u32`, then per entry `object u64`,
/// `attr_len u32`, attribute list.
pub fn encode_page(next: u64, entries: &[(u64, &[u8])], out: &mut Vec<u8>) {
    out.extend_from_slice(&next.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for (object, attrs) in entries {
        out.extend_from_slice(&object.to_be_bytes());
        out.extend_from_slice(&(attrs.len() as u32).to_be_bytes());
        out.extend_from_slice(attrs);
    }
}

impl<'a> Page<'a> {
    /// Decodes a page body; attribute values are bounded by `max_attr`.
    pub fn decode(body: &'a [u8], max_attr: u32) -> Result<Self, ReplyDecodeError> {
        let mut r = Reader::new(body);
        let (Some(next), Some(count)) = (r.u64(), r.u32()) else {
            return Err(ReplyDecodeError::Body("page lacks its cursor or count"));
        };
        // Each entry takes at least 12 bytes: bound the allocation by what
        // the body can hold, not by the count.
        let mut entries = Vec::with_capacity((count as usize).min(r.rest().len() / 12));
        for _ in 0..count {
            let (Some(object), Some(len)) = (r.u64(), r.u32()) else {
                return Err(ReplyDecodeError::Body("page entry is truncated"));
            };
            let raw = r.bytes(len as usize).ok_or(ReplyDecodeError::Body(
                "page entry attributes are truncated",
            ))?;
            entries.push(PageEntry {
                object,
                attrs: AttrOps::parse(raw, max_attr)?,
            });
        }
        if !r.at_end() {
            return Err(ReplyDecodeError::Body(
                "page has bytes after its last entry",
            ));
        }
        Ok(Self { next, entries })
    }
}
