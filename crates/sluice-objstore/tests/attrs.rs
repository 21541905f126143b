#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Attributes, listing, query and typed errors.

use std::time::Instant;

use sluice_objstore::{
    limits, AttrValue, ObjStoreError, ObjectId, ObjectRef, ObjectStore, PartitionId, QueryTerm,
    Segment, WriteOptions,
};

fn store() -> (tempfile::TempDir, ObjectStore, PartitionId) {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    let p = PartitionId(1);
    store.create_partition(p).unwrap();
    (dir, store, p)
}

fn attrs(list: &[(&str, AttrValue)]) -> Vec<(String, AttrValue)> {
    list.iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

#[test]
fn attributes_ride_on_writes_and_keep_their_types() {
    let (_dir, store, p) = store();
    let opts = WriteOptions {
        attrs: attrs(&[
            ("n", AttrValue::Integer(-5)),
            ("name", AttrValue::Text("hello".into())),
            ("blob", AttrValue::Bytes(vec![0, 1, 2])),
        ]),
        durable: false,
    };
    let id = store
        .create_and_write(p, None, &[Segment::new(0, 6)], b"abcdef", &opts)
        .unwrap();
    let obj = ObjectRef {
        partition: p,
        object: id,
    };
    let got = store
        .read(obj, &[Segment::new(2, 3)], &["name", "missing", "n"])
        .unwrap();
    assert_eq!(got.data, b"cde");
    assert_eq!(got.info.length, 6);
    assert_eq!(
        got.attrs,
        attrs(&[
            ("name", AttrValue::Text("hello".into())),
            ("n", AttrValue::Integer(-5))
        ])
    );
    let (info, all) = store.get_attrs(obj, &[]).unwrap();
    assert_eq!(all.len(), 3);
    assert!(info.created <= info.data_modified && info.data_modified == info.attrs_modified);

    // A plain write moves data-modified only.
    let after = store
        .write(obj, &[Segment::new(0, 1)], b"X", &WriteOptions::default())
        .unwrap();
    assert!(after.data_modified > info.data_modified);
    assert_eq!(after.attrs_modified, info.attrs_modified);
    store
        .set_attrs(obj, &attrs(&[("n", AttrValue::Integer(9))]), false)
        .unwrap();
    let (info2, n) = store.get_attrs(obj, &["n"]).unwrap();
    assert_eq!(n, attrs(&[("n", AttrValue::Integer(9))]));
    assert!(info2.attrs_modified > info.attrs_modified);
}

#[test]
fn bad_input_gets_typed_errors_naming_what_failed() {
    let (_dir, store, p) = store();
    let id = store.create(p, None, 1, &WriteOptions::default()).unwrap()[0];
    let obj = ObjectRef {
        partition: p,
        object: id,
    };
    let ghost = ObjectRef {
        partition: p,
        object: ObjectId(3),
    };

    let e = store.read(ghost, &[Segment::new(0, 1)], &[]).unwrap_err();
    assert!(matches!(e, ObjStoreError::UnknownObject { .. }), "{e}");
    assert_eq!(e.to_string(), "unknown object 0x3 in partition 0x1");
    let e = store
        .create(PartitionId(9), None, 1, &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::UnknownPartition { .. }), "{e}");
    let e = store
        .create(p, Some("nope"), 1, &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::UnknownCollection { .. }), "{e}");
    let e = store.query(p, "nope", &[]).unwrap_err();
    assert!(matches!(e, ObjStoreError::UnknownCollection { .. }), "{e}");

    let big = attrs(&[("t", AttrValue::Text("x".repeat(limits::TEXT + 1)))]);
    let e = store.set_attrs(obj, &big, false).unwrap_err();
    assert!(matches!(e, ObjStoreError::AttributeTooLarge { .. }), "{e}");
    let big = attrs(&[("b", AttrValue::Bytes(vec![0; limits::BYTES + 1]))]);
    let opts = WriteOptions {
        attrs: big,
        durable: false,
    };
    let e = store
        .write(obj, &[Segment::new(0, 1)], b"a", &opts)
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::AttributeTooLarge { .. }), "{e}");
    // Refused whole: neither the data nor the length moved.
    assert_eq!(store.get_attrs(obj, &[]).unwrap().0.length, 0);
    let e = store
        .set_attrs(obj, &attrs(&[("", AttrValue::Integer(1))]), false)
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::BadAttributeKey { .. }), "{e}");

    let e = store
        .write(
            obj,
            &[Segment::new(u64::MAX, 2)],
            b"ab",
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::OutOfRange { .. }), "{e}");
    assert!(e.to_string().contains("object 0x10000"), "{e}");
    let e = store
        .write(obj, &[Segment::new(0, 3)], b"ab", &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::PayloadLength { .. }), "{e}");
    let e = store
        .read(
            obj,
            &[Segment::new(0, limits::READ_BYTES), Segment::new(0, 1)],
            &[],
        )
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::ReadTooLarge { .. }), "{e}");
    let e = store
        .create(p, None, limits::CREATE_COUNT + 1, &WriteOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::CreateCount { .. }), "{e}");
    let e = store
        .create_and_write(
            PartitionId(9),
            None,
            &[Segment::new(0, 1)],
            b"x",
            &WriteOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::UnknownPartition { .. }), "{e}");
    let e = store.create_partition(p).unwrap_err();
    assert!(matches!(e, ObjStoreError::PartitionExists { .. }), "{e}");
}

