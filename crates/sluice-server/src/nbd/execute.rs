//! Running NBD requests against an export's device and encoding their
//! replies; the mapping of device errors to NBD errnos.

use std::sync::Arc;
use std::time::Duration;

use sluice_nbd_proto::consts::{REPLY_FLAG_DONE, REPLY_TYPE_NONE, STATE_HOLE, STATE_ZERO};
use sluice_nbd_proto::{
    encode_block_status, encode_chunk_header, encode_error, encode_ok, encode_read_data_header,
    read_data_header_len, Command, Extent, NbdErrno, ReplyStyle, TransmissionParams,
};
use sluice_storage::{BlockingClass, DeviceError, ZeroMode};
use tracing::{debug, error, warn};

use crate::buffer::ReplyBuf;
use crate::driver::{Access, Execute, Outcome};
use crate::export::Export;
use crate::metrics::CommandKind;

/// Most extents in one block status reply.
const MAX_EXTENTS: usize = 1024;

/// The NBD error a device error becomes on the wire. The one place this
/// mapping lives.
pub(crate) fn nbd_errno(e: &DeviceError) -> NbdErrno {
    match e {
        DeviceError::ReadOnly { .. } => NbdErrno::Perm,
        DeviceError::OutOfRange { .. } => NbdErrno::Inval,
        DeviceError::Unsupported { .. } => NbdErrno::NotSup,
        e if e.is_no_space() => NbdErrno::NoSpc,
        _ => NbdErrno::Io,
    }
}

/// A validated request, ready to run anywhere.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request {
    pub(crate) cookie: u64,
    /// The offset field of the request header (echoed in replies).
    pub(crate) offset: u64,
    pub(crate) cmd: Command,
}

/// What running one session's requests needs: shared with the I/O pool.
#[derive(Debug)]
pub(crate) struct NbdExecutor {
    pub(crate) export: Arc<Export>,
    pub(crate) params: TransmissionParams,
    /// The negotiated `base:allocation` metadata context, if any.
    pub(crate) context_id: Option<u32>,
}

impl Execute for NbdExecutor {
    type Request = Request;

    #[inline]
    fn blocking(&self) -> BlockingClass {
        self.export.capability.blocking
    }

    #[inline]
    fn access(&self, request: &Request) -> Access {
        match request.cmd {
            Command::Read { .. } => Access::Read,
            Command::Flush => Access::Flush,
            Command::Write { fua: true, .. }
            | Command::Trim { fua: true, .. }
            | Command::WriteZeroes { fua: true, .. } => Access::Durable,
            _ => Access::Buffered,
        }
    }

    #[inline]
    fn in_flight_bytes(&self, request: &Request) -> u64 {
        match request.cmd {
            Command::Read { length, .. } | Command::Write { length, .. } => u64::from(length),
            _ => 0,
        }
    }

    fn execute(
        &self,
        request: &Request,
        payload: &[u8],
        nowait: bool,
        out: &mut ReplyBuf,
    ) -> Outcome {
        request.execute(self, payload, nowait, out)
    }

    #[inline]
    fn completed(&self, request: &Request, failed: bool, latency: Duration) {
        let (kind, bytes) = metric_kind(&request.cmd);
        self.export.metrics.record(kind, bytes, failed, latency);
    }
}

/// The metrics series and byte count of a command.
fn metric_kind(cmd: &Command) -> (CommandKind, u64) {
    match *cmd {
        Command::Read { length, .. } => (CommandKind::Read, u64::from(length)),
        Command::Write { length, .. } => (CommandKind::Write, u64::from(length)),
        Command::Flush | Command::Disconnect => (CommandKind::Flush, 0),
        Command::Trim { length, .. } => (CommandKind::Trim, length),
        Command::Cache { length, .. } => (CommandKind::Cache, length),
        Command::WriteZeroes { length, .. } => (CommandKind::WriteZeroes, length),
        Command::BlockStatus { .. } => (CommandKind::BlockStatus, 0),
    }
}

impl Request {
    /// Runs the command against the device and appends its complete reply
    /// to `out`. With `nowait`, a read or flush that would block appends nothing
    /// and returns [`Outcome::WouldBlock`].
    fn execute(
        &self,
        exec: &NbdExecutor,
        payload: &[u8],
        nowait: bool,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let style = exec.params.reply_style;
        let device = exec.export.device.as_ref();
        let result = match self.cmd {
            Command::Read { offset, length, .. } => {
                return self.read(exec, offset, length, nowait, out);
            }
            Command::Write { offset, fua, .. } => device.write_at(payload, offset, fua),
            Command::Flush if nowait => match device.flush_nowait() {
                Ok(true) => Ok(()),
                Ok(false) => return Outcome::WouldBlock,
                Err(e) => Err(e),
            },
            Command::Flush => device.flush(),
            Command::Trim {
                offset,
                length,
                fua,
            } => device.trim(offset, length, fua),
            Command::Cache { offset, length } => device.cache(offset, length),
            Command::WriteZeroes {
                offset,
                length,
                fua,
                may_trim,
                fast,
            } => device.write_zeroes(
                offset,
                length,
                ZeroMode {
                    may_trim,
                    fast,
                    fua,
                },
            ),
            Command::BlockStatus {
                offset,
                length,
                req_one,
            } => match self.block_status(exec, offset, length, req_one, out) {
                // Block status encoded its own reply.
                Ok(()) => return Outcome::Done { failed: false },
                Err(e) => Err(e),
            },
            Command::Disconnect => Ok(()),
        };
        let failed = encode_result(out, style, self.cookie, self.offset, result);
        Outcome::Done { failed }
    }

