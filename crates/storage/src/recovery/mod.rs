//! Redo recovery (PostgreSQL's `StartupXLOG` / `PerformWalRecovery`).
//!
//! From the control file's redo point, every record is read and applied, by this thread
//! (`recovery_workers = 1`) or by the parallel redo of [`parallel`], which applies each
//! block's changes in a worker that owns the block:
//! - each block reference: with a full-page image, the image is restored (the page is not
//!   read: a torn page on disk is repaired this way); with `will_init`, the page is initialized;
//!   otherwise the page is read and the change applied only if the page LSN is older than the
//!   record's end (so redo is idempotent). The page LSN is then set to the record's end.
//!   Blocks of relation files that no longer exist (dropped later in the log) are skipped.
//! - transaction records set the durable status and remove dropped relation files;
//! - relation-create records create the file; checkpoint records advance counters.
//!
//! Redo ends at the first invalid record (a torn or zeroed tail). The checkpoint record named
//! by the control file must be among the records read, or start-up fails.

pub mod parallel;
pub mod prefetch;
pub(crate) mod primitives;

use crate::bufpool::ReadMode;
use crate::control::ControlFile;
use crate::page;
use crate::{
    btree, heap, Storage, RM_SMGR, RM_XACT, RM_XLOG, SMGR_CREATE, SMGR_TRUNCATE, XACT_ABORT,
    XACT_COMMIT, XLOG_CHECKPOINT,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::{Error, Lsn, RelFileId, Result, Xid};
use walnut_wal::{BlockRef, DecodedRecord, Record, RmgrId, WalReader};

/// What redo found.
pub struct RedoEnd {
    /// End of the last valid record: where new WAL goes.
    pub end_lsn: Lsn,
    /// Records applied.
    pub records_replayed: u64,
    /// Threads that applied them: 1 for the serial redo, else the parallel redo's workers
    /// (`recovery_workers`).
    pub workers: usize,
    /// Time the redo loop took (reading, decoding and applying), from opening the WAL at the
    /// redo point to its end.
    pub elapsed: std::time::Duration,
}

/// Parses the list of relation files in a transaction record's main data.
///
/// # Errors
/// Corruption if truncated.
pub fn parse_rel_list(d: &[u8]) -> Result<Vec<RelFileId>> {
    let n = d
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)
        .unwrap_or(0);
    if d.len() < 4 + 4 * n {
        return Err(Error::corruption(
            "transaction record relation list is truncated",
        ));
    }
    Ok((0..n)
        .map(|i| {
            RelFileId(u32::from_le_bytes(
                d[4 + 4 * i..8 + 4 * i].try_into().expect("4"),
            ))
        })
        .collect())
}

/// Encodes a relation list for a transaction record.
pub fn encode_rel_list(rels: &[RelFileId]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + 4 * rels.len());
    v.extend_from_slice(&(rels.len() as u32).to_le_bytes());
    for r in rels {
        v.extend_from_slice(&r.0.to_le_bytes());
    }
    v
}

/// Runs redo from `ctl.redo_lsn` to the end of valid WAL: serially when the configuration's
/// `recovery_workers` is 1, else in parallel ([`parallel::redo`]). The pages come out the
/// same either way.
///
/// # Errors
/// Corruption (including a missing checkpoint record) and I/O errors; an error applying a
/// record names the record's LSN.
pub fn redo(st: &Arc<Storage>, ctl: &ControlFile) -> Result<RedoEnd> {
    let started = std::time::Instant::now();
    let mut reader = redo_reader(st, ctl.redo_lsn)?;
    let mut saw_checkpoint = !ctl.checkpoint_lsn.is_valid();
    let workers = st.config().recovery_workers.max(1);
    let interval = std::time::Duration::from_millis(st.config().log_startup_progress_interval_ms);
    let mut progress = Progress::new(started, ctl.redo_lsn, interval);
    let n = replay_to_end(st, &mut reader, workers, |lsn, _| {
        saw_checkpoint |= lsn == ctl.checkpoint_lsn;
        if let Some(line) = progress.record(lsn) {
            tracing::info!("{line}");
        }
    })?;
    if !saw_checkpoint {
        return Err(Error::corruption(format!(
            "could not locate a valid checkpoint record at {}",
            ctl.checkpoint_lsn
        )));
    }
    Ok(RedoEnd {
        end_lsn: reader.end_lsn(),
        records_replayed: n,
        workers,
        elapsed: started.elapsed(),
    })
}

