//! Operating a RAID 5 volume through `sluice serve --admin`: a killed
//! member shows in `sluice raid status` as degraded; `sluice raid
//! replace` puts a fresh member server in its place and rebuilds it
//! while fio writes and verifies, status showing the progress and then
//! clean; the data is what a reference says (qemu-img compare); scrub
//! finds no mismatch, then finds a parity block corrupted in a member's
//! file, and `--repair` fixes it. A member killed while the array is
//! idle shows failed without any I/O. A RAID 1 volume loses a member
//! under fio, gets it replaced and rebuilt, and then serves every byte
//! from that rebuilt member alone.

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::fio::fio_verify;
use crate::harness::{tempdir, tool, write_random_file, Server, ServerBuilder, MIB};
use crate::raid::{
    create, member, member_path, metric, qemu_io_ok, raid5_spec, raid_spec, sluice, Level,
    MEMBER_OPTIONS, RAID10, RAID5, RAID6,
};

/// `sluice raid ARGS --admin SOCKET`, which must succeed; its stdout.
fn raid(admin: &Path, args: &[&str]) -> String {
    let admin = admin.display().to_string();
    let mut all = vec!["raid"];
    all.extend_from_slice(&args[..1]);
    all.extend_from_slice(&["--admin", &admin]);
    all.extend_from_slice(&args[1..]);
    let out = sluice(&all, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "sluice {} failed: {}",
        all.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `sluice raid status` until `done` holds for its output.
fn wait_status(admin: &Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let status = raid(admin, &["status", "vol"]);
        if done(&status) {
            return status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "status never showed {what}:\n{status}"
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// Fills the volume at `uri` from a new random reference file in `dir`
/// (`size` bytes from `seed`, zeros over `zero_ranges`); returns the
/// file, for comparing the volume with later.
fn random_volume(
    dir: &Path,
    uri: &str,
    size: u64,
    seed: u64,
    zero_ranges: &[(u64, u64)],
) -> PathBuf {
    let reference = dir.join("reference.raw");
    write_random_file(&reference, size, seed, zero_ranges);
    tool("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&reference)
        .arg(uri)
        .run();
    reference
}

/// The line of `status` about member `i`.
fn member_line(status: &str, i: usize) -> &str {
    let head = format!("  member {i} ");
    status
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no member {i} in\n{status}"))
}

#[test]
fn replace_rebuilds_under_fio_and_scrub_finds_and_repairs_parity() {
    replace_under_fio_and_scrub(RAID5);
}

#[test]
fn raid6_replace_rebuilds_under_fio_and_scrub_finds_and_repairs_parity() {
    replace_under_fio_and_scrub(RAID6);
}

#[test]
fn raid10_replace_rebuilds_under_fio_and_scrub_finds_and_repairs_a_copy() {
    replace_under_fio_and_scrub(RAID10);
}

/// Member 1 of an array of `level` is killed and replaced by a fresh
/// member server, rebuilt while fio writes and verifies; the volume is
/// the reference after, and scrub finds and repairs a corrupted parity
/// block.
fn replace_under_fio_and_scrub(level: Level) {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..level.members).map(|i| member(dir.path(), i)).collect();
    let spec = raid_spec(level, &members.iter().collect::<Vec<_>>());
    create(&spec);
    let admin = dir.path().join("admin.sock");
    let head = ServerBuilder::new()
        .export("vol", &spec)
        .metrics()
        .arg(format!("--admin=unix:{}", admin.display()))
        .arg("--rebuild-rate=16M")
        .start();
    let mode = std::fs::metadata(&admin)
        .expect("admin socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "admin socket mode {mode:o}");
    let uri = head.uri("vol");
    let status = raid(&admin, &["status"]);
    assert!(
        status.starts_with(&format!("vol: {} unit 65536", level.name)),
        "{status}"
    );
    assert!(status.contains("state clean"), "{status}");

    // The reference: 8 MiB with zero runs, written over the volume.
    let reference = random_volume(dir.path(), &uri, 8 * MIB, 11, &[(2 * MIB, 100_000)]);

    // Kill member 1; the next reads find it gone.
    members[1].signal(Signal::KILL);
    let _ = members[1].wait_exit(Duration::from_secs(5));
    let compare = || {
        tool("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&reference)
            .arg(&uri)
            .timeout(Duration::from_secs(120))
            .run();
    };
    compare();
    let status = raid(&admin, &["status", "vol"]);
    assert!(status.contains("state degraded"), "{status}");
    assert!(member_line(&status, 1).contains("state failed"), "{status}");
    assert!(member_line(&status, 0).contains("state active"), "{status}");

    // A fresh member server in its place, rebuilt while fio writes and
    // verifies past the reference's bytes.
    let fresh = member(dir.path(), level.members);
    let fresh_uri = fresh.uri("m");
    let said = raid(&admin, &["replace", "vol", "1", &fresh_uri]);
    assert!(said.contains("rebuilding"), "{said}");
    thread::scope(|s| {
        let fio = s.spawn(|| {
            fio_verify(
                &head,
                "rebuild",
                &[
                    "--rw=randwrite",
                    "--bsrange=4k-128k",
                    "--iodepth=8",
                    "--offset=32M",
                    "--size=16M",
                    "--verify=crc32c",
                    "--rate=4m",
                ],
                16 << 20,
            );
        });
        let during = wait_status(&admin, "rebuild progress", |s| {
            s.lines().any(|l| {
                l.starts_with("  rebuild member 1 ")
                    && !l.contains(" 0.0%")
                    && !l.contains("100.0%")
            })
        });
        assert!(during.contains("state rebuilding"), "{during}");
        assert!(member_line(&during, 1).contains(&fresh_uri), "{during}");
        fio.join().expect("fio verified during the rebuild");
    });
    let after = wait_status(&admin, "clean", |s| s.contains("state clean"));
    assert!(member_line(&after, 1).contains("state active"), "{after}");
    assert!(!after.contains("rebuild member"), "{after}");
    let total = metric(&head, "sluice_raid_rebuild_total_bytes");
    assert!(total > 0.0);
    assert_eq!(metric(&head, "sluice_raid_rebuild_bytes"), total);

    // fio's region zeroed again, the volume is the reference (qemu-img
    // compare takes the larger image's rest as zero).
    qemu_io_ok(&uri, &["write -z 32M 16M", "flush"]);
    compare();

    let clean = raid(&admin, &["scrub", "vol"]);
    assert!(clean.contains(", 0 mismatches"), "{clean}");

    // Parity (RAID 6: P) of stripe 0 is on the last member
    // (left-symmetric; RAID 10: the second copy of chunk 1); its data
    // starts one 64 KiB unit into the member file.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(member_path(dir.path(), level.members - 1))
        .expect("open the parity member's file");
    file.write_all_at(b"corrupted parity", 64 * 1024 + 100)
        .expect("corrupt");
    file.sync_all().expect("sync");
    let found = raid(&admin, &["scrub", "vol"]);
    assert!(found.contains(", 1 mismatches, 0 repaired"), "{found}");
    let status = raid(&admin, &["status", "vol"]);
    assert!(status.contains("scrub done 100.0%"), "{status}");
    assert!(status.contains("mismatches 1 repaired 0"), "{status}");
    let fixed = raid(&admin, &["scrub", "--repair", "vol"]);
    assert!(fixed.contains(", 1 mismatches, 1 repaired"), "{fixed}");
    let clean = raid(&admin, &["scrub", "vol"]);
    assert!(clean.contains(", 0 mismatches"), "{clean}");
    compare();

    // A request the server refuses is an error naming the cause.
    let out = sluice(
        &[
            "raid",
            "scrub",
            "--admin",
            &admin.display().to_string(),
            "nosuch",
        ],
        Duration::from_secs(30),
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no export named \"nosuch\""), "{stderr}");
}

/// `raid replace --wait` ends with the array's state spelt as `raid
/// status` spells it.
#[test]
fn replace_wait_ends_with_the_state_in_the_status_spelling() {
    let dir = tempdir();
    let members: Vec<Server> = (0..3).map(|i| member(dir.path(), i)).collect();
    let spec = raid5_spec(&members.iter().collect::<Vec<_>>());
    create(&spec);
    let admin = dir.path().join("admin.sock");
    let _head = ServerBuilder::new()
        .export("vol", &spec)
        .arg(format!("--admin=unix:{}", admin.display()))
        .start();
    let fresh = member(dir.path(), 3);
    let said = raid(&admin, &["replace", "vol", "1", &fresh.uri("m"), "--wait"]);
    assert!(said.trim_end().ends_with("rebuilt; array clean"), "{said}");
}

/// The counters of member `i` that move only with array I/O.
fn io_counters(status: &str, i: usize) -> String {
    let line = member_line(status, i);
    let from = line.find(" reads ").expect("reads");
    let to = line.find(" probes ").expect("probes");
    line[from..to].to_owned()
}

#[test]
fn a_member_killed_while_the_array_is_idle_shows_failed_without_io() {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..3).map(|i| member(dir.path(), i)).collect();
    let spec = format!(
        "{},probe=100ms",
        raid5_spec(&members.iter().collect::<Vec<_>>())
    );
    create(&spec);
    let admin = dir.path().join("admin.sock");
    let head = ServerBuilder::new()
        .export("vol", &spec)
        .metrics()
        .arg(format!("--admin=unix:{}", admin.display()))
        .start();
    // Idle members are probed and answer.
    let before = wait_status(&admin, "a probe answered", |s| {
        !member_line(s, 1).contains(" probes 0 ")
    });
    assert!(before.contains("state clean"), "{before}");
    assert!(member_line(&before, 1).contains("state active"), "{before}");

    // Member 1 dies; nobody reads or writes the volume.
    members[1].signal(Signal::KILL);
    let _ = members[1].wait_exit(Duration::from_secs(5));
    let after = wait_status(&admin, "member 1 failed", |s| {
        member_line(s, 1).contains("state failed")
    });
    assert!(after.contains("state degraded"), "{after}");
    for i in [0, 2] {
        assert!(member_line(&after, i).contains("state active"), "{after}");
        assert_eq!(
            io_counters(&after, i),
            io_counters(&before, i),
            "the array did I/O:\n{before}\n{after}"
        );
    }

    // The last good answers: member 1's stopped when it died, the
    // others' keep coming (probes).
    let json = raid(&admin, &["status", "--json", "vol"]);
    let arrays: serde_json::Value = serde_json::from_str(&json).expect("status JSON");
    let m = &arrays[0]["members"];
    let last = |i: usize| m[i]["last_answer_unix_ms"].as_u64().expect("last answer");
    assert!(last(1) < last(0) && last(1) < last(2), "{json}");
    assert_eq!(m[1]["state"], "failed", "{json}");
    assert!(metric(&head, "sluice_raid_member_last_answer_timestamp_seconds") > 1.0e9);
}

#[test]
fn raid1_survives_a_kill_under_fio_is_rebuilt_and_then_serves_from_the_copy_alone() {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..3).map(|i| member(dir.path(), i)).collect();
    let uris: Vec<String> = members.iter().map(|m| m.uri("m")).collect();
    let spec = format!(
        "raid1:unit=64K,members={},{MEMBER_OPTIONS},probe=200ms",
        uris.join(",")
    );
    create(&spec);
    let admin = dir.path().join("admin.sock");
    let head = ServerBuilder::new()
        .export("vol", &spec)
        .metrics()
        .arg(format!("--admin=unix:{}", admin.display()))
        .arg("--rebuild-rate=0")
        .start();
    let uri = head.uri("vol");
    let status = raid(&admin, &["status", "vol"]);
    // One member's data area: 64 MiB less the 64 KiB before the data.
    assert!(
        status.starts_with("vol: raid1 unit 65536 size 67043328 members 3 state clean"),
        "{status}"
    );
    let reference = random_volume(dir.path(), &uri, 8 * MIB, 21, &[(MIB, 70_000)]);

    // Member 1 killed under a verified write load: fio sees no error.
    thread::scope(|s| {
        let fio = s.spawn(|| {
            fio_verify(
                &head,
                "mirror",
                &[
                    "--rw=randwrite",
                    "--bs=16k",
                    "--iodepth=8",
                    "--offset=32M",
                    "--size=16M",
                    "--verify=crc32c",
                    "--rate=8m",
                ],
                16 << 20,
            );
        });
        let _ = wait_status(&admin, "fio writing", |s| {
            !member_line(s, 1).contains(" writes 0 ")
        });
        members[1].signal(Signal::KILL);
        fio.join().expect("fio ran to the end and verified");
    });
    let status = wait_status(&admin, "member 1 failed", |s| {
        member_line(s, 1).contains("state failed")
    });
    assert!(status.contains("state degraded"), "{status}");

    // A fresh member in its place, copied from a mirror.
    let fresh = member(dir.path(), 3);
    let said = raid(&admin, &["replace", "--wait", "vol", "1", &fresh.uri("m")]);
    assert!(said.contains("rebuilding"), "{said}");
    let status = wait_status(&admin, "clean", |s| s.contains("state clean"));
    assert!(member_line(&status, 1).contains("state active"), "{status}");

    // fio's region zeroed again, so the volume is the reference (qemu-img
    // compare takes the larger image's rest as zero).
    qemu_io_ok(&uri, &["write -z 32M 16M", "flush"]);

    // Both other mirrors die with nobody reading: the copy alone serves
    // the volume, every byte as the reference says.
    for i in [0, 2] {
        members[i].signal(Signal::KILL);
        let _ = members[i].wait_exit(Duration::from_secs(5));
    }
    let status = wait_status(&admin, "members 0 and 2 failed", |s| {
        member_line(s, 0).contains("state failed") && member_line(s, 2).contains("state failed")
    });
    assert!(status.contains("state degraded"), "{status}");
    tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&reference)
        .arg(&uri)
        .timeout(Duration::from_secs(120))
        .run();
    qemu_io_ok(&uri, &["write -P 7 40M 1M", "read -P 7 40M 1M"]);
    assert_eq!(metric(&head, "sluice_raid_members_failed"), 2.0);
}

#[test]
fn a_raid1_mirror_restarted_within_the_window_is_put_back_and_resynced_from_what_it_missed() {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..2).map(|i| member(dir.path(), i)).collect();
    let uris: Vec<String> = members.iter().map(|m| m.uri("m")).collect();
    let spec = format!(
        "raid1:unit=64K,members={},{MEMBER_OPTIONS},probe=200ms,readd=5m",
        uris.join(",")
    );
    create(&spec);
    let admin = dir.path().join("admin.sock");
    let head = ServerBuilder::new()
        .export("vol", &spec)
        .arg(format!("--admin=unix:{}", admin.display()))
        .arg("--rebuild-rate=0")
        .start();
    let uri = head.uri("vol");
    let reference = random_volume(dir.path(), &uri, 8 * MIB, 31, &[]);

    // Member 1 goes away; 1 MiB (one 16-stripe run of 64 KiB units) is
    // written while it is.
    let addr = members[1].addr();
    members[1].signal(Signal::KILL);
    let _ = members[1].wait_exit(Duration::from_secs(5));
    wait_status(&admin, "member 1 failed", |s| {
        member_line(s, 1).contains("state failed")
    });
    qemu_io_ok(&uri, &["write -P 5 4M 1M", "flush"]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&reference)
        .expect("open the reference");
    file.write_all_at(&vec![5u8; MIB as usize], 4 * MIB)
        .expect("update the reference");
    let written = |status: &str, i: usize| -> u64 {
        let line = member_line(status, i);
        let at = line.find(" written_bytes ").expect("written_bytes") + 15;
        line[at..]
            .split(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number")
    };
    let before = written(&raid(&admin, &["status", "vol"]), 1);

    // The same member server comes back on its file and address: the
    // array puts it back by itself and copies only what it missed.
    members[1] = ServerBuilder::new()
        .listen(addr.to_string())
        .export(
            "m",
            format!("file:{},size=64M", member_path(dir.path(), 1).display()),
        )
        .start();
    let status = wait_status(&admin, "member 1 back and the array clean", |s| {
        s.contains("state clean") && member_line(s, 1).contains("state active")
    });
    assert_eq!(written(&status, 1) - before, MIB, "{status}");

    // Member 0 dies: member 1 alone has every byte.
    members[0].signal(Signal::KILL);
    let _ = members[0].wait_exit(Duration::from_secs(5));
    wait_status(&admin, "member 0 failed", |s| {
        member_line(s, 0).contains("state failed")
    });
    tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&reference)
        .arg(&uri)
        .timeout(Duration::from_secs(120))
        .run();
}

/// RAID 6 with two members lost: each is replaced and rebuilt, one at a
/// time (a second replace while the first rebuilds is refused, naming
/// it), and then the two rebuilt members with the two original ones
/// gone still hold the whole volume.
#[test]
fn raid6_two_members_lost_are_rebuilt_one_after_the_other_and_hold_the_volume() {
    let dir = tempdir();
    let mut members: Vec<Server> = (0..4).map(|i| member(dir.path(), i)).collect();
    let spec = raid_spec(RAID6, &members.iter().collect::<Vec<_>>());
    create(&spec);
    let admin = dir.path().join("admin.sock");
    let head = ServerBuilder::new()
        .export("vol", &spec)
        .arg(format!("--admin=unix:{}", admin.display()))
        .arg("--rebuild-rate=32M")
        .start();
    let uri = head.uri("vol");
    let reference = random_volume(dir.path(), &uri, 8 * MIB, 17, &[(MIB, 70_000)]);
    let compare = || {
        tool("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&reference)
            .arg(&uri)
            .timeout(Duration::from_secs(120))
            .run();
    };
    for i in [1, 3] {
        members[i].signal(Signal::KILL);
        let _ = members[i].wait_exit(Duration::from_secs(5));
    }
    compare();
    let status = raid(&admin, &["status", "vol"]);
    for i in [1, 3] {
        assert!(member_line(&status, i).contains("state failed"), "{status}");
    }

    let fresh: Vec<Server> = (4..6).map(|i| member(dir.path(), i)).collect();
    let said = raid(&admin, &["replace", "vol", "1", &fresh[0].uri("m")]);
    assert!(said.contains("rebuilding"), "{said}");
    wait_status(&admin, "member 1's rebuild under way", |s| {
        s.lines()
            .any(|l| l.starts_with("  rebuild member 1 ") && !l.contains("100.0%"))
    });
    let admin_arg = admin.display().to_string();
    let out = sluice(
        &[
            "raid",
            "replace",
            "--admin",
            &admin_arg,
            "vol",
            "3",
            &fresh[1].uri("m"),
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = raid(&admin, &["status", "vol"]);
    if member_line(&status, 1).contains("state rebuilding") {
        assert!(!out.status.success(), "a second rebuild at once: {stderr}");
        assert!(stderr.contains("member 1 is being rebuilt"), "{stderr}");
    }
    wait_status(&admin, "member 1 rebuilt", |s| {
        member_line(s, 1).contains("state active")
    });
    if !out.status.success() {
        let said = raid(
            &admin,
            &["replace", "vol", "3", &fresh[1].uri("m"), "--wait"],
        );
        assert!(said.trim_end().ends_with("rebuilt; array clean"), "{said}");
    }
    let status = wait_status(&admin, "clean", |s| s.contains("state clean"));
    assert!(member_line(&status, 3).contains("state active"), "{status}");
    compare();

    // The two original survivors go: the rebuilt members and P and Q
    // hold every byte.
    for i in [0, 2] {
        members[i].signal(Signal::KILL);
        let _ = members[i].wait_exit(Duration::from_secs(5));
    }
    compare();
}
