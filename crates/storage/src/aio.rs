//! Reads ahead of sequential heap scans by a pool of I/O worker threads: PostgreSQL 18's
//! `io_method = worker` (`src/backend/storage/aio/method_worker.c`) for the one stream walnut
//! has, a full scan of a heap (`Txn::scan`; PostgreSQL's `read_stream.c` under `heapgettup`).
//!
//! With `io_direct = data` there is no kernel read-ahead: a scan that misses the buffer pool
//! waits for the device at every block. A [`ReadAhead`] keeps up to `effective_io_concurrency`
//! blocks past the scan's current one queued for the `io_workers` threads, each of which pins
//! the block (reading it into a frame, with the checksum check, if it is not cached) and
//! unpins it at once; when the scan reaches the block it finds it cached, or finds its read in
//! progress and waits for it (the frame's `io` lock), exactly as two sessions reading the same
//! page do. A worker's read that fails is dropped: the scan's own pin reads the block again and
//! reports the error where it is handled.
//!
//! Adjacent blocks are read together (PostgreSQL 17's read stream and `io_combine_limit`): a
//! scan queues runs of up to `io_combine_limit` blocks (default 16, 128 kB), and a worker
//! reads a run with one system call into as many frames (`BufferPool::prefetch_run`, which
//! reads only blocks not in the pool, checks each page as a pin does, and never overwrites a
//! valid or dirty frame). A run is queued once its first block is within
//! `effective_io_concurrency` blocks of the scan, so up to `effective_io_concurrency +
//! io_combine_limit` blocks are requested at once.
//!
//! The pool never changes a page and holds a pin only while it loads one, so it adds no crash
//! window and no write. [`IndexReadAhead`] does the same for a B-tree range scan's heap fetches
//! and next leaf.
//!
//! `io_method = io_uring` (PostgreSQL 18's `method_io_uring.c`) serves the same queue with one
//! thread instead of the pool: it takes up to 32 queued runs, claims their frames
//! (`BufferPool::claim_run`), submits all their reads at once through an io_uring instance
//! (`walnut_io::uring`), waits for them and installs the pages (`ClaimedRun::finish`, the
//! same checks as a pin's read). A kernel that refuses `io_uring_setup` fails the start with
//! 0A000 naming the setting.
//!
//! `io_method = sync` (or `effective_io_concurrency = 0`) turns it off: the scan reads each
//! block when it reaches it, as before. So does buffered I/O (no `io_direct = data`), where
//! the kernel reads ahead of a sequential scan itself and the workers only cost time.

use crate::smgr::{Relation, MAX_IO_COMBINE_BLOCKS};
use crate::Storage;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Weak};
use walnut_common::{BlockNumber, Error, Result};

/// `io_method`: how reads ahead are done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoMethod {
    /// A pool of `io_workers` threads reads ahead of sequential scans (the default, as in
    /// PostgreSQL 18).
    Worker,
    /// No read-ahead: every read happens when the reader needs the block.
    Sync,
    /// One thread submits the reads ahead in batches through an io_uring instance
    /// (PostgreSQL 18's `io_method = io_uring`; Linux only).
    IoUring,
}

impl IoMethod {
    /// Parses a value the registry admitted (`worker`, `sync` or `io_uring`).
    pub fn parse(v: &str) -> IoMethod {
        if v.eq_ignore_ascii_case("sync") {
            IoMethod::Sync
        } else if v.eq_ignore_ascii_case("io_uring") {
            IoMethod::IoUring
        } else {
            IoMethod::Worker
        }
    }
}

/// Most requests the io_uring thread takes from the queue for one submission (and the ring's
/// size).
#[cfg(target_os = "linux")]
const URING_BATCH: usize = 32;

/// Most read-ahead requests queued for the I/O workers (or the io_uring thread), from all
/// scans together. A scan that finds the queue full does not wait: it reads those blocks
/// itself when it reaches them.
pub const QUEUE_MAX: usize = 1024;

/// A run of adjacent blocks to read into the buffer pool for a scan.
struct Prefetch {
    rel: Arc<Relation>,
    block: BlockNumber,
    /// Blocks in the run (1 ..= `io_combine_limit`).
    nblocks: u32,
    scan: Arc<ScanState>,
}

