//! Checkpoints, spread over the checkpoint interval so that their writes never take the device
//! away from commits (PostgreSQL's `checkpointer.c` and `bufmgr.c:BufferSync`; the protocol
//! is in DESIGN.md, "Checkpoints").
//!
//! A checkpoint fixes its redo point, then writes the pages dirty at that moment in file and
//! block order. [`Pacer`] decides, before each page, whether to write now or wait: the writes
//! keep to a schedule that ends at `checkpoint_completion_target` of the interval, judged both
//! by time and by WAL (PostgreSQL's `IsCheckpointOnSchedule`). Within that schedule the pacer
//! watches the WAL's own flush latency ([`WalPressure`]): while commits' flushes are slow it
//! holds back, and while they are fast it may run a little ahead. Written pages go to the
//! kernel for write-back in batches of `checkpoint_flush_after`, so the sync phase's fsyncs find
//! little left to write.

use crate::control::{ControlFile, DbState};
use crate::stats::{set_backend_type, BackendType};
use crate::writeback::Writeback;
use crate::{guc, panic_fatal, Storage, RM_XLOG, XLOG_CHECKPOINT};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use walnut_common::guc::Settings;
use walnut_common::{Error, Lsn, Result, Xid};
use walnut_wal::Record;

/// The reloadable settings of data write-back: the checkpointer's and the background
/// writer's.
#[derive(Clone, Debug, PartialEq)]
pub struct WriteSettings {
    /// `checkpoint_completion_target`, a fraction of the interval.
    pub completion_target: f64,
    /// `checkpoint_flush_after`, pages (0: no write-back requests).
    pub checkpoint_flush_after: usize,
    /// `checkpoint_warning`, seconds (0: never warn).
    pub checkpoint_warning_s: u64,
    /// `log_checkpoints`.
    pub log_checkpoints: bool,
    /// `bgwriter_delay`, ms.
    pub bgwriter_delay_ms: u64,
    /// `bgwriter_lru_maxpages`, pages per round.
    pub bgwriter_lru_maxpages: usize,
    /// `bgwriter_lru_multiplier`.
    pub bgwriter_lru_multiplier: f64,
    /// `bgwriter_flush_after`, pages.
    pub bgwriter_flush_after: usize,
    /// `backend_flush_after`, pages.
    pub backend_flush_after: usize,
    /// `min_wal_size`, MB.
    pub min_wal_size_mb: u64,
    /// `wal_keep_size`, MB.
    pub wal_keep_size_mb: u64,
    /// `max_slot_wal_keep_size`, MB; `None` = no limit (-1).
    pub max_slot_wal_keep_size_mb: Option<u64>,
}

/// The first WAL segment a checkpoint keeps (PostgreSQL's `KeepLogSeg`): the redo point's,
/// or older for the oldest valid slot (`slot_min`, its saved restart position) but not older
/// than `max_slot_wal_keep` bytes behind `insert`, or older for `wal_keep` bytes behind
/// `insert`, or older for the oldest base backup's hold (`hold_min`, never bounded). Sizes
/// round down to whole segments, as PostgreSQL's `ConvertToXSegs`.
pub fn keep_from_segment(
    redo: Lsn,
    insert: Lsn,
    slot_min: Option<Lsn>,
    hold_min: Option<Lsn>,
    wal_keep: u64,
    max_slot_wal_keep: Option<u64>,
) -> u64 {
    let seg = |l: u64| l / walnut_wal::WAL_SEGMENT_SIZE;
    let cur = seg(insert.0);
    let mut keep = seg(redo.0);
    if let Some(m) = slot_min {
        let mut s = seg(m.0);
        if let Some(max) = max_slot_wal_keep {
            let max_segs = seg(max);
            if cur.saturating_sub(s) > max_segs {
                s = cur - max_segs;
            }
        }
        keep = keep.min(s);
    }
    let keep_segs = seg(wal_keep);
    if keep_segs > 0 && cur.saturating_sub(keep) < keep_segs {
        keep = cur.saturating_sub(keep_segs);
    }
    if let Some(h) = hold_min {
        keep = keep.min(seg(h.0));
    }
    keep
}

