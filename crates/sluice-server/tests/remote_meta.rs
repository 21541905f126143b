#![allow(clippy::unwrap_used)]
//! The metadata service over the object protocol: `RemoteMetaStore`
//! against a real in-process server runs the conformance suite every
//! backend runs, the server keeping its service in SQLite as
//! `sluice serve --objects DIR --meta DIR` does. Beside the suite: the
//! service's reasons crossing the wire, lists longer than one page, and
//! a server without a metadata service (or none at all) refused by name.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_client::obj::{ObjOptions, RemoteMetaStore};
use sluice_meta::conformance::layout;
use sluice_meta::{MemoryMetaStore, MetaError, MetaStore};
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

fn options() -> ObjOptions {
    ObjOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_secs(10)),
        ..ObjOptions::default()
    }
}

fn remote(server: &TestServer) -> RemoteMetaStore {
    RemoteMetaStore::new(server.obj_uri().parse().unwrap(), options())
}

/// A server as `sluice serve --objects DIR/objects --meta DIR/meta`
/// starts one, and a `RemoteMetaStore` on it: what the store needs
/// alive, and the store.
fn served_from_sqlite() -> ((TempDir, TestServer), RemoteMetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let meta = dir.path().join("meta");
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| c.objects.as_mut().expect("objects configured").meta = Some(meta))
        .start();
    let store = remote(&server);
    ((dir, server), store)
}

sluice_meta::meta_conformance_tests!(served_from_sqlite());

/// A server whose service is a `MemoryMetaStore` the test also holds.
struct Service {
    server: TestServer,
    local: Arc<MemoryMetaStore>,
    _dir: TempDir,
}

fn served_from_memory() -> Service {
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(MemoryMetaStore::new());
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .meta(Arc::clone(&local) as Arc<dyn MetaStore>)
        .start();
    Service {
        server,
        local,
        _dir: dir,
    }
}

#[test]
fn refusals_keep_their_reasons_across_the_wire() {
    let s = served_from_memory();
    let m = remote(&s.server);
    let mut bad = layout(1, 1);
    bad.stripe_unit = 1000;
    let local = s.local.create("y", &bad, &BTreeMap::new()).unwrap_err();
    match m.create("y", &bad, &BTreeMap::new()) {
        Err(MetaError::Invalid { what, why }) => {
            assert!(why.contains("stripe unit 1000"), "{why}");
            assert_eq!(
                (what, why),
                match local {
                    MetaError::Invalid { what, why } => (what, why),
                    other => panic!("{other:?}"),
                }
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn long_lists_come_back_whole_over_several_pages() {
    let s = served_from_memory();
    let l = layout(1, 1);
    // More than two pages under "p/", and names around it that must not
    // show.
    for i in 0..2500 {
        s.local
            .create(&format!("p/{i:05}"), &l, &BTreeMap::new())
            .unwrap();
    }
    for n in ["o", "p", "q/1", "p0"] {
        s.local.create(n, &l, &BTreeMap::new()).unwrap();
    }
    let m = remote(&s.server);
    let got = m.list("p/").unwrap();
    assert_eq!(got, s.local.list("p/").unwrap());
    assert_eq!(got.len(), 2500);
    assert_eq!(m.list("").unwrap().len(), 2504);
    assert_eq!(
        m.list("p").unwrap().len(),
        2502,
        "p, p/..., p0 share the prefix"
    );
    assert!(m.list("zz").unwrap().is_empty());
}

#[test]
fn a_server_without_a_metadata_service_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder().objects(dir.path()).start();
    let m = remote(&server);
    let e = m.servers().unwrap_err();
    let text = sluice_types::error_chain(&e);
    assert!(matches!(e, MetaError::Backend { .. }), "{e:?}");
    assert!(text.contains("runs no metadata service"), "{text}");
    assert!(text.contains(&server.obj_uri()), "{text}");
    // Nothing listens: the error names the server.
    drop(server);
    let gone =
        RemoteMetaStore::connect("sluice://127.0.0.1:1".parse().unwrap(), options()).unwrap_err();
    assert!(
        sluice_types::error_chain(&gone).contains("127.0.0.1:1"),
        "{gone}"
    );
}

/// The store's calls share one connection; when its server goes away a
/// call fails naming the server, and once a server answers at that
/// address again the next call connects anew and works, with no new
/// store.
#[test]
fn a_lost_connection_is_replaced_on_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(MemoryMetaStore::new());
    let serve = |addr: std::net::SocketAddr| {
        TestServer::builder()
            .objects(dir.path().join("objects"))
            .config(|c| {
                c.objects.as_mut().expect("objects configured").listen =
                    vec![sluice_server::ListenAddr::Tcp(addr)];
            })
            .meta(Arc::clone(&local) as Arc<dyn MetaStore>)
            .start()
    };
    let first = serve("127.0.0.1:0".parse().unwrap());
    let addr = first.obj_addr.unwrap();
    let store = remote(&first);
    // Calls from several threads at once, on the one connection.
    std::thread::scope(|s| {
        for i in 0..4 {
            let store = &store;
            s.spawn(move || store.add_server(&format!("sluice://10.0.0.{i}:1")).unwrap());
        }
    });
    assert_eq!(store.servers().unwrap().len(), 4);
    first.stop().unwrap();
    let e = store.servers().unwrap_err();
    assert!(
        matches!(e, MetaError::Backend { ref backend, .. } if backend.contains(&addr.to_string())),
        "{e:?}"
    );
    let _second = serve(addr);
    assert_eq!(store.servers().unwrap().len(), 4);
}
