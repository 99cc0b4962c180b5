//! walnut's storage engine: pages, the buffer pool, heap tables, the B-tree, transactions,
//! the catalog, checkpoints and redo recovery. See DESIGN.md beside this crate.
//!
//! [`Storage`] is one open data directory. [`Storage::initdb`] creates one; [`Storage::open`]
//! runs crash recovery and starts the background checkpointer. Transactions are
//! [`txn::Txn`]s.
#![forbid(unsafe_code)]

pub mod aio;
pub mod autovacuum;
pub mod backup;
pub mod bgwriter;
pub mod btree;
pub mod bufpool;
pub mod bulk_write;
pub mod catalog;
pub mod checkpointer;
pub mod control;
pub mod feedback;
pub mod fsm;
pub mod guc;
pub mod heap;
pub mod page;
pub mod progress;
pub mod recovery;
pub mod seq;
pub mod slots;
pub mod smgr;
pub mod standby;
pub mod stats;
pub mod tabstat;
pub mod timeline;
pub mod txn;
pub mod vacuum;
pub mod verify;
pub mod writeback;
pub mod xact;

use bufpool::BufferPool;
pub use checkpointer::{Cause, WriteSettings};
use control::{ControlFile, DbState};
use parking_lot::{Condvar, Mutex, RwLock};
use smgr::Smgr;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use walnut_common::guc::Settings;
use walnut_common::{Error, Lsn, RelFileId, Result, SqlState, Xid};
use walnut_io::Vfs;
use walnut_wal::{Record, RmgrId, Wal, WalConfig};
use xact::XactManager;

/// Resource manager of transaction records.
pub const RM_XACT: RmgrId = RmgrId(1);
/// Commit record: main data = u32 count, then u32 relation files to remove.
pub const XACT_COMMIT: u8 = 0x00;
/// Abort record: same layout (relation files the transaction created).
pub const XACT_ABORT: u8 = 0x10;
/// Resource manager of relation-file records.
pub const RM_SMGR: RmgrId = RmgrId(4);
/// Relation file created: main data = u32 relation file id.
pub const SMGR_CREATE: u8 = 0x00;
/// Relation file truncated by VACUUM: main data = u32 relation file id, u32 blocks kept
/// (PostgreSQL's `XLOG_SMGR_TRUNCATE`).
pub const SMGR_TRUNCATE: u8 = 0x10;
/// Resource manager of checkpoint records.
pub const RM_XLOG: RmgrId = RmgrId(5);
/// Checkpoint: main data = u64 redo LSN, u64 next xid, u32 next relation file.
pub const XLOG_CHECKPOINT: u8 = 0x00;

pub use guc::{IoDirect, GUCS};

/// Server-level settings the storage engine uses, read from the configuration parameters by
/// [`StorageConfig::from_settings`].
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// `shared_buffers`, in pages.
    pub shared_buffers_pages: usize,
    /// `full_page_writes`.
    pub full_page_writes: bool,
    /// `checkpoint_timeout`, seconds (a `sighup` parameter: see [`Storage::apply_settings`]).
    pub checkpoint_timeout_s: u64,
    /// `max_wal_size`, MB: a checkpoint starts when WAL since the last redo point reaches
    /// `max_wal_size / (1 + checkpoint_completion_target)` (`sighup`).
    pub max_wal_size_mb: u64,
    /// `wal_writer_delay`, ms (`sighup`).
    pub wal_writer_delay_ms: u64,
    /// `io_direct`.
    pub io_direct: IoDirect,
    /// Checkpoint pacing and background writing (reloadable).
    pub write: WriteSettings,
    /// `io_method`.
    pub io_method: aio::IoMethod,
    /// `io_workers`: threads of `io_method = worker`.
    pub io_workers: usize,
    /// `effective_io_concurrency`: blocks a sequential scan reads ahead (`sighup`).
    pub effective_io_concurrency: u32,
    /// `io_combine_limit`: most blocks one read ahead reads at once (`sighup`).
    pub io_combine_limit: u32,
    /// `maintenance_io_concurrency`: blocks a maintenance scan reads ahead (`sighup`).
    pub maintenance_io_concurrency: u32,
    /// `max_parallel_maintenance_workers`: helper threads of an index build's heap scan
    /// (`sighup`).
    pub max_parallel_maintenance_workers: u32,
    /// `recovery_workers`, resolved: threads applying blocks in redo and standby replay (1: serial;
    /// `-1` in the settings gives the number of cores).
    pub recovery_workers: usize,
    /// `recovery_parallel_backlog`, bytes: a standby replays in parallel only while at least
    /// this much received WAL waits for replay (0: always).
    pub recovery_parallel_backlog_bytes: u64,
    /// `recovery_prefetch` is not `off`.
    pub recovery_prefetch: bool,
    /// `wal_decode_buffer_size`, bytes: how far redo decodes ahead to prefetch.
    pub wal_decode_buffer_bytes: u64,
    /// `log_startup_progress_interval`, ms (0: no progress lines).
    pub log_startup_progress_interval_ms: u64,
    /// Autovacuum's settings (reloadable).
    pub autovacuum: autovacuum::AutovacuumSettings,
    /// The WAL's configuration (`wal_sync_method`, `wal_buffers`, `group_commit`, ...); its
    /// `dir` is replaced by the data directory's `wal` at open.
    pub wal: WalConfig,
}

