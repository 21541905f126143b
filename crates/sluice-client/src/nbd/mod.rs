//! The NBD client: [`Connection`] (one thread), [`Client`] (shared by
//! threads and tasks, reconnecting), [`RemoteDevice`] (a block device over
//! a [`Client`]), the handshake and export listing, and their errors.

mod batch;
mod bridge;
mod client;
mod connection;
mod error;
mod handshake;
mod remote;

pub use batch::{batch, Batch};
pub use bridge::{capability_from_flags, device_error};
pub use client::{Client, Reply};
pub use connection::{Completion, Connection, Outcome, Request};
pub use error::{ClientError, Op};
pub use handshake::{list_exports, ConnectOptions, ExportDetails};
pub use remote::{RemoteDevice, DEFAULT_RECONNECT_WINDOW};
