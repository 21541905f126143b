//! Structured handshake fuzzing: an `Arbitrary` list of mostly
//! well-formed options is encoded and fed one option at a time, and every
//! answer is checked against a model of the spec: the reply (or error)
//! each option must get, and after the handshake ends, parameters that
//! agree with what was negotiated — SEND_DF only with chunked replies,
//! extended headers both ways, block status only if `base:allocation` was
//! selected by the last SET_META_CONTEXT for that same export.
//!
//! Input layout (so seeds can be written by hand):
//!
//! ```text
//! byte 0: client flags: b < 0xf0 gives b & 3, else the next 4 bytes (BE)
//! then ops, each a tag byte (mod 14) and its fields:
//!   0 EXPORT_NAME name   1 ABORT blob       2 LIST blob
//!   3 STARTTLS blob      4 INFO name reqs   5 GO name reqs
//!   6 STRUCTURED_REPLY   7 LIST_META name queries
//!   8 SET_META name queries                 9 EXTENDED_HEADERS
//!  10 unknown option: u32 BE, blob
//!  11 raw INFO/GO/LIST_META/SET_META: selector byte (mod 4), blob
//!  12 STRUCTURED_REPLY blob                13 EXTENDED_HEADERS blob
//! name:    byte mod 5: "", "a", "b", "c", or 4 = blob (lossy UTF-8)
//! reqs:    count byte (mod 8), then u16 BE each
//! queries: count byte (mod 4), then each a byte mod 4:
//!          base:allocation, base:, qemu:dirty-bitmap:x, or 3 = blob
//! blob:    length byte, then that many bytes
//! ```

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use sluice_fuzz::{be32, encode_option, option_replies, Catalog, Feeder, Reply, CATALOG_FLAGS};
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{
    ExportCatalog, HandshakeConfig, HandshakeError, HandshakeStatus, HeaderStyle, Negotiated,
    ReplyStyle,
};

#[derive(Debug, Clone)]
enum Op {
    ExportName(String),
    Abort(Vec<u8>),
    List(Vec<u8>),
    StartTls(Vec<u8>),
    Info(String, Vec<u16>),
    Go(String, Vec<u16>),
    Structured(Vec<u8>),
    ListMeta(String, Vec<Vec<u8>>),
    SetMeta(String, Vec<Vec<u8>>),
    Extended(Vec<u8>),
    Unknown(u32, Vec<u8>),
    Raw(u32, Vec<u8>),
}

#[derive(Debug)]
struct Session {
    client_flags: u32,
    ops: Vec<Op>,
}

fn byte(u: &mut Unstructured<'_>) -> u8 {
    u.arbitrary().unwrap_or(0)
}

fn blob(u: &mut Unstructured<'_>) -> Vec<u8> {
    let n = usize::from(byte(u)).min(u.len());
    u.bytes(n).map(<[u8]>::to_vec).unwrap_or_default()
}

fn be_u32(u: &mut Unstructured<'_>) -> u32 {
    u32::from_be_bytes([byte(u), byte(u), byte(u), byte(u)])
}

fn name(u: &mut Unstructured<'_>) -> String {
    match byte(u) % 5 {
        0 => String::new(),
        1 => "a".into(),
        2 => "b".into(),
        3 => "c".into(),
        _ => String::from_utf8_lossy(&blob(u)).into_owned(),
    }
}

fn requests(u: &mut Unstructured<'_>) -> Vec<u16> {
    (0..byte(u) % 8)
        .map(|_| u16::from_be_bytes([byte(u), byte(u)]))
        .collect()
}

fn queries(u: &mut Unstructured<'_>) -> Vec<Vec<u8>> {
    (0..byte(u) % 4)
        .map(|_| match byte(u) % 4 {
            0 => b"base:allocation".to_vec(),
            1 => b"base:".to_vec(),
            2 => b"qemu:dirty-bitmap:x".to_vec(),
            _ => blob(u),
        })
        .collect()
}

