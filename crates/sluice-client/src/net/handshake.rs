//! The one loop that drives a protocol crate's sans-IO client handshake
//! over a blocking stream, for both protocols: it checks the greeting is
//! the expected protocol's, sends what the machine queues, starts TLS
//! when the server accepts STARTTLS, and bounds every read by the connect
//! timeout. Each protocol plugs in its machine as a [`ClientMachine`].

use std::time::Duration;

use crate::net::greeting::{wrong_protocol, Expected};
use crate::net::transport::{client_config, Stream};
use crate::net::uri::TlsSettings;
use crate::ClientError;

/// Where a protocol's client handshake stands after taking input.
pub(crate) enum HandshakeStep<T> {
    /// Send the pending output, then read more.
    NeedInput,
    /// The server accepted STARTTLS: start TLS, then send the pending
    /// output over it.
    StartTls,
    /// Finished with this outcome (the pending output still goes out).
    Done(T),
}

/// A protocol crate's sans-IO client handshake machine.
pub(crate) trait ClientMachine {
    /// What a finished handshake yields.
    type Outcome;
    /// The machine's own failure (the server broke the handshake).
    type Error;
    /// Consumes as much of `input` as forms complete messages; returns
    /// the bytes consumed and the step.
    fn handle_input(
        &mut self,
        input: &[u8],
    ) -> Result<(usize, HandshakeStep<Self::Outcome>), Self::Error>;
    /// Bytes to send now (empty when there is nothing).
    fn poll_output(&mut self) -> Vec<u8>;
}

/// Why driving a handshake failed: the machine's own error, or the
/// connection's (socket, TLS, timeout, the wrong protocol, the server
/// leaving).
pub(crate) enum DriveFailure<E> {
    Machine(E),
    Connection(ClientError),
}

impl<E> From<ClientError> for DriveFailure<E> {
    fn from(e: ClientError) -> Self {
        Self::Connection(e)
    }
}

/// The server a handshake runs with, as the loop needs it.
pub(crate) struct HandshakePeer<'a> {
    /// The server, for error messages (`host:port` or a socket path).
    pub(crate) target: &'a str,
    /// The protocol whose greeting is expected.
    pub(crate) expected: Expected,
    /// TLS settings, when the URI asked for TLS.
    pub(crate) tls: Option<&'a TlsSettings>,
    /// Bounds each read of the handshake.
    pub(crate) timeout: Duration,
}

/// Runs `machine` over `stream` until it finishes; returns the stream
/// (over TLS if it was started) and the outcome. Bytes the server sent
/// after the handshake are a protocol violation.
pub(crate) fn drive<M: ClientMachine>(
    mut stream: Stream,
    machine: &mut M,
    peer: &HandshakePeer<'_>,
) -> Result<(Stream, M::Outcome), DriveFailure<M::Error>> {
    let target = peer.target;
    let io = |source| ClientError::Io {
        target: target.to_owned(),
        source,
    };
    let violation = |reason: &str| ClientError::Violation {
        target: target.to_owned(),
        reason: reason.to_owned(),
    };
    let mut input: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut greeted = false;
    loop {
        if !greeted && input.len() >= 8 {
            greeted = true;
            if let Some(e) = wrong_protocol(&input, peer.expected, target) {
                return Err(e.into());
            }
        }
        let (used, step) = machine
            .handle_input(&input)
            .map_err(DriveFailure::Machine)?;
        input.drain(..used);
        let out = machine.poll_output();
        match step {
            HandshakeStep::NeedInput => {}
            HandshakeStep::StartTls => {
                if !input.is_empty() {
                    return Err(violation("plaintext bytes after accepting STARTTLS").into());
                }
                let settings = peer
                    .tls
                    .ok_or_else(|| violation("STARTTLS accepted though not asked for"))?;
                let config = client_config(settings, target)?;
                stream = stream.start_tls(config, &settings.server_name, target)?;
                if !out.is_empty() {
                    stream.write_all(&out).map_err(io)?;
                }
                // The machine may have more to say now that TLS is up.
                continue;
            }
            HandshakeStep::Done(outcome) => {
                if !out.is_empty() {
                    stream.write_all(&out).map_err(io)?;
                }
                if !input.is_empty() {
                    return Err(violation("unexpected bytes after the handshake").into());
                }
                return Ok((stream, outcome));
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).map_err(io)?;
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::ConnectTimeout {
                    target: target.to_owned(),
                    after: peer.timeout,
                }
                .into())
            }
            Err(e) => return Err(io(e).into()),
        };
        if n == 0 {
            return Err(ClientError::Closed {
                target: target.to_owned(),
            }
            .into());
        }
        input.extend_from_slice(&chunk[..n]);
    }
}
