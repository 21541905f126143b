//! The S3 endpoint with real clients: boto3 (tests/s3/boto3_suite.py,
//! one group of checks per test) and aws-cli against a real
//! `sluice serve --objects DIR --meta DIR --s3 ADDR`, the single-host
//! deployment (the server adds its own object listener to the empty
//! deployment). Each test starts its own server on a port chosen at run
//! time and waits for its `s3 listening on` line.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;

use crate::harness::{
    random_bytes, scrape, sluice, tempdir, Cmd, CmdOutput, Server, ServerBuilder,
};

pub(crate) const ACCESS: &str = "SLUICETESTKEY";
pub(crate) const SECRET: &str = "sluice-test-secret-0123456789";

/// A single-host deployment with S3 on, and its directory.
pub(crate) struct S3Server {
    pub(crate) server: Server,
    pub(crate) dir: TempDir,
    https: bool,
}

pub(crate) fn start() -> S3Server {
    start_with(&[])
}

/// [`start`] with more `sluice serve` arguments.
pub(crate) fn start_with(args: &[&str]) -> S3Server {
    let dir = tempdir();
    let keys = dir.path().join("s3-keys");
    std::fs::write(&keys, format!("# test key\n{ACCESS} {SECRET}\n")).expect("write the key file");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut builder = ServerBuilder::new();
    for a in args {
        builder = builder.arg(a);
    }
    let server = builder
        .objects(&dir.path().join("objects"))
        .arg("--meta")
        .arg(dir.path().join("meta").display().to_string())
        .s3(&keys)
        .metrics()
        .start();
    let https = args.contains(&"--tls");
    S3Server { server, dir, https }
}

impl S3Server {
    pub(crate) fn endpoint(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.server.s3.expect("started with s3()"))
    }

    fn env(&self, cmd: Cmd) -> Cmd {
        cmd.env("S3_ENDPOINT", self.endpoint())
            .env("S3_ACCESS_KEY", ACCESS)
            .env("S3_SECRET_KEY", SECRET)
    }
}

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/boto3_suite.py")
}

/// Runs one group of the boto3 suite against a new server.
fn boto3(group: &str) {
    boto3_with(group, &[], None);
}

/// [`boto3`] against a server started with `args`, trusting `ca`.
fn boto3_with(group: &str, args: &[&str], ca: Option<&Path>) {
    let Some(python) = sluice_testkit::programs::python_with("boto3") else {
        return;
    };
    let s3 = start_with(args);
    let mut cmd = Cmd::new(&python);
    if let Some(ca) = ca {
        cmd = cmd.env("S3_CA", ca);
    }
    let out = s3.env(cmd).arg(suite()).arg(group).output();
    assert!(
        out.code() == Some(0) && out.stdout().contains(&format!("ok {group}")),
        "boto3 group {group} failed: {}\n--- server log ---\n{}",
        out.describe(),
        s3.server.stderr_log()
    );
}

#[test]
fn boto3_buckets() {
    boto3("buckets");
}

#[test]
fn boto3_objects_metadata_and_ranges() {
    boto3("objects");
}

#[test]
fn boto3_conditional_gets() {
    boto3("conditional");
}

#[test]
fn boto3_listing_pages_prefixes_and_delimiters() {
    boto3("listing");
}

#[test]
fn boto3_copy_and_multi_delete() {
    boto3("copy_delete");
}

#[test]
fn boto3_bad_signatures_and_missing_names() {
    boto3("errors");
}

/// HTTPS with the server's certificate directory (`--tls require`):
/// boto3 then sends aws-chunked bodies with trailing checksums itself.
#[test]
fn boto3_over_https() {
    let pki = sluice_testkit::pki::Pki::shared();
    let dir = pki.server().display().to_string();
    let ca = pki.server().join("ca-cert.pem");
    boto3_with(
        "https",
        &["--tls", "require", "--tls-certificates", &dir],
        Some(&ca),
    );
}

#[test]
fn a_client_vanishing_mid_put_leaves_nothing_visible() {
    boto3("vanish");
}

