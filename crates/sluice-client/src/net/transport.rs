//! The byte stream under a connection: a TCP or Unix socket, plaintext or
//! TLS (rustls, started with `NBD_OPT_STARTTLS`).
//!
//! # One TLS session, a reader and a writer
//!
//! [`Client`](crate::Client) reads replies on one thread while callers
//! write requests on others, so a TLS stream is two [`Stream`] handles
//! over one `rustls::ClientConnection` behind a mutex. The mutex is only
//! held for in-memory work (decrypting received ciphertext, encrypting a
//! request), never across a socket call, so a writer blocked on a full
//! socket never stops the reader. Writers are already serialised by their
//! driver (one thread, or the client's socket lock), so records reach
//! the socket in the order rustls numbered them. The reader never writes:
//! records that reading produces (a key update answer, an alert) are
//! queued in rustls and go out ahead of the next request's bytes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::net::uri::{Target, TlsSettings};
use crate::ClientError;

/// The CA the client trusts, in the `tls-certificates` directory.
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// The client's certificate chain (optional).
pub const CLIENT_CERT_FILE: &str = "client-cert.pem";
/// The client's private key (needed with the certificate).
pub const CLIENT_KEY_FILE: &str = "client-key.pem";

/// A connected socket.
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    /// Connects to `target`, giving up after `timeout` (per address tried).
    pub(crate) fn connect(target: &Target, timeout: Duration) -> Result<Self, ClientError> {
        let name = target.to_string();
        let err = |source| ClientError::Connect {
            target: name.clone(),
            source,
        };
        match target {
            Target::Tcp(addr) => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                for a in addr.as_str().to_socket_addrs().map_err(err)? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => {
                            s.set_nodelay(true).map_err(err)?;
                            return Ok(Self::Tcp(s));
                        }
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                            return Err(ClientError::ConnectTimeout {
                                target: name.clone(),
                                after: timeout,
                            })
                        }
                        Err(e) => last = e,
                    }
                }
                Err(err(last))
            }
            Target::Unix(path) => Ok(Self::Unix(UnixStream::connect(path).map_err(err)?)),
        }
    }

    fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            Self::Tcp(s) => Self::Tcp(s.try_clone()?),
            Self::Unix(s) => Self::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        let _ = match self {
            Self::Tcp(s) => s.shutdown(Shutdown::Both),
            Self::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Self::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_read_timeout(t),
            Self::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_write_timeout(t),
            Self::Unix(s) => s.set_write_timeout(t),
        }
    }
}

/// A send that ran into the write timeout says so (the socket reports
/// it as `WouldBlock`); part of the data may have gone, so the
/// connection cannot carry another frame.
fn stalled(e: io::Error) -> io::Error {
    if matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    ) {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the peer took no data within the request timeout",
        )
    } else {
        e
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
        }
    }

    fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read_vectored(bufs),
            Self::Unix(s) => s.read_vectored(bufs),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write_vectored(bufs),
            Self::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn lock(m: &Mutex<ClientConnection>) -> MutexGuard<'_, ClientConnection> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A plaintext or TLS stream; clones share the TLS session.
#[derive(Debug)]
pub(crate) struct Stream {
    socket: Socket,
    tls: Option<Arc<Mutex<ClientConnection>>>,
    /// Ciphertext received (reader only); `cipher_start..cipher_end` is
    /// not yet given to rustls.
    cipher: Vec<u8>,
    cipher_start: usize,
    cipher_end: usize,
    /// Encrypted records waiting to be written (writer only).
    records: Vec<u8>,
}

impl Stream {
    pub(crate) fn plain(socket: Socket) -> Self {
        Self {
            socket,
            tls: None,
            cipher: Vec::new(),
            cipher_start: 0,
            cipher_end: 0,
            records: Vec::new(),
        }
    }

