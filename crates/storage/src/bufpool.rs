//! The buffer pool: `shared_buffers` frames of one page each, with pins, content latches and
//! clock-sweep eviction (after PostgreSQL's `src/backend/storage/buffer/bufmgr.c` and
//! `freelist.c`).
//!
//! Rules (see DESIGN.md, "Buffer pool"):
//! - A frame's page may be read or written only while the frame is **pinned**; a pinned frame is
//!   never evicted.
//! - Page bytes are read under the shared **content latch** and changed under the exclusive one.
//! - The **WAL rule**: a dirty page is written out only after WAL is flushed up to its page LSN.
//! - The page table maps (relation, block) to a frame; it is sharded, and a frame is pinned only
//!   while its shard is locked, so eviction (which claims a frame with a 0 -> 1 pin transition
//!   under the same shard lock) can never race with a new pin.

use crate::page::{self, PageBuf};
use crate::smgr::{Relation, Smgr};
use crate::stats::IoOp;
use crate::writeback;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use walnut_common::{BlockNumber, Error, ErrorKind, Lsn, RelFileId, Result, SqlState};
use walnut_wal::Wal;

const SHARDS: usize = 64;
const NO_TAG: u64 = u64::MAX;
const USAGE_MAX: u8 = 5;

/// A hash of a page's (relation file, block): spreads neighbouring blocks, for the buffer
/// mapping's shards and recovery prefetch's cached-block filter.
pub(crate) fn tag_hash(rel: RelFileId, block: BlockNumber) -> usize {
    (rel.0 as usize).wrapping_mul(0x9E37_79B9) ^ (block.0 as usize).wrapping_mul(0x85EB_CA6B)
}

/// Identifies a page: relation file and block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufTag {
    /// Relation file.
    pub rel: RelFileId,
    /// Block within it.
    pub block: BlockNumber,
}

impl BufTag {
    fn pack(self) -> u64 {
        (self.rel.0 as u64) << 32 | self.block.0 as u64
    }
    fn unpack(v: u64) -> Option<BufTag> {
        (v != NO_TAG).then(|| BufTag {
            rel: RelFileId((v >> 32) as u32),
            block: BlockNumber(v as u32),
        })
    }
}

struct Frame {
    tag: AtomicU64,
    valid: AtomicBool,
    dirty: AtomicBool,
    /// A write-out of this frame took its copy and has not finished: the page on disk is not
    /// yet what `dirty == false` promises. Set before `dirty` is cleared, cleared after the
    /// write (PostgreSQL's `BM_IO_IN_PROGRESS`).
    write_pending: AtomicBool,
    pins: AtomicU32,
    usage: AtomicU8,
    /// The oldest xid that stamped a version's `xmax` on this heap page since it was last
    /// pruned, or 0 for none: a hint that pruning may remove something once that xid has
    /// ended (PostgreSQL's `pd_prune_xid`, kept with the frame instead of in the page, so it
    /// starts at 0 whenever the page is read in). Written under the exclusive latch.
    prune_xid: AtomicU64,
    io: Mutex<()>,
    page: RwLock<FramePage>,
}

/// All zeros: what a frame whose page memory was never allocated reads as.
static ZERO_PAGE: PageBuf = [0; walnut_common::BLCKSZ];

/// A frame's page memory, allocated on the frame's first write (its first page load), so that
/// a large pool starts at once and takes memory as it fills, as PostgreSQL's untouched shared
/// memory does: allocating every frame's 8 kB up front cost walnut 2.1 s of start-up at
/// `shared_buffers = 3GB`. Reads of a never-written frame see [`ZERO_PAGE`].
pub struct FramePage(Option<Box<PageBuf>>);

impl std::ops::Deref for FramePage {
    type Target = PageBuf;
    fn deref(&self) -> &PageBuf {
        self.0.as_deref().unwrap_or(&ZERO_PAGE)
    }
}

impl std::ops::DerefMut for FramePage {
    fn deref_mut(&mut self) -> &mut PageBuf {
        self.0.get_or_insert_with(page::zeroed)
    }
}

/// How to obtain a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Read it from disk (validating the checksum) unless cached.
    Normal,
    /// The caller will initialize it: do not read, start from zeros (a newly allocated block,
    /// or redo of a record with a full-page image or `will_init`).
    Zero,
}

/// The buffer pool.
pub struct BufferPool {
    frames: Vec<Frame>,
    shards: Vec<Mutex<HashMap<BufTag, usize>>>,
    clock: AtomicUsize,
    smgr: Arc<Smgr>,
    wal: OnceLock<Arc<Wal>>,
    /// Frames claimed by read-ahead runs not yet finished ([`BufferPool::claim_run`]): at most
    /// a quarter of the pool, so that reads ahead of several scans never pin every frame and
    /// make a session's own pin fail (PostgreSQL's `LimitAdditionalPins`).
    prefetch_claimed: AtomicUsize,
}

