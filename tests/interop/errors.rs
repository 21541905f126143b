//! What a person sees when something goes wrong: each cause printed once,
//! hints that fit the mistake, usage errors with exit status 2 and a
//! pointer at the subcommand's help, and the log lines operators look
//! for (a refused client, a connection's end, a file served read-only).

use crate::harness::{sluice, tempdir, tool, CmdOutput, ServerBuilder};
use sluice_testkit::pki::Pki;

/// The one `sluice: error:` line of a failed command.
fn error_line(out: &CmdOutput) -> String {
    let stderr = out.stderr();
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("sluice: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.describe());
    lines[0].to_owned()
}

/// Fails unless `needle` occurs exactly once in `line`.
fn once(line: &str, needle: &str) {
    assert_eq!(line.matches(needle).count(), 1, "{needle:?} in {line:?}");
}

/// Waits (up to 10 s) for the server's log to contain `needle`.
#[test]
fn each_cause_is_printed_once() {
    let dir = tempdir();
    let missing_dir = dir.path().join("no-such-dir").join("d.img");
    let out = sluice()
        .args(["serve", "--listen", "127.0.0.1:0", "--export"])
        .arg(format!("d=file:{},size=1M", missing_dir.display()))
        .output();
    out.assert_code(1);
    let line = error_line(&out);
    once(&line, "does not exist");
    assert!(line.contains("no-such-dir does not exist"), "{line}");
    assert!(!line.contains("give a size"), "{line}");

    let busy = ServerBuilder::new().export("d", "mem:1M").start();
    let out = sluice()
        .args(["serve", "--export", "d=mem:1M", "--listen"])
        .arg(busy.addr().to_string())
        .output();
    out.assert_code(1);
    let line = error_line(&out);
    once(&line, "Address already in use");
    assert!(
        line.contains(&format!("cannot listen on {}", busy.addr())),
        "{line}"
    );

    let out = sluice()
        .args(["serve", "--export", "d=mem:1M", "--listen"])
        .arg(format!("unix:{}", missing_dir.display()))
        .output();
    out.assert_code(1);
    once(&error_line(&out), "(os error 2)");
}

#[test]
fn usage_errors_exit_2_and_point_at_the_subcommand_help() {
    let dir = tempdir();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "listen = [\"127.0.0.1:0\"]\nio_threads = \"x\"\n")
        .expect("test setup");
    let out = sluice().args(["serve", "--config"]).arg(&config).output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(line.contains("line 2, column 14 (io_threads)"), "{line}");
    assert!(line.contains("expected a whole number"), "{line}");
    assert!(!line.contains("usize"), "{line}");
    assert!(
        out.stderr().contains("; see 'sluice serve --help'"),
        "{}",
        out.describe()
    );

    let out = sluice()
        .args(["bench", "--uri", "http://127.0.0.1/x"])
        .output();
    out.assert_code(2);
    once(&error_line(&out), "unknown scheme");
    assert!(
        out.stderr().contains("; see 'sluice bench --help'"),
        "{}",
        out.describe()
    );
    let out = sluice()
        .args(["bench", "--uri", "nbd://127.0.0.1:1/x", "--rw", "write"])
        .output();
    out.assert_code(2);
    assert!(error_line(&out).contains("--allow-overwrite"));
}

#[test]
fn a_readable_unwritable_file_is_served_read_only_with_a_warning() {
    let dir = tempdir();
    let image = dir.path().join("ro.img");
    std::fs::write(&image, vec![0x11u8; 1 << 20]).expect("test setup");
    let Some(_unwritable) = sluice_testkit::programs::make_unwritable(&image) else {
        return;
    };
    let srv = ServerBuilder::new().file_export("ro", &image, "").start();
    srv.wait_for_log(&format!(
        "{} is not writable; serving it read-only",
        image.display()
    ));
    let v = tool("nbdinfo")
        .arg("--json")
        .arg(srv.uri("ro"))
        .run()
        .json();
    assert_eq!(v["exports"][0]["is_read_only"].as_bool(), Some(true), "{v}");
}

#[test]
fn refused_clients_and_connection_ends_are_logged_at_the_default_level() {
    let pki = Pki::shared();
    let srv = ServerBuilder::new()
        .export("secret", "mem:1M")
        .args_tls(pki)
        .start();
    // A plaintext client against --tls require.
    let out = tool("nbdinfo").arg(srv.uri("secret")).output();
    assert!(!out.output.status.success(), "{}", out.describe());
    srv.wait_for_log("client refused: the server requires TLS");
    // A certificate not on the allow-list.
    let uri = format!(
        "nbds://{}/secret?tls-certificates={}",
        srv.addr(),
        pki.client("client2").display()
    );
    let out = tool("nbdinfo").arg(&uri).output();
    assert!(!out.output.status.success(), "{}", out.describe());
    srv.wait_for_log("not on the export's allow-list");
    // An allowed client: its connection's end, with what it did.
    let uri = format!(
        "nbds://{}/secret?tls-certificates={}",
        srv.addr(),
        pki.client("client1").display()
    );
    tool("nbdinfo").arg("--map").arg(&uri).run();
    let log = srv.wait_for_log("connection closed");
    let line = log
        .lines()
        .find(|l| l.contains("connection closed"))
        .expect("the line just found");
    for field in [
        "requests=",
        "bytes_received=",
        "data_bytes=",
        "duration=",
        "reason=",
    ] {
        assert!(line.contains(field), "{field} missing from {line:?}");
    }
    assert!(line.contains("peer="), "{line}");
}

#[test]
fn object_clients_refused_tls_are_logged_at_the_default_level() {
    let pki = Pki::shared();
    let dir = tempdir();
    let srv = ServerBuilder::new()
        .export("secret", "mem:1M")
        .objects(dir.path())
        .args_tls(pki)
        .start();
    // `sluice obj` sees TLS required in the greeting and leaves on its
    // own; a client that asks anyway is refused, and that is logged.
    let addr: std::net::SocketAddr = srv
        .obj_uri()
        .trim_start_matches("sluice://")
        .parse()
        .expect("a TCP object listener");
    let mut c = sluice_testkit::raw_obj::RawObjClient::connect(addr);
    assert!(c.hello(sluice_obj_proto::Features::default()).is_err());
    srv.wait_for_log("client refused: TLS is required");
}
