//! sluice's server: binds listeners, runs one thread per connection
//! through a protocol-neutral driver (`driver`), and serves NBD (`nbd`,
//! over the sans-IO machines of `sluice-nbd-proto`) against
//! `sluice-storage` devices, and the native object protocol (`obj`, over
//! `sluice-obj-proto`) against a `sluice-objstore` object store and the
//! same devices.

pub mod admin;
mod buffer;
pub mod config;
mod driver;
pub mod export;
mod listen;
pub mod log;
pub mod metrics;
mod nbd;
mod obj;
mod server;
pub mod service;
mod socket;
mod stop;
mod stream;
mod tls;

pub use config::{
    ByteSize, CachePolicy, ExportConfig, FastPaths, Limits, ListenAddr, ObjectConfig, PipelineMode,
    ReceiveTuning, S3Config, ServerConfig, Timeouts, TlsConfig, TlsIdentity, TlsMode,
    DEFAULT_PARTITION,
};
pub use export::{Export, ExportRegistry};
pub use server::{Server, ServerError, ServerHandle};
pub use socket::SocketPathError;
pub use tls::{server_tls_config, TlsSetupError, CA_CERT_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE};
