//! Requests: the 64-byte header codec, the framing check that decides
//! whether the stream is still in sync, and [`Negotiated::validate`], which
//! turns a header and its payload into a [`Request`] whose DDT, attribute
//! list and parameters are checked once, so executors never re-check
//! protocol rules.

use thiserror::Error;

use crate::consts::*;
use crate::wire::{be16, be32, be64};

mod batch;
mod command;
mod validate;

pub use batch::Batch;
pub use command::{
    encode_query_range, Command, EncodeError, FlushScope, QueryRange, QueryRanges, Rejected,
    Request,
};

/// A request header exactly as it came off the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RequestHeader {
    pub flags: u16,
    /// Possibly an opcode this crate does not know.
    pub opcode: u16,
    /// Echoed in the reply; chosen by the client.
    pub id: u64,
    pub partition: u64,
    /// Object id, or the handle of an attached NBD export.
    pub object: u64,
    /// Master offset.
    pub offset: u64,
    /// Total bytes the request moves (or its effect length).
    pub length: u64,
    /// DDT bytes at the start of the payload.
    pub ddt_len: u32,
    /// Parameter bytes after the DDT.
    pub param_len: u32,
    /// Attribute-list bytes after the parameters.
    pub attr_len: u32,
    /// Data bytes after the attribute list.
    pub data_len: u32,
}

/// A frame that cannot be followed: the stream is out of sync (or would
/// make the server buffer more than it published) and the connection
/// must be closed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    #[error("bad request magic {0:#010x} (expected {REQUEST_MAGIC:#010x})")]
    BadMagic(u32),
    #[error("request {id} carries {len} payload bytes, more than the server's limit of {limit}")]
    PayloadTooLarge { id: u64, len: u64, limit: u32 },
}

impl RequestHeader {
    /// Decodes one header from the front of `buf` without consuming it
    /// (the server borrows payloads in place). `Ok(None)`: fewer than
    /// [`REQUEST_HEADER_LEN`] bytes.
    pub fn decode(buf: &[u8]) -> Result<Option<Self>, FrameError> {
        let Some(b) = buf.get(..REQUEST_HEADER_LEN) else {
            return Ok(None);
        };
        let magic = be32(b, 0);
        if magic != REQUEST_MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        Ok(Some(Self {
            flags: be16(b, 4),
            opcode: be16(b, 6),
            id: be64(b, 8),
            partition: be64(b, 16),
            object: be64(b, 24),
            offset: be64(b, 32),
            length: be64(b, 40),
            ddt_len: be32(b, 48),
            param_len: be32(b, 52),
            attr_len: be32(b, 56),
            data_len: be32(b, 60),
        }))
    }

    /// Appends the header.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out.extend_from_slice(&self.flags.to_be_bytes());
        out.extend_from_slice(&self.opcode.to_be_bytes());
        for v in [
            self.id,
            self.partition,
            self.object,
            self.offset,
            self.length,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        for v in [self.ddt_len, self.param_len, self.attr_len, self.data_len] {
            out.extend_from_slice(&v.to_be_bytes());
        }
    }

    /// Payload bytes that follow the header, whatever the opcode: framing
    /// never depends on knowing the command.
    pub fn payload_len(&self) -> u64 {
        u64::from(self.ddt_len)
            + u64::from(self.param_len)
            + u64::from(self.attr_len)
            + u64::from(self.data_len)
    }

    /// Checks that the payload is within the published limit, so the
    /// server can read it into its buffer.
    pub fn check_frame(&self, limits: &Limits) -> Result<u64, FrameError> {
        let len = self.payload_len();
        if len > u64::from(limits.max_payload) {
            return Err(FrameError::PayloadTooLarge {
                id: self.id,
                len,
                limit: limits.max_payload,
            });
        }
        Ok(len)
    }
}

/// Opcodes this crate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Opcode {
    Create,
    Remove,
    List,
    Read,
    Write,
    Append,
    CreateAndWrite,
    Punch,
    Flush,
    GetAttrs,
    SetAttrs,
    Query,
    ExtentRead,
    ExtentWrite,
    Batch,
    Disconnect,
    Meta,
    Truncate,
    ReplaceData,
}

impl Opcode {
    /// Every opcode, in wire order.
    pub const ALL: [Self; 19] = [
        Self::Create,
        Self::Remove,
        Self::List,
        Self::Read,
        Self::Write,
        Self::Append,
        Self::CreateAndWrite,
        Self::Punch,
        Self::Flush,
        Self::GetAttrs,
        Self::SetAttrs,
        Self::Query,
        Self::ExtentRead,
        Self::ExtentWrite,
        Self::Batch,
        Self::Disconnect,
        Self::Meta,
        Self::Truncate,
        Self::ReplaceData,
    ];

