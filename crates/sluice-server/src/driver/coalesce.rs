//! Request coalescing: letting requests pile up in the socket so that one
//! wake-up, one receive and one send serve several of them.
//!
//! A client that keeps many requests in flight but sends them one per
//! `send` (fio's nbd engine, libnbd) gets one request per receive from a
//! fast server, so both sides pay a wake-up, a receive and a send per
//! request. With `SO_RCVLOWAT` set to a few requests' bytes, the kernel
//! wakes the connection thread only once that much has arrived (or a short
//! timeout passes), and the replies leave together; measured on this
//! machine at 4 KiB, queue depth 16 with fio: 168k -> 201-217k IOPS and
//! 5.8 -> 4.4 us of server CPU per request.
//!
//! Waiting for more requests than the client has in flight costs a
//! timeout per batch, and waiting for about half of them starves the
//! client (fio at queue depth 16 fell to 107k IOPS when made to send 8).
//! The client's queue depth is invisible to the server, so the batch size
//! is chosen by measuring: every [`HOLD_EPOCHS`] epochs (doubling, up to
//! [`MAX_HOLD_EPOCHS`], while rounds keep choosing the same size) the connection
//! tries batch sizes 1, 2, 4, ... for one epoch each and keeps the one that
//! completed the most requests per second, unless it beat waiting for no
//! batch at all by less than [`MIN_GAIN`]. A burst of timeouts drops back
//! to no batching at once.
//!
//! This module is the pure policy; the connection sets the socket option
//! and waits.

use std::time::{Duration, Instant};

/// Length of one measurement epoch.
const EPOCH: Duration = Duration::from_millis(10);
/// Epochs a new connection runs without coalescing before its first
/// trials (a client ramping up would make every later trial look good).
const WARMUP_EPOCHS: u32 = 5;
/// Epochs a chosen batch size is kept before the next round of trials.
pub(crate) const HOLD_EPOCHS: u32 = 50;
/// Longest hold, reached when round after round chooses the same size.
const MAX_HOLD_EPOCHS: u32 = 400;
/// A batch size above 1 must complete this many times the requests per
/// second of no batching to be chosen.
pub(crate) const MIN_GAIN: f64 = 1.05;
/// Trials stop climbing at a size that completed fewer than this share of
/// the best rate so far: bigger batches only starve the client more.
const CLIMB_FLOOR: f64 = 0.9;
/// Below this many requests in the first trial epoch the client is too
/// slow for batching to matter; no trials until the next round.
const MIN_EPOCH_REQUESTS: u64 = 64;
/// No coalescing when a batch would be larger than this: large requests
/// already amortise their wake-up, and the mark must stay well inside the
/// socket's receive buffer.
const MAX_LOW_WATER: u64 = 256 * 1024;
/// Batch sizes tried, smallest first (cut at the configured maximum).
const LADDER: [u32; 5] = [1, 2, 4, 8, 16];

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Measuring `LADDER[i]`.
    Trial(usize),
    /// Keeping the chosen size for this many more epochs.
    Hold(u32),
}

/// Per-connection coalescing state.
#[derive(Debug)]
pub(crate) struct CoalescePolicy {
    max_batch: u32,
    wait: Duration,
    batch: u32,
    phase: Phase,
    epoch_start: Option<Instant>,
    epoch_requests: u64,
    epoch_waits: u32,
    epoch_timeouts: u32,
    /// The size the latest round chose, and how long it is held.
    chosen: u32,
    hold_epochs: u32,
    /// Requests per second measured at each ladder step this round.
    rates: [f64; LADDER.len()],
    /// Running average of a request's size on the wire (header and
    /// payload), in bytes.
    average_request: u64,
}

