#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! The store's per-object caches (logical length, mandatory attributes,
//! open data file) stay exact under concurrent writes, appends, punches,
//! attribute sets and removes, with more objects than the cache holds
//! (so entries are evicted and reloaded while others use the shard).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use sluice_objstore::{
    AttrValue, ObjStoreError, ObjectId, ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions,
};

const P: PartitionId = PartitionId(3);

fn open() -> (tempfile::TempDir, ObjectStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ObjectStore::open(dir.path()).unwrap();
    store.create_partition(P).unwrap();
    (dir, store)
}

fn object(id: ObjectId) -> ObjectRef {
    ObjectRef {
        partition: P,
        object: id,
    }
}

/// The byte an append-only object holds at `offset`.
fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// A reader that takes no lock of its own sees an object growing by
/// appends only in whole appends: every byte below `real` is the
/// appended one, every byte past it zero, and `real` never shrinks.
#[test]
fn readers_see_concurrent_appends_whole_and_in_order() {
    let (_dir, store) = open();
    let id = store.create(P, None, 1, &WriteOptions::default()).unwrap()[0];
    let o = object(id);
    const CHUNK: u64 = 3001;
    const CHUNKS: u64 = 200;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            // Set even when an assertion fails, so the readers stop.
            struct Done<'a>(&'a AtomicBool);
            impl Drop for Done<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _done = Done(&done);
            for k in 0..CHUNKS {
                let data: Vec<u8> = (k * CHUNK..(k + 1) * CHUNK).map(pattern).collect();
                let at = store.append(o, &data, &WriteOptions::default()).unwrap();
                assert_eq!(at, k * CHUNK);
            }
        });
        for _ in 0..3 {
            s.spawn(|| {
                let mut last = 0;
                let total = CHUNK * CHUNKS + 4096;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    // The whole range, and a piece straddling the end.
                    let r = store.read(o, &[Segment::new(0, total)], &[]).unwrap();
                    assert!(r.real >= last, "real went from {last} to {}", r.real);
                    assert_eq!(r.real % CHUNK, 0, "a read saw part of an append");
                    assert_eq!(r.real, r.info.length);
                    for (i, &b) in r.data.iter().enumerate() {
                        let want = if (i as u64) < r.real {
                            pattern(i as u64)
                        } else {
                            0
                        };
                        assert_eq!(b, want, "byte {i} with length {}", r.real);
                    }
                    let edge = r.real.saturating_sub(10);
                    let r2 = store.read(o, &[Segment::new(edge, 20)], &[]).unwrap();
                    assert!(r2.real >= r.real - edge, "the length went back");
                    last = r.real;
                    if finished {
                        break;
                    }
                }
            });
        }
    });
    let r = store.read(o, &[Segment::new(0, 1)], &[]).unwrap();
    assert_eq!(r.info.length, CHUNK * CHUNKS);
}

#[derive(Debug, Default)]
struct Model {
    id: Option<ObjectId>,
    bytes: Vec<u8>,
    tag: Option<i64>,
}