/// Crash recovery's progress lines (PostgreSQL 15's `ereport_startup_progress` "redo in
/// progress, elapsed time: S s, current LSN: X", with walnut's rates added): one each
/// `log_startup_progress_interval`.
pub struct Progress {
    started: std::time::Instant,
    redo: Lsn,
    /// Zero: no lines.
    interval: std::time::Duration,
    next: std::time::Instant,
    records: u64,
}

impl Progress {
    /// Progress of a redo that started at `started` from the redo point `redo`, reported
    /// every `interval` (zero: never).
    pub fn new(started: std::time::Instant, redo: Lsn, interval: std::time::Duration) -> Progress {
        Progress {
            started,
            redo,
            interval,
            next: started + interval,
            records: 0,
        }
    }

    /// Counts the record at `lsn` (read in WAL order); returns the line to log if an
    /// interval has passed since the last one. Looks at the clock once per 256 records.
    pub fn record(&mut self, lsn: Lsn) -> Option<String> {
        self.records += 1;
        if self.interval.is_zero() || !self.records.is_multiple_of(256) {
            return None;
        }
        self.at(std::time::Instant::now(), lsn)
    }

    /// The line for the record at `lsn` read at `now`, if `now` is past the next report.
    pub fn at(&mut self, now: std::time::Instant, lsn: Lsn) -> Option<String> {
        if self.interval.is_zero() || now < self.next {
            return None;
        }
        while self.next <= now {
            self.next += self.interval;
        }
        let s = now.duration_since(self.started).as_secs_f64();
        let mb = lsn.0.saturating_sub(self.redo.0) as f64 / (1u64 << 20) as f64;
        Some(format!(
            "redo in progress, elapsed time: {s:.2} s, current LSN: {lsn}, {} records ({:.0}/s), {mb:.0} MB of WAL ({:.1} MB/s)",
            self.records,
            self.records as f64 / s.max(1e-9),
            mb / s.max(1e-9),
        ))
    }
}

/// A reader of the data directory's WAL from `start` (a record's start) for redo: LZ4 images
/// stay compressed, for the thread that applies each block to decompress into its buffer
/// ([`apply_block`]).
///
/// # Errors
/// As [`WalReader::open`].
pub fn redo_reader(st: &Storage, start: Lsn) -> Result<WalReader> {
    let mut reader = WalReader::open(st.vfs.clone(), st.dir.join("wal"), start)?;
    reader.defer_image_decompression();
    Ok(reader)
}

/// Applies every record `reader` returns, with `workers` threads applying blocks (1: on the
/// calling thread), calling `note` with each record's LSN and what it did, in WAL order.
/// For crash recovery and a standby's start, when no session reads. Returns the number of
/// records.
///
/// # Errors
/// The reader's; the first failure applying a record, naming it.
pub fn replay_to_end(
    st: &Arc<Storage>,
    reader: &mut WalReader,
    workers: usize,
    mut note: impl FnMut(Lsn, &Applied),
) -> Result<u64> {
    let pipeline = if workers > 1 {
        parallel::IN_FLIGHT_BOUND
    } else {
        0
    };
    let mut reader = prefetch::LookAhead::new(st, reader, pipeline);
    if workers > 1 {
        return parallel::redo(st, &mut reader, workers, note);
    }
    let mut n = 0u64;
    while let Some(rec) = reader.next_record(st)? {
        let a = apply(st, &rec).map_err(|e| at_record(rec.lsn, e))?;
        note(rec.lsn, &a);
        n += 1;
    }
    Ok(n)
}

/// The error of applying the record at `lsn`, naming it.
pub(crate) fn at_record(lsn: Lsn, e: Error) -> Error {
    Error {
        message: format!("redo of record at {lsn} failed: {}", e.message),
        ..e
    }
}

/// What [`apply`] did beyond the pages, for a standby's replay (crash recovery ignores it).
#[derive(Clone, Copy, Debug, Default)]
pub struct Applied {
    /// A commit record: its transaction is now visible to new snapshots.
    pub commit: bool,
    /// The record changed a page of the catalog (its transaction's commit changes tables).
    pub catalog: bool,
    /// A checkpoint record, where a restartpoint may be made.
    pub checkpoint: Option<CheckpointSeen>,
}

