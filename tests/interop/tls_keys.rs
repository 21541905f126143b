//! Server RSA keys of the sizes operators make: a key of an uncommon size
//! (2432 bits, as the reference NBD project's test certificates use)
//! serves real TLS clients, and a key TLS cannot use is refused at
//! start-up with the reason in words.

use sluice_testkit::pki::write_rsa_pki;

use crate::harness::{nbdsh_script, sluice, tempdir, tool, ServerBuilder, MIB};

#[test]
fn an_rsa_2432_key_serves_nbdinfo_and_qemu_img() {
    let dir = tempdir();
    write_rsa_pki(dir.path(), 2432);
    let srv = ServerBuilder::new()
        .export("d", "mem:3M")
        .arg("--tls")
        .arg("require")
        .arg("--tls-certificates")
        .arg(dir.path().join("server").to_string_lossy())
        .start();
    let client = dir.path().join("client");
    let uri = format!(
        "nbds://{}/d?tls-certificates={}",
        srv.addr(),
        client.display()
    );
    let out = tool("nbdinfo").arg("--size").arg(&uri).run();
    assert_eq!(out.stdout().trim(), (3 * MIB).to_string());
    let out = tool("qemu-img")
        .arg("info")
        .arg("--object")
        .arg(format!(
            "tls-creds-x509,id=tls0,dir={},endpoint=client",
            client.display()
        ))
        .arg("--image-opts")
        .arg(format!(
            "driver=nbd,host=127.0.0.1,port={},export=d,tls-creds=tls0",
            srv.addr().port()
        ))
        .run();
    assert!(out.stdout().contains("3 MiB"), "{}", out.describe());
}

#[test]
fn a_48_mib_write_over_tls_is_received_in_pieces_and_reads_back() {
    let dir = tempdir();
    write_rsa_pki(dir.path(), 2432);
    let srv = ServerBuilder::new()
        .export("d", "mem:128M")
        .arg("--tls")
        .arg("require")
        .arg("--tls-certificates")
        .arg(dir.path().join("server").to_string_lossy())
        .start();
    let uri = format!(
        "nbds://{}/d?tls-certificates={}",
        srv.addr(),
        dir.path().join("client").display()
    );
    // libnbd sends each call as one request (qemu would split at 32 MiB).
    nbdsh_script("large_write.py").arg(&uri).run();
}

#[test]
fn a_key_tls_cannot_use_is_refused_in_words() {
    let dir = tempdir();
    write_rsa_pki(dir.path(), 1024);
    let out = sluice()
        .args(["serve", "--listen", "127.0.0.1:0", "--export", "d=mem:1M"])
        .args(["--tls", "on", "--tls-certificates"])
        .arg(dir.path().join("server"))
        .output();
    out.assert_code(1);
    let stderr = out.stderr();
    assert!(
        stderr.contains(
            "the server certificate's key is an RSA key of 1024 bits, which is not supported"
        ),
        "{}",
        out.describe()
    );
    assert!(
        stderr.contains("RSA keys of 2048 to 8192 bits"),
        "{}",
        out.describe()
    );
}
