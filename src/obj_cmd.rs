//! `sluice obj`: objects and their attributes on a sluice object server,
//! a thin layer over `sluice_client::obj::ObjClient`.
//!
//! Every command that changes data or attributes is durable when it
//! exits 0: it ends with a FLUSH of what it changed (the object; for
//! `create` and `rm`, whose objects are new or gone, the partition).
//! Usage errors exit 2 and every
//! other failure 1, each with one line on stderr naming the object and
//! what to do.

use sluice_client::Durability;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use sluice_client::obj::{
    answer, AttrChange, ClientHandshakeError, DataOptions, Entry, ErrorCode, FlushScope, ObjClient,
    ObjError, ObjOptions, Range, Segment, Value, DEFAULT_PARTITION,
};
use sluice_client::{ClientError, ObjUri, DEFAULT_OBJ_SERVER};
use sluice_types::error_chain;

mod plain_put;
mod striped;
mod values;

use plain_put::PUT_INCOMPLETE_ATTR;

pub(crate) use values::parse_erasure;
use values::{
    json_value, parse_assignment, parse_id, parse_range, parse_stride, parse_stripe_count,
    parse_where, show_attr, show_bytes, show_value, Stride,
};

/// Arguments of `sluice obj`.
#[derive(Debug, Args)]
pub(crate) struct ObjArgs {
    /// The object server of single objects: sluice://HOST[:PORT],
    /// sluices://HOST[:PORT]?tls-certificates=DIR or sluice+unix:///PATH;
    /// add ?partition=N for a partition other than the default. Default
    /// sluice://127.0.0.1:10810. Not with --meta, whose metadata service
    /// lists the servers.
    #[arg(long, value_name = "URI", global = true)]
    server: Option<String>,
    /// Striped objects by NAME instead: the metadata service
    /// (sluice://HOST[:PORT] of a 'sluice serve --meta' server,
    /// etcd://HOST:PORT[,...], etcds://... for TLS, or sqlite:DIR) names their layouts; see
    /// 'sluice meta'. Takes put, get, ls, stat, rm and fsck.
    #[arg(long, value_name = "URI", global = true)]
    meta: Option<String>,
    #[command(subcommand)]
    command: ObjCommand,
}

