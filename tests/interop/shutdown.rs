//! Signals: graceful exit with status 0 and no lost data.

use rustix::process::Signal;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use crate::harness::{
    assert_bytes_eq, nbdsh_script, random_bytes, read_file_range, scrape, tempdir, tool,
    ServerBuilder, MIB,
};
use sluice_testkit::raw_nbd::{
    Finish, RawClient, Replies, CMD_WRITE, ESHUTDOWN, SIMPLE_REPLY_MAGIC,
};

#[test]
fn sigterm_with_idle_client_exits_zero_and_keeps_written_data() {
    let dir = tempdir();
    let backing = dir.path().join("disk.img");
    let mut srv = ServerBuilder::new()
        .file_export("disk", &backing, "size=16M")
        .start();

    let a = random_bytes(1, 3 * MIB as usize + 123);
    let b = random_bytes(2, 777_777);
    let (off_a, off_b) = (4096 + 5, 9 * MIB + 1);
    let fa = dir.path().join("a.bin");
    let fb = dir.path().join("b.bin");
    std::fs::write(&fa, &a).expect("write a");
    std::fs::write(&fb, &b).expect("write b");

    let mut client = nbdsh_script("idle_client.py")
        .args([
            srv.uri("disk"),
            fa.display().to_string(),
            off_a.to_string(),
            fb.display().to_string(),
            off_b.to_string(),
        ])
        .spawn();
    let mut line = String::new();
    BufReader::new(client.stdout.take().expect("client stdout"))
        .read_line(&mut line)
        .expect("read client output");
    assert_eq!(line.trim(), "ready", "idle client did not get ready");

    // Flushed data is already in the file while the server runs.
    assert_bytes_eq(
        "flushed region before SIGTERM",
        &read_file_range(&backing, off_a, a.len()),
        &a,
    );

    let t0 = Instant::now();
    srv.signal(Signal::TERM);
    let status = srv.wait_exit(Duration::from_secs(10));
    let _ = client.kill();
    let _ = client.wait();
    let status = status.unwrap_or_else(|| {
        panic!(
            "sluice did not exit within 10 s of SIGTERM with an idle client connected\n{}",
            srv.stderr_log()
        )
    });
    assert!(
        status.success(),
        "sluice must exit 0 on SIGTERM, got {status}\n{}",
        srv.stderr_log()
    );
    eprintln!("exited {:?} after SIGTERM", t0.elapsed());

    assert_bytes_eq(
        "flushed region after exit",
        &read_file_range(&backing, off_a, a.len()),
        &a,
    );
    assert_bytes_eq(
        "acknowledged (unflushed) region after graceful exit",
        &read_file_range(&backing, off_b, b.len()),
        &b,
    );
    assert_eq!(std::fs::metadata(&backing).expect("stat").len(), 16 * MIB);
}

#[test]
fn sigint_exits_zero_and_flushes_acknowledged_writes() {
    let dir = tempdir();
    let backing = dir.path().join("disk.img");
    let mut srv = ServerBuilder::new()
        .file_export("disk", &backing, "size=4M")
        .start();
    // Raw client: write (no flush), then stay connected.
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    let data = random_bytes(3, 200_000);
    assert_eq!(c.write(1, 1000, &data), 0);
    srv.signal(Signal::INT);
    let status = srv
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit within 10 s of SIGINT\n{}", srv.stderr_log()));
    assert!(
        status.success(),
        "exit status {status}\n{}",
        srv.stderr_log()
    );
    drop(c);
    assert_bytes_eq(
        "acknowledged write after SIGINT",
        &read_file_range(&backing, 1000, data.len()),
        &data,
    );
}

