//! A raw NBD client for tests: every byte it sends and every field it
//! reads is laid out here by hand from the NBD protocol document
//! (NetworkBlockDevice/nbd `doc/proto.md`), never through sluice's own
//! codec, so the server is tested against an independent reading of the
//! spec. It can misbehave on purpose (partial payloads, garbage headers,
//! options out of order) and exposes its stream for wire-level checks.
//!
//! It panics with a message on anything unexpected: it is test code.
//!
//! Requests are remembered by cookie, so [`RawClient::reply`] places read
//! data by offset, fills holes, checks that a successful read covered the
//! whole range, and copes with replies (and, for structured replies,
//! chunks of different replies) arriving in any order.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

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

/// How the handshake ends.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Finish {
    /// NBD_OPT_GO.
    Go,
    /// NBD_OPT_EXPORT_NAME (the oldest way).
    ExportName,
}

/// Which headers and replies the session negotiates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Replies {
    /// Compact headers, simple replies only.
    Simple,
    /// Compact headers, NBD_OPT_STRUCTURED_REPLY.
    Structured,
    /// NBD_OPT_EXTENDED_HEADERS: 64-bit request and reply headers.
    Extended,
}

/// One reply chunk as it came off the wire (structured or extended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    /// The offset field of an extended reply header; `None` for a
    /// structured one.
    pub offset: Option<u64>,
    pub payload: Vec<u8>,
}

impl Chunk {
    /// The DONE flag is set.
    pub fn done(&self) -> bool {
        self.flags & REPLY_FLAG_DONE != 0
    }
}

/// A request sent and not yet answered.
#[derive(Debug)]
struct Pending {
    kind: u16,
    offset: u64,
    length: u64,
    /// Read data assembled so far (reads only; sized at the first chunk).
    data: Vec<u8>,
    filled: usize,
    error: u32,
}

/// An NBD session over any byte stream (TCP, Unix, TLS).
pub struct RawClient<S = TcpStream> {
    /// The stream, for tests that write or read bytes themselves.
    pub s: S,
    /// The handshake flags from the greeting.
    pub handshake_flags: u16,
    /// Export size and transmission flags, once the handshake finished.
    pub size: u64,
    pub flags: u16,
    /// What was negotiated so far.
    pub replies: Replies,
    pending: HashMap<u64, Pending>,
}

impl RawClient<TcpStream> {
    /// TCP connection with 20 s timeouts and no Nagle delay.
    pub fn tcp(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("set read timeout");
        s.set_write_timeout(Some(Duration::from_secs(20)))
            .expect("set write timeout");
        s.set_nodelay(true).expect("set nodelay");
        s
    }

    /// Connects and negotiates structured replies and the default export.
    pub fn connect(addr: SocketAddr) -> Self {
        Self::open(Self::tcp(addr), "", Finish::Go, Replies::Structured)
    }
}

impl<S: Read + Write> RawClient<S> {
    /// Reads the greeting and answers with fixed newstyle (and no zeroes
    /// when the server offers it); the session is in option haggling.
    pub fn greet(mut s: S) -> Self {
        let handshake_flags = read_greeting(&mut s);
        let mut cflags = FLAG_C_FIXED_NEWSTYLE;
        if handshake_flags & FLAG_NO_ZEROES != 0 {
            cflags |= FLAG_C_NO_ZEROES;
        }
        s.write_all(&cflags.to_be_bytes())
            .expect("send client flags");
        Self::resume(s, handshake_flags)
    }

    /// A client over `s` in option haggling after a greeting with
    /// `handshake_flags` (for STARTTLS, which replaces the stream).
    pub fn resume(s: S, handshake_flags: u16) -> Self {
        Self {
            s,
            handshake_flags,
            size: 0,
            flags: 0,
            replies: Replies::Simple,
            pending: HashMap::new(),
        }
    }

    /// The whole handshake: greeting, the options `replies` needs (each
    /// must be acknowledged), then `finish` for `export`.
    pub fn open(s: S, export: &str, finish: Finish, replies: Replies) -> Self {
        let mut c = Self::greet(s);
        match replies {
            Replies::Simple => {}
            Replies::Structured => c.negotiate(OPT_STRUCTURED_REPLY, Replies::Structured),
            Replies::Extended => c.negotiate(OPT_EXTENDED_HEADERS, Replies::Extended),
        }
        match finish {
            Finish::Go => {
                c.go(export)
                    .unwrap_or_else(|t| panic!("NBD_OPT_GO {export:?} failed with {t:#x}"));
            }
            Finish::ExportName => c.export_name(export),
        }
        c
    }