/// What a scan and the workers serving it share.
#[derive(Default)]
struct ScanState {
    /// The block the scan reads now: a request at or before it is stale (the scan read the
    /// block itself), and the worker drops it. For a scan in no block order (`unordered`), only
    /// `u32::MAX` means anything: the scan ended, and every request is stale.
    current: AtomicU32,
    /// An index scan's heap and leaf reads, in no block order.
    unordered: bool,
    /// Blocks queued and not yet finished by a worker.
    in_flight: AtomicU32,
}

/// The I/O worker threads and their queue.
pub struct IoWorkers {
    /// Bounded ([`QUEUE_MAX`]): a scan that finds it full reads its blocks itself.
    queue: SyncSender<Prefetch>,
    /// `effective_io_concurrency`: blocks a scan keeps queued ahead of itself (reloadable).
    distance: AtomicU32,
    /// `io_combine_limit`: most blocks one read brings in (reloadable).
    combine: AtomicU32,
    /// `maintenance_io_concurrency`: the distance of maintenance scans (reloadable).
    maintenance_distance: AtomicU32,
}

impl IoWorkers {
    /// Starts `workers` threads (at least one) that prefetch into `st`'s buffer pool, reading
    /// ahead `distance` blocks (`effective_io_concurrency`) in runs of up to `combine` blocks
    /// (`io_combine_limit`, clamped to 1 ..= [`MAX_IO_COMBINE_BLOCKS`]). They end when the
    /// returned pool is dropped (its queue closes) or `st` is gone.
    ///
    /// # Errors
    /// I/O error if a thread cannot be started.
    pub fn start(
        st: Weak<Storage>,
        workers: usize,
        distance: u32,
        combine: u32,
    ) -> Result<IoWorkers> {
        let (tx, rx) = sync_channel::<Prefetch>(QUEUE_MAX);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..workers.max(1) {
            let (st, rx) = (st.clone(), rx.clone());
            std::thread::Builder::new()
                .name(format!("io worker {i}"))
                .spawn(move || worker(&st, &rx))
                .map_err(|e| Error::io("could not start an I/O worker", e))?;
        }
        Ok(IoWorkers::serving(tx, distance, combine))
    }

    /// Sets `effective_io_concurrency` (a reload), blocks.
    pub fn set_distance(&self, distance: u32) {
        self.distance.store(distance, Ordering::Relaxed);
    }

    /// Sets `maintenance_io_concurrency` (a reload), blocks: the distance of
    /// [`ReadAhead::maintenance`] scans.
    pub fn set_maintenance_distance(&self, distance: u32) {
        self.maintenance_distance.store(distance, Ordering::Relaxed);
    }

    /// The pool's state around its queue `tx`: read-ahead distances (`effective_io_concurrency`,
    /// also the maintenance distance until a reload sets it) and `io_combine_limit`, blocks.
    fn serving(tx: SyncSender<Prefetch>, distance: u32, combine: u32) -> IoWorkers {
        let w = IoWorkers {
            queue: tx,
            distance: AtomicU32::new(distance),
            combine: AtomicU32::new(1),
            maintenance_distance: AtomicU32::new(distance),
        };
        w.set_combine(combine);
        w
    }

    /// `io_combine_limit` as now set, blocks (1 ..= [`MAX_IO_COMBINE_BLOCKS`]).
    pub fn combine(&self) -> u32 {
        self.combine.load(Ordering::Relaxed)
    }

    /// Sets `io_combine_limit` (a reload), blocks; clamped to 1 ..=
    /// [`MAX_IO_COMBINE_BLOCKS`]. Scans started later use it.
    pub fn set_combine(&self, combine: u32) {
        let c = combine.clamp(1, MAX_IO_COMBINE_BLOCKS as u32);
        self.combine.store(c, Ordering::Relaxed);
    }
}