impl<'a> Arbitrary<'a> for Session {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let b = byte(u);
        let client_flags = if b < 0xf0 {
            u32::from(b & 3)
        } else {
            be_u32(u)
        };
        let mut ops = Vec::new();
        while !u.is_empty() {
            let op = match byte(u) % 14 {
                0 => Op::ExportName(name(u)),
                1 => Op::Abort(blob(u)),
                2 => Op::List(blob(u)),
                3 => Op::StartTls(blob(u)),
                4 => Op::Info(name(u), requests(u)),
                5 => Op::Go(name(u), requests(u)),
                6 => Op::Structured(Vec::new()),
                7 => Op::ListMeta(name(u), queries(u)),
                8 => Op::SetMeta(name(u), queries(u)),
                9 => Op::Extended(Vec::new()),
                10 => {
                    let mut option = be_u32(u);
                    if (1..=11).contains(&option) && option != OPT_PEEK_EXPORT {
                        option += 100;
                    }
                    Op::Unknown(option, blob(u))
                }
                11 => {
                    let option = [
                        OPT_INFO,
                        OPT_GO,
                        OPT_LIST_META_CONTEXT,
                        OPT_SET_META_CONTEXT,
                    ][usize::from(byte(u) % 4)];
                    Op::Raw(option, blob(u))
                }
                12 => Op::Structured(blob(u)),
                _ => Op::Extended(blob(u)),
            };
            ops.push(op);
        }
        Ok(Self { client_flags, ops })
    }
}

fn info_go_data(name: &str, reqs: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
    for r in reqs {
        d.extend_from_slice(&r.to_be_bytes());
    }
    d
}

fn meta_data(name: &str, queries: &[Vec<u8>]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q);
    }
    d
}

impl Op {
    fn encode(&self) -> (u32, Vec<u8>) {
        match self {
            Self::ExportName(n) => (OPT_EXPORT_NAME, n.as_bytes().to_vec()),
            Self::Abort(d) => (OPT_ABORT, d.clone()),
            Self::List(d) => (OPT_LIST, d.clone()),
            Self::StartTls(d) => (OPT_STARTTLS, d.clone()),
            Self::Info(n, r) => (OPT_INFO, info_go_data(n, r)),
            Self::Go(n, r) => (OPT_GO, info_go_data(n, r)),
            Self::Structured(d) => (OPT_STRUCTURED_REPLY, d.clone()),
            Self::ListMeta(n, q) => (OPT_LIST_META_CONTEXT, meta_data(n, q)),
            Self::SetMeta(n, q) => (OPT_SET_META_CONTEXT, meta_data(n, q)),
            Self::Extended(d) => (OPT_EXTENDED_HEADERS, d.clone()),
            Self::Unknown(o, d) | Self::Raw(o, d) => (*o, d.clone()),
        }
    }
}

/// What the client has negotiated so far, as the spec defines it.
#[derive(Debug, Default)]
struct Model {
    no_zeroes: bool,
    structured: bool,
    extended: bool,
    /// Canonical export of the last SET_META_CONTEXT and whether it
    /// selected base:allocation (None: no SET, or the last one failed).
    last_set: Option<(String, bool)>,
}

impl Model {
    fn chunked(&self) -> bool {
        self.structured || self.extended
    }

    fn flags(&self) -> u16 {
        let mut f = (CATALOG_FLAGS | FLAG_HAS_FLAGS) & !FLAG_SEND_DF;
        if self.chunked() {
            f |= FLAG_SEND_DF;
        }
        f
    }

    /// Checks a finished handshake against the model.
    fn check_done(&self, n: &Negotiated, asked: &str) {
        let export = Catalog.lookup(asked).expect("only known exports succeed");
        assert_eq!(n.export, export);
        let p = &n.params;
        assert_eq!(p.flags, self.flags());
        let (reply, header) = if self.extended {
            (ReplyStyle::Extended, HeaderStyle::Extended)
        } else if self.structured {
            (ReplyStyle::Structured, HeaderStyle::Compact)
        } else {
            (ReplyStyle::Simple, HeaderStyle::Compact)
        };
        assert_eq!((p.reply_style, p.header_style), (reply, header));
        let selected =
            self.chunked() && matches!(&self.last_set, Some((name, true)) if *name == export.name);
        assert_eq!(
            n.base_allocation_id.is_some(),
            selected,
            "block status iff base:allocation was selected for this export ({:?})",
            self.last_set
        );
        assert_eq!(p.block_status, selected);
    }
}

fn single_error(replies: &[Reply], option: u32, kind: u32) {
    assert_eq!(
        replies.len(),
        1,
        "one reply to option {option}: {replies:?}"
    );
    assert_eq!((replies[0].option, replies[0].kind), (option, kind));
    assert!(std::str::from_utf8(&replies[0].data).is_ok());
}

