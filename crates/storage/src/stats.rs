//! Cumulative I/O statistics, the counters behind `pg_stat_io`, `pg_stat_checkpointer` and
//! `pg_stat_bgwriter` (PostgreSQL's `pgstat_io.c`, `pgstat_checkpointer.c`, `pgstat_bgwriter.c`).
//!
//! Counters are relaxed atomics, added to where the I/O happens: reads, writes, extends and
//! fsyncs in the storage manager, hits and evictions in the buffer pool, write-backs in the
//! write-back batches. Each operation is charged to the *backend type* of the thread doing it,
//! which background threads declare once with [`set_backend_type`]; every other thread counts as
//! a client backend. Unlike PostgreSQL, times are always measured (as with
//! `track_io_timing = on`): one clock read per operation, against operations of 10 µs or more.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};

/// Who performs an I/O: PostgreSQL's `backend_type` values that walnut has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendType {
    /// An autovacuum worker.
    AutovacuumWorker,
    /// A session (the default for any thread).
    ClientBackend,
    /// The background writer.
    BackgroundWriter,
    /// The checkpointer.
    Checkpointer,
    /// Crash recovery (PostgreSQL's startup process).
    Startup,
}

impl BackendType {
    /// Every backend type, in `pg_stat_io`'s row order.
    pub const ALL: [BackendType; 5] = [
        BackendType::AutovacuumWorker,
        BackendType::BackgroundWriter,
        BackendType::Checkpointer,
        BackendType::ClientBackend,
        BackendType::Startup,
    ];

    /// The name `pg_stat_io.backend_type` shows.
    pub fn name(self) -> &'static str {
        match self {
            BackendType::AutovacuumWorker => "autovacuum worker",
            BackendType::ClientBackend => "client backend",
            BackendType::BackgroundWriter => "background writer",
            BackendType::Checkpointer => "checkpointer",
            BackendType::Startup => "startup",
        }
    }

    fn index(self) -> usize {
        match self {
            BackendType::BackgroundWriter => 0,
            BackendType::Checkpointer => 1,
            BackendType::ClientBackend => 2,
            BackendType::Startup => 3,
            BackendType::AutovacuumWorker => 4,
        }
    }
}

thread_local! {
    static BACKEND_TYPE: Cell<BackendType> = const { Cell::new(BackendType::ClientBackend) };
    /// Buffer hits of this thread not yet added to the shared counter.
    static HITS: Cell<u64> = const { Cell::new(0) };
}

/// Buffer hits a thread gathers before adding them to the shared counter: a hit is on the
/// page-access path, and one shared cache line written by every pin would cost more than the
/// count is worth. `pg_stat_io.hits` lags by fewer than this many per thread.
pub const HITS_BATCH: u64 = 64;

/// Declares the backend type of the calling thread, for the I/O it does from now on.
pub fn set_backend_type(t: BackendType) {
    BACKEND_TYPE.with(|c| c.set(t));
}

/// The calling thread's backend type.
pub fn backend_type() -> BackendType {
    BACKEND_TYPE.with(|c| c.get())
}

/// An I/O operation `pg_stat_io` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// A block read from a relation file.
    Read,
    /// A block written to a relation file.
    Write,
    /// A request that the kernel write back cached writes (`sync_file_range`); counted in
    /// blocks, as PostgreSQL does.
    Writeback,
    /// A relation file extended by a block.
    Extend,
    /// A page found in the buffer pool.
    Hit,
    /// A buffer evicted to make room for another page.
    Eviction,
    /// An fsync of a relation file.
    Fsync,
}

const OPS: usize = 7;

impl IoOp {
    fn index(self) -> usize {
        self as usize
    }
}

/// The counters of one data directory.
pub struct IoStats {
    counts: [[AtomicU64; OPS]; 5],
    time_us: [[AtomicU64; OPS]; 5],
    reset: SystemTime,
    /// Checkpoints started because `checkpoint_timeout` passed.
    pub ckpt_timed: AtomicU64,
    /// Checkpoints started because WAL reached its limit, or by request (CHECKPOINT, shutdown).
    pub ckpt_requested: AtomicU64,
    /// Checkpoints completed.
    pub ckpt_done: AtomicU64,
    /// Time in checkpoints' write phases, ms.
    pub ckpt_write_time_ms: AtomicU64,
    /// Time in checkpoints' sync phases, ms.
    pub ckpt_sync_time_ms: AtomicU64,
    /// Buffers written by checkpoints.
    pub ckpt_buffers_written: AtomicU64,
    /// Buffers the background writer cleaned.
    pub bg_buffers_clean: AtomicU64,
    /// Rounds in which the background writer stopped at `bgwriter_lru_maxpages`.
    pub bg_maxwritten_clean: AtomicU64,
    /// Buffers allocated (a frame taken for a page not in the pool).
    pub buffers_alloc: AtomicU64,
}

