//! Listener and export configuration: Unix sockets, several exports, the
//! default export, sizes and the ro flag.

use crate::harness::{
    create_sparse_file, read_file_range, tempdir, tool, write_random_file, ServerBuilder, MIB,
};

fn size_of(uri: &str) -> u64 {
    let out = tool("nbdinfo").arg("--size").arg(uri).run();
    out.stdout()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("nbdinfo --size output: {e}; {}", out.describe()))
}

#[test]
fn unix_socket_listener_serves_nbdinfo_and_io() {
    let dir = tempdir();
    let sock = dir.path().join("sluice.sock");
    let srv = ServerBuilder::new()
        .listen(format!("unix:{}", sock.display()))
        .export("default", "mem:6M")
        .start();
    assert_eq!(
        srv.unix,
        vec![sock.clone()],
        "listening line for the socket"
    );
    assert!(srv.tcp.is_empty());
    let uri = srv.unix_uri("default");
    assert_eq!(
        uri,
        format!("nbd+unix:///default?socket={}", sock.display())
    );
    let v = tool("nbdinfo").arg("--json").arg(&uri).run().json();
    assert_eq!(v["exports"][0]["export-size"].as_u64(), Some(6 * MIB));
    assert_eq!(
        size_of(&srv.unix_uri("")),
        6 * MIB,
        "empty name over unix socket"
    );
    tool("qemu-io")
        .args(["-f", "raw"])
        .arg(format!("nbd+unix:///default?socket={}", sock.display()))
        .args(["-c", "write -P 0x42 0 1M", "-c", "read -P 0x42 0 1M"])
        .run();
}

#[test]
fn tcp_and_unix_listeners_at_once_share_exports() {
    let dir = tempdir();
    let sock = dir.path().join("s.sock");
    let srv = ServerBuilder::new()
        .listen("127.0.0.1:0")
        .listen(format!("unix:{}", sock.display()))
        .export("disk", "mem:4M")
        .start();
    assert_eq!(srv.tcp.len(), 1);
    assert_eq!(srv.unix.len(), 1);
    tool("qemu-io")
        .args(["-f", "raw"])
        .arg(srv.uri("disk"))
        .args(["-c", "write -P 0x17 1M 64k"])
        .run();
    // Written via TCP, read via the Unix socket: the same export.
    tool("qemu-io")
        .args(["-f", "raw"])
        .arg(srv.unix_uri("disk"))
        .args(["-c", "read -P 0x17 1M 64k"])
        .run();
}

#[test]
fn several_file_and_mem_exports_are_independent() {
    let dir = tempdir();
    let ro_path = dir.path().join("ro.img");
    write_random_file(&ro_path, 2 * MIB, 5, &[]);
    let existing = dir.path().join("existing.img");
    create_sparse_file(&existing, 5 * MIB);
    let srv = ServerBuilder::new()
        .file_export("f1", &dir.path().join("f1.img"), "size=4M")
        .export("m1", "mem:4M")
        .export("m2", "mem:3K")
        .file_export("ro", &ro_path, "ro")
        .file_export("existing", &existing, "")
        .export("big", "mem:2G")
        .start();
    assert_eq!(size_of(&srv.uri("f1")), 4 * MIB);
    assert_eq!(size_of(&srv.uri("m1")), 4 * MIB);
    assert_eq!(size_of(&srv.uri("m2")), 3 * 1024);
    assert_eq!(size_of(&srv.uri("ro")), 2 * MIB);
    assert_eq!(
        size_of(&srv.uri("existing")),
        5 * MIB,
        "size of an existing file"
    );
    assert_eq!(size_of(&srv.uri("big")), 2 << 30);
    assert_eq!(size_of(&srv.uri("")), 4 * MIB, "default = first export");

    let qio = |name: &str, cmds: &[&str]| {
        let mut c = tool("qemu-io").args(["-f", "raw"]).arg(srv.uri(name));
        for cmd in cmds {
            c = c.arg("-c").arg(cmd);
        }
        c.run()
    };
    qio("f1", &["write -P 0x01 0 1M", "flush"]);
    qio("m1", &["write -P 0x02 0 1M"]);
    qio("existing", &["write -P 0x03 0 1M"]);
    qio("big", &["write -P 0x04 2047M 1M"]);
    qio("f1", &["read -P 0x01 0 1M"]);
    qio("m1", &["read -P 0x02 0 1M"]);
    qio("m2", &["read -P 0 0 3K"]);
    qio("existing", &["read -P 0x03 0 1M", "read -P 0 1M 4M"]);
    qio("big", &["read -P 0x04 2047M 1M", "read -P 0 0 1M"]);
    assert!(read_file_range(&dir.path().join("f1.img"), 0, MIB as usize)
        .iter()
        .all(|&b| b == 1));

    // ro: reading works, a write fails, and the file is unchanged.
    let before = std::fs::read(&ro_path).expect("read ro file");
    let out = tool("qemu-io")
        .args(["-f", "raw"])
        .arg(srv.uri("ro"))
        .args(["-c", "write -P 0x66 0 4k"])
        .output();
    assert!(
        !out.output.status.success(),
        "writing to a ro export must fail; {}",
        out.describe()
    );
    let v = tool("nbdinfo")
        .arg("--json")
        .arg(srv.uri("ro"))
        .run()
        .json();
    assert_eq!(v["exports"][0]["is_read_only"].as_bool(), Some(true));
    assert_eq!(std::fs::read(&ro_path).expect("read ro file"), before);
}

