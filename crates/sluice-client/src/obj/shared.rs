//! [`SharedObjClient`]: one object-protocol connection used by many
//! threads at once, each call blocking only its own thread until its
//! reply comes. It is the object protocol over the client's one
//! multiplexer core (`net/mux`): requests from different threads meet in
//! one send queue, the first caller to find no send under way writes
//! what the window lets go, a reader thread completes replies in
//! completion order, and, with [`ObjOptions::reconnect`] on, a lost
//! connection is got back and what it had in flight sent again (see
//! docs/RELIABILITY.md for what it promises).
//!
//! The send queue is where temporal merge finds requests to pack into a
//! batch frame ([`MergePolicy`], docs/design/0008-temporal-merge.md):
//! when merging is on and [`HOLD_IN_FLIGHT`] or more requests are in
//! flight, a caller does not send at all: it leaves its request queued
//! for the thread that handles the next reply, so the requests that
//! become ready while replies are due go out together, in batch frames.
//! Nothing waits on a timer: a held request goes with the next reply,
//! which is due.
//!
//! [`HOLD_IN_FLIGHT`]: super::HOLD_IN_FLIGHT

use std::io::{self, IoSlice, IoSliceMut};
use std::time::{Duration, Instant};

use sluice_obj_proto::consts::{FLAG_SCOPE_MASK, FLAG_SCOPE_SHIFT, REPLY_HEADER_LEN};
use sluice_obj_proto::{
    Command, ErrorCode, FlushScope, MetaReply, MetaRequest, Negotiated, Opcode, Request,
    RequestHeader, Segment,
};

use super::codec::Codec;
use super::error::Subject;
use super::fuse;
use super::handshake::open;
use super::merge::{MergeController, MergePolicy, MergeStats};
use super::request::{DataOptions, ObjRequest, ObjResponse, ReadReply};
use super::split::{Carrier, Split};
use super::wire::{cost, reply_len, take_reply, Front, RawReply, Wire, WINDOW_BYTES};
use super::{ObjError, ObjOptions};
use crate::net::mux::{Group, Logged, Mux, MuxOptions, MuxProtocol, Next, Outcome, Tickets};
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;
use crate::net::uri::ObjUri;
use crate::Durability;

/// The name of each [`SharedObjClient`]'s reader thread (which shares
/// the `sluice-` prefix of the server's threads: a process that embeds
/// both tells them apart by it).
pub const READER_THREAD: &str = "sluice-obj-reader";

/// A connection to an object server for many threads at once (`Sync`):
/// share it by reference or in an `Arc`. Requests that fit one wire
/// request are sent as they come; one that the server's limits would
/// make several is cut as [`ObjClient`](super::ObjClient) cuts it, its
/// pieces in flight together.
pub struct SharedObjClient {
    mux: Mux<ObjSession>,
    ddt: Option<sluice_obj_proto::DdtKind>,
}

impl std::fmt::Debug for SharedObjClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedObjClient")
            .field("server", &self.mux.proto().server)
            .field("session", &self.mux.proto().session)
            .finish()
    }
}

/// The object protocol as the multiplexer drives it: one negotiated
/// session, and how to get the same one back.
pub(super) struct ObjSession {
    server: String,
    uri: ObjUri,
    options: ObjOptions,
    session: Negotiated,
}

/// What a waiting object request keeps.
pub(super) struct Ticket {
    subject: Subject,
    logged: Logged,
    resendable: bool,
    /// Body bytes its reply carries (a read's length), for splitting
    /// the reply to a fused request.
    reply_len: u64,
}

