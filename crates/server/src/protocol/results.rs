//! A statement's results as backend messages, shared by the simple query, extended query and
//! COPY handlers: rows (RowDescription when the simple protocol asks for it, DataRow each,
//! then CommandComplete), a command tag, EmptyQueryResponse, or CopyInResponse, which
//! switches the connection to COPY mode; and the notices the statement raised. Messages are
//! fed, not flushed: the caller flushes once, with ReadyForQuery or at Sync/Flush.

use super::errors::{notice_message, user_error};
use super::values;
use futures::{Sink, SinkExt};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyInResponse;
use pgwire::messages::response::{CommandComplete, EmptyQueryResponse};
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::sync::Arc;
use walnut_common::DataType;
use walnut_common::Error;
use walnut_sql::session::{ColumnDesc, Notice, Output};

/// Feeds (without flushing) the messages of one statement result. `describe` adds the
/// RowDescription (simple query); `formats` are the result format codes (empty = text).
/// Returns `true` if the result was CopyIn (the caller switches to COPY mode).
pub(super) async fn feed_output<C>(
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

/// Column descriptions from (name, type) pairs, for results the front end makes itself
/// (replication commands).
pub(super) fn columns(cols: &[(&str, DataType)]) -> Arc<Vec<ColumnDesc>> {
    Arc::new(
        cols.iter()
            .map(|(name, ty)| ColumnDesc {
                name: (*name).to_string(),
                ty: ty.clone(),
            })
            .collect(),
    )
}

pub(super) async fn feed_notices<C>(client: &mut C, notices: &[Notice]) -> PgWireResult<()>
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
