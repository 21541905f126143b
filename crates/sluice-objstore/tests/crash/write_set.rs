//! Kill -9 in the middle of durable writes that set an attribute with
//! their data: a child rewrites one 1 MiB object file again and again,
//! each time all of it with one byte value and the attribute `v` naming
//! that value, and reports each acknowledged write; the parent kills it
//! at a random moment, reopens the store and holds it to one whole
//! change: every byte is the value `v` names, and `v` is at least the
//! last acknowledged one.

use std::path::Path;

use sluice_objstore::{AttrValue, ObjectRef, ObjectStore, Segment, WriteOptions};

use super::{int, objects, set_up, spawn_and_kill, CHILD_ENV};

const SIZE: u64 = 1 << 20;

/// The byte the write numbered `v` leaves everywhere.
fn value_byte(v: i64) -> u8 {
    (v % 251) as u8 + 1
}

fn write_v(store: &ObjectStore, obj: ObjectRef, v: i64) {
    let opts = WriteOptions {
        attrs: vec![("v".into(), AttrValue::Integer(v))],
        durable: true,
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
        write_v(&store, obj, v);
        println!("W {v}");
    }
}

/// Reopens the store: the object is one write whole, at least `acked`.
fn check(dir: &Path, cycle: u64, acked: i64) -> i64 {
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
    if let Some(at) = got.data.iter().position(|&b| b != want) {
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
        write_v(&store, objects(&store)[0], 1);
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
