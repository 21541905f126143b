//! The NBD handshake on a connection: drives the sans-IO
//! `ServerHandshake` over the socket, including STARTTLS.

use sluice_nbd_proto::{
    ExportAccess, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeError, HandshakeStatus,
    Negotiated, Refusal, ServerHandshake,
};
use tracing::info;

use super::NbdService;
use crate::buffer::RecvBuf;
use crate::driver::{
    run_handshake, DriverEnv, Handled, HandshakeFailure, HandshakeStep, SessionHandshake,
};
use crate::export::ExportRegistry;
use crate::stream::Stream;
use crate::tls::{AccessPolicy, PeerIdentity};

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
) -> Result<Option<Negotiated>, HandshakeFailure<HandshakeError>> {
    let hs = NbdHandshake {
        machine: ServerHandshake::new(HandshakeConfig {
            tls: service.tls_policy,
            ..HandshakeConfig::default()
        }),
        service,
        refusals: 0,
    };
    run_handshake(hs, stream, buf, service.tls.as_deref(), env)
}

/// The NBD handshake machine with the service it answers from.
struct NbdHandshake<'a> {
    machine: ServerHandshake,
    service: &'a NbdService,
    /// Clients refused so far on this connection (only the first is
    /// logged).
    refusals: u32,
}

impl SessionHandshake for NbdHandshake<'_> {
    type Negotiated = Negotiated;
    type Error = HandshakeError;

    fn poll_output(&mut self) -> Vec<u8> {
        self.machine.poll_output()
    }

    fn handle_input(
        &mut self,
        input: &[u8],
        peer: Option<&PeerIdentity>,
    ) -> Handled<Negotiated, HandshakeError> {
        let catalog = SessionCatalog {
            registry: &self.service.registry,
            policy: &self.service.access,
            tls: self.machine.tls_active(),
            peer,
        };
        let handled = self.machine.handle_input(input, &catalog);
        if let Some(refusal) = self.machine.take_refusal() {
            log_refusal(&refusal, &mut self.refusals);
        }
        let (used, status) = handled.map_err(HandshakeFailure::Protocol)?;
        let step = match status {
            HandshakeStatus::NeedInput => HandshakeStep::NeedInput,
            HandshakeStatus::Aborted => HandshakeStep::Aborted,
            HandshakeStatus::Done(negotiated) => HandshakeStep::Done(*negotiated),
            HandshakeStatus::StartTls => HandshakeStep::StartTls,
        };
        Ok((used, step))
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
