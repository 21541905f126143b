//! The RAID 5 and RAID 6 write hole, deterministically: the array "crashes" at every
//! member write, member flush, journal write and journal sync of a run of
//! partial-stripe writes (the member or journal device refuses that
//! operation and every one after it, as if the process died there; every
//! other crash point is one with more operations let through). From what
//! the members and the journal held at that moment the array is
//! assembled again, one member (RAID 6: two) is failed, and every sector is read back:
//! each must hold what the durability model allows (flushed data, or a
//! write not yet flushed or still in flight), so no block the crash was
//! not writing may change when it is rebuilt from parity. With the
//! journal this holds at every crash point; without it, the same run
//! must find blocks rebuilt wrong, which shows the hole the journal
//! closes.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use sluice_raid::journal::JOURNAL_BYTES;
use sluice_raid::{
    create_array, Geometry, JournalPlace, NamedMember, RaidDevice, RaidLevel, ScopedFanOut,
};
use sluice_storage::{BlockDevice, DeviceError, DeviceLayer, IoOp, MemDevice, ZeroMode};
use sluice_testkit::crash::{DurabilityModel, SECTOR};
use sluice_types::splitmix64;

const UNIT: u64 = 4096;
const STRIPES: u64 = 12;
/// Past the superblock area (the data offset of a 4 KiB unit).
const MEMBER_BYTES: u64 = 4096 + STRIPES * UNIT;

/// Operations the process gets to do before it dies.
#[derive(Debug)]
struct Countdown {
    left: AtomicI64,
    dead: AtomicBool,
    /// The operation that dies writes the first half of its buffer (a
    /// torn write) instead of nothing.
    torn: bool,
}

impl Countdown {
    fn new(torn: bool) -> Arc<Self> {
        Arc::new(Self {
            left: AtomicI64::new(i64::MAX),
            dead: AtomicBool::new(false),
            torn,
        })
    }

    fn arm(&self, operations: i64) {
        self.left.store(operations, Ordering::SeqCst);
    }

    /// `Ok(true)`: go ahead; `Ok(false)`: this is the operation that
    /// dies; an error once dead.
    fn take(&self, op: IoOp) -> Result<bool, DeviceError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(dead(op));
        }
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            self.dead.store(true, Ordering::SeqCst);
            return Ok(false);
        }
        Ok(true)
    }
}

fn dead(op: IoOp) -> DeviceError {
    DeviceError::Io {
        device: "crashed process".into(),
        op,
        offset: 0,
        len: 0,
        source: std::io::Error::other("the process died"),
    }
}

/// A member or journal device of a process that dies at a countdown
/// shared by all of them.
#[derive(Debug)]
struct Crashing {
    inner: Arc<MemDevice>,
    countdown: Arc<Countdown>,
}

impl DeviceLayer for Crashing {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        if self.countdown.dead.load(Ordering::SeqCst) {
            return Err(dead(IoOp::Read));
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        if self.countdown.take(IoOp::Write)? {
            return self.inner.write_at(buf, offset, fua);
        }
        if self.countdown.torn {
            let half = (buf.len() / 2) / SECTOR * SECTOR;
            self.inner.write_at(&buf[..half], offset, false)?;
        }
        Err(dead(IoOp::Write))
    }
    fn flush(&self) -> Result<(), DeviceError> {
        if self.countdown.take(IoOp::Flush)? {
            return self.inner.flush();
        }
        Err(dead(IoOp::Flush))
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        if self.countdown.take(IoOp::WriteZeroes)? {
            return self.inner.write_zeroes(offset, length, mode);
        }
        Err(dead(IoOp::WriteZeroes))
    }
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        if self.countdown.take(IoOp::Trim)? {
            return self.inner.trim(offset, length, fua);
        }
        Err(dead(IoOp::Trim))
    }
}

/// What the devices held when the process died.
struct Images {
    members: Vec<Vec<u8>>,
    journal: Vec<u8>,
}

fn image(device: &MemDevice) -> Vec<u8> {
    let mut out = vec![0u8; device.size() as usize];
    device.read_at(&mut out, 0).expect("read image");
    out
}

