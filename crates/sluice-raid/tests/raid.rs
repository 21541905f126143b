//! RAID behaviour the conformance suite does not see: member I/O counts
//! of partial-stripe writes, degraded reads and writes, member failures
//! during requests, and two failures giving errors instead of data.

use std::sync::Arc;

use proptest::prelude::*;
use sluice_raid::{ArrayFailed, Geometry, MemberStatus, RaidDevice, RaidError, RaidLevel};
use sluice_storage::{
    BlockDevice, DeviceError, FaultInjectionDevice, FaultRule, MemDevice, ZeroMode,
};
use sluice_testkit::error_chain;

mod common;
use common::pattern;

fn mem_members(n: usize, size: u64) -> Vec<Arc<MemDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(size, false)))
        .collect()
}

fn as_members(m: &[Arc<MemDevice>]) -> Vec<Option<Arc<dyn BlockDevice>>> {
    m.iter()
        .map(|d| Some(Arc::clone(d) as Arc<dyn BlockDevice>))
        .collect()
}

fn raid5(n: usize, unit: u64, member_size: u64) -> (RaidDevice, Vec<Arc<MemDevice>>) {
    let members = mem_members(n, member_size);
    let geometry = Geometry::new(RaidLevel::Raid5, n, unit).expect("geometry");
    let array = RaidDevice::new(geometry, as_members(&members)).expect("assemble");
    (array, members)
}

/// (reads, writes) summed over members since `before`.
fn io_since(array: &RaidDevice, before: &[MemberStatus]) -> (u64, u64) {
    array
        .member_status()
        .iter()
        .zip(before)
        .fold((0, 0), |(r, w), (now, was)| {
            (r + now.reads - was.reads, w + now.writes - was.writes)
        })
}

/// Checks that parity is the XOR of the data members in every stripe.
fn assert_parity_consistent(array: &RaidDevice, members: &[Arc<MemDevice>]) {
    let size = members[0].size();
    let mut acc = vec![0u8; size as usize];
    let mut buf = vec![0u8; size as usize];
    for m in members {
        m.read_at(&mut buf, 0).expect("read member");
        sluice_raid::xor_into(&mut acc, &buf);
    }
    let used = array.size() / array.geometry().data_members() as u64;
    assert!(
        acc[..used as usize].iter().all(|&b| b == 0),
        "parity is not the XOR of the data"
    );
}

#[test]
fn a_4k_write_costs_the_fewest_member_ios() {
    // (members, stripe unit, offset, expected (reads, writes))
    let cases = [
        // Three members: reconstruct-write reads the same 4 KiB of the
        // other data chunk (1 read + data + parity = 3), where
        // read-modify-write would take 4; inside a chunk or a whole one.
        (3, 64 << 10, 8192, (1, 2)),
        (3, 4096, 4096, (1, 2)),
        // Five members: read-modify-write, 2 reads + 2 writes
        // (reconstruct-write would read the three other data chunks).
        (5, 64 << 10, 8192, (2, 2)),
        (5, 4096, 4096, (2, 2)),
    ];
    for (n, unit, offset, want) in cases {
        let (array, members) = raid5(n, unit, 1 << 20);
        array
            .write_at(&pattern(1, 1 << 20), 0, false)
            .expect("prefill");
        let before = array.member_status();
        array
            .write_at(&pattern(2, 4096), offset, false)
            .expect("4 KiB write");
        assert_eq!(io_since(&array, &before), want, "{n} members, unit {unit}");
        assert_parity_consistent(&array, &members);
    }
}

#[test]
fn full_stripe_writes_read_nothing() {
    let (array, members) = raid5(4, 4096, 1 << 20);
    let before = array.member_status();
    array
        .write_at(&pattern(3, 3 * 4096 * 5), 3 * 4096 * 2, false)
        .expect("five full stripes");
    assert_eq!(io_since(&array, &before), (0, 20));
    assert_parity_consistent(&array, &members);
}

#[test]
fn size_is_whole_stripes_of_the_smallest_member() {
    let members: Vec<Option<Arc<dyn BlockDevice>>> = [100_000u64, 90_000, 200_000]
        .iter()
        .map(|&s| Some(Arc::new(MemDevice::new(s, false)) as Arc<dyn BlockDevice>))
        .collect();
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    let array = RaidDevice::new(geometry, members).expect("assemble");
    // 90_000 / 4096 = 21 whole chunks per member, two data members.
    assert_eq!(array.size(), 21 * 4096 * 2);
}

