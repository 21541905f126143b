//! A TCP relay between a client under test and a real server that a test
//! can stop in the middle of a session: frozen, as a hung server is, or
//! holding the server's replies back until the client has sent a number
//! of bytes, which shows what a client sends before it waits.
// Each test file that includes this uses part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};

/// What the relay lets through.
#[derive(Debug, Default)]
struct Gate {
    /// Nothing passes either way.
    frozen: bool,
    /// Bytes passed from client to server.
    sent: u64,
    /// Replies wait until `sent` reaches this.
    replies_after: u64,
    /// The client side of each connection relayed, to cut them.
    clients: Vec<TcpStream>,
    /// Connections accepted.
    accepted: u64,
    /// How many of the next connections to accept and then hold open
    /// without relaying a byte, as a server that accepts and never
    /// answers does.
    silence: u64,
    /// The connections held silent.
    silenced: Vec<TcpStream>,
}

type Shared = Arc<(Mutex<Gate>, Condvar)>;

/// A relay listening on loopback, passing each connection to one server.
pub(crate) struct Relay {
    /// `sluice://` URI of the relay.
    pub(crate) uri: String,
    gate: Shared,
}

impl Relay {
    /// Starts relaying every connection it accepts to `to`.
    pub(crate) fn start(to: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let uri = format!("sluice://{}", listener.local_addr().expect("relay address"));
        let gate: Shared = Arc::default();
        let g = Arc::clone(&gate);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                {
                    let mut gate = g.0.lock().expect("gate");
                    if gate.silence > 0 {
                        gate.silence -= 1;
                        gate.accepted += 1;
                        gate.silenced.push(client);
                        continue;
                    }
                }
                let Ok(server) = TcpStream::connect(to) else {
                    return;
                };
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                {
                    let mut gate = g.0.lock().expect("gate");
                    gate.accepted += 1;
                    gate.clients.push(client.try_clone().expect("clone"));
                    gate.clients.push(server.try_clone().expect("clone"));
                }
                copy(c2, s2, Arc::clone(&g), true);
                copy(server, client, Arc::clone(&g), false);
            }
        });
        Self { uri, gate }
    }

    /// From now on nothing passes either way; connections stay open.
    pub(crate) fn freeze(&self) {
        self.gate.0.lock().expect("gate").frozen = true;
    }

    /// Ends every connection relayed so far, as a lost network does;
    /// new ones are relayed as before.
    pub(crate) fn cut(&self) {
        for s in self.gate.0.lock().expect("gate").clients.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The next `n` connections are accepted and held open, silent.
    pub(crate) fn silence_next(&self, n: u64) {
        self.gate.0.lock().expect("gate").silence = n;
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> u64 {
        self.gate.0.lock().expect("gate").accepted
    }

    /// From now on the server's bytes wait until the client has sent
    /// `bytes` more.
    pub(crate) fn hold_replies_until_sent(&self, bytes: u64) {
        let mut g = self.gate.0.lock().expect("gate");
        g.replies_after = g.sent + bytes;
    }
}

/// Copies `from` to `to` on a thread of its own, through the gate.
fn copy(mut from: TcpStream, mut to: TcpStream, gate: Shared, to_server: bool) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            {
                let (lock, cv) = &*gate;
                let mut g = lock.lock().expect("gate");
                while g.frozen || (!to_server && g.sent < g.replies_after) {
                    g = cv.wait(g).expect("gate");
                }
            }
            if to.write_all(&buf[..n]).is_err() {
                return;
            }
            if to_server {
                let (lock, cv) = &*gate;
                lock.lock().expect("gate").sent += n as u64;
                cv.notify_all();
            }
        }
    });
}
