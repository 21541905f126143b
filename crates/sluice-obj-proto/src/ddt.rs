//! Data distribution types: which bytes of an object (or export) one
//! request touches. A decoded [`Ddt`] keeps its invariants: at least one
//! segment and no more than the published limit, every segment non-empty,
//! no segment end past `u64::MAX`, the total length at most the published
//! maximum payload. Whoever holds one never re-checks them.

use thiserror::Error;

use crate::consts::*;
use crate::wire::{be64, Reader};

/// The DDT value of a request's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdtKind {
    /// One range: the header's master offset and length.
    Contiguous,
    /// A scatter/gather list: (offset, length) pairs in any order, each
    /// offset relative to the master offset.
    Sgl,
    /// `count` segments of `length` bytes, `stride` apart from the master
    /// offset.
    Strided,
}

impl DdtKind {
    /// The kind named by a request's flags, or `None` for the reserved
    /// value 3.
    pub const fn from_flags(flags: u16) -> Option<Self> {
        match flags & FLAG_DDT_MASK {
            DDT_CONTIGUOUS => Some(Self::Contiguous),
            DDT_SGL => Some(Self::Sgl),
            DDT_STRIDED => Some(Self::Strided),
            _ => None,
        }
    }
    /// The flag bits for this kind.
    pub const fn flags(self) -> u16 {
        match self {
            Self::Contiguous => DDT_CONTIGUOUS,
            Self::Sgl => DDT_SGL,
            Self::Strided => DDT_STRIDED,
        }
    }
}

/// One byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    pub offset: u64,
    pub length: u64,
}

/// Why a DDT was refused. Each names the field at fault.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DdtError {
    #[error("DDT value 3 in the request flags is reserved")]
    ReservedKind,
    #[error("a contiguous request carries {0} DDT bytes; it must carry none")]
    UnexpectedDdt(u32),
    #[error("{kind:?} DDT is {got} bytes; its counts say {want}")]
    BadLength { kind: DdtKind, got: u32, want: u64 },
    #[error("{kind:?} DDT has zero segments")]
    ZeroCount { kind: DdtKind },
    #[error("{kind:?} DDT has {count} segments, more than the server's limit of {limit}")]
    TooManySegments {
        kind: DdtKind,
        count: u32,
        limit: u32,
    },
    #[error("segment {index} has length 0")]
    EmptySegment { index: u32 },
    #[error("strided DDT has stride {stride} smaller than its segment length {length}")]
    StrideTooSmall { stride: u64, length: u64 },
    #[error("segment {index} at offset {offset} with length {length} ends past 2^64")]
    Overflow {
        index: u32,
        offset: u64,
        length: u64,
    },
    #[error("the DDT describes more bytes than the server's limit of {limit}")]
    TooLong { limit: u32 },
    #[error(
        "SGL segment {index} at offset {offset} from the master offset {master} starts past 2^64"
    )]
    MasterOverflow {
        index: u32,
        master: u64,
        offset: u64,
    },
    #[error("segment {index} at offset {offset} lies before the master offset {master}, which an SGL cannot describe")]
    BeforeMaster {
        index: u32,
        master: u64,
        offset: u64,
    },
    #[error("the header's length {header} differs from the {ddt} bytes the DDT describes")]
    LengthMismatch { header: u64, ddt: u64 },
}

/// A checked scatter/gather list, borrowing its entries from the payload.
/// Each entry's offset is relative to the master offset: the segment it
/// names starts at `master + offset` (with a master offset of 0, the
/// entries' offsets are the object's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sgl<'a> {
    master: u64,
    entries: &'a [u8],
    total: u64,
}

/// A checked strided pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Strided {
    offset: u64,
    stride: u64,
    length: u64,
    count: u32,
}

impl Strided {
    /// First segment's offset (the master offset).
    pub const fn offset(&self) -> u64 {
        self.offset
    }
    /// Distance between the starts of consecutive segments.
    pub const fn stride(&self) -> u64 {
        self.stride
    }
    /// Bytes in each segment.
    pub const fn length(&self) -> u64 {
        self.length
    }
    /// Number of segments.
    pub const fn count(&self) -> u32 {
        self.count
    }
}

