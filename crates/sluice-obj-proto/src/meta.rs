//! The metadata service of striped objects over the native protocol
//! (opcode `META`, docs/protocol.md): one request per call of the
//! metadata interface, carried in the parameter region, and its reply,
//! carried in the body of a success reply.
//!
//! A call the service answered with an error of its own (a name already
//! taken, a stale revision, ...) is a success at the protocol level whose
//! body is [`MetaReply::Failed`]: each kind keeps its fields across the
//! wire. Reply statuses stay for what the protocol refuses.
//!
//! Every decoder takes exactly the bytes of one message and accepts only
//! the canonical encoding (so what decodes re-encodes to the same bytes),
//! with the lengths and counts below bounded before anything is
//! allocated.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::consts::{MAX_MESSAGE_LEN, MAX_NAME_LEN};
use crate::wire::Reader;

/// Longest object name, prefix or server URI (bytes of UTF-8).
pub const MAX_META_NAME_LEN: usize = 1024;
/// Most pieces one layout may have.
pub const MAX_META_PIECES: usize = 1024;
/// Most attributes one entry or update may carry.
pub const MAX_META_ATTRS: usize = 1024;
/// Most bytes in one attribute value.
pub const MAX_META_VALUE_LEN: usize = 64 << 10;
/// Most servers one reply may list.
pub const MAX_META_SERVERS: usize = 4096;
/// Most entries one list page may hold.
pub const MAX_META_PAGE: u32 = 1024;

/// Where one piece of a striped object lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetaPiece {
    pub server: String,
    pub partition: u64,
    pub object: u64,
}

/// How a striped object survives losing servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaRedundancy {
    /// Each stripe unit in this many pieces (1: plain striping).
    Replicas(u8),
    /// Rows of `data` units with `parity` Reed-Solomon units.
    Erasure { data: u8, parity: u8 },
}

/// A striped object's layout: the stripe unit, its pieces in order, and
/// its redundancy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaLayout {
    pub stripe_unit: u64,
    pub pieces: Vec<MetaPiece>,
    pub redundancy: MetaRedundancy,
}

/// The state of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaState {
    Creating,
    Ready,
    Removing,
    Writing,
}

impl MetaState {
    const fn wire(self) -> u8 {
        match self {
            Self::Creating => 1,
            Self::Ready => 2,
            Self::Removing => 3,
            Self::Writing => 4,
        }
    }

    const fn from_wire(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Creating),
            2 => Some(Self::Ready),
            3 => Some(Self::Removing),
            4 => Some(Self::Writing),
            _ => None,
        }
    }
}

/// One name's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaEntry {
    pub name: String,
    pub layout: MetaLayout,
    pub state: MetaState,
    pub size: u64,
    pub attrs: BTreeMap<String, Vec<u8>>,
    /// The layout of a new version a put is writing to replace it.
    pub pending: Option<MetaLayout>,
    pub revision: u64,
}

/// What an update does to an entry's pending layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum MetaPending {
    #[default]
    Keep,
    Set(MetaLayout),
    Clear,
}

/// One change to an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaUpdate {
    /// A new layout (a put switching to the version it wrote).
    pub layout: Option<MetaLayout>,
    pub pending: MetaPending,
    pub state: Option<MetaState>,
    pub size_at_least: Option<u64>,
    pub size: Option<u64>,
    pub set_attrs: BTreeMap<String, Vec<u8>>,
    pub remove_attrs: Vec<String>,
}

/// One call of the metadata interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaRequest {
    AddServer {
        uri: String,
    },
    RemoveServer {
        uri: String,
    },
    Servers,
    NextPlacement,
    Create {
        name: String,
        layout: MetaLayout,
        attrs: BTreeMap<String, Vec<u8>>,
    },
    Lookup {
        name: String,
    },
    /// A page of at most `max` entries whose names start with `prefix`
    /// and sort after `after` (empty: from the start).
    List {
        prefix: String,
        after: String,
        max: u32,
    },
    Update {
        name: String,
        expected_revision: Option<u64>,
        update: MetaUpdate,
    },
    Delete {
        name: String,
        expected_revision: Option<u64>,
    },
    /// The deployment's identity (see [`MetaReply::Deployment`]).
    Deployment,
    /// The redundancy a put that names none gets
    /// ([`MetaReply::Redundancy`]).
    DefaultRedundancy,
    /// Sets it ([`MetaReply::Done`]).
    SetDefaultRedundancy {
        redundancy: MetaRedundancy,
    },
}

