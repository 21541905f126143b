//! What `sluice obj` reads from its arguments (object ids, ranges,
//! strides, `KEY=VALUE` attributes, `--where` conditions) and how it
//! writes attribute values back (text and JSON).
//!
//! Attribute values are typed: a value that reads as a 64-bit integer is
//! an integer, anything else text; a prefix forces the type: `int:`,
//! `text:` (so `text:42` is the text "42") or `hex:` (bytes, in hex).

use sluice_client::obj::{open_range, Range, Segment, Value};
use sluice_types::parse_size;

/// An object id: decimal, or hex with `0x`.
pub(crate) fn parse_id(arg: &str) -> Result<u64, String> {
    let parsed = match arg.strip_prefix("0x").or_else(|| arg.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => arg.parse(),
    };
    parsed.map_err(|_| {
        format!("{arg:?} is not an object id (a number, decimal or 0x hex, as 'sluice obj create' prints)")
    })
}

/// `put --stripe-count N`: how many object servers a striped object
/// spreads over (1 or more). A URI here was meant for `--server`.
pub(crate) fn parse_stripe_count(arg: &str) -> Result<u32, String> {
    match arg.parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{arg:?} is not a number of object servers (1 or more); --server URI names the object server of single objects"
        )),
    }
}

/// `put --ec K+M`: data and parity units a row (each 1 or more, at most
/// 256 in all).
pub(crate) fn parse_erasure(arg: &str) -> Result<(u8, u8), String> {
    let bad =
        || format!("{arg:?} is not an erasure code K+M (data and parity units a row, e.g. 4+2)");
    let (k, m) = arg.split_once('+').ok_or_else(bad)?;
    let (k, m) = (k.parse::<u8>(), m.parse::<u8>());
    match (k, m) {
        (Ok(k), Ok(m)) if k >= 1 && m >= 1 && usize::from(k) + usize::from(m) <= 256 => Ok((k, m)),
        _ => Err(bad()),
    }
}

/// `OFF:LEN`, each a size (`4096`, `4K`, `1M`).
pub(crate) fn parse_range(arg: &str) -> Result<Segment, String> {
    let (off, len) = arg
        .split_once(':')
        .ok_or_else(|| format!("range {arg:?} is not OFF:LEN (e.g. 4K:512)"))?;
    let offset = parse_size(off).map_err(|e| format!("range {arg:?}: offset: {e}"))?;
    let length = parse_size(len).map_err(|e| format!("range {arg:?}: length: {e}"))?;
    if length == 0 {
        return Err(format!("range {arg:?} has length 0"));
    }
    if offset.checked_add(length).is_none() {
        return Err(format!("range {arg:?} ends past 2^64"));
    }
    Ok(Segment { offset, length })
}

/// `--stride OFF:STRIDE:LEN:COUNT`: COUNT segments of LEN bytes, STRIDE
/// apart from OFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stride {
    pub(crate) offset: u64,
    pub(crate) stride: u64,
    pub(crate) length: u64,
    pub(crate) count: u64,
}

/// Most segments one `--stride` may name (the client splits them into
/// requests; this bounds the list it builds).
const MAX_STRIDE_COUNT: u64 = 1 << 24;

pub(crate) fn parse_stride(arg: &str) -> Result<Stride, String> {
    let parts: Vec<&str> = arg.split(':').collect();
    let [off, stride, len, count] = parts.as_slice() else {
        return Err(format!(
            "stride {arg:?} is not OFF:STRIDE:LEN:COUNT (e.g. 0:4K:512:16)"
        ));
    };
    let field =
        |name: &str, v: &str| parse_size(v).map_err(|e| format!("stride {arg:?}: {name}: {e}"));
    let s = Stride {
        offset: field("offset", off)?,
        stride: field("stride", stride)?,
        length: field("length", len)?,
        count: field("count", count)?,
    };
    if s.length == 0 || s.count == 0 {
        return Err(format!("stride {arg:?} has a length or count of 0"));
    }
    if s.stride < s.length {
        return Err(format!(
            "stride {arg:?}: the stride {} is smaller than the length {}",
            s.stride, s.length
        ));
    }
    if s.count > MAX_STRIDE_COUNT {
        return Err(format!(
            "stride {arg:?}: at most {MAX_STRIDE_COUNT} segments"
        ));
    }
    let end = s
        .stride
        .checked_mul(s.count - 1)
        .and_then(|d| d.checked_add(s.offset))
        .and_then(|o| o.checked_add(s.length));
    if end.is_none() {
        return Err(format!("stride {arg:?} ends past 2^64"));
    }
    Ok(s)
}

