//! NBD's shortcuts around the copying data path, each switched by
//! `FastPaths`: spliced writes (the payload goes from the socket through
//! a pipe into the file), mapped reads (the reply's data goes from the
//! file's mapping to the socket) and pipelined reads (a large read
//! answered piece by piece).
//!
//! The device's optional zero-copy extension (`BlockDevice::zero_copy`,
//! only buffered files have one) is used in one place each here:
//! `splices_writes` and `write_from_pipe` in [`NbdSession::spliced_write`]
//! and [`NbdSession::write_spliced`], `mapped` in
//! [`NbdSession::mapped_read`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sluice_nbd_proto::consts::{REPLY_FLAG_DONE, REPLY_TYPE_NONE};
use sluice_nbd_proto::{
    encode_chunk_header, encode_error_offset, encode_read_data_header, Command, RequestHeader,
};
use sluice_storage::BlockingClass;
use tracing::error;

use super::execute::{encode_result, nbd_errno, short_reason, Request};
use super::NbdSession;
use crate::buffer::ReplyBuf;
use crate::config::PipelineMode;
use crate::driver::payload_pipe::{PayloadPipe, Spliced, SPLICED_PAYLOAD_MIN};
use crate::driver::sink::Seq;
use crate::driver::{Dispatch, DriverError, Frame, PayloadIo, Taken};
use crate::metrics::{CommandKind, Stage};

/// Reads longer than this are answered piece by piece (pipelined reads).
const READ_PIECE: u32 = 256 * 1024;
/// Reads at least this long are sent from the file's mapping when they
/// can be (`--mapped-reads`); shorter ones are cheaper batched.
const MAPPED_READ_MIN: u32 = 128 * 1024;

impl NbdSession {
    /// Handles a write whose payload is still arriving by splicing the
    /// rest of it from the socket into a pipe and from the pipe into the
    /// file, when the export is a buffered file on a plain socket and the
    /// payload fits the pipe. The whole payload is in the pipe before any
    /// byte is written, so a client that vanishes changes nothing.
    pub(super) fn spliced_write(
        &mut self,
        frame: &Frame<RequestHeader>,
        io: &mut PayloadIo<'_>,
        d: &mut Dispatch,
    ) -> Result<Taken, DriverError> {
        if !self.fast_paths.spliced_writes
            || frame.len - frame.header_len < SPLICED_PAYLOAD_MIN
            || !d.splices_payloads()
            || !self
                .exec
                .export
                .device
                .zero_copy()
                .is_some_and(|z| z.splices_writes())
        {
            return Ok(Taken::No);
        }
        let Ok(Command::Write {
            offset,
            length,
            fua: false,
        }) = self.exec.params.validate(&frame.head)
        else {
            return Ok(Taken::No);
        };
        let Some(mut pipe) = PayloadPipe::take_or_make(&mut self.payload_pipe) else {
            self.fast_paths.spliced_writes = false;
            return Ok(Taken::No);
        };
        let received = Instant::now();
        let spliced = pipe.splice_payload(
            frame.header_len,
            frame.len - frame.header_len,
            io,
            |prefix, pipe, rest| self.write_spliced(prefix, pipe, offset, rest),
        );
        self.payload_pipe = Some(pipe);
        let result = match spliced? {
            Spliced::Written(result) => result,
            Spliced::Not(taken) => return Ok(taken),
        };
        let seq = d.take_seq();
        let style = self.exec.params.reply_style;
        let failed = encode_result(
            d.batch(),
            style,
            frame.head.cookie,
            frame.head.offset,
            result,
        );
        d.end_reply(seq);
        d.metrics().spliced_writes.fetch_add(1, Ordering::Relaxed);
        let done = Instant::now();
        d.metrics().add_busy(Stage::ExecuteInline, done - received);
        self.exec.export.metrics.record(
            CommandKind::Write,
            u64::from(length),
            failed,
            done - received,
        );
        Ok(Taken::Done)
    }

    /// Writes a spliced write's payload: the `prefix` already received,
    /// then `rest` bytes from the pipe.
    fn write_spliced(
        &self,
        prefix: &[u8],
        pipe: &PayloadPipe,
        offset: u64,
        rest: usize,
    ) -> Result<(), sluice_storage::DeviceError> {
        let device = self.exec.export.device.as_ref();
        if !prefix.is_empty() {
            device.write_at(prefix, offset, false)?;
        }
        match device.zero_copy() {
            Some(z) => z.write_from_pipe(pipe.read_end(), offset + prefix.len() as u64, rest),
            None => Err(sluice_storage::DeviceError::Unsupported {
                device: format!("export {:?}", self.exec.export.name),
                op: sluice_storage::IoOp::Write,
                reason: "writes from a pipe",
            }),
        }
    }

    /// The fast paths of a read, if one applies; returns whether it
    /// answered.
    pub(super) fn fast_read(
        &mut self,
        request: &Request,
        seq: Seq,
        inline: bool,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        let Command::Read { offset, length, df } = request.cmd else {
            return false;
        };
        if self.fast_paths.mapped_reads
            && length >= MAPPED_READ_MIN
            && d.pipeline() == PipelineMode::Flexible
            && d.is_plain()
            && self.mapped_read(request, offset, length, received, d)
        {
            return true;
        }
        if !df
            && !inline
            && self.fast_paths.pipelined_reads
            && length > READ_PIECE
            && d.pipeline() == PipelineMode::Flexible
            && self.exec.params.reply_style.chunked()
        {
            self.pipelined_read(seq, request, offset, length, received, d);
            return true;
        }
        false
    }

