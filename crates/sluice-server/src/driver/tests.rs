//! The driver with a second protocol: a line-based test protocol served
//! through the same receive and dispatch loop as NBD, over a real socket
//! pair. If a protocol needed a branch in the driver, this would not
//! compile or would not pass.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_storage::BlockingClass;

use super::pool::IoPool;
use super::{
    serve, Access, Decoded, Dispatch, DriverEnv, Execute, Frame, Outcome, Protocol,
    ProtocolViolation, Start,
};
use crate::buffer::{RecvBuf, ReplyBuf};
use crate::config::{Limits, PipelineMode, ReceiveTuning, Timeouts};
use crate::metrics::ServerMetrics;
use crate::socket::Socket;
use crate::stop::StopSignal;
use crate::stream::Stream;

/// Longest line the protocol accepts.
const MAX_LINE: usize = 64;

/// A line is `VERB ARG\n`: `echo X` answers `X`, `sync X` (which waits
/// for "stable storage") answers `synced X`, `bye` closes; any other verb
/// is answered `unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Echo,
    Sync,
    Bye,
    Unknown,
}

struct LineSession {
    exec: Arc<LineExecutor>,
}

struct LineExecutor {
    class: BlockingClass,
    /// The thread each request ran on, with its verb.
    ran_on: Mutex<Vec<(Verb, String)>>,
}

impl Protocol for LineSession {
    type Head = Verb;
    type Request = Verb;
    type Executor = LineExecutor;

    const NAME: &'static str = "line";

    fn decode(&mut self, data: &[u8]) -> Result<Decoded<Verb>, ProtocolViolation> {
        let Some(end) = data.iter().position(|&b| b == b'\n') else {
            if data.len() >= MAX_LINE {
                return Err(ProtocolViolation(format!("no newline in {MAX_LINE} bytes")));
            }
            return Ok(Decoded::NeedHeader(data.len() + 1));
        };
        let line = &data[..end];
        let (verb, header_len) = match line.iter().position(|&b| b == b' ') {
            Some(space) => (&line[..space], space + 1),
            None => (line, end),
        };
        let head = match verb {
            b"echo" => Verb::Echo,
            b"sync" => Verb::Sync,
            b"bye" => Verb::Bye,
            _ => Verb::Unknown,
        };
        // The payload is the argument and its newline.
        Ok(Decoded::Complete(Frame {
            head,
            header_len,
            len: end + 1,
        }))
    }

    fn start(
        &mut self,
        head: &Verb,
        _payload: &[u8],
        _received: Instant,
        d: &mut Dispatch,
    ) -> Start<Verb> {
        match head {
            Verb::Bye => Start::Close,
            Verb::Unknown => {
                d.answer(|out| out.extend_from_slice(b"unknown\n"));
                Start::Answered
            }
            verb => Start::Run(*verb),
        }
    }

    fn executor(&self) -> &Arc<LineExecutor> {
        &self.exec
    }
}

impl Execute for LineExecutor {
    type Request = Verb;

    fn blocking(&self) -> BlockingClass {
        self.class
    }

    fn access(&self, verb: &Verb) -> Access {
        match verb {
            Verb::Sync => Access::Durable,
            _ => Access::Buffered,
        }
    }

    fn in_flight_bytes(&self, _: &Verb) -> u64 {
        0
    }

    fn execute(&self, verb: &Verb, payload: &[u8], _nowait: bool, out: &mut ReplyBuf) -> Outcome {
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        self.ran_on.lock().unwrap().push((*verb, thread));
        if *verb == Verb::Sync {
            // Long enough for the connection thread to answer what came
            // after this request first.
            std::thread::sleep(Duration::from_millis(50));
            out.extend_from_slice(b"synced ");
        }
        out.extend_from_slice(payload);
        Outcome::Done { failed: false }
    }

    fn completed(&self, _: &Verb, _: bool, _: Duration) {}
}

