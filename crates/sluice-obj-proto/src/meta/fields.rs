//! The fields of metadata messages: each encoder appends one field, each
//! decoder takes one from a [`Reader`], bounded and canonical (see the
//! parent module).

use std::collections::BTreeMap;

use super::{
    MetaDecodeError, MetaEntry, MetaLayout, MetaPiece, MetaRedundancy, MetaState, Result,
    MAX_META_ATTRS, MAX_META_NAME_LEN, MAX_META_PIECES, MAX_META_VALUE_LEN,
};
use crate::consts::{MAX_MESSAGE_LEN, MAX_NAME_LEN};
use crate::wire::Reader;

pub(super) fn put_str(s: &str, out: &mut Vec<u8>) {
    // Callers keep strings within their limits (all below 2^16); a
    // longer one is cut at the limit, which the peer then refuses as
    // malformed UTF-8 or a wrong length rather than misframing.
    let len = s.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..len]);
}

pub(super) fn put_opt(v: Option<u64>, out: &mut Vec<u8>) {
    match v {
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&v.to_be_bytes());
        }
        None => out.push(0),
    }
}

pub(super) fn put_attrs(attrs: &BTreeMap<String, Vec<u8>>, out: &mut Vec<u8>) {
    out.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    for (k, v) in attrs {
        put_str(k, out);
        out.extend_from_slice(&(v.len() as u32).to_be_bytes());
        out.extend_from_slice(v);
    }
}

pub(super) fn put_layout(l: &MetaLayout, out: &mut Vec<u8>) {
    out.extend_from_slice(&l.stripe_unit.to_be_bytes());
    out.extend_from_slice(&(l.pieces.len() as u16).to_be_bytes());
    for p in &l.pieces {
        put_str(&p.server, out);
        out.extend_from_slice(&p.partition.to_be_bytes());
        out.extend_from_slice(&p.object.to_be_bytes());
    }
    put_redundancy(l.redundancy, out);
}

pub(super) fn put_redundancy(r: MetaRedundancy, out: &mut Vec<u8>) {
    match r {
        MetaRedundancy::Replicas(copies) => out.extend_from_slice(&[0, copies]),
        MetaRedundancy::Erasure { data, parity } => out.extend_from_slice(&[1, data, parity]),
    }
}

pub(super) fn put_opt_layout(l: Option<&MetaLayout>, out: &mut Vec<u8>) {
    match l {
        Some(l) => {
            out.push(1);
            put_layout(l, out);
        }
        None => out.push(0),
    }
}

pub(super) fn put_entry(e: &MetaEntry, out: &mut Vec<u8>) {
    put_str(&e.name, out);
    put_layout(&e.layout, out);
    out.push(e.state.wire());
    out.extend_from_slice(&e.size.to_be_bytes());
    put_attrs(&e.attrs, out);
    put_opt_layout(e.pending.as_ref(), out);
    out.extend_from_slice(&e.revision.to_be_bytes());
}

pub(super) fn end(r: &Reader<'_>) -> Result<()> {
    match r.rest().len() {
        0 => Ok(()),
        n => Err(MetaDecodeError::Trailing(n)),
    }
}

pub(super) fn u32_(r: &mut Reader<'_>, what: &'static str) -> Result<u32> {
    r.u32().ok_or(MetaDecodeError::Truncated(what))
}

pub(super) fn u64_(r: &mut Reader<'_>, what: &'static str) -> Result<u64> {
    r.u64().ok_or(MetaDecodeError::Truncated(what))
}

pub(super) fn opt(r: &mut Reader<'_>, what: &'static str) -> Result<Option<u64>> {
    match r.u8().ok_or(MetaDecodeError::Truncated(what))? {
        0 => Ok(None),
        1 => Ok(Some(u64_(r, what)?)),
        tag => Err(MetaDecodeError::BadTag { what, tag }),
    }
}

pub(super) fn count(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<usize> {
    let n = usize::from(r.u16().ok_or(MetaDecodeError::Truncated(what))?);
    if n > max {
        return Err(MetaDecodeError::TooLong { what, len: n, max });
    }
    Ok(n)
}

pub(super) fn text(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<String> {
    let len = usize::from(r.u16().ok_or(MetaDecodeError::Truncated(what))?);
    if len > max {
        return Err(MetaDecodeError::TooLong { what, len, max });
    }
    let raw = r.bytes(len).ok_or(MetaDecodeError::Truncated(what))?;
    std::str::from_utf8(raw)
        .map(str::to_owned)
        .map_err(|_| MetaDecodeError::NotUtf8(what))
}

pub(super) fn name(r: &mut Reader<'_>, what: &'static str) -> Result<String> {
    text(r, what, MAX_META_NAME_LEN)
}

pub(super) fn message(r: &mut Reader<'_>, what: &'static str) -> Result<String> {
    text(r, what, MAX_MESSAGE_LEN)
}

pub(super) fn key(r: &mut Reader<'_>) -> Result<String> {
    text(r, "attribute key", MAX_NAME_LEN)
}

pub(super) fn attrs(r: &mut Reader<'_>) -> Result<BTreeMap<String, Vec<u8>>> {
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

pub(super) fn layout(r: &mut Reader<'_>) -> Result<MetaLayout> {
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

pub(super) fn redundancy(r: &mut Reader<'_>) -> Result<MetaRedundancy> {
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

pub(super) fn opt_layout(r: &mut Reader<'_>, what: &'static str) -> Result<Option<MetaLayout>> {
    match r.u8().ok_or(MetaDecodeError::Truncated(what))? {
        0 => Ok(None),
        1 => Ok(Some(layout(r)?)),
        tag => Err(MetaDecodeError::BadTag { what, tag }),
    }
}

pub(super) fn entry(r: &mut Reader<'_>) -> Result<MetaEntry> {
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
