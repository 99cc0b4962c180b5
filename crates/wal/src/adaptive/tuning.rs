//! Step 3 of the controller: how patience is tuned. At the end of each epoch
//! (`Controller::end_epoch`) the probe pair's rates move patience by one step of the hill
//! climb (`Controller::hill_climb`), a change of load or disk restarts exploration
//! (`Controller::detect_change`), and an exploration epoch is scheduled when one is due
//! (`Controller::after_pair`). The module doc of `adaptive` explains why.

use super::{
    Controller, Probe, BUSY_FRACTION, CHANGE_FACTOR, CONTRARY_BAND, CONTRARY_VOTES, DEAD_BAND,
    EXPLORE_DIVISOR, MAX_EXPLORE_EVERY, MAX_PATIENCE_US, MAX_STEP, MIN_PATIENCE_US,
    SPARE_EXPLORE_FLUSHES, STEP, STEP_GROWTH,
};

impl Controller {
    /// Ends the epoch that ran at `rate` commits/µs and `flush_rate` flushes/µs.
    pub(super) fn end_epoch(&mut self, rate: f64, flush_rate: f64) {
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
    pub(super) fn hill_climb(&mut self, up: f64, down: f64) {
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
}