    fn negotiate(&mut self, option: u32, replies: Replies) {
        let got = self.option_replies(option, &[]);
        assert_eq!(
            got,
            vec![(REP_ACK, vec![])],
            "option {option} must be acknowledged"
        );
        self.replies = replies;
    }

    /// Sends one option request.
    pub fn option(&mut self, option: u32, data: &[u8]) {
        send_option(&mut self.s, option, data);
    }

    /// One option reply: (option, reply type, data, its raw bytes).
    pub fn option_reply(&mut self) -> (u32, u32, Vec<u8>, Vec<u8>) {
        let (option, kind, data) = read_option_reply(&mut self.s);
        let raw = option_reply_bytes(option, kind, &data);
        (option, kind, data, raw)
    }

    /// Sends `option` and reads all its replies up to the ACK or an
    /// error: (reply type, data) each.
    pub fn option_replies(&mut self, option: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
        self.option(option, data);
        let mut v = Vec::new();
        loop {
            let (o, kind, data) = read_option_reply(&mut self.s);
            assert_eq!(o, option, "reply to a different option");
            let last = kind == REP_ACK || kind & REP_ERR_BIT != 0;
            v.push((kind, data));
            if last {
                return v;
            }
        }
    }

    /// The export names NBD_OPT_LIST returns.
    pub fn list(&mut self) -> Vec<String> {
        let mut names = Vec::new();
        for (kind, data) in self.option_replies(OPT_LIST, &[]) {
            if kind == REP_SERVER {
                let n = be32(&data) as usize;
                names.push(String::from_utf8(data[4..4 + n].to_vec()).expect("UTF-8 name"));
            } else {
                assert_eq!(kind, REP_ACK, "NBD_OPT_LIST failed");
            }
        }
        names
    }

    /// NBD_OPT_STRUCTURED_REPLY (must be acknowledged).
    pub fn structured_replies(&mut self) {
        self.negotiate(OPT_STRUCTURED_REPLY, Replies::Structured);
    }

    /// NBD_OPT_GO: Ok(size) with the session in transmission, or
    /// Err(error reply type).
    pub fn go(&mut self, export: &str) -> Result<u64, u32> {
        let (size, flags) = opt_go(&mut self.s, export)?;
        assert_ne!(flags & FLAG_HAS_FLAGS, 0, "NBD_FLAG_HAS_FLAGS must be set");
        self.size = size;
        self.flags = flags;
        Ok(size)
    }

    /// NBD_OPT_EXPORT_NAME: the server answers with size and flags (and
    /// 124 zeroes unless both sides chose no zeroes).
    pub fn export_name(&mut self, export: &str) {
        self.option(OPT_EXPORT_NAME, export.as_bytes());
        self.size = read_u64(&mut self.s);
        self.flags = read_u16(&mut self.s);
        if self.handshake_flags & FLAG_NO_ZEROES == 0 {
            read_exact(&mut self.s, 124);
        }
        assert_ne!(
            self.flags & FLAG_HAS_FLAGS,
            0,
            "NBD_FLAG_HAS_FLAGS must be set"
        );
    }

    /// The bytes of a request header in the negotiated style.
    pub fn header(&self, flags: u16, kind: u16, cookie: u64, offset: u64, length: u64) -> Vec<u8> {
        if self.replies == Replies::Extended {
            extended_header(flags, kind, cookie, offset, length)
        } else {
            let length = u32::try_from(length).expect("compact headers carry 32-bit lengths");
            compact_header(flags, kind, cookie, offset, length)
        }
    }

    /// Sends a request header, then the first bytes of its payload
    /// (`first`; the rest, if any, is up to the caller), and remembers the
    /// request for [`reply`](Self::reply).
    pub fn send_partial(
        &mut self,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        length: u64,
        first: &[u8],
    ) {
        let mut m = self.header(flags, kind, cookie, offset, length);
        m.extend_from_slice(first);
        self.s.write_all(&m).expect("send request");
        self.expect_reply(kind, cookie, offset, length);
    }

    /// Sends one request with its flags and whole payload.
    pub fn send_request(
        &mut self,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        length: u64,
        payload: &[u8],
    ) {
        self.send_partial(flags, kind, cookie, offset, length, payload);
    }

    /// Sends requests without payloads (reads, flushes, ...) and without
    /// flags, `(kind, cookie, offset, length)` each, in one write: the
    /// server finds them all in one receive.
    pub fn send_many(&mut self, requests: &[(u16, u64, u64, u64)]) {
        let mut m = Vec::new();
        for &(kind, cookie, offset, length) in requests {
            m.extend_from_slice(&self.header(0, kind, cookie, offset, length));
            self.expect_reply(kind, cookie, offset, length);
        }
        self.s.write_all(&m).expect("send requests");
    }

