#![allow(clippy::unwrap_used)] // helper functions outside #[test] unwrap too
//! Random scatter/gather writes, appends, punches and reads against an
//! in-memory model of one object (overlaps, holes, past-the-end).

use proptest::prelude::*;
use sluice_objstore::{ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions};

#[derive(Debug, Clone)]
enum Op {
    Write(Vec<(u64, u64)>, u8),
    Append(u64, u8),
    Punch(u64, u64),
    Read(Vec<(u64, u64)>),
}

fn segs() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..6000, 0u64..1500), 0..8)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (segs(), any::<u8>()).prop_map(|(s, b)| Op::Write(s, b)),
        (0u64..3000, any::<u8>()).prop_map(|(n, b)| Op::Append(n, b)),
        (0u64..8000, 0u64..3000).prop_map(|(o, n)| Op::Punch(o, n)),
        segs().prop_map(Op::Read),
    ]
}

/// Bytes whose every position differs, so misplaced bytes show.
fn payload(total: u64, seed: u8) -> Vec<u8> {
    (0..total)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn segment_io_matches_a_byte_vector(ops in prop::collection::vec(op(), 1..24)) {
        let dir = tempfile::tempdir().unwrap();
        let store = ObjectStore::open(dir.path()).unwrap();
        let p = PartitionId(7);
        store.create_partition(p).unwrap();
        let id = store.create(p, None, 1, &WriteOptions::default()).unwrap()[0];
        let obj = ObjectRef { partition: p, object: id };
        let mut model: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                Op::Write(s, seed) => {
                    let segments: Vec<Segment> = s.iter().map(|&(o, l)| Segment::new(o, l)).collect();
                    let total = s.iter().map(|x| x.1).sum();
                    let data = payload(total, seed);
                    store.write(obj, &segments, &data, &WriteOptions::default()).unwrap();
                    let mut at = 0usize;
                    for &(o, l) in &s {
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
                Op::Append(n, seed) => {
                    let data = payload(n, seed);
                    let at = store.append(obj, &data, &WriteOptions::default()).unwrap();
                    prop_assert_eq!(at, model.len() as u64);
                    model.extend_from_slice(&data);
                }
                Op::Punch(o, n) => {
                    store.punch(obj, &[Segment::new(o, n)], &WriteOptions::default()).unwrap();
                    let end = ((o + n) as usize).min(model.len());
                    let start = (o as usize).min(end);
                    model[start..end].fill(0);
                }
                Op::Read(s) => {
                    let segments: Vec<Segment> = s.iter().map(|&(o, l)| Segment::new(o, l)).collect();
                    let got = store.read(obj, &segments, &[]).unwrap();
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
            }
        }
        // Reopened, the store reads the same bytes.
        drop(store);
        let store = ObjectStore::open(dir.path()).unwrap();
        let got = store.read(obj, &[Segment::new(0, model.len() as u64 + 10)], &[]).unwrap();
        prop_assert_eq!(&got.data[..model.len()], &model[..]);
        prop_assert_eq!(got.real, model.len() as u64);
    }
}
