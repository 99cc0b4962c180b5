//! A client session: the API the wire-protocol front end (crates/server) drives. Each message
//! becomes one call; the session parses, plans and executes, and keeps the per-connection
//! state:
//!
//! - [`block`]: the transaction-block state machine and the engine transaction;
//! - [`gucs`]: the configuration parameters (SET, SET LOCAL, RESET, SHOW, `pg_settings`);
//! - [`plan_cache`]: prepared statements by text and parameter types;
//! - the parse cache of simple-query statements by their literal-free shape (`literals.rs`);
//! - an open COPY;
//! - who it is ([`Session::set_backend`]: pid and database name; [`Session::set_client`]:
//!   user, application and address), for `pg_backend_pid()`, its row in `pg_stat_activity`
//!   (`crate::activity`, kept current at each statement's start and before each
//!   ReadyForQuery) and the rows its COPYs and index builds show in the progress views
//!   (`crate::progress`).
//!
//! A `Session` is driven from one OS thread at a time (the connection's backend thread); all
//! methods block. COPY contract: after [`Session::copy_data`] returns an error the COPY is
//! over; the front end discards the rest of the stream and does not call
//! [`Session::copy_done`] (it would get 08P01).
//!
//! Statement flow: parse (`preparse`, else sqlparser) → plan (`planner`, inside the
//! statement's transaction, because the plan depends on the catalog it sees) → execute
//! (`exec::execute`, or the session itself for utility statements such as SET, BEGIN, COPY).

mod block;
mod gucs;
mod plan_cache;

pub use crate::types::{ColumnDesc, Notice, Output, TxnStatus};
pub use plan_cache::Prepared;

use crate::copy::CopyState;
use crate::env::Env;
use crate::exec::{self, ExecCtx};
use crate::expr::Ctx;
use crate::literals;
use crate::plan::{CopyPlan, Plan, TxnModes};
use crate::planner::Planner;
use crate::preparse;
use crate::progress::{BackendEntry, Reporter};
use crate::storage::{Engine, Isolation, Transaction};
use block::{in_failed_block, Block, TxnBlock};
use gucs::{check_settable, Gucs, PG_SETTINGS_COLUMNS};
use parking_lot::Mutex;
use plan_cache::PlanCache;
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::{ColumnDef, DataType, Error, Result, SqlState, Value};

/// One client session.
pub struct Session {
    engine: Arc<dyn Engine>,
    blk: TxnBlock,
    gucs: Gucs,
    notices: Vec<Notice>,
    cancel: Arc<AtomicBool>,
    cache: PlanCache,
    /// Parse trees of simple-query statements by their literal-free shape.
    parse_cache: literals::ParseCache,
    copy: Option<CopyState>,
    /// When the running statement's `statement_timeout` expires.
    deadline: Option<std::time::Instant>,
    /// The backend's process id; 0 until [`Session::set_backend`].
    pid: i32,
    /// The user (from [`Session::set_client`]) and the database (from
    /// [`Session::set_backend`]) of `current_user` and `current_database()`.
    who: (String, String),
    /// Registers this session's COPYs and index builds in the engine's progress views.
    progress: Option<Reporter>,
    /// The session's row in `pg_stat_activity` (from [`Session::set_backend`] on).
    activity: Option<BackendEntry>,
    /// Sequence values taken ahead, `currval` and `lastval`.
    seqs: std::cell::RefCell<crate::sequence::SessionSeqs>,
    /// A `DISCARD ALL` ran; the front end has not yet dropped its statements.
    discarded_all: bool,
}

/// A statement of a simple query, parsed.
enum Parsed {
    Plan(Box<Plan>),
    Ast(Box<sqlparser::ast::Statement>),
}

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
        3220 => DataType::PgLsn,
        other => {
            return Err(Error::unsupported(format!(
                "parameter type with OID {other}"
            )))
        }
    }))
}

/// The database name of a session the front end never named (`Session::set_backend`).
const DEFAULT_DATABASE: &str = "postgres";

fn command(tag: impl Into<String>) -> Output {
    Output::Command { tag: tag.into() }
}

