#![allow(clippy::unwrap_used)]
//! Temporal merge against a real in-process server: whether requests
//! went in batch frames is read from the server's own metrics
//! (`sluice_obj_batches_total`), never from timing; and whatever the
//! policy, every reply reaches the caller that sent the request, with
//! its data (a property test of several threads against a model).

use proptest::prelude::*;
use sluice_client::obj::{
    DataOptions, Features, MergePolicy, ObjClient, ObjOptions, ObjRequest, ObjResponse, Segment,
    SharedObjClient, HOLD_IN_FLIGHT,
};
use sluice_client::Durability;
use sluice_client::ObjUri;
use sluice_testkit::test_server::TestServer;

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
    fn uri(&self, merge: MergePolicy) -> ObjUri {
        let uri: ObjUri = self.server.obj_uri().parse().unwrap();
        uri.with_merge(merge)
    }

    fn shared(&self, merge: MergePolicy) -> SharedObjClient {
        SharedObjClient::connect(&self.uri(merge), &ObjOptions::default()).unwrap()
    }

    fn client(&self, merge: MergePolicy) -> ObjClient {
        ObjClient::connect(&self.uri(merge), &ObjOptions::default()).unwrap()
    }

    /// Batch frames the server has split so far.
    fn batches(&self) -> u64 {
        self.metric("sluice_obj_batches_total")
    }

    /// The value of the series `name` (with its labels) on the server.
    fn metric(&self, name: &str) -> u64 {
        let body = self.server.scrape();
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{body}"))
    }

    /// Objects to write into.
    fn objects(&self, n: u32) -> Vec<u64> {
        let mut c = self.client(MergePolicy::Off);
        c.create("", n, Durability::Buffered).unwrap()
    }
}

fn seg(offset: u64, length: u64) -> Segment {
    Segment { offset, length }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (sluice_types::splitmix64(seed ^ i) & 0xff) as u8)
        .collect()
}

/// `threads` threads each write `per_thread` 4 KiB blocks at random
/// offsets of their own object through `client`.
fn hammer(client: &SharedObjClient, objects: &[u64], per_thread: u64) {
    std::thread::scope(|s| {
        for (t, &object) in objects.iter().enumerate() {
            s.spawn(move || {
                let data = pattern(t as u64, 4096);
                for i in 0..per_thread {
                    let block = sluice_types::splitmix64(i ^ ((t as u64) << 32)) % 256;
                    client
                        .write(
                            object,
                            &[seg(block * 4096, 4096)],
                            &data,
                            &DataOptions::default(),
                        )
                        .unwrap();
                }
            });
        }
    });
}

/// Runs `round` until the server has split a batch frame, at most
/// `rounds` times; returns how many it split. Whether threads meet in
/// the send queue is up to the scheduler, so a round may form none; the
/// count, not the time, decides.
fn until_batched(f: &Fixture, rounds: usize, mut round: impl FnMut()) -> u64 {
    for _ in 0..rounds {
        round();
        let n = f.batches();
        if n > 0 {
            return n;
        }
    }
    f.batches()
}

/// Under `always`, writers that meet in the send queue go out in batch
/// frames of two or more, and the client's count of what it packed is
/// the server's count of what it split. How many meet per frame is up
/// to the scheduler (about three on a quiet machine, fewer when the CPUs
/// are busy): a benchmark's business, not a test's.
#[test]
fn always_packs_concurrent_writers_into_frames_of_several() {
    let f = start();
    let objects = f.objects(32);
    let client = f.shared(MergePolicy::Always);
    assert_eq!(client.merge_policy(), MergePolicy::Always);
    let per_thread = 200;
    let frames = until_batched(&f, 20, || hammer(&client, &objects, per_thread));
    assert!(frames > 0, "no batch frame in 20 rounds of 32 writers");
    let members = f.metric("sluice_obj_batch_members_sum");
    // Every frame the client packed is one the server split.
    let stats = client.merge_stats();
    assert_eq!(stats.frames, frames);
    assert_eq!(stats.merged, members);
    // A lone request goes as itself, never as a frame of one.
    assert!(members >= 2 * frames, "{members} writes in {frames} frames");
    eprintln!("{members} writes in {frames} frames");
}