#[cfg(target_os = "linux")]
impl IoWorkers {
    /// [`IoWorkers::start`] for `io_method = io_uring`: sets up an io_uring instance and starts
    /// one thread, `io uring`, that takes up to [`URING_BATCH`] queued runs at a time, claims
    /// their frames (`BufferPool::claim_run`), submits all their reads with one
    /// `io_uring_enter`, waits for them and installs the pages (`ClaimedRun::finish`). A
    /// relation file without a descriptor (the in-memory test file systems) is read with
    /// `Smgr::read_blocks` in that thread instead, and so is a run whose read came back short
    /// (only the end of the file does that; the synchronous read zero-fills past it).
    ///
    /// # Errors
    /// 0A000 naming the setting if the kernel refuses `io_uring_setup` (EPERM where it is
    /// disabled, ENOSYS where it does not exist); an I/O error if the thread cannot start.
    pub fn start_uring(st: Weak<Storage>, distance: u32, combine: u32) -> Result<IoWorkers> {
        let ring = walnut_io::uring::ReadRing::new(URING_BATCH as u32).map_err(|e| {
            Error::user(
                walnut_common::SqlState::FEATURE_NOT_SUPPORTED,
                format!("io_method = io_uring is not available: io_uring_setup failed: {e}"),
            )
            .with_detail("Set io_method = worker (the default) to read ahead with I/O threads.")
        })?;
        let (tx, rx) = sync_channel::<Prefetch>(QUEUE_MAX);
        std::thread::Builder::new()
            .name("io uring".into())
            .spawn(move || uring_worker(&st, &rx, ring))
            .map_err(|e| Error::io("could not start the io_uring thread", e))?;
        Ok(IoWorkers::serving(tx, distance, combine))
    }
}

/// The blocks of `p` still worth reading: (first, count), or `None` if the scan has passed
/// them all or ended.
fn live_part(p: &Prefetch) -> Option<(u32, u32)> {
    let last = p.block.0 + (p.nblocks - 1);
    let current = p.scan.current.load(Ordering::Acquire);
    if p.scan.unordered {
        return (current != u32::MAX).then_some((p.block.0, p.nblocks));
    }
    (last > current).then(|| {
        let first = p.block.0.max(current + 1);
        (first, last + 1 - first)
    })
}

#[cfg(target_os = "linux")]
fn uring_worker(st: &Weak<Storage>, rx: &Receiver<Prefetch>, mut ring: walnut_io::uring::ReadRing) {
    use walnut_common::BLCKSZ;
    use walnut_io::uring::ReadReq;
    use walnut_io::AlignedBuf;
    loop {
        let Ok(first) = rx.recv() else {
            return; // the queue closed: the storage is gone
        };
        let mut batch = vec![first];
        while batch.len() < URING_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let Some(st) = st.upgrade() else {
            return;
        };
        let mut runs = Vec::with_capacity(batch.len());
        for (i, p) in batch.iter().enumerate() {
            if let Some((first, n)) = live_part(p) {
                if let Some(run) = st.pool.claim_run(&p.rel, BlockNumber(first), n) {
                    runs.push((i, run));
                }
            }
        }
        let mut bufs: Vec<AlignedBuf> = runs
            .iter()
            .map(|(_, r)| AlignedBuf::zeroed(r.len() * BLCKSZ))
            .collect();
        let mut done: Vec<Option<std::io::Result<usize>>> = runs.iter().map(|_| None).collect();
        {
            let mut reqs = Vec::with_capacity(runs.len());
            let mut which = Vec::with_capacity(runs.len());
            for (k, ((i, run), buf)) in runs.iter().zip(bufs.iter_mut()).enumerate() {
                if let Some(fd) = st.smgr.raw_fd(&batch[*i].rel) {
                    reqs.push(ReadReq {
                        fd,
                        buf: &mut buf.as_mut_slice()[..run.len() * BLCKSZ],
                        offset: run.first().0 as u64 * BLCKSZ as u64,
                    });
                    which.push(k);
                }
            }
            let start = std::time::Instant::now();
            let results = ring.read_all(&mut reqs);
            let blocks: usize = reqs.iter().map(|r| r.buf.len() / BLCKSZ).sum();
            st.smgr
                .stats
                .add_since(crate::stats::IoOp::Read, blocks as u64, start);
            for (k, r) in which.into_iter().zip(results) {
                done[k] = Some(r);
            }
        }
        for (((i, run), buf), r) in runs.into_iter().zip(bufs).zip(done) {
            let rel = &batch[i].rel;
            let start = run.first();
            let want = run.len() * BLCKSZ;
            // The pool's own reads report errors: a read ahead that fails only drops its pages.
            let _ = match r {
                Some(Ok(n)) if n == want => run.finish(|dst| {
                    for (j, d) in dst.iter_mut().enumerate() {
                        d[..BLCKSZ].copy_from_slice(&buf.as_slice()[j * BLCKSZ..(j + 1) * BLCKSZ]);
                    }
                    Ok(())
                }),
                Some(Err(e)) => run.finish(|_| {
                    Err(Error::io(
                        format!(
                            "could not read blocks from {} in file \"base/{}\"",
                            start.0, rel.id.0
                        ),
                        e,
                    ))
                }),
                // Short (the end of the file), or no descriptor: read it here.
                Some(Ok(_)) | None => run.finish(|dst| st.smgr.read_blocks(rel, start, dst)),
            };
        }
        for p in &batch {
            p.scan.in_flight.fetch_sub(p.nblocks, Ordering::AcqRel);
        }
    }
}

