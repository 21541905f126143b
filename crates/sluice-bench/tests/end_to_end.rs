#![allow(clippy::unwrap_used)]
//! Tiny workloads against a real in-process server and a local file:
//! operation counts add up and verification passes. Timings are not
//! checked.

use sluice_bench::runner::{run_workload, Endpoint, RunOptions, ServerCpu};
use sluice_bench::target::{EmbeddedConfig, EmbeddedServer};
use sluice_bench::workload::{Limit, Pattern, Rw, Workload};

fn server() -> EmbeddedServer {
    EmbeddedServer::start(&EmbeddedConfig {
        size: 8 << 20,
        ..EmbeddedConfig::default()
    })
    .unwrap()
}

fn workload(pattern: Pattern, rw: Rw, qd: u32, workers: u32, ops: u64) -> Workload {
    let mut w = Workload::new(pattern, rw, 4096, qd);
    w.workers = workers;
    w.limit = Limit::Ops(ops);
    w.verify = true;
    w.read_pct = 50;
    w
}

#[test]
fn mixed_verified_run_against_an_embedded_server() {
    let s = server();
    let ep = Endpoint::Nbd {
        uri: s.uri().clone(),
        server_cpu: ServerCpu::OwnThreads,
    };
    for (pattern, workers) in [(Pattern::Rand, 2), (Pattern::Seq, 3)] {
        let w = workload(pattern, Rw::Mixed, 8, workers, 200);
        let r = run_workload(&ep, &w, &RunOptions::default()).unwrap();
        assert_eq!(r.ops, 200, "{r:?}");
        assert_eq!(r.reads + r.writes, 200);
        assert!(r.reads > 40 && r.writes > 40, "{r:?}");
        assert_eq!(r.verified_reads, r.reads);
        assert_eq!(r.bytes, 200 * 4096);
        assert_eq!(r.latency.count, 200);
        assert!(r.server_cpu_s.is_some());
    }
    s.stop().unwrap();
}

#[test]
fn shared_connection_and_byte_limits() {
    let s = server();
    let ep = Endpoint::Nbd {
        uri: s.uri().clone(),
        server_cpu: ServerCpu::Unknown,
    };
    let mut w = workload(Pattern::Rand, Rw::Read, 4, 2, 0);
    w.shared_connection = true;
    w.limit = Limit::Bytes(100 * 4096);
    let r = run_workload(&ep, &w, &RunOptions::default()).unwrap();
    assert_eq!((r.ops, r.reads, r.verified_reads), (100, 100, 100));
    assert_eq!(r.server_cpu_s, None);
}

#[test]
fn local_file_baseline_verifies() {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(4 << 20).unwrap();
    let ep = Endpoint::Local {
        path: f.path().to_path_buf(),
    };
    let w = workload(Pattern::Rand, Rw::Mixed, 4, 2, 300);
    let r = run_workload(&ep, &w, &RunOptions::default()).unwrap();
    assert_eq!(r.ops, 300);
    assert_eq!(r.verified_reads, r.reads);
}

#[test]
fn bad_workloads_fail_with_a_reason() {
    let s = server();
    let ep = Endpoint::Nbd {
        uri: s.uri().clone(),
        server_cpu: ServerCpu::Unknown,
    };
    let mut w = workload(Pattern::Seq, Rw::Read, 1, 1, 10);
    w.region_offset = 64 << 20;
    let e = run_workload(&ep, &w, &RunOptions::default()).unwrap_err();
    assert!(format!("{e:#}").contains("beyond the export"), "{e:#}");
    let missing = Endpoint::Local {
        path: "/nonexistent/sluice-bench".into(),
    };
    let e = run_workload(&missing, &w, &RunOptions::default()).unwrap_err();
    assert!(
        format!("{e:#}").contains("/nonexistent/sluice-bench"),
        "{e:#}"
    );
}
