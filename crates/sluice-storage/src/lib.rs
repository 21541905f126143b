//! Block devices for sluice.
//!
//! [`BlockDevice`] is the one trait every volume implements: the few
//! operations every volume has. Wrappers (cache, error injection,
//! power-loss simulation, test devices) are [`DeviceLayer`]s, which
//! forward what they do not change; the Linux zero-copy paths of a
//! buffered file are an optional extension, [`ZeroCopy`]. A device
//! declares what it can do in a [`Capability`], which the server maps onto
//! NBD transmission flags, and how it behaves under concurrency and
//! blocking, which the server uses to choose where to run each request.
//! Every device stack runs the same behaviour suite
//! (`sluice_testkit::conformance`).
//!
//! Callers (the server core) check ranges before calling; devices still
//! return [`DeviceError::OutOfRange`] rather than panic if a bug slips by.

mod cache;
mod error;
mod fault;
mod file;
pub mod lock;
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
pub use mem::{machine_memory, MemDevice};
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
    /// Writes each `(offset, bytes)` piece in order, as a
    /// [`write_at`](Self::write_at) per piece would (a later piece that
    /// overlaps an earlier one wins); `fua` makes them all durable before
    /// it returns. On an error any of them may have been written. For
    /// writes of many small pieces, such as a view of small blocks behind
    /// holes, which cannot be merged into fewer writes without writing the
    /// holes: a device that can do better than a call per piece (one
    /// lock per page, a copy into a mapping) overrides it.
    fn write_pieces(&self, pieces: &[(u64, &[u8])], fua: bool) -> Result<(), DeviceError> {
        write_each(
            pieces,
            fua,
            |buf, offset, fua| self.write_at(buf, offset, fua),
            || self.flush(),
        )
    }
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Like [`flush`](Self::flush) where that cannot wait on the device
    /// (nothing written since the last sync, or a device in memory), and
    /// then `Ok(true)`; else `Ok(false)` having done nothing, and the
    /// caller flushes where waiting is allowed. The default cannot tell.
    fn flush_nowait(&self) -> Result<bool, DeviceError> {
        Ok(false)
    }
    /// Discards a range, a hint: afterwards each byte of it reads either
    /// as it did or as zero (NBD promises less; every device here keeps
    /// to this, and the conformance suite checks it).
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError>;
    /// Makes a range read as zeroes.
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError>;
    /// Allocation of `[offset, offset+length)` as consecutive extents,
    /// at most `max_extents` of them (at least one), never past the range;
    /// they may end before the range does only when there are
    /// `max_extents` of them.
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
    /// The Linux zero-copy paths of this device, if it has them (a
    /// buffered file). Layers never pass this on: a layer that changes
    /// what reads return or what writes do (a cache, a simulation) would
    /// be bypassed by a path that reaches the file directly, so
    /// [`DeviceLayer`]'s blanket implementation always answers `None`.
    fn zero_copy(&self) -> Option<&dyn ZeroCopy> {
        None
    }
}

/// Optional zero-copy paths a device offers beside [`BlockDevice`], for
/// a server that can move bytes between a socket and the device without
/// copying them through its own buffers. Reached through
/// [`BlockDevice::zero_copy`]; only devices whose reads and writes are
/// exactly the file's implement it.
pub trait ZeroCopy: Send + Sync {
    /// The device's bytes as a shared mapping the kernel can send from
    /// directly, if it has one.
    fn mapped(&self) -> Option<&MappedBytes>;
    /// Whether [`write_from_pipe`](Self::write_from_pipe) works: the
    /// device is a writable buffered file the kernel can splice into.
    fn splices_writes(&self) -> bool;
    /// Writes exactly `len` bytes taken from the pipe `pipe` at `offset`,
    /// like [`BlockDevice::write_at`] without FUA; the kernel moves them
    /// from the pipe into the page cache, so a payload spliced from a
    /// socket is copied once instead of twice. On an error, what is left
    /// in the pipe is the caller's to drain. Only called when
    /// [`splices_writes`](Self::splices_writes) is true.
    fn write_from_pipe(
        &self,
        pipe: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Result<(), DeviceError>;
}

/// A device that wraps another and changes only part of what it does:
/// cache, error injection, power-loss simulation, test devices. Every
/// `DeviceLayer` is a [`BlockDevice`] through a blanket implementation,
/// so a layer writes [`inner`](Self::inner) and overrides only the
/// operations it changes (nbdkit filters' `next_ops`, opendal's
/// `LayeredAccess`).
///
/// What a layer does by default, decided once here:
/// - `flush_nowait` answers `Ok(false)` (cannot tell): a layer that
///   changes flushes says itself when one cannot wait.
/// - `size`, `capability`, `write_at`, `flush`, `trim`, `write_zeroes`,
///   `extents`, `cache` and `metrics` go to the device beneath unchanged.
/// - `write_pieces` goes through the layer's *own* `write_at` per piece
///   (and its own `flush` for FUA), so overriding `write_at` is always
///   enough to change what writes do.
///   A layer that holds data the device beneath does not have yet (a
///   write-back cache, a volatile-cache simulation) must override
///   `extents`, or it reports holes where its data is. A layer with
///   metrics of its own appends them to the inner device's.
/// - `read_at_nowait` goes through the layer's *own* `read_at` (blocking
///   and answering `true`), so overriding `read_at` is always enough to
///   change what reads return. A layer that leaves reads alone and wants
///   the inner device's non-blocking reads overrides it to forward.
/// - [`BlockDevice::zero_copy`] is never passed on (see there).
///
/// Name the trait by path in `impl` blocks rather than importing it
/// beside [`BlockDevice`]: with both in scope, calls like `layer.read_at`
/// are ambiguous.
pub trait DeviceLayer: Send + Sync + std::fmt::Debug {
    /// The device beneath.
    fn inner(&self) -> &dyn BlockDevice;
    /// Size in bytes.
    fn size(&self) -> u64 {
        self.inner().size()
    }
    /// What the device supports.
    fn capability(&self) -> Capability {
        self.inner().capability()
    }
    /// See [`BlockDevice::read_at`].
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.inner().read_at(buf, offset)
    }
    /// See [`BlockDevice::read_at_nowait`]; by default this layer's own
    /// blocking [`read_at`](Self::read_at).
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        self.read_at(buf, offset).map(|()| true)
    }
    /// See [`BlockDevice::write_at`].
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.inner().write_at(buf, offset, fua)
    }
    /// See [`BlockDevice::write_pieces`]; by default this layer's own
    /// [`write_at`](Self::write_at) per piece (and its own
    /// [`flush`](Self::flush) for `fua`), so overriding `write_at` is always
    /// enough to change what writes do.
    fn write_pieces(&self, pieces: &[(u64, &[u8])], fua: bool) -> Result<(), DeviceError> {
        write_each(
            pieces,
            fua,
            |buf, offset, fua| self.write_at(buf, offset, fua),
            || self.flush(),
        )
    }
    /// See [`BlockDevice::flush`].
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner().flush()
    }
    /// See [`BlockDevice::flush_nowait`]; by default `Ok(false)` (cannot
    /// tell), since a layer may change what a flush does. A layer that
    /// leaves flushes alone may forward it.
    fn flush_nowait(&self) -> Result<bool, DeviceError> {
        Ok(false)
    }
    /// See [`BlockDevice::trim`].
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.inner().trim(offset, length, fua)
    }
    /// See [`BlockDevice::write_zeroes`].
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.inner().write_zeroes(offset, length, mode)
    }
    /// See [`BlockDevice::extents`].
    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.inner().extents(offset, length, max_extents)
    }
    /// See [`BlockDevice::cache`].
    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.inner().cache(offset, length)
    }
    /// See [`BlockDevice::metrics`].
    fn metrics(&self) -> Vec<DeviceMetric> {
        self.inner().metrics()
    }
}