fn worker(st: &Weak<Storage>, rx: &Mutex<Receiver<Prefetch>>) {
    loop {
        let Ok(p) = rx.lock().recv() else {
            return; // the queue closed: the storage is gone
        };
        let Some(st) = st.upgrade() else {
            return;
        };
        // Blocks at or before the scan's current one are stale: it read them itself.
        if let Some((first, n)) = live_part(&p) {
            // The scan's own pin reports any error: a prefetch only saves it the wait.
            let _ = st.pool.prefetch_run(&p.rel, BlockNumber(first), n);
        }
        p.scan.in_flight.fetch_sub(p.nblocks, Ordering::AcqRel);
    }
}

/// The read-ahead state of one sequential scan of `rel`'s blocks `0..end`.
pub struct ReadAhead {
    workers: Option<Arc<IoWorkers>>,
    rel: Arc<Relation>,
    /// Next block not yet queued.
    next: u32,
    end: u32,
    /// Blocks ahead of the current one within which a run may start.
    distance: u32,
    /// Blocks per run (`io_combine_limit`, at most `distance`).
    run: u32,
    scan: Arc<ScanState>,
}

impl ReadAhead {
    /// Read-ahead for a scan of `rel`'s blocks `0..end` in order, or none if `io_method =
    /// sync`, `effective_io_concurrency = 0` or the relation files are not O_DIRECT: buffered
    /// reads of a sequential scan are already read ahead by the kernel, and a worker's read
    /// from the page cache only adds a thread hop. The distance is
    /// capped at a quarter of the buffer pool, so that blocks read ahead are not evicted
    /// before the scan reaches them.
    pub fn new(st: &Storage, rel: &Arc<Relation>, end: u32) -> ReadAhead {
        Self::with_distance(st, rel, end, |w| &w.distance)
    }

    /// [`ReadAhead::new`] for a maintenance scan (the heap scan of an index build, PostgreSQL's
    /// `maintenance_io_concurrency` users such as `ANALYZE` and `VACUUM`): its distance is
    /// `maintenance_io_concurrency` instead of `effective_io_concurrency`.
    pub fn maintenance(st: &Storage, rel: &Arc<Relation>, end: u32) -> ReadAhead {
        Self::with_distance(st, rel, end, |w| &w.maintenance_distance)
    }

    fn with_distance(
        st: &Storage,
        rel: &Arc<Relation>,
        end: u32,
        setting: fn(&IoWorkers) -> &AtomicU32,
    ) -> ReadAhead {
        let workers = st.io_workers().filter(|_| st.smgr.direct_io()).cloned();
        let cap = (st.pool.len() / 4) as u32;
        let distance = workers
            .as_ref()
            .map_or(0, |w| setting(w).load(Ordering::Relaxed).min(cap));
        let run = workers
            .as_ref()
            .map_or(1, |w| w.combine.load(Ordering::Relaxed))
            .clamp(1, distance.max(1));
        ReadAhead {
            workers: workers.filter(|_| distance > 0),
            rel: rel.clone(),
            next: 1,
            end,
            distance,
            run,
            scan: Arc::new(ScanState::default()),
        }
    }

