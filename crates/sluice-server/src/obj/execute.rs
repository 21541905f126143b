//! Running native-protocol requests against the object store and the
//! attached exports, and encoding their replies; with the one
//! `ObjStoreError`/`DeviceError` → reply status mapping.

use std::sync::Arc;
use std::time::Duration;

use sluice_obj_proto::{
    encode_id_list, encode_page, Command, Ddt, DdtKind, ErrorCode, FlushScope, Negotiated, Opcode,
    QueryRanges, ReplyHeader, Request, RequestHeader,
};
use sluice_objstore::{
    NewObjects, ObjStoreError, ObjectId, ObjectInfo, ObjectRef, ObjectStore, PartitionId,
    QueryTerm, Segment, WriteOptions,
};
use sluice_storage::BlockingClass;

use super::attr_work::{encode_attrs, to_store, AttrWork};
use super::extent;
use super::failure::{reply_failure, Failure};
use crate::buffer::ReplyBuf;
use crate::driver::{Access, Execute, Outcome};
use crate::export::Export;
use crate::metrics::ServerMetrics;

/// A request validated on the connection thread (decoded and checked
/// against the session, once), owning no buffer bytes: its header, from
/// which the executor decodes it again where it runs
/// ([`ObjExecutor::decode`]), and what placement and metrics need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjRequest {
    pub(crate) head: RequestHeader,
    pub(crate) op: Opcode,
    pub(crate) ddt: DdtKind,
    pub(crate) segments: u32,
    /// Data bytes moved (read or written).
    pub(crate) bytes: u64,
    pub(crate) access: Access,
}

impl ObjRequest {
    /// What a validated request is for placement and metrics.
    pub(crate) fn new(head: RequestHeader, req: &Request<'_>) -> Self {
        let op = req.command.opcode();
        let ddt = req.command.ddt();
        let access = if req.fua || op == Opcode::Flush {
            Access::Durable
        } else if op.only_reads() {
            Access::Read
        } else {
            Access::Buffered
        };
        Self {
            head,
            op,
            ddt: ddt.map_or(DdtKind::Contiguous, |d| d.kind()),
            segments: ddt.map_or(0, |d| d.segment_count()),
            bytes: match &req.command {
                Command::Append { data, .. } => data.len() as u64,
                _ => ddt.map_or(0, |d| d.total()),
            },
            access,
        }
    }
}

/// Appends a success reply: header, attribute list, body.
pub(super) fn reply_ok(out: &mut ReplyBuf, id: u64, real: u64, attrs: &[u8], body: &[u8]) {
    out.encode(|o| {
        ReplyHeader::ok(id, real, attrs.len() as u32, body.len() as u32).encode(o);
        o.extend_from_slice(attrs);
    });
    out.extend_from_slice(body);
}

/// The DDT's segments as the store takes them. Pushed from `for_each`,
/// which runs the iterator's `fold` (its kind matched once): `collect`
/// would call `next` per segment, which cost a strided view of 32,768
/// blocks about 220 µs of a write's 4 ms on the long link.
pub(super) fn segments_of(ddt: &Ddt<'_>) -> Vec<Segment> {
    let mut out = Vec::with_capacity(ddt.segment_count() as usize);
    ddt.segments()
        .for_each(|s| out.push(Segment::new(s.offset, s.length)));
    out
}

fn collection(name: &str) -> Option<&str> {
    (!name.is_empty()).then_some(name)
}

/// The ids of a store call of one create.
fn one_create(
    mut made: Vec<Result<Vec<ObjectId>, ObjStoreError>>,
) -> Result<Vec<ObjectId>, ObjStoreError> {
    made.pop().unwrap_or(Ok(Vec::new()))
}

/// A CREATE or CREATE_AND_WRITE as the store takes it
/// ([`NewObjects`] borrows from it).
struct CreateWork<'a> {
    collection: Option<&'a str>,
    count: u32,
    segments: Vec<Segment>,
    data: &'a [u8],
    opts: WriteOptions,
    /// Its attribute entries (GETs answer with the values after it).
    attrs: AttrWork<'a>,
    /// CREATE_AND_WRITE: answered with the one new id.
    with_data: bool,
}

