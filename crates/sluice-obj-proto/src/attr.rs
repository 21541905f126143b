//! Attribute lists: what a request asks to get, set or remove, and what a
//! reply returns. One codec serves both; a list is checked whole when it
//! is parsed and then iterated from the borrowed bytes without failing or
//! allocating.

use thiserror::Error;

use crate::consts::*;
use crate::wire::Reader;

/// A typed attribute value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttrValue<'a> {
    Integer(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
}

impl AttrValue<'_> {
    /// Appends tag, length and value.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (tag, body): (u8, &[u8]) = match self {
            Self::Integer(_) => (TYPE_INTEGER, &[]),
            Self::Text(t) => (TYPE_TEXT, t.as_bytes()),
            Self::Bytes(b) => (TYPE_BYTES, b),
        };
        out.push(tag);
        if let Self::Integer(v) = self {
            out.extend_from_slice(&8u32.to_be_bytes());
            out.extend_from_slice(&v.to_be_bytes());
        } else {
            out.extend_from_slice(&(body.len() as u32).to_be_bytes());
            out.extend_from_slice(body);
        }
    }

    /// Bytes of the value itself (what the size limit counts).
    pub fn size(&self) -> usize {
        match self {
            Self::Integer(_) => 8,
            Self::Text(t) => t.len(),
            Self::Bytes(b) => b.len(),
        }
    }

    pub(crate) fn parse<'a>(
        r: &mut Reader<'a>,
        max_size: u32,
        key: &'a str,
    ) -> Result<AttrValue<'a>, AttrError> {
        let (Some(tag), Some(len)) = (r.u8(), r.u32()) else {
            return Err(AttrError::Truncated);
        };
        if len > max_size {
            return Err(AttrError::TooLarge {
                key: key.to_owned(),
                size: len,
                limit: max_size,
            });
        }
        let body = r.bytes(len as usize).ok_or(AttrError::Truncated)?;
        match tag {
            TYPE_INTEGER => {
                let b: [u8; 8] = body.try_into().map_err(|_| AttrError::BadInteger {
                    key: key.to_owned(),
                    len,
                })?;
                Ok(AttrValue::Integer(i64::from_be_bytes(b)))
            }
            TYPE_TEXT => {
                std::str::from_utf8(body)
                    .map(AttrValue::Text)
                    .map_err(|_| AttrError::TextNotUtf8 {
                        key: key.to_owned(),
                    })
            }
            TYPE_BYTES => Ok(AttrValue::Bytes(body)),
            tag => Err(AttrError::UnknownType {
                key: key.to_owned(),
                tag,
            }),
        }
    }
}

/// One entry of an attribute list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttrOp<'a> {
    /// Request: return this key's value.
    Get(&'a str),
    /// Request: set the key; reply: the key's value.
    Set(&'a str, AttrValue<'a>),
    /// Request: remove the key; reply: the key has no value.
    Remove(&'a str),
}

impl AttrOp<'_> {
    /// Appends the entry.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let (kind, key) = match self {
            Self::Get(k) => (ATTR_GET, k),
            Self::Set(k, _) => (ATTR_SET, k),
            Self::Remove(k) => (ATTR_REMOVE, k),
        };
        out.push(kind);
        out.push(key.len() as u8);
        out.extend_from_slice(key.as_bytes());
        if let Self::Set(_, v) = self {
            v.encode(out);
        }
    }

    /// The key.
    pub const fn key(&self) -> &str {
        match self {
            Self::Get(k) | Self::Set(k, _) | Self::Remove(k) => k,
        }
    }
}

/// Why an attribute list was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttrError {
    #[error("attribute list ends inside an entry")]
    Truncated,
    #[error(
        "attribute list has a count of 0 (send no list instead: an empty region is the empty list)"
    )]
    ZeroCount,
    #[error("attribute list has {0} bytes after its last entry")]
    Trailing(usize),
    #[error("attribute entry {index} has unknown kind {kind}")]
    UnknownKind { index: u16, kind: u8 },
    #[error("attribute entry {index} has an empty key")]
    EmptyKey { index: u16 },
    #[error("attribute entry {index} has a key that is not UTF-8")]
    KeyNotUtf8 { index: u16 },
    #[error("{count} entries in one list (at most 65535)")]
    TooMany { count: usize },
    #[error("attribute key of {len} bytes is longer than {MAX_NAME_LEN}")]
    KeyTooLong { len: usize },
    #[error("attribute {key:?} has a {size}-byte value, more than the server's limit of {limit}")]
    TooLarge { key: String, size: u32, limit: u32 },
    #[error("attribute {key:?} is an integer of {len} bytes (integers are 8)")]
    BadInteger { key: String, len: u32 },
    #[error("attribute {key:?} is text that is not UTF-8")]
    TextNotUtf8 { key: String },
    #[error("attribute {key:?} has unknown type {tag}")]
    UnknownType { key: String, tag: u8 },
    #[error("attribute {key:?}: this command does not take this kind of entry")]
    NotAllowed { key: String },
}

