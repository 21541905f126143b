//! The client handshake on an arbitrary server byte stream, fed whole and
//! chopped into arbitrary pieces: no panic, never more consumed than
//! given, and the same outcome and output however the stream is cut.
//!
//! Input layout:
//!
//! ```text
//! 0       config bits: 0 extended headers, 1 structured replies,
//!         2 base:allocation, 3 TLS, 4 list only
//! 1..17   piece sizes, used cyclically: a piece is size + 1 bytes
//! 17..    the server's bytes, starting with its greeting
//! ```

#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use sluice_nbd_proto::{ClientHandshake, ClientHandshakeConfig, ClientHandshakeError, ClientStatus};

/// Everything one run produced.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    output: Vec<u8>,
    outcome: Option<Result<ClientStatus, ClientHandshakeError>>,
    consumed: usize,
}

/// Feeds `stream` in pieces of the given sizes (a single piece when
/// `sizes` is `None`), presenting unconsumed bytes again as a driver does.
fn run(config: &ClientHandshakeConfig, stream: &[u8], sizes: Option<&[u8; 16]>) -> Run {
    let mut m = ClientHandshake::new(config.clone());
    let mut output = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut consumed = 0;
    let mut fed = 0;
    let mut i = 0;
    let mut outcome = None;
    while fed < stream.len() || i == 0 {
        let n = match sizes {
            Some(s) => (usize::from(s[i % 16]) + 1).min(stream.len() - fed),
            None => stream.len() - fed,
        };
        pending.extend_from_slice(&stream[fed..fed + n]);
        fed += n;
        i += 1;
        match m.handle_input(&pending) {
            Ok((used, status)) => {
                assert!(used <= pending.len(), "consumed more than given");
                consumed += used;
                pending.drain(..used);
                output.extend(m.poll_output());
                if status != ClientStatus::NeedInput {
                    outcome = Some(Ok(status));
                    break;
                }
            }
            Err(e) => {
                output.extend(m.poll_output());
                outcome = Some(Err(e));
                break;
            }
        }
    }
    Run {
        output,
        outcome,
        consumed,
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let bits: u8 = u.arbitrary().unwrap_or(0);
    let sizes: [u8; 16] = u.arbitrary().unwrap_or([0; 16]);
    let stream = u.take_rest();
    let config = ClientHandshakeConfig {
        export: "disk".into(),
        extended_headers: bits & 1 != 0,
        structured_replies: bits & 2 != 0,
        base_allocation: bits & 4 != 0,
        tls: bits & 8 != 0,
        list: bits & 16 != 0,
    };
    let whole = run(&config, stream, None);
    let chopped = run(&config, stream, Some(&sizes));
    assert!(whole.consumed <= stream.len());
    // A status ends a call early, so the cut runs may stop at the same
    // message; whatever both reached must agree.
    if whole.outcome.is_some() && chopped.outcome.is_some() {
        assert_eq!(whole.outcome, chopped.outcome, "outcome depends on the cuts");
        assert_eq!(whole.output, chopped.output, "output depends on the cuts");
        // An error reports no count, so only successes can be compared.
        if let Some(Ok(_)) = whole.outcome {
            assert_eq!(whole.consumed, chopped.consumed);
        }
    }
    if let Some(Ok(ClientStatus::Done(e))) = &whole.outcome {
        // What was negotiated is consistent with what was asked.
        let t = e.transmission;
        if !config.extended_headers {
            assert_eq!(t.header_style, sluice_nbd_proto::HeaderStyle::Compact);
        }
        if t.base_allocation_id.is_some() {
            assert!(config.base_allocation);
        }
    }
});
