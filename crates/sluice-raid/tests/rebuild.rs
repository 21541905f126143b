//! Replacing a member and rebuilding it online, and scrubbing: the
//! rebuild cursor decides where writes go, a rebuild under concurrent
//! writes ends with every byte as a model says, a member marked
//! rebuilding is never read as data (also after the array is opened
//! again), and scrub finds and repairs a corrupted parity block.
//!
//! Tests that depend on time (the rate limit, how often progress is
//! recorded) give the array a `ManualClock` and move it themselves;
//! no test sleeps to let something happen, it waits for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sluice_raid::superblock::{MemberRole, Superblock, SUPERBLOCK_AREA};
use sluice_raid::{
    create_array, read_superblocks, ArrayCondition, Clock, Geometry, ManualClock, MemberCondition,
    NamedMember, RaidDevice, RaidLevel, ScopedFanOut, SystemClock,
};
use sluice_storage::{BlockDevice, MemDevice};

mod common;
use common::pattern;

const UNIT: u64 = 4096;
const MEMBER: u64 = 4 << 20;

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

fn geometry() -> Geometry {
    Geometry::new(RaidLevel::Raid5, 3, UNIT).expect("geometry")
}

/// Bounds every wait for the rebuild thread or the writers, so that a
/// rebuild that never does what a test waits for fails the test rather
/// than hangs it. Nothing waits for it to pass.
const HANG: Duration = Duration::from_secs(60);

/// Bytes one rebuild step writes to the new member: a run of 64
/// stripes (1 MiB of member data with 4 KiB units would be 256; 64 is
/// the most one step takes).
const RUN: u64 = 64 * UNIT;

fn assemble(devices: &[Arc<MemDevice>]) -> Arc<RaidDevice> {
    assemble_on(devices, Arc::new(SystemClock))
}

fn assemble_on(devices: &[Arc<MemDevice>], clock: Arc<dyn Clock>) -> Arc<RaidDevice> {
    assemble_as(geometry(), devices, clock)
}

fn assemble_as(
    geometry: Geometry,
    devices: &[Arc<MemDevice>],
    clock: Arc<dyn Clock>,
) -> Arc<RaidDevice> {
    Arc::new(
        RaidDevice::assemble(geometry, named(devices), Arc::new(ScopedFanOut))
            .expect("assemble")
            .with_clock(clock),
    )
}

/// A new array of three memory members, filled with a pattern (also
/// returned, as the model of the volume).
fn filled_array() -> (Arc<RaidDevice>, Vec<Arc<MemDevice>>, Vec<u8>) {
    filled_array_on(Arc::new(SystemClock))
}

/// [`filled_array`] reading time from `clock`.
fn filled_array_on(clock: Arc<dyn Clock>) -> (Arc<RaidDevice>, Vec<Arc<MemDevice>>, Vec<u8>) {
    filled_array_as(geometry(), clock)
}

/// [`filled_array_on`] of another geometry.
fn filled_array_as(
    geometry: Geometry,
    clock: Arc<dyn Clock>,
) -> (Arc<RaidDevice>, Vec<Arc<MemDevice>>, Vec<u8>) {
    let devices: Vec<Arc<MemDevice>> = (0..geometry.members())
        .map(|_| Arc::new(MemDevice::new(MEMBER, false)))
        .collect();
    create_array(geometry, &named(&devices), false).expect("create");
    let array = assemble_as(geometry, &devices, clock);
    let model = pattern(1, array.size() as usize);
    array.write_at(&model, 0, false).expect("fill");
    (array, devices, model)
}

/// A replacement member holding garbage, so reading it as data would
/// show.
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

/// A count another thread raises, for a test to wait on.
#[derive(Default)]
struct Counter {
    count: Mutex<u64>,
    raised: Condvar,
}

impl Counter {
    fn add(&self) {
        *self.count.lock().expect("counter") += 1;
        self.raised.notify_all();
    }

    fn get(&self) -> u64 {
        *self.count.lock().expect("counter")
    }

    /// Waits until the count is at least `n` (failing after [`HANG`]).
    fn wait_for(&self, n: u64, what: &str) {
        let count = self.count.lock().expect("counter");
        let (count, _) = self
            .raised
            .wait_timeout_while(count, HANG, |c| *c < n)
            .expect("counter");
        assert!(*count >= n, "{what}: {} of {n}", *count);
    }
}

