//! Validation against a bench sweep: the JSON shapes `sluice bench`
//! writes, the measured points, and the error figures, on a synthetic
//! sweep whose "measurements" are the exact MVA values of a known network
//! bent by known factors.

use sluice_model::validation::{client_cpu_per_request, relative_error, BenchRun};
use sluice_model::{
    measured_points, validate, validate_each, Aggregate, BenchDocument, ClosedNetwork, ModelError,
    Station,
};

/// One run as `sluice bench --json` writes it (abridged machine block;
/// fields the model does not read are kept to show they are ignored).
fn run_json(qd: u32, iops: f64, mean_us: f64, ops: u64, client_cpu_s: f64) -> String {
    format!(
        r#"{{
      "target": "uri", "driver": "own", "case": "randread-4k-qd{qd}",
      "workload": {{"name": "", "pattern": "rand", "rw": "read", "read_pct": 70,
        "block_size": 4096, "queue_depth": {qd}, "workers": 1, "shared_connection": false,
        "limit": {{"time_ms": 2000}}, "region_offset": 0, "region_len": 0, "verify": false,
        "seed": 7, "handshake": "extended"}},
      "ops": {ops}, "reads": {ops}, "writes": 0, "bytes": {bytes}, "elapsed_s": 2.0,
      "iops": {iops}, "mib_s": 1.0,
      "latency": {{"count": {ops}, "mean_us": {mean_us}, "p50_us": 1, "p90_us": 1, "p99_us": 1,
        "p999_us": 1, "max_us": 1}},
      "read_latency": {{"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0,
        "p999_us": 0, "max_us": 0}},
      "write_latency": {{"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0,
        "p999_us": 0, "max_us": 0}},
      "client_cpu_s": {client_cpu_s}, "server_cpu_s": null, "verified_reads": 0
    }}"#,
        bytes = ops * 4096
    )
}

fn single_report(runs: &[String]) -> String {
    format!(
        r#"{{"machine": {{"nproc": 2, "cpu_model": "x", "memory_gib": 1.0, "kernel": "k", "loadavg": "0 0 0"}},
            "target": "nbd://127.0.0.1:10809/disk", "results": [{}]}}"#,
        runs.join(",")
    )
}

/// The network of the synthetic sweep: a server CPU of 2 µs and a client
/// of 1 µs, both queueing, no think time.
fn net() -> ClosedNetwork {
    ClosedNetwork::new(
        vec![
            Station::queueing("server-cpu", 2e-6),
            Station::queueing("client", 1e-6),
        ],
        0.0,
    )
    .expect("a valid network")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs()
}

#[test]
fn error_figures_on_a_synthetic_sweep() {
    // Exact MVA by hand for D = (2, 1) µs, Z = 0:
    //   N = 1: R = 3 µs, X = 1/3 per µs.
    //   N = 2: Q(1) = (2/3, 1/3), R = 2 (5/3) + 1 (4/3) = 14/3 µs, X = 3/7 per µs.
    // "Measured": N = 1 at X = 250 000/s and R = 4 µs (the model is +33.3 %
    // on X and -25 % on R); N = 2 exactly the model. Client CPU 1 µs per
    // request (1000 ops, 1 ms).
    let doc = single_report(&[
        run_json(1, 250_000.0, 4.0, 1000, 0.001),
        run_json(2, 3e6 / 7.0, 14.0 / 3.0, 1000, 0.001),
    ]);
    let runs = serde_json::from_str::<BenchDocument>(&doc)
        .unwrap()
        .into_runs();
    assert_eq!(runs.len(), 2);
    assert!(close(client_cpu_per_request(&runs).unwrap(), 1e-6));
    let points = measured_points(&runs, Aggregate::Mean).unwrap();
    let v = validate(&net(), &points).unwrap();
    assert_eq!(v.points.len(), 2);
    let p1 = &v.points[0];
    assert!(close(p1.predicted_response_time, 3e-6));
    assert!(close(p1.predicted_throughput, 1e6 / 3.0));
    assert!(close(p1.throughput_error, 1.0 / 3.0));
    assert!(close(p1.response_time_error, -0.25));
    let p2 = &v.points[1];
    assert!(close(p2.predicted_response_time, 14e-6 / 3.0));
    assert!(p2.throughput_error.abs() < 1e-9 && p2.response_time_error.abs() < 1e-9);
    // Summaries: mean of |e| over the two points, max at N = 1.
    assert!(close(v.throughput_error.mean_abs, 1.0 / 6.0));
    assert!(close(v.throughput_error.max_abs, 1.0 / 3.0));
    assert_eq!(v.throughput_error.max_at, 1);
    assert!(close(v.throughput_error.mean_signed, 1.0 / 6.0));
    assert!(close(v.response_time_error.mean_abs, 0.125));
    assert!(close(v.response_time_error.mean_signed, -0.125));
    assert_eq!(v.response_time_error.max_at, 1);
    // Bounds come with every point and hold the model's own values.
    for p in &v.points {
        let b = p.bounds.unwrap();
        let [lo, hi] = b.balanced_job.response_time;
        assert!(lo <= p.predicted_response_time * (1.0 + 1e-12));
        assert!(p.predicted_response_time <= hi * (1.0 + 1e-12));
    }
    assert_eq!(relative_error(110.0, 100.0), 0.1);
}

