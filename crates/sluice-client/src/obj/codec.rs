//! Turning one command into wire requests and its replies back into a
//! response: encoding parameters and attribute lists within the limits
//! the server published, the DDT of each piece (`plan`), and decoding
//! reply bodies. No I/O: [`ObjClient`](super::ObjClient) sends what this
//! builds.

use std::borrow::Cow;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    decode_id_list, AttrOp, AttrOps, Command, Ddt, DdtKind, Features, FlushScope, Limits,
    MetaReply, MetaRequest, Negotiated, Opcode, Page as WirePage, QueryRange, QueryRanges, Request,
    Segment,
};

use super::attr::{AttrChange, Attrs};
use super::error::{Addressee, Subject};
use super::gather::Payload;
use super::plan::{choose_as, coalesce, fits_one, split, PieceLimits, PINNED_DDT_BYTES};
use super::request::{DataOptions, Entry, ObjRequest, ObjResponse, Page, ReadReply};
use super::wire::{RawReply, Wire};
use super::ObjError;
use crate::Durability;

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

/// Refuses a collection name too long for the wire, naming it.
pub(super) fn check_name(subject: &Subject, name: &str) -> Result<(), ObjError> {
    if name.len() > MAX_NAME_LEN {
        return Err(refused(
            subject.clone(),
            format!(
                "collection name of {} bytes is longer than {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// The data command `op` (READ, WRITE, PUNCH or EXTENT_*) on `object`
/// (an export's handle for EXTENT_*) with no DDT or data yet: what
/// [`Codec::data_wire`] gives each piece.
pub(super) fn data_command(op: Opcode, object: u64) -> Command<'static> {
    let ddt = Ddt::Contiguous(Segment {
        offset: 0,
        length: 0,
    });
    match op {
        Opcode::Read => Command::Read { object, ddt },
        Opcode::Punch => Command::Punch { object, ddt },
        Opcode::ExtentRead => Command::ExtentRead {
            export: object,
            ddt,
        },
        Opcode::ExtentWrite => Command::ExtentWrite {
            export: object,
            ddt,
            data: &[],
        },
        _ => Command::Write {
            object,
            ddt,
            data: &[],
        },
    }
}

/// The session's view of requests and replies.
pub(super) struct Codec<'s> {
    pub(super) session: &'s Negotiated,
    /// The server, for error messages.
    pub(super) server: &'s str,
    /// The DDT the caller pinned ([`ObjOptions::ddt`](super::ObjOptions::ddt)).
    pub(super) ddt: Option<DdtKind>,
    /// The connection driver takes span replies to list reads (see
    /// [`Connection`](super::connection::Connection)), so READs whose segments have a
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

    /// The typed attribute list of `encoded` (built by
    /// [`Self::attr_list`], so already checked).
    pub(super) fn attr_ops<'b>(&self, encoded: &'b [u8]) -> Result<AttrOps<'b>, ObjError> {
        AttrOps::parse(encoded, self.limits().max_attr_size)
            .map_err(|e| self.violation(format!("an attribute list the client built: {e}")))
    }

    /// A data command (READ, WRITE, PUNCH, CREATE_AND_WRITE, EXTENT_*)
    /// over one piece's segments: `command` with the piece's DDT and
    /// `data`, its attribute list `attrs` (encoded).
    pub(super) fn data_wire<'a>(
        &self,
        subject: Subject,
        command: Command<'_>,
        piece: &[Segment],
        attrs: &[u8],
        data: Payload<'a>,
        durability: Durability,
    ) -> Result<Wire<'a>, ObjError> {
        let mut layout = choose_as(piece, self.ddt);
        if self.session.features.contains(Features::SGL_MASTER) {
            layout = layout.with_master();
        }
        let mut raw = Vec::new();
        layout
            .encode(&mut raw)
            .map_err(|e| self.violation(format!("a DDT the client built: {e}")))?;
        let ddt = Ddt::parse(
            layout.kind(),
            layout.master_offset(),
            layout.total(),
            &raw,
            &self.limits(),
        )
        .map_err(|e| self.violation(format!("a DDT the client built: {e}")))?;
        // Gathered data is no one slice: the command holds none, and
        // the wire sends the buffers (see `Wire::new`).
        let one: &[u8] = match data {
            Payload::One(b) => b,
            Payload::Many(_) => &[],
        };
        let command = command.with_piece(ddt, one);
        let span_ok = matches!(command, Command::Read { .. })
            && self.spans
            && ddt.kind() != DdtKind::Contiguous
            && self.session.features.contains(Features::SPAN_READS)
            && ddt.dense_span().is_some();
        let request = Request {
            id: 0,
            command,
            attrs: self.attr_ops(attrs)?,
            fua: durability.is_durable(),
            span_ok,
        };
        let region = match data {
            Payload::One(_) if command.data().is_empty() => Payload::default(),
            data => data,
        };
        Wire::new(subject, &request, region)
    }

    /// A command without a DDT or data.
    pub(super) fn plain_wire<'a>(
        &self,
        subject: Subject,
        command: Command<'_>,
        attrs: &[u8],
        durability: Durability,
    ) -> Result<Wire<'a>, ObjError> {
        let request = Request {
            id: 0,
            command,
            attrs: self.attr_ops(attrs)?,
            fua: durability.is_durable(),
            span_ok: false,
        };
        Wire::new(subject, &request, Payload::default())
    }

    /// One call of the server's metadata service (its parameters,
    /// encoded by the caller into `params`).
    pub(super) fn meta_wire<'a>(
        &self,
        request: &MetaRequest,
        params: &'a mut Vec<u8>,
    ) -> Result<Wire<'a>, ObjError> {
        let subject = Subject {
            op: Opcode::Meta,
            target: Addressee::Partition(self.session.partition),
        };
        params.clear();
        request.encode(params);
        self.plain_wire(subject, Command::Meta { params }, &[], Durability::Buffered)
    }

    /// The metadata service's answer in `reply`.
    pub(super) fn meta_reply(&self, reply: &RawReply) -> Result<MetaReply, ObjError> {
        MetaReply::decode(&reply.body)
            .map_err(|e| self.violation(format!("undecodable metadata reply: {e}")))
    }

    /// The one wire request `req` is, or `None` if it must be split (or
    /// needs none).
    pub(super) fn single<'a>(&self, req: &ObjRequest<'a>) -> Result<Option<Wire<'a>>, ObjError> {
        self.check_attrs_on_data(req)?;
        match *req {
            // Too many for one request: cut by the caller.
            ObjRequest::Create { count, .. }
                if count == 0 || count > self.limits().max_segments =>
            {
                Ok(None)
            }
            ObjRequest::Read { .. }
            | ObjRequest::Write { .. }
            | ObjRequest::Punch { .. }
            | ObjRequest::Append { .. }
            | ObjRequest::CreateAndWrite { .. }
            | ObjRequest::ExtentRead { .. }
            | ObjRequest::ExtentWrite { .. } => self.single_data(req),
            _ => self.single_plain(req).map(Some),
        }
    }

    /// [`Self::single`] of a command that moves or changes bytes.
    fn single_data<'a>(&self, req: &ObjRequest<'a>) -> Result<Option<Wire<'a>>, ObjError> {
        let no_ddt = Ddt::Contiguous(Segment {
            offset: 0,
            length: 0,
        });
        let (s, command, segments, data, attrs, durability) = match *req {
            ObjRequest::Read {
                object,
                segments,
                get,
            } => {
                let s = subject(Opcode::Read, object);
                let a = self.get_list(&s, get)?;
                let c = Command::Read {
                    object,
                    ddt: no_ddt,
                };
                (s, c, segments, &[][..], a, Durability::Buffered)
            }
            ObjRequest::Write {
                object,
                segments,
                data,
                options,
            } => {
                let s = subject(Opcode::Write, object);
                self.check_data_len(&s, segments, data.len())?;
                let a = self.change_list(&s, &options.attrs)?;
                let c = Command::Write {
                    object,
                    ddt: no_ddt,
                    data,
                };
                (s, c, segments, data, a, options.durability)
            }
            ObjRequest::Punch {
                object,
                segments,
                options,
            } => {
                let s = subject(Opcode::Punch, object);
                let a = self.change_list(&s, &options.attrs)?;
                let c = Command::Punch {
                    object,
                    ddt: no_ddt,
                };
                (s, c, segments, &[][..], a, options.durability)
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
                let request = Request {
                    id: 0,
                    command: Command::Append { object, data },
                    attrs: self.attr_ops(&a)?,
                    fua: options.durability.is_durable(),
                    span_ok: false,
                };
                return Wire::new(s, &request, data.into()).map(Some);
            }
            ObjRequest::CreateAndWrite {
                collection,
                segments,
                data,
                options,
            } => return self.create_and_write(collection, segments, data, options),
            ObjRequest::ExtentRead { export, segments } => {
                let s = self.extent_subject(Opcode::ExtentRead, export);
                let c = Command::ExtentRead {
                    export,
                    ddt: no_ddt,
                };
                (s, c, segments, &[][..], Vec::new(), Durability::Buffered)
            }
            ObjRequest::ExtentWrite {
                export,
                segments,
                data,
                durability,
            } => {
                let s = self.extent_subject(Opcode::ExtentWrite, export);
                self.check_data_len(&s, segments, data.len())?;
                let c = Command::ExtentWrite {
                    export,
                    ddt: no_ddt,
                    data,
                };
                (s, c, segments, data, Vec::new(), durability)
            }
            _ => unreachable!("single sends only data commands here"),
        };
        let Some(piece) = self.one_piece(&s, segments, attrs.len())? else {
            return Ok(None);
        };
        self.data_wire(s, command, &piece, &attrs, data.into(), durability)
            .map(Some)
    }

    /// [`Self::single`] of CREATE_AND_WRITE: its collection name travels
    /// beside the DDT, and no segments make an empty object.
    fn create_and_write<'a>(
        &self,
        collection: &str,
        segments: &[Segment],
        data: &'a [u8],
        options: &DataOptions,
    ) -> Result<Option<Wire<'a>>, ObjError> {
        let s = in_collection(Opcode::CreateAndWrite, collection);
        self.check_data_len(&s, segments, data.len())?;
        check_name(&s, collection)?;
        let a = self.change_list(&s, &options.attrs)?;
        let command = Command::CreateAndWrite {
            collection,
            ddt: Ddt::Contiguous(Segment {
                offset: 0,
                length: 0,
            }),
            data: &[],
        };
        let merged = self.segments(&s, segments)?;
        if merged.is_empty() {
            // An empty object: a contiguous DDT of length 0.
            let request = Request {
                id: 0,
                command,
                attrs: self.attr_ops(&a)?,
                fua: options.durability.is_durable(),
                span_ok: false,
            };
            return Wire::new(s, &request, Payload::default()).map(Some);
        }
        let extra = a.len() + 1 + collection.len();
        let Some(piece) = self.one_piece(&s, &merged, extra)? else {
            return Ok(None);
        };
        self.data_wire(s, command, &piece, &a, data.into(), options.durability)
            .map(Some)
    }

    /// [`Self::single`] of a command without a DDT or data.
    fn single_plain<'a>(&self, req: &ObjRequest<'a>) -> Result<Wire<'a>, ObjError> {
        match *req {
            ObjRequest::Create {
                collection,
                count,
                durability,
            } => {
                let s = in_collection(Opcode::Create, collection);
                check_name(&s, collection)?;
                let c = Command::Create { count, collection };
                self.plain_wire(s, c, &[], durability)
            }
            ObjRequest::Remove { object, durability } => self.plain_wire(
                subject(Opcode::Remove, object),
                Command::Remove { object },
                &[],
                durability,
            ),
            ObjRequest::List {
                collection,
                cursor,
                max,
                attrs,
            } => {
                let s = in_collection(Opcode::List, collection);
                check_name(&s, collection)?;
                let a = match attrs {
                    None => Vec::new(),
                    Some(keys) => self.get_list(&s, keys)?,
                };
                let c = Command::List {
                    collection,
                    cursor,
                    max: self.page_max(max),
                    with_attrs: attrs.is_some(),
                };
                self.plain_wire(s, c, &a, Durability::Buffered)
            }
            ObjRequest::Flush(scope) => {
                let s = match scope {
                    FlushScope::Object(o) => subject(Opcode::Flush, o),
                    FlushScope::Collection(c) => {
                        let s = in_collection(Opcode::Flush, c);
                        check_name(&s, c)?;
                        s
                    }
                    FlushScope::Partition => Subject {
                        op: Opcode::Flush,
                        target: Addressee::Partition(self.session.partition),
                    },
                    FlushScope::Export(handle) => self.extent_subject(Opcode::Flush, handle),
                };
                self.plain_wire(s, Command::Flush(scope), &[], Durability::Buffered)
            }
            ObjRequest::GetAttrs { object, keys } => {
                let s = subject(Opcode::GetAttrs, object);
                let a = self.get_list(&s, keys)?;
                self.plain_wire(s, Command::GetAttrs { object }, &a, Durability::Buffered)
            }
            ObjRequest::SetAttrs {
                object,
                changes,
                durability,
            } => {
                let s = subject(Opcode::SetAttrs, object);
                let a = self.change_list(&s, changes)?;
                self.plain_wire(s, Command::SetAttrs { object }, &a, durability)
            }
            ObjRequest::Query {
                collection,
                ranges,
                cursor,
                max,
            } => self.query(collection, ranges, cursor, max),
            ObjRequest::Truncate {
                object,
                length,
                durability,
            } => self.plain_wire(
                subject(Opcode::Truncate, object),
                Command::Truncate { object, length },
                &[],
                durability,
            ),
            ObjRequest::ReplaceData {
                object,
                source,
                durability,
            } => self.plain_wire(
                subject(Opcode::ReplaceData, object),
                Command::ReplaceData { object, source },
                &[],
                durability,
            ),
            _ => unreachable!("single sends only plain commands here"),
        }
    }

    /// A QUERY: its ranges checked as attribute values are.
    fn query<'a>(
        &self,
        collection: &str,
        ranges: &[super::request::Range],
        cursor: u64,
        max: u32,
    ) -> Result<Wire<'a>, ObjError> {
        let s = in_collection(Opcode::Query, collection);
        check_name(&s, collection)?;
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
        }
        let wire_ranges: Vec<QueryRange<'_>> = ranges
            .iter()
            .map(|r| QueryRange {
                key: &r.key,
                min: r.min.as_wire(),
                max: r.max.as_wire(),
            })
            .collect();
        let mut buf = Vec::new();
        let ranges = QueryRanges::build(&wire_ranges, self.limits().max_attr_size, &mut buf)
            .map_err(|e| refused(s.clone(), format!("query ranges: {e}")))?;
        let c = Command::Query {
            collection,
            cursor,
            max: self.page_max(max),
            ranges,
        };
        self.plain_wire(s, c, &[], Durability::Buffered)
    }

    /// A page size the server takes.
    fn page_max(&self, max: u32) -> u32 {
        max.clamp(1, self.limits().max_segments.max(1))
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
        data_len: usize,
    ) -> Result<(), ObjError> {
        let want = segments
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(s.length));
        if want != Some(data_len as u64) {
            return Err(refused(
                subject.clone(),
                format!(
                    "{data_len} data bytes for segments totalling {}",
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
