//! The metadata service of striped objects.
//!
//! A striped object is one named object spread over several object servers:
//! its bytes are cut into stripe units dealt round-robin over its pieces,
//! one piece (an ordinary object) on each server. The metadata service maps
//! the name to that layout, and holds the whole object's size and user
//! attributes; clients then read and write the pieces on the object servers
//! directly and in parallel.
//!
//! [`MetaStore`] is the one interface; each backend (SQLite on one host,
//! etcd for deployments that must survive losing the metadata host)
//! implements it with the same semantics, and the same conformance tests
//! run against each.

use std::collections::BTreeMap;

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod etcd;
mod etcd_config;
mod etcd_reach;
mod memory;
mod page;
mod record;
mod sqlite;

pub use error::MetaError;
pub use etcd::{
    EtcdConfig, EtcdMetaStore, EtcdTls, EtcdUser, DEFAULT_PREFIX as DEFAULT_ETCD_PREFIX,
};
pub use memory::MemoryMetaStore;
pub use page::{check_page, entries, Entries, Page, MAX_PAGE};

pub use sqlite::SqliteMetaStore;

/// Longest name, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Checks a name: non-empty, at most [`MAX_NAME_LEN`] bytes, no NUL.
pub fn check_name(name: &str) -> Result<(), MetaError> {
    let why = if name.is_empty() {
        "it is empty".to_owned()
    } else if name.len() > MAX_NAME_LEN {
        format!("it is {} bytes long, more than {MAX_NAME_LEN}", name.len())
    } else if name.contains('\0') {
        "it contains a NUL character".to_owned()
    } else {
        return Ok(());
    };
    Err(MetaError::Invalid {
        what: format!("object name {name:?}"),
        why,
    })
}

/// A new deployment identity: 128 random bits as 32 hex digits.
pub fn new_deployment_id() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// Where one piece of a striped object lives: an object on an object
/// server.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Piece {
    /// The object server, as a `sluice://HOST:PORT` (or `sluices://`,
    /// `sluice+unix://`) URI exactly as it was added to the deployment.
    pub server: String,
    /// The partition on that server.
    pub partition: u64,
    /// The object id in that partition.
    pub object: u64,
}

/// How a striped object survives losing object servers, chosen when it is
/// made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Redundancy {
    /// Every stripe unit is kept in this many pieces, each on a server of
    /// its own; 1 is plain striping, which survives no loss.
    Replicas(u8),
    /// Each row of `data` stripe units has `parity` Reed-Solomon units,
    /// every unit of a row in a piece on a server of its own: any `data`
    /// of the `data + parity` pieces rebuild the row.
    Erasure { data: u8, parity: u8 },
}

impl Default for Redundancy {
    fn default() -> Self {
        Self::Replicas(1)
    }
}

impl Redundancy {
    /// Checks it on its own: at least one copy; both parts of an erasure
    /// code, at most 256 units a row.
    pub fn check(self) -> Result<(), MetaError> {
        let why = match self {
            Self::Replicas(0) => "it keeps 0 copies".to_owned(),
            Self::Erasure { data, parity } if data == 0 || parity == 0 => {
                format!("erasure coding {data}+{parity} needs both parts")
            }
            Self::Erasure { data, parity } if usize::from(data) + usize::from(parity) > 256 => {
                format!("erasure coding {data}+{parity} has more than 256 units a row")
            }
            _ => return Ok(()),
        };
        Err(MetaError::Invalid {
            what: "redundancy".to_owned(),
            why,
        })
    }

    /// How many distinct servers an object needs at least.
    pub fn servers_needed(self) -> usize {
        match self {
            Self::Replicas(copies) => usize::from(copies),
            Self::Erasure { data, parity } => usize::from(data) + usize::from(parity),
        }
    }

    /// How many servers may be lost with every byte still readable.
    pub fn losses_survived(self) -> usize {
        match self {
            Self::Replicas(copies) => usize::from(copies).saturating_sub(1),
            Self::Erasure { parity, .. } => usize::from(parity),
        }
    }
}

impl std::str::FromStr for Redundancy {
    type Err = MetaError;

    /// What [`Display`](std::fmt::Display) prints: `none`, `replicas R`,
    /// `ec K+M`.
    fn from_str(s: &str) -> Result<Self, MetaError> {
        let bad = || MetaError::Invalid {
            what: format!("redundancy {s:?}"),
            why: "it is not none, replicas R or ec K+M".to_owned(),
        };
        let r = match s.split_once(' ') {
            None if s == "none" => Self::Replicas(1),
            Some(("replicas", n)) => Self::Replicas(n.parse().map_err(|_| bad())?),
            Some(("ec", code)) => {
                let (k, m) = code.split_once('+').ok_or_else(bad)?;
                Self::Erasure {
                    data: k.parse().map_err(|_| bad())?,
                    parity: m.parse().map_err(|_| bad())?,
                }
            }
            _ => return Err(bad()),
        };
        r.check()?;
        Ok(r)
    }
}

