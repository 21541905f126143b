//! The Prometheus text exposition format (version 0.0.4), as served by
//! `sluice serve --metrics ADDR` on `/metrics`, and the counters of a
//! sluice server read out of it.
//!
//! [`parse`] turns text into [`Sample`]s; [`ServerCounters::from_text`]
//! picks what the model needs (process CPU, busy time per pipeline stage,
//! requests and bytes per command, the request-duration sum and count).
//! Two snapshots give the deltas that [`crate::calibration`] turns into
//! service demands. No I/O here: the caller scrapes or reads files.
//!
//! A snapshot saved by `sluice model calibrate --save-before/--save-after`
//! starts with the comment `# sluice-scrape unix_time=SECONDS`, which other
//! Prometheus readers ignore and which gives the scrape instant, so two
//! saved files carry their interval with them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// One sample line: `name{label="value",...} value [timestamp_ms]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Metric name, with any `_sum`, `_count`, `_bucket` suffix.
    pub name: String,
    /// Labels in the order written, values unescaped.
    pub labels: Vec<(String, String)>,
    /// The value (may be NaN or infinite, as the format allows).
    pub value: f64,
    /// Optional timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The parsed text: samples in order, plus the scrape instant when the
/// text carries a `# sluice-scrape unix_time=...` comment.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Exposition {
    /// Every sample line.
    pub samples: Vec<Sample>,
    /// Seconds since the Unix epoch when the text was scraped, if known.
    pub scraped_at: Option<f64>,
}

/// The comment that records when a snapshot was taken.
pub const SCRAPE_COMMENT: &str = "# sluice-scrape unix_time=";

/// The comment line to put in front of a saved snapshot taken at
/// `unix_time` seconds.
pub fn scrape_comment(unix_time: f64) -> String {
    format!("{SCRAPE_COMMENT}{unix_time:.6}\n")
}

fn metrics_err(line: usize, reason: impl Into<String>) -> ModelError {
    ModelError::Metrics {
        line,
        reason: reason.into(),
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Parses a value as the format writes it: a float, `NaN`, `+Inf`, `-Inf`.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ if s
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            s.parse().ok()
        }
        _ => None,
    }
}

/// Parses Prometheus text. Comments (`# HELP`, `# TYPE` and others) and
/// blank lines are skipped; anything else must be a well-formed sample,
/// or the error names the line.
pub fn parse(text: &str) -> Result<Exposition> {
    let mut out = Exposition::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix(SCRAPE_COMMENT) {
            let t: f64 = rest
                .trim()
                .parse()
                .map_err(|_| metrics_err(n, format!("bad scrape time '{}'", rest.trim())))?;
            if !t.is_finite() || t < 0.0 {
                return Err(metrics_err(n, format!("bad scrape time {t}")));
            }
            // The first one counts (a saved snapshot re-saved keeps its
            // original time in front).
            out.scraped_at.get_or_insert(t);
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        out.samples.push(parse_sample(line, n)?);
    }
    Ok(out)
}

fn parse_sample(line: &str, n: usize) -> Result<Sample> {
    if !line.starts_with(is_name_start) {
        return Err(metrics_err(n, "expected a metric name"));
    }
    let name_end = line
        .char_indices()
        .find(|&(_, c)| !is_name_char(c))
        .map_or(line.len(), |(j, _)| j);
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, tail) = parse_labels(after, n)?;
        labels = parsed;
        rest = tail;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value_text = fields
        .next()
        .ok_or_else(|| metrics_err(n, format!("'{name}' has no value")))?;
    let value = parse_value(value_text)
        .ok_or_else(|| metrics_err(n, format!("'{value_text}' is not a number")))?;
    let timestamp_ms = match fields.next() {
        None => None,
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| metrics_err(n, format!("'{t}' is not a timestamp in milliseconds")))?,
        ),
    };
    if let Some(extra) = fields.next() {
        return Err(metrics_err(
            n,
            format!("unexpected '{extra}' after the value"),
        ));
    }
    if !rest.is_empty() && !rest.starts_with([' ', '\t']) {
        return Err(metrics_err(
            n,
            format!("expected a space between '{name}' and its value"),
        ));
    }
    Ok(Sample {
        name,
        labels,
        value,
        timestamp_ms,
    })
}

