//! Sans-IO implementation of the NBD protocol (fixed newstyle handshake,
//! transmission requests and simple, structured and extended replies).
//!
//! Nothing here touches a socket: callers feed bytes in and write bytes
//! out. All integers on the wire are big-endian.

pub mod client;
mod client_handshake;
mod client_reply;
mod client_request;
pub mod consts;
mod errno;
mod handshake;
mod reply;
mod request;

pub use client_handshake::{
    ClientHandshake, ClientHandshakeConfig, ClientHandshakeError, ClientStatus, ExportDescription,
};
pub use client_reply::{
    CookieTable, Decoded, Finished, ReplyDecoder, ReplyError, ReplyEvent, ServerError, Step,
    MAX_REPLY_CHUNK,
};
pub use client_request::{ClientRequest, Op, RequestEncoder, RequestError, Sent, Transmission};
pub use errno::NbdErrno;
pub use handshake::{
    BlockSizes, ExportAccess, ExportCatalog, ExportInfo, HandshakeConfig, HandshakeError,
    HandshakeStatus, Negotiated, Refusal, ServerHandshake, TlsPolicy, BASE_ALLOCATION_ID,
};
pub use reply::{
    encode_block_status, encode_chunk_header, encode_error, encode_error_offset, encode_hole_chunk,
    encode_ok, encode_read_data_header, read_data_header_len, Extent, ReplyStyle,
};
pub use request::{
    Command, HeaderStyle, RejectedRequest, RequestDecodeError, RequestHeader, TransmissionParams,
};
