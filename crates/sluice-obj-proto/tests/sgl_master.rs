#![allow(clippy::unwrap_used)]

//! SGL DDTs with a master offset (docs/protocol.md, "Data distribution
//! type"): each entry's offset is relative to the header's master
//! offset, as in the object paper ("Object-Based Storage", Mesnier,
//! Ganger and Riedel); byte vectors both ways, the overflow and
//! negotiation rules, and master offset 0 meaning what it always meant.

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    encode_sgl, encode_sgl_from, Command, Ddt, DdtError, DdtKind, ErrorCode, Features, Limits,
    Negotiated, Request, RequestHeader, Segment,
};

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
        limits: Limits::default(),
        partition: 0x10,
        tls: false,
        exports: Vec::new(),
    }
}

/// A READ (id 7) of object 0x22 in partition 0x10 at master offset
/// 0x10000 with an SGL of two entries: 4 bytes at +0x1000 and 2 bytes
/// at +0 (absolute 0x11000 and 0x10000).
const SGL_MASTER_READ: &str = "
    53524551 0001 0004 0000000000000007 0000000000000010 0000000000000022
    0000000000010000 0000000000000006 00000024 00000000 00000000 00000000
    00000002 0000000000001000 0000000000000004 0000000000000000 0000000000000002";

fn segs(pairs: &[(u64, u64)]) -> Vec<Segment> {
    pairs
        .iter()
        .map(|&(offset, length)| Segment { offset, length })
        .collect()
}

#[test]
fn sgl_at_a_master_offset_decodes_to_absolute_segments_and_encodes_back() {
    let bytes = hex(SGL_MASTER_READ);
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    assert_eq!(h.offset, 0x10000);
    let s = session(Features::NEGOTIABLE);
    let req = s.validate(&h, &bytes[REQUEST_HEADER_LEN..]).unwrap();
    let Command::Read { object: 0x22, ddt } = req.command else {
        panic!("not a read: {req:?}")
    };
    assert_eq!(ddt.kind(), DdtKind::Sgl);
    assert_eq!(ddt.master_offset(), 0x10000);
    assert_eq!(
        ddt.segments().collect::<Vec<_>>(),
        segs(&[(0x11000, 4), (0x10000, 2)])
    );
    assert_eq!(ddt.end(), 0x11004);
    // Encoding gives the same frame back, master offset included.
    let mut again = Vec::new();
    req.encode(0x10, &mut again).unwrap();
    assert_eq!(again, bytes);

    // The encoder side: the same absolute segments at master 0x10000
    // give exactly these DDT bytes.
    let mut raw = Vec::new();
    encode_sgl_from(0x10000, &segs(&[(0x11000, 4), (0x10000, 2)]), &mut raw).unwrap();
    assert_eq!(raw, bytes[REQUEST_HEADER_LEN..]);
    // A command built from them encodes to the frame.
    let ddt = Ddt::parse(DdtKind::Sgl, 0x10000, 6, &raw, &s.limits).unwrap();
    let mut built = Vec::new();
    Request::new(7, Command::Read { object: 0x22, ddt })
        .encode(0x10, &mut built)
        .unwrap();
    assert_eq!(built, bytes);
}

#[test]
fn master_offset_zero_means_what_it_always_meant() {
    let pairs = [(0x1000, 4), (0, 2)];
    let mut old = Vec::new();
    encode_sgl(&segs(&pairs), &mut old);
    let mut new = Vec::new();
    encode_sgl_from(0, &segs(&pairs), &mut new).unwrap();
    assert_eq!(old, new);
    let ddt = Ddt::parse(DdtKind::Sgl, 0, 6, &old, &Limits::default()).unwrap();
    assert_eq!(ddt.master_offset(), 0);
    assert_eq!(ddt.segments().collect::<Vec<_>>(), segs(&pairs));
    // And a session without the feature takes it, as before.
    let bytes = hex(&SGL_MASTER_READ.replace("0000000000010000", "0000000000000000"));
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    let req = session(Features(0))
        .validate(&h, &bytes[REQUEST_HEADER_LEN..])
        .unwrap();
    assert_eq!(
        req.command.ddt().unwrap().segments().collect::<Vec<_>>(),
        segs(&pairs)
    );
}

#[test]
fn a_master_offset_needs_the_feature() {
    let bytes = hex(SGL_MASTER_READ);
    let h = RequestHeader::decode(&bytes).unwrap().unwrap();
    let without = Features::NEGOTIABLE.without(Features::SGL_MASTER);
    let e = session(without)
        .validate(&h, &bytes[REQUEST_HEADER_LEN..])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::NotNegotiated);
    assert!(e.message.contains("master offset 65536"), "{}", e.message);
}

#[test]
fn master_plus_offset_past_2_64_is_a_clear_error() {
    let limits = Limits::default();
    // master + entry offset overflows.
    let raw = hex("00000001 0000000000000010 0000000000000001");
    let e = Ddt::parse(DdtKind::Sgl, u64::MAX - 0xf, 1, &raw, &limits).unwrap_err();
    assert_eq!(
        e,
        DdtError::MasterOverflow {
            index: 0,
            master: u64::MAX - 0xf,
            offset: 0x10
        }
    );
    assert!(e.to_string().contains("past 2^64"), "{e}");
    // master + offset fits, + length does not.
    let raw = hex("00000001 000000000000000f 0000000000000002");
    let e = Ddt::parse(DdtKind::Sgl, u64::MAX - 0xf, 2, &raw, &limits).unwrap_err();
    assert_eq!(
        e,
        DdtError::Overflow {
            index: 0,
            offset: u64::MAX,
            length: 2
        }
    );
    // Ending at 2^64 - 1 fits (an end must itself be a u64).
    let raw = hex("00000001 000000000000000e 0000000000000001");
    let ddt = Ddt::parse(DdtKind::Sgl, u64::MAX - 0xf, 1, &raw, &limits).unwrap();
    assert_eq!(
        ddt.segments().collect::<Vec<_>>(),
        segs(&[(u64::MAX - 1, 1)])
    );
    // On the wire: BAD_DDT, naming the fault.
    let mut h = RequestHeader {
        opcode: OP_READ,
        flags: DDT_SGL,
        id: 1,
        partition: 0x10,
        object: 1,
        offset: u64::MAX,
        length: 1,
        ..Default::default()
    };
    let raw = hex("00000001 0000000000000001 0000000000000001");
    h.ddt_len = raw.len() as u32;
    let e = session(Features::NEGOTIABLE)
        .validate(&h, &raw)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BadDdt);
    assert!(e.message.contains("master offset"), "{}", e.message);
}

#[test]
fn an_encoder_refuses_a_segment_before_the_master_offset() {
    let mut raw = Vec::new();
    let e = encode_sgl_from(100, &segs(&[(150, 1), (99, 1)]), &mut raw).unwrap_err();
    assert_eq!(
        e,
        DdtError::BeforeMaster {
            index: 1,
            master: 100,
            offset: 99
        }
    );
    assert!(raw.is_empty(), "nothing appended on a refusal");
}