    /// Runs the TLS handshake on a plaintext stream (after the server
    /// accepted `NBD_OPT_STARTTLS`).
    pub(crate) fn start_tls(
        self,
        config: Arc<ClientConfig>,
        server_name: &str,
        target: &str,
    ) -> Result<Self, ClientError> {
        let tls_err = |reason: String| ClientError::Tls {
            target: target.to_owned(),
            reason,
        };
        let name = ServerName::try_from(server_name.to_owned())
            .map_err(|e| tls_err(format!("bad server name {server_name:?}: {e}")))?;
        let mut conn = ClientConnection::new(config, name).map_err(|e| tls_err(e.to_string()))?;
        let mut socket = self.socket;
        while conn.is_handshaking() {
            conn.complete_io(&mut socket)
                .map_err(|e| tls_err(e.to_string()))?;
        }
        Ok(Self {
            socket,
            tls: Some(Arc::new(Mutex::new(conn))),
            cipher: vec![0; 64 * 1024],
            cipher_start: 0,
            cipher_end: 0,
            records: Vec::new(),
        })
    }

    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            socket: self.socket.try_clone()?,
            tls: self.tls.clone(),
            cipher: vec![0; if self.tls.is_some() { 64 * 1024 } else { 0 }],
            cipher_start: 0,
            cipher_end: 0,
            records: Vec::new(),
        })
    }

    /// Closes both directions (wakes a reader blocked on this socket).
    pub(crate) fn shutdown(&self) {
        self.socket.shutdown();
    }

    /// Read and write timeouts (`None`: block): the handshake's, then
    /// the request timeout, so a peer that stops taking data fails a
    /// send as one that stops answering fails a wait.
    pub(crate) fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket.set_timeouts(t)
    }

    /// Write timeout only (a last message on the way out).
    pub(crate) fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket.set_write_timeout(t)
    }

    /// Read timeout only (for replies).
    pub(crate) fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.socket.set_read_timeout(t)
    }

    /// Reads some plaintext; `Ok(0)` at the end of the stream.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &self.tls else {
            return self.socket.read(buf);
        };
        loop {
            {
                let mut conn = lock(tls);
                loop {
                    match conn.reader().read(buf) {
                        Ok(n) => return Ok(n),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                    // No plaintext: give rustls more of what was received,
                    // a record at a time so its plaintext buffer never
                    // overflows.
                    if self.cipher_start == self.cipher_end {
                        break;
                    }
                    let mut rest = &self.cipher[self.cipher_start..self.cipher_end];
                    let used = conn.read_tls(&mut rest)?;
                    self.cipher_start += used;
                    conn.process_new_packets()
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
            }
            let n = self.socket.read(&mut self.cipher)?;
            if n == 0 {
                // The peer closed without close_notify: the end.
                return Ok(0);
            }
            self.cipher_start = 0;
            self.cipher_end = n;
        }
    }

    /// Reads some plaintext into `bufs` in order (one `readv` on a plain
    /// socket; into the first non-empty buffer under TLS); `Ok(0)` at the
    /// end of the stream.
    pub(crate) fn read_vectored(&mut self, bufs: &mut [io::IoSliceMut<'_>]) -> io::Result<usize> {
        if self.tls.is_none() {
            return self.socket.read_vectored(bufs);
        }
        match bufs.iter_mut().find(|b| !b.is_empty()) {
            Some(first) => self.read(first),
            None => Ok(0),
        }
    }

    /// Writes all of `head` and then all of each buffer of `data` in
    /// order (`writev` on a plain socket, so a large payload, or one
    /// gathered from a caller's buffers, is not copied into a buffer
    /// first; under TLS each is encrypted in turn).
    pub(crate) fn write_all_gather(&mut self, head: &[u8], data: &[&[u8]]) -> io::Result<()> {
        self.write_gather(head, data).map_err(stalled)
    }

    fn write_gather(&mut self, head: &[u8], data: &[&[u8]]) -> io::Result<()> {
        if self.tls.is_some() {
            self.write_all(head)?;
            return data.iter().try_for_each(|d| self.write_all(d));
        }
        let mut bufs: Vec<io::IoSlice<'_>> = std::iter::once(head)
            .chain(data.iter().copied())
            .map(io::IoSlice::new)
            .collect();
        let mut left: &mut [io::IoSlice<'_>] = &mut bufs;
        while !left.is_empty() {
            match self.socket.write_vectored(left) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => io::IoSlice::advance_slices(&mut left, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all of `data`.
    pub(crate) fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.write_whole(data).map_err(stalled)
    }

    fn write_whole(&mut self, data: &[u8]) -> io::Result<()> {
        let Some(tls) = &self.tls else {
            return self.socket.write_all(data);
        };
        // Encrypt a piece at a time (rustls takes a bounded amount of
        // plaintext per call), so the lock is held briefly.
        let mut rest = data;
        while !rest.is_empty() {
            self.records.clear();
            {
                let mut conn = lock(tls);
                let n = conn.writer().write(rest)?;
                rest = &rest[n..];
                while conn.wants_write() {
                    conn.write_tls(&mut self.records)?;
                }
                if n == 0 && self.records.is_empty() {
                    return Err(io::ErrorKind::WriteZero.into());
                }
            }
            self.socket.write_all(&self.records)?;
        }
        Ok(())
    }
}

/// The rustls configuration `settings` describe: trust `ca-cert.pem`,
/// and present `client-cert.pem`/`client-key.pem` when both exist.
pub(crate) fn client_config(
    settings: &TlsSettings,
    target: &str,
) -> Result<Arc<ClientConfig>, ClientError> {
    let dir = &settings.certificates;
    let tls_err = |reason: String| ClientError::Tls {
        target: target.to_owned(),
        reason,
    };
    let read_certs = |path: &Path| -> Result<Vec<CertificateDer<'static>>, ClientError> {
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| tls_err(format!("cannot read {}: {e}", path.display())))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tls_err(format!("bad PEM in {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(tls_err(format!("no certificate in {}", path.display())));
        }
        Ok(certs)
    };
    let mut roots = RootCertStore::empty();
    for ca in read_certs(&dir.join(CA_CERT_FILE))? {
        roots
            .add(ca)
            .map_err(|e| tls_err(format!("bad CA certificate in {}: {e}", dir.display())))?;
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(e.to_string()))?
        .with_root_certificates(roots);
    let cert_path = dir.join(CLIENT_CERT_FILE);
    let config = if cert_path.exists() {
        let chain = read_certs(&cert_path)?;
        let key_path = dir.join(CLIENT_KEY_FILE);
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| tls_err(format!("cannot read {}: {e}", key_path.display())))?;
        builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls_err(format!("client certificate in {}: {e}", dir.display())))?
    } else {
        builder.with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// Time left until `deadline`, at least a millisecond (a zero timeout
/// means "block forever" to the socket calls).
pub(crate) fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Default limit on reaching a server and finishing the handshake.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to `target` and bounds each handshake read and write by what
/// is left of `connect_timeout` (shared by the NBD and object clients).
pub(crate) fn open_stream(
    target: &Target,
    connect_timeout: Duration,
) -> Result<Stream, ClientError> {
    let deadline = Instant::now() + connect_timeout;
    let socket = Socket::connect(target, connect_timeout)?;
    let stream = Stream::plain(socket);
    stream
        .set_timeouts(Some(left(deadline)))
        .map_err(|source| ClientError::Io {
            target: target.to_string(),
            source,
        })?;
    Ok(stream)
}
