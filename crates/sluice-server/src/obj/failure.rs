//! A request that failed in execution: its reply status and message,
//! and the one mapping of store and device errors to reply statuses.

use sluice_obj_proto::{ErrorCode, Opcode, ReplyHeader, RequestHeader};
use sluice_objstore::ObjStoreError;
use sluice_storage::DeviceError;
use tracing::debug;

use crate::buffer::ReplyBuf;

/// A failed request: the reply's status and message.
pub(super) struct Failure {
    pub(super) code: ErrorCode,
    pub(super) message: String,
}

impl Failure {
    pub(super) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<ObjStoreError> for Failure {
    fn from(e: ObjStoreError) -> Self {
        Self::new(store_code(&e), e.to_string())
    }
}

impl From<DeviceError> for Failure {
    fn from(e: DeviceError) -> Self {
        Self::new(device_code(&e), e.to_string())
    }
}

/// The reply status for a store error (the one place this mapping lives).
fn store_code(e: &ObjStoreError) -> ErrorCode {
    match e {
        ObjStoreError::UnknownPartition { .. } => ErrorCode::NoSuchPartition,
        ObjStoreError::UnknownObject { .. } => ErrorCode::NoSuchObject,
        ObjStoreError::UnknownCollection { .. } => ErrorCode::NoSuchCollection,
        ObjStoreError::AttributeTooLarge { .. } => ErrorCode::AttrTooLarge,
        ObjStoreError::OutOfRange { .. } => ErrorCode::OutOfRange,
        ObjStoreError::PayloadLength { .. } => ErrorCode::LengthMismatch,
        ObjStoreError::Io { source, .. } | ObjStoreError::StoreIo { source, .. } => io_code(source),
        ObjStoreError::Metadata { .. }
        | ObjStoreError::Commit { .. }
        | ObjStoreError::RolledBackWith { .. }
        | ObjStoreError::ChangePanicked
        | ObjStoreError::NotApplied { .. }
        | ObjStoreError::ReplaceUnfinished { .. } => ErrorCode::Io,
        _ => ErrorCode::Invalid,
    }
}

fn io_code(e: &std::io::Error) -> ErrorCode {
    use rustix::io::Errno;
    match e.raw_os_error() {
        Some(c) if c == Errno::NOSPC.raw_os_error() || c == Errno::DQUOT.raw_os_error() => {
            ErrorCode::NoSpace
        }
        Some(c) if c == Errno::ACCESS.raw_os_error() || c == Errno::PERM.raw_os_error() => {
            ErrorCode::Permission
        }
        _ => ErrorCode::Io,
    }
}

/// The reply status for a device error on an attached export.
fn device_code(e: &DeviceError) -> ErrorCode {
    match e {
        DeviceError::ReadOnly { .. } => ErrorCode::ReadOnly,
        DeviceError::OutOfRange { .. } => ErrorCode::OutOfRange,
        e if e.is_no_space() => ErrorCode::NoSpace,
        _ => ErrorCode::Io,
    }
}

/// Appends the error reply for a failed request.
pub(super) fn reply_failure(h: &RequestHeader, f: &Failure, out: &mut ReplyBuf) {
    debug!(id = h.id, opcode = ?Opcode::from_wire(h.opcode), error = %f.message, "request failed");
    out.encode(|o| ReplyHeader::encode_error(h.id, f.code, &f.message, o));
}
