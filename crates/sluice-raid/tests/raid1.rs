//! RAID 1 behaviour the conformance suite does not see: reads spread
//! over the mirrors and writes reaching every one, reads going on from
//! the others as mirrors fail until none is left, a replaced mirror
//! rebuilt by copying (and then holding every byte alone), a mirror put
//! back within the re-add window resynced by copying only what it
//! missed, and scrub finding and repairing a mirror that differs.

use std::sync::Arc;
use std::time::Duration;

use sluice_raid::{
    create_array, ArrayCondition, ArrayFailed, Geometry, ManualClock, NamedMember, RaidDevice,
    RaidLevel, ScopedFanOut,
};
use sluice_storage::{BlockDevice, DeviceError, MemDevice};
use sluice_testkit::error_chain;

mod common;
use common::pattern;

const UNIT: u64 = 4096;
const MEMBER: u64 = 1 << 20;

fn mem(n: usize) -> Vec<Arc<MemDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(MEMBER, false)))
        .collect()
}

fn mirror(devices: &[Arc<MemDevice>]) -> RaidDevice {
    let geometry = Geometry::new(RaidLevel::Raid1, devices.len(), UNIT).expect("geometry");
    let members = devices
        .iter()
        .map(|d| Some(d.clone() as Arc<dyn BlockDevice>))
        .collect();
    RaidDevice::new(geometry, members).expect("assemble")
}

#[test]
fn reads_spread_over_the_mirrors_and_writes_reach_every_one() {
    let devices = mem(3);
    let array = mirror(&devices);
    assert_eq!(array.size(), MEMBER);
    let data = pattern(1, 12 * UNIT as usize);
    array.write_at(&data, 0, false).expect("write");
    for d in &devices {
        let mut copy = vec![0u8; data.len()];
        d.read_at(&mut copy, 0).expect("member read");
        assert!(copy == data, "a mirror does not hold the write");
    }
    let mut back = vec![0u8; data.len()];
    array.read_at(&mut back, 0).expect("read");
    assert!(back == data);
    // Twelve chunks, read by chunk number modulo three: four each.
    let status = array.member_status();
    for s in &status {
        assert_eq!(s.read_bytes, 4 * UNIT, "{status:?}");
        assert_eq!(s.written_bytes, data.len() as u64, "{status:?}");
    }
}

#[test]
fn reads_go_on_from_the_mirrors_left_until_none_is() {
    let devices = mem(3);
    let array = mirror(&devices);
    let data = pattern(2, 64 * UNIT as usize);
    array.write_at(&data, 0, true).expect("write");
    let mut back = vec![0u8; data.len()];
    for failed in [0, 2] {
        array.fail_member(failed).expect("fail a mirror");
        array.read_at(&mut back, 0).expect("degraded read");
        assert!(back == data, "wrong data with member {failed} failed");
    }
    assert_eq!(array.status().state, ArrayCondition::Degraded);
    // Writes go on to the last mirror and read back.
    let more = pattern(3, 10_000);
    array
        .write_at(&more, 5000, false)
        .expect("write to one mirror");
    array.read_at(&mut back[..10_000], 5000).expect("read");
    assert!(back[..10_000] == more[..]);
    // Failing the last one would lose everything: refused.
    assert!(array.fail_member(1).is_err());
}

#[test]
fn a_member_error_with_no_mirror_left_is_an_array_failure() {
    let devices = mem(2);
    let rule: sluice_storage::FaultRule = "all:eio:after=0".parse().expect("rule");
    let geometry = Geometry::new(RaidLevel::Raid1, 2, UNIT).expect("geometry");
    let failing = |d: &Arc<MemDevice>| -> Option<Arc<dyn BlockDevice>> {
        Some(Arc::new(sluice_storage::FaultInjectionDevice::new(
            d.clone() as Arc<dyn BlockDevice>,
            "failing",
            vec![rule],
        )))
    };
    let array = RaidDevice::new(geometry, vec![failing(&devices[0]), failing(&devices[1])])
        .expect("assemble");
    let mut buf = vec![0u8; 4096];
    let e = array.read_at(&mut buf, 0).expect_err("no mirror left");
    assert!(matches!(e, DeviceError::Io { .. }), "{e}");
    assert!(
        error_chain(&e).contains("2 of 2 members have failed"),
        "{}",
        error_chain(&e)
    );
    let source = std::error::Error::source(&e).expect("cause");
    let io = source.downcast_ref::<std::io::Error>().expect("io error");
    assert!(io.get_ref().is_some_and(|e| e.is::<ArrayFailed>()));
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

fn assembled(devices: &[Arc<MemDevice>]) -> Arc<RaidDevice> {
    let geometry = Geometry::new(RaidLevel::Raid1, devices.len(), UNIT).expect("geometry");
    Arc::new(
        RaidDevice::assemble(geometry, named(devices), Arc::new(ScopedFanOut)).expect("assemble"),
    )
}

#[test]
fn a_replaced_mirror_is_rebuilt_by_copying_and_then_holds_every_byte() {
    let devices = mem(2);
    let geometry = Geometry::new(RaidLevel::Raid1, 2, UNIT).expect("geometry");
    create_array(geometry, &named(&devices), false).expect("create");
    let array = assembled(&devices);
    let model = pattern(4, array.size() as usize);
    array.write_at(&model, 0, false).expect("fill");
    array.fail_member(1).expect("fail member 1");
    // A fresh member holding garbage, rebuilt step by step.
    let fresh = Arc::new(MemDevice::new(MEMBER, false));
    fresh
        .write_at(&pattern(99, MEMBER as usize), 0, false)
        .expect("garbage");
    array
        .replace_member(
            1,
            NamedMember {
                name: "fresh".into(),
                device: fresh.clone(),
            },
        )
        .expect("replace");
    assert_eq!(array.status().state, ArrayCondition::Rebuilding);
    // A write while rebuilding reaches the copy too.
    let late = pattern(5, 3 * UNIT as usize);
    array.write_at(&late, 100 * UNIT + 7, false).expect("write");
    let mut model = model;
    model[(100 * UNIT + 7) as usize..][..late.len()].copy_from_slice(&late);
    let mut steps = 0;
    while array.rebuild_step().is_some() {
        steps += 1;
        assert!(steps < 10_000, "the rebuild does not end");
    }
    assert_eq!(array.status().state, ArrayCondition::Clean);
    // The rebuilt member alone holds the volume.
    array.fail_member(0).expect("fail the source");
    let mut back = vec![0u8; model.len()];
    array
        .read_at(&mut back, 0)
        .expect("read from the rebuilt mirror");
    let first = back.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first, None, "the rebuilt mirror differs at this byte");
}

