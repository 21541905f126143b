//! Batch frames: splitting one into its members (each validated and
//! answered on its own) and the header that starts one.

use crate::consts::*;
use crate::handshake::Negotiated;
use crate::reply::ErrorCode;

use super::command::reject;
use super::{Rejected, RequestHeader};

/// A batch frame's members, each a header and its payload, not yet
/// validated (each is validated, and answered, on its own).
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    body: &'a [u8],
}

impl<'a> Iterator for Batch<'a> {
    type Item = (RequestHeader, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        // Split checked every member already; this cannot fail.
        let h = RequestHeader::decode(self.body).ok()??;
        let end = REQUEST_HEADER_LEN + h.payload_len() as usize;
        let payload = self.body.get(REQUEST_HEADER_LEN..end)?;
        self.body = &self.body[end..];
        Some((h, payload))
    }
}

impl Negotiated {
    /// Splits a batch frame into its members. The batch as a whole is
    /// refused (and no member runs) if batches were not negotiated, it
    /// carries flags or a DDT, a member does not frame inside the body,
    /// a member is itself a batch, or it has more members than the limit.
    pub fn split_batch<'a>(
        &self,
        h: &RequestHeader,
        payload: &'a [u8],
    ) -> Result<Batch<'a>, Rejected> {
        let bad = |m: String| reject(h, ErrorCode::BadBatch, m);
        if !self.features.contains(Features::BATCH) {
            return Err(reject(
                h,
                ErrorCode::NotNegotiated,
                "batch frames were not negotiated",
            ));
        }
        if h.flags != 0
            || h.offset != 0
            || h.length != 0
            || h.ddt_len != 0
            || h.param_len != 0
            || h.attr_len != 0
            || payload.len() as u64 != h.payload_len()
        {
            return Err(bad(
                "a batch header carries only its id and the members' length".into(),
            ));
        }
        let mut rest = payload;
        let mut members = 0u32;
        while !rest.is_empty() {
            members += 1;
            if members > self.limits.max_batch {
                return Err(bad(format!(
                    "more than the server's limit of {} members",
                    self.limits.max_batch
                )));
            }
            let m = match RequestHeader::decode(rest) {
                Ok(Some(m)) => m,
                Ok(None) => return Err(bad(format!("member {members} is truncated"))),
                Err(e) => return Err(bad(format!("member {members}: {e}"))),
            };
            if m.opcode == OP_BATCH {
                return Err(bad(format!("member {members} is itself a batch")));
            }
            let end = REQUEST_HEADER_LEN as u64 + m.payload_len();
            if end > rest.len() as u64 {
                return Err(bad(format!(
                    "member {members} runs past the end of the batch"
                )));
            }
            rest = &rest[end as usize..];
        }
        if members == 0 {
            return Err(bad("a batch has no members".into()));
        }
        Ok(Batch { body: payload })
    }
}

impl RequestHeader {
    /// The header of a batch frame whose members, whole request frames
    /// one after another, take `body` bytes.
    pub fn batch(id: u64, partition: u64, body: u32) -> Self {
        Self {
            opcode: OP_BATCH,
            id,
            partition,
            data_len: body,
            ..Self::default()
        }
    }
}