impl StorageConfig {
    /// The configuration the settings give (`io_direct`'s `wal` and `wal_init` go to the WAL,
    /// `data` to the storage manager).
    pub fn from_settings(s: &Settings) -> StorageConfig {
        let shared_buffers_pages = s.int(&guc::SHARED_BUFFERS) as usize;
        let io_direct = IoDirect::parse(&s.text(&guc::IO_DIRECT))
            .expect("the registry admits only valid io_direct values");
        let shared_buffers_bytes = shared_buffers_pages as u64 * walnut_common::BLCKSZ as u64;
        let mut wal = WalConfig::from_settings("wal", s, Some(shared_buffers_bytes));
        wal.direct = io_direct.wal;
        wal.direct_init = io_direct.wal_init;
        StorageConfig {
            shared_buffers_pages,
            full_page_writes: s.bool(&guc::FULL_PAGE_WRITES),
            checkpoint_timeout_s: s.int(&guc::CHECKPOINT_TIMEOUT) as u64,
            max_wal_size_mb: s.int(&guc::MAX_WAL_SIZE) as u64,
            wal_writer_delay_ms: s.int(&walnut_wal::guc::WAL_WRITER_DELAY) as u64,
            io_direct,
            write: WriteSettings::from_settings(s),
            io_method: aio::IoMethod::parse(&s.text(&guc::IO_METHOD)),
            io_workers: s.int(&guc::IO_WORKERS) as usize,
            effective_io_concurrency: s.int(&guc::EFFECTIVE_IO_CONCURRENCY) as u32,
            io_combine_limit: s.int(&guc::IO_COMBINE_LIMIT) as u32,
            maintenance_io_concurrency: s.int(&guc::MAINTENANCE_IO_CONCURRENCY) as u32,
            max_parallel_maintenance_workers: s.int(&guc::MAX_PARALLEL_MAINTENANCE_WORKERS) as u32,
            recovery_workers: match s.int(&guc::RECOVERY_WORKERS) {
                n if n >= 1 => n as usize,
                _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
            },
            recovery_parallel_backlog_bytes: s.int(&guc::RECOVERY_PARALLEL_BACKLOG) as u64 * 1024,
            recovery_prefetch: s.text(&guc::RECOVERY_PREFETCH) != "off",
            wal_decode_buffer_bytes: s.int(&guc::WAL_DECODE_BUFFER_SIZE) as u64 * 1024,
            log_startup_progress_interval_ms: s.int(&guc::LOG_STARTUP_PROGRESS_INTERVAL) as u64,
            autovacuum: autovacuum::AutovacuumSettings::from_settings(s),
            wal,
        }
    }
}

impl Default for StorageConfig {
    /// Every parameter at its default.
    fn default() -> Self {
        StorageConfig::from_settings(&Settings::builtin())
    }
}

#[derive(Default)]
struct CheckpointState {
    requested: u64,
    completed: u64,
    shutdown: bool,
    last_error: Option<String>,
}

/// One open data directory.
pub struct Storage {
    /// Data directory.
    pub dir: PathBuf,
    /// File system.
    pub vfs: Arc<dyn Vfs>,
    /// Relation files.
    pub smgr: Arc<Smgr>,
    /// Buffer pool.
    pub pool: BufferPool,
    /// Transaction status and waits.
    pub xact: XactManager,
    /// `full_page_writes`.
    pub full_page_writes: bool,
    /// The data directory's identity (the control file's; IDENTIFY_SYSTEM reports it).
    pub system_identifier: u64,
    /// The current timeline (`timeline.rs`; the control file's, one more after a promotion).
    timeline: AtomicU32,
    /// Replication slots (`pg_replslot`), which keep WAL for their receivers.
    pub slots: Arc<slots::ReplicationSlots>,
    wal: OnceLock<Arc<Wal>>,
    next_relfile: AtomicU32,
    /// Committed catalog (table name -> info).
    pub catalog: catalog::CatalogCache,
    config: StorageConfig,
    ckpt: Mutex<CheckpointState>,
    ckpt_cond: Condvar,
    ckpt_running: Mutex<()>,
    /// Immediate checkpoints waiting for `ckpt_running`: a spread checkpoint then hurries.
    ckpt_hurry: AtomicUsize,
    last_redo: AtomicU64,
    stopping: AtomicBool,
    /// `checkpoint_timeout`, seconds, as the checkpointer reads it (reloadable).
    checkpoint_timeout_s: AtomicU64,
    /// `max_wal_size`, MB, as the checkpointer reads it (reloadable).
    max_wal_size_mb: AtomicU64,
    /// Files of dropped relations whose removal failed after their commit, for the next
    /// checkpoint to retry.
    unlink_later: Mutex<Vec<RelFileId>>,
    /// Checkpoint pacing and background writing, as reloaded.
    write_settings: RwLock<WriteSettings>,
    /// PostgreSQL's `CheckPointDistanceEstimate`, kB: a decaying average of the WAL between
    /// checkpoints' redo points.
    distance_estimate_kb: Mutex<u64>,
    /// The checkpointer's view of the WAL's flush latency, kept across checkpoints.
    ckpt_pressure: Mutex<checkpointer::WalPressure>,
    /// The I/O workers of `io_method = worker`, once the storage is open.
    io_workers: OnceLock<Arc<aio::IoWorkers>>,
    /// `max_parallel_maintenance_workers`, as reloaded.
    max_parallel_maintenance_workers: AtomicU32,
    /// A standby's recovery state (set when opened as one; see `standby`).
    recovery: OnceLock<Arc<standby::Recovery>>,
    /// Recovery prefetch's counters (`pg_stat_recovery_prefetch`).
    pub recovery_prefetch: recovery::prefetch::PrefetchStats,
    /// The parallel redo's counters (`walnut_stat_recovery_workers`).
    pub redo_stats: Arc<recovery::parallel::RedoStats>,
    /// Pruning's counters (`heap::prune`).
    pub prune_stats: heap::PruneStats,
    /// Per-table activity counters (`pg_stat_user_tables`).
    pub table_stats: tabstat::TableStats,
    /// Autovacuum's settings and workers.
    pub autovacuum: Arc<autovacuum::Autovacuum>,
    /// Per heap file, the oldest xid a VACUUM since start-up left in it (PostgreSQL's
    /// `pg_class.relfrozenxid`, in memory only: a file without an entry counts as the
    /// status store's oldest xid). See [`vacuum::frozen_cutoff`].
    pub relfrozenxid: Mutex<HashMap<RelFileId, Xid>>,
}

