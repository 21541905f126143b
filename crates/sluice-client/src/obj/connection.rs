//! One object-protocol connection driven from one thread: encode wire
//! requests, keep several in flight, and match replies (which come in
//! completion order) to their requests by id.
//!
//! In-flight work is bounded by a window of bytes (requests sent plus
//! replies expected) and a count, so the client never writes so far ahead
//! that the server, whose own in-flight limit stops it reading, waits on
//! replies the client is not reading yet.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::time::{Duration, Instant};

use sluice_obj_proto::consts::REPLY_HEADER_LEN;
use sluice_obj_proto::{
    Command, Ddt, ErrorCode, Negotiated, ReplyHeader, Request, RequestHeader, Segment,
};

use super::error::Subject;
use super::merge::{MergeController, MergePolicy};
use super::wire::{cost, reply_len, take_reply, Front, RawReply, Received, Wire, WINDOW_BYTES};
use super::ObjError;
use crate::net::recv::RecvBuf;
use crate::net::transport::Stream;

/// Reply bodies this large are received straight into their own buffer
/// (see [`Connection::receive_large`]); smaller ones come many to a read.
const DIRECT_BODY: u64 = 64 * 1024;
/// Request data this large is written from the caller's buffer (see
/// [`Connection::queue`]); smaller data is copied into the send buffer, to go
/// out with the requests around it in one write.
const DIRECT_DATA: usize = 64 * 1024;
/// Most bytes of buffers handed back ([`Connection::recycle`]) kept for the
/// next large bodies: four windows' worth of replies (a caller that
/// pipelines many reads holds their results until the last arrives).
const SPARE_BYTES: usize = 4 * WINDOW_BYTES as usize;

/// Where a span reply's bytes go, in the order they arrive: each
/// segment's part of `body` (segments ascend, so their places in the list
/// follow each other), with the hole before it, if any, in `holes`.
fn span_places<'b>(
    ddt: &Ddt<'_>,
    span: Segment,
    body: &'b mut [u8],
    holes: &'b mut [u8],
) -> Vec<IoSliceMut<'b>> {
    let mut places = Vec::with_capacity(2 * ddt.segment_count() as usize);
    let (mut body, mut holes) = (body, holes);
    let mut at = span.offset;
    for s in ddt.segments() {
        let gap = (s.offset - at) as usize;
        if gap > 0 {
            let (hole, rest) = std::mem::take(&mut holes).split_at_mut(gap);
            places.push(IoSliceMut::new(hole));
            holes = rest;
        }
        let (piece, rest) = std::mem::take(&mut body).split_at_mut(s.length as usize);
        places.push(IoSliceMut::new(piece));
        body = rest;
        at = s.offset + s.length;
    }
    places
}

/// What waits for a reply, by request id.
enum Pending {
    /// A request: its wire's index in the exchange and its weight in
    /// the window.
    Wire { index: usize, cost: u64 },
    /// A batch frame, answered only if it is refused whole (then none of
    /// its members ran).
    Frame { members: Vec<usize> },
}

/// Requests in flight during one exchange.
#[derive(Default)]
struct InFlight {
    by_id: HashMap<u64, Pending>,
    /// Requests (not frames) waiting.
    count: usize,
    /// Their weight in the window.
    cost: u64,
}

impl InFlight {
    fn add(&mut self, id: u64, index: usize, cost: u64) {
        self.by_id.insert(id, Pending::Wire { index, cost });
        self.count += 1;
        self.cost += cost;
    }

    fn take(&mut self, id: u64) -> Option<Pending> {
        let p = self.by_id.remove(&id)?;
        if let Pending::Wire { cost, .. } = p {
            self.count -= 1;
            self.cost -= cost;
        }
        Some(p)
    }

    /// Drops the request for wire `index` (its frame was refused).
    fn forget(&mut self, index: usize) {
        let id = self.by_id.iter().find_map(|(id, p)| match p {
            Pending::Wire { index: i, .. } if *i == index => Some(*id),
            _ => None,
        });
        if let Some(id) = id {
            self.take(id);
        }
    }

    /// The subject of the oldest request still waiting.
    fn oldest(&self) -> Option<usize> {
        self.by_id
            .iter()
            .filter_map(|(id, p)| match p {
                Pending::Wire { index, .. } => Some((*id, *index)),
                Pending::Frame { .. } => None,
            })
            .min()
            .map(|(_, index)| index)
    }
}