    /// Called before the scan reads block `current`: queues the runs not queued yet whose
    /// first block is at most `current + distance`, each of `io_combine_limit` blocks (fewer
    /// only at the relation's end), while fewer than `distance + io_combine_limit` blocks are
    /// in flight (so the queue never grows beyond what the workers keep up with).
    pub fn before(&mut self, current: u32) {
        let Some(w) = &self.workers else {
            return;
        };
        self.scan.current.store(current, Ordering::Release);
        self.next = self.next.max(current + 1);
        let horizon = self.end.min(current.saturating_add(1 + self.distance));
        while self.next < horizon
            && self.scan.in_flight.load(Ordering::Acquire) < self.distance + self.run
        {
            let n = self.run.min(self.end - self.next);
            let p = Prefetch {
                rel: self.rel.clone(),
                block: BlockNumber(self.next),
                nblocks: n,
                scan: self.scan.clone(),
            };
            self.scan.in_flight.fetch_add(n, Ordering::AcqRel);
            match w.queue.try_send(p) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    // The workers are behind: read these blocks when the scan reaches them.
                    self.scan.in_flight.fetch_sub(n, Ordering::AcqRel);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.workers = None;
                    return;
                }
            }
            self.next += n;
        }
    }
}

impl Drop for ReadAhead {
    /// Marks every request of this scan stale: the workers drop what is still queued.
    fn drop(&mut self) {
        self.scan.current.store(u32::MAX, Ordering::Release);
    }
}

/// Read-ahead of one B-tree range scan (`btree::range`) over O_DIRECT data files: when the
/// scan has collected a leaf's entries, the heap blocks their TIDs point at are queued to the
/// I/O workers in the order the scan will fetch them, up to `effective_io_concurrency`
/// distinct blocks ahead of the entry being visited, and the next leaf (the right link) when
/// the scan will go on to it. PostgreSQL 18 reads ahead only of bitmap heap scans; this is
/// the read stream of its index-prefetching work for plain index scans, on the same
/// machinery as [`ReadAhead`]: the workers pin and drop, so a fetch finds the page cached or
/// waits for the read in progress. Off, as for [`ReadAhead`], with `io_method = sync`,
/// `effective_io_concurrency = 0` or buffered data files.
pub struct IndexReadAhead {
    workers: Option<Arc<IoWorkers>>,
    heap: Option<Arc<Relation>>,
    /// Most blocks in flight, and most distinct heap blocks queued ahead of the visit.
    distance: u32,
    /// The current leaf's heap blocks in visit order, one per entry.
    blocks: Vec<u32>,
    /// Entries of `blocks` whose block is queued (or needs no read: the same as the one before).
    queued: usize,
    scan: Arc<ScanState>,
}

impl IndexReadAhead {
    /// Read-ahead for a range scan whose TIDs point into the relation `heap` returns (called
    /// only if read-ahead is on; `None` if the index's heap is not known: then only leaves are
    /// read ahead), or none at all if read-ahead is off. Cheap when off: no allocation.
    pub fn new(st: &Storage, heap: impl FnOnce() -> Option<Arc<Relation>>) -> IndexReadAhead {
        let workers = st.io_workers().filter(|_| st.smgr.direct_io()).cloned();
        let cap = (st.pool.len() / 4) as u32;
        let distance = workers
            .as_ref()
            .map_or(0, |w| w.distance.load(Ordering::Relaxed).min(cap));
        let workers = workers.filter(|_| distance > 0);
        IndexReadAhead {
            heap: workers.as_ref().and_then(|_| heap()),
            workers,
            distance,
            blocks: Vec::new(),
            queued: 0,
            scan: Arc::new(ScanState {
                unordered: true,
                ..ScanState::default()
            }),
        }
    }

    /// True if it reads anything ahead.
    pub fn active(&self) -> bool {
        self.workers.is_some()
    }

    /// A leaf's entries were collected: `heap_blocks` are their TIDs' blocks in visit order;
    /// `next_leaf` is the leaf the scan goes on to after them, if it does. Queues the next
    /// leaf at once (its read overlaps the heap fetches of this one) and the first heap blocks.
    pub fn leaf(
        &mut self,
        index: Option<Arc<Relation>>,
        heap_blocks: impl Iterator<Item = u32>,
        next_leaf: Option<BlockNumber>,
    ) {
        if self.workers.is_none() {
            return;
        }
        self.blocks.clear();
        self.blocks.extend(heap_blocks);
        self.queued = 0;
        if let (Some(index), Some(b)) = (index, next_leaf) {
            self.send(index, b.0);
        }
        self.before(0);
    }

