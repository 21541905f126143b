//! Temporal merge: when the client packs requests waiting to be sent
//! into one batch frame (docs/design/0008-temporal-merge.md).
//!
//! Merging has two parts. *Holding*: while [`HOLD_IN_FLIGHT`] or more
//! requests are in flight, a request that is ready is not sent at once
//! but left in the send queue for the next send, which the next reply
//! starts (or the caller that fills the queue to [`HOLD_MAX`]); so
//! requests gather while the connection is busy. *Packing*: a send that
//! finds two or more requests waiting puts them in batch frames, or,
//! for block requests of one export, fuses them into one extent command
//! (`fuse.rs`).
//!
//! A batch frame costs the two ends one send, one receive and one wake-up
//! for many requests, but a held request waits for the next reply, and
//! the members of a frame reach the server together rather than as each
//! is ready. Whether that pays depends on the load, so
//! [`MergePolicy::Adaptive`] measures it: it keeps, for each level of
//! load (requests outstanding, in powers of two), the time per completion
//! seen with merging and without, over short windows, and merges at the
//! levels where merging measured cheaper, switching only when the other
//! way is better by a margin and probing the other way now and then
//! (rarely when the two differ much). Below [`HOLD_IN_FLIGHT`]
//! outstanding it never merges: nothing is held there, so there is
//! nothing to gain (the paper's sporadic case); nor at a level where
//! merging windows send under a quarter of their requests in batch
//! frames, on average (batches do not form there, so holding costs and
//! packing saves nothing), but for a probe every ninth window.
//!
//! The controller is a pure state machine: callers pass the time in, so
//! its rule is tested with made-up clocks.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// When the client packs waiting requests into batch frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MergePolicy {
    /// Never: every request in its own frame.
    Off,
    /// Whenever two or more requests wait to be sent, holding requests
    /// while [`HOLD_IN_FLIGHT`] or more are in flight.
    Always,
    /// As `Always`, at the levels of load (requests outstanding) where
    /// merging measured faster than not merging; never below
    /// [`HOLD_IN_FLIGHT`] outstanding.
    #[default]
    Adaptive,
}

impl MergePolicy {
    /// The name `FromStr` reads and `Display` writes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Always => "always",
            Self::Adaptive => "adaptive",
        }
    }
}

impl fmt::Display for MergePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A merge policy name that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown merge policy {0:?}: expected off, always or adaptive")]
pub struct BadMergePolicy(pub String);

impl FromStr for MergePolicy {
    type Err = BadMergePolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(Self::Off),
            "always" => Ok(Self::Always),
            "adaptive" => Ok(Self::Adaptive),
            other => Err(BadMergePolicy(other.to_owned())),
        }
    }
}

/// What a client's merging did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Batch frames sent, and fused requests (block requests of one
    /// export sent as one extent command).
    pub frames: u64,
    /// Requests sent inside them.
    pub merged: u64,
    /// The fewest requests outstanding at which merging is held now
    /// (`None`: nowhere yet, or never).
    pub threshold: Option<usize>,
}

/// Requests in flight from which a merging client holds a ready request
/// for the next send rather than sending it at once. Below it holding
/// would starve the server (at two in flight, each request would wait for
/// the other's reply); from it, a reply is due soon, and requests that
/// come meanwhile gather into one frame.
pub const HOLD_IN_FLIGHT: usize = 4;
/// Requests held at most: the caller that makes this many waiting sends
/// them itself, so a frame never waits to grow past it.
pub(crate) const HOLD_MAX: usize = 64;

/// Load levels: level `i` holds a mean of `2^i` to `2^(i+1) - 1`
/// requests outstanding (the last level everything above).
const LEVELS: usize = 9;
/// A measuring window lasts at least this long...
const WINDOW: Duration = Duration::from_millis(20);
/// ...and sees at least this many completions.
const WINDOW_COMPLETIONS: u64 = 32;
/// The other way must be this much faster before the held one changes.
const HYSTERESIS: f64 = 0.05;
/// After this many windows held at a level, one window tries the other
/// way, so a change in conditions is noticed...
const PROBE_EVERY: u32 = 8;
/// ...or after this many when the other way measured [`FAR`] or more
/// slower, so a clearly worse way costs under 1% of the time.
const PROBE_FAR: u32 = 32;
/// After the held way changes, the way given up is probed after this
/// many windows (not [`PROBE_EVERY`]), so a change that one freak
/// window caused is undone quickly.
const CONFIRM_AFTER: u32 = 2;
/// A gap this large between the two ways makes probes rare.
const FAR: f64 = 0.25;
/// Weight of the newest window in a level's rate.
const NEWEST: f64 = 0.5;
/// A level whose merging windows send fewer than `1 / FORMED` of their
/// requests inside batch frames (a moving average, weighted as the
/// rates are) finds no batches to form.
const FORMED: f64 = 4.0;

