//! Group commit: one leader flushes for every commit queued behind it; followers wait
//! (PostgreSQL 9.3+ `XLogFlush` with `LWLockAcquireOrWait` on `WALWriteLock`), with walnut's
//! adaptive leader wait and up to `max_inflight` flushes in flight.
//!
//! This module knows nothing of files: the caller supplies a [`FlushDevice`]. It depends only on
//! `crate::sync` and `crate::adaptive`, so that `tests/shuttle_group_commit.rs` can compile it
//! against shuttle's primitives. See DESIGN.md, "Group commit", for the numbered protocol.
//!
//! Invariants (checked by the shuttle tests):
//! - `flushed()` only moves forward, and only to the target of a completed flush all of whose
//!   predecessors have completed (flushes publish in the order they were issued);
//! - [`GroupCommit::flush`] returns only once `flushed() >= lsn`;
//! - a leader flushes only from the end of the previous flush's target: nothing already covered
//!   by a flush (done or in flight) is flushed again by a follower;
//! - every waiter is woken when the flush covering it is published (no lost wake-up), and a
//!   waiting leader is woken at each arrival.

use crate::adaptive::Controller;
use crate::sync::{now_us, sleep, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;
use std::time::Duration;

/// What the leader drives: the WAL's write and sync.
pub(crate) trait FlushDevice {
    /// End of everything inserted so far: a closed group's flush target, bytes.
    fn inserted(&self) -> u64;
    /// Inserts a flush mark attesting that everything before `durable` is durable (see
    /// DESIGN.md, "Flush marks"), if that says more than the last mark. Called by a leader,
    /// with no lock held, before it reads its target, so its flush carries the mark.
    fn mark(&self, durable: u64);
    /// Writes and syncs everything before `target`. Called with no lock held, possibly by two
    /// leaders at once for consecutive targets. Must panic (PANIC) on an I/O failure.
    fn write_and_sync(&self, target: u64);
}

/// A flush request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// A commit waiting to be acknowledged: its session (which the adaptive controller tracks)
    /// and how a leader it becomes keeps its group open.
    Commit {
        /// The committing session.
        session: u64,
        /// The leader's policy.
        wait: LeaderWait,
    },
    /// A flush that acknowledges no commit (the WAL rule before a page write, the WAL writer,
    /// a checkpoint): not counted as a commit, its caller not tracked as a session (its flushes
    /// do count in the controller's flush latency and rate), and as a leader it never waits.
    Background,
}

/// How the leader of a group decides how long to keep it open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaderWait {
    /// The adaptive controller decides (see `adaptive/`).
    Adaptive,
    /// PostgreSQL: sleep `delay_us` if at least `siblings` other transactions are active
    /// (`others`, counted by the committer: PostgreSQL's `MinimumActiveBackends`).
    Fixed {
        /// `commit_delay`, µs.
        delay_us: u32,
        /// `commit_siblings`.
        siblings: u32,
        /// Other transactions holding an xid when the commit asked to be flushed.
        others: u32,
    },
}

impl LeaderWait {
    /// Close the group at once.
    pub(crate) const NONE: LeaderWait = LeaderWait::Fixed {
        delay_us: 0,
        siblings: 0,
        others: 0,
    };
}

/// When a second flush may be issued while one is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pipelining {
    /// In adaptive mode, when the controller is not batching (patience zero): the device is
    /// then not the bottleneck, so overlapping flushes cuts latency without costing batching.
    /// Never in fixed mode (PostgreSQL holds `WALWriteLock` across write and sync).
    WhenNotBatching,
    /// Whenever a slot is free, in either mode (tests of the in-order publish).
    #[allow(dead_code)]
    Always,
}

/// Upper bounds of the commits-per-flush histogram buckets (the last is open-ended). The first
/// bucket holds flushes that acknowledged no commit: the WAL writer's, a page write's, a
/// checkpoint's.
pub(crate) const HISTOGRAM_BOUNDS: [u64; 9] = [0, 1, 2, 4, 8, 16, 32, 64, u64::MAX];

