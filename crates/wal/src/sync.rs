//! The synchronization primitives the group-commit core uses, behind a small API of walnut's
//! own, so that `tests/shuttle_group_commit.rs` can compile the same core against shuttle's
//! model-checked primitives instead (it includes `group_commit.rs` with its own `sync`
//! module of the same shape).

use std::sync::PoisonError;
use std::time::{Duration, Instant};

pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
pub(crate) use std::sync::MutexGuard;

/// A mutex; a panic while holding it does not poison it (the group-commit core records
/// failures itself).
pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Mutex<T> {
        Mutex(std::sync::Mutex::new(v))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A condition variable.
pub(crate) struct Condvar(std::sync::Condvar);

impl Condvar {
    pub(crate) fn new() -> Condvar {
        Condvar(std::sync::Condvar::new())
    }

    pub(crate) fn wait<'a, T>(&self, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(g).unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a notification or `d`; returns the guard and whether it timed out.
    pub(crate) fn wait_timeout<'a, T>(
        &self,
        g: MutexGuard<'a, T>,
        d: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        let (g, r) = self
            .0
            .wait_timeout(g, d)
            .unwrap_or_else(PoisonError::into_inner);
        (g, r.timed_out())
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// Sleeps the calling thread.
pub(crate) fn sleep(d: Duration) {
    std::thread::sleep(d);
}

/// Monotonic time, µs since the first call in this process.
pub(crate) fn now_us() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}
