//! Metadata operations per second with many in flight: each of `threads`
//! threads creates its own names, then looks each up, then deletes each;
//! each phase is timed across all threads.
//!
//! ```text
//! cargo run -p sluice-meta --example meta_ops -- sqlite [DIR] [THREADS] [OPS_PER_THREAD]
//! cargo run -p sluice-meta --example meta_ops -- etcd [etcd://H:P,...] [THREADS] [OPS_PER_THREAD]
//! ```
//!
//! Without a directory SQLite runs in a temporary one; without a URI a
//! three-member etcd cluster is started on loopback ports for the run.

use std::collections::BTreeMap;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use sluice_meta::conformance::layout;
use sluice_meta::{EtcdConfig, EtcdMetaStore, MetaStore, SqliteMetaStore};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let backend = args.first().map(String::as_str).unwrap_or("sqlite");
    let location = args.get(1).filter(|a| a.parse::<usize>().is_err()).cloned();
    let numbers: Vec<usize> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let threads = numbers.first().copied().unwrap_or(32);
    let per_thread = numbers.get(1).copied().unwrap_or(500);

    let mut _keep_dir = None;
    let mut _keep_cluster = None;
    let store: Box<dyn MetaStore> = match backend {
        "sqlite" => {
            let dir = match location {
                Some(d) => std::path::PathBuf::from(d),
                None => {
                    let t = tempfile::tempdir().expect("temporary directory");
                    let p = t.path().to_owned();
                    _keep_dir = Some(t);
                    p
                }
            };
            Box::new(SqliteMetaStore::open(&dir).expect("open sqlite"))
        }
        "etcd" => {
            let config = match location {
                Some(uri) => EtcdConfig::from_uri(&uri).expect("an etcd:// URI"),
                None => {
                    let cluster = sluice_testkit::etcd::EtcdCluster::start_or_skip(3)
                        .expect("etcd is installed");
                    let c = EtcdConfig::new(cluster.endpoints());
                    _keep_cluster = Some(cluster);
                    c
                }
            };
            Box::new(EtcdMetaStore::connect(config).expect("connect to etcd"))
        }
        other => panic!("unknown backend {other:?}: sqlite or etcd"),
    };
    println!("{backend}: {threads} threads x {per_thread} names");
    let run = format!("bench-{}", std::process::id());
    let barrier = Barrier::new(threads + 1);
    let phases = ["create", "lookup", "delete"];
    let times: Vec<(Duration, f64)> = std::thread::scope(|s| {
        for t in 0..threads {
            let (store, barrier, run) = (&store, &barrier, &run);
            s.spawn(move || {
                let names: Vec<String> =
                    (0..per_thread).map(|i| format!("{run}/{t}/{i}")).collect();
                let l = layout(4, t as u64);
                barrier.wait();
                for n in &names {
                    store.create(n, &l, &BTreeMap::new()).expect("create");
                }
                barrier.wait();
                barrier.wait();
                for n in &names {
                    store.lookup(n).expect("lookup");
                }
                barrier.wait();
                barrier.wait();
                for n in &names {
                    store.delete(n, None).expect("delete");
                }
                barrier.wait();
            });
        }
        phases
            .iter()
            .map(|_| {
                barrier.wait();
                let started = Instant::now();
                let cpu = cpu_seconds();
                barrier.wait();
                (started.elapsed(), cpu_seconds() - cpu)
            })
            .collect()
    });
    let ops = (threads * per_thread) as f64;
    for (phase, (t, cpu)) in phases.iter().zip(&times) {
        println!(
            "{phase:>7}: {:>9.0} ops/s ({:.2} s; this process used {cpu:.2} CPU-s: {:.0} ops per CPU-s)",
            ops / t.as_secs_f64(),
            t.as_secs_f64(),
            ops / cpu
        );
    }
    let total: Duration = times.iter().map(|(t, _)| *t).sum();
    println!("    all: {:>9.0} ops/s", 3.0 * ops / total.as_secs_f64());
}

/// CPU time this process has used so far (user and system), from
/// /proc/self/stat: on a loaded machine the wall-clock rate says more
/// about the neighbours than about the store. The etcd members' CPU is
/// not counted.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are
    // the 14th and 15th fields overall, in clock ticks (100 per second
    // on Linux).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = after
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    fields
        .get(11)
        .zip(fields.get(12))
        .map_or(0.0, |(u, s)| (u + s) / 100.0)
}
