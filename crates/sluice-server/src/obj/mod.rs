//! The native object protocol (docs/protocol.md), the second protocol
//! the connection driver serves: the handshake with STARTTLS and
//! partition selection, then requests framed by their 64-byte header,
//! validated once on the connection thread ([`ObjSession`] is the
//! driver's [`Protocol`]) and run against the object store or an
//! attached NBD export on the I/O pool ([`ObjExecutor`]). A batch frame
//! is split here; its small store changes run together in one pool job
//! (`batch.rs`), every other member on its own, in parallel, and each
//! member is answered with its own reply. Small creates among the whole
//! frames of one receive are made together, in one pool job and one
//! store call (`creates.rs`).

mod attr_work;
mod batch;
mod creates;
mod data_change;
mod execute;
mod extent;
mod failure;
mod file_read;
mod gathered;
mod handshake;
mod meta;
mod spliced_write;

use std::sync::Arc;
use std::time::Instant;

use sluice_obj_proto::consts::{REPLY_HEADER_LEN, REQUEST_HEADER_LEN};
use sluice_obj_proto::{
    Command, DdtKind, Limits, Opcode, Rejected, ReplyHeader, Request, RequestHeader, TlsPolicy,
};
use sluice_objstore::ObjectStore;
use tracing::{debug, info, trace, warn};

use batch::{runs_together, Together};
use creates::Creates;
use execute::{ObjExecutor, ObjRequest};
pub(crate) use handshake::PartitionPolicy;
pub(crate) use meta::{open_meta, MetaService};

use crate::buffer::RecvBuf;
use crate::config::{FastPaths, PipelineMode};
use crate::driver::payload_pipe::PayloadPipe;
use crate::driver::{
    self, handshake_outcome, ConnectionHandler, Decoded, Dispatch, DriverEnv, DriverError, Frame,
    PayloadIo, Placement, Protocol, ProtocolViolation, Start, Taken,
};
use crate::export::ExportRegistry;

use crate::stream::Stream;
use crate::tls::{AccessPolicy, TlsAcceptor};

/// Serves the object protocol on a listener: what every connection
/// shares.
#[derive(Debug)]
pub(crate) struct ObjService {
    pub(crate) store: Arc<ObjectStore>,
    /// The exports extent commands may attach (NBD's own registry).
    pub(crate) registry: Arc<ExportRegistry>,
    /// The handshake's TLS mode (off unless credentials are loaded).
    pub(crate) tls_policy: TlsPolicy,
    /// TLS credentials, when TLS is on (the NBD listeners' own).
    pub(crate) tls: Option<Arc<TlsAcceptor>>,
    /// Which client identities may select which partitions.
    pub(crate) partitions: Arc<PartitionPolicy>,
    /// Which client identities may attach which exports (NBD's).
    pub(crate) export_access: Arc<AccessPolicy>,
    /// What the greeting publishes.
    pub(crate) limits: Limits,
    /// The metadata service of striped objects, if the server runs one.
    pub(crate) meta: Option<MetaService>,
    /// The data path's shortcuts: `mapped_reads` governs reads sent from
    /// an object's file, `spliced_writes` writes spliced into it.
    pub(crate) fast_paths: FastPaths,
}

impl ConnectionHandler for ObjService {
    fn protocol(&self) -> &'static str {
        "obj"
    }

    fn serve(&self, mut stream: Stream, env: &DriverEnv) {
        let mut buf = RecvBuf::new(4096);
        let result = handshake::handshake(&mut stream, &mut buf, self, env);
        let Some(negotiated) = handshake_outcome(result, self.protocol(), &mut stream, env) else {
            return;
        };
        let mut exports = Vec::with_capacity(negotiated.exports.len());
        for attached in &negotiated.exports {
            let Some(export) = self.registry.get(&attached.name) else {
                warn!(export = %attached.name, "export vanished after the handshake");
                return;
            };
            exports.push(Arc::clone(export));
        }
        info!(
            partition = negotiated.partition,
            features = negotiated.features.0,
            tls = negotiated.tls,
            exports = exports.len(),
            "object protocol transmission started"
        );
        let session = ObjSession {
            reply_header: Vec::with_capacity(REPLY_HEADER_LEN),
            list_map: None,
            creates: Creates::default(),
            more: false,
            payload_pipe: None,
            splices: self.fast_paths.spliced_writes,
            sends_from_file: self.fast_paths.mapped_reads,
            exec: Arc::new(ObjExecutor {
                store: Arc::clone(&self.store),
                session: negotiated,
                exports,
                metrics: Arc::clone(&env.metrics),
                meta: self.meta.clone(),
            }),
        };
        driver::serve(stream, buf, session, env);
    }
}

