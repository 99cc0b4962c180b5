//! The real storage engine (`walnut_storage`) as the SQL layer sees it ([`Engine`],
//! [`Transaction`]), and its system views (`pg_stat_wal`, `walnut_stat_group_commit`,
//! `pg_class`, and the I/O views of [`crate::stat_views`]), and the registry behind its
//! progress views ([`crate::progress`]).
//!
//! A statement's call goes session → this adapter → `walnut_storage::txn::Txn` → the WAL, one
//! layer down at each step.

use crate::progress::Registry;
use crate::storage::{
    CommitOpts, CommitOutcome, Engine, RelationSize, ScanControl, Transaction, WriteOutcome,
};
use std::ops::Bound;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::{ColumnDef, DataType, Error, Result, SqlState, TableDef, Tid, Value};
use walnut_storage::txn::{RowWrite, Txn};
use walnut_storage::Storage;

impl StorageEngine {
    /// `pg_stat_user_tables`, PostgreSQL 18's columns, a row per table (in name order) from
    /// its counters (`walnut_storage::tabstat`, kept since the server started). `relid` is the
    /// table's `pg_class.oid`; `last_seq_scan` and `last_idx_scan` are not kept (NULL), nor is
    /// anything about ANALYZE (walnut keeps no statistics: 0 and NULL). `n_tup_hot_upd` counts
    /// the same-page updates that left the index entry where it was.
    fn pg_stat_user_tables(&self) -> (Vec<ColumnDef>, Vec<Vec<Value>>) {
        use std::sync::atomic::Ordering::Relaxed;
        use DataType::{Float8, Int8, Text, Timestamp};
        let cols: Vec<ColumnDef> = [
            ("relid", Int8),
            ("schemaname", Text),
            ("relname", Text),
            ("seq_scan", Int8),
            ("last_seq_scan", Timestamp),
            ("seq_tup_read", Int8),
            ("idx_scan", Int8),
            ("last_idx_scan", Timestamp),
            ("idx_tup_fetch", Int8),
            ("n_tup_ins", Int8),
            ("n_tup_upd", Int8),
            ("n_tup_del", Int8),
            ("n_tup_hot_upd", Int8),
            ("n_tup_newpage_upd", Int8),
            ("n_live_tup", Int8),
            ("n_dead_tup", Int8),
            ("n_mod_since_analyze", Int8),
            ("n_ins_since_vacuum", Int8),
            ("last_vacuum", Timestamp),
            ("last_autovacuum", Timestamp),
            ("last_analyze", Timestamp),
            ("last_autoanalyze", Timestamp),
            ("vacuum_count", Int8),
            ("autovacuum_count", Int8),
            ("analyze_count", Int8),
            ("autoanalyze_count", Int8),
            ("total_vacuum_time", Float8),
            ("total_autovacuum_time", Float8),
            ("total_analyze_time", Float8),
            ("total_autoanalyze_time", Float8),
        ]
        .into_iter()
        .map(|(n, t)| col(n, t))
        .collect();
        let mut tables = self.storage.catalog.all();
        tables.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        let rows = tables
            .iter()
            .map(|t| {
                let c = self.storage.table_stats.of(t.table_id);
                let n = |a: &std::sync::atomic::AtomicU64| Value::Int8(a.load(Relaxed) as i64);
                let est = |a: &std::sync::atomic::AtomicI64| Value::Int8(a.load(Relaxed).max(0));
                let when = |a: &std::sync::atomic::AtomicI64| match a.load(Relaxed) {
                    0 => Value::Null,
                    us => Value::Timestamp(us),
                };
                let ms = |a: &std::sync::atomic::AtomicU64| Value::Float8(a.load(Relaxed) as f64);
                let indexed = t.index.is_some();
                vec![
                    Value::Int8(t.table_id as i64),
                    Value::Text("public".into()),
                    Value::Text(t.def.name.clone()),
                    n(&c.seq_scan),
                    Value::Null,
                    n(&c.seq_tup_read),
                    if indexed { n(&c.idx_scan) } else { Value::Null },
                    Value::Null,
                    if indexed {
                        n(&c.idx_tup_fetch)
                    } else {
                        Value::Null
                    },
                    n(&c.n_tup_ins),
                    n(&c.n_tup_upd),
                    n(&c.n_tup_del),
                    n(&c.n_tup_hot_upd),
                    n(&c.n_tup_newpage_upd),
                    est(&c.n_live_tup),
                    est(&c.n_dead_tup),
                    n(&c.n_mod_since_analyze),
                    n(&c.n_ins_since_vacuum),
                    when(&c.last_vacuum),
                    when(&c.last_autovacuum),
                    Value::Null,
                    Value::Null,
                    n(&c.vacuum_count),
                    n(&c.autovacuum_count),
                    Value::Int8(0),
                    Value::Int8(0),
                    ms(&c.total_vacuum_time_ms),
                    ms(&c.total_autovacuum_time_ms),
                    Value::Float8(0.0),
                    Value::Float8(0.0),
                ]
            })
            .collect();
        (cols, rows)
    }
}

