//! The superblock at the start of every member: which array the member
//! belongs to, where in it, and how current it is. Sans-IO: bytes in,
//! bytes out; [`create_array`](crate::create_array) and
//! [`read_superblocks`](crate::read_superblocks) write and read them.
//!
//! Layout (docs/RAID.md draws it): big-endian, [`ENCODED_MIN`] bytes
//! plus one role byte per member, followed by a CRC-32 of everything
//! before it, at offset 0 of a [`SUPERBLOCK_AREA`]-byte area the array
//! data never touches; the array's data starts at the superblock's
//! `data_offset`.
//!
//! ```text
//!  0  magic "SLUICERD"        8   version (u32)      12  length (u32)
//! 16  array uuid (16)                                32  member uuid (16)
//! 48  level (u8)  49 state (u8)  50 reserved (u16)   52  members (u32)
//! 56  index (u32)             60  reserved (u32)     64  unit (u64)
//! 72  data offset (u64)       80  data size (u64)    88  events (u64)
//! 96  roles: one byte per member (0 active, 1 failed, 2 rebuilding)
//! 96+members  crc32 (u32) of bytes [0, 96+members)
//! ```

use thiserror::Error;
use uuid::Uuid;

use crate::layout::RaidLevel;

/// First bytes of every superblock.
pub const MAGIC: [u8; 8] = *b"SLUICERD";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes at the start of each member reserved for the superblock.
pub const SUPERBLOCK_AREA: u64 = 4096;
/// Bytes of a superblock before the role list.
pub const ENCODED_MIN: usize = 96;
/// Most members an array may have (the roles and checksum must fit in
/// the area).
pub const MAX_MEMBERS: usize = 256;

/// Whether the array was shut down cleanly (every write finished on
/// every member) when this superblock was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrayState {
    /// No write in flight: parity matches the data.
    Clean,
    /// Open for writing: a crash may leave stripes being written with
    /// parity that does not match.
    Dirty,
}

/// What the array records about one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberRole {
    /// In use.
    Active,
    /// Marked failed: never read or written again.
    Failed,
    /// A replacement being rebuilt: written as stripes are rebuilt,
    /// never read as if it held data until the rebuild ends (it then
    /// becomes active). An array opened with one rebuilds it again from
    /// the start.
    Rebuilding,
}

/// One member's superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// The array every member of it shares.
    pub array_uuid: Uuid,
    /// This member's own identity.
    pub member_uuid: Uuid,
    /// RAID level.
    pub level: RaidLevel,
    /// Clean or dirty.
    pub state: ArrayState,
    /// This member's position in the array.
    pub index: usize,
    /// Stripe unit in bytes.
    pub unit: u64,
    /// Where the array's data starts on each member.
    pub data_offset: u64,
    /// Bytes of array data on each member (a whole number of units).
    pub data_size: u64,
    /// Bumped on every change of the array's state (a member failing,
    /// open and shut down): a member whose counter is behind the
    /// others' missed changes.
    pub events: u64,
    /// What the array records about each member, by index; its length
    /// is the member count.
    pub roles: Vec<MemberRole>,
}

/// Why bytes are not a superblock.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SuperblockError {
    /// Too few bytes.
    #[error("superblock area is {0} bytes, too short")]
    Truncated(usize),
    /// No sluice magic: the member holds no superblock.
    #[error("no sluice RAID superblock (no magic)")]
    NoMagic,
    /// Written by a format this code does not read.
    #[error("superblock format version {0} is not supported (this build reads {VERSION})")]
    Version(u32),
    /// The length field disagrees with the member count or the area.
    #[error("superblock length {length} does not match its {members} members")]
    Length { length: u32, members: u32 },
    /// The checksum does not match.
    #[error("superblock checksum {stored:#010x} does not match its bytes ({computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    /// A field holds a value no superblock has.
    #[error("superblock field {field} holds {value}, which is not valid")]
    Field { field: &'static str, value: u64 },
}

fn level_code(level: RaidLevel) -> u8 {
    match level {
        RaidLevel::Raid0 => 0,
        RaidLevel::Raid5 => 5,
    }
}

