//! The PostgreSQL wire protocol front end, on top of `pgwire` 0.42.
//!
//! pgwire does SSL negotiation, message framing, dispatch by connection state, skipping
//! messages after an extended-protocol error until Sync, and sending ErrorResponse for handler
//! errors. The socket loop is [`serve`], pgwire's `process_socket` with one addition: after a
//! START_REPLICATION it hands the socket to the walsender, which must read and write at once.
//! Everything else is here, in one per-connection object, [`Conn`], that implements all of
//! pgwire's handler traits, one message family per file:
//!
//! - `startup.rs`, `StartupHandler`: authentication by the pg_hba rules (trust, reject,
//!   SCRAM-SHA-256), `options` parsing, `max_connections`, the backend thread and session,
//!   ParameterStatus and BackendKeyData. Also `CancelHandler`: looks the key up in the
//!   [`Registry`] and sets the session's cancel flag.
//! - `simple.rs`, `SimpleQueryHandler::on_query`, overridden: `Session::simple_query`, every
//!   result, then ReadyForQuery with `Session::txn_status`.
//! - `extended.rs`, `ExtendedQueryHandler::on_parse/on_bind/on_describe/on_execute/on_sync/
//!   on_close`, overridden: walnut keeps its own statement and portal maps (pgwire's
//!   `QueryParser` and portal store are unused), so SQL is parsed only by `Session::prepare`.
//!   An Execute with a row limit leaves the rest in the portal (PortalSuspended).
//! - `copy.rs`, `CopyHandler`: CopyData/CopyDone/CopyFail to the session.
//! - `results.rs`: one statement's results and notices as messages (RowDescription, DataRow,
//!   CommandComplete, EmptyQueryResponse, CopyInResponse), for the three above; `values.rs`
//!   encodes the values and decodes Bind parameters.
//! - `replication.rs`: replication connections (`replication=true|database`): the walsender's
//!   commands (IDENTIFY_SYSTEM, START_REPLICATION, ...); `walsender.rs` streams the WAL after
//!   START_REPLICATION, in CopyBoth mode, from [`serve`]'s loop, which owns the socket.
//! - `errors.rs`: walnut errors and notices as ErrorResponse and NoticeResponse, and the
//!   `ErrorHandler` that logs what pgwire sends.
//!
//! This file holds the connection's state ([`Conn`], [`Shared`]) and what every family uses:
//! the backend call and the transaction status that ReadyForQuery reports.
//!
//! Errors: SQL errors of simple queries are sent by `on_query` itself (so ReadyForQuery
//! carries the session's status); extended-protocol and COPY errors are returned to pgwire as
//! `PgWireError::UserError`, which sends the ErrorResponse and then discards messages until
//! Sync (extended) or sends ReadyForQuery (simple COPY). Before returning such an error the
//! handler stores the session's status in pgwire's `ClientInfo::set_transaction_status`,
//! which pgwire then uses.

mod basebackup;
mod copy;
mod errors;
mod extended;
pub mod replication;
mod results;
mod simple;
mod startup;
pub mod values;
pub mod walsender;

use crate::backend::{Backend, Registry};
use errors::fatal_error;
use extended::{Portal, Stmt};
use parking_lot::Mutex;
use pgwire::api::{ClientInfo, ErrorHandler};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::TransactionStatus;
use startup::AuthState;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use walnut_common::config::Config;
use walnut_common::Error;
use walnut_sql::session::TxnStatus;
use walnut_sql::storage::Engine;

/// State shared by all connections of a server.
pub struct Shared {
    /// The database.
    pub engine: Arc<dyn Engine>,
    /// Client authentication: the pg_hba rules and where role passwords live.
    pub auth: Arc<crate::config::AuthConfig>,
    /// The server's live configuration, the defaults of every session.
    pub config: Arc<Config>,
    /// Connection count and cancel keys.
    pub registry: Arc<Registry>,
    /// The WAL that replication connections stream; `None`: they are refused.
    pub wal_source: Option<Arc<walsender::WalSource>>,
}

