//! Idle members are probed: a dead member of an array nobody reads or
//! writes is marked failed by its probe, members that answer requests
//! are not probed, and every member's last good answer is reported.
//! Time is a `ManualClock`: the test moves it and waits for the probe
//! thread to go back to sleep, never sleeping itself.

use std::sync::Arc;
use std::time::Duration;

use sluice_raid::{ArrayCondition, Geometry, ManualClock, MemberCondition, RaidDevice, RaidLevel};
use sluice_storage::{BlockDevice, FaultInjectionDevice, FaultRule, MemDevice};

/// Bounds each wait for the probe thread, so a broken test fails rather
/// than hangs.
const BOUND: Duration = Duration::from_secs(30);
const INTERVAL: Duration = Duration::from_secs(1);

/// Three members of `level`, member 1 failing every request.
fn array_with_dead_member(level: RaidLevel) -> (Arc<RaidDevice>, Arc<ManualClock>) {
    let rule: FaultRule = "read+write:eio:after=0".parse().expect("rule");
    let members: Vec<Option<Arc<dyn BlockDevice>>> = (0..3)
        .map(|i| {
            let mem: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(1 << 20, false));
            let device: Arc<dyn BlockDevice> = if i == 1 {
                Arc::new(FaultInjectionDevice::new(mem, "member 1", vec![rule]))
            } else {
                mem
            };
            Some(device)
        })
        .collect();
    let geometry = Geometry::new(level, 3, 4096).expect("geometry");
    let clock = Arc::new(ManualClock::new());
    let array = RaidDevice::new(geometry, members)
        .expect("assemble")
        .with_clock(clock.clone());
    (Arc::new(array), clock)
}

/// Moves the clock on by `by` and waits until the probe thread sleeps
/// again (it has done whatever that time asked of it).
fn advance(clock: &ManualClock, by: Duration) {
    clock.advance(by);
    clock
        .wait_for_sleeper(BOUND)
        .expect("the probe thread sleeps again");
}

#[test]
fn a_dead_member_of_an_idle_array_is_marked_failed_by_its_probe() {
    let (array, clock) = array_with_dead_member(RaidLevel::Raid5);
    assert!(array.start_probing(INTERVAL));
    assert!(!array.start_probing(INTERVAL), "one probe thread per array");
    assert_eq!(clock.wait_for_sleeper(BOUND), Some(INTERVAL));
    let before = array.status();
    assert_eq!(before.state, ArrayCondition::Clean, "{before:?}");
    assert!(before.members.iter().all(|m| m.silent_ms == Some(0)));

    // No request at all: the first probe round finds member 1 dead.
    advance(&clock, INTERVAL);
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Degraded, "{status:?}");
    assert_eq!(status.members[1].state, MemberCondition::Failed);
    assert_eq!(status.members[0].state, MemberCondition::Active);
    for m in [0, 2] {
        assert_eq!(status.members[m].probes, 1, "{status:?}");
        assert_eq!(status.members[m].silent_ms, Some(0), "{status:?}");
        assert!(status.members[m].last_answer_unix_ms.is_some());
        // A probe is not a read of the array's data.
        assert_eq!(status.members[m].reads, 0, "{status:?}");
    }
    assert_eq!(status.members[1].probes, 1);
    assert_eq!(status.members[1].errors, 1);
    assert_eq!(status.members[1].silent_ms, Some(1000), "{status:?}");

    // A failed member is not probed again; members that answered a
    // request within the interval are not probed either.
    advance(&clock, INTERVAL / 2);
    let mut buf = vec![0u8; 3 * 4096];
    array.read_at(&mut buf, 0).expect("degraded read");
    advance(&clock, INTERVAL / 2);
    let status = array.status();
    for m in &status.members {
        assert_eq!(m.probes, 1, "{status:?}");
    }
    assert_eq!(status.members[0].silent_ms, Some(500), "{status:?}");
    assert_eq!(status.members[1].silent_ms, Some(2000), "{status:?}");
    // Silent for a whole interval again: probed.
    advance(&clock, INTERVAL);
    let status = array.status();
    assert_eq!(status.members[0].probes, 2, "{status:?}");
    assert_eq!(status.members[1].probes, 1, "{status:?}");
}

#[test]
fn a_raid0_member_whose_probe_fails_is_left_to_its_next_request() {
    // RAID 0 survives no failure: marking the member failed would fail
    // the whole array for good, so the probe only counts the error.
    let (array, clock) = array_with_dead_member(RaidLevel::Raid0);
    assert!(array.start_probing(INTERVAL));
    clock.wait_for_sleeper(BOUND).expect("probe thread sleeps");
    advance(&clock, INTERVAL);
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Clean, "{status:?}");
    assert_eq!(status.members[1].state, MemberCondition::Active);
    assert_eq!(status.members[1].probes, 1);
    assert_eq!(status.members[1].errors, 1);
}

#[test]
fn metrics_show_each_members_last_answer_and_probes() {
    let (array, clock) = array_with_dead_member(RaidLevel::Raid5);
    assert!(array.start_probing(INTERVAL));
    clock.wait_for_sleeper(BOUND).expect("probe thread sleeps");
    advance(&clock, INTERVAL);
    let metrics = array.metrics();
    let find = |name: &str, member: &str| {
        metrics
            .iter()
            .find(|m| m.name == name && m.labels[0] == ("member", member.to_owned()))
            .map(|m| m.value)
    };
    for m in ["0", "1", "2"] {
        assert_eq!(find("raid_member_probes_total", m), Some(1.0));
        let at = find("raid_member_last_answer_timestamp_seconds", m).expect("last answer");
        assert!(at > 1.0e9, "a Unix time, got {at}");
    }
}
