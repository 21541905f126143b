//! How the etcd backend reaches etcd: endpoints, key prefix, timeouts,
//! TLS and user, from an `etcd://` or `etcds://` URI, and the
//! etcd-client options they make.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

use crate::MetaError;

/// Where the etcd backend keeps its keys unless told otherwise.
pub const DEFAULT_PREFIX: &str = "/sluice/meta/";

/// How to reach etcd and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The cluster's members, as `http://HOST:PORT`, or `https://HOST:PORT`
    /// when [`tls`](Self::tls) is set.
    pub endpoints: Vec<String>,
    /// Every key starts with this; ends with `/`.
    pub prefix: String,
    /// Longest wait for one request's reply.
    pub request_timeout: Duration,
    /// Longest wait for a connection to a member.
    pub connect_timeout: Duration,
    /// Longest time one operation keeps retrying through failovers
    /// (a member lost, a leader election) before it fails.
    pub op_timeout: Duration,
    /// TLS to the members, from a certificate directory.
    pub tls: Option<EtcdTls>,
    /// etcd's own user authentication (`etcdctl auth enable`).
    pub user: Option<EtcdUser>,
}

/// TLS to etcd, from a directory laid out as sluice's other TLS clients'
/// (`tls-certificates=DIR`): `ca-cert.pem`, the CA the members'
/// certificates are checked against; `client-cert.pem` and
/// `client-key.pem`, if present, the certificate this client shows
/// (etcd's `--client-cert-auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub certificates: PathBuf,
}

/// An etcd user and its password.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdUser {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUser")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl EtcdConfig {
    /// The configuration of these endpoints (`HOST:PORT` or
    /// `http://HOST:PORT`) with the default prefix and timeouts, no TLS
    /// and no user.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints
                .into_iter()
                .map(|e| {
                    let e = e.into();
                    if e.contains("://") {
                        e
                    } else {
                        format!("http://{e}")
                    }
                })
                .collect(),
            prefix: DEFAULT_PREFIX.to_owned(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(30),
            tls: None,
            user: None,
        }
    }

    /// Sets TLS from the certificate directory `certificates` and makes
    /// every endpoint `https://`.
    pub fn with_tls(mut self, certificates: impl Into<PathBuf>) -> Self {
        for e in &mut self.endpoints {
            if let Some(rest) = e.strip_prefix("http://") {
                *e = format!("https://{rest}");
            }
        }
        self.tls = Some(EtcdTls {
            certificates: certificates.into(),
        });
        self
    }

    /// Parses `etcd://HOST:PORT[,HOST:PORT...][/PREFIX][?QUERY]`, or
    /// `etcds://...` for TLS. The prefix, if given, replaces
    /// [`DEFAULT_PREFIX`]. The query's keys: `tls-certificates=DIR`
    /// (required with `etcds://`, see [`EtcdTls`]), `user=NAME` and
    /// `password-file=PATH` (the password is the file's first line; never
    /// in the URI, which shows in process lists).
    pub fn from_uri(uri: &str) -> Result<Self, MetaError> {
        let invalid = |why: &str| MetaError::Invalid {
            what: format!("etcd URI {uri:?}"),
            why: why.to_owned(),
        };
        let (rest, secure) = if let Some(rest) = uri.strip_prefix("etcd://") {
            (rest, false)
        } else if let Some(rest) = uri.strip_prefix("etcds://") {
            (rest, true)
        } else {
            return Err(invalid("it does not start with etcd:// or etcds://"));
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, query),
            None => (rest, ""),
        };
        let (hosts, prefix) = match rest.split_once('/') {
            Some((hosts, prefix)) => (hosts, Some(prefix)),
            None => (rest, None),
        };
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let port = host
                .rsplit_once(':')
                .map(|(h, p)| (h, p.parse::<u16>()))
                .filter(|(h, p)| !h.is_empty() && p.is_ok());
            if port.is_none() {
                return Err(invalid(&format!("{host:?} is not HOST:PORT")));
            }
            endpoints.push(host);
        }
        let mut config = Self::new(endpoints);
        if let Some(prefix) = prefix.filter(|p| !p.trim_matches('/').is_empty()) {
            config.prefix = format!("/{}/", prefix.trim_matches('/'));
        }
        let (mut certificates, mut user, mut password_file) = (None, None, None);
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match &*key {
                "tls-certificates" => &mut certificates,
                "user" => &mut user,
                "password-file" => &mut password_file,
                "password" => return Err(invalid(
                    "a password in the URI would show in process lists; give password-file=PATH",
                )),
                other => {
                    return Err(invalid(&format!(
                        "unknown query key {other:?} (known: tls-certificates, user, password-file)"
                    )))
                }
            };
            if slot.replace(value.into_owned()).is_some() {
                return Err(invalid(&format!("{key} is given twice")));
            }
        }
        match (secure, certificates) {
            (true, Some(dir)) => config = config.with_tls(dir),
            (true, None) => {
                return Err(invalid(
                    "etcds:// needs tls-certificates=DIR (with ca-cert.pem, and client-cert.pem and client-key.pem to show a certificate)",
                ))
            }
            (false, Some(_)) => {
                return Err(invalid("tls-certificates is for etcds:// URIs"));
            }
            (false, None) => {}
        }
        match (user, password_file) {
            (Some(name), Some(file)) => {
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| invalid(&format!("cannot read password-file {file:?}: {e}")))?;
                let password = text.lines().next().unwrap_or_default().to_owned();
                config.user = Some(EtcdUser { name, password });
            }
            (None, None) => {}
            (Some(_), None) => return Err(invalid("user needs password-file=PATH")),
            (None, Some(_)) => return Err(invalid("password-file needs user=NAME")),
        }
        Ok(config)
    }

    /// etcd-client's options for this configuration: timeouts, TLS (its
    /// files read now) and the user.
    pub(crate) fn connect_options(&self) -> Result<ConnectOptions, MetaError> {
        let mut options = ConnectOptions::new()
            .with_timeout(self.request_timeout)
            .with_connect_timeout(self.connect_timeout)
            // A member cut off from the others answers with an error, not
            // with what it last knew.
            .with_require_leader(true);
        if let Some(tls) = &self.tls {
            let read = |name: &str| {
                let path = tls.certificates.join(name);
                std::fs::read(&path).map_err(|e| MetaError::Invalid {
                    what: format!("etcd TLS certificates in {}", tls.certificates.display()),
                    why: format!("cannot read {name}: {e}"),
                })
            };
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(read(CA_CERT)?));
            if tls.certificates.join(CLIENT_CERT).exists() {
                t = t.identity(Identity::from_pem(read(CLIENT_CERT)?, read(CLIENT_KEY)?));
            }
            options = options.with_tls(t);
        }
        if let Some(user) = &self.user {
            options = options.with_user(user.name.clone(), user.password.clone());
        }
        Ok(options)
    }
}

