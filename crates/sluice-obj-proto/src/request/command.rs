//! The typed form of a request: [`Command`] and [`Request`], what
//! validation produces from a header and its payload and what
//! [`Request::encode`] turns back into them, so a client builds the same
//! typed value the server receives and neither touches the wire layout.

use thiserror::Error;

use crate::attr::{AttrError, AttrOps, AttrValue};
use crate::consts::*;
use crate::ddt::Ddt;
use crate::reply::ErrorCode;
use crate::wire::Reader;

use super::{Opcode, RequestHeader};

/// What FLUSH makes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushScope<'a> {
    Object(u64),
    Collection(&'a str),
    Partition,
    /// The device of an attached export, by its handle.
    Export(u64),
}

/// One attribute range of a QUERY: members whose `key` lies in
/// `min..=max` (both of one type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryRange<'a> {
    pub key: &'a str,
    pub min: AttrValue<'a>,
    pub max: AttrValue<'a>,
}

/// A validated command. Object ids, collection names and ranges are
/// checked for form here; whether they exist is the store's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// Make `count` objects, in `collection` if not empty.
    Create {
        count: u32,
        collection: &'a str,
    },
    Remove {
        object: u64,
    },
    /// A page of at most `max` objects after `cursor` (0: from the start).
    List {
        collection: &'a str,
        cursor: u64,
        max: u32,
        with_attrs: bool,
    },
    Read {
        object: u64,
        ddt: Ddt<'a>,
    },
    Write {
        object: u64,
        ddt: Ddt<'a>,
        data: &'a [u8],
    },
    /// Append `data` at the object's end (the reply gives the offset).
    Append {
        object: u64,
        data: &'a [u8],
    },
    /// Make one object (in `collection` if not empty) and write `data`.
    CreateAndWrite {
        collection: &'a str,
        ddt: Ddt<'a>,
        data: &'a [u8],
    },
    /// Deallocate the DDT's ranges (they read as zeros after).
    Punch {
        object: u64,
        ddt: Ddt<'a>,
    },
    Flush(FlushScope<'a>),
    GetAttrs {
        object: u64,
    },
    SetAttrs {
        object: u64,
    },
    /// Members of `collection` whose attributes fall in every range.
    Query {
        collection: &'a str,
        cursor: u64,
        max: u32,
        ranges: QueryRanges<'a>,
    },
    /// Read the DDT's extents of an attached NBD export.
    ExtentRead {
        export: u64,
        ddt: Ddt<'a>,
    },
    /// Write the DDT's extents of an attached NBD export.
    ExtentWrite {
        export: u64,
        ddt: Ddt<'a>,
        data: &'a [u8],
    },
    /// Close the connection after the replies in flight; no reply.
    Disconnect,
    /// A call of the metadata service: `params` decode as a
    /// [`MetaRequest`](crate::MetaRequest) (checked here).
    Meta {
        params: &'a [u8],
    },
    /// Set the object's length: bytes past `length` are gone, and a
    /// longer object reads as zeros up to it.
    Truncate {
        object: u64,
        length: u64,
    },
    /// Replace `object`'s bytes and length with those of `source` (in
    /// the same partition), which goes: one change, seen and kept
    /// after a crash whole or not at all. Needs `REPLACE_DATA`.
    ReplaceData {
        object: u64,
        source: u64,
    },
}

/// A checked list of query ranges, borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryRanges<'a> {
    pub(super) raw: &'a [u8],
    pub(super) count: u16,
    pub(super) max_attr: u32,
}

