//! Turning a caller's list of (offset, length) segments into requests the
//! server accepts: which data distribution type each request carries,
//! and where a list that exceeds the server's published limits is cut.
//!
//! Both are pure functions of the segments and the limits, so the
//! property tests can check them without a server: splitting keeps every
//! byte, in list order, and every piece fits; the chosen DDT describes
//! exactly the piece's segments.

use std::borrow::Cow;

use sluice_obj_proto::consts::SGL_ENTRY_LEN;
use sluice_obj_proto::{encode_sgl_from, encode_strided, DdtError, DdtKind, Segment};

/// How one request lays out its segments (an SGL borrows the caller's
/// list: a request of thousands of segments is encoded from it, never
/// copied first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout<'a> {
    /// One range.
    Contiguous(Segment),
    /// `count` segments of `length` bytes, `stride` apart from `offset`.
    Strided {
        offset: u64,
        stride: u64,
        length: u64,
        count: u32,
    },
    /// Any list, its entries' offsets relative to `master` (0 unless
    /// [`with_master`](Layout::with_master) chose one).
    Sgl { master: u64, list: &'a [Segment] },
}

impl<'a> Layout<'a> {
    /// The DDT kind for the request flags.
    pub fn kind(&self) -> DdtKind {
        match self {
            Self::Contiguous(_) => DdtKind::Contiguous,
            Self::Strided { .. } => DdtKind::Strided,
            Self::Sgl { .. } => DdtKind::Sgl,
        }
    }

    /// An SGL of `list` at master offset 0 (its entries' offsets are the
    /// object's, as every server takes them).
    pub fn sgl(list: &'a [Segment]) -> Self {
        Self::Sgl { master: 0, list }
    }

    /// The same layout with an SGL's master offset at its lowest segment,
    /// so its entries' offsets are relative to it, as in the object
    /// paper ("Object-Based Storage"), where a command's list is relative
    /// to its master offset (only for a session that negotiated
    /// `SGL_MASTER`). The bytes it describes are unchanged; other
    /// layouts are returned as they are.
    pub fn with_master(self) -> Self {
        match self {
            Self::Sgl { list, .. } => Self::Sgl {
                master: list.iter().map(|s| s.offset).min().unwrap_or(0),
                list,
            },
            other => other,
        }
    }

    /// The header's master offset.
    pub fn master_offset(&self) -> u64 {
        match self {
            Self::Contiguous(s) => s.offset,
            Self::Strided { offset, .. } => *offset,
            Self::Sgl { master, .. } => *master,
        }
    }

    /// Bytes the layout describes (the header's length).
    pub fn total(&self) -> u64 {
        match self {
            Self::Contiguous(s) => s.length,
            Self::Strided { length, count, .. } => length * u64::from(*count),
            Self::Sgl { list, .. } => list.iter().map(|s| s.length).sum(),
        }
    }

    /// Appends the DDT bytes (none for contiguous); an SGL with a
    /// segment before its master offset cannot be encoded (never one of
    /// [`choose`]'s or [`with_master`](Self::with_master)'s).
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), DdtError> {
        match self {
            Self::Contiguous(_) => Ok(()),
            Self::Strided {
                stride,
                length,
                count,
                ..
            } => {
                encode_strided(*stride, *length, *count, out);
                Ok(())
            }
            Self::Sgl { master, list } => encode_sgl_from(*master, list, out),
        }
    }

    /// The segments in list order.
    pub fn segments(&self) -> Vec<Segment> {
        match self {
            Self::Contiguous(s) => vec![*s],
            Self::Strided {
                offset,
                stride,
                length,
                count,
            } => (0..u64::from(*count))
                .map(|i| Segment {
                    offset: offset + i * stride,
                    length: *length,
                })
                .collect(),
            Self::Sgl { list, .. } => list.to_vec(),
        }
    }
}

/// Joins neighbours in list order where one ends exactly where the next
/// begins (the bytes and their order are unchanged) and drops empty
/// segments, which move no byte. A list with nothing to join or drop,
/// the usual case, is returned as it is, uncopied, after one pass that
/// also checks every segment's end: `Err` names the first segment that
/// ends past 2^64.
pub fn coalesce(segments: &[Segment]) -> Result<Cow<'_, [Segment]>, Segment> {
    let mut end = None;
    let mut unchanged = true;
    for s in segments {
        let Some(e) = s.offset.checked_add(s.length) else {
            return Err(*s);
        };
        unchanged &= s.length > 0 && end != Some(s.offset);
        end = Some(e);
    }
    if unchanged {
        return Ok(Cow::Borrowed(segments));
    }
    let mut out: Vec<Segment> = Vec::with_capacity(segments.len());
    for s in segments.iter().filter(|s| s.length > 0) {
        match out.last_mut() {
            // Cannot overflow: this list's ends were all checked above.
            Some(last) if last.offset + last.length == s.offset => last.length += s.length,
            _ => out.push(*s),
        }
    }
    Ok(Cow::Owned(out))
}

