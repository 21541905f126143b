#![allow(clippy::unwrap_used)]
//! TLS (NBD STARTTLS) end to end, in process: a real `Server` with
//! certificates made by rcgen at test time, driven by a raw NBD client
//! over rustls. Covers the negative matrix (every refusal happens before
//! any export name, size or data is sent — the bytes are checked), the
//! allow-lists, plaintext service with `--tls on`, and a TLS connection
//! carrying many concurrent requests whose replies come back out of
//! order from the I/O pool.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use rcgen::{
    date_time_ymd, BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{HeaderStyle, RequestHeader};
use sluice_server::{
    Export, ListenAddr, Server, ServerConfig, ServerError, ServerHandle, TlsConfig, TlsMode,
};
use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, MemDevice};

// ---------------------------------------------------------------------------
// Certificates

/// A client's credentials.
struct Creds {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for Creds {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// A CA, a server certificate for 127.0.0.1/localhost in a directory laid
/// out as nbdkit and qemu expect, and client certificates: two valid
/// (`client1`, `client2`), one expired (`client1` too), one for `client1`
/// signed by another CA, and that other CA.
struct Pki {
    dir: tempfile::TempDir,
    ca: CertificateDer<'static>,
    other_ca: CertificateDer<'static>,
    client1: Creds,
    client2: Creds,
    expired: Creds,
    rogue: Creds,
}

fn ca(name: &str) -> (CertificateDer<'static>, String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.der().clone(), cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    cn: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
    expired: bool,
) -> (Creds, String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    if expired {
        params.not_before = date_time_ymd(2019, 1, 1);
        params.not_after = date_time_ymd(2020, 1, 1);
    }
    let cert = params.signed_by(&key, issuer).unwrap();
    let creds = Creds {
        chain: vec![cert.der().clone()],
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    };
    (creds, cert.pem(), key.serialize_pem())
}

fn pki() -> &'static Pki {
    static PKI: OnceLock<Pki> = OnceLock::new();
    PKI.get_or_init(|| {
        let (ca_der, ca_pem, issuer) = ca("sluice test CA");
        let (other_ca, _, other_issuer) = ca("some other CA");
        let client = ExtendedKeyUsagePurpose::ClientAuth;
        let (_, server_pem, server_key) = leaf(
            &issuer,
            "sluice test server",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
            false,
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca-cert.pem"), ca_pem).unwrap();
        std::fs::write(dir.path().join("server-cert.pem"), server_pem).unwrap();
        std::fs::write(dir.path().join("server-key.pem"), server_key).unwrap();
        Pki {
            dir,
            ca: ca_der,
            other_ca,
            client1: leaf(&issuer, "client1", &[], client.clone(), false).0,
            client2: leaf(&issuer, "client2", &[], client.clone(), false).0,
            expired: leaf(&issuer, "client1", &[], client.clone(), true).0,
            rogue: leaf(&other_issuer, "client1", &[], client, false).0,
        }
    })
}

// ---------------------------------------------------------------------------
// The server

struct TestServer {
    addr: SocketAddr,
    handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.handle.shutdown();
            let _ = t.join();
        }
    }
}

