//! The adaptive group-commit controller: how long a flush leader keeps its group open.
//!
//! Pure logic, driven by a caller-supplied clock (µs), so that the same code runs in the WAL
//! and in the simulated-device tests (`sim.rs`, `tests.rs`). See DESIGN.md, "Adaptive group
//! commit", for the algorithm and its sources. In short:
//!
//! 1. **Who may still join.** Every committing session (one per backend thread) is tracked: when
//!    its last commit was acknowledged (`release`) and how long it takes from an acknowledgement
//!    to its next commit request (`cycle`, an EWMA). A session not waiting is *pending*; it is
//!    expected at `release + cycle` — that is how far along its current transaction is. A
//!    session that has not committed for [`STALE_US`] is forgotten (an idle connection).
//! 2. **When to close the group.** The leader closes at once when no session is pending (a
//!    single client never waits). Otherwise it waits for the pending sessions expected before
//!    `opened + patience`, waking at each arrival to decide again, and closes when none is
//!    expected in time.
//! 3. **How patient.** `patience` is tuned by extremum seeking on the measured commit rate
//!    (a perturb-and-observe hill climb): epochs of [`EPOCH_US`] alternate between
//!    `patience × STEP` and `patience ÷ STEP`. The two errors cost differently, and which one
//!    costs more depends on the regime, read from the device's flush capacity (the start-up
//!    probe's back-to-back flushes/s) against the flush rate in use: while the device is
//!    *busy* (at least [`BUSY_FRACTION`] of its capacity, or the capacity is unknown) flushes
//!    are what bounds throughput and a patience too short splits cohorts, so patience moves up
//!    on one pair won by [`DEAD_BAND`] and down only on [`CONTRARY_VOTES`] pairs in a row won
//!    by [`CONTRARY_BAND`]; with *spare* capacity a flush saved buys nothing and a long wait
//!    idles the CPUs, so the rule is mirrored. Consecutive moves in one direction grow by
//!    [`STEP_GROWTH`] up to [`MAX_STEP`] (momentum). Because a hill climb cannot leave a plateau,
//!    an *exploration* epoch now and then tries a distant patience and jumps there if it wins
//!    (see `Controller::after_pair`); a change in load or disk restarts exploration at once. It
//!    starts at the measured flush latency, the natural scale of a group-commit timer (Helland
//!    et al., "Group Commit Timers and High Volume Transaction Systems", HPTS 1987), and is
//!    bounded by [`MAX_PATIENCE_US`]. On a fast idle disk it settles at zero; on an IOPS-capped
//!    disk it settles where a whole cohort of sessions is gathered.
//!
//! This file holds the constants, the session bookkeeping and the leader's decision (steps 1
//! and 2); `tuning.rs` holds step 3, the end of each epoch: the hill climb, change detection
//! and exploration. `sim.rs` is the simulated device and group-commit loop that the tests in
//! `tests.rs` run the controller on.

use std::collections::HashMap;

mod tuning;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

