//! The targets of `sluice bench s3`: an S3 endpoint (requests presigned
//! with rusty-s3, sent with ureq, one connection per client thread), or
//! sluice's native protocol (a `StripedClient` per client thread over the
//! metadata service a `sluice://` URI names), and the one operation each
//! client thread repeats.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rusty_s3::actions::ListObjectsV2;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use sluice_client::obj::{ObjOptions, RemoteMetaStore, Segment};
use sluice_client::striped::{Pattern, StripedClient, StripedWrite};
use sluice_client::ObjUri;
use sluice_meta::MetaStore;

/// How long each presigned URL is valid.
const EXPIRES: Duration = Duration::from_secs(600);
/// The bytes a native put writes, and a native get reads, per call (what
/// the S3 endpoint hands its striped client per call too).
const CHUNK: usize = 4 << 20;
/// Keys per LIST page.
const PAGE: usize = 1000;

/// What a target is, parsed from the command line.
#[derive(Debug, Clone)]
pub enum Kind {
    /// An S3 endpoint and one access key.
    S3 {
        /// `http://HOST:PORT`.
        endpoint: url::Url,
        /// Access key ID.
        key: String,
        /// Secret access key.
        secret: String,
    },
    /// sluice's native protocol: striped objects through the metadata
    /// service at this `sluice://` URI.
    Native {
        /// The metadata URI.
        meta: String,
    },
}

/// One target: a label, what it is, and the server processes whose CPU
/// is its server CPU.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    /// Its name in the tables.
    pub label: String,
    /// S3 or native.
    pub kind: Kind,
    /// Server processes (utime + stime from /proc/PID/stat).
    pub pids: Vec<u32>,
}

impl TargetSpec {
    /// `LABEL,URL,KEY_FILE[,PID[+PID...]]`, the key file holding
    /// `ACCESS_KEY_ID SECRET` on its first line that is not a comment.
    pub fn parse_s3(spec: &str) -> Result<Self, String> {
        let parts: Vec<&str> = spec.split(',').collect();
        let [label, url, keys, rest @ ..] = parts.as_slice() else {
            return Err(format!(
                "--s3 {spec}: give LABEL,URL,KEY_FILE[,PID[+PID...]]"
            ));
        };
        let endpoint: url::Url = url
            .parse()
            .map_err(|e| format!("--s3 {spec}: {url}: {e}"))?;
        let text = std::fs::read_to_string(keys)
            .map_err(|e| format!("--s3 {spec}: cannot read {keys}: {e}"))?;
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| format!("--s3 {spec}: no key in {keys}"))?;
        let (key, secret) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("--s3 {spec}: {keys}: want ACCESS_KEY_ID SECRET"))?;
        Ok(Self {
            label: (*label).to_owned(),
            kind: Kind::S3 {
                endpoint,
                key: key.to_owned(),
                secret: secret.trim().to_owned(),
            },
            pids: parse_pids(spec, rest)?,
        })
    }

    /// `LABEL,META_URI[,PID[+PID...]]`.
    pub fn parse_native(spec: &str) -> Result<Self, String> {
        let parts: Vec<&str> = spec.split(',').collect();
        let [label, meta, rest @ ..] = parts.as_slice() else {
            return Err(format!(
                "--native {spec}: give LABEL,META_URI[,PID[+PID...]]"
            ));
        };
        Ok(Self {
            label: (*label).to_owned(),
            kind: Kind::Native {
                meta: (*meta).to_owned(),
            },
            pids: parse_pids(spec, rest)?,
        })
    }

    /// Whether it answers LIST (native targets do puts and gets only).
    pub fn lists(&self) -> bool {
        matches!(self.kind, Kind::S3 { .. })
    }
}

fn parse_pids(spec: &str, rest: &[&str]) -> Result<Vec<u32>, String> {
    match rest {
        [] => Ok(Vec::new()),
        [pids] => pids
            .split('+')
            .map(|p| p.parse().map_err(|e| format!("{spec}: PID {p}: {e}")))
            .collect(),
        _ => Err(format!("{spec}: too many fields")),
    }
}

