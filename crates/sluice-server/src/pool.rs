//! Threads that run device I/O which would block a connection thread
//! (cache misses, O_DIRECT, fsync), shared by all connections.

use std::sync::{Condvar, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A fixed set of I/O threads fed by one bounded queue.
#[derive(Debug)]
pub(crate) struct IoPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl IoPool {
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::bounded::<Job>(threads.max(1) * 64);
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx: Receiver<Job> = rx.clone();
                std::thread::Builder::new()
                    .name(format!("sluice-io-{i}"))
                    .spawn(move || {
                        for job in rx {
                            job();
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self {
            tx: Some(tx),
            threads,
        })
    }

    /// Queues a job, waiting while the queue is full (back-pressure).
    pub(crate) fn submit(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.tx {
            // Only fails if every worker is gone, which happens only after
            // `drop`; then the job is dropped and its in-flight count
            // released by its guard.
            let _ = tx.send(Box::new(job));
        }
    }
}

impl Drop for IoPool {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
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
    pub(crate) inflight: std::sync::Arc<InFlight>,
    pub(crate) bytes: u64,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.inflight.done(self.bytes);
    }
}