impl<'a> CreateWork<'a> {
    fn new(req: &Request<'a>) -> Result<Self, Failure> {
        let mut attrs = AttrWork::split(&req.attrs)?;
        let (collection, count, segments, data, with_data) = match req.command {
            Command::Create { count, collection } => {
                (collection, count, Vec::new(), &[][..], false)
            }
            Command::CreateAndWrite {
                collection,
                ddt,
                data,
            } => {
                attrs.no_removes("CREATE_AND_WRITE")?;
                // Whole or absent, whatever the DDT: the object appears
                // with its data and attributes in one commit.
                (collection, 1, segments_of(&ddt), data, true)
            }
            _ => {
                return Err(Failure::new(
                    ErrorCode::Invalid,
                    "not a create (a server bug: only creates run as creates)",
                ))
            }
        };
        Ok(Self {
            collection: self::collection(collection),
            count,
            segments,
            data,
            opts: WriteOptions {
                // The sets move into the store's options: nothing else
                // reads them.
                attrs: std::mem::take(&mut attrs.sets),
                durable: req.fua,
            },
            attrs,
            with_data,
        })
    }

    fn new_objects(&self) -> NewObjects<'_> {
        NewObjects {
            collection: self.collection,
            count: self.count,
            segments: &self.segments,
            data: self.data,
            opts: &self.opts,
        }
    }
}

/// What running one session's requests needs: shared with the I/O pool.
#[derive(Debug)]
pub(crate) struct ObjExecutor {
    pub(crate) store: Arc<ObjectStore>,
    /// The session requests are validated against.
    pub(crate) session: Negotiated,
    /// Attached exports by handle - 1.
    pub(crate) exports: Vec<Arc<Export>>,
    pub(crate) metrics: Arc<ServerMetrics>,
    /// The metadata service `META` requests reach, if the server runs one.
    pub(crate) meta: Option<super::meta::MetaService>,
}

impl ObjExecutor {
    fn partition(&self) -> PartitionId {
        PartitionId(self.session.partition)
    }

    pub(crate) fn object(&self, id: u64) -> ObjectRef {
        ObjectRef {
            partition: self.partition(),
            object: ObjectId(id),
        }
    }

    /// Runs a create-type store call, making its collection first if it
    /// does not exist yet (collections come into being with their first
    /// member).
    fn in_collection<T>(
        &self,
        name: Option<&str>,
        call: impl Fn() -> Result<T, ObjStoreError>,
    ) -> Result<T, ObjStoreError> {
        match call() {
            Err(ObjStoreError::UnknownCollection { .. }) if name.is_some() => {
                match self
                    .store
                    .create_collection(self.partition(), name.unwrap_or_default())
                {
                    Ok(()) | Err(ObjStoreError::CollectionExists { .. }) => call(),
                    Err(e) => Err(e),
                }
            }
            r => r,
        }
    }

