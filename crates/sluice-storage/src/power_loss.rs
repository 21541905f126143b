//! Power-loss simulation: a layer that behaves like a disk with a
//! volatile write cache. Writes, trims and zeroing that were not made
//! durable (by `flush` or FUA) are held in memory, and the layer writes
//! some of them to the device beneath at random moments — in any order,
//! and sometimes only a prefix of one (a torn write, cut at a 512-byte
//! sector boundary). When the process dies (SIGKILL) or
//! [`PowerLossDevice::power_loss`] is called, whatever was not yet
//! written down is gone.
//!
//! Killing a server with SIGKILL alone leaves its writes in the kernel's
//! page cache, so it cannot show a missing fsync; with this layer under
//! the server's own layers, it does: a write acknowledged by FLUSH is on
//! the device beneath only if every layer passed the flush down.
//!
//! The layer serialises its calls with one lock: it is a test tool, not
//! a fast path.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{
    check_range, BlockDevice, Capability, DeviceError, DeviceMetric, Extent, IoOp, MetricKind,
    ZeroMode,
};

const SECTOR: u64 = 512;

/// How the simulated disk cache behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerLossConfig {
    /// Seed of the choices below, so a failing run can be repeated.
    pub seed: u64,
    /// Chance, in percent, that a write makes the disk write down one
    /// random cached write early (as a real disk does when it likes).
    pub early_write_percent: u8,
    /// Chance, in percent, that such an early write is torn: only a
    /// sector-aligned prefix reaches the device, the rest stays cached.
    pub torn_percent: u8,
    /// Cached bytes above which the oldest writes are written down.
    pub max_cached_bytes: u64,
}

impl Default for PowerLossConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            early_write_percent: 20,
            torn_percent: 25,
            max_cached_bytes: 64 << 20,
        }
    }
}

#[derive(Debug)]
enum Pending {
    Write {
        offset: u64,
        data: Vec<u8>,
    },
    Zero {
        offset: u64,
        len: u64,
        may_trim: bool,
    },
    Trim {
        offset: u64,
        len: u64,
    },
}

impl Pending {
    fn range(&self) -> (u64, u64) {
        match self {
            Self::Write { offset, data } => (*offset, *offset + data.len() as u64),
            Self::Zero { offset, len, .. } | Self::Trim { offset, len } => {
                (*offset, *offset + *len)
            }
        }
    }
    fn bytes(&self) -> u64 {
        let (from, to) = self.range();
        to - from
    }
    fn overlaps(&self, from: u64, to: u64) -> bool {
        let (a, b) = self.range();
        a < to && from < b
    }
}

#[derive(Debug)]
struct State {
    /// Writes not yet on the device, oldest first.
    pending: VecDeque<Pending>,
    pending_bytes: u64,
    rng: fastrand::Rng,
}

/// A device with a simulated volatile write cache in front of `inner`.
#[derive(Debug)]
pub struct PowerLossDevice {
    inner: Arc<dyn BlockDevice>,
    config: PowerLossConfig,
    state: Mutex<State>,
    early_writes: AtomicU64,
    torn_writes: AtomicU64,
    lost_bytes: AtomicU64,
}

/// What a simulated power loss threw away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PowerLossReport {
    /// Cached writes (and trims, zeroings) that never reached the device.
    pub lost_writes: u64,
    /// Their bytes.
    pub lost_bytes: u64,
}

