//! Progress of a long transfer, on a terminal only (as aws-cli and rclone
//! show it): nothing is drawn when stderr is not a terminal, nor for a
//! transfer smaller than [`THRESHOLD`].

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Transfers smaller than this finish before a bar would help.
const THRESHOLD: u64 = 64 << 20;

/// A byte counter that draws itself on a terminal once the transfer is
/// (or turns out to be) large.
pub(crate) struct Progress {
    bar: ProgressBar,
    total: Option<u64>,
    done: u64,
    terminal: bool,
    shown: bool,
}

impl Progress {
    /// Counts `what` of `total` bytes (`None`: not known in advance).
    pub(crate) fn bytes(what: &str, total: Option<u64>) -> Self {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden());
        let template = match total {
            Some(_) => "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
            None => "{msg} {bytes} {bytes_per_sec}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        bar.set_message(what.to_owned());
        Self {
            bar,
            total,
            done: 0,
            terminal: std::io::stderr().is_terminal(),
            shown: false,
        }
    }

    /// `n` more bytes moved.
    pub(crate) fn add(&mut self, n: u64) {
        self.done += n;
        self.bar.inc(n);
        let large = self.total.unwrap_or(self.done).max(self.done) >= THRESHOLD;
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
