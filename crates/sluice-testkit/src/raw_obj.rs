//! A raw client of sluice's native object protocol for tests: frames
//! built with `sluice-obj-proto`'s encoders, sent as the test says, with
//! nothing of the client library in between. It can misbehave on
//! purpose (truncated frames, bad regions, payloads shorter or longer
//! than their DDT, vanishing mid-payload) and exposes its stream.
//!
//! It panics with a message on anything unexpected: it is test code.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use sluice_obj_proto::consts::*;
use sluice_obj_proto::{
    encode_sgl, encode_strided, AttrOp, AttrOps, ErrorCode, Features, Limits, ReplyHeader,
    RequestHeader, Segment,
};

/// Reads exactly `n` bytes.
fn read_exact<S: Read>(s: &mut S, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("reading {n} bytes from the server: {e}"));
    b
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// One request: header fields and its four payload regions. The
/// header's region lengths come from the regions unless overridden.
#[derive(Debug, Clone, Default)]
pub struct Req {
    pub opcode: u16,
    pub flags: u16,
    pub id: u64,
    pub partition: u64,
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub ddt: Vec<u8>,
    pub params: Vec<u8>,
    pub attrs: Vec<u8>,
    pub data: Vec<u8>,
    /// Header `data_len` to claim instead of `data.len()` (lies on purpose).
    pub data_len: Option<u32>,
}

impl Req {
    /// A request of `opcode` with `id` (partition filled in by the client).
    pub fn new(opcode: u16, id: u64) -> Self {
        Self {
            opcode,
            id,
            ..Self::default()
        }
    }

    pub fn object(mut self, object: u64) -> Self {
        self.object = object;
        self
    }

    pub fn flags(mut self, flags: u16) -> Self {
        self.flags |= flags;
        self
    }

    /// A contiguous range.
    pub fn range(mut self, offset: u64, length: u64) -> Self {
        self.offset = offset;
        self.length = length;
        self
    }

    /// An SGL DDT of `(offset, length)` pairs (header length set to
    /// their total).
    pub fn sgl(mut self, segments: &[(u64, u64)]) -> Self {
        let segs: Vec<Segment> = segments
            .iter()
            .map(|&(offset, length)| Segment { offset, length })
            .collect();
        self.ddt.clear();
        encode_sgl(&segs, &mut self.ddt);
        self.flags = (self.flags & !FLAG_DDT_MASK) | DDT_SGL;
        self.offset = 0;
        self.length = segments.iter().map(|s| s.1).fold(0, u64::wrapping_add);
        self
    }

    /// The header's master offset (after [`sgl`](Self::sgl), the SGL's
    /// entries become relative to it).
    pub fn master(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// A strided DDT from `offset` (header length set to the total).
    pub fn strided(mut self, offset: u64, stride: u64, length: u64, count: u32) -> Self {
        self.ddt.clear();
        encode_strided(stride, length, count, &mut self.ddt);
        self.flags = (self.flags & !FLAG_DDT_MASK) | DDT_STRIDED;
        self.offset = offset;
        self.length = length.wrapping_mul(u64::from(count));
        self
    }

    pub fn data(mut self, data: &[u8]) -> Self {
        self.data = data.to_vec();
        self
    }

    pub fn params(mut self, params: &[u8]) -> Self {
        self.params = params.to_vec();
        self
    }

    /// An attribute list of `ops`.
    pub fn attrs(mut self, ops: &[AttrOp<'_>]) -> Self {
        self.attrs.clear();
        AttrOps::encode(ops, &mut self.attrs);
        self
    }

    /// The header as it will be sent.
    pub fn header(&self) -> RequestHeader {
        RequestHeader {
            flags: self.flags,
            opcode: self.opcode,
            id: self.id,
            partition: self.partition,
            object: self.object,
            offset: self.offset,
            length: self.length,
            ddt_len: self.ddt.len() as u32,
            param_len: self.params.len() as u32,
            attr_len: self.attrs.len() as u32,
            data_len: self.data_len.unwrap_or(self.data.len() as u32),
        }
    }

    /// Header and payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(REQUEST_HEADER_LEN + self.payload_len());
        self.header().encode(&mut out);
        out.extend_from_slice(&self.ddt);
        out.extend_from_slice(&self.params);
        out.extend_from_slice(&self.attrs);
        out.extend_from_slice(&self.data);
        out
    }

    fn payload_len(&self) -> usize {
        self.ddt.len() + self.params.len() + self.attrs.len() + self.data.len()
    }
}

/// `name` parameter: length byte, then the bytes.
pub fn name_param(name: &str) -> Vec<u8> {
    let mut p = vec![name.len() as u8];
    p.extend_from_slice(name.as_bytes());
    p
}

/// CREATE parameters.
pub fn create_params(count: u32, collection: &str) -> Vec<u8> {
    let mut p = count.to_be_bytes().to_vec();
    p.extend(name_param(collection));
    p
}

/// LIST / QUERY page parameters (QUERY appends its ranges).
pub fn page_params(cursor: u64, max: u32, collection: &str) -> Vec<u8> {
    let mut p = cursor.to_be_bytes().to_vec();
    p.extend_from_slice(&max.to_be_bytes());
    p.extend(name_param(collection));
    p
}

/// A reply as it came off the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub id: u64,
    pub status: Option<ErrorCode>,
    pub real: u64,
    pub attrs: Vec<u8>,
    pub body: Vec<u8>,
    /// The body is the span of the request's segments (a span reply).
    pub span: bool,
}

