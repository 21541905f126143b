//! Reconnect: a verified write/read workload runs through
//! `sluice_client::Client` while `sluice serve` is killed with SIGKILL
//! and started again on the same image and port. No caller may see an
//! error, and every acknowledged write must read back afterwards, under
//! every cache policy of the matrix: with `--cache writeback` the killed server loses
//! acknowledged writes it never flushed, and only the client's replay
//! log brings them back. A second test checks that a server that stays
//! away gives a clear error once the reconnect window runs out.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rstest::rstest;
use rustix::process::Signal;
use sluice_client::{Client, ClientError, ConnectOptions, NbdUri, Reconnect, Request, Target};

use crate::harness::{create_sparse_file, tempdir, Server, ServerBuilder, KIB, MIB};
use crate::matrix::{Backend::File, Cache, Cache::*, Cell, Pipeline::Flexible};

const IMAGE: u64 = 16 * MIB;
const WORKERS: u64 = 4;
/// Each worker owns one region of the image, so its model is exact.
const REGION: u64 = IMAGE / WORKERS;

/// `sluice serve` on `image` (a file export: it must outlive restarts)
/// with `cache` in front, on `port` (0: any).
fn start(image: &Path, port: u16, cache: Cache) -> Server {
    ServerBuilder::new()
        .cell(Cell::new(File, cache, Flexible))
        .listen(format!("127.0.0.1:{port}"))
        .file_export("disk", image, "")
        .start()
}

fn options(window: Duration) -> ConnectOptions {
    ConnectOptions {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Some(Duration::from_secs(60)),
        reconnect: Reconnect {
            window,
            // Small, so the client's own FLUSHes (and trimming the log)
            // happen during the run too.
            replay_log_bytes: 2 * MIB as usize,
            fail_when_refused: false,
        },
        ..ConnectOptions::default()
    }
}

#[derive(Default)]
struct Counts {
    writes: AtomicU64,
    reads_checked: AtomicU64,
    flushes: AtomicU64,
}