/// Exports `open` and `secret` (1 MiB each; byte i of `secret` is
/// `i % 251`), plus any extra ones.
fn start(
    mode: TlsMode,
    verify_peer: bool,
    allow_secret: &[&str],
    extra: Vec<(&str, Arc<dyn BlockDevice>)>,
) -> TestServer {
    let secret = MemDevice::new(1 << 20, false);
    let pattern: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    secret.write_at(&pattern, 0, false).unwrap();
    let mut exports = vec![
        Arc::new(Export::new(
            "open".into(),
            "open to all".into(),
            Arc::new(MemDevice::new(1 << 20, false)),
        )),
        Arc::new(Export::new(
            "secret".into(),
            "allow-listed".into(),
            Arc::new(secret),
        )),
    ];
    for (name, dev) in extra {
        exports.push(Arc::new(Export::new(name.into(), String::new(), dev)));
    }
    let mut tls = TlsConfig {
        mode,
        certificates: (mode != TlsMode::Off).then(|| pki().dir.path().to_owned()),
        verify_peer,
        ..TlsConfig::default()
    };
    if !allow_secret.is_empty() {
        tls.allow.insert(
            "secret".into(),
            allow_secret.iter().map(|s| s.parse().unwrap()).collect(),
        );
    }
    let config = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        io_threads: 8,
        tls,
        ..ServerConfig::default()
    };
    let server = Server::bind_exports(config, exports).expect("bind");
    let ListenAddr::Tcp(addr) = server.local_addrs()[0].clone() else {
        panic!("tcp")
    };
    let handle = server.handle();
    let thread = Some(std::thread::spawn(move || server.run()));
    TestServer {
        addr,
        handle,
        thread,
    }
}

// ---------------------------------------------------------------------------
// A raw NBD client, in plaintext or over rustls

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes(b[..2].try_into().unwrap())
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

fn opt_bytes(option: u32, data: &[u8]) -> Vec<u8> {
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&option.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    m
}

fn reply_bytes(option: u32, kind: u32, data: &[u8]) -> Vec<u8> {
    let mut m = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
    m.extend_from_slice(&option.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    m
}

fn go_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

const TLS_REQD_MSG: &[u8] = b"this server requires TLS: send NBD_OPT_STARTTLS first";
const POLICY_MSG: &[u8] = b"this client is not allowed to use this export";

struct Nbd<S> {
    s: S,
}

impl<S: Read + Write> Nbd<S> {
    fn option(&mut self, option: u32, data: &[u8]) {
        self.s.write_all(&opt_bytes(option, data)).unwrap();
        self.s.flush().unwrap();
    }

    /// (option, reply type, data) and the raw bytes.
    fn option_reply(&mut self) -> (u32, u32, Vec<u8>, Vec<u8>) {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h).unwrap();
        assert_eq!(be64(&h), OPTION_REPLY_MAGIC);
        let mut data = vec![0u8; be32(&h[16..]) as usize];
        self.s.read_exact(&mut data).unwrap();
        let mut raw = h.to_vec();
        raw.extend_from_slice(&data);
        (be32(&h[8..]), be32(&h[12..]), data, raw)
    }

    /// All replies to one option up to its ACK or error.
    fn option_replies(&mut self, option: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
        self.option(option, data);
        let mut v = Vec::new();
        loop {
            let (o, kind, data, _) = self.option_reply();
            assert_eq!(o, option);
            let last = kind == REP_ACK || kind & (1 << 31) != 0;
            v.push((kind, data));
            if last {
                return v;
            }
        }
    }

    /// Export names an NBD_OPT_LIST returns.
    fn list(&mut self) -> Vec<String> {
        let mut names = Vec::new();
        for (kind, data) in self.option_replies(OPT_LIST, &[]) {
            if kind == REP_SERVER {
                let n = be32(&data) as usize;
                names.push(String::from_utf8(data[4..4 + n].to_vec()).unwrap());
            } else {
                assert_eq!(kind, REP_ACK);
            }
        }
        names
    }

    /// Structured replies, then GO; returns the export size.
    fn go(&mut self, name: &str) -> u64 {
        assert_eq!(
            self.option_replies(OPT_STRUCTURED_REPLY, &[]),
            vec![(REP_ACK, vec![])]
        );
        let mut size = None;
        for (kind, data) in self.option_replies(OPT_GO, &go_data(name)) {
            match kind {
                REP_INFO if be16(&data) == INFO_EXPORT => size = Some(be64(&data[2..])),
                REP_INFO | REP_ACK => {}
                other => panic!(
                    "GO {name:?} failed: {other:#x} {:?}",
                    String::from_utf8_lossy(&data)
                ),
            }
        }
        size.expect("NBD_INFO_EXPORT")
    }

    fn request(&mut self, kind: u16, cookie: u64, offset: u64, length: u32, payload: &[u8]) {
        let mut m = Vec::with_capacity(28 + payload.len());
        RequestHeader {
            flags: 0,
            kind,
            cookie,
            offset,
            length: u64::from(length),
        }
        .encode(HeaderStyle::Compact, &mut m);
        m.extend_from_slice(payload);
        self.s.write_all(&m).unwrap();
    }

    /// One reply chunk (or simple reply): (cookie, done, error, data at
    /// its offset).
    fn chunk(&mut self) -> (u64, bool, u32, Option<(u64, Vec<u8>)>) {
        let mut magic = [0u8; 4];
        self.s.read_exact(&mut magic).unwrap();
        match be32(&magic) {
            SIMPLE_REPLY_MAGIC => {
                let mut rest = [0u8; 12];
                self.s.read_exact(&mut rest).unwrap();
                (be64(&rest[4..]), true, be32(&rest), None)
            }
            STRUCTURED_REPLY_MAGIC => {
                let mut rest = [0u8; 16];
                self.s.read_exact(&mut rest).unwrap();
                let flags = be16(&rest);
                let kind = be16(&rest[2..]);
                let cookie = be64(&rest[4..]);
                let mut payload = vec![0u8; be32(&rest[12..]) as usize];
                self.s.read_exact(&mut payload).unwrap();
                let done = flags & REPLY_FLAG_DONE != 0;
                match kind {
                    REPLY_TYPE_OFFSET_DATA => (
                        cookie,
                        done,
                        0,
                        Some((be64(&payload), payload[8..].to_vec())),
                    ),
                    REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
                        (cookie, done, be32(&payload), None)
                    }
                    _ => (cookie, done, 0, None),
                }
            }
            other => panic!("bad reply magic {other:#x}"),
        }
    }

    fn read(&mut self, offset: u64, len: u32) -> Vec<u8> {
        self.request(CMD_READ, 1, offset, len, &[]);
        let mut data = vec![0u8; len as usize];
        loop {
            let (cookie, done, err, piece) = self.chunk();
            assert_eq!((cookie, err), (1, 0));
            if let Some((off, bytes)) = piece {
                let at = (off - offset) as usize;
                data[at..at + bytes.len()].copy_from_slice(&bytes);
            }
            if done {
                return data;
            }
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        self.request(CMD_WRITE, 2, offset, data.len() as u32, data);
        let (cookie, done, err, _) = self.chunk();
        assert_eq!((cookie, done, err), (2, true, 0));
    }
}

