//! Transmission-phase request headers: decode a stream of headers (both
//! styles) the way the server frames them, re-encode each one, and
//! validate it against fuzzed parameters.
//!
//! Input layout (so seeds can be written by hand):
//!
//! ```text
//! 0..8    export size (u64 BE)
//! 8..10   transmission flags (u16 BE)
//! 10      bit 0: extended headers; bits 1-2: reply style
//!         (0 simple, 1 structured, 2/3 extended)
//! 11..15  maximum payload (u32 BE)
//! 15      minimum block: 1 << b for b < 32, else 3 * b
//! 16      bit 0: block status allowed
//! 17..    request stream
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::be32;
use sluice_nbd_proto::{
    HeaderStyle, ReplyStyle, RequestDecodeError, RequestHeader, TransmissionParams,
};
use sluice_testkit::nbd_oracle::check_accepted;

const PREFIX: usize = 17;

fn params(data: &[u8]) -> TransmissionParams {
    let mut p = [0u8; PREFIX];
    let n = data.len().min(PREFIX);
    p[..n].copy_from_slice(&data[..n]);
    let mut size = [0u8; 8];
    size.copy_from_slice(&p[..8]);
    TransmissionParams {
        size: u64::from_be_bytes(size),
        flags: u16::from_be_bytes([p[8], p[9]]),
        header_style: if p[10] & 1 != 0 {
            HeaderStyle::Extended
        } else {
            HeaderStyle::Compact
        },
        reply_style: match (p[10] >> 1) & 3 {
            0 => ReplyStyle::Simple,
            1 => ReplyStyle::Structured,
            _ => ReplyStyle::Extended,
        },
        max_payload: u32::from_be_bytes([p[11], p[12], p[13], p[14]]),
        min_block: if p[15] < 32 {
            1 << p[15]
        } else {
            3 * u32::from(p[15])
        },
        block_status: p[16] & 1 != 0,
    }
}

fn frame(mut rest: &[u8], style: HeaderStyle, params: &TransmissionParams) {
    let p = TransmissionParams {
        header_style: style,
        ..*params
    };
    let hl = style.header_len();
    loop {
        match RequestHeader::decode(rest, style) {
            Ok(None) => {
                assert!(rest.len() < hl);
                return;
            }
            Err(RequestDecodeError::BadMagic { found, expected }) => {
                assert!(rest.len() >= hl);
                assert_eq!(found, be32(rest, 0));
                assert_ne!(found, expected);
                return;
            }
            Err(e) => panic!("unexpected decode error {e:?}"),
            Ok(Some(h)) => {
                let mut enc = Vec::new();
                h.encode(style, &mut enc);
                assert_eq!(enc, &rest[..hl], "re-encoding gives the same bytes");
                if let Ok(cmd) = p.validate(&h) {
                    if let Err(e) = check_accepted(&p, &h, cmd) {
                        panic!("{e}");
                    }
                }
                let payload = usize::try_from(h.payload_len(style)).unwrap_or(usize::MAX);
                let skip = hl.saturating_add(payload);
                if skip > rest.len() {
                    return;
                }
                rest = &rest[skip..];
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let p = params(data);
    let stream = data.get(PREFIX..).unwrap_or_default();
    frame(stream, p.header_style, &p);
    let other = match p.header_style {
        HeaderStyle::Compact => HeaderStyle::Extended,
        HeaderStyle::Extended => HeaderStyle::Compact,
    };
    frame(stream, other, &p);
});
