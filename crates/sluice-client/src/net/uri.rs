//! NBD URIs as the NBD URI specification (NetworkBlockDevice/nbd
//! `doc/uri.md`) defines them, parsed with the `url` crate:
//!
//! ```text
//! nbd://HOST[:PORT][/EXPORT]              TCP, port 10809 by default
//! nbds://HOST[:PORT][/EXPORT]             the same with TLS
//! nbd+unix:///[EXPORT]?socket=PATH        Unix-domain socket
//! nbds+unix:///[EXPORT]?socket=PATH       the same with TLS
//! ```
//!
//! The export name is the path after its first `/`, percent-decoded
//! (`nbd://h/a%2Fb` names export `a/b`). HOST may be an IPv6 literal in
//! brackets. Query parameters: `socket=` (Unix only, required there) and
//! `tls-certificates=DIR` (TLS only): the directory holds `ca-cert.pem`,
//! the CA the client trusts, and optionally `client-cert.pem` and
//! `client-key.pem`, the client's own identity for servers that ask for
//! one. Other parameters are ignored, as the specification allows.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use url::{Host, Url};

use crate::net::transport::CA_CERT_FILE;
use crate::obj::MergePolicy;
use crate::ClientError;

/// The NBD port IANA assigned.
pub const DEFAULT_PORT: u16 = 10809;

/// Where an NBD server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `host:port` (an IPv6 host in brackets).
    Tcp(String),
    /// A Unix-domain socket.
    Unix(PathBuf),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(a) => f.write_str(a),
            Self::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// TLS settings from an `nbds` URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// Directory with `ca-cert.pem` and optionally `client-cert.pem` and
    /// `client-key.pem`.
    pub certificates: PathBuf,
    /// Name the server's certificate must carry (the URI's host; for Unix
    /// sockets `localhost`).
    pub server_name: String,
}

/// A parsed NBD URI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// The server.
    pub target: Target,
    /// Export name (empty: the default export).
    pub export: String,
    /// TLS settings for `nbds` URIs; `None` for plaintext.
    pub tls: Option<TlsSettings>,
}

impl NbdUri {
    /// A plaintext URI for `export` at `target`.
    pub fn new(target: Target, export: impl Into<String>) -> Self {
        Self {
            target,
            export: export.into(),
            tls: None,
        }
    }

    /// The same URI with TLS.
    pub fn with_tls(mut self, tls: TlsSettings) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// Characters escaped when an export name is written into a URI path.
const EXPORT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'/');
/// Characters escaped in query values.
const QUERY: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'&')
    .add(b'=')
    .add(b'+');

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls.is_some() { "s" } else { "" };
        let export = utf8_percent_encode(&self.export, EXPORT);
        let mut sep = '?';
        match &self.target {
            Target::Tcp(a) => write!(f, "nbd{s}://{a}/{export}")?,
            Target::Unix(p) => {
                let p = p.to_string_lossy();
                write!(
                    f,
                    "nbd{s}+unix:///{export}?socket={}",
                    utf8_percent_encode(&p, QUERY)
                )?;
                sep = '&';
            }
        }
        if let Some(t) = &self.tls {
            let dir = t.certificates.to_string_lossy();
            write!(
                f,
                "{sep}tls-certificates={}",
                utf8_percent_encode(&dir, QUERY)
            )?;
        }
        Ok(())
    }
}

