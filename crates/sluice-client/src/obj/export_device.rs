//! [`ExportDevice`]: a block export of a sluice server as a
//! [`BlockDevice`], reached over the native protocol instead of NBD.
//! Reads and writes are extent commands on a [`SharedObjClient`], so
//! many threads share one connection and, when many requests are in
//! flight, temporal merge sends those waiting as one extent command
//! whose scatter/gather list names each one's range (`fuse.rs`), under
//! the client's merge policy (`off`, `always`, `adaptive`). NBD cannot
//! carry such a command; this is the block path that merges.
//!
//! [`BlockDevice::flush`] is a FLUSH of the attached export (its device,
//! cache included, made durable), where the server offers it (the
//! `EXPORT_FLUSH` feature; refused as `Unsupported` by one that does
//! not). The native protocol has no trim, zeroing or allocation status:
//! trims are dropped (a hint), zeroes are written as data, and the whole
//! export reads as data.

use std::io;

use sluice_obj_proto::{Features, FlushScope};
use sluice_storage::{BlockDevice, BlockingClass, Capability, DeviceError, Extent, IoOp, ZeroMode};

use super::{ErrorCode, ObjError, ObjOptions, Segment, SharedObjClient};
use crate::net::uri::ExportUri;
use crate::Durability;

/// A sluice server's block export over the native protocol.
#[derive(Debug)]
pub struct ExportDevice {
    client: SharedObjClient,
    /// The export's handle in the session.
    handle: u64,
    size: u64,
    read_only: bool,
    /// The name errors give this device.
    name: String,
}

impl ExportDevice {
    /// Connects to the server of `uri` and attaches its export, with the
    /// merge policy of the URI or else of `options` (whose own
    /// `exports` are ignored).
    pub fn connect(uri: &ExportUri, options: &ObjOptions) -> Result<Self, ObjError> {
        let options = ObjOptions {
            exports: vec![uri.export.clone()],
            ..options.clone()
        };
        let client = SharedObjClient::connect(&uri.server, &options)?;
        let attached = client
            .session()
            .exports
            .iter()
            .find(|e| e.name == uri.export)
            .cloned();
        let Some(export) = attached else {
            return Err(ObjError::Violation {
                server: client.server().to_owned(),
                reason: format!("export {:?} was not attached", uri.export),
            });
        };
        Ok(Self {
            client,
            handle: export.handle,
            size: export.size,
            read_only: export.read_only,
            name: format!("remote export {uri}"),
        })
    }

    /// The client underneath (its merge policy and statistics).
    pub fn client(&self) -> &SharedObjClient {
        &self.client
    }

    /// The name errors give this device.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn check(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        sluice_storage::check_range(&self.name, op, self.size, offset, len)?;
        if self.read_only && matches!(op, IoOp::Write | IoOp::WriteZeroes) {
            return Err(DeviceError::ReadOnly {
                device: self.name.clone(),
                op,
            });
        }
        Ok(())
    }

    /// An object client error on `[offset, offset+len)` as a device
    /// error: the server's read-only and out-of-range refusals as
    /// theirs, anything else as I/O.
    fn error(&self, e: ObjError, op: IoOp, offset: u64, len: u64) -> DeviceError {
        let device = self.name.clone();
        match &e {
            ObjError::Server {
                code: ErrorCode::ReadOnly,
                ..
            } => DeviceError::ReadOnly { device, op },
            ObjError::Server {
                code: ErrorCode::OutOfRange,
                ..
            } => DeviceError::OutOfRange {
                device,
                op,
                offset,
                len,
                size: self.size,
            },
            _ => DeviceError::Io {
                device,
                op,
                offset,
                len,
                source: io::Error::other(e),
            },
        }
    }
}

impl BlockDevice for ExportDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn capability(&self) -> Capability {
        Capability {
            read_only: self.read_only,
            flush: self
                .client
                .session()
                .features
                .contains(Features::EXPORT_FLUSH),
            fua: true,
            trim: false,
            write_zeroes: false,
            fast_zero: false,
            cache: false,
            extents: false,
            multi_conn: false,
            rotational: false,
            min_block: 1,
            blocking: BlockingClass::Always,
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        self.check(IoOp::Read, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let segment = [Segment {
            offset,
            length: len,
        }];
        let reply = self
            .client
            .extent_read(self.handle, &segment)
            .map_err(|e| self.error(e, IoOp::Read, offset, len))?;
        if reply.data.len() != buf.len() {
            let e = ObjError::Violation {
                server: self.client.server().to_owned(),
                reason: format!("{} bytes read for {len}", reply.data.len()),
            };
            return Err(self.error(e, IoOp::Read, offset, len));
        }
        buf.copy_from_slice(&reply.data);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        self.check(IoOp::Write, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let segment = [Segment {
            offset,
            length: len,
        }];
        self.client
            .extent_write(self.handle, &segment, buf, Durability::from_fua(fua))
            .map_err(|e| self.error(e, IoOp::Write, offset, len))
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if !self
            .client
            .session()
            .features
            .contains(Features::EXPORT_FLUSH)
        {
            return Err(DeviceError::Unsupported {
                device: self.name.clone(),
                op: IoOp::Flush,
                reason: "the server does not flush attached exports (write with FUA)",
            });
        }
        self.client
            .flush(FlushScope::Export(self.handle))
            .map_err(|e| self.error(e, IoOp::Flush, 0, 0))
    }

    fn trim(&self, offset: u64, length: u64, _fua: bool) -> Result<(), DeviceError> {
        // A hint the protocol does not carry.
        self.check(IoOp::Trim, offset, length)
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check(IoOp::WriteZeroes, offset, length)?;
        if mode.fast {
            return Err(DeviceError::Unsupported {
                device: self.name.clone(),
                op: IoOp::WriteZeroes,
                reason: "the native protocol has no fast zeroing",
            });
        }
        let zeroes = vec![0u8; length.min(1 << 20) as usize];
        let mut at = offset;
        let end = offset + length;
        while at < end {
            let n = (end - at).min(zeroes.len() as u64);
            self.write_at(&zeroes[..n as usize], at, mode.fua)?;
            at += n;
        }
        Ok(())
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        _max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.check(IoOp::Extents, offset, length)?;
        Ok(vec![Extent {
            length,
            hole: false,
            zero: false,
        }])
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.check(IoOp::Cache, offset, length)
    }
}
