#![allow(clippy::unwrap_used)]
//! Puts of striped objects are all or nothing, against real in-process
//! object servers: a put over an existing name switches it to the new
//! content at once (readers see the old object until then, and handles
//! on the old version never write into the new one); a put stopped at
//! every step leaves the old object readable; fsck collects what each
//! step leaves and nothing else; concurrent puts, a put and an rm end
//! with one winner and no orphans.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::Duration;

use sluice_client::striped::{
    FsckOptions, Pattern, PutStep, RemoveStep, Shape, StripedClient, StripedError, StripedObject,
    StripedWrite,
};
use sluice_meta::{EntryState, MetaError};

mod deployment;
use deployment::{all_entries, bytes, deploy, Deployment, UNIT};

const NOW: FsckOptions = FsckOptions {
    grace: Duration::ZERO,
};

/// Writes `data` from offset 0 in two writes (so a handle's size and
/// attributes change more than once), with attribute `version`.
fn write_all(c: &mut StripedClient, o: &mut StripedObject, data: &[u8], version: &str) {
    let half = data.len() / 2;
    let first = Pattern::Contiguous {
        offset: 0,
        length: half as u64,
    };
    c.write(o, &first, &data[..half], &StripedWrite::default())
        .unwrap();
    let second = Pattern::Contiguous {
        offset: half as u64,
        length: (data.len() - half) as u64,
    };
    let attrs = StripedWrite {
        set_attrs: BTreeMap::from([("version".to_owned(), version.as_bytes().to_vec())]),
        ..StripedWrite::default()
    };
    c.write(o, &second, &data[half..], &attrs).unwrap();
}

/// Puts `data` as `name`, whole.
fn put(c: &mut StripedClient, name: &str, servers: usize, data: &[u8], version: &str) {
    let mut o = c.begin_put(name, &Shape::striped(UNIT, servers)).unwrap();
    write_all(c, &mut o, data, version);
    c.complete_put(&mut o).unwrap();
}

/// The whole content of `name` and its `version` attribute, through a
/// fresh handle.
fn get(c: &mut StripedClient, name: &str) -> (Vec<u8>, String) {
    let mut o = c.open(name).unwrap();
    let size = o.size();
    let read = c
        .read(
            &mut o,
            &Pattern::Contiguous {
                offset: 0,
                length: size,
            },
        )
        .unwrap();
    let version = String::from_utf8(o.entry().attrs["version"].clone()).unwrap();
    (read.data, version)
}

/// Every piece on every server, as (server index, object id).
fn all_pieces(d: &Deployment) -> Vec<(usize, u64)> {
    let mut all: Vec<(usize, u64)> = (0..d.uris.len())
        .flat_map(|i| d.pieces_on(i).into_iter().map(move |(o, _)| (i, o)))
        .collect();
    all.sort_unstable();
    all
}

#[test]
fn a_put_over_an_existing_name_switches_it_whole_and_removes_the_old_pieces() {
    let d = deploy(4);
    let mut c = d.client();
    let old = bytes(1, 5 * UNIT + 100);
    put(&mut c, "obj", 3, &old, "old");
    let old_layout = c.stat("obj").unwrap().layout;

    // A new version, longer and over a different number of servers.
    let new = bytes(2, 9 * UNIT + 7);
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 4)).unwrap();
    assert!(o.replaces());
    write_all(&mut c, &mut o, &new, "new");
    // Until the switch, everyone else sees the old object, whole.
    let mut reader = d.client();
    assert_eq!(get(&mut reader, "obj"), (old.clone(), "old".into()));
    let entry = c.stat("obj").unwrap();
    assert_eq!(entry.state, EntryState::Ready);
    assert_eq!(entry.size, old.len() as u64);
    assert_eq!(entry.pending.as_ref(), Some(o.layout()));
    c.complete_put(&mut o).unwrap();

    assert_eq!(get(&mut reader, "obj"), (new.clone(), "new".into()));
    let entry = c.stat("obj").unwrap();
    assert_eq!(entry.pending, None);
    assert_eq!(entry.layout.pieces.len(), 4);
    // The old version's pieces are gone; nothing is left over.
    for p in &old_layout.pieces {
        let i = d.uris.iter().position(|u| *u == p.server).unwrap();
        assert!(d.obj_client(i).stat(p.object).unwrap_err().is_not_found());
    }
    d.assert_consistent();
    assert!(c.fsck(&NOW).unwrap().is_clean());

    // A shorter version drops the old tail and attributes it lacks.
    let short = bytes(3, UNIT / 2);
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 2)).unwrap();
    let p = Pattern::Contiguous {
        offset: 0,
        length: short.len() as u64,
    };
    c.write(&mut o, &p, &short, &StripedWrite::default())
        .unwrap();
    c.complete_put(&mut o).unwrap();
    let mut h = c.open("obj").unwrap();
    assert_eq!(h.size(), short.len() as u64);
    assert!(!h.entry().attrs.contains_key("version"));
    let back = c.read(&mut h, &p).unwrap();
    assert!(back.data == short);
    d.assert_consistent();
}

