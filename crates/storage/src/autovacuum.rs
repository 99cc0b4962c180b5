//! Autovacuum: a launcher thread that starts workers, which VACUUM the tables whose counters
//! say they need it, pausing as they go so that commits keep the device (PostgreSQL's
//! `autovacuum.c`; the argument is in DESIGN.md, "Autovacuum").
//!
//! 1. **The launcher** ([`launcher`]) wakes every `autovacuum_naptime` and, if fewer than
//!    `autovacuum_max_workers` workers run and `autovacuum` is on or a table needs freezing
//!    (step 4), starts one (PostgreSQL starts one per database per naptime; walnut has one
//!    database).
//! 2. **A worker** lists the tables and, for each one that needs a VACUUM ([`needs_vacuum`]
//!    for its counters unless its `autovacuum_enabled` is off, or [`needs_freeze`]) and that no other
//!    worker has claimed, claims it, checks its counters again, and VACUUMs it
//!    ([`vacuum_table_with`], `skip_locked`: a table a manual VACUUM holds is skipped). Then it
//!    ends.
//! 3. **Pacing.** Between pages the worker pays for what it did: each page it touches charges
//!    `vacuum_cost_page_hit`, `_miss` or `_dirty` ([`crate::vacuum::charge_costs`]); when the
//!    balance reaches `autovacuum_vacuum_cost_limit` (shared among the running workers) it
//!    sleeps `autovacuum_vacuum_cost_delay` (PostgreSQL's `vacuum_delay_point` and
//!    `autovac_balance_cost`). And while the WAL's flushes run at [`HIGH_PRESSURE`] or more
//!    times their recent lowest latency, the signal that paces the checkpointer's writes and
//!    the background writer's write-back, it also pauses [`BACKOFF`] per page: its writes
//!    take the share of the device the commits leave. The pages it dirties are written like
//!    any session's evictions, through the background writer's write-back queue.
//! 4. **Freezing.** A table whose `relfrozenxid` is older than `autovacuum_freeze_max_age` is
//!    VACUUMed whatever its counters say, and so is the catalog, even with `autovacuum` off
//!    (PostgreSQL's anti-wraparound autovacuum): that is what lets the transaction status
//!    store forget old xids ([`crate::vacuum::frozen_cutoff`]). Every VACUUM freezes the xids
//!    older than `vacuum_freeze_min_age`.
//! 5. **Logging.** A VACUUM that took `log_autovacuum_min_duration` or longer is logged, in
//!    the shape of PostgreSQL's "automatic vacuum of table" line.
//!
//! A worker stops at its next page when the server shuts down ([`Autovacuum::stop`] waits
//! for it before the shutdown checkpoint, so no page changes after that checkpoint), and gives
//! way at its next page to a VACUUM waiting for its table or to the commit of a DROP TABLE or
//! TRUNCATE of it ([`vacuum_table_with`]). It holds the storage only while it vacuums a table
//! (a [`Weak`] otherwise), and stops when nothing but autovacuum workers hold it any more,
//! as when a test drops it to simulate a crash. That last check is best effort: another
//! background thread holding the storage for a moment (the checkpointer waits 200 ms at a
//! time) delays it.

use crate::catalog::TableInfo;
use crate::checkpointer::{WalPressure, BACKOFF, HIGH_PRESSURE};
use crate::guc;
use crate::progress::{report_vacuums_to, vacuum_progress, VacuumProgress};
use crate::stats::{set_backend_type, BackendType};
use crate::tabstat::TableCounters;
use crate::vacuum::{
    charge_costs, cost_balance, take_cost_balance, vacuum_table_with, PageCosts, VacuumParams,
};
use crate::Storage;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use walnut_common::guc::Settings;
use walnut_common::{Error, ErrorKind, RelFileId, Result};

