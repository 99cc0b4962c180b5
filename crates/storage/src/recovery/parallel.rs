//! Parallel redo: the startup thread reads and decodes the WAL and hands each block reference
//! to the redo worker that owns the block; workers apply their blocks' changes with
//! [`super::apply_block`]. Crash recovery ([`redo`]) and a standby's replay
//! (`crate::standby`) drive the same [`Pipeline`]. The design is Koichi Suzuki's parallel
//! redo and openGauss's page redo (one worker per block hash); the argument is in the storage
//! DESIGN.md, "Parallel redo".
//!
//! Invariants:
//! - A block belongs to one worker ([`worker_for`]), and the startup thread sends work in WAL
//!   order over one FIFO channel per worker, so one block's records apply in WAL order: each
//!   page goes through the same sequence of changes as in serial redo, and comes out
//!   byte-identical.
//! - Block redo touches its own page only (its record's per-block data, the page, the page
//!   LSN), so blocks of one record may apply on different workers, in any order relative to
//!   each other. What must be seen whole (a B-tree split on a hot standby) is applied by the
//!   startup thread after a barrier.
//! - Work goes out in **rounds**: every worker gets one batch per round (empty if it owns
//!   none of the round's blocks), and reports the last round it has applied. The
//!   **watermark** is the least of those reports: every block reference sent in a round at
//!   or below it has been applied, so every record added before that round was sent is whole
//!   on its pages. A hot standby publishes a commit only when the watermark reaches the round
//!   that carried the blocks before it.
//! - On a hot standby (a pipeline started [`Pipeline::start`] with `ordered`), an index entry
//!   must never point at a heap version that is not on its page yet, for an index lookup
//!   starts at the entry's version and walks back (a SET_TID applied early would hide the old,
//!   still visible version). So each round applies in two phases: every worker applies its
//!   heap (non-B-tree) blocks of the round, and only once all workers have done so does any
//!   apply its B-tree blocks of the round. A block is a heap or an index block, never both, so
//!   no block's order changes; a B-tree record comes after the heap records it points at, so
//!   they are in its round or an earlier one. Heap pages may run ahead of the index, which
//!   readers cannot see: a version is reached only through the index or a newer version's
//!   `prev`.
//! - A round goes out once [`BATCH`] block references wait, or when the caller flushes; each
//!   worker's channel holds [`QUEUE`] rounds, so the work ahead of the workers is bounded and
//!   the startup thread blocks when a worker is that far behind.
//!
//! Synchronization goes through `super::primitives`, so that a unit test can run the same
//! pipeline under shuttle's scheduler and explore its interleavings.
//!
//! Errors: a worker that fails keeps the failure with the lowest LSN and from then on only
//! reports rounds, without applying; the caller sees it ([`Pipeline::failed`]) at its next
//! round and stops. A worker that panics reports the same, as a failure, so no one waits for
//! it forever.

use super::primitives::{self as prim, Runtime};
use super::{apply_block, apply_main, at_record, main_needs_barrier, Applied};
use crate::{btree, stats, Storage};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use walnut_common::{BlockNumber, Error, Lsn, RelFileId, Result};
use walnut_wal::{BlockRef, DecodedRecord, Record, RmgrId};

/// Block references per round: enough that a channel operation costs little per block (the
/// serial profile spends about 1 µs applying one), few enough that workers start while the
/// startup thread decodes on and that a hot standby's commits wait little.
pub const BATCH: usize = 128;

/// Rounds a worker's channel holds: with [`BATCH`], at most 4,096 block references (about
/// 1 MB of redo data, more with full-page images) wait per worker.
pub const QUEUE: usize = 32;

/// More block references than can be handed out and not yet applied: per worker, [`QUEUE`]
/// rounds queued and one being applied, and one round being gathered, each under `2 *
/// BATCH` (a round goes out once [`BATCH`] wait, so it exceeds that by at most one record's
/// blocks, and no record names [`BATCH`]). Recovery prefetch keeps a record's claims this
/// long after handing it out (`recovery::prefetch`).
pub const IN_FLIGHT_BOUND: usize = (QUEUE + 2) * 2 * BATCH;