impl Stride {
    pub(crate) fn segments(&self) -> impl Iterator<Item = Segment> + '_ {
        (0..self.count).map(|i| Segment {
            offset: self.offset + i * self.stride,
            length: self.length,
        })
    }
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

pub(crate) fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A value as typed on the command line (see the module documentation).
pub(crate) fn parse_value(v: &str) -> Result<Value, String> {
    if let Some(i) = v.strip_prefix("int:") {
        return i
            .parse()
            .map(Value::Integer)
            .map_err(|_| format!("{i:?} is not a 64-bit integer"));
    }
    if let Some(t) = v.strip_prefix("text:") {
        return Ok(Value::Text(t.to_owned()));
    }
    if let Some(h) = v.strip_prefix("hex:") {
        return hex_decode(h)
            .map(Value::Bytes)
            .ok_or_else(|| format!("{h:?} is not hex bytes (pairs of 0-9a-f)"));
    }
    Ok(v.parse()
        .map_or_else(|_| Value::Text(v.to_owned()), Value::Integer))
}

/// `KEY=VALUE`.
pub(crate) fn parse_assignment(arg: &str) -> Result<(String, Value), String> {
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?} is not KEY=VALUE"))?;
    if key.is_empty() {
        return Err(format!("{arg:?} has an empty key"));
    }
    Ok((
        key.to_owned(),
        parse_value(value).map_err(|e| format!("{arg:?}: {e}"))?,
    ))
}

/// `KEY>=VALUE`, `KEY<=VALUE` or `KEY=VALUE` as a query range.
pub(crate) fn parse_where(arg: &str) -> Result<Range, String> {
    let bad = || format!("condition {arg:?} is not KEY>=VALUE, KEY<=VALUE or KEY=VALUE");
    let (key, op, value) = if let Some((k, v)) = arg.split_once(">=") {
        (k, ">=", v)
    } else if let Some((k, v)) = arg.split_once("<=") {
        (k, "<=", v)
    } else if let Some((k, v)) = arg.split_once('=') {
        (k, "=", v)
    } else {
        return Err(bad());
    };
    if key.is_empty() {
        return Err(bad());
    }
    let value = parse_value(value).map_err(|e| format!("condition {arg:?}: {e}"))?;
    Ok(match op {
        ">=" => open_range(key, value, true, u32::MAX),
        "<=" => open_range(key, value, false, u32::MAX),
        _ => Range {
            key: key.to_owned(),
            min: value.clone(),
            max: value,
        },
    })
}

/// A value as `attr get` prints it (`parse_value` reads it back).
pub(crate) fn show_value(v: &Value) -> String {
    match v {
        Value::Integer(i) => i.to_string(),
        Value::Text(t) if t.parse::<i64>().is_ok() || has_prefix(t) => format!("text:{t}"),
        Value::Text(t) => t.clone(),
        Value::Bytes(b) => format!("hex:{}", hex_encode(b)),
    }
}

/// The attributes the server keeps as nanoseconds since the epoch.
const TIME_ATTRS: [&str; 3] = [
    "sluice.created",
    "sluice.data_modified",
    "sluice.attrs_modified",
];

/// The value of attribute `key` for people: the server's times in
/// RFC 3339 (UTC), anything else as [`show_value`] prints it. `--json`
/// keeps the numbers.
pub(crate) fn show_attr(key: &str, v: &Value) -> String {
    match v {
        Value::Integer(nanos) if TIME_ATTRS.contains(&key) => rfc3339(*nanos),
        v => show_value(v),
    }
}

/// `bytes` for people: `3000000 (2.9 MiB)`, or just the digits under
/// 1 KiB.
pub(crate) fn show_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = None;
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = Some(u);
    }
    match unit {
        Some(u) => format!("{bytes} ({value:.1} {u})"),
        None => bytes.to_string(),
    }
}