impl Ticket {
    fn of(subject: Subject, header: &RequestHeader) -> Self {
        let op = Opcode::from_wire(header.opcode);
        let whole_partition = (header.flags & FLAG_SCOPE_MASK) >> FLAG_SCOPE_SHIFT == 2;
        let logged = match op {
            // Changes that land the same when sent twice; writes to
            // attached exports are not covered by a partition's FLUSH.
            Some(Opcode::Write | Opcode::Punch | Opcode::SetAttrs | Opcode::Truncate) => {
                Logged::Change
            }
            Some(Opcode::Flush) if whole_partition => Logged::Flush,
            _ => Logged::Nothing,
        };
        // Creates, appends, removes, replaces and metadata calls change
        // something that a second run would change again (or refuse: a
        // replace's source is gone after the first).
        let resendable = !matches!(
            op,
            None | Some(
                Opcode::Create
                    | Opcode::CreateAndWrite
                    | Opcode::Append
                    | Opcode::Remove
                    | Opcode::ReplaceData
                    | Opcode::Meta
                    | Opcode::Batch
                    | Opcode::Disconnect
            )
        );
        let reply_len = match op {
            Some(Opcode::Read | Opcode::ExtentRead) => header.length,
            _ => 0,
        };
        Self {
            subject,
            logged,
            resendable,
            reply_len,
        }
    }
}

/// The send side: the merge controller and what it did.
pub(super) struct MergeSend {
    merge: MergeController,
    stats: MergeStats,
}

impl ObjSession {
    fn server_error(&self, subject: &Subject, (code, message): &(ErrorCode, String)) -> ObjError {
        ObjError::Server {
            server: self.server.clone(),
            subject: subject.clone(),
            code: *code,
            message: message.clone(),
        }
    }

    /// What differs between the session kept and `now` (the requests in
    /// flight are encoded for the first).
    fn changed(&self, now: &Negotiated) -> Option<String> {
        let was = &self.session;
        if now.partition != was.partition {
            Some(format!(
                "partition {} is now {}",
                was.partition, now.partition
            ))
        } else if now.features != was.features {
            Some(format!(
                "features {:?} are now {:?}",
                was.features, now.features
            ))
        } else if now.limits != was.limits {
            Some(format!("limits {:?} are now {:?}", was.limits, now.limits))
        } else if now.exports != was.exports {
            Some(format!(
                "attached exports {:?} are now {:?}",
                was.exports, now.exports
            ))
        } else {
            None
        }
    }
}

impl MuxProtocol for ObjSession {
    type Ticket = Ticket;
    type Raw = RawReply;
    type Refusal = (ErrorCode, String);
    type Reply = RawReply;
    type Error = ObjError;
    type Parser = ();
    type SendState = MergeSend;
    type Record = Subject;

    fn parser(&self) {}

    fn registered(&self, _parser: &mut (), _id: u64, _ticket: &Ticket) {}

    fn next(
        &self,
        _parser: &mut (),
        inbuf: &mut RecvBuf,
        _tickets: &mut dyn Tickets<Ticket>,
    ) -> Result<Next<Self>, ObjError> {
        Ok(
            match take_reply(inbuf, &self.session.limits, &self.server)? {
                Front::Reply((id, result)) => Next::Done { id, result },
                Front::Short(Some(h)) => Next::Need(reply_len(&h)),
                Front::Short(None) => Next::Need(REPLY_HEADER_LEN),
            },
        )
    }

    fn finish(
        &self,
        ticket: Ticket,
        result: Result<RawReply, (ErrorCode, String)>,
    ) -> Result<RawReply, ObjError> {
        match result {
            // This client never asks for one (its codec's `spans`).
            Ok(r) if r.span => Err(self.violation(format!(
                "a span reply to {}, which did not ask for one",
                ticket.subject
            ))),
            Ok(r) => Ok(r),
            Err(refusal) => Err(self.server_error(&ticket.subject, &refusal)),
        }
    }

    fn group_failed(
        &self,
        ticket: &Ticket,
        result: &Result<RawReply, (ErrorCode, String)>,
    ) -> ObjError {
        match result {
            Ok(_) => self.violation("a batch frame was answered as a request".into()),
            Err(refusal) => self.server_error(&ticket.subject, refusal),
        }
    }

    fn logged(&self, ticket: &Ticket) -> Logged {
        ticket.logged
    }

