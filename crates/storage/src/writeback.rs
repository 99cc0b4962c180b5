//! Write-back batches: pages written to the page cache are handed to the kernel for writing
//! in sorted, combined ranges once `*_flush_after` of them have gathered, so that dirty data
//! never piles up in the page cache for one big fsync to push into the device queue ahead of
//! the WAL's flushes. After PostgreSQL's `WritebackContext` (`bufmgr.c`:
//! `ScheduleBufferTagForWriteback`, `IssuePendingWritebacks`).
//!
//! Each writer keeps its own batch: the checkpointer (`checkpoint_flush_after`), the background
//! writer (`bgwriter_flush_after`) and each session thread (`backend_flush_after`, 0 by default:
//! sessions' evictions are left to the background writer's page-cache sweep).

use crate::bufpool::BufTag;
use crate::smgr::Smgr;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use walnut_common::BlockNumber;

/// A batch of written pages awaiting write-back.
#[derive(Debug, Default)]
pub struct Writeback {
    /// Pages to gather before issuing (`*_flush_after`); 0 disables write-back.
    limit: usize,
    pending: Vec<BufTag>,
}

impl Writeback {
    /// An empty batch that issues after `limit` pages (0: never).
    pub fn new(limit: usize) -> Writeback {
        Writeback {
            limit,
            pending: Vec::with_capacity(limit),
        }
    }

    /// Changes the batch size (a reload); takes effect at the next page.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Notes that `tag` was written; issues the batch once it is full.
    ///
    /// # Panics
    /// PANICs if a write-back fails (see [`Smgr::flush_range`]).
    pub fn add(&mut self, smgr: &Smgr, tag: BufTag) {
        if self.limit == 0 {
            return;
        }
        self.pending.push(tag);
        if self.pending.len() >= self.limit {
            self.issue(smgr);
        }
    }

    /// Issues the batch: sorts it, merges adjacent blocks of a file into one range, and asks
    /// the kernel to write each range back, waiting for it. Returns the ranges issued.
    ///
    /// # Panics
    /// PANICs if a write-back fails (see [`Smgr::flush_range`]).
    pub fn issue(&mut self, smgr: &Smgr) -> usize {
        let ranges = coalesce(&mut self.pending);
        self.pending.clear();
        for &(rel, first, n) in &ranges {
            // A relation dropped since is no longer open: nothing to write back.
            if let Some(rel) = smgr.open_if_cached(rel) {
                smgr.flush_range(&rel, first, n);
            }
        }
        ranges.len()
    }
}

/// Sorts `tags` and merges runs of consecutive blocks of one file: (file, first block, blocks).
fn coalesce(tags: &mut [BufTag]) -> Vec<(walnut_common::RelFileId, BlockNumber, u32)> {
    tags.sort_unstable_by_key(|t| (t.rel.0, t.block.0));
    let mut out: Vec<(walnut_common::RelFileId, BlockNumber, u32)> = Vec::new();
    for t in tags.iter() {
        match out.last_mut() {
            Some((rel, first, n)) if *rel == t.rel && first.0 + *n >= t.block.0 => {
                *n = (*n).max(t.block.0 - first.0 + 1);
            }
            _ => out.push((t.rel, t.block, 1)),
        }
    }
    out
}

thread_local! {
    /// The calling session thread's batch, and the storage manager it belongs to (by address,
    /// so that a thread serving two data directories, as in tests, never mixes them).
    static BACKEND: RefCell<(usize, Writeback)> = RefCell::new((0, Writeback::default()));
}

/// Notes a page a session wrote itself (an eviction), for `backend_flush_after`.
///
/// # Panics
/// PANICs if a write-back fails (see [`Smgr::flush_range`]).
pub(crate) fn backend_wrote(smgr: &Smgr, tag: BufTag) {
    let limit = smgr.backend_flush_after.load(Ordering::Relaxed) as usize;
    if limit == 0 {
        return;
    }
    BACKEND.with(|b| {
        let (owner, wb) = &mut *b.borrow_mut();
        let me = smgr as *const Smgr as usize;
        if *owner != me {
            *owner = me;
            *wb = Writeback::default();
        }
        wb.set_limit(limit);
        wb.add(smgr, tag);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use walnut_common::RelFileId;

    fn tag(rel: u32, block: u32) -> BufTag {
        BufTag {
            rel: RelFileId(rel),
            block: BlockNumber(block),
        }
    }

    #[test]
    fn adjacent_blocks_of_a_file_merge_into_one_range() {
        let mut v = vec![
            tag(2, 7),
            tag(1, 5),
            tag(1, 3),
            tag(1, 4),
            tag(1, 4),
            tag(2, 9),
        ];
        assert_eq!(
            coalesce(&mut v),
            vec![
                (RelFileId(1), BlockNumber(3), 3),
                (RelFileId(2), BlockNumber(7), 1),
                (RelFileId(2), BlockNumber(9), 1),
            ]
        );
    }
}
