//! Opening a file or block device as a [`FileDevice`]: checking what the
//! options ask for, opening (read-only when the file cannot be written),
//! sizing, and mapping a buffered regular file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

use rustix::fs::SeekFrom;

use super::{FileDevice, FileOptions, OpenError, DIRECT_ALIGN};
use crate::lock::{lock_file, LockMode};
use crate::MappedBytes;

/// `f_type` of a tmpfs filesystem (statfs(2)).
const TMPFS_MAGIC: i64 = 0x0102_1994;

impl FileDevice {
    /// Opens (or creates) `path` as a device.
    pub fn open(path: &Path, options: &FileOptions) -> Result<Self, OpenError> {
        if let Some(size) = options.size {
            check_direct_alignment(path, options, size)?;
        }
        let exists = path.exists();
        if !exists {
            check_can_create(path, options)?;
        }
        let (file, read_only) = open_file(path, options, exists)?;
        // Before anything is resized or mapped: another process may be
        // serving this file.
        let mode = if read_only {
            LockMode::Shared
        } else {
            LockMode::Exclusive
        };
        lock_file(&file, path, mode)?;
        let meta = file.metadata().map_err(|source| OpenError::Open {
            path: path.to_owned(),
            source,
        })?;
        let file_type = meta.file_type();
        let block_device = file_type.is_block_device();
        let size = if block_device {
            block_device_size(path, &file, options.size)?
        } else if file_type.is_file() {
            regular_file_size(path, &file, meta.len(), options.size, read_only)?
        } else {
            return Err(OpenError::NotAFileOrDevice {
                path: path.to_owned(),
            });
        };
        check_direct_alignment(path, options, size)?;
        if file_type.is_file() && !read_only {
            warn_if_it_cannot_fill(path, &file, size);
        }
        let in_memory = is_in_memory(&file);
        let mapped = if options.direct || block_device || size == 0 {
            None
        } else {
            map_file(path, &file, size, read_only)
        };
        Ok(Self {
            mapped,
            file,
            label: path.display().to_string(),
            size,
            read_only,
            direct: options.direct,
            block_device,
            nowait_supported: AtomicBool::new(!options.direct),
            sync_failed: AtomicBool::new(false),
            unsynced: AtomicBool::new(false),
            sync_lock: Mutex::new(()),
            syncs: AtomicU64::new(0),
            mapped_pieces: AtomicU64::new(0),
            in_memory,
        })
    }
}

/// Refuses a size O_DIRECT cannot serve: not a multiple of
/// [`DIRECT_ALIGN`].
fn check_direct_alignment(path: &Path, options: &FileOptions, size: u64) -> Result<(), OpenError> {
    if options.direct && !size.is_multiple_of(DIRECT_ALIGN as u64) {
        return Err(OpenError::UnalignedDirect {
            path: path.to_owned(),
            size,
            align: DIRECT_ALIGN,
        });
    }
    Ok(())
}

