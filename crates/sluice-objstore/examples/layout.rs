//! Measures the two data layouts for small objects, cheaply: a file per
//! object (the store as built) against extents in one shared file with
//! an extent row per object in SQLite (a prototype of the alternative,
//! with the same SQLite settings). Prints create, 4 KiB write and flush
//! costs per object. Numbers are in docs/design/0005-object-layout.md.
//!
//! `cargo run -p sluice-objstore --example layout [N]`

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use rusqlite::{params, Connection};
use sluice_objstore::{ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions};

fn per_object(label: &str, n: u64, t: Instant) {
    let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("{label:<44} {us:>8.1} us/object");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(2000), |a| a.parse())?;
    let data = vec![0xa5u8; 4096];

    // File per object.
    let dir = tempfile::tempdir()?;
    let store = ObjectStore::open(dir.path())?;
    let p = PartitionId(1);
    store.create_partition(p)?;
    let t = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.extend(store.create(p, None, 1, &WriteOptions::default())?);
    }
    per_object("file per object: create (one per call)", n, t);
    let t = Instant::now();
    for &id in &ids {
        let obj = ObjectRef {
            partition: p,
            object: id,
        };
        store.write(
            obj,
            &[Segment::new(0, 4096)],
            &data,
            &WriteOptions::default(),
        )?;
    }
    per_object("file per object: first 4 KiB write", n, t);
    let t = Instant::now();
    store.flush_partition(p)?;
    per_object("file per object: flush of all (amortised)", n, t);
    let t = Instant::now();
    for &id in &ids {
        let obj = ObjectRef {
            partition: p,
            object: id,
        };
        store.write(
            obj,
            &[Segment::new(4096, 4096)],
            &data,
            &WriteOptions::default(),
        )?;
    }
    per_object("file per object: second 4 KiB write", n, t);
    let t = Instant::now();
    for &id in ids.iter().take(200) {
        let obj = ObjectRef {
            partition: p,
            object: id,
        };
        store.write(
            obj,
            &[Segment::new(8192, 4096)],
            &data,
            &WriteOptions {
                durable: true,
                ..Default::default()
            },
        )?;
    }
    per_object("file per object: durable 4 KiB write", 200, t);

    // Extents in a shared file, one extent row per write.
    let dir = tempfile::tempdir()?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join("extents"))?;
    let conn = Connection::open(dir.path().join("meta.sqlite"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE objects (id INTEGER PRIMARY KEY, length INTEGER NOT NULL);
         CREATE TABLE extents (object INTEGER, offset INTEGER, len INTEGER, at INTEGER,
                               PRIMARY KEY (object, offset)) WITHOUT ROWID;",
    )?;
    let t = Instant::now();
    for id in 0..n as i64 {
        conn.execute("INSERT INTO objects (id, length) VALUES (?1, 0)", [id])?;
    }
    per_object("shared extents: create (one per call)", n, t);
    let mut next = 0u64;
    let mut write_all = |offset: i64| -> Result<(), Box<dyn std::error::Error>> {
        let t = Instant::now();
        for id in 0..n as i64 {
            file.write_all_at(&data, next)?;
            let tx = conn.unchecked_transaction()?;
            tx.execute(
                "INSERT INTO extents VALUES (?1, ?2, 4096, ?3)",
                params![id, offset, next as i64],
            )?;
            tx.execute(
                "UPDATE objects SET length = ?2 WHERE id = ?1",
                params![id, offset + 4096],
            )?;
            tx.commit()?;
            next += 4096;
        }
        per_object(
            if offset == 0 {
                "shared extents: first 4 KiB write"
            } else {
                "shared extents: second 4 KiB write"
            },
            n,
            t,
        );
        Ok(())
    };
    write_all(0)?;
    let t = Instant::now();
    file.sync_data()?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute("UPDATE objects SET length = length WHERE id = 0", [])?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    per_object("shared extents: flush of all (amortised)", n, t);
    write_all(4096)?;
    Ok(())
}
