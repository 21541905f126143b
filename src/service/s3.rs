//! `sluice serve --s3 ADDR`: the S3 endpoint (`sluice-s3`) beside the
//! server's other listeners, in the same process, over the metadata
//! service this server serves (`--meta DIR`) or the one `[s3] meta`
//! names. With the server's own metadata service and a deployment that
//! has no object servers yet, the server's first object listener is
//! added, so that one `sluice serve --meta DIR --s3 ADDR` is a whole
//! single-host deployment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use sluice_meta::MetaStore;
use sluice_s3::{AccessKey, LayoutOptions, S3Endpoint, S3Options};
use sluice_server::{S3Config, Server, ServerConfig, TlsConfig, TlsMode};

use crate::meta_cmd::store::{cli_options, open_meta_store};
use crate::UsageError;

/// `--s3`, `--s3-key-file`, `--s3-meta`, `--s3-domain`.
#[derive(Debug, Default, Args)]
pub(crate) struct S3Args {
    /// Serve the S3 API on HOST:PORT (port 10811 is sluice's default:
    /// `--s3 127.0.0.1:10811`); needs access keys (--s3-key-file or
    /// [s3] keys) and a metadata service (--meta DIR, or --s3-meta URI).
    #[arg(long = "s3", value_name = "ADDR")]
    s3: Option<SocketAddr>,
    /// File of S3 access keys: one `ACCESS_KEY_ID SECRET_ACCESS_KEY`
    /// pair a line (mode 0600).
    #[arg(long, value_name = "FILE")]
    s3_key_file: Option<PathBuf>,
    /// The metadata service S3 objects live in, as `sluice meta --meta`
    /// takes it (default: this server's --meta).
    #[arg(long, value_name = "URI")]
    s3_meta: Option<String>,
    /// Also serve virtual-host-style requests: a Host of BUCKET.DOMAIN
    /// names bucket BUCKET (the names must resolve to this server).
    #[arg(long, value_name = "DOMAIN")]
    s3_domain: Option<String>,
}

impl S3Args {
    /// Applies the flags over the config file's `[s3]`.
    pub(crate) fn apply(self, config: &mut ServerConfig) -> Result<()> {
        if let Some(addr) = self.s3 {
            config.s3.get_or_insert_with(|| S3Config::new(addr)).listen = addr;
        }
        match config.s3.as_mut() {
            Some(s3) => {
                if let Some(f) = self.s3_key_file {
                    s3.key_file = Some(f);
                }
                if let Some(m) = self.s3_meta {
                    s3.meta = Some(m);
                }
                if let Some(d) = self.s3_domain {
                    s3.domain = Some(d);
                }
            }
            None if self.s3_key_file.is_some()
                || self.s3_meta.is_some()
                || self.s3_domain.is_some() =>
            {
                return Err(UsageError(
                    "--s3-key-file, --s3-meta and --s3-domain configure the S3 endpoint; add --s3 ADDR"
                        .into(),
                )
                .into())
            }
            None => {}
        }
        Ok(())
    }
}

/// The access keys of the config and its key file.
fn keys(config: &S3Config) -> Result<Vec<AccessKey>> {
    let mut keys: Vec<AccessKey> = config
        .keys
        .iter()
        .map(|(id, secret)| AccessKey {
            id: id.clone(),
            secret: secret.clone(),
        })
        .collect();
    if let Some(path) = &config.key_file {
        keys.extend(sluice_s3::read_key_file(path)?);
    }
    if keys.is_empty() {
        return Err(UsageError(
            "the S3 endpoint needs access keys: --s3-key-file FILE or [s3] keys".into(),
        )
        .into());
    }
    Ok(keys)
}

/// What the S3 endpoint `config.s3` describes needs before anything is
/// bound or opened: its access keys, and a metadata service (this
/// server's, or one named). A usage error says which is missing.
pub(crate) fn keys_before_start(config: &ServerConfig) -> Result<Option<Vec<AccessKey>>> {
    let Some(s3) = &config.s3 else {
        return Ok(None);
    };
    let served = config.objects.as_ref().is_some_and(|o| o.meta.is_some());
    if s3.meta.is_none() && !served {
        return Err(UsageError(
            "the S3 endpoint needs a metadata service: serve one with --meta DIR or name one with --s3-meta URI"
                .into(),
        )
        .into());
    }
    keys(s3).map(Some)
}

/// The metadata service of the S3 objects.
fn meta(config: &S3Config, server: &Server, tls: &TlsConfig) -> Result<Arc<dyn MetaStore>> {
    if let Some(uri) = &config.meta {
        return open_meta_store(uri, false);
    }
    let Some(meta) = server.meta_store() else {
        return Err(UsageError(
            "the S3 endpoint needs a metadata service: serve one with --meta DIR or name one with --s3-meta URI"
                .into(),
        )
        .into());
    };
    let servers = meta
        .servers()
        .context("cannot list the deployment's object servers")?;
    if let (true, Some(addr)) = (servers.is_empty(), server.object_addrs().first()) {
        let mut uri = super::object_uri(addr, tls.mode);
        // A TLS-only listener is reached with TLS, trusting the CA of the
        // server's own certificate directory.
        if let (TlsMode::Require, Some(dir)) = (tls.mode, &tls.certificates) {
            uri.push_str(&format!("?tls-certificates={}", dir.display()));
        }
        meta.add_server(&uri)
            .with_context(|| format!("cannot add {uri} to the deployment"))?;
        tracing::info!(server = %uri, "S3: this server's objects added to the empty deployment");
    }
    Ok(meta)
}

/// Binds the S3 endpoint `config` describes, with the `keys` that
/// [`keys_before_start`] read: HTTPS with the server's
/// certificate directory when TLS is on (`--tls on` also answers plain
/// HTTP on the same port, `--tls require` does not).
pub(crate) fn bind(
    config: &S3Config,
    keys: Vec<AccessKey>,
    server: &Server,
    tls: &TlsConfig,
) -> Result<S3Endpoint> {
    let credentials = sluice_server::server_tls_config(tls)
        .context("cannot load the TLS credentials for the S3 endpoint")?;
    let options = S3Options {
        keys,
        layout: LayoutOptions {
            stripe_unit: config
                .stripe_unit
                .map_or(LayoutOptions::default().stripe_unit, |b| b.0),
            stripe_count: config.stripe_count,
        },
        objects: cli_options(),
        tls: credentials,
        plain_too: tls.mode == TlsMode::On,
        domain: config.domain.clone(),
        ..S3Options::default()
    };
    let meta = meta(config, server, tls)?;
    Ok(S3Endpoint::bind(config.listen, meta, options)?)
}
