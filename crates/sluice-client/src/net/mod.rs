//! What both protocols' clients share below their protocols: URIs
//! (`uri.rs`), sockets, TLS and connect timeouts (`transport.rs`), and the
//! receive buffer replies are parsed from (`recv.rs`), the multiplexer
//! core of a connection shared by many callers (`mux/`), and which
//! protocol a server greeted in (`greeting.rs`).

pub(crate) mod greeting;
pub(crate) mod mux;
pub(crate) mod recv;
pub(crate) mod transport;
pub(crate) mod uri;