impl WriteSettings {
    /// The values `s` gives.
    pub fn from_settings(s: &Settings) -> WriteSettings {
        WriteSettings {
            completion_target: s.real(&guc::CHECKPOINT_COMPLETION_TARGET),
            checkpoint_flush_after: s.int(&guc::CHECKPOINT_FLUSH_AFTER) as usize,
            checkpoint_warning_s: s.int(&guc::CHECKPOINT_WARNING) as u64,
            log_checkpoints: s.bool(&guc::LOG_CHECKPOINTS),
            bgwriter_delay_ms: s.int(&guc::BGWRITER_DELAY) as u64,
            bgwriter_lru_maxpages: s.int(&guc::BGWRITER_LRU_MAXPAGES) as usize,
            bgwriter_lru_multiplier: s.real(&guc::BGWRITER_LRU_MULTIPLIER),
            bgwriter_flush_after: s.int(&guc::BGWRITER_FLUSH_AFTER) as usize,
            backend_flush_after: s.int(&guc::BACKEND_FLUSH_AFTER) as usize,
            min_wal_size_mb: s.int(&guc::MIN_WAL_SIZE) as u64,
            wal_keep_size_mb: s.int(&guc::WAL_KEEP_SIZE) as u64,
            max_slot_wal_keep_size_mb: u64::try_from(s.int(&guc::MAX_SLOT_WAL_KEEP_SIZE)).ok(),
        }
    }
}

/// Why a checkpoint runs (the words of PostgreSQL's "checkpoint starting:" line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// `checkpoint_timeout` passed.
    Time,
    /// WAL since the last redo point reached `max_wal_size / (1 + checkpoint_completion_target)`.
    Wal,
    /// The CHECKPOINT command: immediate.
    Requested,
    /// Clean shutdown: immediate.
    Shutdown,
    /// The end of crash recovery with a backup label, promotion, or initdb: immediate, and
    /// done before the server takes connections (or writes, for a promotion).
    EndOfRecovery,
    /// The first checkpoint after crash recovery, which the checkpointer starts as soon as the
    /// server is open: spread, like a timed one (PostgreSQL's promotion requests one the same
    /// way, `CHECKPOINT_FORCE`; its crash recovery instead waits for an immediate one).
    AfterRecovery,
}

impl Cause {
    fn words(self) -> &'static str {
        match self {
            Cause::Time => "time",
            Cause::Wal => "wal",
            Cause::Requested => "immediate force wait",
            Cause::Shutdown => "shutdown immediate",
            Cause::EndOfRecovery => "end-of-recovery immediate wait",
            Cause::AfterRecovery => "end-of-recovery force",
        }
    }

    fn immediate(self) -> bool {
        !matches!(self, Cause::Time | Cause::Wal | Cause::AfterRecovery)
    }
}

/// WAL flush latency at which write-back holds back: this many times the recent lowest.
pub const HIGH_PRESSURE: f64 = 2.0;
/// WAL flush latency below which write-back may run ahead of its schedule.
pub const LOW_PRESSURE: f64 = 1.25;
/// How far behind its schedule (fraction of the pages) a checkpoint may fall while it holds
/// back for the WAL; beyond it, it writes regardless.
pub const CATCH_UP: f64 = 0.05;
/// How far ahead of its schedule (fraction of the pages) a checkpoint runs while the WAL's
/// flushes are fast.
pub const AHEAD: f64 = 0.05;
/// The pause while holding back for the WAL.
pub const BACKOFF: Duration = Duration::from_millis(10);
/// The longest single pause, so that requests and reloads are seen promptly.
pub const MAX_SLEEP: Duration = Duration::from_millis(100);

