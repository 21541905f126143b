#![allow(clippy::unwrap_used)]
//! Reads and writes from and into a list of the caller's buffers
//! (iovecs), as the object paper's client gathers from non-contiguous
//! memory: against a real server, on both object clients, through the
//! same splitting as one buffer, with SGL and strided layouts.

use std::io::{IoSlice, IoSliceMut};

use sluice_client::obj::{
    DataOptions, Features, ObjClient, ObjError, ObjOptions, Segment, SharedObjClient,
};
use sluice_client::ObjUri;
use sluice_server::ByteSize;
use sluice_testkit::test_server::TestServer;

fn seg(offset: u64, length: u64) -> Segment {
    Segment { offset, length }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn start(max_payload: Option<u64>) -> (TestServer, tempfile::TempDir, ObjUri) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::builder()
        .objects(dir.path().join("objects"))
        .config(|c| {
            if let Some(p) = max_payload {
                c.objects.as_mut().unwrap().max_payload = Some(ByteSize(p));
            }
        })
        .metrics()
        .start();
    let uri = server.obj_uri().parse().unwrap();
    (server, dir, uri)
}

/// The bytes of `segments` of `object`, read as one buffer.
fn read_one(c: &mut ObjClient, object: u64, segments: &[Segment]) -> Vec<u8> {
    c.read(object, segments).unwrap().data
}

/// `data` read back into buffers of `sizes` (which add up to its
/// length), and their bytes one after another.
fn scattered(sizes: &[usize], fill: impl FnOnce(&mut [IoSliceMut<'_>]) -> u64) -> (Vec<u8>, u64) {
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xee; n]).collect();
    let mut slices: Vec<IoSliceMut<'_>> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
    let real = fill(&mut slices);
    (bufs.concat(), real)
}

#[test]
fn a_write_gathered_from_odd_buffers_reads_back_scattered_into_others() {
    let (_server, _dir, uri) = start(None);
    for features in [
        Features::NEGOTIABLE,
        Features::NEGOTIABLE.without(Features::SGL_MASTER),
    ] {
        let options = ObjOptions {
            features,
            ..ObjOptions::default()
        };
        let mut c = ObjClient::connect(&uri, &options).unwrap();
        let shared = SharedObjClient::connect(&uri, &options).unwrap();
        let id = c.create("", 1, Default::default()).unwrap()[0];
        let (a, b, d) = (pattern(1, 7), pattern(2, 13), pattern(3, 29));
        let bufs = [IoSlice::new(&a), IoSlice::new(&b), IoSlice::new(&d)];
        let all = [a.as_slice(), &b, &d].concat();
        // Out of order, at 4096 and above: an SGL (at master offset 4096
        // when the session has SGL_MASTER).
        let sgl = [seg(5000, 10), seg(4096, 20), seg(4600, 19)];
        // Seven segments of 7, 11 apart: strided.
        let strided: Vec<Segment> = (0..7).map(|i| seg(100 + 11 * i, 7)).collect();
        for layout in [&sgl[..], &strided] {
            c.write_vectored(id, layout, &bufs, &DataOptions::default())
                .unwrap();
            assert_eq!(read_one(&mut c, id, layout), all, "{layout:?}");
            let (got, real) =
                scattered(&[5, 30, 1, 13], |s| c.read_vectored(id, layout, s).unwrap());
            assert_eq!((got, real), (all.clone(), 49));
            let (got, _) = scattered(&[49], |s| shared.read_vectored(id, layout, s).unwrap());
            assert_eq!(got, all);
        }
        // The bytes lie where the segments say, absolute.
        let whole = read_one(&mut c, id, &[seg(4096, 1000)]);
        assert_eq!(&whole[..20], &all[10..30]);
        assert_eq!(&whole[504..523], &all[30..49]);
        assert_eq!(&whole[904..914], &all[..10]);

        // The shared client gathers too; past the object's end reads as
        // zeros, counted out of the real bytes.
        let other = [IoSlice::new(&d), IoSlice::new(&[]), IoSlice::new(&a)];
        shared
            .write_vectored(
                id,
                &[seg(9000, 30), seg(8000, 6)],
                &other,
                &DataOptions::default(),
            )
            .unwrap();
        let (got, real) = scattered(&[2, 34, 4], |s| {
            c.read_vectored(id, &[seg(8000, 6), seg(9000, 30), seg(9036, 4)], s)
                .unwrap()
        });
        // d's 29 bytes and a's first fill the segment at 9000; the rest
        // of a the one at 8000.
        let want = [&a[1..], &d[..], &a[..1], &[0u8; 4]].concat();
        assert_eq!((got, real), (want, 36));
    }
}

