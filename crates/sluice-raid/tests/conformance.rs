//! The device conformance suite over RAID 0, 1, 5, 6 and 10 arrays:
//! memory members of several widths and stripe units, RAID 1, 5, 6 and
//! 10 arrays with a member (RAID 6: two; RAID 10: one of each mirror
//! set) missing from the start, with a member (RAID 6: two; RAID 10:
//! one of each mirror set) that fails mid-run, and over power-loss
//! members (the durability check).

use std::sync::{Arc, Mutex};

use sluice_raid::{Geometry, RaidDevice, RaidLevel};
use sluice_storage::{
    BlockDevice, FaultInjectionDevice, FaultRule, MemDevice, PowerLossConfig, PowerLossDevice,
};
use sluice_testkit::conformance::{Access, Subject};

/// RAID 10 as md makes it by default: near layout, two copies.
const RAID10: RaidLevel = RaidLevel::Raid10 { copies: 2 };

/// Volume size the suite works in.
const SIZE: u64 = 4 << 20;

/// Members sized so the volume is at least `SIZE`.
fn member_size(level: RaidLevel, members: usize, unit: u64) -> u64 {
    let geometry = Geometry::new(level, members, unit).expect("geometry");
    SIZE.div_ceil(geometry.stripe_bytes()) * unit
}

fn array(
    level: RaidLevel,
    unit: u64,
    members: Vec<Option<Arc<dyn BlockDevice>>>,
) -> Arc<dyn BlockDevice> {
    let geometry = Geometry::new(level, members.len(), unit).expect("geometry");
    Arc::new(RaidDevice::new(geometry, members).expect("assemble the array"))
}

fn mem_members(
    level: RaidLevel,
    n: usize,
    unit: u64,
    access: Access,
) -> Vec<Option<Arc<dyn BlockDevice>>> {
    let size = member_size(level, n, unit);
    (0..n)
        .map(|_| {
            Some(Arc::new(MemDevice::new(size, access == Access::ReadOnly)) as Arc<dyn BlockDevice>)
        })
        .collect()
}

fn over_mem(level: RaidLevel, n: usize, unit: u64) -> impl Fn(Access) -> Subject {
    move |access| Subject::new(array(level, unit, mem_members(level, n, unit, access)))
}

/// A memory device that says its calls may block, so the default
/// fan-out runs its requests on threads.
#[derive(Debug)]
struct Blocking(Arc<dyn BlockDevice>);

impl sluice_storage::DeviceLayer for Blocking {
    fn inner(&self) -> &dyn BlockDevice {
        self.0.as_ref()
    }
    fn capability(&self) -> sluice_storage::Capability {
        sluice_storage::Capability {
            blocking: sluice_storage::BlockingClass::Always,
            ..self.0.capability()
        }
    }
}

/// An array over members whose calls may block (threaded fan-out), one
/// of them missing when `missing` says so.
fn blocking(
    level: RaidLevel,
    n: usize,
    unit: u64,
    missing: Option<usize>,
) -> impl Fn(Access) -> Subject {
    move |access| {
        let mut members: Vec<Option<Arc<dyn BlockDevice>>> = mem_members(level, n, unit, access)
            .into_iter()
            .map(|m| m.map(|m| Arc::new(Blocking(m)) as Arc<dyn BlockDevice>))
            .collect();
        if let Some(i) = missing {
            members[i] = None;
        }
        Subject::new(array(level, unit, members))
    }
}

/// An array with member `missing` absent from the start.
fn with_missing(
    level: RaidLevel,
    n: usize,
    unit: u64,
    missing: usize,
) -> impl Fn(Access) -> Subject {
    move |access| {
        let mut members = mem_members(level, n, unit, access);
        members[missing] = None;
        Subject::new(array(level, unit, members))
    }
}

/// Members of the arrays the failing and power-loss cases build: three,
/// five for RAID 6, four (two mirror sets) for RAID 10.
fn width(level: RaidLevel) -> usize {
    match level {
        RaidLevel::Raid6 => 5,
        RaidLevel::Raid10 { .. } => 4,
        _ => 3,
    }
}

