//! The handshake, client side: reads the greeting, starts TLS if asked
//! (and refuses to go on in plaintext when it was asked for), says HELLO
//! with the features both sides have, attaches the exports it was given
//! and selects the partition.

use thiserror::Error;

use crate::consts::*;
use crate::handshake::{answer, encode_frame, AttachedExport, Negotiated};
use crate::wire::{be16, be32, be64, Reader};

/// What the client wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientHandshakeConfig {
    /// Features to ask for (those the server does not offer are dropped).
    pub features: Features,
    pub partition: u64,
    /// Start TLS; fail if the server does not offer it.
    pub tls: bool,
    /// NBD exports to attach for extent commands.
    pub exports: Vec<String>,
}

/// Where the handshake stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientStatus {
    /// Send the pending output and feed more input.
    NeedInput,
    /// Run the TLS handshake now; then send the pending output (HELLO)
    /// over TLS. Unconsumed input belongs to TLS.
    StartTls,
    /// Enter transmission.
    Done(Box<Negotiated>),
}

/// Why the handshake failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientHandshakeError {
    #[error("not a sluice object server (greeting magic {0:#018x})")]
    NotSluice(u64),
    #[error("the server requires TLS (use a sluices:// URI)")]
    TlsRequired,
    #[error("TLS was asked for but the server does not offer it")]
    TlsUnavailable,
    #[error("the server refused option {option} with status {status}: {message}")]
    Refused {
        option: u16,
        status: u16,
        message: String,
    },
    #[error("the server broke the handshake protocol: {0}")]
    Violation(String),
    #[error("handshake already finished")]
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Greeting,
    /// Waiting for the answer to this option.
    Answer(u16),
    Finished,
}

/// The client's handshake machine.
#[derive(Debug)]
pub struct ClientHandshake {
    config: ClientHandshakeConfig,
    state: State,
    out: Vec<u8>,
    session: Negotiated,
    tls: bool,
}

fn violation(m: impl Into<String>) -> ClientHandshakeError {
    ClientHandshakeError::Violation(m.into())
}

impl ClientHandshake {
    /// Starts a handshake; nothing is sent before the server's greeting.
    pub fn new(config: ClientHandshakeConfig) -> Self {
        Self {
            session: Negotiated {
                version: VERSION,
                features: Features::default(),
                limits: Limits::default(),
                partition: config.partition,
                tls: false,
                exports: Vec::new(),
            },
            config,
            state: State::Greeting,
            out: Vec::new(),
            tls: false,
        }
    }

    /// Bytes to send now (empty when there is nothing).
    pub fn poll_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    fn send(&mut self, option: u16, data: &[u8]) {
        encode_frame(OPTION_MAGIC, option, 0, data, &mut self.out);
        self.state = State::Answer(option);
    }

