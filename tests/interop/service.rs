//! `sluice serve` as a service: systemd socket activation (with
//! `systemd-socket-activate`) and readiness notification (a test
//! NOTIFY_SOCKET), SIGHUP reloading TLS credentials and allow-lists under
//! a live TLS client, the pid file, dropping privileges, captive mode
//! (`--run`), `--print-uri`, `--log-format json` and `--version`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};
use sluice_testkit::pki::Pki;

use crate::harness::{
    require_python_libnbd, require_tool, sluice, tempdir, tool, Server, ServerBuilder, MIB,
};

/// A Unix datagram socket standing in for systemd's notification socket.
struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn new() -> Self {
        let dir = tempdir();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        Self {
            socket,
            path,
            _dir: dir,
        }
    }

    /// The next message, failing the test after `timeout`.
    fn recv(&self, timeout: Duration) -> String {
        self.socket
            .set_read_timeout(Some(timeout))
            .expect("set the notify socket's timeout");
        let mut buf = vec![0u8; 4096];
        let n = self
            .socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no notification within {timeout:?}: {e}"));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// Messages until one contains `want`; all of them, joined.
    fn recv_until(&self, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = String::new();
        while !seen.contains(want) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {want:?} among notifications {seen:?}");
            seen.push_str(&self.recv(left));
        }
        seen
    }
}

/// A port nobody listens on right now (for `systemd-socket-activate`,
/// which needs the address before it binds).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("find a free port")
        .port()
}

fn signal(pid: u32, sig: Signal) {
    let pid = Pid::from_raw(i32::try_from(pid).expect("pid fits")).expect("positive pid");
    kill_process(pid, sig).expect("signal the server");
}

/// Waits for `child` to exit; kills it after `timeout`.
fn wait_exit(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("process did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines from `reader` until one satisfies `done` (all of them returned).
fn read_lines_until(
    reader: &mut impl BufRead,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).expect("read a line");
        assert!(n > 0, "end of output before {what}; got {lines:?}");
        let line = line.trim_end().to_owned();
        let stop = done(&line);
        lines.push(line);
        if stop {
            return lines;
        }
    }
}

fn nbd_size(uri: &str) -> u64 {
    let out = tool("nbdinfo").arg("--size").arg(uri).run();
    out.stdout()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("nbdinfo --size: {e}; {}", out.describe()))
}

// ---------------------------------------------------------------------------
// systemd