/// An open data directory, as an [`Engine`].
pub struct StorageEngine {
    /// The open data directory.
    pub storage: Arc<Storage>,
    /// The running COPYs and index builds of this engine's sessions.
    pub progress: Arc<Registry>,
}

impl StorageEngine {
    /// The engine over `storage`.
    pub fn new(storage: Arc<Storage>) -> Arc<StorageEngine> {
        let progress = Registry::new();
        let av = storage.autovacuum.clone();
        progress.show_other_vacuums(Arc::new(move || av.progress()));
        // Weak: the registry lives in the engine, which holds the storage.
        let st = Arc::downgrade(&storage);
        progress.name_tables(Arc::new(move |relid| {
            let st = st.upgrade()?;
            let t = st.catalog.all().into_iter().find(|t| t.table_id == relid)?;
            Some(t.def.name.clone())
        }));
        Arc::new(StorageEngine { storage, progress })
    }
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

impl Engine for StorageEngine {
    fn begin(&self, cancel: Arc<AtomicBool>) -> Result<Box<dyn Transaction>> {
        // A reload of the catalog cache after an earlier commit may have failed.
        self.storage.catalog.refresh_if_stale(&self.storage)?;
        let mut txn = Txn::begin(self.storage.clone(), cancel);
        // Every statement calls `new_statement` first: until then (a session idle after
        // BEGIN) the transaction holds no snapshot back.
        txn.end_statement();
        Ok(Box::new(TxnAdapter {
            storage: self.storage.clone(),
            bulk_table: None,
            txn: Some(txn),
            seqs: None,
        }))
    }

    fn checkpoint(&self) -> Result<()> {
        self.storage.request_checkpoint()
    }

    fn vacuum(
        &self,
        tables: &[String],
        opts: crate::storage::VacuumOptions,
        cancel: &AtomicBool,
    ) -> Result<Vec<String>> {
        let st = &self.storage;
        if st.in_recovery() {
            return Err(Error::user(
                SqlState::READ_ONLY_SQL_TRANSACTION,
                "cannot execute VACUUM during recovery",
            ));
        }
        st.catalog.refresh_if_stale(st)?;
        let infos = if tables.is_empty() {
            let mut all = st.catalog.all();
            all.sort_by(|a, b| a.def.name.cmp(&b.def.name));
            all
        } else {
            tables
                .iter()
                .map(|n| {
                    st.catalog
                        .get(n)
                        .ok_or_else(|| crate::errors::undefined_table(n))
                })
                .collect::<Result<Vec<_>>>()?
        };
        let mut info_messages = Vec::new();
        let check = &mut || {
            if cancel.load(std::sync::atomic::Ordering::Relaxed) {
                Err(Error::cancelled())
            } else {
                Ok(())
            }
        };
        let params = walnut_storage::vacuum::VacuumParams {
            freeze_min_age: if opts.freeze {
                0
            } else {
                st.autovacuum.settings().freeze_min_age
            },
            ring: st.autovacuum.settings().buffer_usage_limit,
            ..Default::default()
        };
        for info in &infos {
            let started = std::time::Instant::now();
            // Skipped (dropped meanwhile): nothing to report.
            let Some(s) = walnut_storage::vacuum::vacuum_table_with(st, info, params, check)?
            else {
                continue;
            };
            if opts.verbose {
                info_messages.push(walnut_storage::vacuum::report(
                    "finished vacuuming",
                    info,
                    &s,
                    started.elapsed(),
                ));
            }
        }
        if tables.is_empty() {
            // A database-wide VACUUM also freezes the catalog, as PostgreSQL's VACUUM without a
            // table list processes the system catalogs.
            walnut_storage::vacuum::vacuum_catalog(st, params.freeze_min_age, check)?;
        }
        Ok(info_messages)
    }

