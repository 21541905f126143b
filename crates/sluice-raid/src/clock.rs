//! The time the array's background work reads: when a rebuild last
//! recorded its progress, and how long the rebuild and scrub rate limit
//! makes a step wait.
//!
//! An array reads time through a [`Clock`]: [`SystemClock`] (the
//! default) is the real one; [`ManualClock`] stands still until advanced,
//! so a test can let exactly as much time pass as it means to, and wait
//! for the array's thread to go to sleep on it rather than sleeping
//! itself (see [`RaidDevice::with_clock`](crate::RaidDevice::with_clock)).

use std::fmt::Debug;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A source of the current time that can also wait for time to pass.
pub trait Clock: Send + Sync + Debug {
    /// The current instant of this clock.
    fn now(&self) -> Instant;
    /// Blocks the calling thread until `duration` of this clock's time
    /// has passed.
    fn sleep(&self, duration: Duration);
}

/// The real clock: [`Instant::now`] and [`std::thread::sleep`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A clock that moves only when [`advance`](Self::advance)d, for tests:
/// its threads sleep until it is advanced past their wake-up time, and
/// a test can wait until a thread sleeps on it
/// ([`wait_for_sleeper`](Self::wait_for_sleeper)).
#[derive(Debug)]
pub struct ManualClock {
    /// The real instant this clock started at; [`Clock::now`] is this
    /// plus the time advanced since.
    origin: Instant,
    state: Mutex<ManualState>,
    /// Signalled whenever the time moves or a sleeper comes or goes.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct ManualState {
    /// Time advanced since `origin`.
    elapsed: Duration,
    /// When each sleeping thread wakes, as time since `origin`.
    wakes: Vec<Duration>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock standing at the real current instant.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            state: Mutex::new(ManualState::default()),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, ManualState> {
        // Every change to the state is a single assignment or push; a
        // panic elsewhere cannot leave it half done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the time on by `by`, waking every sleeper whose time has
    /// come.
    pub fn advance(&self, by: Duration) {
        let mut state = self.state();
        state.elapsed += by;
        drop(state);
        self.changed.notify_all();
    }

    /// Threads sleeping on this clock whose time has not yet come.
    pub fn sleepers(&self) -> usize {
        self.state().pending().count()
    }

    /// Waits until a thread sleeps on this clock with time still to
    /// sleep, and returns how long the first of them to wake has left;
    /// `None` if none does within `bound` of real time (the bound only
    /// keeps a test from hanging). A thread whose time has come but
    /// which has not yet woken does not count.
    pub fn wait_for_sleeper(&self, bound: Duration) -> Option<Duration> {
        let state = self.state();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, bound, |s| s.pending().next().is_none())
            .unwrap_or_else(|p| p.into_inner());
        let elapsed = state.elapsed;
        state.pending().min().map(|wake| wake - elapsed)
    }
}

impl ManualState {
    /// When each thread still to wake wakes.
    fn pending(&self) -> impl Iterator<Item = Duration> + '_ {
        self.wakes.iter().copied().filter(|&w| w > self.elapsed)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.origin + self.state().elapsed
    }

    fn sleep(&self, duration: Duration) {
        if duration.is_zero() {
            return;
        }
        let mut state = self.state();
        let wake = state.elapsed + duration;
        state.wakes.push(wake);
        self.changed.notify_all();
        let mut state = self
            .changed
            .wait_while(state, |s| s.elapsed < wake)
            .unwrap_or_else(|p| p.into_inner());
        if let Some(at) = state.wakes.iter().position(|&w| w == wake) {
            state.wakes.swap_remove(at);
        }
        drop(state);
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const BOUND: Duration = Duration::from_secs(30);

    #[test]
    fn a_sleeper_wakes_only_once_the_time_has_come() {
        let clock = Arc::new(ManualClock::new());
        let start = clock.now();
        let sleeper = {
            let clock = Arc::clone(&clock);
            std::thread::spawn(move || {
                clock.sleep(Duration::from_secs(10));
                clock.now()
            })
        };
        assert_eq!(clock.wait_for_sleeper(BOUND), Some(Duration::from_secs(10)));
        clock.advance(Duration::from_secs(4));
        // Still asleep, with what is left to sleep.
        assert_eq!(clock.wait_for_sleeper(BOUND), Some(Duration::from_secs(6)));
        assert_eq!(clock.sleepers(), 1);
        clock.advance(Duration::from_secs(6));
        let woke = sleeper.join().expect("sleeper");
        assert_eq!(woke - start, Duration::from_secs(10));
        assert_eq!(clock.sleepers(), 0);
    }

    #[test]
    fn nothing_sleeps_for_no_time_and_the_wait_is_bounded() {
        let clock = ManualClock::new();
        let before = clock.now();
        clock.sleep(Duration::ZERO);
        assert_eq!(clock.now(), before);
        assert_eq!(clock.wait_for_sleeper(Duration::from_millis(1)), None);
    }
}