fn ack_only(replies: &[Reply], option: u32) {
    assert_eq!(
        replies.len(),
        1,
        "one reply to option {option}: {replies:?}"
    );
    assert_eq!((replies[0].option, replies[0].kind), (option, REP_ACK));
    assert!(replies[0].data.is_empty());
}

fn ends_in_ack(replies: &[Reply]) -> bool {
    replies.last().is_some_and(|r| r.kind == REP_ACK)
}

/// The name in INFO/GO/META data, if it parses.
fn data_name(data: &[u8]) -> Option<&str> {
    let len = be32(data.get(..4)?, 0) as usize;
    std::str::from_utf8(data.get(4..4usize.checked_add(len)?)?).ok()
}

/// Replies of a successful INFO/GO for `export`.
fn check_info(replies: &[Reply], option: u32, asked: &str, reqs: &[u16], model: &Model) {
    let export = Catalog.lookup(asked).expect("known export");
    assert!(ends_in_ack(replies));
    let infos = &replies[..replies.len() - 1];
    assert!(infos
        .iter()
        .all(|r| r.option == option && r.kind == REP_INFO));
    let of_type = |t: u16| -> Vec<&Reply> {
        infos
            .iter()
            .filter(|r| r.data.len() >= 2 && u16::from_be_bytes([r.data[0], r.data[1]]) == t)
            .collect()
    };
    let exp = of_type(INFO_EXPORT);
    assert_eq!(exp.len(), 1, "exactly one INFO_EXPORT");
    let mut want = INFO_EXPORT.to_be_bytes().to_vec();
    want.extend_from_slice(&export.size.to_be_bytes());
    want.extend_from_slice(&model.flags().to_be_bytes());
    assert_eq!(exp[0].data, want);
    let names = of_type(INFO_NAME);
    assert!(names.len() <= 1);
    if reqs.contains(&INFO_NAME) || asked != export.name {
        assert_eq!(names.len(), 1, "INFO_NAME requested or name not canonical");
    }
    for n in names {
        assert_eq!(&n.data[2..], export.name.as_bytes());
    }
    for d in of_type(INFO_DESCRIPTION) {
        assert_eq!(&d.data[2..], export.description.as_bytes());
    }
    for b in of_type(INFO_BLOCK_SIZE) {
        assert_eq!(b.data.len(), 14);
    }
}

