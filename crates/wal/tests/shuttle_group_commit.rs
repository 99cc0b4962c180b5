//! Model-checked tests of the group-commit core (`src/group_commit.rs`), the adaptive
//! controller (`src/adaptive/`) and the write-and-sync path (`src/flush.rs`) under shuttle's
//! randomized and PCT schedulers: the WAL's own code, compiled here against shuttle's
//! primitives through a `sync` module of the same shape as `src/sync.rs`. Only the files are a
//! mock ([`MockFiles`]: a write records bytes, a sync makes what was written before it
//! durable, as `fdatasync`).
//!
//! Time is logical: every clock read advances it by 1 µs and every sleep or timed wait by its
//! duration, all per test thread (shuttle runs an execution's threads on one OS thread), so a
//! failing schedule replays exactly (`shuttle::replay` with the printed schedule). A timed
//! wait is modelled as "may time out at any point" (release, yield, reacquire).
//!
//! Properties, for every explored schedule:
//! - no commit is acknowledged before its LSN is durable on the mock device;
//! - no wake-up is lost (shuttle fails the run if every thread blocks);
//! - no WAL range is flushed twice (every flush target is new);
//! - the flushed LSN only moves forward.
#![allow(dead_code)]

mod sync {
    use std::ops::{Deref, DerefMut};
    use std::time::Duration;

    pub(crate) use shuttle::sync::atomic::AtomicU64;
    pub(crate) use std::sync::atomic::Ordering;

    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    pub(crate) struct MutexGuard<'a, T> {
        mutex: &'a Mutex<T>,
        inner: Option<shuttle::sync::MutexGuard<'a, T>>,
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.inner.as_ref().expect("guard held")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.inner.as_mut().expect("guard held")
        }
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(v))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard {
                mutex: self,
                inner: Some(self.0.lock().unwrap_or_else(|e| e.into_inner())),
            }
        }
    }

    pub(crate) struct Condvar(shuttle::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(shuttle::sync::Condvar::new())
        }

        pub(crate) fn wait<'a, T>(&self, mut g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
            let inner = g.inner.take().expect("guard held");
            g.inner = Some(self.0.wait(inner).unwrap_or_else(|e| e.into_inner()));
            g
        }

        /// Times out at a point the scheduler chooses: releases, yields, reacquires.
        pub(crate) fn wait_timeout<'a, T>(
            &self,
            mut g: MutexGuard<'a, T>,
            d: Duration,
        ) -> (MutexGuard<'a, T>, bool) {
            advance(d.as_micros() as u64);
            drop(g.inner.take());
            shuttle::thread::yield_now();
            g.inner = Some(g.mutex.0.lock().unwrap_or_else(|e| e.into_inner()));
            (g, true)
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }

    std::thread_local! {
        /// The logical clock, µs; reset at the start of each execution.
        static NOW_US: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Starts the logical clock of a new execution.
    pub(crate) fn reset_clock() {
        NOW_US.with(|c| c.set(0));
    }

    fn advance(us: u64) -> u64 {
        NOW_US.with(|c| {
            let t = c.get() + us;
            c.set(t);
            t
        })
    }

    pub(crate) fn sleep(d: Duration) {
        advance(d.as_micros() as u64);
        shuttle::thread::yield_now();
    }

    pub(crate) fn now_us() -> u64 {
        advance(1)
    }
}

#[path = "../src/adaptive/mod.rs"]
mod adaptive;
#[path = "../src/flush.rs"]
mod flush;
#[path = "../src/group_commit.rs"]
mod group_commit;

use flush::{Files, WritePath};
use group_commit::{FlushDevice, GroupCommit, LeaderWait, Pipelining, Request};
use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::sync::{Arc, Mutex};

/// The WAL's files, mocked: one file with `fdatasync` semantics (a sync makes durable what
/// was written before it started). The write lock, the list of what to sync and the sync
/// batches are the real [`WritePath`].
struct MockFiles {
    /// Every range `[from, to)` handed to `write`, in order.
    writes: Mutex<Vec<(u64, u64)>>,
    /// Everything before this is durable.
    durable: AtomicU64,
}

impl Files for MockFiles {
    type State = ();
    /// Written up to (a sync of it makes everything before durable).
    type Pending = u64;

    fn wait_insertions(&self, _target: u64) {}

    fn write(&self, _state: &mut (), from: u64, to: u64, pending: &mut Vec<u64>) {
        self.writes.lock().unwrap().push((from, to));
        pending.push(to);
    }

    fn sync(&self, pending: Vec<u64>) {
        if let Some(&upto) = pending.iter().max() {
            shuttle::thread::yield_now(); // the sync takes a while
            self.durable.fetch_max(upto, Ordering::SeqCst);
        }
    }
}

