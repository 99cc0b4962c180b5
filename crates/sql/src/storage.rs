//! The storage engine as the SQL layer sees it. Implemented by walnut's storage crate and, for
//! tests, by an in-memory model.
//!
//! All calls are blocking (they may wait on row locks and on WAL flushes); the caller runs them on
//! a session's own OS thread, never on an async runtime worker.

use std::ops::Bound;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use walnut_common::{Result, SequenceDef, TableDef, Tid, Value};

/// A row's physical identity within a statement: the TID of the version the scan returned.
pub type RowId = Tid;

/// What an update or delete of a row did.
#[derive(Clone, Debug, PartialEq)]
pub enum WriteOutcome {
    /// The row was changed.
    Done,
    /// Another transaction updated the row and committed while we waited for its row lock
    /// (or before we got to it). Here is the newest committed version: the executor re-checks
    /// its WHERE clause on `values` and, if it still matches, retries the write on `row`
    /// (PostgreSQL's EvalPlanQual under read committed).
    Changed {
        /// Identity of the newest version.
        row: RowId,
        /// Its column values.
        values: Vec<Value>,
    },
    /// Another transaction deleted the row and committed; skip it.
    Gone,
}

/// Whether a scan should go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanControl {
    /// Deliver the next row.
    Continue,
    /// Stop the scan.
    Stop,
}

/// A commit's options and outcome: the WAL's types, passed through unchanged from the session
/// to the WAL and back (crates/wal/DESIGN.md, "The commit path").
pub use walnut_storage::txn::Isolation;
pub use walnut_wal::{CommitOpts, CommitOutcome};

/// The database: hands out transactions and runs utility commands.
pub trait Engine: Send + Sync + 'static {
    /// Starts a transaction. `cancel` is polled while waiting (row locks): when set, the wait
    /// ends with a 57014 error.
    ///
    /// # Errors
    /// Resource errors.
    fn begin(&self, cancel: Arc<AtomicBool>) -> Result<Box<dyn Transaction>>;

    /// Runs a checkpoint (the CHECKPOINT command) and returns when it is complete.
    ///
    /// # Errors
    /// I/O errors.
    fn checkpoint(&self) -> Result<()>;

    /// VACUUMs the tables `tables` names (every table and the catalog if it is empty), one
    /// after another, and returns, when `opts.verbose`, an INFO message for each with what it
    /// did. The default, for an engine with nothing to reclaim, does nothing.
    ///
    /// # Errors
    /// 42P01 for a table that does not exist (before any is vacuumed); 25006 on a hot
    /// standby; 57014 once `cancel` is set; the storage's errors.
    fn vacuum(
        &self,
        tables: &[String],
        opts: VacuumOptions,
        cancel: &AtomicBool,
    ) -> Result<Vec<String>> {
        let _ = (tables, opts, cancel);
        Ok(Vec::new())
    }

    /// Rows for a system view such as `pg_stat_wal`: (column names with types, rows).
    /// `None` if the engine has no view of that name.
    fn system_view(&self, name: &str) -> Option<(Vec<walnut_common::ColumnDef>, Vec<Vec<Value>>)>;

    /// The on-disk size, in bytes, of what `which` names of the relation whose `pg_class` OID
    /// is `oid` (PostgreSQL's `pg_relation_size` family, `dbsize.c`); `None` if no relation
    /// has that OID (the functions then return NULL, as PostgreSQL's do). The default: none.
    fn relation_size(&self, oid: i64, which: RelationSize) -> Option<i64> {
        let _ = (oid, which);
        None
    }

    /// The registry behind the progress views (`pg_stat_progress_copy`,
    /// `pg_stat_progress_create_index`) that the sessions of this engine report to. `None`:
    /// the views are always empty.
    fn progress(&self) -> Option<Arc<crate::progress::Registry>> {
        None
    }

    /// The WAL's positions, bytes (LSNs): where the next record goes (insert), what has been
    /// written, and what is durable (flush), for `pg_current_wal_insert_lsn()`,
    /// `pg_current_wal_lsn()` and `pg_current_wal_flush_lsn()`. `None`: the engine has no WAL.
    fn wal_positions(&self) -> Option<WalPositions> {
        None
    }

    /// A standby's recovery, for `pg_is_in_recovery()` and the replay functions; `None` on a
    /// primary (and after promotion).
    fn recovery(&self) -> Option<RecoveryStatus> {
        None
    }

    /// `pg_wal_replay_pause()`, `pg_wal_replay_resume()` and `pg_promote(wait, wait_seconds)`:
    /// for a promotion, true once the server is a primary (false if `wait` ran out).
    ///
    /// # Errors
    /// 55000 when the server is not in recovery.
    fn recovery_control(&self, op: RecoveryControl) -> Result<bool> {
        let _ = op;
        Err(not_in_recovery())
    }
}

