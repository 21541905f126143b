//! `sluice serve` as a service: systemd (socket activation, readiness),
//! signals (SIGTERM/SIGINT stop, SIGHUP reloads TLS credentials and
//! allow-lists), a pid file, dropping privileges, exiting with the
//! parent, and captive mode (`--run CMD`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use sluice_server::service::{notify, InheritedListeners, Notice};
use sluice_server::{ListenAddr, Server, ServerConfig, ServerHandle, TlsMode};

use crate::{read_config_file, serve_config, Listening, ServeArgs, TlsArgs, UsageError};

/// The NBD socket's name in captive mode's private directory.
pub(crate) const PRIVATE_NBD_SOCKET: &str = "nbd.sock";
/// The object socket's name in captive mode's private directory.
pub(crate) const PRIVATE_OBJECT_SOCKET: &str = "objects.sock";

pub(crate) mod s3;
mod stdin;

/// `--pidfile`, `--user`, `--group`, `--exit-with-parent`, `--run`,
/// `--print-uri`.
#[derive(Debug, Default, Args)]
pub(crate) struct ServiceArgs {
    /// Write the server's process id to PATH once it is listening
    /// (removed at exit).
    #[arg(long, value_name = "PATH")]
    pidfile: Option<PathBuf>,
    /// Switch to USER (name or number) after binding every listener and
    /// opening every export; its primary group too unless --group is given.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Switch to GROUP (name or number) after binding and opening.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Stop (as on SIGTERM) when the process that started the server exits.
    #[arg(long)]
    exit_with_parent: bool,
    /// Captive mode: serve on a private Unix socket (unless --listen is
    /// given), run CMD with `sh -c` once ready, with $uri and $nbd set to
    /// the NBD URI and $sluice to the object URI when objects are served,
    /// then stop and exit with CMD's exit status.
    #[arg(long, value_name = "CMD")]
    run: Option<String>,
    /// Print the URIs clients connect with (nbd://..., nbd+unix://...,
    /// sluice://...) on stdout once listening.
    #[arg(long)]
    print_uri: bool,
    /// Serve one NBD connection on standard input and output, then exit
    /// (as `nbdkit -s` and inetd servers do; libnbd's connect_command,
    /// nbd+ssh tunnels). Takes no --listen; logs go to stderr.
    #[arg(long, conflicts_with_all = ["run", "print_uri", "listen"])]
    stdin: bool,
}

/// Where the server listens and what it serves, for a status line.
fn status_line(server: &Server) -> String {
    let names: Vec<&str> = server.exports().iter().map(|e| e.name.as_str()).collect();
    let addrs: Vec<String> = server.local_addrs().iter().map(|a| a.to_string()).collect();
    let mut status = format!(
        "serving {} export(s) ({}) on {}",
        names.len(),
        names.join(", "),
        addrs.join(", ")
    );
    if !server.object_addrs().is_empty() {
        let objs: Vec<String> = server
            .object_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect();
        status.push_str(&format!("; objects on {}", objs.join(", ")));
    }
    status
}

/// The URI an NBD client connects to `addr` with (the default export).
fn nbd_uri(addr: &ListenAddr, tls: TlsMode) -> String {
    let s = if tls == TlsMode::Require { "s" } else { "" };
    match addr {
        ListenAddr::Tcp(a) => format!("nbd{s}://{a}"),
        ListenAddr::Unix(p) => format!("nbd{s}+unix:///?socket={}", p.display()),
    }
}

/// The URI an object client connects to `addr` with.
fn object_uri(addr: &ListenAddr, tls: TlsMode) -> String {
    let s = if tls == TlsMode::Require { "s" } else { "" };
    match addr {
        ListenAddr::Tcp(a) => format!("sluice{s}://{a}"),
        ListenAddr::Unix(p) => format!("sluice{s}+unix://{}", p.display()),
    }
}

