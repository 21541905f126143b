//! sluice's NBD server: binds listeners, runs one thread per connection
//! over the sans-IO protocol machines of `sluice-nbd-proto`, and executes
//! requests against `sluice-storage` devices.

mod buffer;
mod coalesce;
pub mod config;
mod connection;
pub mod export;
pub mod metrics;
mod payload_pipe;
mod pool;
mod server;
mod sink;
mod spin;
mod stop;
mod stream;
mod tls;

pub use config::{
    ByteSize, CachePolicy, ExportConfig, ListenAddr, PipelineMode, ServerConfig, TlsConfig,
    TlsIdentity, TlsMode,
};
pub use export::{Export, ExportRegistry};
pub use server::{Server, ServerError, ServerHandle};
pub use tls::{TlsSetupError, CA_CERT_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE};
