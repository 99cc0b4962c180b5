//! PostgreSQL's progress views for bulk load, with PostgreSQL 18's columns:
//! `pg_stat_progress_copy` (one row per backend running COPY) and
//! `pg_stat_progress_create_index` (one row per backend building an index: walnut builds one
//! only for ALTER TABLE ... ADD PRIMARY KEY, which PostgreSQL reports as `CREATE INDEX`).
//!
//! Each engine owns one [`Registry`]. A session starting such a command registers an entry
//! ([`Reporter::copy_from`], [`Reporter::create_index`]) and keeps the returned handle for as
//! long as the command runs; dropping the handle removes the row, so it disappears however
//! the command ends (done, error, CopyFail, cancel, lost connection). Readers take the
//! registry's mutex only to clone the list of entries, never while a counter changes.
//!
//! Counters are atomics written by the command's own thread only. A writer stores each
//! counter with `Release` after the counters it implies; a reader loads them in the reverse
//! order with `Acquire`. So a row never shows more tuples than bytes read to carry them
//! (COPY), or more tuples done than total, or a phase without the totals it sets (index
//! build; the storage side of it is `walnut_storage::progress`). Rows are otherwise
//! snapshots of independently moving counters, as PostgreSQL's.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use walnut_common::{ColumnDef, DataType, Value};
use walnut_storage::progress::{
    report_index_builds_to, report_vacuums_to, IndexBuildProgress, VacuumProgress,
    PHASE_INITIALIZING, PHASE_LOADING, PHASE_SCANNING_TABLE, PHASE_SORTING,
};

/// `datid` of every row: walnut has one database, which every connection reaches whatever
/// `dbname` it gives; its OID is that of PostgreSQL's `postgres` database.
pub const DATABASE_OID: i64 = 5;

/// The progress entries of one engine's running commands.
#[derive(Default)]
pub struct Registry {
    /// Entries by registration number, in the order the commands started.
    entries: Mutex<Vec<(u64, Arc<Entry>)>>,
    next_id: AtomicU64,
    /// Test hook: copied into every index build's progress as its `on_report`.
    index_hook: Mutex<Option<IndexHook>>,
    /// VACUUMs not run by a session (autovacuum workers): pid and counters.
    other_vacuums: Mutex<Option<VacuumSource>>,
    /// A table's name by its `relid`, for the autovacuum workers' rows of `pg_stat_activity`.
    table_names: Mutex<Option<TableNames>>,
}

type IndexHook = Arc<dyn Fn() + Send + Sync>;
type VacuumSource = Arc<dyn Fn() -> Vec<(i32, Arc<VacuumProgress>)> + Send + Sync>;
type TableNames = Arc<dyn Fn(u64) -> Option<String> + Send + Sync>;

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("entries", &self.entries.lock().len())
            .finish_non_exhaustive()
    }
}

/// One running command.
struct Entry {
    pid: i32,
    datname: Arc<str>,
    /// OID of the table, 0 if the engine does not say.
    relid: i64,
    work: Work,
}

enum Work {
    /// A session itself (`pg_stat_activity`).
    Backend(Arc<crate::activity::BackendStatus>),
    CopyFrom(Arc<CopyCounters>),
    CreateIndex(Arc<IndexBuildProgress>),
    Vacuum(Arc<VacuumProgress>),
}

/// The counters of a COPY FROM STDIN.
#[derive(Default)]
struct CopyCounters {
    /// Bytes of COPY data received, in bytes.
    bytes_processed: AtomicU64,
    /// Rows inserted, in tuples.
    tuples_processed: AtomicU64,
}

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
        identity: None,
    }
}

