//! `sluice`: the one binary. Subcommands parse arguments, build the
//! libraries' configuration and report errors with context.

// The argument structs' doc comments are clap's --help text, written for
// a terminal (`HOST[:PORT]`, `,ro`), not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Parser, Subcommand};
use sluice_server::{
    ExportConfig, FastPaths, Limits, ListenAddr, ObjectConfig, PipelineMode, ReceiveTuning,
    ServerConfig, Timeouts,
};

mod bench_cmd;
mod generate_cmd;
mod meta_cmd;
mod model_cmd;
mod obj_cmd;
mod pipe;
mod progress;
mod raid_cmd;
mod service;
mod usage;

/// `sluice --version`: the crate version, the commit it was built from
/// (build.rs; "unknown" outside a git checkout unless SLUICE_GIT_COMMIT
/// is set) and the build profile.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SLUICE_GIT_COMMIT"),
    ", ",
    env!("SLUICE_BUILD_PROFILE"),
    " build)"
);

/// Networked storage: NBD block volumes served fast.
#[derive(Debug, Parser)]
#[command(name = "sluice", version = VERSION, about)]
struct Cli {
    /// Log lines as text (default) or JSON objects, one per line (on
    /// stderr).
    #[arg(long, value_name = "FORMAT", global = true, default_value = "text")]
    log_format: LogFormat,
    /// What is logged: error, warn, info, debug or trace, or a filter as
    /// RUST_LOG takes it (info,sluice_server=debug). Default: RUST_LOG,
    /// else info.
    #[arg(long, value_name = "LEVEL", global = true, value_parser = parse_log_level)]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// `--log-level`: a level, or a filter tracing takes, kept as written.
/// A lone word must be a level: tracing would read `degub` as the name
/// of a module to log everything of, and log nothing.
fn parse_log_level(arg: &str) -> Result<String, String> {
    const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
    let hint = "give error, warn, info, debug, trace or a RUST_LOG filter such as info,sluice_server=debug";
    if !arg.contains(['=', ',']) && !LEVELS.contains(&arg.to_ascii_lowercase().as_str()) {
        return Err(format!("{arg:?} is not a level; {hint}"));
    }
    tracing_subscriber::EnvFilter::try_new(arg)
        .map(|_| arg.to_owned())
        .map_err(|e| format!("{e}; {hint}"))
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve block volumes over NBD, and objects (and the same volumes)
    /// over sluice's native object protocol.
    Serve(Box<ServeArgs>),
    /// Measure an NBD server or local I/O: workloads, comparisons with
    /// nbdkit and qemu-nbd, and the papers' experiments as presets.
    Bench(Box<bench_cmd::BenchArgs>),
    /// Analytical models: MVA and bounds, the networked RAID model, the
    /// non-contiguous transfer model.
    Model(model_cmd::ModelArgs),
    /// Objects and their attributes on a sluice object server: create,
    /// put, get, write, append, attr, ls, query, rm, stat; with --meta,
    /// striped objects by name: put, get, ls, stat, rm, fsck.
    Obj(obj_cmd::ObjArgs),
    /// The object servers of a striped-object deployment, as its
    /// metadata service lists them: add-server, ls-servers,
    /// remove-server.
    Meta(meta_cmd::MetaArgs),
    /// RAID arrays over NBD members: `create` writes their superblocks;
    /// `status`, `replace` and `scrub` ask a running server.
    Raid(raid_cmd::RaidArgs),
    /// Man pages and shell completions for this CLI (what the packages
    /// install).
    Generate(generate_cmd::GenerateArgs),
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Address to listen on: HOST:PORT or unix:PATH (repeatable).
    /// Default 127.0.0.1:10809. Under systemd socket activation
    /// (LISTEN_FDS) the sockets systemd passes are used instead.
    #[arg(long = "listen", value_name = "ADDR")]
    listen: Vec<ListenAddr>,
    /// Export NAME=SPEC, SPEC being file:PATH[,size=BYTES][,ro][,direct],
    /// mem:BYTES[,ro][,overcommit] (overcommit: larger than the machine's
    /// memory), an NBD URI (nbd://HOST[:PORT]/EXPORT, nbds://,
    /// nbd+unix://, nbds+unix://) of another server, a sluice server's
    /// export over the native protocol (sluice://HOST[:PORT]/EXPORT,
    /// sluices://; ?merge=off|always|adaptive), or a RAID volume over
    /// NBD URIs, raid0:/raid1:/raid5:/raid6:/raid10:unit=SIZE,members=URI,URI,...
    /// (raid10: md's near layout, copies=N, default 2; a
    /// member may itself be an array spec in parentheses; see
    /// docs/RAID.md; repeatable). Default: default=file:./sluice-data/default.img
    /// (created at 1G; an existing file is served at its size).
    #[arg(long = "export", value_name = "NAME=SPEC", value_parser = ExportConfig::parse_arg)]
    export: Vec<ExportConfig>,
    /// Serve the object store in DIR (created if missing) over the native
    /// object protocol, with every export for extent commands. Default
    /// when no --listen is given: ./sluice-data/objects.
    #[arg(long = "objects", value_name = "DIR")]
    objects: Option<PathBuf>,
    /// Address the object protocol listens on: HOST:PORT or unix:PATH
    /// (repeatable). Default 127.0.0.1:10810.
    #[arg(long = "object-listen", value_name = "ADDR")]
    object_listen: Vec<ListenAddr>,
    /// Also serve the metadata service of striped objects, kept in DIR,
    /// on the object listeners (clients reach it with --meta
    /// sluice://HOST:PORT). Implies serving objects.
    #[arg(long = "meta", value_name = "DIR")]
    meta: Option<PathBuf>,
    #[command(flatten)]
    object_limits: ObjectLimitArgs,
    /// TOML file with the same settings (command-line flags win).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// off: one request at a time; fixed: overlapped, replies in request
    /// order; flexible: overlapped, replies in completion order.
    #[arg(long, value_name = "MODE")]
    pipeline: Option<PipelineMode>,
    /// Threads for device I/O that would block a connection.
    #[arg(long, value_name = "N")]
    io_threads: Option<usize>,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    timeouts: TimeoutArgs,
    #[command(flatten)]
    receive: ReceiveArgs,
    /// Buffer cache per export: none, writethrough or writeback.
    #[arg(long, value_name = "POLICY")]
    cache: Option<sluice_server::CachePolicy>,
    /// Bytes of buffer cache per export (K/M/G suffixes).
    #[arg(long, value_name = "BYTES")]
    cache_size: Option<sluice_server::ByteSize>,
    /// Largest read-ahead window of the cache (0 disables read-ahead).
    #[arg(long, value_name = "BYTES")]
    readahead_max: Option<sluice_server::ByteSize>,
    #[command(flatten)]
    fast_paths: FastPathArgs,
    /// Serve Prometheus metrics on http://ADDR/metrics (e.g. 127.0.0.1:9109).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Answer `sluice raid status|replace|scrub` on the local socket
    /// unix:PATH (mode 0600). Default with no --listen and no --export:
    /// unix:./sluice-data/admin.sock.
    #[arg(long, value_name = "unix:PATH")]
    admin: Option<ListenAddr>,
    /// Most bytes per second a RAID rebuild writes (and a scrub reads
    /// per member); 0 for no limit. Default 200M.
    #[arg(long, value_name = "BYTES")]
    rebuild_rate: Option<sluice_server::ByteSize>,
    #[command(flatten)]
    tls: TlsArgs,
    #[command(flatten)]
    s3: service::s3::S3Args,
    #[command(flatten)]
    service: service::ServiceArgs,
}

/// `--tls`, `--tls-certificates`, `--tls-verify-peer`, `--tls-allow`:
/// applied at startup and again on every reload (SIGHUP).
#[derive(Debug, Clone, Args)]
struct TlsArgs {
    /// TLS (NBD STARTTLS): off; on (offered, plaintext clients still
    /// served); require (nothing but STARTTLS answered before TLS).
    #[arg(long, value_name = "MODE")]
    tls: Option<sluice_server::TlsMode>,
    /// Directory with server-cert.pem, server-key.pem and ca-cert.pem
    /// (the layout nbdkit and qemu use); read again on SIGHUP.
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,
    /// Require a client certificate signed by ca-cert.pem.
    #[arg(long)]
    tls_verify_peer: bool,
    /// Allow only the client identity ID on export NAME (repeatable); ID is
    /// CN=..., DNS=..., IP=..., EMAIL=... or URI=..., matched against the
    /// verified client certificate. Needs --tls-verify-peer.
    #[arg(long, value_name = "NAME=ID", value_parser = parse_tls_allow)]
    tls_allow: Vec<(String, sluice_server::TlsIdentity)>,
}

impl TlsArgs {
    fn apply(&self, tls: &mut sluice_server::TlsConfig) {
        if let Some(m) = self.tls {
            tls.mode = m;
        }
        if let Some(dir) = &self.tls_certificates {
            tls.certificates = Some(dir.clone());
        }
        if self.tls_verify_peer {
            tls.verify_peer = true;
        }
        for (export, id) in &self.tls_allow {
            tls.allow
                .entry(export.clone())
                .or_default()
                .push(id.clone());
        }
    }
}

/// `--max-connections`, `--max-inflight-bytes`, `--max-request-size`.
#[derive(Debug, Args)]
struct LimitArgs {
    /// Most simultaneous connections; more are closed at once.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Bytes of handed-off requests in flight per connection before it
    /// stops reading (K/M/G suffixes; default 64M).
    #[arg(long, value_name = "BYTES")]
    max_inflight_bytes: Option<sluice_server::ByteSize>,
    /// Largest read or write a client may send (K/M/G suffixes; default
    /// 64M; 4K up to 4G-1), advertised as the maximum block size.
    #[arg(long, value_name = "BYTES")]
    max_request_size: Option<sluice_server::ByteSize>,
}

impl LimitArgs {
    fn apply(self, limits: &mut Limits) {
        if let Some(n) = self.max_connections {
            limits.max_connections = n;
        }
        if let Some(b) = self.max_inflight_bytes {
            limits.max_inflight_bytes_per_connection = b.0;
        }
        if let Some(b) = self.max_request_size {
            limits.max_request_size = b.0;
        }
    }
}

/// The limits the object handshake publishes (`[objects]` in the file).
#[derive(Debug, Args)]
struct ObjectLimitArgs {
    /// Most segments one object request lists, objects one CREATE makes
    /// and entries one page holds (1 to 65536; default 4096).
    #[arg(long, value_name = "N")]
    object_max_segments: Option<u32>,
    /// Most payload bytes of one object request (K/M/G suffixes; 4K up
    /// to 1G; default 32M).
    #[arg(long, value_name = "BYTES")]
    object_max_payload: Option<sluice_server::ByteSize>,
    /// Most members of one batch frame (1 to 65536; default 256).
    #[arg(long, value_name = "N")]
    object_max_batch: Option<u32>,
    /// Most bytes of one attribute value (1 up to 64K; default 64K).
    #[arg(long, value_name = "BYTES")]
    object_max_attr_size: Option<sluice_server::ByteSize>,
}

impl ObjectLimitArgs {
    fn given(&self) -> bool {
        self.object_max_segments.is_some()
            || self.object_max_payload.is_some()
            || self.object_max_batch.is_some()
            || self.object_max_attr_size.is_some()
    }

