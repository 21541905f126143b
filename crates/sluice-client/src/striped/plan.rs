//! Splitting a request on a striped object by stripe: which bytes of
//! which data column each server moves, and where they go in the
//! caller's buffer.
//!
//! A pure function of the layout and the request, so the property tests
//! check it without a server: every byte of the request below the limit
//! is moved exactly once, to or from the column offset the layout gives
//! it, and each server's bytes keep the caller's order (where segments
//! overlap, a write's later bytes still win, as the server applies one
//! request's segments in list order).

use std::borrow::Cow;

use sluice_meta::Layout;
use sluice_obj_proto::Segment;
use thiserror::Error;

/// The bytes of a striped object a request names, as the object
/// protocol's data distribution types name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern<'a> {
    /// One range.
    Contiguous { offset: u64, length: u64 },
    /// Any list, moved in list order (a byte named twice moves twice).
    Segments(&'a [Segment]),
    /// `count` ranges of `length` bytes, `stride` apart from `offset`.
    Strided {
        offset: u64,
        stride: u64,
        length: u64,
        count: u64,
    },
}

impl Pattern<'_> {
    /// The ranges in order (empty ones included).
    pub fn segments(&self) -> impl Iterator<Item = Segment> + '_ {
        let (one, list, strided) = match *self {
            Self::Contiguous { offset, length } => (Some(Segment { offset, length }), None, None),
            Self::Segments(list) => (None, Some(list.iter().copied()), None),
            Self::Strided {
                offset,
                stride,
                length,
                count,
            } => (
                None,
                None,
                Some((0..count).map(move |i| Segment {
                    // Checked by `total` before any plan is made; wraps
                    // rather than panics if a caller skipped it.
                    offset: offset.wrapping_add(i.wrapping_mul(stride)),
                    length,
                })),
            ),
        };
        one.into_iter()
            .chain(list.into_iter().flatten())
            .chain(strided.into_iter().flatten())
    }

    /// Bytes the pattern moves, or why it names bytes past 2^64.
    pub fn total(&self) -> Result<u64, PlanError> {
        if let Self::Strided {
            offset,
            stride,
            length,
            count,
        } = *self
        {
            if count == 0 || length == 0 {
                return Ok(0);
            }
            return (count - 1)
                .checked_mul(stride)
                .and_then(|span| span.checked_add(offset))
                .and_then(|last| last.checked_add(length))
                .and_then(|_| length.checked_mul(count))
                .ok_or(PlanError::Overflow);
        }
        let mut total = 0u64;
        for s in self.segments() {
            s.offset.checked_add(s.length).ok_or(PlanError::Overflow)?;
            total = total.checked_add(s.length).ok_or(PlanError::Overflow)?;
        }
        Ok(total)
    }

    /// One past the highest byte named (0 for none).
    pub fn end(&self) -> u64 {
        self.segments()
            .filter(|s| s.length > 0)
            .map(|s| s.offset.saturating_add(s.length))
            .max()
            .unwrap_or(0)
    }
}

/// Why a request could not be planned.
#[derive(Debug, Clone, Copy, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanError {
    #[error("the request names bytes past 2^64, or more than 2^64 bytes in all")]
    Overflow,
    #[error("the layout has no pieces or a stripe unit of 0")]
    BadLayout,
}

/// A run of bytes in the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Offset in the caller's buffer (the request's bytes laid end to end).
    pub at: u64,
    pub length: u64,
}

/// What one data column moves for a request: with plain striping one
/// piece's server, with replicas each copy's (a read any one of them),
/// with erasure coding the data piece's ([`Layout::column_pieces`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ColumnPlan {
    /// Index of the data column in the layout ([`Layout::columns`]).
    pub column: usize,
    /// Ranges of the column's piece objects, in the order their bytes
    /// travel; no two neighbours adjacent (they are joined) and none
    /// empty. One range when the request's bytes in this column are
    /// contiguous.
    pub segments: Vec<Segment>,
    /// Where those bytes are in the caller's buffer: the segments' bytes
    /// laid end to end are the runs' bytes laid end to end.
    pub runs: Vec<Run>,
}

