//! Server configuration: what `--export`, `--listen` and the TOML file say.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use sluice_volume::VolumeSpec;
use thiserror::Error;

mod s3;
mod tls;
pub use s3::S3Config;
pub use tls::{TlsConfig, TlsIdentity, TlsMode};

/// A configuration value that cannot be used, saying which and why.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    #[error(transparent)]
    BadValue(#[from] sluice_types::ParseError),
    #[error(transparent)]
    BadExportSpec(#[from] sluice_volume::SpecError),
    #[error("the admin socket must be a local unix:PATH, not {0}")]
    AdminNotUnix(String),
    #[error("bad export {arg:?}: expected NAME=SPEC")]
    BadExportArg { arg: String },
    #[error("bad listen address {addr:?}: {reason} (expected HOST:PORT or unix:PATH)")]
    BadListenAddr { addr: String, reason: String },
    #[error("bad pipeline mode {0:?}: expected off, fixed or flexible")]
    BadPipelineMode(String),
    #[error("bad cache policy {0:?}: expected none, writethrough or writeback")]
    BadCachePolicy(String),
    #[error("export name {0:?} is used twice")]
    DuplicateExport(String),
    #[error("listen address {0} is given twice; each --listen and --object-listen needs its own")]
    DuplicateListen(String),
    #[error("export name {name:?} is invalid: {reason}")]
    BadExportName { name: String, reason: &'static str },
    #[error("bad TLS mode {0:?}: expected off, on or require")]
    BadTlsMode(String),
    #[error("bad TLS client identity {value:?}: {reason} (expected CN=NAME, DNS=NAME, IP=ADDR, EMAIL=ADDR or URI=URI)")]
    BadTlsIdentity { value: String, reason: &'static str },
    #[error("TLS settings do not fit together: {0}")]
    Tls(&'static str),
    #[error("TLS allow-list for export {0:?}, which does not exist")]
    TlsAllowUnknownExport(String),
    #[error("TLS allow-list for partition {0:?}: a partition is a number (decimal or 0x hex)")]
    BadPartitionName(String),
    #[error("object listeners are configured but no object store directory ([objects] dir, --objects DIR)")]
    NoObjectDir,
    #[error("maximum request size of {0} bytes: it must be between 4 KiB and 4 GiB - 1 (NBD advertises it in 32 bits)")]
    BadMaxRequestSize(u64),
    #[error("[objects] {name} of {value}: it must be between {min} and {max}")]
    BadObjectLimit {
        name: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("handshake timeout of 0 s: a handshake must have a limit (at least 1 s), or silent clients hold connection slots forever")]
    ZeroHandshakeTimeout,
}

/// Parses a byte size, reporting a bad one as a configuration error.
pub fn parse_size(value: &str) -> Result<u64, ConfigError> {
    sluice_types::parse_size(value).map_err(ConfigError::from)
}

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address (port 0 picks a free port).
    Tcp(SocketAddr),
    /// A Unix-domain socket path.
    Unix(PathBuf),
}

impl FromStr for ListenAddr {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(ConfigError::BadListenAddr {
                    addr: s.to_owned(),
                    reason: "empty socket path".into(),
                });
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        let bad = |reason: String| ConfigError::BadListenAddr {
            addr: s.to_owned(),
            reason,
        };
        let mut addrs = s.to_socket_addrs().map_err(|e| bad(e.to_string()))?;
        addrs
            .next()
            .map(Self::Tcp)
            .ok_or_else(|| bad("resolves to no address".into()))
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(a) => write!(f, "{a}"),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Reads an export's spec as the `SPEC` of `--export NAME=SPEC`.
fn deserialize_spec<'de, D: Deserializer<'de>>(d: D) -> Result<VolumeSpec, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(serde::de::Error::custom)
}

/// One export.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// Name clients ask for.
    pub name: String,
    /// Device stack, as in `--export NAME=SPEC`.
    #[serde(deserialize_with = "deserialize_spec")]
    pub spec: VolumeSpec,
    /// Description shown by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    #[serde(default)]
    pub description: String,
}

impl ExportConfig {
    /// Parses `NAME=SPEC`.
    pub fn parse_arg(arg: &str) -> Result<Self, ConfigError> {
        let (name, spec) = arg
            .split_once('=')
            .ok_or_else(|| ConfigError::BadExportArg {
                arg: arg.to_owned(),
            })?;
        let config = Self {
            name: name.to_owned(),
            spec: spec.parse()?,
            description: String::new(),
        };
        config.check_name()?;
        Ok(config)
    }

    fn check_name(&self) -> Result<(), ConfigError> {
        let bad = |reason| ConfigError::BadExportName {
            name: self.name.clone(),
            reason,
        };
        if self.name.is_empty() {
            return Err(bad(
                "empty (the empty name already means the default export)",
            ));
        }
        if self.name.len() > 4096 {
            return Err(bad("longer than 4096 bytes"));
        }
        if self.name.contains('\0') {
            return Err(bad("contains NUL"));
        }
        Ok(())
    }
}

/// How a connection orders and overlaps request processing (the pipelining modes of "Pipelining Network Storage I/O").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PipelineMode {
    /// One request at a time: read, execute, reply, then the next.
    Off,
    /// Requests overlap, replies go out in request order.
    Fixed,
    /// Requests overlap, replies go out as they complete.
    #[default]
    Flexible,
}

impl FromStr for PipelineMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "fixed" => Ok(Self::Fixed),
            "flexible" => Ok(Self::Flexible),
            _ => Err(ConfigError::BadPipelineMode(s.to_owned())),
        }
    }
}

