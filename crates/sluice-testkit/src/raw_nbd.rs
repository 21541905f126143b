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

mod wire;

pub use wire::*;

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
