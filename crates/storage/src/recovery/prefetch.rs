//! Recovery prefetch (PostgreSQL 15's `xlogprefetcher.c`, `recovery_prefetch`): redo decodes
//! WAL ahead of the record it applies, up to `wal_decode_buffer_size` bytes ([`LookAhead`]),
//! and asks for each block those records will read that is not in the buffer pool, so that
//! the reads of many blocks overlap instead of each stalling the apply in turn.
//!
//! A block reference is not prefetched when it restores a full-page image (`skip_fpw`) or
//! initializes its page (`skip_init`), both of which never read the page; when an earlier
//! record still in the look-ahead names the same block (`skip_rep`: that record's redo
//! brings it into the pool first, by its image, by initializing it, or by reading what was
//! prefetched for it; with full-page writes a block's first change after the redo point
//! carries its image, so most blocks redo changes never need a read); when the pool holds it
//! (`hit`); or when its relation file does not exist yet or is shorter (`skip_new`: the
//! records ahead create or extend it). Otherwise (`prefetch`) buffered data
//! files get `posix_fadvise(POSIX_FADV_WILLNEED)` (the kernel reads the block into its page
//! cache without waiting, as PostgreSQL does), and O_DIRECT files go to the I/O workers, which
//! read the block into the buffer pool ([`crate::aio::BlockReadAhead`]; they start only once
//! the storage is open, so crash recovery over O_DIRECT files does not prefetch).
//!
//! Prefetch changes no page and no order: it is a hint, and the apply reads (or finds) the
//! same page either way. The counters are `pg_stat_recovery_prefetch`'s ([`PrefetchStats`]).

use crate::aio::BlockReadAhead;
use crate::Storage;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use walnut_common::{Error, Result};
use walnut_wal::{DecodedRecord, Record, WalReader};

/// `pg_stat_recovery_prefetch`'s counters (PostgreSQL 15's columns): cumulative block counts
/// since the server started, and gauges of the look-ahead as last seen.
#[derive(Debug, Default)]
pub struct PrefetchStats {
    /// When the counters started: µs since 2000-01-01 UTC (`stats_reset`; 0: not yet).
    pub reset_us: AtomicI64,
    /// Blocks prefetched because they were not in the buffer pool.
    pub prefetch: AtomicU64,
    /// Blocks not prefetched because they were in the buffer pool.
    pub hit: AtomicU64,
    /// Blocks not prefetched because redo initializes them (`will_init`).
    pub skip_init: AtomicU64,
    /// Blocks not prefetched because their file did not exist yet or was shorter.
    pub skip_new: AtomicU64,
    /// Blocks not prefetched because the record carries their full-page image.
    pub skip_fpw: AtomicU64,
    /// Blocks not prefetched because they were asked for recently.
    pub skip_rep: AtomicU64,
    /// Bytes of WAL decoded ahead of the record being applied.
    pub wal_distance: AtomicU64,
    /// Block references in the records decoded ahead.
    pub block_distance: AtomicU64,
    /// Prefetches asked for and not yet reached by the apply (or, through the I/O workers,
    /// not yet read).
    pub io_depth: AtomicU64,
}

