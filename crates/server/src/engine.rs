//! Glue between the storage engine and the SQL layer: opens a data directory and exposes it as
//! `walnut_sql::storage::Engine`. OWNED BY THE STORAGE AUTHOR (front-end code calls only
//! `initdb`, `open_engine` and `Handle`).

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::{ColumnDef, DataType, Error, Result, SqlState, TableDef, Tid, Value};
use walnut_sql::storage::{CommitOpts, Engine, ScanControl, Transaction, WriteOutcome};
use walnut_storage::txn::{CommitSettings, RowWrite, Txn};
use walnut_storage::{Storage, StorageConfig};
use walnut_wal::FlushOpts;

/// Default `walnut.conf` written by initdb.
pub const DEFAULT_CONF: &str = "\
# walnut configuration (postgresql.conf syntax, PostgreSQL GUC names)
listen_addresses = '127.0.0.1'
port = 5433
max_connections = 100
shared_buffers = 128MB
synchronous_commit = on
commit_delay = 0                # µs; the leader sleeps if >= commit_siblings others are active
commit_siblings = 5
wal_writer_delay = 200ms
checkpoint_timeout = 5min
max_wal_size = 1GB
full_page_writes = on
";

/// Creates a new data directory at `dir` (`walnut initdb`): directory layout, empty catalog,
/// first WAL segment, control file, and a default `walnut.conf`.
///
/// # Errors
/// 42P04 if `dir` exists and is not empty; I/O errors.
pub fn initdb(dir: &Path) -> Result<()> {
    Storage::initdb(Arc::new(walnut_io::RealVfs), dir)?;
    std::fs::write(dir.join("walnut.conf"), DEFAULT_CONF)
        .map_err(|e| Error::io("could not write walnut.conf", e))
}

/// The engine as the SQL layer sees it.
pub struct Handle {
    /// The open data directory.
    pub storage: Arc<Storage>,
}

fn setting<'a>(settings: &'a [(String, String)], name: &str) -> Option<&'a str> {
    settings
        .iter()
        .rev()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn int_setting(settings: &[(String, String)], name: &str, default: i64) -> Result<i64> {
    match setting(settings, name) {
        Some(v) => walnut_sql::guc::value_as_i64(name, v),
        None => Ok(default),
    }
}

/// Storage configuration from GUC settings (name -> value text).
///
/// # Errors
/// 22023 for invalid values.
pub fn storage_config(settings: &[(String, String)]) -> Result<StorageConfig> {
    let d = StorageConfig::default();
    Ok(StorageConfig {
        shared_buffers_pages: int_setting(
            settings,
            "shared_buffers",
            d.shared_buffers_pages as i64,
        )?
        .max(16) as usize,
        full_page_writes: match setting(settings, "full_page_writes") {
            Some(v) => walnut_sql::guc::value_as_bool("full_page_writes", v)?,
            None => true,
        },
        checkpoint_timeout_s: int_setting(
            settings,
            "checkpoint_timeout",
            d.checkpoint_timeout_s as i64,
        )?
        .max(1) as u64,
        max_wal_size_mb: int_setting(settings, "max_wal_size", d.max_wal_size_mb as i64)?.max(2)
            as u64,
        wal_writer_delay_ms: int_setting(
            settings,
            "wal_writer_delay",
            d.wal_writer_delay_ms as i64,
        )?
        .max(1) as u64,
        wal_buffers_bytes: d.wal_buffers_bytes,
    })
}

/// Opens the data directory (running crash recovery if needed) with the server-level settings
/// `settings` (GUC name -> value text), and starts the background checkpointer and WAL writer.
///
/// # Errors
/// I/O and corruption errors from recovery; 22023 for invalid settings.
pub fn open_engine(dir: &Path, settings: &[(String, String)]) -> Result<Arc<dyn Engine>> {
    Ok(open_handle(dir, settings)?)
}

/// Like [`open_engine`], returning the concrete handle (for shutdown).
///
/// # Errors
/// As for [`open_engine`].
pub fn open_handle(dir: &Path, settings: &[(String, String)]) -> Result<Arc<Handle>> {
    let storage = Storage::open(Arc::new(walnut_io::RealVfs), dir, storage_config(settings)?)?;
    Ok(Arc::new(Handle { storage }))
}

fn col(name: &str, ty: DataType) -> ColumnDef {
    ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
    }
}

impl Engine for Handle {
    fn begin(&self, cancel: Arc<AtomicBool>) -> Result<Box<dyn Transaction>> {
        Ok(Box::new(TxnAdapter {
            txn: Some(Txn::begin(self.storage.clone(), cancel)),
        }))
    }

    fn checkpoint(&self) -> Result<()> {
        self.storage.request_checkpoint()
    }