impl<L: DeviceLayer> BlockDevice for L {
    fn size(&self) -> u64 {
        DeviceLayer::size(self)
    }
    fn capability(&self) -> Capability {
        DeviceLayer::capability(self)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        DeviceLayer::read_at(self, buf, offset)
    }
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        DeviceLayer::read_at_nowait(self, buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        DeviceLayer::write_at(self, buf, offset, fua)
    }
    fn write_pieces(&self, pieces: &[(u64, &[u8])], fua: bool) -> Result<(), DeviceError> {
        DeviceLayer::write_pieces(self, pieces, fua)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        DeviceLayer::flush(self)
    }
    fn flush_nowait(&self) -> Result<bool, DeviceError> {
        DeviceLayer::flush_nowait(self)
    }
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        DeviceLayer::trim(self, offset, length, fua)
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        DeviceLayer::write_zeroes(self, offset, length, mode)
    }
    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        DeviceLayer::extents(self, offset, length, max_extents)
    }
    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        DeviceLayer::cache(self, offset, length)
    }
    fn metrics(&self) -> Vec<DeviceMetric> {
        DeviceLayer::metrics(self)
    }
}

/// Whether a [`DeviceMetric`] only grows or goes up and down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic total.
    Counter,
    /// Current value.
    Gauge,
    /// One series of a histogram: its buckets (each with an `le` label,
    /// cumulative), the sum of the values, or their count.
    Histogram(HistogramSeries),
}

/// Which series of a histogram a [`DeviceMetric`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistogramSeries {
    /// Values at or below the `le` label's bound.
    Bucket,
    /// Sum of the values.
    Sum,
    /// Number of values.
    Count,
}

impl HistogramSeries {
    /// What Prometheus appends to the histogram's name for this series.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Bucket => "_bucket",
            Self::Sum => "_sum",
            Self::Count => "_count",
        }
    }
}

/// One named value a device reports.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMetric {
    /// Metric name without the `sluice_` prefix, e.g. `cache_read_hits_total`.
    pub name: &'static str,
    /// One-line description.
    pub help: &'static str,
    /// Counter, gauge or histogram series.
    pub kind: MetricKind,
    /// Current value.
    pub value: f64,
    /// Labels besides the export's (e.g. which member of an array), in
    /// order; empty for most.
    pub labels: Vec<(&'static str, String)>,
}

/// [`BlockDevice::write_pieces`] as one `write` per piece, in order: a
/// lone piece carries `fua` itself; more are written without it and
/// followed by one `flush`, so FUA costs one sync, not one per piece.
pub(crate) fn write_each(
    pieces: &[(u64, &[u8])],
    fua: bool,
    write: impl Fn(&[u8], u64, bool) -> Result<(), DeviceError>,
    flush: impl FnOnce() -> Result<(), DeviceError>,
) -> Result<(), DeviceError> {
    if let [(offset, bytes)] = pieces {
        return write(bytes, *offset, fua);
    }
    for &(offset, bytes) in pieces {
        write(bytes, offset, false)?;
    }
    if fua && !pieces.is_empty() {
        flush()?;
    }
    Ok(())
}

/// Checks that `[offset, offset+len)` lies within `size` (without
/// overflowing), or says which range on which device does not: the one
/// range check every device and layer makes.
pub fn check_range(
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
