//! The native handshake machines on arbitrary bytes, fed whole and in
//! arbitrary pieces: no panic, never more consumed than given, and the
//! same output and outcome however the stream is cut. The server side
//! reads client bytes, the client side reads server bytes.
//!
//! Input layout:
//!
//! ```text
//! 0       bits 0-1: TLS policy (0 off, 1 optional, 2/3 required);
//!         bit 2: run the client machine instead (bit 3: it wants TLS)
//! 1..17   piece sizes, used cyclically: a piece is size + 1 bytes
//! 17..    the peer's bytes
//! ```

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_obj_proto::{
    ClientHandshake, ClientHandshakeConfig, ClientStatus, Features, HandshakeConfig,
    HandshakeStatus, PartitionAccess, PartitionCatalog, ServerHandshake, TlsPolicy,
};

struct Catalog;
impl PartitionCatalog for Catalog {
    fn partition(&self, id: u64, tls: bool) -> PartitionAccess {
        match id % 4 {
            0 => PartitionAccess::Allowed,
            1 if tls => PartitionAccess::Allowed,
            1 => PartitionAccess::TlsRequired,
            2 => PartitionAccess::Denied,
            _ => PartitionAccess::Unknown,
        }
    }
    fn export(&self, name: &str, _tls: bool) -> (PartitionAccess, u64, bool) {
        match name {
            "vol" => (PartitionAccess::Allowed, 1 << 20, false),
            _ => (PartitionAccess::Unknown, 0, false),
        }
    }
}

/// Output and a printable outcome of feeding `stream` in pieces.
fn server(tls: TlsPolicy, stream: &[u8], sizes: Option<&[u8]>) -> (Vec<u8>, String) {
    let mut s = ServerHandshake::new(HandshakeConfig {
        tls,
        features: Features::NEGOTIABLE,
        ..Default::default()
    });
    let mut out = s.poll_output();
    let (mut arrived, mut used_total, mut i) = (0usize, 0usize, 0usize);
    loop {
        let n = sizes.map_or(stream.len(), |z| usize::from(z[i % z.len()]) + 1);
        i += 1;
        arrived = (arrived + n).min(stream.len());
        match s.handle_input(&stream[used_total..arrived], &Catalog) {
            Ok((used, status)) => {
                assert!(used_total + used <= arrived, "consumed more than given");
                used_total += used;
                out.extend(s.poll_output());
                match status {
                    HandshakeStatus::NeedInput if arrived < stream.len() => continue,
                    HandshakeStatus::NeedInput => return (out, "need input".into()),
                    // Keep going after TLS as if it were transparent.
                    HandshakeStatus::StartTls => continue,
                    other => return (out, format!("{other:?}")),
                }
            }
            Err(e) => {
                // Answers queued before the bad input still go out.
                out.extend(s.poll_output());
                return (out, format!("error: {e}"));
            }
        }
    }
}

fn client(tls: bool, stream: &[u8], sizes: Option<&[u8]>) -> (Vec<u8>, String) {
    let mut c = ClientHandshake::new(ClientHandshakeConfig {
        features: Features::NEGOTIABLE,
        partition: 0,
        tls,
        exports: vec!["vol".into()],
    });
    let mut out = Vec::new();
    let (mut arrived, mut used_total, mut i) = (0usize, 0usize, 0usize);
    loop {
        let n = sizes.map_or(stream.len(), |z| usize::from(z[i % z.len()]) + 1);
        i += 1;
        arrived = (arrived + n).min(stream.len());
        match c.handle_input(&stream[used_total..arrived]) {
            Ok((used, status)) => {
                assert!(used_total + used <= arrived, "consumed more than given");
                used_total += used;
                out.extend(c.poll_output());
                match status {
                    ClientStatus::NeedInput if arrived < stream.len() => continue,
                    ClientStatus::NeedInput => return (out, "need input".into()),
                    ClientStatus::StartTls => continue,
                    other => return (out, format!("{other:?}")),
                }
            }
            Err(e) => {
                out.extend(c.poll_output());
                return (out, format!("error: {e}"));
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let cfg = data[0];
    let sizes = &data[1..17];
    let stream = &data[17..];
    let (whole, chopped) = if cfg & 4 == 0 {
        let tls = match cfg & 3 {
            0 => TlsPolicy::Off,
            1 => TlsPolicy::Optional,
            _ => TlsPolicy::Required,
        };
        (server(tls, stream, None), server(tls, stream, Some(sizes)))
    } else {
        let tls = cfg & 8 != 0;
        (client(tls, stream, None), client(tls, stream, Some(sizes)))
    };
    assert_eq!(whole, chopped, "result depends on the cuts");
});
