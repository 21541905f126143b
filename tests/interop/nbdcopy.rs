//! nbdcopy through sluice: a large random round trip, and export to export.

use std::time::Duration;

use rstest::rstest;

use crate::harness::{
    assert_files_equal, sha256_file, shm_tempdir, tool, write_random_file, ServerBuilder, MIB,
};
use crate::matrix::{Backend::File, Cache, Cache::*, Cell, Pipeline::Flexible};

/// The backing file's content is checked too, so the backend is a file.
#[rstest]
fn nbdcopy_256mib_random_round_trip_local_to_sluice_to_local(
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = shm_tempdir();
    let size = 256 * MIB;
    let src = dir.path().join("src.raw");
    // Mostly random, with a zero run that nbdcopy turns into write-zeroes.
    write_random_file(
        &src,
        size,
        7,
        &[(100 * MIB, 16 * MIB), (200 * MIB + 4096, 12345)],
    );
    let backing = dir.path().join("disk.img");
    let srv = Cell::new(File, cache, Flexible)
        .server(dir.path(), &[("disk", "256M")])
        .start();
    let uri = srv.uri("disk");
    tool("nbdcopy")
        .args(["--flush"])
        .arg(&src)
        .arg(&uri)
        .timeout(Duration::from_secs(300))
        .run();
    let dst = dir.path().join("dst.raw");
    tool("nbdcopy")
        .arg(&uri)
        .arg(&dst)
        .timeout(Duration::from_secs(300))
        .run();
    assert_files_equal(&src, &dst);
    // And the flushed backing file itself holds the same bytes.
    assert_eq!(
        sha256_file(&backing),
        sha256_file(&src),
        "backing file content"
    );
}

#[test]
fn nbdcopy_between_two_sluice_exports_and_two_servers() {
    let dir = shm_tempdir();
    let size = 64 * MIB;
    let src = dir.path().join("src.raw");
    write_random_file(&src, size, 8, &[(10 * MIB, 3 * MIB)]);
    let a = ServerBuilder::new()
        .export("src", "mem:64M")
        .export("copy", "mem:64M")
        .start();
    let b = ServerBuilder::new()
        .file_export("dst", &dir.path().join("b.img"), "size=64M")
        .start();
    tool("nbdcopy").arg(&src).arg(a.uri("src")).run();
    // Same server, export to export; and server A to server B, 4 connections.
    tool("nbdcopy").arg(a.uri("src")).arg(a.uri("copy")).run();
    tool("nbdcopy")
        .args(["--connections=4", "--requests=16"])
        .arg(a.uri("copy"))
        .arg(b.uri("dst"))
        .run();
    for (srv, name) in [(&a, "copy"), (&b, "dst")] {
        let out = dir.path().join(format!("out-{name}.raw"));
        tool("nbdcopy").arg(srv.uri(name)).arg(&out).run();
        assert_files_equal(&src, &out);
    }
}
