//! [`ObjClient`]: a typed, blocking API for every command of the native
//! object protocol over one connection.
//!
//! Each call turns its arguments into wire requests: it picks the DDT
//! (see `plan`), cuts what exceeds the server's published limits into
//! several requests, sends them pipelined, and puts the replies back
//! together. What splitting changes, callers should know:
//!
//! - reads are cut anywhere and reassembled in order; `real_bytes` is
//!   the sum over the pieces;
//! - writes and punches whose pieces touch no common byte are in flight
//!   together; if two pieces overlap they are sent one after the other,
//!   so the later bytes still win;
//! - attributes riding on a split write go with its last piece, sent
//!   once every other piece has succeeded: no reader sees the attributes
//!   before the data (but a reader may see part of the data before the
//!   attributes, as the protocol's atomicity covers one request);
//! - a split APPEND appends its first piece and writes the rest after
//!   it; a split CREATE_AND_WRITE creates the object with the first
//!   piece and writes the rest into it;
//! - CREATE of more objects than one request may make is several
//!   requests; the ids come back in order.

use std::time::Duration;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    decode_id_list, encode_query_range, AttachedExport, AttrOp, AttrOps, Features, FlushScope,
    Limits, Negotiated, Opcode, Page as WirePage, QueryRange, Segment,
};

use super::attr::{AttrChange, Attrs, Value};
use super::error::{Addressee, Subject};
use super::handshake::open;
use super::link::{Link, RawReply, Wire};
use super::plan::{choose, coalesce, pieces_overlap, split, PieceLimits};
use super::ObjError;
use crate::handshake::DEFAULT_CONNECT_TIMEOUT;
use crate::uri::ObjUri;

/// How to connect and how much to keep in flight.
#[derive(Debug, Clone)]
pub struct ObjOptions {
    /// Limit on connecting and the whole handshake (TLS included).
    pub connect_timeout: Duration,
    /// Limit on waiting for a reply (`None`: wait for ever). A request
    /// that times out fails with [`ObjError::Timeout`] and the connection
    /// is then unusable.
    pub request_timeout: Option<Duration>,
    /// Features to ask for (those the server does not offer are dropped).
    pub features: Features,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// NBD exports of the same server to attach, by name, for extent
    /// reads and writes ([`ObjClient::exports`] gives their handles).
    pub exports: Vec<String>,
}

impl Default for ObjOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            features: Features::NEGOTIABLE,
            max_in_flight: 64,
            exports: Vec::new(),
        }
    }
}

/// What rides on a command that changes data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataOptions {
    /// Durable before the reply.
    pub fua: bool,
    /// Attribute changes applied with the data.
    pub attrs: Vec<AttrChange>,
}

impl DataOptions {
    /// Durable before the reply, no attributes.
    pub fn fua() -> Self {
        Self {
            fua: true,
            attrs: Vec::new(),
        }
    }
}

/// What a read returned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadReply {
    /// The segments' bytes in list order (zeros past the object's end).
    pub data: Vec<u8>,
    /// How many of them lie below the object's logical length.
    pub real_bytes: u64,
    /// Attributes read with the data (if asked for).
    pub attrs: Attrs,
}

/// One object of a LIST or QUERY page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub object: u64,
    /// Its attributes, if asked for.
    pub attrs: Attrs,
}

/// A LIST or QUERY page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    /// Cursor of the next page; 0 when this page is the last.
    pub next: u64,
    pub entries: Vec<Entry>,
}

/// A query range: members whose attribute `key` lies in `min..=max`
/// (both of one type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub key: String,
    pub min: Value,
    pub max: Value,
}

/// An object's mandatory attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub object: u64,
    /// Logical length in bytes.
    pub length: u64,
    /// Every attribute the server keeps itself (keys `sluice.*`).
    pub attrs: Attrs,
}

/// The attribute holding an object's logical length.
pub const LENGTH_ATTR: &str = "sluice.length";
/// Keys the server keeps itself start with this.
pub const SERVER_ATTR_PREFIX: &str = "sluice.";

