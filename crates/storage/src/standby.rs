//! Standby mode: continuous replay of the WAL a walreceiver writes (PostgreSQL's startup
//! process in standby mode, `PerformWalRecovery` with `StandbyMode`), hot-standby snapshots,
//! restartpoints (`CreateRestartPoint`), and promotion. DESIGN.md beside this crate, "Standby
//! mode", gives the invariants, the protocol and the crash windows.
//!
//! The walreceiver (the server crate's, which speaks the replication protocol) writes WAL with
//! [`walnut_wal::receive::ReceivedWal`] and publishes its flush position here
//! ([`Recovery::set_received`]); the startup thread reads records up to that position and
//! applies them ([`crate::recovery::apply`]), or, with `recovery_workers` > 1 and while it is
//! at least `recovery_parallel_backlog` behind, hands their blocks to the redo workers and
//! publishes commits at the watermark (`ParallelReplay`, [`crate::recovery::parallel`]);
//! the restartpointer thread makes restartpoints at replayed
//! (published) checkpoint records.

use crate::control::{self, ControlFile, DbState};
use crate::recovery::{self, parallel::Pipeline, Applied};
use crate::stats::{self, BackendType};
use crate::Storage;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use walnut_common::{Error, Lsn, RelFileId, Result, SqlState, Xid};
use walnut_wal::{
    parse_segment_file_name, segment_of, DecodedRecord, WalReader, RECORD_MULTI_BLOCK_ATOMIC,
};

/// The file whose presence in the data directory starts the server as a standby (PostgreSQL's
/// `standby.signal`).
pub const STANDBY_SIGNAL: &str = "standby.signal";

/// The file `walnut promote` creates to ask a running standby to promote (PostgreSQL's
/// `promote` signal file, which `pg_ctl promote` writes before it signals the postmaster);
/// the startup thread looks for it whenever it waits for WAL, and removes it.
pub const PROMOTE_SIGNAL: &str = "promote";

/// The longest the startup thread sleeps before looking for new WAL again (it is also woken
/// when the receiver flushes).
const REPLAY_POLL: Duration = Duration::from_millis(100);
/// Busy time [`ApplyMeter`] gathers before it publishes a measurement.
const METER_BUSY: Duration = Duration::from_millis(200);
/// Wall time after which [`ApplyMeter`] publishes what it has, if at least
/// [`METER_MIN_RECORDS`] records were replayed meanwhile.
const METER_WINDOW: Duration = Duration::from_secs(1);
/// See [`METER_WINDOW`].
const METER_MIN_RECORDS: u64 = 64;
/// Records between two looks at the clock in a long busy stretch.
const METER_CLOCK_EVERY: u32 = 1024;

/// Records replay may apply past a commit that wants apply feedback before it reports it
/// without having caught up (about ten pgbench transactions).
const FEEDBACK_BATCH: u32 = 64;

/// What a standby shares between its walreceiver, its startup (replay) thread, its
/// restartpointer and the sessions that ask (PostgreSQL's `XLogRecoveryCtlData` and
/// `WalRcvData`, in part). Positions are LSNs (bytes).
pub struct Recovery {
    /// Where streaming starts: the end of the valid WAL found at start-up.
    start_lsn: Lsn,
    /// The walreceiver's write and flush positions.
    received_write: AtomicU64,
    received_flush: AtomicU64,
    /// End of the last record replayed, stored only after every commit before it is published
    /// (snapshots record it: [`crate::xact::XactManager::track_replay`]).
    replayed: Arc<AtomicU64>,
    /// Commit time of the last commit replayed, µs since 2000-01-01 (`i64::MIN`: none yet).
    last_commit_ts: AtomicI64,
    /// `pg_wal_replay_pause()`.
    paused: AtomicBool,
    /// Promotion was asked for; the receiver stops, replay ends at the received WAL's end.
    promote: AtomicBool,
    /// Recovery has ended (promoted): the server is a primary.
    ended: AtomicBool,
    /// A walreceiver thread runs: promotion waits for it to end, so that everything it
    /// flushed (and may have reported to a waiting synchronous commit) is replayed.
    receiver_running: AtomicBool,
    /// `recovery_min_apply_delay`, ms.
    min_apply_delay_ms: AtomicU64,
    /// `max_standby_streaming_delay`, ms (-1: wait for ever).
    max_streaming_delay_ms: AtomicI64,
    /// Queries cancelled because replay removed row versions they could need
    /// (`pg_stat_database_conflicts.confl_snapshot`).
    conflicts_snapshot: AtomicU64,
    /// Replay's apply capacity ([`ApplyMeter`]): WAL bytes and records per second of busy
    /// time; 0 until measured.
    apply_bytes_per_sec: AtomicU64,
    apply_records_per_sec: AtomicU64,
    /// The last checkpoint record replayed: (its LSN, its redo point), a restartpoint's
    /// candidate.
    restart_candidate: Mutex<Option<recovery::CheckpointSeen>>,
    /// The checkpoint record of the last restartpoint (or of the control file at start-up).
    last_restartpoint: Mutex<Lsn>,
    /// Guards the waits below.
    lock: Mutex<()>,
    /// The receiver flushed, replay was resumed or promotion asked: the startup thread looks.
    wake: Condvar,
    /// Replay passed a commit record flagged `COMMIT_APPLY_FEEDBACK` (its committer waits
    /// for `remote_apply`), or caught up with the receiver: the walreceiver reports it. Not
    /// for every record or commit: each status update wakes the primary's walsender.
    applied: Condvar,
    /// A checkpoint record was replayed, or recovery stops or ends: the restartpointer
    /// looks.
    restart_wake: Condvar,
    stop: AtomicBool,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// What the walreceiver reports for `pg_stat_wal_receiver` (`None`: not running).
    pub receiver: Mutex<Option<ReceiverInfo>>,
}

/// The walreceiver's state as `pg_stat_wal_receiver` shows it (PostgreSQL's `WalRcvData`).
#[derive(Clone, Debug, Default)]
pub struct ReceiverInfo {
    /// `streaming`, `starting`, `waiting` or `stopping`.
    pub status: &'static str,
    /// Where this connection's streaming started.
    pub receive_start_lsn: Lsn,
    /// The primary's send time of the last message, µs since 2000-01-01.
    pub last_msg_send_time: Option<i64>,
    /// When the last message arrived, µs since 2000-01-01.
    pub last_msg_receipt_time: Option<i64>,
    /// The primary's WAL end as its last message said.
    pub latest_end_lsn: Lsn,
    /// `primary_slot_name`, if set.
    pub slot_name: Option<String>,
    /// The primary's host and port.
    pub sender_host: String,
    /// See `sender_host`.
    pub sender_port: u16,
    /// `primary_conninfo` with any password hidden.
    pub conninfo: String,
}

