//! Transactions: the operations the SQL layer runs, with read-committed semantics.
//!
//! Write protocol for a row change (numbered as in DESIGN.md):
//! 1. assign an xid on first write;
//! 2. pin and exclusively latch the heap page(s); check the row's `xmax` (the row lock);
//! 3. change the page(s), insert the WAL record, set the page LSN, mark dirty, unlatch;
//! 4. maintain the primary-key index (insert, or point the entry at the new version);
//! 5. at commit: commit record, flush (group commit), then publish visibility and wake waiters.

use crate::btree::{self, Existing, InsertOutcome, SortedEntries};
use crate::catalog::{self, SeqInfo, TableInfo};
use crate::heap::{self, WriteCheck};
use crate::recovery::encode_rel_list;
use crate::smgr::Relation;
use crate::xact::{Snapshot, SnapshotSlot, XidStatus};
use crate::{Storage, RM_XACT, XACT_ABORT, XACT_COMMIT};
use std::collections::HashMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use walnut_common::value::{decode_row, encode_key, encode_row};
use walnut_common::{
    BlockNumber, Error, Lsn, RelFileId, Result, SequenceDef, SqlState, TableDef, Tid, Value, Xid,
};
use walnut_wal::{CommitOpts, CommitOutcome, Record};

/// WAL one row write may need at most, bytes: a heap record and a B-tree record, each with a
/// full-page image, prunes of the pages it looks at for room and a relink of its new version
/// (each with an image; `heap::prune` checks again for itself), and a split of a few levels,
/// all images (checked with
/// `Wal::check_space` before any page changes, so a full disk fails the statement cleanly).
const ROW_WAL_BOUND: u64 = 24 * walnut_common::BLCKSZ as u64;
/// WAL a commit record may need, bytes.
const COMMIT_WAL_BOUND: u64 = 4096;

/// What an update or delete did (see `walnut_sql::storage::WriteOutcome`).
#[derive(Clone, Debug, PartialEq)]
pub enum RowWrite {
    /// Changed.
    Done,
    /// A committed transaction changed the row first; here is its newest version.
    Changed(Tid, Vec<Value>),
    /// A committed transaction deleted it.
    Gone,
}

/// One transaction.
pub struct Txn {
    st: Arc<Storage>,
    xid: Xid,
    snap: Snapshot,
    /// Where `snap` is registered (the pruning horizon; a standby's recovery conflicts).
    slot: Arc<SnapshotSlot>,
    cancel: Arc<AtomicBool>,
    overlay: HashMap<String, Option<Arc<TableInfo>>>,
    /// This transaction's CREATE and DROP SEQUENCE, as `overlay` for tables.
    seq_overlay: HashMap<String, Option<Arc<SeqInfo>>>,
    /// What [`Txn::sequences`] last handed out, while the overlays are unchanged.
    seq_handle: Option<Arc<Sequences>>,
    /// End of the last sequence record this transaction's `nextval`/`setval` logged (0: none):
    /// its commit flushes to it even without an xid (PostgreSQL assigns one instead,
    /// `GetTopTransactionId` in `nextval_internal`).
    seq_wal_end: Arc<AtomicU64>,
    created: Vec<RelFileId>,
    drop_at_commit: Vec<RelFileId>,
    /// A bulk load in progress (COPY): rows not yet in the relation (see `heap::BulkInsert`).
    bulk: Option<heap::BulkInsert>,
    /// Row bytes being encoded (reused by bulk loads).
    row_scratch: Vec<u8>,
    /// Row changes by table id, added to the table's counters at the end (`crate::tabstat`).
    pending_stats: HashMap<u64, crate::tabstat::PendingCounts>,
    /// REPEATABLE READ: the first statement's snapshot serves the whole transaction, and a
    /// write that meets a change committed since it fails with 40001 ([`Txn::set_isolation`]).
    repeatable_read: bool,
    /// A statement has started ([`Txn::new_statement`]): the isolation level is fixed.
    started: bool,
    finished: bool,
}

/// A transaction's isolation level (PostgreSQL's `XactIsoLevel`; READ UNCOMMITTED runs as
/// READ COMMITTED, SERIALIZABLE does not exist here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// A new snapshot per statement; a write that meets a newer committed version follows it.
    ReadCommitted,
    /// One snapshot per transaction; a write that meets a newer committed version fails.
    RepeatableRead,
}

/// What a transaction's statements reach sequences through ([`Txn::sequences`]): the
/// sequences and tables as the transaction saw them when it was taken, and where a logged
/// `nextval`/`setval` notes its record for the commit.
pub struct Sequences {
    st: Arc<Storage>,
    overlay: HashMap<String, Option<Arc<SeqInfo>>>,
    tables: HashMap<String, Option<Arc<TableInfo>>>,
    wal_end: Arc<AtomicU64>,
}

/// What a relation name is, for the sequence functions.
#[derive(Clone, Debug)]
pub enum RelKind {
    /// A sequence.
    Sequence(Arc<SeqInfo>),
    /// A table.
    Table,
    /// Nothing of that name.
    Missing,
}

impl Sequences {
    /// What `name` names.
    pub fn lookup(&self, name: &str) -> RelKind {
        let seq = match self.overlay.get(name) {
            Some(s) => s.clone(),
            None => self.st.catalog.get_sequence(name),
        };
        if let Some(s) = seq {
            return RelKind::Sequence(s);
        }
        let table = match self.tables.get(name) {
            Some(t) => t.is_some(),
            None => self.st.catalog.get(name).is_some(),
        };
        if table {
            RelKind::Table
        } else {
            RelKind::Missing
        }
    }

    /// The sequence whose OID is `oid`, if there is one (a table's OID gives `Table`).
    pub fn lookup_oid(&self, oid: u64) -> RelKind {
        let mine = self.overlay.values().flatten().find(|s| s.oid == oid);
        if let Some(s) = mine {
            return RelKind::Sequence(s.clone());
        }
        if let Some(s) = self
            .st
            .catalog
            .all_sequences()
            .into_iter()
            .find(|s| s.oid == oid && !self.overlay.contains_key(&s.def.name))
        {
            return RelKind::Sequence(s);
        }
        let table = self.tables.values().flatten().any(|t| t.table_id == oid)
            || self.st.catalog.all().iter().any(|t| t.table_id == oid);
        if table {
            RelKind::Table
        } else {
            RelKind::Missing
        }
    }

