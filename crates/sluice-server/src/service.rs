//! Running under a service manager: systemd socket activation (listening
//! sockets handed over as file descriptors), readiness notification
//! (`sd_notify`), and reloading TLS credentials and allow-lists while
//! serving (SIGHUP in the binary).
//!
//! # Which descriptor serves which protocol
//!
//! systemd passes descriptors 3, 4, ... and, in `LISTEN_FDNAMES`, one
//! name per descriptor (a socket unit's `FileDescriptorName=`, by default
//! the unit's name). A descriptor named `objects` serves the native object
//! protocol; every other one serves NBD. One socket unit gives all its
//! sockets one name, so objects need a second unit (see
//! contrib/systemd/sluice-objects.socket).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use thiserror::Error;

use crate::config::{ConfigError, ServerConfig, TlsIdentity, TlsMode};
use crate::obj::PartitionPolicy;
use crate::tls::{AccessPolicy, TlsAcceptor, TlsSetupError};

/// The descriptor name (`FileDescriptorName=`) of object listeners.
pub const OBJECTS_FD_NAME: &str = "objects";

/// Why the descriptors systemd passed cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ActivationError {
    #[error("cannot read the sockets passed by systemd (LISTEN_FDS, LISTEN_FDNAMES)")]
    Environment(#[source] io::Error),
    #[error("descriptor {fd} passed by systemd ({name}) is not a listening stream socket")]
    NotListening { fd: RawFd, name: String },
    #[error("cannot inspect descriptor {fd} passed by systemd ({name})")]
    Inspect {
        fd: RawFd,
        name: String,
        #[source]
        source: io::Error,
    },
}

/// Listening sockets a service manager opened for the server, by
/// protocol. The server serves on these instead of binding its own.
#[derive(Debug, Default)]
pub struct InheritedListeners {
    pub(crate) nbd: Vec<OwnedFd>,
    pub(crate) objects: Vec<OwnedFd>,
}

impl InheritedListeners {
    /// Takes the sockets systemd passed to this process (`LISTEN_PID` is
    /// ours), or `None` when it was not socket-activated. Unsets
    /// `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` so that children do
    /// not take them for theirs, and marks the descriptors close-on-exec;
    /// call it before starting threads.
    pub fn from_systemd() -> Result<Option<Self>, ActivationError> {
        let fds: Vec<(RawFd, String)> = sd_notify::listen_fds_with_names()
            .map_err(ActivationError::Environment)?
            .collect();
        for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            // Edition 2021: a safe call. The caller runs this before any
            // thread that reads the environment exists.
            std::env::remove_var(var);
        }
        if fds.is_empty() {
            return Ok(None);
        }
        let mut inherited = Self::default();
        for (fd, name) in fds {
            // SAFETY: systemd hands descriptors 3..3+LISTEN_FDS to the
            // process named in LISTEN_PID (checked by `listen_fds`), open
            // and owned by nobody else in this process; each is taken once.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let listening = rustix::net::sockopt::socket_acceptconn(&owned).map_err(|e| {
                ActivationError::Inspect {
                    fd,
                    name: name.clone(),
                    source: e.into(),
                }
            })?;
            let stream = rustix::net::sockopt::socket_type(&owned)
                .is_ok_and(|t| t == rustix::net::SocketType::STREAM);
            if !listening || !stream {
                return Err(ActivationError::NotListening { fd, name });
            }
            if name == OBJECTS_FD_NAME {
                inherited.objects.push(owned);
            } else {
                inherited.nbd.push(owned);
            }
        }
        Ok(Some(inherited))
    }

    /// How many NBD and object listeners there are.
    pub fn counts(&self) -> (usize, usize) {
        (self.nbd.len(), self.objects.len())
    }
}

/// What the server tells its service manager (`sd_notify`). Without
/// `NOTIFY_SOCKET` in the environment each is a no-op.
#[derive(Debug, Clone, Copy)]
pub enum Notice<'a> {
    /// Every listener is bound and every export open; `status` says
    /// what is served.
    Ready { status: &'a str },
    /// A reload began (`RELOADING=1` with the monotonic time).
    Reloading,
    /// A reload ended; `status` says how.
    Reloaded { status: &'a str },
    /// Shutdown began.
    Stopping,
}

/// Sends `notice` to the service manager, if there is one.
pub fn notify(notice: Notice<'_>) -> io::Result<()> {
    use sd_notify::NotifyState;
    match notice {
        Notice::Ready { status } | Notice::Reloaded { status } => {
            sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(status)])
        }
        Notice::Reloading => {
            sd_notify::notify(&[NotifyState::Reloading, NotifyState::monotonic_usec_now()?])
        }
        Notice::Stopping => sd_notify::notify(&[NotifyState::Stopping]),
    }
}

/// Why a reload was refused; the server keeps what it had.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ReloadError {
    #[error("{0} needs a restart; nothing was reloaded")]
    NeedsRestart(&'static str),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot load the new TLS credentials: {0}")]
    Tls(TlsSetupError),
}

/// What a reload can replace while connections keep running.
#[derive(Debug)]
pub(crate) struct Reloadable {
    pub(crate) mode: TlsMode,
    pub(crate) tls: Option<Arc<TlsAcceptor>>,
    pub(crate) exports: Arc<AccessPolicy>,
    pub(crate) export_names: Vec<String>,
    pub(crate) partitions: Option<Arc<PartitionPolicy>>,
}

impl Reloadable {
    /// Loads and checks everything `config` names, then swaps it in at
    /// once; on any error nothing changes.
    pub(crate) fn reload(&self, config: &ServerConfig) -> Result<(), ReloadError> {
        config.tls.validate()?;
        if config.tls.mode != self.mode {
            return Err(ReloadError::NeedsRestart("changing the TLS mode"));
        }
        if let Some(name) = config
            .tls
            .allow
            .keys()
            .find(|n| !self.export_names.contains(n))
        {
            return Err(ConfigError::TlsAllowUnknownExport(name.clone()).into());
        }
        let partitions: BTreeMap<u64, Vec<TlsIdentity>> = match &config.objects {
            Some(o) => o.partition_allow()?,
            None => BTreeMap::new(),
        };
        if !partitions.is_empty() && self.partitions.is_none() {
            return Err(ReloadError::NeedsRestart("serving objects"));
        }
        if !partitions.is_empty() && !config.tls.verify_peer {
            return Err(ConfigError::Tls(
                "partition allow-lists need verified client certificates (--tls-verify-peer)",
            )
            .into());
        }
        let acceptor = TlsAcceptor::load(&config.tls).map_err(ReloadError::Tls)?;
        match (&self.tls, acceptor) {
            (Some(current), Some(new)) => current.replace(new),
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                return Err(ReloadError::NeedsRestart(
                    "turning TLS on or off (--tls-certificates)",
                ))
            }
        }
        self.exports.replace(config.tls.allow.clone());
        if let Some(p) = &self.partitions {
            p.replace(partitions);
        }
        Ok(())
    }
}
