#![allow(clippy::unwrap_used)]
//! In-process tests: a real `Server` on an ephemeral port, driven by a
//! raw NBD client written against the spec's byte layouts, with test
//! devices that make completion order and parallelism observable.

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_server::{PipelineMode, ServerConfig};
use sluice_storage::{BlockDevice, MemDevice};
use sluice_testkit::raw_nbd::*;
use sluice_testkit::test_server::TestServer;
use sluice_testkit::GatedDevice;

/// A server with `device` as its default export, 8 I/O threads and a
/// metrics endpoint.
fn start(device: Arc<dyn BlockDevice>, pipeline: PipelineMode) -> TestServer {
    TestServer::builder()
        .export("default", device)
        .config(|c| {
            c.pipeline = pipeline;
            c.io_threads = 8;
        })
        .metrics()
        .start()
}

fn gated(gate_offsets: Vec<u64>) -> Arc<GatedDevice> {
    let dev = Arc::new(GatedDevice::new(1 << 20, gate_offsets));
    for i in 0..16u64 {
        dev.write_at(&[i as u8 + 1; 4096], i * 4096, false).unwrap();
    }
    dev
}

#[test]
fn flexible_pipeline_replies_in_completion_order() {
    let dev = gated(vec![0]);
    let server = start(dev.clone(), PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 1, 0, 4096, &[]);
    c.send(CMD_READ, 2, 4096, 4096, &[]);
    let (cookie, err, data) = c.reply();
    assert_eq!(
        (cookie, err),
        (2, 0),
        "the ungated read must overtake the gated one"
    );
    assert_eq!(data, vec![2u8; 4096]);
    dev.open_gate();
    let (cookie, err, data) = c.reply();
    assert_eq!((cookie, err), (1, 0));
    assert_eq!(data, vec![1u8; 4096]);
    server.stop().unwrap();
}

/// A gated device that says it never blocks, so the server reads it on
/// the connection thread: a gated read holds that thread.
#[derive(Debug)]
struct GatedInline(Arc<GatedDevice>);

impl sluice_storage::DeviceLayer for GatedInline {
    fn inner(&self) -> &dyn BlockDevice {
        self.0.as_ref()
    }
    fn capability(&self) -> sluice_storage::Capability {
        sluice_storage::Capability {
            blocking: sluice_storage::BlockingClass::Never,
            ..BlockDevice::capability(self.0.as_ref())
        }
    }
}

/// Replies read on the connection thread wait there to go out together,
/// but never more than a few tens of KiB of them: the client starts on
/// two 48 KiB reads while the connection thread is held by the gated
/// read that arrived with them.
#[test]
fn queued_replies_go_out_before_the_connection_thread_runs_a_long_request() {
    let gate = gated(vec![512 << 10]);
    let server = start(Arc::new(GatedInline(gate.clone())), PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    c.s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.send_many(&[
        (CMD_READ, 1, 0, 48 << 10),
        (CMD_READ, 2, 48 << 10, 48 << 10),
        (CMD_READ, 3, 512 << 10, 4096),
    ]);
    for want in [1, 2] {
        let (cookie, err, data) = c.reply();
        assert_eq!((cookie, err), (want, 0), "a read before the gated one");
        assert_eq!(data.len(), 48 << 10);
    }
    gate.open_gate();
    let (cookie, err, _) = c.reply();
    assert_eq!((cookie, err), (3, 0));
    server.stop().unwrap();
}

/// The later reads run and finish while the first is held at the gate
/// (the connection thread hands each to the pool and reads on), but
/// their replies wait for the first's. The first read is sent alone and
/// held before the others are sent: sent together, a pool worker may
/// take the first and be scheduled only after the others finished.
#[test]
fn fixed_pipeline_replies_in_request_order_but_runs_in_parallel() {
    let dev = gated(vec![0]);
    let server = start(dev.clone(), PipelineMode::Fixed);
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 1, 0, 4096, &[]);
    dev.wait_until("the first read to wait at the gate", |d| {
        d.held.load(Ordering::SeqCst) == 1
    });
    for i in 1..8u64 {
        c.send(CMD_READ, 1 + i, i * 4096, 4096, &[]);
    }
    dev.wait_until("the seven later reads to finish", |d| {
        d.finished.load(Ordering::SeqCst) == 7
    });
    assert_eq!(dev.held.load(Ordering::SeqCst), 1, "the first read is held");
    dev.open_gate();
    for i in 0..8u64 {
        let (cookie, err, data) = c.reply();
        assert_eq!((cookie, err), (1 + i, 0), "replies in request order");
        assert_eq!(data, vec![i as u8 + 1; 4096]);
    }
    server.stop().unwrap();
}

