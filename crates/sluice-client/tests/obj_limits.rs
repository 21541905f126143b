#![allow(clippy::unwrap_used)]
//! Limits configured in the server's `[objects]` (segments, payload,
//! batch members, attribute size) are what the handshake publishes, and
//! the client keeps to them: it splits what is larger, and the server,
//! which refuses anything past them, answers every piece.

use sluice_client::obj::{
    AttrChange, DataOptions, ObjClient, ObjError, ObjOptions, ObjRequest, ObjResponse, Segment,
    Value,
};
use sluice_client::Durability;
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
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
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
    assert_eq!(c.create("", 19, Durability::Buffered).unwrap().len(), 19);
    let reqs: Vec<ObjRequest<'_>> = (0..10)
        .map(|_| ObjRequest::Create {
            collection: "",
            count: 1,
            durability: Durability::Buffered,
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
    let e = c.set_attrs(id, &[long], Durability::Buffered).unwrap_err();
    assert!(!matches!(e, ObjError::Server { .. }), "{e:?}");
    assert!(e.to_string().contains("100"), "{e}");
    let fits = AttrChange::Set("k".into(), Value::Bytes(vec![1; 100]));
    c.set_attrs(id, &[fits], Durability::Buffered).unwrap();
}

/// The shared client cuts what the limits make several as `ObjClient`
/// does, from many threads at once on its one connection: the server
/// answers every piece (none is over its limits), the bytes land in
/// order, a split create makes every object, a split append and
/// create-and-write keep their data whole, and attributes set with a
/// split write arrive with it.
#[test]
fn the_shared_client_splits_what_the_limits_make_several() {
    use sluice_client::obj::SharedObjClient;

    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| {
            let o = c.objects.as_mut().unwrap();
            o.max_segments = Some(8);
            o.max_payload = Some(ByteSize(64 << 10));
        })
        .metrics()
        .start();
    let uri: ObjUri = server.obj_uri().parse().unwrap();
    let c = SharedObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let created = |count| match c.run(&ObjRequest::Create {
        collection: "",
        count,
        durability: Durability::Buffered,
    }) {
        Ok(ObjResponse::Created(ids)) => ids,
        other => panic!("CREATE answered {other:?}"),
    };

    // 19 objects: more than one CREATE of at most 8 makes.
    let ids = created(19);
    assert_eq!(ids.len(), 19);

    // Four threads each write 200 KiB (four pieces) with an attribute,
    // then read it back whole and in 20 irregular segments.
    let w0 = requests(&server, "write", "contiguous");
    std::thread::scope(|s| {
        for (k, &id) in ids.iter().take(4).enumerate() {
            let c = &c;
            s.spawn(move || {
                let data: Vec<u8> = (0..200u32 << 10)
                    .map(|i| (i % 251) as u8 ^ k as u8)
                    .collect();
                let options = DataOptions {
                    durability: Durability::Buffered,
                    attrs: vec![AttrChange::Set("k".into(), Value::Integer(k as i64))],
                };
                c.write(id, &[seg(0, data.len() as u64)], &data, &options)
                    .unwrap();
                let r = c.read(id, &[seg(0, data.len() as u64)]).unwrap();
                assert!(
                    r.data == data,
                    "thread {k}: a split read returns the bytes in order"
                );
                let segs: Vec<Segment> =
                    (0..20u64).map(|i| seg((i * i * 37) % 150_000, 9)).collect();
                let want: Vec<u8> = segs
                    .iter()
                    .flat_map(|s| data[s.offset as usize..(s.offset + s.length) as usize].to_vec())
                    .collect();
                assert_eq!(c.read(id, &segs).unwrap().data, want, "thread {k}");
                match c.run(&ObjRequest::GetAttrs {
                    object: id,
                    keys: &["k"],
                }) {
                    Ok(ObjResponse::Attrs(a)) => {
                        assert_eq!(a.get("k"), Some(&Value::Integer(k as i64)), "thread {k}")
                    }
                    other => panic!("GET_ATTRS answered {other:?}"),
                }
            });
        }
    });
    assert_eq!(
        wait_requests(&server, "write", "contiguous", w0 + 16),
        w0 + 16,
        "each write went as four pieces"
    );

    // An append and a create-and-write of 150 KiB: three pieces each.
    let data: Vec<u8> = (0..150u32 << 10).map(|i| (i % 241) as u8).collect();
    let plain = DataOptions::default();
    let at = match c.run(&ObjRequest::Append {
        object: ids[5],
        data: &data,
        options: &plain,
    }) {
        Ok(ObjResponse::Offset(at)) => at,
        other => panic!("APPEND answered {other:?}"),
    };
    assert_eq!(at, 0);
    let made = match c.run(&ObjRequest::CreateAndWrite {
        collection: "",
        segments: &[seg(0, data.len() as u64)],
        data: &data,
        options: &plain,
    }) {
        Ok(ObjResponse::Object(id)) => id,
        other => panic!("CREATE_AND_WRITE answered {other:?}"),
    };
    for id in [ids[5], made] {
        let r = c.read(id, &[seg(0, data.len() as u64)]).unwrap();
        assert!(r.data == data, "object {id} holds the data whole");
    }
}