/// An array whose member 1 fails every request after its 40th (and,
/// with `second`, member 3 after its 90th: RAID 6 runs on with both
/// gone, and so does RAID 10, whose two mirror sets each lose one); `seen` collects the failing members so a test can check they
/// did fail.
fn failing_into(
    level: RaidLevel,
    access: Access,
    second: bool,
    seen: Option<&Mutex<Vec<Arc<FaultInjectionDevice>>>>,
) -> Subject {
    let unit = 4096;
    let mut members = mem_members(level, width(level), unit, access);
    let faults = [(1, "all:eio:after=40"), (3, "all:eio:after=90")];
    for (index, rule) in faults.into_iter().take(if second { 2 } else { 1 }) {
        let rule: FaultRule = rule.parse().expect("fault rule");
        let inner = members[index].take().expect("member");
        let failing = Arc::new(FaultInjectionDevice::new(
            inner,
            format!("member {index}"),
            vec![rule],
        ));
        if let Some(seen) = seen {
            seen.lock()
                .expect("not poisoned")
                .push(Arc::clone(&failing));
        }
        members[index] = Some(failing);
    }
    Subject::new(array(level, unit, members))
}

fn failing(level: RaidLevel) -> impl Fn(Access) -> Subject {
    move |access| failing_into(level, access, false, None)
}

fn failing_two(level: RaidLevel) -> impl Fn(Access) -> Subject {
    move |access| failing_into(level, access, true, None)
}

#[test]
fn the_failing_members_do_fail_during_the_suite() {
    for (level, second) in [
        (RaidLevel::Raid1, false),
        (RaidLevel::Raid5, false),
        (RaidLevel::Raid6, false),
        (RaidLevel::Raid6, true),
        (RAID10, false),
        (RAID10, true),
    ] {
        let seen = Mutex::new(Vec::new());
        let factory = |access| failing_into(level, access, second, Some(&seen));
        assert_eq!(
            sluice_testkit::conformance::operation_sequences_match_a_model(&factory),
            Ok(sluice_testkit::conformance::Outcome::Passed)
        );
        let seen = seen.lock().expect("not poisoned");
        // Each subject built pushed its failing members in turn: one
        // subject must have had all of them fail.
        let want = if second { 2 } else { 1 };
        assert!(
            seen.chunks(want)
                .any(|built| built.iter().all(|m| m.injected() > 0)),
            "the failing members of {level:?} never all failed: the stack never ran that degraded"
        );
    }
}

/// An array of three simulated disks with volatile caches; a crash cuts
/// the power of all of them and reassembles the array.
fn power_loss(level: RaidLevel) -> impl Fn(Access) -> Subject {
    move |access| power_loss_array(level, access)
}

fn power_loss_array(level: RaidLevel, access: Access) -> Subject {
    let unit = 4096;
    let disks: Vec<Arc<PowerLossDevice>> = mem_members(level, width(level), unit, access)
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            Arc::new(PowerLossDevice::new(
                m.expect("member"),
                PowerLossConfig {
                    seed: 7 + i as u64,
                    early_write_percent: 40,
                    torn_percent: 30,
                    max_cached_bytes: 1 << 20,
                },
            ))
        })
        .collect();
    let members = || {
        disks
            .iter()
            .map(|d| Some(Arc::clone(d) as Arc<dyn BlockDevice>))
            .collect::<Vec<_>>()
    };
    let device = array(level, unit, members());
    let after = members();
    let crashing = disks.clone();
    Subject::new(device).with_crash(move || {
        for disk in &crashing {
            disk.power_loss();
        }
        array(level, unit, after)
    })
}