impl Recovery {
    fn new(start: Lsn, checkpoint: Lsn) -> Recovery {
        Recovery {
            start_lsn: start,
            received_write: AtomicU64::new(start.0),
            received_flush: AtomicU64::new(start.0),
            replayed: Arc::new(AtomicU64::new(start.0)),
            last_commit_ts: AtomicI64::new(i64::MIN),
            paused: AtomicBool::new(false),
            promote: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            receiver_running: AtomicBool::new(false),
            min_apply_delay_ms: AtomicU64::new(0),
            max_streaming_delay_ms: AtomicI64::new(30_000),
            conflicts_snapshot: AtomicU64::new(0),
            apply_bytes_per_sec: AtomicU64::new(0),
            apply_records_per_sec: AtomicU64::new(0),
            restart_candidate: Mutex::new(None),
            last_restartpoint: Mutex::new(checkpoint),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            applied: Condvar::new(),
            restart_wake: Condvar::new(),
            stop: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            receiver: Mutex::new(None),
        }
    }

    /// Where the walreceiver starts streaming at start-up: the end of the valid local WAL.
    pub fn start_lsn(&self) -> Lsn {
        self.start_lsn
    }

    /// The walreceiver's positions: (written, flushed) (`pg_last_wal_receive_lsn()` is the
    /// flushed one).
    pub fn received(&self) -> (Lsn, Lsn) {
        (
            Lsn(self.received_write.load(Ordering::Acquire)),
            Lsn(self.received_flush.load(Ordering::Acquire)),
        )
    }

    /// The walreceiver publishes what it has written and made durable; replay may then read
    /// up to `flush`.
    pub fn set_received(&self, write: Lsn, flush: Lsn) {
        self.received_write.fetch_max(write.0, Ordering::AcqRel);
        if self.received_flush.fetch_max(flush.0, Ordering::AcqRel) < flush.0 {
            self.wake_startup();
        }
    }

    /// End of the last record replayed (`pg_last_wal_replay_lsn()`).
    pub fn replay_lsn(&self) -> Lsn {
        Lsn(self.replayed.load(Ordering::Acquire))
    }

    /// Replay's apply capacity: (WAL bytes, records) it replays per second while it has WAL
    /// to replay ([`ApplyMeter`]); (0, 0) until measured. The walreceiver reports it to the
    /// primary, whose `pg_stat_replication` shows it and whose `max_standby_apply_lag` uses it.
    pub fn apply_capacity(&self) -> (u64, u64) {
        (
            self.apply_bytes_per_sec.load(Ordering::Relaxed),
            self.apply_records_per_sec.load(Ordering::Relaxed),
        )
    }

    /// Commit time of the last commit replayed, µs since 2000-01-01
    /// (`pg_last_xact_replay_timestamp()`); `None` before the first.
    pub fn last_commit_timestamp(&self) -> Option<i64> {
        Some(self.last_commit_ts.load(Ordering::Acquire)).filter(|&t| t != i64::MIN)
    }

    /// Waits up to `timeout` for replay to pass `past`; returns the replay position.
    pub fn wait_applied(&self, past: Lsn, timeout: Duration) -> Lsn {
        let mut g = self.lock.lock();
        if self.replay_lsn() <= past && !self.stopping() {
            self.applied.wait_for(&mut g, timeout);
        }
        self.replay_lsn()
    }

    /// `pg_wal_replay_pause()` / `pg_wal_replay_resume()`.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Release);
        self.wake_startup();
    }

    /// Wakes the startup thread to look again (under the lock its waits check under).
    fn wake_startup(&self) {
        let _g = self.lock.lock();
        self.wake.notify_all();
    }

    /// `pg_is_wal_replay_paused()`.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    /// `max_standby_streaming_delay`, ms, -1 = for ever (reloadable): how long replay waits for
    /// queries whose snapshots a replayed prune conflicts with before it cancels them.
    pub fn set_max_streaming_delay_ms(&self, ms: i64) {
        self.max_streaming_delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Queries cancelled for a snapshot conflict with replay so far
    /// (`pg_stat_database_conflicts.confl_snapshot`).
    pub fn conflicts_snapshot(&self) -> u64 {
        self.conflicts_snapshot.load(Ordering::Relaxed)
    }

    /// `recovery_min_apply_delay`, ms (reloadable).
    pub fn set_min_apply_delay_ms(&self, ms: u64) {
        self.min_apply_delay_ms.store(ms, Ordering::Relaxed);
        self.wake_startup();
    }

    /// Asks for promotion (`pg_promote()`, `walnut promote`): the walreceiver stops
    /// ([`Recovery::promote_requested`]), replay applies the WAL received so far, and the
    /// storage opens for writes.
    pub fn request_promote(&self) {
        self.promote.store(true, Ordering::Release);
        self.paused.store(false, Ordering::Release);
        let _g = self.lock.lock();
        self.wake.notify_all();
        self.applied.notify_all();
        self.restart_wake.notify_all();
    }

    /// The walreceiver says it runs (`true`, before its first connection) or has ended
    /// (`false`, after its last flush).
    pub fn set_receiver_running(&self, running: bool) {
        self.receiver_running.store(running, Ordering::Release);
        self.wake_startup();
    }

    /// True once promotion was asked for: the walreceiver ends.
    pub fn promote_requested(&self) -> bool {
        self.promote.load(Ordering::Acquire)
    }

    /// True once recovery has ended (the server was promoted).
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// True while the standby shuts down: the walreceiver ends.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn stop_and_join(&self) {
        self.stop.store(true, Ordering::Release);
        {
            let _g = self.lock.lock();
            self.wake.notify_all();
            self.applied.notify_all();
            self.restart_wake.notify_all();
        }
        let me = std::thread::current().id();
        for t in std::mem::take(&mut *self.threads.lock()) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// Opens a standby after [`Storage::new`]: replays the local WAL from the control file's redo
/// point to its end (the consistent point; a base backup's copy must reach its backup's end),
/// loads the catalog, and starts the startup thread, which goes on replaying what the
/// walreceiver writes, and the restartpointer. No WAL is attached: nothing may write.
///
/// # Errors
/// As crash recovery: corruption (a missing checkpoint record) and I/O errors; 55000 if the
/// local WAL ends before a base backup's end.
pub(crate) fn open(
    st: Arc<Storage>,
    ctl: &ControlFile,
    backup_end: Option<Lsn>,
) -> Result<Arc<Storage>> {
    let mut reader = recovery::redo_reader(&st, ctl.redo_lsn)?;
    // The local WAL came from the primary: a torn tail (a receiver's unsynced writes) is
    // where streaming resumes, whatever flush marks the primary wrote after it.
    reader.set_limit(Lsn(u64::MAX - 1));
    let mut saw_checkpoint = !ctl.checkpoint_lsn.is_valid();
    let mut candidate = None;
    stats::set_backend_type(BackendType::Startup);
    // No session reads yet: the local WAL replays as in crash recovery, blocks in parallel.
    let n = recovery::replay_to_end(&st, &mut reader, st.config().recovery_workers, |lsn, a| {
        saw_checkpoint |= lsn == ctl.checkpoint_lsn;
        candidate = a.checkpoint.or(candidate);
    });
    stats::set_backend_type(BackendType::ClientBackend);
    let n = n?;
    if !saw_checkpoint {
        return Err(Error::corruption(format!(
            "could not locate a valid checkpoint record at {}",
            ctl.checkpoint_lsn
        )));
    }
    let end = reader.end_lsn();
    if let Some(b) = backup_end.filter(|&b| end < b) {
        return Err(Error::user(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "WAL ends before end of online backup: redo reached {end}, the backup ends at {b}"
            ),
        )
        .with_detail(
            "All WAL generated while online backup was taken must be available at recovery.",
        ));
    }
    tracing::info!(records = n, redo = %ctl.redo_lsn, end = %end, "entering standby mode; consistent recovery state reached");
    let rec = Arc::new(Recovery::new(end, ctl.checkpoint_lsn));
    *rec.restart_candidate.lock() = candidate;
    let _ = st.recovery.set(rec.clone());
    st.xact.track_replay(rec.replayed.clone());
    st.catalog.reload(&st)?;
    crate::start_workers(&st)?;
    reader.set_limit(end);
    let weak = Arc::downgrade(&st);
    let startup = std::thread::Builder::new()
        .name("startup".into())
        .spawn({
            let rec = rec.clone();
            move || startup(weak, rec, reader)
        })
        .map_err(|e| Error::io("could not start the startup process", e))?;
    let weak = Arc::downgrade(&st);
    let restartpointer = std::thread::Builder::new()
        .name("checkpointer".into())
        .spawn({
            let rec = rec.clone();
            move || restartpointer(weak, rec)
        })
        .map_err(|e| Error::io("could not start checkpointer", e))?;
    rec.threads.lock().extend([startup, restartpointer]);
    Ok(st)
}

