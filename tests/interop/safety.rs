//! Starts that must not destroy or leave behind data: what a Unix socket
//! path may hold, and the files a failed start created.

use std::os::unix::net::UnixListener;
use std::path::Path;

use crate::harness::{sluice, tempdir, tool, ServerBuilder, MIB};

/// Every entry under `dir`, sorted (the test's own files included).
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read the test directory")
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_unix_listener_never_replaces_a_file_or_directory() {
    let dir = tempdir();
    let file = dir.path().join("disk.img");
    std::fs::write(&file, b"precious data").expect("test setup");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("test setup");
    for (path, what) in [(&file, "a regular file"), (&sub, "a directory")] {
        let out = sluice()
            .args(["serve", "--export", "d=mem:1M", "--listen"])
            .arg(format!("unix:{}", path.display()))
            .output();
        assert_eq!(out.code(), Some(1), "{}", out.describe());
        assert!(
            out.stderr()
                .contains(&format!("{} is {what}, not a socket", path.display())),
            "{}",
            out.describe()
        );
    }
    assert_eq!(
        std::fs::read(&file).expect("read the file"),
        b"precious data"
    );
    assert!(sub.is_dir());
}

#[test]
fn a_unix_listener_replaces_only_a_stale_socket() {
    let dir = tempdir();
    let sock = dir.path().join("s.sock");
    // A socket nobody answers on, as a server that crashed leaves it.
    drop(UnixListener::bind(&sock).expect("bind a socket"));
    let srv = ServerBuilder::new()
        .listen(format!("unix:{}", sock.display()))
        .export("d", "mem:1M")
        .start();
    // A second server refuses the live socket and leaves it working.
    let out = sluice()
        .args(["serve", "--export", "d=mem:1M", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .output();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr().contains("in use by a running server"),
        "{}",
        out.describe()
    );
    let size = tool("nbdinfo").arg("--size").arg(srv.unix_uri("d")).run();
    assert_eq!(size.stdout().trim(), MIB.to_string());
}

#[test]
fn a_start_on_a_busy_port_creates_no_file() {
    let busy = ServerBuilder::new().export("d", "mem:1M").start();
    let port = busy.addr().to_string();
    let dir = tempdir();
    // The default export (./sluice-data/default.img, 1 GiB) and a file
    // export of its own: neither may be left behind.
    let out = sluice()
        .args(["serve", "--listen", &port])
        .current_dir(dir.path())
        .output();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    let out = sluice()
        .args(["serve", "--listen", &port, "--export"])
        .arg(format!(
            "d=file:{},size=1G",
            dir.path().join("d.img").display()
        ))
        .output();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn a_start_whose_later_export_fails_removes_what_it_created() {
    let dir = tempdir();
    let sock = dir.path().join("s.sock");
    let out = sluice()
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .arg("--export")
        .arg(format!(
            "a=file:{},size=1M",
            dir.path().join("a.img").display()
        ))
        .arg("--export")
        .arg(format!(
            "b=file:{}",
            dir.path().join("missing.img").display()
        ))
        .output();
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr().contains("missing.img"), "{}", out.describe());
    assert_eq!(entries(dir.path()), Vec::<String>::new());
}

#[test]
fn bench_against_a_uri_leaves_the_data_alone_and_says_so() {
    let dir = tempdir();
    let image = dir.path().join("disk.img");
    std::fs::write(&image, vec![0x77u8; 16 << 20]).expect("test setup");
    let srv = ServerBuilder::new().file_export("disk", &image, "").start();
    let out = sluice()
        .args(["bench", "--uri", &srv.uri("disk")])
        .args(["--duration", "100ms", "--no-progress"])
        .output();
    out.assert_success();
    assert!(
        out.stderr().contains("running read cases only"),
        "{}",
        out.describe()
    );
    assert!(!out.stdout().contains("write"), "{}", out.describe());
    drop(srv);
    let data = std::fs::read(&image).expect("read the image");
    assert!(
        data.iter().all(|b| *b == 0x77),
        "the bench wrote to the export"
    );
}
