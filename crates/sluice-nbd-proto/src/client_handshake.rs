//! The client side of the fixed-newstyle handshake as a sans-IO state
//! machine, the mirror of [`ServerHandshake`](crate::ServerHandshake):
//! send what [`ClientHandshake::poll_output`] returns, feed what the
//! server sends to [`ClientHandshake::handle_input`], until it reports
//! [`ClientStatus::Done`] (enter transmission) or `Listed`.
//!
//! Options go one at a time: `STARTTLS` (if asked for), then
//! `EXTENDED_HEADERS`, `STRUCTURED_REPLY` if extended headers were
//! refused, `SET_META_CONTEXT` for `base:allocation`, and `GO`, falling
//! back to `EXPORT_NAME` for a server that does not know `GO`. With
//! TLS, [`ClientStatus::StartTls`] is returned once the server accepted
//! `STARTTLS`: the caller runs the TLS handshake on its transport and
//! from then on feeds the machine decrypted bytes only.

use thiserror::Error;

use crate::client::{
    encode_option, info_go_data, meta_context_data, OptionReply, ReplyDecodeError,
};
use crate::client_request::Transmission;
use crate::consts::*;
use crate::handshake::BlockSizes;
use crate::reply::ReplyStyle;
use crate::request::HeaderStyle;

/// What to ask the server for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHandshakeConfig {
    /// The export to use (`""`: the default export).
    pub export: String,
    /// Ask for structured replies.
    pub structured_replies: bool,
    /// Ask for extended headers (which imply structured replies).
    pub extended_headers: bool,
    /// Select `base:allocation` (needs structured replies).
    pub base_allocation: bool,
    /// Start TLS before anything else; a server that refuses is an error.
    pub tls: bool,
    /// Only list the exports (`NBD_OPT_LIST`), then abort.
    pub list: bool,
}

impl Default for ClientHandshakeConfig {
    fn default() -> Self {
        Self {
            export: String::new(),
            structured_replies: true,
            extended_headers: true,
            base_allocation: true,
            tls: false,
            list: false,
        }
    }
}

/// What the handshake settled about the export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportDescription {
    /// Export name as the server calls it.
    pub name: String,
    /// Description, if the server gave one.
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Size constraints (the spec's defaults if the server sent none).
    pub block_sizes: BlockSizes,
    /// Flags, styles and the selected context.
    pub transmission: Transmission,
}

/// Where the handshake stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientStatus {
    /// Send the pending output and feed more input.
    NeedInput,
    /// The server accepted `STARTTLS`: run the TLS handshake now; input
    /// not consumed belongs to it.
    StartTls,
    /// Enter transmission (the pending output, if any, goes first).
    Done(Box<ExportDescription>),
    /// The exports as (name, description); send the pending output
    /// (`NBD_OPT_ABORT`) and close.
    Listed(Vec<(String, String)>),
}

/// Why the handshake failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientHandshakeError {
    #[error("not a newstyle NBD server (oldstyle is not supported)")]
    NotNewstyle,
    #[error("the server does not offer fixed newstyle negotiation")]
    NotFixedNewstyle,
    #[error("the server has no export {export:?}: {message}")]
    UnknownExport { export: String, message: String },
    #[error("the server requires TLS (use an nbds:// URI): {0}")]
    TlsRequired(String),
    #[error("the server refused TLS: {0}")]
    TlsRefused(String),
    #[error("the server refused option {option} with reply {kind:#x}: {message}")]
    Refused {
        option: u32,
        kind: u32,
        message: String,
    },
    #[error("the server broke the handshake protocol: {0}")]
    Violation(String),
    #[error(transparent)]
    Decode(#[from] ReplyDecodeError),
    #[error("handshake already finished")]
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Greeting,
    /// Waiting for the answer to this option.
    Reply(u32),
    /// `NBD_OPT_EXPORT_NAME` sent: size and flags (and zeroes) follow.
    ExportName,
    Finished,
}

/// The client's handshake machine.
#[derive(Debug)]
pub struct ClientHandshake {
    config: ClientHandshakeConfig,
    state: State,
    out: Vec<u8>,
    no_zeroes: bool,
    extended: bool,
    structured: bool,
    base_allocation_id: Option<u32>,
    listed: Vec<(String, String)>,
    export: ExportDescription,
    got_export: bool,
}

fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

fn be32(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(d.get(at..at + 4)?.try_into().ok()?))
}

impl ClientHandshake {
    /// Starts a handshake; nothing is sent before the server's greeting.
    pub fn new(config: ClientHandshakeConfig) -> Self {
        Self {
            export: ExportDescription {
                name: config.export.clone(),
                description: String::new(),
                size: 0,
                block_sizes: BlockSizes::default(),
                transmission: Transmission {
                    flags: 0,
                    header_style: HeaderStyle::Compact,
                    reply_style: ReplyStyle::Simple,
                    base_allocation_id: None,
                },
            },
            config,
            state: State::Greeting,
            out: Vec::new(),
            no_zeroes: false,
            extended: false,
            structured: false,
            base_allocation_id: None,
            listed: Vec::new(),
            got_export: false,
        }
    }

    /// Bytes to send now (empty when there is nothing).
    pub fn poll_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    fn send(&mut self, option: u32, data: &[u8]) {
        encode_option(&mut self.out, option, data);
        self.state = State::Reply(option);
    }

    /// Sends the next negotiation option after `done` was answered.
    fn next_after(&mut self, done: u32) {
        let c = &self.config;
        let step = [
            OPT_STARTTLS,
            OPT_EXTENDED_HEADERS,
            OPT_STRUCTURED_REPLY,
            OPT_SET_META_CONTEXT,
            OPT_GO,
        ];
        let from = step.iter().position(|&o| o == done).map_or(0, |i| i + 1);
        for &option in &step[from..] {
            let wanted = match option {
                OPT_STARTTLS => c.tls,
                OPT_EXTENDED_HEADERS => c.extended_headers && !c.list,
                OPT_STRUCTURED_REPLY => c.structured_replies && !self.extended && !c.list,
                OPT_SET_META_CONTEXT => c.base_allocation && self.structured && !c.list,
                _ => true,
            };
            if !wanted {
                continue;
            }
            match option {
                OPT_SET_META_CONTEXT => {
                    let data = meta_context_data(&c.export, &[META_CONTEXT_BASE_ALLOCATION]);
                    self.send(option, &data);
                }
                OPT_GO if c.list => self.send(OPT_LIST, &[]),
                OPT_GO => {
                    let data =
                        info_go_data(&c.export, &[INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION]);
                    self.send(option, &data);
                }
                _ => self.send(option, &[]),
            }
            return;
        }
    }

    fn done(&mut self) -> ClientStatus {
        self.state = State::Finished;
        let t = &mut self.export.transmission;
        t.reply_style = if self.extended {
            ReplyStyle::Extended
        } else if self.structured {
            ReplyStyle::Structured
        } else {
            ReplyStyle::Simple
        };
        t.header_style = if self.extended {
            HeaderStyle::Extended
        } else {
            HeaderStyle::Compact
        };
        t.base_allocation_id = self.base_allocation_id;
        ClientStatus::Done(Box::new(self.export.clone()))
    }

