//! The PostgreSQL wire protocol front end, on top of `pgwire` 0.42.
//!
//! pgwire owns the socket loop (`pgwire::tokio::process_socket`): SSL/GSS negotiation (both
//! refused), message framing, dispatch by connection state, skipping messages after an
//! extended-protocol error until Sync, and sending ErrorResponse for handler errors.
//! Everything else is here, in one per-connection object, [`Conn`], that implements all of
//! pgwire's handler traits:
//!
//! - `StartupHandler`: trust authentication, `options` parsing, `max_connections`, the
//!   backend thread and session, ParameterStatus and BackendKeyData.
//! - `SimpleQueryHandler::on_query`, overridden: `Session::simple_query`, every result, then
//!   ReadyForQuery with `Session::txn_status`.
//! - `ExtendedQueryHandler::on_parse/on_bind/on_describe/on_execute/on_sync/on_close`,
//!   overridden: walnut keeps its own statement and portal maps (pgwire's `QueryParser` and
//!   portal store are unused), so SQL is parsed only by `Session::prepare`.
//! - `CopyHandler`: CopyData/CopyDone/CopyFail to the session.
//! - `CancelHandler`: looks the key up in the [`Registry`] and sets the session's cancel flag.
//!
//! Errors: SQL errors of simple queries are sent by `on_query` itself (so ReadyForQuery
//! carries the session's status); extended-protocol and COPY errors are returned to pgwire as
//! `PgWireError::UserError`, which sends the ErrorResponse and then discards messages until
//! Sync (extended) or sends ReadyForQuery (simple COPY). Before returning such an error the
//! handler stores the session's status in pgwire's `ClientInfo::set_transaction_status`,
//! which pgwire then uses.

pub mod values;

use crate::backend::{Backend, Registry};
use crate::config;
use async_trait::async_trait;
use futures::{Sink, SinkExt};
use parking_lot::Mutex;
use pgwire::api::auth::sasl::scram::{
    ScramSecret, ScramServerAuth, ScramServerAuthWaitingForClientFinal,
};
use pgwire::api::auth::{
    protocol_negotiation, save_startup_parameters_to_metadata, StartupHandler,
};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::Portal as PgPortal;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::Response;
use pgwire::api::stmt::NoopQueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{
    ClientInfo, ClientPortalStore, ErrorHandler, PgWireConnectionState, PgWireServerHandlers,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyInResponse};
use pgwire::messages::data::{NoData, ParameterDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Flush, Parse, ParseComplete,
    PortalSuspended, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{
    CommandComplete, EmptyQueryResponse, ReadyForQuery, TransactionStatus,
};
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::{
    Authentication, BackendKeyData, ParameterStatus, PasswordMessageFamily, Startup,
};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage, ProtocolVersion};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use walnut_common::{Error, SqlState, Value};
use walnut_sql::session::{ColumnDesc, GucDefaults, Notice, Output, Prepared, TxnStatus};
use walnut_sql::storage::Engine;

/// State shared by all connections of a server.
pub struct Shared {
    /// The database.
    pub engine: Arc<dyn Engine>,
    /// Client authentication: the pg_hba rules and where role passwords live.
    pub auth: Arc<crate::config::AuthConfig>,
    /// Server settings, the defaults of every session.
    pub defaults: Arc<GucDefaults>,
    /// Connection count and cancel keys.
    pub registry: Arc<Registry>,
}

/// A prepared statement as the front end stores it.
#[derive(Clone)]
enum Stmt {
    /// An empty query string: binds and executes to EmptyQueryResponse.
    Empty,
    /// Planned by `Session::prepare`.
    Prepared(Arc<Prepared>),
}

/// A bound portal.
struct Portal {
    stmt: Stmt,
    params: Vec<Value>,
    /// Result format code per column.
    formats: Arc<[i16]>,
    /// Rows left after an Execute with a row limit (PortalSuspended).
    pending: Option<Pending>,
}