impl Reply {
    /// Panics unless the reply is a success.
    pub fn ok(self) -> Self {
        assert!(
            self.status.is_none(),
            "request {} failed with {:?}: {}",
            self.id,
            self.status,
            String::from_utf8_lossy(&self.body)
        );
        self
    }

    /// Panics unless the reply is the error `code`; returns its message.
    pub fn err(self, code: ErrorCode) -> String {
        let msg = String::from_utf8_lossy(&self.body).into_owned();
        assert_eq!(
            self.status,
            Some(code),
            "request {}: expected {code:?}, got {:?} ({msg})",
            self.id,
            self.status
        );
        msg
    }

    /// The reply's attribute list.
    pub fn attr_ops(&self) -> Vec<AttrOp<'_>> {
        AttrOps::parse(&self.attrs, u32::MAX)
            .expect("reply attribute list parses")
            .iter()
            .collect()
    }
}

/// The raw client over any byte stream (TCP, or TLS over it).
pub struct RawObjClient<S> {
    pub s: S,
    /// From the greeting.
    pub features: Features,
    pub limits: Limits,
    /// The partition requests carry (set by [`select`](Self::select)).
    pub partition: u64,
}

impl RawObjClient<TcpStream> {
    /// A TCP connection to `addr` with a 10 s read timeout.
    pub fn tcp(addr: SocketAddr) -> TcpStream {
        let s = TcpStream::connect(addr).expect("connect to the object server");
        s.set_nodelay(true).expect("set TCP_NODELAY");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("set read timeout");
        s
    }

    /// Connected and past the greeting.
    pub fn connect(addr: SocketAddr) -> Self {
        Self::greet(Self::tcp(addr))
    }

    /// Greeting, HELLO with `features`, SELECT_PARTITION `partition`:
    /// ready for requests.
    pub fn open(addr: SocketAddr, features: Features, partition: u64) -> Self {
        let mut c = Self::connect(addr);
        c.hello(features).expect("HELLO accepted");
        c.select(partition).expect("partition selected");
        c
    }
}

impl<S: Read + Write> RawObjClient<S> {
    /// Reads the greeting from `s`.
    pub fn greet(mut s: S) -> Self {
        let g = read_exact(&mut s, GREETING_LEN);
        assert_eq!(be64(&g), GREETING_MAGIC, "greeting magic");
        assert_eq!(be16(&g[8..]), VERSION, "greeting version");
        Self {
            features: Features(be32(&g[12..])),
            limits: Limits {
                max_segments: be32(&g[16..]),
                max_payload: be32(&g[20..]),
                max_batch: be32(&g[24..]),
                max_attr_size: be32(&g[28..]),
            },
            s,
            partition: 0,
        }
    }

    /// Continues on another stream (after STARTTLS) with what was learnt.
    pub fn resume<T: Read + Write>(self, s: T) -> RawObjClient<T> {
        RawObjClient {
            s,
            features: self.features,
            limits: self.limits,
            partition: self.partition,
        }
    }

    /// Sends one option frame.
    pub fn option(&mut self, option: u16, data: &[u8]) {
        let mut f = OPTION_MAGIC.to_be_bytes().to_vec();
        f.extend_from_slice(&option.to_be_bytes());
        f.extend_from_slice(&0u16.to_be_bytes());
        f.extend_from_slice(&(data.len() as u32).to_be_bytes());
        f.extend_from_slice(data);
        self.s.write_all(&f).expect("send option");
    }

