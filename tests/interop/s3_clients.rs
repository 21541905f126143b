//! The S3 endpoint with the S3 tools people use: rclone (a tree in and
//! out, `rclone check`, a server-side copy in parts), s3cmd (put, get,
//! ls, del) and s3fs (a bucket mounted with FUSE, a small file
//! workload, checked through aws-cli). Each test starts its own
//! `sluice serve --s3` on a port chosen at run time (`s3::start`); every
//! tool's configuration lives in the test's temporary directory.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{random_bytes, Cmd, CmdOutput};
use crate::s3::{aws, start, S3Server, ACCESS, SECRET};

/// Runs `cmd`, failing the test with its output and the server's log
/// unless it exits 0.
fn ok(s3: &S3Server, cmd: Cmd) -> CmdOutput {
    let out = cmd.timeout(Duration::from_secs(300)).output();
    assert_eq!(
        out.code(),
        Some(0),
        "{}\n--- server log ---\n{}",
        out.describe(),
        s3.server.stderr_log()
    );
    out
}

/// A tree of mixed sizes under `root`: empty, small, nested, a few MiB,
/// and one over the multipart threshold the tools are given (5 MiB).
fn make_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let files = [
        ("empty", 0),
        ("one", 1),
        ("small.txt", 4096),
        ("dir/sub/nested.bin", 70_000),
        ("dir/three-mib.bin", 3 << 20),
        ("big/twelve-mib.bin", (12 << 20) + 3),
    ];
    files
        .iter()
        .enumerate()
        .map(|(i, (name, size))| {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            let data = random_bytes(100 + i as u64, *size);
            std::fs::write(&path, &data).expect("write a tree file");
            (PathBuf::from(name), data)
        })
        .collect()
}

fn assert_same_tree(want: &[(PathBuf, Vec<u8>)], root: &Path) {
    for (name, data) in want {
        let got = std::fs::read(root.join(name))
            .unwrap_or_else(|e| panic!("{} is missing: {e}", root.join(name).display()));
        assert!(
            got == *data,
            "{} differs ({} bytes, want {})",
            name.display(),
            got.len(),
            data.len()
        );
    }
}

// ---------------------------------------------------------------------------
// rclone
// ---------------------------------------------------------------------------

/// rclone with a remote `sluice:` defined by environment variables, its
/// config and cache in the test's directory.
fn rclone(s3: &S3Server, rclone: &Path) -> Cmd {
    let home = s3.dir.path().join("rclone-home");
    std::fs::create_dir_all(&home).expect("rclone home");
    let config = home.join("rclone.conf");
    std::fs::write(&config, "").expect("an empty rclone config");
    Cmd::new(rclone)
        .env("HOME", &home)
        .env("RCLONE_CONFIG", &config)
        .env("RCLONE_CACHE_DIR", home.join("cache"))
        // A CA bundle from the environment makes rclone's S3 client fail
        // to start on a plain-HTTP endpoint ("unsupported transport").
        .env("AWS_CA_BUNDLE", "")
        .env("RCLONE_CONFIG_SLUICE_TYPE", "s3")
        .env("RCLONE_CONFIG_SLUICE_PROVIDER", "Other")
        .env("RCLONE_CONFIG_SLUICE_ENV_AUTH", "false")
        .env("RCLONE_CONFIG_SLUICE_ACCESS_KEY_ID", ACCESS)
        .env("RCLONE_CONFIG_SLUICE_SECRET_ACCESS_KEY", SECRET)
        .env("RCLONE_CONFIG_SLUICE_ENDPOINT", s3.endpoint())
        .env("RCLONE_CONFIG_SLUICE_REGION", "us-east-1")
        .env("RCLONE_CONFIG_SLUICE_FORCE_PATH_STYLE", "true")
        // Multipart above 5 MiB, in 5 MiB parts; server-side copies above
        // 5 MiB in parts too (UploadPartCopy).
        .env("RCLONE_S3_UPLOAD_CUTOFF", "5M")
        .env("RCLONE_S3_CHUNK_SIZE", "5M")
        .env("RCLONE_S3_COPY_CUTOFF", "5M")
        .args(["--retries", "1", "--low-level-retries", "1"])
}

