//! `sluice obj --meta URI ...`: striped objects by name, a thin layer
//! over `sluice_client::striped::StripedClient` and the metadata service
//! `--meta` names. `put` makes a new striped object and streams the
//! input into it a chunk at a time; `get` reads it (whole, or the ranges
//! given); `ls`, `stat`, `rm` and `fsck` are one call each (`fsck`
//! with a bar of entries checked on a terminal). Like the
//! single-object commands, what changes data is durable when the
//! command exits 0.

use std::io::Read;
use std::sync::Arc;

use sluice_client::obj::Segment;
use sluice_client::striped::{
    FsckOptions, FsckReport, Pattern, Shape, StripedClient, StripedError, StripedObject,
    StripedWrite,
};
use sluice_meta::{
    check_page, Entry, EntryState, Layout, MetaError, MetaStore, Redundancy, MAX_PAGE,
};
use sluice_types::{error_chain, parse_size};

use super::{open_input, out, read_chunk, Failure, ObjCommand, Outcome, CHUNK};
use crate::meta_cmd::store::{cli_options, open_meta_store};
use crate::progress::Progress;
use crate::UsageError;

/// The stripe unit of `put` without `--stripe`.
const DEFAULT_STRIPE: u64 = 64 << 10;

impl Failure {
    fn from_striped(e: &StripedError) -> Self {
        let hint = match e {
            StripedError::Meta {
                source: MetaError::Exists { .. },
                ..
            } => "; remove it first ('sluice obj --meta URI rm NAME') or choose another name",
            StripedError::Meta {
                source: MetaError::NotFound { .. },
                ..
            } => "; 'sluice obj --meta URI ls' lists the striped objects",
            StripedError::NotReady {
                state: EntryState::Writing,
                ..
            } => {
                "; its first put did not finish, so it is incomplete: put it again, or remove it ('sluice obj --meta URI rm NAME')"
            }
            StripedError::NotReady { .. } => {
                "; a create or remove did not finish: run 'sluice obj --meta URI fsck'"
            }
            StripedError::Replaced { .. } => {
                "; another client's put or rm got there first, and its change stands"
            }
            StripedError::TooFewServers { .. } => {
                "; add servers with 'sluice meta --meta URI add-server sluice://HOST:PORT', or ask for fewer (--stripe-count N, --replicas R, --ec K+M)"
            }
            _ => "",
        };
        Self::Failed(format!("{}{hint}", error_chain(e)))
    }
}

fn meta_failure(what: &str, e: &MetaError) -> Failure {
    Failure::Failed(format!("cannot {what}: {}", error_chain(e)))
}

