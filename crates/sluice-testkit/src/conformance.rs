//! One behaviour suite for every device: the checks a [`BlockDevice`] must
//! pass whatever it is (memory, file, a cache over either, a testing
//! layer, a remote NBD volume, a RAID), gated by the device's
//! [`Capability`](sluice_storage::Capability) the way opendal's behaviour tests are gated by its
//! capabilities.
//!
//! A test file names each device stack once with [`conformance_tests!`](crate::conformance_tests),
//! which generates one `#[test]` per check in a module named after the
//! stack, so a failure reads `file_direct::extents_cover_the_range`. Each
//! check is also a plain function returning a [`Result`], so a test can
//! assert that a deliberately broken device fails it.
//!
//! A stack is given as a factory, `Fn(Access) -> Subject`: each check
//! makes the fresh devices it needs (the read-only check asks for
//! [`Access::ReadOnly`], every other check for [`Access::ReadWrite`]).
//! Devices must be at least [`MIN_SIZE`] bytes, zeroed when made.
//!
//! What the checks hold devices to, beyond the trait's documentation:
//! - after `trim`, each byte reads either as before or as zero (stricter
//!   than NBD, and true of every device in this workspace);
//! - an extent flagged `zero` reads as zeroes;
//! - `extents` stops short of the range only when it returned
//!   `max_extents` extents.

use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use sluice_storage::{BlockDevice, DeviceError, Extent, ZeroMode};

use sluice_types::splitmix64;

mod stress;

pub use stress::{
    disjoint_concurrent_writers, flush_and_fua_survive_a_crash, operation_sequences_match_a_model,
};

/// Smallest device the checks work on.
pub const MIN_SIZE: u64 = 2 << 20;

/// Whether a check wants a writable or a read-only device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Writable.
    ReadWrite,
    /// Opened read-only: every write must fail with
    /// [`DeviceError::ReadOnly`].
    ReadOnly,
}

/// Simulates a crash of the stack and returns the device that holds what
/// survived it.
type Crash = Box<dyn FnOnce() -> Arc<dyn BlockDevice> + Send>;

/// A device made for one check, with what it needs to stay alive (a
/// temporary directory) and, for stacks that can lose unflushed writes
/// (a power-loss simulation), a way to crash it.
pub struct Subject {
    /// The device under test.
    pub device: Arc<dyn BlockDevice>,
    crash: Option<Crash>,
    keep: Vec<Box<dyn Any + Send>>,
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subject")
            .field("device", &self.device)
            .field("crashes", &self.crash.is_some())
            .finish_non_exhaustive()
    }
}

impl Subject {
    /// A subject that is just `device`.
    pub fn new(device: Arc<dyn BlockDevice>) -> Self {
        Self {
            device,
            crash: None,
            keep: Vec::new(),
        }
    }

    /// Declares that the stack can lose writes that were not flushed:
    /// `crash` cuts the power and returns the device to read the
    /// surviving contents from. Enables the durability check.
    pub fn with_crash(
        mut self,
        crash: impl FnOnce() -> Arc<dyn BlockDevice> + Send + 'static,
    ) -> Self {
        self.crash = Some(Box::new(crash));
        self
    }

    /// Keeps `guard` (a temporary directory, say) alive as long as the
    /// subject.
    pub fn keeping(mut self, guard: impl Any + Send) -> Self {
        self.keep.push(Box::new(guard));
        self
    }
}

/// A check that passed or did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// The device lacks the capability the check needs.
    Skipped(&'static str),
}

/// A broken rule: what was expected and what the device did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// What every check returns.
pub type CheckResult = Result<Outcome, Failure>;

/// A stack's factory, as the checks take it.
pub type Factory<'a> = &'a dyn Fn(Access) -> Subject;

fn fail<T>(msg: impl Into<String>) -> Result<T, Failure> {
    Err(Failure(msg.into()))
}

/// A device error as a failure of `what`.
fn op<T>(what: impl fmt::Display, r: Result<T, DeviceError>) -> Result<T, Failure> {
    r.map_err(|e| Failure(format!("{what}: {e}")))
}