    /// Its name in docs/protocol.md, in lower case (`create_and_write`):
    /// for labels and messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Remove => "remove",
            Self::List => "list",
            Self::Read => "read",
            Self::Write => "write",
            Self::Append => "append",
            Self::CreateAndWrite => "create_and_write",
            Self::Punch => "punch",
            Self::Flush => "flush",
            Self::GetAttrs => "get_attrs",
            Self::SetAttrs => "set_attrs",
            Self::Query => "query",
            Self::ExtentRead => "extent_read",
            Self::ExtentWrite => "extent_write",
            Self::Batch => "batch",
            Self::Disconnect => "disconnect",
            Self::Meta => "meta",
            Self::Truncate => "truncate",
            Self::ReplaceData => "replace_data",
        }
    }

    /// Whether it only reads (objects, attributes, lists or an export):
    /// it changes nothing a crash could lose.
    pub const fn only_reads(self) -> bool {
        matches!(
            self,
            Self::Read | Self::List | Self::GetAttrs | Self::Query | Self::ExtentRead
        )
    }

    /// The opcode of a wire value, or `None` if unknown.
    pub const fn from_wire(v: u16) -> Option<Self> {
        Some(match v {
            OP_CREATE => Self::Create,
            OP_REMOVE => Self::Remove,
            OP_LIST => Self::List,
            OP_READ => Self::Read,
            OP_WRITE => Self::Write,
            OP_APPEND => Self::Append,
            OP_CREATE_AND_WRITE => Self::CreateAndWrite,
            OP_PUNCH => Self::Punch,
            OP_FLUSH => Self::Flush,
            OP_GET_ATTRS => Self::GetAttrs,
            OP_SET_ATTRS => Self::SetAttrs,
            OP_QUERY => Self::Query,
            OP_EXTENT_READ => Self::ExtentRead,
            OP_EXTENT_WRITE => Self::ExtentWrite,
            OP_BATCH => Self::Batch,
            OP_DISCONNECT => Self::Disconnect,
            OP_META => Self::Meta,
            OP_TRUNCATE => Self::Truncate,
            OP_REPLACE_DATA => Self::ReplaceData,
            _ => return None,
        })
    }

    /// The wire value.
    pub const fn wire(self) -> u16 {
        match self {
            Self::Create => OP_CREATE,
            Self::Remove => OP_REMOVE,
            Self::List => OP_LIST,
            Self::Read => OP_READ,
            Self::Write => OP_WRITE,
            Self::Append => OP_APPEND,
            Self::CreateAndWrite => OP_CREATE_AND_WRITE,
            Self::Punch => OP_PUNCH,
            Self::Flush => OP_FLUSH,
            Self::GetAttrs => OP_GET_ATTRS,
            Self::SetAttrs => OP_SET_ATTRS,
            Self::Query => OP_QUERY,
            Self::ExtentRead => OP_EXTENT_READ,
            Self::ExtentWrite => OP_EXTENT_WRITE,
            Self::Batch => OP_BATCH,
            Self::Disconnect => OP_DISCONNECT,
            Self::Meta => OP_META,
            Self::Truncate => OP_TRUNCATE,
            Self::ReplaceData => OP_REPLACE_DATA,
        }
    }

    /// Flags this opcode accepts besides the DDT bits.
    pub(crate) const fn extra_flags(self) -> u16 {
        match self {
            Self::Write
            | Self::Append
            | Self::CreateAndWrite
            | Self::Punch
            | Self::SetAttrs
            | Self::Remove
            | Self::Create
            | Self::ExtentWrite
            | Self::Truncate
            | Self::ReplaceData => FLAG_FUA,
            Self::List => FLAG_WITH_ATTRS,
            Self::Flush => FLAG_SCOPE_MASK,
            Self::Read | Self::ExtentRead => FLAG_SPAN_OK,
            _ => 0,
        }
    }

    /// Whether a DDT other than contiguous is allowed.
    pub(crate) const fn takes_ddt(self) -> bool {
        matches!(
            self,
            Self::Read
                | Self::Write
                | Self::CreateAndWrite
                | Self::Punch
                | Self::ExtentRead
                | Self::ExtentWrite
        )
    }

    /// Whether the data region carries the bytes the DDT describes.
    pub(crate) const fn carries_data(self) -> bool {
        matches!(
            self,
            Self::Write | Self::CreateAndWrite | Self::ExtentWrite | Self::Append
        )
    }

    /// Whether the request reads or changes an object's bytes (so it may
    /// carry attributes when `ATTRS_ON_DATA` was negotiated).
    pub(crate) const fn is_data(self) -> bool {
        matches!(
            self,
            Self::Read | Self::Write | Self::Append | Self::CreateAndWrite | Self::Punch
        )
    }
}