impl Superblock {
    /// Bytes [`Self::encode`] writes for `members` members.
    pub fn encoded_len(members: usize) -> usize {
        ENCODED_MIN + members + 4
    }

    /// The superblock as bytes (the rest of the area is left to the
    /// caller, which writes zeroes).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.roles.len();
        let mut out = Vec::with_capacity(Self::encoded_len(n));
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&(Self::encoded_len(n) as u32).to_be_bytes());
        out.extend_from_slice(self.array_uuid.as_bytes());
        out.extend_from_slice(self.member_uuid.as_bytes());
        out.push(level_code(self.level));
        out.push(match self.state {
            ArrayState::Clean => 0,
            ArrayState::Dirty => 1,
        });
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&(n as u32).to_be_bytes());
        out.extend_from_slice(&(self.index as u32).to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&self.unit.to_be_bytes());
        out.extend_from_slice(&self.data_offset.to_be_bytes());
        out.extend_from_slice(&self.data_size.to_be_bytes());
        out.extend_from_slice(&self.events.to_be_bytes());
        out.extend(self.roles.iter().map(|r| match r {
            MemberRole::Active => 0u8,
            MemberRole::Failed => 1,
            MemberRole::Rebuilding => 2,
        }));
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a superblock from the start of `bytes` (the member's first
    /// bytes). Checks the magic, version, length and checksum, then
    /// every field.
    pub fn decode(bytes: &[u8]) -> Result<Self, SuperblockError> {
        if bytes.len() < MAGIC.len() {
            return Err(SuperblockError::Truncated(bytes.len()));
        }
        if bytes[..8] != MAGIC {
            return Err(SuperblockError::NoMagic);
        }
        if bytes.len() < ENCODED_MIN {
            return Err(SuperblockError::Truncated(bytes.len()));
        }
        let u32_at = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| (u64::from(u32_at(at)) << 32) | u64::from(u32_at(at + 4));
        let version = u32_at(8);
        if version != VERSION {
            return Err(SuperblockError::Version(version));
        }
        let length = u32_at(12);
        let members = u32_at(52);
        let n = members as usize;
        if n == 0 || n > MAX_MEMBERS || length as usize != Self::encoded_len(n) {
            return Err(SuperblockError::Length { length, members });
        }
        let end = ENCODED_MIN + n;
        if bytes.len() < end + 4 {
            return Err(SuperblockError::Truncated(bytes.len()));
        }
        let stored = u32_at(end);
        let computed = crc32fast::hash(&bytes[..end]);
        if stored != computed {
            return Err(SuperblockError::Checksum { stored, computed });
        }
        let field = |field, value: u64| SuperblockError::Field { field, value };
        let uuid_at = |at: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&bytes[at..at + 16]);
            Uuid::from_bytes(b)
        };
        let level = match bytes[48] {
            0 => RaidLevel::Raid0,
            5 => RaidLevel::Raid5,
            v => return Err(field("level", v.into())),
        };
        let state = match bytes[49] {
            0 => ArrayState::Clean,
            1 => ArrayState::Dirty,
            v => return Err(field("state", v.into())),
        };
        let reserved =
            u64::from(u16::from_be_bytes([bytes[50], bytes[51]])) | u64::from(u32_at(60));
        if reserved != 0 {
            return Err(field("reserved", reserved));
        }
        let index = u32_at(56) as usize;
        if index >= n {
            return Err(field("index", index as u64));
        }
        let unit = u64_at(64);
        if unit < 512 || !unit.is_power_of_two() {
            return Err(field("unit", unit));
        }
        let data_offset = u64_at(72);
        if data_offset < SUPERBLOCK_AREA {
            return Err(field("data offset", data_offset));
        }
        let data_size = u64_at(80);
        if data_size % unit != 0 || data_offset.checked_add(data_size).is_none() {
            return Err(field("data size", data_size));
        }
        let roles = bytes[ENCODED_MIN..end]
            .iter()
            .map(|&b| match b {
                0 => Ok(MemberRole::Active),
                1 => Ok(MemberRole::Failed),
                2 => Ok(MemberRole::Rebuilding),
                v => Err(field("role", v.into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if level == RaidLevel::Raid5 && n < 2 {
            return Err(field("members", n as u64));
        }
        Ok(Self {
            array_uuid: uuid_at(16),
            member_uuid: uuid_at(32),
            level,
            state,
            index,
            unit,
            data_offset,
            data_size,
            events: u64_at(88),
            roles,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            array_uuid: Uuid::from_bytes([0xa0; 16]),
            member_uuid: Uuid::from_bytes([0x11; 16]),
            level: RaidLevel::Raid5,
            state: ArrayState::Dirty,
            index: 1,
            unit: 64 << 10,
            data_offset: 4096,
            data_size: 1 << 20,
            events: 7,
            roles: vec![MemberRole::Active, MemberRole::Active, MemberRole::Failed],
        }
    }

    /// The exact bytes of [`sample`], field by field.
    fn sample_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"SLUICERD");
        b.extend_from_slice(&[0, 0, 0, 1]); // version
        b.extend_from_slice(&[0, 0, 0, 103]); // length: 96 + 3 + 4
        b.extend_from_slice(&[0xa0; 16]);
        b.extend_from_slice(&[0x11; 16]);
        b.extend_from_slice(&[5, 1, 0, 0]); // raid5, dirty, reserved
        b.extend_from_slice(&[0, 0, 0, 3]); // members
        b.extend_from_slice(&[0, 0, 0, 1]); // index
        b.extend_from_slice(&[0, 0, 0, 0]); // reserved
        b.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 0]); // unit 64 KiB
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x10, 0]); // data offset 4096
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0x10, 0, 0]); // data size 1 MiB
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 7]); // events
        b.extend_from_slice(&[0, 0, 1]); // roles
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn encodes_to_the_documented_bytes_and_back() {
        let bytes = sample().encode();
        assert_eq!(bytes, sample_bytes());
        assert_eq!(bytes.len(), Superblock::encoded_len(3));
        // Decoding reads from an area with zeroes after the superblock.
        let mut area = bytes.clone();
        area.resize(SUPERBLOCK_AREA as usize, 0);
        assert_eq!(Superblock::decode(&area), Ok(sample()));
    }

    #[test]
    fn the_checksum_covers_every_byte() {
        let good = sample_bytes();
        for at in 8..good.len() - 4 {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            assert!(
                Superblock::decode(&bad).is_err(),
                "flipped byte {at} accepted"
            );
        }
    }

    #[test]
    fn bad_superblocks_say_why() {
        let zeroes = vec![0u8; 4096];
        assert_eq!(Superblock::decode(&zeroes), Err(SuperblockError::NoMagic));
        assert_eq!(
            Superblock::decode(b"SLU"),
            Err(SuperblockError::Truncated(3))
        );
        let good = sample_bytes();
        assert_eq!(
            Superblock::decode(&good[..50]),
            Err(SuperblockError::Truncated(50))
        );
        assert_eq!(
            Superblock::decode(&good[..good.len() - 1]),
            Err(SuperblockError::Truncated(good.len() - 1))
        );
        // Fields are checked after the checksum: re-sign after changing.
        let resigned = |at: usize, value: u8| {
            let mut b = good.clone();
            b[at] = value;
            let end = b.len() - 4;
            let crc = crc32fast::hash(&b[..end]);
            b[end..].copy_from_slice(&crc.to_be_bytes());
            Superblock::decode(&b)
        };
        assert_eq!(resigned(11, 2), Err(SuperblockError::Version(2)));
        assert_eq!(
            resigned(48, 1),
            Err(SuperblockError::Field {
                field: "level",
                value: 1
            })
        );
        assert_eq!(
            resigned(59, 3),
            Err(SuperblockError::Field {
                field: "index",
                value: 3
            })
        );
        assert_eq!(
            resigned(98, 3),
            Err(SuperblockError::Field {
                field: "role",
                value: 3
            })
        );
        assert!(matches!(
            resigned(15, 104),
            Err(SuperblockError::Length { length: 104, .. })
        ));
        let e = Superblock::decode(&{
            let mut b = good.clone();
            b[100] ^= 1;
            b
        })
        .expect_err("checksum");
        assert!(e.to_string().contains("checksum"), "{e}");
    }
}
