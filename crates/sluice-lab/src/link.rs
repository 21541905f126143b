//! Rate-limited network links for benchmarks: a server runs in a network
//! namespace of its own, joined to the root namespace (where the client
//! runs) by a veth pair whose two ends each shape their egress with
//! `tc tbf`. The paper settings (100 Mbit/s Ethernet, say) are then
//! reproduced on one host, and a link can be cut with an nftables rule
//! that drops everything arriving in the namespace (a member that stops
//! answering, as opposed to one that is killed).
//!
//! Everything is made with iproute2 (`ip`, `tc`) and `nft`, and removed on
//! drop, also while a panic unwinds: deleting the namespace deletes both
//! veth ends, their qdiscs and the namespace's nftables rules. Names and
//! subnets are unique per link: a link claims index `i` by creating the
//! namespace `sluice-link-i` (which fails when another run holds it) and
//! then uses the interfaces `sli-ih`/`sli-in` and the subnet
//! 10.201.0.0/16 + 4i (a /30). A run killed by SIGKILL leaves its
//! namespace behind; later runs skip its index, and
//! `ip netns del sluice-link-i` removes it.
//!
//! Sockets belong to the network namespace they are created in, whatever
//! thread uses them later: [`NetNamespace::enter`] creates sockets inside
//! from a short-lived thread that moved itself in with `setns(2)`, so the
//! link's own probes (RTT, bandwidth) need no process in the namespace.
//! Programs run inside with `ip netns exec` ([`NetNamespace::command`]).
//!
//! A long link ([`Link::create_long`]) adds a delay each way: clients
//! then reach a server through a [`WireRelay`] in the root namespace
//! ([`Link::route`]), which also keeps the rate, since `tc netem` is not
//! built into every kernel (see [`crate::relay`] for why not tbf).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use sluice_bench::peers::ServerHost;

use crate::relay::{Wire, WireRelay};

/// Link indexes (one /30 each in 10.201.0.0/16).
const INDEXES: u32 = 16_384;
/// Prefix of the namespaces links create.
pub const NAMESPACE_PREFIX: &str = "sluice-link-";
/// The nftables table a cut adds inside the namespace.
const CUT_TABLE: &str = "sluice_cut";

/// A link's rate limit, in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LinkRate(pub u64);

impl LinkRate {
    /// Bytes per second.
    pub fn bytes_per_second(self) -> f64 {
        self.0 as f64 / 8.0
    }

    /// The rate in Mbit/s, for people.
    pub fn mbit(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl std::fmt::Display for LinkRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} Mbit/s", self.mbit())
    }
}

impl FromStr for LinkRate {
    type Err = String;

    /// `100M`, `100mbit`, `800Mbit/s`, `1G`, `500k`, `2000000`: decimal
    /// bits per second, as network rates are counted.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("{s:?}: a link rate is a number of bits per second with k, M or G (e.g. 100M or 800mbit)")
        };
        let lower = s.trim().to_ascii_lowercase();
        let body = ["bit/s", "bps", "bit", "b/s"]
            .iter()
            .find_map(|u| lower.strip_suffix(u))
            .unwrap_or(&lower);
        let split = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (num, unit) = body.split_at(split);
        let n: f64 = num.parse().map_err(|_| bad())?;
        let scale = match unit {
            "" => 1.0,
            "k" => 1e3,
            "m" => 1e6,
            "g" => 1e9,
            _ => return Err(bad()),
        };
        let bits = n * scale;
        // tbf needs at least a few packets per second to make progress.
        if !(64_000.0..=1e12).contains(&bits) {
            return Err(format!(
                "{s:?}: a link rate must be between 64k and 1000G bits per second"
            ));
        }
        Ok(Self(bits as u64))
    }
}

