//! RAID 0, 1, 5, 6 and 10 as a block device over any member
//! [`BlockDevice`](sluice_storage::BlockDevice)s. This crate knows
//! nothing of networks: a member is whatever device it is given (memory,
//! a file, a remote export through the client).
//!
//! # Layout
//!
//! The volume is cut into chunks of the stripe unit `U` (a power of two,
//! at least 512 bytes); `N` members; `D` data chunks per stripe (`N` for
//! RAID 0, `N - 1` for RAID 5). Volume offset `x` is in chunk
//! `c = x / U`, stripe `s = c / D`, data index `k = c mod D`, and lives
//! at member offset `s * U + x mod U` on member:
//!
//! - RAID 0: `k`.
//! - RAID 5 (left-symmetric, md's default): the parity of stripe `s` is
//!   on member `p = N - 1 - (s mod N)`, and data chunk `k` on member
//!   `(p + 1 + k) mod N`. For three members:
//!
//!   | stripe | member 0 | member 1 | member 2 |
//!   |---|---|---|---|
//!   | 0 | 0 | 1 | P |
//!   | 1 | 3 | P | 2 |
//!   | 2 | P | 4 | 5 |
//!
//! The volume's size is `D` times the smallest member's size rounded
//! down to whole chunks. See [`Geometry`].
//!
//! # Requests
//!
//! - **Reads** are split per chunk and issued to the members together
//!   (one fan-out step). A chunk on a missing or failed member is
//!   rebuilt as the XOR of the same range on every other member.
//! - **RAID 5 writes**, one stripe at a time under that stripe's lock:
//!   a full stripe computes parity from the new data and writes every
//!   chunk, no reads (a run of up to 64 whole stripes goes out as one
//!   step, taking their locks in lock order). A partial stripe uses read-modify-write (read the
//!   old data and the old parity, `2 * (chunks + 1)` member I/Os) or
//!   reconstruct-write (read the bytes of the stripe's other chunks in
//!   the columns the write touches, then write: `uncovered pieces +
//!   chunks + 1`), whichever is fewer; ties go to read-modify-write,
//!   which touches fewer members. A 4 KiB write costs 3 member I/Os on
//!   three members (reconstruct-write: one read of the other data
//!   chunk, then data and parity) and 4 on four or more
//!   (read-modify-write).
//! - **FLUSH** goes to every present member and returns once all have
//!   answered. **FUA** writes pass FUA on every member write of the
//!   request (data and parity), so they are durable on return.
//! - **TRIM**: RAID 0 trims the members' ranges. RAID 5 keeps parity
//!   consistent by zeroing whole stripes on every member, parity
//!   included (write zeroes that may deallocate), and skips partial
//!   stripes: trim is a hint, and trimming one chunk of a stripe would
//!   leave its parity wrong.
//! - **WRITE_ZEROES**: RAID 0 zeroes the members' ranges. RAID 5 zeroes
//!   whole stripes on every member (parity of zeroes is zero) and writes
//!   zeroes like data over partial stripes, so parity follows; it has no
//!   fast zero and refuses one.
//! - **Extents** are what the data members report for each chunk; a
//!   chunk on a missing member is reported as data (not a hole, not
//!   known zero), since its contents come from parity.
//! - **Capability** is the intersection of the members' (read-only if
//!   any member is; trim on RAID 5 needs the members' write zeroes).
//!
//! # Failures
//!
//! An array may be assembled with up to one member missing (RAID 5), or
//! a member may be marked failed through [`RaidDevice::fail_member`]. A
//! member request that fails with an I/O error marks that member failed
//! and the step is redone degraded, so the caller sees no error; other
//! errors (out of range, read-only, unsupported) are the request's.
//! Degraded writes keep parity right: a stripe whose parity member is
//! gone gets its data only; a stripe whose missing data chunk is not
//! written uses read-modify-write; one whose missing chunk is written
//! rebuilds it from the old parity first. Once more members have failed
//! than the level survives (one for RAID 5, none for RAID 0), every
//! request that needs them fails with a [`DeviceError::Io`] whose cause
//! is [`ArrayFailed`], naming the failed members; never with wrong data.
//! [`RaidDevice::member_status`] has per-member request, byte, error and
//! state counts; `metrics` reports them per member (labels `member` and
//! `name`, the member's URI) with a histogram of member request times.
//!
//! # Superblocks
//!
//! An array made by [`create_array`] has a superblock at the start of
//! each member ([`superblock`]: array and member uuids, level, unit,
//! member count and index, event counter, clean/dirty state, checksum)
//! and its data after it. [`RaidDevice::assemble`] refuses members that
//! are not the array's, not in their place or not current
//! ([`check_members`]), marks a writable array dirty until it is
//! dropped, and bumps the event counter on the surviving members
//! whenever a member fails. docs/RAID.md has the byte layout.
//!
//! # The write hole
//!
//! [`RaidDevice::assemble_with_journal`] gives a RAID 5 array a
//! write-intent [`journal`] on the serving machine's disk: every
//! partial-stripe write first makes sure its stripe is durably in it, and
//! assembly recomputes the parity of every stripe it holds before the
//! array serves, so a crash between a write's data and parity member
//! writes cannot leave a stripe whose parity rebuilds a lost member
//! wrong. docs/design/0007-raid-write-hole.md has the protocol.
//!
//! # Replacing, rebuilding and scrubbing
//!
//! [`RaidDevice::replace_member`] puts a new device in a failed
//! member's place and [`RaidDevice::start_rebuild`] reconstructs it in
//! the background while the array serves requests, behind a rebuild
//! cursor moved under the stripe locks (stripes below it are written to
//! the new member, stripes past it are written degraded and rebuilt
//! later), two runs of stripes in flight, its progress recorded in the
//! superblocks so a restart resumes it; [`RaidDevice::scrub`] checks (and repairs) every stripe's
//! parity; [`RaidDevice::status`] reports all of it. The rules are in
//! the `rebuild` module's documentation and docs/RAID.md.
//!
//! # Member fan-out
//!
//! Member requests of one step go through a [`FanOut`]; the default,
//! [`ScopedFanOut`], calls members that never block in turn and runs the
//! others on scoped threads. Remote members plug in through a `FanOut`
//! built on the client's batch (see [`fan_out`]).
//!
//! # Parity throughput
//!
//! [`xor_into`] works 16 bytes at a time; `cargo run --release -p
//! sluice-raid --example xor_throughput 2048` measures it over 64 KiB
//! buffers (one stripe unit, cache-resident as parity work is). On the
//! 2-vCPU development machine, with a load average of 5 to 7 from other
//! builds, two runs gave 36 and 42 GB/s: about 300 times a 1 Gbit/s
//! link (0.125 GB/s) and 30 times a 10 Gbit/s one. RAID 6's P+Q
//! ([`pq_into`]) and the recovery of two lost data chunks
//! ([`recover`]) are measured by `--example pq_throughput`
//! (docs/BENCHMARKS.md has the figures).
//!
//! [`DeviceError::Io`]: sluice_storage::DeviceError::Io