/// The rest of a result set whose Execute stopped at its row limit.
struct Pending {
    columns: Arc<Vec<ColumnDesc>>,
    rows: std::vec::IntoIter<Vec<Value>>,
    tag: String,
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
}

/// The authentication exchange of one connection (SCRAM-SHA-256, RFC 5802/7677, as PostgreSQL
/// runs it: `src/backend/libpq/auth-scram.c`).
enum AuthState {
    /// No startup message yet, or authentication finished.
    Idle,
    /// AuthenticationSASL sent; the client's SASLInitialResponse is next.
    SaslInitial {
        startup: Box<Startup>,
        user: String,
        /// The role's verifier; a made-up one if it has none, so that a missing role or
        /// password costs the same exchange and fails the same way at its end.
        secret: ScramSecret,
        real: bool,
    },
    /// SASLContinue sent; the client's final message is next.
    SaslFinal {
        startup: Box<Startup>,
        user: String,
        waiting: Box<ScramServerAuthWaitingForClientFinal>,
        real: bool,
    },
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

// ---------------------------------------------------------------------------------------------
// Conversions

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

/// ErrorInfo for a walnut error with the given severity.
fn error_info(e: &Error, severity: &str) -> ErrorInfo {
    let mut info = ErrorInfo::new(
        severity.to_string(),
        e.sqlstate.0.to_string(),
        e.message.clone(),
    );
    info.severity_nonlocalized = Some(severity.to_string());
    info.detail = e.detail.clone();
    info
}

/// A walnut error as an ERROR-level pgwire error.
fn user_error(e: &Error) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e, "ERROR")))
}

/// A walnut error that ends the connection.
fn fatal_error(e: &Error) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e, "FATAL")))
}

fn error_message(e: &Error) -> PgWireBackendMessage {
    PgWireBackendMessage::ErrorResponse(error_info(e, "ERROR").into())
}

fn notice_message(n: &Notice) -> PgWireBackendMessage {
    let mut info = ErrorInfo::new(
        n.severity.to_string(),
        n.sqlstate.0.to_string(),
        n.message.clone(),
    );
    info.severity_nonlocalized = Some(n.severity.to_string());
    PgWireBackendMessage::NoticeResponse(info.into())
}

fn protocol_error(message: impl Into<String>) -> Error {
    Error::user(SqlState::PROTOCOL_VIOLATION, message)
}

/// True for a query string with no statement (only whitespace and semicolons).
fn is_empty_query(sql: &str) -> bool {
    sql.chars().all(|c| c == ';' || c.is_whitespace())
}

/// The command tag for `rows` rows of a SELECT-like result whose full tag was `tag`.
fn partial_tag(tag: &str, rows: usize) -> String {
    match tag.rsplit_once(' ') {
        Some((verb, n)) if n.bytes().all(|b| b.is_ascii_digit()) => format!("{verb} {rows}"),
        _ => tag.to_string(),
    }
}

fn statement_label(name: &str) -> String {
    if name.is_empty() {
        "unnamed prepared statement".to_string()
    } else {
        format!("prepared statement \"{name}\"")
    }
}

/// ParameterStatus values a client expects; filled in where the session does not report them.
fn startup_parameters(
    from_session: Vec<(String, String)>,
    startup: &std::collections::BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let user = startup.get("user").cloned().unwrap_or_default();
    let app = startup.get("application_name").cloned().unwrap_or_default();
    let fallback = [
        ("server_version", "16.0"),
        ("server_encoding", "UTF8"),
        ("client_encoding", "UTF8"),
        ("DateStyle", "ISO, MDY"),
        ("IntervalStyle", "postgres"),
        ("TimeZone", "UTC"),
        ("integer_datetimes", "on"),
        ("standard_conforming_strings", "on"),
        ("is_superuser", "on"),
        ("session_authorization", user.as_str()),
        ("application_name", app.as_str()),
    ];
    let mut params = from_session;
    for (name, value) in fallback {
        if !params.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            params.push((name.to_string(), value.to_string()));
        }
    }
    params
}