#[test]
fn socket_activation_serves_nbd_and_objects_on_systemds_sockets_and_notifies() {
    let activate = require_tool("systemd-socket-activate");
    let dir = tempdir();
    let notify = NotifySocket::new();
    let (nbd_port, obj_port) = (free_port(), free_port());
    let mut child = Command::new(activate)
        .arg(format!("--listen=127.0.0.1:{nbd_port}"))
        .arg(format!("--listen=127.0.0.1:{obj_port}"))
        .arg("--fdname=nbd:objects")
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify.path.display()))
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--export", "d=mem:3M", "--objects"])
        .arg(dir.path().join("objects"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start systemd-socket-activate");
    let mut err = BufReader::new(child.stderr.take().expect("piped stderr"));
    // It listens, then starts sluice at the first connection.
    read_lines_until(&mut err, "its second listener", |l| {
        l.contains(&format!(":{obj_port}"))
    });
    std::thread::spawn(move || for _ in err.lines() {});
    assert_eq!(nbd_size(&format!("nbd://127.0.0.1:{nbd_port}/d")), 3 * MIB);
    let ready = notify.recv_until("READY=1");
    assert!(
        ready.contains("STATUS=serving 1 export(s) (d)"),
        "{ready:?}"
    );
    assert!(
        ready.contains(&format!("objects on 127.0.0.1:{obj_port}")),
        "{ready:?}"
    );
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let lines = read_lines_until(&mut out, "the objects line", |l| {
        l.starts_with("objects listening on")
    });
    assert_eq!(
        lines,
        [
            format!("listening on 127.0.0.1:{nbd_port}"),
            format!("objects listening on 127.0.0.1:{obj_port}")
        ]
    );
    // The object protocol answers on the socket named `objects`.
    let ls = sluice()
        .args([
            "obj",
            "ls",
            "--server",
            &format!("sluice://127.0.0.1:{obj_port}"),
        ])
        .output();
    ls.assert_success();
    signal(child.id(), Signal::TERM);
    assert!(notify.recv_until("STOPPING=1").contains("STOPPING=1"));
    let st = wait_exit(&mut child, Duration::from_secs(20));
    assert!(st.success(), "sluice exited with {st}");
}

#[test]
fn notify_socket_gets_ready_with_status_then_stopping_without_activation() {
    let notify = NotifySocket::new();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--listen", "127.0.0.1:0", "--export", "vol=mem:1M"])
        .env("NOTIFY_SOCKET", &notify.path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice");
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let line = read_lines_until(&mut out, "the listening line", |l| {
        l.starts_with("listening on")
    })
    .pop()
    .expect("a line");
    let addr = line.trim_start_matches("listening on ").to_owned();
    let ready = notify.recv_until("READY=1");
    assert!(
        ready.contains(&format!("STATUS=serving 1 export(s) (vol) on {addr}")),
        "{ready:?}"
    );
    // Listening by the time READY=1 arrives.
    assert_eq!(nbd_size(&format!("nbd://{addr}/vol")), MIB);
    signal(child.id(), Signal::TERM);
    notify.recv_until("STOPPING=1");
    assert!(wait_exit(&mut child, Duration::from_secs(20)).success());
}

// ---------------------------------------------------------------------------
// SIGHUP: certificate rotation and allow-lists

/// Copies `pki`'s server credentials (and CA) into `dir`.
fn install_server_certs(pki: &Pki, dir: &Path) {
    for f in ["server-cert.pem", "server-key.pem", "ca-cert.pem"] {
        std::fs::copy(pki.server().join(f), dir.join(f))
            .unwrap_or_else(|e| panic!("copy {f}: {e}"));
    }
}

fn nbds_uri(srv: &Server, export: &str, certs: &Path) -> String {
    format!(
        "nbds://{}/{export}?tls-certificates={}",
        srv.addr(),
        certs.display()
    )
}

/// A libnbd client on one TLS connection that writes and reads, waits for
/// a line on stdin, then writes and reads again on the same connection.
fn live_client(uri: &str) -> (Child, BufReader<std::process::ChildStdout>) {
    const SCRIPT: &str = r#"
import sys, nbd
h = nbd.NBD()
h.set_uri_allow_local_file(True)
h.connect_uri(sys.argv[1])
h.pwrite(b"\xa5" * 4096, 0)
assert h.pread(4096, 0) == b"\xa5" * 4096
print("connected", flush=True)
sys.stdin.readline()
h.pwrite(b"\x5a" * 4096, 4096)
assert h.pread(8192, 0) == b"\xa5" * 4096 + b"\x5a" * 4096
h.flush()
print("still connected", flush=True)
h.shutdown()
"#;
    let mut child = Command::new(require_python_libnbd())
        .args(["-c", SCRIPT, uri])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the libnbd client");
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    read_lines_until(&mut out, "connected", |l| l == "connected");
    (child, out)
}

/// Sends SIGHUP and waits for the server to log the reload's outcome.
fn reload(srv: &mut Server, outcome: &str) {
    let before = srv.stderr_log().matches(outcome).count();
    srv.signal(Signal::HUP);
    let deadline = Instant::now() + Duration::from_secs(20);
    while srv.stderr_log().matches(outcome).count() == before {
        srv.assert_running();
        assert!(
            Instant::now() < deadline,
            "no {outcome:?} after SIGHUP:\n{}",
            srv.stderr_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_rotates_certificates_and_allow_lists_without_dropping_a_live_tls_client() {
    let old = Pki::new();
    let new = Pki::new();
    let dir = tempdir();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).expect("mkdir certs");
    install_server_certs(&old, &certs);
    let config = dir.path().join("sluice.toml");
    let allow = |who: &str| {
        std::fs::write(&config, format!("[tls.allow]\nsecret = [\"CN={who}\"]\n"))
            .expect("write the config file")
    };
    allow("client1");
    let mut srv = ServerBuilder::new()
        .export("secret", "mem:1M")
        .arg("--config")
        .arg(config.to_string_lossy())
        .arg("--tls")
        .arg("require")
        .arg("--tls-certificates")
        .arg(certs.to_string_lossy())
        .arg("--tls-verify-peer")
        .start();
    let (mut client, mut client_out) =
        live_client(&nbds_uri(&srv, "secret", &old.client("client1")));

    // Rotate: the new CA's server certificate, and client2 instead of client1.
    install_server_certs(&new, &certs);
    allow("client2");
    reload(&mut srv, "reloaded TLS credentials and allow-lists");

    // The live connection goes on with its session.
    client
        .stdin
        .as_mut()
        .expect("piped stdin")
        .write_all(b"go\n")
        .expect("wake the client");
    read_lines_until(&mut client_out, "still connected", |l| {
        l == "still connected"
    });
    assert!(wait_exit(&mut client, Duration::from_secs(30)).success());

    // New connections see the new certificate and allow-list.
    let addr = srv.addr();
    let info = |pki: &Pki, who: &str| {
        tool("nbdinfo")
            .arg("--size")
            .arg(format!(
                "nbds://{addr}/secret?tls-certificates={}",
                pki.client(who).display()
            ))
            .timeout(Duration::from_secs(60))
            .output()
    };
    let old_ca = info(&old, "client2");
    assert_ne!(
        old_ca.code(),
        Some(0),
        "old CA still trusted: {}",
        old_ca.describe()
    );
    let refused = info(&new, "client1");
    assert_ne!(
        refused.code(),
        Some(0),
        "client1 still allowed: {}",
        refused.describe()
    );
    let ok = info(&new, "client2");
    ok.assert_success();
    assert_eq!(ok.stdout().trim(), MIB.to_string());

    // A reload that fails keeps what the server has, and says why.
    std::fs::write(certs.join("server-key.pem"), "not a key\n").expect("break the key");
    reload(&mut srv, "reload failed");
    srv.wait_for_log("server-key.pem");
    info(&new, "client2").assert_success();
}

// ---------------------------------------------------------------------------
// Pid file, privileges, captive mode

#[test]
fn pidfile_names_the_server_and_is_removed_at_exit() {
    let dir = tempdir();
    let pidfile = dir.path().join("sluice.pid");
    let mut srv = ServerBuilder::new()
        .export("d", "mem:1M")
        .arg("--pidfile")
        .arg(pidfile.to_string_lossy())
        .start();
    let text = std::fs::read_to_string(&pidfile).expect("read the pid file");
    assert_eq!(text, format!("{}\n", srv.pid()));
    srv.signal(Signal::TERM);
    assert!(srv
        .wait_exit(Duration::from_secs(20))
        .is_some_and(|s| s.success()));
    assert!(!pidfile.exists(), "pid file left behind");
}

/// The effective uid/gid of `pid` from /proc.
fn ids_of(pid: i32) -> (u32, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let field = |name: &str| -> u32 {
        let line = status
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in status"));
        line.split_whitespace()
            .nth(2)
            .expect("effective id")
            .parse()
            .expect("a number")
    };
    (field("Uid:"), field("Gid:"))
}

#[test]
fn user_and_group_are_taken_after_binding_a_privileged_port() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: dropping privileges needs root");
        return;
    }
    // Port 1023 needs root to bind; the server then runs as nobody.
    let port = (600..1024)
        .find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free privileged port");
    let srv = ServerBuilder::new()
        .listen(format!("127.0.0.1:{port}"))
        .export("d", "mem:2M")
        .arg("--user")
        .arg("nobody")
        .arg("--group")
        .arg("nogroup")
        .start();
    let nobody = nix::unistd::User::from_name("nobody")
        .expect("look up nobody")
        .expect("nobody exists");
    let nogroup = nix::unistd::Group::from_name("nogroup")
        .expect("look up nogroup")
        .expect("nogroup exists");
    assert_eq!(
        ids_of(srv.pid()),
        (nobody.uid.as_raw(), nogroup.gid.as_raw())
    );
    assert_eq!(nbd_size(&srv.uri("d")), 2 * MIB);
}

#[test]
fn unknown_user_is_refused_before_anything_is_bound() {
    let out = sluice()
        .args(["serve", "--listen", "127.0.0.1:0", "--export", "d=mem:1M"])
        .args(["--user", "no-such-user-sluice"])
        .output();
    out.assert_code(2);
    assert!(
        out.stderr()
            .contains("--user no-such-user-sluice: no such user"),
        "{}",
        out.describe()
    );
}

#[test]
fn captive_mode_runs_nbdinfo_on_a_private_socket_and_exits_with_its_status() {
    require_tool("nbdinfo");
    let out = sluice()
        .args([
            "serve",
            "--export",
            "d=mem:5M",
            "--run",
            r#"nbdinfo --size "$uri"; echo "nbd=$nbd""#,
        ])
        .output();
    out.assert_success();
    let stdout = out.stdout();
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("5242880"), "{}", out.describe());
    let nbd = lines.next().expect("the nbd line");
    assert!(
        nbd.starts_with("nbd=nbd+unix:///?socket=") && nbd.ends_with("/nbd.sock"),
        "{}",
        out.describe()
    );
    let socket = nbd.trim_start_matches("nbd=nbd+unix:///?socket=");
    assert!(!Path::new(socket).exists(), "private socket left behind");

    let failed = sluice()
        .args(["serve", "--export", "d=mem:1M", "--run", "exit 7"])
        .output();
    failed.assert_code(7);
}

#[test]
fn captive_mode_sets_sluice_to_the_object_uri_when_objects_are_served() {
    let dir = tempdir();
    let bin = env!("CARGO_BIN_EXE_sluice");
    let out = sluice()
        .args(["serve", "--export", "d=mem:1M", "--objects"])
        .arg(dir.path().join("objects"))
        .arg("--run")
        .arg(format!(
            r#"echo "$sluice"; {bin} obj ls --server "$sluice""#
        ))
        .output();
    out.assert_success();
    let first = out.stdout().lines().next().unwrap_or("").to_owned();
    assert!(
        first.starts_with("sluice+unix:///") && first.ends_with("/objects.sock"),
        "{}",
        out.describe()
    );
}

#[test]
fn print_uri_prints_what_nbdinfo_connects_with() {
    let dir = tempdir();
    let sock = dir.path().join("s.sock");
    let mut srv_cmd = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--export",
            "d=mem:2M",
            "--print-uri",
        ])
        .arg("--listen")
        .arg(format!("unix:{}", sock.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start sluice");
    let mut out = BufReader::new(srv_cmd.stdout.take().expect("piped stdout"));
    let lines = read_lines_until(&mut out, "the unix URI", |l| l.starts_with("nbd+unix:"));
    let tcp = lines
        .iter()
        .find(|l| l.starts_with("nbd://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no TCP URI in {lines:?}"));
    assert_eq!(nbd_size(tcp), 2 * MIB);
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("nbd+unix:///?socket={}", sock.display()).as_str())
    );
    assert_eq!(
        nbd_size(&format!("nbd+unix:///?socket={}", sock.display())),
        2 * MIB
    );
    signal(srv_cmd.id(), Signal::TERM);
    assert!(wait_exit(&mut srv_cmd, Duration::from_secs(20)).success());
}

