//! Requests: the 64-byte header codec, the framing check that decides
//! whether the stream is still in sync, and [`Negotiated::validate`], which
//! turns a header and its payload into a [`Request`] whose DDT, attribute
//! list and parameters are checked once, so executors never re-check
//! protocol rules.

use thiserror::Error;

use crate::attr::{AttrError, AttrOp, AttrOps, AttrValue};
use crate::consts::*;
use crate::ddt::{Ddt, DdtError, DdtKind};
use crate::handshake::Negotiated;
use crate::meta::MetaRequest;
use crate::reply::ErrorCode;
use crate::wire::{be16, be32, be64, Reader};

/// A request header exactly as it came off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestHeader {
    pub flags: u16,
    /// Possibly an opcode this crate does not know.
    pub opcode: u16,
    /// Echoed in the reply; chosen by the client.
    pub id: u64,
    pub partition: u64,
    /// Object id, or the handle of an attached NBD export.
    pub object: u64,
    /// Master offset.
    pub offset: u64,
    /// Total bytes the request moves (or its effect length).
    pub length: u64,
    /// DDT bytes at the start of the payload.
    pub ddt_len: u32,
    /// Parameter bytes after the DDT.
    pub param_len: u32,
    /// Attribute-list bytes after the parameters.
    pub attr_len: u32,
    /// Data bytes after the attribute list.
    pub data_len: u32,
}

/// A frame that cannot be followed: the stream is out of sync (or would
/// make the server buffer more than it published) and the connection
/// must be closed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    #[error("bad request magic {0:#010x} (expected {REQUEST_MAGIC:#010x})")]
    BadMagic(u32),
    #[error("request {id} carries {len} payload bytes, more than the server's limit of {limit}")]
    PayloadTooLarge { id: u64, len: u64, limit: u32 },
}

impl RequestHeader {
    /// Decodes one header from the front of `buf` without consuming it
    /// (the server borrows payloads in place). `Ok(None)`: fewer than
    /// [`REQUEST_HEADER_LEN`] bytes.
    pub fn decode(buf: &[u8]) -> Result<Option<Self>, FrameError> {
        let Some(b) = buf.get(..REQUEST_HEADER_LEN) else {
            return Ok(None);
        };
        let magic = be32(b, 0);
        if magic != REQUEST_MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        Ok(Some(Self {
            flags: be16(b, 4),
            opcode: be16(b, 6),
            id: be64(b, 8),
            partition: be64(b, 16),
            object: be64(b, 24),
            offset: be64(b, 32),
            length: be64(b, 40),
            ddt_len: be32(b, 48),
            param_len: be32(b, 52),
            attr_len: be32(b, 56),
            data_len: be32(b, 60),
        }))
    }

    /// Appends the header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        out.extend_from_slice(&self.opcode.to_be_bytes());
        for v in [
            self.id,
            self.partition,
            self.object,
            self.offset,
            self.length,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        for v in [self.ddt_len, self.param_len, self.attr_len, self.data_len] {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    /// Payload bytes that follow the header, whatever the opcode: framing
    /// never depends on knowing the command.
    pub fn payload_len(&self) -> u64 {
        u64::from(self.ddt_len)
            + u64::from(self.param_len)
            + u64::from(self.attr_len)
            + u64::from(self.data_len)
    }

    /// Checks that the payload is within the published limit, so the
    /// server can read it into its buffer.
    pub fn check_frame(&self, limits: &Limits) -> Result<u64, FrameError> {
        let len = self.payload_len();
        if len > u64::from(limits.max_payload) {
            return Err(FrameError::PayloadTooLarge {
                id: self.id,
                len,
                limit: limits.max_payload,
            });
        }
        Ok(len)
    }
}

/// Opcodes this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    Create,
    Remove,
    List,
    Read,
    Write,
    Append,
    CreateAndWrite,
    Punch,
    Flush,
    GetAttrs,
    SetAttrs,
    Query,
    ExtentRead,
    ExtentWrite,
    Batch,
    Disconnect,
    Meta,
}

impl Opcode {
    /// The opcode of a wire value, or `None` if unknown.
    pub const fn from_wire(v: u16) -> Option<Self> {
        Some(match v {
            OP_CREATE => Self::Create,
            OP_REMOVE => Self::Remove,
            OP_LIST => Self::List,
            OP_READ => Self::Read,
            OP_WRITE => Self::Write,
            OP_APPEND => Self::Append,
            OP_CREATE_AND_WRITE => Self::CreateAndWrite,
            OP_PUNCH => Self::Punch,
            OP_FLUSH => Self::Flush,
            OP_GET_ATTRS => Self::GetAttrs,
            OP_SET_ATTRS => Self::SetAttrs,
            OP_QUERY => Self::Query,
            OP_EXTENT_READ => Self::ExtentRead,
            OP_EXTENT_WRITE => Self::ExtentWrite,
            OP_BATCH => Self::Batch,
            OP_DISCONNECT => Self::Disconnect,
            OP_META => Self::Meta,
            _ => return None,
        })
    }