#[test]
fn list_pages_by_cursor_and_remove_forgets_objects() {
    let (_dir, store, p) = store();
    store.create_collection(p, "c").unwrap();
    let opts = WriteOptions {
        attrs: attrs(&[("k", AttrValue::Integer(1))]),
        durable: false,
    };
    let ids = store.create(p, Some("c"), 5, &opts).unwrap();
    let other = store.create(p, None, 2, &WriteOptions::default()).unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store.list(p, Some("c"), cursor, 2, true).unwrap();
        assert!(page.entries.len() <= 2);
        for e in &page.entries {
            assert_eq!(
                e.attrs.as_deref(),
                Some(&attrs(&[("k", AttrValue::Integer(1))])[..])
            );
        }
        seen.extend(page.entries.iter().map(|e| e.object));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    let all = store.list(p, None, None, 100, false).unwrap();
    assert_eq!(all.entries.len(), 7);
    assert!(all.next.is_none() && all.entries[0].attrs.is_none());

    let obj = ObjectRef {
        partition: p,
        object: ids[0],
    };
    store
        .write(
            obj,
            &[Segment::new(0, 4)],
            b"data",
            &WriteOptions::default(),
        )
        .unwrap();
    store.remove(obj).unwrap();
    assert!(matches!(
        store.read(obj, &[Segment::new(0, 1)], &[]),
        Err(ObjStoreError::UnknownObject { .. })
    ));
    assert_eq!(store.query(p, "c", &[]).unwrap(), ids[1..].to_vec());
    assert!(store.remove(obj).is_err());
    assert_eq!(
        store.list(p, None, None, 100, false).unwrap().entries.len(),
        6
    );
    let _ = other;
}

#[test]
fn query_selects_members_by_ranges() {
    let (_dir, store, p) = store();
    store.create_collection(p, "c").unwrap();
    let mut expect = Vec::new();
    for i in 0..40i64 {
        let opts = WriteOptions {
            attrs: attrs(&[
                ("size", AttrValue::Integer(i)),
                (
                    "tag",
                    AttrValue::Text(if i % 2 == 0 {
                        "even".into()
                    } else {
                        "odd".into()
                    }),
                ),
            ]),
            durable: false,
        };
        let id = store.create(p, Some("c"), 1, &opts).unwrap()[0];
        if (10..=20).contains(&i) && i % 2 == 1 {
            expect.push(id);
        }
    }
    // Not a member: never returned even though it matches.
    let opts = WriteOptions {
        attrs: attrs(&[("size", AttrValue::Integer(15))]),
        durable: false,
    };
    store.create(p, None, 1, &opts).unwrap();
    let terms = [
        QueryTerm {
            key: "size".into(),
            min: Some(AttrValue::Integer(10)),
            max: Some(AttrValue::Integer(20)),
        },
        QueryTerm {
            key: "tag".into(),
            min: Some(AttrValue::Text("odd".into())),
            max: Some(AttrValue::Text("odd".into())),
        },
    ];
    assert_eq!(store.query(p, "c", &terms).unwrap(), expect);
    let open = [QueryTerm {
        key: "size".into(),
        min: Some(AttrValue::Integer(38)),
        max: None,
    }];
    assert_eq!(store.query(p, "c", &open).unwrap().len(), 2);
    // A text bound never matches integers.
    let typed = [QueryTerm {
        key: "size".into(),
        min: Some(AttrValue::Text(String::new())),
        max: None,
    }];
    assert!(store.query(p, "c", &typed).unwrap().is_empty());
}

#[test]
fn query_over_100k_objects_at_1_percent() {
    let (_dir, store, p) = store();
    store.create_collection(p, "big").unwrap();
    let t = Instant::now();
    // 1000 creates of 100 objects; "rank" runs 0..100_000 in id order.
    let mut ids = Vec::new();
    for batch in 0..1000 {
        let opts = WriteOptions {
            attrs: attrs(&[("batch", AttrValue::Integer(batch))]),
            durable: false,
        };
        ids.extend(store.create(p, Some("big"), 100, &opts).unwrap());
    }
    for (rank, &id) in ids.iter().enumerate() {
        if rank % 100 == 0 {
            // Sparse second attribute, to keep the setup quick.
            let obj = ObjectRef {
                partition: p,
                object: id,
            };
            store
                .set_attrs(
                    obj,
                    &attrs(&[("rank", AttrValue::Integer(rank as i64))]),
                    false,
                )
                .unwrap();
        }
    }
    eprintln!("created 100,000 objects in {:?}", t.elapsed());
    let terms = [QueryTerm {
        key: "batch".into(),
        min: Some(AttrValue::Integer(500)),
        max: Some(AttrValue::Integer(509)),
    }];
    let t = Instant::now();
    let got = store.query(p, "big", &terms).unwrap();
    let took = t.elapsed();
    eprintln!(
        "query over 100,000 objects, 1% selectivity: {} hits in {took:?} ({} build)",
        got.len(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    assert_eq!(got, ids[50_000..51_000].to_vec());
}

#[test]
fn readers_never_see_data_without_the_attributes_set_with_it() {
    let (_dir, store, p) = store();
    let id = store.create(p, None, 1, &WriteOptions::default()).unwrap()[0];
    let obj = ObjectRef {
        partition: p,
        object: id,
    };
    let segments = [Segment::new(0, 3000), Segment::new(5000, 3000)];
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..1000u32 {
                let v = (round % 255 + 1) as u8;
                let opts = WriteOptions {
                    attrs: attrs(&[("v", AttrValue::Integer(i64::from(v)))]),
                    durable: false,
                };
                store.write(obj, &segments, &[v; 6000], &opts).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut reads = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let got = store.read(obj, &segments, &["v"]).unwrap();
            let v = match got.attrs.first() {
                Some((_, AttrValue::Integer(v))) => *v as u8,
                _ => 0,
            };
            assert!(
                got.data.iter().all(|&b| b == v),
                "data and attribute v={v} disagree"
            );
            reads += 1;
        }
        eprintln!("{reads} consistent reads during 1000 writes");
    });
}