/// Before each page of a checkpoint's write phase: write now, or pause first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pace {
    /// Write the next page now.
    Write,
    /// Pause this long, then ask again.
    Sleep(Duration),
}

/// The schedule of one checkpoint's writes.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    /// `checkpoint_completion_target`.
    pub target: f64,
    /// `checkpoint_timeout`.
    pub timeout: Duration,
    /// WAL bytes of one checkpoint cycle: `max_wal_size / (1 + checkpoint_completion_target)`,
    /// PostgreSQL's `CheckPointSegments`.
    pub wal_per_cycle: u64,
    /// Write at full speed (shutdown, end of recovery, the CHECKPOINT command).
    pub immediate: bool,
}

impl Pacer {
    /// The fraction of the pages that should be written by now, `elapsed` into the checkpoint
    /// with `wal` bytes of WAL inserted since its redo point: the larger of the time and WAL
    /// fractions of the interval, over the target (PostgreSQL's `IsCheckpointOnSchedule`,
    /// which compares `progress * target` with both). 1 or more means all of them.
    pub fn due(&self, elapsed: Duration, wal: u64) -> f64 {
        let by_time = elapsed.as_secs_f64() / self.timeout.as_secs_f64().max(1e-3);
        let by_wal = wal as f64 / self.wal_per_cycle.max(1) as f64;
        by_time.max(by_wal) / self.target.max(1e-3)
    }

    /// Whether to write the next page now, with `written` of `total` pages done, `elapsed`
    /// into the checkpoint, `wal` bytes inserted since its redo point, and the WAL's flush
    /// latency at `pressure` times its recent lowest ([`WalPressure`]).
    pub fn next(
        &self,
        written: usize,
        total: usize,
        elapsed: Duration,
        wal: u64,
        pressure: f64,
    ) -> Pace {
        if self.immediate || written >= total {
            return Pace::Write;
        }
        let progress = written as f64 / total as f64;
        let due = self.due(elapsed, wal);
        if progress < due {
            // Behind: catch up, unless commits' flushes are suffering and the deficit is small.
            if pressure >= HIGH_PRESSURE && due - progress < CATCH_UP {
                return Pace::Sleep(BACKOFF);
            }
            return Pace::Write;
        }
        // Ahead: pause until the time schedule asks for the next page; while commits' flushes
        // are fast and the lead is small, half as long (twice the schedule's pace, never a
        // burst).
        let next_at =
            self.timeout.as_secs_f64() * self.target * (written + 1) as f64 / total as f64;
        let mut wait = next_at - elapsed.as_secs_f64();
        if pressure < LOW_PRESSURE && progress < due + AHEAD {
            let per_page = self.timeout.as_secs_f64() * self.target / total as f64;
            wait = wait.min(per_page / 2.0);
        }
        Pace::Sleep(Duration::from_secs_f64(wait.max(0.0001)).min(MAX_SLEEP))
    }
}

/// The fraction of `checkpoint_timeout`, from its start, by which a spread checkpoint's last
/// write-back pass stops pausing for the WAL, leaving the fsyncs time to end within the
/// interval.
pub const PASS_DEADLINE: f64 = 0.97;

/// The WAL's flush latency relative to its recent lowest: 1 when commits' flushes are as fast
/// as the device allows, higher when something queues ahead of them.
#[derive(Debug, Default)]
pub struct WalPressure {
    baseline_us: f64,
    last: Option<Instant>,
}

impl WalPressure {
    /// The pressure, given the WAL's flush latency EWMA `latency_us` sampled at `now`. The
    /// baseline is the lowest latency seen, rising by 1 % a second so that it follows a device
    /// that became slower for good. Unknown latency (0) reads as 1.
    pub fn sample(&mut self, latency_us: u64, now: Instant) -> f64 {
        if latency_us == 0 {
            return 1.0;
        }
        let l = latency_us as f64;
        let drift = self
            .last
            .map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        self.last = Some(now);
        self.baseline_us = if self.baseline_us == 0.0 {
            l
        } else {
            l.min(self.baseline_us * 1.01f64.powf(drift))
        };
        l / self.baseline_us
    }
}