/// One redo worker's counters (`walnut_stat_recovery_workers`), cumulative over every pipeline
/// the server started with that worker number: times in µs.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Block references applied.
    pub blocks: AtomicU64,
    /// Rounds received (each worker gets every round, empty or not).
    pub rounds: AtomicU64,
    /// Time applying its blocks.
    pub busy_us: AtomicU64,
    /// Time waiting for work: its channel empty (the startup thread behind, or nothing to
    /// replay).
    pub wait_work_us: AtomicU64,
    /// Time waiting, on a hot standby, for the other workers' heap phase of a round.
    pub wait_phase_us: AtomicU64,
}

/// The parallel redo's counters, server-wide (in [`Storage`]): one [`WorkerStats`] per worker
/// number, and the startup thread's waits for the workers, in µs.
#[derive(Debug, Default)]
pub struct RedoStats {
    workers: Mutex<Vec<Arc<WorkerStats>>>,
    /// Block references the startup thread handed out.
    pub blocks_sent: AtomicU64,
    /// Rounds it sent.
    pub rounds_sent: AtomicU64,
    /// Time it waited because a worker's channel was full (that worker behind).
    pub wait_send_us: AtomicU64,
    /// Time it waited at barriers (files removed, a whole record, the end, catching up).
    pub wait_barrier_us: AtomicU64,
}

impl RedoStats {
    /// The counters of workers `0..n`, created as needed.
    fn workers(&self, n: usize) -> Vec<Arc<WorkerStats>> {
        let mut w = self.workers.lock();
        while w.len() < n {
            w.push(Arc::default());
        }
        w[..n].to_vec()
    }

    /// Every worker number's counters so far, in order.
    pub fn snapshot(&self) -> Vec<Arc<WorkerStats>> {
        self.workers.lock().clone()
    }
}

fn add_us(c: &AtomicU64, since: Instant) {
    c.fetch_add(since.elapsed().as_micros() as u64, Ordering::Relaxed);
}

/// One block reference of a record, with what its redo needs.
struct BlockWork {
    /// Start of the record (for error messages).
    lsn: Lsn,
    /// End of the record: the page LSN redo sets.
    end_lsn: Lsn,
    rmgr: RmgrId,
    info: u8,
    /// Index of the block in its record and the record's number of blocks.
    id: (usize, usize),
    block: BlockRef,
}

/// Applies one block reference in a worker: `None` once the storage is gone (the worker then
/// stops applying).
type ApplyFn = dyn Fn(&BlockWork) -> Option<Result<()>> + Send + Sync;

/// One round's work for one worker.
struct Batch {
    round: u64,
    work: Vec<BlockWork>,
}

/// The worker that owns block `block` of `rel`, of `n`: a multiplicative hash of both, so
/// neighbouring blocks of one relation spread over the workers.
pub fn worker_for(rel: RelFileId, block: BlockNumber, n: usize) -> usize {
    let key = (u64::from(rel.0) << 32) | u64::from(block.0);
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) % n as u64) as usize
}

/// What the workers share with the startup thread.
struct Shared {
    /// The last round each worker has applied (or skipped, after a failure).
    done: Vec<prim::AtomicU64>,
    /// Ordered pipelines: the last round whose heap phase each worker has finished
    /// (`u64::MAX` once it stops applying).
    heap_done: Vec<prim::AtomicU64>,
    /// Two phases per round (hot standby): heap blocks, then B-tree blocks.
    ordered: bool,
    failed: prim::AtomicBool,
    /// The first failure (lowest LSN).
    first: prim::Mutex<Option<(Lsn, Error)>>,
    /// Set when the pipeline is dropped: workers skip what is left.
    cancel: prim::AtomicBool,
    lock: prim::Mutex<()>,
    /// A worker finished a round.
    progress: prim::Condvar,
}