fn from_image(bytes: &[u8]) -> Arc<MemDevice> {
    let device = Arc::new(MemDevice::new(bytes.len() as u64, false));
    device.write_at(bytes, 0, false).expect("write image");
    device
}

fn named(devices: &[Arc<dyn BlockDevice>]) -> Vec<NamedMember> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| NamedMember {
            name: format!("mem{i}"),
            device: Arc::clone(d),
        })
        .collect()
}

fn assemble(
    geometry: Geometry,
    members: &[Arc<dyn BlockDevice>],
    journal: Option<Arc<dyn BlockDevice>>,
) -> RaidDevice {
    let place = match journal {
        Some(device) => JournalPlace::Device {
            device,
            name: "journal".into(),
        },
        None => JournalPlace::Off,
    };
    RaidDevice::assemble_with_journal(geometry, named(members), Arc::new(ScopedFanOut), &place)
        .expect("assemble")
}

/// One partial-stripe write of the workload: (first sector, sectors).
fn partial_write(seed: u64, i: u64, data_members: u64) -> (u64, u64) {
    let sectors_per_unit = UNIT / SECTOR as u64;
    let stripe_sectors = sectors_per_unit * data_members;
    let r = splitmix64(seed ^ i.wrapping_mul(0x9e37_79b9));
    let stripe = r % STRIPES;
    let start = (r >> 8) % stripe_sectors;
    // Mostly inside one chunk, sometimes over chunks and (one in eight)
    // over the end of the stripe into the next; never a whole stripe.
    let most = if (r >> 20).is_multiple_of(8) {
        stripe_sectors
    } else {
        sectors_per_unit
    };
    let mut count = 1 + (r >> 32) % most;
    if start == 0 && count >= stripe_sectors {
        count = stripe_sectors - 1;
    }
    let first = stripe * stripe_sectors + start;
    let total = STRIPES * stripe_sectors;
    (first, count.min(total - first))
}

/// What one crash point found.
struct Outcome {
    /// The workload finished before the countdown ran out.
    finished: bool,
    /// Sectors that broke the model, over every member failed in turn.
    violations: usize,
    /// One of them, for the message.
    example: Option<String>,
}

/// Runs the workload until the process dies after `operations`
/// operations, then checks every restart with one member failed (RAID
/// 6: two, each member with the next).
fn crash_at(
    level: RaidLevel,
    members: usize,
    seed: u64,
    writes: u64,
    operations: i64,
    journal_on: bool,
) -> Outcome {
    let geometry = Geometry::new(level, members, UNIT).expect("geometry");
    let countdown = Countdown::new(operations % 2 == 1);
    let memory: Vec<Arc<MemDevice>> = (0..members)
        .map(|_| Arc::new(MemDevice::new(MEMBER_BYTES, false)))
        .collect();
    let journal_memory = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
    let crashing = |m: &Arc<MemDevice>| -> Arc<dyn BlockDevice> {
        Arc::new(Crashing {
            inner: Arc::clone(m),
            countdown: Arc::clone(&countdown),
        })
    };
    let devices: Vec<Arc<dyn BlockDevice>> = memory.iter().map(crashing).collect();
    create_array(geometry, &named(&devices), false).expect("create");
    let array = assemble(
        geometry,
        &devices,
        journal_on.then(|| crashing(&journal_memory)),
    );
    let sectors = array.size() / SECTOR as u64;
    let mut model = DurabilityModel::new(sectors);
    // Every block holds data first (full stripes: no journal entries).
    let mut buf = vec![0u8; array.size() as usize];
    let t = model.begin_write(0, sectors, &mut buf);
    array.write_at(&buf, 0, false).expect("prefill");
    model.write_acked(t, false);
    let f = model.begin_flush();
    array.flush().expect("flush");
    model.flush_acked(f);

    countdown.arm(operations);
    let data_members = geometry.data_members() as u64;
    let mut finished = true;
    for i in 0..writes {
        if i % 6 == 5 {
            let f = model.begin_flush();
            if array.flush().is_err() {
                finished = false;
                break;
            }
            model.flush_acked(f);
        }
        let (first, count) = partial_write(seed, i, data_members);
        let mut buf = vec![0u8; count as usize * SECTOR];
        let t = model.begin_write(first, count, &mut buf);
        if array
            .write_at(&buf, first * SECTOR as u64, i % 5 == 0)
            .is_err()
        {
            model.write_failed(t);
            finished = false;
            break;
        }
        model.write_acked(t, i % 5 == 0);
    }
    if finished {
        return Outcome {
            finished,
            violations: 0,
            example: None,
        };
    }
    // The process is dead: what it still does goes nowhere.
    drop(array);
    let images = Images {
        members: memory.iter().map(|m| image(m)).collect(),
        journal: image(&journal_memory),
    };
    let mut violations = 0;
    let mut example = None;
    for failed in 0..members {
        let devices: Vec<Arc<dyn BlockDevice>> = images
            .members
            .iter()
            .map(|b| from_image(b) as Arc<dyn BlockDevice>)
            .collect();
        let journal = journal_on.then(|| from_image(&images.journal) as Arc<dyn BlockDevice>);
        let array = assemble(geometry, &devices, journal);
        array.fail_member(failed).expect("fail a member");
        if level == RaidLevel::Raid6 {
            array
                .fail_member((failed + 1) % members)
                .expect("fail a second member");
        }
        let mut volume = vec![0u8; array.size() as usize];
        array.read_at(&mut volume, 0).expect("degraded read");
        let report = model.clone().check_after_crash(&volume);
        violations += report.violations.len();
        if example.is_none() {
            example = report
                .violations
                .first()
                .map(|v| format!("member {failed} failed: {v}"));
        }
    }
    Outcome {
        finished,
        violations,
        example,
    }
}

