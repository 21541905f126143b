#![allow(clippy::unwrap_used)]
//! TLS (NBD STARTTLS) end to end, in process: a real `Server` with the
//! test kit's certificates (rcgen, made at test time), driven by the test
//! kit's raw NBD client over rustls. Covers the negative matrix (every
//! refusal happens before any export name, size or data is sent — the
//! bytes are checked), the allow-lists, plaintext service with `--tls
//! on`, and a TLS connection carrying many concurrent requests whose
//! replies come back out of order from the I/O pool.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use sluice_server::{TlsConfig, TlsMode};
use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, MemDevice};
use sluice_testkit::pki::{Identity, Pki};
use sluice_testkit::raw_nbd::*;
use sluice_testkit::test_server::TestServer;
use sluice_types::splitmix64;

fn pki() -> &'static Pki {
    Pki::shared()
}

// ---------------------------------------------------------------------------
// The server

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
    let mut tls = TlsConfig {
        mode,
        certificates: (mode != TlsMode::Off).then(|| pki().server()),
        verify_peer,
        ..TlsConfig::default()
    };
    if !allow_secret.is_empty() {
        tls.allow.insert(
            "secret".into(),
            allow_secret.iter().map(|s| s.parse().unwrap()).collect(),
        );
    }
    let mut builder = TestServer::builder()
        .described_export(
            "open",
            "open to all",
            Arc::new(MemDevice::new(1 << 20, false)),
        )
        .described_export("secret", "allow-listed", Arc::new(secret));
    for (name, dev) in extra {
        builder = builder.export(name, dev);
    }
    builder
        .config(|c| {
            c.io_threads = 8;
            c.tls = tls;
        })
        .start()
}

// ---------------------------------------------------------------------------
// The raw client, in plaintext or over rustls

const TLS_REQD_MSG: &[u8] = b"this server requires TLS: send NBD_OPT_STARTTLS first";
const POLICY_MSG: &[u8] = b"this client is not allowed to use this export";

/// A plaintext connection past the greeting (fixed newstyle, no zeroes).
fn plain(addr: SocketAddr) -> RawClient<TcpStream> {
    RawClient::greet(RawClient::tcp(addr))
}

/// Structured replies, then GO; returns the export size.
fn go<S: Read + Write>(c: &mut RawClient<S>, name: &str) -> u64 {
    c.structured_replies();
    c.go(name)
        .unwrap_or_else(|t| panic!("GO {name:?} failed: {t:#x}"))
}

/// Reads `len` bytes at `offset` (which must succeed).
fn read<S: Read + Write>(c: &mut RawClient<S>, offset: u64, len: usize) -> Vec<u8> {
    c.read(1, offset, len)
        .unwrap_or_else(|e| panic!("read at {offset}: error {e}"))
}

/// Writes `data` at `offset` (which must succeed).
fn write<S: Read + Write>(c: &mut RawClient<S>, offset: u64, data: &[u8]) {
    assert_eq!(c.write(2, offset, data), 0, "write at {offset}");
}

fn client_config(
    roots: &[&CertificateDer<'static>],
    creds: Option<&Identity>,
    tls12_only: bool,
) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
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
        Some(c) => builder.with_client_auth_cert(c.chain(), c.key()).unwrap(),
        None => builder.with_no_client_auth(),
    })
}

type TlsNbd = RawClient<StreamOwned<ClientConnection, TcpStream>>;

/// STARTTLS on a plaintext connection; returns the TLS connection and the
/// result of its handshake (from the client's point of view).
fn starttls(
    mut c: RawClient<TcpStream>,
    config: Arc<ClientConfig>,
) -> (TlsNbd, std::io::Result<()>) {
    c.option(OPT_STARTTLS, &[]);
    let (option, kind, data, _) = c.option_reply();
    assert_eq!((option, kind, data), (OPT_STARTTLS, REP_ACK, vec![]));
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = ClientConnection::new(config, name).unwrap();
    let mut tls = StreamOwned::new(conn, c.s);
    let result = tls.conn.complete_io(&mut tls.sock).map(|_| ());
    (RawClient::resume(tls, c.handshake_flags), result)
}

