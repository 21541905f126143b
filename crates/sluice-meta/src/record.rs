//! The stored form of an entry, shared by the backends: serde_json of a
//! private struct, so the stored bytes never depend on the public types'
//! layout.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::{Entry, EntryState, Layout, MetaError, Piece, Redundancy};

#[derive(Serialize, Deserialize)]
struct StoredPiece {
    server: String,
    partition: u64,
    object: u64,
}

/// A layout's [`Redundancy`]; absent (plain striping) in records from
/// before objects had any.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum StoredRedundancy {
    Replicas(u8),
    Erasure { data: u8, parity: u8 },
}

impl Default for StoredRedundancy {
    fn default() -> Self {
        Self::Replicas(1)
    }
}

impl StoredRedundancy {
    fn is_plain(&self) -> bool {
        *self == Self::default()
    }
}

impl From<Redundancy> for StoredRedundancy {
    fn from(r: Redundancy) -> Self {
        match r {
            Redundancy::Replicas(copies) => Self::Replicas(copies),
            Redundancy::Erasure { data, parity } => Self::Erasure { data, parity },
        }
    }
}

impl From<StoredRedundancy> for Redundancy {
    fn from(r: StoredRedundancy) -> Self {
        match r {
            StoredRedundancy::Replicas(copies) => Self::Replicas(copies),
            StoredRedundancy::Erasure { data, parity } => Self::Erasure { data, parity },
        }
    }
}

/// A layout stored on its own (the pending one; the current layout's
/// fields sit in [`Record`] itself, as they always have).
#[derive(Serialize, Deserialize)]
struct StoredLayout {
    stripe_unit: u64,
    pieces: Vec<StoredPiece>,
    #[serde(default, skip_serializing_if = "StoredRedundancy::is_plain")]
    redundancy: StoredRedundancy,
}

impl StoredLayout {
    fn from_layout(l: &Layout) -> Self {
        Self {
            stripe_unit: l.stripe_unit,
            pieces: stored_pieces(&l.pieces),
            redundancy: l.redundancy.into(),
        }
    }

    fn into_layout(self) -> Layout {
        Layout {
            stripe_unit: self.stripe_unit,
            pieces: pieces(self.pieces),
            redundancy: self.redundancy.into(),
        }
    }
}

fn stored_pieces(pieces: &[Piece]) -> Vec<StoredPiece> {
    pieces
        .iter()
        .map(|p| StoredPiece {
            server: p.server.clone(),
            partition: p.partition,
            object: p.object,
        })
        .collect()
}

fn pieces(stored: Vec<StoredPiece>) -> Vec<Piece> {
    stored
        .into_iter()
        .map(|p| Piece {
            server: p.server,
            partition: p.partition,
            object: p.object,
        })
        .collect()
}

#[derive(Serialize, Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum StoredState {
    Creating,
    Writing,
    Ready,
    Removing,
}

/// Attribute values are bytes; JSON has no bytes, so they are stored as
/// base64 strings.
#[derive(Serialize, Deserialize)]
pub(crate) struct Record {
    stripe_unit: u64,
    pieces: Vec<StoredPiece>,
    #[serde(default, skip_serializing_if = "StoredRedundancy::is_plain")]
    redundancy: StoredRedundancy,
    state: StoredState,
    size: u64,
    attrs: BTreeMap<String, String>,
    /// A put's new version, while it is written (absent in records from
    /// before puts could replace an object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending: Option<StoredLayout>,
    /// A number the writer of this version drew at random: the etcd
    /// backend tells from it whether a write whose reply was lost landed.
    #[serde(default)]
    pub(crate) writer: u64,
}

impl Record {
    pub(crate) fn from_entry(entry: &Entry, writer: u64) -> Self {
        Self {
            stripe_unit: entry.layout.stripe_unit,
            pieces: stored_pieces(&entry.layout.pieces),
            redundancy: entry.layout.redundancy.into(),
            state: match entry.state {
                EntryState::Creating => StoredState::Creating,
                EntryState::Writing => StoredState::Writing,
                EntryState::Ready => StoredState::Ready,
                EntryState::Removing => StoredState::Removing,
            },
            size: entry.size,
            attrs: entry
                .attrs
                .iter()
                .map(|(k, v)| (k.clone(), BASE64.encode(v)))
                .collect(),
            pending: entry.pending.as_ref().map(StoredLayout::from_layout),
            writer,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record of strings and numbers always serialises")
    }

    /// Decodes what a backend stored for `name` at `revision`.
    pub(crate) fn decode(
        name: &str,
        revision: u64,
        bytes: &[u8],
    ) -> Result<(Entry, u64), MetaError> {
        let corrupt = |why: String| MetaError::Invalid {
            what: format!("stored entry of {name:?}"),
            why,
        };
        let r: Self = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        let mut attrs = BTreeMap::new();
        for (k, v) in r.attrs {
            let bytes = BASE64
                .decode(&v)
                .map_err(|e| corrupt(format!("attribute {k:?} is not base64: {e}")))?;
            attrs.insert(k, bytes);
        }
        let entry = Entry {
            name: name.to_owned(),
            layout: Layout {
                stripe_unit: r.stripe_unit,
                pieces: pieces(r.pieces),
                redundancy: r.redundancy.into(),
            },
            state: match r.state {
                StoredState::Creating => EntryState::Creating,
                StoredState::Writing => EntryState::Writing,
                StoredState::Ready => EntryState::Ready,
                StoredState::Removing => EntryState::Removing,
            },
            size: r.size,
            attrs,
            pending: r.pending.map(StoredLayout::into_layout),
            revision,
        };
        Ok((entry, r.writer))
    }
}
