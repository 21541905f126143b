//! Transmission-phase requests: the header codec and the validation that
//! turns a raw header into a [`Command`] the server can execute without
//! re-checking anything.

use thiserror::Error;

use crate::consts::*;
use crate::errno::NbdErrno;
use crate::reply::ReplyStyle;

/// Which request header the client uses, fixed by the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderStyle {
    /// 28-byte header with a 32-bit length.
    Compact,
    /// 32-byte header with a 64-bit length (`NBD_OPT_EXTENDED_HEADERS`).
    Extended,
}

impl HeaderStyle {
    /// Bytes in one request header of this style.
    pub const fn header_len(self) -> usize {
        match self {
            Self::Compact => REQUEST_HEADER_LEN,
            Self::Extended => EXTENDED_REQUEST_HEADER_LEN,
        }
    }
}

/// A request header exactly as it came off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    /// Command flags (`NBD_CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`NBD_CMD_*`), possibly one we do not know.
    pub kind: u16,
    /// Opaque cookie echoed in every reply.
    pub cookie: u64,
    /// Offset in the export.
    pub offset: u64,
    /// Payload length or effect length, depending on command and style.
    pub length: u64,
}

/// A request that cannot be framed: the stream is no longer in sync and
/// the connection must be dropped.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestDecodeError {
    /// The first four bytes are not the request magic for this style.
    #[error("bad request magic {found:#010x} (expected {expected:#010x})")]
    BadMagic { found: u32, expected: u32 },
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_u64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

impl RequestHeader {
    /// Decodes one header from the front of `buf` without consuming it.
    /// `Ok(None)` means fewer than [`HeaderStyle::header_len`] bytes are
    /// available. The server borrows write payloads in place from its
    /// receive buffer, which is why this works on a slice rather than a
    /// consuming `Buf`.
    pub fn decode(buf: &[u8], style: HeaderStyle) -> Result<Option<Self>, RequestDecodeError> {
        if buf.len() < style.header_len() {
            return Ok(None);
        }
        let magic = be_u32(buf, 0);
        let expected = match style {
            HeaderStyle::Compact => REQUEST_MAGIC,
            HeaderStyle::Extended => EXTENDED_REQUEST_MAGIC,
        };
        if magic != expected {
            return Err(RequestDecodeError::BadMagic {
                found: magic,
                expected,
            });
        }
        let length = match style {
            HeaderStyle::Compact => u64::from(be_u32(buf, 24)),
            HeaderStyle::Extended => be_u64(buf, 24),
        };
        Ok(Some(Self {
            flags: be_u16(buf, 4),
            kind: be_u16(buf, 6),
            cookie: be_u64(buf, 8),
            offset: be_u64(buf, 16),
            length,
        }))
    }

