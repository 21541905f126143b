//! Opening a connection: socket, fixed-newstyle handshake, option haggling.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;

use sluice_nbd_proto::client::{encode_option, info_go_data, meta_context_data, OptionReply};
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{BlockSizes, HeaderStyle, ReplyStyle};

use crate::uri::{NbdUri, Target};
use crate::ClientError;

/// A client socket.
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    pub(crate) fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            Self::Tcp(s) => Self::Tcp(s.try_clone()?),
            Self::Unix(s) => Self::Unix(s.try_clone()?),
        })
    }
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Self::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Self::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What to ask the server for.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Request structured replies (`NBD_OPT_STRUCTURED_REPLY`).
    pub structured_replies: bool,
    /// Request extended headers (`NBD_OPT_EXTENDED_HEADERS`), which take
    /// precedence over structured replies.
    pub extended_headers: bool,
    /// Select `base:allocation` so block status works.
    pub base_allocation: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            structured_replies: true,
            extended_headers: true,
            base_allocation: true,
        }
    }
}

/// What the handshake settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportDetails {
    /// The server, for error messages.
    pub target: String,
    /// Export name as the server calls it.
    pub name: String,
    /// Description, if the server gave one.
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags.
    pub flags: u16,
    /// Size constraints (the spec's defaults if the server sent none).
    pub block_sizes: BlockSizes,
    /// Reply style in use.
    pub reply_style: ReplyStyle,
    /// Request header style in use.
    pub header_style: HeaderStyle,
    /// Context id of `base:allocation` if selected.
    pub base_allocation_id: Option<u32>,
}

impl ExportDetails {
    fn flag(&self, f: u16) -> bool {
        self.flags & f != 0
    }
    /// Read-only export.
    pub fn is_read_only(&self) -> bool {
        self.flag(FLAG_READ_ONLY)
    }
    /// FLUSH supported.
    pub fn can_flush(&self) -> bool {
        self.flag(FLAG_SEND_FLUSH)
    }
    /// FUA supported.
    pub fn can_fua(&self) -> bool {
        self.flag(FLAG_SEND_FUA)
    }
    /// TRIM supported.
    pub fn can_trim(&self) -> bool {
        self.flag(FLAG_SEND_TRIM)
    }
    /// WRITE_ZEROES supported.
    pub fn can_zero(&self) -> bool {
        self.flag(FLAG_SEND_WRITE_ZEROES)
    }
    /// Several connections may be used together.
    pub fn can_multi_conn(&self) -> bool {
        self.flag(FLAG_CAN_MULTI_CONN)
    }
    /// CACHE supported.
    pub fn can_cache(&self) -> bool {
        self.flag(FLAG_SEND_CACHE)
    }
}

fn io_err(target: &str, source: io::Error) -> ClientError {
    ClientError::Io {
        target: target.to_owned(),
        source,
    }
}

fn violation(target: &str, reason: impl Into<String>) -> ClientError {
    ClientError::Violation {
        target: target.to_owned(),
        reason: reason.into(),
    }
}

pub(crate) fn open_socket(target: &Target) -> Result<Socket, ClientError> {
    let name = target.to_string();
    let connect_err = |source| ClientError::Connect {
        target: name.clone(),
        source,
    };
    Ok(match target {
        Target::Tcp(addr) => {
            let s = TcpStream::connect(addr.as_str()).map_err(connect_err)?;
            s.set_nodelay(true).map_err(connect_err)?;
            Socket::Tcp(s)
        }
        Target::Unix(path) => Socket::Unix(UnixStream::connect(path).map_err(connect_err)?),
    })
}

/// Drives option haggling over a blocking socket.
struct Haggler<'a> {
    socket: &'a mut Socket,
    target: String,
    buf: Vec<u8>,
    /// The server offered (and we accepted) omitting the 124 zero bytes.
    no_zeroes: bool,
}