/// The startup thread: applies records as the receiver makes them durable, publishing each
/// commit (a new CSN: the snapshot of statements that start after it) and reloading the
/// catalog after a commit that changed it. Ends at shutdown, or at promotion once the
/// received WAL is replayed, when it opens the storage for writes.
fn startup(weak: Weak<Storage>, rec: Arc<Recovery>, mut reader: WalReader) {
    stats::set_backend_type(BackendType::Startup);
    // recovery_workers > 1: while replay is recovery_parallel_backlog behind, blocks apply
    // in the redo workers and commits publish at the watermark ("Parallel redo" in
    // DESIGN.md); caught up, the startup thread applies alone again.
    let mut par = match weak.upgrade() {
        Some(st) if st.config().recovery_workers > 1 => {
            match Pipeline::start(&st, st.config().recovery_workers, true) {
                Ok(pipe) => Some(ParallelReplay {
                    pipe,
                    active: false,
                    backlog: st.config().recovery_parallel_backlog_bytes,
                    prefetcher: recovery::prefetch::Prefetcher::with_window(
                        &st,
                        recovery::parallel::IN_FLIGHT_BOUND,
                    ),
                    waiting: VecDeque::new(),
                    catalog_changed: false,
                    vacuum_unlinks: false,
                }),
                Err(e) => {
                    tracing::warn!("{e}; replaying serially");
                    None
                }
            }
        }
        Some(_) => None,
        None => return,
    };
    let fatal =
        |e: Error| -> ! { walnut_common::panic_fatal(&format!("redo failed: {}", e.message)) };
    let mut catalog_changed = false;
    // The replay position the walreceiver's feedback thread was last woken for.
    let mut notified = rec.replay_lsn();
    // Records applied since a commit that wants apply feedback, not yet reported (`None`:
    // none waits).
    let mut feedback_pending: Option<u32> = None;
    let mut meter = ApplyMeter::new();
    // When replay was last caught up with the receiver: recovery conflicts count their
    // `max_standby_streaming_delay` from here.
    let mut caught_up_at = Instant::now();
    loop {
        if rec.stopping() {
            return;
        }
        let Some(st) = weak.upgrade() else { return };
        if rec.is_paused() {
            if let Some(p) = par.as_mut() {
                // What was read is applied and visible before replay pauses.
                catalog_changed |= p
                    .settle(&st, &rec, &mut notified)
                    .unwrap_or_else(|e| fatal(e));
            }
            meter.idle(&rec, reader.end_lsn());
            let mut g = rec.lock.lock();
            if rec.is_paused() && !rec.stopping() {
                rec.wake.wait_for(&mut g, REPLAY_POLL);
            }
            continue;
        }
        let flush = rec.received().1;
        reader.set_limit(flush);
        let next = match reader.next_record() {
            Ok(r) => r,
            Err(e) => {
                // What the receiver wrote does not decode: log it and read it again later
                // (PostgreSQL's standby likewise retries rather than end recovery). What was
                // read before it is applied and published meanwhile.
                tracing::error!("{e}");
                if let Some(p) = par.as_mut() {
                    catalog_changed |= p
                        .settle(&st, &rec, &mut notified)
                        .unwrap_or_else(|e| fatal(e));
                }
                meter.idle(&rec, reader.end_lsn());
                reader.forget_cache();
                let mut g = rec.lock.lock();
                rec.wake.wait_for(&mut g, Duration::from_secs(1));
                continue;
            }
        };
        let Some(r) = next else {
            if let Some(p) = par.as_mut() {
                catalog_changed |= p
                    .settle(&st, &rec, &mut notified)
                    .unwrap_or_else(|e| fatal(e));
            }
            caught_up_at = Instant::now();
            // Caught up. Flush marks after the last record were read past: replay is there
            // too.
            meter.idle(&rec, reader.end_lsn());
            rec.replayed.fetch_max(reader.end_lsn().0, Ordering::AcqRel);
            if rec.replay_lsn() > notified {
                notified = rec.replay_lsn();
                feedback_pending = None;
                let _g = rec.lock.lock();
                rec.applied.notify_all();
            }
            let signal = st.dir.join(PROMOTE_SIGNAL);
            if st.vfs.exists(&signal) {
                let _ = st.vfs.remove(&signal);
                rec.request_promote();
            }
            if rec.promote_requested() && rec.receiver_running.load(Ordering::Acquire) {
                // The receiver's last flush may still come: wait for it to end.
                let mut g = rec.lock.lock();
                rec.wake.wait_for(&mut g, REPLAY_POLL);
                continue;
            }
            if rec.promote_requested() && rec.received().1 > flush {
                continue;
            }
            if rec.promote_requested() {
                drop(st);
                let Some(st) = weak.upgrade() else { return };
                if let Err(e) = finish_recovery(&st, &rec, reader.end_lsn()) {
                    walnut_common::panic_fatal(&format!("could not end recovery: {e}"));
                }
                return;
            }
            let mut g = rec.lock.lock();
            if rec.received().1 == flush && !rec.stopping() && !rec.promote_requested() {
                rec.wake.wait_for(&mut g, REPLAY_POLL);
            }
            continue;
        };
        if let Some(p) = par.as_mut() {
            if !p.active && flush.0.saturating_sub(r.lsn.0) >= p.backlog {
                // Far enough behind for the workers to pay: a parallel stretch starts, and
                // lasts until replay catches up (`settle`).
                tracing::debug!(
                    behind = flush.0.saturating_sub(r.lsn.0),
                    "replaying in parallel"
                );
                p.active = true;
                p.catalog_changed = std::mem::take(&mut catalog_changed);
                if feedback_pending.take().is_some() {
                    // Serial replay owed a `remote_apply` reply for what it applied.
                    let _g = rec.lock.lock();
                    notified = rec.replay_lsn();
                    rec.applied.notify_all();
                }
            }
        }
        let conflicts = crate::heap::snapshot_conflicts(&r.record).unwrap_or_else(|e| fatal(e));
        if let Some(xids) = conflicts.filter(|x| !x.is_empty()) {
            let published =
                |x: &Xid| matches!(st.xact.status(*x), crate::xact::XidStatus::Committed(_));
            if !xids.iter().all(published) {
                // A parallel stretch publishes commits at its watermark: a commit that deleted
                // what the prune removes is read but may not be visible yet, and a snapshot
                // taken now must see it.
                if let Some(p) = par.as_mut().filter(|p| p.active) {
                    p.drain(&st, &rec, &mut notified)
                        .unwrap_or_else(|e| fatal(e));
                }
            }
            resolve_snapshot_conflict(&st, &rec, &xids, caught_up_at);
        }
        let parallel = par.as_ref().is_some_and(|p| p.active);
        if r.record.rmgr == crate::RM_XACT && r.record.info == crate::XACT_COMMIT {
            if let Some(ts) = recovery::commit_timestamp(&r.record.main_data) {
                let delay_ms = rec.min_apply_delay_ms.load(Ordering::Relaxed);
                if let Some(p) = par.as_mut().filter(|p| p.active && delay_ms > 0) {
                    // The workers go on with what came before while the commit waits.
                    p.pipe.flush().unwrap_or_else(|e| fatal(e));
                }
                if delay_ms > 0 && walnut_common::value::now_timestamp() < apply_due(ts, delay_ms) {
                    // Waiting out the delay is not replay's work. (In a parallel stretch
                    // the workers' share of what came before counts up to where replay
                    // was published.)
                    let at = if parallel { rec.replay_lsn() } else { r.lsn };
                    meter.idle(&rec, at);
                }
                if !delay_apply(&rec, ts) {
                    // Stopping, promoting or paused meanwhile: read the record again.
                    reader = match reopen(&st, r.lsn, flush) {
                        Ok(x) => x,
                        Err(e) => walnut_common::panic_fatal(&format!("{e}")),
                    };
                    continue;
                }
                if !parallel {
                    rec.last_commit_ts.store(ts, Ordering::Release);
                }
            }
        }
        meter.record(&rec, r.lsn, r.end_lsn, parallel);
        if let Some(p) = par.as_mut().filter(|p| p.active) {
            p.replay(&st, &rec, r, &mut notified)
                .unwrap_or_else(|e| fatal(e));
            continue;
        }
        let applied = match recovery::apply(&st, &r) {
            Ok(a) => a,
            Err(e) => walnut_common::panic_fatal(&format!(
                "redo of record at {} failed: {}",
                r.lsn, e.message
            )),
        };
        catalog_changed |= applied.catalog;
        if applied.commit && catalog_changed {
            catalog_changed = false;
            reload_catalog(&st);
        }
        if let Some(c) = applied.checkpoint {
            *rec.restart_candidate.lock() = Some(c);
        }
        rec.replayed.store(r.end_lsn.0, Ordering::Release);
        // A `remote_apply` commit waits for its commit record, which says so (PostgreSQL's
        // startup process, too, asks the walreceiver for a reply after a commit record
        // flagged XACT_COMPLETION_APPLY_FEEDBACK). The reply goes when replay catches up
        // with what was received (above), which is at the end of the batch the commit came
        // in: one reply for the commits of a group, not one each. Should replay stay behind,
        // it goes FEEDBACK_BATCH records later. Other progress is reported with the next
        // flush, or when replay catches up.
        if applied.commit && is_feedback(&r.record.main_data) {
            feedback_pending.get_or_insert(0);
        }
        let feedback = match feedback_pending.as_mut() {
            Some(n) if *n >= FEEDBACK_BATCH => true,
            Some(n) => {
                *n += 1;
                false
            }
            None => false,
        };
        if feedback {
            feedback_pending = None;
        }
        if feedback || applied.checkpoint.is_some() {
            let _g = rec.lock.lock();
            if feedback {
                notified = r.end_lsn;
                rec.applied.notify_all();
            }
            if applied.checkpoint.is_some() {
                rec.restart_wake.notify_all();
            }
        }
    }
}

