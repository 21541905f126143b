//! Sans-IO implementation of sluice's native object protocol (see
//! `docs/protocol.md`): a versioned handshake with STARTTLS and partition
//! selection, 64-byte request headers whose payload carries a data
//! distribution type (contiguous, scatter/gather list or strided), typed
//! attributes riding on data commands, batch frames, and 32-byte replies.
//!
//! Nothing here touches a socket, a file or a clock: callers feed bytes in
//! and write bytes out. All integers on the wire are big-endian.

#![deny(clippy::host_endian_bytes, clippy::little_endian_bytes)]

mod attr;
mod client_handshake;
pub mod consts;
mod ddt;
mod handshake;
pub mod meta;
mod reply;
mod request;
mod wire;

pub use attr::{AttrError, AttrOp, AttrOps, AttrValue};
pub use client_handshake::{
    ClientHandshake, ClientHandshakeConfig, ClientHandshakeError, ClientStatus,
};
pub use consts::{Features, Limits};
pub use ddt::{
    encode_sgl, encode_sgl_from, encode_strided, Ddt, DdtError, DdtKind, Segment, Segments, Sgl,
    Strided,
};
pub use handshake::{
    answer, AttachedExport, HandshakeConfig, HandshakeError, HandshakeStatus, Negotiated,
    PartitionAccess, PartitionCatalog, Refusal, ServerHandshake, TlsPolicy,
};
pub use meta::{
    MetaDecodeError, MetaEntry, MetaFailure, MetaLayout, MetaPending, MetaPiece, MetaRedundancy,
    MetaReply, MetaRequest, MetaState, MetaUpdate,
};
pub use reply::{
    decode_id_list, encode_id_list, encode_page, ErrorCode, Page, PageEntry, ReplyDecodeError,
    ReplyHeader,
};
pub use request::{
    encode_query_range, Batch, Command, EncodeError, FlushScope, FrameError, Opcode, QueryRange,
    QueryRanges, Rejected, Request, RequestHeader,
};
