//! Scatter/gather segment lists: validation and the plan that sorts
//! them and merges adjacent or overlapping segments into runs, so one
//! request costs one vectored syscall per contiguous run of the file,
//! never one per segment. Public so that the server plans extent I/O on
//! block devices with the same code.

use std::ops::Range;

/// One (offset, length) piece of an object, in the caller's list order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub len: u64,
}

impl Segment {
    pub fn new(offset: u64, len: u64) -> Self {
        Self { offset, len }
    }

    /// The offset just past the segment.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A contiguous file range covering one or more segments.
#[derive(Debug)]
pub struct Run {
    pub offset: u64,
    pub len: u64,
    /// Where its members' indices sit in the plan's order.
    members: Range<usize>,
    /// Whether two members cover a common byte.
    pub overlapping: bool,
    /// Whether the run bridges a gap no member covers.
    pub gapped: bool,
}

/// The runs of a segment list (see [`plan`]). Each run's members are
/// indices into the list, sorted by offset, held in one array for the
/// whole plan: a run of thousands of small segments costs no allocation
/// of its own.
#[derive(Debug)]
pub struct Plan {
    /// Indices of the list's non-empty segments, sorted by offset.
    order: Vec<usize>,
    runs: Vec<Run>,
}

impl Plan {
    /// Each run with its members (indices into the list, sorted by
    /// offset), in offset order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Run, &[usize])> + '_ {
        self.runs
            .iter()
            .map(|run| (run, &self.order[run.members.clone()]))
    }

    /// How many runs there are.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether there is no run (every segment was empty).
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// Sorts segments by offset and merges those that touch or overlap, or
/// (with `bridge` > 0) lie at most `bridge` bytes apart: a read reads
/// such a gap into scratch space rather than make a second call.
/// Zero-length segments take no part. Offsets must not overflow (the
/// store checks this before planning).
pub fn plan(segments: &[Segment], bridge: u64) -> Plan {
    // The usual list (no empty segment, in offset order already) is only
    // checked, on the segments themselves, and its order is the list's:
    // a view of thousands of small blocks costs two passes over the
    // list, not an indirect sort check.
    let ascending = segments.iter().all(|s| s.len > 0) && segments.is_sorted_by_key(|s| s.offset);
    let order: Vec<usize> = if ascending {
        (0..segments.len()).collect()
    } else {
        let mut order: Vec<usize> = Vec::with_capacity(segments.len());
        order.extend((0..segments.len()).filter(|&i| segments[i].len > 0));
        // Stable: equal offsets keep list order, which writes rely on.
        order.sort_by_key(|&i| segments[i].offset);
        order
    };
    let runs = runs_of(segments, &order, bridge);
    Plan { order, runs }
}

/// The runs of the non-empty segments taken in `order` (by offset).
fn runs_of(segments: &[Segment], order: &[usize], bridge: u64) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let Some(&first) = order.first() else {
        return runs;
    };
    // The run being grown, kept in locals and pushed when a segment
    // starts the next one.
    let mut run = Run {
        offset: segments[first].offset,
        len: 0,
        members: 0..0,
        overlapping: false,
        gapped: false,
    };
    let mut end = segments[first].offset;
    for (k, &i) in order.iter().enumerate() {
        let s = segments[i];
        if s.offset > end.saturating_add(bridge) {
            run.len = end - run.offset;
            run.members.end = k;
            let next = Run {
                offset: s.offset,
                len: 0,
                members: k..k,
                overlapping: false,
                gapped: false,
            };
            runs.push(std::mem::replace(&mut run, next));
            end = s.offset;
        }
        run.overlapping |= s.offset < end;
        run.gapped |= s.offset > end;
        end = end.max(s.end());
    }
    run.len = end - run.offset;
    run.members.end = order.len();
    runs.push(run);
    runs
}

/// Whether each segment starts at or after the end of the one before it
/// (the usual list, a view of blocks in file order): such a list is its
/// own plan, with each segment's bytes right after the previous one's in
/// the request's buffer, so its I/O needs no sort, no index and no
/// table of buffer offsets.
pub fn ascends(segments: &[Segment]) -> bool {
    let mut end = 0u64;
    segments.iter().all(|s| {
        let after = s.offset >= end;
        end = s.end();
        after
    })
}

/// Where each segment's bytes sit in the request's buffer (list order).
pub fn buffer_offsets(segments: &[Segment]) -> Vec<usize> {
    let mut at = 0usize;
    segments
        .iter()
        .map(|s| {
            let here = at;
            at += s.len as usize;
            here
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_and_overlapping_segments_merge_into_one_run() {
        let segs = [
            Segment::new(100, 10),
            Segment::new(0, 10),
            Segment::new(10, 5),
            Segment::new(12, 10),
            Segment::new(50, 0),
        ];
        let plan_0 = plan(&segs, 0);
        let runs: Vec<_> = plan_0.iter().collect();
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].0.offset, runs[0].0.len), (0, 22));
        assert_eq!(runs[0].1, [1, 2, 3]);
        assert!(runs[0].0.overlapping && !runs[0].0.gapped);
        assert_eq!((runs[1].0.offset, runs[1].0.len), (100, 10));
        assert_eq!(runs[1].1, [0]);
        assert!(!runs[1].0.overlapping);
        // Bridging gaps of up to 78 bytes makes one run.
        let plan_78 = plan(&segs, 78);
        let runs: Vec<_> = plan_78.iter().collect();
        assert_eq!(runs.len(), 1);
        assert_eq!((runs[0].0.offset, runs[0].0.len), (0, 110));
        assert_eq!(runs[0].1, [1, 2, 3, 0]);
        assert!(runs[0].0.gapped);
        assert_eq!(plan(&segs, 77).len(), 2);
    }

    /// The plan, the slow way: every non-empty segment alone, sorted
    /// (stably) by offset, then neighbours merged one pair at a time.
    fn reference(segments: &[Segment], bridge: u64) -> Vec<(u64, u64, Vec<usize>, bool, bool)> {
        let mut order: Vec<usize> = (0..segments.len())
            .filter(|&i| segments[i].len > 0)
            .collect();
        order.sort_by_key(|&i| segments[i].offset);
        let mut runs: Vec<(u64, u64, Vec<usize>, bool, bool)> = Vec::new();
        for i in order {
            let s = segments[i];
            if let Some(last) = runs.last_mut() {
                let end = last.0 + last.1;
                if s.offset <= end + bridge {
                    last.1 = end.max(s.end()) - last.0;
                    last.2.push(i);
                    last.3 |= s.offset < end;
                    last.4 |= s.offset > end;
                    continue;
                }
            }
            runs.push((s.offset, s.len, vec![i], false, false));
        }
        runs
    }

    proptest::proptest! {
        #[test]
        fn the_plan_matches_merging_sorted_segments_pair_by_pair(
            segs in proptest::collection::vec((0u64..200, 0u64..20), 0..40),
            ascending in proptest::bool::ANY,
            bridge in 0u64..8,
        ) {
            let mut segs: Vec<Segment> = segs.into_iter().map(|(o, l)| Segment::new(o, l)).collect();
            if ascending {
                // The fast path's list: sorted, no empty segment.
                segs.retain(|s| s.len > 0);
                segs.sort_by_key(|s| s.offset);
            }
            let got: Vec<_> = plan(&segs, bridge)
                .iter()
                .map(|(r, m)| (r.offset, r.len, m.to_vec(), r.overlapping, r.gapped))
                .collect();
            proptest::prop_assert_eq!(got, reference(&segs, bridge));
        }
    }
}
