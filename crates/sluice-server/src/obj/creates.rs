//! CREATE and CREATE_AND_WRITE requests that arrive together, run
//! together: the small creates among the frames of one receive go to
//! the I/O pool as one job, which makes them with one store call (one
//! metadata commit, `ObjectStore::create_many`) and sends their replies
//! with one write.
//!
//! One at a time, each create cost a hand-off (a job, a queue, a
//! worker's wake-up), a wait in the store's group committer (another
//! wake-up when its group was done) and a reply `write`; for a create
//! with a few attributes those cost the server more than the create's
//! rows. A client that keeps many creates in flight sends several per
//! receive, so the connection thread gathers the creates of the frames
//! it has whole in its buffer (up to [`MAX_CREATES`]) and starts them
//! when the last whole frame is handled: nothing waits for frames still
//! arriving. Only in completion order (the replies of one job travel as
//! one buffer; in request order the sink places each by its own
//! sequence number), and only creates that wait for no device: no FUA,
//! data no larger than the store keeps inline by default.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use sluice_obj_proto::{Opcode, RequestHeader};
use tracing::debug;

use super::execute::{ObjExecutor, ObjRequest};
use super::gathered::Gathered;
use crate::buffer::ReplyBuf;
use crate::driver::sink::Seq;
use crate::driver::{Access, Dispatch, Execute, PoolJob};
use crate::metrics::Stage;

/// Creates of one job at most: enough to share one commit among most of
/// what a client keeps in flight, few enough that two jobs of a deep
/// pipeline overlap (one commits while the client answers the other's
/// replies with new requests).
const MAX_CREATES: usize = 16;
/// Most data a gathered create carries: the store's default inline
/// limit, so its bytes go into the shared commit and no file is written.
const SMALL_CREATE: u64 = 16 * 1024;

/// Whether `request` is a create that may run with others.
pub(super) fn gathers(request: &ObjRequest) -> bool {
    request.access == Access::Buffered
        && request.bytes <= SMALL_CREATE
        && matches!(request.op, Opcode::Create | Opcode::CreateAndWrite)
}

/// Whether `opcode` is one of the creates (cheaper than validating: it
/// only says whether looking ahead for more frames is worth it).
#[inline]
pub(super) fn is_create(opcode: u16) -> bool {
    opcode == Opcode::Create.wire() || opcode == Opcode::CreateAndWrite.wire()
}

/// Creates gathered on the connection thread, to run in one pool job.
#[derive(Default)]
pub(super) struct Creates(Gathered);

impl Creates {
    pub(super) fn is_empty(&self) -> bool {
        self.0.members.is_empty()
    }

    /// Adds a create that [`gathers`]; first starts those gathered so
    /// far if the group is full.
    pub(super) fn push(
        &mut self,
        seq: Seq,
        request: ObjRequest,
        payload: &[u8],
        received: Instant,
        exec: &Arc<ObjExecutor>,
        d: &mut Dispatch,
    ) {
        if self.0.members.len() >= MAX_CREATES {
            self.start(exec, d);
        }
        self.0.push(seq, request, payload, received);
    }

    /// Hands the gathered creates to the I/O pool as one job (a lone one
    /// as the request it is).
    pub(super) fn start(&mut self, exec: &Arc<ObjExecutor>, d: &mut Dispatch) {
        match self.0.members.len() {
            0 => {}
            1 => self.0.run_alone(exec, d),
            n => {
                exec.metrics.objects.record_create_group(n as u64);
                let group = Gathered {
                    members: std::mem::replace(&mut self.0.members, Vec::with_capacity(n)),
                    data: std::mem::take(&mut self.0.data),
                };
                let bytes = group.members.iter().map(|m| m.request.bytes).sum();
                let exec = Arc::clone(exec);
                d.spawn(bytes, move |job| run(group, &exec, job));
            }
        }
    }
}

/// Makes the gathered creates with one store call on a pool worker and
/// sends their replies with one write.
fn run(group: Gathered, exec: &ObjExecutor, mut job: PoolJob) {
    let n = group.members.len() as i64;
    job.metrics.inflight.fetch_add(n, Ordering::Relaxed);
    let started = Instant::now();
    let requests: Vec<(RequestHeader, &[u8])> = group
        .members
        .iter()
        .map(|m| (m.request.head, group.payload(m)))
        .collect();
    let mut out = ReplyBuf::with_capacity(0);
    let failed = exec.run_creates(&requests, &mut out);
    let executed = Instant::now();
    job.metrics.add_busy(Stage::ExecutePool, executed - started);
    let last = group.members.last().map_or(0, |m| m.seq);
    if let Err(e) = job.send(last, out.into_vec()) {
        debug!(error = %e, "replies not sent: connection gone");
    }
    let sent = Instant::now();
    job.metrics.add_busy(Stage::Send, sent - executed);
    for (m, failed) in group.members.iter().zip(failed) {
        exec.completed(&m.request, failed, sent - m.received);
    }
    job.metrics.inflight.fetch_sub(n, Ordering::Relaxed);
}
