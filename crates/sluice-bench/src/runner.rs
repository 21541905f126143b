//! Runs one workload against one endpoint and measures it.
//!
//! NBD with a connection per worker: each worker is one thread running
//! the [`Connection`] hot loop. It keeps `queue_depth` requests in flight,
//! and for every batch of completions one `receive` brings, it queues the
//! replacements and sends them together with the next receive (one write
//! per batch). Latency goes into the worker's own fixed-bound histogram;
//! histograms are merged at the end.
//!
//! Shared connection and local I/O: each worker runs `queue_depth`
//! threads doing blocking I/O (`Client::call_blocking`, or
//! `pread`/`pwrite` on the file), drawing operations from the worker's
//! generator, so "queue depth" means the same: that many requests of the
//! worker in flight at once.

use std::io::IsTerminal;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use sluice_client::{Client, ConnectOptions, Connection, NbdUri, Reply, Request};

use crate::cpu;
use crate::hist::{LatencyHistogram, LatencySummary};
use crate::target::SERVER_THREAD_PREFIX;
use crate::verify;
use crate::workload::{Handshake, Limit, OpKind, Workload};

mod worker;

use worker::{nbd_worker, sync_worker, Ctx};

/// Whose CPU counts as the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCpu {
    /// Unknown (a remote server).
    Unknown,
    /// The threads of this process named `sluice-*` (embedded server).
    OwnThreads,
    /// A server process.
    Pid(u32),
}

impl ServerCpu {
    fn sample(self) -> Option<Duration> {
        match self {
            Self::Unknown => None,
            Self::OwnThreads => Some(cpu::own_threads_cpu(SERVER_THREAD_PREFIX)),
            Self::Pid(pid) => cpu::process_cpu(pid),
        }
    }
}

/// A resolved place to send I/O.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// An NBD server.
    Nbd {
        /// Where.
        uri: NbdUri,
        /// Whose CPU is the server's.
        server_cpu: ServerCpu,
    },
    /// A local file or block device.
    Local {
        /// Its path.
        path: PathBuf,
    },
}

impl Endpoint {
    /// Size of the export or file.
    pub fn size(&self) -> Result<u64> {
        match self {
            Self::Nbd { uri, .. } => {
                let conn = connect(uri, Handshake::default())?;
                let size = conn.details().size;
                let _ = conn.disconnect();
                Ok(size)
            }
            Self::Local { path } => local_size(path),
        }
    }
}

/// How long a handshake may take before the run gives up (a server at
/// its connection limit may accept and then never answer).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs `connect` on a helper thread and gives up after [`CONNECT_TIMEOUT`].
fn with_timeout<T: Send + 'static>(
    uri: &NbdUri,
    connect: impl FnOnce() -> Result<T, sluice_client::ClientError> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("bench-connect".into())
        .spawn(move || {
            let _ = tx.send(connect());
        })
        .context("cannot start a connect thread")?;
    match rx.recv_timeout(CONNECT_TIMEOUT) {
        // The client's error names the server and what failed.
        Ok(r) => Ok(r?),
        Err(_) => bail!(
            "no handshake from {uri} within {CONNECT_TIMEOUT:?} (is the server at its connection limit?)"
        ),
    }
}

/// What to ask for in the handshake.
pub fn connect_options(h: Handshake) -> ConnectOptions {
    ConnectOptions {
        structured_replies: h != Handshake::Simple,
        extended_headers: h == Handshake::Extended,
        base_allocation: true,
        ..ConnectOptions::default()
    }
}

/// Connects a pipelined connection, with a timeout.
pub fn connect(uri: &NbdUri, h: Handshake) -> Result<Connection> {
    let u = uri.clone();
    with_timeout(uri, move || Connection::connect(&u, &connect_options(h)))
}

/// Size of a regular file or block device.
pub fn local_size(path: &Path) -> Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    f.seek(SeekFrom::End(0))
        .with_context(|| format!("cannot find the size of {}", path.display()))
}

/// How a run behaves apart from its workload.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Show a progress bar (only ever drawn on a terminal).
    pub progress: bool,
    /// Write the region before the timed run (always done when verifying
    /// a workload that reads).
    pub prefill: bool,
    /// Label of the target in results.
    pub target_label: String,
}

