//! Measures the two ways a RAID volume can read a stripe from remote
//! members (docs/design/0003-member-fan-out.md): `batch` (requests
//! started on each member's client, awaited together), a fan-out pool
//! (one thread per member doing a blocking read, results sent back), and
//! one member after another for scale. The members are memory exports
//! of an in-process sluice server.
//!
//!     cargo run --release -p sluice-client --example fan_out [STRIPES] [UNIT]

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use sluice_client::{batch, RemoteDevice};
use sluice_server::{Export, ListenAddr, Server, ServerConfig};
use sluice_storage::{BlockDevice, MemDevice};

const MEMBERS: usize = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let stripes: usize = args.next().map_or(Ok(2000), |a| a.parse())?;
    let unit: usize = args.next().map_or(Ok(4096), |a| a.parse())?;
    let exports = (0..MEMBERS)
        .map(|i| {
            Arc::new(Export::new(
                format!("m{i}"),
                String::new(),
                Arc::new(MemDevice::new(64 << 20, false)),
            ))
        })
        .collect();
    let config = ServerConfig {
        listen: vec!["127.0.0.1:0".parse()?],
        ..ServerConfig::default()
    };
    let server = Server::bind_exports(config, exports)?;
    let ListenAddr::Tcp(addr) = server.local_addrs()[0].clone() else {
        return Err("no TCP listener".into());
    };
    let handle = server.handle();
    let thread = std::thread::spawn(move || server.run());
    let members: Vec<Arc<RemoteDevice>> = (0..MEMBERS)
        .map(|i| RemoteDevice::open(&format!("nbd://{addr}/m{i}")).map(Arc::new))
        .collect::<Result<_, _>>()?;
    let offset = |s: usize| ((s * unit) % (32 << 20)) as u64;
    let mut stripe = vec![0u8; MEMBERS * unit];

    let report = |name: &str, began: Instant| {
        let us = began.elapsed().as_secs_f64() * 1e6 / stripes as f64;
        println!("{name:<12} {us:8.1} µs per stripe of {MEMBERS} x {unit} B");
    };

    // Warm up connections and server threads.
    for s in 0..100 {
        for (m, buf) in members.iter().zip(stripe.chunks_mut(unit)) {
            m.read_at(buf, offset(s))?;
        }
    }

    let began = Instant::now();
    for s in 0..stripes {
        for (m, buf) in members.iter().zip(stripe.chunks_mut(unit)) {
            m.read_at(buf, offset(s))?;
        }
    }
    report("sequential", began);

    let began = Instant::now();
    for s in 0..stripes {
        let ((), results) = batch(|b| {
            for (m, buf) in members.iter().zip(stripe.chunks_mut(unit)) {
                b.read_at(m, buf, offset(s));
            }
        });
        for r in results {
            r?;
        }
    }
    report("batch", began);

    // One thread per member, each with its own buffer; the caller copies
    // the results into the stripe as a pool's caller would.
    let (done_tx, done_rx) = mpsc::channel::<(usize, Vec<u8>)>();
    let mut jobs = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let (tx, rx) = mpsc::channel::<(u64, Vec<u8>)>();
        let (m, done) = (m.clone(), done_tx.clone());
        std::thread::spawn(move || {
            while let Ok((at, mut buf)) = rx.recv() {
                if m.read_at(&mut buf, at).is_err() {
                    return;
                }
                if done.send((i, buf)).is_err() {
                    return;
                }
            }
        });
        jobs.push(tx);
    }
    let mut spare: Vec<Vec<u8>> = (0..MEMBERS).map(|_| vec![0u8; unit]).collect();
    let began = Instant::now();
    for s in 0..stripes {
        for tx in &jobs {
            let buf = spare.pop().ok_or("no buffer")?;
            tx.send((offset(s), buf))?;
        }
        for _ in 0..MEMBERS {
            let (i, buf) = done_rx.recv()?;
            stripe[i * unit..(i + 1) * unit].copy_from_slice(&buf);
            spare.push(buf);
        }
    }
    report("pool", began);

    drop(jobs);
    drop(members);
    handle.shutdown();
    let _ = thread.join();
    Ok(())
}