#[test]
fn a_put_stopped_at_each_step_leaves_the_old_object_and_fsck_collects_the_rest() {
    let d = deploy(3);
    let mut c = d.client();
    let old = bytes(4, 4 * UNIT);
    put(&mut c, "obj", 3, &old, "old");
    let before = all_pieces(&d);

    // Stopped while writing (a crash before the flush) and after the
    // flush: the old object reads back, whole; a fresh fsck keeps the
    // new version (its put may still be running), one past the grace
    // period forgets it and removes its pieces.
    for step in [None, Some(PutStep::Durable)] {
        let mut o = c.begin_put("obj", &Shape::striped(UNIT, 2)).unwrap();
        write_all(&mut c, &mut o, &bytes(5, 6 * UNIT), "new");
        if let Some(step) = step {
            c.complete_put_until(&mut o, step).unwrap();
        }
        drop(o);
        assert_eq!(get(&mut c, "obj"), (old.clone(), "old".into()));
        let report = c.fsck(&FsckOptions::default()).unwrap();
        assert!(report.abandoned.is_empty() && report.orphans.is_empty());
        assert!(c.stat("obj").unwrap().pending.is_some());
        let report = c.fsck(&NOW).unwrap();
        assert_eq!(report.abandoned, ["obj"], "{report:?}");
        assert_eq!(report.orphans.len(), 2, "{report:?}");
        assert!(report.orphans.iter().all(|o| o.of == "obj"));
        assert_eq!(c.stat("obj").unwrap().pending, None);
        assert_eq!(all_pieces(&d), before, "{step:?}");
        assert_eq!(get(&mut c, "obj"), (old.clone(), "old".into()));
    }

    // Stopped after the switch: the new object reads back; the old
    // version's pieces are orphans fsck removes.
    let new = bytes(6, 6 * UNIT);
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 2)).unwrap();
    write_all(&mut c, &mut o, &new, "new");
    c.complete_put_until(&mut o, PutStep::Switched).unwrap();
    assert_eq!(get(&mut c, "obj"), (new.clone(), "new".into()));
    let report = c.fsck(&NOW).unwrap();
    assert!(report.abandoned.is_empty(), "{report:?}");
    assert_eq!(report.orphans.len(), 3, "{report:?}");
    d.assert_consistent();
    assert_eq!(get(&mut c, "obj"), (new, "new".into()));
}

#[test]
fn a_put_over_an_unfinished_first_put_completes_it() {
    let d = deploy(2);
    let mut c = d.client();
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 2)).unwrap();
    write_all(&mut c, &mut o, &bytes(7, 3 * UNIT), "lost");
    drop(o); // the first put died before completing
    assert!(matches!(
        c.open("obj"),
        Err(StripedError::NotReady {
            state: EntryState::Writing,
            ..
        })
    ));
    let data = bytes(8, 2 * UNIT + 1);
    put(&mut c, "obj", 2, &data, "second");
    assert_eq!(get(&mut c, "obj"), (data, "second".into()));
    d.assert_consistent();
    assert!(c.fsck(&NOW).unwrap().is_clean());
}

#[test]
fn a_handle_on_the_old_version_never_changes_the_new_one() {
    let d = deploy(3);
    let mut c = d.client();
    put(&mut c, "obj", 3, &bytes(9, 2 * UNIT), "old");
    let mut stale = c.open("obj").unwrap();
    let new = bytes(10, 2 * UNIT);
    put(&mut d.client(), "obj", 3, &new, "new");

    // A write past the old end would have grown the new version's size;
    // it fails instead, and the new version is as its put left it.
    let past = Pattern::Contiguous {
        offset: 4 * UNIT,
        length: UNIT,
    };
    let err = c
        .write(
            &mut stale,
            &past,
            &bytes(11, UNIT),
            &StripedWrite::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            StripedError::Replaced { .. } | StripedError::Piece { .. }
        ),
        "{err}"
    );
    let err = c
        .set_attrs(
            &mut stale,
            BTreeMap::from([("version".to_owned(), b"stale".to_vec())]),
            Vec::new(),
        )
        .unwrap_err();
    assert!(matches!(err, StripedError::Replaced { .. }), "{err}");
    // A read past the old size sees that the name moved on.
    let err = c.read(&mut stale, &past).unwrap_err();
    assert!(matches!(err, StripedError::Replaced { .. }), "{err}");
    assert_eq!(get(&mut c, "obj"), (new, "new".into()));
}

