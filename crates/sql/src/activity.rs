//! `pg_stat_activity`, with PostgreSQL 18's columns: a row per session (`client backend`)
//! and per autovacuum worker while it vacuums a table (`autovacuum worker`), PostgreSQL's
//! `pgstat_report_activity` and `pg_stat_get_activity` (`backend_status.c`, `pgstatfuncs.c`).
//!
//! A session registers a [`BackendStatus`] in the engine's progress registry
//! (`crate::progress::Registry`) when the front end tells it who it is
//! (`Session::set_backend`), and the row lasts as long as the session. The session's own
//! thread updates the status under a mutex held for a few stores, never across a wait:
//! - a statement starts ([`BackendStatus::start_statement`]): `state` = `active`, `query` =
//!   its text, `query_start` = now, and `xact_start` = now if no transaction was open;
//! - the session is about to send ReadyForQuery ([`BackendStatus::ready`]): `state` = `idle`,
//!   `idle in transaction` or `idle in transaction (aborted)`, and `xact_start` is cleared
//!   outside a transaction. `query` stays the last statement's, as PostgreSQL's does.
//!
//! Readers copy the status under the same mutex, so a row is one consistent snapshot of one
//! backend (PostgreSQL's `st_changecount` protocol gives the same guarantee without a lock).
//!
//! Not kept: `wait_event_type` and `wait_event` (NULL), `backend_xid` and `backend_xmin`
//! (NULL), `query_id` (NULL, as with `compute_query_id = off`), `leader_pid` (no parallel
//! workers), `client_hostname` (no `log_hostname`). Background processes other than
//! autovacuum workers (checkpointer, background writer, walwriter, autovacuum launcher) have
//! no row. walnut has no `inet`, `oid`, `xid` or `timestamptz` types yet: `client_addr` is
//! text, `datid`/`usesysid` are bigint, and the times are `timestamp` values in UTC.

use crate::types::TxnStatus;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use walnut_common::{ColumnDef, DataType, Value};

/// Who the client is, as its startup packet and socket say.
#[derive(Clone, Debug, Default)]
pub struct ClientIdentity {
    /// The user name it connected as (`usename`).
    pub user: String,
    /// Its `application_name` (the session's setting: `Session::set_client` fills it in).
    pub application_name: String,
    /// Its address and port; `None` for a Unix socket or an in-process session.
    pub addr: Option<SocketAddr>,
    /// A replication connection (`backend_type` `walsender`); its replication commands do
    /// not go through the session, so its `state` and `query` are not kept.
    pub walsender: bool,
}

/// PostgreSQL's default `track_activity_query_size`, bytes: `query` holds at most one less.
pub const QUERY_SIZE: usize = 1024;

/// `sql` cut to fit `query` ([`QUERY_SIZE`] - 1 bytes, at a character boundary), as
/// PostgreSQL's `pgstat_report_activity` cuts it.
pub(crate) fn clip_query(sql: &str) -> Arc<str> {
    let mut end = sql.len().min(QUERY_SIZE - 1);
    while !sql.is_char_boundary(end) {
        end -= 1;
    }
    Arc::from(&sql[..end])
}

/// One session's row, kept current by the session's own thread.
#[derive(Debug)]
pub struct BackendStatus {
    /// When the session started, µs since the Unix epoch.
    backend_start_us: i64,
    cur: Mutex<Current>,
}

#[derive(Clone, Debug)]
struct Current {
    client: ClientIdentity,
    state: &'static str,
    /// The running or last statement's text.
    query: Arc<str>,
    /// µs since the Unix epoch; 0 for none (NULL).
    query_start_us: i64,
    xact_start_us: i64,
    state_change_us: i64,
}