/// The autovacuum settings, as reloaded.
#[derive(Clone, Debug, PartialEq)]
pub struct AutovacuumSettings {
    /// `autovacuum`.
    pub enabled: bool,
    /// `autovacuum_naptime`.
    pub naptime: Duration,
    /// `autovacuum_max_workers`.
    pub max_workers: usize,
    /// `autovacuum_vacuum_threshold`, rows.
    pub vacuum_threshold: f64,
    /// `autovacuum_vacuum_max_threshold`, rows; `None` for -1 (no cap).
    pub vacuum_max_threshold: Option<f64>,
    /// `autovacuum_vacuum_scale_factor`.
    pub vacuum_scale_factor: f64,
    /// `autovacuum_vacuum_insert_threshold`, rows; `None` for -1 (inserts never trigger).
    pub insert_threshold: Option<f64>,
    /// `autovacuum_vacuum_insert_scale_factor`.
    pub insert_scale_factor: f64,
    /// `autovacuum_vacuum_cost_delay` (-1 resolved to `vacuum_cost_delay`'s 0).
    pub cost_delay: Duration,
    /// `autovacuum_vacuum_cost_limit` (-1 resolved to `vacuum_cost_limit`), cost units shared
    /// by the running workers.
    pub cost_limit: u64,
    /// `vacuum_cost_page_hit`, `_miss`, `_dirty`.
    pub page_costs: PageCosts,
    /// `log_autovacuum_min_duration`; `None` for -1 (never log).
    pub log_min_duration: Option<Duration>,
    /// `vacuum_freeze_min_age`, xids, at most half of `autovacuum_freeze_max_age`.
    pub freeze_min_age: u64,
    /// `vacuum_buffer_usage_limit`, in 8 kB frames: the ring a VACUUM's misses use (0: none).
    pub buffer_usage_limit: usize,
    /// `autovacuum_freeze_max_age`, xids.
    pub freeze_max_age: u64,
}

impl AutovacuumSettings {
    /// The values `s` gives.
    pub fn from_settings(s: &Settings) -> AutovacuumSettings {
        let opt = |v: i64| (v >= 0).then_some(v as f64);
        let cost_limit = match s.int(&guc::AUTOVACUUM_VACUUM_COST_LIMIT) {
            n if n > 0 => n,
            _ => s.int(&guc::VACUUM_COST_LIMIT),
        };
        AutovacuumSettings {
            enabled: s.bool(&guc::AUTOVACUUM),
            naptime: Duration::from_secs(s.int(&guc::AUTOVACUUM_NAPTIME).max(1) as u64),
            max_workers: s.int(&guc::AUTOVACUUM_MAX_WORKERS).max(1) as usize,
            vacuum_threshold: s.int(&guc::AUTOVACUUM_VACUUM_THRESHOLD) as f64,
            vacuum_max_threshold: opt(s.int(&guc::AUTOVACUUM_VACUUM_MAX_THRESHOLD)),
            vacuum_scale_factor: s.real(&guc::AUTOVACUUM_VACUUM_SCALE_FACTOR),
            insert_threshold: opt(s.int(&guc::AUTOVACUUM_VACUUM_INSERT_THRESHOLD)),
            insert_scale_factor: s.real(&guc::AUTOVACUUM_VACUUM_INSERT_SCALE_FACTOR),
            cost_delay: Duration::from_millis(
                s.int(&guc::AUTOVACUUM_VACUUM_COST_DELAY).max(0) as u64
            ),
            cost_limit: cost_limit.max(1) as u64,
            page_costs: PageCosts {
                hit: s.int(&guc::VACUUM_COST_PAGE_HIT) as u32,
                miss: s.int(&guc::VACUUM_COST_PAGE_MISS) as u32,
                dirty: s.int(&guc::VACUUM_COST_PAGE_DIRTY) as u32,
            },
            log_min_duration: u64::try_from(s.int(&guc::LOG_AUTOVACUUM_MIN_DURATION))
                .ok()
                .map(Duration::from_millis),
            // As PostgreSQL's `vacuum_get_cutoffs`: at most half the max age, or a VACUUM could
            // leave a table due for another at once.
            freeze_min_age: (s.int(&guc::VACUUM_FREEZE_MIN_AGE).max(0) as u64)
                .min(s.int(&guc::AUTOVACUUM_FREEZE_MAX_AGE).max(0) as u64 / 2),
            freeze_max_age: s.int(&guc::AUTOVACUUM_FREEZE_MAX_AGE).max(0) as u64,
            buffer_usage_limit: (s.int(&guc::VACUUM_BUFFER_USAGE_LIMIT).max(0) as usize)
                / (walnut_common::BLCKSZ / 1024),
        }
    }
}

