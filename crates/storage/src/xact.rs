//! Transaction status, snapshots, and waits for other transactions.
//!
//! **Visibility by commit sequence number (CSN).** Every committed transaction gets a CSN when it
//! becomes visible, which is *after* its commit record is durable (with
//! `synchronous_commit = on`). A read-committed statement's snapshot is the last published CSN;
//! a row version is visible if its `xmin` committed with CSN <= snapshot (or is our own xid) and
//! its `xmax` did not. CSNs are published in order under a tiny mutex, so a snapshot that
//! includes CSN c also sees the status store of every transaction with CSN <= c.
//!
//! **Durable status (the "clog").** The status of every xid below `next_xid` is two bits in the
//! pages of `pg_xact/` (`control.rs`); a checkpoint writes the pages whose xids got an outcome
//! since the last one ([`XactManager::take_dirty_pages`]), not the whole store. Xids after the checkpoint's redo point get their status from commit and abort
//! records during redo; any xid still unknown after redo was in progress at the crash and is
//! aborted. The commit path holds `commit_lock` shared from inserting its commit record until it
//! has marked the xid COMMITTING; the checkpoint takes it exclusively while it fixes the redo
//! point (PostgreSQL's `DELAY_CHKPT_START`), so a commit record before the redo point always has
//! its status in the checkpoint's status file.
//!
//! **Truncation and settled chunks** (DESIGN.md, "Freezing"). Statuses live in memory in
//! chunks of `CHUNK` xids. Below [`XactManager::oldest_xid`] (PostgreSQL's `oldestXid`)
//! VACUUM froze every xid out of the heap, so the status store forgets them: such an xid reads
//! as committed and visible to all, its chunks are dropped ([`XactManager::truncate`]) and a
//! checkpoint removes its segments. A chunk whose xids all ended, with every commit visible to
//! every snapshot, is kept at two bits per xid instead of eight bytes
//! ([`XactManager::settle`]): its commits then read as CSN 0, which every snapshot sees as it
//! saw their CSNs.
//!
//! **Snapshots in use and the horizon.** Every transaction registers a [`SnapshotSlot`] (PostgreSQL's
//! `PGPROC->xmin`) holding a lower bound of the CSN of the snapshot its statement reads with, or
//! [`SnapshotSlot::IDLE`] between statements. [`XactManager::horizon`] is the smallest of them
//! and of the last published CSN: a change committed with a CSN at or below it is visible to every
//! snapshot in use and to every later one, so a row version such a commit deleted or replaced is
//! needed by nobody (pruning, `heap::prune`). A snapshot stores its bound *before* it reads the
//! CSN it uses, and the horizon reads the last CSN *before* the slots, so a snapshot the horizon
//! missed reads a CSN at least the horizon's (both in one `SeqCst` order). On a hot standby the
//! same slots say which queries a replayed prune conflicts with
//! ([`XactManager::conflicting_snapshots`]).
//!
//! **hot_standby_feedback** (DESIGN.md, "Hot standby feedback"). A standby's CSNs are its own,
//! so what it tells its primary is a WAL position: each slot also records the replay position
//! read *before* its bound ([`XactManager::track_replay`]), so the snapshot sees every commit
//! whose record ends at or below it, and [`XactManager::oldest_snapshot_lsn`] is the smallest
//! of them and of the replay position. On the primary a walsender holds the horizon for it
//! with a slot of its own ([`XactManager::hold`]).
//!
//! **Row-lock waits.** An updater that finds a row version's `xmax` set by a transaction still in
//! progress waits for that transaction to end (PostgreSQL's `XactLockTableWait`). Each waiter
//! records one wait-for edge; a new edge that closes a cycle is a deadlock (40P01), detected
//! immediately by the transaction that would close it.

use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use walnut_common::{Error, ErrorKind, Result, SqlState, Xid};

/// Xids per in-memory chunk of statuses (512 kB as CSNs, 16 kB settled).
const CHUNK: u64 = 1 << 16;

/// In-memory status values.
const ST_UNKNOWN: u64 = 0;
const ST_ABORTED: u64 = 1;
const ST_COMMITTING: u64 = 2;
const ST_CSN_BASE: u64 = 16;

/// Durable status values (as `control::read_xact_status` returns them, a byte per xid).
pub const CLOG_UNKNOWN: u8 = 0;
/// Aborted.
pub const CLOG_ABORTED: u8 = 1;
/// Committed.
pub const CLOG_COMMITTED: u8 = 2;

/// The status of a transaction as a reader sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidStatus {
    /// Running, or its commit is not yet visible.
    InProgress,
    /// Rolled back (or crashed before committing).
    Aborted,
    /// Committed and visible to snapshots with CSN >= the value.
    Committed(u64),
}

/// A read-committed snapshot: our xid and the last visible CSN at statement start.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot {
    /// The reading transaction (`Xid::INVALID` if it has none yet).
    pub xid: Xid,
    /// Commits with CSN <= this are visible.
    pub csn: u64,
}

/// One transaction's registered snapshot (PostgreSQL's `PGPROC->xmin` with its recovery-conflict
/// signal): see the module documentation.
pub struct SnapshotSlot {
    /// A lower bound of the CSN the transaction's current statement reads with, or
    /// [`SnapshotSlot::IDLE`].
    csn: AtomicU64,
    /// Set by a hot standby's replay when the snapshot must be cancelled (a recovery conflict);
    /// the transaction then fails its statement with 40001.
    conflict: AtomicBool,
    /// The transaction's cancel flag, which replay sets with `conflict` to interrupt it.
    cancel: Arc<AtomicBool>,
    /// On a hot standby, the replay position (bytes) read before `csn` was stored: the
    /// snapshot sees every commit whose record ends at or below it. 0 on a primary.
    lsn: AtomicU64,
    /// Index in the registry.
    index: usize,
}

impl SnapshotSlot {
    /// No snapshot in use (between statements, or once cancelled by a recovery conflict).
    pub const IDLE: u64 = u64::MAX;

    /// The registered lower bound (a CSN), or [`SnapshotSlot::IDLE`].
    pub fn csn(&self) -> u64 {
        self.csn.load(Ordering::SeqCst)
    }

    /// Ends the use of the snapshot (a statement ended): the horizon may pass it.
    pub fn release(&self) {
        self.csn.store(Self::IDLE, Ordering::SeqCst);
    }

