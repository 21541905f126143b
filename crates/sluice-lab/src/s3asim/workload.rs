//! The s3asim workload: a search's parameters, its index entries and
//! result pairs, and the bytes every result holds, all drawn from one
//! seed so a run can be verified.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sluice_client::obj::Segment;

use super::{INDEX_ENTRY, MIN_DB_SIZE, SEQUENCES};

/// What one search is: its size and the seed everything is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SearchParams {
    pub queries: u32,
    pub fragments: u32,
    /// Results per (query, fragment) pair, drawn uniformly from this
    /// inclusive range.
    pub results_min: u32,
    pub results_max: u32,
    /// Bytes of the database ([`SEQUENCES`] sequences).
    pub db_size: u64,
    pub seed: u64,
}

impl SearchParams {
    /// Mean bytes of one database sequence, and so of one result.
    pub fn mean_result(&self) -> u64 {
        self.db_size / SEQUENCES
    }

    fn check(&self) -> Result<()> {
        if self.queries == 0 || self.fragments == 0 {
            bail!("a search needs at least one query and one fragment");
        }
        if self.results_min > self.results_max || self.results_max == 0 {
            bail!(
                "results per pair {}..={}: the range must be non-empty and not all zero",
                self.results_min,
                self.results_max
            );
        }
        if self.db_size < MIN_DB_SIZE {
            bail!(
                "database size {}: at least {} ({} sequences of 32 bytes)",
                sluice_types::format_size(self.db_size),
                sluice_types::format_size(MIN_DB_SIZE),
                SEQUENCES
            );
        }
        Ok(())
    }
}

/// One result in a query's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub offset: u64,
    pub length: u32,
    pub score: u32,
}

/// One (query, fragment) pair: the work a worker is handed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    pub query: u32,
    pub fragment: u32,
    /// Where its results go, in offset order.
    pub results: Vec<Segment>,
}

/// A whole search: every pair's results placed in the result object, and
/// the index the master writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    pub params: SearchParams,
    /// In hand-out order: query by query, fragment by fragment.
    pub pairs: Vec<Pair>,
    /// Each query's results, best score first.
    pub index: Vec<Vec<IndexEntry>>,
    /// The encoded index, all queries in order: bytes `0..len` of the
    /// object.
    pub index_bytes: Vec<u8>,
    /// Bytes of the object: the index, then every query's results.
    pub size: u64,
}

impl Search {
    /// Draws the search `params` describes; the same params give the same
    /// search.
    pub fn generate(params: SearchParams) -> Result<Self> {
        params.check()?;
        // Counts from a stream of their own, so every database size of one
        // seed has the same number of results per pair.
        let mut counts = fastrand::Rng::with_seed(params.seed);
        let mut rng = fastrand::Rng::with_seed(sluice_types::splitmix64(params.seed));
        let mean = params.mean_result();
        let (lo, hi) = (mean / 2, mean + mean / 2);
        // Per query: (score, fragment, hit, length) of each result.
        let mut drawn: Vec<Vec<(u32, u32, u32, u64)>> = Vec::new();
        for _ in 0..params.queries {
            let mut hits = Vec::new();
            for f in 0..params.fragments {
                let n = counts.u32(params.results_min..=params.results_max);
                for k in 0..n {
                    hits.push((rng.u32(..), f, k, rng.u64(lo..=hi)));
                }
            }
            // Best score first; ties in a fixed order.
            hits.sort_by(|a, b| b.0.cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            drawn.push(hits);
        }
        let total: u64 = drawn.iter().map(|q| q.len() as u64).sum();
        let index_len = total * INDEX_ENTRY;
        let mut at = index_len;
        let mut index = Vec::with_capacity(drawn.len());
        let mut pairs = Vec::new();
        let mut index_bytes = Vec::with_capacity(index_len as usize);
        for (q, hits) in drawn.iter().enumerate() {
            let mut entries = Vec::with_capacity(hits.len());
            let mut by_fragment: Vec<Vec<Segment>> = vec![Vec::new(); params.fragments as usize];
            for &(score, f, _, length) in hits {
                entries.push(IndexEntry {
                    offset: at,
                    // At most 1.5 x the database over 16 Ki sequences.
                    length: u32::try_from(length).context("a result over 4 GiB")?,
                    score,
                });
                by_fragment[f as usize].push(Segment { offset: at, length });
                at += length;
            }
            for e in &entries {
                index_bytes.extend_from_slice(&e.offset.to_le_bytes());
                index_bytes.extend_from_slice(&e.length.to_le_bytes());
                index_bytes.extend_from_slice(&e.score.to_le_bytes());
            }
            for (f, results) in by_fragment.into_iter().enumerate() {
                pairs.push(Pair {
                    query: q as u32,
                    fragment: f as u32,
                    results,
                });
            }
            index.push(entries);
        }
        Ok(Self {
            params,
            pairs,
            index,
            index_bytes,
            size: at,
        })
    }

    /// Results in all.
    pub fn results(&self) -> u64 {
        self.index.iter().map(|q| q.len() as u64).sum()
    }

    /// Bytes of results in all.
    pub fn result_bytes(&self) -> u64 {
        self.size - self.index_bytes.len() as u64
    }

    /// Where query `q`'s index starts in the object.
    pub fn index_offset(&self, q: usize) -> u64 {
        self.index[..q].iter().map(|e| e.len() as u64).sum::<u64>() * INDEX_ENTRY
    }

    /// The encoded index of query `q`.
    pub fn query_index(&self, q: usize) -> &[u8] {
        let start = self.index_offset(q) as usize;
        &self.index_bytes[start..start + self.index[q].len() * INDEX_ENTRY as usize]
    }

    /// What the object must hold at `offset..offset + len` once the
    /// search is done: the index, then result bytes that are a function
    /// of their offset.
    pub fn expected(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let index_len = self.index_bytes.len() as u64;
        for (i, b) in out.iter_mut().enumerate() {
            let at = offset + i as u64;
            *b = if at < index_len {
                self.index_bytes[at as usize]
            } else {
                result_byte(self.params.seed, at)
            };
        }
        out
    }

    /// The bytes of `segments`, laid end to end (what a write of them
    /// carries).
    pub fn gather(&self, segments: &[Segment]) -> Vec<u8> {
        let mut out = Vec::with_capacity(segments.iter().map(|s| s.length as usize).sum());
        for s in segments {
            out.extend((s.offset..s.offset + s.length).map(|at| result_byte(self.params.seed, at)));
        }
        out
    }
}

/// The byte of a result at object offset `at`.
fn result_byte(seed: u64, at: u64) -> u8 {
    sluice_types::splitmix64(seed ^ (at >> 3)).to_le_bytes()[(at & 7) as usize]
}