/// Before a prune record whose removed versions `xid` deleted is applied: waits for the queries
/// whose snapshots do not see `xid`'s commit, up to `max_standby_streaming_delay`, then cancels
/// those still running (40001) and waits until they have given their snapshots up
/// (PostgreSQL's `ResolveRecoveryConflictWithSnapshot`). Unlike PostgreSQL, the delay counts
/// from when replay reaches the record, not from when the WAL was received. Returns at once when
/// no snapshot conflicts; gives up waiting if recovery stops.
fn resolve_snapshot_conflict(st: &Storage, rec: &Recovery, xids: &[Xid], since: Instant) {
    let delay = rec.max_streaming_delay_ms.load(Ordering::Relaxed);
    let cancelled = wait_out_snapshot_conflict(&st.xact, xids, since, delay, &|| rec.stopping());
    rec.conflicts_snapshot
        .fetch_add(cancelled, Ordering::Relaxed);
}

/// [`resolve_snapshot_conflict`]'s wait: a snapshot conflicts unless it sees every commit of
/// `xids` (the latest of them, in this standby's commit order); it is cancelled once
/// `delay_ms` (`max_standby_streaming_delay`, -1: for ever) has passed since `since`, when
/// replay was last caught up (PostgreSQL counts from the WAL's receipt: either way a backlog of
/// conflicts holds replay back by the delay once, not once per record). Returns how many
/// snapshots it cancelled.
fn wait_out_snapshot_conflict(
    xact: &crate::xact::XactManager,
    xids: &[Xid],
    since: Instant,
    delay_ms: i64,
    stopping: &dyn Fn() -> bool,
) -> u64 {
    let Some(csn) = conflict_csn(xact, xids) else {
        return 0;
    };
    if xact.conflicting_snapshots(csn).is_empty() {
        return 0;
    }
    let deadline = (delay_ms >= 0).then(|| since + Duration::from_millis(delay_ms as u64));
    let mut signalled = std::collections::HashSet::new();
    loop {
        let waiting = xact.conflicting_snapshots(csn);
        if waiting.is_empty() || stopping() {
            return signalled.len() as u64;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            for s in &waiting {
                if signalled.insert(Arc::as_ptr(s) as usize) {
                    s.signal_conflict();
                }
            }
        }
        std::thread::sleep(CONFLICT_POLL);
    }
}

