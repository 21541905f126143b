//! The one place a metadata URI becomes a metadata service
//! ([`open_meta_store`]), for `sluice meta` and `sluice obj --meta`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_client::obj::{ObjError, ObjOptions, RemoteMetaStore};
use sluice_client::{ClientError, ObjUri};
use sluice_meta::{EtcdConfig, EtcdMetaStore, MetaError, MetaStore, SqliteMetaStore};

use crate::UsageError;

/// The accepted forms, for error messages.
const FORMS: &str = "sluice://HOST[:PORT] (a 'sluice serve --meta' server), \
sluices://HOST[:PORT]?tls-certificates=DIR, etcd://HOST:PORT[,HOST:PORT...], \
etcds://HOST:PORT[,...]?tls-certificates=DIR (either with &user=NAME&password-file=PATH), \
sqlite:DIR or a directory path";

/// Timeouts of metadata and object server connections made by the CLI.
pub(crate) fn cli_options() -> ObjOptions {
    ObjOptions {
        connect_timeout: Duration::from_secs(10),
        request_timeout: Some(Duration::from_secs(60)),
        ..ObjOptions::default()
    }
}

/// The metadata service `uri` names: a sluice server's over the native
/// protocol (`sluice://`, `sluices://`, `sluice+unix://`), etcd
/// (`etcd://`, `etcds://` with TLS), or SQLite in a directory (`sqlite:DIR` or a path),
/// which must exist unless `create` (`sluice meta add-server`, which starts a
/// deployment): a mistyped directory would otherwise be a new, empty
/// deployment in which every object looks gone.
pub(crate) fn open_meta_store(uri: &str, create: bool) -> anyhow::Result<Arc<dyn MetaStore>> {
    if uri.starts_with("sluice://")
        || uri.starts_with("sluices://")
        || uri.starts_with("sluice+unix://")
    {
        let parsed: ObjUri = uri
            .parse()
            .map_err(|e| UsageError(format!("--meta {uri}: {e}")))?;
        let store = RemoteMetaStore::connect(parsed, cli_options()).map_err(|e| {
            match wrong_port(&e) {
                // One line that says what to do.
                Some(line) => anyhow::anyhow!(line),
                None => anyhow::Error::new(e).context(format!(
                    "cannot reach the metadata service at {uri}; is 'sluice serve --meta DIR' running there?"
                )),
            }
        })?;
        return Ok(Arc::new(store));
    }
    if uri.starts_with("etcd://") || uri.starts_with("etcds://") {
        let config =
            EtcdConfig::from_uri(uri).map_err(|e| UsageError(format!("--meta {uri}: {e}")))?;
        let store = EtcdMetaStore::connect(config).map_err(|e| match e {
            // Already one line naming the endpoints.
            MetaError::Unreachable { .. } => anyhow::Error::new(e),
            e => anyhow::Error::new(e).context(format!("cannot reach etcd at {uri}")),
        })?;
        return Ok(Arc::new(store));
    }
    if uri.starts_with("mem:") {
        return Err(UsageError(format!(
            "--meta {uri}: an in-memory metadata service lives only as long as one command; give one of {FORMS}"
        ))
        .into());
    }
    if uri.starts_with("sqlite:") || !uri.contains("://") {
        let dir = Path::new(uri.strip_prefix("sqlite:").unwrap_or(uri));
        if !create && !dir.is_dir() {
            anyhow::bail!(
                "metadata directory {} does not exist (a new deployment starts with \
                 'sluice meta --meta {uri} add-server URI...', which creates it)",
                dir.display()
            );
        }
        let store = SqliteMetaStore::open(dir)
            .with_context(|| format!("cannot open the metadata service in {}", dir.display()))?;
        return Ok(Arc::new(store));
    }
    Err(UsageError(format!(
        "--meta {uri}: unknown metadata URI; give one of {FORMS}"
    ))
    .into())
}

/// The wrong-port message somewhere in `e`'s chain: the server greeted in
/// the other protocol.
fn wrong_port(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(ObjError::Transport(w @ ClientError::WrongProtocol { .. })) = c.downcast_ref() {
            return Some(w.to_string());
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(uri: &str) -> String {
        let e = open_meta_store(uri, false).err().expect("refused");
        assert!(e.downcast_ref::<UsageError>().is_some(), "{e:#}");
        format!("{e:#}")
    }

    #[test]
    fn unknown_and_unavailable_forms_are_usage_errors() {
        assert!(usage("mem:").contains("in-memory"));
        assert!(usage("ftp://x").contains("unknown metadata URI"));
        assert!(usage("sluice://").contains("--meta sluice://"));
        assert!(usage("etcds://127.0.0.1:2379").contains("tls-certificates=DIR"));
        assert!(usage("etcd://127.0.0.1:2379?password=x").contains("password-file"));
    }

    #[test]
    fn a_directory_opens_sqlite_and_keeps_what_it_was_given() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let uri = format!("sqlite:{}", dir.path().display());
        open_meta_store(&uri, false)
            .expect("open")
            .add_server("sluice://127.0.0.1:10810")
            .expect("add_server");
        // A bare path is the same store.
        let again = open_meta_store(&dir.path().display().to_string(), false).expect("reopen");
        assert_eq!(
            again.servers().expect("servers"),
            ["sluice://127.0.0.1:10810"]
        );
    }

    #[test]
    fn a_missing_directory_is_an_error_unless_asked_to_create_it() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let missing = dir.path().join("no").join("such");
        let uri = format!("sqlite:{}", missing.display());
        let e = open_meta_store(&uri, false).err().expect("refused");
        assert!(format!("{e:#}").contains("does not exist"), "{e:#}");
        assert!(!missing.exists());
        open_meta_store(&uri, true).expect("created");
        assert!(missing.is_dir());
    }

    #[test]
    fn a_sluice_uri_with_no_server_fails_naming_it() {
        // Port 1 on loopback: nothing listens there.
        let e = open_meta_store("sluice://127.0.0.1:1", false)
            .err()
            .expect("refused");
        assert!(e.downcast_ref::<UsageError>().is_none());
        assert!(format!("{e:#}").contains("sluice://127.0.0.1:1"), "{e:#}");
    }
}
