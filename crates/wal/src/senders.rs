//! The walsenders' shared state (PostgreSQL's `WalSndCtl` in `replication/walsender.c`): one
//! entry per connection streaming this server's WAL, for `max_wal_senders` and the view
//! `pg_stat_replication`, and the lag tracker behind its `write_lag`, `flush_lag` and
//! `replay_lag`.
//!
//! The streaming itself (the protocol, reading segments) is the front end's; the WAL only keeps
//! what every session must be able to see.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Where a walsender is (PostgreSQL's `WalSndState`, as `pg_stat_replication.state` names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalSndState {
    /// Connected, no START_REPLICATION yet.
    Startup = 0,
    /// Streaming, behind the flush position it started at.
    Catchup = 1,
    /// Streaming, caught up once.
    Streaming = 2,
    /// Ending (CopyDone, shutdown).
    Stopping = 3,
}

impl WalSndState {
    /// The name `pg_stat_replication.state` shows.
    pub fn name(self) -> &'static str {
        match self {
            WalSndState::Startup => "startup",
            WalSndState::Catchup => "catchup",
            WalSndState::Streaming => "streaming",
            WalSndState::Stopping => "stopping",
        }
    }

    fn from_u8(v: u8) -> WalSndState {
        match v {
            1 => WalSndState::Catchup,
            2 => WalSndState::Streaming,
            3 => WalSndState::Stopping,
            _ => WalSndState::Startup,
        }
    }
}

/// Samples kept per position for the lag of that position (PostgreSQL's `LAG_TRACKER_BUFFER_SIZE`
/// is 8192 for all three); the oldest is dropped when full, which only makes a lag read low.
const LAG_SAMPLES: usize = 1024;

/// The lag of one of the standby's positions (write, flush, replay): the time from when this
/// server sent the WAL at an LSN until the standby reported that position past it (PostgreSQL's
/// `LagTrackerRead`, without its interpolation: the lag is that of the newest sample passed).
#[derive(Debug, Default)]
struct LagReader {
    samples: VecDeque<(u64, Instant)>,
    lag: Option<Duration>,
}

impl LagReader {
    fn sent(&mut self, lsn: u64, at: Instant) {
        if self.samples.back().is_some_and(|&(l, _)| l >= lsn) {
            return;
        }
        if self.samples.len() == LAG_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((lsn, at));
    }

    /// The standby reports `pos` at `now`, having been sent everything before `sent`.
    fn reported(&mut self, pos: u64, sent: u64, now: Instant) {
        let mut passed = None;
        while let Some(&(lsn, at)) = self.samples.front() {
            if lsn > pos {
                break;
            }
            passed = Some(at);
            self.samples.pop_front();
        }
        match passed {
            Some(at) => self.lag = Some(now.saturating_duration_since(at)),
            // Caught up with nothing new: no lag to show (PostgreSQL shows NULL once idle).
            None if pos >= sent => self.lag = None,
            None => {}
        }
    }
}

/// One walsender's shared entry.
#[derive(Debug)]
pub struct WalSnd {
    /// Its backend's pid (`pg_backend_pid()` of the connection).
    pub pid: i32,
    /// The role it connected as.
    pub user: String,
    /// The client's `application_name`.
    pub application_name: String,
    /// The client's address (`None` for a Unix socket).
    pub client_addr: Option<IpAddr>,
    /// The client's port.
    pub client_port: u16,
    /// When the connection started.
    pub backend_start: SystemTime,
    state: AtomicU8,
    sent: AtomicU64,
    write: AtomicU64,
    flush: AtomicU64,
    replay: AtomicU64,
    /// µs since the Unix epoch of the last status update, 0 before the first.
    reply_time_us: AtomicI64,
    /// Lags of write, flush and replay.
    lags: Mutex<[LagReader; 3]>,
}

/// What `pg_stat_replication` shows of one walsender at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct WalSndSnapshot {
    /// See [`WalSnd::pid`].
    pub pid: i32,
    /// See [`WalSnd::user`].
    pub user: String,
    /// See [`WalSnd::application_name`].
    pub application_name: String,
    /// See [`WalSnd::client_addr`].
    pub client_addr: Option<IpAddr>,
    /// See [`WalSnd::client_port`].
    pub client_port: u16,
    /// See [`WalSnd::backend_start`].
    pub backend_start: SystemTime,
    /// Where it is.
    pub state: WalSndState,
    /// End of the WAL sent, bytes (LSN).
    pub sent_lsn: u64,
    /// The standby's last reported write position (0 before its first report).
    pub write_lsn: u64,
    /// Its flush position.
    pub flush_lsn: u64,
    /// Its replay (apply) position.
    pub replay_lsn: u64,
    /// Lags of the three (`None`: not measured, or caught up and idle).
    pub write_lag: Option<Duration>,
    /// See `write_lag`.
    pub flush_lag: Option<Duration>,
    /// See `write_lag`.
    pub replay_lag: Option<Duration>,
    /// The last status update's time, µs since the Unix epoch, if any.
    pub reply_time_us: Option<i64>,
}

impl WalSnd {
    /// A new entry in state `startup`.
    pub fn new(
        pid: i32,
        user: String,
        application_name: String,
        client_addr: Option<IpAddr>,
        client_port: u16,
    ) -> WalSnd {
        WalSnd {
            pid,
            user,
            application_name,
            client_addr,
            client_port,
            backend_start: SystemTime::now(),
            state: AtomicU8::new(WalSndState::Startup as u8),
            sent: AtomicU64::new(0),
            write: AtomicU64::new(0),
            flush: AtomicU64::new(0),
            replay: AtomicU64::new(0),
            reply_time_us: AtomicI64::new(0),
            lags: Mutex::new(Default::default()),
        }
    }

