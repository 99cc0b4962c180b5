//! An in-memory model of the storage engine, for tests of the SQL layer (and of the front end).
//!
//! Each table is a vector of row versions plus, when it has a primary key, a `BTreeMap` from the
//! memcomparable key encoding to the versions with that key. Visibility is read committed by
//! commit sequence number: a statement sees versions whose creator committed before the
//! statement began (or is itself) and whose deleter did not. Writers take a row lock by setting
//! `xmax`; a second writer waits for the first to finish and then gets
//! [`WriteOutcome::Changed`] or [`WriteOutcome::Gone`], as with the real engine.
//!
//! Simplifications: DDL (CREATE, DROP, TRUNCATE, ADD PRIMARY KEY) takes effect immediately and is
//! not undone by rollback; there is no deadlock detection (waits poll the cancel flag).

use crate::storage::{
    CommitOpts, CommitOutcome, Engine, Isolation, RowId, ScanControl, Transaction, WriteOutcome,
};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use walnut_common::value::encode_key;
use walnut_common::{
    BlockNumber, ColumnDef, DataType, Error, Result, SqlState, TableDef, Tid, Value,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum XStatus {
    InProgress,
    Committed(u64),
    Aborted,
}

struct Version {
    values: Vec<Value>,
    xmin: u64,
    /// 0: live.
    xmax: u64,
    /// The version that replaced this one (an update), if any.
    next: Option<usize>,
}

struct MemTable {
    def: Arc<TableDef>,
    /// OID in the `pg_class` view; its primary-key index (if any) is `oid + 1`.
    oid: i64,
    versions: Vec<Version>,
    index: BTreeMap<Vec<u8>, Vec<usize>>,
}

#[derive(Default)]
struct State {
    tables: HashMap<String, MemTable>,
    status: HashMap<u64, XStatus>,
    next_xid: u64,
    commit_seq: u64,
    /// Next table OID (two per table: the table and its primary-key index).
    next_oid: i64,
}

/// A system view: columns and rows.
type View = (Vec<ColumnDef>, Vec<Vec<Value>>);
/// Encoded key bounds of an index scan.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    views: Mutex<HashMap<String, View>>,
    checkpoints: AtomicU64,
    commits: AtomicU64,
    scans: AtomicU64,
    index_scans: AtomicU64,
    last_commit_opts: Mutex<Option<CommitOpts>>,
    /// Warnings the next commit reports (as the real engine's failed work after a commit).
    commit_warnings: Mutex<Vec<Error>>,
    /// The running COPYs of this engine's sessions (the model reports no index builds).
    progress: Arc<crate::progress::Registry>,
}

/// The in-memory engine. Cheap to clone (shared state).
#[derive(Clone)]
pub struct MemEngine {
    inner: Arc<Inner>,
}

impl Default for MemEngine {
    fn default() -> Self {
        MemEngine::new()
    }
}

impl MemEngine {
    /// An empty database.
    pub fn new() -> MemEngine {
        MemEngine {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    next_xid: 3,
                    next_oid: 16384,
                    ..State::default()
                }),
                changed: Condvar::new(),
                views: Mutex::new(HashMap::new()),
                checkpoints: AtomicU64::new(0),
                commits: AtomicU64::new(0),
                scans: AtomicU64::new(0),
                index_scans: AtomicU64::new(0),
                last_commit_opts: Mutex::new(None),
                commit_warnings: Mutex::new(Vec::new()),
                progress: crate::progress::Registry::new(),
            }),
        }
    }

    /// Defines a system view returned by [`Engine::system_view`].
    pub fn set_view(&self, name: &str, columns: Vec<ColumnDef>, rows: Vec<Vec<Value>>) {
        self.inner
            .views
            .lock()
            .insert(name.to_string(), (columns, rows));
    }

    /// The `pg_class` view, as the real engine has it: one row per table (relkind `r`) and per
    /// primary-key index (`i`, named `<table>_pkey`), ordered by OID.
    fn pg_class(&self) -> View {
        let col = |name: &str, ty: DataType| ColumnDef {
            name: name.to_string(),
            ty,
            not_null: true,
            default: None,
            identity: None,
        };
        let columns = vec![
            col("oid", DataType::Int8),
            col("relname", DataType::Text),
            col("relkind", DataType::Char(1)),
            col("relnamespace", DataType::Int8),
        ];
        let row = |oid: i64, name: String, kind: &str| {
            vec![
                Value::Int8(oid),
                Value::Text(name),
                Value::Text(kind.to_string()),
                Value::Int8(2200),
            ]
        };
        let st = self.inner.state.lock();
        let mut rows = Vec::new();
        for t in st.tables.values() {
            rows.push(row(t.oid, t.def.name.clone(), "r"));
            if t.def.primary_key.is_some() {
                rows.push(row(t.oid + 1, format!("{}_pkey", t.def.name), "i"));
            }
        }
        rows.sort_by_key(|r| r[0].as_i64());
        (columns, rows)
    }

    /// Number of CHECKPOINTs run.
    pub fn checkpoints(&self) -> u64 {
        self.inner.checkpoints.load(Ordering::Relaxed)
    }

    /// Number of commits.
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// (full scans, index scans) run so far.
    pub fn scan_counts(&self) -> (u64, u64) {
        (
            self.inner.scans.load(Ordering::Relaxed),
            self.inner.index_scans.load(Ordering::Relaxed),
        )
    }

    /// Options of the last commit.
    pub fn last_commit_opts(&self) -> Option<CommitOpts> {
        *self.inner.last_commit_opts.lock()
    }

    /// Makes the next commit report `warning` in its outcome, as the real engine does when
    /// work after a durable commit fails (a dropped table's file that cannot be removed).
    pub fn warn_at_next_commit(&self, warning: Error) {
        self.inner.commit_warnings.lock().push(warning);
    }
}