impl Default for AutovacuumSettings {
    /// Every parameter at its default.
    fn default() -> Self {
        AutovacuumSettings::from_settings(&Settings::builtin())
    }
}

/// Why a table needs a VACUUM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Its dead versions passed the vacuum threshold.
    DeadTuples,
    /// Its inserts since the last VACUUM passed the insert threshold.
    Inserts,
    /// Its `relfrozenxid` is older than `autovacuum_freeze_max_age`.
    FreezeAge,
}

/// Whether heap file `relfile` needs a VACUUM to freeze: its `relfrozenxid` is older than
/// `autovacuum_freeze_max_age` (PostgreSQL's `relation_needs_vacanalyze`, `force_vacuum`).
pub fn needs_freeze(st: &Storage, s: &AutovacuumSettings, relfile: RelFileId) -> bool {
    crate::vacuum::relfrozenxid_age(st, relfile) > s.freeze_max_age
}

/// Whether any heap needs a VACUUM to freeze (the oldest `relfrozenxid` is too old): the
/// launcher then starts workers even with `autovacuum` off.
fn any_needs_freeze(st: &Storage, s: &AutovacuumSettings) -> bool {
    st.xact
        .next_xid()
        .0
        .saturating_sub(crate::vacuum::frozen_cutoff(st).0)
        > s.freeze_max_age
}

/// Whether table `t` needs a VACUUM: for its counters if autovacuum is on (and the table's
/// `autovacuum_enabled` is not off), or to freeze whatever they say.
fn table_needs(st: &Storage, s: &AutovacuumSettings, t: &TableInfo) -> Option<Reason> {
    if needs_freeze(st, s, t.relfile) {
        return Some(Reason::FreezeAge);
    }
    if !s.enabled || !t.def.autovacuum_enabled {
        return None;
    }
    needs_vacuum(s, &st.table_stats.of(t.table_id))
}

/// Whether a table with counters `c` needs a VACUUM under `s` (PostgreSQL's
/// `relation_needs_vacanalyze`): its dead versions exceed `autovacuum_vacuum_threshold +
/// autovacuum_vacuum_scale_factor × live rows`, capped at `autovacuum_vacuum_max_threshold`,
/// or its inserts since the last VACUUM exceed `autovacuum_vacuum_insert_threshold +
/// autovacuum_vacuum_insert_scale_factor × live rows`. The live rows are the counters'
/// estimate (PostgreSQL's `reltuples`).
pub fn needs_vacuum(s: &AutovacuumSettings, c: &TableCounters) -> Option<Reason> {
    let live = c.n_live_tup.load(Ordering::Relaxed).max(0) as f64;
    let dead = c.n_dead_tup.load(Ordering::Relaxed).max(0) as f64;
    let inserted = c.n_ins_since_vacuum.load(Ordering::Relaxed) as f64;
    let mut threshold = s.vacuum_threshold + s.vacuum_scale_factor * live;
    if let Some(max) = s.vacuum_max_threshold {
        threshold = threshold.min(max);
    }
    if dead > threshold {
        return Some(Reason::DeadTuples);
    }
    match s.insert_threshold {
        Some(t) if inserted > t + s.insert_scale_factor * live => Some(Reason::Inserts),
        _ => None,
    }
}

/// The first pid an autovacuum worker shows in `pg_stat_progress_vacuum` (walnut's pids are
/// its own numbers, not the OS's: sessions count theirs up one per connection from at most
/// 1,009,900, so they would need about two thousand million connections to get here).
pub const FIRST_WORKER_PID: i32 = 2_000_000_000;

#[derive(Default)]
struct State {
    /// Workers running.
    workers: usize,
    /// Tables a worker has claimed (by table id).
    claimed: HashSet<u64>,
    /// Set at shutdown: no worker starts, and running ones stop.
    stopped: bool,
    /// The running workers' pids and progress counters.
    progress: Vec<(i32, Arc<VacuumProgress>)>,
    /// Workers started so far (the next pid).
    started: i32,
}

