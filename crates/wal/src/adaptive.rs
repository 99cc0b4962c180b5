//! The adaptive group-commit controller: how long a flush leader keeps its group open.
//!
//! Pure logic, driven by a caller-supplied clock (µs), so that the same code runs in the WAL
//! and in the simulated-device tests below. See DESIGN.md, "Adaptive group commit", for the
//! algorithm and its sources. In short:
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

use std::collections::HashMap;

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

    /// Ends the epoch that ran at `rate` commits/µs and `flush_rate` flushes/µs.
    fn end_epoch(&mut self, rate: f64, flush_rate: f64) {
        if !matches!(self.probe, Probe::Explore(_)) {
            self.quiet_epochs = self.quiet_epochs.saturating_sub(1);
        }
        tracing::debug!(
            target: "walnut::group_commit",
            probe = ?self.probe,
            commits_per_s = (rate * 1e6) as u64,
            patience_us = self.patience_us as i64,
            explore_every = self.explore_every,
            sessions = self.sessions.len(),
            slow_flush_us = self.slow_flush_us as u64,
            flushes_per_s = (flush_rate * 1e6) as u64,
            "epoch"
        );
        match self.probe {
            Probe::Up => {
                self.up_rate = Some(rate);
                self.up_flush_rate = flush_rate;
                self.probe = Probe::Down;
            }
            Probe::Down => {
                if let Some(up) = self.up_rate.take() {
                    self.utilization = self
                        .capacity
                        .map(|c| self.up_flush_rate.max(flush_rate) / c);
                    self.explore_ref = up.max(rate);
                    self.hill_climb(up, rate);
                }
                if self.detect_change() {
                    self.explore_ref = rate;
                }
                self.probe = self.after_pair();
            }
            Probe::Explore(target) => {
                let won = rate > self.explore_ref * (1.0 + CONTRARY_BAND);
                let against_lean = !self.busy && target > self.patience_us;
                let first_win = won && against_lean && self.confirm_up.is_none();
                self.confirm_up = None;
                if first_win {
                    // Up is the disfavoured direction with spare capacity, and one epoch of a
                    // CPU-bound load wins by 5% on noise alone: try it again after the next
                    // pair, and jump only on a second win in a row.
                    self.confirm_up = Some(target);
                } else if won {
                    // A distant patience beat both local probes: jump there. The next
                    // exploration would try where we came from, so it can wait a little.
                    self.patience_us = target;
                    self.step = STEP;
                    self.last_move = 0;
                    self.contrary_votes = 0;
                    self.explore_every = 4;
                    self.settle_pairs = 3;
                } else {
                    self.explore_every = (self.explore_every * 2).min(MAX_EXPLORE_EVERY);
                }
                self.quiet_epochs = 1;
                self.pairs_since_explore = 0;
                self.probe = Probe::Up;
            }
        }
    }

    /// One move of the hill climb after a probe pair (`up`, `down`: their commit rates). The
    /// favoured direction (up while the device is busy, down while it has spare capacity; see
    /// [`BUSY_FRACTION`]) moves on one pair won by [`DEAD_BAND`], the other on
    /// [`CONTRARY_VOTES`] pairs in a row won by [`CONTRARY_BAND`].
    fn hill_climb(&mut self, up: f64, down: f64) {
        let busy = !matches!(self.utilization, Some(u) if u < BUSY_FRACTION);
        if busy != self.busy {
            // The disfavoured probe is now the other one: earlier votes were for the other way.
            self.busy = busy;
            self.contrary_votes = 0;
        }
        let (favoured, favoured_rate, other_rate): (i8, f64, f64) =
            if busy { (1, up, down) } else { (-1, down, up) };
        if other_rate > favoured_rate * (1.0 + CONTRARY_BAND) {
            self.contrary_votes = self.contrary_votes.saturating_add(1);
        } else {
            self.contrary_votes = 0;
        }
        let dir: i8 = if favoured_rate > other_rate * (1.0 + DEAD_BAND) {
            favoured
        } else if self.contrary_votes >= CONTRARY_VOTES {
            self.contrary_votes = 0;
            -favoured
        } else {
            0
        };
        self.step = if dir != 0 && dir == self.last_move {
            (self.step * STEP_GROWTH).min(MAX_STEP)
        } else {
            STEP
        };
        self.last_move = dir;
        let p = self.patience_us.max(MIN_PATIENCE_US);
        match dir {
            1 => self.patience_us = (p * self.step).min(MAX_PATIENCE_US),
            -1 => {
                self.patience_us = p / self.step;
                if self.patience_us < MIN_PATIENCE_US {
                    self.patience_us = 0.0;
                }
            }
            _ => {}
        }
    }

    /// After a probe pair: true if the load or the disk changed — the committing sessions, or
    /// the slow average of flush latency (not fed by exploration epochs nor the epoch after
    /// one), moved by [`CHANGE_FACTOR`] since the reference — and then exploration restarts at
    /// every pair.
    fn detect_change(&mut self) -> bool {
        let sessions = self.sessions.len();
        if self.settle_pairs > 0 {
            self.settle_pairs -= 1;
            self.ref_flush_us = self.slow_flush_us;
            self.ref_sessions = sessions;
            return false;
        }
        let changed = |a: f64, b: f64| a > b * CHANGE_FACTOR || b > a * CHANGE_FACTOR;
        if changed(sessions.max(1) as f64, self.ref_sessions.max(1) as f64)
            || changed(self.slow_flush_us.max(1.0), self.ref_flush_us.max(1.0))
        {
            self.ref_sessions = sessions;
            self.ref_flush_us = self.slow_flush_us;
            self.explore_every = 1;
            self.pairs_since_explore = self.pairs_since_explore.max(1);
            return true;
        }
        false
    }

    /// The probe after a pair: an exploration epoch when one is due, else the next pair.
    ///
    /// A hill climb cannot leave a plateau: at zero patience (flushing at once, two flushes in
    /// flight) a cohort split into two groups stays split however the probes nudge patience,
    /// and at a long patience the probes cannot see that zero would pipeline. So every
    /// `explore_every` pairs one epoch tries the far side — if patience is long, alternately
    /// an eighth of it and zero, else the time a whole cohort needs (twice the median session
    /// cycle, at least twice the flush latency) — and patience jumps there if it wins by
    /// [`CONTRARY_BAND`]; a longer patience, while the device has spare capacity (up is then
    /// the disfavoured direction, see [`CONTRARY_BAND`]), only if it wins twice in a row, the
    /// second time right after the next pair. A failed exploration
    /// doubles the interval, up to [`MAX_EXPLORE_EVERY`] pairs (the cost of a bad epoch is then
    /// under 1% of the time); a new load or a new disk (sessions or slow flush latency changed
    /// by [`CHANGE_FACTOR`]) restarts it at every pair, so that patience settles within about a
    /// second of the change.
    fn after_pair(&mut self) -> Probe {
        self.pairs_since_explore += 1;
        let sessions = self.sessions.len();
        if let Some(target) = self.confirm_up.filter(|_| sessions >= 2) {
            return Probe::Explore(target);
        }
        if sessions < 2 || self.pairs_since_explore < self.explore_every {
            return Probe::Up;
        }
        let mut cycles: Vec<f64> = self
            .sessions
            .values()
            .map(|s| s.cycle_us)
            .filter(|&c| c > 0.0)
            .collect();
        cycles.sort_by(f64::total_cmp);
        let median = cycles.get(cycles.len() / 2).copied().unwrap_or(0.0);
        let mut cohort = (2.0 * median.max(self.flush_us)).min(MAX_PATIENCE_US);
        if !self.busy {
            // With spare capacity a wait saves only flushes the device would do anyway: no
            // longer than a few of them (Helland et al.'s timer is of the order of a flush).
            cohort = cohort.min(SPARE_EXPLORE_FLUSHES * self.flush_us);
        }
        let target = if self.patience_us < cohort / 4.0 {
            cohort
        } else {
            // From a long patience, alternately an eighth of it and zero: the rate may be flat
            // from the cohort's whole spread upwards while a shorter wait does better.
            self.explorations_down += 1;
            if self.explorations_down % 2 == 1 {
                let t = self.patience_us / EXPLORE_DIVISOR;
                if t < MIN_PATIENCE_US {
                    0.0
                } else {
                    t
                }
            } else {
                0.0
            }
        };
        Probe::Explore(target)
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

#[cfg(test)]
mod tests {
    //! The controller against a simulated device: fixed flush latency and an IOPS cap (a token
    //! bucket; a durable flush costs 2 write requests, the write and the cache flush, as on a
    //! volatile-cache disk without FUA). Clients loop: think (the transaction's work, with
    //! jitter), request a commit, wait for the flush. The group-commit protocol is the WAL's:
    //! one flush at a time; the first waiter after a flush becomes the next leader.
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn jitter(&mut self, base: u64, pct: u64) -> u64 {
            let span = base * pct / 100;
            base - span + self.next() % (2 * span + 1)
        }
    }

    #[derive(Clone, Copy)]
    enum Policy {
        Adaptive,
        /// PostgreSQL: sleep `delay` µs if at least `siblings` other transactions are active.
        Fixed {
            delay: u64,
            siblings: usize,
        },
    }

    #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
    enum Ev {
        /// A client finished thinking and requests a commit.
        Arrive(usize),
        /// The leader's wait timer fires (tagged with the group's id).
        Timer(u64),
        /// A flush in flight completes (tagged with its group's id).
        FlushDone(u64),
    }

    struct Device {
        latency: u64,
        /// Write requests per second; 0 = unlimited.
        iops: u64,
        /// Token bucket as virtual time: the next request may start at this time, µs.
        next_token: f64,
    }

    /// Requests a throttle may let through at once after an idle spell.
    const BUCKET_DEPTH: f64 = 2.0;

    impl Device {
        /// Start time of one write request submitted at `t` (token bucket).
        fn request(&mut self, t: f64) -> f64 {
            if self.iops == 0 {
                return t;
            }
            let gap = 1e6 / self.iops as f64;
            self.next_token = self.next_token.max(t - BUCKET_DEPTH * gap);
            let start = t.max(self.next_token);
            self.next_token += gap;
            start
        }

        /// When a flush issued at `now` completes: the write, then the cache flush, each half
        /// the device latency.
        fn flush(&mut self, now: u64) -> u64 {
            let half = self.latency as f64 / 2.0;
            let w = self.request(now as f64);
            let f = self.request(w + half);
            (f + half).ceil() as u64
        }
    }

    /// Runs `secs` simulated seconds and returns commits/s after the first second.
    fn simulate(
        clients: usize,
        think: u64,
        latency: u64,
        iops: u64,
        policy: Policy,
        secs: u64,
    ) -> f64 {
        Sim {
            clients,
            think,
            latency,
            iops,
            change: None,
            late_clients: None,
            window: (1_000_000, secs * 1_000_000),
        }
        .run(policy)
    }

    /// One simulated run. The device's IOPS cap may change at a point in time (`change`:
    /// (µs, new cap)); only the first clients may run at first (`late_clients`: (µs, clients
    /// before then)); commits are counted in `window` (µs, half open).
    struct Sim {
        clients: usize,
        think: u64,
        latency: u64,
        iops: u64,
        change: Option<(u64, u64)>,
        late_clients: Option<(u64, usize)>,
        window: (u64, u64),
    }

    impl Sim {
        /// Commits/s in the window.
        fn run(&self, policy: Policy) -> f64 {
            let commits = simulate_inner(self, policy);
            commits as f64 * 1e6 / (self.window.1 - self.window.0) as f64
        }
    }

    fn simulate_load_change(iops: u64) -> f64 {
        Sim {
            clients: 10,
            think: 1000,
            latency: 200,
            iops,
            change: None,
            late_clients: Some((3_000_000, 1)),
            window: (4_000_000, 6_000_000),
        }
        .run(Policy::Adaptive)
    }

    /// Runs `sim` and returns the commits counted in its window.
    fn simulate_inner(sim: &Sim, policy: Policy) -> u64 {
        simulate_stats(sim, policy).commits
    }

    /// What a simulation counted in its window.
    #[derive(Debug, Default)]
    struct SimStats {
        /// Commits acknowledged.
        commits: u64,
        /// Groups closed (flushes issued).
        groups: u64,
        /// Groups kept open at all before their flush.
        waited_groups: u64,
        /// Time groups were kept open, in all, µs.
        wait_us: u64,
    }

    /// Runs `sim` and returns what it counted in its window.
    fn simulate_stats(sim: &Sim, policy: Policy) -> SimStats {
        let &Sim {
            clients,
            think,
            latency,
            iops,
            change,
            late_clients,
            window,
        } = sim;
        let end = window.1;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (clients as u64) ^ (iops << 20));
        // What the server's start-up probe would measure: the device at start, back to back.
        let capacity = if iops == 0 {
            1e6 / latency as f64
        } else {
            (1e6 / latency as f64).min(iops as f64 / 2.0)
        };
        let mut ctl = Controller::with_flush_capacity(Some(capacity));
        let mut dev = Device {
            latency,
            iops,
            next_token: 0.0,
        };
        let mut q: BinaryHeap<Reverse<(u64, Ev)>> = BinaryHeap::new();
        for c in 0..clients {
            let start = match late_clients {
                Some((at, before)) if c >= before => at,
                _ => 0,
            };
            q.push(Reverse((start + rng.jitter(think, 50), Ev::Arrive(c))));
        }
        let mut waiting: Vec<usize> = Vec::new(); // queued for a free flight slot
        let mut group: Vec<usize> = Vec::new(); // members of the open group
        let mut open: Option<(u64, u64)> = None; // (group id, opened at)
                                                 // Flights in issue order: (group id, members, issued at, done).
        let mut in_flight: std::collections::VecDeque<(u64, Vec<usize>, u64, bool)> =
            std::collections::VecDeque::new();
        // As in group_commit.rs: two flights when the adaptive patience in force is zero.
        let limit = |ctl: &Controller| match policy {
            Policy::Adaptive if ctl.effective_patience_us() == 0 => 2,
            _ => 1,
        };
        let mut group_id = 0u64;
        let mut stats = SimStats::default();

        while let Some(Reverse((now, ev))) = q.pop() {
            if now > end {
                break;
            }
            if let Some((at, cap)) = change {
                if now >= at && dev.iops != cap {
                    dev.iops = cap;
                    dev.next_token = now as f64;
                }
            }
            // What happened to the open group: opened now, an arrival joined, or its timer.
            let mut opened_now = false;
            let mut timer_fired = false;
            match ev {
                Ev::Arrive(c) => {
                    ctl.on_arrival(now, c as u64, now);
                    if open.is_some() {
                        group.push(c);
                    } else if in_flight.len() >= limit(&ctl) {
                        waiting.push(c);
                    } else {
                        group_id += 1;
                        open = Some((group_id, now));
                        opened_now = true;
                        group.push(c);
                    }
                }
                Ev::Timer(id) => {
                    if open.map(|(g, _)| g) != Some(id) {
                        continue;
                    }
                    timer_fired = true;
                }
                Ev::FlushDone(id) => {
                    if let Some(f) = in_flight.iter_mut().find(|f| f.0 == id) {
                        f.3 = true;
                    }
                    // Publish in issue order.
                    while in_flight.front().is_some_and(|f| f.3) {
                        let (_, members, issued, _) = in_flight.pop_front().expect("front");
                        ctl.on_flush_done(now, now - issued, members.len() as u64);
                        for &c in &members {
                            ctl.on_release(now, c as u64);
                            if now >= window.0 && now < window.1 {
                                stats.commits += 1;
                            }
                            q.push(Reverse((now + rng.jitter(think, 50), Ev::Arrive(c))));
                        }
                    }
                    if !waiting.is_empty() && open.is_none() && in_flight.len() < limit(&ctl) {
                        group_id += 1;
                        open = Some((group_id, now));
                        opened_now = true;
                        group.append(&mut waiting);
                    }
                }
            }
            let Some((id, opened)) = open else { continue };
            let close_now = match policy {
                Policy::Adaptive => match ctl.decide(now, opened) {
                    None => true,
                    Some(t) => {
                        q.push(Reverse((t.max(now + 1), Ev::Timer(id))));
                        false
                    }
                },
                Policy::Fixed { delay, siblings } => {
                    if opened_now {
                        // Every client is inside a transaction while it thinks.
                        if delay > 0 && clients > siblings {
                            q.push(Reverse((now + delay, Ev::Timer(id))));
                            false
                        } else {
                            true
                        }
                    } else {
                        timer_fired
                    }
                }
            };
            if close_now {
                open = None;
                ctl.on_group_closed(now - opened);
                if now >= window.0 && now < window.1 {
                    stats.groups += 1;
                    stats.waited_groups += u64::from(now > opened);
                    stats.wait_us += now - opened;
                }
                let done = dev.flush(now);
                in_flight.push_back((id, std::mem::take(&mut group), now, false));
                q.push(Reverse((done, Ev::FlushDone(id))));
            }
        }
        stats
    }

    const DELAYS: [u64; 11] = [0, 10, 100, 200, 500, 750, 1000, 1250, 1500, 2000, 3000];

    fn check(clients: usize, think: u64, latency: u64, iops: u64) {
        let secs = 6;
        let adaptive = simulate(clients, think, latency, iops, Policy::Adaptive, secs);
        let (best_delay, best) = DELAYS
            .iter()
            .map(|&d| {
                let t = simulate(
                    clients,
                    think,
                    latency,
                    iops,
                    Policy::Fixed {
                        delay: d,
                        siblings: 5,
                    },
                    secs,
                );
                (d, t)
            })
            .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        eprintln!(
            "clients {clients:>2} think {think:>5} µs latency {latency:>4} µs iops {iops:>5}: adaptive {adaptive:>7.0} tps, best fixed {best:>7.0} tps at {best_delay} µs ({:.2})",
            adaptive / best
        );
        assert!(
            adaptive >= 0.9 * best,
            "adaptive {adaptive:.0} tps < 90% of the best fixed delay ({best_delay} µs: {best:.0} tps) \
             for {clients} clients, think {think} µs, latency {latency} µs, {iops} IOPS"
        );
    }

    /// Up to eight sessions commit at a rate that does not depend on patience at all but
    /// varies from epoch to epoch by tens of percent (a CPU-bound load on two CPUs): 1,000
    /// flushes/s of 1 to 8 commits, the mean changing every 50 ms. Returns the patience after `secs` simulated seconds and its mean over the
    /// second half, µs.
    fn patience_under_noise(capacity: Option<f64>, secs: u64) -> (u64, f64) {
        let mut c = Controller::with_flush_capacity(capacity);
        let mut rng = Rng(0x5EED);
        let mut level = 5u64;
        let (mut sum, mut n) = (0.0, 0u64);
        let mut lsn = 0u64;
        for i in 0..secs * 1000 {
            let now = 1000 + i * 1000;
            if i % 50 == 0 {
                level = 2 + rng.next() % 6; // 2..=7
            }
            let k = (level + rng.next() % 3).saturating_sub(1).max(1); // level-1 ..= level+1
            for s in 0..k {
                lsn += 1;
                c.on_arrival(now - 300 + s, s, lsn);
            }
            c.on_flush_done(now, 200, k);
            c.on_published(now, lsn);
            if i >= secs * 500 {
                sum += c.patience_us() as f64;
                n += 1;
            }
        }
        (c.patience_us(), sum / n as f64)
    }

    #[test]
    fn noise_does_not_lengthen_patience_while_the_device_has_spare_capacity() {
        // 1,000 flushes/s on a device that does 10,000: a wait can save only flushes that cost
        // nothing, so patience must not drift up on noise (the busy rule's easy move up walked
        // it to the cap, 20 ms, on such noise unthrottled).
        let (end, mean) = patience_under_noise(Some(10_000.0), 60);
        let (end_busy, mean_busy) = patience_under_noise(None, 60);
        eprintln!(
            "patience under noise: spare capacity {end} µs (mean {mean:.0}), \
             capacity unknown (busy rule) {end_busy} µs (mean {mean_busy:.0})"
        );
        assert!(
            mean < 1000.0,
            "with spare capacity patience drifted up on noise: mean {mean:.0} µs over 30 s"
        );
    }

    #[test]
    fn votes_for_the_disfavoured_direction_restart_when_the_regime_changes() {
        let mut c = Controller::with_flush_capacity(Some(1000.0));
        c.patience_us = 1000.0;
        // Busy: the shorter probe wins by 6%, one vote for down (two are needed).
        c.utilization = Some(0.9);
        c.hill_climb(100.0, 106.0);
        assert_eq!(c.patience_us, 1000.0);
        // Spare capacity: now the longer probe wins by 6%. That is one vote for up, not a
        // second vote for the same thing.
        c.utilization = Some(0.1);
        c.hill_climb(106.0, 100.0);
        assert_eq!(
            c.patience_us, 1000.0,
            "two votes for opposite directions moved patience"
        );
        // A second pair the same way moves it up.
        c.hill_climb(106.0, 100.0);
        assert!(c.patience_us > 1000.0);
    }

    /// A few sessions whose transactions take 100 to 1000 times a flush, on a fast disk with
    /// nearly all of its capacity spare: a wait could rarely gather a second commit and would
    /// save only flushes that cost nothing, so once settled (after 2 s) leaders do not wait
    /// (with at most a few µs on average, from explorations) and throughput is that of never
    /// waiting.
    #[test]
    fn does_not_wait_on_an_idle_fast_disk() {
        for (clients, think, latency) in [
            (2usize, 20_000u64, 50u64),
            (3, 20_000, 100),
            (4, 20_000, 200),
            (4, 50_000, 50),
            (4, 5_000, 50),
        ] {
            let sim = Sim {
                clients,
                think,
                latency,
                iops: 0,
                change: None,
                late_clients: None,
                window: (2_000_000, 30_000_000),
            };
            let st = simulate_stats(&sim, Policy::Adaptive);
            let never = simulate_stats(
                &sim,
                Policy::Fixed {
                    delay: 0,
                    siblings: 0,
                },
            );
            let mean_wait = st.wait_us as f64 / st.groups.max(1) as f64;
            eprintln!(
                "idle fast disk: {clients} clients, think {think} µs, flush {latency} µs: \
                 {} commits (never waiting: {}), mean wait {mean_wait:.2} µs, {} of {} groups waited",
                st.commits, never.commits, st.waited_groups, st.groups
            );
            assert!(
                mean_wait <= 0.02 * latency as f64,
                "{clients} clients, think {think} µs, flush {latency} µs: leaders waited \
                 {mean_wait:.2} µs on average"
            );
            assert!(st.commits as f64 >= 0.99 * never.commits as f64);
        }
    }

    /// With spare capacity, an exploration to a longer patience that wins once is tried again
    /// right after the next pair, and patience jumps there only on the second win in a row;
    /// a loss in between forgets the first win.
    #[test]
    fn a_longer_patience_needs_two_exploration_wins_in_a_row_with_spare_capacity() {
        let spare_pair = |c: &mut Controller| {
            c.end_epoch(1.0, 0.000_1); // Up: 100 flushes/s against 10,000
            c.end_epoch(1.0, 0.000_1); // Down
        };
        for second_wins in [true, false] {
            let mut c = Controller::with_flush_capacity(Some(10_000.0));
            c.on_arrival(0, 1, 1);
            c.on_arrival(0, 2, 2);
            c.patience_us = 50.0;
            c.busy = false;
            c.explore_ref = 1.0;
            c.probe = Probe::Explore(5000.0);
            c.end_epoch(1.2, 0.000_1); // wins by 20%
            assert_eq!(c.patience_us, 50.0, "one win is not enough");
            assert_eq!(c.probe, Probe::Up);
            spare_pair(&mut c);
            assert_eq!(
                c.probe,
                Probe::Explore(5000.0),
                "tried again after one pair"
            );
            c.end_epoch(if second_wins { 1.2 } else { 1.0 }, 0.000_1);
            if second_wins {
                assert_eq!(c.patience_us, 5000.0, "two wins in a row jump");
            } else {
                assert_eq!(c.patience_us, 50.0);
                assert_eq!(c.confirm_up, None, "the first win is forgotten");
            }
        }
        // While the device is busy, up is favoured: one win jumps.
        let mut c = Controller::with_flush_capacity(Some(10_000.0));
        c.on_arrival(0, 1, 1);
        c.on_arrival(0, 2, 2);
        c.patience_us = 50.0;
        c.busy = true;
        c.explore_ref = 1.0;
        c.probe = Probe::Explore(5000.0);
        c.end_epoch(1.2, 0.009);
        assert_eq!(c.patience_us, 5000.0);
    }

    #[test]
    fn single_client_never_waits() {
        let mut c = Controller::new();
        c.on_arrival(0, 1, 0);
        c.on_flush_done(200, 200, 1);
        c.on_release(200, 1);
        c.on_arrival(1200, 1, 1200);
        assert_eq!(c.decide(1200, 1200), None, "nobody else can join");
    }

    /// Sessions 1 and 2 commit together every 3000 µs for four rounds (until 12000 µs): a
    /// flush of 2000 µs, then a cycle of 1000 µs each.
    fn two_sessions_in_step() -> Controller {
        let mut c = Controller::new();
        for round in 0..4u64 {
            let t = round * 3000;
            c.on_arrival(t, 1, t);
            c.on_arrival(t + 10, 2, t + 10);
            c.on_flush_done(t + 2000, 2000, 2);
            c.on_published(t + 2000, t + 10);
            c.on_release(t + 2000, 1);
            c.on_release(t + 2000, 2);
        }
        c
    }

    #[test]
    fn waits_for_an_expected_session_and_not_for_an_idle_one() {
        let mut c = two_sessions_in_step();
        // Session 1 arrives; session 2 is expected about 1000 µs after its release.
        let now = 4 * 3000;
        c.on_arrival(now, 1, now);
        let w = c.decide(now, now).expect("session 2 is worth waiting for");
        assert!(w > now && w <= now + 2 * 3000);
        // Once session 2 has gone idle for longer than STALE_US it is forgotten.
        let later = now + STALE_US + 10;
        c.on_flush_done(later, 2000, 1);
        c.on_release(later, 1);
        c.on_arrival(later + 1, 1, later + 1);
        assert_eq!(c.decide(later + 1, later + 1), None);
    }

    #[test]
    fn a_session_released_by_a_publish_is_expected_before_its_thread_says_so() {
        let mut c = two_sessions_in_step();
        // The next flush covers both. Session 1's thread gets the mutex back, runs its next
        // transaction and opens a group before session 2's thread has run at all.
        let t = 4 * 3000;
        c.on_arrival(t, 1, t);
        c.on_arrival(t + 10, 2, t + 10);
        c.on_flush_done(t + 2000, 2000, 2);
        c.on_published(t + 2000, t + 10);
        c.on_release(t + 2000, 1);
        c.on_arrival(t + 2900, 1, t + 2900);
        let w = c.decide(t + 2900, t + 2900);
        assert!(
            w.is_some(),
            "session 2 was released by the publish and is due about now: wait for it"
        );
        // Its thread's own release, later, does not move its release time.
        c.on_release(t + 2950, 2);
        assert_eq!(c.decide(t + 2900, t + 2900), w);
    }

    #[test]
    fn matches_the_best_fixed_delay_on_simulated_devices() {
        // IOPS caps: unlimited, 5000 and 1000 write requests per second.
        for &iops in &[0u64, 5000, 1000] {
            for &clients in &[1usize, 10, 64] {
                check(clients, 1000, 200, iops);
            }
        }
    }

    /// The best fixed delay's throughput for a device that does not change.
    fn best_fixed(clients: usize, think: u64, latency: u64, iops: u64) -> (u64, f64) {
        DELAYS
            .iter()
            .map(|&d| {
                let t = simulate(
                    clients,
                    think,
                    latency,
                    iops,
                    Policy::Fixed {
                        delay: d,
                        siblings: 5,
                    },
                    4,
                );
                (d, t)
            })
            .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a })
    }

    #[test]
    fn settles_within_about_a_second_after_the_disk_changes() {
        // The disk changes at 3 s; throughput from 4 s to 6 s must be within 10% of the best
        // fixed delay for the new disk (measured on a disk that was always like it).
        for (before, after) in [(0u64, 1000u64), (1000, 0), (5000, 1000)] {
            for clients in [10usize, 64] {
                let sim = Sim {
                    clients,
                    think: 1000,
                    latency: 200,
                    iops: before,
                    change: Some((3_000_000, after)),
                    late_clients: None,
                    window: (4_000_000, 6_000_000),
                };
                let adaptive = sim.run(Policy::Adaptive);
                let (d, best) = best_fixed(clients, 1000, 200, after);
                eprintln!(
                    "clients {clients:>2} iops {before:>5} -> {after:>5}: adaptive {adaptive:>7.0} tps 1-3 s after the change, best fixed {best:>7.0} at {d} µs ({:.2})",
                    adaptive / best
                );
                assert!(
                    adaptive >= 0.9 * best,
                    "{clients} clients, {before} -> {after} IOPS: adaptive {adaptive:.0} tps < 90% of {best:.0}"
                );
            }
        }
    }

    #[test]
    fn settles_within_about_a_second_after_the_load_changes() {
        // From 1 client for 3 s to 10 clients (9 of them start at 3 s): 1-3 s later,
        // within 10% of the best fixed delay for 10 clients.
        for iops in [0u64, 1000] {
            let (_, best) = best_fixed(10, 1000, 200, iops);
            let adaptive = simulate_load_change(iops);
            eprintln!(
                "iops {iops:>5}, 1 -> 10 clients: adaptive {adaptive:>7.0} tps 1-3 s after, best fixed {best:>7.0} ({:.2})",
                adaptive / best
            );
            assert!(
                adaptive >= 0.9 * best,
                "{iops} IOPS: {adaptive:.0} < 90% of {best:.0}"
            );
        }
    }

    #[test]
    fn matches_the_best_fixed_delay_with_slow_transactions() {
        for &clients in &[10usize, 64] {
            check(clients, 5000, 500, 1000);
        }
    }
}
