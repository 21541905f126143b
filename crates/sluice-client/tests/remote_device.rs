#![allow(clippy::unwrap_used)]
//! `RemoteDevice` as a `BlockDevice` against real servers: sluice (in
//! process), nbdkit's memory and file plugins and qemu-nbd (both
//! installed by scripts/test; a missing one fails the test saying so).
//! Round trips, flush, trim, zeroes, extents, and out-of-range errors.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_client::RemoteDevice;
use sluice_server::{Export, ListenAddr, Server, ServerConfig};
use sluice_storage::{BlockDevice, BlockingClass, DeviceError, IoOp, MemDevice, ZeroMode};

const SIZE: u64 = 8 << 20;

/// A server process on a Unix socket, killed on drop.
struct Peer {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    fn start(program: &str, args: impl FnOnce(&Path, &Path) -> Vec<String>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("nbd.sock");
        let argv = args(&socket, dir.path());
        let child = Command::new(program)
            .args(&argv)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program} (scripts/test installs it): {e}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "{program} {argv:?} did not create its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            socket,
            _dir: dir,
        }
    }

    fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }
}

fn image(dir: &Path) -> PathBuf {
    let path = dir.join("disk.img");
    std::fs::File::create(&path).unwrap().set_len(SIZE).unwrap();
    path
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

/// The behaviour every remote export must show.
fn exercise(dev: &RemoteDevice, name: &str) {
    let cap = dev.capability();
    assert_eq!(dev.size(), SIZE, "{name}");
    assert_eq!(cap.blocking, BlockingClass::Always, "{name}");
    assert!(!cap.read_only && cap.flush, "{name}: {cap:?}");
    // Round trips, aligned and not, small and larger than one request.
    for (i, (at, len)) in [
        (0u64, 512usize),
        (4096, 65536),
        (1 << 20, 3 << 20),
        (SIZE - 512, 512),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, i as u8);
        dev.write_at(&data, at, i % 2 == 0).unwrap();
        let mut back = vec![0u8; len];
        dev.read_at(&mut back, at).unwrap();
        assert!(back == data, "{name}: round trip at {at}");
    }
    dev.flush().unwrap();
    // Zeroes read back as zeroes, whether the range may be trimmed or not.
    for may_trim in [false, true] {
        dev.write_zeroes(
            4096,
            8192,
            ZeroMode {
                may_trim,
                fast: false,
                fua: false,
            },
        )
        .unwrap();
        let mut back = vec![1u8; 8192];
        dev.read_at(&mut back, 4096).unwrap();
        assert!(back.iter().all(|&b| b == 0), "{name}: zeroes");
    }
    // Trim is a hint: it must succeed, and leave the rest alone.
    dev.trim(2 << 20, 1 << 20, false).unwrap();
    let mut back = vec![0u8; 4096];
    dev.read_at(&mut back, 1 << 20).unwrap();
    assert!(
        back == pattern(3 << 20, 2)[..4096],
        "{name}: trim spared the rest"
    );
    // Extents cover what they describe; written data is not a hole.
    let extents = dev.extents(0, SIZE, 1024).unwrap();
    let covered: u64 = extents.iter().map(|e| e.length).sum();
    assert!(
        !extents.is_empty() && covered <= SIZE,
        "{name}: {extents:?}"
    );
    assert!(!extents[0].hole, "{name}: written data reported as a hole");
    let one = dev.extents(1 << 20, 4096, 1).unwrap();
    assert_eq!(one.len(), 1, "{name}");
    dev.cache(0, 65536).unwrap();
    // Out of range is refused as such, for every kind of request.
    let mut buf = [0u8; 1024];
    assert!(matches!(
        dev.read_at(&mut buf, SIZE - 512),
        Err(DeviceError::OutOfRange {
            op: IoOp::Read,
            size: SIZE,
            ..
        })
    ));
    assert!(matches!(
        dev.write_at(&buf, SIZE, false),
        Err(DeviceError::OutOfRange {
            op: IoOp::Write,
            ..
        })
    ));
    assert!(matches!(
        dev.trim(SIZE - 512, 1024, false),
        Err(DeviceError::OutOfRange { op: IoOp::Trim, .. })
    ));
    // Many callers at once on one device.
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                let data = pattern(32768, t as u8 + 40);
                let at = (4 << 20) + t * 32768;
                dev.write_at(&data, at, false).unwrap();
                let mut back = vec![0u8; 32768];
                dev.read_at(&mut back, at).unwrap();
                assert!(back == data, "{name}: concurrent round trip");
            });
        }
    });
}

#[test]
fn against_sluice() {
    let config = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        ..ServerConfig::default()
    };
    let export = Arc::new(Export::new(
        "disk".into(),
        String::new(),
        Arc::new(MemDevice::new(SIZE, false)),
    ));
    let server = Server::bind_exports(config, vec![export]).unwrap();
    let ListenAddr::Tcp(addr) = server.local_addrs()[0].clone() else {
        panic!("tcp")
    };
    let handle = server.handle();
    let thread = std::thread::spawn(move || server.run());
    let dev = RemoteDevice::open(&format!("nbd://{addr}/disk")).unwrap();
    assert!(dev.capability().extents && dev.capability().trim);
    exercise(&dev, "sluice");
    drop(dev);
    handle.shutdown();
    thread.join().unwrap().unwrap();
}

#[test]
fn against_nbdkit_memory_and_file() {
    let memory = Peer::start("nbdkit", |sock, _| {
        vec![
            "-f".into(),
            "-U".into(),
            sock.display().to_string(),
            "memory".into(),
            format!("size={SIZE}"),
        ]
    });
    exercise(&RemoteDevice::open(&memory.uri()).unwrap(), "nbdkit memory");
    let file = Peer::start("nbdkit", |sock, dir| {
        vec![
            "-f".into(),
            "-U".into(),
            sock.display().to_string(),
            "file".into(),
            image(dir).display().to_string(),
        ]
    });
    exercise(&RemoteDevice::open(&file.uri()).unwrap(), "nbdkit file");
}

#[test]
fn against_qemu_nbd() {
    let qemu = Peer::start("qemu-nbd", |sock, dir| {
        vec![
            "--persistent".into(),
            "-f".into(),
            "raw".into(),
            "-k".into(),
            sock.display().to_string(),
            "--discard=unmap".into(),
            image(dir).display().to_string(),
        ]
    });
    exercise(&RemoteDevice::open(&qemu.uri()).unwrap(), "qemu-nbd");
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
