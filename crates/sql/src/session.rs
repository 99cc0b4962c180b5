//! A client session: transaction state, GUCs, prepared statements and the plan cache.
//!
//! API CONTRACT between the SQL layer and the wire-protocol front end (crates/server). The public
//! signatures below are fixed; bodies are the SQL layer's.
//!
//! A `Session` is driven from one OS thread at a time (the connection's backend thread); all
//! methods block.
//!
//! Transaction states follow PostgreSQL: *idle* (each statement autocommits), *in block* (after
//! BEGIN), *failed* (an error in a block: everything but ROLLBACK/COMMIT gets 25P02), and the
//! *implicit* block a multi-statement simple query runs in. COPY contract: after
//! [`Session::copy_data`] returns an error the COPY is over; the front end discards the rest of
//! the stream and does not call [`Session::copy_done`] (it would get 08P01).

use crate::copy::CopyState;
use crate::exec::{self, ExecCtx};
use crate::guc;
use crate::literals;
use crate::plan::{self, Plan, Planner};
use crate::preparse;
use crate::storage::{CommitOpts, Engine, Transaction};
use parking_lot::Mutex;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use walnut_common::{DataType, Error, Result, SqlState, Value};

/// One output column.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnDesc {
    /// Column label as PostgreSQL would print it (`abalance`, `count`, `?column?`).
    pub name: String,
    /// Its type (the OID goes into RowDescription).
    pub ty: DataType,
}

/// What a statement produced.
#[derive(Clone, Debug)]
pub enum Output {
    /// A result set, then CommandComplete with `tag` (`SELECT 3`, `SHOW`).
    Rows {
        /// Column descriptions.
        columns: Arc<Vec<ColumnDesc>>,
        /// The rows; values match `columns` types (or NULL).
        rows: Vec<Vec<Value>>,
        /// Command tag.
        tag: String,
    },
    /// CommandComplete only (`INSERT 0 1`, `UPDATE 1`, `BEGIN`, `CREATE TABLE`, ...).
    Command {
        /// Command tag.
        tag: String,
    },
    /// EmptyQueryResponse.
    Empty,
    /// `COPY ... FROM STDIN`: the front end sends CopyInResponse (text format, `columns` columns),
    /// feeds CopyData to [`Session::copy_data`], then calls [`Session::copy_done`] or
    /// [`Session::copy_fail`].
    CopyIn {
        /// Number of columns in the COPY.
        columns: usize,
    },
}

/// Transaction status for ReadyForQuery: `I`, `T` or `E`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InBlock,
    /// `E`: in a failed transaction block (commands ignored until ROLLBACK).
    Failed,
}

/// A NOTICE or WARNING to send before the result (e.g. DROP TABLE IF EXISTS of a missing table).
#[derive(Clone, Debug)]
pub struct Notice {
    /// `NOTICE` or `WARNING`.
    pub severity: &'static str,
    /// SQLSTATE (`00000` for plain notices).
    pub sqlstate: SqlState,
    /// Message.
    pub message: String,
}

/// A parsed and planned statement, shared by the plan cache and the front end's statement store.
#[derive(Debug)]
pub struct Prepared {
    /// The statement text.
    pub sql: String,
    /// Parameter types, `$1` first (inferred where the client sent none).
    pub param_types: Vec<DataType>,
    /// Result columns, or `None` if the statement returns no rows (Describe answers NoData).
    pub columns: Option<Arc<Vec<ColumnDesc>>>,
    /// The current plan; replaced if the catalog changed under it.
    plan: Mutex<Arc<Plan>>,
    /// The parsed statement, to plan again (`None` for utility commands, which need no catalog).
    stmt: Option<sqlparser::ast::Statement>,
}

/// Transaction-block state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// No block: each statement commits on its own.
    Idle,
    /// Running a multi-statement simple query outside a block.
    Implicit,
    /// After BEGIN.
    Explicit,
    /// An error happened in the block.
    Failed,
}

/// Session GUC values.
struct Gucs {
    /// Values RESET returns to: server defaults and startup options.
    reset_values: HashMap<&'static str, String>,
    /// Values set with SET (session level).
    session: HashMap<&'static str, String>,
    /// SET LOCAL values, dropped at transaction end.
    local: HashMap<&'static str, String>,
    /// Session values as of transaction start, restored on rollback.
    saved: Option<HashMap<&'static str, String>>,
    /// Cached from synchronous_commit / commit_delay / commit_siblings.
    commit: CommitOpts,
    /// Cached `statement_timeout`, ms (0: none).
    statement_timeout_ms: u64,
}

impl Gucs {
    fn get(&self, def: &'static guc::GucDef) -> String {
        self.local
            .get(def.name)
            .or_else(|| self.session.get(def.name))
            .or_else(|| self.reset_values.get(def.name))
            .cloned()
            .unwrap_or_else(|| def.default.to_string())
    }

