//! Whole-file advisory locks (`flock(2)`) that keep two processes from
//! serving the same image, journal or directory: exclusive for what is
//! written, shared for what is only read, as qemu-nbd does. A lock
//! another process holds is refused at once, naming the file and, where
//! `/proc/locks` tells, the process holding it.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;
use thiserror::Error;

/// How a file is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Others may read too (a read-only export).
    Shared,
    /// No one else (anything written).
    Exclusive,
}

/// A lock that could not be taken.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another open of the file holds a conflicting lock.
    #[error("{path} is in use by {holder}; stop it or give another {what}")]
    Held {
        path: PathBuf,
        /// The process holding the lock, as people read it.
        holder: String,
        /// What to give instead ("file", "directory").
        what: &'static str,
    },
    /// The lock could not be asked for.
    #[error("cannot lock {path}")]
    Io { path: PathBuf, source: io::Error },
}

/// Locks `file` (open at `path`) in `mode` without waiting. A filesystem
/// that has no locks (some network filesystems) is not an error: the
/// file is used unlocked.
pub fn lock_file(file: &File, path: &Path, mode: LockMode) -> Result<(), LockError> {
    lock(file, path, mode, "file")
}

/// Opens the directory `dir` and locks it in `mode`; the lock lasts as
/// long as the returned handle.
pub fn lock_dir(dir: &Path, mode: LockMode) -> Result<File, LockError> {
    let file = File::open(dir).map_err(|source| LockError::Io {
        path: dir.to_owned(),
        source,
    })?;
    lock(&file, dir, mode, "directory")?;
    Ok(file)
}

fn lock(file: &File, path: &Path, mode: LockMode, what: &'static str) -> Result<(), LockError> {
    let op = match mode {
        LockMode::Shared => FlockOperation::NonBlockingLockShared,
        LockMode::Exclusive => FlockOperation::NonBlockingLockExclusive,
    };
    match rustix::fs::flock(file, op) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(LockError::Held {
            path: path.to_owned(),
            holder: holder(file),
            what,
        }),
        Err(rustix::io::Errno::NOLCK | rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => {
            tracing::warn!(path = %path.display(), "the filesystem has no file locks; {} is used unlocked", path.display());
            Ok(())
        }
        Err(e) => Err(LockError::Io {
            path: path.to_owned(),
            source: e.into(),
        }),
    }
}

/// Who holds a lock on `file`: "process 1234 (sluice)" from
/// `/proc/locks`, or "another process" when it cannot be told.
fn holder(file: &File) -> String {
    let Ok(meta) = file.metadata() else {
        return "another process".to_owned();
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let me = std::process::id();
    let pids: Vec<u32> = locks
        .lines()
        .filter_map(|line| flock_holder(line, meta.dev(), meta.ino()))
        .collect();
    // Our own lock on the same file (another open of it in this process)
    // is listed too; prefer another process if there is one.
    match pids.iter().find(|&&p| p != me).or(pids.first()) {
        Some(&pid) if pid == me => format!("this process (pid {pid}), which opened it twice"),
        Some(&pid) => match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            Ok(name) => format!("process {pid} ({})", name.trim()),
            Err(_) => format!("process {pid}"),
        },
        None => "another process".to_owned(),
    }
}

/// The pid of a `/proc/locks` line that is a flock on the file with
/// device `dev` and inode `ino`, e.g. `3: FLOCK  ADVISORY  WRITE 4242
/// 08:01:1311 0 EOF`. A line with `->` is a waiter, not a holder.
fn flock_holder(line: &str, dev: u64, ino: u64) -> Option<u32> {
    let mut fields = line.split_whitespace().skip(1);
    if fields.next()? != "FLOCK" {
        return None;
    }
    let _advisory = fields.next()?;
    let _access = fields.next()?;
    let pid = fields.next()?.parse().ok()?;
    let mut id = fields.next()?.split(':');
    let major = u64::from_str_radix(id.next()?, 16).ok()?;
    let minor = u64::from_str_radix(id.next()?, 16).ok()?;
    let inode: u64 = id.next()?.parse().ok()?;
    let same_dev =
        major == u64::from(rustix::fs::major(dev)) && minor == u64::from(rustix::fs::minor(dev));
    (same_dev && inode == ino).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_exclusive_lock_is_refused_naming_the_file_and_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let first = File::create(&path).unwrap();
        lock_file(&first, &path, LockMode::Exclusive).unwrap();
        let second = File::open(&path).unwrap();
        let e = lock_file(&second, &path, LockMode::Shared).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        drop(first);
        lock_file(&second, &path, LockMode::Shared).unwrap();
    }

    #[test]
    fn shared_locks_coexist_and_directories_lock_too() {
        let dir = tempfile::tempdir().unwrap();
        let a = lock_dir(dir.path(), LockMode::Shared).unwrap();
        let _b = lock_dir(dir.path(), LockMode::Shared).unwrap();
        assert!(matches!(
            lock_dir(dir.path(), LockMode::Exclusive),
            Err(LockError::Held { .. })
        ));
        drop(a);
    }

    #[test]
    fn proc_locks_lines_are_read() {
        let line = "3: FLOCK  ADVISORY  WRITE 4242 08:01:1311 0 EOF";
        let dev = rustix::fs::makedev(8, 1);
        assert_eq!(flock_holder(line, dev, 1311), Some(4242));
        assert_eq!(flock_holder(line, dev, 1312), None);
        assert_eq!(
            flock_holder("3: POSIX  ADVISORY  WRITE 4242 08:01:1311 0 EOF", dev, 1311),
            None
        );
        assert_eq!(
            flock_holder(
                "3: -> FLOCK  ADVISORY  WRITE 4242 08:01:1311 0 EOF",
                dev,
                1311
            ),
            None
        );
    }
}