/// The options of a VACUUM that change what it does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VacuumOptions {
    /// `VERBOSE`: an INFO message per table.
    pub verbose: bool,
    /// `FREEZE`: freeze every xid whose outcome every snapshot sees (`vacuum_freeze_min_age`
    /// 0).
    pub freeze: bool,
}

/// PostgreSQL's error for a recovery function on a primary.
pub fn not_in_recovery() -> walnut_common::Error {
    walnut_common::Error::user(
        walnut_common::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "recovery is not in progress",
    )
    .with_detail("Recovery control functions can only be executed during recovery.")
}

/// See [`Engine::recovery`]. Positions are LSNs (bytes); times µs since 2000-01-01 UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryStatus {
    /// What the walreceiver has made durable (`pg_last_wal_receive_lsn()`).
    pub receive_lsn: u64,
    /// End of the last record replayed (`pg_last_wal_replay_lsn()`).
    pub replay_lsn: u64,
    /// Commit time of the last transaction replayed (`pg_last_xact_replay_timestamp()`).
    pub last_xact_replay_timestamp: Option<i64>,
    /// `pg_is_wal_replay_paused()`.
    pub paused: bool,
}

/// See [`Engine::recovery_control`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryControl {
    /// `pg_wal_replay_pause()`.
    Pause,
    /// `pg_wal_replay_resume()`.
    Resume,
    /// `pg_promote(wait, wait_seconds)`: wait up to this long for the promotion to end
    /// (`None`: do not wait).
    Promote(Option<std::time::Duration>),
}

/// See [`Engine::wal_positions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalPositions {
    /// End of the last reserved record, bytes.
    pub insert: u64,
    /// Everything before it has been written, bytes.
    pub write: u64,
    /// Everything before it is durable, bytes.
    pub flush: u64,
}

/// One transaction. Each statement calls [`Transaction::new_statement`] first, which takes a new
/// read-committed snapshot (under REPEATABLE READ, only the first does). Dropping a transaction
/// without commit rolls it back.
pub trait Transaction: Send {
    /// Sets the isolation level; a change only before the first statement.
    ///
    /// # Errors
    /// 25001 for a change after a statement has started; 0A000 for a level the engine cannot give here.
    fn set_isolation(&mut self, level: Isolation) -> Result<()>;

    /// The isolation level.
    fn isolation(&self) -> Isolation;

    /// Starts a new statement: later reads see every transaction committed before now (under
    /// REPEATABLE READ: before the transaction's first statement). Under REPEATABLE READ an
    /// update or delete of a row that a transaction committed after that snapshot changed fails
    /// with 40001.
    fn new_statement(&mut self);

    /// The statement that [`Transaction::new_statement`] started has ended: its snapshot may
    /// go (read committed keeps none between statements), so it no longer holds back the
    /// removal of old row versions, or a hot standby's replay. The default does nothing.
    fn end_statement(&mut self) {}

    /// After a statement failed with 57014: the error to report instead if the cancel came
    /// from a hot standby's replay (a recovery conflict, 40001), else `None`. The default has
    /// no recovery conflicts.
    fn recovery_conflict(&mut self) -> Option<walnut_common::Error> {
        None
    }

    /// The table named `name` as this transaction sees it, or `None`.
    ///
    /// # Errors
    /// Corruption or I/O errors reading the catalog.
    fn table(&mut self, name: &str) -> Result<Option<Arc<TableDef>>>;

    /// The OID of table `name` as `pg_class` shows it (the progress views' `relid`), or
    /// `None` if there is no such table or the engine has no OIDs.
    ///
    /// # Errors
    /// As [`Transaction::table`].
    fn table_oid(&mut self, name: &str) -> Result<Option<i64>> {
        let _ = name;
        Ok(None)
    }

    /// CREATE SEQUENCE (`def` checked by the caller). The default: 0A000.
    ///
    /// # Errors
    /// 42P07 if a table or sequence of that name exists; 25006 on a hot standby.
    fn create_sequence(&mut self, def: SequenceDef) -> Result<()> {
        let _ = def;
        Err(walnut_common::Error::unsupported(
            "sequences in this engine",
        ))
    }

    /// DROP SEQUENCE. The default: 0A000.
    ///
    /// # Errors
    /// 42P01 if there is no such sequence.
    fn drop_sequence(&mut self, name: &str) -> Result<()> {
        let _ = name;
        Err(walnut_common::Error::unsupported(
            "sequences in this engine",
        ))
    }