#[test]
fn concurrent_puts_of_one_name_leave_one_whole_version_and_no_orphans() {
    let d = deploy(3);
    put(&mut d.client(), "obj", 3, &bytes(12, UNIT), "first");
    let start = Barrier::new(4);
    let outcomes: Vec<Option<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let (d, start) = (&d, &start);
                s.spawn(move || {
                    let mut c = d.client();
                    start.wait();
                    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 2)).ok()?;
                    write_all(&mut c, &mut o, &bytes(100 + t, 3 * UNIT), &t.to_string());
                    match c.complete_put(&mut o) {
                        Ok(()) => Some(t),
                        Err(StripedError::Replaced { .. }) => None,
                        Err(e) => panic!("{e}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winners: Vec<u64> = outcomes.into_iter().flatten().collect();
    assert!(!winners.is_empty());
    // The name holds one put's whole content: the last to switch.
    let (data, version) = get(&mut d.client(), "obj");
    let t: u64 = version.parse().unwrap();
    assert!(winners.contains(&t), "{version} not among {winners:?}");
    assert!(data == bytes(100 + t, 3 * UNIT));
    d.assert_consistent();
    assert!(d.client().fsck(&NOW).unwrap().is_clean());
}

#[test]
fn an_rm_during_a_put_wins_and_leaves_nothing() {
    let d = deploy(3);
    let mut c = d.client();
    put(&mut c, "obj", 3, &bytes(13, UNIT), "old");
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 3)).unwrap();
    write_all(&mut c, &mut o, &bytes(14, 2 * UNIT), "new");
    d.client().remove_until("obj", RemoveStep::Deleted).unwrap();
    assert!(matches!(
        c.complete_put(&mut o),
        Err(StripedError::Replaced { .. })
    ));
    assert!(matches!(
        c.stat("obj"),
        Err(StripedError::Meta {
            source: MetaError::NotFound { .. },
            ..
        })
    ));
    assert!(all_entries(&*d.meta, "").is_empty());
    assert!(all_pieces(&d).is_empty(), "{:?}", all_pieces(&d));
}

#[test]
fn an_aborted_put_leaves_the_name_as_it_was_and_nothing_behind() {
    let d = deploy(3);
    let mut c = d.client();
    let old = bytes(15, 2 * UNIT);
    put(&mut c, "obj", 3, &old, "old");
    let before = all_pieces(&d);
    // A new version, given up: the old object, no pending layout, none
    // of the new pieces.
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 2)).unwrap();
    write_all(&mut c, &mut o, &bytes(16, 3 * UNIT), "new");
    c.abort_put(o).unwrap();
    assert_eq!(c.stat("obj").unwrap().pending, None);
    assert_eq!(all_pieces(&d), before);
    assert_eq!(get(&mut c, "obj"), (old, "old".into()));
    // A new name, given up: gone, entry and pieces.
    let mut o = c.begin_put("fresh", &Shape::striped(UNIT, 3)).unwrap();
    write_all(&mut c, &mut o, &bytes(17, UNIT), "x");
    c.abort_put(o).unwrap();
    assert!(c.stat("fresh").is_err());
    assert_eq!(all_pieces(&d), before);
    assert!(c.fsck(&NOW).unwrap().is_clean());
}

#[test]
fn writes_to_the_old_version_during_a_put_do_not_stop_it() {
    let d = deploy(3);
    let mut c = d.client();
    put(&mut c, "obj", 3, &bytes(18, 2 * UNIT), "old");
    let mut o = c.begin_put("obj", &Shape::striped(UNIT, 3)).unwrap();
    let new = bytes(19, 3 * UNIT);
    write_all(&mut c, &mut o, &new, "new");
    // Another client writes in place (growing it) and sets an attribute
    // of the old version meanwhile: the put still wins, whole.
    let mut other = d.client();
    let mut h = other.open("obj").unwrap();
    let grow = StripedWrite {
        set_attrs: BTreeMap::from([("extra".to_owned(), b"1".to_vec())]),
        ..StripedWrite::default()
    };
    other
        .write(
            &mut h,
            &Pattern::Contiguous {
                offset: 4 * UNIT,
                length: UNIT,
            },
            &bytes(20, UNIT),
            &grow,
        )
        .unwrap();
    c.complete_put(&mut o).unwrap();
    let entry = c.stat("obj").unwrap();
    assert!(!entry.attrs.contains_key("extra"), "{entry:?}");
    assert_eq!(get(&mut c, "obj"), (new, "new".into()));
    d.assert_consistent();
}