/// A connected target, shared by its client threads.
pub(super) enum Target {
    /// An S3 bucket.
    S3 {
        /// The bucket (path-style).
        bucket: Bucket,
        /// The key.
        creds: Credentials,
    },
    /// The metadata service of a sluice deployment.
    Native {
        /// Shared by every client thread's `StripedClient`.
        meta: Arc<dyn MetaStore>,
        /// Object servers to stripe over.
        servers: usize,
        /// Before every key (`BUCKET.native/`).
        prefix: String,
    },
}

/// One client thread's connection(s).
pub(super) enum Client<'a> {
    /// One HTTP agent (keep-alive: one connection at a time).
    S3 {
        /// The target.
        target: &'a Target,
        /// The agent.
        agent: ureq::Agent,
    },
    /// Its own striped client.
    Native {
        /// The client.
        client: Box<StripedClient>,
        /// Object servers to stripe over.
        servers: usize,
        /// Before every key.
        prefix: &'a str,
    },
}

fn options() -> ObjOptions {
    ObjOptions {
        connect_timeout: Duration::from_secs(10),
        request_timeout: Some(Duration::from_secs(300)),
        ..ObjOptions::default()
    }
}

impl Target {
    /// Connects to `spec` and makes sure `bucket` exists (S3).
    pub(super) fn open(spec: &TargetSpec, bucket: &str) -> Result<Self> {
        match &spec.kind {
            Kind::S3 {
                endpoint,
                key,
                secret,
            } => {
                let b = Bucket::new(
                    endpoint.clone(),
                    UrlStyle::Path,
                    bucket.to_owned(),
                    "us-east-1",
                )
                .with_context(|| format!("{}: bucket {bucket}", spec.label))?;
                let target = Self::S3 {
                    bucket: b,
                    creds: Credentials::new(key.clone(), secret.clone()),
                };
                target.create_bucket(&spec.label)?;
                Ok(target)
            }
            Kind::Native { meta } => {
                let uri: ObjUri = meta
                    .parse()
                    .map_err(|e| anyhow!("{}: {meta}: {e}", spec.label))?;
                let store = RemoteMetaStore::connect(uri, options())
                    .with_context(|| format!("{}: metadata service {meta}", spec.label))?;
                let servers = store.servers()?.len().max(1);
                Ok(Self::Native {
                    meta: Arc::new(store),
                    servers,
                    prefix: format!("{bucket}.native/"),
                })
            }
        }
    }

    fn create_bucket(&self, label: &str) -> Result<()> {
        let Self::S3 { bucket, creds } = self else {
            return Ok(());
        };
        let url = bucket.create_bucket(creds).sign(EXPIRES);
        let agent = agent();
        let resp = agent
            .put(url.as_str())
            .send_empty()
            .with_context(|| format!("{label}: create the bucket"))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let body = resp.into_body().read_to_string().unwrap_or_default();
            // An existing bucket of ours is fine.
            if !body.contains("BucketAlreadyOwnedByYou") && !body.contains("BucketAlreadyExists") {
                bail!("{label}: create the bucket: HTTP {status}: {body}");
            }
        }
        Ok(())
    }

    /// A client for one thread.
    pub(super) fn client(&self) -> Client<'_> {
        match self {
            Self::S3 { .. } => Client::S3 {
                target: self,
                agent: agent(),
            },
            Self::Native {
                meta,
                servers,
                prefix,
            } => Client::Native {
                client: Box::new(StripedClient::new(Arc::clone(meta), options())),
                servers: *servers,
                prefix,
            },
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(300)))
        .max_idle_connections(256)
        .max_idle_connections_per_host(256)
        .build()
        .into()
}

fn check(status: u16, what: &str, key: &str) -> Result<()> {
    if status == 200 || status == 204 {
        Ok(())
    } else {
        bail!("{what} {key}: HTTP {status}")
    }
}

