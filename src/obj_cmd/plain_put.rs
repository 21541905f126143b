//! `sluice obj put ID` and `sluice obj fsck` of plain (single-server)
//! objects.
//!
//! A put never writes into the object it replaces: it streams the data
//! into a temporary object (a member of [`TEMP_COLLECTION`], with
//! [`TEMP_OF_ATTR`] naming the target), flushes it, and switches the
//! target to it with one REPLACE_DATA, which the server applies as one
//! change (docs/design/0010-all-or-nothing-puts.md, "Plain objects").
//! Killed at any point, the put leaves the target with its old content
//! or the new, whole, and at most a temporary object, which `fsck`
//! removes once it is older than its grace period.
//!
//! A server without REPLACE_DATA gets the older put in place, which
//! marks the object [`PUT_INCOMPLETE_ATTR`] until its last byte is
//! durable (`get` refuses an object so marked, whichever version
//! marked it).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_client::obj::{AttrChange, ErrorCode, Features, FlushScope, ObjClient, ObjError, Value};
use sluice_client::Durability;
use sluice_types::parse_duration;

use super::{id, open_input, out, stream_in, Failure, Outcome};

/// The collection a put's temporary objects are made in.
pub(super) const TEMP_COLLECTION: &str = "put.temporary";

/// The attribute of a temporary object naming the object its put
/// replaces (an integer).
pub(super) const TEMP_OF_ATTR: &str = "put.of";

/// The attribute the older put (and this one, on a server without
/// REPLACE_DATA) sets on an object before it changes any byte and
/// removes once every byte is durable: an object that has it holds part
/// of a put that did not finish, and `get` refuses it.
pub(super) const PUT_INCOMPLETE_ATTR: &str = "put.incomplete";

/// `--grace DUR`: 0 (nothing else runs) is a valid answer here, though
/// not a valid timeout elsewhere.
pub(super) fn parse_grace(grace: &str) -> Result<Duration, Failure> {
    match grace.trim_end_matches(|c: char| c.is_ascii_alphabetic()) {
        "0" => Ok(Duration::ZERO),
        _ => parse_duration(grace).map_err(|e| Failure::Usage(format!("--grace {grace}: {e}"))),
    }
}

fn fail(e: ObjError) -> Failure {
    Failure::from_obj(&e)
}

/// The message of a failure, with what the put left behind.
fn with(f: Failure, what: &str) -> Failure {
    match f {
        Failure::Failed(m) => Failure::Failed(format!("{m}; {what}")),
        usage => usage,
    }
}

/// `obj put ID [FILE]`: the whole object from FILE (or stdin), seen
/// whole or not at all.
pub(super) fn put(c: &mut ObjClient, target: &str, file: Option<&Path>) -> Outcome {
    let id = id(target)?;
    let mut input = open_input(file)?;
    // The target must exist: a put replaces an object, it makes none.
    let marked = c
        .get_attrs(id, &[PUT_INCOMPLETE_ATTR])
        .map_err(fail)?
        .get(PUT_INCOMPLETE_ATTR)
        .is_some();
    if !c.session().features.contains(Features::REPLACE_DATA) {
        let before = c.stat(id).map_err(fail)?.length;
        return put_in_place(c, id, before, &mut *input);
    }
    let tmp = c
        .create(TEMP_COLLECTION, 1, Durability::Buffered)
        .map_err(fail)?
        .first()
        .copied()
        .ok_or_else(|| Failure::Failed("the server made no temporary object".into()))?;
    let unchanged = format!(
        "the put of object {id} did not finish and left it unchanged; 'sluice obj fsck' removes the temporary object {tmp} it wrote"
    );
    c.set_attrs(
        tmp,
        &[AttrChange::set(TEMP_OF_ATTR, Value::Integer(id as i64))],
        Durability::Buffered,
    )
    .map_err(|e| with(fail(e), &unchanged))?;
    stream_in(c, tmp, id, &mut *input, false).map_err(|f| with(f, &unchanged))?;
    c.flush(FlushScope::Object(tmp))
        .map_err(|e| with(fail(e), &unchanged))?;
    c.replace_data(id, tmp, Durability::Durable).map_err(|e| {
        with(
            fail(e),
            &format!(
                "the put of object {id} may not have finished: the object holds its old content or the new, whole; 'sluice obj fsck' removes the temporary object {tmp} if it is left"
            ),
        )
    })?;
    if marked {
        // Left by an older put in place that did not finish; the object
        // is whole now.
        c.set_attrs(
            id,
            &[AttrChange::Remove(PUT_INCOMPLETE_ATTR.into())],
            Durability::Durable,
        )
        .map_err(|e| with(fail(e), &format!("object {id} holds the new content but is still marked incomplete by an earlier put: put it again")))?;
    }
    Ok(())
}

