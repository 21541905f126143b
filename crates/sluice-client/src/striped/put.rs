//! Puts: a new striped object filled with its data before anyone may
//! open it.
//!
//! [`StripedClient::begin_put`] creates the object as
//! [`create`](StripedClient::create) does, but leaves its entry
//! [`EntryState::Writing`] (and marks its pieces as a put's); the caller
//! writes the data through the handle; [`StripedClient::complete_put`]
//! makes every piece durable and only then sets the entry ready. A put
//! interrupted anywhere (the client killed, a server lost) leaves an
//! entry that is not ready: [`open`](StripedClient::open) refuses it,
//! `stat` shows it `writing`, and [`fsck`](StripedClient::fsck) reports
//! it as an incomplete put (an entry still `Creating` whose pieces are a
//! put's becomes `Writing` there, never a complete empty object).

use sluice_meta::{EntryState, MetaError, Update};

use super::client::{meta_error, CreateStep, StripedClient, StripedError, StripedObject};

impl StripedClient {
    /// Creates `name` (as [`create`](Self::create)) for a put: its entry
    /// stays [`EntryState::Writing`] until
    /// [`complete_put`](Self::complete_put).
    pub fn begin_put(
        &mut self,
        name: &str,
        stripe_unit: u64,
        servers: usize,
    ) -> Result<StripedObject, StripedError> {
        self.create_in(name, stripe_unit, servers, CreateStep::Ready, true)
    }

    /// Ends a put begun with [`begin_put`](Self::begin_put): makes every
    /// piece durable, then sets the entry ready, provided nobody changed
    /// it meanwhile (an `rm` or fsck of the half-written object wins: the
    /// put then fails with [`StripedError::NotReady`] or a metadata
    /// error, and the object is not made ready).
    pub fn complete_put(&mut self, object: &mut StripedObject) -> Result<(), StripedError> {
        self.flush(object)?;
        let name = object.name().to_owned();
        let ready = Update {
            state: Some(EntryState::Ready),
            ..Update::default()
        };
        match self
            .meta
            .update(&name, Some(object.entry().revision), &ready)
        {
            Ok(entry) => {
                object.set_entry(entry);
                Ok(())
            }
            Err(MetaError::Conflict { .. }) => {
                let now = self.stat(&name)?;
                Err(StripedError::NotReady {
                    name,
                    state: now.state,
                })
            }
            Err(e) => Err(meta_error("make ready", &name, e)),
        }
    }
}
