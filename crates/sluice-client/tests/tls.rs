#![allow(clippy::unwrap_used)]
//! `nbds://` and `nbds+unix://` against an in-process sluice server that
//! requires TLS and a client certificate, with certificates made by rcgen
//! at test time in the directory layout the NBD URI `tls-certificates=`
//! parameter names (`ca-cert.pem`, `client-cert.pem`, `client-key.pem`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use sluice_client::{
    list_exports, Client, ClientError, ConnectOptions, Connection, NbdUri, Outcome, Reconnect,
    Request,
};
use sluice_nbd_proto::ClientHandshakeError;
use sluice_server::{Export, ListenAddr, Server, ServerConfig, ServerHandle, TlsConfig, TlsMode};
use sluice_storage::MemDevice;
use sluice_testkit::error_chain;

/// A CA, a server directory and client directories: `good` (CA, client
/// certificate and key), `anonymous` (CA only), `stranger` (another CA).
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, who: &str) -> PathBuf {
        self.dir.path().join(who)
    }
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    cn: &str,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, body) in files {
        std::fs::write(dir.join(name), body).unwrap();
    }
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, issuer) = ca("client test CA");
    let (other_pem, _) = ca("another CA");
    let (server_cert, server_key) = leaf(
        &issuer,
        "server",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) =
        leaf(&issuer, "client1", &[], ExtendedKeyUsagePurpose::ClientAuth);
    write(
        &dir.path().join("server"),
        &[
            ("ca-cert.pem", &ca_pem),
            ("server-cert.pem", &server_cert),
            ("server-key.pem", &server_key),
        ],
    );
    write(
        &dir.path().join("good"),
        &[
            ("ca-cert.pem", &ca_pem),
            ("client-cert.pem", &client_cert),
            ("client-key.pem", &client_key),
        ],
    );
    write(&dir.path().join("anonymous"), &[("ca-cert.pem", &ca_pem)]);
    write(
        &dir.path().join("stranger"),
        &[
            ("ca-cert.pem", &other_pem),
            ("client-cert.pem", &client_cert),
            ("client-key.pem", &client_key),
        ],
    );
    Pki { dir }
}

struct TestServer {
    tcp: String,
    unix: PathBuf,
    handle: ServerHandle,
    thread: Option<JoinHandle<Result<(), sluice_server::ServerError>>>,
    _sockdir: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(pki: &Pki, verify_peer: bool) -> TestServer {
    start_on(
        pki,
        verify_peer,
        "127.0.0.1:0",
        Arc::new(MemDevice::new(4 << 20, false)),
    )
}

/// A server on `listen` exporting `device` as `disk`.
fn start_on(pki: &Pki, verify_peer: bool, listen: &str, device: Arc<MemDevice>) -> TestServer {
    let sockdir = tempfile::tempdir().unwrap();
    let unix = sockdir.path().join("nbd.sock");
    let config = ServerConfig {
        listen: vec![
            listen.parse().unwrap(),
            format!("unix:{}", unix.display()).parse().unwrap(),
        ],
        tls: TlsConfig {
            mode: TlsMode::Require,
            certificates: Some(pki.path("server")),
            verify_peer,
            ..TlsConfig::default()
        },
        ..ServerConfig::default()
    };
    let export = Arc::new(Export::new("disk".into(), "over TLS".into(), device));
    let server = Server::bind_exports(config, vec![export]).unwrap();
    let ListenAddr::Tcp(addr) = server.local_addrs()[0].clone() else {
        panic!("tcp")
    };
    let handle = server.handle();
    let thread = Some(std::thread::spawn(move || server.run()));
    TestServer {
        tcp: addr.to_string(),
        unix,
        handle,
        thread,
        _sockdir: sockdir,
    }
}

fn round_trip(c: &mut Connection) {
    let data: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
    c.queue(Request::Write {
        offset: 4096,
        data: &data,
        fua: true,
    })
    .unwrap();
    c.receive(|done| assert!(done.result.is_ok())).unwrap();
    c.queue(Request::Read {
        offset: 4096,
        length: data.len() as u32,
    })
    .unwrap();
    let mut n = 0;
    while n == 0 {
        n = c
            .receive(|done| assert_eq!(done.result.unwrap(), Outcome::Data(&data[..])))
            .unwrap();
    }
}

#[test]
fn nbds_over_tcp_and_unix_with_a_client_certificate() {
    let pki = pki();
    let server = start(&pki, true);
    let good = pki.path("good");
    for uri in [
        format!(
            "nbds://{}/disk?tls-certificates={}",
            server.tcp,
            good.display()
        ),
        format!(
            "nbds+unix:///disk?socket={}&tls-certificates={}",
            server.unix.display(),
            good.display()
        ),
    ] {
        let uri: NbdUri = uri.parse().unwrap();
        let mut c = Connection::connect(&uri, &ConnectOptions::default()).unwrap();
        assert!(c.details().tls);
        assert_eq!(c.details().description, "over TLS");
        round_trip(&mut c);
        c.disconnect().unwrap();
    }
    // The shared client: a reader thread and writers on one TLS session.
    let uri: NbdUri = format!(
        "nbds://{}/disk?tls-certificates={}",
        server.tcp,
        good.display()
    )
    .parse()
    .unwrap();
    let client = Client::connect(&uri, &ConnectOptions::default()).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = client.clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    let off = (t * 40 + i) * 8192;
                    let data = vec![(t * 40 + i) as u8; 8192];
                    c.call_blocking(Request::Write {
                        offset: off,
                        data: &data,
                        fua: false,
                    })
                    .unwrap();
                    let mut back = vec![0; 8192];
                    c.read_at(&mut back, off).unwrap();
                    assert_eq!(back, data);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let list = list_exports(&uri).unwrap();
    assert_eq!(list, vec![("disk".to_owned(), "over TLS".to_owned())]);
}

#[test]
fn tls_failures_are_clear_errors() {
    let pki = pki();
    let server = start(&pki, true);
    // Plaintext to a server that requires TLS.
    let plain: NbdUri = format!("nbd://{}/disk", server.tcp).parse().unwrap();
    let err = Connection::connect(&plain, &ConnectOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Handshake {
                source: ClientHandshakeError::TlsRequired(_),
                ..
            }
        ),
        "{err}"
    );
    assert!(error_chain(&err).contains("nbds://"), "{err}");
    // A server certificate from a CA the client does not trust.
    let stranger: NbdUri = format!(
        "nbds://{}/disk?tls-certificates={}",
        server.tcp,
        pki.path("stranger").display()
    )
    .parse()
    .unwrap();
    let err = Connection::connect(&stranger, &ConnectOptions::default()).unwrap_err();
    assert!(matches!(err, ClientError::Tls { .. }), "{err}");
    // No client certificate for a server that verifies its peers: the
    // TLS handshake or the first option fails, never with export data.
    let anonymous: NbdUri = format!(
        "nbds://{}/disk?tls-certificates={}",
        server.tcp,
        pki.path("anonymous").display()
    )
    .parse()
    .unwrap();
    let err = Connection::connect(&anonymous, &ConnectOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Tls { .. } | ClientError::Io { .. } | ClientError::Closed { .. }
        ),
        "{err}"
    );
    // A directory without the CA.
    let missing: NbdUri = format!("nbds://{}/disk?tls-certificates=/nonexistent", server.tcp)
        .parse()
        .unwrap();
    let err = Connection::connect(&missing, &ConnectOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/ca-cert.pem"),
        "{err}"
    );
}