/// Length of one measurement epoch, µs.
pub const EPOCH_US: u64 = 100_000;
/// Multiplicative probe step for patience, and the first step of a move.
pub const STEP: f64 = 1.5;
/// Each further move in the same direction multiplies the step by this (momentum), so that a
/// patience far from the optimum gets there in a few epochs.
pub const STEP_GROWTH: f64 = 1.5;
/// Largest multiplicative step of one move.
pub const MAX_STEP: f64 = 4.0;
/// Relative throughput difference by which the favoured probe (the longer one while the device
/// is busy, the shorter one while it has spare capacity; see [`BUSY_FRACTION`]) must win, in one
/// probe pair, to move patience its way.
pub const DEAD_BAND: f64 = 0.01;
/// Relative throughput difference by which the other probe must win, in [`CONTRARY_VOTES`]
/// probe pairs in a row, to move patience its way; also the margin by which an exploration must
/// win to jump. The direction that needs more evidence is the one whose error costs more:
/// - while the device is busy, down. A patience too long costs little (a leader stops waiting
///   as soon as the last expected session arrives), while one shorter than the spread of a
///   cohort's arrivals splits the cohort into groups that stay apart, one flush each; and epoch
///   rates on a throttled disk vary by several percent from the throttle's own time slices;
/// - with spare capacity, up. A flush saved is worth nothing to a device that idles anyway,
///   while a long wait holds every session of the group and leaves the CPUs idle; and epoch
///   rates of a CPU-bound load on two CPUs vary by tens of percent, on which an easy move up
///   walked patience to its cap (0.80 of the best fixed delay; see `crates/wal/DESIGN.md`).
pub const CONTRARY_BAND: f64 = 0.05;
/// Consecutive probe pairs the disfavoured probe must win by [`CONTRARY_BAND`] to move.
pub const CONTRARY_VOTES: u8 = 2;
/// The device counts as busy, and flushes as what bounds throughput, while the higher flush
/// rate of a probe pair is at least this fraction of its flush capacity (or the capacity is
/// unknown). Measured on this project's machine: 0.95–1.15 at 1000 write IOPS; unthrottled
/// 0.13–0.39 in `bench/commit_delay/reference` sittings d, e and h, but up to 0.66 on
/// 2026-11-24, when a threshold of one half read a CPU-bound run as busy and waited (6.6
/// commits per flush, 0.90 of `commit_delay = 10` in the same round).
pub const BUSY_FRACTION: f64 = 0.8;
/// While the device has spare capacity (see [`BUSY_FRACTION`]), an exploration tries a
/// patience of at most this many flush latencies: waiting longer than a few flushes to save
/// one that the device would do anyway cannot pay. Without it, light load on a fast disk
/// explored twice a session's cycle (up to [`MAX_PATIENCE_US`]), and an exploration that won
/// on noise held every commit for milliseconds.
pub const SPARE_EXPLORE_FLUSHES: f64 = 4.0;
/// From a long patience, one exploration target is the patience divided by this.
pub const EXPLORE_DIVISOR: f64 = 8.0;
/// Longest interval between exploration epochs, in probe pairs (6.4 s).
pub const MAX_EXPLORE_EVERY: u32 = 32;
/// A change of this factor in the committing sessions or the slow flush-latency average counts
/// as a new load or a new disk, and exploration restarts at once.
pub const CHANGE_FACTOR: f64 = 2.0;
/// EWMA weight of the slow flush-latency average that detects a changed disk.
const SLOW_ALPHA: f64 = 1.0 / 64.0;
/// An exploration epoch ends early, as a failure, once it has run this long (µs) and at least
/// [`ABORT_MIN_FLUSHES`] flushes at under [`ABORT_FRACTION`] of the rate it must beat. On a
/// throttled disk an exploration at zero patience runs at a sixth of the batched rate (each
/// flush then carries one or two commits) and, left for a whole epoch, scatters the cohort and
/// runs up the throttle's debt for the epochs after it.
pub const ABORT_AFTER_US: u64 = 10_000;
/// See [`ABORT_AFTER_US`].
pub const ABORT_MIN_FLUSHES: u64 = 4;
/// See [`ABORT_AFTER_US`].
pub const ABORT_FRACTION: f64 = 0.5;
/// Patience below this is treated as zero (never wait), µs.
pub const MIN_PATIENCE_US: f64 = 20.0;
/// Upper bound on patience, µs.
pub const MAX_PATIENCE_US: f64 = 20_000.0;
/// A session with no commit request for this long is forgotten, µs.
pub const STALE_US: u64 = 1_000_000;
/// EWMA weight of a new sample.
const ALPHA: f64 = 0.125;

#[derive(Clone, Copy, Debug)]
struct Session {
    /// When its last commit was acknowledged, µs; `None` before the first.
    release: Option<u64>,
    /// EWMA of acknowledgement -> next commit request, µs; 0 until sampled.
    cycle_us: f64,
    /// Its commit request is waiting for a flush.
    waiting: bool,
    /// End of the WAL its waiting commit request needs durable, bytes (the request's LSN).
    lsn: u64,
    /// Last arrival or release, µs.
    last_seen: u64,
}

/// Which probe the current epoch runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Probe {
    /// `patience × STEP`.
    Up,
    /// `patience ÷ STEP`.
    Down,
    /// A distant patience (µs): zero, or long enough to gather a whole cohort.
    Explore(f64),
}

