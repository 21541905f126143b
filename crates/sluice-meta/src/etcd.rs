//! The etcd backend: the metadata lives in an etcd v3 cluster, so it
//! survives losing any one host; etcd's transactions make every change a
//! compare-and-swap on a revision.
//!
//! Keys, under the configured prefix (`/sluice/meta/` by default):
//! `names/<name>` (an entry, its value a [`Record`]), `servers/<uri>`
//! (ordered by etcd's create revision) and `placement` (the placement
//! counter: the next number and the latest claims, advanced by
//! compare-and-swap; see `PlacementCounter`).
//!
//! An entry's `revision` is its key's `mod_revision`. `create` is
//! `txn(create_revision == 0, put)`; `update` and `delete` are
//! `txn(mod_revision == expected, ...)`, and without an expected revision
//! a read-modify-write loop around the same transaction.
//!
//! Failover: the client is given every member and balances over them;
//! a request that dies with its member (or times out, or finds no leader)
//! is retried until [`EtcdConfig::op_timeout`]. Such a request may have
//! been applied before its reply was lost, so each write carries a random
//! writer id in its record: a retried create that finds the name taken,
//! or a retried update that finds a newer revision, succeeded if the
//! stored record carries its own id; a retried delete that finds the name
//! gone succeeded; a retried placement finds its own token among the
//! counter's latest claims.
//!
//! The store owns a small tokio runtime and blocks on it: its methods must
//! not be called from inside an async runtime.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

pub use crate::etcd_config::{EtcdConfig, EtcdTls, EtcdUser, DEFAULT_PREFIX};
use crate::record::Record;
use crate::{
    check_name, check_page, prefix_end, Entry, EntryState, Layout, MetaError, MetaStore, Page,
    Redundancy, Update,
};

/// Keys per range request of a scan: far below gRPC's 4 MiB reply limit
/// even with large attributes.
const SCAN_PAGE: i64 = 256;

/// The metadata service on etcd. See the module documentation; its
/// methods block, and must not be called from inside an async runtime.
pub struct EtcdMetaStore {
    config: EtcdConfig,
    /// Dropped before the runtime its background tasks run on.
    client: Client,
    runtime: tokio::runtime::Runtime,
    /// The deployment's identity, once read.
    deployment: std::sync::OnceLock<String>,
}

impl std::fmt::Debug for EtcdMetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMetaStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What one attempt of an operation came to: `Err` is a failure of etcd or
/// of reaching it, retried if transient; `Ok` holds the operation's own
/// result.
type Attempt<T> = Result<Result<T, MetaError>, etcd_client::Error>;

