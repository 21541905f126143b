//! TLS (NBD STARTTLS) against real clients: qemu-img/qemu-io with
//! `tls-creds-x509` and libnbd's nbdinfo/nbdcopy with `nbds://` URIs,
//! using the test kit's certificates (`sluice_testkit::pki`, made with
//! rcgen at test time): a CA, a server certificate for
//! 127.0.0.1/localhost, and client certificates (allowed, not allowed,
//! expired, signed by another CA).
//!
//! Every refusal is checked to happen before the export's size reaches the
//! client (the 16 MiB of `secret` never appears in the client's output);
//! the exact bytes of the plaintext refusals are checked with a raw client,
//! and byte-for-byte checks of each TLS refusal are in
//! crates/sluice-server/tests/tls.rs.

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::harness::{
    assert_files_equal, read_file_range, tempdir, tool, write_random_file, CmdOutput, Server,
    ServerBuilder, MIB,
};
use sluice_testkit::pki::Pki;
use sluice_testkit::raw_nbd::{
    go_data, read_greeting, read_option_reply, send_option, FLAG_C_FIXED_NEWSTYLE,
    FLAG_C_NO_ZEROES, OPT_EXPORT_NAME, OPT_GO, OPT_INFO, OPT_LIST, OPT_STARTTLS,
    OPT_STRUCTURED_REPLY, REP_ERR_TLS_REQD,
};

const SECRET_SIZE: &str = "16777216";
const TLS_REQD_MSG: &[u8] = b"this server requires TLS: send NBD_OPT_STARTTLS first";

// ---------------------------------------------------------------------------
// Server and clients

/// `secret` (16 MiB) and `open` (8 MiB) with `--tls MODE`; with
/// `verify_peer`, client certificates are required and only CN=client1
/// may use `secret`.
fn tls_server(pki: &Pki, mode: &str, verify_peer: bool) -> Server {
    let mut b = ServerBuilder::new()
        .export("secret", "mem:16M")
        .export("open", "mem:8M")
        .arg("--tls")
        .arg(mode)
        .arg("--tls-certificates")
        .arg(pki.server().to_string_lossy());
    if verify_peer {
        b = b
            .arg("--tls-verify-peer")
            .arg("--tls-allow")
            .arg("secret=CN=client1");
    }
    b.start()
}

fn nbds_uri(srv: &Server, export: &str, certs: &Path) -> String {
    format!(
        "nbds://{}/{export}?tls-certificates={}",
        srv.addr(),
        certs.display()
    )
}

/// qemu's arguments for a TLS connection to `export`.
fn qemu_tls_args(srv: &Server, export: &str, certs: &Path) -> Vec<String> {
    vec![
        "--object".into(),
        format!(
            "tls-creds-x509,id=tls0,dir={},endpoint=client",
            certs.display()
        ),
        "--image-opts".into(),
        format!(
            "driver=nbd,host=127.0.0.1,port={},export={export},tls-creds=tls0",
            srv.addr().port()
        ),
    ]
}

fn qemu_io(srv: &Server, export: &str, certs: &Path, cmds: &[&str]) -> CmdOutput {
    let mut c = tool("qemu-io").args(qemu_tls_args(srv, export, certs));
    for cmd in cmds {
        c = c.arg("-c").arg(cmd);
    }
    c.output()
}

fn assert_no_secret_size(out: &CmdOutput) {
    assert!(
        !out.stdout().contains(SECRET_SIZE) && !out.stderr().contains(SECRET_SIZE),
        "the export size leaked to a refused client; {}",
        out.describe()
    );
}

/// The client failed, and learned nothing about `secret`'s size.
fn assert_refused(out: &CmdOutput) {
    assert!(
        !out.output.status.success(),
        "the client should have been refused; {}",
        out.describe()
    );
    assert_no_secret_size(out);
}

fn nbdinfo(uri: &str) -> CmdOutput {
    tool("nbdinfo")
        .arg(uri)
        .timeout(Duration::from_secs(60))
        .output()
}

// ---------------------------------------------------------------------------
// Valid credentials