// ---------------------------------------------------------------------------------------------
// Sending

/// Feeds (without flushing) the messages of one statement result. `describe` adds the
/// RowDescription (simple query); `formats` are the result format codes (empty = text).
/// Returns `true` if the result was CopyIn (the caller switches to COPY mode).
async fn feed_output<C>(
    client: &mut C,
    output: Output,
    formats: &[i16],
    describe: bool,
) -> PgWireResult<bool>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    match output {
        Output::Rows { columns, rows, tag } => {
            if describe {
                client
                    .feed(PgWireBackendMessage::RowDescription(
                        values::row_description(&columns, formats),
                    ))
                    .await?;
            }
            for row in &rows {
                let data =
                    values::encode_row(row, &columns, formats).map_err(|e| user_error(&e))?;
                client.feed(PgWireBackendMessage::DataRow(data)).await?;
            }
            client
                .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                    tag,
                )))
                .await?;
        }
        Output::Command { tag } => {
            client
                .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                    tag,
                )))
                .await?;
        }
        Output::Empty => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        Output::CopyIn { columns } => {
            let n = i16::try_from(columns)
                .map_err(|_| user_error(&Error::internal("too many COPY columns")))?;
            let response = CopyInResponse::new(0, n, vec![0; columns]);
            client
                .feed(PgWireBackendMessage::CopyInResponse(response))
                .await?;
            return Ok(true);
        }
    }
    Ok(false)
}

async fn feed_notices<C>(client: &mut C, notices: &[Notice]) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<C::Error>,
{
    for n in notices {
        client.feed(notice_message(n)).await?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The connection

impl Conn {
    /// A new connection of the server whose shared state is `shared`.
    pub fn new(shared: Arc<Shared>) -> Conn {
        Conn {
            shared,
            backend: OnceLock::new(),
            statements: Mutex::new(HashMap::new()),
            portals: Mutex::new(HashMap::new()),
            status: AtomicU8::new(TransactionStatus::Idle as u8),
            rejected: AtomicBool::new(false),
            auth: Mutex::new(AuthState::Idle),
        }
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

    /// Startup failed: FATAL ErrorResponse, then close (pgwire would follow an error with
    /// ReadyForQuery, which a rejected client must not see).
    async fn reject<C>(&self, client: &mut C, e: &Error) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<C::Error>,
    {
        tracing::info!(sqlstate = %e.sqlstate, "connection rejected: {}", e.message);
        self.rejected.store(true, Ordering::Relaxed);
        let info = error_info(e, "FATAL");
        client
            .send(PgWireBackendMessage::ErrorResponse(info.into()))
            .await?;
        client.close().await?;
        Ok(())
    }

    fn lookup_statement(&self, name: &str) -> PgWireResult<Stmt> {
        self.statements.lock().get(name).cloned().ok_or_else(|| {
            user_error(&Error::user(
                SqlState::INVALID_PREPARED_STATEMENT,
                format!("{} does not exist", statement_label(name)),
            ))
        })
    }

    fn missing_portal(name: &str) -> PgWireError {
        let what = if name.is_empty() {
            "unnamed portal".to_string()
        } else {
            format!("portal \"{name}\"")
        };
        user_error(&Error::user(
            SqlState::INVALID_CURSOR_NAME,
            format!("{what} does not exist"),
        ))
    }

    /// Decodes a Bind message into a portal.
    fn bind_portal(stmt: Stmt, name: &str, message: &Bind) -> Result<Portal, Error> {
        let (params, formats): (Vec<Value>, Arc<[i16]>) = match &stmt {
            Stmt::Empty => {
                if !message.parameters.is_empty() {
                    return Err(protocol_error(format!(
                        "bind message supplies {} parameters, but {} requires 0",
                        message.parameters.len(),
                        statement_label(name)
                    )));
                }
                (Vec::new(), Arc::from(Vec::new()))
            }
            Stmt::Prepared(p) => {
                let n = p.param_types.len();
                if message.parameters.len() != n {
                    return Err(protocol_error(format!(
                        "bind message supplies {} parameters, but {} requires {n}",
                        message.parameters.len(),
                        statement_label(name)
                    )));
                }
                let param_formats =
                    values::resolve_formats(&message.parameter_format_codes, n, "parameter")?;
                let params = p
                    .param_types
                    .iter()
                    .zip(&message.parameters)
                    .zip(&param_formats)
                    .enumerate()
                    .map(|(i, ((ty, bytes), format))| {
                        values::decode_param(ty, *format, bytes.as_deref(), i)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let ncols = p.columns.as_ref().map_or(0, |c| c.len());
                let formats =
                    values::resolve_formats(&message.result_column_format_codes, ncols, "result")?;
                (params, Arc::from(formats))
            }
        };
        Ok(Portal {
            stmt,
            params,
            formats,
            pending: None,
        })
    }

    /// Sends up to `max_rows` (0 = all) rows of `pending`, then CommandComplete, or
    /// PortalSuspended and the rest back into `pending`.
    async fn feed_rows<C>(
        client: &mut C,
        pending: &mut Pending,
        formats: &[i16],
        max_rows: usize,
    ) -> PgWireResult<bool>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<C::Error>,
    {
        let mut sent = 0;
        while max_rows == 0 || sent < max_rows {
            let Some(row) = pending.rows.next() else {
                let tag = partial_tag(&pending.tag, sent);
                client
                    .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                        tag,
                    )))
                    .await?;
                return Ok(false);
            };
            let data =
                values::encode_row(&row, &pending.columns, formats).map_err(|e| user_error(&e))?;
            client.feed(PgWireBackendMessage::DataRow(data)).await?;
            sent += 1;
        }
        if pending.rows.len() == 0 {
            let tag = partial_tag(&pending.tag, sent);
            client
                .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                    tag,
                )))
                .await?;
            return Ok(false);
        }
        client
            .feed(PgWireBackendMessage::PortalSuspended(PortalSuspended::new()))
            .await?;
        Ok(true)
    }
}

