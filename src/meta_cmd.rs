//! `sluice meta`: the object servers of a striped-object deployment, as
//! its metadata service lists them (`add-server`, `ls-servers`,
//! `remove-server`). The service is chosen by `--meta URI`
//! ([`store::open_meta_store`]).

use clap::{Args, Subcommand};
use sluice_client::ObjUri;
use sluice_meta::MetaError;

use crate::UsageError;

pub(crate) mod store;

/// Arguments of `sluice meta`.
#[derive(Debug, Args)]
pub(crate) struct MetaArgs {
    /// The metadata service: sluice://HOST[:PORT] (a server started with
    /// 'sluice serve --meta DIR'), sluices://..., etcd://HOST:PORT[,...],
    /// etcds://HOST:PORT[,...]?tls-certificates=DIR (etcd over TLS; either
    /// etcd form takes &user=NAME&password-file=PATH), or sqlite:DIR.
    #[arg(long, value_name = "URI", global = true)]
    meta: Option<String>,
    #[command(subcommand)]
    command: MetaCommand,
}

#[derive(Debug, Subcommand)]
enum MetaCommand {
    /// Add object servers to the deployment (sluice://HOST:PORT...);
    /// striped objects are placed over them.
    AddServer {
        #[arg(value_name = "URI", required = true)]
        servers: Vec<String>,
    },
    /// The object servers of the deployment, one per line, in the order
    /// they were added.
    LsServers {
        /// Print a JSON array of their URIs instead.
        #[arg(long)]
        json: bool,
    },
    /// Remove object servers; refused while a striped object has a piece
    /// on one.
    RemoveServer {
        #[arg(value_name = "URI", required = true)]
        servers: Vec<String>,
    },
}

/// Runs `sluice meta`.
pub(crate) fn run(args: MetaArgs) -> anyhow::Result<()> {
    let uri = args
        .meta
        .ok_or_else(|| UsageError("--meta URI names the metadata service".into()))?;
    // Adding servers starts a deployment: only it may create a SQLite
    // store's directory.
    let create = matches!(args.command, MetaCommand::AddServer { .. });
    let store = store::open_meta_store(&uri, create)?;
    match args.command {
        MetaCommand::AddServer { servers } => {
            for s in &servers {
                s.parse::<ObjUri>()
                    .map_err(|e| UsageError(format!("object server {s}: {e}")))?;
            }
            for s in &servers {
                store
                    .add_server(s)
                    .map_err(|e| anyhow::Error::new(e).context(format!("cannot add {s}")))?;
            }
            Ok(())
        }
        MetaCommand::LsServers { json } => {
            let servers = store
                .servers()
                .map_err(|e| anyhow::Error::new(e).context("cannot list the object servers"))?;
            let text: String = if json {
                format!("{}\n", serde_json::Value::from(servers))
            } else {
                servers.iter().map(|s| format!("{s}\n")).collect()
            };
            print!("{text}");
            Ok(())
        }
        MetaCommand::RemoveServer { servers } => {
            for s in &servers {
                store.remove_server(s).map_err(|e| {
                    let hint = match &e {
                        MetaError::ServerInUse { .. } => {
                            "; remove those objects first ('sluice obj --meta URI rm NAME')"
                        }
                        _ => "",
                    };
                    anyhow::Error::new(e).context(format!("cannot remove {s}{hint}"))
                })?;
            }
            Ok(())
        }
    }
}
