#![allow(clippy::unwrap_used)]
//! The client against a real in-process sluice server on an ephemeral
//! port: handshake variants, pipelining and out-of-order completion,
//! error mapping, multi-conn, concurrent use.

use sluice_client::Durability;
use std::sync::Arc;

use sluice_client::{
    list_exports, Client, ClientError, ConnectOptions, Connection, NbdUri, Op, Outcome, Reply,
    Request, Target,
};
use sluice_nbd_proto::{ClientHandshakeError, NbdErrno, ReplyStyle, RequestError};
use sluice_server::PipelineMode;
use sluice_storage::{BlockDevice, MemDevice};
use sluice_testkit::GatedDevice;

/// The test kit's in-process server, and its address as the client
/// names it.
struct TestServer {
    addr: String,
    _server: sluice_testkit::test_server::TestServer,
}

impl TestServer {
    fn start(exports: Vec<(&str, &str, Arc<dyn BlockDevice>)>) -> Self {
        let mut builder = sluice_testkit::test_server::TestServer::builder()
            .config(|c| c.pipeline = PipelineMode::Flexible);
        for (name, description, device) in exports {
            builder = builder.described_export(name, description, device);
        }
        let server = builder.start();
        Self {
            addr: server.addr.to_string(),
            _server: server,
        }
    }

    fn uri(&self, export: &str) -> NbdUri {
        NbdUri::new(Target::Tcp(self.addr.clone()), export)
    }
}

fn mem(size: u64) -> Arc<dyn BlockDevice> {
    Arc::new(MemDevice::new(size, false))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Runs one request on a pipelined connection and returns its outcome,
/// with read data copied out.
fn run(conn: &mut Connection, req: Request<'_>) -> Result<Reply, ClientError> {
    let cookie = conn.queue(req)?;
    let mut out = None;
    while out.is_none() {
        conn.receive(|c| {
            assert_eq!(c.cookie, cookie);
            out = Some(c.result.map(|o| match o {
                Outcome::Done => Reply::Done,
                Outcome::Data(d) => Reply::Data(d.to_vec()),
                Outcome::Extents(e) => Reply::Extents(e),
            }));
        })?;
    }
    out.unwrap()
}

#[test]
fn every_handshake_variant_reads_writes_and_queries() {
    let server = TestServer::start(vec![("disk", "a disk", mem(1 << 20))]);
    let variants = [
        (ConnectOptions::default(), ReplyStyle::Extended),
        (
            ConnectOptions {
                extended_headers: false,
                ..Default::default()
            },
            ReplyStyle::Structured,
        ),
        (
            ConnectOptions {
                extended_headers: false,
                structured_replies: false,
                base_allocation: false,
                ..Default::default()
            },
            ReplyStyle::Simple,
        ),
    ];
    for (i, (opts, style)) in variants.into_iter().enumerate() {
        let mut c = Connection::connect(&server.uri("disk"), &opts).unwrap();
        let d = c.details().clone();
        assert_eq!(d.reply_style, style);
        assert_eq!(d.size, 1 << 20);
        assert_eq!(d.name, "disk");
        assert!(d.can_flush() && d.can_fua() && d.can_trim() && d.can_zero() && d.can_multi_conn());
        let data = pattern(70_000, i as u8);
        let off = 4096 * (i as u64 + 1);
        assert_eq!(
            run(
                &mut c,
                Request::Write {
                    offset: off,
                    data: &data,
                    fua: true
                }
            )
            .unwrap(),
            Reply::Done
        );
        assert_eq!(
            run(
                &mut c,
                Request::Read {
                    offset: off,
                    length: data.len() as u32
                }
            )
            .unwrap(),
            Reply::Data(data.clone())
        );
        run(
            &mut c,
            Request::WriteZeroes {
                offset: off,
                length: 100,
                no_hole: true,
                fast: false,
                fua: false,
            },
        )
        .unwrap();
        let Reply::Data(z) = run(
            &mut c,
            Request::Read {
                offset: off,
                length: 100,
            },
        )
        .unwrap() else {
            panic!("data")
        };
        assert!(z.iter().all(|&b| b == 0));
        run(&mut c, Request::Flush).unwrap();
        if style == ReplyStyle::Simple {
            assert!(matches!(
                c.queue(Request::BlockStatus {
                    offset: 0,
                    length: 4096,
                    req_one: false
                }),
                Err(ClientError::Refused {
                    op: Op::BlockStatus,
                    ..
                })
            ));
        } else {
            let Reply::Extents(e) = run(
                &mut c,
                Request::BlockStatus {
                    offset: 0,
                    length: 1 << 20,
                    req_one: true,
                },
            )
            .unwrap() else {
                panic!("extents")
            };
            assert_eq!(e.len(), 1);
            assert!(e[0].length <= 1 << 20);
        }
        c.disconnect().unwrap();
    }
}

#[test]
fn lists_exports_and_reports_unknown_ones() {
    let server = TestServer::start(vec![("a", "first", mem(4096)), ("b", "", mem(8192))]);
    let list = list_exports(&server.uri("")).unwrap();
    assert_eq!(
        list,
        vec![("a".into(), "first".into()), ("b".into(), String::new())]
    );
    let err = Connection::connect(&server.uri("nope"), &ConnectOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Handshake {
                source: ClientHandshakeError::UnknownExport { ref export, .. },
                ..
            } if export == "nope"
        ),
        "{err}"
    );
    // The empty name is the default export (the first here).
    let c = Connection::connect(&server.uri(""), &ConnectOptions::default()).unwrap();
    assert_eq!((c.details().name.as_str(), c.details().size), ("a", 4096));
}

