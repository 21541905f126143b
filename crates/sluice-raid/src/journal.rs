//! The write-intent journal that closes the RAID 5 write hole.
//!
//! A partial-stripe write changes a data chunk and the parity chunk with
//! two member writes that cannot be made atomic. If the server dies
//! between them the stripe's parity no longer matches its data, and once
//! a member is lost, the blocks rebuilt from that parity are wrong, even
//! blocks nobody was writing. The journal records, on the server's own
//! disk and durably, which stripes may be in that state: a stripe is
//! added before the first member write of a partial-stripe write to it,
//! and the array's assembly recomputes the parity of every stripe the
//! journal holds (from the data chunks, all members present) before it
//! serves a request. docs/design/0007-raid-write-hole.md has the protocol
//! and why each crash point is safe.
//!
//! # Format
//!
//! The journal is a small fixed-size device (a file): a header naming
//! the array, then two slots. Each commit writes the whole set of
//! stripes the journal holds, with a sequence number one past the last,
//! into the slot the last commit did not use, and syncs it; the set on
//! record is the valid slot with the highest sequence number. A commit
//! torn by a crash fails its checksum and the other slot, the previous
//! set, still holds every stripe whose member writes could have started.
//! Big-endian, like the superblock:
//!
//! ```text
//! header, at 0:              slot, at 4096 and 4096 + SLOT_BYTES:
//!  0  magic "SLUICEWJ"        0  magic "SLUICEWS"
//!  8  version (u32)           8  sequence (u64)
//! 12  reserved (u32)         16  stripes (u32)
//! 16  array uuid (16)        20  stripe numbers (u64 each)
//! 32  slot bytes (u64)       20+8n  crc32 of bytes [0, 20+8n)
//! 40  crc32 of [0, 40)
//! ```
//!
//! # Cost
//!
//! A stripe stays in the journal after its write finished (like a bit of
//! md's write-intent bitmap), so further writes to it need no journal
//! I/O; writes to stripes not yet in it wait for one commit, and every
//! write arriving while a commit is under way goes into the next one
//! (group commit): one write and one sync serve all of them. When the
//! set outgrows [`MAX_LOGGED`], the next commit keeps only the stripes
//! with writes in flight. Full-stripe writes need no entry: they leave
//! no block of the stripe that was not being written.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use sluice_storage::{
    BlockDevice, DeviceError, DeviceMetric, FileDevice, FileOptions, MetricKind, OpenError,
};
use thiserror::Error;
use uuid::Uuid;

/// First bytes of the journal header.
pub const HEADER_MAGIC: [u8; 8] = *b"SLUICEWJ";
/// First bytes of a slot.
pub const SLOT_MAGIC: [u8; 8] = *b"SLUICEWS";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes before the first slot.
pub const HEADER_BYTES: u64 = 4096;
/// Bytes of each slot.
pub const SLOT_BYTES: u64 = 64 << 10;
/// Bytes of a journal device.
pub const JOURNAL_BYTES: u64 = HEADER_BYTES + 2 * SLOT_BYTES;
/// Stripes a slot can hold.
pub const SLOT_CAPACITY: usize = ((SLOT_BYTES - 24) / 8) as usize;
/// Stripes the journal keeps before a commit drops those not being
/// written (bounds the resync after a crash; the writes in flight, at
/// most one per stripe lock, always fit).
pub const MAX_LOGGED: usize = 4096;

const HEADER_LEN: usize = 44;

/// Where an array keeps its journal.
#[derive(Debug, Clone)]
pub enum JournalPlace {
    /// No journal: a crash during a partial-stripe write can leave a
    /// stripe whose parity does not match (the write hole).
    Off,
    /// This file (created if missing).
    File(PathBuf),
    /// A file in this folder (created if missing) named after the
    /// array's uuid, `raid-UUID.journal`.
    Dir(PathBuf),
    /// This device (tests).
    Device {
        /// The journal device, at least [`JOURNAL_BYTES`].
        device: Arc<dyn BlockDevice>,
        /// What messages call it.
        name: String,
    },
}