/// `sluice serve 2>&1 | tee log` whose tee goes away: the log lines that
/// follow meet a pipe without a reader. They are counted and dropped;
/// the server goes on serving and still stops on SIGTERM.
#[test]
fn a_server_whose_log_reader_goes_away_serves_on_and_stops_on_sigterm() {
    let mut srv = ServerBuilder::new()
        .export("disk", "mem:1M")
        .metrics()
        .stderr_pipe()
        .start();
    srv.close_stderr_pipe();
    // Each connection logs lines at the default level.
    for _ in 0..3 {
        let out = tool("nbdinfo")
            .arg("--size")
            .arg(srv.uri("disk"))
            .timeout(Duration::from_secs(20))
            .run();
        assert_eq!(out.stdout().trim(), MIB.to_string());
    }
    // The log's own thread writes (and fails) a moment later.
    let metrics = srv.metrics.expect("started with metrics()");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !scrape(metrics)
        .lines()
        .filter_map(|l| l.strip_prefix("sluice_log_write_errors_total "))
        .any(|v| v.trim().parse::<f64>().is_ok_and(|n| n > 0.0))
    {
        assert!(Instant::now() < deadline, "no failed log write was counted");
        std::thread::sleep(Duration::from_millis(10));
    }
    srv.signal(Signal::TERM);
    let status = srv
        .wait_exit(Duration::from_secs(10))
        .expect("no exit within 10 s of SIGTERM");
    assert!(status.success(), "exit status {status}");
}

#[test]
fn sigterm_with_no_clients_exits_zero_quickly() {
    let mut srv = ServerBuilder::new().export("disk", "mem:1M").start();
    tool("nbdinfo").arg("--size").arg(srv.uri("disk")).run();
    srv.signal(Signal::TERM);
    let status = srv
        .wait_exit(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no exit within 5 s of SIGTERM\n{}", srv.stderr_log()));
    assert!(
        status.success(),
        "exit status {status}\n{}",
        srv.stderr_log()
    );
}

#[test]
fn sigterm_finishes_a_write_whose_payload_is_still_arriving() {
    // "Finishes in-flight": a WRITE whose header (and half its payload)
    // arrived before SIGTERM gets a reply once the rest of the payload
    // arrives (200 ms later): success (and then the data is on disk after
    // exit 0) or ESHUTDOWN. Closing the connection without any reply is
    // what the protocol says a server SHOULD NOT do ("wait for inflight
    // requests to be serviced prior to initiating a hard disconnect").
    let dir = tempdir();
    let backing = dir.path().join("disk.img");
    let mut srv = ServerBuilder::new()
        .file_export("disk", &backing, "size=64M")
        .start();
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    let data = random_bytes(4, 32 * MIB as usize);
    let half = data.len() / 2;
    c.send(CMD_WRITE, 7, MIB, data.len() as u64, &data[..half]);
    std::thread::sleep(Duration::from_millis(100));
    srv.signal(Signal::TERM);
    std::thread::sleep(Duration::from_millis(200));
    let rest = c.s.write_all(&data[half..]);
    let mut hdr = [0u8; 16];
    let reply = rest.and_then(|()| c.s.read_exact(&mut hdr));
    let status = srv
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no exit within 10 s of SIGTERM\n{}", srv.stderr_log()));
    assert!(
        status.success(),
        "exit status {status}\n{}",
        srv.stderr_log()
    );
    if let Err(e) = reply {
        panic!(
            "the WRITE in flight at SIGTERM was dropped (connection closed: {e}) instead of \
             being finished and acknowledged\n{}",
            srv.stderr_log()
        );
    }
    assert_eq!(&hdr[..4], &SIMPLE_REPLY_MAGIC.to_be_bytes(), "reply magic");
    assert_eq!(&hdr[8..], &7u64.to_be_bytes(), "reply cookie");
    let err = u32::from_be_bytes(hdr[4..8].try_into().expect("4"));
    if err == ESHUTDOWN {
        // Allowed by the protocol: "the server MAY speed this process up by
        // issuing error replies ... ESHUTDOWN".
        return;
    }
    assert_eq!(
        err, 0,
        "the in-flight write failed with an error other than ESHUTDOWN"
    );
    assert_bytes_eq(
        "in-flight write after SIGTERM",
        &read_file_range(&backing, MIB, data.len()),
        &data,
    );
}
