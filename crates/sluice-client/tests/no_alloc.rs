#![allow(clippy::unwrap_used)]
//! `Connection` is the bench's hot loop: once warmed up, queueing,
//! sending and completing requests must not allocate on the calling
//! thread. A counting allocator checks it against a real server (which
//! runs on other threads and is not counted).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use sluice_client::{ConnectOptions, Connection, NbdUri, Outcome, Request, Target};
use sluice_server::{Export, ListenAddr, Server, ServerConfig};
use sluice_storage::MemDevice;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.with(|a| a.set(a.get() + 1));
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Keeps `depth` requests in flight for `rounds` completions: 4 KiB
/// writes and reads, some of never-written (hole) ranges.
fn run(conn: &mut Connection, data: &[u8], rounds: usize, depth: usize) {
    let mut issued = 0;
    let mut done = 0;
    while done < rounds {
        while conn.in_flight() < depth {
            let at = (issued % 512) as u64 * 4096;
            let request = match issued % 3 {
                0 => Request::Write {
                    offset: at,
                    data,
                    fua: false,
                },
                1 => Request::Read {
                    offset: at,
                    length: 4096,
                },
                _ => Request::Read {
                    offset: (1 << 30) + at,
                    length: 4096,
                },
            };
            conn.queue(request).unwrap();
            issued += 1;
        }
        done += conn
            .receive(|c| match c.result {
                Ok(Outcome::Done | Outcome::Data(_)) => {}
                other => panic!("{other:?}"),
            })
            .unwrap();
    }
}

#[test]
fn a_warm_connection_does_not_allocate_per_request() {
    let config = ServerConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        ..ServerConfig::default()
    };
    let export = Arc::new(Export::new(
        "m".into(),
        String::new(),
        Arc::new(MemDevice::new(2 << 30, false)),
    ));
    let server = Server::bind_exports(config, vec![export]).unwrap();
    let ListenAddr::Tcp(addr) = server.local_addrs()[0].clone() else {
        panic!("tcp")
    };
    let handle = server.handle();
    let thread = std::thread::spawn(move || server.run());
    let uri = NbdUri::new(Target::Tcp(addr.to_string()), "m");
    let data = vec![5u8; 4096];
    for options in [
        ConnectOptions::default(),
        ConnectOptions {
            extended_headers: false,
            ..ConnectOptions::default()
        },
    ] {
        let mut conn = Connection::connect(&uri, &options).unwrap();
        run(&mut conn, &data, 3000, 16);
        COUNTING.with(|c| c.set(true));
        run(&mut conn, &data, 3000, 16);
        COUNTING.with(|c| c.set(false));
        let n = ALLOCATIONS.with(|a| a.replace(0));
        assert_eq!(n, 0, "{n} allocations in 3000 warm requests");
        conn.disconnect().unwrap();
    }
    handle.shutdown();
    thread.join().unwrap().unwrap();
}
