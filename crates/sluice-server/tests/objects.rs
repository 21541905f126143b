#![allow(clippy::unwrap_used)]
//! The native object protocol end to end, in process: a real `Server`
//! with an object store in a temporary directory (and NBD exports for
//! the extent commands), driven by the test kit's raw object client.

use std::sync::Arc;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{AttrOp, AttrValue, ErrorCode, Features};
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