    /// Records a request sent, whose reply [`reply`](Self::reply) matches.
    fn expect_reply(&mut self, kind: u16, cookie: u64, offset: u64, length: u64) {
        self.pending.insert(
            cookie,
            Pending {
                kind,
                offset,
                length,
                data: Vec::new(),
                filled: 0,
                error: 0,
            },
        );
    }

    /// Sends one request without flags (the payload's length is not
    /// checked against `length`: tests lie on purpose).
    pub fn send(&mut self, kind: u16, cookie: u64, offset: u64, length: u64, payload: &[u8]) {
        self.send_partial(0, kind, cookie, offset, length, payload);
    }

    /// Sends a write's header and the first `first` bytes of its payload,
    /// waits 30 ms, then sends the rest: the server sees the header while
    /// the payload is still arriving.
    pub fn send_write_in_two(&mut self, cookie: u64, offset: u64, data: &[u8], first: usize) {
        let len = data.len() as u64;
        self.send_partial(0, CMD_WRITE, cookie, offset, len, &data[..first]);
        std::thread::sleep(Duration::from_millis(30));
        self.s.write_all(&data[first..]).expect("send payload");
    }

    /// Reads one simple reply header: (error, cookie). A read's payload
    /// is left unread.
    pub fn read_simple_reply(&mut self) -> (u32, u64) {
        let magic = read_u32(&mut self.s);
        assert_eq!(magic, SIMPLE_REPLY_MAGIC, "expected a simple reply");
        let err = read_u32(&mut self.s);
        let cookie = read_u64(&mut self.s);
        (err, cookie)
    }

    /// Reads one chunk header and payload; `magic` is its first four
    /// bytes when the caller has read them already.
    pub fn chunk_after(&mut self, magic: u32) -> Chunk {
        let flags = read_u16(&mut self.s);
        let kind = read_u16(&mut self.s);
        let cookie = read_u64(&mut self.s);
        let (offset, len) = match magic {
            STRUCTURED_REPLY_MAGIC => (None, u64::from(read_u32(&mut self.s))),
            EXTENDED_REPLY_MAGIC => (Some(read_u64(&mut self.s)), read_u64(&mut self.s)),
            other => panic!("bad reply chunk magic {other:#x}"),
        };
        assert!(len <= 64 << 20, "implausible reply payload length {len}");
        let payload = read_exact(&mut self.s, len as usize);
        Chunk {
            flags,
            kind,
            cookie,
            offset,
            payload,
        }
    }

    /// Reads one structured or extended reply chunk.
    pub fn chunk(&mut self) -> Chunk {
        let magic = read_u32(&mut self.s);
        self.chunk_after(magic)
    }

    /// Reads replies until one request is complete and returns it:
    /// (cookie, error, read data). Read data is placed by offset (holes
    /// as zeroes) and a successful read must cover its whole range;
    /// anything but a read, and any failed request, gives empty data.
    pub fn reply(&mut self) -> (u64, u32, Vec<u8>) {
        loop {
            let magic = read_u32(&mut self.s);
            if magic == SIMPLE_REPLY_MAGIC {
                let error = read_u32(&mut self.s);
                let cookie = read_u64(&mut self.s);
                let p = self.take(cookie);
                assert!(
                    self.replies == Replies::Simple
                        || (self.replies == Replies::Structured && p.kind != CMD_READ),
                    "a simple reply to command {} after {:?} replies were negotiated",
                    p.kind,
                    self.replies
                );
                if p.kind == CMD_READ && error == 0 {
                    let len = usize::try_from(p.length).expect("read length fits in memory");
                    let data = read_exact(&mut self.s, len);
                    return (cookie, 0, data);
                }
                return (cookie, error, Vec::new());
            }
            let chunk = self.chunk_after(magic);
            let expected = match magic {
                EXTENDED_REPLY_MAGIC => Replies::Extended,
                _ => Replies::Structured,
            };
            assert_eq!(
                self.replies, expected,
                "reply magic {magic:#x} does not match the negotiated replies"
            );
            let done = chunk.done();
            let cookie = chunk.cookie;
            let p = self
                .pending
                .get_mut(&cookie)
                .unwrap_or_else(|| panic!("reply for cookie {cookie}, which is not in flight"));
            if let Some(off) = chunk.offset {
                assert_eq!(
                    off, p.offset,
                    "extended reply offset must echo the request's"
                );
            }
            place(p, &chunk);
            if done {
                let p = self.take(cookie);
                if p.error != 0 {
                    return (cookie, p.error, Vec::new());
                }
                if p.kind != CMD_READ {
                    return (cookie, 0, Vec::new());
                }
                assert_eq!(
                    p.filled as u64, p.length,
                    "read reply {cookie} did not cover the request"
                );
                let mut data = p.data;
                data.resize(p.filled, 0);
                return (cookie, 0, data);
            }
        }
    }