/// The controller's state. All times are µs on the caller's monotonic clock.
#[derive(Debug)]
pub struct Controller {
    sessions: HashMap<u64, Session>,
    /// EWMA of flush service time (write + sync), µs; 0 until the first flush.
    flush_us: f64,
    /// Patience at the centre of the probes, µs.
    patience_us: f64,
    probe: Probe,
    epoch_start: u64,
    epoch_commits: u64,
    /// Commit rate measured in the last `Up` epoch, commits/µs.
    up_rate: Option<f64>,
    /// Multiplicative step of the next move, [`STEP`] ..= [`MAX_STEP`].
    step: f64,
    /// Direction of the last move: +1 up, -1 down, 0 none.
    last_move: i8,
    /// Consecutive probe pairs the disfavoured probe won by [`CONTRARY_BAND`].
    contrary_votes: u8,
    /// The regime of the last probe pair: the device was busy (see [`BUSY_FRACTION`]).
    busy: bool,
    /// The device's flush capacity, flushes/µs: the start-up probe's back-to-back rate; `None`
    /// if unknown (the device counts as busy). Not raised by faster epochs: a throttle grants a
    /// whole time slice's budget at once, and one 100 ms epoch at 1000 write IOPS ran 936
    /// flushes/s, which made the busy disk look half idle.
    capacity: Option<f64>,
    /// Flush rate of the last `Up` epoch, flushes/µs.
    up_flush_rate: f64,
    /// The last probe pair's higher flush rate ÷ capacity; `None` if the capacity is unknown or
    /// no pair has ended yet.
    utilization: Option<f64>,
    /// What the next exploration must beat, commits/µs: the better of the last probe pair's
    /// rates, or the last epoch's alone if the load or the disk changed during the pair.
    explore_ref: f64,
    /// Probe pairs left during which the flush-latency reference follows the slow average
    /// instead of detecting a change (after a jump, the policy itself changes flush latency).
    settle_pairs: u32,
    /// Probe pairs between exploration epochs, 1 ..= [`MAX_EXPLORE_EVERY`].
    explore_every: u32,
    /// Probe pairs since the last exploration epoch.
    pairs_since_explore: u32,
    /// Flushes published in the current epoch.
    epoch_flushes: u64,
    /// Epochs left, after an exploration, whose flush latency does not feed the slow average:
    /// the exploration's own queue at a throttle drains during them.
    quiet_epochs: u32,
    /// Slow EWMA of flush service time, µs, and its value when exploration last restarted.
    slow_flush_us: f64,
    ref_flush_us: f64,
    /// Sessions tracked when exploration last restarted.
    ref_sessions: usize,
    /// Explorations from a long patience so far (they alternate between two targets).
    explorations_down: u32,
    /// An exploration to this longer patience won while the device had spare capacity; the
    /// next exploration, right after the next pair, tries it again, and only a second win in
    /// a row jumps there (see `Controller::after_pair`).
    confirm_up: Option<f64>,
    /// EWMA of the time leaders actually kept groups open, µs.
    waited_us: f64,
    last_prune: u64,
}

impl Default for Controller {
    fn default() -> Self {
        Controller::new()
    }
}

impl Controller {
    /// A controller with no history: patience starts at the first measured flush latency.
    pub fn new() -> Controller {
        Controller {
            sessions: HashMap::new(),
            flush_us: 0.0,
            patience_us: -1.0,
            probe: Probe::Up,
            epoch_start: 0,
            epoch_commits: 0,
            up_rate: None,
            step: STEP,
            last_move: 0,
            contrary_votes: 0,
            busy: true,
            capacity: None,
            up_flush_rate: 0.0,
            utilization: None,
            explore_ref: 0.0,
            settle_pairs: 0,
            explore_every: 1,
            pairs_since_explore: 0,
            epoch_flushes: 0,
            quiet_epochs: 0,
            slow_flush_us: 0.0,
            ref_flush_us: 0.0,
            ref_sessions: 0,
            explorations_down: 0,
            confirm_up: None,
            waited_us: 0.0,
            last_prune: 0,
        }
    }

