#![allow(clippy::unwrap_used)]
//! The native object protocol end to end, in process: a real `Server`
//! with an object store in a temporary directory (and NBD exports for
//! the extent commands), driven by the test kit's raw object client.

use std::sync::Arc;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{answer, AttrOp, AttrValue, ErrorCode, Features};
use sluice_storage::{BlockDevice, MemDevice};
use sluice_testkit::raw_obj::*;
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

const ALL: Features = Features::NEGOTIABLE;

/// A server with objects in a fresh directory and a 1 MiB memory export
/// `disk`.
fn start() -> (TestServer, TempDir, Arc<MemDevice>) {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(MemDevice::new(1 << 20, false));
    let server = TestServer::builder()
        .export("disk", Arc::clone(&disk) as Arc<dyn BlockDevice>)
        .objects(dir.path().join("objects"))
        .config(|c| c.io_threads = 4)
        .metrics()
        .start();
    (server, dir, disk)
}

fn client(server: &TestServer) -> RawObjClient<std::net::TcpStream> {
    RawObjClient::open(server.obj_addr.unwrap(), ALL, 1)
}

#[test]
fn create_write_read_flush() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let ids = c.create(3, "");
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    c.write(ids[0], 0, b"hello world");
    let (data, real) = c.read(ids[0], 0, 11);
    assert_eq!((data.as_slice(), real), (&b"hello world"[..], 11));
    // Past the end reads as zeros; real bytes counts what lay inside.
    let (data, real) = c.read(ids[0], 6, 10);
    assert_eq!((data.as_slice(), real), (&b"world\0\0\0\0\0"[..], 5));
    c.flush();
    let r = c.call(&Req::new(OP_READ, 9).object(12345).range(0, 1));
    let msg = r.err(ErrorCode::NoSuchObject);
    assert!(msg.contains("0x3039"), "{msg}");
}

#[test]
fn attributes_ride_on_a_write_and_come_back_with_a_read() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    c.call(
        &Req::new(OP_WRITE, 5)
            .object(id)
            .range(0, 4)
            .data(b"abcd")
            .attrs(&[AttrOp::Set("kind", AttrValue::Text("log"))]),
    )
    .ok();
    let r = c
        .call(&Req::new(OP_READ, 6).object(id).range(0, 4).attrs(&[
            AttrOp::Get("kind"),
            AttrOp::Get("sluice.length"),
            AttrOp::Get("none"),
        ]))
        .ok();
    assert_eq!(r.body, b"abcd");
    assert_eq!(
        r.attr_ops(),
        vec![
            AttrOp::Set("kind", AttrValue::Text("log")),
            AttrOp::Set("sluice.length", AttrValue::Integer(4)),
            AttrOp::Remove("none"),
        ]
    );
}

/// FLUSH with a scope (0 object, 1 collection, 2 partition).
fn flush_req(id: u64, scope: u16) -> Req {
    Req::new(OP_FLUSH, id).flags(scope << FLAG_SCOPE_SHIFT)
}

fn page(body: &[u8]) -> sluice_obj_proto::Page<'_> {
    sluice_obj_proto::Page::decode(body, u32::MAX).unwrap()
}

