//! The blocking side: striped objects through a small pool of
//! [`StripedClient`]s, each call run on tokio's blocking pool
//! ([`Store::run`]), and the S3 attributes an entry carries.
//!
//! Attributes of an object's entry: [`ATTR_ETAG`] (the ETag's text,
//! without quotes), [`ATTR_MTIME`] (milliseconds since the epoch, as
//! decimal text), the system headers under `s3.` ([`SYSTEM_HEADERS`]),
//! and each `x-amz-meta-NAME` as [`ATTR_META`]`NAME`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_client::obj::ObjOptions;
use sluice_client::striped::{Shape, StripedClient, StripedError};
use sluice_meta::{Entry, EntryState, MetaError, MetaStore};

use crate::error::{not_found_or, GatewayError};
use crate::names::{bucket_prefix, check_bucket, marker, object_name, BUCKET_MARKERS};

/// The ETag of the object's data (hex MD5 for a single-part put).
pub(crate) const ATTR_ETAG: &str = "s3.etag";
/// When the object (or bucket) was made, in milliseconds since the epoch.
pub(crate) const ATTR_MTIME: &str = "s3.mtime";
/// The prefix of user metadata (`x-amz-meta-*`).
pub(crate) const ATTR_META: &str = "s3.meta.";
/// The system headers kept, each as `s3.HEADER`.
pub(crate) const SYSTEM_HEADERS: [&str; 5] = [
    "content-type",
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
];

/// How new objects are laid out.
#[derive(Debug, Clone)]
pub struct LayoutOptions {
    /// Bytes per stripe unit (a power of two, at least 4 KiB).
    pub stripe_unit: u64,
    /// Object servers each object spans; `None`: all of the deployment's.
    pub stripe_count: Option<usize>,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        Self {
            stripe_unit: 1 << 20,
            stripe_count: None,
        }
    }
}

/// The metadata service and the clients that reach the object servers.
pub(crate) struct Store {
    pub(crate) meta: Arc<dyn MetaStore>,
    options: ObjOptions,
    layout: LayoutOptions,
    idle: Mutex<Vec<StripedClient>>,
}

/// Most idle clients kept (each keeps its connections to the servers).
const MAX_IDLE: usize = 32;

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A text attribute.
pub(crate) fn text_attr(entry: &Entry, name: &str) -> Option<String> {
    entry
        .attrs
        .get(name)
        .and_then(|v| String::from_utf8(v.clone()).ok())
}

