//! How a server offers TLS, which both protocols' handshakes read.

/// How a server offers TLS in its handshake, whichever the protocol: the
/// NBD spec's three modes, which the native object protocol shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum TlsPolicy {
    /// STARTTLS is refused. NBD's NOTLS: `NBD_OPT_STARTTLS` is answered
    /// with `NBD_REP_ERR_POLICY`.
    #[default]
    Off,
    /// STARTTLS is accepted; exports and partitions the server's catalog
    /// marks as needing TLS need it, others do not (NBD's SELECTIVETLS).
    Optional,
    /// Nothing but STARTTLS and ABORT is accepted before TLS. NBD's
    /// FORCEDTLS: every other option is answered with
    /// `NBD_REP_ERR_TLS_REQD`, and `NBD_OPT_EXPORT_NAME` (which cannot be
    /// refused) ends the session.
    Required,
}
