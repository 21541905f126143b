//! qemu-img against sluice: info, convert in and out, compare.

use rstest::rstest;

use crate::harness::{
    assert_bytes_eq, assert_files_equal, read_file_range, sha256_file, shm_tempdir, tempdir, tool,
    write_random_file, ServerBuilder, MIB,
};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};

fn virtual_size(uri: &str) -> u64 {
    let out = tool("qemu-img")
        .args(["info", "--output=json", "-f", "raw"])
        .arg(uri)
        .run();
    out.json()["virtual-size"]
        .as_u64()
        .unwrap_or_else(|| panic!("no virtual-size in qemu-img info; {}", out.describe()))
}

#[test]
fn qemu_img_info_reports_export_sizes() {
    let dir = tempdir();
    let srv = ServerBuilder::new()
        .export("mem64", "mem:64M")
        .file_export("file10", &dir.path().join("f.img"), "size=10M")
        .start();
    assert_eq!(virtual_size(&srv.uri("mem64")), 64 * MIB);
    assert_eq!(virtual_size(&srv.uri("file10")), 10 * MIB);
    // The empty export name is the first export.
    assert_eq!(virtual_size(&srv.uri("")), 64 * MIB);
}

/// The backing file's content is checked too, so the backend is a file.
#[rstest]
fn qemu_img_convert_in_and_out_round_trip_matches_byte_for_byte(
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = shm_tempdir();
    let size = 48 * MIB;
    let src = dir.path().join("src.raw");
    // Random data with zero runs (aligned and unaligned) so that qemu-img's
    // zero detection / write-zeroes path is exercised too.
    write_random_file(
        &src,
        size,
        1,
        &[(8 * MIB, 4 * MIB), (40 * MIB + 512, MIB + 333)],
    );
    let backing = dir.path().join("disk.img");
    let srv = Cell::new(File, cache, Flexible)
        .server(dir.path(), &[("disk", "48M")])
        .start();
    let uri = srv.uri("disk");

    // local -> nbd:// (no -n: qemu-img opens the existing export as target)
    tool("qemu-img")
        .args(["convert", "-p", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(&uri)
        .run();
    tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(&uri)
        .run();

    // nbd:// -> local
    let dst = dir.path().join("dst.raw");
    tool("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&dst)
        .run();
    assert_files_equal(&src, &dst);
    assert_eq!(sha256_file(&src), sha256_file(&dst));

    // compare must notice a one-byte difference (guards against a vacuous pass).
    let mut changed = read_file_range(&src, 0, 4096);
    changed[100] ^= 0xff;
    let alt = dir.path().join("alt.raw");
    std::fs::copy(&src, &alt).expect("copy");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&alt)
            .expect("open alt");
        f.write_all_at(&changed, 0).expect("modify alt");
    }
    let out = tool("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&alt)
        .arg(&uri)
        .output();
    assert_eq!(
        out.code(),
        Some(1),
        "qemu-img compare must report the difference; {}",
        out.describe()
    );

    // After a graceful stop the backing file holds exactly the image.
    drop(srv);
    assert_bytes_eq(
        "backing file after shutdown",
        &std::fs::read(&backing).expect("read backing"),
        &std::fs::read(&src).expect("read src"),
    );
}

#[rstest]
fn qemu_img_convert_with_n_into_larger_existing_export(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = shm_tempdir();
    let src = dir.path().join("src.raw");
    write_random_file(&src, 20 * MIB, 2, &[(3 * MIB, 2 * MIB)]);
    let srv = Cell::new(backend, cache, Flexible)
        .server(dir.path(), &[("big", "32M")])
        .start();
    let uri = srv.uri("big");
    // Pre-fill the whole export so that we can see what convert touched.
    tool("qemu-io")
        .args(["-f", "raw"])
        .arg(&uri)
        .args(["-c", "write -P 0xee 0 32M"])
        .run();
    tool("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(&uri)
        .run();
    let dst = dir.path().join("dst.raw");
    tool("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&uri)
        .arg(&dst)
        .run();
    let got = std::fs::read(&dst).expect("read dst");
    let want = std::fs::read(&src).expect("read src");
    assert_eq!(got.len() as u64, 32 * MIB);
    assert_bytes_eq(
        "converted part (incl. zeroed run)",
        &got[..want.len()],
        &want,
    );
    assert!(
        got[want.len()..].iter().all(|&b| b == 0xee),
        "bytes past the converted image must be untouched (0xee)"
    );
}

/// `qemu-img map` (qemu >= 9 negotiates extended headers, so this exercises
/// 64-bit block status replies): written ranges are data, the rest zero.
fn check_qemu_img_map(uri: &str, size: u64, grain: u64) {
    let writes = [
        (MIB, MIB),
        (5 * MIB, 4096),
        (9 * MIB + 128 * 1024, 64 * 1024),
    ];
    let mut io = tool("qemu-io").args(["-f", "raw"]).arg(uri);
    for (o, l) in writes {
        io = io.arg("-c").arg(format!("write -P 0x4d {o} {l}"));
    }
    io.run();
    let v = tool("qemu-img")
        .args(["map", "--output=json", "-f", "raw"])
        .arg(uri)
        .run()
        .json();
    let m: Vec<(u64, u64, bool, bool)> = v
        .as_array()
        .expect("map array")
        .iter()
        .map(|e| {
            (
                e["start"].as_u64().expect("start"),
                e["length"].as_u64().expect("length"),
                e["data"].as_bool().expect("data"),
                e["zero"].as_bool().expect("zero"),
            )
        })
        .collect();
    let mut pos = 0;
    for &(s, l, _, _) in &m {
        assert_eq!(s, pos, "qemu-img map entries must be contiguous: {m:?}");
        pos += l;
    }
    assert_eq!(pos, size, "qemu-img map must cover the export: {m:?}");
    let at = |off: u64| {
        *m.iter()
            .find(|e| e.0 <= off && off < e.0 + e.1)
            .expect("covered")
    };
    for (o, l) in writes {
        for off in [o, o + l - 1] {
            let e = at(off);
            assert!(e.2 && !e.3, "offset {off} was written: {e:?} in {m:?}");
        }
        for off in [o - grain, (o + l).div_ceil(grain) * grain] {
            let e = at(off);
            assert!(!e.2 && e.3, "offset {off} was not written: {e:?} in {m:?}");
        }
    }
}

#[test]
fn qemu_img_map_reports_data_and_zero_ranges() {
    let dir = tempdir();
    let srv = ServerBuilder::new()
        .export("m", "mem:16M")
        .file_export("f", &dir.path().join("f.img"), "size=16M")
        .start();
    check_qemu_img_map(&srv.uri("m"), 16 * MIB, 64 * 1024);
    check_qemu_img_map(&srv.uri("f"), 16 * MIB, 4096);
}
