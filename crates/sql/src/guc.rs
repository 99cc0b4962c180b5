//! The configuration parameters of a session (PostgreSQL's names): what clients send at
//! start-up or `SET`, and what the server reports. [`GUCS`] lists them for the server's
//! registry; [`registry`] collects them with the WAL's and the storage engine's.
//!
//! walnut accepts a value only where it does what the value asks. Drivers send some of these
//! at every connection (pgjdbc: `DateStyle=ISO`, `extra_float_digits=3`, `TimeZone`), so they
//! exist, limited to what walnut does:
//!
//! | parameter | what walnut does with it |
//! |---|---|
//! | `application_name`, `TimeZone` | kept and reported (ParameterStatus, `SHOW`); walnut has no `timestamptz`, so `TimeZone` changes no output |
//! | `client_encoding` | `UTF8` only (`utf-8`, `unicode` are spellings of it) |
//! | `client_min_messages` | notices below the level are not sent |
//! | `DateStyle` | `ISO` output only; the field order is kept and reported |
//! | `IntervalStyle` | kept and reported; walnut has no `interval` type |
//! | `default_transaction_isolation`, `transaction_isolation` | `read committed` (and `read uncommitted`, which PostgreSQL runs as read committed) and `repeatable read`; `serializable` is 0A000 |
//! | `default_transaction_read_only`, `transaction_read_only` | honoured: a READ ONLY transaction's writes fail with 25006 |
//! | `extra_float_digits` | 1 to 3: walnut prints floats in their shortest exact form, as PostgreSQL does for values above 0 |
//! | `search_path` | kept and reported; names resolve in `public`, then `pg_catalog` |
//! | `standard_conforming_strings` | `on` only |
//! | `statement_timeout` | enforced |
//! | `lock_timeout`, `idle_in_transaction_session_timeout`, `transaction_timeout` | 0 (none) only: walnut does not time these out yet; pg_dump's scripts set all three to 0 |
//! | `check_function_bodies`, `row_security`, `xmloption` | kept: walnut has no function bodies, row security policies or `xml` type for them to change |
//! | `default_tablespace` | empty (or `pg_default`) only: walnut has no tablespaces, so any other name is 22023 as an unknown one is in PostgreSQL |
//! | `default_table_access_method` | `heap` only |

use crate::storage::Isolation;
use std::sync::{Arc, OnceLock};
use walnut_common::guc::{int, Context, GucDef, Kind, Registry, Unit, Val, INT_MAX};
use walnut_common::{Error, Result, SqlState};

const CLIENT: &str = "Client Connection Defaults / Statement Behavior";
const LOCALE: &str = "Client Connection Defaults / Locale and Formatting";
const PRESET: &str = "Preset Options";
const REPORTING: &str = "Reporting and Logging / What to Log";

fn unsupported(name: &str, v: &str, why: &str) -> Error {
    Error::user(
        SqlState::FEATURE_NOT_SUPPORTED,
        format!("{name} = {v} is not supported: {why}"),
    )
}

fn text(v: &Val) -> &str {
    match v {
        Val::Str(s) => s,
        Val::Enum(s) => s,
        _ => "",
    }
}

/// `application_name`.
pub static APPLICATION_NAME: GucDef = GucDef {
    name: "application_name",
    kind: Kind::Str,
    default: "",
    context: Context::User,
    category: REPORTING,
    description: "Sets the application name to be reported in statistics and logs.",
    check: None,
};

/// `client_encoding`: `UTF8` only.
pub static CLIENT_ENCODING: GucDef = GucDef {
    name: "client_encoding",
    kind: Kind::Str,
    default: "UTF8",
    context: Context::User,
    category: LOCALE,
    description: "Sets the client's character set encoding.",
    check: Some(|v| {
        let l = text(&v).trim().to_ascii_lowercase().replace(['-', '_'], "");
        match l.as_str() {
            "utf8" | "unicode" | "auto" | "sqlascii" => Ok(Val::Str("UTF8".into())),
            _ => Err(Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!(
                    "invalid value for parameter \"client_encoding\": \"{}\"",
                    text(&v)
                ),
            )),
        }
    }),
};

