//! The admin socket: a local Unix socket (mode 0600, so only the
//! server's user may use it) on which the running server answers
//! operators about its RAID exports (`sluice raid status|replace|scrub`).
//!
//! The protocol is one JSON object per line each way: the client sends
//! one [`AdminRequest`], the server answers one [`AdminReply`] and
//! closes the connection. docs/RAID.md shows the messages.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_raid::{ArrayStatus, ScrubReport};
use sluice_types::error_chain;
use thiserror::Error;
use tracing::{debug, warn};

use crate::export::ExportRegistry;
use crate::socket::{clear_stale_socket, SocketPathError};
use crate::stop::{wait_readable, Readiness, StopSignal};

/// Longest request line accepted.
const MAX_REQUEST: u64 = 64 << 10;
/// How long the accept loop pauses after an error before trying again.
const POLL: Duration = Duration::from_millis(100);

/// A request on the admin socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum AdminRequest {
    /// The status of one RAID export, or of all.
    Status {
        /// The export; all RAID exports if absent.
        #[serde(default)]
        export: Option<String>,
    },
    /// Put the NBD export `uri` in place `member` of the array and
    /// rebuild it in the background.
    Replace {
        /// The RAID export.
        export: String,
        /// The member's index.
        member: usize,
        /// The new member's URI.
        uri: String,
    },
    /// Check (with `repair`, fix) every stripe's parity; answered when
    /// done.
    Scrub {
        /// The RAID export.
        export: String,
        /// Rewrite the parity of stripes that do not match.
        #[serde(default)]
        repair: bool,
    },
}

/// One RAID export's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportStatus {
    /// The export's name.
    pub export: String,
    /// Its array.
    #[serde(flatten)]
    pub array: ArrayStatus,
}

/// The answer to an [`AdminRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "lowercase")]
pub enum AdminReply {
    /// The arrays asked about.
    Status {
        /// One per RAID export asked about.
        arrays: Vec<ExportStatus>,
    },
    /// The member was replaced and its rebuild started.
    Replaced {
        /// The export.
        export: String,
        /// The member's index.
        member: usize,
    },
    /// The scrub finished.
    Scrubbed {
        /// The export.
        export: String,
        /// What it found.
        report: ScrubReport,
    },
    /// The request failed; the message says why.
    Error {
        /// What failed and why, with its causes.
        message: String,
    },
}