    /// A controller that knows the device's flush capacity: `flushes_per_sec` durable flushes
    /// per second back to back (the start-up probe's measure, `walnut test-fsync`'s), which
    /// tells it whether the device is busy or has spare capacity (see [`BUSY_FRACTION`]).
    /// A capacity that is not finite or is under 1 flush/s counts as unknown.
    pub fn with_flush_capacity(flushes_per_sec: Option<f64>) -> Controller {
        Controller {
            capacity: flushes_per_sec
                .filter(|c| c.is_finite() && *c >= 1.0)
                .map(|c| c / 1e6),
            ..Controller::new()
        }
    }

    /// A commit request from `session`, which needs the WAL durable up to `lsn` (bytes),
    /// enters the wait for a flush at `now`.
    pub fn on_arrival(&mut self, now: u64, session: u64, lsn: u64) {
        let s = self.sessions.entry(session).or_insert(Session {
            release: None,
            cycle_us: 0.0,
            waiting: false,
            lsn,
            last_seen: now,
        });
        if let Some(r) = s.release {
            let sample = now.saturating_sub(r) as f64;
            s.cycle_us = if s.cycle_us == 0.0 {
                sample
            } else {
                s.cycle_us + ALPHA * (sample - s.cycle_us)
            };
        }
        s.waiting = true;
        s.lsn = lsn;
        s.last_seen = now;
    }

    /// `session`'s commit was acknowledged (its LSN is durable) at `now`. A no-op if
    /// [`Controller::on_published`] already released it.
    pub fn on_release(&mut self, now: u64, session: u64) {
        if let Some(s) = self.sessions.get_mut(&session) {
            if s.waiting {
                s.waiting = false;
                s.release = Some(now);
                s.last_seen = now;
            }
        }
    }

    /// The WAL became durable up to `flushed` (bytes) at `now`: every session waiting for an
    /// LSN at or below it is released now, before its thread gets the mutex back to say so.
    ///
    /// Without this, a leader that opens the next group in the gap — the gap is a chain of
    /// wake-ups, one per woken follower, each needing a CPU — sees the just-released sessions
    /// as still waiting, expects none of them, and flushes alone: on a throttled disk that
    /// single-commit flush costs as much as a full one.
    pub fn on_published(&mut self, now: u64, flushed: u64) {
        for s in self.sessions.values_mut() {
            if s.waiting && s.lsn <= flushed {
                s.waiting = false;
                s.release = Some(now);
                s.last_seen = now;
            }
        }
    }

    /// A flush finished at `now` after `service_us` µs of write and sync, making `commits`
    /// waiting commit requests durable. Advances the patience probes.
    pub fn on_flush_done(&mut self, now: u64, service_us: u64, commits: u64) {
        let f = service_us as f64;
        self.flush_us = if self.flush_us == 0.0 {
            f
        } else {
            self.flush_us + ALPHA * (f - self.flush_us)
        };
        if !matches!(self.probe, Probe::Explore(_)) && self.quiet_epochs == 0 {
            self.slow_flush_us = if self.slow_flush_us == 0.0 {
                f
            } else {
                self.slow_flush_us + SLOW_ALPHA * (f - self.slow_flush_us)
            };
        }
        if self.patience_us < 0.0 {
            self.patience_us = self.flush_us.clamp(0.0, MAX_PATIENCE_US);
            self.epoch_start = now;
            self.epoch_commits = 0;
        }
        self.epoch_commits += commits;
        self.epoch_flushes += 1;
        let elapsed = now.saturating_sub(self.epoch_start);
        let rate = self.epoch_commits as f64 / elapsed.max(1) as f64;
        let losing_exploration = matches!(self.probe, Probe::Explore(_))
            && elapsed >= ABORT_AFTER_US
            && self.epoch_flushes >= ABORT_MIN_FLUSHES
            && rate < self.explore_ref * ABORT_FRACTION;
        if elapsed >= EPOCH_US || losing_exploration {
            let flush_rate = self.epoch_flushes as f64 / elapsed.max(1) as f64;
            self.end_epoch(rate, flush_rate);
            self.epoch_start = now;
            self.epoch_commits = 0;
            self.epoch_flushes = 0;
        }
        if now.saturating_sub(self.last_prune) >= EPOCH_US {
            self.last_prune = now;
            self.sessions
                .retain(|_, s| s.waiting || now.saturating_sub(s.last_seen) < STALE_US);
        }
    }