/// A checked attribute list borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrOps<'a> {
    raw: &'a [u8],
    count: u16,
}

impl<'a> AttrOps<'a> {
    /// The empty list.
    pub const EMPTY: Self = Self { raw: &[], count: 0 };

    /// Parses a whole list (`count u16`, then entries). An empty region is
    /// an empty list. Values over `max_size` bytes are refused.
    pub fn parse(raw: &'a [u8], max_size: u32) -> Result<Self, AttrError> {
        if raw.is_empty() {
            return Ok(Self::default());
        }
        let mut r = Reader::new(raw);
        let count = r.u16().ok_or(AttrError::Truncated)?;
        if count == 0 {
            // One encoding per list: the empty list is the empty region.
            return Err(AttrError::ZeroCount);
        }
        for index in 0..count {
            parse_entry(&mut r, index, max_size)?;
        }
        if !r.at_end() {
            return Err(AttrError::Trailing(r.rest().len()));
        }
        Ok(Self { raw, count })
    }

    /// Number of entries.
    pub const fn len(&self) -> u16 {
        self.count
    }

    /// Whether the list has no entries.
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = AttrOp<'a>> + 'a {
        let mut r = Reader::new(self.raw.get(2..).unwrap_or(&[]));
        (0..self.count).map_while(move |i| parse_entry(&mut r, i, u32::MAX).ok())
    }

    /// Whether every entry is one of the kinds `ok` accepts; the first
    /// that is not is named in the error.
    pub(crate) fn only(&self, ok: impl Fn(&AttrOp<'_>) -> bool) -> Result<(), AttrError> {
        match self.iter().find(|op| !ok(op)) {
            Some(op) => Err(AttrError::NotAllowed {
                key: op.key().to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Encodes `ops` into `buf` (cleared first) and checks the list as
    /// [`Self::parse`] does, against values of at most `max_size` bytes.
    pub fn build(
        ops: &[AttrOp<'_>],
        max_size: u32,
        buf: &'a mut Vec<u8>,
    ) -> Result<Self, AttrError> {
        if ops.len() > usize::from(u16::MAX) {
            return Err(AttrError::TooMany { count: ops.len() });
        }
        if let Some(k) = ops.iter().map(AttrOp::key).find(|k| k.len() > MAX_NAME_LEN) {
            return Err(AttrError::KeyTooLong { len: k.len() });
        }
        buf.clear();
        Self::encode(ops, buf);
        Self::parse(buf, max_size)
    }

    /// The list's bytes as they travel (empty for no entries).
    pub const fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Appends a list (`count u16`, then entries); nothing for no entries.
    pub fn encode(ops: &[AttrOp<'_>], out: &mut Vec<u8>) {
        if ops.is_empty() {
            return;
        }
        out.extend_from_slice(&(ops.len() as u16).to_be_bytes());
        for op in ops {
            op.encode(out);
        }
    }
}

fn parse_entry<'a>(r: &mut Reader<'a>, index: u16, max: u32) -> Result<AttrOp<'a>, AttrError> {
    let (Some(kind), Some(key_len)) = (r.u8(), r.u8()) else {
        return Err(AttrError::Truncated);
    };
    let key = r.bytes(usize::from(key_len)).ok_or(AttrError::Truncated)?;
    if key.is_empty() {
        return Err(AttrError::EmptyKey { index });
    }
    debug_assert!(key.len() <= MAX_NAME_LEN);
    let key = std::str::from_utf8(key).map_err(|_| AttrError::KeyNotUtf8 { index })?;
    match kind {
        ATTR_GET => Ok(AttrOp::Get(key)),
        ATTR_SET => Ok(AttrOp::Set(key, AttrValue::parse(r, max, key)?)),
        ATTR_REMOVE => Ok(AttrOp::Remove(key)),
        kind => Err(AttrError::UnknownKind { index, kind }),
    }
}
