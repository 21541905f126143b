//! What an accepted NBD command promises, written from the NBD protocol
//! document and independent of `TransmissionParams::validate`: the
//! property tests and the fuzz targets both check every command
//! `validate` accepts against [`check_accepted`].
//!
//! The rules, per the spec:
//! - the command is known, its range lies inside the export, and for
//!   READ/WRITE/TRIM/WRITE_ZEROES/CACHE it is aligned to the minimum
//!   block size; READ and WRITE fit the maximum payload;
//! - each flag is one the command takes, and was advertised where the
//!   spec says so: FUA on any command with `SEND_FUA`; DF on READ with
//!   `SEND_DF`; NO_HOLE and FAST_ZERO (with `SEND_FAST_ZERO`) on
//!   WRITE_ZEROES; REQ_ONE on BLOCK_STATUS; PAYLOAD_LEN on WRITE with
//!   extended headers. DISC ignores its flags;
//! - writing commands are refused on a read-only export, and FLUSH,
//!   TRIM, WRITE_ZEROES need their `SEND_*` flag; BLOCK_STATUS needs a
//!   negotiated metadata context and a nonzero length;
//! - the decoded command carries the header's offset, length and flags
//!   unchanged.

use sluice_nbd_proto::consts::*;
use sluice_nbd_proto::{Command, HeaderStyle, RequestHeader, TransmissionParams};

/// The flags `kind` may carry under `p`.
fn allowed_flags(p: &TransmissionParams, kind: u16) -> u16 {
    let adv = |f: u16| p.flags & f != 0;
    let mut allowed = if adv(FLAG_SEND_FUA) { CMD_FLAG_FUA } else { 0 };
    match kind {
        CMD_READ if adv(FLAG_SEND_DF) => allowed |= CMD_FLAG_DF,
        CMD_WRITE if p.header_style == HeaderStyle::Extended => allowed |= CMD_FLAG_PAYLOAD_LEN,
        CMD_WRITE_ZEROES => {
            allowed |= CMD_FLAG_NO_HOLE;
            if adv(FLAG_SEND_FAST_ZERO) {
                allowed |= CMD_FLAG_FAST_ZERO;
            }
        }
        CMD_BLOCK_STATUS => allowed |= CMD_FLAG_REQ_ONE,
        _ => {}
    }
    allowed
}

/// Ok if `validate` was right to accept `h` as `cmd` under `p`, else
/// what is wrong.
pub fn check_accepted(
    p: &TransmissionParams,
    h: &RequestHeader,
    cmd: Command,
) -> Result<(), String> {
    let adv = |f: u16| p.flags & f != 0;
    let flag = |f: u16| h.flags & f != 0;
    let in_range = |off: u64, len: u64| off.checked_add(len).is_some_and(|e| e <= p.size);
    let align = u64::from(p.min_block.max(1));
    let aligned = h.offset.is_multiple_of(align) && h.length.is_multiple_of(align);
    let writable = !adv(FLAG_READ_ONLY);
    let same_range = |offset: u64, length: u64| (offset, length) == (h.offset, h.length);
    let fua_kept = |fua: bool| fua == flag(CMD_FLAG_FUA);
    let flags_ok = h.kind == CMD_DISC || h.flags & !allowed_flags(p, h.kind) == 0;
    let ok = match cmd {
        Command::Disconnect => h.kind == CMD_DISC,
        Command::Read { offset, length, df } => {
            h.kind == CMD_READ
                && same_range(offset, u64::from(length))
                && length <= p.max_payload
                && in_range(offset, h.length)
                && aligned
                && df == flag(CMD_FLAG_DF)
        }
        Command::Write {
            offset,
            length,
            fua,
        } => {
            h.kind == CMD_WRITE
                && same_range(offset, u64::from(length))
                && length <= p.max_payload
                && in_range(offset, h.length)
                && aligned
                && writable
                && fua_kept(fua)
        }
        Command::Flush => {
            h.kind == CMD_FLUSH && adv(FLAG_SEND_FLUSH) && h.offset == 0 && h.length == 0
        }
        Command::Trim {
            offset,
            length,
            fua,
        } => {
            h.kind == CMD_TRIM
                && same_range(offset, length)
                && adv(FLAG_SEND_TRIM)
                && writable
                && in_range(offset, length)
                && aligned
                && fua_kept(fua)
        }
        Command::Cache { offset, length } => {
            h.kind == CMD_CACHE && same_range(offset, length) && in_range(offset, length) && aligned
        }
        Command::WriteZeroes {
            offset,
            length,
            fua,
            may_trim,
            fast,
        } => {
            h.kind == CMD_WRITE_ZEROES
                && same_range(offset, length)
                && adv(FLAG_SEND_WRITE_ZEROES)
                && writable
                && in_range(offset, length)
                && aligned
                && fua_kept(fua)
                && may_trim != flag(CMD_FLAG_NO_HOLE)
                && fast == flag(CMD_FLAG_FAST_ZERO)
        }
        Command::BlockStatus {
            offset,
            length,
            req_one,
        } => {
            h.kind == CMD_BLOCK_STATUS
                && same_range(offset, length)
                && p.block_status
                && length > 0
                && in_range(offset, length)
                && req_one == flag(CMD_FLAG_REQ_ONE)
        }
    };
    if ok && flags_ok {
        Ok(())
    } else {
        Err(format!("accepted {cmd:?} for {h:?} under {p:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_nbd_proto::ReplyStyle;

    fn params(flags: u16) -> TransmissionParams {
        TransmissionParams {
            size: 1 << 20,
            flags: FLAG_HAS_FLAGS | flags,
            header_style: HeaderStyle::Compact,
            reply_style: ReplyStyle::Structured,
            max_payload: 1 << 20,
            min_block: 1,
            block_status: true,
        }
    }

    fn header(kind: u16, flags: u16) -> RequestHeader {
        RequestHeader {
            flags,
            kind,
            cookie: 1,
            offset: 4096,
            length: 512,
        }
    }

    #[test]
    fn flags_the_command_does_not_take_are_caught() {
        let p = params(FLAG_SEND_FUA | FLAG_SEND_DF);
        let read = Command::Read {
            offset: 4096,
            length: 512,
            df: false,
        };
        assert!(check_accepted(&p, &header(CMD_READ, 0), read).is_ok());
        assert!(check_accepted(&p, &header(CMD_READ, CMD_FLAG_FUA), read).is_ok());
        // NO_HOLE belongs to WRITE_ZEROES, PAYLOAD_LEN to extended writes.
        assert!(check_accepted(&p, &header(CMD_READ, CMD_FLAG_NO_HOLE), read).is_err());
        assert!(check_accepted(&p, &header(CMD_READ, CMD_FLAG_PAYLOAD_LEN), read).is_err());
    }

    #[test]
    fn a_dropped_fua_is_caught() {
        let write = |fua| Command::Write {
            offset: 4096,
            length: 512,
            fua,
        };
        let h = header(CMD_WRITE, CMD_FLAG_FUA);
        assert!(check_accepted(&params(FLAG_SEND_FUA), &h, write(true)).is_ok());
        assert!(check_accepted(&params(FLAG_SEND_FUA), &h, write(false)).is_err());
        // FUA that was never advertised must not be accepted at all.
        assert!(check_accepted(&params(0), &h, write(false)).is_err());
    }
}
