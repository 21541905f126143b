//! Long wires for benchmark links. The kernel's way to add delay to a
//! link, `tc netem`, is not built into every kernel (this project's
//! build machines lack it), so a [`WireRelay`] plays the wire in user
//! space: it listens on the loopback, connects each client it accepts
//! to its target, and passes the bytes each way as a wire of a given
//! rate and length would: each chunk is sent once the chunks before it
//! are, takes its length ÷ rate to send, and arrives the one-way delay
//! after that, in order.
//!
//! The relay, not a `tc tbf` shaper, keeps the rate here: a token
//! bucket refills while a connection waits for a round trip, so the
//! next transfer's first bucketful would leave at the veth's speed and
//! the round trip would be hidden; and a bucket small enough not to do
//! that makes tbf cut every GSO packet into frames, which costs more CPU
//! than two vCPUs have to spare at these rates.
//!
//! Each direction of each connection has a thread that reads what
//! arrives, cuts it into [`CHUNK`]s, gives each its due time, and
//! writes it out when that time comes; between the two it sleeps in
//! `poll(2)` with the time to the next due chunk as its timeout and its
//! timer slack at 1 ns, so a chunk leaves within a wake-up (tens of µs
//! here) of its due time. What the relay adds beyond the wire is
//! therefore a wake-up per hop; a link's round trip and rate are
//! measured through the relay ([`crate::link::Link::measure`]), so the
//! figures a model is given include it.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// The granularity at which bytes arrive: 170 µs at 800 Mbit/s.
pub const CHUNK: usize = 16 << 10;

/// How late a chunk may leave before the chunks behind it are delayed as
/// much: above a wake-up's lateness (tens of µs), so that an unloaded
/// relay keeps its rate, and small enough that a late wake-up cannot
/// pass more than a millisecond's bytes early.
const LATE_SLACK: Duration = Duration::from_millis(1);
/// Bytes one read takes at most. Everything waiting is taken at once
/// (and cut into chunks), so that a relay thread that ran late, as
/// threads do on a busy machine, loses the wire that time once, not
/// once per chunk.
const READ: usize = 4 << 20;

/// What a [`WireRelay`] plays, in each direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wire {
    /// Time from a byte leaving to its arriving.
    pub one_way: Duration,
    /// Bytes per second the wire carries (`None`: as fast as they come).
    pub rate: Option<f64>,
}

/// The connections a relay made: both sockets of each, to shut down on
/// drop, and the threads forwarding them.
#[derive(Default)]
struct Connections {
    sockets: Vec<TcpStream>,
    threads: Vec<JoinHandle<()>>,
}

/// A TCP relay on the loopback that carries every connection to its
/// target over a [`Wire`]. Dropping it closes every connection it made.
pub struct WireRelay {
    addr: SocketAddr,
    target: SocketAddr,
    wire: Wire,
    stop: Arc<AtomicBool>,
    connections: Arc<Mutex<Connections>>,
    acceptor: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WireRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireRelay")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .field("wire", &self.wire)
            .finish()
    }
}

