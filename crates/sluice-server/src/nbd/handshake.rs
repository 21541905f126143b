//! The NBD handshake on a connection: drives the sans-IO
//! `ServerHandshake` over the socket, including STARTTLS.

use std::io::{self, Write};
use std::time::Instant;

use sluice_nbd_proto::{
    ExportAccess, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeStatus, Negotiated, Refusal,
    ServerHandshake,
};
use tracing::info;

use super::NbdService;
use crate::buffer::RecvBuf;
use crate::driver::{await_handshake_input, DriverEnv, HandshakeInput};
use crate::export::ExportRegistry;
use crate::stream::Stream;
use crate::tls::{AccessPolicy, PeerIdentity, TlsHandshakeError};

#[derive(Debug, thiserror::Error)]
pub(super) enum HandshakeFailure {
    #[error("socket error during the handshake")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Protocol(#[from] sluice_nbd_proto::HandshakeError),
    #[error("client did not finish the handshake within {0:?}")]
    TimedOut(std::time::Duration),
    #[error(transparent)]
    Tls(#[from] TlsHandshakeError),
    #[error("internal error: STARTTLS accepted without TLS credentials")]
    NoTlsCredentials,
}

/// The export catalog as one session sees it.
pub(crate) struct SessionCatalog<'a> {
    pub(crate) registry: &'a ExportRegistry,
    pub(crate) policy: &'a AccessPolicy,
    /// TLS has been started on this session.
    pub(crate) tls: bool,
    /// The verified client certificate's identity, if one was presented.
    pub(crate) peer: Option<&'a PeerIdentity>,
}

impl ExportCatalog for SessionCatalog<'_> {
    fn list(&self) -> Vec<(String, String)> {
        self.registry.list()
    }
    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        self.registry.lookup(name)
    }
    fn access(&self, name: &str) -> ExportAccess {
        self.policy.access(name, self.tls, self.peer)
    }
}

/// Runs the handshake; `None` when the client left (or the server
/// stopped) before it was done. What the client sent after the handshake
/// stays in `buf`.
pub(super) fn handshake(
    stream: &mut Stream,
    buf: &mut RecvBuf,
    service: &NbdService,
    env: &DriverEnv,
) -> Result<Option<Negotiated>, HandshakeFailure> {
    let deadline = Instant::now() + env.timeouts.handshake();
    let mut hs = ServerHandshake::new(HandshakeConfig {
        tls: service.tls_policy,
        ..HandshakeConfig::default()
    });
    let mut peer: Option<PeerIdentity> = None;
    let mut refusals = 0u32;
    loop {
        let out = hs.poll_output();
        if !out.is_empty() {
            stream.write_all(&out)?;
        }
        let catalog = SessionCatalog {
            registry: &service.registry,
            policy: &service.access,
            tls: hs.tls_active(),
            peer: peer.as_ref(),
        };
        let handled = hs.handle_input(buf.data(), &catalog);
        if let Some(refusal) = hs.take_refusal() {
            log_refusal(&refusal, &mut refusals);
        }
        let (used, status) = handled?;
        buf.consume(used);
        match status {
            HandshakeStatus::NeedInput => {}
            HandshakeStatus::Aborted => {
                stream.write_all(&hs.poll_output())?;
                return Ok(None);
            }
            HandshakeStatus::Done(n) => {
                stream.write_all(&hs.poll_output())?;
                return Ok(Some(*n));
            }
            HandshakeStatus::StartTls => {
                // The ACK goes out in plaintext; whatever the client sent
                // after STARTTLS is the start of its TLS handshake.
                stream.write_all(&hs.poll_output())?;
                let acceptor = service
                    .tls
                    .as_deref()
                    .ok_or(HandshakeFailure::NoTlsCredentials)?;
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

/// Logs a refused client at the default level, once per connection (a
/// client refused TLS_REQD may try several options before it gives up).
fn log_refusal(refusal: &Refusal, count: &mut u32) {
    *count += 1;
    if *count > 1 {
        return;
    }
    match refusal {
        Refusal::TlsRequired => {
            info!("client refused: the server requires TLS and the client did not start it")
        }
        Refusal::ExportNeedsTls { export } => {
            info!(%export, "client refused: the export requires TLS and the client did not start it")
        }
        Refusal::ExportDenied { export } => {
            info!(%export, "client refused: its identity is not on the export's allow-list")
        }
        _ => info!(?refusal, "client refused"),
    }
}
