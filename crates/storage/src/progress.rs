//! What an index build reports while it runs, for PostgreSQL's `pg_stat_progress_create_index`
//! (the SQL layer owns the view and its rows; crates/sql/src/progress.rs).
//!
//! The caller that starts a build (ALTER TABLE ... ADD PRIMARY KEY) makes the builds of its
//! thread report to an [`IndexBuildProgress`] with [`report_index_builds_to`]; the build
//! (`btree::build`) finds it with [`index_build_progress`]. A thread-local rather than a
//! parameter because the build runs synchronously on the session's own thread, several calls
//! below the caller, and none of the calls in between needs to know.
//!
//! One thread writes the counters; any thread may read them. Each counter is written with
//! `Release` after the ones it depends on; a reader loads in the reverse order with `Acquire`
//! (`tuples_done` before `tuples_total`, `phase` before the rest), so it never sees more
//! tuples done than total, or a phase without the totals that phase sets.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// PostgreSQL's create-index phase 0 ("initializing"): the build has not started.
pub const PHASE_INITIALIZING: u32 = 0;
/// PostgreSQL's B-tree subphase 2 ("building index: scanning table"): reading the heap.
pub const PHASE_SCANNING_TABLE: u32 = 2;
/// PostgreSQL's B-tree subphase 3 ("building index: sorting live tuples").
pub const PHASE_SORTING: u32 = 3;
/// PostgreSQL's B-tree subphase 5 ("building index: loading tuples in tree"): writing pages.
pub const PHASE_LOADING: u32 = 5;

/// The counters of one index build. Written by the building thread only.
#[derive(Default)]
pub struct IndexBuildProgress {
    /// One of the `PHASE_*` constants.
    pub phase: AtomicU32,
    /// The index relation's file id (its `pg_class` OID); 0 until the build knows it.
    pub index_relid: AtomicU32,
    /// Heap blocks the table scan reads, in blocks.
    pub blocks_total: AtomicU64,
    /// Heap blocks read so far, in blocks.
    pub blocks_done: AtomicU64,
    /// Index entries to load into the tree, in tuples; set when loading starts.
    pub tuples_total: AtomicU64,
    /// Index entries written into leaf pages so far, in tuples (updated a leaf page at a time).
    pub tuples_done: AtomicU64,
    /// Called after every change the build reports (tests use it to see each step; no
    /// production caller sets it).
    pub on_report: Option<Box<dyn Fn(&IndexBuildProgress) + Send + Sync>>,
}

impl std::fmt::Debug for IndexBuildProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexBuildProgress")
            .field("phase", &self.phase)
            .field("index_relid", &self.index_relid)
            .field("blocks_total", &self.blocks_total)
            .field("blocks_done", &self.blocks_done)
            .field("tuples_total", &self.tuples_total)
            .field("tuples_done", &self.tuples_done)
            .finish_non_exhaustive()
    }
}

impl IndexBuildProgress {
    /// Enters `phase` (a `PHASE_*` constant), after the counters it sets were stored.
    pub fn set_phase(&self, phase: u32) {
        self.phase.store(phase, Ordering::Release);
        self.report();
    }

    /// Runs the `on_report` hook, if any.
    pub fn report(&self) {
        if let Some(f) = &self.on_report {
            f(self);
        }
    }
}

thread_local! {
    static INDEX_BUILD: RefCell<Option<Arc<IndexBuildProgress>>> = const { RefCell::new(None) };
}

/// Makes index builds on this thread report to `p` (`None`: to nobody). Returns the previous
/// setting, for the caller to restore.
pub fn report_index_builds_to(
    p: Option<Arc<IndexBuildProgress>>,
) -> Option<Arc<IndexBuildProgress>> {
    INDEX_BUILD.with(|c| c.replace(p))
}

/// Where index builds on this thread report, if anywhere.
pub fn index_build_progress() -> Option<Arc<IndexBuildProgress>> {
    INDEX_BUILD.with(|c| c.borrow().clone())
}

/// PostgreSQL's vacuum phase 1 ("scanning heap").
pub const VACUUM_SCANNING_HEAP: u32 = 1;
/// PostgreSQL's vacuum phase 2 ("vacuuming indexes").
pub const VACUUM_VACUUMING_INDEXES: u32 = 2;
/// PostgreSQL's vacuum phase 3 ("vacuuming heap").
pub const VACUUM_VACUUMING_HEAP: u32 = 3;
/// PostgreSQL's vacuum phase 5 ("truncating heap").
pub const VACUUM_TRUNCATING_HEAP: u32 = 5;
/// PostgreSQL's vacuum phase 6 ("performing final cleanup").
pub const VACUUM_FINAL_CLEANUP: u32 = 6;

/// The counters of the VACUUM of one table, for `pg_stat_progress_vacuum`. Written by the
/// vacuuming thread only (`crate::vacuum::vacuum_table`), which resets them for each table of
/// a VACUUM of several; the same `Release`/`Acquire` order as [`IndexBuildProgress`] (`phase`
/// written last, read first).
#[derive(Debug, Default)]
pub struct VacuumProgress {
    /// One of the `VACUUM_*` phases (0: initializing).
    pub phase: AtomicU32,
    /// The table's `pg_class` OID (its table id).
    pub relid: AtomicU64,
    /// Heap blocks when the scan started, in blocks.
    pub heap_blks_total: AtomicU64,
    /// Heap blocks scanned (step 1), in blocks.
    pub heap_blks_scanned: AtomicU64,
    /// Heap blocks whose dead line pointers were freed (step 4), in blocks.
    pub heap_blks_vacuumed: AtomicU64,
    /// Index scans done (step 2).
    pub index_vacuum_count: AtomicU64,
    /// Dead line pointers collected since the last index scan.
    pub num_dead_item_ids: AtomicU64,
    /// Indexes the table has (0 or 1).
    pub indexes_total: AtomicU64,
    /// Of those, the ones the current index scan has finished.
    pub indexes_processed: AtomicU64,
    /// Time slept in the cost-based delay and the WAL's pauses (autovacuum), µs.
    pub delay_time_us: AtomicU64,
}

impl VacuumProgress {
    /// Starts the counters over for table `relid` of `blocks` heap blocks and `indexes`
    /// indexes, in phase "scanning heap".
    pub fn start(&self, relid: u64, blocks: u64, indexes: u64) {
        for c in [
            &self.heap_blks_scanned,
            &self.heap_blks_vacuumed,
            &self.index_vacuum_count,
            &self.num_dead_item_ids,
            &self.indexes_processed,
            &self.delay_time_us,
        ] {
            c.store(0, Ordering::Release);
        }
        self.relid.store(relid, Ordering::Release);
        self.heap_blks_total.store(blocks, Ordering::Release);
        self.indexes_total.store(indexes, Ordering::Release);
        self.phase.store(VACUUM_SCANNING_HEAP, Ordering::Release);
    }
}

thread_local! {
    static VACUUM: RefCell<Option<Arc<VacuumProgress>>> = const { RefCell::new(None) };
}

/// Makes VACUUMs on this thread report to `p` (`None`: to nobody). Returns the previous
/// setting, for the caller to restore.
pub fn report_vacuums_to(p: Option<Arc<VacuumProgress>>) -> Option<Arc<VacuumProgress>> {
    VACUUM.with(|c| c.replace(p))
}

/// Where VACUUMs on this thread report, if anywhere.
pub fn vacuum_progress() -> Option<Arc<VacuumProgress>> {
    VACUUM.with(|c| c.borrow().clone())
}
