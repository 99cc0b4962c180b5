//! COPY FROM STDIN (CopyData, CopyDone, CopyFail), after a simple or extended query switched
//! the connection to COPY mode with CopyInResponse.
//!
//! CopyData is gathered in the connection's buffer and goes to the session
//! (`Session::copy_data`) in one call for all the messages that arrived together: when the
//! buffer reaches [`COPY_CHUNK`] bytes, else from a task queued on the connection's runtime,
//! which runs as soon as the connection waits for more input (or tokio's cooperative budget
//! makes it yield). Data is thus parsed as it arrives, as PostgreSQL does, but clients such as
//! pgbench, which send a message per row, no longer cost a session call per row (a fifth of
//! `pgbench -i`'s load time). CopyDone gives the rest to the session before
//! `Session::copy_done`; CopyFail drops it (`Session::copy_fail`). A chunk that fails ends the
//! COPY with an error (its line number counts every line before it); an error of the queued
//! task is reported at the next COPY message. pgwire then ignores the rest of the data;
//! CopyDone sends the command tag.

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
use std::sync::atomic::Ordering;
use walnut_common::Error;
use walnut_sql::session::TxnStatus;

/// Bytes of COPY data gathered before the session parses them (PostgreSQL's
/// `RAW_BUF_SIZE`, 64 KiB).
pub(super) const COPY_CHUNK: usize = 64 * 1024;

impl Conn {
    /// Gives the gathered COPY data to the session. Returns the session's error, which ended
    /// the COPY, and the session's status then.
    async fn copy_flush(&self) -> PgWireResult<Result<(), (Error, TxnStatus)>> {
        let data = std::mem::take(&mut *self.copy_in.lock());
        if data.is_empty() {
            return Ok(Ok(()));
        }
        let (result, status, mut data) = self
            .backend()?
            .call_expecting_more(move |s| (s.copy_data(&data), s.txn_status(), data))
            .await
            .map_err(Self::lost)?;
        if let Err(e) = result {
            return Ok(Err((e, status)));
        }
        data.clear();
        let mut buf = self.copy_in.lock();
        if buf.is_empty() {
            *buf = data; // keep the allocation for the next chunk
        }
        Ok(Ok(()))
    }

    /// Reports an error that ended the COPY (pgwire then ignores the rest of the data),
    /// storing the session's status for ReadyForQuery.
    fn copy_failed<C: ClientInfo>(
        &self,
        client: &mut C,
        (e, status): (Error, TxnStatus),
    ) -> PgWireError {
        self.set_status(client, status);
        user_error(&e)
    }

    /// The error a queued flush got, if any.
    fn copy_error(&self) -> Option<(Error, TxnStatus)> {
        self.copy_error.lock().take()
    }

    /// Queues a flush of the gathered data on the connection's runtime, unless one is queued:
    /// it runs once the connection's task yields, that is when no more input is ready.
    fn queue_copy_flush(&self) {
        if self.copy_flush_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(conn) = self.this.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            conn.copy_flush_queued.store(false, Ordering::Release);
            // A session gone (the connection ended) has nothing left to do.
            if let Ok(Err(failed)) = conn.copy_flush().await {
                *conn.copy_error.lock() = Some(failed);
            }
        });
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
        if let Some(failed) = self.copy_error() {
            return Err(self.copy_failed(client, failed));
        }
        let full = {
            let mut buf = self.copy_in.lock();
            buf.extend_from_slice(&copy_data.data);
            buf.len() >= COPY_CHUNK
        };
        if full {
            if let Err(failed) = self.copy_flush().await? {
                return Err(self.copy_failed(client, failed));
            }
        } else {
            self.queue_copy_flush();
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let flushed = match self.copy_error() {
            Some(failed) => Err(failed),
            None => self.copy_flush().await?,
        };
        if let Err(failed) = flushed {
            return Err(self.copy_failed(client, failed));
        }
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
        self.copy_in.lock().clear();
        self.copy_error.lock().take();
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