/// PostgreSQL's `phase` text for a create-index phase number.
fn phase_name(phase: u32) -> &'static str {
    match phase {
        PHASE_INITIALIZING => "initializing",
        PHASE_SCANNING_TABLE => "building index: scanning table",
        PHASE_SORTING => "building index: sorting live tuples",
        PHASE_LOADING => "building index: loading tuples in tree",
        _ => "building index",
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    /// Test hook: `f` runs on the building thread after every change an index build reports
    /// (phase, blocks, tuples), so a test can read the views at each step. Applies to builds
    /// registered afterwards.
    pub fn on_index_build_report(&self, f: Arc<dyn Fn() + Send + Sync>) {
        *self.index_hook.lock() = Some(f);
    }

    /// Makes `pg_stat_progress_vacuum` also show the VACUUMs `f` lists (pid and counters):
    /// the storage's autovacuum workers, while they vacuum a table.
    pub fn show_other_vacuums(&self, f: VacuumSource) {
        *self.other_vacuums.lock() = Some(f);
    }

    /// Makes `pg_stat_activity` name the tables autovacuum workers vacuum with `f` (a
    /// table's name by its `relid`).
    pub fn name_tables(&self, f: TableNames) {
        *self.table_names.lock() = Some(f);
    }

    /// The autovacuum workers vacuuming a table now: pid, the table's `relid` and the
    /// counters. A worker shows once it is vacuuming a table, not while it looks for one; its
    /// table is read once, for the filter and the row alike.
    fn busy_workers(&self) -> Vec<(i32, u64, Arc<VacuumProgress>)> {
        let others = self.other_vacuums.lock().clone();
        others
            .map(|f| f())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(pid, p)| {
                let relid = p.relid.load(Ordering::Acquire);
                (relid != 0).then_some((pid, relid, p))
            })
            .collect()
    }

    /// [`Registry::busy_workers`] with their tables' names, for `pg_stat_activity`.
    fn workers(&self) -> Vec<crate::activity::WorkerRow> {
        let names = self.table_names.lock().clone();
        self.busy_workers()
            .into_iter()
            .map(|(pid, relid, _)| crate::activity::WorkerRow {
                pid,
                relname: names
                    .as_ref()
                    .and_then(|f| f(relid))
                    .unwrap_or_else(|| relid.to_string()),
            })
            .collect()
    }

    fn register(self: &Arc<Self>, entry: Entry) -> (Arc<Entry>, Registration) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(entry);
        self.entries.lock().push((id, entry.clone()));
        let reg = Registration {
            registry: self.clone(),
            id,
        };
        (entry, reg)
    }

    fn snapshot(&self) -> Vec<Arc<Entry>> {
        self.entries.lock().iter().map(|(_, e)| e.clone()).collect()
    }

    /// The columns and rows of progress view `name`, if it is one.
    pub fn view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        let i = |v: u64| Value::Int8(v as i64);
        let head = |e: &Entry| {
            vec![
                Value::Int4(e.pid),
                Value::Int8(DATABASE_OID),
                Value::Text(e.datname.to_string()),
                Value::Int8(e.relid),
            ]
        };
        match name {
            "pg_stat_activity" => {
                let mut rows: Vec<Vec<Value>> = self
                    .snapshot()
                    .iter()
                    .filter_map(|e| match &e.work {
                        Work::Backend(s) => Some(crate::activity::session_row(
                            e.pid,
                            DATABASE_OID,
                            &e.datname,
                            s,
                        )),
                        _ => None,
                    })
                    .collect();
                rows.extend(
                    self.workers()
                        .iter()
                        .map(|w| crate::activity::worker_row(DATABASE_OID, w)),
                );
                Some((crate::activity::columns(), rows))
            }
            "pg_stat_progress_copy" => {
                let rows = self
                    .snapshot()
                    .iter()
                    .filter_map(|e| {
                        let Work::CopyFrom(c) = &e.work else {
                            return None;
                        };
                        let tuples = c.tuples_processed.load(Ordering::Acquire);
                        let bytes = c.bytes_processed.load(Ordering::Acquire);
                        let mut row = head(e);
                        row.extend([
                            Value::Text("COPY FROM".into()),
                            Value::Text("PIPE".into()),
                            i(bytes),
                            i(0),
                            i(tuples),
                            i(0),
                            i(0),
                        ]);
                        Some(row)
                    })
                    .collect();
                Some((copy_columns(), rows))
            }
            "pg_stat_progress_vacuum" => {
                let others = self.busy_workers().into_iter().map(|(pid, relid, p)| {
                    Arc::new(Entry {
                        pid,
                        datname: "postgres".into(),
                        relid: relid as i64,
                        work: Work::Vacuum(p),
                    })
                });
                let rows = self
                    .snapshot()
                    .into_iter()
                    .chain(others)
                    .filter_map(|e| {
                        let Work::Vacuum(p) = &e.work else {
                            return None;
                        };
                        let phase = p.phase.load(Ordering::Acquire);
                        let a = |c: &AtomicU64| i(c.load(Ordering::Acquire));
                        let mut row = head(&e);
                        if e.relid == 0 {
                            // A session's VACUUM: the table it is at now.
                            row[3] = a(&p.relid);
                        }
                        row.extend([
                            Value::Text(vacuum_phase_name(phase).into()),
                            a(&p.heap_blks_total),
                            a(&p.heap_blks_scanned),
                            a(&p.heap_blks_vacuumed),
                            a(&p.index_vacuum_count),
                            // A TID in walnut's dead-item set: about 16 bytes.
                            i(walnut_storage::vacuum::MAX_DEAD_ITEMS as u64 * 16),
                            i(p.num_dead_item_ids.load(Ordering::Acquire) * 16),
                            a(&p.num_dead_item_ids),
                            a(&p.indexes_total),
                            a(&p.indexes_processed),
                            Value::Float8(p.delay_time_us.load(Ordering::Acquire) as f64 / 1000.0),
                        ]);
                        Some(row)
                    })
                    .collect();
                Some((vacuum_columns(), rows))
            }
            "pg_stat_progress_create_index" => {
                let rows = self
                    .snapshot()
                    .iter()
                    .filter_map(|e| {
                        let Work::CreateIndex(p) = &e.work else {
                            return None;
                        };
                        let phase = p.phase.load(Ordering::Acquire);
                        let tuples_done = p.tuples_done.load(Ordering::Acquire);
                        let tuples_total = p.tuples_total.load(Ordering::Acquire);
                        let blocks_done = p.blocks_done.load(Ordering::Acquire);
                        let blocks_total = p.blocks_total.load(Ordering::Acquire);
                        let index_relid = p.index_relid.load(Ordering::Acquire);
                        let mut row = head(e);
                        row.extend([
                            Value::Int8(index_relid as i64),
                            Value::Text("CREATE INDEX".into()),
                            Value::Text(phase_name(phase).into()),
                            i(0),
                            i(0),
                            i(0),
                            i(blocks_total),
                            i(blocks_done),
                            i(tuples_total),
                            i(tuples_done),
                            i(0),
                            i(0),
                        ]);
                        Some(row)
                    })
                    .collect();
                Some((create_index_columns(), rows))
            }
            _ => None,
        }
    }
}

