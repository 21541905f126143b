//! Wire constants of the native protocol (`docs/protocol.md`) and the two
//! values the handshake publishes: feature bits and limits.

/// Server greeting magic: ASCII `SLUICEOB`.
pub const GREETING_MAGIC: u64 = 0x534c_5549_4345_4f42;
/// The protocol version this crate speaks.
pub const VERSION: u16 = 1;
/// Client option magic: ASCII `SOPT`.
pub const OPTION_MAGIC: u32 = 0x534f_5054;
/// Server answer magic: ASCII `SANS`.
pub const ANSWER_MAGIC: u32 = 0x5341_4e53;
/// Request magic: ASCII `SREQ`.
pub const REQUEST_MAGIC: u32 = 0x5352_4551;
/// Reply magic: ASCII `SREP`.
pub const REPLY_MAGIC: u32 = 0x5352_4550;

/// Bytes in the server greeting.
pub const GREETING_LEN: usize = 32;
/// Bytes in an option or answer header.
pub const OPTION_HEADER_LEN: usize = 12;
/// Bytes in a request header.
pub const REQUEST_HEADER_LEN: usize = 64;
/// Bytes in a reply header.
pub const REPLY_HEADER_LEN: usize = 32;
/// Longest option data the server reads; a longer option ends the session.
pub const MAX_OPTION_LEN: u32 = 4096;
/// Longest error message or answer text (bytes of UTF-8).
pub const MAX_MESSAGE_LEN: usize = 4096;
/// Longest collection name or attribute key (bytes of UTF-8).
pub const MAX_NAME_LEN: usize = 255;

// Handshake options (client to server).
/// Version and wanted features; must come first (and again after TLS).
pub const OPT_HELLO: u16 = 1;
/// Upgrade the connection to TLS.
pub const OPT_STARTTLS: u16 = 2;
/// Attach an NBD export of the same server by name, for extent commands.
pub const OPT_ATTACH_EXPORT: u16 = 3;
/// Choose the partition; ends the handshake on success.
pub const OPT_SELECT_PARTITION: u16 = 4;
/// Leave without entering transmission.
pub const OPT_ABORT: u16 = 5;

// Opcodes.
pub const OP_CREATE: u16 = 1;
pub const OP_REMOVE: u16 = 2;
pub const OP_LIST: u16 = 3;
pub const OP_READ: u16 = 4;
pub const OP_WRITE: u16 = 5;
pub const OP_APPEND: u16 = 6;
pub const OP_CREATE_AND_WRITE: u16 = 7;
pub const OP_PUNCH: u16 = 8;
pub const OP_FLUSH: u16 = 9;
pub const OP_GET_ATTRS: u16 = 10;
pub const OP_SET_ATTRS: u16 = 11;
pub const OP_QUERY: u16 = 12;
pub const OP_EXTENT_READ: u16 = 13;
pub const OP_EXTENT_WRITE: u16 = 14;
pub const OP_BATCH: u16 = 15;
pub const OP_DISCONNECT: u16 = 16;
/// A call of the metadata service of striped objects (`meta` module).
pub const OP_META: u16 = 17;
/// Set an object's length (`length u64` in the parameters).
pub const OP_TRUNCATE: u16 = 18;
/// Replace an object's bytes and length with another object's, which
/// goes (`source u64` in the parameters; needs `REPLACE_DATA`).
pub const OP_REPLACE_DATA: u16 = 19;

// Request flags.
/// Bits 0-1: the data distribution type.
pub const FLAG_DDT_MASK: u16 = 0x0003;
/// Durable before the reply (force unit access).
pub const FLAG_FUA: u16 = 0x0004;
/// LIST: return each entry's attributes.
pub const FLAG_WITH_ATTRS: u16 = 0x0008;
/// FLUSH: bits 4-5 select the scope (0 object, 1 collection, 2 partition,
/// 3 attached export: needs [`Features::EXPORT_FLUSH`]).
pub const FLAG_SCOPE_MASK: u16 = 0x0030;
/// FLUSH scope shift.
pub const FLAG_SCOPE_SHIFT: u16 = 4;
/// READ and EXTENT_READ of a scatter/gather or strided list: the client
/// accepts a span reply (needs `SPAN_READS`).
pub const FLAG_SPAN_OK: u16 = 0x0040;

