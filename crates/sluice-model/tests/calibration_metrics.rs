//! Prometheus parsing and demand derivation on metric text captured from a
//! real `sluice serve --metrics` (tests/data: two scrapes by `sluice model
//! calibrate --save-before/--save-after` around a 4 KiB random-read run at
//! queue depth 1 against a `mem:` export; the server had already served a
//! prefill and a warm-up, so the "before" counters are not zero).

use sluice_model::prometheus::{self, ServerCounters};
use sluice_model::{
    exact_mva, server_calibration, ClientStation, ModelError, ServerLayout, ServerModelOptions,
    StationKind,
};

const BEFORE: &str = include_str!("data/metrics-before.prom");
const AFTER: &str = include_str!("data/metrics-after.prom");

// Values in the two files, read off by hand.
const T_BEFORE: f64 = 1_795_336_506.665482;
const T_AFTER: f64 = 1_795_336_506.976705;
const READS_BEFORE: u64 = 57_408;
const READS_AFTER: u64 = 61_142;
const WRITES: u64 = 1024; // prefill, before and after
const CPU_BEFORE: f64 = 1.16;
const CPU_AFTER: f64 = 1.31;
const EXEC_BEFORE: f64 = 0.626571724;
const EXEC_AFTER: f64 = 0.634685192;
const SEND_BEFORE: f64 = 0.273117829;
const SEND_AFTER: f64 = 0.339731567;
const READ_SUM_BEFORE: f64 = 0.084211619;
const READ_SUM_AFTER: f64 = 0.092325087;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-300) || (a - b).abs() < 1e-15
}

#[test]
fn real_text_parses_completely() {
    let e = prometheus::parse(BEFORE).unwrap();
    assert_eq!(e.scraped_at, Some(T_BEFORE));
    // Every line that is not a comment is a sample.
    let lines = BEFORE
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    assert_eq!(e.samples.len(), lines);
    assert_eq!(lines, 249);
    // Eight commands, each a histogram of 24 buckets, +Inf, sum and count.
    let hist: Vec<_> = e
        .samples
        .iter()
        .filter(|s| s.name == "sluice_request_duration_seconds_bucket")
        .collect();
    assert_eq!(hist.len(), 8 * 25);
    let read: Vec<f64> = hist
        .iter()
        .filter(|s| s.label("command") == Some("read"))
        .map(|s| s.value)
        .collect();
    assert!(read.windows(2).all(|w| w[0] <= w[1]), "cumulative buckets");
    assert_eq!(*read.last().unwrap(), READS_BEFORE as f64);
    let inf = hist
        .iter()
        .find(|s| s.label("le") == Some("+Inf") && s.label("command") == Some("read"))
        .unwrap();
    assert_eq!(inf.label("export"), Some("disk"));
    assert_eq!(inf.labels.len(), 3);
}

#[test]
fn real_text_gives_the_server_counters() {
    let b = ServerCounters::from_text(BEFORE, None).unwrap();
    assert_eq!(b.scraped_at, Some(T_BEFORE));
    assert_eq!(b.process_cpu_seconds, Some(CPU_BEFORE));
    assert_eq!(b.stage("execute_inline"), EXEC_BEFORE);
    assert_eq!(b.stage("execute_pool"), 0.0);
    assert_eq!(b.stage("send"), SEND_BEFORE);
    assert_eq!(b.requests["read"], READS_BEFORE);
    assert_eq!(b.requests["write"], WRITES);
    assert_eq!(b.requests["flush"], 0);
    assert_eq!(b.total_requests(), READS_BEFORE + WRITES);
    assert_eq!(b.bytes["read"], 235_143_168);
    assert_eq!(b.bytes["write"], 1 << 30);
    assert_eq!(b.request_seconds_count, READS_BEFORE + WRITES);
    assert!(close(b.request_seconds_sum, READ_SUM_BEFORE + 0.542360105));
    assert_eq!(b.connections_active, Some(0.0));
    assert_eq!(b.exports, ["disk"]);
    // Selecting the one export changes nothing; an unknown one is refused
    // with the list of those present.
    assert_eq!(ServerCounters::from_text(BEFORE, Some("disk")).unwrap(), b);
    let e = ServerCounters::from_text(BEFORE, Some("nope")).unwrap_err();
    assert!(
        e.to_string().contains("'nope'") && e.to_string().contains("disk"),
        "{e}"
    );
}

