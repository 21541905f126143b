//! The reader thread of a [`Mux`](super::Mux): completes replies, fails
//! requests whose deadline passed, and gets the connection back.

use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Weak};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::replay::ReplayLog;
use super::{
    lock, reader_half, Connected, Entry, Logged, MuxProtocol, Next, Notify, Queued, Registration,
    Shared, Tickets, Waiting,
};
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;

/// The waiting requests, by id.
struct Table<P: MuxProtocol>(HashMap<u64, Waiting<P>>);

impl<P: MuxProtocol> Tickets<P::Ticket> for Table<P> {
    fn get(&mut self, id: u64) -> Option<&mut P::Ticket> {
        match self.0.get_mut(&id) {
            Some(Waiting::Request(e)) => Some(&mut e.ticket),
            _ => None,
        }
    }
}

/// Why the reader stopped reading the current connection.
enum Stop<E> {
    /// The connection is gone; reconnecting may help.
    Lost(E),
    /// Nothing will help (a protocol violation, the client dropped).
    Fatal(E),
}

pub(super) struct Reader<P: MuxProtocol> {
    shared: Weak<Shared<P>>,
    stream: Stream,
    registrations: mpsc::Receiver<Registration<P>>,
    inbuf: RecvBuf,
    parser: P::Parser,
    table: Table<P>,
    /// Logged changes: their ids and records.
    log: ReplayLog<(u64, P::Record)>,
    /// Log changes (reconnect on, and the server can flush).
    logging: bool,
    /// An internal FLUSH was asked for and has not completed.
    flush_asked: bool,
}

impl<P: MuxProtocol> Reader<P> {
    pub(super) fn new(
        shared: &Arc<Shared<P>>,
        stream: Stream,
        registrations: mpsc::Receiver<Registration<P>>,
    ) -> Self {
        let reconnect = shared.options.reconnect;
        Self {
            shared: Arc::downgrade(shared),
            stream,
            registrations,
            inbuf: RecvBuf::new(),
            parser: shared.proto.parser(),
            table: Table(HashMap::new()),
            log: ReplayLog::new(reconnect.replay_log_bytes),
            logging: reconnect.enabled() && shared.proto.can_flush(),
            flush_asked: false,
        }
    }

    pub(super) fn run(&mut self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let error = loop {
            match self.serve(&shared) {
                Stop::Lost(e)
                    if shared.options.reconnect.enabled()
                        && !shared.stopping.load(Ordering::Acquire) =>
                {
                    warn!(
                        error = &e as &dyn std::error::Error,
                        "connection lost; reconnecting"
                    );
                    match self.reconnect(&shared, e) {
                        Ok(()) => continue,
                        Err(e) => break e,
                    }
                }
                Stop::Lost(e) | Stop::Fatal(e) => break e,
            }
        };
        debug!(
            error = &error as &dyn std::error::Error,
            "client reader stopped"
        );
        self.fail_all(&shared, error);
    }

