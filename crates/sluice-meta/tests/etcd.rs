//! The etcd backend against a real three-member etcd cluster on loopback
//! ports: the conformance suite; the suite again while the leader is
//! killed and restarted (clients must see no error); and an unreachable
//! cluster, which must fail with a clear error, not hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_meta::{EtcdConfig, EtcdMetaStore, MetaError, MetaStore};
use sluice_testkit::etcd::EtcdCluster;

/// A store on the cluster at `endpoints` under a prefix no other store
/// of this process uses, so each conformance check starts empty.
fn store_at(endpoints: &[String]) -> Box<dyn MetaStore> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut config = EtcdConfig::new(endpoints);
    config.prefix = format!("/test/{}/", NEXT.fetch_add(1, Ordering::Relaxed));
    Box::new(EtcdMetaStore::connect(config).expect("connect to etcd"))
}

#[test]
fn conformance_on_three_members() {
    let Some(cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let endpoints = cluster.endpoints();
    sluice_meta::conformance::run_all(&|| store_at(&endpoints));
}

#[test]
fn conformance_while_the_leader_is_killed_and_restarted() {
    let Some(mut cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let endpoints = cluster.endpoints();
    let restarted = AtomicBool::new(false);
    let rounds = std::thread::scope(|s| {
        let runner = s.spawn(|| {
            // Whole rounds of the suite until one has run entirely after
            // the restart, so both the kill and the restart land in the
            // middle of checks (bounded, should the restart never come).
            let mut rounds = 0;
            let mut after_restart = false;
            while !after_restart && rounds < 100 {
                after_restart = restarted.load(Ordering::SeqCst);
                for (name, check) in sluice_meta::conformance::CHECKS {
                    let store = store_at(&endpoints);
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check(store.as_ref())
                    }));
                    if let Err(cause) = r {
                        eprintln!("conformance check {name} failed during the failover");
                        std::panic::resume_unwind(cause);
                    }
                }
                rounds += 1;
            }
            rounds
        });
        std::thread::sleep(Duration::from_millis(500));
        let leader = cluster.leader().expect("a leader");
        eprintln!("killing the leader, member {leader}");
        cluster.kill(leader);
        std::thread::sleep(Duration::from_secs(2));
        cluster.restart(leader).expect("restart the member");
        restarted.store(true, Ordering::SeqCst);
        eprintln!("member {leader} restarted");
        runner
            .join()
            .expect("the suite passes through the failover")
    });
    // The runner only stops after the restart, so the kill found it
    // running.
    eprintln!("{rounds} rounds of the suite");
}

#[test]
fn an_unreachable_cluster_fails_within_the_timeout() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut config = EtcdConfig::new([format!("127.0.0.1:{port}")]);
    config.op_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_millis(500);
    let store = EtcdMetaStore::connect(config).expect("connecting is lazy");
    let started = Instant::now();
    match store.lookup("x") {
        Err(e @ MetaError::Backend { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
        }
        other => panic!("lookup on an unreachable cluster gave {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}
