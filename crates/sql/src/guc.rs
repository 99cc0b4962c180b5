//! Configuration parameters (GUCs): the registry of names walnut knows, with their types, units,
//! defaults and contexts, and PostgreSQL's rules for parsing and printing values.
//!
//! Values are kept as normalized text (what `SHOW` prints). Integer parameters with a unit accept
//! the PostgreSQL unit suffixes — memory `B`, `kB`, `MB`, `GB`, `TB`; time `us`, `ms`, `s`, `min`,
//! `h`, `d` — and are converted to the parameter's *base unit* (for example `shared_buffers` counts
//! 8 kB pages, `checkpoint_timeout` seconds). `SHOW` prints the largest unit that divides the value
//! exactly (`131072kB` of `shared_buffers` prints as `128MB`), as PostgreSQL does.
//!
//! Contexts: [`Context::Postmaster`] parameters are read once at server start (a `SET` fails with
//! 55P02), [`Context::Sighup`] ones only from the configuration file, [`Context::User`] ones may be
//! set by any session.

use walnut_common::{Error, Result, SqlState};

/// When a parameter may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Only at server start (configuration file or command line).
    Postmaster,
    /// In the configuration file (reload); not per session.
    Sighup,
    /// Any session, with `SET` or startup options.
    User,
    /// Read-only, reported by the server.
    Internal,
}

/// Unit of an integer parameter's stored value (its base unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Plain number.
    None,
    /// Kilobytes.
    Kb,
    /// 8 kB blocks (pages).
    Blocks,
    /// Megabytes.
    Mb,
    /// Microseconds.
    Us,
    /// Milliseconds.
    Ms,
    /// Seconds.
    S,
}

impl Unit {
    /// Size of one base unit: bytes for memory units, microseconds for time units.
    fn size(self) -> Option<(bool, i64)> {
        match self {
            Unit::None => None,
            Unit::Kb => Some((true, 1024)),
            Unit::Blocks => Some((true, 8192)),
            Unit::Mb => Some((true, 1 << 20)),
            Unit::Us => Some((false, 1)),
            Unit::Ms => Some((false, 1000)),
            Unit::S => Some((false, 1_000_000)),
        }
    }
}

const MEMORY_UNITS: &[(&str, i64)] = &[
    ("TB", 1 << 40),
    ("GB", 1 << 30),
    ("MB", 1 << 20),
    ("kB", 1 << 10),
    ("B", 1),
];
const TIME_UNITS: &[(&str, i64)] = &[
    ("d", 86_400_000_000),
    ("h", 3_600_000_000),
    ("min", 60_000_000),
    ("s", 1_000_000),
    ("ms", 1000),
    ("us", 1),
];

/// A parameter's value type.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// `on`/`off` (also true/false, yes/no, 1/0 and unique prefixes).
    Bool,
    /// Integer in `unit`, within `min..=max`.
    Int {
        /// Smallest value, base units.
        min: i64,
        /// Largest value, base units.
        max: i64,
        /// Base unit.
        unit: Unit,
    },
    /// Floating point within `min..=max`.
    Real {
        /// Smallest value.
        min: f64,
        /// Largest value.
        max: f64,
    },
    /// Free text.
    Str,
    /// One of the listed values (case-insensitive); the first spelling is canonical.
    Enum(&'static [&'static str]),
}

/// One parameter's definition.
#[derive(Debug)]
pub struct GucDef {
    /// Canonical name (as `SHOW` labels its column).
    pub name: &'static str,
    /// Value type.
    pub kind: Kind,
    /// Default value text.
    pub default: &'static str,
    /// When it may change.
    pub context: Context,
    /// One-line description (`SHOW ALL`).
    pub description: &'static str,
}

const fn int(min: i64, max: i64, unit: Unit) -> Kind {
    Kind::Int { min, max, unit }
}

use Context::{Internal, Postmaster, Sighup, User};

const MAXI: i64 = i32::MAX as i64;