#[derive(Debug, Subcommand)]
enum ObjCommand {
    /// Make new objects; prints their ids, one per line.
    Create {
        /// Put them in this collection.
        #[arg(long, value_name = "NAME")]
        collection: Option<String>,
        /// How many.
        #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
    },
    /// Store FILE (or stdin) as the whole object, seen whole or not at
    /// all: the data goes to a temporary object (collection
    /// put.temporary) that then replaces the object's data in one step,
    /// so an interrupted put leaves the old content; 'sluice obj fsck'
    /// removes the temporary it left. With --meta: the striped object
    /// NAME, made or replaced.
    Put {
        /// The object's id (as create printed it), or with --meta the
        /// striped object's name.
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// The data; stdin when absent or -.
        file: Option<PathBuf>,
        /// With --meta: bytes per stripe unit (a power of two, at least 4K).
        #[arg(long, value_name = "SIZE")]
        stripe: Option<String>,
        /// With --meta: spread it over N of the object servers the
        /// metadata service lists (default: all of them).
        #[arg(long, alias = "servers", value_name = "N", value_parser = parse_stripe_count)]
        stripe_count: Option<u32>,
        /// With --meta: keep every stripe unit on R distinct servers, so
        /// that R-1 servers may be lost (default 1: none).
        #[arg(long, value_name = "R", value_parser = clap::value_parser!(u8).range(1..=16))]
        replicas: Option<u8>,
        /// With --meta: erasure-code it, K data and M parity stripe units a
        /// row on K+M distinct servers, so that M servers may be lost (it is
        /// then written whole by each put, never in place).
        #[arg(long, value_name = "K+M", value_parser = parse_erasure, conflicts_with = "replicas")]
        ec: Option<(u8, u8)>,
    },
    /// Write the object's bytes to stdout: all of it, or the ranges and
    /// the strided pattern given, in order.
    Get {
        /// The object's id (as create printed it), or with --meta the
        /// striped object's name.
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// OFF:LEN (sizes like 4096, 4K, 1M); repeatable.
        #[arg(long = "range", value_name = "OFF:LEN", value_parser = parse_range)]
        ranges: Vec<Segment>,
        /// COUNT segments of LEN bytes, STRIDE apart from OFF.
        #[arg(long, value_name = "OFF:STRIDE:LEN:COUNT", value_parser = parse_stride)]
        stride: Option<Stride>,
    },
    /// Scatter FILE (or stdin) over the ranges, in order; the input must
    /// be exactly as long as the ranges together.
    Write {
        /// The object's id.
        #[arg(value_parser = parse_id)]
        id: u64,
        /// OFF:LEN (sizes like 4096, 4K, 1M); repeatable, at least one.
        #[arg(long = "range", value_name = "OFF:LEN", value_parser = parse_range, required = true)]
        ranges: Vec<Segment>,
        /// The data; stdin when absent or -.
        file: Option<PathBuf>,
    },
    /// Append FILE (or stdin) to the object; prints the offset it went to.
    Append {
        /// The object's id.
        #[arg(value_parser = parse_id)]
        id: u64,
        /// The data; stdin when absent or -.
        file: Option<PathBuf>,
    },
    /// Get or set attributes.
    #[command(subcommand)]
    Attr(AttrCommand),
    /// List objects (of the partition, or of one collection; with
    /// --meta: the striped objects whose names start with PREFIX).
    Ls {
        /// With --meta: only names starting with this.
        prefix: Option<String>,
        /// Only the objects of this collection.
        #[arg(long, value_name = "NAME")]
        collection: Option<String>,
        /// Show each object's attributes.
        #[arg(long)]
        attrs: bool,
        /// Print JSON instead of text (times as nanoseconds since the epoch).
        #[arg(long)]
        json: bool,
        /// With --meta: one page of at most N names (1 to 1024) instead
        /// of all of them; with --json, its "next" continues it.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// With --meta: one page of the names after NAME (the last name
        /// of the previous page) instead of all of them.
        #[arg(long, value_name = "NAME")]
        after: Option<String>,
    },
    /// Objects of a collection whose attributes meet every condition.
    Query {
        /// The collection to search.
        #[arg(long, value_name = "NAME")]
        collection: String,
        /// KEY>=VALUE, KEY<=VALUE or KEY=VALUE; repeatable, at least one.
        #[arg(long = "where", value_name = "COND", value_parser = parse_where, required = true)]
        conditions: Vec<Range>,
        /// Print JSON instead of text (times as nanoseconds since the epoch).
        #[arg(long)]
        json: bool,
    },
    /// Remove objects.
    Rm {
        /// Object ids, or with --meta striped object names.
        #[arg(value_name = "ID|NAME", required = true)]
        targets: Vec<String>,
    },
    /// The object's length and the other attributes the server keeps.
    Stat {
        /// The object's id (as create printed it), or with --meta the
        /// striped object's name.
        #[arg(value_name = "ID|NAME")]
        target: String,
        /// Print JSON instead of text (times as nanoseconds since the epoch).
        #[arg(long)]
        json: bool,
    },
    /// Remove the temporary objects of plain puts that did not finish
    /// (collection put.temporary); with --meta: finish or undo creates
    /// and removes a crash left half done, and remove pieces no striped
    /// object names. Prints what it removed, or "clean".
    Fsck {
        /// Leave pieces (with --meta) or temporary objects younger than
        /// this alone (a create or put may still be making them); 0s
        /// when nothing else runs.
        #[arg(long, value_name = "DUR", default_value = "10m")]
        grace: String,
    },
}

#[derive(Debug, Subcommand)]
enum AttrCommand {
    /// Set attributes: KEY=VALUE, VALUE an integer or text, or forced
    /// with int:, text: or hex: (bytes).
    Set {
        /// The object's id.
        #[arg(value_parser = parse_id)]
        id: u64,
        #[arg(value_name = "KEY=VALUE", value_parser = parse_assignment, required = true)]
        pairs: Vec<(String, Value)>,
    },
    /// Print attributes as KEY=VALUE lines (all of them, or KEY...).
    Get {
        /// The object's id.
        #[arg(value_parser = parse_id)]
        id: u64,
        /// Only these attributes.
        keys: Vec<String>,
        /// Print JSON instead of text (times as nanoseconds since the epoch).
        #[arg(long)]
        json: bool,
    },
}

/// Why a command failed, and the exit code it gets.
enum Failure {
    /// Exit 2.
    Usage(String),
    /// Exit 1.
    Failed(String),
}

