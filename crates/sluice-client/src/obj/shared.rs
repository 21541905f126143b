//! [`SharedObjClient`]: one object-protocol connection used by many
//! threads at once, each call blocking only its own thread until its
//! reply comes. Requests from different threads meet in one send queue,
//! and that is where temporal merge finds requests to pack into a batch
//! frame ([`MergePolicy`], docs/design/0008-temporal-merge.md).
//!
//! Sending is done by whichever thread finds no one sending: a caller
//! queues its encoded request and, if no send is under way, takes
//! everything queued that the window allows, packs it into batch frames
//! if the merge policy says so, and writes it with one call, then looks
//! again for what was queued meanwhile. A reader thread parses replies,
//! hands each to its caller, and then sends whatever was left waiting.
//! When merging is on and [`HOLD_IN_FLIGHT`] or more requests are in
//! flight, a caller does not send at all: it leaves its request queued
//! for the reader's next send, so the requests that become ready while
//! replies are due go out together, in batch frames. Nothing waits on a
//! timer: a held request goes with the next reply, which is due. As in [`ObjClient`]
//! (`link`), requests and replies in flight are bounded by a window of
//! bytes and a count, so a write never waits on a server that waits on
//! replies no one reads.
//!
//! Lock order: `state`, then `writer`; the writer lock is taken only by
//! the thread that set `state.writing`, and by `Drop`.
//!
//! [`ObjClient`]: super::ObjClient
//! [`HOLD_IN_FLIGHT`]: super::HOLD_IN_FLIGHT

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_obj_proto::consts::REQUEST_HEADER_LEN;
use sluice_obj_proto::{Command, ErrorCode, Limits, Negotiated, Request, RequestHeader, Segment};
use tracing::debug;

use super::codec::{refused, Codec};
use super::error::Subject;
use super::handshake::open;
use super::link::{cost, reply_len, take_reply, Front, RawReply, WINDOW_BYTES};
use super::merge::{MergeController, MergePolicy, MergeStats};
use super::request::{DataOptions, ObjRequest, ObjResponse, ReadReply};
use super::{ObjError, ObjOptions};
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;
use crate::net::uri::ObjUri;

/// The name of each [`SharedObjClient`]'s reader thread (which shares
/// the `sluice-` prefix of the server's threads: a process that embeds
/// both tells them apart by it).
pub const READER_THREAD: &str = "sluice-obj-reader";

/// A connection to an object server for many threads at once (`Sync`):
/// share it by reference or in an `Arc`. Requests that fit one wire
/// request are sent as they come; one that the server's limits would
/// make several is refused (use [`ObjClient`](super::ObjClient), which
/// splits).
pub struct SharedObjClient {
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SharedObjClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedObjClient")
            .field("server", &self.shared.server)
            .field("session", &self.shared.session)
            .finish()
    }
}

struct Shared {
    server: String,
    session: Negotiated,
    ddt: Option<sluice_obj_proto::DdtKind>,
    max_in_flight: usize,
    request_timeout: Option<Duration>,
    next_id: AtomicU64,
    /// The sending side of the socket.
    writer: Mutex<Writer>,
    /// A handle on the socket to shut it down with while another thread
    /// is blocked in it.
    closer: Stream,
    state: Mutex<State>,
}

struct Writer {
    stream: Stream,
    out: Vec<u8>,
}

/// A request encoded and waiting to be sent.
struct Queued {
    id: u64,
    frame: Vec<u8>,
    cost: u64,
}

/// A caller waiting for its reply.
struct Waiting {
    reply: mpsc::SyncSender<Result<RawReply, ObjError>>,
    subject: Subject,
    cost: u64,
    /// The batch frame it was sent in.
    frame: Option<u64>,
}