/// What a checkpoint reports in its `log_checkpoints` line.
struct Report {
    written: usize,
    write: Duration,
    sync: crate::smgr::SyncReport,
    sync_time: Duration,
    removed: usize,
    recycled: usize,
}

impl Storage {
    /// After a checkpoint or restartpoint made the control file naming `oldest_xid` durable:
    /// the status store forgets the xids below it, in memory and on disk (PostgreSQL's
    /// `TruncateCLOG`), and keeps the chunks every snapshot sees whole at two bits per xid
    /// (`XactManager::settle`). A segment that cannot be removed is logged and left for a
    /// later checkpoint: the checkpoint itself is complete.
    pub(crate) fn forget_xids_before(&self, oldest_xid: Xid) {
        self.xact.truncate(oldest_xid);
        match crate::control::remove_xact_segments_before(&*self.vfs, &self.dir, oldest_xid) {
            Ok(0) => {}
            Ok(removed) => tracing::debug!(
                removed,
                oldest = oldest_xid.0,
                "removed transaction status segments"
            ),
            Err(e) => tracing::warn!("could not remove old transaction status segments: {e}"),
        }
        self.xact
            .settle(self.xact.oldest_running(), self.xact.horizon());
    }

    /// The reloadable write-back settings in effect.
    pub fn write_settings(&self) -> WriteSettings {
        self.write_settings.read().clone()
    }

    /// Runs an immediate checkpoint now (shutdown, end of recovery, tests); see
    /// [`Storage::checkpoint`].
    ///
    /// # Errors
    /// As [`Storage::checkpoint`].
    pub fn checkpoint_now(&self, state: DbState) -> Result<()> {
        let cause = if state == DbState::ShutDown {
            Cause::Shutdown
        } else {
            Cause::EndOfRecovery
        };
        self.checkpoint(state, cause)
    }