#[test]
fn pipeline_off_serves_one_request_at_a_time() {
    let dev = gated(vec![]);
    let server = start(dev.clone(), PipelineMode::Off);
    let mut c = RawClient::connect(server.addr);
    for i in 0..16u64 {
        c.send(CMD_READ, i, i * 4096, 4096, &[]);
    }
    for i in 0..16u64 {
        let (cookie, err, data) = c.reply();
        assert_eq!((cookie, err), (i, 0));
        assert_eq!(data, vec![i as u8 + 1; 4096]);
    }
    assert_eq!(dev.max_running.load(Ordering::SeqCst), 1);
    server.stop().unwrap();
}

#[test]
fn device_reads_of_many_connections_run_in_parallel() {
    // Two gated reads on two connections: if the server serialised device
    // I/O, the second would never start while the first waits.
    let dev = gated(vec![0, 4096]);
    let server = start(dev.clone(), PipelineMode::Flexible);
    let mut a = RawClient::connect(server.addr);
    let mut b = RawClient::connect(server.addr);
    a.send(CMD_READ, 1, 0, 4096, &[]);
    b.send(CMD_READ, 2, 4096, 4096, &[]);
    dev.wait_until("both gated reads to run", |d| {
        d.running.load(Ordering::SeqCst) == 2
    });
    dev.open_gate();
    assert_eq!(a.reply().0, 1);
    assert_eq!(b.reply().0, 2);
    server.stop().unwrap();
}

#[test]
fn client_vanishing_mid_payload_does_not_disturb_others() {
    let dev = Arc::new(MemDevice::new(1 << 20, false));
    let server = start(dev, PipelineMode::Flexible);
    let mut good = RawClient::connect(server.addr);
    good.send(CMD_WRITE, 1, 0, 4, b"good");
    assert_eq!(good.reply().1, 0);
    {
        let mut bad = RawClient::connect(server.addr);
        // Header promises 64 KiB, only 100 bytes arrive, then the socket closes.
        bad.send(CMD_WRITE, 9, 0, 65536, &[0xee; 100]);
    }
    // A client sending garbage as a request header is cut off too.
    {
        let mut garbage = RawClient::connect(server.addr);
        garbage.s.write_all(&[0x55; 28]).unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(
            garbage.s.read(&mut byte).unwrap_or(0),
            0,
            "server must hang up"
        );
    }
    good.send(CMD_READ, 2, 0, 8, &[]);
    let (cookie, err, data) = good.reply();
    assert_eq!((cookie, err), (2, 0));
    assert_eq!(&data[..4], b"good");
    assert_eq!(
        &data[4..],
        &[0, 0, 0, 0],
        "the vanished client's partial payload was not written"
    );
    server.stop().unwrap();
}

#[test]
fn errors_keep_the_connection_usable() {
    let dev = Arc::new(MemDevice::new(1 << 20, false));
    let server = start(dev, PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 1, (1 << 20) - 1, 2, &[]);
    assert_eq!(c.reply().1, 22, "read past the end: EINVAL");
    c.send(CMD_WRITE, 2, (1 << 20) - 1, 2, b"xy");
    assert_eq!(
        c.reply().1,
        28,
        "write past the end: ENOSPC (payload consumed)"
    );
    c.send(77, 3, 0, 0, &[]);
    assert_eq!(c.reply().1, 22, "unknown command: EINVAL");
    c.send(CMD_READ, 4, 0, u64::from(u32::MAX), &[]);
    assert_eq!(c.reply().1, 75, "oversized read: EOVERFLOW");
    c.send(CMD_WRITE, 5, 0, 3, b"abc");
    assert_eq!(c.reply().1, 0);
    c.send(CMD_READ, 6, 0, 3, &[]);
    assert_eq!(c.reply(), (6, 0, b"abc".to_vec()));
    server.stop().unwrap();
}