/// Crash points of one workload, from the first operation until the
/// workload finishes: (crash points, those that found violations, an
/// example).
fn every_crash_point(
    level: RaidLevel,
    members: usize,
    seed: u64,
    writes: u64,
    journal_on: bool,
) -> (u64, u64, String) {
    let mut points = 0;
    let mut broken = 0;
    let mut example = String::new();
    for operations in 0.. {
        let outcome = crash_at(level, members, seed, writes, operations, journal_on);
        if outcome.finished {
            break;
        }
        points += 1;
        if outcome.violations > 0 {
            broken += 1;
            if example.is_empty() {
                example = format!(
                    "crash after {operations} operations: {} sectors, e.g. {}",
                    outcome.violations,
                    outcome.example.unwrap_or_default()
                );
            }
        }
    }
    (points, broken, example)
}

/// (members, seed, writes) of each level's workloads.
fn workloads(level: RaidLevel) -> &'static [(usize, u64, u64)] {
    match level {
        RaidLevel::Raid6 => &[(4, 4, 60), (5, 5, 50)],
        _ => &[(3, 1, 70), (4, 2, 70), (5, 3, 50)],
    }
}

fn no_crash_point_corrupts_with_the_journal(level: RaidLevel) {
    let mut total = 0;
    for &(members, seed, writes) in workloads(level) {
        let (points, broken, example) = every_crash_point(level, members, seed, writes, true);
        eprintln!(
            "{level:?}, {members} members, journal on: {points} crash points, {broken} corrupted"
        );
        assert_eq!(
            broken, 0,
            "{level:?}, {members} members: {broken} of {points} crash points corrupted data: {example}"
        );
        total += points;
    }
    assert!(total >= 300, "only {total} crash points");
}

fn crashes_corrupt_without_the_journal(level: RaidLevel) {
    let mut total = 0;
    let mut broken_total = 0;
    for &(members, seed, writes) in workloads(level) {
        let (points, broken, example) = every_crash_point(level, members, seed, writes, false);
        eprintln!(
            "{level:?}, {members} members, journal off: {points} crash points, {broken} corrupted; {example}"
        );
        total += points;
        broken_total += broken;
    }
    assert!(total >= 300, "only {total} crash points");
    assert!(
        broken_total > 0,
        "no crash point of {total} corrupted data without the journal on {level:?}: the test cannot see the hole"
    );
}

#[test]
fn with_the_journal_no_crash_point_corrupts_blocks_not_being_written() {
    no_crash_point_corrupts_with_the_journal(RaidLevel::Raid5);
}