    /// True once replay has cancelled this snapshot for a recovery conflict (clears the mark).
    pub fn take_conflict(&self) -> bool {
        self.conflict.swap(false, Ordering::AcqRel)
    }

    /// Cancels the snapshot's statement for a recovery conflict: marks it and sets its cancel
    /// flag, which the statement checks between pages.
    pub fn signal_conflict(&self) {
        self.conflict.store(true, Ordering::Release);
        self.cancel.store(true, Ordering::Release);
    }
}

/// One chunk of in-memory statuses.
enum Chunk {
    /// Eight bytes per xid: `ST_*` or `ST_CSN_BASE` + CSN.
    Open(Arc<[AtomicU64]>),
    /// Two bits per xid (`01` committed, `10` aborted, as in the status store): every xid
    /// ended, every commit visible to every snapshot (CSN 0).
    Settled(Box<[u8]>),
}

/// The in-memory statuses: chunk `k` holds xids from `(first + k) * CHUNK`.
struct Chunks {
    first: u64,
    chunks: Vec<Chunk>,
}

struct XidLock {
    done: Mutex<bool>,
    cond: Condvar,
}

/// The transaction manager.
pub struct XactManager {
    next_xid: AtomicU64,
    /// Xids below are frozen out of every heap: committed, visible to all.
    oldest_xid: AtomicU64,
    /// Oldest xids computed by checkpoints, not yet in force, each with the last published
    /// CSN when it was computed ([`XactManager::next_oldest_xid`]).
    oldest_candidates: Mutex<std::collections::VecDeque<(Xid, u64)>>,
    chunks: RwLock<Chunks>,
    last_csn: AtomicU64,
    publish: Mutex<()>,
    active: Mutex<HashMap<Xid, Arc<XidLock>>>,
    /// `active.len()`, readable without the lock (the group-commit leader reads it).
    active_n: AtomicUsize,
    waits_for: Mutex<HashMap<Xid, Xid>>,
    /// Pages of the status store (`control::XACTS_PER_PAGE` xids each) with an xid whose
    /// outcome was set since the last checkpoint took them.
    dirty_pages: Mutex<std::collections::BTreeSet<u64>>,
    /// Registered snapshots by index; `None` = a free entry.
    snapshots: Mutex<Vec<Option<Arc<SnapshotSlot>>>>,
    /// On a hot standby, the end of the last record replayed, stored only after every commit
    /// before it is published ([`XactManager::track_replay`]).
    replay: std::sync::OnceLock<Arc<AtomicU64>>,
    /// Held shared by committers from commit-record insertion until the xid is COMMITTING;
    /// exclusively by the checkpoint while it fixes the redo point.
    pub commit_lock: RwLock<()>,
    /// [`XactManager::recent_horizon`]'s value and when it was computed (µs since `born`).
    recent_horizon: AtomicU64,
    recent_horizon_at_us: AtomicU64,
    born: std::time::Instant,
}

/// How old [`XactManager::recent_horizon`]'s value may be, µs.
const RECENT_HORIZON_MAX_AGE_US: u64 = 10_000;

impl XactManager {
    /// A manager whose next xid is `next_xid` and whose oldest xid is the first; `durable` is
    /// the loaded status store from xid 0 (a byte per xid, `CLOG_*`).
    pub fn new(next_xid: Xid, durable: &[u8]) -> XactManager {
        XactManager::load(next_xid, Xid::FIRST_NORMAL, 0, durable)
    }

    /// A manager whose next xid is `next_xid` and oldest xid `oldest_xid` (the control
    /// file's); `durable` is the loaded status store from xid `base` (a byte per xid, `CLOG_*`).
    pub fn load(next_xid: Xid, oldest_xid: Xid, base: u64, durable: &[u8]) -> XactManager {
        let oldest = oldest_xid.0.max(Xid::FIRST_NORMAL.0);
        let m = XactManager {
            next_xid: AtomicU64::new(next_xid.0.max(Xid::FIRST_NORMAL.0)),
            oldest_xid: AtomicU64::new(oldest),
            oldest_candidates: Mutex::new(std::collections::VecDeque::new()),
            chunks: RwLock::new(Chunks {
                first: oldest / CHUNK,
                chunks: Vec::new(),
            }),
            last_csn: AtomicU64::new(1),
            publish: Mutex::new(()),
            active: Mutex::new(HashMap::new()),
            active_n: AtomicUsize::new(0),
            waits_for: Mutex::new(HashMap::new()),
            dirty_pages: Mutex::new(std::collections::BTreeSet::new()),
            snapshots: Mutex::new(Vec::new()),
            replay: std::sync::OnceLock::new(),
            commit_lock: RwLock::new(()),
            recent_horizon: AtomicU64::new(0),
            recent_horizon_at_us: AtomicU64::new(0),
            born: std::time::Instant::now(),
        };
        // Chunk by chunk: one whose xids all have an outcome is settled at once (two bits per
        // xid; no snapshot exists yet, so CSN 0 is as good as any), the others are kept open
        // with their commits at CSN 1. Nothing loaded is dirty: it is durable already.
        let floor = oldest;
        let end = base + durable.len() as u64;
        let outcome = |x: u64| -> u8 {
            x.checked_sub(base)
                .and_then(|i| durable.get(i as usize).copied())
                .unwrap_or(CLOG_UNKNOWN)
        };
        let mut chunks = Vec::new();
        for k in floor / CHUNK..end.div_ceil(CHUNK) {
            let first = k * CHUNK;
            let settled = (first + CHUNK <= next_xid.0)
                .then(|| {
                    settled_chunk(|i| match outcome(first + i as u64) {
                        _ if first + (i as u64) < floor => Some(true),
                        CLOG_ABORTED => Some(true),
                        CLOG_COMMITTED => Some(false),
                        _ => None,
                    })
                })
                .flatten();
            if let Some(bits) = settled {
                chunks.push(Chunk::Settled(bits));
            } else {
                chunks.push(Chunk::Open(
                    (first..first + CHUNK)
                        .map(|x| {
                            AtomicU64::new(match outcome(x) {
                                _ if x < floor => ST_UNKNOWN,
                                CLOG_COMMITTED => ST_CSN_BASE + 1,
                                CLOG_ABORTED => ST_ABORTED,
                                _ => ST_UNKNOWN,
                            })
                        })
                        .collect(),
                ));
            }
        }
        m.chunks.write().chunks = chunks;
        m
    }