/// What a statement sees besides its transaction: the engine's system views, the session's
/// `pg_settings`, and the server's configuration.
struct SessionEnv<'a> {
    engine: &'a dyn Engine,
    gucs: &'a Gucs,
    pid: i32,
    /// The session's user and database.
    who: &'a (String, String),
    progress: Option<&'a Reporter>,
    /// The session's sequence state.
    seqs: &'a std::cell::RefCell<crate::sequence::SessionSeqs>,
    /// The statement's transaction's sequences (`None` outside a transaction).
    txn_seqs: Option<Arc<dyn crate::storage::SequenceAccess>>,
    /// The transaction is READ ONLY.
    read_only: bool,
    /// The open transaction's isolation level and READ ONLY mode, for `current_setting`.
    modes: Option<(Isolation, bool)>,
    /// `set_config` calls of the statement, checked, for the session to apply when it
    /// succeeds ([`Session::apply_set_configs`]): parameter, value (`None`: RESET), local.
    set_configs: std::cell::RefCell<Vec<PendingSet>>,
}

/// A `set_config` call waiting for its statement to succeed.
type PendingSet = (
    &'static walnut_common::guc::GucDef,
    Option<walnut_common::guc::Val>,
    bool,
);

/// The [`SessionEnv`] of session `$s` over `$engine` (a clone of its `Arc<dyn Engine>`). A
/// macro, not a method, so that it borrows only the fields it names and the session's
/// transaction and COPY state can be borrowed mutably beside it.
macro_rules! session_env {
    ($s:ident, $engine:ident) => {
        SessionEnv {
            engine: &*$engine,
            gucs: &$s.gucs,
            pid: $s.pid,
            who: &$s.who,
            progress: $s.progress.as_ref(),
            seqs: &$s.seqs,
            txn_seqs: None,
            read_only: false,
            modes: None,
            set_configs: Default::default(),
        }
    };
}

impl Env for SessionEnv<'_> {
    fn view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)> {
        if name == "pg_settings" {
            let cols = PG_SETTINGS_COLUMNS
                .iter()
                .map(|(n, ty)| ColumnDef {
                    name: n.to_string(),
                    ty: ty.clone(),
                    not_null: false,
                    default: None,
                    identity: None,
                })
                .collect();
            let rows = self
                .gucs
                .registry()
                .iter()
                .map(|d| self.gucs.pg_settings_row(d))
                .collect();
            return Some((cols, rows));
        }
        if let Some(v) = crate::progress::view(self.progress.map(Reporter::registry), name) {
            return Some(v);
        }
        self.engine.system_view(name)
    }

    fn backend_pid(&self) -> i32 {
        self.pid
    }

    fn session_user(&self) -> String {
        self.who.0.clone()
    }

    fn database(&self) -> String {
        self.who.1.clone()
    }

    fn relation_size(&self, oid: i64, which: crate::storage::RelationSize) -> Option<i64> {
        self.engine.relation_size(oid, which)
    }

    fn wal_positions(&self) -> Result<crate::storage::WalPositions> {
        if self.engine.recovery().is_some() {
            return Err(Error::user(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "recovery is in progress",
            )
            .with_detail("WAL control functions cannot be executed during recovery."));
        }
        self.engine.wal_positions().ok_or_else(|| {
            Error::user(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "this server has no WAL",
            )
        })
    }

    fn recovery(&self) -> Option<crate::storage::RecoveryStatus> {
        self.engine.recovery()
    }

    fn recovery_control(&self, op: crate::storage::RecoveryControl) -> Result<bool> {
        self.engine.recovery_control(op)
    }

    fn progress(&self) -> Option<&Reporter> {
        self.progress
    }

    fn setting(&self, name: &str, missing_ok: bool) -> Result<Option<String>> {
        let def = match self.gucs.registry().lookup(name) {
            Ok(d) => d,
            Err(_) if missing_ok => return Ok(None),
            Err(e) => return Err(e),
        };
        let pending = self.set_configs.borrow();
        if let Some((_, v, _)) = pending.iter().rev().find(|(d, _, _)| d.name == def.name) {
            let v = v.clone().unwrap_or_else(|| self.gucs.reset_value(def));
            return Ok(Some(def.show(&v)));
        }
        Ok(Some(show_setting(self.gucs, def, self.modes)))
    }

    fn set_config(&self, name: &str, value: Option<&str>, local: bool) -> Result<String> {
        let def = self.gucs.registry().lookup(name)?;
        if def.name == crate::guc::TRANSACTION_ISOLATION.name
            || def.name == crate::guc::TRANSACTION_READ_ONLY.name
        {
            return Err(Error::unsupported(format!(
                "set_config of {} (use SET TRANSACTION)",
                def.name
            )));
        }
        check_settable(def)?;
        let value = value.map(|v| def.parse(v)).transpose()?;
        let shown = def.show(&value.clone().unwrap_or_else(|| self.gucs.reset_value(def)));
        self.set_configs.borrow_mut().push((def, value, local));
        Ok(shown)
    }

    fn sequence(&self, call: crate::sequence::SeqCall) -> Result<Value> {
        let acc = self
            .txn_seqs
            .as_deref()
            .ok_or_else(|| Error::unsupported("sequences in this engine"))?;
        self.seqs.borrow_mut().call(acc, self.read_only, call)
    }

    fn reload_conf(&self) -> Result<()> {
        if self.gucs.config().dir().is_none() {
            return Err(Error::user(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "this server has no configuration files to reload",
            ));
        }
        // Errors in the files are logged and change nothing, as PostgreSQL's SIGHUP.
        let _ = self.gucs.config().reload();
        Ok(())
    }
}

