#![allow(clippy::unwrap_used)]
//! What the client does when a server misbehaves: never answers the
//! handshake, never answers a request, stops reading what it is sent,
//! answers a cookie nobody sent, or sends data for a write. Each must be a clear error, never a hang and
//! never quietly empty data. The misbehaving server speaks a real
//! handshake (the protocol crate's `ServerHandshake`), then does one
//! wrong thing.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_client::{Client, ClientError, ConnectOptions, Connection, NbdUri, Request, Target};

mod relay;
use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{
    encode_chunk_header, encode_ok, BlockSizes, ExportCatalog, ExportInfo, HandshakeConfig,
    HandshakeStatus, HeaderStyle, ReplyError, ReplyStyle, RequestHeader, ServerHandshake,
};

struct Disk;
impl ExportCatalog for Disk {
    fn list(&self) -> Vec<(String, String)> {
        vec![("disk".into(), String::new())]
    }
    fn lookup(&self, _: &str) -> Option<ExportInfo> {
        Some(ExportInfo {
            name: "disk".into(),
            description: String::new(),
            size: 1 << 30,
            flags: FLAG_HAS_FLAGS | FLAG_SEND_FLUSH,
            block_sizes: BlockSizes::default(),
            base_allocation: false,
        })
    }
}

/// What the server does with the first request after the handshake.
#[derive(Clone, Copy)]
enum Misdeed {
    Silence,
    UnknownCookie,
    DataForWrite,
}

/// Accepts one connection on `listener` and speaks the handshake
/// (structured replies); returns the socket and what the client sent
/// after it, or `None` if the client left.
fn greet(listener: &TcpListener) -> Option<(TcpStream, Vec<u8>)> {
    let (mut s, _) = listener.accept().unwrap();
    let mut hs = ServerHandshake::new(HandshakeConfig::default());
    let mut input = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        s.write_all(&hs.poll_output()).unwrap();
        let n = s.read(&mut chunk).unwrap();
        if n == 0 {
            return None;
        }
        input.extend_from_slice(&chunk[..n]);
        let (used, status) = hs.handle_input(&input, &Disk).unwrap();
        input.drain(..used);
        if let HandshakeStatus::Done(_) = status {
            s.write_all(&hs.poll_output()).unwrap();
            return Some((s, input));
        }
    }
}

/// One connection: handshake, then `misdeed`.
fn rogue(misdeed: Misdeed) -> NbdUri {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        let Some((mut s, mut input)) = greet(&listener) else {
            return;
        };
        let mut chunk = [0u8; 4096];
        while input.len() < REQUEST_HEADER_LEN {
            let n = s.read(&mut chunk).unwrap();
            if n == 0 {
                return;
            }
            input.extend_from_slice(&chunk[..n]);
        }
        let h = RequestHeader::decode(&input, HeaderStyle::Compact)
            .unwrap()
            .unwrap();
        let mut reply = Vec::new();
        match misdeed {
            Misdeed::Silence => {}
            Misdeed::UnknownCookie => {
                encode_ok(&mut reply, ReplyStyle::Structured, h.cookie + 99, 0)
            }
            Misdeed::DataForWrite => {
                encode_chunk_header(
                    &mut reply,
                    ReplyStyle::Structured,
                    REPLY_FLAG_DONE,
                    REPLY_TYPE_OFFSET_DATA,
                    h.cookie,
                    0,
                    12,
                );
                reply.extend_from_slice(&h.offset.to_be_bytes());
                reply.extend_from_slice(&[1, 2, 3, 4]);
            }
        }
        s.write_all(&reply).unwrap();
        // Hold the connection open until the client gives up.
        let _ = s.read(&mut chunk);
    });
    NbdUri::new(Target::Tcp(addr.to_string()), "disk")
}

fn options() -> ConnectOptions {
    ConnectOptions {
        extended_headers: false,
        request_timeout: Some(Duration::from_millis(300)),
        ..ConnectOptions::default()
    }
}

#[test]
fn a_server_that_never_greets_hits_the_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = NbdUri::new(Target::Tcp(listener.local_addr().unwrap().to_string()), "");
    let held = thread::spawn(move || listener.accept().map(|(s, _)| s));
    let began = Instant::now();
    let err = Connection::connect(
        &uri,
        &ConnectOptions {
            connect_timeout: Duration::from_millis(300),
            ..ConnectOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, ClientError::ConnectTimeout { .. }), "{err}");
    assert!(began.elapsed() < Duration::from_secs(5));
    drop(held.join());
}

