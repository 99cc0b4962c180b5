//! The synchronization primitives of the parallel redo pipeline (`parallel.rs`): parking_lot's
//! mutex and condition variable, crossbeam's bounded channels, std's atomics and threads.
//!
//! In unit tests a pipeline may run on shuttle's instead (<https://github.com/awslabs/shuttle>:
//! a scheduler that runs one thread at a time and explores their interleavings, at random or
//! by PCT, Burckhardt et al., "A Randomized Scheduler with Probabilistic Guarantees of Finding
//! Bugs", ASPLOS 2010), chosen per pipeline when it starts ([`Runtime`]). Outside tests every
//! type here has one variant, the operating system's, and a match on it compiles away.
//!
//! Under shuttle a timed wait never times out. The pipeline's timeouts only bound how late it
//! looks at a flag, so every wait must end by a notification: a missed wake-up is a deadlock,
//! which shuttle reports with the schedule that led to it.

use std::sync::atomic::Ordering;
use std::time::Duration;

/// Whose primitives a pipeline uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// The operating system's threads, parking_lot, crossbeam.
    Os,
    /// shuttle's, inside `shuttle::check_*` (tests only).
    #[cfg(test)]
    Shuttle,
}

/// A mutex ([`parking_lot::Mutex`], or shuttle's).
pub(crate) enum Mutex<T> {
    Os(parking_lot::Mutex<T>),
    #[cfg(test)]
    Shuttle(shuttle::sync::Mutex<T>),
}

/// A held [`Mutex`]. Shuttle's guard is an `Option` so that a condition variable's wait can
/// take it and put it back.
pub(crate) enum MutexGuard<'a, T> {
    Os(parking_lot::MutexGuard<'a, T>),
    #[cfg(test)]
    Shuttle(Option<shuttle::sync::MutexGuard<'a, T>>),
}

impl<T> Mutex<T> {
    pub(crate) fn new(rt: Runtime, v: T) -> Mutex<T> {
        match rt {
            Runtime::Os => Mutex::Os(parking_lot::Mutex::new(v)),
            #[cfg(test)]
            Runtime::Shuttle => Mutex::Shuttle(shuttle::sync::Mutex::new(v)),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        match self {
            Mutex::Os(m) => MutexGuard::Os(m.lock()),
            #[cfg(test)]
            Mutex::Shuttle(m) => MutexGuard::Shuttle(Some(
                m.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            )),
        }
    }
}

impl<T> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            MutexGuard::Os(g) => g,
            #[cfg(test)]
            MutexGuard::Shuttle(g) => g.as_ref().expect("a guard is held outside a wait"),
        }
    }
}

impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            MutexGuard::Os(g) => g,
            #[cfg(test)]
            MutexGuard::Shuttle(g) => g.as_mut().expect("a guard is held outside a wait"),
        }
    }
}

/// A condition variable ([`parking_lot::Condvar`], or shuttle's).
pub(crate) enum Condvar {
    Os(parking_lot::Condvar),
    #[cfg(test)]
    Shuttle(shuttle::sync::Condvar),
}

impl Condvar {
    pub(crate) fn new(rt: Runtime) -> Condvar {
        match rt {
            Runtime::Os => Condvar::Os(parking_lot::Condvar::new()),
            #[cfg(test)]
            Runtime::Shuttle => Condvar::Shuttle(shuttle::sync::Condvar::new()),
        }
    }

    pub(crate) fn notify_all(&self) {
        match self {
            Condvar::Os(c) => {
                c.notify_all();
            }
            #[cfg(test)]
            Condvar::Shuttle(c) => c.notify_all(),
        }
    }

    /// Waits for a notification, or at most `timeout` (never under shuttle); returns whether
    /// it timed out.
    ///
    /// # Panics
    /// If `g` is a guard of the other runtime's mutex.
    pub(crate) fn wait_for<T>(&self, g: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
        match (self, g) {
            (Condvar::Os(c), MutexGuard::Os(g)) => c.wait_for(g, timeout).timed_out(),
            #[cfg(test)]
            (Condvar::Shuttle(c), MutexGuard::Shuttle(slot)) => {
                let held = slot.take().expect("a guard is held outside a wait");
                let (held, r) = c
                    .wait_timeout(held, timeout)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *slot = Some(held);
                r.timed_out()
            }
            #[cfg(test)]
            _ => unreachable!("a condition variable and a mutex of different runtimes"),
        }
    }
}

/// An atomic `u64` (std's, or shuttle's, whose every access is a point where the scheduler may
/// switch threads).
pub(crate) enum AtomicU64 {
    Os(std::sync::atomic::AtomicU64),
    #[cfg(test)]
    Shuttle(shuttle::sync::atomic::AtomicU64),
}

