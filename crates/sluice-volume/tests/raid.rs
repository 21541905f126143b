//! Arrays of remote members: specs naming `nbd://` exports on
//! in-process servers are created (superblocks written) and open as RAID
//! volumes that pass the conformance suite, their member I/O batched
//! over the members' clients.

use std::sync::Arc;

use sluice_raid::superblock::{MemberRole, Superblock};
use sluice_storage::{
    BlockDevice, Capability, DeviceError, DeviceLayer, FaultInjectionDevice, FaultRule, IoOp,
    MemDevice, ZeroMode,
};
use sluice_testkit::conformance::{Access, Subject};
use sluice_testkit::test_server::TestServer;
use sluice_testkit::GatedDevice;
use sluice_volume::{VolumeBuilder, VolumeSpec};

/// A builder whose arrays keep their journals under the system's
/// temporary folder, not the working directory.
fn builder() -> VolumeBuilder {
    VolumeBuilder::default().with_journal_dir(std::env::temp_dir().join("sluice-volume-tests"))
}

/// A member server: memory behind one export `m`.
struct Member {
    memory: Arc<MemDevice>,
    server: TestServer,
}

fn serve(device: Arc<dyn BlockDevice>) -> TestServer {
    TestServer::builder().export("m", device).start()
}

fn members(n: usize, size: u64) -> Vec<Member> {
    (0..n)
        .map(|_| {
            let memory = Arc::new(MemDevice::new(size, false));
            Member {
                server: serve(memory.clone()),
                memory,
            }
        })
        .collect()
}

fn spec(level: &str, unit: &str, servers: &[&TestServer]) -> VolumeSpec {
    let uris: Vec<String> = servers.iter().map(|s| s.uri("m")).collect();
    format!("{level}:unit={unit},members={}", uris.join(","))
        .parse()
        .expect("spec")
}

fn spec_of(level: &str, unit: &str, members: &[Member]) -> VolumeSpec {
    spec(
        level,
        unit,
        &members.iter().map(|m| &m.server).collect::<Vec<_>>(),
    )
}

/// A device that refuses every change, exported for read-only arrays.
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
        Err(refuse(IoOp::Write))
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> Result<(), DeviceError> {
        Err(refuse(IoOp::Trim))
    }
    fn write_zeroes(&self, _: u64, _: u64, _: ZeroMode) -> Result<(), DeviceError> {
        Err(refuse(IoOp::WriteZeroes))
    }
}

fn refuse(op: IoOp) -> DeviceError {
    DeviceError::ReadOnly {
        device: "frozen member".into(),
        op,
    }
}

fn remote_array(level: &'static str, n: usize, unit: &'static str) -> impl Fn(Access) -> Subject {
    move |access| {
        let members = members(n, 4 << 20);
        let writable = spec_of(level, unit, &members);
        let builder = builder();
        builder
            .create_raid(&writable, false)
            .expect("create the array");
        if access == Access::ReadWrite {
            let device = builder.open("array", &writable).expect("open the array");
            return Subject::new(device).keeping(members);
        }
        // The same memory behind read-only exports.
        let frozen: Vec<TestServer> = members
            .iter()
            .map(|m| serve(Arc::new(Frozen(m.memory.clone()))))
            .collect();
        let device = builder
            .open(
                "array",
                &spec(level, unit, &frozen.iter().collect::<Vec<_>>()),
            )
            .expect("open the read-only array");
        Subject::new(device).keeping((members, frozen))
    }
}

/// An array (`level`) over three member servers (five for RAID 6, four
/// for RAID 10) whose member 1 answers EIO to everything after its
/// first 60 requests, and on RAID 10 member 3 after its first 120 too
/// (one member of each mirror set; `seen` keeps their devices, to check
/// they did fail).
fn remote_failing_into(
    level: &'static str,
    access: Access,
    seen: Option<&std::sync::Mutex<Vec<Arc<FaultInjectionDevice>>>>,
) -> Subject {
    let (width, failing): (usize, &[(usize, &str)]) = match level {
        "raid6" => (5, &[(1, "all:eio:after=60")]),
        "raid10" => (4, &[(1, "all:eio:after=60"), (3, "all:eio:after=120")]),
        _ => (3, &[(1, "all:eio:after=60")]),
    };
    if access == Access::ReadOnly {
        return remote_array(level, width, "4K")(access);
    }
    let mut members = members(width, 4 << 20);
    for &(index, rule) in failing {
        let rule: FaultRule = rule.parse().expect("fault rule");
        let failing = Arc::new(FaultInjectionDevice::new(
            members[index].memory.clone(),
            format!("member {index}"),
            vec![rule],
        ));
        if let Some(seen) = seen {
            seen.lock().expect("not poisoned").push(failing.clone());
        }
        members[index].server = serve(failing);
    }
    let spec = spec_of(level, "4K", &members);
    let builder = builder();
    builder.create_raid(&spec, false).expect("create the array");
    let device = builder.open("array", &spec).expect("open the array");
    Subject::new(device).keeping(members)
}

