//! Reading a replicated column from one of its copies.
//!
//! Each column of a read goes to one copy, chosen so that reads spread
//! over the servers holding copies (the choice turns with each read) and
//! a server whose connection failed lately comes last; a column whose
//! copy fails is read again from its next copy, all such columns at
//! once, until one copy of each has answered or every copy has failed.
//!
//! A write goes to every copy (`client.rs`) and fails if any copy
//! fails. Until pieces that missed a write are marked stale in the
//! metadata, the copies of a range a failed write touched may differ,
//! and a read of that range may return the bytes of either, as a disk
//! may after a failed write.

use std::time::{Duration, Instant};

use sluice_meta::{Layout, Piece};
use sluice_obj_proto::Segment;

use super::client::{endpoint, StripedClient, StripedError};
use super::plan::StripePlan;
use super::pool::Endpoint;
use crate::obj::ObjError;

/// How long a server whose connection failed is tried last.
pub(crate) const SHUNNED_FOR: Duration = Duration::from_secs(10);

impl StripedClient {
    /// The copies of `column` in the order a read tries them.
    fn copy_order(&mut self, layout: &Layout, column: usize) -> Vec<usize> {
        let copies = layout.column_pieces(column);
        let n = copies.len();
        let turn = self.next_turn().wrapping_add(column);
        let mut order: Vec<usize> = (0..n).map(|k| copies.start + (turn + k) % n).collect();
        // Stable: the turn's order stands among equals.
        let now = Instant::now();
        order.sort_by_key(|&i| self.pool.failed_lately(&layout.pieces[i].server, now));
        order
    }

    /// Reads each column of `plan` from one of its copies (see the module
    /// documentation); the bytes of each column in plan order.
    pub(crate) fn read_columns(
        &mut self,
        name: &str,
        layout: &Layout,
        plan: &StripePlan,
    ) -> Result<Vec<Vec<u8>>, StripedError> {
        let n = plan.columns.len();
        let orders: Vec<Vec<usize>> = plan
            .columns
            .iter()
            .map(|c| self.copy_order(layout, c.column))
            .collect();
        let mut out: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut failures: Vec<Vec<(usize, ObjError)>> = (0..n).map(|_| Vec::new()).collect();
        for attempt in 0.. {
            let todo: Vec<usize> = (0..n)
                .filter(|&i| out[i].is_none() && attempt < orders[i].len())
                .collect();
            if todo.is_empty() {
                break;
            }
            let jobs: Vec<(Endpoint, (u64, &[Segment]))> = todo
                .iter()
                .map(|&i| {
                    let piece = &layout.pieces[orders[i][attempt]];
                    (
                        endpoint(piece),
                        (piece.object, plan.columns[i].segments.as_slice()),
                    )
                })
                .collect();
            let results = self.pool.fan_out(&jobs, |c, &(id, segments)| {
                c.read(id, segments).map(|r| r.data)
            });
            for (&i, r) in todo.iter().zip(results) {
                match r {
                    Ok(data) => out[i] = Some(data),
                    Err(e) => failures[i].push((orders[i][attempt], e)),
                }
            }
        }
        let mut parts = Vec::with_capacity(n);
        for ((part, failed), c) in out.into_iter().zip(failures).zip(&plan.columns) {
            match part {
                Some(p) => parts.push(p),
                None => return Err(every_copy_failed("read", name, layout, c.column, failed)),
            }
        }
        Ok(parts)
    }
}

/// The error of a column none of whose copies answered: with one copy,
/// that piece's failure; with more, one naming every copy's server, the
/// last failure as its cause (the others are logged).
fn every_copy_failed(
    op: &'static str,
    name: &str,
    layout: &Layout,
    column: usize,
    mut failed: Vec<(usize, ObjError)>,
) -> StripedError {
    let Some((last, source)) = failed.pop() else {
        return StripedError::Invalid {
            name: name.to_owned(),
            what: op,
            why: format!("column {column} has no copy"),
        };
    };
    let piece: &Piece = &layout.pieces[last];
    if failed.is_empty() {
        return StripedError::Piece {
            op,
            name: name.to_owned(),
            piece: last,
            server: piece.server.clone(),
            source: Box::new(source),
        };
    }
    // The error names every server; their causes but the last are here.
    for (i, e) in &failed {
        tracing::debug!(
            object = name,
            piece = i,
            server = %layout.pieces[*i].server,
            error = %e,
            "{op} of a copy failed"
        );
    }
    let servers: Vec<&str> = failed
        .iter()
        .map(|(i, _)| layout.pieces[*i].server.as_str())
        .chain([piece.server.as_str()])
        .collect();
    StripedError::NoCopy {
        op,
        name: name.to_owned(),
        column,
        servers: servers.join(", "),
        source: Box::new(source),
    }
}
