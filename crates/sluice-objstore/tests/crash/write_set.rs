//! Kill -9 in the middle of durable writes that set an attribute with
//! their data: a child rewrites one 1 MiB object file again and again,
//! each time all of it with one byte value and the attribute `v` naming
//! that value, and reports each acknowledged write; the parent kills it
//! at a random moment, reopens the store and holds it to one whole
//! change: every byte is the value `v` names, and `v` is at least the
//! last acknowledged one.
//!
//! The second test does the same with writes that are not durable, each
//! followed by a plain rewrite (no attribute) of the whole object with a
//! second byte value: after a kill the object holds one write whole, and
//! a rewrite reported done is never undone by replaying the journal rows
//! of the write before it.

use std::path::Path;

use sluice_objstore::{AttrValue, ObjectRef, ObjectStore, Segment, WriteOptions};

use super::{int, objects, set_up, spawn_and_kill, CHILD_ENV};

const SIZE: u64 = 1 << 20;

/// The byte the write numbered `v` leaves everywhere.
fn value_byte(v: i64) -> u8 {
    (v % 251) as u8 + 1
}

/// The byte the plain rewrite after the write numbered `v` leaves.
fn rewrite_byte(v: i64) -> u8 {
    value_byte(v).wrapping_add(128)
}

fn write_v(store: &ObjectStore, obj: ObjectRef, v: i64, durable: bool) {
    let opts = WriteOptions {
        attrs: vec![("v".into(), AttrValue::Integer(v))],
        durable,
    };
    let data = vec![value_byte(v); SIZE as usize];
    store
        .write(obj, &[Segment::new(0, SIZE)], &data, &opts)
        .unwrap();
}

/// The child: rewrites the first object until killed, printing `W v`
/// after each acknowledged write.
#[test]
fn write_set_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = ObjectStore::open(&dir).unwrap();
    let obj = objects(&store)[0];
    let (_, attrs) = store.get_attrs(obj, &["v"]).unwrap();
    for v in int(&attrs, "v").unwrap_or(0) + 1.. {
        write_v(&store, obj, v, true);
        println!("W {v}");
    }
}

/// The child of the second test: a write setting `v` that is not
/// durable, then a plain rewrite, printing `W v` and `R v` after each.
#[test]
fn write_set_rewrite_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = ObjectStore::open(&dir).unwrap();
    let obj = objects(&store)[0];
    let (_, attrs) = store.get_attrs(obj, &["v"]).unwrap();
    let data = |b: u8| vec![b; SIZE as usize];
    for v in int(&attrs, "v").unwrap_or(0) + 1.. {
        write_v(&store, obj, v, false);
        println!("W {v}");
        store
            .write(
                obj,
                &[Segment::new(0, SIZE)],
                &data(rewrite_byte(v)),
                &WriteOptions::default(),
            )
            .unwrap();
        println!("R {v}");
    }
}

/// Reopens the store: the object is one write whole, at least `acked`.
fn check(dir: &Path, cycle: u64, acked: i64) -> i64 {
    check_with(dir, cycle, acked, None)
}

/// As [`check`]; with `rewritten`, the rewrite after the write that set
/// `v` may have left its bytes anywhere (a plain write is not atomic
/// across a kill), and must have left them everywhere if `rewritten` is
/// `v`: that rewrite was reported done.
fn check_with(dir: &Path, cycle: u64, acked: i64, rewritten: Option<i64>) -> i64 {
    let store = ObjectStore::open(dir).unwrap();
    let obj = objects(&store)[0];
    let (info, attrs) = store.get_attrs(obj, &["v"]).unwrap();
    let v = int(&attrs, "v").unwrap();
    assert!(
        v >= acked,
        "cycle {cycle}: v {v} lost acknowledged write {acked}"
    );
    assert_eq!(info.length, SIZE, "cycle {cycle}");
    let got = store.read(obj, &[Segment::new(0, SIZE)], &[]).unwrap();
    let want = value_byte(v);
    if rewritten == Some(v) {
        let want = rewrite_byte(v);
        if let Some(at) = got.data.iter().position(|&b| b != want) {
            panic!(
                "cycle {cycle}: the rewrite after write {v} was reported done, but byte {at} is {} (the write's is {}): a replay undid it",
                got.data[at],
                value_byte(v)
            );
        }
        return v;
    }
    let rewrite = rewritten.map(|_| rewrite_byte(v));
    if let Some(at) = got
        .data
        .iter()
        .position(|&b| b != want && Some(b) != rewrite)
    {
        let other = got.data[at];
        panic!(
            "cycle {cycle}: v is {v} but byte {at} is {other} (write {}'s): data and attributes of one write were torn apart",
            (1..=v + 1).find(|&w| value_byte(w) == other).unwrap_or(-1)
        );
    }
    v
}

#[test]
fn a_write_and_the_attributes_it_sets_survive_kill_9_as_one_change() {
    let dir = tempfile::tempdir().unwrap();
    set_up(dir.path());
    {
        let store = ObjectStore::open(dir.path()).unwrap();
        write_v(&store, objects(&store)[0], 1, true);
    }
    let mut rng = fastrand::Rng::with_seed(0x5e7);
    let mut acked = 1;
    for cycle in 0..60 {
        let lines = spawn_and_kill(
            dir.path(),
            "write_set::write_set_child",
            'W',
            cycle,
            &mut rng,
        );
        for line in lines {
            if let Some(v) = line.strip_prefix("W ") {
                acked = acked.max(v.parse().unwrap());
            }
        }
        acked = acked.max(check(dir.path(), cycle, acked));
    }
}

#[test]
fn a_write_setting_attributes_and_the_rewrite_after_it_survive_kill_9_in_order() {
    let dir = tempfile::tempdir().unwrap();
    set_up(dir.path());
    {
        let store = ObjectStore::open(dir.path()).unwrap();
        write_v(&store, objects(&store)[0], 1, true);
    }
    let mut rng = fastrand::Rng::with_seed(0x5e8);
    let (mut acked, mut rewritten) = (1, 0);
    for cycle in 0..60 {
        let lines = spawn_and_kill(
            dir.path(),
            "write_set::write_set_rewrite_child",
            'R',
            cycle,
            &mut rng,
        );
        for line in lines {
            if let Some(v) = line.strip_prefix("W ") {
                acked = acked.max(v.parse().unwrap());
            }
            if let Some(v) = line.strip_prefix("R ") {
                rewritten = rewritten.max(v.parse().unwrap());
            }
        }
        acked = acked.max(check_with(dir.path(), cycle, acked, Some(rewritten)));
    }
}
