//! Puts: a whole object written before anyone may read it, new or
//! replacing one that exists, all or nothing.
//!
//! [`StripedClient::begin_put`] of a new name creates the object as
//! [`create`](StripedClient::create) does, but leaves its entry
//! [`EntryState::Writing`] (and marks its pieces as a put's); of a name
//! that exists it makes a new version's pieces and records their layout
//! as the entry's [`pending`](sluice_meta::Entry::pending) one, leaving
//! the object as it was for everyone else. The caller writes the data
//! through the handle; [`StripedClient::complete_put`] makes every piece
//! durable and only then, in one metadata update, sets the new entry
//! ready or switches the name to the new version (its layout, size and
//! attributes at once), then removes the old version's pieces.
//!
//! A put interrupted anywhere (the client killed, a server lost) leaves
//! the name as it was: a new name not ready ([`open`](StripedClient::open)
//! refuses it, `stat` shows it `writing`, [`fsck`](StripedClient::fsck)
//! reports it), an existing one with its old content and a pending
//! layout that fsck forgets once its pieces are older than the grace
//! period, removing them. docs/design/0010-all-or-nothing-puts.md has
//! each crash point and why it is safe.

use sluice_meta::{Entry, EntryState, MetaError, PendingChange, Update};

use super::client::{
    meta_error, CreateStep, RemoveStep, StripedClient, StripedError, StripedObject,
};
use super::create::Shape;

/// Where a put's [`complete_put_until`](StripedClient::complete_put_until)
/// stops (all of it: [`PutStep::Done`]). Stopping earlier leaves what a
/// crash after that step leaves, for testing [`fsck`](StripedClient::fsck).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PutStep {
    /// Every piece of the new version is durable; the name is unchanged.
    Durable,
    /// The name holds the new version; a replaced version's pieces are
    /// still there (orphans, for fsck).
    Switched,
    /// The replaced version's pieces are gone: the put is complete.
    Done,
}

/// How often a put retries when other clients keep changing the entry it
/// replaces between its look and its update.
const TRIES: usize = 16;

impl StripedClient {
    /// Begins a put of `name` in `shape`: a new object, or a new version of
    /// an existing one (ready, or left `Writing` by a put that did not
    /// finish) that replaces it when [`complete_put`](Self::complete_put)
    /// succeeds. Until then nobody else sees any of it.
    pub fn begin_put(&mut self, name: &str, shape: &Shape) -> Result<StripedObject, StripedError> {
        for _ in 0..TRIES {
            let live = match self.meta.lookup(name) {
                Ok(entry) => entry,
                Err(MetaError::NotFound { .. }) => {
                    match self.create_in(name, shape, CreateStep::Ready, true) {
                        // Another client created it first: replace that.
                        Err(StripedError::Meta {
                            source: MetaError::Exists { .. },
                            ..
                        }) => continue,
                        other => return other,
                    }
                }
                Err(e) => return Err(meta_error("look up", name, e)),
            };
            if !matches!(live.state, EntryState::Ready | EntryState::Writing) {
                return Err(StripedError::NotReady {
                    name: name.into(),
                    state: live.state,
                });
            }
            if let Some(object) = self.begin_replace(&live, shape)? {
                return Ok(object);
            }
        }
        Err(StripedError::Invalid {
            name: name.into(),
            what: "put",
            why: "the entry kept changing while the put began".into(),
        })
    }

    /// Makes a new version's pieces and records them as `live`'s pending
    /// layout; `None` if the entry changed since `live` was read (the
    /// pieces are removed again).
    fn begin_replace(
        &mut self,
        live: &Entry,
        shape: &Shape,
    ) -> Result<Option<StripedObject>, StripedError> {
        let name = live.name.as_str();
        let layout = self.place_pieces(name, shape, true)?;
        let pending = Update {
            pending: PendingChange::Set(layout.clone()),
            ..Update::default()
        };
        let marked = match self.meta.update(name, Some(live.revision), &pending) {
            Ok(entry) => entry,
            Err(MetaError::Conflict { .. } | MetaError::NotFound { .. }) => {
                self.discard_pieces(name, &layout);
                return Ok(None);
            }
            // The update may have been applied with its answer lost: the
            // pieces stay, for fsck once they are past its grace period.
            Err(e) => return Err(meta_error("record the new version of", name, e)),
        };
        let new = Entry {
            name: name.to_owned(),
            layout,
            state: EntryState::Writing,
            size: 0,
            attrs: Default::default(),
            pending: None,
            revision: marked.revision,
        };
        let mut object = StripedObject::new(new);
        object.replacing = Some(marked);
        Ok(Some(object))
    }

    /// Ends a put begun with [`begin_put`](Self::begin_put): makes every
    /// piece durable, then makes the new object ready or switches the
    /// name to the new version, provided nobody changed the entry
    /// meanwhile. Another put, an `rm` or an fsck that got there first
    /// wins: this put then fails ([`StripedError::NotReady`],
    /// [`StripedError::Replaced`] or a metadata error) and changes
    /// nothing.
    pub fn complete_put(&mut self, object: &mut StripedObject) -> Result<(), StripedError> {
        self.complete_put_until(object, PutStep::Done)
    }