/// The CSN a snapshot must see not to conflict with a prune whose removed versions `xids`
/// deleted: the latest of their commits here. An xid that is not a commit this standby knows of
/// cannot be seen by anyone, so no snapshot needs what it deleted; `None` if none is.
fn conflict_csn(xact: &crate::xact::XactManager, xids: &[Xid]) -> Option<u64> {
    xids.iter()
        .filter_map(|x| match xact.status(*x) {
            crate::xact::XidStatus::Committed(c) => Some(c),
            _ => None,
        })
        .max()
}

/// How often replay looks at the queries it waits for in a recovery conflict.
const CONFLICT_POLL: Duration = Duration::from_millis(5);

/// What the parallel replay publishes once the watermark reaches the round that carried the
/// blocks of every record before it.
enum Effect {
    /// Records up to this LSN are applied (`pg_last_wal_replay_lsn`).
    Replayed(Lsn),
    /// A commit record: its transaction becomes visible, with this commit time (`xid` invalid:
    /// a commit that removed files, applied whole and so already visible); `feedback`: its
    /// committer waits for `remote_apply`; `catalog`: the catalog changed since the last
    /// published commit.
    Commit {
        xid: Xid,
        ts: Option<i64>,
        feedback: bool,
        catalog: bool,
        end: Lsn,
    },
    /// A checkpoint record: a restartpoint candidate; `end` is the record's end.
    Checkpoint {
        seen: recovery::CheckpointSeen,
        end: Lsn,
    },
}

/// A standby's replay with `recovery_workers` > 1, during a parallel stretch (from a record
/// read at least `backlog` bytes behind the received WAL until replay catches up): the
/// startup thread reads, hands blocks to the pipeline and applies what is not a block's
/// change; commits, restartpoint candidates and the replay position wait in `waiting` until
/// the watermark passes them. Between stretches the pipeline is idle and empty, and the
/// startup thread applies serially.
/// A record that must be seen whole (a B-tree split: `RECORD_MULTI_BLOCK_ATOMIC`) or that
/// removes files waits until everything before it is applied and published, then applies on
/// the startup thread as in serial replay (the split under the index's `tree_lock`).
struct ParallelReplay {
    pipe: Pipeline,
    /// A parallel stretch is under way: records go to `replay`, not to the serial apply.
    active: bool,
    /// `recovery_parallel_backlog`, bytes.
    backlog: u64,
    /// Recovery prefetch of the blocks handed to the workers: the pipeline's queue is the
    /// distance ahead.
    prefetcher: recovery::prefetch::Prefetcher,
    /// (round, effect), in WAL order.
    waiting: VecDeque<(u64, Effect)>,
    /// A record changed the catalog since the last commit record.
    catalog_changed: bool,
    /// A B-tree `DELETE` or a `LINK` without an xid (VACUUM's steps 2 and 3) was handed out
    /// since the last drain.
    vacuum_unlinks: bool,
}

impl ParallelReplay {
    /// Replays one record.
    ///
    /// # Errors
    /// A failure applying it or an earlier record (the caller PANICs).
    fn replay(
        &mut self,
        st: &Arc<Storage>,
        rec: &Recovery,
        d: DecodedRecord,
        notified: &mut Lsn,
    ) -> Result<()> {
        let r = &d.record;
        self.catalog_changed |= r.blocks.iter().any(|b| b.rel == RelFileId::CATALOG);
        if r.flags & RECORD_MULTI_BLOCK_ATOMIC != 0 || recovery::main_needs_barrier(r) {
            self.drain(st, rec, notified)?;
            let a = recovery::apply(st, &d).map_err(|e| recovery::at_record(d.lsn, e))?;
            if a.commit {
                Self::publish_one(
                    st,
                    rec,
                    Effect::Commit {
                        xid: Xid::INVALID,
                        ts: recovery::commit_timestamp(&r.main_data),
                        feedback: is_feedback(&r.main_data),
                        catalog: std::mem::take(&mut self.catalog_changed),
                        end: d.end_lsn,
                    },
                    notified,
                );
            } else {
                Self::publish_one(st, rec, Effect::Replayed(d.end_lsn), notified);
            }
            if let Some(seen) = a.checkpoint {
                let end = d.end_lsn;
                Self::publish_one(st, rec, Effect::Checkpoint { seen, end }, notified);
            }
            return Ok(());
        }
        if (r.rmgr, r.info) == (crate::heap::RM_HEAP, crate::heap::HEAP_VACUUM)
            && self.vacuum_unlinks
        {
            // VACUUM frees slots only after it removed the index entries and cleared the
            // `prev` links that named them, and a reader must not follow either to a free
            // slot: workers apply a round's index blocks after its heap blocks, and blocks of
            // other workers in no order, so those records must be applied first.
            self.drain(st, rec, notified)?;
        }
        self.vacuum_unlinks |= (r.rmgr, r.info)
            == (crate::btree::RM_BTREE, crate::btree::BTREE_DELETE)
            || ((r.rmgr, r.info) == (crate::heap::RM_HEAP, crate::heap::HEAP_LINK)
                && !r.xid.is_valid());
        let DecodedRecord {
            lsn,
            end_lsn,
            record: mut r,
        } = d;
        if r.xid.is_valid() {
            st.xact.observe_xid(r.xid);
        }
        self.prefetcher.record(st, &r);
        if !self.pipe.add(lsn, end_lsn, &mut r)? {
            return Err(self.failure());
        }
        let round = self.pipe.round_of_added();
        let effect = if (r.rmgr, r.info) == (crate::RM_XACT, crate::XACT_COMMIT) {
            // Published, with the transaction's status, at the watermark.
            Effect::Commit {
                xid: r.xid,
                ts: recovery::commit_timestamp(&r.main_data),
                feedback: is_feedback(&r.main_data),
                catalog: std::mem::take(&mut self.catalog_changed),
                end: end_lsn,
            }
        } else {
            // Aborts, file creation, a checkpoint's counters: nothing a reader sees early.
            let mut a = Applied::default();
            recovery::apply_main(st, lsn, &r, &mut a).map_err(|e| recovery::at_record(lsn, e))?;
            match a.checkpoint {
                Some(seen) => Effect::Checkpoint { seen, end: end_lsn },
                None => Effect::Replayed(end_lsn),
            }
        };
        match (self.waiting.back_mut(), effect) {
            // One position per round is enough.
            (Some((last, Effect::Replayed(at))), Effect::Replayed(end)) if *last == round => {
                *at = end;
            }
            (_, effect) => self.waiting.push_back((round, effect)),
        }
        self.publish(st, rec, notified)
    }

    /// Ends a parallel stretch, if one is under way: what was read is applied and published
    /// (`drain`), and replay goes on serially. Returns whether a record changed the catalog
    /// since the last published commit, for serial replay to carry on.
    ///
    /// # Errors
    /// A worker's failure.
    fn settle(&mut self, st: &Arc<Storage>, rec: &Recovery, notified: &mut Lsn) -> Result<bool> {
        if self.active {
            self.drain(st, rec, notified)?;
            self.active = false;
            // What it claimed is applied; what it found cached may be evicted by the next.
            self.prefetcher.reset();
        }
        Ok(std::mem::take(&mut self.catalog_changed))
    }

