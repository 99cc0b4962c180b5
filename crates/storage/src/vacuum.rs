//! VACUUM of one table (PostgreSQL's `vacuumlazy.c`, `heap_vacuum_rel`; the argument is in
//! DESIGN.md, "VACUUM").
//!
//! Pruning ([`heap::prune`]) leaves two things behind that only a pass over the whole table
//! can remove: dead line pointers (deleted rows, aborted inserts), which the primary-key index
//! may still name, and the `prev` links of newer versions that name them. VACUUM:
//! 1. **Scans the heap** ([`heap::vacuum_scan_page`]): prunes every page and lists its dead
//!    line pointers, the set `D`.
//! 2. **Scans the index** ([`btree::bulk_delete`]): removes every entry that names a member of
//!    `D`. A member no entry named belonged to a key that was inserted again, or is the last
//!    version of a deleted row's same-page chain (its root is the member the entry named): a
//!    version of it may link to the member with its `prev`.
//! 3. **Clears those links**, when step 2 left such members: a second heap scan
//!    ([`heap::prev_links`]) finds the versions whose `prev` names one, and
//!    [`heap::clear_prev`] sets it to none.
//! 4. **Frees the slots** ([`heap::vacuum_page`]): `D`'s line pointers become unused, for new
//!    versions to reuse.
//! 5. **Prunes again the pages where step 3 unlinked versions**: an aborted insert unlinked is
//!    removable, and steps 2 to 4 run for it, until a round removes nothing.
//!
//! Nothing leads to a member of `D` after step 3: the index does not (step 2), no version's
//! `prev` does (step 3, and an insert that starts a chain where a member was links to nothing:
//! it sees the dead line pointer, or no entry at all, under the leaf's latch), and no version's
//! `next` does (a dead line pointer ends its chain). So step 4 may give their slots away. A
//! reader that read an entry before step 2 removed it and reads the slot after step 4 finds
//! another key's version there; it checks the key (`Txn::range`).
//!
//! `D` is kept in memory, at most [`MAX_DEAD_ITEMS`] at a time: a table with more runs steps 2
//! to 4 for each batch (PostgreSQL's `maintenance_work_mem` and its several index scans).
//!
//! **Freezing** (DESIGN.md, "Freezing"). Step 1 also freezes, on each page, the xids older than
//! `vacuum_freeze_min_age` whose outcome every snapshot sees, and notes the oldest xid it left.
//! A VACUUM that ran to its end records that (or the oldest running xid, if older) as the
//! table's `relfrozenxid` ([`Storage::relfrozenxid`]); the oldest of them all,
//! [`frozen_cutoff`], is what a checkpoint lets the status store forget.

use crate::catalog::TableInfo;
use crate::progress::{
    VACUUM_FINAL_CLEANUP as PHASE_FINAL_CLEANUP, VACUUM_SCANNING_HEAP as PHASE_SCANNING_HEAP,
    VACUUM_TRUNCATING_HEAP as PHASE_TRUNCATING_HEAP, VACUUM_VACUUMING_HEAP as PHASE_VACUUMING_HEAP,
    VACUUM_VACUUMING_INDEXES as PHASE_VACUUMING_INDEXES,
};
use crate::{btree, heap, Storage};
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use walnut_common::{BlockNumber, Error, ErrorKind, RelFileId, Result, SqlState, Tid, Xid};

/// Dead line pointers remembered before the index is scanned: about 64 MB in the set
/// (PostgreSQL's default `maintenance_work_mem`), and as much again while the index scan's
/// results and the members it did not find are held beside it.
pub const MAX_DEAD_ITEMS: usize = 4 << 20;

/// What a VACUUM of one table did, for `VACUUM VERBOSE` and the statistics views.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VacuumStats {
    /// Pages of the heap when the scan started.
    pub pages: u32,
    /// Pages scanned (all of them: walnut has no visibility map yet).
    pub pages_scanned: u32,
    /// Versions pruning removed during the scan.
    pub removed: u64,
    /// Versions left that some snapshot may see (live or in progress).
    pub live: u64,
    /// Versions deleted or replaced by a committed transaction that a snapshot still sees.
    pub recently_dead: u64,
    /// Dead line pointers made unused.
    pub dead_items: u64,
    /// Index entries removed.
    pub index_entries_removed: u64,
    /// Index scans (one per batch of dead line pointers; 0 when there were none).
    pub index_scans: u32,
    /// `prev` links cleared (step 3).
    pub links_cleared: u64,
    /// Versions whose `xmin` or `xmax` step 1 froze.
    pub frozen: u64,
    /// Pages on which step 1 froze something.
    pub pages_frozen: u32,
    /// The table's new `relfrozenxid`: the oldest xid a version may still name.
    pub relfrozenxid: Xid,
    /// Empty pages cut off the end of the heap (step 6).
    pub pages_removed: u32,
}

