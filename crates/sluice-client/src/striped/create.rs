//! Creates: the pieces, then the entry, then the entry made ready (the
//! order and what a crash leaves are in [`client`](super::client)'s
//! documentation); a put's create leaves the entry `Writing` instead.

use std::collections::BTreeMap;

use sluice_meta::{Entry, EntryState, Layout, MetaError, Piece, Redundancy, Update};

use super::client::{
    meta_error, partition_of, CreateStep, StripedClient, StripedError, StripedObject,
    PIECE_COLLECTION, PIECE_DEPLOYMENT_ATTR, PIECE_INDEX_ATTR, PIECE_OF_ATTR, PIECE_PUT_ATTR,
};
use super::pool::Endpoint;
use crate::obj::{AttrChange, DataOptions, ObjClient, Value, DEFAULT_PARTITION};
use crate::Durability;

/// What a new striped object looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Bytes per stripe unit (a power of two, at least 4 KiB).
    pub stripe_unit: u64,
    /// How many object servers it spreads over (each holds one piece of
    /// each of its copies' columns).
    pub servers: usize,
    pub redundancy: Redundancy,
}

impl Shape {
    /// Plain striping over `servers` servers: no redundancy.
    pub fn striped(stripe_unit: u64, servers: usize) -> Self {
        Self {
            stripe_unit,
            servers,
            redundancy: Redundancy::default(),
        }
    }

    /// Rows of `data` stripe units with `parity` Reed-Solomon units, on
    /// `data + parity` servers.
    pub fn erasure(stripe_unit: u64, data: u8, parity: u8) -> Self {
        Self {
            stripe_unit,
            servers: usize::from(data) + usize::from(parity),
            redundancy: Redundancy::Erasure { data, parity },
        }
    }

    /// Every stripe unit on `copies` of the `servers` servers.
    pub fn replicated(stripe_unit: u64, servers: usize, copies: u8) -> Self {
        Self {
            stripe_unit,
            servers,
            redundancy: Redundancy::Replicas(copies),
        }
    }
}

impl StripedClient {
    /// The shape of a new object whose maker named no redundancy: the
    /// deployment's default ([`MetaStore::default_redundancy`]) once it
    /// has the servers that needs, over `servers` of them (all when
    /// `None`; an erasure code takes exactly its own number); plain
    /// striping, with a warning, while it has fewer.
    ///
    /// [`MetaStore::default_redundancy`]: sluice_meta::MetaStore::default_redundancy
    pub fn default_shape(
        &self,
        stripe_unit: u64,
        servers: Option<usize>,
    ) -> Result<Shape, StripedError> {
        let redundancy = self
            .meta
            .default_redundancy()
            .map_err(|e| meta_error("read the default redundancy for", "", e))?;
        let have = self
            .meta
            .servers()
            .map_err(|e| meta_error("list servers for", "", e))?
            .len();
        let spread = servers.unwrap_or(have).max(1);
        if redundancy.servers_needed() > have {
            tracing::warn!(
                %redundancy,
                have,
                "the deployment's default redundancy needs more object servers than it has: putting without redundancy"
            );
            return Ok(Shape::striped(stripe_unit, spread));
        }
        Ok(match redundancy {
            Redundancy::Replicas(copies) => Shape::replicated(stripe_unit, spread, copies),
            Redundancy::Erasure { data, parity } => Shape::erasure(stripe_unit, data, parity),
        })
    }

    /// Makes `name` in `shape`, and opens it.
    pub fn create(&mut self, name: &str, shape: &Shape) -> Result<StripedObject, StripedError> {
        self.create_until(name, shape, CreateStep::Ready)
    }

    /// [`create`](Self::create) up to `last` (see [`CreateStep`]); the
    /// handle has the entry as that step left it (with
    /// [`CreateStep::Pieces`], an entry that was never stored).
    pub fn create_until(
        &mut self,
        name: &str,
        shape: &Shape,
        last: CreateStep,
    ) -> Result<StripedObject, StripedError> {
        // A name plainly taken fails before any piece is made; a race
        // with another creator is settled by the metadata service.
        match self.meta.lookup(name) {
            Ok(_) => {
                return Err(meta_error(
                    "create",
                    name,
                    MetaError::Exists { name: name.into() },
                ))
            }
            Err(MetaError::NotFound { .. }) => {}
            Err(e) => return Err(meta_error("look up", name, e)),
        }
        self.create_in(name, shape, last, false)
    }

