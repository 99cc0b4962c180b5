//! VACUUM of one table (PostgreSQL's `vacuumlazy.c`, `heap_vacuum_rel`; the argument is in
//! DESIGN.md, "VACUUM").
//!
//! Pruning ([`heap::prune`]) leaves two things behind that only a pass over the whole table
//! can remove: dead line pointers (deleted rows, aborted inserts), which the primary-key index
//! may still name, and the `prev` links of newer versions that name them. VACUUM:
//! 1. **Scans the heap** ([`heap::vacuum_scan_page`]): prunes every page and lists its dead
//!    line pointers, the set `D`.
//! 2. **Scans the index** ([`btree::bulk_delete`]): removes every entry that names a member of
//!    `D`. A member no entry named belonged to a key that was inserted again: a version of it
//!    may link to the member with its `prev`.
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

use crate::catalog::TableInfo;
use crate::progress::{
    VACUUM_FINAL_CLEANUP as PHASE_FINAL_CLEANUP, VACUUM_SCANNING_HEAP as PHASE_SCANNING_HEAP,
    VACUUM_VACUUMING_HEAP as PHASE_VACUUMING_HEAP,
    VACUUM_VACUUMING_INDEXES as PHASE_VACUUMING_INDEXES,
};
use crate::{btree, heap, Storage};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Error, RelFileId, Result, SqlState, Tid};

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
}

/// VACUUMs table `info` (module documentation). `check` runs between pages and index leaves:
/// its error (a cancel) stops the VACUUM where it is, which leaves everything consistent (every
/// step is logged page by page, and each is correct alone).
///
/// # Errors
/// 25006 on a hot standby; `check`'s; corruption and I/O errors; the WAL's.
pub fn vacuum_table(
    st: &Storage,
    info: &TableInfo,
    check: &mut dyn FnMut() -> Result<()>,
) -> Result<VacuumStats> {
    if st.in_recovery() {
        return Err(Error::user(
            SqlState::READ_ONLY_SQL_TRANSACTION,
            "cannot execute VACUUM during recovery",
        ));
    }
    let mut stats = VacuumStats::default();
    if info.relfile == RelFileId::CATALOG {
        // The catalog cache reads it with snapshots of its own, which the horizon ignores.
        return Ok(stats);
    }
    let rel = st.smgr.open(info.relfile)?;
    let _one_at_a_time = rel.vacuum_lock.lock();
    let started = std::time::Instant::now();
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
        let scan = heap::vacuum_scan_page(st, &rel, BlockNumber(b), info.index.is_none())?;
        stats.pages_scanned += 1;
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
            unlinked.extend(free_dead(st, info, &rel, &batch, &mut stats, check)?);
            count = 0;
        }
    }
    if count > 0 {
        unlinked.extend(free_dead(st, info, &rel, &dead, &mut stats, check)?);
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
            let scan = heap::vacuum_scan_page(st, &rel, b, info.index.is_none())?;
            stats.removed += scan.removed as u64;
            if scan.removed > 0 {
                dead.push((b, scan.dead));
            }
        }
        if dead.is_empty() {
            break;
        }
        unlinked = free_dead(st, info, &rel, &dead, &mut stats, check)?;
    }
    if let Some(p) = progress {
        p.phase.store(PHASE_FINAL_CLEANUP, Ordering::Release);
    }
    st.table_stats.of(info.table_id).vacuumed(
        false,
        walnut_common::value::now_timestamp(),
        started.elapsed().as_millis() as u64,
        stats.live,
        stats.recently_dead,
    );
    Ok(stats)
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