fn superblock(device: &Arc<MemDevice>) -> Superblock {
    read_superblocks(&named(std::slice::from_ref(device)))
        .expect("read")
        .remove(0)
        .expect("superblock")
}

/// Volume offset of data chunk `k` of `stripe` and the member holding it.
fn chunk(stripe: u64, k: usize) -> (u64, usize) {
    let g = geometry();
    (
        (stripe * g.data_members() as u64 + k as u64) * UNIT,
        g.data_member(stripe, k),
    )
}

fn member_bytes(device: &MemDevice, stripe: u64) -> Vec<u8> {
    let mut buf = vec![0u8; UNIT as usize];
    device
        .read_at(&mut buf, SUPERBLOCK_AREA + stripe * UNIT)
        .expect("read member");
    buf
}

#[test]
fn the_cursor_decides_where_writes_go() {
    let (array, devices, mut model) = filled_array();
    array.fail_member(1).expect("fail");
    let new = garbage_member();
    replace(&array, 1, &new);
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Rebuilding);
    assert_eq!(status.members[1].state, MemberCondition::Rebuilding);
    assert_eq!(status.rebuild.as_ref().map(|r| r.done_bytes), Some(0));
    let sb = superblock(&new);
    assert_eq!(sb.roles[1], MemberRole::Rebuilding);
    assert_eq!(sb.index, 1);
    assert_ne!(sb.member_uuid, superblock(&devices[1]).member_uuid);
    assert_eq!(sb.events, superblock(&devices[0]).events);

    // Nothing rebuilt: the garbage on the new member is never read.
    assert_reads(&array, &model);

    // One step rebuilds the first run of stripes (1 MiB of member data
    // with 4 KiB units: 64 stripes, the most one step takes).
    let written = array.rebuild_step().expect("a step");
    assert_eq!(written, 64 * UNIT);
    let done = array.status().rebuild.expect("rebuilding").done_bytes;
    assert_eq!(done, 64 * UNIT);

    // Stripes whose chunk is on member 1 below and past the cursor.
    let below = (0..64)
        .find(|&s| (0..2).any(|k| chunk(s, k).1 == 1))
        .expect("below");
    let past = (64..128)
        .find(|&s| (0..2).any(|k| chunk(s, k).1 == 1))
        .expect("past");
    for stripe in [below, past] {
        let k = (0..2).find(|&k| chunk(stripe, k).1 == 1).expect("k");
        let (at, _) = chunk(stripe, k);
        let data = pattern(stripe + 7, UNIT as usize);
        let before = member_bytes(&new, stripe);
        array.write_at(&data, at, false).expect("write");
        model[at as usize..(at + UNIT) as usize].copy_from_slice(&data);
        let after = member_bytes(&new, stripe);
        if stripe == below {
            assert_eq!(
                after, data,
                "a rebuilt stripe's write reaches the new member"
            );
        } else {
            assert_eq!(after, before, "a stripe not rebuilt is written degraded");
        }
    }
    assert_reads(&array, &model);

    while array.rebuild_step().is_some() {}
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Clean);
    assert_eq!(status.members[1].state, MemberCondition::Active);
    assert!(status.rebuild.is_none());
    let sb = superblock(&new);
    assert_eq!(sb.roles, vec![MemberRole::Active; 3]);
    assert!(sb.events > superblock(&devices[1]).events);

    // The new member holds the data: reading with another member failed
    // reconstructs through it.
    array.fail_member(0).expect("fail 0");
    assert_reads(&array, &model);
}

#[test]
fn a_rebuild_under_concurrent_writes_matches_the_model() {
    rebuild_under_concurrent_writes(geometry(), 0);
}

/// RAID 10 (near layout, two copies, two mirror sets): member 2 is
/// replaced and copied from its set's other member, 3, which fails
/// after, so the reads of that set come from the rebuilt member.
#[test]
fn a_raid10_rebuild_under_concurrent_writes_matches_the_model() {
    let geometry =
        Geometry::new(RaidLevel::Raid10 { copies: 2 }, 4, UNIT).expect("raid10 geometry");
    rebuild_under_concurrent_writes(geometry, 3);
}

