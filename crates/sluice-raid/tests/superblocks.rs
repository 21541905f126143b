//! Arrays with superblocks: `create_array` writes them, `assemble`
//! accepts the array as created and refuses members that are not its
//! own, in its order and current; a member failing bumps the event
//! counter on the survivors, so the failed member is refused as stale
//! when the array is opened again. The conformance suite runs over an
//! assembled array (data past the superblocks).

use std::sync::Arc;

use sluice_raid::superblock::{ArrayState, MemberRole, Superblock, SUPERBLOCK_AREA};
use sluice_raid::{
    create_array, read_superblocks, FanOut, Geometry, NamedMember, RaidDevice, RaidError,
    RaidLevel, ScopedFanOut,
};
use sluice_storage::{
    BlockDevice, Capability, DeviceError, DeviceLayer, FaultInjectionDevice, FaultRule, IoOp,
    MemDevice, ZeroMode,
};
use sluice_testkit::conformance::{Access, Subject};

const MEMBER: u64 = 2 << 20;

fn named(devices: &[Arc<dyn BlockDevice>]) -> Vec<NamedMember> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| NamedMember {
            name: format!("mem{i}"),
            device: d.clone(),
        })
        .collect()
}

fn mem(n: usize) -> Vec<Arc<dyn BlockDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(MEMBER, false)) as Arc<dyn BlockDevice>)
        .collect()
}

fn geometry(n: usize) -> Geometry {
    Geometry::new(RaidLevel::Raid5, n, 4096).expect("geometry")
}

fn fan_out() -> Arc<dyn FanOut> {
    Arc::new(ScopedFanOut)
}

fn assemble(devices: &[Arc<dyn BlockDevice>]) -> Result<RaidDevice, RaidError> {
    RaidDevice::assemble(geometry(devices.len()), named(devices), fan_out())
}

fn superblock(device: &Arc<dyn BlockDevice>) -> Superblock {
    let found = read_superblocks(&named(std::slice::from_ref(device))).expect("read");
    found
        .into_iter()
        .next()
        .expect("one")
        .expect("a superblock")
}

#[test]
fn create_then_assemble_then_data_starts_past_the_superblocks() {
    let devices = mem(3);
    let uuid = create_array(geometry(3), &named(&devices), false).expect("create");
    for (i, d) in devices.iter().enumerate() {
        let s = superblock(d);
        assert_eq!(
            (s.array_uuid, s.index, s.state),
            (uuid, i, ArrayState::Clean)
        );
        assert_eq!(s.data_offset, SUPERBLOCK_AREA);
        assert_eq!(s.data_size, MEMBER - SUPERBLOCK_AREA);
    }
    let array = assemble(&devices).expect("assemble");
    assert_eq!(array.size(), 2 * (MEMBER - SUPERBLOCK_AREA));
    // Open for writing: dirty, one event later.
    assert_eq!(superblock(&devices[0]).state, ArrayState::Dirty);
    assert_eq!(superblock(&devices[0]).events, 2);
    array.write_at(&[0xee; 4096], 0, false).expect("write");
    // Volume offset 0 is chunk 0 of stripe 0, on member 0 past its
    // superblock area.
    let mut buf = [0u8; 4096];
    devices[0]
        .read_at(&mut buf, SUPERBLOCK_AREA)
        .expect("read member");
    assert_eq!(buf, [0xee; 4096]);
    drop(array);
    let s = superblock(&devices[0]);
    assert_eq!((s.state, s.events), (ArrayState::Clean, 3));
    // Created again over itself: refused without force.
    let e = create_array(geometry(3), &named(&devices), false).expect_err("in use");
    assert!(
        e.to_string()
            .contains("member 0 (mem0) holds the superblock of array"),
        "{e}"
    );
    let again = create_array(geometry(3), &named(&devices), true).expect("forced");
    assert_ne!(again, uuid);
}