#[test]
fn completions_arrive_out_of_order_and_many_fly_at_once() {
    let gated = Arc::new(GatedDevice::new(1 << 20, vec![0]));
    gated.write_at(&[7; 4096], 0, false).unwrap();
    let server = TestServer::start(vec![("g", "", gated.clone())]);
    let mut c = Connection::connect(&server.uri("g"), &ConnectOptions::default()).unwrap();
    let slow = c
        .queue(Request::Read {
            offset: 0,
            length: 4096,
        })
        .unwrap();
    let mut fast = Vec::new();
    for i in 1..64u64 {
        fast.push(
            c.queue(Request::Read {
                offset: i * 4096,
                length: 4096,
            })
            .unwrap(),
        );
    }
    assert_eq!(c.in_flight(), 64);
    let mut order = Vec::new();
    while order.len() < 63 {
        c.receive(|done| {
            assert!(done.result.is_ok());
            order.push(done.cookie);
        })
        .unwrap();
    }
    assert!(
        !order.contains(&slow),
        "the gated read must not finish first"
    );
    gated.open_gate();
    c.receive(|done| {
        assert_eq!(done.cookie, slow);
        assert_eq!(done.result.unwrap(), Outcome::Data(&[7; 4096]));
    })
    .unwrap();
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn server_errors_map_to_typed_errors() {
    let ro: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(8192, true));
    let server = TestServer::start(vec![("rw", "", mem(8192)), ("ro", "", ro)]);
    let mut c = Connection::connect(&server.uri("rw"), &ConnectOptions::default()).unwrap();
    let err = run(
        &mut c,
        Request::Read {
            offset: 8000,
            length: 1000,
        },
    )
    .unwrap_err();
    match &err {
        ClientError::Request {
            op,
            offset,
            length,
            errno,
            ..
        } => {
            assert_eq!(
                (*op, *offset, *length, *errno),
                (Op::Read, 8000, 1000, NbdErrno::Inval)
            );
        }
        other => panic!("unexpected {other}"),
    }
    assert!(
        err.to_string()
            .contains("read of 1000 bytes at offset 8000"),
        "{err}"
    );
    let err = run(
        &mut c,
        Request::Write {
            offset: 8190,
            data: b"abcd",
            fua: false,
        },
    )
    .unwrap_err();
    assert_eq!(err.errno(), Some(NbdErrno::NoSpc));
    // The connection survives errors.
    run(
        &mut c,
        Request::Write {
            offset: 0,
            data: b"ok",
            fua: false,
        },
    )
    .unwrap();

    let mut r = Connection::connect(&server.uri("ro"), &ConnectOptions::default()).unwrap();
    assert!(r.details().is_read_only());
    // Refused before anything is sent: the export said it is read-only.
    let err = run(
        &mut r,
        Request::Write {
            offset: 0,
            data: b"x",
            fua: false,
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ClientError::Refused {
                source: RequestError::ReadOnly(Op::Write),
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(r.in_flight(), 0);
    assert!(matches!(
        r.queue(Request::Trim {
            offset: 0,
            length: 1,
            fua: false
        }),
        Err(ClientError::Refused { op: Op::Trim, .. })
    ));
}

#[test]
fn multi_conn_flush_on_one_connection_covers_writes_on_another() {
    let server = TestServer::start(vec![("m", "", mem(1 << 20))]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let conns = Client::connect_many(&server.uri("m"), &ConnectOptions::default(), 3).unwrap();
        let data = pattern(4096 * 4, 9);
        conns[0]
            .write(8192, &data, Durability::Buffered)
            .await
            .unwrap();
        conns[1].flush().await.unwrap();
        assert_eq!(conns[2].read(8192, data.len() as u32).await.unwrap(), data);
    });
}

#[test]
fn shared_client_serves_many_threads_at_once() {
    let server = TestServer::start(vec![("s", "", mem(8 << 20))]);
    let client = Client::connect(&server.uri("s"), &ConnectOptions::default()).unwrap();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let c = client.clone();
            std::thread::spawn(move || {
                for i in 0..50u64 {
                    let off = (t * 50 + i) * 4096;
                    let data = pattern(4096, (t * 50 + i) as u8);
                    c.call_blocking(Request::Write {
                        offset: off,
                        data: &data,
                        fua: false,
                    })
                    .unwrap();
                    let back = c
                        .call_blocking(Request::Read {
                            offset: off,
                            length: 4096,
                        })
                        .unwrap();
                    assert_eq!(back, Reply::Data(data));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn requests_fail_cleanly_when_the_server_goes_away() {
    let server = TestServer::start(vec![("x", "", mem(1 << 20))]);
    let client = Client::connect(&server.uri("x"), &ConnectOptions::default()).unwrap();
    client.call_blocking(Request::Flush).unwrap();
    drop(server);
    let err = client
        .call_blocking(Request::Read {
            offset: 0,
            length: 512,
        })
        .unwrap_err();
    assert!(err.is_temporary(), "{err}");
}