/// Member 2 of an array of `geometry` fails and is replaced by a member
/// of garbage, rebuilt while two writers write and read; the volume
/// matches the model after, and still does once `then_fail` fails (so
/// what member 2 holds is read).
fn rebuild_under_concurrent_writes(geometry: Geometry, then_fail: usize) {
    const RATE: u64 = 8 << 20;
    let clock = Arc::new(ManualClock::new());
    let (array, _devices, model) = filled_array_as(geometry, clock.clone());
    array.fail_member(2).expect("fail");
    let new = garbage_member();
    replace(&array, 2, &new);
    // The rate limit pauses the rebuild thread after every run until
    // the clock is moved on: the writers overlap the whole rebuild.
    array.set_rebuild_rate(RATE);
    let size = array.size();
    let stop = Arc::new(AtomicBool::new(false));
    let half = size / 2 / UNIT * UNIT;
    let counters: Vec<Arc<Counter>> = (0..2).map(|_| Arc::default()).collect();
    let writers: Vec<_> = (0..2u64)
        .map(|t| {
            let array = array.clone();
            let stop = stop.clone();
            let writes = counters[t as usize].clone();
            let mut model = model[(t * half) as usize..((t + 1) * half) as usize].to_vec();
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let seed = t * 1_000_000 + i;
                    let len = 512 * (1 + (seed * 7919) % 40);
                    let at = (seed * 104_729 * 512) % (half - len) / 512 * 512;
                    let data = pattern(seed, len as usize);
                    array
                        .write_at(&data, t * half + at, false)
                        .expect("write during rebuild");
                    model[at as usize..(at + len) as usize].copy_from_slice(&data);
                    let check = (seed * 31 * 512) % (half - 8192) / 512 * 512;
                    let mut got = vec![0u8; 8192];
                    array
                        .read_at(&mut got, t * half + check)
                        .expect("read during rebuild");
                    assert_eq!(
                        got,
                        &model[check as usize..check as usize + 8192],
                        "read during rebuild"
                    );
                    writes.add();
                }
                (t, model, i)
            })
        })
        .collect();
    let total = array.status().rebuild.expect("rebuilding").total_bytes;
    assert!(array.start_rebuild());
    let steps = total.div_ceil(RUN);
    assert!(steps > 2, "{steps} steps");
    for step in 1..=steps {
        // After each run the thread sleeps what the run's bytes take at
        // the rate (the clock stands still, so the run took no time).
        let left = clock
            .wait_for_sleeper(HANG)
            .unwrap_or_else(|| panic!("the rebuild did not pause after run {step}"));
        let done = (step * RUN).min(total);
        let written = done - (step - 1) * RUN;
        assert_eq!(left, Duration::from_secs_f64(written as f64 / RATE as f64));
        let status = array.status();
        assert_eq!(status.state, ArrayCondition::Rebuilding);
        let progress = status.rebuild.expect("rebuilding");
        assert_eq!(
            progress.done_bytes, done,
            "status shows the rebuild part-way"
        );
        // Writes land while the rebuild pauses (and while it runs).
        for (t, writes) in counters.iter().enumerate() {
            writes.wait_for(writes.get() + 5, &format!("writes of writer {t}"));
        }
        clock.advance(left);
    }
    // The thread's next step ends the rebuild; this one returns once it
    // has (both take the rebuild's run lock), or ends it itself.
    assert!(array.rebuild_step().is_none());
    assert_eq!(array.status().state, ArrayCondition::Clean);
    assert!(array.status().rebuild.is_none());
    stop.store(true, Ordering::SeqCst);
    let mut whole = model.clone();
    for w in writers {
        let (t, part, writes) = w.join().expect("writer");
        assert!(writes > 10, "writer {t} wrote only {writes} times");
        whole[(t * half) as usize..((t + 1) * half) as usize].copy_from_slice(&part);
    }
    assert_reads(&array, &whole);
    // The scrub keeps the rate too: unlimited, it never waits on the
    // clock.
    array.set_rebuild_rate(0);
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    // Chunks of the failed member come through the rebuilt one now.
    array.fail_member(then_fail).expect("fail another member");
    assert_reads(&array, &whole);
}