/// Parses `name="value",...}` (after the opening brace); returns the labels
/// and the text after the closing brace.
fn parse_labels(s: &str, n: usize) -> Result<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    let mut rest = s.trim_start();
    loop {
        if let Some(tail) = rest.strip_prefix('}') {
            return Ok((labels, tail));
        }
        let end = rest
            .char_indices()
            .find(|&(_, c)| !is_name_char(c))
            .map_or(rest.len(), |(j, _)| j);
        if end == 0 || !rest.starts_with(is_name_start) {
            return Err(metrics_err(n, "expected a label name"));
        }
        let key = rest[..end].to_owned();
        rest = rest[end..].trim_start();
        rest = rest
            .strip_prefix('=')
            .ok_or_else(|| metrics_err(n, format!("expected '=' after label '{key}'")))?
            .trim_start();
        rest = rest
            .strip_prefix('"')
            .ok_or_else(|| metrics_err(n, format!("label '{key}': value must be quoted")))?;
        let mut value = String::new();
        let mut closed = None;
        let mut it = rest.char_indices();
        while let Some((j, c)) = it.next() {
            match c {
                '"' => {
                    closed = Some(j);
                    break;
                }
                '\\' => match it.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => {
                        return Err(metrics_err(
                            n,
                            format!("label '{key}': unknown escape '\\{other}'"),
                        ))
                    }
                    None => break,
                },
                _ => value.push(c),
            }
        }
        let j =
            closed.ok_or_else(|| metrics_err(n, format!("label '{key}': unterminated value")))?;
        labels.push((key, value));
        rest = rest[j + 1..].trim_start();
        if let Some(tail) = rest.strip_prefix(',') {
            rest = tail.trim_start();
        } else if !rest.starts_with('}') {
            return Err(metrics_err(n, "expected ',' or '}' after a label"));
        }
    }
}

/// What the model reads from one snapshot of a sluice server's metrics.
/// Counters are cumulative since the server started.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServerCounters {
    /// When the snapshot was taken (seconds since the Unix epoch), if the
    /// text says so.
    pub scraped_at: Option<f64>,
    /// `process_cpu_seconds_total`: user + system CPU of the server
    /// process (absent off Linux).
    pub process_cpu_seconds: Option<f64>,
    /// `sluice_stage_busy_seconds_total` by `stage` (`execute_inline`,
    /// `execute_pool`, `send`).
    pub stage_busy_seconds: BTreeMap<String, f64>,
    /// `sluice_requests_total` by `command`, summed over the selected
    /// exports.
    pub requests: BTreeMap<String, u64>,
    /// `sluice_request_bytes_total` by `command`, summed likewise.
    pub bytes: BTreeMap<String, u64>,
    /// `sluice_request_duration_seconds_sum` over the selected exports and
    /// commands: server time from decoding a request to sending its reply.
    pub request_seconds_sum: f64,
    /// `sluice_request_duration_seconds_count`, likewise.
    pub request_seconds_count: u64,
    /// `sluice_connections_active` (a gauge).
    pub connections_active: Option<f64>,
    /// Every export seen in `sluice_requests_total`.
    pub exports: Vec<String>,
}

/// A counter value as a whole number (counters of requests and bytes are
/// integers; the text writes them without a fraction).
fn count(s: &Sample) -> u64 {
    if s.value.is_finite() && s.value > 0.0 {
        s.value.round() as u64
    } else {
        0
    }
}

impl ServerCounters {
    /// Parses `text` and reads the sluice counters, summing requests over
    /// `export` only when given (else over every export).
    pub fn from_text(text: &str, export: Option<&str>) -> Result<Self> {
        Self::from_exposition(&parse(text)?, export)
    }

