//! A pipe that receives a large write's payload straight from the socket
//! (`splice`), so the bytes reach the page cache with one copy, made by
//! the kernel, instead of two (socket to our buffer, buffer to file).
//!
//! The payload is moved whole into the pipe before any of it is written,
//! so a client that vanishes half-way through a write changes nothing, as
//! on the copying path. The pipe only holds references to the socket's
//! pages until the device splices them into the file.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::RecvFlags;
use rustix::pipe::{PipeFlags, SpliceFlags};

use crate::buffer::RecvBuf;

/// Capacity asked for; a write's remaining payload must fit.
const WANTED_CAPACITY: usize = 1 << 20;

/// One connection's payload pipe.
#[derive(Debug)]
pub(crate) struct PayloadPipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
    /// Bytes in the pipe now.
    held: usize,
}

impl PayloadPipe {
    /// A non-blocking pipe of (ideally) 1 MiB.
    pub(crate) fn new() -> io::Result<Self> {
        let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        // Unprivileged users over their pipe quota keep the default size;
        // then only payloads that fit it are spliced.
        let capacity = rustix::pipe::fcntl_setpipe_size(&write, WANTED_CAPACITY)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))?;
        Ok(Self {
            read,
            write,
            capacity,
            held: 0,
        })
    }

    /// Most bytes the pipe can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes in the pipe now.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// The end the device splices from.
    pub(crate) fn read_end(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Moves up to `len` bytes from `socket` into the pipe without
    /// waiting: `Ok(None)` if the socket has nothing (or the pipe is
    /// full), `Ok(Some(0))` at end of stream.
    ///
    /// Splice's non-blocking flag covers only the pipe: on a blocking
    /// socket that holds nothing the kernel would wait for data, beyond
    /// the reach of the stall timeout and the stop signal, and woken only
    /// once the socket's receive low-water mark is reached. So the socket
    /// is asked first (a one-byte peek that does not wait); once it holds
    /// a byte, the kernel moves what is there and returns.
    pub(crate) fn fill_from(
        &mut self,
        socket: BorrowedFd<'_>,
        len: usize,
    ) -> io::Result<Option<usize>> {
        let mut probe = [0u8; 1];
        loop {
            match rustix::net::recv(socket, &mut probe, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
                Ok((0, _)) => return Ok(Some(0)),
                Ok(_) => break,
                Err(Errno::AGAIN) => return Ok(None),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        loop {
            return match rustix::pipe::splice(
                socket,
                None,
                &self.write,
                None,
                len,
                SpliceFlags::NONBLOCK | SpliceFlags::MOVE,
            ) {
                Ok(n) => {
                    self.held += n;
                    Ok(Some(n))
                }
                Err(Errno::AGAIN) => Ok(None),
                Err(Errno::INTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    /// The device took `n` bytes out of the pipe.
    pub(crate) fn consumed(&mut self, n: usize) {
        self.held = self.held.saturating_sub(n);
    }

    /// Moves what the pipe holds, in order, to the end of `buf` (the
    /// payload did not fit, so the copying path takes it over).
    pub(crate) fn unload_into(&mut self, buf: &mut RecvBuf) -> io::Result<()> {
        while self.held > 0 {
            let n = buf.fill_with(|room| {
                let want = room.len().min(self.held);
                loop {
                    match rustix::io::read(&self.read, &mut room[..want]) {
                        Ok(n) => return Ok(n),
                        Err(Errno::INTR) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
            })?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "payload pipe held fewer bytes than counted",
                ));
            }
            self.held -= n;
        }
        Ok(())
    }

    /// Throws away what the pipe holds (an abandoned or failed write).
    pub(crate) fn drain(&mut self) -> io::Result<()> {
        let mut scratch = [0u8; 16 * 1024];
        loop {
            match rustix::io::read(&self.read, &mut scratch) {
                Ok(0) | Err(Errno::AGAIN) => break,
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.held = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn fills_from_a_socket_unloads_in_order_and_drains() {
        // A blocking socket, as the server's are: filling must not wait.
        let (mut client, server) = UnixStream::pair().unwrap();
        let mut pipe = PayloadPipe::new().unwrap();
        assert!(pipe.capacity() >= 64 * 1024);
        assert_eq!(
            pipe.fill_from(server.as_fd(), 100).unwrap(),
            None,
            "nothing sent yet"
        );
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        client.write_all(&data).unwrap();
        let mut got = 0;
        while got < data.len() {
            got += pipe
                .fill_from(server.as_fd(), data.len() - got)
                .unwrap()
                .unwrap();
        }
        assert_eq!(pipe.held(), data.len());
        let mut buf = RecvBuf::new(4096);
        buf.fill_with(|room| {
            room[..3].copy_from_slice(b"hdr");
            Ok(3)
        })
        .unwrap();
        pipe.unload_into(&mut buf).unwrap();
        assert_eq!(pipe.held(), 0);
        assert_eq!(&buf.data()[..3], b"hdr");
        assert_eq!(&buf.data()[3..], &data[..]);

        client.write_all(&data[..1000]).unwrap();
        assert_eq!(pipe.fill_from(server.as_fd(), 1000).unwrap(), Some(1000));
        pipe.drain().unwrap();
        assert_eq!(pipe.held(), 0);
        let mut probe = [0u8; 1];
        assert!(
            rustix::io::read(pipe.read_end(), &mut probe).is_err(),
            "drained pipe is empty (EAGAIN)"
        );
        drop(client);
        assert_eq!(
            pipe.fill_from(server.as_fd(), 10).unwrap(),
            Some(0),
            "end of stream"
        );
    }
}
