//! Opening a connection: socket, TLS if the URI asks for it, and the
//! handshake, driving `sluice_nbd_proto::ClientHandshake` over a blocking
//! stream.

use std::time::Duration;

use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{
    BlockSizes, ClientHandshake, ClientHandshakeConfig, ClientStatus, ExportDescription,
    HeaderStyle, ReplyStyle, Transmission,
};

use crate::net::greeting::Expected;
use crate::net::handshake::{self, ClientMachine, DriveFailure, HandshakePeer, HandshakeStep};
use crate::net::mux::Reconnect;
use crate::net::transport::{open_stream, Stream, DEFAULT_CONNECT_TIMEOUT};
use crate::net::uri::{NbdUri, TlsSettings};
use crate::ClientError;

/// What to ask the server for, and how long to wait.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Request structured replies (`NBD_OPT_STRUCTURED_REPLY`).
    pub structured_replies: bool,
    /// Request extended headers (`NBD_OPT_EXTENDED_HEADERS`), which take
    /// precedence over structured replies.
    pub extended_headers: bool,
    /// Select `base:allocation` so block status works.
    pub base_allocation: bool,
    /// Limit on connecting and the whole handshake (TLS included).
    pub connect_timeout: Duration,
    /// Limit on waiting for a request's reply (`None`: wait for ever).
    /// A request that times out fails with [`ClientError::Timeout`]; on
    /// a [`Connection`](crate::Connection) the connection is then unusable.
    pub request_timeout: Option<Duration>,
    /// [`Client`](crate::Client) only: how to survive a lost connection.
    pub reconnect: Reconnect,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            structured_replies: true,
            extended_headers: true,
            base_allocation: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            reconnect: Reconnect::default(),
        }
    }
}

/// What the handshake settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportDetails {
    /// The server, for error messages.
    pub target: String,
    /// Export name as the server calls it.
    pub name: String,
    /// Description, if the server gave one.
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags.
    pub flags: u16,
    /// Size constraints (the spec's defaults if the server sent none).
    pub block_sizes: BlockSizes,
    /// Reply style in use.
    pub reply_style: ReplyStyle,
    /// Request header style in use.
    pub header_style: HeaderStyle,
    /// Context id of `base:allocation` if selected.
    pub base_allocation_id: Option<u32>,
    /// Whether the connection runs over TLS.
    pub tls: bool,
}

impl ExportDetails {
    fn new(target: String, e: ExportDescription, tls: bool) -> Self {
        Self {
            target,
            name: e.name,
            description: e.description,
            size: e.size,
            flags: e.transmission.flags,
            block_sizes: e.block_sizes,
            reply_style: e.transmission.reply_style,
            header_style: e.transmission.header_style,
            base_allocation_id: e.transmission.base_allocation_id,
            tls,
        }
    }

    /// What the transmission codecs need.
    pub fn transmission(&self) -> Transmission {
        Transmission {
            flags: self.flags,
            header_style: self.header_style,
            reply_style: self.reply_style,
            base_allocation_id: self.base_allocation_id,
        }
    }

    fn flag(&self, f: u16) -> bool {
        self.flags & f != 0
    }
    /// Read-only export.
    pub fn is_read_only(&self) -> bool {
        self.flag(FLAG_READ_ONLY)
    }
    /// FLUSH supported.
    pub fn can_flush(&self) -> bool {
        self.flag(FLAG_SEND_FLUSH)
    }
    /// FUA supported.
    pub fn can_fua(&self) -> bool {
        self.flag(FLAG_SEND_FUA)
    }
    /// TRIM supported.
    pub fn can_trim(&self) -> bool {
        self.flag(FLAG_SEND_TRIM)
    }
    /// WRITE_ZEROES supported.
    pub fn can_zero(&self) -> bool {
        self.flag(FLAG_SEND_WRITE_ZEROES)
    }
    /// Several connections may be used together.
    pub fn can_multi_conn(&self) -> bool {
        self.flag(FLAG_CAN_MULTI_CONN)
    }
    /// CACHE supported.
    pub fn can_cache(&self) -> bool {
        self.flag(FLAG_SEND_CACHE)
    }
}

impl ClientMachine for ClientHandshake {
    /// The status the handshake ended in (an export, a list, ...).
    type Outcome = ClientStatus;
    type Error = sluice_nbd_proto::ClientHandshakeError;

    fn handle_input(
        &mut self,
        input: &[u8],
    ) -> Result<(usize, HandshakeStep<ClientStatus>), Self::Error> {
        let (used, status) = Self::handle_input(self, input)?;
        let step = match status {
            ClientStatus::NeedInput => HandshakeStep::NeedInput,
            ClientStatus::StartTls => HandshakeStep::StartTls,
            done => HandshakeStep::Done(done),
        };
        Ok((used, step))
    }

    fn poll_output(&mut self) -> Vec<u8> {
        Self::poll_output(self)
    }
}

/// Runs the handshake machine over `stream` until it finishes.
fn drive(
    stream: Stream,
    machine: &mut ClientHandshake,
    tls: Option<&TlsSettings>,
    target: &str,
    timeout: Duration,
) -> Result<(Stream, ClientStatus), ClientError> {
    let peer = HandshakePeer {
        target,
        expected: Expected::Nbd,
        tls,
        timeout,
    };
    handshake::drive(stream, machine, &peer).map_err(|failure| match failure {
        DriveFailure::Machine(source) => ClientError::Handshake {
            target: target.to_owned(),
            source,
        },
        DriveFailure::Connection(e) => e,
    })
}

/// Lists the exports of the server at `uri` as (name, description).
pub fn list_exports(uri: &NbdUri) -> Result<Vec<(String, String)>, ClientError> {
    let options = ConnectOptions::default();
    let target = uri.target.to_string();
    let stream = open_stream(&uri.target, options.connect_timeout)?;
    let mut machine = ClientHandshake::new(ClientHandshakeConfig {
        list: true,
        tls: uri.tls.is_some(),
        ..ClientHandshakeConfig::default()
    });
    match drive(
        stream,
        &mut machine,
        uri.tls.as_ref(),
        &target,
        options.connect_timeout,
    )? {
        (_, ClientStatus::Listed(list)) => Ok(list),
        (_, other) => Err(ClientError::Violation {
            target,
            reason: format!("listing ended with {other:?}"),
        }),
    }
}

/// Connects and negotiates; returns the stream in transmission phase,
/// blocking with the request timeout for reads (if any).
pub(crate) fn open(
    uri: &NbdUri,
    options: &ConnectOptions,
) -> Result<(Stream, ExportDetails), ClientError> {
    let target = uri.target.to_string();
    let stream = open_stream(&uri.target, options.connect_timeout)?;
    let mut machine = ClientHandshake::new(ClientHandshakeConfig {
        export: uri.export.clone(),
        structured_replies: options.structured_replies,
        extended_headers: options.extended_headers,
        base_allocation: options.base_allocation,
        tls: uri.tls.is_some(),
        list: false,
    });
    let (stream, status) = drive(
        stream,
        &mut machine,
        uri.tls.as_ref(),
        &target,
        options.connect_timeout,
    )?;
    let ClientStatus::Done(export) = status else {
        return Err(ClientError::Violation {
            target,
            reason: format!("handshake ended with {status:?}"),
        });
    };
    stream
        .set_timeouts(options.request_timeout)
        .map_err(|source| ClientError::Io {
            target: target.clone(),
            source,
        })?;
    Ok((
        stream,
        ExportDetails::new(target, *export, uri.tls.is_some()),
    ))
}