    fn progress(&self) -> Option<Arc<Registry>> {
        Some(self.progress.clone())
    }

    fn recovery(&self) -> Option<crate::storage::RecoveryStatus> {
        let rec = self.storage.recovery().filter(|r| !r.ended())?;
        Some(crate::storage::RecoveryStatus {
            receive_lsn: rec.received().1 .0,
            replay_lsn: rec.replay_lsn().0,
            last_xact_replay_timestamp: rec.last_commit_timestamp(),
            paused: rec.is_paused(),
        })
    }

    fn recovery_control(&self, op: crate::storage::RecoveryControl) -> Result<bool> {
        use crate::storage::RecoveryControl;
        let rec = self
            .storage
            .recovery()
            .filter(|r| !r.ended())
            .ok_or_else(crate::storage::not_in_recovery)?;
        match op {
            RecoveryControl::Pause => rec.set_paused(true),
            RecoveryControl::Resume => rec.set_paused(false),
            RecoveryControl::Promote(wait) => {
                rec.request_promote();
                let Some(wait) = wait else { return Ok(true) };
                let until = std::time::Instant::now() + wait;
                while !rec.ended() {
                    if std::time::Instant::now() >= until {
                        return Ok(false);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
        }
        Ok(true)
    }

    fn wal_positions(&self) -> Option<crate::storage::WalPositions> {
        let wal = self.storage.wal_if_open()?;
        // Read flush first: each is then at least as far as the one read before it.
        let flush = wal.flush_lsn().0;
        let write = wal.write_lsn().0.max(flush);
        let insert = wal.insert_lsn().0.max(write);
        Some(crate::storage::WalPositions {
            insert,
            write,
            flush,
        })
    }

    /// Sizes from the storage manager: a relation file's allocated blocks (`nblocks`, which
    /// the file holds) times 8 kB, and the free-space map file's length. `oid` is a table's
    /// (its table id) or a primary-key index's (its relation file), as `pg_class` lists them.
    fn relation_size(&self, oid: i64, which: RelationSize) -> Option<i64> {
        use std::sync::atomic::Ordering::Acquire;
        let smgr = &self.storage.smgr;
        let file = |rel: walnut_common::RelFileId| -> i64 {
            smgr.open(rel).map_or(0, |r| {
                r.nblocks.load(Acquire) as i64 * walnut_common::BLCKSZ as i64
            })
        };
        let fsm = |rel| smgr.free_space_map_bytes(rel) as i64;
        let tables = self.storage.catalog.all();
        if let Some(t) = tables.iter().find(|t| t.table_id as i64 == oid) {
            let indexes = t.index.map_or(0, file);
            return Some(match which {
                RelationSize::Main => file(t.relfile),
                RelationSize::Fsm => fsm(t.relfile),
                RelationSize::NoFork => 0,
                RelationSize::Table => file(t.relfile) + fsm(t.relfile),
                RelationSize::Indexes => indexes,
                RelationSize::Total => file(t.relfile) + fsm(t.relfile) + indexes,
            });
        }
        if let Some(s) = self
            .storage
            .catalog
            .all_sequences()
            .iter()
            .find(|s| s.oid as i64 == oid)
        {
            return Some(match which {
                RelationSize::Main | RelationSize::Table | RelationSize::Total => file(s.relfile),
                RelationSize::Fsm | RelationSize::NoFork | RelationSize::Indexes => 0,
            });
        }
        let ix = tables
            .iter()
            .find_map(|t| t.index.filter(|ix| ix.0 as i64 == oid))?;
        Some(match which {
            RelationSize::Main | RelationSize::Table | RelationSize::Total => file(ix),
            RelationSize::Fsm | RelationSize::NoFork | RelationSize::Indexes => 0,
        })
    }

    fn system_view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        if name == "pg_stat_wal_receiver" {
            let rec = self.storage.recovery().filter(|r| !r.ended());
            return Some(crate::replication_views::pg_stat_wal_receiver(
                rec.and_then(|r| {
                    let info = r.receiver.lock().clone()?;
                    Some((info, r.received()))
                }),
            ));
        }
        if name == "pg_stat_database_conflicts" {
            // One database. Of PostgreSQL's conflict kinds, walnut's standby has the snapshot
            // conflict of a replayed prune; the others stay 0.
            let snapshot = self
                .storage
                .recovery()
                .map_or(0, |r| r.conflicts_snapshot() as i64);
            let mut cols = vec![col("datid", DataType::Int8), col("datname", DataType::Text)];
            cols.extend(
                [
                    "confl_tablespace",
                    "confl_lock",
                    "confl_snapshot",
                    "confl_bufferpin",
                    "confl_deadlock",
                    "confl_active_logicalslot",
                ]
                .iter()
                .map(|n| col(n, DataType::Int8)),
            );
            let mut row = vec![
                Value::Int8(crate::progress::DATABASE_OID),
                Value::Text("postgres".into()),
            ];
            row.extend([0, 0, snapshot, 0, 0, 0].map(Value::Int8));
            return Some((cols, vec![row]));
        }
        if name == "pg_stat_user_tables" {
            return Some(self.pg_stat_user_tables());
        }
        if name == "pg_stat_recovery_prefetch" {
            let s = &self.storage.recovery_prefetch;
            let reset = s.reset_us.load(std::sync::atomic::Ordering::Relaxed);
            let mut cols = vec![col("stats_reset", DataType::Timestamp)];
            let names = [
                "prefetch",
                "hit",
                "skip_init",
                "skip_new",
                "skip_fpw",
                "skip_rep",
            ];
            cols.extend(names.iter().map(|n| col(n, DataType::Int8)));
            cols.extend(
                ["wal_distance", "block_distance", "io_depth"]
                    .iter()
                    .map(|n| col(n, DataType::Int4)),
            );
            let v = s.snapshot();
            let mut row = vec![if reset == 0 {
                Value::Null
            } else {
                Value::Timestamp(reset)
            }];
            row.extend(v[..6].iter().map(|&n| Value::Int8(n as i64)));
            row.extend(
                v[6..]
                    .iter()
                    .map(|&n| Value::Int4(n.min(i32::MAX as u64) as i32)),
            );
            return Some((cols, vec![row]));
        }
        if name == "walnut_stat_recovery_workers" {
            // The parallel redo's threads since the server started: the startup thread's
            // row counts what it handed out and its waits for the workers; each worker's,
            // what it applied, and its waits for work and (hot standby) for the other
            // workers' heap phase. Times in ms.
            use std::sync::atomic::Ordering::Relaxed;
            let r = &self.storage.redo_stats;
            let ms =
                |us: &std::sync::atomic::AtomicU64| Value::Float8(us.load(Relaxed) as f64 / 1000.0);
            let n = |c: &std::sync::atomic::AtomicU64| Value::Int8(c.load(Relaxed) as i64);
            let cols = vec![
                col("thread", DataType::Text),
                col("blocks", DataType::Int8),
                col("rounds", DataType::Int8),
                col("busy_time", DataType::Float8),
                col("wait_work_time", DataType::Float8),
                col("wait_phase_time", DataType::Float8),
                col("wait_workers_time", DataType::Float8),
            ];
            let mut rows = vec![vec![
                Value::Text("startup".into()),
                n(&r.blocks_sent),
                n(&r.rounds_sent),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Float8(
                    (r.wait_send_us.load(Relaxed) + r.wait_barrier_us.load(Relaxed)) as f64
                        / 1000.0,
                ),
            ]];
            for (i, w) in r.snapshot().iter().enumerate() {
                rows.push(vec![
                    Value::Text(format!("redo worker {i}")),
                    n(&w.blocks),
                    n(&w.rounds),
                    ms(&w.busy_us),
                    ms(&w.wait_work_us),
                    ms(&w.wait_phase_us),
                    Value::Null,
                ]);
            }
            return Some((cols, rows));
        }
        // A standby in recovery has no WAL open: its WAL views show zeros and no senders.
        let wal = self.storage.wal_if_open();
        let s = wal.map(|w| w.stats()).unwrap_or_default();
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
                // Buckets are labelled by the commits they hold: "0", "1", "2", "3-4", … "65+".
                let histogram = s
                    .group_histogram
                    .iter()
                    .scan(None::<u64>, |prev, &(hi, n)| {
                        let lo = prev.map_or(0, |p| p + 1);
                        let label = match (lo, hi) {
                            (a, u64::MAX) => format!("{a}+"),
                            (a, b) if a == b => format!("{a}"),
                            (a, b) => format!("{a}-{b}"),
                        };
                        *prev = Some(hi);
                        Some(format!("{label}:{n}"))
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let by_cause = |single: bool| {
                    s.group_closed
                        .iter()
                        .map(|&(cause, all, one)| {
                            format!("{cause}:{}", if single { one } else { all })
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                let mode = self.storage.config().wal.group_commit.name();
                Some((
                    vec![
                        col("group_commit", DataType::Text),
                        col("flushes", DataType::Int8),
                        col("commits", DataType::Int8),
                        col("commits_per_flush", DataType::Float8),
                        col("commits_per_flush_histogram", DataType::Text),
                        col("group_wait_time", DataType::Float8),
                        col("current_wait_us", DataType::Int8),
                        col("patience_us", DataType::Int8),
                        col("flush_latency_us", DataType::Int8),
                        col("sessions", DataType::Int8),
                        col("wal_sync_method", DataType::Text),
                        col("wal_sync_range", DataType::Bool),
                        col("flushes_by_close", DataType::Text),
                        col("single_commit_flushes_by_close", DataType::Text),
                        col("flush_capacity", DataType::Float8),
                        col("flush_utilization", DataType::Float8),
                    ],
                    vec![vec![
                        Value::Text(mode.into()),
                        i(s.group_flushes),
                        i(s.group_commits),
                        Value::Float8(per),
                        Value::Text(histogram),
                        Value::Float8(s.group_wait_time_us as f64 / 1000.0),
                        i(s.group_recent_wait_us),
                        i(s.group_patience_us),
                        i(s.group_flush_latency_us),
                        i(s.group_sessions),
                        Value::Text(self.storage.config().wal.sync_method.name().into()),
                        Value::Bool(wal.is_some_and(|w| w.sync_range_in_use())),
                        Value::Text(by_cause(false)),
                        Value::Text(by_cause(true)),
                        s.group_flush_capacity.map_or(Value::Null, Value::Float8),
                        s.group_utilization.map_or(Value::Null, Value::Float8),
                    ]],
                ))
            }
            "pg_class" => {
                let mut rows = Vec::new();
                for t in self.storage.catalog.all() {
                    let options = walnut_storage::catalog::reloptions(&t.def);
                    rows.push(vec![
                        Value::Int8(t.table_id as i64),
                        Value::Text(t.def.name.clone()),
                        Value::Text("r".into()),
                        Value::Int8(2200),
                        Value::Int8(
                            walnut_storage::vacuum::relfrozenxid(&self.storage, t.relfile).0 as i64,
                        ),
                        if options.is_empty() {
                            Value::Null
                        } else {
                            Value::Text(format!("{{{}}}", options.join(",")))
                        },
                    ]);
                    if let Some(ix) = t.index {
                        rows.push(vec![
                            Value::Int8(ix.0 as i64),
                            Value::Text(t.index_name()),
                            Value::Text("i".into()),
                            Value::Int8(2200),
                            Value::Int8(0),
                            Value::Null,
                        ]);
                    }
                }
                for s in self.storage.catalog.all_sequences() {
                    rows.push(vec![
                        Value::Int8(s.oid as i64),
                        Value::Text(s.def.name.clone()),
                        Value::Text("S".into()),
                        Value::Int8(2200),
                        Value::Int8(0),
                        Value::Null,
                    ]);
                }
                rows.sort_by_key(|r| r[0].as_i64());
                Some((
                    vec![
                        col("oid", DataType::Int8),
                        col("relname", DataType::Text),
                        col("relkind", DataType::Char(1)),
                        col("relnamespace", DataType::Int8),
                        // PostgreSQL's type `xid`; 0 for an index.
                        col("relfrozenxid", DataType::Int8),
                        // PostgreSQL's `text[]`, shown as its text form; NULL when all default.
                        col("reloptions", DataType::Text),
                    ],
                    rows,
                ))
            }
            "pg_stat_replication" => Some(crate::replication_views::pg_stat_replication(
                &wal.map(|w| w.senders().snapshot()).unwrap_or_default(),
            )),
            "pg_replication_slots" => {
                let (max_wal, max_slot) = self.storage.slot_wal_limits();
                Some(crate::replication_views::pg_replication_slots(
                    &self.storage.slots.list(),
                    wal.map_or_else(
                        || self.storage.recovery().map_or(0, |r| r.replay_lsn().0),
                        |w| w.insert_lsn().0,
                    ),
                    max_wal,
                    max_slot,
                ))
            }
            _ => crate::stat_views::view(&self.storage.smgr.stats, name),
        }
    }
}

struct TxnAdapter {
    storage: Arc<Storage>,
    txn: Option<Txn>,
    /// The table of the bulk load in progress, looked up once per statement rather than per
    /// row (no DDL runs inside a COPY or an INSERT ... SELECT).
    bulk_table: Option<Arc<walnut_storage::catalog::TableInfo>>,
    /// The last handle [`Transaction::sequences`] returned, while the storage's is the same.
    seqs: Option<Arc<SeqAdapter>>,
}

/// [`SequenceAccess`](crate::storage::SequenceAccess) over the storage's sequences.
struct SeqAdapter(Arc<walnut_storage::txn::Sequences>);

fn seq_ref(s: &walnut_storage::catalog::SeqInfo) -> crate::storage::SeqRef {
    crate::storage::SeqRef {
        oid: s.oid as i64,
        // The relation file and the catalog row version's TID: new at each ALTER SEQUENCE.
        // A TID can come back (pruning frees the slot of an old version), so the file, never
        // reused, is part of it: a RESTART always makes a new version.
        version: (s.relfile.0 as u128) << 64
            | (s.catalog_tid.block.0 as u128) << 16
            | s.catalog_tid.slot as u128,
        relfile: s.relfile.0 as u64,
        def: s.def.clone(),
    }
}

fn seq_lookup(k: walnut_storage::txn::RelKind) -> crate::storage::SeqLookup {
    use crate::storage::SeqLookup;
    use walnut_storage::txn::RelKind;
    match k {
        RelKind::Sequence(s) => SeqLookup::Sequence(seq_ref(&s)),
        RelKind::Table => SeqLookup::Table,
        RelKind::Missing => SeqLookup::Missing,
    }
}

impl SeqAdapter {
    fn info(seq: &crate::storage::SeqRef) -> walnut_storage::catalog::SeqInfo {
        walnut_storage::catalog::SeqInfo {
            def: seq.def.clone(),
            oid: seq.oid as u64,
            relfile: walnut_common::RelFileId(seq.relfile as u32),
            catalog_tid: walnut_common::Tid::INVALID,
        }
    }
}

impl crate::storage::SequenceAccess for SeqAdapter {
    fn lookup(&self, name: &str) -> crate::storage::SeqLookup {
        seq_lookup(self.0.lookup(name))
    }

    fn lookup_oid(&self, oid: i64) -> crate::storage::SeqLookup {
        match u64::try_from(oid) {
            Ok(oid) => seq_lookup(self.0.lookup_oid(oid)),
            Err(_) => crate::storage::SeqLookup::Missing,
        }
    }

    fn fetch(&self, seq: &crate::storage::SeqRef) -> Result<(i64, i64, u64)> {
        let f = self.0.fetch(&Self::info(seq))?;
        Ok((f.first, f.last, f.covered_by.0))
    }

    fn note_wal(&self, covered_by: u64) {
        self.0.note(walnut_common::Lsn(covered_by));
    }

    fn set(&self, seq: &crate::storage::SeqRef, value: i64, is_called: bool) -> Result<()> {
        self.0.set(&Self::info(seq), value, is_called)
    }

    fn owned_sequence(&self, table: &str, column: &str) -> Result<Option<String>> {
        self.0.owned_sequence(table, column)
    }
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
    fn set_isolation(&mut self, level: crate::storage::Isolation) -> Result<()> {
        self.t().set_isolation(level)
    }

    fn isolation(&self) -> crate::storage::Isolation {
        self.txn
            .as_ref()
            .map_or(crate::storage::Isolation::ReadCommitted, |t| t.isolation())
    }

    fn new_statement(&mut self) {
        self.bulk_table = None;
        self.t().new_statement();
    }

    fn end_statement(&mut self) {
        self.t().end_statement();
    }

    fn recovery_conflict(&mut self) -> Option<walnut_common::Error> {
        self.t().take_recovery_conflict()
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

    fn create_sequence(&mut self, def: walnut_common::SequenceDef) -> Result<()> {
        self.t().create_sequence(def)
    }

    fn drop_sequence(&mut self, name: &str) -> Result<()> {
        self.t().drop_sequence(name)
    }

    fn sequence_exists(&mut self, name: &str) -> Result<bool> {
        Ok(self.t().sequence(name).is_some())
    }

    fn sequence_def(&mut self, name: &str) -> Result<Option<walnut_common::SequenceDef>> {
        Ok(self.t().sequence(name).map(|s| (*s.def).clone()))
    }

    fn alter_sequence(
        &mut self,
        name: &str,
        def: walnut_common::SequenceDef,
        restart: Option<i64>,
    ) -> Result<()> {
        self.t().alter_sequence(name, def, restart)
    }

    fn alter_table_def(
        &mut self,
        name: &str,
        change: &mut dyn FnMut(&mut TableDef) -> Result<()>,
    ) -> Result<()> {
        self.t().alter_table_def(name, change)
    }

    fn sequences(&mut self) -> Option<Arc<dyn crate::storage::SequenceAccess>> {
        let h = self.t().sequences();
        if let Some(a) = self.seqs.as_ref().filter(|a| Arc::ptr_eq(&a.0, &h)) {
            return Some(a.clone());
        }
        let a = Arc::new(SeqAdapter(h));
        self.seqs = Some(a.clone());
        Some(a)
    }

    fn truncate(&mut self, name: &str) -> Result<()> {
        self.t().truncate(name)
    }

    fn table_oid(&mut self, name: &str) -> Result<Option<i64>> {
        Ok(self.t().table(name).map(|i| i.table_id as i64))
    }

    fn add_primary_key(&mut self, name: &str, columns: Vec<usize>) -> Result<()> {
        // The build reports "loading tuples in tree" itself (btree/build.rs); the heap scan
        // before it is reported here, as one step: its blocks are known, not its progress.
        if let Some(p) = walnut_storage::progress::index_build_progress() {
            let info = self.info(name)?;
            let rel = self.storage.smgr.open(info.relfile)?;
            let nblocks = rel.nblocks.load(std::sync::atomic::Ordering::Acquire);
            p.blocks_total
                .store(nblocks as u64, std::sync::atomic::Ordering::Relaxed);
            p.set_phase(walnut_storage::progress::PHASE_SCANNING_TABLE);
        }
        self.t().add_primary_key(name, columns)
    }

    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<()> {
        let info = self.info(table)?;
        self.t().insert(&info, &row)
    }

    fn insert_bulk(&mut self, table: &str, row: Vec<Value>) -> Result<()> {
        let info = match self.bulk_table.take() {
            Some(info) if info.def.name == table => info,
            _ => self.info(table)?,
        };
        let r = self.t().insert_bulk(&info, &row);
        self.bulk_table = Some(info);
        r
    }

    fn finish_bulk(&mut self) -> Result<()> {
        self.bulk_table = None;
        self.t().finish_bulk()
    }

    fn scan(
        &mut self,
        table: &str,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        let info = self.info(table)?;
        self.t().finish_bulk()?;
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
        self.t().finish_bulk()?;
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

    fn commit(mut self: Box<Self>, opts: &CommitOpts) -> Result<CommitOutcome> {
        let txn = self.txn.take().expect("transaction already finished");
        txn.commit(opts)
    }

    fn rollback(mut self: Box<Self>) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
    }
}
