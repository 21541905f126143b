#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! `ObjectStore::change_batch`: several data changes with one metadata
//! commit, each still failing alone, atomic to readers, and durable or
//! journaled changes committed as single calls would.

use std::sync::atomic::{AtomicBool, Ordering};

use sluice_objstore::{
    AttrValue, BatchChange, Edit, ObjStoreError, ObjectId, ObjectRef, ObjectStore, PartitionId,
    Segment, StoreOptions, WriteOptions,
};

const P: PartitionId = PartitionId(3);
/// Past the inline limit: objects this long live in files.
const FILE_LEN: u64 = 64 << 10;

fn store() -> (tempfile::TempDir, ObjectStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    (dir, store)
}

/// `count` new objects: the even ones files of [`FILE_LEN`] zeros, the
/// odd ones empty (inline).
fn objects(store: &ObjectStore, count: u32) -> Vec<ObjectRef> {
    let ids = store
        .create(P, None, count, &WriteOptions::default())
        .unwrap();
    ids.into_iter()
        .enumerate()
        .map(|(k, object)| {
            let o = ObjectRef {
                partition: P,
                object,
            };
            if k % 2 == 0 {
                let zeros = vec![0u8; FILE_LEN as usize];
                store
                    .write(
                        o,
                        &[Segment::new(0, FILE_LEN)],
                        &zeros,
                        &WriteOptions::default(),
                    )
                    .unwrap();
            }
            o
        })
        .collect()
}

fn tagged(tag: i64) -> WriteOptions {
    WriteOptions {
        attrs: vec![("tag".to_owned(), AttrValue::Integer(tag))],
        durable: false,
    }
}

fn read(store: &ObjectStore, o: ObjectRef, offset: u64, len: u64) -> (Vec<u8>, Option<i64>) {
    let r = store
        .read(o, &[Segment::new(offset, len)], &["tag"])
        .unwrap();
    let tag = r.attrs.iter().find_map(|(k, v)| match v {
        AttrValue::Integer(t) if k == "tag" => Some(*t),
        _ => None,
    });
    (r.data, tag)
}

#[test]
fn several_changes_to_several_objects_commit_once() {
    let (_dir, store) = store();
    let objs = objects(&store, 4);
    let opts: Vec<WriteOptions> = (0..6).map(tagged).collect();
    let seg_a = [Segment::new(4096, 4)];
    let seg_b = [Segment::new(10, 3), Segment::new(100, 2)];
    let punch = [Segment::new(0, 8192)];
    let seg_c = [Segment::new(0, 4)];
    let changes = [
        BatchChange {
            object: objs[0],
            edit: Edit::Write(&seg_a, b"aaaa"),
            opts: &opts[0],
        },
        BatchChange {
            object: objs[1],
            edit: Edit::Write(&seg_b, b"bbbcc"),
            opts: &opts[1],
        },
        BatchChange {
            object: objs[2],
            edit: Edit::Punch(&punch),
            opts: &opts[2],
        },
        BatchChange {
            object: objs[3],
            edit: Edit::Append(b"xyz"),
            opts: &opts[3],
        },
        // Twice to one object: the second starts where the first ended.
        BatchChange {
            object: objs[3],
            edit: Edit::Append(b"uvw"),
            opts: &opts[4],
        },
        BatchChange {
            object: objs[0],
            edit: Edit::Write(&seg_c, b"dddd"),
            opts: &opts[5],
        },
    ];
    let before = store.commits();
    let outcome = store.change_batch(&changes);
    assert_eq!(
        store.commits() - before,
        1,
        "one transaction for six changes"
    );
    assert_eq!(outcome.commits, 1);
    let done: Vec<_> = outcome.results.into_iter().map(Result::unwrap).collect();
    assert_eq!(done[0].info.length, FILE_LEN);
    assert_eq!(done[1].info.length, 102);
    assert_eq!(done[3].before.length, 0, "first append at 0");
    assert_eq!(done[4].before.length, 3, "second append after the first");
    assert_eq!(done[4].info.length, 6);

    let (data, tag) = read(&store, objs[0], 0, 4);
    assert_eq!((data.as_slice(), tag), (&b"dddd"[..], Some(5)));
    assert_eq!(read(&store, objs[0], 4096, 4).0, b"aaaa");
    let (data, tag) = read(&store, objs[1], 10, 3);
    assert_eq!((data.as_slice(), tag), (&b"bbb"[..], Some(1)));
    assert_eq!(read(&store, objs[1], 100, 2).0, b"cc");
    assert_eq!(read(&store, objs[2], 0, 8).1, Some(2));
    let (data, tag) = read(&store, objs[3], 0, 6);
    assert_eq!((data.as_slice(), tag), (&b"xyzuvw"[..], Some(4)));

    // The same after a reopen: the commit holds every change.
    let dir = _dir;
    drop(store);
    let store = ObjectStore::open(dir.path()).unwrap();
    assert_eq!(read(&store, objs[0], 0, 4).0, b"dddd");
    assert_eq!(read(&store, objs[0], 4096, 4).0, b"aaaa");
    assert_eq!(read(&store, objs[1], 100, 2).0, b"cc");
    let (data, tag) = read(&store, objs[3], 0, 6);
    assert_eq!((data.as_slice(), tag), (&b"xyzuvw"[..], Some(4)));
}

