#![allow(clippy::unwrap_used)]
//! STARTTLS on the native object protocol, with the NBD listeners' TLS
//! setup: TLS required, partition allow-lists (a listed client allowed,
//! another denied, a plaintext one told to use TLS), and data over TLS.

use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use sluice_obj_proto::consts::*;
use sluice_obj_proto::{answer, Features};
use sluice_server::{TlsConfig, TlsMode};
use sluice_testkit::pki::{Identity, Pki};
use sluice_testkit::raw_obj::*;
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

type TlsObj = RawObjClient<StreamOwned<ClientConnection, TcpStream>>;

/// Objects with partition 2 allow-listed for client1.
fn start(mode: TlsMode) -> (TestServer, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::shared();
    let server = TestServer::builder()
        .objects(dir.path())
        .config(|c| {
            c.tls = TlsConfig {
                mode,
                certificates: Some(pki.server()),
                verify_peer: true,
                ..TlsConfig::default()
            };
            let o = c.objects.as_mut().unwrap();
            o.partitions = vec![2];
            o.allow
                .insert("2".into(), vec!["CN=client1".parse().unwrap()]);
        })
        .metrics()
        .start();
    (server, dir)
}

fn starttls(mut c: RawObjClient<TcpStream>, creds: Option<&Identity>) -> TlsObj {
    c.negotiate(OPT_STARTTLS, &[]).expect("STARTTLS accepted");
    let mut roots = RootCertStore::empty();
    roots.add(Pki::shared().ca.cert.clone()).unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = Arc::new(match creds {
        Some(id) => builder.with_client_auth_cert(id.chain(), id.key()).unwrap(),
        None => builder.with_no_client_auth(),
    });
    let conn = ClientConnection::new(config, ServerName::try_from("127.0.0.1").unwrap()).unwrap();
    let s = c.s.try_clone().unwrap();
    let mut tls = StreamOwned::new(conn, s);
    tls.conn.complete_io(&mut tls.sock).unwrap();
    c.resume(tls)
}

#[test]
fn tls_required_refuses_plaintext_and_serves_over_tls() {
    let (server, _dir) = start(TlsMode::Require);
    let mut c = RawObjClient::connect(server.obj_addr.unwrap());
    assert!(c.features.contains(Features::TLS_REQUIRED));
    let (status, _) = c.hello(Features::NEGOTIABLE).unwrap_err();
    assert_eq!(status, answer::TLS_REQUIRED);
    let (status, _) = c.select(1).unwrap_err();
    assert_eq!(status, answer::TLS_REQUIRED);
    let mut c = starttls(c, Some(&Pki::shared().client2));
    c.hello(Features::NEGOTIABLE).unwrap();
    c.select(1).unwrap();
    let id = c.create(1, "")[0];
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 241) as u8).collect();
    c.write(id, 0, &data);
    let r = c
        .call(&Req::new(OP_READ, 7).object(id).strided(0, 1000, 100, 300))
        .ok();
    let want: Vec<u8> = (0..300)
        .flat_map(|i| data[i * 1000..i * 1000 + 100].to_vec())
        .collect();
    assert_eq!(r.body, want);
    // A large plain write to an object the store holds open: over TLS
    // its payload is received and copied, never spliced.
    let more: Vec<u8> = data.iter().rev().copied().collect();
    c.write(id, 1000, &more);
    let (got, _) = c.read(id, 1000, more.len() as u64);
    assert!(got == more, "bytes written over TLS");
    assert!(
        server
            .scrape()
            .lines()
            .any(|l| l == "sluice_obj_spliced_writes_total 0"),
        "a write over TLS was spliced"
    );
}

#[test]
fn partition_allow_lists() {
    let (server, _dir) = start(TlsMode::On);
    let addr = server.obj_addr.unwrap();
    // Plaintext: the open partition works, the listed one needs TLS.
    let mut plain = RawObjClient::connect(addr);
    plain.hello(Features::NEGOTIABLE).unwrap();
    let (status, msg) = plain.select(2).unwrap_err();
    assert_eq!(status, answer::TLS_REQUIRED, "{msg}");
    plain.select(1).unwrap();
    // Over TLS as client2: denied.
    let mut other = starttls(RawObjClient::connect(addr), Some(&Pki::shared().client2));
    other.hello(Features::NEGOTIABLE).unwrap();
    let (status, msg) = other.select(2).unwrap_err();
    assert_eq!(status, answer::DENIED, "{msg}");
    // Over TLS as client1: allowed, and serving.
    let mut allowed = starttls(RawObjClient::connect(addr), Some(&Pki::shared().client1));
    allowed.hello(Features::NEGOTIABLE).unwrap();
    allowed.select(2).unwrap();
    let id = allowed.create(1, "")[0];
    allowed.write(id, 0, b"secret");
    assert_eq!(allowed.read(id, 0, 6).0, b"secret");
}