/// `client_min_messages`: the lowest severity of notice sent to the client.
pub static CLIENT_MIN_MESSAGES: GucDef = GucDef {
    name: "client_min_messages",
    kind: Kind::Enum(&[
        "debug5", "debug4", "debug3", "debug2", "debug1", "log", "notice", "warning", "error",
    ]),
    default: "notice",
    context: Context::User,
    category: "Client Connection Defaults / Statement Behavior",
    description: "Sets the message levels that are sent to the client.",
    check: None,
};

/// `DateStyle`: ISO output; the input field order is kept.
pub static DATESTYLE: GucDef = GucDef {
    name: "DateStyle",
    kind: Kind::Str,
    default: "ISO, MDY",
    context: Context::User,
    category: LOCALE,
    description: "Sets the display format for date and time values.",
    check: Some(|v| {
        let mut order = "MDY";
        for part in text(&v).split(',').map(|p| p.trim().to_ascii_uppercase()) {
            match part.as_str() {
                "ISO" | "DEFAULT" => {}
                "MDY" | "US" | "NONEURO" | "NONEUROPEAN" => order = "MDY",
                "DMY" | "EURO" | "EUROPEAN" => order = "DMY",
                "YMD" => order = "YMD",
                "SQL" | "POSTGRES" | "GERMAN" => {
                    return Err(unsupported(
                        "DateStyle",
                        &part,
                        "walnut prints dates in ISO format",
                    ))
                }
                _ => {
                    return Err(Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!(
                            "invalid value for parameter \"DateStyle\": \"{}\"",
                            text(&v)
                        ),
                    ))
                }
            }
        }
        Ok(Val::Str(format!("ISO, {order}")))
    }),
};

const ISOLATION_LEVELS: &[&str] = &[
    "serializable",
    "repeatable read",
    "read committed",
    "read uncommitted",
];

/// The level an isolation name gives: READ UNCOMMITTED runs as READ COMMITTED, as in
/// PostgreSQL; SERIALIZABLE never gets here ([`no_serializable`]).
pub(crate) fn isolation(name: &str) -> Isolation {
    if name == "repeatable read" {
        Isolation::RepeatableRead
    } else {
        Isolation::ReadCommitted
    }
}

fn no_serializable(v: Val) -> Result<Val> {
    match text(&v) {
        "serializable" => Err(unsupported(
            "transaction isolation",
            text(&v),
            "walnut has no serializable snapshot isolation yet (use REPEATABLE READ)",
        )),
        _ => Ok(v),
    }
}

/// `default_transaction_isolation`: read committed (repeatable read allowed; serializable is
/// 0A000).
pub static DEFAULT_TRANSACTION_ISOLATION: GucDef = GucDef {
    name: "default_transaction_isolation",
    kind: Kind::Enum(ISOLATION_LEVELS),
    default: "read committed",
    context: Context::User,
    category: CLIENT,
    description: "Sets the transaction isolation level of each new transaction.",
    check: Some(no_serializable),
};

/// `transaction_isolation`: the open transaction's level. `SET` of it is `SET TRANSACTION
/// ISOLATION LEVEL` and `SHOW` reads the transaction (the session, `Session::do_set`), so the
/// stored value is never read.
pub static TRANSACTION_ISOLATION: GucDef = GucDef {
    name: "transaction_isolation",
    kind: Kind::Enum(ISOLATION_LEVELS),
    default: "read committed",
    context: Context::User,
    category: CLIENT,
    description: "Sets the current transaction's isolation level.",
    check: Some(no_serializable),
};

/// `default_transaction_read_only`: off.
pub static DEFAULT_TRANSACTION_READ_ONLY: GucDef = GucDef {
    name: "default_transaction_read_only",
    kind: Kind::Bool,
    default: "off",
    context: Context::User,
    category: CLIENT,
    description: "Sets the default read-only status of new transactions.",
    check: None,
};

/// `transaction_read_only`: the open transaction's READ ONLY mode. As for
/// `transaction_isolation`, `SET` of it is `SET TRANSACTION READ ONLY | READ WRITE` and `SHOW`
/// reads the transaction.
pub static TRANSACTION_READ_ONLY: GucDef = GucDef {
    name: "transaction_read_only",
    kind: Kind::Bool,
    default: "off",
    context: Context::User,
    category: CLIENT,
    description: "Sets the current transaction's read-only status.",
    check: None,
};

