//! TLS for NBD connections (STARTTLS): credentials, the TLS handshake on
//! a connection's socket, the encrypted stream that the connection thread
//! and the I/O workers share, client identities and per-export
//! allow-lists. See docs/SECURITY.md for what this does and does not
//! promise.
//!
//! # Sharing one TLS session between threads
//!
//! A connection's requests are read by its thread while replies are sent
//! by that thread and by I/O workers (`sink::ReplySink`). Both directions
//! live in one `rustls::ServerConnection`, so it sits behind a mutex
//! (`Shared::conn`) that is only ever held for in-memory work: feeding
//! received ciphertext and decrypting it, or encrypting a piece of reply.
//! Socket I/O happens outside it:
//!
//! - **Receiving** (connection thread only): one non-blocking `recv` into
//!   this stream's own ciphertext buffer, then, under `conn`, `read_tls` +
//!   `process_new_packets` until that buffer is used up, draining the
//!   plaintext into the receive buffer after each step (rustls stops
//!   taking ciphertext while it holds too much plaintext). Every call
//!   drains everything, so no plaintext waits inside rustls while the
//!   thread sleeps in `poll` — except right after the handshake, which
//!   [`TlsStream::has_buffered_input`] reports.
//! - **Sending** (any thread): under `Shared::send`, which orders whole
//!   sends like the plaintext socket's single writer did, up to
//!   `WRITE_CHUNK` bytes of plaintext are encrypted under `conn` into a
//!   scratch buffer, `conn` is released, and the records are written to
//!   the socket; repeat. Records therefore reach the socket in the order
//!   rustls numbered them, and the reader never waits for a socket write.
//!   Records that reading produced (alerts, TLS 1.3 key updates, session
//!   tickets) are sent the same way, after `conn` is released.
//!
//! Lock order: `ReplySink`'s lock, then `Shared::send`, then
//! `Shared::conn`; nothing takes them the other way round.
//!
//! # Reloading (SIGHUP)
//!
//! [`TlsAcceptor`] and [`AccessPolicy`] each keep what they serve behind
//! an `RwLock` that is read once per handshake (or per export chosen) and
//! written only by a reload, which swaps in credentials loaded and checked
//! beforehand. Sessions already running keep the keys they negotiated, so
//! rotating a certificate drops no connection; new handshakes see the new
//! one. Neither lock is held while any other is taken.

use std::collections::BTreeMap;
use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Instant;

use rustix::io::Errno;
use rustix::net::RecvFlags;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConnection};
use sluice_nbd_proto::{ExportAccess, TlsPolicy};

use crate::buffer::RecvBuf;
use crate::config::{TlsConfig, TlsIdentity, TlsMode};
use crate::socket::Socket;
use crate::stop::{wait_readable, Readiness, StopSignal};

/// The CA that signs client certificates (read with `verify_peer`).
pub const CA_CERT_FILE: &str = "ca-cert.pem";
/// The server's certificate chain, leaf first.
pub const SERVER_CERT_FILE: &str = "server-cert.pem";
/// The server's private key.
pub const SERVER_KEY_FILE: &str = "server-key.pem";

/// Ciphertext read from the socket at once.
const RAW_BUF: usize = 256 * 1024;
/// Plaintext encrypted per hold of the session lock.
const WRITE_CHUNK: usize = 256 * 1024;

/// Why TLS credentials could not be loaded (at startup).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsSetupError {
    #[error("cannot read {path}: {error} (the TLS certificate directory needs server-cert.pem and server-key.pem, and ca-cert.pem for --tls-verify-peer, as nbdkit and qemu lay it out)")]
    Read { path: PathBuf, error: io::Error },
    #[error("{path} holds no PEM {what}")]
    Missing { path: PathBuf, what: &'static str },
    #[error("{path} is not valid PEM: {reason}")]
    BadPem { path: PathBuf, reason: String },
    #[error("the CA certificate in {path} cannot be used: {reason}")]
    BadCa { path: PathBuf, reason: String },
    #[error("the private key in {path} cannot be used: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("the server certificate and key cannot be used: {0}")]
    ServerCert(rustls::Error),
}