mod array;
mod assemble;
mod bitmap;
mod block;
pub mod clock;
mod device;
pub mod fan_out;
mod health;
pub mod journal;
mod layout;
mod metrics;
mod mirror;
mod parity;
mod pq;
mod raid6;
mod read;
mod rebuild;
mod scrub;
mod status;
mod step;
pub mod superblock;
mod write;
mod zero;

pub use array::{
    check_members, create_array, read_superblocks, Assembly, MemberError, NamedMember,
};
pub use bitmap::DEFAULT_READD_WINDOW;
pub use clock::{Clock, ManualClock, SystemClock};
pub use device::{ArrayFailed, MemberStatus, RaidDevice, RaidError, DEFAULT_REBUILD_RATE};
pub use fan_out::{FanOut, MemberIo, MemberOp, ScopedFanOut};
pub use health::DEFAULT_PROBE_INTERVAL;
pub use journal::{JournalError, JournalPlace, JournalReport};
pub use layout::{Geometry, GeometryError, Piece, RaidLevel, DEFAULT_RAID10_COPIES};
pub use parity::xor_into;
pub use pq::{pq_into, recover, PqError};
pub use scrub::ScrubReport;
pub use status::{
    ArrayCondition, ArrayStatus, MemberCondition, MemberReport, RebuildProgress, ScrubProgress,
};
pub use uuid::Uuid;
