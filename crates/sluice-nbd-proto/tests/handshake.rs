//! Byte-level tests of the server side of the fixed-newstyle handshake.
//!
//! Every client message is built here from the layouts in the NBD
//! specification (`doc/proto.md`, extended-headers branch), and every
//! expected server message is written out as hex, so these tests do not
//! trust any encoder of the crate under test. Option replies are
//!
//! ```text
//! 64 bits 0x0003e889045565a9 | 32 bits option | 32 bits reply type
//! | 32 bits length | data
//! ```
//!
//! and the tests pin the order in which the server sends its `NBD_REP_INFO`
//! replies (the spec allows any order, but sluice's is deterministic).

use sluice_nbd_proto::{
    BlockSizes, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeError, HandshakeStatus,
    HeaderStyle, Negotiated, ReplyStyle, RequestHeader, ServerHandshake,
};

// ---------------------------------------------------------------------------
// Fixtures: a small catalog and hex helpers.

/// Three exports: `disk` (the default, with a description and
/// `base:allocation`), `other` (read-only, claims SEND_DF itself, 512-byte
/// blocks) and `noalloc` (no `base:allocation`).
struct Catalog {
    exports: Vec<ExportInfo>,
    default: &'static str,
}

impl Catalog {
    fn new() -> Self {
        Self {
            exports: vec![
                ExportInfo {
                    name: "disk".into(),
                    description: "Main disk".into(),
                    size: 0x0010_0000,
                    // SEND_FLUSH | SEND_FUA | SEND_TRIM | SEND_WRITE_ZEROES | SEND_CACHE
                    flags: 0x0004 | 0x0008 | 0x0020 | 0x0040 | 0x0400,
                    block_sizes: BlockSizes {
                        minimum: 1,
                        preferred: 4096,
                        maximum_payload: 0x0200_0000,
                    },
                    base_allocation: true,
                },
                ExportInfo {
                    name: "other".into(),
                    description: String::new(),
                    size: 0x2000,
                    // READ_ONLY | SEND_DF (the handshake decides about DF)
                    flags: 0x0002 | 0x0080,
                    block_sizes: BlockSizes {
                        minimum: 512,
                        preferred: 4096,
                        maximum_payload: 0x0010_0000,
                    },
                    base_allocation: true,
                },
                ExportInfo {
                    name: "noalloc".into(),
                    description: "No allocation info".into(),
                    size: 0x1_0000_0000,
                    flags: 0,
                    block_sizes: BlockSizes::default(),
                    base_allocation: false,
                },
            ],
            default: "disk",
        }
    }
}

impl ExportCatalog for Catalog {
    fn list(&self) -> Vec<(String, String)> {
        self.exports
            .iter()
            .map(|e| (e.name.clone(), e.description.clone()))
            .collect()
    }

    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        let name = if name.is_empty() { self.default } else { name };
        self.exports.iter().find(|e| e.name == name).cloned()
    }
}

/// Decodes hex, ignoring whitespace and `_`.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'_')
        .collect();
    assert!(
        digits.len().is_multiple_of(2),
        "odd number of hex digits in {s:?}"
    );
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex digit"))
        .collect()
}

/// Concatenates byte strings.
fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `NBDMAGIC`, `IHAVEOPT`, handshake flags FIXED_NEWSTYLE | NO_ZEROES.
const GREETING: &str = "4e42444d41474943 49484156454f5054 0003";
/// Option reply magic.
const REP: &str = "0003e889045565a9";

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
const REP_ERR_UNSUP: u32 = 0x8000_0001;
const REP_ERR_POLICY: u32 = 0x8000_0002;
const REP_ERR_INVALID: u32 = 0x8000_0003;
const REP_ERR_UNKNOWN: u32 = 0x8000_0006;
const REP_ERR_TOO_BIG: u32 = 0x8000_0009;
const REP_ERR_EXT_HEADER_REQD: u32 = 0x8000_000a;

const INFO_NAME: u16 = 1;
const INFO_DESCRIPTION: u16 = 2;
const INFO_BLOCK_SIZE: u16 = 3;

/// A client option: `IHAVEOPT`, option, data length, data.
fn opt(option: u32, data: &[u8]) -> Vec<u8> {
    let len = u32::try_from(data.len()).expect("option data fits u32");
    cat(&[b"IHAVEOPT", &option.to_be_bytes(), &len.to_be_bytes(), data])
}

/// `NBD_OPT_INFO`/`NBD_OPT_GO` data: name length, name, request count,
/// requests.
fn go_data(name: &str, requests: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(requests.len() as u16).to_be_bytes());
    for r in requests {
        d.extend_from_slice(&r.to_be_bytes());
    }
    d
}

/// `NBD_OPT_{LIST,SET}_META_CONTEXT` data: name length, name, query
/// count, (query length, query)*.
fn meta_data(name: &str, queries: &[&[u8]]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q);
    }
    d
}

/// An ACK reply to `option`, written out.
fn ack(option: u32) -> Vec<u8> {
    hex(&format!("{REP} {option:08x} 00000001 00000000"))
}

