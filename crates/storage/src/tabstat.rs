//! Per-table activity counters: the storage side of `pg_stat_user_tables` (PostgreSQL's
//! `pgstat_relation.c`, `PgStat_StatTabEntry`), and what autovacuum will decide from.
//!
//! Counters live in memory, by table id (which TRUNCATE keeps), from the server's start: a
//! restart starts them again from zero (PostgreSQL keeps them across a clean shutdown and
//! drops them after a crash). They are relaxed atomics. A transaction keeps its row changes
//! in [`PendingCounts`] per table and adds them at its end ([`TableCounters::end_of_xact`]),
//! as PostgreSQL's `AtEOXact_PgStat` does: inserts, updates and deletes count whether it
//! commits or aborts; the live and dead estimates move by what its end makes of them.

use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use walnut_common::RelFileId;

/// One table's counters. Times are µs since 2000-01-01 UTC (0 = never); durations are ms.
#[derive(Debug, Default)]
pub struct TableCounters {
    /// Sequential scans started.
    pub seq_scan: AtomicU64,
    /// Rows those scans returned.
    pub seq_tup_read: AtomicU64,
    /// Index scans started (lookups and range scans of the primary key).
    pub idx_scan: AtomicU64,
    /// Rows those scans returned.
    pub idx_tup_fetch: AtomicU64,
    /// Rows inserted (by committed and aborted transactions alike).
    pub n_tup_ins: AtomicU64,
    /// Rows updated.
    pub n_tup_upd: AtomicU64,
    /// Rows deleted.
    pub n_tup_del: AtomicU64,
    /// Updates whose new version went to another page than the old one.
    pub n_tup_newpage_upd: AtomicU64,
    /// Updates whose new version was heap-only: on the old one's page, with no index entry
    /// moved (PostgreSQL's `n_tup_hot_upd`).
    pub n_tup_hot_upd: AtomicU64,
    /// Estimated live rows: set by VACUUM, moved by committed inserts and deletes since.
    pub n_live_tup: AtomicI64,
    /// Estimated dead versions: set by VACUUM (those it could not remove yet), moved by
    /// committed updates and deletes and by aborted inserts and updates since.
    pub n_dead_tup: AtomicI64,
    /// Rows inserted since the last VACUUM.
    pub n_ins_since_vacuum: AtomicU64,
    /// Rows changed since the last ANALYZE (walnut has none: since the start).
    pub n_mod_since_analyze: AtomicU64,
    /// When the last manual VACUUM ended.
    pub last_vacuum: AtomicI64,
    /// When the last autovacuum of the table ended.
    pub last_autovacuum: AtomicI64,
    /// Manual VACUUMs.
    pub vacuum_count: AtomicU64,
    /// Autovacuums.
    pub autovacuum_count: AtomicU64,
    /// Time in manual VACUUMs, ms.
    pub total_vacuum_time_ms: AtomicU64,
    /// Time in autovacuums, ms.
    pub total_autovacuum_time_ms: AtomicU64,
}

/// A transaction's row changes to one table, not yet added to its counters (PostgreSQL's
/// `PgStat_TableXactStatus`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingCounts {
    /// Rows inserted.
    pub inserted: u64,
    /// Rows updated.
    pub updated: u64,
    /// Rows deleted.
    pub deleted: u64,
    /// Of `updated`, those whose new version went to another page.
    pub newpage_updated: u64,
    /// Of `updated`, the heap-only ones (same page, no index entry moved).
    pub hot_updated: u64,
}

impl TableCounters {
    /// Adds a transaction's changes `p` at its end (`committed` or aborted).
    pub fn end_of_xact(&self, p: &PendingCounts, committed: bool) {
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.n_tup_ins, p.inserted);
        add(&self.n_tup_upd, p.updated);
        add(&self.n_tup_del, p.deleted);
        add(&self.n_tup_newpage_upd, p.newpage_updated);
        add(&self.n_tup_hot_upd, p.hot_updated);
        add(&self.n_ins_since_vacuum, p.inserted);
        let (live, dead) = if committed {
            (
                p.inserted as i64 - p.deleted as i64,
                (p.updated + p.deleted) as i64,
            )
        } else {
            // An aborted transaction's new versions are dead; what it deleted stays live.
            (0, (p.inserted + p.updated) as i64)
        };
        self.n_live_tup.fetch_add(live, Ordering::Relaxed);
        self.n_dead_tup.fetch_add(dead, Ordering::Relaxed);
        if committed {
            add(
                &self.n_mod_since_analyze,
                p.inserted + p.updated + p.deleted,
            );
        }
    }

    /// Records a VACUUM (`auto`: an autovacuum's) that ended at `now` (µs since 2000) after
    /// `elapsed_ms`, and left `live` live rows and `dead` versions it could not remove yet.
    pub fn vacuumed(&self, auto: bool, now: i64, elapsed_ms: u64, live: u64, dead: u64) {
        self.n_live_tup.store(live as i64, Ordering::Relaxed);
        self.n_dead_tup.store(dead as i64, Ordering::Relaxed);
        self.n_ins_since_vacuum.store(0, Ordering::Relaxed);
        let (last, count, time) = if auto {
            (
                &self.last_autovacuum,
                &self.autovacuum_count,
                &self.total_autovacuum_time_ms,
            )
        } else {
            (
                &self.last_vacuum,
                &self.vacuum_count,
                &self.total_vacuum_time_ms,
            )
        };
        last.store(now, Ordering::Relaxed);
        count.fetch_add(1, Ordering::Relaxed);
        time.fetch_add(elapsed_ms, Ordering::Relaxed);
    }
}

