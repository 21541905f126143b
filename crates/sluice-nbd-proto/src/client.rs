//! Client-side codecs: option requests, option replies and transmission
//! replies. The client's state (which cookies are in flight, how long a
//! simple read reply is) lives with the caller.

use thiserror::Error;

use crate::consts::*;
use crate::errno::NbdErrno;
use crate::reply::{Extent, ReplyStyle};

/// Appends one option request (`IHAVEOPT`, option, length, data).
pub fn encode_option(out: &mut Vec<u8>, option: u32, data: &[u8]) {
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Data of `NBD_OPT_INFO`/`NBD_OPT_GO`: export name and information
/// requests.
pub fn info_go_data(name: &str, requests: &[u16]) -> Vec<u8> {
    let mut d = Vec::with_capacity(6 + name.len() + 2 * requests.len());
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(requests.len() as u16).to_be_bytes());
    for r in requests {
        d.extend_from_slice(&r.to_be_bytes());
    }
    d
}

/// Data of `NBD_OPT_LIST_META_CONTEXT`/`NBD_OPT_SET_META_CONTEXT`.
pub fn meta_context_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

/// Bytes from the server the client cannot make sense of.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplyDecodeError {
    #[error("bad option reply magic {0:#018x}")]
    BadOptionReplyMagic(u64),
    #[error("option reply of {0} bytes is larger than the 16 MiB this client accepts")]
    OptionReplyTooLarge(u32),
    #[error("bad reply magic {found:#010x} for {style:?} replies")]
    BadReplyMagic { found: u32, style: ReplyStyle },
    #[error("reply chunk of {0} bytes is larger than the client accepts")]
    ChunkTooLarge(u64),
    #[error("malformed {what} payload of {len} bytes")]
    BadPayload { what: &'static str, len: usize },
}

/// One option reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionReply {
    /// The option it answers.
    pub option: u32,
    /// `NBD_REP_*`.
    pub kind: u32,
    /// Reply data.
    pub data: Vec<u8>,
}

impl OptionReply {
    /// Decodes one option reply from the front of `buf`: `Ok(None)` if
    /// incomplete, else the reply and the bytes it used.
    pub fn decode(buf: &[u8]) -> Result<Option<(Self, usize)>, ReplyDecodeError> {
        if buf.len() < 20 {
            return Ok(None);
        }
        let magic = u64::from_be_bytes(buf[..8].try_into().unwrap_or([0; 8]));
        if magic != OPTION_REPLY_MAGIC {
            return Err(ReplyDecodeError::BadOptionReplyMagic(magic));
        }
        let be32 = |at: usize| u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let len = be32(16);
        if len > 16 << 20 {
            return Err(ReplyDecodeError::OptionReplyTooLarge(len));
        }
        let total = 20 + len as usize;
        let Some(data) = buf.get(20..total) else {
            return Ok(None);
        };
        Ok(Some((
            Self {
                option: be32(8),
                kind: be32(12),
                data: data.to_vec(),
            },
            total,
        )))
    }

    /// Whether this is an error reply (bit 31 set).
    pub fn is_error(&self) -> bool {
        self.kind & (1 << 31) != 0
    }
}

/// A transmission reply header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyHeader {
    /// Simple reply; for a successful READ the data (of the requested
    /// length) follows.
    Simple { cookie: u64, error: u32 },
    /// Structured or extended chunk; `length` payload bytes follow.
    /// `offset` is only sent in extended headers (0 otherwise).
    Chunk {
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        length: u64,
    },
}

impl ReplyHeader {
    /// Decodes a reply header from the front of `buf`: `Ok(None)` if
    /// incomplete, else the header and its length in bytes.
    pub fn decode(
        buf: &[u8],
        style: ReplyStyle,
    ) -> Result<Option<(Self, usize)>, ReplyDecodeError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let be16 = |at: usize| u16::from_be_bytes([buf[at], buf[at + 1]]);
        let be32 = |at: usize| u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let be64 = |at: usize| (u64::from(be32(at)) << 32) | u64::from(be32(at + 4));
        let magic = be32(0);
        match (magic, style) {
            (SIMPLE_REPLY_MAGIC, ReplyStyle::Simple | ReplyStyle::Structured) => {
                if buf.len() < SIMPLE_REPLY_HEADER_LEN {
                    return Ok(None);
                }
                Ok(Some((
                    Self::Simple {
                        error: be32(4),
                        cookie: be64(8),
                    },
                    SIMPLE_REPLY_HEADER_LEN,
                )))
            }
            (STRUCTURED_REPLY_MAGIC, ReplyStyle::Structured) => {
                if buf.len() < STRUCTURED_REPLY_HEADER_LEN {
                    return Ok(None);
                }
                let h = Self::Chunk {
                    flags: be16(4),
                    kind: be16(6),
                    cookie: be64(8),
                    offset: 0,
                    length: u64::from(be32(16)),
                };
                Ok(Some((h, STRUCTURED_REPLY_HEADER_LEN)))
            }
            (EXTENDED_REPLY_MAGIC, ReplyStyle::Extended) => {
                if buf.len() < EXTENDED_REPLY_HEADER_LEN {
                    return Ok(None);
                }
                let h = Self::Chunk {
                    flags: be16(4),
                    kind: be16(6),
                    cookie: be64(8),
                    offset: be64(16),
                    length: be64(24),
                };
                Ok(Some((h, EXTENDED_REPLY_HEADER_LEN)))
            }
            (found, style) => Err(ReplyDecodeError::BadReplyMagic { found, style }),
        }
    }
}