impl ColumnPlan {
    /// Bytes this column moves.
    pub fn len(&self) -> u64 {
        self.segments.iter().map(|s| s.length).sum()
    }

    /// Whether this column moves nothing.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    fn push(&mut self, segment: Segment, run: Run) {
        match self.segments.last_mut() {
            Some(last) if last.offset + last.length == segment.offset => {
                last.length += segment.length
            }
            _ => self.segments.push(segment),
        }
        match self.runs.last_mut() {
            Some(last) if last.at + last.length == run.at => last.length += run.length,
            _ => self.runs.push(run),
        }
    }

    /// This column's bytes out of the caller's `buffer`, in the order they
    /// travel: borrowed when they are one run, else copied.
    pub fn gather<'b>(&self, buffer: &'b [u8]) -> Cow<'b, [u8]> {
        let range = |r: &Run| r.at as usize..(r.at + r.length) as usize;
        if let [one] = self.runs.as_slice() {
            return Cow::Borrowed(&buffer[range(one)]);
        }
        let mut out = Vec::with_capacity(self.len() as usize);
        for r in &self.runs {
            out.extend_from_slice(&buffer[range(r)]);
        }
        Cow::Owned(out)
    }

    /// Copies `data` (this column's bytes in travel order) into the
    /// caller's `buffer`.
    pub fn scatter(&self, data: &[u8], buffer: &mut [u8]) {
        let mut from = 0usize;
        for r in &self.runs {
            let n = r.length as usize;
            buffer[r.at as usize..r.at as usize + n].copy_from_slice(&data[from..from + n]);
            from += n;
        }
    }
}

/// A request split by stripe.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StripePlan {
    /// The columns that move any byte, in column order.
    pub columns: Vec<ColumnPlan>,
    /// Bytes of the caller's buffer (every byte of the request).
    pub total: u64,
    /// Bytes moved: those of the request below the limit.
    pub moved: u64,
}