#[test]
fn an_array_closed_during_a_rebuild_resumes_it() {
    let (array, devices, model) = filled_array();
    array.fail_member(0).expect("fail");
    let new = garbage_member();
    replace(&array, 0, &new);
    array.rebuild_step().expect("a step");
    array.rebuild_step().expect("a step");
    drop(array);
    assert_eq!(superblock(&new).rebuilt, 128, "closing records the cursor");
    let members = [new.clone(), devices[1].clone(), devices[2].clone()];
    let array = assemble(&members);
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Rebuilding);
    assert_eq!(
        status.rebuild.as_ref().map(|r| (r.member, r.done_bytes)),
        Some((0, 128 * UNIT))
    );
    assert_reads(&array, &model);
    // The old member is refused: it missed the changes.
    let old = [devices[0].clone(), devices[1].clone(), devices[2].clone()];
    let refused = RaidDevice::assemble(geometry(), named(&old), Arc::new(ScopedFanOut));
    assert!(refused.is_err(), "the replaced member is refused");
    let mut steps = 0;
    while array.rebuild_step().is_some() {
        steps += 1;
    }
    let runs = (array.size() / (2 * UNIT)).div_ceil(64);
    assert_eq!(steps, runs - 2, "resumed past the two runs rebuilt");
    assert_eq!(array.status().state, ArrayCondition::Clean);
    drop(array);
    let array = assemble(&members);
    assert_eq!(array.status().state, ArrayCondition::Clean);
    array.fail_member(1).expect("fail 1");
    assert_reads(&array, &model);
}

#[test]
fn a_crash_during_a_rebuild_resumes_from_the_progress_recorded() {
    let clock = Arc::new(ManualClock::new());
    let (array, devices, mut model) = filled_array_on(clock.clone());
    array.fail_member(2).expect("fail");
    let new = garbage_member();
    replace(&array, 2, &new);
    // Progress is recorded at most once a second.
    array.rebuild_step().expect("a step");
    assert_eq!(superblock(&new).rebuilt, 0, "recorded before a second");
    clock.advance(Duration::from_secs(1));
    array.rebuild_step().expect("a step");
    assert_eq!(superblock(&new).rebuilt, 128, "recorded after a second");
    clock.advance(Duration::from_millis(999));
    array.rebuild_step().expect("a step");
    assert_eq!(superblock(&new).rebuilt, 128, "not recorded again so soon");
    // Writes after the record, below the live cursor (so on the new
    // member) and past it.
    for (i, stripe) in [150u64, 400].into_iter().enumerate() {
        let at = stripe * 2 * UNIT;
        let data = pattern(50 + i as u64, 2 * UNIT as usize);
        array.write_at(&data, at, false).expect("write");
        model[at as usize..(at + 2 * UNIT) as usize].copy_from_slice(&data);
    }
    // The server dies: nothing of the array's shutdown runs.
    std::mem::forget(array);
    let members = [devices[0].clone(), devices[1].clone(), new.clone()];
    let array = assemble(&members);
    assert_eq!(
        array.status().rebuild.map(|r| r.done_bytes),
        Some(128 * UNIT),
        "resumes where the superblocks say"
    );
    assert_reads(&array, &model);
    while array.rebuild_step().is_some() {}
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    array.fail_member(0).expect("fail 0");
    assert_reads(&array, &model);
}

#[test]
fn another_failure_during_a_rebuild_gives_errors_not_data() {
    let (array, _devices, _model) = filled_array();
    array.fail_member(1).expect("fail");
    let new = garbage_member();
    replace(&array, 1, &new);
    array.rebuild_step().expect("a step");
    array
        .fail_member(0)
        .expect("the rebuilding member goes first");
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Failed);
    assert_eq!(status.members[1].state, MemberCondition::Failed);
    assert!(array.rebuild_step().is_none());
    let mut buf = vec![0u8; array.size() as usize];
    assert!(array.read_at(&mut buf, 0).is_err());
}