    fn record(&self, ticket: &Ticket) -> Subject {
        ticket.subject.clone()
    }

    fn replay_ticket(&self, subject: &Subject) -> Ticket {
        Ticket {
            subject: subject.clone(),
            logged: Logged::Nothing,
            resendable: true,
            reply_len: 0,
        }
    }

    fn can_flush(&self) -> bool {
        true
    }

    fn internal_flush(&self, id: u64) -> Option<(Vec<u8>, Ticket)> {
        let flush = Request::new(id, Command::Flush(FlushScope::Partition));
        let mut frame = Vec::new();
        flush.encode(self.session.partition, &mut frame).ok()?;
        let head = RequestHeader::decode(&frame).ok()??;
        let subject = Subject {
            op: Opcode::Flush,
            target: super::Addressee::Partition(self.session.partition),
        };
        Some((frame, Ticket::of(subject, &head)))
    }

    fn resendable(&self, ticket: &Ticket) -> bool {
        ticket.resendable
    }

    fn hold(&self, send: &mut MergeSend, in_flight: usize, queued: usize) -> bool {
        send.merge.should_hold(in_flight, queued)
    }

    /// When the merge policy says so: runs of block requests to one
    /// export fused into one request, the rest in batch frames, within
    /// the published limits (`fuse.rs`).
    fn groups(
        &self,
        send: &mut MergeSend,
        in_flight: usize,
        frames: &mut dyn Iterator<Item = &[u8]>,
    ) -> Option<Vec<Group>> {
        // The frames come from a slice: the hint is exact.
        if !send.merge.should_merge(in_flight, frames.size_hint().0) {
            return None;
        }
        let frames: Vec<&[u8]> = frames.collect();
        let groups = fuse::groups(&frames, &self.session.limits);
        for g in groups.iter().filter(|g| g.members > 1) {
            send.stats.frames += 1;
            send.stats.merged += g.members as u64;
        }
        Some(groups)
    }

    fn group_header(&self, id: u64, body: usize, out: &mut Vec<u8>) {
        RequestHeader::batch(id, self.session.partition, body as u32).encode(out);
    }

    fn fuse(&self, id: u64, members: &[&[u8]], out: &mut Vec<u8>) {
        let partition = self.session.partition;
        if !fuse::fuse(id, partition, &self.session.limits, members, out) {
            // Never for what `groups` fused; were it to happen, the
            // members go in a batch frame and are answered one by one.
            let body = members.iter().map(|m| m.len()).sum();
            self.group_header(id, body, out);
            members.iter().for_each(|m| out.extend_from_slice(m));
        }
    }

    fn split(&self, reply: RawReply, members: &[&Ticket]) -> Result<Vec<RawReply>, ObjError> {
        let lens: Vec<u64> = members.iter().map(|t| t.reply_len).collect();
        fuse::split(reply, &lens).ok_or_else(|| {
            self.violation(format!(
                "the reply to {} fused requests does not hold their bytes",
                members.len()
            ))
        })
    }

    fn sent(&self, send: &mut MergeSend, requests: usize, grouped: usize) {
        send.merge.sent(requests, grouped);
    }

    fn completed(&self, send: &mut MergeSend, outstanding: usize) {
        send.merge.completed(Instant::now(), outstanding);
    }

    fn reopen(&self, timeout: Duration) -> Result<Stream, ObjError> {
        let mut options = self.options.clone();
        options.connect_timeout = timeout;
        let (stream, now) = open(&self.uri, &options)?;
        match self.changed(&now) {
            None => Ok(stream),
            Some(what) => Err(ObjError::SessionChanged {
                server: self.server.clone(),
                what,
            }),
        }
    }

    fn is_final(&self, e: &ObjError) -> bool {
        matches!(e, ObjError::SessionChanged { .. } | ObjError::Server { .. })
    }

    fn goodbye(&self, id: u64, out: &mut Vec<u8>) {
        let _ = Request::new(id, Command::Disconnect).encode(self.session.partition, out);
    }

