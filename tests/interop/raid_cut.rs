//! A RAID 5 member cut off the network, not killed: three `sluice serve`
//! members, each in a network namespace of its own behind a veth link
//! (sluice-lab's `Link`), a head in the root namespace exporting the
//! array, and fio writing and verifying through the head. Mid-run an
//! nftables rule in one member's namespace drops every packet arriving
//! there: the member's process runs on and its connections stay open,
//! but nothing it is sent arrives and nothing comes back. The head must
//! notice by its member request timeout, mark the member failed and go
//! on degraded, with no error for fio and every block verified.
//!
//! With failure detection effectively off (`timeout=600s`) the same run
//! hangs in the cut member's requests until fio's time limit fails it.
//!
//! Needs root and network namespaces; where they are missing the test
//! says so and does nothing.

use std::net::IpAddr;
use std::thread;
use std::time::Duration;

use sluice_bench::peers::{PeerKind, PeerServer};
use sluice_lab::link::{self, Link};

use crate::fio::fio_verify;
use crate::harness::{tempdir, ServerBuilder};
use crate::raid::{create, metric};

/// Where each member listens inside its namespace.
const PORT: u16 = 10809;
/// The head gives up on a silent member after this (and one second of
/// trying to reconnect).
const MEMBER_OPTIONS: &str = "timeout=3s,reconnect=1s";

/// A member server over a 64 MiB file, export `m`, inside `link`'s
/// namespace.
fn member_behind(link: &Link, dir: &std::path::Path, i: usize) -> PeerServer {
    let ip = IpAddr::V4(link.server_addr());
    let argv: Vec<String> = vec![
        env!("CARGO_BIN_EXE_sluice").into(),
        "serve".into(),
        "--listen".into(),
        std::net::SocketAddr::new(ip, PORT).to_string(),
        "--export".into(),
        format!(
            "m=file:{},size=64M",
            dir.join(format!("member{i}.img")).display()
        ),
    ];
    PeerServer::launch(
        &format!("member {i}"),
        PeerKind::Sluice,
        &argv,
        (ip, PORT),
        Some(link),
    )
    .unwrap_or_else(|e| {
        panic!(
            "member {i} did not start in {}: {e:#}",
            link.namespace().name()
        )
    })
}

#[test]
fn a_member_cut_off_by_nftables_under_fio_verify_is_failed_and_the_volume_stays_correct() {
    if let Some(why) = link::unavailable() {
        eprintln!("skipping: {why}");
        return;
    }
    let dir = tempdir();
    let links: Vec<Link> = (0..3)
        .map(|_| Link::create(None).expect("a link"))
        .collect();
    let members: Vec<PeerServer> = links
        .iter()
        .enumerate()
        .map(|(i, l)| member_behind(l, dir.path(), i))
        .collect();
    let uris: Vec<String> = members
        .iter()
        .map(|m| format!("nbd://{}/m", m.address()))
        .collect();
    let spec = format!("raid5:unit=64K,members={},{MEMBER_OPTIONS}", uris.join(","));
    create(&spec);
    let mut head = ServerBuilder::new().export("vol", &spec).metrics().start();
    thread::scope(|s| {
        let fio = s.spawn(|| {
            fio_verify(
                &head,
                "cut",
                &[
                    "--rw=randwrite",
                    "--bs=16k",
                    "--iodepth=8",
                    "--size=24M",
                    "--verify=crc32c",
                    // About 3 s of writes, so the cut lands in them.
                    "--rate=8m",
                ],
                24 << 20,
            );
        });
        thread::sleep(Duration::from_secs(1));
        links[1].cut().expect("cut member 1's link");
        fio.join().expect("fio ran to the end and verified");
    });
    head.assert_running();
    assert_eq!(metric(&head, "sluice_raid_members_failed"), 1.0);
    assert_eq!(
        metric(
            &head,
            "sluice_raid_member_failed{export=\"vol\",member=\"1\""
        ),
        1.0
    );
    let log = head.wait_for_log("member failed; continuing degraded");
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("member failed; continuing degraded"))
        .collect();
    assert_eq!(failures.len(), 1, "logged once:\n{log}");
    assert!(failures[0].contains(&uris[1]), "{}", failures[0]);
    // The member itself never stopped: it was the network. Once the
    // rule is gone it answers again.
    links[1].restore().expect("restore member 1's link");
    std::net::TcpStream::connect_timeout(
        &members[1].address().parse().expect("member address"),
        Duration::from_secs(10),
    )
    .expect("the cut member still runs and accepts connections");
}
