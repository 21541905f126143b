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
//! 96  rebuilt (u64)
//! 104 roles: one byte per member (0 active, 1 failed, 2 rebuilding)
//! 104+members  names: per member, a length (u16) and that many bytes
//!     of UTF-8 (every length 0 when they do not all fit in the area)
//! length-4  crc32 (u32) of bytes [0, length-4)
//! ```
//!
//! Version 1 (written by earlier builds, still read) has no `rebuilt`
//! field and no names: its roles start at byte 96 and the checksum
//! follows them; it reads as `rebuilt` 0 and empty names.

use thiserror::Error;
use uuid::Uuid;

use crate::layout::RaidLevel;

/// First bytes of every superblock.
pub const MAGIC: [u8; 8] = *b"SLUICERD";
/// The format version this code writes (it also reads version 1).
pub const VERSION: u32 = 2;
/// Bytes at the start of each member reserved for the superblock.
pub const SUPERBLOCK_AREA: u64 = 4096;
/// Bytes of a superblock before the role list.
pub const ENCODED_MIN: usize = 104;
/// Bytes of a version 1 superblock before the role list.
const ENCODED_MIN_V1: usize = 96;
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
    /// never read as if it held data past the stripes recorded rebuilt
    /// until the rebuild ends (it then becomes active). An array opened
    /// with one resumes its rebuild from the stripes recorded rebuilt.
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
    /// Stripes (from the first) of the member marked rebuilding that
    /// hold current data and are durable on it: where an interrupted
    /// rebuild resumes. 0 when no member is rebuilding.
    pub rebuilt: u64,
    /// What the array records about each member, by index; its length
    /// is the member count.
    pub roles: Vec<MemberRole>,
    /// What each member was called (its URI) when the superblocks were
    /// last written, by index (empty: not recorded). A restart whose
    /// member list names a replaced member is told the replacement's.
    pub names: Vec<String>,
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
        RaidLevel::Raid1 => 1,
        RaidLevel::Raid5 => 5,
        RaidLevel::Raid6 => 6,
        RaidLevel::Raid10 { .. } => 10,
    }
}

impl Superblock {
    /// Bytes [`Self::encode`] writes for `members` members with no
    /// names.
    pub fn encoded_len(members: usize) -> usize {
        ENCODED_MIN + 3 * members + 4
    }

    /// The names as written: every one, or none if they do not all fit
    /// in the superblock area.
    fn names_written(&self) -> impl Iterator<Item = &[u8]> {
        let n = self.roles.len();
        let bytes: usize = (0..n)
            .map(|i| self.names.get(i).map_or(0, |s| s.len()))
            .sum();
        let fit = Self::encoded_len(n) + bytes <= SUPERBLOCK_AREA as usize
            && self.names.iter().all(|s| s.len() <= usize::from(u16::MAX));
        (0..n).map(move |i| match self.names.get(i) {
            Some(name) if fit => name.as_bytes(),
            _ => &[][..],
        })
    }