impl VacuumStats {
    /// Adds what step 1 froze on a page, and the oldest xid it left there.
    fn note_freezing(&mut self, scan: &heap::PageScan) {
        self.frozen += scan.frozen;
        self.pages_frozen += u32::from(scan.frozen > 0);
        if let Some(x) = scan.oldest_xid {
            self.relfrozenxid = self.relfrozenxid.min(x);
        }
    }
}

/// PostgreSQL's default `vacuum_freeze_min_age`, xids.
pub const DEFAULT_FREEZE_MIN_AGE: u64 = 50_000_000;

/// How a VACUUM runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VacuumParams {
    /// Run by autovacuum: recorded as `last_autovacuum` and `autovacuum_count`.
    pub auto: bool,
    /// Skip the table, rather than wait, if another VACUUM of it is running (PostgreSQL's
    /// `SKIP_LOCKED`, which autovacuum always uses).
    pub skip_locked: bool,
    /// Xids at least this much older than the oldest running one are frozen
    /// (`vacuum_freeze_min_age`; 0 for `VACUUM FREEZE`).
    pub freeze_min_age: u64,
    /// Frames of the ring its misses are read into (`vacuum_buffer_usage_limit`; 0: none, the
    /// whole pool).
    pub ring: usize,
}

impl Default for VacuumParams {
    fn default() -> VacuumParams {
        VacuumParams {
            auto: false,
            skip_locked: false,
            freeze_min_age: DEFAULT_FREEZE_MIN_AGE,
            ring: 2 * 1024 * 1024 / walnut_common::BLCKSZ,
        }
    }
}

/// The oldest xid any heap may still name, as far as this server knows (PostgreSQL's
/// `datfrozenxid`, from `vac_update_datfrozenxid`): the oldest `relfrozenxid` of the catalog
/// and of every table the catalog names, where a heap no VACUUM finished since start-up counts
/// as the status store's oldest xid. Never below that. Entries of heaps the catalog no longer
/// names are dropped.
pub fn frozen_cutoff(st: &Storage) -> Xid {
    let oldest = st.xact.oldest_xid();
    let tables = st.catalog.all();
    let mut map = st.relfrozenxid.lock();
    let live: HashSet<RelFileId> = tables
        .iter()
        .map(|t| t.relfile)
        .chain([RelFileId::CATALOG])
        .collect();
    map.retain(|f, _| live.contains(f));
    live.iter()
        .map(|f| map.get(f).copied().unwrap_or(oldest))
        .min()
        .unwrap_or(oldest)
        .max(oldest)
}

/// Heap file `relfile`'s `relfrozenxid` (PostgreSQL's `pg_class.relfrozenxid`): what the last
/// VACUUM that ran to its end left, else the status store's oldest xid.
pub fn relfrozenxid(st: &Storage, relfile: RelFileId) -> Xid {
    let oldest = st.xact.oldest_xid();
    st.relfrozenxid
        .lock()
        .get(&relfile)
        .copied()
        .unwrap_or(oldest)
        .max(oldest)
}

/// The age of `relfile`'s `relfrozenxid` in xids (PostgreSQL's `age(relfrozenxid)`):
/// autovacuum VACUUMs a table whose age passes `autovacuum_freeze_max_age`.
pub fn relfrozenxid_age(st: &Storage, relfile: RelFileId) -> u64 {
    st.xact
        .next_xid()
        .0
        .saturating_sub(relfrozenxid(st, relfile).0)
}

