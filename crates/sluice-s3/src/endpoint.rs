//! The listener: bound at [`S3Endpoint::bind`] (so a busy port fails the
//! start and the address is known before anything is printed), then
//! served by [`S3Endpoint::start`] on a thread running a tokio runtime of
//! its own, until [`RunningS3::stop`].
//!
//! Every request gets one access log line at info level under the target
//! `sluice_s3::access`: the operation (named from the method, path and
//! query as S3 routes them), bucket, key, status, bytes in and out (as
//! the Content-Length headers say; `-` for streamed bodies of unknown
//! length) and duration. The same counts go to [`S3Metrics`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};
use sluice_client::obj::ObjOptions;
use sluice_meta::MetaStore;
use thiserror::Error;

use crate::host::{Domain, DomainError};
use crate::keys::AccessKey;
use crate::metrics::{Request, S3Metrics};
use crate::ops::Gateway;
use crate::store::{LayoutOptions, Store};

/// The S3 endpoint's port when none is given (beside NBD's 10809 and the
/// object protocol's 10810).
pub const DEFAULT_S3_PORT: u16 = 10811;

/// How the endpoint runs.
#[derive(Debug, Clone)]
pub struct S3Options {
    /// The access keys requests must be signed with (at least one).
    pub keys: Vec<AccessKey>,
    /// Layout of new objects.
    pub layout: LayoutOptions,
    /// Connections to the object servers.
    pub objects: ObjOptions,
    /// Threads running the HTTP side (the blocking striped calls run on
    /// tokio's blocking pool beside them).
    pub workers: usize,
    /// HTTPS with these credentials; with `plain_too`, a client whose
    /// first byte is not a TLS handshake's is served plain HTTP on the
    /// same port (the server's `--tls on`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub plain_too: bool,
    /// Virtual-host-style addressing under this domain: `BUCKET.DOMAIN`
    /// names a bucket (path-style requests are served too).
    pub domain: Option<String>,
}

impl Default for S3Options {
    fn default() -> Self {
        Self {
            keys: Vec::new(),
            layout: LayoutOptions::default(),
            objects: ObjOptions::default(),
            workers: 2,
            tls: None,
            plain_too: false,
            domain: None,
        }
    }
}

/// Why the endpoint could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum S3StartError {
    #[error("the S3 endpoint has no access keys (give a key file)")]
    NoKeys,
    #[error("cannot listen for S3 on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the S3 endpoint's threads")]
    Runtime(#[source] std::io::Error),
    #[error("the S3 endpoint's virtual-host domain is not valid")]
    Domain(#[from] DomainError),
}

/// A bound S3 endpoint, not yet serving.
pub struct S3Endpoint {
    listener: std::net::TcpListener,
    addr: SocketAddr,
    service: S3Service,
    metrics: Arc<S3Metrics>,
    workers: usize,
    tls: Option<Tls>,
    domain: Option<Domain>,
}

/// How connections are taken: TLS, and plain ones too or not.
#[derive(Clone)]
struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    plain_too: bool,
}

impl std::fmt::Debug for S3Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Endpoint")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl S3Endpoint {
    /// Binds `addr` for the S3 API over the deployment `meta` describes.
    pub fn bind(
        addr: SocketAddr,
        meta: Arc<dyn MetaStore>,
        options: S3Options,
    ) -> Result<Self, S3StartError> {
        if options.keys.is_empty() {
            return Err(S3StartError::NoKeys);
        }
        let bind_err = |source| S3StartError::Bind { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let store = Arc::new(Store::new(meta, options.objects, options.layout));
        let tls = options.tls.map(|config| {
            let mut config = (*config).clone();
            config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            Tls {
                acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
                plain_too: options.plain_too,
            }
        });
        let domain = options.domain.as_deref().map(Domain::new).transpose()?;
        let mut builder = S3ServiceBuilder::new(Gateway { store });
        if let Some(d) = &domain {
            builder.set_host(d.clone());
        }
        let mut auth = SimpleAuth::new();
        for key in options.keys {
            auth.register(key.id, key.secret.into());
        }
        builder.set_auth(auth);
        Ok(Self {
            listener,
            addr,
            service: builder.build(),
            metrics: Arc::new(S3Metrics::default()),
            tls,
            workers: options.workers.max(1),
            domain,
        })
    }

    /// The address bound (its port chosen by the system for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether clients must use HTTPS.
    pub fn https(&self) -> bool {
        self.tls.is_some()
    }

    /// Its metrics per operation (render them into a scrape with
    /// [`S3Metrics::render`]).
    pub fn metrics(&self) -> Arc<S3Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Serves on a thread of its own until [`RunningS3::stop`].
    pub fn start(self) -> Result<RunningS3, S3StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(self.workers)
            .thread_name("sluice-s3")
            .enable_all()
            .build()
            .map_err(S3StartError::Runtime)?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let addr = self.addr;
        let https = self.tls.is_some();
        let thread = std::thread::Builder::new()
            .name("sluice-s3-accept".into())
            .spawn(move || {
                let served = Served {
                    service: self.service,
                    metrics: self.metrics,
                    tls: self.tls,
                    domain: self.domain.map(Arc::new),
                };
                runtime.block_on(serve(self.listener, served, stopped));
                // Requests still running get a moment to finish.
                runtime.shutdown_timeout(std::time::Duration::from_secs(5));
            })
            .map_err(S3StartError::Runtime)?;
        Ok(RunningS3 {
            addr,
            https,
            stop,
            thread: Some(thread),
        })
    }
}

