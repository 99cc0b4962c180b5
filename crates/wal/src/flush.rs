//! The write-and-sync path a flush leader runs (PostgreSQL's `XLogWrite` and
//! `issue_xlog_fsync`), apart from the files it drives, so that
//! `tests/shuttle_group_commit.rs` model-checks this very code over a mock of [`Files`].
//!
//! Like `group_commit.rs`, it depends only on `crate::sync`, whose primitives the shuttle test
//! replaces with shuttle's.
//!
//! Protocol of [`WritePath::write_and_sync`] (DESIGN.md, "The commit path", steps 9-12):
//! 1. wait until no insertion below the target is in progress;
//! 2. under the write lock (PostgreSQL's `WALWriteLock`): write `[write_lsn, target)` if not
//!    yet written, take the list of what was written since the last take, and register a sync
//!    *batch* covering everything written so far;
//! 3. with no lock held, sync the list (nothing for the `open_*` methods, whose writes are
//!    already durable);
//! 4. complete the batch, then wait until every earlier batch has completed too.
//!
//! Step 4 is what makes concurrent leaders safe: two flights in flight, or an inserter that
//! wrote WAL out because the WAL buffers were full, can write bytes that a later leader then
//! finds already written and so has nothing of its own to sync. Those bytes are durable only
//! once the earlier batch's sync returns, so a leader returns only when the completed prefix of
//! batches covers its target.

use crate::sync::{AtomicU64, Condvar, Mutex, Ordering};
use std::collections::VecDeque;

/// The WAL's files, as the write path drives them.
pub(crate) trait Files {
    /// What the writer keeps under the write lock (open segments, staging buffer, the
    /// O_DIRECT tail).
    type State;
    /// What a write leaves to sync (a segment and the range written in it).
    type Pending;

    /// Waits until no insertion below `target` is in progress (`WaitXLogInsertionsToFinish`).
    fn wait_insertions(&self, target: u64);

    /// Writes WAL bytes `[from, to)` out, adding what must be synced to `pending`. Called under
    /// the write lock, after [`Files::wait_insertions`] up to `to`.
    ///
    /// # Panics
    /// A failed write: PANIC, never retried.
    fn write(&self, state: &mut Self::State, from: u64, to: u64, pending: &mut Vec<Self::Pending>);

    /// Makes `pending` durable. Called with no lock held, possibly by two leaders at once for
    /// different lists.
    ///
    /// # Panics
    /// A failed sync: PANIC, never retried.
    fn sync(&self, pending: Vec<Self::Pending>);
}

struct Locked<S, P> {
    state: S,
    /// Written since the last take; the next flush leader syncs it.
    pending: Vec<P>,
}

/// The write position, the write lock and the sync batches of one WAL.
pub(crate) struct WritePath<F: Files> {
    /// Everything before this has been handed to [`Files::write`] (`LogwrtResult.Write`);
    /// changes only under the write lock.
    write_lsn: AtomicU64,
    locked: Mutex<Locked<F::State, F::Pending>>,
    batches: SyncBatches,
}

impl<F: Files> WritePath<F> {
    /// Everything before `start` is written and durable.
    pub(crate) fn new(start: u64, state: F::State) -> WritePath<F> {
        WritePath {
            write_lsn: AtomicU64::new(start),
            locked: Mutex::new(Locked {
                state,
                pending: Vec::new(),
            }),
            batches: SyncBatches::new(start),
        }
    }

    /// Everything before this has been written (not necessarily synced), bytes.
    pub(crate) fn write_lsn(&self) -> u64 {
        self.write_lsn.load(Ordering::Acquire)
    }

    /// Everything before this is durable by a completed prefix of sync batches, bytes.
    pub(crate) fn synced(&self) -> u64 {
        self.batches.synced()
    }

