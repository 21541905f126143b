//! Values every sluice layer reads the same way, whatever reads them
//! (the server's export specs and TOML, `sluice bench`, `sluice model`):
//! byte sizes like `64K` or `2GiB` and durations like `500ms` or `2m`,
//! and sizes written back the same way ([`format_size`]). Also
//! [`splitmix64`], the one hash of a number that bench and tests derive
//! repeatable bytes from. And [`TlsPolicy`], how a server offers TLS,
//! which both protocol crates' handshakes read. No I/O, no other sluice
//! crate.

mod mix;
mod tls;

use std::time::Duration;

pub use mix::splitmix64;
pub use tls::TlsPolicy;

/// An error and each of its causes, once each, joined by ": " (what
/// anyhow's `{:#}` prints, for code that holds a borrowed error).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

use thiserror::Error;

/// A size or duration that could not be read; says what was given and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseError {
    /// A byte size that is not one.
    #[error("bad size {value:?}: {reason} (expected e.g. 4096, 64K, 1M, 2GiB)")]
    Size { value: String, reason: &'static str },
    /// A duration that is not one.
    #[error("bad duration {value:?}: {reason} (expected e.g. 250us, 500ms, 2s, 1.5, 3m)")]
    Duration { value: String, reason: &'static str },
}

/// Parses a byte count: digits, then an optional binary suffix `K`, `M`,
/// `G`, `T` (also written `KB`/`KiB`, any case; all powers of two) or `B`.
pub fn parse_size(value: &str) -> Result<u64, ParseError> {
    let bad = |reason| ParseError::Size {
        value: value.to_owned(),
        reason,
    };
    let v = value.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (digits, suffix) = v.split_at(split);
    if digits.is_empty() {
        return Err(bad("no digits"));
    }
    let n: u64 = digits.parse().map_err(|_| bad("number too large"))?;
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(bad("unknown suffix (use K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| bad("size overflows 64 bits"))
}

/// A byte count as `parse_size` reads it back, shortest first: `4k`, `1m`,
/// `2g` for whole binary multiples, else the digits (`1536`).
pub fn format_size(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{}g", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}m", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}k", n >> 10)
    } else {
        n.to_string()
    }
}

/// Parses a positive duration: a decimal number followed by `us`, `ms`,
/// `s` or `m`; a bare number is seconds.
pub fn parse_duration(value: &str) -> Result<Duration, ParseError> {
    let bad = |reason| ParseError::Duration {
        value: value.to_owned(),
        reason,
    };
    let t = value.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad("not a number"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(bad("must be positive"));
    }
    Duration::try_from_secs_f64(v * scale).map_err(|_| bad("too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size(" 512 B "), Ok(512));
        for bad in ["", "G", "1X", "99999999999T", "-1", "1.5K"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        let msg = parse_size("1X").unwrap_err().to_string();
        assert!(msg.contains("\"1X\"") && msg.contains("suffix"), "{msg}");
    }

    #[test]
    fn sizes_format_and_read_back() {
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(3 << 30), "3g");
        assert_eq!(format_size(1536), "1536");
        for n in [
            0,
            1,
            512,
            1536,
            4096,
            65536 + 1024,
            1 << 20,
            5 << 30,
            u64::MAX,
        ] {
            assert_eq!(parse_size(&format_size(n)), Ok(n), "{n}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["", "0s", "-1s", "soon", "inf", "1e300"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
