//! [`Negotiated::validate`]: a header and its payload checked against
//! the session and turned into a [`Request`].

use crate::attr::{AttrError, AttrOp, AttrOps};
use crate::consts::*;
use crate::ddt::{Ddt, DdtError, DdtKind};
use crate::handshake::Negotiated;
use crate::meta::MetaRequest;
use crate::reply::ErrorCode;
use crate::wire::Reader;
use crate::{Features, Limits};

use super::command::{parse_range, reject};
use super::{Command, FlushScope, Opcode, QueryRanges, Rejected, Request, RequestHeader};

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

/// The opcode of a frame that can be validated: known, not a batch,
/// `got` bytes of its payload where the header says `want`, and flags
/// that exist for it.
fn check_frame(h: &RequestHeader, got: u64, want: u64) -> Result<Opcode, Rejected> {
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
    if got != want {
        return Err(reject(
            h,
            ErrorCode::Invalid,
            format!("payload is {got} bytes; the header says {want}"),
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
    Ok(op)
}

impl<'a> Request<'a> {
    /// The request a frame carries, decoded and checked for form: a
    /// known opcode, flags that exist for it, a DDT whose invariants
    /// hold, data exactly as long as the DDT says, well-formed
    /// parameters and attributes within `limits`. Whether this session
    /// may send it is [`Negotiated::check`]'s question; a server asks it
    /// once, when the frame arrives, and may decode the same bytes again
    /// wherever it runs the request. `payload` is exactly
    /// [`RequestHeader::payload_len`] bytes.
    pub fn decode(h: &RequestHeader, payload: &'a [u8], limits: &Limits) -> Result<Self, Rejected> {
        let op = check_frame(h, payload.len() as u64, h.payload_len())?;
        let (regions, data) = payload.split_at(payload.len() - h.data_len as usize);
        Self::decode_regions(op, h, regions, data, limits)
    }

    /// The request of a frame whose data region is elsewhere (not yet
    /// received, or to be spliced into its destination), decoded as
    /// [`Request::decode`] would from everything before the data:
    /// `regions` is the DDT, parameter and attribute regions, and the
    /// command's data reads as empty.
    pub fn decode_head(
        h: &RequestHeader,
        regions: &'a [u8],
        limits: &Limits,
    ) -> Result<Self, Rejected> {
        let want = h.payload_len() - u64::from(h.data_len);
        let op = check_frame(h, regions.len() as u64, want)?;
        Self::decode_regions(op, h, regions, &[], limits)
    }

    fn decode_regions(
        op: Opcode,
        h: &RequestHeader,
        regions: &'a [u8],
        data: &'a [u8],
        limits: &Limits,
    ) -> Result<Self, Rejected> {
        if op == Opcode::Disconnect {
            return Ok(Request::new(h.id, Command::Disconnect));
        }
        // Regions in payload order: DDT, parameters, attributes (and the
        // data after them).
        let (ddt_raw, rest) = regions.split_at(h.ddt_len as usize);
        let (params, attr_raw) = rest.split_at(h.param_len as usize);
        let attrs = decode_attrs(op, h, attr_raw, limits)?;
        let ddt = decode_ddt(op, h, ddt_raw, limits)?;
        let span_ok = h.flags & FLAG_SPAN_OK != 0;
        if span_ok && ddt.kind() == DdtKind::Contiguous {
            return Err(reject(
                h,
                ErrorCode::BadFlags,
                format!("{op:?} asks for a span reply of a contiguous range"),
            ));
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
        let command = decode_command(op, h, &mut p, ddt, data, limits)?;
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
}

impl Negotiated {
    /// Decodes a request ([`Request::decode`]) and checks it against the
    /// session ([`Negotiated::check`]).
    pub fn validate<'a>(
        &self,
        h: &RequestHeader,
        payload: &'a [u8],
    ) -> Result<Request<'a>, Rejected> {
        let req = Request::decode(h, payload, &self.limits)?;
        self.check(h, &req)?;
        Ok(req)
    }

    /// Whether this session may send `req`, decoded from `h`: the
    /// partition chosen in the handshake, features negotiated for what
    /// it carries (attributes on data commands, span replies, an SGL's
    /// master offset, REPLACE_DATA itself), and an
    /// attached export that holds an extent command's range.
    pub fn check(&self, h: &RequestHeader, req: &Request<'_>) -> Result<(), Rejected> {
        let op = req.command.opcode();
        if op == Opcode::Disconnect {
            return Ok(());
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
        if op.is_data() && !req.attrs.is_empty() && !self.features.contains(Features::ATTRS_ON_DATA)
        {
            return Err(attrs_not_negotiated(h, op));
        }
        if req.span_ok && !self.features.contains(Features::SPAN_READS) {
            return Err(reject(
                h,
                ErrorCode::NotNegotiated,
                format!("{op:?} asks for a span reply, which this session did not negotiate"),
            ));
        }
        if let Some(Ddt::Sgl(sgl)) = req.command.ddt() {
            if sgl.master() != 0 && !self.features.contains(Features::SGL_MASTER) {
                return Err(reject(
                    h,
                    ErrorCode::NotNegotiated,
                    format!(
                        "{op:?} has an SGL at master offset {}, which this session did not negotiate",
                        sgl.master()
                    ),
                ));
            }
        }
        if matches!(req.command, Command::Flush(FlushScope::Export(_)))
            && !self.features.contains(Features::EXPORT_FLUSH)
        {
            return Err(reject(
                h,
                ErrorCode::NotNegotiated,
                "FLUSH of an export needs the EXPORT_FLUSH feature, which this session did not negotiate",
            ));
        }
        if op == Opcode::ReplaceData && !self.features.contains(Features::REPLACE_DATA) {
            return Err(reject(
                h,
                ErrorCode::NotNegotiated,
                "REPLACE_DATA needs the REPLACE_DATA feature, which this session did not negotiate",
            ));
        }
        match req.command {
            Command::ExtentRead { export, ddt } => self.check_extent(h, export, &ddt, false),
            Command::ExtentWrite { export, ddt, .. } => self.check_extent(h, export, &ddt, true),
            _ => Ok(()),
        }
    }

    /// An extent command's export: attached, holding the range, and
    /// writable if written.
    fn check_extent(
        &self,
        h: &RequestHeader,
        handle: u64,
        ddt: &Ddt<'_>,
        writes: bool,
    ) -> Result<(), Rejected> {
        let Some(export) = self.exports.iter().find(|e| e.handle == handle) else {
            return Err(reject(
                h,
                ErrorCode::NoSuchObject,
                format!("no export is attached with handle {handle}"),
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
        if writes && export.read_only {
            return Err(reject(
                h,
                ErrorCode::ReadOnly,
                format!("export {:?} is read-only", export.name),
            ));
        }
        Ok(())
    }
}

fn attrs_not_negotiated(h: &RequestHeader, op: Opcode) -> Rejected {
    reject(
        h,
        ErrorCode::NotNegotiated,
        format!("{op:?} carries attributes, which this session may not send"),
    )
}

/// The attribute list, checked for what `op` may carry.
fn decode_attrs<'a>(
    op: Opcode,
    h: &RequestHeader,
    raw: &'a [u8],
    limits: &Limits,
) -> Result<AttrOps<'a>, Rejected> {
    let attrs = AttrOps::parse(raw, limits.max_attr_size)
        .map_err(|e| reject(h, attr_code(&e), e.to_string()))?;
    let attrs_ok = match op {
        Opcode::GetAttrs => attrs.only(|a| matches!(a, AttrOp::Get(_))),
        Opcode::SetAttrs => attrs.only(|a| !matches!(a, AttrOp::Get(_))),
        Opcode::List => attrs.only(|a| matches!(a, AttrOp::Get(_))),
        // Whether the session negotiated them is `check`'s.
        _ if op.is_data() || attrs.is_empty() => Ok(()),
        _ => return Err(attrs_not_negotiated(h, op)),
    };
    attrs_ok.map_err(|e| reject(h, ErrorCode::Invalid, e.to_string()))?;
    if op == Opcode::List && !attrs.is_empty() && h.flags & FLAG_WITH_ATTRS == 0 {
        return Err(reject(
            h,
            ErrorCode::Invalid,
            "LIST names attributes without FLAG_WITH_ATTRS",
        ));
    }
    Ok(attrs)
}

/// The command, from its parameters (`p`, read as far as the command
/// goes: what is left over is the caller's to refuse).
fn decode_command<'a>(
    op: Opcode,
    h: &RequestHeader,
    p: &mut Reader<'a>,
    ddt: Ddt<'a>,
    data: &'a [u8],
    limits: &Limits,
) -> Result<Command<'a>, Rejected> {
    let object = h.object;
    Ok(match op {
        Opcode::Create => {
            let count = p
                .u32()
                .ok_or_else(|| reject(h, ErrorCode::Invalid, "CREATE parameters lack the count"))?;
            if count == 0 || count > limits.max_segments {
                return Err(reject(
                    h,
                    ErrorCode::Invalid,
                    format!("CREATE count {count} is not in 1..={}", limits.max_segments),
                ));
            }
            let collection = name(p, "collection name", h)?;
            Command::Create { count, collection }
        }
        Opcode::Remove => Command::Remove { object },
        Opcode::List | Opcode::Query => decode_page(op, h, p, limits)?,
        Opcode::Read => Command::Read { object, ddt },
        Opcode::Write => Command::Write { object, ddt, data },
        Opcode::Append => Command::Append { object, data },
        Opcode::CreateAndWrite => Command::CreateAndWrite {
            collection: name(p, "collection name", h)?,
            ddt,
            data,
        },
        Opcode::Punch => Command::Punch { object, ddt },
        Opcode::Flush => Command::Flush(match (h.flags & FLAG_SCOPE_MASK) >> FLAG_SCOPE_SHIFT {
            0 => FlushScope::Object(object),
            1 => FlushScope::Collection(name(p, "collection name", h)?),
            2 => FlushScope::Partition,
            _ => FlushScope::Export(object),
        }),
        Opcode::GetAttrs => Command::GetAttrs { object },
        Opcode::SetAttrs => Command::SetAttrs { object },
        Opcode::Meta => {
            if object != 0 {
                return Err(reject(h, ErrorCode::Invalid, "META names no object"));
            }
            let params = p.rest();
            MetaRequest::decode(params)
                .map_err(|e| reject(h, ErrorCode::Invalid, e.to_string()))?;
            *p = Reader::new(&[]);
            Command::Meta { params }
        }
        Opcode::ExtentRead => Command::ExtentRead {
            export: object,
            ddt,
        },
        Opcode::ExtentWrite => Command::ExtentWrite {
            export: object,
            ddt,
            data,
        },
        Opcode::Truncate => Command::Truncate {
            object,
            length: p.u64().ok_or_else(|| {
                reject(h, ErrorCode::Invalid, "TRUNCATE parameters lack the length")
            })?,
        },
        Opcode::ReplaceData => Command::ReplaceData {
            object,
            source: p.u64().ok_or_else(|| {
                reject(
                    h,
                    ErrorCode::Invalid,
                    "REPLACE_DATA parameters lack the source object",
                )
            })?,
        },
        Opcode::Batch | Opcode::Disconnect => unreachable!("handled by decode"),
    })
}

/// LIST or QUERY: a page's parameters, and QUERY's ranges.
fn decode_page<'a>(
    op: Opcode,
    h: &RequestHeader,
    p: &mut Reader<'a>,
    limits: &Limits,
) -> Result<Command<'a>, Rejected> {
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
    let collection = name(p, "collection name", h)?;
    if op == Opcode::List {
        return Ok(Command::List {
            collection,
            cursor,
            max,
            with_attrs: h.flags & FLAG_WITH_ATTRS != 0,
        });
    }
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
    *p = r;
    let raw = &raw[..raw.len() - p.rest().len()];
    Ok(Command::Query {
        collection,
        cursor,
        max,
        ranges: QueryRanges {
            raw,
            count,
            max_attr: limits.max_attr_size,
        },
    })
}

/// The DDT region, checked for what `op` may carry.
fn decode_ddt<'a>(
    op: Opcode,
    h: &RequestHeader,
    raw: &'a [u8],
    limits: &Limits,
) -> Result<Ddt<'a>, Rejected> {
    let bad = |e: DdtError| reject(h, ErrorCode::BadDdt, e.to_string());
    let kind = DdtKind::from_flags(h.flags).ok_or_else(|| bad(DdtError::ReservedKind))?;
    match op {
        _ if op.takes_ddt() => Ddt::parse(kind, h.offset, h.length, raw, limits).map_err(bad),
        Opcode::Append => {
            if h.offset != 0 {
                return Err(reject(h, ErrorCode::Invalid, "APPEND takes no offset"));
            }
            Ddt::parse(kind, 0, h.length, raw, limits).map_err(bad)
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

fn attr_code(e: &AttrError) -> ErrorCode {
    match e {
        AttrError::TooLarge { .. } => ErrorCode::AttrTooLarge,
        _ => ErrorCode::Invalid,
    }
}