#[test]
fn every_object_command() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    // CREATE several in a collection that comes into being with them.
    let logs = c.create(5, "logs");
    let other = c.create(1, "")[0];
    // APPEND returns the offset it wrote at.
    for (k, chunk) in [&b"one"[..], b"two", b"three"].iter().enumerate() {
        let r = c
            .call(
                &Req::new(OP_APPEND, 10 + k as u64)
                    .object(logs[0])
                    .range(0, chunk.len() as u64)
                    .data(chunk),
            )
            .ok();
        let expect = [0u64, 3, 6][k];
        assert_eq!(r.body, expect.to_be_bytes());
    }
    assert_eq!(c.read(logs[0], 0, 11).0, b"onetwothree");
    // CREATE_AND_WRITE, contiguous from 0 and as an SGL.
    let r = c
        .call(
            &Req::new(OP_CREATE_AND_WRITE, 20)
                .range(0, 5)
                .params(&name_param("logs"))
                .data(b"fresh")
                .attrs(&[AttrOp::Set("n", AttrValue::Integer(7))]),
        )
        .ok();
    let made = u64::from_be_bytes(r.body.try_into().unwrap());
    assert_eq!(c.read(made, 0, 5).0, b"fresh");
    let r = c
        .call(
            &Req::new(OP_CREATE_AND_WRITE, 21)
                .sgl(&[(100, 2), (10, 3)])
                .params(&name_param(""))
                .data(b"zzabc"),
        )
        .ok();
    let sparse = u64::from_be_bytes(r.body.try_into().unwrap());
    let (data, real) = c.read(sparse, 10, 92);
    assert_eq!(real, 92);
    assert_eq!(&data[..3], b"abc");
    assert_eq!(&data[90..], b"zz");
    // PUNCH as an SGL: the ranges read as zeros, the length stays.
    c.write(other, 0, &[0xaa; 64]);
    c.call(&Req::new(OP_PUNCH, 30).object(other).sgl(&[(8, 8), (40, 4)]))
        .ok();
    let (data, real) = c.read(other, 0, 64);
    assert_eq!(real, 64);
    for (i, b) in data.iter().enumerate() {
        let punched = (8..16).contains(&i) || (40..44).contains(&i);
        assert_eq!(*b, if punched { 0 } else { 0xaa }, "byte {i}");
    }
    // SET_ATTRS sets and removes in one go; the server's keys are its own.
    c.call(&Req::new(OP_SET_ATTRS, 40).object(logs[1]).attrs(&[
        AttrOp::Set("size", AttrValue::Integer(10)),
        AttrOp::Set("tag", AttrValue::Bytes(b"\x00\x01")),
    ]))
    .ok();
    c.call(
        &Req::new(OP_SET_ATTRS, 41)
            .object(logs[1])
            .attrs(&[AttrOp::Remove("tag")]),
    )
    .ok();
    let msg = c
        .call(
            &Req::new(OP_SET_ATTRS, 42)
                .object(logs[1])
                .attrs(&[AttrOp::Set("sluice.length", AttrValue::Integer(1))]),
        )
        .err(ErrorCode::Permission);
    assert!(msg.contains("sluice.length"), "{msg}");
    // GET_ATTRS with no entries returns everything, the server's first.
    let r = c.call(&Req::new(OP_GET_ATTRS, 43).object(logs[1])).ok();
    let ops = r.attr_ops();
    let keys: Vec<&str> = ops.iter().map(|o| o.key()).collect();
    assert_eq!(
        keys,
        [
            "sluice.length",
            "sluice.created",
            "sluice.data_modified",
            "sluice.attrs_modified",
            "size"
        ]
    );
    for k in [2u64, 3, 4] {
        c.call(
            &Req::new(OP_SET_ATTRS, 44)
                .object(logs[k as usize])
                .attrs(&[AttrOp::Set("size", AttrValue::Integer(10 * k as i64))]),
        )
        .ok();
    }
    // QUERY: members with 20 <= size <= 40, a page of 2 then the rest.
    let mut query = page_params(0, 2, "logs");
    query.extend_from_slice(&1u16.to_be_bytes());
    sluice_obj_proto::encode_query_range(
        &sluice_obj_proto::QueryRange {
            key: "size",
            min: AttrValue::Integer(20),
            max: AttrValue::Integer(40),
        },
        &mut query,
    );
    let r = c.call(&Req::new(OP_QUERY, 50).params(&query)).ok();
    let p = page(&r.body);
    let got: Vec<u64> = p.entries.iter().map(|e| e.object).collect();
    assert_eq!(got, &logs[2..4]);
    assert_eq!(p.next, logs[3]);
    query[..8].copy_from_slice(&p.next.to_be_bytes());
    let r = c.call(&Req::new(OP_QUERY, 51).params(&query)).ok();
    let p = page(&r.body);
    assert_eq!(
        p.entries.iter().map(|e| e.object).collect::<Vec<_>>(),
        &logs[4..5]
    );
    assert_eq!(p.next, 0);
    // LIST, paged, with one attribute each.
    let r = c
        .call(
            &Req::new(OP_LIST, 60)
                .flags(FLAG_WITH_ATTRS)
                .params(&page_params(0, 4, "logs"))
                .attrs(&[AttrOp::Get("size")]),
        )
        .ok();
    let p = page(&r.body);
    assert_eq!(p.entries.len(), 4);
    assert_eq!(p.next, logs[3]);
    let sizes: Vec<Vec<AttrOp<'_>>> = p.entries.iter().map(|e| e.attrs.iter().collect()).collect();
    assert_eq!(sizes[0], vec![AttrOp::Remove("size")]);
    assert_eq!(sizes[1], vec![AttrOp::Set("size", AttrValue::Integer(10))]);
    let r = c
        .call(&Req::new(OP_LIST, 61).params(&page_params(p.next, 4, "logs")))
        .ok();
    let rest: Vec<u64> = page(&r.body).entries.iter().map(|e| e.object).collect();
    assert_eq!(rest, vec![logs[4], made]);
    // FLUSH in each scope; an unknown collection is named.
    c.call(&flush_req(70, 0).object(logs[0])).ok();
    c.call(&flush_req(71, 1).params(&name_param("logs"))).ok();
    c.call(&flush_req(72, 2)).ok();
    let msg = c
        .call(&flush_req(73, 1).params(&name_param("nope")))
        .err(ErrorCode::NoSuchCollection);
    assert!(msg.contains("nope"), "{msg}");
    // A durable (FUA) write, then REMOVE with FUA: gone.
    c.call(
        &Req::new(OP_WRITE, 80)
            .flags(FLAG_FUA)
            .object(other)
            .range(0, 2)
            .data(b"ok"),
    )
    .ok();
    c.call(&Req::new(OP_REMOVE, 81).flags(FLAG_FUA).object(other))
        .ok();
    c.call(&Req::new(OP_READ, 82).object(other).range(0, 1))
        .err(ErrorCode::NoSuchObject);
    // DISCONNECT: no reply, the server closes.
    c.send(&Req::new(OP_DISCONNECT, 90));
    let mut rest = Vec::new();
    use std::io::Read;
    assert_eq!(c.s.read_to_end(&mut rest).unwrap(), 0);
}

/// A model of one object's bytes.
/// CREATE_AND_WRITE with data away from offset 0 is one change: a
/// reader never finds the new object with its attributes but not its
/// data.
#[test]
fn create_and_write_anywhere_appears_whole() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let base = c.create(1, "")[0];
    const MADE: u64 = 200;
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut r = client(&server);
            let mut torn = 0;
            let mut k = 0u64;
            for id in base + 1..=base + MADE {
                // Poll until the object exists, then check what it held
                // when first seen.
                loop {
                    k += 1;
                    let got = r.call(
                        &Req::new(OP_READ, k)
                            .object(id)
                            .range(100, 8)
                            .attrs(&[AttrOp::Get("n")]),
                    );
                    if got.status.is_some() {
                        continue;
                    }
                    let has_attr = got.attr_ops() == vec![AttrOp::Set("n", AttrValue::Integer(7))];
                    if !has_attr || got.body != [0xbb; 8] {
                        torn += 1;
                    }
                    break;
                }
            }
            torn
        });
        for round in 0..MADE {
            c.call(
                &Req::new(OP_CREATE_AND_WRITE, round)
                    .sgl(&[(100, 8)])
                    .params(&name_param(""))
                    .data(&[0xbb; 8])
                    .attrs(&[AttrOp::Set("n", AttrValue::Integer(7))]),
            )
            .ok();
        }
        let torn = reader.join().unwrap();
        assert_eq!(
            torn, 0,
            "{torn} of {MADE} objects were seen before their data"
        );
    });
}

/// PUNCH over several separate runs is one change: a reader never sees
/// one run punched and another not.
#[test]
fn a_punch_of_several_runs_is_seen_whole_or_not_at_all() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    // Many separate runs: a reader waiting on the object finds any gap
    // between them.
    let runs: Vec<(u64, u64)> = (0..32u64).map(|k| (8 + k * 1250, 8)).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut r = client(&server);
            let mut torn = 0;
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                k += 1;
                let got = r.call(&Req::new(OP_READ, k).object(id).sgl(&runs)).ok();
                let punched: Vec<bool> = got.body.chunks(8).map(|b| b == [0; 8]).collect();
                if got.real > 0 && punched.iter().any(|&p| p != punched[0]) {
                    torn += 1;
                }
            }
            (torn, k)
        });
        for round in 0..300u64 {
            c.write(id, 0, &[0xaa; 40_016]);
            c.call(&Req::new(OP_PUNCH, round).object(id).sgl(&runs))
                .ok();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (torn, reads) = reader.join().unwrap();
        assert_eq!(
            torn, 0,
            "{torn} of {reads} reads saw one run punched and not the other"
        );
    });
}

