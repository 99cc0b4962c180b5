//! Whole new pages written straight into a relation file that the writing transaction created,
//! bypassing the buffer pool: PostgreSQL 17's `bulk_write.c` (`smgr_bulk_start_rel`,
//! `smgr_bulk_write`, `smgr_bulk_finish`). Used by COPY into a table created or truncated in the
//! same transaction (`heap::BulkInsert`) and by the bottom-up index build (`btree::build`).
//!
//! No other session can read or write such a file's blocks before the transaction commits, so
//! the pages need no pin, latch or buffer: each batch is one WAL record of full-page images
//! ([`crate::log_images`]), then the pages, with their LSN and checksum set, are written to the
//! file, each run of consecutive blocks in one write (`Smgr::write_blocks`, which registers the
//! file for the next checkpoint's fsync after the write). The writes do not wait for the WAL:
//! until the commit, which flushes the WAL past every record of the load, the file is named by
//! no committed catalog row, and after a crash it is an orphan.
//!
//! **In the background.** Unless `io_method = sync`, a batch is handed to a thread of its own
//! (`bulk writer`, started at the first batch), which logs and writes it while the caller fills
//! the next: the images' compression and CRC, the copy into the WAL and the write (the kernel's
//! copy into its page cache, or the device's time with `io_direct = data`) leave the session's
//! thread, which parses rows and builds pages meanwhile. At most [`BATCHES_IN_FLIGHT`] batches
//! wait for the thread; a caller that gets further ahead waits. Written pages come back for
//! reuse ([`BulkWriter::recycle`]). The thread's first error stops it; the next call returns
//! it. With `io_method = sync` the caller logs and writes each batch itself, as PostgreSQL's
//! synchronous I/O does.
//!
//! Durability at commit ([`BulkWriter::finish`]): it first waits for the thread to write every
//! batch. Redo restores every image whose record lies after the redo point it starts from. A
//! checkpoint that began during the load has a redo point past some records, and may have
//! drained the set of files to fsync before some of their pages were written; so if the redo
//! point moved since [`BulkWriter::new`], `finish` fsyncs the file itself (`smgrimmedsync`).
//! Otherwise the next checkpoint fsyncs it. The crash windows: DESIGN.md, "Bulk load".

use crate::aio::IoMethod;
use crate::page::{self, PageBuf};
use crate::smgr::{Relation, Smgr};
use crate::{stats, Storage};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use walnut_common::{BlockNumber, Error, Lsn, Result, Xid};
use walnut_wal::{RmgrId, Wal};

/// Batches that may wait for the background thread besides the one it is writing: with
/// 32-page batches, at most 768 KiB of pages are between the caller and the file.
pub const BATCHES_IN_FLIGHT: usize = 2;

/// Written page buffers the background thread keeps for the caller to reuse; beyond this it
/// frees them.
const RECYCLED_MAX: usize = 128;

/// Pages for blocks: `(block, page)`, any blocks, consecutive ones written together.
pub type Batch = Vec<(BlockNumber, Box<PageBuf>)>;

/// A bulk write into one relation file created by transaction `xid` (the relation is passed
/// to each call).
pub struct BulkWriter {
    xid: Xid,
    /// The record type of each batch: resource manager and info.
    record: (RmgrId, u8),
    /// The redo point when the write began.
    redo_at_start: Lsn,
    /// Log and write batches in a background thread (`io_method` is not `sync`).
    background: bool,
    /// The background thread, once the first batch started it.
    thread: Option<WriterThread>,
    /// Pages written by the caller itself (`io_method = sync`), for reuse.
    written: Vec<Box<PageBuf>>,
}

/// The background thread of a [`BulkWriter`] and its channels.
struct WriterThread {
    /// Bounded: [`BATCHES_IN_FLIGHT`].
    batches: SyncSender<(Arc<Relation>, Batch)>,
    /// Written pages, for reuse (bounded: [`RECYCLED_MAX`]).
    written: Receiver<Box<PageBuf>>,
    /// The thread's first error; it writes nothing after one.
    failed: Arc<Mutex<Option<Error>>>,
    handle: JoinHandle<()>,
}

