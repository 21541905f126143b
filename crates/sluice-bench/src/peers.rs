//! Servers run as separate processes (sluice itself, nbdkit, qemu-nbd) on
//! one image, and fio as a second, independent client.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sluice_client::{NbdUri, Target as NbdTarget};

use crate::cpu;
use crate::hist::LatencySummary;
use crate::runner::RunResult;
use crate::workload::{Limit, Pattern, Rw, Workload};

/// Somewhere other than this network namespace that a server process
/// can run in: the address it listens on there, a free port there, and
/// the command that starts a program there. The lab's shaped links
/// (sluice-lab's `Link`) are one; `None` where a host is asked for
/// means 127.0.0.1 in this namespace.
pub trait ServerHost {
    /// The address servers listen on.
    fn server_addr(&self) -> IpAddr;
    /// A port nothing listens on yet.
    fn free_port(&self) -> Result<u16>;
    /// A command that runs `program` there.
    fn command(&self, program: &std::ffi::OsStr) -> Command;
}

/// Connections qemu-nbd is started to accept (`-e`).
pub const QEMU_NBD_SHARED: u32 = 16;

/// A kind of NBD server started as a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerKind {
    /// `sluice serve`.
    Sluice,
    /// nbdkit's file plugin.
    Nbdkit,
    /// qemu-nbd.
    QemuNbd,
}

/// A server process to start: its kind and program.
#[derive(Debug, Clone)]
pub struct PeerSpec {
    /// Label in results ("sluice", "nbdkit", "qemu-nbd").
    pub label: String,
    /// Which server.
    pub kind: PeerKind,
    /// The executable.
    pub program: PathBuf,
}

impl PeerSpec {
    /// The command line serving `image` on 127.0.0.1:`port`.
    pub fn argv(&self, image: &Path, port: u16) -> Vec<String> {
        self.argv_at(image, IpAddr::V4(Ipv4Addr::LOCALHOST), port)
    }

    /// The command line serving `image` on `host`:`port`.
    pub fn argv_at(&self, image: &Path, host: IpAddr, port: u16) -> Vec<String> {
        let host_s = host.to_string();
        let img = image.display().to_string();
        let p = port.to_string();
        let prog = self.program.display().to_string();
        let shared = QEMU_NBD_SHARED.to_string();
        let v: Vec<&str> = match self.kind {
            PeerKind::Sluice => vec![&prog, "serve", "--listen", "", "--export", ""],
            PeerKind::Nbdkit => vec![&prog, "-f", "-p", &p, "-i", &host_s, "file", &img],
            PeerKind::QemuNbd => vec![
                &prog,
                "-f",
                "raw",
                "-p",
                &p,
                "-b",
                &host_s,
                "-t",
                "-e",
                &shared,
                "--cache=writeback",
                "--aio=threads",
                &img,
            ],
        };
        let mut v: Vec<String> = v.into_iter().map(str::to_owned).collect();
        if self.kind == PeerKind::Sluice {
            v[3] = std::net::SocketAddr::new(host, port).to_string();
            v[5] = format!("default=file:{img}");
        }
        v
    }
}

/// Finds `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The sluice binary to serve with: `explicit` if given; else this
/// executable when it is `sluice`; else a `sluice` beside it or one folder
/// up (an example binary in target/release/examples finds
/// target/release/sluice).
pub fn resolve_sluice_bin(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if is_executable(p) {
            return Ok(p.to_path_buf());
        }
        bail!("--sluice-bin {}: not an executable file", p.display());
    }
    let me = std::env::current_exe().context("cannot find the running executable")?;
    if me.file_stem().is_some_and(|s| s == "sluice") {
        return Ok(me);
    }
    let dir = me.parent().unwrap_or(Path::new("."));
    for cand in [dir.join("sluice"), dir.join("../sluice")] {
        if is_executable(&cand) {
            return Ok(cand);
        }
    }
    bail!(
        "no sluice binary next to {} (build it with 'cargo build --release' or pass --sluice-bin)",
        me.display()
    )
}