/// Inserts one WAL record (`rmgr`, `info`) for `xid` carrying `images[i]` as the whole new
/// content of block `blocks[i]` of `rel` (`will_init`, no data), and returns its end, which the
/// caller sets as each page's LSN. The shared part of [`Storage::log_new_pages`] (pages in the
/// buffer pool) and of the bulk load's writes into a relation its transaction created (pages
/// never in the pool, logged by the `bulk writer` thread, which holds the WAL but not the
/// storage; DESIGN.md, "Bulk load").
///
/// # Errors
/// The WAL insert's (53100 if the WAL cannot get space); then nothing was logged.
pub(crate) fn log_images(
    wal: &Wal,
    rel: RelFileId,
    xid: Xid,
    (rmgr, info): (RmgrId, u8),
    blocks: &[walnut_common::BlockNumber],
    images: &[&page::PageBuf],
) -> Result<Lsn> {
    assert_eq!(blocks.len(), images.len(), "an image for each block");
    let (_, end) = wal.insert(&mut |_redo| Record {
        rmgr,
        info,
        xid,
        flags: 0,
        blocks: blocks
            .iter()
            .zip(images)
            .map(|(&block, img)| walnut_wal::BlockRef {
                rel,
                block,
                will_init: true,
                image_lz4: false,
                image: Some(img.to_vec()),
                data: vec![],
            })
            .collect(),
        main_data: vec![],
    })?;
    Ok(end)
}

pub use walnut_common::panic_fatal;

#[cfg(test)]
thread_local! {
    /// Tests only: runs in [`Storage::log_change`] between the dirty marks and the WAL insert,
    /// on the thread making the change.
    pub(crate) static BEFORE_LOG_INSERT: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
        const { std::cell::RefCell::new(None) };
}

impl Storage {
    /// The settings this storage was opened with (the `sighup` ones may have changed since:
    /// see [`Storage::apply_settings`]).
    pub fn config(&self) -> &StorageConfig {
        &self.config
    }

    /// Applies the `sighup` parameters the storage engine and its WAL read while running, from
    /// reloaded settings: `checkpoint_timeout` and `max_wal_size` take effect at the
    /// checkpointer's next look (within 200 ms), the WAL's at its next segment or flush.
    pub fn apply_settings(&self, s: &Settings) {
        let c = StorageConfig::from_settings(s);
        self.checkpoint_timeout_s
            .store(c.checkpoint_timeout_s, Ordering::Relaxed);
        self.max_wal_size_mb
            .store(c.max_wal_size_mb, Ordering::Relaxed);
        self.smgr
            .backend_flush_after
            .store(c.write.backend_flush_after as u32, Ordering::Relaxed);
        *self.write_settings.write() = c.write;
        self.autovacuum.set_settings(c.autovacuum);
        self.max_parallel_maintenance_workers
            .store(c.max_parallel_maintenance_workers, Ordering::Relaxed);
        if let Some(w) = self.io_workers.get() {
            w.set_distance(c.effective_io_concurrency);
            w.set_combine(c.io_combine_limit);
            w.set_maintenance_distance(c.maintenance_io_concurrency);
        }
        if let Some(wal) = self.wal.get() {
            wal.apply_settings(s);
        }
        self.ckpt_cond.notify_all();
    }

    /// The WAL (after recovery).
    pub fn wal(&self) -> &Arc<Wal> {
        self.wal
            .get()
            .expect("WAL is attached once recovery has ended")
    }