/// Threads run random writes, appends, punches, attribute sets, removes
/// and re-creates on 700 objects (more than the cache holds) and check
/// every read against a byte-vector model of the object. Each object's
/// model is locked across the store call and its own update, so the
/// model is exact; the store's cache sees every interleaving of objects
/// sharing a shard.
#[test]
fn cached_state_matches_a_model_under_concurrent_changes() {
    let (dir, store) = open();
    const OBJECTS: usize = 700;
    let ids = store
        .create(P, None, OBJECTS as u32, &WriteOptions::default())
        .unwrap();
    let models: Vec<Mutex<Model>> = ids
        .iter()
        .map(|&id| {
            Mutex::new(Model {
                id: Some(id),
                ..Model::default()
            })
        })
        .collect();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (store, models) = (&store, &models);
            s.spawn(move || {
                let mut rng = fastrand::Rng::with_seed(0x5eed + t);
                for step in 0..1500 {
                    let k = rng.usize(0..OBJECTS);
                    let mut m = models[k].lock().unwrap();
                    let Some(id) = m.id else {
                        let id = store.create(P, None, 1, &WriteOptions::default()).unwrap()[0];
                        *m = Model {
                            id: Some(id),
                            ..Model::default()
                        };
                        continue;
                    };
                    let o = object(id);
                    match rng.u8(0..7) {
                        0 | 1 => {
                            let (off, len) = (rng.u64(0..20_000), rng.u64(1..5000));
                            let data: Vec<u8> = (0..len).map(|_| rng.u8(1..)).collect();
                            let info = store
                                .write(
                                    o,
                                    &[Segment::new(off, len)],
                                    &data,
                                    &WriteOptions::default(),
                                )
                                .unwrap();
                            let end = (off + len) as usize;
                            if m.bytes.len() < end {
                                m.bytes.resize(end, 0);
                            }
                            m.bytes[off as usize..end].copy_from_slice(&data);
                            assert_eq!(info.length, m.bytes.len() as u64);
                        }
                        2 => {
                            let data: Vec<u8> =
                                (0..rng.u64(0..3000)).map(|_| rng.u8(1..)).collect();
                            let at = store.append(o, &data, &WriteOptions::default()).unwrap();
                            assert_eq!(at, m.bytes.len() as u64);
                            m.bytes.extend_from_slice(&data);
                        }
                        3 => {
                            let (off, len) = (rng.u64(0..25_000), rng.u64(0..8000));
                            store
                                .punch(o, &[Segment::new(off, len)], &WriteOptions::default())
                                .unwrap();
                            let from = (off as usize).min(m.bytes.len());
                            let to = ((off + len) as usize).min(m.bytes.len());
                            m.bytes[from..to].fill(0);
                        }
                        4 => {
                            let tag = (step as i64) << 8 | t as i64;
                            store
                                .set_attrs(o, &[("tag".to_owned(), AttrValue::Integer(tag))], false)
                                .unwrap();
                            m.tag = Some(tag);
                        }
                        5 if rng.u8(0..4) == 0 => {
                            store.remove(o).unwrap();
                            m.id = None;
                            let gone = store.read(o, &[Segment::new(0, 1)], &[]);
                            assert!(
                                matches!(gone, Err(ObjStoreError::UnknownObject { .. })),
                                "a removed object still reads: {gone:?}"
                            );
                            continue;
                        }
                        _ => {}
                    }
                    // Read it all back, past the end too, with the tag.
                    let len = m.bytes.len() as u64;
                    let r = store
                        .read(
                            o,
                            &[Segment::new(0, len + 100), Segment::new(len / 2, 10)],
                            &["tag"],
                        )
                        .unwrap();
                    assert_eq!(r.info.length, len, "cached length of {o}");
                    assert_eq!(r.real, len + (len - len / 2).min(10));
                    assert_eq!(&r.data[..len as usize], &m.bytes[..], "bytes of {o}");
                    assert!(r.data[len as usize..len as usize + 100]
                        .iter()
                        .all(|&b| b == 0));
                    let mid = (len / 2) as usize;
                    let want: Vec<u8> = (mid..mid + 10)
                        .map(|i| m.bytes.get(i).copied().unwrap_or(0))
                        .collect();
                    assert_eq!(&r.data[len as usize + 100..], &want[..]);
                    let tag = r
                        .attrs
                        .iter()
                        .find(|(k, _)| k == "tag")
                        .map(|(_, v)| v.clone());
                    assert_eq!(tag, m.tag.map(AttrValue::Integer), "tag of {o}");
                }
            });
        }
    });
    // A fresh store (nothing cached) agrees with what the cached one
    // served.
    drop(store);
    let store = ObjectStore::open(dir.path()).unwrap();
    for m in &models {
        let m = m.lock().unwrap();
        let Some(id) = m.id else { continue };
        let len = m.bytes.len() as u64;
        let r = store
            .read(object(id), &[Segment::new(0, len)], &[])
            .unwrap();
        assert_eq!((r.info.length, &r.data[..]), (len, &m.bytes[..]));
    }
}