    /// Runs a checkpoint (PostgreSQL's `CreateCheckPoint`), serialized with any other:
    /// 1. with commits held off (`commit_lock`) and all WAL insertion excluded, fix the redo
    ///    point at the insert position;
    /// 2. take the dirty buffers, sorted by file and block, and write them, paced by
    ///    [`Pacer`] unless `cause` is immediate (each after flushing WAL to its page LSN), with
    ///    write-back requests every `checkpoint_flush_after` pages;
    /// 3. fsync every relation file written since the last sync phase; write the free-space
    ///    maps that changed (`Smgr::write_free_space_maps`; a failure there is a warning);
    /// 4. flush WAL to the insert position, write the transaction status file;
    /// 5. insert the checkpoint record and flush it;
    /// 6. replace the control file (checkpoint LSN, redo point);
    /// 7. recycle WAL segments before the redo point;
    /// 8. retry removing the files of dropped relations whose removal failed after commit.
    ///
    /// A spread checkpoint turns immediate when the CHECKPOINT command, shutdown or another
    /// immediate checkpoint asks for one meanwhile.
    ///
    /// # Errors
    /// I/O errors. A failed fsync aborts the process (PANIC).
    pub fn checkpoint(&self, state: DbState, cause: Cause) -> Result<()> {
        // An immediate checkpoint waiting for a spread one makes it finish at full speed
        // (PostgreSQL's `ImmediateCheckpointRequested`).
        if cause.immediate() {
            self.ckpt_hurry.fetch_add(1, Ordering::AcqRel);
        }
        let _running = self.ckpt_running.lock();
        if cause.immediate() {
            self.ckpt_hurry.fetch_sub(1, Ordering::AcqRel);
        }
        // Shutdown began while this checkpoint waited for a running one, or before the
        // checkpointer started it (the first checkpoint after crash recovery starts as the
        // server opens): the shutdown checkpoint is the last, so this one does nothing, or it
        // would write the control file back to "in production" after it.
        if state != DbState::ShutDown && self.ckpt.lock().shutdown {
            return Ok(());
        }
        let settings = self.write_settings();
        let started = Instant::now();
        if settings.log_checkpoints {
            tracing::info!("checkpoint starting: {}", cause.words());
        }
        let wal = self.wal();
        // Before the redo point: the freezing this relies on is logged before it, so this
        // checkpoint writes those pages, and a crash after it never replays them (DESIGN.md,
        // "Freezing").
        let oldest_xid = self
            .xact
            .next_oldest_xid(crate::vacuum::frozen_cutoff(self));
        let redo = {
            let _c = self.xact.commit_lock.write();
            wal.begin_checkpoint()
        };
        let wal_since_previous = redo
            .0
            .saturating_sub(self.last_redo.load(Ordering::Acquire));
        // Step 2: the write phase.
        let pages = self.pool.checkpoint_snapshot();
        let max_wal = self.max_wal_size_mb.load(Ordering::Relaxed).max(2) << 20;
        let mut pacer = Pacer {
            target: settings.completion_target,
            timeout: Duration::from_secs(self.checkpoint_timeout_s.load(Ordering::Relaxed).max(1)),
            wal_per_cycle: (max_wal as f64 / (1.0 + settings.completion_target)) as u64,
            immediate: cause.immediate(),
        };
        let requested_before = self.ckpt.lock().requested;
        let mut pressure = self.ckpt_pressure.lock();
        let mut wb = Writeback::new(settings.checkpoint_flush_after);
        let mut written = 0;
        // Runs of adjacent blocks, up to io_combine_limit, each written in one call.
        let combine = self.io_combine_limit() as usize;
        for run in crate::smgr::runs(pages.len(), combine, |i| {
            let (a, b) = (pages[i - 1].1, pages[i].1);
            a.rel == b.rel && b.block.0 == a.block.0 + 1
        }) {
            let k = run.start;
            loop {
                let p = pressure.sample(wal.flush_latency_us(), Instant::now());
                let wal_bytes = wal.insert_lsn().0.saturating_sub(redo.0);
                match pacer.next(k, pages.len(), started.elapsed(), wal_bytes, p) {
                    Pace::Write => break,
                    Pace::Sleep(d) => {
                        let s = self.ckpt.lock();
                        if s.shutdown
                            || s.requested > requested_before
                            || self.ckpt_hurry.load(Ordering::Acquire) > 0
                        {
                            pacer.immediate = true;
                            continue;
                        }
                        drop(s);
                        std::thread::sleep(d);
                    }
                }
            }
            for tag in self.pool.write_run_if_dirty(&pages[run])? {
                written += 1;
                wb.add(&self.smgr, tag);
            }
        }
        wb.issue(&self.smgr);
        let write = started.elapsed();
        // Step 3: the sync phase, after a last write-back pass over the files to be synced.
        let sync_start = Instant::now();
        if !pacer.immediate {
            // Pauses end in time for the checkpoint to end within its interval.
            let deadline = started + pacer.timeout.mul_f64(PASS_DEADLINE);
            self.write_back_before_sync(
                settings.checkpoint_flush_after as u32,
                deadline,
                wal,
                &mut pressure,
            );
        }
        let sync = match self.smgr.sync_all() {
            Ok(r) => r,
            Err(e) => panic_fatal(&format!("checkpoint: {e}")),
        };
        let sync_time = sync_start.elapsed();
        // A hint, not logged: a map that cannot be written stays changed for the next
        // checkpoint, and this one goes on.
        if let Err(e) = self.smgr.write_free_space_maps() {
            tracing::warn!("{e}; the next checkpoint writes the free-space map again");
        }
        let status = self.xact.take_dirty_pages();
        wal.flush(wal.insert_lsn())?;
        if let Err(e) = crate::control::write_xact_pages(&*self.vfs, &self.dir, &status) {
            self.xact.redirty_pages(status.iter().map(|(n, _)| *n));
            return Err(e);
        }
        let next_xid = self.xact.next_xid();
        let next_relfile = self.next_relfile.load(Ordering::Acquire);
        let mut main = Vec::with_capacity(28);
        main.extend_from_slice(&redo.0.to_le_bytes());
        main.extend_from_slice(&next_xid.0.to_le_bytes());
        main.extend_from_slice(&next_relfile.to_le_bytes());
        main.extend_from_slice(&oldest_xid.0.to_le_bytes());
        let (start, end) = wal.insert(&mut |_| Record {
            rmgr: RM_XLOG,
            info: XLOG_CHECKPOINT,
            xid: Xid::INVALID,
            flags: 0,
            blocks: vec![],
            main_data: main.clone(),
        })?;
        wal.flush(end)?;
        ControlFile {
            state,
            checkpoint_lsn: start,
            redo_lsn: redo,
            next_xid,
            next_relfile,
            timeline: self.timeline(),
            system_identifier: self.system_identifier,
            oldest_xid,
        }
        .write(&*self.vfs, &self.dir)?;
        self.forget_xids_before(oldest_xid);
        let distance_kb = wal_since_previous / 1024;
        let estimate_kb = {
            // PostgreSQL's UpdateCheckPointDistanceEstimate: a decaying average of distances.
            let mut e = self.distance_estimate_kb.lock();
            *e = if *e < distance_kb {
                distance_kb
            } else {
                (0.90 * *e as f64 + 0.10 * distance_kb as f64) as u64
            };
            *e
        };
        // PostgreSQL's XLOGfileslop: keep segments for the WAL expected from this redo point
        // to the one after next (the next checkpoint spans most of a cycle itself): the
        // estimate times (1 + target), plus 10 %, within min_wal_size and max_wal_size.
        let keep = ((estimate_kb << 10) as f64 * (1.0 + settings.completion_target) * 1.1) as u64;
        let keep = keep.clamp(
            settings.min_wal_size_mb << 20,
            max_wal.max(settings.min_wal_size_mb << 20),
        );
        // Replication: slots (saved first, so the positions used are on disk) and
        // wal_keep_size may keep WAL from before the redo point; a slot past
        // max_slot_wal_keep_size is invalidated instead (PostgreSQL's KeepLogSeg and
        // InvalidateObsoleteReplicationSlots).
        self.slots.save()?;
        let (slot_min, hold_min) = self.slots.min_saved_restart_lsn();
        let keep_seg = keep_from_segment(
            redo,
            wal.insert_lsn(),
            slot_min,
            hold_min,
            settings.wal_keep_size_mb << 20,
            settings.max_slot_wal_keep_size_mb.map(|m| m << 20),
        );
        let keep_from = Lsn(keep_seg * walnut_wal::WAL_SEGMENT_SIZE);
        for name in self.slots.invalidate_below(keep_from)? {
            tracing::warn!(
                hint = "You might need to increase \"max_slot_wal_keep_size\".",
                "invalidating obsolete replication slot \"{name}\": its restart_lsn is more than max_slot_wal_keep_size behind"
            );
        }
        let (removed, recycled) = wal.remove_old_segments(keep_from, keep)?;
        self.retry_removals();
        self.last_redo.store(redo.0, Ordering::Release);
        let st = &self.smgr.stats;
        st.ckpt_done.fetch_add(1, Ordering::AcqRel);
        st.ckpt_buffers_written
            .fetch_add(written as u64, Ordering::Relaxed);
        st.ckpt_write_time_ms
            .fetch_add(write.as_millis() as u64, Ordering::Relaxed);
        st.ckpt_sync_time_ms
            .fetch_add(sync_time.as_millis() as u64, Ordering::Relaxed);
        if !cause.immediate() && started.elapsed() > pacer.timeout {
            tracing::warn!(
                hint = "The disk cannot write the checkpoint's pages in time; consider increasing \"checkpoint_timeout\" or \"max_wal_size\".",
                "checkpoint took {} s, longer than checkpoint_timeout ({} s)",
                started.elapsed().as_secs(),
                pacer.timeout.as_secs()
            );
        }
        if settings.log_checkpoints {
            self.log_complete(
                &Report {
                    written,
                    write,
                    sync,
                    sync_time,
                    removed,
                    recycled,
                },
                started.elapsed(),
                (distance_kb, estimate_kb),
                (start, redo),
            );
        }
        Ok(())
    }

