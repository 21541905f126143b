#![allow(clippy::unwrap_used)]

//! Property tests: every codec round-trips, decoders never panic on
//! arbitrary bytes, and whatever validation accepts keeps the DDT
//! invariants the protocol promises.

use proptest::prelude::*;
use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    encode_sgl, encode_strided, AttrOp, AttrOps, AttrValue, ClientHandshake, ClientHandshakeConfig,
    Command, Ddt, DdtKind, ErrorCode, Features, HandshakeConfig, HandshakeStatus, Limits,
    Negotiated, Page, PartitionAccess, PartitionCatalog, ReplyHeader, RequestHeader, Segment,
    ServerHandshake, TlsPolicy,
};

const LIMITS: Limits = Limits {
    max_segments: 64,
    max_payload: 1 << 20,
    max_batch: 8,
    max_attr_size: 64,
};

fn session() -> Negotiated {
    Negotiated {
        version: 1,
        features: Features::NEGOTIABLE,
        limits: LIMITS,
        partition: 0,
        tls: false,
        exports: Vec::new(),
    }
}

fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..=4096u64,
        (0..64u32).prop_map(|s| 1u64 << s),
        (0..64u32).prop_map(|s| u64::MAX >> s),
    ]
}

fn header() -> impl Strategy<Value = RequestHeader> {
    (
        (any::<u16>(), any::<u16>(), any::<u64>(), any::<u64>()),
        (any::<u64>(), edgy_u64(), edgy_u64()),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
    )
        .prop_map(
            |((flags, opcode, id, partition), (object, offset, length), (d, p, a, l))| {
                RequestHeader {
                    flags,
                    opcode,
                    id,
                    partition,
                    object,
                    offset,
                    length,
                    ddt_len: d,
                    param_len: p,
                    attr_len: a,
                    data_len: l,
                }
            },
        )
}