fn model_write(model: &mut Vec<u8>, segments: &[(u64, u64)], data: &[u8]) {
    let mut at = 0;
    for &(off, len) in segments {
        let end = (off + len) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data[at..at + len as usize]);
        at += len as usize;
    }
}

fn model_read(model: &[u8], segments: &[(u64, u64)]) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut real = 0;
    for &(off, len) in segments {
        for i in off..off + len {
            match model.get(i as usize) {
                Some(b) => {
                    out.push(*b);
                    real += 1;
                }
                None => out.push(0),
            }
        }
    }
    (out, real)
}

#[test]
fn sgl_and_strided_on_objects_match_a_model() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    let mut model = Vec::new();
    let mut rng = fastrand::Rng::with_seed(12);
    for round in 0..40u64 {
        let count = rng.usize(1..20);
        let segs: Vec<(u64, u64)> = (0..count)
            .map(|_| (rng.u64(0..20_000), rng.u64(1..700)))
            .collect();
        let total: u64 = segs.iter().map(|s| s.1).sum();
        let data: Vec<u8> = (0..total).map(|_| rng.u8(..)).collect();
        if rng.bool() {
            c.call(&Req::new(OP_WRITE, round).object(id).sgl(&segs).data(&data))
                .ok();
            model_write(&mut model, &segs, &data);
        } else {
            let (off, stride, len, n) = (
                rng.u64(0..10_000),
                rng.u64(700..900),
                rng.u64(1..700),
                rng.u32(1..12),
            );
            let segs: Vec<(u64, u64)> =
                (0..u64::from(n)).map(|i| (off + i * stride, len)).collect();
            let data: Vec<u8> = (0..len * u64::from(n)).map(|_| rng.u8(..)).collect();
            c.call(
                &Req::new(OP_WRITE, round)
                    .object(id)
                    .strided(off, stride, len, n)
                    .data(&data),
            )
            .ok();
            model_write(&mut model, &segs, &data);
        }
        // Read back an SGL (overlaps, past the end) and a strided pattern.
        let segs: Vec<(u64, u64)> = (0..rng.usize(1..10))
            .map(|_| (rng.u64(0..25_000), rng.u64(1..900)))
            .collect();
        let r = c
            .call(&Req::new(OP_READ, 1000 + round).object(id).sgl(&segs))
            .ok();
        assert_eq!(
            (r.body, r.real),
            model_read(&model, &segs),
            "round {round} SGL read"
        );
        let (off, stride, len, n) = (rng.u64(0..20_000), 1000, rng.u64(1..1000), rng.u32(1..8));
        let segs: Vec<(u64, u64)> = (0..u64::from(n)).map(|i| (off + i * stride, len)).collect();
        let r = c
            .call(
                &Req::new(OP_READ, 2000 + round)
                    .object(id)
                    .strided(off, stride, len, n),
            )
            .ok();
        assert_eq!(
            (r.body, r.real),
            model_read(&model, &segs),
            "round {round} strided read"
        );
    }
    // A request is counted once it has been answered: the last reply can
    // reach the client a moment before its count reaches the metrics.
    let wanted = [
        "sluice_obj_requests_total{command=\"read\",ddt=\"sgl\"} 40",
        "sluice_obj_requests_total{command=\"read\",ddt=\"strided\"} 40",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut text = server.scrape();
    while !wanted.iter().all(|w| text.contains(w)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        text = server.scrape();
    }
    for w in wanted {
        assert!(text.contains(w), "{w} missing from:\n{text}");
    }
    assert!(text.contains("sluice_protocol_connections_total{protocol=\"obj\"} 1"));
}

#[test]
fn sgl_and_strided_extents_of_an_nbd_export() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(MemDevice::new(1 << 20, false));
    let ro = Arc::new(MemDevice::new(4096, true));
    let server = TestServer::builder()
        .export("disk", Arc::clone(&disk) as Arc<dyn BlockDevice>)
        .export("ro", ro as Arc<dyn BlockDevice>)
        .objects(dir.path())
        .start();
    let mut c = RawObjClient::connect(server.obj_addr.unwrap());
    c.hello(ALL).unwrap();
    let (h, size, read_only) = c.attach("disk").unwrap();
    assert_eq!((h, size, read_only), (1, 1 << 20, false));
    let (ro_h, _, ro_ro) = c.attach("ro").unwrap();
    assert_eq!((ro_h, ro_ro), (2, true));
    assert_eq!(
        c.attach("disk").unwrap().0,
        1,
        "attaching twice gives the same handle"
    );
    assert_eq!(c.attach("missing").unwrap_err().0, answer::UNKNOWN_EXPORT);
    c.select(1).unwrap();
    // Scatter over the device (overlapping: the later entry wins).
    c.call(
        &Req::new(OP_EXTENT_WRITE, 1)
            .object(h)
            .sgl(&[(4096, 4), (0, 2), (4098, 4)])
            .data(b"AAAAbbCCCC"),
    )
    .ok();
    // The device NBD serves holds it.
    let mut got = [0u8; 6];
    disk.read_at(&mut got, 4096).unwrap();
    assert_eq!(&got, b"AACCCC");
    disk.read_at(&mut got[..2], 0).unwrap();
    assert_eq!(&got[..2], b"bb");
    // Bytes written by NBD's device come back strided.
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
    disk.write_at(&pattern, 65536, false).unwrap();
    let r = c
        .call(
            &Req::new(OP_EXTENT_READ, 2)
                .object(h)
                .strided(65536, 1000, 10, 8),
        )
        .ok();
    let want: Vec<u8> = (0..8)
        .flat_map(|i| pattern[i * 1000..i * 1000 + 10].to_vec())
        .collect();
    assert_eq!((r.body, r.real), (want, 80));
    // Past the end, read-only, unattached.
    let msg = c
        .call(
            &Req::new(OP_EXTENT_READ, 3)
                .object(h)
                .range((1 << 20) - 2, 4),
        )
        .err(ErrorCode::OutOfRange);
    assert!(msg.contains("disk"), "{msg}");
    c.call(
        &Req::new(OP_EXTENT_WRITE, 4)
            .object(ro_h)
            .range(0, 1)
            .data(b"x"),
    )
    .err(ErrorCode::ReadOnly);
    c.call(&Req::new(OP_EXTENT_READ, 5).object(9).range(0, 1))
        .err(ErrorCode::NoSuchObject);
}