/// A checked data distribution type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ddt<'a> {
    /// One range (its length may be 0 for commands that move no data).
    Contiguous(Segment),
    Sgl(Sgl<'a>),
    Strided(Strided),
}

impl<'a> Ddt<'a> {
    /// Parses the DDT of a request: `kind` from its flags, `offset` and
    /// `length` from its header (the master offset; the total length the
    /// request moves), `raw` the DDT bytes at the start of its payload.
    pub fn parse(
        kind: DdtKind,
        offset: u64,
        length: u64,
        raw: &'a [u8],
        limits: &Limits,
    ) -> Result<Self, DdtError> {
        let ddt = match kind {
            DdtKind::Contiguous => {
                if !raw.is_empty() {
                    return Err(DdtError::UnexpectedDdt(len32(raw)));
                }
                if offset.checked_add(length).is_none() {
                    return Err(DdtError::Overflow {
                        index: 0,
                        offset,
                        length,
                    });
                }
                Self::Contiguous(Segment { offset, length })
            }
            DdtKind::Sgl => Self::Sgl(Sgl::parse(offset, raw, limits)?),
            DdtKind::Strided => Self::Strided(Strided::parse(offset, raw, limits)?),
        };
        if ddt.total() > u64::from(limits.max_payload) {
            return Err(DdtError::TooLong {
                limit: limits.max_payload,
            });
        }
        if ddt.total() != length {
            return Err(DdtError::LengthMismatch {
                header: length,
                ddt: ddt.total(),
            });
        }
        Ok(ddt)
    }

    /// The kind, for the request flags.
    pub const fn kind(&self) -> DdtKind {
        match self {
            Self::Contiguous(_) => DdtKind::Contiguous,
            Self::Sgl(_) => DdtKind::Sgl,
            Self::Strided(_) => DdtKind::Strided,
        }
    }

    /// Bytes the DDT describes (overlapping bytes counted once per segment).
    pub const fn total(&self) -> u64 {
        match self {
            Self::Contiguous(s) => s.length,
            Self::Sgl(s) => s.total,
            Self::Strided(s) => s.length * s.count as u64,
        }
    }

    /// Number of segments.
    pub fn segment_count(&self) -> u32 {
        match self {
            Self::Contiguous(_) => 1,
            Self::Sgl(s) => (s.entries.len() / SGL_ENTRY_LEN) as u32,
            Self::Strided(s) => s.count,
        }
    }

    /// The segments in list order (the order data travels in).
    pub fn segments(&self) -> Segments<'a> {
        Segments {
            ddt: *self,
            next: 0,
        }
    }

    /// The end of the furthest segment (the smallest size an object or
    /// export must have to hold every byte).
    pub fn end(&self) -> u64 {
        self.segments()
            .map(|s| s.offset + s.length)
            .max()
            .unwrap_or(0)
    }

    /// The DDT bytes that travel at the start of the payload (empty for
    /// contiguous).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Contiguous(_) => {}
            Self::Sgl(s) => {
                out.extend_from_slice(&((s.entries.len() / SGL_ENTRY_LEN) as u32).to_be_bytes());
                out.extend_from_slice(s.entries);
            }
            Self::Strided(s) => encode_strided(s.stride, s.length, s.count, out),
        }
    }

    /// The range a span reply to a read of these segments carries: from
    /// the first segment's start to the last one's end, when the segments
    /// ascend without overlapping (a strided DDT always does); `None` for
    /// any other list, and for a contiguous range (which needs no span).
    /// The body of a span reply is exactly this range's bytes, holes
    /// between segments included (docs/protocol.md, "Span replies").
    pub fn span(&self) -> Option<Segment> {
        match self {
            Self::Contiguous(_) => None,
            Self::Strided(s) => Some(Segment {
                offset: s.offset,
                length: s.stride * u64::from(s.count - 1) + s.length,
            }),
            Self::Sgl(_) => {
                let mut segments = self.segments();
                let first = segments.next()?;
                let mut end = first.offset + first.length;
                for s in segments {
                    if s.offset < end {
                        return None;
                    }
                    end = s.offset + s.length;
                }
                Some(Segment {
                    offset: first.offset,
                    length: end - first.offset,
                })
            }
        }
    }

    /// [`span`](Self::span) when its holes add at most an eighth to the
    /// bytes the segments hold: the rule by which sluice's client asks
    /// for a span reply and its server sends one, so a span never costs
    /// the link much more than the list it replaces.
    pub fn dense_span(&self) -> Option<Segment> {
        self.span()
            .filter(|span| span.length - self.total() <= self.total() / 8)
    }

    /// The segments' bytes in list order, taken out of `body`, a span
    /// reply's body ([`span`](Self::span)'s range); `None` if the DDT has
    /// no span or `body` is not exactly as long as it.
    pub fn gather_span(&self, body: &[u8]) -> Option<Vec<u8>> {
        let span = self.span()?;
        if body.len() as u64 != span.length {
            return None;
        }
        let mut out = Vec::with_capacity(self.total() as usize);
        for s in self.segments() {
            let at = (s.offset - span.offset) as usize;
            out.extend_from_slice(&body[at..at + s.length as usize]);
        }
        Some(out)
    }

    /// The master offset the header carries with this DDT.
    pub const fn master_offset(&self) -> u64 {
        match self {
            Self::Contiguous(s) => s.offset,
            Self::Sgl(s) => s.master,
            Self::Strided(s) => s.offset,
        }
    }
}