/// A plaintext connection past the greeting (fixed newstyle, no zeroes).
fn plain(addr: SocketAddr) -> Nbd<TcpStream> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    assert_eq!(be64(&greeting), NBD_MAGIC);
    assert_eq!(be64(&greeting[8..]), IHAVEOPT);
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    Nbd { s }
}

fn client_config(
    roots: &[&CertificateDer<'static>],
    creds: Option<&Creds>,
    tls12_only: bool,
) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut store = RootCertStore::empty();
    for r in roots {
        store.add((*r).clone()).unwrap();
    }
    let versions: &[&rustls::SupportedProtocolVersion] = if tls12_only {
        &[&rustls::version::TLS12]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(store);
    Arc::new(match creds {
        Some(c) => builder
            .with_client_auth_cert(c.chain.clone(), c.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    })
}

type TlsNbd = Nbd<StreamOwned<ClientConnection, TcpStream>>;

/// STARTTLS on a plaintext connection; returns the TLS connection and the
/// result of its handshake (from the client's point of view).
fn starttls(mut c: Nbd<TcpStream>, config: Arc<ClientConfig>) -> (TlsNbd, std::io::Result<()>) {
    c.option(OPT_STARTTLS, &[]);
    let (option, kind, data, _) = c.option_reply();
    assert_eq!((option, kind, data), (OPT_STARTTLS, REP_ACK, vec![]));
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = ClientConnection::new(config, name).unwrap();
    let mut tls = StreamOwned::new(conn, c.s);
    let result = tls.conn.complete_io(&mut tls.sock).map(|_| ());
    (Nbd { s: tls }, result)
}

/// Connects with TLS as a client holding `creds` (trusting our CA).
fn tls_client(addr: SocketAddr, creds: Option<&Creds>) -> TlsNbd {
    let config = client_config(&[&pki().ca], creds, false);
    let (c, handshake) = starttls(plain(addr), config);
    handshake.expect("TLS handshake");
    c
}

/// The server refused the TLS session: the handshake failed, or (TLS 1.3,
/// where the client finishes before the server has checked its
/// certificate) the first option gets an alert or end of stream — never a
/// single byte of NBD data.
fn assert_refused(mut c: TlsNbd, handshake: std::io::Result<()>) {
    if handshake.is_err() {
        return;
    }
    let _ = c.s.write_all(&opt_bytes(OPT_LIST, &[]));
    let mut buf = [0u8; 1];
    match c.s.read(&mut buf) {
        Ok(0) => {}
        Err(e) => assert_ne!(e.kind(), ErrorKind::WouldBlock, "timed out: {e}"),
        Ok(_) => panic!("the server answered an option after refusing the client"),
    }
}

// ---------------------------------------------------------------------------
// The negative matrix

#[test]
fn plaintext_client_against_require_gets_tls_reqd_and_no_export_data() {
    let server = start(TlsMode::Require, false, &[], vec![]);
    let mut c = plain(server.addr);
    // Every option but STARTTLS/ABORT: exactly one TLS_REQD reply, whose
    // bytes are fixed, so no export name, size or flags can be in them.
    let mut transcript = Vec::new();
    let mut expected = Vec::new();
    for (option, data) in [
        (OPT_LIST, Vec::new()),
        (OPT_INFO, go_data("secret")),
        (OPT_GO, go_data("")),
        (OPT_GO, go_data("open")),
        (OPT_STRUCTURED_REPLY, Vec::new()),
        (OPT_LIST_META_CONTEXT, go_data("open")),
    ] {
        c.option(option, &data);
        transcript.extend_from_slice(&c.option_reply().3);
        expected.extend_from_slice(&reply_bytes(option, REP_ERR_TLS_REQD, TLS_REQD_MSG));
    }
    assert_eq!(transcript, expected);
    // EXPORT_NAME cannot be refused: the server hangs up without a byte.
    c.option(OPT_EXPORT_NAME, b"open");
    let mut rest = Vec::new();
    let n = c.s.read_to_end(&mut rest).unwrap_or(0);
    assert_eq!((n, rest), (0, vec![]), "nothing after EXPORT_NAME");
}

#[test]
fn require_serves_tls_clients_over_tls13_and_tls12() {
    let server = start(TlsMode::Require, false, &[], vec![]);
    for tls12_only in [false, true] {
        let config = client_config(&[&pki().ca], None, tls12_only);
        let (mut c, handshake) = starttls(plain(server.addr), config);
        handshake.unwrap();
        let version = c.s.conn.protocol_version().unwrap();
        assert_eq!(
            version == rustls::ProtocolVersion::TLSv1_2,
            tls12_only,
            "{version:?}"
        );
        assert_eq!(c.list(), vec!["open", "secret"]);
        assert_eq!(c.go("secret"), 1 << 20);
        let want: Vec<u8> = (4096..8192).map(|i| (i % 251) as u8).collect();
        assert_eq!(c.read(4096, 4096), want);
        c.write(8192, &[7; 1000]);
        assert_eq!(c.read(8192, 1000), vec![7; 1000]);
        c.request(CMD_DISC, 3, 0, 0, &[]);
    }
}

#[test]
fn tls_on_still_serves_plaintext_clients() {
    let server = start(TlsMode::On, false, &[], vec![]);
    let mut c = plain(server.addr);
    assert_eq!(c.list(), vec!["open", "secret"]);
    assert_eq!(c.go("open"), 1 << 20);
    c.write(0, b"plaintext still works");
    assert_eq!(c.read(0, 21), b"plaintext still works");
    // And TLS clients on the same server.
    let mut t = tls_client(server.addr, None);
    assert_eq!(t.go("open"), 1 << 20);
    assert_eq!(t.read(0, 21), b"plaintext still works");
}

#[test]
fn untrusted_server_certificate_is_refused_by_the_client() {
    let server = start(TlsMode::Require, false, &[], vec![]);
    let config = client_config(&[&pki().other_ca], None, false);
    let (_c, handshake) = starttls(plain(server.addr), config);
    let e = handshake.expect_err("a client that does not trust our CA must refuse");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
}

#[test]
fn missing_client_certificate_is_refused_with_verify_peer() {
    let server = start(TlsMode::Require, true, &[], vec![]);
    let config = client_config(&[&pki().ca], None, false);
    let (c, handshake) = starttls(plain(server.addr), config);
    assert_refused(c, handshake);
    // TLS 1.2 as well, where the failure is in the handshake itself.
    let config = client_config(&[&pki().ca], None, true);
    let (c, handshake) = starttls(plain(server.addr), config);
    assert_refused(c, handshake);
}

#[test]
fn expired_client_certificate_is_refused() {
    let server = start(TlsMode::Require, true, &["CN=client1"], vec![]);
    for tls12_only in [false, true] {
        let config = client_config(&[&pki().ca], Some(&pki().expired), tls12_only);
        let (c, handshake) = starttls(plain(server.addr), config);
        assert_refused(c, handshake);
    }
}

#[test]
fn client_certificate_from_another_ca_is_refused() {
    let server = start(TlsMode::Require, true, &["CN=client1"], vec![]);
    let config = client_config(&[&pki().ca], Some(&pki().rogue), false);
    let (c, handshake) = starttls(plain(server.addr), config);
    assert_refused(c, handshake);
}

#[test]
fn client_not_on_the_allow_list_cannot_see_or_use_the_export() {
    let server = start(TlsMode::Require, true, &["CN=client1"], vec![]);
    let mut c = tls_client(server.addr, Some(&pki().client2));
    assert_eq!(c.list(), vec!["open"], "secret is hidden from client2");
    for option in [OPT_INFO, OPT_GO] {
        c.option(option, &go_data("secret"));
        let (_, _, _, raw) = c.option_reply();
        assert_eq!(raw, reply_bytes(option, REP_ERR_POLICY, POLICY_MSG));
    }
    // The open export is still usable by client2.
    let mut c = tls_client(server.addr, Some(&pki().client2));
    assert_eq!(c.go("open"), 1 << 20);
    // EXPORT_NAME for the secret export: hang-up, no size or flags.
    let mut c = tls_client(server.addr, Some(&pki().client2));
    c.option(OPT_EXPORT_NAME, b"secret");
    let mut buf = [0u8; 1];
    match c.s.read(&mut buf) {
        Ok(0) => {}
        Err(e) => assert_ne!(e.kind(), ErrorKind::WouldBlock, "timed out: {e}"),
        Ok(_) => panic!("the server answered EXPORT_NAME for a denied export"),
    }
    // client1 is on the list.
    let mut c = tls_client(server.addr, Some(&pki().client1));
    assert_eq!(c.list(), vec!["open", "secret"]);
    assert_eq!(c.go("secret"), 1 << 20);
    assert_eq!(c.read(251, 3), vec![0, 1, 2]);
}

#[test]
fn allow_listed_export_is_tls_only_with_tls_on() {
    let server = start(TlsMode::On, true, &["CN=client1"], vec![]);
    let mut c = plain(server.addr);
    assert_eq!(c.list(), vec!["open"]);
    for option in [OPT_INFO, OPT_GO] {
        c.option(option, &go_data("secret"));
        let (_, _, _, raw) = c.option_reply();
        assert_eq!(
            raw,
            reply_bytes(option, REP_ERR_TLS_REQD, b"this export requires TLS")
        );
    }
    // A plaintext client cannot present a certificate, but can upgrade.
    let (mut t, handshake) = starttls(c, client_config(&[&pki().ca], Some(&pki().client1), false));
    handshake.unwrap();
    assert_eq!(t.go("secret"), 1 << 20);
}

#[test]
fn plaintext_pipelined_after_starttls_is_never_taken_as_options() {
    let server = start(TlsMode::Require, false, &[], vec![]);
    let mut c = plain(server.addr);
    // STARTTLS and a plaintext LIST in one write: the LIST bytes reach the
    // TLS layer (which rejects them), never the option parser.
    let mut m = opt_bytes(OPT_STARTTLS, &[]);
    m.extend_from_slice(&opt_bytes(OPT_LIST, &[]));
    c.s.write_all(&m).unwrap();
    let mut got = Vec::new();
    let _ = c.s.read_to_end(&mut got);
    let ack = reply_bytes(OPT_STARTTLS, REP_ACK, &[]);
    assert_eq!(&got[..ack.len()], &ack[..]);
    let rest = &got[ack.len()..];
    // At most a TLS alert record (content type 21), no option reply.
    assert!(rest.is_empty() || rest[0] == 21, "{rest:02x?}");
    assert!(!rest.windows(8).any(|w| be64(w) == OPTION_REPLY_MAGIC));
}

#[test]
fn options_sent_right_behind_the_tls_handshake_are_answered() {
    // The client queues LIST before its handshake finishes, so rustls
    // sends it in the same flight as the client's Finished: the server
    // decrypts it during the TLS handshake, and must answer it without
    // waiting for the socket to become readable again.
    let server = start(TlsMode::Require, false, &[], vec![]);
    for tls12_only in [false, true] {
        let mut c = plain(server.addr);
        c.option(OPT_STARTTLS, &[]);
        assert_eq!(c.option_reply().1, REP_ACK);
        let config = client_config(&[&pki().ca], None, tls12_only);
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut conn = ClientConnection::new(config, name).unwrap();
        conn.writer().write_all(&opt_bytes(OPT_LIST, &[])).unwrap();
        let mut c = Nbd {
            s: StreamOwned::new(conn, c.s),
        };
        let mut names = Vec::new();
        loop {
            let (option, kind, data, _) = c.option_reply();
            assert_eq!(option, OPT_LIST);
            if kind == REP_ACK {
                break;
            }
            let n = be32(&data) as usize;
            names.push(String::from_utf8(data[4..4 + n].to_vec()).unwrap());
        }
        assert_eq!(names, vec!["open", "secret"]);
    }
}

#[test]
fn bind_fails_clearly_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        tls: TlsConfig {
            mode: TlsMode::Require,
            certificates: Some(dir.path().to_owned()),
            ..TlsConfig::default()
        },
        ..ServerConfig::default()
    };
    let export = Arc::new(Export::new(
        "d".into(),
        String::new(),
        Arc::new(MemDevice::new(4096, false)),
    ));
    let e = Server::bind_exports(config, vec![export]).err().unwrap();
    let msg = e.to_string();
    assert!(msg.contains("server-cert.pem"), "{msg}");
    assert!(Path::new(&pki().dir.path().join("server-cert.pem")).exists());
}