#[test]
fn shutdown_finishes_in_flight_requests() {
    let dev = gated(vec![0]);
    let server = start(dev.clone(), PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 1, 0, 4096, &[]);
    while dev.running.load(Ordering::SeqCst) < 1 {
        std::thread::sleep(Duration::from_millis(2));
    }
    let handle = server.handle.clone();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        handle.shutdown();
    });
    std::thread::sleep(Duration::from_millis(100));
    dev.open_gate();
    let (cookie, err, data) = c.reply();
    assert_eq!((cookie, err, data), (1, 0, vec![1u8; 4096]));
    stopper.join().unwrap();
    server.stop().unwrap();
}

fn metric(text: &str, line_prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(line_prefix)
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {line_prefix} in metrics:\n{text}"))
}

#[test]
fn metrics_endpoint_counts_requests_bytes_errors_and_latency() {
    let dev = gated(vec![]);
    let server = start(dev, PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    for i in 0..10u64 {
        c.send(CMD_READ, i, i * 4096, 4096, &[]);
    }
    c.send(CMD_WRITE, 10, 0, 512, &[1; 512]);
    c.send(CMD_READ, 11, 1 << 30, 1, &[]);
    for _ in 0..12 {
        c.reply();
    }
    // A pool worker records its request after sending the reply (the
    // latency includes the send), so the last counts may land just after
    // the client has its replies: wait for them, within a bound.
    let base = "{export=\"default\",command=";
    let read_count = format!("sluice_request_duration_seconds_count{base}\"read\"}}");
    let write_count = format!("sluice_requests_total{base}\"write\"}}");
    let counted = |text: &str, series: &str, want: f64| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse::<f64>().ok())
            .is_some_and(|v| v >= want)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = server.scrape();
        let settled = counted(&text, &read_count, 10.0) && counted(&text, &write_count, 1.0);
        if settled || Instant::now() >= deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(
        metric(&text, &format!("sluice_requests_total{base}\"read\"}}")),
        10.0
    );
    assert_eq!(
        metric(
            &text,
            &format!("sluice_request_bytes_total{base}\"read\"}}")
        ),
        40960.0
    );
    assert_eq!(
        metric(&text, &format!("sluice_requests_total{base}\"write\"}}")),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            &format!("sluice_request_errors_total{base}\"invalid\"}}")
        ),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            &format!("sluice_request_duration_seconds_count{base}\"read\"}}")
        ),
        10.0
    );
    // The gated device is always-blocking, so every request went to the pool.
    assert_eq!(metric(&text, "sluice_handoffs_total "), 11.0);
    assert_eq!(metric(&text, "sluice_connections_active "), 1.0);
    assert!(
        metric(
            &text,
            "sluice_stage_busy_seconds_total{stage=\"execute_pool\"}"
        ) > 0.0
    );
    // Present and sane; a short test process may not have used a full
    // clock tick (10 ms) of CPU yet, so zero is possible.
    let cpu = metric(&text, "process_cpu_seconds_total ");
    assert!((0.0..1e6).contains(&cpu), "{cpu}");
    server.stop().unwrap();
}

