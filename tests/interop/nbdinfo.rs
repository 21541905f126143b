//! nbdinfo against sluice: --list, --json, --map, --can/--is, --size.

use std::collections::BTreeMap;

use rstest::rstest;
use serde_json::Value;

use crate::harness::{create_sparse_file, tempdir, tool, Server, ServerBuilder, KIB, MIB};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};

fn nbdinfo_json(uri: &str) -> Value {
    tool("nbdinfo").arg("--json").arg(uri).run().json()
}

/// The single export object of `nbdinfo --json URI`.
fn export_info(uri: &str) -> Value {
    let v = nbdinfo_json(uri);
    let exports = v["exports"].as_array().expect("exports array");
    assert_eq!(
        exports.len(),
        1,
        "nbdinfo --json URI lists one export: {v:#}"
    );
    exports[0].clone()
}

fn flag(info: &Value, key: &str) -> bool {
    info[key]
        .as_bool()
        .unwrap_or_else(|| panic!("nbdinfo --json has no boolean {key}: {info:#}"))
}

fn three_exports(dir: &std::path::Path) -> Server {
    let ro = dir.join("ro.img");
    create_sparse_file(&ro, 2 * MIB);
    ServerBuilder::new()
        .file_export("alpha", &dir.join("alpha.img"), "size=3M")
        .export("beta", "mem:5M")
        .file_export("gamma", &ro, "ro")
        .start()
}

#[test]
fn nbdinfo_list_shows_all_exports_with_sizes() {
    let dir = tempdir();
    let srv = three_exports(dir.path());
    let base = srv.uri("");

    let text = tool("nbdinfo").arg("--list").arg(&base).run().stdout();
    for name in ["alpha", "beta", "gamma"] {
        assert!(
            text.contains(&format!("export=\"{name}\":")),
            "nbdinfo --list does not show export {name}:\n{text}"
        );
    }

    let v = tool("nbdinfo")
        .args(["--list", "--json"])
        .arg(&base)
        .run()
        .json();
    let mut seen = BTreeMap::new();
    for e in v["exports"].as_array().expect("exports") {
        let name = e["export-name"].as_str().expect("export-name").to_string();
        if let Some(d) = e.get("description") {
            let d = d.as_str().expect("description is a string");
            assert!(!d.is_empty(), "empty description for {name}");
        }
        seen.insert(name, e["export-size"].as_u64().expect("export-size"));
    }
    let want: BTreeMap<String, u64> = [("alpha", 3 * MIB), ("beta", 5 * MIB), ("gamma", 2 * MIB)]
        .into_iter()
        .map(|(n, s)| (n.to_string(), s))
        .collect();
    assert_eq!(seen, want, "nbdinfo --list --json exports and sizes");
}

#[test]
fn nbdinfo_json_reports_capabilities_contexts_and_block_sizes() {
    let dir = tempdir();
    let srv = three_exports(dir.path());
    for name in ["alpha", "beta"] {
        let info = export_info(&srv.uri(name));
        assert_eq!(info["export-name"], Value::from(name));
        assert!(!flag(&info, "is_read_only"), "{name}: read-only?");
        for cap in [
            "can_multi_conn",
            "can_flush",
            "can_fua",
            "can_trim",
            "can_zero",
            "can_fast_zero",
            "can_cache",
            "can_df",
        ] {
            assert!(flag(&info, cap), "{name}: {cap} must be true: {info:#}");
        }
        let contexts: Vec<&str> = info["contexts"]
            .as_array()
            .expect("contexts")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(
            contexts.contains(&"base:allocation"),
            "{name}: contexts {contexts:?} lack base:allocation"
        );
        assert_eq!(
            info["block_size_minimum"].as_u64(),
            Some(1),
            "{name}: {info:#}"
        );
        assert_eq!(info["block_size_preferred"].as_u64(), Some(4096), "{name}");
        assert_eq!(
            info["block_size_maximum"].as_u64(),
            Some(64 * MIB),
            "{name}"
        );
    }
    let top = nbdinfo_json(&srv.uri("alpha"));
    assert_eq!(top["protocol"], Value::from("newstyle-fixed"));
    assert_eq!(top["structured"], Value::from(true));
    assert_eq!(
        export_info(&srv.uri("alpha"))["export-size"].as_u64(),
        Some(3 * MIB)
    );
    assert_eq!(
        export_info(&srv.uri("beta"))["export-size"].as_u64(),
        Some(5 * MIB)
    );
}

#[test]
fn nbdinfo_json_read_only_export() {
    let dir = tempdir();
    let srv = three_exports(dir.path());
    let info = export_info(&srv.uri("gamma"));
    assert!(flag(&info, "is_read_only"), "gamma is ro: {info:#}");
    assert_eq!(info["export-size"].as_u64(), Some(2 * MIB));
}