impl std::fmt::Display for Redundancy {
    /// `none`, `replicas 2`, `ec 4+2`: as `stat` shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Replicas(1) => f.write_str("none"),
            Self::Replicas(copies) => write!(f, "replicas {copies}"),
            Self::Erasure { data, parity } => write!(f, "ec {data}+{parity}"),
        }
    }
}

/// How a striped object's bytes map onto its pieces.
///
/// The object's stripe units are dealt round-robin over its data
/// columns: stripe unit `k` (bytes `k*unit .. (k+1)*unit`) is at offset
/// `(k / n) * unit` of column `k % n`, `n` = [`Layout::columns`]. Which
/// pieces hold a column depends on the [`Redundancy`]:
/// - `Replicas(r)`: `n = pieces.len() / r`, and column `c` is in pieces
///   `c*r .. c*r + r`, each a whole copy of it;
/// - `Erasure { data, parity }`: `n = data`, column `c` is piece `c`, and
///   pieces `data ..` hold the parity units of each row at the same offset
///   as the row's data units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per stripe unit; a power of two, at least 4 KiB.
    pub stripe_unit: u64,
    /// The pieces, in the order above; never empty.
    pub pieces: Vec<Piece>,
    pub redundancy: Redundancy,
}

/// The first string past every string that starts with `prefix`, as bytes
/// (None: no bound, for the empty prefix): the end of the range that
/// holds exactly the names with that prefix, in byte order. UTF-8 never
/// has a 0xFF byte, so the last byte can always be raised by one; the
/// result may not be UTF-8, which byte-wise comparison does not mind.
pub(crate) fn prefix_end(prefix: &str) -> Option<Vec<u8>> {
    let mut end = prefix.as_bytes().to_vec();
    let last = end.last_mut()?;
    *last += 1;
    Some(end)
}

impl Layout {
    /// Smallest stripe unit.
    pub const MIN_STRIPE_UNIT: u64 = 4096;

    /// The number of data columns the stripe units are dealt over.
    pub fn columns(&self) -> usize {
        match self.redundancy {
            Redundancy::Replicas(copies) => self.pieces.len() / usize::from(copies.max(1)),
            Redundancy::Erasure { data, .. } => usize::from(data),
        }
    }

    /// The pieces holding data column `column`: its copies, or (erasure)
    /// the one piece.
    pub fn column_pieces(&self, column: usize) -> std::ops::Range<usize> {
        match self.redundancy {
            Redundancy::Replicas(copies) => {
                let r = usize::from(copies.max(1));
                column * r..column * r + r
            }
            Redundancy::Erasure { .. } => column..column + 1,
        }
    }

    /// The groups of pieces that must each be on distinct servers: the
    /// copies of each column, or every piece of an erasure-coded layout.
    fn failure_groups(&self) -> Vec<std::ops::Range<usize>> {
        match self.redundancy {
            Redundancy::Replicas(_) => (0..self.columns()).map(|c| self.column_pieces(c)).collect(),
            Redundancy::Erasure { .. } => std::iter::once(0..self.pieces.len()).collect(),
        }
    }

    /// Checks the layout's own rules: a power-of-two stripe unit of at
    /// least [`Layout::MIN_STRIPE_UNIT`], at least one piece, as many
    /// pieces as the redundancy asks for, and the pieces that stand in
    /// for each other on distinct servers.
    pub fn check(&self) -> Result<(), MetaError> {
        let why = if !self.stripe_unit.is_power_of_two() || self.stripe_unit < Self::MIN_STRIPE_UNIT
        {
            format!(
                "stripe unit {} is not a power of two of at least {}",
                self.stripe_unit,
                Self::MIN_STRIPE_UNIT
            )
        } else if self.pieces.is_empty() {
            "it has no pieces".to_owned()
        } else if let Some(why) = self.redundancy_problem() {
            why
        } else {
            return Ok(());
        };
        Err(MetaError::Invalid {
            what: "layout".to_owned(),
            why,
        })
    }
}

