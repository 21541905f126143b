//! Crash consistency: a client writes (with FUA and FLUSH mixed in, up
//! to 8 requests in flight) while the harness kills `sluice serve` with
//! SIGKILL at a random moment; a new server on the same image must then
//! serve every write covered by an acknowledged FLUSH or FUA, and every
//! other sector must hold its old or a newer written value, never a third
//! (the model: `sluice_testkit::crash::DurabilityModel`).
//!
//! SIGKILL leaves the kernel's page cache intact, so the runs with the
//! export option `power-loss` put the simulated volatile disk cache under
//! the server's layers: then a write that was acknowledged but never
//! synced really is lost when the process dies, and a missing sync would
//! show as lost durable data.
//!
//! `SLUICE_CRASH_CYCLES=N` multiplies the cycle counts (long runs,
//! docs/RELIABILITY.md). These tests choose their own cache policy.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sluice_client::{ConnectOptions, Connection, NbdUri, Outcome, Request, Target};
use sluice_testkit::crash::{DurabilityModel, FlushTicket, WriteTicket, SECTOR};

use crate::harness::{create_sparse_file, shm_tempdir, Server, ServerBuilder, MIB};

const IMAGE: u64 = 8 * MIB;
const QUEUE_DEPTH: usize = 8;
/// Largest write, in sectors (64 KiB).
const MAX_WRITE_SECTORS: u64 = 128;

#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    cycles: u64,
    writes_acked: u64,
    fua_acked: u64,
    flushes_acked: u64,
    killed_mid_flush: u64,
    sectors_newer_than_floor: u64,
    violations: u64,
    lost_durable_bytes: u64,
}

enum InFlight {
    Write(WriteTicket, bool),
    Flush(FlushTicket),
}

/// What the writer saw before the server died.
struct WriterEnd {
    model: DurabilityModel,
    writes_acked: u64,
    fua_acked: u64,
    flushes_acked: u64,
    flush_in_flight: bool,
    errors: Vec<String>,
}

/// Writes until the connection breaks, keeping the model up to date.
fn write_until_killed(
    uri: &NbdUri,
    mut model: DurabilityModel,
    seed: u64,
    started: mpsc::Sender<()>,
) -> WriterEnd {
    let mut end = WriterEnd {
        model: DurabilityModel::new(0),
        writes_acked: 0,
        fua_acked: 0,
        flushes_acked: 0,
        flush_in_flight: false,
        errors: Vec::new(),
    };
    let mut conn = match Connection::connect(uri, &ConnectOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            // Killed before the handshake finished: nothing was written.
            let _ = started.send(());
            end.errors.push(format!("(not an error) connect: {e}"));
            end.model = model;
            return end;
        }
    };
    let _ = started.send(());
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut buf = vec![0u8; MAX_WRITE_SECTORS as usize * SECTOR];
    let mut pending: HashMap<u64, InFlight> = HashMap::new();
    let mut flushes = 0usize;
    loop {
        while pending.len() < QUEUE_DEPTH {
            if rng.u64(..20) == 0 {
                let ticket = model.begin_flush();
                let Ok(cookie) = conn.queue(Request::Flush) else {
                    break;
                };
                pending.insert(cookie, InFlight::Flush(ticket));
                flushes += 1;
                continue;
            }
            let count = 1 + rng.u64(..MAX_WRITE_SECTORS);
            let sector = rng.u64(..model.len() - count);
            if (sector..sector + count).any(|s| model.in_flight(s)) {
                break;
            }
            let fua = rng.u64(..10) == 0;
            let data = &mut buf[..count as usize * SECTOR];
            let ticket = model.begin_write(sector, count, data);
            let request = Request::Write {
                offset: sector * SECTOR as u64,
                data,
                fua,
            };
            match conn.queue(request) {
                Ok(cookie) => {
                    pending.insert(cookie, InFlight::Write(ticket, fua));
                }
                Err(e) => {
                    model.write_failed(ticket);
                    end.errors.push(format!("queue write: {e}"));
                    break;
                }
            }
        }
        let result = conn.receive(|c| match pending.remove(&c.cookie) {
            Some(InFlight::Write(w, fua)) => match c.result {
                Ok(_) => {
                    model.write_acked(w, fua);
                    end.writes_acked += 1;
                    end.fua_acked += u64::from(fua);
                }
                Err(e) => {
                    model.write_failed(w);
                    end.errors.push(format!("write failed: {e}"));
                }
            },
            Some(InFlight::Flush(f)) => {
                flushes -= 1;
                match c.result {
                    Ok(_) => {
                        model.flush_acked(f);
                        end.flushes_acked += 1;
                    }
                    Err(e) => end.errors.push(format!("flush failed: {e}")),
                }
            }
            None => end
                .errors
                .push(format!("reply to unknown cookie {}", c.cookie)),
        });
        if result.is_err() {
            // The server is gone; writes still in flight may or may not
            // have landed, and stay allowed in the model.
            end.flush_in_flight = flushes > 0;
            end.model = model;
            return end;
        }
    }
}