/// Why the admin socket could not be set up or asked.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The path holds something that must not be replaced.
    #[error(transparent)]
    SocketPath(#[from] SocketPathError),
    /// Binding, securing or connecting to the socket failed.
    #[error("cannot {doing} admin socket {path}")]
    Io {
        /// What was being done.
        doing: &'static str,
        /// The socket's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The socket's directory does not exist.
    #[error("cannot bind admin socket {path}: directory {dir} does not exist")]
    MissingDirectory {
        /// The socket's path.
        path: PathBuf,
        /// Its missing directory.
        dir: PathBuf,
    },
    /// The server's answer is not an admin reply.
    #[error("admin socket {path} answered something that is not a reply")]
    BadReply {
        /// The socket's path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// A bound admin socket, not yet answering; dropping it removes the path.
#[derive(Debug)]
pub struct AdminSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl AdminSocket {
    /// Binds `path` (replacing only a stale socket) and makes it
    /// readable and writable by the server's user alone.
    pub fn bind(path: &Path) -> Result<Self, AdminError> {
        let io = |doing, source| AdminError::Io {
            doing,
            path: path.to_path_buf(),
            source,
        };
        clear_stale_socket(path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(AdminError::MissingDirectory {
                    path: path.to_path_buf(),
                    dir: dir.to_path_buf(),
                });
            }
        }
        let listener = UnixListener::bind(path).map_err(|e| io("bind", e))?;
        let socket = Self {
            listener,
            path: path.to_path_buf(),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io("restrict to mode 0600", e))?;
        socket
            .listener
            .set_nonblocking(true)
            .map_err(|e| io("set up", e))?;
        Ok(socket)
    }

    /// Answers requests on a thread of its own until `stop` is set.
    pub(crate) fn serve(
        self,
        registry: Arc<ExportRegistry>,
        stop: Arc<StopSignal>,
    ) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("sluice-admin".into())
            .spawn(move || {
                use std::os::fd::AsFd;
                while !stop.is_set() {
                    match wait_readable(self.listener.as_fd(), Some(&stop), None) {
                        Ok(Readiness::Readable) => {}
                        Ok(_) => continue,
                        Err(e) => {
                            warn!(error = %e, "admin socket wait failed");
                            std::thread::sleep(POLL);
                            continue;
                        }
                    }
                    match self.listener.accept() {
                        Ok((stream, _)) => {
                            let registry = Arc::clone(&registry);
                            let spawned = std::thread::Builder::new()
                                .name("sluice-admin-conn".into())
                                .spawn(move || answer(stream, &registry));
                            if let Err(e) = spawned {
                                warn!(error = %e, "cannot start an admin connection thread");
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => {
                            warn!(error = %e, "admin socket accept failed");
                            std::thread::sleep(POLL);
                        }
                    }
                }
            })
    }
}

/// Reads one request from `stream`, answers it.
fn answer(stream: UnixStream, registry: &ExportRegistry) {
    if let Err(e) = stream.set_nonblocking(false) {
        debug!(error = %e, "admin connection dropped");
        return;
    }
    let mut line = String::new();
    let read = BufReader::new((&stream).take(MAX_REQUEST)).read_line(&mut line);
    let reply = match read {
        Err(e) => AdminReply::Error {
            message: format!("cannot read the request: {e}"),
        },
        Ok(_) => match serde_json::from_str::<AdminRequest>(&line) {
            Ok(request) => handle(request, registry),
            Err(e) => AdminReply::Error {
                message: format!("not an admin request: {e}"),
            },
        },
    };
    let mut out = match serde_json::to_vec(&reply) {
        Ok(out) => out,
        Err(e) => {
            warn!(error = %e, "cannot encode an admin reply");
            return;
        }
    };
    out.push(b'\n');
    if let Err(e) = (&stream).write_all(&out) {
        debug!(error = %e, "admin reply not sent");
    }
}

/// What answers `request`.
pub(crate) fn handle(request: AdminRequest, registry: &ExportRegistry) -> AdminReply {
    let raid = |name: &str| {
        let export = registry
            .all()
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| format!("no export named {name:?}"))?;
        export
            .raid
            .clone()
            .ok_or_else(|| format!("export {name:?} is not a RAID array"))
    };
    let error = |message| AdminReply::Error { message };
    match request {
        AdminRequest::Status { export } => {
            let arrays = registry
                .all()
                .iter()
                .filter(|e| export.as_ref().is_none_or(|name| &e.name == name))
                .filter_map(|e| {
                    e.raid.as_ref().map(|r| ExportStatus {
                        export: e.name.clone(),
                        array: r.array().status(),
                    })
                })
                .collect::<Vec<_>>();
            match export {
                Some(name) if arrays.is_empty() => match raid(&name) {
                    Err(message) => error(message),
                    Ok(_) => AdminReply::Status { arrays },
                },
                _ => AdminReply::Status { arrays },
            }
        }
        AdminRequest::Replace {
            export,
            member,
            uri,
        } => match raid(&export) {
            Err(message) => error(message),
            Ok(handle) => match handle.replace(member, &uri) {
                Ok(()) => AdminReply::Replaced { export, member },
                Err(e) => error(format!(
                    "cannot replace member {member} of {export:?} with {uri}: {}",
                    error_chain(&e)
                )),
            },
        },
        AdminRequest::Scrub { export, repair } => match raid(&export) {
            Err(message) => error(message),
            Ok(handle) => match handle.array().scrub(repair) {
                Ok(report) => AdminReply::Scrubbed { export, report },
                Err(e) => error(format!("cannot scrub {export:?}: {}", error_chain(&e))),
            },
        },
    }
}

/// Sends `request` to the admin socket at `path` and returns the reply.
pub fn request(path: &Path, request: &AdminRequest) -> Result<AdminReply, AdminError> {
    let io = |doing, source| AdminError::Io {
        doing,
        path: path.to_path_buf(),
        source,
    };
    let stream = UnixStream::connect(path).map_err(|e| io("connect to", e))?;
    let mut line = serde_json::to_vec(request).map_err(|e| io("encode a request for", e.into()))?;
    line.push(b'\n');
    (&stream)
        .write_all(&line)
        .map_err(|e| io("send a request to", e))?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .map_err(|e| io("read the reply from", e))?;
    serde_json::from_str(&reply).map_err(|source| AdminError::BadReply {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use sluice_storage::MemDevice;

    use super::*;
    use crate::export::Export;

    #[test]
    fn the_socket_is_private_and_answers_line_by_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("admin.sock");
        let socket = AdminSocket::bind(&path).expect("bind");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let plain = Export::new(
            "plain".into(),
            String::new(),
            Arc::new(MemDevice::new(1 << 20, false)),
        );
        let registry = Arc::new(ExportRegistry::new(vec![Arc::new(plain)]));
        let stop = Arc::new(StopSignal::new().expect("stop"));
        let thread = socket.serve(registry, Arc::clone(&stop)).expect("serve");

        let all = request(&path, &AdminRequest::Status { export: None }).expect("status");
        assert_eq!(all, AdminReply::Status { arrays: vec![] });
        let reply = request(
            &path,
            &AdminRequest::Status {
                export: Some("plain".into()),
            },
        )
        .expect("status");
        assert_eq!(
            reply,
            AdminReply::Error {
                message: "export \"plain\" is not a RAID array".into()
            }
        );
        let reply = request(
            &path,
            &AdminRequest::Scrub {
                export: "none".into(),
                repair: true,
            },
        )
        .expect("scrub");
        assert_eq!(
            reply,
            AdminReply::Error {
                message: "no export named \"none\"".into()
            }
        );
        // Not JSON: an error reply, and the server goes on.
        let mut raw = UnixStream::connect(&path).expect("connect");
        raw.write_all(b"status please\n").expect("send");
        let mut text = String::new();
        raw.read_to_string(&mut text).expect("read");
        assert!(
            text.starts_with("{\"reply\":\"error\",\"message\":\"not an admin request"),
            "{text}"
        );
        assert!(request(&path, &AdminRequest::Status { export: None }).is_ok());

        stop.trigger();
        thread.join().expect("admin thread");
        assert!(
            !path.exists(),
            "the socket is removed when the server stops"
        );
    }
}
