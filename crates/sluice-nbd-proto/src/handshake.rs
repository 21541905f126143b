//! The server side of the fixed-newstyle handshake as a sans-IO state
//! machine: feed it received bytes with [`ServerHandshake::handle_input`],
//! send what [`ServerHandshake::poll_output`] returns, until it reports
//! [`HandshakeStatus::Done`] (enter transmission) or `Aborted`.
//!
//! TLS: with a [`TlsPolicy`] other than `Off`, an accepted
//! `NBD_OPT_STARTTLS` queues its `NBD_REP_ACK` and returns
//! [`HandshakeStatus::StartTls`]. The caller sends the ACK in plaintext,
//! runs the TLS handshake on its transport, and from then on feeds the
//! machine decrypted bytes only. Input left unconsumed at that point is
//! the start of the TLS handshake, never options: a client cannot smuggle
//! plaintext options past STARTTLS.

pub use sluice_types::TlsPolicy;
use thiserror::Error;

use crate::consts::*;
use crate::reply::ReplyStyle;
use crate::request::{HeaderStyle, TransmissionParams};

/// Size constraints advertised with `NBD_INFO_BLOCK_SIZE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockSizes {
    /// Minimum block size (power of two, ≤ 64 KiB).
    pub minimum: u32,
    /// Preferred block size.
    pub preferred: u32,
    /// Maximum payload of one READ or WRITE.
    pub maximum_payload: u32,
}

impl Default for BlockSizes {
    fn default() -> Self {
        Self {
            minimum: 1,
            preferred: 4096,
            maximum_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

/// What the handshake needs to know about one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Canonical name (what `NBD_OPT_LIST` shows).
    pub name: String,
    /// Human-readable description; empty for none.
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags the export supports. `NBD_FLAG_SEND_DF` is added
    /// by the handshake only when chunked replies were negotiated.
    pub flags: u16,
    /// Size constraints.
    pub block_sizes: BlockSizes,
    /// Whether `base:allocation` can be selected.
    pub base_allocation: bool,
}

/// Whether the client of this session may use an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportAccess {
    /// The export may be listed, described and used.
    Allowed,
    /// The export is TLS-only and TLS has not started: `NBD_OPT_INFO` and
    /// `NBD_OPT_GO` get `NBD_REP_ERR_TLS_REQD` (the spec's SELECTIVETLS
    /// mode). After TLS has started this is treated as `Denied`.
    TlsRequired,
    /// The client may not use the export (e.g. its TLS identity is not on
    /// the export's allow-list): `NBD_REP_ERR_POLICY`.
    Denied,
}

/// The server's exports, as the handshake sees them.
pub trait ExportCatalog {
    /// Every export as (name, description), in listing order.
    fn list(&self) -> Vec<(String, String)>;
    /// The export a client asking for `name` gets (`""` is the default
    /// export), or `None` if there is none.
    fn lookup(&self, name: &str) -> Option<ExportInfo>;
    /// Whether this session's client may use the export with canonical
    /// name `name`. Exports that are not `Allowed` are hidden from
    /// `NBD_OPT_LIST` and refused before anything about them (size,
    /// flags, contexts) is sent. The server passes a catalog that knows
    /// the session: whether TLS is up and who the client proved to be.
    fn access(&self, name: &str) -> ExportAccess {
        let _ = name;
        ExportAccess::Allowed
    }
}

/// Handshake policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeConfig {
    /// Options with more data than this are skipped and answered with
    /// `NBD_REP_ERR_TOO_BIG`.
    pub max_option_len: u32,
    /// Options with more data than this end the session at once
    /// ([`HandshakeError::OptionTooLarge`]): skipping gigabytes would let a
    /// client hold a connection open for as long as it likes.
    pub disconnect_option_len: u32,
    /// Whether `NBD_OPT_STARTTLS` is accepted, and whether it is required.
    pub tls: TlsPolicy,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        Self {
            max_option_len: 64 * 1024,
            disconnect_option_len: 1 << 20,
            tls: TlsPolicy::Off,
        }
    }
}

/// The outcome of a successful handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The export chosen.
    pub export: ExportInfo,
    /// Parameters for validating requests.
    pub params: TransmissionParams,
    /// Context id of `base:allocation` if the client selected it.
    pub base_allocation_id: Option<u32>,
}

