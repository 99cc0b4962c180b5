//! Model-checked tests of the group-commit core (`src/group_commit.rs`) under shuttle's
//! randomized and PCT schedulers. The core is compiled here against shuttle's primitives
//! through a `sync` module of the same shape as `src/sync.rs`; a timed wait is modelled as
//! "may time out at any point" (release, yield, reacquire).
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
            _d: Duration,
        ) -> (MutexGuard<'a, T>, bool) {
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

    pub(crate) fn sleep(_d: Duration) {
        shuttle::thread::yield_now();
    }

    pub(crate) fn now_us() -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_micros() as u64
    }
}

#[path = "../src/adaptive/mod.rs"]
mod adaptive;
#[path = "../src/group_commit.rs"]
mod group_commit;

use group_commit::{FlushDevice, GroupCommit, LeaderWait, Pipelining, SyncBatches};
use shuttle::sync::atomic::{AtomicU64, Ordering};
use shuttle::sync::{Arc, Mutex};

/// The WAL's write path over one file with fdatasync semantics (a sync makes durable what
/// was written before it started), as `Wal::write_and_sync` does it: under the write lock,
/// write up to the target if not yet written, take the "written since the last take" list
/// and register a sync batch; sync only if the list was not empty; then wait for the batches
/// before. A leader whose bytes another leader wrote finds nothing to sync: without
/// `SyncBatches::wait_synced` it would return before they are durable.
struct MockDevice {
    /// Insert position: each commit inserts one unit.
    inserted: AtomicU64,
    /// (written up to, written since the last take, every flush target issued)
    io: Mutex<(u64, bool, Vec<u64>)>,
    batches: SyncBatches,
    durable: AtomicU64,
    active: AtomicU64,
}

impl FlushDevice for MockDevice {
    fn inserted(&self) -> u64 {
        self.inserted.load(Ordering::SeqCst)
    }

    fn mark(&self, _durable: u64) {}

    fn write_and_sync(&self, target: u64) {
        let (took, upto, batch) = {
            let mut io = self.io.lock().unwrap();
            io.2.push(target);
            if io.0 < target {
                io.0 = target;
                io.1 = true;
            }
            let took = std::mem::take(&mut io.1);
            (took, io.0, self.batches.begin(io.0))
        };
        if took {
            shuttle::thread::yield_now(); // the sync takes a while
            self.durable.fetch_max(upto, Ordering::SeqCst);
        }
        self.batches.complete(batch);
        self.batches.wait_synced(target);
    }

    fn active_transactions(&self) -> usize {
        self.active.load(Ordering::SeqCst) as usize
    }
}

fn scenario(threads: u64, commits: u64, wait: LeaderWait, pipelining: Pipelining) {
    let gc = Arc::new(GroupCommit::new(0, 2, pipelining, None));
    let dev = Arc::new(MockDevice {
        inserted: AtomicU64::new(0),
        io: Mutex::new((0, false, Vec::new())),
        batches: SyncBatches::new(0),
        durable: AtomicU64::new(0),
        active: AtomicU64::new(threads),
    });
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let gc = gc.clone();
            let dev = dev.clone();
            shuttle::thread::spawn(move || {
                let mut last_seen = 0;
                for _ in 0..commits {
                    let lsn = dev.inserted.fetch_add(1, Ordering::SeqCst) + 1;
                    gc.flush(lsn, t, true, wait, dev.as_ref());
                    // flushed first: durable only grows, so flushed <= durable must hold.
                    let flushed = gc.flushed();
                    let durable = dev.durable.load(Ordering::SeqCst);
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
                dev.active.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let io = dev.io.lock().unwrap();
    let mut targets = io.2.clone();
    let n = targets.len();
    targets.sort_unstable();
    targets.dedup();
    assert_eq!(
        targets.len(),
        n,
        "a WAL range was flushed twice: {:?}",
        io.2
    );
    assert!(n as u64 <= threads * commits);
    assert_eq!(gc.flushed(), threads * commits);
    assert_eq!(gc.stats().commits, threads * commits);
}

const ITERATIONS: usize = 3000;

const NO_DELAY: LeaderWait = LeaderWait::Fixed {
    delay_us: 0,
    siblings: 5,
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
