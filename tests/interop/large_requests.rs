//! Requests larger than the 32 MiB the NBD spec suggests: accepted up to
//! `--max-request-size` (64 MiB by default), as nbdkit and nbd-server do,
//! for clients that never ask for the limits.

use crate::harness::{nbdsh_script, tool, ServerBuilder, MIB};

#[test]
fn an_old_client_writes_and_reads_48_mib_requests() {
    let srv = ServerBuilder::new().export("disk", "mem:128M").start();
    // libnbd sends each call as one request (qemu would split at 32 MiB).
    nbdsh_script("large_write.py").arg(srv.uri("disk")).run();
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
        .export("disk", "mem:64M")
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