    /// `pg_get_serial_sequence(table, column)`: the sequence that column `column` of table
    /// `table` owns (a serial or identity column's, or one made `OWNED BY` it), as this
    /// transaction sees them; `None` if it owns none.
    ///
    /// # Errors
    /// 42P01 no such table; 42703 no such column.
    pub fn owned_sequence(&self, table: &str, column: &str) -> Result<Option<String>> {
        let t = match self.tables.get(table) {
            Some(t) => t.clone(),
            None => self.st.catalog.get(table),
        }
        .ok_or_else(|| no_table(table))?;
        if t.def.column_index(column).is_none() {
            return Err(Error::user(
                SqlState::UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation \"{table}\" does not exist"),
            ));
        }
        let owner = Some((table.to_string(), column.to_string()));
        let mine = self
            .overlay
            .values()
            .flatten()
            .find(|s| s.def.owned_by == owner);
        if let Some(s) = mine {
            return Ok(Some(s.def.name.clone()));
        }
        Ok(self
            .st
            .catalog
            .all_sequences()
            .into_iter()
            .find(|s| s.def.owned_by == owner && !self.overlay.contains_key(&s.def.name))
            .map(|s| s.def.name.clone()))
    }

    /// Notes that this transaction handed out values that the record ending at `end` covers
    /// (values a session took ahead and hands out later, `CACHE`): its commit flushes to it.
    pub fn note(&self, end: Lsn) {
        self.wal_end.fetch_max(end.0, Ordering::AcqRel);
    }

    /// `nextval` without cached values: see [`crate::seq::fetch`]. The record covering the
    /// values is noted for the commit.
    ///
    /// # Errors
    /// As [`crate::seq::fetch`]; 42P01 if the sequence was dropped (its file is gone).
    pub fn fetch(&self, s: &SeqInfo) -> Result<crate::seq::Fetched> {
        let f = match crate::seq::fetch(&self.st, s.relfile, &s.def) {
            Ok(f) => f,
            Err(e) => match self.replaced(s) {
                Some(c) => {
                    crate::seq::fetch(&self.st, c.relfile, &c.def).map_err(|e| self.gone(e, &c))?
                }
                None => return Err(self.gone(e, s)),
            },
        };
        self.note(f.covered_by);
        Ok(f)
    }

    /// The sequence `s` as the catalog has it now, if a committed ALTER SEQUENCE ... RESTART
    /// replaced its relation file (and removed the old one) since the caller looked it up:
    /// the caller goes on with the new file, as PostgreSQL's `nextval` does after waiting for
    /// the ALTER's lock.
    fn replaced(&self, s: &SeqInfo) -> Option<Arc<SeqInfo>> {
        if self.st.smgr.exists(s.relfile) {
            return None;
        }
        self.st
            .catalog
            .all_sequences()
            .into_iter()
            .find(|c| c.oid == s.oid && c.relfile != s.relfile)
    }

    /// `setval`: see [`crate::seq::set`]; the record is noted for the commit.
    ///
    /// # Errors
    /// As [`crate::seq::set`]; 42P01 if the sequence was dropped.
    pub fn set(&self, s: &SeqInfo, value: i64, is_called: bool) -> Result<()> {
        let end = match crate::seq::set(&self.st, s.relfile, &s.def, value, is_called) {
            Ok(end) => end,
            Err(e) => match self.replaced(s) {
                Some(c) => crate::seq::set(&self.st, c.relfile, &c.def, value, is_called)
                    .map_err(|e| self.gone(e, &c))?,
                None => return Err(self.gone(e, s)),
            },
        };
        self.note(end);
        Ok(())
    }

    /// The sequence's page state.
    ///
    /// # Errors
    /// XX001; 42P01 if the sequence was dropped.
    pub fn read(&self, s: &SeqInfo) -> Result<crate::seq::SeqState> {
        crate::seq::read(&self.st, s.relfile).map_err(|e| self.gone(e, s))
    }

    /// A sequence dropped (and its file removed) since the caller looked it up: 42P01, as
    /// the lookup would now say.
    fn gone(&self, e: Error, s: &SeqInfo) -> Error {
        if self.st.smgr.exists(s.relfile) {
            e
        } else {
            no_table(&s.def.name)
        }
    }
}

/// The relation names that the string literals of SQL text `sql` (a column default, such as
/// `nextval('public."Foo_seq"'::regclass)`) spell, read as `regclass` reads a name: an
/// optional `public.`, a part in double quotes as written, any other part lower-cased.
/// Approximate (it reads every literal, not only `nextval`'s argument): a literal that is not
/// a name just yields a name nothing has.
fn names_in_literals(sql: &str) -> impl Iterator<Item = String> + '_ {
    sql.split('\'').skip(1).step_by(2).filter_map(|lit| {
        let mut parts = Vec::new();
        let mut rest = lit;
        while !rest.is_empty() {
            let (part, tail) = match rest.strip_prefix('"') {
                Some(q) => {
                    let end = q.find('"')?;
                    (q[..end].to_string(), &q[end + 1..])
                }
                None => {
                    let end = rest.find('.').unwrap_or(rest.len());
                    (rest[..end].to_ascii_lowercase(), &rest[end..])
                }
            };
            parts.push(part);
            rest = tail.strip_prefix('.').unwrap_or(tail);
        }
        match parts.as_slice() {
            [n] => Some(n.clone()),
            [s, n] if s == "public" => Some(n.clone()),
            _ => None,
        }
    })
}

/// 40001, for a REPEATABLE READ write that meets a version committed after its snapshot
/// (PostgreSQL's `ExecUpdate`/`ExecDelete` under `IsolationUsesXactSnapshot`).
fn serialization_failure(what: &str) -> Error {
    Error::conflict(
        SqlState::SERIALIZATION_FAILURE,
        format!("could not serialize access due to concurrent {what}"),
    )
}

fn no_table(name: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_TABLE,
        format!("relation \"{name}\" does not exist"),
    )
}

impl Txn {
    /// Begins a transaction (no xid until the first write).
    pub fn begin(st: Arc<Storage>, cancel: Arc<AtomicBool>) -> Txn {
        let slot = st.xact.register(cancel.clone());
        let snap = st.xact.snapshot_in(&slot, Xid::INVALID);
        Txn {
            st,
            xid: Xid::INVALID,
            snap,
            slot,
            cancel,
            overlay: HashMap::new(),
            seq_overlay: HashMap::new(),
            seq_handle: None,
            seq_wal_end: Arc::new(AtomicU64::new(0)),
            created: Vec::new(),
            drop_at_commit: Vec::new(),
            bulk: None,
            row_scratch: Vec::new(),
            pending_stats: HashMap::new(),
            repeatable_read: false,
            started: false,
            finished: false,
        }
    }

    /// Sets the isolation level. A change must come before the first statement, as
    /// PostgreSQL's `check_transaction_isolation` requires.
    ///
    /// # Errors
    /// 25001 after a statement has started; 0A000 for REPEATABLE READ on a hot standby, where a
    /// snapshot held between statements would hold back replay with nothing to cancel it.
    pub fn set_isolation(&mut self, level: Isolation) -> Result<()> {
        if level == self.isolation() {
            return Ok(());
        }
        if self.started {
            return Err(Error::user(
                SqlState::ACTIVE_SQL_TRANSACTION,
                "SET TRANSACTION ISOLATION LEVEL must be called before any query",
            ));
        }
        if level == Isolation::RepeatableRead && self.st.in_recovery() {
            return Err(Error::unsupported(
                "REPEATABLE READ on a hot standby: run the transaction at READ COMMITTED",
            ));
        }
        self.repeatable_read = level == Isolation::RepeatableRead;
        Ok(())
    }

    /// The isolation level.
    pub fn isolation(&self) -> Isolation {
        if self.repeatable_read {
            Isolation::RepeatableRead
        } else {
            Isolation::ReadCommitted
        }
    }

    /// New statement: a fresh read-committed snapshot, registered (so pruning keeps what it
    /// sees) until [`Txn::end_statement`]. Under REPEATABLE READ only the first statement takes
    /// one, and it stays registered until the transaction ends.
    pub fn new_statement(&mut self) {
        if self.repeatable_read && std::mem::replace(&mut self.started, true) {
            return;
        }
        self.started = true;
        if self.slot.take_conflict() {
            // A recovery conflict cancelled the last statement after it had ended.
            self.cancel.store(false, Ordering::Release);
        }
        self.snap = self.st.xact.snapshot_in(&self.slot, self.xid);
    }

    /// If a hot standby's replay cancelled this transaction's statement for a recovery conflict
    /// (and something other than this transaction's own checks saw the cancel first, and
    /// reported it as 57014): the error to report instead, 40001. Clears the mark.
    pub fn take_recovery_conflict(&mut self) -> Option<Error> {
        self.slot.take_conflict().then(recovery_conflict)
    }

    /// The statement ended: its snapshot no longer holds back pruning or a standby's replay
    /// (read committed keeps no snapshot between statements). The next statement calls
    /// [`Txn::new_statement`] first.
    pub fn end_statement(&mut self) {
        if !self.repeatable_read {
            self.slot.release();
        }
    }

    fn xid(&mut self) -> Result<Xid> {
        if !self.xid.is_valid() {
            if self.st.in_recovery() {
                // A hot standby: every write needs an xid, and none can be assigned.
                return Err(Error::user(
                    SqlState::READ_ONLY_SQL_TRANSACTION,
                    "cannot execute this statement in a read-only transaction",
                )
                .with_detail(
                    "The server is a standby in recovery: it accepts read-only queries.",
                ));
            }
            self.xid = self.st.xact.try_assign_xid()?;
            self.snap.xid = self.xid;
        }
        Ok(self.xid)
    }

    fn check_cancel(&self) -> Result<()> {
        if self.cancel.swap(false, Ordering::AcqRel) {
            if self.slot.take_conflict() {
                // Replay waits for this: the snapshot is given up before the error returns.
                self.slot.release();
                return Err(recovery_conflict());
            }
            return Err(Error::cancelled());
        }
        Ok(())
    }

    /// The table `name` as this transaction sees it.
    pub fn table(&self, name: &str) -> Option<Arc<TableInfo>> {
        match self.overlay.get(name) {
            Some(t) => t.clone(),
            None => self.st.catalog.get(name),
        }
    }

    fn table_or_err(&self, name: &str) -> Result<Arc<TableInfo>> {
        self.table(name).ok_or_else(|| no_table(name))
    }

