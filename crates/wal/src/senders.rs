//! The walsenders' shared state (PostgreSQL's `WalSndCtl` in `replication/walsender.c`): one
//! entry per connection streaming this server's WAL, for `max_wal_senders` and the view
//! `pg_stat_replication`, and the lag tracker behind its `write_lag`, `flush_lag` and
//! `replay_lag`; the synchronous commits waiting for standbys (`synchronous_standby_names`),
//! and the commits slowed by `max_standby_apply_lag` (walnut's: a synchronous standby's replay
//! headroom, enforced).
//!
//! The streaming itself (the protocol, reading segments) is the front end's; the WAL only keeps
//! what every session must be able to see.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
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

/// Positions sent, sampled for the rate at which WAL goes to a standby: samples at least
/// [`RATE_SAMPLE_EVERY`] apart, at most [`RATE_SAMPLES`] of them.
#[derive(Debug, Default)]
struct RateWindow {
    samples: VecDeque<(Instant, u64)>,
}

/// See [`RateWindow`].
const RATE_SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// See [`RateWindow`]: 6.4 s of samples while WAL flows.
const RATE_SAMPLES: usize = 64;
/// The rate is measured over at least this long once the window holds it.
const RATE_SPAN: Duration = Duration::from_secs(1);

impl RateWindow {
    fn note(&mut self, now: Instant, pos: u64) {
        if self
            .samples
            .back()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) < RATE_SAMPLE_EVERY)
        {
            return;
        }
        if self.samples.len() == RATE_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back((now, pos));
    }

    /// Bytes per second from the youngest sample at least [`RATE_SPAN`] old (the oldest if
    /// none is) to `pos` at `now`; 0 without a sample, or when the oldest is younger than a
    /// quarter of the span (a rate over a few ms of a new connection means nothing). Idle,
    /// it decays towards 0 as the sample ages.
    fn rate(&self, now: Instant, pos: u64) -> u64 {
        let from = self
            .samples
            .iter()
            .rev()
            .find(|&&(t, _)| now.saturating_duration_since(t) >= RATE_SPAN)
            .or(self.samples.front());
        let Some(&(t, p)) = from else { return 0 };
        let secs = now.saturating_duration_since(t).as_secs_f64();
        if secs < RATE_SPAN.as_secs_f64() / 4.0 {
            return 0;
        }
        (pos.saturating_sub(p) as f64 / secs) as u64
    }
}

/// What a walsender records of each send, under one lock: the lags' samples and the rate's.
#[derive(Debug, Default)]
struct SentTracking {
    /// Lags of write, flush and replay.
    lags: [LagReader; 3],
    /// WAL sent, sampled for `incoming_bytes_per_sec`.
    rate: RateWindow,
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
    /// The lags' and the incoming rate's samples.
    lags: Mutex<SentTracking>,
    /// The standby's apply capacity as it last reported it (walnut's `c` message): bytes
    /// and records per second it replays while it has WAL to replay; 0 until reported.
    apply_bytes_per_sec: AtomicU64,
    apply_records_per_sec: AtomicU64,
    /// The xmin this walsender holds for the standby's `hot_standby_feedback`, 0 for none
    /// (`pg_stat_replication.backend_xmin`).
    xmin: AtomicU64,
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
    /// WAL sent to the standby per second, bytes, over the last second or more.
    pub incoming_bytes_per_sec: u64,
    /// The standby's apply capacity: WAL bytes it replays per second while behind (`None`:
    /// not reported; a PostgreSQL client never reports it).
    pub apply_bytes_per_sec: Option<u64>,
    /// See `apply_bytes_per_sec`: WAL records per second.
    pub apply_records_per_sec: Option<u64>,
    /// The xmin held for the standby's `hot_standby_feedback` (`None`: no feedback held).
    pub backend_xmin: Option<u64>,
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
            lags: Mutex::new(SentTracking::default()),
            apply_bytes_per_sec: AtomicU64::new(0),
            apply_records_per_sec: AtomicU64::new(0),
            xmin: AtomicU64::new(0),
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
        let mut t = self.lags.lock();
        for r in t.lags.iter_mut() {
            r.sent(lsn, now);
        }
        t.rate.note(now, lsn);
    }

    /// The standby's last reported flush position (0 before its first report).
    pub fn flush_lsn(&self) -> u64 {
        self.flush.load(Ordering::Relaxed)
    }

    /// The standby's report of its apply capacity: WAL bytes and records it replays per
    /// second while behind (0: it does not know yet).
    pub fn set_apply_capacity(&self, bytes_per_sec: u64, records_per_sec: u64) {
        self.apply_bytes_per_sec
            .store(bytes_per_sec, Ordering::Relaxed);
        self.apply_records_per_sec
            .store(records_per_sec, Ordering::Relaxed);
    }

    /// Sets the xmin held for the standby's `hot_standby_feedback` (`None`: released), for
    /// `pg_stat_replication.backend_xmin`.
    pub fn set_xmin(&self, xmin: Option<u64>) {
        self.xmin.store(xmin.unwrap_or(0), Ordering::Relaxed);
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
        for (r, pos) in lags.lags.iter_mut().zip([write, flush, apply]) {
            r.reported(pos, sent, now);
        }
    }

    /// What `pg_stat_replication` shows now.
    pub fn snapshot(&self) -> WalSndSnapshot {
        let lags = self.lags.lock();
        let reply = self.reply_time_us.load(Ordering::Relaxed);
        let known = |v: &AtomicU64| Some(v.load(Ordering::Relaxed)).filter(|&v| v > 0);
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
            write_lag: lags.lags[0].lag,
            flush_lag: lags.lags[1].lag,
            replay_lag: lags.lags[2].lag,
            reply_time_us: (reply != 0).then_some(reply),
            incoming_bytes_per_sec: lags.rate.rate(Instant::now(), self.sent_lsn()),
            apply_bytes_per_sec: known(&self.apply_bytes_per_sec),
            apply_records_per_sec: known(&self.apply_records_per_sec),
            backend_xmin: known(&self.xmin),
        }
    }
}

