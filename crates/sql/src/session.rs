//! A client session: transaction state, GUCs, prepared statements and the plan cache.
//!
//! API CONTRACT between the SQL layer and the wire-protocol front end (crates/server). The public
//! signatures below are fixed; bodies are the SQL layer's.
//!
//! A `Session` is driven from one OS thread at a time (the connection's backend thread); all
//! methods block.

use crate::storage::Engine;
use std::sync::atomic::AtomicBool;
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
    // private: the plan
}

/// One client session.
pub struct Session {
    _engine: Arc<dyn Engine>,
}

/// Session-level GUC defaults from walnut.conf and the command line (name -> value text).
pub type GucDefaults = Vec<(String, String)>;

impl Session {
    /// Starts a session. `defaults` are the server's settings; `options` are the startup packet's
    /// settings (from `options=-c name=value` / PGOPTIONS, and other startup parameters).
    ///
    /// # Errors
    /// 42704 unknown parameter, 22023 invalid value, 55P02 for settings that cannot change per
    /// session.
    pub fn new(engine: Arc<dyn Engine>, defaults: &GucDefaults, options: &[(String, String)]) -> Result<Session> {
        let _ = (defaults, options);
        Ok(Session { _engine: engine })
    }

    /// Simple Query: runs each `;`-separated statement in order. Returns one result per statement
    /// run; after the first error nothing more runs and the error is the last element. Outside a
    /// transaction block a multi-statement string runs as one implicit transaction, as PostgreSQL
    /// does.
    pub fn simple_query(&mut self, sql: &str) -> Vec<Result<Output>> {
        let _ = sql;
        vec![Err(Error::unsupported("simple query"))]
    }

    /// Parse: parses and plans `sql`; `param_oids[i]` is the client's type for `$i+1`
    /// (0 = unspecified: inferred from context). Cached by (text, param oids), so a repeated
    /// Parse of the same text does not parse again.
    ///
    /// # Errors
    /// 42601 syntax errors, 42P01/42703 unknown names, 0A000 unsupported features.
    pub fn prepare(&mut self, sql: &str, param_oids: &[u32]) -> Result<Arc<Prepared>> {
        let _ = (sql, param_oids);
        Err(Error::unsupported("prepare"))
    }

    /// Execute: runs a prepared statement with parameter values (already converted to
    /// `param_types`, NULL allowed). Outside a transaction block it autocommits.
    ///
    /// # Errors
    /// Any statement error; in a transaction block the transaction becomes failed.
    pub fn execute(&mut self, stmt: &Prepared, params: Vec<Value>) -> Result<Output> {
        let _ = (stmt, params);
        Err(Error::unsupported("execute"))
    }

    /// Feeds COPY data (any chunking of the text-format stream).
    ///
    /// # Errors
    /// 22P04 malformed lines, conversion errors, constraint violations.
    pub fn copy_data(&mut self, data: &[u8]) -> Result<()> {
        let _ = data;
        Ok(())
    }

    /// Ends COPY successfully: returns `Command { tag: "COPY n" }`.
    ///
    /// # Errors
    /// As for [`Session::copy_data`] (for a last line without newline).
    pub fn copy_done(&mut self) -> Result<Output> {
        Err(Error::unsupported("copy"))
    }

    /// Client sent CopyFail: abort the COPY and return the error to report (57014-like 
    /// "COPY from stdin failed: msg").
    pub fn copy_fail(&mut self, msg: &str) -> Error {
        Error::user(SqlState::QUERY_CANCELED, format!("COPY from stdin failed: {msg}"))
    }

    /// Extended-protocol Sync: ends an implicit transaction (commits if it succeeded).
    ///
    /// # Errors
    /// Commit errors.
    pub fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    /// Transaction status for ReadyForQuery.
    pub fn txn_status(&self) -> TxnStatus {
        TxnStatus::Idle
    }

    /// Notices produced since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        Vec::new()
    }

    /// Flag the front end sets on a CancelRequest for this session; the running statement
    /// stops with 57014 at its next check.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(false))
    }

    /// ParameterStatus values to send after authentication (server_version, server_encoding,
    /// client_encoding, DateStyle, TimeZone, integer_datetimes, standard_conforming_strings,
    /// application_name, is_superuser, session_authorization).
    pub fn startup_parameters(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Called when the client disconnects: rolls back any open transaction.
    pub fn terminate(&mut self) {}
}
