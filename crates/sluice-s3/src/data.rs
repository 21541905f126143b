//! Object data between HTTP bodies and striped objects: puts stream the
//! request body into a new object ([`put`]), gets stream an object's
//! range into the response body ([`read_stream`]), and copies run
//! wholly on the blocking pool ([`copy`]).
//!
//! A put writes through [`StripedClient::begin_put`], so the entry stays
//! `writing` (invisible to GET, HEAD and LIST) until
//! [`StripedClient::complete_put`] has made every byte durable and set
//! the entry ready, with the ETag and the other attributes already on it.
//! A put whose body fails (the client vanished) removes the half-written
//! object; if that fails too, fsck finds an interrupted put.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use sluice_client::striped::{Pattern, StripedClient, StripedObject, StripedWrite};
use sluice_meta::Entry;
use tokio::sync::mpsc;

use crate::error::GatewayError;
use crate::store::{Store, ATTR_ETAG};

/// Bytes gathered from a body before each write to the servers, and
/// read from them per piece of a response body.
pub(crate) const CHUNK: usize = 4 << 20;

/// What the body task hands the writer.
enum Piece {
    Data(Bytes),
    /// The body ended: set these attributes and complete the put.
    Finish(BTreeMap<String, Vec<u8>>),
}

/// What a finished put made.
pub(crate) struct PutDone {
    pub(crate) etag: String,
    pub(crate) size: u64,
}

/// The hex form of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Begins a put of `name` (a new object, or a new version of one that
/// exists, which replaces it only when the put completes).
fn begin(
    store: &Store,
    client: &mut StripedClient,
    name: &str,
) -> Result<StripedObject, GatewayError> {
    let (unit, servers) = store.servers_for_put()?;
    let shape = client.default_shape(unit, Some(servers))?;
    Ok(client.begin_put(name, &shape)?)
}

/// Gives up a put that will not complete: the new object, or the new
/// version (the object it was to replace left as it was), is removed;
/// what cannot be is logged and left for fsck.
fn abandon(client: &mut StripedClient, object: StripedObject) {
    let name = object.name().to_owned();
    if let Err(e) = client.abort_put(object) {
        tracing::warn!(object = %name, error = %e, "an abandoned put is left for fsck");
    }
}

/// Writes what the body task sends into a new object `name`.
fn write_put(
    store: &Store,
    client: &mut StripedClient,
    name: &str,
    mut rx: mpsc::Receiver<Piece>,
) -> Result<(), GatewayError> {
    let mut object = begin(store, client, name)?;
    let mut at = 0u64;
    loop {
        let done = match rx.blocking_recv() {
            Some(Piece::Data(data)) => {
                let pattern = Pattern::Contiguous {
                    offset: at,
                    length: data.len() as u64,
                };
                at += data.len() as u64;
                client
                    .write(&mut object, &pattern, &data, &StripedWrite::default())
                    .map(|()| false)
            }
            Some(Piece::Finish(attrs)) => client
                .set_attrs(&mut object, attrs, Vec::new())
                .and_then(|()| client.complete_put(&mut object))
                .map(|()| true),
            None => {
                abandon(client, object);
                return Err(GatewayError::Body {
                    why: "the request body ended early".into(),
                });
            }
        };
        match done {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => {
                abandon(client, object);
                return Err(e.into());
            }
        }
    }
}

/// Puts `body` as the new object `name`, with `attrs` (the ETag is
/// added here).
pub(crate) async fn put<S, E>(
    store: &Arc<Store>,
    name: String,
    body: Option<S>,
    mut attrs: BTreeMap<String, Vec<u8>>,
) -> Result<PutDone, GatewayError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let (tx, rx) = mpsc::channel(2);
    let writer = store.run(move |store, client| write_put(store, client, &name, rx));
    let feed = async move {
        let mut md5 = Md5::new();
        let mut size = 0u64;
        let mut buf = BytesMut::new();
        if let Some(mut body) = body {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| GatewayError::Body { why: e.to_string() })?;
                md5.update(&chunk);
                size += chunk.len() as u64;
                buf.extend_from_slice(&chunk);
                if buf.len() >= CHUNK && tx.send(Piece::Data(buf.split().freeze())).await.is_err() {
                    // The writer stopped: its error says why.
                    return Ok(None);
                }
            }
        }
        if !buf.is_empty() && tx.send(Piece::Data(buf.freeze())).await.is_err() {
            return Ok(None);
        }
        let etag = hex(&md5.finalize());
        attrs.insert(ATTR_ETAG.to_owned(), etag.clone().into_bytes());
        if tx.send(Piece::Finish(attrs)).await.is_err() {
            return Ok(None);
        }
        Ok::<_, GatewayError>(Some(PutDone { etag, size }))
    };
    // The body is read here while the writer runs on the blocking pool;
    // a failed body drops the sender, which makes the writer abandon the
    // put.
    let (fed, written) = futures::future::join(feed, writer).await;
    written?;
    match fed? {
        Some(done) => Ok(done),
        None => Err(GatewayError::Worker("the put's writer stopped".into())),
    }
}

