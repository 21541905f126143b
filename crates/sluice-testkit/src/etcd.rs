//! A real etcd cluster for tests: `n` members of the system's `etcd`
//! binary (Debian's etcd-server), on loopback ports chosen at run time,
//! their data in a temporary directory; one member can be killed and
//! restarted; every member is killed when the cluster is dropped.
//! [`EtcdCluster::start_tls`] makes one whose clients must use TLS and
//! show a certificate. Health and leadership are read from each member's
//! plain-HTTP metrics address, which TLS does not cover.
//!
//! ```ignore
//! let Some(mut cluster) = EtcdCluster::start_or_skip(3) else { return };
//! let uri = cluster.uri(); // etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
//! cluster.kill(0);
//! cluster.restart(0);
//! ```

use std::fs::File;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a cluster (or a restarted member) may take to become healthy.
const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// A running etcd cluster; see the module documentation.
#[derive(Debug)]
pub struct EtcdCluster {
    dir: tempfile::TempDir,
    binary: PathBuf,
    members: Vec<Member>,
}

#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    /// `/health` and `/metrics`, over plain HTTP even with TLS.
    metrics_port: u16,
    /// The arguments it was started with, to restart it alike.
    args: Vec<String>,
    process: Option<Child>,
}

impl EtcdCluster {
    /// The etcd binary: `$SLUICE_ETCD`, else `etcd` on the PATH.
    pub fn binary() -> Option<PathBuf> {
        match std::env::var_os("SLUICE_ETCD") {
            Some(p) => Some(PathBuf::from(p)),
            None => crate::programs::find("etcd"),
        }
    }

    /// Starts an `n`-member cluster, or, when no etcd binary is installed
    /// and the tests do not require one ([`crate::programs::required`]),
    /// says why the test is skipped and returns None. Panics if the cluster does not come up.
    pub fn start_or_skip(n: usize) -> Option<Self> {
        let binary = Self::binary_or_skip()?;
        match Self::start(&binary, n) {
            Ok(c) => Some(c),
            Err(e) => panic!("could not start a {n}-member etcd cluster: {e}"),
        }
    }

    /// The etcd binary, or None as
    /// [`programs::program_or_skip`](crate::programs::program_or_skip) says.
    fn binary_or_skip() -> Option<PathBuf> {
        match std::env::var_os("SLUICE_ETCD") {
            Some(p) => Some(PathBuf::from(p)),
            None => crate::programs::program_or_skip("etcd"),
        }
    }

    /// Starts an `n`-member cluster of `binary` and waits until every
    /// member reports healthy. Tries three times with new ports, since
    /// another process may take a port between choosing and binding it.
    pub fn start(binary: &Path, n: usize) -> io::Result<Self> {
        Self::start_with(binary, n, None)
    }

    /// Starts an `n`-member cluster whose client addresses speak only
    /// TLS with the certificates in `server_certificates` (a directory
    /// with `ca-cert.pem`, `server-cert.pem` and `server-key.pem`, as
    /// `Pki::server` makes) and require a client certificate signed by
    /// that CA. Skips as [`start_or_skip`](Self::start_or_skip) does.
    pub fn start_tls_or_skip(n: usize, server_certificates: &Path) -> Option<Self> {
        let binary = Self::binary_or_skip()?;
        match Self::start_with(&binary, n, Some(server_certificates)) {
            Ok(c) => Some(c),
            Err(e) => panic!("could not start a {n}-member etcd cluster with TLS: {e}"),
        }
    }

    fn start_with(binary: &Path, n: usize, tls: Option<&Path>) -> io::Result<Self> {
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(binary, n, tls) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no attempt made")))
    }

