//! The `filesystem` preset: a real filesystem over an NBD server.
//! nbdfuse exposes the export as a file, a loop device carries ext4 on
//! it, and fio runs file workloads there; the same on nbdkit. Every mount,
//! loop device and FUSE mount is undone on the way out, also on failure.
//! The mount stack (`Ext4Stack`) is also the `pgbench` preset's.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sluice_bench::machine::Machine;
use sluice_bench::matrix::{self, Failure, MatrixRuns, Measured, Summary};
use sluice_bench::peers::{self, PeerServer, PeerSpec};
use sluice_bench::runner::RunResult;
use sluice_model::plot::{Axes, Chart, Figure, XAxis};
use sluice_model::text::{compact, scaled, Table};

use crate::epilogue::Epilogue;
use crate::presets::PresetReport;
use crate::setup::{Image, PresetOptions};

/// One fio job on the mounted filesystem.
struct FsJob {
    name: &'static str,
    args: Vec<String>,
    /// Compare on MiB/s rather than IOPS.
    bandwidth: bool,
}

fn jobs(quick: bool, runtime: Duration) -> Vec<FsJob> {
    let file = if quick { "64M" } else { "256M" };
    let big = if quick { "128M" } else { "512M" };
    let rt = format!("--runtime={}ms", runtime.as_millis().max(1));
    let common = |name: &str| -> Vec<String> {
        vec![
            format!("--name={name}"),
            "--ioengine=psync".into(),
            "--direct=1".into(),
            "--group_reporting".into(),
            "--output-format=json".into(),
            "--lat_percentiles=1".into(),
            "--percentile_list=50:90:99:99.9".into(),
            rt.clone(),
            "--time_based".into(),
        ]
    };
    let with = |name: &'static str, extra: &[&str], bandwidth: bool| {
        let mut args = common(name);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        FsJob {
            name,
            args,
            bandwidth,
        }
    };
    vec![
        with(
            "randrw70-4k-4jobs",
            &[
                "--rw=randrw",
                "--rwmixread=70",
                "--bs=4k",
                "--numjobs=4",
                &format!("--size={file}"),
            ],
            false,
        ),
        with(
            "randwrite-4k-fsync",
            &[
                "--rw=randwrite",
                "--bs=4k",
                "--fsync=1",
                "--numjobs=1",
                &format!("--size={file}"),
            ],
            false,
        ),
        with(
            "seqwrite-1m",
            &[
                "--rw=write",
                "--bs=1M",
                "--numjobs=1",
                &format!("--size={big}"),
                "--filename=seq.dat",
            ],
            true,
        ),
        with(
            "seqread-1m",
            &[
                "--rw=read",
                "--bs=1M",
                "--numjobs=1",
                &format!("--size={big}"),
                "--filename=seq.dat",
            ],
            true,
        ),
    ]
}

/// Runs `cmd args` and returns its standard output, trimmed; a failure
/// carries the command line, its status and its standard error.
pub(crate) fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Why this machine cannot run the preset, if it cannot.
fn missing_prerequisite() -> Option<String> {
    if peers::which("fio").is_none() {
        return Some("fio is not installed (apt-get install fio)".into());
    }
    missing_stack_prerequisite()
}

/// Why this machine cannot build an [`Ext4Stack`], if it cannot.
pub(crate) fn missing_stack_prerequisite() -> Option<String> {
    for tool in ["nbdfuse", "losetup", "mkfs.ext4", "mount", "umount"] {
        if peers::which(tool).is_none() {
            return Some(format!(
                "{tool} is not installed (apt-get install nbdfuse util-linux e2fsprogs)"
            ));
        }
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("/dev/loop-control is missing (no loop devices here)".into());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("loop devices and mounts need root".into());
    }
    None
}

/// ext4 on a loop device, mounted in a fresh work folder: over an NBD
/// server (server → nbdfuse → loop → ext4) or, with no server, straight
/// on the image file (local I/O, the same file, no NBD). Torn down in
/// reverse on drop, also when building it failed half-way.
pub(crate) struct Ext4Stack {
    server: Option<PeerServer>,
    workdir: tempfile::TempDir,
    fuse_mounted: bool,
    nbdfuse: Option<Child>,
    loopdev: Option<String>,
    mounted: bool,
}

impl Ext4Stack {
    fn fuse_dir(&self) -> PathBuf {
        self.workdir.path().join("fuse")
    }

