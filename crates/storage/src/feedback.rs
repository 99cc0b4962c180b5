//! `hot_standby_feedback` on the primary: a walsender's hold on the visibility horizon for the
//! queries of its standby (PostgreSQL's `ProcessStandbyHSFeedbackMessage` in walsender.c).
//!
//! A standby numbers its own CSNs, so its feedback is a WAL position `L`
//! ([`crate::xact::XactManager::oldest_snapshot_lsn`]): every query it runs sees every commit
//! whose record ends at or below `L`. The primary turns `L` into a CSN of its own with samples
//! the walsender takes as it streams. A [`Sample`] reads, in this order:
//! 1. the oldest running xid `xmin` ([`crate::xact::XactManager::oldest_running`]);
//! 2. the last published CSN `csn`;
//! 3. the WAL's insert position `lsn`.
//!
//! A commit with a CSN at or below `csn` was published before step 2, so its commit record was
//! inserted before step 3 and ends at or below `lsn`. If `lsn <= L`, every such commit is
//! visible to every standby query, and holding the horizon at `csn` keeps every version those
//! queries can still read. Every xid below `xmin` ended before step 2: aborted, or committed at
//! or below `csn`. `xmin` is what `pg_stat_replication.backend_xmin` shows.
//!
//! The hold uses the newest sample with `lsn <= L`. At most [`SAMPLES`] are kept, one per
//! [`SAMPLE_GAP`] at most and only when the CSN moved; when full, every other sample of the
//! older half goes, so the history always reaches back to the walsender's start, ever more
//! sparsely (a lagging standby, or one with `recovery_min_apply_delay`, still finds a sample
//! at or before its `L`, older than need be). When no sample is that old (`L` is before the
//! walsender's first sample: a standby that connects behind a busy primary), the hold is the
//! oldest sample or the current hold, whichever is older: a guess, newer than `L`
//! ([`StandbyHold::exact`] says so). That is never a correctness question: a standby cancels
//! any query a replayed prune conflicts with (`max_standby_streaming_delay`), and feedback only
//! makes that rarer.
//!
//! The walreceiver never sends an `L` below one it sent before on the connection, so the hold
//! moves forward. It lives as long as the walsender's streaming; it is not stored in a
//! replication slot.

use crate::xact::SnapshotSlot;
use crate::Storage;
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use walnut_common::{Lsn, Xid};

/// Samples kept per walsender.
pub const SAMPLES: usize = 4096;
/// Least time between two samples.
pub const SAMPLE_GAP: Duration = Duration::from_millis(10);

/// The primary's position when a sample was taken (see the module documentation for the order
/// of the reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// The oldest xid running.
    pub xmin: Xid,
    /// The last published CSN.
    pub csn: u64,
    /// The WAL's insert position, bytes.
    pub lsn: u64,
}

/// Samples in the order taken (their `lsn` and `csn` never decrease), at most [`SAMPLES`].
#[derive(Debug, Default)]
pub struct Samples {
    list: VecDeque<Sample>,
}

impl Samples {
    /// Adds `s`, dropping the oldest sample when full; not if nothing committed since the
    /// newest sample, which serves every position `s` would, and more.
    pub fn push(&mut self, s: Sample) {
        if let Some(last) = self.list.back() {
            assert!(
                s.lsn >= last.lsn && s.csn >= last.csn,
                "feedback samples went back: {last:?} then {s:?}"
            );
            if last.csn == s.csn {
                // Nothing committed since: the older sample serves every position this one
                // would, and more.
                return;
            }
        }
        if self.list.len() == SAMPLES {
            // Thin the older half: keep its even-numbered samples (the oldest among them).
            let mut i = 0;
            self.list.retain(|_| {
                i += 1;
                i > SAMPLES / 2 || i % 2 == 1
            });
        }
        self.list.push_back(s);
    }

    /// The newest sample whose `lsn` is at or below `lsn`, if any.
    pub fn at_or_before(&self, lsn: u64) -> Option<Sample> {
        let n = self.list.partition_point(|s| s.lsn <= lsn);
        n.checked_sub(1).map(|i| self.list[i])
    }

    /// The oldest sample kept.
    pub fn oldest(&self) -> Option<Sample> {
        self.list.front().copied()
    }
}

/// One walsender's hold. Dropping it releases the hold.
pub struct StandbyHold {
    st: Arc<Storage>,
    samples: Samples,
    last_sample: Option<Instant>,
    /// Registered at the first feedback that asks for a hold.
    slot: Option<Arc<SnapshotSlot>>,
    held: Option<Sample>,
    /// `held` is a sample at or before the last feedback's position (not a guess).
    exact: bool,
}