/// rclone copies a tree of mixed sizes in and out; `rclone check` finds
/// no difference either way, and does find one made on purpose. A
/// server-side copy of the large file goes in parts (UploadPartCopy).
#[test]
fn rclone_copies_a_tree_in_and_out_and_check_agrees() {
    let Some(bin) = sluice_testkit::programs::program_or_skip("rclone") else {
        return;
    };
    let s3 = start();
    let src = s3.dir.path().join("tree");
    let tree = make_tree(&src);
    let src_s = src.display().to_string();
    ok(&s3, rclone(&s3, &bin).args(["mkdir", "sluice:tree"]));
    ok(&s3, rclone(&s3, &bin).args(["copy", &src_s, "sluice:tree"]));
    ok(
        &s3,
        rclone(&s3, &bin).args(["check", &src_s, "sluice:tree"]),
    );
    let listed = ok(&s3, rclone(&s3, &bin).args(["lsf", "-R", "sluice:tree"])).stdout();
    for (name, _) in &tree {
        let name = name.display().to_string();
        assert!(
            listed.lines().any(|l| l == name),
            "rclone lsf lacks {name}:\n{listed}"
        );
    }
    // The big file went up in parts: its ETag is a multipart one.
    let head = aws(
        &s3,
        &[
            "s3api",
            "head-object",
            "--bucket",
            "tree",
            "--key",
            "big/twelve-mib.bin",
        ],
    );
    assert!(head.stdout().contains("-3\\\""), "{}", head.describe());
    let down = s3.dir.path().join("down");
    let down_s = down.display().to_string();
    ok(
        &s3,
        rclone(&s3, &bin).args(["copy", "sluice:tree", &down_s]),
    );
    assert_same_tree(&tree, &down);
    ok(
        &s3,
        rclone(&s3, &bin).args(["check", "sluice:tree", &down_s]),
    );
    // A server-side copy in parts, then its bytes checked.
    ok(
        &s3,
        rclone(&s3, &bin).args([
            "copyto",
            "sluice:tree/big/twelve-mib.bin",
            "sluice:tree/copied.bin",
        ]),
    );
    let copied = s3.dir.path().join("copied.bin");
    ok(
        &s3,
        rclone(&s3, &bin).args([
            "copyto",
            "sluice:tree/copied.bin",
            &copied.display().to_string(),
        ]),
    );
    assert!(
        std::fs::read(&copied).expect("read the copy") == tree[5].1,
        "the server-side copy differs"
    );
    s3.server.wait_for_log("op=\"UploadPartCopy\"");
    // check must be able to fail: one byte changed.
    let changed = src.join("dir/sub/nested.bin");
    let mut data = tree[3].1.clone();
    data[100] ^= 1;
    std::fs::write(&changed, &data).expect("change a file");
    let out = rclone(&s3, &bin)
        .args(["check", &src_s, "sluice:tree", "--exclude", "copied.bin"])
        .output();
    assert!(
        out.code() != Some(0) && out.stderr().contains("nested.bin"),
        "rclone check missed a changed file: {}",
        out.describe()
    );
}

// ---------------------------------------------------------------------------
// s3cmd
// ---------------------------------------------------------------------------

/// s3cmd with a config file in the test's directory (path-style: the
/// bucket host is the endpoint itself).
fn s3cmd(s3: &S3Server, bin: &Path) -> Cmd {
    let home = s3.dir.path().join("s3cmd-home");
    std::fs::create_dir_all(&home).expect("s3cmd home");
    let config = home.join("s3cfg");
    let host = s3.endpoint().trim_start_matches("http://").to_owned();
    std::fs::write(
        &config,
        format!(
            "[default]\naccess_key = {ACCESS}\nsecret_key = {SECRET}\nhost_base = {host}\n\
             host_bucket = {host}\nuse_https = False\nsignature_v2 = False\n\
             bucket_location = us-east-1\ncheck_ssl_certificate = False\n"
        ),
    )
    .expect("write the s3cmd config");
    Cmd::new(bin)
        .env("HOME", &home)
        .arg("--config")
        .arg(&config)
}

