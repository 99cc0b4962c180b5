//! Streaming the WAL to a standby or `pg_receivewal` after START_REPLICATION (PostgreSQL's
//! `WalSndLoop` and `XLogSendPhysical`), in CopyBoth mode on the connection's own socket.
//!
//! Messages, all inside CopyData, big-endian, times in µs since 2000-01-01:
//!
//! | from | byte | then |
//! |---|---|---|
//! | walsender | `w` XLogData | u64 start LSN, u64 end of WAL (the flush LSN), i64 send time, the WAL bytes from start |
//! | walsender | `k` keepalive | u64 end of WAL, i64 send time, u8 reply requested |
//! | client | `r` standby status update | u64 write, u64 flush, u64 apply, i64 send time, u8 reply requested |
//! | client | `h` hot-standby feedback | i64 send time, u32 xmin, u32 epoch, u32 catalog xmin, u32 epoch |
//!
//! A walnut standby's `h` carries a WAL position where PostgreSQL's carries an xid: xmin is its
//! low 32 bits and the epoch its high 32, the catalog pair repeats them, and 0 releases the hold
//! (PostgreSQL's invalid xmin). Its queries see every commit whose record ends at or below
//! it; [`walnut_storage::feedback::StandbyHold`] holds this server's horizon for them.
//!
//! The loop: send the flushed WAL not yet sent, at most [`MAX_SEND_SIZE`] per message and
//! never across a segment; when caught up, wait for the WAL's flush notification, a client
//! message or the keepalive timer. Only WAL at or below the flush LSN is sent, so a standby
//! never holds WAL this server could lose in a crash. The bytes come from the segment files;
//! a segment recycled meanwhile is detected after the read ([`Wal::removed_below`]) and ends
//! the stream with "requested WAL segment ... has already been removed".
//!
//! `wal_sender_timeout`: a keepalive asking for a reply goes out when the client has been
//! silent for half of it, and the connection ends when it has been silent for all of it.
//! The client's CopyDone ends streaming: CopyDone back, CommandComplete `START_STREAMING`,
//! ReadyForQuery, and the connection takes commands again.

use super::errors::{error_info, protocol_error};
use bytes::{BufMut, Bytes, BytesMut};
use futures::{Sink, SinkExt, Stream, StreamExt};
use pgwire::error::PgWireError;
use pgwire::messages::copy::{CopyData, CopyDone};
use pgwire::messages::response::{CommandComplete, ReadyForQuery, TransactionStatus};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use std::fmt::Debug;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use walnut_common::{Error, Lsn, SqlState};
use walnut_storage::feedback::StandbyHold;
use walnut_storage::slots::AcquiredSlot;
use walnut_wal::senders::{Registration, WalSnd, WalSndState};
use walnut_wal::{segment_file_name, segment_of, Wal, WAL_SEGMENT_SIZE};

/// What replication connections serve: this server's storage (its WAL, slots, files and
/// system identifier).
pub struct WalSource {
    /// The open data directory.
    pub storage: Arc<walnut_storage::Storage>,
}

impl std::fmt::Debug for WalSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalSource")
            .field("dir", &self.storage.dir)
            .finish()
    }
}

impl WalSource {
    /// The WAL.
    pub fn wal(&self) -> &Arc<Wal> {
        self.storage.wal()
    }

    /// The replication slots.
    pub fn slots(&self) -> &Arc<walnut_storage::slots::ReplicationSlots> {
        &self.storage.slots
    }
}

/// Largest XLogData payload, bytes (PostgreSQL's `MAX_SEND_SIZE`, 16 pages of 8 kB).
pub const MAX_SEND_SIZE: u64 = 128 * 1024;
/// WAL sent before the loop looks at the client's messages again, bytes.
const BATCH: u64 = 1024 * 1024;
/// µs from the Unix epoch to PostgreSQL's epoch, 2000-01-01.
const PG_EPOCH_US: i64 = 946_684_800_000_000;

