//! The background writer: every `bgwriter_delay` it
//! 1. cleans the buffers the next evictions will reach, so that a session rarely has to write
//!    a page before it can read another (PostgreSQL's `bgwriter.c` and `BgBufferSync`); and
//! 2. writes back the pages sessions evicted into the page cache ([`PendingWriteback`], the
//!    queue `backend_wrote` fills), oldest first, sorted and combined, within a share of its
//!    round that follows the WAL's flush latency: it grows while commits' flushes are fast and
//!    halves when they slow down (additive increase, multiplicative decrease). This part is
//!    walnut's own: evicted pages would otherwise sit dirty in the page cache until the
//!    kernel's timer or the checkpoint's fsync pushes them into the device queue in bulk, ahead
//!    of the WAL's flushes.

use crate::checkpointer::{WalPressure, HIGH_PRESSURE};
use crate::smgr::Smgr;
use crate::stats::{set_backend_type, BackendType};
use crate::writeback::{write_back, PendingWriteback, Writeback};
use crate::Storage;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The largest share of its round the write-back of evictions may take.
pub const MAX_SHARE: f64 = 0.5;
/// The smallest.
pub const MIN_SHARE: f64 = 0.02;
/// The share added per round while the WAL's flushes are fast.
pub const SHARE_STEP: f64 = 0.02;

/// One round's write-back of the sessions' evictions: chunks of `chunk` pages, oldest first,
/// while the time spent waiting for write-back stays under `budget`. Returns the pages taken
/// from the queue. A `chunk` of 0 (`bgwriter_flush_after = 0`) leaves the queue alone.
///
/// # Panics
/// PANICs if a write-back fails (see [`Smgr::flush_range`]).
pub fn write_back_evictions(
    smgr: &Smgr,
    queue: &PendingWriteback,
    chunk: usize,
    budget: Duration,
) -> usize {
    let started = Instant::now();
    let mut taken = 0;
    while chunk > 0 && started.elapsed() < budget {
        let mut batch = queue.take_oldest(chunk);
        if batch.is_empty() {
            break;
        }
        taken += batch.len();
        write_back(smgr, &mut batch);
    }
    taken
}

/// The background writer's thread.
pub(crate) fn bgwriter(weak: std::sync::Weak<Storage>) {
    set_backend_type(BackendType::BackgroundWriter);
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
        // 2. Write back the sessions' evictions within the share of the device the WAL
        //    leaves.
        if let Some(wal) = st.wal.get() {
            let p = pressure.sample(wal.flush_latency_us(), Instant::now());
            share = if p < HIGH_PRESSURE {
                (share + SHARE_STEP).min(MAX_SHARE)
            } else {
                (share / 2.0).max(MIN_SHARE)
            };
        }
        write_back_evictions(
            &st.smgr,
            &st.smgr.pending_writeback,
            s.bgwriter_flush_after,
            round.mul_f64(share),
        );
        drop(st);
        std::thread::sleep(round.saturating_sub(started.elapsed()).max(round / 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bufpool::BufTag;
    use std::sync::Arc;
    use walnut_common::{BlockNumber, RelFileId};

    fn queue_of(n: u32) -> PendingWriteback {
        let q = PendingWriteback::default();
        for b in 0..n {
            q.push(BufTag {
                rel: RelFileId(7),
                block: BlockNumber(b),
            });
        }
        q
    }

    #[test]
    fn a_round_writes_back_oldest_first_within_its_budget() {
        // The relation is not open, so the write-backs themselves do nothing.
        let smgr = Smgr::new(Arc::new(walnut_io::RealVfs), "/nonexistent".into());
        let q = queue_of(1000);
        // No budget: nothing.
        assert_eq!(write_back_evictions(&smgr, &q, 64, Duration::ZERO), 0);
        assert_eq!(q.len(), 1000);
        // A budget: chunks, oldest first, until the queue is empty.
        assert_eq!(
            write_back_evictions(&smgr, &q, 64, Duration::from_secs(60)),
            1000
        );
        assert!(q.is_empty());
        // bgwriter_flush_after = 0: the queue is left alone.
        let q = queue_of(10);
        assert_eq!(
            write_back_evictions(&smgr, &q, 0, Duration::from_secs(60)),
            0
        );
        assert_eq!(q.len(), 10);
    }
}