    fn apply(self, objects: &mut ObjectConfig) {
        objects.max_segments = self.object_max_segments.or(objects.max_segments);
        objects.max_payload = self.object_max_payload.or(objects.max_payload);
        objects.max_batch = self.object_max_batch.or(objects.max_batch);
        objects.max_attr_size = self.object_max_attr_size.or(objects.max_attr_size);
    }
}

/// `--handshake-timeout`, `--send-timeout`, `--idle-timeout`.
#[derive(Debug, Args)]
struct TimeoutArgs {
    /// Seconds a client may take to finish the handshake, at least 1
    /// (default 30).
    #[arg(long, value_name = "SECS")]
    handshake_timeout: Option<u64>,
    /// Seconds one send of replies may take before a client that does
    /// not read them is disconnected; 0: never (default 60).
    #[arg(long, value_name = "SECS")]
    send_timeout: Option<u64>,
    /// Seconds a connection may have no request in flight and send nothing
    /// before it is closed; also how long a half-sent request may stall
    /// (without it: the send timeout). 0: never (default).
    #[arg(long, value_name = "SECS")]
    idle_timeout: Option<u64>,
}

impl TimeoutArgs {
    fn apply(self, timeouts: &mut Timeouts) {
        if let Some(s) = self.handshake_timeout {
            timeouts.handshake_timeout_secs = s;
        }
        if let Some(s) = self.send_timeout {
            timeouts.send_timeout_secs = s;
        }
        if let Some(s) = self.idle_timeout {
            timeouts.idle_timeout_secs = s;
        }
    }
}

/// `--spin-us`, `--coalesce-max`, `--coalesce-wait-us`.
#[derive(Debug, Args)]
struct ReceiveArgs {
    /// Microseconds a connection polls its socket before sleeping (0: off).
    #[arg(long, value_name = "US")]
    spin_us: Option<u64>,
    /// Most requests a connection lets pile up in its socket before it
    /// wakes (request coalescing; chosen per connection by measuring;
    /// 1: off; default 8).
    #[arg(long, value_name = "N")]
    coalesce_max: Option<u32>,
    /// Microseconds a connection waits for a batch of requests to fill
    /// (0: coalescing off; default 50).
    #[arg(long, value_name = "US")]
    coalesce_wait_us: Option<u64>,
}

impl ReceiveArgs {
    fn apply(self, receive: &mut ReceiveTuning) {
        if let Some(us) = self.spin_us {
            receive.spin_us = us;
        }
        if let Some(n) = self.coalesce_max {
            receive.coalesce_max = n;
        }
        if let Some(us) = self.coalesce_wait_us {
            receive.coalesce_wait_us = us;
        }
    }
}

/// `--pipelined-reads`, `--mapped-reads`, `--spliced-writes`.
#[derive(Debug, Args)]
struct FastPathArgs {
    /// Answer large reads piece by piece as parts become ready (true/false).
    #[arg(long, value_name = "BOOL")]
    pipelined_reads: Option<bool>,
    /// Send large page-cache reads of file exports and objects straight
    /// from the file, one copy instead of two (true/false).
    #[arg(long, value_name = "BOOL")]
    mapped_reads: Option<bool>,
    /// Splice the payload of large writes to file exports and objects from
    /// the socket into the file, one copy instead of two (true/false).
    #[arg(long, value_name = "BOOL")]
    spliced_writes: Option<bool>,
}

impl FastPathArgs {
    fn apply(self, fast_paths: &mut FastPaths) {
        if let Some(p) = self.pipelined_reads {
            fast_paths.pipelined_reads = p;
        }
        if let Some(m) = self.mapped_reads {
            fast_paths.mapped_reads = m;
        }
        if let Some(s) = self.spliced_writes {
            fast_paths.spliced_writes = s;
        }
    }
}

fn parse_tls_allow(arg: &str) -> Result<(String, sluice_server::TlsIdentity), String> {
    let (export, id) = arg
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=ID (e.g. disk=CN=client1), got {arg:?}"))?;
    let id = id.parse().map_err(|e| format!("{e}"))?;
    Ok((export.to_owned(), id))
}

/// An error in what the user asked for (exit code 2).
#[derive(Debug)]
struct UsageError(String);
impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UsageError {}

/// The key of serde's "unknown field `KEY`, expected ..." message.
fn unknown_key(message: &str) -> Option<&str> {
    message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(key, _)| key)
}

