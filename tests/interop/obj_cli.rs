//! `sluice obj` end to end: the real binary against a real `sluice serve
//! --objects`, every command as the issue writes it, the exit codes (2
//! for usage, 1 for other failures, each with one line naming the
//! object), and durability after the CLI exits (it flushed: the server is
//! killed with SIGKILL right after and restarted on the same directory).

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use crate::harness::{random_bytes, scrape, sluice, tempdir, CmdOutput, Server, ServerBuilder};

fn start(dir: &Path) -> Server {
    ServerBuilder::new().objects(dir).start()
}

/// `sluice obj --server URI ARGS...`, stdin empty.
fn obj(server: &Server, args: &[&str]) -> CmdOutput {
    sluice()
        .args(["obj", "--server", &server.obj_uri()])
        .args(args)
        .output()
}

fn obj_in(server: &Server, args: &[&str], input: &[u8]) -> CmdOutput {
    sluice()
        .args(["obj", "--server", &server.obj_uri()])
        .args(args)
        .input(input.to_vec())
        .output()
}

fn ok(out: CmdOutput) -> CmdOutput {
    out.assert_success();
    out
}

/// Creates one object and returns its id.
fn create(server: &Server, extra: &[&str]) -> String {
    let mut args = vec!["create"];
    args.extend_from_slice(extra);
    let out = ok(obj(server, &args));
    let ids: Vec<String> = out.stdout().lines().map(str::to_owned).collect();
    assert_eq!(ids.len(), 1, "create printed {:?}", out.stdout());
    ids[0].clone()
}

/// A failure: exit `code` and exactly one line on stderr containing
/// every one of `needles`.
fn assert_fails(out: &CmdOutput, code: i32, needles: &[&str]) {
    out.assert_code(code);
    let err = out.stderr();
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{}: stderr is not one line:\n{err}",
        out.display
    );
    for n in needles {
        assert!(
            err.contains(n),
            "{}: stderr lacks {n:?}:\n{err}",
            out.display
        );
    }
}

#[test]
fn create_prints_one_id_per_line_and_put_get_round_trips() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    let out = ok(obj(&server, &["create", "--count", "5"]));
    let ids: Vec<u64> = out
        .stdout()
        .lines()
        .map(|l| l.parse().expect("an id per line"))
        .collect();
    assert_eq!(ids.len(), 5);
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 5, "ids repeat: {ids:?}");

    // From a file, then from stdin; both read back whole.
    let id = ids[0].to_string();
    let data = random_bytes(1, 300_000);
    let file = dir.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    ok(obj(&server, &["put", &id, file.to_str().unwrap()]));
    assert_eq!(ok(obj(&server, &["get", &id])).output.stdout, data);

    let id2 = ids[1].to_string();
    ok(obj_in(&server, &["put", &id2], b"from stdin"));
    assert_eq!(
        ok(obj(&server, &["get", &id2])).output.stdout,
        b"from stdin"
    );

    // stat names the length.
    let stat = ok(obj(&server, &["stat", &id, "--json"])).json();
    assert_eq!(stat["length"], 300_000);
    assert_eq!(stat["id"], ids[0]);
    assert!(ok(obj(&server, &["stat", &id2]))
        .stdout()
        .contains("length: 10\n"));
}

#[test]
fn data_written_with_ranges_comes_back_with_ranges_and_strides() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    let id = create(&server, &[]);
    // 4 bytes at 0, 3 at 100, 2 at 50: the input in that order.
    ok(obj_in(
        &server,
        &[
            "write", &id, "--range", "0:4", "--range", "100:3", "--range", "50:2",
        ],
        b"AAAABBBCC",
    ));
    let out = ok(obj(
        &server,
        &[
            "get", &id, "--range", "100:3", "--range", "0:4", "--range", "50:2",
        ],
    ));
    assert_eq!(out.output.stdout, b"BBBAAAACC");
    // A strided read: 2 bytes every 50 from 0.
    let out = ok(obj(&server, &["get", &id, "--stride", "0:50:2:3"]));
    assert_eq!(out.output.stdout, b"AACCBB");
    // Past the end: zeros, and a note on stderr; still exit 0.
    let out = ok(obj(&server, &["get", &id, "--range", "101:4"]));
    assert_eq!(out.output.stdout, b"BB\0\0");
    assert!(out.stderr().contains("past the end"), "{}", out.stderr());
    // Sizes take the usual suffixes.
    ok(obj_in(&server, &["write", &id, "--range", "1K:2"], b"KK"));
    assert_eq!(
        ok(obj(&server, &["get", &id, "--range", "1024:2"]))
            .output
            .stdout,
        b"KK"
    );
    // Input shorter than the ranges: refused, nothing written.
    let out = obj_in(&server, &["write", &id, "--range", "0:8"], b"short");
    assert_fails(&out, 1, &[&format!("object {id}"), "8 bytes"]);
    assert_eq!(
        ok(obj(&server, &["get", &id, "--range", "0:4"]))
            .output
            .stdout,
        b"AAAA"
    );
}