fn value() -> impl Strategy<Value = (u8, i64, Vec<u8>)> {
    (
        0..3u8,
        any::<i64>(),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
}

/// Segments a valid SGL may hold: non-empty, not overflowing.
fn segment() -> impl Strategy<Value = Segment> {
    (edgy_u64(), 1..=4096u64).prop_map(|(offset, length)| Segment {
        offset: offset.min(u64::MAX - length),
        length,
    })
}

/// Checks what validation promises of an accepted DDT.
fn check_invariants(ddt: &Ddt<'_>) {
    let segs: Vec<_> = ddt.segments().collect();
    assert_eq!(segs.len() as u32, ddt.segment_count());
    // Collecting (a fold) gives what `next` gives one at a time, from the
    // start and from any point.
    let mut one_by_one = Vec::new();
    // A `for` loop calls `next`.
    for s in ddt.segments() {
        one_by_one.push(s);
    }
    assert_eq!(one_by_one, segs);
    for from in [1, segs.len() / 2, segs.len()] {
        let mut it = ddt.segments();
        it.by_ref().take(from).for_each(drop);
        assert_eq!(it.collect::<Vec<_>>(), segs[from.min(segs.len())..]);
    }
    // The iterator knows how many are left at every step.
    let mut it = ddt.segments();
    for left in (0..segs.len()).rev() {
        assert_eq!(it.len(), left + 1);
        it.next();
        assert_eq!(it.size_hint(), (left, Some(left)));
    }
    assert_eq!(it.next(), None);
    if ddt.kind() != DdtKind::Contiguous {
        assert!(!segs.is_empty() && segs.len() as u32 <= LIMITS.max_segments);
    }
    let mut total = 0u64;
    for s in &segs {
        assert!(s.offset.checked_add(s.length).is_some());
        if ddt.kind() != DdtKind::Contiguous {
            assert!(s.length > 0);
        }
        total += s.length;
    }
    assert_eq!(total, ddt.total());
    assert!(total <= u64::from(LIMITS.max_payload));
    if let Ddt::Strided(s) = ddt {
        assert!(s.stride() >= s.length());
    }
}

struct Open;
impl PartitionCatalog for Open {
    fn partition(&self, id: u64, _tls: bool) -> PartitionAccess {
        if id.is_multiple_of(2) {
            PartitionAccess::Allowed
        } else {
            PartitionAccess::Denied
        }
    }
    fn export(&self, _name: &str, _tls: bool) -> (PartitionAccess, u64, bool) {
        (PartitionAccess::Allowed, 4096, false)
    }
}

proptest! {
    #[test]
    fn request_header_round_trips(h in header()) {
        let mut out = Vec::new();
        h.encode(&mut out);
        prop_assert_eq!(out.len(), REQUEST_HEADER_LEN);
        prop_assert_eq!(RequestHeader::decode(&out), Ok(Some(h)));
    }

    #[test]
    fn reply_header_round_trips(id in any::<u64>(), real in any::<u64>(), a in any::<u32>(), b in any::<u32>(), code in 1..=u16::MAX, msg in ".{0,40}") {
        for h in [ReplyHeader::ok(id, real, a, b), ReplyHeader::ok(id, real, a, b).spanned()] {
            let mut out = Vec::new();
            h.encode(&mut out);
            prop_assert_eq!(ReplyHeader::decode(&out), Ok(Some(h)));
        }
        let mut out = Vec::new();
        ReplyHeader::encode_error(id, ErrorCode::from_wire(code), &msg, &mut out);
        let d = ReplyHeader::decode(&out).unwrap().unwrap();
        prop_assert_eq!(d.status.map(ErrorCode::wire), Some(code));
        prop_assert_eq!(&out[REPLY_HEADER_LEN..], msg.as_bytes());
    }

    #[test]
    fn sgl_round_trips(segs in proptest::collection::vec(segment(), 1..=64)) {
        let mut raw = Vec::new();
        encode_sgl(&segs, &mut raw);
        let total: u64 = segs.iter().map(|s| s.length).sum();
        let ddt = Ddt::parse(DdtKind::Sgl, 0, total, &raw, &LIMITS).unwrap();
        prop_assert_eq!(ddt.segments().collect::<Vec<_>>(), segs);
        let mut again = Vec::new();
        ddt.encode(&mut again);
        prop_assert_eq!(&again, &raw);
        check_invariants(&ddt);
    }

    #[test]
    fn sgl_at_a_master_offset_round_trips(
        master in edgy_u64(),
        rel in proptest::collection::vec((0..1u64 << 40, 1..=4096u64), 1..=64),
    ) {
        // Absolute segments at master + relative offset; where that
        // passes 2^64 the parse names the fault, else the DDT gives the
        // absolute segments back and re-encodes to its bytes.
        let mut raw = Vec::new();
        raw.extend_from_slice(&(rel.len() as u32).to_be_bytes());
        for &(o, l) in &rel {
            raw.extend_from_slice(&o.to_be_bytes());
            raw.extend_from_slice(&l.to_be_bytes());
        }
        let total: u64 = rel.iter().map(|r| r.1).sum();
        let fits = rel.iter().all(|&(o, l)| master.checked_add(o).and_then(|a| a.checked_add(l)).is_some());
        match Ddt::parse(DdtKind::Sgl, master, total, &raw, &LIMITS) {
            Ok(ddt) => {
                prop_assert!(fits);
                check_invariants(&ddt);
                prop_assert_eq!(ddt.master_offset(), master);
                let abs: Vec<Segment> = rel
                    .iter()
                    .map(|&(o, l)| Segment { offset: master + o, length: l })
                    .collect();
                prop_assert_eq!(ddt.segments().collect::<Vec<_>>(), abs.clone());
                let mut again = Vec::new();
                ddt.encode(&mut again);
                prop_assert_eq!(&again, &raw);
                let mut from = Vec::new();
                sluice_obj_proto::encode_sgl_from(master, &abs, &mut from).unwrap();
                prop_assert_eq!(&from, &raw);
            }
            Err(e) => {
                prop_assert!(!fits, "{}", e);
                prop_assert!(e.to_string().contains("past 2^64"), "{}", e);
            }
        }
    }

    #[test]
    fn a_span_gathers_to_the_segments_bytes_in_list_order(
        start in 0..1000u64,
        pieces in proptest::collection::vec((0..40u64, 1..300u64), 1..=64),
        strided in any::<bool>(),
    ) {
        // Ascending segments with gaps (pieces), or a strided run of the
        // first piece's shape; the span's bytes are an object's bytes
        // from the span's start, and gathering them must give what a list
        // reply carries: each segment's bytes, in order.
        let (raw, kind, offset, segs) = if strided {
            let (gap, len) = pieces[0];
            let count = pieces.len() as u32;
            let mut raw = Vec::new();
            encode_strided(len + gap, len, count, &mut raw);
            let segs: Vec<Segment> = (0..u64::from(count))
                .map(|i| Segment { offset: start + i * (len + gap), length: len })
                .collect();
            (raw, DdtKind::Strided, start, segs)
        } else {
            let mut at = start;
            let segs: Vec<Segment> = pieces
                .iter()
                .map(|&(gap, length)| {
                    let s = Segment { offset: at + gap, length };
                    at = s.offset + length;
                    s
                })
                .collect();
            let mut raw = Vec::new();
            encode_sgl(&segs, &mut raw);
            (raw, DdtKind::Sgl, 0, segs)
        };
        let total: u64 = segs.iter().map(|s| s.length).sum();
        let ddt = Ddt::parse(kind, offset, total, &raw, &LIMITS).unwrap();
        let span = ddt.span().unwrap();
        let end = segs.last().map(|s| s.offset + s.length).unwrap();
        prop_assert_eq!(span, Segment { offset: segs[0].offset, length: end - segs[0].offset });
        let object: Vec<u8> = (0..end).map(|i| (i * 7 + i / 251) as u8).collect();
        let list: Vec<u8> = segs
            .iter()
            .flat_map(|s| object[s.offset as usize..(s.offset + s.length) as usize].to_vec())
            .collect();
        let body = &object[span.offset as usize..];
        prop_assert_eq!(ddt.gather_span(body), Some(list));
        let holes = span.length - total;
        prop_assert_eq!(ddt.dense_span().is_some(), holes <= total / 8);
    }

    #[test]
    fn strided_round_trips_or_names_its_fault(offset in edgy_u64(), stride in edgy_u64(), length in 0..=8192u64, count in 0..=80u32) {
        let mut raw = Vec::new();
        encode_strided(stride, length, count, &mut raw);
        let total = length.saturating_mul(u64::from(count));
        match Ddt::parse(DdtKind::Strided, offset, total, &raw, &LIMITS) {
            Ok(ddt) => {
                check_invariants(&ddt);
                let segs: Vec<_> = ddt.segments().collect();
                prop_assert_eq!(segs.len() as u32, count);
                for (i, s) in segs.iter().enumerate() {
                    prop_assert_eq!(s.offset, offset + stride * i as u64);
                }
                let mut again = Vec::new();
                ddt.encode(&mut again);
                prop_assert_eq!(&again, &raw);
            }
            Err(e) => {
                // Refused only for a reason the rules name.
                let valid = count > 0
                    && count <= LIMITS.max_segments
                    && length > 0
                    && stride >= length
                    && stride.checked_mul(u64::from(count - 1)).and_then(|d| d.checked_add(offset)).and_then(|o| o.checked_add(length)).is_some()
                    && total <= u64::from(LIMITS.max_payload);
                prop_assert!(!valid, "valid strided DDT refused: {e}");
            }
        }
    }

    #[test]
    fn attribute_lists_round_trip(entries in proptest::collection::vec((0..3u8, "[a-z]{1,20}", value()), 0..10)) {
        let texts: Vec<String> = entries.iter().map(|(_, _, (_, _, b))| String::from_utf8_lossy(b).into_owned()).collect();
        let ops: Vec<AttrOp<'_>> = entries.iter().zip(&texts).map(|((kind, key, (tag, int, bytes)), text)| match kind {
            0 => AttrOp::Get(key),
            1 => AttrOp::Remove(key),
            _ => AttrOp::Set(key, match tag {
                0 => AttrValue::Integer(*int),
                1 => AttrValue::Text(text),
                _ => AttrValue::Bytes(bytes),
            }),
        }).collect();
        // Lossy UTF-8 may grow text past the limit: use a generous one.
        let mut raw = Vec::new();
        AttrOps::encode(&ops, &mut raw);
        let parsed = AttrOps::parse(&raw, 1024).unwrap();
        prop_assert_eq!(parsed.iter().collect::<Vec<_>>(), ops);
    }

    #[test]
    fn validation_never_panics_and_keeps_invariants(h in header(), payload in proptest::collection::vec(any::<u8>(), 0..512), fit in any::<bool>()) {
        let s = session();
        let mut h = h;
        if fit {
            // Make the region lengths describe this payload so the deep
            // checks run, not just the length check.
            let n = payload.len() as u32;
            let cut = [h.ddt_len % (n + 1), 0, 0];
            h.ddt_len = cut[0];
            h.param_len = (h.param_len % (n - h.ddt_len + 1)).min(n - h.ddt_len);
            h.attr_len = (h.attr_len % (n - h.ddt_len - h.param_len + 1)).min(n - h.ddt_len - h.param_len);
            h.data_len = n - h.ddt_len - h.param_len - h.attr_len;
            h.opcode %= 20;
            h.flags &= 0x3f;
            h.partition = 0;
        }
        if h.opcode == OP_BATCH {
            if let Ok(members) = s.split_batch(&h, &payload) {
                for (m, p) in members {
                    let _ = s.validate(&m, p);
                }
            }
        } else if let Ok(req) = s.validate(&h, &payload) {
            match req.command {
                Command::Read { ddt, .. } | Command::Punch { ddt, .. } => check_invariants(&ddt),
                Command::Write { ddt, data, .. } | Command::CreateAndWrite { ddt, data, .. } => {
                    check_invariants(&ddt);
                    prop_assert_eq!(data.len() as u64, ddt.total());
                }
                _ => {}
            }
        }
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = RequestHeader::decode(&bytes);
        let _ = ReplyHeader::decode(&bytes);
        let _ = AttrOps::parse(&bytes, 64);
        let _ = Page::decode(&bytes, 64);
        let _ = sluice_obj_proto::decode_id_list(&bytes);
        for kind in [DdtKind::Sgl, DdtKind::Strided] {
            let _ = Ddt::parse(kind, 0, 0, &bytes, &LIMITS);
        }
    }

    #[test]
    fn handshakes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), tls in 0..3u8, pieces in proptest::collection::vec(1..64usize, 1..16)) {
        let tls = [TlsPolicy::Off, TlsPolicy::Optional, TlsPolicy::Required][tls as usize];
        let mut s = ServerHandshake::new(HandshakeConfig { tls, features: Features::NEGOTIABLE, limits: LIMITS });
        let mut c = ClientHandshake::new(ClientHandshakeConfig { partition: 2, ..Default::default() });
        let (mut fed, mut at_s, mut at_c) = (0, 0, 0);
        for p in pieces.iter().cycle().take(64) {
            fed = (fed + p).min(bytes.len());
            if let Ok((used, status)) = s.handle_input(&bytes[at_s..fed], &Open) {
                prop_assert!(at_s + used <= fed);
                at_s += used;
                if matches!(status, HandshakeStatus::Done(_) | HandshakeStatus::Aborted) {
                    break;
                }
            } else {
                break;
            }
            if let Ok((used, _)) = c.handle_input(&bytes[at_c..fed]) {
                prop_assert!(at_c + used <= fed);
                at_c += used;
            }
        }
    }
}