/// A negotiated connection.
pub(crate) struct Connection {
    stream: Stream,
    pub(crate) server: String,
    pub(crate) session: Negotiated,
    request_timeout: Option<Duration>,
    next_id: u64,
    out: Vec<u8>,
    inbuf: RecvBuf,
    /// Set when the connection failed; every later exchange fails so.
    broken: Option<ObjError>,
    /// When requests waiting to be sent go in batch frames.
    merge: MergeController,
    /// Buffers handed back for large bodies to be received into (see
    /// [`recycle`](Self::recycle)), and their bytes of capacity.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// The last reply was received straight into its own buffer: the
    /// next is likely large too, so only its header is read into the
    /// receive buffer (its body would be copied out of there).
    after_large: bool,
    /// A write of large data that failed in [`queue`](Self::queue), for
    /// the next [`send`](Self::send) to report.
    send_failed: Option<ObjError>,
}

impl Connection {
    pub(crate) fn new(
        stream: Stream,
        server: String,
        session: Negotiated,
        request_timeout: Option<Duration>,
        merge: MergePolicy,
    ) -> Self {
        let batches = session.features.contains(sluice_obj_proto::Features::BATCH);
        Self {
            merge: MergeController::new(merge, batches),
            stream,
            server,
            session,
            request_timeout,
            next_id: 1,
            out: Vec::with_capacity(64 * 1024),
            inbuf: RecvBuf::new(),
            broken: None,
            spare: Vec::new(),
            spare_bytes: 0,
            after_large: false,
            send_failed: None,
        }
    }

