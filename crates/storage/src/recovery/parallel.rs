//! Parallel redo for crash recovery: the startup thread reads and decodes the WAL and hands
//! each block reference to the redo worker that owns the block; workers apply their blocks'
//! changes with [`super::apply_block`]. The design is Koichi Suzuki's parallel redo and
//! openGauss's page redo (one worker per block hash); the argument is in the storage
//! DESIGN.md, "Parallel redo".
//!
//! Invariants:
//! - A block belongs to one worker (`worker_for(rel, block)`), and the startup thread sends
//!   work in WAL order over one FIFO channel per worker, so one block's records apply in
//!   WAL order: each page goes through the same sequence of changes as in serial redo, and
//!   comes out byte-identical.
//! - Block redo touches its own page only (its record's per-block data, the page, the page
//!   LSN), so blocks of one record may apply on different workers, in any order relative to
//!   each other. Crash recovery has no readers, so a multi-block atomic record (a B-tree
//!   split) needs no unit here; a hot standby does (issue 16's watermark).
//! - What is not a block's change runs on the startup thread, in WAL order: transaction
//!   status, relation file creation (only later records name a new file, and those are sent
//!   after it exists), a checkpoint's counters. Removing relation files (a commit or abort
//!   that drops them) waits at a **barrier** until every worker has applied everything sent
//!   before, so no page of a removed file is written afterwards.
//! - Work goes in batches of [`BATCH`] block references over channels of [`QUEUE`] batches:
//!   the memory ahead of the workers is bounded, and the startup thread blocks when a worker
//!   is that far behind.
//!
//! Errors: a worker that fails keeps the failure with the lowest LSN and drains its queue
//! without applying; the startup thread sees the flag at its next send, stops reading, and
//! redo returns that failure after every worker has ended.

use super::{apply_block, apply_main, at_record, main_needs_barrier, Applied};
use crate::{stats, Storage};
use crossbeam::channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use walnut_common::{BlockNumber, Error, Lsn, RelFileId, Result};
use walnut_wal::{BlockRef, DecodedRecord, RmgrId, WalReader};

/// Block references per batch handed to a worker: enough that a channel operation costs
/// little per block (the serial profile spends about 1 µs applying one), few enough that
/// a worker starts while the startup thread decodes on.
pub const BATCH: usize = 128;

/// Batches a worker's channel holds: with [`BATCH`], at most 4,096 block references (about
/// 1 MB of redo data, more with full-page images) wait per worker.
pub const QUEUE: usize = 32;

/// One block reference of a record, with what its redo needs.
struct BlockWork {
    /// Start of the record (for error messages).
    lsn: Lsn,
    /// End of the record: the page LSN redo sets.
    end_lsn: Lsn,
    rmgr: RmgrId,
    info: u8,
    /// Index of the block in its record and the record's number of blocks.
    id: (usize, usize),
    block: BlockRef,
}

enum Msg {
    Work(Vec<BlockWork>),
    /// Apply everything before, then send on this channel.
    Barrier(Sender<()>),
}

/// The worker that owns block `block` of `rel`, of `n`: a multiplicative hash of both, so
/// neighbouring blocks of one relation spread over the workers.
pub fn worker_for(rel: RelFileId, block: BlockNumber, n: usize) -> usize {
    let key = (u64::from(rel.0) << 32) | u64::from(block.0);
    let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 32) % n as u64) as usize
}

/// The first failure of any worker (lowest LSN).
#[derive(Default)]
struct Failure {
    failed: AtomicBool,
    first: Mutex<Option<(Lsn, Error)>>,
}

impl Failure {
    fn record(&self, lsn: Lsn, e: Error) {
        let mut first = self.first.lock();
        if first.as_ref().is_none_or(|(at, _)| lsn < *at) {
            *first = Some((lsn, e));
        }
        self.failed.store(true, Ordering::Release);
    }
}

/// Reads every record from `reader` and applies it with `workers` redo workers (at least 2),
/// calling `note` on each record in WAL order before it is applied. Returns the number of
/// records read.
///
/// # Errors
/// The reader's errors; the first failure of applying a record (lowest LSN among the
/// workers' failures), naming the record's LSN.
pub fn redo(
    st: &Storage,
    reader: &mut WalReader,
    workers: usize,
    mut note: impl FnMut(&DecodedRecord),
) -> Result<u64> {
    assert!(workers >= 2, "parallel redo needs at least two workers");
    let failure = Failure::default();
    let read = std::thread::scope(|s| -> Result<u64> {
        let mut senders = Vec::with_capacity(workers);
        for i in 0..workers {
            let (tx, rx) = bounded::<Msg>(QUEUE);
            let failure = &failure;
            std::thread::Builder::new()
                .name(format!("redo worker {i}"))
                .spawn_scoped(s, move || worker(st, rx, failure))
                .map_err(|e| Error::io("could not start a redo worker", e))?;
            senders.push(tx);
        }
        let mut d = Dispatcher {
            st,
            batches: (0..workers).map(|_| Vec::with_capacity(BATCH)).collect(),
            senders,
            failure: &failure,
        };
        let mut n = 0u64;
        while let Some(rec) = reader.next_record()? {
            note(&rec);
            if !d.dispatch(rec)? {
                break;
            }
            n += 1;
        }
        d.barrier()?;
        Ok(n)
        // Dropping the dispatcher closes the channels; the scope joins the workers.
    });
    if let Some((lsn, e)) = failure.first.into_inner() {
        return Err(at_record(lsn, e));
    }
    read
}