impl Session {
    /// Starts a session. `config` is the server's live configuration; `options` are the
    /// startup packet's settings (from `options=-c name=value` / PGOPTIONS, and other startup
    /// parameters; `user`, `database` and `replication` are skipped).
    ///
    /// # Errors
    /// 42704 unknown parameter, 22023/0A000 invalid value, 55P02 for settings that cannot
    /// change per session.
    pub fn new(
        engine: Arc<dyn Engine>,
        config: Arc<Config>,
        options: &[(String, String)],
    ) -> Result<Session> {
        let progress = engine
            .progress()
            .map(|r| Reporter::new(r, 0, DEFAULT_DATABASE));
        Ok(Session {
            engine,
            pid: 0,
            who: ("postgres".into(), DEFAULT_DATABASE.into()),
            progress,
            activity: None,
            blk: TxnBlock::new(),
            gucs: Gucs::new(config, options)?,
            notices: Vec::new(),
            cancel: Arc::new(AtomicBool::new(false)),
            cache: PlanCache::default(),
            parse_cache: literals::ParseCache::default(),
            copy: None,
            deadline: None,
            seqs: Default::default(),
            discarded_all: false,
        })
    }

    /// Tells the session who it is: `pid`, the backend's process id (as sent in
    /// BackendKeyData), and `database`, the database name the client connected with. They
    /// are what `pg_backend_pid()` returns and the `pid` and `datname` of the session's rows
    /// in the progress views. Until called: 0 and `postgres`.
    pub fn set_backend(&mut self, pid: i32, database: &str) {
        self.pid = pid;
        self.who.1 = database.to_string();
        let client = crate::activity::ClientIdentity {
            application_name: self.application_name(),
            ..Default::default()
        };
        if let Some(r) = &mut self.progress {
            *r = Reporter::new(r.registry_arc(), pid, database);
            self.activity = Some(r.backend(client));
        }
    }

    /// Tells the session who its client is (user, address, replication or not), for its row
    /// in `pg_stat_activity`; call after [`Session::set_backend`]. The row's
    /// `application_name` is the session's setting, whatever `client` says.
    pub fn set_client(&mut self, client: crate::activity::ClientIdentity) {
        if !client.user.is_empty() {
            self.who.0 = client.user.clone();
        }
        if let Some(a) = &self.activity {
            // The setting, which startup options (`-c application_name=...`) may have set.
            let client = crate::activity::ClientIdentity {
                application_name: self.application_name(),
                ..client
            };
            a.status.set_client(client);
        }
    }

    /// The session's `application_name` setting.
    fn application_name(&self) -> String {
        self.gucs
            .registry()
            .lookup("application_name")
            .map(|d| self.gucs.show(d))
            .unwrap_or_default()
    }

    /// `pg_stat_activity`: a statement with text `query` starts (and with it a transaction,
    /// unless one is open or the block failed).
    fn report_start(&self, query: impl FnOnce() -> Arc<str>) {
        if let Some(a) = &self.activity {
            let new_xact = self.blk.status() == TxnStatus::Idle && !self.blk.has_txn();
            a.status.start_statement(query(), new_xact);
        }
    }

    /// `pg_stat_activity`: ReadyForQuery is about to go out.
    fn report_ready(&self) {
        if let Some(a) = &self.activity {
            a.status.ready(self.blk.status());
        }
    }

    /// Simple Query: runs each `;`-separated statement in order. Returns one result per statement
    /// run; after the first error nothing more runs and the error is the last element. Outside a
    /// transaction block a multi-statement string runs as one implicit transaction, as PostgreSQL
    /// does.
    pub fn simple_query(&mut self, sql: &str) -> Vec<Result<Output>> {
        self.start_message();
        self.report_start(|| crate::activity::clip_query(sql));
        let out = self.run_simple_query(sql);
        // A COPY FROM STDIN is still running: its end reports.
        if !matches!(out.last(), Some(Ok(Output::CopyIn { .. }))) {
            self.report_ready();
        }
        out
    }

