//! Plain-text output for `sluice model` and `sluice bench`: the one table
//! formatter (aligned text, Markdown, CSV) and the number formats their
//! cells and axes use. Strings in, strings out.

use std::fmt::Write as _;

/// How the first column is aligned; the others are always right-aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum FirstColumn {
    /// Left-aligned names (bench tables).
    #[default]
    Left,
    /// Right-aligned like the rest (model tables, all numbers).
    Right,
}

/// A text table: a header row, then rows, two spaces between columns and
/// no trailing blanks.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    first: FirstColumn,
    rule: bool,
}

impl Table {
    /// A table whose first column is left-aligned and whose header is not
    /// underlined (`sluice bench`).
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// A table whose every column is right-aligned and whose header is
    /// underlined with dashes (`sluice model`).
    pub fn underlined<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            first: FirstColumn::Right,
            rule: true,
            ..Self::new(header)
        }
    }

    /// Appends a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Appends rows.
    #[must_use]
    pub fn with_rows(mut self, rows: impl IntoIterator<Item = Vec<String>>) -> Self {
        self.rows.extend(rows);
        self
    }

    /// The aligned text.
    pub fn render(&self) -> String {
        let cols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut width = vec![0; cols];
        for r in self.rows.iter().chain([&self.header]) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut text = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                let sep = if i == 0 { "" } else { "  " };
                let _ = match (i, self.first) {
                    (0, FirstColumn::Left) => write!(text, "{c:<w$}"),
                    _ => write!(text, "{sep}{c:>w$}"),
                };
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.header);
        if self.rule {
            let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
            line(&rule);
        }
        for r in &self.rows {
            line(r);
        }
        out
    }

    /// A Markdown table (first column left-aligned, the others right).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        out.push_str(&line(&self.header));
        let sep: Vec<String> = (0..self.header.len())
            .map(|i| if i == 0 { "---".into() } else { "---:".into() })
            .collect();
        out.push_str(&line(&sep));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    /// CSV with a header line (cells with commas, quotes or newlines are
    /// quoted).
    pub fn csv(&self) -> String {
        let mut out = String::new();
        for r in [&self.header].into_iter().chain(self.rows.iter()) {
            let cells: Vec<String> = r.iter().map(|c| csv_cell(c)).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }
}

fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_owned()
    }
}

/// `v` with about seven significant digits, without an exponent for the
/// magnitudes the models produce (model tables).
pub fn precise(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let mag = v.abs().log10().floor() as i32;
    if !(-4..=12).contains(&mag) {
        return format!("{v:.6e}");
    }
    let decimals = (6 - mag).clamp(0, 10) as usize;
    format!("{v:.decimals$}")
}

/// `v` with at most two decimals: none from 100 up, one from 10; `-` when
/// not finite (measurement tables).
pub fn compact(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "-".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The divisor and SI prefix (`M`, `k` or none) for a rate of about `max`
/// per second: millions from 10^6, thousands from 10^4.
pub fn rate_scale(max: f64) -> (f64, &'static str) {
    if max >= 1e6 {
        (1e6, "M")
    } else if max >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    }
}

/// A rate such as IOPS as `950`, `123.5k` or `1.23M`.
pub fn scaled(v: f64) -> String {
    match rate_scale(v) {
        (d, "M") => format!("{:.2}M", v / d),
        (d, "k") => format!("{:.1}k", v / d),
        _ => format!("{v:.0}"),
    }
}

/// The divisor and unit for durations of about `max` seconds: µs below a
/// millisecond, ms below a second, else s.
pub fn time_scale(max: f64) -> (f64, &'static str) {
    if max < 1e-3 {
        (1e-6, "µs")
    } else if max < 1.0 {
        (1e-3, "ms")
    } else {
        (1.0, "s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_escape() {
        let mut t = Table::new(["case", "IOPS"]);
        t.row(["a,b", "12"]);
        t.row(["long-name", "1234"]);
        let text = t.render();
        assert_eq!(text.lines().next().unwrap(), "case       IOPS");
        assert!(text.contains("long-name  1234"));
        assert_eq!(t.csv().lines().nth(1).unwrap(), "\"a,b\",12");
        assert!(t
            .markdown()
            .starts_with("| case | IOPS |\n| --- | ---: |\n"));
    }

    #[test]
    fn underlined_tables_right_align_every_column() {
        let t = Table::underlined(["station", "demand s"])
            .with_rows([vec!["cpu".to_owned(), "0.5".to_owned()]]);
        assert_eq!(
            t.render(),
            "station  demand s\n-------  --------\n    cpu       0.5\n"
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(scaled(123_456.0), "123.5k");
        assert_eq!(scaled(1_234_567.0), "1.23M");
        assert_eq!(scaled(950.4), "950");
        assert_eq!(compact(4.256), "4.26");
        assert_eq!(compact(f64::NAN), "-");
        assert_eq!(precise(0.151_516_49), "0.1515165");
        assert_eq!(precise(1.5e-7), "1.500000e-7");
        assert_eq!(time_scale(5e-4), (1e-6, "µs"));
        assert_eq!(rate_scale(2e4), (1e3, "k"));
    }
}