fn head_columns() -> Vec<ColumnDef> {
    vec![
        col("pid", DataType::Int4),
        col("datid", DataType::Int8),
        col("datname", DataType::Text),
        col("relid", DataType::Int8),
    ]
}

fn copy_columns() -> Vec<ColumnDef> {
    let mut cols = head_columns();
    cols.push(col("command", DataType::Text));
    cols.push(col("type", DataType::Text));
    for n in [
        "bytes_processed",
        "bytes_total",
        "tuples_processed",
        "tuples_excluded",
        "tuples_skipped",
    ] {
        cols.push(col(n, DataType::Int8));
    }
    cols
}

fn vacuum_columns() -> Vec<ColumnDef> {
    let mut cols = head_columns();
    cols.push(col("phase", DataType::Text));
    for n in [
        "heap_blks_total",
        "heap_blks_scanned",
        "heap_blks_vacuumed",
        "index_vacuum_count",
        "max_dead_tuple_bytes",
        "dead_tuple_bytes",
        "num_dead_item_ids",
        "indexes_total",
        "indexes_processed",
    ] {
        cols.push(col(n, DataType::Int8));
    }
    cols.push(col("delay_time", DataType::Float8));
    cols
}

/// PostgreSQL's `phase` text for a vacuum phase number.
fn vacuum_phase_name(phase: u32) -> &'static str {
    match phase {
        walnut_storage::progress::VACUUM_SCANNING_HEAP => "scanning heap",
        walnut_storage::progress::VACUUM_VACUUMING_INDEXES => "vacuuming indexes",
        walnut_storage::progress::VACUUM_VACUUMING_HEAP => "vacuuming heap",
        walnut_storage::progress::VACUUM_TRUNCATING_HEAP => "truncating heap",
        walnut_storage::progress::VACUUM_FINAL_CLEANUP => "performing final cleanup",
        _ => "initializing",
    }
}

fn create_index_columns() -> Vec<ColumnDef> {
    let mut cols = head_columns();
    cols.push(col("index_relid", DataType::Int8));
    cols.push(col("command", DataType::Text));
    cols.push(col("phase", DataType::Text));
    for n in [
        "lockers_total",
        "lockers_done",
        "current_locker_pid",
        "blocks_total",
        "blocks_done",
        "tuples_total",
        "tuples_done",
        "partitions_total",
        "partitions_done",
    ] {
        cols.push(col(n, DataType::Int8));
    }
    cols
}

/// The progress views, served for every engine: empty without a registry.
pub(crate) fn view(
    registry: Option<&Registry>,
    name: &str,
) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
    match registry {
        Some(r) => r.view(name),
        None => Registry::default().view(name),
    }
}

/// Removes its entry from the registry when dropped.
struct Registration {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry
            .entries
            .lock()
            .retain(|(id, _)| *id != self.id);
    }
}

