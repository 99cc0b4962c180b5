//! Configuration parameters (GUCs): how a parameter is declared, how its values are parsed and
//! printed, the registry that collects every crate's declarations, and [`Settings`], the values
//! in effect with where each came from.
//!
//! Each crate declares the parameters it reads, next to the code that reads them, as statics
//! listed in a `pub static GUCS: &[&GucDef]` (`walnut_wal::GUCS`, `walnut_storage::GUCS`, ...). The server
//! collects the lists into one [`Registry`]. A parameter exists only if some code reads it.
//!
//! Values are parsed once, into typed [`Val`]s, and printed from them. Integer parameters with a
//! unit accept PostgreSQL's unit suffixes (memory `B`, `kB`, `MB`, `GB`, `TB`; time `us`, `ms`,
//! `s`, `min`, `h`, `d`) and are kept in the parameter's *base unit* (`shared_buffers` counts
//! 8 kB pages, `checkpoint_timeout` seconds). `SHOW` prints the largest unit that divides the
//! value exactly (`131072kB` of `shared_buffers` prints as `128MB`), as PostgreSQL's
//! `GetConfigOption` does; `pg_settings.setting` prints the number in base units.
//! Source: PostgreSQL `src/backend/utils/misc/guc.c` (`parse_int`, `convert_to_base_unit`,
//! `convert_int_from_base_unit`, `parse_bool`) and `guc-file.l` for the file syntax.

use crate::{Error, Result, SqlState};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// When a parameter may change (`pg_settings.context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Read-only, reported by the server.
    Internal,
    /// Only at server start (configuration file or command line).
    Postmaster,
    /// In the configuration files, applied on reload (`pg_reload_conf()`, SIGHUP).
    Sighup,
    /// Any session, with `SET` or startup options (walnut has only superusers).
    User,
}

impl Context {
    /// The name `pg_settings.context` shows.
    pub fn name(self) -> &'static str {
        match self {
            Context::Internal => "internal",
            Context::Postmaster => "postmaster",
            Context::Sighup => "sighup",
            Context::User => "user",
        }
    }
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
    /// Size of one base unit: (memory?, bytes for memory units or µs for time units).
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

    /// The name `pg_settings.unit` shows (`None` for a plain number).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Unit::None => None,
            Unit::Kb => Some("kB"),
            Unit::Blocks => Some("8kB"),
            Unit::Mb => Some("MB"),
            Unit::Us => Some("us"),
            Unit::Ms => Some("ms"),
            Unit::S => Some("s"),
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
    /// Free text, checked by the declaring crate's `check` if it has one.
    Str,
    /// One of the listed values (case-insensitive). With both `on` and `off` listed, boolean
    /// spellings are accepted too, as for `synchronous_commit`.
    Enum(&'static [&'static str]),
}

/// A typed parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// A boolean.
    Bool(bool),
    /// An integer, in the parameter's base unit.
    Int(i64),
    /// A real number.
    Real(f64),
    /// Text.
    Str(String),
    /// An enum's canonical spelling.
    Enum(&'static str),
}

/// One parameter's declaration.
#[derive(Debug)]
pub struct GucDef {
    /// Canonical name (as `SHOW` labels its column).
    pub name: &'static str,
    /// Value type.
    pub kind: Kind,
    /// Default value, as text in the parameter's syntax (checked by each crate's tests).
    pub default: &'static str,
    /// When it may change.
    pub context: Context,
    /// `pg_settings.category`, PostgreSQL's grouping (`Write-Ahead Log / Settings`).
    pub category: &'static str,
    /// One-line description (`pg_settings.short_desc`, `SHOW ALL`).
    pub description: &'static str,
    /// Further validation of a parsed value (say, `io_direct`'s list), returning its canonical
    /// form (`client_encoding` `utf-8` is `UTF8`), with PostgreSQL's 22023/0A000 errors;
    /// `None` if the kind says it all.
    pub check: Option<fn(Val) -> Result<Val>>,
}

/// Shorthand for an integer kind.
pub const fn int(min: i64, max: i64, unit: Unit) -> Kind {
    Kind::Int { min, max, unit }
}

/// The largest value of an `int4` parameter, as PostgreSQL's `INT_MAX`.
pub const INT_MAX: i64 = i32::MAX as i64;

fn invalid(name: &str, value: &str) -> Error {
    Error::user(
        SqlState::INVALID_PARAMETER_VALUE,
        format!("invalid value for parameter \"{name}\": \"{value}\""),
    )
}