impl AtomicU64 {
    pub(crate) fn new(rt: Runtime, v: u64) -> AtomicU64 {
        match rt {
            Runtime::Os => AtomicU64::Os(std::sync::atomic::AtomicU64::new(v)),
            #[cfg(test)]
            Runtime::Shuttle => AtomicU64::Shuttle(shuttle::sync::atomic::AtomicU64::new(v)),
        }
    }

    pub(crate) fn load(&self, o: Ordering) -> u64 {
        match self {
            AtomicU64::Os(a) => a.load(o),
            #[cfg(test)]
            AtomicU64::Shuttle(a) => a.load(o),
        }
    }

    pub(crate) fn store(&self, v: u64, o: Ordering) {
        match self {
            AtomicU64::Os(a) => a.store(v, o),
            #[cfg(test)]
            AtomicU64::Shuttle(a) => a.store(v, o),
        }
    }
}

/// An atomic `bool` (std's, or shuttle's).
pub(crate) enum AtomicBool {
    Os(std::sync::atomic::AtomicBool),
    #[cfg(test)]
    Shuttle(shuttle::sync::atomic::AtomicBool),
}

impl AtomicBool {
    pub(crate) fn new(rt: Runtime, v: bool) -> AtomicBool {
        match rt {
            Runtime::Os => AtomicBool::Os(std::sync::atomic::AtomicBool::new(v)),
            #[cfg(test)]
            Runtime::Shuttle => AtomicBool::Shuttle(shuttle::sync::atomic::AtomicBool::new(v)),
        }
    }

    pub(crate) fn load(&self, o: Ordering) -> bool {
        match self {
            AtomicBool::Os(a) => a.load(o),
            #[cfg(test)]
            AtomicBool::Shuttle(a) => a.load(o),
        }
    }

    pub(crate) fn store(&self, v: bool, o: Ordering) {
        match self {
            AtomicBool::Os(a) => a.store(v, o),
            #[cfg(test)]
            AtomicBool::Shuttle(a) => a.store(v, o),
        }
    }
}

/// The sending side of a bounded channel.
pub(crate) enum Sender<T> {
    Os(crossbeam::channel::Sender<T>),
    #[cfg(test)]
    Shuttle(shuttle::sync::mpsc::SyncSender<T>),
}

/// The receiving side of a bounded channel.
pub(crate) enum Receiver<T> {
    Os(crossbeam::channel::Receiver<T>),
    #[cfg(test)]
    Shuttle(shuttle::sync::mpsc::Receiver<T>),
}

/// A channel that holds `cap` messages; a send waits while it is full.
pub(crate) fn bounded<T>(rt: Runtime, cap: usize) -> (Sender<T>, Receiver<T>) {
    match rt {
        Runtime::Os => {
            let (tx, rx) = crossbeam::channel::bounded(cap);
            (Sender::Os(tx), Receiver::Os(rx))
        }
        #[cfg(test)]
        Runtime::Shuttle => {
            let (tx, rx) = shuttle::sync::mpsc::sync_channel(cap);
            (Sender::Shuttle(tx), Receiver::Shuttle(rx))
        }
    }
}

impl<T> Sender<T> {
    /// Sends `v`, waiting while the channel is full; `false` if the receiver is gone.
    pub(crate) fn send(&self, v: T) -> bool {
        match self {
            Sender::Os(tx) => tx.send(v).is_ok(),
            #[cfg(test)]
            Sender::Shuttle(tx) => tx.send(v).is_ok(),
        }
    }
}

impl<T> Receiver<T> {
    /// The next message, waiting for one; `None` once every sender is gone and the channel
    /// is empty.
    pub(crate) fn recv(&self) -> Option<T> {
        match self {
            Receiver::Os(rx) => rx.recv().ok(),
            #[cfg(test)]
            Receiver::Shuttle(rx) => rx.recv().ok(),
        }
    }
}

/// A thread started by [`spawn`].
pub(crate) enum JoinHandle {
    Os(std::thread::JoinHandle<()>),
    #[cfg(test)]
    Shuttle(shuttle::thread::JoinHandle<()>),
}

/// Starts a thread named `name` running `f`.
///
/// # Errors
/// The operating system's, if it cannot start a thread.
pub(crate) fn spawn(
    rt: Runtime,
    name: String,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle> {
    match rt {
        Runtime::Os => std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map(JoinHandle::Os),
        #[cfg(test)]
        Runtime::Shuttle => shuttle::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map(JoinHandle::Shuttle),
    }
}

impl JoinHandle {
    /// Waits for the thread to end; `false` if it panicked.
    pub(crate) fn join(self) -> bool {
        match self {
            JoinHandle::Os(t) => t.join().is_ok(),
            #[cfg(test)]
            JoinHandle::Shuttle(t) => t.join().is_ok(),
        }
    }
}
