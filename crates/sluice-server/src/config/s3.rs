//! `[s3]`: the S3 endpoint `sluice serve` runs beside its other
//! listeners. The server itself does not serve it (the binary starts the
//! `sluice-s3` crate's endpoint); these are its settings as the config
//! file spells them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::ByteSize;

/// The S3 endpoint's settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// Where it listens (HOST:PORT).
    pub listen: SocketAddr,
    /// A file of access keys, one `ACCESS_KEY_ID SECRET_ACCESS_KEY` pair
    /// a line (keep it mode 0600).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Access keys in the config file itself: `ACCESS_KEY_ID = "SECRET"`.
    #[serde(default)]
    pub keys: BTreeMap<String, String>,
    /// The metadata service, as a URI `sluice meta --meta` takes; without
    /// it, the one this server serves (`[objects] meta`).
    #[serde(default)]
    pub meta: Option<String>,
    /// Bytes per stripe unit of new objects (default 1M).
    #[serde(default)]
    pub stripe_unit: Option<ByteSize>,
    /// Object servers each new object spans (default: all).
    #[serde(default)]
    pub stripe_count: Option<usize>,
    /// Virtual-host-style addressing: `BUCKET.DOMAIN` names a bucket
    /// (path-style requests are served too).
    #[serde(default)]
    pub domain: Option<String>,
}

impl S3Config {
    /// The endpoint on `listen`, everything else as default.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            key_file: None,
            keys: BTreeMap::new(),
            meta: None,
            stripe_unit: None,
            stripe_count: None,
            domain: None,
        }
    }
}