/// Appends an SGL DDT for master offset 0 (a client builds one from its
/// own segments; the server checks it with [`Ddt::parse`]).
pub fn encode_sgl(segments: &[Segment], out: &mut Vec<u8>) {
    out.extend_from_slice(&(segments.len() as u32).to_be_bytes());
    for s in segments {
        out.extend_from_slice(&s.offset.to_be_bytes());
        out.extend_from_slice(&s.length.to_be_bytes());
    }
}

/// Appends the SGL DDT of `segments` (absolute offsets) for a header
/// whose master offset is `master`: each entry carries its segment's
/// offset less `master`. A segment starting before `master` cannot be
/// described so; nothing is appended then.
pub fn encode_sgl_from(
    master: u64,
    segments: &[Segment],
    out: &mut Vec<u8>,
) -> Result<(), DdtError> {
    if let Some((i, s)) = segments.iter().enumerate().find(|(_, s)| s.offset < master) {
        return Err(DdtError::BeforeMaster {
            index: i as u32,
            master,
            offset: s.offset,
        });
    }
    out.reserve(4 + segments.len() * SGL_ENTRY_LEN);
    out.extend_from_slice(&(segments.len() as u32).to_be_bytes());
    for s in segments {
        out.extend_from_slice(&(s.offset - master).to_be_bytes());
        out.extend_from_slice(&s.length.to_be_bytes());
    }
    Ok(())
}

/// Appends a strided DDT.
pub fn encode_strided(stride: u64, length: u64, count: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&stride.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
}

fn len32(raw: &[u8]) -> u32 {
    u32::try_from(raw.len()).unwrap_or(u32::MAX)
}

fn check_count(kind: DdtKind, count: u32, limits: &Limits) -> Result<(), DdtError> {
    if count == 0 {
        return Err(DdtError::ZeroCount { kind });
    }
    if count > limits.max_segments {
        return Err(DdtError::TooManySegments {
            kind,
            count,
            limit: limits.max_segments,
        });
    }
    Ok(())
}

impl<'a> Sgl<'a> {
    fn parse(master: u64, raw: &'a [u8], limits: &Limits) -> Result<Self, DdtError> {
        let kind = DdtKind::Sgl;
        let mut r = Reader::new(raw);
        let Some(count) = r.u32() else {
            return Err(DdtError::BadLength {
                kind,
                got: len32(raw),
                want: 4,
            });
        };
        check_count(kind, count, limits)?;
        let want = 4 + u64::from(count) * SGL_ENTRY_LEN as u64;
        if raw.len() as u64 != want {
            return Err(DdtError::BadLength {
                kind,
                got: len32(raw),
                want,
            });
        }
        let entries = r.rest();
        let cap = u64::from(limits.max_payload);
        let mut total = 0u64;
        for (i, e) in entries.chunks_exact(SGL_ENTRY_LEN).enumerate() {
            let index = i as u32;
            let (relative, length) = (be64(e, 0), be64(e, 8));
            if length == 0 {
                return Err(DdtError::EmptySegment { index });
            }
            let Some(offset) = master.checked_add(relative) else {
                return Err(DdtError::MasterOverflow {
                    index,
                    master,
                    offset: relative,
                });
            };
            if offset.checked_add(length).is_none() {
                return Err(DdtError::Overflow {
                    index,
                    offset,
                    length,
                });
            }
            // Capped as it grows, so the sum cannot overflow.
            total += length.min(cap + 1);
            if total > cap {
                return Err(DdtError::TooLong {
                    limit: limits.max_payload,
                });
            }
        }
        Ok(Self {
            master,
            entries,
            total,
        })
    }