/// What a link measured of itself after it was set up.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LinkMeasurement {
    /// The configured limit, bits per second (`None`: unshaped).
    pub rate_bits: Option<u64>,
    /// The configured delay each way, microseconds (`None`: none added).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_us: Option<f64>,
    /// Median round trip of a one-byte TCP exchange, microseconds.
    pub rtt_us: f64,
    /// TCP payload rate from the server's side to the client's, Mbit/s
    /// (what reads get).
    pub down_mbit_s: f64,
    /// TCP payload rate from the client's side to the server's, Mbit/s
    /// (what writes get).
    pub up_mbit_s: f64,
}

impl LinkMeasurement {
    /// "limit 100 Mbit/s, RTT 95 us, 94.1 Mbit/s down, 94.3 Mbit/s up".
    pub fn line(&self) -> String {
        let limit = self
            .rate_bits
            .map_or_else(|| "unshaped".to_owned(), |r| LinkRate(r).to_string());
        let delay = self
            .delay_us
            .map_or_else(String::new, |d| format!(", {d:.0} us added each way"));
        format!(
            "link: limit {limit}{delay}, RTT {:.0} us, {:.1} Mbit/s down, {:.1} Mbit/s up (measured)",
            self.rtt_us, self.down_mbit_s, self.up_mbit_s
        )
    }

    /// The slower direction's payload rate, bytes per second.
    pub fn bytes_per_second(&self) -> f64 {
        self.down_mbit_s.min(self.up_mbit_s) * 1e6 / 8.0
    }
}

/// Runs `program args` to completion; an error with its stderr if it fails.
fn run(program: &str, args: &[&str]) -> Result<()> {
    output(program, args).map(drop)
}

/// The standard output of `program args`, failing as [`run`] does.
fn output(program: &str, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program} (is iproute2/nftables installed?)"))?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// What the two shapers of a link have charged against their rate since
/// it was made: the bytes each sent (headers included, counted as `tbf`
/// counts them), the rate it charges them at and its bucket. Bytes over
/// rate is the time a direction was busy, the link's own utilization
/// counter, less up to one bucket per idle spell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShaperStats {
    /// Towards the server (the root namespace's end): what writes carry.
    pub up: u64,
    /// Towards the client (the namespace's end): what reads carry.
    pub down: u64,
    /// The rate both ends charge, bytes per second.
    pub rate_bytes_s: f64,
    /// The bucket's size, bytes: after an idle spell this much passes at
    /// once, without costing its time at the rate.
    pub burst_bytes: f64,
}

/// One root `tbf` qdisc as `tc -s -j qdisc show` prints it.
#[derive(serde::Deserialize)]
struct TbfStats {
    kind: String,
    bytes: u64,
    options: TbfOptions,
}

#[derive(serde::Deserialize)]
struct TbfOptions {
    rate: f64,
    burst: f64,
}

/// The `tbf` qdisc among `tc -s -j qdisc show`'s output.
fn tbf_stats(json: &[u8], dev: &str) -> Result<TbfStats> {
    let all: Vec<serde_json::Value> = serde_json::from_slice(json)
        .with_context(|| format!("cannot parse tc's statistics of {dev}"))?;
    all.into_iter()
        .filter_map(|q| serde_json::from_value::<TbfStats>(q).ok())
        .find(|q| q.kind == "tbf")
        .ok_or_else(|| anyhow!("{dev} has no tbf qdisc (the link is not shaped)"))
}

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct NetNamespace {
    name: String,
}