/// Where the line setting `key` begins its key, at or after `from`.
fn key_offset(text: &str, key: &str, from: usize) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start().len();
        let name = line
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"'));
        if offset >= from && name == Some(key) {
            return Some(offset + indent);
        }
        offset += line.len();
    }
    None
}

/// A TOML config error as a person reads it: where (line, column and the
/// key on that line) and what, in words rather than Rust type names.
fn config_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    let mut place = format!("config file {}", path.display());
    if let Some(span) = e.span() {
        // An unknown key's span is its whole table (line 1, column 1 at
        // the top level): point at the key itself.
        let start = unknown_key(e.message())
            .and_then(|key| key_offset(text, key, span.start))
            .unwrap_or(span.start);
        let before = &text[..start.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        place.push_str(&format!(", line {line}, column {column}"));
        let line_text = text[line_start..].lines().next().unwrap_or("");
        if let (true, Some((key, _))) = (
            e.message().starts_with("invalid"),
            line_text.split_once('='),
        ) {
            place.push_str(&format!(" ({})", key.trim()));
        }
    }
    let message = e.message().trim();
    // serde says "invalid type: string \"x\", expected usize".
    let message = match message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|m| m.rsplit_once(", expected "))
    {
        Some((found, expected)) => {
            let expected = match expected {
                "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number, 0 or more",
                "isize" | "i64" | "i32" | "i16" | "i8" => "a whole number",
                "f64" | "f32" => "a number",
                "a boolean" => "true or false",
                other => other,
            };
            format!("expected {expected}, found {found}")
        }
        None => message.to_owned(),
    };
    format!("{place}: {message}")
}

