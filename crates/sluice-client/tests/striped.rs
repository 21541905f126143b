#![allow(clippy::unwrap_used)]
//! Striped objects against real in-process object servers (one to four)
//! and the in-memory metadata service: random reads and writes of every
//! DDT shape checked against a byte-vector model (also over a real
//! three-member etcd cluster, its leader killed halfway), one request per server
//! per operation, a server stopped mid-write, a server that never
//! answers, a create race, and fsck after a crash at every step of
//! create and remove.

use sluice_client::Durability;
use std::collections::BTreeMap;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use sluice_client::obj::{ObjOptions, Segment};
use sluice_client::striped::{
    CreateStep, FsckOptions, Pattern, RemoveStep, Shape, StripedClient, StripedError,
    StripedObject, StripedWrite, PIECE_COLLECTION,
};
use sluice_meta::{EntryState, EtcdConfig, EtcdMetaStore, MemoryMetaStore, MetaError, MetaStore};
use sluice_testkit::etcd::EtcdCluster;

mod deployment;
mod relay;
use deployment::{all_entries, bytes, deploy, deploy_with, seg, Deployment, UNIT};
use relay::Relay;

/// The model: the object's bytes up to its size.
fn model_write(model: &mut Vec<u8>, pattern: &Pattern<'_>, data: &[u8]) {
    let mut at = 0usize;
    for s in pattern.segments().filter(|s| s.length > 0) {
        let end = (s.offset + s.length) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[s.offset as usize..end].copy_from_slice(&data[at..at + s.length as usize]);
        at += s.length as usize;
    }
}

fn model_read(model: &[u8], pattern: &Pattern<'_>) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut real = 0;
    for s in pattern.segments() {
        for i in s.offset..s.offset + s.length {
            match model.get(i as usize) {
                Some(b) => {
                    out.push(*b);
                    real += 1;
                }
                None => out.push(0),
            }
        }
    }
    (out, real)
}

/// A request's shape, owned (the pattern borrows its segments).
#[derive(Debug, Clone)]
enum Access {
    Contiguous(u64, u64),
    Segments(Vec<Segment>),
    Strided(u64, u64, u64, u64),
}

impl Access {
    fn pattern(&self) -> Pattern<'_> {
        match *self {
            Self::Contiguous(offset, length) => Pattern::Contiguous { offset, length },
            Self::Segments(ref list) => Pattern::Segments(list),
            Self::Strided(offset, stride, length, count) => Pattern::Strided {
                offset,
                stride,
                length,
                count,
            },
        }
    }
}

mod model {
    use proptest::prelude::*;
    use proptest::test_runner::TestRunner;

    use super::*;

