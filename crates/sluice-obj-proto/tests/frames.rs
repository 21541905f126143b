#![allow(clippy::unwrap_used)]

//! Byte-vector tests: exact bytes of every transmission frame in, exact
//! values out and back, written from the layouts in `docs/protocol.md`;
//! and one test per kind of bad input.

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    decode_id_list, encode_id_list, encode_page, AttrOp, AttrOps, AttrValue, Command, Ddt, DdtKind,
    ErrorCode, Features, FlushScope, FrameError, Limits, Negotiated, Page, ReplyDecodeError,
    ReplyHeader, Request, RequestHeader, Segment,
};

/// Hex string (whitespace ignored) to bytes.
fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
        .collect()
}

fn session(features: Features) -> Negotiated {
    Negotiated {
        version: 1,
        features,
        limits: Limits {
            max_segments: 8,
            max_payload: 1 << 16,
            max_batch: 4,
            max_attr_size: 16,
        },
        partition: 0x10,
        tls: false,
        exports: vec![sluice_obj_proto::AttachedExport {
            handle: 1,
            name: "vol".into(),
            size: 1 << 20,
            read_only: false,
        }],
    }
}

fn all() -> Negotiated {
    session(Features::NEGOTIABLE)
}

/// A header with the given fields and the region lengths of `regions`
/// (DDT, parameters, attributes, data), and its frame bytes.
fn frame(mut h: RequestHeader, regions: [&[u8]; 4]) -> (RequestHeader, Vec<u8>) {
    h.ddt_len = regions[0].len() as u32;
    h.param_len = regions[1].len() as u32;
    h.attr_len = regions[2].len() as u32;
    h.data_len = regions[3].len() as u32;
    let mut out = Vec::new();
    h.encode(&mut out);
    for r in regions {
        out.extend_from_slice(r);
    }
    (h, out)
}

/// Validates a frame; one that is accepted must encode back to exactly
/// its bytes (the typed request is the one definition of both ways), and
/// decoding it again without the session gives the same request (what a
/// server does where it runs a request it checked on arrival).
fn validate<'a>(
    s: &Negotiated,
    bytes: &'a [u8],
) -> Result<Request<'a>, sluice_obj_proto::Rejected> {
    let h = RequestHeader::decode(bytes)
        .expect("magic")
        .expect("whole header");
    let payload = &bytes[REQUEST_HEADER_LEN..];
    let req = s.validate(&h, payload)?;
    assert_eq!(Request::decode(&h, payload, &s.limits), Ok(req));
    let mut again = Vec::new();
    req.encode(h.partition, &mut again).expect("encodes");
    assert_eq!(
        hex_of(&again),
        hex_of(bytes),
        "{:?} does not encode back to its frame",
        req.command
    );
    Ok(req)
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

// ---------------------------------------------------------------------------
// Request header and DDTs

const SGL_READ: &str = "
    53524551 0001 0004 0000000000000007 0000000000000010 0000000000000022
    0000000000000000 0000000000000006 00000024 00000000 00000000 00000000
    00000002 0000000000001000 0000000000000004 0000000000000000 0000000000000002";

#[test]
fn sgl_read_decodes_to_its_fields_and_segments() {
    let bytes = hex(SGL_READ);
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    assert_eq!(
        h,
        RequestHeader {
            flags: 1,
            opcode: OP_READ,
            id: 7,
            partition: 0x10,
            object: 0x22,
            offset: 0,
            length: 6,
            ddt_len: 36,
            param_len: 0,
            attr_len: 0,
            data_len: 0,
        }
    );
    let mut again = Vec::new();
    h.encode(&mut again);
    assert_eq!(again, bytes[..64]);
    let req = all().validate(&h, &bytes[64..]).unwrap();
    let Command::Read { object: 0x22, ddt } = req.command else {
        panic!("not a read: {req:?}")
    };
    assert_eq!(ddt.kind(), DdtKind::Sgl);
    // List order, not sorted: the data travels in this order.
    assert_eq!(
        ddt.segments().collect::<Vec<_>>(),
        [
            Segment {
                offset: 0x1000,
                length: 4
            },
            Segment {
                offset: 0,
                length: 2
            }
        ]
    );
    let mut ddt_bytes = Vec::new();
    ddt.encode(&mut ddt_bytes);
    assert_eq!(ddt_bytes, bytes[64..]);
}

#[test]
fn strided_write_carries_exactly_its_data() {
    let bytes = hex(
        "53524551 0006 0005 0000000000000009 0000000000000010 0000000000000022
         0000000000000100 0000000000000006 00000014 00000000 00000000 00000006
         0000000000000010 0000000000000002 00000003
         616263646566",
    );
    let req = validate(&all(), &bytes).unwrap();
    assert!(req.fua);
    let Command::Write {
        object: 0x22,
        ddt,
        data,
    } = req.command
    else {
        panic!("not a write: {req:?}")
    };
    assert_eq!(data, b"abcdef");
    assert_eq!(
        ddt.segments()
            .map(|s| (s.offset, s.length))
            .collect::<Vec<_>>(),
        [(0x100, 2), (0x110, 2), (0x120, 2)]
    );
    assert_eq!(ddt.total(), 6);
    assert_eq!(ddt.end(), 0x122);
}

#[test]
fn contiguous_read_with_attributes_riding_on_it() {
    // GET "len", SET "k" = integer -2.
    let attrs = hex("0002 01 03 6c656e 02 01 6b 00 00000008 fffffffffffffffe");
    let (_, bytes) = frame(
        RequestHeader {
            opcode: OP_READ,
            id: 1,
            partition: 0x10,
            object: 5,
            offset: 4096,
            length: 512,
            ..Default::default()
        },
        [&[], &[], &attrs, &[]],
    );
    let req = validate(&all(), &bytes).unwrap();
    assert_eq!(
        req.command,
        Command::Read {
            object: 5,
            ddt: Ddt::Contiguous(Segment {
                offset: 4096,
                length: 512
            })
        }
    );
    assert_eq!(
        req.attrs.iter().collect::<Vec<_>>(),
        [AttrOp::Get("len"), AttrOp::Set("k", AttrValue::Integer(-2))]
    );
    let mut again = Vec::new();
    AttrOps::encode(&req.attrs.iter().collect::<Vec<_>>(), &mut again);
    assert_eq!(again, attrs);
    // Without ATTRS_ON_DATA the same request is refused.
    let err = validate(&session(Features::BATCH), &bytes).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotNegotiated);
}

