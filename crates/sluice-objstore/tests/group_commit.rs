#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Changes committed together by the group committer: each succeeds or
//! fails on its own (a failing change does not undo or fail the others
//! in its group), and what succeeded is there after a reopen.

use std::sync::Barrier;

use sluice_objstore::{
    AttrValue, ObjStoreError, ObjectId, ObjectRef, ObjectStore, PartitionId, WriteOptions,
};

const P: PartitionId = PartitionId(5);

#[test]
fn concurrent_changes_fail_alone_and_the_rest_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    store.create_collection(P, "real").unwrap();
    const THREADS: usize = 16;
    const EACH: usize = 40;
    let start = Barrier::new(THREADS);
    let made: Vec<Vec<(ObjectId, i64)>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, start) = (&store, &start);
                s.spawn(move || {
                    start.wait();
                    let mut made = Vec::new();
                    for k in 0..EACH {
                        let tag = (t * EACH + k) as i64;
                        let opts = WriteOptions {
                            attrs: vec![("tag".to_owned(), AttrValue::Integer(tag))],
                            durable: k % 5 == 0,
                        };
                        match k % 3 {
                            // Fails: no such collection.
                            0 => {
                                let e = store.create(P, Some("missing"), 1, &opts).unwrap_err();
                                assert!(
                                    matches!(e, ObjStoreError::UnknownCollection { .. }),
                                    "{e:?}"
                                );
                            }
                            // Fails: no such object.
                            1 => {
                                let ghost = ObjectRef {
                                    partition: P,
                                    object: ObjectId(u64::MAX - tag as u64),
                                };
                                let e = store.remove(ghost).unwrap_err();
                                assert!(matches!(e, ObjStoreError::UnknownObject { .. }), "{e:?}");
                            }
                            _ => {
                                let id = store.create(P, Some("real"), 1, &opts).unwrap()[0];
                                made.push((id, tag));
                            }
                        }
                    }
                    made
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let made: Vec<(ObjectId, i64)> = made.into_iter().flatten().collect();
    let check = |store: &ObjectStore| {
        let listed = store.list(P, Some("real"), None, usize::MAX, true).unwrap();
        assert_eq!(listed.entries.len(), made.len());
        for &(id, tag) in &made {
            let (_, attrs) = store
                .get_attrs(
                    ObjectRef {
                        partition: P,
                        object: id,
                    },
                    &["tag"],
                )
                .unwrap();
            assert_eq!(attrs, vec![("tag".to_owned(), AttrValue::Integer(tag))]);
        }
        let mut ids: Vec<ObjectId> = made.iter().map(|m| m.0).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), made.len(), "an id was handed out twice");
        // The failed creates made no collection and no object.
        assert!(matches!(
            store.list(P, Some("missing"), None, 10, false),
            Err(ObjStoreError::UnknownCollection { .. })
        ));
        assert_eq!(
            store
                .list(P, None, None, usize::MAX, false)
                .unwrap()
                .entries
                .len(),
            made.len()
        );
    };
    check(&store);
    drop(store);
    check(&ObjectStore::open(dir.path()).unwrap());
}
