//! Hand-driven NBD sessions: handshake variants, extended headers on the
//! wire, and misbehaving clients that must not disturb anyone else.

use std::io::Write;
use std::net::Shutdown;
use std::time::Duration;

use rstest::rstest;
use sluice_testkit::raw_nbd::*;
use tempfile::TempDir;

use crate::harness::{random_bytes, tempdir, tool, Server, MIB};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};

const DISCONNECT_WITHIN: Duration = Duration::from_secs(10);

/// `disk` (64 MiB) and `other` (8 MiB) in `cell`'s configuration, and
/// the directory their files (if any) are in.
fn server_in(cell: Cell) -> (Server, TempDir) {
    let dir = tempdir();
    let srv = cell
        .server(dir.path(), &[("disk", "64M"), ("other", "8M")])
        .start();
    (srv, dir)
}

/// The same in memory, for the tests of misbehaving clients.
fn server() -> Server {
    server_in(Cell::new(Mem, Uncached, Flexible)).0
}

/// A second, well-behaved connection: write, read back, flush.
fn check_healthy(conn: &mut RawClient, seed: u64, offset: u64) {
    let data = random_bytes(seed, 64 * 1024);
    assert_eq!(conn.write(seed, offset, &data), 0, "write on healthy conn");
    let got = conn
        .read(seed + 1, offset, data.len())
        .expect("read on healthy conn");
    crate::harness::assert_bytes_eq("healthy connection read-back", &got, &data);
    assert_eq!(conn.flush(seed + 2), 0, "flush on healthy conn");
}

/// The server is still running and accepts brand-new clients (nbdinfo).
fn check_new_clients_served(srv: &mut Server) {
    srv.assert_running();
    let out = tool("nbdinfo").arg("--size").arg(srv.uri("disk")).run();
    assert_eq!(out.stdout().trim(), (64 * MIB).to_string());
}

#[rstest]
fn raw_handshake_opt_go_simple_replies_round_trip(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let (srv, _dir) = server_in(Cell::new(backend, cache, Flexible));
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    assert_eq!(c.size, 64 * MIB, "NBD_INFO_EXPORT size");
    assert_eq!(c.flags & FLAG_READ_ONLY, 0, "rw export flagged read-only");
    assert_ne!(c.flags & FLAG_SEND_FLUSH, 0, "flush not advertised");
    check_healthy(&mut c, 10, 4096 + 7);
    // Last bytes of the export.
    let tail = random_bytes(11, 4096);
    assert_eq!(c.write(20, c.size - 4096, &tail), 0);
    assert_eq!(c.read(21, c.size - 4096, 4096).expect("tail read"), tail);
    c.disconnect();
}

#[rstest]
fn raw_handshake_export_name_option_round_trip(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let (srv, _dir) = server_in(Cell::new(backend, cache, Flexible));
    let mut c = RawClient::open(srv.connect(), "other", Finish::ExportName, Replies::Simple);
    assert_eq!(c.size, 8 * MIB, "NBD_OPT_EXPORT_NAME reply size");
    check_healthy(&mut c, 30, 0);
    // The empty name is the default export (the first one).
    let d = RawClient::open(srv.connect(), "", Finish::ExportName, Replies::Simple);
    assert_eq!(
        d.size,
        64 * MIB,
        "empty export name must select the first export"
    );
    d.disconnect();
    c.disconnect();
}

#[rstest]
fn raw_extended_headers_read_write_with_64bit_lengths(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let (srv, _dir) = server_in(Cell::new(backend, cache, Flexible));
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Extended);
    let data = random_bytes(40, 300_000);
    assert_eq!(c.write(1, 12345, &data), 0, "extended-header write");
    let got = c.read(2, 12345, data.len()).expect("extended-header read");
    crate::harness::assert_bytes_eq("extended-header read-back", &got, &data);
    // A read of a never-written area (may come back as OFFSET_HOLE chunks).
    let z = c.read(3, 32 * MIB, 1 << 20).expect("read of hole");
    assert!(
        z.iter().all(|&b| b == 0),
        "unwritten area must read as zeros"
    );
    assert_eq!(c.flush(4), 0);
    // Out of bounds with a 64-bit effect length: an error, not a disconnect.
    c.send_request(0, CMD_READ, 5, 0, u64::MAX - 10, &[]);
    let (cookie, err, _) = c.reply();
    assert_eq!(cookie, 5);
    assert_ne!(err, 0, "a read with a 2^64-ish length must fail");
    check_healthy(&mut c, 50, MIB);
    c.disconnect();
}

