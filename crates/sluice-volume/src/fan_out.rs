//! [`BatchFanOut`]: the RAID layer's member fan-out for arrays whose
//! members are remote exports, issued with `sluice_client::batch`
//! (docs/design/0003-member-fan-out.md). It lives here because this is
//! the crate that knows both the RAID layer and the client.

use sluice_client::Durability;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sluice_client::RemoteDevice;
use sluice_raid::{FanOut, MemberIo, MemberOp};
use sluice_storage::BlockDevice;

/// Starts every read, write and flush of a step on a remote member
/// without waiting, runs the rest (trims, zeroing, members that are not
/// plain remote exports, payloads over a server's limit) with the plain
/// `BlockDevice` calls while those are in flight, then waits for all of
/// them together: one round trip per step, no thread per request.
#[derive(Debug)]
pub struct BatchFanOut {
    /// The remote device of each member that is one without layers over
    /// it (the same object as the array's member), by member index;
    /// replaced whole when a member is ([`Self::set_remote`]).
    remotes: ArcSwap<Vec<Option<Arc<RemoteDevice>>>>,
}

impl BatchFanOut {
    /// A fan-out over `remotes`, indexed like the array's members.
    pub fn new(remotes: Vec<Option<Arc<RemoteDevice>>>) -> Self {
        Self {
            remotes: ArcSwap::from_pointee(remotes),
        }
    }

    /// Records the remote device now at `index` (after the array put it
    /// there), or none.
    pub fn set_remote(&self, index: usize, device: Option<Arc<RemoteDevice>>) {
        let mut remotes = self.remotes.load().as_ref().clone();
        if let Some(slot) = remotes.get_mut(index) {
            *slot = device;
            self.remotes.store(Arc::new(remotes));
        }
    }
}

/// The member's remote device if `io` can be started in a batch: the
/// member is a plain remote export, the very device the array holds at
/// that index (a member being replaced is called plainly until both
/// agree), and the payload fits.
fn batched<'r>(
    remotes: &'r [Option<Arc<RemoteDevice>>],
    members: &[Option<Arc<dyn BlockDevice>>],
    io: &MemberIo<'_>,
) -> Option<&'r RemoteDevice> {
    let remote = remotes.get(io.member)?.as_ref()?;
    let member = members.get(io.member)?.as_ref()?;
    if !std::ptr::addr_eq(Arc::as_ptr(remote), Arc::as_ptr(member)) {
        return None;
    }
    let device = remote.as_ref();
    let max_payload = u64::from(device.client().details().block_sizes.maximum_payload);
    let fits = |len: usize| len as u64 <= max_payload;
    match &io.op {
        MemberOp::Read { buf, .. } => fits(buf.len()).then_some(device),
        MemberOp::Write { buf, .. } => fits(buf.len()).then_some(device),
        MemberOp::Flush => device.capability().flush.then_some(device),
        MemberOp::Trim { .. } | MemberOp::WriteZeroes { .. } => None,
    }
}

impl FanOut for BatchFanOut {
    fn submit(&self, members: &[Option<Arc<dyn BlockDevice>>], step: &mut [MemberIo<'_>]) {
        let remotes = self.remotes.load();
        let plan: Vec<bool> = step
            .iter()
            .map(|io| batched(&remotes, members, io).is_some())
            .collect();
        let (started, results) = sluice_client::batch(|b| {
            let mut started = Vec::new();
            let mut rest = Vec::new();
            for ((index, io), batched) in step.iter_mut().enumerate().zip(&plan) {
                let device = match remotes.get(io.member) {
                    Some(Some(d)) if *batched => d.as_ref(),
                    _ => {
                        rest.push(io);
                        continue;
                    }
                };
                let position = match &mut io.op {
                    MemberOp::Read { buf, offset } => b.read_at(device, buf, *offset),
                    MemberOp::Write { buf, offset, fua } => {
                        b.write_at(device, buf, *offset, Durability::from_fua(*fua))
                    }
                    MemberOp::Flush => b.flush(device),
                    MemberOp::Trim { .. } | MemberOp::WriteZeroes { .. } => {
                        unreachable!("trims and zeroing are never batched")
                    }
                };
                started.push((index, position));
            }
            // The plain calls run while the batched requests are in
            // flight.
            for io in rest {
                let device = members[io.member]
                    .as_deref()
                    .expect("the RAID layer issues requests to present members only");
                io.run_on(device);
            }
            started
        });
        let mut results: Vec<Option<_>> = results.into_iter().map(Some).collect();
        for (index, position) in started {
            if let Some(result) = results.get_mut(position).and_then(Option::take) {
                step[index].result = result;
            }
        }
    }
}
