#![allow(clippy::unwrap_used)]
//! Erasure-coded striped objects against real in-process object servers:
//! a put writes rows of data and Reed-Solomon parity in any order and
//! sizes and reads back as a model says; reads rebuild what lost servers
//! held while at most `parity` pieces are gone, then fail naming the
//! servers; and a ready object refuses in-place writes (it is written
//! whole, so no client crash can leave a row's parity behind its data).

use std::sync::OnceLock;

use proptest::prelude::*;
use sluice_client::obj::Segment;
use sluice_client::striped::{Pattern, Shape, StripedClient, StripedError, StripedWrite};
use sluice_meta::Redundancy;

mod deployment;
use deployment::{bytes, deploy, Deployment, UNIT};

fn model_write(model: &mut Vec<u8>, segments: &[Segment], data: &[u8]) {
    let mut at = 0usize;
    for s in segments.iter().filter(|s| s.length > 0) {
        let end = (s.offset + s.length) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[s.offset as usize..end].copy_from_slice(&data[at..at + s.length as usize]);
        at += s.length as usize;
    }
}

fn whole(len: u64) -> Pattern<'static> {
    Pattern::Contiguous {
        offset: 0,
        length: len,
    }
}

/// Puts `writes` (each a list of segments) as `name` in `shape`; the
/// model of what it holds.
fn put(
    c: &mut StripedClient,
    name: &str,
    shape: &Shape,
    writes: &[Vec<Segment>],
    seed: u64,
) -> Vec<u8> {
    let mut o = c.begin_put(name, shape).unwrap();
    let mut model = Vec::new();
    for (k, segments) in writes.iter().enumerate() {
        let total: u64 = segments.iter().map(|s| s.length).sum();
        let data = bytes(seed * 1000 + k as u64, total);
        c.write(
            &mut o,
            &Pattern::Segments(segments),
            &data,
            &StripedWrite::default(),
        )
        .unwrap();
        model_write(&mut model, segments, &data);
    }
    c.complete_put(&mut o).unwrap();
    model
}

/// Everything `name` holds, and each of `reads`, checked against `model`.
fn check(c: &mut StripedClient, name: &str, model: &[u8], reads: &[Segment]) {
    let mut o = c.open(name).unwrap();
    assert_eq!(o.size(), model.len() as u64);
    let r = c.read(&mut o, &whole(model.len() as u64)).unwrap();
    assert!(r.data == model, "{name}: whole read differs");
    for s in reads {
        let r = c
            .read(
                &mut o,
                &Pattern::Contiguous {
                    offset: s.offset,
                    length: s.length,
                },
            )
            .unwrap();
        let want: Vec<u8> = (s.offset..s.offset + s.length)
            .map(|i| model.get(i as usize).copied().unwrap_or(0))
            .collect();
        assert!(r.data == want, "{name}: read {s:?} differs");
    }
}

fn shared() -> &'static Deployment {
    static SHARED: OnceLock<Deployment> = OnceLock::new();
    SHARED.get_or_init(|| deploy(6))
}

