//! The etcd backend against a real three-member etcd cluster on loopback
//! ports: the conformance suite; the suite again while the leader is
//! killed and restarted (clients must see no error); and an unreachable
//! cluster, which must fail with a clear error, not hang.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_meta::{EtcdConfig, EtcdMetaStore, MetaError, MetaStore};
use sluice_testkit::etcd::EtcdCluster;

/// A store on `cluster` under a prefix no other store of this process
/// uses, so each conformance check starts empty.
fn store_on(cluster: &EtcdCluster) -> Box<dyn MetaStore> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut config = EtcdConfig::new(cluster.endpoints());
    config.prefix = format!("/test/{}/", NEXT.fetch_add(1, Ordering::Relaxed));
    Box::new(EtcdMetaStore::connect(config).expect("connect to etcd"))
}

#[test]
fn conformance_on_three_members() {
    let Some(cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    sluice_meta::conformance::run_all(&|| store_on(&cluster));
}

#[test]
fn conformance_while_the_leader_is_killed_and_restarted() {
    let Some(mut cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let stores: Vec<Box<dyn MetaStore>> = (0..sluice_meta::conformance::CHECKS.len() * 3)
        .map(|_| store_on(&cluster))
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let runner = s.spawn(|| {
            // The suite three times over, so the kill and the restart both
            // land in the middle of it.
            let mut stores = stores.iter();
            for _ in 0..3 {
                for (name, check) in sluice_meta::conformance::CHECKS {
                    let store = stores.next().expect("a store per check");
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check(store.as_ref())
                    }));
                    if let Err(cause) = r {
                        done.store(true, Ordering::Relaxed);
                        eprintln!("conformance check {name} failed during the failover");
                        std::panic::resume_unwind(cause);
                    }
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        std::thread::sleep(Duration::from_millis(500));
        let leader = cluster.leader().expect("a leader");
        eprintln!("killing the leader, member {leader}");
        cluster.kill(leader);
        std::thread::sleep(Duration::from_secs(2));
        assert!(
            !done.load(Ordering::Relaxed),
            "the suite ended before the restart: make it longer"
        );
        cluster.restart(leader).expect("restart the member");
        eprintln!("member {leader} restarted");
        runner
            .join()
            .expect("the suite passes through the failover");
    });
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
