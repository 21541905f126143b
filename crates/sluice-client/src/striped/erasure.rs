//! Erasure-coded striped objects: each row of `data` stripe units (one
//! per data piece, at the same offset in each) has `parity` Reed-Solomon
//! units at that offset in the parity pieces, and any `data` of the
//! `data + parity` pieces rebuild the row. The coding is the `rusty_erasure`
//! crate's (ISA-L's Cauchy matrices and SIMD kernels, the crate RAID 6
//! uses for its Q parity).
//!
//! # Objects written whole
//!
//! An erasure-coded object is written by the put that makes it (or a
//! put's new version of it), never in place once it is ready: a write
//! that changes a row's data and parity on several servers is not atomic,
//! and a client that died between the two would leave a row whose parity
//! no longer matches (RAID's write hole), which a later rebuild would
//! turn into wrong bytes. While a put writes its version nobody reads
//! it, and a put that dies is discarded whole, so no row it leaves half
//! written is ever used. In-place writes to a ready object are refused
//! with [`StripedError::Invalid`]; write with a put, or use replicas.
//!
//! A put's write covers whole rows where it can; a write that covers part
//! of a row reads the row's other data units first (from the put's own
//! version), so a put may write in any order and any sizes.
//!
//! # Reads
//!
//! A read asks the data pieces for its bytes. A data piece that fails is
//! rebuilt for the rows the read needs from `data` of the others (the
//! other data pieces and as many parity pieces as it takes), so a read
//! succeeds while at most `parity` pieces of the object are lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rusty_erasure::{Coder, Matrix};
use sluice_meta::{Layout, Redundancy};
use sluice_obj_proto::Segment;

use super::client::{endpoint, first_failure, StripedClient, StripedError};
use super::plan::StripePlan;
use super::pool::Endpoint;
use crate::obj::{DataOptions, ObjError};
use crate::Durability;

/// The coder of `data`+`parity`, made once per client.
pub(crate) fn coder_for(
    coders: &mut BTreeMap<(u8, u8), Arc<Coder>>,
    name: &str,
    data: u8,
    parity: u8,
) -> Result<Arc<Coder>, StripedError> {
    if let Some(c) = coders.get(&(data, parity)) {
        return Ok(Arc::clone(c));
    }
    let coder = Matrix::cauchy(usize::from(data), usize::from(parity))
        .and_then(rusty_erasure::coder)
        .map_err(|e| StripedError::Invalid {
            name: name.to_owned(),
            what: "erasure coding",
            why: format!("no {data}+{parity} code: {e}"),
        })?;
    let coder = Arc::new(coder);
    coders.insert((data, parity), Arc::clone(&coder));
    Ok(coder)
}

/// One piece's part of a write: its object, the range, the bytes.
type PieceWrite<'a> = (u64, Segment, &'a [u8]);

/// Rows `first .. end` of every piece: one contiguous range of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rows {
    first: u64,
    end: u64,
}

impl Rows {
    fn segment(self, unit: u64) -> Segment {
        Segment {
            offset: self.first * unit,
            length: (self.end - self.first) * unit,
        }
    }
}

/// The rows a column's segments reach, as maximal runs of adjacent rows.
fn row_runs<'a>(unit: u64, segments: impl Iterator<Item = &'a Segment>) -> Vec<Rows> {
    let mut rows = BTreeSet::new();
    for s in segments.filter(|s| s.length > 0) {
        rows.extend(s.offset / unit..=(s.offset + s.length - 1) / unit);
    }
    let mut runs: Vec<Rows> = Vec::new();
    for r in rows {
        match runs.last_mut() {
            Some(last) if last.end == r => last.end += 1,
            _ => runs.push(Rows {
                first: r,
                end: r + 1,
            }),
        }
    }
    runs
}

/// Whether `segments` cover every byte of `rows` in a column.
fn covers(unit: u64, rows: Rows, segments: &[Segment]) -> bool {
    let span = rows.segment(unit);
    let mut within: Vec<(u64, u64)> = segments
        .iter()
        .filter(|s| s.offset >= span.offset && s.offset < span.offset + span.length)
        .map(|s| (s.offset, s.offset + s.length))
        .collect();
    within.sort_unstable();
    let mut reached = span.offset;
    for (start, end) in within {
        if start > reached {
            return false;
        }
        reached = reached.max(end);
    }
    reached >= span.offset + span.length
}