const DEFAULT_LISTEN: &str = "127.0.0.1:10809";
/// The default export's image, created at [`DEFAULT_SIZE`] when missing
/// and served at whatever size it has when it exists.
const DEFAULT_IMAGE: &str = "./sluice-data/default.img";
const DEFAULT_SIZE: &str = "1G";
const DEFAULT_OBJECT_LISTEN: &str = "127.0.0.1:10810";
const DEFAULT_OBJECTS: &str = "./sluice-data/objects";

/// Folder of the default export, created when missing.
const DEFAULT_DIR: &str = "sluice-data";

/// The config file's settings, or the defaults without one.
fn read_config_file(path: Option<&Path>) -> Result<ServerConfig> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read config file {}", path.display()))?;
            Ok(toml::from_str::<ServerConfig>(&text)
                .map_err(|e| UsageError(config_error(path, &text, &e)))?)
        }
        None => Ok(ServerConfig::default()),
    }
}

/// Where the server listens, when not where `--listen` says.
enum Listening<'a> {
    /// The default addresses (and objects beside NBD).
    Default,
    /// Captive mode (`--run`): Unix sockets in this private directory.
    Private(&'a Path),
    /// Sockets systemd passed; `objects` when some serve objects.
    Inherited { objects: bool },
}

/// The server's configuration, and whether this start created
/// [`DEFAULT_DIR`] (removed again if the start fails).
fn serve_config(args: ServeArgs, listening: &Listening<'_>) -> Result<(ServerConfig, bool)> {
    let mut config = read_config_file(args.config.as_deref())?;
    if !args.listen.is_empty() {
        config.listen = args.listen;
    }
    if config.listen.is_empty() {
        if let Listening::Private(dir) = listening {
            config
                .listen
                .push(ListenAddr::Unix(dir.join(service::PRIVATE_NBD_SOCKET)));
        }
    }
    config.export.extend(args.export);
    if let Some(p) = args.pipeline {
        config.pipeline = p;
    }
    if let Some(n) = args.io_threads {
        config.io_threads = n;
    }
    args.limits.apply(&mut config.limits);
    args.timeouts.apply(&mut config.timeouts);
    args.receive.apply(&mut config.receive);
    if let Some(c) = args.cache {
        config.cache = c;
    }
    if let Some(b) = args.cache_size {
        if config.cache == sluice_server::CachePolicy::None {
            return Err(UsageError(
                "--cache-size sizes a cache there is none of; add --cache writethrough or writeback"
                    .into(),
            )
            .into());
        }
        config.cache_size = b;
    }
    if let Some(b) = args.readahead_max {
        config.readahead_max = b;
    }
    args.fast_paths.apply(&mut config.fast_paths);
    if let Some(a) = args.metrics {
        config.metrics = Some(a);
    }
    if let Some(a) = args.admin {
        config.admin = Some(a);
    }
    if let Some(r) = args.rebuild_rate {
        config.rebuild_rate = r;
    }
    args.tls.apply(&mut config.tls);
    args.s3.apply(&mut config)?;
    // `sluice serve` without addresses serves objects beside NBD; one
    // given addresses (or sockets from systemd, or a private socket)
    // serves objects only when asked (--objects, --object-listen or
    // [objects], or a socket named objects), so it never binds a port it
    // was not told about.
    let defaulted_listen = config.listen.is_empty() && matches!(listening, Listening::Default);
    let inherited_objects = matches!(listening, Listening::Inherited { objects: true });
    if args.objects.is_some()
        || args.meta.is_some()
        || !args.object_listen.is_empty()
        || defaulted_listen
        || inherited_objects
    {
        let objects = config
            .objects
            .get_or_insert_with(|| ObjectConfig::new(DEFAULT_OBJECTS, Vec::new()));
        if let Some(dir) = args.objects {
            objects.dir = dir;
        }
        if !args.object_listen.is_empty() {
            objects.listen = args.object_listen;
        }
        if let Some(dir) = args.meta {
            objects.meta = Some(dir);
        }
    }
    match config.objects.as_mut() {
        Some(objects) => args.object_limits.apply(objects),
        None if args.object_limits.given() => {
            return Err(UsageError(
                "--object-max-* limits need objects to be served (--objects DIR)".into(),
            )
            .into())
        }
        None => {}
    }
    if let (Listening::Inherited { objects: false }, Some(_)) = (listening, &config.objects) {
        return Err(UsageError(format!(
            "objects are configured but systemd passed no socket named {:?} \
             (FileDescriptorName={0} in a socket unit)",
            sluice_server::service::OBJECTS_FD_NAME
        ))
        .into());
    }
    if let Some(objects) = config.objects.as_mut() {
        if let (true, Listening::Private(dir)) = (objects.listen.is_empty(), listening) {
            objects
                .listen
                .push(ListenAddr::Unix(dir.join(service::PRIVATE_OBJECT_SOCKET)));
        }
        if objects.listen.is_empty() {
            objects.listen.push(
                DEFAULT_OBJECT_LISTEN
                    .parse()
                    .map_err(|e| UsageError(format!("{e}")))?,
            );
        }
    }
    if config.listen.is_empty() {
        config.listen.push(
            DEFAULT_LISTEN
                .parse()
                .map_err(|e| UsageError(format!("{e}")))?,
        );
    }
    config.validate().map_err(|e| UsageError(e.to_string()))?;
    let created_dir = with_default_dir(&mut config, defaulted_listen)?;
    Ok((config, created_dir))
}

