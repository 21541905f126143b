#![allow(clippy::unwrap_used)]
//! Temporal merge on the block path: a block export reached over the
//! native protocol ([`ExportDevice`]) against a real in-process server.
//! Whether requests were fused into one scatter/gather extent command is
//! read from the server's own metrics (EXTENT_WRITE and EXTENT_READ
//! requests with an SGL DDT, which the device never sends itself),
//! never from timing; and the bytes written through fused commands read
//! back as a model of them says.

mod relay;

use std::sync::Arc;
use std::time::Duration;

use sluice_client::obj::{ExportDevice, MergePolicy, ObjOptions, HOLD_IN_FLIGHT};
use sluice_client::{ExportUri, Reconnect};
use sluice_storage::{BlockDevice, MemDevice};
use sluice_testkit::test_server::TestServer;

/// Bytes of the export.
const SIZE: u64 = 64 << 20;
const BLOCK: u64 = 4096;

struct Fixture {
    server: TestServer,
    disk: Arc<MemDevice>,
    _dir: tempfile::TempDir,
}

fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(MemDevice::new(SIZE, false));
    let server = TestServer::builder()
        .export("disk", disk.clone())
        .objects(dir.path().join("objects"))
        .metrics()
        .start();
    Fixture {
        server,
        disk,
        _dir: dir,
    }
}

impl Fixture {
    fn device(&self, merge: MergePolicy) -> ExportDevice {
        let uri: ExportUri = format!("{}/disk?merge={merge}", self.server.obj_uri())
            .parse()
            .unwrap();
        ExportDevice::connect(&uri, &ObjOptions::default()).unwrap()
    }

