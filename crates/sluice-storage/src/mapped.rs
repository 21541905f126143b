//! A shared mapping of a file's bytes, so the server can hand page-cache
//! pages straight to the kernel when it sends a read reply: one copy per
//! byte (page cache → socket) instead of two (page cache → buffer →
//! socket). On two vCPUs shared with the client that second copy is what
//! 1 MiB reads were short of (docs/BENCHMARKS.md: 0.87× nbdkit with
//! pread, 1.54× with the mapping). A writable file's mapping also takes
//! writes of many small pieces ([`MappedBytes::write_pieces`]): a copy
//! per piece instead of a `pwrite` per piece, 0.005 µs against 0.7 µs
//! for an 8-byte piece here.
//!
//! No Rust reference to the mapped memory is ever made, and Rust code
//! never reads it: for reads only its addresses go to the kernel
//! (`writev`, `mincore`), which checks user addresses itself and reports
//! a fault as EFAULT. So a concurrent `pwrite` to the file, or another
//! process changing or truncating it, cannot cause undefined behaviour
//! here; a reply may be torn by a concurrent write exactly as a `pread`
//! would be. Writes are raw copies into pages the kernel has first made
//! present and writable (`MADV_POPULATE_WRITE`), which reports a page it
//! cannot make writable (no space left for a hole, past a truncated end,
//! an I/O error reading it in) as an error instead of the SIGBUS a plain
//! store would raise; the write then falls back to `pwrite`, which says
//! why. What is left is a page taken away again between the populate and
//! the copy: by a hole punched in the same range at that moment (which
//! frees the very blocks the copy's refault then needs) or by the file
//! being truncated under the server, which mapped reads are exposed to
//! as well.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// A shared mapping of a whole file (see the module docs).
#[derive(Debug)]
pub struct MappedBytes {
    base: NonNull<u8>,
    len: usize,
    /// Mapped for writing too ([`MappedBytes::map_writable`]).
    writable: bool,
}

// SAFETY: the mapping is only ever an address range handed to the kernel
// (never dereferenced by Rust), valid until `Drop` unmaps it, which needs
// `&mut self`; sharing or moving the address between threads is fine.
unsafe impl Send for MappedBytes {}
// SAFETY: as above; `&MappedBytes` only exposes the address range.
unsafe impl Sync for MappedBytes {}

/// The kernel's page size.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096).max(1)
}

impl MappedBytes {
    /// Maps the first `len` bytes of `file` read-only and shared.
    pub fn map(file: &File, len: u64) -> io::Result<Self> {
        Self::map_with(file, len, false)
    }

    /// Maps the first `len` bytes of `file` shared, for reading and for
    /// [`write_pieces`](Self::write_pieces); `file` must be open for
    /// writing.
    pub fn map_writable(file: &File, len: u64) -> io::Result<Self> {
        Self::map_with(file, len, true)
    }

    fn map_with(file: &File, len: u64, writable: bool) -> io::Result<Self> {
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "nothing to map"))?;
        // SAFETY: a fresh mapping (null hint) of a valid, open descriptor;
        // the result is checked for MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                if writable {
                    libc::PROT_READ | libc::PROT_WRITE
                } else {
                    libc::PROT_READ
                },
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Self {
            base,
            len,
            writable,
        })
    }

    /// Whether [`write_pieces`](Self::write_pieces) can write.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Writes each `(offset, bytes)` piece, in order, by copying it into
    /// the mapping (the file's page cache), so a later piece that
    /// overlaps an earlier one wins. First every page the pieces touch is
    /// made present and writable; if the kernel cannot do that for one
    /// (see the module docs) nothing is written and the error is
    /// returned, so the caller can write the pieces another way. Pieces
    /// must lie inside the mapping (`InvalidInput` otherwise).
    pub fn write_pieces(&self, pieces: &[(u64, &[u8])]) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the mapping is read-only",
            ));
        }
        let mut ranges = Vec::with_capacity(pieces.len());
        for &(offset, bytes) in pieces {
            let iov = self.iovec(offset, bytes.len()).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a piece lies outside the mapping",
                )
            })?;
            if !bytes.is_empty() {
                ranges.push((iov.iov_base as usize, bytes.len()));
            }
        }
        self.populate_for_writing(&mut ranges)?;
        for &(offset, bytes) in pieces {
            let dst = self.base.as_ptr().wrapping_add(offset as usize);
            // SAFETY: `offset..offset+len` lies inside the mapping (checked
            // above), which stays mapped while `&self` lives (`Drop` needs
            // `&mut self`) and is writable (`self.writable`); its pages were
            // just made present and writable, so the copy does not fault
            // into a SIGBUS (module docs). `bytes` is ordinary memory that
            // cannot overlap a file mapping of ours: no Rust reference to
            // the mapping exists. Concurrent writers to the same pages are
            // the kernel (another connection's `pwrite`), which leaves
            // bytes torn exactly as two concurrent `pwrite`s would.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        }
        Ok(())
    }

    /// `MADV_POPULATE_WRITE` over the pages of `ranges` (address, length),
    /// each run of touching or overlapping pages in one call.
    fn populate_for_writing(&self, ranges: &mut [(usize, usize)]) -> io::Result<()> {
        let page = page_size();
        ranges.sort_unstable();
        let mut run: Option<(usize, usize)> = None;
        for &(start, len) in ranges.iter() {
            let (lo, hi) = (start - start % page, (start + len).next_multiple_of(page));
            run = match run {
                Some((a, b)) if lo <= b => Some((a, b.max(hi))),
                Some(done) => {
                    self.populate(done)?;
                    Some((lo, hi))
                }
                None => Some((lo, hi)),
            };
        }
        run.map_or(Ok(()), |r| self.populate(r))
    }

    fn populate(&self, (lo, hi): (usize, usize)) -> io::Result<()> {
        // SAFETY: `lo..hi` is whole pages of our mapping: the piece ranges
        // were checked to lie inside it and are widened only to their
        // page boundaries, which a mapping (whole pages) contains.
        // MADV_POPULATE_WRITE changes no bytes; it faults the pages in
        // writable, or fails.
        loop {
            // SAFETY: as above.
            let rc = unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_POPULATE_WRITE)
            };
            if rc == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never, for a live mapping).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address range of `[offset, offset+len)` for the kernel, or
    /// `None` if it is not inside the mapping.
    pub fn iovec(&self, offset: u64, len: usize) -> Option<libc::iovec> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| libc::iovec {
            // `wrapping_add` makes no claim about the memory; the range
            // was checked above.
            iov_base: self.base.as_ptr().wrapping_add(start).cast(),
            iov_len: len,
        })
    }

    /// Whether every page of `[offset, offset+len)` is in the page cache,
    /// so sending it will not wait for the disk.
    pub fn resident(&self, offset: u64, len: usize) -> bool {
        let Some(iov) = self.iovec(offset, len) else {
            return false;
        };
        if len == 0 {
            return true;
        }
        let page = page_size();
        let start = iov.iov_base as usize;
        let aligned = start - start % page;
        let span = start + len - aligned;
        let pages = span.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: `aligned..aligned+span` lies inside our mapping (page
        // aligned down from an address inside it, and mappings are whole
        // pages); `vec` has one byte per page, as mincore requires.
        let rc = unsafe { libc::mincore(aligned as *mut libc::c_void, span, vec.as_mut_ptr()) };
        rc == 0 && vec.iter().all(|b| b & 1 == 1)
    }
}

impl Drop for MappedBytes {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; `&mut self` means no
        // borrow of this mapping (and so no address from `iovec` still
        // in use by a caller holding `&self`) is live.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