/// Runs one command against the deployment the metadata service at
/// `meta` describes.
pub(super) fn execute(meta: &str, command: ObjCommand) -> Outcome {
    let store = open_meta_store(meta, false).map_err(|e| {
        let msg = format!("{e:#}");
        if e.downcast_ref::<UsageError>().is_some() {
            Failure::Usage(msg)
        } else {
            Failure::Failed(msg)
        }
    })?;
    let mut client = StripedClient::new(Arc::clone(&store), cli_options());
    let fail = |e: StripedError| Failure::from_striped(&e);
    match command {
        ObjCommand::Put {
            target,
            file,
            stripe,
            stripe_count,
            replicas,
            ec,
        } => {
            let unit = match stripe {
                Some(s) => {
                    parse_size(&s).map_err(|e| Failure::Usage(format!("--stripe {s}: {e}")))?
                }
                None => DEFAULT_STRIPE,
            };
            let shape = match ec {
                Some((data, parity)) => {
                    let shape = Shape::erasure(unit, data, parity);
                    if stripe_count.is_some_and(|n| n as usize != shape.servers) {
                        return Err(Failure::Usage(format!(
                            "--ec {data}+{parity} spreads over {} servers; leave out --stripe-count",
                            shape.servers
                        )));
                    }
                    shape
                }
                None => {
                    let servers = stripe_count.map(|n| n as usize);
                    match replicas {
                        Some(copies) => {
                            let all = || {
                                store
                                    .servers()
                                    .map_err(|e| meta_failure("list the object servers", &e))
                            };
                            let spread = match servers {
                                Some(n) => n,
                                None => all()?.len().max(1),
                            };
                            Shape::replicated(unit, spread, copies)
                        }
                        None => client.default_shape(unit, servers).map_err(fail)?,
                    }
                }
            };
            let mut input = open_input(file.as_deref())?;
            let mut object = client.begin_put(&target, &shape).map_err(fail)?;
            put(&mut client, &mut object, &mut *input)?;
            client
                .complete_put(&mut object)
                .map_err(|e| put_failure(&object, &e))
        }
        ObjCommand::Get {
            target,
            ranges,
            stride,
        } => {
            let mut object = client.open(&target).map_err(fail)?;
            let mut segments = ranges;
            if let Some(s) = stride {
                segments.extend(s.segments());
            }
            if segments.is_empty() {
                let size = object.size();
                let mut progress = Progress::bytes(&target, Some(size));
                let mut at = 0;
                while at < size {
                    let length = (size - at).min(CHUNK as u64);
                    let read = client
                        .read(&mut object, &Pattern::Contiguous { offset: at, length })
                        .map_err(fail)?;
                    out(&read.data)?;
                    progress.add(length);
                    at += length;
                }
                return Ok(());
            }
            let total = segments
                .iter()
                .try_fold(0u64, |t, s| t.checked_add(s.length))
                .ok_or_else(|| Failure::Usage("the ranges add up past 2^64 bytes".into()))?;
            let read = client
                .read(&mut object, &Pattern::Segments(&segments))
                .map_err(fail)?;
            out(&read.data)?;
            if read.real_bytes < total {
                eprintln!(
                    "sluice: note: {} of the {total} bytes lie past the end of {target:?} and read as zeros",
                    total - read.real_bytes
                );
            }
            Ok(())
        }
        ObjCommand::Ls {
            prefix,
            json,
            limit,
            after,
            ..
        } => ls(&*store, &prefix.unwrap_or_default(), limit, after, json),
        ObjCommand::Stat { target, json } => {
            let entry = client.stat(&target).map_err(fail)?;
            if json {
                return out(format!("{}\n", entry_json(&entry)).as_bytes());
            }
            out(stat_text(&entry).as_bytes())
        }
        ObjCommand::Rm { targets } => {
            for name in &targets {
                client.remove(name).map_err(fail)?;
            }
            Ok(())
        }
        ObjCommand::Fsck { grace } => {
            let grace = super::plain_put::parse_grace(&grace)?;
            // A bar of entries checked, on a terminal only; cleared
            // (dropped) before the report prints.
            let mut bar: Option<Progress> = None;
            let report = client.fsck_with_progress(&FsckOptions { grace }, |done, total| {
                bar.get_or_insert_with(|| Progress::operation("fsck", total, "entries"))
                    .set(done);
            });
            drop(bar);
            let report = report.map_err(fail)?;
            out(fsck_text(&report).as_bytes())?;
            match report.failures.len() {
                0 => Ok(()),
                n => Err(Failure::Failed(format!(
                    "fsck could not check or repair {n} thing(s) (above); run it again once every object server is up"
                ))),
            }
        }
        other => Err(Failure::Usage(format!(
            "{} works on single objects; with --meta use put, get, ls, stat, rm or fsck",
            command_name(&other)
        ))),
    }
}

fn command_name(c: &ObjCommand) -> &'static str {
    match c {
        ObjCommand::Create { .. } => "create",
        ObjCommand::Write { .. } => "write",
        ObjCommand::Append { .. } => "append",
        ObjCommand::Attr(_) => "attr",
        ObjCommand::Query { .. } => "query",
        _ => "this command",
    }
}

