//! A request's attribute entries as the store takes them, and the
//! attribute lists of replies (the server's own keys among them).

use sluice_obj_proto::{AttrOp, AttrOps, AttrValue, ErrorCode};
use sluice_objstore::{AttrValue as StoreValue, ObjectInfo};

use super::failure::Failure;

/// Keys of the attributes the store keeps for every object, as GET
/// returns them.
const LENGTH: &str = "sluice.length";
const CREATED: &str = "sluice.created";
const DATA_MODIFIED: &str = "sluice.data_modified";
const ATTRS_MODIFIED: &str = "sluice.attrs_modified";
/// Keys with this prefix are the server's own.
const RESERVED_PREFIX: &str = "sluice.";

/// A request's attribute entries, split by kind.
pub(super) struct AttrWork<'a> {
    pub(super) gets: Vec<&'a str>,
    pub(super) sets: Vec<(String, StoreValue)>,
    pub(super) removes: Vec<&'a str>,
}

impl<'a> AttrWork<'a> {
    pub(super) fn split(ops: &AttrOps<'a>) -> Result<Self, Failure> {
        let mut w = Self {
            gets: Vec::new(),
            sets: Vec::new(),
            removes: Vec::new(),
        };
        for op in ops.iter() {
            match op {
                AttrOp::Get(k) => w.gets.push(k),
                AttrOp::Set(k, v) => {
                    reserved(k)?;
                    w.sets.push((k.to_owned(), to_store(v)));
                }
                AttrOp::Remove(k) => {
                    reserved(k)?;
                    w.removes.push(k);
                }
            }
        }
        Ok(w)
    }

    /// Data commands take GET and SET entries; removing a key rides
    /// only on SET_ATTRS.
    pub(super) fn no_removes(&self, what: &str) -> Result<(), Failure> {
        match self.removes.first() {
            Some(k) => Err(Failure::new(
                ErrorCode::Invalid,
                format!("attribute {k:?}: {what} cannot remove attributes (use SET_ATTRS)"),
            )),
            None => Ok(()),
        }
    }

    /// User keys among the GETs (the store knows nothing of `sluice.`).
    pub(super) fn user_gets(&self) -> Vec<&'a str> {
        self.gets
            .iter()
            .copied()
            .filter(|k| !k.starts_with(RESERVED_PREFIX))
            .collect()
    }
}

pub(super) fn reserved(key: &str) -> Result<(), Failure> {
    if key.starts_with(RESERVED_PREFIX) {
        return Err(Failure::new(
            ErrorCode::Permission,
            format!("attribute {key:?} is kept by the server and cannot be set or removed"),
        ));
    }
    Ok(())
}

pub(super) fn to_store(v: AttrValue<'_>) -> StoreValue {
    match v {
        AttrValue::Integer(i) => StoreValue::Integer(i),
        AttrValue::Text(t) => StoreValue::Text(t.to_owned()),
        AttrValue::Bytes(b) => StoreValue::Bytes(b.to_vec()),
    }
}

pub(super) fn to_wire(v: &StoreValue) -> AttrValue<'_> {
    match v {
        StoreValue::Integer(i) => AttrValue::Integer(*i),
        StoreValue::Text(t) => AttrValue::Text(t),
        StoreValue::Bytes(b) => AttrValue::Bytes(b),
    }
}

pub(super) fn mandatory(info: &ObjectInfo) -> [(&'static str, i64); 4] {
    [
        (LENGTH, info.length as i64),
        (CREATED, info.created),
        (DATA_MODIFIED, info.data_modified),
        (ATTRS_MODIFIED, info.attrs_modified),
    ]
}

/// Encodes the attribute list of a reply. `asked` empty: every
/// attribute, the server's own first; else each asked key in order, as
/// a SET entry with its value or a REMOVE entry when it has none.
pub(super) fn encode_attrs(
    info: &ObjectInfo,
    user: &[(String, StoreValue)],
    asked: &[&str],
    out: &mut Vec<u8>,
) {
    let own = mandatory(info);
    let mut ops: Vec<AttrOp<'_>> = Vec::new();
    if asked.is_empty() {
        ops.extend(
            own.iter()
                .map(|(k, v)| AttrOp::Set(k, AttrValue::Integer(*v))),
        );
        ops.extend(user.iter().map(|(k, v)| AttrOp::Set(k, to_wire(v))));
    } else {
        for key in asked {
            let found = own
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| AttrValue::Integer(*v))
                .or_else(|| user.iter().find(|(k, _)| k == key).map(|(_, v)| to_wire(v)));
            ops.push(match found {
                Some(v) => AttrOp::Set(key, v),
                None => AttrOp::Remove(key),
            });
        }
    }
    AttrOps::encode(&ops, out);
}
