//! The simple query protocol (Query).
//!
//! One backend call runs every statement of the query string (`Session::simple_query`) and
//! returns each result; they are sent in order, an error ends the list with its
//! ErrorResponse, and ReadyForQuery carries the session's status after the last. An empty
//! query string gets EmptyQueryResponse. A COPY FROM STDIN result switches the connection to
//! COPY mode instead, and ReadyForQuery waits for CopyDone or CopyFail (`copy.rs`).

use super::errors::error_message;
use super::replication::{self, Command, ReplicationMode};
use super::results::{columns, feed_notices, feed_output};
use super::{is_empty_query, status_from_u8, walsender, Conn};
use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::query::SimpleQueryHandler;
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyBothResponse;
use pgwire::messages::response::CommandComplete;
use pgwire::messages::response::{EmptyQueryResponse, ReadyForQuery};
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;
use std::fmt::Debug;
use std::sync::atomic::Ordering;
use walnut_common::{DataType, Error, SqlState, Value};
use walnut_sql::session::Output;

impl Conn {
    /// ErrorResponse, then ReadyForQuery with the last status.
    async fn reply_error<C>(&self, client: &mut C, e: &Error) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.feed(error_message(e)).await?;
        self.ready(client).await
    }

    /// ReadyForQuery with the last status the session reported.
    async fn ready<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.set_state(PgWireConnectionState::ReadyForQuery);
        let status = status_from_u8(self.status.load(Ordering::Relaxed));
        client
            .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                status,
            )))
            .await?;
        Ok(())
    }

    /// A replication command on a replication connection (`replication.rs`). SHOW goes to
    /// the session as the SQL statement; START_REPLICATION, once its start point is checked,
    /// sends CopyBothResponse and leaves the streaming to [`super::serve`].
    async fn on_replication_command<C>(
        &self,
        client: &mut C,
        cmd: Result<Command, Error>,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let src = self
            .shared
            .wal_source
            .as_ref()
            .expect("replication connections need a WAL source (checked at startup)");
        let cmd = match cmd {
            Ok(c) => c,
            Err(e) => return self.reply_error(client, &e).await,
        };
        match cmd {
            Command::IdentifySystem => {
                let dbname = match self.replication.get() {
                    Some(ReplicationMode::Database) => {
                        Value::Text(self.database.get().cloned().unwrap_or_default())
                    }
                    _ => Value::Null,
                };
                let output = Output::Rows {
                    columns: columns(&[
                        ("systemid", DataType::Text),
                        ("timeline", DataType::Int4),
                        ("xlogpos", DataType::Text),
                        ("dbname", DataType::Text),
                    ]),
                    rows: vec![vec![
                        Value::Text(src.storage.system_identifier.to_string()),
                        Value::Int4(src.storage.timeline() as i32),
                        Value::Text(src.wal().flush_lsn().to_string()),
                        dbname,
                    ]],
                    tag: "IDENTIFY_SYSTEM".to_string(),
                };
                feed_output(client, output, &[], true).await?;
                self.ready(client).await
            }
            Command::TimelineHistory(tli) => {
                let wal_dir = src.storage.dir.join("wal");
                match walnut_storage::timeline::read_history(&*src.storage.vfs, &wal_dir, tli) {
                    Ok(Some(text)) => {
                        let output = Output::Rows {
                            columns: columns(&[
                                ("filename", DataType::Text),
                                ("content", DataType::Text),
                            ]),
                            rows: vec![vec![
                                Value::Text(walnut_storage::timeline::history_file_name(tli)),
                                Value::Text(text),
                            ]],
                            tag: "TIMELINE_HISTORY".to_string(),
                        };
                        feed_output(client, output, &[], true).await?;
                        self.ready(client).await
                    }
                    Ok(None) => {
                        self.reply_error(client, &replication::no_timeline_history(tli))
                            .await
                    }
                    Err(e) => self.reply_error(client, &e).await,
                }
            }
            Command::StartReplication {
                slot,
                start,
                timeline,
            } => {
                let slot = match slot {
                    None => None,
                    Some(name) => {
                        let pid = self.walsnd.get().map_or(0, |r| r.snd().pid);
                        match src.slots().acquire(&name, pid) {
                            Ok(s) => Some(s),
                            Err(e) => return self.reply_error(client, &e).await,
                        }
                    }
                };
                if let Some(tli) = timeline {
                    if let Err(e) = replication::check_timeline(&src.storage, tli, start) {
                        return self.reply_error(client, &e).await;
                    }
                }
                if let Err(e) = walsender::check_start(&src.wal(), start) {
                    return self.reply_error(client, &e).await;
                }
                client
                    .send(PgWireBackendMessage::CopyBothResponse(
                        CopyBothResponse::new(0, 0, vec![]),
                    ))
                    .await?;
                *self.start_streaming.lock() = Some((start, slot));
                Ok(())
            }
            Command::CreateSlot {
                name,
                reserve_wal,
                temporary,
            } => {
                let pid = self.walsnd.get().map_or(0, |r| r.snd().pid);
                let max = self
                    .shared
                    .config
                    .settings()
                    .int(&crate::guc::MAX_REPLICATION_SLOTS);
                let mut created = src.slots().create(
                    &name,
                    None,
                    usize::try_from(max).unwrap_or(0),
                    temporary.then_some(pid),
                );
                if created.is_ok() && reserve_wal {
                    created = src
                        .slots()
                        .reserve(&name, || src.wal().redo_lsn())
                        .map(|_| ());
                    if created.is_err() {
                        let _ = src.slots().drop_slot(&name, pid);
                    }
                }
                if let Err(e) = created {
                    return self.reply_error(client, &e).await;
                }
                let output = Output::Rows {
                    columns: columns(&[
                        ("slot_name", DataType::Text),
                        ("consistent_point", DataType::Text),
                        ("snapshot_name", DataType::Text),
                        ("output_plugin", DataType::Text),
                    ]),
                    rows: vec![vec![
                        Value::Text(name),
                        Value::Null,
                        Value::Null,
                        Value::Null,
                    ]],
                    tag: "CREATE_REPLICATION_SLOT".to_string(),
                };
                feed_output(client, output, &[], true).await?;
                self.ready(client).await
            }
            Command::DropSlot { name, wait } => {
                let pid = self.walsnd.get().map_or(0, |r| r.snd().pid);
                // WAIT: while a walsender uses the slot, retry for up to 30 s.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                loop {
                    match src.slots().drop_slot(&name, pid) {
                        Err(e)
                            if wait
                                && e.sqlstate == SqlState::OBJECT_IN_USE
                                && std::time::Instant::now() < deadline =>
                        {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        }
                        Err(e) => return self.reply_error(client, &e).await,
                        Ok(()) => break,
                    }
                }
                client
                    .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                        "DROP_REPLICATION_SLOT".to_string(),
                    )))
                    .await?;
                self.ready(client).await
            }
            Command::ReadSlot(name) => {
                let row = match src.slots().get(&name) {
                    Some(s) => vec![
                        Value::Text("physical".into()),
                        s.restart_lsn
                            .map_or(Value::Null, |l| Value::Text(l.to_string())),
                        s.restart_lsn.map_or(Value::Null, |_| Value::Int8(1)),
                    ],
                    None => vec![Value::Null; 3],
                };
                let output = Output::Rows {
                    columns: columns(&[
                        ("slot_type", DataType::Text),
                        ("restart_lsn", DataType::Text),
                        ("restart_tli", DataType::Int8),
                    ]),
                    rows: vec![row],
                    tag: "READ_REPLICATION_SLOT".to_string(),
                };
                feed_output(client, output, &[], true).await?;
                self.ready(client).await
            }
            Command::Unsupported(what) => {
                let e = Error::user(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    format!("{what} is not supported yet"),
                );
                self.reply_error(client, &e).await
            }
            Command::BaseBackup(opts) => {
                match super::basebackup::send(client, &src.storage, &opts).await? {
                    Ok(()) => self.ready(client).await,
                    Err(e) => {
                        tracing::warn!(sqlstate = %e.sqlstate, "base backup failed: {}", e.message);
                        self.reply_error(client, &e).await
                    }
                }
            }
            Command::Show => unreachable!("SHOW is answered by the session"),
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
        if let Some(&mode) = self.replication.get() {
            match replication::parse_command(&sql) {
                Some(Ok(Command::Show)) => {}
                Some(cmd) => return self.on_replication_command(client, cmd).await,
                None if mode == ReplicationMode::Physical && !is_empty_query(&sql) => {
                    let e = replication::sql_on_physical_walsender();
                    return self.reply_error(client, &e).await;
                }
                None => {}
            }
        }
        let status = if is_empty_query(&sql) {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
            status_from_u8(self.status.load(Ordering::Relaxed))
        } else {
            let (results, notices, status, discarded) = backend
                .call(move |s| {
                    let results = s.simple_query(&sql);
                    (
                        results,
                        s.take_notices(),
                        s.txn_status(),
                        s.take_discard_all(),
                    )
                })
                .await
                .map_err(Self::lost)?;
            if discarded {
                self.discard_all(None);
            }
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
