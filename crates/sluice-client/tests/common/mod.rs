//! What the tests against other servers share: a server process on a
//! Unix socket, and a zeroed image file for it to serve.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_client::{ConnectOptions, Connection, NbdUri};

/// A server process on a Unix socket in its own temporary directory,
/// killed on drop.
pub(crate) struct Peer {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    /// Runs `program` with the arguments `args` gives for the socket path
    /// and the temporary directory, and waits until a whole NBD session
    /// on its socket succeeds (the file appears at bind, before the
    /// server listens; a clean session, ended with a disconnect, leaves
    /// no error in the server's log). A server that exits after its first
    /// client needs `--persistent`.
    /// A missing or unlisted program fails the test saying so (see
    /// `sluice_testkit::programs`).
    pub(crate) fn start(program: &str, args: impl FnOnce(&Path, &Path) -> Vec<String>) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let socket = dir.path().join("nbd.sock");
        let argv = args(&socket, dir.path());
        let mut child = Command::new(sluice_testkit::programs::program(program))
            .args(&argv)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let uri: NbdUri = format!("nbd+unix:///?socket={}", socket.display())
            .parse()
            .expect("a socket path makes a valid URI");
        let ready = || {
            Connection::connect(&uri, &ConnectOptions::default())
                .and_then(Connection::disconnect)
                .is_ok()
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{program} {argv:?} exited ({status}) before listening on its socket");
            }
            assert!(
                Instant::now() < deadline,
                "{program} {argv:?} does not listen on its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            socket,
            _dir: dir,
        }
    }

    /// `nbd+unix:///?socket=PATH`.
    pub(crate) fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }
}

/// A sparse, zeroed image file of `size` bytes in `dir`.
pub(crate) fn image(dir: &Path, size: u64) -> PathBuf {
    let path = dir.join("disk.img");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(size))
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    path
}