/// Splits server output into option replies (option, type, data),
/// checking the magic and that nothing is left over.
fn replies(out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let magic = hex(REP);
    let mut v = Vec::new();
    let mut rest = out;
    while !rest.is_empty() {
        assert!(rest.len() >= 20, "truncated option reply: {rest:02x?}");
        assert_eq!(&rest[..8], &magic[..], "option reply magic");
        let option = u32::from_be_bytes(rest[8..12].try_into().expect("4 bytes"));
        let kind = u32::from_be_bytes(rest[12..16].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(rest[16..20].try_into().expect("4 bytes")) as usize;
        assert!(rest.len() >= 20 + len, "option reply data cut short");
        v.push((option, kind, rest[20..20 + len].to_vec()));
        rest = &rest[20 + len..];
    }
    v
}

/// Asserts `out` is exactly one error reply of `kind` to `option`, whose
/// data is a message string as the spec requires (UTF-8, no NUL).
fn assert_error_reply(out: &[u8], option: u32, kind: u32) {
    let r = replies(out);
    assert_eq!(r.len(), 1, "expected exactly one reply, got {r:?}");
    let (o, k, data) = &r[0];
    assert_eq!((*o, *k), (option, kind), "reply to option {option}");
    let msg = std::str::from_utf8(data).expect("error message is UTF-8");
    assert!(!msg.contains('\0'), "error message contains NUL");
}

// ---------------------------------------------------------------------------
// A driver around one handshake.

struct Session {
    hs: ServerHandshake,
    cat: Catalog,
}

impl Session {
    /// Handshake whose greeting has been taken (and checked).
    fn new() -> Self {
        Self::with_config(HandshakeConfig::default())
    }

    fn with_config(config: HandshakeConfig) -> Self {
        let mut hs = ServerHandshake::new(config);
        assert_eq!(hs.poll_output(), hex(GREETING));
        Self {
            hs,
            cat: Catalog::new(),
        }
    }

    /// Handshake past the client flags.
    fn start(client_flags: u32) -> Self {
        let mut s = Self::new();
        assert_eq!(
            s.send(&client_flags.to_be_bytes()),
            HandshakeStatus::NeedInput
        );
        assert!(s.out().is_empty(), "no reply to client flags");
        s
    }

    fn try_send(&mut self, bytes: &[u8]) -> Result<(usize, HandshakeStatus), HandshakeError> {
        self.hs.handle_input(bytes, &self.cat)
    }

    /// Feeds bytes that must be consumed whole.
    fn send(&mut self, bytes: &[u8]) -> HandshakeStatus {
        let (used, status) = self.try_send(bytes).expect("handshake error");
        assert_eq!(used, bytes.len(), "consumed");
        status
    }

    fn out(&mut self) -> Vec<u8> {
        self.hs.poll_output()
    }

    /// Sends one option; returns the status and everything the server sent.
    fn option(&mut self, option: u32, data: &[u8]) -> (HandshakeStatus, Vec<u8>) {
        let status = self.send(&opt(option, data));
        (status, self.out())
    }

    /// Sends an option that must not end the handshake; returns the output.
    fn option_continue(&mut self, option: u32, data: &[u8]) -> Vec<u8> {
        let (status, out) = self.option(option, data);
        assert_eq!(status, HandshakeStatus::NeedInput, "option {option}");
        out
    }

    fn structured(&mut self) {
        assert_eq!(
            self.option_continue(OPT_STRUCTURED_REPLY, &[]),
            ack(OPT_STRUCTURED_REPLY)
        );
    }

    fn extended(&mut self) {
        assert_eq!(
            self.option_continue(OPT_EXTENDED_HEADERS, &[]),
            ack(OPT_EXTENDED_HEADERS)
        );
    }

    /// NBD_OPT_GO that must succeed; returns the outcome and the output.
    fn go(&mut self, name: &str, requests: &[u16]) -> (Negotiated, Vec<u8>) {
        let (status, out) = self.option(OPT_GO, &go_data(name, requests));
        match status {
            HandshakeStatus::Done(n) => (*n, out),
            other => panic!("GO {name:?} did not finish the handshake: {other:?}, {out:02x?}"),
        }
    }
}

fn done(status: HandshakeStatus) -> Negotiated {
    match status {
        HandshakeStatus::Done(n) => *n,
        other => panic!("expected Done, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Greeting and client flags.

#[test]
fn greeting_is_nbdmagic_ihaveopt_fixed_newstyle_no_zeroes() {
    let mut hs = ServerHandshake::default();
    let greeting = hs.poll_output();
    assert_eq!(greeting, hex(GREETING));
    assert_eq!(greeting, b"NBDMAGICIHAVEOPT\x00\x03");
    assert!(hs.poll_output().is_empty(), "greeting is sent once");
}

#[test]
fn client_flags_wait_for_four_bytes() {
    let mut s = Session::new();
    for n in 0..4 {
        assert_eq!(
            s.try_send(&[0, 0, 0, 3][..n]),
            Ok((0, HandshakeStatus::NeedInput))
        );
    }
    assert_eq!(s.send(&[0, 0, 0, 3]), HandshakeStatus::NeedInput);
    assert!(s.out().is_empty());
}

#[test]
fn known_client_flags_are_accepted() {
    for flags in 0..=3u32 {
        let mut s = Session::start(flags);
        // And options work afterwards.
        assert_eq!(
            s.option_continue(OPT_STRUCTURED_REPLY, &[]),
            ack(OPT_STRUCTURED_REPLY)
        );
    }
}

#[test]
fn unknown_client_flags_are_fatal() {
    for flags in [0x4, 0x7, 0x8000_0000, 0xffff_ffff] {
        let mut s = Session::new();
        assert_eq!(
            s.try_send(&u32::to_be_bytes(flags)),
            Err(HandshakeError::BadClientFlags(flags))
        );
        assert!(s.out().is_empty());
        assert_eq!(
            s.try_send(&opt(OPT_LIST, &[])),
            Err(HandshakeError::Finished),
            "no input after a fatal error"
        );
    }
}

#[test]
fn bad_option_magic_is_fatal() {
    let mut s = Session::start(3);
    let bad = cat(&[b"IHAVEOPX", &hex("00000003 00000000")]);
    // Nothing is judged before a whole option header is there.
    assert_eq!(s.try_send(&bad[..15]), Ok((0, HandshakeStatus::NeedInput)));
    assert_eq!(
        s.try_send(&bad),
        Err(HandshakeError::BadOptionMagic(0x4948_4156_454f_5058))
    );
    assert!(s.out().is_empty());
    assert_eq!(s.try_send(&bad), Err(HandshakeError::Finished));

    // A client that echoes NBDMAGIC instead of IHAVEOPT.
    let mut s = Session::start(1);
    assert_eq!(
        s.try_send(&cat(&[b"NBDMAGIC", &hex("00000007 00000000")])),
        Err(HandshakeError::BadOptionMagic(0x4e42_444d_4147_4943))
    );
}

// ---------------------------------------------------------------------------
// NBD_OPT_LIST

#[test]
fn list_sends_one_rep_server_per_export_then_ack() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_LIST, &[]);
    let expected = cat(&[
        // REP_SERVER, 17 bytes: name length 4, "disk", description.
        &hex(&format!("{REP} 00000003 00000002 00000011 00000004")),
        b"disk",
        b"Main disk",
        // REP_SERVER, 9 bytes: name length 5, "other", no description.
        &hex(&format!("{REP} 00000003 00000002 00000009 00000005")),
        b"other",
        // REP_SERVER, 29 bytes.
        &hex(&format!("{REP} 00000003 00000002 0000001d 00000007")),
        b"noalloc",
        b"No allocation info",
        &hex(&format!("{REP} 00000003 00000001 00000000")),
    ]);
    assert_eq!(out, expected);
}

#[test]
fn list_with_data_is_invalid_and_handshake_continues() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_LIST, b"x");
    assert_error_reply(&out, OPT_LIST, REP_ERR_INVALID);
    let out = s.option_continue(OPT_LIST, &[]);
    assert_eq!(replies(&out).len(), 4);
}