impl FromStr for NbdUri {
    type Err = ClientError;
    fn from_str(uri: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| ClientError::BadUri {
            uri: uri.to_owned(),
            reason,
        };
        let url = Url::parse(uri).map_err(|e| bad(format!("not a URI: {e}")))?;
        let (tls, unix) = match url.scheme() {
            "nbd" => (false, false),
            "nbds" => (true, false),
            "nbd+unix" => (false, true),
            "nbds+unix" => (true, true),
            s @ ("nbd+vsock" | "nbds+vsock") => {
                return Err(bad(format!("{s}: vsock is not supported")))
            }
            s => {
                return Err(bad(format!(
                    "unknown scheme {s:?}: expected nbd, nbds, nbd+unix or nbds+unix"
                )))
            }
        };
        check_plain_url(&url, "NBD").map_err(bad)?;
        // The path is "/" then the export name; percent-decoding is
        // ours to do (the url crate keeps the path encoded).
        let path = url.path();
        let raw = path.strip_prefix('/').unwrap_or(path);
        let export = percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| bad("the export name is not UTF-8 once percent-decoded".into()))?
            .into_owned();
        let mut socket = None;
        let mut certificates = None;
        for (key, value) in url.query_pairs() {
            match &*key {
                "socket" => socket = Some(PathBuf::from(value.into_owned())),
                "tls-certificates" => certificates = Some(PathBuf::from(value.into_owned())),
                other => return Err(bad(unknown_key(other, "socket, tls-certificates"))),
            }
        }
        let (target, server_name) = if unix {
            if url.host().is_some_and(|h| h != Host::Domain("")) {
                return Err(bad(format!(
                    "{} URIs name no host (use {}:///EXPORT?socket=PATH)",
                    url.scheme(),
                    url.scheme()
                )));
            }
            let socket = socket
                .filter(|p| !p.as_os_str().is_empty())
                .ok_or_else(|| bad("missing socket=PATH for a Unix-domain socket".into()))?;
            (Target::Unix(socket), "localhost".to_owned())
        } else {
            if socket.is_some() {
                return Err(bad("socket= is only for nbd+unix and nbds+unix URIs".into()));
            }
            tcp_target(&url, DEFAULT_PORT).map_err(bad)?
        };
        let tls =
            tls_settings(tls, certificates, server_name, ["nbds", "nbds+unix"]).map_err(bad)?;
        Ok(Self {
            target,
            export,
            tls,
        })
    }
}

/// Refuses the URI parts no sluice URI uses (user information, a
/// fragment); `kind` names the URI kind in the message.
fn check_plain_url(url: &Url, kind: &str) -> Result<(), String> {
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("user information is not allowed in {kind} URIs"));
    }
    if url.fragment().is_some() {
        return Err(format!("a fragment (#...) is not allowed in {kind} URIs"));
    }
    Ok(())
}

/// The TCP target of a URI with a host (`default_port` when it names
/// none) and the name its TLS certificate must carry.
fn tcp_target(url: &Url, default_port: u16) -> Result<(Target, String), String> {
    let host = match url.host() {
        None | Some(Host::Domain("")) => return Err("missing host".into()),
        Some(Host::Domain(d)) => d.to_owned(),
        Some(Host::Ipv4(a)) => a.to_string(),
        Some(Host::Ipv6(a)) => format!("[{a}]"),
    };
    let port = url.port().unwrap_or(default_port);
    let name = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok((Target::Tcp(format!("{host}:{port}")), name))
}

/// TLS settings from the scheme's TLS bit and the `tls-certificates`
/// parameter, which go together; `schemes` are the TLS schemes' names
/// (TCP, Unix) for the messages.
fn tls_settings(
    tls: bool,
    certificates: Option<PathBuf>,
    server_name: String,
    schemes: [&str; 2],
) -> Result<Option<TlsSettings>, String> {
    match (tls, certificates) {
        (true, Some(certificates)) => Ok(Some(TlsSettings {
            certificates,
            server_name,
        })),
        (true, None) => Err(format!(
            "{} URIs need tls-certificates=DIR (a directory with {CA_CERT_FILE})",
            schemes[0]
        )),
        (false, Some(_)) => Err(format!(
            "tls-certificates= needs an {} or {} URI",
            schemes[0], schemes[1]
        )),
        (false, None) => Ok(None),
    }
}

/// The port the native object protocol listens on by default.
pub const DEFAULT_OBJ_PORT: u16 = 10810;
/// The object server a client talks to when none is named.
pub const DEFAULT_OBJ_SERVER: &str = "sluice://127.0.0.1:10810";

