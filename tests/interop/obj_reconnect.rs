//! Reconnect of the object client, the NBD reconnect test's twin: a
//! verified write/read workload runs through one `SharedObjClient` while
//! `sluice serve` is killed with SIGKILL and started again on the same
//! object store and port. No caller may see an error, and every
//! acknowledged write must read back afterwards. A second test checks
//! that a server that stays away gives a clear error once the reconnect
//! window runs out, and a third that a request that must not run twice
//! is not sent again.

use sluice_client::Durability;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sluice_client::obj::{
    DataOptions, FlushScope, ObjClient, ObjError, ObjOptions, ObjRequest, Segment, SharedObjClient,
};
use sluice_client::{ObjUri, Reconnect};

use crate::harness::{tempdir, Server, ServerBuilder, KIB};

const WORKERS: usize = 4;
/// Each worker owns one object, so its model is exact.
const OBJECT: u64 = 1 << 20;

/// `sluice serve` with its object store in `dir`, objects on `port` (0:
/// any).
fn start(dir: &Path, port: u16) -> Server {
    ServerBuilder::new()
        .arg("--objects")
        .arg(dir.display().to_string())
        .object_listen(format!("127.0.0.1:{port}"))
        .start()
}

fn options(window: Duration) -> ObjOptions {
    ObjOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_secs(60)),
        reconnect: Reconnect {
            window,
            // Small, so the client's own FLUSHes (and trimming the log)
            // happen during the run too.
            replay_log_bytes: 512 * KIB as usize,
            fail_when_refused: false,
        },
        ..ObjOptions::default()
    }
}

#[derive(Default)]
struct Counts {
    writes: AtomicU64,
    reads_checked: AtomicU64,
    flushes: AtomicU64,
    /// A worker stopped on an error (its result says which).
    failed: AtomicBool,
}

