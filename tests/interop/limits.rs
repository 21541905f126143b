//! Limits (issue 6): connection cap, handshake, idle and send timeouts,
//! clients that stall halfway through a request, many idle connections,
//! and clients that never read their replies on an export whose requests
//! run on the I/O pool. Memory and thread figures come from
//! /proc/<server pid>/status.

use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::{random_bytes, tempdir, Server, ServerBuilder, KIB, MIB};
use sluice_testkit::raw_nbd::*;

/// A field of /proc/PID/status in its unit (kB for memory).
fn proc_status(pid: i32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn rss_kib(srv: &Server) -> u64 {
    proc_status(srv.pid(), "VmRSS")
}

fn threads(srv: &Server) -> u64 {
    proc_status(srv.pid(), "Threads")
}

/// Waits up to `within` for `cond`, polling every 20 ms.
fn wait_for(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Write then read back 64 KiB (4 KiB-aligned, so O_DIRECT exports take it
/// too) and flush; returns how long the three requests took.
fn round_trip(conn: &mut RawClient, seed: u64, offset: u64) -> Duration {
    let started = Instant::now();
    let data = random_bytes(seed, 64 * KIB as usize);
    assert_eq!(conn.write(seed, offset, &data), 0, "write failed");
    let got = conn
        .read(seed + 1, offset, data.len())
        .expect("read failed");
    crate::harness::assert_bytes_eq("read-back", &got, &data);
    assert_eq!(conn.flush(seed + 2), 0, "flush failed");
    started.elapsed()
}

fn open(srv: &Server, export: &str) -> RawClient {
    RawClient::open(srv.connect(), export, Finish::Go, Replies::Simple)
}

/// A compact request header without flags.
fn header(typ: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
    compact_header(0, typ, cookie, offset, len)
}

/// Connects and returns the socket if the server greets it, `None` if it
/// closes the connection first (refused).
fn try_connect(srv: &Server) -> Option<TcpStream> {
    let s = srv.connect();
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut b = [0u8; 8];
    match s.peek(&mut b) {
        Ok(0) => None,
        Ok(_) => Some(s),
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => None,
        Err(e) => panic!("no greeting and no close within 5 s: {e}"),
    }
}

/// Latency percentiles of `n` round trips.
fn latencies(conn: &mut RawClient, n: u64, seed: u64) -> (Duration, Duration) {
    let mut v: Vec<Duration> = (0..n)
        .map(|i| round_trip(conn, seed + i * 3, (i % 16) * 64 * KIB))
        .collect();
    v.sort();
    (v[v.len() / 2], v[v.len() - 1])
}

#[test]
fn max_connections_refuses_the_fifth_client_and_serves_again_after_one_leaves() {
    let srv = ServerBuilder::new()
        .export("disk", "mem:16M")
        .arg("--max-connections")
        .arg("4")
        .start();
    let mut conns: Vec<RawClient> = (0..4).map(|_| open(&srv, "disk")).collect();
    assert!(
        try_connect(&srv).is_none(),
        "a 5th client was greeted with --max-connections 4"
    );
    for (i, c) in conns.iter_mut().enumerate() {
        round_trip(c, 10 + i as u64 * 3, i as u64 * MIB);
    }
    conns.pop().expect("4 connections").disconnect();
    let mut again = None;
    assert!(
        wait_for(Duration::from_secs(5), || {
            again = try_connect(&srv);
            again.is_some()
        }),
        "no client is served after one of the 4 left"
    );
    let mut c = RawClient::open(again.expect("greeted"), "disk", Finish::Go, Replies::Simple);
    round_trip(&mut c, 40, 5 * MIB);
    srv.wait_for_log("connection limit reached");
}

#[test]
fn handshake_timeout_closes_silent_and_half_negotiating_clients() {
    let srv = ServerBuilder::new()
        .export("disk", "mem:16M")
        .arg("--handshake-timeout")
        .arg("1")
        .start();
    let started = Instant::now();
    // Connects and never says anything.
    let mut silent = srv.connect();
    // Sends its flags and half an option header, then stops.
    let mut half = srv.connect();
    let flags = read_greeting(&mut half);
    let cflags = u32::from(FLAG_FIXED_NEWSTYLE | (flags & FLAG_NO_ZEROES));
    half.write_all(&cflags.to_be_bytes()).expect("flags");
    half.write_all(&IHAVEOPT.to_be_bytes()[..6])
        .expect("half an option");
    assert_closed_by_server(&mut silent, Duration::from_secs(5), "silent client");
    assert_closed_by_server(&mut half, Duration::from_secs(5), "half an option");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed after {:?}, before the 1 s timeout",
        started.elapsed()
    );
    srv.wait_for_log("client did not finish the handshake within");
    // A client that does negotiate in time is served.
    round_trip(&mut open(&srv, "disk"), 50, 0);
}

#[test]
fn idle_timeout_closes_idle_and_stalled_connections_but_not_active_ones() {
    let srv = ServerBuilder::new()
        .export("disk", "mem:16M")
        .arg("--idle-timeout")
        .arg("1")
        .start();
    let started = Instant::now();
    let mut idle = open(&srv, "disk");
    let mut stalled = open(&srv, "disk");
    // Half a header, then nothing: not idle, but stalled just as long.
    stalled
        .s
        .write_all(&header(CMD_READ, 1, 0, 4096)[..14])
        .expect("half a header");
    let mut active = open(&srv, "disk");
    let activity = std::thread::spawn(move || {
        // 3 s of requests 300 ms apart: never idle for 1 s.
        for i in 0..10 {
            round_trip(&mut active, 100 + i * 3, i * 64 * KIB);
            std::thread::sleep(Duration::from_millis(300));
        }
        active
    });
    assert_closed_by_server(&mut idle.s, Duration::from_secs(5), "idle client");
    assert_closed_by_server(&mut stalled.s, Duration::from_secs(5), "stalled client");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let mut active = activity.join().expect("the active client was served");
    round_trip(&mut active, 200, 0);
    srv.wait_for_log("idle");
    srv.wait_for_log("sent part of a request and then nothing");
}

#[test]
fn clients_stalled_halfway_through_requests_do_not_starve_others_or_grow_memory() {
    let srv = ServerBuilder::new().export("disk", "mem:64M").start();
    let mut good = open(&srv, "disk");
    let (p50_before, max_before) = latencies(&mut good, 200, 1000);
    let rss_before = rss_kib(&srv);
    let mut stalled = Vec::new();
    // 50 send half a request header.
    for i in 0..50u64 {
        let mut c = open(&srv, "disk");
        c.s.write_all(&header(CMD_READ, i, 0, 4096)[..14])
            .expect("half a header");
        stalled.push(c);
    }
    // 50 send a 1 MiB write's header and half its payload.
    let half = vec![0x5au8; 512 * KIB as usize];
    for i in 0..50u64 {
        let mut c = open(&srv, "disk");
        c.s.write_all(&header(CMD_WRITE, i, i * MIB % (32 * MIB), MIB as u32))
            .expect("header");
        c.s.write_all(&half).expect("half a payload");
        stalled.push(c);
    }
    // 10 announce the largest write (32 MiB) and send 64 KiB of it: the
    // server must not reserve what is announced.
    for i in 0..10u64 {
        let mut c = open(&srv, "disk");
        c.s.write_all(&header(CMD_WRITE, i, 0, 32 << 20))
            .expect("header");
        c.s.write_all(&half[..64 * KIB as usize]).expect("payload");
        stalled.push(c);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (p50_during, max_during) = latencies(&mut good, 200, 5000);
    let rss_during = rss_kib(&srv);
    let sent_kib = 50 * 512 + 10 * 64;
    eprintln!(
        "stalls: good client 64 KiB write+read+flush p50 {p50_before:?} max {max_before:?} before, \
         p50 {p50_during:?} max {max_during:?} with 110 stalled clients; \
         server VmRSS {rss_before} -> {rss_during} KiB (+{} KiB; stalled clients sent {sent_kib} KiB)",
        rss_during.saturating_sub(rss_before)
    );
    assert!(
        p50_during <= (p50_before * 3).max(Duration::from_millis(5)),
        "median round trip {p50_during:?} with stalled clients vs {p50_before:?} without"
    );
    assert!(
        max_during < Duration::from_secs(1),
        "slowest round trip {max_during:?} with stalled clients"
    );
    // Receive buffers grow with what arrives (at most twice it), plus
    // thread stacks and the 4 KiB handshake buffer per connection.
    let bound = 2 * sent_kib + 110 * 128 + 16 * 1024;
    assert!(
        rss_during.saturating_sub(rss_before) < bound,
        "server VmRSS grew by {} KiB for 110 stalled clients (bound {bound} KiB)",
        rss_during - rss_before
    );
    drop(stalled);
    round_trip(&mut good, 9000, 0);
}

#[test]
fn a_thousand_idle_connections_cost_little_and_close_cleanly() {
    const N: usize = 1000;
    let srv = ServerBuilder::new()
        .export("disk", "mem:64M")
        .arg("--max-connections")
        .arg("2000")
        .start();
    round_trip(&mut open(&srv, "disk"), 1, 0);
    // The pool has started and that client's thread has exited.
    let mut last = 0;
    assert!(wait_for(Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(100));
        let now = threads(&srv);
        std::mem::replace(&mut last, now) == now
    }));
    let (rss_before, threads_before) = (rss_kib(&srv), threads(&srv));
    let started = Instant::now();
    let conns: Vec<RawClient> = (0..N).map(|_| open(&srv, "disk")).collect();
    let opened = started.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    let (rss_after, threads_after) = (rss_kib(&srv), threads(&srv));
    let per_conn = (rss_after.saturating_sub(rss_before)) * 1024 / N as u64;
    // A new client is still served promptly.
    let fresh_started = Instant::now();
    let mut fresh = open(&srv, "disk");
    round_trip(&mut fresh, 7, MIB);
    let fresh_took = fresh_started.elapsed();
    eprintln!(
        "{N} idle connections opened in {opened:?}: server VmRSS {rss_before} -> {rss_after} KiB \
         ({per_conn} bytes per connection), threads {threads_before} -> {threads_after}; \
         a new client's handshake + 64 KiB write/read/flush took {fresh_took:?}"
    );
    assert!(
        threads_after >= threads_before + N as u64
            && threads_after <= threads_before + N as u64 + 4,
        "threads {threads_before} -> {threads_after} for {N} connections (expected one each)"
    );
    // One thread each: its touched stack (a few pages of the 512 KiB
    // reserved), the 4 KiB receive buffer, the (lazily touched) reply
    // buffer, TLS-free socket state; 128 KiB leaves room for allocator
    // slack.
    assert!(
        per_conn < 128 * 1024,
        "{per_conn} bytes of server RSS per idle connection (bound 128 KiB)"
    );
    assert!(
        fresh_took < Duration::from_secs(1),
        "a new client took {fresh_took:?} with {N} idle connections"
    );
    drop(conns);
    assert!(
        wait_for(Duration::from_secs(10), || threads(&srv)
            <= threads_before + 1),
        "connection threads did not exit: {} threads 10 s after the clients left",
        threads(&srv)
    );
    round_trip(&mut fresh, 8, 0);
}

/// A 64 MiB file for an O_DIRECT export, on a real disk (tmpfs has no
/// O_DIRECT): under the target directory.
fn direct_image(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("direct.img");
    let f = std::fs::File::create(&path).expect("create image");
    f.set_len(64 * MIB).expect("size image");
    path
}

/// Sends 256 x 1 MiB reads and never reads a reply.
fn never_read(srv: &Server) -> RawClient {
    let mut slow = open(srv, "direct");
    slow.s
        .set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut hdrs = Vec::new();
    for i in 0..256u64 {
        hdrs.extend_from_slice(&header(CMD_READ, i, (i % 60) * MIB, MIB as u32));
    }
    // The server stops reading once its in-flight limit is reached.
    let _ = slow.s.write_all(&hdrs);
    slow
}

fn never_reading_clients_do_not_starve_the_pool(pipeline: &str) {
    let dir = tempfile::Builder::new()
        .prefix("sluice-limits-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|_| tempdir());
    let image = direct_image(dir.path());
    let mut srv = ServerBuilder::new()
        .file_export("direct", &image, "direct")
        .arg("--pipeline")
        .arg(pipeline)
        .arg("--io-threads")
        .arg("4")
        .arg("--send-timeout")
        .arg("3")
        .arg("--max-inflight-bytes")
        .arg("16M")
        .start();
    let mut good = open(&srv, "direct");
    let (p50_before, _) = latencies(&mut good, 20, 100);
    let rss_before = rss_kib(&srv);
    let started = Instant::now();
    // Six clients that never read, more than the 4 workers: each ties up
    // a worker in a blocked send, and the pool starts spares meanwhile.
    let slow_clients = 6;
    let mut slow: Vec<RawClient> = (0..slow_clients).map(|_| never_read(&srv)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut worst = Duration::ZERO;
    for round in 0..5 {
        let took = round_trip(&mut good, 200 + round * 10, (61 + round % 2) * MIB);
        worst = worst.max(took);
    }
    let mut fresh = open(&srv, "direct");
    worst = worst.max(round_trip(&mut fresh, 300, 63 * MIB));
    let served_within = started.elapsed();
    let rss_stuck = rss_kib(&srv);
    eprintln!(
        "never-reading clients ({pipeline}): good client 64 KiB write+read+flush p50 {p50_before:?} \
         before, slowest {worst:?} while {slow_clients} clients do not read; server VmRSS \
         {rss_before} -> {rss_stuck} KiB"
    );
    assert!(
        served_within < Duration::from_secs(3),
        "other clients were served only {served_within:?} after the slow ones stopped reading \
         (the send timeout is 3 s)"
    );
    assert!(
        worst < Duration::from_secs(1),
        "a round trip took {worst:?}"
    );
    // Replies waiting to be sent are bounded by the in-flight limit per
    // connection (16 MiB here, plus the one request that crossed it),
    // plus slack for the allocator and the workers' O_DIRECT bounce
    // buffers.
    let bound = slow_clients as u64 * (16 + 1) * 1024 + 32 * 1024;
    assert!(
        rss_stuck.saturating_sub(rss_before) < bound,
        "server VmRSS grew by {} KiB with {slow_clients} never-reading clients (bound {bound} KiB)",
        rss_stuck - rss_before
    );
    // All of them, before reading from any: reading would make it progress.
    let needle = "client has not read its replies within the send timeout";
    assert!(
        wait_for(Duration::from_secs(10), || srv
            .stderr_log()
            .matches(needle)
            .count()
            == slow_clients),
        "the server did not log {needle:?} for all {slow_clients} clients; log:\n{}",
        srv.stderr_log()
    );
    for s in &mut slow {
        // Drains what the kernel still holds, then sees the close.
        assert_closed_by_server(&mut s.s, Duration::from_secs(10), "never-reading client");
    }
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "closed before the send timeout"
    );
    round_trip(&mut good, 400, 0);
    srv.assert_running();
}

#[test]
fn never_reading_clients_on_a_direct_export_do_not_starve_the_pool() {
    never_reading_clients_do_not_starve_the_pool("flexible");
}

#[test]
fn never_reading_clients_do_not_starve_the_pool_with_fixed_pipelining() {
    never_reading_clients_do_not_starve_the_pool("fixed");
}