/// One command, for [`ObjClient::batch`] and [`ObjClient::pipeline`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum ObjRequest<'a> {
    /// `count` objects, in `collection` if not empty.
    Create {
        collection: &'a str,
        count: u32,
        fua: bool,
    },
    Remove {
        object: u64,
        fua: bool,
    },
    /// One page; `attrs`: `None` for no attributes, `Some(&[])` for all.
    List {
        collection: &'a str,
        cursor: u64,
        max: u32,
        attrs: Option<&'a [&'a str]>,
    },
    /// The segments' bytes, and the attributes `get` (none: no list).
    Read {
        object: u64,
        segments: &'a [Segment],
        get: &'a [&'a str],
    },
    Write {
        object: u64,
        segments: &'a [Segment],
        data: &'a [u8],
        options: &'a DataOptions,
    },
    Append {
        object: u64,
        data: &'a [u8],
        options: &'a DataOptions,
    },
    CreateAndWrite {
        collection: &'a str,
        segments: &'a [Segment],
        data: &'a [u8],
        options: &'a DataOptions,
    },
    Punch {
        object: u64,
        segments: &'a [Segment],
        options: &'a DataOptions,
    },
    Flush(FlushScope<'a>),
    /// The attributes `keys` (none: all of them).
    GetAttrs {
        object: u64,
        keys: &'a [&'a str],
    },
    SetAttrs {
        object: u64,
        changes: &'a [AttrChange],
        fua: bool,
    },
    Query {
        collection: &'a str,
        ranges: &'a [Range],
        cursor: u64,
        max: u32,
    },
    /// Extents of an attached NBD export (its handle, from
    /// [`ObjClient::exports`]).
    ExtentRead {
        export: u64,
        segments: &'a [Segment],
    },
    ExtentWrite {
        export: u64,
        segments: &'a [Segment],
        data: &'a [u8],
        fua: bool,
    },
}

/// What a command returned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjResponse {
    /// Success without a body (REMOVE, WRITE, PUNCH, FLUSH, SET_ATTRS).
    Done,
    /// CREATE: the new ids in order.
    Created(Vec<u64>),
    /// CREATE_AND_WRITE: the new object.
    Object(u64),
    /// APPEND: where the data went.
    Offset(u64),
    Read(ReadReply),
    Attrs(Attrs),
    Page(Page),
}

/// A connection to an object server, owned by one thread.
pub struct ObjClient {
    link: Link,
    options: ObjOptions,
}

impl std::fmt::Debug for ObjClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjClient")
            .field("server", &self.link.server)
            .field("session", &self.link.session)
            .finish()
    }
}

impl Drop for ObjClient {
    fn drop(&mut self) {
        self.link.disconnect();
    }
}

fn subject(op: Opcode, object: u64) -> Subject {
    Subject {
        op,
        target: Addressee::Object(object),
    }
}

fn in_collection(op: Opcode, collection: &str) -> Subject {
    Subject {
        op,
        target: Addressee::Collection(collection.to_owned()),
    }
}

fn refused(subject: Subject, reason: impl Into<String>) -> ObjError {
    ObjError::Refused {
        subject,
        reason: reason.into(),
    }
}

