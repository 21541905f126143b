//! The two mappings between NBD and `sluice_storage` a remote device
//! needs, the inverses of the server's (`export::transmission_flags`
//! and `connection::nbd_errno` in sluice-server): transmission flags to a
//! [`Capability`], and a failed request to a [`DeviceError`].

use std::io;

use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{ClientRequest, NbdErrno, RequestError};
use sluice_storage::{BlockingClass, Capability, DeviceError, IoOp};

use crate::{ClientError, Op};

/// What an export with transmission `flags` can do. `extents` is whether
/// `base:allocation` was selected (no flag carries it), `min_block` the
/// server's minimum block size. Remote calls always block.
pub fn capability_from_flags(flags: u16, extents: bool, min_block: u32) -> Capability {
    let has = |f: u16| flags & f != 0;
    Capability {
        read_only: has(FLAG_READ_ONLY),
        flush: has(FLAG_SEND_FLUSH),
        fua: has(FLAG_SEND_FUA),
        trim: has(FLAG_SEND_TRIM),
        write_zeroes: has(FLAG_SEND_WRITE_ZEROES),
        fast_zero: has(FLAG_SEND_WRITE_ZEROES) && has(FLAG_SEND_FAST_ZERO),
        cache: has(FLAG_SEND_CACHE),
        extents,
        multi_conn: has(FLAG_CAN_MULTI_CONN),
        rotational: has(FLAG_ROTATIONAL),
        min_block: min_block.max(1),
        blocking: BlockingClass::Always,
    }
}

/// The storage operation a request to send stands for.
pub(crate) fn request_io_op(request: &ClientRequest<'_>) -> IoOp {
    match request {
        ClientRequest::Read { .. } => IoOp::Read,
        ClientRequest::Write { .. } => IoOp::Write,
        ClientRequest::Flush => IoOp::Flush,
        ClientRequest::Trim { .. } => IoOp::Trim,
        ClientRequest::WriteZeroes { .. } => IoOp::WriteZeroes,
        ClientRequest::BlockStatus { .. } => IoOp::Extents,
        _ => IoOp::Cache,
    }
}

/// The storage operation an NBD request stands for.
pub(crate) fn io_op(op: Op) -> IoOp {
    match op {
        Op::Read => IoOp::Read,
        Op::Write => IoOp::Write,
        Op::Flush => IoOp::Flush,
        Op::Trim => IoOp::Trim,
        Op::WriteZeroes => IoOp::WriteZeroes,
        Op::BlockStatus => IoOp::Extents,
        _ => IoOp::Cache,
    }
}

