//! The WAL proper: concurrent insertion into the ring buffer, write-out, group commit flush,
//! checkpoint redo point, segment preallocation and recycling, and the WAL writer thread.
//!
//! ```text
//!   inserters (many)                         flush leader (one at a time)
//!   ----------------                         ----------------------------
//!   assemble(redo) -> encode (thread-local)  X = insert_pos
//!   claim slot i (CAS FREE -> 0)             wait until every slot >= X   (WaitXLogInsertionsToFinish)
//!   recheck redo_lsn                         lock write; pwrite [write_lsn, X) per segment (XLogWrite)
//!   start = insert_pos.fetch_add(len)        unlock write; fdatasync each segment written
//!   slot i = start; seal(lsn, crc)           flush_lsn = X; wake followers
//!   copy into ring (room: write_lsn >= end - B)
//!   slot i = FREE
//! ```
//!
//! See DESIGN.md for the numbered protocols and the crash windows.

mod files;
mod writer;

use crate::flush::WritePath;
use crate::group_commit::{
    CloseCause, FlushDevice, GroupCommit, LeaderWait, Pipelining, Request, HISTOGRAM_BOUNDS,
};
use crate::reader::ReaderState;
use crate::record;
use crate::ring::Ring;
use crate::segment::{self, segment_file_name, segment_of, InitOpts, WAL_SEGMENT_SIZE};
use crate::{CommitOpts, DecodedRecord, GroupCommitMode, Record, WalConfig, WalStats};
use crossbeam::utils::CachePadded;
use files::{range_sync_flusher, read_partial_block, WriteState};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use walnut_common::{Error, Lsn, Result, SqlState};
use walnut_io::{AlignedBuf, CacheFlush, Vfs, DIRECT_IO_ALIGN};
use writer::WriterCtl;

/// Number of insertion slots (PostgreSQL's `NUM_XLOGINSERT_LOCKS`).
pub const NUM_INSERT_SLOTS: usize = 8;
/// Slot value: nobody holds the slot.
const SLOT_FREE: u64 = u64::MAX;
/// Slot value: held by `begin_checkpoint`; no insertion in progress (PostgreSQL sets
/// `insertingAt` to `PG_UINT64_MAX` under `WALInsertLockAcquireExclusive` for the same reason:
/// flushers must not wait for it).
const SLOT_CHECKPOINT: u64 = u64::MAX - 1;
/// Slot value: claimed, space not yet reserved.
const SLOT_RESERVING: u64 = 0;
/// Smallest allowed `wal_buffers_bytes`.
const MIN_WAL_BUFFERS_BYTES: usize = 1024 * 1024;
/// Thread-local encode buffers above this capacity are not kept between inserts, bytes.
const MAX_CACHED_ENCODE_BYTES: usize = 256 * 1024;

thread_local! {
    /// Per-thread encode buffer, reused across inserts so that the insert path allocates only
    /// what `assemble` allocates.
    static ENCODE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The slot this thread tries first (PostgreSQL's `MyLockNo`); only a hint, to spread
    /// inserters over the slots.
    static SLOT_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SLOT_HINT: AtomicUsize = AtomicUsize::new(0);

/// How the leader of a commit's group waits: the adaptive controller decides, or PostgreSQL's
/// `commit_delay` rule with the committer's count of the other transactions holding an xid
/// (`active_xacts` includes the committer).
pub(crate) fn leader_wait(
    mode: GroupCommitMode,
    opts: &CommitOpts,
    active_xacts: usize,
) -> LeaderWait {
    match mode {
        GroupCommitMode::Adaptive => LeaderWait::Adaptive,
        GroupCommitMode::Fixed => LeaderWait::Fixed {
            delay_us: opts.commit_delay_us,
            siblings: opts.commit_siblings,
            others: u32::try_from(active_xacts.saturating_sub(1)).unwrap_or(u32::MAX),
        },
    }
}

/// Room kept in reserve beyond every [`Wal::check_space`], bytes: records inserted without a
/// check (abort records, checkpoint records, flush marks) and inserts that race between their
/// check and their reservation come out of it.
pub const WAL_SPACE_RESERVE: u64 = WAL_SEGMENT_SIZE;

/// Flushes in flight at once when the adaptive controller is not batching (its patience is
/// zero): the next group's write and sync are issued while the previous sync completes.
pub const MAX_FLUSHES_IN_FLIGHT: usize = 2;

fn slot_hint() -> usize {
    SLOT_HINT.with(|h| {
        if h.get() == usize::MAX {
            h.set(NEXT_SLOT_HINT.fetch_add(1, Ordering::Relaxed) % NUM_INSERT_SLOTS);
        }
        h.get()
    })
}

/// Spins briefly, then yields the CPU.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

fn elapsed_us(t: Instant) -> u64 {
    t.elapsed().as_micros() as u64
}

#[derive(Default)]
struct Counters {
    records: CachePadded<AtomicU64>,
    fpi: AtomicU64,
    bytes: AtomicU64,
    buffers_full: AtomicU64,
    write: AtomicU64,
    sync: AtomicU64,
    write_time_us: AtomicU64,
    sync_time_us: AtomicU64,
}

/// The `sighup` parameters the WAL reads while running; [`Wal::apply_settings`] updates them.
struct Live {
    /// `wal_compression` is lz4 (else off).
    compression_lz4: AtomicBool,
    /// `wal_init_zero`.
    init_zero: AtomicBool,
    /// `wal_recycle`.
    recycle: AtomicBool,
}

/// The write-ahead log of one data directory.
///
/// Positions: `flush_lsn <= write_lsn <= insert_lsn`, all 8-aligned byte positions in the WAL
/// stream. Sources: PostgreSQL `src/backend/access/transam/xlog.c`.
pub struct Wal {
    vfs: Arc<dyn Vfs>,
    cfg: WalConfig,
    /// Next free byte (`XLogCtl->Insert.CurrBytePos`), advanced by one fetch_add per record.
    insert_pos: CachePadded<AtomicU64>,
    /// Insertion slots (`WALInsertLocks[i].insertingAt`).
    slots: [CachePadded<AtomicU64>; NUM_INSERT_SLOTS],
    /// Redo point of the current checkpoint (`RedoRecPtr`).
    redo_lsn: CachePadded<AtomicU64>,
    ring: Ring,
    /// The write position (`LogwrtResult.Write`), the write lock with the open segments, and
    /// the sync batches (`crate::flush`).
    path: WritePath<Wal>,
    /// Group commit; everything before `gc.flushed()` is durable (`LogwrtResult.Flush`).
    gc: GroupCommit,
    /// `wal_sync_range` in force: the device cache flusher of the WAL's file system.
    flusher: Option<Arc<dyn CacheFlush>>,
    /// Serializes creating, recycling and removing segment files.
    segments: Mutex<()>,
    /// Insert segment for which the segments ahead were last checked.
    prealloc_checked_seg: AtomicU64,
    /// Durable position the last flush mark attested.
    last_mark: AtomicU64,
    /// End of the segments known to exist contiguously from the insert position's, bytes:
    /// WAL up to here can be written without creating a segment.
    space_end: AtomicU64,
    stats: Counters,
    /// One more than the highest segment number recycled or removed, 0 if none
    /// (`XLogCtl->lastRemovedSegNo`): a walsender that read such a segment read stale bytes.
    removed_below: AtomicU64,
    /// The walsenders streaming this WAL (`pg_stat_replication`).
    senders: Arc<crate::senders::WalSenders>,
    writer: Mutex<Option<JoinHandle<()>>>,
    writer_ctl: Arc<WriterCtl>,
    live: Live,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.cfg.dir)
            .field("insert_lsn", &self.insert_lsn())
            .field("write_lsn", &self.write_lsn())
            .field("flush_lsn", &self.flush_lsn())
            .field("redo_lsn", &self.redo_lsn())
            .finish()
    }
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(context, e)
}

