//! The server's listening sockets: binding the configured addresses (or
//! taking the ones a service manager bound), and accepting connections on
//! them; also the metrics endpoint's listener.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::config::{ListenAddr, ServerConfig};
use crate::server::ServerError;
use crate::service::InheritedListeners;
use crate::socket::{clear_stale_socket, Socket};
use crate::stream::Stream;

/// A bound listening socket. A Unix socket's path is removed when it is
/// dropped (at the end of `run`, or when a start fails after binding it)
/// if the server bound it (the `bool`), not if systemd did.
pub(crate) enum ListenSocket {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf, bool),
}

impl Drop for ListenSocket {
    fn drop(&mut self) {
        if let Self::Unix(_, path, true) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl ListenSocket {
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Self::Tcp(l) => l.as_fd(),
            Self::Unix(l, _, _) => l.as_fd(),
        }
    }

    /// Accepts a connection: a blocking stream, and the peer's address
    /// for logs.
    pub(crate) fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Self::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                Ok((Stream::Plain(Socket::Tcp(s)), peer.to_string()))
            }
            Self::Unix(l, path, _) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Ok((
                    Stream::Plain(Socket::Unix(s)),
                    format!("unix:{}", path.display()),
                ))
            }
        }
    }
}

/// The sockets of every protocol listener, bound or inherited, and the
/// addresses they are on (port 0 resolved).
#[derive(Default)]
pub(crate) struct ListenSockets {
    pub(crate) nbd: Vec<ListenSocket>,
    pub(crate) nbd_addrs: Vec<ListenAddr>,
    pub(crate) objects: Vec<ListenSocket>,
    pub(crate) object_addrs: Vec<ListenAddr>,
}

impl ListenSockets {
    /// Takes `inherited` (sockets a service manager bound) when given,
    /// else binds the NBD and object addresses `config` names. Sockets
    /// bound before a failure are dropped, which removes the Unix paths
    /// the server bound.
    pub(crate) fn bind(
        config: &ServerConfig,
        inherited: Option<InheritedListeners>,
    ) -> Result<Self, ServerError> {
        let mut sockets = Self::default();
        if let Some(inherited) = inherited {
            for fd in inherited.nbd {
                let (socket, local) = inherited_socket(fd)?;
                sockets.nbd.push(socket);
                sockets.nbd_addrs.push(local);
            }
            for fd in inherited.objects {
                let (socket, local) = inherited_socket(fd)?;
                sockets.objects.push(socket);
                sockets.object_addrs.push(local);
            }
        } else {
            for addr in &config.listen {
                let (socket, local) = bind_socket(addr)?;
                sockets.nbd.push(socket);
                sockets.nbd_addrs.push(local);
            }
            for addr in config.objects.iter().flat_map(|o| &o.listen) {
                let (socket, local) = bind_socket(addr)?;
                sockets.objects.push(socket);
                sockets.object_addrs.push(local);
            }
        }
        Ok(sockets)
    }
}

/// Binds one listening address; returns the socket and the address
/// bound (port 0 resolved). A Unix path may hold only a stale socket,
/// which is replaced.
fn bind_socket(addr: &ListenAddr) -> Result<(ListenSocket, ListenAddr), ServerError> {
    let bind_err = |source| ServerError::Bind {
        addr: addr.to_string(),
        source,
    };
    match addr {
        ListenAddr::Tcp(a) => {
            let l = TcpListener::bind(a).map_err(bind_err)?;
            l.set_nonblocking(true).map_err(bind_err)?;
            let local = ListenAddr::Tcp(l.local_addr().map_err(bind_err)?);
            Ok((ListenSocket::Tcp(l), local))
        }
        ListenAddr::Unix(path) => {
            clear_stale_socket(path)?;
            let l = UnixListener::bind(path).map_err(bind_err)?;
            // From here on, dropping it removes the path.
            let socket = ListenSocket::Unix(l, path.clone(), true);
            if let ListenSocket::Unix(l, _, _) = &socket {
                l.set_nonblocking(true).map_err(bind_err)?;
            }
            Ok((socket, ListenAddr::Unix(path.clone())))
        }
    }
}

/// A listening socket a service manager bound, and its address.
fn inherited_socket(fd: std::os::fd::OwnedFd) -> Result<(ListenSocket, ListenAddr), ServerError> {
    let err = |source| ServerError::Bind {
        addr: "a socket passed by systemd".into(),
        source,
    };
    let family = rustix::net::getsockname(&fd)
        .map_err(|e| err(e.into()))?
        .address_family();
    if family == rustix::net::AddressFamily::UNIX {
        let l = UnixListener::from(fd);
        l.set_nonblocking(true).map_err(err)?;
        let local = l.local_addr().map_err(err)?;
        let path = local
            .as_pathname()
            .map_or_else(|| PathBuf::from("(unnamed)"), Path::to_path_buf);
        Ok((
            ListenSocket::Unix(l, path.clone(), false),
            ListenAddr::Unix(path),
        ))
    } else {
        let l = TcpListener::from(fd);
        l.set_nonblocking(true).map_err(err)?;
        let local = ListenAddr::Tcp(l.local_addr().map_err(err)?);
        Ok((ListenSocket::Tcp(l), local))
    }
}

/// Binds the metrics endpoint's address, if one is configured; returns
/// the listener and the address bound (port 0 resolved).
pub(crate) fn bind_metrics_listener(
    addr: Option<SocketAddr>,
) -> Result<Option<(TcpListener, SocketAddr)>, ServerError> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let bind_err = |source| ServerError::Bind {
        addr: format!("metrics {addr}"),
        source,
    };
    let l = TcpListener::bind(addr).map_err(bind_err)?;
    let local = l.local_addr().map_err(bind_err)?;
    Ok(Some((l, local)))
}