/// Why the service refused a call; each kind keeps its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaFailure {
    NotFound {
        name: String,
    },
    Exists {
        name: String,
    },
    Conflict {
        name: String,
        expected: u64,
        found: u64,
    },
    ServerInUse {
        server: String,
        objects: u64,
        example: String,
    },
    Invalid {
        what: String,
        why: String,
    },
    /// The backend failed; `message` is its error chain as text.
    Backend {
        message: String,
    },
}

/// The answer to a [`MetaRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaReply {
    /// ADD_SERVER, REMOVE_SERVER, DELETE.
    Done,
    Servers(Vec<String>),
    Placement(u64),
    /// DEPLOYMENT: the identity the metadata service drew when it was
    /// first used, which marks every piece its deployment makes.
    Deployment(String),
    /// DEFAULT_REDUNDANCY.
    Redundancy(MetaRedundancy),
    /// CREATE, LOOKUP, UPDATE.
    Entry(MetaEntry),
    /// LIST: `more` when entries past the last one may follow.
    Page {
        entries: Vec<MetaEntry>,
        more: bool,
    },
    Failed(MetaFailure),
}

/// A metadata message that does not decode.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetaDecodeError {
    #[error("metadata message is truncated (in {0})")]
    Truncated(&'static str),
    #[error("metadata message: {what} of {len} bytes or entries is over the limit of {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("metadata message: {0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("metadata message: unknown {what} tag {tag}")]
    BadTag { what: &'static str, tag: u8 },
    #[error("metadata message: attribute keys are not strictly ascending")]
    Unsorted,
    #[error("metadata message has {0} bytes after its end")]
    Trailing(usize),
    #[error("metadata message: a LIST of {0} entries; a page holds 1 to {MAX_META_PAGE}")]
    PageSize(u32),
}

type Result<T> = std::result::Result<T, MetaDecodeError>;

// Request tags.
const REQ_ADD_SERVER: u8 = 1;
const REQ_REMOVE_SERVER: u8 = 2;
const REQ_SERVERS: u8 = 3;
const REQ_NEXT_PLACEMENT: u8 = 4;
const REQ_CREATE: u8 = 5;
const REQ_LOOKUP: u8 = 6;
const REQ_LIST: u8 = 7;
const REQ_UPDATE: u8 = 8;
const REQ_DELETE: u8 = 9;
const REQ_DEPLOYMENT: u8 = 10;
const REQ_DEFAULT_REDUNDANCY: u8 = 11;
const REQ_SET_DEFAULT_REDUNDANCY: u8 = 12;

// Reply tags.
const REP_DONE: u8 = 1;
const REP_SERVERS: u8 = 2;
const REP_PLACEMENT: u8 = 3;
const REP_ENTRY: u8 = 4;
const REP_PAGE: u8 = 5;
const REP_FAILED: u8 = 6;
const REP_DEPLOYMENT: u8 = 7;
const REP_REDUNDANCY: u8 = 8;

// Failure tags.
const FAIL_NOT_FOUND: u8 = 1;
const FAIL_EXISTS: u8 = 2;
const FAIL_CONFLICT: u8 = 3;
const FAIL_SERVER_IN_USE: u8 = 4;
const FAIL_INVALID: u8 = 5;
const FAIL_BACKEND: u8 = 6;

// ---- encoding --------------------------------------------------------

fn put_str(s: &str, out: &mut Vec<u8>) {
    // Callers keep strings within their limits (all below 2^16); a
    // longer one is cut at the limit, which the peer then refuses as
    // malformed UTF-8 or a wrong length rather than misframing.
    let len = s.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len]);
}

