//! What a new user trips over (issue 34): a second server on files
//! another server holds is refused naming the file and the process, and
//! the first keeps serving.

use crate::harness::{sluice, tempdir, CmdOutput, ServerBuilder};

/// The `sluice: error:` line of a failed command.
fn error_line(out: &CmdOutput) -> String {
    let stderr = out.stderr();
    stderr
        .lines()
        .find(|l| l.starts_with("sluice: error:"))
        .unwrap_or_else(|| panic!("no error line: {}", out.describe()))
        .to_owned()
}

#[test]
fn a_second_server_on_the_same_image_is_refused_and_the_first_keeps_serving() {
    let dir = tempdir();
    let image = dir.path().join("d.img");
    let first = ServerBuilder::new()
        .file_export("d", &image, "size=1M")
        .start();
    for opts in ["", "ro"] {
        let mut spec = format!("d=file:{}", image.display());
        if !opts.is_empty() {
            spec.push_str(&format!(",{opts}"));
        }
        let out = sluice()
            .args(["serve", "--listen", "127.0.0.1:0", "--export", &spec])
            .output();
        out.assert_code(1);
        let line = error_line(&out);
        assert!(line.contains(&image.display().to_string()), "{line}");
        assert!(
            line.contains(&format!("process {} (sluice)", first.pid())),
            "{line}"
        );
    }
    // The first still serves its export.
    crate::harness::tool("nbdinfo")
        .arg("--size")
        .arg(first.uri("d"))
        .run();
}

#[test]
fn read_only_exports_of_one_image_share_it() {
    let dir = tempdir();
    let image = dir.path().join("d.img");
    std::fs::write(&image, vec![0u8; 1 << 20]).unwrap();
    let _a = ServerBuilder::new().file_export("d", &image, "ro").start();
    let _b = ServerBuilder::new().file_export("d", &image, "ro").start();
}

#[test]
fn a_second_server_on_the_same_object_store_is_refused() {
    let dir = tempdir();
    let objects = dir.path().join("objects");
    let meta = dir.path().join("meta");
    let first = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&objects)
        .arg("--meta")
        .arg(meta.display().to_string())
        .start();
    let holder = format!("process {} (sluice)", first.pid());
    for (objects_dir, meta_dir, named) in [
        (&objects, dir.path().join("other-meta"), &objects),
        (&dir.path().join("other-objects"), meta.clone(), &meta),
    ] {
        let out = sluice()
            .args(["serve", "--listen", "127.0.0.1:0", "--export", "d=mem:1M"])
            .args(["--object-listen", "127.0.0.1:0", "--objects"])
            .arg(objects_dir)
            .arg("--meta")
            .arg(&meta_dir)
            .output();
        out.assert_code(1);
        let line = error_line(&out);
        assert!(line.contains(&named.display().to_string()), "{line}");
        assert!(line.contains(&holder), "{line}");
    }
    // The first still serves objects and metadata.
    sluice()
        .args(["obj", "--server", &first.obj_uri(), "ls"])
        .run();
    sluice()
        .args(["meta", "--meta", &first.obj_uri(), "ls-servers"])
        .run();
}

#[test]
fn a_misspelt_uri_key_fails_naming_it_and_the_known_keys() {
    let dir = tempdir();
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let uri = format!("{}?partiton=2", server.obj_uri());
    let out = sluice().args(["obj", "--server", &uri, "ls"]).output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(line.contains("unknown query key \"partiton\""), "{line}");
    assert!(line.contains("known: partition"), "{line}");
}

#[test]
fn a_missing_metadata_directory_is_an_error_unless_a_deployment_starts_there() {
    let dir = tempdir();
    let missing = dir.path().join("no").join("meta");
    let uri = format!("sqlite:{}", missing.display());
    let out = sluice().args(["obj", "--meta", &uri, "ls"]).output();
    out.assert_code(1);
    let line = error_line(&out);
    assert!(line.contains("does not exist"), "{line}");
    assert!(!missing.exists(), "the mistyped directory was created");
    sluice()
        .args(["meta", "--meta", &uri, "add-server", "sluice://127.0.0.1:1"])
        .run();
    assert!(missing.is_dir());
    sluice().args(["obj", "--meta", &uri, "ls"]).run();
    let listed = sluice()
        .args(["meta", "--meta", &uri, "ls-servers", "--json"])
        .run()
        .json();
    assert_eq!(listed, serde_json::json!(["sluice://127.0.0.1:1"]));
}