impl EtcdMetaStore {
    /// Connects to the cluster and reads from it once: one that cannot be
    /// reached within the connect timeout is [`MetaError::Unreachable`].
    pub fn connect(config: EtcdConfig) -> Result<Self, MetaError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("meta-etcd")
            .enable_all()
            .build()
            .map_err(|e| backend(&config, "start its runtime", e))?;
        let options = config.connect_options()?;
        let client = crate::etcd_reach::connect(&runtime, &config, options)?;
        Ok(Self {
            config,
            client,
            runtime,
            deployment: std::sync::OnceLock::new(),
        })
    }

    /// The configuration this store was opened with.
    pub fn config(&self) -> &EtcdConfig {
        &self.config
    }

    fn name_key(&self, name: &str) -> String {
        format!("{}names/{name}", self.config.prefix)
    }

    fn server_key(&self, uri: &str) -> String {
        format!("{}servers/{uri}", self.config.prefix)
    }

    /// Runs `attempt` until it reaches etcd and back, retrying transient
    /// failures until the operation's deadline. `attempt` is told whether
    /// an earlier attempt may have been applied.
    fn run<T>(
        &self,
        action: impl FnOnce() -> String,
        mut attempt: impl FnMut(&mut Client, bool) -> Attempt<T>,
    ) -> Result<T, MetaError> {
        let deadline = Instant::now() + self.config.op_timeout;
        let mut uncertain = false;
        let mut pause = Duration::from_millis(10);
        let mut client = self.client.clone();
        loop {
            match attempt(&mut client, uncertain) {
                Ok(r) => return r,
                Err(e) if transient(&e) && Instant::now() + pause < deadline => {
                    tracing::debug!(error = %e, "etcd request failed; retrying");
                    uncertain = true;
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(backend(&self.config, action(), e)),
            }
        }
    }

    fn txn(&self, client: &mut Client, txn: Txn) -> Result<TxnResponse, etcd_client::Error> {
        self.runtime.block_on(client.txn(txn))
    }

    fn get(
        &self,
        client: &mut Client,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse, etcd_client::Error> {
        self.runtime.block_on(client.get(key, options))
    }

    /// The error of a compare-and-swap loop that kept losing to other
    /// writers until the operation's deadline.
    fn outrun(&self, action: String) -> MetaError {
        backend(
            &self.config,
            action,
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "other writers changed it first on every try for {:?}",
                    self.config.op_timeout
                ),
            ),
        )
    }

    /// Every key under `prefix` in key order, read in pages from one
    /// snapshot, and that snapshot's revision.
    fn scan(
        &self,
        c: &mut Client,
        prefix: &str,
    ) -> Result<(Vec<KeyValue>, i64), etcd_client::Error> {
        // For the empty prefix (never used: keys have the store's prefix)
        // a range end of "\0" means every key from the start on.
        let end = prefix_end(prefix).unwrap_or_else(|| vec![0]);
        let mut from = prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut all = Vec::new();
        loop {
            let mut options = GetOptions::new()
                .with_range(end.clone())
                .with_limit(SCAN_PAGE);
            if revision != 0 {
                options = options.with_revision(revision);
            }
            let mut r = self.runtime.block_on(c.get(from.clone(), Some(options)))?;
            if revision == 0 {
                revision = r.header().map_or(0, |h| h.revision());
            }
            let more = r.more();
            let page = r.take_kvs();
            match page.last() {
                Some(last) if more => {
                    // The next page starts just past the last key.
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => {
                    all.extend(page);
                    return Ok((all, revision));
                }
            }
            all.extend(page);
        }
    }

    /// The entry `name` stored in `kv`, with the id of its writer.
    fn decode(&self, name: &str, kv: &KeyValue) -> Result<(Entry, u64), MetaError> {
        Record::decode(name, kv.mod_revision() as u64, kv.value())
    }
}

impl MetaStore for EtcdMetaStore {
    fn add_server(&self, uri: &str) -> Result<(), MetaError> {
        let key = self.server_key(uri);
        // A put keeps an existing key's create revision, so the order of
        // the servers stays the order they were first added.
        self.run(
            || format!("add server {uri}"),
            |c, _| {
                self.runtime
                    .block_on(c.put(key.as_str(), uri, None))
                    .map(|_| Ok(()))
            },
        )
    }

    fn remove_server(&self, uri: &str) -> Result<(), MetaError> {
        let names = self.name_key("");
        let key = self.server_key(uri);
        let give_up = Instant::now() + self.config.op_timeout;
        self.run(
            || format!("remove server {uri}"),
            |c, _| loop {
                if Instant::now() > give_up {
                    return Ok(Err(self.outrun(format!("remove server {uri}"))));
                }
                let (all, seen_at) = self.scan(c, &names)?;
                let mut objects = 0;
                let mut example = None;
                for kv in &all {
                    let entry = match name_of(kv, &names).and_then(|n| self.decode(n, kv)) {
                        Ok((e, _)) => e,
                        Err(e) => return Ok(Err(e)),
                    };
                    if entry.uses_server(uri) {
                        objects += 1;
                        example.get_or_insert(entry.name);
                    }
                }
                if let Some(example) = example {
                    return Ok(Err(MetaError::ServerInUse {
                        server: uri.to_owned(),
                        objects,
                        example,
                    }));
                }
                // Only if no name was created or changed since the scan
                // (one could have placed a piece there); else scan again.
                let txn = Txn::new()
                    .when([
                        Compare::mod_revision(names.as_str(), CompareOp::Less, seen_at + 1)
                            .with_prefix(),
                    ])
                    .and_then([TxnOp::delete(key.as_str(), None)]);
                if self.txn(c, txn)?.succeeded() {
                    return Ok(Ok(()));
                }
            },
        )
    }

