//! The WAL writer (PostgreSQL's `walwriter.c`): a background thread that flushes what was
//! inserted every `wal_writer_delay`, and at once when an asynchronous commit leaves
//! `wal_writer_flush_after` of WAL unflushed ([`Wal::async_commit`]), so that commits with
//! `synchronous_commit = off` become durable (and reach standbys) soon, and preallocates the segments ahead of the insert position, so that no
//! committing session creates and zero-fills one.

use super::Wal;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use walnut_common::Lsn;

/// `wal_writer_flush_after`'s default, bytes (see the parameter).
const DEFAULT_FLUSH_AFTER: u64 = 256 << 10;

pub(super) struct WriterCtl {
    pub(super) stop: Mutex<bool>,
    pub(super) cv: Condvar,
    /// `wal_writer_delay`, ms; a reload may change it.
    pub(super) delay_ms: AtomicU64,
    /// The writer thread runs: it, not the flushing sessions, preallocates segments.
    pub(super) running: AtomicBool,
    /// `wal_writer_flush_after`, bytes; a reload may change it.
    pub(super) flush_after: AtomicU64,
    /// An asynchronous commit has woken the writer, which has not flushed since: later ones
    /// need not wake it again (one wakeup per flush, not per commit).
    pub(super) kicked: AtomicBool,
}

impl WriterCtl {
    /// Not stopped; the delay is set when the writer starts.
    pub(super) fn new() -> WriterCtl {
        WriterCtl {
            stop: Mutex::new(false),
            cv: Condvar::new(),
            delay_ms: AtomicU64::new(0),
            running: AtomicBool::new(false),
            flush_after: AtomicU64::new(DEFAULT_FLUSH_AFTER),
            kicked: AtomicBool::new(false),
        }
    }
}

impl Wal {
    /// Starts the background WAL writer thread (for `synchronous_commit = off`; PostgreSQL's
    /// `walwriter.c`): every `delay_ms` milliseconds (`wal_writer_delay`, which
    /// [`Wal::apply_settings`] may change) it flushes what was inserted. Stops when the
    /// `Wal` is dropped or `shutdown` is called. A second call while one runs does nothing.
    pub fn start_wal_writer(self: &Arc<Self>, delay_ms: u64) {
        let mut slot = self.writer.lock();
        if slot.is_some() {
            return;
        }
        *self.writer_ctl.stop.lock() = false;
        self.writer_ctl
            .delay_ms
            .store(delay_ms.max(1), Ordering::Relaxed);
        let weak: Weak<Wal> = Arc::downgrade(self);
        let ctl = self.writer_ctl.clone();
        let handle = std::thread::Builder::new()
            .name("walnut-walwriter".into())
            .spawn(move || loop {
                {
                    let mut stop = ctl.stop.lock();
                    if !*stop && !ctl.kicked.load(Ordering::Acquire) {
                        let delay = Duration::from_millis(ctl.delay_ms.load(Ordering::Relaxed));
                        ctl.cv.wait_for(&mut stop, delay);
                    }
                    if *stop {
                        return;
                    }
                }
                let Some(wal) = weak.upgrade() else { return };
                // Cleared before the flush: a commit after this point is either in the
                // flush or wakes the writer again.
                ctl.kicked.store(false, Ordering::Release);
                let _ = wal.flush(wal.insert_lsn());
                wal.preallocate_ahead_quietly();
            })
            .expect("spawn WAL writer thread");
        *slot = Some(handle);
        self.writer_ctl.running.store(true, Ordering::Release);
    }

    /// Tells the WAL writer that an asynchronous commit's record ends at `end` (PostgreSQL's
    /// xlog.c `XLogSetAsyncXactLSN`): if at least `wal_writer_flush_after` bytes before `end`
    /// are unflushed (any, with 0), the writer is woken to flush now rather than at its next
    /// `wal_writer_delay` round. Cheap when it does not wake: two atomic loads. Does nothing
    /// while no writer runs.
    pub fn async_commit(&self, end: Lsn) {
        let ctl = &self.writer_ctl;
        if !ctl.running.load(Ordering::Acquire) || ctl.kicked.load(Ordering::Acquire) {
            return;
        }
        let unflushed = end.0.saturating_sub(self.flush_lsn().0);
        let after = ctl.flush_after.load(Ordering::Relaxed);
        if unflushed > 0 && unflushed >= after && !ctl.kicked.swap(true, Ordering::AcqRel) {
            // Under the lock the writer checks `kicked` under, so the wakeup is not lost
            // between its check and its wait.
            let _g = ctl.stop.lock();
            ctl.cv.notify_all();
        }
    }

    pub(super) fn stop_wal_writer(&self) {
        self.writer_ctl.running.store(false, Ordering::Release);
        *self.writer_ctl.stop.lock() = true;
        self.writer_ctl.cv.notify_all();
        let handle = self.writer.lock().take();
        if let Some(h) = handle {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}