    /// Sets `xid`'s in-memory status and marks its page of the status store dirty. An xid below
    /// the oldest (redo of a commit record from before a truncation) is ignored.
    fn set(&self, xid: Xid, v: u64) {
        if xid.0 < self.oldest_xid.load(Ordering::Acquire) {
            return;
        }
        if v != ST_UNKNOWN {
            self.dirty_pages
                .lock()
                .insert(xid.0 / crate::control::XACTS_PER_PAGE);
        }
        self.store(xid, v);
    }

    /// Sets `xid`'s in-memory status only: for a change the durable status does not see (a
    /// COMMITTING xid published).
    fn store(&self, xid: Xid, v: u64) {
        let (k, i) = ((xid.0 / CHUNK) as usize, (xid.0 % CHUNK) as usize);
        {
            let c = self.chunks.read();
            let Some(at) = k.checked_sub(c.first as usize) else {
                return; // Below the oldest xid: forgotten.
            };
            match c.chunks.get(at) {
                Some(Chunk::Open(s)) => return s[i].store(v, Ordering::Release),
                Some(Chunk::Settled(b)) => {
                    // Settled only once every xid ended: nothing sets one again but the same
                    // outcome (redo of a record replayed twice).
                    assert_eq!(
                        settled_raw(b, i) == ST_ABORTED,
                        v == ST_ABORTED,
                        "xid {} changes its outcome in a settled chunk",
                        xid.0
                    );
                    return;
                }
                None => {}
            }
        }
        let mut c = self.chunks.write();
        let Some(at) = k.checked_sub(c.first as usize) else {
            return;
        };
        while c.chunks.len() <= at {
            c.chunks
                .push(Chunk::Open((0..CHUNK).map(|_| AtomicU64::new(0)).collect()));
        }
        if let Chunk::Open(s) = &c.chunks[at] {
            s[i].store(v, Ordering::Release);
        }
    }

    fn raw(&self, xid: Xid) -> u64 {
        let (k, i) = ((xid.0 / CHUNK) as usize, (xid.0 % CHUNK) as usize);
        let c = self.chunks.read();
        match k
            .checked_sub(c.first as usize)
            .and_then(|at| c.chunks.get(at))
        {
            Some(Chunk::Open(s)) => s[i].load(Ordering::Acquire),
            Some(Chunk::Settled(b)) => settled_raw(b, i),
            None => ST_UNKNOWN,
        }
    }

    /// Xids below this are frozen out of every heap (the control file's `oldest_xid`): they
    /// read as committed and visible to all.
    pub fn oldest_xid(&self) -> Xid {
        Xid(self.oldest_xid.load(Ordering::Acquire))
    }

    /// The oldest xid a checkpoint may now put in force, given `candidate`, what VACUUM froze
    /// up to ([`crate::vacuum::frozen_cutoff`]). A candidate is not used at once: a statement
    /// may have copied a version's header before VACUUM froze it and look its `xmin` up after,
    /// so a candidate waits in a queue, stamped with the last published CSN, until no
    /// registered snapshot has a CSN at or below the stamp. Queuing a candidate publishes a CSN
    /// no commit has, so that snapshots taken afterwards are above the stamp even when nothing
    /// commits. Returns the newest queued candidate that has waited so, never below the current
    /// oldest xid, and queues `candidate`.
    pub fn next_oldest_xid(&self, candidate: Xid) -> Xid {
        let stamp = self.last_csn.load(Ordering::SeqCst);
        let oldest_snapshot = self
            .snapshots
            .lock()
            .iter()
            .flatten()
            .map(|s| s.csn())
            .min()
            .unwrap_or(SnapshotSlot::IDLE);
        let mut q = self.oldest_candidates.lock();
        if q.back().is_none_or(|&(x, _)| x < candidate) {
            // A CSN no commit has, so that snapshots taken from now on are above the stamp even
            // if nothing commits (changes no visibility: no commit has it).
            let _g = self.publish.lock();
            self.last_csn.fetch_add(1, Ordering::SeqCst);
        }
        let mut chosen = self.oldest_xid();
        while let Some(&(x, at)) = q.front() {
            if oldest_snapshot <= at {
                break;
            }
            chosen = chosen.max(x);
            q.pop_front();
        }
        if q.back().is_none_or(|&(x, _)| x < candidate) {
            q.push_back((candidate, stamp));
        }
        // Bounded: dropping the oldest candidates only delays truncation.
        while q.len() > 16 {
            q.pop_front();
        }
        chosen
    }

    /// Forgets the statuses of xids below `oldest` (no heap names one any more: every VACUUM
    /// since froze them, and the control file says so durably), dropping their in-memory
    /// chunks and their dirty pages. Never moves the oldest xid back.
    pub fn truncate(&self, oldest: Xid) {
        let prev = self.oldest_xid.fetch_max(oldest.0, Ordering::AcqRel);
        if oldest.0 <= prev {
            return;
        }
        let first = oldest.0 / CHUNK;
        let mut c = self.chunks.write();
        if first > c.first {
            let drop_n = ((first - c.first) as usize).min(c.chunks.len());
            c.chunks.drain(..drop_n);
            c.first = first;
        }
        drop(c);
        let page = oldest.0 / crate::control::XACTS_PER_PAGE;
        self.dirty_pages.lock().retain(|&p| p >= page);
    }

    /// Keeps at two bits per xid every chunk whose xids all ended before `below` (the oldest
    /// xid still running) and whose commits every snapshot sees (CSN at or below `horizon`,
    /// [`XactManager::horizon`]). Returns how many chunks it settled. A checkpoint calls it.
    pub fn settle(&self, below: Xid, horizon: u64) -> usize {
        let candidates: Vec<(u64, Arc<[AtomicU64]>)> = {
            let c = self.chunks.read();
            c.chunks
                .iter()
                .enumerate()
                .filter(|(at, _)| (c.first + *at as u64 + 1) * CHUNK <= below.0)
                .filter_map(|(at, ch)| match ch {
                    Chunk::Open(s) => Some(((c.first + at as u64) * CHUNK, s.clone())),
                    Chunk::Settled(_) => None,
                })
                .collect()
        };
        let mut settled = 0;
        for (first, s) in candidates {
            let Some(bits) = settled_chunk(|i| match s[i].load(Ordering::Acquire) {
                // Never assigned (INVALID, ABORTED, FROZEN have their own answers).
                _ if first + (i as u64) < Xid::FIRST_NORMAL.0 => Some(true),
                ST_ABORTED => Some(true),
                v if v >= ST_CSN_BASE && v - ST_CSN_BASE <= horizon => Some(false),
                _ => None,
            }) else {
                continue;
            };
            let mut c = self.chunks.write();
            // Truncation may have shifted the chunks meanwhile.
            let now = c.chunks.iter().position(|ch| match ch {
                Chunk::Open(o) => Arc::ptr_eq(o, &s),
                Chunk::Settled(_) => false,
            });
            if let Some(now) = now {
                c.chunks[now] = Chunk::Settled(bits);
                settled += 1;
            }
        }
        settled
    }