#[test]
fn off_never_batches() {
    let f = start();
    let objects = f.objects(16);
    let client = f.shared(MergePolicy::Off);
    for _ in 0..3 {
        hammer(&client, &objects, 100);
    }
    // Pipelined from one thread too.
    let mut c = f.client(MergePolicy::Off);
    let data = pattern(9, 4096);
    let opts = DataOptions::default();
    let segs: Vec<[Segment; 1]> = (0..512).map(|i| [seg(i * 4096, 4096)]).collect();
    let reqs: Vec<ObjRequest<'_>> = segs
        .iter()
        .map(|s| ObjRequest::Write {
            object: objects[0],
            segments: s,
            data: &data,
            options: &opts,
        })
        .collect();
    for r in c.pipeline(&reqs) {
        r.unwrap();
    }
    assert_eq!(client.merge_stats().frames, 0);
    assert_eq!(f.batches(), 0);
}

#[test]
fn adaptive_batches_above_the_hold_threshold_and_not_below_it() {
    let f = start();
    let objects = f.objects(32);
    let client = f.shared(MergePolicy::Adaptive);
    assert_eq!(client.merge_policy(), MergePolicy::Adaptive);
    // Below: one at a time, then just under the threshold; enough
    // requests for many measuring windows, and not one frame.
    hammer(&client, &objects[..1], 1000);
    hammer(&client, &objects[..HOLD_IN_FLIGHT - 1], 1000);
    assert_eq!(client.merge_stats().frames, 0);
    assert_eq!(f.batches(), 0);
    // Above: adaptive tries merging at each level of load it sees
    // before it compares, so a busy connection forms batch frames.
    let n = until_batched(&f, 30, || hammer(&client, &objects, 100));
    assert!(n > 0, "no batch frame formed");
    assert_eq!(client.merge_stats().frames, f.batches());
}

#[test]
fn pipelined_requests_merge_under_always_and_keep_their_replies() {
    let f = start();
    let object = f.objects(1)[0];
    let mut c = f.client(MergePolicy::Always);
    let blocks: Vec<Vec<u8>> = (0..300).map(|i| pattern(i, 512)).collect();
    let segs: Vec<[Segment; 1]> = (0..300).map(|i| [seg(i * 512, 512)]).collect();
    let opts = DataOptions::default();
    let writes: Vec<ObjRequest<'_>> = segs
        .iter()
        .zip(&blocks)
        .map(|(s, d)| ObjRequest::Write {
            object,
            segments: s,
            data: d,
            options: &opts,
        })
        .collect();
    for r in c.pipeline(&writes) {
        r.unwrap();
    }
    let after_writes = f.batches();
    assert!(after_writes > 0);
    let reads: Vec<ObjRequest<'_>> = segs
        .iter()
        .rev()
        .map(|s| ObjRequest::Read {
            object,
            segments: s,
            get: &[],
        })
        .collect();
    for (r, want) in c.pipeline(&reads).into_iter().zip(blocks.iter().rev()) {
        match r.unwrap() {
            ObjResponse::Read(r) => assert_eq!(&r.data, want),
            other => panic!("{other:?}"),
        }
    }
    assert!(f.batches() > after_writes);
}

#[test]
fn pipelined_merges_stay_under_the_in_flight_count() {
    let f = start();
    let object = f.objects(1)[0];
    let options = ObjOptions {
        max_in_flight: 8,
        merge: MergePolicy::Always,
        ..ObjOptions::default()
    };
    let mut c = ObjClient::connect(&f.server.obj_uri().parse().unwrap(), &options).unwrap();
    let data = pattern(3, 4096);
    let opts = DataOptions::default();
    let segs: Vec<[Segment; 1]> = (0..1000).map(|i| [seg(i * 4096, 4096)]).collect();
    let reqs: Vec<ObjRequest<'_>> = segs
        .iter()
        .map(|s| ObjRequest::Write {
            object,
            segments: s,
            data: &data,
            options: &opts,
        })
        .collect();
    for r in c.pipeline(&reqs) {
        r.unwrap();
    }
    let frames = f.batches();
    assert!(frames > 0);
    // Every frame had at most 8 members.
    assert_eq!(
        f.metric("sluice_obj_batch_members_bucket{le=\"8\"}"),
        frames
    );
    assert_eq!(f.metric("sluice_obj_batch_members_count"), frames);
}

