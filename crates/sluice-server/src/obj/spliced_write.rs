//! Large plain WRITEs whose payload goes from the socket into the
//! object's file without being copied into the process: the rest of the
//! payload is spliced from the socket into the connection's payload pipe
//! (the driver's `PayloadPipe`, which NBD's spliced writes use too),
//! whole, and then the store writes the prefix that arrived with the
//! header and the pipe's bytes into the object's file under the object's
//! lock, and commits the new length and modified time as any write does
//! (`ObjectStore::write_from`). All of it on the connection thread, as
//! NBD's spliced writes are: the payload has to be taken off the socket
//! before the next request can be read anyway.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::time::Instant;

use sluice_obj_proto::RequestHeader;
use sluice_objstore::WriteSource;

use super::ObjSession;
use crate::driver::payload_pipe::{PayloadPipe, Spliced, SPLICED_PAYLOAD_MIN};
use crate::driver::{Dispatch, DriverError, Execute, Frame, PayloadIo, Taken};
use crate::metrics::Stage;

/// A spliced write's payload as the store takes it: the prefix received
/// with the header, then `rest` bytes in the pipe.
struct PipeSource<'a> {
    prefix: &'a [u8],
    pipe: &'a PayloadPipe,
    rest: usize,
}

impl WriteSource for PipeSource<'_> {
    fn bytes(&self) -> u64 {
        (self.prefix.len() + self.rest) as u64
    }

    fn write_to(&self, file: &File, offset: u64) -> io::Result<()> {
        file.write_all_at(self.prefix, offset)?;
        self.pipe
            .write_into(file.as_fd(), offset + self.prefix.len() as u64, self.rest)
    }

    fn read_into(&self, out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(self.prefix);
        self.pipe.read_into(out, self.rest)
    }
}

impl ObjSession {
    /// The driver's `receive_rest` hook for objects: a plain WRITE
    /// (contiguous, no FUA, no attribute entries) of at least
    /// [`SPLICED_PAYLOAD_MIN`] bytes to an object the store holds open as
    /// a file, on a plain socket in completion order, goes from the
    /// socket through the pipe into the file
    /// ([`PayloadPipe::splice_payload`] receives all of it before the
    /// store writes a byte). `Taken::No` for anything else: the receive
    /// buffer takes it.
    ///
    /// FUA writes are left out: their sync would hold the connection
    /// thread, where on the pool the connection goes on receiving.
    pub(super) fn spliced_write(
        &mut self,
        frame: &Frame<RequestHeader>,
        io: &mut PayloadIo<'_>,
        d: &mut Dispatch,
    ) -> Result<Taken, DriverError> {
        let h = &frame.head;
        if !self.splices || h.length < SPLICED_PAYLOAD_MIN as u64 || !d.splices_payloads() {
            return Ok(Taken::No);
        }
        let Some(request) = self.exec.plain_write(h) else {
            return Ok(Taken::No);
        };
        if !self.exec.store.has_cached_file(self.exec.object(h.object)) {
            // Unknown or inline: the copying path loads it.
            return Ok(Taken::No);
        }
        let Some(mut pipe) = PayloadPipe::take_or_make(&mut self.payload_pipe) else {
            self.splices = false;
            return Ok(Taken::No);
        };
        let received = Instant::now();
        let exec = &self.exec;
        let spliced = pipe.splice_payload(
            frame.header_len,
            frame.len - frame.header_len,
            io,
            |prefix, pipe, rest| {
                let source = PipeSource { prefix, pipe, rest };
                exec.store.write_from(
                    exec.object(h.object),
                    h.offset,
                    &source,
                    &Default::default(),
                )
            },
        );
        self.payload_pipe = Some(pipe);
        let result = match spliced? {
            Spliced::Written(result) => result,
            Spliced::Not(taken) => return Ok(taken),
        };
        let seq = d.take_seq();
        let failed = self.exec.answer_write(&request, result, d.batch());
        d.end_reply(seq);
        d.metrics()
            .obj_spliced_writes
            .fetch_add(1, Ordering::Relaxed);
        let done = Instant::now();
        d.metrics().add_busy(Stage::ExecuteInline, done - received);
        self.exec.completed(&request, failed, done - received);
        Ok(Taken::Done)
    }
}
