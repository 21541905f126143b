//! What both protocols' clients share below their protocols: URIs
//! (`uri.rs`), sockets, TLS and connect timeouts (`transport.rs`), and the
//! receive buffer replies are parsed from (`recv.rs`), the multiplexer
//! core of a connection shared by many callers (`mux/`), which
//! protocol a server greeted in (`greeting.rs`), and the loop that drives
//! either protocol's handshake (`handshake.rs`).

pub(crate) mod greeting;
pub(crate) mod handshake;
pub(crate) mod mux;
pub(crate) mod recv;
pub(crate) mod transport;
pub(crate) mod uri;