#[test]
fn tls_qemu_reads_and_writes_with_a_client_certificate() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", true);
    let c1 = pki.client("client1");
    let out = qemu_io(
        &srv,
        "secret",
        &c1,
        &[
            "write -P 0xab 0 64k",
            "read -P 0xab 0 64k",
            "write -P 0x5c 8M 1M",
        ],
    );
    out.assert_success();
    assert!(!out.stdout().contains("fail"), "{}", out.describe());
    // A new connection sees the bytes; a wrong pattern is caught.
    let out = qemu_io(
        &srv,
        "secret",
        &c1,
        &[
            "read -P 0xab 0 64k",
            "read -P 0 64k 64k",
            "read -P 0x5c 8M 1M",
        ],
    );
    out.assert_success();
    assert!(!out.stdout().contains("fail"), "{}", out.describe());
    let out = qemu_io(&srv, "secret", &c1, &["read -P 0xcd 0 4k"]);
    assert!(
        format!("{}{}", out.stdout(), out.stderr()).contains("Pattern verification failed"),
        "{}",
        out.describe()
    );
    // qemu-img: size, and the whole export copied out over TLS.
    let out = tool("qemu-img")
        .arg("info")
        .arg("--output=json")
        .args(qemu_tls_args(&srv, "secret", &c1))
        .run();
    assert_eq!(out.json()["virtual-size"], 16 * MIB);
    let dir = tempdir();
    let copy = dir.path().join("copy.raw");
    tool("qemu-img")
        .arg("convert")
        .args(qemu_tls_args(&srv, "secret", &c1))
        .args(["-O", "raw"])
        .arg(&copy)
        .run();
    assert_eq!(read_file_range(&copy, 0, 65536), vec![0xab; 65536]);
    assert_eq!(read_file_range(&copy, 65536, 4096), vec![0; 4096]);
    assert_eq!(
        read_file_range(&copy, 8 * MIB, MIB as usize),
        vec![0x5c; MIB as usize]
    );
}

#[test]
fn tls_nbdinfo_and_nbdcopy_round_trip_data() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", true);
    let c1 = pki.client("client1");
    let out = tool("nbdinfo")
        .arg("--json")
        .arg(nbds_uri(&srv, "secret", &c1))
        .run();
    let info = out.json();
    assert_eq!(info["TLS"], true, "{}", out.describe());
    assert_eq!(info["exports"][0]["export-size"], 16 * MIB);
    let out = tool("nbdinfo")
        .arg("--list")
        .arg(nbds_uri(&srv, "", &c1))
        .run();
    assert!(
        out.stdout().contains("export=\"secret\""),
        "{}",
        out.describe()
    );
    assert!(
        out.stdout().contains("export=\"open\""),
        "{}",
        out.describe()
    );
    let dir = tempdir();
    let src = dir.path().join("src.raw");
    let back = dir.path().join("back.raw");
    write_random_file(&src, 16 * MIB, 7, &[(4 * MIB, 2 * MIB)]);
    tool("nbdcopy")
        .arg(&src)
        .arg(nbds_uri(&srv, "secret", &c1))
        .run();
    tool("nbdcopy")
        .arg(nbds_uri(&srv, "secret", &c1))
        .arg(&back)
        .run();
    assert_files_equal(&src, &back);
}

#[test]
fn tls_on_still_serves_plaintext_clients() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "on", false);
    let out = tool("nbdinfo").arg("--json").arg(srv.uri("secret")).run();
    assert_eq!(out.json()["TLS"], false);
    assert_eq!(out.json()["exports"][0]["export-size"], 16 * MIB);
    let out = tool("qemu-io")
        .args(["-f", "raw"])
        .arg(srv.uri("secret"))
        .args(["-c", "write -P 0x42 0 4k", "-c", "read -P 0x42 0 4k"])
        .run();
    assert!(!out.stdout().contains("fail"), "{}", out.describe());
    // TLS clients on the same server see the same data.
    let out = qemu_io(
        &srv,
        "secret",
        &pki.client("nocert"),
        &["read -P 0x42 0 4k"],
    );
    out.assert_success();
    assert!(!out.stdout().contains("fail"), "{}", out.describe());
    let out = tool("nbdinfo")
        .arg("--json")
        .arg(nbds_uri(&srv, "secret", &pki.client("nocert")))
        .run();
    assert_eq!(out.json()["TLS"], true);
}

// ---------------------------------------------------------------------------
// The negative matrix

#[test]
fn tls_require_refuses_plaintext_clients_before_any_export_data() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", false);
    // Raw bytes: every option but STARTTLS gets exactly one TLS_REQD.
    let mut s = srv.connect();
    read_greeting(&mut s);
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .expect("client flags");
    let go = go_data("secret");
    for (option, data) in [
        (OPT_LIST, &[][..]),
        (OPT_STRUCTURED_REPLY, &[][..]),
        (OPT_INFO, &go[..]),
        (OPT_GO, &go[..]),
    ] {
        send_option(&mut s, option, data);
        assert_eq!(
            read_option_reply(&mut s),
            (option, REP_ERR_TLS_REQD, TLS_REQD_MSG.to_vec())
        );
    }
    send_option(&mut s, OPT_EXPORT_NAME, b"secret");
    let mut rest = Vec::new();
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "bytes after EXPORT_NAME: {rest:02x?}");
    // Real clients that do not ask for TLS.
    assert_refused(&nbdinfo(&srv.uri("secret")));
    assert_refused(&tool("nbdinfo").arg("--list").arg(srv.uri("")).output());
    let out = tool("qemu-img")
        .args(["info", "-f", "raw"])
        .arg(srv.uri("secret"))
        .output();
    assert_refused(&out);
    // And STARTTLS is still answered on the same server.
    let mut s = srv.connect();
    read_greeting(&mut s);
    s.write_all(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("client flags");
    send_option(&mut s, OPT_STARTTLS, &[]);
    assert_eq!(read_option_reply(&mut s), (OPT_STARTTLS, 1, vec![]));
}

