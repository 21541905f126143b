//! Measures the store's small-object layouts through its own API, with
//! 16 threads as 16 requests in flight: bytes inline in SQLite against a
//! file per object (`StoreOptions::inline_max` of 1 MiB against 0) for
//! objects of 1, 4, 16 and 64 KiB, and durable 4 KiB writes into large
//! objects journaled against synced (`journal_max` of 64 KiB against 0).
//! Prints, per operation, wall time (the inverse of throughput at 16 in
//! flight) and the process's CPU time. Numbers are in
//! docs/design/0005-object-layout.md.
//!
//! `cargo run --release -p sluice-objstore --example layout [N [ONLY]]`
//! (ONLY: run the lines whose label contains it).

use std::error::Error;
use std::sync::Barrier;
use std::time::Instant;

use sluice_objstore::{
    AttrValue, ObjectId, ObjectRef, ObjectStore, PartitionId, Segment, StoreOptions, WriteOptions,
};

const THREADS: u64 = 16;
const P: PartitionId = PartitionId(1);

/// User plus system CPU time of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with ')'): utime and
    // stime are the 12th and 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<u64>() as f64 / 100.0
}

fn three_attrs(i: u64) -> Vec<(String, AttrValue)> {
    vec![
        ("a".to_owned(), AttrValue::Integer(i as i64)),
        ("b".to_owned(), AttrValue::Text("two".to_owned())),
        ("c".to_owned(), AttrValue::Integer(3)),
    ]
}

/// Runs `op(thread, i)` `n` times over [`THREADS`] threads and prints
/// wall and CPU microseconds per operation.
fn measure(
    label: &str,
    n: u64,
    op: impl Fn(u64, u64) -> Result<(), String> + Sync,
) -> Result<(), Box<dyn Error>> {
    if std::env::args()
        .nth(2)
        .is_some_and(|only| !label.contains(&only))
    {
        return Ok(());
    }
    let start = Barrier::new(THREADS as usize);
    let (t, cpu) = (Instant::now(), cpu_seconds());
    std::thread::scope(|s| -> Result<(), String> {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (op, start) = (&op, &start);
                s.spawn(move || -> Result<(), String> {
                    start.wait();
                    for i in 0..n / THREADS {
                        op(thread, i)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a thread panicked".to_owned())??;
        }
        Ok(())
    })?;
    let wall = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let cpu = (cpu_seconds() - cpu) * 1e6 / n as f64;
    println!("{label:<52} {wall:>9.1} {cpu:>9.1}");
    Ok(())
}

fn store(
    inline_max: u64,
    journal_max: u64,
) -> Result<(tempfile::TempDir, ObjectStore), Box<dyn Error>> {
    // Under the current folder (not /tmp, which may be tmpfs): the disk
    // is what is measured.
    let dir = tempfile::tempdir_in(".")?;
    let store = ObjectStore::open_with(
        dir.path(),
        StoreOptions {
            inline_max,
            journal_max,
            ..StoreOptions::default()
        },
    )?;
    store.create_partition(P)?;
    Ok((dir, store))
}

fn main() -> Result<(), Box<dyn Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(3200), |a| a.parse())?;
    let durable_n = (n / 4).max(THREADS);
    println!(
        "{:<52} {:>9} {:>9}",
        "operation (16 threads)", "wall us", "cpu us"
    );
    for size in [1u64 << 10, 4 << 10, 16 << 10, 64 << 10] {
        for (layout, inline_max) in [("inline", 1u64 << 20), ("file", 0)] {
            let (_dir, store) = store(inline_max, 64 << 10)?;
            let data = vec![0x5au8; size as usize];
            let segment = [Segment::new(0, size)];
            let made = std::sync::Mutex::new(Vec::new());
            let kib = size >> 10;
            for durable in [false, true] {
                let count = if durable { durable_n } else { n };
                let fua = if durable { " FUA" } else { "" };
                measure(
                    &format!("{layout} {kib:>2} KiB: create + data + 3 attrs{fua}"),
                    count,
                    |_, i| {
                        let opts = WriteOptions {
                            attrs: three_attrs(i),
                            durable,
                        };
                        let id = store
                            .create_and_write(P, None, &segment, &data, &opts)
                            .map_err(|e| e.to_string())?;
                        made.lock().map_err(|e| e.to_string())?.push(id);
                        Ok(())
                    },
                )?;
            }
            let ids: Vec<ObjectId> = made.into_inner().map_err(|e| e.to_string())?;
            let per_thread = ids.len() as u64 / THREADS;
            let obj = |thread: u64, i: u64| ObjectRef {
                partition: P,
                object: ids[(thread * per_thread + i % per_thread) as usize],
            };
            let block = vec![0xa5u8; 4096];
            for durable in [false, true] {
                let count = if durable { durable_n } else { n };
                let fua = if durable { " FUA" } else { "" };
                measure(
                    &format!("{layout} {kib:>2} KiB: 4 KiB overwrite{fua}"),
                    count,
                    |thread, i| {
                        let at = (i * 4096) % size.max(4096);
                        let opts = WriteOptions {
                            attrs: Vec::new(),
                            durable,
                        };
                        store
                            .write(obj(thread, i), &[Segment::new(at, 4096)], &block, &opts)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    },
                )?;
            }
            measure(
                &format!("{layout} {kib:>2} KiB: whole read"),
                n,
                |thread, i| {
                    store
                        .read(obj(thread, i), &segment, &[])
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                },
            )?;
        }
    }
    // Durable 4 KiB writes into 1 MiB objects (one per thread).
    for (how, journal_max) in [("journaled", 64u64 << 10), ("synced", 0)] {
        let (_dir, store) = store(16 << 10, journal_max)?;
        let big = vec![1u8; 1 << 20];
        let objs: Vec<ObjectId> = (0..THREADS)
            .map(|_| {
                store.create_and_write(
                    P,
                    None,
                    &[Segment::new(0, 1 << 20)],
                    &big,
                    &WriteOptions::default(),
                )
            })
            .collect::<Result<_, _>>()?;
        store.flush_partition(P)?;
        let block = vec![0xa5u8; 4096];
        measure(
            &format!("1 MiB objects: 4 KiB write FUA, {how}"),
            durable_n,
            |thread, i| {
                let opts = WriteOptions {
                    attrs: Vec::new(),
                    durable: true,
                };
                let o = ObjectRef {
                    partition: P,
                    object: objs[thread as usize],
                };
                store
                    .write(o, &[Segment::new((i % 256) * 4096, 4096)], &block, &opts)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )?;
    }
    Ok(())
}
