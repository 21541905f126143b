//! Turning one command into wire requests and its replies back into a
//! response: encoding parameters and attribute lists within the limits
//! the server published, the DDT of each piece (`plan`), and decoding
//! reply bodies. No I/O: [`ObjClient`](super::ObjClient) sends what this
//! builds.

use std::borrow::Cow;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    decode_id_list, encode_query_range, AttrOp, AttrOps, Ddt, DdtKind, Features, FlushScope,
    Limits, Negotiated, Opcode, Page as WirePage, QueryRange, Segment,
};

use super::attr::{AttrChange, Attrs};
use super::error::{Addressee, Subject};
use super::link::{RawReply, Wire};
use super::plan::{choose_as, coalesce, fits_one, split, PieceLimits, PINNED_DDT_BYTES};
use super::request::{Entry, ObjRequest, ObjResponse, Page, ReadReply};
use super::ObjError;

pub(super) fn subject(op: Opcode, object: u64) -> Subject {
    Subject {
        op,
        target: Addressee::Object(object),
    }
}

pub(super) fn in_collection(op: Opcode, collection: &str) -> Subject {
    Subject {
        op,
        target: Addressee::Collection(collection.to_owned()),
    }
}

pub(super) fn refused(subject: Subject, reason: impl Into<String>) -> ObjError {
    ObjError::Refused {
        subject,
        reason: reason.into(),
    }
}