struct Served {
    client: UnixStream,
    exec: Arc<LineExecutor>,
    env: Arc<DriverEnv>,
    thread: std::thread::JoinHandle<()>,
}

/// Serves the line protocol on one end of a socket pair, on a thread
/// named like a connection thread.
fn serve_lines(pipeline: PipelineMode, class: BlockingClass) -> Served {
    let (client, server) = UnixStream::pair().unwrap();
    let env = Arc::new(DriverEnv {
        pool: Arc::new(IoPool::new(2).unwrap()),
        metrics: Arc::new(ServerMetrics::default()),
        stop: Arc::new(StopSignal::new().unwrap()),
        cpus: 1,
        pipeline,
        timeouts: Timeouts::default(),
        receive: ReceiveTuning::default(),
        limits: Limits::default(),
    });
    let exec = Arc::new(LineExecutor {
        class,
        ran_on: Mutex::new(Vec::new()),
    });
    let session = LineSession {
        exec: Arc::clone(&exec),
    };
    let thread_env = Arc::clone(&env);
    let thread = std::thread::Builder::new()
        .name("test-conn".into())
        .spawn(move || {
            let stream = Stream::Plain(Socket::Unix(server));
            serve(stream, RecvBuf::new(4096), session, &thread_env);
        })
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    Served {
        client,
        exec,
        env,
        thread,
    }
}

/// Everything the server sends until it closes the connection.
fn read_to_close(client: &mut UnixStream) -> String {
    let mut text = String::new();
    client.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn a_second_protocol_runs_inline_and_on_the_pool_through_the_same_driver() {
    let mut s = serve_lines(PipelineMode::Flexible, BlockingClass::PageCache);
    s.client
        .write_all(b"echo a\nsync b\nfrob\necho c\nbye\nnever seen\n")
        .unwrap();
    let text = read_to_close(&mut s.client);
    s.thread.join().unwrap();
    // Completion order: the handed-off request answers last.
    assert_eq!(text, "a\nunknown\nc\nsynced b\n");
    assert_eq!(s.env.metrics.handoffs.load(Ordering::Relaxed), 1);
    let ran_on = s.exec.ran_on.lock().unwrap().clone();
    assert_eq!(ran_on.len(), 3, "{ran_on:?}");
    for (verb, thread) in &ran_on {
        match verb {
            Verb::Sync => assert!(thread.starts_with("sluice-io"), "{thread}"),
            _ => assert_eq!(thread, "test-conn"),
        }
    }
}

#[test]
fn request_order_holds_back_replies_that_overtake_a_handed_off_one() {
    let mut s = serve_lines(PipelineMode::Fixed, BlockingClass::PageCache);
    s.client.write_all(b"sync b\necho c\nbye\n").unwrap();
    let text = read_to_close(&mut s.client);
    s.thread.join().unwrap();
    assert_eq!(text, "synced b\nc\n");
}

#[test]
fn a_device_that_always_blocks_sends_every_request_to_the_pool() {
    let mut s = serve_lines(PipelineMode::Flexible, BlockingClass::Always);
    s.client.write_all(b"echo a\necho b\nbye\n").unwrap();
    let mut lines: Vec<String> = read_to_close(&mut s.client)
        .lines()
        .map(str::to_owned)
        .collect();
    s.thread.join().unwrap();
    lines.sort();
    assert_eq!(lines, ["a", "b"]);
    assert_eq!(s.env.metrics.handoffs.load(Ordering::Relaxed), 2);
}

#[test]
fn a_protocol_violation_closes_the_connection_after_earlier_replies() {
    let mut s = serve_lines(PipelineMode::Flexible, BlockingClass::Never);
    s.client.write_all(b"echo a\n").unwrap();
    s.client.write_all(&[b'x'; MAX_LINE]).unwrap();
    let text = read_to_close(&mut s.client);
    s.thread.join().unwrap();
    assert_eq!(text, "a\n");
}
