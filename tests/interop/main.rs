//! Interop tests: real NBD clients (qemu-img, qemu-io, nbdinfo, nbdcopy,
//! libnbd scripts, fio) and a hand-written raw client against `sluice serve`.
//!
//! Every test starts its own server on an OS-chosen port with its own
//! temporary directory. Data-path tests run over a matrix of backends,
//! cache policies and pipeline modes (`matrix.rs`), one test per cell. The external tools are installed by `scripts/test`;
//! a missing tool fails the test with a message saying so.

mod harness;
mod matrix;

mod crash;
mod errors;
mod faults;
mod fio;
mod large_requests;
mod limits;
mod listeners;
mod metrics;
mod multi_conn;
mod nbdcopy;
mod nbdinfo;
mod nbdsh;
mod newcomer;
mod obj_cli;
mod obj_put;
mod obj_reconnect;
mod objects;
mod pipeline;
mod qemu_img;
mod qemu_io;
mod raid;
mod raid_admin;
mod raid_cut;
mod raid_dead;
mod raw_protocol;
mod reconnect;
mod s3;
mod s3_clients;
mod safety;
mod service;
mod shutdown;
mod striped_cli;
mod striped_overwrite;
mod striped_redundancy;
mod tls;
mod tls_keys;
mod write_hole;