impl PowerLossDevice {
    /// Puts a simulated volatile cache in front of `inner`.
    pub fn new(inner: Arc<dyn BlockDevice>, config: PowerLossConfig) -> Self {
        Self {
            inner,
            state: Mutex::new(State {
                pending: VecDeque::new(),
                pending_bytes: 0,
                rng: fastrand::Rng::with_seed(config.seed),
            }),
            config,
            early_writes: AtomicU64::new(0),
            torn_writes: AtomicU64::new(0),
            lost_bytes: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts the power: cached writes not yet on the device are lost.
    /// The device stays usable, as after a reboot.
    pub fn power_loss(&self) -> PowerLossReport {
        let mut st = self.lock();
        let report = PowerLossReport {
            lost_writes: st.pending.len() as u64,
            lost_bytes: st.pending_bytes,
        };
        st.pending.clear();
        st.pending_bytes = 0;
        self.lost_bytes
            .fetch_add(report.lost_bytes, Ordering::Relaxed);
        report
    }

    /// Bytes written and not yet on the device.
    pub fn cached_bytes(&self) -> u64 {
        self.lock().pending_bytes
    }

    fn apply(&self, p: &Pending) -> Result<(), DeviceError> {
        match p {
            Pending::Write { offset, data } => self.inner.write_at(data, *offset, false),
            Pending::Zero {
                offset,
                len,
                may_trim,
            } => self.inner.write_zeroes(
                *offset,
                *len,
                ZeroMode {
                    may_trim: *may_trim,
                    fast: false,
                    fua: false,
                },
            ),
            Pending::Trim { offset, len } => self.inner.trim(*offset, *len, false),
        }
    }

    /// Writes the oldest cached entry down.
    fn write_oldest(&self, st: &mut State) -> Result<(), DeviceError> {
        if let Some(p) = st.pending.front() {
            self.apply(p)?;
            st.pending_bytes -= p.bytes();
            st.pending.pop_front();
        }
        Ok(())
    }

    /// Writes every cached entry down, oldest first.
    fn write_all(&self, st: &mut State) -> Result<(), DeviceError> {
        while !st.pending.is_empty() {
            self.write_oldest(st)?;
        }
        Ok(())
    }

    /// Writes down entry `i` early, after every older entry it depends on
    /// (one that overlaps it, or overlaps such an entry: a disk never lets
    /// an older write land over a newer one), maybe only a prefix of it.
    fn write_early(&self, st: &mut State, i: usize) -> Result<(), DeviceError> {
        let mut ranges = vec![st.pending[i].range()];
        let mut before = Vec::new();
        for j in (0..i).rev() {
            let p = &st.pending[j];
            if ranges.iter().any(|&(a, b)| p.overlaps(a, b)) {
                ranges.push(p.range());
                before.push(j);
            }
        }
        let mut i = i;
        // Oldest first; each removal shifts the later indices down by one.
        for (removed, j) in before.into_iter().rev().enumerate() {
            let p = st.pending.remove(j - removed).expect("index below len");
            self.apply(&p)?;
            st.pending_bytes -= p.bytes();
            i -= 1;
        }
        self.early_writes.fetch_add(1, Ordering::Relaxed);
        let torn = st.rng.u8(0..100) < self.config.torn_percent;
        if torn {
            if let Pending::Write { offset, data } = &mut st.pending[i] {
                let sectors = data.len() as u64 / SECTOR;
                if sectors >= 2 {
                    let keep = st.rng.u64(1..sectors) * SECTOR;
                    let (head, offset0) = (data[..keep as usize].to_vec(), *offset);
                    self.inner.write_at(&head, offset0, false)?;
                    data.drain(..keep as usize);
                    *offset += keep;
                    st.pending_bytes -= keep;
                    self.torn_writes.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
            }
        }
        let p = st.pending.remove(i).expect("index below len");
        self.apply(&p)?;
        st.pending_bytes -= p.bytes();
        Ok(())
    }

    /// Caches `p`, then lets the simulated disk write some entries down.
    fn push(&self, p: Pending) -> Result<(), DeviceError> {
        let mut st = self.lock();
        st.pending_bytes += p.bytes();
        st.pending.push_back(p);
        if st.rng.u8(0..100) < self.config.early_write_percent {
            let n = st.pending.len();
            let i = st.rng.usize(0..n);
            self.write_early(&mut st, i)?;
        }
        while st.pending_bytes > self.config.max_cached_bytes {
            self.write_oldest(&mut st)?;
        }
        Ok(())
    }

    fn check(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        check_range("power-loss simulation", op, self.inner.size(), offset, len)
    }
}

impl crate::DeviceLayer for PowerLossDevice {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn capability(&self) -> Capability {
        Capability {
            flush: true,
            fua: true,
            ..self.inner.capability()
        }
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let st = self.lock();
        self.inner.read_at(buf, offset)?;
        let (from, to) = (offset, offset + buf.len() as u64);
        for p in st.pending.iter().filter(|p| p.overlaps(from, to)) {
            let (a, b) = p.range();
            let (lo, hi) = (a.max(from), b.min(to));
            let dst = &mut buf[(lo - from) as usize..(hi - from) as usize];
            match p {
                Pending::Write { data, .. } => {
                    dst.copy_from_slice(&data[(lo - a) as usize..(hi - a) as usize])
                }
                Pending::Zero { .. } | Pending::Trim { .. } => dst.fill(0),
            }
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check(IoOp::Write, offset, buf.len() as u64)?;
        if self.inner.capability().read_only {
            return self.inner.write_at(buf, offset, fua);
        }
        if fua {
            // Forced unit access: this write is durable on return; the
            // cache is written down first so it cannot land over it later.
            let mut st = self.lock();
            self.write_all(&mut st)?;
            return self.inner.write_at(buf, offset, true);
        }
        self.push(Pending::Write {
            offset,
            data: buf.to_vec(),
        })
    }
    fn flush(&self) -> Result<(), DeviceError> {
        let mut st = self.lock();
        self.write_all(&mut st)?;
        self.inner.flush()
    }
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.check(IoOp::Trim, offset, length)?;
        if fua || self.inner.capability().read_only || !self.inner.capability().trim {
            let mut st = self.lock();
            self.write_all(&mut st)?;
            return self.inner.trim(offset, length, fua);
        }
        self.push(Pending::Trim {
            offset,
            len: length,
        })
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check(IoOp::WriteZeroes, offset, length)?;
        let cap = self.inner.capability();
        if mode.fua || mode.fast || cap.read_only {
            let mut st = self.lock();
            self.write_all(&mut st)?;
            return self.inner.write_zeroes(offset, length, mode);
        }
        self.push(Pending::Zero {
            offset,
            len: length,
            may_trim: mode.may_trim,
        })
    }
    fn extents(&self, offset: u64, length: u64, max: usize) -> Result<Vec<Extent>, DeviceError> {
        self.check(IoOp::Extents, offset, length)?;
        let st = self.lock();
        if st
            .pending
            .iter()
            .any(|p| p.overlaps(offset, offset + length))
        {
            // Cached writes are not on the device yet: report data, which
            // is always a correct answer.
            return Ok(vec![Extent {
                length,
                hole: false,
                zero: false,
            }]);
        }
        self.inner.extents(offset, length, max)
    }
    fn metrics(&self) -> Vec<DeviceMetric> {
        let mut m = self.inner.metrics();
        m.extend([
            DeviceMetric {
                name: "power_loss_cached_bytes",
                help: "Bytes the power-loss simulation holds that are not on the device yet.",
                kind: MetricKind::Gauge,
                value: self.cached_bytes() as f64,
                labels: Vec::new(),
            },
            DeviceMetric {
                name: "power_loss_early_writes_total",
                help: "Cached writes the power-loss simulation wrote down before a flush.",
                kind: MetricKind::Counter,
                value: self.early_writes.load(Ordering::Relaxed) as f64,
                labels: Vec::new(),
            },
            DeviceMetric {
                name: "power_loss_torn_writes_total",
                help: "Cached writes the power-loss simulation wrote down only in part.",
                kind: MetricKind::Counter,
                value: self.torn_writes.load(Ordering::Relaxed) as f64,
                labels: Vec::new(),
            },
        ]);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn device(early: u8, torn: u8) -> (Arc<MemDevice>, PowerLossDevice) {
        let mem = Arc::new(MemDevice::new(1 << 20, false));
        let d = PowerLossDevice::new(
            Arc::clone(&mem) as Arc<dyn BlockDevice>,
            PowerLossConfig {
                seed: 7,
                early_write_percent: early,
                torn_percent: torn,
                max_cached_bytes: 1 << 20,
            },
        );
        (mem, d)
    }

    fn read(d: &dyn BlockDevice, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        d.read_at(&mut buf, offset).expect("read");
        buf
    }

    #[test]
    fn unflushed_writes_are_visible_then_lost() {
        let (mem, d) = device(0, 0);
        d.write_at(&[1; 4096], 0, false).expect("write");
        d.write_zeroes(
            1024,
            512,
            ZeroMode {
                may_trim: true,
                fast: false,
                fua: false,
            },
        )
        .expect("zero");
        let mut want = vec![1u8; 4096];
        want[1024..1536].fill(0);
        assert_eq!(read(&d, 0, 4096), want, "reads see cached writes");
        assert_eq!(
            read(mem.as_ref(), 0, 4096),
            vec![0; 4096],
            "not on the device yet"
        );
        let lost = d.power_loss();
        assert_eq!((lost.lost_writes, lost.lost_bytes), (2, 4096 + 512));
        assert_eq!(read(&d, 0, 4096), vec![0; 4096]);
    }

    #[test]
    fn early_writes_never_land_an_old_write_over_a_new_one() {
        let (_, d) = device(100, 50);
        for round in 0..200u8 {
            d.write_at(&[round; 2048], u64::from(round % 4) * 512, false)
                .expect("write");
            // Whatever was written down early, the device plus cache
            // always reads as the newest write.
            let got = read(&d, u64::from(round % 4) * 512, 2048);
            assert_eq!(got, vec![round; 2048], "round {round}");
        }
        assert!(d.early_writes.load(Ordering::Relaxed) > 100);
        assert!(d.torn_writes.load(Ordering::Relaxed) > 10);
        // After power loss every sector holds some value that was written
        // to it, never a blend inside a sector.
        d.power_loss();
        let got = read(&d, 0, 3584);
        for sector in got.chunks(512) {
            assert!(
                sector.iter().all(|&b| b == sector[0]),
                "torn inside a sector"
            );
        }
    }
}