// ---------------------------------------------------------------------------
// Bad input: each answered with a clear error, the connection usable
// where the framing allows, other clients untouched.

/// The connection still serves requests.
fn still_usable(c: &mut RawObjClient<std::net::TcpStream>, object: u64) {
    c.write(object, 0, b"alive");
    assert_eq!(c.read(object, 0, 5).0, b"alive");
}

/// Reads until the server closes; panics if it answers anything.
fn assert_closed(c: &mut RawObjClient<std::net::TcpStream>) {
    use std::io::Read;
    let mut rest = Vec::new();
    match c.s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "the server answered {rest:?}"),
        Err(e) => assert_ne!(e.kind(), std::io::ErrorKind::WouldBlock, "not closed: {e}"),
    }
}

#[test]
fn bad_ddts_are_refused_and_the_connection_goes_on() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    let max = c.limits.max_segments;
    let cases: Vec<(&str, Req, &str)> = vec![
        (
            "zero-count SGL",
            Req::new(OP_READ, 1).object(id).sgl(&[]),
            "zero segments",
        ),
        (
            "oversized SGL",
            Req::new(OP_READ, 2)
                .object(id)
                .sgl(&vec![(0, 1); max as usize + 1]),
            "more than the server's limit",
        ),
        (
            "zero-count strided",
            Req::new(OP_READ, 3).object(id).strided(0, 8, 4, 0),
            "zero segments",
        ),
        (
            "oversized strided",
            Req::new(OP_READ, 4).object(id).strided(0, 8, 1, max + 1),
            "more than the server's limit",
        ),
        (
            "stride < length",
            Req::new(OP_READ, 5).object(id).strided(0, 3, 4, 2),
            "stride 3 smaller",
        ),
        (
            "contiguous overflow",
            Req::new(OP_READ, 6).object(id).range(u64::MAX - 1, 4),
            "past 2^64",
        ),
        (
            "SGL entry overflow",
            Req::new(OP_READ, 7)
                .object(id)
                .sgl(&[(0, 1), (u64::MAX, 2)]),
            "segment 1",
        ),
        (
            "strided end overflow",
            Req::new(OP_READ, 8)
                .object(id)
                .strided(u64::MAX - 100, 64, 8, 3),
            "past 2^64",
        ),
        (
            "header length differs from the DDT",
            {
                let mut r = Req::new(OP_READ, 9).object(id).sgl(&[(0, 4)]);
                r.length = 5;
                r
            },
            "differs",
        ),
        (
            "DDT value 3",
            Req::new(OP_READ, 10).object(id).range(0, 1).flags(3),
            "reserved",
        ),
    ];
    for (what, req, needle) in cases {
        let msg = c.call(&req).err(ErrorCode::BadDdt);
        assert!(msg.contains(needle), "{what}: {msg}");
        still_usable(&mut c, id);
    }
}

#[test]
fn payloads_shorter_or_longer_than_the_ddt_are_length_mismatches() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    c.write(id, 0, b"original");
    // The header frames what is sent, but the DDT says 8 bytes.
    for data in [&b"short"[..], b"much too long"] {
        let mut req = Req::new(OP_WRITE, 1).object(id).sgl(&[(0, 4), (4, 4)]);
        req.data = data.to_vec();
        let msg = c.call(&req).err(ErrorCode::LengthMismatch);
        assert!(msg.contains("its DDT describes 8"), "{msg}");
    }
    // A READ carrying data is one too.
    c.call(&Req::new(OP_READ, 2).object(id).range(0, 4).data(b"xxxx"))
        .err(ErrorCode::LengthMismatch);
    // Nothing of the refused writes landed.
    assert_eq!(c.read(id, 0, 8).0, b"original");
}

#[test]
fn unknown_objects_partitions_opcodes_flags_and_oversized_attributes() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    // Unknown object, for each kind of command that names one.
    for req in [
        Req::new(OP_READ, 1).object(999).range(0, 1),
        Req::new(OP_WRITE, 2).object(999).range(0, 1).data(b"x"),
        Req::new(OP_APPEND, 3).object(999).range(0, 1).data(b"x"),
        Req::new(OP_PUNCH, 4).object(999).range(0, 1),
        Req::new(OP_GET_ATTRS, 5).object(999),
        Req::new(OP_SET_ATTRS, 6)
            .object(999)
            .attrs(&[AttrOp::Set("a", AttrValue::Integer(1))]),
        Req::new(OP_REMOVE, 7).object(999),
        flush_req(8, 0).object(999),
    ] {
        let msg = c.call(&req).err(ErrorCode::NoSuchObject);
        assert!(msg.contains("0x3e7"), "opcode {}: {msg}", req.opcode);
    }
    // A header naming another partition than the session's.
    let mut req = Req::new(OP_READ, 10).object(id).range(0, 1);
    req.partition = 77;
    let msg = c.call(&req).err(ErrorCode::NoSuchPartition);
    assert!(msg.contains("0x4d"), "{msg}");
    // Selecting an unknown partition is refused in the handshake.
    let mut d = RawObjClient::connect(server.obj_addr.unwrap());
    d.hello(ALL).unwrap();
    let (status, msg) = d.select(77).unwrap_err();
    assert_eq!(status, answer::UNKNOWN_PARTITION, "{msg}");
    d.select(1).unwrap();
    // Unknown opcode and flags.
    let msg = c.call(&Req::new(99, 11)).err(ErrorCode::UnknownOpcode);
    assert!(msg.contains("99"), "{msg}");
    let msg = c
        .call(&Req::new(OP_GET_ATTRS, 12).object(id).flags(FLAG_FUA))
        .err(ErrorCode::BadFlags);
    assert!(msg.contains("GetAttrs"), "{msg}");
    c.call(&Req::new(OP_READ, 13).object(id).range(0, 1).flags(0x100))
        .err(ErrorCode::BadFlags);
    // Attributes over the limits: the protocol's (the greeting's value
    // size) and the store's (text values).
    let big = vec![7u8; c.limits.max_attr_size as usize + 1];
    let msg = c
        .call(
            &Req::new(OP_SET_ATTRS, 14)
                .object(id)
                .attrs(&[AttrOp::Set("blob", AttrValue::Bytes(&big))]),
        )
        .err(ErrorCode::AttrTooLarge);
    assert!(msg.contains("blob"), "{msg}");
    let text = "t".repeat(2000);
    let msg = c
        .call(
            &Req::new(OP_WRITE, 15)
                .object(id)
                .range(0, 1)
                .data(b"x")
                .attrs(&[AttrOp::Set("note", AttrValue::Text(&text))]),
        )
        .err(ErrorCode::AttrTooLarge);
    assert!(msg.contains("note"), "{msg}");
    // The refused write did not land either (attributes and data are one).
    assert_eq!(c.read(id, 0, 1), (vec![0], 0));
    // A malformed attribute list and unconsumed parameters are INVALID.
    let mut req = Req::new(OP_GET_ATTRS, 16).object(id);
    req.attrs = vec![0, 1, 1, 5, b'a'];
    let msg = c.call(&req).err(ErrorCode::Invalid);
    assert!(msg.contains("ends inside an entry"), "{msg}");
    let msg = c
        .call(&Req::new(OP_CREATE, 17).params(&[&create_params(1, "")[..], &[0]].concat()))
        .err(ErrorCode::Invalid);
    assert!(msg.contains("unexpected parameter bytes"), "{msg}");
    c.call(&Req::new(OP_CREATE, 18).params(&create_params(0, "")))
        .err(ErrorCode::Invalid);
    still_usable(&mut c, id);
}