/// How `synchronous_standby_names` picks the standbys a commit waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMethod {
    /// `FIRST n (...)` (and a plain list: `FIRST 1`): the `n` connected standbys listed
    /// earliest.
    First,
    /// `ANY n (...)`: any `n` of the listed standbys (quorum).
    Any,
}

/// `synchronous_standby_names`, parsed (PostgreSQL's `syncrep_gram.y`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncStandbys {
    /// FIRST or ANY.
    pub method: SyncMethod,
    /// How many standbys must confirm.
    pub num: usize,
    /// `application_name`s, in priority order; `*` matches any.
    pub names: Vec<String>,
}

impl SyncStandbys {
    /// Parses `synchronous_standby_names`: empty (no synchronous replication), `a, b`,
    /// `FIRST n (a, b)`, `ANY n (a, b)`, `n (a, b)` (FIRST), with `*` and double-quoted names.
    ///
    /// # Errors
    /// A message saying what is wrong.
    pub fn parse(s: &str) -> std::result::Result<Option<SyncStandbys>, String> {
        let t = s.trim();
        if t.is_empty() {
            return Ok(None);
        }
        let (method, rest) = match t.split_once(char::is_whitespace) {
            Some((w, rest)) if w.eq_ignore_ascii_case("FIRST") => (Some(SyncMethod::First), rest),
            Some((w, rest)) if w.eq_ignore_ascii_case("ANY") => (Some(SyncMethod::Any), rest),
            _ => (None, t),
        };
        let rest = rest.trim();
        let (num, list) = match rest.find('(') {
            Some(open) if rest.ends_with(')') => {
                let n = rest[..open].trim();
                let num: usize = n
                    .parse()
                    .map_err(|_| format!("invalid number of synchronous standbys \"{n}\""))?;
                (Some(num), &rest[open + 1..rest.len() - 1])
            }
            Some(_) => return Err("unterminated standby list".into()),
            None if method.is_some() => return Err("FIRST and ANY need \"n (name, ...)\"".into()),
            None => (None, rest),
        };
        let names: Vec<String> = list
            .split(',')
            .map(|n| {
                let n = n.trim();
                match n.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
                    Some(q) => q.to_string(),
                    None => n.to_ascii_lowercase(),
                }
            })
            .collect();
        if names.iter().any(String::is_empty) {
            return Err("a standby name is empty".into());
        }
        let num = num.unwrap_or(1);
        if num == 0 {
            return Err("number of synchronous standbys (0) must be greater than zero".into());
        }
        Ok(Some(SyncStandbys {
            method: method.unwrap_or(SyncMethod::First),
            num,
            names,
        }))
    }

    /// A walsender's priority under this setting (1 = first listed), if it is a candidate.
    fn priority(&self, application_name: &str) -> Option<usize> {
        self.names
            .iter()
            .position(|n| n == "*" || n == application_name)
            .map(|i| i + 1)
    }
}

