//! The same data-integrity workloads under each `--pipeline` schedule.

use crate::fio::fio_randwrite_4k_qd32;
use crate::harness::ServerBuilder;
use crate::nbdsh::run_script;

fn server(mode: &str) -> crate::harness::Server {
    ServerBuilder::new()
        .export("default", "mem:256M")
        .pipeline(mode)
        .start()
}

fn fio_under(mode: &str) {
    fio_randwrite_4k_qd32(&server(mode));
}

fn aio_under(mode: &str) {
    let srv = server(mode);
    run_script("aio_in_flight.py", &[srv.uri("default"), "64".into()]);
}

#[test]
fn pipeline_off_fio_randwrite_verify() {
    fio_under("off");
}

#[test]
fn pipeline_fixed_fio_randwrite_verify() {
    fio_under("fixed");
}

#[test]
fn pipeline_flexible_fio_randwrite_verify() {
    fio_under("flexible");
}

#[test]
fn pipeline_off_aio_64_in_flight() {
    aio_under("off");
}

#[test]
fn pipeline_fixed_aio_64_in_flight() {
    aio_under("fixed");
}

#[test]
fn pipeline_flexible_aio_64_in_flight() {
    aio_under("flexible");
}