    /// Appends this header in the given style. A compact header carries
    /// only the low 32 bits of `length`.
    pub fn encode(&self, style: HeaderStyle, out: &mut Vec<u8>) {
        let magic = match style {
            HeaderStyle::Compact => REQUEST_MAGIC,
            HeaderStyle::Extended => EXTENDED_REQUEST_MAGIC,
        };
        out.reserve(style.header_len());
        out.extend_from_slice(&magic.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        out.extend_from_slice(&self.kind.to_be_bytes());
        out.extend_from_slice(&self.cookie.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        match style {
            HeaderStyle::Compact => out.extend_from_slice(&(self.length as u32).to_be_bytes()),
            HeaderStyle::Extended => out.extend_from_slice(&self.length.to_be_bytes()),
        }
    }

    /// Number of payload bytes that follow this header on the wire.
    pub fn payload_len(&self, style: HeaderStyle) -> u64 {
        match style {
            HeaderStyle::Compact if self.kind == CMD_WRITE => self.length,
            HeaderStyle::Compact => 0,
            // The spec requires PAYLOAD_LEN on extended writes, but qemu
            // (10.0) omits it; a WRITE always carries its data, so framing
            // by command type keeps both kinds of client in sync.
            HeaderStyle::Extended if self.kind == CMD_WRITE => self.length,
            HeaderStyle::Extended if self.flags & CMD_FLAG_PAYLOAD_LEN != 0 => self.length,
            HeaderStyle::Extended => 0,
        }
    }
}

/// What the transmission phase agreed on: everything needed to validate a
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransmissionParams {
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags sent to the client.
    pub flags: u16,
    /// Request header style.
    pub header_style: HeaderStyle,
    /// Reply style.
    pub reply_style: ReplyStyle,
    /// Largest READ or WRITE payload accepted.
    pub max_payload: u32,
    /// Advertised minimum block size (a power of two); offsets and lengths
    /// of data commands must be multiples of it.
    pub min_block: u32,
    /// Whether `base:allocation` was selected, so BLOCK_STATUS is allowed.
    pub block_status: bool,
}

/// A validated command: offsets and lengths are in range, flags are legal
/// for the command and were advertised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Read `length` bytes at `offset`. `df`: one content chunk only.
    Read { offset: u64, length: u32, df: bool },
    /// Write the `length`-byte payload at `offset`.
    Write { offset: u64, length: u32, fua: bool },
    /// Soft disconnect; no reply.
    Disconnect,
    /// Make completed writes durable.
    Flush,
    /// Discard a range (a hint).
    Trim { offset: u64, length: u64, fua: bool },
    /// Prefetch a range.
    Cache { offset: u64, length: u64 },
    /// Zero a range; `may_trim` unless NO_HOLE; `fast` is FAST_ZERO.
    WriteZeroes {
        offset: u64,
        length: u64,
        fua: bool,
        may_trim: bool,
        fast: bool,
    },
    /// Report allocation of a range; `req_one`: exactly one extent.
    BlockStatus {
        offset: u64,
        length: u64,
        req_one: bool,
    },
}

/// A request the server answers with an error reply (the connection goes on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{errno}: {reason}")]
pub struct RejectedRequest {
    /// Error value for the reply.
    pub errno: NbdErrno,
    /// Human-readable reason, sent in structured error chunks.
    pub reason: &'static str,
}

const fn reject(errno: NbdErrno, reason: &'static str) -> RejectedRequest {
    RejectedRequest { errno, reason }
}

/// Whether `kind` is a command this server knows.
const fn is_known_command(kind: u16) -> bool {
    matches!(
        kind,
        CMD_READ
            | CMD_WRITE
            | CMD_DISC
            | CMD_FLUSH
            | CMD_TRIM
            | CMD_CACHE
            | CMD_WRITE_ZEROES
            | CMD_BLOCK_STATUS
    )
}

impl TransmissionParams {
    /// Checks a request against the negotiated parameters: known command,
    /// flags that exist, were advertised and apply to the command, range
    /// inside the export, payload within limits, write access.
    pub fn validate(&self, h: &RequestHeader) -> Result<Command, RejectedRequest> {
        let adv = |flag: u16| self.flags & flag != 0;
        let allowed = self.allowed_flags(h.kind);
        if !is_known_command(h.kind) {
            return Err(reject(NbdErrno::Inval, "unknown command"));
        }
        if h.kind == CMD_DISC {
            return Ok(Command::Disconnect);
        }
        if h.flags & !allowed != 0 {
            return Err(reject(
                NbdErrno::Inval,
                "command flag not valid for this command",
            ));
        }
        let fua = h.flags & CMD_FLAG_FUA != 0;
        let read_only = adv(FLAG_READ_ONLY);
        if !self.aligned(h) {
            return Err(reject(
                NbdErrno::Inval,
                "request not aligned to the minimum block size",
            ));
        }
        let end = h.offset.checked_add(h.length);
        let in_range = end.is_some_and(|e| e <= self.size);
        let too_large = self.too_large_errno();
        match h.kind {
            CMD_READ => {
                if h.length > u64::from(self.max_payload) {
                    return Err(reject(too_large, "read longer than the maximum payload"));
                }
                if !in_range {
                    return Err(reject(NbdErrno::Inval, "read past the end of the export"));
                }
                Ok(Command::Read {
                    offset: h.offset,
                    length: h.length as u32,
                    df: h.flags & CMD_FLAG_DF != 0,
                })
            }
            CMD_WRITE => {
                if read_only {
                    return Err(reject(NbdErrno::Perm, "write to a read-only export"));
                }
                if h.length > u64::from(self.max_payload) {
                    return Err(reject(too_large, "write longer than the maximum payload"));
                }
                if !in_range {
                    return Err(reject(NbdErrno::NoSpc, "write past the end of the export"));
                }
                Ok(Command::Write {
                    offset: h.offset,
                    length: h.length as u32,
                    fua,
                })
            }
            CMD_FLUSH => {
                if !adv(FLAG_SEND_FLUSH) {
                    return Err(reject(NbdErrno::Inval, "flush not advertised"));
                }
                if h.offset != 0 || h.length != 0 {
                    return Err(reject(
                        NbdErrno::Inval,
                        "flush with nonzero offset or length",
                    ));
                }
                Ok(Command::Flush)
            }
            CMD_TRIM => {
                if !adv(FLAG_SEND_TRIM) {
                    return Err(reject(NbdErrno::Inval, "trim not advertised"));
                }
                if read_only {
                    return Err(reject(NbdErrno::Perm, "trim on a read-only export"));
                }
                if !in_range {
                    return Err(reject(NbdErrno::Inval, "trim past the end of the export"));
                }
                Ok(Command::Trim {
                    offset: h.offset,
                    length: h.length,
                    fua,
                })
            }
            CMD_CACHE => {
                if !in_range {
                    return Err(reject(NbdErrno::Inval, "cache past the end of the export"));
                }
                Ok(Command::Cache {
                    offset: h.offset,
                    length: h.length,
                })
            }
            CMD_WRITE_ZEROES => {
                if !adv(FLAG_SEND_WRITE_ZEROES) {
                    return Err(reject(NbdErrno::Inval, "write zeroes not advertised"));
                }
                if read_only {
                    return Err(reject(NbdErrno::Perm, "write zeroes on a read-only export"));
                }
                if !in_range {
                    return Err(reject(
                        NbdErrno::NoSpc,
                        "write zeroes past the end of the export",
                    ));
                }
                Ok(Command::WriteZeroes {
                    offset: h.offset,
                    length: h.length,
                    fua,
                    may_trim: h.flags & CMD_FLAG_NO_HOLE == 0,
                    fast: h.flags & CMD_FLAG_FAST_ZERO != 0,
                })
            }
            CMD_BLOCK_STATUS => {
                if !self.block_status {
                    return Err(reject(
                        NbdErrno::Inval,
                        "block status without a metadata context",
                    ));
                }
                if h.length == 0 {
                    return Err(reject(NbdErrno::Inval, "block status of zero length"));
                }
                if !in_range {
                    return Err(reject(
                        NbdErrno::Inval,
                        "block status past the end of the export",
                    ));
                }
                Ok(Command::BlockStatus {
                    offset: h.offset,
                    length: h.length,
                    req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
                })
            }
            _ => Err(reject(NbdErrno::Inval, "unknown command")),
        }
    }

