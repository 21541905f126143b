//! Which protocol greeted: both of sluice's servers speak first, so a
//! client that reached the other protocol's port knows from the first 8
//! bytes and says so at once, instead of waiting out its timeout for a
//! greeting of the length it expected.

use sluice_nbd_proto::consts::NBD_MAGIC;

use crate::ClientError;

/// The protocol a client expected a server to greet in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expected {
    Nbd,
    Objects,
}

/// The wrong-port error when `greeting` (the server's first bytes, at
/// least 8) is the other protocol's: both servers speak first, so a
/// client knows at once, instead of waiting out its timeout for a
/// greeting of the length it expected.
pub(crate) fn wrong_protocol(
    greeting: &[u8],
    expected: Expected,
    target: &str,
) -> Option<ClientError> {
    let magic = u64::from_be_bytes(greeting.get(..8)?.try_into().ok()?);
    let hint = match expected {
        Expected::Nbd if magic == sluice_obj_proto::consts::GREETING_MAGIC => {
            "is sluice's object port, not NBD; NBD is on port 10809 unless the server's \
             --listen moved it"
        }
        Expected::Objects if magic == NBD_MAGIC => {
            "is an NBD port, not sluice's object port; objects are on port 10810 unless \
             the server's --object-listen moved it"
        }
        _ => return None,
    };
    Some(ClientError::WrongProtocol {
        target: target.to_owned(),
        hint,
    })
}
