//! Native-protocol requests: a stream of request headers framed the way
//! the server frames them, each re-encoded to the same bytes, then
//! validated against fuzzed limits. Validation never panics, and is
//! decoding plus the session's check (decoding alone gives the same
//! request, and a frame decoded without its data the same command); what it
//! accepts keeps the DDT invariants (segment count within the limit,
//! non-empty segments, no segment end past 2^64, total within the
//! payload limit, stride at least the length) and carries exactly the
//! data its DDT describes; META parameters it accepts decode and
//! re-encode to the same bytes; REPLACE_DATA is accepted only when
//! negotiated, its source the whole parameter region; every accepted
//! request encodes, and
//! validating its encoding gives the same request back. Batch frames are
//! split and their members validated one by one.
//!
//! Input layout (so seeds can be written by hand):
//!
//! ```text
//! 0       max_segments = b + 1
//! 1..3    max_payload = (u16 BE + 1) * 16
//! 3       max_batch = b % 16 + 1
//! 4       max_attr_size = b
//! 5       feature bits (negotiable ones only)
//! 6..     request stream (64-byte headers, each followed by its payload)
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    AttachedExport, Command, Ddt, DdtKind, Features, Limits, MetaRequest, Negotiated, Request,
    RequestHeader,
};

const PREFIX: usize = 6;

fn check(ddt: &Ddt<'_>, limits: &Limits, data: Option<&[u8]>) {
    let mut total = 0u64;
    let mut n = 0u32;
    for s in ddt.segments() {
        assert!(
            s.offset.checked_add(s.length).is_some(),
            "segment overflows"
        );
        if ddt.kind() != DdtKind::Contiguous {
            assert!(s.length > 0, "empty segment accepted");
        }
        total += s.length;
        n += 1;
    }
    assert_eq!(n, ddt.segment_count());
    if ddt.kind() != DdtKind::Contiguous {
        assert!(n >= 1 && n <= limits.max_segments, "segment count {n}");
    }
    assert_eq!(total, ddt.total());
    assert!(total <= u64::from(limits.max_payload));
    if let Ddt::Strided(s) = ddt {
        assert!(s.stride() >= s.length());
    }
    if let Some(d) = data {
        assert_eq!(d.len() as u64, total, "data differs from the DDT");
    }
}

fn run(session: &Negotiated, h: &RequestHeader, payload: &[u8]) {
    let decoded = Request::decode(h, payload, &session.limits);
    let Ok(req) = session.validate(h, payload) else {
        return;
    };
    // Validation is decoding and the session's check; the server decodes
    // a checked request again where it runs it, and must get it back.
    assert_eq!(decoded, Ok(req), "decoding differs from validation");
    if h.ddt_len == 0 && h.param_len == 0 && h.attr_len == 0 {
        // A frame decoded before its data arrives is the same request
        // without its data.
        let head = Request::decode_head(h, &[], &session.limits).expect("head decodes");
        assert_eq!(head.command.opcode(), req.command.opcode());
        assert_eq!(head.command.ddt(), req.command.ddt());
    }
    assert_eq!(req.id, h.id);
    let limits = &session.limits;
    match req.command {
        Command::Read { ddt, .. }
        | Command::Punch { ddt, .. }
        | Command::ExtentRead { ddt, .. } => check(&ddt, limits, None),
        Command::Write { ddt, data, .. }
        | Command::CreateAndWrite { ddt, data, .. }
        | Command::ExtentWrite { ddt, data, .. } => check(&ddt, limits, Some(data)),
        Command::Append { data, .. } => assert!(data.len() as u64 <= u64::from(limits.max_payload)),
        Command::ReplaceData { object, source } => {
            // Negotiated, the target in the header, the source all the
            // parameters hold.
            assert!(session.features.contains(Features::REPLACE_DATA));
            assert_eq!(object, h.object);
            assert_eq!(h.param_len, 8);
            assert_eq!(payload, source.to_be_bytes());
        }
        Command::Meta { params } => {
            // What validation accepted decodes, and re-encodes to the
            // same bytes (the encoding is canonical).
            let meta = MetaRequest::decode(params).expect("validated META parameters decode");
            let mut again = Vec::new();
            meta.encode(&mut again);
            assert_eq!(again, params, "META parameters do not re-encode");
        }
        _ => {}
    }
    for op in req.attrs.iter() {
        assert!(!op.key().is_empty());
    }
    // What validation accepted encodes (a client builds the same typed
    // request), and validating that gives the same request back.
    let mut again = Vec::new();
    req.encode(h.partition, &mut again)
        .expect("a validated request encodes");
    let h2 = RequestHeader::decode(&again)
        .expect("magic")
        .expect("whole header");
    let back = session
        .validate(&h2, &again[REQUEST_HEADER_LEN..])
        .expect("an encoded request validates");
    assert_eq!(back, req, "encoding changed the request");
}

fuzz_target!(|data: &[u8]| {
    let mut p = [0u8; PREFIX];
    let n = data.len().min(PREFIX);
    p[..n].copy_from_slice(&data[..n]);
    let limits = Limits {
        max_segments: u32::from(p[0]) + 1,
        max_payload: (u32::from(u16::from_be_bytes([p[1], p[2]])) + 1) * 16,
        max_batch: u32::from(p[3] % 16) + 1,
        max_attr_size: u32::from(p[4]),
    };
    let session = Negotiated {
        version: VERSION,
        features: Features(u32::from(p[5])).intersect(Features::NEGOTIABLE),
        limits,
        partition: 0,
        tls: false,
        exports: vec![AttachedExport {
            handle: 1,
            name: "vol".into(),
            size: 1 << 20,
            read_only: false,
        }],
    };
    let mut stream = &data[n..];
    loop {
        let h = match RequestHeader::decode(stream) {
            Ok(Some(h)) => h,
            Ok(None) | Err(_) => return,
        };
        let mut again = Vec::new();
        h.encode(&mut again);
        assert_eq!(
            again,
            stream[..REQUEST_HEADER_LEN],
            "header does not re-encode"
        );
        let Ok(len) = h.check_frame(&limits) else {
            return;
        };
        assert!(len <= u64::from(limits.max_payload));
        let Some(payload) = stream.get(REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + len as usize)
        else {
            return;
        };
        if h.opcode == OP_BATCH {
            if let Ok(members) = session.split_batch(&h, payload) {
                let mut count = 0;
                for (m, mp) in members {
                    assert_ne!(m.opcode, OP_BATCH);
                    run(&session, &m, mp);
                    count += 1;
                }
                assert!(count >= 1 && count <= limits.max_batch);
            }
        } else {
            run(&session, &h, payload);
        }
        stream = &stream[REQUEST_HEADER_LEN + len as usize..];
    }
});