#[test]
fn replacing_needs_redundancy_and_one_rebuild_at_a_time() {
    let (array, _devices, _model) = filled_array();
    let new = garbage_member();
    // Replacing a working member fails it first.
    replace(&array, 2, &new);
    assert_eq!(array.status().members[2].state, MemberCondition::Rebuilding);
    let other = garbage_member();
    let e = array
        .replace_member(
            0,
            NamedMember {
                name: "other".into(),
                device: other,
            },
        )
        .expect_err("one rebuild at a time");
    assert!(e.to_string().contains("member 2 is being rebuilt"), "{e}");
    let small = Arc::new(MemDevice::new(1 << 20, false));
    while array.rebuild_step().is_some() {}
    array.fail_member(0).expect("fail 0");
    let e = array
        .replace_member(
            0,
            NamedMember {
                name: "small".into(),
                device: small,
            },
        )
        .expect_err("too small");
    assert!(
        e.to_string().contains("member 0 (small) has 1048576 bytes"),
        "{e}"
    );
}

#[test]
fn scrub_finds_and_repairs_a_corrupted_parity_block() {
    let (array, devices, model) = filled_array();
    let report = array.scrub(false).expect("scrub");
    assert_eq!(report.stripes, array.size() / (2 * UNIT));
    assert_eq!(report.mismatches, 0);

    let stripe = 5;
    let parity = geometry().parity_member(stripe).expect("parity");
    let at = SUPERBLOCK_AREA + stripe * UNIT + 100;
    devices[parity]
        .write_at(b"corrupt", at, false)
        .expect("corrupt");
    // The data is untouched: reads do not use parity.
    assert_reads(&array, &model);

    for _ in 0..2 {
        let report = array.scrub(false).expect("scrub");
        assert_eq!((report.mismatches, report.repaired), (1, 0));
    }
    let status = array.status().scrub.expect("scrub ran");
    assert!(!status.running);
    assert_eq!(
        (status.done_stripes, status.mismatches),
        (report_stripes(&array), 1)
    );

    let report = array.scrub(true).expect("repair");
    assert_eq!((report.mismatches, report.repaired), (1, 1));
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    // Parity is right again: the data member of the stripe can be lost.
    let (offset, member) = chunk(stripe, 0);
    array.fail_member(member).expect("fail");
    let mut got = vec![0u8; UNIT as usize];
    array.read_at(&mut got, offset).expect("read");
    assert_eq!(got, &model[offset as usize..(offset + UNIT) as usize]);
}

fn report_stripes(array: &RaidDevice) -> u64 {
    array.size() / (2 * UNIT)
}

#[test]
fn zeroing_whole_stripes_across_the_cursor_keeps_the_new_member_right() {
    let (array, _devices, mut model) = filled_array();
    array.fail_member(1).expect("fail");
    let new = garbage_member();
    replace(&array, 1, &new);
    array.rebuild_step().expect("a step");
    // Stripes 32..96: half below the cursor (64), half past it.
    let stripe_bytes = 2 * UNIT;
    let (at, len) = (32 * stripe_bytes, 64 * stripe_bytes);
    array
        .write_zeroes(
            at,
            len,
            sluice_storage::ZeroMode {
                may_trim: true,
                fast: false,
                fua: false,
            },
        )
        .expect("zero");
    model[at as usize..(at + len) as usize].fill(0);
    assert_reads(&array, &model);
    while array.rebuild_step().is_some() {}
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    array.fail_member(2).expect("fail 2");
    assert_reads(&array, &model);
}