    /// Whether a sequence is named `name`, as this transaction sees it. The default asks
    /// [`Transaction::sequence_def`]; an engine may answer without copying the definition.
    ///
    /// # Errors
    /// As [`Transaction::table`].
    fn sequence_exists(&mut self, name: &str) -> Result<bool> {
        Ok(self.sequence_def(name)?.is_some())
    }

    /// The definition of sequence `name`, as this transaction sees it. The default: none.
    ///
    /// # Errors
    /// As [`Transaction::table`].
    fn sequence_def(&mut self, name: &str) -> Result<Option<SequenceDef>> {
        let _ = name;
        Ok(None)
    }

    /// ALTER SEQUENCE: `def` (checked by the caller) replaces sequence `name`'s definition;
    /// with `restart`, the sequence restarts at that value. The default: 0A000.
    ///
    /// # Errors
    /// 42P01 if there is no such sequence; 25006 on a hot standby.
    fn alter_sequence(&mut self, name: &str, def: SequenceDef, restart: Option<i64>) -> Result<()> {
        let _ = (name, def, restart);
        Err(walnut_common::Error::unsupported(
            "sequences in this engine",
        ))
    }

    /// ALTER TABLE ... ALTER COLUMN: `change` (which checks what it changes) applied to table
    /// `name`'s definition, as a new version of it. The default: 0A000.
    ///
    /// # Errors
    /// 42P01 if there is no such table; `change`'s.
    fn alter_table_def(
        &mut self,
        name: &str,
        change: &mut dyn FnMut(&mut TableDef) -> Result<()>,
    ) -> Result<()> {
        let _ = (name, change);
        Err(walnut_common::Error::unsupported(
            "this form of ALTER TABLE in this engine",
        ))
    }

    /// What this statement's `nextval`, `currval`, `setval` and `lastval` reach sequences
    /// through (taken at the start of each statement); `None`: the engine has none.
    fn sequences(&mut self) -> Option<Arc<dyn SequenceAccess>> {
        None
    }

    /// CREATE TABLE. Creates the primary-key index too when `def.primary_key` is set.
    ///
    /// # Errors
    /// 42P07 if a table of that name exists.
    fn create_table(&mut self, def: TableDef) -> Result<()>;

    /// DROP TABLE.
    ///
    /// # Errors
    /// 42P01 if there is no such table.
    fn drop_table(&mut self, name: &str) -> Result<()>;

    /// TRUNCATE: the table (and its index) become empty; takes effect at commit.
    ///
    /// # Errors
    /// 42P01 if there is no such table.
    fn truncate(&mut self, name: &str) -> Result<()>;

    /// ALTER TABLE ... ADD PRIMARY KEY (columns): builds a unique B-tree over the existing rows.
    ///
    /// # Errors
    /// 23505 on duplicate keys, 23502 on NULLs in a key column, 42P16 if the table already has a
    /// primary key.
    fn add_primary_key(&mut self, name: &str, columns: Vec<usize>) -> Result<()>;

    /// Inserts a row (values already cast to the column types, NOT NULL already checked).
    ///
    /// # Errors
    /// 23505 if the primary key exists; waits first if the conflicting row's writer is still in
    /// progress (then 23505 if it committed).
    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<()>;

    /// Inserts a row as part of a bulk load (COPY FROM). The row may stay out of the table
    /// until [`Transaction::finish_bulk`], which the caller must call when the load ends
    /// (any other operation of the transaction, and its commit, end it first too). The
    /// default is [`Transaction::insert`].
    ///
    /// # Errors
    /// As [`Transaction::insert`]; 53100 and I/O errors of writing earlier rows of the load.
    fn insert_bulk(&mut self, table: &str, row: Vec<Value>) -> Result<()> {
        self.insert(table, row)
    }

    /// Ends a bulk load: every row given to [`Transaction::insert_bulk`] is in the table.
    ///
    /// # Errors
    /// 53100 if the disk is full; I/O errors. The transaction must then abort.
    fn finish_bulk(&mut self) -> Result<()> {
        Ok(())
    }