/// PostgreSQL's `parse_bool`: true, yes, on, 1 and false, no, off, 0, and unique prefixes.
pub fn parse_bool(s: &str) -> Option<bool> {
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

impl GucDef {
    /// Parses `value` into this parameter's type and checks its range.
    ///
    /// # Errors
    /// 22023 for an invalid or out-of-range value (PostgreSQL's messages); whatever
    /// [`GucDef::check`] returns.
    pub fn parse(&self, value: &str) -> Result<Val> {
        let v = match self.kind {
            Kind::Bool => match parse_bool(value) {
                Some(b) => Val::Bool(b),
                None => {
                    return Err(Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("parameter \"{}\" requires a Boolean value", self.name),
                    ))
                }
            },
            Kind::Int { min, max, unit } => {
                let v = self.parse_int(unit, value)?;
                if v < min || v > max {
                    return Err(Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!(
                            "{v} is outside the valid range for parameter \"{}\" ({min} .. {max})",
                            self.name
                        ),
                    ));
                }
                Val::Int(v)
            }
            Kind::Real { min, max } => {
                let v: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| invalid(self.name, value))?;
                if !(min..=max).contains(&v) {
                    return Err(Error::user(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!(
                            "{v} is outside the valid range for parameter \"{}\" ({min} .. {max})",
                            self.name
                        ),
                    ));
                }
                Val::Real(v)
            }
            Kind::Enum(values) => {
                let l = value.trim().to_ascii_lowercase();
                if let Some(v) = values.iter().find(|v| **v == l) {
                    Val::Enum(v)
                } else {
                    let boolean = values.contains(&"on") && values.contains(&"off");
                    match parse_bool(&l).filter(|_| boolean) {
                        Some(true) => Val::Enum("on"),
                        Some(false) => Val::Enum("off"),
                        None => {
                            return Err(invalid(self.name, value)
                                .with_detail(format!("Available values: {}.", values.join(", "))))
                        }
                    }
                }
            }
            Kind::Str => Val::Str(value.to_string()),
        };
        match self.check {
            Some(check) => check(v),
            None => Ok(v),
        }
    }

    /// The default, parsed.
    ///
    /// # Panics
    /// If the declared default does not parse (a bug; every crate's tests parse all of theirs).
    pub fn default_value(&self) -> Val {
        self.parse(self.default)
            .unwrap_or_else(|e| panic!("default of parameter \"{}\": {e}", self.name))
    }

    /// Parses an integer with optional unit into `unit` (rounding to the nearest base unit).
    fn parse_int(&self, unit: Unit, value: &str) -> Result<i64> {
        let s = value.trim();
        let split = s
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && i == 0)))
            .map(|(i, _)| i)
            .unwrap_or(s.len());
        let (num, suffix) = (s[..split].trim(), s[split..].trim());
        let n: f64 = num.parse().map_err(|_| invalid(self.name, value))?;
        let base = if suffix.is_empty() {
            n
        } else {
            let Some((memory, size)) = unit.size() else {
                return Err(invalid(self.name, value));
            };
            let table = if memory { MEMORY_UNITS } else { TIME_UNITS };
            let Some(&(_, mult)) = table.iter().find(|(u, _)| *u == suffix) else {
                let hint = if memory {
                    "Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\"."
                } else {
                    "Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\"."
                };
                return Err(invalid(self.name, value).with_detail(hint));
            };
            n * mult as f64 / size as f64
        };
        let v = base.round();
        if !v.is_finite() || v.abs() > 9.0e18 {
            return Err(invalid(self.name, value));
        }
        Ok(v as i64)
    }

    /// `value` as `SHOW` prints it: `on`/`off`, the canonical enum spelling, an integer in the
    /// largest unit that divides it exactly.
    pub fn show(&self, value: &Val) -> String {
        match (value, self.kind) {
            (Val::Int(v), Kind::Int { unit, .. }) => format_int(*v, unit),
            _ => self.setting(value),
        }
    }

    /// `value` as `pg_settings.setting` prints it: integers as a number in the base unit,
    /// everything else as `SHOW` does.
    pub fn setting(&self, value: &Val) -> String {
        match value {
            Val::Bool(b) => if *b { "on" } else { "off" }.to_string(),
            Val::Int(v) => v.to_string(),
            Val::Real(v) => format!("{v}"),
            Val::Str(s) => s.clone(),
            Val::Enum(s) => s.to_string(),
        }
    }

    /// `pg_settings.vartype`.
    pub fn vartype(&self) -> &'static str {
        match self.kind {
            Kind::Bool => "bool",
            Kind::Int { .. } => "integer",
            Kind::Real { .. } => "real",
            Kind::Str => "string",
            Kind::Enum(_) => "enum",
        }
    }

    /// Validates `value` and returns it as `SHOW` would print it.
    ///
    /// # Errors
    /// As [`GucDef::parse`].
    pub fn normalize(&self, value: &str) -> Result<String> {
        Ok(self.show(&self.parse(value)?))
    }
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