    /// The leader's work: returns once everything before `target` is written and durable.
    ///
    /// # Panics
    /// As [`Files::write`] and [`Files::sync`].
    pub(crate) fn write_and_sync(&self, files: &F, target: u64) {
        files.wait_insertions(target);
        let (pending, batch) = {
            let mut l = self.locked.lock();
            self.write_locked(files, &mut l, target);
            let pending = std::mem::take(&mut l.pending);
            let batch = self.batches.begin(self.write_lsn());
            (pending, batch)
        };
        files.sync(pending);
        self.batches.complete(batch);
        self.batches.wait_synced(target);
        assert!(
            self.synced() >= target,
            "a flush returned before its target was durable"
        );
    }

    /// Writes WAL out, without syncing, until everything before `need` is written: an
    /// inserter that found the WAL buffers full (`AdvanceXLInsertBuffer`). The next leader
    /// syncs it.
    ///
    /// # Panics
    /// As [`Files::write`].
    pub(crate) fn write_out(&self, files: &F, need: u64) {
        files.wait_insertions(need);
        let mut l = self.locked.lock();
        self.write_locked(files, &mut l, need);
    }

    fn write_locked(&self, files: &F, l: &mut Locked<F::State, F::Pending>, upto: u64) {
        let from = self.write_lsn();
        if from >= upto {
            return;
        }
        files.write(&mut l.state, from, upto, &mut l.pending);
        let prev = self.write_lsn.fetch_max(upto, Ordering::AcqRel);
        assert_eq!(prev, from, "write_lsn moved outside the write lock");
    }
}

/// Tracks which written WAL is synced when several leaders sync at once. Each leader takes,
/// under the write lock, the list of what was written since the last take and registers a
/// *batch* covering everything written so far (`upto`); after syncing its list it completes
/// the batch. A batch's sync covers the bytes written before its take only together with every
/// earlier batch (those bytes may sit in an earlier batch's list, whose sync may still be
/// running), so the synced position advances over the completed prefix of batches only, and a
/// leader returns from [`SyncBatches::wait_synced`] once that prefix covers its target.
pub(crate) struct SyncBatches {
    st: Mutex<BatchState>,
    cv: Condvar,
    synced: AtomicU64,
}

struct BatchState {
    next_id: u64,
    /// (id, upto, done), in take order.
    pending: VecDeque<(u64, u64, bool)>,
}

impl SyncBatches {
    /// Everything before `start` is synced.
    pub(crate) fn new(start: u64) -> SyncBatches {
        SyncBatches {
            st: Mutex::new(BatchState {
                next_id: 0,
                pending: VecDeque::new(),
            }),
            cv: Condvar::new(),
            synced: AtomicU64::new(start),
        }
    }

    /// Registers a batch covering everything before `upto`. Call under the writer's lock,
    /// right after taking the list of files to sync, so that batches are in take order.
    pub(crate) fn begin(&self, upto: u64) -> u64 {
        let mut st = self.st.lock();
        let id = st.next_id;
        st.next_id += 1;
        if let Some(&(_, last, _)) = st.pending.back() {
            assert!(upto >= last, "sync batches must cover growing prefixes");
        }
        st.pending.push_back((id, upto, false));
        id
    }

    /// Batch `id`'s syncs all returned `Ok`.
    pub(crate) fn complete(&self, id: u64) {
        let mut st = self.st.lock();
        if let Some(b) = st.pending.iter_mut().find(|b| b.0 == id) {
            b.2 = true;
        }
        let mut advanced = false;
        while st.pending.front().is_some_and(|b| b.2) {
            let (_, upto, _) = st.pending.pop_front().expect("front exists");
            self.synced.fetch_max(upto, Ordering::AcqRel);
            advanced = true;
        }
        drop(st);
        if advanced {
            self.cv.notify_all();
        }
    }

    /// Waits until everything before `target` is synced. (A failed sync aborts the process,
    /// so every registered batch completes.)
    pub(crate) fn wait_synced(&self, target: u64) {
        let mut st = self.st.lock();
        while self.synced.load(Ordering::Acquire) < target {
            st = self.cv.wait(st);
        }
    }

    /// Everything before this is synced, bytes.
    pub(crate) fn synced(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }
}