    /// Sets the state.
    pub fn set_state(&self, s: WalSndState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// The state.
    pub fn state(&self) -> WalSndState {
        WalSndState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Everything before `lsn` has been sent (at `now`, for the lags).
    pub fn sent(&self, lsn: u64, now: Instant) {
        self.sent.fetch_max(lsn, Ordering::Relaxed);
        for r in self.lags.lock().iter_mut() {
            r.sent(lsn, now);
        }
    }

    /// End of the WAL sent, bytes.
    pub fn sent_lsn(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// A standby status update: its write, flush and apply positions, received at `now`
    /// (`reply_time_us` µs since the Unix epoch). A position the standby reports lower than
    /// before (it restarted) is taken as reported.
    pub fn reply(&self, write: u64, flush: u64, apply: u64, now: Instant, reply_time_us: i64) {
        self.write.store(write, Ordering::Relaxed);
        self.flush.store(flush, Ordering::Relaxed);
        self.replay.store(apply, Ordering::Relaxed);
        self.reply_time_us.store(reply_time_us, Ordering::Relaxed);
        let sent = self.sent_lsn();
        let mut lags = self.lags.lock();
        for (r, pos) in lags.iter_mut().zip([write, flush, apply]) {
            r.reported(pos, sent, now);
        }
    }

    /// What `pg_stat_replication` shows now.
    pub fn snapshot(&self) -> WalSndSnapshot {
        let lags = self.lags.lock();
        let reply = self.reply_time_us.load(Ordering::Relaxed);
        WalSndSnapshot {
            pid: self.pid,
            user: self.user.clone(),
            application_name: self.application_name.clone(),
            client_addr: self.client_addr,
            client_port: self.client_port,
            backend_start: self.backend_start,
            state: self.state(),
            sent_lsn: self.sent_lsn(),
            write_lsn: self.write.load(Ordering::Relaxed),
            flush_lsn: self.flush.load(Ordering::Relaxed),
            replay_lsn: self.replay.load(Ordering::Relaxed),
            write_lag: lags[0].lag,
            flush_lag: lags[1].lag,
            replay_lag: lags[2].lag,
            reply_time_us: (reply != 0).then_some(reply),
        }
    }
}

/// Every walsender of this server.
#[derive(Debug, Default)]
pub struct WalSenders {
    list: Mutex<Vec<Arc<WalSnd>>>,
}

/// A walsender's place in [`WalSenders`]; dropping it removes the entry.
#[derive(Debug)]
pub struct Registration {
    senders: Arc<WalSenders>,
    snd: Arc<WalSnd>,
}

impl Registration {
    /// The entry.
    pub fn snd(&self) -> &Arc<WalSnd> {
        &self.snd
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.senders
            .list
            .lock()
            .retain(|s| !Arc::ptr_eq(s, &self.snd));
    }
}

impl WalSenders {
    /// Adds `snd` unless `max` walsenders are already registered (`max_wal_senders`).
    ///
    /// # Errors
    /// `Err(n)`, the number registered, when there is no room.
    pub fn register(
        self: &Arc<Self>,
        max: usize,
        snd: WalSnd,
    ) -> std::result::Result<Registration, usize> {
        let mut list = self.list.lock();
        if list.len() >= max {
            return Err(list.len());
        }
        let snd = Arc::new(snd);
        list.push(snd.clone());
        Ok(Registration {
            senders: self.clone(),
            snd,
        })
    }

    /// Every walsender, as `pg_stat_replication` shows it, by pid.
    pub fn snapshot(&self) -> Vec<WalSndSnapshot> {
        let mut v: Vec<_> = self.list.lock().iter().map(|s| s.snapshot()).collect();
        v.sort_by_key(|s| s.pid);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_time_since_the_newest_sample_the_standby_passed() {
        let s = WalSnd::new(1, "u".into(), "a".into(), None, 0);
        let t0 = Instant::now();
        s.sent(100, t0);
        s.sent(200, t0 + Duration::from_millis(10));
        s.reply(150, 100, 0, t0 + Duration::from_millis(30), 1);
        let v = s.snapshot();
        assert_eq!(v.write_lag, Some(Duration::from_millis(30)));
        assert_eq!(v.flush_lag, Some(Duration::from_millis(30)));
        assert_eq!(v.replay_lag, None);
        s.reply(200, 200, 200, t0 + Duration::from_millis(50), 2);
        let v = s.snapshot();
        assert_eq!(v.write_lag, Some(Duration::from_millis(40)));
        assert_eq!(v.replay_lag, Some(Duration::from_millis(40)));
        assert_eq!((v.write_lsn, v.flush_lsn, v.replay_lsn), (200, 200, 200));
        // Caught up and idle: no lag to show.
        s.reply(200, 200, 200, t0 + Duration::from_millis(90), 3);
        assert_eq!(s.snapshot().write_lag, None);
    }

    #[test]
    fn registration_is_bounded_and_ends_with_its_guard() {
        let all = Arc::new(WalSenders::default());
        let a = all
            .register(2, WalSnd::new(1, String::new(), String::new(), None, 0))
            .unwrap();
        let b = all
            .register(2, WalSnd::new(2, String::new(), String::new(), None, 0))
            .unwrap();
        assert_eq!(
            all.register(2, WalSnd::new(3, String::new(), String::new(), None, 0))
                .unwrap_err(),
            2
        );
        drop(a);
        assert_eq!(all.snapshot().len(), 1);
        let _c = all
            .register(2, WalSnd::new(3, String::new(), String::new(), None, 0))
            .unwrap();
        assert_eq!(
            all.snapshot().iter().map(|s| s.pid).collect::<Vec<_>>(),
            vec![2, 3]
        );
        drop(b);
    }
}