impl Failure {
    fn from_obj(e: &ObjError) -> Self {
        let hint = match e.code() {
            Some(ErrorCode::NoSuchObject) => "; check the id ('sluice obj ls' lists the objects)",
            Some(ErrorCode::NoSuchCollection) => {
                "; check the name ('sluice obj ls' lists the objects of the partition)"
            }
            Some(ErrorCode::NoSuchPartition) => {
                "; name an existing partition with --server URI?partition=N"
            }
            Some(ErrorCode::AttrTooLarge) => "; use a shorter value",
            Some(ErrorCode::Permission) => "; keys starting with sluice. are the server's own",
            _ => "",
        };
        Self::Failed(format!("{}{hint}", error_chain(e)))
    }
}

type Outcome = Result<(), Failure>;

/// Refuses an object a put left incomplete.
fn check_complete(c: &mut ObjClient, id: u64) -> Outcome {
    let attrs = c
        .get_attrs(id, &[PUT_INCOMPLETE_ATTR])
        .map_err(|e| Failure::from_obj(&e))?;
    match attrs.get(PUT_INCOMPLETE_ATTR) {
        None => Ok(()),
        Some(_) => Err(Failure::Failed(format!(
            "object {id} is incomplete: a put of it did not finish; put it again"
        ))),
    }
}

/// Runs `sluice obj` and reports failures itself (one line each).
pub(crate) fn run(args: ObjArgs) -> ExitCode {
    match execute(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            let (code, msg) = match f {
                Failure::Usage(m) => (2, m),
                Failure::Failed(m) => (1, m),
            };
            // One line, whatever the server's message held.
            let msg = msg.replace(['\n', '\r'], " ");
            eprintln!("sluice: error: {msg}");
            ExitCode::from(code)
        }
    }
}

fn connect(server: &str) -> Result<ObjClient, Failure> {
    let uri: ObjUri = server
        .parse()
        .map_err(|e| Failure::Usage(format!("{e}; see 'sluice obj --help'")))?;
    ObjClient::connect(&uri, &ObjOptions::default()).map_err(|e| {
        let hint = match &e {
            ObjError::Handshake {
                source: ClientHandshakeError::Refused { status, .. },
                ..
            } => match *status {
                answer::UNKNOWN_PARTITION => format!(
                    "; name an existing partition with ?partition=N (without it: partition {DEFAULT_PARTITION})"
                ),
                answer::DENIED => {
                    "; this client's certificate may not use the partition (sluices://...?tls-certificates=DIR names another)".into()
                }
                _ => String::new(),
            },
            // The message says what to do.
            ObjError::Handshake {
                source: ClientHandshakeError::TlsRequired | ClientHandshakeError::TlsUnavailable,
                ..
            }
            | ObjError::BadUri(_)
            | ObjError::Transport(ClientError::WrongProtocol { .. }) => String::new(),
            _ => format!(
                "; is 'sluice serve' running at {server}? (--server URI names another server)"
            ),
        };
        Failure::Failed(format!("{}{hint}", error_chain(&e)))
    })
}

/// Bytes `put`, `append` and whole-object `get` move per request: large
/// objects stream through the client in pieces this size instead of
/// being held whole.
const CHUNK: usize = 8 << 20;

/// FILE, or stdin for none or `-`.
fn open_input(file: Option<&Path>) -> Result<Box<dyn Read>, Failure> {
    match file {
        Some(p) if p != Path::new("-") => {
            let f = std::fs::File::open(p).map_err(|e| {
                Failure::Failed(format!(
                    "cannot read {}: {e}; check the file name",
                    p.display()
                ))
            })?;
            Ok(Box::new(f))
        }
        _ => {
            let stdin = std::io::stdin();
            if std::io::IsTerminal::is_terminal(&stdin) {
                // Otherwise it looks hung.
                eprintln!(
                    "sluice: reading the data from the terminal; end it with Ctrl-D (or give FILE)"
                );
            }
            Ok(Box::new(stdin.lock()))
        }
    }
}

/// Fills `buf` from `input` as far as it goes; returns how much.
fn read_chunk(input: &mut dyn Read, buf: &mut [u8]) -> Result<usize, Failure> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Failure::Failed(format!("cannot read the input: {e}"))),
        }
    }
    Ok(n)
}

fn read_input(file: Option<&Path>) -> Result<Vec<u8>, Failure> {
    let mut data = Vec::new();
    open_input(file)?
        .read_to_end(&mut data)
        .map_err(|e| Failure::Failed(format!("cannot read the input: {e}")))?;
    Ok(data)
}