    /// Marks the pages pinned in `pins` dirty, then inserts the WAL record that `assemble`
    /// builds (see [`walnut_wal::Wal::insert`]) for the change the caller has just made to
    /// them, and returns the record's end LSN, which the caller then sets as each page's LSN.
    /// The caller holds each page's exclusive latch throughout.
    ///
    /// The order is the point (PostgreSQL's transam/README: `MarkBufferDirty` before
    /// `XLogInsert`). A checkpoint fixes its redo point, then lists the dirty frames
    /// ([`bufpool::BufferPool::checkpoint_snapshot`]). A page that was clean before this change
    /// and marked dirty only after the insert could be missed by a checkpoint whose redo point
    /// falls after the record; redo from that point would then skip the change, which a crash
    /// before the page's next write-out would lose. Marked first, the page is either listed
    /// (and written once this caller releases the latch) or its record lies after the redo
    /// point. Every change to a buffered page goes through here or
    /// [`Storage::log_new_pages`].
    ///
    /// # Errors
    /// The WAL insert's ([`walnut_wal::Wal::insert`]: none in practice).
    pub(crate) fn log_change(
        &self,
        pins: &[&bufpool::Pinned<'_>],
        assemble: &mut dyn FnMut(Lsn) -> Record,
    ) -> Result<Lsn> {
        for pin in pins {
            pin.mark_dirty();
        }
        #[cfg(test)]
        BEFORE_LOG_INSERT.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f();
            }
        });
        Ok(self.wal().insert(assemble)?.1)
    }

    /// A WAL block reference for page `p` (already changed) of `rel`, with a full-page image
    /// iff this is the page's first change since the redo point `redo` and the block is not
    /// being initialized (DESIGN.md invariant 3; PostgreSQL's `XLogRecordAssemble`).
    pub fn block_ref(
        &self,
        rel: RelFileId,
        block: walnut_common::BlockNumber,
        p: &page::PageBuf,
        redo: Lsn,
        will_init: bool,
        data: Vec<u8>,
    ) -> walnut_wal::BlockRef {
        let image =
            (!will_init && self.full_page_writes && page::lsn(p) <= redo).then(|| p.to_vec());
        walnut_wal::BlockRef {
            rel,
            block,
            will_init,
            image_lz4: false,
            image,
            data,
        }
    }

    /// Logs new pages as one WAL record of full-page images (PostgreSQL's `log_newpages`): the
    /// caller has pinned each block of `rel` (`ReadMode::Zero`: new blocks), holds its
    /// exclusive latch in `latches` and copied the page `images[i]` into it. Marks each page
    /// dirty, inserts the record (`rmgr`, `info`, every block `will_init` with its image), then
    /// sets each page's LSN ([`Storage::log_change`]'s order). Used by the bulk load and the bottom-up index build.
    ///
    /// # Errors
    /// The WAL insert's (53100 if the WAL cannot get space); then nothing was logged, and the
    /// caller must not release the pages as written.
    pub(crate) fn log_new_pages(
        &self,
        rel: RelFileId,
        xid: Xid,
        (rmgr, info): (RmgrId, u8),
        pins: &[bufpool::Pinned<'_>],
        latches: &mut [parking_lot::RwLockWriteGuard<'_, bufpool::FramePage>],
        images: &[&page::PageBuf],
    ) -> Result<Lsn> {
        assert!(
            pins.len() == latches.len() && pins.len() == images.len(),
            "a pin, a latch and an image for each new page"
        );
        let blocks: Vec<_> = pins.iter().map(|p| p.tag.block).collect();
        for pin in pins {
            pin.mark_dirty();
        }
        let end = log_images(self.wal(), rel, xid, (rmgr, info), &blocks, images)?;
        for l in latches.iter_mut() {
            page::set_lsn(l, end);
        }
        Ok(end)
    }

    /// Allocates a new relation file id.
    pub fn allocate_relfile(&self) -> RelFileId {
        RelFileId(self.next_relfile.fetch_add(1, Ordering::AcqRel))
    }

    /// Creates a data directory: layout, first WAL segment, catalog relation, a checkpoint and
    /// the control file.
    ///
    /// # Errors
    /// Bad input if `dir` is a non-empty directory; I/O errors.
    pub fn initdb(vfs: Arc<dyn Vfs>, dir: &Path) -> Result<()> {
        if dir.exists()
            && std::fs::read_dir(dir)
                .map(|mut d| d.next().is_some())
                .unwrap_or(false)
        {
            return Err(Error::user(
                walnut_common::SqlState::DUPLICATE_DATABASE,
                format!("directory \"{}\" exists but is not empty", dir.display()),
            ));
        }
        for sub in ["", "base", "wal", "global", "pg_xact", "pg_replslot"] {
            vfs.create_dir_all(&dir.join(sub)).map_err(|e| {
                Error::io(
                    format!("could not create directory \"{}\"", dir.join(sub).display()),
                    e,
                )
            })?;
        }
        let cfg = wal_config(dir, &StorageConfig::default(), walnut_wal::FIRST_TIMELINE);
        Wal::create(vfs.clone(), &cfg)?;
        let ctl = ControlFile {
            state: DbState::ShutDown,
            checkpoint_lsn: Lsn::INVALID,
            redo_lsn: Lsn::FIRST,
            next_xid: Xid::FIRST_NORMAL,
            next_relfile: RelFileId::FIRST_USER.0,
            timeline: 1,
            system_identifier: control::new_system_identifier(),
            oldest_xid: Xid::FIRST_NORMAL,
        };
        let st = Storage::new(
            vfs.clone(),
            dir,
            StorageConfig {
                shared_buffers_pages: 64,
                ..Default::default()
            },
            &ctl,
            &control::XactStatus::default(),
            slots::ReplicationSlots::load(vfs.clone(), dir)?,
        );
        let wal = Wal::open(vfs.clone(), cfg, Lsn::FIRST, Lsn::FIRST)?;
        st.pool.attach_wal(wal.clone());
        let _ = st.wal.set(wal);
        st.log_smgr_create(RelFileId::CATALOG)?;
        st.checkpoint_now(DbState::ShutDown)?;
        st.wal().shutdown();
        Ok(())
    }

    fn new(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        config: StorageConfig,
        ctl: &ControlFile,
        xact_status: &control::XactStatus,
        slots: Arc<slots::ReplicationSlots>,
    ) -> Storage {
        let smgr = Arc::new(
            Smgr::new(vfs.clone(), dir.join("base")).with_direct_io(config.io_direct.data),
        );
        smgr.backend_flush_after
            .store(config.write.backend_flush_after as u32, Ordering::Relaxed);
        Storage {
            dir: dir.to_path_buf(),
            vfs,
            pool: BufferPool::new(config.shared_buffers_pages, smgr.clone()),
            smgr,
            xact: XactManager::load(
                ctl.next_xid,
                ctl.oldest_xid,
                xact_status.base,
                &xact_status.status,
            ),
            system_identifier: ctl.system_identifier,
            timeline: AtomicU32::new(ctl.timeline),
            slots,
            full_page_writes: config.full_page_writes,
            wal: OnceLock::new(),
            next_relfile: AtomicU32::new(ctl.next_relfile),
            catalog: catalog::CatalogCache::default(),
            config: config.clone(),
            ckpt: Mutex::new(CheckpointState::default()),
            ckpt_cond: Condvar::new(),
            ckpt_running: Mutex::new(()),
            ckpt_hurry: AtomicUsize::new(0),
            last_redo: AtomicU64::new(ctl.redo_lsn.0),
            stopping: AtomicBool::new(false),
            checkpoint_timeout_s: AtomicU64::new(config.checkpoint_timeout_s),
            max_wal_size_mb: AtomicU64::new(config.max_wal_size_mb),
            unlink_later: Mutex::new(Vec::new()),
            write_settings: RwLock::new(config.write.clone()),
            distance_estimate_kb: Mutex::new(0),
            ckpt_pressure: Mutex::new(checkpointer::WalPressure::default()),
            io_workers: OnceLock::new(),
            max_parallel_maintenance_workers: AtomicU32::new(
                config.max_parallel_maintenance_workers,
            ),
            recovery: OnceLock::new(),
            recovery_prefetch: Default::default(),
            redo_stats: Default::default(),
            prune_stats: Default::default(),
            table_stats: Default::default(),
            autovacuum: Arc::new(autovacuum::Autovacuum::new(config.autovacuum.clone())),
            relfrozenxid: Mutex::new(HashMap::new()),
        }
    }

    /// `io_combine_limit`, blocks (1 ..= `smgr::MAX_IO_COMBINE_BLOCKS`): as last reloaded
    /// when I/O workers run, else as the storage was opened with.
    pub fn io_combine_limit(&self) -> u32 {
        self.io_workers().map_or(
            self.config
                .io_combine_limit
                .clamp(1, smgr::MAX_IO_COMBINE_BLOCKS as u32),
            |w| w.combine(),
        )
    }

    /// `max_parallel_maintenance_workers`, as last reloaded.
    pub fn max_parallel_maintenance_workers(&self) -> u32 {
        self.max_parallel_maintenance_workers
            .load(Ordering::Relaxed)
    }

    /// `max_wal_size` and `max_slot_wal_keep_size` (`None`: no limit) as in force, bytes: what
    /// `pg_replication_slots.wal_status` and `safe_wal_size` are judged by.
    pub fn slot_wal_limits(&self) -> (u64, Option<u64>) {
        let max_wal = self.max_wal_size_mb.load(Ordering::Relaxed) << 20;
        let max_slot = self
            .write_settings
            .read()
            .max_slot_wal_keep_size_mb
            .map(|m| m << 20);
        (max_wal, max_slot)
    }

    /// The I/O workers that read ahead of sequential scans (`io_method = worker`), if started.
    pub fn io_workers(&self) -> Option<&Arc<aio::IoWorkers>> {
        self.io_workers.get()
    }

    /// Opens a data directory: crash recovery (redo from the last checkpoint's redo point), the
    /// catalog, then the checkpointer and WAL writer threads. After crash recovery the
    /// checkpointer starts with a spread checkpoint while the server already runs; a clean
    /// start and a base backup's first start checkpoint before returning (DESIGN.md,
    /// "Recovery").
    ///
    /// # Errors
    /// Bad input if `dir` is not a data directory; corruption and I/O errors from recovery.
    pub fn open(vfs: Arc<dyn Vfs>, dir: &Path, config: StorageConfig) -> Result<Arc<Storage>> {
        let ctl = ControlFile::read(&*vfs, dir)?;
        smgr::remove_temporary_files(&*vfs, &dir.join("base"))?;
        if ctl.state != DbState::ShutDown {
            sync_data_directory(&*vfs, dir)?;
        }
        let status = control::read_xact_status(&*vfs, dir, ctl.oldest_xid)?;
        // A base backup's copy: recovery must reach the backup's end (backup.rs).
        let label_path = dir.join(backup::BACKUP_LABEL);
        let label = match control::read_all(&*vfs, &label_path)? {
            Some(b) => {
                let l = backup::parse_backup_label(&String::from_utf8_lossy(&b))?;
                if ctl.redo_lsn >= l.end && ctl.checkpoint_lsn != l.checkpoint {
                    // A crash after the end-of-recovery checkpoint, before the rename below:
                    // the copy is already consistent.
                    tracing::info!(end = %l.end, redo = %ctl.redo_lsn, "backup recovery had completed; removing its label");
                    None
                } else if l.checkpoint != ctl.checkpoint_lsn || l.start != ctl.redo_lsn {
                    return Err(Error::corruption(format!(
                        "\"{}\" names checkpoint {} and redo point {}, but the control file names {} and {}",
                        backup::BACKUP_LABEL,
                        l.checkpoint,
                        l.start,
                        ctl.checkpoint_lsn,
                        ctl.redo_lsn
                    )));
                } else {
                    tracing::info!(start = %l.start, end = %l.end, "starting backup recovery");
                    Some(l)
                }
            }
            None => None,
        };
        let stale_label = label.is_none() && vfs.exists(&label_path);
        let st = Arc::new(Storage::new(
            vfs.clone(),
            dir,
            config.clone(),
            &ctl,
            &status,
            slots::ReplicationSlots::load(vfs.clone(), dir)?,
        ));
        if vfs.exists(&dir.join(standby::STANDBY_SIGNAL)) {
            let st = standby::open(st, &ctl, label.as_ref().map(|l| l.end))?;
            if label.is_some() || stale_label {
                // Consistent (the local WAL passed the backup's end): the label has done its
                // work. A crash before the first restartpoint replays from the backup's
                // checkpoint again, through the same WAL.
                st.vfs
                    .rename(&label_path, &dir.join("backup_label.old"))
                    .map_err(|e| Error::io("could not rename \"backup_label\"", e))?;
                if let Err(e) = st.vfs.sync_dir(dir) {
                    walnut_common::panic_fatal(&format!(
                        "could not fsync directory \"{}\": {e}",
                        dir.display()
                    ));
                }
            }
            return Ok(st);
        }
        stats::set_backend_type(stats::BackendType::Startup);
        let end = recovery::redo(&st, &ctl);
        stats::set_backend_type(stats::BackendType::ClientBackend);
        let end = end?;
        if let Some(l) = label.filter(|l| end.end_lsn < l.end) {
            return Err(Error::user(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "WAL ends before end of online backup: redo reached {}, the backup ends at {}",
                    end.end_lsn, l.end
                ),
            )
            .with_detail(
                "All WAL generated while online backup was taken must be available at recovery.",
            ));
        }
        st.attach_wal(end.end_lsn, ctl.redo_lsn)?;
        st.xact.abort_unresolved();
        let crashed = ctl.state != DbState::ShutDown;
        if end.records_replayed > 0 || crashed {
            // PostgreSQL's "redo done at X ... elapsed: N s".
            tracing::info!(
                records = end.records_replayed,
                workers = end.workers,
                redo = %ctl.redo_lsn,
                end = %end.end_lsn,
                elapsed_s = format_args!("{:.2}", end.elapsed.as_secs_f64()),
                "redo done"
            );
        }
        // After crash recovery the server opens at once and the checkpointer makes the first
        // checkpoint in the background, spread (step 11 of "Crash recovery" in DESIGN.md):
        // writing every page redo dirtied took seconds before the first connection, and
        // nothing in it must be durable before the first commit. The control file keeps its
        // crashed state and the old redo point, whose WAL stays until that checkpoint ends,
        // so a crash before then recovers from there again (and, the state not being shut
        // down, syncs the data directory first). A clean start (nothing dirty) and
        // a base backup's first start (whose label goes only after a checkpoint past the
        // backup's end) still checkpoint here.
        let deferred = crashed && label.is_none() && !stale_label;
        if !deferred {
            st.checkpoint_now(DbState::InProduction)?;
        }
        if label.is_some() || stale_label {
            // Consistent, and checkpointed past the backup: the label has done its work.
            let old = dir.join("backup_label.old");
            st.vfs
                .rename(&label_path, &old)
                .map_err(|e| Error::io("could not rename \"backup_label\"", e))?;
            if let Err(e) = st.vfs.sync_dir(dir) {
                walnut_common::panic_fatal(&format!(
                    "could not fsync directory \"{}\": {e}",
                    dir.display()
                ));
            }
            tracing::info!("backup recovery complete: the data directory is consistent");
        }
        st.catalog.reload(&st)?;
        start_workers(&st)?;
        start_checkpointer(&st, deferred.then_some(checkpointer::Cause::AfterRecovery))?;
        Ok(st)
    }

    /// Opens the WAL for writing at `end` (the end of valid WAL after redo), with `redo` the
    /// last checkpoint's redo point, and attaches it to the buffer pool (WAL before data).
    fn attach_wal(&self, end: Lsn, redo: Lsn) -> Result<()> {
        let wal = Wal::open(
            self.vfs.clone(),
            wal_config(&self.dir, &self.config, self.timeline()),
            end,
            redo,
        )?;
        self.pool.attach_wal(wal.clone());
        let _ = self.wal.set(wal);
        Ok(())
    }

    /// The current timeline (IDENTIFY_SYSTEM's).
    pub fn timeline(&self) -> u32 {
        self.timeline.load(Ordering::Acquire)
    }

    /// A standby adopts the timeline of the primary it follows, once it has checked that the
    /// primary's history contains its own (the walreceiver); the next restartpoint records it.
    pub fn set_timeline(&self, tli: u32) {
        self.timeline.store(tli, Ordering::Release);
    }

    /// True while this storage is a standby in recovery: no transaction may write (25006).
    pub fn in_recovery(&self) -> bool {
        self.recovery.get().is_some_and(|r| !r.ended())
    }

    /// A standby's recovery state (also after promotion); `None` on a primary.
    pub fn recovery(&self) -> Option<&Arc<standby::Recovery>> {
        self.recovery.get()
    }

    /// The WAL, if attached (`None` on a standby in recovery).
    pub fn wal_if_open(&self) -> Option<&Arc<Wal>> {
        self.wal.get()
    }
}