#[test]
fn nbds_against_qemu_nbd_with_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    // qemu wants RSA keys that may encipher.
    sluice_testkit::pki::write_rsa_pki(dir.path(), 2048);
    let image = dir.path().join("disk.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let socket = dir.path().join("qemu.sock");
    let server_dir = dir.path().join("server");
    let mut qemu = std::process::Command::new(sluice_testkit::programs::program("qemu-nbd"))
        .args([
            "--persistent",
            "-f",
            "raw",
            "-k",
            &socket.display().to_string(),
            "--object",
            &format!(
                "tls-creds-x509,id=tls0,dir={},endpoint=server,verify-peer=on",
                server_dir.display()
            ),
            "--tls-creds",
            "tls0",
            &image.display().to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run qemu-nbd: {e}"));
    let uri: NbdUri = format!(
        "nbds+unix:///?socket={}&tls-certificates={}",
        socket.display(),
        dir.path().join("client").display()
    )
    .parse()
    .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The socket file appears at bind, before qemu-nbd listens: the
        // first session that gets through says it is up.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut c = loop {
            match Connection::connect(&uri, &ConnectOptions::default()) {
                Ok(c) => break c,
                Err(e) => assert!(
                    std::time::Instant::now() < deadline,
                    "qemu-nbd does not serve its socket: {e}"
                ),
            }
            if let Ok(Some(status)) = qemu.try_wait() {
                panic!("qemu-nbd exited ({status}) before serving its socket");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(c.details().tls);
        round_trip(&mut c);
        c.disconnect().unwrap();
        // Plaintext is refused by a qemu-nbd that requires TLS.
        let plain: NbdUri = format!("nbd+unix:///?socket={}", socket.display())
            .parse()
            .unwrap();
        assert!(Connection::connect(&plain, &ConnectOptions::default()).is_err());
    }));
    let _ = qemu.kill();
    let _ = qemu.wait();
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn a_tls_client_reconnects_to_a_restarted_server() {
    let pki = pki();
    let device = Arc::new(MemDevice::new(4 << 20, false));
    let server = start_on(&pki, true, "127.0.0.1:0", device.clone());
    let addr = server.tcp.clone();
    let uri: NbdUri = format!(
        "nbds://{addr}/disk?tls-certificates={}",
        pki.path("good").display()
    )
    .parse()
    .unwrap();
    let options = ConnectOptions {
        reconnect: Reconnect::within(std::time::Duration::from_secs(10)),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&uri, &options).unwrap();
    client
        .call_blocking(Request::Write {
            offset: 8192,
            data: &[7; 4096],
            fua: false,
        })
        .unwrap();
    // A clean stop closes the connection; the same export comes back on
    // the same address.
    drop(server);
    let restarted = start_on(&pki, true, &addr, device);
    let mut back = vec![0u8; 4096];
    client.read_at(&mut back, 8192).unwrap();
    assert_eq!(back, vec![7; 4096]);
    client.call_blocking(Request::Flush).unwrap();
    drop(restarted);
}
