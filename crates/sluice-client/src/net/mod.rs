//! What both protocols' clients share below their protocols: URIs
//! (`uri.rs`), sockets, TLS and connect timeouts (`transport.rs`), and the
//! receive buffer replies are parsed from (`recv.rs`).

pub(crate) mod mux;
pub(crate) mod recv;
pub(crate) mod transport;
pub(crate) mod uri;
