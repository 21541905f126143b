//! Reaching an etcd cluster when a store opens: one read, retried through
//! transient failures for at most the connect timeout, so that a cluster
//! that is not there fails at once with one line naming its endpoints
//! instead of the first operation retrying for its whole deadline.

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::runtime::Runtime;

use crate::etcd::{backend, transient, EtcdConfig};
use crate::MetaError;

/// Connects to the cluster `config` names and reads from it once.
pub(crate) fn connect(
    runtime: &Runtime,
    config: &EtcdConfig,
    options: ConnectOptions,
) -> Result<Client, MetaError> {
    let deadline = Instant::now() + config.connect_timeout;
    let unreachable = |e: Option<&etcd_client::Error>| MetaError::Unreachable {
        backend: format!("etcd at {}", config.endpoints.join(",")),
        after: config.connect_timeout,
        reason: e.map_or_else(|| "no answer".to_owned(), reason),
    };
    let mut pause = Duration::from_millis(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let attempt = runtime.block_on(async {
            tokio::time::timeout(left, async {
                let mut client = Client::connect(&config.endpoints, Some(options.clone())).await?;
                let probe = format!("{}servers/", config.prefix);
                let count = GetOptions::new().with_count_only();
                client.get(probe, Some(count)).await?;
                Ok::<_, etcd_client::Error>(client)
            })
            .await
        });
        match attempt {
            Ok(Ok(client)) => return Ok(client),
            Err(_elapsed) => return Err(unreachable(None)),
            Ok(Err(e)) if transient(&e) => {
                if Instant::now() + pause >= deadline {
                    return Err(unreachable(Some(&e)));
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
            Ok(Err(e)) => return Err(backend(config, "connect", e)),
        }
    }
}

/// What went wrong, in the words of the innermost cause (tonic's status
/// carries its transport error as a source: "Connection refused").
fn reason(e: &etcd_client::Error) -> String {
    let mut innermost: &(dyn std::error::Error + 'static) = match e {
        etcd_client::Error::GRpcStatus(s) => s,
        other => other,
    };
    while let Some(cause) = innermost.source() {
        innermost = cause;
    }
    match e {
        // A status with no cause: its message is all there is.
        etcd_client::Error::GRpcStatus(s) if innermost.is::<tonic::Status>() => {
            s.message().to_owned()
        }
        _ => innermost.to_string(),
    }
}