impl JournalPlace {
    /// Opens the journal here for the array `array` (see
    /// [`Journal::open`]), or `None` when off.
    pub(crate) fn open(&self, array: Uuid) -> Result<Option<OpenedJournal>, JournalError> {
        let path = match self {
            Self::Off => return Ok(None),
            Self::Device { device, name } => {
                return Journal::open(Arc::clone(device), name, array).map(Some)
            }
            Self::File(path) => path.clone(),
            Self::Dir(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| JournalError::Folder {
                    path: dir.clone(),
                    source,
                })?;
                dir.join(format!("raid-{array}.journal"))
            }
        };
        let device = FileDevice::open(
            &path,
            &FileOptions {
                read_only: false,
                direct: false,
                size: Some(JOURNAL_BYTES),
            },
        )
        .map_err(JournalError::Open)?;
        Journal::open(Arc::new(device), &path.display().to_string(), array).map(Some)
    }
}

/// A journal just opened, and what it held.
#[derive(Debug)]
pub(crate) struct OpenedJournal {
    pub(crate) journal: Journal,
    /// Stripes to resync before the array serves.
    pub(crate) stripes: Vec<u64>,
    /// The journal was created now (it knows nothing of earlier runs).
    pub(crate) created: bool,
}

/// Why a journal cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JournalError {
    /// The journal holds another array's stripes.
    #[error("journal {name} belongs to array {found}, not to this array ({expected}); give this array its own journal (journal=PATH), or remove the file if that array is gone")]
    Foreign {
        name: String,
        found: Uuid,
        expected: Uuid,
    },
    /// The journal header does not decode.
    #[error("journal {name} has a damaged header: {reason}")]
    Damaged { name: String, reason: String },
    /// The journal file cannot be opened or created.
    #[error("cannot open the RAID journal")]
    Open(#[source] OpenError),
    /// The journal's folder cannot be created.
    #[error("cannot create the RAID journal folder {path}")]
    Folder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The journal device is too small.
    #[error("journal {name} is {size} bytes, fewer than the {JOURNAL_BYTES} a journal needs")]
    TooSmall { name: String, size: u64 },
    /// The commit a write waited for failed (the cause is its error).
    #[error(transparent)]
    Commit(Arc<Self>),
    /// Reading, writing or syncing the journal failed.
    #[error("journal {name}: cannot {doing}")]
    Io {
        name: String,
        doing: &'static str,
        #[source]
        source: DeviceError,
    },
}

/// The journal's state as `sluice raid status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalReport {
    /// Where the journal is (its path).
    pub path: String,
    /// Stripes it holds: their parity is recomputed if the server stops
    /// uncleanly.
    pub dirty_stripes: u64,
    /// Of those, stripes with partial-stripe writes under way.
    pub writing_stripes: u64,
    /// Commits since the array was opened.
    pub commits: u64,
    /// Stripes resynced when the array was opened.
    pub resynced: u64,
}

/// The journal's counters, for metrics.
#[derive(Debug, Default)]
pub(crate) struct JournalCounters {
    /// Stripes added to the journal.
    entries: AtomicU64,
    /// Partial-stripe writes whose stripe was in the journal already.
    hits: AtomicU64,
    /// Commits (one write and one sync of the journal each).
    commits: AtomicU64,
    /// Bytes written to the journal.
    bytes: AtomicU64,
    /// Stripes whose parity was recomputed after an unclean shutdown.
    pub(crate) resynced: AtomicU64,
}

/// What the journal holds and the commit under way.
#[derive(Debug, Default)]
struct JournalState {
    /// Stripes in the journal (or going in): the commit that records
    /// each.
    logged: HashMap<u64, u64>,
    /// Partial-stripe writes under way, per stripe.
    in_flight: HashMap<u64, u32>,
    /// The commit entries added now go into.
    next_commit: u64,
    /// Every commit up to this one is durable.
    durable: u64,
    /// A commit is being written.
    committing: bool,
    /// The last commit that failed, and why.
    failed: Option<(u64, Arc<JournalError>)>,
    /// Sequence number of the last slot written.
    sequence: u64,
}

/// An open journal (see the module documentation).
#[derive(Debug)]
pub(crate) struct Journal {
    device: Arc<dyn BlockDevice>,
    /// What messages call it (its path).
    pub(crate) name: String,
    state: Mutex<JournalState>,
    committed: Condvar,
    pub(crate) counters: JournalCounters,
}

/// A partial-stripe write the journal knows of; dropping it says the
/// write's member requests are done.
#[derive(Debug)]
pub(crate) struct Intent<'a> {
    journal: &'a Journal,
    stripe: u64,
}

impl Drop for Intent<'_> {
    fn drop(&mut self) {
        let mut state = self.journal.lock();
        if let Some(n) = state.in_flight.get_mut(&self.stripe) {
            *n -= 1;
            if *n == 0 {
                state.in_flight.remove(&self.stripe);
            }
        }
    }
}

