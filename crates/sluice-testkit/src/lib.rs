//! Test-only building blocks shared by the crates' tests: devices that
//! make concurrency and completion order observable without timing,
//! ([`crash`]) the model of expected contents the crash-consistency tests
//! check against, ([`conformance`]) the behaviour suite every device
//! stack runs, ([`raw_nbd`]) an NBD client written from the spec,
//! ([`raw_obj`]) a raw client of the native object protocol,
//! ([`nbd_oracle`]) what an accepted NBD command promises, ([`programs`])
//! the outside programs tests may run, and with the
//! `server` feature (on by default) ([`test_server`]) an in-process
//! server and, with it or the `pki` feature, ([`pki`]) test
//! certificates, and with the `etcd` feature
//! (`etcd`, with the `etcd` feature) a real etcd cluster on loopback ports. A dev-dependency only; nothing
//! in production links it.

pub mod conformance;
pub mod crash;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod nbd_oracle;
#[cfg(feature = "pki")]
pub mod pki;
pub mod programs;
pub mod raw_nbd;
pub mod raw_obj;
#[cfg(feature = "server")]
pub mod test_server;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, MemDevice};

pub use sluice_types::error_chain;

/// A memory device whose reads at offsets listed in `gate_offsets` wait
/// until the test opens the gate, and which records how many reads run
/// at once. Declares itself always-blocking so the server hands every
/// request to its I/O pool.
#[derive(Debug)]
pub struct GatedDevice {
    inner: MemDevice,
    gate_offsets: Vec<u64>,
    open: Mutex<bool>,
    opened: Condvar,
    /// Reads running right now.
    pub running: AtomicUsize,
    /// Most reads that ever ran at once.
    pub max_running: AtomicUsize,
    /// Reads waiting at the gate right now.
    pub held: AtomicUsize,
    /// Reads finished.
    pub finished: AtomicUsize,
}

impl GatedDevice {
    /// A zeroed device of `size` bytes whose reads at `gate_offsets` wait
    /// for [`open_gate`](Self::open_gate) (at most 10 s).
    pub fn new(size: u64, gate_offsets: Vec<u64>) -> Self {
        Self {
            inner: MemDevice::new(size, false),
            gate_offsets,
            open: Mutex::new(false),
            opened: Condvar::new(),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        }
    }

    /// Waits until `what` holds of the device (its counters change as
    /// reads start, wait and finish); fails the test if that takes more
    /// than 10 s, which only bounds a hang.
    pub fn wait_until(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cond(self) {
            assert!(
                std::time::Instant::now() < deadline,
                "waited 10 s for {what}: {} running, {} held at the gate, {} finished",
                self.running.load(Ordering::SeqCst),
                self.held.load(Ordering::SeqCst),
                self.finished.load(Ordering::SeqCst),
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    /// Lets every gated read (present and future) proceed.
    pub fn open_gate(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }
}

impl sluice_storage::DeviceLayer for GatedDevice {
    fn inner(&self) -> &dyn BlockDevice {
        &self.inner
    }
    fn capability(&self) -> Capability {
        Capability {
            blocking: BlockingClass::Always,
            ..self.inner.capability()
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if self.gate_offsets.contains(&offset) {
            let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            self.held.fetch_add(1, Ordering::SeqCst);
            let _unused = self
                .opened
                .wait_timeout_while(open, Duration::from_secs(10), |o| !*o)
                .unwrap_or_else(|p| p.into_inner());
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        let r = self.inner.read_at(buf, offset);
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.finished.fetch_add(1, Ordering::SeqCst);
        r
    }
}