impl Haggler<'_> {
    fn greet(&mut self) -> Result<(), ClientError> {
        let mut g = [0u8; 18];
        self.socket
            .read_exact(&mut g)
            .map_err(|e| io_err(&self.target, e))?;
        let magic = u64::from_be_bytes(g[..8].try_into().unwrap_or_default());
        let opt = u64::from_be_bytes(g[8..16].try_into().unwrap_or_default());
        if magic != NBD_MAGIC || opt != IHAVEOPT {
            return Err(ClientError::Handshake {
                target: self.target.clone(),
                reason: "not a newstyle NBD server (oldstyle is not supported)".into(),
            });
        }
        let hflags = u16::from_be_bytes([g[16], g[17]]);
        if hflags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(ClientError::Handshake {
                target: self.target.clone(),
                reason: "server does not offer fixed newstyle negotiation".into(),
            });
        }
        let mut cflags = FLAG_C_FIXED_NEWSTYLE;
        if hflags & FLAG_NO_ZEROES != 0 {
            cflags |= FLAG_C_NO_ZEROES;
            self.no_zeroes = true;
        }
        self.socket
            .write_all(&cflags.to_be_bytes())
            .map_err(|e| io_err(&self.target, e))
    }

    fn send(&mut self, option: u32, data: &[u8]) -> Result<(), ClientError> {
        let mut m = Vec::with_capacity(16 + data.len());
        encode_option(&mut m, option, data);
        self.socket
            .write_all(&m)
            .map_err(|e| io_err(&self.target, e))
    }

    fn reply(&mut self, option: u32) -> Result<OptionReply, ClientError> {
        loop {
            match OptionReply::decode(&self.buf) {
                Ok(Some((reply, used))) => {
                    self.buf.drain(..used);
                    if reply.option != option {
                        return Err(violation(
                            &self.target,
                            format!(
                                "reply for option {} while waiting for {option}",
                                reply.option
                            ),
                        ));
                    }
                    return Ok(reply);
                }
                Ok(None) => {}
                Err(source) => {
                    return Err(ClientError::Protocol {
                        target: self.target.clone(),
                        source,
                    })
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self
                .socket
                .read(&mut chunk)
                .map_err(|e| io_err(&self.target, e))?;
            if n == 0 {
                return Err(ClientError::Closed {
                    target: self.target.clone(),
                });
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends an option with no data and reports whether it was acked.
    fn simple_option(&mut self, option: u32) -> Result<bool, ClientError> {
        self.send(option, &[])?;
        Ok(self.reply(option)?.kind == REP_ACK)
    }
}

/// Lists the exports of the server at `target` as (name, description).
pub fn list_exports(target: &Target) -> Result<Vec<(String, String)>, ClientError> {
    let mut socket = open_socket(target)?;
    let mut h = Haggler {
        socket: &mut socket,
        target: target.to_string(),
        buf: Vec::new(),
        no_zeroes: false,
    };
    h.greet()?;
    h.send(OPT_LIST, &[])?;
    let mut exports = Vec::new();
    loop {
        let r = h.reply(OPT_LIST)?;
        match r.kind {
            REP_SERVER => {
                let bad = || violation(&h.target, "malformed NBD_REP_SERVER");
                let len = u32::from_be_bytes(
                    r.data
                        .get(..4)
                        .ok_or_else(bad)?
                        .try_into()
                        .map_err(|_| bad())?,
                ) as usize;
                let name = r.data.get(4..4 + len).ok_or_else(bad)?;
                let desc = &r.data[4 + len..];
                exports.push((
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(desc).into_owned(),
                ));
            }
            REP_ACK => break,
            _ => {
                return Err(ClientError::Handshake {
                    target: h.target.clone(),
                    reason: format!("NBD_OPT_LIST refused: {}", String::from_utf8_lossy(&r.data)),
                })
            }
        }
    }
    let _ = h.simple_option(OPT_ABORT);
    Ok(exports)
}

/// Connects and negotiates; returns the socket in transmission phase.
pub(crate) fn handshake(
    uri: &NbdUri,
    options: &ConnectOptions,
) -> Result<(Socket, ExportDetails), ClientError> {
    let mut socket = open_socket(&uri.target)?;
    let target = uri.target.to_string();
    let mut h = Haggler {
        socket: &mut socket,
        target: target.clone(),
        buf: Vec::new(),
        no_zeroes: false,
    };
    h.greet()?;
    let extended = options.extended_headers && h.simple_option(OPT_EXTENDED_HEADERS)?;
    let structured =
        extended || (options.structured_replies && h.simple_option(OPT_STRUCTURED_REPLY)?);
    let mut base_allocation_id = None;
    if structured && options.base_allocation {
        h.send(
            OPT_SET_META_CONTEXT,
            &meta_context_data(&uri.export, &[META_CONTEXT_BASE_ALLOCATION]),
        )?;
        loop {
            let r = h.reply(OPT_SET_META_CONTEXT)?;
            match r.kind {
                REP_META_CONTEXT if r.data.len() >= 4 => {
                    if &r.data[4..] == META_CONTEXT_BASE_ALLOCATION.as_bytes() {
                        base_allocation_id = Some(u32::from_be_bytes([
                            r.data[0], r.data[1], r.data[2], r.data[3],
                        ]));
                    }
                }
                REP_ACK => break,
                _ => {
                    base_allocation_id = None;
                    break;
                }
            }
        }
    }
    h.send(
        OPT_GO,
        &info_go_data(&uri.export, &[INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION]),
    )?;
    let mut details = ExportDetails {
        target: target.clone(),
        name: uri.export.clone(),
        description: String::new(),
        size: 0,
        flags: 0,
        block_sizes: BlockSizes::default(),
        reply_style: if extended {
            ReplyStyle::Extended
        } else if structured {
            ReplyStyle::Structured
        } else {
            ReplyStyle::Simple
        },
        header_style: if extended {
            HeaderStyle::Extended
        } else {
            HeaderStyle::Compact
        },
        base_allocation_id,
    };
    let mut got_export = false;
    loop {
        let r = h.reply(OPT_GO)?;
        match r.kind {
            REP_INFO if r.data.len() >= 2 => {
                let d = &r.data;
                match u16::from_be_bytes([d[0], d[1]]) {
                    INFO_EXPORT if d.len() == 12 => {
                        details.size = u64::from_be_bytes(d[2..10].try_into().unwrap_or_default());
                        details.flags = u16::from_be_bytes([d[10], d[11]]);
                        got_export = true;
                    }
                    INFO_NAME => details.name = String::from_utf8_lossy(&d[2..]).into_owned(),
                    INFO_DESCRIPTION => {
                        details.description = String::from_utf8_lossy(&d[2..]).into_owned();
                    }
                    INFO_BLOCK_SIZE if d.len() == 14 => {
                        let be32 = |at: usize| {
                            u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
                        };
                        details.block_sizes = BlockSizes {
                            minimum: be32(2),
                            preferred: be32(6),
                            maximum_payload: be32(10),
                        };
                    }
                    _ => {}
                }
            }
            REP_INFO => {}
            REP_ACK if got_export => break,
            REP_ACK => {
                return Err(violation(
                    &target,
                    "NBD_OPT_GO acked without NBD_INFO_EXPORT",
                ))
            }
            REP_ERR_UNKNOWN => {
                return Err(ClientError::UnknownExport {
                    target,
                    export: uri.export.clone(),
                    message: String::from_utf8_lossy(&r.data).into_owned(),
                })
            }
            REP_ERR_UNSUP if !extended => {
                // An old server: fall back to NBD_OPT_EXPORT_NAME.
                h.send(OPT_EXPORT_NAME, uri.export.as_bytes())?;
                let mut info = [0u8; 10];
                h.socket
                    .read_exact(&mut info)
                    .map_err(|e| io_err(&target, e))?;
                details.size = u64::from_be_bytes(info[..8].try_into().unwrap_or_default());
                details.flags = u16::from_be_bytes([info[8], info[9]]);
                if !h.no_zeroes {
                    let mut zeroes = [0u8; 124];
                    h.socket
                        .read_exact(&mut zeroes)
                        .map_err(|e| io_err(&target, e))?;
                }
                break;
            }
            kind => {
                return Err(ClientError::Handshake {
                    target,
                    reason: format!(
                        "NBD_OPT_GO refused with reply {kind:#x}: {}",
                        String::from_utf8_lossy(&r.data)
                    ),
                })
            }
        }
    }
    if !h.buf.is_empty() {
        return Err(violation(&target, "unexpected bytes after NBD_OPT_GO"));
    }
    Ok((socket, details))
}