impl Engine for MemEngine {
    fn begin(&self, cancel: Arc<AtomicBool>) -> Result<Box<dyn Transaction>> {
        let mut st = self.inner.state.lock();
        let xid = st.next_xid;
        st.next_xid += 1;
        st.status.insert(xid, XStatus::InProgress);
        let snap = st.commit_seq;
        Ok(Box::new(MemTxn {
            inner: self.inner.clone(),
            xid,
            snap,
            cancel,
            isolation: Isolation::ReadCommitted,
            started: false,
            finished: false,
        }))
    }

    fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn system_view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        if let Some(v) = self.inner.views.lock().get(name) {
            return Some(v.clone());
        }
        (name == "pg_class").then(|| self.pg_class())
    }

    fn progress(&self) -> Option<Arc<crate::progress::Registry>> {
        Some(self.inner.progress.clone())
    }
}

struct MemTxn {
    inner: Arc<Inner>,
    xid: u64,
    snap: u64,
    cancel: Arc<AtomicBool>,
    /// Under REPEATABLE READ `snap` is taken once, and a write that meets a newer committed
    /// version fails with 40001, as in the real engine.
    isolation: Isolation,
    started: bool,
    finished: bool,
}

fn rid(idx: usize) -> RowId {
    Tid {
        block: BlockNumber((idx / 1000) as u32),
        slot: (idx % 1000 + 1) as u16,
    }
}

fn idx_of(r: RowId) -> usize {
    r.block.0 as usize * 1000 + (r.slot as usize - 1)
}

fn no_table(name: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_TABLE,
        format!("relation \"{name}\" does not exist"),
    )
}

impl State {
    fn status(&self, xid: u64) -> XStatus {
        self.status.get(&xid).copied().unwrap_or(XStatus::Aborted)
    }

    fn committed_by(&self, xid: u64, snap: u64) -> bool {
        matches!(self.status(xid), XStatus::Committed(s) if s <= snap)
    }

    fn visible(&self, v: &Version, me: u64, snap: u64) -> bool {
        let created = v.xmin == me || self.committed_by(v.xmin, snap);
        if !created {
            return false;
        }
        v.xmax == 0 || !(v.xmax == me || self.committed_by(v.xmax, snap))
    }
}

fn pk_key(def: &TableDef, row: &[Value]) -> Option<Vec<u8>> {
    let pk = def.primary_key.as_ref()?;
    let vals: Vec<Value> = pk.iter().map(|&i| row[i].clone()).collect();
    Some(encode_key(&vals))
}

/// Is encoded key `k` within (lo, hi) with prefix semantics?
fn key_in(k: &[u8], lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let lo_ok = match lo {
        Bound::Unbounded => true,
        Bound::Included(p) => k >= p.as_slice(),
        Bound::Excluded(p) => k > p.as_slice() && !k.starts_with(p),
    };
    let hi_ok = match hi {
        Bound::Unbounded => true,
        Bound::Included(p) => k <= p.as_slice() || k.starts_with(p),
        Bound::Excluded(p) => k < p.as_slice(),
    };
    lo_ok && hi_ok
}

enum Lock {
    Acquired,
    Wait,
    Outcome(WriteOutcome),
    /// REPEATABLE READ met a newer committed version: 40001.
    Failed(Error),
}

