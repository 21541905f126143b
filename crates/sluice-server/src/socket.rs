//! A connected client socket, TCP or Unix: the bottom of a connection's
//! stream. TLS runs over it (`tls::TlsStream`); `stream::Stream` is
//! either. Also what a Unix listening socket's path may hold before the
//! server binds there.

use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

use thiserror::Error;

use crate::buffer::RecvBuf;

/// One client connection's socket.
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            Self::Tcp(s) => Self::Tcp(s.try_clone()?),
            Self::Unix(s) => Self::Unix(s.try_clone()?),
        })
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.shutdown(how),
            Self::Unix(s) => s.shutdown(how),
        }
    }

    /// Sets the socket's send timeout (SO_SNDTIMEO; `None`: block
    /// forever). A send that makes no progress for that long fails with
    /// `WouldBlock`. Shared by every clone of the socket.
    pub(crate) fn set_send_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_write_timeout(timeout),
            Self::Unix(s) => s.set_write_timeout(timeout),
        }
    }

    /// Sets `SO_RCVLOWAT`: `poll` reports the socket readable, and a
    /// sleeping receiver is woken, only once `bytes` have arrived (or at
    /// end of stream or on error). A non-blocking receive still returns
    /// whatever is there.
    pub(crate) fn set_receive_low_water(&self, bytes: usize) -> io::Result<()> {
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fd()` is an open socket borrowed for the call, and the
        // option value points at a live `c_int` whose size is passed; the
        // kernel only reads those 4 bytes. (rustix 1 has no wrapper for
        // SO_RCVLOWAT.)
        let rc = unsafe {
            libc::setsockopt(
                self.fd().as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                (&value as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// The socket's descriptor (for `poll`).
    #[inline]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Self::Tcp(s) => s.as_fd(),
            Self::Unix(s) => s.as_fd(),
        }
    }

    /// One non-blocking receive into `buf`: `Ok(None)` if nothing is
    /// waiting, `Ok(Some(0))` at end of stream.
    #[inline]
    pub(crate) fn try_fill(&self, buf: &mut RecvBuf) -> io::Result<Option<usize>> {
        buf.try_fill_from(self.fd())
    }

    /// Writes every slice completely, with as few syscalls as the kernel
    /// allows; fails with `TimedOut` once `deadline` has passed and bytes
    /// remain (a client that takes a trickle at a time is not waited for
    /// forever; the socket's send timeout covers one send that makes no
    /// progress).
    pub(crate) fn write_all_until(
        &mut self,
        mut bufs: &mut [IoSlice<'_>],
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        IoSlice::advance_slices(&mut bufs, 0);
        while !bufs.is_empty() {
            match self.write_vectored(bufs) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if !bufs.is_empty() && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(send_timed_out());
            }
        }
        Ok(())
    }

    /// Like [`write_all_until`](Self::write_all_until) for address ranges
    /// Rust never dereferences (a shared file mapping, see
    /// `sluice_storage::MappedBytes`): the kernel copies them, and reports
    /// an unmapped or truncated page as EFAULT.
    pub(crate) fn write_all_raw_until(
        &mut self,
        mut iov: &mut [libc::iovec],
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        let fd = self.fd().as_raw_fd();
        while !iov.is_empty() {
            let count = iov.len().min(1024) as libc::c_int;
            // SAFETY: `iov` is a valid array of `count` iovecs; each
            // describes memory the caller keeps mapped for this call (the
            // kernel validates the addresses and fails with EFAULT rather
            // than fault); `fd` is this socket, open while `self` lives.
            let n = unsafe { libc::writev(fd, iov.as_ptr(), count) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            let mut n = n as usize;
            while let Some(first) = iov.first_mut() {
                if n < first.iov_len {
                    first.iov_base = first.iov_base.cast::<u8>().wrapping_add(n).cast();
                    first.iov_len -= n;
                    break;
                }
                n -= first.iov_len;
                iov = &mut iov[1..];
            }
            if !iov.is_empty() && deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(send_timed_out());
            }
        }
        Ok(())
    }

    /// Sends `header` (marked as having more to come, so it leaves in one
    /// segment with the data), then `len` bytes of `file` from `offset`
    /// with `sendfile` (the kernel takes them from the page cache; Rust
    /// never sees them), then zeros for any of them past the file's end,
    /// which read as zeros. Each call waits at most the socket's send
    /// timeout, the whole no later than `deadline`.
    pub(crate) fn send_file_until(
        &mut self,
        mut header: &[u8],
        file: BorrowedFd<'_>,
        mut offset: u64,
        mut len: usize,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        use rustix::io::Errno;
        use rustix::net::SendFlags;
        const ZEROS: [u8; 4096] = [0; 4096];
        let socket = self.fd();
        let late = || deadline.is_some_and(|d| Instant::now() >= d);
        while !header.is_empty() {
            match rustix::net::send(socket, header, SendFlags::MORE | SendFlags::NOSIGNAL) {
                Ok(n) => header = &header[n..],
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if !header.is_empty() && late() {
                return Err(send_timed_out());
            }
        }
        while len > 0 {
            match rustix::fs::sendfile(socket, file, Some(&mut offset), len) {
                // The file ends early: the rest is zeros.
                Ok(0) => break,
                Ok(n) => len -= n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if len > 0 && late() {
                return Err(send_timed_out());
            }
        }
        while len > 0 {
            match rustix::net::send(socket, &ZEROS[..len.min(ZEROS.len())], SendFlags::NOSIGNAL) {
                Ok(n) => len -= n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if len > 0 && late() {
                return Err(send_timed_out());
            }
        }
        Ok(())
    }
}

fn send_timed_out() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "client did not take the replies within the send timeout",
    )
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write_vectored(bufs),
            Self::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why a Unix socket path cannot be listened on: something is there that
/// the server must not remove.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SocketPathError {
    /// A file, directory or other non-socket is at the path.
    #[error(
        "{path} is {what}, not a socket; refusing to replace it (remove it or choose another path)"
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
        /// What is there, in words ("a regular file").
        what: &'static str,
    },
    /// A server answers on the socket.
    #[error("unix socket {path} is in use by a running server")]
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// The path could not be examined or the stale socket removed.
    #[error("cannot {action} unix socket path {path}")]
    Io {
        /// What was being done: "examine", "probe", "remove the stale".
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

/// Makes `path` free for a listening Unix socket: nothing there is fine;
/// a socket nobody answers on (left by a server that died) is removed;
/// anything else (a file, a directory, a link, a live socket) is an
/// error and left alone.
pub(crate) fn clear_stale_socket(path: &Path) -> Result<(), SocketPathError> {
    let io_err = |action, source| SocketPathError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("examine", e)),
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_file() {
            "a regular file"
        } else if kind.is_dir() {
            "a directory"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else {
            "a device or pipe"
        };
        return Err(SocketPathError::NotASocket {
            path: path.to_path_buf(),
            what,
        });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(SocketPathError::InUse {
            path: path.to_path_buf(),
        }),
        // Nobody listens: a stale socket from a server that died.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(|e| io_err("remove the stale", e))
        }
        Err(e) => Err(io_err("probe", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn only_a_stale_socket_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.sock");
        clear_stale_socket(&missing).unwrap();

        let file = dir.path().join("data.img");
        std::fs::write(&file, b"precious").unwrap();
        let e = clear_stale_socket(&file).unwrap_err();
        assert!(
            matches!(
                e,
                SocketPathError::NotASocket {
                    what: "a regular file",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"precious");

        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let e = clear_stale_socket(&sub).unwrap_err();
        assert!(
            matches!(
                e,
                SocketPathError::NotASocket {
                    what: "a directory",
                    ..
                }
            ),
            "{e}"
        );
        assert!(sub.is_dir());

        let live = dir.path().join("live.sock");
        let listener = UnixListener::bind(&live).unwrap();
        let e = clear_stale_socket(&live).unwrap_err();
        assert!(matches!(e, SocketPathError::InUse { .. }), "{e}");
        assert!(live.exists());

        // Closing the listener leaves its path behind: that one goes.
        drop(listener);
        assert!(live.exists());
        clear_stale_socket(&live).unwrap();
        assert!(!live.exists());
    }
}
