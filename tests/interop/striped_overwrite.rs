//! `sluice obj --meta META put NAME` over a name that exists, killed
//! (SIGKILL) at several points: before it did anything, once its new
//! version is recorded as pending, and after one and two 8 MiB chunks of
//! its data reached the object servers. After each kill the name reads
//! back as its old content, whole, with exit status 0; fsck forgets the
//! abandoned version and removes its pieces, and a second fsck finds
//! nothing left. A put that is not killed then replaces the content.
//! Run over the SQLite metadata service (`sluice serve --meta`) and over
//! etcd.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_client::obj::{ObjClient, ObjOptions, RemoteMetaStore};
use sluice_client::ObjUri;
use sluice_meta::{EtcdConfig, EtcdMetaStore, MetaStore};

use crate::harness::{random_bytes, sluice, tempdir, CmdOutput, Server, ServerBuilder};

const CHUNK: u64 = 8 << 20;

/// Where the put is killed.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// At once: before or after it made anything.
    Start,
    /// Once the entry names its new version as pending.
    Pending,
    /// Once this many chunks of the new version are on the servers.
    Chunks(u64),
}

fn ok(out: CmdOutput) -> CmdOutput {
    out.assert_success();
    out
}

fn object_servers(dir: &std::path::Path, n: usize) -> Vec<Server> {
    (0..n)
        .map(|i| {
            ServerBuilder::new()
                .objects(&dir.join(format!("obj{i}")))
                .start()
        })
        .collect()
}

/// Bytes the pending version's pieces hold on their servers, if the
/// entry has one.
fn pending_bytes(meta: &dyn MetaStore, name: &str) -> Option<u64> {
    let pending = meta.lookup(name).ok()?.pending?;
    let mut total = 0;
    for p in &pending.pieces {
        let uri: ObjUri = p.server.parse().expect("a piece's server URI");
        let mut c = ObjClient::connect(&uri, &ObjOptions::default()).ok()?;
        total += c.stat(p.object).ok()?.length;
    }
    Some(total)
}

fn overwrites_killed_midway_keep_the_old_object(meta_uri: &str, meta: &dyn MetaStore) {
    let run = |args: &[&str]| {
        sluice()
            .args(["obj", "--meta", meta_uri])
            .args(args)
            .timeout(Duration::from_secs(120))
            .output()
    };
    let dir = tempdir();
    let old_path = dir.path().join("old.bin");
    let old = random_bytes(71, 5 << 20);
    std::fs::write(&old_path, &old).expect("write the old content");
    let new = random_bytes(72, 20 << 20);
    let points = [
        KillAt::Start,
        KillAt::Pending,
        KillAt::Chunks(1),
        KillAt::Chunks(2),
    ];
    for (i, at) in points.into_iter().enumerate() {
        let name = format!("over/{i}");
        ok(run(&["put", &name, old_path.to_str().expect("UTF-8 path")]));
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["obj", "--meta", meta_uri, "put", &name, "--stripe", "64K"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sluice obj put");
        let mut stdin = child.stdin.take().expect("the put's stdin is piped");
        let wanted = match at {
            KillAt::Start => None,
            KillAt::Pending => Some(0),
            KillAt::Chunks(n) => {
                stdin
                    .write_all(&new[..(n * CHUNK) as usize])
                    .expect("feed the put");
                Some(n * CHUNK)
            }
        };
        if let Some(bytes) = wanted {
            let deadline = Instant::now() + Duration::from_secs(60);
            while pending_bytes(meta, &name).is_none_or(|b| b < bytes) {
                assert!(
                    Instant::now() < deadline,
                    "{at:?}: the new version of {name} never reached {bytes} bytes"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        child.kill().expect("kill the put");
        child.wait().expect("reap the put");
        drop(stdin);
        let entry = ok(run(&["stat", &name, "--json"])).json();
        assert_eq!(entry["state"], "ready", "{at:?}: {entry}");
        assert_eq!(entry["size"], old.len() as u64, "{at:?}: {entry}");
        assert!(
            ok(run(&["get", &name])).output.stdout == old,
            "{at:?}: {name} does not read back as its old content"
        );
        let report = ok(run(&["fsck", "--grace", "0s"])).stdout();
        if !matches!(at, KillAt::Start) {
            assert!(
                report.contains(&format!("abandoned put: {name} ")),
                "{at:?}: {report}"
            );
        }
        assert_eq!(
            ok(run(&["fsck", "--grace", "0s"])).stdout(),
            "clean\n",
            "{at:?}: fsck left something behind"
        );
        assert!(ok(run(&["get", &name])).output.stdout == old, "{at:?}");
    }
    let new_path = dir.path().join("new.bin");
    std::fs::write(&new_path, &new).expect("write the new content");
    ok(run(&[
        "put",
        "over/0",
        new_path.to_str().expect("UTF-8 path"),
    ]));
    assert!(ok(run(&["get", "over/0"])).output.stdout == new);
    assert_eq!(ok(run(&["fsck", "--grace", "0s"])).stdout(), "clean\n");
}

#[test]
fn overwrites_killed_midway_keep_the_old_object_with_sqlite_metadata() {
    let dir = tempdir();
    let servers = object_servers(dir.path(), 3);
    let meta_server = ServerBuilder::new()
        .objects(&dir.path().join("meta-objects"))
        .arg("--meta")
        .arg(dir.path().join("meta").display().to_string())
        .start();
    let meta = RemoteMetaStore::connect(
        meta_server.obj_uri().parse().expect("the server's URI"),
        ObjOptions::default(),
    )
    .expect("reach the metadata service");
    for s in &servers {
        meta.add_server(&s.obj_uri()).expect("add a server");
    }
    overwrites_killed_midway_keep_the_old_object(&meta_server.obj_uri(), &meta);
}

#[test]
fn overwrites_killed_midway_keep_the_old_object_with_etcd_metadata() {
    let Some(etcd) = sluice_testkit::etcd::EtcdCluster::start_or_skip(1) else {
        return;
    };
    let dir = tempdir();
    let servers = object_servers(dir.path(), 2);
    let meta: Arc<dyn MetaStore> =
        Arc::new(EtcdMetaStore::connect(EtcdConfig::new(etcd.endpoints())).expect("reach etcd"));
    for s in &servers {
        meta.add_server(&s.obj_uri()).expect("add a server");
    }
    overwrites_killed_midway_keep_the_old_object(&etcd.uri(), &*meta);
}