/// A serving endpoint; stopped when dropped.
#[derive(Debug)]
pub struct RunningS3 {
    addr: SocketAddr,
    https: bool,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningS3 {
    /// The address it serves.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients reach it at: `https://` when TLS is configured.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// Stops accepting, lets requests under way finish (for at most a few
    /// seconds), and returns once the endpoint's threads are gone.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the S3 endpoint's thread panicked");
            }
        }
    }
}

impl Drop for RunningS3 {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// What each connection is served with.
#[derive(Clone)]
struct Served {
    service: S3Service,
    metrics: Arc<S3Metrics>,
    tls: Option<Tls>,
    domain: Option<Arc<Domain>>,
}

async fn serve(
    listener: std::net::TcpListener,
    served: Served,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "the S3 listener cannot be served");
            return;
        }
    };
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped.changed() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "S3 accept failed");
                continue;
            }
        };
        tokio::spawn(connection(stream, peer, served.clone()));
    }
}

/// Serves one connection: TLS first when configured (a plain one too
/// with `plain_too`, told apart by its first byte: 0x16 begins every TLS
/// handshake, never an HTTP request).
async fn connection(stream: tokio::net::TcpStream, peer: SocketAddr, served: Served) {
    // Replies go out as a head and then a body in separate writes: with
    // Nagle's algorithm on, a small body waits for the ACK of the head,
    // which a client's delayed ACK holds back 40 ms.
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(%peer, error = %e, "S3 connection: cannot set TCP_NODELAY");
    }
    let tls = match &served.tls {
        None => None,
        Some(tls) if tls.plain_too => {
            let mut first = [0u8; 1];
            match stream.peek(&mut first).await {
                Ok(1) if first[0] == 0x16 => Some(tls.acceptor.clone()),
                Ok(_) => None,
                Err(_) => return,
            }
        }
        Some(tls) => Some(tls.acceptor.clone()),
    };
    let Served {
        service,
        metrics,
        domain,
        ..
    } = served;
    let logged = hyper::service::service_fn(move |req| {
        logged_call(
            service.clone(),
            Arc::clone(&metrics),
            domain.clone(),
            peer,
            req,
        )
    });
    let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let served = match tls {
        None => conn.serve_connection(TokioIo::new(stream), logged).await,
        Some(acceptor) => match acceptor.accept(stream).await {
            Ok(tls) => conn.serve_connection(TokioIo::new(tls), logged).await,
            Err(e) => {
                tracing::info!(%peer, error = %e, "S3 TLS handshake failed");
                return;
            }
        },
    };
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "S3 connection ended with an error");
    }
}

/// A request through s3s, its access log line and its metrics.
async fn logged_call(
    service: S3Service,
    metrics: Arc<S3Metrics>,
    domain: Option<Arc<Domain>>,
    peer: SocketAddr,
    req: hyper::Request<Incoming>,
) -> Result<s3s::HttpResponse, s3s::HttpError> {
    let start = Instant::now();
    // A virtual-host request's path, as path-style spells it.
    let host_bucket = domain.as_deref().and_then(|d| {
        let host = req.headers().get(hyper::header::HOST)?.to_str().ok()?;
        d.bucket(host).map(str::to_owned)
    });
    let path = match host_bucket {
        Some(b) => format!("/{b}{}", req.uri().path()),
        None => req.uri().path().to_owned(),
    };
    let query = req.uri().query().unwrap_or("");
    let op = operation(req.method(), &path, query, req.headers());
    let head = req.method() == hyper::Method::HEAD;
    let (bucket, key) = bucket_and_key(&path);
    let (bucket, key) = (bucket.to_owned(), key.to_owned());
    let bytes_in = content_length(req.headers());
    let response = hyper::service::Service::call(&service, req).await;
    let duration = start.elapsed();
    let ms = format!("{:.3}", duration.as_secs_f64() * 1000.0);
    let (status, bytes_out) = match &response {
        Ok(r) => {
            let size = content_length(r.headers())
                .or_else(|| hyper::body::Body::size_hint(r.body()).exact());
            (r.status().as_u16(), if head { Some(0) } else { size })
        }
        Err(_) => (500, None),
    };
    let shown = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    match &response {
        Ok(_) => tracing::info!(
            target: "sluice_s3::access",
            %peer, op, bucket, key, status,
            bytes_in = shown(bytes_in), bytes_out = shown(bytes_out), ms, "s3"
        ),
        Err(e) => tracing::info!(
            target: "sluice_s3::access",
            %peer, op, bucket, key, status, error = ?e, ms, "s3"
        ),
    }
    metrics.record(Request {
        op,
        status,
        bytes_in: bytes_in.unwrap_or(0),
        bytes_out: bytes_out.unwrap_or(0),
        duration,
    });
    response
}