/// What one level of load has measured.
#[derive(Debug, Clone, Copy, Default)]
struct Level {
    /// Completions per second without merging and with it.
    rate: [Option<f64>; 2],
    /// The way held at this level.
    merge: bool,
    /// Windows since the last probe.
    held: u32,
    /// Share of requests its merging windows sent inside batch frames
    /// (a moving average, so one window that found little to pack among
    /// many that found plenty does not decide).
    packing: Option<f64>,
    /// Merging windows here form no batches ([`FORMED`]): the level
    /// counts as off (probed every [`PROBE_EVERY`] windows).
    barren: bool,
}

/// The window being measured.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    started: Option<Instant>,
    completions: u64,
    /// Sum over completions of the requests outstanding at each.
    outstanding: u64,
    /// Requests sent, and those of them sent inside batch frames.
    sent: u64,
    packed: u64,
}

/// Decides, for each send, whether to pack the waiting requests into
/// batch frames.
#[derive(Debug, Clone)]
pub(crate) struct MergeController {
    policy: MergePolicy,
    /// The way of the current window (adaptive).
    merging: bool,
    window: Window,
    levels: [Level; LEVELS],
}

impl MergeController {
    /// A controller for `policy`; `batches` says whether the server
    /// negotiated batch frames (without them nothing is ever merged).
    pub(crate) fn new(policy: MergePolicy, batches: bool) -> Self {
        Self {
            policy: if batches { policy } else { MergePolicy::Off },
            merging: false,
            window: Window::default(),
            levels: [Level::default(); LEVELS],
        }
    }

    /// The policy in force (`Off` when the server has no batch frames).
    pub(crate) fn policy(&self) -> MergePolicy {
        self.policy
    }

    /// Whether to pack `queued` requests waiting to be sent into batch
    /// frames while `in_flight` are sent and unanswered.
    #[inline]
    pub(crate) fn should_merge(&self, in_flight: usize, queued: usize) -> bool {
        match self.policy {
            MergePolicy::Off => false,
            MergePolicy::Always => queued >= 2,
            MergePolicy::Adaptive => queued >= 2 && in_flight >= 1 && self.merging,
        }
    }

    /// Whether a request just queued, with `queued` waiting (itself
    /// included) and `in_flight` sent and unanswered, should wait for
    /// the next send rather than be sent now. Only while a reply is due
    /// ([`HOLD_IN_FLIGHT`] in flight), so a held request is always sent
    /// by the thread that handles that reply.
    #[inline]
    pub(crate) fn should_hold(&self, in_flight: usize, queued: usize) -> bool {
        let merging = match self.policy {
            MergePolicy::Off => return false,
            MergePolicy::Always => true,
            MergePolicy::Adaptive => self.merging,
        };
        merging && in_flight >= HOLD_IN_FLIGHT && queued < HOLD_MAX
    }

    /// Counts one send of `requests` requests, `packed` of them inside
    /// batch frames.
    #[inline]
    pub(crate) fn sent(&mut self, requests: usize, packed: usize) {
        if self.policy != MergePolicy::Adaptive {
            return;
        }
        self.window.sent += requests as u64;
        self.window.packed += packed as u64;
    }