/// The servers a preset's `--targets` names among `known` (without
/// `--targets`: `defaults`), then each `LABEL=PATH` it names (another
/// sluice binary, or a script that runs one with other options), for
/// [`available_peers`].
pub fn requested_servers<'a>(
    targets: Option<&'a [String]>,
    known: &[&'a str],
    defaults: &[&'a str],
) -> Vec<&'a str> {
    let mut names: Vec<&str> = match targets {
        None => defaults.to_vec(),
        Some(t) => known
            .iter()
            .copied()
            .filter(|n| t.iter().any(|x| x == n))
            .collect(),
    };
    names.extend(
        targets
            .into_iter()
            .flatten()
            .filter(|t| t.contains('='))
            .map(String::as_str),
    );
    names
}

/// The peers among `names` (sluice, nbdkit, qemu-nbd, or `LABEL=PATH`
/// for another sluice binary) that can run here, and a message for each
/// that cannot.
pub fn available_peers(names: &[&str], sluice_bin: Option<&Path>) -> (Vec<PeerSpec>, Vec<String>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for &name in names {
        let r = match name {
            "sluice" => resolve_sluice_bin(sluice_bin).map(|p| (PeerKind::Sluice, p)),
            "nbdkit" => which("nbdkit")
                .map(|p| (PeerKind::Nbdkit, p))
                .ok_or_else(|| anyhow!("nbdkit is not installed (apt-get install nbdkit)")),
            "qemu-nbd" => which("qemu-nbd")
                .map(|p| (PeerKind::QemuNbd, p))
                .ok_or_else(|| anyhow!("qemu-nbd is not installed (apt-get install qemu-utils)")),
            other => match other.split_once('=') {
                Some((label, path)) if !label.is_empty() => {
                    resolve_sluice_bin(Some(Path::new(path))).map(|p| (PeerKind::Sluice, p))
                }
                _ => Err(anyhow!(
                    "unknown server {other:?} (sluice, nbdkit, qemu-nbd, or LABEL=PATH for another sluice binary)"
                )),
            },
        };
        match r {
            Ok((kind, program)) => found.push(PeerSpec {
                label: name
                    .split_once('=')
                    .map_or(name, |(label, _)| label)
                    .to_owned(),
                kind,
                program,
            }),
            Err(e) => skipped.push(format!("skipping {name}: {e:#}")),
        }
    }
    (found, skipped)
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(l.local_addr().context("cannot find a free port")?.port())
}

/// A running server process; stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct PeerServer {
    child: Option<Child>,
    kind: PeerKind,
    host: IpAddr,
    port: u16,
    label: String,
    log: tempfile::NamedTempFile,
}

impl PeerServer {
    /// Starts `spec` on `image` and waits until it accepts connections.
    pub fn start(spec: &PeerSpec, image: &Path) -> Result<Self> {
        Self::start_behind(spec, image, None)
    }

    /// Starts `spec` on `image`, on the host `on` listening on its server
    /// address when one is given (else on 127.0.0.1).
    pub fn start_behind(
        spec: &PeerSpec,
        image: &Path,
        on: Option<&dyn ServerHost>,
    ) -> Result<Self> {
        let (host, port) = match on {
            Some(h) => (h.server_addr(), h.free_port()?),
            None => (IpAddr::V4(Ipv4Addr::LOCALHOST), free_port()?),
        };
        let argv = spec.argv_at(image, host, port);
        Self::launch(&spec.label, spec.kind, &argv, (host, port), on)
    }