/// s3cmd: mb, put (one part and multipart), ls, get, del, rb.
#[test]
fn s3cmd_put_get_ls_del() {
    let Some(bin) = sluice_testkit::programs::program_or_skip("s3cmd") else {
        return;
    };
    let s3 = start();
    let dir = s3.dir.path();
    let small = dir.join("small.bin");
    let small_data = random_bytes(21, 100_000);
    std::fs::write(&small, &small_data).expect("write");
    let big = dir.join("big.bin");
    let big_data = random_bytes(22, (11 << 20) + 1);
    std::fs::write(&big, &big_data).expect("write");
    ok(&s3, s3cmd(&s3, &bin).args(["mb", "s3://cmd"]));
    ok(
        &s3,
        s3cmd(&s3, &bin)
            .arg("put")
            .arg(&small)
            .arg("s3://cmd/dir/small.bin"),
    );
    ok(
        &s3,
        s3cmd(&s3, &bin)
            .args(["put", "--multipart-chunk-size-mb=5"])
            .arg(&big)
            .arg("s3://cmd/big.bin"),
    );
    let top = ok(&s3, s3cmd(&s3, &bin).args(["ls", "s3://cmd/"])).stdout();
    assert!(
        top.contains("DIR") && top.contains("s3://cmd/dir/") && top.contains("s3://cmd/big.bin"),
        "{top}"
    );
    let under = ok(&s3, s3cmd(&s3, &bin).args(["ls", "s3://cmd/dir/"])).stdout();
    assert!(
        under.contains("s3://cmd/dir/small.bin") && !under.contains("big.bin"),
        "{under}"
    );
    let buckets = ok(&s3, s3cmd(&s3, &bin).arg("ls")).stdout();
    assert!(buckets.contains("s3://cmd"), "{buckets}");
    for (key, data) in [("dir/small.bin", &small_data), ("big.bin", &big_data)] {
        let got = dir.join("got");
        ok(
            &s3,
            s3cmd(&s3, &bin)
                .args(["get", "--force", &format!("s3://cmd/{key}")])
                .arg(&got),
        );
        assert!(
            std::fs::read(&got).expect("read") == *data,
            "s3cmd get of {key} differs"
        );
    }
    ok(
        &s3,
        s3cmd(&s3, &bin).args(["del", "s3://cmd/dir/small.bin"]),
    );
    let after = ok(
        &s3,
        s3cmd(&s3, &bin).args(["ls", "--recursive", "s3://cmd/"]),
    )
    .stdout();
    assert!(
        !after.contains("small.bin") && after.contains("big.bin"),
        "{after}"
    );
    // A bucket with a key left cannot go; once empty it can.
    let out = s3cmd(&s3, &bin).args(["rb", "s3://cmd"]).output();
    assert!(
        out.code() != Some(0) && out.stderr().contains("BucketNotEmpty"),
        "{}",
        out.describe()
    );
    ok(&s3, s3cmd(&s3, &bin).args(["del", "s3://cmd/big.bin"]));
    ok(&s3, s3cmd(&s3, &bin).args(["rb", "s3://cmd"]));
    let buckets = ok(&s3, s3cmd(&s3, &bin).arg("ls")).stdout();
    assert!(!buckets.contains("s3://cmd"), "{buckets}");
}

// ---------------------------------------------------------------------------
// s3fs
// ---------------------------------------------------------------------------

/// Whether `dir` is a mount point now (as /proc/self/mountinfo says).
fn mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let dir = dir.display().to_string();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|m| m == dir))
}

/// An s3fs mount: unmounted (fusermount -u, else umount -l) and its
/// process stopped when dropped, the test passing or not.
struct S3fsMount {
    dir: PathBuf,
    child: Child,
}

