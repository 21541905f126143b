#![allow(clippy::unwrap_used)]
//! What only a remote device has, against real servers: sluice (in
//! process), nbdkit's memory and file plugins and qemu-nbd (both
//! installed by scripts/test; a missing one fails the test saying so).
//! The device behaviour every stack shares is the conformance suite's
//! (tests/conformance.rs).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{image, Peer};
use sluice_client::RemoteDevice;
use sluice_server::{Export, ListenAddr, Server, ServerConfig};
use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, MemDevice};
use sluice_testkit::test_server::TestServer;

const SIZE: u64 = 8 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// What only a remote device shows (the conformance suite covers the
/// rest): its size is the export's, every call may block, the server's
/// flags become its capabilities, and a cache hint in range is taken.
fn remote_only(dev: &RemoteDevice, name: &str, expect: impl Fn(&Capability) -> bool) {
    let cap = dev.capability();
    assert_eq!(dev.size(), SIZE, "{name}");
    assert_eq!(cap.blocking, BlockingClass::Always, "{name}");
    assert!(
        !cap.read_only && cap.flush && expect(&cap),
        "{name}: {cap:?}"
    );
    dev.cache(0, 65536).unwrap();
}

/// nbdkit's memory plugin of `size` bytes, with `filters` and `params`
/// (plugin and filter parameters).
fn nbdkit_memory(size: u64, filters: &[&str], params: &[&str]) -> Peer {
    Peer::start("nbdkit", |sock, _| {
        let mut argv = vec!["-f".into(), "-U".into(), sock.display().to_string()];
        argv.extend(filters.iter().map(|f| format!("--filter={f}")));
        argv.extend(["memory".into(), format!("size={size}")]);
        argv.extend(params.iter().map(|p| (*p).to_owned()));
        argv
    })
}

#[test]
fn each_server_flags_become_the_device_capabilities() {
    let server = TestServer::builder()
        .export("disk", Arc::new(MemDevice::new(SIZE, false)))
        .start();
    remote_only(
        &RemoteDevice::open(&server.uri("disk")).unwrap(),
        "sluice",
        |c| c.extents && c.trim && c.write_zeroes && c.fast_zero && c.fua,
    );
    let memory = nbdkit_memory(SIZE, &[], &[]);
    remote_only(
        &RemoteDevice::open(&memory.uri()).unwrap(),
        "nbdkit memory",
        |c| c.extents && c.trim && c.write_zeroes && c.fast_zero,
    );
    // What a filter takes away, the device does not claim. (noextents
    // still negotiates base:allocation, answering with one data extent.)
    let bare = nbdkit_memory(SIZE, &["nozero", "noextents"], &["zeromode=none"]);
    remote_only(
        &RemoteDevice::open(&bare.uri()).unwrap(),
        "nbdkit memory without zeroes or extents",
        |c| !c.write_zeroes && !c.fast_zero,
    );
    let slow = nbdkit_memory(SIZE, &["nozero"], &["zeromode=plugin", "fastzeromode=none"]);
    remote_only(
        &RemoteDevice::open(&slow.uri()).unwrap(),
        "nbdkit memory without fast zero",
        |c| c.write_zeroes && !c.fast_zero,
    );
    let blocks = nbdkit_memory(SIZE, &["blocksize-policy"], &["blocksize-minimum=4096"]);
    remote_only(
        &RemoteDevice::open(&blocks.uri()).unwrap(),
        "nbdkit memory with 4 KiB blocks",
        |c| c.min_block == 4096,
    );
    let file = Peer::start("nbdkit", |sock, dir| {
        vec![
            "-f".into(),
            "-U".into(),
            sock.display().to_string(),
            "file".into(),
            image(dir, SIZE).display().to_string(),
        ]
    });
    remote_only(
        &RemoteDevice::open(&file.uri()).unwrap(),
        "nbdkit file",
        |c| c.extents && c.trim && c.write_zeroes,
    );
    let qemu = Peer::start("qemu-nbd", |sock, dir| {
        vec![
            "--persistent".into(),
            "-f".into(),
            "raw".into(),
            "-k".into(),
            sock.display().to_string(),
            "--discard=unmap".into(),
            image(dir, SIZE).display().to_string(),
        ]
    });
    remote_only(&RemoteDevice::open(&qemu.uri()).unwrap(), "qemu-nbd", |c| {
        c.extents && c.trim && c.write_zeroes
    });
}