/// A name parameter (`len u8`, bytes).
pub(super) fn push_name(subject: &Subject, name: &str, out: &mut Vec<u8>) -> Result<(), ObjError> {
    if name.len() > MAX_NAME_LEN {
        return Err(refused(
            subject.clone(),
            format!(
                "collection name of {} bytes is longer than {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    Ok(())
}

pub(super) fn page_params(
    subject: &Subject,
    cursor: u64,
    max: u32,
    collection: &str,
    limits: &Limits,
) -> Result<Vec<u8>, ObjError> {
    let mut p = Vec::with_capacity(13 + collection.len());
    p.extend_from_slice(&cursor.to_be_bytes());
    p.extend_from_slice(&max.clamp(1, limits.max_segments.max(1)).to_be_bytes());
    push_name(subject, collection, &mut p)?;
    Ok(p)
}

/// The session's view of requests and replies.
pub(super) struct Codec<'s> {
    pub(super) session: &'s Negotiated,
    /// The server, for error messages.
    pub(super) server: &'s str,
    /// The DDT the caller pinned ([`ObjOptions::ddt`](super::ObjOptions::ddt)).
    pub(super) ddt: Option<DdtKind>,
    /// The connection driver takes span replies to list reads (see
    /// [`Link`](super::link::Link)), so READs whose segments have a
    /// dense span ask for one.
    pub(super) spans: bool,
}

impl Codec<'_> {
    pub(super) fn limits(&self) -> Limits {
        self.session.limits
    }

    pub(super) fn extent_subject(&self, op: Opcode, handle: u64) -> Subject {
        let name = self
            .session
            .exports
            .iter()
            .find(|e| e.handle == handle)
            .map_or_else(|| format!("#{handle}"), |e| e.name.clone());
        Subject {
            op,
            target: Addressee::Export(name),
        }
    }

    /// An attribute list within the limits.
    pub(super) fn attr_list(
        &self,
        subject: &Subject,
        ops: &[AttrOp<'_>],
    ) -> Result<Vec<u8>, ObjError> {
        if ops.len() > usize::from(u16::MAX) {
            return Err(refused(
                subject.clone(),
                format!("{} attributes in one request (at most 65535)", ops.len()),
            ));
        }
        let max = self.limits().max_attr_size;
        for op in ops {
            let key = op.key();
            if key.is_empty() || key.len() > MAX_NAME_LEN {
                return Err(refused(
                    subject.clone(),
                    format!("attribute key {key:?} is not 1 to {MAX_NAME_LEN} bytes"),
                ));
            }
            if let AttrOp::Set(_, v) = op {
                if v.size() as u64 > u64::from(max) {
                    return Err(refused(
                        subject.clone(),
                        format!(
                            "attribute {key:?} has a {}-byte value, more than the server's limit of {max}",
                            v.size()
                        ),
                    ));
                }
            }
        }
        let mut out = Vec::new();
        AttrOps::encode(ops, &mut out);
        Ok(out)
    }

    pub(super) fn change_list(
        &self,
        subject: &Subject,
        changes: &[AttrChange],
    ) -> Result<Vec<u8>, ObjError> {
        let ops: Vec<AttrOp<'_>> = changes.iter().map(AttrChange::as_wire).collect();
        self.attr_list(subject, &ops)
    }

    pub(super) fn get_list(&self, subject: &Subject, keys: &[&str]) -> Result<Vec<u8>, ObjError> {
        let ops: Vec<AttrOp<'_>> = keys.iter().map(|k| AttrOp::Get(k)).collect();
        self.attr_list(subject, &ops)
    }

    /// Checks segments (none may end past 2^64) and merges neighbours.
    pub(super) fn segments<'s>(
        &self,
        subject: &Subject,
        segments: &'s [Segment],
    ) -> Result<Cow<'s, [Segment]>, ObjError> {
        coalesce(segments).map_err(|s| {
            refused(
                subject.clone(),
                format!(
                    "segment at offset {} of {} bytes ends past 2^64",
                    s.offset, s.length
                ),
            )
        })
    }

    /// Cuts `segments` into pieces within the limits, leaving room for
    /// `extra` bytes of parameters and attributes in each request.
    pub(super) fn pieces<'s>(
        &self,
        subject: &Subject,
        segments: &'s [Segment],
        extra: usize,
    ) -> Result<Vec<Cow<'s, [Segment]>>, ObjError> {
        let limits = self.piece_limits(extra);
        // The usual list fits one request: one sum over it, not split's
        // walk with a limit check per segment.
        if fits_one(segments, limits) {
            return Ok(vec![Cow::Borrowed(segments)]);
        }
        split(segments, limits).ok_or_else(|| {
            let l = self.limits();
            refused(
                subject.clone(),
                format!(
                    "the server's limits (max_segments {}, max_payload {}) leave no room for data beside {extra} bytes of parameters and attributes",
                    l.max_segments, l.max_payload
                ),
            )
        })
    }

    /// What one request may carry beside `extra` bytes of parameters and
    /// attributes.
    fn piece_limits(&self, extra: usize) -> PieceLimits {
        let l = self.limits();
        PieceLimits {
            max_segments: l.max_segments,
            max_bytes: u64::from(l.max_payload)
                .saturating_sub(extra as u64)
                .saturating_sub(if self.ddt.is_some() {
                    PINNED_DDT_BYTES
                } else {
                    0
                }),
        }
    }

    /// A data command (READ, WRITE, PUNCH, CREATE_AND_WRITE) over one
    /// piece's segments.
    #[allow(clippy::too_many_arguments)] // the fields of one request
    pub(super) fn data_wire<'a>(
        &self,
        subject: Subject,
        op: Opcode,
        object: u64,
        piece: &[Segment],
        params: Vec<u8>,
        attrs: Vec<u8>,
        data: &'a [u8],
        fua: bool,
    ) -> Wire<'a> {
        let layout = choose_as(piece, self.ddt);
        let mut ddt = Vec::new();
        layout.encode(&mut ddt);
        let length = layout.total();
        let carries = matches!(
            op,
            Opcode::Write | Opcode::CreateAndWrite | Opcode::ExtentWrite
        );
        let span_ok = op == Opcode::Read
            && self.spans
            && layout.kind() != DdtKind::Contiguous
            && self.session.features.contains(Features::SPAN_READS)
            && Ddt::parse(
                layout.kind(),
                layout.master_offset(),
                length,
                &ddt,
                &self.limits(),
            )
            .is_ok_and(|d| d.dense_span().is_some());
        Wire {
            subject,
            opcode: op.wire(),
            flags: layout.kind().flags()
                | if fua { FLAG_FUA } else { 0 }
                | if span_ok { FLAG_SPAN_OK } else { 0 },
            object,
            offset: layout.master_offset(),
            length,
            ddt,
            params,
            attrs,
            data: if carries { data } else { &[] },
            reply_len: if op == Opcode::Read { length } else { 0 },
        }
    }

    /// A command without a DDT.
    pub(super) fn plain_wire<'a>(
        subject: Subject,
        op: Opcode,
        flags: u16,
        object: u64,
        params: Vec<u8>,
        attrs: Vec<u8>,
    ) -> Wire<'a> {
        Wire {
            subject,
            opcode: op.wire(),
            flags,
            object,
            offset: 0,
            length: 0,
            ddt: Vec::new(),
            params,
            attrs,
            data: &[],
            reply_len: 0,
        }
    }

    /// The one wire request `req` is, or `None` if it must be split (or
    /// needs none).
    pub(super) fn single<'a>(&self, req: &ObjRequest<'a>) -> Result<Option<Wire<'a>>, ObjError> {
        let fua_flag = |fua: bool| if fua { FLAG_FUA } else { 0 };
        self.check_attrs_on_data(req)?;
        Ok(Some(match *req {
            ObjRequest::Create {
                collection,
                count,
                fua,
            } => {
                let s = in_collection(Opcode::Create, collection);
                if count == 0 || count > self.limits().max_segments {
                    return Ok(None);
                }
                let mut p = count.to_be_bytes().to_vec();
                push_name(&s, collection, &mut p)?;
                Self::plain_wire(s, Opcode::Create, fua_flag(fua), 0, p, Vec::new())
            }
            ObjRequest::Remove { object, fua } => Self::plain_wire(
                subject(Opcode::Remove, object),
                Opcode::Remove,
                fua_flag(fua),
                object,
                Vec::new(),
                Vec::new(),
            ),
            ObjRequest::List {
                collection,
                cursor,
                max,
                attrs,
            } => {
                let s = in_collection(Opcode::List, collection);
                let p = page_params(&s, cursor, max, collection, &self.limits())?;
                let (flags, a) = match attrs {
                    None => (0, Vec::new()),
                    Some(keys) => (FLAG_WITH_ATTRS, self.get_list(&s, keys)?),
                };
                Self::plain_wire(s, Opcode::List, flags, 0, p, a)
            }
            ObjRequest::Read {
                object,
                segments,
                get,
            } => {
                let s = subject(Opcode::Read, object);
                let a = self.get_list(&s, get)?;
                let Some(piece) = self.one_piece(&s, segments, a.len())? else {
                    return Ok(None);
                };
                self.data_wire(s, Opcode::Read, object, &piece, Vec::new(), a, &[], false)
            }
            ObjRequest::Write {
                object,
                segments,
                data,
                options,
            } => {
                let s = subject(Opcode::Write, object);
                self.check_data_len(&s, segments, data)?;
                let a = self.change_list(&s, &options.attrs)?;
                let Some(piece) = self.one_piece(&s, segments, a.len())? else {
                    return Ok(None);
                };
                self.data_wire(
                    s,
                    Opcode::Write,
                    object,
                    &piece,
                    Vec::new(),
                    a,
                    data,
                    options.fua,
                )
            }
            ObjRequest::Punch {
                object,
                segments,
                options,
            } => {
                let s = subject(Opcode::Punch, object);
                let a = self.change_list(&s, &options.attrs)?;
                let Some(piece) = self.one_piece(&s, segments, a.len())? else {
                    return Ok(None);
                };
                self.data_wire(
                    s,
                    Opcode::Punch,
                    object,
                    &piece,
                    Vec::new(),
                    a,
                    &[],
                    options.fua,
                )
            }
            ObjRequest::Append {
                object,
                data,
                options,
            } => {
                let s = subject(Opcode::Append, object);
                let a = self.change_list(&s, &options.attrs)?;
                if data.len() as u64 + a.len() as u64 > u64::from(self.limits().max_payload) {
                    return Ok(None);
                }
                Wire {
                    length: data.len() as u64,
                    data,
                    ..Self::plain_wire(
                        s,
                        Opcode::Append,
                        fua_flag(options.fua),
                        object,
                        Vec::new(),
                        a,
                    )
                }
            }
            ObjRequest::CreateAndWrite {
                collection,
                segments,
                data,
                options,
            } => {
                let s = in_collection(Opcode::CreateAndWrite, collection);
                self.check_data_len(&s, segments, data)?;
                let a = self.change_list(&s, &options.attrs)?;
                let mut p = Vec::new();
                push_name(&s, collection, &mut p)?;
                let extra = a.len() + p.len();
                let merged = self.segments(&s, segments)?;
                if merged.is_empty() {
                    // An empty object: a contiguous DDT of length 0.
                    return Ok(Some(Wire {
                        ..Self::plain_wire(
                            s,
                            Opcode::CreateAndWrite,
                            fua_flag(options.fua),
                            0,
                            p,
                            a,
                        )
                    }));
                }
                let Some(piece) = self.one_piece(&s, &merged, extra)? else {
                    return Ok(None);
                };
                self.data_wire(
                    s,
                    Opcode::CreateAndWrite,
                    0,
                    &piece,
                    p,
                    a,
                    data,
                    options.fua,
                )
            }
            ObjRequest::Flush(scope) => {
                let (s, flags, object, p) = match scope {
                    FlushScope::Object(o) => (subject(Opcode::Flush, o), 0, o, Vec::new()),
                    FlushScope::Collection(c) => {
                        let s = in_collection(Opcode::Flush, c);
                        let mut p = Vec::new();
                        push_name(&s, c, &mut p)?;
                        (s, 1 << FLAG_SCOPE_SHIFT, 0, p)
                    }
                    FlushScope::Partition => (
                        Subject {
                            op: Opcode::Flush,
                            target: Addressee::Partition(self.session.partition),
                        },
                        2 << FLAG_SCOPE_SHIFT,
                        0,
                        Vec::new(),
                    ),
                };
                Self::plain_wire(s, Opcode::Flush, flags, object, p, Vec::new())
            }
            ObjRequest::GetAttrs { object, keys } => {
                let s = subject(Opcode::GetAttrs, object);
                let a = self.get_list(&s, keys)?;
                Self::plain_wire(s, Opcode::GetAttrs, 0, object, Vec::new(), a)
            }
            ObjRequest::SetAttrs {
                object,
                changes,
                fua,
            } => {
                let s = subject(Opcode::SetAttrs, object);
                let a = self.change_list(&s, changes)?;
                Self::plain_wire(s, Opcode::SetAttrs, fua_flag(fua), object, Vec::new(), a)
            }
            ObjRequest::ExtentRead { export, segments } => {
                let s = self.extent_subject(Opcode::ExtentRead, export);
                let Some(piece) = self.one_piece(&s, segments, 0)? else {
                    return Ok(None);
                };
                self.data_wire(
                    s,
                    Opcode::ExtentRead,
                    export,
                    &piece,
                    Vec::new(),
                    Vec::new(),
                    &[],
                    false,
                )
            }
            ObjRequest::ExtentWrite {
                export,
                segments,
                data,
                fua,
            } => {
                let s = self.extent_subject(Opcode::ExtentWrite, export);
                self.check_data_len(&s, segments, data)?;
                let Some(piece) = self.one_piece(&s, segments, 0)? else {
                    return Ok(None);
                };
                self.data_wire(
                    s,
                    Opcode::ExtentWrite,
                    export,
                    &piece,
                    Vec::new(),
                    Vec::new(),
                    data,
                    fua,
                )
            }
            ObjRequest::Query {
                collection,
                ranges,
                cursor,
                max,
            } => {
                let s = in_collection(Opcode::Query, collection);
                let mut p = page_params(&s, cursor, max, collection, &self.limits())?;
                if ranges.len() > usize::from(u16::MAX) {
                    return Err(refused(s, format!("{} query ranges", ranges.len())));
                }
                p.extend_from_slice(&(ranges.len() as u16).to_be_bytes());
                for r in ranges {
                    // Checked like attribute values.
                    self.attr_list(&s, &[AttrOp::Set(&r.key, r.min.as_wire())])?;
                    self.attr_list(&s, &[AttrOp::Set(&r.key, r.max.as_wire())])?;
                    if std::mem::discriminant(&r.min) != std::mem::discriminant(&r.max) {
                        return Err(refused(
                            s,
                            format!("query range on {:?} has bounds of two types", r.key),
                        ));
                    }
                    encode_query_range(
                        &QueryRange {
                            key: &r.key,
                            min: r.min.as_wire(),
                            max: r.max.as_wire(),
                        },
                        &mut p,
                    );
                }
                Self::plain_wire(s, Opcode::Query, 0, 0, p, Vec::new())
            }
        }))
    }

    /// Attributes ride on data commands only when the server agreed to
    /// it (`ATTRS_ON_DATA`); without, such a request could not succeed.
    pub(super) fn check_attrs_on_data(&self, req: &ObjRequest<'_>) -> Result<(), ObjError> {
        let (s, any) = match *req {
            ObjRequest::Read { object, get, .. } => {
                (subject(Opcode::Read, object), !get.is_empty())
            }
            ObjRequest::Write {
                object, options, ..
            } => (subject(Opcode::Write, object), !options.attrs.is_empty()),
            ObjRequest::Append {
                object, options, ..
            } => (subject(Opcode::Append, object), !options.attrs.is_empty()),
            ObjRequest::Punch {
                object, options, ..
            } => (subject(Opcode::Punch, object), !options.attrs.is_empty()),
            ObjRequest::CreateAndWrite {
                collection,
                options,
                ..
            } => (
                in_collection(Opcode::CreateAndWrite, collection),
                !options.attrs.is_empty(),
            ),
            _ => return Ok(()),
        };
        if any && !self.session.features.contains(Features::ATTRS_ON_DATA) {
            return Err(refused(
                s,
                "attributes on data commands were not negotiated with this server (use get_attrs/set_attrs)",
            ));
        }
        Ok(())
    }

    /// The merged segments if they fit one request, else `None`.
    pub(super) fn one_piece<'s>(
        &self,
        subject: &Subject,
        segments: &'s [Segment],
        extra: usize,
    ) -> Result<Option<Cow<'s, [Segment]>>, ObjError> {
        let merged = self.segments(subject, segments)?;
        Ok(fits_one(&merged, self.piece_limits(extra)).then_some(merged))
    }

    pub(super) fn check_data_len(
        &self,
        subject: &Subject,
        segments: &[Segment],
        data: &[u8],
    ) -> Result<(), ObjError> {
        let want = segments
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(s.length));
        if want != Some(data.len() as u64) {
            return Err(refused(
                subject.clone(),
                format!(
                    "{} data bytes for segments totalling {}",
                    data.len(),
                    want.map_or_else(|| "more than 2^64".into(), |w| w.to_string())
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn violation(&self, reason: impl Into<String>) -> ObjError {
        ObjError::Violation {
            server: self.server.to_owned(),
            reason: reason.into(),
        }
    }

    /// Turns the reply to a single-wire request into its response.
    pub(super) fn interpret(
        &self,
        req: &ObjRequest<'_>,
        reply: RawReply,
    ) -> Result<ObjResponse, ObjError> {
        let max_attr = self.limits().max_attr_size;
        let attrs = |raw: &[u8]| {
            Attrs::decode(raw, max_attr).map_err(|source| ObjError::Protocol {
                server: self.server.to_owned(),
                source,
            })
        };
        let u64_body = |what: &str| -> Result<u64, ObjError> {
            let b: [u8; 8] = reply.body.as_slice().try_into().map_err(|_| {
                self.violation(format!("{what} reply of {} bytes, not 8", reply.body.len()))
            })?;
            Ok(u64::from_be_bytes(b))
        };
        Ok(match req {
            ObjRequest::Create { .. } => {
                ObjResponse::Created(decode_id_list(&reply.body).map_err(|source| {
                    ObjError::Protocol {
                        server: self.server.to_owned(),
                        source,
                    }
                })?)
            }
            ObjRequest::CreateAndWrite { .. } => ObjResponse::Object(u64_body("CREATE_AND_WRITE")?),
            ObjRequest::Append { .. } => ObjResponse::Offset(u64_body("APPEND")?),
            ObjRequest::Read { segments, .. } | ObjRequest::ExtentRead { segments, .. } => {
                let want: u64 = segments.iter().map(|s| s.length).sum();
                if reply.body.len() as u64 != want {
                    return Err(self.violation(format!(
                        "READ reply of {} bytes for {want} requested",
                        reply.body.len()
                    )));
                }
                ObjResponse::Read(ReadReply {
                    attrs: attrs(&reply.attrs)?,
                    data: reply.body,
                    real_bytes: reply.real_bytes,
                })
            }
            ObjRequest::GetAttrs { .. } => ObjResponse::Attrs(attrs(&reply.attrs)?),
            ObjRequest::List { .. } | ObjRequest::Query { .. } => {
                let page = WirePage::decode(&reply.body, max_attr).map_err(|source| {
                    ObjError::Protocol {
                        server: self.server.to_owned(),
                        source,
                    }
                })?;
                ObjResponse::Page(Page {
                    next: page.next,
                    entries: page
                        .entries
                        .iter()
                        .map(|e| Entry {
                            object: e.object,
                            attrs: Attrs::from_ops(&e.attrs),
                        })
                        .collect(),
                })
            }
            _ => ObjResponse::Done,
        })
    }
}