/// The measurements of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Which target ("sluice", "nbdkit", "local", a URI).
    pub target: String,
    /// Which client drove it ("own", "fio").
    pub driver: String,
    /// Case name.
    pub case: String,
    /// The workload, when run by the own driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    /// Operations completed.
    pub ops: u64,
    /// Of which reads.
    pub reads: u64,
    /// Of which writes.
    pub writes: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall time of the timed part.
    pub elapsed_s: f64,
    /// Operations per second.
    pub iops: f64,
    /// Payload MiB per second.
    pub mib_s: f64,
    /// Latency of all operations.
    pub latency: LatencySummary,
    /// Latency of reads.
    pub read_latency: LatencySummary,
    /// Latency of writes.
    pub write_latency: LatencySummary,
    /// CPU seconds the client used.
    pub client_cpu_s: f64,
    /// CPU seconds the server used, when known.
    pub server_cpu_s: Option<f64>,
    /// Reads whose data was checked.
    pub verified_reads: u64,
}

impl RunResult {
    /// Client CPU microseconds per operation.
    pub fn client_us_per_op(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.client_cpu_s * 1e6 / self.ops as f64
        }
    }

    /// Server CPU microseconds per operation, when known.
    pub fn server_us_per_op(&self) -> Option<f64> {
        let s = self.server_cpu_s?;
        (self.ops > 0).then(|| s * 1e6 / self.ops as f64)
    }
}

#[derive(Debug, Default)]
struct WorkerStats {
    reads: u64,
    writes: u64,
    bytes: u64,
    all: LatencyHistogram,
    read: LatencyHistogram,
    write: LatencyHistogram,
    cpu: Duration,
    verified: u64,
    /// When the worker's last operation completed.
    finished: Option<Instant>,
}

impl WorkerStats {
    fn record(&mut self, kind: OpKind, bytes: u64, ns: u64) {
        self.all.record_ns(ns);
        self.bytes += bytes;
        match kind {
            OpKind::Read => {
                self.reads += 1;
                self.read.record_ns(ns);
            }
            OpKind::Write => {
                self.writes += 1;
                self.write.record_ns(ns);
            }
        }
    }

    fn merge(&mut self, o: &Self) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.bytes += o.bytes;
        self.all.merge(&o.all);
        self.read.merge(&o.read);
        self.write.merge(&o.write);
        self.cpu += o.cpu;
        self.verified += o.verified;
        self.finished = self.finished.max(o.finished);
    }
}

/// What each worker may still do: a deadline or an op budget.
#[derive(Debug)]
struct Stop<'a> {
    deadline: Option<Instant>,
    abort: &'a AtomicBool,
}

impl Stop<'_> {
    fn now_or_never(&self) -> bool {
        self.abort.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// Operations budget of worker `index` of `workers`, if the run is bounded
/// by operations or bytes.
fn worker_budget(limit: Limit, block_size: u32, workers: u32, index: u32) -> Option<u64> {
    let total = match limit {
        Limit::Time(_) => return None,
        Limit::Ops(n) => n,
        Limit::Bytes(b) => b.div_ceil(u64::from(block_size.max(1))),
    };
    let w = u64::from(workers.max(1));
    let i = u64::from(index);
    Some(total / w + u64::from(i < total % w))
}

/// A byte that makes unverified write payloads non-zero.
const FILLER: u8 = 0xa5;

/// Writes the region once so reads find data (the verification pattern
/// when `verify`).
pub fn prefill(endpoint: &Endpoint, region: (u64, u64), seed: u64, verify: bool) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let (start, len) = region;
    let end = start + len;
    let mut buf = vec![FILLER; CHUNK as usize];
    match endpoint {
        Endpoint::Local { path } => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .with_context(|| format!("cannot open {} for writing", path.display()))?;
            let mut off = start;
            while off < end {
                let n = CHUNK.min(end - off) as usize;
                if verify {
                    verify::fill(&mut buf[..n], off, seed);
                }
                f.write_all_at(&buf[..n], off)
                    .with_context(|| format!("prefill of {} at {off} failed", path.display()))?;
                off += n as u64;
            }
            f.sync_data().ok();
        }
        Endpoint::Nbd { uri, .. } => {
            let mut conn = connect(uri, Handshake::default())?;
            let mut off = start;
            let mut failure = None;
            while off < end || conn.in_flight() > 0 {
                while off < end && conn.in_flight() < 8 {
                    let n = CHUNK.min(end - off) as usize;
                    if verify {
                        verify::fill(&mut buf[..n], off, seed);
                    }
                    conn.queue(Request::Write {
                        offset: off,
                        data: &buf[..n],
                        fua: false,
                    })
                    .with_context(|| format!("prefill of {uri} at {off}"))?;
                    off += n as u64;
                }
                conn.receive(|c| {
                    if let Err(e) = c.result {
                        failure.get_or_insert(e);
                    }
                })
                .with_context(|| format!("prefill of {uri}"))?;
                if let Some(e) = failure.take() {
                    return Err(anyhow!(e).context(format!("prefill of {uri} failed")));
                }
            }
            let _ = conn.disconnect();
        }
    }
    Ok(())
}