/// A name parameter (`len u8`, bytes).
fn push_name(subject: &Subject, name: &str, out: &mut Vec<u8>) -> Result<(), ObjError> {
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

fn page_params(
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

impl ObjClient {
    /// Connects to `uri` (its partition, or the default one).
    pub fn connect(uri: &ObjUri, options: &ObjOptions) -> Result<Self, ObjError> {
        let (stream, session) = open(uri, options)?;
        Ok(Self {
            link: Link::new(stream, uri.to_string(), session, options.request_timeout),
            options: options.clone(),
        })
    }

    /// What the handshake agreed on (features, limits, partition).
    pub fn session(&self) -> &Negotiated {
        &self.link.session
    }

    /// The server, as its URI.
    pub fn server(&self) -> &str {
        &self.link.server
    }

    /// The NBD exports attached in the handshake ([`ObjOptions::exports`]),
    /// with the handles extent commands name them by.
    pub fn exports(&self) -> &[AttachedExport] {
        &self.link.session.exports
    }

    fn extent_subject(&self, op: Opcode, handle: u64) -> Subject {
        let name = self
            .exports()
            .iter()
            .find(|e| e.handle == handle)
            .map_or_else(|| format!("#{handle}"), |e| e.name.clone());
        Subject {
            op,
            target: Addressee::Export(name),
        }
    }

    fn limits(&self) -> Limits {
        self.link.session.limits
    }

    fn can_batch(&self) -> bool {
        self.link.session.features.contains(Features::BATCH)
    }

    // ---- building wire requests ------------------------------------

    /// An attribute list within the limits.
    fn attr_list(&self, subject: &Subject, ops: &[AttrOp<'_>]) -> Result<Vec<u8>, ObjError> {
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

    fn change_list(&self, subject: &Subject, changes: &[AttrChange]) -> Result<Vec<u8>, ObjError> {
        let ops: Vec<AttrOp<'_>> = changes.iter().map(AttrChange::as_wire).collect();
        self.attr_list(subject, &ops)
    }

    fn get_list(&self, subject: &Subject, keys: &[&str]) -> Result<Vec<u8>, ObjError> {
        let ops: Vec<AttrOp<'_>> = keys.iter().map(|k| AttrOp::Get(k)).collect();
        self.attr_list(subject, &ops)
    }

    /// Checks segments (none may end past 2^64) and merges neighbours.
    fn segments(&self, subject: &Subject, segments: &[Segment]) -> Result<Vec<Segment>, ObjError> {
        if let Some(s) = segments
            .iter()
            .find(|s| s.offset.checked_add(s.length).is_none())
        {
            return Err(refused(
                subject.clone(),
                format!(
                    "segment at offset {} of {} bytes ends past 2^64",
                    s.offset, s.length
                ),
            ));
        }
        Ok(coalesce(segments))
    }

    /// Cuts `segments` into pieces within the limits, leaving room for
    /// `extra` bytes of parameters and attributes in each request.
    fn pieces(
        &self,
        subject: &Subject,
        segments: &[Segment],
        extra: usize,
    ) -> Result<Vec<Vec<Segment>>, ObjError> {
        let l = self.limits();
        let limits = PieceLimits {
            max_segments: l.max_segments,
            max_bytes: u64::from(l.max_payload).saturating_sub(extra as u64),
        };
        split(segments, limits).ok_or_else(|| {
            refused(
                subject.clone(),
                format!(
                    "the server's limits (max_segments {}, max_payload {}) leave no room for data beside {extra} bytes of parameters and attributes",
                    l.max_segments, l.max_payload
                ),
            )
        })
    }

    /// A data command (READ, WRITE, PUNCH, CREATE_AND_WRITE) over one
    /// piece's segments.
    #[allow(clippy::too_many_arguments)] // the fields of one request
    fn data_wire<'a>(
        subject: Subject,
        op: Opcode,
        object: u64,
        piece: &[Segment],
        params: Vec<u8>,
        attrs: Vec<u8>,
        data: &'a [u8],
        fua: bool,
    ) -> Wire<'a> {
        let layout = choose(piece);
        let mut ddt = Vec::new();
        layout.encode(&mut ddt);
        let length = layout.total();
        let carries = matches!(
            op,
            Opcode::Write | Opcode::CreateAndWrite | Opcode::ExtentWrite
        );
        Wire {
            subject,
            opcode: op.wire(),
            flags: layout.kind().flags() | if fua { FLAG_FUA } else { 0 },
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
    fn plain_wire<'a>(
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
    fn single<'a>(&self, req: &ObjRequest<'a>) -> Result<Option<Wire<'a>>, ObjError> {
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
                Self::data_wire(s, Opcode::Read, object, &piece, Vec::new(), a, &[], false)
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
                Self::data_wire(
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
                Self::data_wire(
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
                Self::data_wire(
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
                            target: Addressee::Partition(self.link.session.partition),
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
                Self::data_wire(
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
                Self::data_wire(
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
    fn check_attrs_on_data(&self, req: &ObjRequest<'_>) -> Result<(), ObjError> {
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
        if any && !self.link.session.features.contains(Features::ATTRS_ON_DATA) {
            return Err(refused(
                s,
                "attributes on data commands were not negotiated with this server (use get_attrs/set_attrs)",
            ));
        }
        Ok(())
    }

    /// The merged segments if they fit one request, else `None`.
    fn one_piece(
        &self,
        subject: &Subject,
        segments: &[Segment],
        extra: usize,
    ) -> Result<Option<Vec<Segment>>, ObjError> {
        let merged = self.segments(subject, segments)?;
        if merged.is_empty() {
            return Ok(None);
        }
        let mut pieces = self.pieces(subject, &merged, extra)?;
        Ok(if pieces.len() == 1 {
            pieces.pop()
        } else {
            None
        })
    }

    fn check_data_len(
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

    fn violation(&self, reason: impl Into<String>) -> ObjError {
        ObjError::Violation {
            server: self.link.server.clone(),
            reason: reason.into(),
        }
    }

    /// Turns the reply to a single-wire request into its response.
    fn interpret(&self, req: &ObjRequest<'_>, reply: RawReply) -> Result<ObjResponse, ObjError> {
        let max_attr = self.limits().max_attr_size;
        let attrs = |raw: &[u8]| {
            Attrs::decode(raw, max_attr).map_err(|source| ObjError::Protocol {
                server: self.link.server.clone(),
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
                        server: self.link.server.clone(),
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
                        server: self.link.server.clone(),
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

    // ---- running requests -------------------------------------------

    /// Runs one command, splitting it as the limits require.
    pub fn run(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        if let Some(wire) = self.single(req)? {
            let reply = self.exchange(std::slice::from_ref(&wire), false).pop();
            let reply = reply.unwrap_or_else(|| Err(self.violation("no reply")))?;
            return self.interpret(req, reply);
        }
        self.run_split(req)
    }

    fn exchange(&mut self, wires: &[Wire<'_>], batch: bool) -> Vec<Result<RawReply, ObjError>> {
        let n = self.options.max_in_flight;
        self.link.exchange(wires, batch, n)
    }

    /// Every wire, in flight together; the first failure wins.
    fn all(&mut self, wires: &[Wire<'_>]) -> Result<Vec<RawReply>, ObjError> {
        self.exchange(wires, false).into_iter().collect()
    }

    /// Pieces of a write or punch: in flight together unless two
    /// overlap, then one at a time.
    fn in_order(&mut self, wires: Vec<Wire<'_>>, overlap: bool) -> Result<(), ObjError> {
        if overlap {
            for w in wires {
                self.all(std::slice::from_ref(&w))?;
            }
            Ok(())
        } else {
            self.all(&wires).map(drop)
        }
    }

    fn run_split(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        match *req {
            ObjRequest::Create {
                collection,
                count,
                fua,
            } => {
                let s = in_collection(Opcode::Create, collection);
                if count == 0 {
                    return Err(refused(s, "a count of 0 creates nothing"));
                }
                let step = self.limits().max_segments.max(1);
                let counts: Vec<u32> = (0..count)
                    .step_by(step as usize)
                    .map(|start| step.min(count - start))
                    .collect();
                let mut wires = Vec::with_capacity(counts.len());
                for c in counts {
                    let req = ObjRequest::Create {
                        collection,
                        count: c,
                        fua,
                    };
                    match self.single(&req)? {
                        Some(w) => wires.push(w),
                        None => return Err(refused(s, "the server's limits allow no CREATE")),
                    }
                }
                let mut ids = Vec::with_capacity(count as usize);
                for r in self.all(&wires)? {
                    match self.interpret(req, r)? {
                        ObjResponse::Created(v) => ids.extend(v),
                        other => return Err(self.violation(format!("CREATE answered {other:?}"))),
                    }
                }
                Ok(ObjResponse::Created(ids))
            }
            ObjRequest::Read {
                object,
                segments,
                get,
            } => {
                let s = subject(Opcode::Read, object);
                self.read_pieces(s, Opcode::Read, object, segments, get)
                    .map(ObjResponse::Read)
            }
            ObjRequest::ExtentRead { export, segments } => {
                let s = self.extent_subject(Opcode::ExtentRead, export);
                self.read_pieces(s, Opcode::ExtentRead, export, segments, &[])
                    .map(ObjResponse::Read)
            }
            ObjRequest::ExtentWrite {
                export,
                segments,
                data,
                fua,
            } => {
                let s = self.extent_subject(Opcode::ExtentWrite, export);
                let options = DataOptions {
                    fua,
                    attrs: Vec::new(),
                };
                self.write_pieces(&s, Opcode::ExtentWrite, export, segments, data, &options)?;
                Ok(ObjResponse::Done)
            }
            ObjRequest::Write {
                object,
                segments,
                data,
                options,
            } => {
                let s = subject(Opcode::Write, object);
                self.write_pieces(&s, Opcode::Write, object, segments, data, options)?;
                Ok(ObjResponse::Done)
            }
            ObjRequest::Punch {
                object,
                segments,
                options,
            } => {
                let s = subject(Opcode::Punch, object);
                self.write_pieces(&s, Opcode::Punch, object, segments, &[], options)?;
                Ok(ObjResponse::Done)
            }
            ObjRequest::Append {
                object,
                data,
                options,
            } => {
                // The first piece is appended; the rest is written after
                // it, attributes with the last piece.
                let s = subject(Opcode::Append, object);
                self.change_list(&s, &options.attrs)?;
                let first_len =
                    (u64::from(self.limits().max_payload).min(data.len() as u64)) as usize;
                let (first, rest) = data.split_at(first_len);
                let plain = DataOptions {
                    fua: options.fua,
                    attrs: Vec::new(),
                };
                let at = match self.run(&ObjRequest::Append {
                    object,
                    data: first,
                    options: &plain,
                })? {
                    ObjResponse::Offset(at) => at,
                    other => return Err(self.violation(format!("APPEND answered {other:?}"))),
                };
                let seg = [Segment {
                    offset: at + first_len as u64,
                    length: rest.len() as u64,
                }];
                self.write_pieces(&s, Opcode::Write, object, &seg, rest, options)?;
                Ok(ObjResponse::Offset(at))
            }
            ObjRequest::CreateAndWrite {
                collection,
                segments,
                data,
                options,
            } => {
                // Create with the first piece; write the rest into it.
                let s = in_collection(Opcode::CreateAndWrite, collection);
                let a = self.change_list(&s, &options.attrs)?;
                let mut p = Vec::new();
                push_name(&s, collection, &mut p)?;
                let merged = self.segments(&s, segments)?;
                let pieces = self.pieces(&s, &merged, a.len() + p.len())?;
                let Some((first, rest)) = pieces.split_first() else {
                    return Err(self.violation("nothing to create"));
                };
                let first_len: u64 = first.iter().map(|s| s.length).sum();
                let (head, tail) = data
                    .split_at_checked(first_len as usize)
                    .ok_or_else(|| refused(s.clone(), "fewer data bytes than the segments take"))?;
                let plain = DataOptions {
                    fua: options.fua,
                    attrs: Vec::new(),
                };
                let id = match self.run(&ObjRequest::CreateAndWrite {
                    collection,
                    segments: first,
                    data: head,
                    options: &plain,
                })? {
                    ObjResponse::Object(id) => id,
                    other => {
                        return Err(self.violation(format!("CREATE_AND_WRITE answered {other:?}")))
                    }
                };
                let rest: Vec<Segment> = rest.iter().flatten().copied().collect();
                self.write_pieces(
                    &subject(Opcode::Write, id),
                    Opcode::Write,
                    id,
                    &rest,
                    tail,
                    options,
                )?;
                Ok(ObjResponse::Object(id))
            }
            // Everything else is always one request; `single` refused it
            // for a reason it reports itself.
            _ => Err(self.violation("a request that cannot be split did not fit one frame")),
        }
    }

    /// Reads `segments` (of an object, or of an attached export), cut
    /// as the limits require; attributes `get` come with the first piece.
    fn read_pieces(
        &mut self,
        s: Subject,
        op: Opcode,
        object: u64,
        segments: &[Segment],
        get: &[&str],
    ) -> Result<ReadReply, ObjError> {
        let merged = self.segments(&s, segments)?;
        if merged.is_empty() {
            let attrs = if get.is_empty() {
                Attrs::default()
            } else {
                self.get_attrs(object, get)?
            };
            return Ok(ReadReply {
                attrs,
                ..ReadReply::default()
            });
        }
        let a = self.get_list(&s, get)?;
        let pieces = self.pieces(&s, &merged, a.len())?;
        let wires: Vec<Wire<'_>> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                // Attributes are read with the first piece.
                let a = if i == 0 { a.clone() } else { Vec::new() };
                Self::data_wire(s.clone(), op, object, p, Vec::new(), a, &[], false)
            })
            .collect();
        let total: u64 = merged.iter().map(|s| s.length).sum();
        let mut out = ReadReply {
            data: Vec::with_capacity(total as usize),
            ..ReadReply::default()
        };
        for (i, (r, w)) in self.all(&wires)?.into_iter().zip(&wires).enumerate() {
            if r.body.len() as u64 != w.length {
                return Err(self.violation(format!(
                    "READ reply of {} bytes for {} requested",
                    r.body.len(),
                    w.length
                )));
            }
            if i == 0 {
                out.attrs =
                    Attrs::decode(&r.attrs, self.limits().max_attr_size).map_err(|source| {
                        ObjError::Protocol {
                            server: self.link.server.clone(),
                            source,
                        }
                    })?;
            }
            out.real_bytes += r.real_bytes;
            out.data.extend_from_slice(&r.body);
        }
        Ok(out)
    }

    /// Writes (or punches) `segments`, cut as the limits require;
    /// attributes ride on the last piece, sent once the others succeeded.
    fn write_pieces(
        &mut self,
        s: &Subject,
        op: Opcode,
        object: u64,
        segments: &[Segment],
        data: &[u8],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        let a = self.change_list(s, &options.attrs)?;
        let merged = self.segments(s, segments)?;
        if merged.is_empty() {
            if !options.attrs.is_empty() {
                return self.set_attrs(object, &options.attrs, options.fua);
            }
            return Ok(());
        }
        let pieces = self.pieces(s, &merged, a.len())?;
        let overlap = pieces_overlap(&pieces);
        let mut wires = Vec::with_capacity(pieces.len());
        let mut at = 0usize;
        let last = pieces.len() - 1;
        for (i, p) in pieces.iter().enumerate() {
            let len: u64 = p.iter().map(|s| s.length).sum();
            let chunk = if matches!(op, Opcode::Write | Opcode::ExtentWrite) {
                // Callers checked the data against the segments.
                data.get(at..at + len as usize)
                    .ok_or_else(|| refused(s.clone(), "fewer data bytes than the segments take"))?
            } else {
                &[]
            };
            at += chunk.len();
            let attrs = if i == last { a.clone() } else { Vec::new() };
            wires.push(Self::data_wire(
                s.clone(),
                op,
                object,
                p,
                Vec::new(),
                attrs,
                chunk,
                options.fua,
            ));
        }
        let tail = wires.pop();
        self.in_order(wires, overlap)?;
        if let Some(w) = tail {
            self.all(std::slice::from_ref(&w))?;
        }
        Ok(())
    }

    /// Runs `requests` with as many in flight as allowed, in batch frames
    /// when the server negotiated them; each is answered on its own, in
    /// order of `requests`. Requests that need splitting run after the
    /// others, each split as [`run`](Self::run) does.
    pub fn batch(&mut self, requests: &[ObjRequest<'_>]) -> Vec<Result<ObjResponse, ObjError>> {
        let frames = self.can_batch();
        self.many(requests, frames)
    }

    /// Like [`batch`](Self::batch), but every request in its own frame.
    pub fn pipeline(&mut self, requests: &[ObjRequest<'_>]) -> Vec<Result<ObjResponse, ObjError>> {
        self.many(requests, false)
    }

    fn many(
        &mut self,
        requests: &[ObjRequest<'_>],
        frames: bool,
    ) -> Vec<Result<ObjResponse, ObjError>> {
        let mut results: Vec<Option<Result<ObjResponse, ObjError>>> =
            std::iter::repeat_with(|| None)
                .take(requests.len())
                .collect();
        let mut wires = Vec::new();
        let mut at = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            match self.single(r) {
                Ok(Some(w)) => {
                    wires.push(w);
                    at.push(i);
                }
                Ok(None) => {}
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let replies = self.exchange(&wires, frames);
        for (reply, i) in replies.into_iter().zip(at) {
            results[i] = Some(reply.and_then(|r| self.interpret(&requests[i], r)));
        }
        for (i, r) in requests.iter().enumerate() {
            if results[i].is_none() {
                results[i] = Some(self.run_split(r));
            }
        }
        results.into_iter().flatten().collect()
    }

    // ---- typed commands -------------------------------------------------

    /// Makes `count` objects, in `collection` if not empty; returns their
    /// ids in order.
    pub fn create(
        &mut self,
        collection: &str,
        count: u32,
        fua: bool,
    ) -> Result<Vec<u64>, ObjError> {
        match self.run(&ObjRequest::Create {
            collection,
            count,
            fua,
        })? {
            ObjResponse::Created(ids) => Ok(ids),
            other => Err(self.violation(format!("CREATE answered {other:?}"))),
        }
    }

    /// Removes `object`.
    pub fn remove(&mut self, object: u64, fua: bool) -> Result<(), ObjError> {
        self.run(&ObjRequest::Remove { object, fua }).map(drop)
    }

    /// Removes every object, pipelined; one result per object.
    pub fn remove_many(&mut self, objects: &[u64], fua: bool) -> Vec<Result<(), ObjError>> {
        let reqs: Vec<ObjRequest<'_>> = objects
            .iter()
            .map(|&object| ObjRequest::Remove { object, fua })
            .collect();
        self.batch(&reqs).into_iter().map(|r| r.map(drop)).collect()
    }

    /// One page of a listing (collection empty: the whole partition);
    /// `attrs` as in [`ObjRequest::List`].
    pub fn list_page(
        &mut self,
        collection: &str,
        cursor: u64,
        max: u32,
        attrs: Option<&[&str]>,
    ) -> Result<Page, ObjError> {
        self.page(&ObjRequest::List {
            collection,
            cursor,
            max,
            attrs,
        })
    }

    /// Every object of a listing, all pages.
    pub fn list(
        &mut self,
        collection: &str,
        attrs: Option<&[&str]>,
    ) -> Result<Vec<Entry>, ObjError> {
        let max = self.limits().max_segments;
        self.all_pages(|c, cursor| c.list_page(collection, cursor, max, attrs))
    }

    fn page(&mut self, req: &ObjRequest<'_>) -> Result<Page, ObjError> {
        match self.run(req)? {
            ObjResponse::Page(p) => Ok(p),
            other => Err(self.violation(format!("a page request answered {other:?}"))),
        }
    }

    fn all_pages(
        &mut self,
        mut page: impl FnMut(&mut Self, u64) -> Result<Page, ObjError>,
    ) -> Result<Vec<Entry>, ObjError> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let p = page(self, cursor)?;
            out.extend(p.entries);
            if p.next == 0 {
                return Ok(out);
            }
            if p.next == cursor {
                return Err(self.violation(format!("page cursor {cursor} does not advance")));
            }
            cursor = p.next;
        }
    }

    /// Reads `segments` of `object` (their bytes in list order).
    pub fn read(&mut self, object: u64, segments: &[Segment]) -> Result<ReadReply, ObjError> {
        self.read_with(object, segments, &[])
    }

    /// Reads `segments` and, consistently with them, the attributes `get`.
    pub fn read_with(
        &mut self,
        object: u64,
        segments: &[Segment],
        get: &[&str],
    ) -> Result<ReadReply, ObjError> {
        match self.run(&ObjRequest::Read {
            object,
            segments,
            get,
        })? {
            ObjResponse::Read(r) => Ok(r),
            other => Err(self.violation(format!("READ answered {other:?}"))),
        }
    }

    /// Writes `data` over `segments` (in list order; a later segment wins
    /// where they overlap).
    pub fn write(
        &mut self,
        object: u64,
        segments: &[Segment],
        data: &[u8],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::Write {
            object,
            segments,
            data,
            options,
        })
        .map(drop)
    }

    /// Appends `data`; returns the offset it was written at.
    pub fn append(
        &mut self,
        object: u64,
        data: &[u8],
        options: &DataOptions,
    ) -> Result<u64, ObjError> {
        match self.run(&ObjRequest::Append {
            object,
            data,
            options,
        })? {
            ObjResponse::Offset(at) => Ok(at),
            other => Err(self.violation(format!("APPEND answered {other:?}"))),
        }
    }

    /// Makes one object holding `data` over `segments`; returns its id.
    pub fn create_and_write(
        &mut self,
        collection: &str,
        segments: &[Segment],
        data: &[u8],
        options: &DataOptions,
    ) -> Result<u64, ObjError> {
        match self.run(&ObjRequest::CreateAndWrite {
            collection,
            segments,
            data,
            options,
        })? {
            ObjResponse::Object(id) => Ok(id),
            other => Err(self.violation(format!("CREATE_AND_WRITE answered {other:?}"))),
        }
    }

    /// Deallocates `segments` (they read as zeros after).
    pub fn punch(
        &mut self,
        object: u64,
        segments: &[Segment],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::Punch {
            object,
            segments,
            options,
        })
        .map(drop)
    }

    /// Makes what `scope` names durable.
    pub fn flush(&mut self, scope: FlushScope<'_>) -> Result<(), ObjError> {
        self.run(&ObjRequest::Flush(scope)).map(drop)
    }

    /// The attributes `keys` of `object` (none: all of them).
    pub fn get_attrs(&mut self, object: u64, keys: &[&str]) -> Result<Attrs, ObjError> {
        match self.run(&ObjRequest::GetAttrs { object, keys })? {
            ObjResponse::Attrs(a) => Ok(a),
            other => Err(self.violation(format!("GET_ATTRS answered {other:?}"))),
        }
    }

    /// Applies `changes` to `object`, all or none.
    pub fn set_attrs(
        &mut self,
        object: u64,
        changes: &[AttrChange],
        fua: bool,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::SetAttrs {
            object,
            changes,
            fua,
        })
        .map(drop)
    }

    /// One page of the members of `collection` in every range.
    pub fn query_page(
        &mut self,
        collection: &str,
        ranges: &[Range],
        cursor: u64,
        max: u32,
    ) -> Result<Page, ObjError> {
        self.page(&ObjRequest::Query {
            collection,
            ranges,
            cursor,
            max,
        })
    }

    /// Every member of `collection` in every range, all pages.
    pub fn query(&mut self, collection: &str, ranges: &[Range]) -> Result<Vec<Entry>, ObjError> {
        let max = self.limits().max_segments;
        self.all_pages(|c, cursor| c.query_page(collection, ranges, cursor, max))
    }

    /// The attributes the server keeps for `object` (its length first of
    /// all).
    pub fn stat(&mut self, object: u64) -> Result<Stat, ObjError> {
        let all = self.get_attrs(object, &[])?;
        let length = all
            .get(LENGTH_ATTR)
            .and_then(Value::as_integer)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| {
                self.violation(format!(
                    "GET_ATTRS of object {object} returned no integer {LENGTH_ATTR}"
                ))
            })?;
        let attrs = Attrs(
            all.0
                .into_iter()
                .filter(|(k, _)| k.starts_with(SERVER_ATTR_PREFIX))
                .collect(),
        );
        Ok(Stat {
            object,
            length,
            attrs,
        })
    }
}

impl ObjClient {
    /// Reads extents of an attached export (`export` is its handle).
    pub fn extent_read(
        &mut self,
        export: u64,
        segments: &[Segment],
    ) -> Result<ReadReply, ObjError> {
        match self.run(&ObjRequest::ExtentRead { export, segments })? {
            ObjResponse::Read(r) => Ok(r),
            other => Err(self.violation(format!("EXTENT_READ answered {other:?}"))),
        }
    }

    /// Writes `data` over extents of an attached export.
    pub fn extent_write(
        &mut self,
        export: u64,
        segments: &[Segment],
        data: &[u8],
        fua: bool,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::ExtentWrite {
            export,
            segments,
            data,
            fua,
        })
        .map(drop)
    }
}

/// The widest range of `value`'s type that starts (or ends) at `value`,
/// for one-sided query bounds: integers reach `i64::MIN`/`i64::MAX`,
/// text and bytes reach the empty value below and, above, a value of
/// up to 256 bytes (and at most `max_size`) that sorts after every value
/// of its type not starting with it.
pub fn open_range(key: &str, bound: Value, above: bool, max_size: u32) -> Range {
    let top = |unit: &[u8]| -> Vec<u8> {
        let n = (max_size.min(256) as usize / unit.len()).max(1);
        unit.repeat(n)
    };
    let (lowest, highest) = match &bound {
        Value::Integer(_) => (Value::Integer(i64::MIN), Value::Integer(i64::MAX)),
        Value::Text(_) => (
            Value::Text(String::new()),
            // U+10FFFF is the largest code point, and its UTF-8 the
            // largest 4-byte sequence.
            Value::Text(String::from_utf8(top("\u{10FFFF}".as_bytes())).unwrap_or_default()),
        ),
        Value::Bytes(_) => (Value::Bytes(Vec::new()), Value::Bytes(top(&[0xff]))),
    };
    if above {
        Range {
            key: key.to_owned(),
            min: bound,
            max: highest,
        }
    } else {
        Range {
            key: key.to_owned(),
            min: lowest,
            max: bound,
        }
    }
}