/// `sluice serve` started in `cwd` with `args`: the child and the
/// address of its first `listening on` line.
fn serve_in(cwd: &std::path::Path, args: &[&str]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(cwd)
        .arg("serve")
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start sluice serve");
    let stdout = child.stdout.take().expect("piped stdout");
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("read the server's stdout");
        if let Some(addr) = line.trim().strip_prefix("listening on ") {
            return (child, addr.to_owned());
        }
    }
    let status = child.wait();
    panic!("sluice serve exited before listening: {status:?}");
}

#[test]
fn a_grown_default_image_is_served_at_its_size() {
    let dir = tempdir();
    std::fs::create_dir(dir.path().join("sluice-data")).unwrap();
    let image = std::fs::File::create(dir.path().join("sluice-data/default.img")).unwrap();
    image.set_len(3 << 30).unwrap();
    let (mut child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0"]);
    let out = crate::harness::tool("nbdinfo")
        .arg("--size")
        .arg(format!("nbd://{addr}/default"))
        .output();
    let _ = child.kill();
    let _ = child.wait();
    out.assert_success();
    assert_eq!(out.stdout().trim(), (3u64 << 30).to_string());
}

/// Runs `args` and checks it fails within `bound` with one error line
/// containing `needle`.
fn fails_soon_saying(args: &[&str], needle: &str) {
    let bound = std::time::Duration::from_secs(5);
    let started = std::time::Instant::now();
    let out = sluice().args(args).output();
    let took = started.elapsed();
    assert_ne!(out.code(), Some(0), "{}", out.describe());
    let line = error_line(&out);
    assert!(line.contains(needle), "{line}");
    assert!(took < bound, "took {took:?}: {line}");
}

#[test]
fn the_wrong_port_is_named_at_once() {
    let dir = tempdir();
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let nbd_as_objects = format!("sluice://{}", server.addr());
    fails_soon_saying(
        &["obj", "--server", &nbd_as_objects, "ls"],
        "is an NBD port, not sluice's object port",
    );
    fails_soon_saying(
        &["obj", "--meta", &nbd_as_objects, "ls"],
        "is an NBD port, not sluice's object port",
    );
    let objects_as_nbd = |export: &str| format!("nbd://{}/{export}", server.objects[0]);
    fails_soon_saying(
        &[
            "raid",
            "create",
            "--level",
            "0",
            "--unit",
            "64K",
            &objects_as_nbd("d"),
            &objects_as_nbd("e"),
        ],
        "is sluice's object port, not NBD",
    );
}

/// Runs `sluice ARGS`, reads a little of its stdout and closes the pipe:
/// the command must end quietly with status 0, as `| head` expects.
fn closed_pipe_ends_quietly(args: &[&str]) {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start sluice");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("the first bytes");
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("piped stderr")
        .read_to_string(&mut stderr)
        .expect("read stderr");
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "{args:?}: {status}; stderr: {stderr}"
    );
    assert_eq!(stderr, "", "{args:?}");
}

#[test]
fn a_closed_pipe_ends_quietly_with_status_0() {
    closed_pipe_ends_quietly(&[
        "model",
        "mva",
        "--demands",
        "0.01,0.02",
        "--customers",
        "5000",
        "--json",
    ]);
    closed_pipe_ends_quietly(&[
        "model",
        "mva",
        "--demands",
        "0.01,0.02",
        "--customers",
        "5000",
    ]);
    let dir = tempdir();
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let uri = server.obj_uri();
    let id = sluice()
        .args(["obj", "--server", &uri, "create"])
        .run()
        .stdout();
    let id = id.trim();
    sluice()
        .args(["obj", "--server", &uri, "put", id])
        .input(vec![7u8; 4 << 20])
        .run();
    closed_pipe_ends_quietly(&["obj", "--server", &uri, "get", id]);
}