/// Runs `workload` against `endpoint`.
pub fn run_workload(
    endpoint: &Endpoint,
    workload: &Workload,
    opts: &RunOptions,
) -> Result<RunResult> {
    let size = endpoint.size()?;
    let region = workload
        .region(size)
        .map_err(|e| anyhow!("workload {}: {e}", workload.label()))?;
    if workload.block_size > 32 << 20 {
        bail!(
            "block size {} exceeds the 32 MiB NBD maximum",
            workload.block_size
        );
    }
    if opts.prefill || (workload.verify && workload.reads()) {
        prefill(endpoint, region, workload.seed, workload.verify)?;
    }
    let progress = progress_bar(opts.progress, workload);
    let counter = AtomicU64::new(0);
    let abort = AtomicBool::new(false);
    let server_cpu = match endpoint {
        Endpoint::Nbd { server_cpu, .. } => *server_cpu,
        Endpoint::Local { .. } => ServerCpu::Unknown,
    };
    let workers = workload.workers.max(1);
    let barrier = Barrier::new(workers as usize + 1);
    let ctx = Ctx {
        workload,
        region,
        counter: &counter,
        abort: &abort,
        barrier: &barrier,
    };
    let local_file = match endpoint {
        Endpoint::Local { path } => Some(
            std::fs::OpenOptions::new()
                .read(true)
                .write(workload.writes())
                .open(path)
                .with_context(|| format!("cannot open {}", path.display()))?,
        ),
        Endpoint::Nbd { .. } => None,
    };
    let (stats, elapsed, server_cpu_s) = std::thread::scope(|s| -> Result<_> {
        let mut handles = Vec::new();
        // Connections stay open until the server's CPU has been sampled.
        let mut shared_client: Option<Client> = None;
        match endpoint {
            Endpoint::Nbd { uri, .. } if !workload.shared_connection => {
                // Connect everyone first, so no worker fails while others
                // wait at the barrier.
                let mut conns = Vec::new();
                for i in 0..workers {
                    conns.push(
                        connect(uri, workload.handshake).with_context(|| format!("worker {i}"))?,
                    );
                }
                for (i, conn) in conns.into_iter().enumerate() {
                    let ctx = &ctx;
                    handles.push(
                        std::thread::Builder::new()
                            .name(format!("bench-w{i}"))
                            .spawn_scoped(s, move || nbd_worker(ctx, conn, i as u32))
                            .context("cannot start a worker thread")?,
                    );
                }
            }
            Endpoint::Nbd { uri, .. } => {
                let u = uri.clone();
                let h = workload.handshake;
                let client = with_timeout(uri, move || Client::connect(&u, &connect_options(h)))?;
                shared_client = Some(client.clone());
                for i in 0..workers {
                    let ctx = &ctx;
                    let client = client.clone();
                    let op = move |kind: OpKind, off: u64, buf: &mut [u8]| {
                        shared_client_op(&client, kind, off, buf)
                    };
                    handles.push(
                        std::thread::Builder::new()
                            .name(format!("bench-w{i}"))
                            .spawn_scoped(s, move || sync_worker(ctx, i, &op).map(|st| (st, None)))
                            .context("cannot start a worker thread")?,
                    );
                }
            }
            Endpoint::Local { .. } => {
                let file = local_file
                    .as_ref()
                    .ok_or_else(|| anyhow!("local file not open"))?;
                for i in 0..workers {
                    let ctx = &ctx;
                    let op = move |kind: OpKind, off: u64, buf: &mut [u8]| -> Result<()> {
                        match kind {
                            OpKind::Read => file.read_exact_at(buf, off)?,
                            OpKind::Write => file.write_all_at(buf, off)?,
                        }
                        Ok(())
                    };
                    handles.push(
                        std::thread::Builder::new()
                            .name(format!("bench-w{i}"))
                            .spawn_scoped(s, move || sync_worker(ctx, i, &op).map(|st| (st, None)))
                            .context("cannot start a worker thread")?,
                    );
                }
            }
        }
        barrier.wait();
        let started = Instant::now();
        let server_before = server_cpu.sample();
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
            progress.set_position(match workload.limit {
                Limit::Time(_) => started.elapsed().as_millis() as u64,
                _ => counter.load(Ordering::Relaxed),
            });
        }
        let polled = started.elapsed();
        let server_after = server_cpu.sample();
        drop(shared_client);
        let total = join_workers(handles)?;
        // The workers' own clocks, not the polling loop's.
        let elapsed = total
            .finished
            .map_or(polled, |f| f.saturating_duration_since(started));
        let server_cpu_s = match (server_before, server_after) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a).as_secs_f64()),
            _ => None,
        };
        Ok((total, elapsed, server_cpu_s))
    })?;
    progress.finish_and_clear();
    Ok(run_result(opts, workload, &stats, elapsed, server_cpu_s))
}

