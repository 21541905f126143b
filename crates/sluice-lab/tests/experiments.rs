#![allow(clippy::unwrap_used)]
//! The experiments at their tiniest, in process or behind links where
//! the machine allows: each runs, measures something and writes its
//! report files. Timings are not checked.

/// A preset's options at its quick scale, one round, writing into `out`,
/// with the bench's own client and no progress output.
fn quick_options(out: &std::path::Path) -> sluice_lab::setup::PresetOptions {
    sluice_lab::setup::PresetOptions {
        quick: true,
        rounds: 1,
        duration: None,
        out_dir: out.to_path_buf(),
        plot_dir: out.to_path_buf(),
        image: None,
        image_size: None,
        sluice_bin: None,
        targets: None,
        driver: sluice_bench::matrix::Driver::Own,
        progress: false,
        link_rate: None,
    }
}

/// The objects preset with tiny sizes and runs: every group but ceph
/// measures something, each row's peer is there, and the report files
/// are written.
#[test]
fn objects_preset_runs_with_tiny_sizes() {
    use sluice_lab::objects::{objects, ObjectsOptions};
    use sluice_lab::setup::PresetOptions;

    let out = tempfile::tempdir().unwrap();
    let store = tempfile::tempdir().unwrap();
    let opts = ObjectsOptions {
        preset: PresetOptions {
            rounds: 2,
            duration: Some(std::time::Duration::from_millis(30)),
            image_size: Some(4 << 20),
            ..quick_options(out.path())
        },
        dir: Some(store.path().to_path_buf()),
        query_objects: Some(300),
        groups: None,
        ceph: None,
    };
    let report = objects(&opts).unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    for (group, row) in [
        ("ddt", "contiguous"),
        ("ddt", "strided"),
        ("ddt", "sgl"),
        ("ddt", "iterative"),
        ("nbd", "obj-read"),
        ("nbd", "nbd-read"),
        ("nbd", "obj-write"),
        ("nbd", "nbd-write"),
        ("attr", "write-4k"),
        ("attr", "write-4k+attr"),
        ("create", "create+3attrs"),
        ("create", "create+3attrs+4k"),
        ("query", "query-1pct"),
    ] {
        let s = report
            .summaries
            .iter()
            .find(|s| s.group == group && s.row == row)
            .unwrap_or_else(|| panic!("no {group}/{row} in {:?}", report.summaries));
        assert_eq!(s.ops_s.n, 2, "{group}/{row}");
        assert!(s.ops_s.median > 0.0, "{group}/{row}");
        if s.peer != s.row {
            assert!(s.ratio.is_some_and(|r| r > 0.0), "{group}/{row}");
        }
    }
    // A 1 MiB read moves 1 MiB per operation, whichever way it is sent.
    for s in report.samples.iter().filter(|s| s.group == "ddt") {
        assert_eq!(s.bytes, s.ops << 20, "{}", s.row);
    }
    assert!(out.path().join("objects.json").exists());
    assert!(out.path().join("objects-table.md").exists());
    // The ceph group asked for without a cluster is refused.
    let ceph_less = ObjectsOptions {
        groups: Some(vec!["ceph".into()]),
        ..opts
    };
    assert!(objects(&ceph_less).is_err());
}