#[test]
fn server_times_print_as_rfc3339_and_stay_numbers_in_json() {
    let dir = tempdir();
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let uri = server.obj_uri();
    let id = sluice()
        .args(["obj", "--server", &uri, "create"])
        .run()
        .stdout();
    let id = id.trim();
    let stat = sluice()
        .args(["obj", "--server", &uri, "stat", id])
        .run()
        .stdout();
    let created = stat
        .lines()
        .find_map(|l| l.strip_prefix("created: "))
        .unwrap_or_else(|| panic!("no created line: {stat}"));
    // 2026-11-29T04:34:36.154000133Z
    let shape: String = created
        .chars()
        .map(|c| if c.is_ascii_digit() { '0' } else { c })
        .collect();
    assert_eq!(shape, "0000-00-00T00:00:00.000000000Z", "{stat}");
    let ls = sluice()
        .args(["obj", "--server", &uri, "ls", "--attrs"])
        .run()
        .stdout();
    assert!(ls.contains(&format!("sluice.created={created}")), "{ls}");
    let json = sluice()
        .args(["obj", "--server", &uri, "stat", id, "--json"])
        .run()
        .json();
    assert!(json["created"].is_u64(), "{json}");
}

#[test]
fn usage_errors_are_one_short_line_with_status_2() {
    for (args, says) in [
        (&["obj", "--bogus"][..], "unexpected argument '--bogus'"),
        (
            &["serve", "--listne", "127.0.0.1:0"][..],
            "a similar argument exists: '--listen'",
        ),
        (
            &[
                "raid",
                "create",
                "--level",
                "0",
                "--unit",
                "64K",
                "ndb://a/x",
                "ndb://b/x",
            ][..],
            "\"ndb://a/x\" is not an nbd://",
        ),
        (
            &["bench", "--uri", "ndb://a/x"][..],
            "unknown scheme \"ndb\"",
        ),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--export",
                "d=ndb://a/x",
            ][..],
            "unknown backend \"ndb\"",
        ),
    ] {
        let out = sluice().args(args).output();
        out.assert_code(2);
        let stderr = out.stderr();
        assert_eq!(stderr.lines().count(), 1, "{}", out.describe());
        assert!(stderr.starts_with("sluice: error: "), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(stderr.contains("--help'"), "{stderr}");
        assert!(stderr.len() < 300, "{} characters: {stderr}", stderr.len());
    }
}

#[test]
fn admin_socket_mistakes_say_what_to_do() {
    let dir = tempdir();
    let socket = dir.path().join("none.sock");
    let out = sluice()
        .args(["raid", "status", "--admin"])
        .arg(&socket)
        .output();
    out.assert_code(1);
    let line = error_line(&out);
    assert!(
        line.contains(&format!(
            "is a server running with '--admin unix:{}'",
            socket.display()
        )),
        "{line}"
    );
    let missing = dir.path().join("no-such-dir").join("admin.sock");
    let out = sluice()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--export",
            "d=mem:1M",
            "--admin",
        ])
        .arg(format!("unix:{}", missing.display()))
        .output();
    out.assert_code(1);
    let line = error_line(&out);
    assert!(line.contains("no-such-dir does not exist"), "{line}");
}

#[test]
fn the_same_listen_address_twice_is_named() {
    let dir = tempdir();
    let objects = dir.path().join("objects");
    let objects = objects.to_str().unwrap();
    for args in [
        &["--listen", "127.0.0.1:1", "--listen", "127.0.0.1:1"][..],
        &[
            "--listen",
            "127.0.0.1:1",
            "--object-listen",
            "127.0.0.1:1",
            "--objects",
            objects,
        ][..],
    ] {
        let out = sluice()
            .arg("serve")
            .args(args)
            .args(["--export", "d=mem:1M"])
            .output();
        out.assert_code(2);
        let line = error_line(&out);
        assert!(
            line.contains("listen address 127.0.0.1:1 is given twice"),
            "{line}"
        );
    }
}

