//! Transmission-phase reply encoders. Every function appends complete
//! headers to `out`; read data is written by the caller straight after the
//! header it belongs to, so payload is never copied twice.

use crate::consts::*;
use crate::errno::NbdErrno;

/// Which reply messages the handshake allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStyle {
    /// Only simple replies (nothing negotiated).
    Simple,
    /// Structured reply chunks (`NBD_OPT_STRUCTURED_REPLY`).
    Structured,
    /// Extended reply chunks (`NBD_OPT_EXTENDED_HEADERS`).
    Extended,
}

impl ReplyStyle {
    /// Whether replies come as chunks (structured or extended).
    pub const fn chunked(self) -> bool {
        !matches!(self, Self::Simple)
    }
}

/// One `base:allocation` extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes (nonzero).
    pub length: u64,
    /// `NBD_STATE_*` flags.
    pub flags: u32,
}

/// Largest extent length a compact BLOCK_STATUS descriptor carries,
/// rounded down to 512 bytes as the spec recommends.
const MAX_COMPACT_EXTENT: u64 = 0xFFFF_FE00;

fn simple_header(out: &mut Vec<u8>, cookie: u64, error: u32) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
}

/// Appends a structured or extended chunk header. `request_offset` is
/// only sent in extended headers. Panics in debug builds on `Simple`.
#[allow(clippy::too_many_arguments)]
pub fn encode_chunk_header(
    out: &mut Vec<u8>,
    style: ReplyStyle,
    flags: u16,
    kind: u16,
    cookie: u64,
    request_offset: u64,
    payload_len: u64,
) {
    debug_assert!(style.chunked(), "chunk header requested for simple replies");
    match style {
        ReplyStyle::Extended => {
            out.extend_from_slice(&EXTENDED_REPLY_MAGIC.to_be_bytes());
            out.extend_from_slice(&flags.to_be_bytes());
            out.extend_from_slice(&kind.to_be_bytes());
            out.extend_from_slice(&cookie.to_be_bytes());
            out.extend_from_slice(&request_offset.to_be_bytes());
            out.extend_from_slice(&payload_len.to_be_bytes());
        }
        ReplyStyle::Structured | ReplyStyle::Simple => {
            out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
            out.extend_from_slice(&flags.to_be_bytes());
            out.extend_from_slice(&kind.to_be_bytes());
            out.extend_from_slice(&cookie.to_be_bytes());
            out.extend_from_slice(&(payload_len as u32).to_be_bytes());
        }
    }
}

/// Appends what precedes `len` bytes of read data at `data_offset`: a
/// simple reply header, or an `OFFSET_DATA` chunk header plus its offset
/// field. `done` marks the final chunk (ignored for simple replies).
pub fn encode_read_data_header(
    out: &mut Vec<u8>,
    style: ReplyStyle,
    cookie: u64,
    request_offset: u64,
    data_offset: u64,
    len: u32,
    done: bool,
) {
    if style == ReplyStyle::Simple {
        simple_header(out, cookie, 0);
        return;
    }
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    encode_chunk_header(
        out,
        style,
        flags,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        request_offset,
        u64::from(len) + 8,
    );
    out.extend_from_slice(&data_offset.to_be_bytes());
}

/// Bytes [`encode_read_data_header`] appends.
pub const fn read_data_header_len(style: ReplyStyle) -> usize {
    match style {
        ReplyStyle::Simple => SIMPLE_REPLY_HEADER_LEN,
        ReplyStyle::Structured => STRUCTURED_REPLY_HEADER_LEN + 8,
        ReplyStyle::Extended => EXTENDED_REPLY_HEADER_LEN + 8,
    }
}