/// The settings a reload replaces: the config file read again with the
/// TLS flags applied on top.
fn reload_config(config_file: Option<&Path>, tls: &TlsArgs) -> Result<ServerConfig> {
    let mut config = read_config_file(config_file)?;
    tls.apply(&mut config.tls);
    Ok(config)
}

/// A user or group given by name or number.
fn lookup_ids(
    user: Option<&str>,
    group: Option<&str>,
) -> Result<(Option<nix::unistd::Uid>, Option<nix::unistd::Gid>)> {
    use nix::unistd::{Gid, Group, Uid, User};
    let user = match user {
        Some(u) => Some(match u.parse::<u32>() {
            Ok(n) => (
                Uid::from_raw(n),
                User::from_uid(Uid::from_raw(n))
                    .ok()
                    .flatten()
                    .map(|u| u.gid),
            ),
            Err(_) => {
                let found = User::from_name(u)
                    .with_context(|| format!("cannot look up user {u:?}"))?
                    .ok_or_else(|| UsageError(format!("--user {u}: no such user")))?;
                (found.uid, Some(found.gid))
            }
        }),
        None => None,
    };
    let gid = match group {
        Some(g) => Some(match g.parse::<u32>() {
            Ok(n) => Gid::from_raw(n),
            Err(_) => {
                Group::from_name(g)
                    .with_context(|| format!("cannot look up group {g:?}"))?
                    .ok_or_else(|| UsageError(format!("--group {g}: no such group")))?
                    .gid
            }
        }),
        None => user.and_then(|(_, gid)| gid),
    };
    Ok((user.map(|(uid, _)| uid), gid))
}

/// Switches to `uid` and `gid` for good (supplementary groups: `gid` only).
fn drop_privileges(uid: Option<nix::unistd::Uid>, gid: Option<nix::unistd::Gid>) -> Result<()> {
    use nix::unistd::{setgid, setgroups, setuid};
    if uid.is_none() && gid.is_none() {
        // Nothing asked (no --user or --group): nothing dropped.
        return Ok(());
    }
    if let Some(gid) = gid {
        setgroups(&[gid])
            .with_context(|| format!("cannot set the supplementary groups to {gid}"))?;
        setgid(gid).with_context(|| format!("cannot switch to group {gid}"))?;
    }
    if let Some(uid) = uid {
        setuid(uid).with_context(|| format!("cannot switch to user {uid}"))?;
        if !uid.is_root() && setuid(nix::unistd::Uid::from_raw(0)).is_ok() {
            anyhow::bail!("switched to user {uid} but could switch back to root");
        }
    }
    tracing::info!(
        uid = nix::unistd::getuid().as_raw(),
        gid = nix::unistd::getgid().as_raw(),
        "privileges dropped"
    );
    Ok(())
}

/// The pid file: written once listening, removed at exit.
struct PidFile(PathBuf);

impl PidFile {
    fn create(path: &Path) -> Result<Self> {
        let pid = std::process::id();
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, format!("{pid}\n"))
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("cannot write the pid file {}", path.display()))?;
        Ok(Self(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.0) {
            tracing::warn!(path = %self.0.display(), error = %e, "cannot remove the pid file");
        }
    }
}

/// Begins a graceful shutdown and tells systemd so.
fn stop(handle: &ServerHandle) {
    if let Err(e) = notify(Notice::Stopping) {
        tracing::debug!(error = %e, "cannot notify systemd of stopping");
    }
    handle.shutdown();
}