    fn refresh(&mut self) {
        let get = |n: &str| self.get(guc::find(n).expect("registered"));
        let timeout_ms = guc::value_as_i64("statement_timeout", &get("statement_timeout"))
            .unwrap_or(0)
            .max(0) as u64;
        self.commit = CommitOpts {
            synchronous: guc::value_as_bool("synchronous_commit", &get("synchronous_commit"))
                .unwrap_or(true),
            commit_delay_us: guc::value_as_i64("commit_delay", &get("commit_delay")).unwrap_or(0)
                as u32,
            commit_siblings: guc::value_as_i64("commit_siblings", &get("commit_siblings"))
                .unwrap_or(5) as u32,
        };
        self.statement_timeout_ms = timeout_ms;
    }

    /// Ends a transaction: SET LOCAL values go; on rollback, SETs made in it are undone.
    fn end_txn(&mut self, committed: bool) {
        if let Some(saved) = self.saved.take() {
            if !committed {
                self.session = saved;
            }
        }
        self.local.clear();
        self.refresh();
    }
}

/// Bounded plan cache keyed by (text, parameter OIDs).
/// (parameter OIDs, statement, last use).
type CacheEntry = (Vec<u32>, Arc<Prepared>, u64);

struct PlanCache {
    map: HashMap<String, Vec<CacheEntry>>,
    len: usize,
    tick: u64,
}

const PLAN_CACHE_CAPACITY: usize = 1024;

impl PlanCache {
    fn get(&mut self, sql: &str, oids: &[u32]) -> Option<Arc<Prepared>> {
        self.tick += 1;
        let tick = self.tick;
        let entry = self.map.get_mut(sql)?.iter_mut().find(|e| e.0 == oids)?;
        entry.2 = tick;
        Some(entry.1.clone())
    }

    fn put(&mut self, oids: &[u32], p: Arc<Prepared>) {
        if self.len >= PLAN_CACHE_CAPACITY {
            // Evict the least recently used half.
            let mut ticks: Vec<u64> = self.map.values().flatten().map(|e| e.2).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() / 2];
            for v in self.map.values_mut() {
                v.retain(|e| e.2 > cut);
            }
            self.map.retain(|_, v| !v.is_empty());
            self.len = self.map.values().map(Vec::len).sum();
        }
        self.tick += 1;
        self.map
            .entry(p.sql.clone())
            .or_default()
            .push((oids.to_vec(), p, self.tick));
        self.len += 1;
    }
}

/// One client session.
pub struct Session {
    engine: Arc<dyn Engine>,
    txn: Option<Box<dyn Transaction>>,
    block: Block,
    /// Transaction start (CURRENT_TIMESTAMP), µs since 2000-01-01.
    txn_start: i64,
    gucs: Gucs,
    notices: Vec<Notice>,
    cancel: Arc<AtomicBool>,
    cache: PlanCache,
    /// Parse trees of simple-query statements by their literal-free shape.
    parse_cache: literals::ParseCache,
    copy: Option<CopyState>,
    /// When the running statement's `statement_timeout` expires.
    deadline: Option<std::time::Instant>,
}

/// Session-level GUC defaults from walnut.conf and the command line (name -> value text).
pub type GucDefaults = Vec<(String, String)>;

/// A statement of a simple query, parsed.
enum Parsed {
    Plan(Box<Plan>),
    Ast(Box<sqlparser::ast::Statement>),
}

/// Startup-packet keys that are not GUCs.
const NON_GUC_STARTUP_KEYS: &[&str] = &["user", "database", "replication", "options"];

fn parse_one(sql: &str) -> Result<Parsed> {
    if let Some(p) = preparse::preparse(sql)? {
        return Ok(Parsed::Plan(Box::new(p)));
    }
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| {
        let msg = e.to_string();
        let msg = msg
            .strip_prefix("sql parser error: ")
            .unwrap_or(&msg)
            .to_string();
        Error::syntax(msg)
    })?;
    match stmts.len() {
        0 => Ok(Parsed::Plan(Box::new(Plan::Empty))),
        1 => Ok(Parsed::Ast(Box::new(stmts.pop().expect("one statement")))),
        _ => Err(Error::syntax(
            "cannot insert multiple commands into a prepared statement",
        )),
    }
}

fn type_from_oid(oid: u32) -> Result<Option<DataType>> {
    Ok(Some(match oid {
        0 => return Ok(None),
        16 => DataType::Bool,
        21 => DataType::Int2,
        23 => DataType::Int4,
        20 => DataType::Int8,
        700 | 701 => DataType::Float8,
        25 | 705 => DataType::Text,
        1043 => DataType::Varchar(None),
        1042 => DataType::Text,
        1114 => DataType::Timestamp,
        other => {
            return Err(Error::unsupported(format!(
                "parameter type with OID {other}"
            )))
        }
    }))
}

