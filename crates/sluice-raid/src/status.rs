//! What an operator sees of a running array: [`RaidDevice::status`]
//! (`sluice raid status`) and the rebuild and scrub progress metrics.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use sluice_storage::{DeviceMetric, MetricKind};
use uuid::Uuid;

use crate::device::{RaidDevice, NO_MEMBER};
use crate::journal::{Journal, JournalReport};

/// The array's condition as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrayCondition {
    /// Every member active.
    Clean,
    /// A member missing or failed; running on parity.
    Degraded,
    /// A replacement member is being rebuilt.
    Rebuilding,
    /// More members lost than the level survives: requests fail.
    Failed,
}

/// One member's condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberCondition {
    /// In use.
    Active,
    /// No device was given for it.
    Missing,
    /// Marked failed: never read or written again.
    Failed,
    /// Being rebuilt: holds data only below the rebuild cursor.
    Rebuilding,
}

/// One member as [`RaidDevice::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberReport {
    /// Position in the array.
    pub index: usize,
    /// What it is called (its URI).
    pub name: String,
    /// Its condition.
    pub state: MemberCondition,
    /// The event counter of its superblock as last written (none for an
    /// array without superblocks).
    pub events: Option<u64>,
    /// Member reads issued.
    pub reads: u64,
    /// Member writes, trims and zeroings issued.
    pub writes: u64,
    /// Member requests that failed.
    pub errors: u64,
    /// Bytes read from it.
    pub read_bytes: u64,
    /// Bytes written to it.
    pub written_bytes: u64,
    /// When it last answered a request or probe well, in milliseconds
    /// since the Unix epoch (none if it never did).
    #[serde(default)]
    pub last_answer_unix_ms: Option<u64>,
    /// How long ago that was, in milliseconds.
    #[serde(default)]
    pub silent_ms: Option<u64>,
    /// Probes sent to it while it was idle.
    #[serde(default)]
    pub probes: u64,
}

/// How far a rebuild has come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebuildProgress {
    /// The member being rebuilt.
    pub member: usize,
    /// Bytes of the member rebuilt so far.
    pub done_bytes: u64,
    /// Bytes of array data on the member.
    pub total_bytes: u64,
    /// The rate limit, bytes per second (0: none).
    pub rate: u64,
}

/// How far the running (or last) scrub has come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubProgress {
    /// Still running.
    pub running: bool,
    /// Rewriting the parity of mismatched stripes.
    pub repair: bool,
    /// Stripes checked so far.
    pub done_stripes: u64,
    /// Stripes in the array.
    pub total_stripes: u64,
    /// Stripes whose parity did not match their data.
    pub mismatches: u64,
    /// Of those, stripes whose parity was rewritten.
    pub repaired: u64,
}

/// An array's state for operators (`sluice raid status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayStatus {
    /// `raid0` or `raid5`.
    pub level: String,
    /// Stripe unit in bytes.
    pub unit: u64,
    /// Volume size in bytes.
    pub size: u64,
    /// The array's uuid, if it has superblocks.
    pub array_uuid: Option<Uuid>,
    /// The condition of the whole.
    pub state: ArrayCondition,
    /// Every member, by index.
    pub members: Vec<MemberReport>,
    /// The rebuild under way, if any.
    pub rebuild: Option<RebuildProgress>,
    /// The running or last scrub, if any ran.
    pub scrub: Option<ScrubProgress>,
    /// The write-intent journal, if the array has one.
    #[serde(default)]
    pub journal: Option<JournalReport>,
}

