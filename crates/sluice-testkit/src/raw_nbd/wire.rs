//! The NBD protocol's numbers (magics, flags, options, commands, reply
//! types, errno values) and the byte layouts of its messages, written
//! out by hand: big-endian readers, the greeting, option requests and
//! replies, and compact and extended request headers.

use std::io::{Read, Write};

// Magic numbers.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const EXTENDED_REQUEST_MAGIC: u32 = 0x21e4_1c71;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
pub const EXTENDED_REPLY_MAGIC: u32 = 0x6e8a_278c;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_BIT: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR_BIT | 1;
pub const REP_ERR_POLICY: u32 = REP_ERR_BIT | 2;
pub const REP_ERR_INVALID: u32 = REP_ERR_BIT | 3;
pub const REP_ERR_PLATFORM: u32 = REP_ERR_BIT | 4;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR_BIT | 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR_BIT | 6;
pub const INFO_EXPORT: u16 = 0;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Commands and command flags.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;
pub const CMD_FLAG_FUA: u16 = 1;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;
pub const CMD_FLAG_PAYLOAD_LEN: u16 = 1 << 5;

// Reply chunks.
pub const REPLY_FLAG_DONE: u16 = 1;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR_BIT: u16 = 1 << 15;
pub const REPLY_TYPE_ERROR: u16 = REPLY_TYPE_ERROR_BIT | 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = REPLY_TYPE_ERROR_BIT | 2;

// Errors.
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// Reads exactly `n` bytes.
pub fn read_exact<S: Read>(s: &mut S, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("reading {n} bytes from the server: {e}"));
    buf
}

/// Reads a big-endian u16.
pub fn read_u16<S: Read>(s: &mut S) -> u16 {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("reading a u16 from the server: {e}"));
    u16::from_be_bytes(b)
}

/// Reads a big-endian u32.
pub fn read_u32<S: Read>(s: &mut S) -> u32 {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("reading a u32 from the server: {e}"));
    u32::from_be_bytes(b)
}

/// Reads a big-endian u64.
pub fn read_u64<S: Read>(s: &mut S) -> u64 {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("reading a u64 from the server: {e}"));
    u64::from_be_bytes(b)
}

/// Big-endian u16 at the start of `b`.
pub fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Big-endian u32 at the start of `b`.
pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Big-endian u64 at the start of `b`.
pub fn be64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_be_bytes(w)
}

/// Reads the server greeting (NBDMAGIC, IHAVEOPT, handshake flags) and
/// returns the flags.
pub fn read_greeting<S: Read>(s: &mut S) -> u16 {
    assert_eq!(read_u64(s), NBDMAGIC, "greeting must start with NBDMAGIC");
    assert_eq!(
        read_u64(s),
        IHAVEOPT,
        "server must speak newstyle (IHAVEOPT after NBDMAGIC)"
    );
    let flags = read_u16(s);
    assert_ne!(
        flags & FLAG_FIXED_NEWSTYLE,
        0,
        "server must set NBD_FLAG_FIXED_NEWSTYLE"
    );
    flags
}

/// The bytes of one option request.
pub fn option_bytes(opt: u32, data: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(16 + data.len());
    msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
    msg.extend_from_slice(&opt.to_be_bytes());
    let len = u32::try_from(data.len()).expect("option data fits in u32");
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(data);
    msg
}

/// The bytes of one option reply (to compare transcripts with).
pub fn option_reply_bytes(opt: u32, kind: u32, data: &[u8]) -> Vec<u8> {
    let mut msg = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
    msg.extend_from_slice(&opt.to_be_bytes());
    msg.extend_from_slice(&kind.to_be_bytes());
    let len = u32::try_from(data.len()).expect("reply data fits in u32");
    msg.extend_from_slice(&len.to_be_bytes());
    msg.extend_from_slice(data);
    msg
}

/// The data of NBD_OPT_GO / NBD_OPT_INFO for `name`, no information
/// requests.
pub fn go_data(name: &str) -> Vec<u8> {
    let len = u32::try_from(name.len()).expect("name fits in u32");
    let mut d = len.to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

/// Sends one option request.
pub fn send_option<S: Write>(s: &mut S, opt: u32, data: &[u8]) {
    s.write_all(&option_bytes(opt, data)).expect("send option");
    s.flush().expect("flush option");
}

/// One option reply: (option, reply type, data).
pub fn read_option_reply<S: Read>(s: &mut S) -> (u32, u32, Vec<u8>) {
    assert_eq!(read_u64(s), OPTION_REPLY_MAGIC, "option reply magic");
    let opt = read_u32(s);
    let typ = read_u32(s);
    let len = read_u32(s);
    assert!(len < 1 << 20, "implausible option reply length {len}");
    let data = read_exact(s, len as usize);
    (opt, typ, data)
}

/// Sends NBD_OPT_GO for `name` and reads replies up to the final one.
/// Ok((size, transmission flags)) or Err(error reply type).
pub fn opt_go<S: Read + Write>(s: &mut S, name: &str) -> Result<(u64, u16), u32> {
    send_option(s, OPT_GO, &go_data(name));
    let mut export = None;
    loop {
        let (opt, typ, data) = read_option_reply(s);
        assert_eq!(opt, OPT_GO, "reply to a different option");
        match typ {
            REP_INFO => {
                assert!(data.len() >= 2, "NBD_REP_INFO too short");
                if be16(&data) == INFO_EXPORT {
                    assert_eq!(data.len(), 12, "NBD_INFO_EXPORT length");
                    export = Some((be64(&data[2..]), be16(&data[10..])));
                }
            }
            REP_ACK => {
                return Ok(export.expect("NBD_OPT_GO acked without NBD_INFO_EXPORT"));
            }
            t if t & REP_ERR_BIT != 0 => return Err(t),
            t => panic!("unexpected reply type {t:#x} to NBD_OPT_GO"),
        }
    }
}

/// The 28 bytes of a compact request header.
pub fn compact_header(flags: u16, kind: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(28);
    m.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(&offset.to_be_bytes());
    m.extend_from_slice(&length.to_be_bytes());
    m
}

/// The 32 bytes of an extended request header.
pub fn extended_header(flags: u16, kind: u16, cookie: u64, offset: u64, length: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(32);
    m.extend_from_slice(&EXTENDED_REQUEST_MAGIC.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(&offset.to_be_bytes());
    m.extend_from_slice(&length.to_be_bytes());
    m
}