/// A session's way to register its commands: the engine's registry and who the session is.
#[derive(Clone)]
pub(crate) struct Reporter {
    registry: Arc<Registry>,
    /// The backend's process id (as sent in BackendKeyData).
    pub pid: i32,
    /// The database name the client connected with.
    pub datname: Arc<str>,
}

impl Reporter {
    /// The registry this reports to.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The registry this reports to, shared.
    pub(crate) fn registry_arc(&self) -> Arc<Registry> {
        self.registry.clone()
    }

    /// A reporter into `registry` for backend `pid` connected to `datname`.
    pub(crate) fn new(registry: Arc<Registry>, pid: i32, datname: &str) -> Reporter {
        Reporter {
            registry,
            pid,
            datname: datname.into(),
        }
    }

    /// Registers a COPY FROM STDIN into table `relid`; its row lasts as long as the handle.
    pub(crate) fn copy_from(&self, relid: i64) -> CopyProgress {
        let counters = Arc::new(CopyCounters::default());
        let (_, reg) = self.registry.register(Entry {
            pid: self.pid,
            datname: self.datname.clone(),
            relid,
            work: Work::CopyFrom(counters.clone()),
        });
        CopyProgress {
            counters,
            _reg: reg,
        }
    }

    /// Registers an index build on table `relid` (phase "initializing"); its row lasts as long
    /// as the handle.
    pub(crate) fn create_index(&self, relid: i64) -> IndexProgress {
        let hook = self.registry.index_hook.lock().clone();
        let build = Arc::new(IndexBuildProgress {
            on_report: hook.map(|f| {
                Box::new(move |_: &IndexBuildProgress| f())
                    as Box<dyn Fn(&IndexBuildProgress) + Send + Sync>
            }),
            ..IndexBuildProgress::default()
        });
        let (_, reg) = self.registry.register(Entry {
            pid: self.pid,
            datname: self.datname.clone(),
            relid,
            work: Work::CreateIndex(build.clone()),
        });
        build.report();
        IndexProgress { build, _reg: reg }
    }
}

impl Reporter {
    /// Registers the session itself in `pg_stat_activity`, as `client`; its row lasts as long
    /// as the handle.
    pub(crate) fn backend(&self, client: crate::activity::ClientIdentity) -> BackendEntry {
        let status = Arc::new(crate::activity::BackendStatus::new(client));
        let (_, reg) = self.registry.register(Entry {
            pid: self.pid,
            datname: self.datname.clone(),
            relid: 0,
            work: Work::Backend(status.clone()),
        });
        BackendEntry { status, _reg: reg }
    }

    /// Registers a VACUUM (its row shows the table being vacuumed) and makes the storage
    /// engine's VACUUMs on this thread report to it until the returned handle is dropped.
    pub(crate) fn vacuum(&self) -> VacuumEntry {
        let p = Arc::new(VacuumProgress::default());
        let (_, reg) = self.registry.register(Entry {
            pid: self.pid,
            datname: self.datname.clone(),
            relid: 0,
            work: Work::Vacuum(p.clone()),
        });
        VacuumEntry {
            previous: report_vacuums_to(Some(p)),
            _reg: reg,
        }
    }
}

/// A registered session (`pg_stat_activity`); the row goes when this is dropped.
pub(crate) struct BackendEntry {
    /// The row's status, which the session keeps current.
    pub status: Arc<crate::activity::BackendStatus>,
    _reg: Registration,
}

/// A registered VACUUM: the row goes, and the thread's previous VACUUM reporting is back, when
/// this is dropped.
pub(crate) struct VacuumEntry {
    previous: Option<Arc<VacuumProgress>>,
    _reg: Registration,
}

impl Drop for VacuumEntry {
    fn drop(&mut self) {
        report_vacuums_to(self.previous.take());
    }
}

/// A registered COPY FROM; the row goes when this is dropped.
pub(crate) struct CopyProgress {
    counters: Arc<CopyCounters>,
    _reg: Registration,
}

impl CopyProgress {
    /// `bytes` more bytes of COPY data arrived (counted before the rows they carry).
    pub(crate) fn received(&self, bytes: usize) {
        self.counters
            .bytes_processed
            .fetch_add(bytes as u64, Ordering::Release);
    }

    /// The COPY has now inserted `tuples` rows in all.
    pub(crate) fn inserted(&self, tuples: u64) {
        self.counters
            .tuples_processed
            .store(tuples, Ordering::Release);
    }
}

/// A registered index build; the row goes when this is dropped.
pub(crate) struct IndexProgress {
    build: Arc<IndexBuildProgress>,
    _reg: Registration,
}

