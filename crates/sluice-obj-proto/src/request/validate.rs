//! [`Negotiated::validate`]: a header and its payload checked against
//! the session and turned into a [`Request`].

use crate::attr::{AttrError, AttrOp, AttrOps};
use crate::consts::*;
use crate::ddt::{Ddt, DdtError, DdtKind};
use crate::handshake::Negotiated;
use crate::meta::MetaRequest;
use crate::reply::ErrorCode;
use crate::wire::Reader;
use crate::Features;

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
/// its payload as long as the header says, and flags that exist for it.
fn check_frame(h: &RequestHeader, payload: &[u8]) -> Result<Opcode, Rejected> {
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
    Ok(op)
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
        let op = check_frame(h, payload)?;
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
        // Regions in payload order: DDT, parameters, attributes, data.
        let (ddt_raw, rest) = payload.split_at(h.ddt_len as usize);
        let (params, rest) = rest.split_at(h.param_len as usize);
        let (attr_raw, data) = rest.split_at(h.attr_len as usize);
        let attrs = self.attrs(op, h, attr_raw)?;
        let ddt = self.ddt(op, h, ddt_raw)?;
        let span_ok = self.span_ok(op, h, &ddt)?;
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
        let command = self.command(op, h, &mut p, ddt, data)?;
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

    /// The attribute list, checked for what `op` may carry.
    fn attrs<'a>(
        &self,
        op: Opcode,
        h: &RequestHeader,
        raw: &'a [u8],
    ) -> Result<AttrOps<'a>, Rejected> {
        let attrs = AttrOps::parse(raw, self.limits.max_attr_size)
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
        Ok(attrs)
    }

    /// Whether the request asks for a span reply, and may.
    fn span_ok(&self, op: Opcode, h: &RequestHeader, ddt: &Ddt<'_>) -> Result<bool, Rejected> {
        if h.flags & FLAG_SPAN_OK == 0 {
            return Ok(false);
        }
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
        Ok(true)
    }

    /// The command, from its parameters (`p`, read as far as the command
    /// goes: what is left over is the caller's to refuse).
    fn command<'a>(
        &self,
        op: Opcode,
        h: &RequestHeader,
        p: &mut Reader<'a>,
        ddt: Ddt<'a>,
        data: &'a [u8],
    ) -> Result<Command<'a>, Rejected> {
        let object = h.object;
        Ok(match op {
            Opcode::Create => {
                let count = p.u32().ok_or_else(|| {
                    reject(h, ErrorCode::Invalid, "CREATE parameters lack the count")
                })?;
                if count == 0 || count > self.limits.max_segments {
                    return Err(reject(
                        h,
                        ErrorCode::Invalid,
                        format!(
                            "CREATE count {count} is not in 1..={}",
                            self.limits.max_segments
                        ),
                    ));
                }
                let collection = name(p, "collection name", h)?;
                Command::Create { count, collection }
            }
            Opcode::Remove => Command::Remove { object },
            Opcode::List | Opcode::Query => self.page(op, h, p)?,
            Opcode::Read => Command::Read { object, ddt },
            Opcode::Write => Command::Write { object, ddt, data },
            Opcode::Append => Command::Append { object, data },
            Opcode::CreateAndWrite => Command::CreateAndWrite {
                collection: name(p, "collection name", h)?,
                ddt,
                data,
            },
            Opcode::Punch => Command::Punch { object, ddt },
            Opcode::Flush => {
                Command::Flush(match (h.flags & FLAG_SCOPE_MASK) >> FLAG_SCOPE_SHIFT {
                    0 => FlushScope::Object(object),
                    1 => FlushScope::Collection(name(p, "collection name", h)?),
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
                *p = Reader::new(&[]);
                Command::Meta { params }
            }
            Opcode::ExtentRead | Opcode::ExtentWrite => self.extent(op, h, ddt, data)?,
            Opcode::Truncate => Command::Truncate {
                object,
                length: p.u64().ok_or_else(|| {
                    reject(h, ErrorCode::Invalid, "TRUNCATE parameters lack the length")
                })?,
            },
            Opcode::Batch | Opcode::Disconnect => unreachable!("handled by validate"),
        })
    }

    /// LIST or QUERY: a page's parameters, and QUERY's ranges.
    fn page<'a>(
        &self,
        op: Opcode,
        h: &RequestHeader,
        p: &mut Reader<'a>,
    ) -> Result<Command<'a>, Rejected> {
        let limits = &self.limits;
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

    /// EXTENT_READ or EXTENT_WRITE of an attached export.
    fn extent<'a>(
        &self,
        op: Opcode,
        h: &RequestHeader,
        ddt: Ddt<'a>,
        data: &'a [u8],
    ) -> Result<Command<'a>, Rejected> {
        let object = h.object;
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
        if op == Opcode::ExtentRead {
            return Ok(Command::ExtentRead {
                export: object,
                ddt,
            });
        }
        if export.read_only {
            return Err(reject(
                h,
                ErrorCode::ReadOnly,
                format!("export {:?} is read-only", export.name),
            ));
        }
        Ok(Command::ExtentWrite {
            export: object,
            ddt,
            data,
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
}

fn attr_code(e: &AttrError) -> ErrorCode {
    match e {
        AttrError::TooLarge { .. } => ErrorCode::AttrTooLarge,
        _ => ErrorCode::Invalid,
    }
}
