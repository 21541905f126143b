//! The etcd backend against a real three-member etcd cluster on loopback
//! ports: the conformance suite; the suite again while the leader is
//! killed and restarted (clients must see no error); an unreachable
//! cluster, which must fail with a clear error, not hang; a cluster that
//! speaks only TLS and checks client certificates; and one with etcd's
//! user authentication on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_meta::{EtcdConfig, EtcdMetaStore, EtcdUser, MetaError, MetaStore};
use sluice_testkit::etcd::EtcdCluster;
use sluice_testkit::pki::Pki;

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
fn an_unreachable_cluster_fails_within_the_connect_timeout() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = EtcdConfig::new([format!("127.0.0.1:{port}")]);
    let bound = config.connect_timeout + Duration::from_secs(1);
    let started = Instant::now();
    match EtcdMetaStore::connect(config) {
        Err(e @ MetaError::Unreachable { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
            assert!(!msg.contains('\n') && msg.len() < 200, "{msg}");
        }
        other => panic!("connecting to an unreachable cluster gave {other:?}"),
    }
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
}

/// A first operation through `config` (made to fail fast) fails with a
/// backend error naming the cluster, and `why` in its cause chain.
fn assert_refused(mut config: EtcdConfig, why: &str) {
    config.op_timeout = Duration::from_secs(2);
    config.request_timeout = Duration::from_millis(500);
    let endpoint = config.endpoints[0].clone();
    let started = Instant::now();
    let result = EtcdMetaStore::connect(config).and_then(|s| s.servers());
    let Err(e) = result else {
        panic!("{why}: an operation succeeded");
    };
    let chain = sluice_testkit::error_chain(&e);
    eprintln!("{why}: {chain}");
    assert!(chain.contains(&endpoint), "{why}: {chain}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{why}: took {:?}",
        started.elapsed()
    );
}

#[test]
fn tls_with_a_client_certificate_and_nothing_less() {
    let pki = Pki::new();
    let Some(cluster) = EtcdCluster::start_tls_or_skip(3, &pki.server()) else {
        return;
    };
    let endpoints = cluster.endpoints();
    // The URI form, with the certificates of a client the CA signed: the
    // whole suite passes.
    let uri = format!(
        "etcds://{}?tls-certificates={}",
        endpoints.join(","),
        pki.client("client1").display()
    );
    static NEXT: AtomicU64 = AtomicU64::new(0);
    sluice_meta::conformance::run_all(&|| {
        let mut config = EtcdConfig::from_uri(&uri).expect("a valid etcds URI");
        assert!(config.endpoints.iter().all(|e| e.starts_with("https://")));
        config.prefix = format!("/tls/{}/", NEXT.fetch_add(1, Ordering::Relaxed));
        Box::new(EtcdMetaStore::connect(config).expect("connect over TLS"))
    });
    // Without a client certificate, trusting another CA, or in the clear:
    // refused, clearly and soon.
    let tls = |who: &str| EtcdConfig::new(endpoints.clone()).with_tls(pki.client(who));
    assert_refused(tls("nocert"), "no client certificate");
    assert_refused(tls("untrusted"), "a CA that did not sign the members");
    assert_refused(tls("rogue"), "a client certificate of another CA");
    assert_refused(EtcdConfig::new(endpoints.clone()), "no TLS");
}

#[test]
fn user_authentication() {
    let Some(cluster) = EtcdCluster::start_or_skip(1) else {
        return;
    };
    let endpoints = cluster.endpoints();
    // Turn authentication on as an operator would: a root user, then
    // `auth enable`.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut c = etcd_client::Client::connect(&endpoints, None)
            .await
            .expect("connect");
        c.user_add("root", "s3cret", None).await.expect("add root");
        c.user_grant_role("root", "root").await.expect("grant root");
        c.auth_enable().await.expect("enable auth");
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let password_file = dir.path().join("password");
    std::fs::write(&password_file, "s3cret\n").expect("write the password file");
    let uri = format!(
        "etcd://{}/auth?user=root&password-file={}",
        endpoints.join(","),
        password_file.display()
    );
    let config = EtcdConfig::from_uri(&uri).expect("a valid URI");
    let store = EtcdMetaStore::connect(config.clone()).expect("connect as root");
    store.add_server("sluice://a:1").expect("add a server");
    assert_eq!(store.servers().expect("servers"), ["sluice://a:1"]);
    let mut wrong = config.clone();
    wrong.user = Some(EtcdUser {
        name: "root".to_owned(),
        password: "guess".to_owned(),
    });
    assert_refused(wrong, "a wrong password");
    let mut anonymous = config;
    anonymous.user = None;
    assert_refused(anonymous, "no user");
}