/// The key types TLS here accepts, for refusal messages.
const KEYS_THAT_WORK: &str =
    "RSA keys of 2048 to 8192 bits, ECDSA keys on P-256, P-384 or P-521, and Ed25519 keys work";

/// Why the provider refused the key in `key_path`, in words: what kind
/// and size of key the server certificate (`leaf`) carries.
fn key_refusal(leaf: &CertificateDer<'_>) -> String {
    use x509_parser::public_key::PublicKey;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf) else {
        return format!("its type or size is not supported ({KEYS_THAT_WORK})");
    };
    let spki = cert.public_key();
    let what = match spki.parsed() {
        Ok(PublicKey::RSA(rsa)) => format!("an RSA key of {} bits", rsa.key_size()),
        Ok(PublicKey::EC(ec)) => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok());
            match curve.map(|c| c.to_id_string()).as_deref() {
                Some("1.3.132.0.10") => "an ECDSA key on curve secp256k1".to_owned(),
                Some(oid) => format!("an ECDSA key on curve {oid}"),
                None => format!("an ECDSA key of {} bits", ec.key_size()),
            }
        }
        Ok(PublicKey::DSA(_)) => "a DSA key (DSA is not used for TLS)".to_owned(),
        _ => match spki.algorithm.algorithm.to_id_string().as_str() {
            "1.3.101.113" => "an Ed448 key".to_owned(),
            oid => format!("a key of algorithm {oid}"),
        },
    };
    format!("the server certificate's key is {what}, which is not supported ({KEYS_THAT_WORK})")
}

/// Reads the server's private key; an encrypted one is refused with how
/// to decrypt it.
fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        let encrypted = matches!(e, pem::Error::NoItemsFound)
            && std::fs::read_to_string(path)
                .is_ok_and(|t| t.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----"));
        if encrypted {
            TlsSetupError::BadKey {
                path: path.to_owned(),
                reason: format!(
                    "it is encrypted with a passphrase, and the server reads keys without one \
                     (decrypt it with: openssl pkey -in {0} -out {0})",
                    path.display()
                ),
            }
        } else {
            pem_error(path, "private key", e)
        }
    })
}

fn pem_error(path: &Path, what: &'static str, e: pem::Error) -> TlsSetupError {
    match e {
        pem::Error::Io(error) => TlsSetupError::Read {
            path: path.to_owned(),
            error,
        },
        pem::Error::NoItemsFound => TlsSetupError::Missing {
            path: path.to_owned(),
            what,
        },
        other => TlsSetupError::BadPem {
            path: path.to_owned(),
            reason: other.to_string(),
        },
    }
}

fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, what, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, what, e))?;
    if certs.is_empty() {
        return Err(TlsSetupError::Missing {
            path: path.to_owned(),
            what,
        });
    }
    Ok(certs)
}

/// The server's TLS credentials and policy: loaded at startup, replaced
/// by [`TlsAcceptor::replace`] on reload.
#[derive(Debug)]
pub(crate) struct TlsAcceptor {
    config: RwLock<Arc<rustls::ServerConfig>>,
}