/// The DDT for `segments` (non-empty, already [`coalesce`]d): one segment
/// is contiguous; equal lengths at a constant, increasing stride are
/// strided; anything else is a scatter/gather list.
pub fn choose(segments: &[Segment]) -> Layout<'_> {
    match segments {
        [] => Layout::Contiguous(Segment {
            offset: 0,
            length: 0,
        }),
        [one] => Layout::Contiguous(*one),
        [first, second, ..] => {
            let length = first.length;
            let stride = second.offset.wrapping_sub(first.offset);
            let regular = second.offset > first.offset
                && stride >= length
                && u32::try_from(segments.len()).is_ok()
                && segments.windows(2).all(|w| {
                    w[1].length == length && w[1].offset.checked_sub(w[0].offset) == Some(stride)
                });
            if regular {
                Layout::Strided {
                    offset: first.offset,
                    stride,
                    length,
                    count: segments.len() as u32,
                }
            } else {
                Layout::sgl(segments)
            }
        }
    }
}

/// The layout of `segments` (non-empty, already [`coalesce`]d) when the
/// caller pins the DDT ([`ObjOptions::ddt`](super::ObjOptions::ddt)): a
/// scatter/gather list carries any list, a strided request any regular
/// one (a single segment too, as one stride of its own length). What the
/// pinned kind cannot describe, and no pin at all, gets [`choose`]'s
/// pick, so the bytes a request moves never depend on the pin.
pub fn choose_as(segments: &[Segment], pin: Option<DdtKind>) -> Layout<'_> {
    match (pin, segments) {
        (Some(DdtKind::Sgl), [_, ..]) => Layout::sgl(segments),
        (Some(DdtKind::Strided), [one]) => Layout::Strided {
            offset: one.offset,
            stride: one.length,
            length: one.length,
            count: 1,
        },
        _ => choose(segments),
    }
}

/// DDT bytes a pinned DDT may add to a one-segment piece, which
/// [`split`] counts as free: an SGL of one entry (and a strided header
/// is no longer).
pub const PINNED_DDT_BYTES: u64 = 4 + SGL_ENTRY_LEN as u64;

/// What one request may carry, from the server's published limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PieceLimits {
    /// Most segments in one DDT.
    pub max_segments: u32,
    /// Most bytes of DDT plus data in one request (the published maximum
    /// payload less what else the request carries: parameters and
    /// attributes).
    pub max_bytes: u64,
}

/// DDT bytes a piece of `n` segments costs at most (a strided DDT is
/// never longer than the SGL of the same segments once `n >= 2`).
fn ddt_cost(n: u64) -> u64 {
    if n <= 1 {
        0
    } else {
        4 + SGL_ENTRY_LEN as u64 * n
    }
}

/// The smallest `max_bytes` [`split`] can work with: a piece of two
/// segments needs its SGL and a byte of each.
pub const MIN_PIECE_BYTES: u64 = 4 + 2 * SGL_ENTRY_LEN as u64 + 2;

/// Whether `segments` (already [`coalesce`]d, at least one) fit one
/// request under `limits`, so that [`split`] would return them whole as
/// its only piece.
pub fn fits_one(segments: &[Segment], limits: PieceLimits) -> bool {
    let n = segments.len() as u64;
    if n == 0 || n > u64::from(limits.max_segments) {
        return false;
    }
    let data = segments
        .iter()
        .try_fold(0u64, |t, s| t.checked_add(s.length));
    data.and_then(|d| d.checked_add(ddt_cost(n))) <= Some(limits.max_bytes)
}