/// Parses an error chunk payload (`ERROR` or `ERROR_OFFSET`): errno,
/// message, and the offset for `ERROR_OFFSET`.
pub fn parse_error_chunk(
    kind: u16,
    payload: &[u8],
) -> Result<(NbdErrno, String, Option<u64>), ReplyDecodeError> {
    let bad = || ReplyDecodeError::BadPayload {
        what: "error chunk",
        len: payload.len(),
    };
    if payload.len() < 6 {
        return Err(bad());
    }
    let errno = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let msg_len = usize::from(u16::from_be_bytes([payload[4], payload[5]]));
    let msg = payload.get(6..6 + msg_len).ok_or_else(bad)?;
    let offset = if kind == REPLY_TYPE_ERROR_OFFSET {
        let o = payload.get(6 + msg_len..14 + msg_len).ok_or_else(bad)?;
        Some(u64::from_be_bytes(o.try_into().map_err(|_| bad())?))
    } else {
        None
    };
    Ok((
        NbdErrno::from_code(errno),
        String::from_utf8_lossy(msg).into_owned(),
        offset,
    ))
}

/// Parses a `BLOCK_STATUS` (compact) or `BLOCK_STATUS_EXT` payload into
/// its context id and extents.
pub fn parse_block_status(
    kind: u16,
    payload: &[u8],
) -> Result<(u32, Vec<Extent>), ReplyDecodeError> {
    let bad = || ReplyDecodeError::BadPayload {
        what: "block status",
        len: payload.len(),
    };
    if payload.len() < 4 {
        return Err(bad());
    }
    let id = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
    let mut extents = Vec::new();
    if kind == REPLY_TYPE_BLOCK_STATUS_EXT {
        let rest = payload.get(8..).ok_or_else(bad)?;
        if rest.len() % 16 != 0 {
            return Err(bad());
        }
        for d in rest.chunks_exact(16) {
            let length = u64::from_be_bytes(d[..8].try_into().map_err(|_| bad())?);
            let status = u64::from_be_bytes(d[8..].try_into().map_err(|_| bad())?);
            extents.push(Extent {
                length,
                flags: status as u32,
            });
        }
    } else {
        let rest = &payload[4..];
        if !rest.len().is_multiple_of(8) {
            return Err(bad());
        }
        for d in rest.chunks_exact(8) {
            let length = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            let flags = u32::from_be_bytes([d[4], d[5], d[6], d[7]]);
            extents.push(Extent {
                length: u64::from(length),
                flags,
            });
        }
    }
    if extents.is_empty() {
        return Err(bad());
    }
    Ok((id, extents))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{encode_block_status, encode_error, encode_ok, encode_read_data_header};

    #[test]
    fn option_reply_round_trip_and_errors() {
        let mut b = Vec::new();
        b.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
        b.extend_from_slice(&OPT_GO.to_be_bytes());
        b.extend_from_slice(&REP_ERR_UNKNOWN.to_be_bytes());
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(b"abc");
        assert_eq!(OptionReply::decode(&b[..22]), Ok(None));
        let (r, used) = OptionReply::decode(&b).unwrap().unwrap();
        assert_eq!(used, 23);
        assert!(r.is_error());
        assert_eq!(r.data, b"abc");
        b[7] ^= 0xff;
        assert!(OptionReply::decode(&b).is_err());
    }

    #[test]
    fn decodes_what_the_server_encodes() {
        let mut b = Vec::new();
        encode_ok(&mut b, ReplyStyle::Structured, 5, 0);
        assert_eq!(
            ReplyHeader::decode(&b, ReplyStyle::Structured).unwrap(),
            Some((
                ReplyHeader::Simple {
                    cookie: 5,
                    error: 0
                },
                16
            ))
        );
        b.clear();
        encode_read_data_header(&mut b, ReplyStyle::Extended, 6, 512, 512, 100, true);
        let (h, n) = ReplyHeader::decode(&b, ReplyStyle::Extended)
            .unwrap()
            .unwrap();
        assert_eq!(n, 32);
        assert_eq!(
            h,
            ReplyHeader::Chunk {
                flags: REPLY_FLAG_DONE,
                kind: REPLY_TYPE_OFFSET_DATA,
                cookie: 6,
                offset: 512,
                length: 108
            }
        );
        assert!(ReplyHeader::decode(&b, ReplyStyle::Structured).is_err());
        b.clear();
        encode_error(
            &mut b,
            ReplyStyle::Structured,
            7,
            0,
            NbdErrno::NoSpc,
            "full",
        );
        let (h, n) = ReplyHeader::decode(&b, ReplyStyle::Structured)
            .unwrap()
            .unwrap();
        let ReplyHeader::Chunk { kind, .. } = h else {
            panic!("chunk")
        };
        assert_eq!(
            parse_error_chunk(kind, &b[n..]).unwrap(),
            (NbdErrno::NoSpc, "full".to_owned(), None)
        );
        for style in [ReplyStyle::Structured, ReplyStyle::Extended] {
            b.clear();
            let ext = [
                Extent {
                    length: 4096,
                    flags: 3,
                },
                Extent {
                    length: 512,
                    flags: 0,
                },
            ];
            encode_block_status(&mut b, style, 8, 0, 1, &ext);
            let (h, n) = ReplyHeader::decode(&b, style).unwrap().unwrap();
            let ReplyHeader::Chunk { kind, .. } = h else {
                panic!("chunk")
            };
            assert_eq!(
                parse_block_status(kind, &b[n..]).unwrap(),
                (1, ext.to_vec())
            );
        }
    }
}