    /// Reads the sluice counters from parsed samples.
    pub fn from_exposition(e: &Exposition, export: Option<&str>) -> Result<Self> {
        let mut c = Self {
            scraped_at: e.scraped_at,
            ..Self::default()
        };
        let mut seen_requests = false;
        let wanted = |s: &Sample| export.is_none_or(|x| s.label("export") == Some(x));
        for s in &e.samples {
            match s.name.as_str() {
                "process_cpu_seconds_total" => c.process_cpu_seconds = Some(s.value),
                "sluice_connections_active" => c.connections_active = Some(s.value),
                "sluice_stage_busy_seconds_total" => {
                    if let Some(stage) = s.label("stage") {
                        *c.stage_busy_seconds.entry(stage.to_owned()).or_default() += s.value;
                    }
                }
                "sluice_requests_total" => {
                    seen_requests = true;
                    if let Some(x) = s.label("export") {
                        if !c.exports.iter().any(|e| e == x) {
                            c.exports.push(x.to_owned());
                        }
                    }
                    if wanted(s) {
                        let cmd = s.label("command").unwrap_or("all").to_owned();
                        *c.requests.entry(cmd).or_default() += count(s);
                    }
                }
                "sluice_request_bytes_total" if wanted(s) => {
                    let cmd = s.label("command").unwrap_or("all").to_owned();
                    *c.bytes.entry(cmd).or_default() += count(s);
                }
                "sluice_request_duration_seconds_sum" if wanted(s) => {
                    c.request_seconds_sum += s.value;
                }
                "sluice_request_duration_seconds_count" if wanted(s) => {
                    c.request_seconds_count += count(s);
                }
                _ => {}
            }
        }
        if !seen_requests {
            return Err(ModelError::Calibration(
                "no sluice_requests_total in the metrics: is this a sluice server's /metrics (sluice serve --metrics ADDR)?"
                    .into(),
            ));
        }
        if let Some(x) = export {
            if !c.exports.iter().any(|e| e == x) {
                return Err(ModelError::Calibration(format!(
                    "no export named '{x}' in the metrics (exports: {})",
                    if c.exports.is_empty() {
                        "none".to_owned()
                    } else {
                        c.exports.join(", ")
                    }
                )));
            }
        }
        Ok(c)
    }

    /// Requests of every command.
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Payload bytes of every command.
    pub fn total_bytes(&self) -> u64 {
        self.bytes.values().sum()
    }

    /// Busy seconds of one stage (0 when the server does not report it).
    pub fn stage(&self, name: &str) -> f64 {
        self.stage_busy_seconds.get(name).copied().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_labels_escapes_and_specials() {
        let e = parse(
            "# HELP x A help text.\n# TYPE x counter\n\
             x 1\n\
             y{a=\"1\",b=\"q\\\"uo\\\\te\\n\"} 2.5e-3 1700000000000\n\
             z{le=\"+Inf\",} +Inf\n\
             w{ a = \"x\" }\tNaN\n",
        )
        .unwrap();
        assert_eq!(e.samples.len(), 4);
        assert_eq!(e.samples[0].name, "x");
        assert_eq!(e.samples[0].value, 1.0);
        let y = &e.samples[1];
        assert_eq!(y.label("a"), Some("1"));
        assert_eq!(y.label("b"), Some("q\"uo\\te\n"));
        assert_eq!(y.value, 2.5e-3);
        assert_eq!(y.timestamp_ms, Some(1_700_000_000_000));
        assert_eq!(e.samples[2].value, f64::INFINITY);
        assert!(e.samples[3].value.is_nan());
        assert_eq!(e.samples[3].label("a"), Some("x"));
        assert_eq!(e.scraped_at, None);
    }

    #[test]
    fn scrape_comment_round_trips() {
        let text = format!("{}x 1\n", scrape_comment(1700000000.25));
        assert_eq!(parse(&text).unwrap().scraped_at, Some(1700000000.25));
        let twice = format!("{}{text}", scrape_comment(1800000000.0));
        assert_eq!(parse(&twice).unwrap().scraped_at, Some(1800000000.0));
    }

    #[test]
    fn bad_lines_name_their_number() {
        for (text, line, what) in [
            ("x 1\n{a=\"b\"} 2\n", 2, "metric name"),
            ("x{a=b} 1\n", 1, "quoted"),
            ("x{a=\"b} 1\n", 1, "unterminated"),
            ("x{a=\"b\" c=\"d\"} 1\n", 1, "','"),
            ("x\n", 1, "no value"),
            ("x one\n", 1, "not a number"),
            ("x 1 2 3\n", 1, "unexpected"),
            ("x 1 1.5\n", 1, "timestamp"),
            ("x{a=\"\\t\"} 1\n", 1, "escape"),
            ("# sluice-scrape unix_time=soon\n", 1, "scrape time"),
        ] {
            match parse(text) {
                Err(ModelError::Metrics { line: l, reason }) => {
                    assert_eq!(l, line, "{text:?}: {reason}");
                    assert!(reason.contains(what), "{text:?}: {reason}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