fn remote_failing(level: &'static str) -> impl Fn(Access) -> Subject {
    move |access| remote_failing_into(level, access, None)
}

#[test]
fn the_failing_remote_member_does_fail_during_the_suite() {
    for (level, failing) in [("raid1", 1), ("raid5", 1), ("raid6", 1), ("raid10", 2)] {
        let seen = std::sync::Mutex::new(Vec::new());
        let factory = |access| remote_failing_into(level, access, Some(&seen));
        assert_eq!(
            sluice_testkit::conformance::operation_sequences_match_a_model(&factory),
            Ok(sluice_testkit::conformance::Outcome::Passed)
        );
        let seen = seen.lock().expect("not poisoned");
        // Each subject built pushed its failing members in turn: in one
        // they must all have failed.
        assert!(
            seen.chunks(failing)
                .any(|built| built.iter().all(|m| m.injected() > 0)),
            "the failing members of {level} never all failed: the array never ran that degraded"
        );
    }
}

sluice_testkit::conformance_tests! {
    remote_raid5_of_3 => remote_array("raid5", 3, "64K"),
    remote_raid0_of_2 => remote_array("raid0", 2, "4K"),
    remote_raid5_member_fails_mid_run => remote_failing("raid5"),
    remote_raid6_of_4 => remote_array("raid6", 4, "64K"),
    remote_raid6_of_5 => remote_array("raid6", 5, "4K"),
    remote_raid6_member_fails_mid_run => remote_failing("raid6"),
    remote_raid1_of_2 => remote_array("raid1", 2, "64K"),
    remote_raid1_of_3 => remote_array("raid1", 3, "4K"),
    remote_raid1_member_fails_mid_run => remote_failing("raid1"),
    remote_raid10_of_4 => remote_array("raid10", 4, "64K"),
    remote_raid10_of_6 => remote_array("raid10", 6, "4K"),
    remote_raid10_one_of_each_set_fails_mid_run => remote_failing("raid10"),
}