    /// The series `name{labels}` on the server (0 while it has not
    /// appeared).
    fn metric(&self, series: &str) -> u64 {
        let body = self.server.scrape();
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Fused commands the server ran for `command`, and the requests
    /// (segments) they carried.
    fn fused(&self, command: &str) -> (u64, u64) {
        let labels = format!("{{command=\"{command}\",ddt=\"sgl\"}}");
        (
            self.metric(&format!("sluice_obj_requests_total{labels}")),
            self.metric(&format!("sluice_obj_segments_total{labels}")),
        )
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (sluice_types::splitmix64(seed ^ i) & 0xff) as u8)
        .collect()
}

/// `threads` threads each write `per_thread` 4 KiB blocks at random
/// block offsets of the export through `device`.
fn hammer(device: &ExportDevice, threads: usize, per_thread: u64) {
    std::thread::scope(|s| {
        for t in 0..threads as u64 {
            s.spawn(move || {
                let data = pattern(t, BLOCK as usize);
                for i in 0..per_thread {
                    let block = sluice_types::splitmix64(i ^ (t << 32)) % (SIZE / BLOCK);
                    device.write_at(&data, block * BLOCK, false).unwrap();
                }
            });
        }
    });
}

/// Runs `round` until the server has run a fused `command`, at most
/// `rounds` times; returns what [`Fixture::fused`] says then. Whether
/// callers meet in the send queue is up to the scheduler, so a round
/// may fuse nothing; the count, not the time, decides.
fn until_fused(f: &Fixture, command: &str, rounds: usize, mut round: impl FnMut()) -> (u64, u64) {
    for _ in 0..rounds {
        round();
        if f.fused(command).0 > 0 {
            break;
        }
    }
    f.fused(command)
}

#[test]
fn adaptive_fuses_many_concurrent_writers_and_none_below_the_threshold() {
    let f = start();
    let device = f.device(MergePolicy::Adaptive);
    assert_eq!(device.client().merge_policy(), MergePolicy::Adaptive);
    // Below: one caller at a time, then just under the hold threshold;
    // enough requests for many measuring windows, and nothing fused.
    hammer(&device, 1, 1000);
    hammer(&device, HOLD_IN_FLIGHT - 1, 1000);
    assert_eq!(f.fused("extent_write"), (0, 0));
    assert_eq!(device.client().merge_stats().frames, 0);
    assert_eq!(f.metric("sluice_obj_batches_total"), 0);
    // Above: many callers keep requests in flight; adaptive tries
    // merging at each level of load before it compares, so fused
    // commands form.
    let (commands, requests) = until_fused(&f, "extent_write", 30, || hammer(&device, 32, 100));
    assert!(commands > 0, "no fused write in 30 rounds of 32 writers");
    assert!(requests >= 2 * commands, "{requests} writes in {commands}");
    // What the client fused is what the server ran, and nothing went in
    // batch frames: every group of block writes was fused.
    let stats = device.client().merge_stats();
    assert_eq!((stats.frames, stats.merged), (commands, requests));
    assert_eq!(f.metric("sluice_obj_batches_total"), 0);
    eprintln!("{requests} writes in {commands} fused commands");
}

#[test]
fn off_never_fuses() {
    let f = start();
    let device = f.device(MergePolicy::Off);
    for _ in 0..3 {
        hammer(&device, 32, 100);
    }
    assert_eq!(f.fused("extent_write"), (0, 0));
    assert_eq!(device.client().merge_stats().frames, 0);
}

/// Called after each write of a script, with the thread and the write's
/// number.
type AfterWrite<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// One thread's writes: random offsets and lengths inside its own
/// stripe of the export (so its model, which starts as `model`, is its
/// own), then reads of random ranges of the stripe, all while the other
/// threads do the same.
fn script(
    device: &ExportDevice,
    t: u64,
    mut model: Vec<u8>,
    steps: u64,
    after_write: AfterWrite<'_>,
) -> Result<Vec<u8>, String> {
    let stripe = model.len() as u64;
    let base = t * stripe;
    let random = |i: u64, k: u64| sluice_types::splitmix64(i ^ (t << 40) ^ (k << 20));
    for i in 0..steps {
        let len = 1 + random(i, 1) % (2 * BLOCK);
        let at = random(i, 2) % (stripe - len);
        let data = pattern(random(i, 3), len as usize);
        device
            .write_at(&data, base + at, false)
            .map_err(|e| format!("thread {t} write {i}: {e}"))?;
        model[at as usize..(at + len) as usize].copy_from_slice(&data);
        after_write(t, i);
    }
    for i in 0..steps {
        let len = 1 + random(i, 4) % (2 * BLOCK);
        let at = random(i, 5) % (stripe - len);
        let mut got = vec![0u8; len as usize];
        device
            .read_at(&mut got, base + at)
            .map_err(|e| format!("thread {t} read {i}: {e}"))?;
        if got[..] != model[at as usize..(at + len) as usize] {
            return Err(format!("thread {t} read {i} of {len} at {at} differs"));
        }
    }
    Ok(model)
}

/// Runs `script` on `threads` threads at once (each its own stripe),
/// then checks the export's own bytes are their models', stripe by
/// stripe.
fn round(f: &Fixture, device: &ExportDevice, threads: u64, after_write: AfterWrite<'_>) {
    let stripe = SIZE / threads;
    let models: Vec<Result<Vec<u8>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mut model = vec![0u8; stripe as usize];
                f.disk.read_at(&mut model, t * stripe).unwrap();
                s.spawn(move || script(device, t, model, 150, after_write))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, model) in models.into_iter().enumerate() {
        let model = model.unwrap();
        let mut disk = vec![0u8; stripe as usize];
        f.disk.read_at(&mut disk, t as u64 * stripe).unwrap();
        assert!(disk == model, "stripe {t} of the export differs");
    }
}