/// Where the handshake stands after consuming input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeStatus {
    /// Send the pending output and feed more input.
    NeedInput,
    /// The client sent `NBD_OPT_ABORT`; send the pending output and close.
    Aborted,
    /// Send the pending output, then enter the transmission phase.
    Done(Box<Negotiated>),
    /// `NBD_OPT_STARTTLS` was accepted: send the pending output (its
    /// `NBD_REP_ACK`) in plaintext, run the TLS handshake, then keep
    /// feeding the machine the decrypted bytes. Unconsumed input belongs
    /// to the TLS handshake. Everything negotiated before (structured
    /// replies, extended headers, meta contexts) has been forgotten.
    StartTls,
}

/// A violation that ends the session with a hard disconnect.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Client flags had bits we did not offer.
    #[error("client sent unknown handshake flags {0:#x}")]
    BadClientFlags(u32),
    /// An option did not start with `IHAVEOPT`.
    #[error("bad option magic {0:#018x}")]
    BadOptionMagic(u64),
    /// `NBD_OPT_EXPORT_NAME` named an export that does not exist.
    #[error("client asked for unknown export {0:?} with NBD_OPT_EXPORT_NAME")]
    UnknownExport(String),
    /// `NBD_OPT_EXPORT_NAME` after extended headers were negotiated.
    #[error("NBD_OPT_EXPORT_NAME used after extended headers were negotiated")]
    ExportNameWithExtendedHeaders,
    /// An option longer than any legitimate one (a DoS attempt or
    /// garbage): the session ends rather than waiting for its data.
    #[error(
        "option {option} claims {len} bytes of data, more than the {limit} this server accepts"
    )]
    OptionTooLarge { option: u32, len: u32, limit: u32 },
    /// `NBD_OPT_EXPORT_NAME` before TLS, on a server that requires TLS or
    /// for a TLS-only export. It cannot be refused, so the session ends.
    #[error("client used NBD_OPT_EXPORT_NAME before starting TLS, which is required")]
    TlsRequired,
    /// A server that requires TLS met a client without fixed newstyle,
    /// which cannot start TLS.
    #[error("client did not set NBD_FLAG_C_FIXED_NEWSTYLE, so it cannot start TLS, which this server requires")]
    TlsNeedsFixedNewstyle,
    /// `NBD_OPT_EXPORT_NAME` for an export this client may not use.
    #[error("client asked with NBD_OPT_EXPORT_NAME for export {0:?}, which it may not use")]
    ExportDenied(String),
    /// Input after the handshake ended.
    #[error("handshake already finished")]
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ClientFlags,
    Options,
    /// Skipping the data of an oversized option before answering it.
    Discarding {
        option: u32,
        remaining: u64,
    },
    Finished,
}

/// Fixed-newstyle handshake, server side.
#[derive(Debug)]
pub struct ServerHandshake {
    config: HandshakeConfig,
    state: State,
    out: Vec<u8>,
    no_zeroes: bool,
    /// The client set `NBD_FLAG_C_FIXED_NEWSTYLE` (TLS needs it).
    fixed: bool,
    /// `NBD_OPT_STARTTLS` was accepted: every later byte is over TLS.
    tls_active: bool,
    structured: bool,
    extended: bool,
    /// Canonical export name the last SET_META_CONTEXT referred to, and
    /// whether it selected base:allocation.
    meta: Option<(String, bool)>,
    /// The last access refusal not yet taken by the caller.
    refusal: Option<Refusal>,
}

/// A client refused for want of TLS or permission, for the server's log
/// (see [`ServerHandshake::take_refusal`]). Listings that leave out
/// exports a client may not use are not refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The server requires TLS and the client sent an option before
    /// STARTTLS (answered `NBD_REP_ERR_TLS_REQD`).
    TlsRequired,
    /// The export needs TLS, which this session has not started.
    ExportNeedsTls {
        /// The export's canonical name.
        export: String,
    },
    /// The client may not use the export (its allow-list).
    ExportDenied {
        /// The export's canonical name.
        export: String,
    },
}

