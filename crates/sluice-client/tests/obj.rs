#![allow(clippy::unwrap_used)]
//! The object client against a real in-process sluice server with an
//! object store: every command, DDT choice and splitting past the
//! server's published limits checked against an in-memory model, batches
//! with a bad member, and the errors callers match on.

use sluice_client::obj::{
    open_range, AttrChange, DataOptions, ErrorCode, Features, FlushScope, ObjClient, ObjError,
    ObjOptions, ObjRequest, ObjResponse, Range, Segment, Value, DEFAULT_PARTITION,
};
use sluice_client::Durability;
use sluice_client::ObjUri;
use sluice_testkit::test_server::TestServer;

mod relay;
use relay::Relay;

struct Fixture {
    server: TestServer,
    _dir: tempfile::TempDir,
}

fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .metrics()
        .start();
    Fixture { server, _dir: dir }
}

impl Fixture {
    fn uri(&self) -> ObjUri {
        self.server.obj_uri().parse().unwrap()
    }

    fn client(&self) -> ObjClient {
        ObjClient::connect(&self.uri(), &ObjOptions::default()).unwrap()
    }
}

fn seg(offset: u64, length: u64) -> Segment {
    Segment { offset, length }
}

/// A READ of `object` for each list of segments, in order.
fn reads<'a>(object: u64, lists: impl IntoIterator<Item = &'a [Segment]>) -> Vec<ObjRequest<'a>> {
    lists
        .into_iter()
        .map(|segments| ObjRequest::Read {
            object,
            segments,
            get: &[],
        })
        .collect()
}

/// Applies a write to the model the way the protocol defines it (bytes
/// in list order, later segments win).
fn model_write(model: &mut Vec<u8>, segments: &[Segment], data: &[u8]) {
    let mut at = 0;
    for s in segments {
        let end = (s.offset + s.length) as usize;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[s.offset as usize..end].copy_from_slice(&data[at..at + s.length as usize]);
        at += s.length as usize;
    }
}

fn model_read(model: &[u8], segments: &[Segment]) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut real = 0;
    for s in segments {
        for i in s.offset..s.offset + s.length {
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

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (sluice_types::splitmix64(seed ^ i) & 0xff) as u8)
        .collect()
}