/// Every parameter walnut knows: the union of the crates' `GUCS` lists, sorted by name.
#[derive(Debug)]
pub struct Registry {
    defs: Vec<&'static GucDef>,
}

impl Registry {
    /// Collects the given lists.
    ///
    /// # Panics
    /// If two declarations share a name (case-insensitively): a bug.
    pub fn new(lists: &[&'static [&'static GucDef]]) -> Registry {
        let mut defs: Vec<&'static GucDef> = lists.iter().flat_map(|l| l.iter().copied()).collect();
        defs.sort_by_key(|d| d.name.to_ascii_lowercase());
        for w in defs.windows(2) {
            assert!(
                !w[0].name.eq_ignore_ascii_case(w[1].name),
                "parameter \"{}\" is declared twice",
                w[0].name
            );
        }
        Registry { defs }
    }

    /// The declaration of `name` (case-insensitive), if any.
    pub fn find(&self, name: &str) -> Option<&'static GucDef> {
        let key = name.to_ascii_lowercase();
        self.defs
            .binary_search_by(|d| d.name.to_ascii_lowercase().cmp(&key))
            .ok()
            .map(|i| self.defs[i])
    }

    /// The declaration of `name`, or 42704 `unrecognized configuration parameter "name"`.
    ///
    /// # Errors
    /// 42704 for unknown names.
    pub fn lookup(&self, name: &str) -> Result<&'static GucDef> {
        self.find(name).ok_or_else(|| unrecognized(name))
    }

    /// Every declaration, sorted by lower-cased name.
    pub fn iter(&self) -> impl Iterator<Item = &'static GucDef> + '_ {
        self.defs.iter().copied()
    }
}

/// 42704 `unrecognized configuration parameter "name"`.
pub fn unrecognized(name: &str) -> Error {
    Error::user(
        SqlState::UNDEFINED_OBJECT,
        format!(
            "unrecognized configuration parameter \"{}\"",
            name.to_ascii_lowercase()
        ),
    )
}

/// Where a value in effect came from (`pg_settings.source`), in increasing priority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The declared default.
    Default,
    /// Chosen by the server at start-up in place of the default (the `wal_sync_method` the
    /// start-up probe picked; PostgreSQL's `PGC_S_DYNAMIC_DEFAULT`, shown as `default`).
    DynamicDefault,
    /// A configuration file, with the line.
    File {
        /// The file.
        path: PathBuf,
        /// Its line, from 1.
        line: usize,
    },
    /// `-c name=value` or `-p` on the server's command line.
    CommandLine,
    /// The client's startup packet (`options`, PGOPTIONS, other parameters).
    Client,
    /// `SET` in the session.
    Session,
}

impl Source {
    /// The name `pg_settings.source` shows.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Default | Source::DynamicDefault => "default",
            Source::File { .. } => "configuration file",
            Source::CommandLine => "command line",
            Source::Client => "client",
            Source::Session => "session",
        }
    }
}

/// One parameter's value in effect.
#[derive(Clone, Debug)]
pub struct Setting {
    /// The value.
    pub value: Val,
    /// Where it came from.
    pub source: Source,
    /// A configuration file changed it since start, but it takes effect only at the next start.
    pub pending_restart: bool,
}

/// The server-wide values in effect: defaults, overridden by the configuration files and the
/// command line, and by what the server chose at start-up. Immutable; a reload builds a new one
/// ([`crate::config::Config`]).
#[derive(Clone, Debug)]
pub struct Settings {
    registry: Arc<Registry>,
    values: HashMap<&'static str, Setting>,
}

impl Settings {
    /// Every parameter at its default, with an empty registry: for reading the defaults of
    /// known declarations (`StorageConfig::default`, tests).
    pub fn builtin() -> Settings {
        Settings::defaults(Arc::new(Registry::new(&[])))
    }

    /// Every parameter at its default.
    pub fn defaults(registry: Arc<Registry>) -> Settings {
        Settings {
            registry,
            values: HashMap::new(),
        }
    }

    /// The registry the names come from.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Sets `name` to `value`, from `source`.
    ///
    /// # Errors
    /// 42704 unknown name, 22023 bad value.
    pub fn set(&mut self, name: &str, value: &str, source: Source) -> Result<()> {
        let def = self.registry.lookup(name)?;
        let value = def.parse(value)?;
        self.values.insert(
            def.name,
            Setting {
                value,
                source,
                pending_restart: false,
            },
        );
        Ok(())
    }