/// A parsed URI of a server speaking sluice's native object protocol:
///
/// ```text
/// sluice://HOST[:PORT][?partition=N]       TCP, port 10810 by default
/// sluices://HOST[:PORT]?tls-certificates=DIR[&partition=N]
/// sluice+unix:///PATH[?partition=N]        Unix-domain socket at /PATH
/// sluices+unix:///PATH?tls-certificates=DIR
/// sluice://HOST?merge=off                  any of them with a merge policy
/// ```
///
/// `tls-certificates` is the same directory as for `nbds://` (the CA the
/// client trusts, and optionally the client's own certificate and key).
/// `partition` (decimal or `0x` hex) selects a partition other than the
/// default one. `merge` (`off`, `always`, `adaptive`) sets the client's
/// temporal merge policy ([`MergePolicy`]), overriding the one in its
/// options. Other parameters are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjUri {
    /// The server.
    pub target: Target,
    /// TLS settings for `sluices` URIs; `None` for plaintext.
    pub tls: Option<TlsSettings>,
    /// The partition to select (`None`: the default partition).
    pub partition: Option<u64>,
    /// The temporal merge policy (`None`: the client options' own).
    pub merge: Option<MergePolicy>,
}

impl ObjUri {
    /// A plaintext URI for `target` and the default partition.
    pub fn new(target: Target) -> Self {
        Self {
            target,
            tls: None,
            partition: None,
            merge: None,
        }
    }

    /// The same URI with TLS.
    pub fn with_tls(mut self, tls: TlsSettings) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The same URI selecting `partition`.
    pub fn with_partition(mut self, partition: u64) -> Self {
        self.partition = Some(partition);
        self
    }

    /// The same URI with a merge policy.
    pub fn with_merge(mut self, merge: MergePolicy) -> Self {
        self.merge = Some(merge);
        self
    }
}

impl Default for ObjUri {
    /// [`DEFAULT_OBJ_SERVER`].
    fn default() -> Self {
        Self::new(Target::Tcp(format!("127.0.0.1:{DEFAULT_OBJ_PORT}")))
    }
}

impl fmt::Display for ObjUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls.is_some() { "s" } else { "" };
        match &self.target {
            Target::Tcp(a) => write!(f, "sluice{s}://{a}")?,
            Target::Unix(p) => {
                let p = p.to_string_lossy();
                write!(
                    f,
                    "sluice{s}+unix://{}",
                    utf8_percent_encode(&p, SOCKET_PATH)
                )?;
            }
        }
        let mut sep = '?';
        if let Some(t) = &self.tls {
            let dir = t.certificates.to_string_lossy();
            write!(
                f,
                "{sep}tls-certificates={}",
                utf8_percent_encode(&dir, QUERY)
            )?;
            sep = '&';
        }
        if let Some(p) = self.partition {
            write!(f, "{sep}partition={p}")?;
            sep = '&';
        }
        if let Some(m) = self.merge {
            write!(f, "{sep}merge={m}")?;
        }
        Ok(())
    }
}

/// Characters escaped when a socket path is written as a URI path.
const SOCKET_PATH: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// Why an object server URI was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad object server URI {uri:?}: {reason}")]
pub struct BadObjUri {
    pub uri: String,
    pub reason: String,
}

/// The reason a URI with the query key `key` is refused: a misspelt
/// key ignored would read or write somewhere the user did not mean.
fn unknown_key(key: &str, known: &str) -> String {
    format!("unknown query key {key:?} (known: {known})")
}

/// A partition number, decimal or `0x` hex.
fn parse_partition(v: &str) -> Result<u64, String> {
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|_| format!("partition={v:?} is not a number (decimal or 0x hex)"))
}