impl PrefetchStats {
    /// The counters as one row, in `pg_stat_recovery_prefetch`'s column order after
    /// `stats_reset`: prefetch, hit, skip_init, skip_new, skip_fpw, skip_rep, wal_distance,
    /// block_distance, io_depth.
    pub fn snapshot(&self) -> [u64; 9] {
        [
            &self.prefetch,
            &self.hit,
            &self.skip_init,
            &self.skip_new,
            &self.skip_fpw,
            &self.skip_rep,
            &self.wal_distance,
            &self.block_distance,
            &self.io_depth,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }
}

/// A block: (relation file, block number).
type Key = (u32, u32);

/// Entries of the filter of blocks recently found in the buffer pool (a power of two).
const CACHED: usize = 4096;

/// What [`Prefetcher::record`] did with one record: the prefetches it asked for, and the
/// blocks it claimed (their redo brings them into the pool: by an image, by initializing
/// them, or by reading what was prefetched), to be retired with the record.
#[derive(Debug, Default)]
pub struct Looked {
    /// Blocks asked for.
    pub asked: u32,
    /// Blocks claimed, for [`Prefetcher::retire`].
    pub claimed: Vec<Key>,
}

/// Decides, block by block, what to prefetch, and asks for it.
pub struct Prefetcher {
    /// `recovery_prefetch` is not `off`, and the data files allow a prefetch.
    enabled: bool,
    /// The I/O workers, for O_DIRECT data files.
    readahead: Option<BlockReadAhead>,
    /// Blocks that records looked at and not yet retired will bring into the pool, with how
    /// many such records: a later reference to one of them is `skip_rep`.
    window: FxHashMap<Key, u32>,
    /// Blocks recently found in the pool, direct-mapped by hash (`u32::MAX`: empty): a hit
    /// again costs no look at the pool's mapping (hot blocks are most references). A block
    /// evicted since only misses a prefetch.
    cached: Box<[Key]>,
    /// Without a caller that retires records ([`LookAhead`] does): the claims of the last
    /// `capacity` block references looked at, oldest first, retired as newer ones come.
    fifo: Option<(VecDeque<Option<Key>>, usize)>,
    /// Block references looked at since the last prefetch was needed.
    quiet: u64,
    /// Block references skipped while dormant, for sampling one in [`SAMPLE`].
    skipped: u32,
    /// While dormant: blocks sampled, and of those not in the pool, in the current period
    /// of [`WAKE_PERIOD`] samples.
    sampled: u32,
    missed: u32,
}

/// Block references without a prefetch after which the prefetcher goes dormant: it then
/// examines one block in [`SAMPLE`] (images and initializations are still counted), keeps no
/// claims, and wakes at the first sampled block that needs a read. A profile of a parallel
/// crash recovery whose blocks all came from images or the pool had the per-block checks at
/// about a quarter of the startup thread's time, which on two cores the workers lose.
const DORMANT_AFTER: u64 = 1 << 16;

/// While dormant, one block reference in this many is examined.
const SAMPLE: u32 = 64;

/// While dormant, the prefetcher wakes when [`WAKE_MISSES`] of [`WAKE_PERIOD`] sampled blocks
/// are not in the pool (about 1 %): a lone miss is most often a block whose image waits in
/// the parallel redo's pipeline, which a dormant prefetcher no longer claims (124 such
/// wake-ups in one recovery when any miss woke it).
const WAKE_PERIOD: u32 = 256;
const WAKE_MISSES: u32 = 3;

impl Prefetcher {
    /// A prefetcher whose window is the last `capacity` block references looked at (for a
    /// caller whose distance is a queue of that many, such as a standby's redo pipeline).
    pub fn with_window(st: &Storage, capacity: usize) -> Prefetcher {
        Prefetcher {
            fifo: Some((VecDeque::with_capacity(capacity), capacity)),
            ..Prefetcher::new(st)
        }
    }

