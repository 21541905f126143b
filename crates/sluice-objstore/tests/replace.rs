#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! REPLACE of an object's data by another object's: every pair of
//! inline and file objects, the refusals, and a crash after each step
//! (the store stopped there as a kill would leave it, then opened
//! again): the target is old or new, whole, and the source is there or
//! gone, never beside a target sharing its file.

use std::path::Path;

use sluice_objstore::{
    AttrValue, ObjStoreError, ObjectId, ObjectRef, ObjectStore, PartitionId, ReplaceStop, Segment,
    WriteOptions,
};

const P: PartitionId = PartitionId(3);
const SMALL: usize = 1000;
const LARGE: usize = 40 << 10;

fn open(dir: &Path) -> ObjectStore {
    let store = ObjectStore::open(dir).unwrap();
    let _ = store.create_partition(P);
    for name in ["kept", "tmp"] {
        let _ = store.create_collection(P, name);
    }
    store
}

fn object_with(store: &ObjectStore, bytes: &[u8], collection: Option<&str>) -> ObjectRef {
    let id = store
        .create_and_write(
            P,
            collection,
            &[Segment::new(0, bytes.len() as u64)],
            bytes,
            &WriteOptions {
                attrs: vec![("name".into(), AttrValue::Text(format!("{}", bytes.len())))],
                durable: false,
            },
        )
        .unwrap();
    ObjectRef {
        partition: P,
        object: id,
    }
}

fn contents(store: &ObjectStore, object: ObjectRef) -> Vec<u8> {
    let length = store.get_attrs(object, &[]).unwrap().0.length;
    store
        .read(object, &[Segment::new(0, length)], &[])
        .unwrap()
        .data
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed.wrapping_mul(37) | 1)
        .collect()
}

fn gone(store: &ObjectStore, object: ObjectRef) -> bool {
    matches!(
        store.get_attrs(object, &[]),
        Err(ObjStoreError::UnknownObject { .. })
    )
}

fn data_file(dir: &Path, object: ObjectRef) -> std::path::PathBuf {
    dir.join(format!("p{:016x}", object.partition.0))
        .join(format!("{:016x}", object.object.0))
}

/// Target of `old` bytes replaced by a source of `new` bytes: the
/// target has the source's bytes and length and keeps its own
/// attributes and collection; the source is gone; so after a reopen.
fn replaces(old: usize, new: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (pattern(old, 1), pattern(new, 2));
    let (target, source, created) = {
        let store = open(dir.path());
        let target = object_with(&store, &a, Some("kept"));
        let source = object_with(&store, &b, Some("tmp"));
        let before = store.get_attrs(target, &[]).unwrap().0;
        let info = store.replace_data(target, source, false).unwrap();
        assert_eq!(info.length, new as u64, "{old} replaced by {new}");
        assert_eq!(info.created, before.created);
        assert!(info.data_modified > before.data_modified);
        assert_eq!(contents(&store, target), b, "{old} replaced by {new}");
        assert!(gone(&store, source));
        (target, source, before.created)
    };
    let store = open(dir.path());
    assert_eq!(
        contents(&store, target),
        b,
        "{old} replaced by {new}, reopened"
    );
    let (info, attrs) = store.get_attrs(target, &[]).unwrap();
    assert_eq!(info.created, created);
    assert_eq!(
        attrs,
        vec![("name".into(), AttrValue::Text(format!("{old}")))],
        "the target keeps its own attributes"
    );
    let kept = store.list(P, Some("kept"), None, 10, false).unwrap();
    assert_eq!(kept.entries.len(), 1);
    let tmp = store.list(P, Some("tmp"), None, 10, false).unwrap();
    assert!(tmp.entries.is_empty(), "the source left its collection");
    assert!(gone(&store, source));
    assert!(!data_file(dir.path(), source).exists());
    if new <= SMALL {
        assert!(
            !data_file(dir.path(), target).exists(),
            "an inline target keeps no file"
        );
    }
}

#[test]
fn every_pair_of_inline_and_file_objects_is_replaced() {
    for (old, new) in [
        (SMALL, SMALL / 2),
        (SMALL, LARGE),
        (LARGE, SMALL),
        (LARGE, LARGE / 2),
        (LARGE, 0),
        (0, LARGE),
    ] {
        replaces(old, new);
    }
}