#[test]
fn create_list_query_flush_parameters() {
    let s = all();
    let base = RequestHeader {
        partition: 0x10,
        id: 3,
        ..Default::default()
    };
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_CREATE,
            ..base
        },
        [&[], &hex("00000003 05 70686f746f"), &[], &[]],
    );
    assert_eq!(
        validate(&s, &b).unwrap().command,
        Command::Create {
            count: 3,
            collection: "photo"
        }
    );
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_LIST,
            flags: FLAG_WITH_ATTRS,
            ..base
        },
        [
            &[],
            &hex("0000000000000009 00000008 00"),
            &hex("0001 01 01 61"),
            &[],
        ],
    );
    let r = validate(&s, &b).unwrap();
    assert_eq!(
        r.command,
        Command::List {
            collection: "",
            cursor: 9,
            max: 8,
            with_attrs: true
        }
    );
    assert_eq!(r.attrs.iter().collect::<Vec<_>>(), [AttrOp::Get("a")]);
    // QUERY: size in 10..=20 over collection "c".
    let (_, b) = frame(
        RequestHeader { opcode: OP_QUERY, ..base },
        [
            &[],
            &hex("0000000000000000 00000008 01 63 0001 04 73697a65 00 00000008 000000000000000a 00 00000008 0000000000000014"),
            &[],
            &[],
        ],
    );
    let Command::Query {
        collection: "c",
        ranges,
        ..
    } = validate(&s, &b).unwrap().command
    else {
        panic!("not a query")
    };
    let r: Vec<_> = ranges.iter().collect();
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].key, r[0].min, r[0].max),
        ("size", AttrValue::Integer(10), AttrValue::Integer(20))
    );
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_FLUSH,
            flags: 1 << FLAG_SCOPE_SHIFT,
            ..base
        },
        [&[], &hex("01 63"), &[], &[]],
    );
    assert_eq!(
        validate(&s, &b).unwrap().command,
        Command::Flush(FlushScope::Collection("c"))
    );
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_FLUSH,
            flags: 2 << FLAG_SCOPE_SHIFT,
            ..base
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(
        validate(&s, &b).unwrap().command,
        Command::Flush(FlushScope::Partition)
    );
}

#[test]
fn extent_commands_address_an_attached_export() {
    let s = all();
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_EXTENT_READ,
            object: 1,
            offset: (1 << 20) - 8,
            length: 8,
            id: 4,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    assert!(matches!(
        validate(&s, &b).unwrap().command,
        Command::ExtentRead { export: 1, .. }
    ));
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_EXTENT_READ,
            object: 1,
            offset: (1 << 20) - 8,
            length: 9,
            id: 4,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(validate(&s, &b).unwrap_err().code, ErrorCode::OutOfRange);
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_EXTENT_READ,
            object: 2,
            length: 1,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(validate(&s, &b).unwrap_err().code, ErrorCode::NoSuchObject);
}

// ---------------------------------------------------------------------------
// Replies

#[test]
fn read_reply_header_bytes() {
    let bytes = hex("53524550 0000 0000 0000000000000007 0000000000000004 00000000 00000006");
    let h = ReplyHeader::decode(&bytes).unwrap().unwrap();
    assert_eq!(h, ReplyHeader::ok(7, 4, 0, 6));
    let mut again = Vec::new();
    h.encode(&mut again);
    assert_eq!(again, bytes);
    assert_eq!(ReplyHeader::decode(&bytes[..31]), Ok(None));
}

#[test]
fn error_reply_carries_code_and_message() {
    let mut out = Vec::new();
    ReplyHeader::encode_error(9, ErrorCode::BadDdt, "stride", &mut out);
    assert_eq!(
        out,
        hex("53524550 0004 0000 0000000000000009 0000000000000000 00000000 00000006 737472696465")
    );
    let h = ReplyHeader::decode(&out).unwrap().unwrap();
    assert_eq!(h.status, Some(ErrorCode::BadDdt));
    assert_eq!(&out[32..], b"stride");
    // An error reply with attributes is out of sync.
    let mut bad = out.clone();
    bad[27] = 1;
    assert!(matches!(
        ReplyHeader::decode(&bad),
        Err(ReplyDecodeError::AttrsOnError { .. })
    ));
    bad = out;
    bad[0] = 0;
    assert!(matches!(
        ReplyHeader::decode(&bad),
        Err(ReplyDecodeError::BadMagic(_))
    ));
}

#[test]
fn error_message_is_cut_at_a_character_boundary() {
    let long = "é".repeat(MAX_MESSAGE_LEN);
    let mut out = Vec::new();
    ReplyHeader::encode_error(1, ErrorCode::Io, &long, &mut out);
    let h = ReplyHeader::decode(&out).unwrap().unwrap();
    assert_eq!(h.body_len as usize, MAX_MESSAGE_LEN);
    assert!(std::str::from_utf8(&out[32..]).is_ok());
}

#[test]
fn id_list_and_page_bodies() {
    let mut out = Vec::new();
    encode_id_list(&[1, 0x0102030405060708], &mut out);
    assert_eq!(out, hex("00000002 0000000000000001 0102030405060708"));
    assert_eq!(decode_id_list(&out).unwrap(), [1, 0x0102030405060708]);
    assert!(decode_id_list(&out[..11]).is_err());

    let attrs = hex("0001 02 01 6b 01 00000002 6869");
    let mut page = Vec::new();
    encode_page(0, &[(5, &attrs), (6, &[])], &mut page);
    assert_eq!(
        page,
        hex("0000000000000000 00000002 0000000000000005 0000000c 0001 02 01 6b 01 00000002 6869 0000000000000006 00000000")
    );
    let p = Page::decode(&page, 16).unwrap();
    assert_eq!(p.next, 0);
    assert_eq!(p.entries.len(), 2);
    assert_eq!(
        p.entries[0].attrs.iter().collect::<Vec<_>>(),
        [AttrOp::Set("k", AttrValue::Text("hi"))]
    );
    assert!(p.entries[1].attrs.is_empty());
    assert!(Page::decode(&page[..page.len() - 1], 16).is_err());
}