impl Layout {
    /// What is wrong with the redundancy of this layout, if anything.
    fn redundancy_problem(&self) -> Option<String> {
        let n = self.pieces.len();
        if let Err(MetaError::Invalid { why, .. }) = self.redundancy.check() {
            return Some(why);
        }
        match self.redundancy {
            Redundancy::Replicas(copies) if !n.is_multiple_of(usize::from(copies)) => {
                return Some(format!(
                    "its {n} pieces are not whole columns of {copies} copies"
                ))
            }
            Redundancy::Erasure { data, parity }
                if usize::from(data) + usize::from(parity) != n =>
            {
                return Some(format!(
                    "erasure coding {data}+{parity} needs {} pieces, not {n}",
                    usize::from(data) + usize::from(parity)
                ))
            }
            _ => {}
        }
        self.failure_groups().into_iter().find_map(|group| {
            let servers: std::collections::BTreeSet<&str> = self.pieces[group.clone()]
                .iter()
                .map(|p| p.server.as_str())
                .collect();
            (servers.len() < group.len()).then(|| {
                format!(
                    "pieces {}..{} stand in for each other but share a server",
                    group.start, group.end
                )
            })
        })
    }
}

/// What a crash may leave half done; `sluice obj fsck` finishes or undoes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryState {
    /// The name is reserved and the layout chosen, but the pieces may not
    /// all exist yet.
    Creating,
    /// Every piece exists and the object's first put is writing its data:
    /// it is not complete, so it cannot be opened, until the put has
    /// made every byte durable and set it [`EntryState::Ready`]. An
    /// entry left in this state is an interrupted put.
    Writing,
    /// Every piece exists; the object is readable and writable.
    Ready,
    /// Removal has begun: the pieces may be partly deleted. The name stays
    /// taken until the pieces are gone and the entry is deleted.
    Removing,
}

/// One name's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name: a flat namespace whose `/`-separated prefixes can be
    /// listed.
    pub name: String,
    pub layout: Layout,
    pub state: EntryState,
    /// The whole object's size in bytes.
    pub size: u64,
    /// User attributes of the whole object.
    pub attrs: BTreeMap<String, Vec<u8>>,
    /// The layout of a new version a put is writing to replace this
    /// object: readers never see it; the put's last update moves it to
    /// [`Entry::layout`] (with the new size and attributes) in one step,
    /// so the name reads as the old object or the new one, never a mix.
    /// Its pieces are the put's while it runs; fsck collects those of a
    /// put that died ([`PendingChange`]).
    pub pending: Option<Layout>,
    /// Changes on every update of this entry; updates compare it
    /// ([`MetaStore::update`]) so two writers cannot both win. Drawn from
    /// a store-wide counter that only grows, so a name deleted and created
    /// again never repeats an old revision.
    pub revision: u64,
}

/// What an [`Update`] does to an entry's [`Entry::pending`] layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PendingChange {
    /// Leaves it as it is.
    #[default]
    Keep,
    /// Records the layout of a new version a put has begun (replacing any
    /// other put's, whose switch then fails its revision check).
    Set(Layout),
    /// Forgets it (the put switched to it, or gave up).
    Clear,
}

/// One change to an entry, applied atomically with the revision check, in
/// this order: layout, pending layout, state, exact size, size-at-least,
/// set attributes, remove attributes (a name in both ends up removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Update {
    /// A new layout, if any: a put switching the name to the version it
    /// wrote (see [`Entry::pending`]).
    pub layout: Option<Layout>,
    /// The pending layout's change.
    pub pending: PendingChange,
    /// A new state, if any.
    pub state: Option<EntryState>,
    /// Sets the size to at least this (a write that ends past the end grows
    /// the object; a concurrent larger size is kept).
    pub size_at_least: Option<u64>,
    /// Sets the size exactly (truncation).
    pub size: Option<u64>,
    /// Attributes to set.
    pub set_attrs: BTreeMap<String, Vec<u8>>,
    /// Attributes to remove.
    pub remove_attrs: Vec<String>,
}

impl Update {
    /// Applies this change to an entry's fields (not its revision).
    pub fn apply(&self, entry: &mut Entry) {
        if let Some(layout) = &self.layout {
            entry.layout = layout.clone();
        }
        match &self.pending {
            PendingChange::Keep => {}
            PendingChange::Set(layout) => entry.pending = Some(layout.clone()),
            PendingChange::Clear => entry.pending = None,
        }
        if let Some(state) = self.state {
            entry.state = state;
        }
        if let Some(size) = self.size {
            entry.size = size;
        }
        if let Some(size) = self.size_at_least {
            entry.size = entry.size.max(size);
        }
        for (k, v) in &self.set_attrs {
            entry.attrs.insert(k.clone(), v.clone());
        }
        for k in &self.remove_attrs {
            entry.attrs.remove(k);
        }
    }

