//! Where the log goes: standard error, written by a background thread so
//! that no serving thread ever waits for (or fails on) the log's reader.
//!
//! A reader that stops reading fills the pipe: lines then wait in a
//! bounded queue and, once it is full, are dropped and counted. A reader
//! that goes away (a closed pipe, `EPIPE`) makes writes fail: the failed
//! lines are counted and dropped too. Both counts are in the metrics
//! (`sluice_log_lines_dropped_total`, `sluice_log_write_errors_total`);
//! serving goes on either way.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlocking, NonBlockingBuilder, WorkerGuard};

/// Lines held for the log's writer before new ones are dropped.
const QUEUED_LINES: usize = 64 * 1024;

/// Log writes that failed.
static WRITE_ERRORS: AtomicU64 = AtomicU64::new(0);
/// The queue's count of lines dropped while it was full.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Standard error that never fails: an error is counted and the line
/// dropped.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountingStderr;

impl Write for CountingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if io::stderr().lock().write_all(buf).is_err() {
            WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if io::stderr().lock().flush().is_err() {
            WRITE_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// A writer for the log subscriber that hands each line to a background
/// thread writing [`CountingStderr`]. Keep the guard until the process
/// ends: dropping it writes out what is queued (waiting at most a second).
pub fn stderr_writer() -> (NonBlocking, WorkerGuard) {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("sluice-log")
        .finish(CountingStderr);
    let _ = DROPPED.set(writer.error_counter());
    (writer, guard)
}

/// Log writes that failed so far.
pub(crate) fn write_errors() -> u64 {
    WRITE_ERRORS.load(Ordering::Relaxed)
}

/// Log lines dropped so far because the queue was full.
pub(crate) fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}
