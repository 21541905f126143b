use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use anyhow::Result;
use clap::Parser;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    model: ModelArgs,
}

fn run_args(args: &[&str]) -> Result<String> {
    let cli = Cli::try_parse_from(std::iter::once("model").chain(args.iter().copied()))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = Vec::new();
    run_to(cli.model, &mut out)?;
    Ok(String::from_utf8(out)?)
}

#[test]
fn mva_json_shape() {
    let out = run_args(&[
        "mva",
        "--demands",
        "0.605,2.1,1.35",
        "--delay-demands",
        "0.5",
        "--think",
        "15",
        "--customers",
        "3",
        "--json",
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["throughput"].as_f64().unwrap() > 0.0);
    assert!(v["response_time"].as_f64().unwrap() > 0.0);
    for k in ["queue_lengths", "utilizations", "residence_times"] {
        assert_eq!(v[k].as_array().unwrap().len(), 4, "{k}");
    }
    for b in ["asymptotic", "balanced_job"] {
        for q in ["throughput", "response_time"] {
            assert_eq!(v["bounds"][b][q].as_array().unwrap().len(), 2);
        }
    }
}

#[test]
fn mva_lazowska_table() {
    let out = run_args(&[
        "mva",
        "--demands",
        "0.605,2.1,1.35",
        "--think",
        "15",
        "--customers",
        "3",
    ])
    .unwrap();
    assert!(out.contains("0.1515165"), "{out}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let e = run_args(&["mva", "--demands", "1,-2", "--customers", "3"]).unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    assert!(format!("{e:#}").contains("-2"));
    let e = run_args(&["mva", "--demands", "1", "--customers", "0"]).unwrap_err();
    assert!(is_usage_error(&e) && format!("{e}").contains("customers"));
    let e = run_args(&["raid", "--plot", "x.gif"]).unwrap_err();
    assert!(is_usage_error(&e));
    let e = run_args(&["multiclass", "--class", "a:1:0"]).unwrap_err();
    assert!(is_usage_error(&e));
}

#[test]
fn raid_paper_sweeps_and_noncontig_run() {
    let t = run_args(&["raid", "--preset", "paper"]).unwrap();
    assert!(t.contains("D_Cm (2)") && t.contains("BJB R lower"), "{t}");
    // The storage stations are per member, and the table says so.
    let disk = t
        .lines()
        .find(|l| l.trim_start().starts_with("disk"))
        .unwrap();
    assert_eq!(disk.split_whitespace().nth(3), Some("3"), "{t}");
    assert!(t.contains("counted once per storage server"), "{t}");
    let j = run_args(&["raid", "--preset", "paper", "--json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["points"].as_array().unwrap().len(), 10);
    for s in [
        "bandwidth",
        "cache-hit",
        "cpu",
        "storage-cpu",
        "disk",
        "concurrency",
    ] {
        run_args(&["raid", "--sweep", s, "--customers", "1,5"]).unwrap();
    }
    let n = run_args(&["noncontig", "--sizes", "1024,65536"]).unwrap();
    assert!(n.contains("strided MB/s"), "{n}");
    let m = run_args(&["multiclass", "--class", "A:1:0:1,3", "--class", "B:1:0:2,4"]).unwrap();
    assert!(m.contains("0.1578947"), "{m}");
}

#[test]
fn calibrate_from_toml() {
    let dir = std::env::temp_dir().join(format!("sluice-model-cal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(
        &file,
        "interval_seconds = 10.0\ncompletions = 2000\n\
         [[stations]]\nname = \"device\"\nbusy_seconds = 6.5\n\
         [[stations]]\nname = \"pool\"\nbusy_seconds = 9.0\nservers = 4\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = run_args(&["calibrate", "--file", f, "--customers", "8", "--json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["throughput"], serde_json::json!(200.0));
    assert!((v["demands"][0]["demand"].as_f64().unwrap() - 0.00325).abs() < 1e-15);
    assert!(v["mva"]["throughput"].as_f64().unwrap() > 200.0);
    std::fs::write(&file, "completions = 0\n").unwrap();
    let e = run_args(&["calibrate", "--file", f]).unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/sluice-model/tests/data")
        .join(name)
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-model-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Requests and CPU between the two captured snapshots.
const FIXTURE_REQUESTS: f64 = 3734.0;
const FIXTURE_CPU: f64 = 0.15;

#[test]
fn calibrate_from_saved_snapshots() {
    let (b, a) = (
        fixture("metrics-before.prom"),
        fixture("metrics-after.prom"),
    );
    let (b, a) = (b.to_str().unwrap(), a.to_str().unwrap());
    let out = run_args(&["calibrate", "--before", b, "--after", a, "--json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["completions"], serde_json::json!(3734));
    let d = v["stations"][0]["demand"].as_f64().unwrap();
    assert!((d - FIXTURE_CPU / FIXTURE_REQUESTS).abs() < 1e-15, "{d}");
    assert_eq!(v["network"]["stations"][0]["name"], "server-cpu");
    assert_eq!(v["network"]["stations"][0]["kind"], "queueing");
    let t = run_args(&[
        "calibrate",
        "--before",
        b,
        "--after",
        a,
        "--layout",
        "stages",
        "--client-demand",
        "1e-6",
        "--customers",
        "4",
    ])
    .unwrap();
    for want in ["device", "send", "client", "as an mva command", "N = 4"] {
        assert!(t.contains(want), "{want}: {t}");
    }
    // Swapped snapshots, a missing source, a command without --metrics.
    let e = run_args(&["calibrate", "--before", a, "--after", b]).unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    let e = run_args(&["calibrate"]).unwrap_err();
    assert!(
        is_usage_error(&e) && format!("{e}").contains("--metrics"),
        "{e:#}"
    );
    let e = run_args(&["calibrate", "--before", b, "--after", a, "--", "true"]).unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    assert!(run_args(&["calibrate", "--before", b]).is_err());
}

/// Serves each body once, in order, to `GET /metrics` over HTTP/1.0;
/// the second and later ones chunked.
fn fake_metrics_server(bodies: Vec<String>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for (i, body) in bodies.into_iter().enumerate() {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                req.extend_from_slice(&buf[..n]);
            }
            requests.push(String::from_utf8_lossy(&req).into_owned());
            let response = if i == 0 {
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                let (x, y) = body.split_at(body.len() / 2);
                format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{x}\r\n{:x};ext=1\r\n{y}\r\n0\r\n\r\n",
                    x.len(),
                    y.len()
                )
            };
            s.write_all(response.as_bytes()).unwrap();
        }
        requests
    });
    (url, handle)
}

fn untimed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("# sluice-scrape"))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn calibrate_scrapes_a_metrics_endpoint() {
    let dir = temp_dir("scrape");
    let (sb, sa) = (dir.join("b.prom"), dir.join("a.prom"));
    let (url, server) = fake_metrics_server(vec![
        untimed(&fixture("metrics-before.prom")),
        untimed(&fixture("metrics-after.prom")),
    ]);
    let started = std::time::Instant::now();
    let out = run_args(&[
        "calibrate",
        "--metrics",
        &url,
        "--interval",
        "100ms",
        // The captured CPU is far more than 100 ms can hold on one
        // server; the test is about the scrape.
        "--cpu-servers",
        "64",
        "--save-before",
        sb.to_str().unwrap(),
        "--save-after",
        sa.to_str().unwrap(),
        "--json",
    ])
    .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    let requests = server.join().unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r.starts_with("GET /metrics HTTP/1.")),
        "{requests:?}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["completions"], serde_json::json!(3734));
    let t = v["interval_seconds"].as_f64().unwrap();
    assert!((0.1..10.0).contains(&t), "{t}");
    let d = v["stations"][0]["demand"].as_f64().unwrap();
    assert!((d - FIXTURE_CPU / FIXTURE_REQUESTS).abs() < 1e-15, "{d}");
    // The saved snapshots carry their scrape time and calibrate alone.
    let saved = std::fs::read_to_string(&sb).unwrap();
    assert!(
        saved.starts_with("# sluice-scrape unix_time="),
        "{}",
        &saved[..60]
    );
    let again = run_args(&[
        "calibrate",
        "--before",
        sb.to_str().unwrap(),
        "--after",
        sa.to_str().unwrap(),
        "--cpu-servers",
        "64",
        "--json",
    ])
    .unwrap();
    let w: serde_json::Value = serde_json::from_str(&again).unwrap();
    assert_eq!(w["interval_seconds"], v["interval_seconds"]);

    // Around a command instead of a fixed interval.
    let (url, server) = fake_metrics_server(vec![
        untimed(&fixture("metrics-before.prom")),
        untimed(&fixture("metrics-after.prom")),
    ]);
    let out = run_args(&[
        "calibrate",
        "--metrics",
        &url,
        "--cpu-servers",
        "4096",
        "--json",
        "--",
        "sleep",
        "0.05",
    ])
    .unwrap();
    server.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["interval_seconds"].as_f64().unwrap() >= 0.05);

    // Usage: neither or both of --interval and a command; no server.
    let e = run_args(&["calibrate", "--metrics", &url]).unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    let e = run_args(&[
        "calibrate",
        "--metrics",
        &url,
        "--interval",
        "1s",
        "--",
        "true",
    ])
    .unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    let e = run_args(&[
        "calibrate",
        "--metrics",
        "https://x/metrics",
        "--interval",
        "1s",
    ])
    .unwrap_err();
    assert!(
        is_usage_error(&e) && format!("{e}").contains("http://"),
        "{e:#}"
    );
    let e = run_args(&["calibrate", "--metrics", &url, "--interval", "1ms"]).unwrap_err();
    assert!(
        !is_usage_error(&e) && format!("{e:#}").contains("cannot connect"),
        "{e:#}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Serves `raw` as the whole answer to one request, then closes.
fn answer_once(raw: &'static [u8]) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/metrics", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(raw);
    });
    url
}

#[test]
fn http_responses_and_durations() {
    let scrape = scrape::scrape;
    let ok = answer_once(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nx 1\n");
    assert_eq!(scrape(&ok).unwrap(), "x 1\n");
    let chunked = answer_once(
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n2\r\nx \r\n2\r\n1\n\r\n0\r\n\r\n",
    );
    assert_eq!(scrape(&chunked).unwrap(), "x 1\n");
    let e = scrape(&answer_once(b"HTTP/1.0 404 Not Found\r\n\r\nnot found")).unwrap_err();
    assert!(format!("{e}").contains("404"), "{e}");
    assert!(scrape(&answer_once(b"SSH-2.0-OpenSSH\r\n\r\n")).is_err());
    assert!(scrape(&answer_once(b"HTTP/1.0 200 OK\r\n")).is_err());
    assert!(scrape(&answer_once(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"
    ))
    .is_err());
    assert_eq!(parse_duration("5s"), Ok(5.0));
    assert_eq!(parse_duration("250ms"), Ok(0.25));
    assert_eq!(parse_duration("2m"), Ok(120.0));
    assert_eq!(parse_duration("1.5"), Ok(1.5));
    assert!(parse_duration("0s").is_err() && parse_duration("soon").is_err());
}

/// A bench report with one run per (queue depth, IOPS, mean µs); 1000
/// operations and 1 ms of client CPU each.
fn bench_file(dir: &Path, name: &str, runs: &[(u32, f64, f64)]) -> PathBuf {
    let results: Vec<String> = runs
        .iter()
        .map(|(qd, iops, us)| {
            format!(
                r#"{{"case": "randread-4k-qd{qd}", "target": "uri", "driver": "own",
                    "workload": {{"queue_depth": {qd}, "workers": 1, "block_size": 4096}},
                    "ops": 1000, "iops": {iops}, "latency": {{"mean_us": {us}}},
                    "client_cpu_s": 0.001, "server_cpu_s": null}}"#
            )
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            r#"{{"target": "nbd://x/disk", "results": [{}]}}"#,
            results.join(",")
        ),
    )
    .unwrap();
    path
}

#[test]
fn validate_reports_errors_and_plots() {
    let dir = temp_dir("validate");
    // Server 2 µs + client 1 µs (from the files' client CPU): exact MVA
    // gives X(1) = 333 333/s, R(1) = 3 µs; X(2) = 3/7 per µs, R(2) =
    // 14/3 µs. The "measurements" are 25 % off on R at N = 1 only.
    let f1 = bench_file(&dir, "qd1.json", &[(1, 250_000.0, 4.0)]);
    let f2 = bench_file(&dir, "qd2.json", &[(2, 3e6 / 7.0, 14.0 / 3.0)]);
    let svg = dir.join("v.svg");
    let (f1, f2) = (f1.to_str().unwrap(), f2.to_str().unwrap());
    let out = run_args(&[
        "validate",
        "--bench",
        f1,
        f2,
        "--demands",
        "2e-6",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let x = &v["throughput_error"];
    assert!(
        (x["mean_abs"].as_f64().unwrap() - 1.0 / 6.0).abs() < 1e-9,
        "{x}"
    );
    assert_eq!(x["max_at"], serde_json::json!(1));
    let r = &v["response_time_error"];
    assert!((r["max_abs"].as_f64().unwrap() - 0.25).abs() < 1e-9, "{r}");
    assert_eq!(v["networks"][0]["stations"][1]["name"], "client");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    let t = run_args(&[
        "validate",
        "--bench",
        f1,
        "--bench",
        f2,
        "--demands",
        "2e-6",
    ])
    .unwrap();
    assert!(
        t.contains("throughput error: mean |e| 16.7 %, max |e| 33.3 % at N = 1"),
        "{t}"
    );
    assert!(t.contains("response time error: mean |e| 12.5 %"), "{t}");

    // The model from a calibration file (and no client station).
    let (b, a) = (
        fixture("metrics-before.prom"),
        fixture("metrics-after.prom"),
    );
    let cal = run_args(&[
        "calibrate",
        "--before",
        b.to_str().unwrap(),
        "--after",
        a.to_str().unwrap(),
        "--json",
    ])
    .unwrap();
    let calf = dir.join("cal.json");
    std::fs::write(&calf, cal).unwrap();
    let calf = calf.to_str().unwrap();
    let out = run_args(&[
        "validate",
        "--bench",
        f1,
        f2,
        "--calibration",
        calf,
        "--client",
        "none",
        "--json",
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let r1 = v["points"][0]["predicted_response_time"].as_f64().unwrap();
    assert!((r1 - FIXTURE_CPU / FIXTURE_REQUESTS).abs() < 1e-15);
    // Client and server on one core: one station with both demands.
    let out = run_args(&[
        "validate",
        "--bench",
        f1,
        "--calibration",
        calf,
        "--client",
        "shared",
        "--json",
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let st = &v["networks"][0]["stations"];
    assert_eq!(st.as_array().unwrap().len(), 1);
    assert_eq!(st[0]["name"], "server-cpu+client");
    let d = st[0]["demand"].as_f64().unwrap();
    assert!(
        (d - (FIXTURE_CPU / FIXTURE_REQUESTS + 1e-6)).abs() < 1e-15,
        "{d}"
    );
    let e = run_args(&[
        "validate",
        "--bench",
        f1,
        "--demands",
        "1e-6",
        "--client",
        "shared",
    ])
    .unwrap_err();
    assert!(is_usage_error(&e), "{e:#}");
    // Several calibrations must each say their N.
    let e = run_args(&["validate", "--bench", f1, "--calibration", calf, calf]).unwrap_err();
    assert!(
        is_usage_error(&e) && format!("{e}").contains("--customers"),
        "{e:#}"
    );

    // Usage errors.
    for args in [
        vec!["validate", "--bench", f1],
        vec![
            "validate",
            "--bench",
            f1,
            "--demands",
            "1e-6",
            "--client",
            "none",
            "--client-demand",
            "1e-6",
        ],
        vec![
            "validate",
            "--bench",
            f1,
            "--demands",
            "1e-6",
            "--target",
            "nbdkit",
        ],
        vec!["validate", "--bench", calf, "--demands", "1e-6"],
        vec!["validate", "--bench", f1, "--calibration", f1],
    ] {
        let e = run_args(&args).unwrap_err();
        assert!(is_usage_error(&e), "{args:?}: {e:#}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plots_are_written() {
    let dir = std::env::temp_dir().join(format!("sluice-model-cmd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("r.svg");
    let png = dir.join("n.png");
    run_args(&["raid", "--plot", svg.to_str().unwrap()]).unwrap();
    run_args(&["noncontig", "--plot", png.to_str().unwrap()]).unwrap();
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mva_plot_draws_throughput_and_response_time_with_their_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("mva.svg");
    run_args(&[
        "mva",
        "--demands",
        "0.01,0.004",
        "--customers",
        "8",
        "--plot",
        svg.to_str().unwrap(),
    ])
    .unwrap();
    let svg = std::fs::read_to_string(&svg).unwrap();
    for text in [
        "throughput vs customers",
        "response time vs customers",
        "asymptotic bound",
        "balanced job bound, upper",
    ] {
        assert!(svg.contains(text), "the chart lacks {text:?}");
    }
}