struct State {
    queue: VecDeque<Queued>,
    /// Every request queued or in flight, by id.
    waiting: HashMap<u64, Waiting>,
    /// Batch frames with members unanswered: how many.
    frames: HashMap<u64, usize>,
    /// Requests sent and unanswered, and their weight in the window.
    in_flight: usize,
    cost: u64,
    /// A thread is sending.
    writing: bool,
    broken: Option<ObjError>,
    merge: MergeController,
    stats: MergeStats,
}

impl SharedObjClient {
    /// Connects to `uri` (its partition, or the default one), with the
    /// merge policy of the URI or else of `options`.
    pub fn connect(uri: &ObjUri, options: &ObjOptions) -> Result<Self, ObjError> {
        let server = uri.to_string();
        let (stream, session) = open(uri, options)?;
        let io = |source| ObjError::Io {
            server: server.clone(),
            source,
        };
        let reader = stream.try_clone().map_err(io)?;
        let closer = stream.try_clone().map_err(io)?;
        // Callers wait with their own timeout; the reader waits for ever.
        reader.set_read_timeout(None).map_err(io)?;
        let batches = session.features.contains(sluice_obj_proto::Features::BATCH);
        let merge = MergeController::new(uri.merge.unwrap_or(options.merge), batches);
        let shared = Arc::new(Shared {
            server: server.clone(),
            session,
            ddt: options.ddt,
            max_in_flight: options.max_in_flight.max(1),
            request_timeout: options.request_timeout,
            next_id: AtomicU64::new(1),
            writer: Mutex::new(Writer {
                stream,
                out: Vec::with_capacity(64 * 1024),
            }),
            closer,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                waiting: HashMap::new(),
                frames: HashMap::new(),
                in_flight: 0,
                cost: 0,
                writing: false,
                broken: None,
                merge,
                stats: MergeStats::default(),
            }),
        });
        let for_reader = Arc::clone(&shared);
        let reader = std::thread::Builder::new()
            .name(READER_THREAD.into())
            .spawn(move || for_reader.read_replies(reader))
            .map_err(io)?;
        Ok(Self {
            shared,
            reader: Some(reader),
        })
    }

    /// What the handshake agreed on.
    pub fn session(&self) -> &Negotiated {
        &self.shared.session
    }

    /// The server, as its URI.
    pub fn server(&self) -> &str {
        &self.shared.server
    }

    /// The merge policy in force ([`MergePolicy::Off`] when the server
    /// did not negotiate batch frames).
    pub fn merge_policy(&self) -> MergePolicy {
        self.shared.state().merge.policy()
    }

    /// How many batch frames this client sent and what they carried.
    pub fn merge_stats(&self) -> MergeStats {
        let st = self.shared.state();
        MergeStats {
            threshold: st.merge.threshold(),
            ..st.stats
        }
    }

    /// Runs one command that fits one wire request; blocks this thread
    /// until its reply.
    pub fn run(&self, req: &ObjRequest<'_>) -> Result<ObjResponse, ObjError> {
        let codec = self.codec();
        let Some(wire) = codec.single(req)? else {
            return Err(refused(
                subject_of(&codec, req),
                "too large for one request under the server's limits (ObjClient splits it)",
            ));
        };
        let id = self.shared.fresh_id();
        let mut frame = Vec::with_capacity(wire.frame_len() as usize);
        wire.encode(id, self.shared.session.partition, &mut frame);
        let (tx, rx) = mpsc::sync_channel(1);
        {
            let mut st = self.shared.state();
            if let Some(e) = &st.broken {
                return Err(e.for_another());
            }
            st.waiting.insert(
                id,
                Waiting {
                    reply: tx,
                    subject: wire.subject.clone(),
                    cost: cost(&wire),
                    frame: None,
                },
            );
            st.queue.push_back(Queued {
                id,
                frame,
                cost: cost(&wire),
            });
            // While replies are due, a merging client leaves the request
            // for the thread that handles the next one (`read_replies`),
            // so requests gather into one frame.
            if !st.merge.should_hold(st.in_flight, st.queue.len()) {
                self.shared.pump(st);
            }
        }
        let reply = match self.shared.request_timeout {
            None => rx.recv().map_err(|_| self.closed()),
            Some(after) => rx.recv_timeout(after).map_err(|e| match e {
                mpsc::RecvTimeoutError::Timeout => {
                    let e = ObjError::Timeout {
                        server: self.shared.server.clone(),
                        subject: wire.subject.clone(),
                        after,
                    };
                    // As with ObjClient, a timeout leaves the connection
                    // unusable: fail everyone else too.
                    self.shared.fail(&mut self.shared.state(), e.for_another());
                    e
                }
                mpsc::RecvTimeoutError::Disconnected => self.closed(),
            }),
        }??;
        codec.interpret(req, reply)
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

    fn codec(&self) -> Codec<'_> {
        Codec {
            session: &self.shared.session,
            server: &self.shared.server,
            ddt: self.shared.ddt,
            spans: false,
        }
    }

    fn closed(&self) -> ObjError {
        ObjError::Closed {
            server: self.shared.server.clone(),
        }
    }
}

