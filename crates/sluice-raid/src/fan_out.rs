//! How the member requests of one volume request are issued together.
//!
//! The RAID layer never talks to a member directly: it describes each
//! step of a request (the reads of a stripe, then its writes) as a slice
//! of [`MemberIo`]s and hands it to a [`FanOut`], which issues them all,
//! waits for every one, and stores each one's result in it. The RAID
//! layer then reads the results (marking failed members, retrying
//! degraded) and goes on to the next step.
//!
//! [`ScopedFanOut`] is the default: it works with any member
//! `BlockDevice`. Members whose calls never block
//! (`BlockingClass::Never`: memory) are called in turn on the caller's
//! thread, since a thread hand-off costs more than their work; when a
//! step has requests for several members that may block, each such
//! member's requests run in turn on a scoped thread of their own (the
//! first member's on the caller's thread).
//!
//! Remote members plug in here. `sluice_client::batch` starts several
//! requests on different clients and waits for them together without a
//! thread per request (docs/design/0003-member-fan-out.md). This crate
//! cannot depend on the client, so the code that builds a RAID volume
//! from specs (sluice-volume, which knows both) implements `FanOut`
//! (`sluice_volume::BatchFanOut`): it keeps its own `RemoteDevice` handle
//! for each member index it built and, in [`FanOut::submit`], starts the
//! reads, writes and flushes of remote members inside one `batch`
//! closure, runs the rest with the plain `BlockDevice` calls while those
//! are in flight, then copies each result into [`MemberIo::result`].
//! Offsets in a step are the members' own: the RAID layer has already
//! moved them past the superblock area.

use std::sync::Arc;

use sluice_storage::{BlockDevice, BlockingClass, DeviceError, ZeroMode};

/// One operation on one member.
#[derive(Debug)]
pub enum MemberOp<'a> {
    /// Fill the buffer from the member offset.
    Read { buf: &'a mut [u8], offset: u64 },
    /// Write the buffer at the member offset.
    Write {
        buf: &'a [u8],
        offset: u64,
        fua: bool,
    },
    /// Make completed writes durable.
    Flush,
    /// Discard a range (a hint).
    Trim { offset: u64, length: u64, fua: bool },
    /// Make a range read as zeroes.
    WriteZeroes {
        offset: u64,
        length: u64,
        mode: ZeroMode,
    },
}

/// A member request and, once submitted, its result.
#[derive(Debug)]
pub struct MemberIo<'a> {
    /// Index of the member in the array.
    pub member: usize,
    /// What to do.
    pub op: MemberOp<'a>,
    /// `Ok` until [`FanOut::submit`] stores what the member answered.
    pub result: Result<(), DeviceError>,
}

impl<'a> MemberIo<'a> {
    /// A request not yet issued.
    pub fn new(member: usize, op: MemberOp<'a>) -> Self {
        Self {
            member,
            op,
            result: Ok(()),
        }
    }

    /// Moves the request `by` bytes further into the member (past the
    /// superblock area, to where the array's data starts).
    pub(crate) fn shift(&mut self, by: u64) {
        match &mut self.op {
            MemberOp::Read { offset, .. }
            | MemberOp::Write { offset, .. }
            | MemberOp::Trim { offset, .. }
            | MemberOp::WriteZeroes { offset, .. } => *offset += by,
            MemberOp::Flush => {}
        }
    }

    /// Issues the request on `device` (the member) and stores the result.
    pub fn run_on(&mut self, device: &dyn BlockDevice) {
        self.result = match &mut self.op {
            MemberOp::Read { buf, offset } => device.read_at(buf, *offset),
            MemberOp::Write { buf, offset, fua } => device.write_at(buf, *offset, *fua),
            MemberOp::Flush => device.flush(),
            MemberOp::Trim {
                offset,
                length,
                fua,
            } => device.trim(*offset, *length, *fua),
            MemberOp::WriteZeroes {
                offset,
                length,
                mode,
            } => device.write_zeroes(*offset, *length, *mode),
        };
    }
}

/// Issues one step's member requests and waits for all of them.
pub trait FanOut: Send + Sync + std::fmt::Debug {
    /// Runs every request in `step` on `members[io.member]` and stores
    /// each result in `io.result`; returns when all have completed.
    /// `step` never names a member that is `None` (missing).
    fn submit(&self, members: &[Option<Arc<dyn BlockDevice>>], step: &mut [MemberIo<'_>]);
}

/// The default [`FanOut`]: in turn for members that never block,
/// scoped threads for the others.
#[derive(Debug, Default, Clone, Copy)]
pub struct ScopedFanOut;

impl FanOut for ScopedFanOut {
    fn submit(&self, members: &[Option<Arc<dyn BlockDevice>>], step: &mut [MemberIo<'_>]) {
        let device = |member: usize| -> &dyn BlockDevice {
            members[member]
                .as_deref()
                .expect("the RAID layer issues requests to present members only")
        };
        // One queue per member: a member's requests run in turn, on one
        // thread, so a large read costs a thread per member, not per
        // chunk.
        let mut queues: Vec<Vec<&mut MemberIo<'_>>> = members.iter().map(|_| Vec::new()).collect();
        for io in step.iter_mut() {
            queues[io.member].push(io);
        }
        let (blocking, never): (Vec<_>, Vec<_>) = queues
            .into_iter()
            .enumerate()
            .filter(|(_, queue)| !queue.is_empty())
            .partition(|(member, _)| device(*member).capability().blocking != BlockingClass::Never);
        let run_queue = |(member, queue): (usize, Vec<&mut MemberIo<'_>>)| {
            let d = device(member);
            for io in queue {
                io.run_on(d);
            }
        };
        for queue in never {
            run_queue(queue);
        }
        if blocking.len() < 2 {
            blocking.into_iter().for_each(run_queue);
            return;
        }
        std::thread::scope(|scope| {
            let mut queues = blocking.into_iter();
            let mine = queues.next();
            for queue in queues {
                scope.spawn(move || run_queue(queue));
            }
            if let Some(queue) = mine {
                run_queue(queue);
            }
        });
    }
}