    /// Runs `argv` (a server that will listen on `addr`), on the host `on`
    /// when given, and waits until it accepts connections.
    pub fn launch(
        label: &str,
        kind: PeerKind,
        argv: &[String],
        addr: (IpAddr, u16),
        on: Option<&dyn ServerHost>,
    ) -> Result<Self> {
        let (host, port) = addr;
        let Some(program) = argv.first() else {
            bail!("{label}: an empty command line");
        };
        let log = tempfile::NamedTempFile::new().context("cannot create a server log file")?;
        let mut command = match on {
            Some(h) => h.command(program.as_ref()),
            None => Command::new(program),
        };
        let child = command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.reopen().context("cannot open the server log")?)
            .stderr(log.reopen().context("cannot open the server log")?)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("cannot start {}", argv.join(" ")))?;
        let mut me = Self {
            child: Some(child),
            kind,
            host,
            port,
            label: label.to_owned(),
            log,
        };
        me.wait_listening(Duration::from_secs(20))
            .with_context(|| format!("{label} did not start: {}", argv.join(" ")))?;
        Ok(me)
    }

    fn wait_listening(&mut self, timeout: Duration) -> Result<()> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("exited with {status}: {}", self.log_tail());
                }
            }
            if TcpStream::connect((self.host, self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= end {
                bail!("not listening on port {} after {timeout:?}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The end of its log (stdout and stderr), on one line.
    pub fn log_tail(&self) -> String {
        let Ok(mut f) = File::open(self.log.path()) else {
            return String::new();
        };
        let len = f.seek(SeekFrom::End(0)).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(600)));
        let mut s = String::new();
        let _ = f.read_to_string(&mut s);
        s.trim().replace('\n', " | ")
    }

    /// Which server it is.
    pub fn kind(&self) -> PeerKind {
        self.kind
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its default export.
    pub fn uri(&self) -> NbdUri {
        NbdUri::new(NbdTarget::Tcp(self.address()), "")
    }

    /// `nbd://HOST:PORT/`, for fio.
    pub fn uri_string(&self) -> String {
        format!("nbd://{}/", self.address())
    }

    /// `HOST:PORT`, where it listens.
    pub fn address(&self) -> String {
        std::net::SocketAddr::new(self.host, self.port).to_string()
    }

    /// Its label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Stops it: SIGTERM, up to 10 s, then SIGKILL.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: signalling our own child, which has not been reaped
            // (we hold its Child), so the pid is not reused.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Creates `path` (or grows it) to `size` bytes of non-zero data, so
/// every read finds allocated blocks.
pub fn ensure_image(path: &Path, size: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("cannot create image {}", path.display()))?;
    let have = f
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    if have >= size {
        return Ok(());
    }
    let mut chunk = vec![0u8; 1 << 20];
    let mut off = have - have % (1 << 20);
    while off < size {
        let n = (chunk.len() as u64).min(size - off) as usize;
        crate::verify::fill(&mut chunk[..n], off, 0x1ea5);
        f.write_all_at(&chunk[..n], off)
            .with_context(|| format!("cannot write image {} at {off}", path.display()))?;
        off += n as u64;
    }
    Ok(())
}

/// Where fio sends its I/O.
#[derive(Debug, Clone)]
pub enum FioTarget {
    /// fio's nbd engine (libnbd) against a URI.
    Nbd(String),
    /// psync on a local file; `queue_depth × workers` jobs.
    Local(PathBuf),
}

/// The fio command line for `w` over `region` of `target`.
pub fn fio_args(target: &FioTarget, w: &Workload, region: (u64, u64)) -> Vec<String> {
    let rw = match (w.pattern, w.rw) {
        (Pattern::Seq, Rw::Read) => "read",
        (Pattern::Seq, Rw::Write) => "write",
        (Pattern::Seq, Rw::Mixed) => "rw",
        (Pattern::Rand, Rw::Read) => "randread",
        (Pattern::Rand, Rw::Write) => "randwrite",
        (Pattern::Rand, Rw::Mixed) => "randrw",
    };
    let (jobs, iodepth) = match target {
        FioTarget::Nbd(_) => (w.workers.max(1), w.queue_depth.max(1)),
        FioTarget::Local(_) => (w.workers.max(1) * w.queue_depth.max(1), 1),
    };
    let bs = u64::from(w.block_size.max(1));
    let mut a = vec![
        "fio".to_owned(),
        "--name=sluice-bench".into(),
        format!("--rw={rw}"),
        format!("--bs={bs}"),
        format!("--iodepth={iodepth}"),
        format!("--numjobs={jobs}"),
        "--group_reporting".into(),
        "--thread".into(),
        "--output-format=json".into(),
        "--lat_percentiles=1".into(),
        "--percentile_list=50:90:99:99.9".into(),
        format!("--offset={}", region.0),
    ];
    if w.rw == Rw::Mixed {
        a.push(format!("--rwmixread={}", w.read_percent()));
    }
    // Sequential jobs each stream their own slice, as the own client's
    // workers do; random jobs share the region.
    let per_job = if w.pattern == Pattern::Seq {
        let s = (region.1 / u64::from(jobs)) / bs * bs;
        a.push(format!("--offset_increment={s}"));
        s.max(bs)
    } else {
        region.1
    };
    a.push(format!("--size={per_job}"));
    match w.limit {
        Limit::Time(d) => {
            a.push(format!("--runtime={}ms", d.as_millis().max(1)));
            a.push("--time_based".into());
        }
        Limit::Ops(n) => a.push(format!("--number_ios={}", n.div_ceil(u64::from(jobs)))),
        Limit::Bytes(b) => a.push(format!("--io_size={}", b.div_ceil(u64::from(jobs)))),
    }
    match target {
        FioTarget::Nbd(uri) => {
            a.push("--ioengine=nbd".into());
            a.push(format!("--uri={uri}"));
        }
        FioTarget::Local(path) => {
            a.push("--ioengine=psync".into());
            a.push(format!("--filename={}", path.display()));
            a.push("--invalidate=0".into());
        }
    }
    a
}

/// Runs fio for `w` and turns its JSON into a [`RunResult`]; server CPU
/// from `server_pid` when given.
pub fn run_fio(
    target: &FioTarget,
    w: &Workload,
    region: (u64, u64),
    server_pid: Option<u32>,
    label: &str,
) -> Result<RunResult> {
    if which("fio").is_none() {
        bail!("fio is not installed (apt-get install fio)");
    }
    let args = fio_args(target, w, region);
    let server_before = server_pid.and_then(cpu::process_cpu);
    let client_before = cpu::children_cpu();
    let out = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", args.join(" ")))?;
    let client_cpu = cpu::children_cpu().saturating_sub(client_before);
    let server_after = server_pid.and_then(cpu::process_cpu);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "fio failed ({}): {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            args.join(" ")
        );
    }
    let mut r =
        parse_fio_json(&stdout).with_context(|| format!("fio output of {}", args.join(" ")))?;
    r.target = label.to_owned();
    r.case = w.label();
    r.client_cpu_s = client_cpu.as_secs_f64();
    r.server_cpu_s = match (server_before, server_after) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    Ok(r)
}

