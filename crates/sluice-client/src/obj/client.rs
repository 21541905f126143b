//! [`ObjClient`]: a typed, blocking API for every command of the native
//! object protocol over one connection.
//!
//! Each call turns its arguments into wire requests: it picks the DDT
//! (see `plan`), cuts what exceeds the server's published limits into
//! several requests, sends them pipelined, and puts the replies back
//! together. What splitting changes, callers should know:
//!
//! - reads are cut anywhere and reassembled in order; `real_bytes` is
//!   the sum over the pieces;
//! - writes and punches whose pieces touch no common byte are in flight
//!   together; if two pieces overlap they are sent one after the other,
//!   so the later bytes still win;
//! - attributes riding on a split write go with its last piece, sent
//!   once every other piece has succeeded: no reader sees the attributes
//!   before the data (but a reader may see part of the data before the
//!   attributes, as the protocol's atomicity covers one request);
//! - a split APPEND appends its first piece and writes the rest after
//!   it; a split CREATE_AND_WRITE creates the object with the first
//!   piece and writes the rest into it;
//! - CREATE of more objects than one request may make is several
//!   requests; the ids come back in order.

use std::io::{IoSlice, IoSliceMut};
use std::time::Duration;

use sluice_obj_proto::{
    AttachedExport, DdtKind, Features, FlushScope, Limits, MetaReply, MetaRequest, Negotiated,
    Segment,
};

use super::attr::{AttrChange, Attrs, Value};
use super::codec::Codec;
use super::connection::Connection;
use super::handshake::open;
use super::merge::MergePolicy;
use super::request::{
    DataOptions, Entry, ObjRequest, ObjResponse, Page, Range, ReadReply, Stat, LENGTH_ATTR,
    SERVER_ATTR_PREFIX,
};
use super::split::{Carrier, Split};
use super::wire::{RawReply, Wire};
use super::ObjError;
use crate::net::mux::Reconnect;
use crate::net::transport::DEFAULT_CONNECT_TIMEOUT;
use crate::net::uri::ObjUri;
use crate::Durability;

/// How to connect and how much to keep in flight.
#[derive(Debug, Clone)]
pub struct ObjOptions {
    /// Limit on connecting and the whole handshake (TLS included).
    pub connect_timeout: Duration,
    /// Limit on waiting for a reply (`None`: wait for ever). A request
    /// that times out fails with [`ObjError::Timeout`] and the connection
    /// is then unusable.
    pub request_timeout: Option<Duration>,
    /// Features to ask for (those the server does not offer are dropped).
    pub features: Features,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// NBD exports of the same server to attach, by name, for extent
    /// reads and writes ([`ObjClient::exports`] gives their handles).
    pub exports: Vec<String>,
    /// When requests waiting to be sent are packed into batch frames
    /// (temporal merge); a URI's `?merge=` overrides it.
    pub merge: MergePolicy,
    /// Pins the DDT of data commands (`None`: the client picks, see
    /// `plan::choose`): `Sgl` sends every list, a single segment
    /// included, as a scatter/gather list; `Strided` sends every regular
    /// list, a single segment included, as a strided request. A list the
    /// pinned kind cannot describe keeps the client's pick. For
    /// measuring the DDTs against each other.
    pub ddt: Option<DdtKind>,
    /// [`SharedObjClient`](super::SharedObjClient) only: how to survive a
    /// lost connection (off by default; docs/RELIABILITY.md says what it
    /// promises).
    pub reconnect: Reconnect,
}

impl Default for ObjOptions {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            features: Features::NEGOTIABLE,
            max_in_flight: 64,
            exports: Vec::new(),
            merge: MergePolicy::default(),
            ddt: None,
            reconnect: Reconnect::OFF,
        }
    }
}

/// A connection to an object server, owned by one thread.
pub struct ObjClient {
    connection: Connection,
    options: ObjOptions,
}

impl std::fmt::Debug for ObjClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjClient")
            .field("server", &self.connection.server)
            .field("session", &self.connection.session)
            .finish()
    }
}

