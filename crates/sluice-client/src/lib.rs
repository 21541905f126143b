//! sluice's clients: the NBD initiator, thin drivers over the sans-IO
//! client half of `sluice-nbd-proto` (handshake machine, request encoder,
//! reply decoder and cookie table), and in [`obj`] the client of sluice's
//! native object protocol (`sluice-obj-proto`), which shares the URIs,
//! sockets, TLS and timeouts below.
//!
//! Two ways to drive a connection:
//! - [`Connection`]: owned by one thread, which queues any number of
//!   requests, sends them with one write and completes every reply one read
//!   brings, borrowing read data straight from the receive buffer. The
//!   bench's workers use it: no thread hand-off, no per-request allocation.
//! - [`Client`]: cloneable, for many threads or async tasks at once
//!   (`client.read(off, len).await`, or [`Client::read_at`] straight into
//!   the caller's buffer); replies complete out of order.
//!
//! [`RemoteDevice`] is a `sluice_storage::BlockDevice` over a [`Client`],
//! so a remote export can stand wherever a local device does.
//!
//! Both speak fixed-newstyle NBD with `NBD_OPT_GO`, structured replies or
//! extended headers, `base:allocation`, and TLS for `nbds://` URIs
//! ([`NbdUri`]); [`list_exports`] lists a server's exports. Errors are
//! [`ClientError`]s naming the server and request. Connecting is bounded
//! by [`ConnectOptions::connect_timeout`], and each request, if asked, by
//! [`ConnectOptions::request_timeout`].
//!
//! # Reconnecting, and what FLUSH promises
//!
//! A [`Client`] with [`Reconnect`] on survives the server going away and
//! coming back (a restart, a network blip) within the window: it connects
//! again, checks the export has the same size and flags, and re-sends
//! every request that had no reply. Callers see no error for what
//! succeeded after the reconnect, and [`ClientError::ReconnectFailed`]
//! when the window runs out. Writes, trims and zeroing are idempotent in
//! NBD, so sending one twice is safe; reads and block status are re-asked.
//!
//! A server may acknowledge a write it holds only in a volatile cache
//! (`sluice serve --cache writeback`) and lose it when it dies. So the
//! client keeps every modification acknowledged since the last
//! successful FLUSH in a replay log, bounded by
//! [`Reconnect::replay_log_bytes`] (when it is full the client sends a
//! FLUSH of its own, and the log empties when it succeeds), and after a
//! reconnect it replays the log, in acknowledgement order and one request
//! at a time, before anything else is sent. Hence:
//!
//! - every write acknowledged to a caller reads back after a reconnect,
//!   whether or not the old server had made it durable;
//! - a FLUSH that succeeds, before or after a reconnect, means every
//!   write acknowledged before the FLUSH was sent is durable on the
//!   server that answered it (a FLUSH that had no reply when the
//!   connection broke is sent again after the replay, so it covers the
//!   replayed writes too);
//! - a FLUSH that fails, or a reconnect window that runs out, promises
//!   nothing about unflushed writes: the caller must assume they are lost.
//!
//! The log holds writes that were acknowledged but not yet flushed; a
//! write the server had not acknowledged is simply re-sent. Writes to
//! the same export through other connections are not replayed by this
//! one: a caller sharing an export between clients must flush before
//! relying on another client seeing its writes, as NBD requires anyway.
//! [`Connection`] does not reconnect (it keeps no copies of requests).
//!
//! # Blocking and async
//!
//! Every client here blocks the calling thread, with one exception: the
//! NBD [`Client`] also has an async face (`client.read(off, len).await`),
//! because a block device is what async servers and proxies (written on
//! tokio) put behind their own requests, one task each. Its futures are
//! runtime-agnostic: they wait on a channel the client's reader thread
//! completes, never on the runtime's I/O driver. The object clients
//! ([`obj::ObjClient`], [`obj::SharedObjClient`]) and
//! [`striped::StripedClient`] are blocking only: their calls move whole
//! objects or lists of ranges, which callers make from worker threads;
//! an async caller runs them under its runtime's `spawn_blocking`.
//!
//! # Arguments
//!
//! Calls that change data say when the change must be durable with a
//! [`Durability`] (`Buffered` until the next flush, or `Durable` before
//! the reply), never a bare `bool`; what rides on a data command (its
//! durability and attribute changes) is an options struct,
//! [`obj::DataOptions`], and connecting takes [`ConnectOptions`] or
//! [`obj::ObjOptions`].
//!
//! # Errors
//!
//! One error type per protocol: [`ClientError`] for NBD, [`obj::ObjError`]
//! for the object protocol, and [`striped::StripedError`] for striped
//! objects, which names the piece and server that failed and carries the
//! [`obj::ObjError`] or metadata error underneath as its source.
//!
//! # Example
//!
//! ```no_run
//! use sluice_client::{Client, ConnectOptions, NbdUri, Request};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let uri: NbdUri = "nbd://127.0.0.1:10809/disk".parse()?;
//! let client = Client::connect(&uri, &ConnectOptions::default())?;
//! // Blocking calls, from any number of threads at once.
//! client.call_blocking(Request::Write { offset: 4096, data: b"hello", fua: false })?;
//! client.call_blocking(Request::Flush)?;
//! let mut buf = [0u8; 5];
//! client.read_at(&mut buf, 4096)?;
//! assert_eq!(&buf, b"hello");
//! # Ok(())
//! # }
//! ```

mod durability;
mod nbd;
mod net;
pub mod obj;
pub mod striped;

pub use durability::Durability;
pub use nbd::{
    batch, capability_from_flags, device_error, list_exports, Batch, Client, ClientError,
    Completion, ConnectOptions, Connection, ExportDetails, Op, Outcome, RemoteDevice, Reply,
    Request, DEFAULT_RECONNECT_WINDOW,
};
pub use net::mux::Reconnect;
pub use net::transport::{
    CA_CERT_FILE, CLIENT_CERT_FILE, CLIENT_KEY_FILE, DEFAULT_CONNECT_TIMEOUT,
};
pub use net::uri::{
    BadObjUri, ExportUri, NbdUri, ObjUri, Target, TlsSettings, DEFAULT_OBJ_PORT,
    DEFAULT_OBJ_SERVER, DEFAULT_PORT,
};