#[test]
fn nbdinfo_can_and_is_queries_use_exit_codes() {
    let dir = tempdir();
    let srv = three_exports(dir.path());
    let rw = srv.uri("alpha");
    let ro = srv.uri("gamma");
    let query = |args: &[&str], uri: &str, code: i32| {
        tool("nbdinfo")
            .args(args)
            .arg(uri)
            .output()
            .assert_code(code);
    };
    for cap in [
        "flush",
        "fua",
        "trim",
        "zero",
        "fast-zero",
        "cache",
        "df",
        "multi-conn",
        "structured-reply",
        "write",
        "read",
        "connect",
    ] {
        query(&["--can", cap], &rw, 0);
    }
    query(&["--is", "read-only"], &rw, 2);
    query(&["--is", "read-only"], &ro, 0);
    query(&["--can", "write"], &ro, 2);
    query(&["--is", "tls"], &rw, 2);
    // A missing export is an error, not "false".
    let out = tool("nbdinfo")
        .args(["--can", "connect"])
        .arg(srv.uri("no-such-export"))
        .output();
    assert_ne!(
        out.code(),
        Some(0),
        "connecting to a missing export; {}",
        out.describe()
    );
}

#[test]
fn nbdinfo_size_matches_export_size() {
    let srv = ServerBuilder::new()
        .export("a", "mem:1G")
        .export("b", "mem:4K")
        .export("c", "mem:12345")
        .start();
    for (name, size) in [("a", 1u64 << 30), ("b", 4 * KIB), ("c", 12345)] {
        let out = tool("nbdinfo").arg("--size").arg(srv.uri(name)).run();
        assert_eq!(out.stdout().trim(), size.to_string(), "export {name}");
    }
}

/// (offset, length, type) from `nbdinfo --map --json`.
fn map(uri: &str) -> Vec<(u64, u64, u64)> {
    let v = tool("nbdinfo")
        .args(["--map", "--json"])
        .arg(uri)
        .run()
        .json();
    v.as_array()
        .expect("map is an array")
        .iter()
        .map(|e| {
            (
                e["offset"].as_u64().expect("offset"),
                e["length"].as_u64().expect("length"),
                e["type"].as_u64().expect("type"),
            )
        })
        .collect()
}

/// Writes data with qemu-io at the given ranges, then checks the map: the
/// extents tile the export, written ranges are data (type 0), and everything
/// at least `grain` bytes away from a write is hole+zero (type 3).
fn check_map(srv: &Server, name: &str, size: u64, grain: u64) {
    let uri = srv.uri(name);
    let before = map(&uri);
    assert_eq!(
        before,
        vec![(0, size, 3)],
        "a fresh sparse export must map as one hole,zero extent"
    );
    let data = [
        (MIB, MIB),
        (8 * MIB, 4 * KIB),
        (12 * MIB + 64 * KIB, 192 * KIB),
    ];
    let mut c = tool("qemu-io").args(["-f", "raw"]).arg(&uri);
    for (o, l) in data {
        c = c.arg("-c").arg(format!("write -P 0x5e {o} {l}"));
    }
    c.arg("-c").arg("flush").run();

    let m = map(&uri);
    let mut pos = 0;
    for &(o, l, _) in &m {
        assert_eq!(o, pos, "extents must be contiguous: {m:?}");
        assert!(l > 0);
        pos += l;
    }
    assert_eq!(pos, size, "extents must cover the export: {m:?}");
    let type_at = |off: u64| {
        m.iter()
            .find(|&&(o, l, _)| o <= off && off < o + l)
            .map(|e| e.2)
            .expect("covered")
    };
    for (o, l) in data {
        for off in [o, o + l / 2, o + l - 1] {
            assert_eq!(
                type_at(off),
                0,
                "offset {off} was written: data expected; {m:?}"
            );
        }
        // The blocks on either side were not written.
        let before = o - grain;
        let after = (o + l).div_ceil(grain) * grain;
        assert_eq!(type_at(before), 3, "offset {before} is a hole; {m:?}");
        assert_eq!(type_at(after), 3, "offset {after} is a hole; {m:?}");
    }
    for off in [0, 4 * MIB, 10 * MIB, size - 1] {
        assert_eq!(type_at(off), 3, "offset {off} is a hole; {m:?}");
    }
    // Data extents add up to what was written, give or take the grain.
    let data_total: u64 = m.iter().filter(|e| e.2 == 0).map(|e| e.1).sum();
    let written: u64 = data.iter().map(|d| d.1.div_ceil(grain) * grain).sum();
    assert!(
        data_total >= data.iter().map(|d| d.1).sum::<u64>() && data_total <= written,
        "data extents total {data_total}, written {written}: {m:?}"
    );
}

#[rstest]
fn nbdinfo_map_shows_data_and_holes(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, Flexible)
        .server(dir.path(), &[("m", "16M")])
        .start();
    // The in-memory store may track allocation in chunks up to 64 KiB,
    // the filesystem in 4 KiB blocks.
    let grain = match backend {
        Mem => 64 * KIB,
        File => 4 * KIB,
    };
    check_map(&srv, "m", 16 * MIB, grain);
}
