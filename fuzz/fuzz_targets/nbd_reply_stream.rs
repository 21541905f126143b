//! The client's reply decoder and cookie table on an arbitrary server
//! byte stream, for requests the input describes: no panic, never more
//! used than given, data only for reads and only inside the read's range,
//! every finished request leaves the table exactly once, and the same
//! events whether the stream arrives whole or a byte at a time.
//!
//! Input layout:
//!
//! ```text
//! 0       reply style: 0 simple, 1 structured, 2+ extended
//! 1       number of requests in flight (n, at most 16)
//! 2..     n requests of 9 bytes: op (low 3 bits), offset low byte,
//!         length (u32, big-endian, capped at 64 KiB), 3 bytes ignored;
//!         cookies are 1..=n, offsets 512 * the byte
//! then    the server's bytes
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_nbd_proto::{CookieTable, Op, ReplyDecoder, ReplyEvent, ReplyStyle, Sent, Step};

/// (cookie, rel, len, is_data) per data/hole event, and finished cookies.
type Events = (Vec<(u64, u64, u64, bool)>, Vec<u64>);

fn decode(
    decoder: &ReplyDecoder,
    requests: &[Sent],
    stream: &[u8],
    byte_at_a_time: bool,
) -> Events {
    let mut table = CookieTable::default();
    for s in requests {
        table.insert(*s);
    }
    let mut events = Vec::new();
    let mut finished = Vec::new();
    let mut start = 0;
    let mut end = if byte_at_a_time { 0 } else { stream.len() };
    loop {
        let buf = &stream[start..end];
        let step = match decoder.decode(buf, &mut table) {
            Ok(s) => s,
            Err(_) => return (events, finished),
        };
        match step {
            Step::NeedMore(n) => {
                assert!(n > buf.len(), "asked for {n} bytes with {} present", buf.len());
                if end == stream.len() {
                    return (events, finished);
                }
                end += 1;
            }
            Step::Decoded(d) => {
                assert!(d.used > 0 && d.used <= buf.len());
                match d.event {
                    ReplyEvent::Data { cookie, rel, data } => {
                        events.push((cookie, rel, data.len() as u64, true));
                    }
                    ReplyEvent::Hole { cookie, rel, len } => events.push((cookie, rel, len, false)),
                    _ => {}
                }
                if let Some((cookie, rel, len, _)) = events.last().copied() {
                    let s = requests
                        .iter()
                        .find(|s| s.cookie == cookie)
                        .expect("data for a request that was sent");
                    assert_eq!(s.op, Op::Read, "data for a {}", s.op);
                    assert!(rel + len <= s.length, "data outside the read");
                }
                if let Some(f) = d.finished {
                    assert!(!finished.contains(&f.sent.cookie), "finished twice");
                    assert!(!table.contains(f.sent.cookie));
                    finished.push(f.sent.cookie);
                }
                start += d.used;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let style = match data[0] {
        0 => ReplyStyle::Simple,
        1 => ReplyStyle::Structured,
        _ => ReplyStyle::Extended,
    };
    let n = usize::from(data[1] % 17);
    let mut rest = &data[2..];
    let mut requests = Vec::new();
    for cookie in 1..=n as u64 {
        let Some(r) = rest.get(..9) else { break };
        rest = &rest[9..];
        let op = match r[0] & 7 {
            0 => Op::Read,
            1 => Op::Write,
            2 => Op::Flush,
            3 => Op::Trim,
            4 => Op::WriteZeroes,
            5 => Op::BlockStatus,
            _ => Op::Cache,
        };
        let length = u64::from(u32::from_be_bytes([r[2], r[3], r[4], r[5]])).min(64 * 1024);
        requests.push(Sent {
            cookie,
            op,
            offset: 512 * u64::from(r[1]),
            length,
        });
    }
    let decoder = ReplyDecoder::new(style, Some(1));
    let whole = decode(&decoder, &requests, rest, false);
    let piecewise = decode(&decoder, &requests, rest, true);
    assert_eq!(whole, piecewise, "events depend on how the bytes arrive");
});