#[test]
fn a_member_error_during_a_request_degrades_without_an_error() {
    let members = mem_members(3, 1 << 20);
    let rule: FaultRule = "read+write:eio:after=0".parse().expect("rule");
    let mut devices = as_members(&members);
    devices[1] = Some(Arc::new(FaultInjectionDevice::new(
        Arc::clone(&members[1]) as Arc<dyn BlockDevice>,
        "member 1",
        Vec::new(),
    )));
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    let healthy = RaidDevice::new(geometry, devices.clone()).expect("assemble");
    let data = pattern(4, 1 << 20);
    healthy
        .write_at(&data, 0, false)
        .expect("write while healthy");
    drop(healthy);
    // The same members, member 1 now failing everything.
    devices[1] = Some(Arc::new(FaultInjectionDevice::new(
        Arc::clone(&members[1]) as Arc<dyn BlockDevice>,
        "member 1",
        vec![rule],
    )));
    let array = RaidDevice::new(geometry, devices).expect("assemble");
    let mut back = vec![0u8; data.len()];
    array
        .read_at(&mut back, 0)
        .expect("read through the failure");
    assert!(back == data, "degraded read returned wrong data");
    let status = array.member_status();
    assert!(status[1].failed && status[1].errors >= 1, "{status:?}");
    assert!(!status[0].failed && !status[2].failed);
    // Writes go on degraded, and read back.
    let more = pattern(5, 10_000);
    array.write_at(&more, 3000, true).expect("degraded write");
    array.flush().expect("degraded flush");
    array.read_at(&mut back[..10_000], 3000).expect("read");
    assert!(back[..10_000] == more[..]);
}

#[test]
fn raid0_passes_member_errors_on() {
    let members = mem_members(2, 1 << 16);
    let mut devices = as_members(&members);
    let rule: FaultRule = "read:eio:after=0".parse().expect("rule");
    devices[1] = Some(Arc::new(FaultInjectionDevice::new(
        Arc::clone(&members[1]) as Arc<dyn BlockDevice>,
        "member 1",
        vec![rule],
    )));
    let geometry = Geometry::new(RaidLevel::Raid0, 2, 4096).expect("geometry");
    let array = RaidDevice::new(geometry, devices).expect("assemble");
    let mut buf = vec![0u8; 8192];
    assert!(matches!(
        array.read_at(&mut buf, 0),
        Err(DeviceError::Io { .. })
    ));
    // The chunk on the healthy member still reads.
    array.read_at(&mut buf[..4096], 0).expect("member 0 chunk");
    assert!(matches!(
        array.fail_member(0),
        Err(RaidError::WouldLoseData { .. })
    ));
}

#[test]
fn two_failures_give_errors_not_wrong_data() {
    let (array, _members) = raid5(3, 4096, 1 << 16);
    let size = array.size();
    array
        .write_at(&pattern(6, size as usize), 0, false)
        .expect("fill");
    array.fail_member(2).expect("first failure");
    assert!(matches!(
        array.fail_member(0),
        Err(RaidError::WouldLoseData { .. })
    ));
    // A second failure by I/O error.
    let members = mem_members(3, 1 << 16);
    let mut devices = as_members(&members);
    let rule: FaultRule = "all:eio:after=0".parse().expect("rule");
    devices[0] = Some(Arc::new(FaultInjectionDevice::new(
        Arc::clone(&members[0]) as Arc<dyn BlockDevice>,
        "member 0",
        vec![rule],
    )));
    devices[2] = None;
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    let array = RaidDevice::new(geometry, devices).expect("assemble degraded");
    let mut buf = vec![0u8; size as usize];
    for (offset, len) in [(0, 4096), (0, size), (8192, 100)] {
        let err = array
            .read_at(&mut buf[..len as usize], offset)
            .expect_err("two members lost: reads must fail");
        let DeviceError::Io { source, .. } = &err else {
            panic!("expected an I/O error, got {err}");
        };
        assert!(
            source.get_ref().is_some_and(|e| e.is::<ArrayFailed>()),
            "{err}"
        );
        assert!(error_chain(&err).contains("member 0"), "{err}");
    }
    assert!(array.write_at(&buf[..4096], 0, false).is_err());
    assert!(array.flush().is_err());
    assert!(array
        .write_zeroes(
            0,
            8192,
            ZeroMode {
                may_trim: false,
                fast: false,
                fua: false
            }
        )
        .is_err());
}

