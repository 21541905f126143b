//! sluice's load generator (`sluice bench`).
//!
//! - [`workload`]: what a run does (pattern, mix, block size, queue depth,
//!   workers, limit) and each worker's operation generator.
//! - [`runner`]: runs a workload against an NBD server (one thread per
//!   worker running the pipelined `Connection` hot loop) or local I/O,
//!   with fixed-bound latency histograms ([`hist`]), CPU accounting
//!   ([`cpu`]) and optional data verification ([`verify`]).
//! - [`target`]: the embedded in-process server; [`peers`]: sluice,
//!   nbdkit and qemu-nbd as processes, and fio as a second client.
//! - [`matrix`]: cases × targets × drivers, interleaved over rounds, with
//!   medians, spread and ratios ([`stats`]).
//! - [`presets`] and [`fsbench`]: the papers' experiments and `compare`;
//!   [`pgbench`]: PostgreSQL on ext4 over the export (the SAN paper's
//!   real-workload test, on [`fsbench`]'s mount stack);
//!   [`raid_presets`]: networked RAID with members behind [`link`]s;
//!   [`striped`]: one striped object over 1..4 object servers behind links;
//!   [`s3asim`]: an S3aSim-like sequence search, naive vs non-contiguous
//!   writes, on one object server and on four;
//!   [`objects`]: the native object protocol against its peers (NBD, Ceph);
//!   [`merge`]: temporal merge in the object client;
//!   [`noncontig`]: iterative vs SGL vs strided against the paper's model;
//!   [`report`] and [`plot`]: tables, CSV, JSON, SVG/PNG.
//! - [`cli`]: the command line; the `sluice` binary flattens
//!   [`cli::BenchCli`] into its `bench` subcommand.

pub mod cli;
pub mod cpu;
pub mod fsbench;
pub mod hist;
pub mod link;
pub mod machine;
pub mod matrix;
pub mod merge;
pub mod noncontig;
pub mod objects;
pub mod objserver;
pub mod peers;
pub mod pgbench;
pub mod plot;
pub mod presets;
pub mod raid_presets;
pub mod relay;
pub mod report;
pub mod runner;
pub mod s3asim;
pub mod setup;
pub mod stats;
pub mod striped;
pub mod target;
pub mod verify;
pub mod workload;

pub use cli::{is_usage_error, run, BenchCli, BenchUsageError};