impl<'de> Deserialize<'de> for PipelineMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The buffer cache in front of each export (write-back and read-ahead as in the SuperNBD paper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CachePolicy {
    /// No cache layer: requests go straight to the device (and, for
    /// buffered files, the kernel's page cache).
    #[default]
    None,
    /// Reads cached with read-ahead; writes reach the device before they
    /// are acknowledged.
    WriteThrough,
    /// Writes acknowledged once cached, written back in the background;
    /// FLUSH and FUA write back and sync before they are acknowledged.
    WriteBack,
}

impl FromStr for CachePolicy {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "writethrough" => Ok(Self::WriteThrough),
            "writeback" => Ok(Self::WriteBack),
            _ => Err(ConfigError::BadCachePolicy(s.to_owned())),
        }
    }
}

impl<'de> Deserialize<'de> for CachePolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The partition clients select when they name none, created at
/// startup if missing.
pub const DEFAULT_PARTITION: u64 = 1;

/// The object store and its listeners (`[objects]` in the TOML file,
/// `--objects DIR` and `--object-listen ADDR`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectConfig {
    /// The store's directory (created if missing).
    pub dir: PathBuf,
    /// Addresses speaking the native object protocol.
    #[serde(default)]
    pub listen: Vec<ListenAddr>,
    /// Partitions created at startup if missing (besides
    /// [`DEFAULT_PARTITION`], which always is).
    #[serde(default)]
    pub partitions: Vec<u64>,
    /// Per partition (its id, decimal or `0x` hex), the client identities
    /// allowed to select it: a listed partition is TLS-only and refused
    /// to every other client, as `[tls.allow]` does for exports. Uses the
    /// server's `[tls]` credentials.
    #[serde(default)]
    pub allow: BTreeMap<String, Vec<TlsIdentity>>,
    /// Also serve the metadata service of striped objects, kept in this
    /// directory (SQLite), to `META` requests on the object listeners.
    #[serde(default)]
    pub meta: Option<PathBuf>,
    /// Most segments one scatter/gather or strided request lists (and
    /// most objects one CREATE makes, most entries one LIST or QUERY
    /// page holds): 1 to 65,536, default 4,096. This and the three
    /// below are published in the handshake and enforced; clients split
    /// what is larger.
    #[serde(default)]
    pub max_segments: Option<u32>,
    /// Most payload bytes after one request header (batch frames
    /// included), and so most data bytes one request moves: 4 KiB to
    /// 1 GiB, default 32 MiB.
    #[serde(default)]
    pub max_payload: Option<ByteSize>,
    /// Most members in one batch frame: 1 to 65,536, default 256.
    #[serde(default)]
    pub max_batch: Option<u32>,
    /// Most bytes of one attribute value: 1 to 64 KiB (the store's own
    /// limit), default 64 KiB.
    #[serde(default)]
    pub max_attr_size: Option<ByteSize>,
}

