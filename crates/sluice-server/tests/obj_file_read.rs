#![allow(clippy::unwrap_used)]
//! Large plain object READs sent from the object's file on the
//! connection thread (`sendfile`), end to end in process: which reads
//! take that path, that they return the same bytes as the copying path,
//! and what a reader sees while writes and removes of the same object
//! run (docs/protocol.md, "What sluice's server adds": old or new bytes
//! of a racing write, byte by byte; a racing removal is the whole old
//! data or `NO_SUCH_OBJECT`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{AttrOp, ErrorCode, Features};
use sluice_testkit::raw_obj::*;
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

const MIB: u64 = 1 << 20;

fn start() -> (TestServer, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| c.io_threads = 4)
        .metrics()
        .start();
    (server, dir)
}

fn client(server: &TestServer) -> RawObjClient<std::net::TcpStream> {
    RawObjClient::open(server.obj_addr.unwrap(), Features::NEGOTIABLE, 1)
}

fn metric(server: &TestServer, line_prefix: &str) -> u64 {
    let text = server.scrape();
    text.lines()
        .find_map(|l| {
            l.strip_prefix(line_prefix)
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0)
}

/// Requests handed to the I/O pool so far.
fn handoffs(server: &TestServer) -> u64 {
    metric(server, "sluice_handoffs_total ")
}

fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn large_plain_reads_go_out_from_the_file_and_return_the_same_bytes() {
    let (server, _dir) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    let data = pattern(2 * MIB, 7);
    c.write(id, 0, &data);

    // Cached by the write and in the page cache: sent from the file, no
    // hand-off to the pool.
    let before = handoffs(&server);
    let (got, real) = c.read(id, 4096 + 3, MIB);
    assert_eq!(real, MIB);
    assert!(got == data[4099..4099 + MIB as usize], "bytes differ");
    let (got, _) = c.read(id, 0, 2 * MIB);
    assert!(got == data, "whole object differs");
    assert_eq!(
        handoffs(&server),
        before,
        "both reads were sent from the file"
    );

    // Each of these goes the copying way, read on the connection thread
    // (small and strided reads of a cached object in memory) or through
    // the pool (a read past the end, a read with attributes), and
    // returns what it always did.
    let r = c.read(id, MIB, 2 * MIB);
    assert_eq!(r.1, MIB, "half of it past the end");
    assert!(r.0[..MIB as usize] == data[MIB as usize..], "bytes differ");
    assert!(
        r.0[MIB as usize..].iter().all(|&b| b == 0),
        "zeros past the end"
    );
    let small = c.read(id, 100, 4096).0;
    assert!(small == data[100..4196], "small read differs");
    let with_attrs = c
        .call(
            &Req::new(OP_READ, 9)
                .object(id)
                .range(0, MIB)
                .attrs(&[AttrOp::Get("sluice.length")]),
        )
        .ok();
    assert!(with_attrs.body == data[..MIB as usize]);
    let strided = c
        .call(&Req::new(OP_READ, 10).object(id).strided(0, 8192, 4096, 64))
        .ok();
    assert_eq!(strided.body.len(), 64 * 4096);
    assert_eq!(
        handoffs(&server),
        before + 2,
        "the reads past the end and with attributes handed off"
    );
}

/// Reads sent from a shared mapping of the object's file so far.
fn mapped_reads(server: &TestServer) -> u64 {
    metric(server, "sluice_mapped_reads_total ")
}

/// List reads sent from the mapping the connection kept so far.
fn kept_mapping_reads(server: &TestServer) -> u64 {
    metric(server, "sluice_kept_mapping_reads_total ")
}

/// (mapped reads, of them from the kept mapping, requests handed off to
/// the pool or spliced on the connection thread). A large write to an
/// object open as a file is spliced unless a receive already holds its
/// payload, which depends on timing, so the two are counted together.
fn read_paths(server: &TestServer) -> (u64, u64, u64) {
    (
        mapped_reads(server),
        kept_mapping_reads(server),
        handoffs(server) + metric(server, "sluice_obj_spliced_writes_total "),
    )
}

/// The bytes of `segments` of `data`, in list order.
fn bytes_of(data: &[u8], segments: &[(u64, u64)]) -> Vec<u8> {
    segments
        .iter()
        .flat_map(|&(o, l)| data[o as usize..(o + l) as usize].iter().copied())
        .collect()
}

#[test]
fn large_scatter_gather_reads_go_out_from_a_kept_mapping_in_list_order() {
    let (server, _dir) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    let mut data = pattern(2 * MIB, 11);
    c.write(id, 0, &data);

    // 64 segments of 4 KiB with 2-byte holes, listed backwards, one
    // overlapping its neighbour and one repeated: 260 KiB in list order.
    let mut sgl: Vec<(u64, u64)> = (0..64u64).rev().map(|i| (i * 4098, 4096)).collect();
    sgl.push((10 * 4098 + 100, 8000));
    sgl.push((0, 4096));
    let before = read_paths(&server);
    let got = c.call(&Req::new(OP_READ, 20).object(id).sgl(&sgl)).ok();
    assert!(got.body == bytes_of(&data, &sgl), "SGL bytes differ");
    // Strided: 64 blocks of 4 KiB every 12 KiB from 100, sent from the
    // mapping the first read made.
    let strided: Vec<(u64, u64)> = (0..64u64).map(|i| (100 + i * 12288, 4096)).collect();
    let got = c
        .call(
            &Req::new(OP_READ, 21)
                .object(id)
                .strided(100, 12288, 4096, 64),
        )
        .ok();
    assert!(
        got.body == bytes_of(&data, &strided),
        "strided bytes differ"
    );
    assert_eq!(
        read_paths(&server),
        (before.0 + 2, before.1 + 1, before.2),
        "both sent from a mapping, the second from the kept one, neither handed off"
    );

    // A write to the listed range shows through the kept mapping (it is
    // the file's shared page cache, not a copy).
    let fresh = pattern(64 * 4098, 99);
    c.write(id, 0, &fresh);
    data[..fresh.len()].copy_from_slice(&fresh);
    let before = read_paths(&server);
    let got = c.call(&Req::new(OP_READ, 22).object(id).sgl(&sgl)).ok();
    assert!(got.body == bytes_of(&data, &sgl), "the write did not show");

    // The object grows past the mapping: the list that reaches the new
    // part is sent from a new mapping of the longer file.
    let tail = pattern(MIB, 55);
    c.write(id, 2 * MIB, &tail);
    data.extend_from_slice(&tail);
    let far: Vec<(u64, u64)> = (0..40u64)
        .map(|i| (3 * MIB - 4096 - i * 8194, 4096))
        .collect();
    let got = c.call(&Req::new(OP_READ, 23).object(id).sgl(&far)).ok();
    assert!(
        got.body == bytes_of(&data, &far),
        "bytes past the old end differ"
    );
    // Another object's list maps its own file.
    let other = c.create(1, "")[0];
    let other_data = pattern(MIB, 3);
    c.write(other, 0, &other_data);
    let got = c.call(&Req::new(OP_READ, 24).object(other).sgl(&sgl)).ok();
    assert!(
        got.body == bytes_of(&other_data, &sgl),
        "other object's bytes differ"
    );
    assert_eq!(
        read_paths(&server),
        (before.0 + 3, before.1 + 1, before.2 + 3),
        "three mapped reads (only the first from the kept mapping); the three writes handed off or spliced"
    );

    // A segment past the object's end, or a list under 128 KiB, takes the
    // copying way and returns what it always did.
    let before = read_paths(&server);
    let past = [(MIB, 4096), (3 * MIB - 100, 200_000)];
    let got = c.call(&Req::new(OP_READ, 25).object(id).sgl(&past)).ok();
    assert_eq!(got.body.len(), 204_096);
    assert!(got.body[..4096] == data[MIB as usize..MIB as usize + 4096]);
    assert!(got.body[4096..4196] == data[3 * MIB as usize - 100..]);
    assert!(
        got.body[4196..].iter().all(|&b| b == 0),
        "zeros past the end"
    );
    let small = [(5, 1000), (3, 10)];
    let got = c.call(&Req::new(OP_READ, 26).object(id).sgl(&small)).ok();
    assert!(got.body == bytes_of(&data, &small));
    let after = read_paths(&server);
    assert_eq!(
        (after.0, after.1),
        (before.0, before.1),
        "neither was mapped"
    );
}

/// List reads answered with their span so far.
fn span_reads(server: &TestServer) -> u64 {
    metric(server, "sluice_obj_span_reads_total ")
}

#[test]
fn list_reads_that_take_a_span_get_it_from_the_file_when_it_is_dense_and_ascends() {
    let (server, _dir) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    let data = pattern(2 * MIB, 13);
    c.write(id, 0, &data);

    // 64 blocks of 4 KiB behind 2-byte holes, from 100: the span is one
    // range of the file, sent with its holes, which the reader skips.
    let sgl: Vec<(u64, u64)> = (0..64u64).map(|i| (100 + i * 4098, 4096)).collect();
    let span_len = 63 * 4098 + 4096;
    let before = read_paths(&server);
    let got = c
        .call(
            &Req::new(OP_READ, 40)
                .object(id)
                .sgl(&sgl)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(got.span, "a span reply");
    assert_eq!(got.real, 64 * 4096, "real bytes count the segments only");
    assert!(
        got.body == data[100..100 + span_len],
        "the span is the object's bytes over the segments' range"
    );
    let got = c
        .call(
            &Req::new(OP_READ, 41)
                .object(id)
                .strided(100, 4098, 4096, 64)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(
        got.span && got.body == data[100..100 + span_len],
        "strided span"
    );
    assert_eq!(span_reads(&server), 2);
    let after = read_paths(&server);
    assert_eq!(
        (after.0, after.2),
        (before.0, before.2),
        "neither mapped nor handed off: sent with sendfile"
    );

    // Each of these is answered in list order, as before: the flag not
    // given; segments out of order; holes over an eighth of the bytes
    // (4 KiB blocks every 8 KiB).
    let plain = c.call(&Req::new(OP_READ, 42).object(id).sgl(&sgl)).ok();
    assert!(!plain.span && plain.body == bytes_of(&data, &sgl));
    let mut backwards = sgl.clone();
    backwards.reverse();
    let got = c
        .call(
            &Req::new(OP_READ, 43)
                .object(id)
                .sgl(&backwards)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(!got.span && got.body == bytes_of(&data, &backwards));
    let sparse: Vec<(u64, u64)> = (0..64u64).map(|i| (i * 8192, 4096)).collect();
    let got = c
        .call(
            &Req::new(OP_READ, 44)
                .object(id)
                .strided(0, 8192, 4096, 64)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(!got.span && got.body == bytes_of(&data, &sparse));
    // A segment past the object's end: read through the pool, zeros
    // where there is no object, in list order.
    let past = [(2 * MIB - 4096, 4096), (2 * MIB + 2, 200_000)];
    let got = c
        .call(
            &Req::new(OP_READ, 45)
                .object(id)
                .sgl(&past)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(!got.span);
    assert_eq!(got.real, 4096);
    assert!(got.body[..4096] == data[2 * MIB as usize - 4096..]);
    assert!(got.body[4096..].iter().all(|&b| b == 0));
    assert_eq!(span_reads(&server), 2, "none of those was a span");

    // A session that did not negotiate span replies may not ask for one.
    let mut old = RawObjClient::open(
        server.obj_addr.unwrap(),
        Features::BATCH.union(Features::ATTRS_ON_DATA),
        1,
    );
    let msg = old
        .call(
            &Req::new(OP_READ, 46)
                .object(id)
                .sgl(&sgl)
                .flags(FLAG_SPAN_OK),
        )
        .err(ErrorCode::NotNegotiated);
    assert!(msg.contains("span"), "{msg}");
    let got = old.call(&Req::new(OP_READ, 47).object(id).sgl(&sgl)).ok();
    assert!(
        !got.span && got.body == bytes_of(&data, &sgl),
        "still usable"
    );
}

#[test]
fn a_read_racing_writes_sees_old_or_new_bytes_never_an_error() {
    let (server, _dir) = start();
    let mut setup = client(&server);
    let id = setup.create(1, "")[0];
    setup.write(id, 0, &vec![1u8; MIB as usize]);
    let reads_before = handoffs(&server);
    let spliced_before = metric(&server, "sluice_obj_spliced_writes_total ");

    // The writer overwrites the whole object with generation g's byte,
    // g = 2, 3, ...; `started` is the newest generation sent, `done`
    // the newest acknowledged.
    // It keeps at most a few writes ahead of the reads, so the two
    // overlap all along.
    let started = Arc::new(AtomicU64::new(1));
    let done = Arc::new(AtomicU64::new(1));
    let read_count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut w = client(&server);
    let writer = {
        let (started, done, stop) = (Arc::clone(&started), Arc::clone(&done), Arc::clone(&stop));
        let read_count = Arc::clone(&read_count);
        thread::spawn(move || {
            let mut g = 2u64;
            while !stop.load(Ordering::SeqCst) && g < 250 {
                if g > read_count.load(Ordering::SeqCst) + 4 {
                    thread::yield_now();
                    continue;
                }
                started.store(g, Ordering::SeqCst);
                w.write(id, 0, &vec![g as u8; MIB as usize]);
                done.store(g, Ordering::SeqCst);
                g += 1;
            }
            g - 2
        })
    };
    let mut r = client(&server);
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut reads = 0u64;
    let mut mixed = 0u64;
    while Instant::now() < deadline && done.load(Ordering::SeqCst) < 249 {
        let lo = done.load(Ordering::SeqCst);
        let reply = r.call(&Req::new(OP_READ, 20).object(id).range(0, MIB)).ok();
        let hi = started.load(Ordering::SeqCst);
        assert_eq!(reply.real, MIB);
        assert_eq!(reply.body.len(), MIB as usize);
        // Every byte is from a write acknowledged before the read was
        // sent, or from one started by the time its reply was in.
        let bad = reply
            .body
            .iter()
            .position(|&b| u64::from(b) < lo || u64::from(b) > hi);
        assert!(
            bad.is_none(),
            "byte {bad:?} is {}, not in {lo}..={hi}",
            reply.body[bad.unwrap_or(0)]
        );
        if reply.body.iter().any(|&b| b != reply.body[0]) {
            mixed += 1;
        }
        reads += 1;
        read_count.store(reads, Ordering::SeqCst);
    }
    stop.store(true, Ordering::SeqCst);
    let writes = writer.join().unwrap();
    assert!(reads > 10 && writes > 10, "{reads} reads, {writes} writes");
    // Every write is handed off but those spliced on the connection
    // thread; reads sent from the file are not.
    let spliced = metric(&server, "sluice_obj_spliced_writes_total ") - spliced_before;
    let pooled_reads = handoffs(&server) - reads_before - (writes - spliced);
    assert!(
        pooled_reads < reads,
        "no read was sent from the file ({reads} reads, {pooled_reads} through the pool)"
    );
    eprintln!("{reads} reads ({pooled_reads} through the pool, {mixed} mixed), {writes} writes");
}

#[test]
fn a_read_racing_a_removal_gets_the_old_data_or_no_such_object() {
    let (server, _dir) = start();
    let mut owner = client(&server);
    let mut reader = client(&server);
    let mut whole = 0;
    let mut gone = 0;
    for round in 0..40u8 {
        let id = owner.create(1, "")[0];
        let data = vec![round.wrapping_add(1); MIB as usize];
        owner.write(id, 0, &data);
        // Reads pipelined behind each other race the removal sent from
        // the other connection.
        let read = |n: u64| Req::new(OP_READ, 100 + n).object(id).range(0, MIB);
        for n in 0..4 {
            reader.send(&read(n));
        }
        owner.call(&Req::new(OP_REMOVE, 50).object(id)).ok();
        for _ in 0..4 {
            let r = reader.reply();
            match r.status {
                None => {
                    assert_eq!(r.real, MIB);
                    assert!(
                        r.body == data,
                        "a read of a removed object returned other bytes"
                    );
                    whole += 1;
                }
                Some(code) => {
                    assert_eq!(
                        code,
                        ErrorCode::NoSuchObject,
                        "{}",
                        String::from_utf8_lossy(&r.body)
                    );
                    gone += 1;
                }
            }
        }
        // The connection still works.
        reader
            .call(&Req::new(OP_READ, 99).object(id).range(0, 1))
            .err(ErrorCode::NoSuchObject);
    }
    assert!(
        whole > 0,
        "no read got in before a removal ({gone} refused)"
    );
}
