//! The walreceiver of a standby (PostgreSQL's src/backend/replication/walreceiver.c): a thread
//! that connects to the primary named by `primary_conninfo`, checks the system identifier,
//! runs `START_REPLICATION [SLOT primary_slot_name] PHYSICAL <flush position>`, writes the
//! WAL that arrives at its LSNs ([`ReceivedWal`]), flushes it after each read of the socket, and
//! tells replay how far it may read ([`Recovery::set_received`]). Status updates (`r`: written,
//! flushed and applied LSNs) go back after every read's writes, after every flush, whenever replay advances (a second
//! thread waits for that, so `remote_apply` commits wake at once), when a keepalive asks, and
//! at least every `wal_receiver_status_interval`. With `hot_standby_feedback = on`, a
//! hot-standby feedback message (`h`) goes with a status update whenever the position the
//! standby's queries need changed
//! ([`walnut_storage::xact::XactManager::oldest_snapshot_lsn`]), at most every
//! [`HS_FEEDBACK_GAP`]; turning the setting off sends one that releases the primary's hold.
//! On any failure it reconnects with backoff
//! (1 s doubling to 30 s), from the flush position; replay waits meanwhile.
//! crates/storage/DESIGN.md, "Standby mode", has the protocol and the crash windows.

use crate::guc;
use crate::repl_client::{ClientError, ConnInfo, ReplClient};
use bytes::{Buf, BufMut, BytesMut};
use parking_lot::Mutex;
use std::io::Write;
use std::net::TcpStream;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use walnut_common::config::Config;
use walnut_common::value::now_timestamp;
use walnut_common::Lsn;
use walnut_storage::standby::{ReceiverInfo, Recovery};
use walnut_storage::Storage;
use walnut_wal::receive::ReceivedWal;

/// Least time between two hot-standby feedback messages that move the primary's hold.
const HS_FEEDBACK_GAP: Duration = Duration::from_millis(100);

/// The longest a read of the socket blocks before the receiver looks at shutdown and promotion.
const POLL: Duration = Duration::from_millis(100);
/// First and longest wait between connection attempts.
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Starts the walreceiver thread of a standby.
///
/// # Errors
/// I/O errors starting the thread.
pub fn start(storage: Arc<Storage>, config: Arc<Config>) -> std::io::Result<()> {
    let Some(rec) = storage.recovery().cloned() else {
        return Ok(());
    };
    rec.set_receiver_running(true);
    let r = std::thread::Builder::new()
        .name("walreceiver".into())
        .spawn({
            let rec = rec.clone();
            move || {
                run(&storage, &rec, &config);
                rec.set_receiver_running(false);
                // Promoted: the WAL just opened takes the WAL's settings
                // (synchronous_standby_names) as a reload would give them.
                let t0 = Instant::now();
                while rec.promote_requested() && !rec.ended() && t0.elapsed() < BACKOFF_MAX {
                    std::thread::sleep(POLL);
                }
                if let Some(wal) = storage.wal_if_open() {
                    wal.apply_settings(&config.settings());
                }
            }
        });
    if r.is_err() {
        rec.set_receiver_running(false);
    }
    r.map(|_| ())
}

