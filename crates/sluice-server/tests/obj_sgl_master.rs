#![allow(clippy::unwrap_used)]
//! SGL DDTs at a master offset against a real server: the entries'
//! offsets are relative to the header's master offset, so the bytes
//! written and read are those at master + offset, on objects and on
//! the extents of an NBD export; without the feature negotiated, or
//! past 2^64, the request is refused with a clear error and the
//! connection goes on.

use std::sync::Arc;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{ErrorCode, Features};
use sluice_storage::{BlockDevice, MemDevice};
use sluice_testkit::raw_obj::*;
use sluice_testkit::test_server::TestServer;
use tempfile::TempDir;

fn start() -> (TestServer, TempDir, Arc<MemDevice>) {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(MemDevice::new(1 << 20, false));
    let server = TestServer::builder()
        .export("disk", Arc::clone(&disk) as Arc<dyn BlockDevice>)
        .objects(dir.path().join("objects"))
        .start();
    (server, dir, disk)
}

const M: u64 = (1 << 16) + 7;

#[test]
fn an_sgl_at_a_master_offset_writes_and_reads_the_absolute_bytes() {
    let (server, _dir, _) = start();
    let mut c = RawObjClient::open(server.obj_addr.unwrap(), Features::NEGOTIABLE, 1);
    let id = c.create(1, "")[0];
    // Entries relative to M, out of order and with holes.
    let rel = [(100, 3), (0, 4), (50, 2)];
    c.call(
        &Req::new(OP_WRITE, 1)
            .object(id)
            .sgl(&rel)
            .master(M)
            .data(b"CCCaaaaBB"),
    )
    .ok();
    // A contiguous read of the absolute range sees them at M + offset.
    let (data, real) = c.read(id, M, 103);
    assert_eq!(real, 103);
    assert_eq!(&data[..4], b"aaaa");
    assert_eq!(&data[50..52], b"BB");
    assert_eq!(&data[100..103], b"CCC");
    assert!(data[4..50].iter().all(|&b| b == 0));
    // Nothing landed at the relative offsets themselves.
    let (low, _) = c.read(id, 0, 104);
    assert!(low.iter().all(|&b| b == 0), "bytes written below M");
    // The same list read back at M; and as absolute entries at master 0.
    let r = c
        .call(&Req::new(OP_READ, 2).object(id).sgl(&rel).master(M))
        .ok();
    assert_eq!((r.body.as_slice(), r.real), (&b"CCCaaaaBB"[..], 9));
    let abs: Vec<(u64, u64)> = rel.iter().map(|&(o, l)| (M + o, l)).collect();
    let r = c.call(&Req::new(OP_READ, 3).object(id).sgl(&abs)).ok();
    assert_eq!(r.body, b"CCCaaaaBB");
    // A span reply (ascending, dense, large enough to be sent from the
    // object's file) from the master offset.
    let dense: Vec<(u64, u64)> = (0..64).map(|i| (i * 4097, 4096)).collect();
    let object: Vec<u8> = (0..64 * 4097).map(|i| (i % 251) as u8).collect();
    c.write(id, M, &object);
    let r = c
        .call(
            &Req::new(OP_READ, 4)
                .object(id)
                .sgl(&dense)
                .master(M)
                .flags(FLAG_SPAN_OK),
        )
        .ok();
    assert!(r.span);
    assert!(r.body == object[..63 * 4097 + 4096], "the span from M");
}

#[test]
fn an_sgl_at_a_master_offset_addresses_an_exports_extents() {
    let (server, _dir, disk) = start();
    let mut c = RawObjClient::connect(server.obj_addr.unwrap());
    c.hello(Features::NEGOTIABLE).unwrap();
    let (h, _, _) = c.attach("disk").unwrap();
    c.select(1).unwrap();
    c.call(
        &Req::new(OP_EXTENT_WRITE, 1)
            .object(h)
            .sgl(&[(8, 2), (0, 3)])
            .master(4096)
            .data(b"xxYYY"),
    )
    .ok();
    let mut got = [0u8; 10];
    disk.read_at(&mut got, 4096).unwrap();
    assert_eq!(&got, b"YYY\0\0\0\0\0xx");
    // Past the export's end counts from the master offset too.
    let msg = c
        .call(
            &Req::new(OP_EXTENT_READ, 2)
                .object(h)
                .sgl(&[(4094, 4)])
                .master((1 << 20) - 4096),
        )
        .err(ErrorCode::OutOfRange);
    assert!(msg.contains("disk"), "{msg}");
}

#[test]
fn without_the_feature_or_past_2_64_a_master_offset_is_refused() {
    let (server, _dir, _) = start();
    let without = Features::NEGOTIABLE.without(Features::SGL_MASTER);
    let mut c = RawObjClient::open(server.obj_addr.unwrap(), without, 1);
    let id = c.create(1, "")[0];
    let msg = c
        .call(&Req::new(OP_READ, 1).object(id).sgl(&[(0, 4)]).master(M))
        .err(ErrorCode::NotNegotiated);
    assert!(msg.contains("master offset"), "{msg}");
    // Master offset 0 is the SGL it always was.
    c.write(id, 10, b"abc");
    let r = c
        .call(&Req::new(OP_READ, 2).object(id).sgl(&[(11, 2), (10, 1)]))
        .ok();
    assert_eq!(r.body, b"bca");

    let mut c = RawObjClient::open(server.obj_addr.unwrap(), Features::NEGOTIABLE, 1);
    let msg = c
        .call(
            &Req::new(OP_READ, 3)
                .object(id)
                .sgl(&[(1, 1)])
                .master(u64::MAX),
        )
        .err(ErrorCode::BadDdt);
    assert!(msg.contains("past 2^64"), "{msg}");
    c.write(id, 0, b"alive");
    assert_eq!(c.read(id, 0, 5).0, b"alive");
}