#[test]
fn boto3_multipart_uploads() {
    boto3("multipart");
}

#[test]
fn boto3_aws_chunked_bodies_with_trailing_checksums() {
    boto3("chunked");
}

#[test]
fn boto3_put_over_an_existing_key_replaces_it() {
    boto3("overwrite");
}

#[test]
fn boto3_upload_part_copy_whole_and_ranged() {
    boto3("part_copy");
}

/// Malformed XML, oversized headers and lists, unknown operations and
/// bytes that are not HTTP get errors; the server neither panics nor
/// stops serving (the group ends with requests that must succeed).
#[test]
fn bad_input_gets_s3_errors_and_the_server_keeps_serving() {
    let Some(python) = sluice_testkit::programs::python_with("boto3") else {
        return;
    };
    let mut s3 = start();
    let out = s3
        .env(Cmd::new(&python))
        .arg(suite())
        .arg("bad_input")
        .output();
    let log = s3.server.stderr_log();
    assert!(
        out.code() == Some(0) && out.stdout().contains("ok bad_input"),
        "{}\n--- server log ---\n{log}",
        out.describe()
    );
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
    assert!(s3.server.try_wait().is_none(), "the server exited:\n{log}");
}

/// Every request is in the access log with its operation and status,
/// and counted in the metrics per operation.
#[test]
fn requests_are_access_logged_and_counted() {
    let Some(python) = sluice_testkit::programs::python_with("boto3") else {
        return;
    };
    let s3 = start();
    let out = s3
        .env(Cmd::new(&python))
        .arg(suite())
        .arg("buckets")
        .output();
    out.assert_success();
    let log = s3.server.wait_for_log("op=\"DeleteBucket\"");
    for needle in [
        "op=\"CreateBucket\"",
        "status=409",
        "op=\"PutObject\"",
        "bucket=\"alpha\"",
    ] {
        assert!(
            log.contains(needle),
            "the access log lacks {needle}:\n{log}"
        );
    }
    let metrics = scrape(s3.server.metrics.expect("started with metrics()"));
    for line in [
        "sluice_s3_requests_total{operation=\"CreateBucket\"} 4",
        "sluice_s3_errors_total{operation=\"CreateBucket\"} 2",
        "sluice_s3_requests_total{operation=\"DeleteBucket\"} 3",
        "sluice_s3_received_bytes_total{operation=\"PutObject\"} 1",
        "sluice_s3_request_duration_seconds_count{operation=\"ListBuckets\"} 3",
    ] {
        assert!(
            metrics.contains(line),
            "the metrics lack {line}:\n{metrics}"
        );
    }
}

pub(crate) fn aws(s3: &S3Server, args: &[&str]) -> CmdOutput {
    aws_at(&s3.endpoint(), s3.dir.path(), args)
}

/// [`aws`], which must succeed (the failure shows the server's log).
fn aws_ok(s3: &S3Server, args: &[&str]) -> CmdOutput {
    let out = aws(s3, args);
    assert_eq!(
        out.code(),
        Some(0),
        "aws {args:?}: {}\n--- server log ---\n{}",
        out.describe(),
        s3.server.stderr_log()
    );
    out
}

/// aws-cli against `endpoint`, its home under `dir`.
fn aws_at(endpoint: &str, dir: &Path, args: &[&str]) -> CmdOutput {
    let aws = sluice_testkit::programs::program("/usr/bin/aws");
    let home = dir.join("aws-home");
    std::fs::create_dir_all(&home).expect("aws home");
    Cmd::new(aws)
        .env("HOME", home.display().to_string())
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .args(["--endpoint-url", endpoint])
        .args(args)
        .output()
}