    /// Answers a read with one data chunk whose bytes the kernel copies
    /// straight from the file's shared mapping, if the device has one and
    /// every page is in the page cache (so the send cannot wait for the
    /// disk). Returns false, having sent nothing, otherwise.
    fn mapped_read(
        &mut self,
        request: &Request,
        offset: u64,
        length: u32,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        let export = Arc::clone(&self.exec.export);
        let Some(map) = export.device.zero_copy().and_then(|z| z.mapped()) else {
            return false;
        };
        let len = length as usize;
        let Some(data) = map.iovec(offset, len).filter(|_| map.resident(offset, len)) else {
            return false;
        };
        let style = self.exec.params.reply_style;
        self.mapped_header.clear();
        encode_read_data_header(
            &mut self.mapped_header,
            style,
            request.cookie,
            request.offset,
            offset,
            length,
            true,
        );
        // `map` (borrowed from `export`) stays mapped across the send.
        let failed = d.send_mapped(&self.mapped_header, data).is_err();
        d.metrics().mapped_reads.fetch_add(1, Ordering::Relaxed);
        export.metrics.record(
            CommandKind::Read,
            u64::from(length),
            failed,
            received.elapsed(),
        );
        true
    }

    /// Answers a large read piece by piece (SuperNBD's pipelined reads):
    /// pieces already in memory go out at once as data chunks, the others
    /// are read on the I/O pool in parallel and each is sent as soon as it
    /// is read; whichever piece finishes last also sends the final chunk.
    fn pipelined_read(
        &mut self,
        seq: Seq,
        request: &Request,
        offset: u64,
        length: u32,
        received: Instant,
        d: &mut Dispatch,
    ) {
        let style = self.exec.params.reply_style;
        let (cookie, req_offset) = (request.cookie, request.offset);
        let export = &self.exec.export;
        let mut missing = Vec::new();
        let mut sent_inline = false;
        // Only page-cache devices can say cheaply whether a read would wait.
        let try_inline = export.capability.blocking == BlockingClass::PageCache;
        let end = offset + u64::from(length);
        let mut pos = offset;
        while pos < end {
            let piece_end = ((pos / u64::from(READ_PIECE) + 1) * u64::from(READ_PIECE)).min(end);
            let len = (piece_end - pos) as u32;
            let batch = d.batch();
            let start = batch.len();
            batch
                .encode(|o| encode_read_data_header(o, style, cookie, req_offset, pos, len, false));
            let data = batch.tail_mut(len as usize);
            if try_inline && matches!(export.device.read_at_nowait(data, pos), Ok(true)) {
                d.end_reply(seq);
                sent_inline = true;
            } else {
                batch.truncate(start);
                missing.push((pos, len));
            }
            pos = piece_end;
        }
        let done_chunk = move |o: &mut Vec<u8>| {
            encode_chunk_header(
                o,
                style,
                REPLY_FLAG_DONE,
                REPLY_TYPE_NONE,
                cookie,
                req_offset,
                0,
            )
        };
        if missing.is_empty() {
            d.batch().encode(done_chunk);
            d.end_reply(seq);
            let elapsed = received.elapsed();
            d.metrics().add_busy(Stage::ExecuteInline, elapsed);
            export
                .metrics
                .record(CommandKind::Read, u64::from(length), false, elapsed);
            return;
        }
        if sent_inline {
            // The final chunk may come from a worker: what is queued here
            // must be on the wire first. A send error resurfaces on the
            // next batch.
            let _ = d.flush();
        }
        let remaining = Arc::new(AtomicUsize::new(missing.len()));
        let failed = Arc::new(AtomicBool::new(false));
        for (pos, len) in missing {
            let export = Arc::clone(export);
            let (remaining, failed) = (Arc::clone(&remaining), Arc::clone(&failed));
            d.spawn(u64::from(len), move |mut job| {
                let started = Instant::now();
                let mut out = ReplyBuf::with_capacity(0);
                out.encode(|o| {
                    encode_read_data_header(o, style, cookie, req_offset, pos, len, false)
                });
                if let Err(e) = export.device.read_at(out.tail_mut(len as usize), pos) {
                    failed.store(true, Ordering::Relaxed);
                    let errno = nbd_errno(&e);
                    error!(error = &e as &dyn std::error::Error, "device read failed");
                    let message = format!("{errno}: {}", short_reason(&e));
                    out.clear();
                    out.encode(|o| {
                        encode_error_offset(
                            o, style, cookie, req_offset, errno, &message, pos, false,
                        )
                    });
                }
                job.metrics.add_busy(Stage::ExecutePool, started.elapsed());
                let _ = job.send(seq, out.into_vec());
                // Decrement only after sending, so the final chunk follows
                // every other piece on the wire.
                if remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    let mut last = Vec::with_capacity(32);
                    done_chunk(&mut last);
                    let _ = job.send(seq, last);
                    export.metrics.record(
                        CommandKind::Read,
                        u64::from(length),
                        failed.load(Ordering::Relaxed),
                        received.elapsed(),
                    );
                }
            });
        }
    }
}