    fn system_view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        let s = self.storage.wal().stats();
        let i = |v: u64| Value::Int8(v as i64);
        match name {
            "pg_stat_wal" => Some((
                vec![
                    col("wal_records", DataType::Int8),
                    col("wal_fpi", DataType::Int8),
                    col("wal_bytes", DataType::Int8),
                    col("wal_buffers_full", DataType::Int8),
                    col("wal_write", DataType::Int8),
                    col("wal_sync", DataType::Int8),
                    col("wal_write_time", DataType::Float8),
                    col("wal_sync_time", DataType::Float8),
                ],
                vec![vec![
                    i(s.wal_records),
                    i(s.wal_fpi),
                    i(s.wal_bytes),
                    i(s.wal_buffers_full),
                    i(s.wal_write),
                    i(s.wal_sync),
                    Value::Float8(s.wal_write_time_us as f64 / 1000.0),
                    Value::Float8(s.wal_sync_time_us as f64 / 1000.0),
                ]],
            )),
            "walnut_stat_group_commit" => {
                let per = if s.group_flushes == 0 {
                    0.0
                } else {
                    s.group_commits as f64 / s.group_flushes as f64
                };
                Some((
                    vec![
                        col("flushes", DataType::Int8),
                        col("commits", DataType::Int8),
                        col("commits_per_flush", DataType::Float8),
                    ],
                    vec![vec![
                        i(s.group_flushes),
                        i(s.group_commits),
                        Value::Float8(per),
                    ]],
                ))
            }
            "pg_class" => {
                let mut rows = Vec::new();
                for t in self.storage.catalog.all() {
                    rows.push(vec![
                        Value::Int8(t.table_id as i64),
                        Value::Text(t.def.name.clone()),
                        Value::Text("r".into()),
                        Value::Int8(2200),
                    ]);
                    if let Some(ix) = t.index {
                        rows.push(vec![
                            Value::Int8(ix.0 as i64),
                            Value::Text(t.index_name()),
                            Value::Text("i".into()),
                            Value::Int8(2200),
                        ]);
                    }
                }
                rows.sort_by_key(|r| r[0].as_i64());
                Some((
                    vec![
                        col("oid", DataType::Int8),
                        col("relname", DataType::Text),
                        col("relkind", DataType::Char(1)),
                        col("relnamespace", DataType::Int8),
                    ],
                    rows,
                ))
            }
            _ => None,
        }
    }
}

struct TxnAdapter {
    txn: Option<Txn>,
}

impl TxnAdapter {
    fn t(&mut self) -> &mut Txn {
        self.txn
            .as_mut()
            .expect("transaction used after commit or rollback")
    }

    fn info(&mut self, table: &str) -> Result<Arc<walnut_storage::catalog::TableInfo>> {
        self.t().table(table).ok_or_else(|| {
            Error::user(
                SqlState::UNDEFINED_TABLE,
                format!("relation \"{table}\" does not exist"),
            )
        })
    }
}

fn outcome(w: RowWrite) -> WriteOutcome {
    match w {
        RowWrite::Done => WriteOutcome::Done,
        RowWrite::Changed(row, values) => WriteOutcome::Changed { row, values },
        RowWrite::Gone => WriteOutcome::Gone,
    }
}

impl Transaction for TxnAdapter {
    fn new_statement(&mut self) {
        self.t().new_statement();
    }

    fn table(&mut self, name: &str) -> Result<Option<Arc<TableDef>>> {
        Ok(self.t().table(name).map(|i| i.def.clone()))
    }

    fn create_table(&mut self, def: TableDef) -> Result<()> {
        self.t().create_table(def)
    }

    fn drop_table(&mut self, name: &str) -> Result<()> {
        self.t().drop_table(name)
    }

    fn truncate(&mut self, name: &str) -> Result<()> {
        self.t().truncate(name)
    }

    fn add_primary_key(&mut self, name: &str, columns: Vec<usize>) -> Result<()> {
        self.t().add_primary_key(name, columns)
    }

    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<()> {
        let info = self.info(table)?;
        self.t().insert(&info, &row)
    }

    fn scan(
        &mut self,
        table: &str,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        let info = self.info(table)?;
        self.t().scan(&info, &mut |tid, row| {
            Ok(visit(tid, row)? == ScanControl::Continue)
        })
    }

    fn index_scan(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        let info = self.info(table)?;
        self.t().index_scan(&info, lo, hi, &mut |tid, row| {
            Ok(visit(tid, row)? == ScanControl::Continue)
        })
    }

    fn update(&mut self, table: &str, row: Tid, values: Vec<Value>) -> Result<WriteOutcome> {
        let info = self.info(table)?;
        // The key check needs the old row's key: read it from the version being replaced.
        let old = self.t().row_at(&info, row)?;
        self.t().update(&info, row, &old, &values).map(outcome)
    }

    fn delete(&mut self, table: &str, row: Tid) -> Result<WriteOutcome> {
        let info = self.info(table)?;
        self.t().delete(&info, row).map(outcome)
    }

    fn commit(mut self: Box<Self>, opts: CommitOpts) -> Result<()> {
        let txn = self.txn.take().expect("transaction already finished");
        txn.commit(CommitSettings {
            synchronous: opts.synchronous,
            flush: FlushOpts {
                commit_delay_us: opts.commit_delay_us,
                commit_siblings: opts.commit_siblings,
            },
        })
    }

    fn rollback(mut self: Box<Self>) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
    }
}