impl Drop for SharedObjClient {
    fn drop(&mut self) {
        {
            let st = self.shared.state();
            if st.broken.is_none() {
                let mut w = self.shared.writer.lock().unwrap_or_else(|p| p.into_inner());
                let mut bye = Vec::with_capacity(REQUEST_HEADER_LEN);
                let disconnect = Request::new(self.shared.fresh_id(), Command::Disconnect);
                if disconnect
                    .encode(self.shared.session.partition, &mut bye)
                    .is_ok()
                {
                    let _ = w.stream.write_all(&bye);
                }
            }
        }
        self.shared.closer.shutdown();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across every early return; a panic
        // elsewhere must not stop the others from failing cleanly.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fresh_id(&self) -> u64 {
        // Ids wrap after 2^64 requests; 0 is never used.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if id == 0 {
            self.next_id.fetch_add(1, Ordering::Relaxed)
        } else {
            id
        }
    }

    /// Sends what is queued, unless another thread is sending (it will
    /// see it). Returns with the state unlocked.
    fn pump<'a>(&'a self, mut st: MutexGuard<'a, State>) {
        if st.writing {
            return;
        }
        st.writing = true;
        loop {
            if st.broken.is_some() {
                st.writing = false;
                return;
            }
            let (take, bytes) = self.room(&st);
            if take == 0 {
                st.writing = false;
                return;
            }
            let merge = st.merge.should_merge(st.in_flight, take);
            let items: Vec<Queued> = st.queue.drain(..take).collect();
            st.in_flight += take;
            st.cost += bytes;
            let groups = if merge {
                self.frames(&items)
            } else {
                vec![1; items.len()]
            };
            // Frame ids, and each member's frame, before anything is sent
            // (a reply may come before this thread locks the state again).
            let mut heads = Vec::with_capacity(groups.len());
            let (mut at, mut packed) = (0, 0);
            for &n in &groups {
                if n > 1 {
                    let frame = self.fresh_id();
                    st.frames.insert(frame, n);
                    for q in &items[at..at + n] {
                        if let Some(w) = st.waiting.get_mut(&q.id) {
                            w.frame = Some(frame);
                        }
                    }
                    st.stats.frames += 1;
                    st.stats.merged += n as u64;
                    packed += n;
                    heads.push(Some(frame));
                } else {
                    heads.push(None);
                }
                at += n;
            }
            st.merge.sent(take, packed);
            drop(st);
            let sent = {
                let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
                let Writer { stream, out } = &mut *w;
                out.clear();
                let mut at = 0;
                for (&n, head) in groups.iter().zip(&heads) {
                    let members = &items[at..at + n];
                    if let Some(frame) = head {
                        let body: usize = members.iter().map(|q| q.frame.len()).sum();
                        RequestHeader::batch(*frame, self.session.partition, body as u32)
                            .encode(out);
                    }
                    for q in members {
                        out.extend_from_slice(&q.frame);
                    }
                    at += n;
                }
                let r = stream.write_all(out);
                out.clear();
                r
            };
            st = self.state();
            if let Err(source) = sent {
                let e = ObjError::Io {
                    server: self.server.clone(),
                    source,
                };
                self.fail(&mut st, e);
                st.writing = false;
                return;
            }
        }
    }

    /// How many queued requests the window lets go now, and their weight
    /// (always one when nothing is in flight).
    fn room(&self, st: &State) -> (usize, u64) {
        let mut take = 0;
        let mut bytes = 0;
        for q in &st.queue {
            let n = st.in_flight + take;
            if n >= self.max_in_flight || (n > 0 && st.cost + bytes + q.cost > WINDOW_BYTES) {
                break;
            }
            take += 1;
            bytes += q.cost;
        }
        (take, bytes)
    }

    /// Cuts `items` into batch frames within the published limits
    /// (payload and member count): the size of each group, in order; a
    /// group of one goes as a plain request.
    fn frames(&self, items: &[Queued]) -> Vec<usize> {
        let Limits {
            max_payload,
            max_batch,
            ..
        } = self.session.limits;
        let mut groups = Vec::new();
        let (mut n, mut body) = (0usize, 0u64);
        for q in items {
            let len = q.frame.len() as u64;
            if n > 0 && (body + len > u64::from(max_payload) || n as u64 >= u64::from(max_batch)) {
                groups.push(n);
                (n, body) = (0, 0);
            }
            n += 1;
            body += len;
        }
        if n > 0 {
            groups.push(n);
        }
        groups
    }

    /// Marks the connection broken: every waiting caller gets `e`.
    fn fail(&self, st: &mut State, e: ObjError) {
        if st.broken.is_some() {
            return;
        }
        for (_, w) in st.waiting.drain() {
            let _ = w.reply.send(Err(e.for_another()));
        }
        st.queue.clear();
        st.frames.clear();
        st.in_flight = 0;
        st.cost = 0;
        st.broken = Some(e);
        self.closer.shutdown();
    }

    /// The reader thread: replies to their callers until the connection
    /// ends.
    fn read_replies(&self, mut stream: Stream) {
        let mut inbuf = RecvBuf::new();
        let mut replies = Vec::new();
        loop {
            let parsed = loop {
                match take_reply(&mut inbuf, &self.session.limits, &self.server) {
                    Ok(Front::Reply(r)) => replies.push(r),
                    Ok(Front::Short(h)) => {
                        if let Some(h) = h {
                            inbuf.reserve(reply_len(&h));
                        }
                        break Ok(());
                    }
                    Err(e) => break Err(e),
                }
            };
            if !replies.is_empty() {
                let mut st = self.state();
                let now = Instant::now();
                for (id, reply) in replies.drain(..) {
                    if let Err(e) = self.complete(&mut st, now, id, reply) {
                        self.fail(&mut st, e);
                    }
                }
                if st.broken.is_none() && !st.queue.is_empty() {
                    // Replies made room: send what was left waiting.
                    self.pump(st);
                }
            }
            let ended = match parsed {
                Err(e) => Some(e),
                Ok(()) => match inbuf.fill(&mut stream) {
                    Ok(true) => None,
                    Ok(false) => Some(ObjError::Closed {
                        server: self.server.clone(),
                    }),
                    Err(source) => Some(ObjError::Io {
                        server: self.server.clone(),
                        source,
                    }),
                },
            };
            if let Some(e) = ended {
                let mut st = self.state();
                if st.broken.is_none() {
                    debug!(server = %self.server, error = %e, "object connection ended");
                }
                self.fail(&mut st, e);
                return;
            }
        }
    }

    /// Hands one reply to its caller.
    fn complete(
        &self,
        st: &mut State,
        now: Instant,
        id: u64,
        reply: Result<RawReply, (ErrorCode, String)>,
    ) -> Result<(), ObjError> {
        let refusal = |subject: &Subject, (code, message): &(ErrorCode, String)| ObjError::Server {
            server: self.server.clone(),
            subject: subject.clone(),
            code: *code,
            message: message.clone(),
        };
        if matches!(&reply, Ok(r) if r.span) {
            // This client never asks for one (its codec's `spans`).
            return Err(ObjError::Violation {
                server: self.server.clone(),
                reason: format!("a span reply to request {id}, which did not ask for one"),
            });
        }
        if let Some(w) = st.waiting.remove(&id) {
            st.in_flight = st.in_flight.saturating_sub(1);
            st.cost = st.cost.saturating_sub(w.cost);
            if let Some(frame) = w.frame {
                if let Some(left) = st.frames.get_mut(&frame) {
                    *left -= 1;
                    if *left == 0 {
                        st.frames.remove(&frame);
                    }
                }
            }
            let outstanding = st.in_flight + st.queue.len();
            st.merge.completed(now, outstanding);
            let _ = w.reply.send(reply.map_err(|r| refusal(&w.subject, &r)));
            return Ok(());
        }
        if st.frames.remove(&id).is_some() {
            // A batch frame refused whole: none of its members ran.
            let members: Vec<u64> = st
                .waiting
                .iter()
                .filter(|(_, w)| w.frame == Some(id))
                .map(|(m, _)| *m)
                .collect();
            for m in members {
                if let Some(w) = st.waiting.remove(&m) {
                    st.in_flight = st.in_flight.saturating_sub(1);
                    st.cost = st.cost.saturating_sub(w.cost);
                    let e = match &reply {
                        Ok(_) => ObjError::Violation {
                            server: self.server.clone(),
                            reason: "a batch frame was answered as a request".into(),
                        },
                        Err(r) => refusal(&w.subject, r),
                    };
                    let _ = w.reply.send(Err(e));
                }
            }
            return Ok(());
        }
        Err(ObjError::Violation {
            server: self.server.clone(),
            reason: format!("a reply to request {id}, which is not in flight"),
        })
    }
}

