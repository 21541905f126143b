//! Several requests on several remote devices in flight at once, awaited
//! together: how a RAID volume reads a stripe from its members in one
//! round trip instead of one per member (docs/design/0003-member-fan-out.md).
//!
//! Requests are started on each device's [`Client`](crate::Client)
//! without waiting (reads register the caller's buffer as their
//! destination) and [`batch`] returns once every one has completed. The
//! batch lives inside [`batch`], which waits for everything it started
//! before it returns or unwinds, so the buffers lent to reads outlive
//! every write the reader threads make into them.

use sluice_nbd_proto::ClientRequest;
use sluice_storage::{DeviceError, IoOp};
use tokio::sync::oneshot;

use super::client::Dest;
use crate::Durability;
use crate::{ClientError, RemoteDevice, Reply};

type Receiver = oneshot::Receiver<Result<Reply, ClientError>>;

/// One started request.
struct Started<'a> {
    device: &'a RemoteDevice,
    op: IoOp,
    offset: u64,
    len: u64,
    rx: Option<Receiver>,
}

/// Requests started together; see [`batch`].
pub struct Batch<'a> {
    started: Vec<Started<'a>>,
    /// Results of requests refused before starting, by position.
    results: Vec<Option<Result<(), DeviceError>>>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("requests", &self.started.len())
            .finish()
    }
}

impl<'a> Batch<'a> {
    fn start(
        &mut self,
        device: &'a RemoteDevice,
        op: IoOp,
        offset: u64,
        len: u64,
        request: ClientRequest<'_>,
        dest: Dest,
    ) -> usize {
        let checked = device.check(op, offset, len);
        let (rx, early) = match checked {
            Err(e) => (None, Some(Err(e))),
            Ok(()) => match device.client().submit(request, dest) {
                Ok(rx) => (Some(rx), None),
                Err(e) => (None, Some(Err(device.error(e, op, offset, len)))),
            },
        };
        self.started.push(Started {
            device,
            op,
            offset,
            len,
            rx,
        });
        self.results.push(early);
        self.started.len() - 1
    }

    /// Starts reading `buf.len()` bytes at `offset` from `device` into
    /// `buf`; returns the request's position in the results.
    pub fn read_at(&mut self, device: &'a RemoteDevice, buf: &'a mut [u8], offset: u64) -> usize {
        let len = buf.len() as u64;
        let Ok(length) = u32::try_from(buf.len()) else {
            self.started.push(Started {
                device,
                op: IoOp::Read,
                offset,
                len,
                rx: None,
            });
            self.results.push(Some(Err(DeviceError::Unsupported {
                device: device.name().to_owned(),
                op: IoOp::Read,
                reason: "a batched read of 4 GiB or more",
            })));
            return self.started.len() - 1;
        };
        let dest = Dest::Borrowed {
            ptr: buf.as_mut_ptr(),
            len: buf.len(),
        };
        self.start(
            device,
            IoOp::Read,
            offset,
            len,
            ClientRequest::Read { offset, length },
            dest,
        )
    }

    /// Starts writing `data` at `offset` on `device` (the bytes are
    /// copied out before this returns).
    pub fn write_at(
        &mut self,
        device: &'a RemoteDevice,
        data: &[u8],
        offset: u64,
        durability: Durability,
    ) -> usize {
        let len = data.len() as u64;
        let fua = durability.is_durable();
        self.start(
            device,
            IoOp::Write,
            offset,
            len,
            ClientRequest::Write { offset, data, fua },
            Dest::None,
        )
    }

    /// Starts a flush of `device`.
    pub fn flush(&mut self, device: &'a RemoteDevice) -> usize {
        self.start(device, IoOp::Flush, 0, 0, ClientRequest::Flush, Dest::None)
    }

    /// Waits for every request started; results in starting order.
    fn finish(&mut self) -> Vec<Result<(), DeviceError>> {
        let mut out = Vec::with_capacity(self.started.len());
        for (s, early) in self.started.iter_mut().zip(self.results.iter_mut()) {
            if let Some(r) = early.take() {
                out.push(r);
                continue;
            }
            let Some(rx) = s.rx.take() else {
                continue;
            };
            let r = match rx.blocking_recv() {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(s.device.error(e, s.op, s.offset, s.len)),
                Err(_) => Err(s.device.error(
                    ClientError::Closed {
                        target: s.device.client().details().target.clone(),
                    },
                    s.op,
                    s.offset,
                    s.len,
                )),
            };
            out.push(r);
        }
        out
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // Unwinding out of `batch`: the reads still in flight write into
        // borrowed buffers until they complete, so wait for them.
        for s in &mut self.started {
            if let Some(rx) = s.rx.take() {
                let _ = rx.blocking_recv();
            }
        }
    }
}

/// Runs `f`, which starts requests on the batch it is given, then waits
/// for every one of them. Returns what `f` returned and each request's
/// result, in the order they were started. Must not be called from
/// inside an async runtime (it blocks).
pub fn batch<'a, R>(f: impl FnOnce(&mut Batch<'a>) -> R) -> (R, Vec<Result<(), DeviceError>>) {
    let mut b = Batch {
        started: Vec::new(),
        results: Vec::new(),
    };
    let r = f(&mut b);
    let results = b.finish();
    (r, results)
}
