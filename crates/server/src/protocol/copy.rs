//! COPY FROM STDIN (CopyData, CopyDone, CopyFail), after a simple or extended query switched
//! the connection to COPY mode with CopyInResponse.
//!
//! Each message goes to the session (`Session::copy_data`, `copy_done`, `copy_fail`). A
//! failed CopyData ends the COPY with an error, and pgwire ignores the rest of the data;
//! CopyDone sends the command tag. pgwire sends ReadyForQuery after CopyDone or CopyFail
//! (simple protocol), with the status stored here.

use super::errors::user_error;
use super::results::{feed_notices, feed_output};
use super::Conn;
use async_trait::async_trait;
use futures::Sink;
use pgwire::api::copy::CopyHandler;
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;

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