impl StripePlan {
    /// Splits `pattern` over `layout`. Bytes at or past `limit` move
    /// nothing (a read leaves them zero); give `u64::MAX` to move all.
    pub fn new(layout: &Layout, pattern: &Pattern<'_>, limit: u64) -> Result<Self, PlanError> {
        let unit = layout.stripe_unit;
        let width = layout.columns() as u64;
        if unit == 0 || width == 0 {
            return Err(PlanError::BadLayout);
        }
        let total = pattern.total()?;
        let mut columns: Vec<ColumnPlan> = (0..layout.columns())
            .map(|column| ColumnPlan {
                column,
                ..ColumnPlan::default()
            })
            .collect();
        let mut at = 0u64;
        let mut moved = 0u64;
        for s in pattern.segments() {
            let mut offset = s.offset;
            // Only the part below the limit moves.
            let end = (s.offset + s.length).min(limit.max(s.offset));
            while offset < end {
                let stripe = offset / unit;
                let within = offset % unit;
                let take = (unit - within).min(end - offset);
                let column = (stripe % width) as usize;
                let segment = Segment {
                    offset: (stripe / width) * unit + within,
                    length: take,
                };
                let run = Run {
                    at: at + (offset - s.offset),
                    length: take,
                };
                columns[column].push(segment, run);
                offset += take;
                moved += take;
            }
            at += s.length;
        }
        columns.retain(|p| !p.is_empty());
        Ok(Self {
            columns,
            total,
            moved,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sluice_meta::Piece;

    use super::*;

    fn layout(unit: u64, width: usize) -> Layout {
        Layout {
            stripe_unit: unit,
            redundancy: Default::default(),
            pieces: (0..width)
                .map(|i| Piece {
                    server: format!("sluice://s{i}:1"),
                    partition: 1,
                    object: i as u64,
                })
                .collect(),
        }
    }

    fn seg(offset: u64, length: u64) -> Segment {
        Segment { offset, length }
    }

    #[test]
    fn a_contiguous_request_is_one_range_per_server() {
        // 4 units of 10 over 2 pieces, from the middle of unit 0 to the
        // middle of unit 4.
        let l = layout(10, 2);
        let p = StripePlan::new(
            &l,
            &Pattern::Contiguous {
                offset: 5,
                length: 40,
            },
            u64::MAX,
        )
        .unwrap();
        assert_eq!((p.total, p.moved), (40, 40));
        assert_eq!(p.columns.len(), 2);
        // Piece 0 holds units 0, 2, 4 at 0, 10, 20: bytes 5..10, 20..30,
        // 40..45 of the object are 5..25 of the piece.
        assert_eq!(p.columns[0].segments, [seg(5, 20)]);
        assert_eq!(
            p.columns[0].runs,
            [
                Run { at: 0, length: 5 },
                Run { at: 15, length: 10 },
                Run { at: 35, length: 5 }
            ]
        );
        // Piece 1 holds units 1 and 3 at 0 and 10.
        assert_eq!(p.columns[1].segments, [seg(0, 20)]);
        assert_eq!(
            p.columns[1].runs,
            [Run { at: 5, length: 10 }, Run { at: 25, length: 10 }]
        );
    }

    #[test]
    fn a_strided_request_is_a_list_where_not_contiguous() {
        // Every other unit of 3 pieces: piece i gets units i, i+3..., of
        // which the request names those of even index.
        let l = layout(8, 3);
        let pattern = Pattern::Strided {
            offset: 0,
            stride: 16,
            length: 8,
            count: 6,
        };
        let p = StripePlan::new(&l, &pattern, u64::MAX).unwrap();
        // Units 0, 2, 4, 6, 8, 10 -> pieces 0, 2, 1, 0, 2, 1 at piece
        // offsets 0, 0, 8, 16, 16, 24.
        assert_eq!(p.columns[0].segments, [seg(0, 8), seg(16, 8)]);
        assert_eq!(p.columns[1].segments, [seg(8, 8), seg(24, 8)]);
        assert_eq!(p.columns[2].segments, [seg(0, 8), seg(16, 8)]);
        assert_eq!(p.moved, 48);
    }

    #[test]
    fn bytes_past_the_limit_move_nothing() {
        let l = layout(10, 2);
        let list = [seg(25, 10), seg(0, 3), seg(40, 5)];
        let p = StripePlan::new(&l, &Pattern::Segments(&list), 30).unwrap();
        assert_eq!((p.total, p.moved), (18, 8));
        // 25..30 is unit 2 (piece 0 at 15); 0..3 is unit 0 (piece 0 at 0).
        assert_eq!(p.columns.len(), 1);
        assert_eq!(p.columns[0].segments, [seg(15, 5), seg(0, 3)]);
        assert_eq!(
            p.columns[0].runs,
            [Run { at: 0, length: 5 }, Run { at: 10, length: 3 }]
        );
    }

    #[test]
    fn requests_past_two_to_the_64_are_refused() {
        let l = layout(4096, 2);
        let list = [seg(u64::MAX - 1, 2)];
        assert_eq!(
            StripePlan::new(&l, &Pattern::Segments(&list), u64::MAX),
            Err(PlanError::Overflow)
        );
        let strided = Pattern::Strided {
            offset: 1,
            stride: u64::MAX / 2,
            length: 1,
            count: 3,
        };
        assert_eq!(strided.total(), Err(PlanError::Overflow));
        assert_eq!(
            StripePlan::new(&layout(0, 1), &Pattern::Segments(&[]), 0),
            Err(PlanError::BadLayout)
        );
    }

    /// A strided pattern's offset, stride, length and count.
    type Strided = (u64, u64, u64, u64);

    fn pattern_strategy() -> impl Strategy<Value = (Vec<Segment>, Option<Strided>)> {
        let list = prop::collection::vec((0u64..600, 0u64..120), 0..12)
            .prop_map(|v| v.into_iter().map(|(o, l)| seg(o, l)).collect::<Vec<_>>());
        let strided = prop::option::of((0u64..300, 1u64..40, 0u64..40, 0u64..12));
        (list, strided)
    }

    proptest! {
        /// Every byte of the request below the limit is moved exactly
        /// once, by the piece and at the piece offset the layout gives
        /// it; the rest not at all; each piece's bytes keep the caller's
        /// order; and each piece's ranges are joined where adjacent.
        #[test]
        fn every_byte_maps_once_in_order(
            unit in 1u64..33,
            width in 1usize..6,
            (list, strided) in pattern_strategy(),
            limit in prop::option::of(0u64..700),
        ) {
            let l = layout(unit, width);
            let pattern = match strided {
                Some((offset, stride, length, count)) => Pattern::Strided {
                    offset,
                    stride: stride.max(length),
                    length,
                    count,
                },
                None => Pattern::Segments(&list),
            };
            let limit = limit.unwrap_or(u64::MAX);
            let plan = StripePlan::new(&l, &pattern, limit).unwrap();
            // The request, byte by byte: buffer position -> object offset.
            let wanted: Vec<u64> = pattern
                .segments()
                .flat_map(|s| s.offset..s.offset + s.length)
                .collect();
            prop_assert_eq!(plan.total, wanted.len() as u64);
            let mut seen = vec![0u32; wanted.len()];
            let mut moved = 0u64;
            for p in &plan.columns {
                prop_assert!(!p.segments.is_empty());
                prop_assert!(p.segments.iter().all(|s| s.length > 0));
                prop_assert!(p
                    .segments
                    .windows(2)
                    .all(|w| w[0].offset + w[0].length != w[1].offset));
                let stream: Vec<u64> = p
                    .segments
                    .iter()
                    .flat_map(|s| s.offset..s.offset + s.length)
                    .collect();
                let at: Vec<u64> = p.runs.iter().flat_map(|r| r.at..r.at + r.length).collect();
                prop_assert_eq!(stream.len(), at.len());
                prop_assert!(at.windows(2).all(|w| w[0] < w[1]), "out of order");
                for (&piece_offset, &b) in stream.iter().zip(&at) {
                    let stripe = (piece_offset / unit) * width as u64 + p.column as u64;
                    let object = stripe * unit + piece_offset % unit;
                    prop_assert_eq!(object, wanted[b as usize]);
                    seen[b as usize] += 1;
                }
                moved += stream.len() as u64;
            }
            for (b, &n) in seen.iter().enumerate() {
                let expect = u32::from(wanted[b] < limit);
                prop_assert_eq!(n, expect, "byte {} of the buffer", b);
            }
            prop_assert_eq!(plan.moved, moved);
        }

        /// Gathering each piece's bytes and scattering them back restores
        /// the buffer's moved bytes.
        #[test]
        fn gather_then_scatter_is_the_identity(
            unit in 1u64..17,
            width in 1usize..5,
            (list, _) in pattern_strategy(),
        ) {
            let l = layout(unit, width);
            let plan = StripePlan::new(&l, &Pattern::Segments(&list), u64::MAX).unwrap();
            let buffer: Vec<u8> = (0..plan.total).map(|i| (i % 251) as u8).collect();
            let mut back = vec![0u8; buffer.len()];
            for p in &plan.columns {
                let data = p.gather(&buffer);
                prop_assert_eq!(data.len() as u64, p.len());
                p.scatter(&data, &mut back);
            }
            prop_assert_eq!(back, buffer);
        }
    }
}