/// Every parameter walnut knows, sorted by name.
pub static REGISTRY: &[GucDef] = &[
    GucDef {
        name: "application_name",
        kind: Kind::Str,
        default: "",
        context: User,
        description: "Sets the application name to be reported in statistics and logs.",
    },
    GucDef {
        name: "checkpoint_timeout",
        kind: int(30, 86400, Unit::S),
        default: "5min",
        context: Postmaster,
        description: "Sets the maximum time between automatic WAL checkpoints.",
    },
    GucDef {
        name: "client_encoding",
        kind: Kind::Str,
        default: "UTF8",
        context: User,
        description: "Sets the client's character set encoding.",
    },
    GucDef {
        name: "client_min_messages",
        kind: Kind::Enum(&[
            "notice", "debug5", "debug4", "debug3", "debug2", "debug1", "debug", "log", "info", "warning", "error",
        ]),
        default: "notice",
        context: User,
        description: "Sets the message levels that are sent to the client.",
    },
    GucDef {
        name: "commit_delay",
        kind: int(0, 100_000, Unit::None),
        default: "0",
        context: User,
        description: "Sets the delay in microseconds between transaction commit and flushing WAL to disk.",
    },
    GucDef {
        name: "commit_siblings",
        kind: int(0, 1000, Unit::None),
        default: "5",
        context: User,
        description: "Sets the minimum number of concurrent open transactions required before performing commit_delay.",
    },
    GucDef {
        name: "DateStyle",
        kind: Kind::Str,
        default: "ISO, MDY",
        context: User,
        description: "Sets the display format for date and time values.",
    },
    GucDef {
        name: "default_transaction_isolation",
        kind: Kind::Enum(&["read committed", "serializable", "repeatable read", "read uncommitted"]),
        default: "read committed",
        context: User,
        description: "Sets the transaction isolation level of each new transaction.",
    },
    GucDef {
        name: "effective_cache_size",
        kind: int(1, MAXI, Unit::Blocks),
        default: "4GB",
        context: User,
        description: "Sets the planner's assumption about the total size of the data caches.",
    },
    GucDef {
        name: "extra_float_digits",
        kind: int(-15, 3, Unit::None),
        default: "1",
        context: User,
        description: "Sets the number of digits displayed for floating-point values.",
    },
    GucDef {
        name: "fsync",
        kind: Kind::Bool,
        default: "on",
        context: Sighup,
        description: "Forces synchronization of updates to disk.",
    },
    GucDef {
        name: "full_page_writes",
        kind: Kind::Bool,
        default: "on",
        context: Postmaster,
        description: "Writes full pages to WAL when first modified after a checkpoint.",
    },
    GucDef {
        name: "group_commit",
        kind: Kind::Enum(&["adaptive", "fixed"]),
        default: "adaptive",
        context: Postmaster,
        description: "Selects walnut's group commit policy.",
    },
    GucDef {
        name: "idle_in_transaction_session_timeout",
        kind: int(0, MAXI, Unit::Ms),
        default: "0",
        context: User,
        description: "Sets the maximum allowed idle time between queries, when in a transaction.",
    },
    GucDef {
        name: "integer_datetimes",
        kind: Kind::Bool,
        default: "on",
        context: Internal,
        description: "Shows whether datetimes are integer based.",
    },
    GucDef {
        name: "IntervalStyle",
        kind: Kind::Enum(&["postgres", "postgres_verbose", "sql_standard", "iso_8601"]),
        default: "postgres",
        context: User,
        description: "Sets the display format for interval values.",
    },
    GucDef {
        name: "io_direct",
        kind: Kind::Str,
        default: "",
        context: Postmaster,
        description: "Use direct I/O for file access.",
    },
    GucDef {
        name: "is_superuser",
        kind: Kind::Bool,
        default: "on",
        context: Internal,
        description: "Shows whether the current user is a superuser.",
    },
    GucDef {
        name: "jit",
        kind: Kind::Bool,
        default: "off",
        context: User,
        description: "Allow JIT compilation.",
    },
    GucDef {
        name: "listen_addresses",
        kind: Kind::Str,
        default: "127.0.0.1",
        context: Postmaster,
        description: "Sets the host name or IP address(es) to listen to.",
    },
    GucDef {
        name: "lock_timeout",
        kind: int(0, MAXI, Unit::Ms),
        default: "0",
        context: User,
        description: "Sets the maximum allowed duration of any wait for a lock.",
    },
    GucDef {
        name: "log_min_messages",
        kind: Kind::Enum(&[
            "warning", "debug5", "debug4", "debug3", "debug2", "debug1", "info", "notice", "error", "log", "fatal",
            "panic",
        ]),
        default: "warning",
        context: Sighup,
        description: "Sets the message levels that are logged.",
    },
    GucDef {
        name: "maintenance_work_mem",
        kind: int(1024, MAXI, Unit::Kb),
        default: "64MB",
        context: User,
        description: "Sets the maximum memory to be used for maintenance operations.",
    },
    GucDef {
        name: "max_connections",
        kind: int(1, 262_143, Unit::None),
        default: "100",
        context: Postmaster,
        description: "Sets the maximum number of concurrent connections.",
    },
    GucDef {
        name: "max_parallel_workers_per_gather",
        kind: int(0, 1024, Unit::None),
        default: "2",
        context: User,
        description: "Sets the maximum number of parallel processes per executor node.",
    },
    GucDef {
        name: "max_wal_size",
        kind: int(2, MAXI, Unit::Mb),
        default: "1GB",
        context: Postmaster,
        description: "Sets the WAL size that triggers a checkpoint.",
    },
    GucDef {
        name: "port",
        kind: int(1, 65535, Unit::None),
        default: "5433",
        context: Postmaster,
        description: "Sets the TCP port the server listens on.",
    },
    GucDef {
        name: "random_page_cost",
        kind: Kind::Real {
            min: 0.0,
            max: f64::MAX,
        },
        default: "4",
        context: User,
        description: "Sets the planner's estimate of the cost of a nonsequentially fetched disk page.",
    },
    GucDef {
        name: "search_path",
        kind: Kind::Str,
        default: "\"$user\", public",
        context: User,
        description: "Sets the schema search order for names that are not schema-qualified.",
    },
    GucDef {
        name: "server_encoding",
        kind: Kind::Str,
        default: "UTF8",
        context: Internal,
        description: "Shows the server (database) character set encoding.",
    },
    GucDef {
        name: "server_version",
        kind: Kind::Str,
        default: "18.0 (walnut 0.1)",
        context: Internal,
        description: "Shows the server version.",
    },
    GucDef {
        name: "server_version_num",
        kind: Kind::Str,
        default: "180000",
        context: Internal,
        description: "Shows the server version as an integer.",
    },
    GucDef {
        name: "session_authorization",
        kind: Kind::Str,
        default: "postgres",
        context: Internal,
        description: "Sets the session user name.",
    },
    GucDef {
        name: "shared_buffers",
        kind: int(16, MAXI / 2, Unit::Blocks),
        default: "128MB",
        context: Postmaster,
        description: "Sets the number of shared memory buffers used by the server.",
    },
    GucDef {
        name: "ssl",
        kind: Kind::Bool,
        default: "off",
        context: Postmaster,
        description: "Enables SSL connections.",
    },
    GucDef {
        name: "ssl_cert_file",
        kind: Kind::Str,
        default: "server.crt",
        context: Postmaster,
        description: "Location of the SSL server certificate file.",
    },
    GucDef {
        name: "ssl_key_file",
        kind: Kind::Str,
        default: "server.key",
        context: Postmaster,
        description: "Location of the SSL server private key file.",
    },
    GucDef {
        name: "standard_conforming_strings",
        kind: Kind::Bool,
        default: "on",
        context: User,
        description: "Causes '...' strings to treat backslashes literally.",
    },
    GucDef {
        name: "statement_timeout",
        kind: int(0, MAXI, Unit::Ms),
        default: "0",
        context: User,
        description: "Sets the maximum allowed duration of any statement.",
    },
    GucDef {
        name: "synchronous_commit",
        kind: Kind::Enum(&["on", "off", "local", "remote_write", "remote_apply"]),
        default: "on",
        context: User,
        description: "Sets the current transaction's synchronization level.",
    },
    GucDef {
        name: "TimeZone",
        kind: Kind::Str,
        default: "UTC",
        context: User,
        description: "Sets the time zone for displaying and interpreting time stamps.",
    },
    GucDef {
        name: "transaction_isolation",
        kind: Kind::Enum(&["read committed", "serializable", "repeatable read", "read uncommitted"]),
        default: "read committed",
        context: User,
        description: "Sets the current transaction's isolation level.",
    },
    GucDef {
        name: "wal_buffers",
        kind: int(-1, 262_143, Unit::Blocks),
        default: "-1",
        context: Postmaster,
        description: "Sets the number of disk-page buffers in shared memory for WAL.",
    },
    GucDef {
        name: "wal_init_zero",
        kind: Kind::Bool,
        default: "on",
        context: Sighup,
        description: "Writes zeroes to new WAL files before first use.",
    },
    GucDef {
        name: "wal_level",
        kind: Kind::Enum(&["replica", "minimal", "logical"]),
        default: "replica",
        context: Postmaster,
        description: "Sets the level of information written to the WAL.",
    },
    GucDef {
        name: "wal_recycle",
        kind: Kind::Bool,
        default: "on",
        context: Sighup,
        description: "Recycles WAL files by renaming them.",
    },
    GucDef {
        name: "wal_sync_method",
        kind: Kind::Enum(&["fdatasync", "fsync", "open_sync", "open_datasync"]),
        default: "fdatasync",
        context: Postmaster,
        description: "Selects the method used for forcing WAL updates to disk.",
    },
    GucDef {
        name: "wal_sync_range",
        kind: Kind::Bool,
        default: "on",
        context: Postmaster,
        description: "With fdatasync, makes WAL durable by writing back the written range and flushing the disk cache, where the file system allows it.",
    },
    GucDef {
        name: "wal_writer_delay",
        kind: int(1, 10_000, Unit::Ms),
        default: "200ms",
        context: Postmaster,
        description: "Time between WAL flushes performed in the WAL writer.",
    },
    GucDef {
        name: "work_mem",
        kind: int(64, MAXI, Unit::Kb),
        default: "4MB",
        context: User,
        description: "Sets the maximum memory to be used for query workspaces.",
    },
];