fn put_opt(v: Option<u64>, out: &mut Vec<u8>) {
    match v {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_be_bytes());
        }
        None => out.push(0),
    }
}

fn put_attrs(attrs: &BTreeMap<String, Vec<u8>>, out: &mut Vec<u8>) {
    out.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    for (k, v) in attrs {
        put_str(k, out);
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v);
    }
}

fn put_layout(l: &MetaLayout, out: &mut Vec<u8>) {
    out.extend_from_slice(&l.stripe_unit.to_be_bytes());
    out.extend_from_slice(&(l.pieces.len() as u16).to_be_bytes());
    for p in &l.pieces {
        put_str(&p.server, out);
        out.extend_from_slice(&p.partition.to_be_bytes());
        out.extend_from_slice(&p.object.to_be_bytes());
    }
    put_redundancy(l.redundancy, out);
}

fn put_redundancy(r: MetaRedundancy, out: &mut Vec<u8>) {
    match r {
        MetaRedundancy::Replicas(copies) => out.extend_from_slice(&[0, copies]),
        MetaRedundancy::Erasure { data, parity } => out.extend_from_slice(&[1, data, parity]),
    }
}

fn put_opt_layout(l: Option<&MetaLayout>, out: &mut Vec<u8>) {
    match l {
        Some(l) => {
            out.push(1);
            put_layout(l, out);
        }
        None => out.push(0),
    }
}

fn put_entry(e: &MetaEntry, out: &mut Vec<u8>) {
    put_str(&e.name, out);
    put_layout(&e.layout, out);
    out.push(e.state.wire());
    out.extend_from_slice(&e.size.to_be_bytes());
    put_attrs(&e.attrs, out);
    put_opt_layout(e.pending.as_ref(), out);
    out.extend_from_slice(&e.revision.to_be_bytes());
}

impl MetaEntry {
    /// Appends the entry as a reply carries it (to measure a page).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_entry(self, out);
    }
}