impl Wal {
    /// Creates an empty WAL in `cfg.dir` (initdb): creates the directory and preallocates
    /// segment 0 (16 MiB of zeros, written and synced, directory synced). The first record will
    /// be at `Lsn::FIRST`. Source: xlog.c `BootStrapXLOG`, `XLogFileInit`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(vfs: Arc<dyn Vfs>, cfg: &WalConfig) -> Result<()> {
        vfs.create_dir_all(&cfg.dir).map_err(io_err(format!(
            "could not create directory {}",
            cfg.dir.display()
        )))?;
        segment::remove_temp_files(vfs.as_ref(), &cfg.dir).map_err(io_err(format!(
            "could not clean directory {}",
            cfg.dir.display()
        )))?;
        segment::preallocate(vfs.as_ref(), &cfg.dir, cfg.timeline, 0, init_opts(cfg)).map_err(
            io_err(format!(
                "could not create WAL segment {}",
                segment_file_name(cfg.timeline, 0)
            )),
        )?;
        if let Some(parent) = cfg.dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            vfs.sync_dir(parent).map_err(io_err(format!(
                "could not sync directory {}",
                parent.display()
            )))?;
        }
        Ok(())
    }

    /// Opens the WAL for appending after recovery: the next record goes at `end_lsn` (the end of
    /// the last valid record found by [`crate::WalReader`], or `Lsn::FIRST` after `create`).
    /// Makes sure the segment holding `end_lsn` exists, zero-fills stale records that a crashed
    /// run may have left at or after `end_lsn` (they could otherwise validate again once new
    /// records end exactly where one starts), and preallocates `prealloc_segments` segments
    /// ahead. `redo_lsn` is the redo point of the last checkpoint.
    /// Source: xlog.c `StartupXLOG` (end of recovery), `PreallocXlogFiles`.
    ///
    /// # Errors
    /// I/O errors; `InvalidParameterValue` for a bad `wal_buffers_bytes` or an unaligned
    /// `end_lsn`.
    pub fn open(
        vfs: Arc<dyn Vfs>,
        cfg: WalConfig,
        end_lsn: Lsn,
        redo_lsn: Lsn,
    ) -> Result<Arc<Wal>> {
        if !cfg.wal_buffers_bytes.is_power_of_two() || cfg.wal_buffers_bytes < MIN_WAL_BUFFERS_BYTES
        {
            return Err(Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "wal_buffers must be a power of two of at least 1 MiB, not {} bytes",
                    cfg.wal_buffers_bytes
                ),
            ));
        }
        if end_lsn.0 < Lsn::FIRST.0 || end_lsn.0 % record::RECORD_ALIGN != 0 {
            return Err(Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("invalid WAL end position {end_lsn}"),
            ));
        }
        let dir = cfg.dir.clone();
        segment::remove_temp_files(vfs.as_ref(), &dir).map_err(io_err(format!(
            "could not clean directory {}",
            dir.display()
        )))?;
        segment::adopt_timeline(vfs.as_ref(), &dir, cfg.timeline, segment_of(end_lsn.0)).map_err(
            io_err(format!(
                "could not rename WAL segments for timeline {}",
                cfg.timeline
            )),
        )?;
        scrub_after_end(vfs.as_ref(), &dir, cfg.timeline, end_lsn.0, init_opts(&cfg))?;
        sync_replayed(
            vfs.as_ref(),
            &dir,
            cfg.timeline,
            redo_lsn.0.min(end_lsn.0),
            end_lsn.0,
        )?;
        let end = end_lsn.0;
        let tail = if cfg.direct {
            read_partial_block(vfs.as_ref(), &dir, cfg.timeline, end)?
        } else {
            Vec::new()
        };
        let flusher = range_sync_flusher(vfs.as_ref(), &cfg);
        // Read before `cfg` moves into the struct.
        let (flush_capacity, init_zero, recycle) = (cfg.flush_capacity, cfg.init_zero, cfg.recycle);
        let lz4 = cfg.compression == crate::WalCompression::Lz4;
        let wal = Arc::new(Wal {
            flusher,
            ring: Ring::new(cfg.wal_buffers_bytes),
            vfs,
            cfg,
            insert_pos: CachePadded::new(AtomicU64::new(end)),
            slots: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(SLOT_FREE))),
            redo_lsn: CachePadded::new(AtomicU64::new(redo_lsn.0)),
            path: WritePath::new(
                end,
                WriteState {
                    files: Vec::new(),
                    staging: AlignedBuf::zeroed(DIRECT_IO_ALIGN),
                    tail,
                },
            ),
            gc: GroupCommit::new(
                end,
                MAX_FLUSHES_IN_FLIGHT,
                Pipelining::WhenNotBatching,
                flush_capacity,
            ),
            segments: Mutex::new(()),
            prealloc_checked_seg: AtomicU64::new(u64::MAX),
            last_mark: AtomicU64::new(0),
            space_end: AtomicU64::new(segment_of(end) * WAL_SEGMENT_SIZE),
            stats: Counters::default(),
            removed_below: AtomicU64::new(0),
            senders: Arc::default(),
            writer: Mutex::new(None),
            writer_ctl: Arc::new(WriterCtl::new()),
            live: Live {
                compression_lz4: AtomicBool::new(lz4),
                init_zero: AtomicBool::new(init_zero),
                recycle: AtomicBool::new(recycle),
            },
        });
        wal.preallocate_ahead()?;
        wal.refresh_space_end();
        Ok(wal)
    }

    /// Inserts one record, concurrently with other inserters (PostgreSQL's `XLogInsertRecord`
    /// with `ReserveXLogInsertLocation` and `CopyXLogRecordToWAL`). `assemble` builds the record
    /// given the current redo point, so that the caller takes a full-page image of each block
    /// whose page LSN is `<= redo_lsn`. If a checkpoint moves the redo point between assembly
    /// and reservation, `assemble` is called again (PostgreSQL's `RedoRecPtr` recheck).
    /// `assemble` runs with no lock held.
    ///
    /// Returns (start LSN, end LSN); the end is 8-aligned. The record is durable only after
    /// `flush(end)`.
    ///
    /// # Errors
    /// None in practice: when the WAL buffers are full the inserter writes out old WAL itself,
    /// and a failed write there is a PANIC (the space is already reserved; a hole in the stream
    /// would hide every later record).
    ///
    /// # Panics
    /// If the record breaks the format's limits (see [`crate::record_len`]) or a write fails.
    pub fn insert(&self, assemble: &mut dyn FnMut(Lsn) -> Record) -> Result<(Lsn, Lsn)> {
        let mut buf = ENCODE_BUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
        let result = self.insert_encoded(
            &mut |redo| {
                let rec = assemble(redo);
                assert!(
                    rec.rmgr != crate::RM_WAL,
                    "resource manager {} is reserved for the WAL's own records",
                    crate::RM_WAL.0
                );
                rec
            },
            &mut buf,
        );
        if buf.capacity() <= MAX_CACHED_ENCODE_BYTES {
            ENCODE_BUF.with(|b| *b.borrow_mut() = buf);
        }
        Ok(result)
    }

    /// [`Wal::insert`] for the WAL's own records: no statistics beyond the WAL's counters.
    fn insert_encoded_quiet(&self, assemble: &mut dyn FnMut(Lsn) -> Record) {
        let mut buf = ENCODE_BUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
        self.insert_encoded(assemble, &mut buf);
        if buf.capacity() <= MAX_CACHED_ENCODE_BYTES {
            ENCODE_BUF.with(|b| *b.borrow_mut() = buf);
        }
    }

    fn insert_encoded(
        &self,
        assemble: &mut dyn FnMut(Lsn) -> Record,
        buf: &mut Vec<u8>,
    ) -> (Lsn, Lsn) {
        let mut redo = self.redo_lsn.load(Ordering::SeqCst);
        loop {
            let rec = assemble(Lsn(redo));
            record::encode_body(&rec, buf, self.compression());
            let slot = self.claim_slot();
            // RedoRecPtr recheck: begin_checkpoint changes redo_lsn only while holding every
            // slot, so what we read here stays valid until we release ours.
            let current_redo = self.redo_lsn.load(Ordering::SeqCst);
            if current_redo != redo {
                self.slots[slot].store(SLOT_FREE, Ordering::SeqCst);
                redo = current_redo;
                continue;
            }
            let len = buf.len() as u64;
            debug_assert_eq!(len % record::RECORD_ALIGN, 0);
            let start = self.insert_pos.fetch_add(len, Ordering::SeqCst);
            self.slots[slot].store(start, Ordering::SeqCst);
            record::seal(buf, start);
            self.copy_to_ring(slot, start, buf);
            self.slots[slot].store(SLOT_FREE, Ordering::SeqCst);

            let fpi = rec.blocks.iter().filter(|b| b.image.is_some()).count() as u64;
            self.stats.records.fetch_add(1, Ordering::Relaxed);
            if fpi > 0 {
                self.stats.fpi.fetch_add(fpi, Ordering::Relaxed);
            }
            self.stats.bytes.fetch_add(len, Ordering::Relaxed);
            return (Lsn(start), Lsn(start + len));
        }
    }

    /// Claims a free slot: CAS FREE -> RESERVING, this thread's slot first
    /// (`WALInsertLockAcquire`).
    fn claim_slot(&self) -> usize {
        let first = slot_hint();
        let mut spins = 0;
        loop {
            for i in 0..NUM_INSERT_SLOTS {
                let s = (first + i) % NUM_INSERT_SLOTS;
                if self.slots[s].load(Ordering::Relaxed) == SLOT_FREE
                    && self.slots[s]
                        .compare_exchange(
                            SLOT_FREE,
                            SLOT_RESERVING,
                            Ordering::SeqCst,
                            Ordering::Relaxed,
                        )
                        .is_ok()
                {
                    return s;
                }
            }
            backoff(&mut spins);
        }
    }

    /// Copies a sealed record to its reserved place `[start, start + len)` in the ring, in
    /// chunks of at most a quarter of the ring. Before each chunk, the region must have been
    /// written out (`write_lsn >= chunk_end - ring size`); if not, the inserter advertises its
    /// progress in its slot (`WALInsertLockUpdateInsertingAt`) and writes old WAL out itself
    /// (`AdvanceXLInsertBuffer`, counted as `wal_buffers_full`).
    fn copy_to_ring(&self, slot: usize, start: u64, buf: &[u8]) {
        let ring_bytes = self.ring.len_bytes();
        let max_chunk = (ring_bytes / 4) as usize;
        let mut off = 0usize;
        while off < buf.len() {
            let n = (buf.len() - off).min(max_chunk);
            let pos = start + off as u64;
            let need = (pos + n as u64).saturating_sub(ring_bytes);
            if self.path.write_lsn() < need {
                self.slots[slot].store(pos, Ordering::SeqCst);
                self.make_room(need);
            }
            self.ring.copy_in(pos, &buf[off..off + n]);
            off += n;
        }
    }

    /// Writes WAL out until `write_lsn >= need`. Called by an inserter whose slot value is at
    /// least `need`, so it never waits for itself.
    fn make_room(&self, need: u64) {
        self.stats.buffers_full.fetch_add(1, Ordering::Relaxed);
        self.path.write_out(self, need);
    }

    /// Waits until no insertion below `target` is in progress: every slot is free, held by a
    /// checkpoint, or at a position `>= target` (`WaitXLogInsertionsToFinish`). A slot still
    /// reserving (value 0) is waited for, since its record may be below `target`.
    fn wait_insertions(&self, target: u64) {
        for slot in &self.slots {
            let mut spins = 0;
            while slot.load(Ordering::SeqCst) < target {
                backoff(&mut spins);
            }
        }
    }

    /// Waits until all WAL up to `lsn` is durable, for no commit: the WAL rule before a page
    /// write, the WAL writer, a checkpoint (PostgreSQL's `XLogFlush`). One leader writes and
    /// syncs everything inserted so far; followers wait and never sync again what is already
    /// synced. Returns at once if `lsn <= flush_lsn()`. A leader for no commit never keeps its
    /// group open. Blocks the calling OS thread: never call it from an async task.
    ///
    /// # Errors
    /// `lsn` beyond the insert position (a bug in the caller; PostgreSQL's "xlog flush request
    /// is not satisfied").
    ///
    /// # Panics
    /// A failed write or sync is fatal: the implementation panics (PANIC) rather than retry.
    pub fn flush(&self, lsn: Lsn) -> Result<()> {
        self.flush_for(lsn, Request::Background)
    }

    /// Waits until the commit record ending at `lsn` is durable, by group commit: as
    /// [`Wal::flush`], but counted as a commit, and a leader keeps its group open as
    /// `group_commit` says (see [`GroupCommitMode`]): in `fixed` mode it sleeps
    /// `opts.commit_delay_us` µs first if at least `opts.commit_siblings` of the other
    /// `active_xacts - 1` transactions holding an xid are active (PostgreSQL's rule; the
    /// committer is one of `active_xacts`); in `adaptive` mode the controller in `adaptive/`
    /// decides, knowing `opts.session`. `opts.synchronous_commit` is the caller's to honour:
    /// this always waits.
    ///
    /// # Errors
    /// As [`Wal::flush`].
    ///
    /// # Panics
    /// As [`Wal::flush`].
    pub fn flush_commit(&self, lsn: Lsn, opts: &CommitOpts, active_xacts: usize) -> Result<()> {
        let req = Request::Commit {
            session: opts.session.0,
            wait: leader_wait(self.cfg.group_commit, opts, active_xacts),
        };
        self.flush_for(lsn, req)
    }

    fn flush_for(&self, lsn: Lsn, req: Request) -> Result<()> {
        let insert = self.insert_pos.load(Ordering::SeqCst);
        if lsn.0 > insert {
            return Err(Error::internal(format!(
                "WAL flush request {lsn} is beyond the insert position {}",
                Lsn(insert)
            )));
        }
        self.gc.flush(lsn.0, req, self);
        // The WAL writer preallocates when it runs: a committing session never waits for a
        // segment to be created and zero-filled, which under a write-IOPS limit takes long
        // enough to stall every commit behind it.
        if !self.writer_ctl.running.load(Ordering::Acquire) {
            self.preallocate_ahead_quietly();
        }
        Ok(())
    }

    /// Preallocates the `prealloc_segments` segments after the insert position's segment, if
    /// the insert position entered a new segment since the last check.
    fn preallocate_ahead(&self) -> Result<()> {
        let cur = segment_of(self.insert_pos.load(Ordering::SeqCst));
        if self.prealloc_checked_seg.load(Ordering::Acquire) == cur {
            return Ok(());
        }
        let Some(_g) = self.segments.try_lock() else {
            return Ok(()); // someone else is creating or recycling segments right now
        };
        let ctx = |segno| format!("could not preallocate WAL segment {}", self.seg_name(segno));
        for segno in cur..=cur + u64::from(self.cfg.prealloc_segments) {
            if !self.segment_exists(segno).map_err(io_err(ctx(segno)))? {
                self.create_segment(segno).map_err(io_err(ctx(segno)))?;
            }
        }
        self.prealloc_checked_seg.store(cur, Ordering::Release);
        self.refresh_space_end();
        Ok(())
    }

    /// Advances `space_end` over segments that exist (preallocated or recycled).
    fn refresh_space_end(&self) {
        let mut end = self.space_end.load(Ordering::Acquire);
        // A failed check stops the advance: `check_space` then finds out for itself.
        while self.segment_exists(segment_of(end)).unwrap_or(false) {
            end = (segment_of(end) + 1) * WAL_SEGMENT_SIZE;
        }
        self.space_end.fetch_max(end, Ordering::AcqRel);
    }

    /// Makes sure `bytes` more of WAL, plus [`WAL_SPACE_RESERVE`], can be inserted without
    /// creating a segment on the write path, creating (preallocating) segments now if needed.
    /// Storage calls it before it changes any page for a row write or a commit, so that a full
    /// disk fails the statement cleanly instead of PANICking in the WAL writer, where a failed
    /// segment creation is fatal.
    ///
    /// # Errors
    /// 53100 (disk full) if a segment could not be created for lack of space; other I/O
    /// errors.
    pub fn check_space(&self, bytes: u64) -> Result<()> {
        let need = self
            .insert_pos
            .load(Ordering::SeqCst)
            .saturating_add(bytes)
            .saturating_add(WAL_SPACE_RESERVE);
        if need <= self.space_end.load(Ordering::Acquire) {
            return Ok(());
        }
        let _g = self.segments.lock();
        self.refresh_space_end();
        while self.space_end.load(Ordering::Acquire) < need {
            let segno = segment_of(self.space_end.load(Ordering::Acquire));
            self.create_segment(segno).map_err(io_err(format!(
                "could not create WAL segment {}",
                self.seg_name(segno)
            )))?;
            self.refresh_space_end();
        }
        Ok(())
    }

    fn preallocate_ahead_quietly(&self) {
        if let Err(e) = self.preallocate_ahead() {
            // Not fatal here: the write path creates the segment on demand and PANICs there.
            tracing::warn!("{e}");
        }
    }

    /// End of the last reserved record (PostgreSQL's insert position), bytes.
    pub fn insert_lsn(&self) -> Lsn {
        Lsn(self.insert_pos.load(Ordering::SeqCst))
    }

    /// Everything before this has been written (not necessarily synced), bytes.
    pub fn write_lsn(&self) -> Lsn {
        Lsn(self.path.write_lsn())
    }

    /// Everything before this is durable, bytes.
    pub fn flush_lsn(&self) -> Lsn {
        Lsn(self.gc.flushed())
    }

    /// Notified whenever [`Wal::flush_lsn`] moves (every group-commit publish, including the
    /// WAL writer's flushes). A waiter enables its `Notified` future, then reads `flush_lsn`,
    /// then awaits, so that no move between the read and the wait is missed.
    pub fn flush_notify(&self) -> &tokio::sync::Notify {
        self.gc.published()
    }

    /// The segment numbers below this have been recycled or removed (0: none): bytes read from
    /// such a segment's file may belong to another segment. Read after reading a segment to
    /// know whether what was read is valid (PostgreSQL's `XLogGetLastRemovedSegno` + 1).
    pub fn removed_below(&self) -> u64 {
        self.removed_below.load(Ordering::SeqCst)
    }

    /// The directory of the segment files.
    pub fn dir(&self) -> &std::path::Path {
        &self.cfg.dir
    }

    /// The walsenders streaming this WAL.
    pub fn senders(&self) -> &Arc<crate::senders::WalSenders> {
        &self.senders
    }

    /// The current checkpoint's redo point (PostgreSQL's `RedoRecPtr`), bytes.
    pub fn redo_lsn(&self) -> Lsn {
        Lsn(self.redo_lsn.load(Ordering::SeqCst))
    }

    /// Starts a checkpoint: with every insertion excluded, sets the redo point to the current
    /// insert position and returns it (PostgreSQL's `CreateCheckPoint` under
    /// `WALInsertLockAcquireExclusive`). Records reserved afterwards were assembled with the new
    /// redo point. Must not be called while the thread is inside `insert` after `assemble`
    /// (it is fine from inside `assemble`, which runs with no slot held).
    pub fn begin_checkpoint(&self) -> Lsn {
        for slot in &self.slots {
            let mut spins = 0;
            while slot
                .compare_exchange(
                    SLOT_FREE,
                    SLOT_CHECKPOINT,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                )
                .is_err()
            {
                backoff(&mut spins);
            }
        }
        let redo = self.insert_pos.load(Ordering::SeqCst);
        self.redo_lsn.store(redo, Ordering::SeqCst);
        for slot in &self.slots {
            slot.store(SLOT_FREE, Ordering::SeqCst);
        }
        Lsn(redo)
    }

    /// Recycles or removes segments wholly before `lsn` (after a checkpoint whose redo point is
    /// `lsn`; never beyond `flush_lsn`). Each old segment is renamed to the first free segment
    /// number after the insert position's segment, up to the segment holding `lsn + keep`
    /// (bytes), and at least `2 * prealloc_segments` ahead (the preallocated ones plus as many
    /// recycled), or removed if there is none; then the directory is synced. The caller passes
    /// as `keep` the WAL it expects from this redo point to the next (PostgreSQL's
    /// `XLOGfileslop`: the checkpoint distance estimate, within `min_wal_size` and
    /// `max_wal_size`), so that a busy server reuses its segments instead of creating and
    /// zero-filling new ones. Recycled files keep their stale
    /// records, whose header LSNs no longer match their position. Source: xlog.c
    /// `RemoveOldXlogFiles`, `XLOGfileslop`, `RemoveXlogFile`, `InstallXLogFileSegment`.
    /// Returns the segments (removed, recycled), for the `log_checkpoints` line.
    ///
    /// # Errors
    /// I/O errors listing, renaming or removing segments.
    ///
    /// # Panics
    /// PANICs ([`walnut_common::panic_fatal`]) if the directory's fsync fails: it is never
    /// retried.
    pub fn remove_old_segments(&self, lsn: Lsn, keep: u64) -> Result<(usize, usize)> {
        let cutoff = segment_of(lsn.0.min(self.gc.flushed()));
        let dir = &self.cfg.dir;
        let _g = self.segments.lock();
        let existing = segment::list_segment_files(self.vfs.as_ref(), dir).map_err(io_err(
            format!("could not list WAL directory {}", dir.display()),
        ))?;
        let cur = segment_of(self.insert_pos.load(Ordering::SeqCst));
        let max_recycled = (cur + 2 * u64::from(self.cfg.prealloc_segments))
            .max(segment_of(lsn.0.saturating_add(keep)));
        let mut next_free = cur + 1;
        let mut changed = false;
        let (mut removed, mut recycled) = (0, 0);
        let present: std::collections::HashSet<u64> = existing.iter().map(|&(s, _)| s).collect();
        for &(old, old_tli) in existing.iter().filter(|&&(s, _)| s < cutoff) {
            // Before the rename: a reader that checks after reading sees it (`XLogFileRead`'s
            // check against `lastRemovedSegNo`).
            self.removed_below.fetch_max(old + 1, Ordering::SeqCst);
            let old_name = segment_file_name(old_tli, old);
            let from = dir.join(&old_name);
            while next_free <= max_recycled && present.contains(&next_free) {
                next_free += 1;
            }
            if self.live.recycle.load(Ordering::Relaxed) && next_free <= max_recycled {
                // A recycled segment takes the current timeline's name.
                let new_name = self.seg_name(next_free);
                self.vfs
                    .rename(&from, &dir.join(&new_name))
                    .map_err(io_err(format!(
                        "could not rename WAL segment {old_name} to {new_name}"
                    )))?;
                tracing::debug!(from = %old_name, to = %new_name, "recycled WAL segment");
                next_free += 1;
                recycled += 1;
            } else {
                self.vfs
                    .remove(&from)
                    .map_err(io_err(format!("could not remove WAL segment {old_name}")))?;
                tracing::debug!(segment = %old_name, "removed WAL segment");
                removed += 1;
            }
            changed = true;
        }
        if changed {
            if let Err(e) = self.vfs.sync_dir(dir) {
                walnut_common::panic_fatal(&format!(
                    "could not fsync directory \"{}\": {e}",
                    dir.display()
                ));
            }
            self.refresh_space_end();
        }
        Ok((removed, recycled))
    }

    /// Flushes everything inserted and stops background threads.
    ///
    /// # Panics
    /// As [`Wal::flush`], on a failed write or sync.
    pub fn shutdown(&self) {
        self.stop_wal_writer();
        let _ = self.flush(self.insert_lsn());
    }

    /// The group commit's EWMA of flush service time (write + sync), µs: how long a commit's
    /// flush takes now. Data write-back watches it to leave the device to the WAL.
    pub fn flush_latency_us(&self) -> u64 {
        self.gc.stats().flush_latency_us
    }

    /// A snapshot of the counters (times in µs).
    pub fn stats(&self) -> WalStats {
        let s = &self.stats;
        let g = self.gc.stats();
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WalStats {
            wal_records: l(&s.records),
            wal_fpi: l(&s.fpi),
            wal_bytes: l(&s.bytes),
            wal_buffers_full: l(&s.buffers_full),
            wal_write: l(&s.write),
            wal_sync: l(&s.sync),
            wal_write_time_us: l(&s.write_time_us),
            wal_sync_time_us: l(&s.sync_time_us),
            group_flushes: g.flushes,
            group_commits: g.commits,
            group_histogram: HISTOGRAM_BOUNDS.into_iter().zip(g.histogram).collect(),
            group_closed: CloseCause::ALL
                .iter()
                .enumerate()
                .map(|(i, c)| (c.name(), g.closed[i], g.closed_single[i]))
                .collect(),
            group_wait_time_us: g.wait_us,
            group_patience_us: g.patience_us,
            group_recent_wait_us: g.recent_wait_us,
            group_flush_latency_us: g.flush_latency_us,
            group_sessions: g.sessions,
            group_flush_capacity: g.flush_capacity,
            group_utilization: g.utilization,
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        *self.writer_ctl.stop.lock() = true;
        self.writer_ctl.cv.notify_all();
    }
}