/// The autovacuum state of one storage: its settings and its workers.
#[derive(Default)]
pub struct Autovacuum {
    settings: RwLock<AutovacuumSettings>,
    state: Mutex<State>,
    /// Signalled when a worker ends.
    ended: Condvar,
}

impl Autovacuum {
    /// A state with settings `s` and no workers.
    pub fn new(s: AutovacuumSettings) -> Autovacuum {
        Autovacuum {
            settings: RwLock::new(s),
            ..Default::default()
        }
    }

    /// The settings in effect.
    pub fn settings(&self) -> AutovacuumSettings {
        self.settings.read().clone()
    }

    /// Applies reloaded settings: the launcher reads them at its next wake-up, workers at
    /// their next page (the page costs at their next table).
    pub fn set_settings(&self, s: AutovacuumSettings) {
        *self.settings.write() = s;
    }

    /// Workers running now.
    pub fn workers(&self) -> usize {
        self.state.lock().workers
    }

    /// The running workers' pids and `pg_stat_progress_vacuum` counters.
    pub fn progress(&self) -> Vec<(i32, Arc<VacuumProgress>)> {
        self.state.lock().progress.clone()
    }

    /// Workers vacuuming a table now.
    fn vacuuming(&self) -> usize {
        self.state.lock().claimed.len()
    }

    /// Stops autovacuum for good (shutdown): no worker starts, and this waits until the
    /// running ones, which stop at their next page, have ended.
    pub fn stop(&self) {
        let mut s = self.state.lock();
        s.stopped = true;
        while s.workers > 0 {
            self.ended.wait(&mut s);
        }
    }

    fn stopped(&self) -> bool {
        self.state.lock().stopped
    }

    /// Counts a new worker in, unless stopped or `max` are running: its pid and progress.
    fn start_worker(&self, max: usize) -> Option<(i32, Arc<VacuumProgress>)> {
        let mut s = self.state.lock();
        if s.stopped || s.workers >= max {
            return None;
        }
        s.workers += 1;
        let pid = FIRST_WORKER_PID + s.started % 100_000_000;
        s.started += 1;
        let p = Arc::new(VacuumProgress::default());
        s.progress.push((pid, p.clone()));
        Some((pid, p))
    }

    fn end_worker(&self, pid: i32) {
        let mut s = self.state.lock();
        s.workers -= 1;
        s.progress.retain(|(p, _)| *p != pid);
        self.ended.notify_all();
    }

    fn claim(&self, table_id: u64) -> bool {
        self.state.lock().claimed.insert(table_id)
    }

    fn release(&self, table_id: u64) {
        self.state.lock().claimed.remove(&table_id);
    }
}

/// The launcher's thread: wakes every `autovacuum_naptime` (looking at the settings and at
/// shutdown every 200 ms meanwhile) and starts a worker when it may. Runs on a primary only;
/// ends when the storage is dropped or stops.
pub(crate) fn launcher(weak: Weak<Storage>) {
    let mut last = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let Some(st) = weak.upgrade() else { return };
        if st.stopping.load(Ordering::Acquire) || st.autovacuum.stopped() {
            return;
        }
        let s = st.autovacuum.settings();
        if last.elapsed() < s.naptime || st.in_recovery() {
            continue;
        }
        if !s.enabled && !any_needs_freeze(&st, &s) {
            continue;
        }
        last = Instant::now();
        let Some((pid, progress)) = st.autovacuum.start_worker(s.max_workers) else {
            continue;
        };
        let (weak, av) = (weak.clone(), st.autovacuum.clone());
        let started = std::thread::Builder::new()
            .name("autovacuum worker".into())
            .spawn(move || {
                // Counted out however the worker ends, a panic included, or shutdown would
                // wait for it forever.
                let _out = Finally(|| av.end_worker(pid));
                report_vacuums_to(Some(progress));
                worker(&weak);
            });
        if let Err(e) = started {
            tracing::warn!("could not start an autovacuum worker: {e}");
            st.autovacuum.end_worker(pid);
        }
    }
}

