//! A thread-safe client: any number of threads or async tasks issue
//! requests on one connection at once. Requests are written by whichever
//! caller finds the socket idle, together with everything queued
//! meanwhile (one write per burst); a reader thread parses replies and
//! completes each request's future, in whatever order the server answers.

use std::collections::HashMap;
use std::io::Write;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use sluice_nbd_proto::Extent;
use tokio::sync::oneshot;
use tracing::debug;

use crate::connection::{Outcome, Pending, ReplyDecoder, Request, RequestEncoder};
use crate::handshake::{handshake, ConnectOptions, ExportDetails, Socket};
use crate::{ClientError, Connection, NbdUri};

/// The result of a request on a [`Client`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Success without data.
    Done,
    /// Read data.
    Data(Vec<u8>),
    /// Block status extents.
    Extents(Vec<Extent>),
}

type Waiter = oneshot::Sender<Result<Reply, ClientError>>;

struct WriterState {
    encoder: RequestEncoder,
    registrations: mpsc::Sender<(u64, Pending, Waiter)>,
    /// A caller is writing; others just queue.
    sending: bool,
    /// Set once the connection failed; new requests fail at once.
    failed: bool,
}

struct Shared {
    details: ExportDetails,
    writer: Mutex<WriterState>,
    socket: Mutex<Socket>,
    shutdown_socket: Socket,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Ends the reader thread.
        self.shutdown_socket.shutdown();
    }
}

/// A cloneable handle to one NBD connection, usable from many threads and
/// async tasks at once.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("details", &self.shared.details)
            .finish()
    }
}

fn closed(target: &str) -> ClientError {
    ClientError::Closed {
        target: target.to_owned(),
    }
}

impl Client {
    /// Connects to `uri`.
    pub fn connect(uri: &NbdUri, options: &ConnectOptions) -> Result<Self, ClientError> {
        let (socket, details) = handshake(uri, options)?;
        Self::start(
            socket,
            RequestEncoder::new(details.clone()),
            ReplyDecoder::new(&details),
        )
    }

    /// Opens `n` connections to one export (multi-conn). Fails if `n > 1`
    /// and the server does not allow multi-conn for the export.
    pub fn connect_many(
        uri: &NbdUri,
        options: &ConnectOptions,
        n: usize,
    ) -> Result<Vec<Self>, ClientError> {
        let first = Self::connect(uri, options)?;
        if n > 1 && !first.details().can_multi_conn() {
            return Err(ClientError::Handshake {
                target: first.details().target.clone(),
                reason: format!(
                    "export {:?} does not allow multiple connections",
                    uri.export
                ),
            });
        }
        let mut all = vec![first];
        for _ in 1..n {
            all.push(Self::connect(uri, options)?);
        }
        Ok(all)
    }

    /// Turns an idle pipelined [`Connection`] into a shared client.
    pub fn from_connection(conn: Connection) -> Result<Self, ClientError> {
        if conn.in_flight() > 0 {
            return Err(ClientError::Violation {
                target: conn.details().target.clone(),
                reason: "connection still has requests in flight".into(),
            });
        }
        let (socket, encoder, decoder) = conn.into_parts();
        Self::start(socket, encoder, decoder)
    }

    fn start(
        socket: Socket,
        encoder: RequestEncoder,
        mut decoder: ReplyDecoder,
    ) -> Result<Self, ClientError> {
        let details = encoder.details.clone();
        let io = |source| ClientError::Io {
            target: details.target.clone(),
            source,
        };
        let mut read_half = socket.try_clone().map_err(io)?;
        let shutdown_socket = socket.try_clone().map_err(io)?;
        let (tx, rx) = mpsc::channel::<(u64, Pending, Waiter)>();
        let shared = Arc::new(Shared {
            details: details.clone(),
            writer: Mutex::new(WriterState {
                encoder,
                registrations: tx,
                sending: false,
                failed: false,
            }),
            socket: Mutex::new(socket),
            shutdown_socket,
        });
        let weak = Arc::downgrade(&shared);
        let target = details.target.clone();
        std::thread::Builder::new()
            .name("sluice-client-rx".into())
            .spawn(move || {
                let mut waiters: HashMap<u64, Waiter> = HashMap::new();
                let error = loop {
                    if let Err(e) = decoder.fill(&mut read_half) {
                        break e;
                    }
                    while let Ok((cookie, pending, waiter)) = rx.try_recv() {
                        decoder.register(cookie, pending);
                        waiters.insert(cookie, waiter);
                    }
                    let result = decoder.process(&mut |c| {
                        let reply = c.result.map(|o| match o {
                            Outcome::Done => Reply::Done,
                            Outcome::Data(d) => Reply::Data(d.to_vec()),
                            Outcome::Extents(e) => Reply::Extents(e),
                        });
                        if let Some(w) = waiters.remove(&c.cookie) {
                            let _ = w.send(reply);
                        }
                    });
                    if let Err(e) = result {
                        break e;
                    }
                };
                debug!(%target, error = %error, "client reader stopped");
                if let Some(shared) = weak.upgrade() {
                    let mut w = shared.writer.lock().unwrap_or_else(|p| p.into_inner());
                    w.failed = true;
                }
                while let Ok((_, _, waiter)) = rx.try_recv() {
                    let _ = waiter.send(Err(closed(&target)));
                }
                for (_, w) in waiters {
                    let _ = w.send(Err(closed(&target)));
                }
            })
            .map_err(io)?;
        Ok(Self { shared })
    }

