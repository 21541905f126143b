//! Where each byte of the volume lives: the array geometry and its
//! mapping from volume offsets to (member, member offset).

use thiserror::Error;

/// RAID level of an array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaidLevel {
    /// Striping without redundancy.
    Raid0,
    /// Mirroring: every member holds the whole volume.
    Raid1,
    /// Striping with one rotating parity chunk per stripe
    /// (left-symmetric).
    Raid5,
    /// Striping with two rotating parity chunks per stripe, P (XOR) and
    /// Q (the Reed-Solomon syndrome over GF(2^8)), left-symmetric.
    Raid6,
    /// md's near layout: each chunk on `copies` neighbouring members,
    /// the chunks striped over the mirror sets (RAID 1+0 as one array).
    Raid10 {
        /// Copies of each chunk (md's `near=`), at least 2.
        copies: usize,
    },
}

/// RAID 10's copies of each chunk when a spec does not say (md's
/// default, `near=2`).
pub const DEFAULT_RAID10_COPIES: usize = 2;

impl RaidLevel {
    /// The level as specs and status write it (`raid0`, `raid1`,
    /// `raid5`, `raid6`, `raid10`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Raid0 => "raid0",
            Self::Raid1 => "raid1",
            Self::Raid5 => "raid5",
            Self::Raid6 => "raid6",
            Self::Raid10 { .. } => "raid10",
        }
    }

    /// Parity chunks per stripe: 1 for RAID 5, 2 for RAID 6, else 0.
    pub fn parities(&self) -> usize {
        match self {
            Self::Raid0 | Self::Raid1 | Self::Raid10 { .. } => 0,
            Self::Raid5 => 1,
            Self::Raid6 => 2,
        }
    }

    /// The fewest members an array of this level is made of, as md
    /// asks for: striping over one member is a plain disk under another
    /// name, most likely a member left out of the list. RAID 5 over two
    /// members (md allows it, a mirror in effect) stays allowed, so
    /// arrays made so still start; RAID 6 over three would be a mirror.
    /// RAID 10 needs one mirror set, `copies` members, as md's near
    /// layout does (two members with `near=2`: a mirror).
    pub fn min_members(&self) -> usize {
        match self {
            Self::Raid0 | Self::Raid1 | Self::Raid5 => 2,
            Self::Raid6 => 4,
            Self::Raid10 { copies } => (*copies).max(2),
        }
    }
}

/// Why a geometry cannot be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GeometryError {
    /// The stripe unit is not a power of two of at least 512 bytes.
    #[error("stripe unit {0} is not a power of two of at least 512 bytes")]
    BadUnit(u64),
    /// Too few members for the level.
    #[error("{} needs at least {min} members, got {got}", .level.name())]
    TooFewMembers {
        level: RaidLevel,
        min: usize,
        got: usize,
    },
    /// RAID 10's copies do not divide the members into mirror sets.
    #[error("raid10 with {copies} copies needs a multiple of {copies} members (at least 2 copies), got {members}: md's near layout over a member count it does not divide (copies at different offsets) is not supported")]
    Copies { copies: usize, members: usize },
}

/// The shape of an array: level, member count and stripe unit (the
/// chunk: bytes one member holds consecutively before the next member
/// takes over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    level: RaidLevel,
    members: usize,
    unit: u64,
}

/// One chunk-sized (or smaller) piece of a volume range, on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Stripe number (row of chunks across the members).
    pub stripe: u64,
    /// Index of the data chunk within its stripe (0..data_members).
    pub data_index: usize,
    /// Member holding it.
    pub member: usize,
    /// Offset within the chunk.
    pub in_chunk: u64,
    /// Offset on the member.
    pub member_offset: u64,
    /// Length in bytes (never crosses a chunk boundary).
    pub len: u64,
    /// Offset of the piece from the start of the volume range.
    pub range_offset: u64,
}

impl Geometry {
    /// A geometry of `members` members with stripe unit `unit` bytes.
    pub fn new(level: RaidLevel, members: usize, unit: u64) -> Result<Self, GeometryError> {
        if unit < 512 || !unit.is_power_of_two() {
            return Err(GeometryError::BadUnit(unit));
        }
        if let RaidLevel::Raid10 { copies } = level {
            if copies < 2 || !members.is_multiple_of(copies) {
                return Err(GeometryError::Copies { copies, members });
            }
        }
        let min = level.min_members();
        if members < min {
            return Err(GeometryError::TooFewMembers {
                level,
                min,
                got: members,
            });
        }
        Ok(Self {
            level,
            members,
            unit,
        })
    }