#[test]
fn a_failing_change_fails_alone_and_the_others_apply() {
    let (_dir, store) = store();
    let objs = objects(&store, 2);
    let ghost = ObjectRef {
        partition: P,
        object: ObjectId(u64::MAX - 1),
    };
    let opts = tagged(7);
    let seg = [Segment::new(0, 4)];
    let short = [Segment::new(0, 10)];
    let far = [Segment::new(u64::MAX - 2, 4)];
    let bad_attr = WriteOptions {
        attrs: vec![(String::new(), AttrValue::Integer(1))],
        durable: false,
    };
    let changes = [
        BatchChange {
            object: objs[0],
            edit: Edit::Write(&seg, b"good"),
            opts: &opts,
        },
        // Unknown object: found when its state is loaded.
        BatchChange {
            object: ghost,
            edit: Edit::Write(&seg, b"lost"),
            opts: &opts,
        },
        // Payload shorter than its segments.
        BatchChange {
            object: objs[1],
            edit: Edit::Write(&short, b"four"),
            opts: &opts,
        },
        // Out of range.
        BatchChange {
            object: objs[1],
            edit: Edit::Punch(&far),
            opts: &opts,
        },
        // An empty attribute key.
        BatchChange {
            object: objs[0],
            edit: Edit::Write(&seg, b"nope"),
            opts: &bad_attr,
        },
        BatchChange {
            object: objs[1],
            edit: Edit::Append(b"fine"),
            opts: &opts,
        },
    ];
    let before = store.commits();
    let outcome = store.change_batch(&changes);
    let r = &outcome.results;
    assert!(r[0].is_ok(), "{:?}", r[0]);
    assert!(
        matches!(r[1], Err(ObjStoreError::UnknownObject { .. })),
        "{:?}",
        r[1]
    );
    assert!(
        matches!(r[2], Err(ObjStoreError::PayloadLength { .. })),
        "{:?}",
        r[2]
    );
    assert!(
        matches!(r[3], Err(ObjStoreError::OutOfRange { .. })),
        "{:?}",
        r[3]
    );
    assert!(
        matches!(r[4], Err(ObjStoreError::BadAttributeKey { .. })),
        "{:?}",
        r[4]
    );
    assert!(r[5].is_ok(), "{:?}", r[5]);
    assert_eq!(read(&store, objs[0], 0, 4), (b"good".to_vec(), Some(7)));
    // objs[1] is inline and was empty: only the append landed.
    assert_eq!(store.get_attrs(objs[1], &[]).unwrap().0.length, 4);
    assert_eq!(read(&store, objs[1], 0, 4), (b"fine".to_vec(), Some(7)));
    assert_eq!(outcome.commits, 1);
    assert_eq!(store.commits() - before, 1);
}

#[test]
fn durable_and_journaled_changes_commit_alone_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open_with(dir.path(), StoreOptions::default()).unwrap();
    store.create_partition(P).unwrap();
    let objs = objects(&store, 2);
    // A flush so the file is synced: a durable small write is journaled.
    store.flush_partition(P).unwrap();
    let plain = tagged(1);
    let durable = WriteOptions {
        attrs: vec![("tag".to_owned(), AttrValue::Integer(2))],
        durable: true,
    };
    let seg = [Segment::new(0, 4)];
    let changes = [
        BatchChange {
            object: objs[1],
            edit: Edit::Append(b"one "),
            opts: &plain,
        },
        // A durable small write to a synced file: journaled in its own
        // synced commit, after the change before it committed.
        BatchChange {
            object: objs[0],
            edit: Edit::Write(&seg, b"two "),
            opts: &durable,
        },
        // objs[0] now has journal rows: this one commits alone too, and
        // is journaled after the durable one (a replay keeps it last).
        BatchChange {
            object: objs[0],
            edit: Edit::Write(&seg, b"tri "),
            opts: &plain,
        },
        BatchChange {
            object: objs[1],
            edit: Edit::Append(b"last"),
            opts: &plain,
        },
    ];
    let outcome = store.change_batch(&changes);
    for r in &outcome.results {
        assert!(r.is_ok(), "{r:?}");
    }
    // The plain change before the durable one, the durable one, the
    // journaled one, and the last plain change.
    assert_eq!(outcome.commits, 4);
    assert_eq!(read(&store, objs[0], 0, 4), (b"tri ".to_vec(), Some(1)));
    assert_eq!(read(&store, objs[1], 0, 8).0, b"one last");
    drop(store);
    // Reopening replays the journal in order: the last write wins.
    let store = ObjectStore::open(dir.path()).unwrap();
    assert_eq!(read(&store, objs[0], 0, 4), (b"tri ".to_vec(), Some(1)));
    assert_eq!(read(&store, objs[1], 0, 8).0, b"one last");
}