    /// What the handshake settled.
    pub fn details(&self) -> &ExportDetails {
        &self.shared.details
    }

    /// Issues a request; the returned receiver completes with its reply.
    fn submit(
        &self,
        request: Request<'_>,
    ) -> Result<oneshot::Receiver<Result<Reply, ClientError>>, ClientError> {
        let target = &self.shared.details.target;
        let (tx, rx) = oneshot::channel();
        let mut w = self.shared.writer.lock().unwrap_or_else(|p| p.into_inner());
        if w.failed {
            return Err(closed(target));
        }
        let (cookie, pending) = w.encoder.encode(request)?;
        // Registered before the bytes can reach the server, so the reader
        // always knows a cookie before its reply arrives.
        if w.registrations.send((cookie, pending, tx)).is_err() {
            w.failed = true;
            return Err(closed(target));
        }
        if w.sending {
            return Ok(rx);
        }
        w.sending = true;
        loop {
            let mut batch = std::mem::take(&mut w.encoder.out);
            drop(w);
            let result = self
                .shared
                .socket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .write_all(&batch);
            w = self.shared.writer.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(source) = result {
                w.failed = true;
                w.sending = false;
                self.shared.shutdown_socket.shutdown();
                return Err(ClientError::Io {
                    target: target.clone(),
                    source,
                });
            }
            if w.encoder.out.is_empty() {
                batch.clear();
                w.encoder.out = batch;
                w.sending = false;
                return Ok(rx);
            }
        }
    }

    /// Runs a request to completion asynchronously.
    pub async fn call(&self, request: Request<'_>) -> Result<Reply, ClientError> {
        let rx = self.submit(request)?;
        rx.await.map_err(|_| closed(&self.shared.details.target))?
    }

    /// Runs a request to completion, blocking the calling thread. Must not
    /// be called from inside an async runtime.
    pub fn call_blocking(&self, request: Request<'_>) -> Result<Reply, ClientError> {
        let rx = self.submit(request)?;
        rx.blocking_recv()
            .map_err(|_| closed(&self.shared.details.target))?
    }

    /// Reads `length` bytes at `offset`.
    pub async fn read(&self, offset: u64, length: u32) -> Result<Vec<u8>, ClientError> {
        match self.call(Request::Read { offset, length }).await? {
            Reply::Data(d) => Ok(d),
            _ => Ok(Vec::new()),
        }
    }

    /// Writes `data` at `offset`.
    pub async fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        self.call(Request::Write { offset, data, fua })
            .await
            .map(drop)
    }

    /// Flushes.
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.call(Request::Flush).await.map(drop)
    }

    /// Trims.
    pub async fn trim(&self, offset: u64, length: u64) -> Result<(), ClientError> {
        self.call(Request::Trim {
            offset,
            length,
            fua: false,
        })
        .await
        .map(drop)
    }

    /// Zeroes a range.
    pub async fn write_zeroes(
        &self,
        offset: u64,
        length: u64,
        no_hole: bool,
    ) -> Result<(), ClientError> {
        self.call(Request::WriteZeroes {
            offset,
            length,
            no_hole,
            fast: false,
            fua: false,
        })
        .await
        .map(drop)
    }

    /// Allocation extents of a range.
    pub async fn block_status(&self, offset: u64, length: u64) -> Result<Vec<Extent>, ClientError> {
        match self
            .call(Request::BlockStatus {
                offset,
                length,
                req_one: false,
            })
            .await?
        {
            Reply::Extents(e) => Ok(e),
            _ => Ok(Vec::new()),
        }
    }
}