/// Starts the I/O workers of `io_method` and the background writer.
///
/// # Errors
/// I/O errors starting threads.
fn start_workers(st: &Arc<Storage>) -> Result<()> {
    let config = &st.config;
    {
        let workers = match config.io_method {
            aio::IoMethod::Sync => None,
            aio::IoMethod::Worker => Some(aio::IoWorkers::start(
                Arc::downgrade(&st),
                config.io_workers,
                config.effective_io_concurrency,
                config.io_combine_limit,
            )?),
            #[cfg(target_os = "linux")]
            aio::IoMethod::IoUring => Some(aio::IoWorkers::start_uring(
                Arc::downgrade(&st),
                config.effective_io_concurrency,
                config.io_combine_limit,
            )?),
            #[cfg(not(target_os = "linux"))]
            aio::IoMethod::IoUring => None,
        };
        if let Some(workers) = workers {
            workers.set_maintenance_distance(config.maintenance_io_concurrency);
            let _ = st.io_workers.set(Arc::new(workers));
        }
    }
    let weak = Arc::downgrade(st);
    std::thread::Builder::new()
        .name("bgwriter".into())
        .spawn(move || bgwriter::bgwriter(weak))
        .map_err(|e| Error::io("could not start background writer", e))?;
    Ok(())
}