#[test]
fn an_unanswered_request_times_out_on_both_drivers() {
    let mut c = Connection::connect(&rogue(Misdeed::Silence), &options()).unwrap();
    c.queue(Request::Read {
        offset: 512,
        length: 512,
    })
    .unwrap();
    let began = Instant::now();
    let err = c.receive(|_| panic!("no reply was sent")).unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { offset: 512, .. }),
        "{err}"
    );
    assert!(began.elapsed() >= Duration::from_millis(250));

    let client = Client::connect(&rogue(Misdeed::Silence), &options()).unwrap();
    let mut buf = [0u8; 512];
    let err = client.read_at(&mut buf, 1024).unwrap_err();
    assert!(
        matches!(err, ClientError::Timeout { offset: 1024, .. }),
        "{err}"
    );
}

/// A server that completes the handshake and then never reads again
/// (a peer cut off the network, or stopped): once the socket buffers
/// are full, sending blocks. The request timeout must bound the send as
/// it bounds the wait for a reply, on both drivers, or the caller hangs
/// for as long as the connection stays open.
#[test]
fn a_server_that_stops_reading_fails_a_large_write_within_the_timeout() {
    // Far more than the kernel buffers of a loopback connection hold.
    let data = vec![7u8; 32 << 20];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = NbdUri::new(
        Target::Tcp(listener.local_addr().unwrap().to_string()),
        "disk",
    );
    let (release, held) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let mut deaf = Vec::new();
        for _ in 0..2 {
            deaf.extend(greet(&listener).map(|(s, _)| s));
        }
        // Holds both connections open, unread, until the test is done.
        let _ = held.recv();
        drop(deaf);
    });
    let (done, outcome) = mpsc::channel();
    let single = uri.clone();
    let (data1, done1) = (data.clone(), done.clone());
    thread::spawn(move || {
        let mut c = Connection::connect(&single, &options()).unwrap();
        let began = Instant::now();
        let r = c
            .queue(Request::Write {
                offset: 0,
                data: &data1,
                fua: false,
            })
            .and_then(|_| c.receive(|_| panic!("no reply was sent")));
        let _ = done1.send((
            "Connection",
            r.err().map(|e| e.to_string()),
            began.elapsed(),
        ));
    });
    thread::spawn(move || {
        let client = Client::connect(&uri, &options()).unwrap();
        let began = Instant::now();
        let r = client.call_blocking(Request::Write {
            offset: 0,
            data: &data,
            fua: false,
        });
        let _ = done.send(("Client", r.err().map(|e| e.to_string()), began.elapsed()));
    });
    for _ in 0..2 {
        // Bounds a hang; the timeout is 300 ms.
        let (driver, err, took) = outcome
            .recv_timeout(Duration::from_secs(30))
            .expect("a write to a server that stopped reading returned");
        assert!(err.is_some(), "{driver}: the write succeeded");
        assert!(took < Duration::from_secs(10), "{driver}: took {took:?}");
    }
    drop(release);
    server.join().unwrap();
}

#[test]
fn a_reply_for_a_cookie_nobody_sent_is_an_error() {
    let mut c = Connection::connect(&rogue(Misdeed::UnknownCookie), &options()).unwrap();
    c.queue(Request::Flush).unwrap();
    let err = c.receive(|_| panic!("not a completion")).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Reply {
                source: ReplyError::UnknownCookie(_),
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn read_data_for_a_write_is_an_error_not_a_success() {
    let client = Client::connect(&rogue(Misdeed::DataForWrite), &options()).unwrap();
    let err = client
        .call_blocking(Request::Write {
            offset: 0,
            data: &[9; 4],
            fua: false,
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Reply {
                source: ReplyError::UnexpectedChunk { .. },
                ..
            }
        ),
        "{err}"
    );
}

/// After the connection is lost, the first reconnect attempt reaches a
/// listener that accepts and never answers: that attempt gives up after
/// its share of the window, and the next one gets the connection back,
/// well within the window (one silent attempt used to take all of it).
#[test]
fn a_silent_reconnect_attempt_costs_one_attempt_not_the_window() {
    let device = std::sync::Arc::new(sluice_storage::MemDevice::new(1 << 20, false));
    let server = sluice_testkit::test_server::TestServer::builder()
        .export("disk", device)
        .start();
    let relay = relay::Relay::start(server.addr);
    let addr = relay.uri.trim_start_matches("sluice://");
    let uri: NbdUri = format!("nbd://{addr}/disk").parse().unwrap();
    let options = ConnectOptions {
        reconnect: sluice_client::Reconnect::within(Duration::from_secs(8)),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&uri, &options).unwrap();
    client
        .call_blocking(Request::Write {
            offset: 4096,
            data: &[9; 4096],
            fua: false,
        })
        .unwrap();
    relay.silence_next(1);
    relay.cut();
    let began = Instant::now();
    let mut back = vec![0u8; 4096];
    client.read_at(&mut back, 4096).unwrap();
    assert_eq!(back, vec![9; 4096]);
    assert_eq!(
        relay.accepted(),
        3,
        "the first, the silent one, the good one"
    );
    assert!(
        began.elapsed() < Duration::from_secs(6),
        "{:?}",
        began.elapsed()
    );
}