#[test]
fn buffers_not_as_long_as_the_segments_are_refused_before_sending() {
    let (server, _dir, uri) = start(None);
    let mut c = ObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let shared = SharedObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let id = c.create("", 1, Default::default()).unwrap()[0];
    let segments = [seg(0, 10), seg(20, 10)];
    let (a, b) = ([1u8; 7], [2u8; 12]);
    let short = [IoSlice::new(&a), IoSlice::new(&b)];
    let before = server.scrape();
    for e in [
        c.write_vectored(id, &segments, &short, &DataOptions::default())
            .unwrap_err(),
        shared
            .write_vectored(id, &segments, &short, &DataOptions::default())
            .unwrap_err(),
    ] {
        let ObjError::Refused { reason, .. } = &e else {
            panic!("not refused: {e}")
        };
        assert!(
            reason.contains("19 data bytes") && reason.contains("20"),
            "{e}"
        );
    }
    let (mut x, mut y) = ([0u8; 15], [0u8; 6]);
    let mut long = [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)];
    for e in [
        c.read_vectored(id, &segments, &mut long).unwrap_err(),
        shared.read_vectored(id, &segments, &mut long).unwrap_err(),
    ] {
        let ObjError::Refused { reason, .. } = &e else {
            panic!("not refused: {e}")
        };
        assert!(
            reason.contains("buffers of 21 bytes") && reason.contains("20"),
            "{e}"
        );
    }
    // Nothing reached the server: no read or write was counted.
    let count = |text: &str| {
        text.lines()
            .filter(|l| {
                l.starts_with("sluice_obj_requests_total{command=\"write\"")
                    || l.starts_with("sluice_obj_requests_total{command=\"read\"")
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    assert_eq!(count(&server.scrape()), count(&before));
    assert_eq!(c.stat(id).unwrap().length, 0, "the object is untouched");
}

#[test]
fn a_gathered_write_past_the_servers_max_payload_is_split() {
    let (server, _dir, uri) = start(Some(64 << 10));
    let mut c = ObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let shared = SharedObjClient::connect(&uri, &ObjOptions::default()).unwrap();
    let id = c.create("", 1, Default::default()).unwrap()[0];
    // 201,001 bytes from three buffers of odd sizes over 3,000 segments
    // of 67 (strided, 100 apart) plus one of 1.
    let (a, b, d) = (pattern(7, 70_001), pattern(8, 99_999), pattern(9, 31_001));
    let all = [a.as_slice(), &b, &d].concat();
    let mut layout: Vec<Segment> = (0..3000).map(|i| seg(1 << 20 | (i * 100), 67)).collect();
    layout.push(seg(10, 1));
    assert_eq!(
        layout.iter().map(|s| s.length).sum::<u64>(),
        all.len() as u64
    );
    let writes = |server: &TestServer| {
        server
            .scrape()
            .lines()
            .filter(|l| l.starts_with("sluice_obj_requests_total{command=\"write\""))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum::<u64>()
    };
    let bufs = [IoSlice::new(&a), IoSlice::new(&b), IoSlice::new(&d)];
    let w0 = writes(&server);
    c.write_vectored(id, &layout, &bufs, &DataOptions::default())
        .unwrap();
    assert_eq!(read_one(&mut c, id, &layout), all);
    let (got, real) = scattered(&[1, 100_000, 101_000], |s| {
        c.read_vectored(id, &layout, s).unwrap()
    });
    assert_eq!((got == all, real), (true, all.len() as u64));
    // The shared client the same, over other bytes.
    let all2: Vec<u8> = all.iter().map(|x| x ^ 0x5a).collect();
    let (p, q) = all2.split_at(123_457);
    let bufs = [IoSlice::new(p), IoSlice::new(q)];
    shared
        .write_vectored(id, &layout, &bufs, &DataOptions::default())
        .unwrap();
    let (got, _) = scattered(&[201_000, 1], |s| {
        shared.read_vectored(id, &layout, s).unwrap()
    });
    assert!(got == all2);
    // Each write went in several requests, none over the limit (the
    // server refuses those).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while writes(&server) < w0 + 8 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(writes(&server) >= w0 + 8, "{} writes", writes(&server) - w0);
}