impl Journal {
    /// Opens the journal on `device` for the array `array`: a device
    /// that was never a journal (all zeroes) gets a fresh header; one of
    /// another array is refused.
    pub(crate) fn open(
        device: Arc<dyn BlockDevice>,
        name: &str,
        array: Uuid,
    ) -> Result<OpenedJournal, JournalError> {
        let io = |doing, source| JournalError::Io {
            name: name.to_owned(),
            doing,
            source,
        };
        if device.size() < JOURNAL_BYTES {
            return Err(JournalError::TooSmall {
                name: name.to_owned(),
                size: device.size(),
            });
        }
        let mut header = vec![0u8; HEADER_LEN];
        device
            .read_at(&mut header, 0)
            .map_err(|e| io("read its header", e))?;
        let mut stripes = Vec::new();
        let mut sequence = 0;
        let created = header.iter().all(|&b| b == 0);
        if created {
            device
                .write_at(&encode_header(array), 0, false)
                .map_err(|e| io("write its header", e))?;
            device.flush().map_err(|e| io("sync its header", e))?;
        } else {
            let found = decode_header(&header).map_err(|reason| JournalError::Damaged {
                name: name.to_owned(),
                reason,
            })?;
            if found != array {
                return Err(JournalError::Foreign {
                    name: name.to_owned(),
                    found,
                    expected: array,
                });
            }
            let mut slot = vec![0u8; SLOT_BYTES as usize];
            for index in 0..2 {
                device
                    .read_at(&mut slot, slot_offset(index))
                    .map_err(|e| io("read a slot", e))?;
                if let Some((seq, set)) = decode_slot(&slot) {
                    if seq > sequence {
                        sequence = seq;
                        stripes = set;
                    }
                }
            }
        }
        stripes.sort_unstable();
        stripes.dedup();
        let journal = Self {
            device,
            name: name.to_owned(),
            state: Mutex::new(JournalState {
                sequence,
                next_commit: 1,
                ..JournalState::default()
            }),
            committed: Condvar::new(),
            counters: JournalCounters::default(),
        };
        Ok(OpenedJournal {
            journal,
            stripes,
            created,
        })
    }