    /// Counts one completion at `now`, with `outstanding` requests
    /// (in flight or waiting to be sent) left after it.
    #[inline]
    pub(crate) fn completed(&mut self, now: Instant, outstanding: usize) {
        if self.policy != MergePolicy::Adaptive {
            return;
        }
        let w = &mut self.window;
        let started = *w.started.get_or_insert(now);
        w.completions += 1;
        w.outstanding += outstanding as u64 + 1;
        let elapsed = now.saturating_duration_since(started);
        if w.completions < WINDOW_COMPLETIONS || elapsed < WINDOW {
            return;
        }
        let rate = w.completions as f64 / elapsed.as_secs_f64();
        let mean = w.outstanding / w.completions;
        let level = level_of(mean);
        let l = &mut self.levels[level];
        let way = usize::from(self.merging);
        if self.merging && w.sent > 0 {
            let share = w.packed as f64 / w.sent as f64;
            l.packing = Some(match l.packing {
                Some(old) => old * (1.0 - NEWEST) + share * NEWEST,
                None => share,
            });
        }
        if self.merging && l.packing.is_some_and(|p| p * FORMED < 1.0) {
            // Merging finds (almost) nothing to pack here: its rate says
            // nothing about merging, and the level counts as off.
            l.barren = true;
            l.merge = false;
            l.held = 0;
        } else {
            if self.merging {
                l.barren = false;
            }
            l.rate[way] = Some(match l.rate[way] {
                Some(old) => old * (1.0 - NEWEST) + rate * NEWEST,
                None => rate,
            });
        }
        self.window = Window {
            started: Some(now),
            ..Window::default()
        };
        self.merging = self.choose(level);
    }

    /// The way of the next window, predicting its load is `level`'s.
    fn choose(&mut self, level: usize) -> bool {
        if level < level_of(HOLD_IN_FLIGHT as u64) {
            // Nothing is held at so few outstanding, so at most requests
            // that met during one send could be packed: too little to
            // measure against the noise, and nothing to gain.
            return false;
        }
        let l = &mut self.levels[level];
        if l.barren {
            l.held += 1;
            if l.held > PROBE_EVERY {
                l.held = 0;
                return true;
            }
            return false;
        }
        let (off, on) = match l.rate {
            // Measure each way once before comparing.
            [None, _] => return false,
            [Some(_), None] => return true,
            [Some(off), Some(on)] => (off, on),
        };
        let switched = if l.merge && off > on * (1.0 + HYSTERESIS) {
            l.merge = false;
            true
        } else if !l.merge && on > off * (1.0 + HYSTERESIS) {
            l.merge = true;
            true
        } else {
            false
        };
        let (better, worse) = if l.merge { (on, off) } else { (off, on) };
        let every = if better > worse * (1.0 + FAR) {
            PROBE_FAR
        } else {
            PROBE_EVERY
        };
        if switched {
            // The way given up is probed again soon: one freak window
            // (a stall of the machine) can tip the comparison, and the
            // way given up is otherwise measured again only after
            // `every` windows.
            l.held = every - CONFIRM_AFTER;
        }
        l.held += 1;
        if l.held > every {
            l.held = 0;
            return !l.merge;
        }
        l.merge
    }

    /// The fewest requests outstanding at which merging is held now:
    /// the lowest level that merges (`None` if none does yet).
    pub(crate) fn threshold(&self) -> Option<usize> {
        match self.policy {
            MergePolicy::Off => None,
            MergePolicy::Always => Some(HOLD_IN_FLIGHT),
            MergePolicy::Adaptive => self
                .levels
                .iter()
                .position(|l| l.merge)
                .map(|level| 1 << level),
        }
    }
}

