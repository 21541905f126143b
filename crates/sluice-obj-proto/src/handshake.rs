//! The handshake, server side: greeting, HELLO (version and features),
//! optional STARTTLS, ATTACH_EXPORT for extent commands, and
//! SELECT_PARTITION, which ends it. Refusals are answers and the session
//! goes on; only framing violations end it.

pub use sluice_types::TlsPolicy;
use thiserror::Error;

use crate::consts::*;
use crate::wire::{be16, be32, Reader};

/// Answer status codes.
pub mod answer {
    pub const OK: u16 = 0;
    pub const UNKNOWN_OPTION: u16 = 1;
    pub const VERSION_MISMATCH: u16 = 2;
    pub const UNSUPPORTED_FEATURE: u16 = 3;
    pub const TLS_REQUIRED: u16 = 4;
    pub const TLS_UNAVAILABLE: u16 = 5;
    pub const UNKNOWN_PARTITION: u16 = 6;
    pub const DENIED: u16 = 7;
    pub const BAD_OPTION: u16 = 8;
    pub const UNKNOWN_EXPORT: u16 = 9;
}

/// What the server's catalog says about a partition or an export for
/// this client (its allow-lists see the client's certificate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartitionAccess {
    Allowed,
    /// Allowed once TLS is up.
    TlsRequired,
    /// This client may not use it.
    Denied,
    Unknown,
}

/// The server's partitions and NBD exports, as the handshake sees them.
pub trait PartitionCatalog {
    /// Access to partition `id`; `tls` says whether TLS is up.
    fn partition(&self, id: u64, tls: bool) -> PartitionAccess;
    /// Access to export `name` with its size and whether it is read-only.
    fn export(&self, name: &str, tls: bool) -> (PartitionAccess, u64, bool);
}

/// Server handshake policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeConfig {
    pub tls: TlsPolicy,
    /// Negotiable features the server offers.
    pub features: Features,
    pub limits: Limits,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        Self {
            tls: TlsPolicy::Off,
            features: Features::NEGOTIABLE,
            limits: Limits::default(),
        }
    }
}

/// An NBD export attached for extent commands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttachedExport {
    /// The id extent commands carry in their object field.
    pub handle: u64,
    pub name: String,
    pub size: u64,
    pub read_only: bool,
}

/// What the handshake agreed on (the session requests are validated
/// against; the client side gets the same value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub version: u16,
    /// Negotiated features (no greeting-only bits).
    pub features: Features,
    pub limits: Limits,
    pub partition: u64,
    pub tls: bool,
    pub exports: Vec<AttachedExport>,
}

/// Where the handshake stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeStatus {
    /// Send the pending output and feed more input.
    NeedInput,
    /// STARTTLS accepted: send the pending output in plaintext, run the
    /// TLS handshake, then feed decrypted bytes. Unconsumed input belongs
    /// to TLS. HELLO and attached exports are forgotten.
    StartTls,
    /// The client sent ABORT: close.
    Aborted,
    /// Send the pending output, then enter transmission.
    Done(Box<Negotiated>),
}

/// A violation that ends the session.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeError {
    #[error("bad option magic {0:#010x} (expected {OPTION_MAGIC:#010x})")]
    BadMagic(u32),
    #[error(
        "option {option} claims {len} bytes, more than the {MAX_OPTION_LEN} this server reads"
    )]
    OptionTooLarge { option: u16, len: u32 },
    #[error("option {0} has reserved bits set")]
    Reserved(u16),
    #[error("handshake already finished")]
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Hello,
    Options,
    Finished,
}

/// The server's handshake machine.
#[derive(Debug)]
pub struct ServerHandshake {
    config: HandshakeConfig,
    state: State,
    out: Vec<u8>,
    tls: bool,
    features: Features,
    exports: Vec<AttachedExport>,
    refusal: Option<Refusal>,
}

/// A client refused for a reason operators look for in logs: TLS it did
/// not start, or an allow-list it is not on (see
/// [`ServerHandshake::take_refusal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// [`answer::TLS_REQUIRED`] or [`answer::DENIED`].
    pub status: u16,
    /// What the client was told.
    pub message: String,
}