/// The files of a TLS certificate directory, named as sluice's other
/// TLS clients name them.
const CA_CERT: &str = "ca-cert.pem";
const CLIENT_CERT: &str = "client-cert.pem";
const CLIENT_KEY: &str = "client-key.pem";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_give_endpoints_and_prefix() {
        let c = EtcdConfig::from_uri("etcd://a:1,127.0.0.1:2379").expect("valid");
        assert_eq!(c.endpoints, ["http://a:1", "http://127.0.0.1:2379"]);
        assert_eq!(c.prefix, DEFAULT_PREFIX);
        let c = EtcdConfig::from_uri("etcd://a:1/x/y").expect("valid");
        assert_eq!(c.prefix, "/x/y/");
        let c = EtcdConfig::from_uri("etcds://a:1,b:2/p?tls-certificates=/pki").expect("valid");
        assert_eq!(c.endpoints, ["https://a:1", "https://b:2"]);
        assert_eq!(c.prefix, "/p/");
        assert_eq!(c.tls.expect("tls").certificates, PathBuf::from("/pki"));
        for bad in [
            "http://a:1",
            "etcd://",
            "etcd://a",
            "etcd://a:1,",
            "etcd://:1",
            "etcd://a:x",
            "etcds://a:1",
            "etcd://a:1?tls-certificates=/pki",
            "etcd://a:1?password=x&user=u",
            "etcd://a:1?user=u",
            "etcd://a:1?password-file=/nonexistent&user=u",
            "etcd://a:1?tls=1",
            "etcds://a:1?tls-certificates=/a&tls-certificates=/b",
        ] {
            assert!(
                matches!(EtcdConfig::from_uri(bad), Err(MetaError::Invalid { .. })),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn a_user_reads_its_password_from_the_first_line_of_a_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\nignored\n").expect("write");
        let c = EtcdConfig::from_uri(&format!(
            "etcd://a:1?user=root&password-file={}",
            file.display()
        ))
        .expect("valid");
        let user = c.user.expect("a user");
        assert_eq!(
            (user.name.as_str(), user.password.as_str()),
            ("root", "s3cret")
        );
        // Debug output never shows the password.
        assert!(!format!("{user:?}").contains("s3cret"));
    }
}
