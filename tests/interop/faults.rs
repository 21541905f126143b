//! Error injection (the export option `fail=OPS:ERRNO:TRIGGER`): injected
//! EIO and ENOSPC reach real clients as the right errors, the server stays
//! up, a failed flush is never followed by a false success, and other
//! exports and connections are untouched.

use crate::harness::{tool, ServerBuilder};
use crate::nbdsh::run_script;

const BAD_RULES: &str = "fail=write:enospc:after=4,fail=read:eio:nth=3,fail=flush:eio:nth=2";

#[test]
fn injected_errors_reach_libnbd_as_the_right_errno() {
    let mut srv = ServerBuilder::new()
        .export("bad", format!("mem:16M,{BAD_RULES}"))
        .export("good", "mem:16M")
        .arg("--cache")
        .arg("none")
        .start();
    run_script("injected_errors.py", &[srv.uri("bad"), srv.uri("good")]);
    srv.assert_running();
    srv.wait_for_log("error injection on");
}

#[test]
fn write_back_failures_fail_every_flush_not_the_write() {
    let mut srv = ServerBuilder::new()
        .export("bad", "mem:16M,fail=write:eio:after=0")
        .export("good", "mem:16M")
        .arg("--cache")
        .arg("writeback")
        .start();
    run_script(
        "injected_errors_write_back.py",
        &[srv.uri("bad"), srv.uri("good")],
    );
    srv.assert_running();
}

#[test]
fn qemu_io_reports_injected_enospc_and_eio() {
    let mut srv = ServerBuilder::new()
        .export(
            "bad",
            "mem:16M,fail=write:enospc:after=1,fail=read:eio:after=0",
        )
        .arg("--cache")
        .arg("none")
        .start();
    let uri = srv.uri("bad");
    let out = tool("qemu-io")
        .args([
            "-f",
            "raw",
            "-c",
            "write -P 1 0 4k",
            "-c",
            "write -P 2 4k 4k",
        ])
        .arg(&uri)
        .output();
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        text.contains("wrote 4096/4096 bytes at offset 0"),
        "first write succeeds; {}",
        out.describe()
    );
    assert!(
        text.contains("No space left on device"),
        "second write fails with ENOSPC; {}",
        out.describe()
    );
    let out = tool("qemu-io")
        .args(["-f", "raw", "-c", "read 0 4k"])
        .arg(&uri)
        .output();
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        text.contains("Input/output error"),
        "reads fail with EIO; {}",
        out.describe()
    );
    srv.assert_running();
}

/// A small tmpfs mounted for one test, unmounted on drop.
struct SmallFilesystem {
    dir: tempfile::TempDir,
}

impl SmallFilesystem {
    fn mount(bytes: u64) -> Self {
        let dir = crate::harness::tempdir();
        let out = tool("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir.path())
            .output();
        assert_eq!(
            out.code(),
            Some(0),
            "mounting a {bytes}-byte tmpfs (the tests run as root); {}",
            out.describe()
        );
        Self { dir }
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = std::process::Command::new(crate::harness::require_tool("umount"))
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn a_full_filesystem_gives_enospc_and_frees_up_again() {
    const FS: u64 = 2 << 20;
    let fs = SmallFilesystem::mount(FS);
    let mut srv = ServerBuilder::new()
        .file_export("disk", &fs.dir.path().join("d.img"), "size=16M")
        .arg("--cache")
        .arg("none")
        .start();
    // A 16 MiB sparse image on a 2 MiB filesystem: said at start.
    srv.wait_for_log("writes past that will fail with ENOSPC");
    run_script("full_disk.py", &[srv.uri("disk"), FS.to_string()]);
    srv.assert_running();
    // The operator hears of it too, not only the client.
    srv.wait_for_log("no space left for the export's data");
    drop(srv);
    // Again with 512 KiB writes, whose payloads are spliced into the file.
    std::fs::remove_file(fs.dir.path().join("d.img")).expect("remove the image");
    let mut srv = ServerBuilder::new()
        .file_export("disk", &fs.dir.path().join("d.img"), "size=16M")
        .arg("--cache")
        .arg("none")
        .start();
    run_script(
        "full_disk.py",
        &[srv.uri("disk"), FS.to_string(), (512 << 10).to_string()],
    );
    srv.assert_running();
    drop(srv);
    drop(fs);
}
