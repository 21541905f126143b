//! Progress of a long transfer or operation, on a terminal only (as
//! aws-cli and rclone show it): nothing is drawn when stderr is not a
//! terminal, nor for a transfer smaller than [`THRESHOLD`].

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether progress is drawn at all (stderr is a terminal): a caller
/// that has to poll for the progress polls only then.
pub(crate) fn drawn() -> bool {
    std::io::stderr().is_terminal()
}

/// Transfers smaller than this finish before a bar would help.
const THRESHOLD: u64 = 64 << 20;

/// A counter (of bytes, or of stripes and the like) that draws itself
/// on a terminal once the work is (or turns out to be) large: every
/// long operation of the CLI shows its progress through this one type.
pub(crate) struct Progress {
    bar: ProgressBar,
    total: Option<u64>,
    done: u64,
    /// Shown from this many counted up.
    threshold: u64,
    terminal: bool,
    shown: bool,
}

impl Progress {
    /// Counts `what` of `total` bytes (`None`: not known in advance).
    pub(crate) fn bytes(what: &str, total: Option<u64>) -> Self {
        let template = match total {
            Some(_) => "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            None => "{msg} {bytes} {bytes_per_sec}",
        };
        Self::new(what, total, template, THRESHOLD)
    }

    /// Counts `what` of `total` `unit`s (`bytes`, `stripes`, ...) of
    /// an operation a server runs (a rebuild, a scrub): long whatever
    /// its size, so shown on a terminal from the start.
    pub(crate) fn operation(what: &str, total: u64, unit: &str) -> Self {
        let template = match unit {
            "bytes" => "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {eta}".to_owned(),
            _ => format!("{{msg}} {{bar:30}} {{pos}}/{{len}} {unit} {{eta}}"),
        };
        Self::new(what, Some(total), &template, 0)
    }

    fn new(what: &str, total: Option<u64>, template: &str, threshold: u64) -> Self {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_message(what.to_owned());
        Self {
            bar,
            total,
            done: 0,
            threshold,
            terminal: drawn(),
            shown: false,
        }
    }

    /// The count a poll reported.
    pub(crate) fn set(&mut self, done: u64) {
        self.add(done.saturating_sub(self.done));
    }

    /// `n` more bytes moved.
    pub(crate) fn add(&mut self, n: u64) {
        self.done += n;
        self.bar.inc(n);
        let large = self.total.unwrap_or(self.done).max(self.done) >= self.threshold;
        if self.terminal && !self.shown && large {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if self.shown {
            self.bar.finish_and_clear();
        }
    }
}