/// Starts the WAL writer and the checkpointer (once the WAL is open for writing).
///
/// # Errors
/// I/O errors starting the thread.
/// Starts the WAL writer and the checkpointer, which begins with a checkpoint for `first` if
/// given.
fn start_checkpointer(st: &Arc<Storage>, first: Option<checkpointer::Cause>) -> Result<()> {
    st.wal()
        .start_wal_writer(st.config.wal_writer_delay_ms.max(1));
    let weak = Arc::downgrade(st);
    std::thread::Builder::new()
        .name("checkpointer".into())
        .spawn(move || checkpointer::checkpointer(weak, first))
        .map_err(|e| Error::io("could not start checkpointer", e))?;
    let weak = Arc::downgrade(st);
    std::thread::Builder::new()
        .name("autovacuum launcher".into())
        .spawn(move || autovacuum::launcher(weak))
        .map_err(|e| Error::io("could not start autovacuum launcher", e))?;
    Ok(())
}

impl Storage {
    fn log_smgr_create(&self, rel: RelFileId) -> Result<()> {
        self.wal().insert(&mut |_| Record {
            rmgr: RM_SMGR,
            info: SMGR_CREATE,
            xid: Xid::INVALID,
            flags: 0,
            blocks: vec![],
            main_data: rel.0.to_le_bytes().to_vec(),
        })?;
        self.smgr.create(rel)?;
        Ok(())
    }

