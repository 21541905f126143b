#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! TRUNCATE: an object's length set shorter or longer, inline and in its
//! file; bytes past a cut are gone for good, also across a reopen that
//! replays the journal.

use std::path::Path;

use sluice_objstore::{ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions};

const P: PartitionId = PartitionId(3);

fn open(dir: &Path) -> ObjectStore {
    let store = ObjectStore::open(dir).unwrap();
    let _ = store.create_partition(P);
    store
}

fn object_with(store: &ObjectStore, bytes: &[u8]) -> ObjectRef {
    let id = store
        .create_and_write(
            P,
            None,
            &[Segment::new(0, bytes.len() as u64)],
            bytes,
            &WriteOptions::default(),
        )
        .unwrap();
    ObjectRef {
        partition: P,
        object: id,
    }
}

/// The whole object as a read of its length returns it.
fn contents(store: &ObjectStore, object: ObjectRef) -> Vec<u8> {
    let length = store.get_attrs(object, &[]).unwrap().0.length;
    store
        .read(object, &[Segment::new(0, length)], &[])
        .unwrap()
        .data
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 + 1).collect()
}

/// Shorter, then longer again: the cut bytes read as zeros, the rest
/// is kept, and so it stays after a reopen.
fn cut_and_extend(len: usize, cut: usize, durable: bool) {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(len);
    let object = {
        let store = open(dir.path());
        let object = object_with(&store, &data);
        let before = store.truncate(object, cut as u64, durable).unwrap();
        assert_eq!(before.length, len as u64);
        assert_eq!(contents(&store, object), data[..cut]);
        store.truncate(object, len as u64, durable).unwrap();
        let mut want = data[..cut].to_vec();
        want.resize(len, 0);
        assert_eq!(contents(&store, object), want, "{len} cut to {cut}");
        object
    };
    let store = open(dir.path());
    let mut want = data[..cut].to_vec();
    want.resize(len, 0);
    assert_eq!(
        contents(&store, object),
        want,
        "{len} cut to {cut}, reopened"
    );
}

#[test]
fn an_inline_object_is_cut_and_extended() {
    cut_and_extend(1000, 100, false);
    cut_and_extend(1000, 0, true);
}

#[test]
fn an_object_file_is_cut_and_extended() {
    cut_and_extend(1 << 20, 4096 + 7, false);
    cut_and_extend(1 << 20, 0, true);
}

#[test]
fn a_longer_length_reads_as_zeros_and_a_write_past_the_cut_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let object = object_with(&store, &pattern(64 << 10));
    store.truncate(object, 1000, false).unwrap();
    // Written past the cut: the bytes between the cut and the write are
    // zeros, not the old ones.
    store
        .write(
            object,
            &[Segment::new(50_000, 4)],
            b"tail",
            &WriteOptions::default(),
        )
        .unwrap();
    let got = contents(&store, object);
    assert_eq!(got.len(), 50_004);
    assert_eq!(got[..1000], pattern(64 << 10)[..1000]);
    assert!(got[1000..50_000].iter().all(|&b| b == 0));
    assert_eq!(&got[50_000..], b"tail");
}

/// Durable small writes are journaled; the cut must retire those rows,
/// or the replay at the next open would put their bytes back past it.
#[test]
fn journaled_bytes_past_a_cut_do_not_come_back_on_replay() {
    let dir = tempfile::tempdir().unwrap();
    let len = 256 << 10;
    let object = {
        let store = open(dir.path());
        let object = object_with(&store, &pattern(len));
        store.flush_object(object).unwrap();
        let durable = WriteOptions {
            durable: true,
            ..WriteOptions::default()
        };
        store
            .write(object, &[Segment::new(200_000, 5)], b"later", &durable)
            .unwrap();
        store.truncate(object, 1000, false).unwrap();
        store.truncate(object, len as u64, false).unwrap();
        object
    };
    let store = open(dir.path());
    let got = contents(&store, object);
    assert_eq!(got.len(), len);
    assert_eq!(got[..1000], pattern(len)[..1000]);
    assert!(
        got[1000..].iter().all(|&b| b == 0),
        "bytes past the cut came back: {:?}",
        got[1000..].iter().position(|&b| b != 0).map(|i| i + 1000)
    );
}
