//! Threads that run device I/O which would block a connection thread
//! (cache misses, O_DIRECT, fsync), shared by all connections.
//!
//! A worker also sends the reply of the request it ran, and that send
//! can block for as long as the send timeout when the client does not
//! read. So that such clients cannot take every worker away from the
//! others, a worker marks the send ([`SendTracker::sending`]); while jobs wait
//! and no worker is free, the pool starts a spare worker for each one
//! away in a send, so `threads` workers are always available for device
//! I/O. Spares end after a second without work. Senders number at most
//! one per connection (the sink's sender role), so spares do too. The
//! test is a snapshot: a worker preempted between two jobs while another
//! is in a short send can also start a spare, which then ends unused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tracing::{debug, warn};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long a spare worker waits for a job before it ends.
const SPARE_IDLE: Duration = Duration::from_secs(1);

/// What the workers share.
#[derive(Debug)]
struct Workers {
    rx: Receiver<Job>,
    /// Workers for device I/O (the `--io-threads` setting).
    base: usize,
    /// Workers alive, spares included.
    alive: AtomicUsize,
    /// Workers waiting for a job.
    idle: AtomicUsize,
    /// Workers inside a reply send.
    sending: AtomicUsize,
    /// Every worker started, to join on drop (finished spares pruned).
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl Workers {
    fn spawn(self: &Arc<Self>, spare: bool) -> std::io::Result<()> {
        let workers = Arc::clone(self);
        let id = self.alive.fetch_add(1, Ordering::AcqRel);
        let name = if spare {
            format!("sluice-io-spare-{id}")
        } else {
            format!("sluice-io-{id}")
        };
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || workers.work(spare));
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        match spawned {
            Ok(h) => {
                handles.retain(|h| !h.is_finished());
                handles.push(h);
                Ok(())
            }
            Err(e) => {
                self.alive.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    fn work(&self, spare: bool) {
        loop {
            self.idle.fetch_add(1, Ordering::AcqRel);
            let next = if spare {
                self.rx.recv_timeout(SPARE_IDLE)
            } else {
                self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            };
            self.idle.fetch_sub(1, Ordering::AcqRel);
            match next {
                Ok(job) => job(),
                Err(RecvTimeoutError::Timeout) => {
                    self.alive.fetch_sub(1, Ordering::AcqRel);
                    return;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// Starts a spare if jobs wait, no worker is free and fewer than
    /// `base` workers are outside a send.
    fn top_up(self: &Arc<Self>) {
        // The queue is looked at again after the idle count: a worker
        // lowers that count only once it has taken a job, so a job still
        // queued then is one that no free worker is about to take.
        if self.rx.is_empty() || self.idle.load(Ordering::Acquire) > 0 || self.rx.is_empty() {
            return;
        }
        let sending = self.sending.load(Ordering::Acquire);
        if self.alive.load(Ordering::Acquire) >= self.base + sending {
            return;
        }
        debug!(
            sending,
            "I/O workers are blocked sending replies; starting a spare"
        );
        if let Err(e) = self.spawn(true) {
            warn!(error = %e, "cannot start a spare I/O worker");
        }
    }
}

/// A set of I/O threads fed by one bounded queue (see the module docs).
#[derive(Debug)]
pub(crate) struct IoPool {
    tx: Option<Sender<Job>>,
    workers: Arc<Workers>,
}

impl IoPool {
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let base = threads.max(1);
        let (tx, rx) = crossbeam_channel::bounded::<Job>(base * 64);
        let workers = Arc::new(Workers {
            rx,
            base,
            alive: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
            sending: AtomicUsize::new(0),
            handles: Mutex::new(Vec::with_capacity(base)),
        });
        for _ in 0..base {
            workers.spawn(false)?;
        }
        Ok(Self {
            tx: Some(tx),
            workers,
        })
    }

    /// Queues a job, waiting while the queue is full (back-pressure).
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.tx {
            // Only fails if every worker is gone, which happens only after
            // `drop`; then the job is dropped and its in-flight count
            // released by its guard.
            let _ = tx.send(Box::new(job));
            if self.workers.sending.load(Ordering::Acquire) > 0 {
                self.workers.top_up();
            }
        }
    }

    /// What a job takes along to mark its reply send. It does not keep
    /// the pool alive: a job holding the last `Arc<IoPool>` would drop
    /// the pool, and join its own thread, on a worker.
    pub(crate) fn send_tracker(&self) -> SendTracker {
        SendTracker {
            workers: Arc::clone(&self.workers),
        }
    }

    /// Workers alive now, spares included.
    #[cfg(test)]
    fn alive(&self) -> usize {
        self.workers.alive.load(Ordering::Acquire)
    }
}

/// Lets a job mark its reply send (see [`IoPool::send_tracker`]).
#[derive(Debug, Clone)]
pub(crate) struct SendTracker {
    workers: Arc<Workers>,
}

impl SendTracker {
    /// Marks the calling worker as sending a reply (which may block on
    /// the client) until the returned guard is dropped.
    pub(crate) fn sending(&self) -> SendingGuard {
        self.workers.sending.fetch_add(1, Ordering::AcqRel);
        self.workers.top_up();
        SendingGuard {
            workers: Arc::clone(&self.workers),
        }
    }
}

/// A worker's reply send in progress (see [`SendTracker::sending`]).
#[derive(Debug)]
pub(crate) struct SendingGuard {
    workers: Arc<Workers>,
}

impl Drop for SendingGuard {
    fn drop(&mut self) {
        self.workers.sending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.tx.take();
        let handles = std::mem::take(
            &mut *self
                .workers
                .handles
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for t in handles {
            let _ = t.join();
        }
    }
}

/// Requests of one connection that are running on the pool.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    state: Mutex<(usize, u64)>,
    changed: Condvar,
}

impl InFlight {
    pub(crate) fn add(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        s.1 += bytes;
    }

    /// Adds a request of `bytes` if fewer than `max_count` requests and at
    /// most `max_bytes` bytes are in flight; returns whether it did.
    pub(crate) fn try_add(&self, bytes: u64, max_count: usize, max_bytes: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.0 >= max_count || (s.0 > 0 && s.1 > max_bytes) {
            return false;
        }
        s.0 += 1;
        s.1 += bytes;
        true
    }

    pub(crate) fn done(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 -= 1;
        s.1 -= bytes;
        self.changed.notify_all();
    }

    /// Waits until fewer than `max_count` requests and at most `max_bytes`
    /// bytes are in flight.
    pub(crate) fn wait_below(&self, max_count: usize, max_bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.0 >= max_count || (s.0 > 0 && s.1 > max_bytes) {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether nothing is in flight (no request running on the pool, no
    /// reply of one waiting to be sent).
    pub(crate) fn is_idle(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0 == 0
    }

    /// Waits until nothing is in flight.
    pub(crate) fn wait_idle(&self) {
        self.wait_below(1, 0);
    }
}

/// Releases an in-flight slot when dropped, even if the job never ran.
/// It travels with the reply: a reply queued in the `ReplySink` keeps its
/// slot until it is sent.
#[derive(Debug)]
pub(crate) struct InFlightGuard {
    pub(crate) inflight: Arc<InFlight>,
    pub(crate) bytes: u64,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.inflight.done(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn workers_blocked_in_sends_get_spares_so_other_jobs_run() {
        let pool = Arc::new(IoPool::new(2).unwrap());
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(Mutex::new(release_rx));
        let (started_tx, started_rx) = mpsc::channel::<()>();
        // Both workers end up "sending" to clients that do not read.
        for _ in 0..2 {
            let (sends, rx, started) = (
                pool.send_tracker(),
                Arc::clone(&release_rx),
                started_tx.clone(),
            );
            pool.submit(move || {
                let _sending = sends.sending();
                started.send(()).unwrap();
                let _ = rx.lock().unwrap().recv();
            });
        }
        started_rx.recv().unwrap();
        started_rx.recv().unwrap();
        // Other connections' jobs still run, on spares.
        let (done_tx, done_rx) = mpsc::channel::<u32>();
        for i in 0..4 {
            let done = done_tx.clone();
            pool.submit(move || done.send(i).unwrap());
        }
        let mut got: Vec<u32> = (0..4)
            .map(|_| {
                done_rx
                    .recv_timeout(Duration::from_secs(5))
                    .expect("job ran")
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, [0, 1, 2, 3]);
        assert!(pool.alive() <= 4, "{} workers for 2 senders", pool.alive());
        // The senders finish; the spares end after a second without work.
        release_tx.send(()).unwrap();
        release_tx.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while pool.alive() > 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(pool.alive(), 2, "spares ended");
    }

    #[test]
    fn busy_workers_outside_sends_start_no_spares() {
        // Device I/O keeps both workers busy and jobs queue up: that is
        // the pool's limit working, not a reason for more threads.
        let pool = IoPool::new(2).unwrap();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (done_tx, done_rx) = mpsc::channel::<()>();
        for _ in 0..10 {
            let (gate, done) = (Arc::clone(&gate), done_tx.clone());
            pool.submit(move || {
                let (open, opened) = &*gate;
                let mut o = open.lock().unwrap();
                while !*o {
                    o = opened.wait(o).unwrap();
                }
                done.send(()).unwrap();
            });
        }
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(pool.alive(), 2);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        for _ in 0..10 {
            done_rx
                .recv_timeout(Duration::from_secs(5))
                .expect("job ran");
        }
        assert_eq!(pool.alive(), 2);
    }
}