impl StripedClient {
    /// Writes `data` into an erasure-coded put's version as `plan` splits
    /// it: row runs the write does not cover whole are read first; then
    /// the touched data units and every row's parity are written.
    pub(crate) fn write_erasure(
        &mut self,
        name: &str,
        layout: &Layout,
        plan: &StripePlan,
        data: &[u8],
        durability: Durability,
    ) -> Result<(), StripedError> {
        let Redundancy::Erasure { data: k, parity: m } = layout.redundancy else {
            return Ok(());
        };
        let coder = coder_for(&mut self.coders, name, k, m)?;
        let (k, unit) = (usize::from(k), layout.stripe_unit);
        let runs = row_runs(unit, plan.columns.iter().flat_map(|c| &c.segments));
        let mut jobs: Vec<(usize, Segment, Vec<u8>)> = Vec::new();
        for rows in runs {
            let span = rows.segment(unit);
            let whole = (0..k).all(|c| {
                plan.columns
                    .iter()
                    .find(|p| p.column == c)
                    .is_some_and(|p| covers(unit, rows, &p.segments))
            });
            let mut columns = if whole {
                vec![vec![0u8; span.length as usize]; k]
            } else {
                self.read_rows(name, layout, rows, 0..k)?
            };
            let mut touched = vec![false; k];
            for p in &plan.columns {
                let bytes = p.gather(data);
                let mut at = 0usize;
                for s in &p.segments {
                    let n = s.length as usize;
                    if s.offset >= span.offset && s.offset < span.offset + span.length {
                        let from = (s.offset - span.offset) as usize;
                        columns[p.column][from..from + n].copy_from_slice(&bytes[at..at + n]);
                        touched[p.column] = true;
                    }
                    at += n;
                }
            }
            let mut parity = vec![vec![0u8; span.length as usize]; layout.pieces.len() - k];
            {
                let sources: Vec<&[u8]> = columns.iter().map(Vec::as_slice).collect();
                let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
                coder
                    .encode(&sources, &mut outs)
                    .map_err(|e| StripedError::Invalid {
                        name: name.to_owned(),
                        what: "erasure coding",
                        why: format!("cannot encode a row: {e}"),
                    })?;
            }
            for (c, bytes) in columns.into_iter().enumerate() {
                if touched[c] {
                    jobs.push((c, span, bytes));
                }
            }
            for (j, bytes) in parity.into_iter().enumerate() {
                jobs.push((k + j, span, bytes));
            }
        }
        let pieces: Vec<(usize, &_)> = jobs
            .iter()
            .map(|(i, _, _)| (*i, &layout.pieces[*i]))
            .collect();
        let wire: Vec<(Endpoint, PieceWrite<'_>)> = jobs
            .iter()
            .map(|(i, s, b)| {
                let piece = &layout.pieces[*i];
                (endpoint(piece), (piece.object, *s, b.as_slice()))
            })
            .collect();
        let options = DataOptions {
            durability,
            attrs: Vec::new(),
        };
        let results = self.pool.fan_out(&wire, |c, &(id, s, bytes)| {
            c.write(id, &[s], bytes, &options)
        });
        first_failure("write", name, &pieces, results).map(drop)
    }

    /// Rows `rows` of the pieces `wanted` (indices into the layout), each
    /// piece's rows as one buffer; any failure fails the read.
    fn read_rows(
        &mut self,
        name: &str,
        layout: &Layout,
        rows: Rows,
        wanted: std::ops::Range<usize>,
    ) -> Result<Vec<Vec<u8>>, StripedError> {
        let span = rows.segment(layout.stripe_unit);
        let pieces: Vec<(usize, &_)> = wanted.map(|i| (i, &layout.pieces[i])).collect();
        self.on_pieces("read", name, &pieces, |c, id| {
            c.read(id, &[span]).map(|r| r.data)
        })
    }

    /// Reads each column of `plan` from its data piece; the columns whose
    /// piece fails are rebuilt from the others (see the module
    /// documentation). The bytes of each column in plan order.
    pub(crate) fn read_erasure(
        &mut self,
        name: &str,
        layout: &Layout,
        plan: &StripePlan,
    ) -> Result<Vec<Vec<u8>>, StripedError> {
        let jobs: Vec<(Endpoint, (u64, &[Segment]))> = plan
            .columns
            .iter()
            .map(|c| {
                let piece = &layout.pieces[c.column];
                (endpoint(piece), (piece.object, c.segments.as_slice()))
            })
            .collect();
        let results = self.pool.fan_out(&jobs, |c, &(id, segments)| {
            c.read(id, segments).map(|r| r.data)
        });
        let mut parts = Vec::with_capacity(results.len());
        let mut lost = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(data) => parts.push(data),
                Err(e) => {
                    parts.push(Vec::new());
                    lost.push((i, e));
                }
            }
        }
        if !lost.is_empty() {
            self.rebuild_columns(name, layout, plan, &mut parts, lost)?;
        }
        Ok(parts)
    }

    /// Fills `parts[i]` for each column `lost` names, from the rows its
    /// segments reach rebuilt out of `data` other pieces.
    fn rebuild_columns(
        &mut self,
        name: &str,
        layout: &Layout,
        plan: &StripePlan,
        parts: &mut [Vec<u8>],
        lost: Vec<(usize, ObjError)>,
    ) -> Result<(), StripedError> {
        let Redundancy::Erasure { data: k, parity: m } = layout.redundancy else {
            return Ok(());
        };
        let coder = coder_for(&mut self.coders, name, k, m)?;
        let (k, unit) = (usize::from(k), layout.stripe_unit);
        let lost_columns: Vec<usize> = lost.iter().map(|(i, _)| plan.columns[*i].column).collect();
        // One span of rows covering what every lost column needs.
        let runs = row_runs(
            unit,
            lost.iter().flat_map(|(i, _)| &plan.columns[*i].segments),
        );
        let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
            return Ok(());
        };
        let rows = Rows {
            first: first.first,
            end: last.end,
        };
        let span = rows.segment(unit);
        let mut failed: Vec<(usize, ObjError)> = lost
            .into_iter()
            .map(|(i, e)| (plan.columns[i].column, e))
            .collect();
        let mut shards: Vec<Option<Vec<u8>>> = vec![None; layout.pieces.len()];
        // Survivors in order, data pieces first: k of them suffice.
        let mut candidates = (0..layout.pieces.len()).filter(|i| !lost_columns.contains(i));
        while shards.iter().filter(|s| s.is_some()).count() < k {
            let need = k - shards.iter().filter(|s| s.is_some()).count();
            let batch: Vec<usize> = candidates.by_ref().take(need).collect();
            if batch.is_empty() {
                break;
            }
            let jobs: Vec<(Endpoint, u64)> = batch
                .iter()
                .map(|&i| (endpoint(&layout.pieces[i]), layout.pieces[i].object))
                .collect();
            let results = self
                .pool
                .fan_out(&jobs, |c, &id| c.read(id, &[span]).map(|r| r.data));
            for (&i, r) in batch.iter().zip(results) {
                match r {
                    Ok(bytes) => shards[i] = Some(bytes),
                    Err(e) => failed.push((i, e)),
                }
            }
        }
        if shards.iter().filter(|s| s.is_some()).count() < k {
            return Err(too_many_lost(name, layout, failed));
        }
        let present: Vec<Option<&[u8]>> = shards.iter().map(|s| s.as_deref()).collect();
        let mut rebuilt = vec![vec![0u8; span.length as usize]; lost_columns.len()];
        {
            let mut outs: Vec<&mut [u8]> = rebuilt.iter_mut().map(Vec::as_mut_slice).collect();
            coder
                .recover(&present, &lost_columns, &mut outs)
                .map_err(|e| StripedError::Invalid {
                    name: name.to_owned(),
                    what: "erasure coding",
                    why: format!("cannot rebuild rows {}..{}: {e}", rows.first, rows.end),
                })?;
        }
        for (bytes, column) in rebuilt.iter().zip(&lost_columns) {
            let Some(i) = plan.columns.iter().position(|p| p.column == *column) else {
                continue;
            };
            let mut out = Vec::with_capacity(plan.columns[i].len() as usize);
            for s in &plan.columns[i].segments {
                let from = (s.offset - span.offset) as usize;
                out.extend_from_slice(&bytes[from..from + s.length as usize]);
            }
            parts[i] = out;
        }
        Ok(())
    }
}