    /// The request `request` was validated as, decoded again from its
    /// payload where it runs. The session's rules were checked when it
    /// arrived and do not change; decoding the same bytes cannot fail
    /// differently (an error here would be a server bug, answered as the
    /// request's failure).
    pub(super) fn decode<'a>(
        &self,
        head: &RequestHeader,
        payload: &'a [u8],
    ) -> Result<Request<'a>, Failure> {
        Request::decode(head, payload, &self.session.limits)
            .map_err(|r| Failure::new(r.code, r.message))
    }

    /// Runs one validated request and appends its success reply; on
    /// failure appends nothing.
    fn run(&self, req: &Request<'_>, out: &mut ReplyBuf) -> Result<(), Failure> {
        if let Command::Create { .. } | Command::CreateAndWrite { .. } = req.command {
            let work = CreateWork::new(req)?;
            let ids = self.in_collection(work.collection, || {
                one_create(
                    self.store
                        .create_many(self.partition(), std::slice::from_ref(&work.new_objects())),
                )
            })?;
            return self.created(req, &work, &ids, out);
        }
        let id = req.id;
        let attrs = AttrWork::split(&req.attrs)?;
        let opts = |attrs: &AttrWork<'_>| WriteOptions {
            attrs: attrs.sets.clone(),
            durable: req.fua,
        };
        let mut list = Vec::new();
        match req.command {
            // Run above.
            Command::Create { .. } | Command::CreateAndWrite { .. } => {}
            Command::Remove { object } => {
                self.store.remove(self.object(object))?;
                if req.fua {
                    // The store's removal commit is made durable by the
                    // next synced commit; a partition flush is one.
                    self.store.flush_partition(self.partition())?;
                }
                reply_ok(out, id, 0, &[], &[]);
            }
            Command::List {
                collection: c,
                cursor,
                max,
                with_attrs,
            } => self.list(id, c, cursor, max, with_attrs, &attrs, out)?,
            Command::Read { object, ddt } => self.read(id, object, &ddt, &attrs, out)?,
            Command::Write { object, ddt, data } => {
                attrs.no_removes("WRITE")?;
                let o = self.object(object);
                self.store
                    .write(o, &segments_of(&ddt), data, &opts(&attrs))?;
                self.attrs_after(o, &attrs, &mut list)?;
                reply_ok(out, id, 0, &list, &[]);
            }
            Command::Append { object, data } => {
                attrs.no_removes("APPEND")?;
                let o = self.object(object);
                let at = self.store.append(o, data, &opts(&attrs))?;
                self.attrs_after(o, &attrs, &mut list)?;
                reply_ok(out, id, 0, &list, &at.to_be_bytes());
            }
            Command::Punch { object, ddt } => {
                attrs.no_removes("PUNCH")?;
                let o = self.object(object);
                // Every run and the attributes in one store change.
                self.store.punch(o, &segments_of(&ddt), &opts(&attrs))?;
                self.attrs_after(o, &attrs, &mut list)?;
                reply_ok(out, id, 0, &list, &[]);
            }
            Command::Truncate { object, length } => {
                self.store.truncate(self.object(object), length, req.fua)?;
                reply_ok(out, id, 0, &[], &[]);
            }
            Command::ReplaceData { object, source } => {
                self.store
                    .replace_data(self.object(object), self.object(source), req.fua)?;
                reply_ok(out, id, 0, &[], &[]);
            }
            Command::Flush(scope) => {
                match scope {
                    FlushScope::Object(object) => self.store.flush_object(self.object(object))?,
                    FlushScope::Collection(name) => {
                        self.store.flush_collection(self.partition(), name)?
                    }
                    FlushScope::Partition => self.store.flush_partition(self.partition())?,
                    FlushScope::Export(export) => self.export(export)?.device.flush()?,
                }
                reply_ok(out, id, 0, &[], &[]);
            }
            Command::GetAttrs { object } => {
                let (info, user) = self
                    .store
                    .get_attrs(self.object(object), &attrs.user_gets())?;
                // Asking only for the server's own keys must not turn
                // into "all user attributes" at the store.
                let user = if !attrs.gets.is_empty() && attrs.user_gets().is_empty() {
                    Vec::new()
                } else {
                    user
                };
                encode_attrs(&info, &user, &attrs.gets, &mut list);
                reply_ok(out, id, 0, &list, &[]);
            }
            Command::SetAttrs { object } => {
                self.store.update_attrs(
                    self.object(object),
                    &attrs.sets,
                    &attrs.removes,
                    req.fua,
                )?;
                reply_ok(out, id, 0, &[], &[]);
            }
            Command::Query {
                collection: c,
                cursor,
                max,
                ranges,
            } => self.query(id, c, cursor, max, &ranges, out)?,
            Command::ExtentRead { export, ddt } => self.extent_read(id, export, &ddt, out)?,
            Command::ExtentWrite { export, ddt, data } => {
                let device = &self.export(export)?.device;
                extent::write(device.as_ref(), &segments_of(&ddt), data, req.fua)?;
                reply_ok(out, id, 0, &[], &[]);
            }
            Command::Disconnect => {}
            Command::Meta { params } => {
                let body = super::meta::run(self.meta.as_ref(), params)
                    .map_err(|(code, message)| Failure::new(code, message))?;
                reply_ok(out, id, 0, &[], &body);
            }
        }
        Ok(())
    }

    /// A LIST page, with each entry's attributes when asked for.
    #[allow(clippy::too_many_arguments)] // the fields of one command
    fn list(
        &self,
        id: u64,
        c: &str,
        cursor: u64,
        max: u32,
        with_attrs: bool,
        attrs: &AttrWork<'_>,
        out: &mut ReplyBuf,
    ) -> Result<(), Failure> {
        let after = (cursor != 0).then_some(ObjectId(cursor));
        let page = self.store.list(
            self.partition(),
            collection(c),
            after,
            max as usize,
            with_attrs,
        )?;
        let mut encoded: Vec<Vec<u8>> = Vec::with_capacity(page.entries.len());
        for e in &page.entries {
            let mut a = Vec::new();
            if let Some(user) = &e.attrs {
                encode_attrs(&e.info, user, &attrs.gets, &mut a);
            }
            encoded.push(a);
        }
        let entries: Vec<(u64, &[u8])> = page
            .entries
            .iter()
            .zip(&encoded)
            .map(|(e, a)| (e.object.0, a.as_slice()))
            .collect();
        let mut body = Vec::new();
        encode_page(page.next.map_or(0, |o| o.0), &entries, &mut body);
        reply_ok(out, id, 0, &[], &body);
        Ok(())
    }

    /// A READ, straight into the reply buffer after the header and the
    /// attribute list it learns the values of.
    fn read(
        &self,
        id: u64,
        object: u64,
        ddt: &Ddt<'_>,
        attrs: &AttrWork<'_>,
        out: &mut ReplyBuf,
    ) -> Result<(), Failure> {
        let mut list = Vec::new();
        if let Some((k, _)) = attrs.sets.first() {
            return Err(Failure::new(
                ErrorCode::Invalid,
                format!("attribute {k:?}: READ takes only GET entries"),
            ));
        }
        attrs.no_removes("READ")?;
        // The store reads straight into the reply buffer, after
        // the header and attribute list it learns the values of.
        let total = ddt.total() as usize;
        let header_at = out.len();
        let reply = &mut *out;
        let read = self.store.read_into(
            self.object(object),
            &segments_of(ddt),
            &attrs.user_gets(),
            |found| {
                if !attrs.gets.is_empty() {
                    encode_attrs(&found.info, &found.attrs, &attrs.gets, &mut list);
                }
                reply.encode(|o| {
                    ReplyHeader::ok(id, found.real, list.len() as u32, total as u32).encode(o);
                    o.extend_from_slice(&list);
                });
                reply.tail_mut(total)
            },
        );
        if let Err(e) = read {
            out.truncate(header_at);
            return Err(e.into());
        }
        Ok(())
    }

    /// A QUERY page of the matching members' ids.
    fn query(
        &self,
        id: u64,
        c: &str,
        cursor: u64,
        max: u32,
        ranges: &QueryRanges<'_>,
        out: &mut ReplyBuf,
    ) -> Result<(), Failure> {
        let terms: Vec<QueryTerm> = ranges
            .iter()
            .map(|r| QueryTerm {
                key: r.key.to_owned(),
                min: Some(to_store(r.min)),
                max: Some(to_store(r.max)),
            })
            .collect();
        let ids = self.store.query(self.partition(), c, &terms)?;
        let mut page = ids.iter().map(|o| o.0).filter(|&o| o > cursor);
        let entries: Vec<(u64, &[u8])> = page
            .by_ref()
            .take(max as usize)
            .map(|o| (o, &[][..]))
            .collect();
        let next = match (page.next(), entries.last()) {
            (Some(_), Some(&(last, _))) => last,
            _ => 0,
        };
        let mut body = Vec::new();
        encode_page(next, &entries, &mut body);
        reply_ok(out, id, 0, &[], &body);
        Ok(())
    }

    /// An EXTENT_READ of an attached export, into the reply buffer.
    fn extent_read(
        &self,
        id: u64,
        export: u64,
        ddt: &Ddt<'_>,
        out: &mut ReplyBuf,
    ) -> Result<(), Failure> {
        let device = &self.export(export)?.device;
        let total = ddt.total() as usize;
        let header_at = out.len();
        out.encode(|o| ReplyHeader::ok(id, total as u64, 0, total as u32).encode(o));
        let data = out.tail_mut(total);
        if let Err(e) = extent::read(device.as_ref(), &segments_of(ddt), data) {
            out.truncate(header_at);
            return Err(e.into());
        }
        Ok(())
    }

    /// Runs the CREATE and CREATE_AND_WRITE requests `members` (headers
    /// with their payloads) with one store call, so they share one
    /// metadata commit, and appends each one's reply (success or error)
    /// to `out` in order; returns which failed. A member that fails does
    /// so alone; one whose collection does not exist yet makes it and
    /// runs again on its own, as [`Self::run`] would.
    pub(crate) fn run_creates(
        &self,
        members: &[(RequestHeader, &[u8])],
        out: &mut ReplyBuf,
    ) -> Vec<bool> {
        let works: Vec<Result<(Request<'_>, CreateWork<'_>), Failure>> = members
            .iter()
            .map(|(h, payload)| {
                let req = self.decode(h, payload)?;
                let work = CreateWork::new(&req)?;
                Ok((req, work))
            })
            .collect();
        let news: Vec<NewObjects<'_>> = works
            .iter()
            .filter_map(|w| w.as_ref().ok())
            .map(|(_, w)| w.new_objects())
            .collect();
        let mut made = self.store.create_many(self.partition(), &news).into_iter();
        members
            .iter()
            .zip(works)
            .map(|((h, _), work)| {
                let result = work.and_then(|(req, work)| {
                    let ids = match made.next() {
                        Some(Err(ObjStoreError::UnknownCollection { .. })) => {
                            self.in_collection(work.collection, || {
                                one_create(self.store.create_many(
                                    self.partition(),
                                    std::slice::from_ref(&work.new_objects()),
                                ))
                            })
                        }
                        Some(r) => r,
                        None => Err(ObjStoreError::CreateCount {
                            partition: self.partition(),
                            count: work.count,
                            limit: 0,
                        }),
                    }?;
                    self.created(&req, &work, &ids, out)
                });
                match result {
                    Ok(()) => false,
                    Err(f) => {
                        reply_failure(h, &f, out);
                        true
                    }
                }
            })
            .collect()
    }

    /// Appends the reply of a create that made `ids`.
    fn created(
        &self,
        req: &Request<'_>,
        work: &CreateWork<'_>,
        ids: &[ObjectId],
        out: &mut ReplyBuf,
    ) -> Result<(), Failure> {
        if work.with_data {
            let new = ids.first().map_or(0, |o| o.0);
            let mut list = Vec::new();
            self.attrs_after(self.object(new), &work.attrs, &mut list)?;
            reply_ok(out, req.id, 0, &list, &new.to_be_bytes());
        } else {
            let ids: Vec<u64> = ids.iter().map(|o| o.0).collect();
            let mut body = Vec::with_capacity(4 + 8 * ids.len());
            encode_id_list(&ids, &mut body);
            reply_ok(out, req.id, 0, &[], &body);
        }
        Ok(())
    }

    /// The request of a WRITE whose payload has not arrived, validated
    /// from its header alone ([`Request::decode_head`], then the session's
    /// check): `Some` only for a plain WRITE (contiguous, no FUA, no DDT,
    /// parameters or attribute entries, so its payload is exactly its
    /// data). Such a write may take its payload from elsewhere than the
    /// receive buffer (`spliced_write.rs`); this is its one validation.
    pub(crate) fn plain_write(&self, h: &RequestHeader) -> Option<ObjRequest> {
        if h.opcode != Opcode::Write.wire() || h.ddt_len != 0 || h.param_len != 0 || h.attr_len != 0
        {
            return None;
        }
        let req = Request::decode_head(h, &[], &self.session.limits).ok()?;
        self.session.check(h, &req).ok()?;
        if req.fua {
            return None;
        }
        let Command::Write {
            ddt: Ddt::Contiguous(_),
            ..
        } = req.command
        else {
            return None;
        };
        Some(ObjRequest::new(*h, &req))
    }

    /// Appends the reply of a WRITE the store ran with `result`; returns
    /// whether it failed.
    pub(crate) fn answer_write(
        &self,
        request: &ObjRequest,
        result: Result<ObjectInfo, ObjStoreError>,
        out: &mut ReplyBuf,
    ) -> bool {
        match result {
            Ok(_) => {
                reply_ok(out, request.head.id, 0, &[], &[]);
                false
            }
            Err(e) => {
                reply_failure(&request.head, &e.into(), out);
                true
            }
        }
    }

    /// A READ without attribute entries run where it must not wait
    /// (the connection thread): `None`, with nothing appended, when the
    /// store would wait for it (see `ObjectStore::read_into_nowait`) or
    /// the request is anything else.
    fn read_nowait(&self, req: &Request<'_>, out: &mut ReplyBuf) -> Option<Result<(), Failure>> {
        let Command::Read { object, ddt } = req.command else {
            return None;
        };
        if !req.attrs.is_empty() {
            return None;
        }
        let total = ddt.total() as usize;
        let header_at = out.len();
        let reply = &mut *out;
        let read = self
            .store
            .read_into_nowait(self.object(object), &segments_of(&ddt), |found| {
                reply.encode(|o| ReplyHeader::ok(req.id, found.real, 0, total as u32).encode(o));
                reply.tail_mut(total)
            });
        match read {
            Ok(Some(_)) => Some(Ok(())),
            Ok(None) => None,
            Err(e) => {
                out.truncate(header_at);
                Some(Err(e.into()))
            }
        }
    }

    /// GET entries riding on a command that changes data return the
    /// values after it.
    pub(super) fn attrs_after(
        &self,
        object: ObjectRef,
        attrs: &AttrWork<'_>,
        list: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        if attrs.gets.is_empty() {
            return Ok(());
        }
        let user_gets = attrs.user_gets();
        let (info, user) = self.store.get_attrs(object, &user_gets)?;
        let user = if user_gets.is_empty() {
            Vec::new()
        } else {
            user
        };
        encode_attrs(&info, &user, &attrs.gets, list);
        Ok(())
    }

    fn export(&self, handle: u64) -> Result<&Arc<Export>, Failure> {
        handle
            .checked_sub(1)
            .and_then(|i| self.exports.get(i as usize))
            .ok_or_else(|| {
                Failure::new(
                    ErrorCode::NoSuchObject,
                    format!("no export is attached with handle {handle}"),
                )
            })
    }
}