#[test]
fn members_without_superblocks_or_in_the_wrong_order_are_refused() {
    let devices = mem(3);
    let e = assemble(&devices).expect_err("no superblocks").to_string();
    assert!(
        e.starts_with("member 0 (mem0) has no sluice RAID superblock"),
        "{e}"
    );
    create_array(geometry(3), &named(&devices), false).expect("create");
    let swapped = vec![devices[1].clone(), devices[0].clone(), devices[2].clone()];
    let e = assemble(&swapped).expect_err("swapped").to_string();
    assert!(
        e.starts_with("member 0 (mem0) is member 1 of its array"),
        "{e}"
    );
    let twice = vec![devices[0].clone(), devices[1].clone(), devices[0].clone()];
    let e = assemble(&twice).expect_err("twice").to_string();
    assert!(
        e.starts_with("member 2 (mem2) is the same member as member 0"),
        "{e}"
    );
    let other = mem(3);
    create_array(geometry(3), &named(&other), false).expect("create another");
    let mixed = vec![devices[0].clone(), other[1].clone(), devices[2].clone()];
    let e = assemble(&mixed).expect_err("foreign").to_string();
    assert!(
        e.starts_with("member 1 (mem1) belongs to another array"),
        "{e}"
    );
    let four = vec![
        devices[0].clone(),
        devices[1].clone(),
        devices[2].clone(),
        other[0].clone(),
    ];
    let e = RaidDevice::assemble(geometry(4), named(&four), fan_out())
        .expect_err("count")
        .to_string();
    assert!(
        e.contains("belongs to an array of 3 members, but 4 were given"),
        "{e}"
    );
}

#[test]
fn a_failed_member_is_recorded_and_refused_as_stale_on_reopen() {
    let devices = mem(3);
    create_array(geometry(3), &named(&devices), false).expect("create");
    // Member 1 fails its second write from now on.
    let faulty: Arc<dyn BlockDevice> = Arc::new(FaultInjectionDevice::new(
        devices[1].clone(),
        "member 1",
        vec!["write:eio:after=2".parse::<FaultRule>().expect("rule")],
    ));
    let with_fault = vec![devices[0].clone(), faulty, devices[2].clone()];
    let array = assemble(&with_fault).expect("assemble");
    let before = superblock(&devices[0]).events;
    let data = vec![0x5a; 64 << 10];
    array
        .write_at(&data, 0, false)
        .expect("write: degraded, no error");
    let status = array.member_status();
    assert!(status[1].failed && !status[0].failed, "{status:?}");
    let mut back = vec![0; data.len()];
    array.read_at(&mut back, 0).expect("degraded read");
    assert_eq!(back, data);
    for i in [0, 2] {
        let s = superblock(&devices[i]);
        assert_eq!(s.events, before + 1, "member {i}");
        assert_eq!(s.roles[1], MemberRole::Failed, "member {i}");
    }
    assert!(superblock(&devices[1]).events < before + 1);
    drop(array);
    let e = assemble(&devices).expect_err("stale").to_string();
    assert!(e.starts_with("member 1 (mem1) is stale"), "{e}");
}

/// A member that refuses writes, for read-only arrays.
#[derive(Debug)]
struct Frozen(Arc<dyn BlockDevice>);

impl DeviceLayer for Frozen {
    fn inner(&self) -> &dyn BlockDevice {
        self.0.as_ref()
    }
    fn capability(&self) -> Capability {
        Capability {
            read_only: true,
            ..self.0.capability()
        }
    }
    fn write_at(&self, _: &[u8], _: u64, _: bool) -> Result<(), DeviceError> {
        Err(self.refuse(IoOp::Write))
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> Result<(), DeviceError> {
        Err(self.refuse(IoOp::Trim))
    }
    fn write_zeroes(&self, _: u64, _: u64, _: ZeroMode) -> Result<(), DeviceError> {
        Err(self.refuse(IoOp::WriteZeroes))
    }
}

impl Frozen {
    fn refuse(&self, op: IoOp) -> DeviceError {
        DeviceError::ReadOnly {
            device: "frozen member".into(),
            op,
        }
    }
}

fn assembled(access: Access) -> Subject {
    let devices: Vec<Arc<dyn BlockDevice>> = (0..3)
        .map(|_| Arc::new(MemDevice::new(4 << 20, false)) as Arc<dyn BlockDevice>)
        .collect();
    create_array(geometry(3), &named(&devices), false).expect("create");
    let devices: Vec<Arc<dyn BlockDevice>> = match access {
        Access::ReadWrite => devices,
        Access::ReadOnly => devices
            .into_iter()
            .map(|d| Arc::new(Frozen(d)) as Arc<dyn BlockDevice>)
            .collect(),
    };
    Subject::new(Arc::new(assemble(&devices).expect("assemble")))
}

sluice_testkit::conformance_tests! {
    raid5_assembled_from_superblocks => assembled,
}
