//! sluice's load generator (`sluice bench`).
//!
//! - [`workload`]: what a run does (pattern, mix, block size, queue depth,
//!   workers, limit) and each worker's operation generator; the short
//!   standard set.
//! - [`runner`]: runs a workload against an NBD server (one thread per
//!   worker running the pipelined `Connection` hot loop) or local I/O,
//!   with fixed-bound latency histograms ([`hist`]), CPU accounting
//!   ([`cpu`]) and optional data verification ([`verify`]).
//! - [`target`]: the embedded in-process server; [`peers`]: sluice,
//!   nbdkit and qemu-nbd as processes (on this host, or on a
//!   [`peers::ServerHost`] such as the lab's shaped links), and fio as a
//!   second client.
//! - [`matrix`]: cases × targets × drivers, interleaved over rounds, with
//!   medians, spread and ratios ([`stats`]).
//! - [`machine`]: the machine, its load and CPU steal; [`report`] and
//!   [`plot`]: tables, CSV, JSON, SVG/PNG.
//! - [`cli`]: the options of one run and running it; the whole `sluice
//!   bench` command line, with `compare` and the papers' experiments, is
//!   sluice-lab's, which builds on this crate.

pub mod cli;
pub mod cpu;
pub mod hist;
pub mod machine;
pub mod matrix;
pub mod peers;
pub mod plot;
pub mod report;
pub mod runner;
pub mod stats;
pub mod target;
pub mod verify;
pub mod workload;

pub use cli::{is_usage_error, run_single, BenchUsageError, RunArgs};
