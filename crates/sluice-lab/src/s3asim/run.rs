//! One s3asim run: workers search and write their results, the master
//! verifies what they wrote, and the objects are removed again.

use sluice_client::Durability;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use sluice_client::obj::{ObjClient, Segment};
use sluice_client::striped::{Shape, StripedClient};

use super::servers::{options, ObjectRef, Writer};
use super::{Mode, Search, Target, FOUR, STRIPE_UNIT, VERIFY_CHUNK};

/// What each worker needs for a run.
pub(super) struct RunSpec<'a> {
    pub(super) target: &'a Target,
    pub(super) search: &'a Search,
    pub(super) mode: Mode,
    pub(super) workers: u32,
    pub(super) compute: Duration,
}

/// Makes a fresh result object.
pub(super) fn create_object(target: &Target, serial: u64) -> Result<ObjectRef> {
    match target {
        Target::One(uri) => {
            let mut c = ObjClient::connect(uri, &options())
                .with_context(|| format!("cannot connect to {uri}"))?;
            let ids = c
                .create("s3asim", 1, Durability::Buffered)
                .with_context(|| format!("cannot create the result object on {uri}"))?;
            let id = *ids
                .first()
                .ok_or_else(|| anyhow!("{uri} created no object"))?;
            Ok(ObjectRef::One(id))
        }
        Target::Striped(meta) => {
            let name = format!("s3asim/result-{}-{serial}", std::process::id());
            StripedClient::new(Arc::clone(meta), options())
                .create(&name, &Shape::striped(STRIPE_UNIT, FOUR))
                .with_context(|| format!("cannot create {name}"))?;
            Ok(ObjectRef::Striped(name))
        }
    }
}

fn remove_object(target: &Target, object: &ObjectRef) -> Result<()> {
    match (target, object) {
        (Target::One(uri), ObjectRef::One(id)) => ObjClient::connect(uri, &options())
            .and_then(|mut c| c.remove(*id, Durability::Buffered))
            .with_context(|| format!("cannot remove object {id} on {uri}")),
        (Target::Striped(meta), ObjectRef::Striped(name)) => {
            StripedClient::new(Arc::clone(meta), options())
                .remove(name)
                .with_context(|| format!("cannot remove {name}"))
        }
        _ => bail!("a result object of another setup"),
    }
}

/// A worker: takes pairs until the queue is empty, computes, writes.
fn worker(
    spec: &RunSpec<'_>,
    object: &ObjectRef,
    tasks: &Mutex<mpsc::Receiver<usize>>,
    done: &mpsc::Sender<Result<usize>>,
    stop: &AtomicBool,
    start: &Barrier,
) -> Result<u64> {
    let opened = Writer::open(spec.target, object);
    // Every worker reaches the barrier, so a failed open cannot leave the
    // others waiting.
    start.wait();
    let mut writer = opened?;
    let mut requests = 0;
    while !stop.load(Ordering::Relaxed) {
        let next = tasks
            .lock()
            .map_err(|_| anyhow!("a worker panicked"))?
            .recv();
        let Ok(k) = next else { break };
        let pair = &spec.search.pairs[k];
        if !spec.compute.is_zero() {
            std::thread::sleep(spec.compute);
        }
        let data = spec.search.gather(&pair.results);
        let written = match spec.mode {
            Mode::Naive => {
                let mut at = 0;
                pair.results.iter().try_for_each(|s| {
                    let end = at + s.length as usize;
                    let r = writer.write(std::slice::from_ref(s), &data[at..end]);
                    at = end;
                    requests += 1;
                    r
                })
            }
            Mode::Noncontig if pair.results.is_empty() => Ok(()),
            Mode::Noncontig => {
                requests += 1;
                writer.write(&pair.results, &data)
            }
        };
        let failed = written.is_err();
        // The master may have gone after an error of its own.
        let _ = done.send(
            written
                .map(|()| k)
                .with_context(|| format!("query {} fragment {}", pair.query, pair.fragment)),
        );
        if failed {
            break;
        }
    }
    Ok(requests)
}

/// One run: a fresh object, the search, the check; its time and requests.
pub(super) fn run_once(spec: &RunSpec<'_>, serial: u64) -> Result<(f64, u64, u64)> {
    let search = spec.search;
    let object = create_object(spec.target, serial)?;
    let result = search_and_verify(spec, &object);
    // The servers keep objects in files: free them for the next run.
    if let Err(e) = remove_object(spec.target, &object) {
        eprintln!("{e:#}");
    }
    let (took, requests) = result?;
    Ok((took, requests, search.size))
}

pub(super) fn search_and_verify(spec: &RunSpec<'_>, object: &ObjectRef) -> Result<(f64, u64)> {
    let search = spec.search;
    let mut master = Writer::open(spec.target, object)?;
    let (task_tx, task_rx) = mpsc::channel();
    let tasks = Mutex::new(task_rx);
    let (done_tx, done_rx) = mpsc::channel();
    let stop = AtomicBool::new(false);
    let start = Barrier::new(spec.workers as usize + 1);
    let fragments = search.params.fragments as usize;
    let (took, master_requests, results) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..spec.workers)
            .map(|_| {
                let (tasks, done, stop, start) = (&tasks, done_tx.clone(), &stop, &start);
                s.spawn(move || worker(spec, object, tasks, &done, stop, start))
            })
            .collect();
        drop(done_tx);
        start.wait();
        let began = Instant::now();
        for k in 0..search.pairs.len() {
            // Workers hold the receiver until the scope ends.
            let _ = task_tx.send(k);
        }
        drop(task_tx);
        let mut left = vec![fragments; search.index.len()];
        let mut master_requests = 0u64;
        let mut outcome = Ok(());
        for _ in 0..search.pairs.len() {
            let Ok(r) = done_rx.recv() else {
                outcome = Err(anyhow!("the workers stopped before the search was done"));
                break;
            };
            let q = match r {
                Ok(k) => search.pairs[k].query as usize,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            };
            left[q] -= 1;
            if left[q] == 0 && !search.index[q].is_empty() {
                let at = search.index_offset(q);
                let bytes = search.query_index(q);
                let seg = Segment {
                    offset: at,
                    length: bytes.len() as u64,
                };
                master_requests += 1;
                if let Err(e) = master.write(&[seg], bytes) {
                    outcome = Err(e.context(format!("the index of query {q}")));
                    break;
                }
            }
        }
        if outcome.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let results: Vec<Result<u64>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a worker panicked")))
            })
            .collect();
        let took = began.elapsed().as_secs_f64();
        (took, master_requests, outcome.map(|()| results))
    });
    let mut requests = master_requests;
    for r in results? {
        requests += r?;
    }
    verify(&mut master, search).context("the result object after the search")?;
    Ok((took, requests))
}

/// Reads the whole object back and compares it with what the search
/// says it holds.
pub(super) fn verify(master: &mut Writer, search: &Search) -> Result<()> {
    let mut at = 0;
    while at < search.size {
        let n = VERIFY_CHUNK.min(search.size - at);
        let got = master.read(at, n)?;
        let want = search.expected(at, n as usize);
        if got != want {
            let i = got
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(got.len().min(want.len()));
            bail!(
                "byte {} reads {:?}, the search wrote {:?} there ({} of {} bytes read)",
                at + i as u64,
                got.get(i),
                want.get(i),
                got.len(),
                n
            );
        }
        at += n;
    }
    Ok(())
}