/// Runs `check` over `factory`, panicking with the check's and the
/// stack's names if it fails and saying loudly when it was skipped. The
/// body of every test [`conformance_tests!`](crate::conformance_tests) generates.
pub fn run(stack: &str, name: &str, check: fn(Factory<'_>) -> CheckResult, factory: Factory<'_>) {
    match check(factory) {
        Ok(Outcome::Passed) => {}
        Ok(Outcome::Skipped(why)) => {
            eprintln!("SKIPPED conformance check {name} on {stack}: {why}");
        }
        Err(f) => panic!("conformance check {name} failed on {stack}: {f}"),
    }
}

/// Generates one `#[test]` per conformance check for each device stack,
/// in a module named after the stack:
///
/// ```ignore
/// sluice_testkit::conformance_tests! {
///     mem => |access| Subject::new(Arc::new(MemDevice::new(4 << 20, access == Access::ReadOnly))),
/// }
/// ```
///
/// The factory expression is evaluated inside the generated module, which
/// imports everything from the enclosing one.
#[macro_export]
macro_rules! conformance_tests {
    ($($stack:ident => $factory:expr),+ $(,)?) => {
        $(
            mod $stack {
                #[allow(unused_imports)]
                use super::*;
                $crate::conformance_tests!(@checks $stack, $factory,
                    round_trips_at_every_alignment,
                    write_zeroes_read_back_as_zeroes,
                    fast_zero_is_refused_or_zeroes,
                    trim_leaves_old_data_or_zeroes,
                    extents_cover_the_range,
                    read_only_refuses_writes,
                    out_of_range_is_refused,
                    disjoint_concurrent_writers,
                    flush_and_fua_survive_a_crash,
                    operation_sequences_match_a_model,
                );
            }
        )+
    };
    (@checks $stack:ident, $factory:expr, $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                let factory = $factory;
                $crate::conformance::run(
                    stringify!($stack),
                    stringify!($check),
                    $crate::conformance::$check,
                    &factory,
                );
            }
        )+
    };
}

/// Bytes no two calls with different seeds repeat.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        x = splitmix64(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// What the device should hold: a byte each, and for trimmed bytes
/// whether zero is also acceptable.
struct Model {
    data: Vec<u8>,
    trimmed: Vec<bool>,
}

impl Model {
    fn new(len: u64) -> Self {
        Self {
            data: vec![0; len as usize],
            trimmed: vec![false; len as usize],
        }
    }
    fn write(&mut self, offset: u64, bytes: &[u8]) {
        let o = offset as usize;
        self.data[o..o + bytes.len()].copy_from_slice(bytes);
        self.trimmed[o..o + bytes.len()].fill(false);
    }
    fn zero(&mut self, offset: u64, len: u64) {
        let r = offset as usize..(offset + len) as usize;
        self.data[r.clone()].fill(0);
        self.trimmed[r].fill(false);
    }
    fn trim(&mut self, offset: u64, len: u64) {
        self.trimmed[offset as usize..(offset + len) as usize].fill(true);
    }
    /// Where `got`, read at `offset`, differs from the model.
    fn mismatch(&self, offset: u64, got: &[u8]) -> Option<String> {
        let o = offset as usize;
        let i = got.iter().enumerate().position(|(i, &b)| {
            let want = self.data[o + i];
            b != want && !(self.trimmed[o + i] && b == 0)
        })?;
        Some(format!(
            "byte at offset {} reads {:#04x}, expected {:#04x}{}",
            o + i,
            got[i],
            self.data[o + i],
            if self.trimmed[o + i] {
                " (trimmed: or zero)"
            } else {
                ""
            }
        ))
    }
}

/// Reads `[offset, offset+len)` into a buffer that starts one byte past
/// an aligned address when `misalign` (devices must cope with any
/// buffer), and compares it with the model.
fn verify(
    dev: &dyn BlockDevice,
    model: &Model,
    offset: u64,
    len: u64,
    misalign: bool,
    what: &str,
) -> Result<(), Failure> {
    let skip = usize::from(misalign);
    let mut storage = vec![0xa5u8; len as usize + skip];
    let buf = &mut storage[skip..];
    op(
        format_args!("{what}: read of {len} bytes at {offset}"),
        dev.read_at(buf, offset),
    )?;
    if let Some(m) = model.mismatch(offset, buf) {
        return fail(format!("{what}: {m}"));
    }
    Ok(())
}