/// Context id given to `base:allocation`.
pub const BASE_ALLOCATION_ID: u32 = 1;

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }
    fn u16(&mut self) -> Option<u16> {
        let b = self.bytes(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes(4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn string(&mut self, n: usize) -> Option<&'a str> {
        if n > MAX_STRING_LEN {
            return None;
        }
        std::str::from_utf8(self.bytes(n)?).ok()
    }
    fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

impl Default for ServerHandshake {
    fn default() -> Self {
        Self::new(HandshakeConfig::default())
    }
}

impl ServerHandshake {
    /// Starts a handshake; the greeting is queued as the first output.
    pub fn new(config: HandshakeConfig) -> Self {
        let mut out = Vec::with_capacity(18);
        out.extend_from_slice(&NBD_MAGIC.to_be_bytes());
        out.extend_from_slice(&IHAVEOPT.to_be_bytes());
        out.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        Self {
            config,
            state: State::ClientFlags,
            out,
            no_zeroes: false,
            fixed: false,
            tls_active: false,
            structured: false,
            extended: false,
            meta: None,
            refusal: None,
        }
    }

    /// The last access refusal since the previous call, if any: the
    /// session answered an option with `NBD_REP_ERR_TLS_REQD` or
    /// `NBD_REP_ERR_POLICY` and goes on.
    pub fn take_refusal(&mut self) -> Option<Refusal> {
        self.refusal.take()
    }

    /// Bytes to send now (empty when there is nothing).
    pub fn poll_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether `NBD_OPT_STARTTLS` has been accepted on this session.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// FORCEDTLS and TLS not started yet: only STARTTLS and ABORT count.
    fn tls_forced(&self) -> bool {
        self.config.tls == TlsPolicy::Required && !self.tls_active
    }

    /// What the catalog says, with the spec's rule that nothing answers
    /// `NBD_REP_ERR_TLS_REQD` once TLS is up, nor ever in NOTLS mode.
    fn access(&self, catalog: &dyn ExportCatalog, name: &str) -> ExportAccess {
        match catalog.access(name) {
            ExportAccess::TlsRequired if self.tls_active || self.config.tls == TlsPolicy::Off => {
                ExportAccess::Denied
            }
            a => a,
        }
    }

    /// Consumes as much of `input` as forms complete messages. Returns the
    /// number of bytes consumed and the status; unconsumed bytes must be
    /// presented again with more appended.
    pub fn handle_input(
        &mut self,
        input: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> Result<(usize, HandshakeStatus), HandshakeError> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Finished => return Err(HandshakeError::Finished),
                State::ClientFlags => {
                    let Some(b) = rest.get(..4) else {
                        return Ok((used, HandshakeStatus::NeedInput));
                    };
                    let flags = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                    if flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
                        self.state = State::Finished;
                        return Err(HandshakeError::BadClientFlags(flags));
                    }
                    self.no_zeroes = flags & FLAG_C_NO_ZEROES != 0;
                    self.fixed = flags & FLAG_C_FIXED_NEWSTYLE != 0;
                    if !self.fixed && self.config.tls == TlsPolicy::Required {
                        self.state = State::Finished;
                        return Err(HandshakeError::TlsNeedsFixedNewstyle);
                    }
                    self.state = State::Options;
                    used += 4;
                }
                State::Discarding { option, remaining } => {
                    let take = (rest.len() as u64).min(remaining);
                    used += take as usize;
                    if take < remaining {
                        self.state = State::Discarding {
                            option,
                            remaining: remaining - take,
                        };
                        return Ok((used, HandshakeStatus::NeedInput));
                    }
                    self.state = State::Options;
                    if option == OPT_ABORT {
                        // ABORT's data is to be ignored, however long.
                        self.reply(option, REP_ACK, &[]);
                        self.state = State::Finished;
                        return Ok((used, HandshakeStatus::Aborted));
                    }
                    if self.tls_forced() {
                        self.reply_tls_required(option);
                    } else {
                        self.reply_err(option, REP_ERR_TOO_BIG, "option data too long");
                    }
                }
                State::Options => {
                    if rest.len() < 16 {
                        return Ok((used, HandshakeStatus::NeedInput));
                    }
                    let mut r = Reader::new(rest);
                    let magic =
                        u64::from(r.u32().unwrap_or(0)) << 32 | u64::from(r.u32().unwrap_or(0));
                    if magic != IHAVEOPT {
                        self.state = State::Finished;
                        return Err(HandshakeError::BadOptionMagic(magic));
                    }
                    let option = r.u32().unwrap_or(0);
                    let len = r.u32().unwrap_or(0);
                    if len > self.config.disconnect_option_len {
                        self.state = State::Finished;
                        return Err(HandshakeError::OptionTooLarge {
                            option,
                            len,
                            limit: self.config.disconnect_option_len,
                        });
                    }
                    if option == OPT_EXPORT_NAME && self.tls_forced() {
                        // Cannot be answered with TLS_REQD: end the session
                        // before reading the name, let alone answering it.
                        self.state = State::Finished;
                        return Err(HandshakeError::TlsRequired);
                    }
                    if option == OPT_EXPORT_NAME && len as usize > MAX_STRING_LEN {
                        // No export has such a name, and EXPORT_NAME cannot
                        // be answered with an error: end the session.
                        self.state = State::Finished;
                        return Err(HandshakeError::UnknownExport(format!("<{len}-byte name>")));
                    }
                    if len > self.config.max_option_len {
                        used += 16;
                        self.state = State::Discarding {
                            option,
                            remaining: u64::from(len),
                        };
                        continue;
                    }
                    let Some(data) = rest.get(16..16 + len as usize) else {
                        return Ok((used, HandshakeStatus::NeedInput));
                    };
                    used += 16 + len as usize;
                    match self.handle_option(option, data, catalog)? {
                        HandshakeStatus::NeedInput => {}
                        // The rest of `input` is TLS: stop here.
                        HandshakeStatus::StartTls => return Ok((used, HandshakeStatus::StartTls)),
                        done => {
                            self.state = State::Finished;
                            return Ok((used, done));
                        }
                    }
                }
            }
        }
    }

    fn reply(&mut self, option: u32, kind: u32, data: &[u8]) {
        self.out
            .extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        self.out.extend_from_slice(&option.to_be_bytes());
        self.out.extend_from_slice(&kind.to_be_bytes());
        self.out
            .extend_from_slice(&(data.len() as u32).to_be_bytes());
        self.out.extend_from_slice(data);
    }

    /// An error reply whose message is clipped to the spec's 4096 bytes.
    fn reply_err(&mut self, option: u32, kind: u32, message: &str) {
        self.reply(option, kind, crate::reply::clip_message(message));
    }

    fn reply_tls_required(&mut self, option: u32) {
        self.refusal = Some(Refusal::TlsRequired);
        self.reply_err(
            option,
            REP_ERR_TLS_REQD,
            "this server requires TLS: send NBD_OPT_STARTTLS first",
        );
    }

    /// The refusal for an export that is not `Allowed`. The message names
    /// no export and says nothing about it.
    fn reply_refused(&mut self, option: u32, access: ExportAccess, export: &str) {
        let export = export.to_owned();
        self.refusal = Some(if access == ExportAccess::TlsRequired {
            Refusal::ExportNeedsTls { export }
        } else {
            Refusal::ExportDenied { export }
        });
        if access == ExportAccess::TlsRequired {
            self.reply_err(option, REP_ERR_TLS_REQD, "this export requires TLS");
        } else {
            self.reply_err(
                option,
                REP_ERR_POLICY,
                "this client is not allowed to use this export",
            );
        }
    }

    fn reply_style(&self) -> ReplyStyle {
        if self.extended {
            ReplyStyle::Extended
        } else if self.structured {
            ReplyStyle::Structured
        } else {
            ReplyStyle::Simple
        }
    }

    fn transmission_flags(&self, export: &ExportInfo) -> u16 {
        let mut flags = (export.flags | FLAG_HAS_FLAGS) & !FLAG_SEND_DF;
        if self.reply_style().chunked() {
            flags |= FLAG_SEND_DF;
        }
        flags
    }

    fn negotiated(&self, export: ExportInfo) -> Negotiated {
        let flags = self.transmission_flags(&export);
        let base_allocation_id = match &self.meta {
            Some((name, true)) if *name == export.name && self.reply_style().chunked() => {
                Some(BASE_ALLOCATION_ID)
            }
            _ => None,
        };
        let params = TransmissionParams {
            size: export.size,
            flags,
            header_style: if self.extended {
                HeaderStyle::Extended
            } else {
                HeaderStyle::Compact
            },
            reply_style: self.reply_style(),
            max_payload: export.block_sizes.maximum_payload,
            min_block: export.block_sizes.minimum,
            block_status: base_allocation_id.is_some(),
        };
        Negotiated {
            export,
            params,
            base_allocation_id,
        }
    }

    fn handle_option(
        &mut self,
        option: u32,
        data: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> Result<HandshakeStatus, HandshakeError> {
        if self.tls_forced() && option != OPT_STARTTLS && option != OPT_ABORT {
            // FORCEDTLS: the option is not even parsed.
            self.reply_tls_required(option);
            return Ok(HandshakeStatus::NeedInput);
        }
        match option {
            OPT_EXPORT_NAME => {
                if self.extended {
                    return Err(HandshakeError::ExportNameWithExtendedHeaders);
                }
                let name = String::from_utf8_lossy(data).into_owned();
                let export = catalog
                    .lookup(&name)
                    .ok_or_else(|| HandshakeError::UnknownExport(name.clone()))?;
                match self.access(catalog, &export.name) {
                    ExportAccess::Allowed => {}
                    ExportAccess::TlsRequired => return Err(HandshakeError::TlsRequired),
                    ExportAccess::Denied => return Err(HandshakeError::ExportDenied(name)),
                }
                let negotiated = self.negotiated(export);
                self.out
                    .extend_from_slice(&negotiated.export.size.to_be_bytes());
                self.out
                    .extend_from_slice(&negotiated.params.flags.to_be_bytes());
                if !self.no_zeroes {
                    self.out.extend_from_slice(&[0u8; 124]);
                }
                Ok(HandshakeStatus::Done(Box::new(negotiated)))
            }
            OPT_ABORT => {
                self.reply(option, REP_ACK, &[]);
                Ok(HandshakeStatus::Aborted)
            }
            OPT_LIST => {
                if !data.is_empty() {
                    self.reply_err(option, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                    return Ok(HandshakeStatus::NeedInput);
                }
                for (name, description) in catalog.list() {
                    if self.access(catalog, &name) != ExportAccess::Allowed {
                        continue;
                    }
                    let mut d = Vec::with_capacity(4 + name.len() + description.len());
                    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
                    d.extend_from_slice(name.as_bytes());
                    d.extend_from_slice(description.as_bytes());
                    self.reply(option, REP_SERVER, &d);
                }
                self.reply(option, REP_ACK, &[]);
                Ok(HandshakeStatus::NeedInput)
            }
            OPT_STARTTLS => {
                if !data.is_empty() {
                    self.reply_err(option, REP_ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
                } else if self.config.tls == TlsPolicy::Off || !self.fixed {
                    self.reply_err(option, REP_ERR_POLICY, "TLS is not enabled on this server");
                } else if self.tls_active {
                    self.reply_err(option, REP_ERR_INVALID, "TLS is already active");
                } else {
                    self.reply(option, REP_ACK, &[]);
                    // The spec: nothing negotiated before STARTTLS survives
                    // it (a man in the middle may have chosen it).
                    self.tls_active = true;
                    self.structured = false;
                    self.extended = false;
                    self.meta = None;
                    return Ok(HandshakeStatus::StartTls);
                }
                Ok(HandshakeStatus::NeedInput)
            }
            OPT_INFO | OPT_GO => self.handle_info_go(option, data, catalog),
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    self.reply_err(
                        option,
                        REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                } else if self.extended {
                    self.reply_err(
                        option,
                        REP_ERR_EXT_HEADER_REQD,
                        "extended headers already negotiated",
                    );
                } else {
                    self.structured = true;
                    self.reply(option, REP_ACK, &[]);
                }
                Ok(HandshakeStatus::NeedInput)
            }
            OPT_EXTENDED_HEADERS => {
                if data.is_empty() {
                    self.extended = true;
                    self.reply(option, REP_ACK, &[]);
                } else {
                    self.reply_err(
                        option,
                        REP_ERR_INVALID,
                        "NBD_OPT_EXTENDED_HEADERS takes no data",
                    );
                }
                Ok(HandshakeStatus::NeedInput)
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                self.handle_meta_context(option, data, catalog);
                Ok(HandshakeStatus::NeedInput)
            }
            _ => {
                self.reply_err(option, REP_ERR_UNSUP, "option not supported by this server");
                Ok(HandshakeStatus::NeedInput)
            }
        }
    }

    fn handle_info_go(
        &mut self,
        option: u32,
        data: &[u8],
        catalog: &dyn ExportCatalog,
    ) -> Result<HandshakeStatus, HandshakeError> {
        let mut r = Reader::new(data);
        let parsed = (|| {
            let name_len = r.u32()? as usize;
            let name = r.string(name_len)?;
            let count = r.u16()?;
            let mut requests = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                requests.push(r.u16()?);
            }
            r.at_end().then_some((name, requests))
        })();
        let Some((name, requests)) = parsed else {
            self.reply_err(
                option,
                REP_ERR_INVALID,
                "malformed NBD_OPT_INFO/NBD_OPT_GO data",
            );
            return Ok(HandshakeStatus::NeedInput);
        };
        let Some(export) = catalog.lookup(name) else {
            let msg = format!("no export named {name:?} on this server");
            self.reply_err(option, REP_ERR_UNKNOWN, &msg);
            return Ok(HandshakeStatus::NeedInput);
        };
        let access = self.access(catalog, &export.name);
        if access != ExportAccess::Allowed {
            self.reply_refused(option, access, &export.name);
            return Ok(HandshakeStatus::NeedInput);
        }
        let negotiated = self.negotiated(export);
        let export = &negotiated.export;
        let mut info = Vec::with_capacity(14);
        info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        info.extend_from_slice(&export.size.to_be_bytes());
        info.extend_from_slice(&negotiated.params.flags.to_be_bytes());
        self.reply(option, REP_INFO, &info);
        if requests.contains(&INFO_NAME) || name != export.name {
            let mut d = INFO_NAME.to_be_bytes().to_vec();
            d.extend_from_slice(export.name.as_bytes());
            self.reply(option, REP_INFO, &d);
        }
        if requests.contains(&INFO_DESCRIPTION) && !export.description.is_empty() {
            let mut d = INFO_DESCRIPTION.to_be_bytes().to_vec();
            d.extend_from_slice(export.description.as_bytes());
            self.reply(option, REP_INFO, &d);
        }
        // Always sent: clients must obey it only if they asked, and it
        // tells every client our (default-compatible) limits.
        let bs = export.block_sizes;
        let mut d = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        d.extend_from_slice(&bs.minimum.to_be_bytes());
        d.extend_from_slice(&bs.preferred.to_be_bytes());
        d.extend_from_slice(&bs.maximum_payload.to_be_bytes());
        self.reply(option, REP_INFO, &d);
        self.reply(option, REP_ACK, &[]);
        if option == OPT_GO {
            Ok(HandshakeStatus::Done(Box::new(negotiated)))
        } else {
            Ok(HandshakeStatus::NeedInput)
        }
    }

    fn handle_meta_context(&mut self, option: u32, data: &[u8], catalog: &dyn ExportCatalog) {
        let set = option == OPT_SET_META_CONTEXT;
        if set {
            // A SET replaces the selection even when it fails.
            self.meta = None;
        }
        if !self.reply_style().chunked() {
            self.reply_err(
                option,
                REP_ERR_INVALID,
                "negotiate structured replies or extended headers first",
            );
            return;
        }
        let mut r = Reader::new(data);
        let parsed = (|| {
            let name_len = r.u32()? as usize;
            let name = r.string(name_len)?;
            let count = r.u32()?;
            let mut queries = Vec::new();
            for _ in 0..count {
                let len = r.u32()? as usize;
                queries.push(r.bytes(len)?);
            }
            r.at_end().then_some((name, queries))
        })();
        let Some((name, queries)) = parsed else {
            self.reply_err(
                option,
                REP_ERR_INVALID,
                "malformed meta context option data",
            );
            return;
        };
        let Some(export) = catalog.lookup(name) else {
            let msg = format!("no export named {name:?} on this server");
            self.reply_err(option, REP_ERR_UNKNOWN, &msg);
            return;
        };
        if self.access(catalog, &export.name) != ExportAccess::Allowed {
            // Never TLS_REQD here: the spec allows it only for INFO/GO.
            self.reply_refused(option, ExportAccess::Denied, &export.name);
            return;
        }
        let matches_base_allocation = |q: &[u8]| {
            if set {
                q == META_CONTEXT_BASE_ALLOCATION.as_bytes()
            } else {
                q == b"base:" || q == META_CONTEXT_BASE_ALLOCATION.as_bytes()
            }
        };
        let selected = export.base_allocation
            && if queries.is_empty() {
                !set
            } else {
                queries.iter().any(|q| matches_base_allocation(q))
            };
        if selected {
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            let mut d = id.to_be_bytes().to_vec();
            d.extend_from_slice(META_CONTEXT_BASE_ALLOCATION.as_bytes());
            self.reply(option, REP_META_CONTEXT, &d);
        }
        if set {
            self.meta = Some((export.name.clone(), selected));
        }
        self.reply(option, REP_ACK, &[]);
    }
}
