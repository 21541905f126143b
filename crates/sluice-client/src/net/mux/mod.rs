//! One connection shared by many callers: the multiplexer core under the
//! clients that many threads use at once.
//!
//! Callers encode their requests themselves (each under an id from
//! [`Mux::fresh_id`]) and [`submit`](Mux::submit) them with a
//! [`MuxProtocol::Ticket`], what completing them needs. The first caller
//! to find no send under way writes everything queued that the window
//! allows (requests in flight, and their bytes plus the reply bytes they
//! expect, are bounded, so the client never writes so far ahead that a
//! server whose own in-flight limit stops it reading waits on replies no
//! one reads); the protocol may pack several requests into one frame
//! (temporal merge, [`MuxProtocol::groups`]). A reader thread parses
//! replies with the protocol's parser, completes each request, in
//! whatever order the server answers, sends what was left waiting, and
//! fails requests whose deadline passed (their replies are dropped when
//! they come).
//!
//! # Reconnecting
//!
//! With [`Reconnect`] on, every request keeps its encoded bytes until its
//! reply arrives, and every acknowledged change the protocol calls a
//! [`Logged::Change`] stays in a [`ReplayLog`] until a FLUSH covers it
//! (when the log outgrows its limit the client sends a FLUSH of its own).
//! When the connection is lost the reader stops new sends, connects again
//! (with backoff, until the window runs out: [`MuxProtocol::reopen`]
//! checks the server offers the same session), replays the log one
//! request at a time (so overlapping changes land in their order), then
//! queues again every request that had no reply, except one the protocol
//! says must not run twice ([`MuxProtocol::resendable`]) that may have
//! reached the server: that one fails with
//! [`MuxProtocol::lost_in_flight`]. Callers see nothing else of a
//! reconnect that succeeds; when the window runs out every waiting
//! request fails with the protocol's [`MuxProtocol::reconnect_failed`].
//!
//! Lock order: `state`, then `socket`. The reader owns the waiting
//! requests; callers and the sender hand it theirs over a channel before
//! the bytes can reach the server, so it always knows an id before its
//! reply arrives.

mod reader;
pub(crate) mod replay;

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::recv::RecvBuf;
use super::transport::Stream;

/// Reconnection policy of a client shared by many callers (see the crate
/// documentation for what it promises).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// How long after losing the connection the client keeps trying to
    /// get it back; zero turns reconnecting off (a lost connection fails
    /// every request in flight). One attempt (connecting and the
    /// handshake) gets at most a quarter of it (and at least a second,
    /// and no more than the connect timeout), so a connection that is
    /// accepted and then never answered costs one attempt, not the
    /// whole window.
    pub window: Duration,
    /// Bytes of acknowledged but unflushed changes the client keeps to
    /// replay after a reconnect; when they exceed this, the client sends
    /// a FLUSH of its own.
    pub replay_log_bytes: usize,
    /// While getting the connection back, once an attempt was refused
    /// (nothing listens at the server's address: it is down, not slow),
    /// fail the requests waiting and every new one at once rather than
    /// holding them for the rest of the window; the client goes on
    /// trying to reconnect, and requests wait again only after it
    /// succeeds. For callers that have somewhere else to go (a member
    /// of a redundant array); off by default.
    pub fail_when_refused: bool,
}

impl Reconnect {
    /// Reconnecting off.
    pub const OFF: Self = Self {
        window: Duration::ZERO,
        replay_log_bytes: 0,
        fail_when_refused: false,
    };

    /// Reconnecting on, within `window`, with the default log size.
    pub fn within(window: Duration) -> Self {
        Self {
            window,
            replay_log_bytes: 16 << 20,
            fail_when_refused: false,
        }
    }

    /// Whether the client reconnects at all.
    pub fn enabled(&self) -> bool {
        !self.window.is_zero()
    }
}

impl Default for Reconnect {
    fn default() -> Self {
        Self::OFF
    }
}

/// What a successful reply to a request means for the replay log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Logged {
    /// A change that may be sent again and lands the same: logged until
    /// a FLUSH covers it.
    Change,
    /// A FLUSH that makes every change acknowledged before it was sent
    /// durable: the log drops them.
    Flush,
    /// Neither.
    Nothing,
}

