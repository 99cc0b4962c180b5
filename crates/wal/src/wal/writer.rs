//! The WAL writer (PostgreSQL's `walwriter.c`): a background thread that flushes what was
//! inserted every `wal_writer_delay`, so that commits with `synchronous_commit = off` become
//! durable soon, and preallocates the segments ahead of the insert position, so that no
//! committing session creates and zero-fills one.

use super::Wal;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

pub(super) struct WriterCtl {
    pub(super) stop: Mutex<bool>,
    pub(super) cv: Condvar,
    /// `wal_writer_delay`, ms; a reload may change it.
    pub(super) delay_ms: AtomicU64,
    /// The writer thread runs: it, not the flushing sessions, preallocates segments.
    pub(super) running: AtomicBool,
}

impl WriterCtl {
    /// Not stopped; the delay is set when the writer starts.
    pub(super) fn new() -> WriterCtl {
        WriterCtl {
            stop: Mutex::new(false),
            cv: Condvar::new(),
            delay_ms: AtomicU64::new(0),
            running: AtomicBool::new(false),
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
                    if !*stop {
                        let delay = Duration::from_millis(ctl.delay_ms.load(Ordering::Relaxed));
                        ctl.cv.wait_for(&mut stop, delay);
                    }
                    if *stop {
                        return;
                    }
                }
                let Some(wal) = weak.upgrade() else { return };
                let _ = wal.flush(wal.insert_lsn());
                wal.preallocate_ahead_quietly();
            })
            .expect("spawn WAL writer thread");
        *slot = Some(handle);
        self.writer_ctl.running.store(true, Ordering::Release);
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