/// The level of a mean of `outstanding` requests.
fn level_of(outstanding: u64) -> usize {
    let log2 = 63 - outstanding.max(1).leading_zeros() as usize;
    log2.min(LEVELS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_print() {
        for p in [MergePolicy::Off, MergePolicy::Always, MergePolicy::Adaptive] {
            assert_eq!(p.to_string().parse::<MergePolicy>(), Ok(p));
        }
        let e = "sometimes".parse::<MergePolicy>().unwrap_err();
        assert!(e.to_string().contains("off, always or adaptive"), "{e}");
        assert_eq!(MergePolicy::default(), MergePolicy::Adaptive);
    }

    #[test]
    fn fixed_policies_ignore_load() {
        let off = MergeController::new(MergePolicy::Off, true);
        let always = MergeController::new(MergePolicy::Always, true);
        for (in_flight, queued) in [(0, 2), (64, 64), (1, 1)] {
            assert!(!off.should_merge(in_flight, queued));
            assert_eq!(always.should_merge(in_flight, queued), queued >= 2);
        }
        // Without batch frames on the connection, nothing merges.
        let none = MergeController::new(MergePolicy::Always, false);
        assert!(!none.should_merge(64, 64));
        assert_eq!(none.policy(), MergePolicy::Off);
    }

    #[test]
    fn requests_are_held_only_while_replies_are_due() {
        let off = MergeController::new(MergePolicy::Off, true);
        let always = MergeController::new(MergePolicy::Always, true);
        for in_flight in 0..HOLD_IN_FLIGHT {
            assert!(!always.should_hold(in_flight, 1), "{in_flight}");
        }
        assert!(always.should_hold(HOLD_IN_FLIGHT, 1));
        assert!(always.should_hold(64, HOLD_MAX - 1));
        // A full queue goes out with its last caller.
        assert!(!always.should_hold(64, HOLD_MAX));
        assert!(!off.should_hold(64, 1));
        // Adaptive holds only in a merging window.
        let mut adaptive = MergeController::new(MergePolicy::Adaptive, true);
        assert!(!adaptive.should_hold(64, 1));
        adaptive.merging = true;
        assert!(adaptive.should_hold(64, 1));
        assert!(!adaptive.should_hold(HOLD_IN_FLIGHT - 1, 1));
    }

    #[test]
    fn adaptive_never_merges_below_the_hold_threshold() {
        for outstanding in 1..HOLD_IN_FLIGHT {
            let mut c = MergeController::new(MergePolicy::Adaptive, true);
            // Even if merging were (impossibly) much faster there.
            let share = drive(&mut c, outstanding, 10_000.0, 50_000.0, 50);
            assert_eq!(share, 0.0, "{outstanding} outstanding");
            assert_eq!(c.threshold(), None);
        }
    }

    #[test]
    fn a_clearly_worse_way_is_probed_rarely() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        // Merging twice as slow: after the first two windows, one probe
        // in every PROBE_FAR + 1.
        let share = drive(&mut c, 32, 20_000.0, 10_000.0, 200);
        assert!(share < 0.05, "merged in {share} of the windows");
        assert!(share > 0.0, "never probed");
    }

    #[test]
    fn levels_are_powers_of_two() {
        assert_eq!(level_of(0), 0);
        assert_eq!(level_of(1), 0);
        assert_eq!(level_of(2), 1);
        assert_eq!(level_of(3), 1);
        assert_eq!(level_of(4), 2);
        assert_eq!(level_of(64), 6);
        assert_eq!(level_of(u64::MAX), LEVELS - 1);
    }

    /// Drives a controller with a made-up server whose completion rate
    /// depends only on whether the controller merges; returns the share
    /// of windows spent merging after `windows` windows.
    fn drive(
        c: &mut MergeController,
        outstanding: usize,
        rate_off: f64,
        rate_on: f64,
        windows: usize,
    ) -> f64 {
        drive_packing(c, outstanding, rate_off, rate_on, 1.0, windows)
    }

    /// As [`drive`], with each request sent before its completion, a
    /// `packed` share of them inside batch frames when merging.
    fn drive_packing(
        c: &mut MergeController,
        outstanding: usize,
        rate_off: f64,
        rate_on: f64,
        packed: f64,
        windows: usize,
    ) -> f64 {
        // Simulated time goes on from where the last call left it.
        let mut now = c.window.started.unwrap_or_else(Instant::now);
        let mut share = 0.0;
        let mut merged = 0;
        for _ in 0..windows {
            let merging = c.merging;
            merged += usize::from(merging);
            let rate = if merging { rate_on } else { rate_off };
            let step = Duration::from_secs_f64(1.0 / rate);
            let before = c.window.started;
            // Complete requests until the window closes.
            loop {
                now += step;
                // Every request sent once; `packed` of them in frames.
                share += packed;
                let in_frame = merging && share >= 1.0;
                if share >= 1.0 {
                    share -= 1.0;
                }
                c.sent(1, usize::from(in_frame));
                c.completed(now, outstanding - 1);
                if c.window.completions == 0 && c.window.started != before {
                    break;
                }
            }
        }
        merged as f64 / windows as f64
    }

    #[test]
    fn adaptive_merges_where_merging_is_faster() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        let share = drive(&mut c, 32, 10_000.0, 13_000.0, 100);
        assert!(share > 0.8, "merged in {share} of the windows");
        assert_eq!(c.threshold(), Some(32));
        assert!(c.levels[level_of(32)].merge);
        // In a merging window: two or more waiting, some in flight.
        c.merging = true;
        assert!(c.should_merge(31, 5));
        assert!(!c.should_merge(31, 1));
        assert!(!c.should_merge(0, 5));
    }

    #[test]
    fn adaptive_does_not_merge_where_merging_is_slower() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        let share = drive(&mut c, 32, 13_000.0, 10_000.0, 100);
        assert!(share < 0.2, "merged in {share} of the windows");
        assert_eq!(c.threshold(), None);
    }

    #[test]
    fn adaptive_holds_within_the_margin() {
        // 2% apart: inside the hysteresis, so after the first
        // measurements the way does not flap (only the probes switch).
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        drive(&mut c, 16, 10_000.0, 10_200.0, 4);
        let held = c.levels[level_of(16)].merge;
        let share = drive(&mut c, 16, 10_000.0, 10_200.0, 90);
        let expect = if held { share > 0.8 } else { share < 0.2 };
        assert!(expect, "held {held}, merged in {share} of the windows");
    }

    #[test]
    fn a_level_where_batches_do_not_form_counts_as_off() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        // Merging "faster", but its windows pack a tenth of the
        // requests: it is not merging that made them faster, so the
        // level stays off but for a probe every ninth window.
        let share = drive_packing(&mut c, 16, 10_000.0, 12_000.0, 0.1, 200);
        assert!(share < 0.15, "merged in {share} of the windows");
        assert!(share > 0.0, "never probed");
        assert!(c.levels[level_of(16)].barren);
        assert_eq!(c.threshold(), None);
        // Once batches form (and pay), the next probe turns it on.
        let share = drive_packing(&mut c, 16, 10_000.0, 12_000.0, 0.9, 200);
        assert!(share > 0.7, "merged in {share} of the windows");
        assert!(!c.levels[level_of(16)].barren);
        assert_eq!(c.threshold(), Some(16));
    }

    #[test]
    fn one_window_that_packs_little_does_not_turn_merging_off() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        drive_packing(&mut c, 48, 10_000.0, 15_000.0, 0.9, 20);
        assert!(c.levels[level_of(48)].merge);
        while !c.merging {
            drive_packing(&mut c, 48, 10_000.0, 15_000.0, 0.9, 1);
        }
        // A window in which requests happened to go out one by one (a
        // scheduling hiccup) among windows that pack nine in ten.
        drive_packing(&mut c, 48, 10_000.0, 15_000.0, 0.05, 1);
        assert!(!c.levels[level_of(48)].barren);
        assert!(c.merging, "one poor window turned merging off");
        let share = drive_packing(&mut c, 48, 10_000.0, 15_000.0, 0.9, 60);
        assert!(share > 0.9, "merged in {share} of the windows");
    }

    #[test]
    fn a_switch_one_freak_window_caused_is_undone_within_a_few_windows() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        drive(&mut c, 48, 10_000.0, 15_000.0, 20);
        while !c.merging {
            drive(&mut c, 48, 10_000.0, 15_000.0, 1);
        }
        // One merging window stalls (the machine was busy elsewhere):
        // the level turns off...
        drive(&mut c, 48, 10_000.0, 3_000.0, 1);
        assert!(!c.levels[level_of(48)].merge);
        // ...and merges again within a few windows, not after the
        // PROBE_EVERY windows of an ordinary probe.
        let mut back = None;
        for k in 1..=PROBE_EVERY as usize {
            drive(&mut c, 48, 10_000.0, 15_000.0, 1);
            if c.levels[level_of(48)].merge {
                back = Some(k);
                break;
            }
        }
        let back = back.expect("still off after PROBE_EVERY windows");
        assert!(
            back <= CONFIRM_AFTER as usize + 1,
            "back after {back} windows"
        );
    }

    #[test]
    fn adaptive_follows_a_change() {
        let mut c = MergeController::new(MergePolicy::Adaptive, true);
        drive(&mut c, 64, 10_000.0, 15_000.0, 40);
        assert!(c.levels[level_of(64)].merge);
        // Merging turns slower: the probes notice and the level turns off.
        drive(&mut c, 64, 10_000.0, 5_000.0, 40);
        assert!(!c.levels[level_of(64)].merge);
    }
}