// ---------------------------------------------------------------------------
// NBD_OPT_EXPORT_NAME

#[test]
fn export_name_sends_size_flags_and_124_zeroes() {
    let mut s = Session::start(1); // FIXED_NEWSTYLE only: zeroes wanted
    let (status, out) = s.option(OPT_EXPORT_NAME, b"disk");
    let expected = cat(&[&hex("0000000000100000 046d"), &[0u8; 124]]);
    assert_eq!(out.len(), 134);
    assert_eq!(out, expected);
    let n = done(status);
    assert_eq!(n.export.name, "disk");
    assert_eq!(n.base_allocation_id, None);
    assert_eq!(n.params.size, 0x0010_0000);
    assert_eq!(n.params.flags, 0x046d);
    assert_eq!(n.params.header_style, HeaderStyle::Compact);
    assert_eq!(n.params.reply_style, ReplyStyle::Simple);
    assert_eq!(n.params.max_payload, 0x0200_0000);
    assert_eq!(n.params.min_block, 1);
    assert!(!n.params.block_status);
    assert_eq!(
        s.try_send(&opt(OPT_LIST, &[])),
        Err(HandshakeError::Finished)
    );
}

#[test]
fn export_name_without_zeroes_when_client_asked() {
    let mut s = Session::start(3); // C_FIXED_NEWSTYLE | C_NO_ZEROES
    let (status, out) = s.option(OPT_EXPORT_NAME, b"disk");
    assert_eq!(out, hex("0000000000100000 046d"));
    done(status);

    // NO_ZEROES alone (without FIXED_NEWSTYLE) also drops them.
    let mut s = Session::start(2);
    let (status, out) = s.option(OPT_EXPORT_NAME, b"other");
    // 8 KiB, READ_ONLY | HAS_FLAGS, SEND_DF stripped (simple replies).
    assert_eq!(out, hex("0000000000002000 0003"));
    done(status);
}

#[test]
fn export_name_empty_selects_default_export() {
    let mut s = Session::start(3);
    let (status, out) = s.option(OPT_EXPORT_NAME, b"");
    assert_eq!(out, hex("0000000000100000 046d"));
    assert_eq!(done(status).export.name, "disk");
}

#[test]
fn export_name_after_structured_reply_advertises_df() {
    let mut s = Session::start(3);
    s.structured();
    let (status, out) = s.option(OPT_EXPORT_NAME, b"disk");
    assert_eq!(out, hex("0000000000100000 04ed"));
    let n = done(status);
    assert_eq!(n.params.reply_style, ReplyStyle::Structured);
    assert_eq!(n.params.header_style, HeaderStyle::Compact);
}

#[test]
fn export_name_after_set_meta_context_enables_block_status() {
    let mut s = Session::start(3);
    s.structured();
    s.option_continue(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &[b"base:allocation"]),
    );
    let (status, _) = s.option(OPT_EXPORT_NAME, b"disk");
    let n = done(status);
    assert_eq!(n.base_allocation_id, Some(1));
    assert!(n.params.block_status);
}

#[test]
fn export_name_unknown_is_fatal_without_output() {
    let mut s = Session::start(3);
    assert_eq!(
        s.try_send(&opt(OPT_EXPORT_NAME, b"nope")),
        Err(HandshakeError::UnknownExport("nope".into()))
    );
    assert!(s.out().is_empty());
}

#[test]
fn export_name_after_extended_headers_is_fatal() {
    let mut s = Session::start(3);
    s.extended();
    assert_eq!(
        s.try_send(&opt(OPT_EXPORT_NAME, b"disk")),
        Err(HandshakeError::ExportNameWithExtendedHeaders)
    );
    assert!(s.out().is_empty());
}

// ---------------------------------------------------------------------------
// NBD_OPT_INFO / NBD_OPT_GO

#[test]
fn info_sends_export_and_block_size_then_ack_and_continues() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_INFO, &go_data("disk", &[]));
    let expected = hex(&format!(
        "{REP} 00000006 00000003 0000000c  0000 0000000000100000 046d
         {REP} 00000006 00000003 0000000e  0003 00000001 00001000 02000000
         {REP} 00000006 00000001 00000000"
    ));
    assert_eq!(out, expected);
    // INFO leaves the handshake open; GO with the same data repeats it.
    let (n, out) = s.go("disk", &[]);
    assert_eq!(
        out,
        hex(&format!(
            "{REP} 00000007 00000003 0000000c  0000 0000000000100000 046d
             {REP} 00000007 00000003 0000000e  0003 00000001 00001000 02000000
             {REP} 00000007 00000001 00000000"
        ))
    );
    assert_eq!(n.export.name, "disk");
    assert_eq!(n.params.flags, 0x046d);
}

#[test]
fn go_answers_name_description_and_block_size_requests() {
    let mut s = Session::start(3);
    s.structured();
    let (n, out) = s.go("disk", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]);
    let expected = cat(&[
        // INFO_EXPORT: size 1 MiB, HAS_FLAGS | FLUSH | FUA | TRIM |
        // WRITE_ZEROES | DF | CACHE.
        &hex(&format!(
            "{REP} 00000007 00000003 0000000c  0000 0000000000100000 04ed"
        )),
        // INFO_NAME, 2 + 4 bytes.
        &hex(&format!("{REP} 00000007 00000003 00000006  0001")),
        b"disk",
        // INFO_DESCRIPTION, 2 + 9 bytes.
        &hex(&format!("{REP} 00000007 00000003 0000000b  0002")),
        b"Main disk",
        // INFO_BLOCK_SIZE: minimum 1, preferred 4096, maximum 32 MiB.
        &hex(&format!(
            "{REP} 00000007 00000003 0000000e  0003 00000001 00001000 02000000"
        )),
        &hex(&format!("{REP} 00000007 00000001 00000000")),
    ]);
    assert_eq!(out, expected);
    assert_eq!(n.export.name, "disk");
    assert_eq!(n.params.flags, 0x04ed);
    assert_eq!(n.params.reply_style, ReplyStyle::Structured);
    assert_eq!(n.params.header_style, HeaderStyle::Compact);
    assert_eq!(n.params.max_payload, 0x0200_0000);
    assert_eq!(n.params.min_block, 1);
}

