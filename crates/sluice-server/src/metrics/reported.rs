//! Series the server renders for others that count them themselves: the
//! object store's commits, and what devices report (cache counters and
//! gauges, RAID members' counters and histograms).

use std::fmt::Write as _;

use super::escape;

/// Renders the object store's own counters: its metadata transactions,
/// and the rewrites that made none.
pub fn render_store_metrics(store: &sluice_objstore::ObjectStore) -> String {
    let mut out = String::new();
    let series: [(&str, &str, &str, u64); 3] = [
        (
            "sluice_obj_store_commits_total",
            "counter",
            "Metadata transactions the object store committed (a group commit is one, however many changes it held).",
            store.commits(),
        ),
        (
            "sluice_obj_store_deferred_commits_total",
            "counter",
            "Plain rewrites inside an object file's length that committed nothing, their data-modified time kept in memory.",
            store.deferred_commits(),
        ),
        (
            "sluice_obj_store_unwritten_times",
            "gauge",
            "Objects whose data-modified time is in memory only (written by the next data commit, a flush or a clean stop).",
            store.unwritten_times() as u64,
        ),
    ];
    for (name, kind, help, value) in series {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    out
}

/// Renders what devices report about themselves (cache counters and
/// gauges, RAID members' counters and histograms), one series per export
/// and label set, prefixed `sluice_`.
pub fn render_device_metrics<'a>(
    exports: impl Iterator<Item = (&'a str, Vec<sluice_storage::DeviceMetric>)>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut by_name: Vec<(&'static str, String)> = Vec::new();
    for (export, metrics) in exports {
        for m in metrics {
            let (kind, suffix) = match m.kind {
                sluice_storage::MetricKind::Counter => ("counter", ""),
                sluice_storage::MetricKind::Gauge => ("gauge", ""),
                sluice_storage::MetricKind::Histogram(series) => ("histogram", series.suffix()),
            };
            let at = match by_name.iter().position(|(n, _)| *n == m.name) {
                Some(at) => at,
                None => {
                    by_name.push((
                        m.name,
                        format!(
                            "# HELP sluice_{0} {1}\n# TYPE sluice_{0} {kind}\n",
                            m.name, m.help
                        ),
                    ));
                    by_name.len() - 1
                }
            };
            let text = &mut by_name[at].1;
            let _ = write!(
                text,
                "sluice_{}{suffix}{{export=\"{}\"",
                m.name,
                escape(export)
            );
            for (key, value) in &m.labels {
                let _ = write!(text, ",{key}=\"{}\"", escape(value));
            }
            let _ = writeln!(text, "}} {}", m.value);
        }
    }
    for (_, text) in by_name {
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_metrics_carry_their_labels_and_histogram_series() {
        use sluice_storage::{DeviceMetric, HistogramSeries, MetricKind};
        let member = |kind, value, extra: Option<(&'static str, &str)>| DeviceMetric {
            name: "raid_member_request_duration_seconds",
            help: "Member request time.",
            kind,
            value,
            labels: [("member", "0".to_owned())]
                .into_iter()
                .chain(extra.map(|(k, v)| (k, v.to_owned())))
                .collect(),
        };
        let metrics = vec![
            member(
                MetricKind::Histogram(HistogramSeries::Bucket),
                2.0,
                Some(("le", "0.001")),
            ),
            member(
                MetricKind::Histogram(HistogramSeries::Bucket),
                3.0,
                Some(("le", "+Inf")),
            ),
            member(MetricKind::Histogram(HistogramSeries::Sum), 0.5, None),
            member(MetricKind::Histogram(HistogramSeries::Count), 3.0, None),
        ];
        let text = render_device_metrics([("v\"1", metrics)].into_iter());
        assert_eq!(
            text,
            "# HELP sluice_raid_member_request_duration_seconds Member request time.\n\
             # TYPE sluice_raid_member_request_duration_seconds histogram\n\
             sluice_raid_member_request_duration_seconds_bucket{export=\"v\\\"1\",member=\"0\",le=\"0.001\"} 2\n\
             sluice_raid_member_request_duration_seconds_bucket{export=\"v\\\"1\",member=\"0\",le=\"+Inf\"} 3\n\
             sluice_raid_member_request_duration_seconds_sum{export=\"v\\\"1\",member=\"0\"} 0.5\n\
             sluice_raid_member_request_duration_seconds_count{export=\"v\\\"1\",member=\"0\"} 3\n"
        );
    }
}
