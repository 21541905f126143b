#![allow(clippy::unwrap_used)]

//! The handshake machines: exact greeting, option and answer bytes; both
//! machines driven against each other; version mismatch, unknown
//! features and options, TLS policy and partition access.

use sluice_obj_proto::answer;
use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    ClientHandshake, ClientHandshakeConfig, ClientHandshakeError, ClientStatus, Features,
    HandshakeConfig, HandshakeError, HandshakeStatus, Limits, Negotiated, PartitionAccess,
    PartitionCatalog, ServerHandshake, TlsPolicy,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
        .collect()
}

/// Partition 1 open, 2 needs TLS, 3 denied; export "vol" (1 MiB), "secret" needs TLS.
struct Catalog;

impl PartitionCatalog for Catalog {
    fn partition(&self, id: u64, tls: bool) -> PartitionAccess {
        match id {
            1 => PartitionAccess::Allowed,
            2 if tls => PartitionAccess::Allowed,
            2 => PartitionAccess::TlsRequired,
            3 => PartitionAccess::Denied,
            _ => PartitionAccess::Unknown,
        }
    }
    fn export(&self, name: &str, tls: bool) -> (PartitionAccess, u64, bool) {
        match name {
            "vol" => (PartitionAccess::Allowed, 1 << 20, true),
            "secret" if !tls => (PartitionAccess::TlsRequired, 0, false),
            _ => (PartitionAccess::Unknown, 0, false),
        }
    }
}