#[test]
fn an_unreachable_member_is_named() {
    let members = members(2, 1 << 20);
    let mut uris: Vec<String> = members.iter().map(|m| m.server.uri("m")).collect();
    uris.push(members[0].server.uri("absent"));
    let spec: VolumeSpec = format!("raid5:unit=4K,members={}", uris.join(","))
        .parse()
        .expect("spec");
    let e = builder()
        .open("array", &spec)
        .expect_err("member 2 has no such export");
    let text = format!(
        "{e}: {}",
        std::error::Error::source(&e)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(text.contains("member 2"), "{text}");
    assert!(text.contains(&uris[2]), "{text}");
}

#[test]
fn members_without_superblocks_are_refused_with_what_to_run() {
    let members = members(3, 1 << 20);
    let spec = spec_of("raid5", "4K", &members);
    let e = builder()
        .open("array", &spec)
        .expect_err("no superblocks")
        .to_string();
    let uri = members[0].server.uri("m");
    assert!(
        e.starts_with(&format!("member 0 ({uri}) has no sluice RAID superblock")),
        "{e}"
    );
    assert!(e.contains("sluice raid create"), "{e}");
}

#[test]
fn writes_land_on_the_members_past_their_superblocks() {
    // RAID 0 over two members, 4 KiB unit: chunk 0 on member 0, chunk 1
    // on member 1, each past the member's 4 KiB superblock area.
    let members = members(2, 1 << 20);
    let spec = spec_of("raid0", "4K", &members);
    let builder = builder();
    builder.create_raid(&spec, false).expect("create");
    let array = builder.open("array", &spec).expect("open");
    let mut data = vec![1u8; 8192];
    data[4096..].fill(2);
    array.write_at(&data, 0, false).expect("write");
    array.flush().expect("flush");
    let mut chunk = vec![0u8; 4096];
    for (m, byte) in members.iter().zip([1u8, 2]) {
        m.memory.read_at(&mut chunk, 4096).expect("read the member");
        assert!(chunk.iter().all(|&b| b == byte), "member holding {byte}");
    }
}

/// The superblock at the start of `memory`.
fn superblock_of(memory: &MemDevice) -> Superblock {
    let mut area = vec![0u8; 4096];
    memory.read_at(&mut area, 0).expect("read the superblock");
    Superblock::decode(&area).expect("a superblock")
}

fn failed_members(array: &dyn BlockDevice) -> f64 {
    array
        .metrics()
        .iter()
        .find(|m| m.name == "raid_members_failed")
        .map(|m| m.value)
        .expect("the array reports failed members")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn a_member_that_goes_away_is_failed_recorded_and_then_refused_as_stale() {
    let members = members(3, 1 << 20);
    let quick = ",timeout=2s,reconnect=300ms";
    let spec_text = |members: &[&TestServer]| {
        let uris: Vec<String> = members.iter().map(|s| s.uri("m")).collect();
        format!("raid5:unit=4K,members={}{quick}", uris.join(","))
    };
    let servers: Vec<&TestServer> = members.iter().map(|m| &m.server).collect();
    let spec: VolumeSpec = spec_text(&servers).parse().expect("spec");
    let builder = builder();
    builder.create_raid(&spec, false).expect("create");
    let array = builder.open("array", &spec).expect("open");
    let data = pattern(64 << 10, 1);
    array.write_at(&data, 0, false).expect("write");
    array.flush().expect("flush");
    let events = superblock_of(&members[1].memory).events;

    // Member 1's server goes away: the array goes on degraded, with no
    // error, and the survivors record it.
    let mut members = members;
    let gone = members.remove(1);
    drop(gone.server);
    let more = pattern(64 << 10, 2);
    array
        .write_at(&more, 64 << 10, false)
        .expect("degraded write");
    let mut back = vec![0u8; 128 << 10];
    array.read_at(&mut back, 0).expect("degraded read");
    assert_eq!(&back[..64 << 10], &data[..]);
    assert_eq!(&back[64 << 10..], &more[..]);
    assert_eq!(failed_members(array.as_ref()), 1.0);
    for m in &members {
        let s = superblock_of(&m.memory);
        assert_eq!(s.events, events + 1);
        assert_eq!(s.roles[1], MemberRole::Failed);
    }
    assert_eq!(superblock_of(&gone.memory).events, events);
    drop(array);

    // The old member served again: stale, refused, named.
    let back_again = serve(gone.memory.clone());
    let servers = [&members[0].server, &back_again, &members[1].server];
    let spec: VolumeSpec = spec_text(&servers).parse().expect("spec");
    let e = builder.open("array", &spec).expect_err("stale").to_string();
    let uri = back_again.uri("m");
    assert!(e.starts_with(&format!("member 1 ({uri}) is stale")), "{e}");

    // With kick-stale it is left out instead, as if unreachable: the
    // array starts degraded and serves what was written.
    let spec: VolumeSpec = format!("{},kick-stale", spec_text(&servers))
        .parse()
        .expect("spec");
    let array = builder.open("array", &spec).expect("kicked and started");
    assert_eq!(failed_members(array.as_ref()), 1.0);
    array.read_at(&mut back, 0).expect("degraded read");
    assert_eq!(&back[..64 << 10], &data[..]);
    assert_eq!(&back[64 << 10..], &more[..]);
}

#[test]
fn a_member_that_stops_answering_times_out_and_a_second_failure_is_an_error() {
    // Member 2's reads at member offset 8192 (the first chunk of stripe
    // 1, past the 4 KiB superblock area) never answer in time.
    let gated = Arc::new(GatedDevice::new(1 << 20, vec![8192]));
    let mut members = members(2, 1 << 20);
    let slow = serve(gated.clone());
    let uris: Vec<String> = members
        .iter()
        .map(|m| m.server.uri("m"))
        .chain([slow.uri("m")])
        .collect();
    let spec: VolumeSpec = format!(
        "raid5:unit=4K,members={},timeout=500ms,reconnect=300ms",
        uris.join(",")
    )
    .parse()
    .expect("spec");
    let builder = builder();
    builder.create_raid(&spec, false).expect("create");
    let array = builder.open("array", &spec).expect("open");
    let data = pattern(32 << 10, 3);
    array.write_at(&data, 0, false).expect("write");
    // Stripe 1's chunk 0 (volume offset 8192) lives on member 2.
    let started = std::time::Instant::now();
    let mut back = vec![0u8; 4096];
    array
        .read_at(&mut back, 8192)
        .expect("read rebuilt from parity");
    assert_eq!(&back[..], &data[8192..12288]);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(failed_members(array.as_ref()), 1.0);
    gated.open_gate();

    // A second member goes away: requests that need it fail, quickly
    // and clearly, and never return wrong data.
    drop(members.remove(0).server);
    let started = std::time::Instant::now();
    let e =
        sluice_testkit::error_chain(&array.read_at(&mut back, 0).expect_err("two members lost"));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(e.contains("members have failed"), "{e}");
    drop(slow);
}

#[test]
fn the_metrics_endpoint_shows_each_member_by_its_uri() {
    let members = members(3, 1 << 20);
    let spec = spec_of("raid5", "4K", &members);
    let builder = builder();
    builder.create_raid(&spec, false).expect("create");
    let array = builder.open("array", &spec).expect("open");
    // One full stripe (8 KiB of data: a chunk on each data member and
    // one of parity) and a read of the first chunk.
    array.write_at(&pattern(8192, 5), 0, false).expect("write");
    let mut back = vec![0u8; 4096];
    array.read_at(&mut back, 0).expect("read");
    let head = TestServer::builder().export("vol", array).metrics().start();
    let text = head.scrape();
    let uri = |i: usize| members[i].server.uri("m");
    let line = |name: &str, i: usize, extra: &str| {
        format!(
            "sluice_{name}{{export=\"vol\",member=\"{i}\",name=\"{}\"{extra}}}",
            uri(i)
        )
    };
    let value = |series: &str| -> f64 {
        let l = text
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"));
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    for i in 0..3 {
        // One data or parity chunk written to each member.
        assert_eq!(
            value(&line("raid_member_bytes_total", i, ",op=\"write\"")),
            4096.0
        );
        assert_eq!(value(&line("raid_member_failed", i, "")), 0.0);
        assert!(value(&line("raid_member_request_duration_seconds_count", i, "")) >= 1.0);
        assert!(text.contains(&line(
            "raid_member_request_duration_seconds_bucket",
            i,
            ",le=\"+Inf\""
        )));
    }
    // Chunk 0 of stripe 0 is on member 0.
    assert_eq!(
        value(&line("raid_member_bytes_total", 0, ",op=\"read\"")),
        4096.0
    );
    assert!(text.contains("# TYPE sluice_raid_member_request_duration_seconds histogram"));
}

#[test]
fn raid5_journals_go_where_the_spec_or_the_builder_says() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let members = members(3, 1 << 20);
    let spec = spec_of("raid5", "4K", &members);
    let builder = VolumeBuilder::default().with_journal_dir(dir.path().join("journals"));
    let uuid = builder.create_raid(&spec, false).expect("create");
    // Not named in the spec: in the builder's folder, named after the
    // array.
    drop(builder.open("array", &spec).expect("open"));
    let default = dir.path().join(format!("journals/raid-{uuid}.journal"));
    assert_eq!(
        std::fs::metadata(&default).expect("default journal").len(),
        sluice_raid::journal::JOURNAL_BYTES
    );
    // Named: there.
    let named = dir.path().join("vol.journal");
    let with_path: VolumeSpec = format!("{},journal={}", spec_text(&members), named.display())
        .parse()
        .expect("spec");
    drop(builder.open("array", &with_path).expect("open"));
    assert!(named.exists());
    // Another array's journal is refused, naming it.
    let others = members_n(3);
    let other_spec = spec_of("raid5", "4K", &others);
    builder.create_raid(&other_spec, false).expect("create");
    let reused: VolumeSpec = format!("{},journal={}", spec_text(&others), named.display())
        .parse()
        .expect("spec");
    let e = builder.open("other", &reused).expect_err("refused");
    let text = sluice_testkit::error_chain(&e);
    assert!(text.contains("belongs to array"), "{text}");
    // Off: no file.
    let off_dir = dir.path().join("off");
    let off: VolumeSpec = format!("{},journal=off", spec_text(&others))
        .parse()
        .expect("spec");
    drop(
        builder
            .clone()
            .with_journal_dir(&off_dir)
            .open("other", &off)
            .expect("open"),
    );
    assert!(!off_dir.exists());
}

fn members_n(n: usize) -> Vec<Member> {
    members(n, 1 << 20)
}

fn spec_text(members: &[Member]) -> String {
    let uris: Vec<String> = members.iter().map(|m| m.server.uri("m")).collect();
    format!("raid5:unit=4K,members={}", uris.join(","))
}

#[test]
fn an_array_starts_degraded_without_a_member_it_cannot_reach() {
    let members = members_n(3);
    let spec = spec_of("raid5", "4K", &members);
    builder().create_raid(&spec, false).expect("create");
    let data = pattern(20_000, 7);
    {
        let array = builder().open("array", &spec).expect("open");
        array.write_at(&data, 4096, false).expect("write");
        array.flush().expect("flush");
    }
    // Member 1's server goes away before the array starts again.
    let [m0, m1, m2]: [Member; 3] = members.try_into().ok().expect("three");
    drop(m1.server);
    let array = builder().open("array", &spec).expect("starts degraded");
    assert_eq!(failed_members(array.as_ref()), 1.0);
    let mut got = vec![0u8; data.len()];
    array.read_at(&mut got, 4096).expect("read degraded");
    assert_eq!(got, data);
    drop(array);
    assert_eq!(superblock_of(&m0.memory).roles[1], MemberRole::Failed);
    assert_eq!(superblock_of(&m2.memory).roles[1], MemberRole::Failed);
}

/// RAID 0 over two RAID 1 pairs of member servers, written as one spec
/// with each pair in parentheses.
fn two_level_text(servers: &[&TestServer]) -> String {
    let uri = |i: usize| servers[i].uri("m");
    format!(
        "raid0:unit=64K,members=(raid1:unit=4K,members={},{},timeout=2s,reconnect=300ms),(raid1:unit=4K,members={},{},timeout=2s,reconnect=300ms)",
        uri(0),
        uri(1),
        uri(2),
        uri(3)
    )
}

fn two_level(access: Access) -> Subject {
    if access == Access::ReadOnly {
        let members = members(4, 4 << 20);
        let servers: Vec<&TestServer> = members.iter().map(|m| &m.server).collect();
        let spec: VolumeSpec = two_level_text(&servers).parse().expect("spec");
        builder().create_raid(&spec, false).expect("create");
        drop(servers);
        let frozen: Vec<TestServer> = members
            .iter()
            .map(|m| serve(Arc::new(Frozen(m.memory.clone()))))
            .collect();
        let spec: VolumeSpec = two_level_text(&frozen.iter().collect::<Vec<_>>())
            .parse()
            .expect("spec");
        let device = builder().open("array", &spec).expect("open read-only");
        return Subject::new(device).keeping((members, frozen));
    }
    let members = members(4, 4 << 20);
    let servers: Vec<&TestServer> = members.iter().map(|m| &m.server).collect();
    let spec: VolumeSpec = two_level_text(&servers).parse().expect("spec");
    let builder = builder();
    builder
        .create_raid(&spec, false)
        .expect("create both levels");
    let device = builder.open("array", &spec).expect("open");
    drop(servers);
    Subject::new(device).keeping(members)
}

sluice_testkit::conformance_tests! {
    two_level_raid0_over_raid1_pairs => two_level,
}

#[test]
fn a_two_level_array_survives_one_member_of_each_pair_going_away() {
    let mut members = members(4, 4 << 20);
    let servers: Vec<&TestServer> = members.iter().map(|m| &m.server).collect();
    let spec: VolumeSpec = two_level_text(&servers).parse().expect("spec");
    drop(servers);
    let builder = builder();
    builder
        .create_raid(&spec, false)
        .expect("create both levels");
    // Each pair's members carry the pair's superblock; the pairs'
    // volumes carry the outer array's.
    let inner = superblock_of(&members[0].memory);
    assert_eq!(inner.level, sluice_raid::RaidLevel::Raid1);
    assert_eq!(
        superblock_of(&members[1].memory).array_uuid,
        inner.array_uuid
    );
    assert_ne!(
        superblock_of(&members[2].memory).array_uuid,
        inner.array_uuid
    );
    let array = builder.open("array", &spec).expect("open");
    // Two pairs of 4 MiB members less their superblock areas, less the
    // outer superblock area, in whole 64 KiB units.
    assert_eq!(array.size(), 2 * ((4 << 20) - (64 << 10)) - 2 * (64 << 10));
    let data = pattern(1 << 20, 3);
    array.write_at(&data, 0, false).expect("write");
    array.flush().expect("flush");
    // One member of each pair goes away: every byte is still there.
    drop(members.remove(3).server);
    drop(members.remove(0).server);
    let mut back = vec![0u8; data.len()];
    array
        .read_at(&mut back, 0)
        .expect("read with half the members gone");
    assert!(back == data, "wrong data from the surviving mirrors");
    let more = pattern(256 << 10, 4);
    array.write_at(&more, 700 << 10, true).expect("write");
    array
        .read_at(&mut back[..256 << 10], 700 << 10)
        .expect("read");
    assert!(back[..256 << 10] == more[..]);
    // The outer array lost nothing: its members are the pairs.
    assert_eq!(failed_members(array.as_ref()), 0.0);
}