#[test]
fn unknown_option_gets_err_unsup_and_negotiation_continues() {
    let srv = server();
    let mut s = srv.connect();
    let hflags = read_greeting(&mut s);
    let cflags = u32::from(FLAG_FIXED_NEWSTYLE | (hflags & FLAG_NO_ZEROES));
    s.write_all(&cflags.to_be_bytes()).expect("flags");
    send_option(&mut s, 0x4242, b"whatever");
    let (opt, typ, _) = read_option_reply(&mut s);
    assert_eq!(opt, 0x4242);
    assert_eq!(
        typ, REP_ERR_UNSUP,
        "unknown option must get NBD_REP_ERR_UNSUP"
    );
    // Unknown export via GO: an error reply, and the session continues.
    let err = opt_go(&mut s, "no-such-export").expect_err("GO for an unknown export");
    assert_ne!(err & REP_ERR_BIT, 0);
    let (size, _) = opt_go(&mut s, "disk").expect("GO after errors");
    assert_eq!(size, 64 * MIB);
}

#[test]
fn unknown_command_gets_einval_and_connection_survives() {
    let srv = server();
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    c.send_request(0, 0x7fff, 77, 0, 0, &[]);
    let (err, cookie) = c.read_simple_reply();
    assert_eq!(cookie, 77);
    assert_eq!(err, EINVAL, "unknown command must fail with EINVAL");
    // Unknown command flag on a read.
    c.send_request(1 << 14, CMD_READ, 78, 0, 512, &[]);
    let (err, cookie) = c.read_simple_reply();
    assert_eq!(cookie, 78);
    assert_eq!(err, EINVAL, "unknown command flag must fail with EINVAL");
    check_healthy(&mut c, 60, 0);
}

#[test]
fn client_vanishing_mid_write_payload_does_not_affect_other_connections() {
    let mut srv = server();
    let mut good = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    check_healthy(&mut good, 70, 0);
    let protected = random_bytes(71, 256 * 1024);
    assert_eq!(good.write(80, 8 * MIB, &protected), 0);

    // Several clients announce big writes, send part of the payload and vanish.
    for (i, (announced, sent)) in [(32 * MIB, 100_000usize), (4 * MIB, 1), (1 << 20, 0)]
        .into_iter()
        .enumerate()
    {
        let mut bad = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
        let header_only = random_bytes(90 + i as u64, sent);
        bad.send_request(0, CMD_WRITE, 1, 16 * MIB, announced, &header_only);
        let _ = bad.s.shutdown(Shutdown::Both);
        drop(bad);
    }
    // One that vanishes after a partial *header*.
    {
        let mut s = srv.connect();
        let hflags = read_greeting(&mut s);
        let cflags = u32::from(FLAG_FIXED_NEWSTYLE | (hflags & FLAG_NO_ZEROES));
        s.write_all(&cflags.to_be_bytes()).expect("flags");
        opt_go(&mut s, "disk").expect("go");
        s.write_all(&REQUEST_MAGIC.to_be_bytes())
            .expect("partial header");
        s.write_all(&[0, 0, 0, 1, 0]).expect("partial header");
    }
    std::thread::sleep(Duration::from_millis(200));

    check_healthy(&mut good, 100, 2 * MIB);
    let got = good
        .read(110, 8 * MIB, protected.len())
        .expect("read protected");
    crate::harness::assert_bytes_eq("other connection's data", &got, &protected);
    check_new_clients_served(&mut srv);
    good.disconnect();
}

