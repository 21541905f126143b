//! Measures RAID 6 arithmetic: P+Q of a stripe, and the recovery of two
//! lost data chunks of it, over 64 KiB chunks (one stripe unit, cache
//! resident as parity work is): `cargo run --release -p sluice-raid
//! --example pq_throughput [MiB] [MEMBERS]`. Throughput counts the data
//! bytes of the stripes processed.

use std::time::Instant;

use sluice_raid::{pq_into, recover, Geometry, RaidLevel};

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let members: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6);
    let unit = 64usize << 10;
    let Ok(geometry) = Geometry::new(RaidLevel::Raid6, members, unit as u64) else {
        eprintln!("RAID 6 needs at least 4 members");
        std::process::exit(2);
    };
    let d = geometry.data_members();
    let data: Vec<Vec<u8>> = (0..d)
        .map(|k| (0..unit).map(|i| (i * 31 + k * 7) as u8).collect())
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let (mut p, mut q) = (vec![0u8; unit], vec![0u8; unit]);
    let stripes = (mib << 20) / (unit * d);
    pq_into(&refs, &mut p, &mut q);
    let start = Instant::now();
    for _ in 0..stripes {
        pq_into(std::hint::black_box(&refs), &mut p, &mut q);
    }
    let gen = (stripes * unit * d) as f64 / start.elapsed().as_secs_f64() / 1e9;

    // Two data chunks of stripe 0 lost, rebuilt from the rest and P, Q.
    let mut whole: Vec<Option<Vec<u8>>> = vec![None; members];
    for (k, chunk) in data.iter().enumerate() {
        whole[geometry.data_member(0, k)] = Some(chunk.clone());
    }
    whole[geometry.parity_member(0).unwrap_or(0)] = Some(p.clone());
    whole[geometry.q_member(0).unwrap_or(0)] = Some(q.clone());
    let lost = [geometry.data_member(0, 0), geometry.data_member(0, d - 1)];
    let rounds = stripes.max(1);
    let start = Instant::now();
    let mut check = 0u8;
    for _ in 0..rounds {
        let mut chunks = whole.clone();
        for &m in &lost {
            chunks[m] = None;
        }
        if let Err(e) = recover(&geometry, 0, &mut chunks) {
            eprintln!("{e}");
            std::process::exit(1);
        }
        check ^= chunks[lost[0]].as_ref().map_or(0, |c| c[1]);
    }
    let rec = (rounds * unit * d) as f64 / start.elapsed().as_secs_f64() / 1e9;
    println!(
        "raid6 over {members} members, {} KiB units, {mib} MiB of data: P+Q {gen:.2} GB/s, two data chunks recovered {rec:.2} GB/s (check {check})",
        unit >> 10
    );
}
