//! The connections a striped client holds to object servers, one per
//! server and partition, made on first use and kept; and running work
//! on several servers at once.
//!
//! An [`ObjClient`] is owned by one thread at a time, so a fan-out moves
//! each server's client onto a scoped thread of its own for the length
//! of the operation and takes it back after; the first server's work
//! runs on the caller's thread, so work for one server starts no thread. A client whose
//! connection failed is dropped, and the next use connects again.

use std::collections::HashMap;
use std::time::Instant;

use super::replicas::SHUNNED_FOR;

use crate::net::uri::ObjUri;
use crate::obj::ObjError;
use crate::obj::{ObjClient, ObjOptions};

/// One connection's address: the server as the metadata names it, and
/// the partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Endpoint {
    pub(crate) server: String,
    pub(crate) partition: u64,
}

/// Open connections by endpoint.
#[derive(Debug)]
pub(crate) struct Pool {
    options: ObjOptions,
    open: HashMap<Endpoint, ObjClient>,
    /// Servers whose connection failed, and when it last did; a good
    /// answer forgets it.
    failed: HashMap<String, Instant>,
}

fn connect(endpoint: &Endpoint, options: &ObjOptions) -> Result<ObjClient, ObjError> {
    let uri: ObjUri = endpoint.server.parse()?;
    ObjClient::connect(&uri.with_partition(endpoint.partition), options)
}

/// Runs `jobs` one after the other on one endpoint's client, connecting
/// first if there is none; returns the client if its connection is
/// still good. After a failure that breaks the connection the remaining
/// jobs fail without being sent.
fn run_on<J, T>(
    endpoint: Endpoint,
    client: Option<ObjClient>,
    options: &ObjOptions,
    jobs: &[(usize, &J)],
    work: &(impl Fn(&mut ObjClient, &J) -> Result<T, ObjError> + Sync),
) -> Finished<T> {
    let mut client = match client {
        Some(c) => c,
        None => match connect(&endpoint, options) {
            Ok(c) => c,
            Err(e) => {
                // The first job gets the error itself, the others copies.
                let mut results: Vec<_> = jobs
                    .iter()
                    .skip(1)
                    .map(|(i, _)| (*i, Err(e.for_another())))
                    .collect();
                if let Some((i, _)) = jobs.first() {
                    results.insert(0, (*i, Err(e)));
                }
                return Finished {
                    endpoint,
                    client: None,
                    results,
                };
            }
        },
    };
    let mut out = Vec::with_capacity(jobs.len());
    let mut broken: Option<ObjError> = None;
    for (i, job) in jobs {
        if let Some(e) = &broken {
            out.push((*i, Err(e.for_another())));
            continue;
        }
        let r = work(&mut client, job);
        if let Err(e) = &r {
            if !e.connection_survives() {
                broken = Some(e.for_another());
            }
        }
        out.push((*i, r));
    }
    Finished {
        endpoint,
        client: broken.is_none().then_some(client),
        results: out,
    }
}

/// One endpoint's part of a fan-out, done.
struct Finished<T> {
    endpoint: Endpoint,
    /// The client, if its connection is still good.
    client: Option<ObjClient>,
    /// Each job's result, by its index in the fan-out.
    results: Vec<(usize, Result<T, ObjError>)>,
}

impl Pool {
    pub(crate) fn new(options: ObjOptions) -> Self {
        Self {
            options,
            open: HashMap::new(),
            failed: HashMap::new(),
        }
    }

    /// Whether `server`'s connection failed within [`SHUNNED_FOR`] of
    /// `now`.
    pub(crate) fn failed_lately(&self, server: &str, now: Instant) -> bool {
        self.failed
            .get(server)
            .is_some_and(|&t| now.saturating_duration_since(t) < SHUNNED_FOR)
    }

    /// Runs `work` for every job, the jobs of each endpoint in order on
    /// its connection, different endpoints in parallel; one result per
    /// job, in the order of `jobs`.
    pub(crate) fn fan_out<J: Sync, T: Send>(
        &mut self,
        jobs: &[(Endpoint, J)],
        work: impl Fn(&mut ObjClient, &J) -> Result<T, ObjError> + Sync,
    ) -> Vec<Result<T, ObjError>> {
        // Group by endpoint, keeping the first appearance's order.
        let mut groups: Vec<(Endpoint, Vec<(usize, &J)>)> = Vec::new();
        for (i, (endpoint, job)) in jobs.iter().enumerate() {
            match groups.iter_mut().find(|(e, _)| e == endpoint) {
                Some((_, g)) => g.push((i, job)),
                None => groups.push((endpoint.clone(), vec![(i, job)])),
            }
        }
        let options = &self.options;
        let work = &work;
        let taken: Vec<_> = groups
            .into_iter()
            .map(|(endpoint, g)| {
                let client = self.open.remove(&endpoint);
                (endpoint, client, g)
            })
            .collect();
        let run = move |(endpoint, client, g): (Endpoint, Option<ObjClient>, Vec<(usize, &J)>)| {
            run_on(endpoint, client, options, &g, work)
        };
        // The first endpoint's work runs on this thread, each other's on
        // a thread of its own (so work for one server starts none).
        let mut taken = taken.into_iter();
        let first = taken.next();
        let finished: Vec<_> = std::thread::scope(|s| {
            let others: Vec<_> = taken.map(|t| s.spawn(move || run(t))).collect();
            let mut finished: Vec<_> = first.map(run).into_iter().collect();
            finished.extend(
                others
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
            );
            finished
        });
        let mut out: Vec<Option<Result<T, ObjError>>> =
            std::iter::repeat_with(|| None).take(jobs.len()).collect();
        let now = Instant::now();
        for f in finished {
            match f.client {
                Some(c) => {
                    self.failed.remove(&f.endpoint.server);
                    self.open.insert(f.endpoint, c);
                }
                None => {
                    self.failed.insert(f.endpoint.server.clone(), now);
                }
            }
            for (i, r) in f.results {
                out[i] = Some(r);
            }
        }
        out.into_iter().flatten().collect()
    }
}
