//! [`RemoteDevice`]: a [`BlockDevice`] whose bytes live on an NBD server,
//! so a remote export can stand wherever a local device does (a RAID
//! member, a cache's backing store). Requests go through a [`Client`]
//! (many callers at once, one connection, replies out of order), with
//! reconnecting on by default; reads land straight in the caller's
//! buffer.

use std::time::Duration;

use sluice_nbd_proto::consts::{STATE_HOLE, STATE_ZERO};
use sluice_nbd_proto::{ClientRequest, HeaderStyle};
use sluice_storage::{BlockDevice, Capability, DeviceError, Extent, IoOp, ZeroMode};

use super::bridge::{capability_from_flags, device_error, request_io_op};
use crate::{Client, ClientError, ConnectOptions, NbdUri, Reconnect, Reply};

/// How long a remote device keeps trying to get a lost server back.
pub const DEFAULT_RECONNECT_WINDOW: Duration = Duration::from_secs(30);

/// An NBD export as a block device.
#[derive(Debug)]
pub struct RemoteDevice {
    client: Client,
    name: String,
    capability: Capability,
    /// Largest READ or WRITE payload the server takes.
    max_payload: usize,
}

impl RemoteDevice {
    /// Connects to the export an NBD URI names, with reconnecting on
    /// ([`DEFAULT_RECONNECT_WINDOW`]).
    pub fn open(uri: &str) -> Result<Self, ClientError> {
        let options = ConnectOptions {
            reconnect: Reconnect::within(DEFAULT_RECONNECT_WINDOW),
            ..ConnectOptions::default()
        };
        Self::connect(&uri.parse()?, &options)
    }

    /// Connects to `uri` with `options`.
    pub fn connect(uri: &NbdUri, options: &ConnectOptions) -> Result<Self, ClientError> {
        let client = Client::connect(uri, options)?;
        let d = client.details();
        let capability = capability_from_flags(
            d.flags,
            d.base_allocation_id.is_some(),
            d.block_sizes.minimum,
        );
        let max_payload = (d.block_sizes.maximum_payload as usize).clamp(4096, 32 << 20);
        Ok(Self {
            name: format!("remote export {uri}"),
            client,
            capability,
            max_payload,
        })
    }

    /// The client underneath.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The name errors give this device.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client error on a request for `[offset, offset+len)` as a
    /// device error.
    pub(crate) fn error(&self, e: ClientError, op: IoOp, offset: u64, len: u64) -> DeviceError {
        device_error(e, op, &self.name, offset, len, self.size())
    }

    /// Refuses, before anything is sent, a request for `[offset,
    /// offset+len)` past the end of the export, and one that would change
    /// a read-only export (a trim too, even where the server would
    /// ignore it).
    pub(crate) fn check(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DeviceError> {
        sluice_storage::check_range(&self.name, op, self.size(), offset, len)?;
        if self.capability.read_only && matches!(op, IoOp::Write | IoOp::Trim | IoOp::WriteZeroes) {
            return Err(DeviceError::ReadOnly {
                device: self.name.clone(),
                op,
            });
        }
        Ok(())
    }

    fn call(
        &self,
        request: ClientRequest<'_>,
        offset: u64,
        len: u64,
    ) -> Result<Reply, DeviceError> {
        let op = request_io_op(&request);
        self.client
            .call_blocking(request)
            .map_err(|e| device_error(e, op, &self.name, offset, len, self.size()))
    }
}

impl BlockDevice for RemoteDevice {
    fn size(&self) -> u64 {
        self.client.details().size
    }

