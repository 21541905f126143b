use std::io;
use std::time::Duration;

use sluice_obj_proto::{ClientHandshakeError, ErrorCode, Opcode, ReplyDecodeError};
use thiserror::Error;

use crate::net::uri::BadObjUri;
use crate::ClientError;

/// What a request was about, for its error message: the command and the
/// object (or collection) it named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub op: Opcode,
    pub target: Addressee,
}

/// The thing a command addressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addressee {
    Object(u64),
    Collection(String),
    Partition(u64),
    /// An attached NBD export, by name.
    Export(String),
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The protocol's own name, in words (`create and write`).
        let op = self.op.name().replace('_', " ");
        match &self.target {
            Addressee::Object(id) => write!(f, "{op} of object {id}"),
            Addressee::Collection(c) if c.is_empty() => write!(f, "{op}"),
            Addressee::Collection(c) => write!(f, "{op} in collection {c:?}"),
            Addressee::Partition(p) => write!(f, "{op} of partition {p}"),
            Addressee::Export(e) => write!(f, "{op} of export {e:?}"),
        }
    }
}

/// Everything that can go wrong talking to an object server. Each
/// variant names the server and, for requests, the command and object.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ObjError {
    #[error(transparent)]
    BadUri(#[from] BadObjUri),
    /// Connecting, TLS, or the socket failed (the NBD client's errors,
    /// which name the server).
    #[error(transparent)]
    Transport(#[from] ClientError),
    #[error("handshake with {server} failed")]
    Handshake {
        server: String,
        source: ClientHandshakeError,
    },
    #[error("{server} sent a reply this client cannot decode")]
    Protocol {
        server: String,
        source: ReplyDecodeError,
    },
    #[error("{server} broke the protocol: {reason}")]
    Violation { server: String, reason: String },
    /// The server refused or failed the request.
    #[error("{subject} failed on {server}: {}", server_message(*code, message))]
    Server {
        server: String,
        subject: Subject,
        code: ErrorCode,
        message: String,
    },
    /// The client refused to send the request (it could never succeed).
    #[error("{subject} refused before sending: {reason}")]
    Refused { subject: Subject, reason: String },
    #[error("connection to {server} failed")]
    Io { server: String, source: io::Error },
    #[error("{subject} got no reply from {server} within {after:?}")]
    Timeout {
        server: String,
        subject: Subject,
        after: Duration,
    },
    #[error("the connection to {server} is closed")]
    Closed { server: String },
    /// The connection was lost while a request that must not run twice
    /// (a create, append, remove or metadata call) was in flight: it may
    /// or may not have run.
    #[error("the connection to {server} was lost while the {subject} was in flight: it may or may not have run")]
    Interrupted { server: String, subject: Subject },
    /// Reconnecting ([`ObjOptions::reconnect`](super::ObjOptions::reconnect))
    /// did not get the connection back within its window.
    #[error("could not reconnect to {server} within {window:?}")]
    ReconnectFailed {
        server: String,
        window: Duration,
        #[source]
        last: Box<Self>,
    },
    /// On reconnecting, the server offered another session than the one
    /// the waiting requests were made for.
    #[error("{server} came back with another session: {what}")]
    SessionChanged { server: String, what: String },
}

fn code_name(code: ErrorCode) -> String {
    match code {
        ErrorCode::Invalid => "invalid request".into(),
        ErrorCode::UnknownOpcode => "unknown command".into(),
        ErrorCode::BadFlags => "bad flags".into(),
        ErrorCode::BadDdt => "bad data distribution".into(),
        ErrorCode::LengthMismatch => "length mismatch".into(),
        ErrorCode::NoSuchObject => "no such object".into(),
        ErrorCode::NoSuchPartition => "no such partition".into(),
        ErrorCode::NoSuchCollection => "no such collection".into(),
        ErrorCode::AttrTooLarge => "attribute too large".into(),
        ErrorCode::NotNegotiated => "not negotiated".into(),
        ErrorCode::BadBatch => "bad batch".into(),
        ErrorCode::OutOfRange => "out of range".into(),
        ErrorCode::ReadOnly => "read-only".into(),
        ErrorCode::Permission => "permission denied".into(),
        ErrorCode::NoSpace => "no space".into(),
        ErrorCode::Io => "I/O error".into(),
        other => format!("status {}", other.wire()),
    }
}

fn server_message(code: ErrorCode, message: &str) -> String {
    let name = code_name(code);
    if message.is_empty() {
        name
    } else {
        format!("{name} ({message})")
    }
}

impl ObjError {
    /// The server's status if the server refused a request.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the server said the object (or collection, or partition)
    /// does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.code(),
            Some(
                ErrorCode::NoSuchObject | ErrorCode::NoSuchCollection | ErrorCode::NoSuchPartition
            )
        )
    }

    /// Whether retrying may succeed (the connection failed, not the
    /// request).
    pub fn is_temporary(&self) -> bool {
        match self {
            Self::Transport(e) => e.is_temporary(),
            Self::Io { .. }
            | Self::Closed { .. }
            | Self::Timeout { .. }
            | Self::ReconnectFailed { .. } => true,
            _ => false,
        }
    }

    /// Whether the connection is still in step after this error: the
    /// server answered, or the client refused to send.
    pub(crate) fn connection_survives(&self) -> bool {
        matches!(self, Self::Server { .. } | Self::Refused { .. })
    }

    /// The same error for another waiter of a failed connection
    /// (`io::Error` does not clone).
    pub(crate) fn for_another(&self) -> Self {
        match self {
            Self::Io { server, source } => Self::Io {
                server: server.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Self::Closed { server } => Self::Closed {
                server: server.clone(),
            },
            Self::Protocol { server, source } => Self::Protocol {
                server: server.clone(),
                source: source.clone(),
            },
            Self::Violation { server, reason } => Self::Violation {
                server: server.clone(),
                reason: reason.clone(),
            },
            Self::Timeout {
                server,
                subject,
                after,
            } => Self::Timeout {
                server: server.clone(),
                subject: subject.clone(),
                after: *after,
            },
            Self::Interrupted { server, subject } => Self::Interrupted {
                server: server.clone(),
                subject: subject.clone(),
            },
            Self::ReconnectFailed {
                server,
                window,
                last,
            } => Self::ReconnectFailed {
                server: server.clone(),
                window: *window,
                last: Box::new(last.for_another()),
            },
            Self::SessionChanged { server, what } => Self::SessionChanged {
                server: server.clone(),
                what: what.clone(),
            },
            Self::Server {
                server,
                subject,
                code,
                message,
            } => Self::Server {
                server: server.clone(),
                subject: subject.clone(),
                code: *code,
                message: message.clone(),
            },
            other => Self::Violation {
                server: "the server".into(),
                reason: other.to_string(),
            },
        }
    }
}