#[test]
fn fused_writes_and_reads_keep_every_callers_bytes() {
    let f = start();
    let device = f.device(MergePolicy::Always);
    let mut rounds = 0;
    // Until both writes and reads were fused at least once (up to the
    // scheduler, so counted, not timed).
    while rounds < 20 && (f.fused("extent_write").0 == 0 || f.fused("extent_read").0 == 0) {
        rounds += 1;
        round(&f, &device, 24, &|_, _| {});
    }
    let (writes, _) = f.fused("extent_write");
    let (reads, _) = f.fused("extent_read");
    assert!(
        writes > 0 && reads > 0,
        "{writes} fused writes, {reads} reads"
    );
}

/// The connection is lost twice while many callers' writes are in
/// flight, fused: the client gets it back and sends what had no reply
/// again, one by one, and every caller's bytes are where its model says.
#[test]
fn fused_requests_lost_with_the_connection_are_sent_again() {
    let f = start();
    let relay = relay::Relay::start(f.server.obj_addr.unwrap());
    let uri: ExportUri = format!("{}/disk?merge=always", relay.uri).parse().unwrap();
    let options = ObjOptions {
        reconnect: Reconnect::within(Duration::from_secs(30)),
        ..ObjOptions::default()
    };
    let device = ExportDevice::connect(&uri, &options).unwrap();
    // Thread 0 cuts the connection after its 40th and 100th writes,
    // while the others write on.
    round(&f, &device, 24, &|t, i| {
        if t == 0 && (i == 40 || i == 100) {
            relay.cut();
        }
    });
    assert_eq!(relay.accepted(), 3, "two reconnects");
    assert!(f.fused("extent_write").0 > 0, "nothing was fused");
}

#[test]
fn the_export_is_checked_and_named() {
    let f = start();
    let device = f.device(MergePolicy::Always);
    assert_eq!(device.size(), SIZE);
    assert!(device.name().contains("/disk"), "{}", device.name());
    let e = device.write_at(&[1; 8], SIZE - 4, false).unwrap_err();
    assert!(e.to_string().contains("outside"), "{e}");
    let uri: ExportUri = format!("{}/nothing", f.server.obj_uri()).parse().unwrap();
    assert!(ExportDevice::connect(&uri, &ObjOptions::default()).is_err());
}

/// A layer over the export's memory that counts its flushes.
#[derive(Debug)]
struct CountsFlushes {
    inner: Arc<MemDevice>,
    flushes: std::sync::atomic::AtomicU64,
}

impl sluice_storage::DeviceLayer for CountsFlushes {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn flush(&self) -> Result<(), sluice_storage::DeviceError> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.flush()
    }
}

#[test]
fn a_flush_reaches_the_exports_device() {
    let dir = tempfile::tempdir().unwrap();
    let disk = Arc::new(CountsFlushes {
        inner: Arc::new(MemDevice::new(SIZE, false)),
        flushes: Default::default(),
    });
    let server = TestServer::builder()
        .export("disk", disk.clone())
        .objects(dir.path().join("objects"))
        .start();
    let uri: ExportUri = format!("{}/disk", server.obj_uri()).parse().unwrap();
    let device = ExportDevice::connect(&uri, &ObjOptions::default()).unwrap();
    assert!(device.capability().flush);
    device.write_at(&[5; 4096], 0, false).unwrap();
    let before = disk.flushes.load(std::sync::atomic::Ordering::SeqCst);
    device.flush().unwrap();
    assert_eq!(
        disk.flushes.load(std::sync::atomic::Ordering::SeqCst),
        before + 1
    );
    // A session that did not negotiate it refuses to send one.
    let old = ObjOptions {
        features: sluice_client::obj::Features(
            sluice_client::obj::Features::NEGOTIABLE.0
                & !sluice_client::obj::Features::EXPORT_FLUSH.0,
        ),
        ..ObjOptions::default()
    };
    let device = ExportDevice::connect(&uri, &old).unwrap();
    assert!(!device.capability().flush);
    let e = device.flush().unwrap_err();
    assert!(e.to_string().contains("flush"), "{e}");
    assert_eq!(
        disk.flushes.load(std::sync::atomic::Ordering::SeqCst),
        before + 1
    );
}
