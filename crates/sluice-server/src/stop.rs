//! The shutdown signal every blocking wait in the server also watches, so
//! SIGTERM interrupts idle connections without cutting a request whose
//! bytes are still arriving.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::{poll, EventfdFlags, PollFd, PollFlags, Timespec};

/// Set once; its eventfd stays readable from then on, waking every poll.
#[derive(Debug)]
pub(crate) struct StopSignal {
    stopping: AtomicBool,
    wake: OwnedFd,
}

/// What a wait ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// The socket has data (or an error or hang-up to report).
    Readable,
    /// Shutdown was requested.
    Stop,
    /// The timeout passed.
    TimedOut,
}

impl StopSignal {
    pub(crate) fn new() -> io::Result<Self> {
        let wake = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Self {
            stopping: AtomicBool::new(false),
            wake,
        })
    }

    /// Requests shutdown; returns false if it was already requested.
    pub(crate) fn trigger(&self) -> bool {
        let first = !self.stopping.swap(true, Ordering::SeqCst);
        // Never read back, so the eventfd stays readable.
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
        first
    }

    pub(crate) fn is_set(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
}

/// Waits until `sock` is readable, `stop` (if given) is triggered, or
/// `timeout` passes.
pub(crate) fn wait_readable(
    sock: BorrowedFd<'_>,
    stop: Option<&StopSignal>,
    timeout: Option<Duration>,
) -> io::Result<Readiness> {
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: t.subsec_nanos().into(),
    });
    let stop_fd = stop.map(StopSignal::fd);
    loop {
        // On the stack: this runs once per batch of requests.
        let mut fds = [
            PollFd::new(&sock, PollFlags::IN),
            PollFd::new(stop_fd.as_ref().unwrap_or(&sock), PollFlags::IN),
        ];
        let watched = if stop_fd.is_some() { 2 } else { 1 };
        match poll(&mut fds[..watched], ts.as_ref()) {
            Ok(0) => return Ok(Readiness::TimedOut),
            Ok(_) => {
                if !fds[0].revents().is_empty() {
                    return Ok(Readiness::Readable);
                }
                return Ok(Readiness::Stop);
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
