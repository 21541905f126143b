//! NBD, one protocol the connection driver serves: the handshake, then
//! requests decoded, validated and executed against an export's device
//! ([`NbdSession`] is the driver's [`Protocol`], [`NbdExecutor`] its
//! [`Execute`](crate::driver::Execute)), with NBD's fast paths as the
//! driver's hooks.

mod execute;
mod fast_path;
mod handshake;
mod large_write;

use std::sync::Arc;
use std::time::Instant;

use sluice_nbd_proto::{encode_error, Command, RequestHeader, TlsPolicy};
use tracing::{debug, info, trace, warn};

use execute::{NbdExecutor, Request};

use crate::buffer::RecvBuf;
use crate::config::FastPaths;
use crate::driver::payload_pipe::PayloadPipe;
use crate::driver::sink::Seq;
use crate::driver::{
    self, handshake_outcome, ConnectionHandler, Decoded, Dispatch, DriverEnv, DriverError, Frame,
    PayloadIo, Placement, Protocol, ProtocolViolation, Start, Taken,
};
use crate::export::ExportRegistry;
use crate::metrics::CommandKind;
use crate::stream::Stream;
use crate::tls::{AccessPolicy, TlsAcceptor};

/// Serves NBD on a listener: what every NBD connection shares.
#[derive(Debug)]
pub(crate) struct NbdService {
    pub(crate) registry: Arc<ExportRegistry>,
    /// The handshake's TLS mode (off unless credentials are loaded).
    pub(crate) tls_policy: TlsPolicy,
    /// TLS credentials, when TLS is on.
    pub(crate) tls: Option<Arc<TlsAcceptor>>,
    /// Which client identities may use which exports.
    pub(crate) access: Arc<AccessPolicy>,
    pub(crate) fast_paths: FastPaths,
}

impl ConnectionHandler for NbdService {
    fn protocol(&self) -> &'static str {
        "nbd"
    }

    fn serve(&self, mut stream: Stream, env: &DriverEnv) {
        let mut buf = RecvBuf::new(4096);
        let result = handshake::handshake(&mut stream, &mut buf, self, env);
        let Some(negotiated) = handshake_outcome(result, self.protocol(), &mut stream, env) else {
            return;
        };
        let Some(export) = self.registry.get(&negotiated.export.name).cloned() else {
            warn!(export = %negotiated.export.name, "export vanished after the handshake");
            return;
        };
        tracing::Span::current().record("export", export.name.as_str());
        info!(
            export = %export.name,
            reply_style = ?negotiated.params.reply_style,
            "transmission phase started"
        );
        let session = NbdSession {
            exec: Arc::new(NbdExecutor {
                export,
                params: negotiated.params,
                context_id: negotiated.base_allocation_id,
            }),
            fast_paths: self.fast_paths,
            mapped_header: Vec::with_capacity(64),
            payload_pipe: None,
        };
        driver::serve(stream, buf, session, env);
    }
}

/// One NBD connection in transmission.
pub(crate) struct NbdSession {
    exec: Arc<NbdExecutor>,
    /// Which fast paths are on (spliced writes go off if making the pipe
    /// fails).
    fast_paths: FastPaths,
    /// Header of a read sent from a mapping (reused).
    mapped_header: Vec<u8>,
    /// Made at the first spliced write.
    payload_pipe: Option<PayloadPipe>,
}

impl Protocol for NbdSession {
    type Head = RequestHeader;
    type Request = Request;
    type Executor = NbdExecutor;

    const NAME: &'static str = "nbd";

    #[inline]
    fn decode(&mut self, data: &[u8]) -> Result<Decoded<RequestHeader>, ProtocolViolation> {
        let style = self.exec.params.header_style;
        let header_len = style.header_len();
        let head = match RequestHeader::decode(data, style) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(Decoded::NeedHeader(header_len)),
            Err(e) => return Err(ProtocolViolation(e.to_string())),
        };
        // The largest payload we accept; anything larger is a DoS attempt
        // or a broken client and gets a hard disconnect.
        let max_payload = u64::from(self.exec.params.max_payload);
        let payload_len = head.payload_len(style);
        if payload_len > max_payload {
            return Err(ProtocolViolation(format!(
                "request payload of {payload_len} bytes exceeds the maximum {max_payload}"
            )));
        }
        let frame = Frame {
            head,
            header_len,
            len: header_len + payload_len as usize,
        };
        Ok(if data.len() >= frame.len {
            Decoded::Complete(frame)
        } else {
            Decoded::Partial(frame)
        })
    }

    #[inline]
    fn start(
        &mut self,
        h: &RequestHeader,
        _payload: &[u8],
        received: Instant,
        d: &mut Dispatch,
    ) -> Start<Request> {
        let cmd = match self.exec.params.validate(h) {
            Ok(Command::Disconnect) => return Start::Close,
            Ok(cmd) => cmd,
            Err(rejected) => {
                debug!(cookie = h.cookie, kind = h.kind, error = %rejected, "request rejected");
                let style = self.exec.params.reply_style;
                d.answer(|out| {
                    out.encode(|o| {
                        encode_error(
                            o,
                            style,
                            h.cookie,
                            h.offset,
                            rejected.errno,
                            rejected.reason,
                        )
                    });
                });
                self.exec
                    .export
                    .metrics
                    .record(CommandKind::Invalid, 0, true, received.elapsed());
                return Start::Answered;
            }
        };
        trace!(target: "sluice::data", cookie = h.cookie, ?cmd, "request");
        Start::Run(Request {
            cookie: h.cookie,
            offset: h.offset,
            cmd,
        })
    }

    #[inline]
    fn executor(&self) -> &Arc<NbdExecutor> {
        &self.exec
    }

    fn receive_rest(
        &mut self,
        frame: &Frame<RequestHeader>,
        io: &mut PayloadIo<'_>,
        d: &mut Dispatch,
    ) -> Result<Taken, DriverError> {
        match self.spliced_write(frame, io, d)? {
            Taken::No => self.piecewise_write(frame, io, d),
            taken => Ok(taken),
        }
    }

    #[inline]
    fn dispatch(
        &mut self,
        request: &Request,
        seq: Seq,
        placement: Placement,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        matches!(request.cmd, Command::Read { .. })
            && self.fast_read(request, seq, placement == Placement::Inline, received, d)
    }
}
