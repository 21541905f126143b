#![allow(clippy::unwrap_used)]
//! Limits configured in the server's `[objects]` (segments, payload,
//! batch members, attribute size) are what the handshake publishes, and
//! the client keeps to them: it splits what is larger, and the server,
//! which refuses anything past them, answers every piece.

use sluice_client::obj::{
    AttrChange, DataOptions, ObjClient, ObjError, ObjOptions, ObjRequest, ObjResponse, Segment,
    Value,
};
use sluice_client::ObjUri;
use sluice_server::ByteSize;
use sluice_testkit::test_server::TestServer;

fn seg(offset: u64, length: u64) -> Segment {
    Segment { offset, length }
}

fn requests(server: &TestServer, command: &str, ddt: &str) -> u64 {
    let prefix = format!("sluice_obj_requests_total{{command=\"{command}\",ddt=\"{ddt}\"}} ");
    server
        .scrape()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

/// The server counts a request just after its reply: wait for it.
fn wait_requests(server: &TestServer, command: &str, ddt: &str, want: u64) -> u64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = requests(server, command, ddt);
        if n >= want || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn configured_limits_are_published_and_obeyed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| {
            let o = c.objects.as_mut().unwrap();
            o.max_segments = Some(8);
            o.max_payload = Some(ByteSize(64 << 10));
            o.max_batch = Some(4);
            o.max_attr_size = Some(ByteSize(100));
        })
        .metrics()
        .start();
    let uri: ObjUri = server.obj_uri().parse().unwrap();
    let mut c = ObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let l = c.session().limits;
    assert_eq!(
        (l.max_segments, l.max_payload, l.max_batch, l.max_attr_size),
        (8, 64 << 10, 4, 100)
    );

    // 200 KiB in one call: four requests of at most 64 KiB.
    let id = c.create("", 1, false).unwrap()[0];
    let data: Vec<u8> = (0..200u32 << 10).map(|i| (i % 253) as u8).collect();
    let w0 = requests(&server, "write", "contiguous");
    c.write(
        id,
        &[seg(0, data.len() as u64)],
        &data,
        &DataOptions::default(),
    )
    .unwrap();
    assert_eq!(
        wait_requests(&server, "write", "contiguous", w0 + 4),
        w0 + 4
    );
    let r = c.read(id, &[seg(0, data.len() as u64)]).unwrap();
    assert!(r.data == data, "a split read returns the bytes in order");

    // 20 irregular segments: three SGL requests of at most 8.
    let segs: Vec<Segment> = (0..20u64).map(|i| seg((i * i * 37) % 150_000, 9)).collect();
    let s0 = requests(&server, "read", "sgl");
    let r = c.read(id, &segs).unwrap();
    assert_eq!(wait_requests(&server, "read", "sgl", s0 + 3), s0 + 3);
    let want: Vec<u8> = segs
        .iter()
        .flat_map(|s| data[s.offset as usize..(s.offset + s.length) as usize].to_vec())
        .collect();
    assert_eq!(r.data, want);

    // More objects than one CREATE may make, and a batch of ten (frames
    // of at most four members; the server refuses a larger frame whole).
    assert_eq!(c.create("", 19, false).unwrap().len(), 19);
    let reqs: Vec<ObjRequest<'_>> = (0..10)
        .map(|_| ObjRequest::Create {
            collection: "",
            count: 1,
            fua: false,
        })
        .collect();
    for r in c.batch(&reqs) {
        assert!(
            matches!(r, Ok(ObjResponse::Created(ref ids)) if ids.len() == 1),
            "{r:?}"
        );
    }

    // An attribute value over the published size is refused before it
    // is sent; one at the limit is kept.
    let long = AttrChange::Set("k".into(), Value::Bytes(vec![1; 101]));
    let e = c.set_attrs(id, &[long], false).unwrap_err();
    assert!(!matches!(e, ObjError::Server { .. }), "{e:?}");
    assert!(e.to_string().contains("100"), "{e}");
    let fits = AttrChange::Set("k".into(), Value::Bytes(vec![1; 100]));
    c.set_attrs(id, &[fits], false).unwrap();
}