/// The put of a server without REPLACE_DATA: in place, the object
/// marked incomplete until the last byte is durable.
fn put_in_place(c: &mut ObjClient, id: u64, before: u64, input: &mut dyn Read) -> Outcome {
    let marked =
        format!("the put of object {id} did not finish, so it is marked incomplete: put it again");
    let mark = AttrChange::set(PUT_INCOMPLETE_ATTR, Value::Text("true".into()));
    c.set_attrs(id, &[mark], Durability::Durable)
        .map_err(fail)?;
    let (_, len) = stream_in(c, id, id, input, false).map_err(|f| with(f, &marked))?;
    if before > len {
        // A shorter object: the old tail goes.
        c.truncate(id, len, Durability::Buffered)
            .map_err(|e| with(fail(e), &marked))?;
    }
    c.flush(FlushScope::Object(id))
        .and_then(|()| {
            c.set_attrs(
                id,
                &[AttrChange::Remove(PUT_INCOMPLETE_ATTR.into())],
                Durability::Durable,
            )
        })
        .map_err(|e| with(fail(e), &marked))
}

/// `obj fsck` without --meta: removes the temporary objects of puts
/// that did not finish, once older than `grace`; prints one line per
/// object removed, or `clean`.
pub(super) fn fsck(c: &mut ObjClient, grace: Duration) -> Outcome {
    let entries = match c.list(TEMP_COLLECTION, Some(&["sluice.created", TEMP_OF_ATTR])) {
        // No put ever made one here.
        Err(e) if e.code() == Some(ErrorCode::NoSuchCollection) => Vec::new(),
        r => r.map_err(fail)?,
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let grace = i64::try_from(grace.as_nanos()).unwrap_or(i64::MAX);
    let (mut report, mut young) = (String::new(), 0usize);
    for e in &entries {
        let created = match e.attrs.get("sluice.created") {
            Some(Value::Integer(t)) => *t,
            _ => now,
        };
        if now.saturating_sub(created) < grace {
            // A put may still be writing it.
            young += 1;
            continue;
        }
        match c.remove(e.object, Durability::Buffered) {
            Ok(()) => {}
            // Its put finished meanwhile (the replace took it).
            Err(err) if err.code() == Some(ErrorCode::NoSuchObject) => continue,
            Err(err) => return Err(fail(err)),
        }
        let of = match e.attrs.get(TEMP_OF_ATTR) {
            Some(Value::Integer(of)) => format!("object {of}"),
            _ => "an object".into(),
        };
        report.push_str(&format!(
            "removed temporary object {}: an interrupted put of {of}\n",
            e.object
        ));
    }
    if !report.is_empty() {
        c.flush(FlushScope::Partition).map_err(fail)?;
    }
    if young > 0 {
        report.push_str(&format!(
            "left {young} temporary object(s) younger than the grace period (a put may be writing them)\n"
        ));
    }
    if report.is_empty() {
        report.push_str("clean\n");
    }
    out(report.as_bytes())
}