#[test]
fn a_batch_with_one_bad_member_answers_every_member() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let ids = c.create(3, "");
    let members = [
        Req::new(OP_WRITE, 101)
            .object(ids[0])
            .range(0, 3)
            .data(b"one"),
        Req::new(99, 102),
        Req::new(OP_WRITE, 103)
            .object(ids[1])
            .strided(0, 4, 2, 2)
            .data(b"twoo"),
        Req::new(OP_READ, 104).object(777).range(0, 1),
        Req::new(OP_SET_ATTRS, 105)
            .object(ids[2])
            .attrs(&[AttrOp::Set("k", AttrValue::Integer(3))]),
    ];
    let body: Vec<u8> = members.iter().flat_map(|m| c.encode(m)).collect();
    c.send(&Req::new(OP_BATCH, 100).data(&body));
    let mut replies: Vec<Reply> = (0..members.len()).map(|_| c.reply()).collect();
    replies.sort_by_key(|r| r.id);
    let ids_seen: Vec<u64> = replies.iter().map(|r| r.id).collect();
    assert_eq!(
        ids_seen,
        [101, 102, 103, 104, 105],
        "one reply per member, none for the batch"
    );
    assert_eq!(replies[0].status, None);
    assert_eq!(replies[1].status, Some(ErrorCode::UnknownOpcode));
    assert_eq!(replies[2].status, None);
    assert_eq!(replies[3].status, Some(ErrorCode::NoSuchObject));
    assert_eq!(replies[4].status, None);
    assert_eq!(c.read(ids[0], 0, 3).0, b"one");
    assert_eq!(c.read(ids[1], 0, 6).0, b"tw\0\0oo");
    // A batch that cannot be split (a member runs past the end) is
    // refused whole on its own id, and nothing runs.
    let mut body = c.encode(
        &Req::new(OP_WRITE, 201)
            .object(ids[2])
            .range(0, 1)
            .data(b"z"),
    );
    body.extend_from_slice(
        &c.encode(
            &Req::new(OP_WRITE, 202)
                .object(ids[2])
                .range(0, 2)
                .data(b"zz"),
        )[..65],
    );
    let msg = c
        .call(&Req::new(OP_BATCH, 200).data(&body))
        .err(ErrorCode::BadBatch);
    assert!(msg.contains("member 2"), "{msg}");
    assert_eq!(c.read(ids[2], 0, 1), (vec![0], 0));
    // A nested batch and an empty one are refused too.
    let inner = c.encode(
        &Req::new(OP_BATCH, 301)
            .data(&c.encode(&Req::new(OP_READ, 302).object(ids[0]).range(0, 1))),
    );
    c.call(&Req::new(OP_BATCH, 300).data(&inner))
        .err(ErrorCode::BadBatch);
    c.call(&Req::new(OP_BATCH, 310)).err(ErrorCode::BadBatch);
    // Without BATCH negotiated a batch is NOT_NEGOTIATED.
    let mut plain = RawObjClient::open(server.obj_addr.unwrap(), Features(0), 1);
    plain
        .call(&Req::new(OP_BATCH, 400).data(&body[..64 + 1]))
        .err(ErrorCode::NotNegotiated);
    still_usable(&mut c, ids[2]);
}

#[test]
fn batch_members_run_in_parallel_and_are_answered_as_each_completes() {
    let dir = tempfile::tempdir().unwrap();
    let gated = Arc::new(sluice_testkit::GatedDevice::new(1 << 20, vec![0]));
    let server = TestServer::builder()
        .export("gated", Arc::clone(&gated) as Arc<dyn BlockDevice>)
        .objects(dir.path())
        .config(|c| c.io_threads = 4)
        .start();
    let mut c = RawObjClient::connect(server.obj_addr.unwrap());
    c.hello(ALL).unwrap();
    let (h, _, _) = c.attach("gated").unwrap();
    c.select(1).unwrap();
    // Member 1 waits at the gate; member 2 must not wait for it.
    let body: Vec<u8> = [
        Req::new(OP_EXTENT_READ, 1).object(h).range(0, 512),
        Req::new(OP_EXTENT_READ, 2).object(h).range(4096, 512),
    ]
    .iter()
    .flat_map(|m| c.encode(m))
    .collect();
    c.send(&Req::new(OP_BATCH, 9).data(&body));
    let first = c.reply().ok();
    assert_eq!(
        first.id, 2,
        "the ungated member is answered while the other waits"
    );
    gated.open_gate();
    assert_eq!(c.reply().ok().id, 1);
}