/// Now, µs since the Unix epoch.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl BackendStatus {
    /// A new session's status: `idle`, no query yet (PostgreSQL shows `starting` only during
    /// authentication, which is over when a session exists).
    pub(crate) fn new(client: ClientIdentity) -> BackendStatus {
        let now = now_us();
        BackendStatus {
            backend_start_us: now,
            cur: Mutex::new(Current {
                client,
                state: "idle",
                query: Arc::from(""),
                query_start_us: 0,
                xact_start_us: 0,
                state_change_us: now,
            }),
        }
    }

    /// A statement starts: `query` is its text (already clipped, [`clip_query`]); `new_xact`
    /// says whether it starts a transaction (none was open, and no failed block is waiting
    /// for its ROLLBACK): `xact_start` is then now.
    pub(crate) fn start_statement(&self, query: Arc<str>, new_xact: bool) {
        let now = now_us();
        let mut c = self.cur.lock();
        c.state = "active";
        // The old text is freed after the lock is let go.
        let old = std::mem::replace(&mut c.query, query);
        c.query_start_us = now;
        c.state_change_us = now;
        if new_xact {
            c.xact_start_us = now;
        }
        drop(c);
        drop(old);
    }

    /// The session is about to send ReadyForQuery with transaction status `status`: `state`
    /// follows it and `state_change` is now (PostgreSQL reports at every ReadyForQuery);
    /// outside a transaction, and in a failed block (PostgreSQL's `AbortTransaction` clears
    /// it), `xact_start` is NULL.
    pub(crate) fn ready(&self, status: TxnStatus) {
        let state = match status {
            TxnStatus::Idle => "idle",
            TxnStatus::InBlock => "idle in transaction",
            TxnStatus::Failed => "idle in transaction (aborted)",
        };
        let now = now_us();
        let mut c = self.cur.lock();
        c.state = state;
        c.state_change_us = now;
        if status != TxnStatus::InBlock {
            c.xact_start_us = 0;
        }
    }

    /// The session's `application_name` changed (SET or RESET).
    pub(crate) fn set_application_name(&self, name: &str) {
        let mut c = self.cur.lock();
        if c.client.application_name != name {
            c.client.application_name = name.to_string();
        }
    }

    /// Replaces who the client is.
    pub(crate) fn set_client(&self, client: ClientIdentity) {
        self.cur.lock().client = client;
    }
}

/// An autovacuum worker vacuuming a table: its pid and the table's name.
pub(crate) struct WorkerRow {
    pub pid: i32,
    pub relname: String,
}

/// µs since the Unix epoch as a `timestamp` value (NULL for 0).
fn time(us: i64) -> Value {
    if us == 0 {
        Value::Null
    } else {
        Value::Timestamp(us - walnut_common::value::PG_EPOCH_OFFSET_US)
    }
}

/// PostgreSQL 18's `pg_stat_activity` columns, in order.
pub(crate) fn columns() -> Vec<ColumnDef> {
    use DataType::{Int4, Int8, Text, Timestamp};
    [
        ("datid", Int8),
        ("datname", Text),
        ("pid", Int4),
        ("leader_pid", Int4),
        ("usesysid", Int8),
        ("usename", Text),
        ("application_name", Text),
        ("client_addr", Text),
        ("client_hostname", Text),
        ("client_port", Int4),
        ("backend_start", Timestamp),
        ("xact_start", Timestamp),
        ("query_start", Timestamp),
        ("state_change", Timestamp),
        ("wait_event_type", Text),
        ("wait_event", Text),
        ("state", Text),
        ("backend_xid", Int8),
        ("backend_xmin", Int8),
        ("query_id", Int8),
        ("query", Text),
        ("backend_type", Text),
    ]
    .into_iter()
    .map(|(name, ty)| ColumnDef {
        name: name.into(),
        ty,
        not_null: false,
        default: None,
        identity: None,
    })
    .collect()
}

/// The row of session `pid` connected to `datname` (database OID `datid`).
pub(crate) fn session_row(pid: i32, datid: i64, datname: &str, s: &BackendStatus) -> Vec<Value> {
    let c = s.cur.lock().clone();
    let walsender = c.client.walsender;
    // A client on a Unix socket shows NULL and port -1, a TCP one its address and port.
    let (addr, port) = match c.client.addr {
        Some(a) => (
            Value::Text(a.ip().to_string()),
            Value::Int4(a.port() as i32),
        ),
        None => (Value::Null, Value::Int4(-1)),
    };
    vec![
        Value::Int8(datid),
        Value::Text(datname.to_string()),
        Value::Int4(pid),
        Value::Null,
        Value::Int8(BOOTSTRAP_SUPERUSER_OID),
        Value::Text(c.client.user),
        Value::Text(c.client.application_name),
        addr,
        Value::Null,
        port,
        time(s.backend_start_us),
        time(c.xact_start_us),
        time(c.query_start_us),
        time(c.state_change_us),
        Value::Null,
        Value::Null,
        Value::Text(c.state.into()),
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Text(c.query.to_string()),
        Value::Text(
            if walsender {
                "walsender"
            } else {
                "client backend"
            }
            .into(),
        ),
    ]
}

