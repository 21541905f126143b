//! Arrays with superblocks: writing them ([`create_array`]), and
//! checking, before an array is used, that the members given are the
//! array's members, each in its place and current ([`check_members`],
//! sans-IO; [`read_superblocks`] does the reading).

use std::sync::Arc;

use sluice_storage::{BlockDevice, DeviceError, ZeroMode};
use thiserror::Error;
use uuid::Uuid;

use crate::layout::{Geometry, RaidLevel};
use crate::superblock::{ArrayState, MemberRole, Superblock, SuperblockError, SUPERBLOCK_AREA};

/// A member as given: the name errors call it by (its URI) and its
/// device.
#[derive(Debug, Clone)]
pub struct NamedMember {
    /// How the member was given (a URI), for messages.
    pub name: String,
    /// The member device, from its first byte.
    pub device: Arc<dyn BlockDevice>,
}

/// Why the members given do not make the array, or its superblocks
/// cannot be written. Every variant names the member.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MemberError {
    /// The member holds no superblock.
    #[error("member {index} ({name}) has no sluice RAID superblock: write the array's superblocks first with `sluice raid create SPEC`")]
    NoSuperblock { index: usize, name: String },
    /// The member's superblock does not decode.
    #[error("member {index} ({name}) has a damaged superblock")]
    Damaged {
        index: usize,
        name: String,
        #[source]
        source: SuperblockError,
    },
    /// Reading or writing the member failed.
    #[error("member {index} ({name}): cannot {doing}")]
    Io {
        index: usize,
        name: String,
        doing: &'static str,
        #[source]
        source: DeviceError,
    },
    /// The member belongs to another array.
    #[error(
        "member {index} ({name}) belongs to another array ({found}; the others are of {expected})"
    )]
    Foreign {
        index: usize,
        name: String,
        found: Uuid,
        expected: Uuid,
    },
    /// The same member was given twice.
    #[error("member {index} ({name}) is the same member as member {first} (member uuid {uuid})")]
    Duplicate {
        index: usize,
        name: String,
        first: usize,
        uuid: Uuid,
    },
    /// The array has another number of members.
    #[error(
        "member {index} ({name}) belongs to an array of {recorded} members, but {given} were given"
    )]
    MemberCount {
        index: usize,
        name: String,
        recorded: usize,
        given: usize,
    },
    /// The array was created with another level or stripe unit.
    #[error("member {index} ({name}) belongs to an array created as {recorded}, but the spec says {given}")]
    Geometry {
        index: usize,
        name: String,
        recorded: String,
        given: String,
    },
    /// The member is in the wrong place.
    #[error("member {index} ({name}) is member {recorded} of its array: the members are given in the wrong order")]
    WrongPosition {
        index: usize,
        name: String,
        recorded: usize,
    },
    /// The member missed changes the others recorded.
    #[error("member {index} ({name}) is stale: its event counter is {events} but the array's is {newest} (it missed changes, such as writes while it was failed); it must be replaced, not reused")]
    Stale {
        index: usize,
        name: String,
        events: u64,
        newest: u64,
    },
    /// The member given was replaced: the others record another in its
    /// place.
    #[error("member {index} ({name}) was replaced{by}: the array's other members record the replacement in its place; give it instead of {name} in the member list")]
    Replaced {
        index: usize,
        name: String,
        /// " by NAME" when the superblocks recorded the replacement's
        /// name, else empty.
        by: String,
    },
    /// The other members record this one as failed.
    #[error("member {index} ({name}) is recorded as failed by the other members; it must be replaced, not reused")]
    RecordedFailed { index: usize, name: String },
    /// The member is smaller than the array's data on it.
    #[error("member {index} ({name}) has {size} bytes, fewer than the {needed} its superblock and data need")]
    TooSmall {
        index: usize,
        name: String,
        size: u64,
        needed: u64,
    },
    /// `create` found the superblock of an array on the member.
    #[error("member {index} ({name}) holds the superblock of array {array} (member {member} of {members}); pass --force to overwrite it")]
    InUse {
        index: usize,
        name: String,
        array: Uuid,
        member: usize,
        members: usize,
    },
}

/// What the superblocks of a checked array say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assembly {
    /// Each member's superblock, by index.
    pub superblocks: Vec<Superblock>,
    /// Whether the array was shut down cleanly.
    pub state: ArrayState,
}

fn geometry_text(level: RaidLevel, members: usize, unit: u64) -> String {
    let level = level.name();
    format!("{level} of {members} members with a {unit}-byte unit")
}