    /// The command flags a request of `kind` may carry: those that apply
    /// to it and whose feature was advertised.
    fn allowed_flags(&self, kind: u16) -> u16 {
        let adv = |flag: u16| self.flags & flag != 0;
        let extended = self.header_style == HeaderStyle::Extended;
        let mut allowed = 0u16;
        if adv(FLAG_SEND_FUA) {
            allowed |= CMD_FLAG_FUA;
        }
        match kind {
            CMD_READ if adv(FLAG_SEND_DF) => allowed |= CMD_FLAG_DF,
            CMD_WRITE if extended => allowed |= CMD_FLAG_PAYLOAD_LEN,
            CMD_WRITE_ZEROES => {
                allowed |= CMD_FLAG_NO_HOLE;
                if adv(FLAG_SEND_FAST_ZERO) {
                    allowed |= CMD_FLAG_FAST_ZERO;
                }
            }
            CMD_BLOCK_STATUS => allowed |= CMD_FLAG_REQ_ONE,
            _ => {}
        }
        allowed
    }

    /// Whether a request's range is aligned to the minimum block size;
    /// only the commands that touch data need to be.
    fn aligned(&self, h: &RequestHeader) -> bool {
        let align = u64::from(self.min_block.max(1));
        h.offset.is_multiple_of(align) && h.length.is_multiple_of(align)
            || !matches!(
                h.kind,
                CMD_READ | CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES | CMD_CACHE
            )
    }