impl Shared {
    fn record_failure(&self, lsn: Lsn, e: Error) {
        let mut first = self.first.lock();
        if first.as_ref().is_none_or(|(at, _)| lsn < *at) {
            *first = Some((lsn, e));
        }
        self.failed.store(true, Ordering::Release);
    }

    fn watermark(&self) -> u64 {
        self.done
            .iter()
            .map(|d| d.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }
}

/// The redo workers and the startup thread's side of their channels.
pub struct Pipeline {
    senders: Vec<prim::Sender<Batch>>,
    /// Each worker's part of the round being gathered.
    batches: Vec<Vec<BlockWork>>,
    /// Block references in `batches`.
    pending: usize,
    /// The last round sent.
    round: u64,
    shared: Arc<Shared>,
    threads: Vec<prim::JoinHandle>,
    /// The server's counters (a test's own, for a model pipeline).
    stats: Arc<RedoStats>,
}

impl Pipeline {
    /// Starts `workers` redo workers (threads `redo worker N`, counted as the startup process
    /// in `pg_stat_io`). They hold `st` weakly: once it is gone they skip their work.
    /// `ordered` (a hot standby): each round applies its heap blocks on every worker before
    /// any of its B-tree blocks (see the module's invariants).
    ///
    /// # Errors
    /// I/O if a thread cannot be started.
    pub fn start(st: &Arc<Storage>, workers: usize, ordered: bool) -> Result<Pipeline> {
        let weak = Arc::downgrade(st);
        let apply: Arc<ApplyFn> = Arc::new(move |w: &BlockWork| {
            let st = weak.upgrade()?;
            Some(apply_block(&st, w.rmgr, w.info, w.id, &w.block, w.end_lsn))
        });
        Pipeline::start_with(Runtime::Os, workers, ordered, apply, st.redo_stats.clone())
    }

    /// [`Pipeline::start`] with workers that call `apply` (tests give a model), counting in
    /// `stats`, on `rt`'s threads and primitives.
    fn start_with(
        rt: Runtime,
        workers: usize,
        ordered: bool,
        apply: Arc<ApplyFn>,
        stats: Arc<RedoStats>,
    ) -> Result<Pipeline> {
        assert!(workers >= 1, "a pipeline needs a worker");
        let shared = Arc::new(Shared {
            done: (0..workers).map(|_| prim::AtomicU64::new(rt, 0)).collect(),
            heap_done: (0..workers).map(|_| prim::AtomicU64::new(rt, 0)).collect(),
            ordered,
            failed: prim::AtomicBool::new(rt, false),
            first: prim::Mutex::new(rt, None),
            cancel: prim::AtomicBool::new(rt, false),
            lock: prim::Mutex::new(rt, ()),
            progress: prim::Condvar::new(rt),
        });
        let mut p = Pipeline {
            senders: Vec::with_capacity(workers),
            batches: (0..workers).map(|_| Vec::with_capacity(BATCH)).collect(),
            pending: 0,
            round: 0,
            shared,
            threads: Vec::with_capacity(workers),
            stats,
        };
        for (i, counters) in p.stats.workers(workers).into_iter().enumerate() {
            let (tx, rx) = prim::bounded::<Batch>(rt, QUEUE);
            let (apply, shared) = (apply.clone(), p.shared.clone());
            let t = prim::spawn(rt, format!("redo worker {i}"), move || {
                worker(i, &*apply, rx, shared, &counters)
            })
            .map_err(|e| Error::io("could not start a redo worker", e))?;
            p.senders.push(tx);
            p.threads.push(t);
        }
        Ok(p)
    }

    /// Moves the record's block references (`r.blocks` is left empty) into the round being
    /// gathered, sending it once [`BATCH`] wait. `Ok(false)`: a worker failed.
    ///
    /// # Errors
    /// Internal if a worker has exited.
    pub fn add(&mut self, lsn: Lsn, end_lsn: Lsn, r: &mut Record) -> Result<bool> {
        let nblocks = r.blocks.len();
        let workers = self.senders.len();
        for (id, block) in r.blocks.drain(..).enumerate() {
            let w = worker_for(block.rel, block.block, workers);
            self.batches[w].push(BlockWork {
                lsn,
                end_lsn,
                rmgr: r.rmgr,
                info: r.info,
                id: (id, nblocks),
                block,
            });
        }
        self.pending += nblocks;
        if self.pending >= BATCH {
            self.flush()?;
        }
        Ok(!self.failed())
    }

