//! `sluice obj put ID` over an object that exists, killed (SIGKILL) at
//! several points: at once, once its temporary object exists, and after
//! one and two 8 MiB chunks of the new data reached it. After each kill
//! the object reads back as its old content, whole, with exit status 0;
//! `sluice obj fsck --grace 0s` removes the temporary the put left, and
//! a second fsck finds nothing. A server killed mid-put fails the put
//! with a message naming the object, which is unchanged after the
//! restart. A put that is not killed then replaces the content, and
//! clears the mark an older, in-place put left on an object.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sluice_client::obj::{ObjClient, ObjOptions, Value};
use sluice_client::ObjUri;

use crate::harness::{random_bytes, sluice, tempdir, CmdOutput, Server, ServerBuilder};

const CHUNK: u64 = 8 << 20;

/// Where the put is killed.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// At once: before or after it made anything.
    Start,
    /// Once its temporary object exists.
    Temporary,
    /// Once this many chunks of the new data are in the temporary.
    Chunks(u64),
}

fn obj(server: &Server, args: &[&str]) -> CmdOutput {
    sluice()
        .args(["obj", "--server", &server.obj_uri()])
        .args(args)
        .timeout(Duration::from_secs(120))
        .output()
}

fn ok(out: CmdOutput) -> CmdOutput {
    out.assert_success();
    out
}

fn put_file(server: &Server, id: &str, path: &Path) {
    ok(obj(
        server,
        &["put", id, path.to_str().expect("UTF-8 path")],
    ));
}

/// The length of the temporary object a put of `id` is writing, once
/// it exists.
fn temporary_length(server: &Server, id: u64) -> Option<u64> {
    let uri: ObjUri = server.obj_uri().parse().expect("the server's URI");
    let mut c = ObjClient::connect(&uri, &ObjOptions::default()).ok()?;
    let entries = c.list("put.temporary", Some(&["put.of"])).ok()?;
    let tmp = entries
        .iter()
        .find(|e| e.attrs.get("put.of") == Some(&Value::Integer(id as i64)))?;
    Some(c.stat(tmp.object).ok()?.length)
}

