//! Arrays of remote members: specs naming `nbd://` exports on
//! in-process servers are created (superblocks written) and open as RAID
//! volumes that pass the conformance suite, their member I/O batched
//! over the members' clients.

use std::sync::Arc;

use sluice_storage::{
    BlockDevice, Capability, DeviceError, DeviceLayer, IoOp, MemDevice, ZeroMode,
};
use sluice_testkit::conformance::{Access, Subject};
use sluice_testkit::test_server::TestServer;
use sluice_volume::{VolumeBuilder, VolumeSpec};

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
        let builder = VolumeBuilder::default();
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

sluice_testkit::conformance_tests! {
    remote_raid5_of_3 => remote_array("raid5", 3, "64K"),
    remote_raid0_of_2 => remote_array("raid0", 2, "4K"),
}

#[test]
fn an_unreachable_member_is_named() {
    let members = members(2, 1 << 20);
    let mut uris: Vec<String> = members.iter().map(|m| m.server.uri("m")).collect();
    uris.push(members[0].server.uri("absent"));
    let spec: VolumeSpec = format!("raid5:unit=4K,members={}", uris.join(","))
        .parse()
        .expect("spec");
    let e = VolumeBuilder::default()
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
    let e = VolumeBuilder::default()
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
    let builder = VolumeBuilder::default();
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