/// The error of a read that lost more pieces than the code survives,
/// naming every failed piece's server, the last failure as its cause.
fn too_many_lost(name: &str, layout: &Layout, mut failed: Vec<(usize, ObjError)>) -> StripedError {
    let servers: Vec<&str> = failed
        .iter()
        .map(|(i, _)| layout.pieces[*i].server.as_str())
        .collect();
    let servers = servers.join(", ");
    match failed.pop() {
        Some((_, source)) => StripedError::TooManyLost {
            name: name.to_owned(),
            redundancy: layout.redundancy,
            servers,
            source: Box::new(source),
        },
        None => StripedError::Invalid {
            name: name.to_owned(),
            what: "read",
            why: "too few pieces to rebuild from".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(offset: u64, length: u64) -> Segment {
        Segment { offset, length }
    }

    #[test]
    fn rows_are_grouped_into_runs_of_neighbours() {
        let runs = row_runs(10, [seg(5, 10), seg(30, 1), seg(40, 0), seg(49, 2)].iter());
        assert_eq!(
            runs,
            [Rows { first: 0, end: 2 }, Rows { first: 3, end: 6 },]
        );
    }

    #[test]
    fn coverage_counts_every_byte_once_in_any_order() {
        let rows = Rows { first: 1, end: 3 };
        assert!(covers(10, rows, &[seg(20, 10), seg(10, 10)]));
        assert!(covers(10, rows, &[seg(10, 15), seg(15, 15)]));
        assert!(!covers(10, rows, &[seg(10, 9), seg(20, 10)]));
        assert!(!covers(10, rows, &[seg(10, 19)]));
        assert!(!covers(10, rows, &[]));
    }
}