    /// Keeps `buf` (a large read's data, done with) for a later large
    /// body to be received into: no allocation, no page faults on fresh
    /// memory and no zero-filling for that body. Buffers too small to be
    /// used, or past [`SPARE_BYTES`] in all, are dropped.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        let bytes = buf.capacity();
        if (bytes as u64) < DIRECT_BODY || self.spare_bytes + bytes > SPARE_BYTES {
            return;
        }
        self.spare_bytes += bytes;
        self.spare.push(buf);
    }

    /// A buffer of exactly `len` bytes for a body that will overwrite
    /// all of them: a spare one if there is one (its old bytes are left
    /// in place, not zeroed), else a new one.
    fn body_buffer(&mut self, len: usize) -> Vec<u8> {
        match self.spare.pop() {
            Some(mut buf) => {
                self.spare_bytes -= buf.capacity();
                if buf.len() >= len {
                    buf.truncate(len);
                } else {
                    buf.resize(len, 0);
                }
                buf
            }
            None => vec![0u8; len],
        }
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    /// Sends every wire (at most `max_in_flight` at once, within the byte
    /// window; members of batch frames when `batch`, else when the merge
    /// policy says so), and returns each one's outcome by position.
    pub(crate) fn exchange(
        &mut self,
        wires: &[Wire<'_>],
        batch: bool,
        max_in_flight: usize,
    ) -> Vec<Result<RawReply, ObjError>> {
        let mut results: Vec<Option<Result<RawReply, ObjError>>> =
            std::iter::repeat_with(|| None).take(wires.len()).collect();
        if let Some(e) = &self.broken {
            return (0..wires.len()).map(|_| Err(e.for_another())).collect();
        }
        let mut flight = InFlight::default();
        let mut next = 0;
        let max_in_flight = max_in_flight.max(1);
        while next < wires.len() || flight.count > 0 {
            // Queue as much as the window allows (always something when
            // nothing is in flight).
            while next < wires.len()
                && flight.count < max_in_flight
                && (flight.count == 0 || flight.cost + cost(&wires[next]) <= WINDOW_BYTES)
            {
                if batch || self.merge.should_merge(flight.count, wires.len() - next) {
                    // A merge stays under the in-flight count; an explicit
                    // batch fills its frames as before.
                    let room = if batch {
                        usize::MAX
                    } else {
                        max_in_flight - flight.count
                    };
                    next = self.queue_frame(wires, next, room, &mut flight);
                } else {
                    let id = self.queue(&wires[next]);
                    flight.add(id, next, cost(&wires[next]));
                    next += 1;
                }
            }
            // While a whole reply waits in the receive buffer, taking it
            // costs no read: the requests its answer lets out are queued
            // first and go with those of the replies after it, in one
            // write, rather than one write (and one server receive) per
            // reply.
            if !self.reply_waiting() {
                if let Err(e) = self.send() {
                    self.fail(e, &mut results);
                    break;
                }
            }
            if flight.count == 0 {
                // Only frame ids are left: every member was answered, so
                // no frame was refused.
                flight.by_id.clear();
                continue;
            }
            let (id, reply) = match self.receive(wires, &flight) {
                Ok(r) => r,
                Err(e) => {
                    self.fail(e, &mut results);
                    break;
                }
            };
            let refusal =
                |subject: &Subject, (code, message): &(ErrorCode, String)| ObjError::Server {
                    server: self.server.clone(),
                    subject: subject.clone(),
                    code: *code,
                    message: message.clone(),
                };
            match flight.take(id) {
                Some(Pending::Wire { index, .. }) => {
                    self.merge
                        .completed(Instant::now(), flight.count + wires.len() - next);
                    results[index] = Some(reply.map_err(|r| refusal(&wires[index].subject, &r)));
                }
                Some(Pending::Frame { members }) => {
                    // Refused whole: none of its members ran.
                    for i in members {
                        flight.forget(i);
                        results[i] = Some(Err(match &reply {
                            Ok(_) => ObjError::Violation {
                                server: self.server.clone(),
                                reason: "a batch frame was answered as a request".into(),
                            },
                            Err(r) => refusal(&wires[i].subject, r),
                        }));
                    }
                }
                None => {
                    let e = ObjError::Violation {
                        server: self.server.clone(),
                        reason: format!("a reply to request {id}, which is not in flight"),
                    };
                    self.fail(e, &mut results);
                    break;
                }
            }
        }
        let server = self.server.clone();
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(ObjError::Closed {
                        server: server.clone(),
                    })
                })
            })
            .collect()
    }

    /// Encodes one request with a fresh id; returns the id. Large data
    /// is not copied: what is queued goes out at once, then the data from
    /// the caller's buffers, in one vectored write (a failure to send is kept for [`send`](Self::send)
    /// to report).
    fn queue(&mut self, wire: &Wire<'_>) -> u64 {
        let id = self.fresh_id();
        if wire.data.len() < DIRECT_DATA {
            wire.encode(id, self.session.partition, &mut self.out);
            return id;
        }
        wire.encode_head(id, self.session.partition, &mut self.out);
        if self.send_failed.is_none() {
            if let Err(source) = self.stream.write_all_gather(&self.out, wire.data.slices()) {
                self.send_failed = Some(ObjError::Io {
                    server: self.server.clone(),
                    source,
                });
            }
        }
        self.out.clear();
        id
    }

    /// Encodes a batch frame of the wires from `first` while they fit one
    /// frame (payload and member count), the window and the `room` left
    /// under the in-flight count; returns the index after the last
    /// member. A single member (or one too large for any frame) goes as
    /// a plain request.
    fn queue_frame(
        &mut self,
        wires: &[Wire<'_>],
        first: usize,
        room: usize,
        flight: &mut InFlight,
    ) -> usize {
        let limits = self.session.limits;
        let mut end = first;
        let mut body = 0u64;
        let mut frame_cost = 0u64;
        while let Some(w) = wires.get(end) {
            let fits = body + w.frame_len() <= u64::from(limits.max_payload)
                && ((end - first) as u32) < limits.max_batch
                && end - first < room
                && flight.cost + frame_cost + cost(w) <= WINDOW_BYTES;
            if !fits && end > first {
                break;
            }
            body += w.frame_len();
            frame_cost += cost(w);
            end += 1;
            if !fits {
                break;
            }
        }
        if end - first == 1 {
            let id = self.queue(&wires[first]);
            flight.add(id, first, cost(&wires[first]));
            return end;
        }
        let frame_id = self.fresh_id();
        RequestHeader::batch(frame_id, self.session.partition, body as u32).encode(&mut self.out);
        for (i, w) in wires.iter().enumerate().take(end).skip(first) {
            let id = self.queue(w);
            flight.add(id, i, cost(w));
        }
        flight.by_id.insert(
            frame_id,
            Pending::Frame {
                members: (first..end).collect(),
            },
        );
        end
    }

    /// Marks the link broken and fails every wire without an outcome.
    fn fail(&mut self, e: ObjError, results: &mut [Option<Result<RawReply, ObjError>>]) {
        for r in results.iter_mut().filter(|r| r.is_none()) {
            *r = Some(Err(e.for_another()));
        }
        self.stream.shutdown();
        self.broken = Some(e);
    }

    fn send(&mut self) -> Result<(), ObjError> {
        if let Some(e) = self.send_failed.take() {
            self.out.clear();
            return Err(e);
        }
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.out);
        self.out.clear();
        r.map_err(|source| ObjError::Io {
            server: self.server.clone(),
            source,
        })
    }

    /// Whether a whole reply is in the receive buffer (the next
    /// [`receive`](Self::receive) takes it without reading).
    fn reply_waiting(&self) -> bool {
        let data = self.inbuf.data();
        matches!(
            ReplyHeader::decode(data),
            Ok(Some(h)) if data.len() >= reply_len(&h)
        )
    }

    /// Waits for the next reply; `Err((code, message))` inside is the
    /// server's refusal of that request.
    fn receive(&mut self, wires: &[Wire<'_>], flight: &InFlight) -> Result<Received, ObjError> {
        loop {
            let mut max = usize::MAX;
            match take_reply(&mut self.inbuf, &self.session.limits, &self.server)? {
                Front::Reply((id, Ok(raw))) if raw.span => {
                    self.after_large = false;
                    let ddt = self.span_request(id, wires, flight)?;
                    let body = ddt.gather_span(&raw.body).ok_or_else(|| {
                        self.violation(format!(
                            "span reply {id} carries {} bytes, not its segments' span",
                            raw.body.len()
                        ))
                    })?;
                    return Ok((
                        id,
                        Ok(RawReply {
                            body,
                            span: false,
                            ..raw
                        }),
                    ));
                }
                Front::Reply(r) => {
                    self.after_large = false;
                    return Ok(r);
                }
                Front::Short(None) => {
                    if self.after_large {
                        max = REPLY_HEADER_LEN - self.inbuf.data().len();
                    }
                }
                Front::Short(Some(h)) => {
                    if h.status.is_none() && u64::from(h.body_len) >= DIRECT_BODY {
                        self.after_large = true;
                        return self.receive_large(&h, wires, flight);
                    }
                    self.inbuf.reserve(reply_len(&h));
                }
            }
            match self.inbuf.fill_at_most(&mut self.stream, max) {
                Ok(true) => {}
                Ok(false) => return Err(self.closed()),
                Err(e) => return Err(self.read_failed(e, wires, flight)),
            }
        }
    }

    /// The DDT of the request a span reply `id` answers, which must be a
    /// READ that asked for one.
    fn span_request<'w>(
        &self,
        id: u64,
        wires: &'w [Wire<'_>],
        flight: &InFlight,
    ) -> Result<Ddt<'w>, ObjError> {
        match flight.by_id.get(&id) {
            Some(Pending::Wire { index, .. }) => {
                wires[*index].span_ddt(&self.session.limits).ok_or_else(|| {
                    self.violation(format!(
                        "span reply to request {id}, which did not ask for one"
                    ))
                })
            }
            _ => Err(self.violation(format!(
                "span reply to request {id}, which is not a read in flight"
            ))),
        }
    }

    fn violation(&self, reason: String) -> ObjError {
        ObjError::Violation {
            server: self.server.clone(),
            reason,
        }
    }

    /// Receives a successful reply with a large body straight from the
    /// socket into the body's own buffer (the caller gets that buffer),
    /// rather than into the receive buffer and then copied out. Only
    /// part of the reply is in the receive buffer, so no later reply is.
    /// A span reply's segments land in their places in list order and
    /// its holes in a scratch buffer, read with the same calls (`readv`).
    fn receive_large(
        &mut self,
        h: &ReplyHeader,
        wires: &[Wire<'_>],
        flight: &InFlight,
    ) -> Result<Received, ObjError> {
        let ddt = if h.span {
            Some(self.span_request(h.id, wires, flight)?)
        } else {
            None
        };
        let span = ddt.as_ref().map(|d| (d.span(), d.total()));
        let (span, total) = match span {
            None => (None, u64::from(h.body_len)),
            Some((Some(s), total)) if s.length == u64::from(h.body_len) => (Some(s), total),
            Some(_) => {
                return Err(self.violation(format!(
                    "span reply {} carries {} bytes, not its segments' span",
                    h.id, h.body_len
                )))
            }
        };
        let mut attrs = vec![0u8; h.attr_len as usize];
        // Every byte of both is read into below, or they are dropped.
        let mut body = self.body_buffer(total as usize);
        let mut holes = vec![0u8; span.map_or(0, |s| (s.length - total) as usize)];
        let mut places = match (&ddt, span) {
            (Some(ddt), Some(span)) => span_places(ddt, span, &mut body, &mut holes),
            _ => vec![IoSliceMut::new(&mut body)],
        };
        let have = &self.inbuf.data()[REPLY_HEADER_LEN..];
        let in_attrs = have.len().min(attrs.len());
        attrs[..in_attrs].copy_from_slice(&have[..in_attrs]);
        let mut have = &have[in_attrs..];
        let mut first = 0;
        while !have.is_empty() {
            let place = &mut places[first];
            let n = place.len().min(have.len());
            place[..n].copy_from_slice(&have[..n]);
            have = &have[n..];
            if n == place.len() {
                first += 1;
            } else {
                place.advance(n);
            }
        }
        self.inbuf.clear();
        self.read_exact(&mut attrs[in_attrs..], wires, flight)?;
        self.read_places(&mut places[first..], wires, flight)?;
        drop(places);
        Ok((
            h.id,
            Ok(RawReply {
                real_bytes: h.real_bytes,
                attrs,
                body,
                span: false,
            }),
        ))
    }

    /// Fills every buffer of `places` in order from the socket.
    fn read_places(
        &mut self,
        mut places: &mut [IoSliceMut<'_>],
        wires: &[Wire<'_>],
        flight: &InFlight,
    ) -> Result<(), ObjError> {
        while !places.is_empty() {
            match self.stream.read_vectored(places) {
                Ok(0) => return Err(self.closed()),
                Ok(n) => IoSliceMut::advance_slices(&mut places, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_failed(e, wires, flight)),
            }
        }
        Ok(())
    }

    fn read_exact(
        &mut self,
        mut into: &mut [u8],
        wires: &[Wire<'_>],
        flight: &InFlight,
    ) -> Result<(), ObjError> {
        while !into.is_empty() {
            match self.stream.read(into) {
                Ok(0) => return Err(self.closed()),
                Ok(n) => into = &mut into[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.read_failed(e, wires, flight)),
            }
        }
        Ok(())
    }

    fn closed(&self) -> ObjError {
        ObjError::Closed {
            server: self.server.clone(),
        }
    }

    /// The error for a failed receive: a timeout names the oldest request
    /// still waiting.
    fn read_failed(&self, e: io::Error, wires: &[Wire<'_>], flight: &InFlight) -> ObjError {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            let oldest = flight.oldest().map(|i| wires[i].subject.clone());
            return match oldest {
                Some(subject) => ObjError::Timeout {
                    server: self.server.clone(),
                    subject,
                    after: self.request_timeout.unwrap_or_default(),
                },
                None => self.closed(),
            };
        }
        ObjError::Io {
            server: self.server.clone(),
            source: e,
        }
    }

    /// Says goodbye (DISCONNECT has no reply) and closes.
    pub(crate) fn disconnect(&mut self) {
        if self.broken.is_none() {
            let id = self.fresh_id();
            let bye = Request::new(id, Command::Disconnect);
            if bye.encode(self.session.partition, &mut self.out).is_ok() {
                let _ = self.send();
            }
        }
        self.stream.shutdown();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::{Read, Write};

    use crate::Durability;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;

    use sluice_obj_proto::consts::{FLAG_SPAN_OK, REQUEST_HEADER_LEN};
    use sluice_obj_proto::{DdtKind, Features, Limits, Opcode};

    use super::*;
    use crate::net::transport::Socket;
    use crate::obj::codec::Codec;
    use crate::obj::error::Addressee;

    /// A connected pair of Unix sockets that keep message boundaries
    /// (`SOCK_SEQPACKET`): each read on one end returns exactly what one
    /// write on the other sent, so the test sees how the link wrote.
    fn packet_pair() -> (UnixStream, UnixStream) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair
        // writes; on success both are open and owned by nothing else, so
        // each is given to one `OwnedFd`.
        let rc =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(rc, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: as above, each descriptor is open and owned once.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        (UnixStream::from(a), UnixStream::from(b))
    }

    fn session() -> Negotiated {
        Negotiated {
            version: 1,
            features: Features(0),
            limits: Limits {
                max_segments: 1024,
                max_payload: 1 << 20,
                max_batch: 64,
                max_attr_size: 65536,
            },
            partition: 1,
            tls: false,
            exports: Vec::new(),
        }
    }

    /// The ids of the request frames in one packet.
    fn request_ids(packet: &[u8]) -> Vec<u64> {
        let mut ids = Vec::new();
        let mut rest = packet;
        while let Some(h) = RequestHeader::decode(rest).unwrap() {
            ids.push(h.id);
            let len = REQUEST_HEADER_LEN + h.payload_len() as usize;
            rest = &rest[len..];
        }
        assert!(rest.is_empty(), "whole frames only");
        ids
    }

    /// Replies that arrive together free their requests' places in the
    /// window; the requests that fill them go out in one write, not one
    /// write per reply.
    #[test]
    fn requests_freed_by_replies_read_together_go_out_in_one_write() {
        let (client_end, mut server) = packet_pair();
        let mut connection = Connection::new(
            Stream::plain(Socket::Unix(client_end)),
            "test".into(),
            session(),
            Some(Duration::from_secs(10)),
            MergePolicy::Off,
        );
        let wires: Vec<Wire<'_>> = (0..8)
            .map(|o| {
                let request = Request::new(0, Command::Remove { object: o });
                let subject = Subject {
                    op: Opcode::Remove,
                    target: Addressee::Object(o),
                };
                Wire::new(subject, &request, Default::default()).unwrap()
            })
            .collect();
        let fake = std::thread::spawn(move || {
            let mut packets = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            // Answers every request of a packet with one packet of
            // replies, until eight were answered.
            let mut answered = 0;
            while answered < 8 {
                let n = server.read(&mut buf).unwrap();
                let ids = request_ids(&buf[..n]);
                let mut replies = Vec::new();
                for &id in &ids {
                    ReplyHeader::ok(id, 0, 0, 0).encode(&mut replies);
                }
                answered += ids.len();
                packets.push(ids);
                server.write_all(&replies).unwrap();
            }
            packets
        });
        let results = connection.exchange(&wires, false, 4);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let packets = fake.join().unwrap();
        assert_eq!(
            packets.iter().map(Vec::len).collect::<Vec<_>>(),
            [4, 4],
            "four requests, then the four that the four replies let out, each in one write: {packets:?}"
        );
    }

    /// The byte an object holds at `at` in the span tests.
    fn object_byte(at: u64) -> u8 {
        (at * 7 % 251) as u8
    }

    /// Reads one request frame: its header and payload.
    fn read_request(s: &mut UnixStream) -> (RequestHeader, Vec<u8>) {
        let mut h = [0u8; REQUEST_HEADER_LEN];
        s.read_exact(&mut h).unwrap();
        let h = RequestHeader::decode(&h).unwrap().unwrap();
        let mut payload = vec![0u8; h.payload_len() as usize];
        s.read_exact(&mut payload).unwrap();
        (h, payload)
    }

    fn read_wire<'a>(codec: &Codec<'_>, object: u64, segments: &[Segment]) -> Wire<'a> {
        codec
            .data_wire(
                Subject {
                    op: Opcode::Read,
                    target: Addressee::Object(object),
                },
                super::super::codec::data_command(Opcode::Read, object),
                segments,
                &[],
                Default::default(),
                Durability::Buffered,
            )
            .unwrap()
    }

    /// An SGL goes at its lowest segment's offset, its entries relative
    /// to it, only when the session negotiated `SGL_MASTER`; either way
    /// it describes the same bytes.
    #[test]
    fn an_sgl_carries_a_master_offset_only_when_negotiated() {
        let list = [
            Segment {
                offset: 9000,
                length: 3,
            },
            Segment {
                offset: 8192,
                length: 5,
            },
        ];
        for (features, master) in [(Features(0), 0), (Features::SGL_MASTER, 8192)] {
            let mut session = session();
            session.features = features;
            let codec = Codec {
                session: &session,
                server: "test",
                ddt: None,
                spans: false,
            };
            let wire = read_wire(&codec, 1, &list);
            assert_eq!(wire.header.offset, master, "{features:?}");
            let raw = &wire.regions[..wire.header.ddt_len as usize];
            let ddt = Ddt::parse(
                DdtKind::Sgl,
                wire.header.offset,
                wire.header.length,
                raw,
                &session.limits,
            )
            .unwrap();
            assert_eq!(ddt.segments().collect::<Vec<_>>(), list);
        }
    }

    /// A span reply, small (read whole into the receive buffer and
    /// gathered) or large (its header and first bytes in the receive
    /// buffer, the rest read straight into place), gives the segments'
    /// bytes in list order; a span the request did not ask for breaks
    /// the connection as a violation.
    #[test]
    fn span_replies_land_in_list_order_and_only_when_asked_for() {
        let (client_end, mut server) = UnixStream::pair().unwrap();
        let mut session = session();
        session.features = Features::SPAN_READS;
        let mut connection = Connection::new(
            Stream::plain(Socket::Unix(client_end)),
            "test".into(),
            session.clone(),
            Some(Duration::from_secs(10)),
            MergePolicy::Off,
        );
        let codec = Codec {
            session: &session,
            server: "test",
            ddt: None,
            spans: true,
        };
        let holed = |count: u64, len: u64, from: u64| -> Vec<Segment> {
            (0..count)
                .map(|i| Segment {
                    offset: from + i * (len + 2),
                    length: len,
                })
                // An irregular last hole keeps the small one an SGL.
                .map(|s| Segment {
                    offset: s.offset + u64::from(s.offset > from + 600),
                    ..s
                })
                .collect()
        };
        let small = holed(8, 100, 5);
        let large = holed(64, 4096, 1000);
        let backwards: Vec<Segment> = small.iter().rev().copied().collect();
        let wires = [
            read_wire(&codec, 1, &small),
            read_wire(&codec, 1, &large),
            read_wire(&codec, 1, &backwards),
        ];
        assert!(
            wires[0].header.flags & FLAG_SPAN_OK != 0 && wires[1].header.flags & FLAG_SPAN_OK != 0
        );
        assert_eq!(
            wires[2].header.flags & FLAG_SPAN_OK,
            0,
            "a list out of order has no span"
        );
        let limits = session.limits;
        let fake = std::thread::spawn(move || {
            for _ in 0..3 {
                let (h, payload) = read_request(&mut server);
                let kind = DdtKind::from_flags(h.flags).unwrap();
                let ddt = Ddt::parse(kind, h.offset, h.length, &payload, &limits).unwrap();
                // Every reply is a span, asked for or not (the third
                // request's segments, reversed, span the same range).
                let span = Segment {
                    offset: ddt.segments().map(|s| s.offset).min().unwrap(),
                    length: ddt.end() - ddt.segments().map(|s| s.offset).min().unwrap(),
                };
                let mut reply = Vec::new();
                ReplyHeader::ok(h.id, h.length, 0, span.length as u32)
                    .spanned()
                    .encode(&mut reply);
                reply.extend((span.offset..span.offset + span.length).map(object_byte));
                // The header and a piece of the body first, the rest a
                // little later.
                let cut = reply.len().min(REPLY_HEADER_LEN + 1000);
                server.write_all(&reply[..cut]).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                server.write_all(&reply[cut..]).unwrap();
            }
        });
        let want = |segments: &[Segment]| -> Vec<u8> {
            segments
                .iter()
                .flat_map(|s| (s.offset..s.offset + s.length).map(object_byte))
                .collect()
        };
        let results = connection.exchange(&wires[..2], false, 1);
        let bodies: Vec<Vec<u8>> = results.into_iter().map(|r| r.unwrap().body).collect();
        assert!(bodies[0] == want(&small), "small span out of order");
        assert!(bodies[1] == want(&large), "large span out of order");
        let e = connection
            .exchange(&wires[2..], false, 1)
            .remove(0)
            .unwrap_err();
        assert!(
            matches!(&e, ObjError::Violation { reason, .. } if reason.contains("did not ask")),
            "{e}"
        );
        fake.join().unwrap();
    }
}
