//! Noticing a dead member while the array is idle.
//!
//! A member's requests fail only when something is asked of it: a
//! remote member whose server died keeps trying to reconnect for its
//! reconnect window, and an array nobody reads or writes would show it
//! active all along. So every member that has not answered for a probe
//! interval is sent a cheap request (a read of its first block: the
//! superblock area, never the data) from a background thread
//! ([`RaidDevice::start_probing`]); a member that answers it is fine,
//! and one whose probe fails as a member failure (an I/O error: its
//! reconnect window ran out, or its request timed out) is marked failed
//! exactly as a failed read would mark it. A redundant array then runs
//! degraded, and `raid status` says so, without any I/O.
//!
//! Every good answer (to a request or a probe) records its time; the
//! status and the metrics show it per member, so an operator sees how
//! long a member has been silent before its window runs out.
//!
//! The thread sleeps on the array's [`Clock`](crate::Clock), so tests
//! drive it with a [`ManualClock`](crate::ManualClock) and wait for it
//! to sleep again rather than sleeping themselves.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

use sluice_storage::DeviceError;

use crate::device::RaidDevice;
use crate::fan_out::{MemberIo, MemberOp};

/// How often idle members are probed, unless the array is told
/// otherwise: a dead member is marked failed within this plus its
/// reconnect window.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(1);

impl RaidDevice {
    /// Records a good answer from `member` now.
    pub(crate) fn answered(&self, member: usize) {
        self.answered_at(member, self.clock.now());
    }

    pub(crate) fn answered_at(&self, member: usize, at: Instant) {
        let since = at.saturating_duration_since(self.epoch);
        // Stored one past the nanoseconds, so that 0 means never.
        let nanos = u64::try_from(since.as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1);
        self.counters[member]
            .last_answer
            .fetch_max(nanos, Ordering::Relaxed);
    }

    /// When `member` last answered well, on the array's clock (`None`:
    /// never, as for a member missing at start).
    pub(crate) fn last_answer(&self, member: usize) -> Option<Instant> {
        match self.counters[member].last_answer.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(self.epoch + Duration::from_nanos(nanos - 1)),
        }
    }

    /// How long ago `member` last answered well (`None`: never).
    pub(crate) fn silent_for(&self, member: usize) -> Option<Duration> {
        self.last_answer(member)
            .map(|at| self.clock.now().saturating_duration_since(at))
    }

    /// The wall-clock time `member` last answered well, as seconds since
    /// the Unix epoch (`None`: never).
    pub(crate) fn last_answer_unix(&self, member: usize) -> Option<f64> {
        let ago = self.silent_for(member)?;
        let at = SystemTime::now().checked_sub(ago)?;
        at.duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs_f64())
    }

    /// Starts the background thread that probes idle members every
    /// `interval` (see the module documentation); it stops once the
    /// array is dropped. Returns false if it was already running or
    /// `interval` is zero (probing off).
    pub fn start_probing(self: &Arc<Self>, interval: Duration) -> bool {
        if interval.is_zero() || self.probing.swap(true, Ordering::SeqCst) {
            return false;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        let clock = Arc::clone(&self.clock);
        let spawned = std::thread::Builder::new()
            .name("raid-probe".into())
            .spawn(move || loop {
                clock.sleep(interval);
                let Some(array) = weak.upgrade() else {
                    return;
                };
                array.probe_idle(interval);
            });
        if let Err(e) = spawned {
            tracing::warn!(array = %self.label, error = %e, "cannot start the member probe thread");
            self.probing.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Probes, all at once, every member in use that has not answered
    /// for `idle`; marks failed (on a redundant array) each one whose
    /// probe fails with a member fault. Returns how many were probed.
    pub fn probe_idle(&self, idle: Duration) -> usize {
        let set = self.members.load();
        let probed: Vec<usize> = (0..set.devices.len())
            .filter(|&m| set.devices[m].is_some() && self.alive(m))
            .filter(|&m| self.silent_for(m).is_none_or(|t| t >= idle))
            .collect();
        if probed.is_empty() {
            return 0;
        }
        let len = (self.capability.min_block as usize).max(512);
        let mut bufs = vec![vec![0u8; len]; probed.len()];
        let mut step: Vec<MemberIo<'_>> = probed
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&m, buf)| MemberIo::new(m, MemberOp::Read { buf, offset: 0 }))
            .collect();
        for &m in &probed {
            self.counters[m].probes.fetch_add(1, Ordering::Relaxed);
        }
        self.fan_out.submit(&set.devices, &mut step);
        for io in step {
            let member = io.member;
            let e = match io.result {
                Ok(()) => {
                    self.answered(member);
                    continue;
                }
                // The member answered, if not with data: it is there.
                Err(e) if !matches!(e, DeviceError::Io { .. }) => {
                    self.answered(member);
                    continue;
                }
                // Its server refuses connections but the member's client
                // is still within its reconnect window: an idle array
                // waits the window out, so a member server restarted
                // while nothing is written comes back as it was. A
                // request (a write) does not wait: see `step.rs`.
                Err(DeviceError::Io { source, .. })
                    if source.kind() == io::ErrorKind::ConnectionRefused =>
                {
                    continue;
                }
                Err(e) => e,
            };
            self.counters[member].errors.fetch_add(1, Ordering::Relaxed);
            let now = self.members.load();
            let same = match (&set.devices[member], &now.devices[member]) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            };
            if !same || self.geometry.tolerance() == 0 {
                // Replaced meanwhile, or an array that cannot lose a
                // member: its next request decides.
                tracing::warn!(array = %self.label, member, name = %set.names[member],
                    error = &e as &dyn std::error::Error, "member did not answer a probe");
                continue;
            }
            if self.mark_failed(member) {
                // The same line as a failed request's: one event, one
                // message, however it was noticed.
                tracing::warn!(array = %self.label, member, name = %set.names[member],
                    error = &e as &dyn std::error::Error, noticed_by = "probe",
                    "member failed; continuing degraded");
            }
        }
        probed.len()
    }
}
