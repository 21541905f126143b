//! A connection's handshake, whichever the protocol: the one loop that
//! drives a protocol crate's sans-IO handshake machine over the socket,
//! STARTTLS included, and what becomes of its outcome. Each protocol
//! plugs in as a [`SessionHandshake`]: its machine with the session's
//! catalog (exports, partitions, allow-lists) and its refusal logging.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use tracing::info;

use super::DriverEnv;
use crate::buffer::RecvBuf;
use crate::stream::Stream;
use crate::tls::{PeerIdentity, TlsAcceptor, TlsHandshakeError};

/// Where a protocol's handshake stands after taking input: what both
/// protocol crates' `HandshakeStatus` say, as the loop needs it.
pub(crate) enum HandshakeStep<N> {
    /// Send the pending output and feed more input.
    NeedInput,
    /// The client aborted: send the pending output and close.
    Aborted,
    /// Send the pending output, then enter the transmission phase.
    Done(N),
    /// STARTTLS was accepted: send the pending output in plaintext, run
    /// the TLS handshake, then keep feeding the machine the decrypted
    /// bytes. Unconsumed input belongs to the TLS handshake.
    StartTls,
}

/// What a session handshake made of its input: the bytes consumed and
/// the step, or why the handshake failed.
pub(crate) type Handled<N, P> = Result<(usize, HandshakeStep<N>), HandshakeFailure<P>>;

/// One protocol's sans-IO server handshake machine together with what
/// the session answers it from.
pub(crate) trait SessionHandshake {
    /// What a finished handshake agreed on.
    type Negotiated;
    /// The protocol crate's handshake error.
    type Error: std::error::Error + 'static;
    /// Bytes to send now (empty when there is nothing).
    fn poll_output(&mut self) -> Vec<u8>;
    /// Consumes as much of `input` as forms complete messages, answering
    /// from the session's catalog as the client proved to be `peer` (its
    /// verified certificate's identity, once TLS is up). Returns the
    /// bytes consumed and the step; unconsumed bytes are presented again
    /// with more appended.
    fn handle_input(
        &mut self,
        input: &[u8],
        peer: Option<&PeerIdentity>,
    ) -> Handled<Self::Negotiated, Self::Error>;
}

/// Why a connection's handshake failed, whichever the protocol: `P` is
/// the protocol crate's handshake error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeFailure<P: std::error::Error + 'static> {
    #[error("socket error during the handshake")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Protocol(P),
    #[error("client did not finish the handshake within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Tls(#[from] TlsHandshakeError),
    #[error("internal error: STARTTLS accepted without TLS credentials")]
    NoTlsCredentials,
}

/// Runs `hs` over the connection, starting TLS with `tls` when the client
/// asks; `None` when the client left (or aborted, or the server stopped)
/// before it was done. What the client sent after the handshake stays in
/// `buf`.
pub(crate) fn run_handshake<H: SessionHandshake>(
    mut hs: H,
    stream: &mut Stream,
    buf: &mut RecvBuf,
    tls: Option<&TlsAcceptor>,
    env: &DriverEnv,
) -> Result<Option<H::Negotiated>, HandshakeFailure<H::Error>> {
    let deadline = Instant::now() + env.timeouts.handshake();
    let mut peer: Option<PeerIdentity> = None;
    loop {
        let out = hs.poll_output();
        if !out.is_empty() {
            stream.write_all(&out)?;
        }
        let (used, step) = hs.handle_input(buf.data(), peer.as_ref())?;
        buf.consume(used);
        match step {
            HandshakeStep::NeedInput => {}
            HandshakeStep::Aborted => {
                stream.write_all(&hs.poll_output())?;
                return Ok(None);
            }
            HandshakeStep::Done(negotiated) => {
                stream.write_all(&hs.poll_output())?;
                return Ok(Some(negotiated));
            }
            HandshakeStep::StartTls => {
                // The answer goes out in plaintext; whatever the client
                // sent after STARTTLS is the start of its TLS handshake.
                stream.write_all(&hs.poll_output())?;
                let acceptor = tls.ok_or(HandshakeFailure::NoTlsCredentials)?;
                match stream.start_tls(buf, acceptor, &env.stop, deadline)? {
                    Some(identity) => peer = identity,
                    None => return Ok(None),
                }
                continue;
            }
        }
        if used == 0 || buf.data().is_empty() {
            let out = hs.poll_output();
            if !out.is_empty() {
                stream.write_all(&out)?;
            }
            match await_handshake_input(stream, buf, env, deadline)? {
                HandshakeInput::More => {}
                HandshakeInput::Gone => return Ok(None),
                HandshakeInput::TimedOut => {
                    return Err(HandshakeFailure::TimedOut(env.timeouts.handshake()))
                }
            }
        }
    }
}

/// What waiting for more handshake bytes found (see
/// [`await_handshake_input`]).
enum HandshakeInput {
    /// More bytes are in the receive buffer.
    More,
    /// The client closed the connection, or the server is stopping: a
    /// client still negotiating has no requests in flight, so it is
    /// simply closed.
    Gone,
    /// The handshake deadline passed.
    TimedOut,
}

/// Reads more of a handshake into `buf`, waiting until `deadline` (and no
/// longer than the server runs).
fn await_handshake_input(
    stream: &mut Stream,
    buf: &mut RecvBuf,
    env: &DriverEnv,
    deadline: Instant,
) -> io::Result<HandshakeInput> {
    use crate::stop::{wait_readable, Readiness};
    if !stream.has_buffered_input() {
        let left = deadline.saturating_duration_since(Instant::now());
        match wait_readable(stream.fd(), Some(&env.stop), Some(left))? {
            Readiness::Readable => {}
            Readiness::Stop => return Ok(HandshakeInput::Gone),
            Readiness::TimedOut => return Ok(HandshakeInput::TimedOut),
        }
    }
    Ok(match stream.try_fill(buf)? {
        Some(0) => HandshakeInput::Gone,
        _ => HandshakeInput::More,
    })
}

/// What a connection does with its handshake's outcome, whichever the
/// protocol: the negotiated session, or `None` once the connection is
/// closed (the client left, or the handshake failed: counted and logged
/// with its causes and `protocol`).
pub(crate) fn handshake_outcome<T, P: std::error::Error + 'static>(
    result: Result<Option<T>, HandshakeFailure<P>>,
    protocol: &'static str,
    stream: &mut Stream,
    env: &DriverEnv,
) -> Option<T> {
    match result {
        Ok(Some(negotiated)) => Some(negotiated),
        Ok(None) => {
            tracing::debug!("client left during the handshake");
            stream.close();
            None
        }
        Err(e) => {
            env.metrics
                .handshakes_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            info!(
                protocol,
                error = &e as &dyn std::error::Error,
                "handshake failed; closing connection"
            );
            None
        }
    }
}
