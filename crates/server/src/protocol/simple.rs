//! The simple query protocol (Query).
//!
//! One backend call runs every statement of the query string (`Session::simple_query`) and
//! returns each result; they are sent in order, an error ends the list with its
//! ErrorResponse, and ReadyForQuery carries the session's status after the last. An empty
//! query string gets EmptyQueryResponse. A COPY FROM STDIN result switches the connection to
//! COPY mode instead, and ReadyForQuery waits for CopyDone or CopyFail (`copy.rs`).

use super::errors::error_message;
use super::results::{feed_notices, feed_output};
use super::{is_empty_query, status_from_u8, Conn};
use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery};
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::sync::atomic::Ordering;

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
