//! Requests gathered on the connection thread to run in one pool job
//! (the small members of a batch frame, `batch.rs`; the creates of one
//! receive, `creates.rs`): each request with its payload copied once
//! into one buffer, as a hand-off copies it.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use super::execute::{ObjExecutor, ObjRequest};
use crate::driver::sink::Seq;
use crate::driver::{Dispatch, Execute};

/// One gathered request.
pub(super) struct Member {
    pub(super) seq: Seq,
    pub(super) request: ObjRequest,
    /// Its payload in [`Gathered::data`].
    pub(super) payload: Range<usize>,
    pub(super) received: Instant,
    /// Whether its reply was an error (set by the job that runs it).
    pub(super) failed: bool,
}

/// Requests gathered for one pool job, in the order they came.
#[derive(Default)]
pub(super) struct Gathered {
    pub(super) members: Vec<Member>,
    /// The members' payloads, back to back.
    pub(super) data: Vec<u8>,
}

impl Gathered {
    pub(super) fn push(
        &mut self,
        seq: Seq,
        request: ObjRequest,
        payload: &[u8],
        received: Instant,
    ) {
        let at = self.data.len();
        self.data.extend_from_slice(payload);
        self.members.push(Member {
            seq,
            request,
            payload: at..self.data.len(),
            received,
            failed: false,
        });
    }

    /// The payload of `member`.
    pub(super) fn payload(&self, member: &Member) -> &[u8] {
        &self.data[member.payload.clone()]
    }

    /// Runs the one member gathered as the request it is (a job of one
    /// would only add the gathering's bookkeeping), leaving this empty.
    pub(super) fn run_alone(&mut self, exec: &Arc<ObjExecutor>, d: &mut Dispatch) {
        debug_assert_eq!(self.members.len(), 1);
        if let Some(m) = self.members.pop() {
            let placement = d.placement(exec.blocking(), m.request.access);
            d.run(
                exec,
                m.seq,
                m.request,
                &self.data[m.payload],
                placement,
                m.received,
            );
        }
        self.data.clear();
    }
}