    /// Reads one answer: (option, status, data).
    pub fn answer(&mut self) -> (u16, u16, Vec<u8>) {
        let h = read_exact(&mut self.s, OPTION_HEADER_LEN);
        assert_eq!(be32(&h), ANSWER_MAGIC, "answer magic");
        let len = be32(&h[8..]) as usize;
        (be16(&h[4..]), be16(&h[6..]), read_exact(&mut self.s, len))
    }

    /// Sends an option and reads its answer: `Ok(data)` or
    /// `Err((status, message))`.
    pub fn negotiate(&mut self, option: u16, data: &[u8]) -> Result<Vec<u8>, (u16, String)> {
        self.option(option, data);
        let (o, status, data) = self.answer();
        assert_eq!(o, option, "the answer names its option");
        if status == 0 {
            Ok(data)
        } else {
            Err((status, String::from_utf8_lossy(&data).into_owned()))
        }
    }

    /// HELLO for version 1 with `features`.
    pub fn hello(&mut self, features: Features) -> Result<(), (u16, String)> {
        let mut d = VERSION.to_be_bytes().to_vec();
        d.extend_from_slice(&0u16.to_be_bytes());
        d.extend_from_slice(&features.0.to_be_bytes());
        self.negotiate(OPT_HELLO, &d).map(|_| ())
    }

    /// ATTACH_EXPORT: (handle, size, read-only).
    pub fn attach(&mut self, name: &str) -> Result<(u64, u64, bool), (u16, String)> {
        let d = self.negotiate(OPT_ATTACH_EXPORT, name.as_bytes())?;
        assert_eq!(d.len(), 18, "ATTACH_EXPORT answer is 18 bytes");
        Ok((be64(&d), be64(&d[8..]), be16(&d[16..]) & 1 == 1))
    }

    /// SELECT_PARTITION; requests carry `partition` from now on.
    pub fn select(&mut self, partition: u64) -> Result<(), (u16, String)> {
        self.negotiate(OPT_SELECT_PARTITION, &partition.to_be_bytes())?;
        self.partition = partition;
        Ok(())
    }

    /// Sends a request (its partition field is the selected one unless
    /// the request set another).
    pub fn send(&mut self, req: &Req) {
        let bytes = self.encode(req);
        self.s.write_all(&bytes).expect("send request");
    }

    /// The bytes `send` would send.
    pub fn encode(&self, req: &Req) -> Vec<u8> {
        let mut req = req.clone();
        if req.partition == 0 {
            req.partition = self.partition;
        }
        req.encode()
    }

    /// Reads one reply.
    pub fn reply(&mut self) -> Reply {
        let h = read_exact(&mut self.s, REPLY_HEADER_LEN);
        let h = ReplyHeader::decode(&h)
            .unwrap_or_else(|e| panic!("bad reply header: {e}"))
            .expect("a whole header");
        Reply {
            id: h.id,
            status: h.status,
            real: h.real_bytes,
            attrs: read_exact(&mut self.s, h.attr_len as usize),
            body: read_exact(&mut self.s, h.body_len as usize),
            span: h.span,
        }
    }

    /// Sends a request and reads its reply (which must carry its id).
    pub fn call(&mut self, req: &Req) -> Reply {
        self.send(req);
        let r = self.reply();
        assert_eq!(r.id, req.id, "reply to request {}", req.id);
        r
    }

    /// CREATE `count` objects (in `collection` unless empty).
    pub fn create(&mut self, count: u32, collection: &str) -> Vec<u64> {
        let r = self
            .call(&Req::new(OP_CREATE, 1).params(&create_params(count, collection)))
            .ok();
        sluice_obj_proto::decode_id_list(&r.body).expect("CREATE body is an id list")
    }

    /// WRITE `data` at `offset` of `object` (must succeed).
    pub fn write(&mut self, object: u64, offset: u64, data: &[u8]) {
        self.call(
            &Req::new(OP_WRITE, 2)
                .object(object)
                .range(offset, data.len() as u64)
                .data(data),
        )
        .ok();
    }

    /// READ `len` bytes at `offset` of `object`: (data, real bytes).
    pub fn read(&mut self, object: u64, offset: u64, len: u64) -> (Vec<u8>, u64) {
        let r = self
            .call(&Req::new(OP_READ, 3).object(object).range(offset, len))
            .ok();
        (r.body, r.real)
    }

    /// FLUSH the whole partition (must succeed).
    pub fn flush(&mut self) {
        self.call(&Req::new(OP_FLUSH, 4).flags(2 << FLAG_SCOPE_SHIFT))
            .ok();
    }
}
