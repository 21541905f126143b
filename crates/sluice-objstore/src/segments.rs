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
    let mut order: Vec<usize> = Vec::with_capacity(segments.len());
    order.extend((0..segments.len()).filter(|&i| segments[i].len > 0));
    // Stable: equal offsets keep list order, which writes rely on. A list
    // in offset order already, the usual one, is only checked.
    if !order.is_sorted_by_key(|&i| segments[i].offset) {
        order.sort_by_key(|&i| segments[i].offset);
    }
    let mut runs: Vec<Run> = Vec::new();
    for (k, &i) in order.iter().enumerate() {
        let s = segments[i];
        match runs.last_mut() {
            Some(run) if s.offset <= run.offset + run.len + bridge => {
                let end = run.offset + run.len;
                if s.offset < end {
                    run.overlapping = true;
                }
                if s.offset > end {
                    run.gapped = true;
                }
                run.len = end.max(s.end()) - run.offset;
                run.members.end = k + 1;
            }
            _ => runs.push(Run {
                offset: s.offset,
                len: s.len,
                members: k..k + 1,
                overlapping: false,
                gapped: false,
            }),
        }
    }
    Plan { order, runs }
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
}