#[test]
fn a_misspelt_config_key_is_reported_on_its_line() {
    let dir = tempdir();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "listen = [\"127.0.0.1:0\"]\n  io_thread = 4\n").unwrap();
    let out = sluice().args(["serve", "--config"]).arg(&config).output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(line.contains("line 2, column 3"), "{line}");
    assert!(line.contains("unknown field `io_thread`"), "{line}");
    std::fs::write(
        &config,
        "listen = [\"127.0.0.1:0\"]\n\n[[export]]\nname = \"d\"\nspec = \"mem:1M\"\nro = true\n",
    )
    .unwrap();
    let out = sluice().args(["serve", "--config"]).arg(&config).output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(line.contains("line 6, column 1"), "{line}");
}

#[test]
fn serve_stdin_serves_libnbd_connect_command() {
    let dir = tempdir();
    let image = dir.path().join("d.img");
    crate::nbdsh::run_script(
        "connect_command.py",
        &[
            env!("CARGO_BIN_EXE_sluice").to_owned(),
            image.display().to_string(),
        ],
    );
    // What the connection wrote is in the file once the server is gone.
    let bytes = std::fs::read(&image).unwrap();
    let want: Vec<u8> = (0..16).flat_map(|_| 0..=255u8).collect();
    assert_eq!(&bytes[8192..8192 + want.len()], &want[..]);
}

#[test]
fn a_cache_size_without_a_cache_is_a_usage_error() {
    let out = sluice()
        .args(["serve", "--listen", "127.0.0.1:0", "--export", "d=mem:1M"])
        .args(["--cache", "none", "--cache-size", "1G"])
        .output();
    out.assert_code(2);
    assert!(
        error_line(&out).contains("--cache-size"),
        "{}",
        out.describe()
    );
}

#[test]
fn large_transfers_show_progress_on_a_terminal_only() {
    let dir = tempdir();
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let uri = server.obj_uri();
    let id = sluice()
        .args(["obj", "--server", &uri, "create"])
        .run()
        .stdout();
    let id = id.trim();
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(80 << 20))
        .unwrap();
    let put = format!(
        "{} obj --server {uri} put {id} {}",
        env!("CARGO_BIN_EXE_sluice"),
        big.display()
    );
    // `script` runs the command on a terminal; what it drew is its output.
    let drawn = crate::harness::tool("script")
        .args(["-qec", &put, "/dev/null"])
        .run()
        .stdout();
    assert!(
        drawn.contains(&format!("object {id}")) && drawn.contains("MiB"),
        "{drawn:?}"
    );
    let quiet = sluice().args(["obj", "--server", &uri, "get", id]).run();
    assert_eq!(quiet.stderr(), "", "no progress when stderr is no terminal");
    assert_eq!(quiet.output.stdout.len(), 80 << 20);
}

#[test]
fn a_ram_disk_larger_than_the_machine_is_refused_unless_overcommitted() {
    let out = sluice()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--export",
            "d=mem:1000T",
        ])
        .output();
    out.assert_code(1);
    let line = error_line(&out);
    assert!(
        line.contains("is larger than this machine's memory") && line.contains(",overcommit"),
        "{line}"
    );
    let server = ServerBuilder::new()
        .export("d", "mem:1000T,overcommit")
        .start();
    server.wait_for_log("larger than this machine's memory");
}