struct Dispatcher<'a> {
    st: &'a Storage,
    batches: Vec<Vec<BlockWork>>,
    senders: Vec<Sender<Msg>>,
    failure: &'a Failure,
}

impl Dispatcher<'_> {
    /// Hands out one record's blocks and applies its main data. `Ok(false)`: a worker failed;
    /// stop reading.
    fn dispatch(&mut self, rec: DecodedRecord) -> Result<bool> {
        let DecodedRecord {
            lsn,
            end_lsn,
            record: mut r,
        } = rec;
        if r.xid.is_valid() {
            self.st.xact.observe_xid(r.xid);
        }
        let nblocks = r.blocks.len();
        for (id, block) in r.blocks.drain(..).enumerate() {
            let w = worker_for(block.rel, block.block, self.senders.len());
            self.batches[w].push(BlockWork {
                lsn,
                end_lsn,
                rmgr: r.rmgr,
                info: r.info,
                id: (id, nblocks),
                block,
            });
            if self.batches[w].len() >= BATCH && !self.send(w)? {
                return Ok(false);
            }
        }
        if main_needs_barrier(&r) && !self.barrier()? {
            return Ok(false);
        }
        apply_main(self.st, lsn, &r, &mut Applied::default()).map_err(|e| at_record(lsn, e))?;
        Ok(true)
    }

    /// Sends worker `w`'s batch. `Ok(false)`: a worker failed.
    fn send(&mut self, w: usize) -> Result<bool> {
        let batch = std::mem::replace(&mut self.batches[w], Vec::with_capacity(BATCH));
        if self.senders[w].send(Msg::Work(batch)).is_err() {
            return Err(Error::internal("a redo worker exited early"));
        }
        Ok(!self.failure.failed.load(Ordering::Acquire))
    }

    /// Sends every partial batch and waits until each worker has applied all it was sent.
    /// `Ok(false)`: a worker failed.
    fn barrier(&mut self) -> Result<bool> {
        let (tx, rx) = bounded(self.senders.len());
        for w in 0..self.senders.len() {
            if !self.batches[w].is_empty() {
                self.send(w)?;
            }
            if self.senders[w].send(Msg::Barrier(tx.clone())).is_err() {
                return Err(Error::internal("a redo worker exited early"));
            }
        }
        drop(tx);
        for _ in 0..self.senders.len() {
            // A worker that panicked drops its message, and with it the sender.
            rx.recv()
                .map_err(|_| Error::internal("a redo worker exited early"))?;
        }
        Ok(!self.failure.failed.load(Ordering::Acquire))
    }
}

/// A redo worker: applies the blocks it is sent, in order, until the channel closes. After a
/// failure it only drains (and answers barriers).
fn worker(st: &Storage, rx: Receiver<Msg>, failure: &Failure) {
    stats::set_backend_type(stats::BackendType::Startup);
    for msg in rx {
        match msg {
            Msg::Work(batch) => {
                if failure.failed.load(Ordering::Acquire) {
                    continue;
                }
                for w in &batch {
                    if let Err(e) = apply_block(st, w.rmgr, w.info, w.id, &w.block, w.end_lsn) {
                        failure.record(w.lsn, e);
                        break;
                    }
                }
            }
            Msg::Barrier(done) => {
                // The receiver waits for every worker's answer; it is there.
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_spread_over_the_workers_and_each_has_one_owner() {
        for n in [2usize, 3, 4, 7] {
            let mut counts = vec![0usize; n];
            for b in 0..7000u32 {
                let w = worker_for(RelFileId(16384), BlockNumber(b), n);
                assert_eq!(w, worker_for(RelFileId(16384), BlockNumber(b), n));
                counts[w] += 1;
            }
            let fair = 7000 / n;
            for c in counts {
                assert!(c > fair * 8 / 10 && c < fair * 12 / 10, "{n} workers: {c}");
            }
        }
    }
}