    fn capability(&self) -> Capability {
        self.capability
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        self.check(IoOp::Read, offset, buf.len() as u64)?;
        let mut at = offset;
        for piece in buf.chunks_mut(self.max_payload) {
            let len = piece.len() as u64;
            self.client
                .read_at(piece, at)
                .map_err(|e| device_error(e, IoOp::Read, &self.name, at, len, self.size()))?;
            at += len;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check(IoOp::Write, offset, buf.len() as u64)?;
        let mut at = offset;
        for data in buf.chunks(self.max_payload) {
            let len = data.len() as u64;
            self.call(
                ClientRequest::Write {
                    offset: at,
                    data,
                    fua,
                },
                at,
                len,
            )?;
            at += len;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if !self.capability.flush {
            // The server has no volatile cache to flush.
            return Ok(());
        }
        self.call(ClientRequest::Flush, 0, 0).map(drop)
    }

    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.check(IoOp::Trim, offset, length)?;
        if !self.capability.trim {
            // A hint the server does not take.
            return Ok(());
        }
        for (at, len) in pieces(offset, length, self.max_length()) {
            self.call(
                ClientRequest::Trim {
                    offset: at,
                    length: len,
                    fua,
                },
                at,
                len,
            )?;
        }
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check(IoOp::WriteZeroes, offset, length)?;
        if mode.fast && !self.capability.fast_zero {
            return Err(DeviceError::Unsupported {
                device: self.name.clone(),
                op: IoOp::WriteZeroes,
                reason: "the server does not offer NBD_CMD_FLAG_FAST_ZERO",
            });
        }
        if !self.capability.write_zeroes {
            let zeroes = vec![0u8; self.max_payload.min(length as usize)];
            for (at, len) in pieces(offset, length, zeroes.len() as u64) {
                self.write_at(&zeroes[..len as usize], at, mode.fua)?;
            }
            return Ok(());
        }
        for (at, len) in pieces(offset, length, self.max_length()) {
            let request = ClientRequest::WriteZeroes {
                offset: at,
                length: len,
                no_hole: !mode.may_trim,
                fast: mode.fast,
                fua: mode.fua,
            };
            self.call(request, at, len)?;
        }
        Ok(())
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        self.check(IoOp::Extents, offset, length)?;
        if !self.capability.extents {
            return Ok(vec![Extent {
                length,
                hole: false,
                zero: false,
            }]);
        }
        // A server may describe less than was asked for (NBD lets it stop
        // early); ask again from where it stopped until the range is
        // covered or the caller has as many extents as it wants.
        let max_extents = max_extents.max(1);
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        let end = offset + length;
        while at < end && out.len() < max_extents {
            let request = ClientRequest::BlockStatus {
                offset: at,
                length: (end - at).min(self.max_length()),
                req_one: max_extents - out.len() == 1,
            };
            let got = match self.call(request, at, end - at)? {
                // Each answer must move on, or this would ask forever.
                Reply::Extents(got) if got.iter().any(|e| e.length > 0) => got,
                _ => {
                    return Err(self.error(
                        ClientError::Violation {
                            target: self.client.details().target.clone(),
                            reason: format!(
                                "block status at {at} answered without extents to move on by"
                            ),
                        },
                        IoOp::Extents,
                        at,
                        end - at,
                    ))
                }
            };
            for e in got {
                if at == end || out.len() == max_extents {
                    break;
                }
                let len = e.length.min(end - at);
                let extent = Extent {
                    length: len,
                    hole: e.flags & STATE_HOLE != 0,
                    zero: e.flags & STATE_ZERO != 0,
                };
                match out.last_mut() {
                    // The same state across two answers is one extent.
                    Some(last) if (last.hole, last.zero) == (extent.hole, extent.zero) => {
                        last.length += len;
                    }
                    _ => out.push(extent),
                }
                at += len;
            }
        }
        Ok(out)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        self.check(IoOp::Cache, offset, length)?;
        if !self.capability.cache {
            return Ok(());
        }
        for (at, len) in pieces(offset, length, self.max_length()) {
            self.call(
                ClientRequest::Cache {
                    offset: at,
                    length: len,
                },
                at,
                len,
            )?;
        }
        Ok(())
    }
}

impl RemoteDevice {
    /// Longest length one trim, zero, cache or block status may name.
    fn max_length(&self) -> u64 {
        match self.client.details().header_style {
            HeaderStyle::Extended => 1 << 62,
            // Compact headers carry 32 bits; stay block-aligned.
            _ => 0xFFFF_F000,
        }
    }
}

/// `[offset, offset+length)` in pieces of at most `max` bytes.
fn pieces(offset: u64, length: u64, max: u64) -> impl Iterator<Item = (u64, u64)> {
    let max = max.max(1);
    (0..length.div_ceil(max)).map(move |i| {
        let at = i * max;
        (offset + at, max.min(length - at))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_range() {
        assert_eq!(pieces(10, 0, 4).count(), 0);
        assert_eq!(
            pieces(10, 9, 4).collect::<Vec<_>>(),
            vec![(10, 4), (14, 4), (18, 1)]
        );
    }
}