    fn servers(&self) -> Result<Vec<String>, MetaError> {
        let servers = self.server_key("");
        self.run(
            || "list the servers".to_owned(),
            |c, _| {
                let r = self.get(c, &servers, Some(GetOptions::new().with_prefix()))?;
                let mut kvs: Vec<&KeyValue> = r.kvs().iter().collect();
                kvs.sort_by_key(|kv| kv.create_revision());
                Ok(kvs
                    .into_iter()
                    .map(|kv| name_of(kv, &servers).map(str::to_owned))
                    .collect())
            },
        )
    }

    fn deployment(&self) -> Result<String, MetaError> {
        if let Some(id) = self.deployment.get() {
            return Ok(id.clone());
        }
        let key = format!("{}deployment", self.config.prefix);
        let drawn = crate::new_deployment_id();
        let action = || "read the deployment's identity".to_owned();
        let id = self.run(action, |c, _| {
            // The first client's identity stays; a retried put finds the
            // key there and changes nothing.
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), drawn.as_str(), None)]);
            self.txn(c, txn)?;
            let r = self.get(c, &key, None)?;
            Ok(match r.kvs().first() {
                Some(kv) => Ok(String::from_utf8_lossy(kv.value()).into_owned()),
                None => Err(backend(
                    &self.config,
                    action(),
                    std::io::Error::new(std::io::ErrorKind::NotFound, format!("{key} vanished")),
                )),
            })
        })?;
        Ok(self.deployment.get_or_init(|| id).clone())
    }

    fn default_redundancy(&self) -> Result<Redundancy, MetaError> {
        let key = format!("{}settings/redundancy", self.config.prefix);
        let text = self.run(
            || "read the default redundancy".to_owned(),
            |c, _| {
                let r = self.get(c, &key, None)?;
                Ok(Ok(r.kvs().first().map(|kv| {
                    String::from_utf8_lossy(kv.value()).into_owned()
                })))
            },
        )?;
        text.map_or(Ok(Redundancy::default()), |t| t.parse())
    }

    fn set_default_redundancy(&self, redundancy: Redundancy) -> Result<(), MetaError> {
        redundancy.check()?;
        let key = format!("{}settings/redundancy", self.config.prefix);
        let value = redundancy.to_string();
        self.run(
            || "set the default redundancy".to_owned(),
            |c, _| {
                // Setting it twice sets it once: a retry is harmless.
                let txn = Txn::new().and_then([TxnOp::put(key.as_str(), value.as_str(), None)]);
                self.txn(c, txn)?;
                Ok(Ok(()))
            },
        )
    }

    fn next_placement(&self) -> Result<u64, MetaError> {
        let key = format!("{}placement", self.config.prefix);
        // Each call claims its number under a token of its own, and the
        // counter keeps the latest claims beside the next number: a call
        // retried after its answer was lost (a leader killed between
        // applying the claim and answering) finds its claim instead of
        // taking a second number.
        let token = fastrand::u64(..);
        let give_up = Instant::now() + self.config.op_timeout;
        let action = || "count placements".to_owned();
        self.run(action, |c, uncertain| loop {
            if Instant::now() > give_up {
                return Ok(Err(self.outrun(action())));
            }
            let r = self.get(c, &key, None)?;
            let (seen, counter) = match r.kvs().first() {
                Some(kv) => match PlacementCounter::decode(kv.value(), kv.version() as u64) {
                    Some(counter) => (kv.mod_revision(), counter),
                    None => {
                        let why = std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "{key} holds {} bytes that are no placement counter",
                                kv.value().len()
                            ),
                        );
                        return Ok(Err(backend(&self.config, action(), why)));
                    }
                },
                None => (0, PlacementCounter::default()),
            };
            if uncertain {
                if let Some(n) = counter.claimed_by(token) {
                    return Ok(Ok(n));
                }
            }
            let (n, next) = counter.claim(token);
            let txn = Txn::new()
                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, seen)])
                .and_then([TxnOp::put(key.as_str(), next.encode(), None)]);
            if self.txn(c, txn)?.succeeded() {
                return Ok(Ok(n));
            }
        })
    }

    fn create(
        &self,
        name: &str,
        layout: &Layout,
        attrs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Entry, MetaError> {
        check_name(name)?;
        layout.check()?;
        let key = self.name_key(name);
        let writer = fastrand::u64(..);
        let mut entry = Entry {
            name: name.to_owned(),
            layout: layout.clone(),
            state: EntryState::Creating,
            size: 0,
            attrs: attrs.clone(),
            pending: None,
            revision: 0,
        };
        let value = Record::from_entry(&entry, writer).encode();
        self.run(
            || format!("create {name:?}"),
            |c, uncertain| {
                let txn = Txn::new()
                    .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(key.as_str(), value.clone(), None)])
                    .or_else([TxnOp::get(key.as_str(), None)]);
                let r = self.txn(c, txn)?;
                if r.succeeded() {
                    entry.revision = r.header().map_or(0, |h| h.revision()) as u64;
                    return Ok(Ok(entry.clone()));
                }
                match first_kv(&r) {
                    Some(kv) if uncertain => Ok(match self.decode(name, &kv) {
                        // An earlier attempt of ours created it.
                        Ok((mine, w)) if w == writer => Ok(mine),
                        Ok(_) => Err(MetaError::Exists {
                            name: name.to_owned(),
                        }),
                        Err(e) => Err(e),
                    }),
                    _ => Ok(Err(MetaError::Exists {
                        name: name.to_owned(),
                    })),
                }
            },
        )
    }

    fn lookup(&self, name: &str) -> Result<Entry, MetaError> {
        let key = self.name_key(name);
        self.run(
            || format!("look up {name:?}"),
            |c, _| {
                let r = self.get(c, &key, None)?;
                Ok(match r.kvs().first() {
                    Some(kv) => self.decode(name, kv).map(|(e, _)| e),
                    None => Err(MetaError::NotFound {
                        name: name.to_owned(),
                    }),
                })
            },
        )
    }

    fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Page, MetaError> {
        check_page(prefix, after, limit)?;
        let names = self.name_key("");
        let key = self.name_key(prefix);
        // The key never is empty (it holds the store's prefix).
        let end = prefix_end(&key).unwrap_or_else(|| vec![0]);
        // `after` starts with `prefix`, so it is the later start; the
        // first key past it is it with a NUL byte appended.
        let start = match after {
            Some(after) => {
                let mut k = self.name_key(after).into_bytes();
                k.push(0);
                k
            }
            None => key.into_bytes(),
        };
        // A range request with a limit: etcd returns keys sorted by
        // their bytes, the order of the names, and says whether more
        // follow in the range.
        let options = GetOptions::new()
            .with_range(end)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        self.run(
            || format!("list names under {prefix:?}"),
            |c, _| {
                let r = self
                    .runtime
                    .block_on(c.get(start.clone(), Some(options.clone())))?;
                let entries = r
                    .kvs()
                    .iter()
                    .map(|kv| self.decode(name_of(kv, &names)?, kv).map(|(e, _)| e))
                    .collect::<Result<Vec<Entry>, MetaError>>();
                Ok(entries.map(|entries| {
                    let next = entries.last().filter(|_| r.more()).map(|e| e.name.clone());
                    Page { entries, next }
                }))
            },
        )
    }

    fn update(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        update: &Update,
    ) -> Result<Entry, MetaError> {
        update.check()?;
        let key = self.name_key(name);
        let writer = fastrand::u64(..);
        let not_found = || MetaError::NotFound {
            name: name.to_owned(),
        };
        let give_up = Instant::now() + self.config.op_timeout;
        self.run(
            || format!("update {name:?}"),
            |c, uncertain| loop {
                if Instant::now() > give_up {
                    return Ok(Err(self.outrun(format!("update {name:?}"))));
                }
                let r = self.get(c, &key, None)?;
                let Some(kv) = r.kvs().first() else {
                    return Ok(Err(not_found()));
                };
                let (mut entry, stored_writer) = match self.decode(name, kv) {
                    Ok(d) => d,
                    Err(e) => return Ok(Err(e)),
                };
                if uncertain && stored_writer == writer {
                    // An earlier attempt of ours applied the update.
                    return Ok(Ok(entry));
                }
                if let Some(expected) = expected_revision {
                    if expected != entry.revision {
                        return Ok(Err(MetaError::Conflict {
                            name: name.to_owned(),
                            expected,
                            found: entry.revision,
                        }));
                    }
                }
                let seen = entry.revision;
                update.apply(&mut entry);
                let txn = Txn::new()
                    .when([Compare::mod_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        seen as i64,
                    )])
                    .and_then([TxnOp::put(
                        key.as_str(),
                        Record::from_entry(&entry, writer).encode(),
                        None,
                    )]);
                let r = self.txn(c, txn)?;
                if r.succeeded() {
                    entry.revision = r.header().map_or(0, |h| h.revision()) as u64;
                    return Ok(Ok(entry));
                }
                // Changed since the read: read again, and with an expected
                // revision report the conflict from there.
            },
        )
    }

    fn delete(&self, name: &str, expected_revision: Option<u64>) -> Result<(), MetaError> {
        let key = self.name_key(name);
        let not_found = || MetaError::NotFound {
            name: name.to_owned(),
        };
        self.run(
            || format!("delete {name:?}"),
            |c, uncertain| {
                let compare = match expected_revision {
                    Some(rev) => Compare::mod_revision(key.as_str(), CompareOp::Equal, rev as i64),
                    None => Compare::create_revision(key.as_str(), CompareOp::Greater, 0),
                };
                let txn = Txn::new()
                    .when([compare])
                    .and_then([TxnOp::delete(key.as_str(), None)])
                    .or_else([TxnOp::get(key.as_str(), None)]);
                let r = self.txn(c, txn)?;
                if r.succeeded() {
                    return Ok(Ok(()));
                }
                Ok(match (first_kv(&r), expected_revision) {
                    // Gone: deleted by an earlier attempt of ours, or
                    // never there.
                    (None, _) if uncertain => Ok(()),
                    (None, _) => Err(not_found()),
                    (Some(kv), Some(expected)) => Err(MetaError::Conflict {
                        name: name.to_owned(),
                        expected,
                        found: kv.mod_revision() as u64,
                    }),
                    // The compare said the key was absent, the get found it.
                    (Some(_), None) => Err(MetaError::Invalid {
                        what: format!("etcd's answer to deleting {name:?}"),
                        why: "the key both is and is not there".to_owned(),
                    }),
                })
            },
        )
    }
}