/// Reads the whole export through a fresh connection.
fn read_image(uri: &NbdUri) -> Vec<u8> {
    let mut conn = Connection::connect(uri, &ConnectOptions::default())
        .unwrap_or_else(|e| panic!("connect to {uri} after the restart: {e}"));
    let mut image = vec![0u8; IMAGE as usize];
    let chunk = MIB;
    for offset in (0..IMAGE).step_by(chunk as usize) {
        conn.queue(Request::Read {
            offset,
            length: chunk as u32,
        })
        .expect("queue read");
    }
    let mut errors = Vec::new();
    while conn.in_flight() > 0 {
        conn.receive(|c| match c.result {
            Ok(Outcome::Data(d)) => {
                image[c.offset as usize..c.offset as usize + d.len()].copy_from_slice(d)
            }
            Ok(other) => errors.push(format!("read at {}: unexpected {other:?}", c.offset)),
            Err(e) => errors.push(format!("read at {}: {e}", c.offset)),
        })
        .expect("read the image back");
    }
    assert!(errors.is_empty(), "reading the image back: {errors:?}");
    let _ = conn.disconnect();
    image
}

fn start(image: &Path, cache: &str, power_loss_seed: Option<u64>) -> Server {
    let opts = match power_loss_seed {
        Some(seed) => format!("power-loss={seed}"),
        None => String::new(),
    };
    let server = ServerBuilder::new()
        .file_export("disk", image, &opts)
        .arg("--cache")
        .arg(cache);
    // A cache size without a cache is refused.
    match cache {
        "none" => server,
        _ => server.arg("--cache-size").arg("4M"),
    }
    .start()
}

fn cycles(base: u64) -> u64 {
    let factor = std::env::var("SLUICE_CRASH_CYCLES")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1);
    base * factor.max(1)
}

/// Runs `n` kill cycles and checks each restart against the model.
fn crash_cycles(n: u64, cache: &str, power_loss: bool, seed: u64) -> Totals {
    let dir = shm_tempdir();
    let image = dir.path().join("crash.img");
    create_sparse_file(&image, IMAGE);
    let mut model = DurabilityModel::new(IMAGE / SECTOR as u64);
    let mut totals = Totals::default();
    let mut rng = fastrand::Rng::with_seed(seed);
    let began = Instant::now();
    for cycle in 0..n {
        let mut server = start(&image, cache, power_loss.then_some(seed + cycle));
        let uri = NbdUri::new(Target::Tcp(server.addr().to_string()), "disk");
        // 1. What survived the previous kill.
        let report = model.check_after_crash(&read_image(&uri));
        totals.sectors_newer_than_floor += report.newer_than_floor;
        totals.violations += report.violations.len() as u64;
        totals.lost_durable_bytes += report.lost_durable_bytes();
        for v in report.violations.iter().take(5) {
            eprintln!("cycle {cycle}: {v}");
        }
        assert!(
            report.violations.is_empty(),
            "cycle {cycle} ({cache}, power-loss {power_loss}): {} sectors wrong, {} durable bytes lost; totals so far {totals:?}\n--- server stderr ---\n{}",
            report.violations.len(),
            report.lost_durable_bytes(),
            server.stderr_log()
        );
        // 2. Write until a random moment, then SIGKILL.
        let (tx, rx) = mpsc::channel();
        let writer_model = std::mem::replace(&mut model, DurabilityModel::new(0));
        let writer_seed = rng.u64(..);
        let writer = {
            let uri = uri.clone();
            thread::spawn(move || write_until_killed(&uri, writer_model, writer_seed, tx))
        };
        rx.recv_timeout(Duration::from_secs(30))
            .expect("writer connected");
        thread::sleep(Duration::from_micros(1_000 + rng.u64(..40_000)));
        server.signal(Signal::KILL);
        server
            .wait_exit(Duration::from_secs(10))
            .expect("server exits on SIGKILL");
        let end = writer.join().expect("writer thread");
        let real_errors: Vec<_> = end
            .errors
            .iter()
            .filter(|e| !e.starts_with("(not an error)"))
            .collect();
        assert!(
            real_errors.is_empty(),
            "cycle {cycle}: the server answered with errors before it was killed: {real_errors:?}"
        );
        model = end.model;
        totals.cycles += 1;
        totals.writes_acked += end.writes_acked;
        totals.fua_acked += end.fua_acked;
        totals.flushes_acked += end.flushes_acked;
        totals.killed_mid_flush += u64::from(end.flush_in_flight);
    }
    // The last kill is checked too.
    let server = start(&image, cache, None);
    let uri = NbdUri::new(Target::Tcp(server.addr().to_string()), "disk");
    let report = model.check_after_crash(&read_image(&uri));
    totals.violations += report.violations.len() as u64;
    totals.lost_durable_bytes += report.lost_durable_bytes();
    eprintln!(
        "crash cycles ({cache}, power-loss {power_loss}) in {:.1} s: {totals:?}",
        began.elapsed().as_secs_f64()
    );
    assert_eq!(totals.violations, 0, "{totals:?}");
    // The harness must have exercised what it claims to.
    assert!(totals.flushes_acked >= n / 2, "{totals:?}");
    assert!(totals.writes_acked >= n * 5, "{totals:?}");
    totals
}

#[test]
fn sigkill_with_write_back_cache_loses_no_flushed_write() {
    let n = cycles(200);
    let t = crash_cycles(n, "writeback", false, 0xc0ffee);
    assert!(
        t.killed_mid_flush >= n / 10,
        "kills should often land during a FLUSH: {t:?}"
    );
}

#[test]
fn power_loss_with_write_back_cache_loses_no_flushed_write() {
    let n = cycles(100);
    let t = crash_cycles(n, "writeback", true, 0xbadcab1e);
    assert!(t.killed_mid_flush >= n / 10, "{t:?}");
}

#[test]
fn power_loss_without_cache_loses_no_flushed_write() {
    crash_cycles(cycles(60), "none", true, 0xfeed);
}
