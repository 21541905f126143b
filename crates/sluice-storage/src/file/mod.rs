//! A device backed by a regular file or a block device.

mod open;

use std::fs::File;
use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use rustix::fs::{FallocateFlags, SeekFrom};
use rustix::io::{Errno, ReadWriteFlags};
use rustix::pipe::SpliceFlags;
use thiserror::Error;

use crate::{
    check_range, write_each, BlockDevice, BlockingClass, Capability, DeviceError, DeviceMetric,
    Extent, IoOp, MappedBytes, MetricKind, ZeroCopy, ZeroMode,
};

/// Alignment used for O_DIRECT buffers, offsets and lengths. 4 KiB
/// satisfies every logical block size Linux supports.
const DIRECT_ALIGN: usize = 4096;
/// Largest chunk written at once when zeroes must be written by hand.
const ZERO_CHUNK: usize = 1 << 20;
/// Writes of at least this many pieces, averaging under
/// [`MAPPED_WRITE_BELOW`] bytes, are copied into a buffered file's shared
/// mapping: a view of small blocks behind small holes cannot be merged
/// into runs (a write must not touch the holes), so otherwise each block
/// costs a `pwrite` (0.7 µs for 8 bytes here, against 0.005 µs to copy
/// it).
const MAPPED_WRITE_MIN: usize = 16;
/// See [`MAPPED_WRITE_MIN`]: larger pieces are written with `pwrite`,
/// where a system call each costs little beside the bytes.
const MAPPED_WRITE_BELOW: usize = 4096;

/// How to open a [`FileDevice`].
#[derive(Debug, Clone, Default)]
pub struct FileOptions {
    /// Open read-only; writes fail.
    pub read_only: bool,
    /// Bypass the page cache (O_DIRECT). Requests must then be aligned
    /// to 4 KiB; the device advertises that as its minimum block size.
    pub direct: bool,
    /// Size of the export. A missing regular file is created with this
    /// size (sparse); a shorter one is extended; a longer one is refused.
    /// `None` uses the current size of an existing file or device.
    pub size: Option<u64>,
}

/// Why a file could not be opened as a device.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("cannot open {path}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} does not exist; give a size to create it")]
    MissingSize { path: PathBuf },
    #[error("{path} does not exist; a read-only export is served as it is, never created")]
    MissingReadOnly { path: PathBuf },
    #[error("{path} is {actual} bytes, less than the requested size {requested}; a read-only export is never resized")]
    ReadOnlyTooSmall {
        path: PathBuf,
        actual: u64,
        requested: u64,
    },
    #[error("cannot create {path}: directory {dir} does not exist")]
    MissingDirectory { path: PathBuf, dir: PathBuf },
    #[error("{path} is {actual} bytes, larger than the requested size {requested}; refusing to truncate")]
    WouldTruncate {
        path: PathBuf,
        actual: u64,
        requested: u64,
    },
    #[error("cannot resize {path} to {size} bytes")]
    Resize {
        path: PathBuf,
        size: u64,
        source: io::Error,
    },
    #[error("{path} is neither a regular file nor a block device")]
    NotAFileOrDevice { path: PathBuf },
    #[error("block device {path} is {actual} bytes, smaller than the requested size {requested}")]
    DeviceTooSmall {
        path: PathBuf,
        actual: u64,
        requested: u64,
    },
    #[error("size {size} of {path} is not a multiple of {align} bytes, which O_DIRECT needs")]
    UnalignedDirect {
        path: PathBuf,
        size: u64,
        align: usize,
    },
    /// Another process has the file open (see [`crate::lock`]).
    #[error(transparent)]
    Locked(#[from] crate::lock::LockError),
}