    /// RAID level.
    pub fn level(&self) -> RaidLevel {
        self.level
    }

    /// Number of members.
    pub fn members(&self) -> usize {
        self.members
    }

    /// Stripe unit in bytes.
    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// Members holding data in each stripe (all of them for RAID 0, one
    /// fewer for RAID 5, two fewer for RAID 6); RAID 1's stripe is one
    /// chunk, on every member.
    pub fn data_members(&self) -> usize {
        match self.level {
            RaidLevel::Raid1 => 1,
            RaidLevel::Raid10 { copies } => self.members / copies,
            level => self.members - level.parities(),
        }
    }

    /// Members holding each chunk: all of them for RAID 1, `copies` for
    /// RAID 10, one otherwise.
    pub fn copies(&self) -> usize {
        match self.level {
            RaidLevel::Raid1 => self.members,
            RaidLevel::Raid10 { copies } => copies,
            _ => 1,
        }
    }

    /// Whether chunks are mirrored (RAID 1 and 10) rather than
    /// protected by parity or not at all.
    pub fn mirrored(&self) -> bool {
        self.copies() > 1
    }

    /// The members holding the same chunks as `member` (its mirror set:
    /// every member on RAID 1, its `copies` neighbours on RAID 10, only
    /// itself otherwise).
    pub fn mirror_set(&self, member: usize) -> std::ops::Range<usize> {
        let copies = self.copies();
        let first = member / copies * copies;
        first..first + copies
    }

    /// Members the array can lose, whichever they are, and still hold
    /// every byte: none for RAID 0, all but one for RAID 1, one for
    /// RAID 5, two for RAID 6, one fewer than the copies for RAID 10
    /// (which survives more when they are in different mirror sets:
    /// see [`Self::survives`]).
    pub fn tolerance(&self) -> usize {
        match self.level {
            RaidLevel::Raid1 => self.members - 1,
            RaidLevel::Raid10 { copies } => copies - 1,
            level => level.parities(),
        }
    }

    /// Whether every byte is still held with the members `gone` says
    /// are gone: RAID 10 while each mirror set keeps one member, other
    /// levels while no more are gone than they survive (and one is
    /// left).
    pub fn survives(&self, gone: impl Fn(usize) -> bool) -> bool {
        let lost = (0..self.members).filter(|&m| gone(m)).count();
        if lost == self.members {
            return false;
        }
        match self.level {
            RaidLevel::Raid10 { copies } => (0..self.members)
                .step_by(copies)
                .all(|first| (first..first + copies).any(|m| !gone(m))),
            _ => lost <= self.tolerance(),
        }
    }

    /// Volume bytes in one stripe.
    pub fn stripe_bytes(&self) -> u64 {
        self.unit * self.data_members() as u64
    }

    /// Member holding the parity (RAID 6: P, the XOR) of `stripe`
    /// (RAID 5 and 6 only): `members - 1 - stripe mod members`, so
    /// parity starts on the last member and moves one member left each
    /// stripe.
    pub fn parity_member(&self, stripe: u64) -> Option<usize> {
        match self.level {
            RaidLevel::Raid0 | RaidLevel::Raid1 | RaidLevel::Raid10 { .. } => None,
            RaidLevel::Raid5 | RaidLevel::Raid6 => {
                let n = self.members as u64;
                Some((n - 1 - stripe % n) as usize)
            }
        }
    }

    /// Member holding RAID 6's Q syndrome of `stripe`: the one after P
    /// (md's left-symmetric RAID 6).
    pub fn q_member(&self, stripe: u64) -> Option<usize> {
        match self.level {
            RaidLevel::Raid6 => self.parity_member(stripe).map(|p| (p + 1) % self.members),
            _ => None,
        }
    }

    /// Member holding data chunk `data_index` of `stripe`. RAID 0:
    /// `data_index`. RAID 1: every member holds it; this is the one
    /// reads go to first, `stripe mod members`, so reads spread over
    /// the mirrors. RAID 5 (left-symmetric): the data chunks start on
    /// the member after the parity and wrap around, `(parity + 1 +
    /// data_index) mod members`; RAID 6, after P and Q, `(parity + 2 +
    /// data_index) mod members`. RAID 10 (md's near layout over a
    /// multiple of the copies): data chunk `k` is on mirror set `k`,
    /// members `k * copies` to `k * copies + copies - 1`, and reads go
    /// first to the one `stripe mod copies` into it. (RAID 1 is the near
    /// layout with as many copies as members.)
    pub fn data_member(&self, stripe: u64, data_index: usize) -> usize {
        if self.mirrored() {
            let copies = self.copies();
            return data_index * copies + (stripe % copies as u64) as usize;
        }
        match self.parity_member(stripe) {
            None => data_index,
            Some(parity) => (parity + self.level.parities() + data_index) % self.members,
        }
    }