impl BulkWriter {
    /// Starts a bulk write into a relation whose file `xid` created and has not committed;
    /// each batch is logged as one record of type `record` (rmgr, info) naming every block
    /// with its image (`will_init`). Batches go to a background thread unless `io_method =
    /// sync`.
    pub fn new(st: &Storage, xid: Xid, record: (RmgrId, u8)) -> BulkWriter {
        BulkWriter {
            xid,
            record,
            redo_at_start: st.wal().redo_lsn(),
            background: st.config().io_method != IoMethod::Sync,
            thread: None,
            written: Vec::new(),
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

    /// Logs the batch's pages as the new content of their blocks (one WAL record for all, at
    /// most 255 pages), sets each page's LSN to the record's end and its checksum, and writes
    /// them, a run of consecutive blocks at a time: in the background thread, which this
    /// starts at the first batch, or here with `io_method = sync`. Waits while
    /// [`BATCHES_IN_FLIGHT`] batches are already waiting for the thread.
    ///
    /// # Errors
    /// The WAL insert's (53100 if the WAL cannot get space) and the writes' I/O errors (53100
    /// for ENOSPC), of this batch or, in the background, of an earlier one; an I/O error if the
    /// thread cannot start. After an error the transaction must abort.
    pub fn write(&mut self, st: &Storage, rel: &Arc<Relation>, mut batch: Batch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if !self.background {
            log_and_write(st.wal(), &st.smgr, rel, self.xid, self.record, &mut batch)?;
            self.written.extend(batch.into_iter().map(|(_, p)| p));
            return Ok(());
        }
        if self.thread.is_none() {
            self.thread = Some(self.start(st)?);
        }
        let t = self.thread.as_ref().expect("just started");
        if let Some(e) = t.failed.lock().take() {
            return Err(e);
        }
        if t.batches.send((rel.clone(), batch)).is_err() {
            // The thread ended: it failed (its error is stored) or panicked (finish says so).
            return Err(self.finish_thread().err().unwrap_or_else(|| {
                Error::io(
                    "bulk writer thread ended",
                    std::io::Error::other("channel closed"),
                )
            }));
        }
        Ok(())
    }

    /// Moves page buffers already written into `into`, for the caller's next pages.
    pub fn recycle(&mut self, into: &mut Vec<Box<PageBuf>>) {
        into.append(&mut self.written);
        if let Some(t) = &self.thread {
            into.extend(t.written.try_iter());
        }
    }

    /// Ends the write: waits until every batch is written, then, if the redo point moved
    /// since the write began, fsyncs the file (see the module documentation). Call it after
    /// the last [`BulkWriter::write`] and before the transaction's commit.
    ///
    /// # Errors
    /// The background thread's error, if it had one (the transaction must abort).
    ///
    /// # Panics
    /// PANICs if the fsync fails: the kernel may have dropped the pages. Re-raises a panic of
    /// the background thread.
    pub fn finish(&mut self, st: &Storage, rel: &Relation) -> Result<()> {
        self.finish_thread()?;
        if st.wal().redo_lsn() != self.redo_at_start {
            if let Err(e) = st.smgr.sync_relation(rel) {
                crate::panic_fatal(&format!("bulk write: {e}"));
            }
        }
        Ok(())
    }

    /// Starts the background thread, as the caller's backend type for `pg_stat_io`.
    fn start(&self, st: &Storage) -> Result<WriterThread> {
        let (batches, queue) = sync_channel::<(Arc<Relation>, Batch)>(BATCHES_IN_FLIGHT);
        let (give_back, written) = sync_channel(RECYCLED_MAX);
        let failed = Arc::new(Mutex::new(None));
        let (wal, smgr, xid, record) = (st.wal().clone(), st.smgr.clone(), self.xid, self.record);
        let (fail, backend_type) = (failed.clone(), stats::backend_type());
        let handle = std::thread::Builder::new()
            .name("bulk writer".into())
            .spawn(move || {
                stats::set_backend_type(backend_type);
                for (rel, mut batch) in queue {
                    if fail.lock().is_some() {
                        continue; // failed: drain without writing, so the caller never waits
                    }
                    if let Err(e) = log_and_write(&wal, &smgr, &rel, xid, record, &mut batch) {
                        *fail.lock() = Some(e);
                        continue;
                    }
                    for (_, p) in batch {
                        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
                            give_back.try_send(p)
                        {
                            break; // the caller has enough; free the rest
                        }
                    }
                }
            })
            .map_err(|e| Error::io("could not start the bulk writer thread", e))?;
        Ok(WriterThread {
            batches,
            written,
            failed,
            handle,
        })
    }

    /// Closes the thread's queue, waits for it to write what it holds, and returns its
    /// error, if any.
    fn finish_thread(&mut self) -> Result<()> {
        let Some(t) = self.thread.take() else {
            return Ok(());
        };
        drop(t.batches);
        if let Err(p) = t.handle.join() {
            std::panic::resume_unwind(p);
        }
        let failed = t.failed.lock().take();
        failed.map_or(Ok(()), Err)
    }
}

impl Drop for BulkWriter {
    /// An unfinished write (the statement failed): the thread ends after the batches it
    /// holds, before the transaction's abort removes the file.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            drop(t.batches);
            let r = t.handle.join();
            if r.is_err() && !std::thread::panicking() {
                crate::panic_fatal("bulk writer thread panicked");
            }
        }
    }
}

/// One batch: its record (`record` for `xid`, every page's image), then each page's LSN and
/// checksum, then the writes, a run of consecutive blocks at a time (`Smgr::write_blocks`
/// splits a run at io_combine_limit's maximum).
fn log_and_write(
    wal: &Wal,
    smgr: &Smgr,
    rel: &Relation,
    xid: Xid,
    record: (RmgrId, u8),
    batch: &mut Batch,
) -> Result<()> {
    let blocks: Vec<BlockNumber> = batch.iter().map(|(b, _)| *b).collect();
    let images: Vec<&PageBuf> = batch.iter().map(|(_, p)| &**p).collect();
    let end = crate::log_images(wal, rel.id, xid, record, &blocks, &images)?;
    for (_, p) in batch.iter_mut() {
        page::set_lsn(p, end);
        page::set_checksum(p);
    }
    for run in crate::smgr::runs(batch.len(), usize::MAX, |i| {
        batch[i].0 .0 == batch[i - 1].0 .0 + 1
    }) {
        let bufs: Vec<&[u8]> = batch[run.clone()].iter().map(|(_, p)| &p[..]).collect();
        smgr.write_blocks(rel, batch[run.start].0, &bufs)?;
    }
    Ok(())
}