/// The first key-value of a transaction's first get (a copy: the
/// response hands out copies).
fn first_kv(r: &TxnResponse) -> Option<KeyValue> {
    r.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(g) => g.kvs().first().cloned(),
        _ => None,
    })
}

/// The part of `kv`'s key after `prefix`.
fn name_of<'a>(kv: &'a KeyValue, prefix: &str) -> Result<&'a str, MetaError> {
    let key = kv.key();
    std::str::from_utf8(key)
        .ok()
        .and_then(|k| k.strip_prefix(prefix))
        .ok_or_else(|| MetaError::Invalid {
            what: format!("etcd key {}", String::from_utf8_lossy(key)),
            why: format!("it is not UTF-8 under {prefix:?}"),
        })
}

/// Whether a request may succeed if tried again: its member went away,
/// it timed out, the cluster had no leader.
pub(crate) fn transient(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => matches!(
            s.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted
        ),
        _ => false,
    }
}

/// The placement counter's value: the next number, and the latest
/// claims (token, number), newest last, so that a retried call can find
/// the number its lost first attempt took. Encoded as big-endian u64s:
/// the next number, then each claim's token and number.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct PlacementCounter {
    next: u64,
    claims: Vec<(u64, u64)>,
}

/// Claims the placement counter keeps: far more than the calls that can
/// be in flight while one of them waits out a failover.
const PLACEMENT_CLAIMS: usize = 256;

