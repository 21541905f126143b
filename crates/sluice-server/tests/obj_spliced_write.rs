#![allow(clippy::unwrap_used)]
//! Large plain object WRITEs whose payload is spliced from the socket
//! through the connection's pipe into the object's file, end to end in
//! process: which writes take that path (`sluice_obj_spliced_writes_total`),
//! that what they write reads back exactly (around the 128 KiB threshold
//! and the pipe's capacity, inside and past the object's end, with part
//! of the payload arriving with the header), that the writes the path
//! leaves alone still work, and that a client vanishing mid-payload
//! changes nothing.

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{AttrOp, AttrValue, Features};
use sluice_server::config::PipelineMode;
use sluice_testkit::raw_obj::*;
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

fn start_with(pipeline: PipelineMode) -> (TestServer, TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| {
            c.io_threads = 4;
            c.pipeline = pipeline;
        })
        .metrics()
        .start();
    (server, dir)
}

fn client(server: &TestServer) -> RawObjClient<TcpStream> {
    RawObjClient::open(server.obj_addr.unwrap(), Features::NEGOTIABLE, 1)
}

fn metric(server: &TestServer, line_prefix: &str) -> u64 {
    server
        .scrape()
        .lines()
        .find_map(|l| {
            l.strip_prefix(line_prefix)
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or(0)
}

fn spliced(server: &TestServer) -> u64 {
    metric(server, "sluice_obj_spliced_writes_total ")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed ^ (i / 4093) as u8)
        })
        .collect()
}

/// Sends `req` in two parts: its header and the first `prefix` bytes of
/// its payload, then (once the server has surely read those) the rest,
/// so the server sees the header of a message whose payload is still
/// arriving, as it does for most large writes.
fn send_in_two(c: &mut RawObjClient<TcpStream>, req: &Req, prefix: usize) {
    let bytes = c.encode(req);
    let cut = REQUEST_HEADER_LEN + prefix;
    c.s.write_all(&bytes[..cut]).unwrap();
    c.s.flush().unwrap();
    thread::sleep(Duration::from_millis(30));
    c.s.write_all(&bytes[cut..]).unwrap();
}

/// Sends a WRITE the server should splice, as [`send_in_two`] does,
/// and reads its (successful) reply; sends it again (the same bytes
/// to the same place: nothing changes) if it was not spliced, up to 5
/// times. Whether a write finds its payload still arriving when its
/// header is read depends on timing (a server thread that runs late
/// finds the whole message in the socket and copies it); five times in
/// a row it does not. Returns how many sends were spliced (0 or 1).
fn splice_write(
    c: &mut RawObjClient<TcpStream>,
    server: &TestServer,
    req: &Req,
    prefix: usize,
) -> u64 {
    for _ in 0..5 {
        let before = spliced(server);
        send_in_two(c, req, prefix);
        assert_eq!(c.reply().ok().id, req.id);
        let now = spliced(server);
        if now > before {
            return now - before;
        }
    }
    0
}

fn write_req(id: u64, object: u64, offset: u64, data: &[u8]) -> Req {
    Req::new(OP_WRITE, id)
        .object(object)
        .range(offset, data.len() as u64)
        .data(data)
}

