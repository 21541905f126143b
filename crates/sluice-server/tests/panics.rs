#![allow(clippy::unwrap_used)]
//! A panic while serving one connection (a bug, injected here by a device
//! whose read panics) closes that connection, and only that one: its
//! client sees the end instead of waiting for a reply forever, other
//! connections go on, the panic is counted, and the server still stops
//! when asked.

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_server::PipelineMode;
use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, MemDevice};
use sluice_testkit::raw_nbd::*;
use sluice_testkit::test_server::TestServer;

/// Where the injected panic is.
const PANIC_AT: u64 = 64 << 10;

/// Reads at [`PANIC_AT`] panic. `blocking` decides where reads run: on
/// the connection thread (`Never`) or on the I/O pool (`Always`).
#[derive(Debug)]
struct PanicsOnRead {
    inner: MemDevice,
    blocking: BlockingClass,
}

impl sluice_storage::DeviceLayer for PanicsOnRead {
    fn inner(&self) -> &dyn BlockDevice {
        &self.inner
    }
    fn capability(&self) -> Capability {
        Capability {
            blocking: self.blocking,
            ..self.inner.capability()
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        assert_ne!(offset, PANIC_AT, "injected panic: a read at {PANIC_AT}");
        self.inner.read_at(buf, offset)
    }
}

fn a_panic_closes_its_connection_only(blocking: BlockingClass) {
    let device = Arc::new(PanicsOnRead {
        inner: MemDevice::new(1 << 20, false),
        blocking,
    });
    let server = TestServer::builder()
        .export("default", device)
        .config(|c| c.pipeline = PipelineMode::Flexible)
        .metrics()
        .start();
    let mut other = RawClient::connect(server.addr);
    let mut victim = RawClient::connect(server.addr);
    victim
        .s
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    victim.send(CMD_READ, 1, PANIC_AT, 4096, &[]);
    let mut byte = [0u8; 1];
    match victim.s.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        got => panic!("the connection whose request panicked is still open: {got:?}"),
    }
    other.send(CMD_READ, 2, 0, 4096, &[]);
    let (cookie, err, data) = other.reply();
    assert_eq!((cookie, err), (2, 0), "another connection goes on");
    assert_eq!(data, vec![0; 4096]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = server.scrape();
        if text.lines().any(|l| l == "sluice_panics_total 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the panic is not counted:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server.stop().unwrap();
}

#[test]
fn a_panic_on_the_connection_thread_closes_that_connection_only() {
    a_panic_closes_its_connection_only(BlockingClass::Never);
}

#[test]
fn a_panic_on_the_io_pool_closes_that_connection_only() {
    a_panic_closes_its_connection_only(BlockingClass::Always);
}