#[test]
fn append_prints_where_the_data_went() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    let id = create(&server, &[]);
    assert_eq!(
        ok(obj_in(&server, &["append", &id], b"hello ")).stdout(),
        "0\n"
    );
    assert_eq!(
        ok(obj_in(&server, &["append", &id], b"world")).stdout(),
        "6\n"
    );
    assert_eq!(
        ok(obj(&server, &["get", &id])).output.stdout,
        b"hello world"
    );
}

#[test]
fn attributes_set_get_and_query_round_trip() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    let out = ok(obj(
        &server,
        &["create", "--collection", "photos", "--count", "3"],
    ));
    let ids: Vec<String> = out.stdout().lines().map(str::to_owned).collect();
    for (id, size) in ids.iter().zip(["1", "5", "10"]) {
        ok(obj(
            &server,
            &[
                "attr",
                "set",
                id,
                &format!("size={size}"),
                "camera=x100",
                "thumb=hex:00ff",
                "code=text:42",
            ],
        ));
    }
    let out = ok(obj(&server, &["attr", "get", &ids[0], "size", "camera"]));
    assert_eq!(out.stdout(), "size=1\ncamera=x100\n");
    let all = ok(obj(&server, &["attr", "get", &ids[0], "--json"])).json();
    assert_eq!(all["size"], 1);
    assert_eq!(all["camera"], "x100");
    assert_eq!(all["thumb"]["hex"], "00ff");
    assert_eq!(all["code"], "42");
    assert!(all["sluice.length"].is_number(), "{all}");

    // A key that is not there: the others print, exit 1, one line.
    let out = obj(&server, &["attr", "get", &ids[0], "size", "nope"]);
    assert_eq!(out.stdout(), "size=1\n");
    assert_fails(
        &out,
        1,
        &[&format!("object {}", ids[0]), "\"nope\"", "attr set"],
    );

    // Query: one range, then two (both must hold).
    let out = ok(obj(
        &server,
        &["query", "--collection", "photos", "--where", "size>=5"],
    ));
    let stdout = out.stdout();
    let mut got: Vec<&str> = stdout.lines().collect();
    got.sort_unstable();
    let mut want = vec![ids[1].as_str(), ids[2].as_str()];
    want.sort_unstable();
    assert_eq!(got, want);
    let out = ok(obj(
        &server,
        &[
            "query",
            "--collection",
            "photos",
            "--where",
            "size>=5",
            "--where",
            "size<=7",
            "--json",
        ],
    ));
    let j = out.json();
    assert_eq!(j.as_array().map(Vec::len), Some(1), "{j}");
    assert_eq!(j[0]["id"].to_string(), ids[1]);
    let out = ok(obj(
        &server,
        &["query", "--collection", "photos", "--where", "camera=x100"],
    ));
    assert_eq!(out.stdout().lines().count(), 3);
    // Open-ended text ranges.
    let out = ok(obj(
        &server,
        &["query", "--collection", "photos", "--where", "camera>=x"],
    ));
    assert_eq!(out.stdout().lines().count(), 3);
    let out = ok(obj(
        &server,
        &["query", "--collection", "photos", "--where", "camera<=a"],
    ));
    assert_eq!(out.stdout(), "");

    // ls: the collection, with attributes.
    let out = ok(obj(
        &server,
        &["ls", "--collection", "photos", "--attrs", "--json"],
    ));
    let j = out.json();
    let entries = j.as_array().expect("an array");
    assert_eq!(entries.len(), 3);
    for e in entries {
        assert_eq!(e["attrs"]["camera"], "x100", "{e}");
    }
    let out = ok(obj(&server, &["ls", "--collection", "photos", "--attrs"]));
    assert!(out.stdout().contains(" size=5"), "{}", out.stdout());
    // The server's own keys cannot be set.
    let out = obj(&server, &["attr", "set", &ids[0], "sluice.length=1"]);
    assert_fails(&out, 1, &[&format!("object {}", ids[0])]);
}

