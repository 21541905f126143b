//! The client of sluice's native object protocol (docs/protocol.md):
//! objects with typed attributes in partitions and collections, and
//! reads and writes of any list of (offset, length) segments as one
//! request.
//!
//! [`ObjClient`] is one connection owned by one thread, with a typed,
//! blocking call for every command. It shares the NBD client's core:
//! URIs ([`ObjUri`](crate::ObjUri): `sluice://`, `sluices://` with the
//! same TLS settings as `nbds://`, `sluice+unix:///PATH`), sockets, TLS
//! and timeouts. For each data command it picks the data distribution
//! type itself (one segment: contiguous; equal segments at a constant
//! stride: strided; anything else: a scatter/gather list) and cuts
//! requests that exceed the limits the server published in its greeting
//! into several, sent pipelined. [`ObjClient::batch`] and
//! [`ObjClient::pipeline`] keep many commands in flight, matching the
//! replies (which come in completion order) to them by request id.
//! [`SharedObjClient`] is one connection for many threads at once, each
//! call blocking only its caller; it cuts what exceeds the limits the
//! same way, and with [`ObjOptions::reconnect`] gets a lost connection
//! back. Both apply temporal merge
//! ([`MergePolicy`], set in [`ObjOptions::merge`] or a URI's `?merge=`):
//! requests waiting to be sent while others are in flight are packed
//! into batch frames, always, never, or where measuring showed it pays
//! (the default, `adaptive`). NBD
//! exports of the same server, attached when connecting
//! ([`ObjOptions::exports`]), are read and written the same way, as
//! extents ([`ObjClient::extent_read`], [`ObjClient::extent_write`]).
//! [`ExportDevice`] is such an export as a block device over a
//! [`SharedObjClient`] (a `sluice://HOST/EXPORT` volume): there, block
//! requests waiting to be sent together are fused into one extent
//! command whose scatter/gather list names each one's range, the block
//! path's temporal merge.
//! Reads and writes also take the data as a list of the caller's
//! buffers ([`ObjClient::read_vectored`], [`ObjClient::write_vectored`]
//! and the same on [`SharedObjClient`]): a write is gathered from them
//! as it is sent, a read scattered into them.
//!
//! Named objects striped over several object servers are in
//! [`striped`](crate::striped).
//!
//! ```no_run
//! use sluice_client::obj::{AttrChange, DataOptions, FlushScope, ObjClient, ObjOptions, Segment};
//! use sluice_client::Durability;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let uri = sluice_client::DEFAULT_OBJ_SERVER.parse()?;
//! let mut client = ObjClient::connect(&uri, &ObjOptions::default())?;
//! let id = client.create("photos", 1, Durability::Buffered)?[0];
//! // Two ranges and an attribute, one request.
//! let segments = [Segment { offset: 0, length: 4 }, Segment { offset: 4096, length: 2 }];
//! let options = DataOptions {
//!     durability: Durability::Buffered,
//!     attrs: vec![AttrChange::set("camera", "x100")],
//! };
//! client.write(id, &segments, b"headtl", &options)?;
//! client.flush(FlushScope::Object(id))?;
//! let read = client.read_with(id, &segments, &["camera"])?;
//! assert_eq!(read.data, b"headtl");
//! # Ok(())
//! # }
//! ```

mod attr;
mod client;
mod codec;
mod connection;
mod error;
mod export_device;
mod fuse;
mod gather;
mod handshake;
mod merge;
pub mod plan;
mod remote_meta;
mod request;
mod shared;
mod split;
mod wire;

pub use attr::{AttrChange, Attrs, Value};
pub use client::{ObjClient, ObjOptions};
pub use error::{Addressee, ObjError, Subject};
pub use export_device::ExportDevice;
pub use merge::{BadMergePolicy, MergePolicy, MergeStats, HOLD_IN_FLIGHT};
pub use remote_meta::RemoteMetaStore;
pub use request::{
    open_range, DataOptions, Entry, ObjRequest, ObjResponse, Page, Range, ReadReply, Stat,
    LENGTH_ATTR, SERVER_ATTR_PREFIX,
};
pub use shared::{SharedObjClient, READER_THREAD};
pub use sluice_obj_proto::{
    answer, AttachedExport, ClientHandshakeError, DdtKind, ErrorCode, Features, FlushScope, Limits,
    Segment,
};

/// The partition a client selects when its URI names none.
pub const DEFAULT_PARTITION: u64 = 1;
