//! What planning and execution read besides the transaction: the system views (the engine's,
//! such as `pg_stat_wal` and `pg_class`, and the session's `pg_settings`) and the server's
//! configuration (`pg_reload_conf()`), and who the session is (`pg_backend_pid()`, the
//! progress views). The session provides it.

use crate::progress::Reporter;
use walnut_common::{ColumnDef, Result, Value};

/// A statement's environment.
pub(crate) trait Env {
    /// The columns and rows of system view `name`, or `None` if there is none of that name.
    fn view(&self, name: &str) -> Option<(Vec<ColumnDef>, Vec<Vec<Value>>)>;

    /// `pg_reload_conf()`: reloads the configuration files.
    ///
    /// # Errors
    /// None in PostgreSQL's sense (errors in the files are logged and change nothing); a
    /// server without files says so with 55000.
    fn reload_conf(&self) -> Result<()>;

    /// The backend's process id (`pg_backend_pid()`); 0 if the front end never said.
    fn backend_pid(&self) -> i32;

    /// The user the session connected as (`current_user`, `session_user`); `postgres` if the
    /// front end never said.
    fn session_user(&self) -> String {
        "postgres".into()
    }

    /// The database the session connected to (`current_database()`); `postgres` if the front
    /// end never said.
    fn database(&self) -> String {
        "postgres".into()
    }

    /// See [`crate::storage::Engine::relation_size`].
    fn relation_size(&self, oid: i64, which: crate::storage::RelationSize) -> Option<i64>;

    /// The WAL's positions (`pg_current_wal_lsn()` and its siblings).
    ///
    /// # Errors
    /// 55000 if the engine has no WAL.
    fn wal_positions(&self) -> Result<crate::storage::WalPositions>;

    /// The engine's recovery state (`None` on a primary).
    fn recovery(&self) -> Option<crate::storage::RecoveryStatus>;

    /// See [`crate::storage::Engine::recovery_control`].
    ///
    /// # Errors
    /// 55000 when the server is not in recovery.
    fn recovery_control(&self, op: crate::storage::RecoveryControl) -> Result<bool>;

    /// Where the statement's bulk work (an index build) registers in the progress views, if
    /// the engine has them.
    fn progress(&self) -> Option<&Reporter>;

    /// `nextval`, `currval`, `setval` and `lastval` (a bigint), through the session's
    /// sequence state ([`crate::sequence::SessionSeqs::call`]). The default: 0A000.
    ///
    /// # Errors
    /// As [`crate::sequence::SessionSeqs::call`].
    fn sequence(&self, call: crate::sequence::SeqCall) -> Result<Value> {
        let _ = call;
        Err(walnut_common::Error::unsupported("sequences here"))
    }

    /// `current_setting(name, missing_ok)`: the parameter's value as `SHOW` prints it, with a
    /// `set_config` of the same statement applied; `None` for an unknown name when
    /// `missing_ok`. The default: 0A000.
    ///
    /// # Errors
    /// 42704 for an unknown name unless `missing_ok`.
    fn setting(&self, name: &str, missing_ok: bool) -> Result<Option<String>> {
        let _ = (name, missing_ok);
        Err(walnut_common::Error::unsupported("current_setting here"))
    }

    /// `set_config(name, value, local)`: checks `value` (`None`: the value `RESET` gives) now
    /// and has the session apply it as `SET [LOCAL]` when the statement succeeds (a failed
    /// statement's is undone with its transaction in PostgreSQL too); `local` outside a
    /// transaction block lasts until the statement's end, so it changes nothing. Returns the
    /// new value as `SHOW` prints it. The default: 0A000.
    ///
    /// # Errors
    /// 42704 unknown name; 55P02 a parameter that cannot be set in a session; 22023 and 0A000
    /// from the parameter's checks; 0A000 for `transaction_isolation` and
    /// `transaction_read_only` (SET TRANSACTION sets them).
    fn set_config(&self, name: &str, value: Option<&str>, local: bool) -> Result<String> {
        let _ = (name, value, local);
        Err(walnut_common::Error::unsupported("set_config here"))
    }
}