/// Every table's counters, by table id.
#[derive(Debug)]
pub struct TableStats {
    /// Tells this instance's entries apart in the threads' caches ([`TableStats::with`]).
    instance: u64,
    tables: RwLock<HashMap<u64, Arc<TableCounters>>>,
    /// Table ids by heap file, as the catalog last loaded them (pruning knows only the file).
    heaps: RwLock<HashMap<RelFileId, u64>>,
}

impl Default for TableStats {
    fn default() -> TableStats {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        TableStats {
            instance: NEXT.fetch_add(1, Ordering::Relaxed),
            tables: RwLock::default(),
            heaps: RwLock::default(),
        }
    }
}

thread_local! {
    /// Counters this thread used, by (instance, table id): a scan finds its table's counters
    /// without the map's lock or a reference count, which every session would otherwise
    /// contend for on each lookup.
    static CACHE: std::cell::RefCell<HashMap<(u64, u64), Arc<TableCounters>>> =
        std::cell::RefCell::new(HashMap::new());
}

impl TableStats {
    /// Calls `f` with the counters of table `table_id` (created on first use), found through
    /// this thread's cache. A table dropped meanwhile may still be found there: counts for it
    /// then go nowhere. `f` must not call this again (the cache is borrowed while it runs).
    pub fn with<R>(&self, table_id: u64, f: impl FnOnce(&TableCounters) -> R) -> R {
        let key = (self.instance, table_id);
        CACHE.with(|m| {
            let mut m = m.borrow_mut();
            if !m.contains_key(&key) {
                if m.len() >= 1024 {
                    m.clear();
                }
                m.insert(key, self.of(table_id));
            }
            f(&m[&key])
        })
    }

    /// The counters of table `table_id`, created (zero) on first use.
    pub fn of(&self, table_id: u64) -> Arc<TableCounters> {
        if let Some(c) = self.tables.read().get(&table_id) {
            return c.clone();
        }
        self.tables.write().entry(table_id).or_default().clone()
    }

    /// Sets which table each heap file belongs to (the catalog calls it when it loads).
    pub fn set_heaps(&self, heaps: impl IntoIterator<Item = (RelFileId, u64)>) {
        *self.heaps.write() = heaps.into_iter().collect();
    }

    /// Pruning of heap `rel` removed `n` dead versions whole (line pointers made unused): the
    /// table's dead estimate goes down by as many, not below 0 (PostgreSQL's
    /// `pgstat_update_heap_dead_tuples`, which also leaves out the dead line pointers pruning
    /// leaves for VACUUM). A file the catalog does not know (the catalog's own) counts nowhere.
    pub fn pruned(&self, rel: RelFileId, n: u64) {
        if n == 0 {
            return;
        }
        let Some(table_id) = self.heaps.read().get(&rel).copied() else {
            return;
        };
        self.with(table_id, |c| {
            let _ = c
                .n_dead_tup
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                    Some((d - n as i64).max(0))
                });
        });
    }

    /// Forgets the counters of a dropped table.
    pub fn remove(&self, table_id: u64) {
        self.tables.write().remove(&table_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_lowers_the_dead_estimate_of_the_table_it_knows() {
        let s = TableStats::default();
        s.set_heaps([(RelFileId(20), 7)]);
        s.of(7).n_dead_tup.store(5, Ordering::Relaxed);
        s.pruned(RelFileId(20), 3);
        assert_eq!(s.of(7).n_dead_tup.load(Ordering::Relaxed), 2);
        s.pruned(RelFileId(20), 3);
        assert_eq!(
            s.of(7).n_dead_tup.load(Ordering::Relaxed),
            0,
            "never below 0"
        );
        s.pruned(RelFileId(21), 3);
        assert!(s.tables.read().len() == 1, "an unknown file counts nowhere");
    }

    #[test]
    fn a_transactions_end_moves_the_estimates_as_postgresql_does() {
        let c = TableCounters::default();
        let p = PendingCounts {
            inserted: 5,
            updated: 3,
            deleted: 2,
            newpage_updated: 1,
            hot_updated: 1,
        };
        c.end_of_xact(&p, true);
        let get = |a: &AtomicI64| a.load(Ordering::Relaxed);
        assert_eq!((get(&c.n_live_tup), get(&c.n_dead_tup)), (3, 5));
        c.end_of_xact(&p, false);
        // Inserts and updates of the aborted one are dead; its deletes did not happen.
        assert_eq!((get(&c.n_live_tup), get(&c.n_dead_tup)), (3, 13));
        assert_eq!(c.n_tup_ins.load(Ordering::Relaxed), 10);
        assert_eq!(c.n_ins_since_vacuum.load(Ordering::Relaxed), 10);
        assert_eq!(c.n_mod_since_analyze.load(Ordering::Relaxed), 10);
        c.vacuumed(false, 42, 7, 100, 1);
        assert_eq!((get(&c.n_live_tup), get(&c.n_dead_tup)), (100, 1));
        assert_eq!(c.n_ins_since_vacuum.load(Ordering::Relaxed), 0);
        assert_eq!(c.last_vacuum.load(Ordering::Relaxed), 42);
        assert_eq!(c.last_autovacuum.load(Ordering::Relaxed), 0);
        assert_eq!(c.vacuum_count.load(Ordering::Relaxed), 1);
    }
}
