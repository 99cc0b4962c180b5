//! The extended query protocol (Parse, Bind, Describe, Execute, Sync, Close, Flush) and the
//! connection's prepared statements and portals.
//!
//! walnut keeps its own statement and portal maps: Parse plans through `Session::prepare`
//! (an empty query string is a statement of its own kind), Bind decodes the parameters by
//! the statement's types and the format codes into a portal, Execute runs it. An Execute
//! with a row limit sends that many rows and PortalSuspended and keeps the rest in the
//! portal for the next Execute. Sync ends the implicit transaction, drops the unnamed
//! portal and sends ReadyForQuery. Errors go back to pgwire, which skips to Sync.

use super::errors::{error_message, protocol_error, user_error};
use super::results::{feed_notices, feed_output};
use super::{is_empty_query, values, Conn};
use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::portal::Portal as PgPortal;
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::stmt::NoopQueryParser;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::data::{NoData, ParameterDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Execute, Flush, Parse, ParseComplete,
    PortalSuspended, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{CommandComplete, EmptyQueryResponse, ReadyForQuery};
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::sync::Arc;
use walnut_common::{Error, SqlState, Value};
use walnut_sql::session::{ColumnDesc, Output, Prepared};

/// A prepared statement as the front end stores it.
#[derive(Clone)]
pub(super) enum Stmt {
    /// An empty query string: binds and executes to EmptyQueryResponse.
    Empty,
    /// Planned by `Session::prepare`.
    Prepared(Arc<Prepared>),
}

/// A bound portal.
pub(super) struct Portal {
    stmt: Stmt,
    params: Vec<Value>,
    /// Result format code per column.
    formats: Arc<[i16]>,
    /// Rows left after an Execute with a row limit (PortalSuspended).
    pending: Option<Pending>,
}

/// The rest of a result set whose Execute stopped at its row limit.
pub(super) struct Pending {
    columns: Arc<Vec<ColumnDesc>>,
    rows: std::vec::IntoIter<Vec<Value>>,
    tag: String,
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

impl Conn {
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
        if self.replication.get().is_some() {
            return Err(user_error(
                &super::replication::extended_protocol_on_walsender(),
            ));
        }
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
                SqlState::DUPLICATE_CURSOR,
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
        let (result, notices, status, discarded) = self
            .backend()?
            .call_expecting_more(move |s| {
                let result = s.execute(&prepared, params);
                (
                    result,
                    s.take_notices(),
                    s.txn_status(),
                    s.take_discard_all(),
                )
            })
            .await
            .map_err(Self::lost)?;
        if discarded {
            self.discard_all(Some(&name));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(partial_tag("SELECT 100", 7), "SELECT 7");
        assert_eq!(partial_tag("SHOW", 1), "SHOW");
    }
}