/// The range each published object limit may take: (name as in the
/// TOML file, least, most).
const OBJECT_LIMITS: [(&str, u64, u64); 4] = [
    ("max_segments", 1, 65536),
    ("max_payload", 4096, 1 << 30),
    ("max_batch", 1, 65536),
    ("max_attr_size", 1, 64 << 10),
];

impl ObjectConfig {
    /// A store in `dir` listening on `listen`.
    pub fn new(dir: impl Into<PathBuf>, listen: Vec<ListenAddr>) -> Self {
        Self {
            dir: dir.into(),
            listen,
            partitions: Vec::new(),
            allow: BTreeMap::new(),
            meta: None,
            max_segments: None,
            max_payload: None,
            max_batch: None,
            max_attr_size: None,
        }
    }

    /// The limits the object handshake publishes: the configured ones
    /// (checked against their ranges), the protocol's defaults for the
    /// rest.
    pub fn published_limits(&self) -> Result<sluice_obj_proto::Limits, ConfigError> {
        let d = sluice_obj_proto::Limits::default();
        let given = [
            self.max_segments.map(u64::from),
            self.max_payload.map(|b| b.0),
            self.max_batch.map(u64::from),
            self.max_attr_size.map(|b| b.0),
        ];
        let defaults = [d.max_segments, d.max_payload, d.max_batch, d.max_attr_size];
        let mut out = [0u32; 4];
        for (i, &(name, min, max)) in OBJECT_LIMITS.iter().enumerate() {
            let value = given[i].unwrap_or(u64::from(defaults[i]));
            out[i] = match u32::try_from(value) {
                Ok(v) if (min..=max).contains(&value) => v,
                _ => {
                    return Err(ConfigError::BadObjectLimit {
                        name,
                        value,
                        min,
                        max,
                    })
                }
            };
        }
        Ok(sluice_obj_proto::Limits {
            max_segments: out[0],
            max_payload: out[1],
            max_batch: out[2],
            max_attr_size: out[3],
        })
    }

    /// The per-partition allow-lists keyed by partition id.
    pub fn partition_allow(&self) -> Result<BTreeMap<u64, Vec<TlsIdentity>>, ConfigError> {
        self.allow
            .iter()
            .map(|(k, v)| Ok((parse_partition(k)?, v.clone())))
            .collect()
    }
}

/// A partition id written in decimal or `0x` hex.
pub fn parse_partition(s: &str) -> Result<u64, ConfigError> {
    let bad = || ConfigError::BadPartitionName(s.to_owned());
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).map_err(|_| bad()),
        None => s.parse().map_err(|_| bad()),
    }
}

/// A byte count written as a number or a string with a K/M/G/T suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_size(s).map(Self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(Self(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// How long the server waits for a client (`--*-timeout`). The fields
/// are top-level keys of the TOML file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Timeouts {
    /// Seconds a client may take to finish the handshake (at least 1).
    pub handshake_timeout_secs: u64,
    /// Seconds one send of replies may take (a client that does not read,
    /// or reads a trickle) before the connection is closed; 0: wait
    /// forever. A request received only in part also gets this long for
    /// its next bytes when no idle timeout is set.
    pub send_timeout_secs: u64,
    /// Seconds a connection in transmission may have no request in flight
    /// and receive nothing before it is closed; 0: never. Also how long a
    /// request received only in part may wait for its next bytes.
    pub idle_timeout_secs: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            handshake_timeout_secs: 30,
            send_timeout_secs: 60,
            idle_timeout_secs: 0,
        }
    }
}

