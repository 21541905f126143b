//! Whether a range of a file is in the page cache, asked of the kernel
//! with `cachestat` (Linux 6.5): one call that reads nothing and maps
//! nothing. A kernel without it (or any other failure) answers "not
//! resident", which only sends callers down their copying path.

use std::fs::File;
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;

/// `struct cachestat_range` of `<linux/mman.h>`.
#[cfg(target_os = "linux")]
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat` of `<linux/mman.h>`: page counts.
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// The syscall's number: 451 on every architecture (it was added after
/// the tables were unified); the `libc` crate does not name it on all.
#[cfg(target_os = "linux")]
const SYS_CACHESTAT: libc::c_long = 451;

/// Whether every page of `[offset, offset + len)` of `file` is in the
/// page cache, so reading it now would not wait for the disk. A hole
/// or a range past the file's end is not resident.
#[cfg(target_os = "linux")]
pub(crate) fn resident(file: &File, offset: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let Some(last) = offset.checked_add(len - 1) else {
        return false;
    };
    let page = rustix::param::page_size() as u64;
    let pages = last / page - offset / page + 1;
    let range = CachestatRange { off: offset, len };
    let mut stat = Cachestat::default();
    // SAFETY: cachestat(2) takes an open descriptor (borrowed from
    // `file` for the call), a pointer to a readable range struct and a
    // pointer to a writable result struct, both `repr(C)` copies of the
    // kernel's layouts and alive for the call, and flags 0. It writes
    // only `stat`.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    rc == 0 && stat.nr_cache >= pages
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn resident(_file: &File, _offset: u64, _len: u64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io::Write;

    use super::*;

    #[test]
    fn written_pages_are_resident_holes_and_the_end_are_not() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 64 * 1024]).unwrap();
        assert!(resident(&f, 0, 64 * 1024), "just written: in the cache");
        assert!(resident(&f, 4000, 10_000));
        assert!(!resident(&f, 60 * 1024, 8 * 1024), "past the end");
        f.set_len(1 << 20).unwrap();
        assert!(!resident(&f, 512 * 1024, 4096), "a hole");
        assert!(resident(&f, 0, 0));
        assert!(!resident(&f, u64::MAX - 10, 20));
    }
}