proptest! {
    /// Requests built from their parts validate back to the same parts:
    /// a WRITE with an SGL or strided DDT, attributes riding on it, and
    /// the data in list order.
    #[test]
    fn built_writes_validate_to_their_parts(
        sgl in proptest::collection::vec(segment(), 1..=16),
        strided in (edgy_u64(), 1..=64u64, 0..=64u64, 1..=16u32),
        use_sgl in any::<bool>(),
        key in "[a-z]{1,8}",
        int in any::<i64>(),
        id in any::<u64>(),
        object in any::<u64>(),
    ) {
        let mut ddt = Vec::new();
        let (flags, offset, segs) = if use_sgl {
            encode_sgl(&sgl, &mut ddt);
            (DDT_SGL, 0, sgl)
        } else {
            let (offset, length, gap, count) = strided;
            let stride = length + gap;
            let offset = offset.min(u64::MAX - stride * u64::from(count));
            encode_strided(stride, length, count, &mut ddt);
            let segs = (0..u64::from(count))
                .map(|i| Segment { offset: offset + i * stride, length })
                .collect();
            (DDT_STRIDED, offset, segs)
        };
        let total: u64 = segs.iter().map(|s| s.length).sum();
        let data: Vec<u8> = (0..total).map(|i| i as u8).collect();
        let attrs_ops = [AttrOp::Set(&key, AttrValue::Integer(int)), AttrOp::Get("sluice.length")];
        let mut attrs = Vec::new();
        AttrOps::encode(&attrs_ops, &mut attrs);
        let h = RequestHeader {
            flags: flags | FLAG_FUA,
            opcode: OP_WRITE,
            id,
            partition: 0,
            object,
            offset,
            length: total,
            ddt_len: ddt.len() as u32,
            param_len: 0,
            attr_len: attrs.len() as u32,
            data_len: data.len() as u32,
        };
        let mut frame = Vec::new();
        h.encode(&mut frame);
        frame.extend_from_slice(&ddt);
        frame.extend_from_slice(&attrs);
        frame.extend_from_slice(&data);
        let decoded = RequestHeader::decode(&frame).unwrap().unwrap();
        prop_assert_eq!(decoded.check_frame(&LIMITS), Ok(frame.len() as u64 - 64));
        let req = session().validate(&decoded, &frame[REQUEST_HEADER_LEN..]).unwrap();
        prop_assert_eq!(req.id, id);
        prop_assert!(req.fua);
        prop_assert_eq!(req.attrs.iter().collect::<Vec<_>>(), attrs_ops);
        let Command::Write { object: o, ddt, data: d } = req.command else {
            panic!("not a write: {:?}", req.command)
        };
        prop_assert_eq!(o, object);
        prop_assert_eq!(d, data.as_slice());
        prop_assert_eq!(ddt.segments().collect::<Vec<_>>(), segs);
        check_invariants(&ddt);
    }
}

proptest! {
    /// REPLACE_DATA built from its parts encodes to its layout (the
    /// source in 8 bytes of parameters, nothing else) and validates back
    /// to the same request.
    #[test]
    fn replace_data_round_trips(
        id in any::<u64>(),
        object in any::<u64>(),
        source in any::<u64>(),
        fua in any::<bool>(),
    ) {
        let req = sluice_obj_proto::Request {
            fua,
            ..sluice_obj_proto::Request::new(id, Command::ReplaceData { object, source })
        };
        let mut frame = Vec::new();
        req.encode(0, &mut frame).unwrap();
        prop_assert_eq!(frame.len(), REQUEST_HEADER_LEN + 8);
        prop_assert_eq!(&frame[REQUEST_HEADER_LEN..], &source.to_be_bytes()[..]);
        let h = RequestHeader::decode(&frame).unwrap().unwrap();
        prop_assert_eq!(h.opcode, OP_REPLACE_DATA);
        prop_assert_eq!(h.object, object);
        let back = session().validate(&h, &frame[REQUEST_HEADER_LEN..]).unwrap();
        prop_assert_eq!(back, req);
    }
}