impl Default for IoStats {
    fn default() -> Self {
        IoStats {
            counts: Default::default(),
            time_us: Default::default(),
            reset: SystemTime::now(),
            ckpt_timed: AtomicU64::new(0),
            ckpt_requested: AtomicU64::new(0),
            ckpt_done: AtomicU64::new(0),
            ckpt_write_time_ms: AtomicU64::new(0),
            ckpt_sync_time_ms: AtomicU64::new(0),
            ckpt_buffers_written: AtomicU64::new(0),
            bg_buffers_clean: AtomicU64::new(0),
            bg_maxwritten_clean: AtomicU64::new(0),
            buffers_alloc: AtomicU64::new(0),
        }
    }
}

/// One `pg_stat_io` row's figures: (operations, time µs) per [`IoOp`], in declaration order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoRow {
    /// Operation counts (blocks for reads, writes, write-backs and extends).
    pub counts: [u64; OPS],
    /// Time spent, µs.
    pub time_us: [u64; OPS],
}

impl IoRow {
    /// The count of `op`.
    pub fn count(&self, op: IoOp) -> u64 {
        self.counts[op.index()]
    }

    /// The time spent in `op`, µs.
    pub fn time_us(&self, op: IoOp) -> u64 {
        self.time_us[op.index()]
    }
}

impl IoStats {
    /// Adds `n` operations `op` taking `us` µs in all, charged to the calling thread's backend
    /// type.
    pub fn add(&self, op: IoOp, n: u64, us: u64) {
        let t = backend_type().index();
        self.counts[t][op.index()].fetch_add(n, Ordering::Relaxed);
        if us > 0 {
            self.time_us[t][op.index()].fetch_add(us, Ordering::Relaxed);
        }
    }

    /// Counts a buffer hit, in batches of [`HITS_BATCH`] per thread.
    pub fn add_hit(&self) {
        let n = HITS.with(|h| {
            let n = h.get() + 1;
            h.set(if n >= HITS_BATCH { 0 } else { n });
            n
        });
        if n >= HITS_BATCH {
            self.add(IoOp::Hit, n, 0);
        }
    }

    /// Adds `n` operations `op` that began at `start`.
    pub fn add_since(&self, op: IoOp, n: u64, start: Instant) {
        self.add(op, n, start.elapsed().as_micros() as u64);
    }

    /// The counters of backend type `t`.
    pub fn row(&self, t: BackendType) -> IoRow {
        let mut r = IoRow::default();
        for op in 0..OPS {
            r.counts[op] = self.counts[t.index()][op].load(Ordering::Relaxed);
            r.time_us[op] = self.time_us[t.index()][op].load(Ordering::Relaxed);
        }
        r
    }

    /// When the counters started (the server's start: walnut has no `pg_stat_reset_shared`).
    pub fn reset_time(&self) -> SystemTime {
        self.reset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_charged_to_the_threads_backend_type() {
        let s = std::sync::Arc::new(IoStats::default());
        s.add(IoOp::Write, 2, 30);
        let s2 = s.clone();
        std::thread::spawn(move || {
            set_backend_type(BackendType::Checkpointer);
            s2.add(IoOp::Write, 5, 0);
            s2.add(IoOp::Fsync, 1, 7);
        })
        .join()
        .unwrap();
        let c = s.row(BackendType::ClientBackend);
        assert_eq!((c.count(IoOp::Write), c.time_us(IoOp::Write)), (2, 30));
        let k = s.row(BackendType::Checkpointer);
        assert_eq!(k.count(IoOp::Write), 5);
        assert_eq!((k.count(IoOp::Fsync), k.time_us(IoOp::Fsync)), (1, 7));
        assert_eq!(s.row(BackendType::Startup), IoRow::default());
    }
}
