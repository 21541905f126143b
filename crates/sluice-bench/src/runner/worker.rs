//! The workers of a run: one per connection (pipelined NBD requests) or
//! one synchronous operation at a time (a shared client or a local
//! file), each drawing its operations from the workload and recording
//! what it measured.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use sluice_client::{Connection, Outcome, Request};

use super::{worker_budget, Stop, WorkerStats, FILLER};
use crate::cpu;
use crate::verify;
use crate::workload::{Limit, OpGen, OpKind, Workload};

/// What every worker of a run shares.
pub(super) struct Ctx<'a> {
    pub(super) workload: &'a Workload,
    pub(super) region: (u64, u64),
    pub(super) counter: &'a AtomicU64,
    pub(super) abort: &'a AtomicBool,
    pub(super) barrier: &'a Barrier,
}

impl Ctx<'_> {
    fn stop(&self) -> Stop<'_> {
        Stop {
            deadline: match self.workload.limit {
                Limit::Time(d) => Some(Instant::now() + d),
                _ => None,
            },
            abort: self.abort,
        }
    }

    /// Marks the run as failed so the other workers stop early.
    fn fail<T>(&self, e: anyhow::Error) -> Result<T> {
        self.abort.store(true, Ordering::Relaxed);
        Err(e)
    }
}

/// The hot loop of one worker with its own connection.
/// Returns the connection still open, so the server's connection thread
/// (and its CPU time) is still there when the run's end is sampled.
pub(super) fn nbd_worker(
    ctx: &Ctx<'_>,
    mut conn: Connection,
    index: u32,
) -> Result<(WorkerStats, Option<Connection>)> {
    let w = ctx.workload;
    let bs = w.block_size as usize;
    let mut gen = OpGen::new(w, ctx.region, index);
    let mut budget = worker_budget(w.limit, w.block_size, w.workers, index);
    let qd = w.queue_depth.max(1) as usize;
    let mut started: HashMap<u64, (Instant, OpKind, u64)> = HashMap::with_capacity(qd * 2);
    let mut wbuf = vec![FILLER; bs];
    let mut stats = WorkerStats::default();
    let target = conn.details().target.clone();
    ctx.barrier.wait();
    let stop = ctx.stop();
    let cpu0 = cpu::thread_cpu();

    // Queues one operation unless the budget is spent.
    let mut issue = |conn: &mut Connection, started: &mut HashMap<u64, (Instant, OpKind, u64)>| {
        if let Some(b) = budget.as_mut() {
            if *b == 0 {
                return Ok(());
            }
            *b -= 1;
        }
        let (kind, off) = gen.next_op();
        let cookie = match kind {
            OpKind::Read => conn.queue(Request::Read {
                offset: off,
                length: bs as u32,
            }),
            OpKind::Write => {
                if w.verify {
                    verify::fill(&mut wbuf, off, w.seed);
                }
                conn.queue(Request::Write {
                    offset: off,
                    data: &wbuf,
                    fua: false,
                })
            }
        };
        let cookie = cookie.with_context(|| format!("cannot queue a request to {target}"))?;
        started.insert(cookie, (Instant::now(), kind, off));
        anyhow::Ok(())
    };

    for _ in 0..qd {
        issue(&mut conn, &mut started)?;
    }
    let mut failure: Option<anyhow::Error> = None;
    while conn.in_flight() > 0 {
        let mut done = 0usize;
        let received = conn.receive(|c| {
            let now = Instant::now();
            let Some((t0, kind, off)) = started.remove(&c.cookie) else {
                failure.get_or_insert(anyhow!("completion for unknown cookie {}", c.cookie));
                return;
            };
            match c.result {
                Ok(outcome) => {
                    if let (true, Outcome::Data(data)) = (w.verify, &outcome) {
                        match verify::check(data, off, w.seed) {
                            Ok(()) => stats.verified += 1,
                            Err(m) => {
                                failure.get_or_insert(anyhow!(
                                    "verification of the {}-byte read at {off}: {m}",
                                    data.len()
                                ));
                            }
                        }
                    }
                    stats.record(
                        kind,
                        bs as u64,
                        now.saturating_duration_since(t0).as_nanos() as u64,
                    );
                    done += 1;
                }
                Err(e) => {
                    failure.get_or_insert(anyhow!(e));
                }
            }
        });
        if let Err(e) = received {
            return ctx.fail(anyhow!(e));
        }
        if let Some(e) = failure.take() {
            return ctx.fail(e);
        }
        ctx.counter.fetch_add(done as u64, Ordering::Relaxed);
        if !stop.now_or_never() {
            for _ in 0..done {
                if let Err(e) = issue(&mut conn, &mut started) {
                    return ctx.fail(e);
                }
            }
        }
    }
    stats.finished = Some(Instant::now());
    stats.cpu = cpu::thread_cpu().saturating_sub(cpu0);
    Ok((stats, Some(conn)))
}

/// A worker whose `queue_depth` threads each do blocking operations.
pub(super) fn sync_worker<F>(ctx: &Ctx<'_>, index: u32, op: &F) -> Result<WorkerStats>
where
    F: Fn(OpKind, u64, &mut [u8]) -> Result<()> + Sync,
{
    let w = ctx.workload;
    let bs = w.block_size as usize;
    let gen = Mutex::new((
        OpGen::new(w, ctx.region, index),
        worker_budget(w.limit, w.block_size, w.workers, index),
    ));
    let qd = w.queue_depth.max(1);
    let start_line = Barrier::new(qd as usize);
    let mut total = WorkerStats::default();
    let results: Vec<Result<WorkerStats>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..qd)
            .map(|_| {
                let gen = &gen;
                let start_line = &start_line;
                s.spawn(move || -> Result<WorkerStats> {
                    let mut stats = WorkerStats::default();
                    let mut buf = vec![FILLER; bs];
                    // The last thread through releases the run barrier.
                    if start_line.wait().is_leader() {
                        ctx.barrier.wait();
                    }
                    start_line.wait();
                    let stop = ctx.stop();
                    let cpu0 = cpu::thread_cpu();
                    loop {
                        if stop.now_or_never() {
                            break;
                        }
                        let next = {
                            let mut g = gen.lock().unwrap_or_else(|p| p.into_inner());
                            match g.1.as_mut() {
                                Some(0) => None,
                                Some(b) => {
                                    *b -= 1;
                                    Some(g.0.next_op())
                                }
                                None => Some(g.0.next_op()),
                            }
                        };
                        let Some((kind, off)) = next else { break };
                        if kind == OpKind::Write && w.verify {
                            verify::fill(&mut buf, off, w.seed);
                        }
                        let t0 = Instant::now();
                        if let Err(e) = op(kind, off, &mut buf) {
                            return ctx.fail(e.context(format!("{kind:?} of {bs} bytes at {off}")));
                        }
                        let ns = t0.elapsed().as_nanos() as u64;
                        if kind == OpKind::Read && w.verify {
                            if let Err(m) = verify::check(&buf, off, w.seed) {
                                return ctx.fail(anyhow!(
                                    "verification of the {bs}-byte read at {off}: {m}"
                                ));
                            }
                            stats.verified += 1;
                        }
                        stats.record(kind, bs as u64, ns);
                        ctx.counter.fetch_add(1, Ordering::Relaxed);
                    }
                    stats.finished = Some(Instant::now());
                    stats.cpu = cpu::thread_cpu().saturating_sub(cpu0);
                    Ok(stats)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("I/O thread panicked")))
            })
            .collect()
    });
    for r in results {
        total.merge(&r?);
    }
    Ok(total)
}