    /// The wire value.
    pub const fn wire(self) -> u16 {
        match self {
            Self::Create => OP_CREATE,
            Self::Remove => OP_REMOVE,
            Self::List => OP_LIST,
            Self::Read => OP_READ,
            Self::Write => OP_WRITE,
            Self::Append => OP_APPEND,
            Self::CreateAndWrite => OP_CREATE_AND_WRITE,
            Self::Punch => OP_PUNCH,
            Self::Flush => OP_FLUSH,
            Self::GetAttrs => OP_GET_ATTRS,
            Self::SetAttrs => OP_SET_ATTRS,
            Self::Query => OP_QUERY,
            Self::ExtentRead => OP_EXTENT_READ,
            Self::ExtentWrite => OP_EXTENT_WRITE,
            Self::Batch => OP_BATCH,
            Self::Disconnect => OP_DISCONNECT,
            Self::Meta => OP_META,
        }
    }

    /// Flags this opcode accepts besides the DDT bits.
    const fn extra_flags(self) -> u16 {
        match self {
            Self::Write
            | Self::Append
            | Self::CreateAndWrite
            | Self::Punch
            | Self::SetAttrs
            | Self::Remove
            | Self::Create
            | Self::ExtentWrite => FLAG_FUA,
            Self::List => FLAG_WITH_ATTRS,
            Self::Flush => FLAG_SCOPE_MASK,
            Self::Read | Self::ExtentRead => FLAG_SPAN_OK,
            _ => 0,
        }
    }

    /// Whether a DDT other than contiguous is allowed.
    const fn takes_ddt(self) -> bool {
        matches!(
            self,
            Self::Read
                | Self::Write
                | Self::CreateAndWrite
                | Self::Punch
                | Self::ExtentRead
                | Self::ExtentWrite
        )
    }

    /// Whether the data region carries the bytes the DDT describes.
    const fn carries_data(self) -> bool {
        matches!(
            self,
            Self::Write | Self::CreateAndWrite | Self::ExtentWrite | Self::Append
        )
    }

    /// Whether the request reads or changes an object's bytes (so it may
    /// carry attributes when `ATTRS_ON_DATA` was negotiated).
    const fn is_data(self) -> bool {
        matches!(
            self,
            Self::Read | Self::Write | Self::Append | Self::CreateAndWrite | Self::Punch
        )
    }
}

/// What FLUSH makes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushScope<'a> {
    Object(u64),
    Collection(&'a str),
    Partition,
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
}

/// A checked list of query ranges, borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QueryRanges<'a> {
    raw: &'a [u8],
    count: u16,
    max_attr: u32,
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

fn reject(h: &RequestHeader, code: ErrorCode, message: impl Into<String>) -> Rejected {
    Rejected {
        id: h.id,
        code,
        message: message.into(),
    }
}

/// A batch frame's members, each a header and its payload, not yet
/// validated (each is validated, and answered, on its own).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    body: &'a [u8],
}

impl<'a> Iterator for Batch<'a> {
    type Item = (RequestHeader, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        // Split checked every member already; this cannot fail.
        let h = RequestHeader::decode(self.body).ok()??;
        let end = REQUEST_HEADER_LEN + h.payload_len() as usize;
        let payload = self.body.get(REQUEST_HEADER_LEN..end)?;
        self.body = &self.body[end..];
        Some((h, payload))
    }
}

fn name<'a>(r: &mut Reader<'a>, what: &str, h: &RequestHeader) -> Result<&'a str, Rejected> {
    let bad = || {
        reject(
            h,
            ErrorCode::Invalid,
            format!("truncated {what} in the parameters"),
        )
    };
    let len = r.u8().ok_or_else(bad)?;
    let raw = r.bytes(usize::from(len)).ok_or_else(bad)?;
    std::str::from_utf8(raw)
        .map_err(|_| reject(h, ErrorCode::Invalid, format!("{what} is not UTF-8")))
}

