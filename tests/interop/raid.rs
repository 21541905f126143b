//! A RAID 5 volume over three `sluice serve` member processes, exported
//! by a fourth, driven by real clients: qemu-io, nbdinfo and fio with
//! verification; a member killed under fio (the volume goes on
//! degraded), the killed member refused as stale when it comes back, and
//! a second failure giving I/O errors promptly instead of a hang. The
//! fault tests run on RAID 6 over four members too, with two members
//! killed where RAID 5 loses one, and on RAID 10 over four members with
//! one member of each mirror set killed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::fio::fio_verify;
use crate::harness::{
    require_tool, tempdir, tool, write_random_file, CmdOutput, Server, ServerBuilder, MIB,
};

/// Bytes of each member file.
const MEMBER_SIZE: &str = "64M";
/// Member patience of the array: a killed member counts as failed after
/// its reconnect window.
pub(crate) const MEMBER_OPTIONS: &str = "timeout=10s,reconnect=1s";

/// A member server over a file in `dir`, export `m`.
pub(crate) fn member(dir: &Path, i: usize) -> Server {
    ServerBuilder::new()
        .export(
            "m",
            format!("file:{},size={MEMBER_SIZE}", member_path(dir, i).display()),
        )
        .start()
}

pub(crate) fn member_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("member{i}.img"))
}

pub(crate) fn raid5_spec(members: &[&Server]) -> String {
    raid_spec(RAID5, members)
}

/// A level the fault tests run on: its spec's level, its member count,
/// the members it survives losing (killed together) and one more that
/// it does not survive losing on top of them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Level {
    pub(crate) name: &'static str,
    pub(crate) members: usize,
    pub(crate) survives: &'static [usize],
    pub(crate) fatal: usize,
}

pub(crate) const RAID5: Level = Level {
    name: "raid5",
    members: 3,
    survives: &[1],
    fatal: 0,
};

pub(crate) const RAID6: Level = Level {
    name: "raid6",
    members: 4,
    survives: &[1, 3],
    fatal: 0,
};

/// RAID 10 over four members, two copies: members 0 and 1 are a mirror
/// set, 2 and 3 the other; it survives 1 and 2 (one of each set), not 0
/// on top (its set's other copy is 1).
pub(crate) const RAID10: Level = Level {
    name: "raid10",
    members: 4,
    survives: &[1, 2],
    fatal: 0,
};

/// The spec of an array of `level` over `members`, 64 KiB unit.
pub(crate) fn raid_spec(level: Level, members: &[&Server]) -> String {
    let uris: Vec<String> = members.iter().map(|m| m.uri("m")).collect();
    format!(
        "{}:unit=64K,members={},{MEMBER_OPTIONS}",
        level.name,
        uris.join(",")
    )
}

