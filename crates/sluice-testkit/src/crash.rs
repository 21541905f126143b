//! What a crash may and may not do to a volume: a model of expected
//! contents for crash-consistency tests, plus two devices that stand in
//! for a dead process and for a layer that forgot to sync.
//!
//! The model works in 512-byte sectors. Every write gets a fresh tag
//! (1, 2, ...; 0 is the zeroed initial state) and writes, into each
//! sector, bytes derived from the tag and the sector number, so a sector
//! read back after a crash names the write it came from — or shows it is
//! garbage. Per sector the model keeps the *floor* (the newest write
//! known durable: covered by an acknowledged FLUSH or itself FUA) and the
//! writes issued after it. After a crash each sector must hold the floor
//! or one of those later writes; anything older is acknowledged-and-
//! flushed data lost, anything else is a third value.
//!
//! Rule for callers: never have two writes to the same sector in flight
//! at once (NBD does not order them, so the model could not either).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_storage::{BlockDevice, DeviceError, Extent, IoOp, ZeroMode};
use sluice_types::splitmix64;

/// Bytes per modelled sector.
pub const SECTOR: usize = 512;

/// The bytes write `tag` puts into sector `sector` (tag 0: zeroes).
pub fn fill_sector(tag: u64, sector: u64, out: &mut [u8]) {
    debug_assert_eq!(out.len(), SECTOR);
    if tag == 0 {
        out.fill(0);
        return;
    }
    out[..8].copy_from_slice(&tag.to_le_bytes());
    out[8..16].copy_from_slice(&sector.to_le_bytes());
    let mut x = splitmix64(tag ^ sector.rotate_left(32));
    for chunk in out[16..].chunks_mut(8) {
        x = splitmix64(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// Which write a sector's bytes came from, or `None` for garbage.
pub fn decode_sector(sector: u64, bytes: &[u8]) -> Option<u64> {
    let tag = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    let mut want = [0u8; SECTOR];
    fill_sector(tag, sector, &mut want);
    (want[..] == bytes[..SECTOR]).then_some(tag)
}

#[derive(Debug, Clone, Default)]
struct SectorHistory {
    /// Newest write known durable.
    floor: u64,
    /// Writes issued after it, oldest first, with their acknowledgement
    /// number once acknowledged.
    later: Vec<(u64, Option<u64>)>,
}

/// A write the model is waiting to hear about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteTicket {
    /// Its tag.
    pub tag: u64,
    /// First sector.
    pub sector: u64,
    /// Sectors.
    pub count: u64,
}

/// A flush the model is waiting to hear about: covers every write
/// acknowledged before it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushTicket(u64);

/// One sector that broke the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Sector number.
    pub sector: u64,
    /// What it held: a write's tag, or `None` for bytes no write made.
    pub found: Option<u64>,
    /// The newest durable write.
    pub floor: u64,
    /// Writes it could also hold.
    pub allowed: Vec<u64>,
}

impl Violation {
    /// Acknowledged, flushed data was lost (an older write came back).
    pub fn lost_durable_data(&self) -> bool {
        matches!(self.found, Some(t) if t < self.floor)
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.found {
            None => write!(f, "sector {}: bytes no write produced", self.sector)?,
            Some(t) if t < self.floor => write!(
                f,
                "sector {}: durable write {} lost, found older write {t}",
                self.sector, self.floor
            )?,
            Some(t) => write!(f, "sector {}: unexpected write {t}", self.sector)?,
        }
        write!(f, " (floor {}, later {:?})", self.floor, self.allowed)
    }
}

/// What a check found.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Sectors compared.
    pub sectors: u64,
    /// Sectors that hold a write newer than their floor (allowed).
    pub newer_than_floor: u64,
    /// Rule breakers.
    pub violations: Vec<Violation>,
}

impl CheckReport {
    /// Bytes of acknowledged, flushed data that were lost.
    pub fn lost_durable_bytes(&self) -> u64 {
        self.violations
            .iter()
            .filter(|v| v.lost_durable_data())
            .count() as u64
            * SECTOR as u64
    }
}

/// Expected contents of a volume across crashes.
#[derive(Debug, Clone)]
pub struct DurabilityModel {
    sectors: Vec<SectorHistory>,
    /// Sectors with writes after their floor.
    open: BTreeSet<u64>,
    next_tag: u64,
    acks: u64,
}

impl DurabilityModel {
    /// A volume of `sectors` sectors, all zero and durable.
    pub fn new(sectors: u64) -> Self {
        Self {
            sectors: vec![SectorHistory::default(); sectors as usize],
            open: BTreeSet::new(),
            next_tag: 1,
            acks: 0,
        }
    }

    /// Sectors modelled.
    pub fn len(&self) -> u64 {
        self.sectors.len() as u64
    }

    /// Whether the model has no sectors.
    pub fn is_empty(&self) -> bool {
        self.sectors.is_empty()
    }