impl FlushDevice for Wal {
    fn inserted(&self) -> u64 {
        self.insert_pos.load(Ordering::SeqCst)
    }

    fn mark(&self, durable: u64) {
        if self.last_mark.fetch_max(durable, Ordering::AcqRel) >= durable {
            return;
        }
        self.insert_encoded_quiet(&mut |_| Record {
            rmgr: crate::RM_WAL,
            info: crate::WAL_FLUSH_MARK,
            xid: walnut_common::Xid::INVALID,
            flags: 0,
            blocks: Vec::new(),
            main_data: durable.to_le_bytes().to_vec(),
        });
    }

    /// The leader's work: [`WritePath::write_and_sync`] over this WAL's files.
    fn write_and_sync(&self, target: u64) {
        self.path.write_and_sync(self, target);
    }
}

impl Wal {
    /// The name segment `segno` has, or gets, on this WAL's timeline.
    fn seg_name(&self, segno: u64) -> String {
        segment_file_name(self.cfg.timeline, segno)
    }

    /// True if segment `segno` has a file (of any timeline).
    fn segment_exists(&self, segno: u64) -> std::io::Result<bool> {
        segment::find_segment(self.vfs.as_ref(), &self.cfg.dir, segno, self.cfg.timeline)
            .map(|p| p.is_some())
    }