/// What the protocol's parser found at the front of the receive buffer.
pub(crate) enum Next<P: MuxProtocol> {
    /// Not a whole reply (or chunk) yet: the buffer must hold at least
    /// this many bytes from its start.
    Need(usize),
    /// A chunk of a reply, taken; its request is not finished.
    More,
    /// The reply to request `id` is complete.
    Done {
        id: u64,
        result: Result<P::Raw, P::Refusal>,
    },
}

/// The waiting requests' tickets, by id, as the parser sees them.
pub(crate) trait Tickets<T> {
    fn get(&mut self, id: u64) -> Option<&mut T>;
}

/// A protocol the multiplexer can drive: how its replies are parsed and
/// completed, how requests are grouped, what may run twice, and how to
/// get the same session back.
pub(crate) trait MuxProtocol: Send + Sync + Sized + 'static {
    /// What a waiting request keeps until its reply completes it (where
    /// its data goes, what to name in errors).
    type Ticket: Send + 'static;
    /// A reply as the parser hands it over.
    type Raw: Send + 'static;
    /// The server's refusal of a request, as the parser hands it over.
    type Refusal: Send + 'static;
    /// A completed request, as its caller gets it.
    type Reply: Send + 'static;
    type Error: std::error::Error + Send + 'static;
    /// Parsing state of one connection's replies.
    type Parser: Send + 'static;
    /// What the send side keeps between sends (a merge controller).
    type SendState: Send + 'static;
    /// What the replay log keeps besides a change's bytes, to read the
    /// reply to it again.
    type Record: Send + 'static;

    /// A parser for a new connection.
    fn parser(&self) -> Self::Parser;
    /// Tells the parser of a request about to be sent (or sent again)
    /// under `id`.
    fn registered(&self, parser: &mut Self::Parser, id: u64, ticket: &Self::Ticket);
    /// Takes the next reply (or chunk of one) out of `inbuf`; `tickets`
    /// are the waiting requests, for a chunk's data to be put where its
    /// request wants it.
    fn next(
        &self,
        parser: &mut Self::Parser,
        inbuf: &mut RecvBuf,
        tickets: &mut dyn Tickets<Self::Ticket>,
    ) -> Result<Next<Self>, Self::Error>;
    /// The caller's outcome of a request whose reply is complete.
    fn finish(
        &self,
        ticket: Self::Ticket,
        result: Result<Self::Raw, Self::Refusal>,
    ) -> Result<Self::Reply, Self::Error>;
    /// The error of a request whose group frame the server refused (or
    /// answered as one request).
    fn group_failed(
        &self,
        ticket: &Self::Ticket,
        result: &Result<Self::Raw, Self::Refusal>,
    ) -> Self::Error;

    /// What a successful reply to `ticket`'s request means for the log.
    fn logged(&self, ticket: &Self::Ticket) -> Logged;
    /// What the log keeps of a [`Logged::Change`].
    fn record(&self, ticket: &Self::Ticket) -> Self::Record;
    /// A ticket to read the reply to a replayed change with.
    fn replay_ticket(&self, record: &Self::Record) -> Self::Ticket;
    /// Whether the server can be asked to FLUSH (else nothing is logged:
    /// what it acknowledged is as durable as it will get).
    fn can_flush(&self) -> bool;
    /// A FLUSH of the client's own, encoded under `id`.
    fn internal_flush(&self, id: u64) -> Option<(Vec<u8>, Self::Ticket)>;
    /// Whether a request that may have reached the server may be sent
    /// again after a reconnect (it lands the same if it runs twice).
    fn resendable(&self, ticket: &Self::Ticket) -> bool;

    /// Whether a caller's request stays queued for the sender of the next
    /// reply's follow-up (temporal merge) rather than being sent now.
    fn hold(&self, send: &mut Self::SendState, in_flight: usize, queued: usize) -> bool;
    /// How the requests about to go out (their frames, in order) are
    /// grouped: each group's size and form, in order, where a group of
    /// one goes as it is; `None` when each goes alone.
    fn groups(
        &self,
        send: &mut Self::SendState,
        in_flight: usize,
        frames: &mut dyn Iterator<Item = &[u8]>,
    ) -> Option<Vec<Group>>;
    /// The header of a group frame whose members take `body` bytes.
    fn group_header(&self, id: u64, body: usize, out: &mut Vec<u8>);
    /// Appends one request, under `id`, that does what the `members`
    /// (a [`Group::fused`] group's frames, in order) ask.
    fn fuse(&self, id: u64, members: &[&[u8]], out: &mut Vec<u8>);
    /// Splits the reply to a fused request among its members (their
    /// tickets, in order); an error if the reply cannot be theirs.
    fn split(
        &self,
        reply: Self::Raw,
        members: &[&Self::Ticket],
    ) -> Result<Vec<Self::Raw>, Self::Error>;
    /// `requests` went out, `grouped` of them in group frames.
    fn sent(&self, send: &mut Self::SendState, requests: usize, grouped: usize);
    /// Requests completed, with `outstanding` others queued or in flight.
    fn completed(&self, send: &mut Self::SendState, outstanding: usize);

    /// Connects again, within `timeout`, and checks the server offers the
    /// same session (the waiting requests are encoded for it).
    fn reopen(&self, timeout: Duration) -> Result<Stream, Self::Error>;
    /// Whether an error of [`reopen`](Self::reopen) or of a replayed
    /// change ends reconnecting at once (the session changed, the server
    /// refused a replayed change).
    fn is_final(&self, e: &Self::Error) -> bool;
    /// The bytes that end the session politely, under `id`.
    fn goodbye(&self, id: u64, out: &mut Vec<u8>);

    fn closed(&self) -> Self::Error;
    /// The server broke the protocol.
    fn violation(&self, reason: String) -> Self::Error;
    fn io_error(&self, source: io::Error) -> Self::Error;
    fn timed_out(&self, ticket: &Self::Ticket, after: Duration) -> Self::Error;
    /// Lets go of what a request whose caller gave up lent it (a buffer
    /// its reply was to be put in): nothing is put there after this.
    fn abandon(&self, ticket: &mut Self::Ticket);
    fn reconnect_failed(&self, window: Duration, last: Self::Error) -> Self::Error;
    /// If `e` (a failed reconnect attempt) is a refused connection, the
    /// error requests get while the server refuses (see
    /// [`Reconnect::fail_when_refused`]); `None` for any other failure.
    fn refused(&self, _e: &Self::Error) -> Option<Self::Error> {
        None
    }
    /// The error of a request that must not run twice and was in flight
    /// when the connection was lost: it may or may not have run.
    fn lost_in_flight(&self, ticket: &Self::Ticket) -> Self::Error;
    /// The same error for another waiter (errors hold `io::Error`s,
    /// which do not clone).
    fn copy_error(&self, e: &Self::Error) -> Self::Error;
}

