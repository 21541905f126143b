//! Batch frames: the body of one batch split into members. Splitting
//! never panics; when it succeeds the members are 1 to `max_batch`
//! complete non-batch requests that tile the body exactly, and each is
//! answered under its own id (accepted or refused on its own).
//!
//! Input layout (so seeds can be written by hand):
//!
//! ```text
//! 0       max_batch = b % 16 + 1
//! 1       feature bits (negotiable ones only; bit 2 is BATCH)
//! 2..     the batch body: member requests end to end
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_obj_proto::consts::*;
use sluice_obj_proto::{Features, Limits, Negotiated, RequestHeader};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let session = Negotiated {
        version: VERSION,
        features: Features(u32::from(data[1])).intersect(Features::NEGOTIABLE),
        limits: Limits {
            max_batch: u32::from(data[0] % 16) + 1,
            ..Limits::default()
        },
        partition: 0,
        tls: false,
        exports: Vec::new(),
    };
    let body = &data[2..];
    let header = RequestHeader {
        opcode: OP_BATCH,
        id: u64::MAX,
        data_len: body.len() as u32,
        ..RequestHeader::default()
    };
    let Ok(members) = session.split_batch(&header, body) else {
        return;
    };
    assert!(session.features.contains(Features::BATCH));
    let mut rebuilt = Vec::with_capacity(body.len());
    let mut count = 0u32;
    for (m, payload) in members {
        count += 1;
        assert_ne!(m.opcode, OP_BATCH, "nested batch accepted");
        assert_eq!(payload.len() as u64, m.payload_len());
        m.encode(&mut rebuilt);
        rebuilt.extend_from_slice(payload);
        match session.validate(&m, payload) {
            Ok(req) => assert_eq!(req.id, m.id),
            Err(e) => assert_eq!(e.id, m.id),
        }
    }
    assert!(count >= 1 && count <= session.limits.max_batch);
    assert_eq!(rebuilt, body, "members do not tile the body");
});
