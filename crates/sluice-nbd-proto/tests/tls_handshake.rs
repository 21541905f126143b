#![allow(clippy::unwrap_used)]
//! Byte-level tests of STARTTLS in the server handshake: the spec's NOTLS,
//! SELECTIVETLS and FORCEDTLS modes (`doc/proto.md`, "TLS support"), the
//! reset of negotiated state after STARTTLS, and per-export access
//! (allow-lists) as the catalog reports it.
//!
//! Expected replies are written out from the spec's layouts:
//!
//! ```text
//! 64 bits 0x0003e889045565a9 | 32 bits option | 32 bits reply type
//! | 32 bits length | data
//! ```

use std::cell::Cell;

use sluice_nbd_proto::{
    BlockSizes, ExportAccess, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeError,
    HandshakeStatus, ReplyStyle, ServerHandshake, TlsPolicy,
};

const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_LIST: u32 = 3;
const OPT_STARTTLS: u32 = 5;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;
const OPT_STRUCTURED_REPLY: u32 = 8;
const OPT_LIST_META_CONTEXT: u32 = 9;
const OPT_SET_META_CONTEXT: u32 = 10;
const OPT_EXTENDED_HEADERS: u32 = 11;

const REP_ACK: u32 = 1;
const REP_SERVER: u32 = 2;
const REP_INFO: u32 = 3;
const REP_ERR_POLICY: u32 = 0x8000_0002;
const REP_ERR_INVALID: u32 = 0x8000_0003;
const REP_ERR_TLS_REQD: u32 = 0x8000_0005;
const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
const REP_ERR_TOO_BIG: u32 = 0x8000_0009;

const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const FIXED: u32 = 1;
const NO_ZEROES: u32 = 2;

/// Two exports: `open` (anyone) and `secret` (its access is what the test
/// sets; before TLS a TLS-only export reports `TlsRequired`).
struct Catalog {
    secret: Cell<ExportAccess>,
}

fn info(name: &str, size: u64) -> ExportInfo {
    ExportInfo {
        name: name.into(),
        description: String::new(),
        size,
        flags: 0,
        block_sizes: BlockSizes::default(),
        base_allocation: true,
    }
}

impl ExportCatalog for Catalog {
    fn list(&self) -> Vec<(String, String)> {
        vec![
            ("open".into(), String::new()),
            ("secret".into(), String::new()),
        ]
    }
    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        match name {
            "" | "open" => Some(info("open", 0x1000)),
            "secret" => Some(info("secret", 0x0bad_f00d)),
            _ => None,
        }
    }
    fn access(&self, name: &str) -> ExportAccess {
        if name == "secret" {
            self.secret.get()
        } else {
            ExportAccess::Allowed
        }
    }
}

fn opt(option: u32, data: &[u8]) -> Vec<u8> {
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&option.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    m
}

fn reply(option: u32, kind: u32, data: &[u8]) -> Vec<u8> {
    let mut m = REPLY_MAGIC.to_be_bytes().to_vec();
    m.extend_from_slice(&option.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    m
}

fn go_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

fn meta_data(name: &str, query: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&(query.len() as u32).to_be_bytes());
    d.extend_from_slice(query.as_bytes());
    d
}