    fn new_index(&mut self, xid: Xid, entries: &dyn btree::SortedEntries) -> Result<RelFileId> {
        let idx = self.st.create_relation()?;
        self.created.push(idx);
        let rel = self.st.smgr.open(idx)?;
        btree::build(&self.st, &rel, xid, entries)?;
        Ok(idx)
    }

    fn write_catalog(&mut self, xid: Xid, old: Option<Tid>, info: &mut TableInfo) -> Result<()> {
        info.catalog_tid =
            self.write_catalog_row(xid, old, &catalog::encode(info), &info.def.name)?;
        Ok(())
    }

    /// Inserts catalog row `bytes` (of relation `name`), or writes it as a new version of the
    /// row at `old`, waiting for a concurrent change of that row; returns its TID.
    ///
    /// # Errors
    /// 40001 if a committed transaction changed the row meanwhile; I/O errors.
    fn write_catalog_row(
        &mut self,
        xid: Xid,
        old: Option<Tid>,
        bytes: &[u8],
        name: &str,
    ) -> Result<Tid> {
        let cat = self.st.smgr.open(RelFileId::CATALOG)?;
        Ok(match old {
            None => heap::insert(&self.st, &cat, xid, None, &bytes, 100)?,
            Some(tid) => loop {
                match heap::update(&self.st, &cat, tid, xid, bytes, None)? {
                    WriteCheck::Done(t) => break t,
                    WriteCheck::WaitFor(x) => self.st.xact.wait_for(xid, x, &self.cancel)?,
                    _ => {
                        return Err(Error::conflict(
                            SqlState::SERIALIZATION_FAILURE,
                            format!("relation \"{name}\" was changed concurrently"),
                        ))
                    }
                }
            },
        })
    }

    /// ALTER TABLE ... ALTER COLUMN (SET DEFAULT, DROP DEFAULT, ADD GENERATED ... AS
    /// IDENTITY): a new catalog row version with `change` applied to table `name`'s
    /// definition. `change` checks what it changes and returns 42xxx/55000 errors as
    /// PostgreSQL's `ATExec*` would; the table's files and rows are untouched.
    ///
    /// # Errors
    /// 42P01 if missing; `change`'s; 40001 if a committed transaction changed the table
    /// meanwhile; I/O errors.
    pub fn alter_table_def(
        &mut self,
        name: &str,
        change: &mut dyn FnMut(&mut TableDef) -> Result<()>,
    ) -> Result<()> {
        self.finish_bulk()?;
        let info = self.table_or_err(name)?;
        let mut def = (*info.def).clone();
        change(&mut def)?;
        let xid = self.xid()?;
        let mut new = TableInfo {
            def: Arc::new(def),
            ..(*info).clone()
        };
        self.write_catalog(xid, Some(info.catalog_tid), &mut new)?;
        self.seq_handle = None;
        self.overlay.insert(name.to_string(), Some(Arc::new(new)));
        Ok(())
    }

    /// ALTER SEQUENCE: sequence `name` gets definition `def` (options and `OWNED BY`, checked
    /// by the caller as PostgreSQL's `init_params`) in a new catalog row version. With
    /// `restart`, it also gets a new relation file whose page starts at that value, not yet
    /// returned (PostgreSQL's `ResetSequence`, which gives the sequence a new relfilenumber):
    /// other transactions go on with the old file until the commit, which removes it, and a
    /// rollback removes the new one, so RESTART is undone with its transaction. The restart
    /// value, or else the current value, must lie within the new bounds (PostgreSQL's
    /// crosscheck in `init_params`). The page is not changed otherwise: a `log_cnt` counted
    /// under the old options counts nothing under the new ones (`seq::fetch`).
    ///
    /// # Errors
    /// 42P01 if missing; 22023 if the restart or current value is outside the new bounds;
    /// 25006 on a standby; 40001 if a committed transaction changed the sequence meanwhile;
    /// I/O errors.
    pub fn alter_sequence(
        &mut self,
        name: &str,
        def: SequenceDef,
        restart: Option<i64>,
    ) -> Result<()> {
        self.finish_bulk()?;
        let info = self.sequence(name).ok_or_else(|| no_table(name))?;
        let value = match restart {
            Some(v) => v,
            None => crate::seq::read(&self.st, info.relfile)?.last_value,
        };
        let bad = |m: String| Err(Error::user(SqlState::INVALID_PARAMETER_VALUE, m));
        if value < def.min {
            return bad(format!(
                "RESTART value ({value}) cannot be less than MINVALUE ({})",
                def.min
            ));
        }
        if value > def.max {
            return bad(format!(
                "RESTART value ({value}) cannot be greater than MAXVALUE ({})",
                def.max
            ));
        }
        let xid = self.xid()?;
        let mut new = SeqInfo {
            def: Arc::new(def),
            ..(*info).clone()
        };
        if let Some(v) = restart {
            let relfile = self.st.create_relation()?;
            self.created.push(relfile);
            let first = SequenceDef {
                start: v,
                ..(*new.def).clone()
            };
            crate::seq::create(&self.st, relfile, xid, &first)?;
            self.drop_at_commit.push(info.relfile);
            new.relfile = relfile;
        }
        new.catalog_tid = self.write_catalog_row(
            xid,
            Some(info.catalog_tid),
            &catalog::encode_sequence(&new),
            name,
        )?;
        self.seq_overlay
            .insert(name.to_string(), Some(Arc::new(new)));
        self.seq_handle = None;
        Ok(())
    }

    /// The sequence `name` as this transaction sees it.
    pub fn sequence(&self, name: &str) -> Option<Arc<SeqInfo>> {
        match self.seq_overlay.get(name) {
            Some(s) => s.clone(),
            None => self.st.catalog.get_sequence(name),
        }
    }

    /// 42P07 if a table or a sequence is named `name`.
    fn check_name_free(&self, name: &str) -> Result<()> {
        if self.table(name).is_some() || self.sequence(name).is_some() {
            return Err(Error::user(
                SqlState::DUPLICATE_TABLE,
                format!("relation \"{name}\" already exists"),
            ));
        }
        Ok(())
    }

    /// CREATE SEQUENCE (`def` already checked, as PostgreSQL's `init_params`): its file, its
    /// page at `def.start` (logged), its catalog row.
    ///
    /// # Errors
    /// 42P07 if the name is taken; 25006 on a standby; 53100; I/O errors.
    pub fn create_sequence(&mut self, def: SequenceDef) -> Result<()> {
        self.finish_bulk()?;
        self.check_name_free(&def.name)?;
        let xid = self.xid()?;
        let relfile = self.st.create_relation()?;
        self.created.push(relfile);
        crate::seq::create(&self.st, relfile, xid, &def)?;
        let mut info = SeqInfo {
            def: Arc::new(def),
            oid: relfile.0 as u64,
            relfile,
            catalog_tid: Tid::INVALID,
        };
        let cat = self.st.smgr.open(RelFileId::CATALOG)?;
        info.catalog_tid = heap::insert(
            &self.st,
            &cat,
            xid,
            None,
            &catalog::encode_sequence(&info),
            100,
        )?;
        self.seq_overlay
            .insert(info.def.name.clone(), Some(Arc::new(info)));
        self.seq_handle = None;
        Ok(())
    }

    /// DROP SEQUENCE: its catalog row now, its file at commit.
    ///
    /// # Errors
    /// 42P01 if missing; 2BP01 if a column of a table that exists owns it (its default uses
    /// it: PostgreSQL's dependency check, without CASCADE).
    pub fn drop_sequence(&mut self, name: &str) -> Result<()> {
        self.finish_bulk()?;
        let info = self.sequence(name).ok_or_else(|| no_table(name))?;
        if let Some((t, c)) = &info.def.owned_by {
            // The owning column's default uses the sequence (a serial or identity column, or
            // `SET DEFAULT nextval(...)`): PostgreSQL's dependency of the default. An `OWNED
            // BY` alone does not keep the sequence.
            let uses = |d: &str| names_in_literals(d).any(|n| n == *name);
            let used = self.table(t).is_some_and(|info| {
                info.def
                    .columns
                    .iter()
                    .any(|col| &col.name == c && col.default.as_deref().is_some_and(uses))
            });
            if used {
                return Err(Error::user(
                    SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("cannot drop sequence {name} because other objects depend on it"),
                )
                .with_detail(format!(
                    "default value for column {c} of table {t} depends on sequence {name}"
                )));
            }
        }
        let xid = self.xid()?;
        self.delete_catalog_row(xid, info.catalog_tid, name)?;
        self.drop_at_commit.push(info.relfile);
        self.seq_overlay.insert(name.to_string(), None);
        self.seq_handle = None;
        Ok(())
    }

