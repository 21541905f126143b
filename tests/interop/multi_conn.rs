//! Several connections to one export at the same time.

use rstest::rstest;

use crate::harness::{nbdsh_script, tempdir, MIB};
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline::Flexible};
use crate::nbdsh::run_script;

#[rstest]
fn multi_conn_write_flush_read_across_three_connections(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, Flexible)
        .server(dir.path(), &[("disk", "32M")])
        .start();
    run_script("multi_conn.py", &[srv.uri("disk")]);
}

#[rstest]
fn concurrent_writers_on_disjoint_regions_then_verify(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, Flexible)
        .server(dir.path(), &[("disk", "64M")])
        .start();
    let uri = srv.uri("disk");
    let region = 12 * MIB + 4096 + 17; // unaligned lengths and offsets
    let writers: Vec<_> = (0..5u64)
        .map(|i| {
            let off = i * (region + 4099);
            let child = nbdsh_script("region_io.py")
                .args([
                    uri.clone(),
                    "write".into(),
                    off.to_string(),
                    region.to_string(),
                    (1000 + i).to_string(),
                ])
                .spawn();
            (i, off, child)
        })
        .collect();
    let mut regions = Vec::new();
    for (i, off, child) in writers {
        let out = child.wait_with_output().expect("wait for writer");
        assert!(
            out.status.success(),
            "writer {i} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        regions.push((i, off));
    }
    for (i, off) in regions {
        run_script(
            "region_io.py",
            &[
                uri.clone(),
                "verify".into(),
                off.to_string(),
                region.to_string(),
                (1000 + i).to_string(),
            ],
        );
    }
}