/// Writes the input into object `id` from offset 0 (or, with `append`,
/// after the object's end), a chunk at a time, showing progress as the
/// transfer of object `shown_as` (a put's target, not its temporary).
/// Returns where the data begins and how long it is.
fn stream_in(
    c: &mut ObjClient,
    id: u64,
    shown_as: u64,
    input: &mut dyn Read,
    append: bool,
) -> Result<(u64, u64), Failure> {
    let fail = |e: ObjError| Failure::from_obj(&e);
    let mut buf = vec![0u8; CHUNK];
    let mut start = 0u64;
    let mut pos = 0u64;
    let mut progress = crate::progress::Progress::bytes(&format!("object {shown_as}"), None);
    loop {
        let n = read_chunk(input, &mut buf)?;
        progress.add(n as u64);
        if append && pos == 0 {
            start = c
                .append(id, &buf[..n], &DataOptions::default())
                .map_err(fail)?;
        } else if n > 0 {
            let seg = Segment {
                offset: start + pos,
                length: n as u64,
            };
            c.write(id, &[seg], &buf[..n], &DataOptions::default())
                .map_err(fail)?;
        }
        pos += n as u64;
        if n < buf.len() {
            return Ok((start, pos));
        }
    }
}

fn out(bytes: &[u8]) -> Outcome {
    let mut o = std::io::stdout().lock();
    o.write_all(bytes).and_then(|()| o.flush()).map_err(|e| {
        crate::pipe::exit_if_closed(&e);
        Failure::Failed(format!("cannot write to stdout: {e}"))
    })
}

/// An object id argument (striped objects are named with --meta).
fn id(arg: &str) -> Result<u64, Failure> {
    parse_id(arg)
        .map_err(|e| Failure::Usage(format!("{e}; striped objects are named with --meta URI")))
}

fn execute(args: ObjArgs) -> Outcome {
    if let Some(meta) = &args.meta {
        if args.server.is_some() {
            return Err(Failure::Usage(
                "--server names the object server of single objects; with --meta the metadata service lists the servers (--stripe-count N spreads a put over N of them)".into(),
            ));
        }
        return striped::execute(meta, args.command);
    }
    // Ids are checked before connecting, so a name given without
    // --meta is a usage error whatever the server.
    match &args.command {
        ObjCommand::Put { target, .. }
        | ObjCommand::Get { target, .. }
        | ObjCommand::Stat { target, .. } => drop(id(target)?),
        ObjCommand::Rm { targets } => targets.iter().try_for_each(|t| id(t).map(drop))?,
        _ => {}
    }
    let mut client = connect(args.server.as_deref().unwrap_or(DEFAULT_OBJ_SERVER))?;
    let c = &mut client;
    let fail = |e: ObjError| Failure::from_obj(&e);
    match args.command {
        ObjCommand::Create { collection, count } => {
            let ids = c
                .create(
                    collection.as_deref().unwrap_or(""),
                    count,
                    Durability::Buffered,
                )
                .map_err(fail)?;
            c.flush(FlushScope::Partition).map_err(fail)?;
            let text: String = ids.iter().map(|id| format!("{id}\n")).collect();
            out(text.as_bytes())
        }
        ObjCommand::Put {
            target,
            file,
            stripe,
            stripe_count,
            replicas,
            ec,
        } => {
            if stripe.is_some() || stripe_count.is_some() || replicas.is_some() || ec.is_some() {
                return Err(Failure::Usage(
                    "--stripe, --stripe-count, --replicas and --ec place striped objects; give --meta URI"
                        .into(),
                ));
            }
            plain_put::put(c, &target, file.as_deref())
        }
        ObjCommand::Get {
            target,
            ranges,
            stride,
        } => get(c, &target, ranges, stride),
        ObjCommand::Write { id, ranges, file } => {
            let data = read_input(file.as_deref())?;
            let want = ranges
                .iter()
                .try_fold(0u64, |t, s| t.checked_add(s.length))
                .ok_or_else(|| Failure::Usage("the ranges add up past 2^64 bytes".into()))?;
            if data.len() as u64 != want {
                return Err(Failure::Failed(format!(
                    "the ranges take {want} bytes but the input has {}; give exactly {want} bytes for object {id}",
                    data.len()
                )));
            }
            c.write(id, &ranges, &data, &DataOptions::default())
                .map_err(fail)?;
            c.flush(FlushScope::Object(id)).map_err(fail)
        }
        ObjCommand::Append { id, file } => {
            let mut input = open_input(file.as_deref())?;
            let (at, _) = stream_in(c, id, id, &mut input, true)?;
            c.flush(FlushScope::Object(id)).map_err(fail)?;
            out(format!("{at}\n").as_bytes())
        }
        ObjCommand::Attr(AttrCommand::Set { id, pairs }) => {
            let changes: Vec<AttrChange> = pairs
                .into_iter()
                .map(|(k, v)| AttrChange::Set(k, v))
                .collect();
            c.set_attrs(id, &changes, Durability::Buffered)
                .map_err(fail)?;
            c.flush(FlushScope::Object(id)).map_err(fail)
        }
        ObjCommand::Attr(AttrCommand::Get { id, keys, json }) => attr_get(c, id, &keys, json),
        ObjCommand::Ls {
            prefix,
            collection,
            attrs,
            json,
            limit,
            after,
        } => {
            if prefix.is_some() {
                return Err(Failure::Usage(
                    "PREFIX lists striped objects; give --meta URI (or --collection NAME)".into(),
                ));
            }
            if limit.is_some() || after.is_some() {
                return Err(Failure::Usage(
                    "--limit and --after page through striped objects; give --meta URI".into(),
                ));
            }
            let want: &[&str] = &[];
            let entries = c
                .list(collection.as_deref().unwrap_or(""), attrs.then_some(want))
                .map_err(fail)?;
            print_entries(&entries, attrs, json)
        }
        ObjCommand::Query {
            collection,
            conditions,
            json,
        } => {
            let entries = c.query(&collection, &conditions).map_err(fail)?;
            let with_attrs = entries.iter().any(|e| !e.attrs.is_empty());
            print_entries(&entries, with_attrs, json)
        }
        ObjCommand::Rm { targets } => rm(c, &targets),
        ObjCommand::Stat { target, json } => stat(c, &target, json),
        ObjCommand::Fsck { grace } => plain_put::fsck(c, plain_put::parse_grace(&grace)?),
    }
}