    /// Replaces the setting of `def` (used by reload and by the server's own choices).
    pub fn put(&mut self, def: &'static GucDef, setting: Setting) {
        self.values.insert(def.name, setting);
    }

    /// The setting of `def`: what was set, else the default.
    pub fn setting(&self, def: &'static GucDef) -> Setting {
        self.values
            .get(def.name)
            .cloned()
            .unwrap_or_else(|| Setting {
                value: def.default_value(),
                source: Source::Default,
                pending_restart: false,
            })
    }

    /// The value of `def`.
    pub fn get(&self, def: &'static GucDef) -> Val {
        match self.values.get(def.name) {
            Some(s) => s.value.clone(),
            None => def.default_value(),
        }
    }

    /// The value of boolean parameter `def`.
    ///
    /// # Panics
    /// If `def` is not a boolean (a bug in the caller).
    pub fn bool(&self, def: &'static GucDef) -> bool {
        match self.get(def) {
            Val::Bool(b) => b,
            other => panic!("parameter \"{}\" is not a boolean: {other:?}", def.name),
        }
    }

    /// The value of integer parameter `def`, in its base unit.
    ///
    /// # Panics
    /// If `def` is not an integer (a bug in the caller).
    pub fn int(&self, def: &'static GucDef) -> i64 {
        match self.get(def) {
            Val::Int(v) => v,
            other => panic!("parameter \"{}\" is not an integer: {other:?}", def.name),
        }
    }

    /// The value of floating-point parameter `def`.
    ///
    /// # Panics
    /// If `def` is not a real (a bug in the caller).
    pub fn real(&self, def: &'static GucDef) -> f64 {
        match self.get(def) {
            Val::Real(v) => v,
            other => panic!("parameter \"{}\" is not a real: {other:?}", def.name),
        }
    }

    /// The value of string or enum parameter `def`.
    ///
    /// # Panics
    /// If `def` is a boolean or a number (a bug in the caller).
    pub fn text(&self, def: &'static GucDef) -> String {
        match self.get(def) {
            Val::Str(s) => s,
            Val::Enum(s) => s.to_string(),
            other => panic!("parameter \"{}\" is not text: {other:?}", def.name),
        }
    }

    /// The value of `name` as `SHOW` prints it.
    ///
    /// # Errors
    /// 42704 for unknown names.
    pub fn show(&self, name: &str) -> Result<String> {
        let def = self.registry.lookup(name)?;
        Ok(def.show(&self.get(def)))
    }

    /// The parameters explicitly set (by a file, the command line or the server), in no order.
    pub fn explicit(&self) -> impl Iterator<Item = (&'static str, &Setting)> {
        self.values.iter().map(|(k, v)| (*k, v))
    }
}

/// Parses postgresql.conf syntax: one `name = value` or `name value` per line, values optionally
/// in single quotes (`''` or `\'` inside), `#` comments, blank lines. Returns (name lower-cased,
/// value, line number from 1). Neither names nor values are validated.
///
/// # Errors
/// 42601 with the line number for malformed lines.
pub fn parse_conf(text: &str) -> Result<Vec<(String, String, usize)>> {
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
        out.push((name, value, i + 1));
    }
    Ok(out)
}

