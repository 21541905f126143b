//! `calibrate --metrics URL`: two scrapes of a metrics endpoint, around a
//! pause or a command, each stamped with its time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use sluice_model::prometheus::scrape_comment;

use super::{CalibrateArgs, ModelUsageError};

/// Scrapes twice, around `--interval` or the command; returns both texts,
/// each starting with its scrape-time comment.
pub(super) fn snapshots(a: &CalibrateArgs, url: &str) -> Result<(String, String)> {
    match (a.interval, a.command.is_empty()) {
        (Some(_), false) => {
            return Err(ModelUsageError(
                "give either --interval or a command after `--`, not both".into(),
            )
            .into())
        }
        (None, true) => {
            return Err(ModelUsageError(
                "--metrics needs --interval DURATION (e.g. 5s) or a command to run after `--`"
                    .into(),
            )
            .into())
        }
        _ => {}
    }
    let before = scrape_timed(url)?;
    if let Some(p) = &a.save_before {
        std::fs::write(p, &before).with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(t) = a.interval {
        eprintln!("sluice model calibrate: scraped {url}; scraping again in {t} s");
        std::thread::sleep(Duration::from_secs_f64(t));
    } else {
        run_between(&a.command)?;
    }
    let after = scrape_timed(url)?;
    if let Some(p) = &a.save_after {
        std::fs::write(p, &after).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok((before, after))
}

/// Runs the command between the scrapes, its stdout sent to our stderr so
/// that our stdout (a table or JSON) stays clean.
fn run_between(command: &[String]) -> Result<()> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| ModelUsageError("empty command after `--`".into()))?;
    let stdout = {
        use std::os::fd::AsFd;
        std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .context("cannot duplicate stderr")?
    };
    let status = std::process::Command::new(prog)
        .args(args)
        .stdout(std::process::Stdio::from(stdout))
        .status()
        .with_context(|| format!("cannot run {prog}"))?;
    if !status.success() {
        anyhow::bail!("{prog} failed ({status}); the scrapes around it are not used");
    }
    Ok(())
}

fn scrape_timed(url: &str) -> Result<String> {
    let body = scrape(url)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    Ok(format!("{}{body}", scrape_comment(now)))
}

/// Most bytes a metrics response may have.
const MAX_SCRAPE_BYTES: u64 = 64 << 20;

/// How long connecting, and the whole scrape, may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The body of `GET url`, which must answer 200 with UTF-8 text; a URL
/// without a path asks for `/metrics`. Plain HTTP only: sluice's metrics
/// endpoint (and any Prometheus exporter on plain HTTP).
pub(super) fn scrape(url: &str) -> Result<String> {
    let usage = |why: &str| ModelUsageError(format!("--metrics {url}: {why}"));
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        usage("only http:// URLs are supported (e.g. http://127.0.0.1:9109/metrics)")
    })?;
    let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if hostport.is_empty() {
        return Err(usage("no host").into());
    }
    let path = if path.is_empty() { "/metrics" } else { path };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(SCRAPE_TIMEOUT))
        .timeout_global(Some(SCRAPE_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent
        .get(format!("http://{hostport}{path}"))
        .header("Accept", "text/plain")
        .call()
        .map_err(|e| {
            if is_connect_error(&e) {
                anyhow::anyhow!(
                    "cannot connect to {hostport}: {e}; is sluice serve running with --metrics {hostport}?"
                )
            } else if matches!(e, ureq::Error::BadUri(_) | ureq::Error::Http(_)) {
                usage(&e.to_string()).into()
            } else {
                anyhow::Error::new(e).context(format!("GET {url}"))
            }
        })?;
    let status = response.status();
    if status != ureq::http::StatusCode::OK {
        anyhow::bail!("GET {url}: the server answered '{status}'");
    }
    response
        .body_mut()
        .with_config()
        .limit(MAX_SCRAPE_BYTES)
        .read_to_string()
        .with_context(|| format!("GET {url}: cannot read the metrics (UTF-8 text)"))
}

/// True when `e` says the endpoint could not be reached at all.
fn is_connect_error(e: &ureq::Error) -> bool {
    use std::io::ErrorKind;
    match e {
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionRefused
                | ErrorKind::AddrNotAvailable
                | ErrorKind::HostUnreachable
                | ErrorKind::NetworkUnreachable
        ),
        ureq::Error::Timeout(ureq::Timeout::Connect) => true,
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        _ => false,
    }
}