/// A regular file or block device. Sparse where the filesystem allows:
/// trim and zeroing punch holes, extents come from SEEK_DATA/SEEK_HOLE.
/// Reads and writes are positional (`pread`/`pwrite`), so any number of
/// threads use it at once without a lock.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    label: String,
    size: u64,
    read_only: bool,
    direct: bool,
    block_device: bool,
    /// Cleared when the filesystem rejects RWF_NOWAIT (tmpfs does); such
    /// filesystems never block on reads anyway.
    nowait_supported: AtomicBool,
    /// An fsync or O_DSYNC write failed. Linux may then have dropped the
    /// dirty pages it could not write and report the next fsync as a
    /// success, so every later flush fails instead (never a false claim
    /// of durability).
    sync_failed: AtomicBool,
    /// Writes may have changed data or allocation since the last sync
    /// started: a flush must sync. Set after each write, trim or zeroing
    /// (O_DSYNC writes are durable themselves), cleared by the sync that
    /// covers them, so a FLUSH with nothing written since costs no
    /// `fdatasync`.
    unsynced: AtomicBool,
    /// Held across each sync. A flush that finds nothing unsynced has
    /// taken it, so every sync that started before it (and may be the one
    /// covering an earlier write) has ended.
    sync_lock: Mutex<()>,
    /// `fdatasync` calls made (for the metrics endpoint and tests).
    syncs: AtomicU64,
    /// The file lives in memory (tmpfs): no call ever waits on a device.
    in_memory: bool,
    /// Shared mapping of a buffered regular file, for sending reads
    /// without copying them into a buffer first, and (writable files)
    /// for writes of many small pieces.
    mapped: Option<MappedBytes>,
    /// Pieces written through the mapping.
    mapped_pieces: AtomicU64,
}

fn io_err(label: &str, op: IoOp, offset: u64, len: u64, source: io::Error) -> DeviceError {
    DeviceError::Io {
        device: label.to_owned(),
        op,
        offset,
        len,
        source,
    }
}

impl FileDevice {
    /// Records that a write, trim or zeroing completed: the next flush
    /// must sync. Called after the change, so a sync that clears the flag
    /// before this store began after the change was made. Loading first
    /// keeps the hot path free of a read-modify-write and of writes to a
    /// line other connections read.
    #[inline]
    fn mark_unsynced(&self) {
        if !self.unsynced.load(Ordering::Acquire) {
            self.unsynced.store(true, Ordering::Release);
        }
    }

    fn lock_sync(&self) -> MutexGuard<'_, ()> {
        self.sync_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The flush itself, with the sync lock held: fails after any failed
    /// sync, syncs only when something was written since the last one.
    fn sync_locked(&self) -> Result<(), DeviceError> {
        if self.sync_failed.load(Ordering::Acquire) {
            return Err(self.err(
                IoOp::Flush,
                0,
                self.size,
                io::Error::other(
                    "an earlier sync failed, so writes since the last good sync may be lost",
                ),
            ));
        }
        if !self.unsynced.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.file.sync_data().map_err(|e| {
            self.sync_failed.store(true, Ordering::Release);
            self.err(IoOp::Flush, 0, self.size, e)
        })
    }

    fn check_writable(&self, op: IoOp) -> Result<(), DeviceError> {
        if self.read_only {
            Err(DeviceError::ReadOnly {
                device: self.label.clone(),
                op,
            })
        } else {
            Ok(())
        }
    }

    fn err(&self, op: IoOp, offset: u64, len: u64, source: io::Error) -> DeviceError {
        io_err(&self.label, op, offset, len, source)
    }

    /// Writes all of `buf`, looping over short writes.
    fn pwrite_all(&self, mut buf: &[u8], mut offset: u64, fua: bool) -> io::Result<()> {
        let flags = if fua {
            ReadWriteFlags::DSYNC
        } else {
            ReadWriteFlags::empty()
        };
        while !buf.is_empty() {
            let n = match rustix::io::pwritev2(&self.file, &[IoSlice::new(buf)], offset, flags) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            buf = &buf[n..];
            offset += n as u64;
        }
        Ok(())
    }