/// Now, µs since the Unix epoch.
pub fn unix_now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Now, µs since 2000-01-01 (PostgreSQL's `GetCurrentTimestamp`).
fn pg_now() -> i64 {
    unix_now_us() - PG_EPOCH_US
}

/// The error for WAL that is gone (PostgreSQL's `XLogRead` after `XLogFileRead` failed),
/// naming segment `segno`'s file on timeline `tli`.
pub fn segment_removed(tli: u32, segno: u64) -> Error {
    Error::user(
        SqlState::UNDEFINED_FILE,
        format!(
            "requested WAL segment {} has already been removed",
            segment_file_name(tli, segno)
        ),
    )
}

/// Reads WAL `[lsn, lsn + len)` from its segment file; `len` must not cross the segment's end.
/// `file` caches the open segment between calls.
///
/// # Errors
/// 58P01 if the segment is missing, or was recycled or removed before the read ended (then
/// the bytes read may be another segment's); an I/O error otherwise.
fn read_wal(
    wal: &Wal,
    file: &mut Option<(u64, std::fs::File)>,
    lsn: u64,
    len: usize,
) -> Result<Vec<u8>, Error> {
    let segno = segment_of(lsn);
    debug_assert!(lsn + len as u64 <= (segno + 1) * WAL_SEGMENT_SIZE);
    if file.as_ref().map(|(s, _)| *s) != Some(segno) {
        let Some(path) = wal.segment_path(segno)? else {
            return Err(segment_removed(wal.timeline(), segno));
        };
        match std::fs::File::open(&path) {
            Ok(f) => *file = Some((segno, f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(segment_removed(wal.timeline(), segno))
            }
            Err(e) => {
                return Err(Error::io(
                    format!("could not open file \"{}\"", path.display()),
                    e,
                ))
            }
        }
    }
    let (_, f) = file.as_ref().expect("opened above");
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, lsn % WAL_SEGMENT_SIZE)
        .map_err(|e| {
            Error::io(
                format!(
                    "could not read from log segment {}",
                    segment_file_name(wal.timeline(), segno)
                ),
                e,
            )
        })?;
    if segno < wal.removed_below() {
        *file = None;
        return Err(segment_removed(wal.timeline(), segno));
    }
    Ok(buf)
}

/// Checks that streaming can start at `start`: not past the flush LSN, its segment still here.
///
/// # Errors
/// PostgreSQL's messages: "requested starting point ... is ahead of the WAL flush position of
/// this server ..." (PostgreSQL gives it no SQLSTATE, so XX000; walnut says 55000,
/// object_not_in_prerequisite_state) and "requested WAL segment ... has already been removed"
/// (58P01).
pub fn check_start(wal: &Wal, start: Lsn) -> Result<(), Error> {
    let flush = wal.flush_lsn();
    if start > flush {
        return Err(Error::user(
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "requested starting point {start} is ahead of the WAL flush position of this server {flush}"
            ),
        ));
    }
    let segno = segment_of(start.0);
    if segno < wal.removed_below() || wal.segment_path(segno)?.is_none() {
        return Err(segment_removed(wal.timeline(), segno));
    }
    Ok(())
}

fn copy_data(b: BytesMut) -> PgWireBackendMessage {
    PgWireBackendMessage::CopyData(CopyData::new(b.freeze()))
}

fn keepalive(end: u64, reply_requested: bool) -> PgWireBackendMessage {
    let mut b = BytesMut::with_capacity(18);
    b.put_u8(b'k');
    b.put_u64(end);
    b.put_i64(pg_now());
    b.put_u8(u8::from(reply_requested));
    copy_data(b)
}

/// How streaming ended.
#[derive(Debug)]
pub enum Ended {
    /// The client sent CopyDone; the connection takes commands again.
    CopyDone,
    /// The connection is gone or must close (EOF, Terminate, a FATAL error already sent).
    Closed,
}

/// A client message, once its positions are recorded.
#[derive(Debug, PartialEq, Eq)]
enum ClientMsg {
    /// A standby status update; `true`: it asks for a reply.
    Status(bool),
    /// walnut's apply capacity message.
    Capacity,
    /// Hot-standby feedback: hold the horizon for queries that see every commit ending at or
    /// below this position, or release it (`None`).
    Feedback(Option<Lsn>),
}