/// One object protocol connection in transmission.
pub(crate) struct ObjSession {
    exec: Arc<ObjExecutor>,
    /// The header of a reply sent from a file, kept to be reused.
    reply_header: Vec<u8>,
    /// The mapping the last list read was sent from (`file_read.rs`).
    list_map: Option<file_read::ListMapping>,
    /// Creates gathered from the frames of this receive (`creates.rs`).
    creates: Creates,
    /// Whether another whole frame follows the one being handled (set
    /// by `decode` while creates are about): gathered creates start
    /// when none does.
    more: bool,
    /// The pipe large WRITE payloads are spliced through
    /// (`spliced_write.rs`), made on the first one.
    payload_pipe: Option<PayloadPipe>,
    /// Whether WRITE payloads may be spliced (`--spliced-writes`; false
    /// once no pipe could be made).
    splices: bool,
    /// Large plain reads may be sent from the object's file
    /// (`file_read.rs`; `--mapped-reads`).
    sends_from_file: bool,
}

impl ObjSession {
    /// Answers a request refused before it ran.
    fn reject(&self, rejected: &Rejected, received: Instant, d: &mut Dispatch) {
        debug!(id = rejected.id, code = ?rejected.code, error = %rejected.message, "request rejected");
        d.answer(|out| {
            out.encode(|o| {
                ReplyHeader::encode_error(rejected.id, rejected.code, &rejected.message, o)
            });
        });
        self.exec
            .metrics
            .objects
            .record(None, DdtKind::Contiguous, 0, 0, true, received.elapsed());
    }

    /// Validates one request (a frame or a batch member), the one check
    /// it gets against the session: `Some` to run, else it was answered
    /// with its error.
    fn validate<'a>(
        &self,
        h: &RequestHeader,
        payload: &'a [u8],
        received: Instant,
        d: &mut Dispatch,
    ) -> Option<Request<'a>> {
        match self.exec.session.validate(h, payload) {
            Ok(req) => {
                trace!(target: "sluice::data", id = h.id, command = ?req.command, "request");
                Some(req)
            }
            Err(rejected) => {
                self.reject(&rejected, received, d);
                None
            }
        }
    }

    /// Splits a batch frame and runs its members: every member gets one
    /// reply with its own id, in completion order; a bad member is
    /// answered with its error and the others still run. The small store
    /// changes among them run together, one pool job for up to 16 of
    /// them, their replies sent with one write (`batch.rs`); every other
    /// member is handed on as it is split, to run in parallel.
    fn batch(&self, h: &RequestHeader, payload: &[u8], received: Instant, d: &mut Dispatch) {
        let members = match self.exec.session.split_batch(h, payload) {
            Ok(m) => m,
            Err(rejected) => return self.reject(&rejected, received, d),
        };
        // Counted before any member runs, so a client that has every
        // reply also sees the frame in the metrics. (`Batch` is a cursor
        // over the frame: counting walks a copy of it.)
        self.exec
            .metrics
            .objects
            .record_batch(members.count() as u64);
        // Run together only where replies go out as they complete: in
        // request order the sink places each reply by its own sequence
        // number, and a shared job's replies travel as one buffer.
        let mut together =
            (d.pipeline() == PipelineMode::Flexible).then(|| Together::for_frame(payload.len()));
        for (mh, member_payload) in members {
            let Some(req) = self.validate(&mh, member_payload, received, d) else {
                continue;
            };
            if req.command == Command::Disconnect {
                // Closing from inside a batch would cut off its siblings'
                // replies: refused like any malformed member.
                self.reject(
                    &Rejected {
                        id: mh.id,
                        code: sluice_obj_proto::ErrorCode::Invalid,
                        message: "DISCONNECT cannot be a batch member".into(),
                    },
                    received,
                    d,
                );
                continue;
            }
            let request = ObjRequest::new(mh, &req);
            let seq = d.take_seq();
            match &mut together {
                Some(group) if runs_together(&request) => {
                    group.push(seq, request, member_payload, &self.exec, received, d);
                }
                _ => {
                    let placement =
                        d.placement(driver::Execute::blocking(&*self.exec), request.access);
                    d.run(
                        &self.exec,
                        seq,
                        request,
                        member_payload,
                        placement,
                        received,
                    );
                }
            }
        }
        if let Some(group) = together {
            group.start(&self.exec, received, d);
        }
    }

    /// Whether `data` starts with a whole frame (one `decode` would
    /// take as complete).
    fn whole_frame(&self, data: &[u8]) -> bool {
        match RequestHeader::decode(data) {
            Ok(Some(h)) => h
                .check_frame(&self.exec.session.limits)
                .is_ok_and(|len| data.len() >= REQUEST_HEADER_LEN + len as usize),
            _ => false,
        }
    }

    /// [`Protocol::start`] of one frame; small creates are gathered
    /// (`creates.rs`) rather than run.
    #[inline]
    fn start_frame(
        &mut self,
        h: &RequestHeader,
        payload: &[u8],
        received: Instant,
        d: &mut Dispatch,
    ) -> Start<ObjRequest> {
        if h.opcode == Opcode::Batch.wire() {
            self.batch(h, payload, received, d);
            return Start::Answered;
        }
        let Some(req) = self.validate(h, payload, received, d) else {
            return Start::Answered;
        };
        if req.command == Command::Disconnect {
            return Start::Close;
        }
        let request = ObjRequest::new(*h, &req);
        if d.pipeline() == PipelineMode::Flexible && creates::gathers(&request) {
            let seq = d.take_seq();
            self.creates
                .push(seq, request, payload, received, &self.exec, d);
            return Start::Answered;
        }
        if self.mapped_read(&req, &request, received, d) {
            return Start::Answered;
        }
        if self.reads_inline(&request, d) {
            // Run here if the store can answer without waiting (see
            // `ObjExecutor::read_nowait`), else on the pool.
            let seq = d.take_seq();
            let placement = if d.pipeline() == PipelineMode::Off {
                Placement::Inline
            } else {
                Placement::TryInline
            };
            d.run(&self.exec, seq, request, payload, placement, received);
            return Start::Answered;
        }
        Start::Run(request)
    }
}

