//! The native object protocol against the `sluice serve` binary: the
//! default object listener of a bare `sluice serve`, and kill -9 with
//! everything flushed (data and attributes) found after a restart.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sluice_obj_proto::consts::*;
use sluice_obj_proto::{AttrOp, AttrValue, Features};
use sluice_testkit::raw_obj::{RawObjClient, Req};

use crate::harness::{random_bytes, tempdir, ServerBuilder};

fn open(addr: SocketAddr) -> RawObjClient<std::net::TcpStream> {
    RawObjClient::open(addr, Features::NEGOTIABLE, 1)
}

fn get_attr(c: &mut RawObjClient<std::net::TcpStream>, object: u64, key: &str) -> Option<i64> {
    let r = c
        .call(
            &Req::new(OP_GET_ATTRS, 50)
                .object(object)
                .attrs(&[AttrOp::Get(key)]),
        )
        .ok();
    match r.attr_ops().first() {
        Some(AttrOp::Set(_, AttrValue::Integer(v))) => Some(*v),
        Some(AttrOp::Remove(_)) => None,
        other => panic!("unexpected attribute answer {other:?}"),
    }
}

#[test]
fn kill_9_keeps_every_flushed_byte_and_attribute() {
    let dir = tempdir();
    let store = dir.path().join("objects");
    // What was flushed: (object, data, attribute "gen").
    let mut flushed: Vec<(u64, Vec<u8>, i64)> = Vec::new();
    for cycle in 0..4u64 {
        let mut server = ServerBuilder::new()
            .export("d", "mem:1M")
            .objects(&store)
            .start();
        let mut c = open(server.objects[0]);
        // Everything flushed before is there.
        for (object, data, generation) in &flushed {
            let (got, real) = c.read(*object, 0, data.len() as u64);
            assert_eq!(
                real,
                data.len() as u64,
                "cycle {cycle}: object {object:#x} length"
            );
            assert!(got == *data, "cycle {cycle}: object {object:#x} data");
            assert_eq!(
                get_attr(&mut c, *object, "gen"),
                Some(*generation),
                "cycle {cycle}"
            );
        }
        // New objects: one written then flushed, one written with FUA
        // (attributes riding on both), and older ones grown and re-tagged.
        let ids = c.create(2, "crash");
        let a = random_bytes(cycle * 2, 100_000);
        c.call(
            &Req::new(OP_WRITE, 1)
                .object(ids[0])
                .sgl(&[(0, 60_000), (60_000, 40_000)])
                .data(&a)
                .attrs(&[AttrOp::Set("gen", AttrValue::Integer(cycle as i64))]),
        )
        .ok();
        let b = random_bytes(cycle * 2 + 1, 5000);
        c.call(
            &Req::new(OP_WRITE, 2)
                .flags(FLAG_FUA)
                .object(ids[1])
                .range(0, b.len() as u64)
                .data(&b)
                .attrs(&[AttrOp::Set("gen", AttrValue::Integer(100 + cycle as i64))]),
        )
        .ok();
        let mut grown = Vec::new();
        for (object, data, generation) in &mut flushed {
            let more = random_bytes(1000 + cycle, 3000);
            c.call(
                &Req::new(OP_APPEND, 3)
                    .object(*object)
                    .range(0, more.len() as u64)
                    .data(&more)
                    .attrs(&[AttrOp::Set("gen", AttrValue::Integer(*generation + 1000))]),
            )
            .ok();
            data.extend_from_slice(&more);
            *generation += 1000;
            grown.push(*object);
        }
        // FLUSH the collection (the two new ones) and each grown object.
        c.call(
            &Req::new(OP_FLUSH, 4)
                .flags(1 << FLAG_SCOPE_SHIFT)
                .params(&sluice_testkit::raw_obj::name_param("crash")),
        )
        .ok();
        for object in grown {
            c.call(&Req::new(OP_FLUSH, 5).object(object)).ok();
        }
        flushed.push((ids[0], a, cycle as i64));
        flushed.push((ids[1], b, 100 + cycle as i64));
        // Unflushed work in flight when the process dies.
        let loose = c.create(1, "")[0];
        c.write(loose, 0, &random_bytes(77, 4096));
        server.signal(Signal::KILL);
        assert!(
            server.wait_exit(Duration::from_secs(10)).is_some(),
            "server did not die"
        );
    }
    // A last restart checks the last cycle.
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&store)
        .start();
    let mut c = open(server.objects[0]);
    for (object, data, generation) in &flushed {
        assert!(
            c.read(*object, 0, data.len() as u64).0 == *data,
            "object {object:#x}"
        );
        assert_eq!(get_attr(&mut c, *object, "gen"), Some(*generation));
    }
}

#[test]
fn a_bare_sluice_serve_also_serves_objects_on_10810_and_admin_requests() {
    let dir = tempdir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice serve");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lines
        .iter()
        .any(|l: &String| l.starts_with("objects listening on"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("no object listener announced; stdout so far: {lines:?}");
            }
        }
    }
    assert!(
        lines.contains(&"listening on 127.0.0.1:10809".to_string()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"objects listening on 127.0.0.1:10810".to_string()),
        "{lines:?}"
    );
    let mut c = open("127.0.0.1:10810".parse().unwrap());
    let id = c.create(1, "")[0];
    c.write(id, 0, b"default");
    c.flush();
    assert_eq!(c.read(id, 0, 7).0, b"default");
    drop(c);
    // The embedded default also answers `sluice raid` on its default
    // admin socket.
    let status = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["raid", "status"])
        .current_dir(dir.path())
        .output()
        .expect("run sluice raid status");
    assert!(
        status.status.success(),
        "sluice raid status: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, Signal::TERM).expect("SIGTERM");
    let status = child.wait().expect("wait for sluice");
    assert!(status.success(), "sluice serve exited with {status}");
    assert!(dir
        .path()
        .join("sluice-data/objects/attributes.sqlite")
        .exists());
    assert!(dir.path().join("sluice-data/default.img").exists());
}
