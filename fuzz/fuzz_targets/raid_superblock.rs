//! RAID member superblocks: decoding any bytes never panics, a decoded
//! superblock of the current version re-encodes to the bytes it was
//! read from (one of version 1 to a superblock that decodes the same),
//! and checking a
//! set of them as an array's members never panics and accepts only
//! members of one array, each in its place, none behind the others.
//!
//! Input layout:
//!
//! ```text
//! 0       bits 0..2: members given - 1 (1 to 8); bit 3: RAID 5 (else 0)
//! 1..     the members' superblock areas, the rest cut into equal parts
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_raid::superblock::{MemberRole, Superblock, VERSION};
use sluice_raid::{check_members, Geometry, RaidLevel};

fuzz_target!(|data: &[u8]| {
    let Some((&config, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(config & 7) + 1;
    let level = if config & 8 != 0 {
        RaidLevel::Raid5
    } else {
        RaidLevel::Raid0
    };
    let part = rest.len() / n;
    let areas: Vec<&[u8]> = (0..n).map(|i| &rest[i * part..(i + 1) * part]).collect();
    let found: Vec<_> = areas.iter().map(|a| Superblock::decode(a)).collect();
    for (area, f) in areas.iter().zip(&found) {
        if let Ok(s) = f {
            let bytes = s.encode();
            if area[8..12] == VERSION.to_be_bytes() {
                assert_eq!(&area[..bytes.len()], &bytes[..], "re-encodes to its bytes");
                assert_eq!(Superblock::decode(&bytes).as_ref(), Ok(s));
            } else {
                // Version 1 has no names: they decode empty.
                let again = Superblock::decode(&bytes).expect("re-encoded");
                assert_eq!(again.names, vec![String::new(); s.roles.len()]);
                assert_eq!(Superblock { names: Vec::new(), ..again }, *s);
            }
        }
    }
    // The geometry the first decoded superblock claims, so accepting
    // sets are reachable.
    let unit = found
        .iter()
        .find_map(|f| f.as_ref().ok().map(|s| s.unit))
        .unwrap_or(4096);
    let Ok(geometry) = Geometry::new(level, n, unit) else {
        return;
    };
    let names: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    if let Ok(assembly) = check_members(geometry, &names, found) {
        let first = &assembly.superblocks[0];
        let newest = assembly.superblocks.iter().map(|s| s.events).max();
        for (i, s) in assembly.superblocks.iter().enumerate() {
            assert_eq!(s.index, i);
            assert_eq!(s.array_uuid, first.array_uuid);
            assert_eq!(s.roles.len(), n);
            assert_eq!(Some(s.events), newest);
            assert_eq!(first.roles[i], MemberRole::Active);
        }
    }
});
