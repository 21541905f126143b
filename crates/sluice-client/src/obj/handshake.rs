//! Opening an object-protocol connection: the socket and TLS of the NBD
//! client (`transport`), and the native handshake, driving
//! `sluice_obj_proto::ClientHandshake` over a blocking stream.

use sluice_obj_proto::{ClientHandshake, ClientHandshakeConfig, ClientStatus, Negotiated};

use super::{ObjError, ObjOptions, DEFAULT_PARTITION};
use crate::net::greeting::{wrong_protocol, Expected};
use crate::net::transport::{client_config, open_stream, Stream};
use crate::net::uri::ObjUri;
use crate::ClientError;

/// Connects and negotiates; returns the stream in transmission, with the
/// request timeout (if any) as its read timeout, and what was agreed.
pub(crate) fn open(uri: &ObjUri, options: &ObjOptions) -> Result<(Stream, Negotiated), ObjError> {
    let server = uri.to_string();
    let io = |source| ObjError::Io {
        server: server.clone(),
        source,
    };
    let mut stream = open_stream(&uri.target, options.connect_timeout)?;
    let mut machine = ClientHandshake::new(ClientHandshakeConfig {
        features: options.features,
        partition: uri.partition.unwrap_or(DEFAULT_PARTITION),
        tls: uri.tls.is_some(),
        exports: options.exports.clone(),
    });
    let mut input: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut greeted = false;
    let session = loop {
        if !greeted && input.len() >= 8 {
            greeted = true;
            let target = uri.target.to_string();
            if let Some(e) = wrong_protocol(&input, Expected::Objects, &target) {
                return Err(e.into());
            }
        }
        let (used, status) =
            machine
                .handle_input(&input)
                .map_err(|source| ObjError::Handshake {
                    server: server.clone(),
                    source,
                })?;
        input.drain(..used);
        let out = machine.poll_output();
        match status {
            ClientStatus::NeedInput => {}
            ClientStatus::StartTls => {
                if !input.is_empty() {
                    return Err(ObjError::Violation {
                        server,
                        reason: "plaintext bytes after accepting STARTTLS".into(),
                    });
                }
                let Some(settings) = &uri.tls else {
                    return Err(ObjError::Violation {
                        server,
                        reason: "STARTTLS accepted though not asked for".into(),
                    });
                };
                let target = uri.target.to_string();
                let config = client_config(settings, &target)?;
                stream = stream.start_tls(config, &settings.server_name, &target)?;
            }
            ClientStatus::Done(session) => {
                if !input.is_empty() {
                    return Err(ObjError::Violation {
                        server,
                        reason: "unexpected bytes after the handshake".into(),
                    });
                }
                break *session;
            }
        }
        if !out.is_empty() {
            stream.write_all(&out).map_err(io)?;
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::ConnectTimeout {
                    target: uri.target.to_string(),
                    after: options.connect_timeout,
                }
                .into())
            }
            Err(e) => return Err(io(e)),
        };
        if n == 0 {
            return Err(ObjError::Closed { server });
        }
        input.extend_from_slice(&chunk[..n]);
    };
    stream.set_timeouts(options.request_timeout).map_err(io)?;
    Ok((stream, session))
}
