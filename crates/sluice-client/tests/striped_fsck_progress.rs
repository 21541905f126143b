#![allow(clippy::unwrap_used)]
//! The progress `StripedClient::fsck_with_progress` reports, over two
//! real in-process object servers and the in-memory metadata service:
//! entries checked, counted up one at a time to the number of entries,
//! whatever state each was left in.

use std::sync::Arc;
use std::time::Duration;

use sluice_client::obj::ObjOptions;
use sluice_client::striped::{CreateStep, FsckOptions, RemoveStep, StripedClient};
use sluice_meta::{MemoryMetaStore, MetaStore};
use sluice_testkit::test_server::TestServer;

const UNIT: u64 = 4096;

#[test]
fn fsck_reports_each_entry_checked_up_to_the_total() {
    let meta = Arc::new(MemoryMetaStore::new());
    let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    let _servers: Vec<TestServer> = dirs
        .iter()
        .map(|dir| {
            let server = TestServer::builder()
                .objects(dir.path().join("objects"))
                .start();
            meta.add_server(&server.obj_uri()).unwrap();
            server
        })
        .collect();
    let options = ObjOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_secs(10)),
        ..ObjOptions::default()
    };
    let mut c = StripedClient::new(Arc::clone(&meta) as Arc<dyn MetaStore>, options);
    // Ready ones, one a crash left creating, one a crash left removing.
    for k in 0..4 {
        c.create(&format!("ready/{k}"), UNIT, 2).unwrap();
    }
    c.create_until("creating", UNIT, 2, CreateStep::Entry)
        .unwrap();
    c.create("removing", UNIT, 2).unwrap();
    c.remove_until("removing", RemoveStep::Removing).unwrap();
    let entries = meta.list("").unwrap().len() as u64;
    assert_eq!(entries, 6);

    let mut seen: Vec<(u64, u64)> = Vec::new();
    let now = FsckOptions {
        grace: Duration::ZERO,
    };
    let report = c
        .fsck_with_progress(&now, |done, total| seen.push((done, total)))
        .unwrap();
    assert_eq!(report.finished, ["creating"]);
    assert_eq!(report.removed, ["removing"]);
    let want: Vec<(u64, u64)> = (0..=entries).map(|done| (done, entries)).collect();
    assert_eq!(seen, want);

    // Nothing to check: one report, of nothing out of nothing.
    let empty = Arc::new(MemoryMetaStore::new());
    let mut c = StripedClient::new(empty, ObjOptions::default());
    let mut seen = Vec::new();
    let report = c
        .fsck_with_progress(&now, |done, total| seen.push((done, total)))
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(seen, [(0, 0)]);
}