#[test]
fn every_command_round_trips() {
    let f = start();
    let mut c = f.client();
    assert_eq!(c.session().partition, DEFAULT_PARTITION);

    let ids = c.create("c", 3, Durability::Buffered).unwrap();
    assert_eq!(ids.len(), 3);
    let (a, b) = (ids[0], ids[1]);

    // SGL write (out of order, overlapping), strided and contiguous reads.
    let mut model = Vec::new();
    let segs = [seg(100, 10), seg(0, 4), seg(105, 10)];
    let data = pattern(1, 24);
    c.write(a, &segs, &data, &DataOptions::default()).unwrap();
    model_write(&mut model, &segs, &data);
    for read in [
        vec![seg(0, 120)],
        vec![seg(0, 2), seg(10, 2), seg(20, 2), seg(30, 2)],
        vec![seg(110, 20), seg(1, 1)],
    ] {
        let r = c.read(a, &read).unwrap();
        let (want, real) = model_read(&model, &read);
        assert_eq!(r.data, want, "{read:?}");
        assert_eq!(r.real_bytes, real, "{read:?}");
    }

    // Attributes riding on data commands, both ways.
    let opts = DataOptions {
        durability: Durability::Durable,
        attrs: vec![AttrChange::set("kind", "log"), AttrChange::set("n", 1)],
    };
    let at = c.append(b, b"first", &opts).unwrap();
    assert_eq!(at, 0);
    assert_eq!(c.append(b, b" second", &DataOptions::default()).unwrap(), 5);
    let r = c
        .read_with(b, &[seg(0, 12)], &["kind", "sluice.length", "missing"])
        .unwrap();
    assert_eq!(r.data, b"first second");
    assert_eq!(r.attrs.get("kind"), Some(&Value::Text("log".into())));
    assert_eq!(r.attrs.get("sluice.length"), Some(&Value::Integer(12)));
    assert_eq!(r.attrs.get("missing"), None);
    assert!(r.attrs.0.iter().any(|(k, v)| k == "missing" && v.is_none()));

    // Create-and-write, punch, stat.
    let opts = DataOptions {
        durability: Durability::Buffered,
        attrs: vec![AttrChange::set("blob", vec![0u8, 1, 2])],
    };
    let d = c
        .create_and_write("c", &[seg(0, 8192)], &pattern(2, 8192), &opts)
        .unwrap();
    c.punch(d, &[seg(4096, 4096)], &DataOptions::default())
        .unwrap();
    let r = c.read(d, &[seg(4090, 10)]).unwrap();
    assert_eq!(&r.data[..6], &pattern(2, 8192)[4090..4096]);
    assert_eq!(&r.data[6..], &[0, 0, 0, 0]);
    assert_eq!(c.stat(d).unwrap().length, 8192);
    assert_eq!(
        c.get_attrs(d, &["blob"]).unwrap().get("blob"),
        Some(&Value::Bytes(vec![0, 1, 2]))
    );

    // Truncate: shorter, then longer again; the cut bytes read as zeros.
    c.truncate(d, 100, Durability::Buffered).unwrap();
    assert_eq!(c.stat(d).unwrap().length, 100);
    c.truncate(d, 200, Durability::Durable).unwrap();
    let r = c.read(d, &[seg(0, 200)]).unwrap();
    assert_eq!(&r.data[..100], &pattern(2, 8192)[..100]);
    assert!(r.data[100..].iter().all(|&b| b == 0));
    assert_eq!(wait_requests(&f.server, "truncate", "contiguous", 2), 2);

    // An object and three attributes in one request, no data.
    let three = DataOptions {
        durability: Durability::Buffered,
        attrs: vec![
            AttrChange::set("x", 1),
            AttrChange::set("y", "two"),
            AttrChange::set("z", vec![3u8]),
        ],
    };
    let e = c.create_and_write("", &[], &[], &three).unwrap();
    let attrs = c.get_attrs(e, &["x", "y", "z"]).unwrap();
    assert_eq!(attrs.values().count(), 3, "{attrs:?}");
    assert_eq!(c.stat(e).unwrap().length, 0);

    // Set, remove, list with attributes, query.
    for (i, id) in ids.iter().enumerate() {
        c.set_attrs(
            *id,
            &[AttrChange::set("rank", i as i64)],
            Durability::Buffered,
        )
        .unwrap();
    }
    c.set_attrs(a, &[AttrChange::Remove("rank".into())], Durability::Durable)
        .unwrap();
    assert_eq!(c.get_attrs(a, &["rank"]).unwrap().get("rank"), None);
    let listed = c.list("c", Some(&["rank"])).unwrap();
    let mut got: Vec<u64> = listed.iter().map(|e| e.object).collect();
    got.sort_unstable();
    let mut want = vec![ids[0], ids[1], ids[2], d];
    want.sort_unstable();
    assert_eq!(got, want);
    let ranked = listed.iter().find(|e| e.object == ids[2]).unwrap();
    assert_eq!(ranked.attrs.get("rank"), Some(&Value::Integer(2)));
    let hits = c
        .query("c", &[open_range("rank", Value::Integer(1), true, 8)])
        .unwrap();
    let mut hits: Vec<u64> = hits.iter().map(|e| e.object).collect();
    hits.sort_unstable();
    assert_eq!(hits, vec![ids[1], ids[2]]);
    let exact = c
        .query(
            "c",
            &[Range {
                key: "rank".into(),
                min: Value::Integer(2),
                max: Value::Integer(2),
            }],
        )
        .unwrap();
    assert_eq!(exact.len(), 1);

    // Flush at every scope.
    c.flush(FlushScope::Object(a)).unwrap();
    c.flush(FlushScope::Collection("c")).unwrap();
    c.flush(FlushScope::Partition).unwrap();

    // Remove; the object is then unknown, and the error says which.
    c.remove(ids[2], Durability::Durable).unwrap();
    let e = c.read(ids[2], &[seg(0, 1)]).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NoSuchObject));
    assert!(e.is_not_found());
    assert!(e.to_string().contains(&format!("object {}", ids[2])), "{e}");
    // The connection is still usable after a refusal.
    assert_eq!(c.read(a, &[seg(0, 4)]).unwrap().data, model[..4]);
}