    /// Where the filesystem is mounted.
    pub(crate) fn mnt(&self) -> PathBuf {
        self.workdir.path().join("mnt")
    }

    /// The work folder holding the mount point (mode 0700 unless changed).
    pub(crate) fn workdir(&self) -> &Path {
        self.workdir.path()
    }

    /// Builds the stack over `spec` serving `image`, or on `image` itself
    /// when `spec` is `None`; mkfs each time.
    pub(crate) fn build(spec: Option<&PeerSpec>, image: &Path) -> Result<Self> {
        let workdir = tempfile::Builder::new()
            .prefix("sluice-bench-fs-")
            .tempdir()
            .context("cannot create a work folder")?;
        let mut s = Self {
            server: spec
                .map(|spec| PeerServer::start(spec, image))
                .transpose()?,
            workdir,
            fuse_mounted: false,
            nbdfuse: None,
            loopdev: None,
            mounted: false,
        };
        std::fs::create_dir_all(s.mnt()).context("cannot create the mount point")?;
        let disk = match s.server.as_ref().map(PeerServer::uri_string) {
            Some(uri) => s.expose(&uri)?,
            None => image.to_path_buf(),
        };
        s.attach_and_mount(&disk)?;
        Ok(s)
    }

    /// Starts nbdfuse on `uri` and returns the file it exposes.
    fn expose(&mut self, uri: &str) -> Result<PathBuf> {
        std::fs::create_dir_all(self.fuse_dir()).context("cannot create the FUSE mount point")?;
        let disk = self.fuse_dir().join("disk");
        let child = Command::new("nbdfuse")
            .arg(&disk)
            .arg(uri)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start nbdfuse")?;
        self.nbdfuse = Some(child);
        self.fuse_mounted = true;
        let end = Instant::now() + Duration::from_secs(15);
        while !disk.exists() {
            if let Some(c) = self.nbdfuse.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    bail!(
                        "nbdfuse exited with {status} before {} appeared",
                        disk.display()
                    );
                }
            }
            if Instant::now() > end {
                bail!("nbdfuse did not expose {} within 15 s", disk.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(disk)
    }

    /// A loop device on `disk`, ext4 on it, mounted.
    fn attach_and_mount(&mut self, disk: &Path) -> Result<()> {
        let disk_s = disk.display().to_string();
        // Direct I/O on the loop device, so the backing file's page cache
        // does not absorb the workload before it reaches the server (a
        // file on tmpfs refuses it: then buffered).
        let dev = run("losetup", &["-f", "--show", "--direct-io=on", &disk_s])
            .or_else(|_| run("losetup", &["-f", "--show", &disk_s]))?;
        if !dev.starts_with("/dev/") {
            bail!("losetup printed {dev:?}, not a device");
        }
        self.loopdev = Some(dev.clone());
        // Inode tables and journal written now, not by ext4's lazy-init
        // thread in the background of the measured runs.
        run(
            "mkfs.ext4",
            &[
                "-q",
                "-F",
                "-E",
                "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
                &dev,
            ],
        )?;
        let mnt = self.mnt().display().to_string();
        run("mount", &["-t", "ext4", &dev, &mnt])?;
        self.mounted = true;
        Ok(())
    }

    /// The server's process id (`None` for local I/O).
    pub(crate) fn server_pid(&self) -> Option<u32> {
        self.server.as_ref().and_then(PeerServer::pid)
    }

    fn teardown(&mut self) {
        let mnt = self.mnt().display().to_string();
        if self.mounted {
            if run("umount", &[&mnt]).is_err() {
                let _ = run("umount", &["-l", &mnt]);
            }
            self.mounted = false;
        }
        if let Some(dev) = self.loopdev.take() {
            match run("losetup", &["-d", &dev]) {
                Ok(_) => wait_detached(&dev),
                Err(e) => eprintln!("warning: {e:#}"),
            }
        }
        if self.fuse_mounted {
            let fuse = self.fuse_dir().display().to_string();
            let ok = run("fusermount3", &["-u", &fuse]).is_ok()
                || run("fusermount", &["-u", &fuse]).is_ok()
                || run("umount", &[&fuse]).is_ok()
                || run("umount", &["-l", &fuse]).is_ok();
            if !ok {
                eprintln!("warning: could not unmount {fuse}");
            }
            self.fuse_mounted = false;
        }
        if let Some(mut c) = self.nbdfuse.take() {
            let end = Instant::now() + Duration::from_secs(5);
            while Instant::now() < end {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if let Some(mut s) = self.server.take() {
            s.stop();
        }
    }
}

impl Drop for Ext4Stack {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn run_job(stack: &Ext4Stack, job: &FsJob, label: &str) -> Result<RunResult> {
    let mnt = stack.mnt();
    let server_before = stack.server_pid().and_then(sluice_bench::cpu::process_cpu);
    let client_before = sluice_bench::cpu::children_cpu();
    let out = Command::new("fio")
        .args(&job.args)
        .arg(format!("--directory={}", mnt.display()))
        .stdin(Stdio::null())
        .output()
        .context("cannot run fio")?;
    let client = sluice_bench::cpu::children_cpu().saturating_sub(client_before);
    let server_after = stack.server_pid().and_then(sluice_bench::cpu::process_cpu);
    if !out.status.success() {
        bail!(
            "fio {} failed ({}): {}",
            job.name,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let mut r = peers::parse_fio_json(&String::from_utf8_lossy(&out.stdout))?;
    r.target = label.to_owned();
    r.driver = "fio-ext4".into();
    r.case = job.name.to_owned();
    r.client_cpu_s = client.as_secs_f64();
    r.server_cpu_s = match (server_before, server_after) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
        _ => None,
    };
    Ok(r)
}

/// Runs the preset: sluice and nbdkit (and qemu-nbd if asked), `rounds`
/// interleaved, ratios to nbdkit.
pub fn filesystem(opts: &PresetOptions) -> Result<PresetReport> {
    let machine = Machine::probe();
    let duration = opts
        .duration
        .unwrap_or(Duration::from_secs(if opts.quick { 5 } else { 20 }));
    let size = opts
        .image_size
        .unwrap_or(if opts.quick { 1 << 30 } else { 4 << 30 });
    let mut notes = Vec::new();
    let t0 = Instant::now();
    let mut runs = MatrixRuns::default();
    let targets: Vec<PeerSpec> = if let Some(why) = missing_prerequisite() {
        let msg = format!("filesystem preset skipped: {why}");
        eprintln!("{msg}");
        notes.push(msg);
        Vec::new()
    } else {
        let names = peers::requested_servers(
            opts.targets.as_deref(),
            &["sluice", "nbdkit", "qemu-nbd"],
            &["sluice", "nbdkit"],
        );
        let (found, skipped) = peers::available_peers(&names, opts.sluice_bin.as_deref());
        for s in skipped {
            eprintln!("{s}");
            notes.push(s);
        }
        found
    };
    let image = if targets.is_empty() {
        None
    } else {
        Some(Image::prepare(
            opts.image.as_deref(),
            None,
            "filesystem",
            size,
        )?)
    };
    let jobs = jobs(opts.quick, duration);
    if let Some(image) = &image {
        notes.push(format!(
            "nbdfuse -> loop (direct I/O) -> ext4 (mkfs each time) over a {} MiB image at {}; fio psync O_DIRECT on files",
            size >> 20,
            image.path().display()
        ));
        run_rounds(opts, &targets, image.path(), &jobs, &mut runs);
    }
    runs.wall_s = t0.elapsed().as_secs_f64();
    let summaries = matrix::summarise(&runs.runs, "nbdkit");
    let report = PresetReport {
        preset: "filesystem".into(),
        command: crate::setup::command_line(),
        machine,
        loadavg_end: Machine::probe().loadavg,
        quick: opts.quick,
        rounds: opts.rounds,
        duration_s: duration.as_secs_f64(),
        image_bytes: size,
        notes,
        link: None,
        summaries,
        runs,
    };
    let title = format!(
        "filesystem ({} round(s), {:.0} s per job, wall {:.0} s)",
        report.rounds, report.duration_s, report.runs.wall_s
    );
    let failures: Vec<String> = report
        .runs
        .failures
        .iter()
        .map(|f| format!("round {} {} {}: {}", f.round, f.target, f.case, f.error))
        .collect();
    let epilogue =
        Epilogue::new("filesystem", title, &report.machine, &report.notes).failures(&failures);
    if report.summaries.is_empty() {
        epilogue.finish(opts, &report)?;
        return Ok(report);
    }
    let t = summary_table(&report.summaries);
    let charts = round_charts(&report, &targets, &jobs);
    let figure = Figure {
        title: "Filesystem over NBD (ext4 on nbdfuse + loop): each round".into(),
        columns: 2,
        charts,
    };
    epilogue
        .table("fio on ext4 over nbdfuse + loop (median of rounds)", t)
        .figure(figure)
        .finish(opts, &report)?;
    Ok(report)
}

/// The preset's measurements: `opts.rounds` rounds, each taking the
/// targets in a rotated order and running every job on a fresh ext4
/// stack over `image`; failures are recorded and the rest goes on.
fn run_rounds(
    opts: &PresetOptions,
    targets: &[PeerSpec],
    image: &Path,
    jobs: &[FsJob],
    runs: &mut MatrixRuns,
) {
    let n = targets.len();
    for round in 0..opts.rounds {
        for k in 0..n {
            let spec = &targets[(k + round as usize) % n];
            let stack = match Ext4Stack::build(Some(spec), image) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("round {round} {}: {e:#}", spec.label);
                    runs.failures.push(Failure {
                        round,
                        target: spec.label.clone(),
                        driver: "fio-ext4".into(),
                        case: String::new(),
                        error: format!("{e:#}"),
                    });
                    continue;
                }
            };
            for job in jobs {
                match run_job(&stack, job, &spec.label) {
                    Ok(r) => {
                        eprintln!(
                            "round {round} {:<10} {:<20} {:>9} IOPS {:>8} MiB/s  srv {} us/op",
                            spec.label,
                            job.name,
                            scaled(r.iops),
                            compact(r.mib_s),
                            r.server_us_per_op().map_or_else(|| "-".into(), compact)
                        );
                        runs.runs.push(Measured { round, result: r });
                    }
                    Err(e) => {
                        eprintln!("round {round} {} {}: {e:#}", spec.label, job.name);
                        runs.failures.push(Failure {
                            round,
                            target: spec.label.clone(),
                            driver: "fio-ext4".into(),
                            case: job.name.into(),
                            error: format!("{e:#}"),
                        });
                    }
                }
            }
            drop(stack);
        }
    }
}

/// The preset's table: each job's medians over rounds per target, and
/// the ratio to nbdkit.
fn summary_table(summaries: &[Summary]) -> Table {
    let mut t = Table::new([
        "job",
        "target",
        "IOPS",
        "min-max",
        "MiB/s",
        "p50 us",
        "p99 us",
        "srv us/op",
        "x nbdkit",
    ]);
    for s in summaries {
        t.row([
            s.case.clone(),
            s.target.clone(),
            scaled(s.iops.median),
            format!("{}-{}", scaled(s.iops.min), scaled(s.iops.max)),
            compact(s.mib_s.median),
            compact(s.p50_us),
            compact(s.p99_us),
            s.server_us_per_op.map_or_else(|| "-".into(), compact),
            s.ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
        ]);
    }
    t
}

/// One chart per job: IOPS (or MiB/s) of each target in each round.
fn round_charts(report: &PresetReport, targets: &[PeerSpec], jobs: &[FsJob]) -> Vec<Chart> {
    let axes = Axes {
        x_label: "round".into(),
        y_label: "IOPS or MiB/s".into(),
        x_axis: XAxis::Linear,
    };
    jobs.iter()
        .map(|job| {
            let lines = targets
                .iter()
                .map(|spec| {
                    let points = report
                        .runs
                        .runs
                        .iter()
                        .filter(|m| m.result.case == job.name && m.result.target == spec.label)
                        .map(|m| {
                            let y = if job.bandwidth {
                                m.result.mib_s
                            } else {
                                m.result.iops
                            };
                            (f64::from(m.round + 1), y)
                        })
                        .collect();
                    (spec.label.clone(), points)
                })
                .collect();
            let unit = if job.bandwidth { "MiB/s" } else { "IOPS" };
            axes.chart(format!("{} ({unit})", job.name), lines)
        })
        .collect()
}

/// Waits until the kernel has let go of loop device `dev` after
/// `losetup -d`: the detach is deferred while the device is still open
/// (a file system's last writes after its unmount), and the next user of
/// the image (or a check that nothing is left) must not find it attached.
/// Bounded: a device still attached after 10 s is left with a warning.
fn wait_detached(dev: &str) {
    let name = dev.trim_start_matches("/dev/");
    let backing = PathBuf::from(format!("/sys/block/{name}/loop/backing_file"));
    let end = Instant::now() + Duration::from_secs(10);
    while backing.exists() {
        if Instant::now() > end {
            eprintln!("warning: {dev} is still attached 10 s after losetup -d");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
