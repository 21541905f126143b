//! The TLS part of the configuration: whether TLS is offered, the
//! certificate directory, and which client identities are allowed.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};

use super::ConfigError;

/// Whether the server offers TLS (NBD STARTTLS). The names follow
/// nbdkit's `--tls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: STARTTLS is refused (the spec's NOTLS mode).
    #[default]
    Off,
    /// TLS offered; plaintext clients are served too, except exports with
    /// an allow-list (SELECTIVETLS).
    On,
    /// TLS required before any option but STARTTLS and ABORT is answered
    /// (FORCEDTLS): no export name, size or data goes out in plaintext.
    Require,
}

impl FromStr for TlsMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "on" => Ok(Self::On),
            "require" => Ok(Self::Require),
            _ => Err(ConfigError::BadTlsMode(s.to_owned())),
        }
    }
}

impl<'de> Deserialize<'de> for TlsMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One client identity on an export's allow-list, matched against the
/// verified client certificate: its subject common name or one of its
/// subject alternative names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsIdentity {
    /// `CN=NAME`: a subject common name, compared exactly.
    CommonName(String),
    /// `DNS=NAME`: a DNS SAN, compared without regard to ASCII case.
    Dns(String),
    /// `IP=ADDR`: an IP address SAN.
    Ip(IpAddr),
    /// `EMAIL=ADDR`: an rfc822Name SAN, compared exactly.
    Email(String),
    /// `URI=URI`: a URI SAN (e.g. a SPIFFE id), compared exactly.
    Uri(String),
}

impl FromStr for TlsIdentity {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| ConfigError::BadTlsIdentity {
            value: s.to_owned(),
            reason,
        };
        let (kind, value) = s.split_once('=').ok_or_else(|| bad("missing KIND="))?;
        if value.is_empty() {
            return Err(bad("empty value"));
        }
        let value = value.to_owned();
        match kind.trim().to_ascii_uppercase().as_str() {
            "CN" => Ok(Self::CommonName(value)),
            "DNS" => Ok(Self::Dns(value)),
            "IP" => value
                .parse()
                .map(Self::Ip)
                .map_err(|_| bad("not an IP address")),
            "EMAIL" => Ok(Self::Email(value)),
            "URI" => Ok(Self::Uri(value)),
            _ => Err(bad("unknown kind")),
        }
    }
}

impl fmt::Display for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CommonName(v) => write!(f, "CN={v}"),
            Self::Dns(v) => write!(f, "DNS={v}"),
            Self::Ip(v) => write!(f, "IP={v}"),
            Self::Email(v) => write!(f, "EMAIL={v}"),
            Self::Uri(v) => write!(f, "URI={v}"),
        }
    }
}

impl<'de> Deserialize<'de> for TlsIdentity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// TLS settings (`[tls]` in the TOML file, `--tls*` flags).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// off, on or require.
    pub mode: TlsMode,
    /// Directory with `server-cert.pem`, `server-key.pem` and (for
    /// client verification) `ca-cert.pem`: the layout nbdkit and qemu use.
    pub certificates: Option<PathBuf>,
    /// Require a client certificate signed by `ca-cert.pem`.
    pub verify_peer: bool,
    /// Per export, the client identities allowed to use it. An export
    /// listed here is TLS-only and refused to every other client; exports
    /// not listed are open to every client that passed TLS (and, with
    /// mode `on`, to plaintext clients).
    pub allow: BTreeMap<String, Vec<TlsIdentity>>,
}

impl TlsConfig {
    /// Checks the settings fit together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let on = self.mode != TlsMode::Off;
        if on && self.certificates.is_none() {
            return Err(ConfigError::Tls(
                "TLS needs a certificate directory (--tls-certificates DIR)",
            ));
        }
        if !on && self.certificates.is_some() {
            return Err(ConfigError::Tls(
                "a certificate directory is given but TLS is off (add --tls on or --tls require)",
            ));
        }
        if self.verify_peer && !on {
            return Err(ConfigError::Tls(
                "--tls-verify-peer needs TLS (--tls on or --tls require)",
            ));
        }
        if !self.allow.is_empty() && !self.verify_peer {
            return Err(ConfigError::Tls(
                "allow-lists need verified client certificates (--tls-verify-peer)",
            ));
        }
        Ok(())
    }
}
