use std::fmt;
use std::io;

use thiserror::Error;

/// The operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IoOp {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
    Extents,
    Cache,
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Trim => "trim",
            Self::WriteZeroes => "write zeroes",
            Self::Extents => "block status",
            Self::Cache => "cache",
        })
    }
}

/// A failed device operation, naming the device, operation and range.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The operating system reported an error.
    #[error("{op} of {len} bytes at offset {offset} on {device} failed")]
    Io {
        device: String,
        op: IoOp,
        offset: u64,
        len: u64,
        source: io::Error,
    },
    /// A write-type operation on a read-only device.
    #[error("{op} refused: {device} is read-only")]
    ReadOnly { device: String, op: IoOp },
    /// The range does not lie inside the device.
    #[error("{op} of {len} bytes at offset {offset} is outside {device} (size {size})")]
    OutOfRange {
        device: String,
        op: IoOp,
        offset: u64,
        len: u64,
        size: u64,
    },
    /// The device cannot do this (quickly enough), e.g. a fast zero.
    #[error("{op} not supported by {device}: {reason}")]
    Unsupported {
        device: String,
        op: IoOp,
        reason: &'static str,
    },
}

impl DeviceError {
    /// Whether the backing store ran out of space (ENOSPC, EDQUOT, EFBIG).
    pub fn is_no_space(&self) -> bool {
        match self {
            Self::Io { source, .. } => {
                let code = source.raw_os_error();
                code == Some(rustix::io::Errno::NOSPC.raw_os_error())
                    || code == Some(rustix::io::Errno::DQUOT.raw_os_error())
                    || code == Some(rustix::io::Errno::FBIG.raw_os_error())
            }
            _ => false,
        }
    }
}