fn option(option: u16, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&OPTION_MAGIC.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&0u16.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

fn hello(version: u16, features: u32) -> Vec<u8> {
    let mut d = version.to_be_bytes().to_vec();
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(&features.to_be_bytes());
    option(OPT_HELLO, &d)
}

/// (option, status, data) of each answer in `out`.
fn answers(mut out: &[u8]) -> Vec<(u16, u16, Vec<u8>)> {
    let mut v = Vec::new();
    while !out.is_empty() {
        assert_eq!(out[..4], ANSWER_MAGIC.to_be_bytes());
        let len = u32::from_be_bytes(out[8..12].try_into().unwrap()) as usize;
        v.push((
            u16::from_be_bytes([out[4], out[5]]),
            u16::from_be_bytes([out[6], out[7]]),
            out[12..12 + len].to_vec(),
        ));
        out = &out[12 + len..];
    }
    v
}

fn server(tls: TlsPolicy) -> ServerHandshake {
    ServerHandshake::new(HandshakeConfig {
        tls,
        features: Features::NEGOTIABLE,
        limits: Limits {
            max_segments: 256,
            max_payload: 1 << 20,
            max_batch: 16,
            max_attr_size: 4096,
        },
    })
}

#[test]
fn greeting_bytes() {
    let mut s = server(TlsPolicy::Optional);
    assert_eq!(
        s.poll_output(),
        hex("534c55494345 4f42 0001 0000 000000fd 00000100 00100000 00000010 00001000")
    );
}

#[test]
fn hello_attach_select_bytes() {
    let mut s = server(TlsPolicy::Off);
    s.poll_output();
    let mut input = hex("534f5054 0001 0000 00000008 0001 0000 00000004");
    input.extend(hex("534f5054 0003 0000 00000003 766f6c"));
    input.extend(hex("534f5054 0004 0000 00000008 0000000000000001"));
    let (used, status) = s.handle_input(&input, &Catalog).unwrap();
    assert_eq!(used, input.len());
    assert_eq!(
        s.poll_output(),
        hex("53414e53 0001 0000 00000000
             53414e53 0003 0000 00000012 0000000000000001 0000000000100000 0001
             53414e53 0004 0000 00000000")
    );
    let HandshakeStatus::Done(n) = status else {
        panic!("{status:?}")
    };
    assert_eq!(n.features, Features::BATCH);
    assert_eq!(n.partition, 1);
    assert_eq!(n.exports.len(), 1);
    assert!(n.exports[0].read_only);
    assert_eq!(s.handle_input(&[], &Catalog), Err(HandshakeError::Finished));
}

#[test]
fn version_mismatch_and_unknown_features_are_answered_and_the_session_goes_on() {
    let mut s = server(TlsPolicy::Off);
    s.poll_output();
    let mut input = hello(2, 0);
    input.extend(hello(1, 1 << 9));
    input.extend(hello(1, Features::TLS_AVAILABLE.0));
    input.extend(option(77, b"x"));
    input.extend(option(OPT_SELECT_PARTITION, &1u64.to_be_bytes()));
    let (used, status) = s.handle_input(&input, &Catalog).unwrap();
    assert_eq!(status, HandshakeStatus::NeedInput);
    assert_eq!(used, input.len());
    let a = answers(&s.poll_output());
    let codes: Vec<_> = a.iter().map(|(o, c, _)| (*o, *c)).collect();
    assert_eq!(
        codes,
        [
            (OPT_HELLO, answer::VERSION_MISMATCH),
            (OPT_HELLO, answer::UNSUPPORTED_FEATURE),
            (OPT_HELLO, answer::UNSUPPORTED_FEATURE),
            (77, answer::UNKNOWN_OPTION),
            (OPT_SELECT_PARTITION, answer::BAD_OPTION),
        ]
    );
    assert!(String::from_utf8_lossy(&a[0].2).contains("version 2 is not supported"));
    assert!(String::from_utf8_lossy(&a[1].2).contains("0x200"));
    // A correct HELLO then works.
    let mut input = hello(1, 0);
    input.extend(option(OPT_SELECT_PARTITION, &1u64.to_be_bytes()));
    assert!(matches!(
        s.handle_input(&input, &Catalog).unwrap().1,
        HandshakeStatus::Done(_)
    ));
}

#[test]
fn partitions_unknown_denied_and_tls_only() {
    let mut s = server(TlsPolicy::Optional);
    s.poll_output();
    let mut input = hello(1, 0);
    for p in [9u64, 3, 2] {
        input.extend(option(OPT_SELECT_PARTITION, &p.to_be_bytes()));
    }
    input.extend(option(OPT_ATTACH_EXPORT, b"secret"));
    input.extend(option(OPT_ATTACH_EXPORT, b"nope"));
    let (_, status) = s.handle_input(&input, &Catalog).unwrap();
    assert_eq!(status, HandshakeStatus::NeedInput);
    let codes: Vec<_> = answers(&s.poll_output()).into_iter().map(|a| a.1).collect();
    assert_eq!(
        codes,
        [
            answer::OK,
            answer::UNKNOWN_PARTITION,
            answer::DENIED,
            answer::TLS_REQUIRED,
            answer::TLS_REQUIRED,
            answer::UNKNOWN_EXPORT
        ]
    );
    // STARTTLS: HELLO is forgotten and must come again over TLS.
    let (used, status) = s
        .handle_input(&option(OPT_STARTTLS, &[]), &Catalog)
        .unwrap();
    assert_eq!((used, status), (12, HandshakeStatus::StartTls));
    assert!(s.tls_active());
    s.poll_output();
    let (_, status) = s
        .handle_input(&option(OPT_SELECT_PARTITION, &2u64.to_be_bytes()), &Catalog)
        .unwrap();
    assert_eq!(status, HandshakeStatus::NeedInput);
    assert_eq!(answers(&s.poll_output())[0].1, answer::BAD_OPTION);
    let mut input = hello(1, 0);
    input.extend(option(OPT_SELECT_PARTITION, &2u64.to_be_bytes()));
    let (_, status) = s.handle_input(&input, &Catalog).unwrap();
    let HandshakeStatus::Done(n) = status else {
        panic!("{status:?}")
    };
    assert!(n.tls);
    assert_eq!(n.partition, 2);
}

#[test]
fn tls_required_and_unavailable() {
    let mut s = server(TlsPolicy::Required);
    s.poll_output();
    s.handle_input(&hello(1, 0), &Catalog).unwrap();
    assert_eq!(answers(&s.poll_output())[0].1, answer::TLS_REQUIRED);
    let mut s = server(TlsPolicy::Off);
    s.poll_output();
    s.handle_input(&option(OPT_STARTTLS, &[]), &Catalog)
        .unwrap();
    assert_eq!(answers(&s.poll_output())[0].1, answer::TLS_UNAVAILABLE);
}

#[test]
fn framing_violations_end_the_session() {
    let mut s = server(TlsPolicy::Off);
    let mut bad = hello(1, 0);
    bad[0] = 0;
    assert!(matches!(
        s.handle_input(&bad, &Catalog),
        Err(HandshakeError::BadMagic(_))
    ));
    let mut s = server(TlsPolicy::Off);
    let mut big = option(OPT_HELLO, &[]);
    big[8..12].copy_from_slice(&(MAX_OPTION_LEN + 1).to_be_bytes());
    assert!(matches!(
        s.handle_input(&big, &Catalog),
        Err(HandshakeError::OptionTooLarge { .. })
    ));
    // A truncated option waits for more.
    let mut s = server(TlsPolicy::Off);
    let h = hello(1, 0);
    for n in 0..h.len() {
        assert_eq!(
            s.handle_input(&h[..n], &Catalog).unwrap(),
            (0, HandshakeStatus::NeedInput)
        );
    }
}

/// Runs client against server, moving one byte per step when `chop`,
/// doing nothing at STARTTLS but carrying on (a real TLS layer sits
/// between).
fn run(
    server_tls: TlsPolicy,
    config: ClientHandshakeConfig,
    chop: bool,
) -> Result<(Negotiated, Negotiated), ClientHandshakeError> {
    let mut s = server(server_tls);
    let mut c = ClientHandshake::new(config);
    // In flight, and arrived but not yet consumed, per direction.
    let (mut wire_c, mut at_c, mut wire_s, mut at_s) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut server_done = None;
    for _ in 0..100_000 {
        wire_c.extend(s.poll_output());
        let n = if chop {
            wire_c.len().min(1)
        } else {
            wire_c.len()
        };
        at_c.extend(wire_c.drain(..n));
        let (used, status) = c.handle_input(&at_c)?;
        at_c.drain(..used);
        wire_s.extend(c.poll_output());
        if let ClientStatus::Done(e) = status {
            return Ok((*e, server_done.expect("server finished first")));
        }
        let n = if chop {
            wire_s.len().min(1)
        } else {
            wire_s.len()
        };
        at_s.extend(wire_s.drain(..n));
        if server_done.is_none() {
            let (used, status) = s.handle_input(&at_s, &Catalog).expect("server");
            at_s.drain(..used);
            if let HandshakeStatus::Done(n) = status {
                server_done = Some(*n);
            }
        }
    }
    panic!("handshake did not finish");
}

#[test]
fn client_and_server_agree() {
    for chop in [false, true] {
        let config = ClientHandshakeConfig {
            features: Features(Features::NEGOTIABLE.0 | 1 << 20),
            partition: 2,
            tls: true,
            exports: vec!["vol".into()],
        };
        let (c, s) = run(TlsPolicy::Optional, config, chop).unwrap();
        assert_eq!(c, s);
        assert!(c.tls);
        assert_eq!(c.features, Features::NEGOTIABLE);
        assert_eq!(c.limits.max_batch, 16);
        assert_eq!(c.exports[0].name, "vol");
    }
}

#[test]
fn client_errors() {
    let plain = ClientHandshakeConfig {
        partition: 1,
        ..Default::default()
    };
    assert_eq!(
        run(TlsPolicy::Required, plain.clone(), false).unwrap_err(),
        ClientHandshakeError::TlsRequired
    );
    let tls = ClientHandshakeConfig {
        tls: true,
        ..plain.clone()
    };
    assert_eq!(
        run(TlsPolicy::Off, tls, false).unwrap_err(),
        ClientHandshakeError::TlsUnavailable
    );
    let denied = ClientHandshakeConfig {
        partition: 3,
        ..plain.clone()
    };
    assert!(matches!(
        run(TlsPolicy::Off, denied, false).unwrap_err(),
        ClientHandshakeError::Refused {
            option: OPT_SELECT_PARTITION,
            status: answer::DENIED,
            ..
        }
    ));
    let mut c = ClientHandshake::new(plain);
    assert!(matches!(
        c.handle_input(&[0u8; 32]),
        Err(ClientHandshakeError::NotSluice(0))
    ));
}
