//! Starting a server (TLS, listeners on `listen.rs`'s sockets, exports,
//! each listener's protocol), the accept loop, connection threads and
//! graceful shutdown.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use thiserror::Error;
use tracing::{debug, error, info, info_span, warn};

use crate::config::{ListenAddr, ObjectConfig, ServerConfig, TlsIdentity, DEFAULT_PARTITION};
use crate::driver::pool::IoPool;
use crate::driver::{ConnectionHandler, DriverEnv};
use crate::export::{Export, ExportRegistry};
use crate::listen::{bind_metrics_listener, ListenSocket, ListenSockets};
use crate::metrics::ServerMetrics;
use crate::nbd::NbdService;
use crate::obj::{ObjService, PartitionPolicy};
use crate::service::{InheritedListeners, ReloadError, Reloadable};
use crate::socket::SocketPathError;
use crate::stop::StopSignal;
use crate::stream::Stream;
use crate::tls::{handshake_policy, AccessPolicy, TlsAcceptor, TlsSetupError};

/// How long shutdown waits for connections to finish in-flight requests
/// before it also closes their write side.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why the server could not start or stop cleanly.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("no exports configured")]
    NoExports,
    #[error("no listen address configured")]
    NoListeners,
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot open export {name:?}")]
    OpenExport {
        name: String,
        source: crate::export::ExportOpenError,
    },
    #[error("cannot listen on {addr}")]
    Bind { addr: String, source: io::Error },
    #[error(transparent)]
    SocketPath(#[from] SocketPathError),
    #[error(transparent)]
    Activation(#[from] crate::service::ActivationError),
    #[error("cannot start server threads: {0}")]
    Threads(io::Error),
    #[error("accept loop failed: {0}")]
    Accept(io::Error),
    #[error("cannot set up TLS: {0}")]
    Tls(TlsSetupError),
    #[error("cannot open the metadata service in {dir}")]
    OpenMeta {
        dir: PathBuf,
        source: sluice_meta::MetaError,
    },
    #[error("cannot open the {what} in {dir}")]
    Lock {
        what: &'static str,
        dir: PathBuf,
        source: sluice_storage::lock::LockError,
    },
    #[error("cannot open the object store in {dir}")]
    OpenObjects {
        dir: PathBuf,
        source: sluice_objstore::ObjStoreError,
    },
    #[error(transparent)]
    Admin(#[from] crate::admin::AdminError),
    #[error("flushing the object store at shutdown failed")]
    FlushObjects(#[source] sluice_objstore::ObjStoreError),
    #[error("flushing export {name:?} at shutdown failed")]
    Flush {
        name: String,
        source: sluice_storage::DeviceError,
    },
}

// Not `#[from]`: that would make the TLS error a `source` too, and the
// binary's error chain would print it twice.
impl From<TlsSetupError> for ServerError {
    fn from(e: TlsSetupError) -> Self {
        Self::Tls(e)
    }
}

/// Opens the object store and makes sure the default and the configured
/// partitions exist.
fn open_objects(config: &ObjectConfig) -> Result<Objects, ServerError> {
    let open_err = |source| ServerError::OpenObjects {
        dir: config.dir.clone(),
        source,
    };
    // Locked before the store replays its journal: another server may
    // be serving this directory.
    let lock = lock_dir("object store", &config.dir)?;
    let store = sluice_objstore::ObjectStore::open(&config.dir).map_err(open_err)?;
    let mut partitions = vec![DEFAULT_PARTITION];
    for &p in &config.partitions {
        if !partitions.contains(&p) {
            partitions.push(p);
        }
    }
    for &p in &partitions {
        match store.create_partition(sluice_objstore::PartitionId(p)) {
            Ok(()) | Err(sluice_objstore::ObjStoreError::PartitionExists { .. }) => {}
            Err(e) => return Err(open_err(e)),
        }
    }
    info!(dir = %config.dir.display(), partitions = ?partitions, "object store open");
    Ok(Objects {
        store: Arc::new(store),
        partitions,
        locks: vec![lock],
    })
}

/// Creates `dir` if missing and locks it for this process (a [`ServerError::Lock`]
/// naming the process that holds it otherwise); `what` names it in errors.
fn lock_dir(what: &'static str, dir: &Path) -> Result<std::fs::File, ServerError> {
    let err = |source| ServerError::Lock {
        what,
        dir: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|source| {
        err(sluice_storage::lock::LockError::Io {
            path: dir.to_owned(),
            source,
        })
    })?;
    sluice_storage::lock::lock_dir(dir, sluice_storage::lock::LockMode::Exclusive).map_err(err)
}

/// Checks the TLS settings against the exports named `names` and loads
/// the credentials, if TLS is configured.
fn load_tls(
    config: &ServerConfig,
    names: &[String],
) -> Result<Option<Arc<TlsAcceptor>>, ServerError> {
    config.tls.validate()?;
    if let Some(name) = config.tls.allow.keys().find(|n| !names.contains(n)) {
        return Err(crate::config::ConfigError::TlsAllowUnknownExport(name.clone()).into());
    }
    Ok(TlsAcceptor::load(&config.tls)?.map(Arc::new))
}

/// What serving both protocols takes: each listener with its protocol,
/// the object store when one is configured, and what a reload replaces.
struct Protocols {
    listeners: Vec<Listener>,
    objects: Option<Objects>,
    /// The metadata service the object listeners serve, if any.
    meta: Option<Arc<dyn sluice_meta::MetaStore>>,
    reloadable: Reloadable,
}

/// Sets up NBD on `nbd_sockets` over `registry`, and the object protocol
/// on `object_sockets` when `config` has an object store (opening it, and
/// its metadata service: `meta` if given, else the one the config names),
/// both with the TLS credentials `tls` and the allow-lists.
fn serve_protocols(
    config: &ServerConfig,
    registry: &Arc<ExportRegistry>,
    tls: Option<Arc<TlsAcceptor>>,
    partition_allow: Option<BTreeMap<u64, Vec<TlsIdentity>>>,
    meta: Option<Arc<dyn sluice_meta::MetaStore>>,
    nbd_sockets: Vec<ListenSocket>,
    object_sockets: Vec<ListenSocket>,
) -> Result<Protocols, ServerError> {
    let tls_policy = handshake_policy(config.tls.mode, tls.as_deref());
    let export_access = Arc::new(AccessPolicy::new(config.tls.allow.clone()));
    let mut partition_policy = None;
    let mut served_meta = None;
    let nbd: Arc<dyn ConnectionHandler> = Arc::new(NbdService {
        registry: Arc::clone(registry),
        tls_policy,
        tls: tls.clone(),
        access: Arc::clone(&export_access),
        fast_paths: config.fast_paths,
    });
    let mut listeners: Vec<Listener> = nbd_sockets
        .into_iter()
        .map(|socket| Listener {
            socket,
            protocol: Arc::clone(&nbd),
        })
        .collect();
    let reload_tls = tls.clone();
    let reload_exports = Arc::clone(&export_access);
    let objects = match &config.objects {
        Some(oc) => {
            let mut objects = open_objects(oc)?;
            let meta = match (meta, &oc.meta) {
                (Some(given), _) => Some(given),
                (None, Some(dir)) => {
                    // The object store's lock covers a metadata service
                    // kept in the same directory.
                    if !same_dir(dir, &oc.dir) {
                        objects.locks.push(lock_dir("metadata service", dir)?);
                    }
                    Some(crate::obj::open_meta(dir)?)
                }
                (None, None) => None,
            };
            served_meta.clone_from(&meta);
            let meta = meta.map(crate::obj::MetaService);
            let partitions = Arc::new(PartitionPolicy::new(partition_allow.unwrap_or_default()));
            partition_policy = Some(Arc::clone(&partitions));
            let obj: Arc<dyn ConnectionHandler> = Arc::new(ObjService {
                store: Arc::clone(&objects.store),
                registry: Arc::clone(registry),
                tls_policy,
                tls,
                partitions,
                export_access,
                limits: oc.published_limits()?,
                meta,
                fast_paths: config.fast_paths,
            });
            listeners.extend(object_sockets.into_iter().map(|socket| Listener {
                socket,
                protocol: Arc::clone(&obj),
            }));
            Some(objects)
        }
        None => None,
    };
    let reloadable = Reloadable {
        mode: config.tls.mode,
        tls: reload_tls,
        exports: reload_exports,
        export_names: registry.all().iter().map(|e| e.name.clone()).collect(),
        partitions: partition_policy,
    };
    Ok(Protocols {
        listeners,
        objects,
        meta: served_meta,
        reloadable,
    })
}

/// A listening socket and the protocol its connections speak.
struct Listener {
    socket: ListenSocket,
    protocol: Arc<dyn ConnectionHandler>,
}

/// State shared between the accept loop, connection threads and handles.
struct Shared {
    stop: Arc<StopSignal>,
    reloadable: Reloadable,
    connections: Mutex<HashMap<u64, Stream>>,
    drained: Condvar,
}

impl Shared {
    fn stop(&self) {
        if self.stop.trigger() {
            info!("shutdown requested: no new connections, finishing in-flight requests");
        }
    }
}

/// Stops a running [`Server`] from any thread (e.g. a signal handler
/// thread). Cloneable.
#[derive(Clone)]
pub struct ServerHandle {
    shared: Arc<Shared>,
}

impl ServerHandle {
    /// Begins a graceful shutdown; [`Server::run`] returns when done.
    pub fn shutdown(&self) {
        self.shared.stop();
    }

    /// Replaces the TLS credentials and the export and partition
    /// allow-lists with those `config` names (the rest of it is ignored),
    /// without dropping connections: sessions running keep theirs, new
    /// ones see the new. On error nothing changes.
    pub fn reload(&self, config: &ServerConfig) -> Result<(), ReloadError> {
        self.shared.reloadable.reload(config)
    }
}

/// The object store a server serves and the partitions it made sure of.
struct Objects {
    store: Arc<sluice_objstore::ObjectStore>,
    partitions: Vec<u64>,
    /// The locks on its directory and the metadata service's, held while
    /// the server runs.
    locks: Vec<std::fs::File>,
}

/// Whether `a` and `b` name one directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// A bound, ready-to-run server: NBD, and the object protocol when an
/// object store is configured.
pub struct Server {
    listeners: Vec<Listener>,
    local_addrs: Vec<ListenAddr>,
    object_addrs: Vec<ListenAddr>,
    objects: Option<Objects>,
    meta: Option<Arc<dyn sluice_meta::MetaStore>>,
    registry: Arc<ExportRegistry>,
    config: ServerConfig,
    shared: Arc<Shared>,
    metrics: Arc<ServerMetrics>,
    metrics_listener: Option<TcpListener>,
    metrics_addr: Option<SocketAddr>,
    admin: Option<crate::admin::AdminSocket>,
}

impl Server {
    /// Checks the configuration, loads the TLS credentials and binds every
    /// listener, then opens every export. Nothing is created on disk until
    /// all of that but the exports has succeeded, and a start that fails
    /// removes the files and sockets it created.
    pub fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        Self::bind_inherited(config, None)
    }

    /// Like [`bind`](Self::bind), serving on `inherited` (sockets a
    /// service manager bound) instead of the configured addresses when
    /// given.
    pub fn bind_inherited(
        config: ServerConfig,
        inherited: Option<InheritedListeners>,
    ) -> Result<Self, ServerError> {
        config.validate()?;
        if config.export.is_empty() && config.objects.is_none() {
            return Err(ServerError::NoExports);
        }
        let names = config.export.iter().map(|e| e.name.clone()).collect();
        Self::bind_then_open(config, names, inherited, None, |config| {
            // Files the exports would create; removed again if the start fails.
            let new_files: Vec<PathBuf> = config
                .export
                .iter()
                .flat_map(|e| e.spec.files())
                .filter(|p| !p.exists())
                .map(Path::to_path_buf)
                .collect();
            let opened = config
                .export
                .iter()
                .map(|e| {
                    Export::open(e, config).map(Arc::new).map_err(|source| {
                        ServerError::OpenExport {
                            name: e.name.clone(),
                            source,
                        }
                    })
                })
                .collect::<Result<Vec<_>, _>>();
            if opened.is_err() {
                for path in &new_files {
                    match std::fs::remove_file(path) {
                        Ok(()) => {
                            info!(path = %path.display(), "start failed: removed the file it created")
                        }
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => {
                            warn!(path = %path.display(), error = %e, "start failed: cannot remove the file it created")
                        }
                    }
                }
            }
            opened
        })
    }

    /// Like [`bind`](Self::bind) with already-built exports (tests, and
    /// exports stacked on other devices).
    pub fn bind_exports(
        config: ServerConfig,
        exports: Vec<Arc<Export>>,
    ) -> Result<Self, ServerError> {
        Self::bind_exports_with_meta(config, exports, None)
    }

    /// Like [`bind_exports`](Self::bind_exports), the object listeners
    /// also serving `meta` as the metadata service of striped objects
    /// (instead of the one `[objects] meta` names).
    pub fn bind_exports_with_meta(
        config: ServerConfig,
        exports: Vec<Arc<Export>>,
        meta: Option<Arc<dyn sluice_meta::MetaStore>>,
    ) -> Result<Self, ServerError> {
        let names = exports.iter().map(|e| e.name.clone()).collect();
        Self::bind_then_open(config, names, None, meta, move |_| Ok(exports))
    }

    /// Everything that can fail without touching the disk (TLS, every
    /// listener), then `open` for the exports named `names`.
    fn bind_then_open(
        config: ServerConfig,
        names: Vec<String>,
        inherited: Option<InheritedListeners>,
        meta: Option<Arc<dyn sluice_meta::MetaStore>>,
        open: impl FnOnce(&ServerConfig) -> Result<Vec<Arc<Export>>, ServerError>,
    ) -> Result<Self, ServerError> {
        let object_listen = config.objects.as_ref().map_or(0, |o| o.listen.len());
        let listeners = inherited
            .as_ref()
            .map_or(config.listen.len() + object_listen, |i| {
                i.nbd.len() + i.objects.len()
            });
        if listeners == 0 {
            return Err(ServerError::NoListeners);
        }
        let tls = load_tls(&config, &names)?;
        let partition_allow = config
            .objects
            .as_ref()
            .map(|oc| oc.partition_allow())
            .transpose()?;
        let sockets = ListenSockets::bind(&config, inherited)?;
        let (metrics_listener, metrics_addr) = bind_metrics_listener(config.metrics)?.unzip();
        let admin = match &config.admin {
            Some(ListenAddr::Unix(path)) => Some(crate::admin::AdminSocket::bind(path)?),
            Some(ListenAddr::Tcp(a)) => {
                return Err(crate::config::ConfigError::AdminNotUnix(a.to_string()).into())
            }
            None => None,
        };
        let stop = Arc::new(StopSignal::new().map_err(ServerError::Threads)?);
        let exports = open(&config)?;
        let registry =
            Arc::new(ExportRegistry::new(exports).with_max_payload(config.limits.max_payload()));
        let protocols = serve_protocols(
            &config,
            &registry,
            tls,
            partition_allow,
            meta,
            sockets.nbd,
            sockets.objects,
        )?;
        Ok(Self {
            listeners: protocols.listeners,
            local_addrs: sockets.nbd_addrs,
            object_addrs: sockets.object_addrs,
            objects: protocols.objects,
            meta: protocols.meta,
            registry,
            config,
            metrics: Arc::new(ServerMetrics::default()),
            metrics_listener,
            metrics_addr,
            admin,
            shared: Arc::new(Shared {
                stop,
                reloadable: protocols.reloadable,
                connections: Mutex::new(HashMap::new()),
                drained: Condvar::new(),
            }),
        })
    }

    /// The addresses actually bound (port 0 resolved).
    pub fn local_addrs(&self) -> &[ListenAddr] {
        &self.local_addrs
    }

    /// The object protocol's addresses actually bound (port 0 resolved);
    /// empty without an object store.
    pub fn object_addrs(&self) -> &[ListenAddr] {
        &self.object_addrs
    }

    /// The metadata service of striped objects the object listeners
    /// serve (`--meta`), if any: the S3 endpoint of the same process
    /// uses it directly.
    pub fn meta_store(&self) -> Option<Arc<dyn sluice_meta::MetaStore>> {
        self.meta.clone()
    }

    /// Where the metrics endpoint listens, if configured.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The server's metrics (also served on the metrics endpoint).
    pub fn metrics(&self) -> Arc<ServerMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The exports being served.
    pub fn exports(&self) -> &[Arc<Export>] {
        self.registry.all()
    }

    /// A handle that can stop the server.
    pub fn handle(&self) -> ServerHandle {
        ServerHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Serves until [`ServerHandle::shutdown`]: then stops accepting,
    /// lets connections finish their in-flight requests, flushes every
    /// export and returns.
    pub fn run(mut self) -> Result<(), ServerError> {
        let pool = Arc::new(IoPool::new(self.config.io_threads).map_err(ServerError::Threads)?);
        let metrics_endpoint = self.start_metrics_endpoint()?;
        let admin = match self.admin.take() {
            Some(socket) => Some(
                socket
                    .serve(Arc::clone(&self.registry), Arc::clone(&self.shared.stop))
                    .map_err(ServerError::Threads)?,
            ),
            None => None,
        };
        let env = Arc::new(DriverEnv {
            pool,
            metrics: Arc::clone(&self.metrics),
            stop: Arc::clone(&self.shared.stop),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pipeline: self.config.pipeline,
            timeouts: self.config.timeouts,
            receive: self.config.receive,
            limits: self.config.limits,
        });
        let result = self.accept_loop(&env);
        self.drain_connections();
        if let Some((http, thread)) = metrics_endpoint {
            http.unblock();
            let _ = thread.join();
        }
        if let Some(thread) = admin {
            let _ = thread.join();
        }
        drop(env);
        let mut flush_result = Ok(());
        for export in self.registry.all() {
            if let Err(source) = export.device.flush() {
                error!(export = %export.name, error = &source as &dyn std::error::Error, "flush at shutdown failed");
                flush_result = Err(ServerError::Flush {
                    name: export.name.clone(),
                    source,
                });
            }
        }
        if let Some(objects) = &self.objects {
            for &p in &objects.partitions {
                let flushed = objects
                    .store
                    .flush_partition(sluice_objstore::PartitionId(p));
                if let Err(e) = flushed {
                    error!(partition = p, error = %e, "object store flush at shutdown failed");
                    flush_result = Err(ServerError::FlushObjects(e));
                }
            }
        }
        info!("server stopped");
        result.and(flush_result)
    }

    /// Serves `GET /metrics` on the configured address, if any.
    #[allow(clippy::type_complexity)]
    fn start_metrics_endpoint(
        &self,
    ) -> Result<Option<(Arc<tiny_http::Server>, std::thread::JoinHandle<()>)>, ServerError> {
        let Some(listener) = self.metrics_listener.as_ref() else {
            return Ok(None);
        };
        let listener = listener.try_clone().map_err(|source| ServerError::Bind {
            addr: "metrics listener".into(),
            source,
        })?;
        let http = Arc::new(
            tiny_http::Server::from_listener(listener, None).map_err(|e| ServerError::Bind {
                addr: "metrics listener".into(),
                source: io::Error::other(e.to_string()),
            })?,
        );
        let metrics = Arc::clone(&self.metrics);
        let registry = Arc::clone(&self.registry);
        let store = self.objects.as_ref().map(|o| Arc::clone(&o.store));
        let server = Arc::clone(&http);
        let thread = std::thread::Builder::new()
            .name("sluice-metrics".into())
            .spawn(move || {
                for request in server.incoming_requests() {
                    let response = if request.url() == "/metrics" {
                        let mut body = metrics
                            .render(registry.all().iter().map(|e| (e.name.as_str(), &e.metrics)));
                        body.push_str(&crate::metrics::render_device_metrics(
                            registry
                                .all()
                                .iter()
                                .map(|e| (e.name.as_str(), e.device.metrics())),
                        ));
                        if let Some(store) = &store {
                            body.push_str(&crate::metrics::render_store_metrics(store));
                        }
                        let header = tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            &b"text/plain; version=0.0.4; charset=utf-8"[..],
                        )
                        .expect("static header is valid");
                        tiny_http::Response::from_string(body).with_header(header)
                    } else {
                        tiny_http::Response::from_string("not found: try /metrics\n")
                            .with_status_code(404)
                    };
                    if let Err(e) = request.respond(response) {
                        debug!(error = %e, "metrics response not sent");
                    }
                }
            })
            .map_err(ServerError::Threads)?;
        Ok(Some((http, thread)))
    }

    fn accept_loop(&self, env: &Arc<DriverEnv>) -> Result<(), ServerError> {
        let next_id = AtomicU64::new(1);
        while !self.shared.stop.is_set() {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(self.listeners.len() + 1);
            let stop_fd = self.shared.stop.fd();
            fds.push(PollFd::new(&stop_fd, PollFlags::IN));
            let listener_fds: Vec<_> = self.listeners.iter().map(|l| l.socket.fd()).collect();
            for fd in &listener_fds {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(ServerError::Accept(e.into())),
            }
            let ready: Vec<bool> = fds[1..].iter().map(|f| !f.revents().is_empty()).collect();
            drop(fds);
            for (listener, ready) in self.listeners.iter().zip(ready) {
                if !ready {
                    continue;
                }
                loop {
                    match listener.socket.accept() {
                        Ok((stream, peer)) => {
                            let id = next_id.fetch_add(1, Ordering::Relaxed);
                            let protocol = Arc::clone(&listener.protocol);
                            self.spawn_connection(id, stream, peer, protocol, env);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            // EMFILE, ECONNABORTED...: log and keep serving.
                            warn!(error = %e, "accept failed");
                            std::thread::sleep(Duration::from_millis(10));
                            break;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn spawn_connection(
        &self,
        id: u64,
        stream: Stream,
        peer: String,
        protocol: Arc<dyn ConnectionHandler>,
        env: &Arc<DriverEnv>,
    ) {
        let span = info_span!("conn", conn = id, peer = %peer, export = tracing::field::Empty);
        let registered = match stream.try_clone() {
            Ok(s) => s,
            Err(e) => {
                warn!(parent: &span, error = %e, "cannot register connection; dropping it");
                return;
            }
        };
        {
            let mut conns = self
                .shared
                .connections
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if conns.len() >= self.config.limits.max_connections {
                warn!(parent: &span, limit = self.config.limits.max_connections, "connection limit reached; refusing");
                return;
            }
            conns.insert(id, registered);
        }
        let shared = Arc::clone(&self.shared);
        let env = Arc::clone(env);
        self.metrics
            .connections_total
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .connections_active
            .fetch_add(1, Ordering::Relaxed);
        let metrics = Arc::clone(&self.metrics);
        metrics.connection_opened(protocol.protocol());
        let spawned = std::thread::Builder::new()
            .name(format!("sluice-conn-{id}"))
            .stack_size(512 * 1024)
            .spawn(move || {
                let _enter = span.enter();
                info!("connection accepted");
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    protocol.serve(stream, &env);
                }));
                metrics.connections_active.fetch_sub(1, Ordering::Relaxed);
                metrics.connection_closed(protocol.protocol());
                let mut conns = shared.connections.lock().unwrap_or_else(|p| p.into_inner());
                let registered = conns.remove(&id);
                shared.drained.notify_all();
                drop(conns);
                if served.is_err() {
                    // Requests still on the pool hold copies of the
                    // socket: shut it down so the client sees the end
                    // instead of waiting for replies that never come.
                    metrics.panics.fetch_add(1, Ordering::Relaxed);
                    error!("the connection's thread panicked (a bug); connection closed");
                    if let Some(s) = registered {
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
            });
        if let Err(e) = spawned {
            error!(error = %e, "cannot start a connection thread");
            let mut conns = self
                .shared
                .connections
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            conns.remove(&id);
        }
    }

    fn drain_connections(&self) {
        // Connections watch the stop signal themselves: idle ones close at
        // once, busy ones after finishing the requests they have received.
        let conns = self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (mut conns, timeout) = self
            .shared
            .drained
            .wait_timeout_while(conns, SHUTDOWN_GRACE, |c| !c.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        if timeout.timed_out() {
            warn!(
                remaining = conns.len(),
                "connections still busy after the grace period; closing them"
            );
            for s in conns.values() {
                let _ = s.shutdown(Shutdown::Both);
            }
            while !conns.is_empty() {
                conns = self
                    .shared
                    .drained
                    .wait(conns)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
    }
}
