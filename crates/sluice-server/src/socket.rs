//! A connected client socket, TCP or Unix: the bottom of a connection's
//! stream. TLS runs over it (`tls::TlsStream`); `stream::Stream` is
//! either.

use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

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