    /// The data index of `member` in `stripe`, if it holds data there.
    pub fn data_index(&self, stripe: u64, member: usize) -> Option<usize> {
        (0..self.data_members()).find(|&k| self.data_member(stripe, k) == member)
    }

    /// Volume size for members of `smallest_member` bytes: each member
    /// is used up to whole chunks, times the data members.
    pub fn volume_size(&self, smallest_member: u64) -> u64 {
        (smallest_member / self.unit) * self.stripe_bytes()
    }

    /// Maps volume offset `offset` to (member, member offset).
    pub fn map(&self, offset: u64) -> (usize, u64) {
        let chunk = offset / self.unit;
        let stripe = chunk / self.data_members() as u64;
        let data_index = (chunk % self.data_members() as u64) as usize;
        (
            self.data_member(stripe, data_index),
            stripe * self.unit + offset % self.unit,
        )
    }

    /// Splits `[offset, offset+len)` into pieces that each lie in one
    /// chunk, in volume order.
    pub fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let end = offset + len;
        let mut at = offset;
        std::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let chunk = at / self.unit;
            let in_chunk = at % self.unit;
            let piece_len = (self.unit - in_chunk).min(end - at);
            let stripe = chunk / self.data_members() as u64;
            let data_index = (chunk % self.data_members() as u64) as usize;
            let piece = Piece {
                stripe,
                data_index,
                member: self.data_member(stripe, data_index),
                in_chunk,
                member_offset: stripe * self.unit + in_chunk,
                len: piece_len,
                range_offset: at - offset,
            };
            at += piece_len;
            Some(piece)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// md's left-symmetric layout written out by hand: row = stripe,
    /// column = member, `P` the parity, numbers the volume chunks.
    fn check_table(members: usize, table: &[&[&str]]) {
        let g = Geometry::new(RaidLevel::Raid5, members, 4096).expect("geometry");
        for (stripe, row) in table.iter().enumerate() {
            for (member, cell) in row.iter().enumerate() {
                if *cell == "P" {
                    assert_eq!(
                        g.parity_member(stripe as u64),
                        Some(member),
                        "stripe {stripe}"
                    );
                } else {
                    let chunk: u64 = cell.parse().expect("chunk number");
                    // First, middle and last byte of the chunk.
                    for within in [0, 1234, 4095] {
                        assert_eq!(
                            g.map(chunk * 4096 + within),
                            (member, stripe as u64 * 4096 + within),
                            "chunk {chunk}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn raid5_left_symmetric_three_members() {
        check_table(
            3,
            &[
                &["0", "1", "P"],
                &["3", "P", "2"],
                &["P", "4", "5"],
                &["6", "7", "P"],
            ],
        );
    }

    #[test]
    fn raid5_left_symmetric_four_members() {
        check_table(
            4,
            &[
                &["0", "1", "2", "P"],
                &["4", "5", "P", "3"],
                &["8", "P", "6", "7"],
                &["P", "9", "10", "11"],
                &["12", "13", "14", "P"],
            ],
        );
    }

    /// md's left-symmetric RAID 6: P on `N - 1 - s mod N`, Q after it,
    /// the data after Q.
    #[test]
    fn raid6_left_symmetric_five_members() {
        let g = Geometry::new(RaidLevel::Raid6, 5, 4096).expect("geometry");
        let table: [[&str; 5]; 5] = [
            ["Q", "0", "1", "2", "P"],
            ["3", "4", "5", "P", "Q"],
            ["7", "8", "P", "Q", "6"],
            ["11", "P", "Q", "9", "10"],
            ["P", "Q", "12", "13", "14"],
        ];
        for (stripe, row) in table.iter().enumerate() {
            let s = stripe as u64;
            for (member, cell) in row.iter().enumerate() {
                match *cell {
                    "P" => assert_eq!(g.parity_member(s), Some(member), "stripe {s}"),
                    "Q" => assert_eq!(g.q_member(s), Some(member), "stripe {s}"),
                    chunk => {
                        let chunk: u64 = chunk.parse().expect("chunk number");
                        assert_eq!(g.map(chunk * 4096 + 5), (member, s * 4096 + 5));
                    }
                }
            }
        }
        assert_eq!(g.tolerance(), 2);
        assert_eq!(g.stripe_bytes(), 3 * 4096);
        assert!(Geometry::new(RaidLevel::Raid6, 3, 4096).is_err());
    }

    #[test]
    fn raid0_round_robin() {
        let g = Geometry::new(RaidLevel::Raid0, 3, 512).expect("geometry");
        assert_eq!(g.map(0), (0, 0));
        assert_eq!(g.map(512), (1, 0));
        assert_eq!(g.map(1024 + 7), (2, 7));
        assert_eq!(g.map(1536), (0, 512));
    }

    #[test]
    fn raid1_mirrors_at_the_same_offset_and_reads_rotate() {
        let g = Geometry::new(RaidLevel::Raid1, 3, 4096).expect("geometry");
        assert_eq!(g.volume_size(10 * 4096 + 100), 10 * 4096);
        assert_eq!(g.tolerance(), 2);
        assert_eq!(g.parity_member(5), None);
        // Chunk c is stripe c, on every member at the volume offset;
        // its reads go to member c mod 3 first.
        assert_eq!(g.map(0), (0, 0));
        assert_eq!(g.map(4096 + 7), (1, 4096 + 7));
        assert_eq!(g.map(3 * 4096), (0, 3 * 4096));
        assert!(Geometry::new(RaidLevel::Raid1, 1, 4096).is_err());
    }

    /// md's near layout with two copies over four members, written out:
    /// chunks 0, 2, 4 on members 0 and 1, chunks 1, 3, 5 on 2 and 3, one
    /// row (member offset) per stripe.
    #[test]
    fn raid10_near_two_copies_four_members() {
        let g = Geometry::new(RaidLevel::Raid10 { copies: 2 }, 4, 4096).expect("geometry");
        assert_eq!(g.data_members(), 2);
        assert_eq!(g.volume_size(10 * 4096), 20 * 4096);
        for (chunk, set, row) in [(0u64, 0, 0u64), (1, 1, 0), (2, 0, 1), (3, 1, 1), (4, 0, 2)] {
            let (member, at) = g.map(chunk * 4096 + 9);
            assert_eq!(g.mirror_set(member), set * 2..set * 2 + 2, "chunk {chunk}");
            assert_eq!(at, row * 4096 + 9, "chunk {chunk}");
        }
        // Reads of a set alternate between its two members by stripe.
        assert_eq!(g.map(0).0, 0);
        assert_eq!(g.map(2 * 4096).0, 1);
        assert_eq!(g.tolerance(), 1);
        // One member of each set may go, not both of one set.
        assert!(g.survives(|m| m == 0 || m == 3));
        assert!(!g.survives(|m| m == 2 || m == 3));
        assert!(Geometry::new(RaidLevel::Raid10 { copies: 2 }, 3, 4096).is_err());
        assert!(Geometry::new(RaidLevel::Raid10 { copies: 1 }, 3, 4096).is_err());
        // Two members with two copies: a mirror, laid out as RAID 1.
        let pair = Geometry::new(RaidLevel::Raid10 { copies: 2 }, 2, 4096).expect("geometry");
        let raid1 = Geometry::new(RaidLevel::Raid1, 2, 4096).expect("geometry");
        for x in [0, 4096, 3 * 4096 + 5] {
            assert_eq!(pair.map(x), raid1.map(x));
        }
    }

    #[test]
    fn pieces_never_cross_a_chunk() {
        let g = Geometry::new(RaidLevel::Raid5, 3, 1024).expect("geometry");
        let pieces: Vec<_> = g.pieces(1000, 3000).collect();
        assert_eq!(pieces.iter().map(|p| p.len).sum::<u64>(), 3000);
        assert_eq!(pieces[0].len, 24);
        assert_eq!(pieces[1].range_offset, 24);
        assert!(pieces.iter().all(|p| p.in_chunk + p.len <= 1024));
    }

    #[test]
    fn bad_geometries_are_refused() {
        assert_eq!(
            Geometry::new(RaidLevel::Raid5, 3, 1000),
            Err(GeometryError::BadUnit(1000))
        );
        assert_eq!(
            Geometry::new(RaidLevel::Raid5, 3, 256),
            Err(GeometryError::BadUnit(256))
        );
        assert!(Geometry::new(RaidLevel::Raid5, 1, 4096).is_err());
    }
}
