//! What the load is aimed at: an in-process sluice server (the default),
//! any NBD server by URI, or a local file or device (the baseline).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{anyhow, bail, Context, Result};
use sluice_client::{NbdUri, Target as NbdTarget};
use sluice_server::{
    Export, ExportConfig, ListenAddr, PipelineMode, Server, ServerConfig, ServerHandle,
};
use sluice_storage::{BlockDevice, MemDevice};
use sluice_volume::{BaseSpec, VolumeSpec};

/// Prefix of the embedded server's thread names (`sluice-conn-N`,
/// `sluice-io-N`, and the accept thread this module names).
pub const SERVER_THREAD_PREFIX: &str = "sluice-";

/// What backs the embedded server's export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    /// A sparse RAM disk.
    Mem,
    /// A temporary file in `dir` (the system temp dir when `None`),
    /// deleted afterwards.
    TempFile(Option<PathBuf>),
    /// A given file (created if missing) or block device.
    File(PathBuf),
}

impl std::str::FromStr for Backing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mem" => Ok(Self::Mem),
            "tempfile" => Ok(Self::TempFile(None)),
            _ => {
                if let Some(dir) = s.strip_prefix("tempfile:") {
                    Ok(Self::TempFile(Some(dir.into())))
                } else if let Some(p) = s.strip_prefix("file:") {
                    if p.is_empty() {
                        return Err("file: needs a path".into());
                    }
                    Ok(Self::File(p.into()))
                } else {
                    Err(format!(
                        "{s:?}: backing is mem, tempfile, tempfile:DIR or file:PATH"
                    ))
                }
            }
        }
    }
}

/// Settings of an embedded server.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// The backing store.
    pub backing: Backing,
    /// Export size in bytes.
    pub size: u64,
    /// Server pipelining mode.
    pub pipeline: PipelineMode,
    /// Open file backings with O_DIRECT.
    pub direct: bool,
    /// Server spin window (µs); `None`: the server's default.
    pub spin_us: Option<u64>,
    /// Server I/O threads; `None`: the server's default.
    pub io_threads: Option<usize>,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            backing: Backing::Mem,
            size: 1 << 30,
            pipeline: PipelineMode::Flexible,
            direct: false,
            spin_us: None,
            io_threads: None,
        }
    }
}

/// A sluice server running inside this process on an ephemeral port.
pub struct EmbeddedServer {
    uri: NbdUri,
    handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), sluice_server::ServerError>>>,
    _temp: Option<tempfile::NamedTempFile>,
    description: String,
}

impl std::fmt::Debug for EmbeddedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedServer")
            .field("uri", &self.uri)
            .field("description", &self.description)
            .finish()
    }
}

impl EmbeddedServer {
    /// Starts a server with one export, `bench`, on 127.0.0.1:0.
    pub fn start(config: &EmbeddedConfig) -> Result<Self> {
        let mut server_config = ServerConfig {
            listen: vec![ListenAddr::Tcp(std::net::SocketAddr::from((
                [127, 0, 0, 1],
                0,
            )))],
            pipeline: config.pipeline,
            ..ServerConfig::default()
        };
        if let Some(us) = config.spin_us {
            server_config.receive.spin_us = us;
        }
        if let Some(n) = config.io_threads {
            server_config.io_threads = n.max(1);
        }
        let mode = match config.pipeline {
            PipelineMode::Off => "off",
            PipelineMode::Fixed => "fixed",
            PipelineMode::Flexible => "flexible",
        };
        let (server, temp, what) = match &config.backing {
            Backing::Mem => {
                let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(config.size, false));
                let export = Arc::new(Export::new("bench".into(), "bench".into(), dev));
                let server = Server::bind_exports(server_config, vec![export])
                    .context("cannot start the embedded server")?;
                (server, None, format!("mem:{}", config.size))
            }
            Backing::TempFile(dir) => {
                let dir = dir.clone().unwrap_or_else(std::env::temp_dir);
                let temp = tempfile::Builder::new()
                    .prefix("sluice-bench-")
                    .suffix(".img")
                    .tempfile_in(&dir)
                    .with_context(|| {
                        format!("cannot create a temporary image in {}", dir.display())
                    })?;
                let path = temp.path().to_path_buf();
                let server = bind_file(server_config, &path, config)?;
                (server, Some(temp), format!("tempfile:{}", path.display()))
            }
            Backing::File(path) => {
                let server = bind_file(server_config, path, config)?;
                (server, None, format!("file:{}", path.display()))
            }
        };
        let ListenAddr::Tcp(addr) = server
            .local_addrs()
            .first()
            .cloned()
            .ok_or_else(|| anyhow!("embedded server bound no address"))?
        else {
            bail!("embedded server bound a non-TCP address");
        };
        let handle = server.handle();
        let thread = std::thread::Builder::new()
            .name("sluice-accept".into())
            .spawn(move || server.run())
            .context("cannot start the embedded server thread")?;
        Ok(Self {
            uri: NbdUri::new(NbdTarget::Tcp(addr.to_string()), "bench"),
            handle,
            thread: Some(thread),
            _temp: temp,
            description: format!(
                "embedded sluice ({what}{}, pipeline {mode})",
                if config.direct { ", O_DIRECT" } else { "" }
            ),
        })
    }

    /// Where it listens.
    pub fn uri(&self) -> &NbdUri {
        &self.uri
    }

    /// "embedded sluice (mem:1073741824, pipeline flexible)".
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Stops the server and waits for it.
    pub fn stop(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        self.handle.shutdown();
        if let Some(t) = self.thread.take() {
            t.join()
                .map_err(|_| anyhow!("the embedded server thread panicked"))?
                .context("embedded server failed")?;
        }
        Ok(())
    }
}

impl Drop for EmbeddedServer {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn bind_file(
    mut server_config: ServerConfig,
    path: &Path,
    config: &EmbeddedConfig,
) -> Result<Server> {
    server_config.export.push(ExportConfig {
        name: "bench".into(),
        spec: VolumeSpec::new(BaseSpec::File {
            path: path.to_path_buf(),
            size: Some(config.size),
            direct: config.direct,
        }),
        description: "bench".into(),
    });
    Server::bind(server_config)
        .with_context(|| format!("cannot start the embedded server on {}", path.display()))
}

/// Where a run sends its I/O.
#[derive(Debug, Clone)]
pub enum TargetSpec {
    /// An in-process server started for the run.
    Embedded(EmbeddedConfig),
    /// Any NBD server; its pid, if known, gives server CPU.
    Uri {
        /// The server.
        uri: NbdUri,
        /// Its process, for CPU accounting.
        server_pid: Option<u32>,
    },
    /// A local file or block device, with positional I/O.
    Local(PathBuf),
}