/// Connects with TLS as a client holding `creds` (trusting our CA).
fn tls_client(addr: SocketAddr, creds: Option<&Identity>) -> TlsNbd {
    let config = client_config(&[&pki().ca.cert], creds, false);
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
    let _ = c.s.write_all(&option_bytes(OPT_LIST, &[]));
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
        expected.extend_from_slice(&option_reply_bytes(option, REP_ERR_TLS_REQD, TLS_REQD_MSG));
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
        let config = client_config(&[&pki().ca.cert], None, tls12_only);
        let (mut c, handshake) = starttls(plain(server.addr), config);
        handshake.unwrap();
        let version = c.s.conn.protocol_version().unwrap();
        assert_eq!(
            version == rustls::ProtocolVersion::TLSv1_2,
            tls12_only,
            "{version:?}"
        );
        assert_eq!(c.list(), vec!["open", "secret"]);
        assert_eq!(go(&mut c, "secret"), 1 << 20);
        let want: Vec<u8> = (4096..8192).map(|i| (i % 251) as u8).collect();
        assert_eq!(read(&mut c, 4096, 4096), want);
        write(&mut c, 8192, &[7; 1000]);
        assert_eq!(read(&mut c, 8192, 1000), vec![7; 1000]);
        c.send(CMD_DISC, 3, 0, 0, &[]);
    }
}

#[test]
fn tls_on_still_serves_plaintext_clients() {
    let server = start(TlsMode::On, false, &[], vec![]);
    let mut c = plain(server.addr);
    assert_eq!(c.list(), vec!["open", "secret"]);
    assert_eq!(go(&mut c, "open"), 1 << 20);
    write(&mut c, 0, b"plaintext still works");
    assert_eq!(read(&mut c, 0, 21), b"plaintext still works");
    // And TLS clients on the same server.
    let mut t = tls_client(server.addr, None);
    assert_eq!(go(&mut t, "open"), 1 << 20);
    assert_eq!(read(&mut t, 0, 21), b"plaintext still works");
}

#[test]
fn untrusted_server_certificate_is_refused_by_the_client() {
    let server = start(TlsMode::Require, false, &[], vec![]);
    let config = client_config(&[&pki().other_ca.cert], None, false);
    let (_c, handshake) = starttls(plain(server.addr), config);
    let e = handshake.expect_err("a client that does not trust our CA must refuse");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
}

#[test]
fn missing_client_certificate_is_refused_with_verify_peer() {
    let server = start(TlsMode::Require, true, &[], vec![]);
    let config = client_config(&[&pki().ca.cert], None, false);
    let (c, handshake) = starttls(plain(server.addr), config);
    assert_refused(c, handshake);
    // TLS 1.2 as well, where the failure is in the handshake itself.
    let config = client_config(&[&pki().ca.cert], None, true);
    let (c, handshake) = starttls(plain(server.addr), config);
    assert_refused(c, handshake);
}

#[test]
fn expired_client_certificate_is_refused() {
    let server = start(TlsMode::Require, true, &["CN=client1"], vec![]);
    for tls12_only in [false, true] {
        let config = client_config(&[&pki().ca.cert], Some(&pki().expired), tls12_only);
        let (c, handshake) = starttls(plain(server.addr), config);
        assert_refused(c, handshake);
    }
}

#[test]
fn client_certificate_from_another_ca_is_refused() {
    let server = start(TlsMode::Require, true, &["CN=client1"], vec![]);
    let config = client_config(&[&pki().ca.cert], Some(&pki().rogue), false);
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
        assert_eq!(raw, option_reply_bytes(option, REP_ERR_POLICY, POLICY_MSG));
    }
    // The open export is still usable by client2.
    let mut c = tls_client(server.addr, Some(&pki().client2));
    assert_eq!(go(&mut c, "open"), 1 << 20);
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
    assert_eq!(go(&mut c, "secret"), 1 << 20);
    assert_eq!(read(&mut c, 251, 3), vec![0, 1, 2]);
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
            option_reply_bytes(option, REP_ERR_TLS_REQD, b"this export requires TLS")
        );
    }
    // A plaintext client cannot present a certificate, but can upgrade.
    let (mut t, handshake) = starttls(
        c,
        client_config(&[&pki().ca.cert], Some(&pki().client1), false),
    );
    handshake.unwrap();
    assert_eq!(go(&mut t, "secret"), 1 << 20);
}