#[test]
fn large_reads_send_ready_pieces_before_slow_ones() {
    // The first 256 KiB piece waits at the gate; the other three must
    // arrive as data chunks before it, then it, then the final chunk.
    let dev = Arc::new(GatedDevice::new(4 << 20, vec![0]));
    dev.write_at(&[9u8; 1 << 20], 0, false).unwrap();
    let server = start(dev.clone(), PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 77, 0, 1 << 20, &[]);
    let mut offsets = Vec::new();
    for _ in 0..3 {
        let Chunk {
            flags,
            kind,
            cookie,
            payload,
            ..
        } = c.chunk();
        assert_eq!(
            (flags & REPLY_FLAG_DONE, kind, cookie),
            (0, REPLY_TYPE_OFFSET_DATA, 77)
        );
        assert_eq!(payload.len(), 8 + 256 * 1024);
        assert!(payload[8..].iter().all(|&b| b == 9));
        offsets.push(be64(&payload));
    }
    offsets.sort_unstable();
    assert_eq!(offsets, vec![256 * 1024, 512 * 1024, 768 * 1024]);
    dev.open_gate();
    let chunk = c.chunk();
    assert_eq!(
        (
            chunk.flags & REPLY_FLAG_DONE,
            chunk.kind,
            be64(&chunk.payload)
        ),
        (0, REPLY_TYPE_OFFSET_DATA, 0)
    );
    let chunk = c.chunk();
    assert_eq!(
        (chunk.flags, chunk.kind, chunk.cookie, chunk.payload.len()),
        (REPLY_FLAG_DONE, REPLY_TYPE_NONE, 77, 0)
    );
    server.stop().unwrap();
}

/// A server with one buffered file export and the given `mapped_reads`.
fn file_server(dir: &tempfile::TempDir, mapped_reads: bool) -> TestServer {
    file_server_with(dir, |c| c.fast_paths.mapped_reads = mapped_reads)
}

