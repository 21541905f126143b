//! A minimal hand-written NBD client (fixed newstyle handshake, compact and
//! extended transmission headers) for tests that must misbehave on purpose or
//! check wire details no library client exposes.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

pub(crate) const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub(crate) const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
pub(crate) const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

pub(crate) const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub(crate) const FLAG_NO_ZEROES: u16 = 2;

pub(crate) const OPT_EXPORT_NAME: u32 = 1;
pub(crate) const OPT_GO: u32 = 7;
pub(crate) const OPT_STRUCTURED_REPLY: u32 = 8;
pub(crate) const OPT_EXTENDED_HEADERS: u32 = 11;

pub(crate) const REP_ACK: u32 = 1;
pub(crate) const REP_INFO: u32 = 3;
pub(crate) const REP_ERR_BIT: u32 = 1 << 31;
pub(crate) const REP_ERR_UNSUP: u32 = REP_ERR_BIT | 1;
pub(crate) const INFO_EXPORT: u16 = 0;

pub(crate) const TFLAG_HAS_FLAGS: u16 = 1;
pub(crate) const TFLAG_READ_ONLY: u16 = 1 << 1;
pub(crate) const TFLAG_SEND_FLUSH: u16 = 1 << 2;

pub(crate) const REQUEST_MAGIC: u32 = 0x2560_9513;
pub(crate) const EXT_REQUEST_MAGIC: u32 = 0x21e4_1c71;
pub(crate) const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub(crate) const EXT_REPLY_MAGIC: u32 = 0x6e8a_278c;

pub(crate) const CMD_READ: u16 = 0;
pub(crate) const CMD_WRITE: u16 = 1;
pub(crate) const CMD_DISC: u16 = 2;
pub(crate) const CMD_FLUSH: u16 = 3;
pub(crate) const CMD_FLAG_PAYLOAD_LEN: u16 = 1 << 5;

pub(crate) const REPLY_FLAG_DONE: u16 = 1;
pub(crate) const REPLY_TYPE_NONE: u16 = 0;
pub(crate) const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub(crate) const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub(crate) const REPLY_TYPE_ERROR_BIT: u16 = 1 << 15;

pub(crate) const NBD_EINVAL: u32 = 22;
pub(crate) const NBD_ESHUTDOWN: u32 = 108;

pub(crate) fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("reading {n} bytes from sluice: {e}"));
    buf
}

pub(crate) fn read_u16(s: &mut TcpStream) -> u16 {
    u16::from_be_bytes(read_exact(s, 2).try_into().expect("2 bytes"))
}

pub(crate) fn read_u32(s: &mut TcpStream) -> u32 {
    u32::from_be_bytes(read_exact(s, 4).try_into().expect("4 bytes"))
}

pub(crate) fn read_u64(s: &mut TcpStream) -> u64 {
    u64::from_be_bytes(read_exact(s, 8).try_into().expect("8 bytes"))
}