/// A status message from the client, decoded.
fn on_client_copy_data(snd: &WalSnd, data: &Bytes) -> Result<ClientMsg, Error> {
    let bad = |what: &str| protocol_error(format!("invalid standby message: {what}"));
    match data.first() {
        Some(b'r') => {
            if data.len() != 34 {
                return Err(bad("a standby status update must be 34 bytes"));
            }
            let u64_at = |i: usize| u64::from_be_bytes(data[i..i + 8].try_into().expect("8"));
            let (write, flush, apply) = (u64_at(1), u64_at(9), u64_at(17));
            let reply_requested = data[33] != 0;
            snd.reply(write, flush, apply, Instant::now(), unix_now_us());
            Ok(ClientMsg::Status(reply_requested))
        }
        // walnut's apply capacity message (a walnut standby's walreceiver sends it when the
        // figure changes): bytes/s, records/s, send time.
        Some(b'c') if data.len() == 25 => {
            let u64_at = |i: usize| u64::from_be_bytes(data[i..i + 8].try_into().expect("8"));
            snd.set_apply_capacity(u64_at(1), u64_at(9));
            Ok(ClientMsg::Capacity)
        }
        Some(b'c') => Err(bad("an apply capacity message must be 25 bytes")),
        Some(b'h') if data.len() == 25 => {
            let u32_at = |i: usize| u32::from_be_bytes(data[i..i + 4].try_into().expect("4"));
            let lsn = (u64::from(u32_at(13)) << 32) | u64::from(u32_at(9));
            Ok(ClientMsg::Feedback((lsn != 0).then_some(Lsn(lsn))))
        }
        Some(b'h') => Err(bad("a hot standby feedback message must be 25 bytes")),
        Some(&t) => Err(protocol_error(format!(
            "unexpected message type \"{}\"",
            char::from(t)
        ))),
        None => Err(bad("empty message")),
    }
}

