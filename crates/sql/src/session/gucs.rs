//! A session's configuration parameters: PostgreSQL's GUC stack, reduced to what walnut needs.
//!
//! The value of a parameter in a session is the first of:
//! 1. its `SET LOCAL` value, dropped when the transaction ends;
//! 2. its `SET` value; a `SET` made in a transaction that rolls back is undone;
//! 3. its value from the client's startup packet (`options`, PGOPTIONS, other parameters);
//! 4. the server's value in effect ([`Settings`]: default, start-up choice, files, command line).
//!
//! Only `user` parameters have levels 1-3; the others are the server's. The server's values can
//! change by a reload: at the start of each statement the session compares the configuration's
//! generation with the one it last saw and, if it moved, takes the new [`Settings`] (one atomic
//! load when nothing changed).

use super::block::TxnDefaults;
use crate::storage::{CommitOpts, Isolation};
use crate::types::Notice;
use std::collections::HashMap;
use std::sync::Arc;
use walnut_common::config::Config;
use walnut_common::guc::{Context, GucDef, Registry, Settings, Source, Val};
use walnut_common::{Error, Result, SqlState};
use walnut_wal::{SessionId, SynchronousCommit};

/// Startup-packet keys that are not parameters.
const NON_GUC_STARTUP_KEYS: &[&str] = &["user", "database", "replication", "options"];

/// Severities a notice may have, lowest first (`client_min_messages` order).
const LEVELS: &[&str] = &[
    "debug5", "debug4", "debug3", "debug2", "debug1", "log", "notice", "warning", "error",
];

fn level(name: &str) -> usize {
    let l = name.to_ascii_lowercase();
    LEVELS.iter().position(|x| *x == l).unwrap_or(0)
}

/// A session's parameter values.
pub(crate) struct Gucs {
    /// The session's identity in its commits.
    id: SessionId,
    config: Arc<Config>,
    settings: Arc<Settings>,
    generation: u64,
    /// Values from the startup packet.
    startup: HashMap<&'static str, Val>,
    /// Values set with SET (session level).
    session: HashMap<&'static str, Val>,
    /// SET LOCAL values, dropped at transaction end.
    local: HashMap<&'static str, Val>,
    /// Session values as of the first SET in the transaction, restored on rollback.
    saved: Option<HashMap<&'static str, Val>>,
    /// Cached from `synchronous_commit`, `commit_delay` and `commit_siblings`.
    pub(crate) commit: CommitOpts,
    /// Cached `statement_timeout`, ms (0: none).
    pub(crate) statement_timeout_ms: u64,
    /// Cached `default_transaction_isolation` and `default_transaction_read_only`: what each
    /// transaction starts with.
    pub(crate) txn_defaults: TxnDefaults,
    /// Cached `client_min_messages`, as an index into [`LEVELS`].
    min_level: usize,
}

impl Gucs {
    /// The parameters of a new session: the server's configuration and the startup packet's
    /// `options` pairs.
    ///
    /// # Errors
    /// 42704 unknown parameter, 22023/0A000 invalid value, 55P02 for a parameter that cannot
    /// change per session.
    pub(crate) fn new(config: Arc<Config>, options: &[(String, String)]) -> Result<Gucs> {
        let settings = config.settings();
        let mut startup = HashMap::new();
        for (name, value) in options {
            if NON_GUC_STARTUP_KEYS
                .iter()
                .any(|k| k.eq_ignore_ascii_case(name))
                || name.starts_with("_pq_.")
            {
                continue;
            }
            let def = settings.registry().lookup(name)?;
            check_settable(def)?;
            startup.insert(def.name, def.parse(value)?);
        }
        let mut g = Gucs {
            id: SessionId::next(),
            generation: config.generation(),
            config,
            settings,
            startup,
            session: HashMap::new(),
            local: HashMap::new(),
            saved: None,
            commit: CommitOpts::new(SessionId(0)),
            statement_timeout_ms: 0,
            txn_defaults: TxnDefaults {
                isolation: Isolation::ReadCommitted,
                read_only: false,
            },
            min_level: 0,
        };
        g.refresh();
        Ok(g)
    }

