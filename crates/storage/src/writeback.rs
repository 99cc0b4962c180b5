//! Write-back batches: pages written to the page cache are handed to the kernel for writing
//! in sorted, combined ranges once `*_flush_after` of them have gathered, so that dirty data
//! never piles up in the page cache for one big fsync to push into the device queue ahead of
//! the WAL's flushes. After PostgreSQL's `WritebackContext` (`bufmgr.c`:
//! `ScheduleBufferTagForWriteback`, `IssuePendingWritebacks`).
//!
//! Each writer keeps its own batch: the checkpointer (`checkpoint_flush_after`), the background
//! writer (`bgwriter_flush_after`) and each session thread (`backend_flush_after`). With
//! `backend_flush_after = 0`, the default, a session does not wait for write-back itself: the
//! pages it evicted go to one shared, bounded queue ([`PendingWriteback`]) that the background
//! writer drains, oldest first, within the share of the device the WAL leaves (walnut's own;
//! PostgreSQL leaves them to the kernel until the checkpoint's fsync).

use crate::bufpool::BufTag;
use crate::smgr::Smgr;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use walnut_common::BlockNumber;

/// Most pages the shared queue holds, 16384 pages (128 MiB of page cache). When it is full
/// (`bgwriter_flush_after = 0`, or a background writer that cannot keep up), the oldest page
/// is forgotten: the kernel writes it back on its own timer, or the checkpoint's fsync does.
/// A session never waits for write-back it did not ask for.
pub const PENDING_WRITEBACK_MAX: usize = 16384;

/// The pages sessions evicted into the page cache that nobody has asked the kernel to write
/// back yet, oldest first (bounded by [`PENDING_WRITEBACK_MAX`]).
#[derive(Debug, Default)]
pub struct PendingWriteback {
    queue: Mutex<VecDeque<BufTag>>,
}

impl PendingWriteback {
    /// Pages queued.
    pub fn len(&self) -> usize {
        self.queue.lock().len()
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `tag`, forgetting the oldest page if the queue is full.
    pub fn push(&self, tag: BufTag) {
        let mut q = self.queue.lock();
        if q.len() >= PENDING_WRITEBACK_MAX {
            q.pop_front();
        }
        q.push_back(tag);
    }

    /// Removes and returns up to `n` of the oldest pages.
    pub fn take_oldest(&self, n: usize) -> Vec<BufTag> {
        let mut q = self.queue.lock();
        let n = n.min(q.len());
        q.drain(..n).collect()
    }
}

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
        let n = write_back(smgr, &mut self.pending);
        self.pending.clear();
        n
    }
}

/// Sorts `tags`, merges adjacent blocks of a file into ranges and asks the kernel to write
/// each range back, waiting for it. Returns the ranges issued.
///
/// # Panics
/// PANICs if a write-back fails (see [`Smgr::flush_range`]).
pub fn write_back(smgr: &Smgr, tags: &mut [BufTag]) -> usize {
    let ranges = coalesce(tags);
    for &(rel, first, n) in &ranges {
        // A relation dropped since is no longer open: nothing to write back.
        if let Some(rel) = smgr.open_if_cached(rel) {
            smgr.flush_range(&rel, first, n);
        }
    }
    ranges.len()
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

/// Notes a page a session wrote itself (an eviction): into the session thread's batch with
/// `backend_flush_after` set, else into the shared queue for the background writer. Nothing
/// with `io_direct = data`, whose writes bypass the page cache.
///
/// # Panics
/// PANICs if a write-back fails (see [`Smgr::flush_range`]).
pub(crate) fn backend_wrote(smgr: &Smgr, tag: BufTag) {
    if smgr.direct_io() {
        return;
    }
    let limit = smgr.backend_flush_after.load(Ordering::Relaxed) as usize;
    if limit == 0 {
        smgr.pending_writeback.push(tag);
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
    fn the_shared_queue_hands_out_the_oldest_pages_and_forgets_the_oldest_when_full() {
        let q = PendingWriteback::default();
        for b in 0..PENDING_WRITEBACK_MAX as u32 + 3 {
            q.push(tag(1, b));
        }
        assert_eq!(q.len(), PENDING_WRITEBACK_MAX);
        assert_eq!(q.take_oldest(2), vec![tag(1, 3), tag(1, 4)]);
        let rest = q.take_oldest(usize::MAX);
        assert_eq!(rest.len(), PENDING_WRITEBACK_MAX - 2);
        assert_eq!(rest.last(), Some(&tag(1, PENDING_WRITEBACK_MAX as u32 + 2)));
        assert!(q.is_empty());
    }

    #[test]
    fn evictions_go_to_the_shared_queue_unless_direct_io_or_backend_flush_after() {
        let vfs: std::sync::Arc<dyn walnut_io::Vfs> = std::sync::Arc::new(walnut_io::RealVfs);
        let buffered = Smgr::new(vfs.clone(), "/nonexistent".into());
        backend_wrote(&buffered, tag(1, 1));
        backend_wrote(&buffered, tag(1, 2));
        assert_eq!(buffered.pending_writeback.len(), 2);
        // A session's own batch (its relation is not open: issuing it writes nothing back).
        buffered.backend_flush_after.store(8, Ordering::Relaxed);
        backend_wrote(&buffered, tag(1, 3));
        assert_eq!(buffered.pending_writeback.len(), 2);
        let direct = Smgr::new(vfs, "/nonexistent".into()).with_direct_io(true);
        backend_wrote(&direct, tag(1, 1));
        assert!(direct.pending_writeback.is_empty());
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