    /// The error of a read or write longer than the maximum payload.
    fn too_large_errno(&self) -> NbdErrno {
        // The spec: a server SHOULD NOT send EOVERFLOW unless chunked
        // replies were negotiated; with simple replies it is EINVAL.
        if self.reply_style == ReplyStyle::Simple {
            NbdErrno::Inval
        } else {
            NbdErrno::Overflow
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> TransmissionParams {
        TransmissionParams {
            size: 1 << 20,
            flags: FLAG_HAS_FLAGS
                | FLAG_SEND_FLUSH
                | FLAG_SEND_FUA
                | FLAG_SEND_TRIM
                | FLAG_SEND_WRITE_ZEROES
                | FLAG_SEND_DF
                | FLAG_SEND_FAST_ZERO
                | FLAG_SEND_CACHE,
            header_style: HeaderStyle::Compact,
            reply_style: ReplyStyle::Structured,
            max_payload: DEFAULT_MAX_PAYLOAD,
            min_block: 1,
            block_status: true,
        }
    }

    fn hdr(kind: u16, flags: u16, offset: u64, length: u64) -> RequestHeader {
        RequestHeader {
            flags,
            kind,
            cookie: 7,
            offset,
            length,
        }
    }

    #[test]
    fn an_oversized_read_is_eoverflow_only_with_chunked_replies() {
        let too_long = hdr(CMD_READ, 0, 0, u64::from(DEFAULT_MAX_PAYLOAD) + 1);
        let too_long_df = hdr(CMD_READ, CMD_FLAG_DF, 0, u64::from(DEFAULT_MAX_PAYLOAD) + 1);
        for (style, want) in [
            (ReplyStyle::Simple, NbdErrno::Inval),
            (ReplyStyle::Structured, NbdErrno::Overflow),
            (ReplyStyle::Extended, NbdErrno::Overflow),
        ] {
            let mut p = params();
            p.reply_style = style;
            if style == ReplyStyle::Simple {
                // DF is only advertised with chunked replies.
                p.flags &= !FLAG_SEND_DF;
                assert_eq!(p.validate(&too_long).unwrap_err().errno, want);
            } else {
                assert_eq!(p.validate(&too_long).unwrap_err().errno, want);
                assert_eq!(p.validate(&too_long_df).unwrap_err().errno, want);
            }
        }
    }

    #[test]
    fn decodes_compact_read_from_spec_bytes() {
        // magic, flags=FUA, type=READ, cookie, offset=4096, length=512
        let bytes = [
            0x25, 0x60, 0x95, 0x13, 0x00, 0x01, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0,
            0, 0, 0x10, 0x00, 0, 0, 0x02, 0x00,
        ];
        let h = RequestHeader::decode(&bytes, HeaderStyle::Compact)
            .unwrap()
            .unwrap();
        assert_eq!(
            h,
            RequestHeader {
                flags: 1,
                kind: 0,
                cookie: 42,
                offset: 4096,
                length: 512
            }
        );
        assert_eq!(h.payload_len(HeaderStyle::Compact), 0);
        let mut out = Vec::new();
        h.encode(HeaderStyle::Compact, &mut out);
        assert_eq!(out, bytes);
    }

    #[test]
    fn decodes_extended_write_with_payload_len() {
        let h = hdr(CMD_WRITE, CMD_FLAG_PAYLOAD_LEN, 0, 5 << 32);
        let mut out = Vec::new();
        h.encode(HeaderStyle::Extended, &mut out);
        assert_eq!(out.len(), 32);
        assert_eq!(&out[..4], &[0x21, 0xe4, 0x1c, 0x71]);
        let back = RequestHeader::decode(&out, HeaderStyle::Extended)
            .unwrap()
            .unwrap();
        assert_eq!(back, h);
        assert_eq!(back.payload_len(HeaderStyle::Extended), 5 << 32);
    }

    #[test]
    fn short_input_needs_more_and_bad_magic_errors() {
        assert_eq!(
            RequestHeader::decode(&[0x25; 27], HeaderStyle::Compact),
            Ok(None)
        );
        let mut out = Vec::new();
        hdr(CMD_READ, 0, 0, 1).encode(HeaderStyle::Compact, &mut out);
        out.extend_from_slice(&[0; 4]);
        assert!(matches!(
            RequestHeader::decode(&out, HeaderStyle::Extended),
            Err(RequestDecodeError::BadMagic {
                found: REQUEST_MAGIC,
                ..
            })
        ));
    }

    #[test]
    fn compact_write_carries_payload_other_commands_do_not() {
        assert_eq!(
            hdr(CMD_WRITE, 0, 0, 10).payload_len(HeaderStyle::Compact),
            10
        );
        assert_eq!(hdr(CMD_TRIM, 0, 0, 10).payload_len(HeaderStyle::Compact), 0);
        assert_eq!(
            hdr(CMD_TRIM, 0, 0, 10).payload_len(HeaderStyle::Extended),
            0
        );
    }

    #[test]
    fn validates_ranges_and_errnos() {
        let p = params();
        assert_eq!(
            p.validate(&hdr(CMD_READ, 0, (1 << 20) - 1, 1)),
            Ok(Command::Read {
                offset: (1 << 20) - 1,
                length: 1,
                df: false
            })
        );
        assert_eq!(
            p.validate(&hdr(CMD_READ, 0, 1 << 20, 1)).unwrap_err().errno,
            NbdErrno::Inval
        );
        assert_eq!(
            p.validate(&hdr(CMD_WRITE, 0, 1 << 20, 1))
                .unwrap_err()
                .errno,
            NbdErrno::NoSpc
        );
        assert_eq!(
            p.validate(&hdr(CMD_READ, 0, u64::MAX, 2))
                .unwrap_err()
                .errno,
            NbdErrno::Inval,
            "offset + length overflow"
        );
        assert_eq!(
            p.validate(&hdr(CMD_READ, 0, 0, u64::from(DEFAULT_MAX_PAYLOAD) + 1))
                .unwrap_err()
                .errno,
            NbdErrno::Overflow
        );
        assert_eq!(
            p.validate(&hdr(99, 0, 0, 0)).unwrap_err().errno,
            NbdErrno::Inval
        );
        assert_eq!(
            p.validate(&hdr(CMD_FLUSH, 0, 1, 0)).unwrap_err().errno,
            NbdErrno::Inval
        );
        assert_eq!(p.validate(&hdr(CMD_DISC, 0, 0, 0)), Ok(Command::Disconnect));
    }

    #[test]
    fn validates_flags_per_command() {
        let p = params();
        assert_eq!(
            p.validate(&hdr(CMD_READ, CMD_FLAG_REQ_ONE, 0, 1))
                .unwrap_err()
                .errno,
            NbdErrno::Inval
        );
        assert_eq!(
            p.validate(&hdr(CMD_READ, 1 << 9, 0, 1)).unwrap_err().errno,
            NbdErrno::Inval
        );
        assert_eq!(
            p.validate(&hdr(
                CMD_WRITE_ZEROES,
                CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA,
                0,
                8
            )),
            Ok(Command::WriteZeroes {
                offset: 0,
                length: 8,
                fua: true,
                may_trim: false,
                fast: true
            })
        );
        let mut no_df = p;
        no_df.flags &= !FLAG_SEND_DF;
        assert_eq!(
            no_df
                .validate(&hdr(CMD_READ, CMD_FLAG_DF, 0, 1))
                .unwrap_err()
                .errno,
            NbdErrno::Inval
        );
        let mut no_ctx = p;
        no_ctx.block_status = false;
        assert_eq!(
            no_ctx
                .validate(&hdr(CMD_BLOCK_STATUS, 0, 0, 1))
                .unwrap_err()
                .errno,
            NbdErrno::Inval
        );
    }

    #[test]
    fn enforces_minimum_block_alignment() {
        let mut p = params();
        p.min_block = 4096;
        assert!(p.validate(&hdr(CMD_READ, 0, 4096, 8192)).is_ok());
        for (offset, length) in [(512, 4096), (0, 100)] {
            for kind in [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES, CMD_CACHE] {
                assert_eq!(
                    p.validate(&hdr(kind, 0, offset, length)).unwrap_err().errno,
                    NbdErrno::Inval
                );
            }
        }
        // Block status lengths are hints; flush has no range.
        assert!(p.validate(&hdr(CMD_BLOCK_STATUS, 0, 0, 100)).is_ok());
    }

    #[test]
    fn read_only_rejects_writes_with_eperm() {
        let mut p = params();
        p.flags |= FLAG_READ_ONLY;
        for kind in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
            assert_eq!(
                p.validate(&hdr(kind, 0, 0, 1)).unwrap_err().errno,
                NbdErrno::Perm
            );
        }
        assert!(p.validate(&hdr(CMD_READ, 0, 0, 1)).is_ok());
    }

    #[test]
    fn extended_write_carries_payload_with_or_without_payload_len() {
        let mut p = params();
        p.header_style = HeaderStyle::Extended;
        p.reply_style = ReplyStyle::Extended;
        assert!(p
            .validate(&hdr(CMD_WRITE, CMD_FLAG_PAYLOAD_LEN, 0, 1))
            .is_ok());
        assert!(p.validate(&hdr(CMD_WRITE, 0, 0, 1)).is_ok());
        assert_eq!(
            hdr(CMD_WRITE, 0, 0, 9).payload_len(HeaderStyle::Extended),
            9
        );
        assert_eq!(
            hdr(CMD_READ, CMD_FLAG_PAYLOAD_LEN, 0, 9).payload_len(HeaderStyle::Extended),
            9,
            "a payload the command does not expect is still consumed"
        );
        assert_eq!(
            p.validate(&hdr(CMD_TRIM, CMD_FLAG_PAYLOAD_LEN, 0, 1))
                .unwrap_err()
                .errno,
            NbdErrno::Inval
        );
        // 64-bit effect lengths work for trim.
        p.size = 1 << 40;
        assert!(p.validate(&hdr(CMD_TRIM, 0, 0, 1 << 33)).is_ok());
    }
}