    /// Creates (preallocates) segment `segno` on this WAL's timeline.
    fn create_segment(&self, segno: u64) -> std::io::Result<()> {
        segment::preallocate(
            self.vfs.as_ref(),
            &self.cfg.dir,
            self.cfg.timeline,
            segno,
            self.init_opts(),
        )
    }

    /// The timeline this WAL is written on ([`WalConfig::timeline`]).
    pub fn timeline(&self) -> u32 {
        self.cfg.timeline
    }

    /// The path of segment `segno`'s file, whatever timeline named it; `None` if it does not
    /// exist (removed, recycled, or not yet created).
    ///
    /// # Errors
    /// I/O errors listing the WAL directory.
    pub fn segment_path(&self, segno: u64) -> Result<Option<std::path::PathBuf>> {
        segment::find_segment(self.vfs.as_ref(), &self.cfg.dir, segno, self.cfg.timeline).map_err(
            io_err(format!(
                "could not read WAL directory {}",
                self.cfg.dir.display()
            )),
        )
    }

    /// Segment initialization options in effect now.
    fn init_opts(&self) -> InitOpts {
        InitOpts {
            zero: self.live.init_zero.load(Ordering::Relaxed),
            direct: self.cfg.direct_init,
        }
    }

    /// `wal_compression` in effect.
    pub fn compression(&self) -> crate::WalCompression {
        if self.live.compression_lz4.load(Ordering::Relaxed) {
            crate::WalCompression::Lz4
        } else {
            crate::WalCompression::Off
        }
    }