/// A ring of frames for one thread's misses ([`BufferPool::use_ring`]).
/// The pool it belongs to is in `RING_POOL`: its frame numbers mean nothing in another.
struct Ring {
    /// Frame numbers, filled as the ring is first used; a slot's frame may have been taken by
    /// anyone since, which is checked before it is reused.
    frames: Vec<Option<usize>>,
    /// The next slot to use.
    next: usize,
}

thread_local! {
    /// This thread's ring, while a bulk operation runs ([`BufferPool::use_ring`]).
    static RING: std::cell::RefCell<Option<Ring>> = const { std::cell::RefCell::new(None) };
    /// The address of the pool `RING` belongs to, 0 for none: one cheap load on a hit's path.
    static RING_POOL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Installs a ring for the thread's misses in one pool; dropping it puts back the ring (or
/// none) that was there before. It borrows the pool and stays on its thread.
#[must_use = "the ring is used only while the guard lives"]
pub struct RingGuard<'a> {
    previous: Option<Ring>,
    previous_pool: usize,
    /// Borrows the pool, and is neither `Send` nor `Sync`.
    _pool: std::marker::PhantomData<(&'a BufferPool, *const ())>,
}

impl Drop for RingGuard<'_> {
    fn drop(&mut self) {
        let previous = self.previous.take();
        RING.with(|r| *r.borrow_mut() = previous);
        RING_POOL.set(self.previous_pool);
    }
}

/// A pinned page. Unpins on drop.
pub struct Pinned<'a> {
    pool: &'a BufferPool,
    idx: usize,
    /// The page's identity.
    pub tag: BufTag,
}

impl Pinned<'_> {
    /// Takes the shared content latch.
    pub fn read(&self) -> RwLockReadGuard<'_, FramePage> {
        self.pool.frames[self.idx].page.read()
    }

    /// Takes the exclusive content latch.
    pub fn write(&self) -> RwLockWriteGuard<'_, FramePage> {
        self.pool.frames[self.idx].page.write()
    }

    /// Takes the exclusive content latch if no one holds the latch now (PostgreSQL's
    /// `ConditionalLockBuffer`); `None` otherwise.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, FramePage>> {
        self.pool.frames[self.idx].page.try_write()
    }

    /// The page's prune hint: the oldest xid that stamped an `xmax` on it since it was last
    /// pruned (or read in), 0 for none (DESIGN.md, "Pruning", "On a read").
    pub fn prune_xid(&self) -> u64 {
        self.pool.frames[self.idx].prune_xid.load(Ordering::Acquire)
    }

    /// Sets the page's prune hint to `xid` (0 clears it). Call while holding the exclusive
    /// latch.
    pub fn set_prune_xid(&self, xid: u64) {
        self.pool.frames[self.idx]
            .prune_xid
            .store(xid, Ordering::Release);
    }

    /// Marks the page dirty. Call while holding the exclusive latch, after the change.
    pub fn mark_dirty(&self) {
        let dirty = &self.pool.frames[self.idx].dirty;
        crate::vacuum::charge_dirty(dirty);
        dirty.store(true, Ordering::Release);
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        let prev = self.pool.frames[self.idx]
            .pins
            .fetch_sub(1, Ordering::AcqRel);
        assert!(prev > 0, "unpinned a buffer that was not pinned");
    }
}

/// Frames claimed for a run of blocks being read ahead ([`BufferPool::claim_run`]): mapped,
/// not valid, their `io` locks held and one pin each, until [`ClaimedRun::finish`]. Dropping
/// it unfinished (a panic) would leave them so: always finish it.
pub struct ClaimedRun<'a> {
    pool: &'a BufferPool,
    rel: RelFileId,
    start: u32,
    claimed: Vec<(usize, parking_lot::MutexGuard<'a, ()>)>,
}

impl ClaimedRun<'_> {
    /// The run's first block.
    pub fn first(&self) -> BlockNumber {
        BlockNumber(self.start)
    }

    /// Blocks in the run (at least one).
    pub fn len(&self) -> usize {
        self.claimed.len()
    }

    /// Always false: a run holds at least one block.
    pub fn is_empty(&self) -> bool {
        self.claimed.is_empty()
    }

    /// Fills the frames with `fill` (one [`BLCKSZ`] buffer per block, in block order), checks
    /// each page (checksum and header, as [`BufferPool::pin`] does), makes the good ones valid
    /// and drops the others (and all of them if `fill` fails) from the pool, releasing locks
    /// and pins. Returns the number of pages installed.
    ///
    /// # Errors
    /// `fill`'s error.
    pub fn finish(self, fill: impl FnOnce(&mut [&mut [u8]]) -> Result<()>) -> Result<usize> {
        let pool = self.pool;
        let mut pages: Vec<_> = self
            .claimed
            .iter()
            .map(|&(v, _)| pool.frames[v].page.write())
            .collect();
        let read = {
            let mut bufs: Vec<&mut [u8]> = pages.iter_mut().map(|p| &mut p[..]).collect();
            fill(&mut bufs)
        };
        let mut loaded = 0;
        for (k, ((v, io), page)) in self.claimed.into_iter().zip(pages).enumerate() {
            let f = &pool.frames[v];
            let ok = read.is_ok() && page::check(&page).is_ok();
            drop(page);
            if ok {
                f.usage.store(1, Ordering::Relaxed);
                f.valid.store(true, Ordering::Release);
                loaded += 1;
            } else {
                let tag = BufTag {
                    rel: self.rel,
                    block: BlockNumber(self.start + k as u32),
                };
                let mut map = pool.shard(tag).lock();
                map.remove(&tag);
                f.tag.store(NO_TAG, Ordering::Release);
                drop(map);
            }
            drop(io);
            f.pins.fetch_sub(1, Ordering::AcqRel);
            pool.prefetch_claimed.fetch_sub(1, Ordering::AcqRel);
        }
        read.map(|()| loaded)
    }
}