#[test]
fn go_for_default_export_sends_its_canonical_name() {
    let mut s = Session::start(3);
    let (n, out) = s.go("", &[]);
    let expected = cat(&[
        &hex(&format!(
            "{REP} 00000007 00000003 0000000c  0000 0000000000100000 046d"
        )),
        &hex(&format!("{REP} 00000007 00000003 00000006  0001")),
        b"disk",
        &hex(&format!(
            "{REP} 00000007 00000003 0000000e  0003 00000001 00001000 02000000"
        )),
        &hex(&format!("{REP} 00000007 00000001 00000000")),
    ]);
    assert_eq!(out, expected);
    assert_eq!(n.export.name, "disk");
}

#[test]
fn info_omits_an_empty_description_and_ignores_unknown_requests() {
    let mut s = Session::start(3);
    // 0x7777 is no NBD_INFO type: the server MUST ignore it.
    let out = s.option_continue(OPT_INFO, &go_data("other", &[INFO_DESCRIPTION, 0x7777]));
    let expected = hex(&format!(
        "{REP} 00000006 00000003 0000000c  0000 0000000000002000 0003
         {REP} 00000006 00000003 0000000e  0003 00000200 00001000 00100000
         {REP} 00000006 00000001 00000000"
    ));
    assert_eq!(out, expected);
}

/// INFO_EXPORT always has HAS_FLAGS; SEND_DF appears exactly when
/// structured replies or extended headers were negotiated, whatever the
/// catalog says.
#[test]
fn info_export_flags_have_has_flags_and_df_only_with_chunked_replies() {
    #[derive(Clone, Copy, Debug)]
    enum Setup {
        Simple,
        Structured,
        Extended,
        StructuredThenExtended,
    }
    let cases = [
        (Setup::Simple, "disk", "0000000000100000 046d"),
        (Setup::Structured, "disk", "0000000000100000 04ed"),
        (Setup::Extended, "disk", "0000000000100000 04ed"),
        (
            Setup::StructuredThenExtended,
            "disk",
            "0000000000100000 04ed",
        ),
        (Setup::Simple, "other", "0000000000002000 0003"),
        (Setup::Structured, "other", "0000000000002000 0083"),
        (Setup::Extended, "other", "0000000000002000 0083"),
        (Setup::Simple, "noalloc", "0000000100000000 0001"),
        (Setup::Extended, "noalloc", "0000000100000000 0081"),
    ];
    for (setup, name, size_flags) in cases {
        let mut s = Session::start(3);
        match setup {
            Setup::Simple => {}
            Setup::Structured => s.structured(),
            Setup::Extended => s.extended(),
            Setup::StructuredThenExtended => {
                s.structured();
                s.extended();
            }
        }
        let expected = hex(&format!("0000 {size_flags}"));
        let out = s.option_continue(OPT_INFO, &go_data(name, &[]));
        let r = replies(&out);
        assert_eq!((r[0].0, r[0].1), (OPT_INFO, 3), "{setup:?} {name}");
        assert_eq!(r[0].2, expected, "INFO {setup:?} {name}");
        let (n, out) = s.go(name, &[]);
        let r = replies(&out);
        assert_eq!(r[0].2, expected, "GO {setup:?} {name}");
        assert_eq!(
            u16::from_be_bytes([expected[10], expected[11]]),
            n.params.flags,
            "params.flags match INFO_EXPORT"
        );
        let (header, reply) = match setup {
            Setup::Simple => (HeaderStyle::Compact, ReplyStyle::Simple),
            Setup::Structured => (HeaderStyle::Compact, ReplyStyle::Structured),
            Setup::Extended | Setup::StructuredThenExtended => {
                (HeaderStyle::Extended, ReplyStyle::Extended)
            }
        };
        assert_eq!(n.params.header_style, header, "{setup:?}");
        assert_eq!(n.params.reply_style, reply, "{setup:?}");
    }
}

#[test]
fn go_unknown_export_is_err_unknown_and_handshake_continues() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_GO, &go_data("nope", &[INFO_BLOCK_SIZE]));
    // No NBD_REP_INFO before the error.
    assert_error_reply(&out, OPT_GO, REP_ERR_UNKNOWN);
    let out = s.option_continue(OPT_INFO, &go_data("nope", &[]));
    assert_error_reply(&out, OPT_INFO, REP_ERR_UNKNOWN);
    let (n, _) = s.go("other", &[]);
    assert_eq!(n.export.name, "other");
}

#[test]
fn malformed_info_go_data_is_err_invalid_and_handshake_continues() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("no data", vec![]),
        ("short name length", hex("000000")),
        (
            "name length beyond data",
            cat(&[&hex("00000010"), b"ab", &hex("0000")]),
        ),
        ("missing request count", cat(&[&hex("00000004"), b"disk"])),
        (
            "half a request count",
            cat(&[&hex("00000004"), b"disk", &hex("00")]),
        ),
        (
            "request count beyond data",
            cat(&[&hex("00000004"), b"disk", &hex("0002 0001")]),
        ),
        (
            "trailing byte",
            cat(&[&hex("00000004"), b"disk", &hex("0000 ff")]),
        ),
        (
            "trailing byte after requests",
            cat(&[&hex("00000004"), b"disk", &hex("0001 0003 00")]),
        ),
        ("name length 2^32-1", hex("ffffffff 0000")),
    ];
    for option in [OPT_INFO, OPT_GO] {
        let mut s = Session::start(3);
        for (what, data) in &cases {
            let (status, out) = s.option(option, data);
            assert_eq!(status, HandshakeStatus::NeedInput, "{what}");
            assert_error_reply(&out, option, REP_ERR_INVALID);
        }
        // A name that is not UTF-8 or longer than the spec's 4096-byte
        // string limit can name no export: some error, no info.
        let mut long = (4097u32).to_be_bytes().to_vec();
        long.extend_from_slice(&[b'a'; 4097]);
        long.extend_from_slice(&[0, 0]);
        for data in [hex("00000002 fffe 0000"), long] {
            let out = s.option_continue(option, &data);
            let r = replies(&out);
            assert_eq!(r.len(), 1);
            assert!(
                r[0].1 == REP_ERR_INVALID || r[0].1 == REP_ERR_UNKNOWN,
                "{:#x}",
                r[0].1
            );
        }
        let (n, _) = s.go("disk", &[]);
        assert_eq!(n.export.name, "disk");
    }
}