#[test]
fn requests_past_the_published_limits_are_split_transparently() {
    let f = start();
    let mut c = f.client();
    let limits = c.session().limits;
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];

    // More segments than one request may carry, irregular (SGL) and
    // overlapping across the cut: the later bytes must still win.
    let n = limits.max_segments as u64 * 2 + 17;
    let mut segs: Vec<Segment> = (0..n).map(|i| seg(i * 7 + (i % 3), 3)).collect();
    // Overlaps the first piece from the second: the pieces must go in
    // order.
    segs.insert(limits.max_segments as usize + 10, seg(0, 5));
    let total: u64 = segs.iter().map(|s| s.length).sum();
    let data = pattern(3, total as usize);
    c.write(id, &segs, &data, &DataOptions::default()).unwrap();
    let mut model = Vec::new();
    model_write(&mut model, &segs, &data);
    let all = [seg(0, model.len() as u64 + 100)];
    let r = c.read(id, &all).unwrap();
    assert_eq!(r.data, model_read(&model, &all).0);
    assert_eq!(r.real_bytes, model.len() as u64);

    // A strided read of more segments than the limit.
    let strided: Vec<Segment> = (0..n).map(|i| seg(i * 5, 2)).collect();
    let r = c.read(id, &strided).unwrap();
    let (want, real) = model_read(&model, &strided);
    assert_eq!(r.data, want);
    assert_eq!(r.real_bytes, real);

    // One contiguous write longer than the maximum payload.
    let big = pattern(4, limits.max_payload as usize + 100_000);
    let big_id = c
        .create_and_write(
            "",
            &[seg(0, big.len() as u64)],
            &big,
            &DataOptions::default(),
        )
        .unwrap();
    assert_eq!(c.stat(big_id).unwrap().length, big.len() as u64);
    let r = c.read(big_id, &[seg(0, big.len() as u64)]).unwrap();
    assert!(r.data == big, "a split create-and-write reads back whole");
    let at = c.append(big_id, &big, &DataOptions::default()).unwrap();
    assert_eq!(at, big.len() as u64);
    let r = c
        .read(big_id, &[seg(at + 7, limits.max_payload as u64)])
        .unwrap();
    assert!(r.data == big[7..7 + limits.max_payload as usize]);

    // More objects than one CREATE may make.
    let ids = c
        .create("many", limits.max_segments + 3, Durability::Buffered)
        .unwrap();
    assert_eq!(ids.len(), limits.max_segments as usize + 3);
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len());
    assert_eq!(c.list("many", None).unwrap().len(), ids.len());
}

/// A write cut into pieces sends them all before it waits for a reply:
/// the relay holds every reply back until the client has sent the whole
/// payload, which a client that waited on the first pieces before
/// sending the last never does (its request then times out). Attributes
/// ride on the last piece, which does wait for the others.
#[test]
fn the_pieces_of_a_long_write_go_out_before_any_reply() {
    let f = start();
    let relay = Relay::start(f.server.obj_addr.expect("object address"));
    let options = ObjOptions {
        request_timeout: Some(std::time::Duration::from_secs(5)),
        ..ObjOptions::default()
    };
    let mut c = ObjClient::connect(&relay.uri.parse().unwrap(), &options).unwrap();
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
    // Three pieces of 8-byte blocks behind 2-byte holes.
    let n = u64::from(c.session().limits.max_segments) * 3;
    let segs: Vec<Segment> = (0..n).map(|i| seg(i * 10, 8)).collect();
    let data = pattern(9, (n * 8) as usize);
    relay.hold_replies_until_sent(n * 8);
    c.write(id, &segs, &data, &DataOptions::default())
        .expect("every piece sent before the first reply");
    let r = c.read(id, &segs).unwrap();
    assert!(r.data == data, "the blocks read back");
    // With an attribute the last piece waits for the others' replies.
    let tagged = DataOptions {
        attrs: vec![AttrChange::set("tag", 1)],
        ..DataOptions::default()
    };
    c.write(id, &segs, &data, &tagged).unwrap();
    assert_eq!(
        c.get_attrs(id, &["tag"]).unwrap().get("tag"),
        Some(&Value::Integer(1))
    );
}

#[test]
fn a_batch_answers_each_member_and_a_bad_one_fails_alone() {
    batch_case(Features::NEGOTIABLE);
}

#[test]
fn without_batch_frames_a_batch_is_pipelined_requests() {
    batch_case(Features::ATTRS_ON_DATA);
}

