//! The object experiments' server: sluice in this process with an object
//! store and one file export in the same folder, its sockets bound in a
//! network namespace when a link is given.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use sluice_client::obj::{DdtKind, MergePolicy, ObjClient, ObjOptions};
use sluice_client::{NbdUri, ObjUri, Target};
use sluice_server::{ExportConfig, ListenAddr, ObjectConfig, Server, ServerConfig, ServerHandle};
use sluice_volume::{BaseSpec, VolumeSpec};

use crate::link::NetNamespace;

/// An in-process sluice server with an object store and one file export
/// (`bench`) in the same folder: the object experiments' server (objects,
/// merge, san's merge rows, noncontig, s3asim).
pub struct ObjServer {
    pub obj_uri: ObjUri,
    pub nbd_uri: NbdUri,
    handle: ServerHandle,
    thread: Option<std::thread::JoinHandle<Result<(), sluice_server::ServerError>>>,
}

impl ObjServer {
    pub fn start(dir: &Path, export_size: u64) -> Result<Self> {
        let any = ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 0)));
        let config = ServerConfig {
            listen: vec![any.clone()],
            export: vec![ExportConfig {
                name: "bench".into(),
                spec: VolumeSpec::new(BaseSpec::File {
                    path: dir.join("export.img"),
                    size: Some(export_size),
                    direct: false,
                }),
                description: "bench".into(),
            }],
            objects: Some(ObjectConfig::new(dir.join("objects"), vec![any])),
            ..ServerConfig::default()
        };
        Self::bind(config, None)
            .with_context(|| format!("cannot start the object server in {}", dir.display()))
    }

    /// Starts a server of `config` (whose NBD and object listeners are
    /// TCP), its sockets bound inside `namespace` when given (the
    /// `noncontig` preset's server behind a link).
    pub fn bind(config: ServerConfig, namespace: Option<&NetNamespace>) -> Result<Self> {
        let server = match namespace {
            Some(ns) => ns.enter(move || Server::bind(config))??,
            None => Server::bind(config)?,
        };
        let tcp = |a: Option<&ListenAddr>| match a {
            Some(ListenAddr::Tcp(addr)) => Ok(addr.to_string()),
            _ => Err(anyhow!("the embedded server bound no TCP address")),
        };
        let nbd = tcp(server.local_addrs().first())?;
        let obj = tcp(server.object_addrs().first())?;
        let handle = server.handle();
        let thread = std::thread::Builder::new()
            .name("sluice-accept".into())
            .spawn(move || server.run())
            .context("cannot start the embedded server thread")?;
        Ok(Self {
            obj_uri: ObjUri::new(Target::Tcp(obj)),
            nbd_uri: NbdUri::new(Target::Tcp(nbd), "bench"),
            handle,
            thread: Some(thread),
        })
    }

    pub fn client(&self, in_flight: usize) -> Result<ObjClient> {
        self.client_sending(in_flight, None)
    }

    /// A client whose requests carry `ddt` where it can describe them
    /// (`ObjOptions::ddt`), else the DDT the client picks.
    pub fn client_sending(&self, in_flight: usize, ddt: Option<DdtKind>) -> Result<ObjClient> {
        let options = ObjOptions {
            max_in_flight: in_flight.max(1),
            // The rows here compare DDTs and one request per segment:
            // no temporal merge behind them.
            merge: MergePolicy::Off,
            ddt,
            ..ObjOptions::default()
        };
        ObjClient::connect(&self.obj_uri, &options)
            .with_context(|| format!("cannot connect to {}", self.obj_uri))
    }
}

impl Drop for ObjServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