impl PlacementCounter {
    /// `None` for bytes that are no counter. An empty value is a counter
    /// of an earlier release, which counted its key's versions.
    fn decode(value: &[u8], version: u64) -> Option<Self> {
        if value.is_empty() {
            return Some(Self {
                next: version,
                claims: Vec::new(),
            });
        }
        let (next, rest) = value.split_first_chunk::<8>()?;
        if rest.len() % 16 != 0 {
            return None;
        }
        let word = |b: &[u8]| b.first_chunk::<8>().map(|w| u64::from_be_bytes(*w));
        let claims = rest
            .chunks_exact(16)
            .map(|c| Some((word(c)?, word(&c[8..])?)))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            next: u64::from_be_bytes(*next),
            claims,
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + 16 * self.claims.len());
        out.extend_from_slice(&self.next.to_be_bytes());
        for (token, n) in &self.claims {
            out.extend_from_slice(&token.to_be_bytes());
            out.extend_from_slice(&n.to_be_bytes());
        }
        out
    }

    /// The number `token` claimed, if it is among the latest claims.
    fn claimed_by(&self, token: u64) -> Option<u64> {
        self.claims
            .iter()
            .find_map(|&(t, n)| (t == token).then_some(n))
    }

    /// The number `token` gets, and the counter after its claim.
    fn claim(&self, token: u64) -> (u64, Self) {
        let n = self.next;
        let skip = (self.claims.len() + 1).saturating_sub(PLACEMENT_CLAIMS);
        let mut claims: Vec<(u64, u64)> = self.claims[skip..].to_vec();
        claims.push((token, n));
        (
            n,
            Self {
                next: n + 1,
                claims,
            },
        )
    }
}