// ---------------------------------------------------------------------------
// NBD_OPT_STARTTLS, NBD_OPT_STRUCTURED_REPLY, NBD_OPT_EXTENDED_HEADERS

#[test]
fn starttls_is_refused_by_policy_and_invalid_with_data() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_STARTTLS, &[]);
    assert_error_reply(&out, OPT_STARTTLS, REP_ERR_POLICY);
    let out = s.option_continue(OPT_STARTTLS, b"tls");
    assert_error_reply(&out, OPT_STARTTLS, REP_ERR_INVALID);
    s.go("disk", &[]);
}

#[test]
fn structured_reply_acks_and_rejects_data() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(out, hex(&format!("{REP} 00000008 00000001 00000000")));
    let out = s.option_continue(OPT_STRUCTURED_REPLY, &[0]);
    assert_error_reply(&out, OPT_STRUCTURED_REPLY, REP_ERR_INVALID);
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.params.reply_style, ReplyStyle::Structured);
}

#[test]
fn structured_reply_after_extended_headers_is_ext_header_reqd() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_EXTENDED_HEADERS, &[]);
    assert_eq!(out, hex(&format!("{REP} 0000000b 00000001 00000000")));
    let out = s.option_continue(OPT_STRUCTURED_REPLY, &[]);
    assert_error_reply(&out, OPT_STRUCTURED_REPLY, REP_ERR_EXT_HEADER_REQD);
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.params.reply_style, ReplyStyle::Extended);
    assert_eq!(n.params.header_style, HeaderStyle::Extended);
}

#[test]
fn extended_headers_with_data_is_invalid_and_not_negotiated() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_EXTENDED_HEADERS, b"\x00\x00");
    assert_error_reply(&out, OPT_EXTENDED_HEADERS, REP_ERR_INVALID);
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.params.reply_style, ReplyStyle::Simple);
    assert_eq!(n.params.header_style, HeaderStyle::Compact);
    assert_eq!(n.params.flags, 0x046d);
}

// ---------------------------------------------------------------------------
// NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT

/// `NBD_REP_META_CONTEXT` for base:allocation with context id `id`.
fn base_allocation_reply(option: u32, id: u32) -> Vec<u8> {
    cat(&[
        // 4 + 15 bytes of data.
        &hex(&format!("{REP} {option:08x} 00000004 00000013 {id:08x}")),
        b"base:allocation",
    ])
}

#[test]
fn meta_context_before_chunked_replies_is_invalid() {
    let mut s = Session::start(3);
    let data = meta_data("disk", &[b"base:allocation"]);
    for option in [OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT] {
        let out = s.option_continue(option, &data);
        assert_error_reply(&out, option, REP_ERR_INVALID);
    }
    // The failed SET selected nothing, even once structured replies come.
    s.structured();
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.base_allocation_id, None);
    assert!(!n.params.block_status);
}

#[test]
fn set_meta_context_selects_base_allocation_with_id_1() {
    let mut s = Session::start(3);
    s.structured();
    let out = s.option_continue(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &[b"base:allocation"]),
    );
    assert_eq!(
        out,
        cat(&[
            &base_allocation_reply(OPT_SET_META_CONTEXT, 1),
            &ack(OPT_SET_META_CONTEXT)
        ])
    );
    let (n, _) = s.go("disk", &[INFO_BLOCK_SIZE]);
    assert_eq!(n.base_allocation_id, Some(1));
    assert!(n.params.block_status);
    // And the negotiated parameters let BLOCK_STATUS through.
    let bs = RequestHeader {
        flags: 0,
        kind: 7,
        cookie: 1,
        offset: 0,
        length: 4096,
    };
    assert!(n.params.validate(&bs).is_ok());
}

#[test]
fn set_meta_context_under_extended_headers() {
    let mut s = Session::start(3);
    s.extended();
    let out = s.option_continue(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &[b"x-other:thing", b"base:allocation"]),
    );
    assert_eq!(
        out,
        cat(&[
            &base_allocation_reply(OPT_SET_META_CONTEXT, 1),
            &ack(OPT_SET_META_CONTEXT)
        ])
    );
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.base_allocation_id, Some(1));
    assert!(n.params.block_status);
    assert_eq!(n.params.reply_style, ReplyStyle::Extended);
}

#[test]
fn list_meta_context_returns_base_allocation_with_id_0() {
    let queries: [&[&[u8]]; 4] = [
        &[],
        &[b"base:"],
        &[b"base:allocation"],
        &[b"qemu:dirty-bitmap:x", b"base:"],
    ];
    for q in queries {
        let mut s = Session::start(3);
        s.structured();
        let out = s.option_continue(OPT_LIST_META_CONTEXT, &meta_data("disk", q));
        assert_eq!(
            out,
            cat(&[
                &base_allocation_reply(OPT_LIST_META_CONTEXT, 0),
                &ack(OPT_LIST_META_CONTEXT)
            ]),
            "queries {q:?}"
        );
        // LIST selects nothing.
        let (n, _) = s.go("disk", &[]);
        assert_eq!(n.base_allocation_id, None);
    }
}

