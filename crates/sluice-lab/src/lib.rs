//! The papers' experiments and the network lab they run in, over
//! sluice-bench's load generator.
//!
//! The lab:
//! - [`link`]: servers in network namespaces behind veth links shaped
//!   with tc tbf and cut with nftables, or long links played by
//!   [`relay`]'s wire relay (rate and delay each way);
//! - [`objserver`]: the object experiments' in-process server (its
//!   sockets inside a link's namespace when asked);
//! - [`fsbench`]'s mount stack: ext4 on a loop device over nbdfuse.
//!
//! The experiments, each a `sluice bench` preset:
//! - [`setup`]: what they share (options, the image, the output folder,
//!   the link), and [`epilogue`]: the one way each ends (its JSON, the
//!   report under its title, its tables as markdown, its plot);
//! - [`presets`]: `compare` and the matrix presets (pipelining, scaling,
//!   san); [`fsbench`]: filesystem; [`pgbench`]: PostgreSQL on ext4 over
//!   the export (the SAN paper's real-workload test);
//! - [`raid_presets`]: networked RAID with members behind links;
//!   [`striped`]: one striped object over 1..4 object servers behind
//!   links; [`s3asim`]: an S3aSim-like sequence search, naive vs
//!   non-contiguous writes, on one object server and on four;
//! - [`objects`]: the native object protocol against its peers (NBD,
//!   Ceph); [`merge`]: temporal merge in the object client;
//!   [`noncontig`]: iterative vs SGL vs strided against the paper's model;
//!   [`s3bench`]: S3 endpoints (sluice's, radosgw) and the native protocol.
//!
//! [`cli`] is the whole `sluice bench` command line; the `sluice` binary
//! flattens [`cli::BenchCli`] into its `bench` subcommand.

pub mod cli;
pub mod epilogue;
pub mod fsbench;
pub mod link;
pub mod merge;
pub mod noncontig;
pub mod objects;
pub mod objserver;
pub mod pgbench;
pub mod presets;
pub mod raid_presets;
pub mod relay;
pub mod s3asim;
pub mod s3bench;
pub mod setup;
pub mod striped;

pub use cli::{run, BenchCli};
pub use sluice_bench::{is_usage_error, BenchUsageError};