/// VACUUMs the catalog: freezes its old xids (it is never pruned: DESIGN.md, "Freezing"), one
/// page at a time under `check`, and records its `relfrozenxid`. A VACUUM of it already
/// running makes this return at once.
///
/// # Errors
/// 25006 on a hot standby; `check`'s; corruption and I/O errors; the WAL's.
pub fn vacuum_catalog(
    st: &Storage,
    freeze_min_age: u64,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    if st.in_recovery() {
        return Err(Error::user(
            SqlState::READ_ONLY_SQL_TRANSACTION,
            "cannot execute VACUUM during recovery",
        ));
    }
    let rel = st.smgr.open(RelFileId::CATALOG)?;
    let Some(_one_at_a_time) = rel.vacuum_lock.try_lock() else {
        return Ok(());
    };
    let running = st.xact.oldest_running();
    let limit = freeze_limit(running, freeze_min_age);
    let mut oldest = running;
    for b in 0..rel.nblocks.load(Ordering::Acquire) {
        check()?;
        let scan = heap::vacuum_scan_page(st, &rel, BlockNumber(b), false, limit)?;
        oldest = scan.oldest_xid.map_or(oldest, |x| x.min(oldest));
    }
    st.relfrozenxid.lock().insert(RelFileId::CATALOG, oldest);
    Ok(())
}

/// Xids below this are frozen by a VACUUM that starts when `running` is the oldest running xid
/// (PostgreSQL's `FreezeLimit`).
fn freeze_limit(running: Xid, freeze_min_age: u64) -> Xid {
    Xid(running.0.saturating_sub(freeze_min_age)).max(Xid::FIRST_NORMAL)
}