    /// The master offset the entries' offsets are relative to.
    pub const fn master(&self) -> u64 {
        self.master
    }

    /// Number of entries.
    pub fn count(&self) -> u32 {
        (self.entries.len() / SGL_ENTRY_LEN) as u32
    }
}

impl Strided {
    fn parse(offset: u64, raw: &[u8], limits: &Limits) -> Result<Self, DdtError> {
        let kind = DdtKind::Strided;
        if raw.len() != STRIDED_DDT_LEN {
            return Err(DdtError::BadLength {
                kind,
                got: len32(raw),
                want: STRIDED_DDT_LEN as u64,
            });
        }
        let mut r = Reader::new(raw);
        let (Some(stride), Some(length), Some(count)) = (r.u64(), r.u64(), r.u32()) else {
            return Err(DdtError::BadLength {
                kind,
                got: len32(raw),
                want: STRIDED_DDT_LEN as u64,
            });
        };
        check_count(kind, count, limits)?;
        if length == 0 {
            return Err(DdtError::EmptySegment { index: 0 });
        }
        if stride < length {
            return Err(DdtError::StrideTooSmall { stride, length });
        }
        let last = count - 1;
        let end = stride
            .checked_mul(u64::from(last))
            .and_then(|d| offset.checked_add(d))
            .and_then(|o| o.checked_add(length));
        if end.is_none() {
            return Err(DdtError::Overflow {
                index: last,
                offset: offset.wrapping_add(stride.wrapping_mul(u64::from(last))),
                length,
            });
        }
        if length
            .checked_mul(u64::from(count))
            .is_none_or(|t| t > u64::from(limits.max_payload))
        {
            return Err(DdtError::TooLong {
                limit: limits.max_payload,
            });
        }
        Ok(Self {
            offset,
            stride,
            length,
            count,
        })
    }
}

/// Iterator over a DDT's segments in list order.
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    ddt: Ddt<'a>,
    next: u32,
}

impl Iterator for Segments<'_> {
    type Item = Segment;
    fn next(&mut self) -> Option<Segment> {
        let i = self.next;
        let seg = match &self.ddt {
            Ddt::Contiguous(s) => (i == 0).then_some(*s),
            Ddt::Sgl(s) => {
                let at = i as usize * SGL_ENTRY_LEN;
                let e = s.entries.get(at..at + SGL_ENTRY_LEN)?;
                Some(Segment {
                    offset: s.master + be64(e, 0),
                    length: be64(e, 8),
                })
            }
            Ddt::Strided(s) => (i < s.count).then(|| Segment {
                offset: s.offset + s.stride * u64::from(i),
                length: s.length,
            }),
        }?;
        self.next += 1;
        Some(seg)
    }

    /// The kind is matched once, not per segment: collecting a list of
    /// thousands of segments is a tight loop.
    fn fold<B, F: FnMut(B, Segment) -> B>(self, init: B, mut f: F) -> B {
        let from = self.next;
        match self.ddt {
            Ddt::Contiguous(s) => {
                if from == 0 {
                    f(init, s)
                } else {
                    init
                }
            }
            Ddt::Sgl(s) => s
                .entries
                .chunks_exact(SGL_ENTRY_LEN)
                .skip(from as usize)
                .fold(init, |acc, e| {
                    f(
                        acc,
                        Segment {
                            offset: s.master + be64(e, 0),
                            length: be64(e, 8),
                        },
                    )
                }),
            Ddt::Strided(s) => (from..s.count).fold(init, |acc, i| {
                f(
                    acc,
                    Segment {
                        offset: s.offset + s.stride * u64::from(i),
                        length: s.length,
                    },
                )
            }),
        }
    }

    /// Exact, so that collecting a long list allocates once.
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.ddt.segment_count().saturating_sub(self.next) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Segments<'_> {}