    /// Records a new, empty heap file's `relfrozenxid` (CREATE TABLE, TRUNCATE): the oldest
    /// running xid, as no version in it can be older (PostgreSQL sets a new relfilenode's from
    /// its xmin horizon too).
    pub fn note_new_heap(&self, relfile: RelFileId) {
        let x = self.xact.oldest_running();
        self.relfrozenxid.lock().insert(relfile, x);
    }

    /// Creates a relation file for transaction `xid`, WAL-logged so redo recreates it.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create_relation(&self) -> Result<RelFileId> {
        // A crash can leave the file of a relation whose SMGR CREATE record never reached the
        // disk (creating the file synced the directory; the record waits for a WAL flush), and
        // then the counter recovered from the last checkpoint hands its id out again: skip ids
        // whose file exists (PostgreSQL's `GetNewRelFileNumber`).
        let rel = loop {
            let rel = self.allocate_relfile();
            if !self.smgr.exists(rel) {
                break rel;
            }
        };
        self.log_smgr_create(rel)?;
        Ok(rel)
    }

    /// Drops a relation's buffers and file (after the commit or abort that decided it).
    ///
    /// # Errors
    /// I/O errors removing the file.
    pub fn remove_relation(&self, rel: RelFileId) -> Result<()> {
        // A VACUUM of it stops at its next page and unpins everything (`Relation::dropping`);
        // one that opens it after the file is gone fails to. Opened, not only looked up, so
        // that a VACUUM opening it meanwhile shares this `Relation` and sees the flag.
        if let Ok(r) = self.smgr.open(rel) {
            r.dropping.store(true, Ordering::Release);
            drop(r.vacuum_lock.lock());
        }
        self.pool.drop_relation(rel);
        self.smgr.unlink(rel)
    }

    /// Cuts `rel` to `nblocks` blocks once nothing may use the blocks past the cut (VACUUM's
    /// step 6, or redo of its `SMGR TRUNCATE`): the file, then the cached pages, then the
    /// free-space map's entries and the insert hint. The caller holds `extend_lock`; on a
    /// primary it has already checked the blocks empty, lowered `rel.nblocks`, and made the
    /// record durable.
    ///
    /// # Errors
    /// I/O errors from the truncation.
    pub fn cut_relation(&self, rel: &smgr::Relation, nblocks: u32) -> Result<()> {
        self.smgr.truncate(rel, nblocks)?;
        self.pool
            .drop_blocks_from(rel.id, walnut_common::BlockNumber(nblocks));
        rel.fsm.forget_from(walnut_common::BlockNumber(nblocks));
        let _ = rel.insert_hint.fetch_min(nblocks, Ordering::AcqRel);
        Ok(())
    }

    /// Leaves the file of a dropped relation that could not be removed to the next checkpoint,
    /// which tries again (PostgreSQL's checkpointer unlinks dropped relations' files the same
    /// way). Its buffers are already gone; nothing reads the file.
    pub fn remove_relation_later(&self, rel: RelFileId) {
        self.unlink_later.lock().push(rel);
    }

    /// Retries the removals [`Storage::remove_relation_later`] deferred; what fails again stays
    /// for the next checkpoint, with a warning.
    fn retry_removals(&self) {
        let rels = std::mem::take(&mut *self.unlink_later.lock());
        for rel in rels {
            if let Err(e) = self.remove_relation(rel) {
                tracing::warn!("{e}; the next checkpoint tries again");
                self.remove_relation_later(rel);
            }
        }
    }

    /// Clean shutdown: stop the checkpointer, write a shutdown checkpoint, stop the WAL.
    ///
    /// # Errors
    /// I/O errors from the final checkpoint.
    pub fn shutdown(&self) -> Result<()> {
        if self.stopping.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if let Some(rec) = self.recovery.get().filter(|r| !r.ended()) {
            return standby::shutdown(self, rec);
        }
        // No page may change after the shutdown checkpoint: the workers stop first.
        self.autovacuum.stop();
        {
            let mut s = self.ckpt.lock();
            s.shutdown = true;
            self.ckpt_cond.notify_all();
        }
        let r = self.checkpoint_now(DbState::ShutDown);
        self.wal().shutdown();
        r
    }

    /// Number of checkpoints completed since start.
    pub fn checkpoints_done(&self) -> u64 {
        self.smgr.stats.ckpt_done.load(Ordering::Acquire)
    }
}

