//! `sluice meta`: the object servers of a striped-object deployment, as
//! its metadata service lists them (`add-server`, `ls-servers`,
//! `remove-server`), and the redundancy its puts get by default
//! (`default-redundancy`). The service is chosen by `--meta URI`
//! ([`store::open_meta_store`]).

use clap::{Args, Subcommand};
use sluice_client::ObjUri;
use sluice_meta::{MetaError, Redundancy};

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
    /// Print the redundancy a put that names none gets (none, replicas R
    /// or ec K+M), or set it with --replicas or --ec. A deployment with
    /// fewer servers than it needs puts without redundancy (and warns).
    DefaultRedundancy {
        /// Keep every stripe unit on R distinct servers (1: none).
        #[arg(long, value_name = "R", value_parser = clap::value_parser!(u8).range(1..=16))]
        replicas: Option<u8>,
        /// Erasure-code new objects, K data and M parity units a row.
        #[arg(long, value_name = "K+M", value_parser = crate::obj_cmd::parse_erasure, conflicts_with = "replicas")]
        ec: Option<(u8, u8)>,
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
        MetaCommand::DefaultRedundancy { replicas, ec } => {
            let set = match (replicas, ec) {
                (Some(copies), _) => Some(Redundancy::Replicas(copies)),
                (None, Some((data, parity))) => Some(Redundancy::Erasure { data, parity }),
                (None, None) => None,
            };
            if let Some(r) = set {
                store.set_default_redundancy(r).map_err(|e| {
                    anyhow::Error::new(e).context("cannot set the default redundancy")
                })?;
            }
            let now = store
                .default_redundancy()
                .map_err(|e| anyhow::Error::new(e).context("cannot read the default redundancy"))?;
            println!("{now}");
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