impl TlsAcceptor {
    /// The credentials new handshakes use.
    fn current(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.config.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Makes new handshakes use `other`'s credentials; running sessions
    /// keep theirs.
    pub(crate) fn replace(&self, other: Self) {
        let new = other.config.into_inner().unwrap_or_else(|p| p.into_inner());
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = new;
    }

    /// Loads the certificate directory; `None` when TLS is off.
    pub(crate) fn load(cfg: &TlsConfig) -> Result<Option<Self>, TlsSetupError> {
        let Some(dir) = cfg.certificates.as_deref() else {
            return Ok(None);
        };
        if cfg.mode == TlsMode::Off {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let cert_path = dir.join(SERVER_CERT_FILE);
        let chain = load_certs(&cert_path, "certificate")?;
        let key_path = dir.join(SERVER_KEY_FILE);
        let key = load_key(&key_path)?;
        // Loaded once here only to say why, in words, when it is refused.
        if provider
            .key_provider
            .load_private_key(key.clone_key())
            .is_err()
        {
            return Err(TlsSetupError::BadKey {
                path: key_path,
                reason: key_refusal(&chain[0]),
            });
        }
        // TLS 1.3 and 1.2 only (the NBD spec: 1.2 MUST, later SHOULD).
        let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(TlsSetupError::ServerCert)?;
        let builder = if cfg.verify_peer {
            let ca_path = dir.join(CA_CERT_FILE);
            let mut roots = RootCertStore::empty();
            for ca in load_certs(&ca_path, "CA certificate")? {
                roots.add(ca).map_err(|e| TlsSetupError::BadCa {
                    path: ca_path.clone(),
                    reason: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsSetupError::BadCa {
                    path: ca_path.clone(),
                    reason: e.to_string(),
                })?;
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder.with_single_cert(chain, key).map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsSetupError::BadKey {
                path: key_path,
                reason: format!(
                    "it does not belong to the certificate in {}",
                    cert_path.display()
                ),
            },
            other => TlsSetupError::ServerCert(other),
        })?;
        // 0-RTT stays off (rustls's default): early data can be replayed,
        // and an NBD write must never be.
        Ok(Some(Self {
            config: RwLock::new(Arc::new(config)),
        }))
    }
}

/// The rustls configuration of the certificate directory `cfg` names
/// (`None` when TLS is off), loaded as the server's own listeners load
/// it: for a listener the server does not run itself (the S3 endpoint).
pub fn server_tls_config(
    cfg: &TlsConfig,
) -> Result<Option<Arc<rustls::ServerConfig>>, TlsSetupError> {
    Ok(TlsAcceptor::load(cfg)?.map(|a| a.current()))
}

/// The handshake machine's TLS mode for a server TLS mode.
pub(crate) fn handshake_policy(mode: TlsMode, acceptor: Option<&TlsAcceptor>) -> TlsPolicy {
    match (mode, acceptor) {
        (_, None) | (TlsMode::Off, _) => TlsPolicy::Off,
        (TlsMode::On, Some(_)) => TlsPolicy::Optional,
        (TlsMode::Require, Some(_)) => TlsPolicy::Required,
    }
}

// ---------------------------------------------------------------------------
// Identities and allow-lists

/// What a verified client certificate says about its holder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PeerIdentity {
    /// The subject as text, for logs.
    pub(crate) subject: String,
    common_names: Vec<String>,
    dns: Vec<String>,
    ips: Vec<IpAddr>,
    emails: Vec<String>,
    uris: Vec<String>,
}

impl PeerIdentity {
    /// Reads the subject CNs and SANs of a DER certificate that the TLS
    /// layer has already verified. An unparsable one matches nothing.
    pub(crate) fn from_der(der: &[u8]) -> Self {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
            return Self::default();
        };
        let mut id = Self {
            subject: cert.subject().to_string(),
            common_names: cert
                .subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
                .collect(),
            ..Self::default()
        };
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            use x509_parser::extensions::GeneralName;
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => id.dns.push((*d).to_owned()),
                    GeneralName::RFC822Name(e) => id.emails.push((*e).to_owned()),
                    GeneralName::URI(u) => id.uris.push((*u).to_owned()),
                    GeneralName::IPAddress(bytes) => {
                        if let Ok(a) = <[u8; 4]>::try_from(*bytes) {
                            id.ips.push(IpAddr::V4(Ipv4Addr::from(a)));
                        } else if let Ok(a) = <[u8; 16]>::try_from(*bytes) {
                            id.ips.push(IpAddr::V6(Ipv6Addr::from(a)));
                        }
                    }
                    _ => {}
                }
            }
        }
        id
    }

    /// Whether this identity is the one an allow-list entry names.
    pub(crate) fn matches(&self, want: &TlsIdentity) -> bool {
        match want {
            TlsIdentity::CommonName(n) => self.common_names.iter().any(|c| c == n),
            TlsIdentity::Dns(n) => self.dns.iter().any(|d| d.eq_ignore_ascii_case(n)),
            TlsIdentity::Ip(a) => self.ips.contains(a),
            TlsIdentity::Email(e) => self.emails.iter().any(|x| x == e),
            TlsIdentity::Uri(u) => self.uris.iter().any(|x| x == u),
        }
    }
}

/// Which client identities may use which exports (replaced on reload).
#[derive(Debug, Default)]
pub(crate) struct AccessPolicy {
    allow: RwLock<BTreeMap<String, Vec<TlsIdentity>>>,
}