impl Timeouts {
    /// The handshake timeout as a duration.
    pub fn handshake(&self) -> Duration {
        Duration::from_secs(self.handshake_timeout_secs.max(1))
    }

    /// The send timeout, if any.
    pub fn send(&self) -> Option<Duration> {
        (self.send_timeout_secs > 0).then(|| Duration::from_secs(self.send_timeout_secs))
    }

    /// The idle timeout, if any.
    pub fn idle(&self) -> Option<Duration> {
        (self.idle_timeout_secs > 0).then(|| Duration::from_secs(self.idle_timeout_secs))
    }

    /// How long a request whose first bytes arrived may wait for the
    /// next: the idle timeout, or without one the send timeout (a peer
    /// that stops halfway through a transfer, in either direction).
    pub fn stall(&self) -> Option<Duration> {
        self.idle().or(self.send())
    }
}

/// How a connection waits for requests before sleeping: polling and
/// coalescing (`--spin-us`, `--coalesce-*`). See
/// docs/design/0001-threading-model.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ReceiveTuning {
    /// Microseconds a connection thread polls its socket before blocking
    /// (0 disables polling).
    pub spin_us: u64,
    /// Largest number of requests a connection lets pile up in its socket
    /// before waking (1 disables coalescing). The size in force is chosen
    /// per connection by measuring; see `coalesce.rs`.
    pub coalesce_max: u32,
    /// Microseconds a connection waits for a batch of requests to fill
    /// before serving what has arrived (0 disables coalescing).
    pub coalesce_wait_us: u64,
}

impl Default for ReceiveTuning {
    fn default() -> Self {
        Self {
            spin_us: 40,
            coalesce_max: 8,
            coalesce_wait_us: 50,
        }
    }
}

impl ReceiveTuning {
    /// The poll window before blocking on a receive (zero: never poll).
    pub fn spin(&self) -> Duration {
        Duration::from_micros(self.spin_us)
    }

    /// The longest wait for a batch of requests to fill.
    pub fn coalesce_wait(&self) -> Duration {
        Duration::from_micros(self.coalesce_wait_us)
    }
}

/// The data path's shortcuts (`--pipelined-reads`, `--mapped-reads`,
/// `--spliced-writes`), each on by default; the last two apply to object
/// files as to file exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct FastPaths {
    /// Answer reads over 256 KiB that miss memory piece by piece, each
    /// piece sent as soon as it is read (structured replies only).
    pub pipelined_reads: bool,
    /// Send reads of 128 KiB or more that are in the page cache straight
    /// from a shared mapping of the file (one copy instead of two;
    /// buffered file exports without TLS, `pipeline = "flexible"`), and
    /// large plain object reads from the object's file (`sendfile`, or a
    /// mapping for a list).
    pub mapped_reads: bool,
    /// Receive the payload of writes of 128 KiB or more into a pipe and
    /// splice it into the file (one copy instead of two; buffered file
    /// exports and object files, without TLS, `pipeline = "flexible"`,
    /// no FUA).
    pub spliced_writes: bool,
}

impl Default for FastPaths {
    fn default() -> Self {
        Self {
            pipelined_reads: true,
            mapped_reads: true,
            spliced_writes: true,
        }
    }
}

/// What one client, or all of them, may hold of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Most connections served at once; more are refused.
    pub max_connections: usize,
    /// Most bytes of handed-off requests in flight per connection before
    /// the connection stops reading (back-pressure).
    pub max_inflight_bytes_per_connection: u64,
    /// Largest read or write payload accepted, advertised to clients as
    /// the maximum block size. 64 MiB by default: clients that never ask
    /// for the limits (old ones, and test suites with requests up to about
    /// 48 MiB) send more than the 32 MiB the NBD spec suggests, and other
    /// servers accept them. Writes larger than the in-flight limit are
    /// received into the device in pieces, so memory stays bounded.
    pub max_request_size: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_inflight_bytes_per_connection: 64 << 20,
            max_request_size: 64 << 20,
        }
    }
}