/// Writers change two objects' bytes and their `tag` together, in
/// batches naming the objects in both orders (and a single write between
/// them); readers check every read's bytes against its tag. A reader
/// that saw new bytes under an old tag (or the reverse) would find them
/// apart; writers taking the two shards in different orders would hang.
#[test]
fn readers_never_see_a_batch_members_data_without_its_attributes() {
    let (_dir, store) = store();
    let objs = objects(&store, 2);
    let stop = AtomicBool::new(false);
    const ROUNDS: i64 = 300;
    std::thread::scope(|s| {
        let mut writers = Vec::new();
        for w in 0..2i64 {
            let (store, objs) = (&store, &objs);
            writers.push(s.spawn(move || {
                let seg = [Segment::new(0, 512)];
                for round in 0..ROUNDS {
                    let tag = round * 2 + w;
                    let opts = tagged(tag);
                    let bytes = vec![(tag % 251) as u8; 512];
                    let (a, b) = if w == 0 {
                        (objs[0], objs[1])
                    } else {
                        (objs[1], objs[0])
                    };
                    let changes = [
                        BatchChange {
                            object: a,
                            edit: Edit::Write(&seg, &bytes),
                            opts: &opts,
                        },
                        BatchChange {
                            object: b,
                            edit: Edit::Write(&seg, &bytes),
                            opts: &opts,
                        },
                    ];
                    for r in store.change_batch(&changes).results {
                        r.unwrap();
                    }
                    if round % 10 == 0 {
                        store.write(a, &seg, &bytes, &opts).unwrap();
                    }
                }
            }));
        }
        let mut readers = Vec::new();
        for _ in 0..2 {
            let (store, objs, stop) = (&store, &objs, &stop);
            readers.push(s.spawn(move || {
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for &o in objs {
                        let (data, tag) = read(store, o, 0, 512);
                        let Some(tag) = tag else {
                            assert!(data.iter().all(|&b| b == 0), "bytes without their tag");
                            continue;
                        };
                        let want = (tag % 251) as u8;
                        assert!(
                            data.iter().all(|&b| b == want),
                            "tag {tag} read with bytes {:?}",
                            &data[..4]
                        );
                        seen += 1;
                    }
                }
                seen
            }));
        }
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let seen: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(seen > 0, "the readers read something");
    });
}

/// A change to an object changed earlier in the same batch starts from
/// that change, however many other objects the batch changes meanwhile
/// (more than the store caches per shard: a state kept in the cache
/// before its commit could be evicted and reloaded without it).
#[test]
fn a_later_change_to_an_object_starts_from_its_earlier_one_in_a_large_batch() {
    let (_dir, store) = store();
    let ids = store
        .create(P, None, 1024, &WriteOptions::default())
        .unwrap();
    let objs: Vec<ObjectRef> = ids
        .into_iter()
        .map(|object| ObjectRef {
            partition: P,
            object,
        })
        .collect();
    let opts = WriteOptions::default();
    let mut changes = vec![BatchChange {
        object: objs[0],
        edit: Edit::Append(b"a"),
        opts: &opts,
    }];
    changes.extend(objs[1..].iter().map(|&object| BatchChange {
        object,
        edit: Edit::Append(b"x"),
        opts: &opts,
    }));
    changes.push(BatchChange {
        object: objs[0],
        edit: Edit::Append(b"b"),
        opts: &opts,
    });
    let outcome = store.change_batch(&changes);
    assert_eq!(outcome.commits, 1);
    let last = outcome.results.last().unwrap().as_ref().unwrap();
    assert_eq!(last.before.length, 1, "appended after the first");
    assert_eq!(read(&store, objs[0], 0, 2).0, b"ab");
    for &o in &objs[1..] {
        assert_eq!(store.get_attrs(o, &[]).unwrap().0.length, 1);
    }
}
