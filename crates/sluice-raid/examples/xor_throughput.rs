//! Measures parity XOR throughput: `cargo run --release -p sluice-raid
//! --example xor_throughput [MiB]`.

use std::time::Instant;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let unit = 64 << 10;
    let mut dst = vec![0x5au8; unit];
    let src = vec![0xa5u8; unit];
    let rounds = mib * (1 << 20) / unit;
    // Warm up, then time.
    sluice_raid::xor_into(&mut dst, &src);
    let start = Instant::now();
    for _ in 0..rounds {
        sluice_raid::xor_into(&mut dst, std::hint::black_box(&src));
    }
    let secs = start.elapsed().as_secs_f64();
    let gbs = (rounds * unit) as f64 / secs / 1e9;
    // The check byte keeps the loop from being optimised away.
    println!(
        "xor of {mib} MiB in 64 KiB chunks: {gbs:.2} GB/s (check byte {})",
        dst[0]
    );
}