/// A server with one 4 MiB buffered file export, the configuration
/// `change` makes, and metrics.
fn file_server_with(dir: &tempfile::TempDir, change: impl FnOnce(&mut ServerConfig)) -> TestServer {
    let device = sluice_storage::FileDevice::open(
        &dir.path().join("img"),
        &sluice_storage::FileOptions {
            size: Some(4 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    TestServer::builder()
        .export("default", Arc::new(device))
        .config(change)
        .metrics()
        .start()
}

#[test]
fn large_page_cache_reads_are_sent_from_the_mapping_and_match() {
    for mapped in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let server = file_server(&dir, mapped);
        let mut c = RawClient::connect(server.addr);
        let data: Vec<u8> = (0..(1u32 << 20))
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        c.send(CMD_WRITE, 1, 1 << 20, data.len() as u64, &data);
        assert_eq!(c.reply().1, 0, "write");
        // A 1 MiB read (mapped when on), a 4 KiB one (never mapped), and
        // one overlapping the end of the written range.
        c.send(CMD_READ, 2, 1 << 20, 1 << 20, &[]);
        c.send(CMD_READ, 3, (1 << 20) + 4096, 4096, &[]);
        c.send(CMD_READ, 4, (2 << 20) - 65536, 256 << 10, &[]);
        let mut replies: Vec<_> = (0..3).map(|_| c.reply()).collect();
        replies.sort_by_key(|r| r.0);
        assert_eq!(
            replies[0],
            (2, 0, data.clone()),
            "1 MiB read (mapped {mapped})"
        );
        assert_eq!(replies[1], (3, 0, data[4096..8192].to_vec()));
        let mut want = data[(1 << 20) - 65536..].to_vec();
        want.resize(256 << 10, 0);
        assert_eq!(replies[2], (4, 0, want), "read past the written range");
        let text = server.scrape();
        let sent_mapped = metric(&text, "sluice_mapped_reads_total ");
        if mapped {
            // The third reaches into a hole no one has read, which is not
            // in the page cache: it takes the ordinary path.
            assert_eq!(sent_mapped, 1.0, "the 1 MiB read of written data");
        } else {
            assert_eq!(sent_mapped, 0.0);
        }
        server.stop().unwrap();
    }
}

/// A client keeping 16 reads of `data` (already written at offset 0) in
/// flight, each sent with its own `send` (as libnbd does), until the
/// server has made at least one coalescing wait or `deadline` passes;
/// every reply is checked against the data. Returns the server's
/// coalescing waits.
fn run_deep_queue(c: &mut RawClient, server: &TestServer, data: &[u8], deadline: Duration) -> f64 {
    let blocks = (data.len() / 4096) as u64;
    let started = Instant::now();
    let mut next = 1u64;
    for _ in 0..16 {
        c.send(CMD_READ, next, (next % blocks) * 4096, 4096, &[]);
        next += 1;
    }
    let mut answered = 0u64;
    let waits = loop {
        let (cookie, error, got) = c.reply();
        assert_eq!(error, 0, "read {cookie}");
        let at = ((cookie % blocks) * 4096) as usize;
        assert!(
            got == data[at..at + 4096],
            "read {cookie} returned other data"
        );
        answered += 1;
        if answered.is_multiple_of(2048) {
            let waits = metric(&server.scrape(), "sluice_coalesced_waits_total ");
            if waits > 0.0 || started.elapsed() > deadline {
                break waits;
            }
        }
        c.send(CMD_READ, next, (next % blocks) * 4096, 4096, &[]);
        next += 1;
    };
    for _ in 0..15 {
        assert_eq!(c.reply().1, 0);
    }
    waits
}

#[test]
fn deep_queues_of_single_sends_are_coalesced_and_answered_correctly() {
    let data: Vec<u8> = (0..(256u32 << 10))
        .map(|i| (i / 4096 * 31 + i) as u8)
        .collect();
    for coalesce_max in [8, 1] {
        let server = TestServer::builder()
            .export("default", Arc::new(MemDevice::new(1 << 20, false)))
            .config(|c| c.receive.coalesce_max = coalesce_max)
            .metrics()
            .start();
        let limit = if coalesce_max > 1 { 10 } else { 1 };
        let mut c = RawClient::connect(server.addr);
        c.s.set_nodelay(true).unwrap();
        c.send(CMD_WRITE, 0, 0, data.len() as u64, &data);
        assert_eq!(c.reply().1, 0, "write");
        let waits = run_deep_queue(&mut c, &server, &data, Duration::from_secs(limit));
        if coalesce_max > 1 {
            // Trials start after a 50 ms warm-up and try a batch of 2 in
            // the first round whatever it gains.
            assert!(waits > 0.0, "no coalescing wait in {limit} s");
        } else {
            assert_eq!(waits, 0.0, "coalescing is off");
        }
        server.stop().unwrap();
    }
}

/// A server over a 1 MiB file in `dir` with metrics, and the file's
/// blocking class.
fn flush_server(dir: &std::path::Path) -> (TestServer, sluice_storage::BlockingClass) {
    let device = sluice_storage::FileDevice::open(
        &dir.join("img"),
        &sluice_storage::FileOptions {
            size: Some(1 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    let class = device.capability().blocking;
    let server = TestServer::builder()
        .export("default", Arc::new(device))
        .metrics()
        .start();
    (server, class)
}

/// Sends a 4 KiB write (unless `write` is false) and a FLUSH, waits for
/// both replies, and returns (hand-offs, syncs) so far.
fn write_and_flush(c: &mut RawClient, server: &TestServer, write: bool) -> (f64, f64) {
    if write {
        c.send(CMD_WRITE, 1, 0, 4096, &[5; 4096]);
        assert_eq!(c.reply(), (1, 0, Vec::new()));
    }
    c.send(CMD_FLUSH, 2, 0, 0, &[]);
    assert_eq!(c.reply(), (2, 0, Vec::new()));
    let text = server.scrape();
    (
        metric(&text, "sluice_handoffs_total "),
        metric(&text, "sluice_file_syncs_total{export=\"default\"} "),
    )
}

#[test]
fn a_flush_costs_what_its_dirty_data_costs() {
    // On a disk-backed file a FLUSH after a write syncs on the I/O pool;
    // one with nothing written since is answered on the connection
    // thread with no sync at all.
    let dir = tempfile::tempdir().unwrap();
    let (server, class) = flush_server(dir.path());
    if class == sluice_storage::BlockingClass::PageCache {
        let mut c = RawClient::connect(server.addr);
        assert_eq!(write_and_flush(&mut c, &server, true), (1.0, 1.0));
        assert_eq!(write_and_flush(&mut c, &server, false), (1.0, 1.0));
        assert_eq!(write_and_flush(&mut c, &server, false), (1.0, 1.0));
        assert_eq!(write_and_flush(&mut c, &server, true), (2.0, 2.0));
    } else {
        eprintln!("skipped the disk case: the temporary directory is {class:?}");
    }
    server.stop().unwrap();
    // A file in memory (tmpfs) never waits: its flushes sync inline.
    let Ok(shm) = tempfile::tempdir_in("/dev/shm") else {
        eprintln!("skipped the memory case: no /dev/shm");
        return;
    };
    let (server, class) = flush_server(shm.path());
    if class == sluice_storage::BlockingClass::Never {
        let mut c = RawClient::connect(server.addr);
        assert_eq!(write_and_flush(&mut c, &server, true), (0.0, 1.0));
        assert_eq!(write_and_flush(&mut c, &server, false), (0.0, 1.0));
        assert_eq!(write_and_flush(&mut c, &server, true), (0.0, 2.0));
    } else {
        eprintln!("skipped the memory case: /dev/shm is {class:?}");
    }
    server.stop().unwrap();
}

#[test]
fn large_write_payloads_are_spliced_into_the_file_and_read_back() {
    for spliced_writes in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let server = file_server_with(&dir, |c| c.fast_paths.spliced_writes = spliced_writes);
        let mut c = RawClient::connect(server.addr);
        let data: Vec<u8> = (0..(1u32 << 20))
            .map(|i| (i * 13 + i / 4093) as u8)
            .collect();
        // Part of the payload arrives with the header (written with
        // pwrite), the rest later (spliced), in several sizes.
        c.send_write_in_two(1, 1 << 20, &data, 1000);
        assert_eq!(c.reply(), (1, 0, Vec::new()), "1 MiB write");
        c.send_write_in_two(2, 3 << 20, &data[..256 << 10], 0);
        assert_eq!(c.reply().1, 0, "256 KiB write");
        // Smaller than the splicing threshold: copied.
        c.send_write_in_two(3, 0, &data[..64 << 10], 10);
        assert_eq!(c.reply().1, 0, "64 KiB write");
        // Out of range: refused before any byte is taken.
        c.send_write_in_two(4, 4 << 20, &data[..256 << 10], 100);
        assert_ne!(c.reply().1, 0, "write past the end");
        c.send(CMD_READ, 5, 1 << 20, 1 << 20, &[]);
        assert_eq!(c.reply(), (5, 0, data.clone()), "1 MiB read back");
        c.send(CMD_READ, 6, 3 << 20, 256 << 10, &[]);
        assert_eq!(c.reply().2, data[..256 << 10], "256 KiB read back");
        c.send(CMD_READ, 7, 0, 64 << 10, &[]);
        assert_eq!(c.reply().2, data[..64 << 10], "64 KiB read back");
        let on_disk = std::fs::read(dir.path().join("img")).unwrap();
        assert!(on_disk[1 << 20..2 << 20] == data[..], "file content");
        let spliced = metric(&server.scrape(), "sluice_spliced_writes_total ");
        assert_eq!(spliced, if spliced_writes { 2.0 } else { 0.0 });
        server.stop().unwrap();
    }
}

#[test]
fn spliced_writes_whose_last_bytes_trickle_in_are_answered_between_coalesced_reads() {
    // While a connection coalesces, its socket wakes it only once a batch
    // of bytes is there; a spliced write waiting for the last few bytes of
    // its payload must not wait for that many (it would stall until the
    // send timeout, 3 s here). A new connection tries batches of 2, 4 and
    // 8 for 10 ms each after a 50 ms warm-up, so writes sent behind 45 to
    // 105 ms of reads arrive while it coalesces, whatever it then keeps.
    let dir = tempfile::tempdir().unwrap();
    let server = file_server_with(&dir, |c| c.timeouts.send_timeout_secs = 3);
    let data: Vec<u8> = (0..(256u32 << 10))
        .map(|i| (i / 4096 * 7 + i) as u8)
        .collect();
    let payload: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 5 + i / 999) as u8).collect();
    {
        let mut c = RawClient::connect(server.addr);
        c.send(CMD_WRITE, 0, 0, data.len() as u64, &data);
        assert_eq!(c.reply().1, 0, "write");
    }
    let blocks = (data.len() / 4096) as u64;
    let before = metric(&server.scrape(), "sluice_spliced_writes_total ");
    let rounds = 21u64;
    for round in 0..rounds {
        let mut c = RawClient::connect(server.addr);
        c.s.set_nodelay(true).unwrap();
        let reads_for = Duration::from_millis(45 + 3 * round);
        let started = Instant::now();
        let mut next = 0u64;
        let mut answered = 0u64;
        let check = |c: &mut RawClient, answered: &mut u64| {
            let (cookie, error, got) = c.reply();
            assert_eq!(error, 0, "request {cookie} in round {round}");
            if cookie < 1 << 40 {
                let at = ((cookie % blocks) * 4096) as usize;
                assert!(
                    got == data[at..at + 4096],
                    "read {cookie} returned other data"
                );
                *answered += 1;
            }
        };
        while started.elapsed() < reads_for {
            c.send(CMD_READ, next, (next % blocks) * 4096, 4096, &[]);
            next += 1;
            if next >= 16 {
                check(&mut c, &mut answered);
            }
        }
        // The write goes out behind 15 reads in flight, its last 20
        // bytes 30 ms after the rest.
        c.send_write_in_two(1 << 40 | round, 2 << 20, &payload, payload.len() - 20);
        while answered < next {
            check(&mut c, &mut answered);
        }
        check(&mut c, &mut answered);
    }
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 7, 2 << 20, 1 << 20, &[]);
    assert!(c.reply().2 == payload, "1 MiB read back");
    let metrics = server.scrape();
    assert!(
        metric(&metrics, "sluice_coalesced_waits_total ") > 0.0,
        "never coalesced"
    );
    let spliced = metric(&metrics, "sluice_spliced_writes_total ");
    assert_eq!(spliced - before, rounds as f64);
    server.stop().unwrap();
}

#[test]
fn a_client_stalling_mid_spliced_payload_is_cut_off_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = file_server_with(&dir, |c| c.timeouts.send_timeout_secs = 1);
    let mut c = RawClient::connect(server.addr);
    let data = vec![0x5au8; 1 << 20];
    c.send_partial(0, CMD_WRITE, 1, 0, data.len() as u64, &data[..4096]);
    std::thread::sleep(Duration::from_millis(30));
    // More of the payload, then nothing: the server waits in its splicing
    // loop, where the stall timeout must still apply.
    c.s.write_all(&data[4096..512 << 10]).unwrap();
    let started = Instant::now();
    let mut byte = [0u8; 1];
    let n = c.s.read(&mut byte).unwrap_or(0);
    assert_eq!(n, 0, "the server closes the stalled connection");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "closed after {waited:?}, not after the 1 s stall timeout"
    );
    let on_disk = std::fs::read(dir.path().join("img")).unwrap();
    assert!(
        on_disk[..1 << 20].iter().all(|&b| b == 0),
        "nothing written"
    );
    assert_eq!(
        metric(&server.scrape(), "sluice_spliced_writes_total "),
        0.0
    );
    server.stop().unwrap();
}