#[test]
fn every_bench_shape_gives_the_same_runs() {
    let a = run_json(1, 100.0, 10.0, 500, 0.002);
    let b = run_json(4, 300.0, 13.0, 1500, 0.003);
    let single: BenchDocument =
        serde_json::from_str(&single_report(&[a.clone(), b.clone()])).unwrap();
    let matrix: BenchDocument = serde_json::from_str(&format!(
        r#"{{"preset": "compare", "summaries": [], "failures": [], "wall_s": 1.0,
            "runs": [{{"round": 1, "result": {a}}}, {{"round": 1, "result": {b}}}]}}"#
    ))
    .unwrap();
    let list: BenchDocument = serde_json::from_str(&format!(
        "[{}, {}]",
        single_report(std::slice::from_ref(&a)),
        single_report(std::slice::from_ref(&b))
    ))
    .unwrap();
    let one: BenchDocument = serde_json::from_str(&a).unwrap();
    let runs = single.into_runs();
    assert_eq!(runs.len(), 2);
    assert_eq!(matrix.into_runs(), runs);
    assert_eq!(list.into_runs(), runs);
    assert_eq!(one.into_runs(), runs[..1]);
    assert_eq!(runs[1].customers(), Some(4));
    assert_eq!(runs[1].target, "uri");
    // Client CPU over all runs: 5 ms over 2000 operations.
    assert!(close(client_cpu_per_request(&runs).unwrap(), 2.5e-6));
    // Workers multiply the queue depth.
    let w = a.replace(r#""workers": 1"#, r#""workers": 3"#);
    let r: BenchRun = serde_json::from_str(&w).unwrap();
    assert_eq!(r.customers(), Some(3));
    // Not a bench document.
    assert!(serde_json::from_str::<BenchDocument>(r#"{"hello": 1}"#).is_err());
}

#[test]
fn one_network_per_point() {
    // Each N with its own demands; N = 1 alone is R = sum of demands.
    let doc = single_report(&[
        run_json(1, 1e6 / 6.0, 6.0, 1000, 0.001),
        run_json(2, 1e6 / 3.0, 6.0, 1000, 0.001),
    ]);
    let runs = serde_json::from_str::<BenchDocument>(&doc)
        .unwrap()
        .into_runs();
    let points = measured_points(&runs, Aggregate::Median).unwrap();
    let at1 = ClosedNetwork::from_demands(&[4e-6, 2e-6], &[], 0.0).unwrap();
    let at2 = ClosedNetwork::from_demands(&[1e-6, 1e-6], &[], 0.0).unwrap();
    let v = validate_each(&[at1, at2.clone()], &points).unwrap();
    assert_eq!(v.networks.len(), 2);
    assert!(v.points[0].throughput_error.abs() < 1e-9);
    // Two balanced 1 µs queues with two customers: R = 3 µs, X = 2/3 per µs.
    assert!(close(v.points[1].predicted_response_time, 3e-6));
    assert!(close(
        v.points[1].throughput_error,
        (2.0 / 3.0 - 1.0 / 3.0) / (1.0 / 3.0)
    ));
    assert!(close(v.throughput_error.max_abs, 1.0));
    assert!(matches!(
        validate_each(&[at2], &points),
        Err(ModelError::Validation(_))
    ));
}

#[test]
fn runs_that_cannot_be_compared_are_refused() {
    assert!(matches!(
        measured_points(&[], Aggregate::Mean),
        Err(ModelError::Validation(_))
    ));
    // A fio-driven run has no workload, so no queue depth.
    let fio = r#"{"target": "sluice", "driver": "fio", "case": "randread", "ops": 10,
                  "iops": 5.0, "latency": {"mean_us": 3.0}}"#;
    let r: BenchRun = serde_json::from_str(fio).unwrap();
    let e = measured_points(&[r], Aggregate::Mean).unwrap_err();
    assert!(e.to_string().contains("no workload"), "{e}");
    // A run that did nothing.
    let idle: BenchRun = serde_json::from_str(&run_json(2, 0.0, 0.0, 0, 0.0)).unwrap();
    let e = measured_points(&[idle], Aggregate::Mean).unwrap_err();
    assert!(e.to_string().contains("N = 2"), "{e}");
    assert!(matches!(
        validate(&net(), &[]),
        Err(ModelError::Validation(_))
    ));
}

#[cfg(feature = "plot")]
#[test]
fn validation_chart_renders() {
    use sluice_model::plot::{render_svg_panels, validation_charts, VALIDATION_SIZE};
    let doc = single_report(&[
        run_json(1, 250_000.0, 4.0, 1000, 0.001),
        run_json(2, 300_000.0, 6.0, 1000, 0.001),
        run_json(4, 350_000.0, 11.0, 1000, 0.001),
    ]);
    let runs = serde_json::from_str::<BenchDocument>(&doc)
        .unwrap()
        .into_runs();
    let points = measured_points(&runs, Aggregate::Mean).unwrap();
    let v = validate(&net(), &points).unwrap();
    let charts = validation_charts(&v, "synthetic");
    assert!(charts[0].y_label.contains("µs"), "{}", charts[0].y_label);
    assert!(
        charts[1].y_label.contains("k requests/s"),
        "{}",
        charts[1].y_label
    );
    assert_eq!(charts[0].series.len(), 5);
    let svg = render_svg_panels(&charts, VALIDATION_SIZE).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("measured") && svg.contains("throughput"));
    // With a load-dependent station there are no bounds to draw.
    let ld = ClosedNetwork::new(vec![Station::multi_server("cpu", 2e-6, 2)], 0.0).unwrap();
    let v = validate(&ld, &points).unwrap();
    assert!(v.points.iter().all(|p| p.bounds.is_none()));
    assert_eq!(validation_charts(&v, "ld")[0].series.len(), 2);
}