#[test]
fn attributes_on_data_need_the_feature() {
    let f = start();
    let options = ObjOptions {
        features: Features::default(),
        ..ObjOptions::default()
    };
    let mut c = ObjClient::connect(&f.uri(), &options).unwrap();
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
    let opts = DataOptions {
        durability: Durability::Buffered,
        attrs: vec![AttrChange::set("k", 1)],
    };
    let e = c.write(id, &[seg(0, 2)], b"ab", &opts).unwrap_err();
    assert!(matches!(e, ObjError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("not negotiated"), "{e}");
    let e = c.read_with(id, &[seg(0, 2)], &["k"]).unwrap_err();
    assert!(matches!(e, ObjError::Refused { .. }), "{e}");
    // Without attributes, and attributes on their own, work.
    c.write(id, &[seg(0, 2)], b"ab", &DataOptions::default())
        .unwrap();
    c.set_attrs(id, &opts.attrs, Durability::Buffered).unwrap();
    assert_eq!(
        c.get_attrs(id, &["k"]).unwrap().get("k"),
        Some(&Value::Integer(1))
    );
}

fn batch_case(features: Features) {
    let f = start();
    let options = ObjOptions {
        features,
        ..ObjOptions::default()
    };
    let mut c = ObjClient::connect(&f.uri(), &options).unwrap();
    assert_eq!(
        c.session().features.contains(Features::BATCH),
        features.contains(Features::BATCH)
    );
    let limits = c.session().limits;
    let n = limits.max_batch as usize * 2 + 5;
    let ids = c.create("b", n as u32, Durability::Buffered).unwrap();
    let data: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u64, 64 + i)).collect();
    let opts = DataOptions {
        durability: Durability::Buffered,
        attrs: vec![AttrChange::set("tag", "batched")],
    };
    let segs: Vec<[Segment; 1]> = data.iter().map(|d| [seg(0, d.len() as u64)]).collect();
    let mut reqs: Vec<ObjRequest<'_>> = ids
        .iter()
        .zip(&data)
        .zip(&segs)
        .map(|((id, d), s)| ObjRequest::Write {
            object: *id,
            segments: s,
            data: d,
            options: &opts,
        })
        .collect();
    // One member names no object.
    let bad = [seg(0, 3)];
    reqs.insert(
        7,
        ObjRequest::Write {
            object: u64::MAX - 1,
            segments: &bad,
            data: b"bad",
            options: &opts,
        },
    );
    let results = c.batch(&reqs);
    assert_eq!(results.len(), reqs.len());
    for (i, r) in results.iter().enumerate() {
        if i == 7 {
            let e = r.as_ref().unwrap_err();
            assert_eq!(e.code(), Some(ErrorCode::NoSuchObject), "{e}");
            assert!(e.to_string().contains(&format!("object {}", u64::MAX - 1)));
        } else {
            assert_eq!(r.as_ref().unwrap(), &ObjResponse::Done);
        }
    }
    // Read everything back pipelined, attributes with the data.
    let reads: Vec<ObjRequest<'_>> = ids
        .iter()
        .zip(&segs)
        .map(|(id, s)| ObjRequest::Read {
            object: *id,
            segments: s,
            get: &["tag"],
        })
        .collect();
    for (r, d) in c.pipeline(&reads).into_iter().zip(&data) {
        match r.unwrap() {
            ObjResponse::Read(r) => {
                assert_eq!(&r.data, d);
                assert_eq!(r.attrs.get("tag"), Some(&Value::Text("batched".into())));
            }
            other => panic!("{other:?}"),
        }
    }
    let removed = c.remove_many(&ids, Durability::Buffered);
    assert!(removed.iter().all(Result::is_ok));
}

#[test]
fn bad_input_is_refused_before_sending_or_by_the_server() {
    let f = start();
    let mut c = f.client();
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
    // Data shorter than the segments: refused locally, naming the object.
    let e = c
        .write(id, &[seg(0, 10)], b"short", &DataOptions::default())
        .unwrap_err();
    assert!(matches!(e, ObjError::Refused { .. }), "{e}");
    assert!(e.to_string().contains(&format!("object {id}")), "{e}");
    // A segment ending past 2^64.
    let e = c.read(id, &[seg(u64::MAX, 2)]).unwrap_err();
    assert!(matches!(e, ObjError::Refused { .. }), "{e}");
    // An attribute over the published size limit.
    let big = vec![0u8; c.session().limits.max_attr_size as usize + 1];
    let e = c
        .set_attrs(id, &[AttrChange::set("big", big)], Durability::Buffered)
        .unwrap_err();
    assert!(e.to_string().contains("big"), "{e}");
    // Text that reads as a number stays text (and is found as text).
    c.set_attrs(id, &[AttrChange::set("code", "42")], Durability::Buffered)
        .unwrap();
    assert_eq!(
        c.get_attrs(id, &["code"]).unwrap().get("code"),
        Some(&Value::Text("42".into()))
    );
    // The server's own keys are the server's.
    let e = c
        .set_attrs(
            id,
            &[AttrChange::set("sluice.length", 1)],
            Durability::Buffered,
        )
        .unwrap_err();
    assert!(e.code().is_some(), "{e}");
    // Still usable.
    c.write(id, &[seg(0, 2)], b"ok", &DataOptions::default())
        .unwrap();
    assert_eq!(c.read(id, &[seg(0, 2)]).unwrap().data, b"ok");
}