/// The definition of `name` (case-insensitive).
pub fn find(name: &str) -> Option<&'static GucDef> {
    REGISTRY.iter().find(|d| d.name.eq_ignore_ascii_case(name))
}

/// The definition of `name`, or 42704 `unrecognized configuration parameter "name"`.
///
/// # Errors
/// 42704 for unknown names.
pub fn lookup(name: &str) -> Result<&'static GucDef> {
    find(name).ok_or_else(|| {
        Error::user(
            SqlState::UNDEFINED_PARAMETER_NAME,
            format!(
                "unrecognized configuration parameter \"{}\"",
                name.to_ascii_lowercase()
            ),
        )
    })
}

fn invalid(name: &str, value: &str) -> Error {
    Error::user(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{value}\""),
    )
}

fn parse_bool(s: &str) -> Option<bool> {
    let l = s.trim().to_ascii_lowercase();
    if l.is_empty() {
        return None;
    }
    let prefix_of = |w: &str, min: usize| l.len() >= min && w.starts_with(l.as_str());
    if prefix_of("true", 1) || prefix_of("yes", 1) || l == "1" || prefix_of("on", 2) {
        Some(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || l == "0" || prefix_of("off", 2) {
        Some(false)
    } else {
        None
    }
}

/// Parses an integer with optional unit into `unit` (rounding to the nearest base unit).
fn parse_int(def: &GucDef, unit: Unit, value: &str) -> Result<i64> {
    let s = value.trim();
    let split = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && i == 0)))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, suffix) = (s[..split].trim(), s[split..].trim());
    let n: f64 = num.parse().map_err(|_| invalid(def.name, value))?;
    let base = if suffix.is_empty() {
        n
    } else {
        let Some((memory, size)) = unit.size() else {
            return Err(invalid(def.name, value));
        };
        let table = if memory { MEMORY_UNITS } else { TIME_UNITS };
        let Some(&(_, mult)) = table.iter().find(|(u, _)| *u == suffix) else {
            let hint = if memory {
                "Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\"."
            } else {
                "Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\"."
            };
            return Err(invalid(def.name, value).with_detail(hint));
        };
        n * mult as f64 / size as f64
    };
    let v = base.round();
    if !v.is_finite() || v.abs() > 9.0e18 {
        return Err(invalid(def.name, value));
    }
    Ok(v as i64)
}