/// The default export when none is given, and sluice's own directory
/// (./sluice-data) when something of sluice's goes in it: the default
/// export or object store, or an admin socket where `sluice raid` looks
/// for one. Made before anything binds, so the socket finds it. Returns
/// whether the directory was created here.
fn with_default_dir(config: &mut ServerConfig, defaulted_listen: bool) -> Result<bool> {
    let created_dir = !Path::new(DEFAULT_DIR).exists();
    let in_default_dir = |p: &Path| {
        p.parent()
            .is_some_and(|d| d == Path::new(DEFAULT_DIR) || d == Path::new(".").join(DEFAULT_DIR))
    };
    let default_objects = config
        .objects
        .as_ref()
        .is_some_and(|o| o.dir == Path::new(DEFAULT_OBJECTS));
    let default_admin = matches!(&config.admin, Some(ListenAddr::Unix(p)) if in_default_dir(p));
    if default_objects || default_admin {
        std::fs::create_dir_all(DEFAULT_DIR)
            .with_context(|| format!("cannot create ./{DEFAULT_DIR}"))?;
    }
    if config.export.is_empty() {
        // No size was asked for: an image that exists (grown, say) is
        // served as it is, not refused for being larger than the default.
        let spec = if Path::new(DEFAULT_IMAGE).exists() {
            format!("default=file:{DEFAULT_IMAGE}")
        } else {
            format!("default=file:{DEFAULT_IMAGE},size={DEFAULT_SIZE}")
        };
        let default = ExportConfig::parse_arg(&spec).map_err(|e| UsageError(e.to_string()))?;
        std::fs::create_dir_all(DEFAULT_DIR)
            .with_context(|| format!("cannot create ./{DEFAULT_DIR} for the default export"))?;
        config.export.push(default);
        // The embedded default answers `sluice raid` where it looks first.
        if defaulted_listen && config.admin.is_none() {
            config.admin = Some(
                format!("unix:{}", raid_cmd::DEFAULT_ADMIN)
                    .parse()
                    .map_err(|e| UsageError(format!("{e}")))?,
            );
        }
    }
    Ok(created_dir && Path::new(DEFAULT_DIR).exists())
}