impl FromStr for ObjUri {
    type Err = BadObjUri;
    fn from_str(uri: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| BadObjUri {
            uri: uri.to_owned(),
            reason,
        };
        let url = Url::parse(uri).map_err(|e| bad(format!("not a URI: {e}")))?;
        let (tls, unix) = match url.scheme() {
            "sluice" => (false, false),
            "sluices" => (true, false),
            "sluice+unix" => (false, true),
            "sluices+unix" => (true, true),
            s => {
                return Err(bad(format!(
                    "unknown scheme {s:?}: expected sluice, sluices, sluice+unix or sluices+unix"
                )))
            }
        };
        check_plain_url(&url, "object server").map_err(bad)?;
        let mut certificates = None;
        let mut partition = None;
        let mut merge = None;
        for (key, value) in url.query_pairs() {
            match &*key {
                "tls-certificates" => certificates = Some(PathBuf::from(value.into_owned())),
                "partition" => partition = Some(parse_partition(&value).map_err(bad)?),
                "merge" => merge = Some(value.parse().map_err(|e| bad(format!("merge: {e}")))?),
                other => {
                    return Err(bad(unknown_key(
                        other,
                        "partition, merge, tls-certificates",
                    )))
                }
            }
        }
        let (target, server_name) = if unix {
            if url.host().is_some_and(|h| h != Host::Domain("")) {
                return Err(bad(format!(
                    "{} URIs name no host (use {}:///PATH, PATH the socket)",
                    url.scheme(),
                    url.scheme()
                )));
            }
            let path = percent_decode_str(url.path())
                .decode_utf8()
                .map_err(|_| bad("the socket path is not UTF-8 once percent-decoded".into()))?;
            if path.is_empty() || path == "/" {
                return Err(bad(format!(
                    "missing the socket path ({}:///PATH)",
                    url.scheme()
                )));
            }
            (Target::Unix(PathBuf::from(&*path)), "localhost".to_owned())
        } else {
            if !matches!(url.path(), "" | "/") {
                return Err(bad(format!(
                    "{} URIs have no path (the partition is ?partition=N)",
                    url.scheme()
                )));
            }
            tcp_target(&url, DEFAULT_OBJ_PORT).map_err(bad)?
        };
        let tls = tls_settings(tls, certificates, server_name, ["sluices", "sluices+unix"])
            .map_err(bad)?;
        Ok(Self {
            target,
            tls,
            partition,
            merge,
        })
    }
}

/// A block export of a sluice server reached over the native protocol
/// (its extent commands, which temporal merge fuses):
///
/// ```text
/// sluice://HOST[:PORT]/EXPORT[?merge=POLICY]
/// sluices://HOST[:PORT]/EXPORT?tls-certificates=DIR[&merge=POLICY]
/// ```
///
/// The object server's URI ([`ObjUri`], same port, TLS and query keys)
/// with the export's name as its path, percent-decoded as in `nbd://`.
/// Unix-domain sockets are not offered here: their path is the socket's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportUri {
    /// The server.
    pub server: ObjUri,
    /// The export's name (not empty).
    pub export: String,
}

impl fmt::Display for ExportUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let server = self.server.to_string();
        let (head, query) = server.split_at(server.find('?').unwrap_or(server.len()));
        let export = utf8_percent_encode(&self.export, EXPORT);
        write!(f, "{head}/{export}{query}")
    }
}

