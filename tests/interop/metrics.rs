//! The server's metrics as the model reads them: a real `sluice serve
//! --metrics` after known I/O, its `/metrics` page parsed with
//! `sluice_model::prometheus` (what `sluice model calibrate` uses), so the
//! text the server renders and the reader the model trusts cannot drift
//! apart unnoticed.

use sluice_model::prometheus::{parse, ServerCounters};
use sluice_testkit::raw_nbd::{Finish, RawClient, Replies, EINVAL};

use crate::harness::{random_bytes, scrape, Server, ServerBuilder, MIB};

fn server() -> Server {
    ServerBuilder::new()
        .export("disk", "mem:16M")
        .metrics()
        .start()
}

#[test]
fn server_metrics_parse_with_the_models_reader_and_count_the_io() {
    let srv = server();
    let addr = srv.metrics.expect("metrics address");
    let mut c = RawClient::open(srv.connect(), "disk", Finish::Go, Replies::Structured);
    let data = random_bytes(1, 8192);
    for i in 0..3u64 {
        assert_eq!(c.write(i, i * 8192, &data), 0, "write {i}");
    }
    for i in 0..10u64 {
        c.read(100 + i, i * 4096, 4096).expect("read");
    }
    assert_eq!(c.flush(200), 0, "flush");
    // Refused before it reaches the device: counted under the command
    // `invalid`, and as an error.
    assert_eq!(c.read(300, 16 * MIB, 4096), Err(EINVAL));

    let text = scrape(addr);
    // The whole page parses, every line of it.
    let samples = parse(&text)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .samples;
    let lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    assert_eq!(samples.len(), lines, "a sample line the reader skipped");

    let counters =
        ServerCounters::from_text(&text, Some("disk")).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let count = |cmd: &str| counters.requests.get(cmd).copied().unwrap_or(0);
    let bytes = |cmd: &str| counters.bytes.get(cmd).copied().unwrap_or(0);
    assert_eq!(
        (
            count("write"),
            count("read"),
            count("flush"),
            count("invalid")
        ),
        (3, 10, 1, 1),
        "{counters:?}"
    );
    assert_eq!((bytes("write"), bytes("read")), (3 * 8192, 10 * 4096));
    assert_eq!(counters.total_requests(), 15, "{counters:?}");
    assert_eq!(counters.request_seconds_count, 15, "{counters:?}");
    assert!(counters.request_seconds_sum > 0.0, "{counters:?}");
    assert_eq!(counters.connections_active, Some(1.0));
    assert!(counters.process_cpu_seconds.is_some(), "no process CPU");
    assert!(
        counters.stage_busy_seconds.contains_key("send"),
        "{counters:?}"
    );
    assert!(counters.exports.iter().any(|e| e == "disk"), "{counters:?}");
    let errors = samples
        .iter()
        .filter(|s| s.name == "sluice_request_errors_total" && s.label("export") == Some("disk"))
        .map(|s| s.value)
        .sum::<f64>();
    assert_eq!(errors, 1.0, "the refused read");
    c.disconnect();
}