/// `obj get ID [RANGE...] [--stride ...]`: the whole object streamed to
/// stdout, or the ranges and strided pattern given, in order.
fn get(c: &mut ObjClient, target: &str, ranges: Vec<Segment>, stride: Option<Stride>) -> Outcome {
    let fail = |e: ObjError| Failure::from_obj(&e);
    let id = id(target)?;
    check_complete(c, id)?;
    let mut segments = ranges;
    if let Some(s) = stride {
        segments.extend(s.segments());
    }
    if segments.is_empty() {
        // The whole object, streamed a chunk at a time.
        let length = c.stat(id).map_err(fail)?.length;
        let mut progress = crate::progress::Progress::bytes(&format!("object {id}"), Some(length));
        let mut at = 0;
        while at < length {
            let n = (length - at).min(CHUNK as u64);
            let seg = Segment {
                offset: at,
                length: n,
            };
            out(&c.read(id, &[seg]).map_err(fail)?.data)?;
            at += n;
            progress.add(n);
        }
        return Ok(());
    }
    let total = segments
        .iter()
        .try_fold(0u64, |t, s| t.checked_add(s.length))
        .ok_or_else(|| Failure::Usage("the ranges add up past 2^64 bytes".into()))?;
    let reply = c.read(id, &segments).map_err(fail)?;
    out(&reply.data)?;
    if reply.real_bytes < total {
        eprintln!(
            "sluice: note: {} of the {total} bytes lie past the end of object {id} and read as zeros",
            total - reply.real_bytes
        );
    }
    Ok(())
}

/// `obj attr get ID KEY... [--json]`: the values asked for; fails naming
/// the keys the object does not have.
fn attr_get(c: &mut ObjClient, id: u64, keys: &[String], json: bool) -> Outcome {
    let fail = |e: ObjError| Failure::from_obj(&e);
    let keys_ref: Vec<&str> = keys.iter().map(String::as_str).collect();
    let attrs = c.get_attrs(id, &keys_ref).map_err(fail)?;
    let missing: Vec<&str> = keys_ref
        .iter()
        .copied()
        .filter(|k| attrs.get(k).is_none())
        .collect();
    if json {
        let mut map = serde_json::Map::new();
        for (k, v) in &attrs.0 {
            map.insert(
                k.clone(),
                v.as_ref().map_or(serde_json::Value::Null, json_value),
            );
        }
        for k in &missing {
            map.entry(*k).or_insert(serde_json::Value::Null);
        }
        out(format!("{}\n", serde_json::Value::Object(map)).as_bytes())?;
    } else {
        let text: String = attrs
            .values()
            .map(|(k, v)| format!("{k}={}\n", show_value(v)))
            .collect();
        out(text.as_bytes())?;
    }
    match missing.as_slice() {
        [] => Ok(()),
        [one] => Err(Failure::Failed(format!(
            "object {id} has no attribute {one:?}; set it with 'sluice obj attr set {id} {one}=VALUE'"
        ))),
        many => Err(Failure::Failed(format!(
            "object {id} has no attributes {many:?}; set them with 'sluice obj attr set {id} KEY=VALUE...'"
        ))),
    }
}

