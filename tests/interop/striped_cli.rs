//! `sluice meta` and `sluice obj --meta` end to end: the real binary
//! against four real `sluice serve --objects` object servers, its
//! metadata service reached over the native protocol
//! (`--meta sluice://HOST:PORT`): round trips over one to four servers,
//! ranges, listing by prefix, the layout `stat` shows, removal, servers
//! refused removal while in use, a server dead before a put and one
//! killed in the middle of one (an error naming it, the size only what
//! was written whole, the right bytes once it is back), and fsck on the
//! states crashes between the metadata and data steps leave.
//!
//! The metadata service is a fifth real `sluice serve --meta DIR` (SQLite);
//! the tests reach it themselves through `RemoteMetaStore` to check what
//! the CLI left there and to make the states a crash leaves.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sluice_client::obj::{ObjOptions, RemoteMetaStore};
use sluice_meta::MetaStore;
use tempfile::TempDir;

use crate::harness::{random_bytes, sluice, tempdir, CmdOutput, Server, ServerBuilder};

/// Four object servers and the server running the metadata service.
pub(crate) struct Deployment {
    pub(crate) servers: Vec<Server>,
    meta_server: Server,
    pub(crate) meta: Arc<dyn MetaStore>,
    pub(crate) dir: TempDir,
}

fn object_server(dir: &Path, i: usize) -> Server {
    ServerBuilder::new()
        .objects(&dir.join(format!("obj{i}")))
        .start()
}