/// The default log filter without RUST_LOG. The bench's embedded server
/// runs in this process: its per-connection lines would land in the
/// bench's progress bars and tables, so under `bench` the server's
/// layers log warnings only.
fn default_log_filter(command: &Command) -> &'static str {
    match command {
        Command::Bench(_) => {
            "info,sluice_server=warn,sluice_storage=warn,sluice_volume=warn,sluice_raid=warn"
        }
        // s3s logs every refused S3 request (a bad signature, a missing
        // key) at ERROR; the S3 endpoint's access log has them, at info.
        Command::Serve(_) => "info,s3s=off",
        _ => "info",
    }
}

/// Log lines on stderr, as text or JSON, written by a background thread
/// that counts and drops what it cannot write (see `sluice_server::log`):
/// logging never stops or fails a serving thread. Keep the guard until
/// the process ends; dropping it writes out the queued lines.
fn init_logging(
    format: LogFormat,
    level: Option<&str>,
    command: &Command,
) -> tracing_appender::non_blocking::WorkerGuard {
    let filter = match level {
        // Checked when the arguments were parsed.
        Some(level) => tracing_subscriber::EnvFilter::new(level),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_filter(command))),
    };
    let (writer, guard) = sluice_server::log::stderr_writer();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_current_span(true).init(),
    }
    guard
}

