#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Random scatter/gather writes, appends, punches and reads against an
//! in-memory model of one object (overlaps, holes, past-the-end), in
//! the default layout and with small objects crossing the inline limit.

use proptest::prelude::*;
use sluice_objstore::{ObjectRef, ObjectStore, PartitionId, Segment, StoreOptions, WriteOptions};

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<(u64, u64)>, u8, bool),
    Append(u64, u8, bool),
    Punch(Vec<(u64, u64)>, bool),
    Read(Vec<(u64, u64)>),
    /// Removes the object and creates a new one with these segments.
    Recreate(Vec<(u64, u64)>, u8, bool),
    /// Drops the store without a flush and opens it again (replaying
    /// its journal).
    Reopen,
}

fn segs() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..6000, 0u64..1500), 0..8)
}

/// Many small segments close together: reads of them are one run of
/// small members, copied out of one read of the run.
fn small_segs() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..20_000, 0u64..24), 1..200)
}

/// A view in file order: each segment at or after the end of the one
/// before (touching it, behind a small hole, or further than a write
/// bridges), some empty.
fn ascending_segs() -> impl Strategy<Value = Vec<(u64, u64)>> {
    let step = prop_oneof![
        3 => 0u64..4,
        1 => 4u64..100,
        1 => Just(70_000u64),
    ];
    prop::collection::vec((step, 0u64..24), 1..200).prop_map(|steps| {
        let mut end = 0;
        steps
            .into_iter()
            .map(|(hole, len)| {
                let offset = end + hole;
                end = offset + len;
                (offset, len)
            })
            .collect()
    })
}

/// Writes and reads of many small segments over an object in its file.
fn small_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (small_segs(), any::<u8>(), any::<bool>()).prop_map(|(s, b, d)| Op::Write(s, b, d)),
        2 => (ascending_segs(), any::<u8>(), any::<bool>()).prop_map(|(s, b, d)| Op::Write(s, b, d)),
        1 => (0u64..30_000, any::<u8>(), any::<bool>()).prop_map(|(n, b, d)| Op::Append(n, b, d)),
        3 => small_segs().prop_map(Op::Read),
        1 => ascending_segs().prop_map(Op::Read),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (segs(), any::<u8>(), any::<bool>()).prop_map(|(s, b, d)| Op::Write(s, b, d)),
        2 => (0u64..3000, any::<u8>(), any::<bool>()).prop_map(|(n, b, d)| Op::Append(n, b, d)),
        2 => (prop::collection::vec((0u64..8000, 0u64..3000), 0..4), any::<bool>())
            .prop_map(|(s, d)| Op::Punch(s, d)),
        3 => segs().prop_map(Op::Read),
        1 => (segs(), any::<u8>(), any::<bool>()).prop_map(|(s, b, d)| Op::Recreate(s, b, d)),
        1 => Just(Op::Reopen),
    ]
}

