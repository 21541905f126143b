//! NBD URIs (the subset libnbd and qemu accept for plain connections).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::ClientError;

/// Where an NBD server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `host:port`.
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

/// `nbd://HOST[:PORT][/EXPORT]` or `nbd+unix:///[EXPORT]?socket=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// The server.
    pub target: Target,
    /// Export name (empty: the default export).
    pub export: String,
}

impl NbdUri {
    /// A URI for `export` at `target`.
    pub fn new(target: Target, export: impl Into<String>) -> Self {
        Self {
            target,
            export: export.into(),
        }
    }
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Tcp(a) => write!(f, "nbd://{a}/{}", self.export),
            Target::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.export, p.display()),
        }
    }
}

impl FromStr for NbdUri {
    type Err = ClientError;
    fn from_str(uri: &str) -> Result<Self, Self::Err> {
        let bad = |reason| ClientError::BadUri {
            uri: uri.to_owned(),
            reason,
        };
        if let Some(rest) = uri.strip_prefix("nbd+unix://") {
            let (path_part, query) = rest
                .split_once('?')
                .ok_or_else(|| bad("missing ?socket=PATH"))?;
            let export = path_part.strip_prefix('/').unwrap_or(path_part);
            let socket = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("socket="))
                .ok_or_else(|| bad("missing socket= parameter"))?;
            if socket.is_empty() {
                return Err(bad("empty socket path"));
            }
            return Ok(Self {
                target: Target::Unix(socket.into()),
                export: export.to_owned(),
            });
        }
        let rest = uri
            .strip_prefix("nbd://")
            .ok_or_else(|| bad("expected nbd:// or nbd+unix://"))?;
        let (authority, export) = match rest.split_once('/') {
            Some((a, e)) => (a, e),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("missing host"));
        }
        let has_port = match authority.rfind(':') {
            Some(i) => !authority.ends_with(']') && authority[i + 1..].parse::<u16>().is_ok(),
            None => false,
        };
        let hostport = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:10809")
        };
        Ok(Self {
            target: Target::Tcp(hostport),
            export: export.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_uris() {
        let u: NbdUri = "nbd://127.0.0.1:1234/disk".parse().unwrap();
        assert_eq!(u, NbdUri::new(Target::Tcp("127.0.0.1:1234".into()), "disk"));
        let u: NbdUri = "nbd://localhost".parse().unwrap();
        assert_eq!(u, NbdUri::new(Target::Tcp("localhost:10809".into()), ""));
        let u: NbdUri = "nbd+unix:///x?socket=/tmp/s".parse().unwrap();
        assert_eq!(u, NbdUri::new(Target::Unix("/tmp/s".into()), "x"));
        assert!("http://x".parse::<NbdUri>().is_err());
        assert!("nbd+unix:///x".parse::<NbdUri>().is_err());
        assert_eq!(u.to_string(), "nbd+unix:///x?socket=/tmp/s");
    }
}