    /// The round that carries every block reference added so far: once the watermark
    /// reaches it, all of them are applied.
    pub fn round_of_added(&self) -> u64 {
        self.round + u64::from(self.pending > 0)
    }

    /// Sends the round being gathered, if it holds anything, to every worker (an empty batch
    /// to those that own none of it). Returns [`Pipeline::round_of_added`].
    ///
    /// # Errors
    /// Internal if a worker has exited.
    pub fn flush(&mut self) -> Result<u64> {
        if self.pending == 0 {
            return Ok(self.round);
        }
        self.round += 1;
        self.stats
            .blocks_sent
            .fetch_add(self.pending as u64, Ordering::Relaxed);
        self.stats.rounds_sent.fetch_add(1, Ordering::Relaxed);
        self.pending = 0;
        for (w, tx) in self.senders.iter().enumerate() {
            let work = std::mem::replace(&mut self.batches[w], Vec::with_capacity(BATCH));
            // A send waits only when that worker is QUEUE rounds behind.
            let t0 = Instant::now();
            let sent = tx.send(Batch {
                round: self.round,
                work,
            });
            add_us(&self.stats.wait_send_us, t0);
            if !sent {
                return Err(self
                    .take_failure()
                    .unwrap_or_else(|| Error::internal("a redo worker exited early")));
            }
        }
        Ok(self.round)
    }

    /// The last round every worker has applied.
    pub fn watermark(&self) -> u64 {
        self.shared.watermark()
    }