/// The packaged config (contrib/sluice.toml) with its S3 lines
/// uncommented, its addresses made port 0 and its paths the test's,
/// starts the endpoint; `--print-uri` prints its URL, which aws-cli then
/// uses.
#[test]
fn packaged_config_starts_the_endpoint_and_print_uri_shows_it() {
    use std::io::BufRead;
    if sluice_testkit::programs::program_or_skip("/usr/bin/aws").is_none() {
        return;
    }
    let dir = tempdir();
    let d = dir.path().display().to_string();
    let packaged =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/sluice.toml"))
            .expect("read contrib/sluice.toml");
    let mut config = String::new();
    for line in packaged.lines() {
        let line = match line.strip_prefix("# ") {
            Some(l) if l.starts_with("meta =") || l == "[s3]" || l.starts_with("listen = \"") => l,
            Some(l) if l.starts_with("key_file =") => "key_file = \"s3-keys\"",
            _ => line,
        };
        let line = line
            .replace(":10809", ":0")
            .replace(":10810", ":0")
            .replace(":10811", ":0")
            .replace(":9109", ":0")
            .replace("/run/sluice/", &format!("{d}/"))
            .replace("size=10G", "size=16M");
        config.push_str(&line);
        config.push('\n');
    }
    assert!(
        config.contains("\n[s3]\n") && config.contains("\nmeta = \"meta\"\n"),
        "{config}"
    );
    let path = dir.path().join("sluice.toml");
    std::fs::write(&path, &config).expect("write the config");
    let keys = dir.path().join("s3-keys");
    std::fs::write(&keys, format!("{ACCESS} {SECRET}\n")).expect("write the keys");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(dir.path())
        .args(["serve", "--print-uri", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::from(
            std::fs::File::create(dir.path().join("stderr")).expect("log"),
        ))
        .spawn()
        .expect("start sluice");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let url = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(l) if l.starts_with("http://") => break l,
            Ok(l) => lines.push(l),
            Err(e) => {
                let _ = child.kill();
                panic!(
                    "no http:// URI ({e}) after {lines:?}; log:\n{}",
                    std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default()
                );
            }
        }
    };
    let listening = lines
        .iter()
        .find_map(|l| l.strip_prefix("s3 listening on "))
        .unwrap_or_else(|| panic!("no s3 listening line in {lines:?}"));
    assert_eq!(url, format!("http://{listening}"));
    let mb = aws_at(&url, dir.path(), &["s3", "mb", "s3://from-config"]);
    let ls = aws_at(&url, dir.path(), &["s3", "ls"]);
    let _ = child.kill();
    let _ = child.wait();
    mb.assert_success();
    assert!(ls.stdout().contains("from-config"), "{}", ls.describe());
}

