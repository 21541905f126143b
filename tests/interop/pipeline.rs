//! Clients that keep many requests in flight, over the whole matrix:
//! every backend, cache policy and `--pipeline` schedule.

use rstest::rstest;

use crate::fio::fio_randwrite_4k_qd32;
use crate::harness::tempdir;
use crate::matrix::{Backend, Backend::*, Cache, Cache::*, Cell, Pipeline, Pipeline::*};
use crate::nbdsh::run_script;

#[rstest]
fn fio_randwrite_4k_qd32_crc32c_verify(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
    #[values(Off, Fixed, Flexible)] pipeline: Pipeline,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, pipeline)
        .server(dir.path(), &[("default", "64M")])
        .start();
    fio_randwrite_4k_qd32(&srv);
}

#[rstest]
fn libnbd_aio_64_in_flight(
    #[values(Mem, File)] backend: Backend,
    #[values(Uncached, WriteThrough, WriteBack)] cache: Cache,
    #[values(Off, Fixed, Flexible)] pipeline: Pipeline,
) {
    let dir = tempdir();
    let srv = Cell::new(backend, cache, pipeline)
        .server(dir.path(), &[("default", "256M")])
        .start();
    run_script("aio_in_flight.py", &[srv.uri("default"), "64".into()]);
}
