//! The RAID write-intent journal's on-disk decoders: a header or a slot
//! decoded from any bytes never panics, a decoded slot re-encodes to
//! the bytes it was read from, and a header's array round-trips.
//!
//! Input: the bytes of a journal header and of a slot at once (each
//! decoder reads them from the start).

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_raid::journal::{decode_header, decode_slot, encode_header, encode_slot};

fuzz_target!(|data: &[u8]| {
    if let Ok(array) = decode_header(data) {
        assert_eq!(decode_header(&encode_header(array)), Ok(array));
    }
    if let Some((sequence, stripes)) = decode_slot(data) {
        let bytes = encode_slot(sequence, &stripes);
        assert_eq!(&data[..bytes.len()], &bytes[..], "re-encodes to its bytes");
        assert_eq!(decode_slot(&bytes), Some((sequence, stripes)));
    }
});