impl std::fmt::Debug for StandbyHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StandbyHold")
            .field("held", &self.held)
            .finish_non_exhaustive()
    }
}

impl StandbyHold {
    /// A hold for a walsender of `st`'s WAL, holding nothing yet; it takes its first sample.
    pub fn new(st: Arc<Storage>) -> StandbyHold {
        let mut h = StandbyHold {
            st,
            samples: Samples::default(),
            last_sample: None,
            slot: None,
            held: None,
            exact: false,
        };
        h.sample();
        h
    }

    /// Takes a sample, unless one was taken less than [`SAMPLE_GAP`] ago. The walsender calls
    /// it before each batch it sends and on each feedback. Does nothing on a server whose WAL
    /// is not open (no walsender streams from one: cascading is refused).
    pub fn sample(&mut self) {
        if self.last_sample.is_some_and(|t| t.elapsed() < SAMPLE_GAP) {
            return;
        }
        let Some(wal) = self.st.wal_if_open() else {
            return;
        };
        let xact = &self.st.xact;
        let xmin = xact.oldest_running();
        let csn = xact.last_csn();
        let lsn = wal.insert_lsn().0;
        self.samples.push(Sample { xmin, csn, lsn });
        self.last_sample = Some(Instant::now());
    }

    /// The hold is a sample at or before the last feedback's position, not a guess.
    pub fn exact(&self) -> bool {
        self.exact
    }

    /// Applies a standby's feedback: hold the horizon for queries that see every commit ending
    /// at or below `lsn`, or release the hold (`None`). Returns the xmin now held, for
    /// `pg_stat_replication.backend_xmin`.
    pub fn feedback(&mut self, lsn: Option<Lsn>) -> Option<Xid> {
        let Some(lsn) = lsn else {
            if let Some(slot) = self.slot.take() {
                self.st.xact.unregister(&slot);
            }
            self.held = None;
            return None;
        };
        let exact = self.samples.at_or_before(lsn.0);
        self.exact = exact.is_some();
        // A guess: the oldest we know (a hold may move back; only a guess ever needs to).
        let at = exact.or_else(|| {
            [self.held, self.samples.oldest()]
                .into_iter()
                .flatten()
                .min_by_key(|s| s.csn)
        })?;
        let xact = &self.st.xact;
        let slot = self
            .slot
            .get_or_insert_with(|| xact.register(Arc::new(AtomicBool::new(false))));
        xact.hold(slot, at.csn);
        self.held = Some(at);
        Some(at.xmin)
    }
}

impl Drop for StandbyHold {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.st.xact.unregister(&slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(csn: u64, lsn: u64) -> Sample {
        Sample {
            xmin: Xid(csn + 100),
            csn,
            lsn,
        }
    }

    #[test]
    fn a_position_maps_to_the_newest_sample_at_or_before_it() {
        let mut v = Samples::default();
        assert_eq!(v.at_or_before(100), None);
        v.push(s(5, 100));
        v.push(s(5, 150)); // nothing committed since: not kept
        v.push(s(7, 200));
        v.push(s(9, 300));
        assert_eq!(v.at_or_before(99), None, "older than every sample");
        assert_eq!(v.at_or_before(100), Some(s(5, 100)));
        assert_eq!(v.at_or_before(199), Some(s(5, 100)), "not the later sample");
        assert_eq!(v.at_or_before(250), Some(s(7, 200)));
        assert_eq!(v.at_or_before(u64::MAX), Some(s(9, 300)));
        assert_eq!(v.oldest(), Some(s(5, 100)));
    }

    #[test]
    fn samples_are_bounded_and_thinned_so_the_oldest_stays() {
        let mut v = Samples::default();
        let n = 10 * SAMPLES as u64;
        for i in 1..=n {
            v.push(s(i, 10 * i));
            assert!(v.list.len() <= SAMPLES);
        }
        assert_eq!(
            v.oldest(),
            Some(s(1, 10)),
            "the first sample is never thinned"
        );
        assert_eq!(v.at_or_before(10 * n), Some(s(n, 10 * n)));
        // Every position still maps to a sample at or before it, sparser the older it is.
        for lsn in [10, 5_000, 10 * n / 2, 10 * n - 5] {
            let got = v.at_or_before(lsn).unwrap();
            assert!(got.lsn <= lsn);
        }
        let recent = v.at_or_before(10 * n - 5).unwrap();
        assert!(
            recent.lsn >= 10 * n - 10 * SAMPLES as u64,
            "recent history is dense"
        );
    }

    #[test]
    #[should_panic(expected = "feedback samples went back")]
    fn a_sample_that_goes_back_is_a_bug() {
        let mut v = Samples::default();
        v.push(s(5, 100));
        v.push(s(6, 90));
    }
}