pub(crate) fn deploy() -> Deployment {
    let dir = tempdir();
    let servers: Vec<Server> = (0..4).map(|i| object_server(dir.path(), i)).collect();
    let meta_server = ServerBuilder::new()
        .objects(&dir.path().join("meta-objects"))
        .arg("--meta")
        .arg(dir.path().join("meta").display().to_string())
        .start();
    let meta: Arc<dyn MetaStore> = Arc::new(
        RemoteMetaStore::connect(
            meta_server
                .obj_uri()
                .parse()
                .expect("the server's object URI"),
            ObjOptions::default(),
        )
        .expect("reach the metadata service"),
    );
    let d = Deployment {
        servers,
        meta_server,
        meta,
        dir,
    };
    let mut args = vec!["add-server".to_owned()];
    args.extend(d.servers.iter().map(Server::obj_uri));
    ok(d.meta_cmd(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    d
}

pub(crate) fn ok(out: CmdOutput) -> CmdOutput {
    out.assert_success();
    out
}

/// Exit `code` with one line on stderr containing every needle.
pub(crate) fn assert_fails(out: &CmdOutput, code: i32, needles: &[&str]) {
    out.assert_code(code);
    let err = out.stderr();
    assert_eq!(err.trim_end().lines().count(), 1, "{}: {err}", out.display);
    for n in needles {
        assert!(
            err.contains(n),
            "{}: stderr lacks {n:?}:\n{err}",
            out.display
        );
    }
}

impl Deployment {
    fn meta_uri(&self) -> String {
        self.meta_server.obj_uri()
    }

    pub(crate) fn meta_cmd(&self, args: &[&str]) -> CmdOutput {
        sluice()
            .args(["meta", "--meta", &self.meta_uri()])
            .args(args)
            .output()
    }

    pub(crate) fn obj(&self, args: &[&str]) -> CmdOutput {
        sluice()
            .args(["obj", "--meta", &self.meta_uri()])
            .args(args)
            .output()
    }

    pub(crate) fn obj_in(&self, args: &[&str], input: &[u8]) -> CmdOutput {
        sluice()
            .args(["obj", "--meta", &self.meta_uri()])
            .args(args)
            .input(input.to_vec())
            .output()
    }
}

#[test]
fn put_get_round_trips_over_one_to_four_servers() {
    let d = deploy();
    // Not a multiple of the stripe unit, so the last stripe is partial.
    let data = random_bytes(15, 300_001);
    let file = d.dir.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    for n in 1..=4 {
        let name = format!("rt/{n}");
        let servers = n.to_string();
        ok(d.obj(&[
            "put",
            &name,
            file.to_str().unwrap(),
            "--stripe",
            "4K",
            "--stripe-count",
            &servers,
        ]));
        assert_eq!(ok(d.obj(&["get", &name])).output.stdout, data, "{name}");
        // Ranges across stripe and server boundaries, in the order given.
        let got = ok(d.obj(&[
            "get",
            &name,
            "--range",
            "4000:200",
            "--range",
            "0:10",
            "--range",
            "299990:11",
        ]))
        .output
        .stdout;
        let mut want = data[4000..4200].to_vec();
        want.extend_from_slice(&data[..10]);
        want.extend_from_slice(&data[299_990..]);
        assert_eq!(got, want, "{name}");
        // The layout as stat shows it: n pieces on n different servers.
        let stat = ok(d.obj(&["stat", &name, "--json"])).json();
        assert_eq!(stat["size"], 300_001);
        assert_eq!(stat["state"], "ready");
        assert_eq!(stat["stripe_unit"], 4096);
        let pieces = stat["pieces"].as_array().unwrap();
        assert_eq!(pieces.len(), n);
        let mut servers: Vec<&str> = pieces
            .iter()
            .map(|p| p["server"].as_str().unwrap())
            .collect();
        servers.sort_unstable();
        servers.dedup();
        assert_eq!(servers.len(), n, "{stat}");
        for s in servers {
            assert!(d.servers.iter().any(|srv| srv.obj_uri() == s), "{s}");
        }
    }
    // From stdin, with the default stripe and every server.
    ok(d.obj_in(&["put", "other/stdin"], b"from stdin"));
    assert_eq!(
        ok(d.obj(&["get", "other/stdin"])).output.stdout,
        b"from stdin"
    );
    let text = ok(d.obj(&["stat", "other/stdin"])).stdout();
    assert!(text.contains("name: other/stdin\n"), "{text}");
    assert!(text.contains("size: 10\n"), "{text}");
    assert!(text.contains("stripe_unit: 65536\n"), "{text}");
    assert!(text.contains("pieces: 4\n"), "{text}");
    assert!(text.contains("piece 3: server sluice://"), "{text}");

    // ls by prefix, sorted.
    assert_eq!(
        ok(d.obj(&["ls", "rt/"])).stdout(),
        "rt/1\nrt/2\nrt/3\nrt/4\n"
    );
    assert_eq!(ok(d.obj(&["ls", "other"])).stdout(), "other/stdin\n");
    assert_eq!(ok(d.obj(&["ls"])).stdout().lines().count(), 5);
    assert_eq!(ok(d.obj(&["ls", "nothing/"])).stdout(), "");

    // Bytes past the end read as zeros, with a note.
    let past = ok(d.obj(&["get", "other/stdin", "--range", "8:4"]));
    assert_eq!(past.output.stdout, b"in\0\0");
    assert!(past.stderr().contains("past the end"), "{}", past.stderr());

    // A put over a name replaces its content whole; a name missing.
    ok(d.obj_in(&["put", "rt/1"], b"x"));
    assert_eq!(ok(d.obj(&["get", "rt/1"])).output.stdout, b"x");
    let stat = ok(d.obj(&["stat", "rt/1", "--json"])).json();
    assert_eq!(
        (stat["size"].as_u64(), &stat["pending"]),
        (Some(1), &serde_json::Value::Null)
    );
    assert_fails(&d.obj(&["get", "rt/9"]), 1, &["rt/9"]);

    // rm: the entry and the pieces go.
    ok(d.obj(&["rm", "rt/1", "rt/2"]));
    assert_eq!(ok(d.obj(&["ls", "rt/"])).stdout(), "rt/3\nrt/4\n");
    assert_fails(&d.obj(&["stat", "rt/1"]), 1, &["rt/1"]);
    // Nothing left to repair.
    assert_eq!(ok(d.obj(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
}

/// `ls` over more names than one page of the metadata service: all of
/// them by default, text or one JSON array; `--limit` and `--after` one
/// page, the continuation key in JSON and in a note; limits and keys out
/// of range refused as usage errors naming the option.
#[test]
fn ls_pages_through_more_names_than_a_page() {
    let d = deploy();
    let layout = sluice_meta::Layout {
        stripe_unit: 1 << 16,
        redundancy: Default::default(),
        pieces: vec![sluice_meta::Piece {
            server: d.servers[0].obj_uri(),
            partition: 1,
            object: 1,
        }],
    };
    let n = sluice_meta::MAX_PAGE + 6;
    let names: Vec<String> = (0..n).map(|i| format!("many/{i:04}")).collect();
    std::thread::scope(|s| {
        for chunk in names.chunks(n.div_ceil(8)) {
            let (meta, layout) = (&d.meta, &layout);
            s.spawn(move || {
                for name in chunk {
                    meta.create(name, layout, &Default::default())
                        .expect("create an entry");
                }
            });
        }
    });
    // Just past the prefix: no page under it shows it.
    d.meta
        .create("many0", &layout, &Default::default())
        .expect("create an entry");
    let all = ok(d.obj(&["ls", "many/"])).stdout();
    assert_eq!(all.lines().collect::<Vec<_>>(), names);
    let json: serde_json::Value =
        serde_json::from_str(&ok(d.obj(&["ls", "many/", "--json"])).stdout()).expect("JSON");
    let listed: Vec<&str> = json
        .as_array()
        .expect("an array")
        .iter()
        .map(|e| e["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(listed, names);

    let page = ok(d.obj(&["ls", "many/", "--limit", "2"]));
    assert_eq!(page.stdout(), "many/0000\nmany/0001\n");
    assert!(
        page.stderr().contains("continue with --after many/0001"),
        "{}",
        page.stderr()
    );
    let page = ok(d.obj(&[
        "ls",
        "many/",
        "--limit",
        "2",
        "--after",
        "many/0001",
        "--json",
    ]));
    let page: serde_json::Value = serde_json::from_str(&page.stdout()).expect("JSON");
    assert_eq!(page["next"], "many/0003");
    assert_eq!(page["entries"][1]["name"], "many/0003");
    let last = format!("many/{:04}", n - 2);
    let end = ok(d.obj(&["ls", "many/", "--after", &last, "--json"]));
    let end: serde_json::Value = serde_json::from_str(&end.stdout()).expect("JSON");
    assert_eq!(end["next"], serde_json::Value::Null);
    assert_eq!(end["entries"].as_array().map(Vec::len), Some(1));

    for limit in ["0", "1025"] {
        assert_fails(
            &d.obj(&["ls", "many/", "--limit", limit]),
            2,
            &["--limit", limit, "1 to 1024"],
        );
    }
    assert_fails(
        &d.obj(&["ls", "many/", "--after", "other/1"]),
        2,
        &["--after", "continuation key", "other/1"],
    );
    assert_fails(
        &sluice()
            .args([
                "obj",
                "--server",
                &d.servers[0].obj_uri(),
                "ls",
                "--limit",
                "3",
            ])
            .output(),
        2,
        &["--limit", "--meta"],
    );
}

#[test]
fn servers_are_added_listed_and_removed_only_when_unused() {
    let d = deploy();
    let uris: Vec<String> = d.servers.iter().map(Server::obj_uri).collect();
    let listed = ok(d.meta_cmd(&["ls-servers"])).stdout();
    assert_eq!(
        listed,
        uris.iter().map(|u| format!("{u}\n")).collect::<String>()
    );
    assert_eq!(d.meta.servers().unwrap(), uris);

    ok(d.obj_in(&["put", "x", "--stripe-count", "4"], b"data"));
    assert_fails(
        &d.meta_cmd(&["remove-server", &uris[2]]),
        1,
        &[&uris[2], "still holds pieces", "\"x\""],
    );
    ok(d.obj(&["rm", "x"]));
    ok(d.meta_cmd(&["remove-server", &uris[2]]));
    let listed = ok(d.meta_cmd(&["ls-servers"])).stdout();
    assert!(!listed.contains(&uris[2]), "{listed}");
    assert_eq!(listed.lines().count(), 3);

    // Usage errors exit 2 (with a pointer to --help).
    let bad = d.meta_cmd(&["add-server", "http://x"]);
    bad.assert_code(2);
    assert!(
        bad.stderr().contains("object server http://x"),
        "{}",
        bad.stderr()
    );
    assert!(
        bad.stderr().contains("sluice meta --help"),
        "{}",
        bad.stderr()
    );
    assert_fails(
        &sluice()
            .args(["obj", "--meta", "etcd://127.0.0.1:2379,", "ls"])
            .output(),
        2,
        &["--meta etcd://127.0.0.1:2379,"],
    );
    assert_fails(
        &d.obj(&["put", "y", "--stripe", "1000"]),
        1,
        &["stripe unit 1000"],
    );
    assert_fails(&d.obj(&["create"]), 2, &["--meta"]);
    // Without --meta, object ids are numbers and the striped options are refused.
    assert_fails(
        &sluice().args(["obj", "put", "name"]).output(),
        2,
        &["not an object id"],
    );
}

#[test]
fn a_dead_server_fails_the_put_by_name_and_fsck_repairs_what_crashes_leave() {
    let mut d = deploy();
    let dead_addr = d.servers[2].objects[0];
    let dead_uri = d.servers[2].obj_uri();
    d.servers[2].signal(Signal::KILL);
    assert!(d.servers[2].wait_exit(Duration::from_secs(10)).is_some());

    // The put fails naming the dead server and leaves no entry; the
    // pieces it made on the live servers it removes itself.
    let data = random_bytes(16, 100_000);
    assert_fails(
        &d.obj_in(&["put", "broken", "--stripe", "4K"], &data),
        1,
        &[&dead_uri, "broken"],
    );
    assert_fails(&d.obj(&["get", "broken"]), 1, &["broken"]);
    let restarted = ServerBuilder::new()
        .arg("--objects")
        .arg(d.dir.path().join("obj2").display().to_string())
        .object_listen(dead_addr.to_string())
        .start();
    d.servers[2] = restarted;
    assert_eq!(ok(d.obj(&["fsck", "--grace", "0s"])).stdout(), "clean\n");

    // What crashes between the metadata and data steps leave, made
    // through the service's own store: a remove stopped after marking
    // the entry, and a create stopped before storing it (its pieces
    // named by no entry).
    for name in ["good", "gone", "orphaned"] {
        ok(d.obj_in(&["put", name, "--stripe", "4K"], &data));
    }
    let removing = sluice_meta::Update {
        state: Some(sluice_meta::EntryState::Removing),
        ..sluice_meta::Update::default()
    };
    d.meta.update("gone", None, &removing).unwrap();
    d.meta.delete("orphaned", None).unwrap();
    // Within the grace period the orphans are left alone (a create may
    // still be running); the interrupted remove is finished.
    let report = ok(d.obj(&["fsck"])).stdout();
    assert_eq!(report, "finished remove: gone\n");
    let report = ok(d.obj(&["fsck", "--grace", "0s"])).stdout();
    let orphans: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("removed orphan:"))
        .collect();
    assert_eq!(orphans.len(), 4, "{report}");
    assert!(
        orphans.iter().all(|l| l.ends_with("of \"orphaned\"")),
        "{report}"
    );
    assert_eq!(report.lines().count(), 4, "{report}");
    assert_eq!(ok(d.obj(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
    assert_eq!(ok(d.obj(&["ls"])).stdout(), "good\n");
    assert_eq!(ok(d.obj(&["get", "good"])).output.stdout, data);
}

#[test]
fn a_server_killed_mid_put_fails_it_by_name_and_nothing_wrong_reads_back() {
    let mut d = deploy();
    // The CLI streams its input 8 MiB at a time: the first chunk is
    // written whole before the server dies, the second fails.
    const CHUNK: usize = 8 << 20;
    let data = random_bytes(17, CHUNK + 300_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "obj",
            "--meta",
            &d.meta_uri(),
            "put",
            "mid",
            "--stripe",
            "64K",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&data[..CHUNK]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.meta.lookup("mid").map(|e| e.size).ok() != Some(CHUNK as u64) {
        assert!(
            Instant::now() < deadline,
            "the first chunk was never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dead_addr = d.servers[1].objects[0];
    let dead_uri = d.servers[1].obj_uri();
    d.servers[1].signal(Signal::KILL);
    assert!(d.servers[1].wait_exit(Duration::from_secs(10)).is_some());
    // The CLI may already have failed and closed its input.
    let _ = stdin.write_all(&data[CHUNK..]);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&dead_uri), "{err}");
    assert!(err.contains("\"mid\""), "{err}");
    // The size is what was written whole: a failed write never grows it.
    assert_eq!(d.meta.lookup("mid").unwrap().size, CHUNK as u64);
    // The put did not finish: the object is incomplete, never read
    // back as if it were whole, whether its server is up or not.
    assert_fails(&d.obj(&["get", "mid"]), 1, &["\"mid\"", "incomplete"]);
    let restarted = ServerBuilder::new()
        .arg("--objects")
        .arg(d.dir.path().join("obj1").display().to_string())
        .object_listen(dead_addr.to_string())
        .start();
    d.servers[1] = restarted;
    assert_fails(&d.obj(&["get", "mid"]), 1, &["\"mid\"", "incomplete"]);
    assert_eq!(
        ok(d.obj(&["fsck", "--grace", "0s"])).stdout(),
        "incomplete put: mid (its put did not finish; remove it with 'sluice obj --meta URI rm' and put it again)\n"
    );
    ok(d.obj(&["rm", "mid"]));
    assert_eq!(ok(d.obj(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
}

/// Where [`interrupted_puts_are_incomplete`] kills the client.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// At once: before or after it made anything.
    Start,
    /// Once the entry exists, before any data.
    Entry,
    /// Once this many 8 MiB chunks are written.
    Chunks(u64),
}

/// `sluice obj --meta META put NAME` killed (SIGKILL) at several points
/// of a 20 MiB put: the object never looks complete. `stat` shows it
/// `writing` (or there is none), `get` fails saying it is incomplete,
/// fsck reports the incomplete put (and is not clean), and `rm` clears
/// it so that the same name can be put whole again.
fn interrupted_puts_are_incomplete(meta: &str) {
    const CHUNK: u64 = 8 << 20;
    let data = random_bytes(61, 20 << 20);
    let run = |args: &[&str]| {
        sluice()
            .args(["obj", "--meta", meta])
            .args(args)
            .timeout(Duration::from_secs(120))
            .output()
    };
    let stat = |name: &str| -> Option<serde_json::Value> {
        let out = run(&["stat", name, "--json"]);
        out.output.status.success().then(|| out.json())
    };
    let points = [
        KillAt::Start,
        KillAt::Entry,
        KillAt::Chunks(1),
        KillAt::Chunks(2),
    ];
    for (i, at) in points.into_iter().enumerate() {
        let name = format!("cut/{i}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["obj", "--meta", meta, "put", &name, "--stripe", "64K"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sluice obj put");
        let mut stdin = child.stdin.take().expect("the put's stdin is piped");
        let written = match at {
            KillAt::Start => None,
            KillAt::Entry => Some(0),
            KillAt::Chunks(n) => {
                stdin
                    .write_all(&data[..(n * CHUNK) as usize])
                    .expect("feed the put");
                Some(n * CHUNK)
            }
        };
        if let Some(size) = written {
            let deadline = Instant::now() + Duration::from_secs(60);
            while stat(&name).is_none_or(|s| s["size"] != size) {
                assert!(
                    Instant::now() < deadline,
                    "{at:?}: {name} never reached {size} bytes"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        child.kill().expect("kill the put");
        child.wait().expect("reap the put");
        drop(stdin);
        let Some(entry) = stat(&name) else {
            // Killed before its entry was made: nothing to see but
            // pieces, which fsck's orphan sweep takes.
            assert!(matches!(at, KillAt::Start), "{at:?}: {name} vanished");
            continue;
        };
        assert_ne!(entry["state"], "ready", "{at:?}: {entry}");
        let get = run(&["get", &name]);
        assert_fails(&get, 1, &[&format!("{name:?}"), "incomplete"]);
        assert!(get.output.stdout.is_empty(), "{at:?}: get wrote data");
        let report = ok(run(&["fsck", "--grace", "0s"])).stdout();
        assert!(
            report.contains(&format!("incomplete put: {name} ")) && !report.contains("clean"),
            "{at:?}: {report}"
        );
        ok(run(&["rm", &name]));
    }
    assert_eq!(
        ok(run(&["fsck", "--grace", "0s"])).stdout().lines().last(),
        Some("clean")
    );
    let file = tempdir();
    let path = file.path().join("in.bin");
    std::fs::write(&path, &data).expect("write the input file");
    ok(run(&[
        "put",
        "cut/0",
        path.to_str().expect("a UTF-8 temporary path"),
        "--stripe",
        "64K",
    ]));
    assert_eq!(
        ok(run(&["stat", "cut/0", "--json"])).json()["state"],
        "ready"
    );
    assert_eq!(ok(run(&["get", "cut/0"])).output.stdout, data);
}

#[test]
fn interrupted_puts_never_look_complete_with_sqlite_metadata() {
    let d = deploy();
    interrupted_puts_are_incomplete(&d.meta_uri());
}

#[test]
fn interrupted_puts_never_look_complete_with_etcd_metadata() {
    let Some(etcd) = sluice_testkit::etcd::EtcdCluster::start_or_skip(1) else {
        return;
    };
    let dir = tempdir();
    let servers: Vec<Server> = (0..2).map(|i| object_server(dir.path(), i)).collect();
    let meta = etcd.uri();
    let mut add = vec!["meta", "--meta", &meta, "add-server"];
    let uris: Vec<String> = servers.iter().map(Server::obj_uri).collect();
    add.extend(uris.iter().map(String::as_str));
    ok(sluice().args(&add).output());
    interrupted_puts_are_incomplete(&meta);
}

/// Two deployments (two metadata services) on the same object servers:
/// each one's fsck leaves the other's pieces alone, removes only its own
/// orphans, and every object of both reads back.
#[test]
fn two_deployments_share_object_servers_and_fsck_keeps_to_its_own() {
    let a = deploy();
    std::fs::create_dir_all(a.dir.path().join("meta-b")).unwrap();
    let b_meta = format!("sqlite:{}", a.dir.path().join("meta-b").display());
    let b = |args: &[&str]| {
        sluice()
            .args(["obj", "--meta", &b_meta])
            .args(args)
            .output()
    };
    let mut add = vec![
        "meta".to_owned(),
        "--meta".into(),
        b_meta.clone(),
        "add-server".into(),
    ];
    add.extend(a.servers.iter().map(Server::obj_uri));
    ok(sluice().args(&add).output());
    let data_a = random_bytes(71, 300_000);
    let data_b = random_bytes(72, 200_000);
    for name in ["x/1", "x/2", "orphaned"] {
        ok(a.obj_in(&["put", name, "--stripe", "4K"], &data_a));
        ok(sluice()
            .args(["obj", "--meta", &b_meta, "put", name, "--stripe", "4K"])
            .input(data_b.clone())
            .output());
    }
    // An orphan in each deployment: pieces their entry no longer names.
    a.meta.delete("orphaned", None).unwrap();
    let b_store = sluice_meta::SqliteMetaStore::open(&a.dir.path().join("meta-b"))
        .expect("open deployment B's metadata");
    b_store.delete("orphaned", None).unwrap();
    drop(b_store);
    for (who, report) in [
        ("a", ok(a.obj(&["fsck", "--grace", "0s"])).stdout()),
        ("b", ok(b(&["fsck", "--grace", "0s"])).stdout()),
    ] {
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 4, "{who}: {report}");
        assert!(
            lines
                .iter()
                .all(|l| l.starts_with("removed orphan:") && l.ends_with("of \"orphaned\"")),
            "{who}: {report}"
        );
    }
    for name in ["x/1", "x/2"] {
        assert_eq!(ok(a.obj(&["get", name])).output.stdout, data_a, "a {name}");
        assert_eq!(ok(b(&["get", name])).output.stdout, data_b, "b {name}");
    }
    assert_eq!(ok(a.obj(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
    assert_eq!(ok(b(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
}

#[test]
fn serve_meta_keeps_the_layouts_across_a_restart() {
    let d = deploy();
    let data = random_bytes(41, 200_000);
    let file = d.dir.path().join("kept.bin");
    std::fs::write(&file, &data).unwrap();
    ok(d.obj(&[
        "put",
        "kept",
        file.to_str().unwrap(),
        "--stripe",
        "16K",
        "--stripe-count",
        "3",
    ]));
    let Deployment {
        servers,
        mut meta_server,
        meta,
        dir,
    } = d;
    drop(meta);
    let addr = meta_server.objects[0];
    meta_server.signal(Signal::TERM);
    assert!(meta_server.wait_exit(Duration::from_secs(30)).is_some());
    let meta_server = ServerBuilder::new()
        .arg("--objects")
        .arg(dir.path().join("meta-objects").display().to_string())
        .object_listen(addr.to_string())
        .arg("--meta")
        .arg(dir.path().join("meta").display().to_string())
        .start();
    let uri = meta_server.obj_uri();
    let out = ok(sluice()
        .args(["obj", "--meta", &uri, "get", "kept"])
        .output());
    assert_eq!(out.output.stdout, data);
    drop(servers);
}

/// The same CLI with the layouts in a three-member etcd cluster
/// (`--meta etcd://...`): put, get, ls, stat and rm work, and killing
/// the etcd leader between two puts changes nothing for the client.
#[test]
fn striped_objects_over_etcd_survive_losing_the_etcd_leader() {
    let Some(mut etcd) = sluice_testkit::etcd::EtcdCluster::start_or_skip(3) else {
        return;
    };
    let dir = tempdir();
    let servers: Vec<Server> = (0..3).map(|i| object_server(dir.path(), i)).collect();
    let meta = etcd.uri();
    let run = |args: &[&str]| {
        sluice()
            .args(["obj", "--meta", &meta])
            .args(args)
            .timeout(Duration::from_secs(120))
            .output()
    };
    let mut add = vec!["meta", "--meta", &meta, "add-server"];
    let uris: Vec<String> = servers.iter().map(Server::obj_uri).collect();
    add.extend(uris.iter().map(String::as_str));
    ok(sluice().args(&add).output());
    let data = random_bytes(52, 150_000);
    let file = dir.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    let path = file.to_str().unwrap();
    ok(run(&[
        "put",
        "e/one",
        path,
        "--stripe",
        "8K",
        "--stripe-count",
        "3",
    ]));
    let leader = etcd.leader().expect("the cluster has a leader");
    etcd.kill(leader);
    ok(run(&[
        "put",
        "e/two",
        path,
        "--stripe",
        "4K",
        "--stripe-count",
        "2",
    ]));
    for name in ["e/one", "e/two"] {
        assert_eq!(ok(run(&["get", name])).output.stdout, data, "{name}");
    }
    assert_eq!(ok(run(&["ls", "e/"])).stdout(), "e/one\ne/two\n");
    let stat = ok(run(&["stat", "e/two", "--json"])).json();
    assert_eq!(stat["size"], 150_000);
    assert_eq!(stat["stripe_unit"], 4096);
    ok(run(&["rm", "e/one", "e/two"]));
    assert_eq!(ok(run(&["ls", "e/"])).stdout(), "");
    assert_eq!(ok(run(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
}