/// Requests that go out together (temporal merge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Group {
    /// How many, in queue order.
    pub(crate) members: usize,
    /// One request the protocol makes of them ([`MuxProtocol::fuse`]),
    /// whose one reply is split among them; else their own frames inside
    /// one group frame, each answered alone.
    pub(crate) fused: bool,
}

impl Group {
    /// `members` in one group frame.
    pub(crate) const fn frame(members: usize) -> Self {
        Self {
            members,
            fused: false,
        }
    }
}

/// How much one connection keeps in flight, and how long it waits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MuxOptions {
    /// Most requests written and unanswered at once.
    pub(crate) max_in_flight: usize,
    /// Most request and expected reply bytes in flight at once (a
    /// request alone may exceed it).
    pub(crate) window_bytes: u64,
    /// Limit on waiting for a reply (`None`: for ever).
    pub(crate) request_timeout: Option<Duration>,
    pub(crate) reconnect: Reconnect,
    /// Limit on one attempt at connecting again.
    pub(crate) connect_timeout: Duration,
}

/// Where a caller learns its request's outcome.
pub(crate) type Outcome<P> =
    oneshot::Receiver<Result<<P as MuxProtocol>::Reply, <P as MuxProtocol>::Error>>;

/// Who learns of a completion.
enum Notify<P: MuxProtocol> {
    Caller(oneshot::Sender<Result<P::Reply, P::Error>>),
    /// A FLUSH the client sent itself to empty the replay log.
    Internal,
    /// The caller timed out; the reply is read and dropped.
    Abandoned,
}

/// A request waiting for its reply, or a group frame whose members are,
/// or a fused request whose reply is its members' (in order).
enum Waiting<P: MuxProtocol> {
    Request(Entry<P>),
    Group { left: usize },
    Fused { members: Vec<u64> },
}

struct Entry<P: MuxProtocol> {
    ticket: P::Ticket,
    notify: Notify<P>,
    /// The encoded request, kept to re-send and replay (reconnect on).
    bytes: Option<Vec<u8>>,
    deadline: Option<Instant>,
    /// Its weight in the window.
    cost: u64,
    /// For a FLUSH: the last replay-log sequence number it covers.
    covers: u64,
    /// The group frame it was sent in.
    group: Option<u64>,
}

