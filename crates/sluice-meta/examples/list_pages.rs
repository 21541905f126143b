//! What a lookup and a page of 1,000 names cost with 1,000 names in the
//! store and with many more (docs/BENCHMARKS.md, "Striped objects"), on
//! SQLite or etcd:
//!
//! ```sh
//! cargo run --release -p sluice-meta --example list_pages [DIR | etcd://HOST:PORT] [N,N...]
//! ```
//!
//! Each store is filled by 64 threads (so commits group), then timed
//! reading: lookups of random names, pages of 1,000 from the start and
//! after a random key, and one listing of everything a page at a time.
//! SQLite's database lives in DIR (a new temporary directory under it;
//! the system's temporary directory without it); an etcd URI gets a
//! fresh key prefix of its own for each count (left in etcd; compact or
//! drop the cluster after). The counts default to 1,000 and 100,000.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_meta::{EtcdConfig, EtcdMetaStore, Layout, MetaStore, Piece, SqliteMetaStore};

const PAGE: usize = 1000;
const LOOKUPS: usize = 2000;
const PAGES: usize = 200;

fn name(i: usize) -> String {
    format!("bench/{i:07}")
}

/// The median and the 99th percentile of `samples`.
fn summary(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

fn fill(store: &dyn MetaStore, n: usize) -> Duration {
    let layout = Layout {
        stripe_unit: 64 << 10,
        redundancy: Default::default(),
        pieces: (0..4)
            .map(|i| Piece {
                server: format!("sluice://server-{i}.test:10810"),
                partition: 1,
                object: i,
            })
            .collect(),
    };
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..64 {
            let layout = &layout;
            s.spawn(move || {
                for i in (t..n).step_by(64) {
                    store
                        .create(&name(i), layout, &BTreeMap::new())
                        .expect("create");
                }
            });
        }
    });
    started.elapsed()
}

/// Where the stores are made.
enum Backend {
    Sqlite(std::path::PathBuf),
    Etcd(String),
}

fn measure(backend: &Backend, n: usize) {
    let mut _keep = None;
    let store: Box<dyn MetaStore> = match backend {
        Backend::Sqlite(dir) => {
            let tmp = tempfile::tempdir_in(dir).expect("temporary directory");
            let store = SqliteMetaStore::open(tmp.path()).expect("open the store");
            _keep = Some(tmp);
            Box::new(store)
        }
        Backend::Etcd(uri) => {
            let prefix = format!("list-pages-{:08x}-{n}/", fastrand::u32(..));
            let uri = format!("{}/{prefix}", uri.trim_end_matches('/'));
            let config = EtcdConfig::from_uri(&uri).expect("an etcd URI");
            Box::new(EtcdMetaStore::connect(config).expect("reach etcd"))
        }
    };
    let store = store.as_ref();
    let filled = fill(store, n);
    let lookups: Vec<Duration> = (0..LOOKUPS)
        .map(|_| {
            let key = name(fastrand::usize(..n));
            let started = Instant::now();
            store.lookup(&key).expect("lookup");
            started.elapsed()
        })
        .collect();
    let page_at = |after: Option<usize>| {
        let key = after.map(name);
        let started = Instant::now();
        let page = store.list("bench/", key.as_deref(), PAGE).expect("list");
        let took = started.elapsed();
        let left = n - after.map_or(0, |a| a + 1);
        assert_eq!(page.entries.len(), PAGE.min(left), "a full page");
        took
    };
    let first: Vec<Duration> = (0..PAGES).map(|_| page_at(None)).collect();
    // Keys with a whole page after them (with 1,000 names: the first).
    let random: Vec<Duration> = (0..PAGES)
        .map(|_| page_at(Some(fastrand::usize(..=n.saturating_sub(PAGE + 1)))))
        .collect();
    let started = Instant::now();
    let all = sluice_meta::entries(store, "bench/").count();
    let everything = started.elapsed();
    assert_eq!(all, n);
    let show = |(median, p99): (Duration, Duration)| format!("{median:>9.1?} {p99:>9.1?}");
    println!(
        "{n:>7} names (filled in {filled:.1?}): lookup {} | first page {} | page after a random key {} | all {n} names a page at a time {everything:.1?}",
        show(summary(lookups)),
        show(summary(first)),
        show(summary(random)),
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let backend = match args.next() {
        Some(a) if a.starts_with("etcd://") => Backend::Etcd(a),
        Some(a) => Backend::Sqlite(a.into()),
        None => Backend::Sqlite(std::env::temp_dir()),
    };
    let counts: Vec<usize> = args.next().map_or(vec![1_000, 100_000], |a| {
        a.split(',')
            .map(|n| n.parse().expect("counts are numbers"))
            .collect()
    });
    println!("median and 99th percentile; pages of {PAGE} names");
    for n in counts {
        measure(&backend, n);
    }
}
