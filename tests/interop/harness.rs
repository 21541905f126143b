//! Shared plumbing for the interop tests: start a `sluice serve` on an
//! OS-chosen port, run external NBD clients with a time limit, make test data.

use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::matrix::Cell;

pub(crate) const KIB: u64 = 1024;
pub(crate) const MIB: u64 = 1024 * 1024;

/// How long a server may take to print its `listening on` lines.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Default limit for one external client command.
const DEFAULT_CMD_TIMEOUT: Duration = Duration::from_secs(180);

/// The interpreter for the libnbd Python scripts. Debian's python3-libnbd is
/// built for the system interpreter only (a pyenv `python3` earlier on PATH
/// cannot import it), so never resolve this through PATH.
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

/// Absolute path of an outside program, which must be on the list of
/// those tests may run (scripts/programs), or a test failure that says
/// what is missing.
pub(crate) fn require_tool(name: &str) -> PathBuf {
    sluice_testkit::programs::program(name)
}

/// `/usr/bin/python3` with a working `import nbd`, or a test failure.
pub(crate) fn require_python_libnbd() -> PathBuf {
    static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let res = CHECKED.get_or_init(|| {
        let python = require_tool(SYSTEM_PYTHON);
        let out = Command::new(&python)
            .args(["-c", "import nbd; nbd.NBD()"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {SYSTEM_PYTHON}: {e}"))?;
        if out.status.success() {
            Ok(python)
        } else {
            Err(format!(
                "`{SYSTEM_PYTHON} -c 'import nbd'` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    });
    match res {
        Ok(python) => python.clone(),
        Err(e) => panic!(
            "the libnbd Python bindings (python3-libnbd) are not usable: {e}; scripts/test \
             installs them"
        ),
    }
}

/// Directory holding the nbdsh/libnbd Python scripts.
pub(crate) fn nbdsh_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("nbdsh")
}

// ---------------------------------------------------------------------------
// Running external commands
// ---------------------------------------------------------------------------

/// An external command with a time limit; stdin is /dev/null unless
/// [`Cmd::input`] gives it bytes.
pub(crate) struct Cmd {
    cmd: Command,
    display: String,
    timeout: Duration,
    input: Option<Vec<u8>>,
}

/// The `sluice` binary under test, as a command (`sluice ARGS...`).
pub(crate) fn sluice() -> Cmd {
    Cmd {
        cmd: Command::new(env!("CARGO_BIN_EXE_sluice")),
        display: "sluice".to_string(),
        timeout: DEFAULT_CMD_TIMEOUT,
        input: None,
    }
}

/// A command for an external tool that must be installed (see [`require_tool`]).
pub(crate) fn tool(name: &str) -> Cmd {
    let path = require_tool(name);
    Cmd {
        cmd: Command::new(path),
        display: name.to_string(),
        timeout: DEFAULT_CMD_TIMEOUT,
        input: None,
    }
}

/// `/usr/bin/python3 tests/nbdsh/SCRIPT args...`.
pub(crate) fn nbdsh_script(script: &str) -> Cmd {
    let python = require_python_libnbd();
    let path = nbdsh_dir().join(script);
    assert!(path.is_file(), "missing test script {}", path.display());
    let mut c = Cmd {
        cmd: Command::new(&python),
        display: format!("{} {}", python.display(), path.display()),
        timeout: DEFAULT_CMD_TIMEOUT,
        input: None,
    };
    c.cmd.arg("-u").arg("-B").arg(&path);
    c
}

impl Cmd {
    /// Any program, by path.
    pub(crate) fn new(program: impl AsRef<Path>) -> Self {
        let program = program.as_ref();
        Self {
            cmd: Command::new(program),
            display: program.display().to_string(),
            timeout: DEFAULT_CMD_TIMEOUT,
            input: None,
        }
    }

    /// Sets an environment variable of the command.
    pub(crate) fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub(crate) fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.display.push(' ');
        self.display.push_str(&a.as_ref().to_string_lossy());
        self.cmd.arg(a);
        self
    }

    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self = self.arg(a);
        }
        self
    }

    /// Runs the command in `dir`.
    pub(crate) fn current_dir(mut self, dir: &Path) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    pub(crate) fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Feeds `bytes` to the command's stdin (then closes it).
    pub(crate) fn input(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.input = Some(bytes.into());
        self
    }

    /// Runs to completion (or the time limit, which fails the test) and
    /// returns whatever it produced, whatever its exit status.
    pub(crate) fn output(mut self) -> CmdOutput {
        let stdin = if self.input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        };
        self.cmd
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, so that the time limit can stop what it
        // started too (fio's job processes keep the output pipes open).
        std::os::unix::process::CommandExt::process_group(&mut self.cmd, 0);
        let start = Instant::now();
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", self.display));
        if let (Some(input), Some(mut pipe)) = (self.input.take(), child.stdin.take()) {
            // A command that stops reading early closes the pipe: that is
            // its business, not a test failure.
            thread::spawn(move || {
                let _ = pipe.write_all(&input);
            });
        }
        let out_reader = pipe_reader(child.stdout.take());
        let err_reader = pipe_reader(child.stderr.take());
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(e) => panic!("waiting for `{}`: {e}", self.display),
            }
            if start.elapsed() > self.timeout {
                match Pid::from_raw(child.id() as i32) {
                    Some(group) => {
                        let _ = kill_process_group(group, Signal::KILL);
                    }
                    None => {
                        let _ = child.kill();
                    }
                }
                let _ = child.wait();
                let stdout = out_reader.join().unwrap_or_default();
                let stderr = err_reader.join().unwrap_or_default();
                panic!(
                    "`{}` did not finish within {:?} (the server may be hung)\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    self.display,
                    self.timeout,
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
            thread::sleep(Duration::from_millis(10));
        };
        let stdout = out_reader.join().unwrap_or_default();
        let stderr = err_reader.join().unwrap_or_default();
        CmdOutput {
            display: self.display,
            output: Output {
                status,
                stdout,
                stderr,
            },
        }
    }

    /// Runs and asserts exit status 0; the failure message shows both streams.
    pub(crate) fn run(self) -> CmdOutput {
        let out = self.output();
        out.assert_success();
        out
    }

    /// Spawns without waiting; stdout is piped (for scripts that report
    /// progress), stderr is inherited so it lands in the test's output.
    pub(crate) fn spawn(mut self) -> Child {
        self.cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        self.cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{}`: {e}", self.display))
    }
}

fn pipe_reader<R: Read + Send + 'static>(pipe: Option<R>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

pub(crate) struct CmdOutput {
    pub(crate) display: String,
    pub(crate) output: Output,
}

impl CmdOutput {
    pub(crate) fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub(crate) fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub(crate) fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "`{}` exited with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.display,
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }

    pub(crate) fn assert_success(&self) {
        assert!(self.output.status.success(), "{}", self.describe());
    }

    pub(crate) fn assert_code(&self, code: i32) {
        assert_eq!(
            self.code(),
            Some(code),
            "expected exit code {code}; {}",
            self.describe()
        );
    }

    /// Parses stdout as JSON (skipping anything before the first `{` or `[`,
    /// which some tools print as warnings).
    pub(crate) fn json(&self) -> serde_json::Value {
        let s = self.stdout();
        let start = s.find(['{', '[']).unwrap_or(0);
        serde_json::from_str(&s[start..])
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}); {}", self.describe()))
    }
}

// ---------------------------------------------------------------------------
// The server under test
// ---------------------------------------------------------------------------

/// Builds the command line of `sluice serve`.
pub(crate) struct ServerBuilder {
    listens: Vec<String>,
    args: Vec<String>,
    metrics: bool,
    /// Wait for the S3 endpoint's line.
    s3: bool,
    /// Object listeners to wait for.
    object_listens: usize,
    /// Stderr is a pipe the test holds (see [`Server::close_stderr_pipe`]).
    stderr_pipe: bool,
}

impl ServerBuilder {
    /// A server listening on 127.0.0.1:0 unless [`Self::listen`] is used.
    pub(crate) fn new() -> Self {
        Self {
            listens: Vec::new(),
            args: Vec::new(),
            metrics: false,
            s3: false,
            object_listens: 0,
            stderr_pipe: false,
        }
    }

    /// `--objects DIR --object-listen 127.0.0.1:0`; the address is in
    /// [`Server::objects`].
    pub(crate) fn objects(mut self, dir: &Path) -> Self {
        self.args.push("--objects".into());
        self.args.push(dir.display().to_string());
        self.object_listen("127.0.0.1:0")
    }

    /// `--object-listen ADDR` (repeatable; `unix:PATH` too).
    pub(crate) fn object_listen(mut self, addr: impl AsRef<str>) -> Self {
        self.args.push("--object-listen".into());
        self.args.push(addr.as_ref().to_string());
        self.object_listens += 1;
        self
    }

    /// `--export NAME=SPEC`.
    pub(crate) fn export(mut self, name: &str, spec: impl AsRef<str>) -> Self {
        self.args.push("--export".into());
        self.args.push(format!("{name}={}", spec.as_ref()));
        self
    }

    /// `--export NAME=file:PATH[,OPTS]`.
    pub(crate) fn file_export(self, name: &str, path: &Path, opts: &str) -> Self {
        let mut spec = format!("file:{}", path.display());
        if !opts.is_empty() {
            spec.push(',');
            spec.push_str(opts);
        }
        self.export(name, spec)
    }

    /// `--listen ADDR` (replaces the default 127.0.0.1:0 listener).
    pub(crate) fn listen(mut self, addr: impl AsRef<str>) -> Self {
        self.listens.push(addr.as_ref().to_string());
        self
    }

    /// Any other `sluice serve` argument (e.g. `--tls require`).
    pub(crate) fn arg(mut self, a: impl AsRef<str>) -> Self {
        self.args.push(a.as_ref().to_string());
        self
    }

    /// `--tls require` with the test certificates, verified client
    /// certificates, and only CN=client1 allowed on export `secret`.
    pub(crate) fn args_tls(self, pki: &sluice_testkit::pki::Pki) -> Self {
        let server = pki.server().to_string_lossy().into_owned();
        self.arg("--tls")
            .arg("require")
            .arg("--tls-certificates")
            .arg(server)
            .arg("--tls-verify-peer")
            .arg("--tls-allow")
            .arg("secret=CN=client1")
    }

    /// `--metrics 127.0.0.1:0`; the address is in [`Server::metrics`].
    pub(crate) fn metrics(mut self) -> Self {
        self.args.push("--metrics".into());
        self.args.push("127.0.0.1:0".into());
        self.metrics = true;
        self
    }

    /// `--s3 127.0.0.1:0 --s3-key-file KEYS`; the address is in
    /// [`Server::s3`].
    pub(crate) fn s3(mut self, keys: &Path) -> Self {
        self.args.push("--s3".into());
        self.args.push("127.0.0.1:0".into());
        self.args.push("--s3-key-file".into());
        self.args.push(keys.display().to_string());
        self.s3 = true;
        self
    }

    /// The server's stderr is a pipe the test holds instead of a log file
    /// (its log is then not kept), so the test can close the log's
    /// reader ([`Server::close_stderr_pipe`]).
    pub(crate) fn stderr_pipe(mut self) -> Self {
        self.stderr_pipe = true;
        self
    }

    /// The cache and pipeline arguments of a matrix cell.
    pub(crate) fn cell(mut self, cell: Cell) -> Self {
        self.args.extend(cell.args().map(String::from));
        self
    }

    pub(crate) fn start(self) -> Server {
        let listens = if self.listens.is_empty() {
            vec!["127.0.0.1:0".to_string()]
        } else {
            self.listens
        };
        let logdir = tempfile::Builder::new()
            .prefix("sluice-log-")
            .tempdir()
            .expect("create server log dir");
        let stderr_path = logdir.path().join("stderr.log");
        let stderr_file = File::create(&stderr_path).expect("create server stderr log");

        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        // What a server writes next to itself (RAID journals by default go
        // to ./sluice-data/) lands outside the repository, in one folder
        // shared by every test server so that a restarted head finds its
        // journal again (journals are named by array id: no collisions).
        let cwd = std::env::temp_dir().join("sluice-interop-servers");
        std::fs::create_dir_all(&cwd).expect("create the test servers' working folder");
        cmd.current_dir(&cwd).arg("serve");
        for l in &listens {
            cmd.arg("--listen").arg(l);
        }
        cmd.args(&self.args);
        // Without exports `sluice serve` serves ./sluice-data/default.img,
        // which the folder above would make one image for every test
        // server; servers lock their images, so each gets its own.
        if !self.args.iter().any(|a| a == "--export" || a == "--config") {
            let image = logdir.path().join("default.img");
            cmd.arg("--export")
                .arg(format!("default=file:{},size=1G", image.display()));
        }
        let cmdline = format!("{:?}", cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(if self.stderr_pipe {
                Stdio::piped()
            } else {
                Stdio::from(stderr_file)
            });
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmdline}: {e}"));
        let stderr_pipe = child.stderr.take();

        let stdout = child.stdout.take().expect("server stdout is piped");
        let (tx, rx) = mpsc::channel::<String>();
        thread::spawn(move || {
            // Keep draining stdout for the server's whole life so it never
            // blocks or dies on a full / closed pipe.
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        let _ = tx.send(l);
                    }
                    Err(_) => break,
                }
            }
        });

        let mut server = Server {
            child: Some(child),
            cmdline,
            tcp: Vec::new(),
            unix: Vec::new(),
            objects: Vec::new(),
            object_unix: Vec::new(),
            metrics: None,
            s3: None,
            stderr_path,
            stderr_pipe,
            _logdir: logdir,
        };
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while server.tcp.len() + server.unix.len() < listens.len()
            || server.objects.len() + server.object_unix.len() < self.object_listens
            || (self.metrics && server.metrics.is_none())
            || (self.s3 && server.s3.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(line) => {
                    if let Some(rest) = line.trim().strip_prefix("metrics on http://") {
                        let addr = rest
                            .trim_end_matches("/metrics")
                            .parse()
                            .unwrap_or_else(|e| {
                                panic!("cannot parse the metrics address in {line:?}: {e}")
                            });
                        server.metrics = Some(addr);
                        continue;
                    }
                    if let Some(rest) = line.trim().strip_prefix("s3 listening on ") {
                        server.s3 = Some(rest.parse().unwrap_or_else(|e| {
                            panic!("cannot parse the S3 address in {line:?}: {e}")
                        }));
                        continue;
                    }
                    if let Some(rest) = line.trim().strip_prefix("objects listening on ") {
                        if let Some(p) = rest.strip_prefix("unix:") {
                            server.object_unix.push(PathBuf::from(p));
                            continue;
                        }
                        server.objects.push(rest.parse().unwrap_or_else(|e| {
                            panic!("cannot parse the object listener in {line:?}: {e}")
                        }));
                        continue;
                    }
                    let Some(rest) = line.trim().strip_prefix("listening on ") else {
                        continue;
                    };
                    if let Some(p) = rest.strip_prefix("unix:") {
                        server.unix.push(PathBuf::from(p));
                    } else {
                        let addr: SocketAddr = rest.parse().unwrap_or_else(|e| {
                            panic!("cannot parse listener address in {line:?}: {e}")
                        });
                        server.tcp.push(addr);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(st) = server.try_wait() {
                        panic!(
                            "sluice exited with {st} during startup: {}\n--- stderr ---\n{}",
                            server.cmdline,
                            server.stderr_log()
                        );
                    }
                    if Instant::now() >= deadline {
                        panic!(
                            "sluice did not print {} `listening on` line(s) within {:?}: {}\n--- stderr ---\n{}",
                            listens.len(),
                            STARTUP_TIMEOUT,
                            server.cmdline,
                            server.stderr_log()
                        );
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let st = server.wait_exit(Duration::from_secs(5));
                    panic!(
                        "sluice closed stdout during startup (exit: {st:?}): {}\n--- stderr ---\n{}",
                        server.cmdline,
                        server.stderr_log()
                    );
                }
            }
        }
        server
    }
}

/// A running `sluice serve`; SIGTERM (then SIGKILL) on drop.
pub(crate) struct Server {
    child: Option<Child>,
    cmdline: String,
    pub(crate) tcp: Vec<SocketAddr>,
    pub(crate) unix: Vec<PathBuf>,
    /// Object protocol listeners (TCP), with [`ServerBuilder::objects`].
    pub(crate) objects: Vec<SocketAddr>,
    /// Object protocol Unix-socket listeners.
    pub(crate) object_unix: Vec<PathBuf>,
    /// The metrics endpoint, when started with [`ServerBuilder::metrics`].
    pub(crate) metrics: Option<SocketAddr>,
    /// The S3 endpoint, when started with [`ServerBuilder::s3`].
    pub(crate) s3: Option<SocketAddr>,
    stderr_path: PathBuf,
    /// The read end of stderr, with [`ServerBuilder::stderr_pipe`].
    stderr_pipe: Option<std::process::ChildStderr>,
    _logdir: TempDir,
}

impl Server {
    /// Waits until the server's log holds `needle` (lines are written by
    /// the server's log thread a moment after the event they report),
    /// and returns the log; fails the test after 10 s.
    pub(crate) fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.stderr_log();
            if log.contains(needle) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "the server never logged {needle:?}:\n{log}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes the read end of the server's stderr pipe (started with
    /// [`ServerBuilder::stderr_pipe`]): its next log line meets a pipe
    /// without a reader.
    pub(crate) fn close_stderr_pipe(&mut self) {
        assert!(
            self.stderr_pipe.take().is_some(),
            "started without stderr_pipe()"
        );
    }

    /// The first TCP listener.
    pub(crate) fn addr(&self) -> SocketAddr {
        *self
            .tcp
            .first()
            .expect("server has no TCP listener (started with only unix: listeners)")
    }

    /// `nbd://127.0.0.1:PORT/EXPORT`.
    pub(crate) fn uri(&self, export: &str) -> String {
        format!("nbd://{}/{export}", self.addr())
    }

    /// `nbd+unix:///EXPORT?socket=PATH` for the first Unix listener.
    pub(crate) fn unix_uri(&self, export: &str) -> String {
        let path = self.unix.first().expect("server has no unix: listener");
        format!("nbd+unix:///{export}?socket={}", path.display())
    }

    /// `sluice://HOST:PORT` (or `sluice+unix:///PATH`) of the first
    /// object listener.
    pub(crate) fn obj_uri(&self) -> String {
        match (self.objects.first(), self.object_unix.first()) {
            (Some(addr), _) => format!("sluice://{addr}"),
            (None, Some(path)) => format!("sluice+unix://{}", path.display()),
            (None, None) => panic!("server has no object listener (use ServerBuilder::objects)"),
        }
    }

    pub(crate) fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr()).expect("connect to sluice");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("set read timeout");
        s.set_write_timeout(Some(Duration::from_secs(20)))
            .expect("set write timeout");
        s.set_nodelay(true).expect("set nodelay");
        s
    }

    pub(crate) fn pid(&self) -> i32 {
        let child = self.child.as_ref().expect("server process handle");
        i32::try_from(child.id()).expect("pid fits in i32")
    }

    pub(crate) fn signal(&self, sig: Signal) {
        let pid = Pid::from_raw(self.pid()).expect("child pid is positive");
        kill_process(pid, sig)
            .unwrap_or_else(|e| panic!("kill({}, {sig:?}) failed: {e}", self.pid()));
    }

    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("try_wait on server"))
    }

    /// Waits up to `timeout` for the server to exit.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_wait() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Fails the test if the server process has exited.
    pub(crate) fn assert_running(&mut self) {
        if let Some(st) = self.try_wait() {
            panic!(
                "sluice exited unexpectedly with {st}\n--- stderr ---\n{}",
                self.stderr_log()
            );
        }
    }

    /// Everything the server wrote to stderr so far (last 64 KiB).
    pub(crate) fn stderr_log(&self) -> String {
        let data = std::fs::read(&self.stderr_path).unwrap_or_default();
        let from = data.len().saturating_sub(64 * 1024);
        String::from_utf8_lossy(&data[from..]).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(None)) {
            if let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
                let _ = kill_process(pid, Signal::TERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                eprintln!("sluice did not exit within 10 s of SIGTERM; killing it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if thread::panicking() {
            eprintln!(
                "--- sluice stderr ({}) ---\n{}",
                self.cmdline,
                self.stderr_log()
            );
        }
    }
}

/// The body of `GET /metrics`.
pub(crate) fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n")
        .expect("send the metrics request");
    let mut response = String::new();
    s.read_to_string(&mut response)
        .expect("read the metrics response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {response:?}"));
    assert!(
        head.lines().next().is_some_and(|l| l.contains(" 200")),
        "GET /metrics: {head}"
    );
    body.to_owned()
}