/// The row of an autovacuum worker (PostgreSQL's: its query is `autovacuum: VACUUM
/// public.<table>`, state `active`, no client).
pub(crate) fn worker_row(datid: i64, w: &WorkerRow) -> Vec<Value> {
    let mut row = vec![Value::Null; 22];
    row[0] = Value::Int8(datid);
    row[1] = Value::Text("postgres".into());
    row[2] = Value::Int4(w.pid);
    row[4] = Value::Int8(BOOTSTRAP_SUPERUSER_OID);
    row[16] = Value::Text("active".into());
    row[20] = Value::Text(format!("autovacuum: VACUUM public.{}", w.relname));
    row[21] = Value::Text("autovacuum worker".into());
    row
}

/// OID of PostgreSQL's bootstrap superuser, whom every walnut session is.
const BOOTSTRAP_SUPERUSER_OID: i64 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's row through a transaction block: `xact_start` is set by the statement that
    /// opens it and kept until ReadyForQuery outside it; `state` follows ReadyForQuery.
    #[test]
    fn the_row_follows_statements_and_transactions() {
        let s = BackendStatus::new(ClientIdentity {
            user: "alice".into(),
            application_name: "app".into(),
            addr: Some("127.0.0.1:5555".parse().unwrap()),
            walsender: false,
        });
        let cols = columns();
        let at = |name: &str| cols.iter().position(|c| c.name == name).unwrap();
        let row = |s: &BackendStatus| session_row(7, 5, "db", s);
        let r = row(&s);
        assert_eq!(r.len(), cols.len());
        assert_eq!(r[at("state")], Value::Text("idle".into()));
        assert_eq!(r[at("xact_start")], Value::Null);
        assert_eq!(r[at("client_addr")], Value::Text("127.0.0.1".into()));
        assert_eq!(r[at("client_port")], Value::Int4(5555));
        s.start_statement(Arc::from("begin"), true);
        let r = row(&s);
        assert_eq!(r[at("state")], Value::Text("active".into()));
        assert_eq!(r[at("query")], Value::Text("begin".into()));
        let xact_start = r[at("xact_start")].clone();
        assert_ne!(xact_start, Value::Null);
        s.ready(TxnStatus::InBlock);
        assert_eq!(
            row(&s)[at("state")],
            Value::Text("idle in transaction".into())
        );
        s.start_statement(Arc::from("select 1"), false);
        assert_eq!(row(&s)[at("xact_start")], xact_start, "the block's start");
        s.ready(TxnStatus::Failed);
        assert_eq!(
            row(&s)[at("state")],
            Value::Text("idle in transaction (aborted)".into())
        );
        assert_eq!(
            row(&s)[at("xact_start")],
            Value::Null,
            "an aborted block has none"
        );
        s.start_statement(Arc::from("rollback"), false);
        assert_eq!(
            row(&s)[at("xact_start")],
            Value::Null,
            "the ROLLBACK starts none"
        );
        s.ready(TxnStatus::Idle);
        let r = row(&s);
        assert_eq!(r[at("xact_start")], Value::Null);
        assert_eq!(r[at("query")], Value::Text("rollback".into()), "the last");
        let long = "é".repeat(QUERY_SIZE);
        let clipped = clip_query(&long);
        assert_eq!(clipped.len(), QUERY_SIZE - 2, "cut at a character boundary");
        assert!(long.starts_with(&*clipped));
        s.set_application_name("other");
        assert_eq!(row(&s)[at("application_name")], Value::Text("other".into()));
        let w = worker_row(
            5,
            &WorkerRow {
                pid: 9,
                relname: "t".into(),
            },
        );
        assert_eq!(w.len(), cols.len());
        assert_eq!(
            w[at("query")],
            Value::Text("autovacuum: VACUUM public.t".into())
        );
        assert_eq!(
            w[at("backend_type")],
            Value::Text("autovacuum worker".into())
        );
    }
}
