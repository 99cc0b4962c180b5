//! Bulk insertion (COPY FROM): tuples fill private pages, and full pages enter the relation in
//! batches, each batch logged as one `HEAP_NEWPAGES` record of full-page images — PostgreSQL
//! 17's `bulk_write.c` (`smgr_bulk_write`, `log_newpages`), not one WAL record per row.
//!
//! Write protocol (DESIGN.md, "Bulk load"):
//! 1. [`BulkInsert::add`] builds the tuple (xmin = the loading transaction) and appends it to a
//!    page in private memory, which no other session can see and the buffer pool does not hold;
//!    a page that has no room left joins the batch of full pages.
//! 2. When the batch holds [`BulkInsert::batch_pages`] pages (or at [`BulkInsert::finish`]),
//!    [`BulkInsert::flush`] allocates a block for each page, all in one call (`Smgr::extend_by`
//!    under the relation's `extend_lock`: `fallocate` for a batch of more than 8, PostgreSQL's
//!    `smgrzeroextend`), pins each with `ReadMode::Zero` and takes its exclusive latch; a block
//!    that is not all zero by then was taken by a concurrent insert (through a stale insert
//!    hint), is left to it, and another block is allocated.
//! 3. It copies the images into the pinned frames, inserts one WAL record naming every block
//!    with its image (`will_init`), sets each page's LSN to the record's end, marks the frames
//!    dirty and releases latches and pins.
//! 4. `finish` flushes the last, partly filled page and points the relation's insert hint at
//!    it, so later inserts use its free space.
//!
//! Because a page enters the buffer pool only together with its WAL record, the rules of
//! every other page hold unchanged: WAL before data, and one record per change of a page in
//! the pool. Rows in pages not yet flushed exist nowhere but here: a transaction that ends
//! before its load is flushed loses them, which is what an abort wants; `Txn::commit` flushes
//! first. Redo restores the images like any other full-page image (`recovery::apply`), so a
//! standby replays a load like any record.

use super::{check_row_size, put_tuple_header, MAX_TUPLE_SIZE, RM_HEAP};
use crate::bufpool::{Pinned, ReadMode};
use crate::bulk_write::BulkWriter;
use crate::page::{self, PageBuf, PageKind};
use crate::smgr::Relation;
use crate::Storage;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use walnut_common::{BlockNumber, Result, Xid, BLCKSZ};

/// `NEWPAGES` record: every block carries a full-page image (`will_init`), no data.
pub const HEAP_NEWPAGES: u8 = 0x30;

/// Most pages one `NEWPAGES` record carries (PostgreSQL's `XLR_MAX_BLOCK_ID`, 32).
pub const BULK_BATCH_PAGES_MAX: usize = 32;

// A record holds at most 255 block references.
const _: () = assert!(BULK_BATCH_PAGES_MAX <= u8::MAX as usize);

/// A bulk load into one heap relation by one transaction.
pub struct BulkInsert {
    rel: Arc<Relation>,
    xid: Xid,
    /// Bytes left free on each page for later updates (fillfactor).
    reserve: usize,
    /// The page being filled; `None` before the first row and after a flush of it.
    current: Option<Box<PageBuf>>,
    /// Full pages waiting for a block and their WAL record.
    full: Vec<Box<PageBuf>>,
    /// Page buffers already written, for reuse.
    spare: Vec<Box<PageBuf>>,
    batch_pages: usize,
    /// Tuple being built (reused).
    scratch: Vec<u8>,
    rows: u64,
    /// Set if the transaction created `rel` (CREATE TABLE or TRUNCATE in this transaction):
    /// no other session can reach its blocks, so batches are written straight to the file,
    /// bypassing the buffer pool ([`BulkInsert::flush`]).
    direct: Option<BulkWriter>,
}

fn new_page() -> Box<PageBuf> {
    let mut p: Box<PageBuf> = page::zeroed();
    page::init(&mut p, PageKind::Heap, 0);
    p
}

