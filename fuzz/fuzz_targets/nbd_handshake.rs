//! The server handshake on an arbitrary byte stream, fed whole and
//! chopped into arbitrary pieces: no panic, never more consumed than
//! given, identical results however the stream is cut, and output that
//! frames as option replies.
//!
//! Input layout (read with `arbitrary::Unstructured`, so seeds can be
//! written by hand):
//!
//! ```text
//! 0       option limit: 0 = default config; else max_option_len =
//!         2 * (b & 0x7f), and bit 7 also sets disconnect_option_len
//!         to max_option_len + 64
//! 1..17   piece sizes, used cyclically: a piece is size + 1 bytes
//!         (all zero = one byte at a time)
//! 17..    the client's bytes, starting with its 32-bit flags
//! ```

#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{option_replies, Feeder};
use sluice_nbd_proto::{HandshakeConfig, HandshakeStatus};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let limit: u8 = u.arbitrary().unwrap_or(0);
    let sizes: [u8; 16] = u.arbitrary().unwrap_or([0; 16]);
    let stream = u.take_rest();

    let mut config = HandshakeConfig::default();
    if limit != 0 {
        config.max_option_len = 2 * u32::from(limit & 0x7f);
        if limit & 0x80 != 0 {
            config.disconnect_option_len = config.max_option_len + 64;
        }
    }

    let mut whole = Feeder::new(config);
    whole.feed(stream);
    let whole = whole.finish();

    let mut chopped = Feeder::new(config);
    chopped.feed(&[]);
    let mut rest = stream;
    let mut i = 0;
    while !rest.is_empty() && !chopped.ended() {
        let n = (usize::from(sizes[i % 16]) + 1).min(rest.len());
        chopped.feed(&rest[..n]);
        rest = &rest[n..];
        i += 1;
    }
    let chopped = chopped.finish();

    assert_eq!(chopped.output, whole.output, "output depends on the cuts");
    assert_eq!(
        chopped.outcome, whole.outcome,
        "outcome depends on the cuts"
    );
    if let Some(Ok(_)) = whole.outcome {
        assert_eq!(chopped.consumed, whole.consumed);
    }
    assert!(whole.consumed <= stream.len());

    let (_, unframed) = option_replies(&whole.output[18..]);
    if !unframed.is_empty() {
        // Only the NBD_OPT_EXPORT_NAME answer is not an option reply.
        assert!(
            matches!(whole.outcome, Some(Ok(HandshakeStatus::Done(_)))),
            "unframed output {unframed:02x?}"
        );
        assert!(
            unframed.len() == 10 || unframed.len() == 134,
            "EXPORT_NAME answer of {} bytes",
            unframed.len()
        );
    }
});