/// SIGTERM/SIGINT stop the server; SIGHUP reloads.
fn start_signal_thread(
    handle: ServerHandle,
    config_file: Option<PathBuf>,
    tls: TlsArgs,
    status: String,
) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
        .context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("sluice-signals".into())
        .spawn(move || {
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                handle_signals(&mut signals, &handle, config_file.as_deref(), &tls, &status);
            }));
            if handled.is_err() {
                // Without this thread no signal would stop the server:
                // stop it now, cleanly, rather than leave it deaf.
                tracing::error!("the signal thread panicked (a bug); stopping the server");
                stop(&handle);
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// The signal thread's loop: returns once a signal stops the server.
fn handle_signals(
    signals: &mut signal_hook::iterator::Signals,
    handle: &ServerHandle,
    config_file: Option<&Path>,
    tls: &TlsArgs,
    status: &str,
) {
    use signal_hook::consts::SIGHUP;
    for sig in signals.forever() {
        if sig != SIGHUP {
            tracing::info!(signal = sig, "signal received");
            stop(handle);
            return;
        }
        tracing::info!("SIGHUP: reloading TLS credentials and allow-lists");
        let _ = notify(Notice::Reloading);
        let reloaded = reload_config(config_file, tls)
            .and_then(|config| handle.reload(&config).map_err(anyhow::Error::new));
        let line = match reloaded {
            Ok(()) => {
                tracing::info!("reloaded TLS credentials and allow-lists; connections kept");
                status.to_owned()
            }
            Err(e) => {
                tracing::error!(
                    "reload failed, still serving with the previous credentials and allow-lists: {e:#}"
                );
                format!("{status} (last reload failed: {e:#})")
            }
        };
        if let Err(e) = notify(Notice::Reloaded { status: &line }) {
            tracing::debug!(error = %e, "cannot notify systemd of the reload");
        }
    }
}

/// Runs captive mode's command; stops the server when it ends and
/// returns its exit status as an exit code.
fn start_captive(
    cmd: &str,
    server: &Server,
    tls: TlsMode,
) -> Result<std::sync::mpsc::Receiver<ExitCode>> {
    let mut command = std::process::Command::new("/bin/sh");
    command.arg("-c").arg(cmd).env_remove("NOTIFY_SOCKET");
    if let Some(addr) = server.local_addrs().first() {
        let uri = nbd_uri(addr, tls);
        command.env("uri", &uri).env("nbd", &uri);
    }
    if let Some(addr) = server.object_addrs().first() {
        command.env("sluice", object_uri(addr, tls));
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let handle = server.handle();
    let cmd = cmd.to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("sluice-run".into())
        .spawn(move || {
            let code = match child.wait() {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    let code = status
                        .code()
                        .or_else(|| status.signal().map(|s| 128 + s))
                        .unwrap_or(1);
                    tracing::info!(command = %cmd, code, "captive command ended; stopping");
                    ExitCode::from(u8::try_from(code).unwrap_or(1))
                }
                Err(e) => {
                    tracing::error!(command = %cmd, error = %e, "cannot wait for the captive command");
                    ExitCode::FAILURE
                }
            };
            // Sent before the server is stopped, so it is there when
            // `run` returns.
            let _ = tx.send(code);
            stop(&handle);
        })
        .context("cannot start the captive command's thread")?;
    Ok(rx)
}

/// `sluice serve`.
pub(crate) fn serve(mut args: ServeArgs) -> Result<ExitCode> {
    sluice_server::metrics::set_build_info(sluice_server::metrics::BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        commit: env!("SLUICE_GIT_COMMIT").to_owned(),
        profile: env!("SLUICE_BUILD_PROFILE").to_owned(),
    });
    let parent = rustix::process::getppid();
    // Before any thread starts: it unsets LISTEN_* in our environment.
    let inherited = InheritedListeners::from_systemd()?;
    let service = std::mem::take(&mut args.service);
    let private_dir = match (&service.run, args.listen.is_empty(), &inherited) {
        (_, true, None) if service.stdin => Some(
            tempfile::Builder::new()
                .prefix("sluice-stdin-")
                .tempdir()
                .context("cannot create a private directory for --stdin's socket")?,
        ),
        (Some(_), true, None) => Some(
            tempfile::Builder::new()
                .prefix("sluice-run-")
                .tempdir()
                .context("cannot create a private directory for captive mode's socket")?,
        ),
        _ => None,
    };
    let listening = match (&inherited, &private_dir) {
        (Some(i), _) => Listening::Inherited {
            objects: i.counts().1 > 0,
        },
        (None, Some(dir)) => Listening::Private(dir.path()),
        (None, None) => Listening::Default,
    };
    let config_file = args.config.clone();
    let tls_args = args.tls.clone();
    let (ids_user, ids_group) = lookup_ids(service.user.as_deref(), service.group.as_deref())?;
    let (config, created_dir) = serve_config(args, &listening)?;
    let tls = config.tls.mode;
    let s3_config = config.s3.clone();
    let s3_keys = s3::keys_before_start(&config)?;
    let tls_config = config.tls.clone();
    let server = match Server::bind_inherited(config, inherited) {
        Ok(s) => s,
        Err(e) => {
            if created_dir {
                // Empty again: the server removed the image it created.
                let _ = std::fs::remove_dir(crate::DEFAULT_DIR);
            }
            return Err(anyhow::Error::new(e).context("cannot start the server"));
        }
    };
    let s3 = s3_config
        .zip(s3_keys)
        .map(|(c, keys)| {
            let endpoint = s3::bind(&c, keys, &server, &tls_config)?;
            let metrics = endpoint.metrics();
            server
                .metrics()
                .add_source(std::sync::Arc::new(move |out: &mut String| {
                    metrics.render(out)
                }));
            anyhow::Ok(endpoint.start()?)
        })
        .transpose()?;
    // Before anything tells the world the server is up (the pid file,
    // the listening lines, READY=1), so a SIGTERM sent on seeing them
    // finds its handler.
    let status = status_line(&server);
    start_signal_thread(server.handle(), config_file, tls_args, status.clone())?;
    let pidfile = service
        .pidfile
        .as_deref()
        .map(PidFile::create)
        .transpose()?;
    drop_privileges(ids_user, ids_group)?;
    if service.exit_with_parent {
        // After dropping privileges: a change of credentials clears it.
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
            .context("cannot ask to be stopped when the parent exits")?;
        if rustix::process::getppid() != parent {
            anyhow::bail!("--exit-with-parent: the parent process has already exited");
        }
    }
    let mut stdout = std::io::stdout().lock();
    let mut print = |line: String| writeln!(stdout, "{line}").context("cannot write to stdout");
    // With --stdin, stdout is the connection.
    if service.run.is_none() && !service.stdin {
        for addr in server.local_addrs() {
            print(format!("listening on {addr}"))?;
        }
        for addr in server.object_addrs() {
            print(format!("objects listening on {addr}"))?;
        }
        if let Some(addr) = server.metrics_addr() {
            print(format!("metrics on http://{addr}/metrics"))?;
        }
        if let Some(s3) = &s3 {
            print(format!("s3 listening on {}", s3.local_addr()))?;
        }
    }
    if service.print_uri {
        for addr in server.local_addrs() {
            print(nbd_uri(addr, tls))?;
        }
        for addr in server.object_addrs() {
            print(object_uri(addr, tls))?;
        }
        if let Some(s3) = &s3 {
            print(s3.url())?;
        }
    }
    stdout.flush().context("cannot write to stdout")?;
    drop(stdout);
    tracing::info!("{status}");
    if let Err(e) = notify(Notice::Ready { status: &status }) {
        tracing::warn!(error = %e, "cannot notify systemd that the server is ready");
    }
    let captive = match &service.run {
        Some(cmd) => Some(start_captive(cmd, &server, tls)?),
        None => None,
    };
    if service.stdin {
        match (server.local_addrs().first(), &private_dir) {
            (Some(ListenAddr::Unix(socket)), Some(_)) => stdin::start_relay(&server, socket)?,
            _ => anyhow::bail!("--stdin: the server has no private socket to relay to"),
        }
    }
    let ran = server.run().context("server failed");
    if let Some(s3) = s3 {
        s3.stop();
    }
    ran?;
    drop(pidfile);
    drop(private_dir);
    match captive {
        Some(ended) => match ended.try_recv() {
            Ok(code) => Ok(code),
            Err(_) => {
                tracing::warn!("the server stopped before the captive command ended");
                Ok(ExitCode::FAILURE)
            }
        },
        None => Ok(ExitCode::SUCCESS),
    }
}
