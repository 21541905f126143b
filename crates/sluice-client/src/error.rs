use std::io;

use sluice_nbd_proto::client::ReplyDecodeError;
use sluice_nbd_proto::NbdErrno;
use thiserror::Error;

/// The request kinds, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Trim => "trim",
            Self::Cache => "cache",
            Self::WriteZeroes => "write zeroes",
            Self::BlockStatus => "block status",
        })
    }
}

/// Everything that can go wrong talking to an NBD server. Each variant
/// names the server (`target`) and, for requests, the operation and range.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("bad NBD URI {uri:?}: {reason}")]
    BadUri { uri: String, reason: &'static str },
    #[error("cannot connect to {target}: {source}")]
    Connect { target: String, source: io::Error },
    #[error("connection to {target} failed: {source}")]
    Io { target: String, source: io::Error },
    #[error("handshake with {target} failed: {reason}")]
    Handshake { target: String, reason: String },
    #[error("{target} has no export {export:?}: {message}")]
    UnknownExport {
        target: String,
        export: String,
        message: String,
    },
    #[error("{target} sent bytes this client cannot decode: {source}")]
    Protocol {
        target: String,
        source: ReplyDecodeError,
    },
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
    #[error("{op} is not supported by export {export:?} on {target}")]
    Unsupported {
        target: String,
        export: String,
        op: Op,
    },
    #[error("the connection to {target} is closed")]
    Closed { target: String },
}

impl ClientError {
    /// Whether retrying the same request may succeed (connection-level
    /// failures) as opposed to a permanent refusal by the server.
    pub fn is_temporary(&self) -> bool {
        match self {
            Self::Connect { .. } | Self::Io { .. } | Self::Closed { .. } => true,
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
