//! fio's nbd engine against sluice, with data verification.

use rstest::rstest;
use serde_json::Value;

use crate::harness::{tempdir, tool, Server};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};

/// Runs fio with the nbd engine and the given job options; asserts exit 0,
/// no job error, the expected bytes written and verified.
pub(crate) fn fio_verify(srv: &Server, name: &str, opts: &[&str], expect_bytes: u64) {
    let uri = srv.uri("");
    let out = tool("fio")
        .arg(format!("--name={name}"))
        .arg("--ioengine=nbd")
        .arg(format!("--uri={uri}"))
        .args(opts)
        .args([
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_dump=0",
            "--output-format=json",
        ])
        .run();
    let v: Value = out.json();
    let job = &v["jobs"][0];
    assert_eq!(
        job["error"].as_i64(),
        Some(0),
        "fio job error; {}",
        out.describe()
    );
    let written = job["write"]["io_bytes"].as_u64().expect("write io_bytes");
    let read = job["read"]["io_bytes"].as_u64().expect("read io_bytes");
    assert_eq!(written, expect_bytes, "bytes written; {}", out.describe());
    assert_eq!(
        read,
        expect_bytes,
        "bytes read back for verification; {}",
        out.describe()
    );
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        !text.contains("verify failed")
            && !text.contains("bad magic")
            && !text.contains("bad header"),
        "fio reported verification trouble; {}",
        out.describe()
    );
}

/// The standard 4 KiB random-write job, 32 in flight, crc32c verify.
pub(crate) fn fio_randwrite_4k_qd32(srv: &Server) {
    fio_verify(
        srv,
        "randwrite4k",
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=32",
            "--size=64M",
            "--verify=crc32c",
        ],
        64 << 20,
    );
}

// The 4 KiB random-write job runs over the whole matrix in pipeline.rs.

#[rstest]
fn fio_large_blocks_seq_write_md5_verify(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, Flexible)
        .server(dir.path(), &[("default", "128M")])
        .start();
    fio_verify(
        &srv,
        "seq4m",
        &[
            "--rw=write",
            "--bs=4m",
            "--iodepth=8",
            "--size=128M",
            "--verify=md5",
        ],
        128 << 20,
    );
}

#[rstest]
fn fio_mixed_block_sizes_randwrite_verify(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, Flexible)
        .server(dir.path(), &[("default", "32M")])
        .start();
    fio_verify(
        &srv,
        "bsrange",
        &[
            "--rw=randwrite",
            "--bsrange=512-256k",
            "--iodepth=16",
            "--size=32M",
            "--verify=crc32c",
            "--norandommap=0",
        ],
        32 << 20,
    );
}
