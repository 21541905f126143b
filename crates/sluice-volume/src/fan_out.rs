//! [`BatchFanOut`]: the RAID layer's member fan-out for arrays whose
//! members are remote exports, issued with `sluice_client::batch`
//! (docs/design/0003-member-fan-out.md). It lives here because this is
//! the crate that knows both the RAID layer and the client.

use std::sync::Arc;

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
    /// it (the same object as the array's member), by member index.
    remotes: Vec<Option<Arc<RemoteDevice>>>,
}

impl BatchFanOut {
    /// A fan-out over `remotes`, indexed like the array's members.
    pub fn new(remotes: Vec<Option<Arc<RemoteDevice>>>) -> Self {
        Self { remotes }
    }

    /// The member's remote device if `io` can be started in a batch.
    fn batched(&self, io: &MemberIo<'_>) -> Option<&RemoteDevice> {
        let device = self.remotes.get(io.member)?.as_deref()?;
        let max_payload = u64::from(device.client().details().block_sizes.maximum_payload);
        let fits = |len: usize| len as u64 <= max_payload;
        match &io.op {
            MemberOp::Read { buf, .. } => fits(buf.len()).then_some(device),
            MemberOp::Write { buf, .. } => fits(buf.len()).then_some(device),
            MemberOp::Flush => device.capability().flush.then_some(device),
            MemberOp::Trim { .. } | MemberOp::WriteZeroes { .. } => None,
        }
    }
}

impl FanOut for BatchFanOut {
    fn submit(&self, members: &[Option<Arc<dyn BlockDevice>>], step: &mut [MemberIo<'_>]) {
        let plan: Vec<bool> = step.iter().map(|io| self.batched(io).is_some()).collect();
        let (started, results) = sluice_client::batch(|b| {
            let mut started = Vec::new();
            let mut rest = Vec::new();
            for ((index, io), batched) in step.iter_mut().enumerate().zip(&plan) {
                let device = match self.remotes.get(io.member) {
                    Some(Some(d)) if *batched => d.as_ref(),
                    _ => {
                        rest.push(io);
                        continue;
                    }
                };
                let position = match &mut io.op {
                    MemberOp::Read { buf, offset } => b.read_at(device, buf, *offset),
                    MemberOp::Write { buf, offset, fua } => b.write_at(device, buf, *offset, *fua),
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