/// What callers and the sender hand the reader.
enum Registration<P: MuxProtocol> {
    Request {
        id: u64,
        entry: Entry<P>,
    },
    /// Requests `members` go out in group frame `id`, or fused into
    /// request `id`.
    Group {
        id: u64,
        members: Vec<u64>,
        fused: bool,
    },
}

/// How one group of a send goes out: its id (0: each member alone),
/// its size, and whether it is fused.
type Head = (u64, usize, bool);

/// A request encoded and waiting to be sent.
struct Queued {
    id: u64,
    frame: Vec<u8>,
    cost: u64,
}

/// Whether requests can be sent.
enum Connected<E> {
    Up,
    /// The reader is getting a connection back: requests queue.
    Reconnecting,
    /// Given up: every request fails so.
    Failed(E),
}

struct State<P: MuxProtocol> {
    queue: VecDeque<Queued>,
    /// Requests written and unanswered, and their weight in the window.
    in_flight: usize,
    cost: u64,
    /// A thread is sending.
    writing: bool,
    connected: Connected<P::Error>,
    /// Bumped by each reconnect; bytes taken under an older one are not
    /// written (the reconnect queued their requests again).
    generation: u64,
    /// The replay log is full: the next caller adds a FLUSH.
    flush_wanted: bool,
    /// Reconnecting, the last attempt was refused, and the client fails
    /// requests rather than holding them
    /// ([`Reconnect::fail_when_refused`]): what they fail with.
    refused: Option<P::Error>,
    send: P::SendState,
    /// The last send's list of requests, kept for its capacity.
    spare: Vec<Queued>,
}

struct Socket {
    stream: Stream,
    generation: u64,
    out: Vec<u8>,
}

pub(crate) struct Shared<P: MuxProtocol> {
    pub(crate) proto: P,
    options: MuxOptions,
    next_id: AtomicU64,
    state: Mutex<State<P>>,
    socket: Mutex<Socket>,
    /// A handle on the current socket, to shut it down while another
    /// thread is blocked in it.
    closer: Mutex<Stream>,
    /// Why the last send failed (the reader reports it for the lost
    /// connection rather than the end of stream the failure causes).
    send_failed: Mutex<Option<io::Error>>,
    registrations: mpsc::Sender<Registration<P>>,
    /// Sequence number of the last change the reader put in the replay
    /// log; a FLUSH covers what was logged before it was sent.
    logged: AtomicU64,
    /// The client is being dropped: the reader ends, never reconnects.
    stopping: AtomicBool,
}