/// Why a leader closed its group, for the counters (`walnut_stat_group_commit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseCause {
    /// The leader flushes for no commit (the WAL writer, a page write, a checkpoint) and never
    /// waits; commits that joined its group before it closed are still counted as members.
    Background,
    /// `group_commit = fixed`: after `commit_delay` (or at once).
    Fixed,
    /// Adaptive: no session not yet in the group was expected before the deadline.
    NoneExpected,
    /// Adaptive: the deadline (opened + patience) passed, with patience zero (or not yet
    /// measured) or a session still expected.
    Patience,
}

impl CloseCause {
    /// Every cause, in the order of [`GroupStats::closed`].
    pub(crate) const ALL: [CloseCause; 4] = [
        CloseCause::Background,
        CloseCause::Fixed,
        CloseCause::NoneExpected,
        CloseCause::Patience,
    ];

    /// The label in `walnut_stat_group_commit`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CloseCause::Background => "background",
            CloseCause::Fixed => "fixed",
            CloseCause::NoneExpected => "none_expected",
            CloseCause::Patience => "patience",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Counters, a snapshot of which [`GroupCommit::stats`] returns.
#[derive(Clone, Debug, Default)]
pub(crate) struct GroupStats {
    /// Flushes published.
    pub flushes: u64,
    /// Commit requests satisfied (waiters plus those already durable on arrival).
    pub commits: u64,
    /// Waiting commit requests per flush, by [`HISTOGRAM_BOUNDS`] bucket.
    pub histogram: [u64; 9],
    /// Flushes by why their group closed, indexed as [`CloseCause::ALL`].
    pub closed: [u64; 4],
    /// Flushes that acknowledged exactly one commit, by why their group closed.
    pub closed_single: [u64; 4],
    /// Total time leaders kept groups open before flushing, µs.
    pub wait_us: u64,
    /// The adaptive controller's patience, µs.
    pub patience_us: u64,
    /// EWMA of recent group-open times, µs.
    pub recent_wait_us: u64,
    /// EWMA of flush service time, µs.
    pub flush_latency_us: u64,
    /// Sessions the controller currently tracks.
    pub sessions: u64,
    /// The device's flush capacity the controller works with, flushes/s; `None` if unknown.
    pub flush_capacity: Option<f64>,
    /// The last probe pair's higher flush rate ÷ the capacity; `None` if the capacity is
    /// unknown or no pair has ended yet.
    pub utilization: Option<f64>,
}

struct OpenGroup {
    id: u64,
    opened_us: u64,
    members: u64,
}

struct Flight {
    id: u64,
    target: u64,
    members: u64,
    issued_us: u64,
    cause: CloseCause,
    done: bool,
}

struct State {
    /// A leader panicked in write or sync: durability is unknown; everyone PANICs.
    failed: bool,
    open: Option<OpenGroup>,
    /// Closed groups whose flush was issued, oldest first.
    inflight: VecDeque<Flight>,
    next_id: u64,
    ctrl: Controller,
    stats: GroupStats,
}

/// The group-commit state of one WAL.
pub(crate) struct GroupCommit {
    flushed: AtomicU64,
    /// Commit requests satisfied on the fast path (already durable), not under the mutex.
    fast_commits: AtomicU64,
    state: Mutex<State>,
    /// Followers wait here for a publish (or a free flight slot).
    followers: Condvar,
    /// The leader of the open group waits here for arrivals.
    leader: Condvar,
    max_inflight: usize,
    pipelining: Pipelining,
    /// Woken at every publish, for waiters outside the commit path (walsenders: PostgreSQL's
    /// `WalSndWakeup` after `XLogFlush`).
    published: tokio::sync::Notify,
}

impl GroupCommit {
    /// Everything before `start` is durable. At most `max_inflight` (>= 1) flushes are in
    /// flight at once, when `pipelining` allows more than one. `flush_capacity` is the device's
    /// flushes/s back to back, for the adaptive controller (see
    /// [`Controller::with_flush_capacity`]); `None` if unknown.
    pub(crate) fn new(
        start: u64,
        max_inflight: usize,
        pipelining: Pipelining,
        flush_capacity: Option<f64>,
    ) -> GroupCommit {
        GroupCommit {
            flushed: AtomicU64::new(start),
            fast_commits: AtomicU64::new(0),
            state: Mutex::new(State {
                failed: false,
                open: None,
                inflight: VecDeque::new(),
                next_id: 1,
                ctrl: Controller::with_flush_capacity(flush_capacity),
                stats: GroupStats::default(),
            }),
            followers: Condvar::new(),
            leader: Condvar::new(),
            max_inflight: max_inflight.max(1),
            pipelining,
            published: tokio::sync::Notify::new(),
        }
    }

