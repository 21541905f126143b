//! What every experiment starts from: the options they share, the image
//! they serve, the output folder, and the link their servers sit behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use sluice_bench::matrix::Driver;
use sluice_bench::peers;

use crate::link::{Link, LinkMeasurement, LinkRate};

/// Options every preset and `compare` share.
#[derive(Debug, Clone)]
pub struct PresetOptions {
    /// Smaller sizes and shorter runs (each preset under 10 minutes).
    pub quick: bool,
    /// Interleaved rounds.
    pub rounds: u32,
    /// Seconds per timed run (overrides the preset's default).
    pub duration: Option<Duration>,
    /// Where JSON and CSV go.
    pub out_dir: PathBuf,
    /// Where plots go (`bench-NAME.svg`, `bench-NAME.png`).
    pub plot_dir: PathBuf,
    /// Image to serve (created if missing); default: a temporary one.
    pub image: Option<PathBuf>,
    /// Image size when created.
    pub image_size: Option<u64>,
    /// The sluice binary for `serve` (default: found beside this one).
    pub sluice_bin: Option<PathBuf>,
    /// Targets to include (default: all the preset knows).
    pub targets: Option<Vec<String>>,
    /// Client(s) driving the load.
    pub driver: Driver,
    /// Progress bars on a terminal.
    pub progress: bool,
    /// Put the server processes behind a link limited to this rate
    /// (`--link-rate`); `None`: loopback.
    pub link_rate: Option<LinkRate>,
}

impl PresetOptions {
    /// The timed run's length: `--duration`, else `quick` or `full` seconds.
    pub fn duration(&self, quick: f64, full: f64) -> Duration {
        self.duration
            .unwrap_or_else(|| Duration::from_secs_f64(if self.quick { quick } else { full }))
    }

    /// The image size: `--image-size`, else `quick` or `full` bytes.
    pub fn size(&self, quick: u64, full: u64) -> u64 {
        self.image_size
            .unwrap_or(if self.quick { quick } else { full })
    }

    /// Whether `--targets` (absent: every target) names `target`.
    pub fn wants(&self, target: &str) -> bool {
        self.targets
            .as_ref()
            .is_none_or(|t| t.iter().any(|x| x == target))
    }
}

/// An image file, deleted afterwards if this run created it.
#[derive(Debug)]
pub struct Image {
    path: PathBuf,
    remove: bool,
}

impl Image {
    /// `given`, or a new file `sluice-bench-NAME.img` in `dir` (default
    /// /dev/shm when present, else the temp dir), filled to `size`.
    pub fn prepare(
        given: Option<&Path>,
        dir: Option<&Path>,
        name: &str,
        size: u64,
    ) -> Result<Self> {
        let (path, remove) = match given {
            Some(p) => (p.to_path_buf(), false),
            None => {
                let dir = dir.map(Path::to_path_buf).unwrap_or_else(|| {
                    let shm = PathBuf::from("/dev/shm");
                    if shm.is_dir() {
                        shm
                    } else {
                        std::env::temp_dir()
                    }
                });
                (
                    dir.join(format!("sluice-bench-{name}-{}.img", std::process::id())),
                    true,
                )
            }
        };
        eprintln!("image: {} ({} bytes)", path.display(), size);
        peers::ensure_image(&path, size)?;
        Ok(Self { path, remove })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A new temporary folder `sluice-bench-NAME-...`, removed when
/// dropped: where an experiment keeps its servers' files.
pub fn scratch_dir(name: &str) -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("sluice-bench-{name}-"))
        .tempdir()
        .context("cannot create a temporary folder")
}

/// The folder an experiment works in: `given` (created if missing), or
/// a scratch folder (see [`scratch_dir`]) that lives as long as the
/// returned guard.
pub fn work_dir(given: Option<&Path>, name: &str) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    match given {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            Ok((d.to_path_buf(), None))
        }
        None => {
            let temp = scratch_dir(name)?;
            Ok((temp.path().to_path_buf(), Some(temp)))
        }
    }
}

/// The command line that started this run, for the JSON reports.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// A link at `rate` for the servers, measured (and the measurement
/// printed) before anything runs over it.
pub fn open_link(rate: LinkRate) -> Result<(Link, LinkMeasurement)> {
    let link = Link::create(Some(rate)).context(
        "--link-rate needs root, network namespaces, veth and tc tbf (iproute2), which are not usable here",
    )?;
    let m = link.measure()?;
    eprintln!("{} ({})", m.line(), link.namespace().name());
    Ok((link, m))
}

/// Checks that `dir` can be written (fails early, before long runs).
pub fn check_out_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}