// ---------------------------------------------------------------------------
// Concurrency: many requests in flight, replies out of order

/// A memory device that sends everything to the I/O pool and makes each
/// request take a pseudo-random 0-2 ms, so replies finish out of order.
#[derive(Debug)]
struct JitterDevice {
    inner: MemDevice,
    seq: AtomicU64,
}

impl JitterDevice {
    fn pause(&self) {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 53;
        std::thread::sleep(Duration::from_micros(x % 2000));
    }
}

impl sluice_storage::DeviceLayer for JitterDevice {
    fn inner(&self) -> &dyn BlockDevice {
        &self.inner
    }
    fn capability(&self) -> Capability {
        Capability {
            blocking: BlockingClass::Always,
            ..self.inner.capability()
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.pause();
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.pause();
        self.inner.write_at(buf, offset, fua)
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A request in flight: offset, the data written or expected, and for
/// reads the data received so far.
type InFlight = (u64, Vec<u8>, Option<Vec<u8>>);

#[test]
fn concurrent_out_of_order_requests_over_tls_are_not_corrupted() {
    const SLOT: u64 = 1 << 20;
    const SLOTS: u64 = 32;
    let dev: Arc<dyn BlockDevice> = Arc::new(JitterDevice {
        inner: MemDevice::new(SLOT * SLOTS, false),
        seq: AtomicU64::new(0),
    });
    let server = start(TlsMode::Require, false, &[], vec![("jitter", dev)]);
    let mut c = tls_client(server.addr, None);
    assert_eq!(c.go("jitter"), SLOT * SLOTS);
    let mut model = vec![0u8; (SLOT * SLOTS) as usize];
    let mut rng = 42u64;
    let mut out_of_order = 0;
    let mut cookie = 100u64;
    for round in 0..8u64 {
        // Writes to even slots and reads of odd ones (or the other way
        // round), all in flight at once: reads see only earlier rounds.
        let mut pending: HashMap<u64, InFlight> = HashMap::new();
        let mut order = Vec::new();
        for slot in 0..SLOTS {
            cookie += 1;
            let offset = slot * SLOT + splitmix(&mut rng) % 4096;
            let len = match splitmix(&mut rng) % 4 {
                0 => 512 + splitmix(&mut rng) % 8192,
                1 => 64 * 1024,
                2 => 300 * 1024 + splitmix(&mut rng) % 1024,
                _ => SLOT - 4096, // pipelined read pieces
            } as usize;
            if (slot + round) % 2 == 0 {
                let data: Vec<u8> = (0..len).map(|_| splitmix(&mut rng) as u8).collect();
                c.request(CMD_WRITE, cookie, offset, len as u32, &data);
                pending.insert(cookie, (offset, data, None));
            } else {
                c.request(CMD_READ, cookie, offset, len as u32, &[]);
                let want = model[offset as usize..offset as usize + len].to_vec();
                pending.insert(cookie, (offset, want, Some(vec![0u8; len])));
            }
            order.push(cookie);
        }
        c.s.flush().unwrap();
        let mut completed = Vec::new();
        while !pending.is_empty() {
            let (ck, done, err, piece) = c.chunk();
            assert_eq!(err, 0, "request {ck} failed");
            let entry = pending.get_mut(&ck).expect("reply for a request in flight");
            if let Some((off, bytes)) = piece {
                let got = entry.2.as_mut().expect("data only for reads");
                let at = (off - entry.0) as usize;
                got[at..at + bytes.len()].copy_from_slice(&bytes);
            }
            if done {
                let (offset, data, got) = pending.remove(&ck).unwrap();
                match got {
                    Some(got) => assert!(got == data, "read {ck} at {offset} corrupted"),
                    None => {
                        model[offset as usize..offset as usize + data.len()].copy_from_slice(&data)
                    }
                }
                completed.push(ck);
            }
        }
        out_of_order += completed.iter().zip(&order).filter(|(a, b)| a != b).count();
    }
    assert!(
        out_of_order > 0,
        "the jitter device should have reordered some replies"
    );
    // Everything written is there, read back in one pass.
    for slot in 0..SLOTS {
        let got = c.read(slot * SLOT, SLOT as u32);
        assert!(
            got[..] == model[(slot * SLOT) as usize..((slot + 1) * SLOT) as usize],
            "slot {slot}"
        );
    }
}
