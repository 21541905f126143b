//! The client's sending half: turns requests into wire bytes, checked
//! against what the handshake settled (transmission flags, header style,
//! selected meta context), and hands out cookies.
//!
//! The encoder never allocates on its own: it appends to the caller's
//! buffer, so a driver that reuses one output buffer sends any number of
//! requests without allocating.

use std::fmt;

use thiserror::Error;

use crate::consts::*;
use crate::request::{HeaderStyle, RequestHeader};
use crate::ReplyStyle;

/// The request kinds a client sends (for matching replies and for error
/// messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    Cache,
    WriteZeroes,
    BlockStatus,
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Trim => "trim",
            Self::Cache => "cache",
            Self::WriteZeroes => "write zeroes",
            Self::BlockStatus => "block status",
        })
    }
}

impl Op {
    /// Whether the request changes the export's contents (and so belongs
    /// in a replay log until a FLUSH covers it).
    pub fn modifies(self) -> bool {
        matches!(self, Self::Write | Self::Trim | Self::WriteZeroes)
    }
}

/// One request to send.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum ClientRequest<'a> {
    /// Read `length` bytes.
    Read { offset: u64, length: u32 },
    /// Write `data`; durable on completion if `fua`.
    Write {
        offset: u64,
        data: &'a [u8],
        fua: bool,
    },
    /// Make completed writes durable.
    Flush,
    /// Discard a range.
    Trim { offset: u64, length: u64, fua: bool },
    /// Prefetch a range.
    Cache { offset: u64, length: u64 },
    /// Zero a range; `no_hole` keeps it allocated; `fast` fails unless quick.
    WriteZeroes {
        offset: u64,
        length: u64,
        no_hole: bool,
        fast: bool,
        fua: bool,
    },
    /// Allocation of a range (`base:allocation`); `req_one`: one extent.
    BlockStatus {
        offset: u64,
        length: u64,
        req_one: bool,
    },
}

/// What the handshake settled that the transmission codecs need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmission {
    /// Transmission flags (`NBD_FLAG_*`).
    pub flags: u16,
    /// Request header style.
    pub header_style: HeaderStyle,
    /// Reply style.
    pub reply_style: ReplyStyle,
    /// Context id of `base:allocation`, if selected.
    pub base_allocation_id: Option<u32>,
}

impl Transmission {
    /// Whether transmission flag `flag` is set.
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// A request the export cannot take, refused before anything is sent.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The server did not advertise the command (or the flag it needs).
    #[error("{0} is not supported by the export")]
    Unsupported(Op),
    /// A length over 4 GiB without extended headers.
    #[error("{op} of {length} bytes needs extended headers, which the server did not agree to")]
    TooLong { op: Op, length: u64 },
    /// A modifying request on a read-only export.
    #[error("{0} refused: the export is read-only")]
    ReadOnly(Op),
}

/// What the reply decoder needs to know about a sent request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Cookie the reply will carry.
    pub cookie: u64,
    /// Operation.
    pub op: Op,
    /// Offset.
    pub offset: u64,
    /// Length.
    pub length: u64,
}

/// Encodes requests and hands out cookies (never 0, never reused while
/// fewer than 2^64 requests have been sent).
#[derive(Debug, Clone)]
pub struct RequestEncoder {
    params: Transmission,
    next_cookie: u64,
}

impl RequestEncoder {
    /// An encoder for a connection that negotiated `params`.
    pub fn new(params: Transmission) -> Self {
        Self {
            params,
            next_cookie: 1,
        }
    }

    /// What the handshake settled.
    pub fn params(&self) -> &Transmission {
        &self.params
    }

    /// Takes over a reconnected session's parameters; cookies keep
    /// counting, so requests re-sent after a reconnect keep theirs.
    pub fn set_params(&mut self, params: Transmission) {
        self.params = params;
    }