    /// Whether a sector has a write in flight (a new write there must wait).
    pub fn in_flight(&self, sector: u64) -> bool {
        self.sectors[sector as usize]
            .later
            .last()
            .is_some_and(|(_, ack)| ack.is_none())
    }

    /// Starts a write of `count` sectors at `sector`; fills `buf` (which
    /// must be `count * SECTOR` bytes) with what it writes.
    ///
    /// # Panics
    /// If a write to one of the sectors is still in flight.
    pub fn begin_write(&mut self, sector: u64, count: u64, buf: &mut [u8]) -> WriteTicket {
        let tag = self.next_tag;
        self.next_tag += 1;
        for (i, chunk) in buf.chunks_mut(SECTOR).enumerate() {
            let s = sector + i as u64;
            assert!(
                !self.in_flight(s),
                "overlapping writes in flight at sector {s}"
            );
            fill_sector(tag, s, chunk);
            self.sectors[s as usize].later.push((tag, None));
            self.open.insert(s);
        }
        WriteTicket { tag, sector, count }
    }

    /// The write was acknowledged; with `fua` it is durable.
    pub fn write_acked(&mut self, w: WriteTicket, fua: bool) {
        self.acks += 1;
        for s in w.sector..w.sector + w.count {
            let h = &mut self.sectors[s as usize];
            let Some(pos) = h.later.iter().position(|(t, _)| *t == w.tag) else {
                continue;
            };
            h.later[pos].1 = Some(self.acks);
            if fua {
                h.floor = w.tag;
                h.later.drain(..=pos);
                if h.later.is_empty() {
                    self.open.remove(&s);
                }
            }
        }
    }

    /// A write failed with an error: it may or may not have landed, so it
    /// stays allowed until the next check.
    pub fn write_failed(&mut self, w: WriteTicket) {
        // Mark it acknowledged (never durable) so later writes may go to
        // the same sectors; it can only be superseded, not made durable,
        // because flushes only promote writes acknowledged as successes.
        for s in w.sector..w.sector + w.count {
            let h = &mut self.sectors[s as usize];
            if let Some(e) = h.later.iter_mut().find(|(t, _)| *t == w.tag) {
                e.1 = Some(u64::MAX);
            }
        }
    }

    /// A flush is being sent.
    pub fn begin_flush(&self) -> FlushTicket {
        FlushTicket(self.acks)
    }

    /// The flush was acknowledged: every write acknowledged before it was
    /// sent is durable.
    pub fn flush_acked(&mut self, f: FlushTicket) {
        let mut closed = Vec::new();
        for &s in &self.open {
            let h = &mut self.sectors[s as usize];
            if let Some(pos) = h
                .later
                .iter()
                .rposition(|(_, a)| a.is_some_and(|a| a <= f.0))
            {
                h.floor = h.later[pos].0;
                h.later.drain(..=pos);
                if h.later.is_empty() {
                    closed.push(s);
                }
            }
        }
        for s in closed {
            self.open.remove(&s);
        }
    }

    /// Compares the volume's contents after a crash (`image`, the whole
    /// volume) with the model, then takes what was found as the new
    /// durable state (it was read back from the restarted store).
    pub fn check_after_crash(&mut self, image: &[u8]) -> CheckReport {
        assert_eq!(image.len() as u64, self.len() * SECTOR as u64, "image size");
        let mut report = CheckReport {
            sectors: self.len(),
            ..CheckReport::default()
        };
        for (i, bytes) in image.chunks(SECTOR).enumerate() {
            let s = i as u64;
            let h = &mut self.sectors[i];
            let found = decode_sector(s, bytes);
            let ok = match found {
                Some(t) if t == h.floor => true,
                Some(t) if h.later.iter().any(|(l, _)| *l == t) => {
                    report.newer_than_floor += 1;
                    true
                }
                _ => false,
            };
            if !ok {
                report.violations.push(Violation {
                    sector: s,
                    found,
                    floor: h.floor,
                    allowed: h.later.iter().map(|(t, _)| *t).collect(),
                });
            }
            // What is on the store now is what later crashes start from
            // (garbage stays garbage: it is already reported).
            h.floor = found.unwrap_or(h.floor);
            h.later.clear();
        }
        self.open.clear();
        report
    }
}

/// Stands for the death of the process above it: after [`kill`], every
/// call fails, so nothing the upper layers still hold reaches the device
/// (their shutdown code runs, but its writes go nowhere).
///
/// [`kill`]: KillSwitchDevice::kill
#[derive(Debug)]
pub struct KillSwitchDevice {
    inner: Arc<dyn BlockDevice>,
    dead: AtomicBool,
}

impl KillSwitchDevice {
    /// Passes everything to `inner` until killed.
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        Self {
            inner,
            dead: AtomicBool::new(false),
        }
    }

    /// From now on every call fails.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn alive(&self, op: IoOp) -> Result<(), DeviceError> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(DeviceError::Io {
                device: "killed process".into(),
                op,
                offset: 0,
                len: 0,
                source: std::io::Error::other("the process is dead"),
            });
        }
        Ok(())
    }
}