/// Before crash recovery: cuts any partial block off the end of each relation file, and syncs
/// every relation file and the directories. After a process
/// crash the files may hold pages written by the dead run that only the page cache has; redo
/// trusts them (their page LSNs skip records), and the end-of-recovery checkpoint syncs only
/// files this run writes, so without this a later power loss could lose a page whose WAL is
/// behind the new redo point. PostgreSQL's `SyncDataDirectory`. The WAL's segments are synced
/// by `Wal::open`.
///
/// # Errors
/// I/O errors; a failed fsync is a PANIC.
fn sync_data_directory(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    let base = dir.join("base");
    let names = vfs
        .list_dir(&base)
        .map_err(|e| Error::io(format!("could not list \"{}\"", base.display()), e))?;
    for name in names {
        let path = base.join(&name);
        let f = vfs
            .open(&path, walnut_io::OpenMode::default())
            .map_err(|e| Error::io(format!("could not open \"{}\"", path.display()), e))?;
        if name.parse::<u32>().is_ok() {
            smgr::cut_partial_block(f.as_ref(), &path)?;
        }
        if let Err(e) = f.sync_data() {
            panic_fatal(&format!("could not fsync file \"{}\": {e}", path.display()));
        }
    }
    for d in [base.as_path(), dir] {
        if let Err(e) = vfs.sync_dir(d) {
            panic_fatal(&format!(
                "could not fsync directory \"{}\": {e}",
                d.display()
            ));
        }
    }
    Ok(())
}

/// The WAL's configuration for the data directory `dir`, writing on timeline `tli`.
fn wal_config(dir: &Path, c: &StorageConfig, tli: u32) -> WalConfig {
    WalConfig {
        dir: dir.join("wal"),
        timeline: tli,
        ..c.wal.clone()
    }
}
