//! The error values NBD allows on the wire.

use std::fmt;

/// An NBD error value (the `error` field of a reply). Only the values the
/// specification defines can be constructed, so a reply never carries a
/// host errno by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NbdErrno {
    /// `NBD_EPERM` (1): write or trim on a read-only export.
    Perm,
    /// `NBD_EIO` (5): the device failed.
    Io,
    /// `NBD_ENOMEM` (12).
    NoMem,
    /// `NBD_EINVAL` (22): bad flags, unknown command, range past the end.
    Inval,
    /// `NBD_ENOSPC` (28): write past the end, or the backing store is full.
    NoSpc,
    /// `NBD_EOVERFLOW` (75): request too large.
    Overflow,
    /// `NBD_ENOTSUP` (95): fast zero not possible.
    NotSup,
    /// `NBD_ESHUTDOWN` (108): server shutting down.
    Shutdown,
}

impl NbdErrno {
    /// The value sent on the wire.
    pub const fn code(self) -> u32 {
        match self {
            Self::Perm => 1,
            Self::Io => 5,
            Self::NoMem => 12,
            Self::Inval => 22,
            Self::NoSpc => 28,
            Self::Overflow => 75,
            Self::NotSup => 95,
            Self::Shutdown => 108,
        }
    }

    /// Decode a wire value; unknown values read as `EINVAL`, as the spec
    /// tells clients to treat them.
    pub const fn from_code(code: u32) -> Self {
        match code {
            1 => Self::Perm,
            5 => Self::Io,
            12 => Self::NoMem,
            28 => Self::NoSpc,
            75 => Self::Overflow,
            95 => Self::NotSup,
            108 => Self::Shutdown,
            _ => Self::Inval,
        }
    }
}

impl fmt::Display for NbdErrno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Perm => "NBD_EPERM",
            Self::Io => "NBD_EIO",
            Self::NoMem => "NBD_ENOMEM",
            Self::Inval => "NBD_EINVAL",
            Self::NoSpc => "NBD_ENOSPC",
            Self::Overflow => "NBD_EOVERFLOW",
            Self::NotSup => "NBD_ENOTSUP",
            Self::Shutdown => "NBD_ESHUTDOWN",
        };
        f.write_str(name)
    }
}