    /// [`complete_put`](Self::complete_put) up to `last` (see
    /// [`PutStep`]).
    pub fn complete_put_until(
        &mut self,
        object: &mut StripedObject,
        last: PutStep,
    ) -> Result<(), StripedError> {
        if let Err(e) = self.flush(object) {
            return Err(self.superseded(object).unwrap_or(e));
        }
        if last == PutStep::Durable {
            return Ok(());
        }
        match object.replacing.take() {
            None => self.make_ready(object),
            Some(live) => {
                let replaced = match self.switch(object, live.clone()) {
                    Ok(replaced) => replaced,
                    Err(e) => {
                        object.replacing = Some(live);
                        return Err(e);
                    }
                };
                if last == PutStep::Done {
                    self.discard_pieces(object.name(), &replaced.layout);
                }
                Ok(())
            }
        }
    }

    /// For a replacing put whose pieces failed: [`StripedError::Replaced`]
    /// if the entry no longer holds them as its pending layout (an `rm`,
    /// another put or fsck took over and may have removed them).
    fn superseded(&mut self, object: &StripedObject) -> Option<StripedError> {
        object.replacing.as_ref()?;
        let name = object.name();
        let moved_on = match self.meta.lookup(name) {
            Ok(now) => now.pending.as_ref() != Some(object.layout()),
            Err(MetaError::NotFound { .. }) => true,
            Err(_) => false,
        };
        moved_on.then(|| StripedError::Replaced { name: name.into() })
    }

    /// The last step of a put of a new name: its entry made ready.
    fn make_ready(&mut self, object: &mut StripedObject) -> Result<(), StripedError> {
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

    /// The last step of a put replacing `live`: one update gives the
    /// name the new version's layout, size and attributes (the old
    /// version's attributes go) and forgets the pending layout; returns
    /// the entry it replaced. Changes to the old version meanwhile (an
    /// in-place write, say) do not stop it: the put is ordered after
    /// them. If the pending layout is no longer this put's (another put,
    /// an `rm` or fsck took over), the new version's pieces are removed
    /// and the put fails.
    fn switch(&mut self, object: &mut StripedObject, live: Entry) -> Result<Entry, StripedError> {
        let name = object.name().to_owned();
        let mut live = live;
        for _ in 0..TRIES {
            let new = object.entry();
            let switch = Update {
                layout: Some(new.layout.clone()),
                pending: PendingChange::Clear,
                state: Some(EntryState::Ready),
                size: Some(new.size),
                set_attrs: new.attrs.clone(),
                remove_attrs: live
                    .attrs
                    .keys()
                    .filter(|k| !new.attrs.contains_key(*k))
                    .cloned()
                    .collect(),
                ..Update::default()
            };
            match self.meta.update(&name, Some(live.revision), &switch) {
                Ok(entry) => {
                    object.set_entry(entry);
                    return Ok(live);
                }
                Err(MetaError::Conflict { .. }) => match self.meta.lookup(&name) {
                    Ok(now) if now.pending.as_ref() == Some(object.layout()) => live = now,
                    Ok(_) | Err(MetaError::NotFound { .. }) => break,
                    Err(e) => return Err(meta_error("look up", &name, e)),
                },
                Err(MetaError::NotFound { .. }) => break,
                // Whether the switch happened is unknown (an answer lost on
                // the way): nothing is removed; fsck settles it.
                Err(e) => return Err(meta_error("switch to the new version of", &name, e)),
            }
        }
        let layout = object.layout().clone();
        self.discard_pieces(&name, &layout);
        Err(StripedError::Replaced { name })
    }

    /// Gives up a put begun with [`begin_put`](Self::begin_put) and not
    /// completed: a new object's entry and pieces are removed; a new
    /// version's pending layout is forgotten and its pieces removed, the
    /// object left as it was. Nothing another client did meanwhile is
    /// undone (a put that took over, an `rm`): then only this put's own
    /// pieces go.
    pub fn abort_put(&mut self, object: StripedObject) -> Result<(), StripedError> {
        let name = object.name().to_owned();
        // Whether the entry is still as this put left it: only then is
        // it this put's to change. (A new object another put is already
        // replacing is that put's.)
        let ours = |e: &Entry| match object.replacing {
            Some(_) => e.pending.as_ref() == Some(object.layout()),
            None => {
                e.layout == *object.layout()
                    && e.state == EntryState::Writing
                    && e.pending.is_none()
            }
        };
        let forget = match object.replacing {
            Some(_) => Update {
                pending: PendingChange::Clear,
                ..Update::default()
            },
            None => Update {
                state: Some(EntryState::Removing),
                ..Update::default()
            },
        };
        for _ in 0..TRIES {
            let now = match self.meta.lookup(&name) {
                Ok(now) if ours(&now) => now,
                Ok(_) | Err(MetaError::NotFound { .. }) => break,
                Err(e) => return Err(meta_error("look up", &name, e)),
            };
            match self.meta.update(&name, Some(now.revision), &forget) {
                Ok(entry) if object.replacing.is_none() => {
                    return self.finish_removal(&entry, RemoveStep::Deleted)
                }
                Ok(_) => break,
                Err(MetaError::Conflict { .. }) => {}
                Err(e) => return Err(meta_error("give up the put of", &name, e)),
            }
        }
        // The pieces go unless an entry still names them.
        let named = match self.meta.lookup(&name) {
            Ok(e) => e.layout == *object.layout() || e.pending.as_ref() == Some(object.layout()),
            Err(MetaError::NotFound { .. }) => false,
            Err(e) => return Err(meta_error("look up", &name, e)),
        };
        if named {
            return Ok(());
        }
        self.remove_pieces(&name, object.layout())
    }
}