#[test]
fn an_unknown_partition_is_refused_in_the_handshake() {
    let f = start();
    let uri = f.uri().with_partition(0xdead);
    let e = ObjClient::connect(&uri, &ObjOptions::default()).unwrap_err();
    assert!(matches!(e, ObjError::Handshake { .. }), "{e}");
}

#[test]
fn sluices_uris_run_the_protocol_over_tls_with_a_client_certificate() {
    use sluice_server::TlsMode;
    use sluice_testkit::pki::Pki;

    let pki = Pki::shared();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| {
            c.tls.mode = TlsMode::Require;
            c.tls.certificates = Some(pki.server());
            c.tls.verify_peer = true;
        })
        .start();
    let addr = server.obj_addr.unwrap();
    let uri: ObjUri = format!(
        "sluices://{addr}?tls-certificates={}",
        pki.client("client1").display()
    )
    .parse()
    .unwrap();
    let mut c = ObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    assert!(c.session().tls);
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
    c.write(id, &[seg(0, 5)], b"hello", &DataOptions::default())
        .unwrap();
    assert_eq!(c.read(id, &[seg(0, 5)]).unwrap().data, b"hello");

    // Plaintext to a server that requires TLS: refused, saying how.
    let plain: ObjUri = format!("sluice://{addr}").parse().unwrap();
    let e = ObjClient::connect(&plain, &ObjOptions::default()).unwrap_err();
    let e = sluice_types::error_chain(&e);
    assert!(e.contains("sluices://"), "{e}");
    // A CA the client does not trust: the TLS handshake fails.
    let untrusted: ObjUri = format!(
        "sluices://{addr}?tls-certificates={}",
        pki.client("untrusted").display()
    )
    .parse()
    .unwrap();
    let e = ObjClient::connect(&untrusted, &ObjOptions::default()).unwrap_err();
    assert!(matches!(e, ObjError::Transport(_)), "{e}");
}

#[test]
fn a_silent_server_times_out_the_handshake() {
    // A listener that accepts and never sends a greeting.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let uri: ObjUri = format!("sluice://{addr}").parse().unwrap();
    let options = ObjOptions {
        connect_timeout: std::time::Duration::from_millis(300),
        ..ObjOptions::default()
    };
    let began = std::time::Instant::now();
    let e = ObjClient::connect(&uri, &options).unwrap_err();
    assert!(e.is_temporary(), "{e}");
    assert!(e.to_string().contains(&addr.to_string()), "{e}");
    assert!(began.elapsed() < std::time::Duration::from_secs(5));
    drop(listener);
}

/// `sluice_obj_requests_total{command=..., ddt=...}` from the server.
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
fn the_client_picks_the_ddt_and_the_number_of_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .metrics()
        .start();
    let uri: ObjUri = server.obj_uri().parse().unwrap();
    let mut c = ObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let max = c.session().limits.max_segments as u64;
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
    c.write(
        id,
        &[seg(0, 1 << 16)],
        &pattern(9, 1 << 16),
        &DataOptions::default(),
    )
    .unwrap();
    let before = |ddt| requests(&server, "read", ddt);
    let (c0, s0, t0) = (before("contiguous"), before("sgl"), before("strided"));

    // Neighbours in order are one contiguous segment.
    c.read(id, &[seg(0, 10), seg(10, 10), seg(20, 5)]).unwrap();
    assert_eq!(wait_requests(&server, "read", "contiguous", c0 + 1), c0 + 1);
    // A constant stride is strided; an irregular list is an SGL.
    c.read(id, &[seg(0, 4), seg(100, 4), seg(200, 4)]).unwrap();
    assert_eq!(wait_requests(&server, "read", "strided", t0 + 1), t0 + 1);
    c.read(id, &[seg(200, 4), seg(0, 4)]).unwrap();
    assert_eq!(wait_requests(&server, "read", "sgl", s0 + 1), s0 + 1);
    // 2 x max + 1 strided segments: three requests, two strided and a
    // last piece of one segment, which is contiguous.
    let many: Vec<Segment> = (0..2 * max + 1).map(|i| seg(i * 3, 1)).collect();
    let r = c.read(id, &many).unwrap();
    assert_eq!(r.data.len() as u64, 2 * max + 1);
    assert_eq!(wait_requests(&server, "read", "strided", t0 + 3), t0 + 3);
    assert_eq!(wait_requests(&server, "read", "contiguous", c0 + 2), c0 + 2);
    assert_eq!(requests(&server, "read", "sgl"), s0 + 1);
}