/// `extra_float_digits`: 1 to 3, the shortest exact output.
pub static EXTRA_FLOAT_DIGITS: GucDef = GucDef {
    name: "extra_float_digits",
    kind: int(-15, 3, Unit::None),
    default: "1",
    context: Context::User,
    category: LOCALE,
    description: "Sets the number of digits displayed for floating-point values.",
    check: Some(|v| match v {
        Val::Int(n) if n < 1 => Err(unsupported(
            "extra_float_digits",
            &n.to_string(),
            "walnut prints floating-point values in their shortest exact form",
        )),
        v => Ok(v),
    }),
};

/// `IntervalStyle`.
pub static INTERVALSTYLE: GucDef = GucDef {
    name: "IntervalStyle",
    kind: Kind::Enum(&["postgres", "postgres_verbose", "sql_standard", "iso_8601"]),
    default: "postgres",
    context: Context::User,
    category: LOCALE,
    description: "Sets the display format for interval values.",
    check: None,
};

/// `search_path`.
pub static SEARCH_PATH: GucDef = GucDef {
    name: "search_path",
    kind: Kind::Str,
    default: "\"$user\", public",
    context: Context::User,
    category: CLIENT,
    description: "Sets the schema search order for names that are not schema-qualified.",
    check: None,
};

/// `standard_conforming_strings`: on only.
pub static STANDARD_CONFORMING_STRINGS: GucDef = GucDef {
    name: "standard_conforming_strings",
    kind: Kind::Bool,
    default: "on",
    context: Context::User,
    category: "Version and Platform Compatibility / Previous PostgreSQL Versions",
    description: "Causes '...' strings to treat backslashes literally.",
    check: Some(|v| match v {
        Val::Bool(false) => Err(unsupported(
            "standard_conforming_strings",
            "off",
            "walnut reads backslashes in '...' literally",
        )),
        v => Ok(v),
    }),
};

/// `statement_timeout`, ms (0: none).
pub static STATEMENT_TIMEOUT: GucDef = GucDef {
    name: "statement_timeout",
    kind: int(0, INT_MAX, Unit::Ms),
    default: "0",
    context: Context::User,
    category: CLIENT,
    description: "Sets the maximum allowed duration of any statement.",
    check: None,
};

/// A timeout walnut does not enforce yet: 0 only (PostgreSQL's default, none), so that a
/// script that turns it off (pg_dump's) runs and one that asks for a limit is told.
const fn zero_only_timeout(name: &'static str, description: &'static str) -> GucDef {
    GucDef {
        name,
        kind: int(0, INT_MAX, Unit::Ms),
        default: "0",
        context: Context::User,
        category: CLIENT,
        description,
        check: Some(|v| match v {
            Val::Int(n) if n != 0 => Err(Error::user(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!(
                    "a timeout of {n} ms is not supported: walnut does not enforce lock_timeout, \
                     idle_in_transaction_session_timeout or transaction_timeout yet (0, none, \
                     is accepted)"
                ),
            )),
            v => Ok(v),
        }),
    }
}

/// `lock_timeout`, ms: 0 only.
pub static LOCK_TIMEOUT: GucDef = zero_only_timeout(
    "lock_timeout",
    "Sets the maximum allowed duration of any wait for a lock.",
);

/// `idle_in_transaction_session_timeout`, ms: 0 only.
pub static IDLE_IN_TRANSACTION_SESSION_TIMEOUT: GucDef = zero_only_timeout(
    "idle_in_transaction_session_timeout",
    "Sets the maximum allowed idle time between queries, when in a transaction.",
);

/// `transaction_timeout`, ms: 0 only.
pub static TRANSACTION_TIMEOUT: GucDef = zero_only_timeout(
    "transaction_timeout",
    "Sets the maximum allowed duration of any transaction within a session (not a prepared transaction).",
);