    fn take(&mut self, cookie: u64) -> Pending {
        self.pending
            .remove(&cookie)
            .unwrap_or_else(|| panic!("reply for cookie {cookie}, which is not in flight"))
    }

    /// Replies to requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// One request, its reply: the error (0 = success) and read data.
    fn round_trip(
        &mut self,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        length: u64,
        payload: &[u8],
    ) -> (u32, Vec<u8>) {
        self.send_request(flags, kind, cookie, offset, length, payload);
        let (c, err, data) = self.reply();
        assert_eq!(c, cookie, "reply cookie must match the request");
        (err, data)
    }

    /// WRITE; returns the NBD error (0 = success).
    pub fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) -> u32 {
        let flags = if self.replies == Replies::Extended {
            CMD_FLAG_PAYLOAD_LEN
        } else {
            0
        };
        let len = data.len() as u64;
        self.round_trip(flags, CMD_WRITE, cookie, offset, len, data)
            .0
    }

    /// READ; Ok(data) or Err(NBD error).
    pub fn read(&mut self, cookie: u64, offset: u64, len: usize) -> Result<Vec<u8>, u32> {
        match self.round_trip(0, CMD_READ, cookie, offset, len as u64, &[]) {
            (0, data) => Ok(data),
            (err, _) => Err(err),
        }
    }

    /// FLUSH; returns the NBD error.
    pub fn flush(&mut self, cookie: u64) -> u32 {
        self.round_trip(0, CMD_FLUSH, cookie, 0, 0, &[]).0
    }

    /// Soft disconnect: NBD_CMD_DISC, then the write half closes.
    pub fn disconnect(mut self)
    where
        S: ShutdownWrite,
    {
        let m = self.header(0, CMD_DISC, 0, 0, 0);
        self.s.write_all(&m).expect("send NBD_CMD_DISC");
        self.s.shutdown_write();
    }
}

/// A stream whose write half can be closed.
pub trait ShutdownWrite {
    fn shutdown_write(&mut self);
}

impl ShutdownWrite for TcpStream {
    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl ShutdownWrite for std::os::unix::net::UnixStream {
    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Adds one chunk to the request it answers.
fn place(p: &mut Pending, chunk: &Chunk) {
    let payload = &chunk.payload;
    match chunk.kind {
        REPLY_TYPE_NONE => assert!(payload.is_empty(), "NONE chunk with a payload"),
        REPLY_TYPE_OFFSET_DATA | REPLY_TYPE_OFFSET_HOLE => {
            assert_eq!(
                p.kind, CMD_READ,
                "read data in a reply to command {}",
                p.kind
            );
            assert!(payload.len() >= 8, "offset chunk too short");
            let at = be64(payload)
                .checked_sub(p.offset)
                .expect("chunk before the request's offset");
            let at = usize::try_from(at).expect("offset");
            let n = if chunk.kind == REPLY_TYPE_OFFSET_DATA {
                assert!(payload.len() > 8, "OFFSET_DATA chunk without data");
                payload.len() - 8
            } else {
                assert_eq!(payload.len(), 12, "OFFSET_HOLE chunk length");
                be32(&payload[8..]) as usize
            };
            assert!(
                (at + n) as u64 <= p.length,
                "chunk beyond the end of the requested range"
            );
            if p.data.is_empty() {
                p.data = vec![0u8; usize::try_from(p.length).expect("read length fits in memory")];
            }
            if chunk.kind == REPLY_TYPE_OFFSET_DATA {
                p.data[at..at + n].copy_from_slice(&payload[8..]);
            } else {
                p.data[at..at + n].fill(0);
            }
            p.filled += n;
        }
        t if t & REPLY_TYPE_ERROR_BIT != 0 => {
            assert!(payload.len() >= 6, "error chunk too short");
            let message = usize::from(be16(&payload[4..]));
            assert!(
                6 + message <= payload.len(),
                "error message longer than its chunk"
            );
            p.error = be32(payload);
            assert_ne!(p.error, 0, "error chunk with error 0");
        }
        _ => {}
    }
}

/// Asserts the server closes the connection within `within`: reads (and
/// discards anything, e.g. an error reply) until end of stream or a reset.
pub fn assert_closed_by_server(s: &mut TcpStream, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "{what}: the server kept the connection open for {within:?}; it should disconnect"
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