/// `nanos` since the epoch as `YYYY-MM-DDTHH:MM:SS.NNNNNNNNNZ`.
fn rfc3339(nanos: i64) -> String {
    let secs = nanos.div_euclid(1_000_000_000);
    let frac = nanos.rem_euclid(1_000_000_000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:09}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

fn has_prefix(t: &str) -> bool {
    ["int:", "text:", "hex:"].iter().any(|p| t.starts_with(p))
}

/// A value in JSON: integers as numbers, text as strings, bytes as
/// `{"hex": "..."}`.
pub(crate) fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Integer(i) => serde_json::Value::from(*i),
        Value::Text(t) => serde_json::Value::from(t.as_str()),
        Value::Bytes(b) => serde_json::json!({ "hex": hex_encode(b) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_ranges_and_strides() {
        assert_eq!(parse_id("42"), Ok(42));
        assert_eq!(parse_id("0x2a"), Ok(42));
        assert!(parse_id("x").unwrap_err().contains("not an object id"));
        assert_eq!(
            parse_range("4K:1M"),
            Ok(Segment {
                offset: 4096,
                length: 1 << 20
            })
        );
        assert!(parse_range("4K").is_err());
        assert!(parse_range("0:0").is_err());
        let s = parse_stride("0:10:4:3").unwrap();
        assert_eq!(
            s.segments().map(|s| s.offset).collect::<Vec<_>>(),
            vec![0, 10, 20]
        );
        assert!(parse_stride("0:2:4:3").unwrap_err().contains("smaller"));
        assert!(parse_stride("0:1:1").is_err());
        assert!(parse_stride(&format!("{}:1:1:2", u64::MAX))
            .unwrap_err()
            .contains("2^64"));
    }

    #[test]
    fn values_are_typed_and_print_back_the_same() {
        assert_eq!(parse_value("-5"), Ok(Value::Integer(-5)));
        assert_eq!(parse_value("abc"), Ok(Value::Text("abc".into())));
        assert_eq!(parse_value("text:5"), Ok(Value::Text("5".into())));
        assert_eq!(parse_value("hex:00ff"), Ok(Value::Bytes(vec![0, 255])));
        assert!(parse_value("hex:0").is_err());
        assert!(parse_value("int:x").is_err());
        for v in [
            Value::Integer(7),
            Value::Text("7".into()),
            Value::Text("hex:zz".into()),
            Value::Text("plain".into()),
            Value::Bytes(vec![1, 2]),
        ] {
            assert_eq!(parse_value(&show_value(&v)), Ok(v));
        }
        assert_eq!(
            parse_assignment("k=v=w"),
            Ok(("k".into(), Value::Text("v=w".into())))
        );
        assert!(parse_assignment("=v").is_err());
    }

    #[test]
    fn server_times_print_as_rfc3339_and_other_values_as_they_are() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339(1_795_926_876_154_000_133),
            "2026-11-29T04:34:36.154000133Z"
        );
        assert_eq!(
            rfc3339(951_782_400_000_000_001),
            "2000-02-29T00:00:00.000000001Z"
        );
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999999Z");
        assert_eq!(
            show_attr("sluice.created", &Value::Integer(0)),
            "1970-01-01T00:00:00.000000000Z"
        );
        assert_eq!(show_attr("created", &Value::Integer(5)), "5");
        assert_eq!(show_bytes(1000), "1000");
        assert_eq!(show_bytes(3_000_000), "3000000 (2.9 MiB)");
        assert_eq!(show_bytes(1 << 30), "1073741824 (1.0 GiB)");
    }

    #[test]
    fn conditions() {
        let r = parse_where("size>=10").unwrap();
        assert_eq!(
            (r.min, r.max),
            (Value::Integer(10), Value::Integer(i64::MAX))
        );
        let r = parse_where("size<=10").unwrap();
        assert_eq!(
            (r.min, r.max),
            (Value::Integer(i64::MIN), Value::Integer(10))
        );
        let r = parse_where("color=red").unwrap();
        assert_eq!(r.min, Value::Text("red".into()));
        assert_eq!(r.max, Value::Text("red".into()));
        assert!(parse_where("nothing").is_err());
        assert!(parse_where(">=3").is_err());
    }
}