    /// Reads and completes replies until the connection stops.
    fn serve(&mut self, shared: &Shared<P>) -> Stop<P::Error> {
        loop {
            match self.inbuf.fill(&mut self.stream) {
                Ok(true) => {}
                Ok(false) => return self.lost(shared, shared.proto.closed()),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) => return self.lost(shared, shared.proto.io_error(e)),
            }
            self.register(shared);
            if let Err(e) = self.process(shared) {
                return Stop::Fatal(e);
            }
            self.expire(shared);
        }
    }

    /// The connection ended with `e`, or with the send failure that
    /// ended it.
    fn lost(&self, shared: &Shared<P>, e: P::Error) -> Stop<P::Error> {
        if shared.stopping.load(Ordering::Acquire) {
            return Stop::Fatal(shared.proto.closed());
        }
        match lock(&shared.send_failed).take() {
            Some(cause) => Stop::Lost(shared.proto.io_error(cause)),
            None => Stop::Lost(e),
        }
    }

    fn register(&mut self, shared: &Shared<P>) {
        while let Ok(r) = self.registrations.try_recv() {
            match r {
                Registration::Request { id, entry } => {
                    shared.proto.registered(&mut self.parser, id, &entry.ticket);
                    self.table.0.insert(id, Waiting::Request(entry));
                }
                Registration::Group { id, members, fused } => {
                    for m in &members {
                        if let Some(Waiting::Request(e)) = self.table.0.get_mut(m) {
                            e.group = Some(id);
                        }
                    }
                    let waiting = if fused {
                        Waiting::Fused { members }
                    } else {
                        Waiting::Group {
                            left: members.len(),
                        }
                    };
                    self.table.0.insert(id, waiting);
                }
            }
        }
    }

    /// Completes every reply fully received, then lets the sender use
    /// the room they made.
    fn process(&mut self, shared: &Shared<P>) -> Result<(), P::Error> {
        let (mut done, mut freed) = (0usize, 0u64);
        loop {
            let next = shared
                .proto
                .next(&mut self.parser, &mut self.inbuf, &mut self.table)?;
            match next {
                Next::Need(n) => {
                    self.inbuf.reserve(n);
                    break;
                }
                Next::More => {}
                Next::Done { id, result } => {
                    let (n, cost) = self.complete(shared, id, result)?;
                    done += n;
                    freed += cost;
                }
            }
        }
        if done == 0 {
            return Ok(());
        }
        let mut st = lock(&shared.state);
        st.in_flight = st.in_flight.saturating_sub(done);
        st.cost = st.cost.saturating_sub(freed);
        let outstanding = st.in_flight + st.queue.len();
        shared.proto.completed(&mut st.send, outstanding);
        if self.logging && self.log.over_limit() && !self.flush_asked {
            st.flush_wanted = true;
            self.flush_asked = true;
        }
        if !st.queue.is_empty() {
            shared.pump(st);
        }
        Ok(())
    }

    /// Completes the request (or refused group frame) `id`; returns how
    /// many requests left the window and their weight.
    fn complete(
        &mut self,
        shared: &Shared<P>,
        id: u64,
        result: Result<P::Raw, P::Refusal>,
    ) -> Result<(usize, u64), P::Error> {
        match self.table.0.remove(&id) {
            Some(Waiting::Request(e)) => {
                if let Some(g) = e.group {
                    self.member_done(g);
                }
                let cost = e.cost;
                self.finish(shared, id, e, result);
                Ok((1, cost))
            }
            Some(Waiting::Group { .. }) => {
                // Refused whole (or answered as one request): none of its
                // members ran.
                let members: Vec<u64> = self
                    .table
                    .0
                    .iter()
                    .filter(|(_, w)| matches!(w, Waiting::Request(e) if e.group == Some(id)))
                    .map(|(m, _)| *m)
                    .collect();
                let (mut n, mut cost) = (0, 0);
                for m in members {
                    if let Some(Waiting::Request(e)) = self.table.0.remove(&m) {
                        n += 1;
                        cost += e.cost;
                        let error = shared.proto.group_failed(&e.ticket, &result);
                        if let Notify::Caller(w) = e.notify {
                            let _ = w.send(Err(error));
                        }
                    }
                }
                Ok((n, cost))
            }
            Some(Waiting::Fused { members }) => self.complete_fused(shared, &members, result),
            None => Err(shared
                .proto
                .violation(format!("a reply to request {id}, which is not in flight"))),
        }
    }

    /// Completes the members of a fused request (in order) from its one
    /// reply: each its own part, or each the refusal.
    fn complete_fused(
        &mut self,
        shared: &Shared<P>,
        members: &[u64],
        result: Result<P::Raw, P::Refusal>,
    ) -> Result<(usize, u64), P::Error> {
        let mut entries = Vec::with_capacity(members.len());
        for m in members {
            match self.table.0.remove(m) {
                Some(Waiting::Request(e)) => entries.push((*m, e)),
                // Only a reconnect takes members out unanswered, and it
                // takes the fused request with them.
                _ => {
                    return Err(shared
                        .proto
                        .violation(format!("a reply to fused request of {m}, which is gone")))
                }
            }
        }
        let cost = entries.iter().map(|(_, e)| e.cost).sum();
        let n = entries.len();
        match result {
            Ok(raw) => {
                let tickets: Vec<&P::Ticket> = entries.iter().map(|(_, e)| &e.ticket).collect();
                let parts = shared.proto.split(raw, &tickets)?;
                for ((id, e), part) in entries.into_iter().zip(parts) {
                    self.finish(shared, id, e, Ok(part));
                }
            }
            Err(refusal) => {
                let result = Err(refusal);
                for (_, e) in entries {
                    let error = shared.proto.group_failed(&e.ticket, &result);
                    if let Notify::Caller(w) = e.notify {
                        let _ = w.send(Err(error));
                    }
                }
            }
        }
        Ok((n, cost))
    }

    fn member_done(&mut self, group: u64) {
        if let Some(Waiting::Group { left }) = self.table.0.get_mut(&group) {
            *left -= 1;
            if *left == 0 {
                self.table.0.remove(&group);
            }
        }
    }

    /// Logs a completed change, and hands the outcome to its caller.
    fn finish(
        &mut self,
        shared: &Shared<P>,
        id: u64,
        mut e: Entry<P>,
        result: Result<P::Raw, P::Refusal>,
    ) {
        if result.is_ok() && self.logging {
            match shared.proto.logged(&e.ticket) {
                Logged::Change => {
                    if let Some(bytes) = e.bytes.take() {
                        let seq = self.log.push((id, shared.proto.record(&e.ticket)), bytes);
                        shared.logged.store(seq, Ordering::Release);
                    }
                }
                Logged::Flush => self.log.flushed(e.covers),
                Logged::Nothing => {}
            }
        }
        if matches!(e.notify, Notify::Internal) {
            self.flush_asked = false;
        }
        let outcome = shared.proto.finish(e.ticket, result);
        if let Notify::Caller(w) = e.notify {
            let _ = w.send(outcome);
        }
    }

    /// Fails requests whose deadline passed; their replies are dropped
    /// when they come.
    fn expire(&mut self, shared: &Shared<P>) {
        let Some(after) = shared.options.request_timeout else {
            return;
        };
        let now = Instant::now();
        for w in self.table.0.values_mut() {
            let Waiting::Request(e) = w else {
                continue;
            };
            if e.deadline.is_some_and(|d| d <= now) && matches!(e.notify, Notify::Caller(_)) {
                shared.proto.abandon(&mut e.ticket);
                if let Notify::Caller(w) = std::mem::replace(&mut e.notify, Notify::Abandoned) {
                    let _ = w.send(Err(shared.proto.timed_out(&e.ticket, after)));
                }
            }
        }
    }

    /// Gets a connection back within the window, replays the log and
    /// queues again what had no reply.
    fn reconnect(&mut self, shared: &Shared<P>, lost: P::Error) -> Result<(), P::Error> {
        {
            let mut st = lock(&shared.state);
            if matches!(st.connected, Connected::Up) {
                st.connected = Connected::Reconnecting;
            }
        }
        self.stream.shutdown();
        let window = shared.options.reconnect.window;
        let began = Instant::now();
        let deadline = began + window;
        let mut backoff = Duration::from_millis(20);
        let mut last = lost;
        let mut attempts = 0u32;
        loop {
            self.register(shared);
            self.expire(shared);
            if shared.stopping.load(Ordering::Acquire) {
                return Err(shared.proto.closed());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(shared.proto.reconnect_failed(window, last));
            }
            attempts += 1;
            let timeout = shared
                .options
                .connect_timeout
                .min(attempt_limit(window))
                .min(deadline - now);
            let attempt = shared
                .proto
                .reopen(timeout)
                .and_then(|stream| self.replay(shared, stream));
            match attempt {
                Ok(stream) => match self.resume(shared, stream) {
                    Ok(()) => {
                        info!(
                            attempts,
                            replayed = self.log.len(),
                            after_ms = began.elapsed().as_millis() as u64,
                            "reconnected"
                        );
                        return Ok(());
                    }
                    Err(e) => last = e,
                },
                Err(e) if shared.proto.is_final(&e) => return Err(e),
                Err(e) => last = e,
            }
            self.note_refused(shared, &last);
            debug!(
                error = &last as &dyn std::error::Error,
                "reconnect attempt failed"
            );
            std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// After a failed reconnect attempt: if it was refused and the
    /// client does not hold requests for a server that refuses
    /// ([`Reconnect::fail_when_refused`](super::Reconnect)), fails every
    /// request waiting (as a timeout does: not sent again after a
    /// reconnect) and, until the next attempt, every new one.
    fn note_refused(&mut self, shared: &Shared<P>, last: &P::Error) {
        if !shared.options.reconnect.fail_when_refused {
            return;
        }
        let refused = shared.proto.refused(last);
        let mut st = lock(&shared.state);
        self.register(shared);
        st.refused = refused;
        let Some(error) = &st.refused else {
            return;
        };
        for w in self.table.0.values_mut() {
            let Waiting::Request(e) = w else {
                continue;
            };
            if matches!(e.notify, Notify::Caller(_)) {
                shared.proto.abandon(&mut e.ticket);
                if let Notify::Caller(w) = std::mem::replace(&mut e.notify, Notify::Abandoned) {
                    let _ = w.send(Err(shared.proto.copy_error(error)));
                }
            }
        }
    }

    /// Sends every logged change again, one at a time, each after the
    /// last one's reply.
    fn replay(&self, shared: &Shared<P>, mut stream: Stream) -> Result<Stream, P::Error> {
        let proto = &shared.proto;
        let mut inbuf = RecvBuf::new();
        let mut parser = proto.parser();
        for ((id, record), bytes) in self.log.requests() {
            stream.write_all(bytes).map_err(|e| proto.io_error(e))?;
            let ticket = proto.replay_ticket(record);
            proto.registered(&mut parser, *id, &ticket);
            let mut ticket = Some(ticket);
            loop {
                match proto.next(&mut parser, &mut inbuf, &mut ReplayTickets(&mut ticket))? {
                    Next::Need(n) => {
                        inbuf.reserve(n);
                        if !inbuf.fill(&mut stream).map_err(|e| proto.io_error(e))? {
                            return Err(proto.closed());
                        }
                    }
                    Next::More => {}
                    Next::Done { result, .. } => {
                        let Some(t) = ticket.take() else {
                            return Err(proto.closed());
                        };
                        proto.finish(t, result)?;
                        break;
                    }
                }
            }
        }
        Ok(stream)
    }

    /// Puts the new connection in place and queues again every request
    /// still waiting (those not yet written, and those that may run
    /// twice), with senders held off until then.
    fn resume(&mut self, shared: &Shared<P>, stream: Stream) -> Result<(), P::Error> {
        let proto = &shared.proto;
        let reader = reader_half(&stream, &shared.options).map_err(|e| proto.io_error(e))?;
        let closer = stream.try_clone().map_err(|e| proto.io_error(e))?;
        let mut st = lock(&shared.state);
        self.register(shared);
        let mut parser = proto.parser();
        let unsent: HashSet<u64> = st.queue.iter().map(|q| q.id).collect();
        st.queue.clear();
        let mut ids: Vec<u64> = self.table.0.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(Waiting::Request(e)) = self.table.0.get_mut(&id) else {
                // Groups form again as the queue goes out.
                self.table.0.remove(&id);
                continue;
            };
            e.group = None;
            let again = unsent.contains(&id) || proto.resendable(&e.ticket);
            match (&e.notify, &e.bytes) {
                (Notify::Abandoned, _) | (_, None) => {
                    self.table.0.remove(&id);
                }
                (_, Some(bytes)) if again => {
                    proto.registered(&mut parser, id, &e.ticket);
                    st.queue.push_back(Queued {
                        id,
                        frame: bytes.clone(),
                        cost: e.cost,
                    });
                }
                _ => {
                    if let Some(Waiting::Request(e)) = self.table.0.remove(&id) {
                        let error = proto.lost_in_flight(&e.ticket);
                        if let Notify::Caller(w) = e.notify {
                            let _ = w.send(Err(error));
                        }
                    }
                }
            }
        }
        st.in_flight = 0;
        st.cost = 0;
        st.generation += 1;
        {
            let mut sock = lock(&shared.socket);
            sock.stream = stream;
            sock.generation = st.generation;
        }
        *lock(&shared.closer) = closer;
        st.connected = Connected::Up;
        st.refused = None;
        self.stream = reader;
        self.inbuf.clear();
        self.parser = parser;
        shared.pump(st);
        Ok(())
    }

    /// Fails every request waiting or registered, and new ones from now.
    fn fail_all(&mut self, shared: &Shared<P>, error: P::Error) {
        let mut st = lock(&shared.state);
        self.register(shared);
        for (_, w) in self.table.0.drain() {
            if let Waiting::Request(Entry {
                notify: Notify::Caller(w),
                ..
            }) = w
            {
                let _ = w.send(Err(shared.proto.copy_error(&error)));
            }
        }
        st.queue.clear();
        st.refused = None;
        st.connected = Connected::Failed(error);
        drop(st);
        lock(&shared.closer).shutdown();
    }
}

/// The one ticket of a replayed change, whatever id its reply carries.
struct ReplayTickets<'a, T>(&'a mut Option<T>);

impl<T> Tickets<T> for ReplayTickets<'_, T> {
    fn get(&mut self, _id: u64) -> Option<&mut T> {
        self.0.as_mut()
    }
}

/// The most one reconnect attempt may take within `window` (see
/// [`Reconnect::window`](super::Reconnect)).
fn attempt_limit(window: Duration) -> Duration {
    (window / 4).max(Duration::from_secs(1))
}