/// Waits until `reached` holds, failing after a minute.
fn wait_for(what: &str, mut reached: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reached() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_put(server: &Server, id: &str, stderr: Stdio) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["obj", "--server", &server.obj_uri(), "put", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start sluice obj put")
}

fn reads_whole(server: &Server, id: &str, want: &[u8], what: &str) {
    let out = ok(obj(server, &["get", id]));
    assert!(
        out.output.stdout == want,
        "{what}: object {id} does not read back whole"
    );
    let stat = ok(obj(server, &["stat", id, "--json"])).json();
    assert_eq!(stat["length"], want.len() as u64, "{what}: {stat}");
    assert_eq!(stat["incomplete"], false, "{what}: {stat}");
}

#[test]
fn puts_killed_midway_keep_the_old_object_and_fsck_removes_their_temporaries() {
    let dir = tempdir();
    let objects = dir.path().join("objects");
    let server = ServerBuilder::new().objects(&objects).start();
    let old_path = dir.path().join("old.bin");
    let old = random_bytes(91, 5 << 20);
    std::fs::write(&old_path, &old).expect("write the old content");
    let new = random_bytes(92, 20 << 20);
    let points = [
        KillAt::Start,
        KillAt::Temporary,
        KillAt::Chunks(1),
        KillAt::Chunks(2),
    ];
    let ids: Vec<String> = ok(obj(&server, &["create", "--count", "4"]))
        .stdout()
        .lines()
        .map(str::to_owned)
        .collect();
    for (at, id) in points.into_iter().zip(&ids) {
        let n: u64 = id.parse().expect("an object id");
        put_file(&server, id, &old_path);
        let mut child = start_put(&server, id, Stdio::null());
        let mut stdin = child.stdin.take().expect("the put's stdin is piped");
        let wanted = match at {
            KillAt::Start => None,
            KillAt::Temporary => Some(0),
            KillAt::Chunks(k) => {
                stdin
                    .write_all(&new[..(k * CHUNK) as usize])
                    .expect("feed the put");
                Some(k * CHUNK)
            }
        };
        if let Some(bytes) = wanted {
            wait_for(&format!("{at:?}: {bytes} bytes in the temporary"), || {
                temporary_length(&server, n).is_some_and(|l| l >= bytes)
            });
        }
        child.kill().expect("kill the put");
        child.wait().expect("reap the put");
        drop(stdin);
        reads_whole(&server, id, &old, &format!("{at:?}"));
        let report = ok(obj(&server, &["fsck", "--grace", "0s"])).stdout();
        if !matches!(at, KillAt::Start) {
            assert!(
                report.contains(&format!("an interrupted put of object {id}\n")),
                "{at:?}: {report}"
            );
        }
        assert_eq!(
            ok(obj(&server, &["fsck", "--grace", "0s"])).stdout(),
            "clean\n",
            "{at:?}: fsck left something behind"
        );
        reads_whole(&server, id, &old, &format!("{at:?}, after fsck"));
    }

    // A temporary younger than the grace period is left alone.
    let id = &ids[0];
    let n: u64 = id.parse().expect("an object id");
    let mut child = start_put(&server, id, Stdio::null());
    wait_for("a temporary", || temporary_length(&server, n).is_some());
    child.kill().expect("kill the put");
    child.wait().expect("reap the put");
    let report = ok(obj(&server, &["fsck"])).stdout();
    assert!(report.contains("younger than the grace period"), "{report}");
    assert!(temporary_length(&server, n).is_some());
    ok(obj(&server, &["fsck", "--grace", "0s"]));

    // A put that finishes replaces the content, and leaves nothing.
    let new_path = dir.path().join("new.bin");
    std::fs::write(&new_path, &new).expect("write the new content");
    put_file(&server, id, &new_path);
    reads_whole(&server, id, &new, "a whole put");
    assert_eq!(
        ok(obj(&server, &["fsck", "--grace", "0s"])).stdout(),
        "clean\n"
    );

    // An object an older, in-place put left marked is refused by get;
    // a put clears the mark.
    ok(obj(&server, &["attr", "set", id, "put.incomplete=true"]));
    let get = obj(&server, &["get", id]);
    get.assert_code(1);
    assert!(get.stderr().contains("incomplete"), "{}", get.stderr());
    put_file(&server, id, &old_path);
    reads_whole(&server, id, &old, "a put over a marked object");
}

#[test]
fn a_server_killed_midway_fails_the_put_and_keeps_the_old_object() {
    let dir = tempdir();
    let objects = dir.path().join("objects");
    let mut server = ServerBuilder::new().objects(&objects).start();
    let id = ok(obj(&server, &["create"])).stdout().trim().to_owned();
    let n: u64 = id.parse().expect("an object id");
    let old = random_bytes(93, 3 << 20);
    let new = random_bytes(94, 20 << 20);
    let old_path = dir.path().join("old.bin");
    std::fs::write(&old_path, &old).expect("write the old content");
    put_file(&server, &id, &old_path);
    let mut child = start_put(&server, &id, Stdio::piped());
    let mut stdin = child.stdin.take().expect("the put's stdin is piped");
    stdin
        .write_all(&new[..CHUNK as usize])
        .expect("feed the put");
    wait_for("a chunk in the temporary", || {
        temporary_length(&server, n).is_some_and(|l| l >= CHUNK)
    });
    let addr = server.objects[0];
    server.signal(Signal::KILL);
    assert!(server.wait_exit(Duration::from_secs(10)).is_some());
    let _ = stdin.write_all(&new[CHUNK as usize..]);
    drop(stdin);
    let out = child.wait_with_output().expect("the put's output");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("object {id}")) && err.contains("sluice obj fsck"),
        "{err}"
    );
    let server = ServerBuilder::new()
        .arg("--objects")
        .arg(objects.display().to_string())
        .object_listen(addr.to_string())
        .start();
    reads_whole(&server, &id, &old, "after the server's restart");
    let report = ok(obj(&server, &["fsck", "--grace", "0s"])).stdout();
    assert!(
        report.contains(&format!("an interrupted put of object {id}\n")),
        "{report}"
    );
}