    /// Applies the `sighup` parameters the WAL reads while running (`wal_compression`,
    /// `wal_init_zero`, `wal_recycle`, `wal_writer_delay`, `wal_writer_flush_after`) from reloaded settings. A segment created or
    /// recycled after this uses the new values; `wal_sync_range` keeps deciding per segment
    /// from how much of it is allocated, so a segment made with `wal_init_zero = off` is
    /// synced with `fdatasync`.
    pub fn apply_settings(&self, s: &walnut_common::guc::Settings) {
        use crate::guc::{
            WAL_COMPRESSION, WAL_INIT_ZERO, WAL_RECYCLE, WAL_WRITER_DELAY, WAL_WRITER_FLUSH_AFTER,
        };
        self.live.compression_lz4.store(
            crate::WalCompression::parse(&s.text(&WAL_COMPRESSION)) == crate::WalCompression::Lz4,
            Ordering::Relaxed,
        );
        self.live
            .init_zero
            .store(s.bool(&WAL_INIT_ZERO), Ordering::Relaxed);
        self.live
            .recycle
            .store(s.bool(&WAL_RECYCLE), Ordering::Relaxed);
        self.writer_ctl
            .delay_ms
            .store(s.int(&WAL_WRITER_DELAY).max(1) as u64, Ordering::Relaxed);
        self.writer_ctl.flush_after.store(
            s.int(&WAL_WRITER_FLUSH_AFTER) as u64 * walnut_common::BLCKSZ as u64,
            Ordering::Relaxed,
        );
        self.writer_ctl.cv.notify_all();
        // Checked when set: a bad value never reaches here.
        self.senders.set_sync(
            crate::senders::SyncStandbys::parse(&s.text(&crate::guc::SYNCHRONOUS_STANDBY_NAMES))
                .unwrap_or(None),
        );
        self.senders
            .set_max_apply_lag(s.int(&crate::guc::MAX_STANDBY_APPLY_LAG).max(0) as u64);
    }
}