    /// [`create_until`](Self::create_until) of a name its caller found
    /// free (a put's lookup), without looking again; a `put`'s pieces are
    /// marked as such, and its last step leaves the entry
    /// [`EntryState::Writing`] rather than ready.
    pub(crate) fn create_in(
        &mut self,
        name: &str,
        shape: &Shape,
        last: CreateStep,
        put: bool,
    ) -> Result<StripedObject, StripedError> {
        let layout = self.place_pieces(name, shape, put)?;
        let mut entry = Entry {
            name: name.to_owned(),
            layout,
            state: EntryState::Creating,
            size: 0,
            attrs: BTreeMap::new(),
            pending: None,
            revision: 0,
        };
        if last == CreateStep::Pieces {
            return Ok(StripedObject::new(entry));
        }
        entry = match self.meta.create(name, &entry.layout, &entry.attrs) {
            Ok(e) => e,
            Err(e) => {
                self.discard_pieces(name, &entry.layout);
                return Err(meta_error("create", name, e));
            }
        };
        if last == CreateStep::Entry {
            return Ok(StripedObject::new(entry));
        }
        let settled = if put {
            EntryState::Writing
        } else {
            EntryState::Ready
        };
        let ready = Update {
            state: Some(settled),
            ..Update::default()
        };
        entry = match self.meta.update(name, Some(entry.revision), &ready) {
            Ok(e) => e,
            // fsck may have found its pieces and moved it on first.
            Err(MetaError::Conflict { .. }) => {
                let now = self
                    .meta
                    .lookup(name)
                    .map_err(|e| meta_error("look up", name, e))?;
                if now.state != settled {
                    return Err(StripedError::NotReady {
                        name: name.into(),
                        state: now.state,
                    });
                }
                now
            }
            Err(e) => return Err(meta_error("make ready", name, e)),
        };
        Ok(StripedObject::new(entry))
    }

    /// A new layout for `name` in `shape`: on `shape.servers` servers of
    /// the deployment, the first chosen round-robin; with replicas, copy
    /// `j` of column `c` on the `c + j`th of them (so the copies of a
    /// column are on distinct servers, and each server holds as many
    /// pieces as there are copies).
    pub(crate) fn place_pieces(
        &mut self,
        name: &str,
        shape: &Shape,
        put: bool,
    ) -> Result<Layout, StripedError> {
        let all = self
            .meta
            .servers()
            .map_err(|e| meta_error("list servers for", name, e))?;
        let servers = shape.servers;
        let (pieces, needed) = match shape.redundancy {
            Redundancy::Replicas(copies) => (servers * usize::from(copies), usize::from(copies)),
            Redundancy::Erasure { data, parity } => {
                let n = usize::from(data) + usize::from(parity);
                (n, n)
            }
        };
        if servers == 0 || servers > all.len() || needed > servers || pieces == 0 {
            return Err(StripedError::TooFewServers {
                name: name.into(),
                wanted: servers.max(needed),
                have: all.len(),
            });
        }
        let start = self
            .meta
            .next_placement()
            .map_err(|e| meta_error("place", name, e))?;
        let at = |i: usize| &all[((start % all.len() as u64) as usize + i) % all.len()];
        let chosen: Vec<&String> = match shape.redundancy {
            Redundancy::Replicas(copies) => {
                let r = usize::from(copies);
                (0..pieces).map(|k| at((k / r + k % r) % servers)).collect()
            }
            Redundancy::Erasure { .. } => (0..pieces).map(at).collect(),
        };
        let layout = self.make_pieces(name, shape.stripe_unit, &chosen, put)?;
        Ok(Layout {
            redundancy: shape.redundancy,
            ..layout
        })
    }

    /// One piece on each of `servers`, marked as `name`'s; on failure the
    /// pieces made are removed again.
    fn make_pieces(
        &mut self,
        name: &str,
        stripe_unit: u64,
        servers: &[&String],
        put: bool,
    ) -> Result<Layout, StripedError> {
        let deployment = self.deployment()?.to_owned();
        let jobs: Vec<(Endpoint, DataOptions)> = servers
            .iter()
            .enumerate()
            .map(|(i, server)| {
                let endpoint = Endpoint {
                    server: (*server).clone(),
                    partition: partition_of(server).unwrap_or(DEFAULT_PARTITION),
                };
                let mut attrs = vec![
                    AttrChange::set(PIECE_OF_ATTR, name),
                    AttrChange::set(PIECE_INDEX_ATTR, Value::Integer(i as i64)),
                    AttrChange::set(PIECE_DEPLOYMENT_ATTR, deployment.as_str()),
                ];
                if put {
                    attrs.push(AttrChange::set(PIECE_PUT_ATTR, Value::Integer(1)));
                }
                let options = DataOptions {
                    durability: Durability::Durable,
                    attrs,
                };
                (endpoint, options)
            })
            .collect();
        let results = self.pool.fan_out(&jobs, |c: &mut ObjClient, options| {
            c.create_and_write(PIECE_COLLECTION, &[], &[], options)
        });
        let mut pieces = Vec::with_capacity(jobs.len());
        let mut failed = Vec::new();
        for (i, ((endpoint, _), r)) in jobs.iter().zip(results).enumerate() {
            match r {
                Ok(object) => pieces.push(Piece {
                    server: endpoint.server.clone(),
                    partition: endpoint.partition,
                    object,
                }),
                Err(e) => failed.push((i, endpoint.server.clone(), e)),
            }
        }
        let layout = Layout {
            stripe_unit,
            redundancy: Default::default(),
            pieces,
        };
        if let Some((i, server, source)) = failed.into_iter().next() {
            self.discard_pieces(name, &layout);
            return Err(StripedError::Piece {
                op: "create",
                name: name.into(),
                piece: i,
                server,
                source: Box::new(source),
            });
        }
        Ok(layout)
    }

    /// Removes the pieces of a create that failed, as far as it can: what
    /// is left is an orphan fsck removes.
    pub(crate) fn discard_pieces(&mut self, name: &str, layout: &Layout) {
        if let Err(e) = self.remove_pieces(name, layout) {
            tracing::warn!(
                object = name,
                error = %e,
                "pieces of a failed create left for fsck to remove"
            );
        }
    }
}