#[test]
fn a_write_into_the_read_ahead_is_not_lost() {
    let (array, _devices, mut model) = filled_array();
    array.fail_member(1).expect("fail");
    let new = garbage_member();
    replace(&array, 1, &new);
    // Writes the first run and reads the second one ahead.
    array.rebuild_step().expect("a step");
    assert_eq!(
        array.status().rebuild.map(|r| r.done_bytes),
        Some(64 * UNIT)
    );
    // Written (degraded, past the cursor) after the rebuild read them:
    // a partial write of member 1's chunk, a whole stripe, and zeroes.
    let (at, member) = (64..128)
        .map(|s| chunk(s, 0))
        .find(|&(_, m)| m == 1)
        .expect("a chunk of member 1");
    assert_eq!(member, 1);
    let data = pattern(5, 1000);
    array.write_at(&data, at + 100, false).expect("write");
    model[(at + 100) as usize..(at + 1100) as usize].copy_from_slice(&data);
    let whole = 90 * 2 * UNIT;
    let data = pattern(6, 2 * UNIT as usize);
    array.write_at(&data, whole, false).expect("write");
    model[whole as usize..(whole + 2 * UNIT) as usize].copy_from_slice(&data);
    let zeroed = 100 * 2 * UNIT;
    array
        .write_zeroes(
            zeroed,
            4 * 2 * UNIT,
            sluice_storage::ZeroMode {
                may_trim: false,
                fast: false,
                fua: false,
            },
        )
        .expect("zero");
    model[zeroed as usize..(zeroed + 8 * UNIT) as usize].fill(0);
    while array.rebuild_step().is_some() {}
    assert_eq!(array.status().state, ArrayCondition::Clean);
    // Member 1 is read directly now: a stale read-ahead written to it
    // would show here.
    assert_reads(&array, &model);
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
}

#[test]
fn writes_racing_a_pipelined_rebuild_match_the_model() {
    let (array, _devices, model) = filled_array();
    array.fail_member(0).expect("fail");
    let new = garbage_member();
    replace(&array, 0, &new);
    array.set_rebuild_rate(0);
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(Counter::default());
    let stripes = array.size() / (2 * UNIT);
    // One writer, always just past the cursor: in the run being
    // written or the one read ahead, the stripes the pipeline has read
    // but not yet made current on the new member.
    let writer = {
        let array = array.clone();
        let stop = stop.clone();
        let writes = writes.clone();
        let mut model = model.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let cursor = array.status().rebuild.map_or(0, |r| r.done_bytes / UNIT);
                let stripe = (cursor + (i * 37) % 128).min(stripes - 1);
                let len = 512 * (1 + (i * 7919) % 24);
                let at = stripe * 2 * UNIT + (i * 512) % (2 * UNIT);
                let at = at.min(array.size() - len);
                let data = pattern(1000 + i, len as usize);
                array.write_at(&data, at, false).expect("write");
                model[at as usize..(at + len) as usize].copy_from_slice(&data);
                writes.add();
            }
            (model, i)
        })
    };
    let mut steps = 0;
    while array.rebuild_step().is_some() {
        steps += 1;
        // Let the writer land in the read-ahead: of four more writes,
        // the last three chose their stripe after this step moved the
        // cursor.
        writes.wait_for(writes.get() + 4, "writes after a step");
    }
    stop.store(true, Ordering::SeqCst);
    let (model, writes) = writer.join().expect("writer");
    assert!(steps > 1 && writes > 10, "{steps} steps, {writes} writes");
    assert_eq!(array.status().state, ArrayCondition::Clean);
    assert_reads(&array, &model);
    assert_eq!(array.scrub(false).expect("scrub").mismatches, 0);
    // The rebuilt member holds its part: lose another and read.
    array.fail_member(1).expect("fail 1");
    assert_reads(&array, &model);
}

#[test]
fn a_restart_naming_the_replaced_member_is_told_the_replacement() {
    let (array, devices, model) = filled_array();
    array.fail_member(1).expect("fail");
    let new = garbage_member();
    replace(&array, 1, &new);
    while array.rebuild_step().is_some() {}
    drop(array);
    // The member list still names the old member (as `--export` would
    // after `sluice raid replace`): refused, naming the replacement.
    let old = [devices[0].clone(), devices[1].clone(), devices[2].clone()];
    let e = RaidDevice::assemble(geometry(), named(&old), Arc::new(ScopedFanOut))
        .expect_err("the replaced member is refused");
    assert!(
        e.to_string()
            .contains("member 1 (mem1) was replaced by new1: the array's other members record the replacement in its place; give it instead of mem1"),
        "{e}"
    );
    // Named as the superblocks say, it starts.
    let members = [devices[0].clone(), new.clone(), devices[2].clone()];
    let mut given = named(&members);
    given[1].name = "new1".into();
    let array = Arc::new(
        RaidDevice::assemble(geometry(), given, Arc::new(ScopedFanOut)).expect("assemble"),
    );
    assert_eq!(array.status().state, ArrayCondition::Clean);
    assert_reads(&array, &model);
}
