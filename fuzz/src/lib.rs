//! Helpers shared by the fuzz targets: a small export catalog, a driver
//! that feeds a [`ServerHandshake`] the way a server loop does, an option
//! reply parser written from the spec's layout, and the invariants every
//! negotiated session must satisfy. What every accepted command must
//! satisfy is the test kit's oracle (`sluice_testkit::nbd_oracle`), which
//! the property tests share.

use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{
    BlockSizes, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeError, HandshakeStatus,
    HeaderStyle, Negotiated, ReplyStyle, ServerHandshake,
};

/// Big-endian u16 at `at` (panics if out of range).
pub fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Big-endian u32 at `at`.
pub fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Big-endian u64 at `at`.
pub fn be64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

/// Three exports: `a` (the default, with a description), `b`, and `c`
/// without `base:allocation`. Their flags claim SEND_DF, which the
/// handshake must strip unless chunked replies were negotiated.
pub struct Catalog;

/// Transmission flags the catalog gives every export (bits 0..=11).
pub const CATALOG_FLAGS: u16 = 0x0fff;

impl ExportCatalog for Catalog {
    fn list(&self) -> Vec<(String, String)> {
        vec![
            ("a".into(), "the default".into()),
            ("b".into(), String::new()),
            ("c".into(), "no allocation".into()),
        ]
    }

    fn lookup(&self, name: &str) -> Option<ExportInfo> {
        let (name, description, size, base_allocation) = match name {
            "" | "a" => ("a", "the default", 1 << 20, true),
            "b" => ("b", "", 4096, true),
            "c" => ("c", "no allocation", u64::MAX, false),
            _ => return None,
        };
        Some(ExportInfo {
            name: name.into(),
            description: description.into(),
            size,
            flags: CATALOG_FLAGS,
            block_sizes: BlockSizes::default(),
            base_allocation,
        })
    }
}

/// One client option on the wire: `IHAVEOPT`, option, length, data.
pub fn encode_option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut o = Vec::with_capacity(16 + data.len());
    o.extend_from_slice(b"IHAVEOPT");
    o.extend_from_slice(&option.to_be_bytes());
    o.extend_from_slice(&(data.len() as u32).to_be_bytes());
    o.extend_from_slice(data);
    o
}

/// One option reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub option: u32,
    pub kind: u32,
    pub data: Vec<u8>,
}

/// Splits output into option replies; returns them and whatever could not
/// be framed as one (empty unless the handshake ended with
/// NBD_OPT_EXPORT_NAME). Panics on a reply whose data is cut short.
pub fn option_replies(mut out: &[u8]) -> (Vec<Reply>, &[u8]) {
    let mut replies = Vec::new();
    while out.len() >= 20 && be64(out, 0) == OPTION_REPLY_MAGIC {
        let len = be32(out, 16) as usize;
        assert!(out.len() >= 20 + len, "option reply data cut short");
        replies.push(Reply {
            option: be32(out, 8),
            kind: be32(out, 12),
            data: out[20..20 + len].to_vec(),
        });
        out = &out[20 + len..];
    }
    (replies, out)
}

/// What a fed handshake came to.
#[derive(Debug, PartialEq)]
pub struct Run {
    /// Everything sent, greeting included.
    pub output: Vec<u8>,
    /// The last result of `handle_input` (None if nothing was fed).
    pub outcome: Option<Result<HandshakeStatus, HandshakeError>>,
    /// Bytes consumed by successful calls.
    pub consumed: usize,
}

/// Feeds a handshake piece by piece, keeping unconsumed bytes for the
/// next call as a server loop does.
pub struct Feeder {
    hs: ServerHandshake,
    pending: Vec<u8>,
    run: Run,
}

impl Feeder {
    pub fn new(config: HandshakeConfig) -> Self {
        let mut hs = ServerHandshake::new(config);
        let output = hs.poll_output();
        assert_eq!(output, b"NBDMAGICIHAVEOPT\x00\x03", "greeting");
        Self {
            hs,
            pending: Vec::new(),
            run: Run {
                output,
                outcome: None,
                consumed: 0,
            },
        }
    }

    /// Whether the handshake has ended (done, aborted or failed).
    pub fn ended(&self) -> bool {
        !matches!(
            self.run.outcome,
            None | Some(Ok(HandshakeStatus::NeedInput))
        )
    }

    /// Feeds one piece; returns the output it produced. Does nothing once
    /// the handshake has ended.
    pub fn feed(&mut self, piece: &[u8]) -> Vec<u8> {
        if self.ended() {
            return Vec::new();
        }
        self.pending.extend_from_slice(piece);
        let result = self.hs.handle_input(&self.pending, &Catalog);
        let out = self.hs.poll_output();
        self.run.output.extend_from_slice(&out);
        match result {
            Ok((used, status)) => {
                assert!(
                    used <= self.pending.len(),
                    "consumed {used} of {} bytes",
                    self.pending.len()
                );
                self.pending.drain(..used);
                self.run.consumed += used;
                if status != HandshakeStatus::NeedInput {
                    assert_eq!(
                        self.hs.handle_input(b"IHAVEOPT", &Catalog),
                        Err(HandshakeError::Finished),
                        "input after the end"
                    );
                }
                if let HandshakeStatus::Done(n) = &status {
                    check_negotiated(n);
                }
                self.run.outcome = Some(Ok(status));
            }
            Err(e) => self.run.outcome = Some(Err(e)),
        }
        out
    }

    /// The last result of `handle_input`.
    pub fn outcome(&self) -> Option<&Result<HandshakeStatus, HandshakeError>> {
        self.run.outcome.as_ref()
    }

    pub fn finish(self) -> Run {
        self.run
    }
}

/// Invariants of every successful handshake.
pub fn check_negotiated(n: &Negotiated) {
    let p = &n.params;
    let chunked = p.reply_style.chunked();
    assert!(p.flags & FLAG_HAS_FLAGS != 0, "HAS_FLAGS");
    assert_eq!(
        p.flags & FLAG_SEND_DF != 0,
        chunked,
        "DF iff chunked replies"
    );
    assert_eq!(
        p.header_style == HeaderStyle::Extended,
        p.reply_style == ReplyStyle::Extended,
        "extended headers both ways"
    );
    assert_eq!(p.block_status, n.base_allocation_id.is_some());
    if p.block_status {
        assert!(chunked, "block status needs chunked replies");
        assert!(
            n.export.base_allocation,
            "block status needs base:allocation"
        );
    }
    assert_eq!(p.size, n.export.size);
    assert_eq!(p.max_payload, n.export.block_sizes.maximum_payload);
    assert_eq!(p.min_block, n.export.block_sizes.minimum);
}