    /// The registry of every parameter.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        self.settings.registry()
    }

    /// The live server configuration.
    pub(crate) fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// Takes the server's new values if a reload published some since the last look.
    pub(crate) fn catch_up(&mut self) {
        let g = self.config.generation();
        if g != self.generation {
            self.generation = g;
            self.settings = self.config.settings();
            self.refresh();
        }
    }

    /// The value in effect of `def`.
    pub(crate) fn value(&self, def: &'static GucDef) -> Val {
        if def.context == Context::User {
            if let Some(v) = self
                .local
                .get(def.name)
                .or_else(|| self.session.get(def.name))
                .or_else(|| self.startup.get(def.name))
            {
                return v.clone();
            }
        }
        self.settings.get(def)
    }

    /// The value of `def` as `SHOW` prints it.
    pub(crate) fn show(&self, def: &'static GucDef) -> String {
        def.show(&self.value(def))
    }

    /// Where the value in effect of `def` came from.
    fn source(&self, def: &'static GucDef) -> Source {
        if self.local.contains_key(def.name) || self.session.contains_key(def.name) {
            Source::Session
        } else if self.startup.contains_key(def.name) {
            Source::Client
        } else {
            self.settings.setting(def).source
        }
    }

    /// The value `RESET` returns `def` to.
    pub(crate) fn reset_value(&self, def: &'static GucDef) -> Val {
        self.startup
            .get(def.name)
            .cloned()
            .unwrap_or_else(|| self.settings.get(def))
    }

    /// `SET [LOCAL] def = value` (`value: None`: `DEFAULT`, `RESET`). `in_txn`: a transaction
    /// is open, so the session values are saved for a rollback first.
    pub(crate) fn set(
        &mut self,
        def: &'static GucDef,
        value: Option<Val>,
        local: bool,
        in_txn: bool,
    ) {
        if in_txn && self.saved.is_none() {
            self.saved = Some(self.session.clone());
        }
        match (value, local) {
            (Some(v), true) => {
                self.local.insert(def.name, v);
            }
            (None, true) => {
                let v = self.reset_value(def);
                self.local.insert(def.name, v);
            }
            (v, false) => {
                self.local.remove(def.name);
                match v {
                    Some(v) => self.session.insert(def.name, v),
                    None => self.session.remove(def.name),
                };
            }
        }
        self.refresh();
    }

    /// Ends a transaction: SET LOCAL values go; on rollback, SETs made in it are undone.
    /// Nothing to do, and no recomputation, for a transaction that set nothing (the common
    /// case: this runs at every commit).
    pub(crate) fn end_txn(&mut self, committed: bool) {
        if self.saved.is_none() && self.local.is_empty() {
            return;
        }
        if let Some(saved) = self.saved.take() {
            if !committed {
                self.session = saved;
            }
        }
        self.local.clear();
        self.refresh();
    }

    /// Recomputes the cached values.
    fn refresh(&mut self) {
        use walnut_wal::guc::{COMMIT_DELAY, COMMIT_SIBLINGS, SYNCHRONOUS_COMMIT};
        let int = |g: &Self, def| match g.value(def) {
            Val::Int(v) => v,
            _ => 0,
        };
        self.commit = CommitOpts {
            session: self.id,
            synchronous_commit: SynchronousCommit::from_val(&self.value(&SYNCHRONOUS_COMMIT)),
            commit_delay_us: int(self, &COMMIT_DELAY) as u32,
            commit_siblings: int(self, &COMMIT_SIBLINGS) as u32,
        };
        self.statement_timeout_ms = int(self, &crate::guc::STATEMENT_TIMEOUT).max(0) as u64;
        self.txn_defaults = TxnDefaults {
            isolation: crate::guc::isolation(
                &self.show(&crate::guc::DEFAULT_TRANSACTION_ISOLATION),
            ),
            read_only: self.value(&crate::guc::DEFAULT_TRANSACTION_READ_ONLY) == Val::Bool(true),
        };
        self.min_level = level(&self.show(&crate::guc::CLIENT_MIN_MESSAGES));
    }

    /// Whether a notice of `severity` (`NOTICE`, `WARNING`, ...) reaches the client under
    /// `client_min_messages`.
    pub(crate) fn sends(&self, n: &Notice) -> bool {
        // INFO (VACUUM VERBOSE's) always goes to the client, as in PostgreSQL.
        n.severity == "INFO" || level(n.severity) >= self.min_level
    }

    /// Every parameter `RESET ALL` resets.
    pub(crate) fn user_params(&self) -> Vec<&'static GucDef> {
        self.registry()
            .iter()
            .filter(|d| d.context == Context::User)
            .collect()
    }

    /// The `pg_settings` row of `def` (PostgreSQL 18's columns, see [`PG_SETTINGS_COLUMNS`]).
    pub(crate) fn pg_settings_row(&self, def: &'static GucDef) -> Vec<walnut_common::Value> {
        use walnut_common::guc::Kind;
        use walnut_common::Value as V;
        let text = |s: String| V::Text(s);
        let opt = |s: Option<String>| s.map_or(V::Null, V::Text);
        let server = self.settings.setting(def);
        let source = self.source(def);
        let (file, line) = match &server.source {
            Source::File { path, line } if source == server.source => {
                (opt(Some(path.display().to_string())), V::Int4(*line as i32))
            }
            _ => (V::Null, V::Null),
        };
        let (unit, min, max, enumvals) = match def.kind {
            Kind::Int { min, max, unit } => (
                unit.name().map(str::to_string),
                Some(min.to_string()),
                Some(max.to_string()),
                None,
            ),
            Kind::Real { min, max } => (None, Some(format!("{min}")), Some(format!("{max}")), None),
            Kind::Enum(values) => (None, None, None, Some(format!("{{{}}}", values.join(",")))),
            Kind::Bool | Kind::Str => (None, None, None, None),
        };
        vec![
            text(def.name.to_string()),
            text(def.setting(&self.value(def))),
            opt(unit),
            text(def.category.to_string()),
            text(def.description.to_string()),
            V::Null,
            text(def.context.name().to_string()),
            text(def.vartype().to_string()),
            text(source.name().to_string()),
            opt(min),
            opt(max),
            opt(enumvals),
            text(def.setting(&def.default_value())),
            text(def.setting(&self.reset_value(def))),
            file,
            line,
            V::Bool(server.pending_restart),
        ]
    }
}

