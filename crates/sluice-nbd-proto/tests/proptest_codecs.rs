//! Property tests of the codecs and the handshake machine: request
//! headers round-trip, validation never panics and only accepts commands
//! that lie inside the export, every reply encoder declares the length it
//! writes, and the handshake survives arbitrary input in arbitrary pieces.
//!
//! Wire layouts are parsed here from the spec's field offsets, not with
//! the crate's own decoders; accepted commands are checked against the
//! test kit's oracle (`sluice_testkit::nbd_oracle`), which the fuzz
//! targets share.

use proptest::prelude::*;
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{
    encode_block_status, encode_chunk_header, encode_error, encode_error_offset, encode_hole_chunk,
    encode_ok, encode_read_data_header, read_data_header_len, BlockSizes, ExportCatalog,
    ExportInfo, Extent, HandshakeConfig, HandshakeError, HandshakeStatus, HeaderStyle, NbdErrno,
    ReplyStyle, RequestHeader, ServerHandshake, TransmissionParams,
};
use sluice_testkit::nbd_oracle::check_accepted;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

// ---------------------------------------------------------------------------
// Strategies

/// u64s that hit edges more often than uniform sampling would.
fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..=4096u64,
        (0..64u32).prop_map(|s| 1u64 << s),
        (0..64u32).prop_map(|s| (1u64 << s).wrapping_sub(1)),
        (0..64u32, 1..=4096u64).prop_map(|(s, d)| (1u64 << s).wrapping_sub(d)),
        Just(u64::MAX),
    ]
}

fn header_style() -> impl Strategy<Value = HeaderStyle> {
    prop_oneof![Just(HeaderStyle::Compact), Just(HeaderStyle::Extended)]
}

fn chunked_style() -> impl Strategy<Value = ReplyStyle> {
    prop_oneof![Just(ReplyStyle::Structured), Just(ReplyStyle::Extended)]
}

fn any_reply_style() -> impl Strategy<Value = ReplyStyle> {
    prop_oneof![
        Just(ReplyStyle::Simple),
        Just(ReplyStyle::Structured),
        Just(ReplyStyle::Extended)
    ]
}

fn request_header() -> impl Strategy<Value = RequestHeader> {
    (
        any::<u16>(),
        any::<u16>(),
        any::<u64>(),
        edgy_u64(),
        edgy_u64(),
    )
        .prop_map(|(flags, kind, cookie, offset, length)| RequestHeader {
            flags,
            kind,
            cookie,
            offset,
            length,
        })
}

fn params() -> impl Strategy<Value = TransmissionParams> {
    (
        edgy_u64(),
        any::<u16>(),
        header_style(),
        any_reply_style(),
        prop_oneof![any::<u32>(), Just(DEFAULT_MAX_PAYLOAD), 0..=65536u32],
        prop_oneof![
            (0..=16u32).prop_map(|s| 1u32 << s),
            any::<u32>(),
            Just(0u32)
        ],
        any::<bool>(),
    )
        .prop_map(
            |(size, flags, header_style, reply_style, max_payload, min_block, block_status)| {
                TransmissionParams {
                    size,
                    flags,
                    header_style,
                    reply_style,
                    max_payload,
                    min_block,
                    block_status,
                }
            },
        )
}

/// A header aimed at `p`: known commands and flags most of the time,
/// offsets and lengths around the export's end and block size.
fn header_for(p: TransmissionParams) -> impl Strategy<Value = RequestHeader> {
    let near = move |x: u64| {
        prop_oneof![
            edgy_u64(),
            0..=x.min(1 << 40),
            (0..=8192u64).prop_map(move |d| x.saturating_sub(d)),
            (0..=64u64).prop_map(move |k| k.saturating_mul(u64::from(p.min_block.max(1)))),
        ]
    };
    (
        prop_oneof![0..=9u16, any::<u16>()],
        prop_oneof![0..=0x3fu16, any::<u16>()],
        any::<u64>(),
        near(p.size),
        near(p.size),
    )
        .prop_map(|(kind, flags, cookie, offset, length)| RequestHeader {
            flags,
            kind,
            cookie,
            offset,
            length,
        })
}