    fn closed(&self) -> ObjError {
        ObjError::Closed {
            server: self.server.clone(),
        }
    }

    fn violation(&self, reason: String) -> ObjError {
        ObjError::Violation {
            server: self.server.clone(),
            reason,
        }
    }

    fn io_error(&self, source: io::Error) -> ObjError {
        ObjError::Io {
            server: self.server.clone(),
            source,
        }
    }

    fn timed_out(&self, ticket: &Ticket, after: Duration) -> ObjError {
        ObjError::Timeout {
            server: self.server.clone(),
            subject: ticket.subject.clone(),
            after,
        }
    }

    /// Replies are copied out of the receive buffer: nothing is lent.
    fn abandon(&self, _ticket: &mut Ticket) {}

    fn reconnect_failed(&self, window: Duration, last: ObjError) -> ObjError {
        ObjError::ReconnectFailed {
            server: self.server.clone(),
            window,
            last: Box::new(last),
        }
    }

    fn lost_in_flight(&self, ticket: &Ticket) -> ObjError {
        ObjError::Interrupted {
            server: self.server.clone(),
            subject: ticket.subject.clone(),
        }
    }

    fn copy_error(&self, e: &ObjError) -> ObjError {
        e.for_another()
    }
}

impl SharedObjClient {
    /// Connects to `uri` (its partition, or the default one), with the
    /// merge policy of the URI or else of `options`.
    pub fn connect(uri: &ObjUri, options: &ObjOptions) -> Result<Self, ObjError> {
        let server = uri.to_string();
        let (stream, session) = open(uri, options)?;
        let batches = session.features.contains(sluice_obj_proto::Features::BATCH);
        let send = MergeSend {
            merge: MergeController::new(uri.merge.unwrap_or(options.merge), batches),
            stats: MergeStats::default(),
        };
        let mux_options = MuxOptions {
            max_in_flight: options.max_in_flight.max(1),
            window_bytes: WINDOW_BYTES,
            request_timeout: options.request_timeout,
            reconnect: options.reconnect,
            connect_timeout: options.connect_timeout,
        };
        let proto = ObjSession {
            server,
            uri: uri.clone(),
            options: options.clone(),
            session,
        };
        Ok(Self {
            mux: Mux::start(proto, stream, send, mux_options, READER_THREAD)?,
            ddt: options.ddt,
        })
    }

    /// What the handshake agreed on.
    pub fn session(&self) -> &Negotiated {
        &self.mux.proto().session
    }

    /// The server, as its URI.
    pub fn server(&self) -> &str {
        &self.mux.proto().server
    }

    /// The merge policy in force ([`MergePolicy::Off`] when the server
    /// did not negotiate batch frames).
    pub fn merge_policy(&self) -> MergePolicy {
        self.mux.with_send_state(|s| s.merge.policy())
    }

    /// How many batch frames this client sent and what they carried.
    pub fn merge_stats(&self) -> MergeStats {
        self.mux.with_send_state(|s| MergeStats {
            threshold: s.merge.threshold(),
            ..s.stats
        })
    }

    /// Runs one command, split as the server's limits require; blocks
    /// this thread until its reply (or its pieces' replies).
    pub fn run(&self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        let codec = self.codec();
        let Some(wire) = codec.single(req)? else {
            let mut carrier = self;
            return carrier.run_split(req);
        };
        let raw = self.mux.wait(self.submit(&wire)?)?;
        codec.interpret(req, raw)
    }

    /// One call of the server's metadata service (`META`); a refusal of
    /// the service itself is [`MetaReply::Failed`], not an error.
    pub fn meta(&self, request: &MetaRequest) -> Result<MetaReply, ObjError> {
        let codec = self.codec();
        let mut params = Vec::new();
        let wire = codec.meta_wire(request, &mut params)?;
        let raw = self.mux.wait(self.submit(&wire)?)?;
        codec.meta_reply(&raw)
    }

