//! The S3 endpoint's metrics per operation, rendered in the Prometheus
//! text format for the server's metrics endpoint
//! ([`S3Metrics::render`]; names in docs/METRICS.md).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BOUNDS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5, 10.0];

/// One operation's counts.
#[derive(Debug, Default, Clone)]
struct Op {
    requests: u64,
    errors: u64,
    bytes_in: u64,
    bytes_out: u64,
    /// Requests at or under each bound of [`BOUNDS`] (not cumulative).
    buckets: [u64; BOUNDS.len()],
    seconds: f64,
}

/// A counter series: its name, help text and value.
type Counter = (&'static str, &'static str, fn(&Op) -> u64);

/// One request as the access log saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) op: &'a str,
    pub(crate) status: u16,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    pub(crate) duration: Duration,
}

/// Requests, errors, bytes and latency per S3 operation. S3 requests
/// cost far more than a lock, so one mutex guards them all.
#[derive(Debug, Default)]
pub struct S3Metrics {
    ops: Mutex<BTreeMap<String, Op>>,
}

impl S3Metrics {
    /// Counts one request; a status of 400 or more is an error (304 Not
    /// Modified and 206 Partial Content are not).
    pub(crate) fn record(&self, r: Request<'_>) {
        let Ok(mut ops) = self.ops.lock() else {
            return;
        };
        let op = ops.entry(r.op.to_owned()).or_default();
        op.requests += 1;
        if r.status >= 400 {
            op.errors += 1;
        }
        op.bytes_in += r.bytes_in;
        op.bytes_out += r.bytes_out;
        let secs = r.duration.as_secs_f64();
        op.seconds += secs;
        if let Some(i) = BOUNDS.iter().position(|b| secs <= *b) {
            op.buckets[i] += 1;
        }
    }

    /// Every series, in the Prometheus text format, appended to `out`.
    pub fn render(&self, out: &mut String) {
        let ops = match self.ops.lock() {
            Ok(ops) => ops.clone(),
            Err(_) => return,
        };
        let counters: [Counter; 4] = [
            (
                "sluice_s3_requests_total",
                "S3 requests answered, by operation.",
                |o| o.requests,
            ),
            (
                "sluice_s3_errors_total",
                "S3 requests answered with a status of 400 or more.",
                |o| o.errors,
            ),
            (
                "sluice_s3_received_bytes_total",
                "Request body bytes (as Content-Length says).",
                |o| o.bytes_in,
            ),
            (
                "sluice_s3_sent_bytes_total",
                "Response body bytes (as Content-Length says).",
                |o| o.bytes_out,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (op, o) in &ops {
                let _ = writeln!(out, "{name}{{operation=\"{op}\"}} {}", value(o));
            }
        }
        let name = "sluice_s3_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from a request's headers to its response's headers.\n# TYPE {name} histogram"
        );
        for (op, o) in &ops {
            let mut below = 0;
            for (bound, n) in BOUNDS.iter().zip(o.buckets) {
                below += n;
                let _ = writeln!(
                    out,
                    "{name}_bucket{{operation=\"{op}\",le=\"{bound}\"}} {below}"
                );
            }
            let _ = writeln!(
                out,
                "{name}_bucket{{operation=\"{op}\",le=\"+Inf\"}} {}",
                o.requests
            );
            let _ = writeln!(out, "{name}_sum{{operation=\"{op}\"}} {}", o.seconds);
            let _ = writeln!(out, "{name}_count{{operation=\"{op}\"}} {}", o.requests);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_errors_bytes_and_buckets_per_operation() {
        let m = S3Metrics::default();
        let req = |op, status, ms| Request {
            op,
            status,
            bytes_in: 10,
            bytes_out: 5,
            duration: Duration::from_millis(ms),
        };
        m.record(req("PutObject", 200, 3));
        m.record(req("PutObject", 403, 30));
        m.record(req("GetObject", 304, 20_000));
        let mut out = String::new();
        m.render(&mut out);
        for line in [
            "sluice_s3_requests_total{operation=\"PutObject\"} 2",
            "sluice_s3_errors_total{operation=\"PutObject\"} 1",
            "sluice_s3_errors_total{operation=\"GetObject\"} 0",
            "sluice_s3_received_bytes_total{operation=\"PutObject\"} 20",
            "sluice_s3_request_duration_seconds_bucket{operation=\"PutObject\",le=\"0.005\"} 1",
            "sluice_s3_request_duration_seconds_bucket{operation=\"PutObject\",le=\"0.05\"} 2",
            "sluice_s3_request_duration_seconds_bucket{operation=\"GetObject\",le=\"10\"} 0",
            "sluice_s3_request_duration_seconds_bucket{operation=\"GetObject\",le=\"+Inf\"} 1",
        ] {
            assert!(out.contains(line), "missing {line}:\n{out}");
        }
    }
}