/// Prints a base-unit integer the way `SHOW` does.
fn format_int(v: i64, unit: Unit) -> String {
    let Some((memory, size)) = unit.size() else {
        return v.to_string();
    };
    if v <= 0 {
        return v.to_string();
    }
    let total = v as i128 * size as i128;
    let table = if memory { MEMORY_UNITS } else { TIME_UNITS };
    for (name, mult) in table {
        let mult = *mult as i128;
        let smallest = if memory { 1024 } else { size as i128 };
        if mult >= smallest && total % mult == 0 {
            return format!("{}{}", total / mult, name);
        }
    }
    v.to_string()
}

/// Validates `value` for parameter `name` and returns its normalized text (as `SHOW` prints it:
/// `on`/`off` for booleans, the canonical spelling for enums, the largest exact unit for integers).
///
/// # Errors
/// 42704 unknown parameter; 22023 invalid or out-of-range value.
pub fn check(name: &str, value: &str) -> Result<String> {
    let def = lookup(name)?;
    match def.kind {
        Kind::Bool => match parse_bool(value) {
            Some(b) => Ok(if b { "on" } else { "off" }.to_string()),
            None => Err(Error::user(
                SqlState::INVALID_PARAMETER_VALUE,
                format!("parameter \"{}\" requires a Boolean value", def.name),
            )),
        },
        Kind::Int { min, max, unit } => {
            let v = parse_int(def, unit, value)?;
            if v < min || v > max {
                return Err(Error::user(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                        "{v} is outside the valid range for parameter \"{}\" ({min} .. {max})",
                        def.name
                    ),
                ));
            }
            Ok(format_int(v, unit))
        }
        Kind::Real { min, max } => {
            let v: f64 = value.trim().parse().map_err(|_| invalid(def.name, value))?;
            if !(min..=max).contains(&v) {
                return Err(Error::user(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!(
                        "{v} is outside the valid range for parameter \"{}\" ({min} .. {max})",
                        def.name
                    ),
                ));
            }
            Ok(format!("{v}"))
        }
        Kind::Enum(values) => {
            let l = value.trim().to_ascii_lowercase();
            if let Some(v) = values.iter().find(|v| **v == l) {
                return Ok(v.to_string());
            }
            // synchronous_commit and friends also take boolean spellings.
            if values.contains(&"on") && values.contains(&"off") {
                if let Some(b) = parse_bool(&l) {
                    return Ok(if b { "on" } else { "off" }.to_string());
                }
            }
            Err(invalid(def.name, value)
                .with_detail(format!("Available values: {}.", values.join(", "))))
        }
        Kind::Str => Ok(normalize_str(def, value)?),
    }
}