/// Waits until member `i` of `head`'s array `vol` has taken more than
/// `n` requests (failing after a minute, so a load that never starts
/// fails the test rather than hangs it).
pub(crate) fn wait_member_requests(head: &Server, i: usize, n: f64) {
    let series = format!("sluice_raid_member_requests_total{{export=\"vol\",member=\"{i}\"");
    let deadline = Instant::now() + Duration::from_secs(60);
    while metric(head, &series) <= n {
        assert!(
            Instant::now() < deadline,
            "member {i} never took {n} requests"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// `sluice ARGS...`, with a time limit; returns its output whatever its
/// exit status.
pub(crate) fn sluice(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice");
    let started = Instant::now();
    while child.try_wait().expect("wait for sluice").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!(
                "`sluice {}` did not finish within {limit:?}",
                args.join(" ")
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect sluice output")
}

/// `sluice raid create SPEC`, which must succeed.
pub(crate) fn create(spec: &str) {
    let out = sluice(&["raid", "create", spec], Duration::from_secs(60));
    assert!(
        out.status.success(),
        "sluice raid create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let level = spec.split(':').next().unwrap_or_default();
    assert!(said.contains(&format!("created {level} array")), "{said}");
}

/// The head server exporting the array as `vol`.
fn head(spec: &str) -> Server {
    ServerBuilder::new().export("vol", spec).metrics().start()
}

pub(crate) fn qemu_io(uri: &str, cmds: &[&str]) -> CmdOutput {
    let mut c = tool("qemu-io")
        .args(["-f", "raw"])
        .arg(uri)
        .timeout(Duration::from_secs(90));
    for cmd in cmds {
        c = c.arg("-c").arg(cmd);
    }
    c.output()
}

pub(crate) fn qemu_io_ok(uri: &str, cmds: &[&str]) {
    let out = qemu_io(uri, cmds);
    out.assert_success();
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        !text.contains("verification failed") && !text.contains("failed:"),
        "qemu-io reported a failure; {}",
        out.describe()
    );
}

/// The value of the first metrics line that starts with `series`.
pub(crate) fn metric(server: &Server, series: &str) -> f64 {
    use std::io::{Read, Write};
    let addr = server.metrics.expect("started with metrics");
    let mut s = std::net::TcpStream::connect(addr).expect("connect to metrics");
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .expect("ask for metrics");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read metrics");
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

#[test]
fn raid5_over_three_sluice_members_serves_qemu_io_nbdinfo_and_fio() {
    let dir = tempdir();
    let members: Vec<Server> = (0..3).map(|i| member(dir.path(), i)).collect();
    let spec = raid5_spec(&members.iter().collect::<Vec<_>>());
    create(&spec);
    let head = head(&spec);
    let uri = head.uri("vol");

    let info = tool("nbdinfo").arg("--json").arg(&uri).run().json();
    let size = info["exports"][0]["export-size"]
        .as_u64()
        .expect("export-size");
    // Two data members of 64 MiB less the 64 KiB before the data.
    assert_eq!(size, 2 * ((64 << 20) - (64 << 10)));

    qemu_io_ok(
        &uri,
        &[
            "write -P 0xab 0 1M",
            "write -P 0xcd 1M 12k",
            "write -P 0x5e 100k 3k",
            "flush",
        ],
    );
    // A new connection reads back what was written, partial stripes too.
    qemu_io_ok(
        &uri,
        &[
            "read -P 0xab 0 100k",
            "read -P 0x5e 100k 3k",
            "read -P 0xab 103k 921k",
            "read -P 0xcd 1M 12k",
        ],
    );
    let out = qemu_io(&uri, &["read -P 0xcd 0 4k"]);
    assert!(
        !out.output.status.success(),
        "a wrong pattern must be detected; {}",
        out.describe()
    );

    // qemu-img writes a file with zero runs over the volume, and compare
    // finds it there (and the rest zero, as create left it).
    let src = dir.path().join("src.raw");
    write_random_file(
        &src,
        6 * MIB,
        7,
        &[(MIB, MIB + 4096), (4 * MIB + 100, 5000)],
    );
    tool("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(&uri)
        .run();
    tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(&uri)
        .run();

    fio_verify(
        &head,
        "raid5",
        &[
            "--rw=randwrite",
            "--bsrange=4k-128k",
            "--iodepth=16",
            "--size=16M",
            "--verify=crc32c",
        ],
        16 << 20,
    );
    // Every member carried requests.
    for i in 0..3 {
        let series = format!("sluice_raid_member_requests_total{{export=\"vol\",member=\"{i}\"");
        assert!(metric(&head, &series) > 0.0, "member {i}");
    }
}

#[test]
fn a_member_killed_under_fio_verify_leaves_the_volume_degraded_and_correct() {
    killed_under_fio_verify(RAID5);
}

#[test]
fn raid6_two_members_killed_under_fio_verify_leave_the_volume_degraded_and_correct() {
    killed_under_fio_verify(RAID6);
}

/// The members `level` survives losing are killed while fio writes and
/// verifies; fio's verify passes, each is failed and logged once by its
/// URI, and coming back they are refused as stale.
fn killed_under_fio_verify(level: Level) {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..level.members).map(|i| member(dir.path(), i)).collect();
    let spec = raid_spec(level, &members.iter().collect::<Vec<_>>());
    create(&spec);
    let mut head = head(&spec);
    let killed_uris: Vec<String> = level
        .survives
        .iter()
        .map(|&i| members[i].uri("m"))
        .collect();
    let before = metric(
        &head,
        "sluice_raid_member_requests_total{export=\"vol\",member=\"0\"",
    );
    thread::scope(|s| {
        let fio = s.spawn(|| {
            fio_verify(
                &head,
                "degraded",
                &[
                    "--rw=randwrite",
                    "--bs=16k",
                    "--iodepth=8",
                    "--size=24M",
                    "--verify=crc32c",
                    // About 3 s of writes, so the kill lands in them.
                    "--rate=8m",
                ],
                24 << 20,
            );
        });
        // The kill lands in fio's writes: once they reach the members.
        wait_member_requests(&head, 0, before + 100.0);
        for &i in level.survives {
            members[i].signal(Signal::KILL);
        }
        fio.join().expect("fio ran to the end and verified");
    });
    head.assert_running();
    assert_eq!(
        metric(&head, "sluice_raid_members_failed"),
        level.survives.len() as f64
    );
    let failures = |log: &str| {
        log.lines()
            .filter(|l| l.contains("member failed; continuing degraded"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut log = head.wait_for_log("member failed; continuing degraded");
    while failures(&log) < level.survives.len() {
        assert!(
            Instant::now() < deadline,
            "not every failure logged:\n{log}"
        );
        thread::sleep(Duration::from_millis(20));
        log = head.stderr_log();
    }
    assert_eq!(
        failures(&log),
        level.survives.len(),
        "logged once each:\n{log}"
    );
    for uri in &killed_uris {
        assert!(
            log.lines()
                .any(|l| l.contains("member failed; continuing degraded") && l.contains(uri)),
            "{uri} failed, by its name:\n{log}"
        );
    }

    // The array is shut down (clean), the killed members' servers come
    // back on their files: stale, refused at start, named.
    drop(head);
    for &i in level.survives {
        let _ = members[i].wait_exit(Duration::from_secs(5));
        members[i] = member(dir.path(), i);
    }
    let back = &members[level.survives[0]];
    let spec = raid_spec(level, &members.iter().collect::<Vec<_>>());
    let out = sluice(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--export",
            &format!("vol={spec}"),
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a stale member must stop the start: {stderr}"
    );
    let said = format!("member {} ({}) is stale", level.survives[0], back.uri("m"));
    assert!(stderr.contains(&said), "{stderr}");
}

#[test]
fn raid10_one_member_of_each_set_killed_under_fio_verify_leaves_the_volume_degraded_and_correct() {
    killed_under_fio_verify(RAID10);
}

#[test]
fn a_second_failure_gives_io_errors_promptly() {
    failure_too_many_gives_io_errors_promptly(RAID5);
}

#[test]
fn raid6_a_third_failure_gives_io_errors_promptly() {
    failure_too_many_gives_io_errors_promptly(RAID6);
}

#[test]
fn raid10_losing_both_copies_of_a_set_gives_io_errors_promptly() {
    failure_too_many_gives_io_errors_promptly(RAID10);
}

/// The members `level` survives losing are killed and reads stay right;
/// one more, and reads fail with EIO at once.
fn failure_too_many_gives_io_errors_promptly(level: Level) {
    let dir = tempdir();
    let members: Vec<Server> = (0..level.members).map(|i| member(dir.path(), i)).collect();
    let spec = raid_spec(level, &members.iter().collect::<Vec<_>>());
    create(&spec);
    // The array from the TOML configuration this time.
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[[export]]\nname = \"vol\"\nspec = \"{spec}\"\ndescription = \"{}\"\n",
            level.name
        ),
    )
    .expect("write the config");
    let head = ServerBuilder::new()
        .arg("--config")
        .arg(config.display().to_string())
        .start();
    let uri = head.uri("vol");
    qemu_io_ok(&uri, &["write -P 0x77 0 1M", "flush"]);
    for &i in level.survives {
        members[i].signal(Signal::KILL);
    }
    // As many members lost as the level survives: reads still right.
    qemu_io_ok(&uri, &["read -P 0x77 0 1M"]);
    members[level.fatal].signal(Signal::KILL);
    let started = Instant::now();
    let out = qemu_io(&uri, &["read -P 0x77 0 1M"]);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "no hang: {:?}",
        started.elapsed()
    );
    let text = format!("{}{}", out.stdout(), out.stderr());
    assert!(
        text.contains("Input/output error"),
        "reads that need one lost member too many fail with EIO; {}",
        out.describe()
    );
    assert!(!text.contains("read 1048576/1048576"), "{}", out.describe());
}

#[test]
fn members_without_superblocks_refuse_to_serve_and_say_what_to_run() {
    let dir = tempdir();
    let members: Vec<Server> = (0..3).map(|i| member(dir.path(), i)).collect();
    let spec = raid5_spec(&members.iter().collect::<Vec<_>>());
    let out = sluice(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--export",
            &format!("vol={spec}"),
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "member 0 ({}) has no sluice RAID superblock",
            members[0].uri("m")
        )),
        "{stderr}"
    );
    assert!(stderr.contains("sluice raid create"), "{stderr}");
    // Members of an array given in the wrong order.
    create(&spec);
    let swapped = raid5_spec(&[&members[1], &members[0], &members[2]]);
    let out = sluice(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--export",
            &format!("vol={swapped}"),
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "member 0 ({}) is member 1 of its array",
            members[1].uri("m")
        )),
        "{stderr}"
    );
    // Created again without --force: refused.
    let out = sluice(&["raid", "create", &spec], Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("pass --force"),
        "{stderr}"
    );
}

/// A peer NBD server (nbdkit or qemu-nbd) on a Unix socket, killed on
/// drop.
struct Peer {
    child: std::process::Child,
    socket: PathBuf,
    export: &'static str,
}

impl Peer {
    /// nbdkit's memory plugin.
    fn nbdkit(socket: PathBuf) -> Self {
        let mut cmd = Command::new(require_tool("nbdkit"));
        cmd.args(["-f", "-U"])
            .arg(&socket)
            .args(["memory", MEMBER_SIZE]);
        Self::start(cmd, socket, "")
    }

    /// qemu-nbd over a new raw file, export `m`.
    fn qemu_nbd(socket: PathBuf, file: &Path) -> Self {
        std::fs::File::create(file)
            .and_then(|f| f.set_len(64 * MIB))
            .expect("create the qemu-nbd image");
        let mut cmd = Command::new(require_tool("qemu-nbd"));
        cmd.args(["-f", "raw", "-x", "m", "--persistent", "-k"])
            .arg(&socket)
            .arg(file);
        Self::start(cmd, socket, "m")
    }

    fn start(mut cmd: Command, socket: PathBuf, export: &'static str) -> Self {
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .expect("start the peer server");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "no socket {}", socket.display());
            thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            socket,
            export,
        }
    }

    fn uri(&self) -> String {
        format!(
            "nbd+unix:///{}?socket={}",
            self.export,
            self.socket.display()
        )
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn raid5_over_sluice_nbdkit_and_qemu_nbd_members() {
    let dir = tempdir();
    let sluice_member = member(dir.path(), 0);
    let nbdkit = Peer::nbdkit(dir.path().join("nbdkit.sock"));
    let qemu = Peer::qemu_nbd(dir.path().join("qemu.sock"), &dir.path().join("qemu.img"));
    let uris = [sluice_member.uri("m"), nbdkit.uri(), qemu.uri()];
    let spec = format!("raid5:unit=16K,members={},{MEMBER_OPTIONS}", uris.join(","));
    create(&spec);
    let head = head(&spec);
    let uri = head.uri("vol");
    fio_verify(
        &head,
        "peers",
        &[
            "--rw=randwrite",
            "--bsrange=4k-64k",
            "--iodepth=16",
            "--size=8M",
            "--verify=crc32c",
        ],
        8 << 20,
    );
    qemu_io_ok(
        &uri,
        &["write -P 0x3c 8k 100k", "write -P 0xc3 1M 64k", "flush"],
    );
    qemu_io_ok(&uri, &["read -P 0x3c 8k 100k", "read -P 0xc3 1M 64k"]);
    // Losing the qemu-nbd member: the volume reads right from the
    // other two.
    drop(qemu);
    qemu_io_ok(&uri, &["read -P 0x3c 8k 100k", "read -P 0xc3 1M 64k"]);
    assert_eq!(metric(&head, "sluice_raid_members_failed"), 1.0);
}

#[test]
fn raid0_over_tls_members() {
    let pki = sluice_testkit::pki::Pki::shared();
    let dir = tempdir();
    let members: Vec<Server> = (0..2)
        .map(|i| {
            ServerBuilder::new()
                .export(
                    "m",
                    format!("file:{},size=16M", member_path(dir.path(), i).display()),
                )
                .arg("--tls")
                .arg("require")
                .arg("--tls-certificates")
                .arg(pki.server().to_string_lossy())
                .start()
        })
        .collect();
    let certs = pki.client("client1");
    let uris: Vec<String> = members
        .iter()
        .map(|m| format!("nbds://{}/m?tls-certificates={}", m.addr(), certs.display()))
        .collect();
    let spec = format!("raid0:unit=4K,members={}", uris.join(","));
    let out = sluice(&["raid", "create", &spec], Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = head(&spec);
    let uri = head.uri("vol");
    qemu_io_ok(
        &uri,
        &["write -P 0x21 0 40k", "write -P 0x42 40k 7k", "flush"],
    );
    qemu_io_ok(&uri, &["read -P 0x21 0 40k", "read -P 0x42 40k 7k"]);
    // Both members hold data: RAID 0 stripes 4 KiB chunks across them,
    // past each member's 4 KiB superblock area.
    drop(head);
    for i in 0..2 {
        let bytes = std::fs::read(member_path(dir.path(), i)).expect("read member file");
        assert_eq!(&bytes[4096..8192], &[0x21; 4096][..], "member {i}");
        // The superblock's state byte: the server marked the array clean
        // when it shut down.
        assert_eq!(&bytes[..8], b"SLUICERD");
        assert_eq!(bytes[49], 0, "member {i} left dirty");
    }
}

#[test]
fn a_two_level_array_of_raid1_pairs_under_raid0_is_created_served_and_survives_one_of_each_pair() {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..4).map(|i| member(dir.path(), i)).collect();
    let uris: Vec<String> = members.iter().map(|m| m.uri("m")).collect();
    let pair = |a: usize, b: usize| {
        format!(
            "(raid1:unit=64K,members={},{},{MEMBER_OPTIONS})",
            uris[a], uris[b]
        )
    };
    let spec = format!("raid0:unit=64K,members={},{}", pair(0, 1), pair(2, 3));
    // Both levels made by one create: the pairs, then the stripe over
    // their volumes.
    create(&spec);
    let mut head = head(&spec);
    let uri = head.uri("vol");
    let info = tool("nbdinfo").arg("--json").arg(&uri).run().json();
    let size = info["exports"][0]["export-size"]
        .as_u64()
        .expect("export-size");
    // Each pair holds 64 MiB less its 64 KiB superblock area; the stripe
    // over them takes another 64 KiB of each.
    assert_eq!(size, 2 * ((64 << 20) - (128 << 10)));
    qemu_io_ok(&uri, &["write -P 9 0 8M", "flush", "read -P 9 0 8M"]);
    // One member of each pair dies: every byte is still served.
    for i in [3, 0] {
        members[i].signal(Signal::KILL);
        let _ = members[i].wait_exit(Duration::from_secs(5));
    }
    qemu_io_ok(
        &uri,
        &["read -P 9 0 8M", "write -P 10 8M 1M", "read -P 10 8M 1M"],
    );
    head.assert_running();
    members.truncate(3);
}