// ---------------------------------------------------------------------------
// Request headers

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn extended_header_round_trips(h in request_header()) {
        let mut out = Vec::new();
        h.encode(HeaderStyle::Extended, &mut out);
        prop_assert_eq!(out.len(), 32);
        prop_assert_eq!(be32(&out, 0), 0x21e4_1c71);
        prop_assert_eq!(be16(&out, 4), h.flags);
        prop_assert_eq!(be16(&out, 6), h.kind);
        prop_assert_eq!(be64(&out, 8), h.cookie);
        prop_assert_eq!(be64(&out, 16), h.offset);
        prop_assert_eq!(be64(&out, 24), h.length);
        let back = RequestHeader::decode(&out, HeaderStyle::Extended);
        prop_assert_eq!(back, Ok(Some(h)));
    }

    #[test]
    fn compact_header_round_trips_low_32_bits_of_length(h in request_header()) {
        let mut out = Vec::new();
        h.encode(HeaderStyle::Compact, &mut out);
        prop_assert_eq!(out.len(), 28);
        prop_assert_eq!(be32(&out, 0), 0x2560_9513);
        prop_assert_eq!(be32(&out, 24), h.length as u32);
        let back = RequestHeader::decode(&out, HeaderStyle::Compact)
            .expect("own magic")
            .expect("whole header");
        prop_assert_eq!(back, RequestHeader { length: u64::from(h.length as u32), ..h });
        // Headers whose length fits 32 bits round-trip exactly.
        if h.length <= u64::from(u32::MAX) {
            prop_assert_eq!(back, h);
        }
    }

    #[test]
    fn decode_reads_spec_offsets_from_any_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..48),
        style in header_style(),
        fix_magic in any::<bool>(),
    ) {
        let mut bytes = bytes;
        let magic: u32 = match style {
            HeaderStyle::Compact => 0x2560_9513,
            HeaderStyle::Extended => 0x21e4_1c71,
        };
        if fix_magic && bytes.len() >= 4 {
            bytes[..4].copy_from_slice(&magic.to_be_bytes());
        }
        let need = match style {
            HeaderStyle::Compact => 28,
            HeaderStyle::Extended => 32,
        };
        match RequestHeader::decode(&bytes, style) {
            Ok(None) => prop_assert!(bytes.len() < need),
            Ok(Some(h)) => {
                prop_assert!(bytes.len() >= need);
                prop_assert_eq!(be32(&bytes, 0), magic);
                prop_assert_eq!(h.flags, be16(&bytes, 4));
                prop_assert_eq!(h.kind, be16(&bytes, 6));
                prop_assert_eq!(h.cookie, be64(&bytes, 8));
                prop_assert_eq!(h.offset, be64(&bytes, 16));
                let length = match style {
                    HeaderStyle::Compact => u64::from(be32(&bytes, 24)),
                    HeaderStyle::Extended => be64(&bytes, 24),
                };
                prop_assert_eq!(h.length, length);
            }
            Err(_) => {
                prop_assert!(bytes.len() >= need);
                prop_assert_ne!(be32(&bytes, 0), magic);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Validation

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn validate_accepts_only_commands_inside_the_export(
        (p, h) in params().prop_flat_map(|p| (Just(p), header_for(p))),
    ) {
        match p.validate(&h) {
            Ok(cmd) => {
                if let Err(e) = check_accepted(&p, &h, cmd) {
                    return Err(TestCaseError::fail(e));
                }
            }
            Err(rej) => {
                prop_assert_ne!(rej.errno.code(), 0);
                prop_assert!(!rej.reason.is_empty());
            }
        }
    }

    #[test]
    fn validate_never_panics_on_arbitrary_headers(p in params(), h in request_header()) {
        if let Ok(cmd) = p.validate(&h) {
            if let Err(e) = check_accepted(&p, &h, cmd) {
                return Err(TestCaseError::fail(e));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Reply encoders: the length a chunk header declares is what follows it.

/// Parses one chunk header (structured: 20 bytes, extended: 32) and
/// returns (flags, type, cookie, request offset, declared length, header
/// length).
fn chunk_header(out: &[u8], style: ReplyStyle) -> (u16, u16, u64, Option<u64>, u64, usize) {
    match style {
        ReplyStyle::Extended => {
            assert_eq!(be32(out, 0), 0x6e8a_278c, "extended reply magic");
            (
                be16(out, 4),
                be16(out, 6),
                be64(out, 8),
                Some(be64(out, 16)),
                be64(out, 24),
                32,
            )
        }
        _ => {
            assert_eq!(be32(out, 0), 0x668e_33ef, "structured reply magic");
            (
                be16(out, 4),
                be16(out, 6),
                be64(out, 8),
                None,
                u64::from(be32(out, 16)),
                20,
            )
        }
    }
}

fn errno() -> impl Strategy<Value = NbdErrno> {
    prop_oneof![
        Just(NbdErrno::Perm),
        Just(NbdErrno::Io),
        Just(NbdErrno::NoMem),
        Just(NbdErrno::Inval),
        Just(NbdErrno::NoSpc),
        Just(NbdErrno::Overflow),
        Just(NbdErrno::NotSup),
        Just(NbdErrno::Shutdown),
    ]
}

fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        ".{0,64}",
        (0..6000usize).prop_map(|n| "x".repeat(n)),
        (0..2000usize).prop_map(|n| "é€😀".repeat(n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn chunk_header_declares_the_given_length(
        style in chunked_style(),
        flags in any::<u16>(),
        kind in any::<u16>(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
        len in edgy_u64(),
    ) {
        let mut out = Vec::new();
        encode_chunk_header(&mut out, style, flags, kind, cookie, offset, len);
        let (f, k, c, o, declared, hl) = chunk_header(&out, style);
        prop_assert_eq!(out.len(), hl);
        prop_assert_eq!((f, k, c), (flags, kind, cookie));
        match style {
            ReplyStyle::Extended => {
                prop_assert_eq!(o, Some(offset));
                prop_assert_eq!(declared, len);
            }
            _ => prop_assert_eq!(declared, u64::from(len as u32)),
        }
    }

    #[test]
    fn ok_reply_is_simple_or_an_empty_none_chunk(
        style in any_reply_style(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
    ) {
        let mut out = Vec::new();
        encode_ok(&mut out, style, cookie, offset);
        if style == ReplyStyle::Extended {
            let (f, k, c, o, declared, hl) = chunk_header(&out, style);
            prop_assert_eq!((f, k, c, o), (REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, Some(offset)));
            prop_assert_eq!(declared, (out.len() - hl) as u64);
            prop_assert_eq!(declared, 0);
        } else {
            prop_assert_eq!(out.len(), 16);
            prop_assert_eq!(be32(&out, 0), 0x6744_6698);
            prop_assert_eq!(be32(&out, 4), 0);
            prop_assert_eq!(be64(&out, 8), cookie);
        }
    }

    #[test]
    fn error_chunk_declares_its_length_and_message(
        style in any_reply_style(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
        err in errno(),
        msg in message(),
    ) {
        let mut out = Vec::new();
        encode_error(&mut out, style, cookie, offset, err, &msg);
        if style == ReplyStyle::Simple {
            prop_assert_eq!(out.len(), 16);
            prop_assert_eq!(be32(&out, 0), 0x6744_6698);
            prop_assert_eq!(be32(&out, 4), err.code());
            prop_assert_eq!(be64(&out, 8), cookie);
            return Ok(());
        }
        let (f, k, c, _, declared, hl) = chunk_header(&out, style);
        prop_assert_eq!((f, k, c), (REPLY_FLAG_DONE, REPLY_TYPE_ERROR, cookie));
        prop_assert_eq!(declared, (out.len() - hl) as u64);
        let payload = &out[hl..];
        prop_assert_eq!(be32(payload, 0), err.code());
        let mlen = usize::from(be16(payload, 4));
        prop_assert_eq!(mlen, payload.len() - 6);
        prop_assert!(mlen <= MAX_STRING_LEN);
        let text = std::str::from_utf8(&payload[6..]).expect("message is UTF-8");
        prop_assert!(msg.starts_with(text));
    }

    #[test]
    fn error_offset_chunk_declares_its_length(
        style in chunked_style(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
        err in errno(),
        msg in message(),
        at in any::<u64>(),
        done in any::<bool>(),
    ) {
        let mut out = Vec::new();
        encode_error_offset(&mut out, style, cookie, offset, err, &msg, at, done);
        let (f, k, c, _, declared, hl) = chunk_header(&out, style);
        prop_assert_eq!(f & REPLY_FLAG_DONE != 0, done);
        prop_assert_eq!((k, c), (REPLY_TYPE_ERROR_OFFSET, cookie));
        prop_assert_eq!(declared, (out.len() - hl) as u64);
        let payload = &out[hl..];
        prop_assert_eq!(be32(payload, 0), err.code());
        let mlen = usize::from(be16(payload, 4));
        prop_assert_eq!(payload.len(), 6 + mlen + 8);
        prop_assert!(mlen <= MAX_STRING_LEN);
        prop_assert!(std::str::from_utf8(&payload[6..6 + mlen]).is_ok());
        prop_assert_eq!(be64(payload, 6 + mlen), at);
    }

    #[test]
    fn hole_chunk_declares_its_length(
        style in chunked_style(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
        hole in any::<u64>(),
        len in any::<u32>(),
        done in any::<bool>(),
    ) {
        let mut out = Vec::new();
        encode_hole_chunk(&mut out, style, cookie, offset, hole, len, done);
        let (f, k, c, _, declared, hl) = chunk_header(&out, style);
        prop_assert_eq!(f & REPLY_FLAG_DONE != 0, done);
        prop_assert_eq!((k, c), (REPLY_TYPE_OFFSET_HOLE, cookie));
        prop_assert_eq!(declared, (out.len() - hl) as u64);
        prop_assert_eq!(be64(&out, hl), hole);
        prop_assert_eq!(be32(&out, hl + 8), len);
    }

    /// The read data header is followed by `len` bytes the caller sends,
    /// so the declared length is the 8-byte offset plus `len`.
    #[test]
    fn read_data_header_declares_offset_plus_data(
        style in any_reply_style(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
        data_offset in any::<u64>(),
        len in any::<u32>(),
        done in any::<bool>(),
    ) {
        let mut out = Vec::new();
        encode_read_data_header(&mut out, style, cookie, offset, data_offset, len, done);
        prop_assert_eq!(out.len(), read_data_header_len(style));
        if style == ReplyStyle::Simple {
            prop_assert_eq!(be32(&out, 0), 0x6744_6698);
            prop_assert_eq!(be32(&out, 4), 0);
            prop_assert_eq!(be64(&out, 8), cookie);
            return Ok(());
        }
        let (f, k, c, o, declared, hl) = chunk_header(&out, style);
        prop_assert_eq!(f & REPLY_FLAG_DONE != 0, done);
        prop_assert_eq!((k, c), (REPLY_TYPE_OFFSET_DATA, cookie));
        if style == ReplyStyle::Extended {
            prop_assert_eq!(o, Some(offset));
        }
        prop_assert_eq!(declared, (out.len() - hl) as u64 + u64::from(len));
        prop_assert_eq!(be64(&out, hl), data_offset);
    }

    #[test]
    fn block_status_chunk_declares_its_length(
        style in chunked_style(),
        cookie in any::<u64>(),
        offset in any::<u64>(),
        id in any::<u32>(),
        extents in prop::collection::vec(
            (prop_oneof![1..=u64::MAX, 1..=0x1_0000_0000u64, 0xFFFF_FD00..=0x1_0000_0100u64],
             any::<u32>()),
            1..40,
        ),
    ) {
        let extents: Vec<Extent> = extents
            .into_iter()
            .map(|(length, flags)| Extent { length, flags })
            .collect();
        let mut out = Vec::new();
        encode_block_status(&mut out, style, cookie, offset, id, &extents);
        let (f, k, c, _, declared, hl) = chunk_header(&out, style);
        prop_assert_eq!((f, c), (REPLY_FLAG_DONE, cookie));
        prop_assert_eq!(declared, (out.len() - hl) as u64);
        let payload = &out[hl..];
        prop_assert_eq!(be32(payload, 0), id);
        match style {
            ReplyStyle::Extended => {
                prop_assert_eq!(k, REPLY_TYPE_BLOCK_STATUS_EXT);
                let count = be32(payload, 4) as usize;
                prop_assert_eq!(count, extents.len());
                prop_assert_eq!(payload.len(), 8 + 16 * count);
                for (i, e) in extents.iter().enumerate() {
                    prop_assert_eq!(be64(payload, 8 + 16 * i), e.length);
                    prop_assert_eq!(be64(payload, 16 + 16 * i), u64::from(e.flags));
                }
            }
            _ => {
                prop_assert_eq!(k, REPLY_TYPE_BLOCK_STATUS);
                prop_assert_eq!((payload.len() - 4) % 8, 0);
                let n = (payload.len() - 4) / 8;
                prop_assert!(n >= 1 && n <= extents.len());
                for (i, e) in extents.iter().take(n).enumerate() {
                    let len = be32(payload, 4 + 8 * i);
                    prop_assert!(len > 0);
                    prop_assert_eq!(u64::from(len), e.length.min(0xFFFF_FE00));
                    prop_assert_eq!(be32(payload, 8 + 8 * i), e.flags);
                }
                // Descriptors stop only after an extent too long for 32 bits.
                if n < extents.len() {
                    prop_assert!(extents[n - 1].length > 0xFFFF_FE00);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The handshake machine on arbitrary input

struct Catalog;

impl ExportCatalog for Catalog {
    fn list(&self) -> Vec<(String, String)> {
        vec![("a".into(), "first".into()), ("b".into(), String::new())]
    }

    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        let (name, base_allocation) = match name {
            "" | "a" => ("a", true),
            "b" => ("b", true),
            "c" => ("c", false),
            _ => return None,
        };
        Some(ExportInfo {
            name: name.into(),
            description: String::new(),
            size: 1 << 20,
            flags: 0x0fff,
            block_sizes: BlockSizes::default(),
            base_allocation,
        })
    }
}

#[derive(Debug, PartialEq)]
struct Run {
    output: Vec<u8>,
    outcome: Option<Result<HandshakeStatus, HandshakeError>>,
}

/// Feeds pieces the way a server loop does; checks `consumed <= given`.
fn run(pieces: &[&[u8]]) -> Run {
    let mut hs = ServerHandshake::new(HandshakeConfig {
        max_option_len: 256,
        ..HandshakeConfig::default()
    });
    let mut output = hs.poll_output();
    let mut pending = Vec::new();
    let mut outcome = None;
    for piece in pieces {
        pending.extend_from_slice(piece);
        let r = hs.handle_input(&pending, &Catalog);
        output.extend(hs.poll_output());
        match r {
            Ok((used, status)) => {
                assert!(
                    used <= pending.len(),
                    "consumed {used} of {}",
                    pending.len()
                );
                pending.drain(..used);
                let end = status != HandshakeStatus::NeedInput;
                outcome = Some(Ok(status));
                if end {
                    assert_eq!(
                        hs.handle_input(&[0; 16], &Catalog),
                        Err(HandshakeError::Finished)
                    );
                    break;
                }
            }
            Err(e) => {
                outcome = Some(Err(e));
                break;
            }
        }
    }
    if let Some(Ok(HandshakeStatus::Done(n))) = &outcome {
        let p = &n.params;
        let chunked = p.reply_style.chunked();
        assert!(p.flags & FLAG_HAS_FLAGS != 0);
        assert_eq!(
            p.flags & FLAG_SEND_DF != 0,
            chunked,
            "DF iff chunked replies"
        );
        assert_eq!(
            p.header_style == HeaderStyle::Extended,
            p.reply_style == ReplyStyle::Extended
        );
        assert_eq!(p.block_status, n.base_allocation_id.is_some());
        if p.block_status {
            assert!(chunked && n.export.base_allocation);
        }
    }
    Run { output, outcome }
}

/// Splits `bytes` at the given cut points.
fn cut<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut pieces = Vec::new();
    let mut last = 0;
    for p in points {
        pieces.push(&bytes[last..p]);
        last = p;
    }
    pieces.push(&bytes[last..]);
    pieces
}

/// A plausible option: a known or unknown option number with data that
/// is well formed, random, or empty.
fn option_bytes() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just(String::new()),
        Just("a".to_string()),
        Just("b".to_string()),
        Just("c".to_string()),
        "[a-z]{0,3}",
    ];
    let query = prop_oneof![
        Just(b"base:allocation".to_vec()),
        Just(b"base:".to_vec()),
        Just(b"qemu:dirty-bitmap:x".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    let go = (name.clone(), prop::collection::vec(0..5u16, 0..4)).prop_map(|(n, reqs)| {
        let mut d = (n.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(n.as_bytes());
        d.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
        for r in reqs {
            d.extend_from_slice(&r.to_be_bytes());
        }
        d
    });
    let meta = (name, prop::collection::vec(query, 0..3)).prop_map(|(n, qs)| {
        let mut d = (n.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(n.as_bytes());
        d.extend_from_slice(&(qs.len() as u32).to_be_bytes());
        for q in qs {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(&q);
        }
        d
    });
    let data = prop_oneof![
        4 => Just(Vec::new()),
        3 => go,
        3 => meta,
        2 => prop::collection::vec(any::<u8>(), 0..32),
        1 => prop::collection::vec(any::<u8>(), 250..300),
    ];
    (
        prop_oneof![
            // Mostly non-final options so sequences get somewhere.
            8 => prop::sample::select(vec![3u32, 5, 6, 8, 9, 10, 11]),
            1 => prop::sample::select(vec![1u32, 2, 7]),
            1 => any::<u32>(),
        ],
        data,
    )
        .prop_map(|(option, data)| {
            let mut o = b"IHAVEOPT".to_vec();
            o.extend_from_slice(&option.to_be_bytes());
            o.extend_from_slice(&(data.len() as u32).to_be_bytes());
            o.extend_from_slice(&data);
            o
        })
}

fn session_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![8 => 0..=3u32, 1 => any::<u32>()],
        prop::collection::vec(option_bytes(), 0..12),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(flags, opts, tail)| {
            let mut v = flags.to_be_bytes().to_vec();
            for o in opts {
                v.extend_from_slice(&o);
            }
            v.extend_from_slice(&tail);
            v
        })
}

/// Everything the server sends after the greeting is a sequence of
/// option replies, except the EXPORT_NAME answer that ends it.
fn check_output_framing(output: &[u8], outcome: &Option<Result<HandshakeStatus, HandshakeError>>) {
    let mut rest = &output[18..];
    while rest.len() >= 20 && be64(rest, 0) == OPTION_REPLY_MAGIC {
        let len = be32(rest, 16) as usize;
        assert!(rest.len() >= 20 + len, "option reply cut short");
        rest = &rest[20 + len..];
    }
    if !rest.is_empty() {
        // Only NBD_OPT_EXPORT_NAME's reply: size, flags, maybe zeroes.
        assert!(
            matches!(outcome, Some(Ok(HandshakeStatus::Done(_)))),
            "unframed output {rest:02x?}"
        );
        assert!(rest.len() == 10 || rest.len() == 134, "{}", rest.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn handshake_survives_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = run(&[&bytes]);
        let pieces = run(&cut(&bytes, &cuts));
        prop_assert_eq!(&pieces.output, &whole.output);
        prop_assert_eq!(&pieces.outcome, &whole.outcome);
    }

    #[test]
    fn handshake_is_consistent_on_plausible_sessions(
        bytes in session_bytes(),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let whole = run(&[&bytes]);
        check_output_framing(&whole.output, &whole.outcome);
        let pieces = run(&cut(&bytes, &cuts));
        prop_assert_eq!(&pieces.output, &whole.output);
        prop_assert_eq!(&pieces.outcome, &whole.outcome);
    }
}
