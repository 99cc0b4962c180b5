//! Startup and authentication (StartupMessage, the SASL password messages) and CancelRequest.
//!
//! The startup message picks the first matching pg_hba rule: `reject` (or no rule) refuses
//! with FATAL 28000, `trust` finishes startup at once, `scram-sha-256` runs the SASL
//! exchange (AuthenticationSASL, SASLInitialResponse, SASLContinue, SASLResponse,
//! SASLFinal) as PostgreSQL does, with a made-up verifier for a role without a password so
//! that it fails the same way. Finishing startup reserves a connection slot
//! (`max_connections`), parses `options`, starts the backend thread and its session, and
//! sends AuthenticationOk, ParameterStatus, BackendKeyData and ReadyForQuery. A refused
//! startup sends one FATAL ErrorResponse and closes the connection.
//!
//! A CancelRequest arrives on a connection of its own and only sets the cancel flag of the
//! session whose key it names.

use super::errors::{error_info, fatal_error, protocol_error};
use super::{replication, Conn};
use crate::backend::Backend;
use crate::config;
use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::auth::sasl::scram::{
    ScramSecret, ScramServerAuth, ScramServerAuthWaitingForClientFinal,
};
use pgwire::api::auth::{
    protocol_negotiation, save_startup_parameters_to_metadata, StartupHandler,
};
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::response::{ReadyForQuery, TransactionStatus};
use pgwire::messages::startup::{
    Authentication, BackendKeyData, ParameterStatus, PasswordMessageFamily, Startup,
};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage, ProtocolVersion};
use std::fmt::Debug;
use std::sync::atomic::Ordering;
use walnut_common::{Error, SqlState};

/// The authentication exchange of one connection (SCRAM-SHA-256, RFC 5802/7677, as PostgreSQL
/// runs it: `src/backend/libpq/auth-scram.c`).
pub(super) enum AuthState {
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

/// The database the client names: its `database` startup parameter, else its user name (as
/// libpq's default).
fn database(startup: &Startup) -> &str {
    startup
        .parameters
        .get("database")
        .or_else(|| startup.parameters.get("user"))
        .map_or("", String::as_str)
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
        let database = database(&startup).to_string();
        let _ = self.database.set(database.clone());
        let addr = client.socket_addr().ip();
        let ssl = client.is_secure();
        let ssl_text = if ssl {
            "SSL encryption"
        } else {
            "no encryption"
        };
        let mode = match replication::parse_mode(
            startup.parameters.get("replication").map(String::as_str),
        ) {
            Ok(m) => m,
            Err(e) => return self.reject(client, &e).await,
        };
        if let Some(mode) = mode {
            if self.shared.wal_source.is_none() {
                let e = Error::user(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "this server does not accept replication connections",
                );
                return self.reject(client, &e).await;
            }
            let _ = self.replication.set(mode);
        }
        let physical = mode == Some(replication::ReplicationMode::Physical);
        let standby = self
            .shared
            .wal_source
            .as_ref()
            .is_some_and(|s| s.storage.in_recovery());
        if standby && !self.shared.config.settings().bool(&crate::guc::HOT_STANDBY) {
            // hot_standby = off: a standby takes no sessions until it is promoted.
            let e = Error::user(
                SqlState::CANNOT_CONNECT_NOW,
                "the database system is not accepting connections",
            )
            .with_detail("Hot standby mode is disabled.");
            return self.reject(client, &e).await;
        }
        // PostgreSQL's messages name the database only for connections that have one.
        let (no_entry, rejects) = if physical {
            (
                format!("replication connection from host \"{addr}\", user \"{user}\""),
                format!("replication connection for host \"{addr}\", user \"{user}\""),
            )
        } else {
            let who = format!("host \"{addr}\", user \"{user}\", database \"{database}\"");
            (who.clone(), format!("connection for {who}"))
        };
        let auth = &self.shared.auth;
        let Some(rule) = auth.hba.find(addr, ssl, &database, &user, physical) else {
            let e = auth_error(
                "28000",
                format!("no pg_hba.conf entry for {no_entry}, {ssl_text}"),
            );
            return self.reject(client, &e).await;
        };
        match rule.method {
            crate::hba::Method::Reject => {
                let e = auth_error(
                    "28000",
                    format!("pg_hba.conf rejects {rejects}, {ssl_text}"),
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
        if self.replication.get().is_some() {
            if let Err(e) = self.register_walsender(client, startup, pid) {
                return self.reject(client, &e).await;
            }
        }
        let secret = registry.new_secret(
            pid,
            client.protocol_version() != ProtocolVersion::PROTOCOL3_0,
        );
        // `application_name` is the session's setting (`Session::set_client` takes it).
        let identity = walnut_sql::activity::ClientIdentity {
            user: startup.parameters.get("user").cloned().unwrap_or_default(),
            addr: Some(client.socket_addr()),
            walsender: self.replication.get().is_some(),
            ..Default::default()
        };
        let started = Backend::start(
            reservation,
            secret.clone(),
            self.shared.engine.clone(),
            self.shared.config.clone(),
            options,
            database(startup),
            identity,
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

impl Conn {
    /// Enters a replication connection in the WAL's walsender list, within `max_wal_senders`.
    ///
    /// # Errors
    /// 53300 with PostgreSQL's message when `max_wal_senders` are already connected.
    fn register_walsender<C: ClientInfo>(
        &self,
        client: &C,
        startup: &Startup,
        pid: i32,
    ) -> Result<(), Error> {
        let src = self
            .shared
            .wal_source
            .as_ref()
            .expect("replication connections need a WAL source (checked at startup)");
        if src.storage.in_recovery() {
            // Cascading replication (a standby's walsender) is not built.
            return Err(Error::user(
                SqlState::FEATURE_NOT_SUPPORTED,
                "this server is a standby in recovery: walnut does not support cascading replication",
            )
            .with_detail("Connect the replication client to the primary."));
        }
        let max = self
            .shared
            .config
            .settings()
            .int(&crate::guc::MAX_WAL_SENDERS);
        let addr = client.socket_addr();
        let snd = walnut_wal::senders::WalSnd::new(
            pid,
            startup.parameters.get("user").cloned().unwrap_or_default(),
            startup
                .parameters
                .get("application_name")
                .cloned()
                .unwrap_or_default(),
            Some(addr.ip()),
            addr.port(),
        );
        let reg = src
            .wal()
            .senders()
            .register(usize::try_from(max).unwrap_or(0), snd)
            .map_err(|_| {
                Error::user(
                    SqlState::TOO_MANY_CONNECTIONS,
                    format!(
                        "number of requested standby connections exceeds max_wal_senders (currently {max})"
                    ),
                )
            })?;
        let _ = self.walsnd.set(reg);
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
impl CancelHandler for Conn {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let matched = self
            .shared
            .registry
            .cancel(request.pid, &request.secret_key);
        tracing::debug!(pid = request.pid, matched, "cancel request");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