impl Protocol for ObjSession {
    type Head = RequestHeader;
    type Request = ObjRequest;
    type Executor = ObjExecutor;

    const NAME: &'static str = "obj";

    #[inline]
    fn decode(&mut self, data: &[u8]) -> Result<Decoded<RequestHeader>, ProtocolViolation> {
        let head = match RequestHeader::decode(data) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(Decoded::NeedHeader(REQUEST_HEADER_LEN)),
            Err(e) => return Err(ProtocolViolation(e.to_string())),
        };
        // Framing never depends on the opcode; a payload past the
        // published limit ends the connection (the server will not
        // buffer it).
        let payload_len = head
            .check_frame(&self.exec.session.limits)
            .map_err(|e| ProtocolViolation(e.to_string()))?;
        let frame = Frame {
            head,
            header_len: REQUEST_HEADER_LEN,
            len: REQUEST_HEADER_LEN + payload_len as usize,
        };
        self.more = (creates::is_create(head.opcode) || !self.creates.is_empty())
            && data
                .get(frame.len..)
                .is_some_and(|rest| self.whole_frame(rest));
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
        payload: &[u8],
        received: Instant,
        d: &mut Dispatch,
    ) -> Start<ObjRequest> {
        let start = self.start_frame(h, payload, received, d);
        if !self.more || matches!(start, Start::Close) {
            // The last whole frame of this receive (or the last of the
            // connection): the creates gathered so far go.
            self.creates.start(&self.exec, d);
        }
        start
    }

    #[inline]
    fn executor(&self) -> &Arc<ObjExecutor> {
        &self.exec
    }

    /// Large plain WRITEs to object files have the rest of their payload
    /// spliced into the file (`spliced_write.rs`).
    fn receive_rest(
        &mut self,
        frame: &Frame<RequestHeader>,
        io: &mut PayloadIo<'_>,
        d: &mut Dispatch,
    ) -> Result<Taken, DriverError> {
        self.spliced_write(frame, io, d)
    }

    /// Large plain READs of files in the page cache are sent from the
    /// file on this thread (`file_read.rs`); everything else runs where
    /// placement says.
    #[inline]
    fn dispatch(
        &mut self,
        request: &ObjRequest,
        _seq: driver::sink::Seq,
        _placement: Placement,
        received: Instant,
        d: &mut Dispatch,
    ) -> bool {
        self.file_read(request, received, d)
    }
}
