//! qemu-io against sluice: pattern writes/reads, discard, write-zeroes,
//! unaligned I/O, the end of the export, flush reaching the backing file.

use rstest::rstest;

use crate::harness::{read_file_range, tempdir, tool, CmdOutput, MIB};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};

/// `qemu-io -f raw URI -c CMD...`.
fn qemu_io(uri: &str, cmds: &[&str]) -> CmdOutput {
    let mut c = tool("qemu-io").args(["-f", "raw"]).arg(uri);
    for cmd in cmds {
        c = c.arg("-c").arg(cmd);
    }
    c.output()
}

/// All commands succeed and no pattern check failed.
fn qemu_io_ok(uri: &str, cmds: &[&str]) -> CmdOutput {
    let out = qemu_io(uri, cmds);
    out.assert_success();
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        !text.contains("verification failed") && !text.contains("failed:"),
        "qemu-io reported a failure; {}",
        out.describe()
    );
    out
}

/// A pattern check that must FAIL (detects a broken or vacuous read path).
fn qemu_io_pattern_mismatch(uri: &str, cmd: &str) {
    let out = qemu_io(uri, &[cmd]);
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        text.contains("Pattern verification failed"),
        "`{cmd}` should have found a pattern mismatch; {}",
        out.describe()
    );
    assert!(
        !out.output.status.success(),
        "qemu-io must exit non-zero on a pattern mismatch; {}",
        out.describe()
    );
}

#[rstest]
fn qemu_io_write_pattern_reads_back_and_wrong_pattern_is_detected(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    let uri = srv.uri("disk");
    qemu_io_ok(&uri, &["write -P 0xab 0 64k", "read -P 0xab 0 64k"]);
    // A new connection sees the same bytes.
    qemu_io_ok(&uri, &["read -P 0xab 0 64k", "read -P 0 64k 64k"]);
    qemu_io_pattern_mismatch(&uri, "read -P 0xcd 0 64k");
    qemu_io_pattern_mismatch(&uri, "read -P 0xab 64k 4k");
    // Larger than one maximum-size request (32 MiB): qemu splits it.
    let srv2 = cell.server(dir.path(), &[("big", "80M")]).start();
    let uri2 = srv2.uri("big");
    qemu_io_ok(
        &uri2,
        &[
            "write -P 0x3c 1M 70M",
            "read -P 0x3c 1M 70M",
            "read -P 0 0 1M",
        ],
    );
}

#[rstest]
fn qemu_io_discard_then_reads_zeros(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    let uri = srv.uri("disk");
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x11 0 4M",
            "discard 1M 2M",
            "read -P 0x11 0 1M",
            "read -P 0 1M 2M",
            "read -P 0x11 3M 1M",
        ],
    );
    qemu_io_pattern_mismatch(&uri, "read -P 0x11 1M 4k");
}

#[rstest]
fn qemu_io_write_zeroes_then_reads_zeros(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    let uri = srv.uri("disk");
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x22 0 4M",
            // plain write-zeroes (NO_HOLE semantics in qemu) ...
            "write -z 512k 1M",
            // ... and with unmap allowed (may punch a hole)
            "write -z -u 2M 1M",
            // unaligned write-zeroes
            "write -z 3M 4097",
            "read -P 0x22 0 512k",
            "read -P 0 512k 1M",
            "read -P 0x22 1536k 512k",
            "read -P 0 2M 1M",
            "read -P 0 3M 4097",
            "read -P 0x22 3149825 1044479",
        ],
    );
    qemu_io_pattern_mismatch(&uri, "read -P 0x22 512k 1");
}

#[rstest]
fn qemu_io_unaligned_offsets_and_lengths(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    let uri = srv.uri("disk");
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x01 0 64k",
            "write -P 0x5a 4097 1000",
            "write -P 0x6b 1 1",
            "write -P 0x7c 8191 3",
            "read -P 0x01 0 1",
            "read -P 0x6b 1 1",
            "read -P 0x01 2 4095",
            "read -P 0x5a 4097 1000",
            "read -P 0x01 5097 3094",
            "read -P 0x7c 8191 3",
            "read -P 0x01 8194 1000",
        ],
    );
    qemu_io_pattern_mismatch(&uri, "read -P 0x5a 4096 2");
}

#[rstest]
fn qemu_io_last_sector_and_last_byte_of_export(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    // An odd size: the last "sector" is partial.
    let size: u64 = 16 * MIB + 1000;
    let srv = cell
        .server(dir.path(), &[("disk", &size.to_string())])
        .start();
    let uri = srv.uri("disk");
    let last512 = size - 512;
    let last = size - 1;
    qemu_io_ok(
        &uri,
        &[
            &format!("write -P 0x77 {last512} 512"),
            &format!("write -P 0x99 {last} 1"),
            &format!("read -P 0x77 {last512} 511"),
            &format!("read -P 0x99 {last} 1"),
        ],
    );
    qemu_io_pattern_mismatch(&uri, &format!("read -P 0x77 {last} 1"));
    // Past the end fails (whoever catches it) and does not break the export.
    let out = qemu_io(&uri, &[&format!("write -P 0x55 {last} 2")]);
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        !out.output.status.success() && text.contains("failed"),
        "a write past the end must fail; {}",
        out.describe()
    );
    qemu_io_ok(&uri, &[&format!("read -P 0x99 {last} 1")]);
}

#[rstest]
fn qemu_io_flush_makes_writes_visible_in_backing_file(
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let backing = dir.path().join("disk.img");
    let srv = Cell::new(File, cache, Flexible)
        .server(dir.path(), &[("disk", "8M")])
        .start();
    let uri = srv.uri("disk");
    qemu_io_ok(
        &uri,
        &["write -P 0xc3 1M 256k", "write -P 0x3c 5000 3000", "flush"],
    );
    // The server is still running; a flushed write must be in the file.
    assert!(read_file_range(&backing, MIB, 256 * 1024)
        .iter()
        .all(|&b| b == 0xc3));
    assert!(read_file_range(&backing, 5000, 3000)
        .iter()
        .all(|&b| b == 0x3c));
    assert!(read_file_range(&backing, 4096, 904).iter().all(|&b| b == 0));
    assert_eq!(std::fs::metadata(&backing).expect("stat").len(), 8 * MIB);
}
