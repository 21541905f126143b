//! libnbd (python3-libnbd) scripts from tests/nbdsh/ against sluice.

use rstest::rstest;

use crate::harness::{
    create_sparse_file, nbdsh_script, tempdir, write_random_file, CmdOutput, ServerBuilder, MIB,
};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};

/// Runs tests/nbdsh/SCRIPT with the given arguments; asserts exit 0 and
/// the script's closing "OK".
pub(crate) fn run_script(script: &str, args: &[String]) -> CmdOutput {
    let out = nbdsh_script(script).args(args).run();
    assert!(
        out.stdout().lines().any(|l| l.trim() == "OK"),
        "script did not reach its end; {}",
        out.describe()
    );
    out
}

fn mem_server(size: &str) -> crate::harness::Server {
    ServerBuilder::new()
        .export("disk", format!("mem:{size}"))
        .start()
}

#[rstest]
fn nbdsh_zero_length_requests_keep_connection_usable(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    run_script("zero_length.py", &[srv.uri("disk")]);
}

#[rstest]
fn nbdsh_unaligned_io_and_last_byte(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    // An odd size: a partial last block.
    let srv = cell.server(dir.path(), &[("disk", "5000001")]).start();
    run_script("unaligned_and_last_byte.py", &[srv.uri("disk")]);
}

#[rstest]
fn nbdsh_requests_past_end_fail_and_connection_survives(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "8M")]).start();
    run_script("out_of_bounds.py", &[srv.uri("disk")]);
}

#[rstest]
fn nbdsh_fua_flush_cache_and_df_reach_backing_file(
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let backing = dir.path().join("disk.img");
    let srv = Cell::new(File, cache, Flexible)
        .server(dir.path(), &[("disk", "8M")])
        .start();
    run_script(
        "fua_flush_cache_df.py",
        &[srv.uri("disk"), backing.display().to_string()],
    );
}

/// On a file export the script also checks the holes in the file.
#[rstest]
fn nbdsh_trim_and_write_zeroes(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    let mut args = vec![srv.uri("disk")];
    if backend == File {
        args.push(dir.path().join("disk.img").display().to_string());
    }
    run_script("trim_and_write_zeroes.py", &args);
}

#[rstest]
fn nbdsh_block_status_with_and_without_req_one(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "32M")]).start();
    run_script("block_status.py", &[srv.uri("disk")]);
}

#[rstest]
fn nbdsh_extended_headers_when_libnbd_supports_them(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "16M")]).start();
    let out = run_script("extended_headers.py", &[srv.uri("disk")]);
    if out.stdout().contains("SKIP:") {
        eprintln!("{}", out.stdout().trim());
    }
}

#[rstest]
fn nbdsh_without_structured_replies_reads_correctly(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    let srv = cell.server(dir.path(), &[("disk", "40M")]).start();
    run_script("no_structured_replies.py", &[srv.uri("disk")]);
}

#[test]
fn nbdsh_read_only_export_rejects_writes_with_eperm() {
    let dir = tempdir();
    let backing = dir.path().join("ro.img");
    write_random_file(&backing, 4 * MIB, 99, &[]);
    let srv = ServerBuilder::new()
        .file_export("ro", &backing, "ro")
        .start();
    run_script(
        "read_only.py",
        &[srv.uri("ro"), backing.display().to_string()],
    );
}

#[test]
fn nbdsh_read_only_mem_export_rejects_writes() {
    let dir = tempdir();
    // read_only.py compares with a file; an all-zero one matches a fresh mem export.
    let zeros = dir.path().join("zeros");
    create_sparse_file(&zeros, 2 * MIB);
    let srv = ServerBuilder::new()
        .export("rw", "mem:2M")
        .export("ro", "mem:2M,ro")
        .start();
    run_script(
        "read_only.py",
        &[srv.uri("ro"), zeros.display().to_string()],
    );
}

#[test]
fn nbdsh_unknown_export_name_fails_to_connect() {
    let srv = mem_server("4M");
    run_script(
        "unknown_export.py",
        &[srv.uri("no-such-export"), srv.uri("disk")],
    );
}

#[test]
fn nbdsh_opt_mode_list_info_and_go() {
    let dir = tempdir();
    let ro = dir.path().join("ro.img");
    create_sparse_file(&ro, 3 * MIB);
    let srv = ServerBuilder::new()
        .export("a", "mem:1M")
        .file_export("b", &dir.path().join("b.img"), "size=7M")
        .file_export("c", &ro, "ro")
        .start();
    run_script(
        "opt_mode.py",
        &[
            srv.uri(""),
            format!("a:{}:rw", MIB),
            format!("b:{}:rw", 7 * MIB),
            format!("c:{}:ro", 3 * MIB),
        ],
    );
}

// 64 AIO requests in flight: over the whole matrix in pipeline.rs.

#[rstest]
fn nbdsh_max_payload_requests_and_large_effect_lengths(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let cell = Cell::new(backend, cache, Flexible);
    // At a --max-request-size of 32 MiB (the default is 64 MiB).
    let srv = cell
        .server(dir.path(), &[("disk", "100M")])
        .arg("--max-request-size")
        .arg("32M")
        .start();
    run_script("large_requests.py", &[srv.uri("disk")]);
}
