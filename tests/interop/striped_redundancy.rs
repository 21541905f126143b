//! Replicated and erasure-coded striped objects through the CLI against
//! real `sluice serve` processes: `put --replicas R` and `put --ec K+M`
//! show their redundancy in `stat`, and `get` returns every byte while
//! as many object servers are killed as the redundancy survives, then
//! fails naming the servers.

use std::time::Duration;

use rustix::process::Signal;

use crate::harness::random_bytes;
use crate::striped_cli::{assert_fails, deploy, ok};

#[test]
fn redundant_puts_survive_killed_servers_and_say_so_in_stat() {
    let mut d = deploy();
    // Not a multiple of a row, so the last row is partial.
    let data = random_bytes(21, 1_000_003);
    let file = d.dir.path().join("in.bin");
    std::fs::write(&file, &data).unwrap();
    let put = |d: &crate::striped_cli::Deployment, name: &str, how: &[&str]| {
        let mut args = vec!["put", name, file.to_str().unwrap(), "--stripe", "16K"];
        args.extend_from_slice(how);
        ok(d.obj(&args));
    };
    put(&d, "plain", &[]);
    put(&d, "two", &["--replicas", "2"]);
    put(&d, "three", &["--replicas", "3"]);
    put(&d, "ec", &["--ec", "2+2"]);
    let stat = |name: &str| ok(d.obj(&["stat", name])).stdout();
    assert!(
        stat("plain").contains("redundancy: none\n"),
        "{}",
        stat("plain")
    );
    assert!(
        stat("two").contains("redundancy: replicas 2\npieces: 8\n"),
        "{}",
        stat("two")
    );
    assert!(stat("three").contains("redundancy: replicas 3\npieces: 12\n"));
    assert!(
        stat("ec").contains("redundancy: ec 2+2\npieces: 4\n"),
        "{}",
        stat("ec")
    );
    let json = ok(d.obj(&["stat", "ec", "--json"])).stdout();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["redundancy"],
        serde_json::json!({"ec": {"data": 2, "parity": 2}})
    );

    // Bad forms are usage errors, naming what is wrong.
    assert_fails(&d.obj(&["put", "x", "--ec", "2+0"]), 2, &["2+0"]);
    assert_fails(&d.obj(&["put", "x", "--ec", "3"]), 2, &["K+M"]);
    assert_fails(
        &d.obj(&["put", "x", "--ec", "2+1", "--replicas", "2"]),
        2,
        &["--replicas"],
    );
    assert_fails(
        &d.obj(&["put", "x", "--ec", "2+1", "--stripe-count", "4"]),
        2,
        &["--stripe-count"],
    );
    assert_fails(&d.obj(&["put", "x", "--replicas", "5"]), 1, &["5", "4"]);

    // Kill one object server: everything but the plain object reads.
    let kill = |d: &mut crate::striped_cli::Deployment, i: usize| {
        d.servers[i].signal(Signal::KILL);
        assert!(d.servers[i].wait_exit(Duration::from_secs(10)).is_some());
        d.servers[i].obj_uri()
    };
    let first = kill(&mut d, 1);
    for name in ["two", "three", "ec"] {
        assert_eq!(ok(d.obj(&["get", name])).output.stdout, data, "{name}");
    }
    assert_fails(&d.obj(&["get", "plain"]), 1, &[&first]);
    // A second: three copies and two parity units are still enough.
    let second = kill(&mut d, 2);
    for name in ["three", "ec"] {
        assert_eq!(ok(d.obj(&["get", name])).output.stdout, data, "{name}");
    }
    // Two copies over four servers: some column had both on 1 and 2.
    assert_fails(&d.obj(&["get", "two"]), 1, &[&first, &second]);
    // A third: more than either survives.
    let third = kill(&mut d, 3);
    assert_fails(&d.obj(&["get", "ec"]), 1, &[&first, &second, &third]);
}

#[test]
fn puts_without_flags_get_the_deployment_default_once_it_has_the_servers() {
    let d = deploy();
    let data = random_bytes(22, 100_000);
    let default = |args: &[&str]| {
        let mut all = vec!["default-redundancy"];
        all.extend_from_slice(args);
        ok(d.meta_cmd(&all)).stdout()
    };
    let stat = |name: &str| ok(d.obj(&["stat", name])).stdout();
    assert_eq!(default(&[]), "none\n");
    ok(d.obj_in(&["put", "before"], &data));
    assert!(stat("before").contains("redundancy: none\n"));

    assert_eq!(default(&["--replicas", "2"]), "replicas 2\n");
    assert_eq!(default(&[]), "replicas 2\n");
    ok(d.obj_in(&["put", "copied"], &data));
    assert!(stat("copied").contains("redundancy: replicas 2\npieces: 8\n"));
    // Flags on the put win over the default.
    ok(d.obj_in(&["put", "flagged", "--replicas", "1"], &data));
    assert!(stat("flagged").contains("redundancy: none\n"));

    assert_eq!(default(&["--ec", "2+2"]), "ec 2+2\n");
    ok(d.obj_in(&["put", "coded"], &data));
    assert!(
        stat("coded").contains("redundancy: ec 2+2\n"),
        "{}",
        stat("coded")
    );
    assert_eq!(ok(d.obj(&["get", "coded"])).output.stdout, data);

    // A default the deployment has too few servers for: no redundancy,
    // and a warning saying why.
    assert_eq!(default(&["--ec", "4+2"]), "ec 4+2\n");
    let out = ok(d.obj_in(&["put", "short"], &data));
    assert!(
        out.stderr().contains("default redundancy"),
        "{}",
        out.stderr()
    );
    assert!(stat("short").contains("redundancy: none\n"));
    // Bad values are usage errors and change nothing.
    assert_fails(
        &d.meta_cmd(&["default-redundancy", "--ec", "0+2"]),
        2,
        &["0+2"],
    );
    assert_eq!(default(&[]), "ec 4+2\n");
}