/// Appends the greeting a server with this config sends.
pub(crate) fn encode_greeting(config: &HandshakeConfig, out: &mut Vec<u8>) {
    let mut features = config.features.intersect(Features::NEGOTIABLE);
    match config.tls {
        TlsPolicy::Off => {}
        TlsPolicy::Optional => features = features.union(Features::TLS_AVAILABLE),
        TlsPolicy::Required => {
            features = features.union(Features::TLS_AVAILABLE.union(Features::TLS_REQUIRED));
        }
    }
    out.extend_from_slice(&GREETING_MAGIC.to_be_bytes());
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&features.0.to_be_bytes());
    let l = &config.limits;
    for v in [l.max_segments, l.max_payload, l.max_batch, l.max_attr_size] {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// Appends an option (client) or answer (server) frame.
pub(crate) fn encode_frame(magic: u32, option: u16, status: u16, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&magic.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&status.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

impl ServerHandshake {
    /// Starts a handshake; the greeting is the first output.
    pub fn new(config: HandshakeConfig) -> Self {
        let mut out = Vec::with_capacity(GREETING_LEN);
        encode_greeting(&config, &mut out);
        Self {
            config,
            state: State::Hello,
            out,
            tls: false,
            features: Features::default(),
            exports: Vec::new(),
            refusal: None,
        }
    }

    /// The last refusal for TLS or an allow-list since the previous call,
    /// if any.
    pub fn take_refusal(&mut self) -> Option<Refusal> {
        self.refusal.take()
    }

    /// Bytes to send now (empty when there is nothing).
    pub fn poll_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Whether STARTTLS was accepted.
    pub fn tls_active(&self) -> bool {
        self.tls
    }

    fn answer(&mut self, option: u16, status: u16, data: &[u8]) {
        encode_frame(ANSWER_MAGIC, option, status, data, &mut self.out);
    }

    fn refuse(&mut self, option: u16, status: u16, message: &str) {
        if status == answer::TLS_REQUIRED || status == answer::DENIED {
            self.refusal = Some(Refusal {
                status,
                message: message.to_owned(),
            });
        }
        self.answer(option, status, message.as_bytes());
    }

    /// Consumes as many whole options of `input` as there are. Returns
    /// the bytes consumed and the status; unconsumed bytes must be
    /// presented again with more appended.
    pub fn handle_input(
        &mut self,
        input: &[u8],
        catalog: &dyn PartitionCatalog,
    ) -> Result<(usize, HandshakeStatus), HandshakeError> {
        let mut used = 0;
        loop {
            if self.state == State::Finished {
                return Err(HandshakeError::Finished);
            }
            let rest = &input[used..];
            let Some(head) = rest.get(..OPTION_HEADER_LEN) else {
                return Ok((used, HandshakeStatus::NeedInput));
            };
            let magic = be32(head, 0);
            if magic != OPTION_MAGIC {
                return Err(HandshakeError::BadMagic(magic));
            }
            let option = be16(head, 4);
            if be16(head, 6) != 0 {
                return Err(HandshakeError::Reserved(option));
            }
            let len = be32(head, 8);
            if len > MAX_OPTION_LEN {
                return Err(HandshakeError::OptionTooLarge { option, len });
            }
            let Some(data) = rest.get(OPTION_HEADER_LEN..OPTION_HEADER_LEN + len as usize) else {
                return Ok((used, HandshakeStatus::NeedInput));
            };
            used += OPTION_HEADER_LEN + len as usize;
            if let Some(status) = self.option(option, data, catalog) {
                return Ok((used, status));
            }
        }
    }

    /// Handles one option; `Some` when the caller must act.
    fn option(
        &mut self,
        option: u16,
        data: &[u8],
        catalog: &dyn PartitionCatalog,
    ) -> Option<HandshakeStatus> {
        use answer::*;
        let forced = self.config.tls == TlsPolicy::Required && !self.tls;
        match option {
            OPT_ABORT => {
                self.answer(option, OK, &[]);
                self.state = State::Finished;
                return Some(HandshakeStatus::Aborted);
            }
            OPT_STARTTLS => {
                if !data.is_empty() {
                    self.refuse(option, BAD_OPTION, "STARTTLS takes no data");
                } else if self.tls {
                    self.refuse(option, BAD_OPTION, "TLS is already active");
                } else if self.config.tls == TlsPolicy::Off {
                    self.refuse(option, TLS_UNAVAILABLE, "this server does not offer TLS");
                } else {
                    self.answer(option, OK, &[]);
                    self.tls = true;
                    self.state = State::Hello;
                    self.features = Features::default();
                    self.exports.clear();
                    return Some(HandshakeStatus::StartTls);
                }
            }
            OPT_HELLO | OPT_ATTACH_EXPORT | OPT_SELECT_PARTITION if forced => {
                self.refuse(option, TLS_REQUIRED, "this server requires STARTTLS first");
            }
            OPT_HELLO => self.hello(data),
            OPT_ATTACH_EXPORT | OPT_SELECT_PARTITION if self.state == State::Hello => {
                self.refuse(option, BAD_OPTION, "HELLO must come first");
            }
            OPT_ATTACH_EXPORT => self.attach(data, catalog),
            OPT_SELECT_PARTITION => {
                let mut r = Reader::new(data);
                let (Some(id), true) = (r.u64(), data.len() == 8) else {
                    self.refuse(option, BAD_OPTION, "SELECT_PARTITION takes one u64");
                    return None;
                };
                match catalog.partition(id, self.tls) {
                    PartitionAccess::Allowed => {
                        self.answer(option, OK, &[]);
                        self.state = State::Finished;
                        return Some(HandshakeStatus::Done(Box::new(Negotiated {
                            version: VERSION,
                            features: self.features,
                            limits: self.config.limits,
                            partition: id,
                            tls: self.tls,
                            exports: std::mem::take(&mut self.exports),
                        })));
                    }
                    PartitionAccess::TlsRequired if !self.tls => self.refuse(
                        option,
                        TLS_REQUIRED,
                        &format!("partition {id:#x} requires TLS"),
                    ),
                    PartitionAccess::Unknown => {
                        self.refuse(option, UNKNOWN_PARTITION, &format!("no partition {id:#x}"))
                    }
                    _ => self.refuse(
                        option,
                        DENIED,
                        &format!("this client may not use partition {id:#x}"),
                    ),
                }
            }
            _ => self.refuse(option, UNKNOWN_OPTION, &format!("unknown option {option}")),
        }
        None
    }

    fn hello(&mut self, data: &[u8]) {
        use answer::*;
        let mut r = Reader::new(data);
        let (Some(version), Some(reserved), Some(features), true) =
            (r.u16(), r.u16(), r.u32(), data.len() == 8)
        else {
            self.refuse(
                OPT_HELLO,
                BAD_OPTION,
                "HELLO takes version u16, 0 u16, features u32",
            );
            return;
        };
        let offered = self.config.features.intersect(Features::NEGOTIABLE);
        let unknown = Features(features).without(offered);
        if version != VERSION {
            self.refuse(
                OPT_HELLO,
                VERSION_MISMATCH,
                &format!("version {version} is not supported; this server speaks {VERSION}"),
            );
        } else if reserved != 0 {
            self.refuse(OPT_HELLO, BAD_OPTION, "HELLO has reserved bits set");
        } else if unknown.0 != 0 {
            self.refuse(
                OPT_HELLO,
                UNSUPPORTED_FEATURE,
                &format!("features {:#x} are not offered", unknown.0),
            );
        } else {
            self.features = Features(features);
            self.state = State::Options;
            self.answer(OPT_HELLO, OK, &[]);
        }
    }

    fn attach(&mut self, data: &[u8], catalog: &dyn PartitionCatalog) {
        use answer::*;
        let Ok(name) = std::str::from_utf8(data) else {
            self.refuse(OPT_ATTACH_EXPORT, BAD_OPTION, "export name is not UTF-8");
            return;
        };
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            self.refuse(
                OPT_ATTACH_EXPORT,
                BAD_OPTION,
                "export name must be 1-255 bytes",
            );
            return;
        }
        let (access, size, read_only) = catalog.export(name, self.tls);
        let status = match access {
            PartitionAccess::Allowed => OK,
            PartitionAccess::TlsRequired if !self.tls => TLS_REQUIRED,
            PartitionAccess::Unknown => UNKNOWN_EXPORT,
            _ => DENIED,
        };
        if status != OK {
            self.refuse(
                OPT_ATTACH_EXPORT,
                status,
                &format!("cannot attach export {name:?}"),
            );
            return;
        }
        let handle = match self.exports.iter().find(|e| e.name == name) {
            Some(e) => e.handle,
            None => {
                let handle = self.exports.len() as u64 + 1;
                self.exports.push(AttachedExport {
                    handle,
                    name: name.to_owned(),
                    size,
                    read_only,
                });
                handle
            }
        };
        let mut body = Vec::with_capacity(18);
        body.extend_from_slice(&handle.to_be_bytes());
        body.extend_from_slice(&size.to_be_bytes());
        body.extend_from_slice(&u16::from(read_only).to_be_bytes());
        self.answer(OPT_ATTACH_EXPORT, OK, &body);
    }
}