/// Writes `len` bytes of a fresh pattern at `offset` to the device and
/// the model.
fn write_pattern(
    dev: &dyn BlockDevice,
    model: &mut Model,
    offset: u64,
    len: u64,
    seed: u64,
    fua: bool,
    misalign: bool,
) -> Result<(), Failure> {
    let skip = usize::from(misalign);
    let mut storage = pattern(seed, len as usize + skip);
    let buf = &mut storage[skip..];
    op(
        format_args!("write of {len} bytes at {offset} (fua {fua})"),
        dev.write_at(buf, offset, fua),
    )?;
    model.write(offset, buf);
    Ok(())
}

/// The device's minimum block as a u64 (at least 1).
fn align_of(dev: &dyn BlockDevice) -> u64 {
    u64::from(dev.capability().min_block.max(1))
}

/// `values` rounded up to multiples of `align`, deduplicated, nonzero.
fn aligned(values: &[u64], align: u64) -> Vec<u64> {
    let mut out: Vec<u64> = values
        .iter()
        .map(|v| v.div_ceil(align).max(1) * align)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn writable(subject: &Subject) -> Result<(), Failure> {
    let dev = subject.device.as_ref();
    if dev.capability().read_only {
        return fail("the factory gave a read-only device for Access::ReadWrite");
    }
    if dev.size() < MIN_SIZE {
        return fail(format!(
            "device of {} bytes is smaller than the suite's {MIN_SIZE}",
            dev.size()
        ));
    }
    Ok(())
}

/// Writes at a grid of unaligned offsets and lengths (multiples of the
/// minimum block where the device has one), from misaligned buffers as
/// well as aligned ones, and reads each back with its neighbourhood;
/// non-blocking reads that succeed return the same bytes; a flush keeps
/// everything.
pub fn round_trips_at_every_alignment(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let a = align_of(dev);
    let size = dev.size();
    let mut model = Model::new(size);
    let offsets = aligned(
        &[
            1, 7, 511, 512, 513, 4095, 4096, 4097, 65535, 65536, 65537, 131_000, 1_000_001,
        ],
        a,
    );
    let lengths = aligned(
        &[1, 7, 511, 512, 513, 4095, 4096, 4097, 65536, 65537, 200_003],
        a,
    );
    let mut seed = 1;
    let mut cases: Vec<(u64, u64)> = Vec::new();
    for &len in &lengths {
        cases.push((0, len));
        cases.push((size - len, len));
        cases.extend(offsets.iter().map(|&o| (o, len)));
    }
    for (offset, len) in cases {
        seed += 1;
        let misalign = seed % 2 == 0;
        write_pattern(dev, &mut model, offset, len, seed, false, misalign)?;
        let from = offset.saturating_sub(a);
        let to = (offset + len + a).min(size);
        verify(
            dev,
            &model,
            from,
            to - from,
            !misalign,
            &format!("after writing {len} bytes at {offset}"),
        )?;
        let mut buf = vec![0u8; len as usize];
        let served = op(
            format_args!("non-blocking read of {len} bytes at {offset}"),
            dev.read_at_nowait(&mut buf, offset),
        )?;
        if served {
            if let Some(m) = model.mismatch(offset, &buf) {
                return fail(format!("non-blocking read after a write: {m}"));
            }
        }
    }
    if dev.capability().flush {
        op("flush", dev.flush())?;
    }
    verify(dev, &model, 0, size, false, "whole device at the end")?;
    Ok(Outcome::Passed)
}

const ZERO_MODES: [ZeroMode; 4] = [
    ZeroMode {
        may_trim: true,
        fast: false,
        fua: false,
    },
    ZeroMode {
        may_trim: false,
        fast: false,
        fua: false,
    },
    ZeroMode {
        may_trim: true,
        fast: false,
        fua: true,
    },
    ZeroMode {
        may_trim: false,
        fast: false,
        fua: true,
    },
];

/// Fills the first `len` bytes with a pattern, reading them once so a
/// cache holds them.
fn prefill(dev: &dyn BlockDevice, model: &mut Model, len: u64) -> Result<(), Failure> {
    write_pattern(dev, model, 0, len, 0xf111, false, false)?;
    verify(dev, model, 0, len, false, "after filling")
}

/// Zeroes ranges of every alignment in every mode over written data:
/// they read back as zeroes and nothing around them changes.
pub fn write_zeroes_read_back_as_zeroes(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let a = align_of(dev);
    let size = dev.size();
    let mut model = Model::new(size);
    let region = (1 << 20).min(size);
    prefill(dev, &mut model, region)?;
    let ranges: [(u64, u64); 7] = [
        (0, 4096),
        (1, 7),
        (511, 513),
        (4096, 65536),
        (65535, 65538),
        (131_072, 131_072),
        (100_001, 300_007),
    ];
    for (i, &(offset, len)) in ranges.iter().enumerate() {
        let offset = offset / a * a;
        let len = len.div_ceil(a) * a;
        for mode in ZERO_MODES {
            op(
                format_args!("write zeroes of {len} bytes at {offset} ({mode:?})"),
                dev.write_zeroes(offset, len, mode),
            )?;
            model.zero(offset, len);
            let from = offset.saturating_sub(a);
            let to = (offset + len + a).min(size);
            verify(
                dev,
                &model,
                from,
                to - from,
                false,
                &format!("after zeroing {len} bytes at {offset} ({mode:?})"),
            )?;
            // Data again, so the next mode zeroes something.
            write_pattern(dev, &mut model, offset, len, 77 + i as u64, false, false)?;
        }
        op(
            format_args!("write zeroes of {len} bytes at {offset}"),
            dev.write_zeroes(offset, len, ZERO_MODES[0]),
        )?;
        model.zero(offset, len);
    }
    verify(
        dev,
        &model,
        0,
        region,
        false,
        "the zeroed region at the end",
    )?;
    Ok(Outcome::Passed)
}

/// A fast zero on a device without fast zeroing is refused with
/// [`DeviceError::Unsupported`] and changes nothing; on a device with it,
/// it either zeroes or is refused the same way.
pub fn fast_zero_is_refused_or_zeroes(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let cap = dev.capability();
    let a = align_of(dev);
    let mut model = Model::new(dev.size());
    let region = 1 << 20;
    prefill(dev, &mut model, region)?;
    for (offset, len) in [(0, 65536), (a * 3, a * 5), (65536 * 3, 65536 * 4)] {
        let mode = ZeroMode {
            may_trim: true,
            fast: true,
            fua: false,
        };
        match dev.write_zeroes(offset, len, mode) {
            Ok(()) if !cap.fast_zero => {
                return fail(format!(
                "fast zero of {len} bytes at {offset} succeeded on a device without fast zeroing"
            ))
            }
            Ok(()) => model.zero(offset, len),
            Err(DeviceError::Unsupported { .. }) => {}
            Err(e) => return fail(format!("fast zero of {len} bytes at {offset}: {e}")),
        }
        verify(
            dev,
            &model,
            0,
            region,
            false,
            &format!("after a fast zero of {len} bytes at {offset}"),
        )?;
    }
    Ok(Outcome::Passed)
}

/// Checks every extent of `[offset, offset+len)` flagged `zero` reads as
/// zeroes, and the list's shape (see [`extents_cover_the_range`]).
fn extents_agree_with_reads(
    dev: &dyn BlockDevice,
    offset: u64,
    len: u64,
    max: usize,
) -> Result<Vec<Extent>, Failure> {
    let what = format!("block status of {len} bytes at {offset} (at most {max})");
    let list = op(&what, dev.extents(offset, len, max))?;
    if list.is_empty() {
        return fail(format!("{what}: no extents"));
    }
    if list.len() > max.max(1) {
        return fail(format!("{what}: {} extents", list.len()));
    }
    if let Some(e) = list.iter().find(|e| e.length == 0) {
        return fail(format!("{what}: an empty extent {e:?} in {list:?}"));
    }
    let total: u64 = list.iter().map(|e| e.length).sum();
    if total > len {
        return fail(format!(
            "{what}: extents cover {total} bytes, past the range"
        ));
    }
    if total < len && list.len() < max.max(1) {
        return fail(format!(
            "{what}: extents cover only {total} bytes with {} of {max} extents used: {list:?}",
            list.len()
        ));
    }
    let mut at = offset;
    for e in &list {
        if e.zero {
            let mut buf = vec![0xa5u8; e.length as usize];
            op(
                format_args!("read of the zero extent at {at}"),
                dev.read_at(&mut buf, at),
            )?;
            if let Some(i) = buf.iter().position(|&b| b != 0) {
                return fail(format!(
                    "{what}: extent {e:?} at {at} says zero, but offset {} reads {:#04x}",
                    at + i as u64,
                    buf[i]
                ));
            }
        }
        at += e.length;
    }
    Ok(list)
}

/// Trims ranges of written data: each byte then reads as before or as
/// zero, extents that call the range zero are right, nothing around it
/// changes, and writes over it read back.
pub fn trim_leaves_old_data_or_zeroes(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    if !dev.capability().trim {
        return Ok(Outcome::Skipped("no trim"));
    }
    let a = align_of(dev);
    let size = dev.size();
    let mut model = Model::new(size);
    let region = 1 << 20;
    prefill(dev, &mut model, region)?;
    let ranges: [(u64, u64); 5] = [
        (0, 65536),
        (65536 * 2, 65536 * 3),
        (1, 7),
        (4095, 8193),
        (300_001, 100_000),
    ];
    for (i, &(offset, len)) in ranges.iter().enumerate() {
        let offset = offset / a * a;
        let len = len.div_ceil(a) * a;
        op(
            format_args!("trim of {len} bytes at {offset}"),
            dev.trim(offset, len, i % 2 == 1),
        )?;
        model.trim(offset, len);
        let from = offset.saturating_sub(a);
        let to = (offset + len + a).min(size);
        let what = format!("after trimming {len} bytes at {offset}");
        verify(dev, &model, from, to - from, false, &what)?;
        extents_agree_with_reads(dev, from, to - from, 64)?;
    }
    for (i, &(offset, len)) in ranges.iter().enumerate() {
        let offset = offset / a * a;
        let len = len.div_ceil(a) * a;
        write_pattern(dev, &mut model, offset, len, 900 + i as u64, false, false)?;
    }
    verify(dev, &model, 0, region, false, "writes over trimmed ranges")?;
    Ok(Outcome::Passed)
}

/// Over a mix of written, zeroed, trimmed and never-written ranges, block
/// status returns between one and `max_extents` extents whose lengths
/// add up to the range (or stop short only when the limit was reached),
/// and what it calls zero reads as zeroes.
pub fn extents_cover_the_range(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let a = align_of(dev);
    let size = dev.size();
    let mut model = Model::new(size);
    let up = |v: u64| v.div_ceil(a) * a;
    write_pattern(dev, &mut model, up(65536), up(65536), 5, false, false)?;
    write_pattern(dev, &mut model, up(200_000), up(5000), 6, false, false)?;
    write_pattern(
        dev,
        &mut model,
        up(512 * 1024),
        up(300_000),
        7,
        false,
        false,
    )?;
    op(
        "write zeroes",
        dev.write_zeroes(up(524_288 + 65_536), up(65_536), ZERO_MODES[0]),
    )?;
    if dev.capability().trim {
        op(
            "trim",
            dev.trim(up(524_288 + 3 * 65_536), up(65_536), false),
        )?;
    }
    let ranges = [
        (0, size),
        (0, up(1 << 20)),
        (up(1), up(1)),
        (up(65535), up(65538)),
        (up(199_999), up(10_001)),
        (up(500_000), up(500_000)),
        (size - up(4096), up(4096)),
    ];
    for (offset, len) in ranges {
        for max in [1, 2, 3, 64, 100_000] {
            extents_agree_with_reads(dev, offset, len, max)?;
        }
    }
    Ok(Outcome::Passed)
}

/// A read-only device refuses every write, trim and zeroing with
/// [`DeviceError::ReadOnly`], and still reads.
pub fn read_only_refuses_writes(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadOnly);
    let dev = subject.device.as_ref();
    if !dev.capability().read_only {
        return fail("the factory gave a writable device for Access::ReadOnly");
    }
    let a = align_of(dev);
    let refused = |what: &str, r: Result<(), DeviceError>| match r {
        Err(DeviceError::ReadOnly { .. }) => Ok(()),
        Ok(()) => fail(format!("{what} succeeded on a read-only device")),
        Err(e) => fail(format!("{what} on a read-only device: {e}, not ReadOnly")),
    };
    let data = pattern(3, a as usize * 2);
    refused("write", dev.write_at(&data, 0, false))?;
    refused("FUA write", dev.write_at(&data, a, true))?;
    refused("trim", dev.trim(0, a * 2, false))?;
    for mode in ZERO_MODES {
        refused(
            &format!("write zeroes ({mode:?})"),
            dev.write_zeroes(0, a * 2, mode),
        )?;
    }
    let mut buf = vec![0xa5u8; a as usize * 4];
    op("read", dev.read_at(&mut buf, 0))?;
    if buf.iter().any(|&b| b != 0) {
        return fail("a refused write changed the read-only device");
    }
    Ok(Outcome::Passed)
}