#[test]
fn a_client_vanishing_mid_spliced_payload_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = file_server_with(&dir, |_| {});
    {
        let mut bad = RawClient::connect(server.addr);
        bad.send_partial(0, CMD_WRITE, 1, 0, 1 << 20, &[0xee; 1000]);
        std::thread::sleep(Duration::from_millis(30));
        bad.s.write_all(&[0xee; 300_000]).unwrap();
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut good = RawClient::connect(server.addr);
    good.send(CMD_READ, 2, 0, 1 << 20, &[]);
    let (_, error, got) = good.reply();
    assert_eq!(error, 0);
    assert!(
        got.iter().all(|&b| b == 0),
        "the vanished client's partial payload was not written"
    );
    server.stop().unwrap();
}

/// A memory device that records the longest single write it was given.
#[derive(Debug)]
struct WriteSizes {
    inner: MemDevice,
    longest: std::sync::atomic::AtomicUsize,
}

impl sluice_storage::DeviceLayer for WriteSizes {
    fn inner(&self) -> &dyn BlockDevice {
        &self.inner
    }
    fn write_at(
        &self,
        buf: &[u8],
        offset: u64,
        fua: bool,
    ) -> Result<(), sluice_storage::DeviceError> {
        self.longest.fetch_max(buf.len(), Ordering::SeqCst);
        self.inner.write_at(buf, offset, fua)
    }
}