fn segments() -> impl Strategy<Value = Vec<Segment>> {
    prop::collection::vec((0..40 * UNIT, 0..9 * UNIT), 1..4).prop_map(|v| {
        v.into_iter()
            .map(|(offset, length)| Segment { offset, length })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Writes of any offsets, sizes and overlaps, in any order, read
    /// back as the model says, over 2+1, 3+2, 4+2 and 2+4.
    #[test]
    fn erasure_coded_puts_match_a_model(
        code in prop::sample::select(vec![(2u8, 1u8), (3, 2), (4, 2), (2, 4)]),
        writes in prop::collection::vec(segments(), 1..6),
        reads in prop::collection::vec((0..48 * UNIT, 0..10 * UNIT), 1..6),
    ) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = shared();
        let mut c = d.client();
        let name = format!("ec/{n}");
        let shape = Shape::erasure(UNIT, code.0, code.1);
        let model = put(&mut c, &name, &shape, &writes, n);
        let layout = c.stat(&name).unwrap().layout;
        prop_assert_eq!(layout.redundancy, Redundancy::Erasure { data: code.0, parity: code.1 });
        prop_assert_eq!(layout.pieces.len(), usize::from(code.0 + code.1));
        let reads: Vec<Segment> = reads
            .into_iter()
            .map(|(offset, length)| Segment { offset, length })
            .collect();
        check(&mut c, &name, &model, &reads);
        c.remove(&name).unwrap();
    }
}

#[test]
fn reads_rebuild_lost_pieces_until_more_than_the_parity_are_gone() {
    let mut d = deploy(6);
    let mut c = d.client();
    // Ten and a half rows of 4+2, written in pieces that split rows.
    let size = 42 * UNIT + UNIT / 2;
    let writes = vec![
        vec![Segment {
            offset: 0,
            length: 5 * UNIT + 100,
        }],
        vec![Segment {
            offset: 5 * UNIT + 100,
            length: size - 5 * UNIT - 100,
        }],
    ];
    let model = put(&mut c, "four-two", &Shape::erasure(UNIT, 4, 2), &writes, 1);
    let small = put(&mut c, "two-one", &Shape::erasure(UNIT, 2, 1), &writes, 2);
    let layout = c.stat("four-two").unwrap().layout;
    let server_of = |piece: usize| {
        let uri = &layout.pieces[piece].server;
        d.uris.iter().position(|u| u == uri).unwrap()
    };
    let reads: Vec<Segment> = (0..12)
        .map(|k| Segment {
            offset: k * 3 * UNIT + k * 77,
            length: 2 * UNIT + k * 1000,
        })
        .collect();
    // Lose a data piece, then a parity piece and another data piece.
    let lost = [server_of(1), server_of(3)];
    d.servers[lost[0]].take().unwrap().stop().unwrap();
    check(&mut d.client(), "four-two", &model, &reads);
    d.servers[lost[1]].take().unwrap().stop().unwrap();
    check(&mut d.client(), "four-two", &model, &reads);
    // A third loss is one more than 4+2 survives.
    let third = (0..6).find(|i| !lost.contains(&server_of(*i))).unwrap();
    let third = server_of(third);
    d.servers[third].take().unwrap().stop().unwrap();
    let mut c = d.client();
    let mut o = c.open("four-two").unwrap();
    match c.read(&mut o, &whole(size)) {
        Err(e @ StripedError::TooManyLost { .. }) => {
            let text = e.to_string();
            for s in [lost[0], lost[1], third] {
                assert!(text.contains(&d.uris[s]), "{text}");
            }
        }
        other => panic!("{other:?}"),
    }
    // 2+1 over three of the six: readable while one of its servers is up
    // short of all three.
    let small_layout = c.stat("two-one").unwrap().layout;
    let down: usize = small_layout
        .pieces
        .iter()
        .filter(|p| {
            [lost[0], lost[1], third]
                .iter()
                .any(|&s| d.uris[s] == p.server)
        })
        .count();
    let mut o = c.open("two-one").unwrap();
    let r = c.read(&mut o, &whole(size));
    if down <= 1 {
        assert!(r.unwrap().data == small);
    } else {
        assert!(matches!(r, Err(StripedError::TooManyLost { .. })), "{r:?}");
    }
}

#[test]
fn a_ready_erasure_coded_object_refuses_in_place_writes() {
    let d = deploy(3);
    let mut c = d.client();
    let writes = vec![vec![Segment {
        offset: 0,
        length: 6 * UNIT,
    }]];
    let model = put(&mut c, "whole", &Shape::erasure(UNIT, 2, 1), &writes, 3);
    let mut o = c.open("whole").unwrap();
    let e = c
        .write(&mut o, &whole(10), &[9; 10], &StripedWrite::default())
        .unwrap_err();
    assert!(
        matches!(e, StripedError::Invalid { what: "write", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("ec 2+1"), "{e}");
    check(&mut c, "whole", &model, &[]);
    // A new version by a put is how it changes.
    let again = put(&mut c, "whole", &Shape::erasure(UNIT, 2, 1), &writes, 4);
    check(&mut c, "whole", &again, &[]);
}
