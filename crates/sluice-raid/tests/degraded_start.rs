//! Starting a RAID 5 array with a member missing, or a RAID 6 array with
//! one or two (not reachable at start): it runs degraded when the others
//! agree and the array was shut down cleanly or its journal holds no
//! stripe; it is refused when stripes may have parity that does not
//! match their data (as md refuses a dirty degraded start), unless asked
//! to start anyway.

use std::sync::Arc;

use sluice_raid::journal::JOURNAL_BYTES;
use sluice_raid::superblock::MemberRole;
use sluice_raid::{
    create_array, read_superblocks, ArrayCondition, Geometry, JournalPlace, MemberCondition,
    NamedMember, RaidDevice, RaidError, RaidLevel, ScopedFanOut,
};
use sluice_storage::{BlockDevice, MemDevice};

mod common;
use common::pattern;

const UNIT: u64 = 4096;
const MEMBER: u64 = 1 << 20;

struct Setup {
    geometry: Geometry,
    devices: Vec<Arc<MemDevice>>,
    journal: Arc<MemDevice>,
}

impl Setup {
    /// RAID 5 over three members.
    fn new() -> Self {
        Self::of(RaidLevel::Raid5, 3)
    }

    fn of(level: RaidLevel, members: usize) -> Self {
        let devices: Vec<Arc<MemDevice>> = (0..members)
            .map(|_| Arc::new(MemDevice::new(MEMBER, false)))
            .collect();
        let setup = Self {
            geometry: Geometry::new(level, members, UNIT).expect("geometry"),
            devices,
            journal: Arc::new(MemDevice::new(JOURNAL_BYTES, false)),
        };
        create_array(setup.geometry, &setup.given(None), false).expect("create");
        setup
    }

    /// The members, named, member `missing` left out.
    fn given(&self, missing: Option<usize>) -> Vec<NamedMember> {
        self.devices
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != missing)
            .map(|(i, d)| NamedMember {
                name: format!("mem{i}"),
                device: d.clone(),
            })
            .collect()
    }

    fn start(
        &self,
        missing: &[usize],
        journal: bool,
        start_dirty_degraded: bool,
    ) -> Result<RaidDevice, RaidError> {
        let members = self
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if missing.contains(&i) {
                    Err(format!("mem{i}"))
                } else {
                    Ok(NamedMember {
                        name: format!("mem{i}"),
                        device: d.clone(),
                    })
                }
            })
            .collect();
        let place = if journal {
            JournalPlace::Device {
                device: self.journal.clone(),
                name: "journal".into(),
            }
        } else {
            JournalPlace::Off
        };
        RaidDevice::assemble_with_missing(
            self.geometry,
            members,
            Arc::new(ScopedFanOut),
            &place,
            start_dirty_degraded,
        )
    }

    /// Starts with every member, writes a model over the volume and a
    /// partial-stripe write (which the journal keeps), and returns both.
    fn written(&self, journal: bool) -> (RaidDevice, Vec<u8>) {
        let array = self.start(&[], journal, false).expect("start");
        let mut model = pattern(1, array.size() as usize);
        array.write_at(&model, 0, false).expect("fill");
        let data = pattern(2, 700);
        array.write_at(&data, 5 * UNIT + 300, false).expect("write");
        model[(5 * UNIT + 300) as usize..(5 * UNIT + 1000) as usize].copy_from_slice(&data);
        array.flush().expect("flush");
        (array, model)
    }
}

fn assert_reads(array: &RaidDevice, model: &[u8]) {
    let mut got = vec![0u8; model.len()];
    array.read_at(&mut got, 0).expect("read");
    let first = got.iter().zip(model).position(|(a, b)| a != b);
    assert_eq!(first, None, "volume differs from the model at this byte");
}

#[test]
fn a_clean_array_starts_degraded_and_the_missing_member_must_be_replaced() {
    let setup = Setup::new();
    let (array, model) = setup.written(true);
    drop(array);
    let array = setup.start(&[1], true, false).expect("starts degraded");
    let status = array.status();
    assert_eq!(status.state, ArrayCondition::Degraded);
    assert_eq!(status.members[1].state, MemberCondition::Missing);
    assert_reads(&array, &model);
    // Writes go on degraded.
    let mut model = model;
    let data = pattern(3, 5000);
    array
        .write_at(&data, 12_345, false)
        .expect("write degraded");
    model[12_345..17_345].copy_from_slice(&data);
    assert_reads(&array, &model);
    drop(array);
    // The others record it failed: coming back, it is refused.
    let sb = read_superblocks(&setup.given(Some(1)))
        .expect("read")
        .remove(0)
        .expect("superblock");
    assert_eq!(sb.roles[1], MemberRole::Failed);
    let e = setup
        .start(&[], true, false)
        .expect_err("the member missed writes");
    assert!(e.to_string().contains("member 1 (mem1)"), "{e}");
}