/// Splits a server output into option replies: (option, type, data).
fn replies(mut out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    while !out.is_empty() {
        assert!(out.len() >= 20, "truncated reply {out:02x?}");
        assert_eq!(
            u64::from_be_bytes(out[..8].try_into().unwrap()),
            REPLY_MAGIC
        );
        let option = u32::from_be_bytes(out[8..12].try_into().unwrap());
        let kind = u32::from_be_bytes(out[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(out[16..20].try_into().unwrap()) as usize;
        v.push((option, kind, out[20..20 + len].to_vec()));
        out = &out[20 + len..];
    }
    v
}

struct Session {
    hs: ServerHandshake,
    cat: Catalog,
}

impl Session {
    fn new(tls: TlsPolicy, flags: u32) -> Self {
        let mut hs = ServerHandshake::new(HandshakeConfig {
            tls,
            ..HandshakeConfig::default()
        });
        let greeting = hs.poll_output();
        assert_eq!(greeting.len(), 18);
        let cat = Catalog {
            secret: Cell::new(ExportAccess::Allowed),
        };
        let mut s = Self { hs, cat };
        assert_eq!(s.send(&flags.to_be_bytes()), HandshakeStatus::NeedInput);
        s
    }

    fn try_send(&mut self, bytes: &[u8]) -> Result<(usize, HandshakeStatus), HandshakeError> {
        self.hs.handle_input(bytes, &self.cat)
    }

    fn send(&mut self, bytes: &[u8]) -> HandshakeStatus {
        let (used, status) = self.try_send(bytes).expect("handshake error");
        assert_eq!(used, bytes.len(), "consumed");
        status
    }

    fn option(&mut self, option: u32, data: &[u8]) -> (HandshakeStatus, Vec<u8>) {
        let status = self.send(&opt(option, data));
        (status, self.hs.poll_output())
    }

    fn option_continue(&mut self, option: u32, data: &[u8]) -> Vec<u8> {
        let (status, out) = self.option(option, data);
        assert_eq!(status, HandshakeStatus::NeedInput, "option {option}");
        out
    }

    fn starttls(&mut self) {
        let (status, out) = self.option(OPT_STARTTLS, &[]);
        assert_eq!(status, HandshakeStatus::StartTls);
        assert_eq!(out, reply(OPT_STARTTLS, REP_ACK, &[]));
        assert!(self.hs.tls_active());
    }
}

/// The single error reply an option got.
fn error_kind(out: &[u8], option: u32) -> u32 {
    let r = replies(out);
    assert_eq!(r.len(), 1, "one reply expected: {r:?}");
    assert_eq!(r[0].0, option);
    r[0].1
}

// ---------------------------------------------------------------------------
// NOTLS

#[test]
fn notls_refuses_starttls_by_policy_and_never_says_tls_reqd() {
    let mut s = Session::new(TlsPolicy::Off, FIXED);
    let out = s.option_continue(OPT_STARTTLS, &[]);
    assert_eq!(error_kind(&out, OPT_STARTTLS), REP_ERR_POLICY);
    assert!(!s.hs.tls_active());
    // A catalog that calls an export TLS-only on a NOTLS server: the
    // export is refused, but never with TLS_REQD (the spec forbids it).
    s.cat.secret.set(ExportAccess::TlsRequired);
    let out = s.option_continue(OPT_GO, &go_data("secret"));
    assert_eq!(error_kind(&out, OPT_GO), REP_ERR_POLICY);
}

// ---------------------------------------------------------------------------
// FORCEDTLS

#[test]
fn forcedtls_answers_every_option_but_starttls_and_abort_with_tls_reqd() {
    let mut s = Session::new(TlsPolicy::Required, FIXED | NO_ZEROES);
    for (option, data) in [
        (OPT_LIST, Vec::new()),
        (OPT_INFO, go_data("open")),
        (OPT_GO, go_data("open")),
        (OPT_GO, go_data("no-such-export")),
        (OPT_STRUCTURED_REPLY, Vec::new()),
        (OPT_EXTENDED_HEADERS, Vec::new()),
        (OPT_LIST_META_CONTEXT, meta_data("open", "base:allocation")),
        (OPT_SET_META_CONTEXT, meta_data("open", "base:allocation")),
        (0x4242, b"unknown option".to_vec()),
    ] {
        let out = s.option_continue(option, &data);
        assert_eq!(
            out,
            reply(
                option,
                REP_ERR_TLS_REQD,
                b"this server requires TLS: send NBD_OPT_STARTTLS first"
            ),
            "option {option}: exactly one TLS_REQD, no name, size or flags"
        );
    }
    // STARTTLS with data is still invalid, not TLS_REQD.
    let out = s.option_continue(OPT_STARTTLS, b"x");
    assert_eq!(error_kind(&out, OPT_STARTTLS), REP_ERR_INVALID);
}

#[test]
fn forcedtls_oversized_option_gets_tls_reqd_after_its_data_is_skipped() {
    let mut s = Session::new(TlsPolicy::Required, FIXED);
    let out = s.option_continue(OPT_LIST, &vec![0; 70 * 1024]);
    assert_eq!(error_kind(&out, OPT_LIST), REP_ERR_TLS_REQD);
    // Compare: after TLS, the same option is just too big.
    s.starttls();
    let out = s.option_continue(OPT_LIST, &vec![0; 70 * 1024]);
    assert_eq!(error_kind(&out, OPT_LIST), REP_ERR_TOO_BIG);
}

#[test]
fn forcedtls_export_name_before_tls_disconnects_without_sending_anything() {
    let mut s = Session::new(TlsPolicy::Required, FIXED);
    // Only the header has arrived: the session ends before the name.
    let header = &opt(OPT_EXPORT_NAME, b"open")[..16];
    assert_eq!(s.try_send(header), Err(HandshakeError::TlsRequired));
    assert!(s.hs.poll_output().is_empty(), "no size or flags sent");
}

#[test]
fn forcedtls_abort_is_honoured_before_tls() {
    let mut s = Session::new(TlsPolicy::Required, FIXED);
    let (status, out) = s.option(OPT_ABORT, &[]);
    assert_eq!(status, HandshakeStatus::Aborted);
    assert_eq!(out, reply(OPT_ABORT, REP_ACK, &[]));
}

#[test]
fn forcedtls_refuses_clients_without_fixed_newstyle() {
    let mut hs = ServerHandshake::new(HandshakeConfig {
        tls: TlsPolicy::Required,
        ..HandshakeConfig::default()
    });
    hs.poll_output();
    let cat = Catalog {
        secret: Cell::new(ExportAccess::Allowed),
    };
    assert_eq!(
        hs.handle_input(&0u32.to_be_bytes(), &cat),
        Err(HandshakeError::TlsNeedsFixedNewstyle)
    );
}

#[test]
fn starttls_stops_consuming_at_the_ack_and_later_bytes_are_left_for_tls() {
    let mut s = Session::new(TlsPolicy::Required, FIXED);
    // A client that pipelines a plaintext LIST after STARTTLS must not
    // have it answered: those bytes belong to the TLS layer.
    let mut input = opt(OPT_STARTTLS, &[]);
    let starttls_len = input.len();
    input.extend_from_slice(&opt(OPT_LIST, &[]));
    let (used, status) = s.try_send(&input).unwrap();
    assert_eq!(status, HandshakeStatus::StartTls);
    assert_eq!(used, starttls_len);
    assert_eq!(s.hs.poll_output(), reply(OPT_STARTTLS, REP_ACK, &[]));
}

#[test]
fn after_starttls_options_work_and_a_second_starttls_is_invalid() {
    let mut s = Session::new(TlsPolicy::Required, FIXED | NO_ZEROES);
    s.starttls();
    let out = s.option_continue(OPT_STARTTLS, &[]);
    assert_eq!(error_kind(&out, OPT_STARTTLS), REP_ERR_INVALID);
    let out = s.option_continue(OPT_LIST, &[]);
    let r = replies(&out);
    assert_eq!(r.len(), 3);
    assert!(r.iter().all(|r| r.1 != REP_ERR_TLS_REQD));
    let (status, out) = s.option(OPT_GO, &go_data("open"));
    let HandshakeStatus::Done(n) = status else {
        panic!("GO after TLS: {status:?}")
    };
    assert_eq!(n.export.name, "open");
    assert_eq!(replies(&out).last().unwrap().1, REP_ACK);
}

#[test]
fn starttls_forgets_structured_replies_extended_headers_and_meta_contexts() {
    let mut s = Session::new(TlsPolicy::Optional, FIXED | NO_ZEROES);
    assert_eq!(
        s.option_continue(OPT_STRUCTURED_REPLY, &[]),
        reply(OPT_STRUCTURED_REPLY, REP_ACK, &[])
    );
    assert_eq!(
        s.option_continue(OPT_EXTENDED_HEADERS, &[]),
        reply(OPT_EXTENDED_HEADERS, REP_ACK, &[])
    );
    let out = s.option_continue(OPT_SET_META_CONTEXT, &meta_data("open", "base:allocation"));
    assert_eq!(replies(&out).len(), 2, "context + ACK");
    s.starttls();
    let (status, _) = s.option(OPT_GO, &go_data("open"));
    let HandshakeStatus::Done(n) = status else {
        panic!("GO: {status:?}")
    };
    assert_eq!(n.params.reply_style, ReplyStyle::Simple);
    assert_eq!(n.base_allocation_id, None);
    assert!(!n.params.block_status);
}

#[test]
fn structured_replies_negotiated_after_starttls_are_kept() {
    let mut s = Session::new(TlsPolicy::Optional, FIXED | NO_ZEROES);
    s.starttls();
    s.option_continue(OPT_STRUCTURED_REPLY, &[]);
    s.option_continue(OPT_SET_META_CONTEXT, &meta_data("open", "base:allocation"));
    let (status, _) = s.option(OPT_GO, &go_data("open"));
    let HandshakeStatus::Done(n) = status else {
        panic!("GO: {status:?}")
    };
    assert_eq!(n.params.reply_style, ReplyStyle::Structured);
    assert!(n.base_allocation_id.is_some());
}

// ---------------------------------------------------------------------------
// SELECTIVETLS and per-export access

#[test]
fn selectivetls_serves_plaintext_clients() {
    let mut s = Session::new(TlsPolicy::Optional, FIXED | NO_ZEROES);
    let out = s.option_continue(OPT_LIST, &[]);
    assert_eq!(replies(&out).len(), 3, "two exports and ACK");
    let (status, _) = s.option(OPT_GO, &go_data("open"));
    assert!(matches!(status, HandshakeStatus::Done(_)));
}

#[test]
fn tls_only_export_is_hidden_and_answers_tls_reqd_before_tls() {
    let mut s = Session::new(TlsPolicy::Optional, FIXED | NO_ZEROES);
    s.cat.secret.set(ExportAccess::TlsRequired);
    let out = s.option_continue(OPT_LIST, &[]);
    let r = replies(&out);
    assert_eq!(r.len(), 2, "only `open` and ACK: {r:?}");
    assert_eq!(r[0].1, REP_SERVER);
    assert_eq!(&r[0].2[4..], b"open");
    for option in [OPT_INFO, OPT_GO] {
        let out = s.option_continue(option, &go_data("secret"));
        assert_eq!(
            out,
            reply(option, REP_ERR_TLS_REQD, b"this export requires TLS"),
            "no size or flags of the export"
        );
    }
    // Meta context options may not say TLS_REQD (spec); they get POLICY.
    s.option_continue(OPT_STRUCTURED_REPLY, &[]);
    let out = s.option_continue(OPT_LIST_META_CONTEXT, &meta_data("secret", "base:"));
    assert_eq!(error_kind(&out, OPT_LIST_META_CONTEXT), REP_ERR_POLICY);
    // Unknown exports stay unknown.
    let out = s.option_continue(OPT_INFO, &go_data("nothing"));
    assert_eq!(error_kind(&out, OPT_INFO), REP_ERR_UNKNOWN);
}

#[test]
fn tls_only_export_by_export_name_before_tls_disconnects() {
    let mut s = Session::new(TlsPolicy::Optional, FIXED | NO_ZEROES);
    s.cat.secret.set(ExportAccess::TlsRequired);
    assert_eq!(
        s.try_send(&opt(OPT_EXPORT_NAME, b"secret")),
        Err(HandshakeError::TlsRequired)
    );
    assert!(s.hs.poll_output().is_empty());
}

#[test]
fn denied_export_is_hidden_and_answers_policy_without_any_detail() {
    let mut s = Session::new(TlsPolicy::Required, FIXED | NO_ZEROES);
    s.starttls();
    s.cat.secret.set(ExportAccess::Denied);
    let out = s.option_continue(OPT_LIST, &[]);
    let r = replies(&out);
    assert_eq!(r.len(), 2, "only `open` and ACK: {r:?}");
    assert!(!out.windows(6).any(|w| w == b"secret"));
    for option in [OPT_INFO, OPT_GO] {
        let out = s.option_continue(option, &go_data("secret"));
        assert_eq!(
            out,
            reply(
                option,
                REP_ERR_POLICY,
                b"this client is not allowed to use this export"
            )
        );
        assert!(!replies(&out).iter().any(|r| r.1 == REP_INFO));
    }
    s.option_continue(OPT_STRUCTURED_REPLY, &[]);
    let out = s.option_continue(
        OPT_SET_META_CONTEXT,
        &meta_data("secret", "base:allocation"),
    );
    assert_eq!(error_kind(&out, OPT_SET_META_CONTEXT), REP_ERR_POLICY);
    // The open export still works.
    let (status, _) = s.option(OPT_GO, &go_data("open"));
    assert!(matches!(status, HandshakeStatus::Done(_)));
}

#[test]
fn tls_required_after_tls_means_denied_never_tls_reqd() {
    let mut s = Session::new(TlsPolicy::Optional, FIXED | NO_ZEROES);
    s.starttls();
    // A catalog that still says TlsRequired after TLS (e.g. no client
    // certificate) must not make the server send TLS_REQD over TLS.
    s.cat.secret.set(ExportAccess::TlsRequired);
    let out = s.option_continue(OPT_GO, &go_data("secret"));
    assert_eq!(error_kind(&out, OPT_GO), REP_ERR_POLICY);
}

#[test]
fn denied_export_by_export_name_disconnects() {
    let mut s = Session::new(TlsPolicy::Required, FIXED | NO_ZEROES);
    s.starttls();
    s.cat.secret.set(ExportAccess::Denied);
    assert_eq!(
        s.try_send(&opt(OPT_EXPORT_NAME, b"secret")),
        Err(HandshakeError::ExportDenied("secret".into()))
    );
    assert!(s.hs.poll_output().is_empty(), "no size or flags sent");
}