impl Client<'_> {
    /// Writes `data` as object `key`.
    pub(super) fn put(&mut self, key: &str, data: &[u8]) -> Result<()> {
        match self {
            Client::S3 { target, agent } => {
                let Target::S3 { bucket, creds } = target else {
                    unreachable!("an S3 client holds an S3 target");
                };
                let url = bucket.put_object(Some(creds), key).sign(EXPIRES);
                let resp = agent.put(url.as_str()).send(data)?;
                let status = resp.status().as_u16();
                // Read the (empty) body so the connection is reused.
                let _ = resp.into_body().read_to_vec();
                check(status, "PUT", key)
            }
            Client::Native {
                client,
                servers,
                prefix,
            } => {
                // The S3 endpoint's layout: 1 MiB stripe unit, every
                // object server, the deployment's default redundancy.
                let name = format!("{prefix}{key}");
                let shape = client.default_shape(1 << 20, Some(*servers))?;
                let mut object = client.begin_put(&name, &shape)?;
                let mut at = 0usize;
                while at < data.len() {
                    let n = (data.len() - at).min(CHUNK);
                    let pattern = Pattern::Segments(&[Segment {
                        offset: at as u64,
                        length: n as u64,
                    }]);
                    client.write(
                        &mut object,
                        &pattern,
                        &data[at..at + n],
                        &StripedWrite::default(),
                    )?;
                    at += n;
                }
                client.complete_put(&mut object)?;
                Ok(())
            }
        }
    }

    /// Reads object `key` whole; its length.
    pub(super) fn get(&mut self, key: &str, scratch: &mut [u8]) -> Result<u64> {
        match self {
            Client::S3 { target, agent } => {
                let Target::S3 { bucket, creds } = target else {
                    unreachable!("an S3 client holds an S3 target");
                };
                let url = bucket.get_object(Some(creds), key).sign(EXPIRES);
                let resp = agent.get(url.as_str()).call()?;
                check(resp.status().as_u16(), "GET", key)?;
                let mut body = resp.into_body();
                let mut reader = body.with_config().limit(u64::MAX).reader();
                let mut total = 0u64;
                loop {
                    let n = reader.read(scratch)?;
                    if n == 0 {
                        return Ok(total);
                    }
                    total += n as u64;
                }
            }
            Client::Native { client, prefix, .. } => {
                let mut object = client.open(&format!("{prefix}{key}"))?;
                let size = object.size();
                let mut at = 0u64;
                while at < size {
                    let length = (size - at).min(CHUNK as u64);
                    let read =
                        client.read(&mut object, &Pattern::Contiguous { offset: at, length })?;
                    at += read.data.len().max(1) as u64;
                }
                Ok(size)
            }
        }
    }

    /// Removes object `key`; a missing one is no error.
    pub(super) fn delete(&mut self, key: &str) -> Result<()> {
        match self {
            Client::S3 { target, agent } => {
                let Target::S3 { bucket, creds } = target else {
                    unreachable!("an S3 client holds an S3 target");
                };
                let url = bucket.delete_object(Some(creds), key).sign(EXPIRES);
                let resp = agent.delete(url.as_str()).call()?;
                let status = resp.status().as_u16();
                let _ = resp.into_body().read_to_vec();
                if status == 404 {
                    return Ok(());
                }
                check(status, "DELETE", key)
            }
            Client::Native { client, prefix, .. } => {
                let name = format!("{prefix}{key}");
                if client.stat(&name).is_err() {
                    // Never written (or already gone): nothing to remove.
                    return Ok(());
                }
                Ok(client.remove(&name)?)
            }
        }
    }

    /// Lists every key under `prefix`, a page of 1000 at a time; how many.
    pub(super) fn list(&mut self, prefix: &str) -> Result<u64> {
        let Client::S3 { target, agent } = self else {
            bail!("LIST is an S3 case");
        };
        let Target::S3 { bucket, creds } = target else {
            unreachable!("an S3 client holds an S3 target");
        };
        let mut token: Option<String> = None;
        let mut keys = 0u64;
        loop {
            let mut action = ListObjectsV2::new(bucket, Some(creds));
            action.with_prefix(prefix);
            action.with_max_keys(PAGE);
            if let Some(t) = &token {
                action.with_continuation_token(t.clone());
            }
            let url = action.sign(EXPIRES);
            let resp = agent.get(url.as_str()).call()?;
            check(resp.status().as_u16(), "LIST", prefix)?;
            let text = resp.into_body().read_to_string()?;
            let page = ListObjectsV2::parse_response(&text)
                .map_err(|e| anyhow!("LIST {prefix}: a page that does not parse: {e}"))?;
            keys += page.contents.len() as u64;
            match page.next_continuation_token {
                Some(t) => token = Some(t),
                None => return Ok(keys),
            }
        }
    }
}
