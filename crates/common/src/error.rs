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
    /// A bug in walnut: an invariant did not hold where it could be reported rather than
    /// crash the server (XX000).
    Internal,
}

/// A five-character SQLSTATE code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState(pub &'static str);

/// Declares each SQLSTATE once as a named constant and lists them all in
/// [`SqlState::ALL`], so that a test can check that no code is declared twice.
macro_rules! sqlstates {
    ($($name:ident = $code:literal,)*) => {
        #[allow(missing_docs)]
        impl SqlState {
            $(pub const $name: SqlState = SqlState($code);)*
            /// Every named SQLSTATE, with its name.
            pub const ALL: &'static [(&'static str, SqlState)] = &[$((stringify!($name), SqlState($code)),)*];
        }
    };
}

// Each code once, named as in PostgreSQL's errcodes.txt, sorted by code.
sqlstates! {
    SUCCESSFUL_COMPLETION = "00000",
    WARNING = "01000",
    PROTOCOL_VIOLATION = "08P01",
    FEATURE_NOT_SUPPORTED = "0A000",
    STRING_DATA_RIGHT_TRUNCATION = "22001",
    NUMERIC_VALUE_OUT_OF_RANGE = "22003",
    NULL_VALUE_NOT_ALLOWED = "22004",
    INVALID_DATETIME_FORMAT = "22007",
    SEQUENCE_GENERATOR_LIMIT_EXCEEDED = "2200H",
    DIVISION_BY_ZERO = "22012",
    CHARACTER_NOT_IN_REPERTOIRE = "22021",
    INVALID_PARAMETER_VALUE = "22023",
    INVALID_TEXT_REPRESENTATION = "22P02",
    INVALID_BINARY_REPRESENTATION = "22P03",
    BAD_COPY_FILE_FORMAT = "22P04",
    NOT_NULL_VIOLATION = "23502",
    UNIQUE_VIOLATION = "23505",
    CHECK_VIOLATION = "23514",
    INVALID_TRANSACTION_STATE = "25000",
    ACTIVE_SQL_TRANSACTION = "25001",
    READ_ONLY_SQL_TRANSACTION = "25006",
    NO_ACTIVE_SQL_TRANSACTION = "25P01",
    IN_FAILED_SQL_TRANSACTION = "25P02",
    INVALID_PREPARED_STATEMENT = "26000",
    INVALID_AUTHORIZATION_SPECIFICATION = "28000",
    INVALID_PASSWORD = "28P01",
    DEPENDENT_OBJECTS_STILL_EXIST = "2BP01",
    INVALID_CURSOR_NAME = "34000",
    INVALID_SCHEMA_NAME = "3F000",
    SERIALIZATION_FAILURE = "40001",
    DEADLOCK_DETECTED = "40P01",
    SYNTAX_ERROR = "42601",
    INVALID_NAME = "42602",
    NAME_TOO_LONG = "42622",
    DUPLICATE_COLUMN = "42701",
    AMBIGUOUS_COLUMN = "42702",
    UNDEFINED_COLUMN = "42703",
    UNDEFINED_OBJECT = "42704",
    DUPLICATE_OBJECT = "42710",
    GROUPING_ERROR = "42803",
    DATATYPE_MISMATCH = "42804",
    WRONG_OBJECT_TYPE = "42809",
    CANNOT_COERCE = "42846",
    UNDEFINED_FUNCTION = "42883",
    GENERATED_ALWAYS = "428C9",
    UNDEFINED_TABLE = "42P01",
    UNDEFINED_PARAMETER = "42P02",
    DUPLICATE_CURSOR = "42P03",
    DUPLICATE_DATABASE = "42P04",
    DUPLICATE_PREPARED_STATEMENT = "42P05",
    DUPLICATE_TABLE = "42P07",
    INVALID_COLUMN_REFERENCE = "42P10",
    INVALID_TABLE_DEFINITION = "42P16",
    PROGRAM_LIMIT_EXCEEDED = "54000",
    DISK_FULL = "53100",
    TOO_MANY_CONNECTIONS = "53300",
    CONFIGURATION_LIMIT_EXCEEDED = "53400",
    OBJECT_NOT_IN_PREREQUISITE_STATE = "55000",
    OBJECT_IN_USE = "55006",
    CANT_CHANGE_RUNTIME_PARAM = "55P02",
    QUERY_CANCELED = "57014",
    ADMIN_SHUTDOWN = "57P01",
    CANNOT_CONNECT_NOW = "57P03",
    IO_ERROR = "58030",
    UNDEFINED_FILE = "58P01",
    INTERNAL_ERROR = "XX000",
    DATA_CORRUPTED = "XX001",
    INDEX_CORRUPTED = "XX002",
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

    /// A transaction lost a race with another (40001 serialization failure, 40P01 deadlock);
    /// retrying may succeed.
    pub fn conflict(sqlstate: SqlState, message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Conflict, sqlstate, message)
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
        Error::new(ErrorKind::Internal, SqlState::INTERNAL_ERROR, message)
    }

    /// 57P01 `terminating connection due to administrator command`: the session was ended
    /// by the server (shutdown), not by a fault.
    pub fn terminated() -> Error {
        Error::new(
            ErrorKind::Cancelled,
            SqlState::ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        )
    }

    /// Adds a DETAIL line.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Error {
        self.detail = Some(detail.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sqlstate_is_declared_once() {
        let mut codes: Vec<&str> = SqlState::ALL.iter().map(|(_, c)| c.0).collect();
        let n = codes.len();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), n, "a SQLSTATE is declared under two names");
        for (name, code) in SqlState::ALL {
            assert_eq!(code.0.len(), 5, "{name}");
        }
    }

    #[test]
    fn constructors_say_whose_fault_it_is() {
        assert_eq!(Error::internal("bug").kind, ErrorKind::Internal);
        assert_eq!(Error::internal("bug").sqlstate, SqlState::INTERNAL_ERROR);
        assert_eq!(Error::cancelled().kind, ErrorKind::Cancelled);
        assert_eq!(Error::terminated().kind, ErrorKind::Cancelled);
        assert_eq!(Error::terminated().sqlstate, SqlState::ADMIN_SHUTDOWN);
        assert_eq!(Error::corruption("crc").kind, ErrorKind::Corruption);
        assert_eq!(Error::syntax("x").kind, ErrorKind::BadInput);
        let c = Error::conflict(SqlState::SERIALIZATION_FAILURE, "changed concurrently");
        assert_eq!(c.kind, ErrorKind::Conflict);
        let full = Error::io("write", std::io::Error::from_raw_os_error(28));
        assert_eq!(
            (full.kind, full.sqlstate),
            (ErrorKind::Resource, SqlState::DISK_FULL)
        );
        let eio = Error::io("write", std::io::Error::from_raw_os_error(5));
        assert_eq!(
            (eio.kind, eio.sqlstate),
            (ErrorKind::Io, SqlState::IO_ERROR)
        );
    }

    /// Every SQLSTATE in walnut's sources is one of the named constants: no code is spelled
    /// out anywhere but in the list above.
    #[test]
    fn no_sqlstate_is_spelled_out_in_the_sources() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut offenders = Vec::new();
        let mut stack = vec![crates];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("common/src/error.rs")
                {
                    let text = std::fs::read_to_string(&path).unwrap();
                    if text.contains(concat!("SqlState", "(\"")) {
                        offenders.push(path.display().to_string());
                    }
                }
            }
        }
        assert!(offenders.is_empty(), "SQLSTATE literals in {offenders:?}");
    }
}