fn normalize_str(def: &GucDef, value: &str) -> Result<String> {
    match def.name {
        "client_encoding" => {
            let l = value.trim().to_ascii_lowercase().replace(['-', '_'], "");
            match l.as_str() {
                "utf8" | "unicode" | "auto" | "sqlascii" => Ok("UTF8".to_string()),
                _ => Err(invalid(def.name, value)),
            }
        }
        _ => Ok(value.to_string()),
    }
}

/// The value of integer parameter `name` in its base unit (`shared_buffers` `3GB` → 393216
/// pages, `checkpoint_timeout` `15min` → 900 seconds, `max_wal_size` `100GB` → 102400 MB,
/// `wal_writer_delay` `200ms` → 200, `commit_delay` → µs).
///
/// # Errors
/// 42704 unknown parameter; 22023 if the value is invalid or the parameter is not an integer.
pub fn value_as_i64(name: &str, value: &str) -> Result<i64> {
    let def = lookup(name)?;
    match def.kind {
        Kind::Int { unit, .. } => {
            let normalized = check(name, value)?;
            parse_int(def, unit, &normalized)
        }
        _ => Err(invalid(def.name, value)),
    }
}

/// The value of boolean parameter `name` (for `synchronous_commit`: `off` is false, every other
/// level is true).
///
/// # Errors
/// 42704 unknown parameter; 22023 if the value is not a boolean.
pub fn value_as_bool(name: &str, value: &str) -> Result<bool> {
    let normalized = check(name, value)?;
    match normalized.as_str() {
        "on" | "local" | "remote_write" | "remote_apply" => Ok(true),
        "off" => Ok(false),
        _ => Err(Error::user(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("parameter \"{name}\" requires a Boolean value"),
        )),
    }
}