impl S3fsMount {
    /// Mounts `bucket` at `dir`, and waits for the mount to appear (or
    /// s3fs to exit, which fails the test); 60 s only bound a hang.
    fn mount(s3: &S3Server, bin: &Path, bucket: &str, dir: &Path) -> Self {
        let passwd = s3.dir.path().join("s3fs-passwd");
        std::fs::write(&passwd, format!("{ACCESS}:{SECRET}\n")).expect("write");
        std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::create_dir_all(dir).expect("mount point");
        let cache = s3.dir.path().join("s3fs-cache");
        let log = s3.dir.path().join("s3fs.log");
        let child = Command::new(bin)
            .arg(bucket)
            .arg(dir)
            .arg("-f")
            .args(["-o", &format!("url={}", s3.endpoint())])
            .args(["-o", "use_path_request_style,sigv4,endpoint=us-east-1"])
            .args(["-o", &format!("passwd_file={}", passwd.display())])
            .args(["-o", &format!("use_cache={}", cache.display())])
            .args(["-o", "stat_cache_expire=1,retries=1,dbglevel=info"])
            .env("HOME", s3.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(std::fs::File::create(&log).expect("log")))
            .stderr(Stdio::from(
                std::fs::File::create(log.with_extension("err")).expect("log"),
            ))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut mount = Self {
            dir: dir.to_owned(),
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !mounted(dir) {
            if let Ok(Some(status)) = mount.child.try_wait() {
                panic!(
                    "s3fs exited with {status} before mounting: {}{}\n--- server log ---\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default(),
                    std::fs::read_to_string(log.with_extension("err")).unwrap_or_default(),
                    s3.server.stderr_log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "s3fs never mounted {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        mount
    }
}

impl Drop for S3fsMount {
    fn drop(&mut self) {
        let fusermount = sluice_testkit::programs::find("fusermount");
        let unmounted = fusermount.is_some_and(|f| {
            Command::new(f)
                .arg("-u")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success())
        });
        if !unmounted && mounted(&self.dir) {
            if let Some(umount) = sluice_testkit::programs::find("umount") {
                let _ = Command::new(umount).arg("-l").arg(&self.dir).status();
            }
        }
        // s3fs exits once unmounted; one that does not is stopped.
        let deadline = Instant::now() + Duration::from_secs(20);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// s3fs mounts a bucket; files created, written, read back, listed,
/// renamed and deleted through the mount are what aws-cli sees.
#[test]
fn s3fs_mount_file_workload() {
    let Some(bin) = sluice_testkit::programs::program_or_skip("s3fs") else {
        return;
    };
    if sluice_testkit::programs::program_or_skip("/usr/bin/aws").is_none() {
        return;
    }
    let s3 = start();
    let out = aws(&s3, &["s3", "mb", "s3://mounted"]);
    out.assert_success();
    let seeded = random_bytes(30, 5000);
    let seed_file = s3.dir.path().join("seed");
    std::fs::write(&seed_file, &seeded).expect("write");
    aws(
        &s3,
        &[
            "s3",
            "cp",
            &seed_file.display().to_string(),
            "s3://mounted/from-s3.bin",
        ],
    )
    .assert_success();
    let mnt = s3.dir.path().join("mnt");
    let mount = S3fsMount::mount(&s3, &bin, "mounted", &mnt);
    // An object put through S3 is a file.
    assert!(std::fs::read(mnt.join("from-s3.bin")).expect("read through s3fs") == seeded);
    // Create, write, read back.
    let a = b"hello through s3fs\n".to_vec();
    let b = random_bytes(31, (2 << 20) + 17);
    let c = random_bytes(32, 1000);
    std::fs::write(mnt.join("a.txt"), &a).expect("write a.txt");
    std::fs::write(mnt.join("b.bin"), &b).expect("write b.bin");
    std::fs::create_dir(mnt.join("sub")).expect("mkdir sub");
    std::fs::write(mnt.join("sub/c.bin"), &c).expect("write sub/c.bin");
    assert!(std::fs::read(mnt.join("a.txt")).expect("read") == a);
    assert!(std::fs::read(mnt.join("b.bin")).expect("read") == b);
    assert!(std::fs::read(mnt.join("sub/c.bin")).expect("read") == c);
    let mut names: Vec<String> = std::fs::read_dir(&mnt)
        .expect("list the mount")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "b.bin", "from-s3.bin", "sub"]);
    // Rename and delete.
    std::fs::rename(mnt.join("a.txt"), mnt.join("renamed.txt")).expect("rename");
    std::fs::remove_file(mnt.join("b.bin")).expect("remove b.bin");
    assert!(std::fs::read(mnt.join("renamed.txt")).expect("read renamed") == a);
    assert!(!mnt.join("a.txt").exists() && !mnt.join("b.bin").exists());
    // What S3 sees.
    let listed = aws(&s3, &["s3", "ls", "--recursive", "s3://mounted/"]);
    listed.assert_success();
    let text = listed.stdout();
    let keys: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(3))
        .collect();
    for want in ["renamed.txt", "sub/c.bin", "from-s3.bin"] {
        assert!(keys.contains(&want), "S3 lacks {want}: {keys:?}");
    }
    for gone in ["a.txt", "b.bin"] {
        assert!(!keys.contains(&gone), "S3 still has {gone}: {keys:?}");
    }
    let got = s3.dir.path().join("got");
    aws(
        &s3,
        &[
            "s3",
            "cp",
            "s3://mounted/sub/c.bin",
            &got.display().to_string(),
        ],
    )
    .assert_success();
    assert!(
        std::fs::read(&got).expect("read") == c,
        "sub/c.bin through S3 differs"
    );
    drop(mount);
    assert!(!mounted(&mnt), "{} is still mounted", mnt.display());
}