impl<'a> QueryRanges<'a> {
    /// The ranges in order.
    pub fn iter(&self) -> impl Iterator<Item = QueryRange<'a>> + 'a {
        let mut r = Reader::new(self.raw);
        let max = self.max_attr;
        (0..self.count).map_while(move |_| parse_range(&mut r, max).ok())
    }
    /// Number of ranges.
    pub const fn len(&self) -> u16 {
        self.count
    }
    /// Whether there are none.
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// A validated request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    pub id: u64,
    pub command: Command<'a>,
    /// Attribute entries that apply atomically with the command.
    pub attrs: AttrOps<'a>,
    /// Durable before the reply.
    pub fua: bool,
    /// READ or EXTENT_READ of a list: the client takes a span reply
    /// (`FLAG_SPAN_OK`; the server may still answer in list order).
    pub span_ok: bool,
}

/// A request answered with an error reply; the connection goes on.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("request {id}: {message}")]
pub struct Rejected {
    pub id: u64,
    pub code: ErrorCode,
    /// Names what failed, for the reply's message.
    pub message: String,
}

pub(super) fn reject(h: &RequestHeader, code: ErrorCode, message: impl Into<String>) -> Rejected {
    Rejected {
        id: h.id,
        code,
        message: message.into(),
    }
}

pub(super) fn parse_range<'a>(r: &mut Reader<'a>, max: u32) -> Result<QueryRange<'a>, AttrError> {
    let len = r.u8().ok_or(AttrError::Truncated)?;
    let key = r.bytes(usize::from(len)).ok_or(AttrError::Truncated)?;
    if key.is_empty() {
        return Err(AttrError::EmptyKey { index: 0 });
    }
    let key = std::str::from_utf8(key).map_err(|_| AttrError::KeyNotUtf8 { index: 0 })?;
    let min = AttrValue::parse(r, max, key)?;
    let max = AttrValue::parse(r, max, key)?;
    if std::mem::discriminant(&min) != std::mem::discriminant(&max) {
        return Err(AttrError::NotAllowed {
            key: key.to_owned(),
        });
    }
    Ok(QueryRange { key, min, max })
}

/// Appends a query range (for clients).
pub fn encode_query_range(range: &QueryRange<'_>, out: &mut Vec<u8>) {
    out.push(range.key.len() as u8);
    out.extend_from_slice(range.key.as_bytes());
    range.min.encode(out);
    range.max.encode(out);
}

/// A request that cannot be put on the wire.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("{what} of {len} bytes is longer than {MAX_NAME_LEN}")]
    NameTooLong { what: &'static str, len: usize },
}

/// Appends a name parameter (`len u8`, bytes).
fn push_name(what: &'static str, name: &str, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let len = u8::try_from(name.len()).map_err(|_| EncodeError::NameTooLong {
        what,
        len: name.len(),
    })?;
    out.push(len);
    out.extend_from_slice(name.as_bytes());
    Ok(())
}

/// Appends a page's parameters (`cursor u64`, `max u32`, collection).
fn push_page(
    cursor: u64,
    max: u32,
    collection: &str,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    out.extend_from_slice(&cursor.to_be_bytes());
    out.extend_from_slice(&max.to_be_bytes());
    push_name("collection name", collection, out)
}

