//! DDT bytes alone: an SGL or strided DDT parsed against fuzzed limits
//! never panics, and one it accepts re-encodes to the same bytes and
//! keeps its invariants; an SGL's segments lie at the master offset plus
//! their entries' offsets, and encoding them from that master offset
//! gives the DDT bytes back; where it has a span (ascending segments), a
//! span body gathers back to exactly the segments' bytes.
//!
//! Input layout:
//!
//! ```text
//! 0       bit 0: strided (else SGL); max_segments = (b >> 1) + 1
//! 1..9    master offset (u64 BE)
//! 9..17   header length (u64 BE)
//! 17..    DDT bytes
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_obj_proto::{encode_sgl_from, Ddt, DdtKind, Limits, Segment};

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let kind = if data[0] & 1 != 0 {
        DdtKind::Strided
    } else {
        DdtKind::Sgl
    };
    let limits = Limits {
        max_segments: u32::from(data[0] >> 1) + 1,
        max_payload: 1 << 20,
        ..Limits::default()
    };
    let offset = u64::from_be_bytes(data[1..9].try_into().expect("8 bytes"));
    let length = u64::from_be_bytes(data[9..17].try_into().expect("8 bytes"));
    let raw = &data[17..];
    let Ok(ddt) = Ddt::parse(kind, offset, length, raw, &limits) else {
        return;
    };
    let mut again = Vec::new();
    ddt.encode(&mut again);
    assert_eq!(again, raw);
    assert_eq!(ddt.total(), length);
    assert_eq!(ddt.master_offset(), offset);
    let mut total = 0u64;
    for s in ddt.segments() {
        assert!(s.length > 0 && s.offset.checked_add(s.length).is_some());
        total += s.length;
    }
    assert_eq!(total, length);
    if kind == DdtKind::Sgl {
        let segments: Vec<Segment> = ddt.segments().collect();
        for (s, e) in segments.iter().zip(raw[4..].chunks_exact(16)) {
            let relative = u64::from_be_bytes(e[..8].try_into().expect("8 bytes"));
            assert_eq!(s.offset, offset + relative);
        }
        let mut from = Vec::new();
        encode_sgl_from(offset, &segments, &mut from).expect("no segment before the master");
        assert_eq!(from, raw);
    }
    assert!(ddt.segment_count() >= 1 && ddt.segment_count() <= limits.max_segments);
    if let Some(span) = ddt.span() {
        assert!(span.length >= total);
        // A span body whose byte i is (span offset + i) mod 251: each
        // gathered segment must start with its own offset's value.
        if span.length <= 1 << 22 {
            let body: Vec<u8> = (0..span.length)
                .map(|i| ((span.offset.wrapping_add(i)) % 251) as u8)
                .collect();
            let list = ddt.gather_span(&body).expect("a body of the span's length");
            assert_eq!(list.len() as u64, total);
            let mut at = 0usize;
            for s in ddt.segments() {
                assert_eq!(list[at], (s.offset % 251) as u8);
                at += s.length as usize;
            }
            assert_eq!(ddt.gather_span(&body[1..]), None);
        }
    }
});
