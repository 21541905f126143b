#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! A rewrite inside an object file's length that sets no attribute and
//! is not durable commits no transaction: its data-modified time waits
//! in memory, is seen by every read meanwhile, and reaches the database
//! with the next data change's commit, a flush, or the store's close.

use std::path::Path;

use sluice_objstore::{
    BatchChange, Edit, ObjectInfo, ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions,
};

const P: PartitionId = PartitionId(5);

/// Larger than the inline limit: the object has a file.
const FILE_BYTES: u64 = 64 * 1024;

fn open(dir: &Path) -> ObjectStore {
    ObjectStore::open(dir).unwrap()
}

fn file_object(store: &ObjectStore) -> ObjectRef {
    let data = vec![7u8; FILE_BYTES as usize];
    let id = store
        .create_and_write(
            P,
            None,
            &[Segment::new(0, FILE_BYTES)],
            &data,
            &WriteOptions::default(),
        )
        .unwrap();
    ObjectRef {
        partition: P,
        object: id,
    }
}

/// The object's data-modified time as the database holds it, read
/// through a connection of the test's own.
fn stored_time(dir: &Path, object: ObjectRef) -> i64 {
    let db = rusqlite::Connection::open(dir.join("attributes.sqlite")).unwrap();
    db.query_row(
        "SELECT data_modified FROM objects WHERE partition = ?1 AND id = ?2",
        [object.partition.0 as i64, object.object.0 as i64],
        |r| r.get(0),
    )
    .unwrap()
}

/// Rewrites 8 bytes inside the object (every change's time is later
/// than the one before).
fn rewrite(store: &ObjectStore, object: ObjectRef, opts: &WriteOptions) -> ObjectInfo {
    store
        .write(object, &[Segment::new(100, 8)], b"rewrite!", opts)
        .unwrap()
}

#[test]
fn a_rewrite_commits_nothing_and_every_read_sees_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_partition(P).unwrap();
    let obj = file_object(&store);
    let created = store.get_attrs(obj, &[]).unwrap().0;

    let commits = store.commits();
    let info = rewrite(&store, obj, &WriteOptions::default());
    assert_eq!(store.commits(), commits, "a rewrite made a transaction");
    assert!(info.data_modified > created.data_modified);
    assert_eq!(info.length, FILE_BYTES);
    // Not in the database yet, but every read sees it.
    assert_eq!(stored_time(dir.path(), obj), created.data_modified);
    assert_eq!(store.get_attrs(obj, &[]).unwrap().0, info);
    let read = store.read(obj, &[Segment::new(100, 8)], &[]).unwrap();
    assert_eq!((read.data.as_slice(), read.info), (&b"rewrite!"[..], info));
    let listed = store.list(P, None, None, 10, false).unwrap();
    assert_eq!(listed.entries[0].info, info);

    // Evicted from the cache (more objects read than it holds), the
    // object is loaded from the database with the time laid over.
    let others = store
        .create(P, None, 1000, &WriteOptions::default())
        .unwrap();
    for id in others {
        let other = ObjectRef {
            partition: P,
            object: id,
        };
        store.read(other, &[Segment::new(0, 1)], &[]).unwrap();
    }
    let read = store.read(obj, &[Segment::new(100, 8)], &[]).unwrap();
    assert_eq!(read.info, info);

    // The next data change that commits writes it.
    let other = file_object(&store);
    let commits = store.commits();
    store
        .write(
            other,
            &[Segment::new(FILE_BYTES, 1)],
            b"x",
            &WriteOptions::default(),
        )
        .unwrap();
    assert_eq!(store.commits(), commits + 1, "growing an object commits");
    assert_eq!(stored_time(dir.path(), obj), info.data_modified);

    // A flush writes it.
    let info = rewrite(&store, obj, &WriteOptions::default());
    assert!(stored_time(dir.path(), obj) < info.data_modified);
    store.flush_object(obj).unwrap();
    assert_eq!(stored_time(dir.path(), obj), info.data_modified);

    // A durable rewrite commits as always.
    let commits = store.commits();
    let durable = WriteOptions {
        durable: true,
        ..WriteOptions::default()
    };
    let info = rewrite(&store, obj, &durable);
    assert!(
        store.commits() > commits,
        "a durable rewrite made no commit"
    );
    assert_eq!(stored_time(dir.path(), obj), info.data_modified);

    // (A small durable write is journaled, and so is every change to
    // the object until a flush retires its rows.)
    let commits = store.commits();
    rewrite(&store, obj, &WriteOptions::default());
    assert!(
        store.commits() > commits,
        "a journaled rewrite made no commit"
    );
    store.flush_object(obj).unwrap();

    // Closing the store writes it.
    let info = rewrite(&store, obj, &WriteOptions::default());
    assert!(stored_time(dir.path(), obj) < info.data_modified);
    drop(store);
    assert_eq!(stored_time(dir.path(), obj), info.data_modified);
    let store = open(dir.path());
    assert_eq!(store.get_attrs(obj, &[]).unwrap().0, info);
}

#[test]
fn a_batch_of_rewrites_commits_nothing_but_a_batch_that_grows_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_partition(P).unwrap();
    let (a, b) = (file_object(&store), file_object(&store));
    let opts = WriteOptions::default();
    let seg = [Segment::new(8, 4)];
    let rewrites = [
        BatchChange {
            object: a,
            edit: Edit::Write(&seg, b"aaaa"),
            opts: &opts,
        },
        BatchChange {
            object: b,
            edit: Edit::Write(&seg, b"bbbb"),
            opts: &opts,
        },
    ];
    let commits = store.commits();
    let outcome = store.change_batch(&rewrites);
    assert_eq!((outcome.commits, store.commits()), (0, commits));
    let times: Vec<i64> = outcome
        .results
        .iter()
        .map(|r| r.as_ref().unwrap().info.data_modified)
        .collect();
    assert_eq!(store.get_attrs(b, &[]).unwrap().0.data_modified, times[1]);

    // A rewrite after a change to the same object in one batch waits
    // for that change's commit, which writes the times waiting too.
    let grow = [Segment::new(FILE_BYTES, 4)];
    let changes = [
        BatchChange {
            object: a,
            edit: Edit::Write(&grow, b"more"),
            opts: &opts,
        },
        BatchChange {
            object: a,
            edit: Edit::Write(&seg, b"AAAA"),
            opts: &opts,
        },
    ];
    let outcome = store.change_batch(&changes);
    assert_eq!(outcome.commits, 1);
    let last = outcome.results[1].as_ref().unwrap().info;
    assert_eq!(last.length, FILE_BYTES + 4);
    assert_eq!(stored_time(dir.path(), a), last.data_modified);
    assert_eq!(stored_time(dir.path(), b), times[1]);
}