    /// Called before the scan fetches the heap tuple of entry `i` of the current leaf: queues
    /// the blocks of the entries after it until `distance` distinct blocks past entry `i` are
    /// queued or `distance` blocks are in flight. Entry `i`'s own block is the scan's to read.
    pub fn before(&mut self, i: usize) {
        let Some(heap) = self.heap.clone() else {
            return;
        };
        if self.workers.is_none() {
            return;
        }
        if i >= self.blocks.len() {
            return;
        }
        self.queued = self.queued.max(i + 1);
        let mut ahead = block_runs(&self.blocks[i..self.queued]) - 1;
        while self.queued < self.blocks.len()
            && ahead < self.distance
            && self.scan.in_flight.load(Ordering::Acquire) < self.distance
        {
            let b = self.blocks[self.queued];
            // One request per run of entries on one block (a leaf's TIDs often cluster).
            if self.blocks[self.queued - 1] != b && self.blocks[i] != b {
                self.send(heap.clone(), b);
                ahead += 1;
            }
            self.queued += 1;
        }
    }

    fn send(&mut self, rel: Arc<Relation>, block: u32) {
        let Some(w) = &self.workers else {
            return;
        };
        let p = Prefetch {
            rel,
            block: BlockNumber(block),
            nblocks: 1,
            scan: self.scan.clone(),
        };
        self.scan.in_flight.fetch_add(1, Ordering::AcqRel);
        match w.queue.try_send(p) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                // The workers are behind: the scan reads this block itself.
                self.scan.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
            Err(TrySendError::Disconnected(_)) => self.workers = None,
        }
    }
}

/// Read-ahead of blocks in no order, one at a time, over O_DIRECT data files: recovery
/// prefetch's (`recovery::prefetch`, `recovery_prefetch`) for blocks that redo will read
/// soon. Each block goes to the I/O workers, which read it into the buffer pool and leave it
/// unpinned, so the redo that pins it finds it cached or waits for the read in progress.
/// Dropping it marks what is still queued stale.
pub struct BlockReadAhead {
    workers: Arc<IoWorkers>,
    scan: Arc<ScanState>,
}

impl BlockReadAhead {
    /// Read-ahead through `st`'s I/O workers, or `None` if there are none (`io_method = sync`,
    /// or before they start: crash recovery runs first) or the data files are buffered
    /// (where `posix_fadvise` does the job without a thread hop).
    pub fn new(st: &Storage) -> Option<BlockReadAhead> {
        let workers = st.io_workers().filter(|_| st.smgr.direct_io())?.clone();
        Some(BlockReadAhead {
            workers,
            scan: Arc::new(ScanState {
                unordered: true,
                ..Default::default()
            }),
        })
    }

    /// Queues block `block` of `rel`; false if the queue is full (or closed): the block is
    /// then read by redo when it needs it.
    pub fn send(&self, rel: Arc<Relation>, block: BlockNumber) -> bool {
        let p = Prefetch {
            rel,
            block,
            nblocks: 1,
            scan: self.scan.clone(),
        };
        self.scan.in_flight.fetch_add(1, Ordering::AcqRel);
        if self.workers.queue.try_send(p).is_ok() {
            return true;
        }
        self.scan.in_flight.fetch_sub(1, Ordering::AcqRel);
        false
    }

    /// Blocks queued and not yet read.
    pub fn in_flight(&self) -> u32 {
        self.scan.in_flight.load(Ordering::Acquire)
    }
}

impl Drop for BlockReadAhead {
    fn drop(&mut self) {
        self.scan.current.store(u32::MAX, Ordering::Release);
    }
}

/// Runs of equal adjacent blocks in `blocks` (the distinct blocks a scan in that order reads).
fn block_runs(blocks: &[u32]) -> u32 {
    let changes = blocks.windows(2).filter(|w| w[0] != w[1]).count();
    (changes + usize::from(!blocks.is_empty())) as u32
}

impl Drop for IndexReadAhead {
    /// Marks every request of this scan stale: the workers drop what is still queued.
    fn drop(&mut self) {
        self.scan.current.store(u32::MAX, Ordering::Release);
    }
}
