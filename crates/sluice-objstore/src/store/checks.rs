//! The checks a request passes before it takes its object's lock:
//! segment ranges, payload lengths, read size, attribute keys and
//! values.

use crate::error::ObjStoreError;
use crate::segments::Segment;
use crate::ObjectRef;

use super::types::{limits, AttrValue, BatchChange, Edit};

pub(super) fn check_attrs(attrs: &[(String, AttrValue)]) -> Result<(), ObjStoreError> {
    for (key, value) in attrs {
        if key.is_empty() {
            return Err(ObjStoreError::BadAttributeKey {
                key: key.clone(),
                reason: "keys are not empty",
            });
        }
        let too_large = |what, len, limit| ObjStoreError::AttributeTooLarge {
            key: key.clone(),
            what,
            len,
            limit,
        };
        if key.len() > limits::KEY {
            return Err(too_large("the key", key.len(), limits::KEY));
        }
        match value {
            AttrValue::Text(t) if t.len() > limits::TEXT => {
                return Err(too_large("the text value", t.len(), limits::TEXT))
            }
            AttrValue::Bytes(b) if b.len() > limits::BYTES => {
                return Err(too_large("the bytes value", b.len(), limits::BYTES))
            }
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn check_segments(
    object: ObjectRef,
    segments: &[Segment],
) -> Result<u64, ObjStoreError> {
    let mut total = 0u64;
    for s in segments {
        match s.offset.checked_add(s.len) {
            Some(end) if end <= limits::OBJECT_END => total += s.len,
            _ => {
                return Err(ObjStoreError::OutOfRange {
                    object,
                    offset: s.offset,
                    len: s.len,
                    limit: limits::OBJECT_END,
                })
            }
        }
    }
    Ok(total)
}

/// Checks a write's segments and that `data` is exactly their bytes.
pub(super) fn check_payload(
    object: ObjectRef,
    segments: &[Segment],
    data: &[u8],
) -> Result<(), ObjStoreError> {
    let total = check_segments(object, segments)?;
    if total != data.len() as u64 {
        return Err(ObjStoreError::PayloadLength {
            object,
            expected: total,
            got: data.len() as u64,
        });
    }
    Ok(())
}

/// The checks a single call makes before taking its object's lock.
pub(super) fn check_change(c: &BatchChange<'_>) -> Result<(), ObjStoreError> {
    match c.edit {
        Edit::Write(segments, data) => check_payload(c.object, segments, data)?,
        Edit::WriteFrom(offset, source) => {
            check_segments(c.object, &[Segment::new(offset, source.bytes())])?;
        }
        Edit::Append(_) => {}
        Edit::Punch(segments) => {
            check_segments(c.object, segments)?;
        }
    }
    check_attrs(&c.opts.attrs)
}

pub(super) fn check_read_len(object: ObjectRef, total: u64) -> Result<(), ObjStoreError> {
    if total > limits::READ_BYTES {
        return Err(ObjStoreError::ReadTooLarge {
            object,
            len: total,
            limit: limits::READ_BYTES,
        });
    }
    Ok(())
}