/// Writes, reads back and flushes `object` until `stop`; returns its
/// model of the object (what every acknowledged write left there) or
/// the first error or wrong byte.
fn worker(
    client: &SharedObjClient,
    object: u64,
    seed: u64,
    stop: &AtomicBool,
    counts: &Counts,
) -> Result<Vec<u8>, String> {
    let mut model = vec![0u8; OBJECT as usize];
    let mut rng = fastrand::Rng::with_seed(0x0b1ec7 ^ seed);
    let fail = |e: ObjError| format!("object {object}: {e}");
    while !stop.load(Ordering::Relaxed) {
        let len = rng.u64(1..=16) * 4 * KIB;
        let at = rng.u64(..OBJECT - len);
        let segment = [Segment {
            offset: at,
            length: len,
        }];
        let range = at as usize..(at + len) as usize;
        match rng.u8(..10) {
            0..=5 => {
                let fill = rng.u8(..);
                let data: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                client
                    .write(object, &segment, &data, &DataOptions::default())
                    .map_err(fail)?;
                model[range].copy_from_slice(&data);
                counts.writes.fetch_add(1, Ordering::Relaxed);
            }
            6..=8 => {
                let read = client.read(object, &segment).map_err(fail)?;
                if read.data != model[range] {
                    return Err(format!(
                        "object {object}: read of {len} bytes at {at} differs from what was written"
                    ));
                }
                counts.reads_checked.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                client
                    .run(&ObjRequest::Flush(FlushScope::Object(object)))
                    .map_err(fail)?;
                counts.flushes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(model)
}

/// Waits until `counter` passes `at_least` (bounded by a deadline);
/// false if a worker failed first.
fn wait_for(counts: &Counts, counter: &AtomicU64, at_least: u64, what: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while counter.load(Ordering::Relaxed) < at_least {
        if counts.failed.load(Ordering::Relaxed) {
            return false;
        }
        assert!(Instant::now() < deadline, "{what}: no progress in 60 s");
        thread::yield_now();
    }
    true
}

/// Makes `n` objects of `OBJECT` zero bytes each, durable.
fn objects(uri: &ObjUri, n: usize) -> Vec<u64> {
    let mut c = ObjClient::connect(uri, &ObjOptions::default()).expect("connect");
    let ids = c
        .create("", n as u32, Durability::Buffered)
        .expect("create");
    for id in &ids {
        c.truncate(*id, OBJECT, Durability::Buffered).expect("size");
    }
    c.flush(FlushScope::Partition).expect("flush");
    ids
}

#[test]
fn object_client_rides_out_server_restarts_and_every_acknowledged_write_reads_back() {
    let dir = tempdir();
    let store = dir.path().join("objects");
    let mut server = start(&store, 0);
    let port = server.objects[0].port();
    let uri: ObjUri = server.obj_uri().parse().expect("uri");
    let ids = objects(&uri, WORKERS);
    let client =
        SharedObjClient::connect(&uri, &options(Duration::from_secs(30))).expect("connect");
    let stop = AtomicBool::new(false);
    let counts = Counts::default();
    let models = thread::scope(|s| {
        let workers: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                let (c, stop, counts) = (&client, &stop, &counts);
                s.spawn(move || {
                    let r = worker(c, id, i as u64, stop, counts);
                    counts.failed.fetch_or(r.is_err(), Ordering::Relaxed);
                    r
                })
            })
            .collect();
        let mut writes_before = Vec::new();
        for _ in 0..3 {
            // Some acknowledged work on this server before it dies.
            let now = counts.writes.load(Ordering::Relaxed);
            if !wait_for(&counts, &counts.writes, now + 50, "writes before the kill") {
                break;
            }
            writes_before.push(counts.writes.load(Ordering::Relaxed));
            server.signal(Signal::KILL);
            server
                .wait_exit(Duration::from_secs(10))
                .expect("server exits on SIGKILL");
            server = start(&store, port);
        }
        let now = counts.writes.load(Ordering::Relaxed);
        let _ = wait_for(
            &counts,
            &counts.writes,
            now + 50,
            "writes after the last restart",
        ) && wait_for(&counts, &counts.reads_checked, 100, "checked reads");
        stop.store(true, Ordering::Relaxed);
        eprintln!(
            "writes {}, reads checked {}, flushes {}, writes before each kill {writes_before:?}",
            counts.writes.load(Ordering::Relaxed),
            counts.reads_checked.load(Ordering::Relaxed),
            counts.flushes.load(Ordering::Relaxed),
        );
        workers
            .into_iter()
            .map(|w| {
                w.join().expect("worker thread").unwrap_or_else(|e| {
                    panic!("{e}\n--- server stderr ---\n{}", server.stderr_log())
                })
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(models.len(), WORKERS);
    drop(client);

    // Everything acknowledged is there, through a fresh connection...
    let mut check = ObjClient::connect(&uri, &ObjOptions::default()).expect("connect to check");
    let whole = [Segment {
        offset: 0,
        length: OBJECT,
    }];
    for (id, model) in ids.iter().zip(&models) {
        let got = check.read(*id, &whole).expect("read back");
        assert!(
            got.data == *model,
            "object {id} differs from the acknowledged writes after the restarts"
        );
    }
    drop(check);
    // ...and after a clean restart of the server.
    drop(server);
    let server = start(&store, port);
    let mut check = ObjClient::connect(&uri, &ObjOptions::default()).expect("connect again");
    for (id, model) in ids.iter().zip(&models) {
        let got = check
            .read(*id, &whole)
            .expect("read back after a clean stop");
        assert!(got.data == *model, "object {id} differs after a clean stop");
    }
    drop(server);
}

#[test]
fn a_server_that_stays_away_fails_requests_once_the_window_runs_out() {
    let dir = tempdir();
    let mut server = start(&dir.path().join("objects"), 0);
    let uri: ObjUri = server.obj_uri().parse().expect("uri");
    let id = objects(&uri, 1)[0];
    let window = Duration::from_millis(800);
    let client = SharedObjClient::connect(&uri, &options(window)).expect("connect");
    let segment = [Segment {
        offset: 0,
        length: 4096,
    }];
    client
        .write(id, &segment, &[1; 4096], &DataOptions::default())
        .expect("write before the kill");
    server.signal(Signal::KILL);
    server
        .wait_exit(Duration::from_secs(10))
        .expect("server exits on SIGKILL");
    let began = Instant::now();
    let err = client.read(id, &segment).expect_err("no server to answer");
    let waited = began.elapsed();
    assert!(
        matches!(err, ObjError::ReconnectFailed { window: w, .. } if w == window),
        "{err}"
    );
    assert!(
        err.to_string().contains("could not reconnect") && err.to_string().contains("800ms"),
        "the error says what happened: {err}"
    );
    assert!(
        waited >= window / 2 && waited < window + Duration::from_secs(6),
        "failed after {waited:?} with a window of {window:?}"
    );
    // The client stays failed: later requests fail at once.
    let again = client.read(id, &segment).expect_err("closed");
    assert!(matches!(again, ObjError::ReconnectFailed { .. }), "{again}");
}