/// Cuts `segments` (already [`coalesce`]d) into pieces that each fit
/// `limits`: at most `max_segments` segments, and DDT plus data within
/// `max_bytes`. Pieces keep list order and a segment too long for one
/// piece is cut into consecutive parts, so the pieces' segments laid end
/// to end move exactly the bytes of `segments` in order. A piece of whole
/// segments borrows them from `segments`; only a piece with a cut one is
/// a list of its own. `None` if `limits` leave no room for a byte.
pub fn split(segments: &[Segment], limits: PieceLimits) -> Option<Vec<Cow<'_, [Segment]>>> {
    if limits.max_segments == 0 || limits.max_bytes == 0 {
        return None;
    }
    let max_n = u64::from(limits.max_segments);
    let mut pieces = Vec::new();
    // The piece being built is `segments[start..i]` while `own` is
    // `None`; once a segment is cut (or dropped) at its ends, the piece is
    // the list in `own`.
    let mut start = 0usize;
    let mut own: Option<Vec<Segment>> = None;
    let (mut n, mut data) = (0u64, 0u64);
    for (i, whole) in segments.iter().enumerate() {
        // The common case, kept tight: a whole segment fits the piece.
        if own.is_none()
            && whole.length > 0
            && n < max_n
            && ddt_cost(n + 1)
                .saturating_add(data)
                .saturating_add(whole.length)
                <= limits.max_bytes
        {
            n += 1;
            data += whole.length;
            continue;
        }
        let mut s = *whole;
        if s.length == 0 {
            // Moves no byte, so it is in no piece.
            own.get_or_insert_with(|| segments[start..i].to_vec());
            continue;
        }
        let mut taken = false;
        while s.length > 0 {
            let room = if n + 1 > max_n {
                0
            } else {
                limits.max_bytes.saturating_sub(ddt_cost(n + 1) + data)
            };
            if room == 0 {
                if n == 0 {
                    // Even an empty piece has no room (max_bytes too
                    // small for the smallest DDT): give up.
                    return None;
                }
                pieces.push(match own.take() {
                    Some(list) => Cow::Owned(list),
                    None => Cow::Borrowed(&segments[start..i]),
                });
                start = i;
                // The rest of a segment already cut is not a whole one.
                own = taken.then(Vec::new);
                (n, data) = (0, 0);
                continue;
            }
            let take = s.length.min(room);
            let part = Segment {
                offset: s.offset,
                length: take,
            };
            if take < s.length || taken {
                own.get_or_insert_with(|| segments[start..i].to_vec())
                    .push(part);
            } else if let Some(list) = own.as_mut() {
                list.push(part);
            }
            taken = true;
            n += 1;
            data += take;
            s.offset += take;
            s.length -= take;
        }
    }
    if n > 0 {
        pieces.push(match own {
            Some(list) => Cow::Owned(list),
            None => Cow::Borrowed(&segments[start..]),
        });
    }
    Some(pieces)
}