fn run(session: &Session) {
    let mut feeder = Feeder::new(HandshakeConfig::default());
    let out = feeder.feed(&session.client_flags.to_be_bytes());
    assert!(out.is_empty());
    if session.client_flags & !3 != 0 {
        assert_eq!(
            feeder.finish().outcome,
            Some(Err(HandshakeError::BadClientFlags(session.client_flags)))
        );
        return;
    }
    let mut model = Model {
        no_zeroes: session.client_flags & 2 != 0,
        ..Model::default()
    };
    for op in &session.ops {
        let (option, data) = op.encode();
        let out = feeder.feed(&encode_option(option, &data));
        let status = feeder.outcome().cloned().expect("fed");
        let (replies, unframed) = option_replies(&out);
        if !matches!(op, Op::ExportName(_)) {
            assert!(unframed.is_empty(), "unframed output {unframed:02x?}");
        }
        let cont = |status: &Result<HandshakeStatus, HandshakeError>| {
            assert_eq!(status, &Ok(HandshakeStatus::NeedInput), "{op:?}");
        };
        match op {
            Op::ExportName(name) => {
                if model.extended {
                    assert_eq!(status, Err(HandshakeError::ExportNameWithExtendedHeaders));
                    assert!(out.is_empty());
                } else if let Some(export) = Catalog.lookup(name) {
                    let Ok(HandshakeStatus::Done(n)) = &status else {
                        panic!("EXPORT_NAME {name:?}: {status:?}");
                    };
                    model.check_done(n, name);
                    let mut want = export.size.to_be_bytes().to_vec();
                    want.extend_from_slice(&model.flags().to_be_bytes());
                    if !model.no_zeroes {
                        want.extend_from_slice(&[0; 124]);
                    }
                    assert_eq!(out, want);
                } else {
                    assert_eq!(status, Err(HandshakeError::UnknownExport(name.clone())));
                    assert!(out.is_empty());
                }
            }
            Op::Abort(_) => {
                assert_eq!(status, Ok(HandshakeStatus::Aborted));
                ack_only(&replies, OPT_ABORT);
            }
            Op::List(d) => {
                cont(&status);
                if d.is_empty() {
                    assert_eq!(replies.len(), 4);
                    assert!(replies[..3].iter().all(|r| r.kind == REP_SERVER));
                    assert!(ends_in_ack(&replies));
                } else {
                    single_error(&replies, OPT_LIST, REP_ERR_INVALID);
                }
            }
            Op::StartTls(d) => {
                cont(&status);
                let kind = if d.is_empty() {
                    REP_ERR_POLICY
                } else {
                    REP_ERR_INVALID
                };
                single_error(&replies, OPT_STARTTLS, kind);
            }
            Op::Info(name, reqs) | Op::Go(name, reqs) => {
                if Catalog.lookup(name).is_none() {
                    cont(&status);
                    single_error(&replies, option, REP_ERR_UNKNOWN);
                } else {
                    check_info(&replies, option, name, reqs, &model);
                    if option == OPT_GO {
                        let Ok(HandshakeStatus::Done(n)) = &status else {
                            panic!("GO {name:?}: {status:?}");
                        };
                        model.check_done(n, name);
                    } else {
                        cont(&status);
                    }
                }
            }
            Op::Structured(d) => {
                cont(&status);
                if !d.is_empty() {
                    single_error(&replies, option, REP_ERR_INVALID);
                } else if model.extended {
                    single_error(&replies, option, REP_ERR_EXT_HEADER_REQD);
                } else {
                    ack_only(&replies, option);
                    model.structured = true;
                }
            }
            Op::Extended(d) => {
                cont(&status);
                if d.is_empty() {
                    ack_only(&replies, option);
                    model.extended = true;
                } else {
                    single_error(&replies, option, REP_ERR_INVALID);
                }
            }
            Op::ListMeta(name, queries) | Op::SetMeta(name, queries) => {
                cont(&status);
                let set = option == OPT_SET_META_CONTEXT;
                if set {
                    model.last_set = None;
                }
                if !model.chunked() {
                    single_error(&replies, option, REP_ERR_INVALID);
                } else if let Some(export) = Catalog.lookup(name) {
                    let is = |q: &Vec<u8>, s: &[u8]| q.as_slice() == s;
                    let found = export.base_allocation
                        && if set {
                            queries.iter().any(|q| is(q, b"base:allocation"))
                        } else {
                            queries.is_empty()
                                || queries
                                    .iter()
                                    .any(|q| is(q, b"base:allocation") || is(q, b"base:"))
                        };
                    assert_eq!(replies.len(), 1 + usize::from(found), "{replies:?}");
                    if found {
                        let r = &replies[0];
                        assert_eq!((r.option, r.kind), (option, REP_META_CONTEXT));
                        let id: u32 = if set { 1 } else { 0 };
                        assert_eq!(&r.data[..4], &id.to_be_bytes());
                        assert_eq!(&r.data[4..], b"base:allocation");
                    }
                    assert!(ends_in_ack(&replies));
                    if set {
                        model.last_set = Some((export.name, found));
                    }
                } else {
                    single_error(&replies, option, REP_ERR_UNKNOWN);
                }
            }
            Op::Unknown(o, _) => {
                cont(&status);
                single_error(&replies, *o, REP_ERR_UNSUP);
            }
            Op::Raw(o, d) => {
                // Arbitrary data for a parsing option: no prediction of
                // the answer, but the model follows what it did.
                let last = replies.last().expect("every option is answered");
                let ok = last.kind == REP_ACK;
                assert!(ok || last.kind & 0x8000_0000 != 0, "{replies:?}");
                let (_, init) = replies.split_last().expect("nonempty");
                assert!(init.iter().all(|r| r.kind & 0x8000_0000 == 0));
                if *o == OPT_SET_META_CONTEXT {
                    model.last_set = None;
                    if ok {
                        let name = data_name(d).expect("an accepted SET has a name");
                        let export = Catalog.lookup(name).expect("and names an export");
                        let selected = replies.iter().any(|r| r.kind == REP_META_CONTEXT);
                        model.last_set = Some((export.name, selected));
                    }
                }
                match &status {
                    Ok(HandshakeStatus::Done(n)) => {
                        assert!(ok && *o == OPT_GO);
                        let name = data_name(d).expect("an accepted GO has a name");
                        model.check_done(n, name);
                    }
                    other => cont(other),
                }
            }
        }
        if feeder.ended() {
            return;
        }
    }
}

fuzz_target!(|session: Session| {
    run(&session);
});