/// `ObjOptions::ddt` pins the DDT: one segment goes as an SGL or a
/// strided request, a regular list as an SGL; what the pin cannot
/// describe (an irregular list as strided) keeps the client's pick; the
/// bytes are the same whichever way they travel.
#[test]
fn a_pinned_ddt_goes_on_the_wire_as_pinned() {
    use sluice_client::obj::DdtKind;

    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .metrics()
        .start();
    let uri: ObjUri = server.obj_uri().parse().unwrap();
    let pinned = |ddt| {
        let options = ObjOptions {
            ddt: Some(ddt),
            ..ObjOptions::default()
        };
        ObjClient::connect(&uri, &options).unwrap()
    };
    let (mut sgl, mut strided) = (pinned(DdtKind::Sgl), pinned(DdtKind::Strided));
    let data = pattern(3, 4096);
    let id = sgl.create("", 1, Durability::Buffered).unwrap()[0];
    let count = |ddt| requests(&server, "write", ddt) + requests(&server, "read", ddt);
    let (c0, s0, t0) = (count("contiguous"), count("sgl"), count("strided"));

    let one = [seg(0, 4096)];
    sgl.write(id, &one, &data, &DataOptions::default()).unwrap();
    assert_eq!(sgl.read(id, &one).unwrap().data, data);
    assert_eq!(wait_requests(&server, "write", "sgl", 1), 1);
    assert_eq!(wait_requests(&server, "read", "sgl", 1), 1);
    assert_eq!(count("sgl"), s0 + 2);
    assert_eq!(strided.read(id, &one).unwrap().data, data);
    assert_eq!(wait_requests(&server, "read", "strided", 1), 1);
    // A regular list as an SGL; an irregular one stays an SGL when
    // strided is pinned.
    let regular = [seg(0, 8), seg(10, 8), seg(20, 8)];
    let r = sgl.read(id, &regular).unwrap().data;
    assert_eq!(r, [&data[0..8], &data[10..18], &data[20..28]].concat());
    let irregular = [seg(20, 8), seg(0, 8)];
    let r = strided.read(id, &irregular).unwrap().data;
    assert_eq!(r, [&data[20..28], &data[0..8]].concat());
    assert_eq!(wait_requests(&server, "read", "sgl", 3), 3);
    assert_eq!(count("strided"), t0 + 1);
    assert_eq!(count("contiguous"), c0);
}

mod model {
    use super::*;
    use proptest::prelude::*;

    fn segments(max_off: u64) -> impl Strategy<Value = Vec<Segment>> {
        prop::collection::vec((0..max_off, 1u64..200), 1..40)
            .prop_map(|v| v.into_iter().map(|(o, l)| seg(o, l)).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Random segment lists (overlaps, holes, past the end) written
        /// and read through the client and a real server agree with an
        /// in-memory model of the object, whatever DDT the client picked.
        #[test]
        fn random_writes_and_reads_match_a_model(
            ops in prop::collection::vec((any::<bool>(), segments(5000), any::<u64>()), 1..12),
        ) {
            let f = start();
            let mut c = f.client();
            let id = c.create("", 1, Durability::Buffered).unwrap()[0];
            let mut model = Vec::new();
            for (write, segs, seed) in ops {
                let total: u64 = segs.iter().map(|s| s.length).sum();
                if write {
                    let data = pattern(seed, total as usize);
                    c.write(id, &segs, &data, &DataOptions::default()).unwrap();
                    model_write(&mut model, &segs, &data);
                } else {
                    let r = c.read(id, &segs).unwrap();
                    let (want, real) = model_read(&model, &segs);
                    prop_assert_eq!(r.data, want);
                    prop_assert_eq!(r.real_bytes, real);
                }
            }
            prop_assert_eq!(c.stat(id).unwrap().length, model.len() as u64);
        }
    }
}

#[test]
fn extents_of_an_attached_export_read_and_write_as_one_request() {
    use std::sync::Arc;

    use sluice_storage::{BlockDevice, MemDevice};

    let dir = tempfile::tempdir().unwrap();
    let size = 64u64 << 20;
    let disk: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(size, false));
    let server = TestServer::builder()
        .export("disk", disk.clone())
        .objects(dir.path().join("objects"))
        .start();
    let uri: ObjUri = server.obj_uri().parse().unwrap();
    let options = ObjOptions {
        exports: vec!["disk".into()],
        ..ObjOptions::default()
    };
    let mut c = ObjClient::connect(&uri, &options).unwrap();
    let export = c.exports()[0].clone();
    assert_eq!((export.name.as_str(), export.size), ("disk", size));