#[test]
fn a_targets_journal_is_not_replayed_over_its_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let b = pattern(LARGE, 2);
    let target = {
        let store = open(dir.path());
        let target = object_with(&store, &pattern(LARGE, 1), None);
        store.flush_partition(P).unwrap();
        // A durable small write: journaled, its file not synced.
        let durable = WriteOptions {
            attrs: Vec::new(),
            durable: true,
        };
        store
            .write(target, &[Segment::new(10, 4)], b"WXYZ", &durable)
            .unwrap();
        let source = object_with(&store, &b, None);
        store.replace_data(target, source, true).unwrap();
        target
    };
    let store = open(dir.path());
    assert_eq!(contents(&store, target), b);
}

#[test]
fn refusals_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_partition(PartitionId(4)).unwrap();
    let a = object_with(&store, &pattern(LARGE, 1), None);
    let b = object_with(&store, &pattern(SMALL, 2), None);
    let missing = ObjectRef {
        partition: P,
        object: ObjectId(1),
    };
    let elsewhere = ObjectRef {
        partition: PartitionId(4),
        object: b.object,
    };
    assert!(matches!(
        store.replace_data(a, a, false),
        Err(ObjStoreError::ReplaceSelf { .. })
    ));
    assert!(matches!(
        store.replace_data(a, elsewhere, false),
        Err(ObjStoreError::ReplaceAcrossPartitions { .. })
    ));
    assert!(matches!(
        store.replace_data(a, missing, false),
        Err(ObjStoreError::UnknownObject { object }) if object == missing
    ));
    assert!(matches!(
        store.replace_data(missing, b, false),
        Err(ObjStoreError::UnknownObject { object }) if object == missing
    ));
    assert_eq!(contents(&store, a), pattern(LARGE, 1));
    assert_eq!(contents(&store, b), pattern(SMALL, 2));
}

/// Stops a replace of an `old`-byte target by a `new`-byte source at
/// `stop`, opens the store again, and checks what a crash there leaves.
fn crash_at(old: usize, new: usize, stop: ReplaceStop) {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (pattern(old, 1), pattern(new, 2));
    let (target, source) = {
        let store = open(dir.path());
        let target = object_with(&store, &a, None);
        let source = object_with(&store, &b, Some("tmp"));
        store.flush_partition(P).unwrap();
        store
            .replace_data_until(target, source, false, Some(stop))
            .unwrap();
        (target, source)
    };
    let store = open(dir.path());
    let what = format!("{old} replaced by {new}, stopped at {stop:?}");
    if stop == ReplaceStop::Synced {
        assert_eq!(contents(&store, target), a, "{what}: the old target");
        assert_eq!(contents(&store, source), b, "{what}: the source kept");
        // And the replace can still be made.
        store.replace_data(target, source, false).unwrap();
    } else {
        assert!(gone(&store, source), "{what}: the source is gone");
        assert!(
            !data_file(dir.path(), source).exists(),
            "{what}: the source's file was renamed or removed"
        );
    }
    assert_eq!(contents(&store, target), b, "{what}: the new target");
    // Later changes stick: nothing pending renames over them.
    store
        .write(
            target,
            &[Segment::new(0, 3)],
            b"new",
            &WriteOptions::default(),
        )
        .unwrap();
    drop(store);
    let store = open(dir.path());
    let mut want = b.clone();
    want.resize(want.len().max(3), 0);
    want[..3].copy_from_slice(b"new");
    assert_eq!(contents(&store, target), want, "{what}: written after");
}

#[test]
fn a_crash_after_each_step_of_a_file_replace_leaves_the_old_or_the_new_object() {
    for stop in [
        ReplaceStop::Synced,
        ReplaceStop::Committed,
        ReplaceStop::Renamed,
        ReplaceStop::FolderSynced,
    ] {
        crash_at(LARGE, LARGE / 2 + 7, stop);
        crash_at(SMALL, LARGE, stop);
        crash_at(0, LARGE, stop);
    }
}

#[test]
fn a_crash_after_an_inline_replace_commits_leaves_the_new_object() {
    crash_at(LARGE, SMALL, ReplaceStop::Committed);
    crash_at(SMALL, SMALL / 3, ReplaceStop::Committed);
    crash_at(LARGE, 0, ReplaceStop::Committed);
}