/// Whether any two pieces touch a common byte (then writes must be sent
/// in order, since the later one must win).
pub fn pieces_overlap<P: AsRef<[Segment]>>(pieces: &[P]) -> bool {
    if pieces.len() < 2 {
        return false;
    }
    // Usually every segment starts where or after the one before it ends,
    // across pieces too: then no two can overlap, and nothing is sorted.
    let mut end = 0u64;
    let ascending = pieces.iter().flat_map(|p| p.as_ref()).all(|s| {
        let fits = s.offset >= end;
        end = s.offset.saturating_add(s.length);
        fits
    });
    if ascending {
        return false;
    }
    let mut spans: Vec<(u64, u64, usize)> = pieces
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            p.as_ref()
                .iter()
                .map(move |s| (s.offset, s.offset + s.length, i))
        })
        .collect();
    spans.sort_unstable();
    // Sweep in offset order keeping the furthest end seen for the two
    // pieces that reach furthest: a span overlaps an earlier span of
    // another piece exactly when one of those (not its own) passes its
    // start. Segments of one piece may overlap: the server orders them.
    let mut top: [Option<(u64, usize)>; 2] = [None, None];
    for (start, end, piece) in spans {
        if top.iter().flatten().any(|&(e, p)| p != piece && e > start) {
            return true;
        }
        match top {
            [Some((e, p)), _] if p == piece => top[0] = Some((e.max(end), p)),
            [_, Some((e, p))] if p == piece => top[1] = Some((e.max(end), p)),
            _ => {
                top[1] = match top[1] {
                    Some((e, _)) if e >= end => top[1],
                    _ => Some((end, piece)),
                }
            }
        }
        if let [Some(a), Some(b)] = top {
            if b.0 > a.0 {
                top = [Some(b), Some(a)];
            }
        }
        if top[0].is_none() {
            top = [top[1], None];
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sluice_obj_proto::{Ddt, Limits};

    fn seg(offset: u64, length: u64) -> Segment {
        Segment { offset, length }
    }

    #[test]
    fn one_segment_is_contiguous() {
        assert_eq!(choose(&[seg(5, 10)]), Layout::Contiguous(seg(5, 10)));
        // Neighbours in order are one segment.
        let touching = [seg(0, 4), seg(4, 4), seg(8, 0), seg(8, 1)];
        let c = coalesce(&touching).unwrap();
        assert_eq!(c, vec![seg(0, 9)]);
        // Nothing to join: the list itself.
        let apart = [seg(0, 4), seg(5, 4)];
        assert!(matches!(coalesce(&apart), Ok(Cow::Borrowed(b)) if b == apart));
        // A segment ending past 2^64 is named.
        let over = [seg(0, 4), seg(u64::MAX, 2)];
        assert_eq!(coalesce(&over), Err(seg(u64::MAX, 2)));
        assert_eq!(choose(&c), Layout::Contiguous(seg(0, 9)));
    }

    #[test]
    fn a_regular_pattern_is_strided() {
        let s = [seg(100, 4), seg(110, 4), seg(120, 4)];
        assert_eq!(
            choose(&s),
            Layout::Strided {
                offset: 100,
                stride: 10,
                length: 4,
                count: 3
            }
        );
        let mut ddt = Vec::new();
        choose(&s).encode(&mut ddt).unwrap();
        assert_eq!(ddt.len(), 20);
    }

    #[test]
    fn a_pinned_ddt_carries_what_it_can_describe() {
        let one = [seg(64, 512)];
        assert_eq!(choose_as(&one, None), Layout::Contiguous(seg(64, 512)));
        assert_eq!(choose_as(&one, Some(DdtKind::Contiguous)), choose(&one));
        assert_eq!(choose_as(&one, Some(DdtKind::Sgl)), Layout::sgl(&one));
        let strided = choose_as(&one, Some(DdtKind::Strided));
        assert_eq!(strided.segments(), one.to_vec());
        assert_eq!(strided.kind(), DdtKind::Strided);
        let mut ddt = Vec::new();
        strided.encode(&mut ddt).unwrap();
        assert!(ddt.len() as u64 <= PINNED_DDT_BYTES);
        let regular = [seg(0, 4), seg(6, 4), seg(12, 4)];
        assert_eq!(
            choose_as(&regular, Some(DdtKind::Sgl)),
            Layout::sgl(&regular)
        );
        assert_eq!(
            choose_as(&regular, Some(DdtKind::Strided)),
            choose(&regular)
        );
        // Strided cannot describe an irregular list: it stays an SGL.
        let irregular = [seg(0, 4), seg(20, 4), seg(6, 4)];
        assert_eq!(
            choose_as(&irregular, Some(DdtKind::Strided)),
            Layout::sgl(&irregular)
        );
        assert_eq!(choose_as(&[], Some(DdtKind::Sgl)), choose(&[]));
    }

    #[test]
    fn an_sgl_at_its_lowest_segment_carries_offsets_relative_to_it() {
        let list = [seg(4096 + 300, 4), seg(4096 + 100, 2), seg(4096 + 200, 1)];
        let at = choose(&list).with_master();
        assert_eq!(
            at,
            Layout::Sgl {
                master: 4196,
                list: &list
            }
        );
        assert_eq!(at.master_offset(), 4196);
        let mut ddt = Vec::new();
        at.encode(&mut ddt).unwrap();
        let mut want = Vec::new();
        let relative = [seg(200, 4), seg(0, 2), seg(100, 1)];
        sluice_obj_proto::encode_sgl(&relative, &mut want);
        assert_eq!(ddt, want);
        // Other layouts have no list to make relative.
        let regular = [seg(0, 4), seg(6, 4)];
        assert_eq!(choose(&regular).with_master(), choose(&regular));
        // A list before its master offset is refused, not wrapped.
        let bad = Layout::Sgl {
            master: 4197,
            list: &list,
        };
        assert!(bad.encode(&mut Vec::new()).is_err());
    }

    #[test]
    fn anything_else_is_a_scatter_gather_list() {
        for s in [
            vec![seg(10, 4), seg(0, 4)],             // decreasing
            vec![seg(0, 4), seg(10, 4), seg(30, 4)], // irregular stride
            vec![seg(0, 4), seg(10, 5)],             // unequal lengths
            vec![seg(0, 8), seg(4, 8)],              // overlapping
            vec![seg(0, 4), seg(10, 4), seg(10, 4)], // repeated
        ] {
            assert_eq!(choose(&s), Layout::sgl(&s), "{s:?}");
        }
    }

    #[test]
    fn a_long_segment_is_cut_and_too_many_segments_spread() {
        let limits = PieceLimits {
            max_segments: 2,
            max_bytes: 100,
        };
        let long = [seg(0, 250)];
        let pieces = split(&long, limits).unwrap();
        assert_eq!(
            pieces,
            vec![vec![seg(0, 100)], vec![seg(100, 100)], vec![seg(200, 50)]]
        );
        let three = [seg(0, 1), seg(10, 1), seg(20, 1)];
        let pieces = split(&three, limits).unwrap();
        assert_eq!(pieces, vec![vec![seg(0, 1), seg(10, 1)], vec![seg(20, 1)]]);
        // Whole segments are borrowed, not copied.
        assert!(pieces.iter().all(|p| matches!(p, Cow::Borrowed(_))));
        assert_eq!(
            split(
                &[seg(0, 1), seg(5, 1)],
                PieceLimits {
                    max_segments: 4,
                    max_bytes: 0
                }
            ),
            None
        );
    }

    #[test]
    fn overlap_between_pieces_is_found() {
        assert!(!pieces_overlap(&[vec![seg(0, 4)], vec![seg(4, 4)]]));
        assert!(pieces_overlap(&[vec![seg(0, 5)], vec![seg(4, 4)]]));
        // Inside one piece is the server's business.
        assert!(!pieces_overlap(&[
            vec![seg(0, 8), seg(2, 2)],
            vec![seg(8, 1)]
        ]));
        // An earlier piece hidden behind a longer segment of a third.
        assert!(pieces_overlap(&[
            vec![seg(0, 10)],
            vec![seg(1, 100)],
            vec![seg(5, 1)]
        ]));
        assert!(pieces_overlap(&[
            vec![seg(0, 100), seg(200, 1)],
            vec![seg(50, 1)],
        ]));
    }

    fn bytes_of(segments: &[Segment]) -> Vec<u64> {
        segments
            .iter()
            .flat_map(|s| s.offset..s.offset + s.length)
            .collect()
    }

    fn overlap_brute(pieces: &[Vec<Segment>]) -> bool {
        for (i, a) in pieces.iter().enumerate() {
            for b in &pieces[i + 1..] {
                for x in a {
                    for y in b {
                        if x.offset < y.offset + y.length && y.offset < x.offset + x.length {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    fn segments() -> impl Strategy<Value = Vec<Segment>> {
        prop::collection::vec((0u64..2000, 0u64..300), 0..24)
            .prop_map(|v| v.into_iter().map(|(o, l)| seg(o, l)).collect())
    }

    proptest! {
        /// Split under any limits moves exactly the same bytes in the same
        /// order, and every piece, with the DDT chosen for it, is one the
        /// server's own parser accepts under those limits.
        #[test]
        fn split_keeps_every_byte_in_order_and_fits(
            list in segments(),
            max_segments in 1u32..8,
            max_bytes in MIN_PIECE_BYTES..600,
        ) {
            let c = coalesce(&list).expect("ends below 2^64");
            prop_assert_eq!(bytes_of(&c), bytes_of(&list));
            let limits = PieceLimits { max_segments, max_bytes };
            let pieces = split(&c, limits).expect("limits leave room");
            let flat: Vec<Segment> = pieces.iter().flat_map(|p| p.iter()).copied().collect();
            prop_assert_eq!(bytes_of(&flat), bytes_of(&list));
            // A list that fits one request is its only piece, whole.
            prop_assert_eq!(
                fits_one(&c, limits),
                !c.is_empty() && pieces.len() == 1 && *pieces[0] == *c
            );
            let wire = Limits {
                max_segments,
                max_payload: max_bytes as u32,
                ..Limits::default()
            };
            for p in &pieces {
                prop_assert!(!p.is_empty());
                prop_assert!(p.len() as u32 <= max_segments);
                let p = coalesce(p).expect("ends below 2^64");
                // At master offset 0, and at the lowest segment's
                // (SGL_MASTER): the same bytes either way.
                for layout in [choose(&p), choose(&p).with_master()] {
                    prop_assert_eq!(layout.segments(), p.to_vec());
                    let mut ddt = Vec::new();
                    layout.encode(&mut ddt).map_err(|e| TestCaseError::fail(format!("{e}")))?;
                    let total = layout.total();
                    prop_assert!(ddt.len() as u64 + total <= max_bytes);
                    let parsed = Ddt::parse(layout.kind(), layout.master_offset(), total, &ddt, &wire)
                        .map_err(|e| TestCaseError::fail(format!("{e}")))?;
                    prop_assert_eq!(parsed.segments().collect::<Vec<_>>(), p.to_vec());
                }
            }
        }

        #[test]
        fn overlap_check_agrees_with_brute_force(
            pieces in prop::collection::vec(segments(), 0..5),
        ) {
            let pieces: Vec<Vec<Segment>> = pieces
                .into_iter()
                .map(|p| p.into_iter().filter(|s| s.length > 0).collect())
                .collect();
            prop_assert_eq!(pieces_overlap(&pieces), overlap_brute(&pieces));
        }
    }
}