    /// A prefetcher for `st`'s redo: off if `recovery_prefetch = off`, or if the data files
    /// are O_DIRECT and no I/O workers run. Its caller retires each record it looked at
    /// ([`Prefetcher::retire`]) once the record is handed to redo.
    pub fn new(st: &Storage) -> Prefetcher {
        let readahead = BlockReadAhead::new(st);
        let enabled =
            st.config().recovery_prefetch && (!st.smgr.direct_io() || readahead.is_some());
        let _ = st.recovery_prefetch.reset_us.compare_exchange(
            0,
            walnut_common::value::now_timestamp(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Prefetcher {
            enabled,
            readahead,
            window: FxHashMap::default(),
            cached: vec![(u32::MAX, u32::MAX); if enabled { CACHED } else { 0 }].into(),
            fifo: None,
            quiet: 0,
            skipped: 0,
            sampled: 0,
            missed: 0,
        }
    }

    /// Whether it prefetches at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Looks at each block reference of `r`, a record redo will apply soon, and asks for
    /// those worth it.
    pub fn record(&mut self, st: &Storage, r: &Record) -> Looked {
        let mut looked = Looked::default();
        if !self.enabled {
            return looked;
        }
        let s = &st.recovery_prefetch;
        for b in &r.blocks {
            if self.quiet >= DORMANT_AFTER {
                // Dormant: images and initializations counted, one other block in SAMPLE
                // examined (and counted), no claims kept.
                if b.image.is_some() {
                    s.skip_fpw.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if b.will_init {
                    s.skip_init.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                self.skipped += 1;
                if self.skipped < SAMPLE {
                    continue;
                }
                self.skipped = 0;
                self.sampled += 1;
                if self.sampled > WAKE_PERIOD {
                    (self.sampled, self.missed) = (1, 0);
                }
                if st.pool.contains(b.rel, b.block) {
                    s.hit.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // A sampled miss that does not wake it is not counted (no column fits it,
                // as none fits the blocks not sampled).
                self.missed += 1;
                if self.missed >= WAKE_MISSES && self.prefetch_one(st, b) {
                    // Reads are needed again: wake up, with no claims (a few prefetches of
                    // blocks whose images are just ahead may be wasted).
                    (self.quiet, self.sampled, self.missed) = (0, 0, 0);
                    looked.asked += 1;
                    s.prefetch.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            self.quiet += 1;
            let key = (b.rel.0, b.block.0);
            let slot = crate::bufpool::tag_hash(b.rel, b.block) % CACHED;
            let (counter, claim) = if b.image.is_some() {
                (&s.skip_fpw, true)
            } else if b.will_init {
                (&s.skip_init, true)
            } else if self.cached[slot] == key {
                (&s.hit, false)
            } else if self.window.contains_key(&key) {
                (&s.skip_rep, false)
            } else if st.pool.contains(b.rel, b.block) {
                self.cached[slot] = key;
                (&s.hit, false)
            } else if self.prefetch_one(st, b) {
                self.quiet = 0;
                looked.asked += 1;
                (&s.prefetch, true)
            } else {
                (&s.skip_new, false)
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if claim {
                if self.cached[slot] == key {
                    // Its page changes wholesale: look at the pool again next time.
                    self.cached[slot] = (u32::MAX, u32::MAX);
                }
                *self.window.entry(key).or_insert(0) += 1;
                looked.claimed.push(key);
            }
            if let Some((fifo, capacity)) = &mut self.fifo {
                fifo.push_back(claim.then_some(key));
                if fifo.len() > *capacity {
                    if let Some(Some(old)) = fifo.pop_front() {
                        retire_key(&mut self.window, old);
                    }
                }
            }
        }
        if self.fifo.is_some() {
            looked.claimed.clear();
        }
        looked
    }

    /// Asks for block `b` (not in the pool): false if its file does not exist yet or is
    /// shorter (records ahead create or extend it).
    fn prefetch_one(&self, st: &Storage, b: &walnut_wal::BlockRef) -> bool {
        match st.smgr.open(b.rel) {
            Ok(rel) if b.block.0 < rel.nblocks.load(Ordering::Relaxed) => {
                match &self.readahead {
                    Some(ra) => {
                        ra.send(rel, b.block);
                    }
                    None => st.smgr.will_need(&rel, b.block),
                }
                true
            }
            _ => false,
        }
    }

    /// Sets the window of a prefetcher made [`Prefetcher::with_window`]: the last `capacity`
    /// block references looked at.
    pub fn set_window(&mut self, capacity: usize) {
        if let Some((fifo, c)) = &mut self.fifo {
            *c = capacity;
            while fifo.len() > capacity {
                if let Some(Some(old)) = fifo.pop_front() {
                    retire_key(&mut self.window, old);
                }
            }
        }
    }

    /// Forgets every claim and every block found cached (a caller whose records have all
    /// been applied, and that may not look again for a while).
    pub fn reset(&mut self) {
        (self.quiet, self.sampled, self.missed) = (0, 0, 0);
        self.window.clear();
        if let Some((fifo, _)) = &mut self.fifo {
            fifo.clear();
        }
        self.cached.fill((u32::MAX, u32::MAX));
    }

    /// Forgets the claims of a record [`Prefetcher::record`] looked at, now handed to redo
    /// (which brings in its blocks before any later record's redo reads them).
    pub fn retire(&mut self, claimed: &[Key]) {
        for &key in claimed {
            retire_key(&mut self.window, key);
        }
    }

    /// Prefetches asked for that the I/O workers have not read yet (0 with `posix_fadvise`,
    /// whose reads are the kernel's).
    pub fn in_flight(&self) -> u32 {
        self.readahead.as_ref().map_or(0, |r| r.in_flight())
    }
}

fn retire_key(window: &mut FxHashMap<Key, u32>, key: Key) {
    if let Some(n) = window.get_mut(&key) {
        *n -= 1;
        if *n == 0 {
            window.remove(&key);
        }
    }
}

/// The least look-ahead, bytes, once a prefetch was needed.
const MIN_DISTANCE: u64 = 16 << 10;

/// The look-ahead after a record of `len` bytes that asked for `asked` prefetches, from
/// `limit`, at most `max` (bytes): doubled from at least [`MIN_DISTANCE`] if it asked for
/// any, else shorter by the record's length.
fn next_distance(limit: u64, max: u64, asked: u32, len: u64) -> u64 {
    if asked > 0 {
        limit.saturating_mul(2).max(MIN_DISTANCE).min(max)
    } else {
        limit.saturating_sub(len)
    }
}

/// A WAL reader that decodes ahead of the record it returns and prefetches the blocks of what
/// it decoded (PostgreSQL's `XLogPrefetcher` in front of its `XLogReader`). How far ahead
/// adapts, as PostgreSQL 17's `read_stream.c` adapts its distance: it doubles (from 16 kB, up
/// to `wal_decode_buffer_size`) with each record that needed a prefetch, and shrinks by each
/// record's length that needed none, down to one record at a time. So a redo whose blocks
/// all come from full-page images or the pool (most crash recoveries) pays no look-ahead,
/// and one that reads (a cold cache without images) looks far ahead. With prefetch off it
/// reads one record at a time, as the plain reader does. The records come out in WAL order,
/// unchanged; a reader error is returned after the records decoded before it.
pub struct LookAhead<'a> {
    reader: &'a mut WalReader,
    prefetcher: Prefetcher,
    /// Records decoded and not returned yet, with the prefetches each asked for.
    queue: VecDeque<(DecodedRecord, Looked)>,
    /// Block references and prefetches in `queue`.
    blocks: u64,
    asked: u64,
    /// How far ahead to decode now, bytes (adapts between 0 and `max`).
    limit: u64,
    /// `wal_decode_buffer_size`, bytes (0 with prefetch off).
    max: u64,
    /// See [`LookAhead::new`].
    pipeline: usize,
    /// The reader returned its end (`None`) or an error, kept for after the queue.
    end: Option<Option<Error>>,
}

impl<'a> LookAhead<'a> {
    /// Look-ahead over `reader` for `st`'s redo (`recovery_prefetch`,
    /// `wal_decode_buffer_size`). `pipeline`: block references that may wait, handed out but
    /// not applied, after a record leaves the look-ahead (the parallel redo's queue; 0 for
    /// serial redo, which applies each record as it is returned): its claims last that much
    /// longer.
    pub fn new(st: &Storage, reader: &'a mut WalReader, pipeline: usize) -> LookAhead<'a> {
        let prefetcher = if pipeline > 0 {
            Prefetcher::with_window(st, pipeline)
        } else {
            Prefetcher::new(st)
        };
        let max = if prefetcher.enabled() {
            st.config().wal_decode_buffer_bytes
        } else {
            0
        };
        LookAhead {
            reader,
            prefetcher,
            queue: VecDeque::new(),
            blocks: 0,
            asked: 0,
            limit: 0,
            max,
            end: None,
            pipeline,
        }
    }

    /// The next record in WAL order, or `None` at the end of valid WAL.
    ///
    /// # Errors
    /// The reader's (I/O), once the records before it have been returned.
    pub fn next_record(&mut self, st: &Storage) -> Result<Option<DecodedRecord>> {
        if self.limit == 0 && self.queue.is_empty() && self.end.is_none() {
            // No look-ahead now: one record at a time, without the queue (what most redo
            // runs do, where images and the pool serve every block).
            match self.reader.next_record()? {
                Some(r) => {
                    let looked = self.look(st, &r);
                    if self.limit == 0 {
                        self.prefetcher.retire(&looked.claimed);
                        return Ok(Some(r));
                    }
                    self.enqueue(r, looked);
                }
                None => self.end = Some(None),
            }
        }
        while self.end.is_none() && (self.queue.is_empty() || self.distance() < self.limit) {
            match self.reader.next_record() {
                Ok(Some(r)) => {
                    let looked = self.look(st, &r);
                    self.enqueue(r, looked);
                }
                Ok(None) => self.end = Some(None),
                Err(e) => self.end = Some(Some(e)),
            }
        }
        let Some((r, looked)) = self.queue.pop_front() else {
            if self.max > 0 {
                let s = &st.recovery_prefetch;
                for g in [&s.wal_distance, &s.block_distance, &s.io_depth] {
                    g.store(0, Ordering::Relaxed);
                }
            }
            return match self.end.as_mut().and_then(Option::take) {
                Some(e) => Err(e),
                None => Ok(None),
            };
        };
        self.blocks -= r.record.blocks.len() as u64;
        self.asked -= u64::from(looked.asked);
        self.prefetcher.retire(&looked.claimed);
        if self.max > 0 {
            let s = &st.recovery_prefetch;
            s.wal_distance.store(self.distance(), Ordering::Relaxed);
            s.block_distance.store(self.blocks, Ordering::Relaxed);
            let depth = self.asked.max(u64::from(self.prefetcher.in_flight()));
            s.io_depth.store(depth, Ordering::Relaxed);
        }
        Ok(Some(r))
    }

    /// Has the prefetcher look at `r`, just read, and adapts the look-ahead to what it asked.
    fn look(&mut self, st: &Storage, r: &DecodedRecord) -> Looked {
        if self.pipeline > 0 {
            self.prefetcher
                .set_window(self.pipeline + self.blocks as usize);
        }
        let looked = self.prefetcher.record(st, &r.record);
        self.limit = next_distance(self.limit, self.max, looked.asked, r.end_lsn.0 - r.lsn.0);
        looked
    }

    fn enqueue(&mut self, r: DecodedRecord, looked: Looked) {
        self.blocks += r.record.blocks.len() as u64;
        self.asked += u64::from(looked.asked);
        self.queue.push_back((r, looked));
    }

    /// Bytes of WAL decoded ahead: from the first queued record's start to the last's end.
    fn distance(&self) -> u64 {
        match (self.queue.front(), self.queue.back()) {
            (Some((a, _)), Some((b, _))) => b.end_lsn.0.saturating_sub(a.lsn.0),
            _ => 0,
        }
    }

    /// End of the last valid record the reader read: where redo ends once every record has
    /// been returned.
    pub fn end_lsn(&self) -> walnut_common::Lsn {
        self.reader.end_lsn()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_look_ahead_doubles_on_prefetches_and_shrinks_by_records_that_need_none() {
        let max = 512 << 10;
        let mut d = 0;
        d = next_distance(d, max, 1, 100);
        assert_eq!(d, MIN_DISTANCE);
        for _ in 0..10 {
            d = next_distance(d, max, 2, 100);
        }
        assert_eq!(d, max, "capped at wal_decode_buffer_size");
        d = next_distance(d, max, 0, 1000);
        assert_eq!(d, max - 1000);
        for _ in 0..1000 {
            d = next_distance(d, max, 0, 1000);
        }
        assert_eq!(d, 0, "one record at a time when nothing is read");
        assert_eq!(
            next_distance(0, 4096, 1, 100),
            4096,
            "a max below 16 kB holds"
        );
        assert_eq!(next_distance(0, 0, 1, 100), 0, "prefetch off");
    }
}