// ---------------------------------------------------------------------------
// Batch

#[test]
fn batch_with_one_bad_member_answers_each_on_its_own() {
    let s = all();
    let base = RequestHeader {
        partition: 0x10,
        ..Default::default()
    };
    let (_, good1) = frame(
        RequestHeader {
            opcode: OP_READ,
            id: 1,
            object: 1,
            length: 4,
            ..base
        },
        [&[], &[], &[], &[]],
    );
    // Stride smaller than length.
    let (_, bad) = frame(
        RequestHeader {
            opcode: OP_READ,
            flags: 2,
            id: 2,
            object: 1,
            length: 8,
            ..base
        },
        [
            &hex("0000000000000002 0000000000000004 00000002"),
            &[],
            &[],
            &[],
        ],
    );
    let (_, good3) = frame(
        RequestHeader {
            opcode: OP_REMOVE,
            id: 3,
            object: 1,
            ..base
        },
        [&[], &[], &[], &[]],
    );
    let body = [good1, bad, good3].concat();
    let (bh, bytes) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            id: 100,
            ..base
        },
        [&[], &[], &[], &body],
    );
    assert_eq!(&bytes[..8], hex("53524551 0000 000f").as_slice());
    let members = s.split_batch(&bh, &bytes[64..]).unwrap();
    let results: Vec<_> = members
        .map(|(h, p)| (h.id, s.validate(&h, p).map(|r| r.command)))
        .collect();
    assert_eq!(results.len(), 3);
    assert!(matches!(results[0], (1, Ok(Command::Read { .. }))));
    assert!(
        matches!(&results[1], (2, Err(e)) if e.code == ErrorCode::BadDdt && e.message.contains("stride"))
    );
    assert!(matches!(results[2], (3, Ok(Command::Remove { object: 1 }))));

    // A member that runs past the body refuses the whole batch.
    let (bh, bytes) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            id: 100,
            ..base
        },
        [&[], &[], &[], &body[..body.len() - 1]],
    );
    assert_eq!(
        s.split_batch(&bh, &bytes[64..]).unwrap_err().code,
        ErrorCode::BadBatch
    );
    // Not negotiated.
    let (bh, bytes) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            id: 100,
            ..base
        },
        [&[], &[], &[], &body],
    );
    assert_eq!(
        session(Features::ATTRS_ON_DATA)
            .split_batch(&bh, &bytes[64..])
            .unwrap_err()
            .code,
        ErrorCode::NotNegotiated
    );
    // Over the member limit (4).
    let (_, one) = frame(
        RequestHeader {
            opcode: OP_REMOVE,
            id: 3,
            object: 1,
            ..base
        },
        [&[], &[], &[], &[]],
    );
    let five = one.repeat(5);
    let (bh, bytes) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            ..base
        },
        [&[], &[], &[], &five],
    );
    assert_eq!(
        s.split_batch(&bh, &bytes[64..]).unwrap_err().code,
        ErrorCode::BadBatch
    );
    // Empty, and nested.
    let (bh, bytes) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            ..base
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(
        s.split_batch(&bh, &bytes[64..]).unwrap_err().code,
        ErrorCode::BadBatch
    );
    let (_, inner) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            ..base
        },
        [&[], &[], &[], &one],
    );
    let (bh, bytes) = frame(
        RequestHeader {
            opcode: OP_BATCH,
            ..base
        },
        [&[], &[], &[], &inner],
    );
    assert_eq!(
        s.split_batch(&bh, &bytes[64..]).unwrap_err().code,
        ErrorCode::BadBatch
    );
}

// ---------------------------------------------------------------------------
// Bad input: one test per case

fn read_with(flags: u16, offset: u64, length: u64, ddt: &[u8]) -> Vec<u8> {
    frame(
        RequestHeader {
            opcode: OP_READ,
            flags,
            id: 1,
            partition: 0x10,
            object: 1,
            offset,
            length,
            ..Default::default()
        },
        [ddt, &[], &[], &[]],
    )
    .1
}

fn rejected(bytes: &[u8]) -> (ErrorCode, String) {
    let e = validate(&all(), bytes).unwrap_err();
    (e.code, e.message)
}

#[test]
fn zero_count_sgl() {
    let (code, msg) = rejected(&read_with(1, 0, 0, &hex("00000000")));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("zero segments"), "{msg}");
}