#[test]
fn a_dirty_journal_refuses_a_degraded_start_unless_forced() {
    let setup = Setup::new();
    let (array, model) = setup.written(true);
    // The server dies: the journal keeps the stripe it wrote partially.
    std::mem::forget(array);
    let e = setup
        .start(&[2], true, false)
        .expect_err("dirty and degraded");
    let text = e.to_string();
    assert!(
        text.starts_with("member 2 (mem2) is missing and the journal journal holds 1 stripes being written when the array was last open"),
        "{text}"
    );
    assert!(text.contains("start-dirty-degraded"), "{text}");
    // Asked to, it starts degraded anyway.
    let array = setup.start(&[2], true, true).expect("forced");
    assert_eq!(array.status().state, ArrayCondition::Degraded);
    // Stripe 5's parity matched (the write finished before the crash),
    // so everything reads back.
    assert_reads(&array, &model);
}

#[test]
fn an_unclean_shutdown_without_a_journal_refuses_a_degraded_start() {
    let setup = Setup::new();
    let (array, model) = setup.written(false);
    std::mem::forget(array);
    let e = setup
        .start(&[0], false, false)
        .expect_err("dirty and degraded");
    assert!(
        e.to_string().starts_with(
            "member 0 (mem0) is missing and the array was not shut down cleanly and has no journal"
        ),
        "{e}"
    );
    let array = setup.start(&[0], false, true).expect("forced");
    assert_reads(&array, &model);
}

#[test]
fn two_members_missing_are_refused() {
    let setup = Setup::new();
    drop(setup.written(true).0);
    let e = setup.start(&[0, 2], true, true).expect_err("too many");
    assert!(
        matches!(e, RaidError::TooManyMissing { missing: 2, .. }),
        "{e}"
    );
}

#[test]
fn raid6_dirty_and_degraded_by_one_or_two_is_refused_unless_forced() {
    for missing in [&[2][..], &[0, 3]] {
        let setup = Setup::of(RaidLevel::Raid6, 5);
        let (array, model) = setup.written(true);
        // The server dies: the journal keeps the stripe it wrote partially.
        std::mem::forget(array);
        let e = setup
            .start(missing, true, false)
            .expect_err("dirty and degraded");
        let first = missing[0];
        assert!(
            e.to_string().starts_with(&format!(
                "member {first} (mem{first}) is missing and the journal"
            )),
            "{e}"
        );
        assert!(e.to_string().contains("start-dirty-degraded"), "{e}");
        let array = setup.start(missing, true, true).expect("forced");
        assert_eq!(array.status().state, ArrayCondition::Degraded);
        for &m in missing {
            assert_eq!(array.status().members[m].state, MemberCondition::Missing);
        }
        // The partial write finished before the crash: P and Q matched,
        // so every chunk of the missing members reads back.
        assert_reads(&array, &model);
    }
}

#[test]
fn raid6_unclean_shutdown_without_a_journal_refuses_a_degraded_start() {
    let setup = Setup::of(RaidLevel::Raid6, 4);
    let (array, model) = setup.written(false);
    std::mem::forget(array);
    let e = setup
        .start(&[1, 2], false, false)
        .expect_err("dirty and degraded");
    assert!(
        e.to_string()
            .contains("the array was not shut down cleanly and has no journal"),
        "{e}"
    );
    let array = setup.start(&[1, 2], false, true).expect("forced");
    assert_reads(&array, &model);
}

#[test]
fn raid6_three_members_missing_are_refused() {
    let setup = Setup::of(RaidLevel::Raid6, 5);
    drop(setup.written(true).0);
    let e = setup.start(&[0, 2, 4], true, true).expect_err("too many");
    assert!(
        matches!(e, RaidError::TooManyMissing { missing: 3, .. }),
        "{e}"
    );
}