#[test]
fn ls_rm_and_unknown_objects() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    let a = create(&server, &[]);
    let b = create(&server, &[]);
    let listed = ok(obj(&server, &["ls"])).stdout();
    assert!(listed.lines().any(|l| l == a) && listed.lines().any(|l| l == b));
    ok(obj(&server, &["rm", &a, &b]));
    let listed = ok(obj(&server, &["ls", "--json"])).json();
    assert_eq!(listed, serde_json::json!([]));
    for args in [
        vec!["get", a.as_str()],
        vec!["stat", a.as_str()],
        vec!["attr", "get", a.as_str()],
        vec!["rm", a.as_str()],
    ] {
        let out = obj(&server, &args);
        assert_fails(&out, 1, &[&format!("object {a}"), "sluice obj ls"]);
    }
    let out = obj_in(&server, &["append", &a], b"x");
    assert_fails(&out, 1, &[&format!("object {a}")]);
    // An unknown collection, and an unknown partition.
    let out = obj(&server, &["ls", "--collection", "nope"]);
    assert_fails(&out, 1, &["\"nope\"", "check the name"]);
    let out = sluice()
        .args([
            "obj",
            "--server",
            &format!("{}?partition=7", server.obj_uri()),
            "ls",
        ])
        .output();
    assert_fails(&out, 1, &["partition", "?partition=N"]);
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    for args in [
        vec!["get", "notanumber"],
        vec!["write", "1"],
        vec!["create", "--count", "0"],
        vec!["get", "1", "--stride", "0:1:4:2"],
        vec!["get", "1", "--range", "4K"],
        vec!["query", "--collection", "c"],
        vec!["query", "--collection", "c", "--where", "nothing"],
        vec!["attr", "set", "1", "novalue"],
        vec!["rm"],
        vec!["frobnicate"],
    ] {
        let out = obj(&server, &args);
        out.assert_code(2);
        assert!(!out.stderr().is_empty(), "{}: no message", out.display);
    }
    // A bad server URI is ours to report: one line.
    let out = sluice()
        .args(["obj", "--server", "http://x", "ls"])
        .output();
    assert_fails(&out, 2, &["http://x", "sluice"]);
}

#[test]
fn no_server_exits_1_and_says_what_to_do() {
    // A port nothing listens on: bind one and drop it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let out = sluice()
        .args([
            "obj",
            "--server",
            &format!("sluice://127.0.0.1:{port}"),
            "ls",
        ])
        .output();
    assert_fails(&out, 1, &[&format!("127.0.0.1:{port}"), "sluice serve"]);
}

#[test]
fn unix_socket_uris() {
    let dir = tempdir();
    let sock = dir.path().join("obj.sock");
    let server = ServerBuilder::new()
        .arg("--objects")
        .arg(dir.path().join("objects").display().to_string())
        .object_listen(format!("unix:{}", sock.display()))
        .start();
    assert!(server.obj_uri().starts_with("sluice+unix:///"));
    let id = create(&server, &[]);
    ok(obj_in(&server, &["put", &id], b"over a unix socket"));
    assert_eq!(
        ok(obj(&server, &["get", &id])).output.stdout,
        b"over a unix socket"
    );
}