impl MetaRequest {
    /// Appends the request (the parameters of a `META` request).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::AddServer { uri } => {
                out.push(REQ_ADD_SERVER);
                put_str(uri, out);
            }
            Self::RemoveServer { uri } => {
                out.push(REQ_REMOVE_SERVER);
                put_str(uri, out);
            }
            Self::Servers => out.push(REQ_SERVERS),
            Self::NextPlacement => out.push(REQ_NEXT_PLACEMENT),
            Self::Deployment => out.push(REQ_DEPLOYMENT),
            Self::DefaultRedundancy => out.push(REQ_DEFAULT_REDUNDANCY),
            Self::SetDefaultRedundancy { redundancy } => {
                out.push(REQ_SET_DEFAULT_REDUNDANCY);
                put_redundancy(*redundancy, out);
            }
            Self::Create {
                name,
                layout,
                attrs,
            } => {
                out.push(REQ_CREATE);
                put_str(name, out);
                put_layout(layout, out);
                put_attrs(attrs, out);
            }
            Self::Lookup { name } => {
                out.push(REQ_LOOKUP);
                put_str(name, out);
            }
            Self::List { prefix, after, max } => {
                out.push(REQ_LIST);
                put_str(prefix, out);
                put_str(after, out);
                out.extend_from_slice(&max.to_be_bytes());
            }
            Self::Update {
                name,
                expected_revision,
                update,
            } => {
                out.push(REQ_UPDATE);
                put_str(name, out);
                put_opt(*expected_revision, out);
                out.push(update.state.map_or(0, MetaState::wire));
                put_opt(update.size_at_least, out);
                put_opt(update.size, out);
                put_attrs(&update.set_attrs, out);
                out.extend_from_slice(&(update.remove_attrs.len() as u16).to_be_bytes());
                for k in &update.remove_attrs {
                    put_str(k, out);
                }
                put_opt_layout(update.layout.as_ref(), out);
                match &update.pending {
                    MetaPending::Keep => out.push(0),
                    MetaPending::Set(l) => {
                        out.push(1);
                        put_layout(l, out);
                    }
                    MetaPending::Clear => out.push(2),
                }
            }
            Self::Delete {
                name,
                expected_revision,
            } => {
                out.push(REQ_DELETE);
                put_str(name, out);
                put_opt(*expected_revision, out);
            }
        }
    }

    /// Decodes exactly one request from `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        let mut r = Reader::new(buf);
        let tag = r.u8().ok_or(MetaDecodeError::Truncated("request tag"))?;
        let req = match tag {
            REQ_ADD_SERVER => Self::AddServer {
                uri: name(&mut r, "server URI")?,
            },
            REQ_REMOVE_SERVER => Self::RemoveServer {
                uri: name(&mut r, "server URI")?,
            },
            REQ_SERVERS => Self::Servers,
            REQ_NEXT_PLACEMENT => Self::NextPlacement,
            REQ_DEPLOYMENT => Self::Deployment,
            REQ_DEFAULT_REDUNDANCY => Self::DefaultRedundancy,
            REQ_SET_DEFAULT_REDUNDANCY => Self::SetDefaultRedundancy {
                redundancy: redundancy(&mut r)?,
            },
            REQ_CREATE => Self::Create {
                name: name(&mut r, "object name")?,
                layout: layout(&mut r)?,
                attrs: attrs(&mut r)?,
            },
            REQ_LOOKUP => Self::Lookup {
                name: name(&mut r, "object name")?,
            },
            REQ_LIST => {
                let prefix = name(&mut r, "prefix")?;
                let after = name(&mut r, "list cursor")?;
                let max = u32_(&mut r, "page size")?;
                if max == 0 || max > MAX_META_PAGE {
                    return Err(MetaDecodeError::PageSize(max));
                }
                Self::List { prefix, after, max }
            }
            REQ_UPDATE => {
                let name = name(&mut r, "object name")?;
                let expected_revision = opt(&mut r, "expected revision")?;
                let state = match r.u8().ok_or(MetaDecodeError::Truncated("state"))? {
                    0 => None,
                    v => Some(MetaState::from_wire(v).ok_or(MetaDecodeError::BadTag {
                        what: "state",
                        tag: v,
                    })?),
                };
                let size_at_least = opt(&mut r, "size at least")?;
                let size = opt(&mut r, "size")?;
                let set_attrs = attrs(&mut r)?;
                let n = count(&mut r, "removed attributes", MAX_META_ATTRS)?;
                let mut remove_attrs = Vec::with_capacity(n);
                for _ in 0..n {
                    remove_attrs.push(key(&mut r)?);
                }
                let layout = opt_layout(&mut r, "new layout")?;
                let pending = match r.u8().ok_or(MetaDecodeError::Truncated("pending layout"))? {
                    0 => MetaPending::Keep,
                    1 => MetaPending::Set(self::layout(&mut r)?),
                    2 => MetaPending::Clear,
                    tag => {
                        return Err(MetaDecodeError::BadTag {
                            what: "pending layout",
                            tag,
                        })
                    }
                };
                Self::Update {
                    name,
                    expected_revision,
                    update: MetaUpdate {
                        layout,
                        pending,
                        state,
                        size_at_least,
                        size,
                        set_attrs,
                        remove_attrs,
                    },
                }
            }
            REQ_DELETE => Self::Delete {
                name: name(&mut r, "object name")?,
                expected_revision: opt(&mut r, "expected revision")?,
            },
            tag => {
                return Err(MetaDecodeError::BadTag {
                    what: "request",
                    tag,
                })
            }
        };
        end(&r)?;
        Ok(req)
    }
}

