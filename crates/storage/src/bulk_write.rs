//! Whole new pages written straight into a relation file that the writing transaction created,
//! bypassing the buffer pool: PostgreSQL 17's `bulk_write.c` (`smgr_bulk_start_rel`,
//! `smgr_bulk_write`, `smgr_bulk_finish`). Used by COPY into a table created or truncated in the
//! same transaction (`heap::BulkInsert`) and by the bottom-up index build (`btree::build`).
//!
//! No other session can read or write such a file's blocks before the transaction commits, so
//! the pages need no pin, latch or buffer: each batch is one WAL record of full-page images
//! ([`Storage::log_page_images`]), then the pages, with their LSN and checksum set, are written
//! to the file, each run of consecutive blocks in one write (`Smgr::write_blocks`, which
//! registers the file for the next checkpoint's fsync after the write). The writes do not wait for the WAL: until the commit, which flushes the WAL past
//! every record of the load, the file is named by no committed catalog row, and after a crash
//! it is an orphan.
//!
//! Durability at commit ([`BulkWriter::finish`]): redo restores every image whose record lies
//! after the redo point it starts from. A checkpoint that began during the load has a redo point
//! past some records, and may have drained the set of files to fsync before some of their pages
//! were written; so if the redo point moved since [`BulkWriter::new`], `finish` fsyncs the file
//! itself (`smgrimmedsync`). Otherwise the next checkpoint fsyncs it. The crash windows:
//! DESIGN.md, "Bulk load".

use crate::page::{self, PageBuf};
use crate::smgr::Relation;
use crate::Storage;
use std::sync::atomic::Ordering;
use walnut_common::{BlockNumber, Lsn, Result, Xid};
use walnut_wal::RmgrId;

/// A bulk write into one relation file created by transaction `xid` (the relation is passed
/// to each call).
pub struct BulkWriter {
    xid: Xid,
    /// The record type of each batch: resource manager and info.
    record: (RmgrId, u8),
    /// The redo point when the write began.
    redo_at_start: Lsn,
}

impl BulkWriter {
    /// Starts a bulk write into a relation whose file `xid` created and has not committed;
    /// each batch is logged as one record of type `record` (rmgr, info) naming every block
    /// with its image (`will_init`).
    pub fn new(st: &Storage, xid: Xid, record: (RmgrId, u8)) -> BulkWriter {
        BulkWriter {
            xid,
            record,
            redo_at_start: st.wal().redo_lsn(),
        }
    }

    /// Takes the next `n` blocks of the relation (`nblocks` moves on under `extend_lock`;
    /// nothing is written for them: the pages themselves extend the file) and returns the
    /// first.
    pub fn reserve(&self, rel: &Relation, n: u32) -> BlockNumber {
        let _ext = rel.extend_lock.lock();
        let first = rel.nblocks.load(Ordering::Acquire);
        rel.nblocks.store(first + n, Ordering::Release);
        BlockNumber(first)
    }

    /// Logs `pages[i]` as the new content of block `blocks[i]` (one WAL record for all, at
    /// most 255 blocks), then sets each page's LSN to the record's end and its checksum, and
    /// writes the pages, a run of consecutive blocks at a time. Returns the record's end.
    ///
    /// # Errors
    /// The WAL insert's (53100 if the WAL cannot get space; nothing is written then); the
    /// writes' I/O errors (53100 for ENOSPC). After an error the transaction must abort.
    pub fn write(
        &self,
        st: &Storage,
        rel: &Relation,
        blocks: &[BlockNumber],
        pages: &mut [&mut PageBuf],
    ) -> Result<Lsn> {
        assert_eq!(blocks.len(), pages.len(), "a block for each page");
        let end = st.log_page_images(
            rel.id,
            self.xid,
            self.record,
            blocks,
            &pages.iter().map(|p| &**p).collect::<Vec<_>>(),
        )?;
        for p in pages.iter_mut() {
            page::set_lsn(p, end);
            page::set_checksum(p);
        }
        // Each run of consecutive blocks in one write (`Smgr::write_blocks` splits it at
        // io_combine_limit's maximum).
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len() && blocks[j].0 == blocks[j - 1].0 + 1 {
                j += 1;
            }
            let bufs: Vec<&[u8]> = pages[i..j].iter().map(|p| &p[..]).collect();
            st.smgr.write_blocks(rel, blocks[i], &bufs)?;
            i = j;
        }
        Ok(end)
    }

    /// Ends the write: if the redo point moved since it began, fsyncs the file (see the
    /// module documentation). Call it after the last [`BulkWriter::write`] and before the
    /// transaction's commit.
    ///
    /// # Panics
    /// PANICs if the fsync fails: the kernel may have dropped the pages.
    pub fn finish(&self, st: &Storage, rel: &Relation) {
        if st.wal().redo_lsn() != self.redo_at_start {
            if let Err(e) = st.smgr.sync_relation(rel) {
                crate::panic_fatal(&format!("bulk write: {e}"));
            }
        }
    }
}