fn parse_range<'a>(r: &mut Reader<'a>, max: u32) -> Result<QueryRange<'a>, AttrError> {
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

impl Negotiated {
    /// Checks a request against the session: known opcode, flags that
    /// exist and apply to it, the partition chosen in the handshake, a DDT
    /// whose invariants hold, data exactly as long as the DDT says,
    /// well-formed parameters and attributes within the limits. `payload`
    /// is exactly [`RequestHeader::payload_len`] bytes.
    pub fn validate<'a>(
        &self,
        h: &RequestHeader,
        payload: &'a [u8],
    ) -> Result<Request<'a>, Rejected> {
        let Some(op) = Opcode::from_wire(h.opcode) else {
            return Err(reject(
                h,
                ErrorCode::UnknownOpcode,
                format!("unknown opcode {}", h.opcode),
            ));
        };
        if op == Opcode::Batch {
            return Err(reject(
                h,
                ErrorCode::Invalid,
                "a batch frame is split with split_batch, not validated",
            ));
        }
        if payload.len() as u64 != h.payload_len() {
            return Err(reject(
                h,
                ErrorCode::Invalid,
                format!(
                    "payload is {} bytes; the header says {}",
                    payload.len(),
                    h.payload_len()
                ),
            ));
        }
        let ddt_bits = if op.takes_ddt() { FLAG_DDT_MASK } else { 0 };
        let unknown = h.flags & !(ddt_bits | op.extra_flags());
        if unknown != 0 {
            return Err(reject(
                h,
                ErrorCode::BadFlags,
                format!("flags {unknown:#06x} are not valid for {op:?}"),
            ));
        }
        if op == Opcode::Disconnect {
            return Ok(Request {
                id: h.id,
                command: Command::Disconnect,
                attrs: AttrOps::default(),
                fua: false,
                span_ok: false,
            });
        }
        let extent = matches!(op, Opcode::ExtentRead | Opcode::ExtentWrite);
        if !extent && h.partition != self.partition {
            return Err(reject(
                h,
                ErrorCode::NoSuchPartition,
                format!(
                    "partition {:#x} is not the one this session selected ({:#x})",
                    h.partition, self.partition
                ),
            ));
        }
        let limits = &self.limits;
        // Regions in payload order: DDT, parameters, attributes, data.
        let (ddt_raw, rest) = payload.split_at(h.ddt_len as usize);
        let (params, rest) = rest.split_at(h.param_len as usize);
        let (attr_raw, data) = rest.split_at(h.attr_len as usize);

        let attrs = AttrOps::parse(attr_raw, limits.max_attr_size)
            .map_err(|e| reject(h, attr_code(&e), e.to_string()))?;
        let attrs_ok = match op {
            Opcode::GetAttrs => attrs.only(|a| matches!(a, AttrOp::Get(_))),
            Opcode::SetAttrs => attrs.only(|a| !matches!(a, AttrOp::Get(_))),
            Opcode::List => attrs.only(|a| matches!(a, AttrOp::Get(_))),
            _ if op.is_data() && self.features.contains(Features::ATTRS_ON_DATA) => Ok(()),
            _ if attrs.is_empty() => Ok(()),
            _ => {
                return Err(reject(
                    h,
                    ErrorCode::NotNegotiated,
                    format!("{op:?} carries attributes, which this session may not send"),
                ))
            }
        };
        attrs_ok.map_err(|e| reject(h, ErrorCode::Invalid, e.to_string()))?;
        if op == Opcode::List && !attrs.is_empty() && h.flags & FLAG_WITH_ATTRS == 0 {
            return Err(reject(
                h,
                ErrorCode::Invalid,
                "LIST names attributes without FLAG_WITH_ATTRS",
            ));
        }

        let ddt = self.ddt(op, h, ddt_raw)?;
        let span_ok = h.flags & FLAG_SPAN_OK != 0;
        if span_ok {
            if !self.features.contains(Features::SPAN_READS) {
                return Err(reject(
                    h,
                    ErrorCode::NotNegotiated,
                    format!("{op:?} asks for a span reply, which this session did not negotiate"),
                ));
            }
            if ddt.kind() == DdtKind::Contiguous {
                return Err(reject(
                    h,
                    ErrorCode::BadFlags,
                    format!("{op:?} asks for a span reply of a contiguous range"),
                ));
            }
        }
        let data_want = if op.carries_data() { ddt.total() } else { 0 };
        if u64::from(h.data_len) != data_want {
            return Err(reject(
                h,
                ErrorCode::LengthMismatch,
                format!(
                    "{op:?} carries {} data bytes; its DDT describes {data_want}",
                    h.data_len
                ),
            ));
        }
        let mut p = Reader::new(params);
        let object = h.object;
        let command = match op {
            Opcode::Create => {
                let count = p.u32().ok_or_else(|| {
                    reject(h, ErrorCode::Invalid, "CREATE parameters lack the count")
                })?;
                if count == 0 || count > limits.max_segments {
                    return Err(reject(
                        h,
                        ErrorCode::Invalid,
                        format!("CREATE count {count} is not in 1..={}", limits.max_segments),
                    ));
                }
                let collection = name(&mut p, "collection name", h)?;
                Command::Create { count, collection }
            }
            Opcode::Remove => Command::Remove { object },
            Opcode::List | Opcode::Query => {
                let (Some(cursor), Some(max)) = (p.u64(), p.u32()) else {
                    return Err(reject(h, ErrorCode::Invalid, "truncated page parameters"));
                };
                if max == 0 || max > limits.max_segments {
                    return Err(reject(
                        h,
                        ErrorCode::Invalid,
                        format!("page size {max} is not in 1..={}", limits.max_segments),
                    ));
                }
                let collection = name(&mut p, "collection name", h)?;
                if op == Opcode::List {
                    Command::List {
                        collection,
                        cursor,
                        max,
                        with_attrs: h.flags & FLAG_WITH_ATTRS != 0,
                    }
                } else {
                    let count = p.u16().ok_or_else(|| {
                        reject(
                            h,
                            ErrorCode::Invalid,
                            "QUERY parameters lack the range count",
                        )
                    })?;
                    let raw = p.rest();
                    let mut r = Reader::new(raw);
                    for _ in 0..count {
                        parse_range(&mut r, limits.max_attr_size)
                            .map_err(|e| reject(h, attr_code(&e), format!("QUERY range: {e}")))?;
                    }
                    p = r;
                    Command::Query {
                        collection,
                        cursor,
                        max,
                        ranges: QueryRanges {
                            raw,
                            count,
                            max_attr: limits.max_attr_size,
                        },
                    }
                }
            }
            Opcode::Read => Command::Read { object, ddt },
            Opcode::Write => Command::Write { object, ddt, data },
            Opcode::Append => Command::Append { object, data },
            Opcode::CreateAndWrite => Command::CreateAndWrite {
                collection: name(&mut p, "collection name", h)?,
                ddt,
                data,
            },
            Opcode::Punch => Command::Punch { object, ddt },
            Opcode::Flush => {
                Command::Flush(match (h.flags & FLAG_SCOPE_MASK) >> FLAG_SCOPE_SHIFT {
                    0 => FlushScope::Object(object),
                    1 => FlushScope::Collection(name(&mut p, "collection name", h)?),
                    2 => FlushScope::Partition,
                    _ => return Err(reject(h, ErrorCode::BadFlags, "FLUSH scope 3 is reserved")),
                })
            }
            Opcode::GetAttrs => Command::GetAttrs { object },
            Opcode::SetAttrs => Command::SetAttrs { object },
            Opcode::Meta => {
                if object != 0 {
                    return Err(reject(h, ErrorCode::Invalid, "META names no object"));
                }
                let params = p.rest();
                MetaRequest::decode(params)
                    .map_err(|e| reject(h, ErrorCode::Invalid, e.to_string()))?;
                p = Reader::new(&[]);
                Command::Meta { params }
            }
            Opcode::ExtentRead | Opcode::ExtentWrite => {
                let Some(export) = self.exports.iter().find(|e| e.handle == object) else {
                    return Err(reject(
                        h,
                        ErrorCode::NoSuchObject,
                        format!("no export is attached with handle {object}"),
                    ));
                };
                if ddt.end() > export.size {
                    return Err(reject(
                        h,
                        ErrorCode::OutOfRange,
                        format!(
                            "extents end at {}, past the end of export {:?} ({} bytes)",
                            ddt.end(),
                            export.name,
                            export.size
                        ),
                    ));
                }
                if op == Opcode::ExtentWrite {
                    if export.read_only {
                        return Err(reject(
                            h,
                            ErrorCode::ReadOnly,
                            format!("export {:?} is read-only", export.name),
                        ));
                    }
                    Command::ExtentWrite {
                        export: object,
                        ddt,
                        data,
                    }
                } else {
                    Command::ExtentRead {
                        export: object,
                        ddt,
                    }
                }
            }
            Opcode::Batch | Opcode::Disconnect => unreachable!("handled above"),
        };
        if !p.at_end() {
            return Err(reject(
                h,
                ErrorCode::Invalid,
                format!("{op:?} has {} unexpected parameter bytes", p.rest().len()),
            ));
        }
        Ok(Request {
            id: h.id,
            command,
            attrs,
            fua: h.flags & FLAG_FUA != 0,
            span_ok,
        })
    }

    fn ddt<'a>(&self, op: Opcode, h: &RequestHeader, raw: &'a [u8]) -> Result<Ddt<'a>, Rejected> {
        let bad = |e: DdtError| reject(h, ErrorCode::BadDdt, e.to_string());
        let kind = DdtKind::from_flags(h.flags).ok_or_else(|| bad(DdtError::ReservedKind))?;
        match op {
            _ if op.takes_ddt() => {
                Ddt::parse(kind, h.offset, h.length, raw, &self.limits).map_err(bad)
            }
            Opcode::Append => {
                if h.offset != 0 {
                    return Err(reject(h, ErrorCode::Invalid, "APPEND takes no offset"));
                }
                Ddt::parse(kind, 0, h.length, raw, &self.limits).map_err(bad)
            }
            _ => {
                if h.offset != 0 || h.length != 0 || !raw.is_empty() {
                    return Err(reject(
                        h,
                        ErrorCode::Invalid,
                        format!("{op:?} takes no offset, length or DDT"),
                    ));
                }
                Ok(Ddt::Contiguous(crate::ddt::Segment {
                    offset: 0,
                    length: 0,
                }))
            }
        }
    }

    /// Splits a batch frame into its members. The batch as a whole is
    /// refused (and no member runs) if batches were not negotiated, it
    /// carries flags or a DDT, a member does not frame inside the body,
    /// a member is itself a batch, or it has more members than the limit.
    pub fn split_batch<'a>(
        &self,
        h: &RequestHeader,
        payload: &'a [u8],
    ) -> Result<Batch<'a>, Rejected> {
        let bad = |m: String| reject(h, ErrorCode::BadBatch, m);
        if !self.features.contains(Features::BATCH) {
            return Err(reject(
                h,
                ErrorCode::NotNegotiated,
                "batch frames were not negotiated",
            ));
        }
        if h.flags != 0
            || h.offset != 0
            || h.length != 0
            || h.ddt_len != 0
            || h.param_len != 0
            || h.attr_len != 0
            || payload.len() as u64 != h.payload_len()
        {
            return Err(bad(
                "a batch header carries only its id and the members' length".into(),
            ));
        }
        let mut rest = payload;
        let mut members = 0u32;
        while !rest.is_empty() {
            members += 1;
            if members > self.limits.max_batch {
                return Err(bad(format!(
                    "more than the server's limit of {} members",
                    self.limits.max_batch
                )));
            }
            let m = match RequestHeader::decode(rest) {
                Ok(Some(m)) => m,
                Ok(None) => return Err(bad(format!("member {members} is truncated"))),
                Err(e) => return Err(bad(format!("member {members}: {e}"))),
            };
            if m.opcode == OP_BATCH {
                return Err(bad(format!("member {members} is itself a batch")));
            }
            let end = REQUEST_HEADER_LEN as u64 + m.payload_len();
            if end > rest.len() as u64 {
                return Err(bad(format!(
                    "member {members} runs past the end of the batch"
                )));
            }
            rest = &rest[end as usize..];
        }
        if members == 0 {
            return Err(bad("a batch has no members".into()));
        }
        Ok(Batch { body: payload })
    }
}

fn attr_code(e: &AttrError) -> ErrorCode {
    match e {
        AttrError::TooLarge { .. } => ErrorCode::AttrTooLarge,
        _ => ErrorCode::Invalid,
    }
}