fn in_failed_block() -> Error {
    Error::user(
        SqlState::IN_FAILED_SQL_TRANSACTION,
        "current transaction is aborted, commands ignored until end of transaction block",
    )
}

fn command(tag: impl Into<String>) -> Output {
    Output::Command { tag: tag.into() }
}

impl Session {
    /// Starts a session. `defaults` are the server's settings; `options` are the startup packet's
    /// settings (from `options=-c name=value` / PGOPTIONS, and other startup parameters).
    ///
    /// # Errors
    /// 42704 unknown parameter, 22023 invalid value, 55P02 for settings that cannot change per
    /// session.
    pub fn new(
        engine: Arc<dyn Engine>,
        defaults: &GucDefaults,
        options: &[(String, String)],
    ) -> Result<Session> {
        let mut reset_values = HashMap::new();
        for (name, value) in defaults {
            let def = guc::lookup(name)?;
            reset_values.insert(def.name, guc::check(def.name, value)?);
        }
        for (name, value) in options {
            if NON_GUC_STARTUP_KEYS
                .iter()
                .any(|k| k.eq_ignore_ascii_case(name))
                || name.starts_with("_pq_.")
            {
                continue;
            }
            let def = guc::lookup(name)?;
            check_settable(def)?;
            reset_values.insert(def.name, guc::check(def.name, value)?);
        }
        let mut gucs = Gucs {
            reset_values,
            session: HashMap::new(),
            local: HashMap::new(),
            saved: None,
            commit: CommitOpts::default(),
            statement_timeout_ms: 0,
        };
        gucs.refresh();
        Ok(Session {
            engine,
            txn: None,
            block: Block::Idle,
            txn_start: 0,
            gucs,
            notices: Vec::new(),
            cancel: Arc::new(AtomicBool::new(false)),
            cache: PlanCache {
                map: HashMap::new(),
                len: 0,
                tick: 0,
            },
            parse_cache: literals::ParseCache::default(),
            copy: None,
            deadline: None,
        })
    }

    /// Simple Query: runs each `;`-separated statement in order. Returns one result per statement
    /// run; after the first error nothing more runs and the error is the last element. Outside a
    /// transaction block a multi-statement string runs as one implicit transaction, as PostgreSQL
    /// does.
    pub fn simple_query(&mut self, sql: &str) -> Vec<Result<Output>> {
        self.cancel.store(false, Ordering::Relaxed);
        self.abandon_copy();
        let pieces = preparse::split_statements(sql);
        if pieces.is_empty() {
            return vec![Ok(Output::Empty)];
        }
        let mut parsed = Vec::with_capacity(pieces.len());
        for p in &pieces {
            match self.parse_simple(p) {
                Ok(x) => parsed.push(x),
                Err(e) => {
                    if self.block == Block::Explicit {
                        self.fail_block();
                    }
                    return vec![Err(e)];
                }
            }
        }
        if parsed.len() > 1 && self.block == Block::Idle {
            self.block = Block::Implicit;
        }
        let mut out = Vec::with_capacity(parsed.len());
        for p in &parsed {
            let r = match p {
                Parsed::Plan(plan) => self.run_plan(plan, &[]),
                Parsed::Ast(stmt) => self.run_data(Work::Ast(stmt), &[]),
            };
            let stop = r.is_err() || matches!(r, Ok(Output::CopyIn { .. }));
            out.push(r);
            if stop {
                break;
            }
        }
        if self.block == Block::Implicit && self.copy.is_none() {
            if let Err(e) = self.commit_txn() {
                out.push(Err(e));
            }
        }
        out
    }

    /// Parses one statement of a simple query, through the parse cache for statements that
    /// differ only in their literals (`literals.rs`).
    ///
    /// # Errors
    /// As [`parse_one`].
    fn parse_simple(&mut self, sql: &str) -> Result<Parsed> {
        if let Some(p) = preparse::preparse(sql)? {
            return Ok(Parsed::Plan(Box::new(p)));
        }
        let Some((key, lits)) = literals::shape(sql) else {
            return parse_one(sql);
        };
        if let Some(t) = self.parse_cache.get(&key) {
            return Ok(Parsed::Ast(Box::new(t.instantiate(&lits))));
        }
        let parsed = parse_one(sql)?;
        if let Parsed::Ast(stmt) = &parsed {
            if let Some(t) = literals::Template::new((**stmt).clone(), &lits) {
                self.parse_cache.put(key, t);
            }
        }
        Ok(parsed)
    }