impl sluice_storage::DeviceLayer for KillSwitchDevice {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.alive(IoOp::Read)?;
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.alive(IoOp::Write)?;
        self.inner.write_at(buf, offset, fua)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.alive(IoOp::Flush)?;
        self.inner.flush()
    }
    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.alive(IoOp::Trim)?;
        self.inner.trim(offset, length, fua)
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.alive(IoOp::WriteZeroes)?;
        self.inner.write_zeroes(offset, length, mode)
    }
    fn extents(&self, offset: u64, length: u64, max: usize) -> Result<Vec<Extent>, DeviceError> {
        self.alive(IoOp::Extents)?;
        self.inner.extents(offset, length, max)
    }
    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.alive(IoOp::Cache)?;
        self.inner.cache(offset, length)
    }
}

/// A layer with its fsync deleted: `flush` returns success without
/// passing down, and FUA writes go down as plain writes. The bug the
/// power-loss simulation must catch.
#[derive(Debug)]
pub struct SkipFlushDevice {
    inner: Arc<dyn BlockDevice>,
}

impl SkipFlushDevice {
    /// Wraps `inner`, dropping its syncs.
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        Self { inner }
    }
}

impl sluice_storage::DeviceLayer for SkipFlushDevice {
    fn inner(&self) -> &dyn BlockDevice {
        self.inner.as_ref()
    }
    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> Result<(), DeviceError> {
        self.inner.write_at(buf, offset, false)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn trim(&self, offset: u64, length: u64, _fua: bool) -> Result<(), DeviceError> {
        self.inner.trim(offset, length, false)
    }
    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.inner
            .write_zeroes(offset, length, ZeroMode { fua: false, ..mode })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(m: &mut DurabilityModel, sector: u64, count: u64) -> (WriteTicket, Vec<u8>) {
        let mut buf = vec![0u8; count as usize * SECTOR];
        let w = m.begin_write(sector, count, &mut buf);
        (w, buf)
    }

    #[test]
    fn sectors_name_their_write() {
        let mut b = [0u8; SECTOR];
        fill_sector(77, 5, &mut b);
        assert_eq!(decode_sector(5, &b), Some(77));
        assert_eq!(decode_sector(6, &b), None, "right write, wrong place");
        b[300] ^= 1;
        assert_eq!(decode_sector(5, &b), None);
        assert_eq!(decode_sector(9, &[0; SECTOR]), Some(0));
    }

    #[test]
    fn flushed_writes_must_survive_and_others_may_not() {
        let mut m = DurabilityModel::new(4);
        let (a, a_bytes) = write(&mut m, 0, 2);
        m.write_acked(a, false);
        let f = m.begin_flush();
        let (b, b_bytes) = write(&mut m, 1, 2); // after the flush was sent
        m.flush_acked(f);
        m.write_acked(b, false);
        // Image: sector 0 = a, sector 1 = a (b lost: fine), 2 = zero (b lost: fine).
        let mut image = vec![0u8; 4 * SECTOR];
        image[..2 * SECTOR].copy_from_slice(&a_bytes);
        let r = m.clone().check_after_crash(&image);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        // b landed in sector 1 only: still fine.
        image[SECTOR..2 * SECTOR].copy_from_slice(&b_bytes[..SECTOR]);
        let r = m.clone().check_after_crash(&image);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.newer_than_floor, 1);
        // a lost from sector 0: durable data lost.
        image[..SECTOR].fill(0);
        let r = m.clone().check_after_crash(&image);
        assert_eq!(r.violations.len(), 1);
        assert!(r.violations[0].lost_durable_data(), "{}", r.violations[0]);
        assert_eq!(r.lost_durable_bytes(), SECTOR as u64);
        // Garbage in sector 3.
        image[..SECTOR].copy_from_slice(&a_bytes[..SECTOR]);
        image[3 * SECTOR] = 1;
        let r = m.check_after_crash(&image);
        assert_eq!(r.violations.len(), 1);
        assert_eq!(r.violations[0].found, None);
    }

    #[test]
    fn fua_is_durable_alone_and_checks_carry_over() {
        let mut m = DurabilityModel::new(1);
        let (a, a_bytes) = write(&mut m, 0, 1);
        m.write_acked(a, true);
        let r = m.check_after_crash(&[0u8; SECTOR]);
        assert!(r.violations[0].lost_durable_data());
        // The zeroes found become the new state.
        let (b, _) = write(&mut m, 0, 1);
        m.write_acked(b, false);
        assert!(m.check_after_crash(&[0u8; SECTOR]).violations.is_empty());
        assert!(!a_bytes.is_empty());
    }

    #[test]
    #[should_panic(expected = "overlapping writes")]
    fn overlapping_writes_in_flight_are_refused() {
        let mut m = DurabilityModel::new(4);
        let _a = write(&mut m, 0, 2);
        let _b = write(&mut m, 1, 2);
    }
}
