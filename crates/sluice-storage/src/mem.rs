//! A sparse in-memory device.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::{
    check_range, BlockDevice, BlockingClass, Capability, DeviceError, Extent, IoOp, ZeroMode,
};

/// Allocation unit: pages are allocated on first write.
const PAGE: u64 = 64 * 1024;
/// Independent locks; a request only takes the locks of the pages it touches.
const SHARDS: usize = 64;

type Shard = RwLock<HashMap<u64, Box<[u8]>>>;

/// A sparse RAM disk: unwritten pages read as zeroes and cost nothing.
/// Pages live in sharded maps so requests to different pages never
/// contend on one lock. Contents are lost when the process exits, so
/// flush is a no-op and it reports FUA and flush as trivially satisfied.
#[derive(Debug)]
pub struct MemDevice {
    size: u64,
    read_only: bool,
    shards: Box<[Shard]>,
}

/// Bytes of memory the machine has (sysinfo(2)), 0 if unknown.
// (`totalram` is a u64 on 64-bit targets and narrower on others.)
#[allow(clippy::useless_conversion)]
pub fn machine_memory() -> u64 {
    let info = rustix::system::sysinfo();
    u64::from(info.totalram).saturating_mul(u64::from(info.mem_unit))
}

impl MemDevice {
    /// A zero-filled device of `size` bytes. Larger than the machine's
    /// memory it is still made (pages are allocated on first write), with
    /// a warning: callers that must refuse that check
    /// [`machine_memory`] first.
    pub fn new(size: u64, read_only: bool) -> Self {
        let memory = machine_memory();
        if memory > 0 && size > memory {
            tracing::warn!(
                size,
                memory,
                "a RAM disk of {size} bytes is larger than this machine's memory ({memory} bytes); writes past that will fail"
            );
        }
        let shards = (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect();
        Self {
            size,
            read_only,
            shards,
        }
    }

    fn shard(&self, page: u64) -> &Shard {
        &self.shards[(page % SHARDS as u64) as usize]
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).len() as u64 * PAGE)
            .sum()
    }

    /// Calls `f(page, offset_in_page, range_in_buf)` for each page piece of
    /// `[offset, offset+len)`.
    fn for_each_piece(
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0u64;
        while done < len {
            let pos = offset + done;
            let page = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = (PAGE - pos % PAGE).min(len - done);
            f(page, in_page, done as usize..(done + n) as usize);
            done += n;
        }
    }

    fn check_writable(&self, op: IoOp) -> Result<(), DeviceError> {
        if self.read_only {
            Err(DeviceError::ReadOnly {
                device: "memory device".into(),
                op,
            })
        } else {
            Ok(())
        }
    }

    fn zero_range(&self, offset: u64, length: u64, deallocate: bool) {
        Self::for_each_piece(offset, length, |page, in_page, range| {
            let mut shard = self.shard(page).write().unwrap_or_else(|p| p.into_inner());
            if range.len() as u64 == PAGE && deallocate {
                shard.remove(&page);
            } else if let Some(data) = shard.get_mut(&page) {
                data[in_page..in_page + range.len()].fill(0);
            } else if !deallocate {
                shard.insert(page, vec![0u8; PAGE as usize].into_boxed_slice());
            }
        });
    }
}

impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn capability(&self) -> Capability {
        Capability {
            read_only: self.read_only,
            flush: !self.read_only,
            fua: !self.read_only,
            trim: !self.read_only,
            write_zeroes: !self.read_only,
            fast_zero: !self.read_only,
            cache: true,
            extents: true,
            multi_conn: true,
            rotational: false,
            min_block: 1,
            blocking: BlockingClass::Never,
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(
            "memory device",
            IoOp::Read,
            self.size,
            offset,
            buf.len() as u64,
        )?;
        Self::for_each_piece(offset, buf.len() as u64, |page, in_page, range| {
            let shard = self.shard(page).read().unwrap_or_else(|p| p.into_inner());
            let n = range.len();
            match shard.get(&page) {
                Some(data) => buf[range].copy_from_slice(&data[in_page..in_page + n]),
                None => buf[range].fill(0),
            }
        });
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Write)?;
        check_range(
            "memory device",
            IoOp::Write,
            self.size,
            offset,
            buf.len() as u64,
        )?;
        Self::for_each_piece(offset, buf.len() as u64, |page, in_page, range| {
            let mut shard = self.shard(page).write().unwrap_or_else(|p| p.into_inner());
            let n = range.len();
            let data = shard
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            data[in_page..in_page + n].copy_from_slice(&buf[range]);
        });
        Ok(())
    }

    /// One lock and one page lookup per run of pieces in the same page,
    /// not per piece: a view of 8-byte blocks fills a page from thousands
    /// of pieces.
    fn write_pieces(&self, pieces: &[(u64, &[u8])], _fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Write)?;
        for &(offset, bytes) in pieces {
            check_range(
                "memory device",
                IoOp::Write,
                self.size,
                offset,
                bytes.len() as u64,
            )?;
        }
        // The next byte to write: piece `i`, `done` bytes into it.
        let (mut i, mut done) = (0usize, 0usize);
        while i < pieces.len() {
            let (offset, bytes) = pieces[i];
            if done == bytes.len() {
                (i, done) = (i + 1, 0);
                continue;
            }
            let page = (offset + done as u64) / PAGE;
            let mut shard = self.shard(page).write().unwrap_or_else(|p| p.into_inner());
            let data = shard
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            let page_start = page * PAGE;
            // Copy what falls in this page, piece after piece, until one
            // reaches past it or starts in another page.
            while i < pieces.len() {
                let (offset, bytes) = pieces[i];
                let pos = offset + done as u64;
                if done == bytes.len() {
                    (i, done) = (i + 1, 0);
                    continue;
                }
                if pos / PAGE != page {
                    break;
                }
                let in_page = (pos - page_start) as usize;
                let n = (PAGE as usize - in_page).min(bytes.len() - done);
                data[in_page..in_page + n].copy_from_slice(&bytes[done..done + n]);
                done += n;
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn flush_nowait(&self) -> Result<bool, DeviceError> {
        Ok(true)
    }

    fn trim(&self, offset: u64, length: u64, _fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Trim)?;
        check_range("memory device", IoOp::Trim, self.size, offset, length)?;
        self.zero_range(offset, length, true);
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check_writable(IoOp::WriteZeroes)?;
        check_range(
            "memory device",
            IoOp::WriteZeroes,
            self.size,
            offset,
            length,
        )?;
        self.zero_range(offset, length, mode.may_trim);
        Ok(())
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        check_range("memory device", IoOp::Extents, self.size, offset, length)?;
        let mut out: Vec<Extent> = Vec::new();
        let mut truncated = false;
        Self::for_each_piece(offset, length, |page, _, range| {
            if truncated {
                return;
            }
            let present = self
                .shard(page)
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&page);
            let n = range.len() as u64;
            let full = out.len() >= max_extents.max(1);
            match out.last_mut() {
                Some(last) if last.hole != present => last.length += n,
                _ if full => truncated = true,
                _ => out.push(Extent {
                    length: n,
                    hole: !present,
                    zero: !present,
                }),
            }
        });
        if out.is_empty() {
            out.push(Extent {
                length,
                hole: true,
                zero: true,
            });
        }
        Ok(out)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        check_range("memory device", IoOp::Cache, self.size, offset, length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_allocate_only_the_pages_they_touch() {
        let dev = MemDevice::new(1 << 20, false);
        assert_eq!(dev.allocated_bytes(), 0);
        dev.write_at(&[1u8; 200_000], 1000, false).unwrap();
        assert_eq!(dev.allocated_bytes(), 4 * PAGE);
    }

    #[test]
    fn trim_frees_whole_pages_and_zeroes_partial() {
        let dev = MemDevice::new(4 * PAGE, false);
        dev.write_at(&vec![7u8; (4 * PAGE) as usize], 0, false)
            .unwrap();
        dev.trim(10, 2 * PAGE, false).unwrap();
        assert_eq!(dev.allocated_bytes(), 3 * PAGE);
        let mut buf = vec![1u8; (2 * PAGE) as usize];
        dev.read_at(&mut buf, 10).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let ext = dev.extents(0, 4 * PAGE, 16).unwrap();
        assert_eq!(
            ext,
            vec![
                Extent {
                    length: PAGE,
                    hole: false,
                    zero: false
                },
                Extent {
                    length: PAGE,
                    hole: true,
                    zero: true
                },
                Extent {
                    length: 2 * PAGE,
                    hole: false,
                    zero: false
                },
            ]
        );
        assert_eq!(dev.extents(0, 4 * PAGE, 1).unwrap().len(), 1);
    }

    #[test]
    fn no_hole_zeroing_allocates() {
        let dev = MemDevice::new(4 * PAGE, false);
        dev.write_zeroes(
            0,
            PAGE,
            ZeroMode {
                may_trim: false,
                fast: true,
                fua: false,
            },
        )
        .unwrap();
        assert_eq!(dev.allocated_bytes(), PAGE);
        let mut buf = vec![1u8; 16];
        dev.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, vec![0u8; 16]);
    }
}