// ---------------------------------------------------------------------------
// Data helpers
// ---------------------------------------------------------------------------

/// A fresh temporary directory on disk.
pub(crate) fn tempdir() -> TempDir {
    tempfile::Builder::new()
        .prefix("sluice-interop-")
        .tempdir()
        .expect("create temp dir")
}

/// A fresh temporary directory in /dev/shm when there is one (big scratch
/// images stay in memory), else on disk.
pub(crate) fn shm_tempdir() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("sluice-interop-")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempdir()
}

/// Deterministic pseudo-random bytes; `seed` picks the stream.
pub(crate) fn fill_random(seed: u64, buf: &mut [u8]) {
    fastrand::Rng::with_seed(seed).fill(buf);
}

pub(crate) fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_random(seed, &mut v);
    v
}

/// Writes `size` bytes of random data to `path`, except that the byte ranges
/// in `zero_ranges` (offset, length) are left as zeros (sparse where possible).
pub(crate) fn write_random_file(path: &Path, size: u64, seed: u64, zero_ranges: &[(u64, u64)]) {
    let mut f = File::create(path).expect("create data file");
    let chunk = MIB;
    let mut buf = vec![0u8; chunk as usize];
    let mut off = 0;
    let mut idx = 0u64;
    while off < size {
        let n = chunk.min(size - off);
        let b = &mut buf[..n as usize];
        fill_random(seed.wrapping_mul(1_000_003).wrapping_add(idx), b);
        for &(zo, zl) in zero_ranges {
            let lo = zo.max(off);
            let hi = (zo + zl).min(off + n);
            if lo < hi {
                b[(lo - off) as usize..(hi - off) as usize].fill(0);
            }
        }
        f.write_all(b).expect("write data file");
        off += n;
        idx += 1;
    }
    f.sync_all().ok();
}

