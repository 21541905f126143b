use std::io;
use std::time::Duration;

use sluice_nbd_proto::client::ReplyDecodeError;
use sluice_nbd_proto::{ClientHandshakeError, NbdErrno, ReplyError};
use thiserror::Error;

pub use sluice_nbd_proto::Op;

/// Everything that can go wrong talking to an NBD server. Each variant
/// names the server (`target`) and, for requests, the operation and range.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("bad NBD URI {uri:?}: {reason}")]
    BadUri { uri: String, reason: String },
    #[error("cannot connect to {target}")]
    Connect { target: String, source: io::Error },
    #[error("no connection to {target} within {after:?}")]
    ConnectTimeout { target: String, after: Duration },
    #[error("TLS with {target} failed: {reason}")]
    Tls { target: String, reason: String },
    #[error("connection to {target} failed")]
    Io { target: String, source: io::Error },
    #[error("handshake with {target} failed")]
    Handshake {
        target: String,
        source: ClientHandshakeError,
    },
    #[error("{target} sent bytes this client cannot decode")]
    Protocol {
        target: String,
        source: ReplyDecodeError,
    },
    #[error("{target} broke the protocol")]
    Reply { target: String, source: ReplyError },
    #[error("{target} broke the protocol: {reason}")]
    Violation { target: String, reason: String },
    #[error("{op} of {length} bytes at offset {offset} failed on {target}: {errno}{}", if message.is_empty() { String::new() } else { format!(" ({message})") })]
    Request {
        target: String,
        op: Op,
        offset: u64,
        length: u64,
        errno: NbdErrno,
        message: String,
    },
    #[error("{op} of {length} bytes at offset {offset} on {target} got no reply within {after:?}")]
    Timeout {
        target: String,
        op: Op,
        offset: u64,
        length: u64,
        after: Duration,
    },
    #[error("{op} refused before sending to export {export:?} on {target}")]
    Refused {
        target: String,
        export: String,
        op: Op,
        source: sluice_nbd_proto::RequestError,
    },
    #[error("export {export:?} on {target} changed across a reconnect: {what}")]
    ExportChanged {
        target: String,
        export: String,
        what: String,
    },
    #[error("lost the connection to {target} and could not reconnect within {window:?}")]
    ReconnectFailed {
        target: String,
        window: Duration,
        #[source]
        last: Box<Self>,
    },
    /// Reconnecting with `fail_when_refused`: the last attempt was
    /// refused, so the request was not held for the rest of the window.
    #[error("lost the connection to {target}, which refuses connections: request not held while reconnecting")]
    Refusing {
        target: String,
        #[source]
        last: Box<Self>,
    },
    #[error("the connection to {target} is closed")]
    Closed { target: String },
    /// The server greeted in the other protocol sluice speaks: the user
    /// gave the wrong port.
    #[error("{target} {hint}")]
    WrongProtocol { target: String, hint: &'static str },
}

impl ClientError {
    /// Whether retrying the same request may succeed (connection-level
    /// failures) as opposed to a permanent refusal by the server.
    pub fn is_temporary(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::ConnectTimeout { .. }
            | Self::Io { .. }
            | Self::Closed { .. }
            | Self::Timeout { .. }
            | Self::ReconnectFailed { .. }
            | Self::Refusing { .. } => true,
            Self::Request { errno, .. } => *errno == NbdErrno::Shutdown,
            _ => false,
        }
    }

    /// The server's errno if the server refused a request.
    pub fn errno(&self) -> Option<NbdErrno> {
        match self {
            Self::Request { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}