#[test]
fn oversized_sgl() {
    let mut ddt = hex("00000009");
    for i in 0..9u64 {
        ddt.extend_from_slice(&(i * 16).to_be_bytes());
        ddt.extend_from_slice(&1u64.to_be_bytes());
    }
    let (code, msg) = rejected(&read_with(1, 0, 9, &ddt));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("limit of 8"), "{msg}");
    // A count that disagrees with the DDT's length.
    let (code, msg) = rejected(&read_with(
        1,
        0,
        1,
        &hex("00000002 0000000000000000 0000000000000001"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("counts say 36"), "{msg}");
}

#[test]
fn zero_count_and_oversized_strided() {
    let (code, _) = rejected(&read_with(
        2,
        0,
        0,
        &hex("0000000000000004 0000000000000004 00000000"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    let (code, msg) = rejected(&read_with(
        2,
        0,
        36,
        &hex("0000000000000004 0000000000000004 00000009"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("9 segments"), "{msg}");
}

#[test]
fn stride_smaller_than_length() {
    let (code, msg) = rejected(&read_with(
        2,
        0,
        8,
        &hex("0000000000000003 0000000000000004 00000002"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(
        msg.contains("stride 3 smaller than its segment length 4"),
        "{msg}"
    );
}

#[test]
fn overflowing_offsets() {
    // SGL entry ending past 2^64.
    let (code, msg) = rejected(&read_with(
        1,
        0,
        2,
        &hex("00000001 ffffffffffffffff 0000000000000002"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("past 2^64"), "{msg}");
    // Strided: offset + (count-1)*stride + length overflows by one; one
    // byte less is accepted.
    assert!(validate(
        &all(),
        &read_with(
            2,
            u64::MAX - 10,
            4,
            &hex("0000000000000008 0000000000000002 00000002")
        )
    )
    .is_ok());
    let (code, msg) = rejected(&read_with(
        2,
        u64::MAX - 9,
        4,
        &hex("0000000000000008 0000000000000002 00000002"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("past 2^64"), "{msg}");
    // Stride times (count - 1) overflows.
    let (code, _) = rejected(&read_with(
        2,
        0,
        6,
        &hex("8000000000000000 0000000000000002 00000003"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    // Contiguous.
    let (code, _) = rejected(&read_with(0, u64::MAX, 1, &[]));
    assert_eq!(code, ErrorCode::BadDdt);
}

#[test]
fn total_length_capped() {
    // Two segments of 2^15 + 1 bytes: more than 2^16.
    let (code, msg) = rejected(&read_with(
        1,
        0,
        (1 << 16) + 2,
        &hex("00000002 0000000000000000 0000000000008001 0000000000000000 0000000000008001"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("more bytes than"), "{msg}");
}

#[test]
fn header_length_must_match_the_ddt() {
    let (code, msg) = rejected(&read_with(
        2,
        0,
        7,
        &hex("0000000000000004 0000000000000004 00000002"),
    ));
    assert_eq!(code, ErrorCode::BadDdt);
    assert!(msg.contains("length 7 differs from the 8"), "{msg}");
}

#[test]
fn payload_shorter_or_longer_than_the_ddt() {
    let ddt = hex("0000000000000004 0000000000000002 00000002");
    for data in [&b"abc"[..], b"abcde"] {
        let (_, b) = frame(
            RequestHeader {
                opcode: OP_WRITE,
                flags: 2,
                id: 1,
                partition: 0x10,
                object: 1,
                length: 4,
                ..Default::default()
            },
            [&ddt, &[], &[], data],
        );
        let (code, msg) = rejected(&b);
        assert_eq!(code, ErrorCode::LengthMismatch);
        assert!(
            msg.contains(&format!(
                "carries {} data bytes; its DDT describes 4",
                data.len()
            )),
            "{msg}"
        );
    }
    // A read carries no data.
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_READ,
            id: 1,
            partition: 0x10,
            length: 1,
            ..Default::default()
        },
        [&[], &[], &[], b"x"],
    );
    assert_eq!(rejected(&b).0, ErrorCode::LengthMismatch);
    // The payload handed over is not what the header says.
    let b = read_with(0, 0, 1, &[]);
    let h = RequestHeader::decode(&b).unwrap().unwrap();
    assert_eq!(
        all().validate(&h, b"x").unwrap_err().code,
        ErrorCode::Invalid
    );
}

#[test]
fn unknown_opcode_and_flags() {
    let (_, b) = frame(
        RequestHeader {
            opcode: 99,
            id: 5,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    let (code, msg) = rejected(&b);
    assert_eq!(code, ErrorCode::UnknownOpcode);
    assert!(msg.contains("99"), "{msg}");
    // The reserved DDT value 3.
    assert_eq!(rejected(&read_with(3, 0, 0, &[])).0, ErrorCode::BadDdt);
    // An undefined flag bit.
    assert_eq!(
        rejected(&read_with(0x8000, 0, 1, &[])).0,
        ErrorCode::BadFlags
    );
    // FUA is not a read flag; DDT bits are not a REMOVE flag.
    assert_eq!(
        rejected(&read_with(FLAG_FUA, 0, 1, &[])).0,
        ErrorCode::BadFlags
    );
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_REMOVE,
            flags: 1,
            partition: 0x10,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(rejected(&b).0, ErrorCode::BadFlags);
    // FLUSH scope 3, an export's, is for sessions that negotiated it.
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_FLUSH,
            flags: 3 << FLAG_SCOPE_SHIFT,
            partition: 0x10,
            object: 2,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(
        validate(&all(), &b).unwrap().command,
        Command::Flush(FlushScope::Export(2))
    );
    let without = session(Features(Features::NEGOTIABLE.0 & !Features::EXPORT_FLUSH.0));
    let e = validate(&without, &b).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotNegotiated, "{}", e.message);
    assert!(e.message.contains("EXPORT_FLUSH"), "{}", e.message);
}

#[test]
fn truncated_frames() {
    let b = hex(SGL_READ);
    for n in 0..REQUEST_HEADER_LEN {
        assert_eq!(RequestHeader::decode(&b[..n]), Ok(None), "{n} bytes");
    }
    let mut bad = b.clone();
    bad[3] = 0;
    assert!(matches!(
        RequestHeader::decode(&bad),
        Err(FrameError::BadMagic(_))
    ));
    // A truncated attribute list and truncated parameters are rejected.
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_GET_ATTRS,
            partition: 0x10,
            ..Default::default()
        },
        [&[], &[], &hex("0002 01 01 61"), &[]],
    );
    assert!(rejected(&b).1.contains("ends inside an entry"));
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_CREATE,
            partition: 0x10,
            ..Default::default()
        },
        [&[], &hex("0000"), &[], &[]],
    );
    assert_eq!(rejected(&b).0, ErrorCode::Invalid);
}

#[test]
fn payload_over_the_limit_ends_the_frame() {
    let h = RequestHeader {
        data_len: (1 << 16) + 1,
        id: 3,
        ..Default::default()
    };
    assert_eq!(
        h.check_frame(&all().limits),
        Err(FrameError::PayloadTooLarge {
            id: 3,
            len: (1 << 16) + 1,
            limit: 1 << 16
        })
    );
    // Four regions near u32::MAX add up without overflow.
    let h = RequestHeader {
        ddt_len: u32::MAX,
        param_len: u32::MAX,
        attr_len: u32::MAX,
        data_len: u32::MAX,
        ..Default::default()
    };
    assert_eq!(h.payload_len(), 4 * u64::from(u32::MAX));
}

#[test]
fn attributes_over_the_size_limit() {
    let mut attrs = hex("0001 02 01 6b 02 00000011");
    attrs.extend_from_slice(&[0; 17]);
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_SET_ATTRS,
            partition: 0x10,
            ..Default::default()
        },
        [&[], &[], &attrs, &[]],
    );
    let (code, msg) = rejected(&b);
    assert_eq!(code, ErrorCode::AttrTooLarge);
    assert!(msg.contains("\"k\" has a 17-byte value"), "{msg}");
    // A GET inside SET_ATTRS is refused, naming the key.
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_SET_ATTRS,
            partition: 0x10,
            ..Default::default()
        },
        [&[], &[], &hex("0001 01 01 6b"), &[]],
    );
    assert!(rejected(&b).1.contains("\"k\""));
}

#[test]
fn an_attribute_list_has_one_encoding() {
    // The empty list is the empty region; a count of 0 would be a second
    // encoding of it (found by fuzzing the reply decoder).
    assert!(AttrOps::parse(&[], 1024).is_ok_and(|l| l.is_empty()));
    let err = AttrOps::parse(&hex("0000"), 1024).unwrap_err();
    assert!(err.to_string().contains("count of 0"), "{err}");
    let mut again = Vec::new();
    AttrOps::encode(&[], &mut again);
    assert!(again.is_empty());
}

#[test]
fn wrong_partition_is_refused() {
    let (_, b) = frame(
        RequestHeader {
            opcode: OP_REMOVE,
            partition: 0x11,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    assert_eq!(rejected(&b).0, ErrorCode::NoSuchPartition);
}

/// What the session allows is checked apart from the frame's form: a
/// well-formed request for another partition, or one using a feature the
/// session did not negotiate, decodes, and only `check` refuses it.
#[test]
fn session_rules_are_checked_apart_from_form() {
    let (h, b) = frame(
        RequestHeader {
            opcode: OP_REMOVE,
            partition: 0x11,
            object: 7,
            ..Default::default()
        },
        [&[], &[], &[], &[]],
    );
    let s = all();
    let req = Request::decode(&h, &b[64..], &s.limits).unwrap();
    assert_eq!(req.command, Command::Remove { object: 7 });
    assert_eq!(
        s.check(&h, &req).unwrap_err().code,
        ErrorCode::NoSuchPartition
    );

    let bytes = hex(&SGL_READ.replacen("0001 0004", "0041 0004", 1));
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    let plain = session(Features::BATCH.union(Features::ATTRS_ON_DATA));
    let req = Request::decode(&h, &bytes[64..], &plain.limits).unwrap();
    assert!(req.span_ok);
    assert_eq!(
        plain.check(&h, &req).unwrap_err().code,
        ErrorCode::NotNegotiated
    );
    assert_eq!(all().check(&h, &req), Ok(()));
}

// ---------------------------------------------------------------------------
// Metadata calls

#[test]
fn meta_call_validates_to_its_parameters() {
    // META (17), id 9, partition 0x10, LOOKUP "ab" in 5 parameter bytes.
    let bytes = hex("
        53524551 0000 0011 0000000000000009 0000000000000010 0000000000000000
        0000000000000000 0000000000000000 00000000 00000005 00000000 00000000
        06 0002 6162");
    let req = validate(&all(), &bytes).unwrap();
    assert_eq!(req.id, 9);
    let Command::Meta { params } = req.command else {
        panic!("{:?}", req.command)
    };
    assert_eq!(
        sluice_obj_proto::MetaRequest::decode(params).unwrap(),
        sluice_obj_proto::MetaRequest::Lookup { name: "ab".into() }
    );
}

#[test]
fn bad_meta_calls_are_invalid() {
    let h = RequestHeader {
        opcode: OP_META,
        id: 3,
        partition: 0x10,
        ..RequestHeader::default()
    };
    // Truncated name, an unknown call, trailing bytes, no call at all.
    for params in [&[6u8, 0, 5, b'a'][..], &[99], &[3, 0], &[]] {
        let (_, bytes) = frame(h, [&[], params, &[], &[]]);
        let e = validate(&all(), &bytes).unwrap_err();
        assert_eq!(e.code, ErrorCode::Invalid, "{params:?}: {e}");
        assert!(e.message.contains("metadata message"), "{e}");
    }
    // An object id, or a length, is refused too.
    let (_, bytes) = frame(RequestHeader { object: 1, ..h }, [&[], &[3], &[], &[]]);
    assert_eq!(
        validate(&all(), &bytes).unwrap_err().code,
        ErrorCode::Invalid
    );
    let (_, bytes) = frame(RequestHeader { length: 1, ..h }, [&[], &[3], &[], &[]]);
    assert_eq!(
        validate(&all(), &bytes).unwrap_err().code,
        ErrorCode::Invalid
    );
}

// ---------------------------------------------------------------------------
// Span replies

fn segs(pairs: &[(u64, u64)]) -> Vec<Segment> {
    pairs
        .iter()
        .map(|&(offset, length)| Segment { offset, length })
        .collect()
}

fn sgl_ddt(pairs: &[(u64, u64)]) -> Vec<u8> {
    let mut ddt = Vec::new();
    sluice_obj_proto::encode_sgl(&segs(pairs), &mut ddt);
    ddt
}

#[test]
fn span_reply_header_bytes() {
    // A span reply: reply flags 0x0001, real bytes 6 (the segments'),
    // body 10 bytes (the span, holes included).
    let bytes = hex("53524550 0000 0001 0000000000000007 0000000000000006 00000000 0000000a");
    let h = ReplyHeader::decode(&bytes).unwrap().unwrap();
    assert_eq!(h, ReplyHeader::ok(7, 6, 0, 10).spanned());
    assert!(h.span);
    let mut again = Vec::new();
    h.encode(&mut again);
    assert_eq!(again, bytes);
    // Another reply flag is reserved.
    let mut bad = bytes.clone();
    bad[7] = 0x02;
    assert_eq!(
        ReplyHeader::decode(&bad),
        Err(ReplyDecodeError::Reserved(7))
    );
    // An error reply is never a span.
    let mut err = Vec::new();
    ReplyHeader::encode_error(9, ErrorCode::Io, "disk", &mut err);
    err[7] = 0x01;
    assert_eq!(
        ReplyHeader::decode(&err),
        Err(ReplyDecodeError::SpanOnError(9))
    );
}

#[test]
fn span_ok_read_bytes_and_where_the_flag_is_refused() {
    // The SGL read of the example with SPAN_OK (flags 0x0041).
    let bytes = hex(&SGL_READ.replacen("0001 0004", "0041 0004", 1));
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    assert_eq!(h.flags, FLAG_SPAN_OK | DDT_SGL);
    let req = all().validate(&h, &bytes[64..]).unwrap();
    assert!(req.span_ok);
    // The same without it.
    assert!(!validate(&all(), &hex(SGL_READ)).unwrap().span_ok);

    // Not negotiated.
    let e = validate(
        &session(Features::BATCH.union(Features::ATTRS_ON_DATA)),
        &bytes,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotNegotiated, "{}", e.message);
    assert!(e.message.contains("span"), "{}", e.message);
    // On a contiguous read.
    let (code, msg) = rejected(&read_with(FLAG_SPAN_OK, 0, 10, &[]));
    assert_eq!(code, ErrorCode::BadFlags);
    assert!(msg.contains("contiguous"), "{msg}");
    // On a write.
    let (_, write) = frame(
        RequestHeader {
            opcode: OP_WRITE,
            flags: FLAG_SPAN_OK,
            id: 1,
            partition: 0x10,
            object: 1,
            length: 2,
            ..Default::default()
        },
        [&[], &[], &[], b"ab"],
    );
    assert_eq!(
        validate(&all(), &write).unwrap_err().code,
        ErrorCode::BadFlags
    );
    // EXTENT_READ takes it.
    let (_, extent) = frame(
        RequestHeader {
            opcode: OP_EXTENT_READ,
            flags: FLAG_SPAN_OK | DDT_STRIDED,
            id: 1,
            object: 1,
            offset: 0,
            length: 8,
            ..Default::default()
        },
        [
            &{
                let mut d = Vec::new();
                sluice_obj_proto::encode_strided(10, 4, 2, &mut d);
                d
            },
            &[],
            &[],
            &[],
        ],
    );
    assert!(validate(&all(), &extent).unwrap().span_ok);
}

#[test]
fn a_span_is_the_range_of_ascending_segments_and_gathers_back_to_list_order() {
    let limits = all().limits;
    fn parse<'a>(
        kind: DdtKind,
        offset: u64,
        length: u64,
        raw: &'a [u8],
        limits: &Limits,
    ) -> Ddt<'a> {
        Ddt::parse(kind, offset, length, raw, limits).unwrap()
    }
    // Ascending with holes of 1 and 3 bytes, one pair touching.
    let pairs = [(2, 4), (7, 3), (10, 2), (15, 5)];
    let raw = sgl_ddt(&pairs);
    let ddt = parse(DdtKind::Sgl, 0, 14, &raw, &limits);
    let span = Segment {
        offset: 2,
        length: 18,
    };
    assert_eq!(ddt.span(), Some(span));
    let object: Vec<u8> = (0..32u8).collect();
    let body = &object[2..20];
    let want: Vec<u8> = pairs
        .iter()
        .flat_map(|&(o, l)| object[o as usize..(o + l) as usize].to_vec())
        .collect();
    assert_eq!(ddt.gather_span(body), Some(want));
    assert_eq!(ddt.gather_span(&object[2..19]), None, "one byte short");
    // Holes of 4 in 18 bytes: more than an eighth of the 14 bytes held.
    assert_eq!(ddt.dense_span(), None);

    // Out of order, or overlapping: no span.
    for pairs in [&[(7, 3), (2, 4)][..], &[(2, 6), (7, 3)][..]] {
        let raw = sgl_ddt(pairs);
        let total = pairs.iter().map(|p| p.1).sum();
        assert_eq!(
            parse(DdtKind::Sgl, 0, total, &raw, &limits).span(),
            None,
            "{pairs:?}"
        );
    }
    // Strided always ascends: 8 blocks of 16 every 18 from 100.
    let mut raw = Vec::new();
    sluice_obj_proto::encode_strided(18, 16, 8, &mut raw);
    let ddt = parse(DdtKind::Strided, 100, 128, &raw, &limits);
    let span = Segment {
        offset: 100,
        length: 7 * 18 + 16,
    };
    assert_eq!(ddt.span(), Some(span));
    // 14 bytes of holes for 128 held: within an eighth (16).
    assert_eq!(ddt.dense_span(), Some(span));
    // A contiguous range needs no span.
    assert_eq!(parse(DdtKind::Contiguous, 5, 10, &[], &limits).span(), None);
}

// ---------------------------------------------------------------------------
// Encoding: typed requests out, the same requests back

/// Encodes `req`, checks the header's region lengths, and validates it
/// back: the same request, and the same bytes again.
fn round_trip(s: &Negotiated, req: &Request<'_>) -> Vec<u8> {
    let mut bytes = Vec::new();
    req.encode(s.partition, &mut bytes).expect("encodes");
    let back = validate(s, &bytes).unwrap_or_else(|e| panic!("{req:?} is refused: {e}"));
    assert_eq!(&back, req);
    bytes
}

fn request(command: Command<'_>) -> Request<'_> {
    Request {
        id: 9,
        command,
        attrs: AttrOps::default(),
        fua: false,
        span_ok: false,
    }
}

#[test]
fn append_create_and_write_and_punch_encode_to_their_layouts() {
    let s = all();
    let append = Request {
        fua: true,
        ..request(Command::Append {
            object: 0x22,
            data: b"abc",
        })
    };
    assert_eq!(
        hex_of(&round_trip(&s, &append)),
        hex_of(&hex(
            "53524551 0004 0006 0000000000000009 0000000000000010 0000000000000022
             0000000000000000 0000000000000003 00000000 00000000 00000000 00000003
             616263"
        ))
    );
    let create_and_write = request(Command::CreateAndWrite {
        collection: "pix",
        ddt: Ddt::Contiguous(Segment {
            offset: 0x100,
            length: 2,
        }),
        data: b"hi",
    });
    assert_eq!(
        hex_of(&round_trip(&s, &create_and_write)),
        hex_of(&hex(
            "53524551 0000 0007 0000000000000009 0000000000000010 0000000000000000
             0000000000000100 0000000000000002 00000000 00000004 00000000 00000002
             03706978 6869"
        ))
    );
    // A strided punch with one attribute removed: DDT (stride, length,
    // count), no parameters, the list (count, kind, key).
    let mut buf = Vec::new();
    let strided = hex("0000000000000010 0000000000000004 00000002");
    let punch = Request {
        attrs: AttrOps::build(&[AttrOp::Remove("k")], 16, &mut buf).unwrap(),
        ..request(Command::Punch {
            object: 0x22,
            ddt: Ddt::parse(DdtKind::Strided, 0x40, 8, &strided, &s.limits).unwrap(),
        })
    };
    assert_eq!(
        hex_of(&round_trip(&s, &punch)),
        hex_of(&hex(
            "53524551 0002 0008 0000000000000009 0000000000000010 0000000000000022
             0000000000000040 0000000000000008 00000014 00000000 00000005 00000000
             0000000000000010 0000000000000004 00000002
             0001 03 01 6b"
        ))
    );
}

#[test]
fn every_command_encodes_and_validates_back() {
    let s = all();
    let data = [7u8; 12];
    let contiguous = Ddt::Contiguous(Segment {
        offset: 4,
        length: 12,
    });
    let mut sgl = Vec::new();
    sluice_obj_proto::encode_sgl(
        &[
            Segment {
                offset: 100,
                length: 4,
            },
            Segment {
                offset: 0,
                length: 8,
            },
        ],
        &mut sgl,
    );
    let sgl = Ddt::parse(DdtKind::Sgl, 0, 12, &sgl, &s.limits).unwrap();
    let mut meta = Vec::new();
    sluice_obj_proto::MetaRequest::Servers.encode(&mut meta);
    let mut ranges_buf = Vec::new();
    let ranges = sluice_obj_proto::QueryRanges::build(
        &[sluice_obj_proto::QueryRange {
            key: "n",
            min: AttrValue::Integer(1),
            max: AttrValue::Integer(9),
        }],
        16,
        &mut ranges_buf,
    )
    .unwrap();
    let commands = [
        Command::Create {
            count: 3,
            collection: "c",
        },
        Command::Remove { object: 5 },
        Command::List {
            collection: "",
            cursor: 2,
            max: 8,
            with_attrs: true,
        },
        Command::Read {
            object: 5,
            ddt: sgl,
        },
        Command::Write {
            object: 5,
            ddt: contiguous,
            data: &data,
        },
        Command::Write {
            object: 5,
            ddt: sgl,
            data: &data,
        },
        Command::Append {
            object: 5,
            data: &data,
        },
        Command::CreateAndWrite {
            collection: "c",
            ddt: sgl,
            data: &data,
        },
        Command::Punch {
            object: 5,
            ddt: contiguous,
        },
        Command::Flush(FlushScope::Object(5)),
        Command::Flush(FlushScope::Collection("c")),
        Command::Flush(FlushScope::Partition),
        Command::Flush(FlushScope::Export(1)),
        Command::GetAttrs { object: 5 },
        Command::SetAttrs { object: 5 },
        Command::Query {
            collection: "c",
            cursor: 0,
            max: 4,
            ranges,
        },
        Command::ExtentRead {
            export: 1,
            ddt: sgl,
        },
        Command::ExtentWrite {
            export: 1,
            ddt: contiguous,
            data: &data,
        },
        Command::Meta { params: &meta },
        Command::Truncate {
            object: 5,
            length: 3,
        },
        Command::ReplaceData {
            object: 5,
            source: 6,
        },
    ];
    let (mut gets, mut sets) = (Vec::new(), Vec::new());
    let get = AttrOps::build(&[AttrOp::Get("a")], 16, &mut gets).unwrap();
    let set = AttrOps::build(
        &[AttrOp::Set("a", AttrValue::Text("x")), AttrOp::Remove("b")],
        16,
        &mut sets,
    )
    .unwrap();
    for command in commands {
        round_trip(&s, &request(command));
        let op = command.opcode();
        // FUA where the command takes it; attributes where it takes them.
        if matches!(
            command,
            Command::Write { .. }
                | Command::Append { .. }
                | Command::CreateAndWrite { .. }
                | Command::Punch { .. }
                | Command::SetAttrs { .. }
                | Command::Remove { .. }
                | Command::Create { .. }
                | Command::ExtentWrite { .. }
                | Command::Truncate { .. }
                | Command::ReplaceData { .. }
        ) {
            round_trip(
                &s,
                &Request {
                    fua: true,
                    ..request(command)
                },
            );
        }
        let attrs = match command {
            Command::GetAttrs { .. } | Command::List { .. } | Command::Read { .. } => Some(get),
            Command::SetAttrs { .. }
            | Command::Write { .. }
            | Command::Append { .. }
            | Command::CreateAndWrite { .. }
            | Command::Punch { .. } => Some(set),
            _ => None,
        };
        if let Some(attrs) = attrs {
            round_trip(
                &s,
                &Request {
                    attrs,
                    ..request(command)
                },
            );
        }
        if matches!(
            op,
            sluice_obj_proto::Opcode::Read | sluice_obj_proto::Opcode::ExtentRead
        ) {
            round_trip(
                &s,
                &Request {
                    span_ok: true,
                    ..request(command)
                },
            );
        }
    }
    round_trip(&s, &request(Command::Disconnect));
}

#[test]
fn a_name_too_long_for_the_wire_is_an_encoding_error() {
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let req = request(Command::Create {
        count: 1,
        collection: &long,
    });
    let e = req.encode(0x10, &mut Vec::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "collection name of 256 bytes is longer than 255"
    );
    let mut buf = Vec::new();
    assert!(AttrOps::build(&[AttrOp::Get(&long)], 16, &mut buf).is_err());
    assert!(
        AttrOps::build(
            &[AttrOp::Set("k", AttrValue::Bytes(&[0; 17]))],
            16,
            &mut buf
        )
        .is_err(),
        "a value over the limit is refused as validation would"
    );
}

#[test]
fn a_batch_header_frames_its_members() {
    let s = all();
    let mut body = Vec::new();
    for object in [1, 2] {
        Request {
            id: object,
            ..request(Command::Remove { object })
        }
        .encode(s.partition, &mut body)
        .unwrap();
    }
    let h = RequestHeader::batch(40, s.partition, body.len() as u32);
    let members: Vec<u64> = s
        .split_batch(&h, &body)
        .unwrap()
        .map(|(m, p)| match s.validate(&m, p).unwrap().command {
            Command::Remove { object } => object,
            c => panic!("{c:?}"),
        })
        .collect();
    assert_eq!(members, [1, 2]);
}

#[test]
fn truncate_carries_the_new_length_in_its_parameters() {
    let s = all();
    let bytes = hex(
        "53524551 0004 0012 0000000000000003 0000000000000010 0000000000000022
         0000000000000000 0000000000000000 00000000 00000008 00000000 00000000
         0000000000001000",
    );
    let req = validate(&s, &bytes).unwrap();
    assert_eq!(
        req.command,
        Command::Truncate {
            object: 0x22,
            length: 0x1000
        }
    );
    assert!(req.fua);
    // The length is required, and nothing may follow it.
    let (_, short) = frame(
        RequestHeader {
            opcode: OP_TRUNCATE,
            id: 4,
            partition: 0x10,
            object: 0x22,
            ..RequestHeader::default()
        },
        [&[], &[0, 0, 0, 1], &[], &[]],
    );
    assert_eq!(validate(&s, &short).unwrap_err().code, ErrorCode::Invalid);
    let (_, long) = frame(
        RequestHeader {
            opcode: OP_TRUNCATE,
            id: 4,
            partition: 0x10,
            object: 0x22,
            ..RequestHeader::default()
        },
        [&[], &[0; 9], &[], &[]],
    );
    assert_eq!(validate(&s, &long).unwrap_err().code, ErrorCode::Invalid);
}

#[test]
fn replace_data_carries_the_source_in_its_parameters_and_needs_its_feature() {
    let s = all();
    // REPLACE_DATA (19 = 0x13) with FUA: object 0x22 takes 0x23's data.
    let bytes = hex(
        "53524551 0004 0013 0000000000000003 0000000000000010 0000000000000022
         0000000000000000 0000000000000000 00000000 00000008 00000000 00000000
         0000000000000023",
    );
    let req = validate(&s, &bytes).unwrap();
    assert_eq!(
        req.command,
        Command::ReplaceData {
            object: 0x22,
            source: 0x23
        }
    );
    assert!(req.fua);
    // A session that did not negotiate it may not send it.
    let without = session(Features::NEGOTIABLE.without(Features::REPLACE_DATA));
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    let e = without
        .validate(&h, &bytes[REQUEST_HEADER_LEN..])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotNegotiated);
    assert!(e.message.contains("REPLACE_DATA"), "{}", e.message);
    // The source is required, nothing may follow it, and there is no
    // range, DDT or attribute list.
    let head = RequestHeader {
        opcode: OP_REPLACE_DATA,
        id: 4,
        partition: 0x10,
        object: 0x22,
        ..RequestHeader::default()
    };
    for (regions, code) in [
        ([&[][..], &[0, 0, 0, 1], &[], &[]], ErrorCode::Invalid),
        ([&[][..], &[0; 9], &[], &[]], ErrorCode::Invalid),
        ([&[][..], &[0; 8], &[], &[1]], ErrorCode::LengthMismatch),
    ] {
        let (_, bad) = frame(head, regions);
        assert_eq!(validate(&s, &bad).unwrap_err().code, code, "{regions:?}");
    }
    let (_, ranged) = frame(
        RequestHeader { length: 8, ..head },
        [&[], &[0; 8], &[], &[]],
    );
    assert_eq!(validate(&s, &ranged).unwrap_err().code, ErrorCode::Invalid);
    let (_, spanned) = frame(
        RequestHeader {
            flags: FLAG_SPAN_OK,
            ..head
        },
        [&[], &[0; 8], &[], &[]],
    );
    assert_eq!(
        validate(&s, &spanned).unwrap_err().code,
        ErrorCode::BadFlags
    );
}

/// Every opcode is listed once, in wire order, under its own name.
#[test]
fn opcodes_are_listed_once_with_their_names() {
    use sluice_obj_proto::Opcode;
    for (i, op) in Opcode::ALL.iter().enumerate() {
        assert_eq!(op.wire(), i as u16 + 1);
        assert_eq!(Opcode::from_wire(op.wire()), Some(*op));
        assert_eq!(
            op.name(),
            format!("{op:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let sep = (i > 0 && c.is_uppercase()).then_some('_');
                    sep.into_iter().chain(c.to_lowercase())
                })
                .collect::<String>()
        );
    }
    assert_eq!(Opcode::from_wire(Opcode::ALL.len() as u16 + 1), None);
}