// Reply flags.
/// The body is the span of the request's segments, holes included, not
/// the segments' bytes in list order.
pub const REPLY_FLAG_SPAN: u16 = 0x0001;

/// DDT values of the flag bits.
pub const DDT_CONTIGUOUS: u16 = 0;
pub const DDT_SGL: u16 = 1;
pub const DDT_STRIDED: u16 = 2;

/// Bytes in a strided DDT: stride u64, length u64, count u32.
pub const STRIDED_DDT_LEN: usize = 20;
/// Bytes in one SGL entry: offset u64, length u64.
pub const SGL_ENTRY_LEN: usize = 16;

// Attribute lists.
/// Entry kind: read a key (request only).
pub const ATTR_GET: u8 = 1;
/// Entry kind: a key with a value (a set in a request, a value in a reply).
pub const ATTR_SET: u8 = 2;
/// Entry kind: remove a key (request), or the key has no value (reply).
pub const ATTR_REMOVE: u8 = 3;

/// Value type tags.
pub const TYPE_INTEGER: u8 = 0;
pub const TYPE_TEXT: u8 = 1;
pub const TYPE_BYTES: u8 = 2;

/// Feature bits of the greeting and of HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Features(pub u32);

impl Features {
    /// The server offers STARTTLS (greeting only).
    pub const TLS_AVAILABLE: Self = Self(1 << 0);
    /// The server requires TLS before SELECT_PARTITION (greeting only).
    pub const TLS_REQUIRED: Self = Self(1 << 1);
    /// Batch frames (negotiated).
    pub const BATCH: Self = Self(1 << 2);
    /// Attribute lists on data commands (negotiated).
    pub const ATTRS_ON_DATA: Self = Self(1 << 3);
    /// Span replies to list reads that ask for one (negotiated).
    pub const SPAN_READS: Self = Self(1 << 4);
    /// SGL DDTs with a non-zero master offset, their entries' offsets
    /// relative to it (negotiated; without it an SGL's master offset is 0).
    pub const SGL_MASTER: Self = Self(1 << 5);
    /// REPLACE_DATA: an object's bytes replaced by another's as one
    /// change (negotiated).
    pub const REPLACE_DATA: Self = Self(1 << 6);
    /// FLUSH of an attached export (scope 3): its device made durable
    /// (negotiated).
    pub const EXPORT_FLUSH: Self = Self(1 << 7);
    /// Bits a client may ask for in HELLO.
    pub const NEGOTIABLE: Self = Self(
        Self::BATCH.0
            | Self::ATTRS_ON_DATA.0
            | Self::SPAN_READS.0
            | Self::SGL_MASTER.0
            | Self::REPLACE_DATA.0
            | Self::EXPORT_FLUSH.0,
    );
    /// Bits only the greeting carries.
    pub const SERVER_ONLY: Self = Self(Self::TLS_AVAILABLE.0 | Self::TLS_REQUIRED.0);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
    /// Bits set in both.
    pub const fn intersect(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }
    /// Bits set here and not in `other`.
    pub const fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }
    /// Bits set in either.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }
}

/// Limits the server publishes in its greeting; requests beyond them are
/// rejected (or, for a payload, end the connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Most segments one SGL or strided DDT may describe (and most objects
    /// one CREATE may make, and most entries one LIST or QUERY page holds).
    pub max_segments: u32,
    /// Most payload bytes after one request header (batch frames
    /// included), and most data bytes one request moves.
    pub max_payload: u32,
    /// Most members in one batch frame.
    pub max_batch: u32,
    /// Most bytes in one attribute value.
    pub max_attr_size: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_segments: 4096,
            max_payload: 32 << 20,
            max_batch: 256,
            max_attr_size: 64 << 10,
        }
    }
}