/// Bytes whose every position differs, so misplaced bytes show.
fn payload(total: u64, seed: u8) -> Vec<u8> {
    (0..total)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn segments(s: &[(u64, u64)]) -> Vec<Segment> {
    s.iter().map(|&(o, l)| Segment::new(o, l)).collect()
}

/// The model's bytes after writing `data` over `s` in list order.
fn model_write(model: &mut Vec<u8>, s: &[(u64, u64)], data: &[u8]) {
    let mut at = 0usize;
    for &(o, l) in s {
        let (o, l) = (o as usize, l as usize);
        if l == 0 {
            // An empty segment writes nothing, even past the end.
            continue;
        }
        if model.len() < o + l {
            model.resize(o + l, 0);
        }
        model[o..o + l].copy_from_slice(&data[at..at + l]);
        at += l;
    }
}

fn opts(durable: bool) -> WriteOptions {
    WriteOptions {
        attrs: Vec::new(),
        durable,
    }
}

/// Runs `ops` on one object of a store opened with `options`, against
/// a byte vector.
fn run(options: StoreOptions, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = ObjectStore::open_with(dir.path(), options).unwrap();
    let p = PartitionId(7);
    store.create_partition(p).unwrap();
    let id = store.create(p, None, 1, &WriteOptions::default()).unwrap()[0];
    let mut obj = ObjectRef {
        partition: p,
        object: id,
    };
    let mut model: Vec<u8> = Vec::new();
    for op in ops {
        match op {
            Op::Write(s, seed, durable) => {
                let data = payload(s.iter().map(|x| x.1).sum(), seed);
                store
                    .write(obj, &segments(&s), &data, &opts(durable))
                    .unwrap();
                model_write(&mut model, &s, &data);
            }
            Op::Append(n, seed, durable) => {
                let data = payload(n, seed);
                let at = store.append(obj, &data, &opts(durable)).unwrap();
                prop_assert_eq!(at, model.len() as u64);
                model.extend_from_slice(&data);
            }
            Op::Punch(s, durable) => {
                store.punch(obj, &segments(&s), &opts(durable)).unwrap();
                for (o, n) in s {
                    let end = ((o + n) as usize).min(model.len());
                    let start = (o as usize).min(end);
                    model[start..end].fill(0);
                }
            }
            Op::Read(s) => {
                let got = store.read(obj, &segments(&s), &[]).unwrap();
                let mut want = Vec::new();
                let mut real = 0u64;
                for &(o, l) in &s {
                    for i in o..o + l {
                        want.push(model.get(i as usize).copied().unwrap_or(0));
                        if (i as usize) < model.len() {
                            real += 1;
                        }
                    }
                }
                prop_assert_eq!(&got.data, &want);
                prop_assert_eq!(got.real, real);
                prop_assert_eq!(got.info.length, model.len() as u64);
            }
            Op::Recreate(s, seed, durable) => {
                store.remove(obj).unwrap();
                prop_assert!(store.read(obj, &[Segment::new(0, 1)], &[]).is_err());
                let data = payload(s.iter().map(|x| x.1).sum(), seed);
                let id = store
                    .create_and_write(p, None, &segments(&s), &data, &opts(durable))
                    .unwrap();
                obj = ObjectRef {
                    partition: p,
                    object: id,
                };
                model.clear();
                model_write(&mut model, &s, &data);
            }
            Op::Reopen => {
                drop(store);
                store = ObjectStore::open_with(dir.path(), options).unwrap();
            }
        }
    }
    // Reopened, the store reads the same bytes.
    drop(store);
    let store = ObjectStore::open_with(dir.path(), options).unwrap();
    let got = store
        .read(obj, &[Segment::new(0, model.len() as u64 + 10)], &[])
        .unwrap();
    prop_assert_eq!(&got.data[..model.len()], &model[..]);
    prop_assert_eq!(got.real, model.len() as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The default layout: objects here stay inline until past 16 KiB.
    #[test]
    fn segment_io_matches_a_byte_vector(ops in prop::collection::vec(op(), 1..24)) {
        run(StoreOptions::default(), ops)?;
    }

    /// Lists of many small segments, most of them in one run: past the
    /// inline limit, so they are read from the object's file.
    #[test]
    fn many_small_segments_match_a_byte_vector(ops in prop::collection::vec(small_op(), 1..16)) {
        run(
            StoreOptions { inline_max: 1024, ..StoreOptions::default() },
            ops,
        )?;
    }

    /// A small inline limit and journal: objects cross from inline to
    /// their file (by writes and appends past the limit), are punched
    /// inline and in files, removed and created anew with data either
    /// side of the limit; durable small changes are journaled, and
    /// reopening without a flush replays the journal.
    #[test]
    fn inline_and_journaled_objects_match_a_byte_vector(ops in prop::collection::vec(op(), 1..32)) {
        run(
            StoreOptions { inline_max: 3000, journal_max: 1024, journal_retire: 8192 },
            ops,
        )?;
    }
}
