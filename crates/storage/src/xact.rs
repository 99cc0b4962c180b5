//! Transaction status, snapshots, and waits for other transactions.
//!
//! **Visibility by commit sequence number (CSN).** Every committed transaction gets a CSN when it
//! becomes visible, which is *after* its commit record is durable (with
//! `synchronous_commit = on`). A read-committed statement's snapshot is the last published CSN;
//! a row version is visible if its `xmin` committed with CSN <= snapshot (or is our own xid) and
//! its `xmax` did not. CSNs are published in order under a tiny mutex, so a snapshot that
//! includes CSN c also sees the status store of every transaction with CSN <= c.
//!
//! **Durable status (the "clog").** The status of every xid below `next_xid` is one byte
//! (0 unknown / in progress, 1 aborted, 2 committed) in `pg_xact/status`, written at each
//! checkpoint. Xids after the checkpoint's redo point get their status from commit and abort
//! records during redo; any xid still unknown after redo was in progress at the crash and is
//! aborted. The commit path holds `commit_lock` shared from inserting its commit record until it
//! has marked the xid COMMITTING; the checkpoint takes it exclusively while it fixes the redo
//! point (PostgreSQL's `DELAY_CHKPT_START`), so a commit record before the redo point always has
//! its status in the checkpoint's status file.
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

const CHUNK: u64 = 1 << 16;

/// In-memory status values.
const ST_UNKNOWN: u64 = 0;
const ST_ABORTED: u64 = 1;
const ST_COMMITTING: u64 = 2;
const ST_CSN_BASE: u64 = 16;

/// Durable status byte values in `pg_xact/status`.
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

struct XidLock {
    done: Mutex<bool>,
    cond: Condvar,
}

/// The transaction manager.
pub struct XactManager {
    next_xid: AtomicU64,
    chunks: RwLock<Vec<Arc<[AtomicU64]>>>,
    last_csn: AtomicU64,
    publish: Mutex<()>,
    active: Mutex<HashMap<Xid, Arc<XidLock>>>,
    /// `active.len()`, readable without the lock (the group-commit leader reads it).
    active_n: AtomicUsize,
    waits_for: Mutex<HashMap<Xid, Xid>>,
    /// Held shared by committers from commit-record insertion until the xid is COMMITTING;
    /// exclusively by the checkpoint while it fixes the redo point.
    pub commit_lock: RwLock<()>,
}

impl XactManager {
    /// A manager whose next xid is `next_xid`. `durable` is the loaded status file (index = xid).
    pub fn new(next_xid: Xid, durable: &[u8]) -> XactManager {
        let m = XactManager {
            next_xid: AtomicU64::new(next_xid.0.max(Xid::FIRST_NORMAL.0)),
            chunks: RwLock::new(Vec::new()),
            last_csn: AtomicU64::new(1),
            publish: Mutex::new(()),
            active: Mutex::new(HashMap::new()),
            active_n: AtomicUsize::new(0),
            waits_for: Mutex::new(HashMap::new()),
            commit_lock: RwLock::new(()),
        };
        for (x, &s) in durable.iter().enumerate() {
            match s {
                CLOG_COMMITTED => m.set(Xid(x as u64), ST_CSN_BASE + 1),
                CLOG_ABORTED => m.set(Xid(x as u64), ST_ABORTED),
                _ => {}
            }
        }
        m
    }

    fn slot<R>(&self, xid: Xid, f: impl FnOnce(&AtomicU64) -> R) -> Option<R> {
        let chunks = self.chunks.read();
        let c = chunks.get((xid.0 / CHUNK) as usize)?;
        Some(f(&c[(xid.0 % CHUNK) as usize]))
    }

    fn set(&self, xid: Xid, v: u64) {
        if self.slot(xid, |s| s.store(v, Ordering::Release)).is_some() {
            return;
        }
        let mut chunks = self.chunks.write();
        while chunks.len() <= (xid.0 / CHUNK) as usize {
            chunks.push((0..CHUNK).map(|_| AtomicU64::new(0)).collect());
        }
        chunks[(xid.0 / CHUNK) as usize][(xid.0 % CHUNK) as usize].store(v, Ordering::Release);
    }

    fn raw(&self, xid: Xid) -> u64 {
        self.slot(xid, |s| s.load(Ordering::Acquire))
            .unwrap_or(ST_UNKNOWN)
    }

    /// Status of `xid`.
    pub fn status(&self, xid: Xid) -> XidStatus {
        if xid == Xid::FROZEN {
            return XidStatus::Committed(0);
        }
        match self.raw(xid) {
            ST_ABORTED => XidStatus::Aborted,
            v if v >= ST_CSN_BASE => XidStatus::Committed(v - ST_CSN_BASE),
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
    pub fn assign_xid(&self) -> Xid {
        let xid = Xid(self.next_xid.fetch_add(1, Ordering::AcqRel));
        let lock = Arc::new(XidLock {
            done: Mutex::new(false),
            cond: Condvar::new(),
        });
        let mut active = self.active.lock();
        active.insert(xid, lock);
        self.active_n.store(active.len(), Ordering::Release);
        drop(active);
        xid
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
            self.set(xid, ST_CSN_BASE + csn);
            self.last_csn.store(csn, Ordering::Release);
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
        self.last_csn.store(csn, Ordering::Release);
    }

    /// Redo of an abort record.
    pub fn redo_abort(&self, xid: Xid) {
        self.observe_xid(xid);
        self.set(xid, ST_ABORTED);
    }

    /// End of recovery: every xid below `next_xid` with no outcome was running at the crash.
    pub fn abort_unresolved(&self) {
        let next = self.next_xid.load(Ordering::Acquire);
        for x in Xid::FIRST_NORMAL.0..next {
            if self.raw(Xid(x)) == ST_UNKNOWN || self.raw(Xid(x)) == ST_COMMITTING {
                if self.raw(Xid(x)) == ST_UNKNOWN {
                    self.set(Xid(x), ST_ABORTED);
                }
            }
        }
    }

    /// The durable status bytes for xids `0..next_xid` (checkpoint). COMMITTING counts as
    /// committed: the checkpoint flushes WAL past every such commit record before writing.
    pub fn durable_snapshot(&self) -> Vec<u8> {
        let next = self.next_xid.load(Ordering::Acquire);
        (0..next)
            .map(|x| match self.raw(Xid(x)) {
                ST_ABORTED => CLOG_ABORTED,
                ST_COMMITTING => CLOG_COMMITTED,
                v if v >= ST_CSN_BASE => CLOG_COMMITTED,
                _ => CLOG_UNKNOWN,
            })
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

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
        assert_eq!(m.durable_snapshot()[a.0 as usize], CLOG_COMMITTED);
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
}