/// One client connection: implements every pgwire handler trait.
pub struct Conn {
    shared: Arc<Shared>,
    backend: OnceLock<Backend>,
    statements: Mutex<HashMap<String, Stmt>>,
    portals: Mutex<HashMap<String, Portal>>,
    /// Last transaction status the session reported (for replies that need no session call).
    status: AtomicU8,
    /// Startup failed with FATAL: the connection is closing.
    rejected: AtomicBool,
    /// Where the authentication exchange is.
    auth: Mutex<AuthState>,
    /// COPY FROM STDIN data not yet given to the session (`copy.rs`): the CopyData messages
    /// that arrive together, up to [`copy::COPY_CHUNK`] bytes, go to the session in one call,
    /// not one call per message (a row each from pgbench).
    copy_in: Mutex<Vec<u8>>,
    /// A deferred flush of `copy_in` is queued on the connection's runtime.
    copy_flush_queued: AtomicBool,
    /// The error a deferred flush got (it ended the COPY), with the session's status then,
    /// for the next COPY message to report.
    copy_error: Mutex<Option<(Error, TxnStatus)>>,
    /// This connection, for the tasks it spawns.
    this: Weak<Conn>,
    /// The database the client named at startup.
    database: OnceLock<String>,
    /// A replication connection: what its `replication` startup parameter asked for.
    replication: OnceLock<replication::ReplicationMode>,
    /// A replication connection's entry in the WAL's walsender list (`pg_stat_replication`).
    walsnd: OnceLock<walnut_wal::senders::Registration>,
    /// START_REPLICATION was accepted (CopyBothResponse sent): [`serve`] streams from here next,
    /// with the slot it named, held until streaming ends.
    start_streaming: Mutex<
        Option<(
            walnut_common::Lsn,
            Option<walnut_storage::slots::AcquiredSlot>,
        )>,
    >,
}

fn pg_status(status: TxnStatus) -> TransactionStatus {
    match status {
        TxnStatus::Idle => TransactionStatus::Idle,
        TxnStatus::InBlock => TransactionStatus::Transaction,
        TxnStatus::Failed => TransactionStatus::Error,
    }
}

fn status_from_u8(v: u8) -> TransactionStatus {
    TransactionStatus::try_from(v).unwrap_or(TransactionStatus::Idle)
}

/// True for a query string with no statement (only whitespace and semicolons).
fn is_empty_query(sql: &str) -> bool {
    sql.chars().all(|c| c == ';' || c.is_whitespace())
}

impl Conn {
    /// A new connection of the server whose shared state is `shared`.
    pub fn new(shared: Arc<Shared>) -> Arc<Conn> {
        Arc::new_cyclic(|this| Conn {
            shared,
            backend: OnceLock::new(),
            statements: Mutex::new(HashMap::new()),
            portals: Mutex::new(HashMap::new()),
            status: AtomicU8::new(TransactionStatus::Idle as u8),
            rejected: AtomicBool::new(false),
            auth: Mutex::new(AuthState::Idle),
            copy_in: Mutex::new(Vec::new()),
            copy_flush_queued: AtomicBool::new(false),
            copy_error: Mutex::new(None),
            this: this.clone(),
            database: OnceLock::new(),
            replication: OnceLock::new(),
            walsnd: OnceLock::new(),
            start_streaming: Mutex::new(None),
        })
    }

    /// After `DISCARD ALL`: deallocates every prepared statement and closes every portal but
    /// `running`, the one whose Execute ran it (PostgreSQL's `PortalHashTableDeleteAll` skips
    /// the active portal too).
    fn discard_all(&self, running: Option<&str>) {
        self.statements.lock().clear();
        self.portals
            .lock()
            .retain(|name, _| Some(name.as_str()) == running);
    }

    fn backend(&self) -> PgWireResult<&Backend> {
        self.backend.get().ok_or(PgWireError::NotReadyForQuery)
    }

    /// Records the session's status for ReadyForQuery, here and in pgwire's client state.
    fn set_status<C: ClientInfo>(&self, client: &mut C, status: TxnStatus) -> TransactionStatus {
        let status = pg_status(status);
        self.status.store(status as u8, Ordering::Relaxed);
        client.set_transaction_status(status);
        status
    }