impl CoalescePolicy {
    /// `max_batch` ≤ 1 disables coalescing; `wait` is the longest a
    /// connection waits for a batch to fill.
    pub(crate) fn new(max_batch: u32, wait: Duration) -> Self {
        Self {
            max_batch: if wait.is_zero() { 1 } else { max_batch.max(1) },
            wait,
            batch: 1,
            phase: Phase::Hold(WARMUP_EPOCHS),
            epoch_start: None,
            epoch_requests: 0,
            epoch_waits: 0,
            epoch_timeouts: 0,
            rates: [0.0; LADDER.len()],
            chosen: 0,
            hold_epochs: HOLD_EPOCHS,
            average_request: 0,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.max_batch > 1
    }

    /// The longest wait for a batch to fill.
    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// The batch size in force (1: no coalescing).
    pub(crate) fn batch(&self) -> u32 {
        self.batch
    }

    /// Requests per second measured at batch sizes 1, 2, 4, ... in the
    /// latest round of trials (for logs).
    pub(crate) fn rates(&self) -> [u64; LADDER.len()] {
        self.rates.map(|r| r as u64)
    }

    /// Bytes to wait for before waking (the socket's receive low-water
    /// mark), or `None` to wake on the first byte.
    pub(crate) fn low_water(&self) -> Option<usize> {
        let bytes = u64::from(self.batch) * self.average_request;
        (self.batch > 1 && bytes > 0 && bytes <= MAX_LOW_WATER).then_some(bytes as usize)
    }

    /// One request of `bytes` on the wire (header and payload) was handled.
    #[inline]
    pub(crate) fn request(&mut self, bytes: usize) {
        self.epoch_requests += 1;
        let bytes = bytes as u64;
        self.average_request = if self.average_request == 0 {
            bytes
        } else {
            self.average_request - self.average_request / 8 + bytes / 8
        };
    }

    /// A wait for a batch ended, by filling or by timing out.
    pub(crate) fn waited(&mut self, timed_out: bool) {
        self.epoch_waits += 1;
        self.epoch_timeouts += u32::from(timed_out);
    }

    /// Advances the epoch clock; call before each wait.
    pub(crate) fn tick(&mut self, now: Instant) {
        if !self.enabled() {
            return;
        }
        let Some(start) = self.epoch_start else {
            self.start_epoch(now);
            return;
        };
        let elapsed = now.saturating_duration_since(start);
        if elapsed < EPOCH {
            return;
        }
        let rate = self.epoch_requests as f64 / elapsed.as_secs_f64();
        let requests = self.epoch_requests;
        let (waits, timeouts) = (self.epoch_waits, self.epoch_timeouts);
        self.start_epoch(now);
        match self.phase {
            Phase::Trial(i) => {
                self.rates[i] = rate;
                let next = i + 1;
                let best_so_far = self.rates[..i].iter().copied().fold(0.0, f64::max);
                if i == 0 && requests < MIN_EPOCH_REQUESTS {
                    self.hold(1);
                } else if next < LADDER.len()
                    && LADDER[next] <= self.max_batch
                    && u64::from(LADDER[next]) * self.average_request <= MAX_LOW_WATER
                    && rate >= best_so_far * CLIMB_FLOOR
                {
                    self.phase = Phase::Trial(next);
                    self.batch = LADDER[next];
                } else {
                    let best = self.best(next);
                    self.hold(best);
                }
            }
            Phase::Hold(left) => {
                // Many timeouts: the client has fewer requests in flight
                // than the batch waits for.
                if self.batch > 1 && timeouts > 0 && timeouts * 8 >= waits {
                    self.batch = 1;
                    self.chosen = 1;
                    self.hold_epochs = HOLD_EPOCHS;
                }
                if left <= 1 {
                    self.phase = Phase::Trial(0);
                    self.batch = 1;
                } else {
                    self.phase = Phase::Hold(left - 1);
                }
            }
        }
    }

    fn start_epoch(&mut self, now: Instant) {
        self.epoch_start = Some(now);
        self.epoch_requests = 0;
        self.epoch_waits = 0;
        self.epoch_timeouts = 0;
    }

    fn hold(&mut self, batch: u32) {
        self.hold_epochs = if batch == self.chosen {
            (self.hold_epochs * 2).min(MAX_HOLD_EPOCHS)
        } else {
            HOLD_EPOCHS
        };
        self.chosen = batch;
        self.batch = batch;
        self.phase = Phase::Hold(self.hold_epochs);
    }

    /// The best of the first `tried` ladder steps.
    fn best(&self, tried: usize) -> u32 {
        let base = self.rates[0];
        let (i, rate) =
            self.rates[..tried]
                .iter()
                .copied()
                .enumerate()
                .fold(
                    (0, base),
                    |acc, (i, r)| if r > acc.1 { (i, r) } else { acc },
                );
        if i > 0 && rate >= base * MIN_GAIN {
            LADDER[i]
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs one epoch with `requests` requests and `timeouts` of `waits`.
    fn epoch(p: &mut CoalescePolicy, t: &mut Instant, requests: u64, waits: u32, timeouts: u32) {
        for _ in 0..requests {
            p.request(28);
        }
        for i in 0..waits {
            p.waited(i < timeouts);
        }
        *t += EPOCH;
        p.tick(*t);
    }

    /// A policy past its warm-up, about to measure batch size 1.
    fn started(max: u32) -> (CoalescePolicy, Instant) {
        let mut p = CoalescePolicy::new(max, Duration::from_micros(50));
        let mut t = Instant::now();
        p.tick(t);
        for _ in 0..WARMUP_EPOCHS {
            assert_eq!(p.batch(), 1, "no coalescing while warming up");
            epoch(&mut p, &mut t, 1000, 1000, 0);
        }
        (p, t)
    }

    #[test]
    fn off_when_max_is_one_or_wait_is_zero() {
        assert!(!CoalescePolicy::new(1, Duration::from_micros(50)).enabled());
        assert!(!CoalescePolicy::new(8, Duration::ZERO).enabled());
        let (mut p, mut t) = started(1);
        epoch(&mut p, &mut t, 1000, 10, 0);
        assert_eq!(p.batch(), 1);
        assert_eq!(p.low_water(), None);
    }

    #[test]
    fn tries_each_size_and_keeps_the_fastest() {
        let (mut p, mut t) = started(8);
        assert_eq!(p.batch(), 1);
        epoch(&mut p, &mut t, 1000, 1000, 0);
        assert_eq!(p.batch(), 2);
        assert_eq!(p.low_water(), Some(56));
        epoch(&mut p, &mut t, 1200, 600, 0);
        assert_eq!(p.batch(), 4);
        epoch(&mut p, &mut t, 1300, 325, 0);
        assert_eq!(p.batch(), 8);
        epoch(&mut p, &mut t, 1250, 160, 0);
        assert_eq!(p.batch(), 4, "the fastest trial wins");
        for _ in 0..HOLD_EPOCHS - 1 {
            epoch(&mut p, &mut t, 1300, 325, 0);
            assert_eq!(p.batch(), 4);
        }
        epoch(&mut p, &mut t, 1300, 325, 0);
        assert_eq!(p.batch(), 1, "a new round of trials starts at 1");
    }

    #[test]
    fn stops_climbing_when_a_size_starves_the_client() {
        let (mut p, mut t) = started(16);
        epoch(&mut p, &mut t, 1000, 1000, 0);
        epoch(&mut p, &mut t, 1200, 600, 0);
        assert_eq!(p.batch(), 4);
        epoch(&mut p, &mut t, 700, 175, 0);
        assert_eq!(p.batch(), 2, "4 was much worse: 8 and 16 are not tried");
    }

    #[test]
    fn the_same_choice_round_after_round_is_held_longer() {
        let (mut p, mut t) = started(2);
        let mut holds = Vec::new();
        for _ in 0..5 {
            epoch(&mut p, &mut t, 1000, 1000, 0);
            epoch(&mut p, &mut t, 1500, 750, 0);
            assert_eq!(p.batch(), 2);
            let mut held = 0;
            while p.batch() == 2 {
                epoch(&mut p, &mut t, 1500, 750, 0);
                held += 1;
            }
            holds.push(held);
        }
        assert_eq!(holds, [50, 100, 200, 400, 400]);
    }

    #[test]
    fn a_small_gain_is_not_worth_the_latency() {
        let (mut p, mut t) = started(4);
        epoch(&mut p, &mut t, 1000, 1000, 0);
        epoch(&mut p, &mut t, 1040, 520, 0);
        epoch(&mut p, &mut t, 1030, 260, 0);
        assert_eq!(p.batch(), 1);
    }

    #[test]
    fn a_slow_client_is_not_tried() {
        let (mut p, mut t) = started(8);
        epoch(&mut p, &mut t, MIN_EPOCH_REQUESTS - 1, 10, 0);
        assert_eq!(p.batch(), 1);
        epoch(&mut p, &mut t, 1000, 1000, 0);
        assert_eq!(p.batch(), 1, "held, not trying");
    }

    #[test]
    fn timeouts_drop_batching() {
        let (mut p, mut t) = started(2);
        epoch(&mut p, &mut t, 1000, 1000, 0);
        epoch(&mut p, &mut t, 1500, 750, 0);
        assert_eq!(p.batch(), 2);
        epoch(&mut p, &mut t, 1500, 750, 1);
        assert_eq!(p.batch(), 2, "one timeout in 750 waits is a hiccup");
        epoch(&mut p, &mut t, 100, 80, 40);
        assert_eq!(p.batch(), 1);
    }

    #[test]
    fn low_water_follows_the_request_size() {
        let (mut p, mut t) = started(2);
        for _ in 0..1000 {
            p.request(4096 + 28);
        }
        t += EPOCH;
        p.tick(t);
        assert_eq!(p.batch(), 2);
        let mark = p.low_water().expect("a mark for 4 KiB writes");
        assert!(mark.abs_diff(2 * (4096 + 28)) <= 16, "{mark}");
        for _ in 0..100 {
            p.request(1 << 20);
        }
        assert_eq!(p.low_water(), None, "1 MiB writes are not coalesced");
    }

    #[test]
    fn large_requests_are_not_tried() {
        let (mut p, mut t) = started(8);
        for _ in 0..1000 {
            p.request(1 << 20);
        }
        t += EPOCH;
        p.tick(t);
        assert_eq!(p.batch(), 1, "no trial at batch 2 for 1 MiB requests");
        for _ in 0..HOLD_EPOCHS {
            epoch(&mut p, &mut t, 0, 0, 0);
            assert_eq!(p.batch(), 1);
        }
    }
}
