//! Writes larger than a connection should buffer: the payload is received
//! into the device in pieces, so a connection holds at most one piece of
//! it however large `--max-request-size` allows requests to be.

use std::time::Instant;

use sluice_nbd_proto::{Command, RequestHeader};

use super::execute::encode_result;
use super::NbdSession;
use crate::driver::{Dispatch, DriverError, Frame, PayloadIo, Taken};
use crate::metrics::{CommandKind, Stage};

/// Bytes written to the device at a time.
pub(super) const WRITE_PIECE: usize = 1 << 20;
/// Writes up to this long are buffered whole as before (NBD's suggested
/// maximum payload: what clients that respect the limits send), unless
/// the connection's in-flight limit is lower.
const BUFFERED_WRITE_MAX: u64 = 32 << 20;

impl NbdSession {
    /// Takes a valid write whose payload is larger than the connection
    /// may buffer: each piece is written as it arrives, the reply sent
    /// once all of it is in (an error reply if any piece failed; the rest
    /// of the payload is still read, so the connection stays usable).
    /// Anything else is left to the buffer.
    pub(super) fn piecewise_write(
        &mut self,
        frame: &Frame<RequestHeader>,
        io: &mut PayloadIo<'_>,
        d: &mut Dispatch,
    ) -> Result<Taken, DriverError> {
        let payload = (frame.len - frame.header_len) as u64;
        let buffered_max = BUFFERED_WRITE_MAX
            .min(d.max_inflight_bytes())
            .max(WRITE_PIECE as u64);
        if payload <= buffered_max {
            return Ok(Taken::No);
        }
        let Ok(Command::Write {
            offset,
            length,
            fua,
        }) = self.exec.params.validate(&frame.head)
        else {
            return Ok(Taken::No);
        };
        // Replies already made go out first: receiving the payload may
        // take a while.
        d.flush()?;
        let received = Instant::now();
        let seq = d.take_seq();
        let (cookie, req_offset) = (frame.head.cookie, frame.head.offset);
        io.buf().consume(frame.header_len);
        io.buf().reserve_message(WRITE_PIECE);
        let device = self.exec.export.device.as_ref();
        let length = length as usize;
        let mut done = 0usize;
        let mut result = Ok(());
        while done < length {
            let want = WRITE_PIECE.min(length - done);
            while io.buf().data().len() < want {
                if !io.receive_more()? {
                    return Ok(Taken::Eof);
                }
            }
            if result.is_ok() {
                let piece = &io.buf().data()[..want];
                result = device.write_at(piece, offset + done as u64, fua);
            }
            io.buf().consume(want);
            done += want;
        }
        let style = self.exec.params.reply_style;
        let failed = encode_result(d.batch(), style, cookie, req_offset, result);
        d.end_reply(seq);
        let finished = Instant::now();
        d.metrics()
            .add_busy(Stage::ExecuteInline, finished - received);
        self.exec.export.metrics.record(
            CommandKind::Write,
            length as u64,
            failed,
            finished - received,
        );
        Ok(Taken::Done)
    }
}