    fn run_simple_query(&mut self, sql: &str) -> Vec<Result<Output>> {
        let pieces = preparse::split_statements(sql);
        if pieces.is_empty() {
            return vec![Ok(Output::Empty)];
        }
        let mut parsed = Vec::with_capacity(pieces.len());
        for p in &pieces {
            match self.parse_simple(p) {
                Ok(x) => parsed.push(x),
                Err(e) => {
                    self.blk.parse_error();
                    return vec![Err(e)];
                }
            }
        }
        if parsed.len() > 1 {
            self.blk.begin_implicit();
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
        if self.blk.state() == Block::Implicit && self.copy.is_none() {
            if let Err(e) = self.blk.commit(&mut self.gucs, &mut self.notices) {
                out.push(Err(e));
            }
        }
        out
    }

    /// What every message that runs a statement does first: forget a stale cancel, end an
    /// abandoned COPY, take the server's reloaded settings.
    fn start_message(&mut self) {
        self.cancel.store(false, Ordering::Relaxed);
        self.abandon_copy();
        self.gucs.catch_up();
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
        let failed = self.blk.state() == Block::Failed;
        if let Some(p) = self.cache.get(sql, param_oids) {
            if failed && !is_exit(&p.plan.lock()) {
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
                if failed && !is_exit(&p) {
                    return Err(in_failed_block());
                }
                (*p, None, params)
            }
            Parsed::Ast(stmt) => {
                if failed {
                    return Err(in_failed_block());
                }
                let (plan, params) = self.plan_ast(&stmt, params)?;
                (plan, Some(*stmt), params)
            }
        };
        let prepared = Arc::new(Prepared {
            sql: Arc::from(sql),
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
        let env = session_env!(self, engine);
        let mut temp;
        let txn: &mut dyn Transaction = match self.blk.txn() {
            Some(t) => t,
            None => {
                temp = engine.begin(self.cancel.clone())?;
                temp.new_statement();
                &mut *temp
            }
        };
        let mut planner = Planner {
            txn,
            env: &env,
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
        self.start_message();
        self.report_start(|| stmt.sql.clone());
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
        let engine = self.engine.clone();
        let now = self.blk.start();
        let (Some(state), Some(txn)) = (self.copy.as_mut(), self.blk.txn()) else {
            return Ok(());
        };
        // (COPY FROM in a READ ONLY transaction was refused when it began.)
        let mut env = session_env!(self, engine);
        env.txn_seqs = txn.sequences();
        let ctx = Ctx {
            params: &[],
            now,
            env: &env,
        };
        if let Err(e) = state.feed(txn, data, &self.cancel, &ctx) {
            let autocommit = state.autocommit;
            self.copy = None;
            let r = self.finish_statement(Err(e), autocommit).map(|_| ());
            // The front end sends ErrorResponse and ReadyForQuery now.
            self.report_ready();
            return r;
        }
        Ok(())
    }

    /// Ends COPY successfully: returns `Command { tag: "COPY n" }`.
    ///
    /// # Errors
    /// As for [`Session::copy_data`] (for a last line without newline); 08P01 if no COPY is in
    /// progress.
    pub fn copy_done(&mut self) -> Result<Output> {
        let now = self.blk.start();
        let (Some(mut state), Some(txn)) = (self.copy.take(), self.blk.txn()) else {
            return Err(Error::user(
                SqlState::PROTOCOL_VIOLATION,
                "COPY is not in progress",
            ));
        };
        let engine = self.engine.clone();
        let mut env = session_env!(self, engine);
        env.txn_seqs = txn.sequences();
        let ctx = Ctx {
            params: &[],
            now,
            env: &env,
        };
        let r = state
            .finish(txn, &ctx)
            .map(|_| command(format!("COPY {}", state.rows)));
        txn.end_statement();
        let r = self.finish_statement(r, state.autocommit);
        self.report_ready();
        r
    }

    /// Client sent CopyFail: abort the COPY and return the error to report (57014
    /// "COPY from stdin failed: msg").
    pub fn copy_fail(&mut self, msg: &str) -> Error {
        let err = Error::new(
            walnut_common::ErrorKind::Cancelled,
            SqlState::QUERY_CANCELED,
            format!("COPY from stdin failed: {msg}"),
        );
        let err = match self.copy.take() {
            Some(state) => match self.finish_statement(Err(err), state.autocommit) {
                Err(e) => e,
                Ok(_) => unreachable!("finish_statement passes errors through"),
            },
            None => err,
        };
        self.report_ready();
        err
    }

    /// Extended-protocol Sync: ends an implicit transaction (commits if it succeeded).
    ///
    /// # Errors
    /// Commit errors.
    pub fn sync(&mut self) -> Result<()> {
        let implicit = self.blk.state() == Block::Implicit
            || (self.blk.state() == Block::Idle && self.blk.has_txn() && self.copy.is_none());
        let r = if implicit {
            self.blk.commit(&mut self.gucs, &mut self.notices)
        } else {
            Ok(())
        };
        self.report_ready();
        r
    }

    /// Transaction status for ReadyForQuery.
    pub fn txn_status(&self) -> TxnStatus {
        self.blk.status()
    }

    /// Whether a `DISCARD ALL` ran since the last call: the front end then deallocates its
    /// prepared statements and closes its portals (PostgreSQL's `DropAllPreparedStatements`
    /// and `PortalHashTableDeleteAll`), but the one running.
    pub fn take_discard_all(&mut self) -> bool {
        std::mem::take(&mut self.discarded_all)
    }

    /// `DISCARD` (PostgreSQL's `DiscardCommand`). ALL: RESET ALL, the plans and the sequence
    /// state; the front end then drops its statements and portals ([`Session::take_discard_all`]).
    /// walnut has no temporary tables, advisory locks or LISTEN, so TEMP and those parts of ALL
    /// have nothing to do.
    ///
    /// # Errors
    /// 25001 for `DISCARD ALL` in a transaction block.
    fn do_discard(&mut self, what: crate::plan::Discard) -> Result<Output> {
        use crate::plan::Discard;
        if what == Discard::All {
            if self.blk.in_block() {
                let e = Error::user(
                    SqlState::ACTIVE_SQL_TRANSACTION,
                    "DISCARD ALL cannot run inside a transaction block",
                );
                return self.finish_statement(Err(e), false);
            }
            self.do_reset(None)?;
            self.discarded_all = true;
        }
        if matches!(what, Discard::All | Discard::Plans) {
            self.cache.clear();
        }
        if matches!(what, Discard::All | Discard::Sequences) {
            *self.seqs.borrow_mut() = Default::default();
        }
        Ok(command(match what {
            Discard::All => "DISCARD ALL",
            Discard::Plans => "DISCARD PLANS",
            Discard::Sequences => "DISCARD SEQUENCES",
            Discard::Temp => "DISCARD TEMP",
        }))
    }

    /// Notices produced since the last call, those below `client_min_messages` left out.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        let mut notices = std::mem::take(&mut self.notices);
        notices.retain(|n| self.gucs.sends(n));
        notices
    }

    /// Flag the front end sets on a CancelRequest for this session; the running statement
    /// stops with 57014 at its next check.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// ParameterStatus values to send after authentication: the parameters PostgreSQL reports
    /// (`crate::guc::REPORTED`), with this session's values.
    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        crate::guc::REPORTED
            .iter()
            .map(|d| (d.name.to_string(), self.gucs.show(d)))
            .collect()
    }

    /// Called when the client disconnects: rolls back any open transaction.
    pub fn terminate(&mut self) {
        self.copy = None;
        self.blk.abort(&mut self.gucs);
    }

    /// A new command while a COPY was still open (the front end never ended it): the COPY
    /// fails as if the client had sent CopyFail.
    fn abandon_copy(&mut self) {
        if self.copy.is_some() {
            let _ = self.copy_fail("COPY was not ended");
        }
    }

    fn finish_statement(&mut self, r: Result<Output>, autocommit: bool) -> Result<Output> {
        let copy_open = self.copy.is_some();
        self.blk.finish_statement(
            r,
            autocommit,
            copy_open,
            &mut self.gucs,
            &mut self.notices,
            &self.cancel,
        )
    }

    /// Runs a statement that needs no catalog-dependent plan (utility, transaction control, or
    /// a freshly planned one).
    fn run_plan(&mut self, plan: &Plan, params: &[Value]) -> Result<Output> {
        match plan {
            Plan::Begin { modes } => {
                let r = self.blk.begin(
                    &*self.engine,
                    &self.cancel,
                    &mut self.notices,
                    *modes,
                    self.gucs.txn_defaults,
                );
                // An error ends an implicit block's transaction like any statement's.
                return match r {
                    Ok(out) => Ok(out),
                    Err(e) => self.finish_statement(Err(e), false),
                };
            }
            Plan::Commit => return self.blk.commit_command(&mut self.gucs, &mut self.notices),
            Plan::Rollback => {
                return Ok(self.blk.rollback_command(&mut self.gucs, &mut self.notices))
            }
            _ => {}
        }
        if self.blk.state() == Block::Failed {
            return Err(in_failed_block());
        }
        match plan {
            Plan::Empty => Ok(Output::Empty),
            Plan::Set { name, value, local } => self.do_set(name, value.as_deref(), *local),
            Plan::SetTransaction { modes } => self.set_transaction(*modes, true),
            Plan::Reset { name } => self.do_reset(name.as_deref()),
            Plan::Discard(what) => self.do_discard(*what),
            Plan::Show { name } => self.do_show(name.as_deref()),
            Plan::AlterSystem { name, value } => self.do_alter_system(name, value.as_deref()),
            Plan::Checkpoint => {
                self.engine.checkpoint()?;
                Ok(command("CHECKPOINT"))
            }
            Plan::Vacuum {
                analyze_only,
                verbose,
                freeze,
                tables,
            } => {
                if *analyze_only {
                    return Ok(command("ANALYZE"));
                }
                if self.blk.in_block() {
                    let e = Error::user(
                        SqlState::ACTIVE_SQL_TRANSACTION,
                        "VACUUM cannot run inside a transaction block",
                    );
                    return self.finish_statement(Err(e), false);
                }
                let entry = self.progress.as_ref().map(Reporter::vacuum);
                let opts = crate::storage::VacuumOptions {
                    verbose: *verbose,
                    freeze: *freeze,
                };
                let r = self.engine.vacuum(tables, opts, &self.cancel);
                drop(entry);
                let infos = match r {
                    Ok(m) => m,
                    Err(e) => return self.finish_statement(Err(e), false),
                };
                for message in infos {
                    self.notices.push(Notice::new(
                        "INFO",
                        SqlState::SUCCESSFUL_COMPLETION,
                        message,
                    ));
                }
                Ok(command("VACUUM"))
            }
            Plan::Copy(cp) => self.start_copy(cp),
            _ => self.run_data(Work::Planned(plan), params),
        }
    }

    /// `SET TRANSACTION`, `SET transaction_isolation` and `SET transaction_read_only`: in a
    /// block, sets the modes of its transaction ([`TxnBlock::set_modes`]); outside one, changes
    /// nothing (and `SET TRANSACTION` warns, `warn`).
    ///
    /// # Errors
    /// 25001 for a change of level, or to READ WRITE, after a query of the transaction; 0A000
    /// for REPEATABLE READ on a hot standby.
    fn set_transaction(&mut self, modes: TxnModes, warn: bool) -> Result<Output> {
        if !self.blk.in_block() {
            if !warn {
                return Ok(command("SET"));
            }
            self.notices.push(Notice::new(
                "WARNING",
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                "SET TRANSACTION can only be used in transaction blocks",
            ));
            return Ok(command("SET"));
        }
        let r = self
            .blk
            .ensure(&*self.engine, &self.cancel, self.gucs.txn_defaults)
            .and_then(|()| self.blk.set_modes(modes))
            .map(|()| command("SET"));
        self.finish_statement(r, false)
    }

    fn do_set(&mut self, name: &str, value: Option<&str>, local: bool) -> Result<Output> {
        for def in [
            &crate::guc::TRANSACTION_ISOLATION,
            &crate::guc::TRANSACTION_READ_ONLY,
        ] {
            if !name.eq_ignore_ascii_case(def.name) {
                continue;
            }
            let mut modes = TxnModes::default();
            match value.map(|v| def.parse(v)).transpose() {
                Ok(None) => {}
                Ok(Some(walnut_common::guc::Val::Bool(ro))) => modes.read_only = Some(ro),
                Ok(Some(v)) => modes.isolation = Some(crate::guc::isolation(&def.show(&v))),
                Err(e) => return self.finish_statement(Err(e), false),
            }
            return self.set_transaction(modes, false);
        }
        let r = (|| {
            let def = self.gucs.registry().lookup(name)?;
            check_settable(def)?;
            let value = value.map(|v| def.parse(v)).transpose()?;
            Ok((def, value))
        })();
        let (def, value) = match r {
            Ok(x) => x,
            Err(e) => return self.finish_statement(Err(e), false),
        };
        if local && !self.blk.in_block() {
            self.notices.push(Notice::new(
                "WARNING",
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                "SET LOCAL can only be used in transaction blocks",
            ));
            return Ok(command("SET"));
        }
        let in_txn = self.blk.in_block();
        self.gucs.set(def, value, local, in_txn);
        self.report_application_name(def.name);
        Ok(command("SET"))
    }

    /// `pg_stat_activity`: after a SET or RESET of `name`, the session's `application_name`
    /// (a SET LOCAL of it shows until the next SET or RESET, not only until the transaction
    /// ends).
    fn report_application_name(&self, name: &str) {
        if let Some(a) = self
            .activity
            .as_ref()
            .filter(|_| name.is_empty() || name == "application_name")
        {
            a.status.set_application_name(&self.application_name());
        }
    }

    fn do_reset(&mut self, name: Option<&str>) -> Result<Output> {
        let in_txn = self.blk.in_block();
        match name {
            None => {
                for d in self.gucs.user_params() {
                    self.gucs.set(d, None, false, in_txn);
                }
                self.report_application_name("");
            }
            Some(n) => {
                let def = match self
                    .gucs
                    .registry()
                    .lookup(n)
                    .and_then(|d| check_settable(d).map(|_| d))
                {
                    Ok(d) => d,
                    Err(e) => return self.finish_statement(Err(e), false),
                };
                self.gucs.set(def, None, false, in_txn);
                self.report_application_name(def.name);
            }
        }
        Ok(command("RESET"))
    }

    fn do_show(&mut self, name: Option<&str>) -> Result<Output> {
        match name {
            Some(n) => {
                let def = match self.gucs.registry().lookup(n) {
                    Ok(d) => d,
                    Err(e) => return self.finish_statement(Err(e), false),
                };
                let columns = Arc::new(vec![ColumnDesc {
                    name: def.name.to_string(),
                    ty: DataType::Text,
                }]);
                let value = show_setting(&self.gucs, def, self.blk.modes());
                Ok(Output::Rows {
                    columns,
                    rows: vec![vec![Value::Text(value)]],
                    tag: "SHOW".into(),
                })
            }
            None => {
                let rows = self
                    .gucs
                    .registry()
                    .iter()
                    .map(|d| {
                        vec![
                            Value::Text(d.name.to_string()),
                            Value::Text(self.gucs.show(d)),
                            Value::Text(d.description.to_string()),
                        ]
                    })
                    .collect();
                Ok(Output::Rows {
                    columns: crate::plan::show_all_columns(),
                    rows,
                    tag: "SHOW".into(),
                })
            }
        }
    }

    /// ALTER SYSTEM: rewrites the server's `walnut.auto.conf`; never in a transaction block.
    fn do_alter_system(&mut self, name: &str, value: Option<&str>) -> Result<Output> {
        let r = if self.blk.in_block() {
            Err(Error::user(
                SqlState::ACTIVE_SQL_TRANSACTION,
                "ALTER SYSTEM cannot run inside a transaction block",
            ))
        } else {
            self.gucs.config().alter_system(name, value)
        };
        match r {
            Ok(()) => Ok(command("ALTER SYSTEM")),
            Err(e) => self.finish_statement(Err(e), false),
        }
    }

    fn start_copy(&mut self, cp: &CopyPlan) -> Result<Output> {
        let autocommit = self.blk.state() != Block::Explicit;
        if let Err(e) = self
            .blk
            .ensure(&*self.engine, &self.cancel, self.gucs.txn_defaults)
        {
            return self.finish_statement(Err(e), autocommit);
        }
        if let Err(e) = check_writable(&*self.engine, self.blk.read_only(), Some("COPY FROM")) {
            return self.finish_statement(Err(e), autocommit);
        }
        self.blk.note_query();
        let txn = self.blk.txn().expect("ensured");
        txn.new_statement();
        match CopyState::start(txn, cp, autocommit, self.progress.as_ref()) {
            Ok(state) => {
                let columns = state.targets.len();
                self.copy = Some(state);
                Ok(Output::CopyIn { columns })
            }
            Err(e) => self.finish_statement(Err(e), autocommit),
        }
    }

    /// Runs a catalog-dependent statement in the transaction (begun if needed), autocommitting
    /// outside a block.
    fn run_data(&mut self, work: Work<'_>, params: &[Value]) -> Result<Output> {
        if self.blk.state() == Block::Failed {
            return Err(in_failed_block());
        }
        let autocommit = self.blk.state() == Block::Idle;
        if let Err(e) = self
            .blk
            .ensure(&*self.engine, &self.cancel, self.gucs.txn_defaults)
        {
            return self.finish_statement(Err(e), autocommit);
        }
        self.blk.note_query();
        let mut txn = self.blk.take().expect("ensured");
        txn.new_statement();
        self.deadline = match self.gucs.statement_timeout_ms {
            0 => None,
            ms => Some(std::time::Instant::now() + std::time::Duration::from_millis(ms)),
        };
        let mut r = self.plan_and_run(&mut *txn, work, params);
        if r.as_ref()
            .is_err_and(|e| e.sqlstate == SqlState::QUERY_CANCELED)
        {
            // The executor saw replay's cancel before the storage did.
            if let Some(conflict) = txn.recovery_conflict() {
                r = Err(conflict);
            }
        }
        txn.end_statement();
        self.blk.put(txn);
        self.finish_statement(r, autocommit)
    }

    /// Plans (if needed) and executes one statement: the seam between the planner and the
    /// executor.
    fn plan_and_run(
        &mut self,
        txn: &mut dyn Transaction,
        work: Work<'_>,
        params: &[Value],
    ) -> Result<Output> {
        let engine = self.engine.clone();
        let mut env = session_env!(self, engine);
        env.txn_seqs = txn.sequences();
        env.read_only = self.blk.read_only();
        env.modes = Some((txn.isolation(), self.blk.read_only()));
        let planned;
        let plan: &Plan = match work {
            Work::Ast(stmt) => {
                let mut planner = Planner {
                    txn: &mut *txn,
                    env: &env,
                    params: Vec::new(),
                };
                let plan = planner.plan(stmt)?;
                if !planner.params.is_empty() {
                    return Err(Error::user(
                        SqlState::UNDEFINED_PARAMETER,
                        "there is no parameter $1",
                    ));
                }
                planned = Arc::new(plan);
                &planned
            }
            Work::Prepared(p, plan) => {
                planned = plan_cache::validated_plan(txn, &env, p, plan)?;
                &planned
            }
            Work::Planned(plan) => plan,
        };
        let ec = ExecCtx {
            params,
            now: self.blk.start(),
            cancel: &self.cancel,
            env: &env,
            deadline: self.deadline,
        };
        check_writable(&*engine, self.blk.read_only(), plan.write_command())?;
        let out = exec::execute(txn, plan, &ec, &mut self.notices)?;
        let sets = env.set_configs.take();
        drop(env);
        self.apply_set_configs(sets);
        Ok(out)
    }

    /// Applies the `set_config` calls of a statement that succeeded, as `SET [LOCAL]`; a local
    /// one outside a transaction block ended with its statement (PostgreSQL's implicit
    /// transaction), so it is dropped.
    fn apply_set_configs(&mut self, sets: Vec<PendingSet>) {
        let in_txn = self.blk.in_block();
        for (def, value, local) in sets {
            if local && !in_txn {
                continue;
            }
            self.gucs.set(def, value, local, in_txn);
            self.report_application_name(def.name);
        }
    }
}

/// Parameter `def` as `SHOW` and `current_setting` print it: `transaction_isolation` and
/// `transaction_read_only` are the open transaction's modes (`modes`), else the ones the next
/// will have.
fn show_setting(
    gucs: &Gucs,
    def: &'static walnut_common::guc::GucDef,
    modes: Option<(Isolation, bool)>,
) -> String {
    let d = gucs.txn_defaults;
    let (level, ro) = modes.unwrap_or((d.isolation, d.read_only));
    if def.name == crate::guc::TRANSACTION_ISOLATION.name {
        match level {
            Isolation::ReadCommitted => "read committed",
            Isolation::RepeatableRead => "repeatable read",
        }
        .to_string()
    } else if def.name == crate::guc::TRANSACTION_READ_ONLY.name {
        (if ro { "on" } else { "off" }).to_string()
    } else {
        gucs.show(def)
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

/// In a READ ONLY transaction (`read_only`), or on a standby in recovery, a statement that
/// writes (`cmd`, [`Plan::write_command`]) fails before it runs, even if it would change no
/// row (PostgreSQL's `PreventCommandIfReadOnly`).
///
/// # Errors
/// 25006 `cannot execute COMMAND in a read-only transaction`.
fn check_writable(engine: &dyn Engine, read_only: bool, cmd: Option<&'static str>) -> Result<()> {
    match cmd {
        Some(cmd) if read_only || engine.recovery().is_some() => Err(Error::user(
            SqlState::READ_ONLY_SQL_TRANSACTION,
            format!("cannot execute {cmd} in a read-only transaction"),
        )),
        _ => Ok(()),
    }
}

/// ROLLBACK and COMMIT may run in a failed block.
fn is_exit(p: &Plan) -> bool {
    matches!(p, Plan::Commit | Plan::Rollback)
}

// The front end moves sessions between threads and shares prepared statements.
const _: fn() = || {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Session>();
    send_sync::<Prepared>();
};
