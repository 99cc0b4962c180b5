//! The types the session hands to the wire front end, and that the planner and executor share:
//! result columns, statement outputs, notices and the transaction status.

use std::sync::Arc;
use walnut_common::{DataType, SqlState, Value};

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
    /// Detail line, if any.
    pub detail: Option<String>,
}

impl Notice {
    /// A notice without a detail line: `severity` is `NOTICE`, `WARNING` or `INFO`.
    pub fn new(severity: &'static str, sqlstate: SqlState, message: impl Into<String>) -> Self {
        Notice {
            severity,
            sqlstate,
            message: message.into(),
            detail: None,
        }
    }
}