/// `obj rm ID...`: removes them all, durably, and reports the ones that
/// failed.
fn rm(c: &mut ObjClient, targets: &[String]) -> Outcome {
    let fail = |e: ObjError| Failure::from_obj(&e);
    let ids = targets
        .iter()
        .map(|t| id(t))
        .collect::<Result<Vec<_>, _>>()?;
    let results = c.remove_many(&ids, Durability::Buffered);
    // Whatever was removed is durable, failures or not.
    c.flush(FlushScope::Partition).map_err(fail)?;
    let failed: Vec<(u64, ObjError)> = ids
        .iter()
        .zip(results)
        .filter_map(|(id, r)| r.err().map(|e| (*id, e)))
        .collect();
    match failed.as_slice() {
        [] => Ok(()),
        [(_, e)] => Err(Failure::from_obj(e)),
        [(_, e), rest @ ..] => {
            let others: Vec<String> = rest.iter().map(|(id, _)| id.to_string()).collect();
            let (Failure::Failed(m) | Failure::Usage(m)) = Failure::from_obj(e);
            Err(Failure::Failed(format!(
                "{m} (objects {} failed too; the others were removed)",
                others.join(", ")
            )))
        }
    }
}

/// `obj stat ID [--json]`: length, server attributes and whether a put
/// of it did not finish.
fn stat(c: &mut ObjClient, target: &str, json: bool) -> Outcome {
    let fail = |e: ObjError| Failure::from_obj(&e);
    let id = id(target)?;
    let stat = c.stat(id).map_err(fail)?;
    let incomplete = c
        .get_attrs(id, &[PUT_INCOMPLETE_ATTR])
        .map_err(fail)?
        .get(PUT_INCOMPLETE_ATTR)
        .is_some();
    // (short name, full key, value)
    let fields: Vec<(String, &str, &Value)> = stat
        .attrs
        .values()
        .filter(|(k, _)| *k != sluice_client::obj::LENGTH_ATTR)
        .map(|(k, v)| {
            let short = k
                .strip_prefix(sluice_client::obj::SERVER_ATTR_PREFIX)
                .unwrap_or(k);
            (short.replace('.', "_"), k, v)
        })
        .collect();
    if json {
        let mut map = serde_json::Map::new();
        map.insert("id".into(), stat.object.into());
        map.insert("length".into(), stat.length.into());
        for (k, _, v) in &fields {
            map.insert(k.clone(), json_value(v));
        }
        map.insert("incomplete".into(), incomplete.into());
        out(format!("{}\n", serde_json::Value::Object(map)).as_bytes())
    } else {
        let mut text = format!("id: {}\nlength: {}\n", stat.object, show_bytes(stat.length));
        for (k, key, v) in &fields {
            text.push_str(&format!("{k}: {}\n", show_attr(key, v)));
        }
        if incomplete {
            text.push_str("incomplete: a put of it did not finish; put it again\n");
        }
        out(text.as_bytes())
    }
}

/// `ls` and `query` output: ids one per line (with `KEY=VALUE` after
/// each when attributes are shown), or a JSON array of
/// `{"id": N, "attrs": {...}}`.
fn print_entries(entries: &[Entry], attrs: bool, json: bool) -> Outcome {
    if json {
        let list: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                let mut m = serde_json::Map::new();
                m.insert("id".into(), e.object.into());
                if attrs {
                    let a: serde_json::Map<String, serde_json::Value> = e
                        .attrs
                        .values()
                        .map(|(k, v)| (k.to_owned(), json_value(v)))
                        .collect();
                    m.insert("attrs".into(), a.into());
                }
                serde_json::Value::Object(m)
            })
            .collect();
        return out(format!("{}\n", serde_json::Value::Array(list)).as_bytes());
    }
    let mut text = String::new();
    for e in entries {
        text.push_str(&e.object.to_string());
        if attrs {
            for (k, v) in e.attrs.values() {
                text.push_str(&format!(" {k}={}", show_attr(k, v)));
            }
        }
        text.push('\n');
    }
    out(text.as_bytes())
}