    fn try_start(binary: &Path, n: usize, tls: Option<&Path>) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("sluice-etcd-").tempdir()?;
        // Hold every port until all are chosen so no two are the same.
        let listeners = (0..3 * n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<io::Result<Vec<_>>>()?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<io::Result<Vec<_>>>()?;
        drop(listeners);
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", ports[3 * i + 1]);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let initial_cluster = (0..n)
            .map(|i| format!("m{i}={}", peer_url(i)))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("sluice-test-{}", dir.path().display());
        let members = (0..n)
            .map(|i| {
                let client_url = format!("{scheme}://127.0.0.1:{}", ports[3 * i]);
                let data = dir.path().join(format!("m{i}"));
                let mut args = vec![
                    format!("--name=m{i}"),
                    format!("--data-dir={}", data.display()),
                    format!("--listen-client-urls={client_url}"),
                    format!("--advertise-client-urls={client_url}"),
                    format!(
                        "--listen-metrics-urls=http://127.0.0.1:{}",
                        ports[3 * i + 2]
                    ),
                    format!("--listen-peer-urls={}", peer_url(i)),
                    format!("--initial-advertise-peer-urls={}", peer_url(i)),
                    format!("--initial-cluster={initial_cluster}"),
                    "--initial-cluster-state=new".to_owned(),
                    format!("--initial-cluster-token={token}"),
                    // Loopback: elect a leader in well under a second.
                    "--heartbeat-interval=50".to_owned(),
                    "--election-timeout=500".to_owned(),
                    "--logger=zap".to_owned(),
                    "--log-level=warn".to_owned(),
                ];
                if let Some(certs) = tls {
                    args.extend([
                        format!("--cert-file={}", certs.join("server-cert.pem").display()),
                        format!("--key-file={}", certs.join("server-key.pem").display()),
                        format!("--trusted-ca-file={}", certs.join("ca-cert.pem").display()),
                        "--client-cert-auth".to_owned(),
                    ]);
                }
                Member {
                    name: format!("m{i}"),
                    client_port: ports[3 * i],
                    metrics_port: ports[3 * i + 2],
                    args,
                    process: None,
                }
            })
            .collect();
        let mut cluster = Self {
            dir,
            binary: binary.to_owned(),
            members,
        };
        for i in 0..n {
            cluster.spawn(i)?;
        }
        for i in 0..n {
            cluster.wait_healthy(i)?;
        }
        Ok(cluster)
    }

    /// The members' client addresses, `127.0.0.1:PORT`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// `etcd://` and every member's client address.
    pub fn uri(&self) -> String {
        format!("etcd://{}", self.endpoints().join(","))
    }

    /// Kills member `i` (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].process.take() {
            // Already exited is fine: it is down either way.
            let _ = p.kill();
            let _ = p.wait();
        }
    }

    /// Starts member `i` again on its data directory (after
    /// [`kill`](Self::kill)) and waits until it is healthy.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_healthy(i)
    }

    /// The member that is the leader now, if one is up and knows it
    /// (from the members' metrics, `etcd_server_is_leader`).
    pub fn leader(&self) -> Option<usize> {
        let agent = agent();
        (0..self.members.len()).find(|&i| {
            self.members[i].process.is_some()
                && agent
                    .get(&format!(
                        "http://127.0.0.1:{}/metrics",
                        self.members[i].metrics_port
                    ))
                    .call()
                    .ok()
                    .and_then(|mut r| r.body_mut().read_to_string().ok())
                    .is_some_and(|m| m.lines().any(|l| l == "etcd_server_is_leader 1"))
        })
    }

    fn log_path(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.log", self.members[i].name))
    }

    fn spawn(&mut self, i: usize) -> io::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path(i))?;
        let child = Command::new(&self.binary)
            .args(&self.members[i].args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                io::Error::new(e.kind(), format!("start {}: {e}", self.binary.display()))
            })?;
        self.members[i].process = Some(child);
        Ok(())
    }

    /// Waits until member `i` answers `/health` with a leader.
    fn wait_healthy(&mut self, i: usize) -> io::Result<()> {
        let url = format!("http://127.0.0.1:{}/health", self.members[i].metrics_port);
        let agent = agent();
        let deadline = Instant::now() + HEALTHY_WITHIN;
        loop {
            if let Some(p) = self.members[i].process.as_mut() {
                if let Some(status) = p.try_wait()? {
                    self.members[i].process = None;
                    return Err(io::Error::other(format!(
                        "etcd member {} exited ({status}); its log:\n{}",
                        self.members[i].name,
                        self.log_tail(i)
                    )));
                }
            }
            let healthy = agent
                .get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .is_some_and(|body| body.contains(r#""health":"true""#));
            if healthy {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "etcd member {} not healthy within {HEALTHY_WITHIN:?}; its log:\n{}",
                    self.members[i].name,
                    self.log_tail(i)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(i)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// An HTTP client for the members' health and metrics endpoints.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(1)))
        .http_status_as_error(false)
        .build()
        .into()
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
