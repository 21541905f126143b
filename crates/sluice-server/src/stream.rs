//! A connection's byte stream: its socket in plaintext, or (after
//! STARTTLS) the TLS session over it. Layers: `socket::Socket` at the
//! bottom, `tls::TlsStream` over a socket, `Stream` over both.

use std::io::{self, IoSlice, Write};
use std::net::Shutdown;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use tracing::info;

use crate::buffer::RecvBuf;
use crate::socket::Socket;
use crate::stop::StopSignal;
use crate::tls::{PeerIdentity, TlsAcceptor, TlsHandshakeError, TlsStream};

/// One client connection's stream.
#[derive(Debug)]
pub(crate) enum Stream {
    /// Bytes go to the socket as they are.
    Plain(Socket),
    /// After STARTTLS: the socket and its TLS session (see `tls`).
    Tls(Box<TlsStream>),
}

impl Stream {
    /// The socket underneath.
    #[inline]
    pub(crate) fn socket(&self) -> &Socket {
        match self {
            Self::Plain(s) => s,
            Self::Tls(t) => t.socket(),
        }
    }

    /// Runs the TLS handshake after a protocol's STARTTLS was answered
    /// and puts the TLS stream in place of the plaintext one (what `buf`
    /// holds is the start of the client's TLS handshake). `None` when the
    /// server stopped meanwhile; otherwise the verified client identity,
    /// if any. Every protocol's STARTTLS goes through here.
    pub(crate) fn start_tls(
        &mut self,
        buf: &mut RecvBuf,
        acceptor: &TlsAcceptor,
        stop: &StopSignal,
        deadline: Instant,
    ) -> Result<Option<Option<PeerIdentity>>, TlsHandshakeError> {
        let accepted = TlsStream::accept(
            self.socket().try_clone()?,
            acceptor,
            buf.data(),
            stop,
            deadline,
        );
        let (tls, identity) = match accepted {
            Ok(a) => a,
            // Like a plaintext client still negotiating at shutdown.
            Err(TlsHandshakeError::Stopped) => return Ok(None),
            Err(e) => return Err(e),
        };
        buf.consume(buf.data().len());
        *self = Self::Tls(Box::new(tls));
        match &identity {
            Some(id) => info!(client = %id.subject, "TLS started; client certificate verified"),
            None => info!("TLS started"),
        }
        Ok(Some(identity))
    }

    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            Self::Plain(s) => Self::Plain(s.try_clone()?),
            Self::Tls(t) => Self::Tls(Box::new(t.try_clone()?)),
        })
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.socket().shutdown(how)
    }

    /// See [`Socket::set_send_timeout`].
    pub(crate) fn set_send_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        self.socket().set_send_timeout(timeout)
    }

    /// See [`Socket::set_receive_low_water`].
    pub(crate) fn set_receive_low_water(&self, bytes: usize) -> io::Result<()> {
        self.socket().set_receive_low_water(bytes)
    }

    /// The socket's descriptor (for `poll`).
    #[inline]
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.socket().fd()
    }

    /// One non-blocking receive into `buf`: `Ok(None)` if nothing is
    /// waiting, `Ok(Some(0))` at end of stream. With TLS, what is appended
    /// is the decrypted bytes.
    #[inline]
    pub(crate) fn try_fill(&mut self, buf: &mut RecvBuf) -> io::Result<Option<usize>> {
        match self {
            Self::Plain(s) => s.try_fill(buf),
            Self::Tls(t) => t.try_fill(buf),
        }
    }

    /// Whether a receive may find data the socket's readiness does not
    /// show (TLS buffers). Check before sleeping in `poll`.
    #[inline]
    pub(crate) fn has_buffered_input(&self) -> bool {
        match self {
            Self::Plain(_) => false,
            Self::Tls(t) => t.has_buffered_input(),
        }
    }

    /// Ends the stream politely: a TLS close_notify. Nothing for
    /// plaintext sockets (closing them is enough).
    pub(crate) fn close(&mut self) {
        if let Self::Tls(t) = self {
            t.close();
        }
    }

    /// Writes every slice completely; see [`Socket::write_all_until`].
    pub(crate) fn write_all_until(
        &mut self,
        bufs: &mut [IoSlice<'_>],
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.write_all_until(bufs, deadline),
            Self::Tls(t) => t.write_all_vectored(bufs, deadline),
        }
    }

    /// Whether bytes go to the socket as they are (no TLS), so the kernel
    /// can copy them from wherever they are.
    pub(crate) fn is_plain(&self) -> bool {
        matches!(self, Self::Plain(_))
    }

    /// See [`Socket::send_file_until`]. Plain sockets only.
    pub(crate) fn send_file_until(
        &mut self,
        header: &[u8],
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.send_file_until(header, file, offset, len, deadline),
            Self::Tls(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "sendfile is for plaintext sockets",
            )),
        }
    }

    /// See [`Socket::write_all_raw_until`]. Plain sockets only.
    pub(crate) fn write_all_raw_until(
        &mut self,
        iov: &mut [libc::iovec],
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        match self {
            Self::Plain(s) => s.write_all_raw_until(iov, deadline),
            Self::Tls(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "raw sends are for plaintext sockets",
            )),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write(buf),
            Self::Tls(t) => t
                .write_all_vectored(&[IoSlice::new(buf)], None)
                .map(|()| buf.len()),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Plain(s) => s.write_vectored(bufs),
            Self::Tls(t) => {
                t.write_all_vectored(bufs, None)?;
                Ok(bufs.iter().map(|b| b.len()).sum())
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