#[test]
fn a_flush_that_fails_a_second_member_is_an_error() {
    let members = mem_members(3, 1 << 16);
    let mut devices = as_members(&members);
    let rule: FaultRule = "flush:eio:after=0".parse().expect("rule");
    devices[0] = Some(Arc::new(FaultInjectionDevice::new(
        Arc::clone(&members[0]) as Arc<dyn BlockDevice>,
        "member 0",
        vec![rule],
    )));
    devices[2] = None;
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    let array = RaidDevice::new(geometry, devices).expect("assemble degraded");
    array
        .write_at(&pattern(8, 8192), 0, false)
        .expect("degraded write");
    let err = array.flush().expect_err("flush lost a second member");
    assert!(error_chain(&err).contains("member 0"), "{err}");
}

#[test]
fn assembling_with_too_many_missing_is_refused() {
    let members = mem_members(3, 1 << 16);
    let mut devices = as_members(&members);
    devices[0] = None;
    devices[1] = None;
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    assert!(matches!(
        RaidDevice::new(geometry, devices),
        Err(RaidError::TooManyMissing { missing: 2, .. })
    ));
    let geometry = Geometry::new(RaidLevel::Raid0, 3, 4096).expect("geometry");
    let mut devices = as_members(&members);
    devices[2] = None;
    assert!(RaidDevice::new(geometry, devices).is_err());
}

#[test]
fn extents_report_member_holes_and_missing_chunks_as_data() {
    let members = mem_members(3, 1 << 16);
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    let array = RaidDevice::new(geometry, as_members(&members)).expect("assemble");
    array
        .write_at(&pattern(7, 4096), 4096, false)
        .expect("write chunk 1");
    let extents = array.extents(0, 8192, 16).expect("extents");
    assert!(extents[0].hole && extents[0].zero, "{extents:?}");
    assert_eq!(extents.iter().map(|e| e.length).sum::<u64>(), 8192);
    assert!(!extents.last().expect("extent").hole, "{extents:?}");
    // Chunk 0 lives on member 0; with it missing it is data.
    let mut devices = as_members(&members);
    devices[0] = None;
    let degraded = RaidDevice::new(geometry, devices).expect("assemble degraded");
    let extents = degraded.extents(0, 4096, 16).expect("extents");
    assert_eq!(extents.len(), 1);
    assert!(!extents[0].hole && !extents[0].zero);
}

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, len: usize, seed: u64 },
    Zero { offset: u64, len: u64 },
    Flush,
}

const MEMBER: u64 = 64 << 10;

fn ops(volume: u64) -> impl Strategy<Value = Vec<Op>> {
    let one = prop_oneof![
        4 => (0..volume, 1..20_000usize, any::<u64>()).prop_map(move |(o, l, seed)| Op::Write {
            offset: o,
            len: l.min((volume - o) as usize).max(1),
            seed
        }),
        1 => (0..volume, 1..40_000u64).prop_map(move |(o, l)| Op::Zero {
            offset: o,
            len: l.min(volume - o).max(1)
        }),
        1 => Just(Op::Flush),
    ];
    prop::collection::vec(one, 1..25)
}

fn apply(array: &RaidDevice, model: &mut [u8], op: &Op) {
    match *op {
        Op::Write { offset, len, seed } => {
            let data = pattern(seed, len);
            array.write_at(&data, offset, false).expect("write");
            model[offset as usize..offset as usize + len].copy_from_slice(&data);
        }
        Op::Zero { offset, len } => {
            let mode = ZeroMode {
                may_trim: true,
                fast: false,
                fua: false,
            };
            array.write_zeroes(offset, len, mode).expect("write zeroes");
            model[offset as usize..(offset + len) as usize].fill(0);
        }
        Op::Flush => array.flush().expect("flush"),
    }
}

fn assert_reads_model(array: &RaidDevice, model: &[u8]) -> Result<(), TestCaseError> {
    let mut back = vec![0u8; model.len()];
    array.read_at(&mut back, 0).expect("read all");
    let first = back.iter().zip(model).position(|(a, b)| a != b);
    prop_assert!(first.is_none(), "first difference at byte {:?}", first);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Random writes and zeroings on RAID 5 read back like a plain
    /// buffer; after failing any one member every byte still does, and
    /// so do further (degraded) operations.
    #[test]
    fn raid5_matches_a_model_and_survives_any_one_failure(
        n in 2usize..6,
        unit_shift in 9u32..14,
        before in ops(2 * MEMBER),
        fail in 0usize..5,
        after in ops(2 * MEMBER),
    ) {
        let unit = 1u64 << unit_shift;
        let (array, members) = raid5(n, unit, MEMBER);
        let volume = array.size();
        let mut model = vec![0u8; volume as usize];
        for op in before.iter().filter(|op| fits(op, volume)) {
            apply(&array, &mut model, op);
        }
        assert_reads_model(&array, &model)?;
        assert_parity_consistent(&array, &members);
        array.fail_member(fail % n).expect("fail one member");
        assert_reads_model(&array, &model)?;
        for op in after.iter().filter(|op| fits(op, volume)) {
            apply(&array, &mut model, op);
        }
        assert_reads_model(&array, &model)?;
    }
}