    fn hello(&mut self) {
        let mut d = Vec::with_capacity(8);
        d.extend_from_slice(&VERSION.to_be_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        d.extend_from_slice(&self.session.features.0.to_be_bytes());
        self.send(OPT_HELLO, &d);
    }

    /// The option after HELLO or an attach: the next export, or the
    /// partition.
    fn next_after(&mut self, attached: usize) {
        match self.config.exports.get(attached) {
            Some(name) => {
                let name = name.clone();
                self.send(OPT_ATTACH_EXPORT, name.as_bytes());
            }
            None => {
                let p = self.config.partition.to_be_bytes();
                self.send(OPT_SELECT_PARTITION, &p);
            }
        }
    }

    /// Consumes what it can of `input` (the greeting, then one answer at a
    /// time). Returns the bytes consumed and the status.
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
                    let Some(g) = rest.get(..GREETING_LEN) else {
                        return Ok((used, ClientStatus::NeedInput));
                    };
                    used += GREETING_LEN;
                    self.greeting(g)?;
                }
                State::Answer(option) => {
                    let Some(head) = rest.get(..OPTION_HEADER_LEN) else {
                        return Ok((used, ClientStatus::NeedInput));
                    };
                    if be32(head, 0) != ANSWER_MAGIC {
                        return Err(violation(format!(
                            "bad answer magic {:#010x}",
                            be32(head, 0)
                        )));
                    }
                    let len = be32(head, 8);
                    if len > MAX_OPTION_LEN {
                        return Err(violation(format!("answer of {len} bytes")));
                    }
                    let Some(data) = rest.get(OPTION_HEADER_LEN..OPTION_HEADER_LEN + len as usize)
                    else {
                        return Ok((used, ClientStatus::NeedInput));
                    };
                    used += OPTION_HEADER_LEN + len as usize;
                    if be16(head, 4) != option {
                        return Err(violation(format!(
                            "answer to option {} while waiting for {option}",
                            be16(head, 4)
                        )));
                    }
                    let status = be16(head, 6);
                    if status != answer::OK {
                        self.state = State::Finished;
                        return Err(if status == answer::TLS_REQUIRED {
                            ClientHandshakeError::TlsRequired
                        } else {
                            ClientHandshakeError::Refused {
                                option,
                                status,
                                message: String::from_utf8_lossy(data).into_owned(),
                            }
                        });
                    }
                    if let Some(s) = self.accepted(option, data)? {
                        return Ok((used, s));
                    }
                }
            }
        }
    }

    fn greeting(&mut self, g: &[u8]) -> Result<(), ClientHandshakeError> {
        let magic = be64(g, 0);
        if magic != GREETING_MAGIC {
            self.state = State::Finished;
            return Err(ClientHandshakeError::NotSluice(magic));
        }
        let features = Features(be32(g, 12));
        let mut r = Reader::new(&g[16..]);
        let mut next = || r.u32().unwrap_or(0);
        self.session.limits = Limits {
            max_segments: next(),
            max_payload: next(),
            max_batch: next(),
            max_attr_size: next(),
        };
        // The server's version is informative: HELLO asks for ours and a
        // server that cannot speak it answers VERSION_MISMATCH.
        self.session.features = self
            .config
            .features
            .intersect(features)
            .intersect(Features::NEGOTIABLE);
        if self.config.tls {
            if !features.contains(Features::TLS_AVAILABLE) {
                self.state = State::Finished;
                return Err(ClientHandshakeError::TlsUnavailable);
            }
            self.send(OPT_STARTTLS, &[]);
        } else if features.contains(Features::TLS_REQUIRED) {
            self.state = State::Finished;
            return Err(ClientHandshakeError::TlsRequired);
        } else {
            self.hello();
        }
        Ok(())
    }

    fn accepted(
        &mut self,
        option: u16,
        data: &[u8],
    ) -> Result<Option<ClientStatus>, ClientHandshakeError> {
        match option {
            OPT_STARTTLS => {
                self.tls = true;
                self.hello();
                return Ok(Some(ClientStatus::StartTls));
            }
            OPT_HELLO => self.next_after(0),
            OPT_ATTACH_EXPORT => {
                let mut r = Reader::new(data);
                let (Some(handle), Some(size), Some(flags), true) =
                    (r.u64(), r.u64(), r.u16(), data.len() == 18)
                else {
                    return Err(violation("ATTACH_EXPORT answer is not 18 bytes"));
                };
                let i = self.session.exports.len();
                let name = self.config.exports.get(i).cloned().unwrap_or_default();
                self.session.exports.push(AttachedExport {
                    handle,
                    name,
                    size,
                    read_only: flags & 1 != 0,
                });
                self.next_after(i + 1);
            }
            OPT_SELECT_PARTITION => {
                self.state = State::Finished;
                let mut s = self.session.clone();
                s.tls = self.tls;
                return Ok(Some(ClientStatus::Done(Box::new(s))));
            }
            _ => return Err(violation(format!("answer to option {option}, never sent"))),
        }
        Ok(None)
    }
}