/// VACUUMs table `info` (module documentation), as [`vacuum_table_with`] with the default
/// [`VacuumParams`]; a table dropped before or while it ran gives all-zero figures.
///
/// # Errors
/// As [`vacuum_table_with`].
pub fn vacuum_table(
    st: &Storage,
    info: &TableInfo,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<VacuumStats> {
    Ok(vacuum_table_with(st, info, VacuumParams::default(), check)?.unwrap_or_default())
}

/// VACUUMs table `info` (module documentation). `check` runs between pages, index leaves and
/// links cleared: its error (a cancel) stops the VACUUM where it is, which leaves everything
/// consistent (every step is logged page by page, and each is correct alone); it also runs
/// every 100 ms while this waits for another VACUUM of the table to end. Returns `None` if the
/// table was skipped:
/// - another VACUUM held it (with `skip_locked`);
/// - the commit of a DROP TABLE or TRUNCATE removed its file before or while it ran
///   (`Relation::dropping`; the drop waits for the VACUUM to stop at its next page), or the
///   catalog no longer names the file;
/// - an autovacuum (`auto`) gave way to a VACUUM waiting for the table
///   (`Relation::vacuum_waiters`), as PostgreSQL cancels an autovacuum that blocks a lock.
///
/// # Errors
/// 25006 on a hot standby; `check`'s; corruption and I/O errors; the WAL's.
pub fn vacuum_table_with(
    st: &Storage,
    info: &TableInfo,
    params: VacuumParams,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<Option<VacuumStats>> {
    if st.in_recovery() {
        return Err(Error::user(
            SqlState::READ_ONLY_SQL_TRANSACTION,
            "cannot execute VACUUM during recovery",
        ));
    }
    let mut stats = VacuumStats::default();
    if info.relfile == RelFileId::CATALOG {
        // Not pruned: see `vacuum_catalog`.
        return Ok(Some(stats));
    }
    let rel = match st.smgr.open(info.relfile) {
        Ok(rel) => rel,
        // Dropped (or truncated) and its file removed since the caller read the catalog (which
        // the dropping commit reloads only after it removed the file).
        Err(_) if !st.smgr.exists(info.relfile) => return Ok(None),
        Err(e) => return Err(e),
    };
    let _one_at_a_time = if params.skip_locked {
        match rel.vacuum_lock.try_lock() {
            Some(g) => g,
            None => return Ok(None),
        }
    } else {
        rel.vacuum_waiters.fetch_add(1, Ordering::AcqRel);
        let waited = loop {
            if let Some(g) = rel
                .vacuum_lock
                .try_lock_for(std::time::Duration::from_millis(100))
            {
                break Ok(g);
            }
            if let Err(e) = check() {
                break Err(e);
            }
        };
        rel.vacuum_waiters.fetch_sub(1, Ordering::AcqRel);
        waited?
    };
    // `dropping` was set before the drop took the lock, which this thread now holds: seen
    // here, or the drop waits for `check` below to see it.
    let give_way = || {
        rel.dropping.load(Ordering::Acquire)
            || (params.auto && rel.vacuum_waiters.load(Ordering::Acquire) > 0)
    };
    if give_way() {
        return Ok(None);
    }
    let mut check = || {
        if give_way() {
            return Err(Error::cancelled());
        }
        check()?;
        if give_way() {
            return Err(Error::cancelled());
        }
        Ok(())
    };
    let started = std::time::Instant::now();
    // Misses go to a ring, so one pass over a large table leaves the pool's other pages be.
    let _ring = (params.ring > 0).then(|| st.pool.use_ring(params.ring));
    // Every xid below the oldest running one has ended; a version written after its page was
    // scanned names a running xid or a later one.
    let running = st.xact.oldest_running();
    let limit = freeze_limit(running, params.freeze_min_age);
    stats.relfrozenxid = running;
    match scan_and_free(st, info, &rel, limit, &mut stats, &mut check)
        .and_then(|()| truncate_tail(st, &rel, &mut stats, &mut check))
    {
        Ok(()) => {}
        Err(e) if e.kind == ErrorKind::Cancelled && give_way() => return Ok(None),
        Err(e) => return Err(e),
    }
    st.relfrozenxid
        .lock()
        .insert(info.relfile, stats.relfrozenxid);
    st.table_stats.of(info.table_id).vacuumed(
        params.auto,
        walnut_common::value::now_timestamp(),
        started.elapsed().as_millis() as u64,
        stats.live,
        stats.recently_dead,
    );
    Ok(Some(stats))
}

/// Steps 1 to 5 of [`vacuum_table_with`] on `rel`, the heap of `info`, whose `vacuum_lock`
/// the caller holds.
fn scan_and_free(
    st: &Storage,
    info: &TableInfo,
    rel: &crate::smgr::Relation,
    limit: Xid,
    stats: &mut VacuumStats,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let n = rel.nblocks.load(Ordering::Acquire);
    stats.pages = n;
    let progress = crate::progress::vacuum_progress();
    let progress = progress.as_deref();
    if let Some(p) = progress {
        p.start(info.table_id, n as u64, u64::from(info.index.is_some()));
    }
    let mut dead: Vec<(BlockNumber, Vec<u16>)> = Vec::new();
    let mut count = 0usize;
    // Pages where step 3 unlinked a version: an aborted one may be removable now.
    let mut unlinked = Vec::new();
    for b in 0..n {
        check()?;
        let scan = heap::vacuum_scan_page(st, rel, BlockNumber(b), info.index.is_none(), limit)?;
        stats.pages_scanned += 1;
        stats.note_freezing(&scan);
        if let Some(p) = progress {
            p.heap_blks_scanned.fetch_add(1, Ordering::Release);
            p.num_dead_item_ids
                .fetch_add(scan.dead.len() as u64, Ordering::Release);
        }
        stats.removed += scan.removed as u64;
        stats.live += scan.live;
        stats.recently_dead += scan.recently_dead;
        if !scan.dead.is_empty() {
            count += scan.dead.len();
            dead.push((BlockNumber(b), scan.dead));
        }
        if count >= MAX_DEAD_ITEMS {
            let batch = std::mem::take(&mut dead);
            unlinked.extend(free_dead(st, info, rel, &batch, stats, check)?);
            count = 0;
        }
    }
    if count > 0 {
        unlinked.extend(free_dead(st, info, rel, &dead, stats, check)?);
    }
    // An aborted insert that linked to a member is removable once unlinked, and may itself be
    // what a later aborted insert of its key linked to: the pages step 3 changed are pruned
    // again, and so on down such a chain (each round removes versions, so it ends).
    loop {
        unlinked.sort_unstable();
        unlinked.dedup();
        let mut dead = Vec::new();
        for b in std::mem::take(&mut unlinked) {
            check()?;
            let scan = heap::vacuum_scan_page(st, rel, b, info.index.is_none(), limit)?;
            stats.removed += scan.removed as u64;
            stats.note_freezing(&scan);
            if scan.removed > 0 {
                dead.push((b, scan.dead));
            }
        }
        if dead.is_empty() {
            break;
        }
        unlinked = free_dead(st, info, rel, &dead, stats, check)?;
    }
    if let Some(p) = progress {
        p.phase.store(PHASE_FINAL_CLEANUP, Ordering::Release);
    }
    Ok(())
}

/// PostgreSQL's `REL_TRUNCATE_MINIMUM` and `REL_TRUNCATE_FRACTION`: an empty tail is cut off
/// if it is at least this many pages, or at least this fraction (1/16) of the heap.
const TRUNCATE_MINIMUM: u32 = 1000;
const TRUNCATE_FRACTION: u32 = 16;

/// A page VACUUM may cut off: a heap page without line pointers (step 4 leaves none at the
/// end of a page's array, so a page whose every version is gone has none at all). A new page
/// is not one: it may be a block an insert or a bulk load has just allocated and not yet
/// filled (PostgreSQL's table lock keeps those apart; walnut leaves them be).
fn empty_page(p: &crate::page::PageBuf) -> bool {
    crate::page::kind(p) == Some(crate::page::PageKind::Heap) && crate::page::slot_count(p) == 0
}

/// Step 6 (PostgreSQL's `lazy_truncate_heap`; DESIGN.md, "VACUUM"): cuts the run of empty
/// pages at the end of `rel` off, if it is worth it ([`TRUNCATE_MINIMUM`],
/// [`TRUNCATE_FRACTION`]), and adds the pages cut to `stats.pages_removed`. The caller holds
/// `vacuum_lock`. It gives up, leaving the heap as it is, if the heap grew since the run was
/// found or every page of it got a version meanwhile.
///
/// # Errors
/// `check`'s (only before anything changes); I/O errors and the WAL's. If cutting the file
/// fails after the record is durable, `nblocks` stays at the cut and the file longer; the
/// pages past the cut are empty, an extension zeroes a cached one (`heap::target_page`), and
/// redo cuts the file.
fn truncate_tail(
    st: &Storage,
    rel: &crate::smgr::Relation,
    stats: &mut VacuumStats,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    let n = rel.nblocks.load(Ordering::Acquire);
    let mut cut = n;
    while cut > 0 {
        check()?;
        let pin = st
            .pool
            .pin(rel, BlockNumber(cut - 1), crate::bufpool::ReadMode::Normal)?;
        if !empty_page(&pin.read()) {
            break;
        }
        cut -= 1;
    }
    let freeable = n - cut;
    if freeable == 0 || (freeable < TRUNCATE_MINIMUM && freeable < n / TRUNCATE_FRACTION) {
        return Ok(());
    }
    let progress = crate::progress::vacuum_progress();
    let phase = |ph| {
        if let Some(p) = progress.as_deref() {
            p.phase.store(ph, Ordering::Release);
        }
    };
    phase(PHASE_TRUNCATING_HEAP);
    let r = cut_tail(st, rel, n, cut);
    phase(PHASE_FINAL_CLEANUP);
    stats.pages_removed += r?;
    Ok(())
}

/// Steps 6.1 to 6.5 for the empty pages `[cut, n)` of `rel` (DESIGN.md, "VACUUM"). Returns the
/// pages cut off.
fn cut_tail(st: &Storage, rel: &crate::smgr::Relation, n: u32, cut: u32) -> Result<u32> {
    let _ext = rel.extend_lock.lock();
    if rel.nblocks.load(Ordering::Acquire) != n {
        return Ok(0);
    }
    // Inserts stop choosing the tail (`target_page` keeps below `Relation::insert_end`), and
    // one that latches a tail page from now on leaves it (`heap::past_a_cut`). Readers still
    // go by `nblocks`: the tail may yet hold a version.
    rel.insert_limit.store(cut, Ordering::SeqCst);
    // An insert that latched a tail page before the store may have placed a version: each page
    // again, under its exclusive latch, from the end.
    let keep = (|| {
        for b in (cut..n).rev() {
            let pin = st
                .pool
                .pin(rel, BlockNumber(b), crate::bufpool::ReadMode::Normal)?;
            if !empty_page(&pin.write()) {
                return Ok(b + 1);
            }
        }
        Ok(cut)
    })();
    let keep = match keep {
        Ok(k) if k < n => k,
        other => {
            rel.insert_limit.store(u32::MAX, Ordering::SeqCst);
            return other.map(|_| 0);
        }
    };
    // `[keep, n)` is empty and stays so. Readers stop there from now on (a scan that read `n`
    // goes on and finds empty pages, or new ones once the file is cut). `nblocks` before the
    // limit is lifted: `Relation::insert_end` reads them the other way round.
    rel.nblocks.store(keep, Ordering::SeqCst);
    rel.insert_limit.store(u32::MAX, Ordering::SeqCst);
    // No checkpoint may fix its redo point between the record and the cut (PostgreSQL's
    // `DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE` in `RelationTruncate`): its redo would not
    // cut the file, while the pages dropped unwritten below would be missing from it.
    let _no_redo_point = st.xact.commit_lock.read();
    let logged = st.wal().insert(&mut |_| walnut_wal::Record {
        rmgr: crate::RM_SMGR,
        info: crate::SMGR_TRUNCATE,
        xid: Xid::INVALID,
        flags: 0,
        blocks: vec![],
        main_data: [rel.id.0.to_le_bytes(), keep.to_le_bytes()].concat(),
    });
    let end = match logged {
        Ok((_, end)) => end,
        Err(e) => {
            // Nothing is cut: the empty pages are the heap's again.
            rel.nblocks.store(n, Ordering::SeqCst);
            return Err(e);
        }
    };
    // The record durable first, and with it every record that emptied the tail (PostgreSQL's
    // `RelationTruncate`): a cut that reached the disk before that WAL could outlive it in a
    // crash, and redo would then find the rows of a page gone that the WAL never removed.
    st.wal().flush(end)?;
    st.cut_relation(rel, keep)?;
    Ok(n - keep)
}

/// Steps 2 to 4 for dead line pointers `dead` (block, 1-based slots), every one of which was
/// already dead when step 1 read its page. Returns the blocks of the versions step 3 unlinked.
fn free_dead(
    st: &Storage,
    info: &TableInfo,
    rel: &crate::smgr::Relation,
    dead: &[(BlockNumber, Vec<u16>)],
    stats: &mut VacuumStats,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<Vec<BlockNumber>> {
    let mut unlinked = Vec::new();
    let progress = crate::progress::vacuum_progress();
    let progress = progress.as_deref();
    let set: HashSet<Tid> = dead
        .iter()
        .flat_map(|(block, slots)| {
            slots.iter().map(|&slot| Tid {
                block: *block,
                slot,
            })
        })
        .collect();
    if let Some(index) = info.index {
        // Step 2.
        if let Some(p) = progress {
            p.indexes_processed.store(0, Ordering::Release);
            p.phase.store(PHASE_VACUUMING_INDEXES, Ordering::Release);
        }
        let irel = st.smgr.open(index)?;
        let removed = btree::bulk_delete(st, &irel, &|t| set.contains(&t), check)?;
        if let Some(p) = progress {
            p.indexes_processed.store(1, Ordering::Release);
            p.index_vacuum_count.fetch_add(1, Ordering::Release);
        }
        stats.index_scans += 1;
        stats.index_entries_removed += removed.len() as u64;
        // Step 3, for the members no entry named. (Not in a table without an index: nothing
        // follows its `prev` links, as its reads scan every version.)
        let mut unnamed = set.clone();
        for t in &removed {
            unnamed.remove(t);
        }
        if !unnamed.is_empty() {
            let mut links = Vec::new();
            for b in 0..rel.nblocks.load(Ordering::Acquire) {
                check()?;
                heap::prev_links(
                    st,
                    rel,
                    BlockNumber(b),
                    &|t| unnamed.contains(&t),
                    &mut links,
                )?;
            }
            for (tid, prev) in links {
                check()?;
                if heap::clear_prev(st, rel, tid, prev)? {
                    stats.links_cleared += 1;
                    unlinked.push(tid.block);
                }
            }
        }
    }
    // Step 4.
    if let Some(p) = progress {
        p.phase.store(PHASE_VACUUMING_HEAP, Ordering::Release);
    }
    for (block, slots) in dead {
        check()?;
        heap::vacuum_page(st, rel, *block, slots)?;
        stats.dead_items += slots.len() as u64;
        if let Some(p) = progress {
            p.heap_blks_vacuumed.fetch_add(1, Ordering::Release);
        }
    }
    if let Some(p) = progress {
        // Collected from here on: the next batch's.
        p.num_dead_item_ids.store(0, Ordering::Release);
        p.phase.store(PHASE_SCANNING_HEAP, Ordering::Release);
    }
    Ok(unlinked)
}

/// The costs a vacuum charges per page (`vacuum_cost_page_hit`, `_miss`, `_dirty`), for the
/// cost-based delay (PostgreSQL's `vacuum.c`, `vacuum_delay_point`, and the charges in
/// `bufmgr.c`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCosts {
    /// A page found in the buffer pool.
    pub hit: u32,
    /// A page read from its file.
    pub miss: u32,
    /// A clean page made dirty.
    pub dirty: u32,
}

thread_local! {
    /// The page costs this thread charges; `None` (every thread but an autovacuum worker's):
    /// it charges nothing.
    static COSTS: Cell<Option<PageCosts>> = const { Cell::new(None) };
    /// Cost charged since this thread's last pause.
    static BALANCE: Cell<u64> = const { Cell::new(0) };
}

/// Makes this thread charge `costs` for the pages it touches from now on (`None`: stop), and
/// clears its balance.
pub fn charge_costs(costs: Option<PageCosts>) {
    COSTS.with(|c| c.set(costs));
    BALANCE.with(|b| b.set(0));
}

/// The cost this thread charged since the last [`take_cost_balance`].
pub fn cost_balance() -> u64 {
    BALANCE.with(Cell::get)
}

/// The cost this thread charged since the last call, which clears it.
pub fn take_cost_balance() -> u64 {
    BALANCE.with(|b| b.replace(0))
}

fn charge(pick: fn(PageCosts) -> u32) {
    if let Some(c) = COSTS.with(Cell::get) {
        BALANCE.with(|b| b.set(b.get() + u64::from(pick(c))));
    }
}

/// Charges a buffer hit (the buffer pool calls it).
pub(crate) fn charge_hit() {
    charge(|c| c.hit);
}

/// Charges a page read from its file (the buffer pool calls it).
pub(crate) fn charge_miss() {
    charge(|c| c.miss);
}

/// Charges the dirtying of the page whose dirty flag is `dirty`, if it is still clean (the
/// buffer pool calls it before it sets the flag).
pub(crate) fn charge_dirty(dirty: &AtomicBool) {
    if COSTS.with(Cell::get).is_some() && !dirty.load(Ordering::Relaxed) {
        charge(|c| c.dirty);
    }
}

/// The report of a VACUUM of `info` that did `s` in `elapsed`, in the shape of PostgreSQL's
/// (`heap_vacuum_rel`'s), after `heading`: "finished vacuuming" for `VACUUM VERBOSE`'s INFO,
/// "automatic vacuum of table" for `log_autovacuum_min_duration`'s line. Lines are separated
/// by `\n`; the database is named `postgres`, the schema `public`.
pub fn report(
    heading: &str,
    info: &TableInfo,
    s: &VacuumStats,
    elapsed: std::time::Duration,
) -> String {
    let pct = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    let mut m = format!(
        "{heading} \"postgres.public.{}\": index scans: {}\n\
         pages: {} removed, {} remain, {} scanned ({:.2}% of total)\n\
         tuples: {} removed, {} remain, {} are dead but not yet removable\n\
         new relfrozenxid: {}\n\
         frozen: {} pages from table ({:.2}% of total) had {} tuples frozen\n\
         dead item identifiers: {} removed",
        info.def.name,
        s.index_scans,
        s.pages_removed,
        s.pages.saturating_sub(s.pages_removed),
        s.pages_scanned,
        pct(s.pages_scanned as u64, s.pages as u64),
        s.removed,
        s.live + s.recently_dead,
        s.recently_dead,
        s.relfrozenxid.0,
        s.pages_frozen,
        pct(s.pages_frozen as u64, s.pages as u64),
        s.frozen,
        s.dead_items,
    );
    if info.index.is_some() {
        m.push_str(&format!(
            "\nindex \"{}\": {} entries removed",
            info.index_name(),
            s.index_entries_removed
        ));
    }
    m.push_str(&format!(
        "\nsystem usage: elapsed: {:.2} s",
        elapsed.as_secs_f64()
    ));
    m
}