fn fits(op: &Op, volume: u64) -> bool {
    match *op {
        Op::Write { offset, len, .. } => offset + len as u64 <= volume,
        Op::Zero { offset, len } => offset + len <= volume,
        Op::Flush => true,
    }
}

/// A member that answers at most one extent per call, as a device with a
/// smaller reply limit than the caller's may.
#[derive(Debug)]
struct OneExtentAtATime(Arc<dyn BlockDevice>);

impl sluice_storage::DeviceLayer for OneExtentAtATime {
    fn inner(&self) -> &dyn BlockDevice {
        self.0.as_ref()
    }
    fn extents(
        &self,
        offset: u64,
        length: u64,
        _max_extents: usize,
    ) -> Result<Vec<sluice_storage::Extent>, DeviceError> {
        self.0.extents(offset, length, 1)
    }
}

#[test]
fn extents_cover_the_range_when_members_answer_in_parts() {
    let members = mem_members(2, 1 << 20);
    let devices: Vec<Option<Arc<dyn BlockDevice>>> = members
        .iter()
        .map(|m| {
            Some(
                Arc::new(OneExtentAtATime(Arc::clone(m) as Arc<dyn BlockDevice>))
                    as Arc<dyn BlockDevice>,
            )
        })
        .collect();
    let geometry = Geometry::new(RaidLevel::Raid0, 2, 256 << 10).expect("geometry");
    let array = RaidDevice::new(geometry, devices).expect("assemble");
    // Data in the second and fourth 64 KiB pages of chunk 0 (memory
    // members allocate 64 KiB pages): hole, data, hole, data, hole.
    for at in [64 << 10, 192 << 10] {
        array.write_at(&pattern(9, 4096), at, false).expect("write");
    }
    let extents = array.extents(0, 512 << 10, 64).expect("extents");
    assert_eq!(
        extents.iter().map(|e| e.length).sum::<u64>(),
        512 << 10,
        "{extents:?}"
    );
    let data: Vec<bool> = extents.iter().map(|e| !e.hole).collect();
    assert_eq!(data, [false, true, false, true, false], "{extents:?}");
}

/// A member whose block status fails as a member that went away does.
#[derive(Debug)]
struct ExtentsFail(Arc<dyn BlockDevice>);

impl sluice_storage::DeviceLayer for ExtentsFail {
    fn inner(&self) -> &dyn BlockDevice {
        self.0.as_ref()
    }
    fn extents(
        &self,
        offset: u64,
        length: u64,
        _max_extents: usize,
    ) -> Result<Vec<sluice_storage::Extent>, DeviceError> {
        Err(DeviceError::Io {
            device: "member 1".into(),
            op: sluice_storage::IoOp::Extents,
            offset,
            len: length,
            source: std::io::Error::other("connection closed"),
        })
    }
}

#[test]
fn a_member_failing_block_status_fails_like_on_any_request() {
    let members = mem_members(3, 1 << 20);
    let mut devices = as_members(&members);
    devices[1] = Some(Arc::new(ExtentsFail(
        Arc::clone(&members[1]) as Arc<dyn BlockDevice>
    )));
    let geometry = Geometry::new(RaidLevel::Raid5, 3, 4096).expect("geometry");
    let array = RaidDevice::new(geometry, devices).expect("assemble");
    let size = array.size();
    let extents = array.extents(0, size, 1024).expect("extents answer");
    assert_eq!(extents.iter().map(|e| e.length).sum::<u64>(), size);
    let status = array.member_status();
    assert!(status[1].failed && status[1].errors == 1, "{status:?}");
    // Member 1's chunks come from parity now: data, not holes.
    let extents = array.extents(0, 8192, 16).expect("extents");
    assert!(extents.iter().any(|e| !e.hole), "{extents:?}");
}
