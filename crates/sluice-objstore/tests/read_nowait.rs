#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! The reads that must not wait (the server runs them on a connection
//! thread): `lend_resident` lends an object's file only for a range
//! inside its length that is all in memory, and `read_into_nowait`
//! reads only what it can without SQLite or the disk; both decline
//! (rather than wait) otherwise.

use std::os::unix::fs::FileExt;

use sluice_objstore::{ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions};

const P: PartitionId = PartitionId(1);

fn data() -> Vec<u8> {
    (0..256 * 1024u32).map(|i| (i % 251) as u8).collect()
}

#[test]
fn lend_resident_lends_cached_ranges_inside_the_length_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    let bytes = data();
    let id = store
        .create_and_write(
            P,
            None,
            &[Segment::new(0, bytes.len() as u64)],
            &bytes,
            &WriteOptions::default(),
        )
        .unwrap();
    let obj = ObjectRef {
        partition: P,
        object: id,
    };
    // The first read loads the object's state into its shard.
    store.read(obj, &[Segment::new(0, 1)], &[]).unwrap();
    let file = store.lend_resident(obj, 4096, 65536).expect("lent");
    let mut got = vec![0u8; 65536];
    file.read_exact_at(&mut got, 4096).unwrap();
    assert!(
        got == bytes[4096..4096 + 65536],
        "the lent file holds the object's bytes"
    );
    let len = bytes.len() as u64;
    assert!(store.lend_resident(obj, 0, len).is_some());
    assert!(store.lend_resident(obj, 1, len).is_none(), "past the end");
    assert!(store.lend_resident(obj, u64::MAX, 2).is_none());
    let other = ObjectRef {
        partition: P,
        object: sluice_objstore::ObjectId(id.0 + 1000),
    };
    assert!(store.lend_resident(other, 0, 1).is_none(), "unknown object");
    // A hole inside the length (never written) is not in memory: not
    // lent.
    let far = 4 * len;
    store
        .write(
            obj,
            &[Segment::new(far, 4096)],
            &bytes[..4096],
            &WriteOptions::default(),
        )
        .unwrap();
    assert!(store.lend_resident(obj, far, 4096).is_some());
    assert!(store.lend_resident(obj, 2 * len, 4096).is_none(), "a hole");
    assert!(store.lend_resident(obj, 0, 4096).is_some());
    // After a removal the object is gone from the cache; the file lent
    // before keeps its bytes.
    store.remove(obj).unwrap();
    assert!(store.lend_resident(obj, 0, 4096).is_none());
    file.read_exact_at(&mut got, 4096).unwrap();
    assert!(got == bytes[4096..4096 + 65536]);

    // A store opened afresh has nothing cached: nothing is lent (that
    // would ask SQLite) until a read has loaded the object.
    let id = store
        .create_and_write(
            P,
            None,
            &[Segment::new(0, bytes.len() as u64)],
            &bytes,
            &WriteOptions::default(),
        )
        .unwrap();
    drop(store);
    let store = ObjectStore::open(dir.path()).unwrap();
    let obj = ObjectRef {
        partition: P,
        object: id,
    };
    assert!(store.lend_resident(obj, 0, 4096).is_none(), "not cached");
    let segs = [Segment::new(0, 4096)];
    let mut out = vec![0u8; 4096];
    assert!(store
        .read_into_nowait(obj, &segs, |_| &mut out[..])
        .unwrap()
        .is_none());
    store.read(obj, &segs, &[]).unwrap();
    assert!(
        store.lend_resident(obj, 0, 4096).is_some(),
        "cached by the read"
    );
}

#[test]
fn read_into_nowait_reads_like_read_into_when_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    let bytes = data();
    let id = store
        .create_and_write(
            P,
            None,
            &[Segment::new(0, bytes.len() as u64)],
            &bytes,
            &WriteOptions::default(),
        )
        .unwrap();
    let obj = ObjectRef {
        partition: P,
        object: id,
    };
    store.read(obj, &[Segment::new(0, 1)], &[]).unwrap();
    // Strided segments, the last one running past the end.
    let segs: Vec<Segment> = (0..60u64)
        .map(|i| Segment::new(i * 4098, 4096))
        .chain([Segment::new(bytes.len() as u64 - 10, 20)])
        .collect();
    let total: u64 = segs.iter().map(|s| s.len).sum();
    let mut out = vec![0xeeu8; total as usize];
    let found = store
        .read_into_nowait(obj, &segs, |_| &mut out[..])
        .unwrap()
        .expect("cached and in memory");
    let expected = store.read(obj, &segs, &[]).unwrap();
    assert_eq!(found.real, expected.real);
    assert_eq!(found.real, total - 10);
    assert!(out == expected.data, "same bytes as read_into");
    // An object with no file reads as zeros without waiting.
    let empty = store.create(P, None, 1, &WriteOptions::default()).unwrap()[0];
    let empty = ObjectRef {
        partition: P,
        object: empty,
    };
    store.read(empty, &[Segment::new(0, 1)], &[]).unwrap();
    let mut out = [1u8; 100];
    let found = store
        .read_into_nowait(empty, &[Segment::new(0, 100)], |_| &mut out[..])
        .unwrap()
        .expect("cached");
    assert_eq!(found.real, 0);
    assert!(out.iter().all(|&b| b == 0));
}