/// One connection shared by many callers (see the module documentation).
pub(crate) struct Mux<P: MuxProtocol> {
    shared: Arc<Shared<P>>,
    reader: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves its state consistent at each early
    // return; a panic elsewhere must not stop the others from failing
    // cleanly.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a dropped client tries to tell the server it is going.
const GOODBYE_TIMEOUT: Duration = Duration::from_secs(1);

/// How often the reader wakes to check deadlines.
pub(crate) fn tick(request_timeout: Duration) -> Duration {
    (request_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// Sets the reader's wake-ups for `options` on `stream`.
fn reader_half(stream: &Stream, options: &MuxOptions) -> io::Result<Stream> {
    let reader = stream.try_clone()?;
    reader.set_read_timeout(options.request_timeout.map(tick))?;
    Ok(reader)
}

impl<P: MuxProtocol> Mux<P> {
    /// Starts serving callers over `stream`, whose handshake is done; the
    /// reader thread is named `thread`.
    pub(crate) fn start(
        proto: P,
        stream: Stream,
        send: P::SendState,
        options: MuxOptions,
        thread: &str,
    ) -> Result<Self, P::Error> {
        let io = |e| proto.io_error(e);
        let reader = reader_half(&stream, &options).map_err(io)?;
        let closer = stream.try_clone().map_err(io)?;
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            options,
            next_id: AtomicU64::new(1),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                in_flight: 0,
                cost: 0,
                writing: false,
                connected: Connected::Up,
                generation: 0,
                flush_wanted: false,
                refused: None,
                send,
                spare: Vec::new(),
            }),
            socket: Mutex::new(Socket {
                stream,
                generation: 0,
                out: Vec::with_capacity(64 * 1024),
            }),
            closer: Mutex::new(closer),
            send_failed: Mutex::new(None),
            registrations: tx,
            logged: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            proto,
        });
        let mut r = reader::Reader::new(&shared, reader, rx);
        let handle = std::thread::Builder::new()
            .name(thread.into())
            .spawn(move || r.run())
            .map_err(|e| shared_io(&shared, e))?;
        Ok(Self {
            shared,
            reader: Some(handle),
        })
    }

    pub(crate) fn proto(&self) -> &P {
        &self.shared.proto
    }

    /// An id for a request (never 0; wraps after 2^64).
    pub(crate) fn fresh_id(&self) -> u64 {
        self.shared.fresh_id()
    }

    /// Reads the send side's state (merge statistics).
    pub(crate) fn with_send_state<T>(&self, f: impl FnOnce(&P::SendState) -> T) -> T {
        f(&lock(&self.shared.state).send)
    }

    /// Queues request `id` (`frame`, its bytes on the wire) and sends it
    /// unless another thread is sending or the protocol holds it;
    /// `cost` is its weight in the window. The receiver completes with
    /// its outcome.
    pub(crate) fn submit(
        &self,
        id: u64,
        frame: Vec<u8>,
        ticket: P::Ticket,
        cost: u64,
    ) -> Result<Outcome<P>, P::Error> {
        let s = &*self.shared;
        let (tx, rx) = oneshot::channel();
        let keep = s.options.reconnect.enabled();
        let entry = Entry {
            ticket,
            notify: Notify::Caller(tx),
            bytes: keep.then(|| frame.clone()),
            deadline: s.options.request_timeout.map(|t| Instant::now() + t),
            cost,
            covers: s.logged.load(Ordering::Acquire),
            group: None,
        };
        let mut st = lock(&s.state);
        if let Connected::Failed(e) = &st.connected {
            return Err(s.proto.copy_error(e));
        }
        if let Some(e) = &st.refused {
            return Err(s.proto.copy_error(e));
        }
        // Registered before the bytes can reach the server.
        s.register(Registration::Request { id, entry })?;
        st.queue.push_back(Queued { id, frame, cost });
        if st.flush_wanted {
            st.flush_wanted = false;
            s.queue_internal_flush(&mut st);
        }
        let (in_flight, queued) = (st.in_flight, st.queue.len());
        if !s.proto.hold(&mut st.send, in_flight, queued) {
            s.pump(st);
        }
        Ok(rx)
    }

    /// Waits for a request's outcome, blocking this thread (not from
    /// inside an async runtime).
    pub(crate) fn wait(&self, rx: Outcome<P>) -> Result<P::Reply, P::Error> {
        rx.blocking_recv().map_err(|_| self.shared.proto.closed())?
    }
}

fn shared_io<P: MuxProtocol>(shared: &Shared<P>, e: io::Error) -> P::Error {
    shared.proto.io_error(e)
}

impl<P: MuxProtocol> Drop for Mux<P> {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.stopping.store(true, Ordering::Release);
        let reconnecting = {
            let st = lock(&s.state);
            if matches!(st.connected, Connected::Up) && !st.writing {
                let mut bye = Vec::new();
                s.proto.goodbye(s.fresh_id(), &mut bye);
                let mut sock = lock(&s.socket);
                // A server that takes nothing is not waited for.
                let _ = sock.stream.set_write_timeout(Some(GOODBYE_TIMEOUT));
                let _ = sock.stream.write_all(&bye);
            }
            matches!(st.connected, Connected::Reconnecting)
        };
        lock(&s.closer).shutdown();
        if let Some(reader) = self.reader.take() {
            // A reader getting the connection back may be inside a
            // connect attempt: it sees `stopping` after it and ends by
            // itself, and no caller is left to wait for it.
            if !reconnecting {
                let _ = reader.join();
            }
        }
    }
}

