//! The small members of a batch frame, run together: one pool hand-off
//! for several members instead of one each, and their replies sent with
//! one write (docs/design/0008-temporal-merge.md, "The server side").
//!
//! A hand-off costs the server a job, a queue and, on a machine with few
//! cores, a worker's wake-up, and a reply sent on its own costs a
//! `write`; for a 4 KiB write into the page cache those cost more than
//! the write. So the members that only change the page cache and the
//! metadata database, and move little data, run one after another in
//! one job ([`Together`]), and their data changes (WRITE, APPEND, PUNCH)
//! go to the store in one call that commits their metadata once
//! (`ObjectStore::change_batch`), where one after another each waited for
//! a commit of its own; so do their small creates
//! (`ObjectStore::create_many`, as for creates received together:
//! `creates.rs`). Everything else in the frame (reads, which may
//! wait for the disk; durable changes; extent and metadata calls, whose
//! device or service the store does not control; large transfers) is
//! still handed off on its own, so such members run in parallel as
//! before, and a slow one holds up nothing else of its frame.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;

use sluice_obj_proto::{Opcode, RequestHeader};

use super::creates;
use super::execute::{ObjExecutor, ObjRequest};
use super::gathered::Gathered;
use crate::buffer::ReplyBuf;
use crate::driver::sink::Seq;
use crate::driver::{Access, Dispatch, Execute, Outcome, PoolJob};
use crate::metrics::Stage;

/// A member this large or larger runs on its own job: its copy alone
/// outweighs a hand-off, and two of them gain from running in parallel.
const SMALL_MEMBER: u64 = 64 * 1024;
/// Members of one job at most...
const MAX_MEMBERS: usize = 16;
/// ...and data bytes, so one job's members finish within about the time
/// of one large request, and a frame of many members still spreads over
/// several workers.
const MAX_BYTES: u64 = 256 * 1024;
/// Replies that have waited this long are sent before the job runs its
/// next member, so a member that turns out slow does not hold back the
/// replies of those before it by more than this.
const SEND_READY_AFTER: Duration = Duration::from_micros(200);

/// Whether `request` may run in a job with other members of its frame:
/// a small change that lands in the page cache and the metadata
/// database without waiting for a device.
pub(super) fn runs_together(request: &ObjRequest) -> bool {
    request.access == Access::Buffered
        && request.bytes < SMALL_MEMBER
        && matches!(
            request.op,
            Opcode::Create
                | Opcode::Remove
                | Opcode::Write
                | Opcode::Append
                | Opcode::CreateAndWrite
                | Opcode::Punch
                | Opcode::SetAttrs
        )
}

/// Small members of one batch frame gathered to run in one pool job, in
/// frame order, each answered with its own reply.
pub(super) struct Together {
    gathered: Gathered,
    bytes: u64,
    /// Payload bytes of the frame not yet split: room to reserve once.
    frame_left: usize,
}

impl Together {
    /// An empty group for a frame of `payload` bytes (nothing is
    /// allocated until a member joins).
    pub(super) fn for_frame(payload: usize) -> Self {
        Self {
            gathered: Gathered::default(),
            bytes: 0,
            frame_left: payload,
        }
    }

    /// Adds a member that [`runs_together`]; first starts the members
    /// gathered so far if it would take the group past its limits.
    pub(super) fn push(
        &mut self,
        seq: Seq,
        request: ObjRequest,
        payload: &[u8],
        exec: &Arc<ObjExecutor>,
        received: Instant,
        d: &mut Dispatch,
    ) {
        let members = &self.gathered.members;
        if members.len() >= MAX_MEMBERS
            || (!members.is_empty() && self.bytes + request.bytes > MAX_BYTES)
        {
            let rest = Self::for_frame(self.frame_left);
            std::mem::replace(self, rest).start(exec, received, d);
        }
        if self.gathered.members.is_empty() {
            self.gathered.members.reserve(MAX_MEMBERS);
            self.gathered
                .data
                .reserve(self.frame_left.min(MAX_BYTES as usize) + 4096);
        }
        self.frame_left = self.frame_left.saturating_sub(payload.len());
        self.bytes += request.bytes;
        self.gathered.push(seq, request, payload, received);
    }