/// The striped preset at its smallest: one and two object servers behind
/// 100 Mbit/s links, a 4 MiB object, two threads. Needs root, network
/// namespaces and the `sluice` binary beside the test (`cargo build`);
/// without them it says so and checks only that bad sizes are refused.
#[test]
fn striped_preset_runs_over_one_and_two_servers() {
    use sluice_bench::workload::Size;
    use sluice_lab::striped::{striped, StripedArgs};

    let out = tempfile::tempdir().unwrap();
    let opts = quick_options(out.path());
    let args = StripedArgs {
        servers: Some(vec![1, 2]),
        threads: 2,
        object_size: Some(Size(4 << 20)),
    };
    // Less than 1 MiB per thread, and not whole MiB: refused up front.
    for size in [1 << 20, (4 << 20) + 1] {
        let bad = StripedArgs {
            object_size: Some(Size(size)),
            ..args.clone()
        };
        let e = striped(&opts, &bad).unwrap_err();
        assert!(format!("{e}").contains("--object-size"), "{e}");
    }
    if let Err(e) = sluice_bench::peers::resolve_sluice_bin(None) {
        eprintln!("skipped: {e:#}");
        return;
    }
    if let Some(why) = sluice_lab::link::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let report = striped(&opts, &args).unwrap();
    assert!(report.notes.len() == 1, "{:?}", report.notes);
    assert_eq!(report.links.len(), 2);
    let got: Vec<(u32, &str)> = report
        .rows
        .iter()
        .map(|r| (r.servers, r.op.as_str()))
        .collect();
    assert_eq!(got, [(1, "write"), (1, "read"), (2, "write"), (2, "read")]);
    for r in &report.rows {
        assert!(r.mb_s > 0.0, "{r:?}");
        // The data went over the shaped links: never much above their
        // measured rate (loopback would be tens of times faster).
        assert!(r.of_limit < 2.0, "{r:?}");
        assert!(r.ratio_to_one.is_some_and(|x| x > 0.0), "{r:?}");
    }
    let limit = |n: u32, op: &str| {
        report
            .rows
            .iter()
            .find(|r| r.servers == n && r.op == op)
            .map(|r| r.limit_mb_s)
            .unwrap()
    };
    assert!(limit(2, "read") > limit(1, "read") * 1.5);
    assert!(out.path().join("striped.json").exists());
    assert!(out.path().join("striped-table.md").exists());
}

/// The s3asim preset at its smallest, in process over loopback (no
/// namespaces, no `sluice` binary): every setup and mode runs and
/// verifies its result object, the rows pair naive with non-contiguous
/// at each size, and the report files are written.
#[test]
fn s3asim_preset_runs_a_tiny_sweep_in_process() {
    use sluice_bench::workload::Size;
    use sluice_lab::s3asim::{s3asim, Net, S3aSimArgs};

    let out = tempfile::tempdir().unwrap();
    let opts = quick_options(out.path());
    let args = S3aSimArgs {
        db_sizes: Some(vec![Size(512 << 10), Size(1 << 20)]),
        scale: 0.25,
        compute: std::time::Duration::ZERO,
        workers: 3,
        setups: None,
        nets: Some(vec![Net::Loopback]),
        seed: 11,
    };
    let report = s3asim(&opts, &args).unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    // 3 setups x 2 sizes x 2 modes, one round each.
    assert_eq!(report.samples.len(), 12);
    for s in &report.samples {
        assert!(s.time_s > 0.0 && s.verified_bytes > 0, "{s:?}");
    }
    // Naive makes a request per result, non-contiguous one per pair (plus
    // the master's index writes in both).
    let requests = |setup: &str, mode: &str| {
        report
            .samples
            .iter()
            .find(|s| s.setup == setup && s.mode == mode && s.db_size == 512 << 10)
            .unwrap()
            .requests
    };
    for setup in ["one", "striped", "baseline"] {
        assert!(
            requests(setup, "naive") > 3 * requests(setup, "noncontig"),
            "{setup}"
        );
    }
    let rows: Vec<(&str, u64)> = report
        .rows
        .iter()
        .map(|r| (r.setup.as_str(), r.db_size))
        .collect();
    assert_eq!(
        rows,
        [
            ("one", 512 << 10),
            ("one", 1 << 20),
            ("striped", 512 << 10),
            ("striped", 1 << 20),
            ("baseline", 512 << 10),
            ("baseline", 1 << 20),
        ]
    );
    for r in &report.rows {
        assert!(r.speedup.is_some(), "{r:?}");
        assert_eq!(r.target_met.is_some(), r.db_size == 512 << 10, "{r:?}");
    }
    assert!(out.path().join("s3asim.json").exists());
    assert!(out.path().join("s3asim-table.md").exists());
}

