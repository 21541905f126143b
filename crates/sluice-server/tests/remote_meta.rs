#![allow(clippy::unwrap_used)]
//! The metadata service over the object protocol: a `RemoteMetaStore`
//! against a real in-process server whose service is a
//! `MemoryMetaStore`, keeping the semantics every backend keeps (errors
//! of each kind with their fields, one winner of a create race over the
//! wire, revisions, pagination of long lists), and a server without a
//! metadata service refusing `META` by name.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use sluice_client::obj::{ObjOptions, RemoteMetaStore};
use sluice_meta::{EntryState, Layout, MemoryMetaStore, MetaError, MetaStore, Piece, Update};
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

struct Service {
    server: TestServer,
    local: Arc<MemoryMetaStore>,
    _dir: TempDir,
}

fn options() -> ObjOptions {
    ObjOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_secs(10)),
        ..ObjOptions::default()
    }
}

fn service() -> Service {
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

impl Service {
    fn remote(&self) -> RemoteMetaStore {
        RemoteMetaStore::new(self.server.obj_uri().parse().unwrap(), options())
    }
}

fn layout(servers: &[&str]) -> Layout {
    Layout {
        stripe_unit: 64 << 10,
        pieces: servers
            .iter()
            .enumerate()
            .map(|(i, s)| Piece {
                server: (*s).to_owned(),
                partition: 1,
                object: 100 + i as u64,
            })
            .collect(),
    }
}

#[test]
fn calls_reach_the_servers_store_and_errors_keep_their_kind() {
    let s = service();
    let m = s.remote();
    m.add_server("sluice://a:1").unwrap();
    m.add_server("sluice://b:1").unwrap();
    m.add_server("sluice://a:1").unwrap();
    assert_eq!(m.servers().unwrap(), ["sluice://a:1", "sluice://b:1"]);
    assert_eq!(s.local.servers().unwrap(), m.servers().unwrap());
    assert_eq!(m.next_placement().unwrap(), 0);
    assert_eq!(m.next_placement().unwrap(), 1);

    let attrs: BTreeMap<String, Vec<u8>> = [("k".to_owned(), vec![0, 0xff, 7])].into();
    let e = m
        .create("dir/x", &layout(&["sluice://a:1"]), &attrs)
        .unwrap();
    assert_eq!(e.state, EntryState::Creating);
    assert_eq!(e.attrs, attrs);
    assert_eq!(m.lookup("dir/x").unwrap(), s.local.lookup("dir/x").unwrap());
    assert!(matches!(
        m.create("dir/x", &layout(&["sluice://b:1"]), &BTreeMap::new()),
        Err(MetaError::Exists { name }) if name == "dir/x"
    ));
    assert!(matches!(
        m.lookup("dir/nope"),
        Err(MetaError::NotFound { name }) if name == "dir/nope"
    ));

    let grow = Update {
        state: Some(EntryState::Ready),
        size_at_least: Some(4096),
        remove_attrs: vec!["k".into()],
        ..Update::default()
    };
    let e1 = m.update("dir/x", Some(e.revision), &grow).unwrap();
    assert_eq!((e1.state, e1.size), (EntryState::Ready, 4096));
    assert!(e1.attrs.is_empty());
    match m.update("dir/x", Some(e.revision), &Update::default()) {
        Err(MetaError::Conflict {
            name,
            expected,
            found,
        }) => assert_eq!(
            (name.as_str(), expected, found),
            ("dir/x", e.revision, e1.revision)
        ),
        other => panic!("{other:?}"),
    }
    match m.remove_server("sluice://a:1") {
        Err(MetaError::ServerInUse {
            server,
            objects,
            example,
        }) => assert_eq!(
            (server.as_str(), objects, example.as_str()),
            ("sluice://a:1", 1, "dir/x")
        ),
        other => panic!("{other:?}"),
    }
    // Invalid layouts are refused by the service, with its reason.
    let mut bad = layout(&["sluice://a:1"]);
    bad.stripe_unit = 1000;
    match m.create("y", &bad, &BTreeMap::new()) {
        Err(MetaError::Invalid { why, .. }) => assert!(why.contains("stripe unit 1000"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        m.delete("dir/x", Some(e.revision)),
        Err(MetaError::Conflict { .. })
    ));
    m.delete("dir/x", Some(e1.revision)).unwrap();
    assert!(matches!(
        s.local.lookup("dir/x"),
        Err(MetaError::NotFound { .. })
    ));
    m.remove_server("sluice://a:1").unwrap();
    assert_eq!(m.servers().unwrap(), ["sluice://b:1"]);
}

#[test]
fn one_of_sixteen_creators_over_the_wire_wins() {
    let s = service();
    let m = Arc::new(s.remote());
    let start = Arc::new(Barrier::new(16));
    let results: Vec<Result<u64, MetaError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let (m, start) = (Arc::clone(&m), Arc::clone(&start));
                scope.spawn(move || {
                    let server = format!("sluice://s{i}:1");
                    start.wait();
                    m.create("race", &layout(&[&server]), &BTreeMap::new())
                        .map(|_| i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .copied()
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    for r in &results {
        assert!(matches!(r, Ok(_) | Err(MetaError::Exists { .. })), "{r:?}");
    }
    // The stored layout is the winner's.
    let entry = s.local.lookup("race").unwrap();
    assert_eq!(
        entry.layout.pieces[0].server,
        format!("sluice://s{}:1", winners[0])
    );
}

#[test]
fn long_lists_come_back_whole_over_several_pages() {
    let s = service();
    let l = layout(&["sluice://a:1"]);
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
    let m = s.remote();
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
    let m = RemoteMetaStore::new(server.obj_uri().parse().unwrap(), options());
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