impl BulkInsert {
    /// Starts a bulk load into `rel` for `xid` (already assigned), with the table's
    /// `fillfactor` (percent). `created_by_xid` says that `xid` created `rel`'s file (CREATE
    /// TABLE or TRUNCATE in this transaction, not yet committed): then no other session can
    /// read or write its blocks, and full pages go straight to the file rather than through
    /// the buffer pool (PostgreSQL's `bulk_write.c`).
    pub fn new(
        st: &Storage,
        rel: Arc<Relation>,
        xid: Xid,
        fillfactor: u8,
        created_by_xid: bool,
    ) -> BulkInsert {
        super::assert_writer(st, xid);
        // A batch through the pool pins its pages all at once: keep it a small share of the
        // pool. Direct batches pin nothing.
        let batch_pages = if created_by_xid {
            BULK_BATCH_PAGES_MAX
        } else {
            (st.pool.len() / 16).clamp(1, BULK_BATCH_PAGES_MAX)
        };
        let direct = created_by_xid.then(|| BulkWriter::new(st, xid, (RM_HEAP, HEAP_NEWPAGES)));
        BulkInsert {
            rel,
            xid,
            reserve: BLCKSZ * (100 - fillfactor.clamp(10, 100) as usize) / 100,
            current: None,
            full: Vec::with_capacity(batch_pages),
            spare: Vec::with_capacity(batch_pages),
            batch_pages,
            scratch: Vec::with_capacity(256),
            rows: 0,
            direct,
        }
    }

    /// The relation being loaded.
    pub fn relation(&self) -> &Arc<Relation> {
        &self.rel
    }

    /// The loading transaction.
    pub fn xid(&self) -> Xid {
        self.xid
    }

    /// Pages a flush writes at most (one WAL record).
    pub fn batch_pages(&self) -> usize {
        self.batch_pages
    }

    /// Rows added so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Adds a row (`encode_row` bytes). Flushes a batch when it is complete.
    ///
    /// # Errors
    /// 54000 if the row is larger than a page; the errors of [`BulkInsert::flush`].
    pub fn add(&mut self, st: &Storage, data: &[u8]) -> Result<()> {
        check_row_size(data.len())?;
        let mut tuple = std::mem::take(&mut self.scratch);
        tuple.clear();
        put_tuple_header(&mut tuple, self.xid, None);
        tuple.extend_from_slice(data);
        let r = self.add_tuple(st, &tuple);
        self.scratch = tuple;
        r
    }

    fn add_tuple(&mut self, st: &Storage, tuple: &[u8]) -> Result<()> {
        assert!(
            tuple.len() <= MAX_TUPLE_SIZE,
            "bulk insert of an oversized tuple"
        );
        let need = tuple.len() + page::LINE_POINTER_SIZE;
        if let Some(p) = &self.current {
            // An empty page takes any row; fillfactor limits only the rows after the first.
            if page::slot_count(p) > 0 && page::free_space(p) < need + self.reserve {
                let p = self.current.take().expect("checked");
                self.full.push(p);
                if self.full.len() >= self.batch_pages {
                    self.flush(st)?;
                }
            }
        }
        if self.current.is_none() {
            self.current = Some(match self.spare.pop() {
                Some(mut p) => {
                    page::init(&mut p, PageKind::Heap, 0);
                    p
                }
                None => new_page(),
            });
        }
        let p = self.current.as_mut().expect("just set");
        assert!(
            page::fits(p, tuple.len()),
            "bulk tuple does not fit an empty page"
        );
        let i = page::append_item(p, tuple);
        assert_eq!(
            page::item(p, i).map(<[u8]>::len),
            Some(tuple.len()),
            "bulk tuple at slot {} has not the tuple's length",
            i + 1
        );
        self.rows += 1;
        Ok(())
    }