/// The noncontig preset at its smallest, on loopback (no namespace): the
/// JSON has a point for every part, volume, op, DDT and size, every read
/// returned the bytes written (the preset compares each one and fails
/// otherwise) and every point ended with its layout checked.
#[test]
fn noncontig_preset_runs_a_tiny_sweep_on_loopback() {
    use sluice_bench::workload::Size;
    use sluice_lab::noncontig::{noncontig, LinkKind, NoncontigArgs, Volume};
    use sluice_lab::setup::PresetOptions;

    let out = tempfile::tempdir().unwrap();
    let opts = PresetOptions {
        rounds: 2,
        duration: Some(std::time::Duration::from_millis(1)),
        ..quick_options(out.path())
    };
    let args = NoncontigArgs {
        total: Some(Size(4096)),
        blocks: Some(vec![Size(8), Size(1000)]),
        sizes: Some(vec![Size(4096)]),
        links: Some(vec![LinkKind::Loopback]),
        volumes: None,
        link_delay: None,
    };
    let report = noncontig(&opts, &args).unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("noncontig.json")).unwrap()).unwrap();
    assert_eq!(json["preset"], "noncontig");
    assert_eq!(json["total_bytes"], 4096);
    assert_eq!(json["hole_bytes"], 2);
    let points = json["points"].as_array().unwrap();
    // Contiguous: 1 size x 2 ops x 3 DDTs; view: 3 volumes x 2 blocks x
    // 2 ops x 4 (iterative one at a time and pipelined, SGL, strided).
    assert_eq!(points.len(), 6 + 48, "{points:#?}");
    for p in points {
        let (part, ddt, op) = (
            p["part"].as_str().unwrap(),
            p["ddt"].as_str().unwrap(),
            p["op"].as_str().unwrap(),
        );
        assert_eq!(p["link"], "loopback");
        assert_eq!(p["rounds_s"].as_array().unwrap().len(), 2, "{p}");
        assert!(p["time_s"].as_f64().unwrap() > 0.0, "{p}");
        assert!(p["mb_s"].as_f64().unwrap() > 0.0, "{p}");
        // Loopback measures no link: no model.
        assert!(
            p["model_time_s"].is_null() && p["model_error"].is_null(),
            "{p}"
        );
        assert_eq!(p["payload_bytes"], 4096, "{p}");
        if op == "read" {
            assert!(p["verified_reads"].as_u64().unwrap() >= 2, "{p}");
        }
        let block = p["block_bytes"].as_u64().unwrap();
        let n = p["segments"].as_u64().unwrap();
        match part {
            "contiguous" => {
                assert!(["contiguous", "sgl", "strided"].contains(&ddt), "{p}");
                assert_eq!((block, n), (4096, 1), "{p}");
            }
            "view" => {
                assert!(
                    ["iterative", "iterative-qd1", "sgl", "strided"].contains(&ddt),
                    "{p}"
                );
                assert_eq!(n, 4096u64.div_ceil(block), "{p}");
            }
            other => panic!("unknown part {other}"),
        }
    }
    for v in [Volume::Object, Volume::Mem, Volume::File] {
        for block in [8, 1000] {
            let checked: u64 = report
                .points
                .iter()
                .filter(|p| p.part == "view" && p.volume == v && p.block_bytes == block)
                .map(|p| p.layout_checks)
                .sum();
            assert_eq!(checked, 2, "{v:?} {block}: one layout check per round");
        }
    }
    assert!(
        report.checks.is_empty(),
        "targets are judged on the shaped link only"
    );
    assert!(out.path().join("noncontig-table.md").exists());
}

/// The noncontig preset over the delayed link (a relay playing an
/// 800 Mbit/s wire with 300 us each way), at its smallest: the link's
/// measured round trip holds both delays, one request at a time is timed
/// on at most `QD1_MAX_BLOCKS` blocks, every point gets the model's
/// prediction, and the paper's claim holds where the round trip
/// dominates: a list of 8-byte blocks is more than 10x one request per
/// block (about 1000x by the model at this round trip). Needs root and
/// network namespaces; without them it says so.
#[test]
fn noncontig_preset_over_a_delayed_link_beats_one_request_per_block() {
    use sluice_bench::workload::Size;
    use sluice_lab::noncontig::{noncontig, LinkKind, NoncontigArgs, Volume, QD1_MAX_BLOCKS};
    use sluice_lab::setup::PresetOptions;

    if let Some(why) = sluice_lab::link::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let opts = PresetOptions {
        rounds: 1,
        duration: Some(std::time::Duration::from_millis(1)),
        ..quick_options(out.path())
    };
    let args = NoncontigArgs {
        total: Some(Size(32 << 10)),
        blocks: Some(vec![Size(8)]),
        sizes: Some(vec![Size(4096)]),
        links: Some(vec![LinkKind::Delayed]),
        volumes: Some(vec![Volume::Mem]),
        link_delay: Some(std::time::Duration::from_micros(300)),
    };
    let report = noncontig(&opts, &args).unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let (kind, m) = report.links[0];
    assert_eq!(kind, LinkKind::Delayed);
    assert_eq!(m.delay_us, Some(300.0));
    assert!(m.rtt_us >= 600.0, "{m:?}");
    let view = |ddt: &str, op: &str| {
        report
            .points
            .iter()
            .find(|p| p.part == "view" && p.ddt == ddt && p.op == op)
            .unwrap_or_else(|| panic!("no {ddt} {op} point"))
    };
    let n = (32u64 << 10).div_ceil(8);
    for op in ["write", "read"] {
        let qd1 = view("iterative-qd1", op);
        assert_eq!(qd1.segments, QD1_MAX_BLOCKS as u64, "{qd1:?}");
        assert_eq!(qd1.payload_bytes, QD1_MAX_BLOCKS as u64 * 8, "{qd1:?}");
        let sgl = view("sgl", op);
        assert_eq!(sgl.segments, n, "{sgl:?}");
        for p in [qd1, sgl, view("strided", op)] {
            assert!(p.model_mb_s.is_some(), "{p:?}");
        }
    }
    assert_eq!(report.checks.len(), 2, "{:?}", report.checks);
    for c in &report.checks {
        assert_eq!(c.link, LinkKind::Delayed);
        for r in [c.sgl_over_iterative, c.strided_over_iterative] {
            assert!(r.is_some_and(|r| r >= 10.0), "{c:?}");
        }
    }
}