#[test]
fn export_named_default_is_served_for_empty_name() {
    let srv = ServerBuilder::new()
        .export("first", "mem:1M")
        .export("default", "mem:3M")
        .start();
    assert_eq!(
        size_of(&srv.uri("")),
        3 * MIB,
        "\"\" must map to the export named default"
    );
    assert_eq!(size_of(&srv.uri("first")), MIB);
    assert_eq!(size_of(&srv.uri("default")), 3 * MIB);
}

#[test]
fn size_suffixes_k_m_g_are_accepted() {
    let dir = tempdir();
    let srv = ServerBuilder::new()
        .export("k", "mem:64K")
        .export("m", "mem:3M")
        .export("g", "mem:1G")
        .file_export("fk", &dir.path().join("fk.img"), "size=100K")
        .start();
    assert_eq!(size_of(&srv.uri("k")), 64 * 1024);
    assert_eq!(size_of(&srv.uri("m")), 3 * MIB);
    assert_eq!(size_of(&srv.uri("g")), 1 << 30);
    assert_eq!(size_of(&srv.uri("fk")), 100 * 1024);
    assert_eq!(
        std::fs::metadata(dir.path().join("fk.img"))
            .expect("stat")
            .len(),
        100 * 1024,
        "file export created with its size"
    );
}

#[test]
fn offsets_beyond_4gib_on_file_and_mem_exports() {
    let dir = tempdir();
    let backing = dir.path().join("huge.img");
    let srv = ServerBuilder::new()
        .file_export("f", &backing, "size=6G")
        .export("m", "mem:8G")
        .start();
    assert_eq!(size_of(&srv.uri("f")), 6 << 30);
    assert_eq!(size_of(&srv.uri("m")), 8 << 30);
    let far = (5u64 << 30) + 4096 * 3 + 7;
    for name in ["f", "m"] {
        tool("qemu-io")
            .args(["-f", "raw"])
            .arg(srv.uri(name))
            .args([
                "-c",
                &format!("write -P 0x4f {far} 70000"),
                "-c",
                "write -P 0x50 0 4096",
                "-c",
                "flush",
                "-c",
                &format!("read -P 0x4f {far} 70000"),
                "-c",
                &format!("read -P 0 {} 7", far - 7),
                "-c",
                "read -P 0x50 0 4096",
                "-c",
                &format!("read -P 0 {} 4096", (4u64 << 30) - 4096),
            ])
            .run();
    }
    // The far write landed at the far offset of the file (no 32-bit wrap).
    assert!(read_file_range(&backing, far, 70000)
        .iter()
        .all(|&b| b == 0x4f));
    assert!(read_file_range(&backing, far % (1 << 32), 4096)
        .iter()
        .all(|&b| b == 0));
    assert!(read_file_range(&backing, 0, 4096)
        .iter()
        .all(|&b| b == 0x50));
}
