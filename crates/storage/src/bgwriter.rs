//! The background writer: every `bgwriter_delay` it
//! 1. cleans the buffers the next evictions will reach, so that a session rarely has to write
//!    a page before it can read another (PostgreSQL's `bgwriter.c` and `BgBufferSync`); and
//! 2. sweeps the page cache of the relation files written since the last checkpoint, asking
//!    the kernel to write their dirty pages back a chunk (`checkpoint_flush_after`) at a time
//!    ([`Sweep`]), no faster than one pass per [`SWEEP_PERIOD`]. This part is walnut's own: pages written by sessions' evictions would
//!    otherwise sit dirty in the page cache until the checkpoint's fsync pushes them all into
//!    the device queue at once, ahead of the WAL's flushes. The sweep spends a share of the
//!    device that follows the WAL's flush latency: it grows while commits' flushes are fast and
//!    halves when they slow down (additive increase, multiplicative decrease).

use crate::checkpointer::{WalPressure, HIGH_PRESSURE};
use crate::smgr::{Relation, Smgr};
use crate::stats::{set_backend_type, BackendType};
use crate::writeback::Writeback;
use crate::Storage;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use walnut_common::{BlockNumber, RelFileId};

/// The largest share of its round the sweep may spend waiting for write-back.
pub const MAX_SHARE: f64 = 0.5;
/// The smallest: the sweep never stops altogether, or dirt would pile up for the fsync.
pub const MIN_SHARE: f64 = 0.02;
/// The share added per round while the WAL's flushes are fast.
pub const SHARE_STEP: f64 = 0.02;
/// The shortest time a sweep takes through a file: a page written back waits at least about
/// this long for its next write-back, so that the page cache absorbs the changes a hot page
/// gets meanwhile into one device write (the kernel's own `dirty_expire_centisecs` is 30 s).
pub const SWEEP_PERIOD: Duration = Duration::from_secs(30);

/// A sweep over the dirty relation files' page cache: where it is in each file.
#[derive(Debug, Default)]
pub struct Sweep {
    cursor: HashMap<RelFileId, u32>,
    next_file: usize,
}

impl Sweep {
    /// Asks the kernel to write back chunks of `chunk` pages of the files written since the
    /// last checkpoint, one after another, each file from where the last round stopped, until
    /// the write-backs have taken `budget`, or every file has been swept once, or each file
    /// has advanced by `round / SWEEP_PERIOD` of its length. Returns the time spent waiting for
    /// write-back.
    ///
    /// # Panics
    /// PANICs if a write-back fails (see [`Smgr::flush_range`]).
    pub fn round(
        &mut self,
        smgr: &Smgr,
        chunk: u32,
        budget: Duration,
        round: Duration,
    ) -> Duration {
        let files = smgr.dirty_files();
        let mut busy = Duration::ZERO;
        if files.is_empty() || chunk == 0 || smgr.direct_io() {
            return busy;
        }
        self.cursor
            .retain(|id, _| files.iter().any(|r| r.id == *id));
        for k in 0..files.len() {
            let rel = &files[(self.next_file + k) % files.len()];
            let nblocks = rel.nblocks.load(Ordering::Acquire) as f64;
            let limit = (nblocks * round.as_secs_f64() / SWEEP_PERIOD.as_secs_f64()).ceil() as u32;
            busy += self.sweep_file(
                smgr,
                rel,
                chunk,
                budget.saturating_sub(busy),
                limit.max(chunk),
            );
            if busy >= budget {
                self.next_file = (self.next_file + k) % files.len();
                return busy;
            }
        }
        self.next_file = 0;
        busy
    }

    /// Sweeps `rel` from its cursor to its end or until `budget` is spent; wraps to the start
    /// when it reaches the end.
    fn sweep_file(
        &mut self,
        smgr: &Smgr,
        rel: &Arc<Relation>,
        chunk: u32,
        budget: Duration,
        limit: u32,
    ) -> Duration {
        let nblocks = rel.nblocks.load(Ordering::Acquire);
        let pos = self.cursor.entry(rel.id).or_insert(0);
        let stop = pos.saturating_add(limit);
        let mut busy = Duration::ZERO;
        while *pos < nblocks && *pos < stop && busy < budget {
            let n = chunk.min(nblocks - *pos);
            let t = Instant::now();
            smgr.flush_range(rel, BlockNumber(*pos), n);
            busy += t.elapsed();
            *pos += n;
        }
        if *pos >= nblocks {
            *pos = 0;
        }
        busy
    }
}

/// The background writer's thread.
pub(crate) fn bgwriter(weak: std::sync::Weak<Storage>) {
    set_backend_type(BackendType::BackgroundWriter);
    let mut sweep = Sweep::default();
    let mut pressure = WalPressure::default();
    let mut wb = Writeback::new(0);
    let mut share = MIN_SHARE;
    let (mut smoothed_alloc, mut last_alloc) = (0.0f64, 0u64);
    loop {
        let Some(st) = weak.upgrade() else { return };
        if st.stopping.load(Ordering::Acquire) {
            return;
        }
        let s = st.write_settings();
        let round = Duration::from_millis(s.bgwriter_delay_ms.max(10));
        let started = Instant::now();
        // 1. Clean ahead of the clock hand: the recent allocations per round, smoothed (up at
        //    once, down slowly, as BgBufferSync), times the multiplier.
        let stats = &st.smgr.stats;
        let alloc = stats.buffers_alloc.load(Ordering::Relaxed);
        let recent = alloc.saturating_sub(last_alloc) as f64;
        last_alloc = alloc;
        smoothed_alloc = if recent > smoothed_alloc {
            recent
        } else {
            smoothed_alloc + (recent - smoothed_alloc) / 16.0
        };
        let upcoming = (smoothed_alloc * s.bgwriter_lru_multiplier).ceil() as usize;
        if s.bgwriter_lru_maxpages > 0 && upcoming > 0 {
            wb.set_limit(s.bgwriter_flush_after);
            let smgr = st.smgr.clone();
            match st.pool.clean_ahead(
                st.pool.len(),
                upcoming,
                s.bgwriter_lru_maxpages,
                &mut |tag| wb.add(&smgr, tag),
            ) {
                Ok((written, hit_max)) => {
                    stats
                        .bg_buffers_clean
                        .fetch_add(written as u64, Ordering::Relaxed);
                    if hit_max {
                        stats.bg_maxwritten_clean.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Err(e) => tracing::error!("background writer: {e}"),
            }
        }
        // 2. Sweep the page cache within the share of the device the WAL leaves.
        if let Some(wal) = st.wal.get() {
            let p = pressure.sample(wal.flush_latency_us(), Instant::now());
            share = if p < HIGH_PRESSURE {
                (share + SHARE_STEP).min(MAX_SHARE)
            } else {
                (share / 2.0).max(MIN_SHARE)
            };
        }
        sweep.round(
            &st.smgr,
            s.checkpoint_flush_after as u32,
            round.mul_f64(share),
            round,
        );
        drop(st);
        std::thread::sleep(round.saturating_sub(started.elapsed()).max(round / 4));
    }
}
