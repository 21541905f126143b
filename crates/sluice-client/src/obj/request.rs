//! The values callers pass to [`ObjClient`](super::ObjClient) and get
//! back: one command as a request, its response, and the shapes of
//! reads, pages and query ranges.

use sluice_obj_proto::{FlushScope, Segment};

use super::attr::{AttrChange, Attrs, Value};
use crate::Durability;

/// What rides on a command that changes data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DataOptions {
    /// Whether the change is durable before the reply.
    pub durability: Durability,
    /// Attribute changes applied with the data.
    pub attrs: Vec<AttrChange>,
}

impl DataOptions {
    /// Durable before the reply, no attributes.
    pub fn durable() -> Self {
        Self {
            durability: Durability::Durable,
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

/// One command, for [`ObjClient::batch`](super::ObjClient::batch) and [`ObjClient::pipeline`](super::ObjClient::pipeline).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum ObjRequest<'a> {
    /// `count` objects, in `collection` if not empty.
    Create {
        collection: &'a str,
        count: u32,
        durability: Durability,
    },
    Remove {
        object: u64,
        durability: Durability,
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
        durability: Durability,
    },
    /// Set the object's length: bytes past a shorter one are gone, a
    /// longer one reads as zeros up to it.
    Truncate {
        object: u64,
        length: u64,
        durability: Durability,
    },
    /// Give `object` the bytes and length of `source` (same partition),
    /// which goes: one change, whole or not at all, also across a crash
    /// of the server. Needs the session's `REPLACE_DATA`.
    ReplaceData {
        object: u64,
        source: u64,
        durability: Durability,
    },
    Query {
        collection: &'a str,
        ranges: &'a [Range],
        cursor: u64,
        max: u32,
    },
    /// Extents of an attached NBD export (its handle, from
    /// [`ObjClient::exports`](super::ObjClient::exports)).
    ExtentRead {
        export: u64,
        segments: &'a [Segment],
    },
    ExtentWrite {
        export: u64,
        segments: &'a [Segment],
        data: &'a [u8],
        durability: Durability,
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