#[test]
fn an_array_with_too_few_members_is_a_usage_error_naming_the_spec() {
    for (spec, says) in [
        (
            "raid0:unit=64K,members=nbd://a/x",
            "raid0 needs at least 2 members, got 1",
        ),
        (
            "raid1:unit=64K,members=nbd://a/x",
            "raid1 needs at least 2 members, got 1",
        ),
        (
            "raid5:unit=64K,members=nbd://a/x",
            "raid5 needs at least 2 members, got 1",
        ),
        (
            "raid6:unit=64K,members=nbd://a/x,nbd://b/x,nbd://c/x",
            "raid6 needs at least 4 members, got 3",
        ),
    ] {
        let export = format!("d={spec}");
        for args in [
            &["raid", "create", spec][..],
            &["serve", "--listen", "127.0.0.1:0", "--export", &export][..],
        ] {
            let out = sluice().args(args).output();
            out.assert_code(2);
            assert_eq!(out.stderr().lines().count(), 1, "{}", out.describe());
            let line = error_line(&out);
            assert!(line.contains(says), "{line}");
            assert!(line.contains(&format!("{spec:?}")), "{line}");
        }
    }
    let out = sluice()
        .args([
            "raid",
            "create",
            "--level",
            "0",
            "--unit",
            "64K",
            "nbd://a/x",
        ])
        .output();
    out.assert_code(2);
    assert!(
        error_line(&out).contains("raid0 needs at least 2 members, got 1"),
        "{}",
        out.describe()
    );
}

#[test]
fn global_flags_work_after_the_subcommand() {
    let dir = tempdir();
    // The level after `serve`: warnings pass, the info lines do not.
    let mut server = ServerBuilder::new()
        .export("d", "mem:1000T,overcommit")
        .arg("--log-level")
        .arg("warn")
        .arg("--log-format")
        .arg("json")
        .start();
    server.wait_for_log("larger than this machine's memory");
    server.signal(rustix::process::Signal::TERM);
    assert!(server
        .wait_exit(std::time::Duration::from_secs(10))
        .is_some());
    let log = server.stderr_log();
    assert!(log.contains("\"level\":\"WARN\""), "{log}");
    assert!(!log.contains("\"level\":\"INFO\""), "{log}");
    // After `obj put`, where the object server is named too.
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let uri = server.obj_uri();
    let id = sluice()
        .args(["obj", "create", "--server", &uri, "--log-level", "debug"])
        .run()
        .stdout();
    sluice()
        .args([
            "obj",
            "put",
            id.trim(),
            "--log-format",
            "json",
            "--server",
            &uri,
        ])
        .args(["--log-level", "info,sluice_client=debug"])
        .input(b"data".to_vec())
        .run();
    // A misspelt level is a usage error naming the flag, not a filter
    // that logs nothing.
    let out = sluice()
        .args(["obj", "ls", "--server", &uri, "--log-level", "degub"])
        .output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(
        line.contains("--log-level") && line.contains("\"degub\" is not a level"),
        "{line}"
    );
}

#[test]
fn the_stripe_count_is_not_the_object_server() {
    let dir = tempdir();
    let meta = format!("sqlite:{}", dir.path().display());
    // A URI where the count goes names the flag for a URI.
    let out = sluice()
        .args(["obj", "--meta", &meta, "put", "x", "--stripe-count"])
        .arg("sluice://127.0.0.1:10810")
        .output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(
        line.contains("--stripe-count <N>") && line.contains("--server URI"),
        "{line}"
    );
    // The old spelling is the same flag.
    let out = sluice()
        .args(["obj", "--meta", &meta, "put", "x", "--servers", "0"])
        .output();
    out.assert_code(2);
    assert!(
        error_line(&out).contains("--stripe-count <N>"),
        "{}",
        out.describe()
    );
    // --server with --meta is refused, not ignored.
    let out = sluice()
        .args([
            "obj",
            "--meta",
            &meta,
            "--server",
            "sluice://127.0.0.1:1",
            "ls",
        ])
        .output();
    out.assert_code(2);
    let line = error_line(&out);
    assert!(
        line.contains("with --meta the metadata service lists the servers"),
        "{line}"
    );
    // And help names the one flag.
    let help = sluice().args(["obj", "put", "--help"]).run().stdout();
    assert!(help.contains("--stripe-count <N>"), "{help}");
    assert!(!help.contains("--servers"), "{help}");
}

/// `sluice ARGS` on a terminal (`script` runs it on one): what it drew.
fn on_a_terminal(args: &[&str]) -> String {
    let mut command = env!("CARGO_BIN_EXE_sluice").to_owned();
    for a in args {
        command.push(' ');
        command.push_str(a);
    }
    crate::harness::tool("script")
        .args(["-qec", &command, "/dev/null"])
        .run()
        .stdout()
}