#[test]
fn unknown_namespaces_and_leaves_are_ignored() {
    let mut s = Session::start(3);
    s.structured();
    let unknown: [&[&[u8]]; 3] = [
        &[b"qemu:dirty-bitmap:bitmap0"],
        &[b"base:nonexistent"],
        &[b"x-foo:", b"nbd-server:bar"],
    ];
    for q in unknown {
        for option in [OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT] {
            let out = s.option_continue(option, &meta_data("disk", q));
            assert_eq!(out, ack(option), "{option} {q:?}");
        }
    }
    // `base:` is only a LIST wildcard: SET MUST ignore it.
    let out = s.option_continue(OPT_SET_META_CONTEXT, &meta_data("disk", &[b"base:"]));
    assert_eq!(out, ack(OPT_SET_META_CONTEXT));
    // An export without base:allocation has nothing to list or select.
    for option in [OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT] {
        let out = s.option_continue(option, &meta_data("noalloc", &[b"base:allocation"]));
        assert_eq!(out, ack(option));
    }
    let out = s.option_continue(OPT_LIST_META_CONTEXT, &meta_data("noalloc", &[]));
    assert_eq!(out, ack(OPT_LIST_META_CONTEXT));
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.base_allocation_id, None);
    assert!(!n.params.block_status);
}

#[test]
fn set_for_one_export_then_go_to_another_gives_no_block_status() {
    let mut s = Session::start(3);
    s.structured();
    s.option_continue(
        OPT_SET_META_CONTEXT,
        &meta_data("disk", &[b"base:allocation"]),
    );
    let (n, _) = s.go("other", &[]);
    assert_eq!(n.export.name, "other");
    assert_eq!(n.base_allocation_id, None);
    assert!(!n.params.block_status);
}

#[test]
fn set_for_default_export_counts_for_its_canonical_name() {
    let mut s = Session::start(3);
    s.structured();
    s.option_continue(OPT_SET_META_CONTEXT, &meta_data("", &[b"base:allocation"]));
    let (n, _) = s.go("", &[]);
    assert_eq!(n.base_allocation_id, Some(1));
}

#[test]
fn set_with_zero_queries_selects_nothing() {
    let mut s = Session::start(3);
    s.structured();
    let out = s.option_continue(OPT_SET_META_CONTEXT, &meta_data("disk", &[]));
    assert_eq!(out, ack(OPT_SET_META_CONTEXT));
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.base_allocation_id, None);
    assert!(!n.params.block_status);
}

#[test]
fn a_later_set_replaces_the_selection_even_when_it_fails() {
    let failing: Vec<(Vec<u8>, u32)> = vec![
        // Query length beyond the data.
        (
            cat(&[
                &hex("00000004"),
                b"disk",
                &hex("00000001 00000010"),
                b"base:",
            ]),
            REP_ERR_INVALID,
        ),
        // Trailing byte.
        (
            cat(&[&meta_data("disk", &[b"base:allocation"]), &[0]]),
            REP_ERR_INVALID,
        ),
        // Query count beyond the data.
        (
            cat(&[&hex("00000004"), b"disk", &hex("00000002 00000000")]),
            REP_ERR_INVALID,
        ),
        (meta_data("nope", &[b"base:allocation"]), REP_ERR_UNKNOWN),
    ];
    for (data, kind) in failing {
        let mut s = Session::start(3);
        s.structured();
        s.option_continue(
            OPT_SET_META_CONTEXT,
            &meta_data("disk", &[b"base:allocation"]),
        );
        let out = s.option_continue(OPT_SET_META_CONTEXT, &data);
        assert_error_reply(&out, OPT_SET_META_CONTEXT, kind);
        let (n, _) = s.go("disk", &[]);
        assert_eq!(n.base_allocation_id, None, "{data:02x?}");
        assert!(!n.params.block_status);
    }
}

#[test]
fn malformed_list_meta_context_is_invalid() {
    let mut s = Session::start(3);
    s.structured();
    for data in [
        vec![],
        cat(&[&hex("00000004"), b"disk"]),
        cat(&[
            &hex("00000004"),
            b"disk",
            &hex("00000001 00000005"),
            b"base",
        ]),
        cat(&[&meta_data("disk", &[]), &[0]]),
    ] {
        let out = s.option_continue(OPT_LIST_META_CONTEXT, &data);
        assert_error_reply(&out, OPT_LIST_META_CONTEXT, REP_ERR_INVALID);
    }
    let out = s.option_continue(OPT_LIST_META_CONTEXT, &meta_data("nope", &[]));
    assert_error_reply(&out, OPT_LIST_META_CONTEXT, REP_ERR_UNKNOWN);
}

// ---------------------------------------------------------------------------
// Unknown options, NBD_OPT_ABORT, oversized options

#[test]
fn unknown_options_are_unsupported_and_handshake_continues() {
    let mut s = Session::start(3);
    for option in [0, 4, 12, 99, 0x7fff_ffff, 0xffff_ffff] {
        let out = s.option_continue(option, b"some data");
        assert_error_reply(&out, option, REP_ERR_UNSUP);
        let out = s.option_continue(option, &[]);
        assert_error_reply(&out, option, REP_ERR_UNSUP);
    }
    s.go("disk", &[]);
}

#[test]
fn abort_is_acked_and_ends_the_handshake() {
    for data in [&b""[..], b"ignored"] {
        let mut s = Session::start(3);
        let (status, out) = s.option(OPT_ABORT, data);
        assert_eq!(status, HandshakeStatus::Aborted);
        assert_eq!(out, hex(&format!("{REP} 00000002 00000001 00000000")));
        assert_eq!(
            s.try_send(&opt(OPT_LIST, &[])),
            Err(HandshakeError::Finished)
        );
    }
}

#[test]
fn oversized_option_is_skipped_in_pieces_and_answered_too_big() {
    let mut s = Session::start(3);
    // NBD_OPT_GO announcing 64 KiB + 1 bytes of data.
    let header = cat(&[b"IHAVEOPT", &hex("00000007 00010001")]);
    assert_eq!(s.send(&header), HandshakeStatus::NeedInput);
    assert!(s.out().is_empty(), "no answer before the data is skipped");
    let data = vec![0x5a; 0x1_0001];
    let (first, rest) = data.split_at(30_000);
    let (second, last) = rest.split_at(30_000);
    assert_eq!(s.send(first), HandshakeStatus::NeedInput);
    assert_eq!(s.send(second), HandshakeStatus::NeedInput);
    assert!(s.out().is_empty());
    assert_eq!(s.send(&last[..last.len() - 1]), HandshakeStatus::NeedInput);
    assert!(s.out().is_empty());
    // The last byte of data and a whole NBD_OPT_LIST in one read.
    let status = s.send(&cat(&[&last[last.len() - 1..], &opt(OPT_LIST, &[])]));
    assert_eq!(status, HandshakeStatus::NeedInput);
    let out = s.out();
    let r = replies(&out);
    assert_eq!(r.len(), 5, "TOO_BIG, then LIST's 3 REP_SERVER and ACK");
    assert_eq!((r[0].0, r[0].1), (OPT_GO, REP_ERR_TOO_BIG));
    assert!(std::str::from_utf8(&r[0].2).is_ok());
    assert_eq!((r[4].0, r[4].1), (OPT_LIST, REP_ACK));
    let (n, _) = s.go("disk", &[]);
    assert_eq!(n.export.name, "disk");
}