/// `sha256sum PATH` -> hex digest.
pub(crate) fn sha256_file(path: &Path) -> String {
    let out = tool("sha256sum").arg(path).run();
    out.stdout()
        .split_whitespace()
        .next()
        .expect("sha256sum output")
        .to_string()
}

/// Reads `len` bytes at `offset` of a local file.
pub(crate) fn read_file_range(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset)
        .unwrap_or_else(|e| panic!("read {} at {offset}: {e}", path.display()));
    buf
}

/// Asserts two byte slices are equal, reporting the first difference
/// (instead of dumping megabytes).
pub(crate) fn assert_bytes_eq(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length differs");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i}: got {:#04x}, want {:#04x}",
            got[i], want[i]
        );
    }
}

/// Two files have identical contents (compared by SHA-256 and by size).
pub(crate) fn assert_files_equal(a: &Path, b: &Path) {
    let la = std::fs::metadata(a).expect("stat a").len();
    let lb = std::fs::metadata(b).expect("stat b").len();
    assert_eq!(la, lb, "{} and {} differ in size", a.display(), b.display());
    assert_eq!(
        sha256_file(a),
        sha256_file(b),
        "{} and {} differ in content",
        a.display(),
        b.display()
    );
}

/// A sparse file of `size` bytes.
pub(crate) fn create_sparse_file(path: &Path, size: u64) {
    let f = File::create(path).expect("create sparse file");
    f.set_len(size).expect("set_len");
}