    fn read(
        &self,
        exec: &NbdExecutor,
        offset: u64,
        length: u32,
        nowait: bool,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let style = exec.params.reply_style;
        let (cookie, req_offset) = (self.cookie, self.offset);
        if length == 0 {
            out.encode(|o| match style {
                ReplyStyle::Simple => encode_ok(o, style, cookie, req_offset),
                _ => encode_chunk_header(
                    o,
                    style,
                    REPLY_FLAG_DONE,
                    REPLY_TYPE_NONE,
                    cookie,
                    req_offset,
                    0,
                ),
            });
            return Outcome::Done { failed: false };
        }
        let start = out.len();
        out.encode(|o| encode_read_data_header(o, style, cookie, req_offset, offset, length, true));
        debug_assert_eq!(out.len() - start, read_data_header_len(style));
        let data = out.tail_mut(length as usize);
        let device = exec.export.device.as_ref();
        let read = if nowait {
            device.read_at_nowait(data, offset)
        } else {
            device.read_at(data, offset).map(|()| true)
        };
        match read {
            Ok(true) => Outcome::Done { failed: false },
            Ok(false) => {
                out.truncate(start);
                Outcome::WouldBlock
            }
            Err(e) => {
                out.truncate(start);
                let failed = encode_result(out, style, cookie, req_offset, Err(e));
                Outcome::Done { failed }
            }
        }
    }

    fn block_status(
        &self,
        exec: &NbdExecutor,
        offset: u64,
        length: u64,
        req_one: bool,
        out: &mut ReplyBuf,
    ) -> Result<(), DeviceError> {
        let export = &exec.export;
        let max = if req_one { 1 } else { MAX_EXTENTS };
        let extents: Vec<Extent> = if export.capability.extents {
            export
                .device
                .extents(offset, length, max)?
                .into_iter()
                .map(|e| Extent {
                    length: e.length,
                    flags: if e.hole { STATE_HOLE } else { 0 }
                        | if e.zero { STATE_ZERO } else { 0 },
                })
                .collect()
        } else {
            vec![Extent { length, flags: 0 }]
        };
        // validate() admits BLOCK_STATUS only with a selected context.
        let id = exec
            .context_id
            .unwrap_or(sluice_nbd_proto::BASE_ALLOCATION_ID);
        let (cookie, req_offset, style) = (self.cookie, self.offset, exec.params.reply_style);
        out.encode(|o| encode_block_status(o, style, cookie, req_offset, id, &extents));
        Ok(())
    }
}

/// Encodes the reply to a request with no data to return: success, or the
/// error (logged). Returns whether it failed.
pub(crate) fn encode_result(
    out: &mut ReplyBuf,
    style: ReplyStyle,
    cookie: u64,
    req_offset: u64,
    result: Result<(), DeviceError>,
) -> bool {
    match result {
        Ok(()) => {
            out.encode(|o| encode_ok(o, style, cookie, req_offset));
            false
        }
        Err(e) => {
            let errno = nbd_errno(&e);
            if errno == NbdErrno::Io {
                error!(error = &e as &dyn std::error::Error, "device I/O failed");
            } else if errno == NbdErrno::NoSpc {
                // The operator's to fix (a sparse export outgrew its
                // filesystem): not only the client should hear of it.
                warn!(
                    error = &e as &dyn std::error::Error,
                    "no space left for the export's data; the client got ENOSPC"
                );
            } else {
                debug!(error = &e as &dyn std::error::Error, %errno, "request failed");
            }
            let message = format!("{errno}: {}", short_reason(&e));
            out.encode(|o| encode_error(o, style, cookie, req_offset, errno, &message));
            true
        }
    }
}

/// A client-safe reason: the kind of failure without server paths.
pub(crate) fn short_reason(e: &DeviceError) -> String {
    match e {
        DeviceError::Io { op, source, .. } => format!("{op} failed: {}", source.kind()),
        DeviceError::ReadOnly { op, .. } => format!("{op} refused: export is read-only"),
        DeviceError::OutOfRange { op, .. } => format!("{op} outside the export"),
        DeviceError::Unsupported { op, reason, .. } => format!("{op} not supported: {reason}"),
        other => other.to_string(),
    }
}