/// Runs its closure when dropped.
struct Finally<F: FnMut()>(F);

impl<F: FnMut()> Drop for Finally<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// One worker's run: every table that needs a VACUUM and that no other worker has, one by one.
fn worker(weak: &Weak<Storage>) {
    set_backend_type(BackendType::AutovacuumWorker);
    let Some(st) = weak.upgrade() else { return };
    let mut tables = st.catalog.all();
    drop(st);
    tables.sort_by(|a, b| a.def.name.cmp(&b.def.name));
    for listed in tables {
        let Some(st) = weak.upgrade() else { return };
        let av = &st.autovacuum;
        if abandoned(&st) {
            return;
        }
        let s = av.settings();
        if table_needs(&st, &s, &listed).is_none() {
            continue;
        }
        if !av.claim(listed.table_id) {
            continue;
        }
        let _release = Finally(|| av.release(listed.table_id));
        // Again now that it is ours: another worker may have just vacuumed it. And the catalog
        // may have moved on: the table dropped, given new files (TRUNCATE) or an index.
        let Some(info) = st
            .catalog
            .get(&listed.def.name)
            .filter(|c| c.table_id == listed.table_id)
        else {
            continue;
        };
        if table_needs(&st, &s, &info).is_none() {
            continue;
        }
        if let Err(e) = vacuum_one(&st, &info) {
            if e.kind != ErrorKind::Cancelled {
                tracing::warn!(
                    "automatic vacuum of table \"postgres.public.{}\" failed: {e}",
                    info.def.name
                );
            }
        }
    }
    // The catalog, to freeze only (it is never pruned), claimed under a table id no table has.
    let Some(st) = weak.upgrade() else { return };
    let s = st.autovacuum.settings();
    if abandoned(&st) || !needs_freeze(&st, &s, RelFileId::CATALOG) {
        return;
    }
    if !st.autovacuum.claim(CATALOG_CLAIM) {
        return;
    }
    let av = st.autovacuum.clone();
    let _release = Finally(|| av.release(CATALOG_CLAIM));
    charge_costs(Some(s.page_costs));
    let mut pressure = WalPressure::default();
    let r = crate::vacuum::vacuum_catalog(&st, s.freeze_min_age, &mut || {
        delay_point(&st, &mut pressure)
    });
    charge_costs(None);
    if let Err(e) = r {
        if e.kind != ErrorKind::Cancelled {
            tracing::warn!("automatic vacuum of the catalog failed: {e}");
        }
    }
}

/// The claim that stands for the catalog (table ids are relation file numbers, below 2^32).
const CATALOG_CLAIM: u64 = u64::MAX;

/// VACUUMs one table with the cost-based delay, and logs it if it took
/// `log_autovacuum_min_duration` or longer.
fn vacuum_one(st: &Arc<Storage>, info: &TableInfo) -> Result<()> {
    let started = Instant::now();
    charge_costs(Some(st.autovacuum.settings().page_costs));
    let mut pressure = WalPressure::default();
    let r = vacuum_table_with(
        st,
        info,
        VacuumParams {
            auto: true,
            skip_locked: true,
            freeze_min_age: st.autovacuum.settings().freeze_min_age,
            ring: st.autovacuum.settings().buffer_usage_limit,
        },
        &mut || delay_point(st, &mut pressure),
    );
    charge_costs(None);
    if let Some(p) = vacuum_progress() {
        // Off `pg_stat_progress_vacuum` until the next table.
        p.relid.store(0, Ordering::Release);
    }
    let Some(stats) = r? else { return Ok(()) };
    let elapsed = started.elapsed();
    if st
        .autovacuum
        .settings()
        .log_min_duration
        .is_some_and(|min| elapsed >= min)
    {
        tracing::info!(
            "{}",
            crate::vacuum::report("automatic vacuum of table", info, &stats, elapsed)
        );
    }
    Ok(())
}