#[test]
fn exit_with_parent_stops_the_server_when_its_parent_exits() {
    let dir = tempdir();
    let pidfile = dir.path().join("sluice.pid");
    // sh starts the server, waits until it listens (the pid file), exits.
    let script = format!(
        r#""$0" serve --listen 127.0.0.1:0 --export d=mem:1M --exit-with-parent --pidfile {0} >/dev/null 2>&1 &
        while [ ! -s {0} ]; do sleep 0.05; done"#,
        pidfile.display()
    );
    let out = tool("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .timeout(Duration::from_secs(60))
        .output();
    out.assert_success();
    // The pid file is removed by a clean exit, which only SIGTERM (the
    // parent-death signal) causes here.
    let deadline = Instant::now() + Duration::from_secs(20);
    while pidfile.exists() {
        assert!(
            Instant::now() < deadline,
            "the server outlived its parent by 20 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let srv = ServerBuilder::new()
        .export("d", "mem:1M")
        .arg("--log-format")
        .arg("json")
        .start();
    assert_eq!(nbd_size(&srv.uri("d")), MIB);
    let log = srv.wait_for_log("connection closed");
    let lines: Vec<&str> = log.lines().collect();
    assert!(!lines.is_empty(), "no log lines");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"));
        assert!(v["level"].is_string() && v["fields"].is_object(), "{line}");
    }
    assert!(log.contains(r#""message":"connection accepted""#), "{log}");
}

#[test]
fn the_benchs_embedded_server_keeps_its_lines_out_of_the_report() {
    let out = sluice()
        .args(["bench", "run", "--size", "4M", "--ops", "64"])
        .output();
    out.assert_success();
    assert!(
        out.stdout().contains("randread-4k-qd1"),
        "{}",
        out.describe()
    );
    assert!(
        !out.stderr().contains("connection accepted"),
        "server log lines in the bench's output:\n{}",
        out.stderr()
    );
}

#[test]
fn version_names_the_commit_and_the_profile() {
    let out = sluice().arg("--version").output();
    out.assert_success();
    let line = out.stdout();
    let want_commit = Command::new(require_tool("git"))
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        );
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    assert_eq!(
        line.trim(),
        format!(
            "sluice {} (commit {want_commit}, {profile} build)",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn metrics_carry_build_info_and_process_series() {
    let srv = ServerBuilder::new().export("d", "mem:1M").metrics().start();
    let version = sluice().arg("--version").output().stdout();
    // "sluice 0.1.0 (commit abc, debug build)"
    let (commit, profile) = version
        .split_once("(commit ")
        .and_then(|(_, rest)| rest.trim().trim_end_matches(" build)").split_once(", "))
        .unwrap_or_else(|| panic!("unexpected --version: {version:?}"));
    let body = crate::harness::scrape(srv.metrics.expect("metrics address"));
    assert!(
        body.contains(&format!(
            "sluice_build_info{{version=\"{}\",commit=\"{commit}\",profile=\"{profile}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{body}"
    );
    let value = |name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{body}"))
    };
    let stat = std::fs::metadata(format!("/proc/{}", srv.pid())).expect("the server's /proc");
    let started = std::os::unix::fs::MetadataExt::ctime(&stat) as f64;
    assert!((value("process_start_time_seconds") - started).abs() < 5.0);
    assert!(value("process_resident_memory_bytes") > 1e6);
    let fds = std::fs::read_dir(format!("/proc/{}/fd", srv.pid()))
        .expect("the server's fds")
        .count() as f64;
    assert!((value("process_open_fds") - fds).abs() <= 4.0, "{fds}");
}

#[test]
fn docs_metrics_lists_every_metric_a_server_with_a_cache_and_objects_exports() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/METRICS.md"))
        .expect("read docs/METRICS.md");
    let dir = tempdir();
    let srv = ServerBuilder::new()
        .export("c", "mem:1M")
        .arg("--cache")
        .arg("writeback")
        .objects(&dir.path().join("objects"))
        .metrics()
        .start();
    assert_eq!(nbd_size(&srv.uri("c")), MIB);
    let body = crate::harness::scrape(srv.metrics.expect("metrics address"));
    let names: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(names.len() > 20, "{body}");
    for name in names {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/METRICS.md does not list {name}"
        );
    }
}