/// A checkpoint record replayed: where a standby may make a restartpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointSeen {
    /// The record's LSN.
    pub lsn: Lsn,
    /// Its redo point.
    pub redo: Lsn,
    /// Its oldest xid (the status store forgets the xids below it; the first normal xid in a
    /// record written before it carried one).
    pub oldest_xid: Xid,
}

/// Commit record flag: the committing session waits for its synchronous standbys to replay
/// the record (`synchronous_commit = remote_apply`), so a standby reports its replay at once
/// (PostgreSQL's `XACT_COMPLETION_APPLY_FEEDBACK`).
pub const COMMIT_APPLY_FEEDBACK: u8 = 0x01;

/// A commit record's main data: the relation files to remove (as [`encode_rel_list`]), the
/// commit time (i64 LE, µs since 2000-01-01 UTC, PostgreSQL's `TimestampTz`) and a flags byte
/// ([`COMMIT_APPLY_FEEDBACK`]).
pub fn encode_commit(rels: &[RelFileId], timestamp: i64, flags: u8) -> Vec<u8> {
    let mut v = encode_rel_list(rels);
    v.extend_from_slice(&timestamp.to_le_bytes());
    v.push(flags);
    v
}

/// Where a commit record's main data has its commit time: after the relation list.
fn commit_time_at(main_data: &[u8]) -> Option<usize> {
    let n = main_data
        .get(..4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")) as usize)?;
    Some(4 + 4 * n)
}

/// The commit time in a commit record's main data (after the relation list): µs since
/// 2000-01-01 UTC (PostgreSQL's `TimestampTz`); `None` in records of older versions.
pub fn commit_timestamp(main_data: &[u8]) -> Option<i64> {
    let at = commit_time_at(main_data)?;
    main_data
        .get(at..at + 8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8")))
}

/// The flags byte of a commit record's main data (after the commit time); 0 in records of
/// older versions, which have none.
pub fn commit_flags(main_data: &[u8]) -> u8 {
    commit_time_at(main_data)
        .and_then(|at| main_data.get(at + 8).copied())
        .unwrap_or(0)
}

/// Applies one record. A B-tree structure change (`BTREE_SMO`, the only multi-page record)
/// is applied under the index's `tree_lock` held exclusively, as the primary's split holds
/// it, so a search on a hot standby sees the tree before the split or after it, never
/// between; a change of an index's meta page (block 0) makes the cached root be read again.
///
/// # Errors
/// Corruption if the record does not fit the pages; I/O errors.
pub fn apply(st: &Storage, rec: &DecodedRecord) -> Result<Applied> {
    let r = &rec.record;
    let mut applied = Applied::default();
    if r.xid.is_valid() {
        st.xact.observe_xid(r.xid);
    }
    let smo_rel = match (r.rmgr, r.blocks.first()) {
        (btree::RM_BTREE, Some(b)) if r.info == btree::BTREE_SMO && st.smgr.exists(b.rel) => {
            Some(st.smgr.open(b.rel)?)
        }
        _ => None,
    };
    let _tree = smo_rel.as_ref().map(|rel| rel.tree_lock.write());
    let nblocks = r.blocks.len();
    for (id, b) in r.blocks.iter().enumerate() {
        if b.rel == RelFileId::CATALOG {
            applied.catalog = true;
        }
        apply_block(st, r.rmgr, r.info, (id, nblocks), b, rec.end_lsn)?;
    }
    apply_main(st, rec.lsn, r, &mut applied)?;
    Ok(applied)
}

/// Applies block reference `id` of `nblocks` of a record of `rmgr`/`info` that ends at
/// `end_lsn`: restores its full-page image, or initializes the page (`will_init`), or applies
/// its data if the page's LSN is older than `end_lsn`; then sets the page LSN to `end_lsn`.
/// A block of a relation file that does not exist (dropped later in the log) is skipped.
/// It reads and writes that one page only, so two blocks' redo can run on two threads;
/// one block's records must apply in WAL order.
///
/// # Errors
/// Corruption if the data does not fit the page or an image is not `BLCKSZ` bytes; I/O
/// errors reading the page.
pub fn apply_block(
    st: &Storage,
    rmgr: RmgrId,
    info: u8,
    (id, nblocks): (usize, usize),
    b: &BlockRef,
    end_lsn: Lsn,
) -> Result<()> {
    let rel = match st.smgr.open(b.rel) {
        Ok(rel) => rel,
        Err(_) if !st.smgr.exists(b.rel) => return Ok(()),
        Err(e) => return Err(e),
    };
    st.smgr.note_block(&rel, b.block);
    let mode = if b.image.is_some() || b.will_init {
        ReadMode::Zero
    } else {
        ReadMode::Normal
    };
    let pin = st.pool.pin(&rel, b.block, mode)?;
    let mut p = pin.write();
    if b.restore_image(&mut p[..])? {
        page::check_header(&p)?;
    } else {
        if b.will_init {
            match rmgr {
                heap::RM_HEAP => heap::init_page(&mut p),
                crate::seq::RM_SEQ => crate::seq::init_page(&mut p),
                _ => return Err(Error::corruption(
                    "will_init block without an image in a record of neither a heap nor a sequence",
                )),
            }
        } else if page::lsn(&p) >= end_lsn {
            // Written out with this change already: its room is still news to the map.
            if rmgr == heap::RM_HEAP {
                record_free_space(&rel, info, b.block, &p);
            }
            return Ok(());
        }
        match rmgr {
            heap::RM_HEAP => heap::redo_block(info, id, nblocks, &b.data, &mut p)?,
            btree::RM_BTREE => btree::redo_block(info, &b.data, &mut p)?,
            crate::seq::RM_SEQ => crate::seq::redo_block(info, &b.data, &mut p)?,
            _ => {
                return Err(Error::corruption(format!(
                    "block reference in record of resource manager {}",
                    rmgr.0
                )))
            }
        }
    }
    page::set_lsn(&mut p, end_lsn);
    pin.mark_dirty();
    if rmgr == heap::RM_HEAP {
        record_free_space(&rel, info, b.block, &p);
    }
    if rmgr == btree::RM_BTREE && b.block.0 == 0 {
        rel.btree_root.store(u32::MAX, Ordering::Release);
    }
    Ok(())
}

/// Records in the free-space map the room a heap record's redo left on its page (held
/// latched; also when the page already had the change), as PostgreSQL's
/// `heap_xlog_prune_freeze`, `heap_xlog_insert` and `heap_xlog_update` do: always after
/// pruning or vacuum, which free space; after an insert or an update (either of its pages)
/// only when the page is nearly full (under a fifth of a page), so that a standby or a
/// recovered primary does not send inserts to a page the map says has room and that has
/// none.
fn record_free_space(
    rel: &crate::smgr::Relation,
    info: u8,
    block: walnut_common::BlockNumber,
    p: &page::PageBuf,
) {
    if page::kind(p) != Some(page::PageKind::Heap) {
        return;
    }
    let free = page::free_space(p);
    let freed = matches!(info, heap::HEAP_PRUNE | heap::HEAP_VACUUM);
    let filled =
        matches!(info, heap::HEAP_INSERT | heap::HEAP_UPDATE) && free < walnut_common::BLCKSZ / 5;
    if freed || filled {
        rel.fsm.record(block, free);
    }
}

/// Whether applying the record's main data ([`apply_main`]) must wait until every earlier
/// record's blocks are applied: a transaction record that removes relation files (a page
/// of one could otherwise be written after its file is gone), and a truncation (a page past
/// the cut could be written after it). Undecodable main data counts as yes; [`apply_main`]
/// then reports it.
pub fn main_needs_barrier(r: &Record) -> bool {
    matches!(
        (r.rmgr, r.info),
        (RM_XACT, XACT_COMMIT) | (RM_XACT, XACT_ABORT)
    ) && parse_rel_list(&r.main_data).map_or(true, |rels| !rels.is_empty())
        || (r.rmgr, r.info) == (RM_SMGR, SMGR_TRUNCATE)
}

/// Applies what a record at `lsn` does beyond its blocks: transaction status and relation
/// file removal, relation file creation, a checkpoint's counters. Notes it in `applied`.
///
/// # Errors
/// Corruption if the main data is truncated; I/O errors creating or removing files.
pub fn apply_main(st: &Storage, lsn: Lsn, r: &Record, applied: &mut Applied) -> Result<()> {
    match (r.rmgr, r.info) {
        (RM_XACT, XACT_COMMIT) => {
            st.xact.redo_commit(r.xid);
            applied.commit = true;
            for rel in parse_rel_list(&r.main_data)? {
                st.remove_relation(rel)?;
            }
        }
        (RM_XACT, XACT_ABORT) => {
            st.xact.redo_abort(r.xid);
            for rel in parse_rel_list(&r.main_data)? {
                st.remove_relation(rel)?;
            }
        }
        (RM_SMGR, SMGR_TRUNCATE) => {
            let d = &r.main_data;
            let (Some(id), Some(n)) = (d.get(..4), d.get(4..8)) else {
                return Err(Error::corruption("smgr truncate record is truncated"));
            };
            let id = RelFileId(u32::from_le_bytes(id.try_into().expect("4")));
            let n = u32::from_le_bytes(n.try_into().expect("4"));
            // A file dropped later in the WAL may be gone already (PostgreSQL's
            // `smgr_redo` skips it too).
            if st.smgr.exists(id) {
                let rel = st.smgr.open(id)?;
                let _ext = rel.extend_lock.lock();
                st.cut_relation(&rel, n)?;
            }
        }
        (RM_SMGR, SMGR_CREATE) => {
            let id = r
                .main_data
                .get(..4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
                .ok_or_else(|| Error::corruption("smgr create record is truncated"))?;
            st.smgr.create(RelFileId(id))?;
            st.next_relfile.fetch_max(id + 1, Ordering::AcqRel);
        }
        (RM_XLOG, XLOG_CHECKPOINT) => {
            let d = &r.main_data;
            if d.len() >= 20 {
                applied.checkpoint = Some(CheckpointSeen {
                    lsn,
                    redo: Lsn(u64::from_le_bytes(d[0..8].try_into().expect("8"))),
                    oldest_xid: d.get(20..28).map_or(Xid::FIRST_NORMAL, |b| {
                        Xid(u64::from_le_bytes(b.try_into().expect("8")))
                    }),
                });
                st.xact.observe_xid(Xid(
                    u64::from_le_bytes(d[8..16].try_into().expect("8")).saturating_sub(1)
                ));
                st.next_relfile.fetch_max(
                    u32::from_le_bytes(d[16..20].try_into().expect("4")),
                    Ordering::AcqRel,
                );
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_main_data_round_trips_and_older_records_read_as_no_time_and_no_flags() {
        let rels = [RelFileId(16384), RelFileId(16390)];
        let m = encode_commit(&rels, -42, COMMIT_APPLY_FEEDBACK);
        assert_eq!(m.len(), 4 + 8 + 8 + 1);
        assert_eq!(commit_timestamp(&m), Some(-42));
        assert_eq!(commit_flags(&m), COMMIT_APPLY_FEEDBACK);
        let m = encode_commit(&[], 7, 0);
        assert_eq!((commit_timestamp(&m), commit_flags(&m)), (Some(7), 0));
        // Older versions: the relation list alone, or with the time but no flags.
        let old = encode_rel_list(&rels);
        assert_eq!((commit_timestamp(&old), commit_flags(&old)), (None, 0));
        let mut old = encode_rel_list(&[]);
        old.extend_from_slice(&9i64.to_le_bytes());
        assert_eq!((commit_timestamp(&old), commit_flags(&old)), (Some(9), 0));
        assert_eq!((commit_timestamp(&[1]), commit_flags(&[])), (None, 0));
    }

    #[test]
    fn progress_lines_come_once_per_interval_with_lsn_and_rates() {
        let t0 = std::time::Instant::now();
        let s = std::time::Duration::from_secs;
        let mut p = Progress::new(t0, Lsn(1 << 20), s(10));
        p.records = 99_999;
        assert_eq!(p.at(t0 + s(9), Lsn(2 << 20)), None);
        p.records += 1;
        let line = p.at(t0 + s(10), Lsn(21 << 20)).expect("a line at 10 s");
        assert_eq!(
            line,
            format!(
                "redo in progress, elapsed time: 10.00 s, current LSN: {}, 100000 records \
                 (10000/s), 20 MB of WAL (2.0 MB/s)",
                Lsn(21 << 20)
            )
        );
        // Not again before the next interval; a late tick skips the intervals it missed.
        assert_eq!(p.at(t0 + s(19), Lsn(22 << 20)), None);
        assert!(p.at(t0 + s(35), Lsn(23 << 20)).is_some());
        assert_eq!(p.at(t0 + s(39), Lsn(23 << 20)), None);
        assert!(p.at(t0 + s(40), Lsn(23 << 20)).is_some());
        // Off.
        let mut off = Progress::new(t0, Lsn(0), s(0));
        assert_eq!(off.at(t0 + s(100), Lsn(1)), None);
        assert!((0..1000).all(|i| off.record(Lsn(i)).is_none()));
    }
}