/// Between two pages of an autovacuum: the cost-based pause, then the WAL's (module
/// documentation, step 3).
///
/// # Errors
/// A cancellation once the server shuts down or the storage was abandoned.
fn delay_point(st: &Arc<Storage>, pressure: &mut WalPressure) -> Result<()> {
    let s = st.autovacuum.settings();
    let workers = st.autovacuum.vacuuming().max(1) as u64;
    let limit = (s.cost_limit / workers).max(1);
    let mut slept = Duration::ZERO;
    if !s.cost_delay.is_zero() && cost_balance() >= limit {
        // PostgreSQL 17's: the delay in proportion to the balance, at most four times over.
        let balance = take_cost_balance();
        let times = (balance as f64 / limit as f64).min(4.0);
        slept += s.cost_delay.mul_f64(times);
    }
    if let Some(wal) = st.wal_if_open() {
        if pressure.sample(wal.flush_latency_us(), Instant::now()) >= HIGH_PRESSURE {
            slept += BACKOFF;
        }
    }
    if !slept.is_zero() {
        std::thread::sleep(slept);
        if let Some(p) = vacuum_progress() {
            p.delay_time_us
                .fetch_add(slept.as_micros() as u64, Ordering::Relaxed);
        }
    }
    if abandoned(st) {
        return Err(Error::cancelled());
    }
    Ok(())
}

/// True once the server shuts down, or when nothing but autovacuum workers holds the storage
/// any more (a test dropped it to simulate a crash; best effort, module documentation): a
/// worker must not write after either. Each worker that has claimed a table holds one
/// reference (it takes it before it claims, and releases the claim before it lets it go); a
/// worker between tables may hold one too, which only delays this. (A claim or release
/// between the two reads can stop a VACUUM for nothing, which the next naptime repeats.)
fn abandoned(st: &Arc<Storage>) -> bool {
    let av = &st.autovacuum;
    st.stopping.load(Ordering::Acquire) || av.stopped() || Arc::strong_count(st) <= av.vacuuming()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI64;

    fn counters(live: i64, dead: i64, inserted: u64) -> TableCounters {
        let c = TableCounters {
            n_live_tup: AtomicI64::new(live),
            n_dead_tup: AtomicI64::new(dead),
            ..Default::default()
        };
        c.n_ins_since_vacuum.store(inserted, Ordering::Relaxed);
        c
    }

    #[test]
    fn thresholds_follow_postgresql() {
        let s = AutovacuumSettings::default();
        assert!(s.enabled);
        assert_eq!(s.naptime, Duration::from_secs(60));
        assert_eq!(s.max_workers, 3);
        assert_eq!(s.cost_delay, Duration::from_millis(2));
        assert_eq!(s.cost_limit, 200, "-1 takes vacuum_cost_limit");
        assert_eq!(
            s.page_costs,
            PageCosts {
                hit: 1,
                miss: 2,
                dirty: 20
            }
        );
        assert_eq!(s.log_min_duration, Some(Duration::from_secs(600)));
        // 50 + 0.2 × 1000 = 250 dead versions.
        assert_eq!(needs_vacuum(&s, &counters(1000, 250, 0)), None);
        assert_eq!(
            needs_vacuum(&s, &counters(1000, 251, 0)),
            Some(Reason::DeadTuples)
        );
        // 1000 + 0.2 × 1000 = 1200 inserts.
        assert_eq!(needs_vacuum(&s, &counters(1000, 0, 1200)), None);
        assert_eq!(
            needs_vacuum(&s, &counters(1000, 0, 1201)),
            Some(Reason::Inserts)
        );
        // A negative estimate (deletes of rows counted before the start) reads as none.
        assert_eq!(
            needs_vacuum(&s, &counters(-5, 51, 0)),
            Some(Reason::DeadTuples)
        );
        // PostgreSQL 18's cap: 100 million dead versions whatever the size.
        let big = counters(1_000_000_000, 100_000_001, 0);
        assert_eq!(needs_vacuum(&s, &big), Some(Reason::DeadTuples));
        let uncapped = AutovacuumSettings {
            vacuum_max_threshold: None,
            ..s.clone()
        };
        assert_eq!(needs_vacuum(&uncapped, &big), None);
        let no_inserts = AutovacuumSettings {
            insert_threshold: None,
            ..s
        };
        assert_eq!(needs_vacuum(&no_inserts, &counters(0, 0, 1 << 40)), None);
    }
}
