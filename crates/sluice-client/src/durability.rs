//! When a change must be on stable storage, for both protocols: the
//! argument that replaces a bare `fua: bool` in the client's calls.

/// When a change the server acknowledges must be durable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// The server may hold the change in memory until the next flush (or
    /// its own write-back); a crash before then may lose it.
    #[default]
    Buffered,
    /// On stable storage before the reply (the protocols' FUA flag).
    Durable,
}

impl Durability {
    /// Whether the reply waits for stable storage: the wire's FUA bit.
    pub fn is_durable(self) -> bool {
        self == Self::Durable
    }

    /// From a protocol's or a device's FUA bit.
    pub fn from_fua(fua: bool) -> Self {
        if fua {
            Self::Durable
        } else {
            Self::Buffered
        }
    }
}