impl Drop for ObjClient {
    fn drop(&mut self) {
        self.connection.disconnect();
    }
}

impl ObjClient {
    /// Connects to `uri` (its partition, or the default one).
    pub fn connect(uri: &ObjUri, options: &ObjOptions) -> Result<Self, ObjError> {
        let (stream, session) = open(uri, options)?;
        Ok(Self {
            connection: Connection::new(
                stream,
                uri.to_string(),
                session,
                options.request_timeout,
                uri.merge.unwrap_or(options.merge),
            ),
            options: options.clone(),
        })
    }

    /// What the handshake agreed on (features, limits, partition).
    pub fn session(&self) -> &Negotiated {
        &self.connection.session
    }

    /// The server, as its URI.
    pub fn server(&self) -> &str {
        &self.connection.server
    }

    /// The NBD exports attached in the handshake ([`ObjOptions::exports`]),
    /// with the handles extent commands name them by.
    pub fn exports(&self) -> &[AttachedExport] {
        &self.connection.session.exports
    }

    pub(super) fn limits(&self) -> Limits {
        self.connection.session.limits
    }

    fn can_batch(&self) -> bool {
        self.connection.session.features.contains(Features::BATCH)
    }

    pub(super) fn codec(&self) -> Codec<'_> {
        Codec {
            session: &self.connection.session,
            server: &self.connection.server,
            ddt: self.options.ddt,
            spans: true,
        }
    }

    pub(super) fn violation(&self, reason: impl Into<String>) -> ObjError {
        self.codec().violation(reason)
    }

    // ---- running requests -------------------------------------------

    /// One call of the server's metadata service (`META`); a refusal of
    /// the service itself is [`MetaReply::Failed`], not an error.
    pub fn meta(&mut self, request: &MetaRequest) -> Result<MetaReply, ObjError> {
        let mut params = Vec::new();
        let wire = self.codec().meta_wire(request, &mut params)?;
        let reply = self.exchange(std::slice::from_ref(&wire), false).pop();
        let reply = reply.unwrap_or_else(|| Err(self.violation("no reply")))?;
        self.codec().meta_reply(&reply)
    }

    /// Runs one command, splitting it as the limits require.
    pub fn run(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        // Writes and punches go to their pieces at once: a list that fits
        // one request is its only piece there, and trying a single
        // request first planned a list that does not fit twice (a sixth
        // of preparing 32,768 segments).
        let pieces_first = matches!(
            req,
            ObjRequest::Write { .. } | ObjRequest::ExtentWrite { .. } | ObjRequest::Punch { .. }
        );
        if pieces_first {
            self.codec().check_attrs_on_data(req)?;
            return self.run_split(req);
        }
        if let Some(wire) = self.codec().single(req)? {
            let reply = self.exchange(std::slice::from_ref(&wire), false).pop();
            let reply = reply.unwrap_or_else(|| Err(self.violation("no reply")))?;
            return self.codec().interpret(req, reply);
        }
        self.run_split(req)
    }

    pub(super) fn exchange(
        &mut self,
        wires: &[Wire<'_>],
        batch: bool,
    ) -> Vec<Result<RawReply, ObjError>> {
        let n = self.options.max_in_flight;
        self.connection.exchange(wires, batch, n)
    }

    /// Every wire, in flight together; the first failure wins.
    fn all(&mut self, wires: &[Wire<'_>]) -> Result<Vec<RawReply>, ObjError> {
        self.exchange(wires, false).into_iter().collect()
    }

    /// Runs `requests` with as many in flight as allowed, in batch frames
    /// when the server negotiated them; each is answered on its own, in
    /// order of `requests`. Requests that need splitting run after the
    /// others, each split as [`run`](Self::run) does.
    pub fn batch(&mut self, requests: &[ObjRequest<'_>]) -> Vec<Result<ObjResponse, ObjError>> {
        let frames = self.can_batch();
        self.many(requests, frames)
    }

    /// Like [`batch`](Self::batch), but requests go in batch frames only
    /// when the merge policy ([`ObjOptions::merge`]) packs those waiting
    /// to be sent; with [`MergePolicy::Off`] every request is its own
    /// frame.
    pub fn pipeline(&mut self, requests: &[ObjRequest<'_>]) -> Vec<Result<ObjResponse, ObjError>> {
        self.many(requests, false)
    }

    fn many(
        &mut self,
        requests: &[ObjRequest<'_>],
        frames: bool,
    ) -> Vec<Result<ObjResponse, ObjError>> {
        let mut results: Vec<Option<Result<ObjResponse, ObjError>>> =
            std::iter::repeat_with(|| None)
                .take(requests.len())
                .collect();
        let mut wires = Vec::new();
        let mut at = Vec::new();
        for (i, r) in requests.iter().enumerate() {
            match self.codec().single(r) {
                Ok(Some(w)) => {
                    wires.push(w);
                    at.push(i);
                }
                Ok(None) => {}
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let replies = self.exchange(&wires, frames);
        for (reply, i) in replies.into_iter().zip(at) {
            results[i] = Some(reply.and_then(|r| self.codec().interpret(&requests[i], r)));
        }
        for (i, r) in requests.iter().enumerate() {
            if results[i].is_none() {
                results[i] = Some(self.run_split(r));
            }
        }
        results.into_iter().flatten().collect()
    }

    // ---- typed commands -------------------------------------------------

    /// Makes `count` objects, in `collection` if not empty; returns their
    /// ids in order.
    pub fn create(
        &mut self,
        collection: &str,
        count: u32,
        durability: Durability,
    ) -> Result<Vec<u64>, ObjError> {
        match self.run(&ObjRequest::Create {
            collection,
            count,
            durability,
        })? {
            ObjResponse::Created(ids) => Ok(ids),
            other => Err(self.violation(format!("CREATE answered {other:?}"))),
        }
    }

    /// Removes `object`.
    pub fn remove(&mut self, object: u64, durability: Durability) -> Result<(), ObjError> {
        self.run(&ObjRequest::Remove { object, durability })
            .map(drop)
    }

    /// Removes every object, pipelined; one result per object.
    pub fn remove_many(
        &mut self,
        objects: &[u64],
        durability: Durability,
    ) -> Vec<Result<(), ObjError>> {
        let reqs: Vec<ObjRequest<'_>> = objects
            .iter()
            .map(|&object| ObjRequest::Remove { object, durability })
            .collect();
        self.batch(&reqs).into_iter().map(|r| r.map(drop)).collect()
    }

    /// One page of a listing (collection empty: the whole partition);
    /// `attrs` as in [`ObjRequest::List`].
    pub fn list_page(
        &mut self,
        collection: &str,
        cursor: u64,
        max: u32,
        attrs: Option<&[&str]>,
    ) -> Result<Page, ObjError> {
        self.page(&ObjRequest::List {
            collection,
            cursor,
            max,
            attrs,
        })
    }

    /// Every object of a listing, all pages.
    pub fn list(
        &mut self,
        collection: &str,
        attrs: Option<&[&str]>,
    ) -> Result<Vec<Entry>, ObjError> {
        let max = self.limits().max_segments;
        self.all_pages(|c, cursor| c.list_page(collection, cursor, max, attrs))
    }

    fn page(&mut self, req: &ObjRequest<'_>) -> Result<Page, ObjError> {
        match self.run(req)? {
            ObjResponse::Page(p) => Ok(p),
            other => Err(self.violation(format!("a page request answered {other:?}"))),
        }
    }

    fn all_pages(
        &mut self,
        mut page: impl FnMut(&mut Self, u64) -> Result<Page, ObjError>,
    ) -> Result<Vec<Entry>, ObjError> {
        let mut out = Vec::new();
        let mut cursor = 0;
        loop {
            let p = page(self, cursor)?;
            out.extend(p.entries);
            if p.next == 0 {
                return Ok(out);
            }
            if p.next == cursor {
                return Err(self.violation(format!("page cursor {cursor} does not advance")));
            }
            cursor = p.next;
        }
    }

    /// Reads `segments` of `object` (their bytes in list order).
    pub fn read(&mut self, object: u64, segments: &[Segment]) -> Result<ReadReply, ObjError> {
        self.read_with(object, segments, &[])
    }

    /// Reads `segments` and, consistently with them, the attributes `get`.
    pub fn read_with(
        &mut self,
        object: u64,
        segments: &[Segment],
        get: &[&str],
    ) -> Result<ReadReply, ObjError> {
        match self.run(&ObjRequest::Read {
            object,
            segments,
            get,
        })? {
            ObjResponse::Read(r) => Ok(r),
            other => Err(self.violation(format!("READ answered {other:?}"))),
        }
    }

    /// Hands back a read's data once it is no longer needed, so that a
    /// later large read is received into it: a stream of large reads
    /// then allocates and faults in no fresh memory per read (the
    /// client keeps up to 64 MiB of such buffers; the rest are dropped).
    pub fn recycle(&mut self, data: Vec<u8>) {
        self.connection.recycle(data);
    }

    /// Writes `data` over `segments` (in list order; a later segment wins
    /// where they overlap).
    pub fn write(
        &mut self,
        object: u64,
        segments: &[Segment],
        data: &[u8],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::Write {
            object,
            segments,
            data,
            options,
        })
        .map(drop)
    }

    /// Writes the bytes of `bufs`, gathered in order, over `segments`
    /// (as [`write`](Self::write) writes one buffer): their lengths must
    /// add up to the segments' (refused before anything is sent). The
    /// buffers are sent as they are, never copied into one; what exceeds
    /// the server's limits is split.
    pub fn write_vectored(
        &mut self,
        object: u64,
        segments: &[Segment],
        bufs: &[IoSlice<'_>],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        self.write_gathered(object, segments, bufs, options)
    }

    /// Reads `segments` into `bufs`, filled in order (their lengths must
    /// add up to the segments', refused before anything is sent); returns
    /// how many of the bytes lie below the object's length (the rest read
    /// as zeros).
    pub fn read_vectored(
        &mut self,
        object: u64,
        segments: &[Segment],
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<u64, ObjError> {
        self.read_scattered(object, segments, bufs)
    }

    /// Appends `data`; returns the offset it was written at.
    pub fn append(
        &mut self,
        object: u64,
        data: &[u8],
        options: &DataOptions,
    ) -> Result<u64, ObjError> {
        match self.run(&ObjRequest::Append {
            object,
            data,
            options,
        })? {
            ObjResponse::Offset(at) => Ok(at),
            other => Err(self.violation(format!("APPEND answered {other:?}"))),
        }
    }

    /// Makes one object holding `data` over `segments`; returns its id.
    pub fn create_and_write(
        &mut self,
        collection: &str,
        segments: &[Segment],
        data: &[u8],
        options: &DataOptions,
    ) -> Result<u64, ObjError> {
        match self.run(&ObjRequest::CreateAndWrite {
            collection,
            segments,
            data,
            options,
        })? {
            ObjResponse::Object(id) => Ok(id),
            other => Err(self.violation(format!("CREATE_AND_WRITE answered {other:?}"))),
        }
    }

    /// Deallocates `segments` (they read as zeros after).
    pub fn punch(
        &mut self,
        object: u64,
        segments: &[Segment],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::Punch {
            object,
            segments,
            options,
        })
        .map(drop)
    }

    /// Makes what `scope` names durable.
    pub fn flush(&mut self, scope: FlushScope<'_>) -> Result<(), ObjError> {
        self.run(&ObjRequest::Flush(scope)).map(drop)
    }

    /// The attributes `keys` of `object` (none: all of them).
    pub fn get_attrs(&mut self, object: u64, keys: &[&str]) -> Result<Attrs, ObjError> {
        Carrier::get_attrs(self, object, keys)
    }

    /// Sets `object`'s length to `length`: bytes past a shorter length
    /// are gone (extended again, they read as zeros), and a longer one
    /// reads as zeros up to it. `durability`: durable before it returns.
    pub fn truncate(
        &mut self,
        object: u64,
        length: u64,
        durability: Durability,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::Truncate {
            object,
            length,
            durability,
        })
        .map(drop)
    }

    /// Gives `object` the bytes and logical length of `source` (another
    /// object of the session's partition) and removes `source`, as one
    /// change: readers, and the server after a crash, see `object` old
    /// or new, whole. `object` keeps its id, creation time, attributes
    /// and collections. A put writes and flushes a fresh object, then
    /// switches to it with this. Needs the session's `REPLACE_DATA`
    /// (else [`ErrorCode::NotNegotiated`]); a missing object or source
    /// is [`ErrorCode::NoSuchObject`], `source == object`
    /// [`ErrorCode::Invalid`]. `durability`: durable before it returns.
    ///
    /// [`ErrorCode::NotNegotiated`]: sluice_obj_proto::ErrorCode::NotNegotiated
    /// [`ErrorCode::NoSuchObject`]: sluice_obj_proto::ErrorCode::NoSuchObject
    /// [`ErrorCode::Invalid`]: sluice_obj_proto::ErrorCode::Invalid
    pub fn replace_data(
        &mut self,
        object: u64,
        source: u64,
        durability: Durability,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::ReplaceData {
            object,
            source,
            durability,
        })
        .map(drop)
    }

    /// Applies `changes` to `object`, all or none.
    pub fn set_attrs(
        &mut self,
        object: u64,
        changes: &[AttrChange],
        durability: Durability,
    ) -> Result<(), ObjError> {
        Carrier::set_attrs(self, object, changes, durability)
    }

    /// One page of the members of `collection` in every range.
    pub fn query_page(
        &mut self,
        collection: &str,
        ranges: &[Range],
        cursor: u64,
        max: u32,
    ) -> Result<Page, ObjError> {
        self.page(&ObjRequest::Query {
            collection,
            ranges,
            cursor,
            max,
        })
    }

    /// Every member of `collection` in every range, all pages.
    pub fn query(&mut self, collection: &str, ranges: &[Range]) -> Result<Vec<Entry>, ObjError> {
        let max = self.limits().max_segments;
        self.all_pages(|c, cursor| c.query_page(collection, ranges, cursor, max))
    }

    /// The attributes the server keeps for `object` (its length first of
    /// all).
    pub fn stat(&mut self, object: u64) -> Result<Stat, ObjError> {
        let all = self.get_attrs(object, &[])?;
        let length = all
            .get(LENGTH_ATTR)
            .and_then(Value::as_integer)
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| {
                self.violation(format!(
                    "GET_ATTRS of object {object} returned no integer {LENGTH_ATTR}"
                ))
            })?;
        let attrs = Attrs(
            all.0
                .into_iter()
                .filter(|(k, _)| k.starts_with(SERVER_ATTR_PREFIX))
                .collect(),
        );
        Ok(Stat {
            object,
            length,
            attrs,
        })
    }
}

impl ObjClient {
    /// Reads extents of an attached export (`export` is its handle).
    pub fn extent_read(
        &mut self,
        export: u64,
        segments: &[Segment],
    ) -> Result<ReadReply, ObjError> {
        match self.run(&ObjRequest::ExtentRead { export, segments })? {
            ObjResponse::Read(r) => Ok(r),
            other => Err(self.violation(format!("EXTENT_READ answered {other:?}"))),
        }
    }

    /// Writes `data` over extents of an attached export.
    pub fn extent_write(
        &mut self,
        export: u64,
        segments: &[Segment],
        data: &[u8],
        durability: Durability,
    ) -> Result<(), ObjError> {
        self.run(&ObjRequest::ExtentWrite {
            export,
            segments,
            data,
            durability,
        })
        .map(drop)
    }
}

impl Carrier for ObjClient {
    fn codec(&self) -> Codec<'_> {
        Self::codec(self)
    }

    fn all(&mut self, wires: &[Wire<'_>]) -> Result<Vec<RawReply>, ObjError> {
        Self::all(self, wires)
    }

    fn run(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        Self::run(self, req)
    }

    fn recycle(&mut self, data: Vec<u8>) {
        Self::recycle(self, data);
    }
}