    fn lock(&self) -> MutexGuard<'_, JournalState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that a partial-stripe write of `stripe` is about to
    /// start, returning once the stripe is durably in the journal.
    pub(crate) fn begin(&self, stripe: u64) -> Result<Intent<'_>, JournalError> {
        let mut state = self.lock();
        *state.in_flight.entry(stripe).or_insert(0) += 1;
        let intent = Intent {
            journal: self,
            stripe,
        };
        let mut added = false;
        loop {
            let commit = match state.logged.get(&stripe) {
                Some(&c) if c <= state.durable => {
                    let counter = if added {
                        &self.counters.entries
                    } else {
                        &self.counters.hits
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    drop(state);
                    return Ok(intent);
                }
                Some(&c) => c,
                None => {
                    let c = state.next_commit;
                    state.logged.insert(stripe, c);
                    added = true;
                    c
                }
            };
            if !state.committing {
                state = self.commit(state);
            } else {
                state = self
                    .committed
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
            if let Some((failed, why)) = &state.failed {
                if *failed == commit && !state.logged.contains_key(&stripe) {
                    let why = Arc::clone(why);
                    drop(state);
                    return Err(JournalError::Commit(why));
                }
            }
        }
    }

    /// Writes and syncs the next commit (everything logged so far),
    /// with the lock released while the journal device works.
    fn commit<'a>(
        &'a self,
        mut state: MutexGuard<'a, JournalState>,
    ) -> MutexGuard<'a, JournalState> {
        state.committing = true;
        let commit = state.next_commit;
        state.next_commit += 1;
        if state.logged.len() > MAX_LOGGED {
            let JournalState {
                logged, in_flight, ..
            } = &mut *state;
            logged.retain(|s, _| in_flight.contains_key(s));
        }
        state.sequence += 1;
        let sequence = state.sequence;
        let stripes: Vec<u64> = state.logged.keys().copied().collect();
        drop(state);
        let result = self.write_slot(sequence, &stripes);
        let mut state = self.lock();
        state.committing = false;
        match result {
            Ok(()) => state.durable = commit,
            Err(e) => {
                tracing::error!(journal = %self.name, error = &e as &dyn std::error::Error,
                    "cannot commit the RAID journal; the writes waiting for it fail");
                // The next commit goes to the slot this one may have torn,
                // never over the last good one.
                state.sequence -= 1;
                state.logged.retain(|_, c| *c != commit);
                state.failed = Some((commit, Arc::new(e)));
            }
        }
        self.committed.notify_all();
        state
    }

    fn write_slot(&self, sequence: u64, stripes: &[u64]) -> Result<(), JournalError> {
        let slot = encode_slot(sequence, stripes);
        self.device
            .write_at(&slot, slot_offset((sequence % 2) as usize), false)
            .map_err(|source| JournalError::Io {
                name: self.name.clone(),
                doing: "write a commit",
                source,
            })?;
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(slot.len() as u64, Ordering::Relaxed);
        self.device.flush().map_err(|source| JournalError::Io {
            name: self.name.clone(),
            doing: "sync a commit",
            source,
        })
    }

    /// Empties the journal (after a resync, or once every member has
    /// flushed at a clean close): no stripe needs resyncing now.
    pub(crate) fn clear(&self) -> Result<(), JournalError> {
        let mut state = self.lock();
        while state.committing {
            state = self
                .committed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        // Held across the write: nothing else commits meanwhile (this
        // runs when the array opens or closes, with no writes to wait).
        let keep: Vec<u64> = state.in_flight.keys().copied().collect();
        let durable = state.durable;
        state.logged = keep.iter().map(|&s| (s, durable)).collect();
        let sequence = state.sequence + 1;
        self.write_slot(sequence, &keep)?;
        state.sequence = sequence;
        Ok(())
    }

    /// What the journal holds now, for `sluice raid status`.
    pub(crate) fn report(&self) -> JournalReport {
        let state = self.lock();
        JournalReport {
            path: self.name.clone(),
            dirty_stripes: state.logged.len() as u64,
            writing_stripes: state.in_flight.len() as u64,
            commits: self.counters.commits.load(Ordering::Relaxed),
            resynced: self.counters.resynced.load(Ordering::Relaxed),
        }
    }

    /// The journal's metrics.
    pub(crate) fn metrics(&self) -> Vec<DeviceMetric> {
        let report = self.report();
        let c = &self.counters;
        let counter = |name, help, value: &AtomicU64| DeviceMetric {
            name,
            help,
            kind: MetricKind::Counter,
            value: value.load(Ordering::Relaxed) as f64,
            labels: Vec::new(),
        };
        vec![
            counter(
                "raid_journal_entries_total",
                "Stripes added to the RAID write-intent journal before a partial-stripe write",
                &c.entries,
            ),
            counter(
                "raid_journal_hits_total",
                "Partial-stripe writes whose stripe was in the journal already (no journal I/O)",
                &c.hits,
            ),
            counter(
                "raid_journal_commits_total",
                "Journal commits: one write and one sync (fsync) each, shared by the writes waiting",
                &c.commits,
            ),
            counter(
                "raid_journal_bytes_total",
                "Bytes written to the journal",
                &c.bytes,
            ),
            counter(
                "raid_resynced_stripes_total",
                "Stripes whose parity was recomputed from their data after an unclean shutdown",
                &c.resynced,
            ),
            DeviceMetric {
                name: "raid_journal_dirty_stripes",
                help: "Stripes the write-intent journal holds: resynced if the server stops uncleanly",
                kind: MetricKind::Gauge,
                value: report.dirty_stripes as f64,
                labels: Vec::new(),
            },
            DeviceMetric {
                name: "raid_journal_writing_stripes",
                help: "Stripes of the journal with partial-stripe writes under way",
                kind: MetricKind::Gauge,
                value: report.writing_stripes as f64,
                labels: Vec::new(),
            },
        ]
    }
}

fn slot_offset(index: usize) -> u64 {
    HEADER_BYTES + index as u64 * SLOT_BYTES
}

/// A journal header's bytes for `array` (public for the fuzz target).
pub fn encode_header(array: Uuid) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN);
    out.extend_from_slice(&HEADER_MAGIC);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(array.as_bytes());
    out.extend_from_slice(&SLOT_BYTES.to_be_bytes());
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(v)
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