/// The value of the series `name` on `server` (0 if absent).
fn metric(server: &TestServer, name: &str) -> u64 {
    server
        .scrape()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `(pool hand-offs, shared jobs, members run in them)` so far.
fn pool_counts(server: &TestServer) -> [u64; 3] {
    [
        metric(server, "sluice_handoffs_total"),
        metric(server, "sluice_obj_batch_groups_total"),
        metric(server, "sluice_obj_batch_grouped_members_total"),
    ]
}

/// `(metadata commits of shared jobs' data changes, the changes)` so far.
fn commit_counts(server: &TestServer) -> [u64; 2] {
    [
        metric(server, "sluice_obj_batch_commits_total"),
        metric(server, "sluice_obj_batch_committed_changes_total"),
    ]
}

/// Sends `members` as one batch frame and returns their replies by id.
fn run_batch(c: &mut RawObjClient<std::net::TcpStream>, id: u64, members: &[Req]) -> Vec<Reply> {
    let body: Vec<u8> = members.iter().flat_map(|m| c.encode(m)).collect();
    c.send(&Req::new(OP_BATCH, id).data(&body));
    let mut replies: Vec<Reply> = (0..members.len()).map(|_| c.reply()).collect();
    replies.sort_by_key(|r| r.id);
    replies
}

#[test]
fn a_batch_of_small_writes_is_one_pool_hand_off_with_a_reply_for_each() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let ids = c.create(8, "");
    let members: Vec<Req> = (0..8u64)
        .map(|k| {
            Req::new(OP_WRITE, 10 + k)
                .object(ids[k as usize])
                .range(k * 4096, 4096)
                .data(&[k as u8 + 1; 4096])
        })
        .collect();
    let before = pool_counts(&server);
    let before_commits = commit_counts(&server);
    let replies = run_batch(&mut c, 9, &members);
    let after = pool_counts(&server);
    assert_eq!(
        replies.iter().map(|r| r.id).collect::<Vec<_>>(),
        (10..18).collect::<Vec<_>>(),
        "one reply per member, each with its own id"
    );
    for r in replies {
        r.ok();
    }
    assert_eq!(
        [
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ],
        [1, 1, 8],
        "eight small writes: one hand-off, one shared job of eight"
    );
    let commits = commit_counts(&server);
    assert_eq!(
        [
            commits[0] - before_commits[0],
            commits[1] - before_commits[1]
        ],
        [1, 8],
        "eight small writes: one metadata commit"
    );
    for (k, &id) in ids.iter().enumerate() {
        let k = k as u64;
        assert_eq!(c.read(id, k * 4096, 4096).0, vec![k as u8 + 1; 4096]);
    }
}

#[test]
fn a_bad_member_of_a_shared_job_is_answered_and_the_others_still_run() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let ids = c.create(2, "");
    let members = [
        Req::new(OP_WRITE, 21)
            .object(ids[0])
            .range(0, 3)
            .data(b"one"),
        // No such object: fails when it runs, inside the shared job.
        Req::new(OP_WRITE, 22).object(777).range(0, 3).data(b"bad"),
        Req::new(OP_WRITE, 23)
            .object(ids[1])
            .range(0, 3)
            .data(b"two"),
    ];
    let before = pool_counts(&server);
    let before_commits = commit_counts(&server);
    let replies = run_batch(&mut c, 20, &members);
    let after = pool_counts(&server);
    assert_eq!(after[0] - before[0], 1, "the three ran in one job");
    let commits = commit_counts(&server);
    assert_eq!(
        commits[0] - before_commits[0],
        1,
        "the two good writes share one commit"
    );
    assert_eq!(
        replies.iter().map(|r| r.id).collect::<Vec<_>>(),
        [21, 22, 23]
    );
    let mut replies = replies.into_iter();
    replies.next().unwrap().ok();
    let msg = replies.next().unwrap().err(ErrorCode::NoSuchObject);
    assert!(msg.contains("0x309"), "{msg}");
    replies.next().unwrap().ok();
    assert_eq!(c.read(ids[0], 0, 3).0, b"one");
    assert_eq!(c.read(ids[1], 0, 3).0, b"two");
    still_usable(&mut c, ids[1]);
}

#[test]
fn a_shared_jobs_writes_appends_and_punches_commit_once_and_keep_their_replies() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let ids = c.create(3, "");
    c.write(ids[2], 0, &[9u8; 64]);
    let members = [
        Req::new(OP_APPEND, 41)
            .object(ids[0])
            .range(0, 3)
            .data(b"abc"),
        // The same object again: appended after the first.
        Req::new(OP_APPEND, 42)
            .object(ids[0])
            .range(0, 2)
            .data(b"de")
            .attrs(&[
                AttrOp::Set("n", AttrValue::Integer(5)),
                AttrOp::Get("n"),
                AttrOp::Get("sluice.length"),
            ]),
        Req::new(OP_WRITE, 43)
            .object(ids[1])
            .sgl(&[(0, 2), (10, 2)])
            .data(b"xyzw"),
        Req::new(OP_PUNCH, 44).object(ids[2]).range(8, 8),
        // Not a data change: runs after them in the same job.
        Req::new(OP_SET_ATTRS, 45)
            .object(ids[1])
            .attrs(&[AttrOp::Set("k", AttrValue::Integer(1))]),
    ];
    let before = pool_counts(&server);
    let before_commits = commit_counts(&server);
    let replies = run_batch(&mut c, 40, &members);
    let after = pool_counts(&server);
    let commits = commit_counts(&server);
    assert_eq!([after[1] - before[1], after[2] - before[2]], [1, 5]);
    assert_eq!(
        [
            commits[0] - before_commits[0],
            commits[1] - before_commits[1]
        ],
        [1, 4],
        "four data changes: one commit"
    );
    let replies: Vec<Reply> = replies.into_iter().map(Reply::ok).collect();
    assert_eq!(replies[0].body, 0u64.to_be_bytes());
    assert_eq!(replies[1].body, 3u64.to_be_bytes());
    assert_eq!(
        replies[1].attr_ops(),
        [
            AttrOp::Set("n", AttrValue::Integer(5)),
            AttrOp::Set("sluice.length", AttrValue::Integer(5)),
        ]
    );
    assert_eq!(c.read(ids[0], 0, 5).0, b"abcde");
    assert_eq!(c.read(ids[1], 10, 2).0, b"zw");
    assert_eq!(c.read(ids[2], 6, 4).0, [9, 9, 0, 0]);
    still_usable(&mut c, ids[1]);
}

#[test]
fn large_members_of_a_batch_are_handed_off_one_each() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let ids = c.create(2, "");
    let big = vec![7u8; 256 * 1024];
    let members = [
        Req::new(OP_WRITE, 31)
            .object(ids[0])
            .range(0, big.len() as u64)
            .data(&big),
        Req::new(OP_WRITE, 32)
            .object(ids[1])
            .range(0, big.len() as u64)
            .data(&big),
    ];
    let before = pool_counts(&server);
    for r in run_batch(&mut c, 30, &members) {
        r.ok();
    }
    let after = pool_counts(&server);
    assert_eq!(
        [after[0] - before[0], after[1] - before[1]],
        [2, 0],
        "two large writes: two jobs, free to run in parallel"
    );
    assert_eq!(c.read(ids[1], 1000, 3).0, [7, 7, 7]);
}