    /// Checks the layouts it would store ([`Layout::check`]).
    pub fn check(&self) -> Result<(), MetaError> {
        if let Some(layout) = &self.layout {
            layout.check()?;
        }
        if let PendingChange::Set(layout) = &self.pending {
            layout.check()?;
        }
        Ok(())
    }
}

impl Entry {
    /// Whether a piece of this entry, of its current or its pending
    /// layout, lives on `server`.
    pub fn uses_server(&self, server: &str) -> bool {
        self.layout
            .pieces
            .iter()
            .chain(self.pending.iter().flat_map(|l| &l.pieces))
            .any(|p| p.server == server)
    }
}

/// The metadata service, whatever its backend. All methods are blocking
/// and safe to call from many threads; each is atomic.
pub trait MetaStore: Send + Sync {
    /// Adds an object server to the deployment; adding one already there
    /// is not an error.
    fn add_server(&self, uri: &str) -> Result<(), MetaError>;
    /// Removes an object server; refused with [`MetaError::ServerInUse`]
    /// while any entry has a piece on it.
    fn remove_server(&self, uri: &str) -> Result<(), MetaError>;
    /// The object servers of the deployment, in the order they were added.
    fn servers(&self) -> Result<Vec<String>, MetaError>;
    /// The deployment's identity: drawn at random when the service is
    /// first used (see [`new_deployment_id`]) and the same for every
    /// client from then on. Each piece a deployment makes carries it, so
    /// that object servers can be shared by several deployments and
    /// fsck removes only its own deployment's pieces.
    fn deployment(&self) -> Result<String, MetaError>;
    /// The redundancy a new object gets when its put names none (see
    /// [`MetaStore::set_default_redundancy`]); none (`Replicas(1)`) until
    /// it is set.
    fn default_redundancy(&self) -> Result<Redundancy, MetaError>;
    /// Sets the deployment's default redundancy ([`Redundancy::check`]ed).
    fn set_default_redundancy(&self, redundancy: Redundancy) -> Result<(), MetaError>;
    /// A number that grows by one on each call, shared by all clients:
    /// the start server of the next object's layout (round-robin placement).
    fn next_placement(&self) -> Result<u64, MetaError>;
    /// Creates `name` with this layout in state [`EntryState::Creating`],
    /// size 0. Exactly one of several concurrent creators of one name
    /// succeeds; the others get [`MetaError::Exists`].
    fn create(
        &self,
        name: &str,
        layout: &Layout,
        attrs: &BTreeMap<String, Vec<u8>>,
    ) -> Result<Entry, MetaError>;
    /// The entry of `name`, or [`MetaError::NotFound`].
    fn lookup(&self, name: &str) -> Result<Entry, MetaError>;
    /// One page of the entries whose names start with `prefix`, sorted
    /// by name (byte order): the first `limit` of them after `after` (the
    /// continuation key: the last name of the previous page, see
    /// [`Page::next`]; `None` for the first page), fewer only where the
    /// listing ends (or where a backend caps a page's bytes:
    /// [`Page::next`] then still says names follow). A page starts
    /// strictly after its key, so names created or removed between pages
    /// neither repeat nor hide names that existed throughout.
    ///
    /// `limit` must be 1 to [`MAX_PAGE`], and `after` a valid name
    /// starting with `prefix`; anything else is [`MetaError::Invalid`]
    /// ([`check_page`]). A prefix longer than any name finds nothing.
    /// [`entries`] pages through a whole prefix.
    fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> Result<Page, MetaError>;
    /// Applies `update` to `name`. With `expected_revision` the update
    /// fails with [`MetaError::Conflict`] unless the entry is still at
    /// that revision; without it the update applies to the current entry
    /// (size-at-least and attribute changes compose).
    fn update(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        update: &Update,
    ) -> Result<Entry, MetaError>;
    /// Deletes the entry of `name` (its pieces must already be gone),
    /// compared against `expected_revision` as in [`MetaStore::update`].
    fn delete(&self, name: &str, expected_revision: Option<u64>) -> Result<(), MetaError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_exactly_the_names_with_the_prefix() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("a/").as_deref(), Some(&b"a0"[..]));
        // The last byte of a multi-byte character.
        let end = prefix_end("é").expect("non-empty");
        assert!("é".as_bytes() < &end[..] && "éz".as_bytes() < &end[..]);
        assert!("ê".as_bytes() >= &end[..]);
    }
}