impl BufferPool {
    /// A pool of `nframes` frames (`shared_buffers` in pages, at least 16).
    pub fn new(nframes: usize, smgr: Arc<Smgr>) -> BufferPool {
        let nframes = nframes.max(16);
        let frames = (0..nframes)
            .map(|_| Frame {
                tag: AtomicU64::new(NO_TAG),
                valid: AtomicBool::new(false),
                dirty: AtomicBool::new(false),
                write_pending: AtomicBool::new(false),
                pins: AtomicU32::new(0),
                usage: AtomicU8::new(0),
                prune_xid: AtomicU64::new(0),
                io: Mutex::new(()),
                page: RwLock::new(FramePage(None)),
            })
            .collect();
        BufferPool {
            frames,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            clock: AtomicUsize::new(0),
            smgr,
            wal: OnceLock::new(),
            prefetch_claimed: AtomicUsize::new(0),
        }
    }

    /// Attaches the WAL once recovery has ended; from then on write-outs obey the WAL rule.
    /// (During redo every record being replayed is already durable.)
    pub fn attach_wal(&self, wal: Arc<Wal>) {
        let _ = self.wal.set(wal);
    }

    /// The storage manager under the pool.
    pub fn smgr(&self) -> &Arc<Smgr> {
        &self.smgr
    }

    fn shard(&self, tag: BufTag) -> &Mutex<HashMap<BufTag, usize>> {
        &self.shards[tag_hash(tag.rel, tag.block) % SHARDS]
    }

    /// Whether the pool holds (or is reading) `block` of `rel` now: one look at the buffer
    /// mapping, for recovery prefetch to skip cached blocks (PostgreSQL's
    /// `PrefetchSharedBuffer` finding the buffer in the mapping table). Stale at once.
    pub fn contains(&self, rel: RelFileId, block: BlockNumber) -> bool {
        let tag = BufTag { rel, block };
        self.shard(tag).lock().contains_key(&tag)
    }