#[test]
fn striped_transfers_show_progress_on_a_terminal_only() {
    let dir = tempdir();
    let server = ServerBuilder::new()
        .export("d", "mem:1M")
        .objects(&dir.path().join("objects"))
        .start();
    let meta = format!("sqlite:{}", dir.path().join("meta").display());
    sluice()
        .args(["meta", "--meta", &meta, "add-server", &server.obj_uri()])
        .run();
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(80 << 20))
        .unwrap();
    let big = big.display().to_string();
    let drawn = on_a_terminal(&["obj", "--meta", &meta, "put", "s/big", &big]);
    assert!(
        drawn.contains("s/big") && drawn.contains("MiB"),
        "{drawn:?}"
    );
    let quiet = sluice()
        .args(["obj", "--meta", &meta, "get", "s/big"])
        .run();
    assert_eq!(quiet.stderr(), "", "no progress when stderr is no terminal");
    assert_eq!(quiet.output.stdout.len(), 80 << 20);
    let get = format!(
        "{} obj --meta {meta} get s/big > /dev/null",
        env!("CARGO_BIN_EXE_sluice")
    );
    let drawn = crate::harness::tool("script")
        .args(["-qec", &get, "/dev/null"])
        .run()
        .stdout();
    assert!(
        drawn.contains("s/big") && drawn.contains("MiB"),
        "{drawn:?}"
    );
}

#[test]
fn rebuild_and_scrub_show_progress_on_a_terminal_only() {
    use crate::raid::{create, member, raid5_spec};
    let dir = tempdir();
    let members: Vec<crate::harness::Server> = (0..3).map(|i| member(dir.path(), i)).collect();
    let spec = raid5_spec(&members.iter().collect::<Vec<_>>());
    create(&spec);
    let admin = dir.path().join("admin.sock");
    // Slow enough (64M per member at 32M/s) for a poll to see it run.
    let _head = ServerBuilder::new()
        .export("vol", &spec)
        .arg(format!("--admin=unix:{}", admin.display()))
        .arg("--rebuild-rate")
        .arg("32M")
        .start();
    let admin = admin.display().to_string();
    let fresh = member(dir.path(), 3);
    let fresh_uri = fresh.uri("m");
    let drawn = on_a_terminal(&[
        "raid", "replace", "--admin", &admin, "--wait", "vol", "1", &fresh_uri,
    ]);
    assert!(drawn.contains("rebuilding member 1 of vol"), "{drawn:?}");
    assert!(drawn.contains("rebuilt; array clean"), "{drawn:?}");
    let drawn = on_a_terminal(&["raid", "scrub", "--admin", &admin, "vol"]);
    assert!(drawn.contains("scrubbing vol"), "{drawn:?}");
    assert!(drawn.contains("scrub of vol:"), "{drawn:?}");
    let quiet = sluice()
        .args(["raid", "scrub", "--admin", &admin, "vol"])
        .run();
    assert_eq!(quiet.stderr(), "", "no progress when stderr is no terminal");
    let again = member(dir.path(), 4);
    let quiet = sluice()
        .args(["raid", "replace", "--admin", &admin, "--wait", "vol", "2"])
        .arg(again.uri("m"))
        .run();
    assert_eq!(quiet.stderr(), "", "no progress when stderr is no terminal");
}

#[test]
fn an_admin_socket_in_sluices_own_directory_needs_no_mkdir() {
    // What the README's RAID block does in a fresh directory.
    let dir = tempdir();
    let (mut child, _) = serve_in(
        dir.path(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--export",
            "vol=mem:16M",
            "--admin",
            "unix:./sluice-data/admin.sock",
        ],
    );
    let status = sluice()
        .current_dir(dir.path())
        .args(["raid", "status", "--json"])
        .output();
    let _ = child.kill();
    let _ = child.wait();
    status.assert_success();
}