impl<P: MuxProtocol> Shared<P> {
    fn fresh_id(&self) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if id == 0 {
            self.next_id.fetch_add(1, Ordering::Relaxed)
        } else {
            id
        }
    }

    fn register(&self, r: Registration<P>) -> Result<(), P::Error> {
        self.registrations.send(r).map_err(|_| self.proto.closed())
    }

    /// Queues a FLUSH of the client's own (the replay log is full).
    fn queue_internal_flush(&self, st: &mut State<P>) {
        let id = self.fresh_id();
        let Some((frame, ticket)) = self.proto.internal_flush(id) else {
            return;
        };
        let entry = Entry {
            ticket,
            notify: Notify::Internal,
            bytes: Some(frame.clone()),
            deadline: None,
            cost: 0,
            covers: self.logged.load(Ordering::Acquire),
            group: None,
        };
        if self.register(Registration::Request { id, entry }).is_ok() {
            st.queue.push_back(Queued { id, frame, cost: 0 });
        }
    }

    /// Writes `items` with one call, in groups as `heads` says (for each
    /// group, its id, 0 for none, its size and whether it is fused;
    /// empty when every request goes alone), unless a reconnect came
    /// since they were taken (it queued them again).
    fn write(&self, generation: u64, items: &[Queued], heads: &[Head]) -> io::Result<()> {
        let mut sock = lock(&self.socket);
        if sock.generation != generation {
            return Ok(());
        }
        let Socket { stream, out, .. } = &mut *sock;
        if let ([one], []) = (items, heads) {
            return stream.write_all(&one.frame);
        }
        out.clear();
        if heads.is_empty() {
            items.iter().for_each(|q| out.extend_from_slice(&q.frame));
        } else {
            let mut at = 0;
            for &(id, n, fused) in heads {
                let members = &items[at..at + n];
                at += n;
                if fused {
                    let frames: Vec<&[u8]> = members.iter().map(|q| &q.frame[..]).collect();
                    self.proto.fuse(id, &frames, out);
                    continue;
                }
                if id != 0 {
                    let body = members.iter().map(|q| q.frame.len()).sum();
                    self.proto.group_header(id, body, out);
                }
                members.iter().for_each(|q| out.extend_from_slice(&q.frame));
            }
        }
        let r = stream.write_all(out);
        out.clear();
        r
    }

    /// How many queued requests the window lets go now, and their weight
    /// (always one when nothing is in flight).
    fn room(&self, st: &State<P>) -> (usize, u64) {
        let (mut take, mut bytes) = (0, 0);
        for q in &st.queue {
            let n = st.in_flight + take;
            if n >= self.options.max_in_flight.max(1)
                || (n > 0 && st.cost + bytes + q.cost > self.options.window_bytes)
            {
                break;
            }
            take += 1;
            bytes += q.cost;
        }
        (take, bytes)
    }

    /// Sends what is queued and the window lets go, unless another thread
    /// is sending (it will see it). Returns with the state unlocked.
    fn pump<'a>(&'a self, mut st: MutexGuard<'a, State<P>>) {
        if st.writing {
            return;
        }
        st.writing = true;
        loop {
            if !matches!(st.connected, Connected::Up) {
                st.writing = false;
                return;
            }
            let (take, bytes) = self.room(&st);
            if take == 0 {
                st.writing = false;
                return;
            }
            let mut items = std::mem::take(&mut st.spare);
            items.extend(st.queue.drain(..take));
            let in_flight = st.in_flight;
            let groups = self.proto.groups(
                &mut st.send,
                in_flight,
                &mut items.iter().map(|q| &q.frame[..]),
            );
            st.in_flight += take;
            st.cost += bytes;
            let generation = st.generation;
            // Group ids, registered before anything is sent.
            let mut heads = Vec::new();
            let mut grouped = 0;
            if let Some(groups) = &groups {
                let mut at = 0;
                for &Group { members: n, fused } in groups {
                    let mut head = None;
                    if n > 1 {
                        let id = self.fresh_id();
                        let members = items[at..at + n].iter().map(|q| q.id).collect();
                        let group = Registration::Group { id, members, fused };
                        if self.register(group).is_ok() {
                            head = Some((id, n, fused));
                            grouped += n;
                        }
                    }
                    heads.push(head.unwrap_or((0, n, false)));
                    at += n;
                }
            }
            self.proto.sent(&mut st.send, take, grouped);
            drop(st);
            let written = self.write(generation, &items, &heads);
            st = lock(&self.state);
            items.clear();
            if items.capacity() > st.spare.capacity() {
                st.spare = items;
            }
            if let Err(source) = written {
                st.writing = false;
                // The reader sees the socket end: it reconnects (and
                // sends these again), or fails every request.
                tracing::debug!(error = &source as &dyn std::error::Error, "send failed");
                lock(&self.send_failed).get_or_insert(source);
                lock(&self.closer).shutdown();
                return;
            }
        }
    }
}