    /// Notified after every publish that moved `flushed()` (`notify_waiters`: only futures
    /// already waiting, or enabled, see it; check `flushed()` after enabling one).
    pub(crate) fn published(&self) -> &tokio::sync::Notify {
        &self.published
    }

    /// Everything before this is durable, bytes.
    pub(crate) fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Returns once everything before `lsn` is durable, leading a flush or following one.
    ///
    /// # Panics
    /// If this or an earlier flush failed (PANIC: never retried).
    pub(crate) fn flush(&self, lsn: u64, req: Request, dev: &dyn FlushDevice) {
        let (commit, session, wait) = match req {
            Request::Commit { session, wait } => (true, session, wait),
            Request::Background => (false, 0, LeaderWait::NONE),
        };
        if self.flushed() >= lsn {
            if commit {
                self.fast_commits.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        let mut st = self.state.lock();
        if commit {
            st.ctrl.on_arrival(now_us(), session, lsn);
        }
        let mut joined = false;
        loop {
            if st.failed {
                drop(st);
                panic!("PANIC: an earlier WAL write or fsync failed; WAL durability is unknown");
            }
            if self.flushed() >= lsn {
                break;
            }
            if let Some(f) = st.inflight.iter_mut().find(|f| f.target >= lsn) {
                if !joined {
                    f.members += u64::from(commit);
                    joined = true;
                }
                st = self.followers.wait(st);
                continue;
            }
            if let Some(g) = st.open.as_mut() {
                // Join the open group: its target is read when it closes, after this request's
                // record was inserted.
                if !joined {
                    g.members += u64::from(commit);
                    joined = true;
                    if commit {
                        self.leader.notify_one();
                    }
                }
                st = self.followers.wait(st);
                continue;
            }
            let limit = match (self.pipelining, wait) {
                (Pipelining::Always, _) => self.max_inflight,
                (Pipelining::WhenNotBatching, LeaderWait::Adaptive)
                    if st.ctrl.effective_patience_us() == 0 =>
                {
                    self.max_inflight
                }
                _ => 1,
            };
            if st.inflight.len() >= limit {
                st = self.followers.wait(st);
                continue;
            }
            st = self.lead(st, joined, commit, wait, dev);
            joined = true;
        }
        if commit {
            st.ctrl.on_release(now_us(), session);
            st.stats.commits += 1;
        }
    }

    /// Opens a group, keeps it open as the policy says, closes it, flushes, and publishes what
    /// can be published. Returns with the lock held.
    fn lead<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        joined: bool,
        commit: bool,
        wait: LeaderWait,
        dev: &dyn FlushDevice,
    ) -> MutexGuard<'a, State> {
        let id = st.next_id;
        st.next_id += 1;
        let opened_us = now_us();
        st.open = Some(OpenGroup {
            id,
            opened_us,
            members: u64::from(!joined && commit),
        });
        let mut cause = if commit {
            CloseCause::Fixed
        } else {
            CloseCause::Background
        };
        match wait {
            LeaderWait::Fixed {
                delay_us,
                siblings,
                others,
            } => {
                if delay_us > 0 && others >= siblings {
                    drop(st);
                    sleep(Duration::from_micros(u64::from(delay_us)));
                    st = self.state.lock();
                }
            }
            LeaderWait::Adaptive => loop {
                let now = now_us();
                match st.ctrl.decide(now, opened_us) {
                    None => {
                        cause = if st.ctrl.deadline_passed(now, opened_us) {
                            CloseCause::Patience
                        } else {
                            CloseCause::NoneExpected
                        };
                        break;
                    }
                    Some(until) => {
                        let d = Duration::from_micros(until.saturating_sub(now).max(1));
                        st = self.leader.wait_timeout(st, d).0;
                    }
                }
                if st.failed {
                    break;
                }
            },
        }
        if st.failed {
            st.open = None;
            drop(st);
            panic!("PANIC: an earlier WAL write or fsync failed; WAL durability is unknown");
        }
        // The flush mark goes into this flush (inserted before the target is read). Others
        // may join the open group meanwhile; only this leader closes it.
        drop(st);
        dev.mark(self.flushed());
        let mut st = self.state.lock();
        let g = st.open.take().expect("only the leader closes its group");
        debug_assert_eq!(g.id, id);
        let issued_us = now_us();
        st.stats.wait_us += issued_us - g.opened_us;
        st.ctrl.on_group_closed(issued_us - g.opened_us);
        let from = st.inflight.back().map_or(self.flushed(), |f| f.target);
        let target = dev.inserted();
        assert!(
            target > from,
            "a new flush must cover new WAL: target {target}, previous {from}"
        );
        st.inflight.push_back(Flight {
            id,
            target,
            members: g.members,
            issued_us,
            cause,
            done: false,
        });
        drop(st);

        let guard = FailGuard { gc: self };
        dev.write_and_sync(target);
        std::mem::forget(guard);

        let mut st = self.state.lock();
        let now = now_us();
        if let Some(f) = st.inflight.iter_mut().find(|f| f.id == id) {
            f.done = true;
        }
        // Publish completed flushes in issue order.
        let mut published = false;
        while st.inflight.front().is_some_and(|f| f.done) {
            let f = st.inflight.pop_front().expect("front exists");
            let prev = self.flushed.fetch_max(f.target, Ordering::AcqRel);
            assert!(prev <= f.target, "flushed LSN moved backwards");
            st.stats.flushes += 1;
            let bucket = HISTOGRAM_BOUNDS
                .iter()
                .position(|&b| f.members <= b)
                .unwrap_or(HISTOGRAM_BOUNDS.len() - 1);
            st.stats.histogram[bucket] += 1;
            st.stats.closed[f.cause.index()] += 1;
            if f.members == 1 {
                st.stats.closed_single[f.cause.index()] += 1;
            }
            st.ctrl
                .on_flush_done(now, now.saturating_sub(f.issued_us), f.members);
            published = true;
        }
        if published {
            st.ctrl.on_published(now, self.flushed());
            self.followers.notify_all();
            self.published.notify_waiters();
        }
        st
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> GroupStats {
        let st = self.state.lock();
        let mut s = st.stats.clone();
        s.commits += self.fast_commits.load(Ordering::Relaxed);
        s.patience_us = st.ctrl.patience_us();
        s.recent_wait_us = st.ctrl.recent_wait_us();
        s.flush_latency_us = st.ctrl.flush_latency_us();
        s.sessions = st.ctrl.sessions() as u64;
        s.flush_capacity = st.ctrl.flush_capacity();
        s.utilization = st.ctrl.utilization();
        s
    }
}

/// Marks the group commit failed if a leader unwinds out of `write_and_sync` (a PANIC), so
/// that every waiter PANICs too instead of retrying the flush.
struct FailGuard<'a> {
    gc: &'a GroupCommit,
}

impl Drop for FailGuard<'_> {
    fn drop(&mut self) {
        let mut st = self.gc.state.lock();
        st.failed = true;
        drop(st);
        self.gc.followers.notify_all();
        self.gc.leader.notify_all();
    }
}