#[test]
fn without_the_journal_the_same_crashes_corrupt_blocks_not_being_written() {
    crashes_corrupt_without_the_journal(RaidLevel::Raid5);
}

#[test]
fn raid6_with_the_journal_no_crash_point_corrupts_blocks_not_being_written() {
    no_crash_point_corrupts_with_the_journal(RaidLevel::Raid6);
}

#[test]
fn raid6_without_the_journal_the_same_crashes_corrupt_blocks_not_being_written() {
    crashes_corrupt_without_the_journal(RaidLevel::Raid6);
}

/// Members and journal after a crash in the middle of a partial-stripe
/// write (the journal holds its stripe), and the geometry.
fn crashed_array() -> (Geometry, Images) {
    let geometry = Geometry::new(RaidLevel::Raid5, 3, UNIT).expect("geometry");
    let countdown = Countdown::new(false);
    let memory: Vec<Arc<MemDevice>> = (0..3)
        .map(|_| Arc::new(MemDevice::new(MEMBER_BYTES, false)))
        .collect();
    let journal = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
    let crashing = |m: &Arc<MemDevice>| -> Arc<dyn BlockDevice> {
        Arc::new(Crashing {
            inner: Arc::clone(m),
            countdown: Arc::clone(&countdown),
        })
    };
    let devices: Vec<Arc<dyn BlockDevice>> = memory.iter().map(crashing).collect();
    create_array(geometry, &named(&devices), false).expect("create");
    let array = assemble(geometry, &devices, Some(crashing(&journal)));
    // Journal write and sync, then the data write: dies at the parity.
    countdown.arm(3);
    array
        .write_at(&[7u8; 4096], 0, false)
        .expect_err("the process dies during the write");
    drop(array);
    let images = Images {
        members: memory.iter().map(|m| image(m)).collect(),
        journal: image(&journal),
    };
    (geometry, images)
}

#[test]
fn a_member_failing_during_the_resync_keeps_the_array_from_starting() {
    let (geometry, images) = crashed_array();
    let members: Vec<Arc<dyn BlockDevice>> = images
        .members
        .iter()
        .map(|b| {
            let rule = "write:eio:after=0".parse().expect("rule");
            Arc::new(sluice_storage::FaultInjectionDevice::new(
                from_image(b) as Arc<dyn BlockDevice>,
                "member",
                vec![rule],
            )) as Arc<dyn BlockDevice>
        })
        .collect();
    let place = JournalPlace::Device {
        device: from_image(&images.journal),
        name: "journal".into(),
    };
    let e = RaidDevice::assemble_with_journal(
        geometry,
        named(&members),
        Arc::new(ScopedFanOut),
        &place,
    )
    .expect_err("refused");
    let text = sluice_testkit::error_chain(&e);
    assert!(
        text.starts_with(
            "cannot resync stripe 0 after an unclean shutdown: member 2 (mem2) failed"
        ),
        "{text}"
    );
    assert!(text.contains("bring the member back"), "{text}");
    // The journal still holds the stripe: with the members well, the
    // next start resyncs it.
    let members: Vec<Arc<dyn BlockDevice>> = images
        .members
        .iter()
        .map(|b| from_image(b) as Arc<dyn BlockDevice>)
        .collect();
    let array = assemble(geometry, &members, Some(from_image(&images.journal)));
    let resynced = array
        .metrics()
        .into_iter()
        .find(|m| m.name == "raid_resynced_stripes_total")
        .expect("resync metric");
    assert_eq!(resynced.value, 1.0);
}

#[test]
fn a_journal_of_another_array_is_refused() {
    let (geometry, images) = crashed_array();
    let (_, other) = crashed_array();
    let members: Vec<Arc<dyn BlockDevice>> = images
        .members
        .iter()
        .map(|b| from_image(b) as Arc<dyn BlockDevice>)
        .collect();
    let place = JournalPlace::Device {
        device: from_image(&other.journal),
        name: "other.journal".into(),
    };
    let e = RaidDevice::assemble_with_journal(
        geometry,
        named(&members),
        Arc::new(ScopedFanOut),
        &place,
    )
    .expect_err("refused");
    let text = e.to_string();
    assert!(
        text.starts_with("journal other.journal belongs to array "),
        "{text}"
    );
}