/// What a request is about, for refusing it before it is sent.
fn subject_of(codec: &Codec<'_>, req: &ObjRequest<'_>) -> Subject {
    use super::codec::{in_collection, subject};
    use sluice_obj_proto::Opcode;
    match *req {
        ObjRequest::Create { collection, .. } => in_collection(Opcode::Create, collection),
        ObjRequest::List { collection, .. } => in_collection(Opcode::List, collection),
        ObjRequest::Query { collection, .. } => in_collection(Opcode::Query, collection),
        ObjRequest::CreateAndWrite { collection, .. } => {
            in_collection(Opcode::CreateAndWrite, collection)
        }
        ObjRequest::Remove { object, .. } => subject(Opcode::Remove, object),
        ObjRequest::Read { object, .. } => subject(Opcode::Read, object),
        ObjRequest::Write { object, .. } => subject(Opcode::Write, object),
        ObjRequest::Append { object, .. } => subject(Opcode::Append, object),
        ObjRequest::Punch { object, .. } => subject(Opcode::Punch, object),
        ObjRequest::GetAttrs { object, .. } => subject(Opcode::GetAttrs, object),
        ObjRequest::SetAttrs { object, .. } => subject(Opcode::SetAttrs, object),
        ObjRequest::Truncate { object, .. } => subject(Opcode::Truncate, object),
        ObjRequest::Flush(_) => in_collection(Opcode::Flush, ""),
        ObjRequest::ExtentRead { export, .. } => codec.extent_subject(Opcode::ExtentRead, export),
        ObjRequest::ExtentWrite { export, .. } => codec.extent_subject(Opcode::ExtentWrite, export),
    }
}