/// Segment initialization options from the configuration (before the WAL is open).
fn init_opts(cfg: &WalConfig) -> InitOpts {
    InitOpts {
        zero: cfg.init_zero,
        direct: cfg.direct_init,
    }
}

/// Syncs the segments holding `[from, end)`: after a process crash, what recovery read may
/// exist only in the page cache, and the first flush of this run declares everything before
/// `end` durable (PostgreSQL's `SyncDataDirectory` at the start of crash recovery).
fn sync_replayed(
    vfs: &dyn Vfs,
    dir: &std::path::Path,
    tli: u32,
    from: u64,
    end: u64,
) -> Result<()> {
    for segno in segment_of(from)..=segment_of(end) {
        let ctx = || {
            format!(
                "could not sync WAL segment {}",
                segment_file_name(tli, segno)
            )
        };
        if let Some(f) = segment::open_existing(vfs, dir, segno, tli).map_err(io_err(ctx()))? {
            if let Err(e) = f.sync_data() {
                walnut_common::panic_fatal(&format!("{}: {e}", ctx()));
            }
        }
    }
    Ok(())
}

/// Destroys records a crashed run may have left at or after `end` (see [`Wal::open`]): makes
/// sure the segment holding `end` exists, zero-fills its tail if it holds such a record, and
/// zero-fills any later segment that does, syncing each; a segment it finds clean is synced
/// too, since after a process kill it may be clean only in the page cache. Recycled and
/// preallocated segments are otherwise untouched.
///
/// # Panics
/// PANICs if the sync of a clean segment fails.
fn scrub_after_end(
    vfs: &dyn Vfs,
    dir: &std::path::Path,
    tli: u32,
    end: u64,
    init: InitOpts,
) -> Result<()> {
    let cur = segment_of(end);
    let ctx = |segno: u64| {
        format!(
            "could not prepare WAL segment {}",
            segment_file_name(tli, segno)
        )
    };
    if segment::open_existing(vfs, dir, cur, tli)
        .map_err(io_err(ctx(cur)))?
        .is_none()
    {
        segment::preallocate(vfs, dir, tli, cur, init).map_err(io_err(ctx(cur)))?;
    }
    let segs = segment::list_segments(vfs, dir)
        .map_err(io_err(format!("could not list {}", dir.display())))?;
    for (segno, _) in segs.into_iter().filter(|&(s, _)| s >= cur) {
        let Some(file) =
            segment::open_existing(vfs, dir, segno, tli).map_err(io_err(ctx(segno)))?
        else {
            continue;
        };
        let from = if segno == cur {
            end % WAL_SEGMENT_SIZE
        } else {
            0
        };
        if segment::has_stale_records(file.as_ref(), segno, from, end)
            .map_err(io_err(ctx(segno)))?
        {
            tracing::info!(segment = %segment_file_name(tli, segno), "zeroing WAL left after the end of valid WAL");
            segment::zero_tail(file.as_ref(), from).map_err(io_err(ctx(segno)))?;
        } else if let Err(e) = file.sync_data() {
            // A segment that reads clean may be clean only in the page cache: a run killed
            // before its scrub's sync left zeros there over stale records still on disk, which
            // a power loss after this run's commits would bring back.
            walnut_common::panic_fatal(&format!("{}: {e}", ctx(segno)));
        }
    }
    Ok(())
}