#[test]
fn a_write_beyond_32_mib_is_received_into_the_device_in_pieces() {
    let dev = Arc::new(WriteSizes {
        inner: MemDevice::new(128 << 20, false),
        longest: Default::default(),
    });
    let server = start(dev.clone(), PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    let len = 48usize << 20;
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
    c.send(CMD_WRITE, 1, 4096, len as u64, &data);
    assert_eq!(c.reply(), (1, 0, Vec::new()));
    assert!(
        dev.longest.load(Ordering::SeqCst) <= 1 << 20,
        "the 48 MiB payload reached the device in one piece of {} bytes",
        dev.longest.load(Ordering::SeqCst)
    );
    c.send(CMD_READ, 2, 4096, len as u64, &[]);
    let (cookie, err, got) = c.reply();
    assert_eq!((cookie, err), (2, 0));
    assert!(got == data, "the 48 MiB read differs from the write");
    // Past the default 64 MiB maximum: refused, the connection usable.
    c.send(CMD_READ, 3, 0, 65 << 20, &[]);
    assert_eq!(
        c.reply().1,
        75,
        "oversized read, structured replies: EOVERFLOW"
    );
    c.send(CMD_READ, 4, 4096, 3, &[]);
    assert_eq!(c.reply(), (4, 0, data[..3].to_vec()));
    server.stop().unwrap();
}

#[test]
fn an_oversized_read_with_simple_replies_is_einval() {
    let server = start(
        Arc::new(MemDevice::new(1 << 20, false)),
        PipelineMode::Flexible,
    );
    let mut c = RawClient::open(RawClient::tcp(server.addr), "", Finish::Go, Replies::Simple);
    c.send(CMD_READ, 1, 0, u64::from(u32::MAX), &[]);
    assert_eq!(
        c.reply().1,
        22,
        "EINVAL, not EOVERFLOW, without chunked replies"
    );
    c.send(CMD_READ, 2, 0, 3, &[]);
    assert_eq!(c.reply(), (2, 0, vec![0; 3]));
    server.stop().unwrap();
}

#[test]
fn the_max_request_size_is_configurable() {
    let server = TestServer::builder()
        .export("default", Arc::new(MemDevice::new(8 << 20, false)))
        .config(|c| c.limits.max_request_size = 1 << 20)
        .start();
    let mut c = RawClient::connect(server.addr);
    c.send(CMD_READ, 1, 0, 1 << 20, &[]);
    assert_eq!(c.reply().1, 0);
    c.send(CMD_READ, 2, 0, 2 << 20, &[]);
    assert_eq!(c.reply().1, 75, "beyond --max-request-size");
    server.stop().unwrap();
}

#[test]
fn a_large_write_that_fails_drains_its_payload_and_keeps_the_connection() {
    let rule: sluice_storage::FaultRule = "write:eio:after=3".parse().unwrap();
    let dev = Arc::new(sluice_storage::FaultInjectionDevice::new(
        Arc::new(MemDevice::new(64 << 20, false)),
        "export \"default\"",
        vec![rule],
    ));
    let server = start(dev, PipelineMode::Flexible);
    let mut c = RawClient::connect(server.addr);
    let data = vec![0x3cu8; 40 << 20];
    c.send(CMD_WRITE, 1, 0, data.len() as u64, &data);
    assert_eq!(c.reply().1, 5, "a failed piece: EIO for the whole write");
    c.send(CMD_READ, 2, 0, 4096, &[]);
    assert_eq!(
        c.reply(),
        (2, 0, vec![0x3c; 4096]),
        "pieces before the failure"
    );
    server.stop().unwrap();
}