    // Scattered extents, then one longer than a request may carry.
    let mut model = vec![0u8; size as usize];
    let segs = [seg(1 << 20, 100), seg(5, 10), seg(3 << 20, 4096)];
    let data = pattern(21, 4206);
    c.extent_write(export.handle, &segs, &data, Durability::Buffered)
        .unwrap();
    model_write(&mut model, &segs, &data);
    let big = pattern(22, c.session().limits.max_payload as usize + 12345);
    let big_seg = [seg(8 << 20, big.len() as u64)];
    c.extent_write(export.handle, &big_seg, &big, Durability::Durable)
        .unwrap();
    model_write(&mut model, &big_seg, &big);
    let strided: Vec<Segment> = (0..1000).map(|i| seg(i * 4096, 7)).collect();
    for read in [segs.to_vec(), strided, big_seg.to_vec()] {
        let r = c.extent_read(export.handle, &read).unwrap();
        let (want, real) = model_read(&model, &read);
        assert!(r.data == want);
        assert_eq!(r.real_bytes, real);
    }
    // The device holds them (the server wrote through to it).
    let mut buf = vec![0u8; 10];
    disk.read_at(&mut buf, 5).unwrap();
    assert_eq!(buf, data[100..110]);
    // Past the end of the export: refused, naming the export.
    let e = c
        .extent_read(export.handle, &[seg(size - 1, 2)])
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::OutOfRange), "{e}");
    assert!(e.to_string().contains("\"disk\""), "{e}");
}

#[test]
fn the_default_partition_is_the_one_the_server_always_has() {
    assert_eq!(DEFAULT_PARTITION, sluice_server::DEFAULT_PARTITION);
}

#[test]
fn large_reads_are_received_into_buffers_handed_back() {
    let f = start();
    let mut c = f.client();
    let mib = 1u64 << 20;
    let data = pattern(9, 4 * mib as usize);
    let id = c
        .create_and_write("", &[seg(0, 4 * mib)], &data, &DataOptions::default())
        .unwrap();
    let first = c.read(id, &[seg(0, mib)]).unwrap().data;
    assert!(first == data[..mib as usize]);
    let at = first.as_ptr();
    c.recycle(first);
    // Pipelined large reads with small ones between them (whose replies
    // are read whole into the receive buffer): every byte right, and the
    // first large body lands in the buffer handed back.
    let segs: Vec<[Segment; 1]> = (0..8u64)
        .map(|i| {
            if i % 2 == 0 {
                [seg(i * mib / 2, mib)]
            } else {
                [seg(i * 1000, 100)]
            }
        })
        .collect();
    let reqs = reads(id, segs.iter().map(|s| &s[..]));
    let mut reused = false;
    for (r, s) in c.pipeline(&reqs).into_iter().zip(&segs) {
        let ObjResponse::Read(r) = r.unwrap() else {
            panic!("a read answered otherwise");
        };
        let (from, len) = (s[0].offset as usize, s[0].length as usize);
        assert!(r.data == data[from..from + len], "bytes of {s:?} differ");
        reused |= r.data.as_ptr() == at;
    }
    assert!(reused, "no reply was received into the buffer handed back");
    // A buffer smaller than a large body is not kept; reads still work.
    c.recycle(vec![1u8; 10]);
    assert!(c.read(id, &[seg(0, mib)]).unwrap().data == data[..mib as usize]);
}

/// `sluice_obj_span_reads_total` from the server.
fn span_reads(server: &TestServer) -> u64 {
    server
        .scrape()
        .lines()
        .find_map(|l| l.strip_prefix("sluice_obj_span_reads_total ")?.parse().ok())
        .unwrap_or(0)
}

