//! Owned attribute values and lists, for callers that keep what a reply
//! returned (the protocol crate's types borrow the reply's bytes).

use sluice_obj_proto::{AttrOp, AttrOps, AttrValue, ReplyDecodeError};

/// A typed attribute value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Integer(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    /// The borrowed form the encoders take.
    pub fn as_wire(&self) -> AttrValue<'_> {
        match self {
            Self::Integer(v) => AttrValue::Integer(*v),
            Self::Text(t) => AttrValue::Text(t),
            Self::Bytes(b) => AttrValue::Bytes(b),
        }
    }

    /// An owned copy of a wire value.
    pub fn from_wire(v: AttrValue<'_>) -> Self {
        match v {
            AttrValue::Integer(i) => Self::Integer(i),
            AttrValue::Text(t) => Self::Text(t.to_owned()),
            AttrValue::Bytes(b) => Self::Bytes(b.to_vec()),
        }
    }

    /// The integer, if this is one.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Self::Integer(v) => Some(*v),
            _ => None,
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::Integer(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Self::Bytes(v)
    }
}

/// A change to one attribute.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttrChange {
    Set(String, Value),
    Remove(String),
}

impl AttrChange {
    /// Sets `key` to `value`.
    pub fn set(key: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::Set(key.into(), value.into())
    }

    /// The key.
    pub fn key(&self) -> &str {
        match self {
            Self::Set(k, _) | Self::Remove(k) => k,
        }
    }

    pub(crate) fn as_wire(&self) -> AttrOp<'_> {
        match self {
            Self::Set(k, v) => AttrOp::Set(k, v.as_wire()),
            Self::Remove(k) => AttrOp::Remove(k),
        }
    }
}

/// Attributes a reply returned, in the server's order: each key with its
/// value, or `None` where the server said the key has no value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attrs(pub Vec<(String, Option<Value>)>);

impl Attrs {
    /// Decodes a reply's attribute list (values bounded by `max_attr`).
    pub(crate) fn decode(raw: &[u8], max_attr: u32) -> Result<Self, ReplyDecodeError> {
        let ops = AttrOps::parse(raw, max_attr)?;
        Ok(Self::from_ops(&ops))
    }

    pub(crate) fn from_ops(ops: &AttrOps<'_>) -> Self {
        Self(
            ops.iter()
                .map(|op| match op {
                    AttrOp::Set(k, v) => (k.to_owned(), Some(Value::from_wire(v))),
                    // A reply names a key without a value with REMOVE; a
                    // GET in a reply means the same to a reader.
                    AttrOp::Remove(k) | AttrOp::Get(k) => (k.to_owned(), None),
                })
                .collect(),
        )
    }

    /// The value of `key`, if the reply gave one.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_ref())
    }

    /// Keys with values, in order.
    pub fn values(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.as_str(), v)))
    }

    /// Whether the reply had no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