impl MetaReply {
    /// Appends the reply (the body of a success reply to `META`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Done => out.push(REP_DONE),
            Self::Servers(list) => {
                out.push(REP_SERVERS);
                out.extend_from_slice(&(list.len() as u16).to_be_bytes());
                for s in list {
                    put_str(s, out);
                }
            }
            Self::Placement(n) => {
                out.push(REP_PLACEMENT);
                out.extend_from_slice(&n.to_be_bytes());
            }
            Self::Deployment(id) => {
                out.push(REP_DEPLOYMENT);
                put_str(id, out);
            }
            Self::Redundancy(r) => {
                out.push(REP_REDUNDANCY);
                put_redundancy(*r, out);
            }
            Self::Entry(e) => {
                out.push(REP_ENTRY);
                put_entry(e, out);
            }
            Self::Page { entries, more } => {
                out.push(REP_PAGE);
                out.push(u8::from(*more));
                out.extend_from_slice(&(entries.len() as u16).to_be_bytes());
                for e in entries {
                    put_entry(e, out);
                }
            }
            Self::Failed(f) => {
                out.push(REP_FAILED);
                match f {
                    MetaFailure::NotFound { name } => {
                        out.push(FAIL_NOT_FOUND);
                        put_str(name, out);
                    }
                    MetaFailure::Exists { name } => {
                        out.push(FAIL_EXISTS);
                        put_str(name, out);
                    }
                    MetaFailure::Conflict {
                        name,
                        expected,
                        found,
                    } => {
                        out.push(FAIL_CONFLICT);
                        put_str(name, out);
                        out.extend_from_slice(&expected.to_be_bytes());
                        out.extend_from_slice(&found.to_be_bytes());
                    }
                    MetaFailure::ServerInUse {
                        server,
                        objects,
                        example,
                    } => {
                        out.push(FAIL_SERVER_IN_USE);
                        put_str(server, out);
                        out.extend_from_slice(&objects.to_be_bytes());
                        put_str(example, out);
                    }
                    MetaFailure::Invalid { what, why } => {
                        out.push(FAIL_INVALID);
                        put_str(what, out);
                        put_str(why, out);
                    }
                    MetaFailure::Backend { message } => {
                        out.push(FAIL_BACKEND);
                        put_str(message, out);
                    }
                }
            }
        }
    }

    /// Decodes exactly one reply from `buf`.
    pub fn decode(buf: &[u8]) -> Result<Self> {
        let mut r = Reader::new(buf);
        let tag = r.u8().ok_or(MetaDecodeError::Truncated("reply tag"))?;
        let reply = match tag {
            REP_DONE => Self::Done,
            REP_SERVERS => {
                let n = count(&mut r, "servers", MAX_META_SERVERS)?;
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    list.push(name(&mut r, "server URI")?);
                }
                Self::Servers(list)
            }
            REP_PLACEMENT => Self::Placement(u64_(&mut r, "placement")?),
            REP_DEPLOYMENT => Self::Deployment(name(&mut r, "deployment")?),
            REP_REDUNDANCY => Self::Redundancy(redundancy(&mut r)?),
            REP_ENTRY => Self::Entry(entry(&mut r)?),
            REP_PAGE => {
                let more = match r.u8().ok_or(MetaDecodeError::Truncated("page"))? {
                    0 => false,
                    1 => true,
                    tag => return Err(MetaDecodeError::BadTag { what: "more", tag }),
                };
                let n = count(&mut r, "page entries", MAX_META_PAGE as usize)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push(entry(&mut r)?);
                }
                Self::Page { entries, more }
            }
            REP_FAILED => Self::Failed(
                match r.u8().ok_or(MetaDecodeError::Truncated("failure tag"))? {
                    FAIL_NOT_FOUND => MetaFailure::NotFound {
                        name: name(&mut r, "object name")?,
                    },
                    FAIL_EXISTS => MetaFailure::Exists {
                        name: name(&mut r, "object name")?,
                    },
                    FAIL_CONFLICT => MetaFailure::Conflict {
                        name: name(&mut r, "object name")?,
                        expected: u64_(&mut r, "expected revision")?,
                        found: u64_(&mut r, "found revision")?,
                    },
                    FAIL_SERVER_IN_USE => MetaFailure::ServerInUse {
                        server: name(&mut r, "server URI")?,
                        objects: u64_(&mut r, "object count")?,
                        example: name(&mut r, "object name")?,
                    },
                    FAIL_INVALID => MetaFailure::Invalid {
                        what: message(&mut r, "what")?,
                        why: message(&mut r, "why")?,
                    },
                    FAIL_BACKEND => MetaFailure::Backend {
                        message: message(&mut r, "message")?,
                    },
                    tag => {
                        return Err(MetaDecodeError::BadTag {
                            what: "failure",
                            tag,
                        })
                    }
                },
            ),
            tag => return Err(MetaDecodeError::BadTag { what: "reply", tag }),
        };
        end(&r)?;
        Ok(reply)
    }
}