    /// Pins page `block` of `rel`, reading it if needed.
    ///
    /// # Errors
    /// I/O errors; a corruption error if the page fails its checksum; 53400-like resource error
    /// if every frame is pinned.
    pub fn pin(&self, rel: &Relation, block: BlockNumber, mode: ReadMode) -> Result<Pinned<'_>> {
        let tag = BufTag { rel: rel.id, block };
        loop {
            {
                let map = self.shard(tag).lock();
                if let Some(&i) = map.get(&tag) {
                    let f = &self.frames[i];
                    f.pins.fetch_add(1, Ordering::AcqRel);
                    drop(map);
                    self.smgr.stats.add_hit();
                    crate::vacuum::charge_hit();
                    // A thread with a ring raises a count only from 0 (PostgreSQL's
                    // `PinBuffer` with a strategy): its one pass makes no page hot, and a
                    // page it meets twice stays reusable by its ring.
                    let usage = f.usage.load(Ordering::Relaxed);
                    if usage < USAGE_MAX
                        && (usage == 0 || RING_POOL.get() != self as *const BufferPool as usize)
                    {
                        f.usage.fetch_add(1, Ordering::Relaxed);
                    }
                    let pinned = Pinned {
                        pool: self,
                        idx: i,
                        tag,
                    };
                    if !f.valid.load(Ordering::Acquire) {
                        // Someone is loading it: wait for their I/O to end.
                        drop(f.io.lock());
                        if !f.valid.load(Ordering::Acquire) {
                            drop(pinned);
                            continue;
                        }
                    }
                    return Ok(pinned);
                }
            }
            let v = self.victim()?;
            self.smgr
                .stats
                .buffers_alloc
                .fetch_add(1, Ordering::Relaxed);
            let f = &self.frames[v];
            let Some(io) = self.map_victim(v, tag) else {
                continue;
            };
            let loaded = {
                let mut page = f.page.write();
                match mode {
                    ReadMode::Zero => {
                        page.fill(0);
                        Ok(())
                    }
                    ReadMode::Normal => self.smgr.read(rel, block, &mut page[..]).and_then(|()| {
                        page::check(&page).map_err(|e| {
                            Error::corruption(format!(
                                "invalid page in block {} of relation base/{}: {}",
                                block.0, rel.id.0, e.message
                            ))
                        })
                    }),
                }
            };
            match loaded {
                Ok(()) => {
                    if mode == ReadMode::Normal {
                        crate::vacuum::charge_miss();
                    }
                    f.usage.store(1, Ordering::Relaxed);
                    f.valid.store(true, Ordering::Release);
                    drop(io);
                    return Ok(Pinned {
                        pool: self,
                        idx: v,
                        tag,
                    });
                }
                Err(e) => {
                    let mut map = self.shard(tag).lock();
                    map.remove(&tag);
                    f.tag.store(NO_TAG, Ordering::Release);
                    drop(map);
                    drop(io);
                    f.pins.fetch_sub(1, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
    }

    /// Reads blocks `first .. first + nblocks` of `rel` into the pool with one combined read
    /// ([`Smgr::read_blocks`]) and leaves them unpinned, for read-ahead (PostgreSQL 17's
    /// `StartReadBuffers`/`WaitReadBuffers` of a read stream, up to `io_combine_limit` blocks).
    /// Only blocks that are not in the pool are read: blocks at the start of the range that
    /// are cached are skipped, and the run read ends before the next cached block, so a frame
    /// that holds a valid or dirty page (or one being read) is never overwritten. Each block
    /// gets a frame of its own, mapped before the read with its `io` lock held, so a session
    /// that pins one meanwhile waits for the read as for any read in progress; each page is
    /// checked (checksum and header) as [`BufferPool::pin`] checks it, and one that fails is
    /// dropped from the pool, to be read (and reported) again by the pin that needs it.
    /// Returns the number of blocks read (0 if the first uncached block could get no frame).
    ///
    /// # Errors
    /// The read's I/O error (every block of the run is then dropped from the pool again).
    ///
    /// # Panics
    /// If `nblocks` exceeds [`crate::smgr::MAX_IO_COMBINE_BLOCKS`].
    pub fn prefetch_run(&self, rel: &Relation, first: BlockNumber, nblocks: u32) -> Result<usize> {
        let Some(run) = self.claim_run(rel, first, nblocks) else {
            return Ok(0);
        };
        let start = run.first();
        run.finish(|bufs| self.smgr.read_blocks(rel, start, bufs))
    }

    /// The first half of [`BufferPool::prefetch_run`]: claims a frame for each block of the
    /// run that will be read (mapped, its `io` lock held, not valid yet), or `None` if there
    /// is none to read. The caller reads the blocks and calls [`ClaimedRun::finish`]; until
    /// then, a session pinning one of the blocks waits. The run is cut short where read-ahead
    /// would hold more than a quarter of the pool's frames, or no frame is free. `io_method = io_uring` claims several
    /// runs, reads them all with one submission, then finishes each.
    ///
    /// # Panics
    /// If `nblocks` exceeds [`crate::smgr::MAX_IO_COMBINE_BLOCKS`].
    pub fn claim_run(
        &self,
        rel: &Relation,
        first: BlockNumber,
        nblocks: u32,
    ) -> Option<ClaimedRun<'_>> {
        assert!(
            nblocks as usize <= crate::smgr::MAX_IO_COMBINE_BLOCKS,
            "prefetch run of {nblocks} blocks"
        );
        let end = first.0.saturating_add(nblocks);
        let mut start = first.0;
        // Frames claimed for blocks start, start + 1, ...: (frame, its io lock).
        let mut claimed: Vec<(usize, parking_lot::MutexGuard<'_, ()>)> = Vec::new();
        for b in first.0..end {
            let tag = BufTag {
                rel: rel.id,
                block: BlockNumber(b),
            };
            if self.shard(tag).lock().contains_key(&tag) {
                if claimed.is_empty() {
                    start = b + 1;
                    continue;
                }
                break;
            }
            if self.prefetch_claimed.fetch_add(1, Ordering::AcqRel) >= self.frames.len() / 4 {
                self.prefetch_claimed.fetch_sub(1, Ordering::AcqRel);
                break; // read-ahead holds its share of the pool: read what we have
            }
            let Ok(v) = self.find_victim() else {
                self.prefetch_claimed.fetch_sub(1, Ordering::AcqRel);
                break; // every frame pinned: read what we have
            };
            self.smgr
                .stats
                .buffers_alloc
                .fetch_add(1, Ordering::Relaxed);
            let Some(io) = self.map_victim(v, tag) else {
                self.prefetch_claimed.fetch_sub(1, Ordering::AcqRel);
                break;
            };
            claimed.push((v, io));
        }
        (!claimed.is_empty()).then_some(ClaimedRun {
            pool: self,
            rel: rel.id,
            start,
            claimed,
        })
    }

    /// Maps victim frame `v` (pinned once, unmapped: [`BufferPool::find_victim`]) to `tag`,
    /// invalid, and returns its `io` lock held, for the caller to load the page and mark it
    /// valid. `None` if another thread mapped `tag` meanwhile: the victim's pin is dropped
    /// and the frame goes back to the clock.
    fn map_victim(&self, v: usize, tag: BufTag) -> Option<parking_lot::MutexGuard<'_, ()>> {
        let f = &self.frames[v];
        let mut map = self.shard(tag).lock();
        if map.contains_key(&tag) {
            drop(map);
            f.pins.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let io = f.io.lock();
        f.valid.store(false, Ordering::Release);
        f.prune_xid.store(0, Ordering::Relaxed);
        f.tag.store(tag.pack(), Ordering::Release);
        map.insert(tag, v);
        Some(io)
    }

    /// A frame for a miss of this thread: from its ring if a bulk operation of this pool
    /// installed one ([`BufferPool::use_ring`]), else by clock sweep.
    fn victim(&self) -> Result<usize> {
        if RING_POOL.get() != self as *const BufferPool as usize {
            return self.find_victim();
        }
        let ring = RING.with(|r| r.borrow_mut().take());
        match ring {
            Some(mut ring) => {
                let v = self.ring_victim(&mut ring);
                RING.with(|r| *r.borrow_mut() = Some(ring));
                v
            }
            None => self.find_victim(),
        }
    }

    /// The ring's next frame, if nobody else has pinned or used it since this thread did
    /// (unpinned, usage count at most 1: PostgreSQL's `GetBufferFromRing`); else a frame by
    /// clock sweep, which takes that slot of the ring (`AddBufferToRing`). A dirty ring frame
    /// is written out first (obeying the WAL rule), by this thread.
    fn ring_victim(&self, ring: &mut Ring) -> Result<usize> {
        let slot = ring.next;
        ring.next = (ring.next + 1) % ring.frames.len();
        if let Some(i) = ring.frames[slot].filter(|&i| i < self.frames.len()) {
            let f = &self.frames[i];
            if f.pins.load(Ordering::Acquire) == 0 && f.usage.load(Ordering::Relaxed) <= 1 {
                if let Some(v) = self.claim(i)? {
                    return Ok(v);
                }
            }
        }
        let v = self.find_victim()?;
        ring.frames[slot] = Some(v);
        Ok(v)
    }

    /// Finds a frame by clock sweep, writes it out if dirty, unmaps it, and returns it pinned
    /// once (pins == 1) and unmapped.
    fn find_victim(&self) -> Result<usize> {
        let n = self.frames.len();
        for _ in 0..n * (USAGE_MAX as usize + 2) {
            let i = self.clock.fetch_add(1, Ordering::Relaxed) % n;
            let f = &self.frames[i];
            if f.pins.load(Ordering::Acquire) > 0 {
                continue;
            }
            if f.usage.load(Ordering::Relaxed) > 0 {
                f.usage.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            if let Some(v) = self.claim(i)? {
                return Ok(v);
            }
        }
        Err(Error::new(
            ErrorKind::Resource,
            SqlState::CONFIGURATION_LIMIT_EXCEEDED,
            "no unpinned buffers available",
        ))
    }

    /// Claims unpinned frame `i` as a victim: pins it (0 -> 1 under its shard's lock), writes
    /// it out if dirty, and unmaps it. `None` if it was pinned, remapped or dirtied meanwhile.
    ///
    /// # Errors
    /// The write-out's (the frame is left as it was).
    fn claim(&self, i: usize) -> Result<Option<usize>> {
        let f = &self.frames[i];
        let Some(tag) = BufTag::unpack(f.tag.load(Ordering::Acquire)) else {
            if f.pins
                .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                if f.tag.load(Ordering::Acquire) == NO_TAG {
                    return Ok(Some(i));
                }
                f.pins.fetch_sub(1, Ordering::AcqRel);
            }
            return Ok(None);
        };
        {
            let map = self.shard(tag).lock();
            if map.get(&tag) != Some(&i)
                || f.pins
                    .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
                    .is_err()
            {
                return Ok(None);
            }
        }
        if f.dirty.load(Ordering::Acquire) {
            match self.write_frame(i, tag) {
                Ok(true) => writeback::backend_wrote(&self.smgr, tag),
                Ok(false) => {}
                Err(e) => {
                    f.pins.fetch_sub(1, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
        let mut map = self.shard(tag).lock();
        if f.dirty.load(Ordering::Acquire) || f.pins.load(Ordering::Acquire) != 1 {
            drop(map);
            f.pins.fetch_sub(1, Ordering::AcqRel);
            return Ok(None);
        }
        map.remove(&tag);
        f.tag.store(NO_TAG, Ordering::Release);
        f.valid.store(false, Ordering::Release);
        drop(map);
        self.smgr.stats.add(IoOp::Eviction, 1, 0);
        Ok(Some(i))
    }

    /// Makes this thread's misses in this pool take their frames from a ring of `frames`
    /// frames (at least 16, at most an eighth of the pool) until the guard is dropped, so that
    /// one pass of a bulk operation over a large relation reuses a few frames instead of
    /// pushing every other page out of the pool. Pages already in the pool are used where
    /// they are. This is PostgreSQL's buffer access strategy (`freelist.c`,
    /// `GetAccessStrategyWithSize`), which VACUUM uses with `vacuum_buffer_usage_limit`.
    pub fn use_ring(&self, frames: usize) -> RingGuard<'_> {
        let me = self as *const BufferPool as usize;
        let n = frames.max(16).min((self.frames.len() / 8).max(1));
        let ring = Ring {
            frames: vec![None; n],
            next: 0,
        };
        RingGuard {
            previous: RING.with(|r| r.borrow_mut().replace(ring)),
            previous_pool: RING_POOL.replace(me),
            _pool: std::marker::PhantomData,
        }
    }

    /// Writes frame `i` (pinned by the caller) out, obeying the WAL rule. One write-out of a
    /// frame at a time (its `io` lock): a checkpoint that finds a write-out in progress waits
    /// for it, so it never counts as written a page that is not yet in the file (a crash after
    /// the checkpoint could otherwise lose the page, whose WAL is before the redo point). A
    /// page changed while it is being written stays dirty. Returns whether this call wrote the
    /// page (false: it was clean by the time the write-out lock was ours).
    fn write_frame(&self, i: usize, tag: BufTag) -> Result<bool> {
        let f = &self.frames[i];
        let _io = f.io.lock();
        let mut copy: Box<PageBuf> = page::zeroed();
        {
            let page = f.page.read();
            if !f.dirty.load(Ordering::SeqCst) {
                return Ok(false); // written meanwhile by someone else
            }
            f.write_pending.store(true, Ordering::SeqCst);
            f.dirty.store(false, Ordering::SeqCst);
            copy.copy_from_slice(&page[..]);
        }
        let r = self.write_copy(tag, &mut copy);
        if r.is_err() {
            f.dirty.store(true, Ordering::SeqCst);
        }
        f.write_pending.store(false, Ordering::SeqCst);
        r.map(|()| true)
    }

    /// The WAL rule, the checksum and the write of a frame's copy.
    fn write_copy(&self, tag: BufTag, copy: &mut PageBuf) -> Result<()> {
        let lsn = page::lsn(copy);
        match self.before_write(tag.rel, lsn, [&mut *copy])? {
            Some(rel) => self.smgr.write(&rel, tag.block, &copy[..]),
            None => Ok(()),
        }
    }

    /// What precedes writing copies of pages of `rel`: the WAL rule (the WAL flushed past
    /// `lsn`, the highest page LSN among them), each copy's checksum, and the relation's file.
    /// `None` if the relation was dropped (its buffers are discarded lazily when they were
    /// pinned at the time): the pages are garbage, not a failure.
    ///
    /// # Errors
    /// The WAL flush's I/O errors; the open's, for a relation that still exists.
    fn before_write<'p>(
        &self,
        rel: RelFileId,
        lsn: Lsn,
        copies: impl IntoIterator<Item = &'p mut PageBuf>,
    ) -> Result<Option<Arc<Relation>>> {
        if let Some(wal) = self.wal.get() {
            if lsn > wal.flush_lsn() {
                wal.flush(lsn)?;
            }
        }
        for c in copies {
            page::set_checksum(c);
        }
        match self.smgr.open(rel) {
            Ok(r) => Ok(Some(r)),
            Err(_) if !self.smgr.exists(rel) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The frames whose pages must be written for a checkpoint whose redo point is already
    /// fixed: every frame dirty now, or with a write-out in progress (which must end before
    /// the page counts as written), sorted by relation file and block so that the writes go
    /// out in file order and adjacent blocks can be combined (PostgreSQL's `BufferSync`, which
    /// sorts by `CkptSortItem`). A page dirtied after this call has its changes after the redo
    /// point and need not be written.
    pub fn checkpoint_snapshot(&self) -> Vec<(usize, BufTag)> {
        let mut v: Vec<(usize, BufTag)> = self
            .frames
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                // In this order: a write-out sets `write_pending` before it clears `dirty`.
                let dirty = f.dirty.load(Ordering::SeqCst);
                if !dirty && !f.write_pending.load(Ordering::SeqCst) {
                    return None;
                }
                BufTag::unpack(f.tag.load(Ordering::Acquire)).map(|t| (i, t))
            })
            .collect();
        v.sort_unstable_by_key(|&(_, t)| (t.rel.0, t.block.0));
        v
    }

    /// Writes frame `i` if it still holds `tag` and is dirty, first waiting for a write-out of
    /// it in progress. Returns whether this call wrote it. A frame that now holds another page
    /// was evicted, which wrote the page first.
    ///
    /// # Errors
    /// I/O errors from the write (the page stays dirty).
    pub fn write_if_dirty(&self, i: usize, tag: BufTag) -> Result<bool> {
        let f = &self.frames[i];
        {
            let map = self.shard(tag).lock();
            if map.get(&tag) != Some(&i) {
                return Ok(false);
            }
            f.pins.fetch_add(1, Ordering::AcqRel);
        }
        let pinned = Pinned {
            pool: self,
            idx: i,
            tag,
        };
        // write_frame waits for a write-out in progress, then writes only if still dirty.
        let r = if f.valid.load(Ordering::Acquire) {
            self.write_frame(i, tag)
        } else {
            Ok(false)
        };
        drop(pinned);
        r
    }

    /// [`BufferPool::write_if_dirty`] for a run of frames holding consecutive blocks of one
    /// relation, `run[k].1.block == run[0].1.block + k` (a stretch of the sorted
    /// [`BufferPool::checkpoint_snapshot`]): the frames that still hold their page are pinned
    /// and their write-out locks taken in block order; the pages still dirty are copied; the
    /// WAL is flushed past the highest page LSN; and each stretch of adjacent copies goes out in
    /// one write (`Smgr::write_blocks`: one system call, and with O_DIRECT one device request,
    /// instead of one per page). Returns the tags this call wrote.
    ///
    /// # Errors
    /// I/O errors from the WAL flush or a write: every page of the run not yet written stays
    /// dirty.
    pub fn write_run_if_dirty(&self, run: &[(usize, BufTag)]) -> Result<Vec<BufTag>> {
        assert!(
            run.windows(2)
                .all(|w| w[1].1.rel == w[0].1.rel && w[1].1.block.0 == w[0].1.block.0 + 1),
            "a write run of consecutive blocks of one relation"
        );
        let pins: Vec<Pinned<'_>> = run
            .iter()
            .filter_map(|&(i, tag)| {
                let map = self.shard(tag).lock();
                if map.get(&tag) != Some(&i) {
                    return None; // evicted, which wrote the page first
                }
                self.frames[i].pins.fetch_add(1, Ordering::AcqRel);
                Some(Pinned {
                    pool: self,
                    idx: i,
                    tag,
                })
            })
            .collect();
        // Write-out locks in block order (every other write-out holds one lock at a time, and
        // a read-ahead claims only unpinned frames), and the copies, as in `write_frame`.
        let mut taken = Vec::with_capacity(pins.len());
        for p in &pins {
            let f = &self.frames[p.idx];
            let io = f.io.lock();
            if !f.valid.load(Ordering::Acquire) {
                continue;
            }
            let page = f.page.read();
            if !f.dirty.load(Ordering::SeqCst) {
                continue; // written meanwhile by someone else
            }
            f.write_pending.store(true, Ordering::SeqCst);
            f.dirty.store(false, Ordering::SeqCst);
            let copy = page::boxed_copy(&page);
            drop(page);
            taken.push((p, io, copy));
        }
        let mut done = 0;
        let r = self.write_copies(&mut taken, &mut done);
        for (k, (p, _, _)) in taken.iter().enumerate() {
            let f = &self.frames[p.idx];
            if k >= done {
                f.dirty.store(true, Ordering::SeqCst);
            }
            f.write_pending.store(false, Ordering::SeqCst);
        }
        r.map(|()| taken.iter().map(|(p, _, _)| p.tag).collect())
    }

    /// The WAL rule, the checksums and the writes of [`BufferPool::write_run_if_dirty`]'s
    /// copies, each stretch of adjacent blocks in one write. `done`: the copies written (a
    /// prefix), also after an error.
    fn write_copies<G>(
        &self,
        taken: &mut [(&Pinned<'_>, G, Box<PageBuf>)],
        done: &mut usize,
    ) -> Result<()> {
        let Some(first) = taken.first() else {
            return Ok(());
        };
        let rel_id = first.0.tag.rel;
        let lsn = taken
            .iter()
            .map(|(_, _, c)| page::lsn(c))
            .max()
            .expect("non-empty");
        let copies = taken.iter_mut().map(|(_, _, c)| &mut **c);
        let Some(rel) = self.before_write(rel_id, lsn, copies)? else {
            *done = taken.len();
            return Ok(());
        };
        let block = |i: usize| taken[i].0.tag.block.0;
        for run in crate::smgr::runs(taken.len(), usize::MAX, |i| block(i) == block(i - 1) + 1) {
            let bufs: Vec<&[u8]> = taken[run.clone()].iter().map(|(_, _, c)| &c[..]).collect();
            self.smgr
                .write_blocks(&rel, taken[run.start].0.tag.block, &bufs)?;
            *done = run.end;
        }
        Ok(())
    }

    /// Writes out every dirty page now, unpaced (tests and tools). Returns the number written.
    ///
    /// # Errors
    /// The first I/O error.
    pub fn flush_all(&self) -> Result<usize> {
        let mut written = 0;
        for (i, tag) in self.checkpoint_snapshot() {
            written += self.write_if_dirty(i, tag)? as usize;
        }
        Ok(written)
    }

    /// The background writer's cleaning scan (PostgreSQL's `BgBufferSync`, simplified):
    /// looks at up to `scan` frames ahead of the clock hand, the ones the next evictions will
    /// reach, and writes the dirty ones that are unpinned and have no usage count left, until
    /// `reusable` clean candidates are ahead of the hand or `max_writes` pages were written.
    /// Each page written is passed to `wrote`. Returns (pages written, whether it stopped at
    /// `max_writes`).
    ///
    /// # Errors
    /// The first I/O error.
    pub fn clean_ahead(
        &self,
        scan: usize,
        reusable: usize,
        max_writes: usize,
        wrote: &mut dyn FnMut(BufTag),
    ) -> Result<(usize, bool)> {
        let n = self.frames.len();
        let hand = self.clock.load(Ordering::Relaxed);
        let (mut written, mut clean) = (0, 0);
        for k in 0..scan.min(n) {
            if clean >= reusable {
                break;
            }
            if written >= max_writes {
                return Ok((written, true));
            }
            let i = (hand + k) % n;
            let f = &self.frames[i];
            if f.pins.load(Ordering::Acquire) > 0 || f.usage.load(Ordering::Relaxed) > 0 {
                continue;
            }
            clean += 1;
            if !f.dirty.load(Ordering::Acquire) {
                continue;
            }
            let Some(tag) = BufTag::unpack(f.tag.load(Ordering::Acquire)) else {
                continue;
            };
            if self.write_if_dirty(i, tag)? {
                written += 1;
                wrote(tag);
            }
        }
        Ok((written, false))
    }

    /// Forgets every page of `rel` without writing it (DROP/TRUNCATE at commit, or redo of them).
    /// Nobody may hold a pin on them.
    pub fn drop_relation(&self, rel: RelFileId) {
        for (i, f) in self.frames.iter().enumerate() {
            let Some(tag) = BufTag::unpack(f.tag.load(Ordering::Acquire)) else {
                continue;
            };
            if tag.rel != rel {
                continue;
            }
            let mut map = self.shard(tag).lock();
            if map.get(&tag) == Some(&i) && f.pins.load(Ordering::Acquire) == 0 {
                map.remove(&tag);
                f.tag.store(NO_TAG, Ordering::Release);
                f.valid.store(false, Ordering::Release);
                f.dirty.store(false, Ordering::Release);
            }
        }
    }

    /// Drops the cached pages of `rel` at or after block `from`, dirty or not, without
    /// writing them (PostgreSQL's `DropRelationBuffers` for a truncation): the caller cut the
    /// file there first, so a page read again reads as new. A frame pinned meanwhile (a scan
    /// that read `nblocks` before the cut, a write-out in progress) cannot be dropped: it is
    /// zeroed under its exclusive latch and marked clean instead, so it reads as the new page
    /// the file's end gives, and an extension that later reaches its block (`ReadMode::Zero`,
    /// which returns a cached frame as it is) finds a new page (storage DESIGN.md, "VACUUM",
    /// step 6). Returns how many frames were zeroed rather than dropped.
    pub fn drop_blocks_from(&self, rel: RelFileId, from: BlockNumber) -> usize {
        let mut zeroed = 0;
        for (i, f) in self.frames.iter().enumerate() {
            let Some(tag) = BufTag::unpack(f.tag.load(Ordering::Acquire)) else {
                continue;
            };
            if tag.rel != rel || tag.block < from {
                continue;
            }
            let pinned = {
                let mut map = self.shard(tag).lock();
                if map.get(&tag) != Some(&i) {
                    continue;
                }
                // Pins are taken under this lock: none can come while it is held.
                if f.pins.load(Ordering::Acquire) == 0 {
                    map.remove(&tag);
                    f.tag.store(NO_TAG, Ordering::Release);
                    f.valid.store(false, Ordering::Release);
                    f.dirty.store(false, Ordering::Release);
                    continue;
                }
                // Pinned: keep it mapped; this pin keeps the frame ours to zero.
                f.pins.fetch_add(1, Ordering::AcqRel);
                Pinned {
                    pool: self,
                    idx: i,
                    tag,
                }
            };
            if f.valid.load(Ordering::Acquire) {
                let mut page = f.page.write();
                page.fill(0);
                f.dirty.store(false, Ordering::SeqCst);
            }
            drop(pinned);
            zeroed += 1;
        }
        zeroed
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True if the pool has no frames (never: at least 16).
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The number of dirty pages, for diagnostics.
    pub fn dirty_count(&self) -> usize {
        self.frames
            .iter()
            .filter(|f| f.dirty.load(Ordering::Relaxed))
            .count()
    }
}

/// LSN type re-exported for callers of `page::lsn`.
pub type PageLsn = Lsn;