#[test]
fn scrub_finds_a_mirror_that_differs_and_repair_copies_member_0() {
    let devices = mem(3);
    let geometry = Geometry::new(RaidLevel::Raid1, 3, UNIT).expect("geometry");
    create_array(geometry, &named(&devices), false).expect("create");
    let array = assembled(&devices);
    let model = pattern(6, array.size() as usize);
    array.write_at(&model, 0, false).expect("fill");
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    // Member 2's copy of some bytes of chunk 5 goes bad, behind the
    // array's back (its data starts past the superblock area).
    let data_offset = sluice_raid::superblock::SUPERBLOCK_AREA;
    devices[2]
        .write_at(b"bit rot", data_offset + 5 * UNIT + 10, false)
        .expect("corrupt");
    let found = array.scrub(false).expect("scrub");
    assert_eq!((found.mismatches, found.repaired), (1, 0), "{found:?}");
    let fixed = array.scrub(true).expect("repair");
    assert_eq!((fixed.mismatches, fixed.repaired), (1, 1), "{fixed:?}");
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    let mut copy = vec![0u8; UNIT as usize];
    devices[2]
        .read_at(&mut copy, data_offset + 5 * UNIT)
        .expect("read member 2");
    assert!(copy[..] == model[5 * UNIT as usize..6 * UNIT as usize]);
}

/// A two-way mirror with superblocks over 4 MiB members, filled; the
/// model of its volume.
fn filled_pair(clock: Arc<ManualClock>) -> (Arc<RaidDevice>, Vec<Arc<MemDevice>>, Vec<u8>) {
    let devices: Vec<Arc<MemDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(4 << 20, false)))
        .collect();
    let geometry = Geometry::new(RaidLevel::Raid1, 2, UNIT).expect("geometry");
    create_array(geometry, &named(&devices), false).expect("create");
    let array = Arc::new(
        RaidDevice::assemble(geometry, named(&devices), Arc::new(ScopedFanOut))
            .expect("assemble")
            .with_clock(clock),
    );
    let model = pattern(7, array.size() as usize);
    array.write_at(&model, 0, false).expect("fill");
    (array, devices, model)
}

/// Fails member 1, writes 4 KiB into stripes 10 and 500 (two rebuild
/// runs of 64 stripes) while it is away, lets `away` pass, puts the
/// same member back, writes into stripe 800 (a third run) and runs the
/// rebuild to its end; returns the bytes
/// the rebuild wrote to it, after checking it alone then holds the
/// volume.
fn away_and_back(window: Duration, away: Duration) -> u64 {
    let clock = Arc::new(ManualClock::new());
    let (array, devices, mut model) = filled_pair(clock.clone());
    array.set_readd_window(window);
    array.fail_member(1).expect("fail member 1");
    for stripe in [10, 500] {
        let at = stripe * UNIT + 100;
        let data = pattern(stripe, 4096);
        array.write_at(&data, at, false).expect("degraded write");
        model[at as usize..][..4096].copy_from_slice(&data);
    }
    clock.advance(away);
    let before = array.member_status()[1].written_bytes;
    array
        .replace_member(
            1,
            NamedMember {
                name: "mem1".into(),
                device: devices[1].clone(),
            },
        )
        .expect("put member 1 back");
    // A write past the cursor while it resyncs, to a run it had not
    // missed: that run is copied too.
    let at = 800 * UNIT + 5;
    let data = pattern(800, 3000);
    array
        .write_at(&data, at, true)
        .expect("write during the resync");
    model[at as usize..][..3000].copy_from_slice(&data);
    let mut steps = 0;
    while array.rebuild_step().is_some() {
        steps += 1;
        assert!(steps < 10_000, "the rebuild does not end");
    }
    assert_eq!(array.status().state, ArrayCondition::Clean);
    let written = array.member_status()[1].written_bytes - before;
    array.fail_member(0).expect("fail member 0");
    let mut back = vec![0u8; model.len()];
    array.read_at(&mut back, 0).expect("read member 1 alone");
    let first = back.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first, None, "member 1 differs at this byte");
    written
}

#[test]
fn a_mirror_back_within_the_window_resyncs_only_what_it_missed() {
    let run = 64 * UNIT;
    let written = away_and_back(Duration::from_secs(60), Duration::from_secs(10));
    assert_eq!(
        written,
        3 * run,
        "the two runs it missed and the one written during the resync, nothing else"
    );
}

#[test]
fn a_mirror_back_after_the_window_is_rebuilt_whole() {
    let volume = (4 << 20) - UNIT;
    let written = away_and_back(Duration::from_secs(60), Duration::from_secs(61));
    assert_eq!(written, volume);
    // No window: no bitmap at all.
    assert_eq!(away_and_back(Duration::ZERO, Duration::ZERO), volume);
}