#[test]
fn what_the_cli_wrote_survives_sigkill_of_the_server() {
    let dir = tempdir();
    let objects = dir.path().join("objects");
    let data = random_bytes(7, 200_000);
    let (id, id2, appended) = {
        let server = start(&objects);
        let id = create(&server, &["--collection", "keep"]);
        ok(obj_in(&server, &["put", &id], &data));
        ok(obj_in(
            &server,
            &["write", &id, "--range", "10:3", "--range", "1000:2"],
            b"xyzuv",
        ));
        ok(obj(&server, &["attr", "set", &id, "kept=yes", "n=7"]));
        let id2 = create(&server, &[]);
        let appended = random_bytes(8, 5000);
        ok(obj_in(&server, &["append", &id2], &appended));
        server.signal(Signal::KILL);
        (id, id2, appended)
    };
    let server = start(&objects);
    let mut want = data.clone();
    want[10..13].copy_from_slice(b"xyz");
    want[1000..1002].copy_from_slice(b"uv");
    assert_eq!(ok(obj(&server, &["get", &id])).output.stdout, want);
    assert_eq!(ok(obj(&server, &["get", &id2])).output.stdout, appended);
    assert_eq!(
        ok(obj(&server, &["attr", "get", &id, "kept", "n"])).stdout(),
        "kept=yes\nn=7\n"
    );
    let out = ok(obj(
        &server,
        &["query", "--collection", "keep", "--where", "n=7"],
    ));
    assert_eq!(out.stdout().trim(), id);
}

/// FLUSH requests the server has completed.
fn flushes(server: &Server) -> u64 {
    let addr = server.metrics.expect("started with metrics");
    scrape(addr)
        .lines()
        .filter(|l| l.starts_with("sluice_obj_requests_total{command=\"flush\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn every_command_that_changes_something_flushes_before_it_exits() {
    // SIGKILL alone cannot tell (the store keeps unflushed writes across
    // a process kill); the server's own count of FLUSH requests can.
    let dir = tempdir();
    let server = ServerBuilder::new()
        .objects(&dir.path().join("objects"))
        .metrics()
        .start();
    let mut before = flushes(&server);
    // The server counts a request just after sending its reply: give
    // the count a moment to catch up.
    let mut changed = |out: CmdOutput, what: &str| {
        out.assert_success();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut now = flushes(&server);
        while now <= before && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            now = flushes(&server);
        }
        assert!(now > before, "`{what}` exited 0 without a FLUSH");
        before = now;
        out
    };
    let id = changed(obj(&server, &["create"]), "create")
        .stdout()
        .trim()
        .to_owned();
    changed(obj_in(&server, &["put", &id], b"0123456789"), "put");
    changed(
        obj_in(&server, &["write", &id, "--range", "2:2"], b"ab"),
        "write",
    );
    changed(obj_in(&server, &["append", &id], b"z"), "append");
    changed(obj(&server, &["attr", "set", &id, "k=v"]), "attr set");
    let other = changed(obj(&server, &["create"]), "create")
        .stdout()
        .trim()
        .to_owned();
    changed(obj(&server, &["rm", &id]), "rm");
    // Reads change nothing and flush nothing.
    let n = flushes(&server);
    ok(obj(&server, &["get", &other]));
    ok(obj(&server, &["stat", &other]));
    ok(obj(&server, &["ls"]));
    assert_eq!(flushes(&server), n, "a read-only command flushed");
}

#[test]
fn large_objects_stream_through_put_get_and_append() {
    let dir = tempdir();
    let server = start(&dir.path().join("objects"));
    let id = create(&server, &[]);
    // Larger than one chunk of the CLI and than one request's payload.
    let data = random_bytes(11, 40 << 20);
    let file = dir.path().join("big.bin");
    std::fs::write(&file, &data).unwrap();
    ok(obj(&server, &["put", &id, file.to_str().unwrap()]));
    let got = ok(obj(&server, &["get", &id])).output.stdout;
    assert!(got == data, "40 MiB came back different");
    let tail = random_bytes(12, (9 << 20) + 3);
    assert_eq!(
        ok(obj_in(&server, &["append", &id], &tail)).stdout(),
        format!("{}\n", data.len())
    );
    let got = ok(obj(
        &server,
        &[
            "get",
            &id,
            "--range",
            &format!("{}:{}", data.len(), tail.len()),
        ],
    ))
    .output
    .stdout;
    assert!(got == tail, "the appended bytes came back different");

    // put of something shorter: the object is exactly what was put (the
    // old tail is cut off, not left as zeros), and says nothing of it.
    let out = ok(obj_in(&server, &["put", &id], b"short"));
    assert_eq!(out.stderr(), "", "a put that shrinks an object is silent");
    assert_eq!(ok(obj(&server, &["get", &id])).output.stdout, b"short");
    let stat = ok(obj(&server, &["stat", &id, "--json"])).json();
    assert_eq!(stat["length"], 5);
}