impl FromStr for ExportUri {
    type Err = BadObjUri;
    fn from_str(uri: &str) -> Result<Self, Self::Err> {
        let bad = |reason: String| BadObjUri {
            uri: uri.to_owned(),
            reason,
        };
        let mut url = Url::parse(uri).map_err(|e| bad(format!("not a URI: {e}")))?;
        if !matches!(url.scheme(), "sluice" | "sluices") {
            return Err(bad(format!(
                "unknown scheme {:?} for an export: expected sluice or sluices",
                url.scheme()
            )));
        }
        let path = url.path();
        let raw = path.strip_prefix('/').unwrap_or(path);
        let export = percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| bad("the export name is not UTF-8 once percent-decoded".into()))?
            .into_owned();
        if export.is_empty() {
            return Err(bad("missing the export name (sluice://HOST/EXPORT)".into()));
        }
        url.set_path("");
        let server = url.as_str().parse::<ObjUri>().map_err(|e| bad(e.reason))?;
        Ok(Self { server, export })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> NbdUri {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn export_uris_are_an_object_server_and_a_path() {
        let u: ExportUri = "sluice://h:7/a%2Fb?merge=always".parse().expect("uri");
        assert_eq!(u.export, "a/b");
        assert_eq!(u.server.target, Target::Tcp("h:7".into()));
        assert_eq!(u.server.merge, Some(MergePolicy::Always));
        assert_eq!(u.to_string(), "sluice://h:7/a%2Fb?merge=always");
        assert_eq!(u.to_string().parse::<ExportUri>(), Ok(u));
        let d: ExportUri = "sluice://h/disk".parse().expect("uri");
        assert_eq!(d.to_string(), "sluice://h:10810/disk");
        for (bad, why) in [
            ("sluice://h", "missing the export"),
            ("sluice://h/", "missing the export"),
            ("nbd://h/x", "expected sluice or sluices"),
            ("sluice+unix:///s", "expected sluice or sluices"),
            ("sluice://h/x?merge=often", "merge"),
            ("sluice://h/x?sokcet=1", "unknown query key"),
        ] {
            let e = bad.parse::<ExportUri>().expect_err(bad);
            assert!(e.reason.contains(why), "{bad}: {e}");
        }
    }

    fn reason(s: &str) -> String {
        match s.parse::<NbdUri>() {
            Err(ClientError::BadUri { reason, .. }) => reason,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn tcp_uris_with_default_port_and_ipv6() {
        assert_eq!(
            parse("nbd://127.0.0.1:1234/disk"),
            NbdUri::new(Target::Tcp("127.0.0.1:1234".into()), "disk")
        );
        assert_eq!(
            parse("nbd://localhost"),
            NbdUri::new(Target::Tcp("localhost:10809".into()), "")
        );
        assert_eq!(
            parse("nbd://example.com/"),
            NbdUri::new(Target::Tcp("example.com:10809".into()), "")
        );
        assert_eq!(
            parse("nbd://[::1]:5000/x"),
            NbdUri::new(Target::Tcp("[::1]:5000".into()), "x")
        );
        assert_eq!(
            parse("nbd://[fe80::1]/"),
            NbdUri::new(Target::Tcp("[fe80::1]:10809".into()), "")
        );
    }

    #[test]
    fn export_names_are_percent_decoded() {
        assert_eq!(parse("nbd://h/a%2Fb%20c").export, "a/b c");
        // Only the first slash separates; the rest is the name.
        assert_eq!(parse("nbd://h//abs/path").export, "/abs/path");
        assert_eq!(parse("nbd://h/%C3%A9t%C3%A9").export, "été");
        assert!(reason("nbd://h/%FF").contains("UTF-8"));
    }

    #[test]
    fn unix_uris() {
        let u = parse("nbd+unix:///x?socket=/tmp/s");
        assert_eq!(u, NbdUri::new(Target::Unix("/tmp/s".into()), "x"));
        assert_eq!(u.to_string(), "nbd+unix:///x?socket=/tmp/s");
        assert_eq!(
            parse("nbd+unix://?socket=/tmp/a%20b").target,
            Target::Unix("/tmp/a b".into())
        );
        assert!(reason("nbd+unix:///x").contains("socket="));
        assert!(reason("nbd+unix://host/x?socket=/s").contains("no host"));
        assert!(reason("nbd://h/x?socket=/s").contains("only for"));
    }

    #[test]
    fn tls_uris() {
        let u = parse("nbds://localhost:99/e?tls-certificates=/etc/pki/nbd");
        assert_eq!(
            u.tls,
            Some(TlsSettings {
                certificates: "/etc/pki/nbd".into(),
                server_name: "localhost".into()
            })
        );
        assert_eq!(
            u.to_string(),
            "nbds://localhost:99/e?tls-certificates=/etc/pki/nbd"
        );
        let u = parse("nbds+unix:///e?socket=/s&tls-certificates=/c");
        assert_eq!(u.target, Target::Unix("/s".into()));
        assert_eq!(u.tls.map(|t| t.server_name), Some("localhost".into()));
        assert!(reason("nbds://h/").contains("tls-certificates"));
        assert!(reason("nbd://h/?tls-certificates=/c").contains("nbds"));
    }

    #[test]
    fn bad_uris_say_why() {
        assert!(reason("http://x").contains("unknown scheme"));
        assert!(reason("nbd+vsock://1:2").contains("vsock"));
        assert!(reason("nbd://").contains("missing host"));
        assert!(reason("not a uri").contains("not a URI"));
        assert!(reason("nbd://u:p@h/").contains("user"));
        assert!(reason("nbd://h:99999/").contains("not a URI"));
        assert!(reason("nbd://h/x#frag").contains("fragment"));
        assert!(reason("nbd://h/x?sokcet=/s")
            .contains("unknown query key \"sokcet\" (known: socket, tls-certificates)"));
        let e = "sluice://h?partiton=2".parse::<ObjUri>().unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown query key \"partiton\" (known: partition,"),
            "{e}"
        );
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "nbd://127.0.0.1:10809/disk",
            "nbd://[::1]:10809/a%2Fb",
            "nbds+unix:///e?socket=/run/s&tls-certificates=/c",
        ] {
            assert_eq!(parse(s).to_string(), s);
            assert_eq!(parse(&parse(s).to_string()), parse(s));
        }
    }

