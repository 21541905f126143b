#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Several creates made with one store call (`ObjectStore::create_many`,
//! one metadata commit): each is whole or absent on its own, one that
//! fails (before the commit or inside it) fails alone, and the others
//! are there with their data and attributes, also after a reopen.

use sluice_objstore::{
    AttrValue, NewObjects, ObjStoreError, ObjectId, ObjectRef, ObjectStore, PartitionId, Segment,
    WriteOptions,
};

const P: PartitionId = PartitionId(7);

fn opts(tag: i64) -> WriteOptions {
    WriteOptions {
        attrs: vec![
            ("owner".to_owned(), AttrValue::Text("test".to_owned())),
            ("tag".to_owned(), AttrValue::Integer(tag)),
            ("blob".to_owned(), AttrValue::Bytes(vec![tag as u8; 32])),
            // A fourth and fifth: past one statement's four rows.
            ("four".to_owned(), AttrValue::Integer(4)),
            ("tag2".to_owned(), AttrValue::Integer(-tag)),
        ],
        durable: false,
    }
}

fn object(id: ObjectId) -> ObjectRef {
    ObjectRef {
        partition: P,
        object: id,
    }
}

/// The object's user attributes, sorted by key.
fn attrs(store: &ObjectStore, id: ObjectId) -> Vec<(String, AttrValue)> {
    let mut a = store.get_attrs(object(id), &[]).unwrap().1;
    a.sort_by(|x, y| x.0.cmp(&y.0));
    a
}

fn expected_attrs(tag: i64) -> Vec<(String, AttrValue)> {
    let mut a = opts(tag).attrs;
    a.sort_by(|x, y| x.0.cmp(&y.0));
    a
}

#[test]
fn creates_in_one_call_are_each_whole_and_a_bad_one_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    store.create_collection(P, "c").unwrap();
    let data = [0x5au8; 300];
    let seg = [Segment::new(100, 300)];
    let bad = WriteOptions {
        attrs: vec![(String::new(), AttrValue::Integer(1))],
        durable: false,
    };
    let (o0, o1, o2, o3, o4) = (opts(0), opts(1), opts(2), opts(3), opts(4));
    let creates = [
        NewObjects {
            collection: Some("c"),
            count: 1,
            segments: &seg,
            data: &data,
            opts: &o0,
        },
        // Fails before the commit: an empty key.
        NewObjects {
            collection: None,
            count: 1,
            segments: &[],
            data: &[],
            opts: &bad,
        },
        NewObjects {
            collection: None,
            count: 3,
            segments: &[],
            data: &[],
            opts: &o2,
        },
        // Fails before the commit: no such collection.
        NewObjects {
            collection: Some("missing"),
            count: 1,
            segments: &[],
            data: &[],
            opts: &o3,
        },
        NewObjects {
            collection: Some("c"),
            count: 1,
            segments: &[],
            data: &[],
            opts: &o4,
        },
        // Asks for none: made, with no ids.
        NewObjects {
            collection: None,
            count: 0,
            segments: &[],
            data: &[],
            opts: &o1,
        },
    ];
    let made = store.create_many(P, &creates);
    assert_eq!(made.len(), creates.len());
    assert!(
        matches!(made[1], Err(ObjStoreError::BadAttributeKey { .. })),
        "{:?}",
        made[1]
    );
    assert!(
        matches!(made[3], Err(ObjStoreError::UnknownCollection { .. })),
        "{:?}",
        made[3]
    );
    assert_eq!(made[5].as_ref().unwrap(), &Vec::<ObjectId>::new());
    let ids: Vec<Vec<ObjectId>> = [0, 2, 4]
        .iter()
        .map(|&i| made[i].as_ref().unwrap().clone())
        .collect();
    assert_eq!(ids.iter().map(Vec::len).collect::<Vec<_>>(), [1, 3, 1]);
    let all: Vec<ObjectId> = ids.concat();
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "ids increase in order: {all:?}"
    );
    let check = |store: &ObjectStore| {
        let read = store
            .read(object(ids[0][0]), &[Segment::new(0, 400)], &[])
            .unwrap();
        let mut want = vec![0u8; 100];
        want.extend_from_slice(&data);
        assert_eq!(read.data, want);
        assert_eq!(read.info.length, 400);
        assert_eq!(attrs(store, ids[0][0]), expected_attrs(0));
        for &id in &ids[1] {
            assert_eq!(attrs(store, id), expected_attrs(2));
            assert_eq!(store.get_attrs(object(id), &[]).unwrap().0.length, 0);
        }
        assert_eq!(attrs(store, ids[2][0]), expected_attrs(4));
        let members: Vec<ObjectId> = store
            .list(P, Some("c"), None, 100, false)
            .unwrap()
            .entries
            .iter()
            .map(|e| e.object)
            .collect();
        assert_eq!(members, [ids[0][0], ids[2][0]]);
    };
    check(&store);
    drop(store);
    let store = ObjectStore::open(dir.path()).unwrap();
    check(&store);
}

