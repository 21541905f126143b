//! What a lookup and a page of 1,000 names cost on the SQLite backend
//! with 1,000 and with 100,000 names in the store (docs/BENCHMARKS.md,
//! "Striped objects"):
//!
//! ```sh
//! cargo run --release -p sluice-meta --example list_pages [DIR]
//! ```
//!
//! Each store is filled by 64 threads (so commits group), then timed
//! reading: lookups of random names, pages of 1,000 from the start and
//! after a random key, and one listing of everything a page at a time.
//! The database lives in DIR (a new temporary directory under it; the
//! system's temporary directory without it).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sluice_meta::{Layout, MetaStore, Piece, SqliteMetaStore};

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

fn fill(store: &SqliteMetaStore, n: usize) -> Duration {
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

fn measure(dir: &std::path::Path, n: usize) {
    let tmp = tempfile::tempdir_in(dir).expect("temporary directory");
    let store = SqliteMetaStore::open(tmp.path()).expect("open the store");
    let filled = fill(&store, n);
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
    let all = sluice_meta::entries(&store, "bench/").count();
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
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(std::env::temp_dir, Into::into);
    println!("median and 99th percentile; pages of {PAGE} names");
    for n in [1_000, 100_000] {
        measure(&dir, n);
    }
}