/// `check_function_bodies`: kept (walnut has no CREATE FUNCTION).
pub static CHECK_FUNCTION_BODIES: GucDef = GucDef {
    name: "check_function_bodies",
    kind: Kind::Bool,
    default: "on",
    context: Context::User,
    category: CLIENT,
    description: "Check routine bodies during CREATE FUNCTION and CREATE PROCEDURE.",
    check: None,
};

/// `row_security`: kept (walnut has no row security policies, so no query is subject to one
/// either way).
pub static ROW_SECURITY: GucDef = GucDef {
    name: "row_security",
    kind: Kind::Bool,
    default: "on",
    context: Context::User,
    category: CLIENT,
    description: "Enable row security.",
    check: None,
};

/// `xmloption`: kept (walnut has no `xml` type).
pub static XMLOPTION: GucDef = GucDef {
    name: "xmloption",
    kind: Kind::Enum(&["content", "document"]),
    default: "content",
    context: Context::User,
    category: CLIENT,
    description: "Sets whether XML data in implicit parsing and serialization operations is to be considered as documents or content fragments.",
    check: None,
};

/// `default_tablespace`: empty (the database's) only.
pub static DEFAULT_TABLESPACE: GucDef = GucDef {
    name: "default_tablespace",
    kind: Kind::Str,
    default: "",
    context: Context::User,
    category: CLIENT,
    description: "Sets the default tablespace to create tables and indexes in.",
    check: Some(|v| match text(&v) {
        "" | "pg_default" => Ok(Val::Str(text(&v).to_string())),
        other => Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"default_tablespace\": \"{other}\""),
        )
        .with_detail(format!("Tablespace \"{other}\" does not exist."))),
    }),
};

/// `default_table_access_method`: `heap` only.
pub static DEFAULT_TABLE_ACCESS_METHOD: GucDef = GucDef {
    name: "default_table_access_method",
    kind: Kind::Str,
    default: "heap",
    context: Context::User,
    category: CLIENT,
    description: "Sets the default table access method for new tables.",
    check: Some(|v| match text(&v) {
        "heap" => Ok(v),
        other => Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"default_table_access_method\": \"{other}\""),
        )
        .with_detail(format!("Table access method \"{other}\" does not exist."))),
    }),
};

/// `TimeZone`.
pub static TIMEZONE: GucDef = GucDef {
    name: "TimeZone",
    kind: Kind::Str,
    default: "UTC",
    context: Context::User,
    category: LOCALE,
    description: "Sets the time zone for displaying and interpreting time stamps.",
    check: None,
};

const fn internal(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    d: &'static str,
) -> GucDef {
    GucDef {
        name,
        kind,
        default,
        context: Context::Internal,
        category: PRESET,
        description: d,
        check: None,
    }
}

/// `integer_datetimes` (reported).
pub static INTEGER_DATETIMES: GucDef = internal(
    "integer_datetimes",
    Kind::Bool,
    "on",
    "Shows whether datetimes are integer based.",
);
/// `is_superuser` (reported).
pub static IS_SUPERUSER: GucDef = internal(
    "is_superuser",
    Kind::Bool,
    "on",
    "Shows whether the current user is a superuser.",
);
/// `server_encoding` (reported).
pub static SERVER_ENCODING: GucDef = internal(
    "server_encoding",
    Kind::Str,
    "UTF8",
    "Shows the server (database) character set encoding.",
);
/// `server_version` (reported).
pub static SERVER_VERSION: GucDef = internal(
    "server_version",
    Kind::Str,
    "18.0 (walnut 0.1)",
    "Shows the server version.",
);
/// `server_version_num` (reported).
pub static SERVER_VERSION_NUM: GucDef = internal(
    "server_version_num",
    int(180000, 180000, Unit::None),
    "180000",
    "Shows the server version as an integer.",
);
/// `session_authorization` (reported).
pub static SESSION_AUTHORIZATION: GucDef = internal(
    "session_authorization",
    Kind::Str,
    "postgres",
    "Sets the session user name.",
);