#[test]
fn plaintext_pipelined_after_starttls_is_never_taken_as_options() {
    let server = start(TlsMode::Require, false, &[], vec![]);
    let mut c = plain(server.addr);
    // STARTTLS and a plaintext LIST in one write: the LIST bytes reach the
    // TLS layer (which rejects them), never the option parser.
    let mut m = option_bytes(OPT_STARTTLS, &[]);
    m.extend_from_slice(&option_bytes(OPT_LIST, &[]));
    c.s.write_all(&m).unwrap();
    let mut got = Vec::new();
    let _ = c.s.read_to_end(&mut got);
    let ack = option_reply_bytes(OPT_STARTTLS, REP_ACK, &[]);
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
        let config = client_config(&[&pki().ca.cert], None, tls12_only);
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut conn = ClientConnection::new(config, name).unwrap();
        conn.writer()
            .write_all(&option_bytes(OPT_LIST, &[]))
            .unwrap();
        let mut c = RawClient::resume(StreamOwned::new(conn, c.s), c.handshake_flags);
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
    let result = TestServer::builder()
        .export("d", Arc::new(MemDevice::new(4096, false)))
        .config(|c| {
            c.tls = TlsConfig {
                mode: TlsMode::Require,
                certificates: Some(dir.path().to_owned()),
                ..TlsConfig::default()
            }
        })
        .bind();
    let msg = result.err().unwrap().to_string();
    assert!(msg.contains("server-cert.pem"), "{msg}");
    assert!(pki().server().join("server-cert.pem").exists());
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
        std::thread::sleep(Duration::from_micros(splitmix64(n) % 2000));
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

/// A request in flight: offset, the data written or expected, and
/// whether it is a read.
type InFlight = (u64, Vec<u8>, bool);

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
    assert_eq!(go(&mut c, "jitter"), SLOT * SLOTS);
    let mut model = vec![0u8; (SLOT * SLOTS) as usize];
    let mut rng = fastrand::Rng::with_seed(42);
    let mut out_of_order = 0;
    let mut cookie = 100u64;
    for round in 0..8u64 {
        // Writes to even slots and reads of odd ones (or the other way
        // round), all in flight at once: reads see only earlier rounds.
        let mut pending: HashMap<u64, InFlight> = HashMap::new();
        let mut order = Vec::new();
        for slot in 0..SLOTS {
            cookie += 1;
            let offset = slot * SLOT + rng.u64(..4096);
            let len = match rng.u64(..4) {
                0 => 512 + rng.u64(..8192),
                1 => 64 * 1024,
                2 => 300 * 1024 + rng.u64(..1024),
                _ => SLOT - 4096, // pipelined read pieces
            };
            if (slot + round) % 2 == 0 {
                let mut data = vec![0u8; len as usize];
                rng.fill(&mut data);
                c.send(CMD_WRITE, cookie, offset, len, &data);
                pending.insert(cookie, (offset, data, false));
            } else {
                c.send(CMD_READ, cookie, offset, len, &[]);
                let want = model[offset as usize..(offset + len) as usize].to_vec();
                pending.insert(cookie, (offset, want, true));
            }
            order.push(cookie);
        }
        c.s.flush().unwrap();
        let mut completed = Vec::new();
        while !pending.is_empty() {
            let (ck, err, got) = c.reply();
            assert_eq!(err, 0, "request {ck} failed");
            let (offset, data, is_read) = pending.remove(&ck).expect("a request in flight");
            if is_read {
                assert!(got == data, "read {ck} at {offset} corrupted");
            } else {
                model[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
            }
            completed.push(ck);
        }
        out_of_order += completed.iter().zip(&order).filter(|(a, b)| a != b).count();
    }
    assert!(
        out_of_order > 0,
        "the jitter device should have reordered some replies"
    );
    // Everything written is there, read back in one pass.
    for slot in 0..SLOTS {
        let got = read(&mut c, slot * SLOT, SLOT as usize);
        assert!(
            got[..] == model[(slot * SLOT) as usize..((slot + 1) * SLOT) as usize],
            "slot {slot}"
        );
    }
}
