//! Scrubbing: checking (and repairing) every stripe's parity against
//! its data while the array serves. The rules are in the `rebuild`
//! module's documentation and docs/RAID.md.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::device::{Outcome, RaidDevice, RaidError, NO_MEMBER};
use crate::fan_out::{MemberIo, MemberOp};
use crate::layout::RaidLevel;
use crate::parity::xor_into;
use crate::rebuild::pace;

/// What a finished scrub found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Stripes checked.
    pub stripes: u64,
    /// Stripes whose parity did not match their data.
    pub mismatches: u64,
    /// Stripes whose parity was rewritten (with repair).
    pub repaired: u64,
}

/// Clears the scrub's running flag however the scrub ends.
struct ScrubRunning<'a>(&'a RaidDevice);

impl Drop for ScrubRunning<'_> {
    fn drop(&mut self) {
        self.0.scrub.running.store(false, Ordering::SeqCst);
    }
}

impl RaidDevice {
    /// Reads every stripe, checks its parity against its data (RAID 1:
    /// the mirrors against each other) and, with `repair`, rewrites the
    /// parity (the mirrors that differ from member 0) of the stripes
    /// that differ. Runs on
    /// the caller's thread at the rebuild rate; progress shows in
    /// [`Self::status`] meanwhile. Needs a RAID 1 or 5 array with every
    /// member active and no rebuild or other scrub running.
    pub fn scrub(&self, repair: bool) -> Result<ScrubReport, RaidError> {
        if self.geometry.tolerance() == 0 {
            return Err(RaidError::Refused(
                "a RAID 0 array has no parity to scrub".into(),
            ));
        }
        if self.failed_count() > 0 || self.rebuild.member.load(Ordering::SeqCst) != NO_MEMBER {
            return Err(RaidError::Refused(
                "the array is degraded or rebuilding: scrubbing needs every member active".into(),
            ));
        }
        if self.scrub.running.swap(true, Ordering::SeqCst) {
            return Err(RaidError::Refused("a scrub is already running".into()));
        }
        let _running = ScrubRunning(self);
        let state = &self.scrub;
        let stripes = self.stripes();
        state.total.store(stripes, Ordering::SeqCst);
        for c in [&state.done, &state.mismatches, &state.repaired] {
            c.store(0, Ordering::SeqCst);
        }
        state.repair.store(repair, Ordering::SeqCst);
        state.ran.store(true, Ordering::SeqCst);
        let unit = self.geometry.unit();
        let n = self.counters.len();
        let mut first = 0;
        while first < stripes {
            let started = self.clock.now();
            let end = stripes.min(first + self.run_stripes());
            let len = ((end - first) * unit) as usize;
            let stopped = |source| RaidError::ScrubStopped {
                stripe: first,
                source,
            };
            {
                let _locks = self.lock_stripes(first..end);
                let mut bufs = vec![vec![0u8; len]; n];
                let mut step: Vec<MemberIo<'_>> = bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(m, buf)| {
                        MemberIo::new(
                            m,
                            MemberOp::Read {
                                buf,
                                offset: first * unit,
                            },
                        )
                    })
                    .collect();
                if let Outcome::Retry = self.run(&mut step).map_err(stopped)? {
                    return Err(stopped(self.array_failed(
                        sluice_storage::IoOp::Read,
                        first * unit,
                        len as u64,
                    )));
                }
                drop(step);
                let mut fixes = Vec::new();
                let mut stripes_off = 0;
                for s in first..end {
                    let at = ((s - first) * unit) as usize..((s - first + 1) * unit) as usize;
                    let found = self.stripe_fixes(s, &bufs, at);
                    if !found.is_empty() {
                        state.mismatches.fetch_add(1, Ordering::SeqCst);
                        stripes_off += 1;
                    }
                    fixes.extend(found.into_iter().map(|(m, b)| (s, m, b)));
                }
                if repair && !fixes.is_empty() {
                    let mut step: Vec<MemberIo<'_>> = fixes
                        .iter()
                        .map(|(s, member, right)| {
                            MemberIo::new(
                                *member,
                                MemberOp::Write {
                                    buf: right,
                                    offset: s * unit,
                                    fua: false,
                                },
                            )
                        })
                        .collect();
                    if let Outcome::Retry = self.run(&mut step).map_err(stopped)? {
                        return Err(stopped(self.array_failed(
                            sluice_storage::IoOp::Write,
                            first * unit,
                            len as u64,
                        )));
                    }
                    state.repaired.fetch_add(stripes_off, Ordering::SeqCst);
                }
            }
            state.done.store(end, Ordering::SeqCst);
            pace(
                &*self.clock,
                len as u64,
                self.rebuild.rate.load(Ordering::SeqCst),
                started,
            );
            first = end;
        }
        if repair && state.repaired.load(Ordering::SeqCst) > 0 {
            use sluice_storage::BlockDevice;
            self.flush().map_err(|source| RaidError::ScrubStopped {
                stripe: stripes,
                source,
            })?;
        }
        Ok(ScrubReport {
            stripes,
            mismatches: state.mismatches.load(Ordering::SeqCst),
            repaired: state.repaired.load(Ordering::SeqCst),
        })
    }

    /// What stripe `s` (its chunks at `at` in each member's buffer of
    /// `bufs`) needs rewritten to be consistent, as (member, right
    /// contents): RAID 5, the parity from the data; RAID 1 and 10, every
    /// mirror that differs from the first member of its set (as md, the
    /// first member is taken as right). Logged.
    fn stripe_fixes(
        &self,
        s: u64,
        bufs: &[Vec<u8>],
        at: std::ops::Range<usize>,
    ) -> Vec<(usize, Vec<u8>)> {
        if self.geometry.mirrored() {
            // Each mirror set against its first member.
            let mut fixes = Vec::new();
            for first in (0..bufs.len()).step_by(self.geometry.copies()) {
                let right = &bufs[first][at.clone()];
                let differ: Vec<usize> = self
                    .geometry
                    .mirror_set(first)
                    .filter(|&m| bufs[m][at.clone()] != *right)
                    .collect();
                if !differ.is_empty() {
                    tracing::warn!(array = %self.label, stripe = s, members = ?differ,
                        "scrub: mirrors differ from member {first}");
                }
                fixes.extend(differ.into_iter().map(|m| (m, right.to_vec())));
            }
            return fixes;
        }
        if self.geometry.level() == RaidLevel::Raid6 {
            return self.pq_fixes(s, bufs, at);
        }
        let n = bufs.len();
        let parity = self.geometry.parity_member(s).unwrap_or(n - 1);
        let mut sum = vec![0u8; at.len()];
        for (m, b) in bufs.iter().enumerate() {
            if m != parity {
                xor_into(&mut sum, &b[at.clone()]);
            }
        }
        if sum == bufs[parity][at] {
            return Vec::new();
        }
        tracing::warn!(array = %self.label, stripe = s, parity_member = parity,
            "scrub: parity does not match the data");
        vec![(parity, sum)]
    }
}