/// The columns of `pg_settings`, as PostgreSQL 18's (`enumvals` is the text form of its array).
pub(crate) const PG_SETTINGS_COLUMNS: &[(&str, walnut_common::DataType)] = {
    use walnut_common::DataType::{Bool, Int4, Text};
    &[
        ("name", Text),
        ("setting", Text),
        ("unit", Text),
        ("category", Text),
        ("short_desc", Text),
        ("extra_desc", Text),
        ("context", Text),
        ("vartype", Text),
        ("source", Text),
        ("min_val", Text),
        ("max_val", Text),
        ("enumvals", Text),
        ("boot_val", Text),
        ("reset_val", Text),
        ("sourcefile", Text),
        ("sourceline", Int4),
        ("pending_restart", Bool),
    ]
};

/// 55P02 unless `def` may be set per session.
///
/// # Errors
/// 55P02 `parameter "x" cannot be changed without restarting the server` (postmaster),
/// `... cannot be changed now` (sighup), `... cannot be changed` (internal).
pub(crate) fn check_settable(def: &GucDef) -> Result<()> {
    let msg = match def.context {
        Context::User => return Ok(()),
        Context::Postmaster => format!(
            "parameter \"{}\" cannot be changed without restarting the server",
            def.name
        ),
        Context::Sighup => format!("parameter \"{}\" cannot be changed now", def.name),
        Context::Internal => format!("parameter \"{}\" cannot be changed", def.name),
    };
    Err(Error::user(SqlState::CANT_CHANGE_RUNTIME_PARAM, msg))
}