// ---- decoding --------------------------------------------------------

fn end(r: &Reader<'_>) -> Result<()> {
    match r.rest().len() {
        0 => Ok(()),
        n => Err(MetaDecodeError::Trailing(n)),
    }
}

fn u32_(r: &mut Reader<'_>, what: &'static str) -> Result<u32> {
    r.u32().ok_or(MetaDecodeError::Truncated(what))
}

fn u64_(r: &mut Reader<'_>, what: &'static str) -> Result<u64> {
    r.u64().ok_or(MetaDecodeError::Truncated(what))
}

fn opt(r: &mut Reader<'_>, what: &'static str) -> Result<Option<u64>> {
    match r.u8().ok_or(MetaDecodeError::Truncated(what))? {
        0 => Ok(None),
        1 => Ok(Some(u64_(r, what)?)),
        tag => Err(MetaDecodeError::BadTag { what, tag }),
    }
}

fn count(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<usize> {
    let n = usize::from(r.u16().ok_or(MetaDecodeError::Truncated(what))?);
    if n > max {
        return Err(MetaDecodeError::TooLong { what, len: n, max });
    }
    Ok(n)
}

fn text(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<String> {
    let len = usize::from(r.u16().ok_or(MetaDecodeError::Truncated(what))?);
    if len > max {
        return Err(MetaDecodeError::TooLong { what, len, max });
    }
    let raw = r.bytes(len).ok_or(MetaDecodeError::Truncated(what))?;
    std::str::from_utf8(raw)
        .map(str::to_owned)
        .map_err(|_| MetaDecodeError::NotUtf8(what))
}

fn name(r: &mut Reader<'_>, what: &'static str) -> Result<String> {
    text(r, what, MAX_META_NAME_LEN)
}

fn message(r: &mut Reader<'_>, what: &'static str) -> Result<String> {
    text(r, what, MAX_MESSAGE_LEN)
}

fn key(r: &mut Reader<'_>) -> Result<String> {
    text(r, "attribute key", MAX_NAME_LEN)
}

fn attrs(r: &mut Reader<'_>) -> Result<BTreeMap<String, Vec<u8>>> {
    let n = count(r, "attributes", MAX_META_ATTRS)?;
    let mut out = BTreeMap::new();
    let mut last: Option<String> = None;
    for _ in 0..n {
        let k = key(r)?;
        let len = u32_(r, "attribute value")? as usize;
        if len > MAX_META_VALUE_LEN {
            return Err(MetaDecodeError::TooLong {
                what: "attribute value",
                len,
                max: MAX_META_VALUE_LEN,
            });
        }
        let v = r
            .bytes(len)
            .ok_or(MetaDecodeError::Truncated("attribute value"))?;
        // Ascending keys keep the encoding canonical (a map has one).
        if last.as_ref().is_some_and(|l| *l >= k) {
            return Err(MetaDecodeError::Unsorted);
        }
        last = Some(k.clone());
        out.insert(k, v.to_vec());
    }
    Ok(out)
}

fn layout(r: &mut Reader<'_>) -> Result<MetaLayout> {
    let stripe_unit = u64_(r, "stripe unit")?;
    let n = count(r, "pieces", MAX_META_PIECES)?;
    let mut pieces = Vec::with_capacity(n);
    for _ in 0..n {
        pieces.push(MetaPiece {
            server: name(r, "server URI")?,
            partition: u64_(r, "partition")?,
            object: u64_(r, "object id")?,
        });
    }
    Ok(MetaLayout {
        stripe_unit,
        pieces,
        redundancy: redundancy(r)?,
    })
}

fn redundancy(r: &mut Reader<'_>) -> Result<MetaRedundancy> {
    let byte = |r: &mut Reader<'_>, what| r.u8().ok_or(MetaDecodeError::Truncated(what));
    Ok(match byte(r, "redundancy")? {
        0 => MetaRedundancy::Replicas(byte(r, "copies")?),
        1 => MetaRedundancy::Erasure {
            data: byte(r, "data units")?,
            parity: byte(r, "parity units")?,
        },
        tag => {
            return Err(MetaDecodeError::BadTag {
                what: "redundancy",
                tag,
            })
        }
    })
}

fn opt_layout(r: &mut Reader<'_>, what: &'static str) -> Result<Option<MetaLayout>> {
    match r.u8().ok_or(MetaDecodeError::Truncated(what))? {
        0 => Ok(None),
        1 => Ok(Some(layout(r)?)),
        tag => Err(MetaDecodeError::BadTag { what, tag }),
    }
}

fn entry(r: &mut Reader<'_>) -> Result<MetaEntry> {
    let name = name(r, "object name")?;
    let layout = layout(r)?;
    let tag = r.u8().ok_or(MetaDecodeError::Truncated("state"))?;
    let state = MetaState::from_wire(tag).ok_or(MetaDecodeError::BadTag { what: "state", tag })?;
    Ok(MetaEntry {
        name,
        layout,
        state,
        size: u64_(r, "size")?,
        attrs: attrs(r)?,
        pending: opt_layout(r, "pending layout")?,
        revision: u64_(r, "revision")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> MetaEntry {
        MetaEntry {
            name: "a/b".into(),
            layout: MetaLayout {
                stripe_unit: 65536,
                pieces: vec![MetaPiece {
                    server: "sluice://h:1".into(),
                    partition: 1,
                    object: 7,
                }],
                redundancy: MetaRedundancy::Replicas(1),
            },
            state: MetaState::Ready,
            size: 10,
            attrs: [("k".to_owned(), b"v".to_vec())].into(),
            pending: None,
            revision: 3,
        }
    }

    /// An entry a put is replacing.
    fn replaced() -> MetaEntry {
        let mut e = entry();
        e.pending = Some(MetaLayout {
            stripe_unit: 4096,
            pieces: vec![
                MetaPiece {
                    server: "sluice://h:2".into(),
                    partition: 1,
                    object: 9,
                },
                MetaPiece {
                    server: "sluice://h:3".into(),
                    partition: 2,
                    object: 10,
                },
            ],
            redundancy: MetaRedundancy::Erasure { data: 1, parity: 1 },
        });
        e
    }

    #[test]
    fn lookup_request_bytes() {
        let mut out = Vec::new();
        MetaRequest::Lookup { name: "ab".into() }.encode(&mut out);
        assert_eq!(out, [6, 0, 2, b'a', b'b']);
        assert_eq!(
            MetaRequest::decode(&out).unwrap(),
            MetaRequest::Lookup { name: "ab".into() }
        );
    }

    #[test]
    fn every_message_round_trips() {
        let requests = [
            MetaRequest::AddServer {
                uri: "sluice://h:1".into(),
            },
            MetaRequest::RemoveServer {
                uri: "sluice://h:1".into(),
            },
            MetaRequest::Servers,
            MetaRequest::NextPlacement,
            MetaRequest::Deployment,
            MetaRequest::DefaultRedundancy,
            MetaRequest::SetDefaultRedundancy {
                redundancy: MetaRedundancy::Erasure { data: 4, parity: 2 },
            },
            MetaRequest::Create {
                name: "x".into(),
                layout: entry().layout,
                attrs: entry().attrs,
            },
            MetaRequest::List {
                prefix: "a/".into(),
                after: "a/b".into(),
                max: 5,
            },
            MetaRequest::Update {
                name: "x".into(),
                expected_revision: Some(4),
                update: MetaUpdate {
                    state: Some(MetaState::Writing),
                    size_at_least: Some(9),
                    size: None,
                    set_attrs: entry().attrs,
                    remove_attrs: vec!["z".into()],
                    ..MetaUpdate::default()
                },
            },
            MetaRequest::Update {
                name: "x".into(),
                expected_revision: Some(5),
                update: MetaUpdate {
                    pending: MetaPending::Set(replaced().pending.unwrap()),
                    ..MetaUpdate::default()
                },
            },
            MetaRequest::Update {
                name: "x".into(),
                expected_revision: Some(6),
                update: MetaUpdate {
                    layout: replaced().pending,
                    pending: MetaPending::Clear,
                    state: Some(MetaState::Ready),
                    size: Some(3),
                    ..MetaUpdate::default()
                },
            },
            MetaRequest::Delete {
                name: "x".into(),
                expected_revision: None,
            },
        ];
        for req in requests {
            let mut out = Vec::new();
            req.encode(&mut out);
            assert_eq!(MetaRequest::decode(&out).unwrap(), req);
        }
        let replies = [
            MetaReply::Done,
            MetaReply::Servers(vec!["a".into(), "b".into()]),
            MetaReply::Placement(9),
            MetaReply::Deployment("3f2a".into()),
            MetaReply::Redundancy(MetaRedundancy::Replicas(3)),
            MetaReply::Entry(entry()),
            MetaReply::Entry(replaced()),
            MetaReply::Page {
                entries: vec![entry(), replaced(), entry()],
                more: true,
            },
            MetaReply::Failed(MetaFailure::Conflict {
                name: "x".into(),
                expected: 1,
                found: 2,
            }),
            MetaReply::Failed(MetaFailure::ServerInUse {
                server: "s".into(),
                objects: 3,
                example: "x".into(),
            }),
            MetaReply::Failed(MetaFailure::Invalid {
                what: "w".into(),
                why: "y".into(),
            }),
        ];
        for rep in replies {
            let mut out = Vec::new();
            rep.encode(&mut out);
            assert_eq!(MetaReply::decode(&out).unwrap(), rep);
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        // Truncated, trailing, unknown tags, over-long names, zero page.
        assert!(matches!(
            MetaRequest::decode(&[6, 0, 5, b'a']),
            Err(MetaDecodeError::Truncated(_))
        ));
        assert!(matches!(
            MetaRequest::decode(&[3, 0]),
            Err(MetaDecodeError::Trailing(1))
        ));
        assert!(matches!(
            MetaRequest::decode(&[99]),
            Err(MetaDecodeError::BadTag { .. })
        ));
        assert!(matches!(
            MetaRequest::decode(&[]),
            Err(MetaDecodeError::Truncated(_))
        ));
        let mut long = vec![6, 0x04, 0x01];
        long.extend(std::iter::repeat_n(b'a', 1025));
        assert!(matches!(
            MetaRequest::decode(&long),
            Err(MetaDecodeError::TooLong { len: 1025, .. })
        ));
        let mut zero = Vec::new();
        MetaRequest::List {
            prefix: String::new(),
            after: String::new(),
            max: 0,
        }
        .encode(&mut zero);
        assert_eq!(
            MetaRequest::decode(&zero),
            Err(MetaDecodeError::PageSize(0))
        );
        let mut over = Vec::new();
        MetaRequest::List {
            prefix: String::new(),
            after: String::new(),
            max: MAX_META_PAGE + 1,
        }
        .encode(&mut over);
        let e = MetaRequest::decode(&over).unwrap_err().to_string();
        assert!(e.contains("1025") && e.contains("1 to 1024"), "{e}");
        assert!(matches!(
            MetaRequest::decode(&[6, 0, 1, 0xff]),
            Err(MetaDecodeError::NotUtf8(_))
        ));
        // Attribute keys out of order are not canonical.
        let mut unsorted = vec![REP_ENTRY];
        let mut e = Vec::new();
        put_entry(&entry(), &mut e);
        unsorted.extend(e);
        let ok = MetaReply::decode(&unsorted).unwrap();
        assert_eq!(ok, MetaReply::Entry(entry()));
        let mut two = Vec::new();
        two.extend_from_slice(&2u16.to_be_bytes());
        for k in ["b", "a"] {
            put_str(k, &mut two);
            two.extend_from_slice(&0u32.to_be_bytes());
        }
        assert!(matches!(
            attrs(&mut Reader::new(&two)),
            Err(MetaDecodeError::Unsorted)
        ));
    }
}