    /// Parse: parses and plans `sql`; `param_oids[i]` is the client's type for `$i+1`
    /// (0 = unspecified: inferred from context). Cached by (text, param oids), so a repeated
    /// Parse of the same text does not parse again.
    ///
    /// # Errors
    /// 42601 syntax errors, 42P01/42703 unknown names, 0A000 unsupported features.
    pub fn prepare(&mut self, sql: &str, param_oids: &[u32]) -> Result<Arc<Prepared>> {
        if let Some(p) = self.cache.get(sql, param_oids) {
            if self.block == Block::Failed && !is_exit(&p.plan.lock()) {
                return Err(in_failed_block());
            }
            return Ok(p);
        }
        let pieces = preparse::split_statements(sql);
        let parsed = match pieces.as_slice() {
            [] => Parsed::Plan(Box::new(Plan::Empty)),
            [one] => parse_one(one)?,
            _ => {
                return Err(Error::syntax(
                    "cannot insert multiple commands into a prepared statement",
                ))
            }
        };
        let mut params = Vec::with_capacity(param_oids.len());
        for &oid in param_oids {
            params.push(type_from_oid(oid)?);
        }
        let (plan, stmt, params) = match parsed {
            Parsed::Plan(p) => {
                if self.block == Block::Failed && !is_exit(&p) {
                    return Err(in_failed_block());
                }
                (*p, None, params)
            }
            Parsed::Ast(stmt) => {
                if self.block == Block::Failed {
                    return Err(in_failed_block());
                }
                let (plan, params) = self.plan_ast(&stmt, params)?;
                (plan, Some(*stmt), params)
            }
        };
        let prepared = Arc::new(Prepared {
            sql: sql.to_string(),
            param_types: params
                .into_iter()
                .map(|p| p.unwrap_or(DataType::Text))
                .collect(),
            columns: plan.columns(),
            plan: Mutex::new(Arc::new(plan)),
            stmt,
        });
        self.cache.put(param_oids, prepared.clone());
        Ok(prepared)
    }

    /// Plans a statement in the current transaction, or in a throwaway one.
    fn plan_ast(
        &mut self,
        stmt: &sqlparser::ast::Statement,
        params: Vec<Option<DataType>>,
    ) -> Result<(Plan, Vec<Option<DataType>>)> {
        let engine = self.engine.clone();
        let mut temp;
        let txn: &mut dyn Transaction = match self.txn.as_deref_mut() {
            Some(t) => t,
            None => {
                temp = engine.begin(self.cancel.clone())?;
                temp.new_statement();
                &mut *temp
            }
        };
        let mut planner = Planner {
            txn,
            engine: &*engine,
            params,
        };
        let plan = planner.plan(stmt)?;
        Ok((plan, planner.params))
    }

