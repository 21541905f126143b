//! The SQLite backend: the conformance suite, and what must survive
//! closing and reopening the database.

use std::collections::BTreeMap;

use sluice_meta::conformance::layout;
use sluice_meta::{EntryState, MetaError, MetaStore, SqliteMetaStore, Update};

fn fresh() -> (tempfile::TempDir, SqliteMetaStore) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteMetaStore::open(dir.path()).expect("open the store");
    (dir, store)
}

sluice_meta::meta_conformance_tests!(fresh());

#[test]
fn everything_survives_reopening() {
    let (dir, store) = fresh();
    store.add_server("sluice://a:1").expect("add_server");
    store.add_server("sluice://b:1").expect("add_server");
    let placed = store.next_placement().expect("next_placement");
    let e = store
        .create("keep/me", &layout(2, 1), &BTreeMap::new())
        .expect("create");
    let e = store
        .update(
            "keep/me",
            Some(e.revision),
            &Update {
                state: Some(EntryState::Ready),
                size_at_least: Some(12345),
                ..Update::default()
            },
        )
        .expect("update");
    drop(store);

    let store = SqliteMetaStore::open(dir.path()).expect("reopen");
    assert_eq!(store.lookup("keep/me").expect("lookup"), e);
    assert_eq!(
        store.servers().expect("servers"),
        ["sluice://a:1", "sluice://b:1"]
    );
    assert_eq!(store.next_placement().expect("next_placement"), placed + 1);
    // The revision counter went on from where it was.
    let again = store
        .update("keep/me", None, &Update::default())
        .expect("update");
    assert!(again.revision > e.revision);
}

#[test]
fn an_unusable_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").expect("write");
    match SqliteMetaStore::open(&file) {
        Err(e @ MetaError::Backend { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("not-a-dir"), "{msg}");
        }
        other => panic!("opening under a file gave {other:?}"),
    }
}
