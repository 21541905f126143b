//! sluice's NBD client (initiator).
//!
//! Two ways to drive a connection:
//! - [`Connection`]: owned by one thread, which queues any number of
//!   requests, sends them with one write and completes every reply one read
//!   brings, borrowing read data straight from the receive buffer. The
//!   bench's workers use it: no thread hand-off, no per-request allocation.
//! - [`Client`]: cloneable, for many threads or async tasks at once
//!   (`client.read(off, len).await`); replies complete out of order.
//!
//! Both speak fixed-newstyle NBD with `NBD_OPT_GO`, structured replies or
//! extended headers, and `base:allocation`; [`list_exports`] lists a
//! server's exports. Errors are [`ClientError`]s naming the server and
//! request.

mod connection;
mod error;
mod handshake;
mod shared;
mod uri;

pub use connection::{Completion, Connection, Outcome, Request};
pub use error::{ClientError, Op};
pub use handshake::{list_exports, ConnectOptions, ExportDetails};
pub use shared::{Client, Reply};
pub use uri::{NbdUri, Target};