/// The array a journal header names, or why it is not one (public for
/// the fuzz target; the journal reads headers itself).
pub fn decode_header(b: &[u8]) -> Result<Uuid, String> {
    if b.len() < HEADER_LEN {
        return Err(format!("{} bytes, too short", b.len()));
    }
    if b[..8] != HEADER_MAGIC {
        return Err("no journal magic (is it another file?)".into());
    }
    let stored = be_u32(b, 40);
    let computed = crc32fast::hash(&b[..40]);
    if stored != computed {
        return Err(format!(
            "checksum {stored:#010x} does not match its bytes ({computed:#010x})"
        ));
    }
    let version = be_u32(b, 8);
    if version != VERSION {
        return Err(format!(
            "format version {version} is not supported (this build reads {VERSION})"
        ));
    }
    let slot = be_u64(b, 32);
    if slot != SLOT_BYTES {
        return Err(format!("slot size {slot} is not {SLOT_BYTES}"));
    }
    let mut uuid = [0u8; 16];
    uuid.copy_from_slice(&b[16..32]);
    Ok(Uuid::from_bytes(uuid))
}

/// A slot's bytes: `sequence` and the first [`SLOT_CAPACITY`] of
/// `stripes` (public for the fuzz target).
pub fn encode_slot(sequence: u64, stripes: &[u64]) -> Vec<u8> {
    let n = stripes.len().min(SLOT_CAPACITY);
    let mut out = Vec::with_capacity(24 + 8 * n);
    out.extend_from_slice(&SLOT_MAGIC);
    out.extend_from_slice(&sequence.to_be_bytes());
    out.extend_from_slice(&(n as u32).to_be_bytes());
    for s in &stripes[..n] {
        out.extend_from_slice(&s.to_be_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// A slot's sequence number and stripes, or `None` for a slot never
/// written or torn (public for the fuzz target).
pub fn decode_slot(b: &[u8]) -> Option<(u64, Vec<u64>)> {
    if b.len() < 24 || b[..8] != SLOT_MAGIC {
        return None;
    }
    let n = be_u32(b, 16) as usize;
    if n > SLOT_CAPACITY {
        return None;
    }
    let end = 20 + 8 * n;
    if b.len() < end + 4 || be_u32(b, end) != crc32fast::hash(&b[..end]) {
        return None;
    }
    let stripes = (0..n).map(|i| be_u64(b, 20 + 8 * i)).collect();
    Some((be_u64(b, 8), stripes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_storage::MemDevice;

    fn journal(device: &Arc<MemDevice>, array: Uuid) -> Result<(Journal, Vec<u64>), JournalError> {
        Journal::open(Arc::clone(device) as Arc<dyn BlockDevice>, "j", array)
            .map(|o| (o.journal, o.stripes))
    }

    #[test]
    fn stripes_begun_are_found_on_reopening_until_cleared() {
        let device = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
        let array = Uuid::from_bytes([3; 16]);
        let (j, found) = journal(&device, array).expect("new journal");
        assert!(found.is_empty());
        {
            let _a = j.begin(7).expect("begin");
            let _b = j.begin(2).expect("begin");
            let _c = j.begin(7).expect("begin again");
        }
        let _d = j.begin(9).expect("begin");
        assert_eq!(j.counters.entries.load(Ordering::Relaxed), 3);
        assert_eq!(j.counters.hits.load(Ordering::Relaxed), 1);
        assert_eq!(j.counters.commits.load(Ordering::Relaxed), 3);
        let (_, found) = journal(&device, array).expect("reopen");
        assert_eq!(found, [2, 7, 9]);
        j.clear().expect("clear");
        // 9 is still being written: it stays.
        let (_, found) = journal(&device, array).expect("reopen");
        assert_eq!(found, [9]);
    }

    #[test]
    fn a_failed_commit_fails_its_writes_and_the_next_commit_recovers() {
        let memory = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
        // Writes: the header, two commits, then the third commit fails.
        let rule = "write:eio:nth=4".parse().expect("rule");
        let device: Arc<dyn BlockDevice> = Arc::new(sluice_storage::FaultInjectionDevice::new(
            Arc::clone(&memory) as Arc<dyn BlockDevice>,
            "journal",
            vec![rule],
        ));
        let array = Uuid::from_bytes([3; 16]);
        let j = Journal::open(device, "j", array)
            .expect("new journal")
            .journal;
        drop(j.begin(1).expect("begin"));
        drop(j.begin(2).expect("begin"));
        let e = j.begin(3).expect_err("the commit fails");
        let text = sluice_types::error_chain(&e);
        assert!(
            text.starts_with("journal j: cannot write a commit"),
            "{text}"
        );
        drop(j.begin(4).expect("the next commit works"));
        let (_, found) = journal(&memory, array).expect("reopen");
        assert_eq!(found, [1, 2, 4]);
    }

    #[test]
    fn a_torn_commit_leaves_the_previous_set() {
        let device = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
        let array = Uuid::from_bytes([3; 16]);
        let (j, _) = journal(&device, array).expect("new journal");
        drop(j.begin(1).expect("begin"));
        drop(j.begin(2).expect("begin"));
        // The second commit (sequence 2) went to slot 0; tear it.
        device
            .write_at(&[0xff; 8], slot_offset(0) + 20, false)
            .expect("tear");
        let (_, found) = journal(&device, array).expect("reopen");
        assert_eq!(found, [1]);
    }

    #[test]
    fn another_arrays_journal_and_garbage_are_refused() {
        let device = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
        let (_j, _) = journal(&device, Uuid::from_bytes([3; 16])).expect("new journal");
        let e = journal(&device, Uuid::from_bytes([4; 16])).expect_err("foreign");
        assert!(e.to_string().contains("belongs to array 03030303"), "{e}");
        device.write_at(b"hello", 0, false).expect("scribble");
        let e = journal(&device, Uuid::from_bytes([3; 16])).expect_err("damaged");
        assert!(e.to_string().contains("no journal magic"), "{e}");
        let small = Arc::new(MemDevice::new(4096, false));
        let e = journal(&small, Uuid::from_bytes([3; 16])).expect_err("small");
        assert!(e.to_string().contains("fewer than"), "{e}");
    }

    proptest::proptest! {
        /// Any bytes on the journal's disk decode to a set or to nothing,
        /// never a panic; what is encoded decodes back.
        #[test]
        fn decoding_any_bytes_is_safe(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = decode_header(&bytes);
            let _ = decode_slot(&bytes);
            // A slot with a small count and too few bytes after it.
            let mut slot = SLOT_MAGIC.to_vec();
            slot.extend_from_slice(&[0; 8]);
            slot.extend_from_slice(&(bytes.len() as u32 % 64).to_be_bytes());
            slot.extend_from_slice(&bytes);
            let _ = decode_slot(&slot);
        }

        #[test]
        fn slots_round_trip(sequence in 0u64.., stripes in proptest::collection::vec(0u64.., 0..100)) {
            let mut slot = encode_slot(sequence, &stripes);
            slot.resize(SLOT_BYTES as usize, 0);
            proptest::prop_assert_eq!(decode_slot(&slot), Some((sequence, stripes)));
        }
    }

    #[test]
    fn a_header_names_its_array() {
        let uuid = Uuid::from_bytes([9; 16]);
        assert_eq!(decode_header(&encode_header(uuid)), Ok(uuid));
        let mut bad = encode_header(uuid);
        bad[20] ^= 1;
        assert!(decode_header(&bad)
            .expect_err("checksum")
            .contains("checksum"));
    }

    /// A journal device whose syncs take a millisecond, as a disk's do.
    #[derive(Debug)]
    struct SlowSync(MemDevice);

    impl sluice_storage::DeviceLayer for SlowSync {
        fn inner(&self) -> &dyn BlockDevice {
            &self.0
        }
        fn flush(&self) -> Result<(), DeviceError> {
            std::thread::sleep(std::time::Duration::from_millis(1));
            self.0.flush()
        }
    }

    #[test]
    fn concurrent_writers_share_commits() {
        let device = Arc::new(MemDevice::new(JOURNAL_BYTES, false));
        let array = Uuid::from_bytes([3; 16]);
        let (j, _) = journal(&device, array).expect("new journal");
        let slow: Arc<dyn BlockDevice> = Arc::new(SlowSync(MemDevice::new(JOURNAL_BYTES, false)));
        let j_slow = Journal::open(slow, "slow", array)
            .expect("slow journal")
            .journal;
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let j = &j_slow;
                s.spawn(move || {
                    for i in 0..50 {
                        drop(j.begin(t * 1000 + i).expect("begin"));
                    }
                });
            }
        });
        // Eight writers, each waiting for its own stripe's commit: while
        // one commit syncs, the others' stripes gather for the next.
        let commits = j_slow.counters.commits.load(Ordering::Relaxed);
        assert!(commits < 300, "{commits} commits for 400 stripes");
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let j = &j;
                s.spawn(move || {
                    for i in 0..50 {
                        drop(j.begin(t * 1000 + i).expect("begin"));
                    }
                });
            }
        });
        assert_eq!(j.counters.entries.load(Ordering::Relaxed), 400);
        let (_, found) = journal(&device, array).expect("reopen");
        assert_eq!(found.len(), 400);
    }
}