    /// Asks the kernel to write back, `chunk` pages at a time, what the relation files about to
    /// be fsynced still hold dirty in the page cache (sessions' evictions the background
    /// writer has not written back, and writes made outside the buffer pool). While the WAL's
    /// flushes are slow it pauses after each chunk as long as the chunk took, so that commits
    /// keep at least half the device, until `deadline`, after which it goes on without pausing.
    /// The fsyncs then find little
    /// left, and their writes reach the device in chunks between commits' flushes rather than
    /// all at once ahead of them.
    ///
    /// # Panics
    /// PANICs if a write-back fails (see [`crate::smgr::Smgr::flush_range`]).
    fn write_back_before_sync(
        &self,
        chunk: u32,
        deadline: Instant,
        wal: &walnut_wal::Wal,
        pressure: &mut WalPressure,
    ) {
        if chunk == 0 || self.smgr.direct_io() {
            return;
        }
        // Pages dirtied behind a pass while it ran are left for the next one: up to three
        // passes, while a pass takes over half a second.
        for _ in 0..3 {
            let pass = Instant::now();
            for rel in self.smgr.dirty_files() {
                let nblocks = rel.nblocks.load(Ordering::Acquire);
                let mut pos = 0;
                while pos < nblocks {
                    let n = chunk.min(nblocks - pos);
                    let t = Instant::now();
                    self.smgr
                        .flush_range(&rel, walnut_common::BlockNumber(pos), n);
                    pos += n;
                    if t.elapsed() < Duration::from_millis(1)
                        || Instant::now() >= deadline
                        || self.ckpt_hurry.load(Ordering::Acquire) > 0
                    {
                        continue;
                    }
                    if pressure.sample(wal.flush_latency_us(), Instant::now()) >= HIGH_PRESSURE {
                        let pause = t
                            .elapsed()
                            .max(BACKOFF)
                            .min(deadline.saturating_duration_since(Instant::now()));
                        std::thread::sleep(pause);
                    }
                }
            }
            if pass.elapsed() < Duration::from_millis(500) {
                break;
            }
        }
    }