/// Streams `input` into `object` from offset 0, a chunk at a time.
fn put(client: &mut StripedClient, object: &mut StripedObject, input: &mut dyn Read) -> Outcome {
    let mut buf = vec![0u8; CHUNK];
    let mut progress = Progress::bytes(object.name(), None);
    let mut at = 0u64;
    loop {
        let n = read_chunk(input, &mut buf)?;
        if n > 0 {
            let pattern = Pattern::Segments(&[Segment {
                offset: at,
                length: n as u64,
            }]);
            client
                .write(object, &pattern, &buf[..n], &StripedWrite::default())
                .map_err(|e| put_failure(object, &e))?;
            at += n as u64;
            progress.add(n as u64);
        }
        if n < buf.len() {
            return Ok(());
        }
    }
}

/// A put that failed: what the name holds now.
fn put_failure(object: &StripedObject, e: &StripedError) -> Failure {
    let (Failure::Failed(m) | Failure::Usage(m)) = Failure::from_striped(e);
    let left = if object.replaces() {
        "its old content is unchanged"
    } else {
        "it is incomplete (not readable): put it again, or 'sluice obj --meta URI rm' it"
    };
    Failure::Failed(format!(
        "{m}; the put of {:?} did not finish, so {left}",
        object.name()
    ))
}

fn state_name(s: EntryState) -> &'static str {
    match s {
        EntryState::Creating => "creating",
        EntryState::Writing => "writing",
        EntryState::Ready => "ready",
        EntryState::Removing => "removing",
    }
}