#[test]
fn demands_from_two_real_snapshots() {
    let b = ServerCounters::from_text(BEFORE, None).unwrap();
    let a = ServerCounters::from_text(AFTER, None).unwrap();
    let cal = server_calibration(&b, &a, &ServerModelOptions::default()).unwrap();
    let c = (READS_AFTER - READS_BEFORE) as f64;
    let t = T_AFTER - T_BEFORE;
    assert_eq!(cal.completions, READS_AFTER - READS_BEFORE);
    assert_eq!(
        cal.requests.len(),
        1,
        "only reads moved: {:?}",
        cal.requests
    );
    assert_eq!(cal.requests["read"], 3734);
    assert!(close(cal.interval_seconds.unwrap(), t));
    assert!(close(cal.throughput.unwrap(), c / t));
    let p = cal.per_request;
    assert!(close(p.cpu.unwrap(), (CPU_AFTER - CPU_BEFORE) / c));
    assert!(close(p.execute_inline, (EXEC_AFTER - EXEC_BEFORE) / c));
    assert_eq!(p.execute_pool, 0.0);
    assert!(close(p.send, (SEND_AFTER - SEND_BEFORE) / c));
    assert!(close(
        p.server_time.unwrap(),
        (READ_SUM_AFTER - READ_SUM_BEFORE) / c
    ));
    assert_eq!(p.bytes, 4096.0);

    // Layout cpu: one queueing station, D = U/X = B/C.
    assert_eq!(cal.layout, ServerLayout::Cpu);
    assert_eq!(cal.stations.len(), 1);
    let s = &cal.stations[0];
    assert_eq!(s.name, "server-cpu");
    assert!(close(s.demand, (CPU_AFTER - CPU_BEFORE) / c));
    assert!(close(s.utilization.unwrap(), (CPU_AFTER - CPU_BEFORE) / t));
    // U / X is the same demand.
    assert!(close(
        s.utilization.unwrap() / cal.throughput.unwrap(),
        s.demand
    ));
    // 0.15 s of CPU is 15 clock ticks: the result says it is coarse.
    assert!(
        cal.notes.iter().any(|n| n.contains("ticks")),
        "{:?}",
        cal.notes
    );
    // The network is ready for MVA: alone in it, a request takes D.
    let one = exact_mva(&cal.network, 1).unwrap();
    assert!(close(one.response_time, s.demand));
}

#[test]
fn stages_layout_client_station_and_servers() {
    let b = ServerCounters::from_text(BEFORE, None).unwrap();
    let a = ServerCounters::from_text(AFTER, None).unwrap();
    let c = (READS_AFTER - READS_BEFORE) as f64;
    let opts = ServerModelOptions {
        layout: ServerLayout::Stages,
        client: Some(ClientStation {
            demand: 5e-6,
            delay: false,
        }),
        ..ServerModelOptions::default()
    };
    let cal = server_calibration(&b, &a, &opts).unwrap();
    let names: Vec<&str> = cal.stations.iter().map(|s| s.name.as_str()).collect();
    // No pool work here, so device is the inline stage alone.
    assert_eq!(names, ["server-cpu", "device", "send", "client"]);
    let exec = EXEC_AFTER - EXEC_BEFORE;
    let send = SEND_AFTER - SEND_BEFORE;
    let rest = (CPU_AFTER - CPU_BEFORE) - exec - send;
    assert!(close(cal.stations[0].demand, rest / c));
    assert!(close(cal.stations[1].demand, exec / c));
    assert!(close(cal.stations[2].demand, send / c));
    assert_eq!(cal.stations[3].demand, 5e-6);
    assert_eq!(cal.stations[3].busy_seconds, None);
    assert_eq!(cal.network.stations().len(), 4);

    // More CPU servers make a load-dependent station; a delay client a
    // delay station.
    let opts = ServerModelOptions {
        cpu_servers: 2,
        client: Some(ClientStation {
            demand: 5e-6,
            delay: true,
        }),
        ..ServerModelOptions::default()
    };
    let cal = server_calibration(&b, &a, &opts).unwrap();
    let st = cal.network.stations();
    assert!(matches!(&st[0].kind, StationKind::LoadDependent { rates } if rates == &[1.0, 2.0]));
    assert!(st[1].is_delay());
    assert!(close(
        cal.stations[0].utilization.unwrap(),
        (CPU_AFTER - CPU_BEFORE) / (2.0 * (T_AFTER - T_BEFORE))
    ));
}