impl Limits {
    /// [`max_request_size`](Self::max_request_size) as NBD's 32-bit
    /// maximum payload (checked by [`ServerConfig::validate`]).
    pub fn max_payload(&self) -> u32 {
        u32::try_from(self.max_request_size).unwrap_or(u32::MAX)
    }
}

/// Everything the server needs to run. The groups are flattened: the
/// TOML file names their fields at the top level.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Listening addresses.
    pub listen: Vec<ListenAddr>,
    /// Exports; the one named `default`, else the first, is the default.
    pub export: Vec<ExportConfig>,
    /// Request pipelining.
    pub pipeline: PipelineMode,
    /// Threads that run device I/O which would block a connection thread.
    pub io_threads: usize,
    /// Handshake, send and idle timeouts.
    #[serde(flatten)]
    pub timeouts: Timeouts,
    /// Connection and in-flight limits.
    #[serde(flatten)]
    pub limits: Limits,
    /// Where to serve Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics: Option<SocketAddr>,
    /// Polling and coalescing before a connection sleeps.
    #[serde(flatten)]
    pub receive: ReceiveTuning,
    /// Buffer cache policy for every export.
    pub cache: CachePolicy,
    /// Bytes of cache per export.
    pub cache_size: ByteSize,
    /// Largest read-ahead window (0 disables read-ahead).
    pub readahead_max: ByteSize,
    /// NBD pipelined reads, mapped reads and spliced writes.
    #[serde(flatten)]
    pub fast_paths: FastPaths,
    /// TLS (STARTTLS), client certificates and per-export allow-lists.
    pub tls: TlsConfig,
    /// The object store served over the native protocol, if any.
    pub objects: Option<ObjectConfig>,
    /// The admin socket (`unix:PATH`) `sluice raid status|replace|scrub`
    /// talk to, if any.
    pub admin: Option<ListenAddr>,
    /// Bytes per second a RAID rebuild writes (and a scrub reads per
    /// member) at most; 0 for no limit.
    pub rebuild_rate: ByteSize,
    /// The S3 endpoint the binary runs beside the server, if any.
    pub s3: Option<S3Config>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: Vec::new(),
            export: Vec::new(),
            pipeline: PipelineMode::Flexible,
            io_threads: 16,
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            metrics: None,
            receive: ReceiveTuning::default(),
            cache: CachePolicy::None,
            cache_size: ByteSize(256 << 20),
            readahead_max: ByteSize(4 << 20),
            fast_paths: FastPaths::default(),
            tls: TlsConfig::default(),
            objects: None,
            admin: None,
            rebuild_rate: ByteSize(sluice_raid::DEFAULT_REBUILD_RATE),
            s3: None,
        }
    }
}