/// Streams `src`'s WAL from `start` until the client's CopyDone, the connection's end, or an
/// error (sent as FATAL, then closed), holding the horizon for the client's hot-standby
/// feedback meanwhile. The CopyBothResponse has been sent.
///
/// # Errors
/// The socket's I/O errors.
pub async fn stream<T>(
    socket: &mut T,
    src: &WalSource,
    reg: &Registration,
    slot: Option<&AcquiredSlot>,
    start: Lsn,
    timeout: Option<Duration>,
) -> Result<Ended, PgWireError>
where
    T: Stream<Item = Result<PgWireFrontendMessage, PgWireError>>
        + Sink<PgWireBackendMessage>
        + Unpin,
    T::Error: Debug,
    PgWireError: From<T::Error>,
{
    let wal = src.wal();
    let snd = reg.snd();
    let mut hold = StandbyHold::new(src.storage.clone());
    let mut sent = start.0;
    let mut file = None;
    let mut last_reply = Instant::now();
    let mut keepalive_sent = false;
    snd.set_state(WalSndState::Catchup);
    snd.sent(sent, Instant::now());
    let fail = |e: Error| {
        tracing::info!(sqlstate = %e.sqlstate, "walsender: {}", e.message);
        PgWireBackendMessage::ErrorResponse(error_info(&e, "FATAL").into())
    };
    loop {
        let notified = wal.flush_notify().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let flush = wal.flush_lsn().0;
        if sent < flush {
            hold.sample();
            let batch_end = flush.min(sent + BATCH);
            while sent < batch_end {
                let seg_end = (segment_of(sent) + 1) * WAL_SEGMENT_SIZE;
                let n = (batch_end - sent).min(MAX_SEND_SIZE).min(seg_end - sent);
                let bytes = match read_wal(wal, &mut file, sent, n as usize) {
                    Ok(b) => b,
                    Err(e) => {
                        socket.send(fail(e)).await?;
                        return Ok(Ended::Closed);
                    }
                };
                let mut b = BytesMut::with_capacity(25 + bytes.len());
                b.put_u8(b'w');
                b.put_u64(sent);
                b.put_u64(flush);
                b.put_i64(pg_now());
                b.put_slice(&bytes);
                socket.feed(copy_data(b)).await?;
                sent += n;
            }
            socket.flush().await?;
            snd.sent(sent, Instant::now());
        } else if snd.state() == WalSndState::Catchup {
            snd.set_state(WalSndState::Streaming);
        }
        if let Some(t) = timeout {
            let silent = last_reply.elapsed();
            if silent >= t {
                tracing::info!("terminating walsender process due to replication timeout");
                return Ok(Ended::Closed);
            }
            if silent >= t / 2 && !keepalive_sent {
                socket.send(keepalive(sent, true)).await?;
                keepalive_sent = true;
            }
        }
        // Behind: look at the client without waiting, then send more.
        let behind = sent < wal.flush_lsn().0;
        // The next keepalive or timeout check; none without wal_sender_timeout.
        let wake = timeout.map(|t| {
            let at = if keepalive_sent { t } else { t / 2 };
            at.saturating_sub(last_reply.elapsed())
        });
        let msg = tokio::select! {
            biased;
            m = socket.next() => Some(m),
            _ = std::future::ready(()), if behind => None,
            _ = &mut notified, if !behind => None,
            _ = tokio::time::sleep(wake.unwrap_or_default()), if !behind && wake.is_some() => None,
        };
        let Some(msg) = msg else { continue };
        match msg {
            Some(Ok(PgWireFrontendMessage::CopyData(d))) => {
                match on_client_copy_data(snd, &d.data) {
                    Ok(m) => {
                        if let ClientMsg::Feedback(lsn) = m {
                            hold.sample();
                            let xmin = hold.feedback(lsn);
                            // A guess (the standby is behind every sample) shows as none.
                            snd.set_xmin(xmin.filter(|_| hold.exact()).map(|x| x.0));
                        }
                        let reply_requested = m == ClientMsg::Status(true);
                        // Synchronous commits waiting for this standby re-check.
                        reg.replied();
                        // A physical slot keeps WAL from what the receiver has flushed.
                        let flushed = snd.flush_lsn();
                        if let (Some(slot), true) = (slot, flushed != 0) {
                            slot.confirm(Lsn(flushed));
                        }
                        last_reply = Instant::now();
                        keepalive_sent = false;
                        if reply_requested {
                            socket.send(keepalive(sent, false)).await?;
                        }
                    }
                    Err(e) => {
                        socket.send(fail(e)).await?;
                        return Ok(Ended::Closed);
                    }
                }
            }
            Some(Ok(PgWireFrontendMessage::CopyDone(_))) => {
                snd.set_state(WalSndState::Stopping);
                socket
                    .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
                    .await?;
                socket
                    .feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(
                        "START_STREAMING".to_string(),
                    )))
                    .await?;
                socket
                    .send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(
                        TransactionStatus::Idle,
                    )))
                    .await?;
                snd.set_state(WalSndState::Startup);
                return Ok(Ended::CopyDone);
            }
            Some(Ok(PgWireFrontendMessage::Terminate(_))) | None => return Ok(Ended::Closed),
            Some(Ok(PgWireFrontendMessage::CopyFail(f))) => {
                tracing::info!(
                    "walsender: client ended streaming with CopyFail: {}",
                    f.message
                );
                return Ok(Ended::Closed);
            }
            Some(Ok(_)) => {
                let e = protocol_error("unexpected message type during streaming replication");
                socket.send(fail(e)).await?;
                return Ok(Ended::Closed);
            }
            Some(Err(e)) => {
                tracing::info!("walsender: could not read from the client: {e}");
                return Ok(Ended::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_are_checked() {
        let snd = WalSnd::new(1, String::new(), String::new(), None, 0);
        let mut r = BytesMut::new();
        r.put_u8(b'r');
        r.put_u64(300);
        r.put_u64(200);
        r.put_u64(100);
        r.put_i64(0);
        r.put_u8(1);
        assert_eq!(
            on_client_copy_data(&snd, &r.clone().freeze()).unwrap(),
            ClientMsg::Status(true)
        );
        let s = snd.snapshot();
        assert_eq!((s.write_lsn, s.flush_lsn, s.replay_lsn), (300, 200, 100));
        r.truncate(20);
        let e = on_client_copy_data(&snd, &r.freeze()).unwrap_err();
        assert_eq!(e.sqlstate, SqlState::PROTOCOL_VIOLATION);
        assert!(on_client_copy_data(&snd, &Bytes::from_static(b"h123")).is_err());
        // walnut's apply capacity message.
        let mut c = BytesMut::new();
        c.put_u8(b'c');
        c.put_u64(50 << 20);
        c.put_u64(400_000);
        c.put_i64(0);
        assert_eq!(
            on_client_copy_data(&snd, &c.clone().freeze()).unwrap(),
            ClientMsg::Capacity
        );
        let s = snd.snapshot();
        assert_eq!(
            (s.apply_bytes_per_sec, s.apply_records_per_sec),
            (Some(50 << 20), Some(400_000))
        );
        c.truncate(17);
        assert!(on_client_copy_data(&snd, &c.freeze()).is_err());
        assert!(on_client_copy_data(&snd, &Bytes::from_static(b"z")).is_err());
        // Hot-standby feedback: a WAL position in (epoch, xmin); 0 releases.
        let mut h = BytesMut::new();
        h.put_u8(b'h');
        h.put_i64(0);
        for _ in 0..2 {
            h.put_u32(0x0000_0002);
            h.put_u32(0x0000_0001);
        }
        assert_eq!(
            on_client_copy_data(&snd, &h.clone().freeze()).unwrap(),
            ClientMsg::Feedback(Some(Lsn(0x1_0000_0002)))
        );
        h.truncate(9);
        h.put_bytes(0, 16);
        assert_eq!(
            on_client_copy_data(&snd, &h.freeze()).unwrap(),
            ClientMsg::Feedback(None)
        );
        assert!(on_client_copy_data(&snd, &Bytes::new()).is_err());
    }
}