    /// Runs `f` over a 4 KiB-aligned bounce buffer of `len` bytes.
    fn with_aligned<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut storage = vec![0u8; len + DIRECT_ALIGN];
        let skip = storage.as_ptr().align_offset(DIRECT_ALIGN);
        f(&mut storage[skip..skip + len])
    }

    fn zero_by_writing(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        let chunk = length.min(ZERO_CHUNK as u64) as usize;
        Self::with_aligned(chunk, |zeros| {
            let mut done = 0u64;
            while done < length {
                let n = (length - done).min(chunk as u64) as usize;
                self.pwrite_all(&zeros[..n], offset + done, false)
                    .map_err(|e| self.err(IoOp::WriteZeroes, offset + done, n as u64, e))?;
                done += n as u64;
            }
            Ok(())
        })
    }

    /// Zeroes a range by punching a hole (when allowed), zeroing it in
    /// the filesystem, or writing zeroes; no sync.
    fn zero_range(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        let to_err = |e: Errno| self.err(IoOp::WriteZeroes, offset, length, e.into());
        let mut done = false;
        if mode.may_trim {
            done = self
                .fallocate(
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                    offset,
                    length,
                )
                .map_err(to_err)?;
        }
        if !done {
            let flags = if self.block_device {
                FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
            } else {
                FallocateFlags::ZERO_RANGE
            };
            done = self.fallocate(flags, offset, length).map_err(to_err)?;
        }
        if done {
            return Ok(());
        }
        if mode.fast {
            return Err(DeviceError::Unsupported {
                device: self.label.clone(),
                op: IoOp::WriteZeroes,
                reason: "the filesystem can neither punch holes nor zero ranges",
            });
        }
        self.zero_by_writing(offset, length)
    }

    fn fallocate(&self, flags: FallocateFlags, offset: u64, length: u64) -> Result<bool, Errno> {
        match rustix::fs::fallocate(&self.file, flags, offset, length) {
            Ok(()) => Ok(true),
            Err(Errno::OPNOTSUPP | Errno::NOSYS | Errno::INVAL) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Copies `pieces` into the shared mapping, in order (a later piece
    /// that overlaps an earlier one wins); `fua` syncs once after them.
    /// `Ok(false)`: the mapping cannot take them (none, read-only, or the
    /// kernel could not make a page writable, e.g. no space for a hole),
    /// and nothing was written.
    fn write_mapped(&self, pieces: &[(u64, &[u8])], fua: bool) -> Result<bool, DeviceError> {
        let Some(map) = self.mapped.as_ref().filter(|m| m.is_writable()) else {
            return Ok(false);
        };
        self.check_writable(IoOp::Write)?;
        for &(offset, bytes) in pieces {
            check_range(
                &self.label,
                IoOp::Write,
                self.size,
                offset,
                bytes.len() as u64,
            )?;
        }
        if let Err(e) = map.write_pieces(pieces) {
            tracing::debug!(device = %self.label, error = %e, "cannot write through the mapping; writing with pwrite");
            return Ok(false);
        }
        self.mapped_pieces
            .fetch_add(pieces.len() as u64, Ordering::Relaxed);
        self.mark_unsynced();
        if fua {
            self.flush()?;
        }
        Ok(true)
    }
}

impl ZeroCopy for FileDevice {
    fn mapped(&self) -> Option<&MappedBytes> {
        self.mapped.as_ref()
    }

    fn splices_writes(&self) -> bool {
        !self.read_only && !self.direct
    }

    fn write_from_pipe(
        &self,
        pipe: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Write)?;
        check_range(&self.label, IoOp::Write, self.size, offset, len as u64)?;
        let mut at = offset;
        let end = offset + len as u64;
        while at < end {
            let left = (end - at) as usize;
            match rustix::pipe::splice(
                pipe,
                None,
                &self.file,
                Some(&mut at),
                left,
                SpliceFlags::MOVE,
            ) {
                // The caller filled the pipe first, so it never runs dry.
                Ok(0) => {
                    return Err(self.err(
                        IoOp::Write,
                        offset,
                        len as u64,
                        io::Error::new(io::ErrorKind::UnexpectedEof, "the pipe ran dry"),
                    ))
                }
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => {
                    self.mark_unsynced();
                    return Err(self.err(IoOp::Write, offset, len as u64, e.into()));
                }
            }
            self.mark_unsynced();
        }
        Ok(())
    }
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }
    fn zero_copy(&self) -> Option<&dyn ZeroCopy> {
        Some(self)
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
            extents: !self.block_device,
            multi_conn: true,
            rotational: false,
            min_block: if self.direct { DIRECT_ALIGN as u32 } else { 1 },
            blocking: if self.in_memory {
                BlockingClass::Never
            } else if self.direct {
                BlockingClass::Always
            } else {
                BlockingClass::PageCache
            },
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), DeviceError> {
        check_range(&self.label, IoOp::Read, self.size, offset, buf.len() as u64)?;
        let len = buf.len();
        if self.direct && buf.as_ptr().align_offset(DIRECT_ALIGN) != 0 {
            return Self::with_aligned(len, |bounce| {
                self.file
                    .read_exact_at(bounce, offset)
                    .map_err(|e| self.err(IoOp::Read, offset, len as u64, e))?;
                buf.copy_from_slice(bounce);
                Ok(())
            });
        }
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| self.err(IoOp::Read, offset, len as u64, e))
    }

    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> Result<bool, DeviceError> {
        if !self.nowait_supported.load(Ordering::Relaxed) {
            return self.read_at(buf, offset).map(|()| true);
        }
        check_range(&self.label, IoOp::Read, self.size, offset, buf.len() as u64)?;
        let len = buf.len();
        loop {
            match rustix::io::preadv2(
                &self.file,
                &mut [IoSliceMut::new(buf)],
                offset,
                ReadWriteFlags::NOWAIT,
            ) {
                Ok(n) if n == len => return Ok(true),
                // Partly cached, or past EOF of a file that shrank under us:
                // let the blocking path sort it out.
                Ok(_) | Err(Errno::AGAIN) => return Ok(false),
                Err(Errno::INTR) => continue,
                Err(Errno::OPNOTSUPP | Errno::INVAL) => {
                    self.nowait_supported.store(false, Ordering::Relaxed);
                    return self.read_at(buf, offset).map(|()| true);
                }
                Err(e) => return Err(self.err(IoOp::Read, offset, len as u64, e.into())),
            }
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Write)?;
        check_range(
            &self.label,
            IoOp::Write,
            self.size,
            offset,
            buf.len() as u64,
        )?;
        let len = buf.len() as u64;
        let result = if self.direct && buf.as_ptr().align_offset(DIRECT_ALIGN) != 0 {
            Self::with_aligned(buf.len(), |bounce| {
                bounce.copy_from_slice(buf);
                self.pwrite_all(bounce, offset, fua)
            })
        } else {
            self.pwrite_all(buf, offset, fua)
        };
        // An O_DSYNC write is durable on return; any other (even a failed
        // one, which may have written part) leaves something to sync.
        if !fua || result.is_err() {
            self.mark_unsynced();
        }
        result.map_err(|e| {
            let err = self.err(IoOp::Write, offset, len, e);
            // A failed O_DSYNC write is a failed sync (see `sync_failed`),
            // unless nothing was written because the disk is full.
            if fua && !err.is_no_space() {
                self.sync_failed.store(true, Ordering::Release);
            }
            err
        })
    }

    /// Many small pieces (at least 16, averaging under 4 KiB: see
    /// `MAPPED_WRITE_MIN`) are copied into the file's shared
    /// mapping when it has a writable one; anything else, or pieces the
    /// mapping cannot take, is a `pwrite` per piece.
    fn write_pieces(&self, pieces: &[(u64, &[u8])], fua: bool) -> Result<(), DeviceError> {
        let bytes: usize = pieces.iter().map(|(_, b)| b.len()).sum();
        let small = pieces.len() >= MAPPED_WRITE_MIN && bytes / pieces.len() < MAPPED_WRITE_BELOW;
        if small && self.write_mapped(pieces, fua)? {
            return Ok(());
        }
        write_each(
            pieces,
            fua,
            |buf, offset, fua| self.write_at(buf, offset, fua),
            || self.flush(),
        )
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if self.read_only {
            return Ok(());
        }
        let _held = self.lock_sync();
        self.sync_locked()
    }

    fn flush_nowait(&self) -> Result<bool, DeviceError> {
        if self.read_only {
            return Ok(true);
        }
        // A sync under way may be the one covering an earlier write: wait
        // for it only where waiting is allowed.
        let _held = match self.sync_lock.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        if self.in_memory || !self.unsynced.load(Ordering::Acquire) {
            return self.sync_locked().map(|()| true);
        }
        Ok(false)
    }

    fn trim(&self, offset: u64, length: u64, fua: bool) -> Result<(), DeviceError> {
        self.check_writable(IoOp::Trim)?;
        check_range(&self.label, IoOp::Trim, self.size, offset, length)?;
        if length == 0 {
            return Ok(());
        }
        // Trim is advisory: a filesystem without hole punching just keeps
        // the data.
        let punched = self.fallocate(
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            length,
        );
        self.mark_unsynced();
        punched.map_err(|e| self.err(IoOp::Trim, offset, length, e.into()))?;
        if fua {
            self.flush()?;
        }
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, length: u64, mode: ZeroMode) -> Result<(), DeviceError> {
        self.check_writable(IoOp::WriteZeroes)?;
        check_range(&self.label, IoOp::WriteZeroes, self.size, offset, length)?;
        if length == 0 {
            return Ok(());
        }
        let zeroed = self.zero_range(offset, length, mode);
        // Whatever the outcome, the range may have changed.
        self.mark_unsynced();
        zeroed?;
        if mode.fua {
            self.flush()?;
        }
        Ok(())
    }

    fn extents(
        &self,
        offset: u64,
        length: u64,
        max_extents: usize,
    ) -> Result<Vec<Extent>, DeviceError> {
        check_range(&self.label, IoOp::Extents, self.size, offset, length)?;
        let end = offset + length;
        let all_data = vec![Extent {
            length,
            hole: false,
            zero: false,
        }];
        if self.block_device || length == 0 {
            return Ok(all_data);
        }
        let mut out = Vec::new();
        let mut pos = offset;
        while pos < end && out.len() < max_extents.max(1) {
            let data = match rustix::fs::seek(&self.file, SeekFrom::Data(pos)) {
                Ok(d) => d,
                // No data at or after pos: the rest is a hole.
                Err(Errno::NXIO) => end,
                // SEEK_DATA unsupported: report data, which is always safe.
                Err(Errno::INVAL | Errno::OPNOTSUPP) if out.is_empty() => return Ok(all_data),
                Err(e) => return Err(self.err(IoOp::Extents, pos, end - pos, e.into())),
            };
            if data > pos {
                let hole_end = data.min(end);
                out.push(Extent {
                    length: hole_end - pos,
                    hole: true,
                    zero: true,
                });
                pos = hole_end;
                continue;
            }
            let hole = match rustix::fs::seek(&self.file, SeekFrom::Hole(pos)) {
                Ok(h) => h,
                Err(Errno::NXIO) => end,
                Err(e) => return Err(self.err(IoOp::Extents, pos, end - pos, e.into())),
            };
            let data_end = hole.clamp(pos + 1, end);
            out.push(Extent {
                length: data_end - pos,
                hole: false,
                zero: false,
            });
            pos = data_end;
        }
        Ok(out)
    }

    fn cache(&self, offset: u64, length: u64) -> Result<(), DeviceError> {
        check_range(&self.label, IoOp::Cache, self.size, offset, length)?;
        let Some(len) = NonZeroU64::new(length) else {
            return Ok(());
        };
        rustix::fs::fadvise(&self.file, offset, Some(len), rustix::fs::Advice::WillNeed)
            .map_err(|e| self.err(IoOp::Cache, offset, length, e.into()))
    }

    fn metrics(&self) -> Vec<DeviceMetric> {
        vec![
            DeviceMetric {
                name: "file_syncs_total",
                help: "fdatasync calls made for FLUSH and FUA (none when nothing was written since the last)",
                kind: MetricKind::Counter,
                value: self.syncs.load(Ordering::Relaxed) as f64,
                labels: Vec::new(),
            },
            DeviceMetric {
                name: "file_mapped_write_pieces_total",
                help: "pieces of many-piece writes copied into the file's shared mapping instead of written one pwrite each",
                kind: MetricKind::Counter,
                value: self.mapped_pieces.load(Ordering::Relaxed) as f64,
                labels: Vec::new(),
            },
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::os::fd::AsFd;

    use super::*;

    pub(super) fn open_sparse(dir: &tempfile::TempDir, size: u64) -> FileDevice {
        FileDevice::open(
            &dir.path().join("img"),
            &FileOptions {
                size: Some(size),
                ..Default::default()
            },
        )
        .expect("open test image")
    }

    fn syncs(dev: &FileDevice) -> f64 {
        dev.metrics()
            .iter()
            .find(|m| m.name == "file_syncs_total")
            .expect("the sync counter")
            .value
    }

    #[test]
    fn a_flush_syncs_only_what_was_written_since_the_last_sync() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open_sparse(&dir, 1 << 20);
        let zero = |fua| ZeroMode {
            may_trim: false,
            fast: false,
            fua,
        };
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 0.0, "nothing written yet");
        dev.write_at(&[1; 4096], 0, false).unwrap();
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 1.0);
        dev.flush().unwrap();
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 1.0, "clean flushes make no sync");
        // Every kind of change counts; an O_DSYNC write is its own sync.
        dev.trim(0, 4096, false).unwrap();
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 2.0, "after a trim");
        dev.write_zeroes(8192, 4096, zero(false)).unwrap();
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 3.0, "after zeroing");
        dev.write_at(&[2; 4096], 0, true).unwrap();
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 3.0, "a FUA write leaves nothing to sync");
        dev.write_zeroes(0, 4096, zero(true)).unwrap();
        assert_eq!(syncs(&dev), 4.0, "FUA zeroing syncs once");
        let pipe = filled_pipe(&[3; 4096]);
        dev.write_from_pipe(pipe.0.as_fd(), 65536, 4096).unwrap();
        dev.flush().unwrap();
        assert_eq!(syncs(&dev), 5.0, "after a spliced write");
        let mut back = [0u8; 4096];
        dev.read_at(&mut back, 65536).unwrap();
        assert_eq!(back, [3; 4096]);
    }

    /// A pipe holding `data`: (read end, write end).
    fn filled_pipe(data: &[u8]) -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        let (r, w) = rustix::pipe::pipe().unwrap();
        assert_eq!(rustix::io::write(&w, data).unwrap(), data.len());
        (r, w)
    }

    #[test]
    fn a_flush_without_waiting_runs_only_when_it_cannot_wait() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open_sparse(&dir, 1 << 20);
        if dev.capability().blocking == BlockingClass::Never {
            eprintln!("skipped: the temporary directory is in memory (tmpfs)");
            return;
        }
        assert!(dev.flush_nowait().unwrap(), "nothing written: done at once");
        dev.write_at(&[1; 4096], 0, false).unwrap();
        assert!(!dev.flush_nowait().unwrap(), "a sync to make: not here");
        assert_eq!(syncs(&dev), 0.0, "and nothing done");
        dev.flush().unwrap();
        assert!(dev.flush_nowait().unwrap());
        assert_eq!(syncs(&dev), 1.0);
        // A sync under way may be the one an earlier write needs.
        let held = dev.lock_sync();
        assert!(!dev.flush_nowait().unwrap(), "a sync is under way");
        drop(held);
    }

    #[test]
    fn files_in_memory_never_block_and_sync_without_waiting() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm here");
            return;
        };
        let dev = open_sparse(&dir, 1 << 20);
        if !dev.in_memory {
            eprintln!("skipped: /dev/shm is not tmpfs here");
            return;
        }
        assert_eq!(dev.capability().blocking, BlockingClass::Never);
        dev.write_at(&[1; 4096], 0, false).unwrap();
        assert!(dev.flush_nowait().unwrap());
        assert_eq!(syncs(&dev), 1.0);
        // The disk-backed temporary directory is not in memory.
        let disk = tempfile::tempdir().unwrap();
        let on_disk = open_sparse(&disk, 4096);
        if !on_disk.in_memory {
            assert_eq!(on_disk.capability().blocking, BlockingClass::PageCache);
        }
    }

    #[test]
    fn zeroing_punches_a_hole_where_the_filesystem_can() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open_sparse(&dir, 1 << 20);
        dev.write_at(&vec![0xaa; 1 << 20], 0, false).unwrap();
        dev.write_zeroes(
            65536,
            65536,
            ZeroMode {
                may_trim: true,
                fast: false,
                fua: false,
            },
        )
        .unwrap();
        let ext = dev.extents(0, 1 << 20, 64).unwrap();
        // On filesystems with hole punching the zeroed 64 KiB is a hole.
        if ext.len() > 1 {
            assert_eq!(
                ext[1],
                Extent {
                    length: 65536,
                    hole: true,
                    zero: true
                },
                "{ext:?}"
            );
        }
    }

    #[test]
    fn many_small_pieces_are_copied_into_the_mapping_in_list_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = open_sparse(&dir, 1 << 20);
        d.write_at(&[0xee; 8192], 0, false).expect("write");
        // 8-byte blocks behind 2-byte holes, the last one overlapping the
        // first (it wins), and one far away in a hole of the sparse file.
        let blocks: Vec<Vec<u8>> = (0..100u8).map(|k| vec![k; 8]).collect();
        let mut pieces: Vec<(u64, &[u8])> = blocks
            .iter()
            .enumerate()
            .map(|(k, b)| (k as u64 * 10, b.as_slice()))
            .collect();
        pieces.push((4, b"ZZZZ"));
        pieces.push((900_000, b"far"));
        let syncs_before = syncs(&d);
        d.write_pieces(&pieces, true).expect("mapped write");
        assert_eq!(syncs(&d), syncs_before + 1.0, "FUA syncs once");
        let mut got = vec![0u8; 1000];
        d.read_at(&mut got, 0).expect("read");
        for k in 0..100usize {
            let want: &[u8] = if k == 0 { b"\0\0\0\0ZZZZ" } else { &blocks[k] };
            assert_eq!(&got[k * 10..k * 10 + 8], want, "block {k}");
            assert_eq!(&got[k * 10 + 8..k * 10 + 10], [0xee, 0xee], "hole {k}");
        }
        let mut far = [0u8; 3];
        d.read_at(&mut far, 900_000).expect("read");
        assert_eq!(&far, b"far");
        assert_eq!(mapped_pieces(&d), 102.0);
        // Out of range: refused before anything is written.
        let mut bad = pieces.clone();
        bad.push((1 << 20, b"x"));
        let err = d.write_pieces(&bad, false).unwrap_err();
        assert!(matches!(err, DeviceError::OutOfRange { .. }), "{err}");
        assert_eq!(mapped_pieces(&d), 102.0);
        // A few pieces, or large ones, are a pwrite each.
        d.write_pieces(&pieces[..MAPPED_WRITE_MIN - 1], false)
            .expect("write");
        let big = vec![1u8; MAPPED_WRITE_BELOW];
        let large: Vec<(u64, &[u8])> = (0..MAPPED_WRITE_MIN as u64)
            .map(|k| (k * 2 * MAPPED_WRITE_BELOW as u64, big.as_slice()))
            .collect();
        d.write_pieces(&large, false).expect("write");
        assert_eq!(mapped_pieces(&d), 102.0);
    }

    fn mapped_pieces(d: &FileDevice) -> f64 {
        d.metrics()
            .into_iter()
            .find(|m| m.name == "file_mapped_write_pieces_total")
            .map_or(0.0, |m| m.value)
    }

    #[test]
    fn a_page_the_mapping_cannot_write_is_declined_not_a_sigbus() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = open_sparse(&dir, 1 << 20);
        // Someone truncates the file under the server: a store to a page
        // past the file's new end would raise SIGBUS and kill the process.
        OpenOptions::new()
            .write(true)
            .open(dir.path().join("img"))
            .and_then(|f| f.set_len(4096))
            .expect("truncate");
        let pieces: Vec<(u64, &[u8])> = (0..32u64)
            .map(|k| (500_000 + k * 10, &b"12345678"[..]))
            .collect();
        // The mapping declines them and each is written with pwrite.
        d.write_pieces(&pieces, false).expect("written with pwrite");
        assert_eq!(mapped_pieces(&d), 0.0);
        let mut got = [0u8; 8];
        d.read_at(&mut got, 500_000 + 31 * 10).expect("read");
        assert_eq!(&got, b"12345678");
        // What fits the file still goes through the mapping.
        let near: Vec<(u64, &[u8])> = (0..32u64).map(|k| (k * 10, &b"ok"[..])).collect();
        d.write_pieces(&near, false).expect("mapped");
        assert_eq!(mapped_pieces(&d), 32.0);
        let mut got = [0u8; 2];
        d.read_at(&mut got, 310).expect("read");
        assert_eq!(&got, b"ok");
    }

    #[test]
    fn buffered_files_are_mapped_and_report_residency() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = open_sparse(&dir, 1 << 20);
        let z = d.zero_copy().expect("a buffered file has zero-copy paths");
        assert!(z.splices_writes());
        let m = z.mapped().expect("a buffered regular file is mapped");
        assert_eq!(m.len(), 1 << 20);
        d.write_at(&[7u8; 65536], 65536, false).expect("write");
        assert!(m.resident(65536, 65536), "just written: in the page cache");
        assert!(m.iovec(65536, 65536).is_some());
        assert!(m.iovec((1 << 20) - 10, 11).is_none(), "past the end");
        assert!(!m.resident((1 << 20) - 10, 11));
    }

    #[test]
    fn fresh_sparse_file_is_one_hole() {
        let dir = tempfile::tempdir().unwrap();
        let dev = open_sparse(&dir, 1 << 20);
        let ext = dev.extents(4096, 8192, 16).unwrap();
        assert_eq!(
            ext,
            vec![Extent {
                length: 8192,
                hole: true,
                zero: true
            }]
        );
        let ext = dev.extents(0, 1 << 20, 1).unwrap();
        assert_eq!(ext.len(), 1);
    }
}