/// A WAL for the group-commit core: an insert position, and the real write path over the mock
/// files.
struct MockWal {
    /// Insert position: each commit inserts one unit.
    inserted: AtomicU64,
    files: MockFiles,
    path: WritePath<MockFiles>,
    /// Every flush target a leader issued.
    targets: Mutex<Vec<u64>>,
}

impl FlushDevice for MockWal {
    fn inserted(&self) -> u64 {
        self.inserted.load(Ordering::SeqCst)
    }

    fn mark(&self, _durable: u64) {}

    fn write_and_sync(&self, target: u64) {
        self.targets.lock().unwrap().push(target);
        self.path.write_and_sync(&self.files, target);
    }
}

/// An inserter that finds the WAL buffers full writes WAL out itself, without syncing, while
/// leaders flush (the path on which a leader finds its bytes already written).
fn buffers_full(wal: &MockWal) {
    let upto = wal.inserted.load(Ordering::SeqCst);
    wal.path.write_out(&wal.files, upto);
}

fn scenario(threads: u64, commits: u64, wait: LeaderWait, pipelining: Pipelining) {
    sync::reset_clock();
    let gc = Arc::new(GroupCommit::new(0, 2, pipelining, None));
    let wal = Arc::new(MockWal {
        inserted: AtomicU64::new(0),
        files: MockFiles {
            writes: Mutex::new(Vec::new()),
            durable: AtomicU64::new(0),
        },
        path: WritePath::new(0, ()),
        targets: Mutex::new(Vec::new()),
    });
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let gc = gc.clone();
            let wal = wal.clone();
            shuttle::thread::spawn(move || {
                let mut last_seen = 0;
                for i in 0..commits {
                    let lsn = wal.inserted.fetch_add(1, Ordering::SeqCst) + 1;
                    if t == 0 && i == 0 {
                        buffers_full(&wal);
                    }
                    gc.flush(lsn, Request::Commit { session: t, wait }, wal.as_ref());
                    // flushed first: durable only grows, so flushed <= durable must hold.
                    let flushed = gc.flushed();
                    let durable = wal.files.durable.load(Ordering::SeqCst);
                    assert!(
                        durable >= lsn,
                        "commit {lsn} acknowledged, durable only {durable}"
                    );
                    assert!(flushed >= lsn, "returned before its LSN was published");
                    assert!(
                        flushed <= durable,
                        "published {flushed} beyond durable {durable}"
                    );
                    assert!(flushed >= last_seen, "flushed LSN moved backwards");
                    last_seen = flushed;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let mut targets = wal.targets.lock().unwrap().clone();
    let n = targets.len();
    targets.sort_unstable();
    targets.dedup();
    assert_eq!(
        targets.len(),
        n,
        "a WAL range was flushed twice: {targets:?}"
    );
    assert!(n as u64 <= threads * commits);
    // The write path wrote every byte exactly once, in order.
    let writes = wal.files.writes.lock().unwrap().clone();
    let mut end = 0;
    for (from, to) in &writes {
        assert_eq!(*from, end, "a write left a gap or overlapped: {writes:?}");
        assert!(to > from);
        end = *to;
    }
    assert_eq!(end, threads * commits);
    assert_eq!(gc.flushed(), threads * commits);
    assert_eq!(gc.stats().commits, threads * commits);
}

const ITERATIONS: usize = 3000;

const NO_DELAY: LeaderWait = LeaderWait::Fixed {
    delay_us: 0,
    siblings: 5,
    others: 2,
};

#[test]
fn fixed_without_delay() {
    shuttle::check_random(
        || scenario(3, 2, NO_DELAY, Pipelining::WhenNotBatching),
        ITERATIONS,
    );
}

#[test]
fn fixed_with_delay() {
    let wait = LeaderWait::Fixed {
        delay_us: 100,
        siblings: 1,
        others: 2,
    };
    shuttle::check_pct(
        move || scenario(3, 2, wait, Pipelining::WhenNotBatching),
        ITERATIONS,
        3,
    );
}

#[test]
fn adaptive() {
    shuttle::check_random(
        || scenario(3, 3, LeaderWait::Adaptive, Pipelining::WhenNotBatching),
        ITERATIONS,
    );
    shuttle::check_pct(
        || scenario(3, 2, LeaderWait::Adaptive, Pipelining::WhenNotBatching),
        ITERATIONS,
        3,
    );
}

#[test]
fn two_flushes_in_flight_publish_in_order() {
    shuttle::check_random(|| scenario(4, 2, NO_DELAY, Pipelining::Always), ITERATIONS);
    shuttle::check_pct(
        || scenario(3, 3, LeaderWait::Adaptive, Pipelining::Always),
        ITERATIONS,
        3,
    );
}
