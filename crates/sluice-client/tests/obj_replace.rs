#![allow(clippy::unwrap_used)]
//! REPLACE_DATA through both clients against an in-process server: an
//! object takes another's bytes and length and keeps its attributes,
//! the source goes, each refusal has its status and names what failed,
//! a session without the feature is refused before anything changes,
//! and the server counts the command.

use sluice_client::obj::{
    AttrChange, DataOptions, ErrorCode, Features, ObjClient, ObjError, ObjOptions, Segment,
    SharedObjClient, Value,
};
use sluice_client::Durability;
use sluice_client::ObjUri;
use sluice_testkit::test_server::TestServer;

fn start() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| c.objects.as_mut().unwrap().partitions = vec![2])
        .metrics()
        .start();
    (server, dir)
}

fn uri(server: &TestServer, query: &str) -> ObjUri {
    format!("{}{query}", server.obj_uri()).parse().unwrap()
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
        .collect()
}

fn object_with(c: &mut ObjClient, data: &[u8]) -> u64 {
    let id = c.create("", 1, Durability::Buffered).unwrap()[0];
    c.write(
        id,
        &[Segment {
            offset: 0,
            length: data.len() as u64,
        }],
        data,
        &DataOptions::default(),
    )
    .unwrap();
    id
}

fn whole(c: &mut ObjClient, id: u64) -> Vec<u8> {
    let length = c.stat(id).unwrap().length;
    c.read(id, &[Segment { offset: 0, length }]).unwrap().data
}

fn code(e: &ObjError) -> Option<ErrorCode> {
    e.code()
}

/// `sluice_obj_requests_total{command="replace_data",ddt="contiguous"}`,
/// waited for until it reaches `want` (the server counts a request just
/// after its reply).
fn wait_counted(server: &TestServer, want: u64) -> u64 {
    let prefix = "sluice_obj_requests_total{command=\"replace_data\",ddt=\"contiguous\"} ";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = server
            .scrape()
            .lines()
            .find_map(|l| l.strip_prefix(prefix)?.parse().ok())
            .unwrap_or(0);
        if n >= want || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn both_clients_replace_an_objects_data_and_the_source_goes() {
    let (server, _dir) = start();
    let mut c = ObjClient::connect(&uri(&server, ""), &ObjOptions::default()).unwrap();
    assert!(c.session().features.contains(Features::REPLACE_DATA));
    let target = object_with(&mut c, &pattern(3, 100_000));
    c.set_attrs(
        target,
        &[AttrChange::set("owner", Value::Text("me".into()))],
        Durability::Buffered,
    )
    .unwrap();
    // Shorter and inline: the target shrinks to it.
    let source = object_with(&mut c, &pattern(5, 777));
    c.replace_data(target, source, Durability::Durable).unwrap();
    assert_eq!(whole(&mut c, target), pattern(5, 777));
    let attrs = c.get_attrs(target, &["owner"]).unwrap();
    assert_eq!(attrs.get("owner"), Some(&Value::Text("me".into())));
    let gone = c.stat(source).unwrap_err();
    assert_eq!(code(&gone), Some(ErrorCode::NoSuchObject), "{gone}");

    // The shared client: longer, in a file.
    let shared = SharedObjClient::connect(&uri(&server, ""), &ObjOptions::default()).unwrap();
    let source = object_with(&mut c, &pattern(7, 200_000));
    shared
        .replace_data(target, source, Durability::Buffered)
        .unwrap();
    assert_eq!(whole(&mut c, target), pattern(7, 200_000));
    assert!(c.stat(source).is_err());
    assert_eq!(wait_counted(&server, 2), 2);
}

#[test]
fn refusals_name_what_failed_and_change_nothing() {
    let (server, _dir) = start();
    let mut c = ObjClient::connect(&uri(&server, ""), &ObjOptions::default()).unwrap();
    let shared = SharedObjClient::connect(&uri(&server, ""), &ObjOptions::default()).unwrap();
    let target = object_with(&mut c, &pattern(3, 5000));
    let source = object_with(&mut c, &pattern(5, 50));
    // An object of another partition is no object of this session.
    let mut other =
        ObjClient::connect(&uri(&server, "?partition=2"), &ObjOptions::default()).unwrap();
    let elsewhere = object_with(&mut other, &pattern(9, 10));

    let cases: [(u64, u64, ErrorCode, String); 4] = [
        (target, target, ErrorCode::Invalid, "its own".into()),
        (
            target,
            9_999_999,
            ErrorCode::NoSuchObject,
            "0x98967f".into(),
        ),
        (
            9_999_999,
            source,
            ErrorCode::NoSuchObject,
            "0x98967f".into(),
        ),
        (
            target,
            elsewhere,
            ErrorCode::NoSuchObject,
            format!("{elsewhere:#x}"),
        ),
    ];
    for (object, from, want, names) in &cases {
        for e in [
            c.replace_data(*object, *from, Durability::Buffered)
                .unwrap_err(),
            shared
                .replace_data(*object, *from, Durability::Buffered)
                .unwrap_err(),
        ] {
            assert_eq!(code(&e), Some(*want), "{object} from {from}: {e}");
            let text = sluice_types::error_chain(&e);
            assert!(text.contains(names.as_str()), "{text}");
            assert!(text.contains("replace data of object"), "{text}");
        }
    }
    assert_eq!(whole(&mut c, target), pattern(3, 5000));
    assert_eq!(whole(&mut c, source), pattern(5, 50));
    assert_eq!(whole(&mut other, elsewhere), pattern(9, 10));

    // A session that did not negotiate it.
    let old = ObjOptions {
        features: Features::NEGOTIABLE.without(Features::REPLACE_DATA),
        ..ObjOptions::default()
    };
    let mut c_old = ObjClient::connect(&uri(&server, ""), &old).unwrap();
    let e = c_old
        .replace_data(target, source, Durability::Buffered)
        .unwrap_err();
    assert_eq!(code(&e), Some(ErrorCode::NotNegotiated), "{e}");
    assert_eq!(whole(&mut c, target), pattern(3, 5000));
    assert_eq!(whole(&mut c, source), pattern(5, 50));
}