    /// Writes the full pages into the relation: one block each, one WAL record for all.
    /// Through the buffer pool, or, into a relation the transaction created, straight to the
    /// file ([`BulkInsert::flush_direct`]).
    ///
    /// # Errors
    /// 53100 if the WAL or the relation's disk is full (the pages stay here, nothing of them
    /// is in the relation: the statement fails and the transaction aborts); I/O errors.
    pub fn flush(&mut self, st: &Storage) -> Result<()> {
        if self.full.is_empty() {
            return Ok(());
        }
        let n = self.full.len();
        assert!(n <= BULK_BATCH_PAGES_MAX, "bulk batch of {n} pages");
        st.wal().check_space((n * (BLCKSZ + 64) + 4096) as u64)?;
        if self.direct.is_some() {
            return self.flush_direct(st);
        }
        // Step 2: a block for each page, pinned; a block someone else took before we latched
        // it is given up and replaced.
        let mut pins = Vec::with_capacity(n);
        loop {
            if pins.len() < n {
                let want = (n - pins.len()) as u32;
                let first = {
                    let _ext = self.rel.extend_lock.lock();
                    // As a single extension does (`pin_new_block`): no block it allocates
                    // keeps a page a truncation left cached.
                    let next = self.rel.nblocks.load(Ordering::Acquire);
                    for b in next..next + want {
                        super::pin_new_block(st, &self.rel, BlockNumber(b))?;
                    }
                    st.smgr.extend_by(&self.rel, want)?
                };
                for b in first.0..first.0 + want {
                    pins.push(st.pool.pin(&self.rel, BlockNumber(b), ReadMode::Zero)?);
                }
            }
            match self.write_batch(st, &pins)? {
                None => return Ok(()),
                Some(i) => {
                    pins.remove(i);
                }
            }
        }
    }

    /// A flush into a relation the transaction created (DESIGN.md, "Bulk load", steps 3'-7'):
    /// the next `n` blocks, one `NEWPAGES` record, the pages written straight to the file
    /// ([`BulkWriter`]).
    fn flush_direct(&mut self, st: &Storage) -> Result<()> {
        let w = self.direct.as_mut().expect("a direct load");
        let n = self.full.len() as u32;
        let first = w.reserve(&self.rel, n);
        let batch = (first.0..first.0 + n)
            .map(BlockNumber)
            .zip(self.full.drain(..))
            .collect();
        w.write(st, &self.rel, batch)?;
        w.recycle(&mut self.spare);
        Ok(())
    }

    /// Steps 2 (latches) and 3 of a flush into the pinned blocks `pins`, one per full page,
    /// in ascending block order. Returns the index of a block that is no longer all zero (a
    /// concurrent insert took it through a stale insert hint) without changing anything.
    fn write_batch(&mut self, st: &Storage, pins: &[Pinned<'_>]) -> Result<Option<usize>> {
        assert_eq!(pins.len(), self.full.len(), "a block for each full page");
        assert!(
            pins.windows(2).all(|w| w[0].tag.block < w[1].tag.block),
            "bulk batch blocks not ascending"
        );
        let mut latches: Vec<_> = pins.iter().map(|p| p.write()).collect();
        if let Some(i) = latches.iter().position(|l| !page::is_new(l)) {
            return Ok(Some(i));
        }
        for (l, img) in latches.iter_mut().zip(&self.full) {
            l.copy_from_slice(&img[..]);
        }
        st.log_new_pages(
            self.rel.id,
            self.xid,
            (RM_HEAP, HEAP_NEWPAGES),
            pins,
            &mut latches,
            &self.full.iter().map(|p| &**p).collect::<Vec<_>>(),
        )?;
        drop(latches);
        self.spare.append(&mut self.full);
        Ok(None)
    }

    /// Ends the load: flushes every page, the last partly filled one too, and points the
    /// relation's insert hint at that one. Returns the rows loaded.
    ///
    /// # Errors
    /// As [`BulkInsert::flush`].
    pub fn finish(mut self, st: &Storage) -> Result<u64> {
        if let Some(p) = self.current.take() {
            self.full.push(p);
        }
        self.flush(st)?;
        if let Some(w) = &mut self.direct {
            w.finish(st, &self.rel)?;
        }
        let last = self.rel.nblocks.load(Ordering::Acquire).saturating_sub(1);
        self.rel.insert_hint.store(last, Ordering::Release);
        Ok(self.rows)
    }
}