    /// Consumes as much of `input` as forms complete messages. Returns the
    /// number of bytes consumed and the status; unconsumed bytes must be
    /// presented again with more appended.
    pub fn handle_input(
        &mut self,
        input: &[u8],
    ) -> Result<(usize, ClientStatus), ClientHandshakeError> {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Finished => return Err(ClientHandshakeError::Finished),
                State::Greeting => {
                    let Some(g) = rest.get(..18) else {
                        return Ok((used, ClientStatus::NeedInput));
                    };
                    let magic = u64::from_be_bytes(g[..8].try_into().unwrap_or_default());
                    let opt = u64::from_be_bytes(g[8..16].try_into().unwrap_or_default());
                    if magic != NBD_MAGIC || opt != IHAVEOPT {
                        self.state = State::Finished;
                        return Err(ClientHandshakeError::NotNewstyle);
                    }
                    let hflags = u16::from_be_bytes([g[16], g[17]]);
                    if hflags & FLAG_FIXED_NEWSTYLE == 0 {
                        self.state = State::Finished;
                        return Err(ClientHandshakeError::NotFixedNewstyle);
                    }
                    let mut cflags = FLAG_C_FIXED_NEWSTYLE;
                    if hflags & FLAG_NO_ZEROES != 0 {
                        cflags |= FLAG_C_NO_ZEROES;
                        self.no_zeroes = true;
                    }
                    self.out.extend_from_slice(&cflags.to_be_bytes());
                    used += 18;
                    self.next_after(0);
                }
                State::ExportName => {
                    let need = if self.no_zeroes { 10 } else { 134 };
                    let Some(info) = rest.get(..need) else {
                        return Ok((used, ClientStatus::NeedInput));
                    };
                    self.export.size = u64::from_be_bytes(info[..8].try_into().unwrap_or_default());
                    self.export.transmission.flags = u16::from_be_bytes([info[8], info[9]]);
                    used += need;
                    return Ok((used, self.done()));
                }
                State::Reply(option) => {
                    let Some((reply, n)) = OptionReply::decode(rest)? else {
                        return Ok((used, ClientStatus::NeedInput));
                    };
                    used += n;
                    if reply.option != option {
                        self.state = State::Finished;
                        return Err(ClientHandshakeError::Violation(format!(
                            "reply for option {} while waiting for {option}",
                            reply.option
                        )));
                    }
                    match self.on_reply(option, reply) {
                        Ok(None) => {}
                        Ok(Some(status)) => return Ok((used, status)),
                        Err(e) => {
                            self.state = State::Finished;
                            return Err(e);
                        }
                    }
                }
            }
        }
    }

    /// Handles one option reply; `Some` ends this call of `handle_input`.
    fn on_reply(
        &mut self,
        option: u32,
        r: OptionReply,
    ) -> Result<Option<ClientStatus>, ClientHandshakeError> {
        let refused = |r: &OptionReply| ClientHandshakeError::Refused {
            option,
            kind: r.kind,
            message: text(&r.data),
        };
        match option {
            OPT_STARTTLS => {
                if r.kind != REP_ACK {
                    return Err(ClientHandshakeError::TlsRefused(text(&r.data)));
                }
                self.next_after(OPT_STARTTLS);
                return Ok(Some(ClientStatus::StartTls));
            }
            OPT_EXTENDED_HEADERS | OPT_STRUCTURED_REPLY => {
                if r.kind == REP_ACK {
                    self.structured = true;
                    self.extended |= option == OPT_EXTENDED_HEADERS;
                } else if !r.is_error() {
                    return Err(ClientHandshakeError::Violation(format!(
                        "reply {:#x} to option {option}",
                        r.kind
                    )));
                }
                self.next_after(option);
            }
            OPT_SET_META_CONTEXT => match r.kind {
                REP_META_CONTEXT => {
                    let id = be32(&r.data, 0).ok_or_else(|| {
                        ClientHandshakeError::Violation("short NBD_REP_META_CONTEXT".into())
                    })?;
                    if &r.data[4..] == META_CONTEXT_BASE_ALLOCATION.as_bytes() {
                        self.base_allocation_id = Some(id);
                    }
                }
                REP_ACK => self.next_after(option),
                _ => {
                    // Block status is optional: go on without it.
                    self.base_allocation_id = None;
                    self.next_after(option);
                }
            },
            OPT_LIST => match r.kind {
                REP_SERVER => {
                    let bad = || ClientHandshakeError::Violation("malformed NBD_REP_SERVER".into());
                    let len = be32(&r.data, 0).ok_or_else(bad)? as usize;
                    let name = r.data.get(4..4 + len).ok_or_else(bad)?;
                    self.listed.push((text(name), text(&r.data[4 + len..])));
                }
                REP_ACK => {
                    encode_option(&mut self.out, OPT_ABORT, &[]);
                    self.state = State::Finished;
                    return Ok(Some(ClientStatus::Listed(std::mem::take(&mut self.listed))));
                }
                REP_ERR_TLS_REQD => return Err(ClientHandshakeError::TlsRequired(text(&r.data))),
                _ => return Err(refused(&r)),
            },
            OPT_GO => match r.kind {
                REP_INFO => self.on_info(&r.data),
                REP_ACK if self.got_export => return Ok(Some(self.done())),
                REP_ACK => {
                    return Err(ClientHandshakeError::Violation(
                        "NBD_OPT_GO acknowledged without NBD_INFO_EXPORT".into(),
                    ))
                }
                REP_ERR_UNKNOWN => {
                    return Err(ClientHandshakeError::UnknownExport {
                        export: self.config.export.clone(),
                        message: text(&r.data),
                    })
                }
                REP_ERR_TLS_REQD => return Err(ClientHandshakeError::TlsRequired(text(&r.data))),
                REP_ERR_UNSUP if !self.extended => {
                    // A server without NBD_OPT_GO.
                    let name = self.config.export.clone();
                    encode_option(&mut self.out, OPT_EXPORT_NAME, name.as_bytes());
                    self.state = State::ExportName;
                }
                _ if r.is_error() => return Err(refused(&r)),
                kind => {
                    return Err(ClientHandshakeError::Violation(format!(
                        "reply {kind:#x} to NBD_OPT_GO"
                    )))
                }
            },
            _ => return Err(refused(&r)),
        }
        Ok(None)
    }

    fn on_info(&mut self, d: &[u8]) {
        let Some(kind) = d.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
            return;
        };
        match kind {
            INFO_EXPORT if d.len() == 12 => {
                self.export.size = u64::from_be_bytes(d[2..10].try_into().unwrap_or_default());
                self.export.transmission.flags = u16::from_be_bytes([d[10], d[11]]);
                self.got_export = true;
            }
            INFO_NAME => self.export.name = text(&d[2..]),
            INFO_DESCRIPTION => self.export.description = text(&d[2..]),
            INFO_BLOCK_SIZE if d.len() == 14 => {
                if let (Some(minimum), Some(preferred), Some(maximum_payload)) =
                    (be32(d, 2), be32(d, 6), be32(d, 10))
                {
                    self.export.block_sizes = BlockSizes {
                        minimum,
                        preferred,
                        maximum_payload,
                    };
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ExportCatalog, ExportInfo, HandshakeConfig, HandshakeStatus, ServerHandshake};

    struct One;
    impl ExportCatalog for One {
        fn list(&self) -> Vec<(String, String)> {
            vec![("disk".into(), "a disk".into())]
        }
        fn lookup(&self, name: &str) -> Option<ExportInfo> {
            (name == "disk" || name.is_empty()).then(|| ExportInfo {
                name: "disk".into(),
                description: "a disk".into(),
                size: 1 << 20,
                flags: FLAG_HAS_FLAGS | FLAG_SEND_FLUSH,
                block_sizes: BlockSizes::default(),
                base_allocation: true,
            })
        }
    }

    /// Runs both machines against each other, feeding every byte in
    /// pieces of `piece` bytes.
    fn converse(
        config: ClientHandshakeConfig,
        piece: usize,
    ) -> Result<ClientStatus, ClientHandshakeError> {
        let mut server = ServerHandshake::new(HandshakeConfig::default());
        let mut client = ClientHandshake::new(config);
        let (mut to_client, mut to_server) = (Vec::new(), Vec::new());
        // Bytes of `to_client` the client has been shown so far.
        let mut shown = 0;
        for _ in 0..100_000 {
            to_client.extend(server.poll_output());
            shown = to_client.len().min(shown + piece);
            let (used, status) = client.handle_input(&to_client[..shown])?;
            to_client.drain(..used);
            shown -= used;
            to_server.extend(client.poll_output());
            if status != ClientStatus::NeedInput {
                return Ok(status);
            }
            if !to_server.is_empty() {
                let (used, s) = server.handle_input(&to_server, &One).expect("server");
                to_server.drain(..used);
                if let HandshakeStatus::Done(_) = s {
                    to_client.extend(server.poll_output());
                }
            }
        }
        panic!("no progress");
    }

    #[test]
    fn negotiates_extended_headers_and_base_allocation_with_the_server_machine() {
        for piece in [1, 7, 4096] {
            let status = converse(
                ClientHandshakeConfig {
                    export: "disk".into(),
                    ..ClientHandshakeConfig::default()
                },
                piece,
            )
            .unwrap();
            let ClientStatus::Done(e) = status else {
                panic!("{status:?}")
            };
            assert_eq!(e.size, 1 << 20);
            assert_eq!(e.description, "a disk");
            assert_eq!(e.transmission.reply_style, ReplyStyle::Extended);
            assert_eq!(e.transmission.header_style, HeaderStyle::Extended);
            assert!(e.transmission.base_allocation_id.is_some());
            assert!(e.transmission.has(FLAG_SEND_FLUSH));
        }
    }

    #[test]
    fn structured_only_and_listing() {
        let s = converse(
            ClientHandshakeConfig {
                extended_headers: false,
                base_allocation: false,
                ..ClientHandshakeConfig::default()
            },
            3,
        )
        .unwrap();
        let ClientStatus::Done(e) = s else { panic!() };
        assert_eq!(e.transmission.reply_style, ReplyStyle::Structured);
        assert_eq!(e.transmission.base_allocation_id, None);
        let s = converse(
            ClientHandshakeConfig {
                list: true,
                ..ClientHandshakeConfig::default()
            },
            5,
        )
        .unwrap();
        assert_eq!(
            s,
            ClientStatus::Listed(vec![("disk".into(), "a disk".into())])
        );
    }

    #[test]
    fn unknown_export_and_refused_tls_are_errors() {
        let e = converse(
            ClientHandshakeConfig {
                export: "nope".into(),
                ..ClientHandshakeConfig::default()
            },
            100,
        )
        .unwrap_err();
        assert!(
            matches!(e, ClientHandshakeError::UnknownExport { .. }),
            "{e}"
        );
        let e = converse(
            ClientHandshakeConfig {
                tls: true,
                ..ClientHandshakeConfig::default()
            },
            100,
        )
        .unwrap_err();
        assert!(matches!(e, ClientHandshakeError::TlsRefused(_)), "{e}");
    }

    #[test]
    fn greeting_bytes_and_old_server_fallback() {
        let mut c = ClientHandshake::new(ClientHandshakeConfig {
            extended_headers: false,
            structured_replies: false,
            ..ClientHandshakeConfig::default()
        });
        let mut g = Vec::new();
        g.extend_from_slice(b"NBDMAGIC");
        g.extend_from_slice(b"IHAVEOPT");
        g.extend_from_slice(&[0, 3]);
        assert_eq!(
            c.handle_input(&g[..17]).unwrap(),
            (0, ClientStatus::NeedInput)
        );
        assert_eq!(c.handle_input(&g).unwrap(), (18, ClientStatus::NeedInput));
        let out = c.poll_output();
        // Flags FIXED_NEWSTYLE|NO_ZEROES, then NBD_OPT_GO for "".
        assert_eq!(&out[..4], &[0, 0, 0, 3]);
        assert_eq!(&out[4..12], b"IHAVEOPT");
        assert_eq!(&out[12..16], &OPT_GO.to_be_bytes());
        // The server does not know GO.
        let mut r = Vec::new();
        r.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        r.extend_from_slice(&OPT_GO.to_be_bytes());
        r.extend_from_slice(&REP_ERR_UNSUP.to_be_bytes());
        r.extend_from_slice(&0u32.to_be_bytes());
        r.extend_from_slice(&(1u64 << 30).to_be_bytes());
        r.extend_from_slice(&(FLAG_HAS_FLAGS | FLAG_READ_ONLY).to_be_bytes());
        let (used, status) = c.handle_input(&r).unwrap();
        assert_eq!(used, r.len());
        let ClientStatus::Done(e) = status else {
            panic!("{status:?}")
        };
        assert_eq!(e.size, 1 << 30);
        assert_eq!(e.transmission.flags, FLAG_HAS_FLAGS | FLAG_READ_ONLY);
        assert_eq!(e.transmission.reply_style, ReplyStyle::Simple);
        assert_eq!(&c.poll_output()[8..12], &OPT_EXPORT_NAME.to_be_bytes());
        let mut bad = ClientHandshake::new(ClientHandshakeConfig::default());
        assert_eq!(
            bad.handle_input(&[0; 18]),
            Err(ClientHandshakeError::NotNewstyle)
        );
    }
}