/// With compact headers one block status request names at most 32 bits
/// of length, so the extents of a larger range take several requests;
/// the device must make them rather than return a short list with room
/// to spare.
#[test]
fn extents_of_a_range_longer_than_one_request_cover_it() {
    const BIG: u64 = 9 << 30;
    let memory = nbdkit_memory(BIG, &[], &[]);
    let dev = RemoteDevice::open(&memory.uri()).unwrap();
    dev.write_at(&pattern(4096, 1), 5 << 30, false).unwrap();
    let extents = dev.extents(0, BIG, 64).unwrap();
    assert_eq!(
        extents.iter().map(|e| e.length).sum::<u64>(),
        BIG,
        "{extents:?}"
    );
    // The written block, past the first request's reach, is data.
    let mut at = 0;
    let written = extents
        .iter()
        .find(|e| {
            at += e.length;
            at > 5 << 30
        })
        .unwrap();
    assert!(!written.zero && !written.hole, "{extents:?}");
    // Whole answers beyond the limit still stop at it.
    assert_eq!(dev.extents(0, BIG, 1).unwrap().len(), 1);
}

#[test]
fn a_batch_has_every_member_request_in_flight_at_once() {
    use sluice_testkit::GatedDevice;
    // Every member holds its read at offset 0 until the gates open, and
    // they open only once all four reads are waiting at their servers:
    // a batch that waited for each request before starting the next
    // would never get there.
    let gated: Vec<Arc<GatedDevice>> = (0..4)
        .map(|i| {
            let d = GatedDevice::new(1 << 20, vec![0]);
            d.write_at(&pattern(8192, i as u8), 0, false).unwrap();
            Arc::new(d)
        })
        .collect();
    let exports = gated
        .iter()
        .enumerate()
        .map(|(i, d)| Arc::new(Export::new(format!("m{i}"), String::new(), d.clone())))
        .collect();
    let config = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        ..ServerConfig::default()
    };
    let server = Server::bind_exports(config, exports).unwrap();
    let ListenAddr::Tcp(addr) = server.local_addrs()[0].clone() else {
        panic!("tcp")
    };
    let handle = server.handle();
    let thread = std::thread::spawn(move || server.run());
    let members: Vec<RemoteDevice> = (0..4)
        .map(|i| RemoteDevice::open(&format!("nbd://{addr}/m{i}")).unwrap())
        .collect();
    let opener = {
        let gated = gated.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(3);
            let all_waiting = loop {
                if gated.iter().all(|g| g.running.load(Ordering::SeqCst) == 1) {
                    break true;
                }
                if Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            for g in &gated {
                g.open_gate();
            }
            all_waiting
        })
    };
    let mut stripe = vec![0u8; 4 * 8192];
    let ((), results) = sluice_client::batch(|b| {
        for (m, buf) in members.iter().zip(stripe.chunks_mut(8192)) {
            b.read_at(m, buf, 0);
        }
        // Out of range: refused at its position, the others unaffected.
        b.read_at(&members[1], &mut [], (1 << 20) + 1);
    });
    assert!(
        opener.join().unwrap(),
        "the four member reads were never in flight together"
    );
    assert_eq!(results.len(), 5);
    for r in &results[..4] {
        assert!(r.is_ok(), "{r:?}");
    }
    assert!(matches!(results[4], Err(DeviceError::OutOfRange { .. })));
    for (i, buf) in stripe.chunks(8192).enumerate() {
        assert!(buf == pattern(8192, i as u8), "member {i}");
    }
    drop(members);
    handle.shutdown();
    thread.join().unwrap().unwrap();
}

/// An error and every cause under it, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// A server that went away and refuses connections: once the reconnect
/// window has run out, each request fails as the operation it was (a
/// flush as a flush, not "read of 0 bytes at offset 0"), saying the
/// connection could not be made, and to what (each waiting request got
/// a copy of the error, which said "the server broke the protocol:
/// cannot connect").
#[test]
fn a_refused_reconnect_is_reported_as_such_for_the_operation_asked_for() {
    let server = TestServer::builder()
        .export("disk", Arc::new(MemDevice::new(SIZE, false)))
        .start();
    let uri = server.uri("disk");
    // The server's address, as the client names the target.
    let addr = uri
        .trim_start_matches("nbd://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let options = sluice_client::ConnectOptions {
        reconnect: sluice_client::Reconnect::within(Duration::from_millis(300)),
        ..Default::default()
    };
    let dev = RemoteDevice::connect(&uri.parse().unwrap(), &options).unwrap();
    dev.flush().unwrap();
    server.stop().unwrap();
    let mut buf = vec![0u8; 4096];
    for (op, e) in [
        ("flush", dev.flush().unwrap_err()),
        ("read", dev.read_at(&mut buf, 0).unwrap_err()),
    ] {
        let text = chain(&e);
        assert!(text.starts_with(&format!("{op} of ")), "{text}");
        assert!(!text.contains("broke the protocol"), "{text}");
        assert!(text.contains("could not reconnect"), "{text}");
        assert!(
            text.contains(&format!("cannot connect to {addr}")),
            "{text}"
        );
        assert!(text.contains("refused"), "{text}");
    }
}