/// The next object id the store will hand out, read from its database
/// while it is closed.
fn next_id(dir: &std::path::Path) -> i64 {
    let db = rusqlite::Connection::open(dir.join("attributes.sqlite")).unwrap();
    db.query_row("SELECT next_object FROM store", [], |r| r.get(0))
        .unwrap()
}

/// Puts a row for object `id` in the database behind the store's back,
/// so that a create given that id fails inside its commit.
fn plant(dir: &std::path::Path, id: i64) {
    let db = rusqlite::Connection::open(dir.join("attributes.sqlite")).unwrap();
    db.execute(
        "INSERT INTO objects (partition, id, length, created, data_modified, attrs_modified)
         VALUES (?1, ?2, 7, 1, 1, 1)",
        [P.0 as i64, id],
    )
    .unwrap();
}

#[test]
fn a_create_failing_inside_the_shared_commit_is_rolled_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    drop(store);
    // The second of three creates gets an id whose row exists already.
    let first = next_id(dir.path());
    plant(dir.path(), first + 1);
    let store = ObjectStore::open(dir.path()).unwrap();
    let data = [9u8; 10];
    let seg = [Segment::new(0, 10)];
    let (o0, o1, o2) = (opts(10), opts(11), opts(12));
    let new = |o| NewObjects {
        collection: None,
        count: 1,
        segments: &seg,
        data: &data,
        opts: o,
    };
    let made = store.create_many(P, &[new(&o0), new(&o1), new(&o2)]);
    assert_eq!(made[0].as_ref().unwrap(), &[ObjectId(first as u64)]);
    assert!(
        matches!(made[1], Err(ObjStoreError::Metadata { .. })),
        "{:?}",
        made[1]
    );
    assert_eq!(made[2].as_ref().unwrap(), &[ObjectId(first as u64 + 2)]);
    let planted = object(ObjectId(first as u64 + 1));
    let check = |store: &ObjectStore| {
        assert_eq!(attrs(store, ObjectId(first as u64)), expected_attrs(10));
        assert_eq!(attrs(store, ObjectId(first as u64 + 2)), expected_attrs(12));
        // The failed create left nothing: the planted row as it was, no
        // attributes, no bytes.
        let (info, user) = store.get_attrs(planted, &[]).unwrap();
        assert_eq!((info.length, info.created), (7, 1));
        assert!(user.is_empty(), "{user:?}");
        let read = store.read(planted, &[Segment::new(0, 7)], &[]).unwrap();
        assert_eq!(read.data, [0u8; 7]);
    };
    check(&store);
    drop(store);
    let store = ObjectStore::open(dir.path()).unwrap();
    check(&store);

    // Alone, a create failing inside its commit leaves nothing either.
    drop(store);
    let next = next_id(dir.path());
    plant(dir.path(), next);
    let store = ObjectStore::open(dir.path()).unwrap();
    let e = store
        .create_and_write(P, None, &seg, &data, &o1)
        .unwrap_err();
    assert!(matches!(e, ObjStoreError::Metadata { .. }), "{e:?}");
    let (info, user) = store.get_attrs(object(ObjectId(next as u64)), &[]).unwrap();
    assert_eq!(info.length, 7);
    assert!(user.is_empty(), "{user:?}");
    // Ids are not reused: the next create gets a fresh one.
    let id = store.create(P, None, 1, &o2).unwrap()[0];
    assert!(id.0 > next as u64, "{id:?} after {next}");
    assert_eq!(attrs(&store, id), expected_attrs(12));
}