#[test]
fn bad_request_magic_disconnects_only_that_connection() {
    let mut srv = server();
    let mut good = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    check_healthy(&mut good, 120, 0);

    let mut bad = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    bad.s
        .write_all(&[0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        .expect("send bad magic");
    bad.s.write_all(&[0u8; 12]).expect("rest of bogus header");
    assert_closed_by_server(&mut bad.s, DISCONNECT_WITHIN, "bad request magic");

    // Compact magic after extended headers were negotiated is also a violation.
    let mut ext = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Extended);
    ext.replies = Replies::Simple;
    ext.send_request(0, CMD_READ, 1, 0, 512, &[]);
    ext.s.write_all(&[0u8; 4]).expect("pad to 32 bytes");
    assert_closed_by_server(
        &mut ext.s,
        DISCONNECT_WITHIN,
        "compact request header after extended headers were negotiated",
    );

    check_healthy(&mut good, 130, 4 * MIB);
    check_new_clients_served(&mut srv);
}

#[test]
fn garbage_during_handshake_is_disconnected_and_server_keeps_serving() {
    let mut srv = server();
    let mut good = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);

    // 1. Garbage instead of the client flags (unknown flag bits set).
    {
        let mut s = srv.connect();
        read_greeting(&mut s);
        s.write_all(&[0xff; 64]).expect("garbage");
        assert_closed_by_server(&mut s, DISCONNECT_WITHIN, "garbage client flags");
    }
    // 2. Valid flags, then an option with a bad magic.
    {
        let mut s = srv.connect();
        read_greeting(&mut s);
        s.write_all(&u32::from(FLAG_FIXED_NEWSTYLE).to_be_bytes())
            .expect("flags");
        s.write_all(b"IHAVEOPXgarbage-garbage-garbage!")
            .expect("bad opt");
        assert_closed_by_server(&mut s, DISCONNECT_WITHIN, "bad option magic");
    }
    // 3. An HTTP request instead of NBD.
    {
        let mut s = srv.connect();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("http");
        assert_closed_by_server(&mut s, DISCONNECT_WITHIN, "HTTP request");
    }
    // 4. Connect and close at once, many times, at various points.
    for i in 0..30 {
        let mut s = srv.connect();
        if i % 3 == 1 {
            read_greeting(&mut s);
        }
        if i % 3 == 2 {
            read_greeting(&mut s);
            s.write_all(&u32::from(FLAG_FIXED_NEWSTYLE).to_be_bytes())
                .expect("flags");
            s.write_all(&IHAVEOPT.to_be_bytes()).expect("half option");
        }
        drop(s);
    }

    check_healthy(&mut good, 140, 0);
    check_new_clients_served(&mut srv);
}

#[test]
fn oversized_option_length_is_refused_promptly() {
    let mut srv = server();
    let mut s = srv.connect();
    read_greeting(&mut s);
    s.write_all(&u32::from(FLAG_FIXED_NEWSTYLE).to_be_bytes())
        .expect("flags");
    // Announce an NBD_OPT_GO with ~4 GiB of data and send none of it: the
    // server must not wait for (or allocate) that; an error reply followed by
    // a disconnect, or a plain disconnect, are both fine.
    s.write_all(&IHAVEOPT.to_be_bytes()).expect("magic");
    s.write_all(&OPT_GO.to_be_bytes()).expect("opt");
    s.write_all(&0xffff_fff0u32.to_be_bytes()).expect("len");
    s.write_all(&[0u8; 64]).expect("some data");
    assert_closed_by_server(&mut s, DISCONNECT_WITHIN, "4 GiB option length");
    check_new_clients_served(&mut srv);
}