/// Checks that `found` (what each member given holds, in the order
/// given, named by `names`) are the superblocks of one array of the
/// `geometry` given, each member in its place and none behind the
/// others. The first problem found is returned, naming its member.
pub fn check_members(
    geometry: Geometry,
    names: &[String],
    found: Vec<Result<Superblock, SuperblockError>>,
) -> Result<Assembly, MemberError> {
    let found = found.into_iter().map(Some).collect();
    let assembly = check_present_members(geometry, names, found)?;
    Ok(Assembly {
        superblocks: assembly.superblocks.into_iter().flatten().collect(),
        state: assembly.state,
    })
}

/// What the superblocks of a checked array with members missing say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartialAssembly {
    /// Each member's superblock, by index (`None`: missing).
    pub(crate) superblocks: Vec<Option<Superblock>>,
    /// Whether the array was shut down cleanly.
    pub(crate) state: ArrayState,
}

impl PartialAssembly {
    /// The superblock with the newest event counter.
    pub(crate) fn newest(&self) -> Option<&Superblock> {
        self.superblocks.iter().flatten().max_by_key(|s| s.events)
    }
}

/// [`check_members`] with members missing (`None`): the members given
/// are checked against each other as if the missing ones were not
/// there.
pub(crate) fn check_present_members(
    geometry: Geometry,
    names: &[String],
    found: Vec<Option<Result<Superblock, SuperblockError>>>,
) -> Result<PartialAssembly, MemberError> {
    let name = |i: usize| names.get(i).cloned().unwrap_or_else(|| format!("#{i}"));
    let total = found.len();
    let mut superblocks = Vec::with_capacity(found.len());
    let mut slots = Vec::with_capacity(found.len());
    for (index, f) in found.into_iter().enumerate() {
        match f {
            None => slots.push(None),
            Some(Ok(s)) => {
                slots.push(Some(superblocks.len()));
                superblocks.push(s);
            }
            Some(Err(SuperblockError::NoMagic)) => {
                return Err(MemberError::NoSuperblock {
                    index,
                    name: name(index),
                })
            }
            Some(Err(source)) => {
                return Err(MemberError::Damaged {
                    index,
                    name: name(index),
                    source,
                })
            }
        }
    }
    // The array is the one most members belong to; among equals, the
    // one with the newest superblock.
    let array = superblocks
        .iter()
        .max_by_key(|s| {
            let votes = superblocks
                .iter()
                .filter(|o| o.array_uuid == s.array_uuid)
                .count();
            (votes, s.events)
        })
        .map(|s| s.array_uuid)
        .unwrap_or_default();
    let given = geometry_text(geometry.level(), geometry.members(), geometry.unit());
    let present: Vec<(usize, &Superblock)> = slots
        .iter()
        .enumerate()
        .filter_map(|(index, slot)| slot.map(|k| (index, &superblocks[k])))
        .collect();
    for (k, &(index, s)) in present.iter().enumerate() {
        check_identity(s, index, &name(index), array, &present[..k], total, &given)?;
    }
    let Some(newest) = superblocks.iter().max_by_key(|s| s.events) else {
        return Err(MemberError::MemberCount {
            index: 0,
            name: name(0),
            recorded: geometry.members(),
            given: 0,
        });
    };
    for &(index, s) in &present {
        let recorded = newest.names.get(index).filter(|n| !n.is_empty());
        if s.events < newest.events
            && newest.roles[index] != MemberRole::Failed
            && recorded.is_some_and(|r| *r != name(index))
        {
            return Err(MemberError::Replaced {
                index,
                name: name(index),
                by: recorded.map(|r| format!(" by {r}")).unwrap_or_default(),
            });
        }
        if s.events < newest.events {
            return Err(MemberError::Stale {
                index,
                name: name(index),
                events: s.events,
                newest: newest.events,
            });
        }
        if newest.roles[index] == MemberRole::Failed {
            return Err(MemberError::RecordedFailed {
                index,
                name: name(index),
            });
        }
        if (s.data_offset, s.data_size) != (newest.data_offset, newest.data_size) {
            return Err(MemberError::Damaged {
                index,
                name: name(index),
                source: SuperblockError::Field {
                    field: "data size",
                    value: s.data_size,
                },
            });
        }
    }
    let state = if superblocks.iter().any(|s| s.state == ArrayState::Dirty) {
        ArrayState::Dirty
    } else {
        ArrayState::Clean
    };
    let mut superblocks = superblocks.into_iter();
    let superblocks = slots
        .iter()
        .map(|slot| slot.and_then(|_| superblocks.next()))
        .collect();
    Ok(PartialAssembly { superblocks, state })
}

