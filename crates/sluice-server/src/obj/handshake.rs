//! The native protocol's handshake on a connection: drives the sans-IO
//! `ServerHandshake` over the socket, with STARTTLS through the same TLS
//! setup as NBD, and answers partition and export questions from the
//! store, the export registry and the allow-lists.

use std::collections::BTreeMap;

use sluice_nbd_proto::ExportAccess;
use sluice_obj_proto::{
    answer, HandshakeConfig, HandshakeError, HandshakeStatus, Negotiated, PartitionAccess,
    PartitionCatalog, Refusal, ServerHandshake,
};
use sluice_objstore::{ObjStoreError, ObjectStore, PartitionId};
use tracing::{info, warn};

use super::ObjService;
use crate::buffer::RecvBuf;
use crate::config::TlsIdentity;
use crate::driver::{
    run_handshake, DriverEnv, Handled, HandshakeFailure, HandshakeStep, SessionHandshake,
};
use crate::export::ExportRegistry;
use crate::stream::Stream;
use crate::tls::{AccessPolicy, PeerIdentity};

/// Which client identities may select which partitions: a partition
/// with an allow-list needs TLS and a listed client certificate.
#[derive(Debug, Default)]
pub(crate) struct PartitionPolicy {
    /// Replaced on reload (SIGHUP); read once per partition chosen.
    allow: std::sync::RwLock<BTreeMap<u64, Vec<TlsIdentity>>>,
}

impl PartitionPolicy {
    pub(crate) fn new(allow: BTreeMap<u64, Vec<TlsIdentity>>) -> Self {
        Self {
            allow: std::sync::RwLock::new(allow),
        }
    }

    /// Applies to every partition chosen from now on.
    pub(crate) fn replace(&self, allow: BTreeMap<u64, Vec<TlsIdentity>>) {
        *self.allow.write().unwrap_or_else(|p| p.into_inner()) = allow;
    }

    fn access(&self, partition: u64, tls: bool, peer: Option<&PeerIdentity>) -> PartitionAccess {
        let allow = self.allow.read().unwrap_or_else(|p| p.into_inner());
        let Some(allowed) = allow.get(&partition) else {
            return PartitionAccess::Allowed;
        };
        if !tls {
            return PartitionAccess::TlsRequired;
        }
        match peer {
            Some(p) if allowed.iter().any(|want| p.matches(want)) => PartitionAccess::Allowed,
            _ => PartitionAccess::Denied,
        }
    }
}

/// The partitions and exports as one session sees them.
struct SessionCatalog<'a> {
    store: &'a ObjectStore,
    partitions: &'a PartitionPolicy,
    registry: &'a ExportRegistry,
    exports: &'a AccessPolicy,
    peer: Option<&'a PeerIdentity>,
}

impl PartitionCatalog for SessionCatalog<'_> {
    fn partition(&self, id: u64, tls: bool) -> PartitionAccess {
        // Listing one entry is the store's existence check.
        match self.store.list(PartitionId(id), None, None, 0, false) {
            Ok(_) => self.partitions.access(id, tls, self.peer),
            Err(ObjStoreError::UnknownPartition { .. }) => PartitionAccess::Unknown,
            Err(e) => {
                warn!(partition = id, error = %e, "cannot look up partition");
                PartitionAccess::Unknown
            }
        }
    }

    fn export(&self, name: &str, tls: bool) -> (PartitionAccess, u64, bool) {
        let Some(export) = self.registry.get(name) else {
            return (PartitionAccess::Unknown, 0, false);
        };
        // The NBD allow-lists apply to an export whichever protocol asks.
        let access = match self.exports.access(&export.name, tls, self.peer) {
            ExportAccess::Allowed => PartitionAccess::Allowed,
            ExportAccess::TlsRequired => PartitionAccess::TlsRequired,
            _ => PartitionAccess::Denied,
        };
        (access, export.device.size(), export.capability.read_only)
    }
}

/// Runs the handshake; `None` when the client left (or aborted, or the
/// server stopped) before it was done. What the client sent after the
/// handshake stays in `buf`.
pub(super) fn handshake(
    stream: &mut Stream,
    buf: &mut RecvBuf,
    service: &ObjService,
    env: &DriverEnv,
) -> Result<Option<Negotiated>, HandshakeFailure<HandshakeError>> {
    let hs = ObjHandshake {
        machine: ServerHandshake::new(HandshakeConfig {
            tls: service.tls_policy,
            features: sluice_obj_proto::Features::NEGOTIABLE,
            limits: service.limits,
        }),
        service,
    };
    run_handshake(hs, stream, buf, service.tls.as_deref(), env)
}

/// The object protocol's handshake machine with the service it answers
/// from.
struct ObjHandshake<'a> {
    machine: ServerHandshake,
    service: &'a ObjService,
}

impl SessionHandshake for ObjHandshake<'_> {
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
            store: &self.service.store,
            partitions: &self.service.partitions,
            registry: &self.service.registry,
            exports: &self.service.export_access,
            peer,
        };
        let handled = self.machine.handle_input(input, &catalog);
        if let Some(refusal) = self.machine.take_refusal() {
            log_refusal(&refusal);
        }
        let (used, status) = handled.map_err(HandshakeFailure::Protocol)?;
        let step = match status {
            HandshakeStatus::NeedInput => HandshakeStep::NeedInput,
            HandshakeStatus::StartTls => HandshakeStep::StartTls,
            HandshakeStatus::Aborted => HandshakeStep::Aborted,
            HandshakeStatus::Done(negotiated) => HandshakeStep::Done(*negotiated),
        };
        Ok((used, step))
    }
}

/// Logs a refused client at the default level, as the NBD handshake
/// does: operators look for these.
fn log_refusal(refusal: &Refusal) {
    if refusal.status == answer::TLS_REQUIRED {
        info!(detail = %refusal.message, "client refused: TLS is required and the client did not start it");
    } else {
        info!(detail = %refusal.message, "client refused: its identity is not on the allow-list");
    }
}