/// Every operation on a range past the end, or one whose end overflows
/// u64, fails with [`DeviceError::OutOfRange`] and does not panic.
pub fn out_of_range_is_refused(factory: Factory<'_>) -> CheckResult {
    let subject = factory(Access::ReadWrite);
    writable(&subject)?;
    let dev = subject.device.as_ref();
    let a = align_of(dev);
    let size = dev.size();
    let top = 0u64.wrapping_sub(a);
    let mut buf = vec![0u8; 2 * a as usize];
    let pieces = vec![0u8; 3 * a as usize];
    // Unflushed writes at both ends, so layers that hold data (caches,
    // simulated disk caches) have some to look through.
    op("write at the start", dev.write_at(&buf, 0, false))?;
    op("write at the end", dev.write_at(&buf, size - 2 * a, false))?;
    let expect = |what: String, f: &mut dyn FnMut() -> Result<(), DeviceError>| match catch_unwind(
        AssertUnwindSafe(f),
    ) {
        Err(_) => fail(format!("{what} panicked")),
        Ok(Err(DeviceError::OutOfRange { .. })) => Ok(()),
        Ok(Ok(())) => fail(format!("{what} succeeded")),
        Ok(Err(e)) => fail(format!("{what}: {e}, not OutOfRange")),
    };
    for (offset, len) in [(size, a), (size - a, 2 * a), (size + a, a), (top, 2 * a)] {
        let n = len as usize;
        expect(format!("read of {len} bytes at {offset}"), &mut || {
            dev.read_at(&mut buf[..n], offset)
        })?;
        expect(
            format!("non-blocking read of {len} at {offset}"),
            &mut || dev.read_at_nowait(&mut buf[..n], offset).map(drop),
        )?;
        expect(format!("write of {len} bytes at {offset}"), &mut || {
            dev.write_at(&buf[..n], offset, false)
        })?;
        expect(format!("FUA write of {len} bytes at {offset}"), &mut || {
            dev.write_at(&buf[..n], offset, true)
        })?;
        expect(
            format!("pieces written in range and {len} bytes at {offset}"),
            &mut || {
                let (first, rest) = pieces.split_at(a as usize);
                dev.write_pieces(&[(0, first), (offset, &rest[..n])], false)
            },
        )?;
        expect(format!("trim of {len} bytes at {offset}"), &mut || {
            dev.trim(offset, len, false)
        })?;
        expect(
            format!("write zeroes of {len} bytes at {offset}"),
            &mut || dev.write_zeroes(offset, len, ZERO_MODES[1]),
        )?;
        expect(
            format!("block status of {len} bytes at {offset}"),
            &mut || dev.extents(offset, len, 16).map(drop),
        )?;
        expect(format!("cache of {len} bytes at {offset}"), &mut || {
            dev.cache(offset, len)
        })?;
    }
    Ok(Outcome::Passed)
}