#[test]
fn bad_snapshot_pairs_are_refused() {
    let b = ServerCounters::from_text(BEFORE, None).unwrap();
    let a = ServerCounters::from_text(AFTER, None).unwrap();
    let d = ServerModelOptions::default();
    let err = |r: Result<_, ModelError>| match r {
        Err(ModelError::Calibration(m)) => m,
        other => panic!("expected a calibration error, got {other:?}"),
    };
    // Swapped: counters go down.
    let m = err(server_calibration(&a, &b, &d));
    assert!(m.contains("went down") || m.contains("interval"), "{m}");
    let m = err(server_calibration(
        &a,
        &b,
        &ServerModelOptions {
            interval_seconds: Some(1.0),
            ..d.clone()
        },
    ));
    assert!(m.contains("went down"), "{m}");
    // The same snapshot twice: nothing completed.
    let m = err(server_calibration(
        &b,
        &b,
        &ServerModelOptions {
            interval_seconds: Some(1.0),
            ..d.clone()
        },
    ));
    assert!(m.contains("no requests"), "{m}");
    // An interval far too short for the CPU used: utilization above 1.
    let m = err(server_calibration(
        &b,
        &a,
        &ServerModelOptions {
            interval_seconds: Some(0.01),
            ..d.clone()
        },
    ));
    assert!(m.contains("utilization") && m.contains("servers"), "{m}");
    // Without process CPU the cpu layout cannot work; stages still can.
    let strip = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("process_cpu_seconds_total"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let b2 = ServerCounters::from_text(&strip(BEFORE), None).unwrap();
    let a2 = ServerCounters::from_text(&strip(AFTER), None).unwrap();
    assert_eq!(b2.process_cpu_seconds, None);
    let m = err(server_calibration(&b2, &a2, &d));
    assert!(m.contains("process_cpu_seconds_total"), "{m}");
    let st = server_calibration(
        &b2,
        &a2,
        &ServerModelOptions {
            layout: ServerLayout::Stages,
            ..d.clone()
        },
    )
    .unwrap();
    assert_eq!(st.stations.len(), 2);
    // Without scrape times: demands, but no utilization or throughput.
    let untimed = |t: &str| {
        t.lines()
            .filter(|l| !l.starts_with("# sluice-scrape"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let b3 = ServerCounters::from_text(&untimed(BEFORE), None).unwrap();
    let a3 = ServerCounters::from_text(&untimed(AFTER), None).unwrap();
    let u = server_calibration(&b3, &a3, &d).unwrap();
    assert_eq!(u.interval_seconds, None);
    assert_eq!(u.throughput, None);
    assert_eq!(u.stations[0].utilization, None);
    assert!(close(
        u.stations[0].demand,
        (CPU_AFTER - CPU_BEFORE) / (READS_AFTER - READS_BEFORE) as f64
    ));
    // Text that is not sluice's.
    let e = ServerCounters::from_text("up 1\n", None).unwrap_err();
    assert!(e.to_string().contains("sluice_requests_total"), "{e}");
    // Text that is not Prometheus at all names its line.
    let e = ServerCounters::from_text("sluice_requests_total{export=\"d\" 1\n", None).unwrap_err();
    assert!(matches!(e, ModelError::Metrics { line: 1, .. }), "{e}");
}