/// Appends an `OFFSET_HOLE` chunk: `len` zero bytes at `hole_offset`.
pub fn encode_hole_chunk(
    out: &mut Vec<u8>,
    style: ReplyStyle,
    cookie: u64,
    request_offset: u64,
    hole_offset: u64,
    len: u32,
    done: bool,
) {
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    encode_chunk_header(
        out,
        style,
        flags,
        REPLY_TYPE_OFFSET_HOLE,
        cookie,
        request_offset,
        12,
    );
    out.extend_from_slice(&hole_offset.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

/// Appends a successful reply without payload: a simple reply, or under
/// extended headers (which forbid simple replies) a `NONE` chunk.
pub fn encode_ok(out: &mut Vec<u8>, style: ReplyStyle, cookie: u64, request_offset: u64) {
    match style {
        ReplyStyle::Simple | ReplyStyle::Structured => simple_header(out, cookie, 0),
        ReplyStyle::Extended => encode_chunk_header(
            out,
            style,
            REPLY_FLAG_DONE,
            REPLY_TYPE_NONE,
            cookie,
            request_offset,
            0,
        ),
    }
}

/// `message` cut to the spec's string limit on a character boundary.
pub(crate) fn clip_message(message: &str) -> &[u8] {
    let mut end = message.len().min(MAX_STRING_LEN);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message.as_bytes()[..end]
}

/// Appends a final error reply: a simple reply carrying the errno, or an
/// `ERROR` chunk with a human-readable message.
pub fn encode_error(
    out: &mut Vec<u8>,
    style: ReplyStyle,
    cookie: u64,
    request_offset: u64,
    errno: NbdErrno,
    message: &str,
) {
    if style == ReplyStyle::Simple {
        simple_header(out, cookie, errno.code());
        return;
    }
    let msg = clip_message(message);
    encode_chunk_header(
        out,
        style,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        request_offset,
        6 + msg.len() as u64,
    );
    out.extend_from_slice(&errno.code().to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
}

/// Appends an `ERROR_OFFSET` chunk (not final) for a failure at
/// `error_offset` inside a chunked reply.
#[allow(clippy::too_many_arguments)]
pub fn encode_error_offset(
    out: &mut Vec<u8>,
    style: ReplyStyle,
    cookie: u64,
    request_offset: u64,
    errno: NbdErrno,
    message: &str,
    error_offset: u64,
    done: bool,
) {
    let msg = clip_message(message);
    let flags = if done { REPLY_FLAG_DONE } else { 0 };
    encode_chunk_header(
        out,
        style,
        flags,
        REPLY_TYPE_ERROR_OFFSET,
        cookie,
        request_offset,
        14 + msg.len() as u64,
    );
    out.extend_from_slice(&errno.code().to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
    out.extend_from_slice(&error_offset.to_be_bytes());
}

/// Appends one final block-status chunk for `context_id`:
/// `BLOCK_STATUS` (32-bit descriptors) for structured replies,
/// `BLOCK_STATUS_EXT` for extended ones. Compact descriptors longer than
/// 32 bits end the list early, which the spec allows. At least one extent
/// must be given.
pub fn encode_block_status(
    out: &mut Vec<u8>,
    style: ReplyStyle,
    cookie: u64,
    request_offset: u64,
    context_id: u32,
    extents: &[Extent],
) {
    debug_assert!(
        !extents.is_empty(),
        "block status needs at least one extent"
    );
    match style {
        ReplyStyle::Extended => {
            let count = extents.len() as u64;
            encode_chunk_header(
                out,
                style,
                REPLY_FLAG_DONE,
                REPLY_TYPE_BLOCK_STATUS_EXT,
                cookie,
                request_offset,
                8 + 16 * count,
            );
            out.extend_from_slice(&context_id.to_be_bytes());
            out.extend_from_slice(&(count as u32).to_be_bytes());
            for e in extents {
                out.extend_from_slice(&e.length.to_be_bytes());
                out.extend_from_slice(&u64::from(e.flags).to_be_bytes());
            }
        }
        ReplyStyle::Structured | ReplyStyle::Simple => {
            let mut n = 0usize;
            for e in extents {
                n += 1;
                if e.length > MAX_COMPACT_EXTENT {
                    break;
                }
            }
            encode_chunk_header(
                out,
                style,
                REPLY_FLAG_DONE,
                REPLY_TYPE_BLOCK_STATUS,
                cookie,
                request_offset,
                4 + 8 * n as u64,
            );
            out.extend_from_slice(&context_id.to_be_bytes());
            for e in &extents[..n] {
                let len = e.length.min(MAX_COMPACT_EXTENT) as u32;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&e.flags.to_be_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_ok_and_error_bytes() {
        let mut out = Vec::new();
        encode_ok(&mut out, ReplyStyle::Simple, 0x0102_0304_0506_0708, 0);
        assert_eq!(
            out,
            [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]
        );
        out.clear();
        encode_error(
            &mut out,
            ReplyStyle::Simple,
            9,
            0,
            NbdErrno::NoSpc,
            "ignored",
        );
        assert_eq!(
            out,
            [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0, 9]
        );
    }

    #[test]
    fn structured_read_header_bytes() {
        let mut out = Vec::new();
        encode_read_data_header(&mut out, ReplyStyle::Structured, 5, 512, 512, 4, true);
        assert_eq!(
            out,
            [
                0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 12, 0, 0, 0,
                0, 0, 0, 2, 0
            ]
        );
        assert_eq!(out.len(), read_data_header_len(ReplyStyle::Structured));
    }

    #[test]
    fn extended_headers_carry_request_offset_and_none_chunk() {
        let mut out = Vec::new();
        encode_ok(&mut out, ReplyStyle::Extended, 1, 4096);
        assert_eq!(out.len(), 32);
        assert_eq!(&out[..8], &[0x6e, 0x8a, 0x27, 0x8c, 0, 1, 0, 0]);
        assert_eq!(&out[16..24], &4096u64.to_be_bytes());
        assert_eq!(&out[24..32], &0u64.to_be_bytes());
        out.clear();
        encode_read_data_header(&mut out, ReplyStyle::Extended, 1, 4096, 8192, 10, false);
        assert_eq!(out.len(), read_data_header_len(ReplyStyle::Extended));
        assert_eq!(&out[4..6], &[0, 0], "not done");
        assert_eq!(&out[24..32], &18u64.to_be_bytes());
        assert_eq!(&out[32..40], &8192u64.to_be_bytes());
    }

    #[test]
    fn structured_error_chunk_has_message() {
        let mut out = Vec::new();
        encode_error(
            &mut out,
            ReplyStyle::Structured,
            3,
            0,
            NbdErrno::Inval,
            "bad",
        );
        assert_eq!(&out[4..8], &[0x00, 0x01, 0x80, 0x01]);
        assert_eq!(&out[16..20], &9u32.to_be_bytes());
        assert_eq!(&out[20..24], &22u32.to_be_bytes());
        assert_eq!(&out[24..26], &3u16.to_be_bytes());
        assert_eq!(&out[26..], b"bad");
    }

    #[test]
    fn error_message_clipped_to_spec_limit_on_char_boundary() {
        let mut out = Vec::new();
        let long = "é".repeat(3000);
        encode_error(&mut out, ReplyStyle::Structured, 3, 0, NbdErrno::Io, &long);
        let len = u16::from_be_bytes([out[24], out[25]]) as usize;
        assert!(len <= MAX_STRING_LEN);
        assert!(std::str::from_utf8(&out[26..26 + len]).is_ok());
    }

    #[test]
    fn block_status_compact_and_extended() {
        let ext = [
            Extent {
                length: 4096,
                flags: 0,
            },
            Extent {
                length: 8192,
                flags: 3,
            },
        ];
        let mut out = Vec::new();
        encode_block_status(&mut out, ReplyStyle::Structured, 1, 0, 7, &ext);
        assert_eq!(&out[6..8], &REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
        assert_eq!(&out[16..20], &20u32.to_be_bytes());
        assert_eq!(&out[20..24], &7u32.to_be_bytes());
        assert_eq!(&out[24..32], &[0, 0, 0x10, 0, 0, 0, 0, 0]);
        assert_eq!(&out[32..40], &[0, 0, 0x20, 0, 0, 0, 0, 3]);
        out.clear();
        encode_block_status(&mut out, ReplyStyle::Extended, 1, 0, 7, &ext);
        assert_eq!(&out[6..8], &REPLY_TYPE_BLOCK_STATUS_EXT.to_be_bytes());
        assert_eq!(&out[24..32], &40u64.to_be_bytes());
        assert_eq!(&out[36..40], &2u32.to_be_bytes());
        assert_eq!(out.len(), 32 + 40);
    }

    #[test]
    fn compact_block_status_stops_at_oversized_extent() {
        let ext = [
            Extent {
                length: 1 << 40,
                flags: 3,
            },
            Extent {
                length: 512,
                flags: 0,
            },
        ];
        let mut out = Vec::new();
        encode_block_status(&mut out, ReplyStyle::Structured, 1, 0, 1, &ext);
        assert_eq!(&out[16..20], &12u32.to_be_bytes());
        assert_eq!(&out[24..28], &0xFFFF_FE00u32.to_be_bytes());
    }
}