impl Execute for ObjExecutor {
    type Request = ObjRequest;

    /// Store calls do file I/O and SQLite work: they run on the I/O pool
    /// so that no connection thread waits on metadata.
    fn blocking(&self) -> BlockingClass {
        BlockingClass::Always
    }

    fn access(&self, request: &ObjRequest) -> Access {
        request.access
    }

    fn in_flight_bytes(&self, request: &ObjRequest) -> u64 {
        request.bytes
    }

    fn execute(
        &self,
        request: &ObjRequest,
        payload: &[u8],
        nowait: bool,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let h = &request.head;
        let result = match self.decode(h, payload) {
            Ok(req) if nowait => match self.read_nowait(&req, out) {
                Some(result) => result,
                None => return Outcome::WouldBlock,
            },
            Ok(req) => self.run(&req, out),
            Err(f) => Err(f),
        };
        match result {
            Ok(()) => Outcome::Done { failed: false },
            Err(f) => {
                reply_failure(h, &f, out);
                Outcome::Done { failed: true }
            }
        }
    }

    fn completed(&self, request: &ObjRequest, failed: bool, latency: Duration) {
        self.metrics.objects.record(
            Some(request.op),
            request.ddt,
            u64::from(request.segments),
            request.bytes,
            failed,
            latency,
        );
    }
}
