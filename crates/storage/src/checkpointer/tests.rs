//! The pacing of a checkpoint on a simulated device: a FIFO queue that completes one request
//! per millisecond (1000 IOPS), shared by a WAL that keeps one flush (two requests: the write
//! and the cache flush) in flight at all times, as a busy group commit does, and by the
//! checkpoint's page writes (one request each, sent to the queue as the pacer lets them go).
//! Simulated time only: nothing here reads the clock.

use super::*;
use std::collections::VecDeque;

const TICK: Duration = Duration::from_micros(100);
const SERVICE: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, PartialEq)]
enum Req {
    Wal { last: bool },
    Page,
}

struct Outcome {
    /// When the last page write was sent, as a fraction of `checkpoint_timeout`.
    finished_at: f64,
    /// The slowest WAL flush, from its first request's arrival to its last one's completion.
    worst_flush: Duration,
    /// WAL flushes completed per second while the checkpoint ran.
    flushes_per_s: f64,
}

/// Runs a checkpoint of `pages` pages with `pacer` on the simulated device.
fn simulate(pacer: Pacer, pages: usize, wal_bytes_per_s: u64) -> Outcome {
    let base = Instant::now();
    let mut now = Duration::ZERO;
    let mut queue: VecDeque<(Req, Duration)> = VecDeque::new();
    let mut busy_until = Duration::ZERO;
    let (mut flush_started, mut in_flight) = (Duration::ZERO, false);
    let (mut ewma_us, mut worst, mut flushes) = (0.0f64, Duration::ZERO, 0u64);
    let mut pressure = WalPressure::default();
    let (mut written, mut ckpt_wakes) = (0usize, Duration::ZERO);
    let mut finished = None;
    while finished.is_none() || now < pacer.timeout {
        // The WAL: a new flush as soon as the last one completed.
        if !in_flight {
            queue.push_back((Req::Wal { last: false }, now));
            queue.push_back((Req::Wal { last: true }, now));
            flush_started = now;
            in_flight = true;
        }
        // The device: one request per SERVICE, first come first served.
        if now >= busy_until {
            if let Some((req, _)) = queue.pop_front() {
                busy_until = now + SERVICE;
                if req == (Req::Wal { last: true }) {
                    let took = busy_until - flush_started;
                    worst = worst.max(took);
                    ewma_us = if ewma_us == 0.0 {
                        took.as_micros() as f64
                    } else {
                        0.8 * ewma_us + 0.2 * took.as_micros() as f64
                    };
                    if finished.is_none() {
                        flushes += 1;
                    }
                    in_flight = false;
                }
            }
        }
        // The checkpointer.
        while finished.is_none() && now >= ckpt_wakes {
            let wal = wal_bytes_per_s * now.as_millis() as u64 / 1000;
            let p = pressure.sample(ewma_us as u64, base + now);
            match pacer.next(written, pages, now, wal, p) {
                Pace::Write => {
                    queue.push_back((Req::Page, now));
                    written += 1;
                    ckpt_wakes = now + Duration::from_micros(20);
                    if written == pages {
                        finished = Some(now);
                    }
                }
                Pace::Sleep(d) => ckpt_wakes = now + d,
            }
        }
        now += TICK;
    }
    let end = finished.expect("the checkpoint finished");
    Outcome {
        finished_at: end.as_secs_f64() / pacer.timeout.as_secs_f64(),
        worst_flush: worst,
        flushes_per_s: flushes as f64 / end.as_secs_f64(),
    }
}

fn pacer(immediate: bool) -> Pacer {
    Pacer {
        target: 0.9,
        timeout: Duration::from_secs(30),
        wal_per_cycle: 1 << 30,
        immediate,
    }
}