impl RaidDevice {
    /// The array's level, members, their states and counters, and any
    /// rebuild or scrub progress.
    pub fn status(&self) -> ArrayStatus {
        let set = self.members.load();
        let rebuilding = self.rebuild.member.load(Ordering::SeqCst);
        let superblocks = self
            .superblocks
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).clone());
        let members = self
            .member_status()
            .into_iter()
            .enumerate()
            .map(|(index, m)| MemberReport {
                index,
                name: set.names[index].clone(),
                state: if !m.present {
                    MemberCondition::Missing
                } else if m.failed {
                    MemberCondition::Failed
                } else if index == rebuilding {
                    MemberCondition::Rebuilding
                } else {
                    MemberCondition::Active
                },
                events: superblocks
                    .as_ref()
                    .and_then(|s| s.get(index))
                    .map(|s| s.events),
                reads: m.reads,
                writes: m.writes,
                errors: m.errors,
                read_bytes: m.read_bytes,
                written_bytes: m.written_bytes,
                last_answer_unix_ms: self.last_answer_unix(index).map(|t| (t * 1000.0) as u64),
                silent_ms: self
                    .silent_for(index)
                    .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                probes: self.counters[index].probes.load(Ordering::Relaxed),
            })
            .collect();
        let failed = self.failed_count();
        let state = if self.lost() {
            ArrayCondition::Failed
        } else if rebuilding != NO_MEMBER {
            ArrayCondition::Rebuilding
        } else if failed > 0 {
            ArrayCondition::Degraded
        } else {
            ArrayCondition::Clean
        };
        let unit = self.geometry.unit();
        let scrub = &self.scrub;
        ArrayStatus {
            level: self.geometry.level().name().into(),
            unit,
            size: self.size,
            array_uuid: superblocks
                .as_ref()
                .and_then(|s| s.first())
                .map(|s| s.array_uuid),
            state,
            members,
            rebuild: (rebuilding != NO_MEMBER).then(|| RebuildProgress {
                member: rebuilding,
                done_bytes: self.rebuild.cursor.load(Ordering::SeqCst) * unit,
                total_bytes: self.stripes() * unit,
                rate: self.rebuild.rate.load(Ordering::SeqCst),
            }),
            scrub: scrub.ran.load(Ordering::SeqCst).then(|| ScrubProgress {
                running: scrub.running.load(Ordering::SeqCst),
                repair: scrub.repair.load(Ordering::SeqCst),
                done_stripes: scrub.done.load(Ordering::SeqCst),
                total_stripes: scrub.total.load(Ordering::SeqCst),
                mismatches: scrub.mismatches.load(Ordering::SeqCst),
                repaired: scrub.repaired.load(Ordering::SeqCst),
            }),
            journal: self.journal.as_ref().map(Journal::report),
        }
    }

    /// Rebuild and scrub progress as metrics.
    pub(crate) fn progress_metrics(&self) -> Vec<DeviceMetric> {
        let unit = self.geometry.unit();
        let rebuilding = self.rebuild.member.load(Ordering::SeqCst) != NO_MEMBER;
        let gauge = |name, help, value: u64| DeviceMetric {
            name,
            help,
            kind: MetricKind::Gauge,
            value: value as f64,
            labels: Vec::new(),
        };
        vec![
            gauge(
                "raid_rebuilding",
                "1 while a replaced member is being rebuilt",
                u64::from(rebuilding),
            ),
            gauge(
                "raid_rebuild_bytes",
                "Bytes of the member being (or last) rebuilt that hold current data",
                self.rebuild.cursor.load(Ordering::SeqCst) * unit,
            ),
            gauge(
                "raid_rebuild_total_bytes",
                "Bytes of array data on each member (what a rebuild writes)",
                self.stripes() * unit,
            ),
            gauge(
                "raid_scrub_stripes",
                "Stripes the running (or last) scrub has checked",
                self.scrub.done.load(Ordering::SeqCst),
            ),
            gauge(
                "raid_scrub_total_stripes",
                "Stripes the running (or last) scrub checks",
                self.scrub.total.load(Ordering::SeqCst),
            ),
            gauge(
                "raid_scrub_mismatches",
                "Stripes whose parity did not match their data in the running (or last) scrub",
                self.scrub.mismatches.load(Ordering::SeqCst),
            ),
        ]
    }
}