/// The OS errno that stands for an NBD errno.
fn os_errno(e: NbdErrno) -> i32 {
    match e {
        NbdErrno::Perm => libc::EPERM,
        NbdErrno::NoMem => libc::ENOMEM,
        NbdErrno::Inval => libc::EINVAL,
        NbdErrno::NoSpc => libc::ENOSPC,
        NbdErrno::Overflow => libc::EOVERFLOW,
        NbdErrno::NotSup => libc::EOPNOTSUPP,
        NbdErrno::Shutdown => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}

/// A failed request on `device` (of `size` bytes) as a [`DeviceError`]:
/// `EPERM` is a read-only refusal, `EINVAL` for a range past the end is
/// out of range, `ENOTSUP` unsupported; other errnos, and connection
/// failures, are I/O errors (no space keeps its errno, so
/// [`DeviceError::is_no_space`] still tells).
///
/// `op` is the operation asked for: an error that is not a request's
/// answer (the connection lost, the client closed) is reported as a
/// failure of that operation.
pub fn device_error(
    e: ClientError,
    op: IoOp,
    device: &str,
    offset: u64,
    len: u64,
    size: u64,
) -> DeviceError {
    let device = device.to_owned();
    let io_error = |op: Op, source: io::Error| DeviceError::Io {
        device: device.clone(),
        op: io_op(op),
        offset,
        len,
        source,
    };
    match e {
        ClientError::Request { op, errno, .. } => match errno {
            NbdErrno::Perm => DeviceError::ReadOnly {
                device,
                op: io_op(op),
            },
            NbdErrno::Inval if offset.checked_add(len).is_none_or(|end| end > size) => {
                DeviceError::OutOfRange {
                    device,
                    op: io_op(op),
                    offset,
                    len,
                    size,
                }
            }
            NbdErrno::NotSup => DeviceError::Unsupported {
                device,
                op: io_op(op),
                reason: "the server answered NBD_ENOTSUP",
            },
            errno => io_error(op, io::Error::from_raw_os_error(os_errno(errno))),
        },
        ClientError::Refused { op, source, .. } => match source {
            RequestError::ReadOnly(_) => DeviceError::ReadOnly {
                device,
                op: io_op(op),
            },
            _ => DeviceError::Unsupported {
                device,
                op: io_op(op),
                reason: "the server does not offer it",
            },
        },
        ClientError::Timeout { op, .. } => io_error(op, io::Error::new(io::ErrorKind::TimedOut, e)),
        // Its kind tells the caller the member is down, not slow.
        ClientError::Refusing { .. } => DeviceError::Io {
            device,
            op,
            offset,
            len,
            source: io::Error::new(io::ErrorKind::ConnectionRefused, e),
        },
        other => DeviceError::Io {
            device,
            op,
            offset,
            len,
            source: io::Error::other(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_map_onto_capabilities() {
        let c = capability_from_flags(
            FLAG_HAS_FLAGS | FLAG_SEND_FLUSH | FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_FAST_ZERO,
            true,
            512,
        );
        assert!(c.flush && c.fua && c.trim && c.extents && !c.read_only);
        // FAST_ZERO means nothing without WRITE_ZEROES.
        assert!(!c.write_zeroes && !c.fast_zero);
        assert_eq!((c.min_block, c.blocking), (512, BlockingClass::Always));
        let c = capability_from_flags(
            FLAG_HAS_FLAGS | FLAG_READ_ONLY | FLAG_CAN_MULTI_CONN,
            false,
            0,
        );
        assert!(c.read_only && c.multi_conn && !c.flush && !c.extents);
        assert_eq!(c.min_block, 1);
    }

    fn request(op: Op, errno: NbdErrno) -> ClientError {
        ClientError::Request {
            target: "t".into(),
            op,
            offset: 0,
            length: 0,
            errno,
            message: String::new(),
        }
    }

    #[test]
    fn errnos_map_onto_device_errors() {
        let e = device_error(
            request(Op::Write, NbdErrno::Perm),
            io_op(Op::Write),
            "d",
            0,
            1,
            10,
        );
        assert!(matches!(
            e,
            DeviceError::ReadOnly {
                op: IoOp::Write,
                ..
            }
        ));
        let e = device_error(
            request(Op::Read, NbdErrno::Inval),
            io_op(Op::Read),
            "d",
            8,
            4,
            10,
        );
        assert!(matches!(e, DeviceError::OutOfRange { size: 10, .. }));
        // EINVAL inside the device is not a range error.
        let e = device_error(
            request(Op::Read, NbdErrno::Inval),
            io_op(Op::Read),
            "d",
            0,
            4,
            10,
        );
        assert!(matches!(e, DeviceError::Io { .. }));
        let e = device_error(
            request(Op::WriteZeroes, NbdErrno::NotSup),
            io_op(Op::WriteZeroes),
            "d",
            0,
            4,
            10,
        );
        assert!(matches!(
            e,
            DeviceError::Unsupported {
                op: IoOp::WriteZeroes,
                ..
            }
        ));
        let e = device_error(
            request(Op::Write, NbdErrno::NoSpc),
            io_op(Op::Write),
            "d",
            0,
            4,
            10,
        );
        assert!(e.is_no_space());
        let e = device_error(
            request(Op::Flush, NbdErrno::Io),
            io_op(Op::Flush),
            "d",
            0,
            0,
            10,
        );
        let DeviceError::Io { op, source, .. } = e else {
            panic!("{e}")
        };
        assert_eq!((op, source.raw_os_error()), (IoOp::Flush, Some(libc::EIO)));
    }

    #[test]
    fn a_connection_failure_is_reported_as_the_operation_asked_for() {
        // A flush whose connection is gone was reported as "read of 0
        // bytes at offset 0".
        let closed = ClientError::Closed { target: "t".into() };
        let e = device_error(closed, IoOp::Flush, "d", 0, 0, 10);
        let DeviceError::Io { op, .. } = &e else {
            panic!("{e}")
        };
        assert_eq!(*op, IoOp::Flush);
        assert!(e.to_string().contains("flush"), "{e}");
    }
}
