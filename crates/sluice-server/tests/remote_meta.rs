#![allow(clippy::unwrap_used)]
//! The metadata service over the object protocol: `RemoteMetaStore`
//! against a real in-process server runs the conformance suite every
//! backend runs, the server keeping its service in SQLite as
//! `sluice serve --objects DIR --meta DIR` does. Beside the suite: the
//! service's reasons crossing the wire, lists longer than one page, and
//! a server without a metadata service (or none at all) refused by name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_client::obj::{ObjClient, ObjOptions, RemoteMetaStore};
use sluice_meta::conformance::layout;
use sluice_meta::{Entry, Layout, MemoryMetaStore, MetaError, MetaStore, Page, Update, MAX_PAGE};
use sluice_obj_proto::{MetaFailure, MetaReply, MetaRequest};
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

/// Every entry under `prefix`, paged through.
fn all(store: &dyn MetaStore, prefix: &str) -> Vec<Entry> {
    sluice_meta::entries(store, prefix)
        .collect::<Result<_, _>>()
        .unwrap()
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
    let first = m.list("p/", None, MAX_PAGE).unwrap();
    assert_eq!(first.entries.len(), MAX_PAGE);
    assert_eq!(first.next.as_deref(), Some("p/01023"));
    let got = all(&m, "p/");
    assert_eq!(got, all(&*s.local, "p/"));
    assert_eq!(got.len(), 2500);
    assert_eq!(all(&m, "").len(), 2504);
    assert_eq!(all(&m, "p").len(), 2502, "p, p/..., p0 share the prefix");
    assert!(all(&m, "zz").is_empty());
}

/// A `MemoryMetaStore` that records the pages it is asked for.
#[derive(Default)]
struct Recording {
    inner: MemoryMetaStore,
    pages: Mutex<Vec<(Option<String>, usize, usize)>>,
}

impl MetaStore for Recording {
    fn add_server(&self, uri: &str) -> Result<(), MetaError> {
        self.inner.add_server(uri)
    }
    fn remove_server(&self, uri: &str) -> Result<(), MetaError> {
        self.inner.remove_server(uri)
    }
    fn servers(&self) -> Result<Vec<String>, MetaError> {
        self.inner.servers()
    }
    fn deployment(&self) -> Result<String, MetaError> {
        self.inner.deployment()
    }
    fn default_redundancy(&self) -> Result<sluice_meta::Redundancy, MetaError> {
        self.inner.default_redundancy()
    }
    fn set_default_redundancy(&self, r: sluice_meta::Redundancy) -> Result<(), MetaError> {
        self.inner.set_default_redundancy(r)
    }
    fn next_placement(&self) -> Result<u64, MetaError> {
        self.inner.next_placement()
    }
    fn create(
        &self,
        name: &str,
        layout: &Layout,
        attrs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Entry, MetaError> {
        self.inner.create(name, layout, attrs)
    }
    fn lookup(&self, name: &str) -> Result<Entry, MetaError> {
        self.inner.lookup(name)
    }
    fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Page, MetaError> {
        let page = self.inner.list(prefix, after, limit)?;
        self.pages
            .lock()
            .unwrap()
            .push((after.map(str::to_owned), limit, page.entries.len()));
        Ok(page)
    }
    fn update(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        update: &Update,
    ) -> Result<Entry, MetaError> {
        self.inner.update(name, expected_revision, update)
    }
    fn delete(&self, name: &str, expected_revision: Option<u64>) -> Result<(), MetaError> {
        self.inner.delete(name, expected_revision)
    }
}

/// The server answers a LIST with one page of its store, of the size
/// asked for (not a listing of everything cut down), and refuses sizes
/// past the most a page holds, and keys that are no key, by name.
#[test]
fn the_server_reads_only_the_page_asked_for_and_refuses_bad_ones() {
    let dir = tempfile::tempdir().unwrap();
    let local = Arc::new(Recording::default());
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .meta(Arc::clone(&local) as Arc<dyn MetaStore>)
        .start();
    for i in 0..300 {
        local
            .create(&format!("n/{i:03}"), &layout(1, 1), &BTreeMap::new())
            .unwrap();
    }
    let m = remote(&server);
    let page = m.list("n/", Some("n/100"), 7).unwrap();
    let names: Vec<&str> = page.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["n/101", "n/102", "n/103", "n/104", "n/105", "n/106", "n/107"]
    );
    assert_eq!(page.next.as_deref(), Some("n/107"));
    assert_eq!(
        *local.pages.lock().unwrap(),
        [(Some("n/100".to_owned()), 7, 7)]
    );
    // Past the most a page holds: refused by the client as by any
    // backend, and by the server if a client sends it anyway.
    match m.list("n/", None, MAX_PAGE + 1) {
        Err(MetaError::Invalid { what, why }) => {
            assert!(
                what.contains("1025") && why.contains("1024"),
                "{what}: {why}"
            );
        }
        other => panic!("{other:?}"),
    }
    let mut raw = ObjClient::connect(&server.obj_uri().parse().unwrap(), &options()).unwrap();
    for max in [0, 1025, u32::MAX] {
        let list = MetaRequest::List {
            prefix: "n/".into(),
            after: String::new(),
            max,
        };
        let e = raw.meta(&list).unwrap_err();
        let text = sluice_types::error_chain(&e);
        assert!(text.contains("a page holds 1 to 1024"), "{text}");
    }
    // A key outside the prefix is the service's refusal, kept as such.
    let outside = MetaRequest::List {
        prefix: "n/".into(),
        after: "m/1".into(),
        max: 10,
    };
    match raw.meta(&outside).unwrap() {
        MetaReply::Failed(MetaFailure::Invalid { what, .. }) => {
            assert!(what.contains("continuation key"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        local.pages.lock().unwrap().len(),
        1,
        "bad pages reached the store"
    );
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