    /// Whether a worker failed.
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Waits until the watermark reaches `round` or a worker fails, at most `timeout`.
    /// Returns whether the watermark reached it.
    pub fn wait_for(&self, round: u64, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.shared.lock.lock();
        loop {
            if self.watermark() >= round {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if self.failed() || left.is_zero() || self.shared.progress.wait_for(&mut g, left) {
                return self.watermark() >= round;
            }
        }
    }

    /// Sends what was added and waits until all of it is applied. `Ok(false)`: a worker
    /// failed.
    ///
    /// # Errors
    /// Internal if a worker has exited.
    pub fn barrier(&mut self) -> Result<bool> {
        let round = self.flush()?;
        if self.watermark() < round {
            let t0 = Instant::now();
            while !self.wait_for(round, Duration::from_secs(1)) {
                if self.failed() {
                    add_us(&self.stats.wait_barrier_us, t0);
                    return Ok(false);
                }
            }
            add_us(&self.stats.wait_barrier_us, t0);
        }
        Ok(!self.failed())
    }

    /// Takes the first failure (lowest LSN), if any, as the error of its record.
    pub fn take_failure(&self) -> Option<Error> {
        self.shared
            .first
            .lock()
            .take()
            .map(|(lsn, e)| at_record(lsn, e))
    }

    /// Applies everything added, stops the workers and returns the first failure.
    ///
    /// # Errors
    /// A worker's failure, naming its record; internal if a worker has exited.
    pub fn finish(mut self) -> Result<()> {
        self.barrier()?;
        self.senders.clear();
        let mut panicked = false;
        for t in std::mem::take(&mut self.threads) {
            panicked |= !t.join();
        }
        match self.take_failure() {
            Some(e) => Err(e),
            None if panicked => Err(Error::internal("a redo worker panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Pipeline {
    /// Stops the workers; what was not applied is skipped.
    fn drop(&mut self) {
        self.shared.cancel.store(true, Ordering::Release);
        self.senders.clear();
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

/// Reports a round as done, even when the worker unwinds from a panic mid-round (which also
/// counts as a failure).
struct RoundGuard<'a> {
    shared: &'a Shared,
    me: usize,
    round: u64,
    lsn: Lsn,
}

impl Drop for RoundGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.shared
                .record_failure(self.lsn, Error::internal("a redo worker panicked"));
            // Never waited for again.
            self.round = u64::MAX;
            self.shared.heap_done[self.me].store(u64::MAX, Ordering::Release);
        }
        self.shared.done[self.me].store(self.round, Ordering::Release);
        notify(self.shared);
    }
}

/// Redo worker `me`: applies the blocks it is sent, round by round, until the channel closes
/// (in an ordered pipeline, a round's heap blocks, then, once every worker has applied its,
/// its B-tree blocks). After a failure, or once the storage is gone or the pipeline dropped,
/// it only reports rounds.
fn worker(
    me: usize,
    apply: &ApplyFn,
    rx: prim::Receiver<Batch>,
    shared: Arc<Shared>,
    counters: &WorkerStats,
) {
    stats::set_backend_type(stats::BackendType::Startup);
    loop {
        let t0 = Instant::now();
        let Some(batch) = rx.recv() else { break };
        add_us(&counters.wait_work_us, t0);
        counters.rounds.fetch_add(1, Ordering::Relaxed);
        let mut busy = Instant::now();
        let mut guard = RoundGuard {
            shared: &shared,
            me,
            round: batch.round,
            lsn: batch.work.first().map_or(Lsn(0), |w| w.lsn),
        };
        let index = |w: &BlockWork| w.rmgr == btree::RM_BTREE;
        let phases: &[Option<bool>] = if shared.ordered {
            &[Some(false), Some(true)]
        } else {
            &[None]
        };
        for &phase in phases {
            if phase == Some(true) {
                // Every worker's heap blocks of this round (and so of every earlier one)
                // first.
                shared.heap_done[me].store(batch.round, Ordering::Release);
                notify(&shared);
                if !batch.work.iter().any(index) {
                    break;
                }
                add_us(&counters.busy_us, busy);
                let t0 = Instant::now();
                wait_heap_phase(&shared, batch.round);
                add_us(&counters.wait_phase_us, t0);
                busy = Instant::now();
            }
            for w in batch
                .work
                .iter()
                .filter(|w| phase.is_none_or(|p| index(w) == p))
            {
                guard.lsn = w.lsn;
                if shared.failed.load(Ordering::Acquire) || shared.cancel.load(Ordering::Acquire) {
                    break;
                }
                match apply(w) {
                    Some(Ok(())) => {
                        counters.blocks.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(Err(e)) => shared.record_failure(w.lsn, e),
                    None => shared.cancel.store(true, Ordering::Release),
                }
            }
        }
        add_us(&counters.busy_us, busy);
        if shared.failed.load(Ordering::Acquire) || shared.cancel.load(Ordering::Acquire) {
            // Stopped applying: no one waits for this worker's heap phases.
            shared.heap_done[me].store(u64::MAX, Ordering::Release);
        }
    }
}

/// Wakes whoever waits for a worker's progress.
fn notify(shared: &Shared) {
    let _g = shared.lock.lock();
    shared.progress.notify_all();
}

/// Waits until every worker has finished the heap phase of `round` (or stopped applying),
/// or the pipeline fails or is dropped. Each gets there without waiting for anyone (its heap
/// phase of `round` follows only its own earlier rounds), so this cannot deadlock.
fn wait_heap_phase(shared: &Shared, round: u64) {
    let reached = || {
        shared.failed.load(Ordering::Acquire)
            || shared.cancel.load(Ordering::Acquire)
            || shared
                .heap_done
                .iter()
                .all(|d| d.load(Ordering::Acquire) >= round)
    };
    if reached() {
        return;
    }
    let mut g = shared.lock.lock();
    while !reached() {
        shared.progress.wait_for(&mut g, Duration::from_millis(10));
    }
}

/// Crash recovery's parallel redo: reads every record from `reader` and applies it with
/// `workers` redo workers, calling `note` with each record's LSN and what its main data did,
/// in WAL order. Transaction status, file creation and checkpoint counters are applied by
/// the calling thread as they are read (crash recovery has no readers); a record that removes
/// files first waits for every earlier block to be applied. Returns the number of records.
///
/// # Errors
/// The reader's errors; the first failure of applying a record (lowest LSN among the
/// workers' failures), naming the record's LSN.
pub fn redo(
    st: &Arc<Storage>,
    reader: &mut super::prefetch::LookAhead<'_>,
    workers: usize,
    mut note: impl FnMut(Lsn, &Applied),
) -> Result<u64> {
    let mut p = Pipeline::start(st, workers, false)?;
    let mut n = 0u64;
    while let Some(rec) = reader.next_record(st)? {
        let DecodedRecord {
            lsn,
            end_lsn,
            record: mut r,
        } = rec;
        if r.xid.is_valid() {
            st.xact.observe_xid(r.xid);
        }
        if !p.add(lsn, end_lsn, &mut r)? || (main_needs_barrier(&r) && !p.barrier()?) {
            break;
        }
        let mut applied = Applied::default();
        apply_main(st, lsn, &r, &mut applied).map_err(|e| at_record(lsn, e))?;
        note(lsn, &applied);
        n += 1;
    }
    p.finish()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap;
    use std::collections::{HashMap, HashSet};
    use walnut_common::Xid;
    use walnut_io::fault::Rng;

    /// What the model applier saw: every (record LSN, block index) applied, and per block
    /// the LSNs in the order applied.
    #[derive(Default)]
    struct Model {
        applied: HashSet<(u64, usize)>,
        per_block: HashMap<(u32, u32), Vec<u64>>,
        /// Violations found while applying.
        errors: Vec<String>,
    }

    /// Heap records by xid: (LSN, block count).
    type HeapOf = HashMap<u64, Vec<(u64, usize)>>;

    fn block(rel: u32, b: u32, xid: u64) -> BlockRef {
        BlockRef {
            rel: RelFileId(rel),
            block: BlockNumber(b),
            will_init: false,
            image_lz4: false,
            image: None,
            data: xid.to_le_bytes().to_vec(),
        }
    }

    /// Transactions of one or two heap records (one or two blocks each) then one B-tree leaf
    /// record, then a commit record; random barriers. A model applier sleeps at random and
    /// checks, as it applies: each block's records come in WAL order, and a B-tree record
    /// comes after every heap block of its transaction. The driver checks that once the
    /// watermark reaches the round of a commit, every block before the commit is applied, and
    /// that after a barrier everything is. A mutation that publishes a worker's progress
    /// before a record's last block (the bug this test was written for) fails it.
    #[test]
    fn the_watermark_and_the_heap_before_index_order_hold_under_random_timing() {
        for seed in 1..=12u64 {
            watermark_model(Runtime::Os, seed, 2 + (seed % 3) as usize, 400, 40);
        }
    }

    /// The body of the test above: `xids` transactions through `workers` workers on `rt`,
    /// the model applier sleeping up to `pause_us` µs before each block (0: never; under
    /// shuttle the scheduler chooses who runs). Under shuttle a round also goes out after
    /// random transactions and barriers come often: a shuttle run affords few transactions,
    /// far fewer than [`BATCH`] block references.
    fn watermark_model(rt: Runtime, seed: u64, workers: usize, xids: u64, pause_us: u64) {
        {
            let model = Arc::new(Mutex::new(Model::default()));
            // Heap records by xid: (lsn, block count).
            let heap_of: Arc<Mutex<HeapOf>> = Arc::default();
            let apply: Arc<ApplyFn> = {
                let (model, heap_of) = (model.clone(), heap_of.clone());
                let rng = Mutex::new(Rng(seed));
                Arc::new(move |w: &BlockWork| {
                    if pause_us > 0 {
                        let pause = rng.lock().below(pause_us);
                        std::thread::sleep(Duration::from_micros(pause));
                    }
                    let xid = u64::from_le_bytes(w.block.data[..8].try_into().unwrap());
                    let mut m = model.lock();
                    if w.rmgr == btree::RM_BTREE {
                        for &(lsn, n) in heap_of.lock().get(&xid).into_iter().flatten() {
                            for id in 0..n {
                                if lsn < w.lsn.0 && !m.applied.contains(&(lsn, id)) {
                                    m.errors.push(format!(
                                        "seed {seed}: index record {} before heap block {id} of {lsn:#x}",
                                        w.lsn
                                    ));
                                }
                            }
                        }
                    }
                    let key = (w.block.rel.0, w.block.block.0);
                    let m = &mut *m;
                    let seq = m.per_block.entry(key).or_default();
                    if seq.last().is_some_and(|&l| l >= w.lsn.0) {
                        m.errors.push(format!(
                            "seed {seed}: block {key:?} out of order at {}",
                            w.lsn
                        ));
                    }
                    seq.push(w.lsn.0);
                    m.applied.insert((w.lsn.0, w.id.0));
                    Some(Ok(()))
                })
            };
            let stats = Arc::new(RedoStats::default());
            let mut p = Pipeline::start_with(rt, workers, true, apply, stats.clone()).unwrap();
            let mut rng = Rng(seed ^ 0xABCD);
            let mut lsn = 0x1000u64;
            let mut all: Vec<(u64, usize)> = Vec::new();
            // (round, every block added before the commit)
            let mut commits: Vec<(u64, usize)> = Vec::new();
            let shuttle = rt != Runtime::Os;
            for xid in 1..=xids {
                for _ in 0..1 + rng.below(2) {
                    let n = 1 + rng.below(2) as usize;
                    // Distinct blocks, as in a real record.
                    let first = rng.below(8) as u32;
                    let second = (first + 1 + rng.below(7) as u32) % 8;
                    let blocks = [first, second][..n]
                        .iter()
                        .map(|&b| block(10, b, xid))
                        .collect::<Vec<_>>();
                    let mut r = Record {
                        rmgr: heap::RM_HEAP,
                        info: 0,
                        xid: Xid(xid),
                        flags: 0,
                        blocks,
                        main_data: vec![],
                    };
                    heap_of.lock().entry(xid).or_default().push((lsn, n));
                    all.extend((0..n).map(|id| (lsn, id)));
                    assert!(p.add(Lsn(lsn), Lsn(lsn + 0x40), &mut r).unwrap());
                    lsn += 0x40;
                }
                let mut r = Record {
                    rmgr: btree::RM_BTREE,
                    info: btree::BTREE_SET_TID,
                    xid: Xid(xid),
                    flags: 0,
                    blocks: vec![block(20, rng.below(4) as u32, xid)],
                    main_data: vec![],
                };
                all.push((lsn, 0));
                assert!(p.add(Lsn(lsn), Lsn(lsn + 0x40), &mut r).unwrap());
                lsn += 0x40;
                commits.push((p.round_of_added(), all.len()));
                if shuttle && rng.below(2) == 0 {
                    p.flush().unwrap();
                }
                lsn += 0x40;
                let mark = p.watermark();
                {
                    let m = model.lock();
                    for &(round, upto) in &commits {
                        if round <= mark {
                            for b in &all[..upto] {
                                assert!(m.applied.contains(b), "seed {seed}: watermark {mark} passed round {round} before {b:?} applied");
                            }
                        }
                    }
                }
                commits.retain(|&(round, _)| round > mark);
                if rng.below(if shuttle { 4 } else { 50 }) == 0 {
                    assert!(p.barrier().unwrap());
                    let m = model.lock();
                    assert!(
                        all.iter().all(|b| m.applied.contains(b)),
                        "seed {seed}: barrier"
                    );
                }
            }
            p.finish().unwrap();
            let m = model.lock();
            assert!(m.errors.is_empty(), "{}", m.errors.join("\n"));
            assert_eq!(m.applied.len(), all.len());
            // The counters: every block handed out was applied by one worker, and every
            // worker received every round.
            let w = stats.snapshot();
            assert_eq!(w.len(), workers);
            let sent = stats.blocks_sent.load(Ordering::Relaxed);
            assert_eq!(sent, all.len() as u64);
            let applied: u64 = w.iter().map(|c| c.blocks.load(Ordering::Relaxed)).sum();
            assert_eq!(applied, sent);
            let rounds = stats.rounds_sent.load(Ordering::Relaxed);
            assert!(w.iter().all(|c| c.rounds.load(Ordering::Relaxed) == rounds));
        }
    }

    #[test]
    fn a_failure_stops_the_pipeline_and_names_the_failed_record() {
        failure_model(Runtime::Os, 3, 1000);
    }

    /// The body of the test above: `records` one-block heap records through `workers`
    /// workers on `rt`, of which every one at 0x5000 or after on a 0x200 boundary fails.
    fn failure_model(rt: Runtime, workers: usize, records: u64) {
        let apply: Arc<ApplyFn> = Arc::new(|w: &BlockWork| {
            if w.lsn.0 >= 0x5000 && w.lsn.0.is_multiple_of(0x200) {
                return Some(Err(Error::corruption("model failure")));
            }
            Some(Ok(()))
        });
        let mut p = Pipeline::start_with(rt, workers, true, apply, Arc::default()).unwrap();
        let mut ok = true;
        for i in 0..records {
            let mut r = Record {
                rmgr: heap::RM_HEAP,
                info: 0,
                xid: Xid(1 + i / 4),
                flags: 0,
                blocks: vec![block(10, (i % 16) as u32, 1)],
                main_data: vec![],
            };
            ok = p.add(Lsn(0x40 * i), Lsn(0x40 * (i + 1)), &mut r).unwrap() && ok;
            if !ok {
                break;
            }
        }
        assert!(!p.barrier().unwrap() || !ok);
        // Workers stop at their next block once one has failed, so the failure reported is
        // the lowest of those that happened: a failing record, named.
        let e = p.finish().unwrap_err();
        let at = e
            .message
            .strip_prefix("redo of record at 0/")
            .and_then(|m| m.strip_suffix(" failed: model failure"))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .unwrap_or_else(|| panic!("{e}"));
        assert!(at >= 0x5000 && at.is_multiple_of(0x200), "{e}");
    }

    /// The same models under shuttle, which runs one thread at a time and explores the
    /// interleavings of the startup thread and the workers: at random, and by PCT (depth 3).
    /// Every timed wait in the pipeline waits for a notification there, so a missed wake-up
    /// fails as a deadlock; the watermark (a commit's blocks all applied once it passes the
    /// commit's round), the heap-before-index phases, per-block WAL order, barriers, and a
    /// failure that ends the pipeline without a worker left waiting in a heap phase are
    /// checked in every interleaving explored.
    #[test]
    fn the_watermark_barriers_and_failures_hold_in_every_explored_interleaving() {
        shuttle::check_random(|| watermark_model(Runtime::Shuttle, 7, 2, 8, 0), 400);
        shuttle::check_random(|| watermark_model(Runtime::Shuttle, 8, 3, 6, 0), 300);
        shuttle::check_pct(|| watermark_model(Runtime::Shuttle, 11, 3, 6, 0), 300, 3);
        // 0x5000 / 0x40 = 320 records before the first failure.
        shuttle::check_random(|| failure_model(Runtime::Shuttle, 2, 336), 100);
        shuttle::check_pct(|| failure_model(Runtime::Shuttle, 3, 336), 100, 3);
    }

    #[test]
    fn blocks_spread_over_the_workers_and_each_has_one_owner() {
        for n in [2usize, 3, 4, 7] {
            let mut counts = vec![0usize; n];
            for b in 0..7000u32 {
                let w = worker_for(RelFileId(16384), BlockNumber(b), n);
                assert_eq!(w, worker_for(RelFileId(16384), BlockNumber(b), n));
                counts[w] += 1;
            }
            let fair = 7000 / n;
            for c in counts {
                assert!(c > fair * 8 / 10 && c < fair * 12 / 10, "{n} workers: {c}");
            }
        }
    }
}