/// Checks that member `index` (superblock `s`) belongs to `array`, is
/// not one of the members `before` it again, and records the geometry
/// `given` (`total` members) with itself in its place.
fn check_identity(
    s: &Superblock,
    index: usize,
    name: &str,
    array: Uuid,
    before: &[(usize, &Superblock)],
    total: usize,
    given: &str,
) -> Result<(), MemberError> {
    if s.array_uuid != array {
        return Err(MemberError::Foreign {
            index,
            name: name.to_owned(),
            found: s.array_uuid,
            expected: array,
        });
    }
    if let Some(&(first, _)) = before.iter().find(|(_, o)| o.member_uuid == s.member_uuid) {
        return Err(MemberError::Duplicate {
            index,
            name: name.to_owned(),
            first,
            uuid: s.member_uuid,
        });
    }
    if s.roles.len() != total {
        return Err(MemberError::MemberCount {
            index,
            name: name.to_owned(),
            recorded: s.roles.len(),
            given: total,
        });
    }
    let recorded = geometry_text(s.level, s.roles.len(), s.unit);
    if recorded != given {
        return Err(MemberError::Geometry {
            index,
            name: name.to_owned(),
            recorded,
            given: given.to_owned(),
        });
    }
    if s.index != index {
        return Err(MemberError::WrongPosition {
            index,
            name: name.to_owned(),
            recorded: s.index,
        });
    }
    Ok(())
}

/// Reads the superblock area of every member; an I/O error is the
/// member's, a member too small for a superblock has none.
pub fn read_superblocks(
    members: &[NamedMember],
) -> Result<Vec<Result<Superblock, SuperblockError>>, MemberError> {
    members
        .iter()
        .enumerate()
        .map(|(index, m)| {
            let len = m.device.size().min(SUPERBLOCK_AREA) as usize;
            let mut area = vec![0u8; len];
            m.device
                .read_at(&mut area, 0)
                .map_err(|source| MemberError::Io {
                    index,
                    name: m.name.clone(),
                    doing: "read its superblock",
                    source,
                })?;
            Ok(Superblock::decode(&area))
        })
        .collect()
}

/// Writes `superblock` to `member` (the whole area, FUA).
pub(crate) fn write_superblock(
    member: &dyn BlockDevice,
    superblock: &Superblock,
) -> Result<(), DeviceError> {
    let mut area = superblock.encode();
    area.resize(SUPERBLOCK_AREA as usize, 0);
    member.write_at(&area, 0, true)
}

