//! Object requests and replies at the wire: a request encoded for
//! sending ([`Wire`]), a reply taken out of the receive buffer
//! ([`take_reply`]), and what each weighs in the window of bytes in
//! flight. Both connection drivers use them: the single-thread
//! [`Connection`](super::connection::Connection) and the shared client over the
//! multiplexer core.

use sluice_obj_proto::consts::{FLAG_SPAN_OK, REPLY_HEADER_LEN, REQUEST_HEADER_LEN};
use sluice_obj_proto::{
    Command, Ddt, DdtKind, ErrorCode, Limits, ReplyHeader, Request, RequestHeader,
};

use super::error::Subject;
use super::gather::Payload;
use super::ObjError;
use crate::net::recv::RecvBuf;

/// Request and reply bytes the client lets be in flight at once.
pub(super) const WINDOW_BYTES: u64 = 16 << 20;

/// One request as it goes on the wire (its id and partition are given
/// when it is sent).
#[derive(Debug)]
pub(crate) struct Wire<'a> {
    pub(crate) subject: Subject,
    /// The header, encoded from the typed request.
    pub(crate) header: RequestHeader,
    /// The DDT, parameter and attribute regions after it.
    pub(crate) regions: Vec<u8>,
    /// The data region, sent from the caller's buffers.
    pub(crate) data: Payload<'a>,
    /// Body bytes the reply will carry (reads), for the window.
    pub(crate) reply_len: u64,
}

impl<'a> Wire<'a> {
    /// `request` as it goes on the wire; `data` is its data region:
    /// [`Command::data`] named again with the caller's lifetime, or, for
    /// data gathered from several buffers, which no one slice the
    /// command could hold names, those buffers (the command then holds
    /// none, and the header counts theirs).
    pub(crate) fn new(
        subject: Subject,
        request: &Request<'_>,
        data: Payload<'a>,
    ) -> Result<Self, ObjError> {
        debug_assert!(
            request.command.data().is_empty() || data.len() == request.command.data().len()
        );
        let mut regions = Vec::new();
        let mut header = request
            .encode_head(0, &mut regions)
            .map_err(|e| ObjError::Refused {
                subject: subject.clone(),
                reason: e.to_string(),
            })?;
        header.data_len = data.len() as u32;
        let reply_len = match request.command {
            Command::Read { ddt, .. } | Command::ExtentRead { ddt, .. } => ddt.total(),
            _ => 0,
        };
        Ok(Self {
            subject,
            header,
            regions,
            data,
            reply_len,
        })
    }

    pub(super) fn payload_len(&self) -> u64 {
        (self.regions.len() + self.data.len()) as u64
    }

    /// Bytes on the wire, header included.
    pub(crate) fn frame_len(&self) -> u64 {
        REQUEST_HEADER_LEN as u64 + self.payload_len()
    }

    /// The DDT of a READ that asked for a span reply (`FLAG_SPAN_OK`).
    pub(super) fn span_ddt(&self, limits: &Limits) -> Option<Ddt<'_>> {
        let h = &self.header;
        if h.flags & FLAG_SPAN_OK == 0 {
            return None;
        }
        let kind = DdtKind::from_flags(h.flags)?;
        let raw = self.regions.get(..h.ddt_len as usize)?;
        Ddt::parse(kind, h.offset, h.length, raw, limits).ok()
    }

    pub(super) fn encode(&self, id: u64, partition: u64, out: &mut Vec<u8>) {
        self.encode_head(id, partition, out);
        self.data.extend_into(out);
    }

    /// [`encode`](Self::encode) without the data region (which follows).
    pub(super) fn encode_head(&self, id: u64, partition: u64, out: &mut Vec<u8>) {
        RequestHeader {
            id,
            partition,
            ..self.header
        }
        .encode(out);
        out.extend_from_slice(&self.regions);
    }
}

/// A successful reply, copied out of the receive buffer.
#[derive(Debug, Default)]
pub(crate) struct RawReply {
    pub(crate) real_bytes: u64,
    pub(crate) attrs: Vec<u8>,
    pub(crate) body: Vec<u8>,
    /// `body` is the span of the request's segments, holes included
    /// (a span reply), not their bytes in list order.
    pub(crate) span: bool,
}

/// A reply by its request id: the reply, or the server's refusal (its
/// code and message).
pub(super) type Received = (u64, Result<RawReply, (ErrorCode, String)>);

/// What the front of a receive buffer holds.
pub(super) enum Front {
    /// A whole reply, taken out of the buffer.
    Reply(Received),
    /// Not a whole reply yet; its header when that much is in.
    Short(Option<ReplyHeader>),
}

/// Takes the next whole reply out of `inbuf`: the one way both
/// connection drivers ([`Connection`] and the shared client) parse replies.
/// A reply claiming more than the server's published limit allows (plus
/// a generous allowance for attributes) is a violation, so a corrupt
/// length cannot make the client allocate without bound.
pub(super) fn take_reply(
    inbuf: &mut RecvBuf,
    limits: &Limits,
    server: &str,
) -> Result<Front, ObjError> {
    let data = inbuf.data();
    let header = ReplyHeader::decode(data).map_err(|source| ObjError::Protocol {
        server: server.to_owned(),
        source,
    })?;
    let Some(h) = header else {
        return Ok(Front::Short(None));
    };
    let limit = u64::from(limits.max_payload) * 2 + (1 << 20);
    if h.payload_len() > limit {
        return Err(ObjError::Violation {
            server: server.to_owned(),
            reason: format!(
                "reply {} claims {} bytes, more than the server's own limit",
                h.id,
                h.payload_len()
            ),
        });
    }
    let need = reply_len(&h);
    if data.len() < need {
        return Ok(Front::Short(Some(h)));
    }
    let payload = &data[REPLY_HEADER_LEN..need];
    let (attrs, body) = payload.split_at(h.attr_len as usize);
    let reply = match h.status {
        None => Ok(RawReply {
            real_bytes: h.real_bytes,
            attrs: attrs.to_vec(),
            body: body.to_vec(),
            span: h.span,
        }),
        Some(code) => Err((code, String::from_utf8_lossy(body).into_owned())),
    };
    inbuf.consume(need);
    Ok(Front::Reply((h.id, reply)))
}

/// Bytes of the reply `h` heads, header included (bounded by
/// [`take_reply`]'s check before anything is reserved for it).
pub(super) fn reply_len(h: &ReplyHeader) -> usize {
    REPLY_HEADER_LEN + h.payload_len() as usize
}

/// What a wire weighs in the window: its bytes out and its reply's in.
pub(super) fn cost(w: &Wire<'_>) -> u64 {
    w.frame_len() + REPLY_HEADER_LEN as u64 + w.reply_len
}
