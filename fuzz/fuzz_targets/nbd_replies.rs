//! The client-side decoders: what a (possibly hostile) server sends.
//! Option replies, then transmission reply headers in the chosen style
//! with their payloads, error chunks and block-status chunks. Nothing may
//! panic or read past what it was given; every decoded item re-encodes,
//! through the server's encoders, to the bytes it came from.
//!
//! Input layout:
//!
//! ```text
//! 0       reply style: 0 simple, 1 structured, 2+ extended
//! 1..     the stream (decoded both as option replies and as
//!         transmission replies)
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_nbd_proto::client::{parse_block_status, parse_error_chunk, OptionReply, ReplyHeader};
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{encode_block_status, encode_chunk_header, Extent, ReplyStyle};

/// Largest extent the compact (32-bit) block status encoder sends as is.
const COMPACT_EXTENT_MAX: u64 = 0xFFFF_FE00;

fn option_replies(mut rest: &[u8]) {
    while let Ok(Some((reply, used))) = OptionReply::decode(rest) {
        assert!(used >= 20 && used <= rest.len());
        assert_eq!(used, 20 + reply.data.len());
        assert_eq!(&rest[20..used], &reply.data[..]);
        rest = &rest[used..];
    }
}

fn transmission_replies(mut rest: &[u8], style: ReplyStyle) {
    loop {
        let (header, used) = match ReplyHeader::decode(rest, style) {
            Ok(Some(h)) => h,
            Ok(None) | Err(_) => return,
        };
        assert!(used <= rest.len());
        let ReplyHeader::Chunk {
            flags,
            kind,
            cookie,
            offset,
            length,
        } = header
        else {
            rest = &rest[used..];
            continue;
        };
        let mut enc = Vec::new();
        encode_chunk_header(&mut enc, style, flags, kind, cookie, offset, length);
        assert_eq!(enc, &rest[..used], "chunk header re-encodes to its bytes");
        let Some(payload) = usize::try_from(length)
            .ok()
            .and_then(|len| rest.get(used..used.checked_add(len)?))
        else {
            return;
        };
        match kind {
            REPLY_TYPE_ERROR | REPLY_TYPE_ERROR_OFFSET => {
                if let Ok((_, msg, off)) = parse_error_chunk(kind, payload) {
                    assert!(msg.len() <= 3 * payload.len());
                    assert_eq!(off.is_some(), kind == REPLY_TYPE_ERROR_OFFSET);
                }
            }
            REPLY_TYPE_BLOCK_STATUS | REPLY_TYPE_BLOCK_STATUS_EXT => {
                if let Ok((id, extents)) = parse_block_status(kind, payload) {
                    assert!(!extents.is_empty());
                    let matches_style = (kind == REPLY_TYPE_BLOCK_STATUS_EXT)
                        == (style == ReplyStyle::Extended);
                    // The compact encoder clips lengths to the largest
                    // 512-aligned u32 (and stops there).
                    let fits = style == ReplyStyle::Extended
                        || extents.iter().all(|e| e.length <= COMPACT_EXTENT_MAX);
                    let extended_count_ok = kind != REPLY_TYPE_BLOCK_STATUS_EXT
                        || payload[4..8] == (extents.len() as u32).to_be_bytes();
                    let ext_flags_fit = kind != REPLY_TYPE_BLOCK_STATUS_EXT
                        || payload[8..]
                            .chunks_exact(16)
                            .all(|d| d[8..12] == [0, 0, 0, 0]);
                    if matches_style
                        && fits
                        && extended_count_ok
                        && ext_flags_fit
                        && flags == REPLY_FLAG_DONE
                    {
                        let mut enc = Vec::new();
                        let extents: Vec<Extent> = extents;
                        encode_block_status(&mut enc, style, cookie, offset, id, &extents);
                        assert_eq!(enc, &rest[..used + payload.len()], "block status re-encodes");
                    }
                }
            }
            _ => {}
        }
        rest = &rest[used + payload.len()..];
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&style, stream)) = data.split_first() else {
        return;
    };
    let style = match style {
        0 => ReplyStyle::Simple,
        1 => ReplyStyle::Structured,
        _ => ReplyStyle::Extended,
    };
    option_replies(stream);
    transmission_replies(stream, style);
});