impl ErrorHandler for Conn {
    fn on_error<C: ClientInfo>(&self, _client: &C, error: &mut PgWireError) {
        tracing::debug!(code = error.code(), "error sent to client: {error}");
    }
}

#[async_trait]
impl CancelHandler for Conn {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let matched = self
            .shared
            .registry
            .cancel(request.pid, &request.secret_key);
        tracing::debug!(pid = request.pid, matched, "cancel request");
    }
}

/// 28000 invalid_authorization_specification, 28P01 invalid_password.
fn auth_error(sqlstate: &'static str, message: String) -> Error {
    Error::user(SqlState(sqlstate), message)
}

/// A verifier nobody can log in with (random keys), for roles without a password.
fn fake_secret() -> ScramSecret {
    let mut b = [0u8; 16 + 32 + 32];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    ScramSecret::Verifier {
        salt: b[..16].to_vec(),
        iterations: crate::authid::SCRAM_ITERATIONS,
        stored_key: b[16..48].to_vec(),
        server_key: b[48..].to_vec(),
    }
}

impl Conn {
    /// The startup message: decides the authentication method from the pg_hba rules and
    /// either finishes startup (trust), refuses (reject, no rule), or starts SCRAM.
    async fn on_startup_message<C>(&self, client: &mut C, startup: Startup) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        protocol_negotiation(client, &startup).await?;
        save_startup_parameters_to_metadata(client, &startup);
        let user = startup.parameters.get("user").cloned().unwrap_or_default();
        let database = startup
            .parameters
            .get("database")
            .cloned()
            .unwrap_or_else(|| user.clone());
        let addr = client.socket_addr().ip();
        let ssl = client.is_secure();
        let ssl_text = if ssl {
            "SSL encryption"
        } else {
            "no encryption"
        };
        let auth = &self.shared.auth;
        let Some(rule) = auth.hba.find(addr, ssl, &database, &user) else {
            let e = auth_error(
                "28000",
                format!("no pg_hba.conf entry for host \"{addr}\", user \"{user}\", database \"{database}\", {ssl_text}"),
            );
            return self.reject(client, &e).await;
        };
        match rule.method {
            crate::hba::Method::Reject => {
                let e = auth_error(
                    "28000",
                    format!("pg_hba.conf rejects connection for host \"{addr}\", user \"{user}\", database \"{database}\", {ssl_text}"),
                );
                self.reject(client, &e).await
            }
            crate::hba::Method::Trust => self.finish_startup(client, &startup).await,
            crate::hba::Method::ScramSha256 => {
                let stored = match &auth.datadir {
                    Some(d) => match crate::authid::load(d) {
                        Ok(all) => all
                            .get(&user)
                            .and_then(|v| crate::authid::parse_verifier(v)),
                        Err(e) => {
                            tracing::warn!("{e}");
                            None
                        }
                    },
                    None => None,
                };
                let real = stored.is_some();
                *self.auth.lock() = AuthState::SaslInitial {
                    startup: Box::new(startup),
                    user,
                    secret: stored.unwrap_or_else(fake_secret),
                    real,
                };
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASL(
                        vec!["SCRAM-SHA-256".to_string()],
                    )))
                    .await?;
                client.set_state(PgWireConnectionState::AuthenticationInProgress);
                Ok(())
            }
        }
    }

    /// A SASL message during authentication.
    async fn on_password_message<C>(
        &self,
        client: &mut C,
        msg: PasswordMessageFamily,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let state = std::mem::replace(&mut *self.auth.lock(), AuthState::Idle);
        let failed = |user: &str| {
            auth_error(
                "28P01",
                format!("password authentication failed for user \"{user}\""),
            )
        };
        match state {
            AuthState::SaslInitial {
                startup,
                user,
                secret,
                real,
            } => {
                let init = match msg.into_sasl_initial_response() {
                    Ok(i) => i,
                    Err(_) => {
                        let e = protocol_error("expected SASLInitialResponse");
                        return self.reject(client, &e).await;
                    }
                };
                if init.auth_method != "SCRAM-SHA-256" {
                    let e = protocol_error(format!(
                        "client selected an invalid SASL authentication mechanism \"{}\"",
                        init.auth_method
                    ));
                    return self.reject(client, &e).await;
                }
                let data = init.data.unwrap_or_default();
                match ScramServerAuth::new().on_client_first_message_with_secret(&data, secret) {
                    Ok((server_first, waiting)) => {
                        *self.auth.lock() = AuthState::SaslFinal {
                            startup,
                            user,
                            waiting: Box::new(waiting),
                            real,
                        };
                        client
                            .send(PgWireBackendMessage::Authentication(
                                Authentication::SASLContinue(server_first.into_bytes().into()),
                            ))
                            .await?;
                        Ok(())
                    }
                    Err(e) => {
                        tracing::info!("SCRAM client-first message refused: {e}");
                        self.reject(client, &failed(&user)).await
                    }
                }
            }
            AuthState::SaslFinal {
                startup,
                user,
                waiting,
                real,
            } => {
                let resp = match msg.into_sasl_response() {
                    Ok(r) => r,
                    Err(_) => {
                        let e = protocol_error("expected SASLResponse");
                        return self.reject(client, &e).await;
                    }
                };
                match waiting.on_client_final_message(&resp.data) {
                    Ok(server_final) if real => {
                        client
                            .feed(PgWireBackendMessage::Authentication(
                                Authentication::SASLFinal(server_final.into_bytes().into()),
                            ))
                            .await?;
                        self.finish_startup(client, &startup).await
                    }
                    _ => self.reject(client, &failed(&user)).await,
                }
            }
            AuthState::Idle => {
                let e = protocol_error("unexpected password message");
                self.reject(client, &e).await
            }
        }
    }

    /// After authentication: reserves a connection slot, starts the session and sends
    /// AuthenticationOk, ParameterStatus, BackendKeyData and ReadyForQuery.
    async fn finish_startup<C>(&self, client: &mut C, startup: &Startup) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let options = match config::session_options(&startup.parameters) {
            Ok(o) => o,
            Err(e) => return self.reject(client, &e).await,
        };
        let registry = &self.shared.registry;
        let reservation = match registry.reserve() {
            Ok(r) => r,
            Err(e) => return self.reject(client, &e).await,
        };
        let pid = reservation.pid();
        let secret = registry.new_secret(
            pid,
            client.protocol_version() != ProtocolVersion::PROTOCOL3_0,
        );
        let started = Backend::start(
            reservation,
            secret.clone(),
            self.shared.engine.clone(),
            self.shared.defaults.clone(),
            options,
        )
        .await;
        let (backend, start) = match started {
            Ok(b) => b,
            Err(e) => return self.reject(client, &e).await,
        };
        client.set_pid_and_secret_key(pid, secret.clone());
        client
            .feed(PgWireBackendMessage::Authentication(Authentication::Ok))
            .await?;
        for (name, value) in startup_parameters(start.parameters, &startup.parameters) {
            client
                .feed(PgWireBackendMessage::ParameterStatus(ParameterStatus::new(
                    name, value,
                )))
                .await?;
        }
        client
            .feed(PgWireBackendMessage::BackendKeyData(BackendKeyData::new(
                pid, secret,
            )))
            .await?;
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                TransactionStatus::Idle,
            )))
            .await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        tracing::debug!(
            pid,
            user = startup.parameters.get("user").map(String::as_str),
            "connection authorized"
        );
        if self.backend.set(backend).is_err() {
            return Err(fatal_error(&protocol_error("duplicate startup message")));
        }
        Ok(())
    }
}