    /// Appends `request` (header and any payload) to `out` under the
    /// next cookie; returns what the reply decoder must be told. Nothing
    /// is appended on error.
    pub fn encode(
        &mut self,
        request: ClientRequest<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Sent, RequestError> {
        let sent = self.encode_as(self.next_cookie, request, out)?;
        self.next_cookie = self.next_cookie.wrapping_add(1).max(1);
        Ok(sent)
    }

    /// [`encode`](Self::encode) under `cookie`, chosen by the caller (a
    /// client that numbers requests itself); the encoder's own count is
    /// left alone.
    pub fn encode_as(
        &self,
        cookie: u64,
        request: ClientRequest<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Sent, RequestError> {
        let p = &self.params;
        let fua_flag = |fua: bool| {
            if fua && p.has(FLAG_SEND_FUA) {
                CMD_FLAG_FUA
            } else {
                0
            }
        };
        let need = |flag: u16, op: Op| {
            if p.has(flag) {
                Ok(())
            } else {
                Err(RequestError::Unsupported(op))
            }
        };
        let writable = |op: Op| {
            if p.has(FLAG_READ_ONLY) {
                Err(RequestError::ReadOnly(op))
            } else {
                Ok(())
            }
        };
        let (op, kind, flags, offset, length, payload): (Op, u16, u16, u64, u64, &[u8]) =
            match request {
                ClientRequest::Read { offset, length } => {
                    (Op::Read, CMD_READ, 0, offset, u64::from(length), &[])
                }
                ClientRequest::Write { offset, data, fua } => {
                    writable(Op::Write)?;
                    let flags = fua_flag(fua)
                        | if p.header_style == HeaderStyle::Extended {
                            CMD_FLAG_PAYLOAD_LEN
                        } else {
                            0
                        };
                    (Op::Write, CMD_WRITE, flags, offset, data.len() as u64, data)
                }
                ClientRequest::Flush => {
                    need(FLAG_SEND_FLUSH, Op::Flush)?;
                    (Op::Flush, CMD_FLUSH, 0, 0, 0, &[])
                }
                ClientRequest::Trim {
                    offset,
                    length,
                    fua,
                } => {
                    writable(Op::Trim)?;
                    need(FLAG_SEND_TRIM, Op::Trim)?;
                    (Op::Trim, CMD_TRIM, fua_flag(fua), offset, length, &[])
                }
                ClientRequest::Cache { offset, length } => {
                    need(FLAG_SEND_CACHE, Op::Cache)?;
                    (Op::Cache, CMD_CACHE, 0, offset, length, &[])
                }
                ClientRequest::WriteZeroes {
                    offset,
                    length,
                    no_hole,
                    fast,
                    fua,
                } => {
                    writable(Op::WriteZeroes)?;
                    need(FLAG_SEND_WRITE_ZEROES, Op::WriteZeroes)?;
                    if fast {
                        need(FLAG_SEND_FAST_ZERO, Op::WriteZeroes)?;
                    }
                    let flags = fua_flag(fua)
                        | if no_hole { CMD_FLAG_NO_HOLE } else { 0 }
                        | if fast { CMD_FLAG_FAST_ZERO } else { 0 };
                    (
                        Op::WriteZeroes,
                        CMD_WRITE_ZEROES,
                        flags,
                        offset,
                        length,
                        &[],
                    )
                }
                ClientRequest::BlockStatus {
                    offset,
                    length,
                    req_one,
                } => {
                    if p.base_allocation_id.is_none() {
                        return Err(RequestError::Unsupported(Op::BlockStatus));
                    }
                    let flags = if req_one { CMD_FLAG_REQ_ONE } else { 0 };
                    (
                        Op::BlockStatus,
                        CMD_BLOCK_STATUS,
                        flags,
                        offset,
                        length,
                        &[],
                    )
                }
            };
        if p.header_style == HeaderStyle::Compact && length > u64::from(u32::MAX) {
            return Err(RequestError::TooLong { op, length });
        }
        // One allocation for the frame, not one per field.
        out.reserve(p.header_style.header_len() + payload.len());
        RequestHeader {
            flags,
            kind,
            cookie,
            offset,
            length,
        }
        .encode(p.header_style, out);
        out.extend_from_slice(payload);
        Ok(Sent {
            cookie,
            op,
            offset,
            length,
        })
    }

    /// Appends `NBD_CMD_DISC` (which gets no reply).
    pub fn encode_disconnect(&self, out: &mut Vec<u8>) {
        RequestHeader {
            flags: 0,
            kind: CMD_DISC,
            cookie: 0,
            offset: 0,
            length: 0,
        }
        .encode(self.params.header_style, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(flags: u16, header_style: HeaderStyle) -> Transmission {
        Transmission {
            flags,
            header_style,
            reply_style: ReplyStyle::Structured,
            base_allocation_id: None,
        }
    }

    #[test]
    fn write_is_encoded_byte_for_byte() {
        let mut e =
            RequestEncoder::new(params(FLAG_HAS_FLAGS | FLAG_SEND_FUA, HeaderStyle::Compact));
        let mut out = Vec::new();
        let sent = e
            .encode(
                ClientRequest::Write {
                    offset: 0x1000,
                    data: b"ab",
                    fua: true,
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(
            sent,
            Sent {
                cookie: 1,
                op: Op::Write,
                offset: 0x1000,
                length: 2
            }
        );
        #[rustfmt::skip]
        let want = [
            0x25, 0x60, 0x95, 0x13, // magic
            0x00, 0x01, 0x00, 0x01, // FUA, WRITE
            0, 0, 0, 0, 0, 0, 0, 1, // cookie
            0, 0, 0, 0, 0, 0, 0x10, 0, // offset
            0, 0, 0, 2, // length
            b'a', b'b',
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn extended_read_and_cookies_count_up() {
        let mut e = RequestEncoder::new(params(FLAG_HAS_FLAGS, HeaderStyle::Extended));
        let mut out = Vec::new();
        e.encode(ClientRequest::Flush, &mut out).unwrap_err();
        assert!(out.is_empty(), "nothing appended for a refused request");
        let s = e
            .encode(
                ClientRequest::Read {
                    offset: 512,
                    length: 4096,
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(s.cookie, 1);
        #[rustfmt::skip]
        let want = [
            0x21, 0xe4, 0x1c, 0x71,
            0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 1,
            0, 0, 0, 0, 0, 0, 2, 0,
            0, 0, 0, 0, 0, 0, 0x10, 0,
        ];
        assert_eq!(out, want);
        let s2 = e
            .encode(
                ClientRequest::Read {
                    offset: 0,
                    length: 1,
                },
                &mut out,
            )
            .unwrap();
        assert_eq!(s2.cookie, 2);
    }

    #[test]
    fn refuses_what_the_export_did_not_offer() {
        let mut out = Vec::new();
        let mut ro = RequestEncoder::new(params(
            FLAG_HAS_FLAGS | FLAG_READ_ONLY | FLAG_SEND_TRIM,
            HeaderStyle::Compact,
        ));
        assert_eq!(
            ro.encode(
                ClientRequest::Trim {
                    offset: 0,
                    length: 1,
                    fua: false
                },
                &mut out
            ),
            Err(RequestError::ReadOnly(Op::Trim))
        );
        let mut e = RequestEncoder::new(params(
            FLAG_HAS_FLAGS | FLAG_SEND_WRITE_ZEROES,
            HeaderStyle::Compact,
        ));
        let fast = ClientRequest::WriteZeroes {
            offset: 0,
            length: 1,
            no_hole: false,
            fast: true,
            fua: false,
        };
        assert_eq!(
            e.encode(fast, &mut out),
            Err(RequestError::Unsupported(Op::WriteZeroes))
        );
        let status = ClientRequest::BlockStatus {
            offset: 0,
            length: 1,
            req_one: false,
        };
        assert_eq!(
            e.encode(status, &mut out),
            Err(RequestError::Unsupported(Op::BlockStatus))
        );
        let zeroes = ClientRequest::WriteZeroes {
            offset: 0,
            length: 1 << 33,
            no_hole: false,
            fast: false,
            fua: false,
        };
        assert_eq!(
            e.encode(zeroes, &mut out),
            Err(RequestError::TooLong {
                op: Op::WriteZeroes,
                length: 1 << 33
            })
        );
        assert!(out.is_empty());
    }
}
