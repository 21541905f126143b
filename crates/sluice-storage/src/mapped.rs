//! A read-only shared mapping of a file's bytes, so the server can hand
//! page-cache pages straight to the kernel when it sends a read reply:
//! one copy per byte (page cache → socket) instead of two (page cache →
//! buffer → socket). On two vCPUs shared with the client that second copy
//! is what 1 MiB reads were short of (docs/BENCHMARKS.md: 0.87× nbdkit
//! with pread, 1.54× with the mapping).
//!
//! Rust code never reads or writes the mapped memory: no reference to it
//! is ever made. Only its addresses go to the kernel (`writev`,
//! `mincore`), which checks user addresses itself and reports a fault as
//! EFAULT. So a concurrent `pwrite` to the file, or another process
//! changing or truncating it, cannot cause undefined behaviour here; a
//! reply may be torn by a concurrent write exactly as a `pread` would be.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// A shared, read-only mapping of a whole file (see the module docs).
#[derive(Debug)]
pub struct MappedBytes {
    base: NonNull<u8>,
    len: usize,
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
                libc::PROT_READ,
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
        Ok(Self { base, len })
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