/// Which standby position a synchronous commit waits for (`synchronous_commit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncLevel {
    /// `remote_write`: the standbys wrote it.
    Write,
    /// `on`: they flushed it.
    Flush,
    /// `remote_apply`: they replayed it.
    Apply,
}

/// How a wait for synchronous standbys ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncWait {
    /// The required standbys confirmed the position.
    Released,
    /// No synchronous standbys are configured (or the setting was emptied meanwhile).
    NotRequired,
    /// The session's cancel flag was set: the commit stands locally, unconfirmed.
    Canceled,
}

/// A walsender's part in synchronous replication (`pg_stat_replication.sync_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncState {
    /// Not a candidate.
    Async,
    /// A FIRST candidate not among the first `n` connected.
    Potential,
    /// One of the first `n`: commits wait for it.
    Sync,
    /// An ANY candidate.
    Quorum,
}

impl SyncState {
    /// The name `pg_stat_replication.sync_state` shows.
    pub fn name(self) -> &'static str {
        match self {
            SyncState::Async => "async",
            SyncState::Potential => "potential",
            SyncState::Sync => "sync",
            SyncState::Quorum => "quorum",
        }
    }
}

/// Every walsender of this server, and the synchronous commits waiting for them (PostgreSQL's
/// `syncrep.c`).
#[derive(Debug, Default)]
pub struct WalSenders {
    list: Mutex<Vec<Arc<WalSnd>>>,
    sync: Mutex<Option<SyncStandbys>>,
    /// `sync` is set: read without a lock by every commit, so that a server without
    /// synchronous standbys takes no lock for them on its commit path.
    sync_configured: AtomicBool,
    /// The synchronous commits waiting, each parked on its own thread (PostgreSQL's
    /// `SyncRepQueue`, each backend on its latch). Every reply, registration change and
    /// setting change looks under this lock and unparks only those it released, not all:
    /// with replies coming several times per commit group, waking every waiter each time
    /// costs more than the waits. Lock order: `waiting`, then `list` and `sync`.
    waiting: Mutex<Vec<Waiter>>,
    /// Ids of [`Waiter`]s.
    next_waiter: AtomicU64,
    /// `max_standby_apply_lag`, ms (0: off).
    max_apply_lag_ms: AtomicU64,
}

/// A commit waiting for synchronous standbys.
#[derive(Debug)]
struct Waiter {
    id: u64,
    lsn: u64,
    kind: WaitKind,
    thread: std::thread::Thread,
}

/// What a [`Waiter`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitKind {
    /// Synchronous replication at this level.
    Sync(SyncLevel),
    /// `max_standby_apply_lag`: the synchronous standbys' replay headroom.
    ApplyLag,
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

impl Registration {
    /// The standby reported new positions ([`WalSnd::reply`]): wake the commits waiting for
    /// them.
    pub fn replied(&self) {
        self.senders.notify();
    }
}