/// Reads the server greeting and returns its handshake flags.
pub(crate) fn read_greeting(s: &mut TcpStream) -> u16 {
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

pub(crate) fn send_option(s: &mut TcpStream, opt: u32, data: &[u8]) {
    let mut msg = Vec::with_capacity(16 + data.len());
    msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
    msg.extend_from_slice(&opt.to_be_bytes());
    msg.extend_from_slice(&u32::try_from(data.len()).expect("len").to_be_bytes());
    msg.extend_from_slice(data);
    s.write_all(&msg).expect("send option");
}

/// One option reply: (option, reply type, data).
pub(crate) fn read_option_reply(s: &mut TcpStream) -> (u32, u32, Vec<u8>) {
    assert_eq!(read_u64(s), OPT_REPLY_MAGIC, "option reply magic");
    let opt = read_u32(s);
    let typ = read_u32(s);
    let len = read_u32(s);
    assert!(len < 1 << 20, "implausible option reply length {len}");
    let data = read_exact(s, len as usize);
    (opt, typ, data)
}

/// Sends NBD_OPT_GO for `name` and reads replies up to the final one.
/// Ok((size, transmission flags)) or Err(error reply type).
pub(crate) fn opt_go(s: &mut TcpStream, name: &str) -> Result<(u64, u16), u32> {
    let mut data = Vec::new();
    data.extend_from_slice(&u32::try_from(name.len()).expect("len").to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes()); // no information requests
    send_option(s, OPT_GO, &data);
    let mut export = None;
    loop {
        let (opt, typ, data) = read_option_reply(s);
        assert_eq!(opt, OPT_GO, "reply to a different option");
        match typ {
            REP_INFO => {
                assert!(data.len() >= 2, "NBD_REP_INFO too short");
                let info = u16::from_be_bytes([data[0], data[1]]);
                if info == INFO_EXPORT {
                    assert_eq!(data.len(), 12, "NBD_INFO_EXPORT length");
                    let size = u64::from_be_bytes(data[2..10].try_into().expect("8"));
                    let flags = u16::from_be_bytes([data[10], data[11]]);
                    export = Some((size, flags));
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

/// An established transmission-phase connection.
pub(crate) struct RawConn {
    pub(crate) s: TcpStream,
    pub(crate) size: u64,
    pub(crate) flags: u16,
    pub(crate) extended: bool,
}

/// How to end the handshake.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Finish {
    Go,
    ExportName,
}

impl RawConn {
    /// Fixed-newstyle handshake with no structured replies (so every reply is
    /// a simple reply), optionally with extended headers.
    pub(crate) fn open(mut s: TcpStream, export: &str, finish: Finish, extended: bool) -> Self {
        let hflags = read_greeting(&mut s);
        let no_zeroes = hflags & FLAG_NO_ZEROES != 0;
        let cflags = u32::from(FLAG_FIXED_NEWSTYLE | if no_zeroes { FLAG_NO_ZEROES } else { 0 });
        s.write_all(&cflags.to_be_bytes())
            .expect("send client flags");
        if extended {
            send_option(&mut s, OPT_EXTENDED_HEADERS, &[]);
            let (opt, typ, data) = read_option_reply(&mut s);
            assert_eq!(opt, OPT_EXTENDED_HEADERS);
            assert_eq!(
                typ, REP_ACK,
                "server must accept NBD_OPT_EXTENDED_HEADERS (it advertises extended headers)"
            );
            assert!(data.is_empty());
        }
        let (size, flags) = match finish {
            Finish::Go => opt_go(&mut s, export)
                .unwrap_or_else(|t| panic!("NBD_OPT_GO {export:?} failed with {t:#x}")),
            Finish::ExportName => {
                send_option(&mut s, OPT_EXPORT_NAME, export.as_bytes());
                let size = read_u64(&mut s);
                let flags = read_u16(&mut s);
                if !no_zeroes {
                    read_exact(&mut s, 124);
                }
                (size, flags)
            }
        };
        assert_ne!(flags & TFLAG_HAS_FLAGS, 0, "NBD_FLAG_HAS_FLAGS must be set");
        Self {
            s,
            size,
            flags,
            extended,
        }
    }

    /// Sends one request header (compact or extended) plus payload.
    pub(crate) fn send_request(
        &mut self,
        flags: u16,
        typ: u16,
        cookie: u64,
        offset: u64,
        len: u64,
        payload: &[u8],
    ) {
        let mut msg = Vec::with_capacity(32 + payload.len());
        if self.extended {
            msg.extend_from_slice(&EXT_REQUEST_MAGIC.to_be_bytes());
            msg.extend_from_slice(&flags.to_be_bytes());
            msg.extend_from_slice(&typ.to_be_bytes());
            msg.extend_from_slice(&cookie.to_be_bytes());
            msg.extend_from_slice(&offset.to_be_bytes());
            msg.extend_from_slice(&len.to_be_bytes());
        } else {
            msg.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
            msg.extend_from_slice(&flags.to_be_bytes());
            msg.extend_from_slice(&typ.to_be_bytes());
            msg.extend_from_slice(&cookie.to_be_bytes());
            msg.extend_from_slice(&offset.to_be_bytes());
            msg.extend_from_slice(&u32::try_from(len).expect("compact length").to_be_bytes());
        }
        msg.extend_from_slice(payload);
        self.s.write_all(&msg).expect("send request");
    }

    /// Reads one simple reply: (error, cookie). Any read payload is left unread.
    pub(crate) fn read_simple_reply(&mut self) -> (u32, u64) {
        assert!(!self.extended);
        let magic = read_u32(&mut self.s);
        assert_eq!(
            magic, SIMPLE_REPLY_MAGIC,
            "without structured replies every reply must be a simple reply"
        );
        let err = read_u32(&mut self.s);
        let cookie = read_u64(&mut self.s);
        (err, cookie)
    }

    /// Reads all extended reply chunks of one request (up to the DONE
    /// flag), checks the header fields, and returns (error, data) where data
    /// is assembled from OFFSET_DATA / OFFSET_HOLE chunks for a read.
    pub(crate) fn read_extended_reply(
        &mut self,
        cookie: u64,
        offset: u64,
        read_len: usize,
    ) -> (u32, Vec<u8>) {
        assert!(self.extended);
        let mut data = vec![0xeeu8; read_len];
        let mut filled = 0usize;
        let mut error = 0u32;
        loop {
            let magic = read_u32(&mut self.s);
            assert_eq!(
                magic, EXT_REPLY_MAGIC,
                "with extended headers every reply must use the extended reply magic"
            );
            let flags = read_u16(&mut self.s);
            let typ = read_u16(&mut self.s);
            let c = read_u64(&mut self.s);
            let off = read_u64(&mut self.s);
            let len = read_u64(&mut self.s);
            assert_eq!(c, cookie, "reply cookie must match the request");
            assert_eq!(
                off, offset,
                "extended reply offset field must match the request offset"
            );
            assert!(len <= 64 << 20, "implausible reply payload length {len}");
            let payload = read_exact(&mut self.s, len as usize);
            match typ {
                REPLY_TYPE_NONE => assert_eq!(len, 0, "NONE chunk with payload"),
                REPLY_TYPE_OFFSET_DATA => {
                    assert!(len >= 9, "OFFSET_DATA chunk too short");
                    let o = u64::from_be_bytes(payload[..8].try_into().expect("8"));
                    let start = usize::try_from(o - offset).expect("offset");
                    let bytes = &payload[8..];
                    data[start..start + bytes.len()].copy_from_slice(bytes);
                    filled += bytes.len();
                }
                REPLY_TYPE_OFFSET_HOLE => {
                    assert_eq!(len, 12, "OFFSET_HOLE chunk length");
                    let o = u64::from_be_bytes(payload[..8].try_into().expect("8"));
                    let n = u32::from_be_bytes(payload[8..12].try_into().expect("4")) as usize;
                    let start = usize::try_from(o - offset).expect("offset");
                    data[start..start + n].fill(0);
                    filled += n;
                }
                t if t & REPLY_TYPE_ERROR_BIT != 0 => {
                    assert!(len >= 6, "error chunk too short");
                    error = u32::from_be_bytes(payload[..4].try_into().expect("4"));
                    assert_ne!(error, 0, "error chunk with error 0");
                }
                t => panic!("unexpected reply chunk type {t}"),
            }
            if flags & REPLY_FLAG_DONE != 0 {
                break;
            }
        }
        if error == 0 {
            assert_eq!(filled, read_len, "read reply did not cover the request");
        }
        (error, data)
    }

    /// WRITE; returns the NBD error (0 = success).
    pub(crate) fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) -> u32 {
        let len = data.len() as u64;
        if self.extended {
            self.send_request(CMD_FLAG_PAYLOAD_LEN, CMD_WRITE, cookie, offset, len, data);
            self.read_extended_reply(cookie, offset, 0).0
        } else {
            self.send_request(0, CMD_WRITE, cookie, offset, len, data);
            let (err, c) = self.read_simple_reply();
            assert_eq!(c, cookie, "reply cookie must match the request");
            err
        }
    }

    /// READ; Ok(data) or Err(NBD error).
    pub(crate) fn read(&mut self, cookie: u64, offset: u64, len: usize) -> Result<Vec<u8>, u32> {
        if self.extended {
            self.send_request(0, CMD_READ, cookie, offset, len as u64, &[]);
            let (err, data) = self.read_extended_reply(cookie, offset, len);
            return if err == 0 { Ok(data) } else { Err(err) };
        }
        self.send_request(0, CMD_READ, cookie, offset, len as u64, &[]);
        let (err, c) = self.read_simple_reply();
        assert_eq!(c, cookie, "reply cookie must match the request");
        if err != 0 {
            return Err(err);
        }
        Ok(read_exact(&mut self.s, len))
    }

    pub(crate) fn flush(&mut self, cookie: u64) -> u32 {
        self.send_request(0, CMD_FLUSH, cookie, 0, 0, &[]);
        if self.extended {
            self.read_extended_reply(cookie, 0, 0).0
        } else {
            let (err, c) = self.read_simple_reply();
            assert_eq!(c, cookie);
            err
        }
    }

    /// Soft disconnect.
    pub(crate) fn disconnect(mut self) {
        self.send_request(0, CMD_DISC, 0, 0, 0, &[]);
        let _ = self.s.shutdown(Shutdown::Write);
    }
}

/// Asserts the server closes the connection within `within`: reads (and
/// discards anything, e.g. an error reply) until EOF or a reset.
pub(crate) fn assert_closed_by_server(s: &mut TcpStream, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "{what}: sluice kept the connection open for {within:?}; it should disconnect"
        );
        s.set_read_timeout(Some(left.min(Duration::from_millis(500))))
            .expect("set timeout");
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return, // reset etc.: closed
        }
    }
}