/// A response body fed by a blocking reader.
pub(crate) struct ChunkStream(mpsc::Receiver<Result<Bytes, GatewayError>>);

impl Stream for ChunkStream {
    type Item = Result<Bytes, GatewayError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Streams bytes `range` of `entry`'s object, [`CHUNK`] at a time, read
/// on the blocking pool as the client takes them.
pub(crate) fn read_stream(
    store: &Arc<Store>,
    entry: Entry,
    range: std::ops::Range<u64>,
) -> ChunkStream {
    let (tx, rx) = mpsc::channel(2);
    let store = Arc::clone(store);
    tokio::task::spawn_blocking(move || {
        let r = store.with_client(|_, client| {
            let mut object = client.open(&entry.name)?;
            let mut at = range.start;
            while at < range.end {
                let length = (range.end - at).min(CHUNK as u64);
                let read = client.read(&mut object, &Pattern::Contiguous { offset: at, length })?;
                at += length;
                if tx.blocking_send(Ok(Bytes::from(read.data))).is_err() {
                    // The client went away.
                    return Ok(());
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            tracing::warn!(object = %entry.name, error = %crate::error::error_chain(&e), "a read failed mid-body");
            let _ = tx.blocking_send(Err(e));
        }
    });
    ChunkStream(rx)
}

/// Copies the ready object `from` to the new object `to` with `attrs`
/// (the ETag, the MD5 of the data, is added), on this (blocking) thread.
pub(crate) fn copy(
    store: &Store,
    client: &mut StripedClient,
    from: &Entry,
    to: &str,
    attrs: BTreeMap<String, Vec<u8>>,
) -> Result<PutDone, GatewayError> {
    concat(store, client, &[(from, 0..from.size)], to, attrs, None)
}

/// Puts bytes `range` of each ready object of `sources`, one after
/// another, as the new object `to` with `attrs` and the ETag `etag` (the
/// MD5 of the data when `None`), on this (blocking) thread. A range
/// reaching past its object's end copies what there is.
pub(crate) fn concat(
    store: &Store,
    client: &mut StripedClient,
    sources: &[(&Entry, std::ops::Range<u64>)],
    to: &str,
    mut attrs: BTreeMap<String, Vec<u8>>,
    etag: Option<String>,
) -> Result<PutDone, GatewayError> {
    let mut opened = Vec::with_capacity(sources.len());
    for (from, range) in sources {
        opened.push((client.open(&from.name)?, range.clone()));
    }
    let mut object = begin(store, client, to)?;
    let r = (|| {
        let mut md5 = Md5::new();
        let mut at = 0;
        for (source, range) in &mut opened {
            let end = range.end.min(source.size());
            let mut done = range.start;
            while done < end {
                let length = (end - done).min(CHUNK as u64);
                let from = Pattern::Contiguous {
                    offset: done,
                    length,
                };
                let read = client.read(source, &from)?;
                if etag.is_none() {
                    md5.update(&read.data);
                }
                let into = Pattern::Contiguous { offset: at, length };
                client.write(&mut object, &into, &read.data, &StripedWrite::default())?;
                done += length;
                at += length;
            }
        }
        let etag = etag.unwrap_or_else(|| hex(&md5.finalize()));
        attrs.insert(ATTR_ETAG.to_owned(), etag.clone().into_bytes());
        client.set_attrs(&mut object, attrs, Vec::new())?;
        client.complete_put(&mut object)?;
        Ok::<_, GatewayError>(PutDone { etag, size: at })
    })();
    if r.is_err() {
        abandon(client, object);
    }
    r
}