impl IndexProgress {
    /// Makes the storage engine's index builds on this thread report to this entry until the
    /// returned guard is dropped.
    pub(crate) fn install(&self) -> Installed {
        Installed {
            previous: report_index_builds_to(Some(self.build.clone())),
        }
    }
}

/// Restores the thread's previous index-build reporting when dropped.
pub(crate) struct Installed {
    previous: Option<Arc<IndexBuildProgress>>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        report_index_builds_to(self.previous.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vacuum_shows_the_table_its_thread_is_vacuuming() {
        let r = Registry::new();
        let rep = Reporter::new(r.clone(), 7, "db");
        let entry = rep.vacuum();
        let p = walnut_storage::progress::vacuum_progress().expect("installed");
        p.start(16390, 10, 1);
        p.heap_blks_scanned.store(4, Ordering::Release);
        let (cols, rows) = r.view("pg_stat_progress_vacuum").unwrap();
        assert_eq!(cols.len(), 15);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][3], Value::Int8(16390));
        assert_eq!(rows[0][4], Value::Text("scanning heap".into()));
        assert_eq!(
            (&rows[0][5], &rows[0][6]),
            (&Value::Int8(10), &Value::Int8(4))
        );
        drop(entry);
        assert!(walnut_storage::progress::vacuum_progress().is_none());
        assert!(r.view("pg_stat_progress_vacuum").unwrap().1.is_empty());
    }

    #[test]
    fn autovacuum_workers_show_while_they_vacuum_a_table() {
        let r = Registry::new();
        let busy = Arc::new(VacuumProgress::default());
        busy.start(16400, 3, 0);
        busy.delay_time_us.store(2500, Ordering::Release);
        let idle = Arc::new(VacuumProgress::default());
        let workers = vec![(2_000_000_000, busy), (2_000_000_001, idle)];
        r.show_other_vacuums(Arc::new(move || workers.clone()));
        let (_, rows) = r.view("pg_stat_progress_vacuum").unwrap();
        assert_eq!(rows.len(), 1, "the idle worker has no row: {rows:?}");
        assert_eq!(rows[0][0], Value::Int4(2_000_000_000));
        assert_eq!(rows[0][2], Value::Text("postgres".into()));
        assert_eq!(rows[0][3], Value::Int8(16400));
        assert_eq!(rows[0][14], Value::Float8(2.5), "delay_time, ms");
        // pg_stat_activity: the busy worker, named by the engine's table names.
        r.name_tables(Arc::new(|relid| {
            (relid == 16400).then(|| "accounts".to_string())
        }));
        let (cols, rows) = r.view("pg_stat_activity").unwrap();
        let at = |name: &str| cols.iter().position(|c| c.name == name).unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0][at("pid")], Value::Int4(2_000_000_000));
        assert_eq!(
            rows[0][at("backend_type")],
            Value::Text("autovacuum worker".into())
        );
        assert_eq!(
            rows[0][at("query")],
            Value::Text("autovacuum: VACUUM public.accounts".into())
        );
    }

    #[test]
    fn rows_come_and_go_with_their_handles() {
        let r = Registry::new();
        let rep = Reporter::new(r.clone(), 7, "db");
        let copy = rep.copy_from(16384);
        copy.received(10);
        copy.inserted(2);
        let (cols, rows) = r.view("pg_stat_progress_copy").unwrap();
        assert_eq!(cols.len(), 11);
        assert_eq!(
            rows,
            vec![vec![
                Value::Int4(7),
                Value::Int8(DATABASE_OID),
                Value::Text("db".into()),
                Value::Int8(16384),
                Value::Text("COPY FROM".into()),
                Value::Text("PIPE".into()),
                Value::Int8(10),
                Value::Int8(0),
                Value::Int8(2),
                Value::Int8(0),
                Value::Int8(0),
            ]]
        );
        let ix = rep.create_index(16390);
        assert_eq!(r.view("pg_stat_progress_copy").unwrap().1.len(), 1);
        let (cols, rows) = r.view("pg_stat_progress_create_index").unwrap();
        assert_eq!(cols.len(), 16);
        assert_eq!(rows[0][6], Value::Text("initializing".into()));
        drop(copy);
        assert!(r.view("pg_stat_progress_copy").unwrap().1.is_empty());
        assert_eq!(r.view("pg_stat_progress_create_index").unwrap().1.len(), 1);
        drop(ix);
        assert!(r
            .view("pg_stat_progress_create_index")
            .unwrap()
            .1
            .is_empty());
        assert!(r.view("pg_stat_io").is_none());
    }
}