    /// Servers shared by every case (starting four per case would cost
    /// more than the cases); each case makes its own object.
    fn shared() -> &'static Deployment {
        static SHARED: OnceLock<Deployment> = OnceLock::new();
        SHARED.get_or_init(|| deploy(4))
    }

    fn shape() -> impl Strategy<Value = Access> {
        // Offsets over 16 stripe units, lengths across several.
        let span = 16 * UNIT;
        prop_oneof![
            (0..span, 0..5 * UNIT).prop_map(|(o, l)| Access::Contiguous(o, l)),
            prop::collection::vec((0..span, 0..2 * UNIT), 0..6)
                .prop_map(|v| Access::Segments(v.into_iter().map(|(o, l)| seg(o, l)).collect())),
            (0..span, 1..3 * UNIT, 1..UNIT, 0u64..8)
                .prop_map(|(o, stride, l, n)| { Access::Strided(o, stride.max(l), l, n) }),
        ]
    }

    /// Reads and writes of every shape over `width` servers read back as
    /// the model says, bytes past the size as zeros not counted real; a
    /// fresh handle sees the same.
    fn check_against_model(
        d: &Deployment,
        width: usize,
        copies: u8,
        ops: &[(bool, Access)],
    ) -> Result<(), TestCaseError> {
        let mut client = d.client();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("model/{n}");
        let shape = Shape::replicated(UNIT, width, copies);
        let mut object = client.create(&name, &shape).unwrap();
        prop_assert_eq!(object.layout().pieces.len(), width * usize::from(copies));
        prop_assert_eq!(object.layout().columns(), width);
        let mut model = Vec::new();
        for (k, (write, shape)) in ops.iter().enumerate() {
            let pattern = shape.pattern();
            if *write {
                let data = bytes(n * 100 + k as u64, pattern.total().unwrap());
                client
                    .write(&mut object, &pattern, &data, &StripedWrite::default())
                    .unwrap();
                model_write(&mut model, &pattern, &data);
                prop_assert_eq!(object.size(), model.len() as u64);
            } else {
                let r = client.read(&mut object, &pattern).unwrap();
                let (want, real) = model_read(&model, &pattern);
                prop_assert_eq!(r.real_bytes, real, "op {} {:?}", k, shape);
                prop_assert!(r.data == want, "op {} {:?}: data differs", k, shape);
            }
        }
        // Everything, through a handle opened afresh by another client.
        let mut other = d.client();
        let mut fresh = other.open(&name).unwrap();
        prop_assert_eq!(fresh.size(), model.len() as u64);
        let all = Pattern::Contiguous {
            offset: 0,
            length: model.len() as u64 + UNIT,
        };
        let r = other.read(&mut fresh, &all).unwrap();
        prop_assert_eq!(r.real_bytes, model.len() as u64);
        prop_assert!(r.data == model_read(&model, &all).0);
        client.remove(&name).unwrap();
        Ok(())
    }

    /// Width, copies (at most the width, so each copy of a column is on
    /// a server of its own), and the operations.
    fn case() -> impl Strategy<Value = (usize, u8, Vec<(bool, Access)>)> {
        (1usize..=4)
            .prop_flat_map(|width| (Just(width), 1..=(width.min(3) as u8)))
            .prop_flat_map(|(width, copies)| {
                (
                    Just(width),
                    Just(copies),
                    prop::collection::vec((any::<bool>(), shape()), 1..12),
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn striped_io_matches_a_model((width, copies, ops) in case()) {
            check_against_model(shared(), width, copies, &ops)?;
        }
    }

    /// The same over a three-member etcd cluster: 16 cases, then its
    /// leader is killed, then 16 more on the two members left, through
    /// the same clients' store (which must fail over without an error).
    #[test]
    fn striped_io_matches_a_model_over_etcd_through_a_leader_kill() {
        let Some(mut cluster) = EtcdCluster::start_or_skip(3) else {
            return;
        };
        let mut config = EtcdConfig::new(cluster.endpoints());
        config.prefix = "/striped-model/".to_owned();
        let meta = EtcdMetaStore::connect(config).expect("connect to etcd");
        let d = deploy_with(4, Arc::new(meta));
        let run = |d: &Deployment| {
            let mut runner = TestRunner::new(ProptestConfig {
                cases: 16,
                // A runner outside `proptest!` has no source file to
                // record failing cases beside; the panic prints the case.
                failure_persistence: None,
                ..ProptestConfig::default()
            });
            runner
                .run(&case(), |(width, copies, ops)| {
                    check_against_model(d, width, copies, &ops)
                })
                .unwrap();
        };
        run(&d);
        let leader = cluster.leader().expect("the cluster has a leader");
        cluster.kill(leader);
        run(&d);
        // Every object was removed by its case; the names are gone.
        assert!(all_entries(&*d.meta, "").is_empty());
    }
}

/// Waits (briefly: a request is counted just after its reply is sent)
/// until server `i` has answered `want` writes, and asserts it is exactly
/// that many.
fn assert_writes(d: &Deployment, i: usize, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while d.writes_on(i) < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(d.writes_on(i), want, "writes answered by server {i}");
}

#[test]
fn each_server_gets_one_request_per_operation() {
    let d = deploy(4);
    let mut c = d.client();
    let mut o = c.create("one", &Shape::striped(UNIT, 4)).unwrap();
    // 16 units from the middle of one: four pieces of each server's
    // object, contiguous there.
    let contiguous = Pattern::Contiguous {
        offset: UNIT / 2,
        length: 16 * UNIT,
    };
    let data = bytes(1, 16 * UNIT);
    c.write(&mut o, &contiguous, &data, &StripedWrite::default())
        .unwrap();
    for i in 0..4 {
        assert_writes(&d, i, 1);
    }
    // Every third unit: 12 units over 4 servers, not contiguous in any
    // server's object (3 pieces each, one request).
    let strided = Pattern::Strided {
        offset: 0,
        stride: 3 * UNIT,
        length: UNIT,
        count: 12,
    };
    let more = bytes(2, 12 * UNIT);
    c.write(&mut o, &strided, &more, &StripedWrite::default())
        .unwrap();
    for i in 0..4 {
        assert_writes(&d, i, 2);
    }
    // Size and attributes went to the metadata once, after the data.
    let set: BTreeMap<String, Vec<u8>> = [("kind".to_owned(), b"log".to_vec())].into();
    let options = StripedWrite {
        set_attrs: set.clone(),
        ..StripedWrite::default()
    };
    let rev = o.entry().revision;
    let list = [seg(40 * UNIT, 10)];
    c.write(&mut o, &Pattern::Segments(&list), &bytes(3, 10), &options)
        .unwrap();
    assert_eq!(o.size(), 40 * UNIT + 10);
    let e = c.stat("one").unwrap();
    assert_eq!((e.size, &e.attrs), (40 * UNIT + 10, &set));
    assert!(e.revision > rev);
    // A write inside the size with no attributes leaves the entry alone.
    let rev = e.revision;
    c.write(&mut o, &contiguous, &data, &StripedWrite::default())
        .unwrap();
    assert_eq!(c.stat("one").unwrap().revision, rev);
}

#[test]
fn placement_starts_round_robin_and_fails_clearly() {
    let d = deploy(4);
    let mut c = d.client();
    let mut first = Vec::new();
    for k in 0..4 {
        let o = c
            .create(&format!("small/{k}"), &Shape::striped(UNIT, 1))
            .unwrap();
        first.push(o.layout().pieces[0].server.clone());
    }
    first.sort();
    let mut all = d.uris.clone();
    all.sort();
    assert_eq!(first, all, "four one-server objects land on four servers");
    // Each object's pieces are on distinct servers, in ring order.
    let o = c.create("wide", &Shape::striped(2 * UNIT, 3)).unwrap();
    let at: Vec<usize> = o
        .layout()
        .pieces
        .iter()
        .map(|p| d.uris.iter().position(|u| *u == p.server).unwrap())
        .collect();
    assert_eq!(at, [at[0], (at[0] + 1) % 4, (at[0] + 2) % 4]);
    // Names are listable by prefix.
    let names: Vec<String> = all_entries(&*d.meta, "small/")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["small/0", "small/1", "small/2", "small/3"]);
    // Refusals.
    match c.create("wide", &Shape::striped(UNIT, 1)) {
        Err(StripedError::Meta {
            source: MetaError::Exists { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    match c.create("x", &Shape::striped(UNIT, 5)) {
        Err(StripedError::TooFewServers { wanted, have, .. }) => assert_eq!((wanted, have), (5, 4)),
        other => panic!("{other:?}"),
    }
    match c.create("x", &Shape::striped(1000, 2)) {
        Err(StripedError::Meta {
            source: MetaError::Invalid { .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let mut wide = c.open("wide").unwrap();
    let e = c
        .write(
            &mut wide,
            &Pattern::Contiguous {
                offset: 0,
                length: 4,
            },
            b"abc",
            &StripedWrite::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("3 data bytes"), "{e}");
    let e = c
        .read(&mut wide, &Pattern::Segments(&[seg(u64::MAX, 2)]))
        .unwrap_err();
    assert!(matches!(e, StripedError::Plan { .. }), "{e}");
    // A refused create left nothing behind (the bad stripe unit's pieces
    // were made, then removed).
    d.assert_consistent();
    assert!(matches!(
        d.meta.remove_server(&d.uris[0]),
        Err(MetaError::ServerInUse { .. })
    ));
}

/// A handle's read of stripe unit `k` alone.
fn unit(k: u64) -> Pattern<'static> {
    Pattern::Contiguous {
        offset: k * UNIT,
        length: UNIT,
    }
}

#[test]
fn a_server_stopped_mid_write_fails_its_stripes_by_name() {
    let mut d = deploy(3);
    let mut c = d.client();
    let mut o = c.create("victim", &Shape::striped(UNIT, 3)).unwrap();
    let whole = Pattern::Contiguous {
        offset: 0,
        length: 12 * UNIT,
    };
    let first = bytes(100, 12 * UNIT);
    c.write(&mut o, &whole, &first, &StripedWrite::default())
        .unwrap();
    let piece_of = |k: u64| (k % 3) as usize;
    let down = o.layout().pieces[1].server.clone();
    let down_index = d.uris.iter().position(|u| *u == down).unwrap();

    // Write in a loop on another thread; stop the server under it.
    let writer = std::thread::spawn(move || {
        let mut model = first;
        let start = Instant::now();
        for round in 0u64.. {
            let data = bytes(200 + round, 12 * UNIT);
            match c.write(&mut o, &whole, &data, &StripedWrite::default()) {
                Ok(()) => model = data,
                Err(e) => {
                    // The servers still up took their part of the write.
                    for k in 0..12 {
                        if piece_of(k) != 1 {
                            let r = (k * UNIT) as usize..((k + 1) * UNIT) as usize;
                            model[r.clone()].copy_from_slice(&data[r]);
                        }
                    }
                    return (c, o, model, e);
                }
            }
            assert!(start.elapsed() < Duration::from_secs(60), "never failed");
        }
        unreachable!()
    });
    std::thread::sleep(Duration::from_millis(100));
    d.servers[down_index].take().unwrap().stop().unwrap();
    let (mut c, mut o, model, e) = writer.join().unwrap();
    match &e {
        StripedError::Piece { server, piece, .. } => assert_eq!((server, *piece), (&down, 1)),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains(&down), "{e}");
    // Later reads: the live servers' stripes hold exactly what was
    // written; the dead server's fail, naming it, and promptly.
    for k in 0..12 {
        let started = Instant::now();
        let r = c.read(&mut o, &unit(k));
        assert!(started.elapsed() < Duration::from_secs(10));
        if piece_of(k) == 1 {
            let e = r.unwrap_err();
            assert!(e.to_string().contains(&down), "unit {k}: {e}");
        } else {
            let r = r.unwrap();
            let range = (k * UNIT) as usize..((k + 1) * UNIT) as usize;
            assert!(r.data == model[range], "unit {k} holds wrong data");
        }
    }
    // A read across every server fails too, never with zeros in place.
    let e = c.read(&mut o, &whole).unwrap_err();
    assert!(e.to_string().contains(&down), "{e}");
    // A write past the end that fails leaves the size alone, so what the
    // live servers took of it is never read back.
    let past = Pattern::Contiguous {
        offset: 12 * UNIT,
        length: 3 * UNIT,
    };
    let e = c
        .write(
            &mut o,
            &past,
            &bytes(999, 3 * UNIT),
            &StripedWrite::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains(&down), "{e}");
    assert_eq!(c.stat("victim").unwrap().size, 12 * UNIT);
    let r = c.read(&mut o, &unit(12)).unwrap();
    assert_eq!(r.real_bytes, 0);
    assert!(r.data.iter().all(|&b| b == 0));
}

#[test]
fn a_server_that_never_answers_fails_by_name_within_the_timeout() {
    // Accepts connections and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("sluice://{}", silent.local_addr().unwrap());
    let meta = Arc::new(MemoryMetaStore::new());
    meta.add_server(&uri).unwrap();
    let options = ObjOptions {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Some(Duration::from_millis(500)),
        ..ObjOptions::default()
    };
    let mut c = StripedClient::new(meta.clone(), options);
    let started = Instant::now();
    let e = c.create("x", &Shape::striped(UNIT, 1)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    match &e {
        StripedError::Piece { server, .. } => assert_eq!(*server, uri),
        other => panic!("{other}"),
    }
    assert!(all_entries(&*meta, "").is_empty());
}

#[test]
fn concurrent_creates_of_one_name_have_one_winner_and_no_orphans() {
    let d = deploy(3);
    let start = Barrier::new(6);
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let (d, start) = (&d, &start);
                s.spawn(move || {
                    let mut c = d.client();
                    start.wait();
                    match c.create("race", &Shape::striped(UNIT, 2)) {
                        Ok(_) => 1,
                        Err(StripedError::Meta {
                            source: MetaError::Exists { .. },
                            ..
                        }) => 0,
                        Err(e) => panic!("{e}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(wins, 1);
    // Losers removed the pieces they made.
    d.assert_consistent();
    let report = d
        .client()
        .fsck(&FsckOptions {
            grace: Duration::ZERO,
        })
        .unwrap();
    assert!(report.is_clean(), "{report:?}");
}

/// Writes a recognisable unit to `o` so that data survives or not as
/// the step says.
fn fill(c: &mut StripedClient, o: &mut StripedObject) -> Vec<u8> {
    let data = bytes(7, 3 * UNIT);
    let p = Pattern::Contiguous {
        offset: 0,
        length: 3 * UNIT,
    };
    c.write(o, &p, &data, &StripedWrite::default()).unwrap();
    data
}

const NOW: FsckOptions = FsckOptions {
    grace: Duration::ZERO,
};

#[test]
fn fsck_after_a_crash_at_each_create_step() {
    let d = deploy(3);
    let mut c = d.client();
    // Unrelated objects, in the pieces' collection unmarked and
    // elsewhere, are never touched.
    let mut plain = d.obj_client(0);
    let unrelated = plain
        .create(PIECE_COLLECTION, 1, Durability::Buffered)
        .unwrap()[0];
    let elsewhere = plain.create("other", 1, Durability::Buffered).unwrap()[0];

    // Crash after the pieces: orphans, which a grace period protects
    // (a create may still be running) and fsck then removes.
    let o = c
        .create_until("after-pieces", &Shape::striped(UNIT, 3), CreateStep::Pieces)
        .unwrap();
    assert!(matches!(
        c.stat("after-pieces"),
        Err(StripedError::Meta {
            source: MetaError::NotFound { .. },
            ..
        })
    ));
    let report = c.fsck(&FsckOptions::default()).unwrap();
    assert!(report.orphans.is_empty(), "{report:?}");
    let report = c.fsck(&NOW).unwrap();
    let mut removed: Vec<u64> = report.orphans.iter().map(|o| o.piece.object).collect();
    let mut made: Vec<u64> = o.layout().pieces.iter().map(|p| p.object).collect();
    removed.sort_unstable();
    made.sort_unstable();
    assert_eq!(removed, made);
    assert!(report.orphans.iter().all(|o| o.of == "after-pieces"));
    assert!(report.failures.is_empty(), "{report:?}");

    // Crash after the entry: Creating with every piece there; fsck makes
    // it ready, and it then works.
    c.create_until("after-entry", &Shape::striped(UNIT, 3), CreateStep::Entry)
        .unwrap();
    assert!(matches!(
        c.open("after-entry"),
        Err(StripedError::NotReady {
            state: EntryState::Creating,
            ..
        })
    ));
    let report = c.fsck(&NOW).unwrap();
    assert_eq!(report.finished, ["after-entry"]);
    let mut o = c.open("after-entry").unwrap();
    let data = fill(&mut c, &mut o);
    let r = c.read(&mut o, &unit(1)).unwrap();
    assert!(r.data == data[UNIT as usize..2 * UNIT as usize]);

    // Crash after the entry with a piece lost meanwhile: undone.
    let o = c
        .create_until("lost", &Shape::striped(UNIT, 2), CreateStep::Entry)
        .unwrap();
    let gone = &o.layout().pieces[1];
    let at = d.uris.iter().position(|u| *u == gone.server).unwrap();
    d.obj_client(at)
        .remove(gone.object, Durability::Buffered)
        .unwrap();
    let report = c.fsck(&NOW).unwrap();
    assert_eq!(report.undone, ["lost"]);

    // A complete create is left alone.
    c.create_until("complete", &Shape::striped(UNIT, 3), CreateStep::Ready)
        .unwrap();
    let report = c.fsck(&NOW).unwrap();
    assert!(report.is_clean(), "{report:?}");
    d.assert_consistent();
    assert_eq!(
        all_entries(&*d.meta, "")
            .into_iter()
            .map(|e| e.name)
            .collect::<Vec<_>>(),
        ["after-entry", "complete"]
    );
    assert!(plain.stat(unrelated).is_ok());
    assert!(plain.stat(elsewhere).is_ok());
}

#[test]
fn fsck_after_a_crash_at_each_remove_step() {
    let d = deploy(3);
    let mut c = d.client();
    for (k, step) in [
        RemoveStep::Removing,
        RemoveStep::Pieces,
        RemoveStep::Deleted,
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("rm/{k}");
        let mut o = c.create(&name, &Shape::striped(UNIT, 3)).unwrap();
        fill(&mut c, &mut o);
        c.remove_until(&name, step).unwrap();
        if step < RemoveStep::Deleted {
            // The name stays taken, and unusable, until fsck finishes.
            let e = c.stat(&name).unwrap();
            assert_eq!(e.state, EntryState::Removing);
            assert!(matches!(
                c.open(&name),
                Err(StripedError::NotReady {
                    state: EntryState::Removing,
                    ..
                })
            ));
            assert!(c.create(&name, &Shape::striped(UNIT, 1)).is_err());
        }
        let report = c.fsck(&NOW).unwrap();
        if step < RemoveStep::Deleted {
            assert_eq!(report.removed, std::slice::from_ref(&name));
        } else {
            assert!(report.is_clean(), "{report:?}");
        }
        assert!(c.stat(&name).is_err());
        d.assert_consistent();
        for i in 0..3 {
            assert!(d.pieces_on(i).is_empty(), "pieces left on server {i}");
        }
        // The name is free again.
        c.create(&name, &Shape::striped(UNIT, 2)).unwrap();
        c.remove(&name).unwrap();
    }
    d.meta.remove_server(&d.uris[0]).unwrap();
}

#[test]
fn reads_past_the_size_are_zeros_and_see_other_writers() {
    let d = deploy(2);
    let mut a = d.client();
    let mut b = d.client();
    let mut oa = a.create("shared", &Shape::striped(UNIT, 2)).unwrap();
    let mut ob = b.open("shared").unwrap();
    let data = bytes(9, UNIT + 100);
    let p = Pattern::Contiguous {
        offset: UNIT - 50,
        length: UNIT + 100,
    };
    a.write(&mut oa, &p, &data, &StripedWrite::default())
        .unwrap();
    // b's handle saw size 0; a read past it asks the metadata again.
    assert_eq!(ob.size(), 0);
    let tail = Pattern::Segments(&[seg(2 * UNIT + 40, 20), seg(UNIT - 60, 20)]);
    let r = b.read(&mut ob, &tail).unwrap();
    assert_eq!(ob.size(), 2 * UNIT + 50);
    // Below the size: 10 bytes of the first segment, all of the second
    // (its first 10 never written, so zeros, but real).
    assert_eq!(r.real_bytes, 10 + 20);
    let mut want = vec![0u8; 40];
    want[..10].copy_from_slice(&data[UNIT as usize + 90..]);
    want[30..].copy_from_slice(&data[..10]);
    assert_eq!(r.data, want);
    b.flush(&ob).unwrap();
    b.remove("shared").unwrap();
    assert!(matches!(
        a.write(&mut oa, &p, &data, &StripedWrite::default()),
        Err(StripedError::Piece { .. })
    ));
}

#[test]
fn a_hung_server_fails_by_name_within_the_request_timeout() {
    let d = deploy(2);
    let r = Relay::start(d.servers[1].as_ref().unwrap().obj_addr.unwrap());
    // A deployment of server 0 and server 1 behind the relay.
    let meta = Arc::new(MemoryMetaStore::new());
    meta.add_server(&d.uris[0]).unwrap();
    meta.add_server(&r.uri).unwrap();
    let timeout = Duration::from_millis(500);
    let options = ObjOptions {
        connect_timeout: timeout,
        request_timeout: Some(timeout),
        ..ObjOptions::default()
    };
    let mut c = StripedClient::new(meta, options);
    let mut o = c.create("slow", &Shape::striped(UNIT, 2)).unwrap();
    let hung = 1 - o
        .layout()
        .pieces
        .iter()
        .position(|p| p.server == d.uris[0])
        .unwrap();
    assert_eq!(o.layout().pieces[hung].server, r.uri);
    let whole = Pattern::Contiguous {
        offset: 0,
        length: 4 * UNIT,
    };
    let data = bytes(5, 4 * UNIT);
    c.write(&mut o, &whole, &data, &StripedWrite::default())
        .unwrap();
    r.freeze();
    for pattern in [whole, unit(hung as u64)] {
        let started = Instant::now();
        let e = c.read(&mut o, &pattern).unwrap_err();
        assert!(started.elapsed() < timeout * 4, "{:?}", started.elapsed());
        match &e {
            StripedError::Piece { server, piece, .. } => {
                assert_eq!((server, *piece), (&r.uri, hung))
            }
            other => panic!("{other}"),
        }
    }
    // The other server's stripes still read right.
    let live = unit(1 - hung as u64);
    let got = c.read(&mut o, &live).unwrap();
    let k = (1 - hung) * UNIT as usize;
    assert!(got.data == data[k..k + UNIT as usize]);
}