impl ServerConfig {
    /// Checks names are valid and unique, and limits are usable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(ListenAddr::Tcp(a)) = &self.admin {
            return Err(ConfigError::AdminNotUnix(a.to_string()));
        }
        if self.timeouts.handshake_timeout_secs == 0 {
            return Err(ConfigError::ZeroHandshakeTimeout);
        }
        let max = self.limits.max_request_size;
        if !(4096..=u64::from(u32::MAX)).contains(&max) {
            return Err(ConfigError::BadMaxRequestSize(max));
        }
        let mut seen = std::collections::HashSet::new();
        for e in &self.export {
            e.check_name()?;
            if !seen.insert(e.name.as_str()) {
                return Err(ConfigError::DuplicateExport(e.name.clone()));
            }
        }
        self.tls.validate()?;
        let object_listen = self.objects.iter().flat_map(|o| o.listen.iter());
        let mut bound: Vec<&ListenAddr> = Vec::new();
        for addr in self.listen.iter().chain(object_listen) {
            // Port 0 picks a free port each time.
            let any_port = matches!(addr, ListenAddr::Tcp(a) if a.port() == 0);
            if !any_port && bound.contains(&addr) {
                return Err(ConfigError::DuplicateListen(addr.to_string()));
            }
            bound.push(addr);
        }
        if let Some(objects) = &self.objects {
            objects.published_limits()?;
            let allow = objects.partition_allow()?;
            if !allow.is_empty() && !self.tls.verify_peer {
                return Err(ConfigError::Tls(
                    "partition allow-lists need verified client certificates (--tls-verify-peer)",
                ));
            }
        }
        if !self.export.is_empty() {
            if let Some(name) = self.tls.allow.keys().find(|n| !seen.contains(n.as_str())) {
                return Err(ConfigError::TlsAllowUnknownExport(name.clone()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_limits_come_from_objects_and_are_checked() {
        let c: ServerConfig = toml::from_str(
            "[objects]\ndir = \"d\"\nmax_segments = 16\nmax_payload = \"1M\"\nmax_batch = 8\nmax_attr_size = \"1K\"",
        )
        .unwrap();
        c.validate().unwrap();
        let l = c.objects.as_ref().unwrap().published_limits().unwrap();
        assert_eq!(
            (l.max_segments, l.max_payload, l.max_batch, l.max_attr_size),
            (16, 1 << 20, 8, 1024)
        );
        // Unset: the protocol's defaults.
        let d = ObjectConfig::new("d", Vec::new())
            .published_limits()
            .unwrap();
        assert_eq!(d, sluice_obj_proto::Limits::default());
        type Case = (&'static str, fn(&mut ObjectConfig));
        let cases: [Case; 6] = [
            ("max_segments", |o| o.max_segments = Some(0)),
            ("max_segments", |o| o.max_segments = Some(65537)),
            ("max_payload", |o| o.max_payload = Some(ByteSize(4095))),
            ("max_payload", |o| o.max_payload = Some(ByteSize(1 << 40))),
            ("max_batch", |o| o.max_batch = Some(0)),
            ("max_attr_size", |o| o.max_attr_size = Some(ByteSize(65537))),
        ];
        for (name, set) in cases {
            let mut c = c.clone();
            set(c.objects.as_mut().unwrap());
            match c.validate() {
                Err(ConfigError::BadObjectLimit { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_max_request_size_must_fit_nbd() {
        let mut c = ServerConfig::default();
        assert_eq!(c.limits.max_payload(), 64 << 20);
        for bad in [0, 4095, 1 << 32] {
            c.limits.max_request_size = bad;
            let e = c.validate().unwrap_err();
            assert_eq!(e, ConfigError::BadMaxRequestSize(bad));
        }
        c.limits.max_request_size = u64::from(u32::MAX);
        c.validate().unwrap();
    }

    #[test]
    fn a_zero_handshake_timeout_is_refused() {
        let mut c = ServerConfig::default();
        assert!(c.validate().is_ok());
        c.timeouts.handshake_timeout_secs = 0;
        let e = c.validate().unwrap_err();
        assert!(matches!(e, ConfigError::ZeroHandshakeTimeout));
        assert!(e.to_string().contains("handshake timeout of 0 s"), "{e}");
    }

    #[test]
    fn export_args() {
        let e = ExportConfig::parse_arg("disk=file:/tmp/a.img,size=1G,ro").unwrap();
        assert_eq!(e.name, "disk");
        assert!(e.spec.read_only);
        let m = ExportConfig::parse_arg("m=mem:64M").unwrap();
        assert_eq!(m.spec, "mem:64M".parse().unwrap());
        let e = ExportConfig::parse_arg("x=tape:/dev/st0").unwrap_err();
        assert!(matches!(e, ConfigError::BadExportSpec(_)), "{e:?}");
        assert!(e.to_string().contains("unknown backend \"tape\""), "{e}");
        assert!(matches!(
            ExportConfig::parse_arg("noequals"),
            Err(ConfigError::BadExportArg { .. })
        ));
        assert!(matches!(
            ExportConfig::parse_arg("=mem:1M"),
            Err(ConfigError::BadExportName { .. })
        ));
        let c: ServerConfig =
            toml::from_str("[[export]]\nname = \"a\"\nspec = \"mem:1M,power-loss=4\"").unwrap();
        assert_eq!(c.export[0].spec.power_loss_seed(), Some(4));
        let e = toml::from_str::<ServerConfig>("[[export]]\nname = \"a\"\nspec = \"mem:x\"")
            .unwrap_err();
        assert!(e.to_string().contains("bad size \"x\""), "{e}");
    }

    #[test]
    fn listen_addrs() {
        assert_eq!(
            "unix:/tmp/s".parse::<ListenAddr>().unwrap(),
            ListenAddr::Unix("/tmp/s".into())
        );
        assert!(matches!(
            "127.0.0.1:0".parse::<ListenAddr>().unwrap(),
            ListenAddr::Tcp(_)
        ));
        assert!("nonsense".parse::<ListenAddr>().is_err());
    }

    #[test]
    fn toml_config() {
        let c: ServerConfig = toml::from_str(
            r#"
            listen = ["127.0.0.1:10809", "unix:/run/sluice.sock"]
            pipeline = "fixed"
            [[export]]
            name = "a"
            spec = "mem:1M"
            description = "scratch"
            "#,
        )
        .unwrap();
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.pipeline, PipelineMode::Fixed);
        assert_eq!(c.export[0].description, "scratch");
        assert_eq!(c.io_threads, 16);
        assert_eq!(c.cache, CachePolicy::None);
        let c: ServerConfig =
            toml::from_str("cache = \"writeback\"\ncache_size = \"64M\"\nreadahead_max = 0")
                .unwrap();
        assert_eq!(
            (c.cache, c.cache_size, c.readahead_max),
            (CachePolicy::WriteBack, ByteSize(64 << 20), ByteSize(0))
        );
        assert!(toml::from_str::<ServerConfig>("cache = \"sometimes\"").is_err());
        assert!(toml::from_str::<ServerConfig>("bogus = 1").is_err());
    }

    #[test]
    fn admin_socket_and_rebuild_rate_from_toml() {
        let c: ServerConfig =
            toml::from_str("admin = \"unix:/run/sluice/admin.sock\"\nrebuild_rate = \"50M\"")
                .unwrap();
        assert_eq!(
            c.admin,
            Some(ListenAddr::Unix(PathBuf::from("/run/sluice/admin.sock")))
        );
        assert_eq!(c.rebuild_rate, ByteSize(50 << 20));
        assert_eq!(
            ServerConfig::default().rebuild_rate,
            ByteSize(sluice_raid::DEFAULT_REBUILD_RATE)
        );
        let c: ServerConfig = toml::from_str("admin = \"127.0.0.1:9000\"").unwrap();
        let e = c.validate().expect_err("a TCP admin socket");
        assert!(e.to_string().contains("must be a local unix:PATH"), "{e}");
    }

    #[test]
    fn grouped_settings_keep_their_top_level_toml_keys() {
        let c: ServerConfig = toml::from_str(
            r#"
            handshake_timeout_secs = 5
            send_timeout_secs = 6
            idle_timeout_secs = 7
            max_connections = 8
            max_inflight_bytes_per_connection = 9
            max_request_size = 100000
            spin_us = 10
            coalesce_max = 11
            coalesce_wait_us = 12
            pipelined_reads = false
            mapped_reads = false
            spliced_writes = false
            io_threads = 3
            "#,
        )
        .unwrap();
        assert_eq!(
            c.timeouts,
            Timeouts {
                handshake_timeout_secs: 5,
                send_timeout_secs: 6,
                idle_timeout_secs: 7,
            }
        );
        assert_eq!(
            c.limits,
            Limits {
                max_connections: 8,
                max_inflight_bytes_per_connection: 9,
                max_request_size: 100000,
            }
        );
        assert_eq!(
            c.receive,
            ReceiveTuning {
                spin_us: 10,
                coalesce_max: 11,
                coalesce_wait_us: 12,
            }
        );
        assert_eq!(
            c.fast_paths,
            FastPaths {
                pipelined_reads: false,
                mapped_reads: false,
                spliced_writes: false,
            }
        );
        assert_eq!(c.io_threads, 3);
        // Keys left out keep their defaults, group by group.
        let c: ServerConfig = toml::from_str("send_timeout_secs = 1").unwrap();
        assert_eq!(c.timeouts.handshake_timeout_secs, 30);
        assert_eq!(c.receive, ReceiveTuning::default());
        // Unknown keys and bad values are still refused.
        assert!(toml::from_str::<ServerConfig>("spin = 1").is_err());
        assert!(toml::from_str::<ServerConfig>("spin_us = \"soon\"").is_err());
        assert!(toml::from_str::<ServerConfig>("[timeouts]\nsend_timeout_secs = 1").is_err());
    }

    #[test]
    fn object_config() {
        let c: ServerConfig = toml::from_str(
            r#"
            [objects]
            dir = "/var/lib/sluice/objects"
            listen = ["127.0.0.1:10810", "unix:/run/sluice-obj.sock"]
            partitions = [2, 3]
            [objects.allow]
            "0x2" = ["CN=client1"]
            "#,
        )
        .unwrap();
        let o = c.objects.as_ref().unwrap();
        assert_eq!(o.dir, PathBuf::from("/var/lib/sluice/objects"));
        assert_eq!(o.listen.len(), 2);
        assert_eq!(o.partitions, vec![2, 3]);
        assert_eq!(
            o.partition_allow().unwrap()[&2],
            vec![TlsIdentity::CommonName("client1".into())]
        );
        // An allow-list needs verified client certificates.
        assert!(matches!(c.validate(), Err(ConfigError::Tls(_))));
        let mut bad = c.clone();
        bad.objects
            .as_mut()
            .unwrap()
            .allow
            .insert("two".into(), vec![]);
        assert_eq!(
            bad.objects.unwrap().partition_allow(),
            Err(ConfigError::BadPartitionName("two".into()))
        );
        assert!(toml::from_str::<ServerConfig>("[objects]\nlisten = []").is_err());
        assert!(toml::from_str::<ServerConfig>("[objects]\ndir = \"d\"\nbogus = 1").is_err());
        assert_eq!(parse_partition("16").unwrap(), 16);
        assert_eq!(parse_partition("0x10").unwrap(), 16);
    }

    #[test]
    fn tls_config() {
        let c: ServerConfig = toml::from_str(
            r#"
            [[export]]
            name = "secret"
            spec = "mem:1M"
            [tls]
            mode = "require"
            certificates = "/etc/sluice/pki"
            verify_peer = true
            [tls.allow]
            secret = ["CN=client1", "dns=backup.example", "IP=127.0.0.1"]
            "#,
        )
        .unwrap();
        assert_eq!(c.tls.mode, TlsMode::Require);
        assert_eq!(
            c.tls.allow["secret"],
            vec![
                TlsIdentity::CommonName("client1".into()),
                TlsIdentity::Dns("backup.example".into()),
                TlsIdentity::Ip("127.0.0.1".parse().unwrap()),
            ]
        );
        c.validate().unwrap();
        let mut bad = c.clone();
        bad.tls.allow.insert("nope".into(), vec![]);
        assert_eq!(
            bad.validate(),
            Err(ConfigError::TlsAllowUnknownExport("nope".into()))
        );
        let mut bad = c.clone();
        bad.tls.verify_peer = false;
        assert!(bad.validate().is_err(), "allow-list without verify_peer");
        let mut bad = c.clone();
        bad.tls.certificates = None;
        assert!(bad.validate().is_err(), "TLS without certificates");
        let mut bad = c;
        bad.tls.mode = TlsMode::Off;
        assert!(bad.validate().is_err(), "certificates with TLS off");
        assert!(toml::from_str::<ServerConfig>("[tls]\nmode = \"maybe\"").is_err());
        assert!("CN".parse::<TlsIdentity>().is_err());
        assert!("CN=".parse::<TlsIdentity>().is_err());
        assert!("IP=host".parse::<TlsIdentity>().is_err());
        assert!("OU=x".parse::<TlsIdentity>().is_err());
    }
}