/// The entry's [`ATTR_MTIME`] (0 when missing).
pub(crate) fn mtime_ms(entry: &Entry) -> u64 {
    text_attr(entry, ATTR_MTIME)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

impl Store {
    pub(crate) fn new(
        meta: Arc<dyn MetaStore>,
        options: ObjOptions,
        layout: LayoutOptions,
    ) -> Self {
        Self {
            meta,
            options,
            layout,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn take_client(&self) -> StripedClient {
        let idle = self.idle.lock().map(|mut v| v.pop());
        match idle {
            Ok(Some(c)) => c,
            _ => StripedClient::new(Arc::clone(&self.meta), self.options.clone()),
        }
    }

    fn give_back(&self, client: StripedClient) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < MAX_IDLE {
                idle.push(client);
            }
        }
    }

    /// Runs `f` with a client on tokio's blocking pool. A client whose
    /// call failed is dropped (its connections may be broken), not kept.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T, GatewayError>
    where
        T: Send + 'static,
        F: FnOnce(&Self, &mut StripedClient) -> Result<T, GatewayError> + Send + 'static,
    {
        let store = Arc::clone(self);
        tokio::task::spawn_blocking(move || store.with_client(f))
            .await
            .map_err(|e| GatewayError::Worker(e.to_string()))?
    }

    /// Runs `f` with a client on this thread (see [`Store::run`]).
    pub(crate) fn with_client<T>(
        &self,
        f: impl FnOnce(&Self, &mut StripedClient) -> Result<T, GatewayError>,
    ) -> Result<T, GatewayError> {
        let mut client = self.take_client();
        let r = f(self, &mut client);
        if r.is_ok() {
            self.give_back(client);
        }
        r
    }

    /// How many servers a new object spans.
    pub(crate) fn servers_for_put(&self) -> Result<(u64, usize), GatewayError> {
        let have = self.meta.servers()?.len();
        if have == 0 {
            return Err(GatewayError::NoServers);
        }
        let n = self.layout.stripe_count.unwrap_or(have).clamp(1, have);
        Ok((self.layout.stripe_unit, n))
    }

    /// The marker of `bucket`, which must exist and be ready.
    pub(crate) fn bucket(&self, bucket: &str) -> Result<Entry, GatewayError> {
        let missing = || GatewayError::NoSuchBucket {
            bucket: bucket.to_owned(),
        };
        if check_bucket(bucket).is_err() {
            return Err(missing());
        }
        match self.meta.lookup(&marker(bucket)) {
            Ok(e) if e.state == EntryState::Ready => Ok(e),
            Ok(_) | Err(MetaError::NotFound { .. }) => Err(missing()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every ready bucket marker, in name order, a page at a time.
    pub(crate) fn buckets(&self) -> Result<Vec<(String, u64)>, GatewayError> {
        let mut out = Vec::new();
        for entry in sluice_meta::entries(self.meta.as_ref(), BUCKET_MARKERS) {
            let entry = entry?;
            if entry.state != EntryState::Ready {
                continue;
            }
            let name = entry.name[BUCKET_MARKERS.len()..].to_owned();
            out.push((name, mtime_ms(&entry)));
        }
        Ok(out)
    }

    /// Makes `bucket`'s marker: an empty striped object on one server.
    pub(crate) fn create_bucket(
        &self,
        client: &mut StripedClient,
        bucket: &str,
    ) -> Result<(), GatewayError> {
        check_bucket(bucket)?;
        let (unit, _) = self.servers_for_put()?;
        let name = marker(bucket);
        let mut object = match client.create(&name, &Shape::striped(unit, 1)) {
            Ok(o) => o,
            Err(StripedError::Meta {
                source: MetaError::Exists { .. },
                ..
            }) => {
                return Err(GatewayError::BucketExists {
                    bucket: bucket.to_owned(),
                })
            }
            Err(e) => return Err(e.into()),
        };
        let attrs = BTreeMap::from([(ATTR_MTIME.to_owned(), now_ms().to_string().into_bytes())]);
        client.set_attrs(&mut object, attrs, Vec::new())?;
        Ok(())
    }

    /// Removes `bucket`'s marker, refused while any name (even a put
    /// still writing) is under the bucket.
    pub(crate) fn delete_bucket(
        &self,
        client: &mut StripedClient,
        bucket: &str,
    ) -> Result<(), GatewayError> {
        self.bucket(bucket)?;
        let page = self.meta.list(&bucket_prefix(bucket), None, 1)?;
        if !page.entries.is_empty() {
            return Err(GatewayError::BucketNotEmpty {
                bucket: bucket.to_owned(),
            });
        }
        client.remove(&marker(bucket)).map_err(|e| {
            not_found_or(e, || GatewayError::NoSuchBucket {
                bucket: bucket.to_owned(),
            })
        })
    }

    /// The ready entry of `key` in `bucket`; an entry not ready (a put
    /// still writing, a removal under way) is as good as missing.
    pub(crate) fn object(&self, bucket: &str, key: &str) -> Result<Entry, GatewayError> {
        let name = object_name(bucket, key)?;
        match self.meta.lookup(&name) {
            Ok(e) if e.state == EntryState::Ready => return Ok(e),
            Ok(_) | Err(MetaError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.bucket(bucket)?;
        Err(GatewayError::NoSuchKey {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        })
    }

    /// Removes `key` from `bucket`; a key that is not there is not an
    /// error (S3's delete is idempotent), a bucket that is not there is.
    pub(crate) fn delete_object(
        &self,
        client: &mut StripedClient,
        bucket: &str,
        key: &str,
    ) -> Result<(), GatewayError> {
        let name = object_name(bucket, key)?;
        match client.remove(&name) {
            Ok(()) => Ok(()),
            Err(StripedError::Meta {
                source: MetaError::NotFound { .. },
                ..
            }) => self.bucket(bucket).map(drop),
            Err(e) => Err(e.into()),
        }
    }
}