pub(crate) fn backend(
    config: &EtcdConfig,
    action: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> MetaError {
    MetaError::Backend {
        backend: format!("etcd at {}", config.endpoints.join(",")),
        action: action.into(),
        source: Box::new(source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placement_counter_finds_its_latest_claims_and_reads_its_old_form() {
        // An earlier release's counter: an empty value, counted by version.
        let old = PlacementCounter::decode(&[], 7).expect("the old form");
        assert_eq!((old.next, old.claims.len()), (7, 0));
        let (n, c) = old.claim(42);
        assert_eq!((n, c.next), (7, 8));
        let c = PlacementCounter::decode(&c.encode(), 99).expect("decodes");
        assert_eq!(c.claimed_by(42), Some(7));
        assert_eq!(c.claimed_by(43), None);
        // Only the latest claims stay.
        let mut c = c;
        for token in 1000..1000 + PLACEMENT_CLAIMS as u64 {
            c = c.claim(token).1;
        }
        assert_eq!(c.claims.len(), PLACEMENT_CLAIMS);
        assert_eq!(c.claimed_by(42), None);
        assert_eq!(c.claimed_by(1000), Some(8));
        assert_eq!(c.next, 8 + PLACEMENT_CLAIMS as u64);
        // Bytes that are no counter.
        assert_eq!(PlacementCounter::decode(&[1, 2, 3], 0), None);
        assert_eq!(PlacementCounter::decode(&[0; 8 + 15], 0), None);
    }
}