    /// Sends one wire request; its outcome comes on the receiver.
    fn submit(&self, wire: &Wire<'_>) -> Result<Outcome<ObjSession>, ObjError> {
        let id = self.mux.fresh_id();
        let mut frame = Vec::with_capacity(wire.frame_len() as usize);
        wire.encode(id, self.session().partition, &mut frame);
        let ticket = Ticket::of(wire.subject.clone(), &wire.header);
        self.mux.submit(id, frame, ticket, cost(wire))
    }

    /// Gives `object` the bytes and length of `source` and removes
    /// `source`, as one change (see [`ObjClient::replace_data`]). Never
    /// resent after a lost connection: its outcome is then unknown and
    /// the call fails.
    ///
    /// [`ObjClient::replace_data`]: super::ObjClient::replace_data
    pub fn replace_data(
        &self,
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

    /// Makes what `scope` names durable.
    pub fn flush(&self, scope: FlushScope<'_>) -> Result<(), ObjError> {
        self.run(&ObjRequest::Flush(scope)).map(drop)
    }

    /// Reads `segments` of `object`.
    pub fn read(&self, object: u64, segments: &[Segment]) -> Result<ReadReply, ObjError> {
        match self.run(&ObjRequest::Read {
            object,
            segments,
            get: &[],
        })? {
            ObjResponse::Read(r) => Ok(r),
            other => Err(self.codec().violation(format!("READ answered {other:?}"))),
        }
    }

    /// Writes `data` over `segments` of `object`.
    pub fn write(
        &self,
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

    /// Reads extents of an attached export (`export` is its handle).
    pub fn extent_read(&self, export: u64, segments: &[Segment]) -> Result<ReadReply, ObjError> {
        match self.run(&ObjRequest::ExtentRead { export, segments })? {
            ObjResponse::Read(r) => Ok(r),
            other => Err(self
                .codec()
                .violation(format!("EXTENT_READ answered {other:?}"))),
        }
    }

    /// Writes `data` over extents of an attached export.
    pub fn extent_write(
        &self,
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

    /// Writes the bytes of `bufs`, gathered in order, over `segments`
    /// of `object`; their lengths must add up to the segments' (refused
    /// before anything is sent). What exceeds the server's limits is
    /// split. Each request's frame is built whole for the connection's
    /// thread (and kept for replay), so the buffers are copied into it
    /// there, as one buffer's bytes are.
    pub fn write_vectored(
        &self,
        object: u64,
        segments: &[Segment],
        bufs: &[IoSlice<'_>],
        options: &DataOptions,
    ) -> Result<(), ObjError> {
        let mut carrier = self;
        carrier.write_gathered(object, segments, bufs, options)
    }

    /// Reads `segments` of `object` into `bufs`, filled in order (their
    /// lengths must add up to the segments', refused before anything is
    /// sent); returns how many of the bytes lie below the object's
    /// length.
    pub fn read_vectored(
        &self,
        object: u64,
        segments: &[Segment],
        bufs: &mut [IoSliceMut<'_>],
    ) -> Result<u64, ObjError> {
        let mut carrier = self;
        carrier.read_scattered(object, segments, bufs)
    }

    fn codec(&self) -> Codec<'_> {
        let proto = self.mux.proto();
        Codec {
            session: &proto.session,
            server: &proto.server,
            ddt: self.ddt,
            spans: false,
        }
    }
}

impl Carrier for &SharedObjClient {
    fn codec(&self) -> Codec<'_> {
        SharedObjClient::codec(self)
    }

    fn all(&mut self, wires: &[Wire<'_>]) -> Result<Vec<RawReply>, ObjError> {
        // Every wire is sent before any reply is waited for, and every
        // reply is waited for before a failure is reported.
        let sent: Vec<_> = wires.iter().map(|w| self.submit(w)).collect();
        let replies: Vec<_> = sent
            .into_iter()
            .map(|rx| rx.and_then(|rx| self.mux.wait(rx)))
            .collect();
        replies.into_iter().collect()
    }

    fn run(&mut self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        SharedObjClient::run(self, req)
    }
}