    /// Sends what was read, waits until all of it is applied, and publishes it.
    ///
    /// # Errors
    /// A worker's failure.
    fn drain(&mut self, st: &Arc<Storage>, rec: &Recovery, notified: &mut Lsn) -> Result<()> {
        self.vacuum_unlinks = false;
        if !self.pipe.barrier()? {
            return Err(self.failure());
        }
        self.publish(st, rec, notified)
    }

    /// Publishes, in WAL order, what waits for rounds the watermark has reached.
    ///
    /// # Errors
    /// A worker's failure: nothing is published after it.
    fn publish(&mut self, st: &Arc<Storage>, rec: &Recovery, notified: &mut Lsn) -> Result<()> {
        // The watermark first: a worker that fails sets the flag before it reports its round
        // (which it then skipped), so a watermark that includes that round comes with the
        // flag set.
        let mark = self.pipe.watermark();
        if self.pipe.failed() {
            return Err(self.failure());
        }
        while self
            .waiting
            .front()
            .is_some_and(|(round, _)| *round <= mark)
        {
            let (_, e) = self.waiting.pop_front().expect("front");
            Self::publish_one(st, rec, e, notified);
        }
        Ok(())
    }

    /// Makes one effect visible.
    fn publish_one(st: &Arc<Storage>, rec: &Recovery, e: Effect, notified: &mut Lsn) {
        match e {
            Effect::Replayed(end) => rec.replayed.store(end.0, Ordering::Release),
            Effect::Commit {
                xid,
                ts,
                feedback,
                catalog,
                end,
            } => {
                if xid.is_valid() {
                    st.xact.redo_commit(xid);
                }
                if let Some(ts) = ts {
                    rec.last_commit_ts.store(ts, Ordering::Release);
                }
                if catalog {
                    reload_catalog(st);
                }
                rec.replayed.store(end.0, Ordering::Release);
                if feedback {
                    // Once per published commit that asks; the rounds batch them.
                    let _g = rec.lock.lock();
                    *notified = end;
                    rec.applied.notify_all();
                }
            }
            Effect::Checkpoint { seen, end } => {
                *rec.restart_candidate.lock() = Some(seen);
                rec.replayed.store(end.0, Ordering::Release);
                let _g = rec.lock.lock();
                rec.restart_wake.notify_all();
            }
        }
    }

    fn failure(&self) -> Error {
        self.pipe
            .take_failure()
            .unwrap_or_else(|| Error::internal("a redo worker failed"))
    }
}

/// Measures replay's apply capacity for [`Recovery::apply_capacity`]: WAL bytes and records
/// replayed per second of *busy* time, the time replay had WAL to replay. A busy stretch
/// starts with the first record read after replay was idle and ends when it is idle again
/// (caught up with the walreceiver, paused, or waiting out `recovery_min_apply_delay`); in a
/// long stretch the clock is read every [`METER_CLOCK_EVERY`] records. Busy time includes
/// reading the WAL, prefetching, and (in a parallel stretch) waiting for the redo workers,
/// because all of them bound how fast replay goes. A caught-up standby replays in short
/// bursts, and its bursts measure its capacity as well as a long catch-up does.
///
/// Every [`METER_BUSY`] of busy time, or every [`METER_WINDOW`] with at least
/// [`METER_MIN_RECORDS`] records, the rates of the time gathered are averaged with the
/// previous figure (half each) and published.
struct ApplyMeter {
    /// The current busy stretch: when it began (or was last folded) and where.
    busy: Option<(Instant, Lsn)>,
    /// Records read since `busy` began.
    records: u64,
    since_clock: u32,
    /// Gathered since the last publication: bytes, records, busy time.
    bytes_acc: u64,
    records_acc: u64,
    busy_acc: Duration,
    window: Instant,
}

impl ApplyMeter {
    fn new() -> ApplyMeter {
        ApplyMeter {
            busy: None,
            records: 0,
            since_clock: 0,
            bytes_acc: 0,
            records_acc: 0,
            busy_acc: Duration::ZERO,
            window: Instant::now(),
        }
    }

    /// Replay read the record at `lsn`, ending at `end`; `parallel`: in a parallel stretch,
    /// where the workers may trail the records read by the pipeline's depth, so a fold
    /// inside the stretch counts up to the published replay position instead.
    fn record(&mut self, rec: &Recovery, lsn: Lsn, end: Lsn, parallel: bool) {
        if self.busy.is_none() {
            self.busy = Some((Instant::now(), lsn));
        }
        self.records += 1;
        self.since_clock += 1;
        if self.since_clock >= METER_CLOCK_EVERY {
            self.since_clock = 0;
            let now = Instant::now();
            if self
                .busy
                .is_some_and(|(t, _)| now.saturating_duration_since(t) >= METER_BUSY)
            {
                let at = if parallel {
                    rec.replay_lsn()
                        .max(self.busy.map_or(Lsn(0), |(_, from)| from))
                } else {
                    end
                };
                self.fold(rec, now, at);
                self.busy = Some((now, at));
            }
        }
    }

    /// Replay is idle from `at` (everything before it applied).
    fn idle(&mut self, rec: &Recovery, at: Lsn) {
        if self.busy.is_some() {
            self.fold(rec, Instant::now(), at);
            self.busy = None;
        }
    }

    fn fold(&mut self, rec: &Recovery, now: Instant, end: Lsn) {
        let Some((t0, from)) = self.busy else { return };
        self.bytes_acc += end.0.saturating_sub(from.0);
        self.records_acc += std::mem::take(&mut self.records);
        self.busy_acc += now.saturating_duration_since(t0);
        let window_done = now.saturating_duration_since(self.window) >= METER_WINDOW
            && self.records_acc >= METER_MIN_RECORDS;
        if self.busy_acc < METER_BUSY && !window_done {
            return;
        }
        let secs = self.busy_acc.as_secs_f64().max(1e-6);
        let blend = |old: &AtomicU64, new: f64| {
            let new = new as u64;
            let old_v = old.load(Ordering::Relaxed);
            old.store(
                if old_v == 0 { new } else { old_v / 2 + new / 2 },
                Ordering::Relaxed,
            );
        };
        blend(&rec.apply_bytes_per_sec, self.bytes_acc as f64 / secs);
        blend(&rec.apply_records_per_sec, self.records_acc as f64 / secs);
        self.bytes_acc = 0;
        self.records_acc = 0;
        self.busy_acc = Duration::ZERO;
        self.window = now;
    }
}

/// Reloads the catalog cache after a replayed commit that changed the catalog; on failure it
/// is marked stale, and the next transaction reloads it.
fn reload_catalog(st: &Storage) {
    if let Err(e) = st.catalog.reload(st) {
        tracing::error!("could not reload the catalog after replay: {e}");
        st.catalog.invalidate();
    }
}

/// Whether a commit record's committer waits for `remote_apply`.
fn is_feedback(main_data: &[u8]) -> bool {
    recovery::commit_flags(main_data) & recovery::COMMIT_APPLY_FEEDBACK != 0
}

