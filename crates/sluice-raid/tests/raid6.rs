//! RAID 6 over memory members: two failures survived and never a third,
//! rebuilding one member and then a second (also with another member
//! failing during the rebuild), and scrub finding and repairing a
//! corrupted P or Q chunk. The rebuild is driven a step at a time
//! (`rebuild_step`), so nothing waits on a thread.

use std::sync::Arc;

use sluice_raid::superblock::SUPERBLOCK_AREA;
use sluice_raid::{
    create_array, ArrayCondition, Geometry, MemberCondition, NamedMember, RaidDevice, RaidLevel,
    ScopedFanOut,
};
use sluice_storage::{BlockDevice, MemDevice};

mod common;
use common::pattern;

const UNIT: u64 = 4096;
const MEMBER: u64 = 2 << 20;
const MEMBERS: usize = 6;

fn geometry() -> Geometry {
    Geometry::new(RaidLevel::Raid6, MEMBERS, UNIT).expect("geometry")
}

fn named(devices: &[Arc<MemDevice>]) -> Vec<NamedMember> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| NamedMember {
            name: format!("mem{i}"),
            device: d.clone(),
        })
        .collect()
}

/// A new array of six memory members, filled with a pattern (returned
/// as the model of the volume).
fn filled_array() -> (Arc<RaidDevice>, Vec<Arc<MemDevice>>, Vec<u8>) {
    let devices: Vec<Arc<MemDevice>> = (0..MEMBERS)
        .map(|_| Arc::new(MemDevice::new(MEMBER, false)))
        .collect();
    create_array(geometry(), &named(&devices), false).expect("create");
    let array = Arc::new(
        RaidDevice::assemble(geometry(), named(&devices), Arc::new(ScopedFanOut))
            .expect("assemble"),
    );
    let model = pattern(1, array.size() as usize);
    array.write_at(&model, 0, false).expect("fill");
    (array, devices, model)
}

fn garbage_member() -> Arc<MemDevice> {
    let d = Arc::new(MemDevice::new(MEMBER, false));
    d.write_at(&pattern(99, MEMBER as usize), 0, false)
        .expect("garbage");
    d
}

fn replace(array: &RaidDevice, index: usize, device: &Arc<MemDevice>) {
    array
        .replace_member(
            index,
            NamedMember {
                name: format!("new{index}"),
                device: device.clone(),
            },
        )
        .expect("replace");
}

fn assert_reads(array: &RaidDevice, model: &[u8]) {
    let mut got = vec![0u8; model.len()];
    array.read_at(&mut got, 0).expect("read");
    let first = got.iter().zip(model).position(|(a, b)| a != b);
    assert_eq!(first, None, "volume differs from the model at this byte");
}

/// Partial-stripe writes at odd offsets over the whole volume, applied
/// to the model too.
fn scribble(array: &RaidDevice, model: &mut [u8], seed: u64) {
    let size = model.len() as u64;
    for i in 0..40u64 {
        let len = 512 + (i * 1531) % 9000;
        let at = (seed * 7919 + i * 104_729) % (size - len);
        let data = pattern(seed * 1000 + i, len as usize);
        array.write_at(&data, at, i % 7 == 0).expect("write");
        model[at as usize..(at + len) as usize].copy_from_slice(&data);
    }
}

#[test]
fn two_failures_are_survived_a_third_gives_errors_not_data() {
    let (array, _devices, mut model) = filled_array();
    array.fail_member(1).expect("fail 1");
    scribble(&array, &mut model, 2);
    assert_reads(&array, &model);
    array.fail_member(4).expect("fail 4");
    assert_eq!(array.status().state, ArrayCondition::Degraded);
    scribble(&array, &mut model, 3);
    assert_reads(&array, &model);
    assert!(array.fail_member(0).is_err(), "a third would lose data");
    let mut buf = vec![0u8; model.len()];
    array.read_at(&mut buf, 0).expect("still two down");
}

#[test]
fn two_failed_members_are_rebuilt_one_after_the_other() {
    let (array, devices, mut model) = filled_array();
    array.fail_member(0).expect("fail 0");
    array.fail_member(3).expect("fail 3");
    scribble(&array, &mut model, 4);
    let first = garbage_member();
    replace(&array, 0, &first);
    // Writes while the first rebuild runs, past and before its cursor.
    array.rebuild_step().expect("a step");
    scribble(&array, &mut model, 5);
    while array.rebuild_step().is_some() {}
    assert_eq!(array.status().members[0].state, MemberCondition::Active);
    assert_reads(&array, &model);
    let second = garbage_member();
    replace(&array, 3, &second);
    while array.rebuild_step().is_some() {}
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Clean);
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    // The rebuilt members hold what they should: two others may go.
    array.fail_member(1).expect("fail 1");
    array.fail_member(5).expect("fail 5");
    assert_reads(&array, &model);
    drop(devices);
}

#[test]
fn a_member_failing_during_a_rebuild_does_not_stop_it() {
    let (array, _devices, mut model) = filled_array();
    array.fail_member(2).expect("fail 2");
    let new = garbage_member();
    replace(&array, 2, &new);
    array.rebuild_step().expect("a step");
    array
        .fail_member(4)
        .expect("RAID 6 survives a failure during a rebuild");
    assert_eq!(
        array.status().members[2].state,
        MemberCondition::Rebuilding,
        "the rebuild goes on"
    );
    scribble(&array, &mut model, 6);
    while array.rebuild_step().is_some() {}
    let status = array.status();
    assert_eq!(status.members[2].state, MemberCondition::Active);
    assert_eq!(status.members[4].state, MemberCondition::Failed);
    assert_reads(&array, &model);
    // Member 2 holds its data: with 4 gone, one more may go.
    array.fail_member(0).expect("fail 0");
    assert_reads(&array, &model);
}

#[test]
fn scrub_finds_and_repairs_a_corrupted_p_and_q() {
    let (array, devices, model) = filled_array();
    let g = geometry();
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    let (p_stripe, q_stripe) = (3, 8);
    for (stripe, member) in [
        (p_stripe, g.parity_member(p_stripe).expect("P")),
        (q_stripe, g.q_member(q_stripe).expect("Q")),
    ] {
        devices[member]
            .write_at(b"corrupt", SUPERBLOCK_AREA + stripe * UNIT + 100, false)
            .expect("corrupt");
    }
    assert_reads(&array, &model);
    let report = array.scrub(false).expect("scrub");
    assert_eq!((report.mismatches, report.repaired), (2, 0));
    let report = array.scrub(true).expect("repair");
    assert_eq!((report.mismatches, report.repaired), (2, 2));
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    // P and Q are right again: two data members of those stripes may go.
    array
        .fail_member(g.data_member(q_stripe, 0))
        .expect("fail a data member");
    array
        .fail_member(g.data_member(q_stripe, 1))
        .expect("fail another");
    assert_reads(&array, &model);
}