    /// In-memory chunks of statuses: (open, settled).
    pub fn chunk_counts(&self) -> (usize, usize) {
        let c = self.chunks.read();
        let settled = c
            .chunks
            .iter()
            .filter(|ch| matches!(ch, Chunk::Settled(_)))
            .count();
        (c.chunks.len() - settled, settled)
    }

    /// The oldest xid still running, or the next xid if none is: every xid below it has ended
    /// (PostgreSQL's `GetOldestActiveTransactionId`). Xids are handed out under the same lock
    /// (`try_assign_xid`), so none is missed.
    pub fn oldest_running(&self) -> Xid {
        let active = self.active.lock();
        let next = self.next_xid();
        active.keys().copied().min().map_or(next, |x| x.min(next))
    }

    /// Status of `xid`.
    pub fn status(&self, xid: Xid) -> XidStatus {
        if xid == Xid::INVALID {
            return XidStatus::InProgress;
        }
        if xid == Xid::FROZEN {
            return XidStatus::Committed(0);
        }
        if xid == Xid::ABORTED {
            return XidStatus::Aborted;
        }
        if xid.0 < self.oldest_xid.load(Ordering::Acquire) {
            // Frozen out of every heap: only a committed one can still be named (DESIGN.md,
            // "Freezing").
            return XidStatus::Committed(0);
        }
        match self.raw(xid) {
            ST_ABORTED => XidStatus::Aborted,
            v if v >= ST_CSN_BASE => XidStatus::Committed(v - ST_CSN_BASE),
            // `truncate` raises the oldest xid before it drops the chunk just read as missing.
            ST_UNKNOWN if xid.0 < self.oldest_xid.load(Ordering::Acquire) => {
                XidStatus::Committed(0)
            }
            _ => XidStatus::InProgress,
        }
    }

    /// A snapshot for a new statement of transaction `xid`.
    pub fn snapshot(&self, xid: Xid) -> Snapshot {
        Snapshot {
            xid,
            csn: self.last_csn.load(Ordering::Acquire),
        }
    }

    /// Registers a snapshot slot (idle) for a transaction whose cancel flag is `cancel`; give it
    /// back with [`XactManager::unregister`].
    pub fn register(&self, cancel: Arc<AtomicBool>) -> Arc<SnapshotSlot> {
        let mut slots = self.snapshots.lock();
        let index = slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(slots.len());
        let slot = Arc::new(SnapshotSlot {
            csn: AtomicU64::new(SnapshotSlot::IDLE),
            conflict: AtomicBool::new(false),
            cancel,
            lsn: AtomicU64::new(0),
            index,
        });
        if index == slots.len() {
            slots.push(Some(slot.clone()));
        } else {
            slots[index] = Some(slot.clone());
        }
        slot
    }

    /// Removes a slot from the registry.
    pub fn unregister(&self, slot: &SnapshotSlot) {
        slot.release();
        let mut slots = self.snapshots.lock();
        assert!(
            slots
                .get(slot.index)
                .and_then(Option::as_ref)
                .is_some_and(|s| std::ptr::eq(&**s, slot)),
            "unregistering a snapshot slot that is not registered"
        );
        slots[slot.index] = None;
    }