/// aws-cli: mb, cp up and down, ls with a prefix, rm.
#[test]
fn aws_cli_round_trip() {
    if sluice_testkit::programs::program_or_skip("/usr/bin/aws").is_none() {
        return;
    }
    let s3 = start();
    let ok = |args: &[&str]| aws_ok(&s3, args);
    ok(&["s3", "mb", "s3://cli"]);
    let local = s3.dir.path().join("up.bin");
    let data = random_bytes(7, 3 << 20);
    std::fs::write(&local, &data).expect("write the file to upload");
    let local_s = local.display().to_string();
    ok(&["s3", "cp", &local_s, "s3://cli/dir/up.bin"]);
    ok(&["s3", "cp", &local_s, "s3://cli/other.bin"]);
    let listed = ok(&["s3", "ls", "s3://cli/dir/"]).stdout();
    assert!(
        listed.contains("up.bin") && !listed.contains("other.bin"),
        "{listed}"
    );
    let down = s3.dir.path().join("down.bin");
    ok(&[
        "s3",
        "cp",
        "s3://cli/dir/up.bin",
        &down.display().to_string(),
    ]);
    assert!(
        std::fs::read(&down).expect("read the download") == data,
        "downloaded bytes differ"
    );
    // 100 MiB, far above aws-cli's 8 MiB threshold: a multipart upload
    // of 13 parts, and a ranged download in parts.
    let big = s3.dir.path().join("big.bin");
    let big_data = random_bytes(8, 100 << 20);
    std::fs::write(&big, &big_data).expect("write the big file");
    ok(&["s3", "cp", &big.display().to_string(), "s3://cli/big.bin"]);
    let big_down = s3.dir.path().join("big-down.bin");
    ok(&[
        "s3",
        "cp",
        "s3://cli/big.bin",
        &big_down.display().to_string(),
    ]);
    assert!(
        std::fs::read(&big_down).expect("read") == big_data,
        "the big download differs"
    );
    let head = ok(&[
        "s3api",
        "head-object",
        "--bucket",
        "cli",
        "--key",
        "big.bin",
    ])
    .stdout();
    assert!(head.contains("-13\\\""), "not 13 parts: {head}");
    ok(&["s3", "rm", "s3://cli/dir/up.bin"]);
    let listed = ok(&["s3", "ls", "s3://cli/"]).stdout();
    assert!(
        !listed.contains("up.bin") && listed.contains("other.bin"),
        "{listed}"
    );
    // A presigned URL works with a client that knows nothing of S3
    // (curl), and one with a changed signature does not.
    let url = ok(&["s3", "presign", "s3://cli/other.bin", "--expires-in", "300"]).stdout();
    let url = url.trim();
    let curl = sluice_testkit::programs::program("curl");
    let fetched = s3.dir.path().join("presigned.bin");
    Cmd::new(&curl)
        .args(["--silent", "--show-error", "--fail", "--output"])
        .arg(&fetched)
        .arg(url)
        .run();
    assert!(
        std::fs::read(&fetched).expect("read") == data,
        "the presigned download differs"
    );
    let (head, sig) = url
        .rsplit_once("X-Amz-Signature=")
        .expect("a SigV4 presigned URL");
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    let forged = format!("{head}X-Amz-Signature={flipped}{}", &sig[1..]);
    let out = Cmd::new(&curl)
        .args([
            "--silent",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
        ])
        .arg(&forged)
        .output();
    assert_eq!(
        out.stdout(),
        "403",
        "a forged presigned URL: {}",
        out.describe()
    );
}

/// aws s3 sync: a tree up, changes (one file changed, one added, one
/// removed) synced with --delete move only what changed, and the tree
/// down again is the same.
#[test]
fn aws_cli_sync_up_and_down() {
    if sluice_testkit::programs::program_or_skip("/usr/bin/aws").is_none() {
        return;
    }
    let s3 = start();
    let ok = |args: &[&str]| aws_ok(&s3, args).stdout();
    ok(&["s3", "mb", "s3://sync"]);
    let up = s3.dir.path().join("up");
    let files = [
        ("a.txt", 10),
        ("b/c.bin", 70_000),
        ("b/d/e.bin", 9 << 20),
        ("gone.txt", 5),
    ];
    for (i, (name, size)) in files.iter().enumerate() {
        let path = up.join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, random_bytes(40 + i as u64, *size)).expect("write");
    }
    let up_s = up.display().to_string();
    let first = ok(&["s3", "sync", "--no-progress", &up_s, "s3://sync/tree/"]);
    assert_eq!(first.matches("upload:").count(), 4, "{first}");
    let listed = ok(&["s3", "ls", "--recursive", "s3://sync/tree/"]);
    assert_eq!(listed.lines().count(), 4, "{listed}");
    let again = ok(&["s3", "sync", "--no-progress", &up_s, "s3://sync/tree/"]);
    assert!(!again.contains("upload:"), "nothing changed, yet: {again}");
    std::fs::write(up.join("b/c.bin"), random_bytes(50, 70_001)).expect("change");
    std::fs::write(up.join("new.txt"), b"new").expect("add");
    std::fs::remove_file(up.join("gone.txt")).expect("remove");
    let second = ok(&[
        "s3",
        "sync",
        "--no-progress",
        "--delete",
        &up_s,
        "s3://sync/tree/",
    ]);
    let mut moved: Vec<&str> = second
        .lines()
        .filter_map(|l| l.split_once(": ").map(|(verb, _)| verb))
        .collect();
    moved.sort_unstable();
    assert_eq!(moved, ["delete", "upload", "upload"], "{second}");
    assert!(
        second.contains("b/c.bin") && second.contains("new.txt") && second.contains("gone.txt"),
        "{second}"
    );
    let down = s3.dir.path().join("down");
    ok(&[
        "s3",
        "sync",
        "--no-progress",
        "s3://sync/tree/",
        &down.display().to_string(),
    ]);
    for name in ["a.txt", "b/c.bin", "b/d/e.bin", "new.txt"] {
        assert!(
            std::fs::read(up.join(name)).expect("read up")
                == std::fs::read(down.join(name)).expect("read down"),
            "{name} differs after the sync down"
        );
    }
    assert!(!down.join("gone.txt").exists(), "a deleted key came down");
}

