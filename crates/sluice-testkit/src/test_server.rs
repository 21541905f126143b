//! A real `sluice_server::Server` in this process, on an OS-chosen port,
//! run on its own thread and stopped when dropped.
//!
//! ```ignore
//! let server = TestServer::builder()
//!     .export("default", Arc::new(MemDevice::new(1 << 20, false)))
//!     .config(|c| c.io_threads = 8)
//!     .metrics()
//!     .start();
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use sluice_server::{
    Export, ListenAddr, ObjectConfig, Server, ServerConfig, ServerError, ServerHandle,
};
use sluice_storage::BlockDevice;

/// What to serve and how.
pub struct TestServerBuilder {
    config: ServerConfig,
    metrics: bool,
    exports: Vec<Arc<Export>>,
    meta: Option<Arc<dyn sluice_meta::MetaStore>>,
}

impl TestServerBuilder {
    /// Serves `device` as `name` (no description).
    pub fn export(self, name: &str, device: Arc<dyn BlockDevice>) -> Self {
        self.described_export(name, "", device)
    }

    /// Serves `device` as `name` with `description`.
    pub fn described_export(
        mut self,
        name: &str,
        description: &str,
        device: Arc<dyn BlockDevice>,
    ) -> Self {
        self.exports.push(Arc::new(Export::new(
            name.into(),
            description.into(),
            device,
        )));
        self
    }

    /// Changes the configuration (which starts as the default, listening
    /// on 127.0.0.1:0).
    pub fn config(mut self, change: impl FnOnce(&mut ServerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Also serves the object store in `dir` (created if missing) over
    /// the native object protocol on an OS-chosen port
    /// ([`TestServer::obj_addr`]), every export attachable. Change the
    /// rest of `[objects]` with [`config`](Self::config).
    pub fn objects(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.objects = Some(ObjectConfig::new(
            dir,
            vec![ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 0)))],
        ));
        self
    }

    /// Serves `meta` as the metadata service of striped objects on the
    /// object listeners (with [`objects`](Self::objects)).
    pub fn meta(mut self, meta: Arc<dyn sluice_meta::MetaStore>) -> Self {
        self.meta = Some(meta);
        self
    }

    /// Also serves metrics on an OS-chosen port.
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// Binds, or says why not.
    pub fn bind(mut self) -> Result<TestServer, ServerError> {
        if self.metrics {
            self.config.metrics = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        }
        let server = Server::bind_exports_with_meta(self.config, self.exports, self.meta)?;
        let addr = server
            .local_addrs()
            .iter()
            .find_map(|a| match a {
                ListenAddr::Tcp(addr) => Some(*addr),
                _ => None,
            })
            .expect("the test server listens on TCP");
        let obj_addr = server.object_addrs().iter().find_map(|a| match a {
            ListenAddr::Tcp(addr) => Some(*addr),
            _ => None,
        });
        let metrics_addr = server.metrics_addr();
        let handle = server.handle();
        let thread = Some(std::thread::spawn(move || server.run()));
        Ok(TestServer {
            addr,
            obj_addr,
            metrics_addr,
            handle,
            thread,
        })
    }

    /// Binds and starts serving.
    pub fn start(self) -> TestServer {
        self.bind().expect("bind the test server")
    }
}

/// A running server; shut down and joined on drop.
pub struct TestServer {
    /// Its (first) TCP listener.
    pub addr: SocketAddr,
    /// Its (first) TCP object protocol listener, with
    /// [`objects`](TestServerBuilder::objects).
    pub obj_addr: Option<SocketAddr>,
    /// Its metrics endpoint, if asked for.
    pub metrics_addr: Option<SocketAddr>,
    /// Stops it.
    pub handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    /// A server with no exports yet, listening on 127.0.0.1:0.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder {
            config: ServerConfig {
                listen: vec![ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 0)))],
                ..ServerConfig::default()
            },
            metrics: false,
            exports: Vec::new(),
            meta: None,
        }
    }

    /// `nbd://ADDR/EXPORT`.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd://{}/{export}", self.addr)
    }

    /// `sluice://ADDR` of the object listener.
    pub fn obj_uri(&self) -> String {
        format!(
            "sluice://{}",
            self.obj_addr.expect("started without .objects(dir)")
        )
    }

    /// The metrics endpoint's `/metrics` page, body only.
    pub fn scrape(&self) -> String {
        use std::io::{Read, Write};
        let addr = self.metrics_addr.expect("started without .metrics()");
        let mut s = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n")
            .expect("send the metrics request");
        let mut response = String::new();
        s.read_to_string(&mut response)
            .expect("read the metrics response");
        let (head, body) = response
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no end of headers in {response:?}"));
        assert!(
            head.starts_with("HTTP/1.") && head.lines().next().is_some_and(|l| l.contains("200")),
            "metrics request failed: {head}"
        );
        body.to_owned()
    }

    /// Shuts down and returns what `run` returned.
    pub fn stop(mut self) -> Result<(), ServerError> {
        self.handle.shutdown();
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("the server thread panicked")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handle.shutdown();
            let _ = t.join();
        }
    }
}