    /// Patience in force in the current epoch, µs (the probe's, not the centre's).
    fn effective_patience(&self) -> f64 {
        let p = self.patience_us.max(0.0);
        match self.probe {
            Probe::Explore(target) => target,
            Probe::Up => (p.max(MIN_PATIENCE_US) * STEP).min(MAX_PATIENCE_US),
            Probe::Down => {
                let d = p / STEP;
                if d < MIN_PATIENCE_US {
                    0.0
                } else {
                    d
                }
            }
        }
    }

    /// The leader's decision, called when it opens a group and again at every arrival and
    /// timeout: `None` to close the group and flush now, or `Some(t)` to keep it open until
    /// time `t` (µs) or the next arrival, whichever comes first. `opened` is when the group was
    /// opened.
    pub fn decide(&self, now: u64, opened: u64) -> Option<u64> {
        if self.patience_us < 0.0 {
            return None; // no flush measured yet
        }
        let deadline = opened + self.effective_patience() as u64;
        if now >= deadline {
            return None;
        }
        let mut wait_until: Option<u64> = None;
        for s in self.sessions.values() {
            if s.waiting || now.saturating_sub(s.last_seen) >= STALE_US {
                continue;
            }
            let Some(release) = s.release else { continue };
            let expected = release + s.cycle_us as u64;
            // A session already late is expected after as long again as it is late.
            let expected = if expected >= now {
                expected
            } else {
                now + (now - expected)
            };
            if expected <= deadline {
                wait_until = Some(wait_until.map_or(expected, |w: u64| w.max(expected)));
            }
        }
        // Wake at least at the deadline's side of the last expected arrival: a little slack
        // for scheduling noise, never past the deadline.
        wait_until.map(|w| (w + (w - now) / 4 + 1).min(deadline))
    }

    /// True if a group opened at `opened` (µs) has reached its deadline at `now`: the patience
    /// in force ran out, at once when it is zero or not yet measured (before the first flush
    /// the leader never waits). When [`Controller::decide`] returns `None` before that, it is
    /// because no session outside the group was expected in time.
    pub fn deadline_passed(&self, now: u64, opened: u64) -> bool {
        self.patience_us < 0.0 || now >= opened + self.effective_patience() as u64
    }

    /// Record that a leader kept its group open for `waited_us` µs.
    pub fn on_group_closed(&mut self, waited_us: u64) {
        self.waited_us += ALPHA * (waited_us as f64 - self.waited_us);
    }

    /// The patience leaders use in the current epoch (the probe's), µs; 0 = never wait.
    pub fn effective_patience_us(&self) -> u64 {
        if self.patience_us < 0.0 {
            0
        } else {
            self.effective_patience() as u64
        }
    }

    /// The current patience (centre of the probes), µs; 0 = the leader never waits.
    pub fn patience_us(&self) -> u64 {
        self.patience_us.max(0.0) as u64
    }

    /// EWMA of how long leaders recently kept groups open, µs.
    pub fn recent_wait_us(&self) -> u64 {
        self.waited_us as u64
    }

    /// EWMA of flush service time (write + sync), µs.
    pub fn flush_latency_us(&self) -> u64 {
        self.flush_us as u64
    }

    /// The device's flush capacity the controller works with, flushes/s (see
    /// [`Controller::with_flush_capacity`]); `None` if unknown.
    pub fn flush_capacity(&self) -> Option<f64> {
        self.capacity.map(|c| c * 1e6)
    }

    /// The last probe pair's higher flush rate as a fraction of the flush capacity (≥ 0; above
    /// 1 when the disk got faster since the probe, or in a throttle's burst); `None` if the
    /// capacity is unknown or no pair has ended yet. At or above [`BUSY_FRACTION`] the device counts as busy.
    pub fn utilization(&self) -> Option<f64> {
        self.utilization
    }

    /// Sessions seen committing within [`STALE_US`].
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }
}