impl MemTxn {
    fn wait(&self, st: &mut parking_lot::MutexGuard<'_, State>) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(Error::cancelled());
        }
        self.inner.changed.wait_for(st, Duration::from_millis(20));
        Ok(())
    }

    fn collect(&self, table: &str, lo: Option<KeyRange>) -> Result<Vec<(RowId, Vec<Value>)>> {
        let st = self.inner.state.lock();
        let t = st.tables.get(table).ok_or_else(|| no_table(table))?;
        let mut out = Vec::new();
        match lo {
            None => {
                for (i, v) in t.versions.iter().enumerate() {
                    if st.visible(v, self.xid, self.snap) {
                        out.push((rid(i), v.values.clone()));
                    }
                }
            }
            Some((lo, hi)) => {
                let start = match &lo {
                    Bound::Unbounded => Bound::Unbounded,
                    Bound::Included(p) | Bound::Excluded(p) => Bound::Included(p.clone()),
                };
                for (k, idxs) in t.index.range((start, Bound::Unbounded)) {
                    if !key_in(k, &lo, &hi) {
                        if matches!(&hi, Bound::Included(p) | Bound::Excluded(p) if k.as_slice() > p.as_slice() && !k.starts_with(p))
                        {
                            break;
                        }
                        continue;
                    }
                    for &i in idxs {
                        let v = &t.versions[i];
                        if st.visible(v, self.xid, self.snap) {
                            out.push((rid(i), v.values.clone()));
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Tries to lock version `idx` for a write.
    fn try_lock(&self, st: &State, t: &MemTable, idx: usize) -> Lock {
        let v = &t.versions[idx];
        if v.xmax == 0 {
            return Lock::Acquired;
        }
        if v.xmax == self.xid {
            return Lock::Outcome(WriteOutcome::Gone);
        }
        match st.status(v.xmax) {
            XStatus::Aborted => Lock::Acquired,
            XStatus::InProgress => Lock::Wait,
            XStatus::Committed(_) if self.isolation == Isolation::RepeatableRead => {
                Lock::Failed(Error::conflict(
                    SqlState::SERIALIZATION_FAILURE,
                    format!(
                        "could not serialize access due to concurrent {}",
                        if v.next.is_some() { "update" } else { "delete" }
                    ),
                ))
            }
            XStatus::Committed(_) => match v.next {
                Some(n) => Lock::Outcome(WriteOutcome::Changed {
                    row: rid(n),
                    values: t.versions[n].values.clone(),
                }),
                None => Lock::Outcome(WriteOutcome::Gone),
            },
        }
    }

    fn write(&mut self, table: &str, row: RowId, new: Option<Vec<Value>>) -> Result<WriteOutcome> {
        let inner = self.inner.clone();
        let mut st = inner.state.lock();
        loop {
            let state: &mut State = &mut st;
            let t = state.tables.get(table).ok_or_else(|| no_table(table))?;
            let idx = idx_of(row);
            if idx >= t.versions.len() {
                return Err(Error::internal("row id out of range"));
            }
            match self.try_lock(state, t, idx) {
                Lock::Wait => {
                    self.wait(&mut st)?;
                    continue;
                }
                Lock::Outcome(o) => return Ok(o),
                Lock::Failed(e) => return Err(e),
                Lock::Acquired => {}
            }
            let t = state.tables.get_mut(table).expect("looked up above");
            if let Some(new) = &new {
                if pk_key(&t.def, new) != pk_key(&t.def, &t.versions[idx].values) {
                    return Err(Error::unsupported(
                        "changing the primary key of a row with UPDATE",
                    ));
                }
            }
            t.versions[idx].xmax = self.xid;
            if let Some(values) = new {
                let key = pk_key(&t.def, &values);
                t.versions.push(Version {
                    values,
                    xmin: self.xid,
                    xmax: 0,
                    next: None,
                });
                let n = t.versions.len() - 1;
                t.versions[idx].next = Some(n);
                if let Some(k) = key {
                    t.index.entry(k).or_default().push(n);
                }
            }
            return Ok(WriteOutcome::Done);
        }
    }

    fn finish(&mut self, status: XStatus) {
        let mut st = self.inner.state.lock();
        st.status.insert(self.xid, status);
        self.finished = true;
        drop(st);
        self.inner.changed.notify_all();
    }
}

impl Drop for MemTxn {
    fn drop(&mut self) {
        if !self.finished {
            self.finish(XStatus::Aborted);
        }
    }
}

impl Transaction for MemTxn {
    fn set_isolation(&mut self, level: Isolation) -> Result<()> {
        if self.started && level != self.isolation {
            return Err(Error::user(
                SqlState::ACTIVE_SQL_TRANSACTION,
                "SET TRANSACTION ISOLATION LEVEL must be called before any query",
            ));
        }
        self.isolation = level;
        Ok(())
    }

    fn isolation(&self) -> Isolation {
        self.isolation
    }

    fn new_statement(&mut self) {
        if self.isolation == Isolation::RepeatableRead && self.started {
            return;
        }
        self.started = true;
        self.snap = self.inner.state.lock().commit_seq;
    }

    fn table(&mut self, name: &str) -> Result<Option<Arc<TableDef>>> {
        Ok(self
            .inner
            .state
            .lock()
            .tables
            .get(name)
            .map(|t| t.def.clone()))
    }

    fn table_oid(&mut self, name: &str) -> Result<Option<i64>> {
        Ok(self.inner.state.lock().tables.get(name).map(|t| t.oid))
    }

    fn create_table(&mut self, def: TableDef) -> Result<()> {
        let mut st = self.inner.state.lock();
        if st.tables.contains_key(&def.name) {
            return Err(Error::user(
                SqlState::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", def.name),
            ));
        }
        let name = def.name.clone();
        let oid = st.next_oid;
        st.next_oid += 2;
        st.tables.insert(
            name,
            MemTable {
                def: Arc::new(def),
                oid,
                versions: Vec::new(),
                index: BTreeMap::new(),
            },
        );
        Ok(())
    }

    fn drop_table(&mut self, name: &str) -> Result<()> {
        let mut st = self.inner.state.lock();
        st.tables.remove(name).map(|_| ()).ok_or_else(|| {
            Error::user(
                SqlState::UNDEFINED_TABLE,
                format!("table \"{name}\" does not exist"),
            )
        })
    }

    fn truncate(&mut self, name: &str) -> Result<()> {
        let mut st = self.inner.state.lock();
        let t = st.tables.get_mut(name).ok_or_else(|| no_table(name))?;
        t.versions.clear();
        t.index.clear();
        Ok(())
    }

    fn add_primary_key(&mut self, name: &str, columns: Vec<usize>) -> Result<()> {
        let mut guard = self.inner.state.lock();
        let st: &mut State = &mut guard;
        let t = st.tables.get(name).ok_or_else(|| no_table(name))?;
        if t.def.primary_key.is_some() {
            return Err(Error::user(
                SqlState::INVALID_TABLE_DEFINITION,
                format!("multiple primary keys for table \"{name}\" are not allowed"),
            ));
        }
        let mut def = (*t.def).clone();
        for &c in &columns {
            def.columns[c].not_null = true;
        }
        def.primary_key = Some(columns.clone());
        let mut index: BTreeMap<Vec<u8>, Vec<usize>> = BTreeMap::new();
        // Duplicated keys: encoded key → its values as text.
        let mut dups: BTreeMap<Vec<u8>, Vec<String>> = BTreeMap::new();
        for (i, v) in t.versions.iter().enumerate() {
            let key = pk_key(&def, &v.values).expect("has a key");
            let live = st.status(v.xmin) != XStatus::Aborted
                && !(v.xmax != 0
                    && (v.xmax == self.xid || matches!(st.status(v.xmax), XStatus::Committed(_))));
            if live {
                if let Some(&c) = columns.iter().find(|&&c| v.values[c].is_null()) {
                    return Err(Error::user(
                        SqlState::NOT_NULL_VIOLATION,
                        format!(
                            "column \"{}\" of relation \"{name}\" contains null values",
                            def.columns[c].name
                        ),
                    ));
                }
                let dup = index.get(&key).is_some_and(|is| {
                    is.iter().any(|&j| {
                        let w = &t.versions[j];
                        st.status(w.xmin) != XStatus::Aborted
                            && !(w.xmax != 0
                                && (w.xmax == self.xid
                                    || matches!(st.status(w.xmax), XStatus::Committed(_))))
                    })
                });
                if dup {
                    let vals: Vec<String> = columns
                        .iter()
                        .map(|&c| v.values[c].to_text().unwrap_or_default())
                        .collect();
                    dups.insert(key.clone(), vals);
                }
            }
            index.entry(key).or_default().push(i);
        }
        // As the real engine: NULLs first (above), then the smallest duplicated key.
        if let Some((_, vals)) = dups.first_key_value() {
            let names: Vec<&str> = columns
                .iter()
                .map(|&c| def.columns[c].name.as_str())
                .collect();
            return Err(Error::user(
                SqlState::UNIQUE_VIOLATION,
                format!("could not create unique index \"{name}_pkey\""),
            )
            .with_detail(format!(
                "Key ({})=({}) is duplicated.",
                names.join(", "),
                vals.join(", ")
            )));
        }
        let t = st.tables.get_mut(name).expect("looked up above");
        t.def = Arc::new(def);
        t.index = index;
        Ok(())
    }

    fn insert(&mut self, table: &str, row: Vec<Value>) -> Result<()> {
        let inner = self.inner.clone();
        let mut st = inner.state.lock();
        loop {
            let state: &mut State = &mut st;
            let t = state.tables.get(table).ok_or_else(|| no_table(table))?;
            let key = pk_key(&t.def, &row);
            let mut wait = false;
            if let Some(k) = &key {
                for &i in t.index.get(k).map(Vec::as_slice).unwrap_or(&[]) {
                    let v = &t.versions[i];
                    let creator = if v.xmin == self.xid {
                        XStatus::Committed(0)
                    } else {
                        state.status(v.xmin)
                    };
                    let deleter = if v.xmax == 0 {
                        None
                    } else if v.xmax == self.xid {
                        Some(XStatus::Committed(0))
                    } else {
                        Some(state.status(v.xmax))
                    };
                    match (creator, deleter) {
                        (XStatus::Aborted, _) | (_, Some(XStatus::Committed(_))) => {}
                        (XStatus::InProgress, _) | (_, Some(XStatus::InProgress)) => wait = true,
                        _ => {
                            let pk = t.def.primary_key.as_ref().expect("has a key");
                            let names: Vec<&str> =
                                pk.iter().map(|&c| t.def.columns[c].name.as_str()).collect();
                            let vals: Vec<String> = pk
                                .iter()
                                .map(|&c| row[c].to_text().unwrap_or_default())
                                .collect();
                            return Err(Error::user(
                                SqlState::UNIQUE_VIOLATION,
                                format!("duplicate key value violates unique constraint \"{table}_pkey\""),
                            )
                            .with_detail(format!(
                                "Key ({})=({}) already exists.",
                                names.join(", "),
                                vals.join(", ")
                            )));
                        }
                    }
                }
            }
            if wait {
                self.wait(&mut st)?;
                continue;
            }
            let t = st.tables.get_mut(table).expect("looked up above");
            t.versions.push(Version {
                values: row,
                xmin: self.xid,
                xmax: 0,
                next: None,
            });
            if let Some(k) = key {
                let n = t.versions.len() - 1;
                t.index.entry(k).or_default().push(n);
            }
            return Ok(());
        }
    }

    fn scan(
        &mut self,
        table: &str,
        visit: &mut dyn FnMut(RowId, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        self.inner.scans.fetch_add(1, Ordering::Relaxed);
        for (r, v) in self.collect(table, None)? {
            if visit(r, v)? == ScanControl::Stop {
                break;
            }
        }
        Ok(())
    }

    fn index_scan(
        &mut self,
        table: &str,
        lo: Bound<&[Value]>,
        hi: Bound<&[Value]>,
        visit: &mut dyn FnMut(RowId, Vec<Value>) -> Result<ScanControl>,
    ) -> Result<()> {
        let enc = |b: Bound<&[Value]>| match b {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(v) => Bound::Included(encode_key(v)),
            Bound::Excluded(v) => Bound::Excluded(encode_key(v)),
        };
        self.inner.index_scans.fetch_add(1, Ordering::Relaxed);
        for (r, v) in self.collect(table, Some((enc(lo), enc(hi))))? {
            if visit(r, v)? == ScanControl::Stop {
                break;
            }
        }
        Ok(())
    }

    fn update(&mut self, table: &str, row: RowId, values: Vec<Value>) -> Result<WriteOutcome> {
        self.write(table, row, Some(values))
    }

    fn delete(&mut self, table: &str, row: RowId) -> Result<WriteOutcome> {
        self.write(table, row, None)
    }

    fn commit(mut self: Box<Self>, opts: &CommitOpts) -> Result<CommitOutcome> {
        *self.inner.last_commit_opts.lock() = Some(*opts);
        self.inner.commits.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = self.inner.state.lock();
            st.commit_seq += 1;
            let seq = st.commit_seq;
            st.status.insert(self.xid, XStatus::Committed(seq));
            self.finished = true;
        }
        self.inner.changed.notify_all();
        Ok(CommitOutcome {
            lsn: walnut_common::Lsn::INVALID,
            durable: opts.synchronous_commit.waits_for_flush(),
            warnings: std::mem::take(&mut *self.inner.commit_warnings.lock()),
        })
    }

    fn rollback(mut self: Box<Self>) {
        self.finish(XStatus::Aborted);
    }
}