impl Registration {
    /// Takes the entry out of the list (`max_wal_senders` counts it no more, and
    /// `pg_stat_replication` no longer shows it); idempotent, and done on drop as well. A
    /// connection calls it before its socket closes, as PostgreSQL's walsender leaves its
    /// slot before its process exits: a client that saw the connection end may connect again
    /// at once.
    pub fn release(&self) {
        self.senders
            .list
            .lock()
            .retain(|s| !Arc::ptr_eq(s, &self.snd));
        // The set of synchronous standbys may have changed.
        self.senders.notify();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.release();
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

    /// Every walsender, as `pg_stat_replication` shows it, by pid, with its sync priority
    /// and state.
    pub fn snapshot(&self) -> Vec<(WalSndSnapshot, usize, SyncState)> {
        let list = self.list.lock();
        let sync = self.sync.lock();
        let states = sync_states(&list, sync.as_ref());
        let mut v: Vec<_> = list
            .iter()
            .zip(states)
            .map(|(s, (prio, st))| (s.snapshot(), prio, st))
            .collect();
        v.sort_by_key(|s| s.0.pid);
        v
    }

    /// Sets `synchronous_standby_names` (at start-up and reload); waiting commits re-check
    /// (all are released when it becomes empty, as in PostgreSQL).
    pub fn set_sync(&self, cfg: Option<SyncStandbys>) {
        let mut sync = self.sync.lock();
        self.sync_configured.store(cfg.is_some(), Ordering::Release);
        *sync = cfg;
        drop(sync);
        self.notify();
    }

    /// Sets `max_standby_apply_lag`, ms (0: off; at start-up and reload); waiting commits
    /// re-check.
    pub fn set_max_apply_lag(&self, ms: u64) {
        self.max_apply_lag_ms.store(ms, Ordering::Relaxed);
        self.notify();
    }

    /// Unparks the waiting commits that are released now (or need wait no more: no
    /// synchronous standbys configured); each removes itself.
    fn notify(&self) {
        let waiting = self.waiting.lock();
        if waiting.is_empty() {
            return;
        }
        // Per kind: synchronous levels 0-2, then the apply-lag floor.
        let mut released: [Option<Option<u64>>; 4] = [None; 4];
        for w in waiting.iter() {
            let at = match w.kind {
                WaitKind::Sync(level) => {
                    *released[level as usize].get_or_insert_with(|| self.released_at(level))
                }
                WaitKind::ApplyLag => *released[3].get_or_insert_with(|| self.apply_lag_floor()),
            };
            if at.is_none_or(|p| p >= w.lsn) {
                w.thread.unpark();
            }
        }
    }

    /// The position up to which commits pass `max_standby_apply_lag` now. Each synchronous
    /// standby (`sync` or `quorum`) that reports its apply capacity has a floor: what it has
    /// replayed plus what it replays in `max_standby_apply_lag` at that capacity. As
    /// synchronous replication counts them: under `FIRST n` the least floor (every chosen
    /// standby must keep up); under `ANY n` the n-th highest (any n must), or the least when
    /// fewer than n report. `None`: commits pass (the setting is off, no synchronous standbys
    /// are configured, or none of them reports its capacity: a PostgreSQL client, or a walnut
    /// standby that has not measured it yet).
    ///
    /// The bound in openGauss's `recovery_time_target` terms: a commit returns only when its
    /// synchronous standbys could replay everything up to it within the setting, at the
    /// rate they say they replay.
    fn apply_lag_floor(&self) -> Option<u64> {
        let ms = self.max_apply_lag_ms.load(Ordering::Relaxed);
        if ms == 0 {
            return None;
        }
        let list = self.list.lock();
        let sync = self.sync.lock();
        let cfg = sync.as_ref()?;
        let states = sync_states(&list, Some(cfg));
        let mut floors: Vec<u64> = list
            .iter()
            .zip(states)
            .filter(|(_, (_, st))| matches!(st, SyncState::Sync | SyncState::Quorum))
            .filter_map(|(s, _)| {
                let cap = s.apply_bytes_per_sec.load(Ordering::Relaxed);
                (cap > 0).then(|| {
                    let headroom =
                        u64::try_from(u128::from(cap) * u128::from(ms) / 1000).unwrap_or(u64::MAX);
                    s.replay.load(Ordering::Relaxed).saturating_add(headroom)
                })
            })
            .collect();
        floors.sort_unstable_by(|a, b| b.cmp(a));
        match cfg.method {
            SyncMethod::Any if floors.len() >= cfg.num => Some(floors[cfg.num - 1]),
            _ => floors.last().copied(),
        }
    }

    /// The position up to which synchronous commits at `level` are confirmed now; `None` if
    /// no synchronous standbys are configured; `Some(0)` while too few are connected.
    fn released_at(&self, level: SyncLevel) -> Option<u64> {
        let list = self.list.lock();
        let sync = self.sync.lock();
        let cfg = sync.as_ref()?;
        let pos = |s: &WalSnd| match level {
            SyncLevel::Write => s.write.load(Ordering::Relaxed),
            SyncLevel::Flush => s.flush.load(Ordering::Relaxed),
            SyncLevel::Apply => s.replay.load(Ordering::Relaxed),
        };
        let states = sync_states(&list, Some(cfg));
        let mut chosen: Vec<u64> = list
            .iter()
            .zip(states)
            .filter(|(_, (_, st))| matches!(st, SyncState::Sync | SyncState::Quorum))
            .map(|(s, _)| pos(s))
            .collect();
        if chosen.len() < cfg.num {
            return Some(0);
        }
        // FIRST: the chosen are exactly n, all must confirm; ANY: the n-th best confirms.
        chosen.sort_unstable_by(|a, b| b.cmp(a));
        Some(chosen[cfg.num - 1])
    }

    /// Waits until the synchronous standbys confirm `lsn` at `level` (PostgreSQL's
    /// `SyncRepWaitForLSN`), or `cancel` is set (taken: the caller reports the commit as local
    /// only), or the setting is emptied. Blocks the calling thread (a session's own).
    pub fn wait_for(&self, lsn: u64, level: SyncLevel, cancel: &AtomicBool) -> SyncWait {
        self.wait_polling(lsn, level, cancel, Duration::from_millis(100))
    }

    /// `max_standby_apply_lag`: waits until every synchronous standby that reports its apply
    /// capacity could replay the WAL up to `lsn` (a commit's end) within the setting
    /// ([`WalSenders::apply_lag_floor`]), or `cancel` is set (taken), or the setting is
    /// turned off. `NotRequired` when it did not have to wait. Blocks the calling thread (a
    /// session's own); the committed transaction is already visible, so the wait holds no
    /// lock and slows only its own session.
    pub fn wait_for_apply_lag(&self, lsn: u64, cancel: &AtomicBool) -> SyncWait {
        if self.max_apply_lag_ms.load(Ordering::Relaxed) == 0
            || !self.sync_configured.load(Ordering::Acquire)
            || self.apply_lag_floor().is_none_or(|f| f >= lsn)
        {
            // Checked without the `waiting` lock first: while the standbys keep up, commits
            // do not queue on it.
            return SyncWait::NotRequired;
        }
        self.wait_until(lsn, WaitKind::ApplyLag, cancel, Duration::from_millis(100))
    }

    /// [`WalSenders::wait_for`], looking at `cancel` every `poll` (tests make it long, so
    /// that only an unpark can end the wait).
    fn wait_polling(
        &self,
        lsn: u64,
        level: SyncLevel,
        cancel: &AtomicBool,
        poll: Duration,
    ) -> SyncWait {
        if !self.sync_configured.load(Ordering::Acquire) {
            return SyncWait::NotRequired;
        }
        self.wait_until(lsn, WaitKind::Sync(level), cancel, poll)
    }

    /// The wait of [`WalSenders::wait_polling`] and [`WalSenders::wait_for_apply_lag`]:
    /// parked until `notify` finds `lsn` released for `kind`, looking at `cancel` every
    /// `poll`. An apply-lag wait that had to wait ends `Released`, one that did not
    /// `NotRequired`.
    fn wait_until(
        &self,
        lsn: u64,
        kind: WaitKind,
        cancel: &AtomicBool,
        poll: Duration,
    ) -> SyncWait {
        let check = || match kind {
            WaitKind::Sync(level) => match self.released_at(level) {
                None => Some(SyncWait::NotRequired),
                Some(p) if p >= lsn => Some(SyncWait::Released),
                Some(_) => None,
            },
            WaitKind::ApplyLag => match self.apply_lag_floor() {
                Some(p) if p < lsn => None,
                _ => Some(SyncWait::Released),
            },
        };
        let id = self.next_waiter.fetch_add(1, Ordering::Relaxed);
        {
            // Checked under the lock `notify` looks under: a release either came before
            // (seen here) or will find this waiter in the list.
            let mut waiting = self.waiting.lock();
            if let Some(done) = check() {
                return match kind {
                    WaitKind::ApplyLag => SyncWait::NotRequired,
                    WaitKind::Sync(_) => done,
                };
            }
            waiting.push(Waiter {
                id,
                lsn,
                kind,
                thread: std::thread::current(),
            });
        }
        let done = loop {
            if cancel.swap(false, Ordering::AcqRel) {
                break SyncWait::Canceled;
            }
            // The timeout only bounds how late a cancel is seen; releases unpark. An unpark
            // before the park makes it return at once.
            std::thread::park_timeout(poll);
            if let Some(done) = check() {
                break done;
            }
        };
        self.waiting.lock().retain(|w| w.id != id);
        done
    }
}

/// Each walsender's sync priority (0: not a candidate) and state under `cfg`, in `list`'s
/// order (PostgreSQL's `SyncRepGetCandidateStandbys`: only streaming walsenders count).
fn sync_states(list: &[Arc<WalSnd>], cfg: Option<&SyncStandbys>) -> Vec<(usize, SyncState)> {
    let Some(cfg) = cfg else {
        return vec![(0, SyncState::Async); list.len()];
    };
    let prio: Vec<usize> = list
        .iter()
        .map(|s| {
            if s.state() == WalSndState::Streaming {
                cfg.priority(&s.application_name).unwrap_or(0)
            } else {
                0
            }
        })
        .collect();
    match cfg.method {
        SyncMethod::Any => prio
            .iter()
            .map(|&p| {
                (
                    p,
                    if p > 0 {
                        SyncState::Quorum
                    } else {
                        SyncState::Async
                    },
                )
            })
            .collect(),
        SyncMethod::First => {
            // The n candidates of best priority (ties: the earlier connection).
            let mut order: Vec<usize> = (0..list.len()).filter(|&i| prio[i] > 0).collect();
            order.sort_by_key(|&i| prio[i]);
            let sync: Vec<usize> = order.iter().copied().take(cfg.num).collect();
            (0..list.len())
                .map(|i| match prio[i] {
                    0 => (0, SyncState::Async),
                    p if sync.contains(&i) => (p, SyncState::Sync),
                    p => (p, SyncState::Potential),
                })
                .collect()
        }
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
    fn synchronous_standby_names_parse_as_postgresql_reads_them() {
        let p = |s: &str| SyncStandbys::parse(s).unwrap();
        assert_eq!(p(""), None);
        assert_eq!(
            p("s1, \"S2\""),
            Some(SyncStandbys {
                method: SyncMethod::First,
                num: 1,
                names: vec!["s1".into(), "S2".into()]
            })
        );
        assert_eq!(p("ANY 2 (a, b, c)").unwrap().method, SyncMethod::Any);
        assert_eq!(p("first 2 (a,b)").unwrap().num, 2);
        assert_eq!(p("2 (a, b)").unwrap().method, SyncMethod::First);
        assert_eq!(p("*").unwrap().names, vec!["*".to_string()]);
        for bad in ["ANY a", "FIRST x (a)", "ANY 0 (a)", "FIRST 1 (a", "a,,b"] {
            assert!(SyncStandbys::parse(bad).is_err(), "{bad}");
        }
    }

    fn streaming(all: &Arc<WalSenders>, pid: i32, name: &str) -> Registration {
        let r = all
            .register(10, WalSnd::new(pid, "u".into(), name.into(), None, 0))
            .unwrap();
        r.snd().set_state(WalSndState::Streaming);
        r
    }

    #[test]
    fn first_and_any_choose_the_standbys_a_commit_waits_for() {
        let all = Arc::new(WalSenders::default());
        let a = streaming(&all, 1, "a");
        let b = streaming(&all, 2, "b");
        let _c = streaming(&all, 3, "c");
        let now = Instant::now();
        a.snd().reply(500, 400, 300, now, 1);
        b.snd().reply(900, 800, 700, now, 1);
        // No setting: commits do not wait.
        assert_eq!(all.released_at(SyncLevel::Flush), None);
        // FIRST 1 (b, a): b is the synchronous one, a a potential one.
        all.set_sync(SyncStandbys::parse("FIRST 1 (b, a)").unwrap());
        assert_eq!(all.released_at(SyncLevel::Flush), Some(800));
        assert_eq!(all.released_at(SyncLevel::Write), Some(900));
        let states: Vec<_> = all.snapshot().iter().map(|s| (s.1, s.2)).collect();
        assert_eq!(
            states,
            vec![
                (2, SyncState::Potential),
                (1, SyncState::Sync),
                (0, SyncState::Async)
            ]
        );
        // FIRST 2: both must confirm.
        all.set_sync(SyncStandbys::parse("FIRST 2 (b, a)").unwrap());
        assert_eq!(all.released_at(SyncLevel::Apply), Some(300));
        // ANY 1 of (a, b): the best one; ANY 3: too few candidates, nothing is released.
        all.set_sync(SyncStandbys::parse("ANY 1 (a, b)").unwrap());
        assert_eq!(all.released_at(SyncLevel::Flush), Some(800));
        all.set_sync(SyncStandbys::parse("ANY 3 (a, b)").unwrap());
        assert_eq!(all.released_at(SyncLevel::Flush), Some(0));
        // b leaves: FIRST 1 (b, a) falls back to a.
        all.set_sync(SyncStandbys::parse("FIRST 1 (b, a)").unwrap());
        drop(b);
        assert_eq!(all.released_at(SyncLevel::Flush), Some(400));
    }

    /// With the cancel poll an hour long, only `notify`'s unpark ends a wait: a reply ends
    /// the waits it releases and leaves the others waiting.
    #[test]
    fn a_reply_unparks_the_waiters_it_releases() {
        let all = Arc::new(WalSenders::default());
        let a = Arc::new(streaming(&all, 1, "a"));
        all.set_sync(SyncStandbys::parse("a").unwrap());
        let wait = |lsn: u64| {
            let all = all.clone();
            std::thread::spawn(move || {
                let hour = Duration::from_secs(3600);
                all.wait_polling(lsn, SyncLevel::Apply, &AtomicBool::new(false), hour)
            })
        };
        let join = |t: std::thread::JoinHandle<SyncWait>| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !t.is_finished() {
                assert!(
                    Instant::now() < deadline,
                    "a released waiter was not unparked"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            t.join().unwrap()
        };
        let (first, second) = (wait(1000), wait(2000));
        while all.waiting.lock().len() < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        a.snd().reply(3000, 3000, 1500, Instant::now(), 1);
        a.replied();
        assert_eq!(join(first), SyncWait::Released);
        assert!(!second.is_finished(), "released before replay reached it");
        a.snd().reply(3000, 3000, 2000, Instant::now(), 1);
        a.replied();
        assert_eq!(join(second), SyncWait::Released);
        assert!(all.waiting.lock().is_empty());
    }

    #[test]
    fn a_waiting_commit_is_released_by_a_reply_by_cancel_or_by_emptying_the_setting() {
        let all = Arc::new(WalSenders::default());
        let a = Arc::new(streaming(&all, 1, "a"));
        all.set_sync(SyncStandbys::parse("a").unwrap());
        let no_cancel = AtomicBool::new(false);
        // A reply past the position releases the waiter.
        let waiter = {
            let all = all.clone();
            std::thread::spawn(move || {
                all.wait_for(1000, SyncLevel::Flush, &AtomicBool::new(false))
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        a.snd().reply(1000, 999, 0, Instant::now(), 1);
        a.replied();
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !waiter.is_finished(),
            "released before the flush reached the position"
        );
        a.snd().reply(1000, 1000, 0, Instant::now(), 1);
        a.replied();
        assert_eq!(waiter.join().unwrap(), SyncWait::Released);
        assert_eq!(
            all.wait_for(900, SyncLevel::Flush, &no_cancel),
            SyncWait::Released
        );
        // A cancel ends the wait, and is taken.
        let cancel = AtomicBool::new(true);
        assert_eq!(
            all.wait_for(5000, SyncLevel::Flush, &cancel),
            SyncWait::Canceled
        );
        assert!(!cancel.load(Ordering::Relaxed));
        // Emptying the setting releases everyone.
        let waiter = {
            let all = all.clone();
            std::thread::spawn(move || {
                all.wait_for(5000, SyncLevel::Flush, &AtomicBool::new(false))
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        all.set_sync(None);
        assert_eq!(waiter.join().unwrap(), SyncWait::NotRequired);
    }

    #[test]
    fn the_incoming_rate_is_measured_over_a_second_or_more_and_decays_when_idle() {
        let mut w = RateWindow::default();
        let t0 = Instant::now();
        assert_eq!(w.rate(t0, 0), 0);
        // 1 MB every 100 ms for 2 s: 10 MB/s.
        for i in 0..=20u64 {
            w.note(t0 + Duration::from_millis(100 * i), i << 20);
        }
        // Samples closer than RATE_SAMPLE_EVERY are not kept.
        w.note(t0 + Duration::from_millis(2_001), 99 << 20);
        assert_eq!(w.samples.len(), 21);
        let now = t0 + Duration::from_secs(2);
        assert_eq!(w.rate(now, 20 << 20), 10 << 20);
        // Idle: half a second later the last second carried 5 MB; a second later, none.
        assert_eq!(w.rate(now + Duration::from_millis(500), 20 << 20), 5 << 20);
        assert_eq!(w.rate(now + Duration::from_secs(9), 20 << 20), 0);
        // Bounded.
        for i in 0..1000u64 {
            w.note(now + Duration::from_millis(100 * i), i);
        }
        assert_eq!(w.samples.len(), RATE_SAMPLES);
    }

    /// `max_standby_apply_lag`: a commit waits while its synchronous standby, at the capacity
    /// it reported, could not replay up to it in time; standbys that report no capacity, and
    /// servers without the setting or synchronous standbys, never wait.
    #[test]
    fn apply_lag_waits_for_a_synchronous_standby_that_reports_its_capacity() {
        let all = Arc::new(WalSenders::default());
        let a = Arc::new(streaming(&all, 1, "a"));
        let b = Arc::new(streaming(&all, 2, "b"));
        let no_cancel = AtomicBool::new(false);
        a.snd().reply(0, 0, 1_000, Instant::now(), 1);
        all.set_max_apply_lag(100);
        // No synchronous standbys: nothing to wait for.
        assert_eq!(
            all.wait_for_apply_lag(1 << 40, &no_cancel),
            SyncWait::NotRequired
        );
        all.set_sync(SyncStandbys::parse("a").unwrap());
        // a reports no capacity yet: no bound.
        assert_eq!(all.apply_lag_floor(), None);
        assert_eq!(
            all.wait_for_apply_lag(1 << 40, &no_cancel),
            SyncWait::NotRequired
        );
        // 1 MB/s and 100 ms: a may trail by 104,857 bytes (+ the 1,000 replayed).
        a.snd().set_apply_capacity(1 << 20, 10_000);
        assert_eq!(all.apply_lag_floor(), Some(1_000 + 104_857));
        assert_eq!(
            all.wait_for_apply_lag(105_857, &no_cancel),
            SyncWait::NotRequired
        );
        // b is asynchronous: its capacity does not count.
        b.snd().set_apply_capacity(1, 1);
        assert_eq!(all.apply_lag_floor(), Some(105_857));
        let waiter = {
            let all = all.clone();
            std::thread::spawn(move || {
                let hour = Duration::from_secs(3600);
                all.wait_until(200_000, WaitKind::ApplyLag, &AtomicBool::new(false), hour)
            })
        };
        while all.waiting.lock().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Replay passes 200,000 - 104,857: released by the reply's unpark alone.
        a.snd().reply(0, 0, 95_142, Instant::now(), 2);
        a.replied();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!waiter.is_finished(), "released one byte early");
        a.snd().reply(0, 0, 95_143, Instant::now(), 3);
        a.replied();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !waiter.is_finished() {
            assert!(
                Instant::now() < deadline,
                "a released waiter was not unparked"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(waiter.join().unwrap(), SyncWait::Released);
        // A cancel ends a wait; turning the setting off releases a waiting commit (by the
        // setting's own unpark) and passes everyone after.
        let cancel = AtomicBool::new(true);
        assert_eq!(all.wait_for_apply_lag(1 << 40, &cancel), SyncWait::Canceled);
        let waiter = {
            let all = all.clone();
            std::thread::spawn(move || {
                let hour = Duration::from_secs(3600);
                all.wait_until(1 << 40, WaitKind::ApplyLag, &AtomicBool::new(false), hour)
            })
        };
        while all.waiting.lock().is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
        all.set_max_apply_lag(0);
        assert_eq!(waiter.join().unwrap(), SyncWait::Released);
        assert_eq!(
            all.wait_for_apply_lag(1 << 40, &no_cancel),
            SyncWait::NotRequired
        );
        assert!(all.waiting.lock().is_empty());
    }

    /// Under `ANY 2` a commit waits for the second-best floor, not for the slowest standby;
    /// under `FIRST 2`, for the slowest.
    #[test]
    fn apply_lag_counts_standbys_as_synchronous_replication_does() {
        let all = Arc::new(WalSenders::default());
        let (a, b, c) = (
            streaming(&all, 1, "a"),
            streaming(&all, 2, "b"),
            streaming(&all, 3, "c"),
        );
        for (s, replayed) in [(&a, 1_000u64), (&b, 2_000), (&c, 3_000)] {
            s.snd().reply(0, 0, replayed, Instant::now(), 1);
            s.snd().set_apply_capacity(1_000, 10);
        }
        all.set_max_apply_lag(1_000);
        all.set_sync(SyncStandbys::parse("ANY 2 (a, b, c)").unwrap());
        assert_eq!(all.apply_lag_floor(), Some(3_000));
        all.set_sync(SyncStandbys::parse("FIRST 2 (a, b, c)").unwrap());
        assert_eq!(all.apply_lag_floor(), Some(2_000));
        // Fewer reporting than ANY asks: all that report must keep up.
        all.set_sync(SyncStandbys::parse("ANY 3 (a, b)").unwrap());
        assert_eq!(all.apply_lag_floor(), Some(2_000));
        // An absurd capacity saturates instead of wrapping.
        a.snd().set_apply_capacity(u64::MAX, 1);
        b.snd().set_apply_capacity(u64::MAX, 1);
        all.set_sync(SyncStandbys::parse("FIRST 1 (a)").unwrap());
        assert_eq!(all.apply_lag_floor(), Some(u64::MAX));
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
            all.snapshot().iter().map(|s| s.0.pid).collect::<Vec<_>>(),
            vec![2, 3]
        );
        drop(b);
    }
}