/// Why streaming ended.
#[derive(Debug, thiserror::Error)]
enum RecvError {
    /// The connection or the primary failed; try again.
    #[error("{0}")]
    Client(#[from] ClientError),
    /// The stream itself was wrong (a gap, a bad message): corruption of the conversation.
    #[error("{0}")]
    Stream(String),
    /// A setting is wrong (bad input): try again after a reload.
    #[error("{0}")]
    Config(String),
}

fn run(storage: &Arc<Storage>, rec: &Arc<Recovery>, config: &Arc<Config>) {
    let mut backoff = BACKOFF_MIN;
    let mut said_unset = false;
    loop {
        if rec.stopping() || rec.promote_requested() {
            *rec.receiver.lock() = None;
            return;
        }
        let settings = config.settings();
        let conninfo = settings.text(&guc::PRIMARY_CONNINFO);
        if conninfo.trim().is_empty() {
            if !said_unset {
                tracing::info!(
                    "primary_conninfo is not set: the standby replays only the WAL it has"
                );
                said_unset = true;
            }
            sleep_unless_stopped(rec, BACKOFF_MIN);
            continue;
        }
        said_unset = false;
        let slot = Some(settings.text(&guc::PRIMARY_SLOT_NAME)).filter(|s| !s.is_empty());
        let interval =
            Duration::from_secs(settings.int(&guc::WAL_RECEIVER_STATUS_INTERVAL).max(0) as u64);
        let started = Instant::now();
        match stream(storage, rec, &conninfo, slot, interval, config) {
            Ok(()) => {}
            Err(e) => {
                tracing::error!("walreceiver: {e}");
                *rec.receiver.lock() = None;
            }
        }
        if started.elapsed() > BACKOFF_MAX {
            backoff = BACKOFF_MIN;
        }
        sleep_unless_stopped(rec, backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

fn sleep_unless_stopped(rec: &Recovery, d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until && !rec.stopping() && !rec.promote_requested() {
        std::thread::sleep(POLL.min(until - Instant::now()));
    }
}

/// Parses `primary_conninfo` (libpq keyword/value or URI syntax; tokio-postgres's parser).
fn conn_info(conninfo: &str) -> Result<ConnInfo, RecvError> {
    let c = tokio_postgres::Config::from_str(conninfo)
        .map_err(|e| RecvError::Config(format!("invalid primary_conninfo: {e}")))?;
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_string(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c
        .get_user()
        .map(str::to_string)
        .or_else(|| std::env::var("PGUSER").ok())
        .unwrap_or_else(|| "postgres".to_string());
    let password = c
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .or_else(|| std::env::var("PGPASSWORD").ok());
    Ok(ConnInfo {
        host,
        port,
        user,
        password,
        application_name: c
            .get_application_name()
            .unwrap_or("walreceiver")
            .to_string(),
    })
}

/// The status updates, written by the receiving thread and the apply watcher alike.
struct Feedback {
    /// The socket, and the apply capacity last reported on it.
    socket: Mutex<(TcpStream, (u64, u64))>,
    last: Mutex<Instant>,
    /// The standby's snapshots, for hot-standby feedback.
    storage: Arc<Storage>,
    /// `hot_standby_feedback` is read at each status update (a reload changes it).
    config: Arc<Config>,
    /// The last hot-standby feedback sent on this connection: its position (0: released) and
    /// when; `None` before the first.
    hs_sent: Mutex<Option<(u64, Instant)>>,
}

/// Appends one CopyData message with `body` to `msg` (postgres-protocol's framing).
///
/// # Errors
/// A body longer than a message may be (never for a status message).
fn put_copy_data(msg: &mut BytesMut, body: &[u8]) -> std::io::Result<()> {
    postgres_protocol::message::frontend::CopyData::new(body)?.write(msg);
    Ok(())
}

impl Feedback {
    /// Sends a standby status update: written, flushed, applied (PostgreSQL's
    /// `XLogWalRcvSendReply`).
    ///
    /// The positions are read with the socket held: the receiving thread and the apply
    /// watcher both send, and a message built before the other's but written after it would
    /// take the primary's view of this standby back (a `remote_apply` commit then waits for
    /// the next periodic update).
    ///
    /// When replay's apply capacity changed since it was last reported on this connection,
    /// walnut's apply capacity message follows in the same write: `c`, bytes per second (u64),
    /// records per second (u64), send time (i64, µs since 2000-01-01); 25 bytes. Only a walnut
    /// primary gets it: the system identifiers matched, so the primary is the one this standby
    /// was copied from.
    fn send(&self, rec: &Recovery, reply: bool) -> std::io::Result<()> {
        let mut guard = self.socket.lock();
        let (socket, reported) = &mut *guard;
        let (write, flush) = rec.received();
        let apply = rec.replay_lsn().min(flush);
        let mut body = BytesMut::with_capacity(34);
        body.put_u8(b'r');
        body.put_u64(write.0);
        body.put_u64(flush.0);
        body.put_u64(apply.0);
        body.put_i64(now_timestamp());
        body.put_u8(u8::from(reply));
        let mut msg = BytesMut::with_capacity(2 * (body.len() + 5));
        put_copy_data(&mut msg, &body)?;
        if let Some(lsn) = self.hs_feedback_due() {
            // PostgreSQL's layout (`XLogWalRcvSendHSFeedback`); the position goes where its
            // xmin and epoch go (`protocol::walsender` says why).
            body.clear();
            body.put_u8(b'h');
            body.put_i64(now_timestamp());
            for _ in 0..2 {
                body.put_u32(lsn as u32);
                body.put_u32((lsn >> 32) as u32);
            }
            put_copy_data(&mut msg, &body)?;
        }
        let capacity = rec.apply_capacity();
        if capacity != *reported {
            body.clear();
            body.put_u8(b'c');
            body.put_u64(capacity.0);
            body.put_u64(capacity.1);
            body.put_i64(now_timestamp());
            put_copy_data(&mut msg, &body)?;
            *reported = capacity;
        }
        socket.write_all(&msg)?;
        *self.last.lock() = Instant::now();
        Ok(())
    }

    /// The position to send as hot-standby feedback now, if one is due (PostgreSQL's
    /// `XLogWalRcvSendHSFeedback`): with `hot_standby_feedback` on, at most every
    /// [`HS_FEEDBACK_GAP`], the oldest position the standby's queries need, when it moved;
    /// once turned off, 0 (release), once. Never less than the last position sent on this
    /// connection: a statement may record a replay position older than one already sent, but
    /// it reads its CSN after that send's scan, so it sees every commit up to the position
    /// sent (storage DESIGN.md, "Hot standby feedback"). Called with the socket held, so
    /// messages go out in the order their positions were read.
    fn hs_feedback_due(&self) -> Option<u64> {
        let on = self.config.settings().bool(&guc::HOT_STANDBY_FEEDBACK);
        let mut sent = self.hs_sent.lock();
        let last = match *sent {
            Some((last, at)) if on && last != 0 && at.elapsed() < HS_FEEDBACK_GAP => return None,
            Some((last, _)) => last,
            None => 0,
        };
        let lsn = if on {
            self.storage
                .xact
                .oldest_snapshot_lsn()
                .map_or(0, |l| l.max(last))
        } else {
            0
        };
        if lsn == last {
            return None;
        }
        *sent = Some((lsn, Instant::now()));
        Some(lsn)
    }
}

/// One connection's streaming, until it fails, the primary ends it, or the standby stops or
/// is promoted (`Ok`).
fn stream(
    storage: &Arc<Storage>,
    rec: &Arc<Recovery>,
    conninfo: &str,
    slot: Option<String>,
    interval: Duration,
    config: &Arc<Config>,
) -> Result<(), RecvError> {
    let ci = conn_info(conninfo)?;
    *rec.receiver.lock() = Some(ReceiverInfo {
        status: "starting",
        slot_name: slot.clone(),
        sender_host: ci.host.clone(),
        sender_port: ci.port,
        conninfo: hide_password(conninfo),
        ..Default::default()
    });
    let mut c = ReplClient::connect(&ci)?;
    let rows = c.query("IDENTIFY_SYSTEM")?;
    let sysid = rows
        .first()
        .and_then(|r| r.first().cloned().flatten())
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| RecvError::Stream("IDENTIFY_SYSTEM returned no system identifier".into()))?;
    if sysid != storage.system_identifier {
        return Err(RecvError::Config(format!(
            "database system identifier differs between the primary and standby\nDETAIL: The primary's identifier is {sysid}, the standby's identifier is {}.",
            storage.system_identifier
        )));
    }
    let start = rec.received().1;
    let primary_tli = rows
        .first()
        .and_then(|r| r.get(1).cloned().flatten())
        .and_then(|s| s.parse::<u32>().ok())
        .ok_or_else(|| RecvError::Stream("IDENTIFY_SYSTEM returned no timeline".into()))?;
    follow_timeline(storage, &mut c, primary_tli, start)?;
    let slot_clause = slot
        .as_deref()
        .map(|s| format!("SLOT \"{}\" ", s.replace('"', "\"\"")))
        .unwrap_or_default();
    c.send_query(&format!(
        "START_REPLICATION {slot_clause}PHYSICAL {start} TIMELINE {primary_tli}"
    ))?;
    loop {
        let m = c.read()?;
        if let Some(e) = ReplClient::error_of(&m) {
            return Err(e.into());
        }
        if m.tag == b'W' {
            break;
        }
    }
    tracing::info!("started streaming WAL from primary at {start} on timeline {primary_tli}");
    if let Some(info) = rec.receiver.lock().as_mut() {
        info.status = "streaming";
        info.receive_start_lsn = start;
    }
    let fb = Arc::new(Feedback {
        socket: Mutex::new((c.writer()?, (0, 0))),
        last: Mutex::new(Instant::now()),
        storage: storage.clone(),
        config: config.clone(),
        hs_sent: Mutex::new(None),
    });
    // The apply watcher: a status update each time replay advances.
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (fb, rec, done) = (fb.clone(), rec.clone(), done.clone());
        std::thread::Builder::new()
            .name("walreceiver feedback".into())
            .spawn(move || {
                let mut sent = rec.replay_lsn();
                while !done.load(Ordering::Acquire) && !rec.stopping() {
                    let now = rec.wait_applied(sent, POLL);
                    if now > sent && fb.send(&rec, false).is_err() {
                        return;
                    }
                    sent = now;
                }
            })
            .map_err(ClientError::Io)?
    };
    // The first status update at once (PostgreSQL's walreceiver sends one when streaming
    // starts): the primary's view and the slot's restart_lsn start from here.
    fb.send(rec, false).map_err(ClientError::Io)?;
    let r = receive(storage, rec, &mut c, &fb, start, interval);
    done.store(true, Ordering::Release);
    let _ = watcher.join();
    r
}

fn receive(
    storage: &Storage,
    rec: &Recovery,
    c: &mut ReplClient,
    fb: &Feedback,
    start: Lsn,
    interval: Duration,
) -> Result<(), RecvError> {
    // On the timeline `follow_timeline` adopted: the primary's.
    let mut wal = ReceivedWal::new(
        storage.vfs.clone(),
        storage.dir.join("wal"),
        storage.timeline(),
        start,
    )
    .map_err(|e| RecvError::Stream(e.to_string()))?;
    c.set_read_timeout(Some(POLL))?;
    loop {
        if rec.stopping() || rec.promote_requested() {
            flush(rec, &mut wal, fb)?;
            let _ = c.copy_done();
            *rec.receiver.lock() = None;
            return Ok(());
        }
        let m = match c.buffered()? {
            Some(m) => m,
            None => {
                // Every message of the last read is written: say so (a `remote_write`
                // commit needs no more), then make them durable before reading more (one
                // flush per read, up to the read buffer's size). PostgreSQL's
                // `WalReceiverMain` sends the same two replies around `XLogWalRcvFlush`.
                if wal.write_lsn() > wal.flush_lsn() {
                    fb.send(rec, false).map_err(ClientError::Io)?;
                    flush(rec, &mut wal, fb)?;
                }
                match c.read() {
                    Ok(m) => m,
                    Err(ClientError::Io(e))
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        if !interval.is_zero() && fb.last.lock().elapsed() >= interval {
                            fb.send(rec, false).map_err(ClientError::Io)?;
                        }
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        match m.tag {
            b'd' => {
                let mut b = &m.body[..];
                match b.first() {
                    Some(b'w') if b.len() >= 25 => {
                        b.advance(1);
                        let at = Lsn(b.get_u64());
                        let end = Lsn(b.get_u64());
                        let sent = b.get_i64();
                        wal.write(at, b)
                            .map_err(|e| RecvError::Stream(e.to_string()))?;
                        rec.set_received(wal.write_lsn(), wal.flush_lsn());
                        note_message(rec, sent, end);
                    }
                    Some(b'k') if b.len() >= 18 => {
                        b.advance(1);
                        let end = Lsn(b.get_u64());
                        let sent = b.get_i64();
                        let reply = b.get_u8() != 0;
                        note_message(rec, sent, end);
                        if reply {
                            flush(rec, &mut wal, fb)?;
                        }
                    }
                    _ => {
                        return Err(RecvError::Stream(format!(
                            "unexpected replication message of {} bytes, type {:?}",
                            b.len(),
                            b.first().map(|&t| t as char)
                        )))
                    }
                }
            }
            b'c' => {
                flush(rec, &mut wal, fb)?;
                return Err(RecvError::Stream(
                    "replication terminated by primary server".into(),
                ));
            }
            b'E' => {
                flush(rec, &mut wal, fb)?;
                return Err(ReplClient::error_of(&m)
                    .map(RecvError::Client)
                    .unwrap_or_else(|| RecvError::Stream("error".into())));
            }
            // Notices, ParameterStatus.
            _ => {}
        }
    }
}

/// A primary on another timeline may be followed only if its history contains this standby's
/// timeline with a switch point at or after `start`, the end of the standby's WAL (PostgreSQL's
/// `WalRcvFetchTimeLineHistoryFiles` and the check in `rescanLatestTimeLine`); the history file
/// is then kept and the timeline adopted. Otherwise the two WALs diverged: streaming would
/// splice the primary's WAL onto a history it does not share.
///
/// # Errors
/// A `Config` error naming both timelines and the fork point (a new base backup is needed);
/// the primary's errors.
fn follow_timeline(
    storage: &Storage,
    c: &mut ReplClient,
    primary_tli: u32,
    start: Lsn,
) -> Result<(), RecvError> {
    use walnut_storage::timeline::{fork_point, parse_history, write_history};
    let mine = storage.timeline();
    if primary_tli == mine {
        return Ok(());
    }
    let rows = c.query(&format!("TIMELINE_HISTORY {primary_tli}"))?;
    let text = rows
        .first()
        .and_then(|r| r.get(1).cloned().flatten())
        .unwrap_or_default();
    let history = parse_history(&text).map_err(|e| RecvError::Stream(e.to_string()))?;
    match fork_point(&history, mine) {
        Some(fork) if start <= fork => {
            write_history(&*storage.vfs, &storage.dir.join("wal"), primary_tli, &text)
                .map_err(|e| RecvError::Stream(e.to_string()))?;
            storage.set_timeline(primary_tli);
            tracing::info!("following the primary's timeline {primary_tli}, which forked off timeline {mine} at {fork}");
            Ok(())
        }
        Some(fork) => Err(RecvError::Config(format!(
            "new timeline {primary_tli} forked off current database system timeline {mine} before current recovery point {start}\nDETAIL: The primary's timeline {primary_tli} left timeline {mine} at {fork}; this standby has WAL of timeline {mine} past that point. Make it a standby again with a new base backup."
        ))),
        None if primary_tli < mine => Err(RecvError::Config(format!(
            "highest timeline {primary_tli} of the primary is behind recovery timeline {mine}"
        ))),
        None => Err(RecvError::Config(format!(
            "the primary's timeline {primary_tli} does not descend from this standby's timeline {mine}"
        ))),
    }
}

/// Makes the received WAL durable, lets replay read it, and reports it.
fn flush(rec: &Recovery, wal: &mut ReceivedWal, fb: &Feedback) -> Result<(), RecvError> {
    let flushed = wal.flush();
    rec.set_received(wal.write_lsn(), flushed);
    fb.send(rec, false).map_err(ClientError::Io)?;
    Ok(())
}

fn note_message(rec: &Recovery, sent: i64, end: Lsn) {
    if let Some(info) = rec.receiver.lock().as_mut() {
        info.last_msg_send_time = Some(sent);
        info.last_msg_receipt_time = Some(now_timestamp());
        info.latest_end_lsn = info.latest_end_lsn.max(end);
    }
}

/// `primary_conninfo` as `pg_stat_wal_receiver` shows it: a password replaced by `********`.
fn hide_password(conninfo: &str) -> String {
    conninfo
        .split_whitespace()
        .map(|kv| match kv.split_once('=') {
            Some(("password", _)) => "password=********".to_string(),
            _ => kv.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_parses_and_hides_the_password() {
        let c = conn_info("host=127.0.0.1 port=5999 user=rep password=s3cret application_name=s1")
            .unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.user.as_str()),
            ("127.0.0.1", 5999, "rep")
        );
        assert_eq!(c.password.as_deref(), Some("s3cret"));
        assert_eq!(c.application_name, "s1");
        assert_eq!(
            hide_password("host=h password=s3cret user=u"),
            "host=h password=******** user=u"
        );
        assert!(conn_info("host='unterminated").is_err());
    }
}
