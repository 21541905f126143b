//! Store-side cost of one object request, for counting instructions
//! under callgrind (timings on a shared machine do not repeat; these
//! counts do). Only the calls inside `measured` are counted:
//!
//! ```text
//! cargo build --release -p sluice-objstore --example request_cost
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*measured*' \
//!     target/release/examples/request_cost CASE [N]
//! ```
//!
//! then divide the run's instruction total by N (run without valgrind,
//! it prints each request's mean wall time). Cases: `read-1m` (into
//! a reused reply buffer, as the server reads),
//! `write-1m`, `write-4k`, `write-4k+attr`, `write-4k-fua`,
//! `create+3attrs` (32 threads creating at once, as 32 requests in
//! flight do on the server's pool), `create16+3attrs` (two threads,
//! each making 16 creates per `create_many` call, as the server makes
//! 32 creates in flight that arrive together).

use std::error::Error;
use std::sync::Barrier;

use sluice_objstore::{
    AttrValue, NewObjects, ObjectRef, ObjectStore, PartitionId, Segment, WriteOptions,
};

const MIB: u64 = 1 << 20;
const THREADS: u64 = 32;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).map_or("read-1m", String::as_str).to_owned();
    let n: u64 = args.get(2).map_or(Ok(200), |s| s.parse())?;
    let dir = tempfile::tempdir()?;
    let store = ObjectStore::open(dir.path())?;
    let p = PartitionId(1);
    store.create_partition(p)?;
    let id = store.create(p, None, 1, &WriteOptions::default())?[0];
    let obj = ObjectRef {
        partition: p,
        object: id,
    };
    let span = 64 * MIB;
    let big = vec![0x5a_u8; MIB as usize];
    for at in (0..span).step_by(MIB as usize) {
        store.write(
            obj,
            &[Segment::new(at, MIB)],
            &big,
            &WriteOptions::default(),
        )?;
    }
    // Warm-up: the same case uncounted, so caches and statements are
    // primed as on a running server.
    run(&store, obj, &case, n.min(50), false)?;
    let started = std::time::Instant::now();
    run(&store, obj, &case, n, true)?;
    let each = started.elapsed() / u32::try_from(n.max(1))?;
    // Wall time is what a durable (fsyncing) request is about; it varies
    // with the machine's load, unlike the instruction count.
    println!("{case}: {n} requests, {each:?} each (wall time)");
    Ok(())
}

fn run(
    store: &ObjectStore,
    obj: ObjectRef,
    case: &str,
    n: u64,
    counted: bool,
) -> Result<(), Box<dyn Error>> {
    let attr = |v: i64| vec![("k".to_owned(), AttrValue::Integer(v))];
    let plain = WriteOptions::default();
    let small = vec![7u8; 4096];
    let big = vec![9u8; MIB as usize];
    let smalls: Vec<ObjectRef> = if case == "write-4k-small" {
        (0..1024)
            .map(|_| {
                store
                    .create_and_write(
                        obj.partition,
                        None,
                        &[Segment::new(0, 4096)],
                        &small,
                        &plain,
                    )
                    .map(|object| ObjectRef {
                        partition: obj.partition,
                        object,
                    })
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    // A reply buffer grown once and reused (header room, then the body).
    let reply = std::cell::RefCell::new(vec![0u8; 64 + MIB as usize]);
    let one = |i: u64| -> Result<(), Box<dyn Error>> {
        match case {
            "read-1m" => {
                // Into a reused buffer, as the server reads into its
                // reply buffer.
                let mut reply = reply.borrow_mut();
                let segment = [Segment::new((i % 64) * MIB, MIB)];
                let found = store.read_into(obj, &segment, &[], |_| &mut reply[64..])?;
                std::hint::black_box(found);
            }
            "write-1m" => {
                store.write(obj, &[Segment::new((i % 64) * MIB, MIB)], &big, &plain)?;
            }
            "write-4k" => {
                store.write(
                    obj,
                    &[Segment::new((i % 1024) * 4096, 4096)],
                    &small,
                    &plain,
                )?;
            }
            "write-4k+attr" => {
                let opts = WriteOptions {
                    attrs: attr(i as i64),
                    durable: false,
                };
                store.write(obj, &[Segment::new((i % 1024) * 4096, 4096)], &small, &opts)?;
            }
            "write-4k-small" => {
                // 4 KiB objects (inline in the database by default).
                store.write(
                    smalls[(i % 1024) as usize],
                    &[Segment::new(0, 4096)],
                    &small,
                    &plain,
                )?;
            }
            "write-4k-fua" => {
                let opts = WriteOptions {
                    attrs: Vec::new(),
                    durable: true,
                };
                store.write(obj, &[Segment::new((i % 1024) * 4096, 4096)], &small, &opts)?;
            }
            other => return Err(format!("unknown case {other:?}").into()),
        }
        Ok(())
    };
    let opts = WriteOptions {
        attrs: vec![
            ("a".to_owned(), AttrValue::Integer(1)),
            ("b".to_owned(), AttrValue::Text("two".to_owned())),
            ("c".to_owned(), AttrValue::Integer(3)),
        ],
        durable: false,
    };
    if case == "create16+3attrs" {
        const GROUP: u64 = 16;
        let new = NewObjects {
            collection: None,
            count: 1,
            segments: &[],
            data: &[],
            opts: &opts,
        };
        let group = vec![new; GROUP as usize];
        let start = Barrier::new(2);
        return std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| -> Result<(), String> {
                        start.wait();
                        let create = || {
                            store
                                .create_many(obj.partition, &group)
                                .into_iter()
                                .try_for_each(|r| r.map(drop))
                        };
                        for _ in 0..n / (2 * GROUP) {
                            if counted {
                                measured(create).map_err(|e| e.to_string())?;
                            } else {
                                create().map_err(|e| e.to_string())?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join().map_err(|_| "a creating thread panicked")??;
            }
            Ok(())
        });
    }
    if case == "create+3attrs" {
        let start = Barrier::new(THREADS as usize);
        return std::thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| -> Result<(), String> {
                        start.wait();
                        let create = || store.create(obj.partition, None, 1, &opts);
                        for _ in 0..n / THREADS {
                            if counted {
                                measured(create).map_err(|e| e.to_string())?;
                            } else {
                                create().map_err(|e| e.to_string())?;
                            }
                        }
                        Ok(())
                    })
                })
                .collect();
            for w in workers {
                w.join().map_err(|_| "a creating thread panicked")??;
            }
            Ok(())
        });
    }
    for i in 0..n {
        if counted {
            measured(|| one(i))?;
        } else {
            one(i)?;
        }
    }
    Ok(())
}

/// The one function whose instructions callgrind counts.
#[inline(never)]
fn measured<T>(call: impl FnOnce() -> T) -> T {
    call()
}
