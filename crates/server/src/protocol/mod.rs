//! The PostgreSQL wire protocol front end, on top of `pgwire` 0.42.
//!
//! pgwire owns the socket loop (`pgwire::tokio::process_socket`): SSL/GSS negotiation (both
//! refused), message framing, dispatch by connection state, skipping messages after an
//! extended-protocol error until Sync, and sending ErrorResponse for handler errors.
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

mod copy;
mod errors;
mod extended;
mod results;
mod simple;
mod startup;
pub mod values;

use crate::backend::{Backend, Registry};
use errors::fatal_error;
use extended::{Portal, Stmt};
use parking_lot::Mutex;
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ClientInfo, ErrorHandler, PgWireServerHandlers};
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
}

/// The handler set pgwire's `process_socket` takes: every handler is the connection itself.
pub struct ConnHandlers(pub Arc<Conn>);

impl PgWireServerHandlers for ConnHandlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.0.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.0.clone()
    }
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.0.clone()
    }
    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.0.clone()
    }
    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        self.0.clone()
    }
    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.0.clone()
    }
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
        })
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