impl NetNamespace {
    /// Creates the namespace `name`; fails if it exists.
    pub fn create(name: &str) -> Result<Self> {
        run("ip", &["netns", "add", name])
            .with_context(|| format!("cannot create network namespace {name}"))?;
        let ns = Self {
            name: name.to_owned(),
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME ARGS...`.
    fn ip(&self, args: &[&str]) -> Result<()> {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// `ip netns exec NAME PROGRAM`: a command run inside the namespace
    /// (`ip` enters it and then execs the program, so the child's pid is
    /// the program's).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `f` on a thread that has moved into the namespace: sockets it
    /// creates live there.
    pub fn enter<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        let path = PathBuf::from("/run/netns").join(&self.name);
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let name = self.name.clone();
        std::thread::Builder::new()
            .name("bench-netns".into())
            .spawn(move || -> Result<T> {
                // Only this thread moves; it ends when `f` returns.
                rustix::thread::move_into_link_name_space(
                    file.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )
                .with_context(|| format!("cannot enter network namespace {name}"))?;
                Ok(f())
            })
            .context("cannot start a thread to enter a network namespace")?
            .join()
            .map_err(|_| anyhow!("a thread inside network namespace {} panicked", self.name))?
    }
}

impl Drop for NetNamespace {
    fn drop(&mut self) {
        if let Err(e) = run("ip", &["netns", "del", &self.name]) {
            eprintln!("warning: {e:#}");
        }
    }
}

/// A namespace for one server, joined to the root namespace by a veth
/// pair, each end's egress limited to the rate (when one is given).
#[derive(Debug)]
pub struct Link {
    ns: NetNamespace,
    index: u32,
    rate: Option<LinkRate>,
    /// Played by relays (`None`: clients connect directly).
    wire: Option<Wire>,
    relays: Mutex<Vec<WireRelay>>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Why links cannot be made here, or `None` when they can.
pub fn unavailable() -> Option<String> {
    match Link::create(None) {
        Ok(_) => None,
        Err(e) => Some(format!(
            "rate-limited links need root, network namespaces, veth and tc (iproute2): {e:#}"
        )),
    }
}

impl Link {
    /// A new namespace and veth pair, shaped to `rate` when given.
    pub fn create(rate: Option<LinkRate>) -> Result<Self> {
        Self::create_as(rate, None)
    }

    /// A new namespace and an unshaped veth pair that clients cross
    /// through relays playing a wire of `rate` (when given) with
    /// `one_way` of delay each way.
    pub fn create_long(rate: Option<LinkRate>, one_way: Duration) -> Result<Self> {
        let wire = Wire {
            one_way,
            rate: rate.map(LinkRate::bytes_per_second),
        };
        Self::create_as(rate, Some(wire))
    }

    fn create_as(rate: Option<LinkRate>, wire: Option<Wire>) -> Result<Self> {
        let (ns, index) = Self::claim()?;
        let link = Self {
            ns,
            index,
            rate,
            wire,
            relays: Mutex::new(Vec::new()),
        };
        link.wire()
            .with_context(|| format!("cannot set up link {}", link.ns.name))?;
        Ok(link)
    }

    /// Claims a free index by creating its namespace.
    fn claim() -> Result<(NetNamespace, u32)> {
        let start = (std::process::id().wrapping_mul(7919)
            + NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(104_729))
            % INDEXES;
        let mut last = None;
        for k in 0..64 {
            let i = (start + k) % INDEXES;
            let name = format!("{NAMESPACE_PREFIX}{i}");
            if PathBuf::from("/run/netns").join(&name).exists() {
                continue;
            }
            match NetNamespace::create(&name) {
                Ok(ns) => return Ok((ns, i)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("64 link indexes in a row are taken")))
    }

    fn host_if(&self) -> String {
        format!("sli-{}h", self.index)
    }

    fn ns_if(&self) -> String {
        format!("sli-{}n", self.index)
    }

    fn base(&self) -> u32 {
        u32::from(Ipv4Addr::new(10, 201, 0, 0)) + self.index * 4
    }

    /// The client's address (root namespace end).
    pub fn client_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base() + 1)
    }

    /// The server's address (namespace end): servers listen here.
    pub fn server_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base() + 2)
    }

    /// The configured limit.
    pub fn rate(&self) -> Option<LinkRate> {
        self.rate
    }

    /// Where a client connects to reach `server` (an address in the
    /// namespace) across the link: the server itself, or on a long link
    /// a new relay to it, which lives as long as the link.
    pub fn route(&self, server: SocketAddr) -> Result<SocketAddr> {
        let Some(wire) = self.wire else {
            return Ok(server);
        };
        let relay = WireRelay::start(server, wire)
            .with_context(|| format!("cannot relay the link to {server}"))?;
        let addr = relay.addr();
        self.relays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(relay);
        Ok(addr)
    }

    /// The namespace the server runs in.
    pub fn namespace(&self) -> &NetNamespace {
        &self.ns
    }

    /// `program` as a command run inside the server's namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.ns.command(program)
    }

    fn wire(&self) -> Result<()> {
        let (h, n) = (self.host_if(), self.ns_if());
        run(
            "ip",
            &["link", "add", &h, "type", "veth", "peer", "name", &n],
        )?;
        // From here the namespace's deletion removes both ends.
        run("ip", &["link", "set", &n, "netns", self.ns.name()])?;
        let host = format!("{}/30", self.client_addr());
        let server = format!("{}/30", self.server_addr());
        run("ip", &["addr", "add", &host, "dev", &h])?;
        run("ip", &["link", "set", &h, "up"])?;
        self.ns.ip(&["addr", "add", &server, "dev", &n])?;
        self.ns.ip(&["link", "set", &n, "up"])?;
        // On a long link the relays keep the rate.
        if let (Some(rate), None) = (self.rate, self.wire) {
            let args = tbf_args(rate);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut host_tc = vec!["qdisc", "add", "dev", &h, "root"];
            host_tc.extend_from_slice(&args);
            run("tc", &host_tc)?;
            let mut ns_tc = vec!["-n", self.ns.name(), "qdisc", "add", "dev", &n, "root"];
            ns_tc.extend_from_slice(&args);
            run("tc", &ns_tc)?;
        }
        Ok(())
    }

    /// The bytes both shapers have sent so far (`tc -s qdisc`); an
    /// unshaped link has none to report.
    pub fn shaper_stats(&self) -> Result<ShaperStats> {
        let (h, n) = (self.host_if(), self.ns_if());
        let host = tbf_stats(
            &output("tc", &["-s", "-j", "qdisc", "show", "dev", &h])?,
            &h,
        )?;
        let ns = tbf_stats(
            &output(
                "tc",
                &["-n", self.ns.name(), "-s", "-j", "qdisc", "show", "dev", &n],
            )?,
            &n,
        )?;
        Ok(ShaperStats {
            up: host.bytes,
            down: ns.bytes,
            rate_bytes_s: host.options.rate,
            burst_bytes: host.options.burst,
        })
    }

    /// A TCP listener on the server's address inside the namespace
    /// (`port` 0: any).
    pub fn listen(&self, port: u16) -> Result<TcpListener> {
        let addr = SocketAddr::from((self.server_addr(), port));
        self.ns
            .enter(move || TcpListener::bind(addr))?
            .with_context(|| format!("cannot listen on {addr} in {}", self.ns.name()))
    }

    /// A port free on the server's address.
    pub fn free_port(&self) -> Result<u16> {
        Ok(self
            .listen(0)?
            .local_addr()
            .context("cannot read a listener's address")?
            .port())
    }

    /// Measures the round trip (median of 50 one-byte exchanges) and the
    /// TCP payload rate each way (a timed transfer of about half a second
    /// at the limit, 32 MiB when unshaped).
    pub fn measure(&self) -> Result<LinkMeasurement> {
        let rtt_us = self.probe_rtt().context("cannot measure the link's RTT")?;
        let bytes = self.rate.map_or(32 << 20, |r| {
            ((r.bytes_per_second() * 0.5) as u64).clamp(256 << 10, 64 << 20)
        });
        let down = self
            .probe_rate(bytes, true)
            .context("cannot measure the link's rate (server to client)")?;
        let up = self
            .probe_rate(bytes, false)
            .context("cannot measure the link's rate (client to server)")?;
        Ok(LinkMeasurement {
            rate_bits: self.rate.map(|r| r.0),
            delay_us: self.wire.map(|w| w.one_way.as_secs_f64() * 1e6),
            rtt_us,
            down_mbit_s: down * 8.0 / 1e6,
            up_mbit_s: up * 8.0 / 1e6,
        })
    }

    fn connect(&self, listener: &TcpListener) -> Result<(TcpStream, TcpStream)> {
        let addr = self.route(listener.local_addr().context("probe listener address")?)?;
        let client = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .with_context(|| format!("cannot connect to {addr} over the link"))?;
        let (server, _) = listener.accept().context("probe accept")?;
        for s in [&client, &server] {
            s.set_nodelay(true).context("probe nodelay")?;
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .context("probe timeout")?;
        }
        Ok((client, server))
    }

    fn probe_rtt(&self) -> Result<f64> {
        let listener = self.listen(0)?;
        let (mut client, mut server) = self.connect(&listener)?;
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            let mut b = [0u8; 1];
            loop {
                if server.read(&mut b)? == 0 {
                    return Ok(());
                }
                server.write_all(&b)?;
            }
        });
        let mut samples = Vec::with_capacity(50);
        let mut b = [7u8; 1];
        for _ in 0..55 {
            let t = Instant::now();
            client.write_all(&b).context("RTT probe send")?;
            client.read_exact(&mut b).context("RTT probe receive")?;
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        drop(client);
        echo.join()
            .map_err(|_| anyhow!("the echo thread panicked"))?
            .context("RTT probe echo")?;
        // The first exchanges warm up the path.
        let mut s = samples.split_off(5);
        s.sort_by(f64::total_cmp);
        Ok(s[s.len() / 2])
    }

    /// Bytes per second of one transfer of `bytes`, from the server's
    /// side when `down`, timed at the receiver from its first byte.
    fn probe_rate(&self, bytes: u64, down: bool) -> Result<f64> {
        let listener = self.listen(0)?;
        let (client, server) = self.connect(&listener)?;
        let (mut tx, mut rx) = if down {
            (server, client)
        } else {
            (client, server)
        };
        let sender = std::thread::spawn(move || -> std::io::Result<()> {
            let chunk = vec![0x5au8; 256 << 10];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                tx.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            tx.shutdown(std::net::Shutdown::Write)
        });
        let mut buf = vec![0u8; 256 << 10];
        let mut got = 0u64;
        let mut first = None;
        let mut first_len = 0u64;
        loop {
            let n = rx.read(&mut buf).context("rate probe receive")?;
            if n == 0 {
                break;
            }
            if first.is_none() {
                first = Some(Instant::now());
                first_len = n as u64;
            }
            got += n as u64;
        }
        let elapsed = first.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0);
        sender
            .join()
            .map_err(|_| anyhow!("the sending thread panicked"))?
            .context("rate probe send")?;
        if got != bytes || elapsed <= 0.0 {
            bail!("the rate probe moved {got} of {bytes} bytes");
        }
        Ok((got - first_len) as f64 / elapsed)
    }

    /// Cuts the link: an nftables rule in the namespace drops every
    /// packet arriving there, so the server neither receives nor
    /// acknowledges anything (its connections stall; nothing is reset).
    pub fn cut(&self) -> Result<()> {
        let rules = format!(
            "table inet {CUT_TABLE} {{\n  chain input {{\n    type filter hook input priority -300; policy drop;\n  }}\n}}\n"
        );
        self.nft(&["-f", "-"], Some(&rules))
            .with_context(|| format!("cannot cut link {}", self.ns.name()))
    }

    /// Undoes [`Link::cut`].
    pub fn restore(&self) -> Result<()> {
        self.nft(&["delete", "table", "inet", CUT_TABLE], None)
            .with_context(|| format!("cannot restore link {}", self.ns.name()))
    }

    fn nft(&self, args: &[&str], input: Option<&str>) -> Result<()> {
        let mut cmd = self.command("nft");
        cmd.args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .context("cannot run nft (apt-get install nftables)")?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .context("cannot write nft's rules")?;
        }
        let out = child.wait_with_output().context("cannot wait for nft")?;
        if !out.status.success() {
            bail!(
                "nft {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

/// Peer servers (sluice-bench's `PeerServer`) and the comparison
/// matrix run their server processes inside the link's namespace.
impl ServerHost for Link {
    fn server_addr(&self) -> IpAddr {
        IpAddr::V4(Self::server_addr(self))
    }

    fn free_port(&self) -> Result<u16> {
        Self::free_port(self)
    }

    fn command(&self, program: &std::ffi::OsStr) -> Command {
        Self::command(self, program)
    }
}

impl Drop for Link {
    /// Deletes the veth pair (both ends, at once) before the namespace
    /// goes: a namespace's interfaces are otherwise removed by the kernel
    /// some time after `ip netns del` returns.
    fn drop(&mut self) {
        // Relays first: their connections end while the link still
        // carries their ends.
        self.relays
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        if let Err(e) = run("ip", &["link", "del", &self.host_if()]) {
            eprintln!("warning: {e:#}");
        }
    }
}

/// `tbf rate R burst B latency 50ms`: a burst of at least one timer
/// tick's worth of bytes at 250 Hz (and 64 KiB, one GSO packet), so the
/// limit holds on kernels with coarse timers; a 50 ms queue.
fn tbf_args(rate: LinkRate) -> Vec<String> {
    let burst = ((rate.bytes_per_second() / 250.0) as u64).max(64 << 10);
    vec![
        "tbf".into(),
        "rate".into(),
        format!("{}bit", rate.0),
        "burst".into(),
        burst.to_string(),
        "latency".into(),
        "50ms".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_as_decimal_bits() {
        let p = |s: &str| s.parse::<LinkRate>().map(|r| r.0);
        assert_eq!(p("100M"), Ok(100_000_000));
        assert_eq!(p("100mbit"), Ok(100_000_000));
        assert_eq!(p("800Mbit/s"), Ok(800_000_000));
        assert_eq!(p("1.5G"), Ok(1_500_000_000));
        assert_eq!(p("500k"), Ok(500_000));
        assert_eq!(p("2000000"), Ok(2_000_000));
        for bad in ["", "fast", "100X", "10", "-5M", "1e3M", "2000G"] {
            assert!(p(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn tbf_bursts_cover_a_timer_tick() {
        assert_eq!(
            tbf_args(LinkRate(100_000_000)).join(" "),
            "tbf rate 100000000bit burst 65536 latency 50ms"
        );
        // 10 Gbit/s: 5 MB per 4 ms tick.
        assert_eq!(tbf_args(LinkRate(10_000_000_000))[4], "5000000");
    }

    /// Links need root and network namespaces; say so and pass where
    /// there are none (containers without CAP_NET_ADMIN).
    fn link_or_skip(rate: Option<LinkRate>) -> Option<Link> {
        match Link::create(rate) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("skipping: cannot create a network namespace link here: {e:#}");
                None
            }
        }
    }

    #[test]
    fn a_shaped_link_measures_near_its_rate_and_is_removed_on_drop() {
        let Some(link) = link_or_skip(Some(LinkRate(20_000_000))) else {
            return;
        };
        let name = link.namespace().name().to_owned();
        let ns_path = PathBuf::from("/run/netns").join(&name);
        assert!(ns_path.exists());
        let m = link.measure().unwrap();
        // 20 Mbit/s less TCP/IP headers (about 5 %); the bound above is
        // what shaping must keep (an unshaped veth moves gigabits).
        for rate in [m.down_mbit_s, m.up_mbit_s] {
            assert!((14.0..21.0).contains(&rate), "{m:?}");
        }
        assert!(m.rtt_us > 0.0, "{m:?}");
        assert!(m.line().contains("20 Mbit/s"), "{}", m.line());
        // The probe moved 1.25 MB each way (half a second at the rate):
        // both shapers counted it, with TCP/IP headers on top.
        let shaped = link.shaper_stats().unwrap();
        assert_eq!(shaped.rate_bytes_s, 2_500_000.0, "{shaped:?}");
        assert!(
            (65_000.0..66_000.0).contains(&shaped.burst_bytes),
            "{shaped:?}"
        );
        for sent in [shaped.up, shaped.down] {
            assert!((1_250_000..1_500_000).contains(&sent), "{shaped:?}");
        }
        let host_if = link.host_if();
        drop(link);
        assert!(!ns_path.exists(), "namespace {name} left behind");
        let out = Command::new("ip")
            .args(["link", "show", &host_if])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{host_if} left behind");
    }

    #[test]
    fn a_long_link_measures_its_delay_in_the_round_trip() {
        let one_way = Duration::from_millis(2);
        let Ok(link) = Link::create_long(Some(LinkRate(200_000_000)), one_way) else {
            eprintln!("skipping: cannot create a network namespace link here");
            return;
        };
        let m = link.measure().unwrap();
        assert_eq!(m.delay_us, Some(2000.0));
        // Two delays and the wake-ups a busy machine adds (the relay's
        // schedule is checked exactly by its own tests).
        assert!(m.rtt_us >= 4000.0, "{m:?}");
        assert!(m.line().contains("2000 us added each way"), "{}", m.line());
        // The relay never passes more than the rate (less when the
        // machine is busy), and no shaper is there.
        for rate in [m.down_mbit_s, m.up_mbit_s] {
            assert!(rate > 0.0 && rate < 210.0, "{m:?}");
        }
        let qdiscs = output("tc", &["qdisc", "show", "dev", &link.host_if()]).unwrap();
        assert!(!String::from_utf8_lossy(&qdiscs).contains("tbf"));
        // A server reached by its route answers through the relay.
        let listener = link.listen(0).unwrap();
        let at = link.route(listener.local_addr().unwrap()).unwrap();
        assert!(at.ip().is_loopback());
        let mut c = TcpStream::connect(at).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let t = Instant::now();
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        assert!(t.elapsed() >= one_way, "{:?}", t.elapsed());
        assert_eq!(&b, b"ping");
    }

    #[test]
    fn links_have_their_own_names_and_subnets() {
        let Some(a) = link_or_skip(None) else {
            return;
        };
        let b = Link::create(None).unwrap();
        assert_ne!(a.namespace().name(), b.namespace().name());
        assert_ne!(a.server_addr(), b.server_addr());
        assert_ne!(a.client_addr(), b.client_addr());
        // Each server address is reached over its own link.
        for l in [&a, &b] {
            let listener = l.listen(0).unwrap();
            let addr = listener.local_addr().unwrap();
            assert_eq!(addr.ip(), IpAddr::V4(l.server_addr()));
            let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            assert_eq!(s.local_addr().unwrap().ip(), IpAddr::V4(l.client_addr()));
        }
    }

    #[test]
    fn a_cut_link_drops_everything_until_restored() {
        let Some(link) = link_or_skip(None) else {
            return;
        };
        let listener = link.listen(0).unwrap();
        let addr = listener.local_addr().unwrap();
        let (mut c, mut s) = link.connect(&listener).unwrap();
        c.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        link.cut().unwrap();
        // Established and new connections both go quiet.
        c.write_all(b"y").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(s.read_exact(&mut b).is_err(), "a byte crossed a cut link");
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
        link.restore().unwrap();
        // TCP retransmits the byte once the link is back.
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"y");
        assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn a_command_runs_inside_the_namespace() {
        let Some(link) = link_or_skip(None) else {
            return;
        };
        let out = link
            .command("ip")
            .args(["-4", "-o", "addr", "show"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&link.server_addr().to_string()) && !text.contains("eth0"),
            "{text}"
        );
    }
}