/// Applies a write to the model of an object's bytes.
fn model_write(model: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

/// Checks the whole object against the model: its bytes and its length.
fn check_object(c: &mut RawObjClient<TcpStream>, object: u64, model: &[u8], what: &str) {
    let (got, real) = c.read(object, 0, model.len() as u64 + 4096);
    assert_eq!(real, model.len() as u64, "{what}: length");
    assert!(got[..model.len()] == *model, "{what}: bytes differ");
    assert!(
        got[model.len()..].iter().all(|&b| b == 0),
        "{what}: past the end"
    );
}

/// An object of `len` bytes of `pattern(len, seed)`, written the
/// copying way, and so open as a file in the store.
fn object_with(c: &mut RawObjClient<TcpStream>, len: usize, seed: u8) -> (u64, Vec<u8>) {
    let id = c.create(1, "")[0];
    let data = pattern(len, seed);
    c.write(id, 0, &data);
    (id, data)
}

#[test]
fn large_plain_writes_are_spliced_into_the_object_file_and_read_back_exactly() {
    let (server, _dir) = start_with(PipelineMode::Flexible);
    let mut c = client(&server);
    let (id, mut model) = object_with(&mut c, 2 * MIB, 1);
    // (offset, length, bytes sent with the header, spliced?) The pipe
    // holds 1 MiB: a payload whose rest (after what came with the
    // header) is longer is not spliced when its header arrives, only
    // (maybe) once more of it is in the receive buffer.
    let cases: &[(usize, usize, usize, Option<bool>)] = &[
        (4096 + 3, 128 * KIB - 1, 1000, Some(false)),
        (7, 128 * KIB, 0, Some(true)),
        (100 * KIB + 1, 128 * KIB + 1, 1000, Some(true)),
        (MIB - 5, MIB - 1, 4096 + 7, Some(true)),
        (0, MIB, 0, Some(true)),
        (MIB / 2, MIB + 1000, 0, None),
        (MIB / 2 + 9, MIB + 1000, 64 * KIB, Some(true)),
        // Past the end: the object grows, a hole between.
        (2 * MIB + 5000, 300 * KIB, 10, Some(true)),
        // Straddling the end.
        (2 * MIB + 5000 + 200 * KIB, MIB, 100, Some(true)),
    ];
    for (k, &(offset, len, prefix, takes)) in cases.iter().enumerate() {
        let data = pattern(len, 10 + k as u8);
        let req = write_req(100 + k as u64, id, offset as u64, &data);
        if takes == Some(true) {
            // The last send is the spliced one, so the bytes checked
            // below are those it wrote.
            let got = splice_write(&mut c, &server, &req, prefix);
            assert_eq!(got, 1, "case {k} was never spliced");
        } else {
            let before = spliced(&server);
            send_in_two(&mut c, &req, prefix);
            assert_eq!(c.reply().ok().id, req.id);
            let got = spliced(&server) - before;
            assert!(got <= u64::from(takes.is_none()), "case {k} spliced");
        }
        model_write(&mut model, offset, &data);
        check_object(&mut c, id, &model, &format!("case {k}"));
    }
    // Several pipelined on one connection, each arriving whole or in part.
    let mut reqs = Vec::new();
    for k in 0..6u64 {
        let data = pattern(256 * KIB + k as usize, 50 + k as u8);
        let offset = (k as usize) * 300 * KIB + 11;
        model_write(&mut model, offset, &data);
        reqs.extend(c.encode(&write_req(200 + k, id, offset as u64, &data)));
    }
    c.s.write_all(&reqs).unwrap();
    for _ in 0..6 {
        c.reply().ok();
    }
    check_object(&mut c, id, &model, "pipelined");
    // Another connection sees the same bytes.
    let mut other = client(&server);
    check_object(&mut other, id, &model, "from another connection");
    server.stop().unwrap();
}

#[test]
fn writes_the_splicing_leaves_alone_still_land() {
    let (server, _dir) = start_with(PipelineMode::Flexible);
    let mut c = client(&server);
    let (id, mut model) = object_with(&mut c, MIB, 2);
    let base = spliced(&server);

    // Attribute entries: the copying path, the attribute set with the data.
    let data = pattern(256 * KIB, 3);
    let req = write_req(1, id, 1000, &data).attrs(&[AttrOp::Set("v", AttrValue::Integer(5))]);
    send_in_two(&mut c, &req, 100);
    c.reply().ok();
    model_write(&mut model, 1000, &data);
    let r = c
        .call(
            &Req::new(OP_GET_ATTRS, 2)
                .object(id)
                .attrs(&[AttrOp::Get("v")]),
        )
        .ok();
    assert_eq!(r.attr_ops(), vec![AttrOp::Set("v", AttrValue::Integer(5))]);

    // FUA: the copying path.
    let data = pattern(512 * KIB, 4);
    send_in_two(&mut c, &write_req(3, id, 3000, &data).flags(FLAG_FUA), 0);
    c.reply().ok();
    model_write(&mut model, 3000, &data);

    // A strided write of the same size: the copying path.
    let data = pattern(256 * KIB, 5);
    let req = Req::new(OP_WRITE, 4)
        .object(id)
        .strided(0, 8 * KIB as u64, 4 * KIB as u64, 64)
        .data(&data);
    send_in_two(&mut c, &req, 0);
    c.reply().ok();
    for i in 0..64 {
        model_write(
            &mut model,
            i * 8 * KIB,
            &data[i * 4 * KIB..(i + 1) * 4 * KIB],
        );
    }
    check_object(&mut c, id, &model, "after copied writes");
    assert_eq!(spliced(&server), base, "none of these was spliced");

    // A fresh object (not open in the store yet) and a small one kept
    // inline: the copying path, which then holds each open as a file.
    let fresh = c.create(1, "")[0];
    let data = pattern(300 * KIB, 6);
    send_in_two(&mut c, &write_req(5, fresh, 0, &data), 0);
    c.reply().ok();
    check_object(&mut c, fresh, &data, "fresh object");
    let small = c.create(1, "")[0];
    let head = pattern(4 * KIB, 7);
    c.write(small, 0, &head);
    let data = pattern(200 * KIB, 8);
    send_in_two(&mut c, &write_req(6, small, 2 * KIB as u64, &data), 0);
    c.reply().ok();
    let mut small_model = head.clone();
    model_write(&mut small_model, 2 * KIB, &data);
    check_object(&mut c, small, &small_model, "object that was inline");
    assert_eq!(spliced(&server), base, "neither was spliced");
    // Now both are files the store holds open: spliced.
    assert_eq!(
        splice_write(&mut c, &server, &write_req(7, small, 0, &data), 0),
        1
    );
    model_write(&mut small_model, 0, &data);
    check_object(&mut c, small, &small_model, "spliced once a file");

    // A write to an unknown object is refused, spliced or not, and the
    // connection goes on.
    send_in_two(&mut c, &write_req(8, id + 1000, 0, &data), 0);
    let e = c.reply().err(sluice_obj_proto::ErrorCode::NoSuchObject);
    assert!(!e.is_empty());
    check_object(&mut c, id, &model, "after the refused write");
    server.stop().unwrap();
}

#[test]
fn with_pipelining_off_writes_are_copied() {
    let (server, _dir) = start_with(PipelineMode::Off);
    let mut c = client(&server);
    let (id, mut model) = object_with(&mut c, MIB, 9);
    let data = pattern(512 * KIB, 10);
    send_in_two(&mut c, &write_req(1, id, 77, &data), 0);
    c.reply().ok();
    model_write(&mut model, 77, &data);
    check_object(&mut c, id, &model, "pipeline off");
    assert_eq!(spliced(&server), 0);
    server.stop().unwrap();
}

#[test]
fn a_client_vanishing_mid_payload_changes_nothing() {
    let (server, _dir) = start_with(PipelineMode::Flexible);
    let mut c = client(&server);
    let (id, model) = object_with(&mut c, MIB, 11);
    let active = |server: &TestServer| {
        metric(
            server,
            "sluice_protocol_connections_active{protocol=\"obj\"} ",
        )
    };
    let base = spliced(&server);
    for (offset, sent) in [(0usize, 1000usize), (MIB / 2, 600 * KIB), (MIB - 1, 100)] {
        let mut bad = client(&server);
        // Cached and large: the server splices what comes into its pipe.
        let data = pattern(MIB, 12);
        let bytes = bad.encode(&write_req(1, id, offset as u64, &data));
        bad.s.write_all(&bytes[..REQUEST_HEADER_LEN + 100]).unwrap();
        thread::sleep(Duration::from_millis(20));
        bad.s
            .write_all(&bytes[REQUEST_HEADER_LEN + 100..REQUEST_HEADER_LEN + sent])
            .unwrap();
        thread::sleep(Duration::from_millis(20));
        drop(bad);
        let deadline = Instant::now() + Duration::from_secs(10);
        while active(&server) > 1 {
            assert!(
                Instant::now() < deadline,
                "the server never saw the client go"
            );
            thread::sleep(Duration::from_millis(5));
        }
        check_object(
            &mut c,
            id,
            &model,
            &format!("after a client left at {sent}"),
        );
    }
    assert_eq!(spliced(&server), base, "no write was answered");
    // The server goes on serving: the first connection, and new ones.
    let data = pattern(MIB, 13);
    let mut model = model;
    assert_eq!(
        splice_write(&mut c, &server, &write_req(2, id, 5, &data), 10),
        1
    );
    model_write(&mut model, 5, &data);
    let mut fresh = client(&server);
    check_object(&mut fresh, id, &model, "after the clients left");
    server.stop().unwrap();
}

/// `--spliced-writes false` and `--mapped-reads false` turn the object
/// paths off as they do NBD's: large object writes are copied, large
/// reads (a range, a dense list that asks for a span) are read through
/// the store, and every byte is the same.
#[test]
fn the_fast_path_switches_turn_the_object_paths_off_too() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| {
            c.fast_paths.spliced_writes = false;
            c.fast_paths.mapped_reads = false;
        })
        .metrics()
        .start();
    let mut c = RawObjClient::open(server.obj_addr.unwrap(), Features::NEGOTIABLE, 1);
    let id = c.create(1, "")[0];
    c.write(id, 0, b"warm");
    let data: Vec<u8> = (0..MIB).map(|i| (i % 253) as u8).collect();
    let mib = MIB as u64;
    // The second goes where a spliced write would: the object is a file.
    c.write(id, 0, &data);
    c.write(id, 0, &data);
    let (got, real) = c.read(id, 0, mib);
    assert_eq!(real, mib);
    assert!(got == data, "contiguous read differs");
    let sgl: Vec<(u64, u64)> = (0..64u64).map(|i| (i * 4098, 4096)).collect();
    let got = c
        .call(
            &Req::new(OP_READ, 7)
                .object(id)
                .sgl(&sgl)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(!got.span, "no span without sends from the file");
    let want: Vec<u8> = sgl
        .iter()
        .flat_map(|&(o, l)| data[o as usize..(o + l) as usize].to_vec())
        .collect();
    assert!(got.body == want, "list read differs");
    let text = server.scrape();
    for name in [
        "sluice_obj_spliced_writes_total",
        "sluice_mapped_reads_total",
        "sluice_obj_span_reads_total",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} is exported"));
        assert_eq!(line, format!("{name} 0"), "{name}");
    }
}