/// Quotes `value` for a configuration file line (`'it''s'`).
pub fn quote_conf(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    static TEST_DEFS: [GucDef; 6] = [
        GucDef {
            name: "mem",
            kind: int(16, INT_MAX / 2, Unit::Blocks),
            default: "128MB",
            context: Context::Postmaster,
            category: "Resource Usage / Memory",
            description: "",
            check: None,
        },
        GucDef {
            name: "secs",
            kind: int(30, 86400, Unit::S),
            default: "5min",
            context: Context::Sighup,
            category: "",
            description: "",
            check: None,
        },
        GucDef {
            name: "ms",
            kind: int(1, 10_000, Unit::Ms),
            default: "200ms",
            context: Context::User,
            category: "",
            description: "",
            check: None,
        },
        GucDef {
            name: "plain",
            kind: int(-1, 100_000, Unit::None),
            default: "0",
            context: Context::User,
            category: "",
            description: "",
            check: None,
        },
        GucDef {
            name: "Flag",
            kind: Kind::Bool,
            default: "on",
            context: Context::User,
            category: "",
            description: "",
            check: None,
        },
        GucDef {
            name: "level",
            kind: Kind::Enum(&["on", "off", "local", "remote_apply"]),
            default: "on",
            context: Context::User,
            category: "",
            description: "",
            check: None,
        },
    ];

    static TEST: &[&GucDef] = &[
        &TEST_DEFS[0],
        &TEST_DEFS[1],
        &TEST_DEFS[2],
        &TEST_DEFS[3],
        &TEST_DEFS[4],
        &TEST_DEFS[5],
    ];

    fn registry() -> Arc<Registry> {
        Arc::new(Registry::new(&[TEST]))
    }

    fn def(name: &str) -> &'static GucDef {
        registry().lookup(name).unwrap()
    }

    #[test]
    fn units_convert_to_base_units() {
        let int = |n: &str, v: &str| match def(n).parse(v).unwrap() {
            Val::Int(i) => i,
            other => panic!("{other:?}"),
        };
        assert_eq!(int("mem", "3GB"), 393_216);
        assert_eq!(int("mem", "128MB"), 16_384);
        assert_eq!(int("mem", "1000"), 1000);
        assert_eq!(int("secs", "15min"), 900);
        assert_eq!(int("ms", "200ms"), 200);
        assert_eq!(int("ms", "1s"), 1000);
        assert!(def("plain").parse("10ms").is_err());
        assert!(def("mem").parse("3 parsecs").is_err());
        assert!(def("secs").parse("3GB").is_err());
    }

    #[test]
    fn show_uses_the_largest_exact_unit_and_setting_the_base_unit() {
        let show = |n: &str, v: &str| def(n).normalize(v).unwrap();
        assert_eq!(show("mem", "131072kB"), "128MB");
        assert_eq!(show("mem", "3GB"), "3GB");
        assert_eq!(show("mem", "1000"), "8000kB");
        assert_eq!(show("secs", "300"), "5min");
        assert_eq!(show("ms", "5000"), "5s");
        assert_eq!(show("plain", "-1"), "-1");
        let d = def("mem");
        assert_eq!(d.setting(&d.parse("128MB").unwrap()), "16384");
    }

    #[test]
    fn validation_errors() {
        assert_eq!(
            def("plain").parse("100001").unwrap_err().sqlstate,
            SqlState::INVALID_PARAMETER_VALUE
        );
        assert_eq!(
            registry().lookup("no_such").unwrap_err().sqlstate,
            SqlState::UNDEFINED_OBJECT
        );
        assert_eq!(
            def("flag").parse("maybe").unwrap_err().sqlstate,
            SqlState::INVALID_PARAMETER_VALUE
        );
        assert_eq!(def("level").parse("OFF").unwrap(), Val::Enum("off"));
        assert_eq!(def("level").parse("true").unwrap(), Val::Enum("on"));
        assert!(def("level").parse("sometimes").is_err());
        assert_eq!(def("flag").parse("tr").unwrap(), Val::Bool(true));
    }

    #[test]
    fn settings_fall_back_to_defaults_and_record_sources() {
        let mut s = Settings::defaults(registry());
        assert_eq!(s.int(def("mem")), 16_384);
        assert_eq!(s.setting(def("mem")).source, Source::Default);
        s.set("MEM", "1GB", Source::CommandLine).unwrap();
        assert_eq!(s.int(def("mem")), 131_072);
        assert_eq!(s.show("mem").unwrap(), "1GB");
        assert_eq!(s.setting(def("mem")).source.name(), "command line");
        assert!(s.set("mem", "1", Source::CommandLine).is_err());
        assert!(s.set("nope", "1", Source::CommandLine).is_err());
    }

    #[test]
    #[should_panic(expected = "declared twice")]
    fn a_name_is_declared_once() {
        Registry::new(&[TEST, TEST]);
    }

    #[test]
    fn conf_file_syntax() {
        let text = "# comment\n\nshared_buffers = 3GB   # trailing\nport 5433\nlisten_addresses = '127.0.0.1, ::1'\nsearch_path = 'it''s'\nWal_Writer_Delay=10ms\n";
        let got = parse_conf(text).unwrap();
        let pairs: Vec<(&str, &str, usize)> = got
            .iter()
            .map(|(a, b, l)| (a.as_str(), b.as_str(), *l))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("shared_buffers", "3GB", 3),
                ("port", "5433", 4),
                ("listen_addresses", "127.0.0.1, ::1", 5),
                ("search_path", "it's", 6),
                ("wal_writer_delay", "10ms", 7),
            ]
        );
        assert!(parse_conf("x = 'unterminated\n").is_err());
        assert!(parse_conf("x = a b\n").is_err());
        let quoted = quote_conf(r"it's a \ test");
        let back = parse_conf(&format!("x = {quoted}\n")).unwrap();
        assert_eq!(back[0].1, r"it's a \ test");
    }
}