    /// A backend call that failed because the backend thread died: end the connection.
    fn lost(e: Error) -> PgWireError {
        tracing::error!("{}", e.message);
        fatal_error(&e)
    }
}

impl Conn {
    /// A walsender's connection ends: its entry leaves the walsenders (no longer counted
    /// against `max_wal_senders`) and its temporary slots are dropped. Idempotent.
    fn end_walsender(&self) {
        if let (Some(src), Some(reg)) = (&self.shared.wal_source, self.walsnd.get()) {
            reg.release();
            src.slots().drop_temporary(reg.snd().pid);
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.end_walsender();
    }
}

/// Ends a walsender ([`Conn::end_walsender`]) when dropped; [`serve`] declares it after the
/// socket, so it runs before the socket closes, on every way out: a client that has seen its
/// walsender's connection end finds the walsender gone (PostgreSQL's walsender, too, leaves
/// its slot before its process exits and the socket closes).
struct WalsenderEnd<'a>(&'a Conn);

impl Drop for WalsenderEnd<'_> {
    fn drop(&mut self) {
        self.0.end_walsender();
    }
}

/// How long a client has to finish startup (pgwire's `STARTUP_TIMEOUT_MILLIS`, PostgreSQL's
/// `authentication_timeout` default).
const STARTUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs one client connection to its end: pgwire's `process_socket` (TLS negotiation, then each
/// message through `process_message`, errors through `process_error`), plus the walsender: when
/// a message left a START_REPLICATION accepted, the socket goes to
/// [`walsender::stream`] until the client's CopyDone, then back to this loop.
///
/// # Errors
/// The socket's I/O errors.
pub async fn serve(
    tcp: tokio::net::TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    conn: Arc<Conn>,
) -> std::io::Result<()> {
    use futures::StreamExt;
    use pgwire::api::PgWireConnectionState as State;
    use pgwire::messages::PgWireFrontendMessage as Msg;
    use pgwire::tokio::server::{negotiate_tls, process_error, process_message};

    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let socket = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        s = negotiate_tls(tcp, tls) => s?,
    };
    // A direct TLS request without TLS configured.
    let Some(mut socket) = socket else {
        return Ok(());
    };
    let _end = WalsenderEnd(&conn);
    loop {
        let msg = if matches!(
            socket.state(),
            State::AwaitingStartup | State::AuthenticationInProgress
        ) {
            tokio::select! {
                _ = &mut startup_timeout => None,
                m = socket.next() => m,
            }
        } else {
            socket.next().await
        };
        let Some(Ok(msg)) = msg else { break };
        if matches!(msg, Msg::Terminate(_)) {
            break;
        }
        let is_extended = match socket.state() {
            State::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let is_cancel = matches!(msg, Msg::CancelRequest(_));
        let c = || conn.clone();
        if let Err(mut e) = process_message(msg, &mut socket, c(), c(), c(), c(), c()).await {
            ErrorHandler::on_error(&*conn, &socket, &mut e);
            let fatal = e.is_fatal();
            process_error(&mut socket, e, is_extended).await?;
            if fatal {
                break;
            }
        }
        if is_cancel {
            break;
        }
        let start = conn.start_streaming.lock().take();
        if let (Some((start, slot)), Some(src), Some(reg)) =
            (start, &conn.shared.wal_source, conn.walsnd.get())
        {
            let timeout = conn
                .shared
                .config
                .settings()
                .int(&crate::guc::WAL_SENDER_TIMEOUT);
            let timeout = (timeout > 0).then(|| std::time::Duration::from_millis(timeout as u64));
            let ended =
                walsender::stream(&mut socket, src, reg, slot.as_ref(), start, timeout).await;
            drop(slot);
            match ended {
                Ok(walsender::Ended::CopyDone) => socket.set_state(State::ReadyForQuery),
                Ok(walsender::Ended::Closed) => break,
                Err(e) => {
                    tracing::debug!("walsender: connection ended: {e}");
                    break;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_queries() {
        assert!(is_empty_query(""));
        assert!(is_empty_query(" ;; \n"));
        assert!(!is_empty_query("select 1"));
        assert!(!is_empty_query("';'"));
    }
}