fn main() -> ExitCode {
    let cli: Cli = usage::parse();
    // A server's stdout closing must not stop it.
    if !matches!(cli.command, Command::Serve(_)) {
        pipe::quiet_on_closed_stdout();
    }
    let log = init_logging(cli.log_format, cli.log_level.as_deref(), &cli.command);
    let subcommand = match cli.command {
        Command::Serve(_) => "serve",
        Command::Bench(_) => "bench",
        Command::Model(_) => "model",
        Command::Obj(_) => "obj",
        Command::Meta(_) => "meta",
        Command::Raid(_) => "raid",
        Command::Generate(_) => "generate",
    };
    let mut code = ExitCode::SUCCESS;
    let result = match cli.command {
        Command::Serve(args) => service::serve(*args).map(|c| code = c),
        Command::Bench(args) => bench_cmd::run(*args),
        Command::Model(args) => model_cmd::run(args),
        // Reports its own failures (one line, exit 1 or 2).
        Command::Obj(args) => return obj_cmd::run(args),
        Command::Meta(args) => meta_cmd::run(args),
        Command::Raid(args) => raid_cmd::run(args),
        Command::Generate(args) => generate_cmd::run(args, Cli::command()),
    };
    // The queued log lines go out first, so that the error line below
    // is the last thing on stderr.
    drop(log);
    match result {
        Ok(()) => code,
        Err(e) => {
            let usage = e.downcast_ref::<UsageError>().is_some()
                || model_cmd::is_usage_error(&e)
                || sluice_lab::is_usage_error(&e);
            // `{:#}`: each error of the chain once, joined by ": ". A
            // closed stderr loses the line; the exit status still tells.
            let mut stderr = std::io::stderr().lock();
            if usage {
                let line = usage::with_help_hint(&format!("{e:#}"), subcommand);
                let _ = writeln!(stderr, "sluice: error: {line}");
                ExitCode::from(2)
            } else {
                let _ = writeln!(stderr, "sluice: error: {e:#}");
                ExitCode::FAILURE
            }
        }
    }
}