#[test]
fn the_uri_policy_wins_and_no_batch_feature_means_off() {
    let f = start();
    let options = ObjOptions {
        merge: MergePolicy::Off,
        ..ObjOptions::default()
    };
    let c = SharedObjClient::connect(&f.uri(MergePolicy::Always), &options).unwrap();
    assert_eq!(c.merge_policy(), MergePolicy::Always);
    let plain: ObjUri = f.server.obj_uri().parse().unwrap();
    let c = SharedObjClient::connect(&plain, &options).unwrap();
    assert_eq!(c.merge_policy(), MergePolicy::Off);
    // Without batch frames negotiated nothing can merge, whatever is asked.
    let options = ObjOptions {
        features: Features::default(),
        merge: MergePolicy::Always,
        ..ObjOptions::default()
    };
    let c = SharedObjClient::connect(&f.uri(MergePolicy::Always), &options).unwrap();
    assert_eq!(c.merge_policy(), MergePolicy::Off);
    let objects = f.objects(8);
    hammer(&c, &objects, 50);
    assert_eq!(f.batches(), 0);
}

/// A list longer than one request may carry is cut into pieces, which
/// go out with merging on like any other requests; the bytes come back
/// in list order.
#[test]
fn a_request_that_needs_splitting_is_split_by_the_shared_client() {
    let f = start();
    let object = f.objects(1)[0];
    let client = f.shared(MergePolicy::Always);
    let too_many = client.session().limits.max_segments as u64 + 1;
    let segs: Vec<Segment> = (0..too_many).map(|i| seg(i * 4, 1)).collect();
    let data: Vec<u8> = (0..too_many).map(|i| (i % 250) as u8 + 1).collect();
    client
        .write(object, &segs, &data, &DataOptions::default())
        .unwrap();
    assert_eq!(client.read(object, &segs).unwrap().data, data);
    assert_eq!(
        client.read(object, &[seg(4, 4)]).unwrap().data,
        [2, 0, 0, 0]
    );
}

/// One step of a thread's script.
#[derive(Debug, Clone)]
enum Step {
    Write {
        segments: Vec<(u16, u16)>,
        seed: u64,
    },
    Read {
        segments: Vec<(u16, u16)>,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let segments = prop::collection::vec((0u16..8192, 1u16..600), 1..5);
    prop_oneof![
        (segments.clone(), any::<u64>())
            .prop_map(|(segments, seed)| Step::Write { segments, seed }),
        segments.prop_map(|segments| Step::Read { segments }),
    ]
}

fn segments_of(s: &[(u16, u16)]) -> Vec<Segment> {
    s.iter()
        .map(|&(o, l)| seg(u64::from(o), u64::from(l)))
        .collect()
}

/// Runs one thread's script against its own object and its own model;
/// returns the first mismatch.
fn run_script(client: &SharedObjClient, object: u64, script: &[Step]) -> Result<(), String> {
    let mut model: Vec<u8> = Vec::new();
    for (i, step) in script.iter().enumerate() {
        match step {
            Step::Write { segments, seed } => {
                let segs = segments_of(segments);
                let total: u64 = segs.iter().map(|s| s.length).sum();
                let data = pattern(*seed ^ object, total as usize);
                client
                    .write(object, &segs, &data, &DataOptions::default())
                    .map_err(|e| format!("step {i}: {e}"))?;
                let mut at = 0;
                for s in &segs {
                    let end = (s.offset + s.length) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[s.offset as usize..end]
                        .copy_from_slice(&data[at..at + s.length as usize]);
                    at += s.length as usize;
                }
            }
            Step::Read { segments } => {
                let segs = segments_of(segments);
                let got = client
                    .read(object, &segs)
                    .map_err(|e| format!("step {i}: {e}"))?;
                let want: Vec<u8> = segs
                    .iter()
                    .flat_map(|s| s.offset..s.offset + s.length)
                    .map(|b| model.get(b as usize).copied().unwrap_or(0))
                    .collect();
                if got.data != want {
                    return Err(format!(
                        "step {i}: read {segments:?} of object {object} differs"
                    ));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn replies_reach_their_callers_with_their_data(
        policy in prop_oneof![
            Just(MergePolicy::Off),
            Just(MergePolicy::Always),
            Just(MergePolicy::Adaptive)
        ],
        scripts in prop::collection::vec(prop::collection::vec(step(), 1..60), 2..16),
    ) {
        let f = start();
        let objects = f.objects(scripts.len() as u32);
        let client = f.shared(policy);
        let errors: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = scripts
                .iter()
                .zip(&objects)
                .map(|(script, &object)| {
                    let client = &client;
                    s.spawn(move || run_script(client, object, script))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for e in errors {
            prop_assert!(e.is_ok(), "{policy}: {}", e.unwrap_err());
        }
        // What the client says it merged is what the server split.
        prop_assert_eq!(client.merge_stats().frames, f.batches());
    }
}
