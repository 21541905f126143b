#![allow(clippy::unwrap_used)]
//! The progress `StripedClient::fsck_with_progress` reports, over two
//! real in-process object servers and the in-memory metadata service:
//! entries checked, counted up one at a time to the number of entries,
//! whatever state each was left in.

use std::sync::Arc;
use std::time::Duration;

use sluice_client::obj::ObjOptions;
use sluice_client::striped::{CreateStep, FsckOptions, RemoveStep, Shape, StripedClient};
use sluice_meta::{EntryState, MemoryMetaStore, MetaStore, Update};
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
        c.create(&format!("ready/{k}"), &Shape::striped(UNIT, 2))
            .unwrap();
    }
    c.create_until("creating", &Shape::striped(UNIT, 2), CreateStep::Entry)
        .unwrap();
    c.create("removing", &Shape::striped(UNIT, 2)).unwrap();
    c.remove_until("removing", RemoveStep::Removing).unwrap();
    let entries = all_entries(&*meta, "").len() as u64;
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

/// More entries than one page of the metadata service holds: fsck pages
/// through them all, finishing a create a crash left behind after the
/// first page, counting every entry, and keeping the pieces that only
/// entries past the first page name.
#[test]
fn fsck_pages_through_more_entries_than_one_page() {
    let meta = Arc::new(MemoryMetaStore::new());
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .start();
    meta.add_server(&server.obj_uri()).unwrap();
    let mut c = StripedClient::new(
        Arc::clone(&meta) as Arc<dyn MetaStore>,
        ObjOptions::default(),
    );
    // More than a page of ready entries, all naming one model object's
    // pieces (no piece is checked for a ready entry).
    c.create("a/model", &Shape::striped(UNIT, 1)).unwrap();
    let layout = meta.lookup("a/model").unwrap().layout;
    let filler = sluice_meta::MAX_PAGE + 10;
    for i in 0..filler {
        let name = format!("a/{i:05}");
        let e = meta.create(&name, &layout, &Default::default()).unwrap();
        let ready = Update {
            state: Some(EntryState::Ready),
            ..Update::default()
        };
        meta.update(&name, Some(e.revision), &ready).unwrap();
    }
    // Past the first page: an object whose pieces only its entry names,
    // and a create a crash left at its entry.
    c.create("zz/kept", &Shape::striped(UNIT, 1)).unwrap();
    c.create_until("zz/creating", &Shape::striped(UNIT, 1), CreateStep::Entry)
        .unwrap();
    let total = filler as u64 + 3;
    let mut last = None;
    let report = c
        .fsck_with_progress(
            &FsckOptions {
                grace: Duration::ZERO,
            },
            |done, of| last = Some((done, of)),
        )
        .unwrap();
    assert_eq!(last, Some((total, total)));
    assert_eq!(report.finished, ["zz/creating"]);
    assert!(report.orphans.is_empty(), "{:?}", report.orphans);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert!(
        report.is_clean() || report.finished.len() == 1,
        "{report:?}"
    );
}

/// Every entry under `prefix`, paged through.
fn all_entries(meta: &dyn MetaStore, prefix: &str) -> Vec<sluice_meta::Entry> {
    sluice_meta::entries(meta, prefix)
        .collect::<Result<_, _>>()
        .unwrap()
}