fn content_length(headers: &hyper::HeaderMap) -> Option<u64> {
    headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The bucket and key of a path-style request's path (still
/// percent-encoded, as logged).
fn bucket_and_key(path: &str) -> (&str, &str) {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.split_once('/').unwrap_or((path, ""))
}

/// Subresources of S3 operations sluice does not do: requests naming
/// them are logged and counted as `Other`, not as the plain operation
/// of the same method and path.
const UNSUPPORTED: [&str; 24] = [
    "accelerate",
    "acl",
    "analytics",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "tagging",
    "torrent",
    "versioning",
];

/// The S3 operation a path-style request names, as S3 routes it (for
/// the log; s3s does the real routing).
fn operation(
    method: &hyper::Method,
    path: &str,
    query: &str,
    headers: &hyper::HeaderMap,
) -> &'static str {
    use hyper::Method;
    let has = |k: &str| {
        query
            .split('&')
            .any(|p| p == k || p.starts_with(&format!("{k}=")))
    };
    let (bucket, key) = bucket_and_key(path);
    if UNSUPPORTED.iter().any(|s| has(s)) {
        return "Other";
    }
    match (bucket.is_empty(), key.is_empty(), method) {
        (true, _, &Method::GET) => "ListBuckets",
        (false, true, &Method::PUT) => "CreateBucket",
        (false, true, &Method::HEAD) => "HeadBucket",
        (false, true, &Method::DELETE) => "DeleteBucket",
        (false, true, &Method::POST) if has("delete") => "DeleteObjects",
        (false, true, &Method::GET) if query.contains("list-type=2") => "ListObjectsV2",
        (false, true, &Method::GET) if has("uploads") => "ListMultipartUploads",
        (false, true, &Method::GET) if has("location") => "GetBucketLocation",
        (false, true, &Method::GET) => "ListObjects",
        (false, false, &Method::PUT)
            if has("partNumber") && headers.contains_key("x-amz-copy-source") =>
        {
            "UploadPartCopy"
        }
        (false, false, &Method::PUT) if has("partNumber") => "UploadPart",
        (false, false, &Method::PUT) if headers.contains_key("x-amz-copy-source") => "CopyObject",
        (false, false, &Method::PUT) => "PutObject",
        (false, false, &Method::GET) => "GetObject",
        (false, false, &Method::HEAD) => "HeadObject",
        (false, false, &Method::DELETE) if has("uploadId") => "AbortMultipartUpload",
        (false, false, &Method::DELETE) => "DeleteObject",
        (false, false, &Method::POST) if has("uploads") => "CreateMultipartUpload",
        (false, false, &Method::POST) if has("uploadId") => "CompleteMultipartUpload",
        _ => "Other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_from_method_path_and_query() {
        let op = |m: &str, uri: &str| {
            let method: hyper::Method = m.parse().expect("method");
            let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
            operation(&method, path, query, &hyper::HeaderMap::new())
        };
        assert_eq!(op("GET", "/"), "ListBuckets");
        assert_eq!(op("PUT", "/b"), "CreateBucket");
        assert_eq!(op("GET", "/b?list-type=2&prefix=a"), "ListObjectsV2");
        assert_eq!(op("GET", "/b/"), "ListObjects");
        assert_eq!(op("POST", "/b?delete"), "DeleteObjects");
        assert_eq!(op("PUT", "/b/k/x"), "PutObject");
        assert_eq!(op("HEAD", "/b/k"), "HeadObject");
        assert_eq!(op("PUT", "/b?versioning"), "Other");
        assert_eq!(op("GET", "/b/k?tagging"), "Other");
        assert_eq!(bucket_and_key("/b/k/x"), ("b", "k/x"));
    }
}
