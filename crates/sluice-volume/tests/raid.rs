//! Arrays of remote members: specs naming `nbd://` exports on
//! in-process servers open as RAID volumes that pass the conformance
//! suite, with their member I/O batched over the members' clients.

use std::sync::Arc;

use sluice_storage::{BlockDevice, MemDevice};
use sluice_testkit::conformance::{Access, Subject};
use sluice_testkit::test_server::TestServer;
use sluice_volume::{VolumeBuilder, VolumeSpec};

/// One server per member, each with one memory export `m` of `size` bytes.
fn member_servers(n: usize, size: u64, read_only: bool) -> Vec<TestServer> {
    (0..n)
        .map(|_| {
            TestServer::builder()
                .export("m", Arc::new(MemDevice::new(size, read_only)))
                .start()
        })
        .collect()
}

fn spec(level: &str, unit: &str, servers: &[TestServer]) -> VolumeSpec {
    let uris: Vec<String> = servers.iter().map(|s| s.uri("m")).collect();
    format!("{level}:unit={unit},members={}", uris.join(","))
        .parse()
        .expect("spec")
}

fn remote_array(level: &'static str, n: usize, unit: &'static str) -> impl Fn(Access) -> Subject {
    move |access| {
        let servers = member_servers(n, 4 << 20, access == Access::ReadOnly);
        let device = VolumeBuilder::default()
            .open("array", &spec(level, unit, &servers))
            .expect("open the array");
        Subject::new(device).keeping(servers)
    }
}

sluice_testkit::conformance_tests! {
    remote_raid5_of_3 => remote_array("raid5", 3, "64K"),
    remote_raid0_of_2 => remote_array("raid0", 2, "4K"),
}

#[test]
fn an_unreachable_member_is_named() {
    let servers = member_servers(2, 1 << 20, false);
    let mut uris: Vec<String> = servers.iter().map(|s| s.uri("m")).collect();
    uris.push(servers[0].uri("absent"));
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
fn writes_land_on_the_members_in_the_layout() {
    // RAID 0 over two members, 4 KiB unit: chunk 0 on member 0, chunk 1
    // on member 1.
    let devices: Vec<Arc<MemDevice>> = (0..2)
        .map(|_| Arc::new(MemDevice::new(1 << 20, false)))
        .collect();
    let servers: Vec<TestServer> = devices
        .iter()
        .map(|d| TestServer::builder().export("m", d.clone()).start())
        .collect();
    let array = VolumeBuilder::default()
        .open("array", &spec("raid0", "4K", &servers))
        .expect("open");
    let mut data = vec![1u8; 8192];
    data[4096..].fill(2);
    array.write_at(&data, 0, false).expect("write");
    array.flush().expect("flush");
    let mut chunk = vec![0u8; 4096];
    devices[0].read_at(&mut chunk, 0).expect("read member 0");
    assert!(chunk.iter().all(|&b| b == 1));
    devices[1].read_at(&mut chunk, 0).expect("read member 1");
    assert!(chunk.iter().all(|&b| b == 2));
}