    /// Deletes catalog row `tid` (of relation `name`), waiting for a concurrent change of it.
    fn delete_catalog_row(&mut self, xid: Xid, tid: Tid, name: &str) -> Result<()> {
        let cat = self.st.smgr.open(RelFileId::CATALOG)?;
        loop {
            match heap::delete(&self.st, &cat, tid, xid)? {
                WriteCheck::Done(_) => return Ok(()),
                WriteCheck::WaitFor(x) => self.st.xact.wait_for(xid, x, &self.cancel)?,
                _ => return Err(no_table(name)),
            }
        }
    }

    /// What `nextval`, `setval` and name lookups of this transaction's statements use: the
    /// sequences (and table names) as this transaction sees them now. The same handle while
    /// this transaction's DDL does not change them.
    pub fn sequences(&mut self) -> Arc<Sequences> {
        if let Some(h) = &self.seq_handle {
            return h.clone();
        }
        let h = Arc::new(Sequences {
            st: self.st.clone(),
            overlay: self.seq_overlay.clone(),
            tables: self.overlay.clone(),
            wal_end: self.seq_wal_end.clone(),
        });
        self.seq_handle = Some(h.clone());
        h
    }

    /// CREATE TABLE (and its primary-key index).
    ///
    /// # Errors
    /// 42P07 if the name is taken; I/O errors.
    pub fn create_table(&mut self, def: TableDef) -> Result<()> {
        self.finish_bulk()?;
        self.check_name_free(&def.name)?;
        if def
            .columns
            .iter()
            .any(|c| c.name.contains('\n') || c.name.contains('\t'))
        {
            return Err(Error::unsupported(
                "column names containing tabs or newlines",
            ));
        }
        let xid = self.xid()?;
        let relfile = self.st.create_relation()?;
        self.created.push(relfile);
        self.st.note_new_heap(relfile);
        let index = if def.primary_key.is_some() {
            Some(self.new_index(xid, &Vec::new())?)
        } else {
            None
        };
        let mut info = TableInfo {
            def: Arc::new(def),
            table_id: relfile.0 as u64,
            relfile,
            index,
            catalog_tid: Tid::INVALID,
        };
        self.write_catalog(xid, None, &mut info)?;
        self.seq_handle = None;
        self.overlay
            .insert(info.def.name.clone(), Some(Arc::new(info)));
        Ok(())
    }