impl AccessPolicy {
    pub(crate) fn new(allow: BTreeMap<String, Vec<TlsIdentity>>) -> Self {
        Self {
            allow: RwLock::new(allow),
        }
    }

    /// Applies to every export chosen from now on.
    pub(crate) fn replace(&self, allow: BTreeMap<String, Vec<TlsIdentity>>) {
        *self.allow.write().unwrap_or_else(|p| p.into_inner()) = allow;
    }

    /// An export with an allow-list is TLS-only and open to the listed
    /// identities only; others are open to everyone the mode admits.
    pub(crate) fn access(
        &self,
        export: &str,
        tls: bool,
        peer: Option<&PeerIdentity>,
    ) -> ExportAccess {
        let allow = self.allow.read().unwrap_or_else(|p| p.into_inner());
        let Some(allowed) = allow.get(export) else {
            return ExportAccess::Allowed;
        };
        if !tls {
            return ExportAccess::TlsRequired;
        }
        match peer {
            Some(p) if allowed.iter().any(|want| p.matches(want)) => ExportAccess::Allowed,
            _ => ExportAccess::Denied,
        }
    }
}

// ---------------------------------------------------------------------------
// The encrypted stream

#[derive(Debug)]
struct Shared {
    conn: Mutex<ServerConnection>,
    /// Held for a whole send; guards the ciphertext scratch buffer.
    send: Mutex<Vec<u8>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A socket after STARTTLS. Clones share the TLS session; only the
/// original (the connection thread's) receives.
#[derive(Debug)]
pub(crate) struct TlsStream {
    /// The socket underneath.
    sock: Socket,
    shared: Arc<Shared>,
    /// Ciphertext received and not yet given to rustls: `raw[start..end]`.
    raw: Vec<u8>,
    raw_start: usize,
    raw_end: usize,
    /// The socket reached end of stream.
    eof: bool,
    /// rustls has been told about the end of stream.
    eof_fed: bool,
    /// rustls may hold decrypted bytes that no receive has drained yet.
    check_plaintext: bool,
}

/// Why the TLS handshake after STARTTLS failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsHandshakeError {
    #[error("TLS handshake failed")]
    Tls(#[from] rustls::Error),
    #[error("socket error during the TLS handshake")]
    Io(#[from] io::Error),
    #[error("client closed the connection during the TLS handshake")]
    Closed,
    #[error("client did not finish the TLS handshake in time")]
    TimedOut,
    #[error("server stopping during the TLS handshake")]
    Stopped,
}

impl TlsStream {
    /// Runs the server side of the TLS handshake on `sock`, right after
    /// the STARTTLS ACK was sent. `early` is what the client sent after
    /// STARTTLS that was already received: the start of the handshake.
    pub(crate) fn accept(
        sock: Socket,
        acceptor: &TlsAcceptor,
        early: &[u8],
        stop: &StopSignal,
        deadline: Instant,
    ) -> Result<(Self, Option<PeerIdentity>), TlsHandshakeError> {
        let mut conn = ServerConnection::new(acceptor.current())?;
        // Sends are chunked by `send`, so rustls need not cap its buffer.
        conn.set_buffer_limit(None);
        let mut t = Self {
            sock,
            shared: Arc::new(Shared {
                conn: Mutex::new(conn),
                send: Mutex::new(Vec::new()),
            }),
            raw: early.to_vec(),
            raw_start: 0,
            raw_end: early.len(),
            eof: false,
            eof_fed: false,
            check_plaintext: true,
        };
        loop {
            let (handshaking, failed) = {
                let mut conn = lock(&t.shared.conn);
                let mut failed = None;
                while conn.is_handshaking() && t.raw_start < t.raw_end {
                    let mut input = &t.raw[t.raw_start..t.raw_end];
                    match conn.read_tls(&mut input) {
                        Ok(0) => t.raw_start = t.raw_end,
                        Ok(n) => t.raw_start += n,
                        Err(e) => {
                            failed = Some(TlsHandshakeError::Io(e));
                            break;
                        }
                    }
                    if let Err(e) = conn.process_new_packets() {
                        failed = Some(TlsHandshakeError::Tls(e));
                        break;
                    }
                }
                (conn.is_handshaking(), failed)
            };
            // Handshake messages, or the alert that explains a failure.
            let flushed = t.flush_pending();
            if let Some(e) = failed {
                return Err(e);
            }
            flushed?;
            if !handshaking {
                break;
            }
            if t.eof {
                return Err(TlsHandshakeError::Closed);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match wait_readable(t.sock.fd(), Some(stop), Some(left))? {
                Readiness::Readable => {
                    t.recv_raw()?;
                }
                Readiness::Stop => return Err(TlsHandshakeError::Stopped),
                Readiness::TimedOut => return Err(TlsHandshakeError::TimedOut),
            }
        }
        let peer = lock(&t.shared.conn)
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| PeerIdentity::from_der(leaf));
        Ok((t, peer))
    }

    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            sock: self.sock.try_clone()?,
            shared: Arc::clone(&self.shared),
            raw: Vec::new(),
            raw_start: 0,
            raw_end: 0,
            eof: false,
            eof_fed: false,
            check_plaintext: false,
        })
    }

    /// The socket underneath.
    pub(crate) fn socket(&self) -> &Socket {
        &self.sock
    }

    /// Whether a receive could return data without the socket being
    /// readable: ciphertext or plaintext is buffered, or the end of stream
    /// is not reported yet. Check before sleeping in `poll`.
    pub(crate) fn has_buffered_input(&self) -> bool {
        self.check_plaintext || self.raw_start < self.raw_end || (self.eof && !self.eof_fed)
    }

    /// One non-blocking receive into `raw` (which must be used up).
    fn recv_raw(&mut self) -> io::Result<bool> {
        if self.raw.len() < RAW_BUF {
            self.raw.resize(RAW_BUF, 0);
        }
        self.raw_start = 0;
        self.raw_end = 0;
        match rustix::net::recv(self.sock.fd(), &mut self.raw[..], RecvFlags::DONTWAIT) {
            Ok((0, _)) => {
                self.eof = true;
                Ok(true)
            }
            Ok((n, _)) => {
                self.raw_end = n;
                Ok(true)
            }
            Err(Errno::AGAIN | Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Like `RecvBuf::try_fill_from` on a plaintext socket: receives what
    /// is waiting without blocking and appends the decrypted bytes to
    /// `buf`. `Ok(None)`: nothing complete yet; `Ok(Some(0))`: the client
    /// closed the connection.
    pub(crate) fn try_fill(&mut self, buf: &mut RecvBuf) -> io::Result<Option<usize>> {
        let pending = self.has_buffered_input();
        if !pending && !self.eof && !self.recv_raw()? {
            return Ok(None);
        }
        self.check_plaintext = false;
        let mut got = 0;
        let mut closed = false;
        let (result, wants_write) = {
            let mut conn = lock(&self.shared.conn);
            let result = loop {
                match drain_plaintext(&mut conn, buf) {
                    Ok((n, c)) => {
                        got += n;
                        closed |= c;
                    }
                    Err(e) => break Err(e),
                }
                if self.raw_start < self.raw_end {
                    let mut input = &self.raw[self.raw_start..self.raw_end];
                    match conn.read_tls(&mut input) {
                        // Nothing more is taken (after close_notify).
                        Ok(0) => self.raw_start = self.raw_end,
                        Ok(n) => self.raw_start += n,
                        Err(e) => break Err(e),
                    }
                } else if self.eof && !self.eof_fed {
                    self.eof_fed = true;
                    // A zero-length read tells rustls the stream ended.
                    if let Err(e) = conn.read_tls(&mut &[][..]) {
                        break Err(e);
                    }
                } else {
                    break Ok(());
                }
                if let Err(e) = conn.process_new_packets() {
                    break Err(tls_error(e));
                }
            };
            (result, conn.wants_write())
        };
        if self.raw_start == self.raw_end {
            self.raw_start = 0;
            self.raw_end = 0;
        }
        if wants_write {
            // An alert after an error is best effort; a failed send
            // otherwise surfaces here or at the next reply.
            let flushed = self.flush_pending();
            if result.is_ok() {
                flushed?;
            }
        }
        result?;
        Ok(if got > 0 {
            Some(got)
        } else if closed || self.eof_fed {
            Some(0)
        } else {
            None
        })
    }

    /// Encrypts and sends every slice, in order, as one send; fails with
    /// `TimedOut` if `deadline` passes first (see `Socket::write_all_until`).
    pub(crate) fn write_all_vectored(
        &mut self,
        bufs: &[IoSlice<'_>],
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        let mut cipher = lock(&self.shared.send);
        let mut slices = bufs.iter().map(|s| &s[..]).filter(|s| !s.is_empty());
        let mut current: &[u8] = slices.next().unwrap_or_default();
        loop {
            {
                let mut conn = lock(&self.shared.conn);
                let mut budget = WRITE_CHUNK;
                while budget > 0 && !current.is_empty() {
                    let take = current.len().min(budget);
                    conn.writer().write_all(&current[..take])?;
                    current = &current[take..];
                    budget -= take;
                    if current.is_empty() {
                        current = slices.next().unwrap_or_default();
                    }
                }
                while conn.wants_write() {
                    conn.write_tls(&mut *cipher)?;
                }
            }
            if !cipher.is_empty() {
                let sent = self
                    .sock
                    .write_all_until(&mut [IoSlice::new(&cipher)], deadline);
                cipher.clear();
                sent?;
            }
            if current.is_empty() {
                return Ok(());
            }
        }
    }

    /// Sends whatever rustls has queued (handshake messages, alerts,
    /// tickets, key updates).
    fn flush_pending(&mut self) -> io::Result<()> {
        self.write_all_vectored(&[], None)
    }

    /// Sends close_notify (best effort): a clean end the client can tell
    /// from a truncation attack.
    pub(crate) fn close(&mut self) {
        lock(&self.shared.conn).send_close_notify();
        let _ = self.flush_pending();
    }
}

/// Moves every decrypted byte rustls holds into `buf`. Returns the count
/// and whether the client has closed the TLS stream.
fn drain_plaintext(conn: &mut ServerConnection, buf: &mut RecvBuf) -> io::Result<(usize, bool)> {
    let mut got = 0;
    loop {
        match buf.fill_with(|tail| conn.reader().read(tail)) {
            Ok(0) => return Ok((got, true)),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((got, false)),
            // The socket closed without close_notify: for NBD that is the
            // end of the session, as on a plaintext socket.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((got, true)),
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(cn: &[&str], dns: &[&str], ips: &[&str]) -> PeerIdentity {
        PeerIdentity {
            subject: String::new(),
            common_names: cn.iter().map(|s| (*s).to_owned()).collect(),
            dns: dns.iter().map(|s| (*s).to_owned()).collect(),
            ips: ips.iter().map(|s| s.parse().unwrap()).collect(),
            emails: vec![],
            uris: vec![],
        }
    }

    #[test]
    fn identities_match_cn_and_sans() {
        let p = id(&["client1"], &["Backup.Example"], &["10.0.0.1"]);
        assert!(p.matches(&"CN=client1".parse().unwrap()));
        assert!(!p.matches(&"CN=Client1".parse().unwrap()), "CN is exact");
        assert!(!p.matches(&"CN=client".parse().unwrap()), "no prefixes");
        assert!(p.matches(&"DNS=backup.example".parse().unwrap()));
        assert!(p.matches(&"IP=10.0.0.1".parse().unwrap()));
        assert!(!p.matches(&"IP=10.0.0.2".parse().unwrap()));
        assert!(
            !p.matches(&"DNS=client1".parse().unwrap()),
            "kinds do not mix"
        );
    }

    #[test]
    fn access_policy() {
        let mut allow = BTreeMap::new();
        allow.insert("secret".to_owned(), vec!["CN=client1".parse().unwrap()]);
        let policy = AccessPolicy::new(allow);
        let good = id(&["client1"], &[], &[]);
        let bad = id(&["client2"], &[], &[]);
        assert_eq!(policy.access("open", false, None), ExportAccess::Allowed);
        assert_eq!(
            policy.access("secret", false, None),
            ExportAccess::TlsRequired
        );
        assert_eq!(policy.access("secret", true, None), ExportAccess::Denied);
        assert_eq!(
            policy.access("secret", true, Some(&bad)),
            ExportAccess::Denied
        );
        assert_eq!(
            policy.access("secret", true, Some(&good)),
            ExportAccess::Allowed
        );
    }
}