#[test]
fn small_members_are_answered_while_a_slow_member_of_their_frame_waits() {
    let dir = tempfile::tempdir().unwrap();
    let gated = Arc::new(sluice_testkit::GatedDevice::new(1 << 20, vec![0]));
    let server = TestServer::builder()
        .export("gated", Arc::clone(&gated) as Arc<dyn BlockDevice>)
        .objects(dir.path())
        .config(|c| c.io_threads = 4)
        .metrics()
        .start();
    let mut c = RawObjClient::connect(server.obj_addr.unwrap());
    c.hello(ALL).unwrap();
    let (h, _, _) = c.attach("gated").unwrap();
    c.select(1).unwrap();
    let ids = c.create(4, "");
    let mut members = vec![Req::new(OP_EXTENT_READ, 1).object(h).range(0, 512)];
    members.extend(
        ids.iter()
            .zip(2u64..)
            .map(|(&o, id)| Req::new(OP_WRITE, id).object(o).range(0, 2).data(b"ok")),
    );
    let before = pool_counts(&server);
    let body: Vec<u8> = members.iter().flat_map(|m| c.encode(m)).collect();
    c.send(&Req::new(OP_BATCH, 9).data(&body));
    // The four writes (one shared job) come back while the read waits.
    let mut first: Vec<u64> = (0..4).map(|_| c.reply().ok().id).collect();
    first.sort_unstable();
    assert_eq!(first, [2, 3, 4, 5]);
    let after = pool_counts(&server);
    assert_eq!(
        [
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ],
        [2, 1, 4],
        "the gated read on its own job, the writes in one"
    );
    gated.open_gate();
    assert_eq!(c.reply().ok().id, 1);
}

#[test]
fn truncated_frames_bad_magic_and_oversized_payloads_end_only_that_connection() {
    use std::io::Write;
    let (server, _dir, _) = start();
    let mut good = client(&server);
    let id = good.create(1, "")[0];
    good.write(id, 0, b"keep me");
    good.flush();
    // A client vanishing mid-payload: a write header for the good
    // client's object, half its data, then gone.
    {
        let mut bad = client(&server);
        let bytes = bad.encode(
            &Req::new(OP_WRITE, 1)
                .object(id)
                .range(0, 7)
                .data(b"CLOBBER"),
        );
        bad.s.write_all(&bytes[..64 + 3]).unwrap();
    }
    // Half a header, then gone.
    {
        let mut bad = client(&server);
        let bytes = bad.encode(&Req::new(OP_READ, 1).object(id).range(0, 1));
        bad.s.write_all(&bytes[..30]).unwrap();
    }
    // Bad magic: closed without an answer.
    let mut bad = client(&server);
    bad.s.write_all(&[0xde; 64]).unwrap();
    assert_closed(&mut bad);
    // A payload over the published limit: closed, nothing buffered.
    let mut bad = client(&server);
    let mut req = Req::new(OP_WRITE, 1).object(id).range(0, 1);
    req.data_len = Some(bad.limits.max_payload + 1);
    let mut bytes = bad.encode(&req);
    bytes.truncate(64);
    bad.s.write_all(&bytes).unwrap();
    assert_closed(&mut bad);
    // The good client's data and connection are intact.
    assert_eq!(good.read(id, 0, 7).0, b"keep me");
    still_usable(&mut good, id);
    let mut again = client(&server);
    assert_eq!(again.read(id, 0, 5).0, b"alive");
}

/// The creates among a batch frame's small members are made with one
/// store call, beside the frame's writes (one commit for those), in one
/// pool job; each member is answered on its own, and a create the store
/// refuses fails alone.
#[test]
fn the_creates_of_a_batch_frame_are_made_together_beside_its_writes() {
    let (server, _dir, _) = start();
    let mut c = client(&server);
    let target = c.create(1, "")[0];
    let mut members: Vec<Req> = (0..5u64)
        .map(|k| {
            Req::new(OP_CREATE_AND_WRITE, 40 + k)
                .params(&name_param("batched"))
                .attrs(&[AttrOp::Set("serial", AttrValue::Integer(k as i64))])
                .range(0, 4)
                .data(&[k as u8; 4])
        })
        .collect();
    members.push(Req::new(OP_CREATE, 45).params(&create_params(3, "")));
    members.push(
        Req::new(OP_WRITE, 46)
            .object(target)
            .range(0, 5)
            .data(b"write"),
    );
    // Refused by the store: a key the server keeps.
    members.push(
        Req::new(OP_CREATE_AND_WRITE, 47)
            .params(&name_param(""))
            .attrs(&[AttrOp::Set("sluice.created", AttrValue::Integer(1))]),
    );
    let before = create_counts(&server);
    let before_pool = pool_counts(&server);
    let replies = run_batch(&mut c, 39, &members);
    let after = create_counts(&server);
    let after_pool = pool_counts(&server);
    assert_eq!(
        replies.iter().map(|r| r.id).collect::<Vec<_>>(),
        (40..48).collect::<Vec<_>>()
    );
    assert_eq!(
        [
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2],
            after_pool[1] - before_pool[1],
        ],
        [1, 1, 7, 1],
        "one hand-off, one shared job, its seven creates made together"
    );
    let mut replies = replies.into_iter();
    for k in 0..5u64 {
        let id = u64::from_be_bytes(replies.next().unwrap().ok().body.try_into().unwrap());
        assert_eq!(c.read(id, 0, 4).0, vec![k as u8; 4]);
        let attrs = c
            .call(
                &Req::new(OP_GET_ATTRS, 60)
                    .object(id)
                    .attrs(&[AttrOp::Get("serial")]),
            )
            .ok();
        assert_eq!(
            attrs.attr_ops(),
            [AttrOp::Set("serial", AttrValue::Integer(k as i64))]
        );
    }
    let three = replies.next().unwrap().ok();
    assert_eq!(
        sluice_obj_proto::decode_id_list(&three.body).unwrap().len(),
        3
    );
    replies.next().unwrap().ok();
    assert_eq!(c.read(target, 0, 5).0, b"write");
    replies.next().unwrap().err(ErrorCode::Permission);
    let listing = c
        .call(&Req::new(OP_LIST, 61).params(&page_params(0, 100, "batched")))
        .ok();
    assert_eq!(page(&listing.body).entries.len(), 5);
}