    /// DROP TABLE, and the sequences its columns own (`serial`).
    ///
    /// # Errors
    /// 42P01 if missing.
    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        self.finish_bulk()?;
        let info = self.table_or_err(name)?;
        let xid = self.xid()?;
        self.delete_catalog_row(xid, info.catalog_tid, name)?;
        self.drop_at_commit.push(info.relfile);
        self.drop_at_commit.extend(info.index);
        self.seq_handle = None;
        self.overlay.insert(name.to_string(), None);
        let mut owned: Vec<String> = self
            .st
            .catalog
            .all_sequences()
            .into_iter()
            .map(|s| s.def.name.clone())
            .chain(self.seq_overlay.keys().cloned())
            .collect();
        owned.sort();
        owned.dedup();
        for s in owned {
            if self
                .sequence(&s)
                .is_some_and(|s| s.def.owned_by.as_ref().is_some_and(|(t, _)| t == name))
            {
                self.drop_sequence(&s)?;
            }
        }
        Ok(())
    }

    /// TRUNCATE: new, empty relation files; the old ones are removed at commit.
    ///
    /// # Errors
    /// 42P01 if missing.
    pub fn truncate(&mut self, name: &str) -> Result<()> {
        self.finish_bulk()?;
        let info = self.table_or_err(name)?;
        let xid = self.xid()?;
        let relfile = self.st.create_relation()?;
        self.created.push(relfile);
        self.st.note_new_heap(relfile);
        let index = if info.index.is_some() {
            Some(self.new_index(xid, &Vec::new())?)
        } else {
            None
        };
        let mut new = TableInfo {
            relfile,
            index,
            ..(*info).clone()
        };
        self.write_catalog(xid, Some(info.catalog_tid), &mut new)?;
        self.drop_at_commit.push(info.relfile);
        self.drop_at_commit.extend(info.index);
        self.seq_handle = None;
        self.overlay.insert(name.to_string(), Some(Arc::new(new)));
        Ok(())
    }

    /// ALTER TABLE ... ADD PRIMARY KEY: sorts the visible rows' keys and builds the index.
    ///
    /// # Errors
    /// 42P16 if a primary key exists, 23502 for NULL keys, 23505 for duplicates.
    pub fn add_primary_key(&mut self, name: &str, cols: Vec<usize>) -> Result<()> {
        self.finish_bulk()?;
        let info = self.table_or_err(name)?;
        if info.def.primary_key.is_some() {
            return Err(Error::user(
                SqlState::INVALID_TABLE_DEFINITION,
                format!("multiple primary keys for table \"{name}\" are not allowed"),
            ));
        }
        if self.repeatable_read {
            // The build reads the rows its snapshot sees: under repeatable read that is the
            // transaction's first one, which misses rows committed since, and no table lock
            // keeps them out.
            return Err(Error::unsupported(
                "ALTER TABLE ... ADD PRIMARY KEY in a REPEATABLE READ transaction",
            ));
        }
        let xid = self.xid()?;
        let def = info.def.clone();
        let keys = self.sorted_keys(&info, &cols)?;
        if let Some(i) = (1..keys.count()).find(|&i| keys.key(i - 1) == keys.key(i)) {
            let rel = self.st.smgr.open(info.relfile)?;
            let row = decode_row(
                &def.types(),
                &heap::fetch(&self.st, &rel, keys.tid(i))?.data,
            )?;
            let values: Vec<Value> = cols.iter().map(|&c| row[c].clone()).collect();
            return Err(Error::user(
                SqlState::UNIQUE_VIOLATION,
                format!("could not create unique index \"{}\"", info.index_name()),
            )
            .with_detail(format!("{} is duplicated.", key_text(&def, &cols, &values))));
        }
        let index = self.new_index(xid, &keys)?;
        let mut newdef = (*def).clone();
        for &c in &cols {
            newdef.columns[c].not_null = true;
        }
        newdef.primary_key = Some(cols);
        let mut new = TableInfo {
            def: Arc::new(newdef),
            index: Some(index),
            ..(*info).clone()
        };
        self.write_catalog(xid, Some(info.catalog_tid), &mut new)?;
        self.seq_handle = None;
        self.overlay.insert(name.to_string(), Some(Arc::new(new)));
        Ok(())
    }

    /// The encoded keys of columns `cols` of every row visible to this statement, with their
    /// TIDs, sorted (PostgreSQL's `tuplesort` for `nbtsort.c`). Only the columns up to the last
    /// key column are decoded; the keys share one buffer.
    ///
    /// A large table is scanned in parallel (PostgreSQL's parallel index build): the session's
    /// thread and [`scan_workers`] helper threads each scan one contiguous part of the blocks
    /// into their own arena; the arenas are joined in block order (so a table loaded in key
    /// order stays sorted and is not sorted again) and then sorted.
    ///
    /// # Errors
    /// 23502 if a key column is NULL; I/O, corruption and cancellation errors (a helper's
    /// included).
    fn sorted_keys(&self, info: &TableInfo, cols: &[usize]) -> Result<KeyArena> {
        let rel = self.st.smgr.open(info.relfile)?;
        let n = rel.nblocks.load(Ordering::Acquire);
        // pg_stat_progress_create_index: blocks scanned, then the sort.
        let progress = crate::progress::index_build_progress();
        let done = std::sync::atomic::AtomicU64::new(0);
        let scan = Scan {
            st: &self.st,
            rel: &rel,
            snap: &self.snap,
            cancel: &self.cancel,
            types: info.def.types(),
            cols,
            done: &done,
        };
        let parts = scan_workers(n, self.st.max_parallel_maintenance_workers()) + 1;
        let bounds: Vec<u32> = (0..=parts)
            .map(|i| (n as u64 * i as u64 / parts as u64) as u32)
            .collect();
        let results: Vec<Result<(KeyArena, Option<usize>)>> = std::thread::scope(|sc| {
            let helpers: Vec<_> = (1..parts)
                .map(|i| {
                    let (scan, lo, hi) = (&scan, bounds[i], bounds[i + 1]);
                    std::thread::Builder::new()
                        .name("index build scan".into())
                        .spawn_scoped(sc, move || scan.part(lo, hi, None))
                })
                .collect();
            // The session scans the first part and reports the progress of all.
            let mut all = vec![scan.part(bounds[0], bounds[1], progress.as_deref())];
            for h in helpers {
                all.push(match h {
                    Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                    Err(e) => Err(Error::io("could not start an index build scan thread", e)),
                });
            }
            all
        });
        if results
            .iter()
            .any(|r| matches!(r, Err(e) if e.kind == walnut_common::ErrorKind::Cancelled))
        {
            self.cancel.store(false, Ordering::Release); // the cancel is consumed
        }
        let mut keys = KeyArena::default();
        for r in results {
            let (part, null_col) = r?;
            if let Some(c) = null_col {
                return Err(Error::user(
                    SqlState::NOT_NULL_VIOLATION,
                    format!(
                        "column \"{}\" of relation \"{}\" contains null values",
                        info.def.columns[c].name, info.def.name
                    ),
                ));
            }
            keys.append(part);
        }
        if let Some(p) = &progress {
            p.blocks_done.store(n as u64, Ordering::Release);
            p.set_phase(crate::progress::PHASE_SORTING);
        }
        keys.sort();
        Ok(keys)
    }

    /// This transaction's pending row counts for table `info`.
    fn count(&mut self, info: &TableInfo) -> &mut crate::tabstat::PendingCounts {
        self.pending_stats.entry(info.table_id).or_default()
    }

    /// Adds the pending row counts to the tables' counters at the transaction's end.
    fn flush_stats(&mut self, committed: bool) {
        for (table, p) in self.pending_stats.drain() {
            self.st
                .table_stats
                .with(table, |c| c.end_of_xact(&p, committed));
        }
    }

    fn key_of(info: &TableInfo, row: &[Value]) -> Option<Vec<u8>> {
        let pk = info.def.primary_key.as_ref()?;
        let key: Vec<Value> = pk.iter().map(|&c| row[c].clone()).collect();
        Some(encode_key(&key))
    }

    /// Inserts a row.
    ///
    /// # Errors
    /// 23505 on a duplicate primary key; 53100 if the WAL cannot get space (nothing changed).
    pub fn insert(&mut self, info: &TableInfo, row: &[Value]) -> Result<()> {
        self.finish_bulk()?;
        let xid = self.xid()?;
        self.st.wal().check_space(ROW_WAL_BOUND)?;
        let rel = self.st.smgr.open(info.relfile)?;
        let mut data = Vec::with_capacity(64);
        encode_row(info.def.column_types(), row, &mut data);
        let Some(index) = info.index else {
            heap::insert(&self.st, &rel, xid, None, &data, info.def.fillfactor)?;
            self.count(info).inserted += 1;
            return Ok(());
        };
        let key = Self::key_of(info, row).expect("a table with an index has a primary key");
        let irel = self.st.smgr.open(index)?;
        let prev = match btree::get(&self.st, &irel, &key)? {
            // The new version links to the newest version the entry reaches (past same-page
            // updates). A chain that pruning ended with a dead line pointer holds nothing
            // anyone sees: the new version starts a chain of its own. (So does one whose slot
            // VACUUM freed after the lookup, an error here; the check under the leaf's latch
            // below decides the link for good, and reports a damaged page.)
            Some(root) => match heap::chain_head(&self.st, &rel, root) {
                Ok(Some((head, _))) => head,
                _ => Tid::INVALID,
            },
            None => Tid::INVALID,
        };
        let tid = heap::insert(&self.st, &rel, xid, Some(prev), &data, info.def.fillfactor)?;
        self.count(info).inserted += 1;
        let st = self.st.clone();
        let index_name = info.index_name();
        let mut linked = prev;
        let r = loop {
            let mut check = |existing: Option<Tid>| -> Result<Existing> {
                let e = match existing {
                    Some(head) => existing_state(&st, &rel, head, xid)?,
                    None => Existing::Replace,
                };
                if e == Existing::Replace {
                    // The entry is about to point at the new version: its `prev` must be the
                    // version the entry named until now (the chain's head), unless pruning
                    // ended that chain with a dead line pointer, or VACUUM removed the entry
                    // (and may reuse the slot it named). Under the leaf's latch, so nobody
                    // reads the new version through the entry before.
                    let want = match existing {
                        Some(root) => heap::chain_head(&st, &rel, root)?
                            .map_or(Tid::INVALID, |(head, _)| head),
                        None => Tid::INVALID,
                    };
                    if want != linked {
                        heap::relink_prev(&st, &rel, tid, want, xid)?;
                        linked = want;
                    }
                }
                Ok(e)
            };
            let outcome =
                match btree::insert_unique(&st, &irel, xid, &key, tid, &mut check, &index_name) {
                    Ok(o) => o,
                    Err(e) if e.sqlstate == SqlState::UNIQUE_VIOLATION => {
                        let pk = info.def.primary_key.as_deref().unwrap_or_default();
                        let values: Vec<Value> = pk.iter().map(|&c| row[c].clone()).collect();
                        break Err(e.with_detail(format!(
                            "{} already exists.",
                            key_text(&info.def, pk, &values)
                        )));
                    }
                    Err(e) => break Err(e),
                };
            match outcome {
                InsertOutcome::Done(_) => return Ok(()),
                InsertOutcome::Wait(x) => {
                    if let Err(e) = st.xact.wait_for(xid, x, &self.cancel) {
                        break Err(e);
                    }
                }
            }
        };
        // No entry will name the new version, so nothing reaches it, and the statement fails,
        // and with it the transaction (there are no savepoints): unlinked, it is an aborted insert that replaced nothing, which
        // pruning removes. Left linked, it would keep its link to a version that VACUUM may
        // free (no entry names it, so step 3 would not look for it) and never go.
        if linked.is_valid() {
            if let Err(e) = heap::relink_prev(&st, &rel, tid, Tid::INVALID, xid) {
                tracing::warn!("could not unlink a failed insert's version: {e}");
            }
        }
        r
    }

    /// Inserts a row as part of a bulk load (COPY FROM): into a table without a primary key
    /// the row goes to a private page that enters the relation, with others, as a full-page
    /// image (`heap::BulkInsert`; DESIGN.md, "Bulk load"); into a table with one it is
    /// [`Txn::insert`]. The rows become part of the relation at [`Txn::finish_bulk`], which
    /// every other operation of this transaction, and its commit, calls first; until then not
    /// even this transaction sees them.
    ///
    /// # Errors
    /// 54000 for a row larger than a page; 53100 if the WAL or the table's disk is full; I/O
    /// errors.
    pub fn insert_bulk(&mut self, info: &TableInfo, row: &[Value]) -> Result<()> {
        if info.index.is_some() {
            self.finish_bulk()?;
            return self.insert(info, row);
        }
        if self
            .bulk
            .as_ref()
            .is_some_and(|b| b.relation().id != info.relfile)
        {
            self.finish_bulk()?;
        }
        let xid = self.xid()?;
        if self.bulk.is_none() {
            let rel = self.st.smgr.open(info.relfile)?;
            let created_here = self.created.contains(&info.relfile);
            self.bulk = Some(heap::BulkInsert::new(
                &self.st,
                rel,
                xid,
                info.def.fillfactor,
                created_here,
            ));
        }
        let bulk = self.bulk.as_mut().expect("just set");
        assert_eq!(bulk.xid(), xid, "bulk load of another transaction");
        self.row_scratch.clear();
        encode_row(info.def.column_types(), row, &mut self.row_scratch);
        bulk.add(&self.st, &self.row_scratch)?;
        self.count(info).inserted += 1;
        Ok(())
    }

    /// Ends a bulk load, if one is in progress: its last rows enter the relation.
    ///
    /// # Errors
    /// As [`Txn::insert_bulk`]; the load's pages not yet written are dropped, and the
    /// transaction must abort.
    pub fn finish_bulk(&mut self) -> Result<()> {
        match self.bulk.take() {
            Some(b) => b.finish(&self.st).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Full scan; `visit` returns false to stop.
    ///
    /// # Errors
    /// I/O, corruption, cancellation, and `visit`'s errors.
    pub fn scan(
        &self,
        info: &TableInfo,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<bool>,
    ) -> Result<()> {
        if self.bulk.is_some() {
            return Err(Error::internal("a scan while a bulk load is in progress"));
        }
        let rel = self.st.smgr.open(info.relfile)?;
        let types = info.def.types();
        let n = rel.nblocks.load(Ordering::Acquire);
        let mut returned = 0;
        let r = (|| {
            let mut rows = Vec::new();
            let mut ahead = crate::aio::ReadAhead::new(&self.st, &rel, n);
            for b in 0..n {
                self.check_cancel()?;
                ahead.before(b);
                rows.clear();
                heap::scan_block(&self.st, &rel, BlockNumber(b), &self.snap, &mut rows)?;
                for (tid, bytes) in rows.drain(..) {
                    returned += 1;
                    if !visit(tid, decode_row(&types, &bytes)?)? {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })();
        self.st.table_stats.with(info.table_id, |c| {
            c.seq_scan.fetch_add(1, Ordering::Relaxed);
            c.seq_tup_read.fetch_add(returned, Ordering::Relaxed);
        });
        r
    }

    /// Primary-key range scan over encoded-key bounds built from value prefixes.
    ///
    /// # Errors
    /// As for [`Txn::scan`]; 42P16-free: bad input if the table has no primary key.
    pub fn index_scan(
        &self,
        info: &TableInfo,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        visit: &mut dyn FnMut(Tid, Vec<Value>) -> Result<bool>,
    ) -> Result<()> {
        let Some(index) = info.index else {
            return Err(Error::internal(format!(
                "table \"{}\" has no primary key index",
                info.def.name
            )));
        };
        let enc = |b: Bound<&[Value]>| b.map(encode_key);
        let (lo, hi) = (enc(lo), enc(hi));
        let irel = self.st.smgr.open(index)?;
        let rel = self.st.smgr.open(info.relfile)?;
        let types = info.def.types();
        let snap = self.snap;
        let st = &self.st;
        let mut returned = 0;
        let r = btree::range(
            st,
            &irel,
            lo.as_ref().map(|v| v.as_slice()),
            hi.as_ref().map(|v| v.as_slice()),
            &mut |k, tid| match heap::visible_version(st, &rel, tid, &snap)
                .or_else(|e| vacuumed_meanwhile(st, &irel, &rel, k, tid, &snap, e))?
            {
                Some((t, v)) => {
                    let row = decode_row(&types, &v.data)?;
                    // The entry was read before the version: if VACUUM removed the entry
                    // meanwhile (its row was deleted for everyone) and an insert reused the
                    // slot it named, the slot holds another key's version, which is not this
                    // key's row (the storage DESIGN.md, "VACUUM").
                    if Self::key_of(info, &row).as_deref() != Some(k) {
                        return Ok(true);
                    }
                    returned += 1;
                    visit(t, row)
                }
                None => Ok(true),
            },
        );
        st.table_stats.with(info.table_id, |c| {
            c.idx_scan.fetch_add(1, Ordering::Relaxed);
            c.idx_tup_fetch.fetch_add(returned, Ordering::Relaxed);
        });
        r
    }

    fn write_loop(
        &mut self,
        info: &TableInfo,
        mut tid: Tid,
        new_row: Option<&[Value]>,
    ) -> Result<RowWrite> {
        self.finish_bulk()?;
        let xid = self.xid()?;
        self.st.wal().check_space(ROW_WAL_BOUND)?;
        let rel = self.st.smgr.open(info.relfile)?;
        let mut data = Vec::new();
        if let Some(row) = new_row {
            encode_row(info.def.column_types(), row, &mut data);
        }
        let index = match (new_row, info.index) {
            (Some(row), Some(index)) => Some((
                self.st.smgr.open(index)?,
                Self::key_of(info, row).expect("primary key"),
            )),
            _ => None,
        };
        loop {
            let r = match new_row {
                Some(_) => {
                    // What the entry names now (read again on every try): a same-page update
                    // is heap-only if it leads to the version updated (`heap::update`).
                    let entry = match &index {
                        Some((irel, key)) => btree::get(&self.st, irel, key)?,
                        None => None,
                    };
                    heap::update(&self.st, &rel, tid, xid, &data, entry)?
                }
                None => heap::delete(&self.st, &rel, tid, xid)?,
            };
            match r {
                WriteCheck::Done(new) | WriteCheck::HeapOnly(new) => {
                    let hot = matches!(r, WriteCheck::HeapOnly(_));
                    let c = self.count(info);
                    match new_row {
                        Some(_) => {
                            c.updated += 1;
                            c.newpage_updated += u64::from(new.block != tid.block);
                            c.hot_updated += u64::from(hot);
                        }
                        None => c.deleted += 1,
                    }
                    // A heap-only version leaves the entry on its chain's root.
                    if let (Some((irel, key)), false) = (&index, hot) {
                        btree::set_tid(&self.st, irel, xid, key, new)?;
                    }
                    return Ok(RowWrite::Done);
                }
                WriteCheck::WaitFor(x) => {
                    self.st.xact.wait_for(xid, x, &self.cancel)?;
                    tid = match heap::newest_committed(&self.st, &rel, tid)? {
                        Some((t, _)) if t != tid && self.repeatable_read => {
                            return Err(serialization_failure("update"))
                        }
                        None if self.repeatable_read => {
                            return Err(serialization_failure("delete"))
                        }
                        Some((t, v)) if t != tid => {
                            return Ok(RowWrite::Changed(
                                t,
                                decode_row(&info.def.types(), &v.data)?,
                            ))
                        }
                        Some((t, _)) => t,
                        None => return Ok(RowWrite::Gone),
                    };
                }
                WriteCheck::Updated(_) if self.repeatable_read => {
                    return Err(serialization_failure("update"))
                }
                WriteCheck::Deleted if self.repeatable_read => {
                    return Err(serialization_failure("delete"))
                }
                WriteCheck::Updated(next) => {
                    return Ok(match heap::newest_committed(&self.st, &rel, next)? {
                        Some((t, v)) => {
                            RowWrite::Changed(t, decode_row(&info.def.types(), &v.data)?)
                        }
                        None => RowWrite::Gone,
                    })
                }
                WriteCheck::Deleted | WriteCheck::SelfModified => return Ok(RowWrite::Gone),
            }
        }
    }

    /// Updates the row version `tid` to `row` (same primary key).
    ///
    /// # Errors
    /// 0A000 if the key changes; 40P01 on deadlock; 57014 on cancel.
    pub fn update(
        &mut self,
        info: &TableInfo,
        tid: Tid,
        old_row: &[Value],
        row: &[Value],
    ) -> Result<RowWrite> {
        if Self::key_of(info, old_row) != Self::key_of(info, row) {
            return Err(Error::unsupported(
                "changing the primary key of a row with UPDATE",
            ));
        }
        self.write_loop(info, tid, Some(row))
    }

    /// The row values of version `tid` (no visibility check).
    ///
    /// # Errors
    /// Corruption and I/O errors.
    pub fn row_at(&self, info: &TableInfo, tid: Tid) -> Result<Vec<Value>> {
        let rel = self.st.smgr.open(info.relfile)?;
        decode_row(&info.def.types(), &heap::fetch(&self.st, &rel, tid)?.data)
    }

    /// Deletes the row version `tid`.
    ///
    /// # Errors
    /// 40P01 on deadlock; 57014 on cancel.
    pub fn delete(&mut self, info: &TableInfo, tid: Tid) -> Result<RowWrite> {
        self.write_loop(info, tid, None)
    }

    /// Commits (PostgreSQL's `RecordTransactionCommit`; DESIGN.md, "Commit protocol"):
    /// 1. check that the WAL has room for the commit record (a full disk fails here, before the
    ///    record, and the transaction aborts);
    /// 2. under `commit_lock` (shared), insert the commit record and mark the xid COMMITTING;
    /// 3. unless `synchronous_commit = off`, wait for the record to be durable
    ///    ([`walnut_wal::Wal::flush_commit`], group commit);
    /// 4. publish: the xid becomes visible to new snapshots and its waiters wake;
    /// 5. work after the commit: remove the files of dropped relations, reload the catalog
    ///    cache if the transaction changed it.
    ///
    /// Step 5 cannot undo the commit, so it never fails it (PostgreSQL reports the same as
    /// WARNINGs): a file that cannot be removed is logged and left to the next checkpoint,
    /// which retries; a catalog cache that cannot be reloaded is marked stale and reloaded by
    /// the next transaction. Each such failure is in [`CommitOutcome::warnings`].
    ///
    /// # Errors
    /// 53100 if the WAL disk is full (step 1; nothing was committed). Once the record is
    /// inserted nothing fails the commit: a failed WAL write or fsync is a PANIC.
    pub fn commit(mut self, opts: &CommitOpts) -> Result<CommitOutcome> {
        // A load's last pages enter the relation before the commit record (on failure `Drop`
        // aborts).
        self.finish_bulk()?;
        if self.xid.is_valid() {
            // On a full disk the commit fails here, before its record, and `Drop` aborts.
            self.st.wal().check_space(COMMIT_WAL_BOUND)?;
        }
        self.finished = true;
        if !self.xid.is_valid() {
            return Ok(self.commit_sequence_wal(opts));
        }
        let xid = self.xid;
        let st = self.st.clone();
        let end = {
            let _c = st.xact.commit_lock.read();
            // The relation list, the commit time (what a standby reports as
            // pg_last_xact_replay_timestamp() and waits on for recovery_min_apply_delay),
            // and whether the committer waits for its standbys to replay it.
            let flags = if opts.synchronous_commit == walnut_wal::SynchronousCommit::RemoteApply {
                crate::recovery::COMMIT_APPLY_FEEDBACK
            } else {
                0
            };
            let main = crate::recovery::encode_commit(
                &self.drop_at_commit,
                walnut_common::value::now_timestamp(),
                flags,
            );
            let (_, end) = st.wal().insert(&mut |_| Record {
                rmgr: RM_XACT,
                info: XACT_COMMIT,
                xid,
                flags: 0,
                blocks: vec![],
                main_data: main.clone(),
            })?;
            st.xact.mark_committing(xid);
            end
        };
        self.flush_stats(true);
        let durable = opts.synchronous_commit.waits_for_flush();
        if !durable {
            st.wal().async_commit(end);
        }
        if durable {
            // The record is in the WAL and the xid COMMITTING: from here the commit cannot be
            // taken back, so a failure is a PANIC (PostgreSQL's critical section). The only
            // error `flush_commit` returns, a flush beyond the insert position, cannot happen
            // for a record just inserted.
            if let Err(e) = st.wal().flush_commit(end, opts, st.xact.active_count()) {
                crate::panic_fatal(&format!(
                    "could not flush the commit record of transaction {}: {e}",
                    xid.0
                ));
            }
        }
        let mut warnings = Vec::new();
        let mut canceled = false;
        if let Some(level) = opts.synchronous_commit.sync_level() {
            // Synchronous replication (PostgreSQL's SyncRepWaitForLSN): before the commit
            // becomes visible. A cancel leaves it committed locally, with PostgreSQL's warning.
            let wait = st.wal().senders().wait_for(end.0, level, &self.cancel);
            if wait == walnut_wal::senders::SyncWait::Canceled {
                canceled = true;
                tracing::warn!(
                    xid = xid.0,
                    "canceling wait for synchronous replication due to user request"
                );
                warnings.push(
                    Error::user(
                        SqlState::WARNING,
                        "canceling wait for synchronous replication due to user request",
                    )
                    .with_detail(
                        "The transaction has already committed locally, but might not have been replicated to the standby.",
                    ),
                );
            }
        }
        st.xact.publish_commit(xid);
        // The catalog first: a session that meets a removed file (a sequence's, replaced by
        // RESTART) then finds the new one in it (`Sequences::replaced`).
        if !self.overlay.is_empty() || !self.seq_overlay.is_empty() {
            if let Err(e) = st.catalog.reload(&st) {
                tracing::warn!("could not reload the catalog after a commit: {e}");
                st.catalog.invalidate();
                warnings.push(e);
            }
        }
        for rel in self.drop_at_commit.drain(..) {
            if let Err(e) = st.remove_relation(rel) {
                tracing::warn!("{e}; the next checkpoint removes the file");
                st.remove_relation_later(rel);
                warnings.push(e);
            }
        }
        // max_standby_apply_lag, last: the commit is visible, its files removed and the
        // catalog reloaded (another session must not see its DDL with a stale cache while it
        // waits), and it holds no lock; it returns once the synchronous standbys could replay
        // it in time. A cancel ends the wait, nothing else; one that already ended the wait
        // for synchronous replication ends this one too.
        if !canceled {
            st.wal().senders().wait_for_apply_lag(end.0, &self.cancel);
        }
        Ok(CommitOutcome {
            lsn: end,
            durable,
            warnings,
        })
    }

    /// The commit of a transaction without an xid: if its `nextval` or `setval` handed out
    /// values a sequence record covers, flushes to that record's end as a commit record's
    /// would be (a value the client saw is never handed out again after a crash), and waits
    /// for synchronous standbys.
    fn commit_sequence_wal(&self, opts: &CommitOpts) -> CommitOutcome {
        let end = Lsn(self.seq_wal_end.load(Ordering::Acquire));
        if !end.is_valid() {
            return CommitOutcome::read_only();
        }
        let st = &self.st;
        let durable = opts.synchronous_commit.waits_for_flush();
        if !durable {
            st.wal().async_commit(end);
        } else if let Err(e) = st.wal().flush_commit(end, opts, st.xact.active_count()) {
            crate::panic_fatal(&format!("could not flush sequence WAL to {end}: {e}"));
        }
        if let Some(level) = opts.synchronous_commit.sync_level() {
            // Flushed on the standbys is enough for a value never to come back after a
            // failover; with no commit record to ask for apply feedback, `remote_apply` would
            // wait for the standby's next status report.
            use walnut_wal::senders::SyncLevel;
            let level = if level == SyncLevel::Apply {
                SyncLevel::Flush
            } else {
                level
            };
            st.wal().senders().wait_for(end.0, level, &self.cancel);
        }
        CommitOutcome {
            lsn: end,
            durable,
            warnings: Vec::new(),
        }
    }

    /// Rolls back.
    pub fn rollback(mut self) {
        self.abort_inner();
    }

    fn abort_inner(&mut self) {
        // Rows of a load not yet written are simply forgotten.
        self.bulk = None;
        if self.finished {
            return;
        }
        self.finished = true;
        if !self.xid.is_valid() {
            return;
        }
        let xid = self.xid;
        let main = encode_rel_list(&self.created);
        if let Err(e) = self.st.wal().insert(&mut |_| Record {
            rmgr: RM_XACT,
            info: XACT_ABORT,
            xid,
            flags: 0,
            blocks: vec![],
            main_data: main.clone(),
        }) {
            tracing::warn!("could not log abort of transaction {}: {e}", xid.0);
        }
        self.st.xact.abort(xid);
        self.flush_stats(false);
        for rel in self.created.drain(..) {
            if let Err(e) = self.st.remove_relation(rel) {
                tracing::warn!("could not remove relation file {}: {e}", rel.0);
            }
        }
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        self.abort_inner();
        self.st.xact.unregister(&self.slot);
    }
}

/// A statement cancelled on a hot standby because replay removes row versions its snapshot may
/// need (PostgreSQL's `PROCSIG_RECOVERY_CONFLICT_SNAPSHOT`): 40001.
fn recovery_conflict() -> Error {
    Error::conflict(
        SqlState::SERIALIZATION_FAILURE,
        "canceling statement due to conflict with recovery",
    )
    .with_detail("User query might have needed to see row versions that must be removed.")
}

/// `Key (a, b)=(1, x)`: a key's columns and values as PostgreSQL's unique-violation details
/// print them (`BuildIndexValueDescription`).
fn key_text(def: &TableDef, cols: &[usize], values: &[Value]) -> String {
    let names: Vec<&str> = cols.iter().map(|&c| def.columns[c].name.as_str()).collect();
    let vals: Vec<String> = values
        .iter()
        .map(|v| v.to_text().unwrap_or_else(|| "null".into()))
        .collect();
    format!("Key ({})=({})", names.join(", "), vals.join(", "))
}

/// What an index scan does with error `e` from reading, for snapshot `snap`, the version at
/// `tid` of heap `rel`, which the entry for `key` of index `irel` named when the scan read it:
/// VACUUM may have removed that entry since (its row was deleted for everyone) and freed the
/// slot, which then names no tuple (DESIGN.md, "VACUUM"). If the entry no longer names `tid`,
/// the key has nothing to show (`Ok(None)`). If it does, an insert of the same key may have
/// taken the freed slot meanwhile: the version is read once more, and a second failure stands.
///
/// # Errors
/// `e` if it is not a corruption error; the second read's; the lookup's.
fn vacuumed_meanwhile(
    st: &Storage,
    irel: &Relation,
    rel: &Relation,
    key: &[u8],
    tid: Tid,
    snap: &Snapshot,
    e: Error,
) -> Result<Option<(Tid, heap::Version)>> {
    if e.kind != walnut_common::ErrorKind::Corruption {
        return Err(e);
    }
    if btree::get(st, irel, key)? != Some(tid) {
        return Ok(None);
    }
    heap::visible_version(st, rel, tid, snap)
}

/// Uniqueness decision for an existing index entry pointing at `root` (from the newest version
/// it reaches: `heap::chain_head`).
fn existing_state(
    st: &Storage,
    rel: &crate::smgr::Relation,
    root: Tid,
    me: Xid,
) -> Result<Existing> {
    // Pruned: deleted, or an aborted insert, long enough ago for everyone.
    let Some((mut tid, mut v)) = heap::chain_head(st, rel, root)? else {
        return Ok(Existing::Replace);
    };
    for _ in 0..1_000_000 {
        let xmin_state = if v.xmin == me {
            XidStatus::Committed(0)
        } else {
            st.xact.status(v.xmin)
        };
        match xmin_state {
            XidStatus::InProgress => return Ok(Existing::Wait(v.xmin)),
            XidStatus::Aborted => {
                // Back to what the aborted version replaced, if anything is left of it.
                match heap::prev_version(st, rel, tid, &v)? {
                    Some((t, p)) => (tid, v) = (t, p),
                    None => return Ok(Existing::Replace),
                }
                continue;
            }
            XidStatus::Committed(_) => {}
        }
        if !v.xmax.is_valid() {
            return Ok(Existing::Duplicate);
        }
        if v.xmax == me {
            return Ok(if v.next.is_valid() {
                Existing::Duplicate
            } else {
                Existing::Replace
            });
        }
        return Ok(match st.xact.status(v.xmax) {
            XidStatus::InProgress => Existing::Wait(v.xmax),
            XidStatus::Aborted => Existing::Duplicate,
            XidStatus::Committed(_) => {
                if v.next.is_valid() {
                    Existing::Duplicate
                } else {
                    Existing::Replace
                }
            }
        });
    }
    Err(Error::corruption("version chain does not end"))
}

/// A heap block a helper of a parallel index build's scan is given at least: PostgreSQL's
/// `min_parallel_table_scan_size` (8 MB).
const MIN_PARALLEL_SCAN_BLOCKS: u64 = 1024;

/// Helper threads for the heap scan of an index build over `nblocks` blocks, at most `max`
/// (`max_parallel_maintenance_workers`): none under [`MIN_PARALLEL_SCAN_BLOCKS`], then one,
/// and one more each time the table is three times larger (PostgreSQL's
/// `compute_parallel_worker` for `plan_create_index_workers`).
fn scan_workers(nblocks: u32, max: u32) -> usize {
    let mut workers = 0;
    let mut threshold = MIN_PARALLEL_SCAN_BLOCKS;
    while nblocks as u64 >= threshold && workers < max {
        workers += 1;
        threshold *= 3;
    }
    workers as usize
}

/// What each participant of an index build's heap scan shares.
struct Scan<'a> {
    st: &'a Storage,
    rel: &'a Arc<Relation>,
    snap: &'a Snapshot,
    cancel: &'a AtomicBool,
    types: Vec<walnut_common::DataType>,
    cols: &'a [usize],
    /// Blocks scanned by all participants.
    done: &'a std::sync::atomic::AtomicU64,
}

impl Scan<'_> {
    /// Scans blocks `lo..hi` into an arena of keys (sized from the first block), reading ahead
    /// by `maintenance_io_concurrency`. Returns it and the first key column found NULL, if
    /// any (the scan stops there). `progress`: where the session reports every participant's
    /// blocks.
    ///
    /// # Errors
    /// I/O and corruption errors; cancellation (the flag is left for the session to clear).
    fn part(
        &self,
        lo: u32,
        hi: u32,
        progress: Option<&crate::progress::IndexBuildProgress>,
    ) -> Result<(KeyArena, Option<usize>)> {
        let upto = self.cols.iter().max().map_or(0, |&c| c + 1);
        let mut keys = KeyArena::default();
        let mut null_col = None;
        // A maintenance read: read ahead by maintenance_io_concurrency (with O_DIRECT data).
        let mut ahead = crate::aio::ReadAhead::maintenance(self.st, self.rel, hi);
        for b in lo..hi {
            if self.cancel.load(Ordering::Acquire) {
                return Err(Error::cancelled());
            }
            ahead.before(b);
            heap::visit_block(
                self.st,
                self.rel,
                BlockNumber(b),
                self.snap,
                &mut |tid, bytes| {
                    let row = decode_row(&self.types[..upto], bytes)?;
                    if let Some(&c) = self.cols.iter().find(|&&c| row[c].is_null()) {
                        null_col.get_or_insert(c);
                        return Ok(());
                    }
                    keys.push(self.cols.iter().map(|&c| &row[c]), tid);
                    Ok(())
                },
            )?;
            if b == lo {
                // Room for as many keys in each block as in the first: one allocation, not a
                // doubling series (each touches fresh memory).
                let blocks = (hi - lo) as usize;
                keys.reserve(keys.entries.len() * blocks, keys.bytes.len() * blocks);
            }
            let all = self.done.fetch_add(1, Ordering::AcqRel) + 1;
            if let Some(p) = progress {
                p.blocks_done.store(all, Ordering::Release);
                p.report();
            }
            if null_col.is_some() {
                break;
            }
        }
        Ok((keys, null_col))
    }
}

/// Encoded keys with their TIDs, in one buffer: what an index build sorts. Each entry keeps
/// its key's first 8 bytes as a big-endian integer, so most comparisons touch no buffer.
#[derive(Default)]
struct KeyArena {
    bytes: Vec<u8>,
    /// (first 8 key bytes, zero-padded, big-endian; offset; length; TID).
    entries: Vec<(u64, u32, u32, Tid)>,
}

impl KeyArena {
    fn push<'a>(&mut self, values: impl Iterator<Item = &'a Value>, tid: Tid) {
        let off = self.bytes.len();
        for v in values {
            walnut_common::value::encode_key_part(v, &mut self.bytes);
        }
        let key = &self.bytes[off..];
        let mut prefix = [0u8; 8];
        let n = key.len().min(8);
        prefix[..n].copy_from_slice(&key[..n]);
        let off = u32::try_from(off).expect("index build keys under 4 GiB");
        self.entries
            .push((u64::from_be_bytes(prefix), off, key.len() as u32, tid));
    }

    /// Appends `other`'s keys after this arena's.
    fn append(&mut self, other: KeyArena) {
        if self.entries.is_empty() {
            *self = other;
            return;
        }
        let base = u32::try_from(self.bytes.len()).expect("index build keys under 4 GiB");
        self.bytes.extend_from_slice(&other.bytes);
        assert!(
            u32::try_from(self.bytes.len()).is_ok(),
            "index build keys under 4 GiB"
        );
        self.entries.extend(
            other
                .entries
                .into_iter()
                .map(|(prefix, off, len, tid)| (prefix, off + base, len, tid)),
        );
    }

    /// Makes room for `entries` more keys of `bytes` more bytes in all.
    fn reserve(&mut self, entries: usize, bytes: usize) {
        self.entries.reserve(entries);
        self.bytes.reserve(bytes);
    }

    fn slice(&self, e: &(u64, u32, u32, Tid)) -> &[u8] {
        &self.bytes[e.1 as usize..(e.1 + e.2) as usize]
    }

    /// Sorts by key (a table loaded in key order is checked in one pass and not sorted).
    fn sort(&mut self) {
        let cmp = |a: &(u64, u32, u32, Tid), b: &(u64, u32, u32, Tid)| {
            a.0.cmp(&b.0).then_with(|| self.slice(a).cmp(self.slice(b)))
        };
        if self.entries.windows(2).all(|w| cmp(&w[0], &w[1]).is_le()) {
            return;
        }
        let mut entries = std::mem::take(&mut self.entries);
        entries
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| self.slice(a).cmp(self.slice(b))));
        self.entries = entries;
    }
}

impl btree::SortedEntries for KeyArena {
    fn count(&self) -> usize {
        self.entries.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        self.slice(&self.entries[i])
    }
    fn tid(&self, i: usize) -> Tid {
        self.entries[i].3
    }
}