#[test]
fn tls_untrusted_server_certificate_is_refused_by_the_clients() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", false);
    let other = pki.client("untrusted");
    let out = nbdinfo(&nbds_uri(&srv, "secret", &other));
    assert_refused(&out);
    let out = tool("qemu-img")
        .arg("info")
        .args(qemu_tls_args(&srv, "secret", &other))
        .output();
    assert_refused(&out);
    let text = out.stderr().to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("issuer"),
        "{}",
        out.describe()
    );
}

#[test]
fn tls_expired_client_certificate_is_refused() {
    let pki = Pki::shared();
    let mut srv = tls_server(pki, "require", true);
    let expired = pki.client("expired");
    assert_refused(&nbdinfo(&nbds_uri(&srv, "secret", &expired)));
    // libnbd sends it; the server is the one that refuses it.
    srv.assert_running();
    srv.wait_for_log("certificate expired");
    // qemu checks its own certificate and does not even connect.
    let out = tool("qemu-img")
        .arg("info")
        .args(qemu_tls_args(&srv, "secret", &expired))
        .output();
    assert_refused(&out);
}

#[test]
fn tls_missing_client_certificate_is_refused_with_verify_peer() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", true);
    let nocert = pki.client("nocert");
    for export in ["secret", "open"] {
        assert_refused(&nbdinfo(&nbds_uri(&srv, export, &nocert)));
        let out = tool("qemu-img")
            .arg("info")
            .args(qemu_tls_args(&srv, export, &nocert))
            .output();
        assert_refused(&out);
        assert!(!out.stdout().contains("8388608"), "{}", out.describe());
    }
    srv.wait_for_log("peer sent no certificates");
}

#[test]
fn tls_client_certificate_from_another_ca_is_refused() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", true);
    let rogue = pki.client("rogue");
    assert_refused(&nbdinfo(&nbds_uri(&srv, "secret", &rogue)));
    assert_refused(&nbdinfo(&nbds_uri(&srv, "open", &rogue)));
}

#[test]
fn tls_client_not_on_the_allow_list_is_refused_the_export() {
    let pki = Pki::shared();
    let srv = tls_server(pki, "require", true);
    let c2 = pki.client("client2");
    assert_refused(&nbdinfo(&nbds_uri(&srv, "secret", &c2)));
    let out = tool("qemu-img")
        .arg("info")
        .args(qemu_tls_args(&srv, "secret", &c2))
        .output();
    assert_refused(&out);
    assert!(
        out.stderr().contains("not allowed"),
        "qemu should show the server's reason; {}",
        out.describe()
    );
    // The export is hidden from client2's listing; `open` is usable.
    let out = tool("nbdinfo")
        .arg("--list")
        .arg(nbds_uri(&srv, "", &c2))
        .run();
    assert!(!out.stdout().contains("secret"), "{}", out.describe());
    assert!(
        out.stdout().contains("export=\"open\""),
        "{}",
        out.describe()
    );
    let out = qemu_io(
        &srv,
        "open",
        &c2,
        &["write -P 0x11 0 4k", "read -P 0x11 0 4k"],
    );
    out.assert_success();
    assert!(!out.stdout().contains("fail"), "{}", out.describe());
}

#[test]
fn tls_export_name_for_a_denied_export_disconnects() {
    // NBD_OPT_EXPORT_NAME cannot be refused with an error: a plaintext
    // client asking for a TLS-only export is disconnected (mode `on`).
    let pki = Pki::shared();
    let srv = tls_server(pki, "on", true);
    let mut s = srv.connect();
    read_greeting(&mut s);
    s.write_all(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("client flags");
    send_option(&mut s, OPT_EXPORT_NAME, b"secret");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no size or flags may be sent: {rest:02x?}");
    // Whereas the open export is served in plaintext.
    let out = nbdinfo(&srv.uri("open"));
    out.assert_success();
}