impl<'a> Command<'a> {
    /// The opcode that carries it.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Self::Create { .. } => Opcode::Create,
            Self::Remove { .. } => Opcode::Remove,
            Self::List { .. } => Opcode::List,
            Self::Read { .. } => Opcode::Read,
            Self::Write { .. } => Opcode::Write,
            Self::Append { .. } => Opcode::Append,
            Self::CreateAndWrite { .. } => Opcode::CreateAndWrite,
            Self::Punch { .. } => Opcode::Punch,
            Self::Flush(_) => Opcode::Flush,
            Self::GetAttrs { .. } => Opcode::GetAttrs,
            Self::SetAttrs { .. } => Opcode::SetAttrs,
            Self::Query { .. } => Opcode::Query,
            Self::ExtentRead { .. } => Opcode::ExtentRead,
            Self::ExtentWrite { .. } => Opcode::ExtentWrite,
            Self::Disconnect => Opcode::Disconnect,
            Self::Meta { .. } => Opcode::Meta,
            Self::Truncate { .. } => Opcode::Truncate,
            Self::ReplaceData { .. } => Opcode::ReplaceData,
        }
    }

    /// The DDT of a command that has one.
    pub const fn ddt(&self) -> Option<&Ddt<'a>> {
        match self {
            Self::Read { ddt, .. }
            | Self::Write { ddt, .. }
            | Self::CreateAndWrite { ddt, .. }
            | Self::Punch { ddt, .. }
            | Self::ExtentRead { ddt, .. }
            | Self::ExtentWrite { ddt, .. } => Some(ddt),
            _ => None,
        }
    }

    /// The bytes of the data region (empty for a command without one).
    pub const fn data(&self) -> &'a [u8] {
        match self {
            Self::Write { data, .. }
            | Self::Append { data, .. }
            | Self::CreateAndWrite { data, .. }
            | Self::ExtentWrite { data, .. } => data,
            _ => &[],
        }
    }

    /// The same command over another DDT and data region: a piece of a
    /// larger one, as a client cuts it to the server's limits. A command
    /// without a DDT is returned as it is, one without data keeps none.
    pub const fn with_piece(self, piece: Ddt<'a>, bytes: &'a [u8]) -> Self {
        match self {
            Self::Read { object, .. } => Self::Read { object, ddt: piece },
            Self::Write { object, .. } => Self::Write {
                object,
                ddt: piece,
                data: bytes,
            },
            Self::CreateAndWrite { collection, .. } => Self::CreateAndWrite {
                collection,
                ddt: piece,
                data: bytes,
            },
            Self::Punch { object, .. } => Self::Punch { object, ddt: piece },
            Self::ExtentRead { export, .. } => Self::ExtentRead { export, ddt: piece },
            Self::ExtentWrite { export, .. } => Self::ExtentWrite {
                export,
                ddt: piece,
                data: bytes,
            },
            other => other,
        }
    }

    /// The header's object field: the object, the export's handle, or 0.
    const fn object_field(&self) -> u64 {
        match *self {
            Self::Remove { object }
            | Self::Read { object, .. }
            | Self::Write { object, .. }
            | Self::Append { object, .. }
            | Self::Punch { object, .. }
            | Self::GetAttrs { object }
            | Self::SetAttrs { object }
            | Self::Truncate { object, .. }
            | Self::ReplaceData { object, .. }
            | Self::Flush(FlushScope::Object(object)) => object,
            Self::ExtentRead { export, .. }
            | Self::ExtentWrite { export, .. }
            | Self::Flush(FlushScope::Export(export)) => export,
            _ => 0,
        }
    }

    /// The flags the command itself sets (its DDT's kind, LIST's
    /// `FLAG_WITH_ATTRS`, FLUSH's scope).
    fn own_flags(&self) -> u16 {
        match self {
            Self::List {
                with_attrs: true, ..
            } => FLAG_WITH_ATTRS,
            Self::Flush(FlushScope::Object(_)) => 0,
            Self::Flush(FlushScope::Collection(_)) => 1 << FLAG_SCOPE_SHIFT,
            Self::Flush(FlushScope::Partition) => 2 << FLAG_SCOPE_SHIFT,
            Self::Flush(FlushScope::Export(_)) => 3 << FLAG_SCOPE_SHIFT,
            _ => self.ddt().map_or(0, |d| d.kind().flags()),
        }
    }

    /// The header's offset and length: the DDT's master offset and
    /// total, APPEND's data length, else zeros.
    fn extent(&self) -> (u64, u64) {
        match self {
            Self::Append { data, .. } => (0, data.len() as u64),
            _ => self
                .ddt()
                .map_or((0, 0), |d| (d.master_offset(), d.total())),
        }
    }

    /// Appends the parameter region.
    fn encode_params(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match *self {
            Self::Create { count, collection } => {
                out.extend_from_slice(&count.to_be_bytes());
                push_name("collection name", collection, out)
            }
            Self::List {
                collection,
                cursor,
                max,
                ..
            } => push_page(cursor, max, collection, out),
            Self::Query {
                collection,
                cursor,
                max,
                ranges,
            } => {
                push_page(cursor, max, collection, out)?;
                out.extend_from_slice(&ranges.count.to_be_bytes());
                out.extend_from_slice(ranges.raw);
                Ok(())
            }
            Self::CreateAndWrite { collection, .. }
            | Self::Flush(FlushScope::Collection(collection)) => {
                push_name("collection name", collection, out)
            }
            Self::Meta { params } => {
                out.extend_from_slice(params);
                Ok(())
            }
            Self::Truncate { length, .. } => {
                out.extend_from_slice(&length.to_be_bytes());
                Ok(())
            }
            Self::ReplaceData { source, .. } => {
                out.extend_from_slice(&source.to_be_bytes());
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl<'a> Request<'a> {
    /// `command` alone: no attributes, not durable, no span reply.
    pub const fn new(id: u64, command: Command<'a>) -> Self {
        Self {
            id,
            command,
            attrs: AttrOps::EMPTY,
            fua: false,
            span_ok: false,
        }
    }

    /// Appends the DDT, parameter and attribute regions to `regions` and
    /// returns the header that goes before them (for `partition`); the
    /// data region, [`Command::data`], follows them on the wire, sent
    /// from wherever the caller keeps it. Validating what this encodes
    /// gives this request back.
    pub fn encode_head(
        &self,
        partition: u64,
        regions: &mut Vec<u8>,
    ) -> Result<RequestHeader, EncodeError> {
        let c = &self.command;
        let start = regions.len();
        if let Some(ddt) = c.ddt() {
            ddt.encode(regions);
        }
        let ddt_len = regions.len() - start;
        c.encode_params(regions)?;
        let param_len = regions.len() - start - ddt_len;
        regions.extend_from_slice(self.attrs.raw());
        let attr_len = regions.len() - start - ddt_len - param_len;
        let (offset, length) = c.extent();
        Ok(RequestHeader {
            flags: c.own_flags()
                | if self.fua { FLAG_FUA } else { 0 }
                | if self.span_ok { FLAG_SPAN_OK } else { 0 },
            opcode: c.opcode().wire(),
            id: self.id,
            partition,
            object: c.object_field(),
            offset,
            length,
            ddt_len: ddt_len as u32,
            param_len: param_len as u32,
            attr_len: attr_len as u32,
            data_len: c.data().len() as u32,
        })
    }

    /// Appends the whole frame: header, regions and data.
    pub fn encode(&self, partition: u64, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let mut regions = Vec::new();
        let header = self.encode_head(partition, &mut regions)?;
        header.encode(out);
        out.extend_from_slice(&regions);
        out.extend_from_slice(self.command.data());
        Ok(())
    }
}

impl<'a> QueryRanges<'a> {
    /// Encodes `ranges` into `buf` (cleared first) and checks them as
    /// validation would, against attribute values of at most `max_attr`
    /// bytes.
    pub fn build(
        ranges: &[QueryRange<'_>],
        max_attr: u32,
        buf: &'a mut Vec<u8>,
    ) -> Result<Self, AttrError> {
        let count = u16::try_from(ranges.len()).map_err(|_| AttrError::TooMany {
            count: ranges.len(),
        })?;
        if let Some(r) = ranges.iter().find(|r| r.key.len() > MAX_NAME_LEN) {
            return Err(AttrError::KeyTooLong { len: r.key.len() });
        }
        buf.clear();
        for range in ranges {
            encode_query_range(range, buf);
        }
        let mut r = Reader::new(buf);
        for _ in 0..count {
            parse_range(&mut r, max_attr)?;
        }
        Ok(Self {
            raw: buf,
            count,
            max_attr,
        })
    }
}