/// A reader at `lsn` (a record's start) in streaming mode with `limit`.
fn reopen(st: &Storage, lsn: Lsn, limit: Lsn) -> Result<WalReader> {
    let mut r = recovery::redo_reader(st, lsn)?;
    r.set_limit(limit);
    Ok(r)
}

/// When a commit made at `commit_ts` may apply under `recovery_min_apply_delay` =
/// `delay_ms`, µs since 2000-01-01.
fn apply_due(commit_ts: i64, delay_ms: u64) -> i64 {
    commit_ts.saturating_add(delay_ms as i64 * 1000)
}

/// `recovery_min_apply_delay`: waits until `commit_ts` (µs since 2000) plus the delay has
/// passed. False if it stopped waiting for shutdown, promotion or a pause (the record is then
/// read again), true when the commit may be applied.
fn delay_apply(rec: &Recovery, commit_ts: i64) -> bool {
    loop {
        let delay_ms = rec.min_apply_delay_ms.load(Ordering::Relaxed);
        if delay_ms == 0 || rec.promote_requested() {
            return true;
        }
        let due = apply_due(commit_ts, delay_ms);
        let now = walnut_common::value::now_timestamp();
        if now >= due {
            return true;
        }
        if rec.stopping() || rec.is_paused() {
            return false;
        }
        let mut g = rec.lock.lock();
        rec.wake.wait_for(
            &mut g,
            Duration::from_micros((due - now) as u64).min(REPLAY_POLL),
        );
    }
}

/// The restartpointer (the checkpointer of a standby): makes a restartpoint at the last
/// replayed checkpoint record once `checkpoint_timeout` has passed since the last one, or once
/// `max_wal_size` of WAL has been replayed since its redo point (PostgreSQL's checkpointer in
/// recovery, `CreateRestartPoint`).
fn restartpointer(weak: Weak<Storage>, rec: Arc<Recovery>) {
    stats::set_backend_type(BackendType::Checkpointer);
    let mut last = Instant::now();
    let mut last_redo = Lsn(0);
    loop {
        {
            let mut g = rec.lock.lock();
            if !rec.stopping() && !rec.ended() {
                rec.restart_wake
                    .wait_for(&mut g, Duration::from_millis(200));
            }
        }
        if rec.stopping() || rec.ended() {
            return;
        }
        let Some(st) = weak.upgrade() else { return };
        let Some(recovery::CheckpointSeen {
            lsn: ckpt, redo, ..
        }) = *rec.restart_candidate.lock()
        else {
            continue;
        };
        if ckpt <= *rec.last_restartpoint.lock() {
            continue;
        }
        let timeout = Duration::from_secs(st.checkpoint_timeout_s.load(Ordering::Relaxed).max(1));
        let max_wal = st.max_wal_size_mb.load(Ordering::Relaxed).max(2) << 20;
        if last.elapsed() < timeout && redo.0.saturating_sub(last_redo.0) < max_wal / 2 {
            continue;
        }
        last = Instant::now();
        match restartpoint(&st, &rec, DbState::InProduction) {
            Ok(Some(r)) => last_redo = r,
            Ok(None) => {}
            Err(e) => tracing::error!("restartpoint failed: {e}"),
        }
    }
}

/// Makes a restartpoint at the last replayed checkpoint record, if it is newer than the last
/// restartpoint's: writes every dirty buffer and syncs the files, writes the transaction status
/// file, then the control file naming that checkpoint record and its redo point (a restart
/// replays from there), and removes WAL segments before the redo point's. Returns the redo
/// point used, `None` if there was nothing new.
///
/// Every page written has an LSN at or before the replay position, which is at or before the
/// walreceiver's flush: the WAL-before-data rule holds with the receiver as the WAL's writer.
///
/// # Errors
/// I/O errors writing pages or files. A failed fsync is a PANIC.
fn restartpoint(st: &Storage, rec: &Recovery, state: DbState) -> Result<Option<Lsn>> {
    let _running = st.ckpt_running.lock();
    let Some(recovery::CheckpointSeen {
        lsn: ckpt,
        redo,
        oldest_xid,
    }) = *rec.restart_candidate.lock()
    else {
        return Ok(None);
    };
    if ckpt <= *rec.last_restartpoint.lock() && state != DbState::ShutDown {
        return Ok(None);
    }
    // The primary's cut, once no standby query that began before it was replayed can still
    // hold a header it copied (`XactManager::next_oldest_xid`); never back.
    let oldest_xid = st.xact.next_oldest_xid(oldest_xid);
    let log = st.write_settings().log_checkpoints;
    if log {
        tracing::info!("restartpoint starting: time");
    }
    let started = Instant::now();
    let pages = st.pool.checkpoint_snapshot();
    let combine = st.io_combine_limit() as usize;
    let mut written = 0usize;
    for run in crate::smgr::runs(pages.len(), combine, |i| {
        let (a, b) = (pages[i - 1].1, pages[i].1);
        a.rel == b.rel && b.block.0 == a.block.0 + 1
    }) {
        written += st.pool.write_run_if_dirty(&pages[run])?.len();
    }
    if let Err(e) = st.smgr.sync_all() {
        walnut_common::panic_fatal(&format!("restartpoint: {e}"));
    }
    if let Err(e) = st.smgr.write_free_space_maps() {
        tracing::warn!("{e}; the next restartpoint writes the free-space map again");
    }
    let status = st.xact.take_dirty_pages();
    if let Err(e) = control::write_xact_pages(&*st.vfs, &st.dir, &status) {
        st.xact.redirty_pages(status.iter().map(|(n, _)| *n));
        return Err(e);
    }
    ControlFile {
        state,
        checkpoint_lsn: ckpt,
        redo_lsn: redo,
        next_xid: st.xact.next_xid(),
        next_relfile: st.next_relfile.load(Ordering::Acquire),
        timeline: st.timeline(),
        system_identifier: st.system_identifier,
        oldest_xid,
    }
    .write(&*st.vfs, &st.dir)?;
    st.forget_xids_before(oldest_xid);
    *rec.last_restartpoint.lock() = ckpt;
    let removed = remove_segments_before(st, segment_of(redo.0))?;
    st.smgr.stats.ckpt_done.fetch_add(1, Ordering::AcqRel);
    if log {
        tracing::info!(
            "restartpoint complete: wrote {written} buffers; {removed} WAL file(s) removed; total={:.3} s",
            started.elapsed().as_secs_f64()
        );
        tracing::info!("recovery restart point at {redo}");
    }
    Ok(Some(redo))
}