/// Checks that a missing `path` can be created: its directory exists
/// and a size was given.
fn check_can_create(path: &Path, options: &FileOptions) -> Result<(), OpenError> {
    let dir = match path.parent() {
        Some(d) if d.as_os_str().is_empty() => Path::new("."),
        Some(d) => d,
        None => Path::new("/"),
    };
    if !dir.is_dir() {
        return Err(OpenError::MissingDirectory {
            path: path.to_owned(),
            dir: dir.to_owned(),
        });
    }
    if options.read_only {
        return Err(OpenError::MissingReadOnly {
            path: path.to_owned(),
        });
    }
    if options.size.is_none() {
        return Err(OpenError::MissingSize {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// Opens `path` (creating it if it does not `exist` and may be
/// written), and says whether it is served read-only: as asked, or
/// because an existing file turned out not to be writable.
fn open_file(path: &Path, options: &FileOptions, exists: bool) -> Result<(File, bool), OpenError> {
    let open = |read_only: bool| {
        let mut oo = OpenOptions::new();
        oo.read(true)
            .write(!read_only)
            .create(!read_only && !exists);
        if options.direct {
            oo.custom_flags(libc_o_direct());
        }
        oo.open(path)
    };
    let read_only = options.read_only;
    match open(read_only) {
        // Readable but not writable (permissions, a read-only mount):
        // served read-only, as nbdkit does, rather than refused.
        Err(e)
            if !read_only
                && exists
                && matches!(
                    e.raw_os_error(),
                    Some(libc::EACCES | libc::EPERM | libc::EROFS)
                ) =>
        {
            let file = open(true).map_err(|_| OpenError::Open {
                path: path.to_owned(),
                source: e,
            })?;
            tracing::warn!(
                path = %path.display(),
                "{} is not writable; serving it read-only",
                path.display()
            );
            Ok((file, true))
        }
        r => r
            .map(|file| (file, read_only))
            .map_err(|source| OpenError::Open {
                path: path.to_owned(),
                source,
            }),
    }
}

/// The size of a block device: the `requested` size, which must fit,
/// or all of it.
fn block_device_size(path: &Path, file: &File, requested: Option<u64>) -> Result<u64, OpenError> {
    let actual = rustix::fs::seek(file, SeekFrom::End(0)).map_err(|e| OpenError::Open {
        path: path.to_owned(),
        source: e.into(),
    })?;
    match requested {
        Some(requested) if requested > actual => Err(OpenError::DeviceTooSmall {
            path: path.to_owned(),
            actual,
            requested,
        }),
        Some(requested) => Ok(requested),
        None => Ok(actual),
    }
}

/// The size of a regular file of `actual` bytes: extended to the
/// `requested` size if shorter (unless `read_only`), never truncated.
fn regular_file_size(
    path: &Path,
    file: &File,
    actual: u64,
    requested: Option<u64>,
    read_only: bool,
) -> Result<u64, OpenError> {
    match requested {
        Some(requested) if requested > actual && read_only => Err(OpenError::ReadOnlyTooSmall {
            path: path.to_owned(),
            actual,
            requested,
        }),
        Some(requested) if requested < actual => Err(OpenError::WouldTruncate {
            path: path.to_owned(),
            actual,
            requested,
        }),
        Some(requested) if requested > actual => {
            file.set_len(requested)
                .map_err(|source| OpenError::Resize {
                    path: path.to_owned(),
                    size: requested,
                    source,
                })?;
            Ok(requested)
        }
        _ => Ok(actual),
    }
}

/// Warns when the filesystem of a sparse file has less space free than
/// the file's holes: writes into them will fail with ENOSPC.
fn warn_if_it_cannot_fill(path: &Path, file: &File, size: u64) {
    use std::os::unix::fs::MetadataExt;
    let (Ok(meta), Ok(fs)) = (file.metadata(), rustix::fs::fstatvfs(file)) else {
        return;
    };
    let holes = size.saturating_sub(meta.blocks().saturating_mul(512));
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    if holes > free {
        tracing::warn!(
            path = %path.display(),
            holes,
            free,
            "{} has {holes} bytes not yet allocated but its filesystem only {free} bytes free; writes past that will fail with ENOSPC",
            path.display()
        );
    }
}

/// Whether the file lives in memory. tmpfs keeps file data in memory:
/// reads, writes and syncs never wait on a device, so requests run on
/// the connection thread.
// (`f_type` is an i64 on x86-64 and narrower on other targets.)
#[allow(clippy::useless_conversion)]
fn is_in_memory(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|st| i64::from(st.f_type) == TMPFS_MAGIC)
}

/// A shared mapping of a buffered regular file of `size` bytes
/// (writable unless `read_only`), or `None` if it cannot be mapped.
fn map_file(path: &Path, file: &File, size: u64, read_only: bool) -> Option<MappedBytes> {
    if read_only {
        MappedBytes::map(file, size)
    } else {
        MappedBytes::map_writable(file, size)
    }
    .map_err(|e| tracing::debug!(path = %path.display(), error = %e, "cannot map the file; reads are copied"))
    .ok()
}

/// `O_DIRECT` for this platform.
fn libc_o_direct() -> i32 {
    rustix::fs::OFlags::DIRECT.bits() as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::tests::open_sparse;
    use crate::{BlockDevice, BlockingClass};

    #[test]
    fn refuses_to_truncate_and_needs_size_to_create() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        assert!(matches!(
            FileDevice::open(&path, &FileOptions::default()),
            Err(OpenError::MissingSize { .. })
        ));
        open_sparse(&dir, 8192);
        assert!(matches!(
            FileDevice::open(
                &path,
                &FileOptions {
                    size: Some(4096),
                    ..Default::default()
                }
            ),
            Err(OpenError::WouldTruncate { .. })
        ));
        let reopened = FileDevice::open(&path, &FileOptions::default()).unwrap();
        assert_eq!(reopened.size(), 8192);
    }

    #[test]
    fn read_only_files_are_never_created_or_resized() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let ro = |size| FileOptions {
            read_only: true,
            size,
            ..Default::default()
        };
        let e = FileDevice::open(&path, &ro(Some(4096))).unwrap_err();
        assert!(matches!(e, OpenError::MissingReadOnly { .. }), "{e}");
        assert!(!path.exists());
        open_sparse(&dir, 4096);
        let e = FileDevice::open(&path, &ro(Some(8192))).unwrap_err();
        assert!(matches!(e, OpenError::ReadOnlyTooSmall { .. }), "{e}");
        assert_eq!(FileDevice::open(&path, &ro(None)).unwrap().size(), 4096);
    }

    #[test]
    fn a_missing_directory_is_named_not_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-dir").join("img");
        for size in [None, Some(4096)] {
            let e = FileDevice::open(
                &path,
                &FileOptions {
                    size,
                    ..Default::default()
                },
            )
            .unwrap_err();
            assert!(matches!(e, OpenError::MissingDirectory { .. }), "{e}");
            assert!(e.to_string().contains("no-such-dir does not exist"), "{e}");
        }
    }

    #[test]
    fn direct_io_declares_its_alignment_and_needs_aligned_sizes() {
        // tempdir lives on the build machine's disk filesystem (ext4 here),
        // which supports O_DIRECT; tmpfs would refuse the open. Round
        // trips from misaligned buffers are in the conformance suite.
        let dir = tempfile::tempdir().unwrap();
        let opts = FileOptions {
            direct: true,
            size: Some(1 << 20),
            ..Default::default()
        };
        let dev = FileDevice::open(&dir.path().join("img"), &opts).expect("O_DIRECT open");
        assert_eq!(dev.capability().min_block, 4096);
        assert_eq!(dev.capability().blocking, BlockingClass::Always);
        assert!(dev
            .zero_copy()
            .is_some_and(|z| !z.splices_writes() && z.mapped().is_none()));
        assert!(matches!(
            FileDevice::open(
                &dir.path().join("odd"),
                &FileOptions {
                    direct: true,
                    size: Some(1000),
                    ..Default::default()
                }
            ),
            Err(OpenError::UnalignedDirect { .. })
        ));
    }
}