    /// Execute: runs a prepared statement with parameter values (already converted to
    /// `param_types`, NULL allowed). Outside a transaction block it autocommits.
    ///
    /// # Errors
    /// Any statement error; in a transaction block the transaction becomes failed.
    pub fn execute(&mut self, stmt: &Prepared, params: Vec<Value>) -> Result<Output> {
        self.cancel.store(false, Ordering::Relaxed);
        self.abandon_copy();
        if params.len() != stmt.param_types.len() {
            return Err(Error::user(
                SqlState::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement \"\" requires {}",
                    params.len(),
                    stmt.param_types.len()
                ),
            ));
        }
        let plan = stmt.plan.lock().clone();
        if plan.table_deps().is_some() {
            self.run_data(Work::Prepared(stmt, plan), &params)
        } else {
            self.run_plan(&plan, &params)
        }
    }

    /// Feeds COPY data (any chunking of the text-format stream).
    ///
    /// # Errors
    /// 22P04 malformed lines, conversion errors, constraint violations.
    pub fn copy_data(&mut self, data: &[u8]) -> Result<()> {
        let (Some(state), Some(txn)) = (self.copy.as_mut(), self.txn.as_deref_mut()) else {
            return Ok(());
        };
        if let Err(e) = state.feed(txn, data, &self.cancel) {
            let autocommit = state.autocommit;
            self.copy = None;
            return self.finish_statement(Err(e), autocommit).map(|_| ());
        }
        Ok(())
    }

    /// Ends COPY successfully: returns `Command { tag: "COPY n" }`.
    ///
    /// # Errors
    /// As for [`Session::copy_data`] (for a last line without newline).
    pub fn copy_done(&mut self) -> Result<Output> {
        let (Some(mut state), Some(txn)) = (self.copy.take(), self.txn.as_deref_mut()) else {
            return Err(Error::user(
                SqlState::PROTOCOL_VIOLATION,
                "COPY is not in progress",
            ));
        };
        let r = state
            .finish(txn)
            .map(|_| command(format!("COPY {}", state.rows)));
        self.finish_statement(r, state.autocommit)
    }

    /// Client sent CopyFail: abort the COPY and return the error to report (57014-like
    /// "COPY from stdin failed: msg").
    pub fn copy_fail(&mut self, msg: &str) -> Error {
        let err = Error::user(
            SqlState::QUERY_CANCELED,
            format!("COPY from stdin failed: {msg}"),
        );
        match self.copy.take() {
            Some(state) => match self.finish_statement(Err(err), state.autocommit) {
                Err(e) => e,
                Ok(_) => unreachable!("finish_statement passes errors through"),
            },
            None => err,
        }
    }

    /// Extended-protocol Sync: ends an implicit transaction (commits if it succeeded).
    ///
    /// # Errors
    /// Commit errors.
    pub fn sync(&mut self) -> Result<()> {
        if self.block == Block::Implicit
            || (self.block == Block::Idle && self.txn.is_some() && self.copy.is_none())
        {
            return self.commit_txn();
        }
        Ok(())
    }

    /// Transaction status for ReadyForQuery.
    pub fn txn_status(&self) -> TxnStatus {
        match self.block {
            Block::Idle | Block::Implicit => TxnStatus::Idle,
            Block::Explicit => TxnStatus::InBlock,
            Block::Failed => TxnStatus::Failed,
        }
    }

    /// Notices produced since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    /// Flag the front end sets on a CancelRequest for this session; the running statement
    /// stops with 57014 at its next check.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// ParameterStatus values to send after authentication (server_version, server_encoding,
    /// client_encoding, DateStyle, TimeZone, integer_datetimes, standard_conforming_strings,
    /// application_name, is_superuser, session_authorization).
    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        [
            "server_version",
            "server_encoding",
            "client_encoding",
            "DateStyle",
            "TimeZone",
            "integer_datetimes",
            "standard_conforming_strings",
            "application_name",
            "is_superuser",
            "session_authorization",
            "IntervalStyle",
        ]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                self.gucs.get(guc::find(n).expect("registered")),
            )
        })
        .collect()
    }

    /// Called when the client disconnects: rolls back any open transaction.
    pub fn terminate(&mut self) {
        self.copy = None;
        self.rollback_txn();
        self.block = Block::Idle;
    }

    // ---- transaction plumbing ----

    /// A new command while a COPY was still open (the front end never ended it): the COPY
    /// fails as if the client had sent CopyFail.
    fn abandon_copy(&mut self) {
        if self.copy.is_some() {
            let _ = self.copy_fail("COPY was not ended");
        }
    }

    fn ensure_txn(&mut self) -> Result<()> {
        if self.txn.is_none() {
            self.txn = Some(self.engine.begin(self.cancel.clone())?);
            self.txn_start = walnut_common::value::now_timestamp();
        }
        Ok(())
    }

    fn commit_txn(&mut self) -> Result<()> {
        self.block = Block::Idle;
        let r = match self.txn.take() {
            Some(t) => t.commit(self.gucs.commit),
            None => Ok(()),
        };
        self.gucs.end_txn(r.is_ok());
        r
    }

    fn rollback_txn(&mut self) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
        self.gucs.end_txn(false);
    }

    /// An error inside a block: the engine transaction ends now, the block stays failed until
    /// ROLLBACK (SETs are undone then).
    fn fail_block(&mut self) {
        if let Some(t) = self.txn.take() {
            t.rollback();
        }
        self.block = Block::Failed;
    }

    /// Applies PostgreSQL's end-of-statement rules: autocommit on success, rollback or a failed
    /// block on error.
    fn finish_statement(&mut self, r: Result<Output>, autocommit: bool) -> Result<Output> {
        match r {
            Ok(out) => {
                if autocommit && self.block == Block::Idle {
                    self.commit_txn()?;
                } else if autocommit && self.block == Block::Implicit && self.copy.is_none() {
                    // COPY that ran as the last statement of an implicit block.
                    self.commit_txn()?;
                }
                Ok(out)
            }
            Err(e) => {
                if e.sqlstate == SqlState::QUERY_CANCELED {
                    self.cancel.store(false, Ordering::Relaxed);
                }
                match self.block {
                    Block::Explicit => self.fail_block(),
                    Block::Failed => {}
                    Block::Idle | Block::Implicit => {
                        self.rollback_txn();
                        self.block = Block::Idle;
                    }
                }
                Err(e)
            }
        }
    }

    /// Runs a statement that needs no catalog-dependent plan (utility, transaction control, or
    /// a freshly planned one).
    fn run_plan(&mut self, plan: &Plan, params: &[Value]) -> Result<Output> {
        match plan {
            Plan::Begin => return self.do_begin(),
            Plan::Commit => return self.do_commit(),
            Plan::Rollback => return self.do_rollback(),
            _ => {}
        }
        if self.block == Block::Failed {
            return Err(in_failed_block());
        }
        match plan {
            Plan::Empty => Ok(Output::Empty),
            Plan::Set { name, value, local } => self.do_set(name, value.as_deref(), *local),
            Plan::SetNoop => Ok(command("SET")),
            Plan::Reset { name } => self.do_reset(name.as_deref()),
            Plan::Show { name } => self.do_show(name.as_deref()),
            Plan::Checkpoint => {
                self.engine.checkpoint()?;
                Ok(command("CHECKPOINT"))
            }
            Plan::Vacuum { analyze_only } => {
                if *analyze_only {
                    return Ok(command("ANALYZE"));
                }
                if self.block != Block::Idle {
                    let e = Error::user(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "VACUUM cannot run inside a transaction block",
                    );
                    return self.finish_statement(Err(e), false);
                }
                Ok(command("VACUUM"))
            }
            Plan::Copy(cp) => self.start_copy(cp),
            _ => self.run_data(Work::Planned(plan), params),
        }
    }

    fn do_begin(&mut self) -> Result<Output> {
        match self.block {
            Block::Idle | Block::Implicit => {
                self.ensure_txn()?;
                self.block = Block::Explicit;
            }
            Block::Explicit => self.notices.push(Notice {
                severity: "WARNING",
                sqlstate: SqlState::ACTIVE_SQL_TRANSACTION,
                message: "there is already a transaction in progress".into(),
            }),
            Block::Failed => return Err(in_failed_block()),
        }
        Ok(command("BEGIN"))
    }

    fn no_txn_warning(&mut self) {
        self.notices.push(Notice {
            severity: "WARNING",
            sqlstate: SqlState("25P01"),
            message: "there is no transaction in progress".into(),
        });
    }

    fn do_commit(&mut self) -> Result<Output> {
        match self.block {
            Block::Idle => {
                self.no_txn_warning();
                Ok(command("COMMIT"))
            }
            Block::Explicit | Block::Implicit => {
                self.commit_txn()?;
                Ok(command("COMMIT"))
            }
            Block::Failed => {
                self.rollback_txn();
                self.block = Block::Idle;
                Ok(command("ROLLBACK"))
            }
        }
    }

    fn do_rollback(&mut self) -> Result<Output> {
        if self.block == Block::Idle {
            self.no_txn_warning();
        }
        self.rollback_txn();
        self.block = Block::Idle;
        Ok(command("ROLLBACK"))
    }

    fn in_txn(&self) -> bool {
        self.block != Block::Idle
    }

    fn set_value(&mut self, def: &'static guc::GucDef, value: Option<String>, local: bool) {
        if self.in_txn() && self.gucs.saved.is_none() {
            self.gucs.saved = Some(self.gucs.session.clone());
        }
        match (value, local) {
            (Some(v), true) => {
                self.gucs.local.insert(def.name, v);
            }
            (None, true) => {
                let v = self
                    .gucs
                    .reset_values
                    .get(def.name)
                    .cloned()
                    .unwrap_or_else(|| def.default.to_string());
                self.gucs.local.insert(def.name, v);
            }
            (v, false) => {
                self.gucs.local.remove(def.name);
                match v {
                    Some(v) => self.gucs.session.insert(def.name, v),
                    None => self.gucs.session.remove(def.name),
                };
            }
        }
        self.gucs.refresh();
    }

    fn do_set(&mut self, name: &str, value: Option<&str>, local: bool) -> Result<Output> {
        let r = (|| {
            let def = guc::lookup(name)?;
            check_settable(def)?;
            let value = value.map(|v| guc::check(def.name, v)).transpose()?;
            Ok((def, value))
        })();
        let (def, value) = match r {
            Ok(x) => x,
            Err(e) => return self.finish_statement(Err(e), false),
        };
        if local && !self.in_txn() {
            self.notices.push(Notice {
                severity: "WARNING",
                sqlstate: SqlState("25P01"),
                message: "SET LOCAL can only be used in transaction blocks".into(),
            });
            return Ok(command("SET"));
        }
        self.set_value(def, value, local);
        Ok(command("SET"))
    }

    fn do_reset(&mut self, name: Option<&str>) -> Result<Output> {
        match name {
            None => {
                let names: Vec<&'static guc::GucDef> = guc::REGISTRY
                    .iter()
                    .filter(|d| d.context == guc::Context::User)
                    .collect();
                for d in names {
                    self.set_value(d, None, false);
                }
            }
            Some(n) => {
                let def = match guc::lookup(n).and_then(|d| check_settable(d).map(|_| d)) {
                    Ok(d) => d,
                    Err(e) => return self.finish_statement(Err(e), false),
                };
                self.set_value(def, None, false);
            }
        }
        Ok(command("RESET"))
    }

    fn do_show(&mut self, name: Option<&str>) -> Result<Output> {
        match name {
            Some(n) => {
                let def = match guc::lookup(n) {
                    Ok(d) => d,
                    Err(e) => return self.finish_statement(Err(e), false),
                };
                let columns = Arc::new(vec![ColumnDesc {
                    name: def.name.to_string(),
                    ty: DataType::Text,
                }]);
                Ok(Output::Rows {
                    columns,
                    rows: vec![vec![Value::Text(self.gucs.get(def))]],
                    tag: "SHOW".into(),
                })
            }
            None => {
                let mut defs: Vec<&'static guc::GucDef> = guc::REGISTRY.iter().collect();
                defs.sort_by_key(|d| d.name.to_ascii_lowercase());
                let rows = defs
                    .into_iter()
                    .map(|d| {
                        vec![
                            Value::Text(d.name.to_string()),
                            Value::Text(self.gucs.get(d)),
                            Value::Text(d.description.to_string()),
                        ]
                    })
                    .collect();
                Ok(Output::Rows {
                    columns: plan::show_all_columns(),
                    rows,
                    tag: "SHOW".into(),
                })
            }
        }
    }

    fn start_copy(&mut self, cp: &plan::CopyPlan) -> Result<Output> {
        let autocommit = self.block != Block::Explicit;
        if let Err(e) = self.ensure_txn() {
            return self.finish_statement(Err(e), autocommit);
        }
        let txn = self.txn.as_deref_mut().expect("ensured");
        txn.new_statement();
        let r = (|| {
            let def = txn
                .table(&cp.table)?
                .ok_or_else(|| plan::undefined_table(&cp.table))?;
            let targets = match &cp.columns {
                None => (0..def.columns.len()).collect(),
                Some(cols) => cols
                    .iter()
                    .map(|c| {
                        def.column_index(c).ok_or_else(|| {
                            Error::user(
                                SqlState::UNDEFINED_COLUMN,
                                format!(
                                    "column \"{c}\" of relation \"{}\" does not exist",
                                    def.name
                                ),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            };
            Ok((def, targets))
        })();
        match r {
            Ok((def, targets)) => {
                let columns = targets.len();
                self.copy = Some(CopyState {
                    def,
                    targets,
                    delimiter: cp.delimiter,
                    null: cp.null.as_bytes().to_vec(),
                    partial: Vec::new(),
                    line: 0,
                    rows: 0,
                    ended: false,
                    autocommit,
                });
                Ok(Output::CopyIn { columns })
            }
            Err(e) => self.finish_statement(Err(e), autocommit),
        }
    }

    /// Runs a catalog-dependent statement in the transaction (begun if needed), autocommitting
    /// outside a block.
    fn run_data(&mut self, work: Work<'_>, params: &[Value]) -> Result<Output> {
        if self.block == Block::Failed {
            return Err(in_failed_block());
        }
        let autocommit = self.block == Block::Idle;
        if let Err(e) = self.ensure_txn() {
            return self.finish_statement(Err(e), autocommit);
        }
        let mut txn = self.txn.take().expect("ensured");
        txn.new_statement();
        self.deadline = match self.gucs.statement_timeout_ms {
            0 => None,
            ms => Some(std::time::Instant::now() + std::time::Duration::from_millis(ms)),
        };
        let r = self.plan_and_run(&mut *txn, work, params);
        self.txn = Some(txn);
        self.finish_statement(r, autocommit)
    }

    fn plan_and_run(
        &mut self,
        txn: &mut dyn Transaction,
        work: Work<'_>,
        params: &[Value],
    ) -> Result<Output> {
        let engine = self.engine.clone();
        let plan: Arc<Plan> = match work {
            Work::Ast(stmt) => {
                let mut planner = Planner {
                    txn: &mut *txn,
                    engine: &*engine,
                    params: Vec::new(),
                };
                let plan = planner.plan(stmt)?;
                if !planner.params.is_empty() {
                    return Err(Error::user(
                        SqlState::UNDEFINED_PARAMETER,
                        "there is no parameter $1",
                    ));
                }
                Arc::new(plan)
            }
            Work::Prepared(p, plan) => validated_plan(txn, &*engine, p, plan)?,
            Work::Planned(plan) => return self.exec(txn, plan, params),
        };
        self.exec(txn, &plan, params)
    }

    fn exec(&mut self, txn: &mut dyn Transaction, plan: &Plan, params: &[Value]) -> Result<Output> {
        let ec = ExecCtx {
            params,
            now: self.txn_start,
            cancel: &self.cancel,
            engine: &*self.engine,
            deadline: self.deadline,
        };
        Ok(match plan {
            Plan::Select(s) => {
                let rows = exec::run_select(txn, s, &ec)?;
                let tag = format!("SELECT {}", rows.len());
                Output::Rows {
                    columns: s.columns.clone(),
                    rows,
                    tag,
                }
            }
            Plan::Insert(p) => command(format!("INSERT 0 {}", exec::run_insert(txn, p, &ec)?)),
            Plan::Update(p) => command(format!("UPDATE {}", exec::run_update(txn, p, &ec)?)),
            Plan::Delete(p) => command(format!("DELETE {}", exec::run_delete(txn, p, &ec)?)),
            Plan::CreateTable { def, if_not_exists } => {
                if *if_not_exists && txn.table(&def.name)?.is_some() {
                    self.notices.push(Notice {
                        severity: "NOTICE",
                        sqlstate: SqlState::DUPLICATE_TABLE,
                        message: format!("relation \"{}\" already exists, skipping", def.name),
                    });
                } else {
                    txn.create_table(def.clone())?;
                }
                command("CREATE TABLE")
            }
            Plan::DropTable { names, if_exists } => {
                let mut present = Vec::new();
                for n in names {
                    if txn.table(n)?.is_some() {
                        present.push(n);
                    } else if *if_exists {
                        self.notices.push(Notice {
                            severity: "NOTICE",
                            sqlstate: SqlState::SUCCESSFUL_COMPLETION,
                            message: format!("table \"{n}\" does not exist, skipping"),
                        });
                    } else {
                        return Err(Error::user(
                            SqlState::UNDEFINED_TABLE,
                            format!("table \"{n}\" does not exist"),
                        ));
                    }
                }
                for n in present {
                    txn.drop_table(n)?;
                }
                command("DROP TABLE")
            }
            Plan::Truncate { names } => {
                for n in names {
                    if txn.table(n)?.is_none() {
                        return Err(plan::undefined_table(n));
                    }
                }
                for n in names {
                    txn.truncate(n)?;
                }
                command("TRUNCATE TABLE")
            }
            Plan::AddPrimaryKey { table, columns } => {
                let def = txn
                    .table(table)?
                    .ok_or_else(|| plan::undefined_table(table))?;
                let mut idx = Vec::with_capacity(columns.len());
                for c in columns {
                    idx.push(def.column_index(c).ok_or_else(|| {
                        Error::user(
                            SqlState::UNDEFINED_COLUMN,
                            format!("column \"{c}\" of relation \"{table}\" does not exist"),
                        )
                    })?);
                }
                txn.add_primary_key(table, idx)?;
                command("ALTER TABLE")
            }
            other => {
                return Err(Error::internal(format!(
                    "unexpected plan in executor: {other:?}"
                )))
            }
        })
    }
}

/// What [`Session::run_data`] runs.
enum Work<'a> {
    /// Plan now, in the statement's transaction.
    Ast(&'a sqlparser::ast::Statement),
    /// A prepared statement and its current plan; re-planned if its table changed.
    Prepared(&'a Prepared, Arc<Plan>),
    /// An already planned statement (DDL).
    Planned(&'a Plan),
}

/// The prepared plan, re-planned if the table it was compiled against changed (dropped and
/// re-created, altered). The check is one catalog lookup and a pointer comparison in the common
/// case.
fn validated_plan(
    txn: &mut dyn Transaction,
    engine: &dyn Engine,
    p: &Prepared,
    plan: Arc<Plan>,
) -> Result<Arc<Plan>> {
    let Some(dep) = plan.table_deps() else {
        return Ok(plan);
    };
    let current = txn.table(&dep.name)?;
    let same = current
        .as_ref()
        .is_some_and(|c| Arc::ptr_eq(c, dep) || **c == **dep);
    if same {
        return Ok(plan);
    }
    let Some(stmt) = &p.stmt else { return Ok(plan) };
    let params = p.param_types.iter().cloned().map(Some).collect();
    let mut planner = Planner {
        txn,
        engine,
        params,
    };
    let fresh = Arc::new(planner.plan(stmt)?);
    let fresh_columns = fresh.columns();
    if fresh_columns.as_deref() != p.columns.as_deref() {
        return Err(Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            "cached plan must not change result type",
        ));
    }
    *p.plan.lock() = fresh.clone();
    Ok(fresh)
}

/// ROLLBACK and COMMIT may run in a failed block.
fn is_exit(p: &Plan) -> bool {
    matches!(p, Plan::Commit | Plan::Rollback)
}

fn check_settable(def: &guc::GucDef) -> Result<()> {
    let msg = match def.context {
        guc::Context::User => return Ok(()),
        guc::Context::Postmaster => format!(
            "parameter \"{}\" cannot be changed without restarting the server",
            def.name
        ),
        guc::Context::Sighup => format!("parameter \"{}\" cannot be changed now", def.name),
        guc::Context::Internal => format!("parameter \"{}\" cannot be changed", def.name),
    };
    Err(Error::user(SqlState::CANT_CHANGE_RUNTIME_PARAM, msg))
}

// The front end moves sessions between threads and shares prepared statements.
const _: fn() = || {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Session>();
    send_sync::<Prepared>();
};