/// Reads records sequentially from a start LSN (redo; PostgreSQL's `XLogReadRecord`).
pub struct WalReader {
    state: ReaderState,
}

impl WalReader {
    /// Opens the WAL in `dir` for reading from `start` (which must be a record start).
    ///
    /// # Errors
    /// I/O errors; a missing segment for `start` is a corruption error.
    pub fn open(vfs: Arc<dyn Vfs>, dir: PathBuf, start: Lsn) -> Result<WalReader> {
        Ok(WalReader {
            state: ReaderState::open(vfs, dir, start)?,
        })
    }

    /// The next valid record (flush marks are skipped), or `None` at the end of valid WAL:
    /// missing next segment, zero length, bad length, LSN mismatch (stale record in a recycled
    /// segment), truncated record or bad CRC — unless a later flush mark attests that the bad
    /// position had been durable. After `None`, further calls return `None` again.
    ///
    /// # Errors
    /// I/O errors; corruption (naming the LSN) when WAL that had been durable is invalid and
    /// valid WAL follows it (see the decision table in `reader.rs` and DESIGN.md).
    pub fn next_record(&mut self) -> Result<Option<DecodedRecord>> {
        self.state.next_record()
    }

    /// End of the last record returned (where a new WAL would continue); the start position if
    /// none was returned.
    pub fn end_lsn(&self) -> Lsn {
        self.state.end_lsn()
    }

    /// Streaming mode, for a standby's replay of WAL a walreceiver is writing: from now on the
    /// reader reads no byte at or past `limit` (the receiver's flush position, bytes), and an
    /// invalid or incomplete record before it is "not yet arrived" (`None`, to be read again
    /// after the limit grows) instead of the end of WAL, with no search for flush marks
    /// beyond it. A standby's first pass over its local WAL uses `Lsn(u64::MAX - 1)`: no
    /// limit, but a torn tail is the end of the WAL received so far, never corruption.
    pub fn set_limit(&mut self, limit: Lsn) {
        self.state.set_limit(limit.0);
    }

    /// Drops cached bytes, so the next read sees the files as they are now (after a receiver
    /// has overwritten the tail this reader found invalid).
    pub fn forget_cache(&mut self) {
        self.state.forget_cache();
    }

    /// From now on, records come with their LZ4-compressed full-page images still compressed
    /// (`BlockRef::image_lz4`): redo decompresses each straight into its buffer
    /// (`BlockRef::restore_image`), on the thread that applies the block, instead of the
    /// reading thread decompressing into a new allocation.
    pub fn defer_image_decompression(&mut self) {
        self.state.defer_images = true;
    }
}