    /// PostgreSQL's "checkpoint complete" line (`LogCheckpointEnd`).
    fn log_complete(&self, r: &Report, total: Duration, dist: (u64, u64), lsns: (Lsn, Lsn)) {
        let secs = |d: Duration| format!("{}.{:03}", d.as_secs(), d.subsec_millis());
        let avg = if r.sync.files == 0 {
            Duration::ZERO
        } else {
            r.sync.total / r.sync.files as u32
        };
        tracing::info!(
            "checkpoint complete: wrote {} buffers ({:.1}%), wrote 0 SLRU buffers; 0 WAL file(s) \
             added, {} removed, {} recycled; write={} s, sync={} s, total={} s; sync files={}, \
             longest={} s, average={} s; distance={} kB, estimate={} kB; lsn={}, redo lsn={}",
            r.written,
            r.written as f64 * 100.0 / self.pool.len() as f64,
            r.removed,
            r.recycled,
            secs(r.write),
            secs(r.sync_time),
            secs(total),
            r.sync.files,
            secs(r.sync.longest),
            secs(avg),
            dist.0,
            dist.1,
            lsns.0,
            lsns.1
        );
    }

    /// Requests an immediate checkpoint from the checkpointer and waits for it (the CHECKPOINT
    /// command). A spread checkpoint in progress finishes at full speed, then this one runs.
    ///
    /// # Errors
    /// The checkpoint's error.
    pub fn request_checkpoint(&self) -> Result<()> {
        if let Some(rec) = self.recovery().filter(|_| self.in_recovery()) {
            return crate::standby::restartpoint_now(self, rec);
        }
        let mut s = self.ckpt.lock();
        s.requested += 1;
        let want = s.requested;
        self.ckpt_cond.notify_all();
        while s.completed < want && !s.shutdown {
            self.ckpt_cond.wait(&mut s);
        }
        match s.last_error.take() {
            Some(e) => Err(Error::internal(format!("checkpoint failed: {e}"))),
            None => Ok(()),
        }
    }
}