    /// Hands the group to the I/O pool as one job (a lone member as the
    /// request it is).
    pub(super) fn start(mut self, exec: &Arc<ObjExecutor>, received: Instant, d: &mut Dispatch) {
        match self.gathered.members.len() {
            0 => {}
            1 => self.gathered.run_alone(exec, d),
            n => {
                exec.metrics.objects.record_batch_group(n as u64);
                let exec = Arc::clone(exec);
                d.spawn(self.bytes, move |job| self.run(&exec, received, job));
            }
        }
    }

    /// Runs the members on a pool worker: the data changes (WRITE,
    /// APPEND, PUNCH) first, in one store call that commits their
    /// metadata once for all of them, then the small creates, in
    /// another such call, then the others one after another. The data
    /// changes are answered as that commit returns;
    /// the replies go out together when the last member is done, or
    /// earlier once the oldest unsent one has waited
    /// [`SEND_READY_AFTER`].
    fn run(mut self, exec: &ObjExecutor, received: Instant, mut job: PoolJob) {
        let count = self.gathered.members.len();
        let n = count as i64;
        job.metrics.inflight.fetch_add(n, Ordering::Relaxed);
        let mut out = ReplyBuf::with_capacity(0);
        let started = Instant::now();
        let Gathered { members, data } = &mut self.gathered;
        // Members in the order they run: the data changes, the creates,
        // then the rest.
        let mut order: Vec<usize> = Vec::with_capacity(count);
        let mut changes = Vec::with_capacity(count);
        for (i, m) in members.iter().enumerate() {
            if let Some(c) = exec.data_change(&m.request, &data[m.payload.clone()]) {
                order.push(i);
                changes.push(c);
            }
        }
        let changed = changes.len();
        if changed > 0 {
            let store_changes: Vec<_> = changes.iter().map(|c| c.change()).collect();
            let outcome = exec.store.change_batch(&store_changes);
            exec.metrics
                .objects
                .record_batch_commits(changed as u64, outcome.commits as u64);
            for ((&i, change), result) in order.iter().zip(&changes).zip(outcome.results) {
                let m = &mut members[i];
                m.failed = exec.answer_change(&m.request, change, result, &mut out);
            }
        }
        drop(changes);
        let mut ran_already = vec![false; count];
        for &i in &order {
            ran_already[i] = true;
        }
        let creates: Vec<usize> = (0..count)
            .filter(|&i| !ran_already[i] && creates::gathers(&members[i].request))
            .collect();
        if creates.len() > 1 {
            let requests: Vec<(RequestHeader, &[u8])> = creates
                .iter()
                .map(|&i| (members[i].request.head, &data[members[i].payload.clone()]))
                .collect();
            let failed = exec.run_creates(&requests, &mut out);
            exec.metrics
                .objects
                .record_create_group(creates.len() as u64);
            for (&i, failed) in creates.iter().zip(failed) {
                members[i].failed = failed;
                ran_already[i] = true;
                order.push(i);
            }
        }
        // The members order[..batched] have run, their replies in `out`.
        let batched = order.len();
        order.extend((0..count).filter(|&i| !ran_already[i]));
        // The members order[..ran] have run; the replies of
        // order[unsent..ran] are in `out`, the oldest ready since `oldest`.
        let mut ran = batched;
        let mut unsent = 0;
        let mut oldest = (batched > 0).then(Instant::now);
        let mut busy_from = started;
        loop {
            let last = ran == count;
            let done = Instant::now();
            let due = oldest.is_some_and(|t| done - t >= SEND_READY_AFTER);
            if ran > unsent && (last || due) {
                job.metrics.add_busy(Stage::ExecutePool, done - busy_from);
                let reply = std::mem::take(&mut out).into_vec();
                let seq = members[order[ran - 1]].seq;
                let sent = if last {
                    job.send(seq, reply)
                } else {
                    job.send_early(seq, reply)
                };
                if let Err(e) = sent {
                    debug!(error = %e, "replies not sent: connection gone");
                }
                let now = Instant::now();
                job.metrics.add_busy(Stage::Send, now - done);
                for &i in &order[unsent..ran] {
                    let m = &members[i];
                    exec.completed(&m.request, m.failed, now - received);
                }
                unsent = ran;
                oldest = None;
                busy_from = now;
            }
            if last {
                break;
            }
            let m = &mut members[order[ran]];
            m.failed = match exec.execute(&m.request, &data[m.payload.clone()], false, &mut out) {
                Outcome::Done { failed } => failed,
                Outcome::WouldBlock => true,
            };
            ran += 1;
            oldest.get_or_insert_with(Instant::now);
        }
        job.metrics.inflight.fetch_sub(n, Ordering::Relaxed);
    }
}
