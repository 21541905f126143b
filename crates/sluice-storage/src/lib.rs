//! Block devices for sluice.
//!
//! [`BlockDevice`] is the one trait every volume implements (file, memory,
//! and later cache, RAID and remote devices as wrappers). A device
//! declares what it can do in a [`Capability`], which the server maps onto
//! NBD transmission flags, and how it behaves under concurrency and
//! blocking, which the server uses to choose where to run each request.
//!
//! Callers (the server core) check ranges before calling; devices still
//! return [`DeviceError::OutOfRange`] rather than panic if a bug slips by.

mod cache;
mod error;
mod fault;
mod file;
mod mapped;
mod mem;
mod power_loss;

pub use cache::{CacheConfig, CacheDevice, CacheMode};
pub use error::{DeviceError, IoOp};
pub use fault::{
    FaultInjectionDevice, FaultOps, FaultRule, FaultRuleError, FaultTrigger, InjectedErrno,
};
pub use file::{FileDevice, FileOptions, OpenError};
pub use mapped::MappedBytes;
pub use mem::MemDevice;
pub use power_loss::{PowerLossConfig, PowerLossDevice, PowerLossReport};

/// How long a device's calls may block the calling thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockingClass {
    /// Never waits on I/O (memory, tmpfs): run inline.
    Never,
    /// Usually served from the page cache; [`BlockDevice::read_at_nowait`]
    /// tells when a read would wait.
    PageCache,
    /// Every call may wait on a device (O_DIRECT, remote): hand off.
    Always,
}

/// What a device supports. Maps one-to-one onto NBD transmission flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability {
    /// Writes, trims and zeroing fail with [`DeviceError::ReadOnly`].
    pub read_only: bool,
    /// `flush` makes completed writes durable.
    pub flush: bool,
    /// `write_at(.., fua=true)` is durable on return.
    pub fua: bool,
    /// `trim` may free space.
    pub trim: bool,
    /// `write_zeroes` is efficient (not a loop of writes).
    pub write_zeroes: bool,
    /// `write_zeroes(fast=true)` can succeed quickly.
    pub fast_zero: bool,
    /// `cache` prefetches.
    pub cache: bool,
    /// `extents` reports real allocation (not just "all data").
    pub extents: bool,
    /// All users of this device see one consistent state, so flush on one
    /// connection covers writes on all (NBD_FLAG_CAN_MULTI_CONN).
    pub multi_conn: bool,
    /// Backed by rotating media.
    pub rotational: bool,
    /// Smallest aligned unit of I/O the device accepts (1 = any).
    pub min_block: u32,
    /// Blocking behaviour of calls.
    pub blocking: BlockingClass,
}

/// Zeroing behaviour requested from [`BlockDevice::write_zeroes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZeroMode {
    /// The device may deallocate the range (NBD: NO_HOLE not set).
    pub may_trim: bool,
    /// Fail with [`DeviceError::Unsupported`] unless it can be done
    /// faster than writing zeroes (NBD: FAST_ZERO).
    pub fast: bool,
    /// Durable on return (FUA).
    pub fua: bool,
}

/// Allocation state of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes.
    pub length: u64,
    /// Not allocated in the backing store.
    pub hole: bool,
    /// Known to read as zeroes.
    pub zero: bool,
}

/// A volume of bytes that can be read and written at any offset below
/// [`BlockDevice::size`]. Implementations must allow calls from many
/// threads at once (`Send + Sync`); none may hold a lock across device
/// I/O that would serialize independent requests.
pub trait BlockDevice: Send + Sync + std::fmt::Debug {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// What the device supports.
    fn capability(&self) -> Capability;
    /// Fills `buf` from `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError>;
    /// Like [`read_at`](Self::read_at) but returns `Ok(false)` without
    /// waiting if the data is not immediately available (then `buf`
    /// holds garbage). Devices that cannot tell just read.
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        self.read_at(buf, offset).map(|()| true)
    }
    /// Writes `buf` at `offset`; durable on return if `fua`.
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError>;
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Discards a range (a hint: contents afterwards are unspecified).
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError>;
    /// Makes a range read as zeroes.
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError>;
    /// Allocation of `[offset, offset+length)` as consecutive extents,
    /// at most `max_extents` of them (at least one); the last may end
    /// before the range does.
    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError>;
    /// Hints that a range will be read soon.
    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError>;
    /// Device-specific counters and gauges for the metrics endpoint
    /// (cache hits, dirty bytes, ...). Most devices have none.
    fn metrics(&self) -> Vec<DeviceMetric> {
        Vec::new()
    }
    /// The device's bytes as a shared mapping the kernel can send from
    /// directly (a buffered file), if it has one. Wrappers that change
    /// what reads return (caches, simulations) must not pass it on.
    fn mapped(&self) -> Option<&MappedBytes> {
        None
    }
    /// Whether [`write_from_pipe`](Self::write_from_pipe) works: the
    /// device is a buffered file the kernel can splice into. Wrappers that
    /// change what writes do (caches, simulations) must not pass it on.
    fn splices_writes(&self) -> bool {
        false
    }
    /// Writes exactly `len` bytes taken from the pipe `pipe` at `offset`,
    /// like [`write_at`](Self::write_at) without FUA; the kernel moves
    /// them from the pipe into the page cache, so a payload spliced from
    /// a socket is copied once instead of twice. On an error, what is
    /// left in the pipe is the caller's to drain. Only called when
    /// [`splices_writes`](Self::splices_writes) is true.
    fn write_from_pipe(
        &self,
        pipe: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Result<(), DeviceError> {
        let _ = pipe;
        Err(DeviceError::Unsupported {
            device: format!("device at offset {offset} ({len} bytes)"),
            op: IoOp::Write,
            reason: "writes from a pipe",
        })
    }
}

/// Whether a [`DeviceMetric`] only grows or goes up and down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic total.
    Counter,
    /// Current value.
    Gauge,
}

/// One named value a device reports.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMetric {
    /// Metric name without the `sluice_` prefix, e.g. `cache_read_hits_total`.
    pub name: &'static str,
    /// One-line description.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// Current value.
    pub value: f64,
}

/// Checks that `[offset, offset+len)` lies within `size`.
pub(crate) fn check_range(
    device: &str,
    op: IoOp,
    size: u64,
    offset: u64,
    len: u64,
) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            device: device.to_owned(),
            op,
            offset,
            len,
            size,
        }),
    }
}