#[async_trait]
impl StartupHandler for Conn {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.rejected.load(Ordering::Relaxed) {
            return Err(PgWireError::IoError(
                std::io::ErrorKind::ConnectionAborted.into(),
            ));
        }
        match message {
            PgWireFrontendMessage::Startup(startup) => {
                self.on_startup_message(client, startup).await
            }
            PgWireFrontendMessage::PasswordMessageFamily(m) => {
                self.on_password_message(client, m).await
            }
            _ => {
                let e = protocol_error("expected startup message");
                self.reject(client, &e).await
            }
        }
    }
}

#[async_trait]
impl SimpleQueryHandler for Conn {
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let backend = self.backend()?;
        let sql = query.query;
        let status = if is_empty_query(&sql) {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
            status_from_u8(self.status.load(Ordering::Relaxed))
        } else {
            let (results, notices, status) = backend
                .call(move |s| {
                    let results = s.simple_query(&sql);
                    (results, s.take_notices(), s.txn_status())
                })
                .await
                .map_err(Self::lost)?;
            let status = self.set_status(client, status);
            feed_notices(client, &notices).await?;
            for result in results {
                let fed = match result {
                    Ok(output) => feed_output(client, output, &[], true).await,
                    Err(e) => client
                        .feed(error_message(&e))
                        .await
                        .map(|_| false)
                        .map_err(PgWireError::from),
                };
                match fed {
                    Ok(true) => {
                        // COPY FROM STDIN: no ReadyForQuery until CopyDone/CopyFail.
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                        client.flush().await?;
                        return Ok(());
                    }
                    Ok(false) => {}
                    Err(PgWireError::UserError(info)) => {
                        client
                            .feed(PgWireBackendMessage::ErrorResponse((*info).into()))
                            .await?;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            status
        };
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        unreachable!("on_query is overridden and never calls do_query")
    }
}

#[async_trait]
impl ExtendedQueryHandler for Conn {
    type Statement = String;
    type QueryParser = NoopQueryParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        // Unused: on_parse is overridden and calls Session::prepare.
        Arc::new(NoopQueryParser)
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.unwrap_or_default();
        if !name.is_empty() && self.statements.lock().contains_key(&name) {
            return Err(user_error(&Error::user(
                SqlState::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{name}\" already exists"),
            )));
        }
        let stmt = if is_empty_query(&message.query) {
            Stmt::Empty
        } else {
            let sql = message.query;
            let oids = message.type_oids;
            let prepared = self
                .backend()?
                .call_expecting_more(move |s| s.prepare(&sql, &oids))
                .await
                .map_err(Self::lost)?
                .map_err(|e| user_error(&e))?;
            Stmt::Prepared(prepared)
        };
        self.statements.lock().insert(name, stmt);
        client
            .feed(PgWireBackendMessage::ParseComplete(ParseComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt_name = message.statement_name.as_deref().unwrap_or_default();
        let portal_name = message.portal_name.clone().unwrap_or_default();
        let stmt = self.lookup_statement(stmt_name)?;
        if !portal_name.is_empty() && self.portals.lock().contains_key(&portal_name) {
            return Err(user_error(&Error::user(
                SqlState("42P03"),
                format!("portal \"{portal_name}\" already exists"),
            )));
        }
        let portal = Self::bind_portal(stmt, stmt_name, &message).map_err(|e| user_error(&e))?;
        self.portals.lock().insert(portal_name, portal);
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.unwrap_or_default();
        let (params, columns, formats) = match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => match self.lookup_statement(&name)? {
                Stmt::Empty => (Some(Vec::new()), None, Arc::from(Vec::new())),
                Stmt::Prepared(p) => {
                    let oids = p.param_types.iter().map(|t| t.oid()).collect();
                    (Some(oids), p.columns.clone(), Arc::from(Vec::new()))
                }
            },
            TARGET_TYPE_BYTE_PORTAL => {
                let portals = self.portals.lock();
                let portal = portals
                    .get(&name)
                    .ok_or_else(|| Self::missing_portal(&name))?;
                let columns = match &portal.stmt {
                    Stmt::Empty => None,
                    Stmt::Prepared(p) => p.columns.clone(),
                };
                (None, columns, portal.formats.clone())
            }
            other => return Err(PgWireError::InvalidTargetType(other)),
        };
        if let Some(oids) = params {
            client
                .feed(PgWireBackendMessage::ParameterDescription(
                    ParameterDescription::new(oids),
                ))
                .await?;
        }
        let message = match columns {
            Some(columns) => {
                PgWireBackendMessage::RowDescription(values::row_description(&columns, &formats))
            }
            None => PgWireBackendMessage::NoData(NoData::new()),
        };
        client.feed(message).await?;
        Ok(())
    }

    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.unwrap_or_default();
        let max_rows = usize::try_from(message.max_rows).unwrap_or(0);
        let (stmt, params, formats, pending) = {
            let mut portals = self.portals.lock();
            let portal = portals
                .get_mut(&name)
                .ok_or_else(|| Self::missing_portal(&name))?;
            (
                portal.stmt.clone(),
                portal.params.clone(),
                portal.formats.clone(),
                portal.pending.take(),
            )
        };
        // A portal suspended by an earlier row limit continues where it stopped.
        if let Some(mut pending) = pending {
            if Self::feed_rows(client, &mut pending, &formats, max_rows).await? {
                if let Some(portal) = self.portals.lock().get_mut(&name) {
                    portal.pending = Some(pending);
                }
            }
            return Ok(());
        }
        let prepared = match stmt {
            Stmt::Empty => {
                client
                    .feed(PgWireBackendMessage::EmptyQueryResponse(
                        EmptyQueryResponse::new(),
                    ))
                    .await?;
                return Ok(());
            }
            Stmt::Prepared(p) => p,
        };
        let (result, notices, status) = self
            .backend()?
            .call_expecting_more(move |s| {
                let result = s.execute(&prepared, params);
                (result, s.take_notices(), s.txn_status())
            })
            .await
            .map_err(Self::lost)?;
        self.set_status(client, status);
        feed_notices(client, &notices).await?;
        match result.map_err(|e| user_error(&e))? {
            Output::Rows { columns, rows, tag } if max_rows > 0 && rows.len() > max_rows => {
                let mut pending = Pending {
                    columns,
                    rows: rows.into_iter(),
                    tag,
                };
                if Self::feed_rows(client, &mut pending, &formats, max_rows).await? {
                    if let Some(portal) = self.portals.lock().get_mut(&name) {
                        portal.pending = Some(pending);
                    }
                }
            }
            output => {
                if feed_output(client, output, &formats, false).await? {
                    client.set_state(PgWireConnectionState::CopyInProgress(true));
                    client.flush().await?;
                }
            }
        }
        Ok(())
    }

    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (result, notices, status) = self
            .backend()?
            .call(|s| {
                let result = s.sync();
                (result, s.take_notices(), s.txn_status())
            })
            .await
            .map_err(Self::lost)?;
        self.portals.lock().remove("");
        let status = self.set_status(client, status);
        feed_notices(client, &notices).await?;
        if let Err(e) = result {
            client.feed(error_message(&e)).await?;
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.unwrap_or_default();
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                self.statements.lock().remove(&name);
            }
            TARGET_TYPE_BYTE_PORTAL => {
                self.portals.lock().remove(&name);
            }
            other => return Err(PgWireError::InvalidTargetType(other)),
        }
        client
            .feed(PgWireBackendMessage::CloseComplete(CloseComplete::new()))
            .await?;
        Ok(())
    }

    async fn on_flush<C>(&self, client: &mut C, _message: Flush) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.flush().await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        _client: &mut C,
        _portal: &PgPortal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        unreachable!("on_execute is overridden and never calls do_query")
    }
}