fn fio_dir(v: &serde_json::Value) -> (u64, u64, f64, LatencySummary) {
    let ios = v["total_ios"].as_u64().unwrap_or(0);
    let bytes = v["io_bytes"].as_u64().unwrap_or(0);
    let runtime_s = v["runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    let lat = &v["lat_ns"];
    let pct = |k: &str| lat["percentile"][k].as_f64().unwrap_or(0.0) / 1000.0;
    let s = LatencySummary {
        count: ios,
        mean_us: lat["mean"].as_f64().unwrap_or(0.0) / 1000.0,
        p50_us: pct("50.000000"),
        p90_us: pct("90.000000"),
        p99_us: pct("99.000000"),
        p999_us: pct("99.900000"),
        max_us: lat["max"].as_f64().unwrap_or(0.0) / 1000.0,
    };
    (ios, bytes, runtime_s, s)
}

/// Combines read and write summaries, weighting by count (an
/// approximation for percentiles of mixed workloads).
fn combine(a: &LatencySummary, b: &LatencySummary) -> LatencySummary {
    let n = a.count + b.count;
    if a.count == 0 {
        return *b;
    }
    if b.count == 0 {
        return *a;
    }
    let w = |x: f64, y: f64| (x * a.count as f64 + y * b.count as f64) / n as f64;
    LatencySummary {
        count: n,
        mean_us: w(a.mean_us, b.mean_us),
        p50_us: w(a.p50_us, b.p50_us),
        p90_us: w(a.p90_us, b.p90_us),
        p99_us: w(a.p99_us, b.p99_us),
        p999_us: w(a.p999_us, b.p999_us),
        max_us: a.max_us.max(b.max_us),
    }
}

/// Reads fio's `--output-format=json` (with `--group_reporting`).
pub fn parse_fio_json(text: &str) -> Result<RunResult> {
    let start = text
        .find('{')
        .ok_or_else(|| anyhow!("no JSON in fio's output: {}", text.trim()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text[start..]).context("fio's JSON does not parse")?;
    let job = &v["jobs"][0];
    if job.is_null() {
        bail!("fio's JSON has no jobs");
    }
    let (r_ios, r_bytes, r_rt, r_lat) = fio_dir(&job["read"]);
    let (w_ios, w_bytes, w_rt, w_lat) = fio_dir(&job["write"]);
    let elapsed = r_rt.max(w_rt).max(1e-9);
    let ops = r_ios + w_ios;
    let bytes = r_bytes + w_bytes;
    Ok(RunResult {
        target: String::new(),
        driver: "fio".into(),
        case: String::new(),
        workload: None,
        ops,
        reads: r_ios,
        writes: w_ios,
        bytes,
        elapsed_s: elapsed,
        iops: ops as f64 / elapsed,
        mib_s: bytes as f64 / elapsed / (1 << 20) as f64,
        latency: combine(&r_lat, &w_lat),
        read_latency: r_lat,
        write_latency: w_lat,
        client_cpu_s: 0.0,
        server_cpu_s: None,
        verified_reads: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_servers_keep_the_named_ones_and_every_label_path() {
        let known = ["sluice", "nbdkit", "qemu-nbd"];
        let defaults = ["sluice", "nbdkit"];
        assert_eq!(requested_servers(None, &known, &defaults), defaults);
        let t: Vec<String> = ["nbdkit", "local", "sluice-wb=/tmp/wb", "qemu-nbd"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            requested_servers(Some(&t), &known, &defaults),
            ["nbdkit", "qemu-nbd", "sluice-wb=/tmp/wb"]
        );
        assert!(requested_servers(Some(&[]), &known, &defaults).is_empty());
    }

    #[test]
    fn peer_command_lines() {
        let spec = |kind, prog: &str| PeerSpec {
            label: "x".into(),
            kind,
            program: prog.into(),
        };
        let img = Path::new("/dev/shm/i.img");
        assert_eq!(
            spec(PeerKind::Sluice, "/b/sluice")
                .argv(img, 5000)
                .join(" "),
            "/b/sluice serve --listen 127.0.0.1:5000 --export default=file:/dev/shm/i.img"
        );
        assert_eq!(
            spec(PeerKind::Nbdkit, "nbdkit").argv(img, 5000).join(" "),
            "nbdkit -f -p 5000 -i 127.0.0.1 file /dev/shm/i.img"
        );
        assert!(spec(PeerKind::QemuNbd, "qemu-nbd")
            .argv(img, 5000)
            .join(" ")
            .ends_with("-t -e 16 --cache=writeback --aio=threads /dev/shm/i.img"));
    }

    #[test]
    fn other_sluice_builds_are_peers_under_their_label() {
        let me = std::env::current_exe().expect("test executable");
        let arg = format!("before={}", me.display());
        let (found, skipped) = available_peers(&[arg.as_str(), "=x", "tape"], None);
        assert_eq!(found.len(), 1, "{skipped:?}");
        assert_eq!(found[0].label, "before");
        assert_eq!(found[0].kind, PeerKind::Sluice);
        assert_eq!(found[0].program, me);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        let (found, skipped) = available_peers(&["old=/no/such/sluice"], None);
        assert!(found.is_empty());
        assert!(skipped[0].contains("/no/such/sluice"), "{skipped:?}");
    }

    #[test]
    fn fio_json_is_read() {
        let text = r#"note: both iodepth >= 1 and synchronous I/O engine are selected
{"jobs":[{"read":{"io_bytes":4096000,"total_ios":1000,"runtime":500,
 "lat_ns":{"mean":20000.0,"max":90000,"percentile":{"50.000000":18000,"90.000000":25000,
 "99.000000":40000,"99.900000":80000}}},
 "write":{"io_bytes":0,"total_ios":0,"runtime":0,"lat_ns":{"mean":0.0,"max":0}}}]}"#;
        let r = parse_fio_json(text).unwrap();
        assert_eq!(
            (r.ops, r.reads, r.writes, r.bytes),
            (1000, 1000, 0, 4_096_000)
        );
        assert!((r.iops - 2000.0).abs() < 1e-6);
        assert_eq!(r.latency.p50_us, 18.0);
        assert_eq!(r.latency.p999_us, 80.0);
        assert!(parse_fio_json("fio: error").is_err());
    }

    #[test]
    fn fio_lines_match_the_workload() {
        let mut w = Workload::new(Pattern::Seq, Rw::Read, 1 << 20, 8);
        w.workers = 2;
        let a = fio_args(
            &FioTarget::Nbd("nbd://127.0.0.1:1/".into()),
            &w,
            (0, 64 << 20),
        );
        assert!(a.contains(&"--rw=read".to_owned()));
        assert!(a.contains(&"--numjobs=2".to_owned()));
        assert!(a.contains(&"--iodepth=8".to_owned()));
        assert!(a.contains(&format!("--offset_increment={}", 32 << 20)));
        let l = fio_args(&FioTarget::Local("/x".into()), &w, (0, 64 << 20));
        assert!(l.contains(&"--numjobs=16".to_owned()) && l.contains(&"--iodepth=1".to_owned()));
    }
}