/// `--s3-domain s3.test`: a request to `BUCKET.s3.test` (curl, signing
/// with SigV4 itself, its name resolved to the server with --resolve)
/// addresses bucket BUCKET; path-style requests still work beside it.
#[test]
fn virtual_host_style_requests_name_the_bucket_in_the_host() {
    if sluice_testkit::programs::program_or_skip("/usr/bin/aws").is_none() {
        return;
    }
    let curl = sluice_testkit::programs::program("curl");
    let s3 = start_with(&["--s3-domain", "s3.test"]);
    let port = s3.server.s3.expect("s3").port();
    aws(&s3, &["s3", "mb", "s3://vhost"]).assert_success();
    let vcurl = |path: &str| {
        Cmd::new(&curl)
            .args(["--silent", "--show-error", "--fail"])
            .args(["--aws-sigv4", "aws:amz:us-east-1:s3"])
            .args(["--user", &format!("{ACCESS}:{SECRET}")])
            // curl 7.88 signs the payload only when told its hash.
            .args(["--header", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
            .args(["--resolve", &format!("vhost.s3.test:{port}:127.0.0.1")])
            .arg(format!("http://vhost.s3.test:{port}{path}"))
    };
    let body = s3.dir.path().join("body");
    let data = random_bytes(60, 300_000);
    std::fs::write(&body, &data).expect("write");
    vcurl("/dir/through-host")
        .args(["--upload-file"])
        .arg(&body)
        .run();
    let down = s3.dir.path().join("down");
    aws(
        &s3,
        &[
            "s3",
            "cp",
            "s3://vhost/dir/through-host",
            &down.display().to_string(),
        ],
    )
    .assert_success();
    assert!(
        std::fs::read(&down).expect("read") == data,
        "put by virtual host, read by path differs"
    );
    let got = s3.dir.path().join("got");
    vcurl("/dir/through-host").arg("--output").arg(&got).run();
    assert!(
        std::fs::read(&got).expect("read") == data,
        "read by virtual host differs"
    );
    let listed = vcurl("/?list-type=2&prefix=dir%2F").run().stdout();
    assert!(listed.contains("<Key>dir/through-host</Key>"), "{listed}");
    let log = s3.server.wait_for_log("op=\"ListObjectsV2\"");
    assert!(
        log.contains("op=\"PutObject\" bucket=\"vhost\" key=\"dir/through-host\""),
        "the access log does not name the virtual host's bucket:\n{log}"
    );
}

/// `--s3` without access keys or without a metadata service is refused
/// with one line saying what is missing (exit 2), before serving.
#[test]
fn s3_without_keys_or_metadata_is_a_usage_error() {
    let dir = tempdir();
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{ACCESS} {SECRET}\n")).expect("write the key file");
    let objects = dir.path().join("objects").display().to_string();
    let meta = dir.path().join("meta").display().to_string();
    let keys = keys.display().to_string();
    let common = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--export",
        "d=mem:1M",
        "--objects",
        &objects,
        "--object-listen",
        "127.0.0.1:0",
        "--s3",
        "127.0.0.1:0",
    ];
    let cases: [(&[&str], &str); 2] = [
        (&["--meta", &meta], "needs access keys"),
        (&["--s3-key-file", &keys], "needs a metadata service"),
    ];
    for (extra, needle) in cases {
        let out = sluice().args(common).args(extra).output();
        out.assert_code(2);
        let err = out.stderr();
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{}: {err}",
            out.describe()
        );
    }
}
