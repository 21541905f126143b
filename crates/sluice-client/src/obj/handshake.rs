//! Opening an object-protocol connection: the socket and TLS of the NBD
//! client (`transport`), and the native handshake, driving
//! `sluice_obj_proto::ClientHandshake` over a blocking stream.

use sluice_obj_proto::{ClientHandshake, ClientHandshakeConfig, ClientStatus, Negotiated};

use super::{ObjError, ObjOptions, DEFAULT_PARTITION};
use crate::net::greeting::Expected;
use crate::net::handshake::{self, ClientMachine, DriveFailure, HandshakePeer, HandshakeStep};
use crate::net::transport::{open_stream, Stream};
use crate::net::uri::ObjUri;

/// Connects and negotiates; returns the stream in transmission, with the
/// request timeout (if any) as its read timeout, and what was agreed.
pub(crate) fn open(uri: &ObjUri, options: &ObjOptions) -> Result<(Stream, Negotiated), ObjError> {
    let server = uri.to_string();
    let io = |source| ObjError::Io {
        server: server.clone(),
        source,
    };
    let stream = open_stream(&uri.target, options.connect_timeout)?;
    let mut machine = ClientHandshake::new(ClientHandshakeConfig {
        features: options.features,
        partition: uri.partition.unwrap_or(DEFAULT_PARTITION),
        tls: uri.tls.is_some(),
        exports: options.exports.clone(),
    });
    let target = uri.target.to_string();
    let peer = HandshakePeer {
        target: &target,
        expected: Expected::Objects,
        tls: uri.tls.as_ref(),
        timeout: options.connect_timeout,
    };
    let (stream, session) =
        handshake::drive(stream, &mut machine, &peer).map_err(|failure| match failure {
            DriveFailure::Machine(source) => ObjError::Handshake {
                server: server.clone(),
                source,
            },
            DriveFailure::Connection(e) => e.into(),
        })?;
    stream.set_timeouts(options.request_timeout).map_err(io)?;
    Ok((stream, session))
}

impl ClientMachine for ClientHandshake {
    type Outcome = Negotiated;
    type Error = sluice_obj_proto::ClientHandshakeError;

    fn handle_input(
        &mut self,
        input: &[u8],
    ) -> Result<(usize, HandshakeStep<Negotiated>), Self::Error> {
        let (used, status) = Self::handle_input(self, input)?;
        let step = match status {
            ClientStatus::NeedInput => HandshakeStep::NeedInput,
            ClientStatus::StartTls => HandshakeStep::StartTls,
            ClientStatus::Done(session) => HandshakeStep::Done(*session),
        };
        Ok((used, step))
    }

    fn poll_output(&mut self) -> Vec<u8> {
        Self::poll_output(self)
    }
}