#[test]
fn a_spread_checkpoint_ends_near_its_target_and_leaves_the_wal_its_share() {
    // 9,000 pages over 27 s is a third of the device; the WAL keeps the rest.
    let o = simulate(pacer(false), 9_000, 0);
    assert!(
        (0.85..=0.92).contains(&o.finished_at),
        "ended at {:.3} of the interval",
        o.finished_at
    );
    assert!(
        o.worst_flush < Duration::from_millis(20),
        "a WAL flush waited {:?}",
        o.worst_flush
    );
    // Two requests a flush: the WAL's share of 1000 requests/s less the checkpoint's 333.
    assert!(
        o.flushes_per_s > 0.9 * (1000.0 - 333.0) / 2.0,
        "{:.0} flushes/s",
        o.flushes_per_s
    );
}

#[test]
fn an_immediate_checkpoint_takes_the_device_from_the_wal() {
    // The same checkpoint unpaced: the harness sees the stall the pacing prevents.
    let o = simulate(pacer(true), 9_000, 0);
    assert!(o.finished_at < 0.1);
    assert!(
        o.worst_flush > Duration::from_secs(1),
        "{:?}",
        o.worst_flush
    );
}

#[test]
fn a_checkpoint_keeps_up_with_the_wal_schedule() {
    // WAL arrives fast enough to reach the cycle's size in a third of the interval: the
    // writes follow the WAL, not the clock, and end by the target's share of that third.
    let wal_per_s = (1u64 << 30) / 10;
    let o = simulate(pacer(false), 3_000, wal_per_s);
    assert!(
        o.finished_at <= 0.34 * 0.9 + 0.02,
        "ended at {:.3} of the interval",
        o.finished_at
    );
}

#[test]
fn pressure_is_latency_over_the_recent_lowest() {
    let t = Instant::now();
    let mut p = WalPressure::default();
    assert_eq!(p.sample(0, t), 1.0);
    assert_eq!(p.sample(2000, t), 1.0);
    assert_eq!(p.sample(1000, t + Duration::from_secs(1)), 1.0);
    assert!((p.sample(3000, t + Duration::from_secs(1)) - 3.0).abs() < 1e-9);
    // The baseline creeps up by 1 % a second.
    let later = p.sample(3000, t + Duration::from_secs(101));
    assert!((later - 3.0 / 1.01f64.powi(100)).abs() < 1e-6, "{later}");
}

#[test]
fn replication_keeps_wal_for_slots_within_max_slot_wal_keep_size_and_for_wal_keep_size() {
    const SEG: u64 = walnut_wal::WAL_SEGMENT_SIZE;
    let at = |seg: u64| Lsn(seg * SEG + 100);
    // Nothing else: the redo point's segment.
    assert_eq!(keep_from_segment(at(10), at(12), None, None, 0, None), 10);
    // A slot behind the redo point keeps its segment; one ahead changes nothing.
    assert_eq!(
        keep_from_segment(at(10), at(12), Some(at(4)), None, 0, None),
        4
    );
    assert_eq!(
        keep_from_segment(at(10), at(12), Some(at(11)), None, 0, None),
        10
    );
    // ... but not more than max_slot_wal_keep_size behind the insert position.
    assert_eq!(
        keep_from_segment(at(10), at(12), Some(at(4)), None, 0, Some(3 * SEG)),
        9
    );
    assert_eq!(
        keep_from_segment(at(10), at(12), Some(at(4)), None, 0, Some(0)),
        10
    );
    // wal_keep_size: whole segments behind the insert position, never below segment 0.
    assert_eq!(
        keep_from_segment(at(10), at(12), None, None, 5 * SEG, None),
        7
    );
    assert_eq!(
        keep_from_segment(at(10), at(12), None, None, 5 * SEG - 1, None),
        8
    );
    assert_eq!(
        keep_from_segment(at(1), at(2), None, None, 50 * SEG, None),
        0
    );
    assert_eq!(
        keep_from_segment(at(10), at(12), Some(at(2)), None, 5 * SEG, None),
        2
    );
}
