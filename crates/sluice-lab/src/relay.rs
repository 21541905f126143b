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

/// Passes what arrives on `from` to `to` over `wire`, until `from` ends
/// and everything has been passed on.
fn forward(mut from: &TcpStream, mut to: &TcpStream, wire: Wire) -> std::io::Result<()> {
    // The poll timeouts below are the wire's precision; the default
    // slack of 50 µs would add up to that to every chunk.
    rustix::thread::set_current_timer_slack(NonZeroU64::new(1))?;
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; READ];
    let mut open = true;
    // When the wire has sent everything handed to it so far.
    let mut sent = Instant::now();
    while open || !queue.is_empty() {
        while let Some((due, _)) = queue.front() {
            let now = Instant::now();
            if *due > now {
                break;
            }
            let (due, bytes) = queue.pop_front().expect("the front was just seen");
            to.write_all(&bytes)?;
            // A wire never passes bytes faster than its rate: if this
            // thread woke late (the machine busy), what waits behind this
            // chunk moves back by as much, instead of leaving in a burst
            // that a receiver would take for a faster wire.
            let late = now.saturating_duration_since(due);
            if late > LATE_SLACK {
                for (d, _) in &mut queue {
                    *d += late;
                }
                sent += late;
            }
        }
        let wait = queue
            .front()
            .map(|(due, _)| due.saturating_duration_since(Instant::now()));
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
            sent = sent.max(Instant::now());
            for chunk in buf[..n].chunks(CHUNK) {
                if let Some(rate) = wire.rate {
                    sent += Duration::from_secs_f64(chunk.len() as f64 / rate);
                }
                queue.push_back((sent + wire.one_way, chunk.to_vec()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Two delays per round trip, never less; a wake-up or two more.
        for t in &times {
            assert!(*t >= 2 * one_way, "{times:?}");
        }
        times.sort();
        assert!(
            times[2] < 2 * one_way + Duration::from_millis(15),
            "{times:?}"
        );
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
        // back (they overlap but for the first and last chunk), plus 2 ms.
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
        assert!(took < Duration::from_millis(400), "{took:?}");
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