    /// The superblock as bytes (the rest of the area is left to the
    /// caller, which writes zeroes).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.roles.len();
        let length = Self::encoded_len(n) + self.names_written().map(<[u8]>::len).sum::<usize>();
        let mut out = Vec::with_capacity(length);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&(length as u32).to_be_bytes());
        out.extend_from_slice(self.array_uuid.as_bytes());
        out.extend_from_slice(self.member_uuid.as_bytes());
        out.push(level_code(self.level));
        out.push(match self.state {
            ArrayState::Clean => 0,
            ArrayState::Dirty => 1,
        });
        // RAID 10's copies; reserved (zero) on the other levels.
        let copies = match self.level {
            RaidLevel::Raid10 { copies } => u16::try_from(copies).unwrap_or(u16::MAX),
            _ => 0,
        };
        out.extend_from_slice(&copies.to_be_bytes());
        out.extend_from_slice(&(n as u32).to_be_bytes());
        out.extend_from_slice(&(self.index as u32).to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&self.unit.to_be_bytes());
        out.extend_from_slice(&self.data_offset.to_be_bytes());
        out.extend_from_slice(&self.data_size.to_be_bytes());
        out.extend_from_slice(&self.events.to_be_bytes());
        out.extend_from_slice(&self.rebuilt.to_be_bytes());
        out.extend(self.roles.iter().map(|r| match r {
            MemberRole::Active => 0u8,
            MemberRole::Failed => 1,
            MemberRole::Rebuilding => 2,
        }));
        for name in self.names_written() {
            out.extend_from_slice(&(name.len() as u16).to_be_bytes());
            out.extend_from_slice(name);
        }
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
        if bytes.len() < ENCODED_MIN_V1 {
            return Err(SuperblockError::Truncated(bytes.len()));
        }
        let u32_at = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| (u64::from(u32_at(at)) << 32) | u64::from(u32_at(at + 4));
        let version = u32_at(8);
        let roles_at = match version {
            1 => ENCODED_MIN_V1,
            VERSION => ENCODED_MIN,
            _ => return Err(SuperblockError::Version(version)),
        };
        let length = u32_at(12);
        let members = u32_at(52);
        let n = members as usize;
        let least = if version == 1 {
            roles_at + n + 4
        } else {
            Self::encoded_len(n)
        };
        let fits = if version == 1 {
            length as usize == least
        } else {
            (least..=SUPERBLOCK_AREA as usize).contains(&(length as usize))
        };
        if n == 0 || n > MAX_MEMBERS || !fits {
            return Err(SuperblockError::Length { length, members });
        }
        let end = length as usize - 4;
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
            1 => RaidLevel::Raid1,
            5 => RaidLevel::Raid5,
            6 => RaidLevel::Raid6,
            // RAID 10's copies in the first reserved field.
            10 => match u16::from_be_bytes([bytes[50], bytes[51]]) {
                copies @ 2.. => RaidLevel::Raid10 {
                    copies: copies.into(),
                },
                copies => return Err(field("copies", copies.into())),
            },
            v => return Err(field("level", v.into())),
        };
        let state = match bytes[49] {
            0 => ArrayState::Clean,
            1 => ArrayState::Dirty,
            v => return Err(field("state", v.into())),
        };
        let copies_field = match level {
            RaidLevel::Raid10 { .. } => 0,
            _ => u16::from_be_bytes([bytes[50], bytes[51]]),
        };
        let reserved = u64::from(copies_field) | u64::from(u32_at(60));
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
        let rebuilt = if version == 1 { 0 } else { u64_at(96) };
        let roles = bytes[roles_at..roles_at + n]
            .iter()
            .map(|&b| match b {
                0 => Ok(MemberRole::Active),
                1 => Ok(MemberRole::Failed),
                2 => Ok(MemberRole::Rebuilding),
                v => Err(field("role", v.into())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let copies_fit = match level {
            RaidLevel::Raid10 { copies } => n.is_multiple_of(copies),
            _ => true,
        };
        if (level != RaidLevel::Raid0 && n < level.min_members()) || !copies_fit {
            return Err(field("members", n as u64));
        }
        let mut names = Vec::with_capacity(n);
        let mut at = roles_at + n;
        if version != 1 {
            for _ in 0..n {
                let Some(&[hi, lo]) = bytes.get(at..at + 2).filter(|_| at + 2 <= end) else {
                    return Err(SuperblockError::Length { length, members });
                };
                let len = usize::from(u16::from_be_bytes([hi, lo]));
                at += 2;
                let Some(name) = bytes.get(at..at + len).filter(|_| at + len <= end) else {
                    return Err(field("name length", len as u64));
                };
                let Ok(name) = std::str::from_utf8(name) else {
                    return Err(field("name", at as u64));
                };
                names.push(name.to_owned());
                at += len;
            }
            if at != end {
                return Err(SuperblockError::Length { length, members });
            }
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
            rebuilt,
            roles,
            names,
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
            rebuilt: 9,
            roles: vec![
                MemberRole::Active,
                MemberRole::Active,
                MemberRole::Rebuilding,
            ],
            names: vec!["nbd://a".into(), "m1".into(), String::new()],
        }
    }

    /// The exact bytes of [`sample`], field by field.
    fn sample_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"SLUICERD");
        b.extend_from_slice(&[0, 0, 0, 2]); // version
        b.extend_from_slice(&[0, 0, 0, 126]); // length: 104 + 3 + 15 + 4
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
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]); // rebuilt
        b.extend_from_slice(&[0, 0, 2]); // roles
        b.extend_from_slice(b"\x00\x07nbd://a\x00\x02m1\x00\x00"); // names
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn reads_version_1_without_the_rebuilt_field() {
        let mut b = sample_bytes();
        b[11] = 1;
        b[15] = 103;
        b.truncate(b.len() - 4 - 15);
        b.drain(96..104);
        b.extend_from_slice(&[0; 4]);
        let end = b.len() - 4;
        let crc = crc32fast::hash(&b[..end]);
        b[end..].copy_from_slice(&crc.to_be_bytes());
        let got = Superblock::decode(&b).expect("version 1");
        assert_eq!(
            got,
            Superblock {
                rebuilt: 0,
                names: Vec::new(),
                ..sample()
            }
        );
    }

    #[test]
    fn encodes_to_the_documented_bytes_and_back() {
        let bytes = sample().encode();
        assert_eq!(bytes, sample_bytes());
        assert_eq!(bytes.len(), Superblock::encoded_len(3) + 9);
        // Decoding reads from an area with zeroes after the superblock.
        let mut area = bytes.clone();
        area.resize(SUPERBLOCK_AREA as usize, 0);
        assert_eq!(Superblock::decode(&area), Ok(sample()));
    }

    #[test]
    fn names_that_do_not_fit_are_left_out() {
        let long = Superblock {
            names: vec!["x".repeat(2000); 3],
            ..sample()
        };
        let bytes = long.encode();
        assert_eq!(bytes.len(), Superblock::encoded_len(3));
        assert_eq!(
            Superblock::decode(&bytes).map(|s| s.names),
            Ok(vec![String::new(); 3])
        );
        // A name running past the end is refused, not read past it.
        let mut bad = sample_bytes();
        bad[108] = 0x40;
        let end = bad.len() - 4;
        let crc = crc32fast::hash(&bad[..end]);
        bad[end..].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            Superblock::decode(&bad),
            Err(SuperblockError::Field {
                field: "name length",
                ..
            })
        ));
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
        assert_eq!(resigned(11, 3), Err(SuperblockError::Version(3)));
        assert_eq!(
            resigned(48, 2),
            Err(SuperblockError::Field {
                field: "level",
                value: 2
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
            resigned(106, 3),
            Err(SuperblockError::Field {
                field: "role",
                value: 3
            })
        );
        assert!(matches!(
            resigned(15, 112),
            Err(SuperblockError::Length { length: 112, .. })
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