    /// A snapshot for a new statement of transaction `xid`, registered in `slot` first (see the
    /// module documentation for why in this order).
    pub fn snapshot_in(&self, slot: &SnapshotSlot, xid: Xid) -> Snapshot {
        if let Some(replayed) = self.replay.get() {
            // Before the bound: every commit ending at or below it is published by now.
            slot.lsn
                .store(replayed.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        let bound = self.last_csn.load(Ordering::SeqCst);
        slot.csn.store(bound, Ordering::SeqCst);
        let csn = self.last_csn.load(Ordering::SeqCst);
        assert!(
            csn >= bound,
            "published CSN went back from {bound} to {csn}"
        );
        Snapshot { xid, csn }
    }

    /// The visibility horizon, a CSN: every commit with a CSN at or below it is visible to every
    /// registered snapshot and to every snapshot taken later (PostgreSQL's
    /// `GetOldestNonRemovableTransactionId`). An older value is always safe (a later call may
    /// return a smaller one: a snapshot whose bound was read before this scan and stored after
    /// it, but whose CSN is at least this horizon).
    pub fn horizon(&self) -> u64 {
        let mut h = self.last_csn.load(Ordering::SeqCst);
        for s in self.snapshots.lock().iter().flatten() {
            h = h.min(s.csn());
        }
        h
    }

    /// A horizon at most 10 ms old ([`XactManager::horizon`], computed again by one caller
    /// when the last one is older, the others taking the old one meanwhile; PostgreSQL's
    /// `GlobalVisState` caches its horizons the same way): for decisions that must stay
    /// cheap and need not be exact, such as whether a page is worth pruning on a read. It
    /// must not decide what a prune removes (a fresh `horizon()` may be smaller than an older
    /// value: see its documentation).
    pub fn recent_horizon(&self) -> u64 {
        let now = (self.born.elapsed().as_micros() as u64).max(1);
        let at = self.recent_horizon_at_us.load(Ordering::Acquire);
        if at != 0 && now.saturating_sub(at) < RECENT_HORIZON_MAX_AGE_US {
            return self.recent_horizon.load(Ordering::Acquire);
        }
        if self
            .recent_horizon_at_us
            .compare_exchange(at, now, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return self.recent_horizon.load(Ordering::Acquire);
        }
        let h = self.horizon();
        self.recent_horizon.store(h, Ordering::Release);
        h
    }

    /// Makes a hot standby's snapshots record the replay position `replayed` (bytes; its
    /// owner stores it, `SeqCst` or `Release`, only after publishing every commit whose record
    /// ends at or below it), for [`XactManager::oldest_snapshot_lsn`]. Called once, when
    /// replay starts; later calls are ignored.
    pub fn track_replay(&self, replayed: Arc<AtomicU64>) {
        let _ = self.replay.set(replayed);
    }

    /// On a hot standby, a WAL position (bytes) such that every snapshot in use, and every
    /// snapshot taken later, sees every commit whose record ends at or below it: the smallest
    /// position the registered snapshots recorded, or the replay position if that is smaller
    /// (what a walreceiver sends as `hot_standby_feedback`). `None` unless
    /// [`XactManager::track_replay`] was called.
    ///
    /// The replay position is read *before* the slots: a snapshot this scan misses stores its
    /// bound after the scan and reads the last CSN after that, so it sees every commit published
    /// before the position was stored (the horizon's argument, one `SeqCst` order).
    pub fn oldest_snapshot_lsn(&self) -> Option<u64> {
        let mut oldest = self.replay.get()?.load(Ordering::SeqCst);
        for s in self.snapshots.lock().iter().flatten() {
            if s.csn() != SnapshotSlot::IDLE {
                oldest = oldest.min(s.lsn.load(Ordering::SeqCst));
            }
        }
        Some(oldest)
    }

    /// Holds the horizon at `csn` with `slot`, as a snapshot that sees the commits with a CSN at
    /// or below it would (a walsender's hold for its standby's `hot_standby_feedback`);
    /// [`SnapshotSlot::release`] lets it go. A hold may move back: it only protects a standby's
    /// queries, which replay's conflict handling protects anyway, so a prune that passed an
    /// older hold before it was stored costs at worst a cancelled standby query.
    pub fn hold(&self, slot: &SnapshotSlot, csn: u64) {
        slot.csn.store(csn, Ordering::SeqCst);
    }

    /// The last published CSN: every commit with a CSN at or below it is visible to a snapshot
    /// taken now.
    pub fn last_csn(&self) -> u64 {
        self.last_csn.load(Ordering::SeqCst)
    }

    /// The registered snapshots that do not see commits with a CSN of `csn` (a hot standby's
    /// recovery conflicts with a replayed prune whose removed versions `csn` deleted).
    pub fn conflicting_snapshots(&self, csn: u64) -> Vec<Arc<SnapshotSlot>> {
        self.snapshots
            .lock()
            .iter()
            .flatten()
            .filter(|s| s.csn() < csn)
            .cloned()
            .collect()
    }

    /// True if changes of `xid` are visible to `snap`.
    pub fn visible(&self, snap: &Snapshot, xid: Xid) -> bool {
        if xid == snap.xid && xid.is_valid() {
            return true;
        }
        match self.status(xid) {
            XidStatus::Committed(csn) => csn <= snap.csn,
            _ => false,
        }
    }

    /// Assigns a new xid and registers it as running.
    ///
    /// # Panics
    /// Past [`Xid::MAX_STORED`]; sessions use [`XactManager::try_assign_xid`].
    pub fn assign_xid(&self) -> Xid {
        self.try_assign_xid().expect("xid space exhausted")
    }

    /// Assigns a new xid and registers it as running, unless the next one would not fit a
    /// tuple header ([`Xid::MAX_STORED`]; PostgreSQL's `GetNewTransactionId` stops the same
    /// way before wraparound).
    ///
    /// # Errors
    /// 54000 (`program_limit_exceeded`) once every xid a tuple can store was assigned.
    pub fn try_assign_xid(&self) -> Result<Xid> {
        let lock = Arc::new(XidLock {
            done: Mutex::new(false),
            cond: Condvar::new(),
        });
        let mut active = self.active.lock();
        // Taken under the lock, so that `oldest_running` never misses an xid handed out but
        // not yet listed (and no two sessions pass the limit's check together).
        let next = self.next_xid.load(Ordering::Acquire);
        if next > Xid::MAX_STORED.0 {
            return Err(Error::user(
                walnut_common::SqlState::PROGRAM_LIMIT_EXCEEDED,
                "database is not accepting commands that assign new transaction IDs",
            )
            .with_detail(format!(
                "Every transaction ID a row version can store (up to {}) has been assigned.",
                Xid::MAX_STORED.0
            )));
        }
        let xid = Xid(self.next_xid.fetch_add(1, Ordering::AcqRel));
        active.insert(xid, lock);
        self.active_n.store(active.len(), Ordering::Release);
        drop(active);
        Ok(xid)
    }

    /// The next xid to be assigned.
    pub fn next_xid(&self) -> Xid {
        Xid(self.next_xid.load(Ordering::Acquire))
    }

    /// Advances `next_xid` past `xid` (redo).
    pub fn observe_xid(&self, xid: Xid) {
        self.next_xid.fetch_max(xid.0 + 1, Ordering::AcqRel);
    }

    /// Transactions currently holding an xid (for `commit_siblings`).
    pub fn active_count(&self) -> usize {
        self.active_n.load(Ordering::Acquire)
    }

    /// Marks `xid` COMMITTING: its commit record is in the WAL but it is not yet visible. Call
    /// under `commit_lock` (shared).
    pub fn mark_committing(&self, xid: Xid) {
        self.set(xid, ST_COMMITTING);
    }

    /// Makes `xid` visible to new snapshots (after its commit record is durable, or at once with
    /// `synchronous_commit = off`), then wakes its waiters.
    pub fn publish_commit(&self, xid: Xid) {
        {
            let _g = self.publish.lock();
            let csn = self.last_csn.load(Ordering::Relaxed) + 1;
            // COMMITTING already marked the page dirty (and counts as committed there).
            self.store(xid, ST_CSN_BASE + csn);
            // SeqCst: a hot standby's replay reads the snapshot slots after it (Dekker with
            // `snapshot_in`).
            self.last_csn.store(csn, Ordering::SeqCst);
        }
        self.finish(xid);
    }

    /// Marks `xid` aborted and wakes its waiters.
    pub fn abort(&self, xid: Xid) {
        self.set(xid, ST_ABORTED);
        self.finish(xid);
    }

    fn finish(&self, xid: Xid) {
        let removed = {
            let mut active = self.active.lock();
            let r = active.remove(&xid);
            self.active_n.store(active.len(), Ordering::Release);
            r
        };
        if let Some(lock) = removed {
            *lock.done.lock() = true;
            lock.cond.notify_all();
        }
    }

    /// Redo of a commit record: committed, with the next CSN, so that a hot standby's
    /// snapshots see replayed transactions whole and in the order of their commit records.
    pub fn redo_commit(&self, xid: Xid) {
        self.observe_xid(xid);
        let _g = self.publish.lock();
        let csn = self.last_csn.load(Ordering::Relaxed) + 1;
        self.set(xid, ST_CSN_BASE + csn);
        // SeqCst: a hot standby's replay reads the snapshot slots after it (Dekker with
        // `snapshot_in`).
        self.last_csn.store(csn, Ordering::SeqCst);
    }

    /// Redo of an abort record.
    pub fn redo_abort(&self, xid: Xid) {
        self.observe_xid(xid);
        self.set(xid, ST_ABORTED);
    }

    /// End of recovery: every xid below `next_xid` with no outcome was running at the crash.
    pub fn abort_unresolved(&self) {
        let next = self.next_xid.load(Ordering::Acquire);
        let mut x = self.oldest_xid.load(Ordering::Acquire);
        while x < next {
            let settled = {
                let c = self.chunks.read();
                (x / CHUNK)
                    .checked_sub(c.first)
                    .and_then(|at| c.chunks.get(at as usize))
                    .is_some_and(|ch| matches!(ch, Chunk::Settled(_)))
            };
            if settled {
                // Every xid of a settled chunk has an outcome.
                x = (x / CHUNK + 1) * CHUNK;
                continue;
            }
            if self.raw(Xid(x)) == ST_UNKNOWN {
                self.set(Xid(x), ST_ABORTED);
            }
            x += 1;
        }
    }

    /// The durable status byte of `xid`. COMMITTING counts as committed: the checkpoint
    /// flushes WAL past every such commit record before it writes the status store.
    pub fn durable_status(&self, xid: Xid) -> u8 {
        match self.raw(xid) {
            ST_ABORTED => CLOG_ABORTED,
            ST_COMMITTING => CLOG_COMMITTED,
            v if v >= ST_CSN_BASE => CLOG_COMMITTED,
            _ => CLOG_UNKNOWN,
        }
    }

    /// Takes the pages of the status store changed since the last call (a checkpoint's), each
    /// encoded from the statuses as they are now (`control::encode_xact_page`). An outcome set
    /// while this runs marks its page again, for the next checkpoint. A checkpoint that fails
    /// to write them gives them back with [`XactManager::redirty_pages`].
    pub fn take_dirty_pages(&self) -> Vec<(u64, Box<[u8; walnut_common::BLCKSZ]>)> {
        let pages = std::mem::take(&mut *self.dirty_pages.lock());
        pages
            .into_iter()
            .map(|n| {
                (
                    n,
                    crate::control::encode_xact_page(n, |x| self.durable_status(x)),
                )
            })
            .collect()
    }

    /// Marks pages dirty again (their write failed).
    pub fn redirty_pages(&self, pages: impl IntoIterator<Item = u64>) {
        self.dirty_pages.lock().extend(pages);
    }

    /// Waits until `holder` ends. `me` is the waiting transaction.
    ///
    /// # Errors
    /// 40P01 if waiting would close a cycle of waits; 57014 if `cancel` is set meanwhile.
    pub fn wait_for(&self, me: Xid, holder: Xid, cancel: &AtomicBool) -> Result<()> {
        let Some(lock) = self.active.lock().get(&holder).cloned() else {
            return Ok(());
        };
        {
            let mut w = self.waits_for.lock();
            let mut cur = holder;
            let mut steps = 0;
            while let Some(&next) = w.get(&cur) {
                if next == me || steps > 100_000 {
                    return Err(Error::new(ErrorKind::Conflict, SqlState::DEADLOCK_DETECTED, "deadlock detected")
                        .with_detail(format!(
                            "Process waiting for transaction {} is blocked by transaction {}, which waits for this process.",
                            holder.0, next.0
                        )));
                }
                cur = next;
                steps += 1;
            }
            if holder == me {
                return Ok(());
            }
            w.insert(me, holder);
        }
        let result = (|| {
            let mut done = lock.done.lock();
            while !*done {
                lock.cond.wait_for(&mut done, Duration::from_millis(20));
                if cancel.swap(false, Ordering::AcqRel) {
                    return Err(Error::cancelled());
                }
            }
            Ok(())
        })();
        self.waits_for.lock().remove(&me);
        result
    }
}

/// A settled chunk from `aborted(i)` for each entry `i`: `Some(true)` aborted, `Some(false)`
/// committed and visible to every snapshot; `None` (an entry not settled yet) gives none.
fn settled_chunk(mut aborted: impl FnMut(usize) -> Option<bool>) -> Option<Box<[u8]>> {
    let mut bits = vec![0u8; (CHUNK / 4) as usize].into_boxed_slice();
    for i in 0..CHUNK as usize {
        let b = if aborted(i)? {
            XACT_BITS_ABORTED
        } else {
            XACT_BITS_COMMITTED
        };
        bits[i / 4] |= b << (2 * (i % 4));
    }
    Some(bits)
}

/// The in-memory status of entry `i` of a settled chunk.
fn settled_raw(bits: &[u8], i: usize) -> u64 {
    match (bits[i / 4] >> (2 * (i % 4))) & 0b11 {
        XACT_BITS_ABORTED => ST_ABORTED,
        _ => ST_CSN_BASE,
    }
}

use crate::control::{XACT_BITS_ABORTED, XACT_BITS_COMMITTED};

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    #[test]
    fn no_xid_past_what_a_tuple_header_holds_is_assigned() {
        let near = Xid(Xid::MAX_STORED.0 - 1);
        let m = XactManager::load(near, near, near.0, &[]);
        assert_eq!(m.try_assign_xid().unwrap(), near);
        assert_eq!(m.try_assign_xid().unwrap(), Xid::MAX_STORED);
        for _ in 0..2 {
            let e = m.try_assign_xid().unwrap_err();
            assert_eq!(e.sqlstate.0, "54000", "{e}");
        }
        assert_eq!(
            m.next_xid(),
            Xid(Xid::MAX_STORED.0 + 1),
            "nothing was handed out"
        );
        assert_eq!(m.active_count(), 2);
    }

    #[test]
    fn commit_becomes_visible_only_when_published() {
        let m = XactManager::new(Xid::FIRST_NORMAL, &[]);
        let a = m.assign_xid();
        let before = m.snapshot(Xid::INVALID);
        m.mark_committing(a);
        assert!(
            !m.visible(&m.snapshot(Xid::INVALID), a),
            "committing is not yet visible"
        );
        m.publish_commit(a);
        assert!(m.visible(&m.snapshot(Xid::INVALID), a));
        assert!(
            !m.visible(&before, a),
            "an older snapshot does not see a later commit"
        );
        assert_eq!(m.durable_status(a), CLOG_COMMITTED);
    }

    #[test]
    fn the_horizon_stays_at_the_oldest_registered_snapshot() {
        let m = XactManager::new(Xid::FIRST_NORMAL, &[]);
        let commit = || {
            let x = m.assign_xid();
            m.publish_commit(x);
            x
        };
        commit();
        let (a, b) = (
            m.register(Arc::new(AtomicBool::new(false))),
            m.register(Arc::new(AtomicBool::new(false))),
        );
        let sa = m.snapshot_in(&a, Xid::INVALID);
        let x = commit();
        let sb = m.snapshot_in(&b, Xid::INVALID);
        commit();
        assert!(!m.visible(&sa, x) && m.visible(&sb, x));
        assert_eq!(m.horizon(), sa.csn, "the older snapshot holds the horizon");
        assert_eq!(m.conflicting_snapshots(sb.csn).len(), 1);
        a.release();
        assert_eq!(m.horizon(), sb.csn);
        m.unregister(&b);
        m.unregister(&a);
        // Nothing registered: everything published is below the horizon.
        assert_eq!(m.horizon(), m.snapshot(Xid::INVALID).csn);
        // An entry freed is reused.
        let c = m.register(Arc::new(AtomicBool::new(false)));
        assert_eq!(m.snapshots.lock().len(), 2);
        m.unregister(&c);
    }

    /// hot_standby_feedback's two halves: a standby's snapshots record the replay position,
    /// the oldest one in use is what the standby reports, and a primary's hold keeps the
    /// horizon where it is set.
    #[test]
    fn feedback_reports_the_oldest_snapshots_position_and_a_hold_keeps_the_horizon() {
        let m = XactManager::new(Xid::FIRST_NORMAL, &[]);
        assert_eq!(m.oldest_snapshot_lsn(), None, "a primary reports nothing");
        let replayed = Arc::new(AtomicU64::new(100));
        m.track_replay(replayed.clone());
        assert_eq!(
            m.oldest_snapshot_lsn(),
            Some(100),
            "no query: the replay position"
        );
        let (a, b) = (
            m.register(Arc::new(AtomicBool::new(false))),
            m.register(Arc::new(AtomicBool::new(false))),
        );
        m.snapshot_in(&a, Xid::INVALID);
        replayed.store(200, Ordering::SeqCst);
        m.snapshot_in(&b, Xid::INVALID);
        replayed.store(300, Ordering::SeqCst);
        assert_eq!(m.oldest_snapshot_lsn(), Some(100), "the older query");
        a.release();
        assert_eq!(m.oldest_snapshot_lsn(), Some(200));
        b.release();
        assert_eq!(m.oldest_snapshot_lsn(), Some(300));
        m.unregister(&a);
        m.unregister(&b);

        // The primary's side: a hold is a slot at a CSN of its choosing.
        for _ in 0..3 {
            let x = m.assign_xid();
            m.publish_commit(x);
        }
        let hold = m.register(Arc::new(AtomicBool::new(false)));
        m.hold(&hold, 2);
        assert_eq!(m.horizon(), 2);
        m.hold(&hold, 3);
        assert_eq!(m.horizon(), 3);
        hold.release();
        assert_eq!(m.horizon(), m.last_csn());
        m.unregister(&hold);
    }

    #[test]
    fn a_checkpoint_takes_only_the_status_pages_that_changed() {
        let per_page = crate::control::XACTS_PER_PAGE;
        let m = XactManager::new(Xid(2 * per_page + 5), &[]);
        assert!(m.take_dirty_pages().is_empty(), "nothing changed yet");
        let a = m.assign_xid(); // page 2
        m.mark_committing(a);
        m.redo_abort(Xid(per_page + 1)); // page 1 (as redo sets it)
        let pages = m.take_dirty_pages();
        assert_eq!(
            pages.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![1, 2]
        );
        // COMMITTING counts as committed in what the checkpoint writes.
        assert_eq!(
            pages[1].1[(a.0 % per_page / 4) as usize] >> (2 * (a.0 % 4)) & 0b11,
            0b01
        );
        assert!(m.take_dirty_pages().is_empty(), "taken once");
        m.publish_commit(a);
        assert!(
            m.take_dirty_pages().is_empty(),
            "publishing changes nothing durable: the page already says committed"
        );
        m.abort(m.assign_xid());
        assert_eq!(m.take_dirty_pages().len(), 1, "an abort marks its page");
        m.redirty_pages([7]);
        assert_eq!(m.take_dirty_pages()[0].0, 7);
        // A store loaded at start-up is durable: nothing to write.
        let loaded = XactManager::new(Xid(10), &[0, 0, 0, CLOG_COMMITTED, CLOG_ABORTED]);
        assert!(loaded.take_dirty_pages().is_empty());
    }

    #[test]
    fn deadlock_is_detected() {
        let m = Arc::new(XactManager::new(Xid::FIRST_NORMAL, &[]));
        let a = m.assign_xid();
        let b = m.assign_xid();
        let m2 = m.clone();
        let t = thread::spawn(move || m2.wait_for(a, b, &AtomicBool::new(false)));
        while !m.waits_for.lock().contains_key(&a) {
            thread::yield_now();
        }
        let e = m.wait_for(b, a, &AtomicBool::new(false)).unwrap_err();
        assert_eq!(e.sqlstate, SqlState::DEADLOCK_DETECTED);
        m.abort(b);
        t.join().unwrap().unwrap();
    }

    #[test]
    fn recovery_aborts_unresolved() {
        let m = XactManager::new(Xid(10), &[0, 0, 0, 2, 1, 0]);
        assert_eq!(m.status(Xid(3)), XidStatus::Committed(1));
        assert_eq!(m.status(Xid(4)), XidStatus::Aborted);
        m.redo_commit(Xid(7));
        m.redo_commit(Xid(6));
        // Replayed commits become visible one by one, in the order of their records (a hot
        // standby's snapshots).
        assert_eq!(m.status(Xid(7)), XidStatus::Committed(2));
        assert_eq!(m.status(Xid(6)), XidStatus::Committed(3));
        let snap = Snapshot {
            xid: Xid::INVALID,
            csn: 2,
        };
        assert!(m.visible(&snap, Xid(7)) && !m.visible(&snap, Xid(6)));
        m.abort_unresolved();
        assert_eq!(m.status(Xid(5)), XidStatus::Aborted);
        assert_eq!(m.status(Xid(7)), XidStatus::Committed(2));
        assert_eq!(m.next_xid(), Xid(10));
    }

    #[test]
    fn truncation_forgets_old_xids_and_settled_chunks_read_the_same() {
        let m = XactManager::new(Xid::FIRST_NORMAL, &[]);
        let mut xids = Vec::new();
        let mut chunk2_csn = 0;
        while m.next_xid().0 < 3 * CHUNK + 10 {
            if m.next_xid().0 == 2 * CHUNK {
                chunk2_csn = m.snapshot(Xid::INVALID).csn;
            }
            let x = m.assign_xid();
            if x.0 % 3 == 0 {
                m.abort(x);
            } else {
                m.mark_committing(x);
                m.publish_commit(x);
            }
            xids.push(x);
        }
        let running = m.assign_xid();
        let before: Vec<XidStatus> = xids.iter().map(|&x| m.status(x)).collect();
        // A snapshot older than the last commits keeps their chunk open.
        let slot = m.register(Arc::new(AtomicBool::new(false)));
        slot.csn.store(chunk2_csn, Ordering::SeqCst);
        assert_eq!(
            m.settle(m.oldest_running(), m.horizon()),
            2,
            "chunks 0 and 1"
        );
        assert_eq!(m.chunk_counts(), (2, 2));
        m.unregister(&slot);
        assert_eq!(m.settle(m.oldest_running(), m.horizon()), 1, "chunk 2 now");
        assert_eq!(m.chunk_counts(), (1, 3), "chunk 3 holds a running xid");
        // A settled commit reads as CSN 0: visible to every snapshot, as it was to them all.
        for (x, b) in xids.iter().zip(&before) {
            let now = m.status(*x);
            match b {
                XidStatus::Committed(_) if x.0 < 3 * CHUNK => {
                    assert_eq!(now, XidStatus::Committed(0))
                }
                _ => assert_eq!(now, *b, "xid {}", x.0),
            }
        }
        assert_eq!(m.durable_status(Xid(5)), CLOG_COMMITTED);
        assert_eq!(m.durable_status(Xid(6)), CLOG_ABORTED);
        // Redo replaying an outcome into a settled chunk is harmless.
        m.redo_abort(Xid(6));
        // Truncation: below the oldest xid everything reads committed, the chunks are gone,
        // and neither redo nor a dirty page brings them back.
        m.truncate(Xid(2 * CHUNK + 1));
        assert_eq!(m.oldest_xid(), Xid(2 * CHUNK + 1));
        assert_eq!(m.chunk_counts(), (1, 1));
        assert_eq!(m.status(Xid(6)), XidStatus::Committed(0));
        assert_eq!(m.status(Xid(2 * CHUNK + 1)), XidStatus::Aborted);
        m.redo_abort(Xid(7));
        assert_eq!(m.status(Xid(7)), XidStatus::Committed(0));
        assert!(m
            .take_dirty_pages()
            .iter()
            .all(|(n, _)| *n >= (2 * CHUNK + 1) / crate::control::XACTS_PER_PAGE));
        m.truncate(Xid(5));
        assert_eq!(m.oldest_xid(), Xid(2 * CHUNK + 1), "never moves back");
        assert_eq!(m.status(Xid::ABORTED), XidStatus::Aborted);
        assert_eq!(m.status(running), XidStatus::InProgress);
        m.abort(running);
    }

    #[test]
    fn a_cut_waits_for_the_snapshots_registered_when_it_was_computed() {
        let m = XactManager::new(Xid::FIRST_NORMAL, &[]);
        let commit = || {
            let x = m.assign_xid();
            m.publish_commit(x);
            x
        };
        commit();
        let reader = m.register(Arc::new(AtomicBool::new(false)));
        m.snapshot_in(&reader, Xid::INVALID);
        // First checkpoint: the cut is queued, nothing is in force yet.
        assert_eq!(m.next_oldest_xid(Xid(100)), Xid::FIRST_NORMAL);
        commit();
        // The reader that was there when it was computed holds it back.
        assert_eq!(m.next_oldest_xid(Xid(200)), Xid::FIRST_NORMAL);
        m.unregister(&reader);
        // A snapshot taken after the second cut holds back neither (each cut moves the CSN
        // past its stamp, with or without a commit).
        let later = m.register(Arc::new(AtomicBool::new(false)));
        m.snapshot_in(&later, Xid::INVALID);
        assert_eq!(m.next_oldest_xid(Xid(300)), Xid(200));
        m.unregister(&later);
        assert_eq!(m.next_oldest_xid(Xid(300)), Xid(300));
        // Never back.
        m.truncate(Xid(300));
        assert_eq!(m.next_oldest_xid(Xid(50)), Xid(300));
        assert_eq!(m.next_oldest_xid(Xid(50)), Xid(300));
    }

    #[test]
    fn start_up_settles_the_chunks_whose_xids_all_have_an_outcome() {
        let n = CHUNK as usize + 10;
        let durable: Vec<u8> = (0..n)
            .map(|x| match x {
                0..=2 => CLOG_UNKNOWN,
                x if x % 5 == 0 => CLOG_ABORTED,
                x if x == n - 3 => CLOG_UNKNOWN,
                _ => CLOG_COMMITTED,
            })
            .collect();
        let m = XactManager::load(Xid(n as u64 + 5), Xid::FIRST_NORMAL, 0, &durable);
        assert_eq!(m.chunk_counts(), (1, 1), "chunk 0 settled, chunk 1 open");
        assert!(
            m.take_dirty_pages().is_empty(),
            "what was loaded is durable"
        );
        assert_eq!(m.status(Xid(5)), XidStatus::Aborted);
        assert_eq!(m.status(Xid(7)), XidStatus::Committed(0));
        assert_eq!(m.status(Xid(CHUNK + 1)), XidStatus::Committed(1));
        assert_eq!(m.status(Xid(CHUNK + 4)), XidStatus::Aborted);
        assert_eq!(m.status(Xid(n as u64 - 3)), XidStatus::InProgress);
        m.abort_unresolved();
        assert_eq!(m.status(Xid(n as u64 - 3)), XidStatus::Aborted);
        assert_eq!(m.status(Xid(n as u64 + 2)), XidStatus::Aborted);
        assert_eq!(
            m.status(Xid(7)),
            XidStatus::Committed(0),
            "settled chunks are skipped"
        );
    }
}