/// An attribute value as text when it is UTF-8, else as hex.
fn show_bytes(v: &[u8]) -> String {
    match std::str::from_utf8(v) {
        Ok(t) => t.to_owned(),
        Err(_) => format!(
            "hex:{}",
            v.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

/// `stat`: the entry and its layout, one field per line.
fn stat_text(e: &Entry) -> String {
    let mut text = format!(
        "name: {}\nsize: {}\nstate: {}\nrevision: {}\nstripe_unit: {}\nredundancy: {}\npieces: {}\n",
        e.name,
        e.size,
        state_name(e.state),
        e.revision,
        e.layout.stripe_unit,
        e.layout.redundancy,
        e.layout.pieces.len()
    );
    for (i, p) in e.layout.pieces.iter().enumerate() {
        text.push_str(&format!(
            "piece {i}: server {} partition {} object {}\n",
            p.server, p.partition, p.object
        ));
    }
    for (k, v) in &e.attrs {
        text.push_str(&format!("attr {k}: {}\n", show_bytes(v)));
    }
    if e.state == EntryState::Writing {
        text.push_str("incomplete: its first put did not finish; put it again or remove it\n");
    }
    if let Some(p) = &e.pending {
        text.push_str(&format!(
            "replacing: a put is writing a new version over {} piece(s) (or died doing so: fsck removes it once it is older than the grace period)\n",
            p.pieces.len()
        ));
    }
    text
}

fn pieces_json(l: &Layout) -> Vec<serde_json::Value> {
    l.pieces
        .iter()
        .map(|p| {
            serde_json::json!({
                "server": p.server,
                "partition": p.partition,
                "object": p.object,
            })
        })
        .collect()
}

/// `{"replicas": R}` or `{"ec": {"data": K, "parity": M}}`.
fn redundancy_json(r: Redundancy) -> serde_json::Value {
    match r {
        Redundancy::Replicas(copies) => serde_json::json!({ "replicas": copies }),
        Redundancy::Erasure { data, parity } => {
            serde_json::json!({ "ec": { "data": data, "parity": parity } })
        }
    }
}

fn entry_json(e: &Entry) -> serde_json::Value {
    let pieces = pieces_json(&e.layout);
    let attrs: serde_json::Map<String, serde_json::Value> = e
        .attrs
        .iter()
        .map(|(k, v)| (k.clone(), show_bytes(v).into()))
        .collect();
    serde_json::json!({
        "name": e.name,
        "size": e.size,
        "state": state_name(e.state),
        "revision": e.revision,
        "stripe_unit": e.layout.stripe_unit,
        "redundancy": redundancy_json(e.layout.redundancy),
        "pieces": pieces,
        "attrs": attrs,
        // A put's new version while it is written (null otherwise).
        "pending": e.pending.as_ref().map(|l| serde_json::json!({
            "stripe_unit": l.stripe_unit,
            "redundancy": redundancy_json(l.redundancy),
            "pieces": pieces_json(l),
        })),
    })
}

/// `ls`: without `limit` and `after`, every name under `prefix`, a page
/// at a time, each printed as it comes so memory stays flat (JSON: one
/// array). With either, one page of at most `limit` names (the most a
/// page holds without it) after `after`, and where to continue: JSON
/// `{"entries": [...], "next": NAME or null}`, text a note on stderr.
fn ls(
    store: &dyn MetaStore,
    prefix: &str,
    limit: Option<usize>,
    after: Option<String>,
    json: bool,
) -> Outcome {
    let list = |after: Option<&str>, limit| {
        store
            .list(prefix, after, limit)
            .map_err(|e| meta_failure("list the striped objects", &e))
    };
    let text =
        |entries: &[Entry]| -> String { entries.iter().map(|e| format!("{}\n", e.name)).collect() };
    if limit.is_some() || after.is_some() {
        let limit = limit.unwrap_or(MAX_PAGE);
        check_page(prefix, after.as_deref(), limit).map_err(|e| {
            let option = if limit == 0 || limit > MAX_PAGE {
                "--limit"
            } else {
                "--after"
            };
            Failure::Usage(format!("{option}: {e}"))
        })?;
        let page = list(after.as_deref(), limit)?;
        if json {
            let entries: Vec<serde_json::Value> = page.entries.iter().map(entry_json).collect();
            let page = serde_json::json!({ "entries": entries, "next": page.next });
            return out(format!("{page}\n").as_bytes());
        }
        out(text(&page.entries).as_bytes())?;
        if let Some(next) = page.next {
            eprintln!(
                "sluice: note: more names follow; continue with --after {}",
                shell_word(&next)
            );
        }
        return Ok(());
    }
    if json {
        out(b"[")?;
    }
    let mut after: Option<String> = None;
    let mut first = true;
    loop {
        let page = list(after.as_deref(), MAX_PAGE)?;
        if json {
            let mut chunk = String::new();
            for e in &page.entries {
                if !std::mem::take(&mut first) {
                    chunk.push(',');
                }
                chunk.push_str(&entry_json(e).to_string());
            }
            out(chunk.as_bytes())?;
        } else {
            out(text(&page.entries).as_bytes())?;
        }
        after = page.next;
        if after.is_none() {
            break;
        }
    }
    if json {
        out(b"]\n")?;
    }
    Ok(())
}

/// `s` as one shell word: as it is if that is safe, else single-quoted.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:=@%".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `fsck`: one line per repair and per failure.
fn fsck_text(r: &FsckReport) -> String {
    let mut text = String::new();
    for n in &r.finished {
        text.push_str(&format!("finished create: {n}\n"));
    }
    for n in &r.undone {
        text.push_str(&format!("undid create: {n}\n"));
    }
    for n in &r.removed {
        text.push_str(&format!("finished remove: {n}\n"));
    }
    for o in &r.orphans {
        text.push_str(&format!(
            "removed orphan: object {} on {} (partition {}) of {:?}\n",
            o.piece.object, o.piece.server, o.piece.partition, o.of
        ));
    }
    for n in &r.incomplete {
        text.push_str(&format!(
            "incomplete put: {n} (its put did not finish; remove it with 'sluice obj --meta URI rm' and put it again)\n"
        ));
    }
    for n in &r.abandoned {
        text.push_str(&format!(
            "abandoned put: {n} (a put replacing it did not finish; its old content stays, the new version's pieces were removed)\n"
        ));
    }
    for o in &r.unmarked {
        text.push_str(&format!(
            "kept unmarked piece: object {} on {} (partition {}) of {:?} (no entry names it, but it carries no deployment mark, so it may be another deployment's)\n",
            o.piece.object, o.piece.server, o.piece.partition, o.of
        ));
    }
    for f in &r.failures {
        text.push_str(&format!("failed: {}\n", error_chain(f).replace('\n', " ")));
    }
    if r.is_clean() {
        text.push_str("clean\n");
    }
    text
}