    fn obj(s: &str) -> ObjUri {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn obj_reason(s: &str) -> String {
        match s.parse::<ObjUri>() {
            Err(e) => e.reason,
            Ok(u) => panic!("{s} parsed as {u:?}"),
        }
    }

    #[test]
    fn object_server_uris() {
        assert_eq!(obj(DEFAULT_OBJ_SERVER), ObjUri::default());
        assert_eq!(
            obj("sluice://example.com"),
            ObjUri::new(Target::Tcp("example.com:10810".into()))
        );
        assert_eq!(
            obj("sluice://[::1]:7/?partition=0x10"),
            ObjUri::new(Target::Tcp("[::1]:7".into())).with_partition(16)
        );
        assert_eq!(
            obj("sluice+unix:///run/sluice%20obj.sock?partition=3"),
            ObjUri::new(Target::Unix("/run/sluice obj.sock".into())).with_partition(3)
        );
        let u = obj("sluices://h:1?tls-certificates=/pki");
        assert_eq!(
            u.tls,
            Some(TlsSettings {
                certificates: "/pki".into(),
                server_name: "h".into()
            })
        );
        let u = obj("sluices+unix:///s?tls-certificates=/c");
        assert_eq!(u.tls.map(|t| t.server_name), Some("localhost".into()));
    }

    #[test]
    fn bad_object_server_uris_say_why() {
        assert!(obj_reason("nbd://h").contains("unknown scheme"));
        assert!(obj_reason("sluice://").contains("missing host"));
        assert!(obj_reason("sluice://h/x").contains("no path"));
        assert!(obj_reason("sluice://h?partition=x").contains("partition"));
        assert!(obj_reason("sluice://h?merge=sometimes").contains("merge"));
        assert_eq!(
            obj("sluice://h?merge=always&partition=2"),
            ObjUri::new(Target::Tcp("h:10810".into()))
                .with_partition(2)
                .with_merge(MergePolicy::Always)
        );
        assert!(obj_reason("sluice+unix://").contains("socket path"));
        assert!(obj_reason("sluice+unix://h/s").contains("no host"));
        assert!(obj_reason("sluices://h").contains("tls-certificates"));
        assert!(obj_reason("sluice://h?tls-certificates=/c").contains("sluices"));
        assert!(obj_reason("sluice://u@h").contains("user"));
    }

    #[test]
    fn object_server_uris_display_round_trip() {
        for s in [
            "sluice://127.0.0.1:10810",
            "sluice://[::1]:10810?partition=5",
            "sluice://h:1?partition=5&merge=off",
            "sluice+unix:///s?merge=adaptive",
            "sluices+unix:///run/a%20b?tls-certificates=/c&partition=7",
        ] {
            assert_eq!(obj(s).to_string(), s);
        }
    }
}
