//! The PostgreSQL cluster pgbench runs against: initdb on a mounted
//! sluice volume, started and stopped as the postgres user, with the
//! pgbench runs inside it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{parse_pgbench_output, Commit, PgTools, PgbenchOutput, UserIds, PG_USER};

/// A PostgreSQL cluster in a folder of a mounted filesystem, run as the
/// `postgres` user; stopped on drop.
pub(super) struct Cluster<'a> {
    tools: &'a PgTools,
    user: UserIds,
    /// The folder the cluster owns (data, socket, log).
    home: PathBuf,
    running: bool,
}

impl<'a> Cluster<'a> {
    fn data(&self) -> PathBuf {
        self.home.join("data")
    }

    fn socket_dir(&self) -> PathBuf {
        self.home.join("run")
    }

    /// A command running `program` as the cluster's user, talking to the
    /// cluster through its socket.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.tools.program(program));
        c.uid(self.user.uid)
            .gid(self.user.gid)
            .current_dir(&self.home)
            .stdin(Stdio::null())
            .env("PGHOST", self.socket_dir())
            .env("PGPORT", "5432")
            .env("PGUSER", PG_USER)
            .env("PGDATABASE", PG_USER)
            .env("HOME", &self.home)
            .env("LC_ALL", "C")
            .env_remove("PGOPTIONS");
        c
    }

    fn output(&self, mut c: Command, what: &str) -> Result<Output> {
        let out = c.output().with_context(|| format!("cannot run {what}"))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let log = std::fs::read_to_string(self.home.join("postgres.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "{what} failed ({}): {}{}",
                out.status,
                err.trim(),
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (server log: {})",
                        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                    )
                }
            );
        }
        Ok(out)
    }

    /// initdb in `mnt`/pg, settings appended, started.
    pub(super) fn create(
        tools: &'a PgTools,
        user: UserIds,
        mnt: &Path,
        max_connections: u32,
    ) -> Result<Self> {
        let home = mnt.join("pg");
        std::fs::create_dir_all(home.join("run"))
            .with_context(|| format!("cannot create {}", home.display()))?;
        for d in [home.clone(), home.join("run")] {
            std::os::unix::fs::chown(&d, Some(user.uid), Some(user.gid))
                .with_context(|| format!("cannot give {} to {PG_USER}", d.display()))?;
        }
        let mut me = Self {
            tools,
            user,
            home,
            running: false,
        };
        let mut c = me.command("initdb");
        c.arg("-D")
            .arg(me.data())
            .args(["-A", "trust", "-U", PG_USER, "--no-sync"]);
        me.output(c, "initdb")?;
        // Sockets only, in our own folder; enough connections for the
        // most clients; WAL bounded well inside the image.
        let settings = format!(
            "\n# sluice bench pgbench\nlisten_addresses = ''\nunix_socket_directories = '{}'\nmax_connections = {}\nmax_wal_size = 256MB\n",
            me.socket_dir().display(),
            max_connections
        );
        let conf = me.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf)
            .with_context(|| format!("cannot read {}", conf.display()))?;
        text.push_str(&settings);
        std::fs::write(&conf, text).with_context(|| format!("cannot write {}", conf.display()))?;
        let mut c = me.command("pg_ctl");
        c.arg("-D")
            .arg(me.data())
            .arg("-l")
            .arg(me.home.join("postgres.log"))
            .args(["-w", "-t", "60", "start"]);
        // Marked running first: a start that timed out may still leave a
        // server behind, which drop then stops.
        me.running = true;
        me.output(c, "pg_ctl start")?;
        Ok(me)
    }

    /// SQL statements, each on its own (VACUUM cannot run in a
    /// transaction block).
    fn sql(&self, statements: &[&str]) -> Result<()> {
        let mut c = self.command("psql");
        c.args(["-X", "-q", "-v", "ON_ERROR_STOP=1"]);
        for s in statements {
            c.args(["-c", s]);
        }
        self.output(c, &format!("psql {}", statements.join("; ")))
            .map(drop)
    }

    /// `pgbench -i` at `scale`, then the tables and indexes read into
    /// the caches (pg_prewarm), so the first measured run does not pay
    /// for cold reads that the later ones do not.
    pub(super) fn populate(&self, scale: u32) -> Result<()> {
        let mut c = self.command("pgbench");
        c.args(["-i", "-q", "-s", &scale.to_string()]);
        self.output(c, &format!("pgbench -i -s {scale}"))?;
        self.sql(&[
            "CREATE EXTENSION IF NOT EXISTS pg_prewarm",
            "SELECT pg_prewarm(c.oid) FROM pg_class c WHERE c.relname LIKE 'pgbench_%' AND c.relkind IN ('r', 'i')",
        ])
    }

    /// One timed TPC-B-like run. Vacuum and checkpoint first (what
    /// pgbench's own pre-run vacuum does, and a clean start for each run),
    /// outside the measured part.
    pub(super) fn run(
        &self,
        clients: u32,
        threads: u32,
        secs: u32,
        commit: Commit,
    ) -> Result<PgbenchOutput> {
        self.sql(&[
            "VACUUM pgbench_branches",
            "VACUUM pgbench_tellers",
            "TRUNCATE pgbench_history",
            "CHECKPOINT",
        ])?;
        let mut c = self.command("pgbench");
        c.env(
            "PGOPTIONS",
            format!("-c synchronous_commit={}", commit.name()),
        )
        .args(["-n", "-c", &clients.to_string()])
        .args(["-j", &threads.to_string()])
        .args(["-T", &secs.to_string()])
        .args(["-P", &secs.to_string()]);
        let out = self.output(
            c,
            &format!(
                "pgbench -c {clients} -T {secs} (synchronous_commit={})",
                commit.name()
            ),
        )?;
        parse_pgbench_output(&String::from_utf8_lossy(&out.stdout))
    }

    fn stop(&mut self) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        let mut c = self.command("pg_ctl");
        c.arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "-t", "30", "stop"]);
        let fast = self.output(c, "pg_ctl stop");
        if fast.is_err() {
            let mut c = self.command("pg_ctl");
            c.arg("-D")
                .arg(self.data())
                .args(["-m", "immediate", "-w", "-t", "10", "stop"]);
            if self.output(c, "pg_ctl stop -m immediate").is_err() {
                self.kill_postmaster();
            }
        }
        self.running = false;
        fast.map(drop)
    }

    /// The last resort: SIGKILL to the postmaster named in its pid file
    /// (its children exit when it is gone).
    fn kill_postmaster(&self) {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse::<i32>().ok());
        if let Some(pid) = pid.filter(|p| *p > 1) {
            eprintln!("killing the postmaster (pid {pid}), which did not stop");
            // SAFETY: kill has no memory preconditions; the pid is the
            // postmaster this preset started (read from its own data
            // directory's pid file).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Cluster<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("warning: {e:#}");
        }
    }
}