/// Large reads of ascending blocks with small holes between them ask for
/// a span reply and get one (sent from the object's file), and the
/// caller sees the blocks' bytes in list order, whether pipelined with
/// small reads or read into a buffer handed back; the shared client does
/// not ask, and reads the same bytes in list order.
#[test]
fn dense_list_reads_come_back_as_spans_in_list_order() {
    use sluice_client::obj::SharedObjClient;

    let f = start();
    let server = &f.server;
    let mut c = f.client();
    assert!(c.session().features.contains(Features::SPAN_READS));
    let mib = 1usize << 20;
    let data = pattern(21, 2 * mib);
    let id = c
        .create_and_write(
            "",
            &[seg(0, 2 * mib as u64)],
            &data,
            &DataOptions::default(),
        )
        .unwrap();
    let model = |segments: &[Segment]| model_read(&data, segments).0;
    // The server sends from the file only what it has the object's state
    // cached for, which a first read (not the create) loads.
    assert!(c.read(id, &[seg(0, 1)]).unwrap().data == data[..1]);
    // Strided: 256 blocks of 4 KiB behind 2-byte holes. SGL: 100 blocks
    // of 3,000 bytes behind holes of 1 to 9 bytes, from 7.
    let strided: Vec<Segment> = (0..256u64).map(|i| seg(i * 4098, 4096)).collect();
    let mut at = 7;
    let sgl: Vec<Segment> = (0..100u64)
        .map(|i| {
            let s = seg(at, 3000);
            at += 3000 + 1 + i % 9;
            s
        })
        .collect();
    let before = span_reads(server);
    let r = c.read(id, &strided).unwrap();
    assert!(r.data == model(&strided), "strided bytes differ");
    assert_eq!(r.real_bytes, 256 * 4096);
    c.recycle(r.data);
    let r = c.read(id, &sgl).unwrap();
    assert!(r.data == model(&sgl), "SGL bytes differ");
    let small = [seg(5, 10)];
    let lists: [&[Segment]; 4] = [&strided, &small, &sgl, &small];
    let reqs = reads(id, lists);
    for (r, s) in c.pipeline(&reqs).into_iter().zip(lists) {
        let ObjResponse::Read(r) = r.unwrap() else {
            panic!("a read answered otherwise");
        };
        assert!(r.data == model(s), "pipelined bytes differ");
    }
    assert_eq!(span_reads(server), before + 4, "each large list was a span");

    let shared = SharedObjClient::connect(&f.uri(), &ObjOptions::default()).unwrap();
    assert!(shared.read(id, &strided).unwrap().data == model(&strided));
    assert_eq!(
        span_reads(server),
        before + 4,
        "the shared client asks for none"
    );
}

/// Writes whose data is large go out from the caller's buffer rather
/// than a copy: alone, pipelined, and as members of a batch frame among
/// small ones, each lands whole and in place.
#[test]
fn large_writes_alone_pipelined_and_in_batch_frames_land_whole() {
    let f = start();
    let mut c = f.client();
    let mib = 1usize << 20;
    let ids = c.create("", 6, Durability::Buffered).unwrap();
    let big: Vec<Vec<u8>> = (0..6u64)
        .map(|k| pattern(k + 40, mib + k as usize * 3))
        .collect();
    let small = pattern(99, 100);
    c.write(
        ids[0],
        &[seg(5, big[0].len() as u64)],
        &big[0],
        &DataOptions::default(),
    )
    .unwrap();
    let opts = DataOptions::default();
    let big_segs: Vec<[Segment; 1]> = big.iter().map(|d| [seg(7, d.len() as u64)]).collect();
    // Past every large write: members of one frame run in parallel.
    let small_seg = [seg(2 * mib as u64, 100)];
    let reqs = |range: std::ops::Range<usize>| -> Vec<ObjRequest<'_>> {
        range
            .flat_map(|k| {
                [
                    ObjRequest::Write {
                        object: ids[k],
                        segments: &big_segs[k],
                        data: &big[k],
                        options: &opts,
                    },
                    ObjRequest::Write {
                        object: ids[k],
                        segments: &small_seg,
                        data: &small,
                        options: &opts,
                    },
                ]
            })
            .collect()
    };
    for r in c.pipeline(&reqs(1..3)) {
        r.unwrap();
    }
    for r in c.batch(&reqs(3..6)) {
        r.unwrap();
    }
    let got = c.read(ids[0], &[seg(5, big[0].len() as u64)]).unwrap().data;
    assert!(got == big[0], "the lone write differs");
    for k in 1..6 {
        let got = c.read(ids[k], &[seg(7, big[k].len() as u64)]).unwrap().data;
        assert!(got == big[k], "object {k}: large write differs");
        let got = c.read(ids[k], &small_seg).unwrap().data;
        assert!(got == small, "object {k}: small write differs");
    }
}