impl WireRelay {
    /// Listens on 127.0.0.1 (any port) and relays each connection to
    /// `target` over `wire`.
    pub fn start(target: SocketAddr, wire: Wire) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .context("cannot listen on the loopback for a wire relay")?;
        let addr = listener
            .local_addr()
            .context("cannot read the wire relay's address")?;
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(Mutex::new(Connections::default()));
        let acceptor = {
            let (stop, connections) = (Arc::clone(&stop), Arc::clone(&connections));
            std::thread::Builder::new()
                .name("wire-relay".into())
                .spawn(move || accept(&listener, target, wire, &stop, &connections))
                .context("cannot start the wire relay's thread")?
        };
        Ok(Self {
            addr,
            target,
            wire,
            stop,
            connections,
            acceptor: Some(acceptor),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for WireRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the acceptor, which then sees the stop.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let mut c = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for s in &c.sockets {
            let _ = s.shutdown(Shutdown::Both);
        }
        for t in c.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Accepts clients until `stop`, each joined to a new connection to
/// `target` by two forwarding threads.
fn accept(
    listener: &TcpListener,
    target: SocketAddr,
    wire: Wire,
    stop: &AtomicBool,
    connections: &Mutex<Connections>,
) {
    for client in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        let joined = (|| -> std::io::Result<()> {
            let server = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
            for s in [&client, &server] {
                s.set_nodelay(true)?;
            }
            let mut c = connections.lock().unwrap_or_else(PoisonError::into_inner);
            c.sockets.push(client.try_clone()?);
            c.sockets.push(server.try_clone()?);
            for (from, to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
                let t = std::thread::Builder::new()
                    .name("wire-relay".into())
                    .spawn(move || {
                        // An error here is a side going away (the run's end
                        // or a failure the client will report): the other
                        // side sees the end.
                        let _ = forward(&from, &to, wire);
                        let _ = to.shutdown(Shutdown::Write);
                    })?;
                c.threads.push(t);
            }
            Ok(())
        })();
        if let Err(e) = joined {
            // The client sees its connection closed.
            eprintln!("wire relay: cannot reach {target}: {e}");
        }
    }
}

/// The chunks on one direction of a wire, each with the time it
/// arrives at the far end.
struct WireQueue {
    wire: Wire,
    chunks: VecDeque<(Instant, Vec<u8>)>,
    /// When the wire has sent everything handed to it so far.
    sent: Instant,
}

impl WireQueue {
    fn new(wire: Wire, now: Instant) -> Self {
        Self {
            wire,
            chunks: VecDeque::new(),
            sent: now,
        }
    }

    /// Hands `bytes`, read at `now`, to the wire: each chunk leaves once
    /// the ones before it have, takes its length ÷ rate to send, and
    /// arrives the one-way delay after that.
    fn push(&mut self, now: Instant, bytes: &[u8]) {
        self.sent = self.sent.max(now);
        for chunk in bytes.chunks(CHUNK) {
            if let Some(rate) = self.wire.rate {
                self.sent += Duration::from_secs_f64(chunk.len() as f64 / rate);
            }
            self.chunks
                .push_back((self.sent + self.wire.one_way, chunk.to_vec()));
        }
    }

    /// When the next chunk arrives, if one is on the wire.
    fn next_due(&self) -> Option<Instant> {
        self.chunks.front().map(|(due, _)| *due)
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The next chunk, if it is due by `now`, the time it is passed on.
    fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_due()? > now {
            return None;
        }
        let (due, bytes) = self.chunks.pop_front()?;
        // A wire never passes bytes faster than its rate: if the relay
        // passes this chunk late (a busy machine woke its thread late),
        // what waits behind it moves back by as much, instead of leaving
        // in a burst that a receiver would take for a faster wire.
        let late = now.saturating_duration_since(due);
        if late > LATE_SLACK {
            for (d, _) in &mut self.chunks {
                *d += late;
            }
            self.sent += late;
        }
        Some(bytes)
    }
}

/// Passes what arrives on `from` to `to` over `wire`, until `from` ends
/// and everything has been passed on.
fn forward(mut from: &TcpStream, mut to: &TcpStream, wire: Wire) -> std::io::Result<()> {
    // The poll timeouts below are the wire's precision; the default
    // slack of 50 µs would add up to that to every chunk.
    rustix::thread::set_current_timer_slack(NonZeroU64::new(1))?;
    let mut queue = WireQueue::new(wire, Instant::now());
    let mut buf = vec![0u8; READ];
    let mut open = true;
    while open || !queue.is_empty() {
        while let Some(bytes) = queue.pop_due(Instant::now()) {
            to.write_all(&bytes)?;
        }
        let wait = queue
            .next_due()
            .map(|due| due.saturating_duration_since(Instant::now()));
        if !open {
            std::thread::sleep(wait.unwrap_or_default());
            continue;
        }
        let timeout = wait.map(|w| Timespec {
            tv_sec: w.as_secs() as i64,
            tv_nsec: i64::from(w.subsec_nanos()),
        });
        let mut fds = [PollFd::new(from, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        // Readable, at its end or failed: the read does not block.
        let n = from.read(&mut buf)?;
        if n == 0 {
            open = false;
        } else {
            queue.push(Instant::now(), &buf[..n]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A wire of 8 MB/s (a [`CHUNK`] in 2.048 ms), 1 ms long.
    fn eight_mb_s() -> Wire {
        Wire {
            one_way: MS,
            rate: Some(8e6),
        }
    }

    /// Within a microsecond (the rate's float rounding).
    fn near(a: Instant, b: Instant) -> bool {
        a.max(b) - a.min(b) < Duration::from_micros(1)
    }

    #[test]
    fn the_queue_sends_at_the_rate_and_delivers_after_the_delay() {
        let t0 = Instant::now();
        let mut q = WireQueue::new(eight_mb_s(), t0);
        let bytes: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        q.push(t0, &bytes);
        let chunk_time = Duration::from_secs_f64(CHUNK as f64 / 8e6);
        let first = q.next_due().unwrap();
        assert!(near(first, t0 + chunk_time + MS));
        // Nothing is due before its time.
        assert!(q.pop_due(first - Duration::from_micros(1)).is_none());
        let mut back = Vec::new();
        let mut last = first;
        while let Some(due) = q.next_due() {
            last = due;
            back.extend(q.pop_due(due).unwrap());
        }
        assert_eq!(back, bytes);
        // 2 MB at 8 MB/s: 250 ms on the wire, then the delay.
        assert!(near(last, t0 + Duration::from_millis(251)));
    }

    #[test]
    fn bytes_read_while_the_wire_is_idle_leave_when_they_arrive() {
        let t0 = Instant::now();
        let mut q = WireQueue::new(eight_mb_s(), t0);
        q.push(t0, &[1; 8]);
        let due = q.next_due().unwrap();
        assert_eq!(q.pop_due(due).unwrap(), [1; 8]);
        let later = t0 + Duration::from_secs(1);
        q.push(later, &[2; 8000]);
        assert!(near(q.next_due().unwrap(), later + MS + MS));
        // A wire without a rate only delays.
        let mut q = WireQueue::new(
            Wire {
                one_way: MS,
                rate: None,
            },
            t0,
        );
        q.push(later, &[3; 100_000]);
        assert_eq!(q.next_due(), Some(later + MS));
    }

    #[test]
    fn a_late_chunk_delays_the_chunks_behind_it_beyond_the_slack() {
        let t0 = Instant::now();
        let mut q = WireQueue::new(eight_mb_s(), t0);
        q.push(t0, &[0; 3 * CHUNK]);
        let second = |q: &WireQueue| q.chunks[1].0;
        // Late within the slack: the schedule stands.
        let (due, next) = (q.next_due().unwrap(), second(&q));
        q.pop_due(due + LATE_SLACK / 2).unwrap();
        assert_eq!(q.next_due(), Some(next));
        // Later than that: what waits moves back by the whole lateness.
        let (due, next) = (q.next_due().unwrap(), second(&q));
        let late = 5 * MS;
        q.pop_due(due + late).unwrap();
        assert_eq!(q.next_due(), Some(next + late));
        // And so do bytes handed to the wire afterwards.
        q.push(due + late, &[0; CHUNK]);
        assert_eq!(q.chunks[1].0, next + late + (next - due));
    }

    proptest::proptest! {
        /// However late the relay passes chunks on, the bytes it passes
        /// in any span never exceed the rate's worth plus a slack's worth.
        #[test]
        fn no_span_passes_more_than_the_rate_allows(
            reads in proptest::collection::vec((1usize..200_000, 0u64..20_000), 1..12),
            lateness_us in proptest::collection::vec(0u64..3_000, 1..400),
        ) {
            let wire = eight_mb_s();
            let t0 = Instant::now();
            let mut q = WireQueue::new(wire, t0);
            let mut now = t0;
            let mut passed: Vec<(Instant, usize)> = Vec::new();
            let mut late = lateness_us.iter().cycle();
            for (len, gap_us) in reads {
                now += Duration::from_micros(gap_us);
                // Chunks due before this read are passed on first.
                while let Some(due) = q.next_due().filter(|d| *d <= now) {
                    let at = due + Duration::from_micros(*late.next().unwrap());
                    let bytes = q.pop_due(at).unwrap();
                    passed.push((at, bytes.len()));
                    now = now.max(at);
                }
                q.push(now, &vec![0; len]);
            }
            while let Some(due) = q.next_due() {
                let at = due + Duration::from_micros(*late.next().unwrap());
                passed.push((at, q.pop_due(at).unwrap().len()));
            }
            let rate = wire.rate.unwrap();
            for i in 0..passed.len() {
                let mut bytes = 0;
                for j in i + 1..passed.len() {
                    bytes += passed[j].1;
                    let span = (passed[j].0 - passed[i].0 + LATE_SLACK).as_secs_f64();
                    proptest::prop_assert!(
                        bytes as f64 <= rate * span + 16.0,
                        "{bytes} bytes in {span} s"
                    );
                }
            }
        }
    }

    /// An echo server on the loopback.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                std::thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let _ = std::io::copy(&mut r, &mut s);
                });
            }
        });
        addr
    }

    fn round_trip(c: &mut TcpStream, bytes: &[u8]) -> Duration {
        let t = Instant::now();
        c.write_all(bytes).unwrap();
        let mut back = vec![0u8; bytes.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, bytes);
        t.elapsed()
    }

    #[test]
    fn every_byte_arrives_in_order_after_the_delay_each_way() {
        let target = echo();
        let one_way = Duration::from_millis(20);
        let wire = Wire {
            one_way,
            rate: None,
        };
        let relay = WireRelay::start(target, wire).unwrap();
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        c.set_nodelay(true).unwrap();
        let mut times = Vec::new();
        for i in 0..5u8 {
            times.push(round_trip(&mut c, &[i; 100]));
        }
        // Two delays per round trip, never less. (How little the relay
        // adds on top depends on how soon a busy machine wakes it: the
        // schedule itself is checked exactly by the queue's tests.)
        for t in &times {
            assert!(*t >= 2 * one_way, "{times:?}");
        }
        // A large transfer comes back whole and in order.
        let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        let mut r = c.try_clone().unwrap();
        let expect = big.clone();
        let reader = std::thread::spawn(move || {
            let mut back = vec![0u8; expect.len()];
            r.read_exact(&mut back).unwrap();
            back == expect
        });
        c.write_all(&big).unwrap();
        assert!(reader.join().unwrap());
    }

    #[test]
    fn a_wire_with_a_rate_takes_its_time_to_send() {
        let target = echo();
        // 8 MB/s and 1 ms each way: 2 MB takes 250 ms out and 250 ms
        // back (they overlap but for the first and last chunk), plus 2 ms:
        // never less, and more only as much as the machine is late.
        let wire = Wire {
            one_way: Duration::from_millis(1),
            rate: Some(8e6),
        };
        let relay = WireRelay::start(target, wire).unwrap();
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        let big = vec![7u8; 2_000_000];
        let mut r = c.try_clone().unwrap();
        let started = Instant::now();
        let reader = std::thread::spawn(move || {
            let mut back = vec![0u8; 2_000_000];
            r.read_exact(&mut back).unwrap();
            (back.iter().all(|&b| b == 7), started.elapsed())
        });
        c.write_all(&big).unwrap();
        let (whole, took) = reader.join().unwrap();
        assert!(whole);
        assert!(took >= Duration::from_millis(250), "{took:?}");
        assert!(took < Duration::from_secs(30), "{took:?}");
    }

    #[test]
    fn ends_pass_through_and_drop_closes_the_connections() {
        let target = echo();
        let wire = Wire {
            one_way: Duration::from_millis(5),
            rate: None,
        };
        let relay = WireRelay::start(target, wire).unwrap();
        // A client that closes its sending side still gets what it sent,
        // then the end.
        let mut c = TcpStream::connect(relay.addr()).unwrap();
        c.write_all(b"last words").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"last words");
        // An open connection is closed when the relay goes.
        let mut open = TcpStream::connect(relay.addr()).unwrap();
        assert_eq!(round_trip(&mut open, b"x").as_secs(), 0);
        let started = Instant::now();
        drop(relay);
        assert!(started.elapsed() < Duration::from_secs(2));
        let mut b = [0u8; 1];
        open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(open.read(&mut b), Ok(0) | Err(_)));
    }
}
