//! `sluice serve --stdin`: one NBD connection on standard input and
//! output, as `nbdkit -s` and nbd-server's inetd mode serve (libnbd's
//! `connect_command`, `nbd+ssh` tunnels, inetd and xinetd start servers
//! so). The server listens on a private Unix socket only; a relay
//! connects to it and copies stdin to the connection and the
//! connection to stdout (stdin and stdout may be one socket or two
//! pipes), then stops the server when the connection ends.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context, Result};
use sluice_server::{Server, ServerHandle};

/// Connects to `socket` (the server's private listener) and relays
/// stdin and stdout through it on threads of their own; the server is
/// stopped once the server's side of the connection has ended.
pub(super) fn start_relay(server: &Server, socket: &Path) -> Result<()> {
    let conn = UnixStream::connect(socket)
        .with_context(|| format!("cannot connect to the private socket {}", socket.display()))?;
    let to_server = conn
        .try_clone()
        .context("cannot clone the relay's socket")?;
    let handle = server.handle();
    std::thread::Builder::new()
        .name("sluice-stdin".into())
        .spawn(move || {
            let copied = copy(&mut std::io::stdin().lock(), &mut &to_server);
            if let Err(e) = copied {
                tracing::debug!(error = %e, "relaying stdin to the connection ended");
            }
            // The client is done sending: the server sees the end.
            let _ = to_server.shutdown(std::net::Shutdown::Write);
        })
        .context("cannot start the stdin relay")?;
    std::thread::Builder::new()
        .name("sluice-stdout".into())
        .spawn(move || {
            let copied = copy(&mut &conn, &mut std::io::stdout().lock());
            if let Err(e) = copied {
                tracing::debug!(error = %e, "relaying the connection to stdout ended");
            }
            tracing::info!("the stdin connection ended; stopping");
            stop(&handle);
        })
        .context("cannot start the stdout relay")?;
    Ok(())
}

fn stop(handle: &ServerHandle) {
    handle.shutdown();
}

/// Copies until end of input, flushing after every read: replies must
/// not wait in a buffer.
fn copy(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                to.write_all(&buf[..n])?;
                to.flush()?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