/// Every parameter of this crate.
pub static GUCS: &[&GucDef] = &[
    &APPLICATION_NAME,
    &CHECK_FUNCTION_BODIES,
    &CLIENT_ENCODING,
    &CLIENT_MIN_MESSAGES,
    &DATESTYLE,
    &DEFAULT_TABLE_ACCESS_METHOD,
    &DEFAULT_TABLESPACE,
    &DEFAULT_TRANSACTION_ISOLATION,
    &DEFAULT_TRANSACTION_READ_ONLY,
    &EXTRA_FLOAT_DIGITS,
    &IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
    &INTEGER_DATETIMES,
    &INTERVALSTYLE,
    &IS_SUPERUSER,
    &LOCK_TIMEOUT,
    &ROW_SECURITY,
    &SEARCH_PATH,
    &SERVER_ENCODING,
    &SERVER_VERSION,
    &SERVER_VERSION_NUM,
    &SESSION_AUTHORIZATION,
    &STANDARD_CONFORMING_STRINGS,
    &STATEMENT_TIMEOUT,
    &TIMEZONE,
    &TRANSACTION_ISOLATION,
    &TRANSACTION_READ_ONLY,
    &TRANSACTION_TIMEOUT,
    &XMLOPTION,
];

/// The parameters reported to the client with ParameterStatus at start-up, as PostgreSQL's
/// `GUC_REPORT` ones.
pub static REPORTED: &[&GucDef] = &[
    &SERVER_VERSION,
    &SERVER_ENCODING,
    &CLIENT_ENCODING,
    &DATESTYLE,
    &TIMEZONE,
    &INTEGER_DATETIMES,
    &STANDARD_CONFORMING_STRINGS,
    &APPLICATION_NAME,
    &IS_SUPERUSER,
    &SESSION_AUTHORIZATION,
    &INTERVALSTYLE,
];

/// The parameters of this crate and the crates below it (WAL, storage): every parameter a
/// session knows without the server's own (`port`, `listen_addresses`, ...), which the server
/// adds to its registry.
pub fn registry() -> Arc<Registry> {
    static R: OnceLock<Arc<Registry>> = OnceLock::new();
    R.get_or_init(|| Arc::new(Registry::new(&LISTS))).clone()
}

/// The lists [`registry`] collects, for the server to add its own to.
pub static LISTS: [&[&GucDef]; 3] = [walnut_wal::GUCS, walnut_storage::GUCS, GUCS];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_parses_and_names_are_unique() {
        let r = registry();
        for d in r.iter() {
            d.default_value();
        }
    }

    #[test]
    fn values_walnut_cannot_honour_are_refused() {
        let unsupported = |d: &GucDef, v: &str| d.parse(v).unwrap_err().sqlstate;
        assert_eq!(
            unsupported(&DATESTYLE, "SQL, DMY"),
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(
            DATESTYLE.normalize("iso, dmy").unwrap(),
            "ISO, DMY".to_string()
        );
        assert_eq!(DATESTYLE.normalize("ISO").unwrap(), "ISO, MDY");
        assert_eq!(
            unsupported(&TRANSACTION_ISOLATION, "serializable"),
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(
            unsupported(&EXTRA_FLOAT_DIGITS, "0"),
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(EXTRA_FLOAT_DIGITS.normalize("3").unwrap(), "3");
        assert_eq!(
            unsupported(&STANDARD_CONFORMING_STRINGS, "off"),
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(CLIENT_ENCODING.normalize("utf-8").unwrap(), "UTF8");
        assert_eq!(
            unsupported(&CLIENT_ENCODING, "LATIN1"),
            SqlState::INVALID_PARAMETER_VALUE
        );
        // Parameters nothing reads do not exist.
        assert_eq!(
            unsupported(&LOCK_TIMEOUT, "1s"),
            SqlState::FEATURE_NOT_SUPPORTED
        );
        assert_eq!(LOCK_TIMEOUT.normalize("0").unwrap(), "0");
        assert_eq!(
            unsupported(&DEFAULT_TABLE_ACCESS_METHOD, "columnar"),
            SqlState::INVALID_PARAMETER_VALUE
        );
        assert_eq!(
            unsupported(&DEFAULT_TABLESPACE, "fast"),
            SqlState::INVALID_PARAMETER_VALUE
        );
        for gone in ["jit", "work_mem", "random_page_cost"] {
            assert!(registry().find(gone).is_none(), "{gone}");
        }
    }
}
