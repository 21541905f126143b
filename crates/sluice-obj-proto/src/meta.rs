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

use crate::wire::Reader;
use fields::*;

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

mod fields;
#[cfg(test)]
mod tests;