#[rstest]
fn structured_reply_option_then_go_gives_structured_read_replies(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let (srv, _dir) = server_in(Cell::new(backend, cache, Flexible));
    let mut s = srv.connect();
    let hflags = read_greeting(&mut s);
    let cflags = u32::from(FLAG_FIXED_NEWSTYLE | (hflags & FLAG_NO_ZEROES));
    s.write_all(&cflags.to_be_bytes()).expect("flags");
    send_option(&mut s, OPT_STRUCTURED_REPLY, &[]);
    let (_, typ, _) = read_option_reply(&mut s);
    assert_eq!(typ, REP_ACK, "structured replies must be supported");
    opt_go(&mut s, "disk").expect("go");
    let mut c = RawClient::resume(s, hflags);
    c.replies = Replies::Structured;
    // The client's reply reader insists that a READ's reply is made of
    // structured chunks once they are negotiated (a write's may be simple).
    let data = random_bytes(150, 8192);
    assert_eq!(c.write(9, 0, &data), 0, "write");
    let got = c.read(10, 0, data.len()).expect("structured read");
    crate::harness::assert_bytes_eq("structured read-back", &got, &data);
    // Even an early error on a READ must be a structured reply (an error
    // chunk), never a simple reply.
    let err = c.read(11, 64 * MIB, 4096).expect_err("read past the end");
    assert_eq!(err, EINVAL, "read past the end must fail with EINVAL");
    let data = random_bytes(160, 5000);
    assert_eq!(c.write(20, 777, &data), 0, "write after an error");
    let got = c.read(21, 777, data.len()).expect("read after an error");
    crate::harness::assert_bytes_eq("structured read after error", &got, &data);
}

#[rstest]
fn deep_pipelining_thousands_of_requests_on_one_connection(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let (srv, _dir) = server_in(Cell::new(backend, cache, Flexible));
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    const N: u64 = 2000;
    const BS: usize = 4096;
    let block = |i: u64| random_bytes(10_000 + i, BS);
    // All writes back to back (the replies are small, so nothing blocks).
    let mut batch = Vec::new();
    for i in 0..N {
        batch.extend_from_slice(&compact_header(
            0,
            CMD_WRITE,
            i,
            i * BS as u64 * 3,
            BS as u32,
        ));
        batch.extend_from_slice(&block(i));
    }
    c.s.write_all(&batch).expect("pipelined writes");
    let mut seen = vec![false; N as usize];
    for _ in 0..N {
        let (err, cookie) = c.read_simple_reply();
        assert_eq!(err, 0, "write {cookie} failed");
        let slot = &mut seen[usize::try_from(cookie).expect("cookie")];
        assert!(!*slot, "cookie {cookie} answered twice");
        *slot = true;
    }
    // All reads back to back from a second thread while this one collects
    // the (large) replies, in whatever order they come.
    let mut writer = c.s.try_clone().expect("clone stream");
    let sender = std::thread::spawn(move || {
        let mut batch = Vec::new();
        for i in 0..N {
            batch.extend_from_slice(&compact_header(
                0,
                CMD_READ,
                N + i,
                i * BS as u64 * 3,
                BS as u32,
            ));
        }
        writer.write_all(&batch).expect("pipelined reads");
    });
    let mut seen = vec![false; N as usize];
    for _ in 0..N {
        let (err, cookie) = c.read_simple_reply();
        assert_eq!(err, 0, "read {cookie} failed");
        let i = cookie.checked_sub(N).expect("read cookie");
        let data = read_exact(&mut c.s, BS);
        crate::harness::assert_bytes_eq(&format!("pipelined read {i}"), &data, &block(i));
        let slot = &mut seen[usize::try_from(i).expect("index")];
        assert!(!*slot, "cookie {cookie} answered twice");
        *slot = true;
    }
    sender.join().expect("sender thread");
    c.disconnect();
}

#[test]
fn client_that_never_reads_replies_does_not_block_others() {
    let mut srv = server();
    let mut good = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    let mut slow = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Simple);
    slow.s
        .set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // Queue 256 x 1 MiB reads and never read a reply; stop when the socket
    // pushes back.
    let mut hdrs = Vec::new();
    for i in 0..256u64 {
        hdrs.extend_from_slice(&compact_header(0, CMD_READ, i, (i % 60) * MIB, MIB as u32));
    }
    let _ = slow.s.write_all(&hdrs);
    std::thread::sleep(Duration::from_millis(300));
    for round in 0..5 {
        check_healthy(&mut good, 200 + round * 10, 61 * MIB);
    }
    check_new_clients_served(&mut srv);
    drop(slow);
    std::thread::sleep(Duration::from_millis(200));
    check_healthy(&mut good, 300, 62 * MIB);
    check_new_clients_served(&mut srv);
}