/// Makes `members` a new array of `geometry`: zeroes each member's data
/// area (so RAID 5 parity matches the data from the start), then writes
/// the superblocks, last, so an interrupted create leaves none. Refuses
/// members that hold another array's superblock unless `force`. Returns
/// the new array's uuid.
pub fn create_array(
    geometry: Geometry,
    members: &[NamedMember],
    force: bool,
) -> Result<Uuid, MemberError> {
    if members.len() != geometry.members() {
        return Err(MemberError::MemberCount {
            index: 0,
            name: members.first().map(|m| m.name.clone()).unwrap_or_default(),
            recorded: geometry.members(),
            given: members.len(),
        });
    }
    let found = read_superblocks(members)?;
    if !force {
        for (index, f) in found.iter().enumerate() {
            if let Ok(s) = f {
                return Err(MemberError::InUse {
                    index,
                    name: members[index].name.clone(),
                    array: s.array_uuid,
                    member: s.index,
                    members: s.roles.len(),
                });
            }
        }
    }
    let unit = geometry.unit();
    let data_offset = SUPERBLOCK_AREA.max(unit.min(1 << 20));
    let smallest = members.iter().map(|m| m.device.size()).min().unwrap_or(0);
    let data_size = smallest.saturating_sub(data_offset) / unit * unit;
    for (index, m) in members.iter().enumerate() {
        if data_size == 0 {
            return Err(MemberError::TooSmall {
                index,
                name: m.name.clone(),
                size: m.device.size(),
                needed: data_offset + unit,
            });
        }
    }
    let io = |index: usize, doing, source| MemberError::Io {
        index,
        name: members[index].name.clone(),
        doing,
        source,
    };
    let zero = ZeroMode {
        may_trim: true,
        fast: false,
        fua: false,
    };
    for (index, m) in members.iter().enumerate() {
        m.device
            .write_zeroes(data_offset, data_size, zero)
            .map_err(|e| io(index, "zero its data area", e))?;
        m.device
            .flush()
            .map_err(|e| io(index, "flush its data area", e))?;
    }
    let array_uuid = Uuid::new_v4();
    for (index, m) in members.iter().enumerate() {
        let superblock = Superblock {
            array_uuid,
            member_uuid: Uuid::new_v4(),
            level: geometry.level(),
            state: ArrayState::Clean,
            index,
            unit,
            data_offset,
            data_size,
            events: 1,
            rebuilt: 0,
            names: members.iter().map(|m| m.name.clone()).collect(),
            roles: vec![MemberRole::Active; members.len()],
        };
        write_superblock(m.device.as_ref(), &superblock)
            .map_err(|e| io(index, "write its superblock", e))?;
        m.device
            .flush()
            .map_err(|e| io(index, "flush its superblock", e))?;
    }
    Ok(array_uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(n: usize) -> Vec<Superblock> {
        let array_uuid = Uuid::from_bytes([7; 16]);
        (0..n)
            .map(|index| Superblock {
                array_uuid,
                member_uuid: Uuid::from_bytes([index as u8 + 1; 16]),
                level: RaidLevel::Raid5,
                state: ArrayState::Clean,
                index,
                unit: 4096,
                data_offset: 4096,
                data_size: 1 << 20,
                events: 3,
                rebuilt: 0,
                names: Vec::new(),
                roles: vec![MemberRole::Active; n],
            })
            .collect()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("nbd://m{i}/x")).collect()
    }

    fn check(found: Vec<Result<Superblock, SuperblockError>>) -> Result<Assembly, MemberError> {
        let n = found.len();
        let geometry = Geometry::new(RaidLevel::Raid5, n, 4096).expect("geometry");
        check_members(geometry, &names(n), found)
    }

    fn ok(sbs: Vec<Superblock>) -> Vec<Result<Superblock, SuperblockError>> {
        sbs.into_iter().map(Ok).collect()
    }

    fn refused(found: Vec<Result<Superblock, SuperblockError>>) -> String {
        check(found).expect_err("refused").to_string()
    }

    #[test]
    fn the_array_as_created_is_accepted() {
        let a = check(ok(array(3))).expect("accepted");
        assert_eq!(a.state, ArrayState::Clean);
        assert_eq!(a.superblocks, array(3));
    }

    #[test]
    fn each_wrong_member_is_refused_by_name() {
        let mut found = ok(array(3));
        found[1] = Err(SuperblockError::NoMagic);
        let e = refused(found);
        assert!(
            e.starts_with("member 1 (nbd://m1/x) has no sluice RAID superblock"),
            "{e}"
        );
        assert!(e.contains("sluice raid create"), "{e}");

        let mut sbs = array(3);
        sbs[2].array_uuid = Uuid::from_bytes([9; 16]);
        let e = refused(ok(sbs));
        assert!(
            e.starts_with("member 2 (nbd://m2/x) belongs to another array"),
            "{e}"
        );

        let mut sbs = array(3);
        sbs.swap(0, 1);
        let e = refused(ok(sbs));
        assert!(
            e.starts_with("member 0 (nbd://m0/x) is member 1 of its array"),
            "{e}"
        );
        assert!(e.contains("wrong order"), "{e}");

        let mut sbs = array(3);
        sbs[2] = sbs[0].clone();
        let e = refused(ok(sbs));
        assert!(
            e.starts_with("member 2 (nbd://m2/x) is the same member as member 0"),
            "{e}"
        );

        let mut sbs = array(3);
        sbs[1].events = 2;
        let e = refused(ok(sbs));
        assert!(
            e.starts_with(
                "member 1 (nbd://m1/x) is stale: its event counter is 2 but the array's is 3"
            ),
            "{e}"
        );

        let mut sbs = array(3);
        for s in &mut sbs {
            s.roles[0] = MemberRole::Failed;
        }
        let e = refused(ok(sbs));
        assert!(
            e.starts_with("member 0 (nbd://m0/x) is recorded as failed"),
            "{e}"
        );

        // Three members of a four-member array.
        let e = refused(ok(array(4).into_iter().take(3).collect()));
        assert!(
            e.starts_with(
                "member 0 (nbd://m0/x) belongs to an array of 4 members, but 3 were given"
            ),
            "{e}"
        );

        let mut sbs = array(3);
        for s in &mut sbs {
            s.unit = 8192;
        }
        let e = refused(ok(sbs));
        assert!(e.contains("belongs to an array created as raid5 of 3 members with a 8192-byte unit, but the spec says raid5 of 3 members with a 4096-byte unit"), "{e}");

        let mut found = ok(array(3));
        found[0] = Err(SuperblockError::Checksum {
            stored: 1,
            computed: 2,
        });
        let e = refused(found);
        assert!(
            e.starts_with("member 0 (nbd://m0/x) has a damaged superblock"),
            "{e}"
        );
    }

    #[test]
    fn the_foreign_member_is_the_one_outvoted() {
        // Member 0 is from another array with a newer counter; the
        // other two agree, so member 0 is the foreign one.
        let mut sbs = array(3);
        sbs[0].array_uuid = Uuid::from_bytes([9; 16]);
        sbs[0].events = 100;
        let e = refused(ok(sbs));
        assert!(
            e.starts_with("member 0 (nbd://m0/x) belongs to another array"),
            "{e}"
        );
    }

    #[test]
    fn a_dirty_member_makes_the_array_dirty() {
        let mut sbs = array(3);
        sbs[2].state = ArrayState::Dirty;
        assert_eq!(check(ok(sbs)).expect("accepted").state, ArrayState::Dirty);
    }
}