/// The RAID preset's `jobs` sweep at its smallest (N = 1, 2 over three
/// members behind 100 Mbit/s links): the links are calibrated from their
/// shapers' own counters, so a job's demand on a member's link is its
/// share of the job (64 KiB of a 128 KiB full-stripe write) plus the
/// headers, and the model's pieces keep their order: the fork-join
/// estimate is the slowest branch, inside the bounds and never above the
/// stations in series. Needs root, network namespaces and the `sluice`
/// binary beside the test; without them it says so.
#[test]
fn raid_jobs_sweep_calibrates_links_from_their_shapers() {
    use sluice_lab::raid_presets::{raid, RaidArgs, RaidCase};

    if let Err(e) = sluice_bench::peers::resolve_sluice_bin(None) {
        eprintln!("skipped: {e:#}");
        return;
    }
    if let Some(why) = sluice_lab::link::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    // The arrays' journals belong in the preset's folder: the default
    // folder under the working directory must not appear.
    let default_journals = std::env::current_dir().unwrap().join("sluice-data");
    let had_default = default_journals.exists();
    let out = tempfile::tempdir().unwrap();
    let opts = quick_options(out.path());
    let args = RaidArgs {
        cases: Some(vec![RaidCase::Jobs]),
        max_jobs: 2,
        member_size: None,
    };
    let report = raid(&opts, &args).unwrap();
    let jobs = report.jobs.expect("the jobs sweep has a model");
    let demand = |name: &str| {
        jobs.demands
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", jobs.demands))
            .demand
    };
    // 100 Mbit/s charges 12.5 MB/s: 64 KiB and its TCP/IP headers.
    let up_bytes = demand("members-link-up") * 12.5e6;
    assert!((65_536.0..72_000.0).contains(&up_bytes), "{up_bytes}");
    // Coming down: only acknowledgements and replies.
    assert!(demand("members-link-down") * 12.5e6 < 8_000.0);
    assert_eq!(
        jobs.points.iter().map(|p| p.jobs).collect::<Vec<_>>(),
        [1, 2]
    );
    for p in &jobs.points {
        let [lower, upper] = p.bjb_r;
        assert!(lower <= p.fork_join_r * (1.0 + 1e-9), "{p:?}");
        assert!(p.fork_join_r <= p.mva_r * (1.0 + 1e-9), "{p:?}");
        assert!(p.mva_r <= upper * (1.0 + 1e-9), "{p:?}");
        assert!(p.x > 0.0 && p.little_r > 0.0, "{p:?}");
    }
    // Alone, a job's lower bound is its link time, not every demand.
    let one = &jobs.points[0];
    assert!(
        (one.bjb_r[0] - demand("members-link-up")).abs() < 1e-9,
        "{one:?}"
    );
    assert!(jobs.bound_slack > 0.0 && jobs.bound_slack < 0.05);
    assert!(out.path().join("raid.json").exists());
    assert!(
        had_default || !default_journals.exists(),
        "the preset left files in {}",
        default_journals.display()
    );
}