    /// Full scan: calls `visit` with every row visible to this statement, in physical order.
    ///
    /// # Errors
    /// Whatever `visit` returns; corruption and I/O errors.
    fn scan(
        &mut self,
        table: &str,
        visit: &mut dyn FnMut(RowId, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()>;

    /// Primary-key range scan in key order over keys in (`lo`, `hi`). Bounds are key prefixes:
    /// values for the first n key columns (n >= 1), already cast to those columns' types.
    /// `Included(k)` of a prefix includes every key that starts with it.
    ///
    /// # Errors
    /// 0A000-free: the caller only calls this when the table has a primary key. Corruption and
    /// I/O errors; whatever `visit` returns.
    fn index_scan(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        visit: &mut dyn FnMut(RowId, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()>;

    /// Replaces the row version `row` (returned by a scan of this statement) with `values`.
    /// Waits for the row lock if another transaction holds it. The primary key must not change.
    ///
    /// # Errors
    /// 40P01 on deadlock, 57014 when cancelled, 0A000 if the key changes.
    fn update(&mut self, table: &str, row: RowId, values: Vec<Value>) -> Result<WriteOutcome>;

    /// Deletes the row version `row`. Waits like [`Transaction::update`].
    ///
    /// # Errors
    /// 40P01 on deadlock, 57014 when cancelled.
    fn delete(&mut self, table: &str, row: RowId) -> Result<WriteOutcome>;

    /// Commits. Unless `opts.synchronous_commit` is `off`, returns only once the commit record
    /// is durable. Afterwards the transaction's changes are visible to new statements of every
    /// session. Work after the commit that failed is in the outcome's warnings, never an
    /// error: the commit stands.
    ///
    /// # Errors
    /// 53100 if the WAL disk is full (nothing was committed). A failed WAL write or fsync is a
    /// PANIC.
    fn commit(self: Box<Self>, opts: &CommitOpts) -> Result<CommitOutcome>;

    /// Rolls back: the transaction's changes are never visible.
    fn rollback(self: Box<Self>);
}

/// A sequence as a statement found it ([`SequenceAccess::lookup`]).
#[derive(Clone, Debug)]
pub struct SeqRef {
    /// Its `pg_class` OID.
    pub oid: i64,
    /// Changes with each new definition of the sequence (ALTER SEQUENCE): a session's cached
    /// values of an older version are dropped, `currval` kept (PostgreSQL's
    /// `SeqTable.filenumber`, which changes when ALTER SEQUENCE rewrites the sequence, and
    /// `AlterSequence` dropping the altering session's cache).
    pub version: u128,
    /// Its relation file (the engine's).
    pub relfile: u64,
    /// Its definition.
    pub def: Arc<SequenceDef>,
}

/// What a relation name or OID is, for the sequence functions.
#[derive(Clone, Debug)]
pub enum SeqLookup {
    /// A sequence.
    Sequence(SeqRef),
    /// A table (42809 for the sequence functions).
    Table,
    /// No relation (42P01).
    Missing,
}

/// The sequences as a transaction sees them, and the non-transactional operations on their
/// state (crates/storage/DESIGN.md, "Sequences"). Shared by a statement's expressions.
pub trait SequenceAccess: Send + Sync {
    /// What `name` names.
    fn lookup(&self, name: &str) -> SeqLookup;

    /// What OID `oid` names.
    fn lookup_oid(&self, oid: i64) -> SeqLookup;

    /// Takes the next values of `seq` (PostgreSQL's `nextval_internal` past the session
    /// cache): `(first, last, covered_by)`, to hand out `first`, `first + increment`, ...
    /// `last`; `covered_by` is the end of the WAL record that covers them, which this
    /// transaction's commit flushes (noted already for this transaction).
    ///
    /// # Errors
    /// 2200H at a bound without CYCLE; 25006 on a hot standby; 42P01 if it was dropped;
    /// 53100; XX001.
    fn fetch(&self, seq: &SeqRef) -> Result<(i64, i64, u64)>;

    /// Notes that this transaction hands out a value taken ahead by an earlier one, covered by
    /// the record ending at `covered_by` (bytes, an LSN): its commit flushes to it.
    fn note_wal(&self, covered_by: u64);

    /// `setval(seq, value, is_called)`.
    ///
    /// # Errors
    /// 22003 out of bounds; as [`SequenceAccess::fetch`].
    fn set(&self, seq: &SeqRef, value: i64, is_called: bool) -> Result<()>;

    /// The name of the sequence that column `column` of table `table` owns
    /// (`pg_get_serial_sequence`); `None` if it owns none. The default: none.
    ///
    /// # Errors
    /// 42P01 no such table; 42703 no such column.
    fn owned_sequence(&self, table: &str, column: &str) -> Result<Option<String>> {
        let _ = (table, column);
        Ok(None)
    }
}

/// What of a relation [`Engine::relation_size`] measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelationSize {
    /// `pg_relation_size(rel)`, `pg_relation_size(rel, 'main')`: the relation's own file.
    Main,
    /// `pg_relation_size(rel, 'fsm')`: its free-space map file.
    Fsm,
    /// `pg_relation_size(rel, 'vm' | 'init')`: forks walnut does not have (0).
    NoFork,
    /// `pg_table_size(rel)`: the relation's file and its free-space map.
    Table,
    /// `pg_indexes_size(rel)`: the table's indexes.
    Indexes,
    /// `pg_total_relation_size(rel)`: the table, its free-space map and its indexes.
    Total,
}