#[test]
fn oversized_option_up_to_the_disconnect_limit_is_skipped() {
    let mut s = Session::start(3);
    let limit = HandshakeConfig::default().disconnect_option_len;
    let header = cat(&[b"IHAVEOPT", &99u32.to_be_bytes(), &limit.to_be_bytes()]);
    assert_eq!(s.send(&header), HandshakeStatus::NeedInput);
    let data = vec![0u8; limit as usize];
    for piece in data.chunks(100_000) {
        assert_eq!(s.send(piece), HandshakeStatus::NeedInput);
    }
    let out = s.out();
    assert_error_reply(&out, 99, REP_ERR_TOO_BIG);
    s.go("disk", &[]);
}

#[test]
fn option_beyond_the_disconnect_limit_is_fatal() {
    let mut s = Session::start(3);
    let limit = HandshakeConfig::default().disconnect_option_len;
    let header = cat(&[b"IHAVEOPT", &hex("00000063 ffffffff")]);
    assert_eq!(
        s.try_send(&header),
        Err(HandshakeError::OptionTooLarge {
            option: 99,
            len: 0xffff_ffff,
            limit,
        })
    );
    assert!(s.out().is_empty());
}

#[test]
fn option_of_exactly_64_kib_is_processed() {
    let mut s = Session::start(3);
    let out = s.option_continue(OPT_STARTTLS, &vec![0; 0x1_0000]);
    assert_error_reply(&out, OPT_STARTTLS, REP_ERR_INVALID);
    let out = s.option_continue(99, &vec![0; 0x1_0000]);
    assert_error_reply(&out, 99, REP_ERR_UNSUP);
}

#[test]
fn option_limit_follows_config() {
    let mut s = Session::with_config(HandshakeConfig {
        max_option_len: 8,
        ..HandshakeConfig::default()
    });
    assert_eq!(s.send(&[0, 0, 0, 3]), HandshakeStatus::NeedInput);
    let out = s.option_continue(OPT_LIST, &[0; 9]);
    assert_error_reply(&out, OPT_LIST, REP_ERR_TOO_BIG);
    let out = s.option_continue(OPT_LIST, &[0; 8]);
    assert_error_reply(&out, OPT_LIST, REP_ERR_INVALID);
}

#[test]
fn incomplete_option_is_not_consumed() {
    let mut s = Session::start(3);
    let o = opt(OPT_GO, &go_data("disk", &[]));
    for n in 0..o.len() {
        assert_eq!(
            s.try_send(&o[..n]),
            Ok((0, HandshakeStatus::NeedInput)),
            "prefix of {n} bytes"
        );
    }
    assert!(s.out().is_empty());
}

#[test]
fn bytes_after_go_are_left_for_the_transmission_phase() {
    let mut s = Session::start(3);
    let go = opt(OPT_GO, &go_data("disk", &[]));
    // A compact NBD_CMD_READ header right behind the GO.
    let read = hex("25609513 0000 0000 0000000000000001 0000000000000000 00001000");
    let (used, status) = s.try_send(&cat(&[&go, &read])).expect("no error");
    assert_eq!(used, go.len());
    done(status);
}

// ---------------------------------------------------------------------------
// Feeding in pieces

#[derive(Debug, PartialEq)]
struct Run {
    /// Everything the server sent, greeting included.
    output: Vec<u8>,
    /// The last result (None if nothing was fed).
    outcome: Option<Result<HandshakeStatus, HandshakeError>>,
    /// Bytes consumed by successful calls.
    consumed: usize,
}