/// `(pool hand-offs, create groups, creates made in them)` so far.
fn create_counts(server: &TestServer) -> [u64; 3] {
    [
        metric(server, "sluice_handoffs_total"),
        metric(server, "sluice_obj_create_groups_total"),
        metric(server, "sluice_obj_grouped_creates_total"),
    ]
}

/// Creates that arrive in one receive are made with one pool hand-off
/// (one store call, one commit) and each is answered on its own; a bad
/// one among them fails alone.
#[test]
fn creates_received_together_are_one_hand_off_with_a_reply_for_each() {
    use std::io::Write;

    let (server, _dir, _) = start();
    let mut c = client(&server);
    let mut frames = Vec::new();
    for k in 0..8u64 {
        // Even ones with data and a GET of the length riding on them.
        let mut req = Req::new(OP_CREATE_AND_WRITE, 100 + k)
            .params(&name_param(if k % 3 == 0 { "made" } else { "" }))
            .attrs(&[
                AttrOp::Set("owner", AttrValue::Text("t")),
                AttrOp::Set("serial", AttrValue::Integer(k as i64)),
                AttrOp::Set("tag", AttrValue::Bytes(&[0xab; 32])),
            ]);
        if k % 2 == 0 {
            req = req.range(0, 3).data(b"abc");
        }
        frames.extend(c.encode(&req));
    }
    // A plain CREATE of two, and one refused by the store: a key the
    // server keeps.
    frames.extend(c.encode(&Req::new(OP_CREATE, 108).params(&create_params(2, ""))));
    frames.extend(
        c.encode(
            &Req::new(OP_CREATE_AND_WRITE, 109)
                .params(&name_param(""))
                .attrs(&[AttrOp::Set("sluice.length", AttrValue::Integer(1))]),
        ),
    );
    let before = create_counts(&server);
    c.s.write_all(&frames).unwrap();
    let mut replies: Vec<Reply> = (0..10).map(|_| c.reply()).collect();
    let after = create_counts(&server);
    replies.sort_by_key(|r| r.id);
    assert_eq!(
        replies.iter().map(|r| r.id).collect::<Vec<_>>(),
        (100..110).collect::<Vec<_>>(),
        "one reply per create, each with its own id"
    );
    assert_eq!(
        [
            after[0] - before[0],
            after[1] - before[1],
            after[2] - before[2]
        ],
        [1, 1, 10],
        "ten creates received together: one hand-off, one group of ten"
    );
    let refused = replies.pop().unwrap();
    refused.err(ErrorCode::Permission);
    let pair = replies.pop().unwrap().ok();
    let pair = sluice_obj_proto::decode_id_list(&pair.body).unwrap();
    assert_eq!(pair.len(), 2);
    let mut made = Vec::new();
    for (k, r) in replies.into_iter().enumerate() {
        let id = u64::from_be_bytes(r.ok().body.try_into().unwrap());
        let attrs = c
            .call(&Req::new(OP_GET_ATTRS, 200).object(id).attrs(&[
                AttrOp::Get("serial"),
                AttrOp::Get("tag"),
                AttrOp::Get("sluice.length"),
            ]))
            .ok();
        let len = if k % 2 == 0 { 3 } else { 0 };
        assert_eq!(
            attrs.attr_ops(),
            [
                AttrOp::Set("serial", AttrValue::Integer(k as i64)),
                AttrOp::Set("tag", AttrValue::Bytes(&[0xab; 32])),
                AttrOp::Set("sluice.length", AttrValue::Integer(len)),
            ],
            "create {k}"
        );
        if k % 2 == 0 {
            assert_eq!(c.read(id, 0, 3).0, b"abc");
        }
        made.push(id);
    }
    let ids = [made.clone(), pair].concat();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 10, "every create got its own ids: {ids:?}");
    // The collection came into being with its first member.
    let listing = c
        .call(&Req::new(OP_LIST, 300).params(&page_params(0, 100, "made")))
        .ok();
    let listed: Vec<u64> = page(&listing.body)
        .entries
        .iter()
        .map(|e| e.object)
        .collect();
    assert_eq!(listed, [made[0], made[3], made[6]]);
}

/// The object's `sluice.data_modified` as GET_ATTRS answers it.
fn data_modified(c: &mut RawObjClient<std::net::TcpStream>, id: u64) -> i64 {
    let r = c
        .call(
            &Req::new(OP_GET_ATTRS, 90)
                .object(id)
                .attrs(&[AttrOp::Get("sluice.data_modified")]),
        )
        .ok();
    match r.attr_ops().as_slice() {
        [AttrOp::Set(_, AttrValue::Integer(t))] => *t,
        other => panic!("GET_ATTRS answered {other:?}"),
    }
}

/// A rewrite inside an object file commits no transaction; its time is
/// answered at once and reaches the database when the server stops.
#[test]
fn a_rewrites_time_is_answered_at_once_and_kept_when_the_server_stops() {
    let (server, dir, _) = start();
    let mut c = client(&server);
    let id = c.create(1, "")[0];
    // 64 KiB: past the inline limit, so the object has a file.
    c.write(id, 0, &vec![1u8; 64 << 10]);
    let first = data_modified(&mut c, id);
    let commits = metric(&server, "sluice_obj_store_commits_total");
    c.write(id, 100, b"rewrite!");
    assert_eq!(
        metric(&server, "sluice_obj_store_commits_total"),
        commits,
        "the rewrite committed"
    );
    assert_eq!(
        metric(&server, "sluice_obj_store_deferred_commits_total"),
        1
    );
    assert_eq!(metric(&server, "sluice_obj_store_unwritten_times"), 1);
    let rewritten = data_modified(&mut c, id);
    assert!(rewritten > first, "{rewritten} not after {first}");
    drop(c);
    server.stop().unwrap();
    // Opened again, the store has it from its database.
    let store = sluice_objstore::ObjectStore::open(dir.path().join("objects")).unwrap();
    let object = sluice_objstore::ObjectRef {
        partition: sluice_objstore::PartitionId(sluice_server::DEFAULT_PARTITION),
        object: sluice_objstore::ObjectId(id),
    };
    let stored = store.get_attrs(object, &[]).unwrap().0.data_modified;
    assert_eq!(stored, rewritten);
}