/// Writes, reads back and flushes in its region until `stop`; returns
/// its model of the region (what every acknowledged write left there)
/// or the first error or wrong byte.
fn worker(
    client: Client,
    id: u64,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Result<Vec<u8>, String> {
    let base = id * REGION;
    let mut model = vec![0u8; REGION as usize];
    let mut rng = fastrand::Rng::with_seed(0x5eed ^ id);
    let mut next = move || rng.u64(..);
    let mut buf = vec![0u8; 64 * KIB as usize];
    while !stop.load(Ordering::Relaxed) {
        let len = ((next() % 16 + 1) * 4 * KIB) as usize;
        let at = (next() % (REGION - len as u64)) & !511;
        match next() % 10 {
            0..=5 => {
                let fill = next() as u8;
                let data: Vec<u8> = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
                client
                    .call_blocking(Request::Write {
                        offset: base + at,
                        data: &data,
                        fua: false,
                    })
                    .map_err(|e| format!("worker {id}: {e}"))?;
                model[at as usize..at as usize + len].copy_from_slice(&data);
                counts.writes.fetch_add(1, Ordering::Relaxed);
            }
            6..=8 => {
                let dst = &mut buf[..len];
                client
                    .read_at(dst, base + at)
                    .map_err(|e| format!("worker {id}: {e}"))?;
                if dst != &model[at as usize..at as usize + len] {
                    return Err(format!(
                        "worker {id}: read of {len} bytes at {} differs from what was written",
                        base + at
                    ));
                }
                counts.reads_checked.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                client
                    .call_blocking(Request::Flush)
                    .map_err(|e| format!("worker {id}: {e}"))?;
                counts.flushes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok(model)
}

#[rstest]
fn client_rides_out_server_restarts_and_every_acknowledged_write_reads_back(
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let image = dir.path().join("reconnect.img");
    create_sparse_file(&image, IMAGE);
    let mut server = start(&image, 0, cache);
    let port = server.addr().port();
    let uri = NbdUri::new(Target::Tcp(format!("127.0.0.1:{port}")), "disk");
    let client = Client::connect(&uri, &options(Duration::from_secs(30))).expect("connect");
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let workers: Vec<_> = (0..WORKERS)
        .map(|id| {
            let (c, s, n) = (client.clone(), stop.clone(), counts.clone());
            thread::spawn(move || worker(c, id, s, n))
        })
        .collect();
    let mut writes_before = Vec::new();
    for cycle in 0..3 {
        thread::sleep(Duration::from_millis(400));
        writes_before.push(counts.writes.load(Ordering::Relaxed));
        server.signal(Signal::KILL);
        server
            .wait_exit(Duration::from_secs(10))
            .expect("server exits on SIGKILL");
        // Down for a while: requests pile up waiting for it.
        thread::sleep(Duration::from_millis(150 + 100 * cycle));
        server = start(&image, port, cache);
    }
    thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    let models: Vec<Vec<u8>> = workers
        .into_iter()
        .map(|w| {
            w.join()
                .expect("worker thread")
                .unwrap_or_else(|e| panic!("{e}\n--- server stderr ---\n{}", server.stderr_log()))
        })
        .collect();
    let writes = counts.writes.load(Ordering::Relaxed);
    eprintln!(
        "writes {writes}, reads checked {}, flushes {}, writes before each kill {writes_before:?}",
        counts.reads_checked.load(Ordering::Relaxed),
        counts.flushes.load(Ordering::Relaxed),
    );
    // The workload ran across every restart, not only before the first.
    for pair in writes_before.windows(2) {
        assert!(
            pair[1] > pair[0],
            "no writes between kills: {writes_before:?}"
        );
    }
    assert!(
        writes > writes_before[2],
        "no writes after the last restart"
    );
    drop(client);

    // Everything acknowledged is there, through a fresh connection...
    let check = Client::connect(&uri, &options(Duration::ZERO)).expect("connect to check");
    let mut got = vec![0u8; REGION as usize];
    for (id, model) in models.iter().enumerate() {
        for (i, piece) in got.chunks_mut(MIB as usize).enumerate() {
            check
                .read_at(piece, id as u64 * REGION + i as u64 * MIB)
                .expect("read back");
        }
        assert!(
            got == *model,
            "region {id} differs from the acknowledged writes after the restarts"
        );
    }
    drop(check);
    // ...and, once the server is stopped cleanly, in the image itself.
    drop(server);
    let on_disk = std::fs::read(&image).expect("read image");
    for (id, model) in models.iter().enumerate() {
        let region = &on_disk[(id as u64 * REGION) as usize..((id as u64 + 1) * REGION) as usize];
        assert!(region == model.as_slice(), "image region {id} differs");
    }
}

#[test]
fn a_server_that_stays_away_fails_requests_once_the_window_runs_out() {
    let dir = tempdir();
    let image = dir.path().join("gone.img");
    create_sparse_file(&image, MIB);
    let mut server = start(&image, 0, Uncached);
    let uri = NbdUri::new(Target::Tcp(server.addr().to_string()), "disk");
    let window = Duration::from_millis(800);
    let client = Client::connect(&uri, &options(window)).expect("connect");
    client
        .call_blocking(Request::Write {
            offset: 0,
            data: &[1; 4096],
            fua: false,
        })
        .expect("write before the kill");
    server.signal(Signal::KILL);
    server
        .wait_exit(Duration::from_secs(10))
        .expect("server exits on SIGKILL");
    let began = Instant::now();
    let err = client
        .call_blocking(Request::Read {
            offset: 0,
            length: 4096,
        })
        .expect_err("no server to answer");
    let waited = began.elapsed();
    assert!(
        matches!(err, ClientError::ReconnectFailed { window: w, .. } if w == window),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("could not reconnect within 800ms"),
        "the error says what happened: {msg}"
    );
    assert!(
        waited >= window / 2 && waited < window + Duration::from_secs(6),
        "failed after {waited:?} with a window of {window:?}"
    );
    // The client stays failed: later requests fail at once.
    let again = client.call_blocking(Request::Flush).expect_err("closed");
    assert!(again.is_temporary(), "{again}");
}