/// Feeds `chunks` the way a server loop does: unconsumed bytes are kept
/// and presented again with the next chunk; stops at the end of the
/// handshake.
fn run_chunks<'a>(config: HandshakeConfig, chunks: impl IntoIterator<Item = &'a [u8]>) -> Run {
    let cat = Catalog::new();
    let mut hs = ServerHandshake::new(config);
    let mut output = hs.poll_output();
    let mut pending: Vec<u8> = Vec::new();
    let mut consumed = 0;
    let mut outcome = None;
    for chunk in chunks {
        pending.extend_from_slice(chunk);
        let result = hs.handle_input(&pending, &cat);
        output.extend(hs.poll_output());
        match result {
            Ok((used, status)) => {
                assert!(used <= pending.len(), "consumed more than given");
                pending.drain(..used);
                consumed += used;
                let finished = status != HandshakeStatus::NeedInput;
                outcome = Some(Ok(status));
                if finished {
                    break;
                }
            }
            Err(e) => {
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

/// What libnbd/qemu send, plus a detour through every kind of reply;
/// `oversized` is the data length of an option that must be skipped.
fn busy_session(oversized: usize) -> Vec<u8> {
    cat(&[
        &hex("00000003"),
        &opt(OPT_LIST, &[]),
        &opt(OPT_STRUCTURED_REPLY, &[]),
        &opt(OPT_LIST_META_CONTEXT, &meta_data("disk", &[])),
        &opt(
            OPT_SET_META_CONTEXT,
            &meta_data("disk", &[b"base:allocation"]),
        ),
        &opt(99, b"xyz"),
        &opt(OPT_INFO, &go_data("", &[INFO_NAME])),
        &opt(OPT_STARTTLS, &[]),
        &opt(OPT_GO, &cat(&[&hex("00000010"), b"ab", &hex("0000")])),
        &opt(4, &vec![0xaa; oversized]),
        &opt(OPT_GO, &go_data("disk", &[INFO_BLOCK_SIZE])),
    ])
}

fn check_busy_session_result(run: &Run, len: usize) {
    assert_eq!(&run.output[..18], &hex(GREETING)[..]);
    let kinds: Vec<(u32, u32)> = replies(&run.output[18..])
        .into_iter()
        .map(|(o, k, _)| (o, k))
        .collect();
    assert_eq!(
        kinds,
        [
            (3, 2),
            (3, 2),
            (3, 2),
            (3, 1),
            (8, 1),
            (9, 4),
            (9, 1),
            (10, 4),
            (10, 1),
            (99, REP_ERR_UNSUP),
            (6, 3),
            (6, 3),
            (6, 3),
            (6, 1),
            (5, REP_ERR_POLICY),
            (7, REP_ERR_INVALID),
            (4, REP_ERR_TOO_BIG),
            (7, 3),
            (7, 3),
            (7, 1),
        ]
    );
    assert_eq!(run.consumed, len);
    let Some(Ok(HandshakeStatus::Done(n))) = &run.outcome else {
        panic!("handshake did not finish: {:?}", run.outcome);
    };
    assert_eq!(n.base_allocation_id, Some(1));
    assert!(n.params.block_status);
    assert_eq!(n.params.flags, 0x04ed);
    assert_eq!(n.params.reply_style, ReplyStyle::Structured);
}

#[test]
fn one_byte_at_a_time_equals_all_at_once() {
    let input = busy_session(0x1_0001);
    // Transmission bytes behind the GO must stay unconsumed either way.
    let trailer = hex("25609513 0000 0000 0000000000000001 0000000000000000 00001000");
    let whole = cat(&[&input, &trailer]);
    let config = HandshakeConfig::default();
    let at_once = run_chunks(config, [&whole[..]]);
    check_busy_session_result(&at_once, input.len());
    let bytewise = run_chunks(config, whole.chunks(1));
    assert_eq!(bytewise, at_once);
}

#[test]
fn every_split_point_gives_the_same_result() {
    // A small option limit keeps the skipped option short.
    let config = HandshakeConfig {
        max_option_len: 32,
        ..HandshakeConfig::default()
    };
    let input = busy_session(40);
    let at_once = run_chunks(config, [&input[..]]);
    check_busy_session_result(&at_once, input.len());
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        assert_eq!(run_chunks(config, [a, b]), at_once, "split at {i}");
    }
    for size in [2, 3, 5, 7, 16, 17, 64] {
        assert_eq!(
            run_chunks(config, input.chunks(size)),
            at_once,
            "chunks of {size}"
        );
    }
}

#[test]
fn pieces_do_not_change_errors_aborts_or_export_name() {
    let config = HandshakeConfig::default();
    let sessions = [
        // Bad option magic after a good option.
        cat(&[
            &hex("00000003"),
            &opt(OPT_STRUCTURED_REPLY, &[]),
            b"IHAVEOPX",
            &hex("00000003 00000000"),
        ]),
        // Abort after a listing.
        cat(&[&hex("00000001"), &opt(OPT_LIST, &[]), &opt(OPT_ABORT, &[])]),
        // EXPORT_NAME with the 124 zero bytes.
        cat(&[
            &hex("00000001"),
            &opt(OPT_STRUCTURED_REPLY, &[]),
            &opt(OPT_EXPORT_NAME, b"other"),
        ]),
        // Unknown EXPORT_NAME.
        cat(&[&hex("00000003"), &opt(OPT_EXPORT_NAME, b"nope")]),
        // Bad client flags.
        hex("00000010"),
    ];
    for input in &sessions {
        let at_once = run_chunks(config, [&input[..]]);
        let bytewise = run_chunks(config, input.chunks(1));
        assert_eq!(bytewise.output, at_once.output);
        assert_eq!(bytewise.outcome, at_once.outcome);
        if let Some(Ok(_)) = at_once.outcome {
            assert_eq!(bytewise.consumed, at_once.consumed);
        }
    }
}

// ---------------------------------------------------------------------------
// Deviations from the specification found in review, now fixed; these
// keep them fixed.

/// NBD_OPT_EXPORT_NAME cannot be answered with an option reply: if the
/// export does not exist the server "MUST terminate the session". A name
/// longer than 64 KiB names no export, yet the server skips it and sends
/// `NBD_REP_ERR_TOO_BIG`, which the client reads as size
/// 0x0003e889045565a9 and flags, and enters transmission while the server
/// still waits for options.
#[test]
fn oversized_export_name_terminates_the_session() {
    let mut s = Session::start(3);
    let input = cat(&[b"IHAVEOPT", &hex("00000001 00010001"), &[b'a'; 0x1_0001]]);
    let result = s.try_send(&input);
    let out = s.out();
    assert!(
        result.is_err(),
        "expected a hard disconnect, got {result:?} and {out:02x?}"
    );
    assert!(out.is_empty());
}

/// Error messages are strings, which "MUST be no longer than 4096 bytes";
/// the ERR_UNKNOWN message quotes the whole (up to 4096-byte) name.
#[test]
fn unknown_export_error_message_fits_the_string_limit() {
    let name = "a".repeat(4096);
    let mut s = Session::start(3);
    s.structured();
    for (option, data) in [
        (OPT_GO, go_data(&name, &[])),
        (OPT_INFO, go_data(&name, &[])),
        (OPT_LIST_META_CONTEXT, meta_data(&name, &[])),
        (OPT_SET_META_CONTEXT, meta_data(&name, &[])),
    ] {
        let out = s.option_continue(option, &data);
        let r = replies(&out);
        assert_eq!(r[0].1, REP_ERR_UNKNOWN);
        assert!(
            r[0].2.len() <= 4096,
            "option {option}: {}-byte error message",
            r[0].2.len()
        );
    }
}

/// "The server MUST reply with NBD_REP_ACK" to NBD_OPT_ABORT and "SHOULD
/// ignore any data"; with more than 64 KiB of data it answers TOO_BIG and
/// keeps the session open instead.
#[test]
fn oversized_abort_is_still_acked() {
    let mut s = Session::start(3);
    let input = cat(&[b"IHAVEOPT", &hex("00000002 00010001"), &[0; 0x1_0001]]);
    let (_, status) = s.try_send(&input).expect("no error");
    assert_eq!(s.out(), hex(&format!("{REP} 00000002 00000001 00000000")));
    assert_eq!(status, HandshakeStatus::Aborted);
}
