//! A pipe that receives a large write's payload straight from the socket
//! (`splice`), so the bytes reach the page cache with one copy, made by
//! the kernel, instead of two (socket to our buffer, buffer to file).
//!
//! The payload is moved whole into the pipe before any of it is written,
//! so a client that vanishes half-way through a write changes nothing, as
//! on the copying path. The pipe only holds references to the socket's
//! pages until they are spliced into the file. Both protocols' spliced
//! writes go through [`PayloadPipe::splice_payload`]: NBD's into an
//! export's file (`nbd/fast_path.rs`), the object protocol's into an
//! object's file (`obj/spliced_write.rs`).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::RecvFlags;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tracing::debug;

use super::{DriverError, PayloadIo, Taken};
use crate::buffer::RecvBuf;
use crate::stop::{wait_readable, Readiness};

/// Capacity asked for; a write's remaining payload must fit.
const WANTED_CAPACITY: usize = 1 << 20;
/// Write payloads at least this long are spliced when they can be (both
/// protocols, `--spliced-writes`); shorter ones cost less copied.
pub(crate) const SPLICED_PAYLOAD_MIN: usize = 128 * 1024;

/// What [`PayloadPipe::splice_payload`] did with a message.
pub(crate) enum Spliced<R> {
    /// The whole payload was received (the rest of it into the pipe) and
    /// written: what writing it returned. The message's bytes are
    /// consumed and the pipe is empty.
    Written(R),
    /// Nothing was written: the copying path takes the message over
    /// (`Taken::No`, with what the pipe held moved to the receive
    /// buffer), or the client left (`Taken::Eof`).
    Not(Taken),
}

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

    /// The connection's pipe kept in `slot`, or a new one the first time
    /// (`None`, logged, if no pipe can be made: the caller stops trying).
    pub(crate) fn take_or_make(slot: &mut Option<Self>) -> Option<Self> {
        if let Some(pipe) = slot.take() {
            return Some(pipe);
        }
        match Self::new() {
            Ok(pipe) => Some(pipe),
            Err(e) => {
                debug!(error = %e, "cannot make a payload pipe; writes are copied");
                None
            }
        }
    }

    /// Receives a message's payload (`payload_len` bytes after
    /// `header_len` bytes of header, the first of them already in the
    /// receive buffer) and writes it with `write`: the rest of it is
    /// spliced from the socket into the pipe first, whole, and only then
    /// is `write` called with the prefix from the buffer, the pipe and
    /// how many bytes the pipe holds, so a client that leaves half-way
    /// changes nothing. Whatever `write` leaves in the pipe is thrown
    /// away if it failed; if it succeeded it took all of it.
    pub(crate) fn splice_payload<T, E>(
        &mut self,
        header_len: usize,
        payload_len: usize,
        io: &mut PayloadIo<'_>,
        write: impl FnOnce(&[u8], &Self, usize) -> Result<T, E>,
    ) -> Result<Spliced<Result<T, E>>, DriverError> {
        let prefix_len = io.buf().data().len() - header_len;
        let rest = payload_len - prefix_len;
        if rest > self.capacity {
            return Ok(Spliced::Not(Taken::No));
        }
        if let Some(taken) = self.fill_rest(rest, io)? {
            return Ok(Spliced::Not(taken));
        }
        let result = write(&io.buf().data()[header_len..], self, rest);
        match result {
            Ok(_) => self.consumed(rest),
            Err(_) => self.drain()?,
        }
        io.buf().consume(header_len + prefix_len);
        Ok(Spliced::Written(result))
    }

    /// Splices the `rest` of a payload from the socket into the pipe.
    /// `None` once it is all there; otherwise what became of the message
    /// (the client left, or the copying path takes over).
    fn fill_rest(
        &mut self,
        rest: usize,
        io: &mut PayloadIo<'_>,
    ) -> Result<Option<Taken>, DriverError> {
        while self.held < rest {
            let fd = io.stream().fd();
            match self.fill_from(fd, rest - self.held)? {
                Some(0) => {
                    self.drain()?;
                    return Ok(Some(Taken::Eof));
                }
                Some(_) => continue,
                None => {}
            }
            // What is left may be shorter than the coalescing batch the
            // socket is set to wake for: wake for any byte.
            io.wake_for_any_byte()?;
            if wait_readable(io.stream().fd(), None, Some(Duration::ZERO))? == Readiness::Readable {
                // Bytes are waiting but the pipe took none: it is full
                // (partly filled pages), or the socket failed between the
                // two looks. The copying path takes over.
                self.unload_into(io.buf())?;
                return Ok(Some(Taken::No));
            }
            let timeout = io.stall_timeout();
            if wait_readable(io.stream().fd(), None, timeout)? == Readiness::TimedOut {
                self.drain()?;
                return Err(DriverError::Stalled(timeout.unwrap_or_default()));
            }
        }
        Ok(None)
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
                self.read_some(&mut room[..want])
            })?;
            self.held -= n;
        }
        Ok(())
    }

    /// Appends the next `len` bytes the pipe holds to `out` (a write
    /// that needs its payload in memory after all). The caller counts
    /// them [`consumed`](Self::consumed).
    pub(crate) fn read_into(&self, out: &mut Vec<u8>, len: usize) -> io::Result<()> {
        let start = out.len();
        out.resize(start + len, 0);
        let mut at = start;
        while at < out.len() {
            at += self.read_some(&mut out[at..])?;
        }
        Ok(())
    }

    /// Reads from the pipe into `room` (not empty); never 0 bytes: a
    /// pipe found empty held fewer bytes than counted.
    fn read_some(&self, room: &mut [u8]) -> io::Result<usize> {
        loop {
            return match rustix::io::read(&self.read, &mut *room) {
                Ok(0) | Err(Errno::AGAIN) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "payload pipe held fewer bytes than counted",
                )),
                Ok(n) => Ok(n),
                Err(Errno::INTR) => continue,
                Err(e) => Err(e.into()),
            };
        }
    }

    /// Splices the next `len` bytes the pipe holds into `file` at
    /// `offset` (the kernel moves the socket's pages into the file's
    /// page cache). The caller counts them [`consumed`](Self::consumed).
    pub(crate) fn write_into(
        &self,
        file: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        let mut at = offset;
        let end = offset + len as u64;
        while at < end {
            let want = (end - at) as usize;
            match rustix::pipe::splice(
                &self.read,
                None,
                file,
                Some(&mut at),
                want,
                SpliceFlags::MOVE,
            ) {
                // Filled first: the pipe never runs dry on the way.
                Ok(0) | Err(Errno::AGAIN) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "payload pipe held fewer bytes than counted",
                    ))
                }
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
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
        assert!(pipe.capacity >= 64 * 1024);
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
        assert_eq!(pipe.held, data.len());
        let mut buf = RecvBuf::new(4096);
        buf.fill_with(|room| {
            room[..3].copy_from_slice(b"hdr");
            Ok(3)
        })
        .unwrap();
        pipe.unload_into(&mut buf).unwrap();
        assert_eq!(pipe.held, 0);
        assert_eq!(&buf.data()[..3], b"hdr");
        assert_eq!(&buf.data()[3..], &data[..]);

        client.write_all(&data[..1000]).unwrap();
        assert_eq!(pipe.fill_from(server.as_fd(), 1000).unwrap(), Some(1000));
        pipe.drain().unwrap();
        assert_eq!(pipe.held, 0);
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