/// Parses postgresql.conf syntax: one `name = value` or `name value` per line, values optionally
/// in single quotes (`''` or `\'` inside), `#` comments, blank lines. Names are lower-cased;
/// neither names nor values are validated (see [`check`]).
///
/// # Errors
/// 42601 with the line number for malformed lines.
pub fn parse_conf(text: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = || Error::syntax(format!("syntax error in configuration file line {}", i + 1));
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(line.len());
        if name_end == 0 {
            return Err(err());
        }
        let name = line[..name_end].to_ascii_lowercase();
        let mut rest = line[name_end..].trim_start();
        if let Some(r) = rest.strip_prefix('=') {
            rest = r.trim_start();
        }
        let (value, after) = if let Some(r) = rest.strip_prefix('\'') {
            let mut value = String::new();
            let mut chars = r.char_indices().peekable();
            let mut end = None;
            while let Some((pos, c)) = chars.next() {
                match c {
                    '\'' if chars.peek().map(|p| p.1) == Some('\'') => {
                        chars.next();
                        value.push('\'');
                    }
                    '\'' => {
                        end = Some(pos + 1);
                        break;
                    }
                    '\\' => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, 't')) => value.push('\t'),
                        Some((_, c)) => value.push(c),
                        None => return Err(err()),
                    },
                    c => value.push(c),
                }
            }
            let end = end.ok_or_else(err)?;
            (value, &r[end..])
        } else {
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '#')
                .unwrap_or(rest.len());
            if end == 0 {
                return Err(err());
            }
            (rest[..end].to_string(), &rest[end..])
        };
        let after = after.trim_start();
        if !(after.is_empty() || after.starts_with('#')) {
            return Err(err());
        }
        out.push((name, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_convert_to_base_units() {
        assert_eq!(value_as_i64("shared_buffers", "3GB").unwrap(), 393_216);
        assert_eq!(value_as_i64("shared_buffers", "128MB").unwrap(), 16_384);
        assert_eq!(value_as_i64("shared_buffers", "1000").unwrap(), 1000);
        assert_eq!(value_as_i64("checkpoint_timeout", "15min").unwrap(), 900);
        assert_eq!(value_as_i64("max_wal_size", "100GB").unwrap(), 102_400);
        assert_eq!(value_as_i64("wal_writer_delay", "200ms").unwrap(), 200);
        assert_eq!(value_as_i64("wal_writer_delay", "1s").unwrap(), 1000);
        assert_eq!(value_as_i64("commit_delay", "10").unwrap(), 10);
        assert!(value_as_i64("commit_delay", "10ms").is_err());
        assert!(value_as_i64("shared_buffers", "3 parsecs").is_err());
        assert!(value_as_i64("checkpoint_timeout", "3GB").is_err());
    }

    #[test]
    fn show_format_uses_largest_exact_unit() {
        assert_eq!(check("shared_buffers", "131072kB").unwrap(), "128MB");
        assert_eq!(check("shared_buffers", "3GB").unwrap(), "3GB");
        assert_eq!(check("checkpoint_timeout", "300").unwrap(), "5min");
        assert_eq!(check("max_wal_size", "1024").unwrap(), "1GB");
        assert_eq!(check("wal_writer_delay", "200ms").unwrap(), "200ms");
        assert_eq!(check("commit_delay", "0").unwrap(), "0");
        assert_eq!(check("statement_timeout", "5000").unwrap(), "5s");
        assert_eq!(check("wal_buffers", "-1").unwrap(), "-1");
        assert_eq!(check("shared_buffers", "1000").unwrap(), "8000kB");
    }

    #[test]
    fn validation_errors() {
        assert_eq!(
            check("commit_delay", "100001").unwrap_err().sqlstate,
            SqlState::INVALID_PARAMETER_VALUE
        );
        assert_eq!(
            check("no_such_thing", "1").unwrap_err().sqlstate,
            SqlState::UNDEFINED_OBJECT
        );
        assert_eq!(
            check("jit", "maybe").unwrap_err().sqlstate,
            SqlState::INVALID_PARAMETER_VALUE
        );
        assert_eq!(check("synchronous_commit", "OFF").unwrap(), "off");
        assert_eq!(
            check("synchronous_commit", "remote_apply").unwrap(),
            "remote_apply"
        );
        assert!(check("group_commit", "sometimes").is_err());
        assert!(value_as_bool("synchronous_commit", "local").unwrap());
        assert!(!value_as_bool("full_page_writes", "off").unwrap());
        assert_eq!(check("fsync", "true").unwrap(), "on");
    }

    #[test]
    fn conf_file_syntax() {
        let text = "# comment\n\nshared_buffers = 3GB   # trailing\nport 5433\nlisten_addresses = '127.0.0.1, ::1'\nsearch_path = 'it''s'\nWal_Writer_Delay=10ms\n";
        let got = parse_conf(text).unwrap();
        assert_eq!(
            got,
            vec![
                ("shared_buffers".into(), "3GB".into()),
                ("port".into(), "5433".into()),
                ("listen_addresses".into(), "127.0.0.1, ::1".into()),
                ("search_path".into(), "it's".into()),
                ("wal_writer_delay".into(), "10ms".into()),
            ]
        );
        assert!(parse_conf("x = 'unterminated\n").is_err());
        assert!(parse_conf("x = a b\n").is_err());
    }
}
