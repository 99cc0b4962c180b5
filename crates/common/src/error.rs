//! walnut's error type. Every error carries its [`ErrorKind`] (whose fault it is) and the
//! PostgreSQL SQLSTATE that the wire protocol reports (PostgreSQL's `src/backend/utils/errcodes.txt`).

use std::fmt;

/// Whose fault an error is, which decides what the caller may do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client sent something invalid (syntax, types, constraint violations, unknown names).
    /// The session stays usable; nothing was lost.
    BadInput,
    /// A transaction lost a race with another (deadlock, serialization). Retrying may succeed.
    Conflict,
    /// Bytes read from disk or network failed validation (CRC, checksum, format).
    Corruption,
    /// The operating system reported an I/O failure.
    Io,
    /// The statement was cancelled (cancel request or shutdown).
    Cancelled,
    /// A resource limit was hit (connections, disk full).
    Resource,
}

/// A five-character SQLSTATE code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState(pub &'static str);

#[allow(missing_docs)]
impl SqlState {
    pub const SUCCESSFUL_COMPLETION: SqlState = SqlState("00000");
    pub const WARNING: SqlState = SqlState("01000");
    pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState("0A000");
    pub const INVALID_PARAMETER_VALUE: SqlState = SqlState("22023");
    pub const NUMERIC_VALUE_OUT_OF_RANGE: SqlState = SqlState("22003");
    pub const DIVISION_BY_ZERO: SqlState = SqlState("22012");
    pub const INVALID_TEXT_REPRESENTATION: SqlState = SqlState("22P02");
    pub const INVALID_DATETIME_FORMAT: SqlState = SqlState("22007");
    pub const STRING_DATA_RIGHT_TRUNCATION: SqlState = SqlState("22001");
    pub const BAD_COPY_FILE_FORMAT: SqlState = SqlState("22P04");
    pub const NOT_NULL_VIOLATION: SqlState = SqlState("23502");
    pub const UNIQUE_VIOLATION: SqlState = SqlState("23505");
    pub const INVALID_TRANSACTION_STATE: SqlState = SqlState("25000");
    pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25001");
    pub const IN_FAILED_SQL_TRANSACTION: SqlState = SqlState("25P02");
    pub const SERIALIZATION_FAILURE: SqlState = SqlState("40001");
    pub const DEADLOCK_DETECTED: SqlState = SqlState("40P01");
    pub const SYNTAX_ERROR: SqlState = SqlState("42601");
    pub const UNDEFINED_COLUMN: SqlState = SqlState("42703");
    pub const UNDEFINED_TABLE: SqlState = SqlState("42P01");
    pub const UNDEFINED_OBJECT: SqlState = SqlState("42704");
    pub const UNDEFINED_FUNCTION: SqlState = SqlState("42883");
    pub const UNDEFINED_PARAMETER: SqlState = SqlState("42P02");
    pub const DUPLICATE_TABLE: SqlState = SqlState("42P07");
    pub const DATATYPE_MISMATCH: SqlState = SqlState("42804");
    pub const GROUPING_ERROR: SqlState = SqlState("42803");
    pub const INVALID_TABLE_DEFINITION: SqlState = SqlState("42P16");
    pub const AMBIGUOUS_COLUMN: SqlState = SqlState("42702");
    pub const INVALID_PREPARED_STATEMENT: SqlState = SqlState("26000");
    pub const INVALID_CURSOR_NAME: SqlState = SqlState("34000");
    pub const DUPLICATE_PREPARED_STATEMENT: SqlState = SqlState("42P05");
    pub const PROTOCOL_VIOLATION: SqlState = SqlState("08P01");
    pub const TOO_MANY_CONNECTIONS: SqlState = SqlState("53300");
    pub const DISK_FULL: SqlState = SqlState("53100");
    pub const QUERY_CANCELED: SqlState = SqlState("57014");
    pub const ADMIN_SHUTDOWN: SqlState = SqlState("57P01");
    pub const DATA_CORRUPTED: SqlState = SqlState("XX001");
    pub const INDEX_CORRUPTED: SqlState = SqlState("XX002");
    pub const INTERNAL_ERROR: SqlState = SqlState("XX000");
    pub const IO_ERROR: SqlState = SqlState("58030");
    pub const CANT_CHANGE_RUNTIME_PARAM: SqlState = SqlState("55P02");
    pub const OBJECT_NOT_IN_PREREQUISITE_STATE: SqlState = SqlState("55000");
    pub const UNDEFINED_PARAMETER_NAME: SqlState = SqlState("42704");
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// A walnut error: kind, SQLSTATE, a one-line message in PostgreSQL's style (lower case, no
/// trailing period) and an optional detail line.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// Whose fault it is.
    pub kind: ErrorKind,
    /// The SQLSTATE reported to the client.
    pub sqlstate: SqlState,
    /// Primary message.
    pub message: String,
    /// Optional DETAIL line.
    pub detail: Option<String>,
    /// The underlying cause, if any.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Result with walnut's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A bad-input error with the given SQLSTATE.
    pub fn user(sqlstate: SqlState, message: impl Into<String>) -> Error {
        Error::new(ErrorKind::BadInput, sqlstate, message)
    }

    /// An error of any kind.
    pub fn new(kind: ErrorKind, sqlstate: SqlState, message: impl Into<String>) -> Error {
        Error {
            kind,
            sqlstate,
            message: message.into(),
            detail: None,
            source: None,
        }
    }

    /// 42601 syntax error.
    pub fn syntax(message: impl Into<String>) -> Error {
        Error::user(SqlState::SYNTAX_ERROR, message)
    }

    /// 0A000: "`feature` is not supported".
    pub fn unsupported(feature: impl fmt::Display) -> Error {
        Error::user(
            SqlState::FEATURE_NOT_SUPPORTED,
            format!("{feature} is not supported"),
        )
    }

    /// XX001 data corruption, found while validating bytes from disk or network.
    pub fn corruption(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Corruption, SqlState::DATA_CORRUPTED, message)
    }

    /// An I/O error with what was being done (`context`, e.g. "could not write block 7 of file base/16384").
    /// ENOSPC maps to 53100 disk_full, anything else to 58030 io_error.
    pub fn io(context: impl Into<String>, err: std::io::Error) -> Error {
        let (kind, sqlstate) = if err.raw_os_error() == Some(28) {
            (ErrorKind::Resource, SqlState::DISK_FULL)
        } else {
            (ErrorKind::Io, SqlState::IO_ERROR)
        };
        let message = format!("{}: {err}", context.into());
        Error {
            kind,
            sqlstate,
            message,
            detail: None,
            source: Some(Box::new(err)),
        }
    }

    /// 57014 query cancelled.
    pub fn cancelled() -> Error {
        Error::new(
            ErrorKind::Cancelled,
            SqlState::QUERY_CANCELED,
            "canceling statement due to user request",
        )
    }

    /// XX000 internal error: a bug, reported rather than crashing the server.
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::BadInput, SqlState::INTERNAL_ERROR, message)
    }

    /// Adds a DETAIL line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.detail = Some(detail.into());
        self
    }
}