/// The result of a run of `workload` from the workers' statistics, its
/// duration and the server's CPU time, if known.
fn run_result(
    opts: &RunOptions,
    workload: &Workload,
    stats: &WorkerStats,
    elapsed: Duration,
    server_cpu_s: Option<f64>,
) -> RunResult {
    let ops = stats.reads + stats.writes;
    let secs = elapsed.as_secs_f64().max(1e-9);
    RunResult {
        target: opts.target_label.clone(),
        driver: "own".into(),
        case: workload.label(),
        workload: Some(workload.clone()),
        ops,
        reads: stats.reads,
        writes: stats.writes,
        bytes: stats.bytes,
        elapsed_s: secs,
        iops: ops as f64 / secs,
        mib_s: stats.bytes as f64 / secs / (1 << 20) as f64,
        latency: stats.all.summary(),
        read_latency: stats.read.summary(),
        write_latency: stats.write.summary(),
        client_cpu_s: stats.cpu.as_secs_f64(),
        server_cpu_s,
        verified_reads: stats.verified,
    }
}

/// One read or write of a worker sharing the run's one client.
fn shared_client_op(client: &Client, kind: OpKind, off: u64, buf: &mut [u8]) -> Result<()> {
    match kind {
        OpKind::Read => match client.call_blocking(Request::Read {
            offset: off,
            length: buf.len() as u32,
        })? {
            Reply::Data(d) if d.len() == buf.len() => {
                buf.copy_from_slice(&d);
                Ok(())
            }
            other => bail!("unexpected reply to a read: {other:?}"),
        },
        OpKind::Write => {
            client.call_blocking(Request::Write {
                offset: off,
                data: buf,
                fua: false,
            })?;
            Ok(())
        }
    }
}

/// A running worker: what it measured and, for an NBD worker with its
/// own connection, that connection.
type WorkerHandle<'scope> =
    std::thread::ScopedJoinHandle<'scope, Result<(WorkerStats, Option<Connection>)>>;

/// Waits for every worker and adds up their statistics (disconnecting
/// the connections they hand back); the first worker's failure, if any,
/// fails the run.
fn join_workers(handles: Vec<WorkerHandle<'_>>) -> Result<WorkerStats> {
    let mut total = WorkerStats::default();
    let mut first_error = None;
    for (i, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok((st, conn))) => {
                total.merge(&st);
                if let Some(c) = conn {
                    let _ = c.disconnect();
                }
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e.context(format!("worker {i}")));
            }
            Err(_) => {
                first_error.get_or_insert(anyhow!("worker {i} panicked"));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(total),
    }
}

fn progress_bar(show: bool, workload: &Workload) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (len, unit) = match workload.limit {
        Limit::Time(d) => (d.as_millis() as u64, "ms"),
        Limit::Ops(n) => (n, "ops"),
        Limit::Bytes(b) => (b.div_ceil(u64::from(workload.block_size.max(1))), "ops"),
    };
    let bar = ProgressBar::new(len.max(1));
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{prefix:>24}} [{{bar:30}}] {{pos}}/{{len}} {unit}"
    )) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(workload.label());
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_split_exactly() {
        let b: Vec<u64> = (0..3)
            .map(|i| worker_budget(Limit::Ops(200), 4096, 3, i).unwrap())
            .collect();
        assert_eq!(b, [67, 67, 66]);
        assert_eq!(
            worker_budget(Limit::Bytes(10 * 4096 + 1), 4096, 1, 0),
            Some(11)
        );
        assert_eq!(
            worker_budget(Limit::Time(Duration::from_secs(1)), 4096, 1, 0),
            None
        );
    }
}
