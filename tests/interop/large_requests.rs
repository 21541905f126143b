//! Requests larger than the 32 MiB the NBD spec suggests: accepted up to
//! `--max-request-size` (64 MiB by default), as nbdkit and nbd-server do,
//! for clients that never ask for the limits.

use crate::harness::{tool, ServerBuilder, MIB};

#[test]
fn qemu_io_writes_and_reads_48_mib_requests() {
    let srv = ServerBuilder::new().export("disk", "mem:128M").start();
    let out = tool("qemu-io")
        .args(["-f", "raw"])
        .arg(srv.uri("disk"))
        .args([
            "-c",
            "write -P 0x6b 4096 48M",
            "-c",
            "read -P 0x6b 4096 48M",
            "-c",
            "read -P 0 50335744 4096",
        ])
        .run();
    assert!(!out.stdout().contains("fail"), "{}", out.describe());
    let v = tool("nbdinfo")
        .arg("--json")
        .arg(srv.uri("disk"))
        .run()
        .json();
    assert_eq!(
        v["exports"][0]["block_size_maximum"].as_u64(),
        Some(64 * MIB),
        "{v}"
    );
}

#[test]
fn a_lower_max_request_size_is_advertised() {
    let srv = ServerBuilder::new()
        .export("disk", "mem:16M")
        .arg("--max-request-size")
        .arg("1M")
        .start();
    let v = tool("nbdinfo")
        .arg("--json")
        .arg(srv.uri("disk"))
        .run()
        .json();
    assert_eq!(
        v["exports"][0]["block_size_maximum"].as_u64(),
        Some(MIB),
        "{v}"
    );
}