/// Removes the standby's WAL segments numbered below `keep` (they precede the redo point of
/// the restartpoint just made durable); returns how many.
fn remove_segments_before(st: &Storage, keep: u64) -> Result<usize> {
    let dir = st.dir.join("wal");
    let names = st
        .vfs
        .list_dir(&dir)
        .map_err(|e| Error::io("could not read the WAL directory", e))?;
    let mut n = 0;
    for name in names {
        if parse_segment_file_name(&name).is_some_and(|(_, s)| s < keep) {
            st.vfs
                .remove(&dir.join(&name))
                .map_err(|e| Error::io(format!("could not remove WAL segment {name}"), e))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Shutdown of a standby: stops the startup thread and the restartpointer, then makes a
/// restartpoint at the last checkpoint record replayed, so that a restart replays from there.
///
/// # Errors
/// I/O errors from the restartpoint.
pub(crate) fn shutdown(st: &Storage, rec: &Recovery) -> Result<()> {
    rec.stop_and_join();
    restartpoint(st, rec, DbState::ShutDown).map(|_| ())
}

/// A CHECKPOINT command on a standby: a restartpoint now (PostgreSQL makes one too).
///
/// # Errors
/// As the restartpoint's.
pub(crate) fn restartpoint_now(st: &Storage, rec: &Recovery) -> Result<()> {
    restartpoint(st, rec, DbState::InProduction).map(|_| ())
}

/// Ends recovery at `end` (the end of the WAL replayed; promotion): transactions still without
/// an outcome were cut off with the old primary and are aborted, the WAL opens for writes at
/// `end`, an end-of-recovery checkpoint is written, `standby.signal` is removed, and the
/// checkpointer and WAL writer start.
///
/// # Errors
/// I/O errors opening the WAL or writing the checkpoint.
fn finish_recovery(st: &Arc<Storage>, rec: &Recovery, end: Lsn) -> Result<()> {
    tracing::info!(end = %end, "received promote request; redo done");
    // A new timeline, with its history file durable before anything is written on it.
    let wal_dir = st.dir.join("wal");
    let parent = st.timeline();
    let new = crate::timeline::newest_timeline(&*st.vfs, &wal_dir, parent)? + 1;
    let parent_text =
        crate::timeline::read_history(&*st.vfs, &wal_dir, parent)?.unwrap_or_default();
    crate::timeline::write_history(
        &*st.vfs,
        &wal_dir,
        new,
        &crate::timeline::child_history(&parent_text, parent, end),
    )?;
    st.set_timeline(new);
    tracing::info!("selected new timeline ID: {new}");
    st.xact.abort_unresolved();
    let redo = rec.restart_candidate.lock().map(|c| c.redo).unwrap_or(end);
    st.attach_wal(end, redo)?;
    rec.ended.store(true, Ordering::Release);
    st.checkpoint_now(DbState::InProduction)?;
    let signal = st.dir.join(STANDBY_SIGNAL);
    if st.vfs.exists(&signal) {
        st.vfs
            .remove(&signal)
            .map_err(|e| Error::io(format!("could not remove \"{STANDBY_SIGNAL}\""), e))?;
        if let Err(e) = st.vfs.sync_dir(&st.dir) {
            walnut_common::panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                st.dir.display()
            ));
        }
    }
    crate::start_checkpointer(st, None)?;
    {
        let _g = rec.lock.lock();
        rec.applied.notify_all();
        rec.restart_wake.notify_all();
    }
    tracing::info!("database system is ready to accept connections (promoted)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xact::XactManager;

    /// A committed transaction `xid` and a snapshot taken before it (registered, not seeing it).
    fn conflict_setup() -> (
        Arc<XactManager>,
        Arc<crate::xact::SnapshotSlot>,
        Arc<AtomicBool>,
        Xid,
    ) {
        let m = Arc::new(XactManager::new(Xid::FIRST_NORMAL, &[]));
        let cancel = Arc::new(AtomicBool::new(false));
        let slot = m.register(cancel.clone());
        m.snapshot_in(&slot, Xid::INVALID);
        let xid = m.assign_xid();
        m.publish_commit(xid);
        (m, slot, cancel, xid)
    }

    #[test]
    fn a_conflicting_snapshot_is_cancelled_after_the_delay_and_replay_waits_until_it_is_given_up() {
        let (m, slot, cancel, xid) = conflict_setup();
        let (m2, done) = (m.clone(), Arc::new(AtomicBool::new(false)));
        let done2 = done.clone();
        let replay = std::thread::spawn(move || {
            let n = wait_out_snapshot_conflict(&m2, &[xid], Instant::now(), 0, &|| false);
            done2.store(true, Ordering::SeqCst);
            n
        });
        // The query sees its cancel (as `Txn::check_cancel` does), marked as a conflict.
        while !cancel.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        assert!(
            slot.take_conflict(),
            "the cancel is marked as a recovery conflict"
        );
        assert!(
            !done.load(Ordering::SeqCst),
            "replay goes on only once the snapshot is given up"
        );
        slot.release();
        assert_eq!(replay.join().unwrap(), 1);
        // A snapshot taken now sees the commit: no conflict.
        m.snapshot_in(&slot, Xid::INVALID);
        assert_eq!(
            wait_out_snapshot_conflict(&m, &[xid], Instant::now(), 0, &|| false),
            0
        );
    }

    #[test]
    fn a_prune_conflicts_with_a_snapshot_that_misses_any_deleter_not_only_the_largest_xid() {
        let m = XactManager::new(Xid::FIRST_NORMAL, &[]);
        let (older, newer) = (m.assign_xid(), m.assign_xid());
        // The larger xid commits first: a snapshot between the two commits sees it only.
        m.publish_commit(newer);
        let slot = m.register(Arc::new(AtomicBool::new(false)));
        m.snapshot_in(&slot, Xid::INVALID);
        m.publish_commit(older);
        let only_newer = conflict_csn(&m, &[newer]).unwrap();
        assert!(m.conflicting_snapshots(only_newer).is_empty());
        let both = conflict_csn(&m, &[older, newer]).unwrap();
        assert_eq!(
            m.conflicting_snapshots(both).len(),
            1,
            "it misses the older xid's commit"
        );
        assert_eq!(conflict_csn(&m, &[Xid(999)]), None);
        m.unregister(&slot);
    }

    #[test]
    fn a_snapshot_that_ends_within_the_delay_is_not_cancelled() {
        let (m, slot, cancel, xid) = conflict_setup();
        let m2 = m.clone();
        let replay = std::thread::spawn(move || {
            wait_out_snapshot_conflict(&m2, &[xid], Instant::now(), -1, &|| false)
        });
        while m.conflicting_snapshots(2).is_empty() {
            std::thread::yield_now();
        }
        slot.release();
        assert_eq!(replay.join().unwrap(), 0);
        assert!(!cancel.load(Ordering::SeqCst) && !slot.take_conflict());
        // Snapshots that see the commit, idle ones and unknown xids never conflict.
        let later = m.register(Arc::new(AtomicBool::new(false)));
        m.snapshot_in(&later, Xid::INVALID);
        assert_eq!(
            wait_out_snapshot_conflict(&m, &[xid], Instant::now(), 0, &|| false),
            0
        );
        assert_eq!(
            wait_out_snapshot_conflict(&m, &[Xid(999)], Instant::now(), 0, &|| false),
            0
        );
        m.unregister(&later);
        m.unregister(&slot);
    }
}