sluice_testkit::conformance_tests! {
    raid0_two_mem_4k => over_mem(RaidLevel::Raid0, 2, 4096),
    raid0_three_mem_512 => over_mem(RaidLevel::Raid0, 3, 512),
    raid0_five_mem_64k => over_mem(RaidLevel::Raid0, 5, 64 << 10),
    raid5_two_mem_4k => over_mem(RaidLevel::Raid5, 2, 4096),
    raid5_three_mem_4k => over_mem(RaidLevel::Raid5, 3, 4096),
    raid5_three_mem_512 => over_mem(RaidLevel::Raid5, 3, 512),
    raid5_three_mem_16k => over_mem(RaidLevel::Raid5, 3, 16 << 10),
    raid5_five_mem_64k => over_mem(RaidLevel::Raid5, 5, 64 << 10),
    raid5_five_mem_4k => over_mem(RaidLevel::Raid5, 5, 4096),
    raid5_three_missing_first => with_missing(RaidLevel::Raid5, 3, 4096, 0),
    raid5_four_missing_last => with_missing(RaidLevel::Raid5, 4, 8192, 3),
    raid5_member_fails_mid_run => failing(RaidLevel::Raid5),
    raid5_over_power_loss => power_loss(RaidLevel::Raid5),
    raid5_four_blocking_4k => blocking(RaidLevel::Raid5, 4, 4096, None),
    raid5_three_blocking_missing_one => blocking(RaidLevel::Raid5, 3, 4096, Some(1)),
    raid6_four_mem_4k => over_mem(RaidLevel::Raid6, 4, 4096),
    raid6_five_mem_512 => over_mem(RaidLevel::Raid6, 5, 512),
    raid6_six_mem_64k => over_mem(RaidLevel::Raid6, 6, 64 << 10),
    raid6_five_missing_first => with_missing(RaidLevel::Raid6, 5, 4096, 0),
    raid6_six_missing_two => |access| {
        let mut members = mem_members(RaidLevel::Raid6, 6, 8192, access);
        members[1] = None;
        members[4] = None;
        Subject::new(array(RaidLevel::Raid6, 8192, members))
    },
    raid6_member_fails_mid_run => failing(RaidLevel::Raid6),
    raid6_two_members_fail_mid_run => failing_two(RaidLevel::Raid6),
    raid6_over_power_loss => power_loss(RaidLevel::Raid6),
    raid6_five_blocking_missing_one => blocking(RaidLevel::Raid6, 5, 4096, Some(2)),
    raid1_two_mem_4k => over_mem(RaidLevel::Raid1, 2, 4096),
    raid1_three_mem_512 => over_mem(RaidLevel::Raid1, 3, 512),
    raid1_three_mem_64k => over_mem(RaidLevel::Raid1, 3, 64 << 10),
    raid1_three_missing_first => with_missing(RaidLevel::Raid1, 3, 4096, 0),
    raid1_three_missing_two => |access| {
        let mut members = mem_members(RaidLevel::Raid1, 3, 4096, access);
        members[0] = None;
        members[2] = None;
        Subject::new(array(RaidLevel::Raid1, 4096, members))
    },
    raid1_member_fails_mid_run => failing(RaidLevel::Raid1),
    raid1_over_power_loss => power_loss(RaidLevel::Raid1),
    raid1_three_blocking_missing_one => blocking(RaidLevel::Raid1, 3, 4096, Some(1)),
    raid10_two_mem_4k => over_mem(RAID10, 2, 4096),
    raid10_four_mem_4k => over_mem(RAID10, 4, 4096),
    raid10_six_mem_512 => over_mem(RAID10, 6, 512),
    raid10_six_mem_64k => over_mem(RAID10, 6, 64 << 10),
    raid10_six_three_copies_4k => over_mem(RaidLevel::Raid10 { copies: 3 }, 6, 4096),
    raid10_four_missing_one_of_each_set => |access| {
        let mut members = mem_members(RAID10, 4, 4096, access);
        members[0] = None;
        members[3] = None;
        Subject::new(array(RAID10, 4096, members))
    },
    raid10_member_fails_mid_run => failing(RAID10),
    raid10_one_of_each_set_fails_mid_run => failing_two(RAID10),
    raid10_over_power_loss => power_loss(RAID10),
    raid10_four_blocking_missing_one => blocking(RAID10, 4, 4096, Some(2)),
    raid0_three_blocking => |access| {
        let members = mem_members(RaidLevel::Raid0, 3, 4096, access)
            .into_iter()
            .map(|m| m.map(|m| Arc::new(Blocking(m)) as Arc<dyn BlockDevice>))
            .collect();
        Subject::new(array(RaidLevel::Raid0, 4096, members))
    },
}