#[async_trait]
impl CopyHandler for Conn {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let data = copy_data.data;
        let (result, status) = self
            .backend()?
            .call_expecting_more(move |s| (s.copy_data(&data), s.txn_status()))
            .await
            .map_err(Self::lost)?;
        if let Err(e) = result {
            // The COPY is over; pgwire reports the error and ignores the rest of the data.
            self.set_status(client, status);
            return Err(user_error(&e));
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (result, notices, status) = self
            .backend()?
            .call(|s| {
                let result = s.copy_done();
                (result, s.take_notices(), s.txn_status())
            })
            .await
            .map_err(Self::lost)?;
        // pgwire sends ReadyForQuery (simple protocol) with this status after we return.
        self.set_status(client, status);
        feed_notices(client, &notices).await?;
        let output = result.map_err(|e| user_error(&e))?;
        feed_output(client, output, &[], false).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let backend = match self.backend() {
            Ok(b) => b,
            Err(e) => return e,
        };
        let message = fail.message;
        match backend
            .call(move |s| (s.copy_fail(&message), s.txn_status()))
            .await
        {
            Ok((e, status)) => {
                self.set_status(client, status);
                user_error(&e)
            }
            Err(e) => Self::lost(e),
        }
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

    #[test]
    fn tags() {
        assert_eq!(partial_tag("SELECT 100", 7), "SELECT 7");
        assert_eq!(partial_tag("SHOW", 1), "SHOW");
    }

    #[test]
    fn fallback_parameters() {
        let mut startup = std::collections::BTreeMap::new();
        startup.insert("user".to_string(), "bob".to_string());
        let got = startup_parameters(vec![("server_version".into(), "16.4".into())], &startup);
        let get = |k: &str| got.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("server_version"), Some("16.4"));
        assert_eq!(get("session_authorization"), Some("bob"));
        assert_eq!(get("client_encoding"), Some("UTF8"));
        assert_eq!(got.iter().filter(|(n, _)| n == "server_version").count(), 1);
    }
}