/// The checkpointer thread: starts a checkpoint when requested, when `checkpoint_timeout` has
/// passed since the last one started, or when the WAL since the last redo point reaches
/// `max_wal_size / (1 + checkpoint_completion_target)` (PostgreSQL's `CheckPointSegments`),
/// warning when WAL-triggered checkpoints come closer than `checkpoint_warning`. `first`, if
/// given, is the cause of a checkpoint it starts at once ([`Cause::AfterRecovery`]).
pub(crate) fn checkpointer(weak: std::sync::Weak<Storage>, mut first: Option<Cause>) {
    set_backend_type(BackendType::Checkpointer);
    let mut last = Instant::now();
    loop {
        let Some(st) = weak.upgrade() else { return };
        let settings = st.write_settings();
        let timeout = Duration::from_secs(st.checkpoint_timeout_s.load(Ordering::Relaxed).max(1));
        let max_wal = st.max_wal_size_mb.load(Ordering::Relaxed).max(2) << 20;
        let wal_limit = (max_wal as f64 / (1.0 + settings.completion_target)) as u64;
        let requested = {
            let mut s = st.ckpt.lock();
            if s.shutdown {
                return;
            }
            if s.requested == s.completed && first.is_none() {
                st.ckpt_cond.wait_for(&mut s, Duration::from_millis(200));
            }
            if s.shutdown {
                return;
            }
            s.requested
        };
        let wal_since = st
            .wal()
            .insert_lsn()
            .0
            .saturating_sub(st.last_redo.load(Ordering::Acquire));
        let cause = if requested > st.ckpt.lock().completed {
            first = None; // an immediate checkpoint does its work
            Some(Cause::Requested)
        } else if let Some(c) = first.take() {
            Some(c)
        } else if wal_since >= wal_limit {
            Some(Cause::Wal)
        } else if last.elapsed() >= timeout {
            Some(Cause::Time)
        } else {
            None
        };
        let Some(cause) = cause else { continue };
        let stats = &st.smgr.stats;
        if cause == Cause::Time {
            stats.ckpt_timed.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.ckpt_requested.fetch_add(1, Ordering::Relaxed);
        }
        let apart = last.elapsed();
        if cause == Cause::Wal
            && settings.checkpoint_warning_s > 0
            && apart < Duration::from_secs(settings.checkpoint_warning_s)
        {
            tracing::warn!(
                hint = "Consider increasing the configuration parameter \"max_wal_size\".",
                "checkpoints are occurring too frequently ({} seconds apart)",
                apart.as_secs()
            );
        }
        last = Instant::now();
        let r = st.checkpoint(DbState::InProduction, cause);
        let mut s = st.ckpt.lock();
        if let Err(e) = &r {
            tracing::error!("checkpoint failed: {e}");
            s.last_error = Some(e.to_string());
        }
        s.completed = requested;
        st.ckpt_cond.notify_all();
    }
}

#[cfg(test)]
mod tests;
